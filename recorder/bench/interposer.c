/* Floors under any LD_PRELOAD recorder, for lock_overhead.sh to time beside foresight's.
 *
 * A library that interposes pthread_mutex_lock and pthread_mutex_unlock and forwards each call
 * to glibc's. Built three ways:
 *   (plain)          forwards, records nothing: what interposing alone costs.
 *   -DTRYLOCK_FIRST  the real trylock first, the real lock only if it failed: the shape
 *                    foresight's runtime uses, so that a lock taken without waiting is one event.
 *   -DRECORD_RAW     forwards, and appends each call to a thread-local buffer as 16 raw bytes
 *                    (lock address, return address, Lamport key) with the key ordered through a
 *                    per-lock clock (a hashed table, one cache line per entry), then discards
 *                    the buffer when it is full. It is the least a recorder that orders its
 *                    events can do per call: no ids, no reentrancy guard, nothing written to a
 *                    file. A real recorder does more than this, so it cannot cost less. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

static int (*real_lock)(pthread_mutex_t *);
static int (*real_trylock)(pthread_mutex_t *);
static int (*real_unlock)(pthread_mutex_t *);

__attribute__((constructor)) static void resolve(void) {
    real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    real_trylock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_trylock");
    real_unlock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_unlock");
}

#ifdef RECORD_RAW
#define WORDS (1 << 13)
#define CLOCKS (1 << 13)
struct thread_log {
    uint64_t *next, *end;
    uint64_t clock;
    uint64_t words[WORDS];
};
static __thread struct thread_log log_ __attribute__((tls_model("initial-exec")));
/* One 64-byte line per clock, so that threads with locks of their own share no line. */
static uint64_t clocks[CLOCKS * 8];
volatile uint64_t discarded;

static inline uint64_t *clock_of(pthread_mutex_t *m) {
    return &clocks[(((uintptr_t)m >> 6) & (CLOCKS - 1)) * 8];
}

__attribute__((noinline)) static void discard(void) {
    discarded += log_.next ? (uint64_t)(log_.next - log_.words) : 0;
    log_.next = log_.words;
    log_.end = log_.words + WORDS;
}

static inline void append(pthread_mutex_t *m, void *ra, uint64_t key) {
    if (__builtin_expect(log_.next == 0 || log_.next + 2 > log_.end, 0))
        discard();
    log_.next[0] = (uintptr_t)m ^ (key << 48);
    log_.next[1] = (uintptr_t)ra ^ ((key >> 16) << 48);
    log_.next += 2;
}
#endif

int pthread_mutex_lock(pthread_mutex_t *m) {
#ifdef TRYLOCK_FIRST
    if (real_trylock(m) == 0)
        return 0;
#endif
    int r = real_lock(m);
#ifdef RECORD_RAW
    uint64_t *c = clock_of(m);
    uint64_t key = (log_.clock > *c ? log_.clock : *c) + 1;
    log_.clock = key;
    append(m, __builtin_return_address(0), key);
#endif
    return r;
}

int pthread_mutex_unlock(pthread_mutex_t *m) {
#ifdef RECORD_RAW
    uint64_t key = ++log_.clock;
    *clock_of(m) = key;
    append(m, __builtin_return_address(0), key);
#endif
    return real_unlock(m);
}
