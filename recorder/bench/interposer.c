/* The floor under any LD_PRELOAD recorder: a library that interposes pthread_mutex_lock and
 * pthread_mutex_unlock and forwards each call to glibc's, recording nothing. Built twice by
 * lock_overhead.sh: plain (the lock forwarded as it is), and with -DTRYLOCK_FIRST (the real
 * trylock first, the real lock only if it failed, the shape foresight's runtime uses so that
 * a lock taken without waiting is one event). What a recorder costs beyond the first row is
 * the price of recording; the script prints both rows beside it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>

static int (*real_lock)(pthread_mutex_t *);
static int (*real_trylock)(pthread_mutex_t *);
static int (*real_unlock)(pthread_mutex_t *);

__attribute__((constructor)) static void resolve(void) {
    real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    real_trylock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_trylock");
    real_unlock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_unlock");
}

int pthread_mutex_lock(pthread_mutex_t *m) {
#ifdef TRYLOCK_FIRST
    if (real_trylock(m) == 0)
        return 0;
#endif
    return real_lock(m);
}

int pthread_mutex_unlock(pthread_mutex_t *m) { return real_unlock(m); }
