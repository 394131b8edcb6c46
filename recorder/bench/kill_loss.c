/* For bench/kill_loss.sh: a thread that records steadily (a lock pair every millisecond), one
 * that records a burst and then waits for ever, and main waiting in a join; it prints
 * "started" and runs until it is killed. The steady thread counts its pairs in the file named
 * by its argument (a shared mapping: the count survives SIGKILL in the page cache), so that
 * the events lost can be counted, not only the time. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t never = PTHREAD_MUTEX_INITIALIZER;
static volatile long *pairs;

static void pair(void) {
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
}

static void *steady(void *arg) {
    (void)arg;
    struct timespec ms = {0, 1000 * 1000};
    for (;;) {
        pair();
        (*pairs)++;
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

int main(int argc, char **argv) {
    static long unused;
    pairs = &unused;
    if (argc > 1) {
        int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || ftruncate(fd, sizeof(long)) != 0) return 1;
        void *p = mmap(NULL, sizeof(long), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) return 1;
        pairs = p;
    }
    pthread_t a, b;
    pthread_mutex_lock(&never);
    pthread_create(&a, NULL, steady, NULL);
    pthread_create(&b, NULL, burst_then_wait, NULL);
    printf("started\n");
    fflush(stdout);
    pthread_join(a, NULL);
    return 0;
}
