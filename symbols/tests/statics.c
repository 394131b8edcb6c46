/* Static locks the symbolisation must name by their variables: single-letter file-local
 * statics (whose names a demangler reads as type codes: `a` is `signed char`, `b` is `bool`),
 * locks inside a static array of structs and a two-dimensional array, and function-local
 * statics (whose symbols are `m.0`, `m.1`). It prints their run-time addresses. */
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER; /* LINE_A */
static pthread_mutex_t b = PTHREAD_MUTEX_INITIALIZER; /* LINE_B */

struct account {
    long balance;
    pthread_mutex_t lock;
};
static struct account accounts[3]; /* LINE_ACCOUNTS */
pthread_mutex_t grid[2][3];

static void *first(void) {
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER; /* LINE_FIRST_M */
    return &m;
}

static void *second(void) {
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    return &m;
}

int main(void) {
    printf("%p %p %p %p %p %p %p\n", (void *)main, (void *)&a, (void *)&b,
           (void *)&accounts[1].lock, (void *)&grid[1][2], first(), second());
    return 0;
}
