/* SQLite driven by 4 threads: the lock-heavy workload of the compression benchmark
 * (compress.sh). Each thread has its own in-memory database on a serialized (fully mutexed)
 * library and inserts, then queries, rows: SQLite takes its connection, memory-allocator and
 * page-cache mutexes around every step, millions of lock events a second.
 * Usage: sqlite_threads [ROWS per thread] (default 20000). Prints the rows it counted. */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

static long rows = 20000;

static void *work(void *arg) {
    long id = (long)arg, total = 0;
    sqlite3 *db;
    sqlite3_stmt *ins, *sel;
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, 0))
        exit(1);
    sqlite3_exec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, n INTEGER)", 0, 0, 0);
    sqlite3_prepare_v2(db, "INSERT INTO t(v, n) VALUES (?, ?)", -1, &ins, 0);
    sqlite3_prepare_v2(db, "SELECT count(*) FROM t WHERE n % 7 = ?", -1, &sel, 0);
    sqlite3_exec(db, "BEGIN", 0, 0, 0);
    for (long i = 0; i < rows; i++) {
        char v[32];
        snprintf(v, sizeof v, "row %ld of %ld", i, id);
        sqlite3_bind_text(ins, 1, v, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(ins, 2, i * 31 + id);
        sqlite3_step(ins);
        sqlite3_reset(ins);
    }
    sqlite3_exec(db, "COMMIT", 0, 0, 0);
    for (int r = 0; r < 7; r++) {
        sqlite3_bind_int(sel, 1, r);
        if (sqlite3_step(sel) == SQLITE_ROW)
            total += sqlite3_column_int64(sel, 0);
        sqlite3_reset(sel);
    }
    sqlite3_finalize(ins);
    sqlite3_finalize(sel);
    sqlite3_close(db);
    return (void *)total;
}

int main(int argc, char **argv) {
    pthread_t t[4];
    long sum = 0;
    if (argc > 1)
        rows = atol(argv[1]);
    sqlite3_config(SQLITE_CONFIG_SERIALIZED);
    /* Before any thread, as SQLite asks of threaded programs: its lazy initialisation checks
     * a flag without a lock, a race ThreadSanitizer reports on every run. */
    sqlite3_initialize();
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], 0, work, (void *)i);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (long)r;
    }
    printf("%ld rows\n", sum);
    return 0;
}
