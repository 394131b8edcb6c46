/* 2 threads x N nested lock pairs (lock a; lock b; unlock b; unlock a).
 * Usage: lock_overhead N shared|private|wrapped
 *   shared:  both threads use the same two mutexes (contended)
 *   private: each thread has its own two mutexes (uncontended)
 *   wrapped: private, but every lock and unlock goes through a function of the program's
 *            (`lk_enter`/`lk_leave`, out of line and not a tail call), like a C library's own
 *            lock wrappers: recorded with FORESIGHT_WRAPPERS='lk_*', every call is unwound to
 *            its caller */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 128-byte aligned: each thread's pair has cache lines of its own (and the adjacent-line
 * prefetcher's pair of them), so that "private" is uncontended in fact, not only in name. */
struct pair { pthread_mutex_t a, b; long n; long count; } __attribute__((aligned(128)));
static struct pair shared = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, 0, 0};
static struct pair priv[2] = {{PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, 0, 0},
                              {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, 0, 0}};

__attribute__((noinline)) static int lk_enter(pthread_mutex_t *m) {
    int r = pthread_mutex_lock(m);
    if (r != 0) abort();
    return r;
}

__attribute__((noinline)) static int lk_leave(pthread_mutex_t *m) {
    int r = pthread_mutex_unlock(m);
    if (r != 0) abort();
    return r;
}

static void *wrapped_worker(void *arg) {
    struct pair *p = arg;
    for (long i = 0; i < p->n; i++) {
        lk_enter(&p->a);
        lk_enter(&p->b);
        p->count++;
        lk_leave(&p->b);
        lk_leave(&p->a);
    }
    return NULL;
}

static void *worker(void *arg) {
    struct pair *p = arg;
    for (long i = 0; i < p->n; i++) {
        pthread_mutex_lock(&p->a);
        pthread_mutex_lock(&p->b);
        p->count++;
        pthread_mutex_unlock(&p->b);
        pthread_mutex_unlock(&p->a);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int wrapped = argc > 2 && strcmp(argv[2], "wrapped") == 0;
    int private_locks = wrapped || (argc > 2 && strcmp(argv[2], "private") == 0);
    pthread_t t[2];
    shared.n = priv[0].n = priv[1].n = n;
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, wrapped ? wrapped_worker : worker,
                       private_locks ? &priv[i] : &shared);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    printf("%ld\n", private_locks ? priv[0].count + priv[1].count : shared.count);
    return 0;
}
