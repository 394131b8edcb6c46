/* foresight.h: lock annotations for the foresight recorder.
 *
 * Tell foresight's lock-order analysis what the code means:
 *
 *   foresight_lock_class(&acct->lock, "account");   // name the lock's class
 *   foresight_lock_subclass(&second->lock, 1);      // nesting level within its class
 *   foresight_lock_rank(&db_lock, 10);              // acquire in increasing rank only
 *
 * A subclass separates instances of one class that the code nests by a stated rule (lock both
 * accounts, lower id first: the first at subclass 0, the second at subclass 1), so the
 * analysis does not report the class's self-nesting. Subclass 0 is the class itself. The
 * subclass applies to the lock object from the annotation on (declare it before the lock is
 * taken).
 *
 * A rank is a discipline checked on every acquisition: taking a lock of rank <= the highest
 * rank held by the thread is a `rank-violation` finding. Locks without a rank are not checked.
 *
 * Annotate a lock after its pthread_*_init (or, for a statically initialised lock, anywhere
 * before or after its first use; an annotated lock the recorder has not seen yet is described
 * as a mutex first used at the annotation).
 *
 * Without the recorder (the program runs normally, or is linked without any foresight
 * library) every call does nothing: the functions look the runtime's symbols up once with
 * dlsym(RTLD_DEFAULT, ...) and skip the call when they are absent. Build with -ldl on glibc
 * older than 2.34. Thread-safe: the lookup is idempotent.
 */
#ifndef FORESIGHT_H
#define FORESIGHT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* RTLD_DEFAULT */
#endif
#include <dlfcn.h>

/* RTLD_DEFAULT is a GNU extension: hidden when <features.h> was included before this header
 * without _GNU_SOURCE. It is the null handle on glibc and musl. */
#ifdef RTLD_DEFAULT
#define FORESIGHT__RTLD_DEFAULT RTLD_DEFAULT
#else
#define FORESIGHT__RTLD_DEFAULT ((void *)0)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Resolved lazily; (void *)1 marks "looked up, absent". Racing first calls both look the
 * symbol up and store the same value. */
#define FORESIGHT__ABSENT ((void *)1)

static inline void *foresight__symbol(void **cache, const char *name) {
    void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (f == 0) {
        f = dlsym(FORESIGHT__RTLD_DEFAULT, name);
        if (f == 0)
            f = FORESIGHT__ABSENT;
        __atomic_store_n(cache, f, __ATOMIC_RELEASE);
    }
    return f == FORESIGHT__ABSENT ? 0 : f;
}

/* always_inline: the runtime records the return address of its entry point as the
 * annotation's site, which must be the caller's code, not this header. */
__attribute__((always_inline, unused)) static inline void
foresight_lock_class(void *lock, const char *name) {
    static void *cache;
    void (*f)(void *, const char *) =
        __extension__(void (*)(void *, const char *))foresight__symbol(&cache, "__foresight_annotate_lock_class");
    if (f)
        f(lock, name);
}

__attribute__((always_inline, unused)) static inline void
foresight_lock_subclass(void *lock, unsigned subclass) {
    static void *cache;
    void (*f)(void *, unsigned) =
        __extension__(void (*)(void *, unsigned))foresight__symbol(&cache, "__foresight_annotate_lock_subclass");
    if (f)
        f(lock, subclass);
}

__attribute__((always_inline, unused)) static inline void
foresight_lock_rank(void *lock, unsigned rank) {
    static void *cache;
    void (*f)(void *, unsigned) =
        __extension__(void (*)(void *, unsigned))foresight__symbol(&cache, "__foresight_annotate_lock_rank");
    if (f)
        f(lock, rank);
}

#ifdef __cplusplus
}
#endif
#endif /* FORESIGHT_H */
