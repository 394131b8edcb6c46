/* A small threaded program for the `foresight record` tests. */
#include <pthread.h>
#include <stdio.h>

pthread_mutex_t big_lock = PTHREAD_MUTEX_INITIALIZER;
static int counter;

void *worker(void *arg) {
    for (int i = 0; i < 100; i++) {
        pthread_mutex_lock(&big_lock); /* LINE_LOCK */
        counter++;
        pthread_mutex_unlock(&big_lock);
    }
    return arg;
}

int main(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("%d\n", counter);
    return 0;
}
