/* The random-order lock benchmark of compress.sh: THREADS threads each take, N times, two
 * locks picked at random among 64 (in address order, so that nothing deadlocks) and release
 * them, at one of 8 call sites picked at random: lock events whose objects and sites change
 * at every step, the hard case for compression.
 * Usage: random_locks [N per thread] [THREADS] (defaults 250000, 4). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define LOCKS 64
static pthread_mutex_t locks[LOCKS];
static long n = 250000;
static long counter[LOCKS];

#define SITE(k)                                                                                   \
    case k:                                                                                       \
        pthread_mutex_lock(&locks[a]);                                                            \
        pthread_mutex_lock(&locks[b]);                                                            \
        counter[a]++;                                                                             \
        pthread_mutex_unlock(&locks[b]);                                                          \
        pthread_mutex_unlock(&locks[a]);                                                          \
        break;

static void *work(void *arg) {
    unsigned long x = 0x9E3779B97F4A7C15ul * ((unsigned long)arg + 1);
    for (long i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned a = x % LOCKS, b = (x >> 8) % LOCKS;
        if (a == b)
            b = (b + 1) % LOCKS;
        if (a > b) {
            unsigned t = a;
            a = b;
            b = t;
        }
        switch ((x >> 16) % 8) {
            SITE(0) SITE(1) SITE(2) SITE(3) SITE(4) SITE(5) SITE(6) SITE(7)
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int threads = 4;
    if (argc > 1)
        n = atol(argv[1]);
    if (argc > 2)
        threads = atoi(argv[2]);
    pthread_t t[64];
    if (threads < 1 || threads > 64)
        return 2;
    for (int i = 0; i < LOCKS; i++)
        pthread_mutex_init(&locks[i], 0);
    for (long i = 0; i < threads; i++)
        pthread_create(&t[i], 0, work, (void *)i);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], 0);
    long sum = 0;
    for (int i = 0; i < LOCKS; i++)
        sum += counter[i];
    printf("%ld\n", sum);
    return 0;
}
