/* A lock-heavy program that runs for a given time: T threads take nested pairs of 16 mutexes
 * (always the lower index first, so it never deadlocks) as fast as they can, for SECS seconds.
 * Usage: flight_bound SECS [THREADS] (default 4 threads). Prints the pairs taken. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LOCKS 16
static pthread_mutex_t m[LOCKS];
static volatile int stop;

static void *run(void *arg) {
    unsigned x = (unsigned)(unsigned long)arg * 2654435761u + 1;
    long n = 0;
    while (!stop) {
        x = x * 1103515245u + 12345u;
        int a = (x >> 8) % LOCKS, b = (x >> 16) % LOCKS;
        if (a == b) b = (b + 1) % LOCKS;
        if (a > b) { int t = a; a = b; b = t; }
        pthread_mutex_lock(&m[a]);
        pthread_mutex_lock(&m[b]);
        n++;
        pthread_mutex_unlock(&m[b]);
        pthread_mutex_unlock(&m[a]);
    }
    return (void *)n;
}

int main(int argc, char **argv) {
    int secs = argc > 1 ? atoi(argv[1]) : 2;
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    pthread_t t[64];
    if (threads < 1 || threads > 64) return 2;
    for (int i = 0; i < LOCKS; i++) pthread_mutex_init(&m[i], NULL);
    for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, (void *)i);
    struct timespec d = {secs, 0};
    nanosleep(&d, NULL);
    stop = 1;
    long total = 0;
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (long)r;
    }
    printf("%ld pairs\n", total);
    return 0;
}
