/* The program the symbolisation tests compile: known call sites, an inlined call and a static
 * lock. It prints the run-time addresses the tests turn into module offsets. */
#include <pthread.h>
#include <stdio.h>

pthread_mutex_t big_lock = PTHREAD_MUTEX_INITIALIZER;
struct pair {
    pthread_mutex_t a;
    pthread_mutex_t b;
} two_locks = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};

static void *sites[4];
static int nsites;

__attribute__((noinline)) void mark(void) {
    sites[nsites++] = __builtin_return_address(0);
}

static inline __attribute__((always_inline)) void helper(void) {
    mark(); /* LINE_HELPER */
}

void *worker(void *arg) {
    pthread_mutex_lock(&big_lock);
    mark(); /* LINE_WORKER */
    pthread_mutex_unlock(&big_lock);
    helper(); /* LINE_CALL_HELPER */
    return arg;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    printf("%p %p %p %p %p\n", (void *)main, sites[0], sites[1], (void *)&big_lock,
           (void *)&two_locks.b);
    return 0;
}
