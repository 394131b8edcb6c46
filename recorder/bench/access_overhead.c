/* A memory-access-heavy program for the access-recording benchmark (access_overhead.sh): two
 * threads; each round does about 100 loads and stores on a private heap array and reads a
 * shared read-only table; every 16th round updates a shared histogram under a mutex.
 * Usage: access_overhead ROUNDS. Prints a checksum (the same for every build). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define PRIVATE 64
#define TABLE 256

static int table[TABLE];
static long histogram[64];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long rounds;

static void *worker(void *arg) {
    long seed = (long)arg;
    int *mine = calloc(PRIVATE, sizeof *mine);
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < 50; i++) {
            int j = (i + (int)(r & 3)) % PRIVATE;
            mine[j] = mine[j] * 3 + table[(i * 3 + r + seed) % TABLE];
        }
        if (r % 16 == 15) {
            pthread_mutex_lock(&lock);
            histogram[mine[r % PRIVATE] & 63]++;
            pthread_mutex_unlock(&lock);
        }
    }
    long sum = 0;
    for (int i = 0; i < PRIVATE; i++)
        sum += mine[i];
    free(mine);
    return (void *)sum;
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 100000;
    for (int i = 0; i < TABLE; i++)
        table[i] = i * 2654435761u >> 7;
    pthread_t t[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    long sum = 0;
    for (int i = 0; i < 2; i++) {
        void *s;
        pthread_join(t[i], &s);
        sum += (long)s;
    }
    long h = 0;
    for (int i = 0; i < 64; i++)
        h += histogram[i];
    printf("checksum %ld histogram %ld\n", sum, h);
    return 0;
}
