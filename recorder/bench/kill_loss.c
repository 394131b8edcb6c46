/* For bench/kill_loss.sh: a thread that records steadily (a lock pair every millisecond), one
 * that records a burst and then waits for ever, and main waiting in a join; it prints
 * "started" and runs until it is killed. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t never = PTHREAD_MUTEX_INITIALIZER;

static void pair(void) {
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
}

static void *steady(void *arg) {
    (void)arg;
    struct timespec ms = {0, 1000 * 1000};
    for (;;) {
        pair();
        nanosleep(&ms, NULL);
    }
    return NULL;
}

static void *burst_then_wait(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) pair();
    pthread_mutex_lock(&never); /* main holds it: waits for ever */
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_mutex_lock(&never);
    pthread_create(&a, NULL, steady, NULL);
    pthread_create(&b, NULL, burst_then_wait, NULL);
    printf("started\n");
    fflush(stdout);
    pthread_join(a, NULL);
    return 0;
}
