/* foresight's ThreadSanitizer-ABI stub: the functions a program compiled with
 * -fsanitize=thread calls (__tsan_read4, __tsan_atomic32_fetch_add, ...), linked into the
 * program itself instead of ThreadSanitizer's runtime.
 *
 * Every function here does the program's work where there is any (each atomic operation is
 * performed with the memory order the program asked for) and, only when the foresight runtime
 * (libforesight_rt.so, LD_PRELOADed by `foresight record`) is loaded, reports the access to it
 * through the table it exports. Without the runtime the table's weak reference is null: an
 * access costs a load and a branch (and on x86-64, once per call site, the call is patched out:
 * see "calls that need not be made"), and the program depends on no foresight library at all.
 *
 * The whole file is ONE object: `foresight config` compiles it into a one-member archive, so
 * that whichever of its symbols the linker looks for first (gcc's libtsan_preinit.o asks for
 * __tsan_init; `-u __tsan_init` asks for it too) brings all of them in. Definitions are hidden:
 * each executable or shared library gets its own copy and calls it directly, and none of them
 * exports ThreadSanitizer's names. Compiled without instrumentation, with -fPIC (it goes into
 * PIE executables and shared libraries alike).
 *
 * The table's layout is foresight's ABI between this file and recorder/src/hooks/tsan.rs: its
 * symbol name carries the version (_v1), so a program built against another layout never
 * binds to it and simply runs unrecorded. Keep the two in step.
 */
#if defined(__x86_64__) && defined(__linux__)
#define FS_PATCHES 1
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dl_iterate_phdr */
#endif
#include <link.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#endif
#include <stddef.h>
#include <stdint.h>

#define FS_API __attribute__((visibility("hidden"), noinline))
#define FS_WEAK_API __attribute__((visibility("hidden"), noinline, weak))
#define FS_PC __builtin_return_address(0)

/* flags */
#define FS_WANTS_FUNC_ENTRY 1UL

/* annotate(): what */
enum {
    FS_MUTEX_CREATE = 1,
    FS_MUTEX_DESTROY,
    FS_MUTEX_PRE_LOCK,
    FS_MUTEX_POST_LOCK,
    FS_MUTEX_PRE_UNLOCK,
    FS_MUTEX_POST_UNLOCK,
    FS_MUTEX_PRE_SIGNAL,
    FS_MUTEX_POST_SIGNAL,
    FS_MUTEX_PRE_DIVERT,
    FS_MUTEX_POST_DIVERT,
    FS_HAPPENS_AFTER,
    FS_HAPPENS_BEFORE,
    FS_IGNORE_ACCESSES_BEGIN,
    FS_IGNORE_ACCESSES_END,
    FS_IGNORE_SYNC_BEGIN,
    FS_IGNORE_SYNC_END,
};

/* atomic_end(): info = size << 8 | op << 4 | order */
enum { FS_LOAD = 0, FS_STORE = 1, FS_RMW = 2, FS_CAS = 3, FS_CAS_FAILED = 4 };

struct foresight_tsan_runtime {
    /* FS_WANTS_FUNC_ENTRY: the runtime keeps a shadow call stack (--stack-depth > 1). */
    volatile uintptr_t flags;
    /* An instrumented module started (its __tsan_init ran). */
    void (*init)(void);
    /* A plain access: info = size << 1 | is_write. */
    void (*access)(void *addr, uintptr_t info, void *pc);
    void (*func_entry)(void *pc);
    void (*func_exit)(void);
    /* Brackets one atomic operation: a non-null token means "record it", and the runtime
     * orders the operation against every other recorded one on the same address until
     * atomic_end. Nothing may run between the two but the operation itself. */
    void *(*atomic_begin)(void *addr);
    void (*atomic_end)(void *token, void *addr, uintptr_t info, void *pc);
    void (*fence)(int order, void *pc);
    uintptr_t (*annotate)(int what, void *addr, uintptr_t arg, void *pc);
};

extern struct foresight_tsan_runtime __foresight_tsan_runtime_v1 __attribute__((weak));
#define RT (&__foresight_tsan_runtime_v1)

/* --- start-up ---------------------------------------------------------------------------- */

static int fs_initialised;

FS_API void __tsan_init(void) {
    struct foresight_tsan_runtime *t = RT;
    if (t && !__atomic_exchange_n(&fs_initialised, 1, __ATOMIC_RELAXED))
        t->init();
}

/* --- calls that need not be made ------------------------------------------------------------- */

/* Without the runtime, a plain access's call does nothing, yet the call itself costs the program
 * about what its own work does (docs/perf/real_programs.md). So on x86-64 a function that has
 * nothing to report unmakes the call that reached it: when the 5 bytes before its return
 * address are a `call rel32` to itself (the compiler's call, resolved by the linker to this
 * hidden copy), it overwrites the call's opcode, once, making an instruction of the same length
 * that does nothing the program can see, and that site never calls again (docs/decisions/0024).
 * With the runtime present (`foresight record`) nothing is ever patched; FORESIGHT_NO_PATCH=1
 * turns patching off. */
#ifdef FS_PATCHES
/* Weak, like the runtime table: the stub still needs nothing to link, and without them (no C
 * library) nothing is patched. */
#pragma weak getenv
#pragma weak dl_iterate_phdr

/* Page size is 4 KiB on every x86-64 Linux. */
#define FS_PAGE 4096UL

/* This module's executable segment: only call sites inside it are patched. Set by the
 * constructor; 0 before (sites that run earlier are patched when they run again). */
static uintptr_t fs_text_start, fs_text_end;
static int fs_text_prot;
/* Set for good: turned off by the user, or the system refused a writable code page. */
static int fs_patch_off;
/* One patcher at a time; a thread (or a signal handler) that finds it taken leaves its site for
 * another time. */
static int fs_patch_lock;

static int fs_find_text(struct dl_phdr_info *info, size_t size, void *self) {
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type != PT_LOAD || (uintptr_t)self < start ||
            (uintptr_t)self >= start + ph->p_memsz)
            continue;
        /* A segment that cannot be read is not looked at. */
        if ((ph->p_flags & (PF_R | PF_X)) == (PF_R | PF_X)) {
            fs_text_prot = PROT_READ | PROT_EXEC | (ph->p_flags & PF_W ? PROT_WRITE : 0);
            fs_text_start = start;
            __atomic_store_n(&fs_text_end, start + ph->p_memsz, __ATOMIC_RELEASE);
        }
        return 1;
    }
    return 0;
}

__attribute__((constructor)) static void fs_patch_init(void) {
    const char *off = getenv ? getenv("FORESIGHT_NO_PATCH") : 0;
    if ((off && *off && !(off[0] == '0' && !off[1])) || !dl_iterate_phdr) {
        __atomic_store_n(&fs_patch_off, 1, __ATOMIC_RELAXED);
        return;
    }
    dl_iterate_phdr(fs_find_text, (void *)&fs_find_text);
}

/* mprotect, as a system call: errno is never touched, and no wrapper of the C library's (a
 * sandbox's, a tracer's) sees code pages change. Returns 0 or -errno. */
static long fs_mprotect(void *page, unsigned long len, unsigned long prot) {
    long r;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "0"((long)SYS_mprotect), "D"(page), "S"(len), "d"(prot)
                     : "rcx", "r11", "memory");
    return r;
}

/* Sites found, waiting to be patched together: the pages' protection changes twice per batch,
 * not per site (each change is a system call, and a TLB flush on every core running the
 * program: per site, they cost SQLite's start more than its own work). A batch is patched when
 * it is full, or once its sites have been called again FS_REPEATS times in all: a site in a
 * loop calls a few dozen times more, not a few thousand, while a batch waits for more sites
 * than one loop's (patching at the first repeat made batches of about 20 sites, and a pair of
 * `mprotect` calls costs hundreds of calls: docs/decisions/0024). Under fs_patch_lock. */
#define FS_BATCH 256
#define FS_REPEATS 64
static unsigned char *fs_batch[FS_BATCH];
static unsigned fs_batched;
static unsigned fs_repeats;
/* The batch's sites again, by hash (open addressing): whether a call's site is in the batch is
 * a probe or two, not a walk over up to 256 of them (2% of the instructions of an instrumented
 * SQLite's 5,000-row run under valgrind). A slot is in use when its round is the batch's: a new
 * batch empties the set by counting one more round (no memset: the stub calls no function of
 * the C library's that it does not find itself). */
#define FS_BATCH_SLOTS (2 * FS_BATCH)
static unsigned char *fs_batch_set[FS_BATCH_SLOTS];
static unsigned fs_batch_set_round[FS_BATCH_SLOTS];
static unsigned fs_round = 1;

/* Whether `at` is in the batch; adds it to the set if not (the caller adds it to the batch). */
static int fs_batch_holds(unsigned char *at) {
    _Static_assert(FS_BATCH_SLOTS == 1 << 9, "the hash gives 9 bits");
    uintptr_t h = ((uintptr_t)at * 0x9E3779B97F4A7C15u) >> (64 - 9);
    for (;;) {
        if (fs_batch_set_round[h] != fs_round) {
            fs_batch_set_round[h] = fs_round;
            fs_batch_set[h] = at;
            return 0;
        }
        if (fs_batch_set[h] == at)
            return 1;
        h = (h + 1) % FS_BATCH_SLOTS;
    }
}

/* Each call in the batch becomes `test eax, imm32` (opcode a9, the call's displacement as its
 * immediate): one byte is written, so another thread executes the old instruction or the new
 * one, never a mix, and both are 5 bytes long, so no instruction boundary moves. The test
 * changes only the flags, which no call preserves. (A 5-byte NOP, with `jmp .+5` where the call
 * straddles an aligned 8-byte word, was measured slower: docs/decisions/0024.) */
static void fs_patch_batch(void) {
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (unsigned i = 0; i < fs_batched; i++) {
        uintptr_t at = (uintptr_t)fs_batch[i];
        lo = at < lo ? at : lo;
        hi = at > hi ? at : hi;
    }
    /* The pages from the first site to the last: all in this module's executable segment. */
    void *first = (void *)(lo & ~(FS_PAGE - 1));
    unsigned long len = (hi & ~(FS_PAGE - 1)) + FS_PAGE - (lo & ~(FS_PAGE - 1));
    int writable = fs_text_prot & PROT_WRITE;
    unsigned n = fs_batched;
    fs_batched = 0;
    /* Round 0 is the slots' first value: never a batch's (a wrap would need 2^32 batches). */
    if (++fs_round == 0)
        fs_round = 1;
    /* Never remove execution: other threads may be running these pages. A refusal may have
     * come after part of the span changed: all of it is restored. */
    if (!writable && fs_mprotect(first, len, PROT_READ | PROT_WRITE | PROT_EXEC)) {
        __atomic_store_n(&fs_patch_off, 1, __ATOMIC_RELAXED);
        fs_mprotect(first, len, fs_text_prot);
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        unsigned char call = 0xe8;
        __atomic_compare_exchange_n(fs_batch[i], &call, 0xa9, 0, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED);
    }
    if (!writable && fs_mprotect(first, len, fs_text_prot))
        __atomic_store_n(&fs_patch_off, 1, __ATOMIC_RELAXED);
}

static __attribute__((noinline)) void fs_patch_locked(unsigned char *at) {
    /* Looked at before it is taken: while one thread changes the pages' protection, the others
     * keep reaching unpatched sites, and a read leaves the lock's cache line where it is. */
    if (__atomic_load_n(&fs_patch_lock, __ATOMIC_RELAXED) ||
        __atomic_exchange_n(&fs_patch_lock, 1, __ATOMIC_ACQUIRE))
        return;
    if (!__atomic_load_n(&fs_patch_off, __ATOMIC_RELAXED)) {
        if (fs_batch_holds(at))
            fs_repeats++;
        else
            fs_batch[fs_batched++] = at;
        if (fs_repeats == FS_REPEATS || fs_batched == FS_BATCH) {
            fs_repeats = 0;
            fs_patch_batch();
        }
    }
    __atomic_store_n(&fs_patch_lock, 0, __ATOMIC_RELEASE);
}

/* Called, runtime absent, by a function with nothing to do, with its return address and
 * itself. A site it cannot patch (a call through the GOT, a breakpoint on it) costs these few
 * tests on every call. */
static __attribute__((noinline)) void fs_uncall(unsigned char *ret, void *self) {
    unsigned char *at = ret - 5;
    uintptr_t end = __atomic_load_n(&fs_text_end, __ATOMIC_ACQUIRE);
    int32_t rel;
    if ((uintptr_t)at < fs_text_start || (uintptr_t)ret > end || at[0] != 0xe8)
        return;
    __builtin_memcpy(&rel, at + 1, 4);
    if (ret + rel == (unsigned char *)self)
        fs_patch_locked(at);
}
/* Patching turned off costs one more load and branch, not the call into fs_uncall. */
#define FS_UNCALL(self)                                                                         \
    do {                                                                                        \
        if (!__atomic_load_n(&fs_patch_off, __ATOMIC_RELAXED))                                  \
            fs_uncall((unsigned char *)__builtin_return_address(0), (void *)(self));            \
    } while (0)
#else
#define FS_UNCALL(self) ((void)0)
#endif

/* --- plain accesses -------------------------------------------------------------------------- */

/* Not recorded is what must cost least: a load, a test and the call's patching, once (the
 * expectation keeps the compiler from computing the call's arguments before the test). */
#define FS_ABSENT(t) __builtin_expect((t) == 0, 1)

static inline __attribute__((always_inline)) void fs_access(void *a, uintptr_t size,
                                                            uintptr_t write, void *pc) {
    struct foresight_tsan_runtime *t = RT;
    if (FS_ABSENT(t))
        return;
    t->access(a, size << 1 | write, pc);
}

/* The return address is taken only once the runtime is known to be there. */
#define FS_ACCESS(name, size, write)                                                            \
    FS_API void name(void *a) {                                                                 \
        struct foresight_tsan_runtime *t = RT;                                                  \
        if (FS_ABSENT(t)) {                                                                     \
            FS_UNCALL(name);                                                                    \
            return;                                                                             \
        }                                                                                       \
        t->access(a, (uintptr_t)(size) << 1 | (write), FS_PC);                                  \
    }                                                                                           \
    FS_API void name##_pc(void *a, void *pc) {                                                  \
        struct foresight_tsan_runtime *t = RT;                                                  \
        if (FS_ABSENT(t)) {                                                                     \
            FS_UNCALL(name##_pc);                                                               \
            return;                                                                             \
        }                                                                                       \
        t->access(a, (uintptr_t)(size) << 1 | (write), pc);                                     \
    }

#define FS_SIZES(prefix, write)                                                                 \
    FS_ACCESS(prefix##1, 1, write)                                                              \
    FS_ACCESS(prefix##2, 2, write)                                                              \
    FS_ACCESS(prefix##4, 4, write)                                                              \
    FS_ACCESS(prefix##8, 8, write)                                                              \
    FS_ACCESS(prefix##16, 16, write)

#define FS_UNALIGNED_SIZES(prefix, write)                                                       \
    FS_ACCESS(prefix##2, 2, write)                                                              \
    FS_ACCESS(prefix##4, 4, write)                                                              \
    FS_ACCESS(prefix##8, 8, write)                                                              \
    FS_ACCESS(prefix##16, 16, write)

FS_SIZES(__tsan_read, 0)
FS_SIZES(__tsan_write, 1)
FS_SIZES(__tsan_volatile_read, 0)
FS_SIZES(__tsan_volatile_write, 1)
/* A compound access (clang's x += 1) reads, then writes: both are recorded, since a race
 * predictor must know what every read read (the write alone is what ThreadSanitizer checks). */
#define FS_READ_WRITE(name, size)                                                               \
    FS_API void name(void *a) {                                                                 \
        struct foresight_tsan_runtime *t = RT;                                                  \
        if (FS_ABSENT(t)) {                                                                     \
            FS_UNCALL(name);                                                                    \
            return;                                                                             \
        }                                                                                       \
        void *pc = FS_PC;                                                                       \
        t->access(a, (uintptr_t)(size) << 1, pc);                                               \
        t->access(a, (uintptr_t)(size) << 1 | 1, pc);                                           \
    }                                                                                           \
    FS_API void name##_pc(void *a, void *pc) {                                                  \
        struct foresight_tsan_runtime *t = RT;                                                  \
        if (FS_ABSENT(t)) {                                                                     \
            FS_UNCALL(name##_pc);                                                               \
            return;                                                                             \
        }                                                                                       \
        t->access(a, (uintptr_t)(size) << 1, pc);                                               \
        t->access(a, (uintptr_t)(size) << 1 | 1, pc);                                           \
    }

FS_READ_WRITE(__tsan_read_write1, 1)
FS_READ_WRITE(__tsan_read_write2, 2)
FS_READ_WRITE(__tsan_read_write4, 4)
FS_READ_WRITE(__tsan_read_write8, 8)
FS_READ_WRITE(__tsan_read_write16, 16)
FS_UNALIGNED_SIZES(__tsan_unaligned_read, 0)
FS_UNALIGNED_SIZES(__tsan_unaligned_write, 1)
FS_UNALIGNED_SIZES(__tsan_unaligned_volatile_read, 0)
FS_UNALIGNED_SIZES(__tsan_unaligned_volatile_write, 1)
FS_READ_WRITE(__tsan_unaligned_read_write2, 2)
FS_READ_WRITE(__tsan_unaligned_read_write4, 4)
FS_READ_WRITE(__tsan_unaligned_read_write8, 8)
FS_READ_WRITE(__tsan_unaligned_read_write16, 16)

FS_API void __tsan_read_range(void *a, uintptr_t size) {
    if (size)
        fs_access(a, size, 0, FS_PC);
}
FS_API void __tsan_write_range(void *a, uintptr_t size) {
    if (size)
        fs_access(a, size, 1, FS_PC);
}
FS_API void __tsan_read_range_pc(void *a, uintptr_t size, void *pc) {
    if (size)
        fs_access(a, size, 0, pc);
}
FS_API void __tsan_write_range_pc(void *a, uintptr_t size, void *pc) {
    if (size)
        fs_access(a, size, 1, pc);
}

/* A C++ object's vtable pointer: written by constructors and destructors. As ThreadSanitizer
 * does, a store of the value already there is no write (destructors of a class hierarchy
 * rewrite it on the way down). */
FS_API void __tsan_vptr_update(void **vptr_p, void *new_val) {
    struct foresight_tsan_runtime *t = RT;
    if (FS_ABSENT(t)) {
        FS_UNCALL(__tsan_vptr_update);
        return;
    }
    if (*vptr_p != new_val)
        t->access(vptr_p, sizeof(void *) << 1 | 1, FS_PC);
}
FS_API void __tsan_vptr_read(void **vptr_p) {
    struct foresight_tsan_runtime *t = RT;
    if (FS_ABSENT(t)) {
        FS_UNCALL(__tsan_vptr_read);
        return;
    }
    t->access(vptr_p, sizeof(void *) << 1, FS_PC);
}

/* --- call stack ------------------------------------------------------------------------------ */

FS_API void __tsan_func_entry(void *pc) {
    struct foresight_tsan_runtime *t = RT;
    if (FS_ABSENT(t)) {
        FS_UNCALL(__tsan_func_entry);
        return;
    }
    if (!(t->flags & FS_WANTS_FUNC_ENTRY))
        return;
    t->func_entry(pc);
}

FS_API void __tsan_func_exit(void) {
    struct foresight_tsan_runtime *t = RT;
    if (FS_ABSENT(t)) {
        FS_UNCALL(__tsan_func_exit);
        return;
    }
    if (!(t->flags & FS_WANTS_FUNC_ENTRY))
        return;
    t->func_exit();
}

/* --- atomics --------------------------------------------------------------------------------- */

typedef char fs_a8;
typedef short fs_a16;
typedef int fs_a32;
typedef long long fs_a64;
#ifdef __SIZEOF_INT128__
typedef __int128 fs_a128;
#endif

/* The ThreadSanitizer ABI numbers memory orders as the C11 ones: relaxed 0, consume 1,
 * acquire 2, release 3, acq_rel 4, seq_cst 5 (and so do the __ATOMIC_* macros). An order an
 * operation cannot have (a release load) is performed as seq_cst, which is what a compiler
 * does with it. */
static inline int fs_order(int mo) { return mo >= 0 && mo <= 5 ? mo : 5; }

static inline int fs_load_order(int mo) {
    mo = fs_order(mo);
    return mo == 3 || mo == 4 ? 5 : mo;
}

static inline int fs_store_order(int mo) {
    mo = fs_order(mo);
    return mo == 0 || mo == 3 ? mo : 5;
}

/* A compare-exchange's failure order: never a release, never stronger than the success
 * order's load part. */
static inline int fs_failure_order(int success, int failure) {
    int f = fs_load_order(failure);
    int s = success == 3 ? 0 : success == 4 ? 2 : success;
    if (f == 1)
        f = 2;
    return f > s ? (s == 1 ? 2 : s) : f;
}

static inline uintptr_t fs_atomic_info(uintptr_t size, int op, int mo) {
    return size << 8 | (uintptr_t)op << 4 | (uintptr_t)fs_order(mo);
}

/* The bracket around every atomic operation: begin, the operation, end. */
#define FS_BEGIN(a)                                                                             \
    struct foresight_tsan_runtime *t = RT;                                                      \
    void *token = t ? t->atomic_begin((void *)(a)) : 0;
#define FS_END(a, size, op, mo)                                                                 \
    if (token)                                                                                  \
        t->atomic_end(token, (void *)(a), fs_atomic_info(size, op, mo), FS_PC);

/* An atomic load without the runtime: on x86-64 every load the orders ask for is the same `mov`
 * (a seq_cst load included), so it is done without looking at the order, and the rest is out
 * of line (else the compiler saves registers before the test). This is the one atomic that
 * SQLite's instrumented build calls often (720,000 relaxed loads in a 20,000-row run), and its
 * call cannot be patched away since it must load: 30 instructions a call before, 4 now. */
#if defined(__x86_64__)
#define FS_LOAD_ABSENT(a)                                                                       \
    if (FS_ABSENT(RT))                                                                          \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);
#define FS_LOAD_REST static __attribute__((noinline))
#else
#define FS_LOAD_ABSENT(a)
#define FS_LOAD_REST static inline __attribute__((always_inline))
#endif

#define FS_ATOMIC_INT(bits)                                                                     \
    FS_LOAD_REST fs_a##bits fs_load##bits(const volatile fs_a##bits *a, int mo, void *pc) {      \
        fs_a##bits r;                                                                           \
        FS_BEGIN(a)                                                                             \
        switch (fs_load_order(mo)) {                                                            \
        case 0: r = __atomic_load_n(a, __ATOMIC_RELAXED); break;                                \
        case 1: r = __atomic_load_n(a, __ATOMIC_CONSUME); break;                                \
        case 2: r = __atomic_load_n(a, __ATOMIC_ACQUIRE); break;                                \
        default: r = __atomic_load_n(a, __ATOMIC_SEQ_CST); break;                               \
        }                                                                                       \
        if (token)                                                                              \
            t->atomic_end(token, (void *)(a), fs_atomic_info(bits / 8, FS_LOAD, mo), pc);       \
        return r;                                                                               \
    }                                                                                           \
    FS_API fs_a##bits __tsan_atomic##bits##_load(const volatile fs_a##bits *a, int mo) {        \
        FS_LOAD_ABSENT(a)                                                                       \
        return fs_load##bits(a, mo, FS_PC);                                                     \
    }                                                                                           \
    FS_API void __tsan_atomic##bits##_store(volatile fs_a##bits *a, fs_a##bits v, int mo) {     \
        FS_BEGIN(a)                                                                             \
        switch (fs_store_order(mo)) {                                                           \
        case 0: __atomic_store_n(a, v, __ATOMIC_RELAXED); break;                                \
        case 3: __atomic_store_n(a, v, __ATOMIC_RELEASE); break;                                \
        default: __atomic_store_n(a, v, __ATOMIC_SEQ_CST); break;                               \
        }                                                                                       \
        FS_END(a, bits / 8, FS_STORE, mo)                                                       \
    }                                                                                           \
    FS_ATOMIC_RMW(bits, exchange, __atomic_exchange_n)                                          \
    FS_ATOMIC_RMW(bits, fetch_add, __atomic_fetch_add)                                          \
    FS_ATOMIC_RMW(bits, fetch_sub, __atomic_fetch_sub)                                          \
    FS_ATOMIC_RMW(bits, fetch_and, __atomic_fetch_and)                                          \
    FS_ATOMIC_RMW(bits, fetch_or, __atomic_fetch_or)                                            \
    FS_ATOMIC_RMW(bits, fetch_xor, __atomic_fetch_xor)                                          \
    FS_ATOMIC_RMW(bits, fetch_nand, __atomic_fetch_nand)                                        \
    FS_API int __tsan_atomic##bits##_compare_exchange_strong(                                   \
        volatile fs_a##bits *a, fs_a##bits *c, fs_a##bits v, int mo, int fmo) {                \
        return fs_cas##bits(a, c, v, mo, fmo, 0, FS_PC);                                        \
    }                                                                                           \
    FS_API int __tsan_atomic##bits##_compare_exchange_weak(                                     \
        volatile fs_a##bits *a, fs_a##bits *c, fs_a##bits v, int mo, int fmo) {                \
        return fs_cas##bits(a, c, v, mo, fmo, 1, FS_PC);                                        \
    }                                                                                           \
    FS_API fs_a##bits __tsan_atomic##bits##_compare_exchange_val(                               \
        volatile fs_a##bits *a, fs_a##bits c, fs_a##bits v, int mo, int fmo) {                 \
        fs_cas##bits(a, &c, v, mo, fmo, 0, FS_PC);                                              \
        return c;                                                                               \
    }

#define FS_ATOMIC_RMW(bits, name, builtin)                                                      \
    FS_API fs_a##bits __tsan_atomic##bits##_##name(volatile fs_a##bits *a, fs_a##bits v,        \
                                                   int mo) {                                    \
        fs_a##bits r;                                                                           \
        FS_BEGIN(a)                                                                             \
        switch (fs_order(mo)) {                                                                 \
        case 0: r = builtin(a, v, __ATOMIC_RELAXED); break;                                     \
        case 1: r = builtin(a, v, __ATOMIC_CONSUME); break;                                     \
        case 2: r = builtin(a, v, __ATOMIC_ACQUIRE); break;                                     \
        case 3: r = builtin(a, v, __ATOMIC_RELEASE); break;                                     \
        case 4: r = builtin(a, v, __ATOMIC_ACQ_REL); break;                                     \
        default: r = builtin(a, v, __ATOMIC_SEQ_CST); break;                                    \
        }                                                                                       \
        FS_END(a, bits / 8, FS_RMW, mo)                                                         \
        return r;                                                                               \
    }

/* One compare-exchange, shared by _strong, _weak and _val; `pc` is the program's. */
#define FS_CAS_FN(bits)                                                                         \
    static inline __attribute__((always_inline)) int fs_cas##bits(                             \
        volatile fs_a##bits *a, fs_a##bits *c, fs_a##bits v, int mo, int fmo, int weak,        \
        void *pc) {                                                                             \
        int ok = 0, s = fs_order(mo), f = fs_failure_order(s, fmo);                             \
        struct foresight_tsan_runtime *t = RT;                                                  \
        void *token = t ? t->atomic_begin((void *)a) : 0;                                       \
        FS_CAS_SWITCH(s, f, weak)                                                               \
        if (token)                                                                              \
            t->atomic_end(token, (void *)a,                                                     \
                          ok ? fs_atomic_info(bits / 8, FS_CAS, s)                              \
                             : fs_atomic_info(bits / 8, FS_CAS_FAILED, f),                      \
                          pc);                                                                  \
        return ok;                                                                              \
    }

#define FS_CAS_ONE(so, fo)                                                                      \
    ok = weak ? __atomic_compare_exchange_n(a, c, v, 1, so, fo)                                 \
              : __atomic_compare_exchange_n(a, c, v, 0, so, fo)

#define FS_CAS_SWITCH(s, f, weak)                                                               \
    switch (s * 8 + f) {                                                                        \
    case 0 * 8 + 0: FS_CAS_ONE(__ATOMIC_RELAXED, __ATOMIC_RELAXED); break;                      \
    /* consume is acquire to every compiler, and gcc rejects it beside an acquire failure */  \
    case 1 * 8 + 2: FS_CAS_ONE(__ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE); break;                      \
    case 1 * 8 + 0: FS_CAS_ONE(__ATOMIC_ACQUIRE, __ATOMIC_RELAXED); break;                      \
    case 2 * 8 + 2: FS_CAS_ONE(__ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE); break;                      \
    case 2 * 8 + 0: FS_CAS_ONE(__ATOMIC_ACQUIRE, __ATOMIC_RELAXED); break;                      \
    case 3 * 8 + 0: FS_CAS_ONE(__ATOMIC_RELEASE, __ATOMIC_RELAXED); break;                      \
    case 4 * 8 + 2: FS_CAS_ONE(__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE); break;                      \
    case 4 * 8 + 0: FS_CAS_ONE(__ATOMIC_ACQ_REL, __ATOMIC_RELAXED); break;                      \
    case 5 * 8 + 2: FS_CAS_ONE(__ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE); break;                      \
    case 5 * 8 + 0: FS_CAS_ONE(__ATOMIC_SEQ_CST, __ATOMIC_RELAXED); break;                      \
    default: FS_CAS_ONE(__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); break;                             \
    }

FS_CAS_FN(8)
FS_CAS_FN(16)
FS_CAS_FN(32)
FS_CAS_FN(64)
FS_ATOMIC_INT(8)
FS_ATOMIC_INT(16)
FS_ATOMIC_INT(32)
FS_ATOMIC_INT(64)

#ifdef __SIZEOF_INT128__
/* 16-byte atomics. On x86-64 every operation is a `lock cmpxchg16b` loop (a full barrier,
 * which satisfies any order), inlined through the target attribute rather than left to
 * libatomic, so that the program needs no library for them; libatomic uses the same
 * instruction, so both interoperate on one object. Elsewhere the compiler's own builtins. */
#if defined(__x86_64__)
#define FS_128 __attribute__((target("cx16")))
static FS_128 inline fs_a128 fs_cas128_raw(volatile fs_a128 *a, fs_a128 c, fs_a128 v) {
    return __sync_val_compare_and_swap(a, c, v);
}
static FS_128 inline fs_a128 fs_load128_raw(const volatile fs_a128 *a) {
    return __sync_val_compare_and_swap((volatile fs_a128 *)a, 0, 0);
}
#define FS_RMW128(name, NEW)                                                                    \
    FS_API FS_128 fs_a128 __tsan_atomic128_##name(volatile fs_a128 *a, fs_a128 v, int mo) {     \
        fs_a128 old, seen;                                                                      \
        FS_BEGIN(a)                                                                             \
        old = fs_load128_raw(a);                                                                \
        while ((seen = fs_cas128_raw(a, old, NEW)) != old)                                      \
            old = seen;                                                                         \
        FS_END(a, 16, FS_RMW, mo)                                                               \
        return old;                                                                             \
    }
FS_API FS_128 fs_a128 __tsan_atomic128_load(const volatile fs_a128 *a, int mo) {
    fs_a128 r;
    FS_BEGIN(a)
    r = fs_load128_raw(a);
    FS_END(a, 16, FS_LOAD, mo)
    return r;
}
FS_API FS_128 void __tsan_atomic128_store(volatile fs_a128 *a, fs_a128 v, int mo) {
    fs_a128 old, seen;
    FS_BEGIN(a)
    old = fs_load128_raw(a);
    while ((seen = fs_cas128_raw(a, old, v)) != old)
        old = seen;
    FS_END(a, 16, FS_STORE, mo)
}
static FS_128 inline int fs_cas128(volatile fs_a128 *a, fs_a128 *c, fs_a128 v, int mo, int fmo,
                                   void *pc) {
    int ok;
    fs_a128 seen;
    struct foresight_tsan_runtime *t = RT;
    void *token = t ? t->atomic_begin((void *)a) : 0;
    seen = fs_cas128_raw(a, *c, v);
    ok = seen == *c;
    *c = seen;
    if (token)
        t->atomic_end(token, (void *)a,
                      ok ? fs_atomic_info(16, FS_CAS, mo)
                         : fs_atomic_info(16, FS_CAS_FAILED, fs_failure_order(fs_order(mo), fmo)),
                      pc);
    return ok;
}
#else
#define FS_128
#define FS_RMW128(name, NEW)                                                                    \
    FS_API fs_a128 __tsan_atomic128_##name(volatile fs_a128 *a, fs_a128 v, int mo) {            \
        fs_a128 old;                                                                            \
        FS_BEGIN(a)                                                                             \
        old = __atomic_load_n(a, __ATOMIC_RELAXED);                                             \
        while (!__atomic_compare_exchange_n(a, &old, NEW, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) \
            ;                                                                                   \
        FS_END(a, 16, FS_RMW, mo)                                                               \
        return old;                                                                             \
    }
FS_API fs_a128 __tsan_atomic128_load(const volatile fs_a128 *a, int mo) {
    fs_a128 r;
    FS_BEGIN(a)
    r = __atomic_load_n(a, __ATOMIC_SEQ_CST);
    FS_END(a, 16, FS_LOAD, mo)
    return r;
}
FS_API void __tsan_atomic128_store(volatile fs_a128 *a, fs_a128 v, int mo) {
    FS_BEGIN(a)
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);
    FS_END(a, 16, FS_STORE, mo)
}
static inline int fs_cas128(volatile fs_a128 *a, fs_a128 *c, fs_a128 v, int mo, int fmo,
                            void *pc) {
    int ok;
    struct foresight_tsan_runtime *t = RT;
    void *token = t ? t->atomic_begin((void *)a) : 0;
    ok = __atomic_compare_exchange_n(a, c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    if (token)
        t->atomic_end(token, (void *)a,
                      ok ? fs_atomic_info(16, FS_CAS, mo)
                         : fs_atomic_info(16, FS_CAS_FAILED, fs_failure_order(fs_order(mo), fmo)),
                      pc);
    return ok;
}
#endif
FS_RMW128(exchange, v)
FS_RMW128(fetch_add, old + v)
FS_RMW128(fetch_sub, old - v)
FS_RMW128(fetch_and, old & v)
FS_RMW128(fetch_or, old | v)
FS_RMW128(fetch_xor, old ^ v)
FS_RMW128(fetch_nand, ~(old & v))
FS_API FS_128 int __tsan_atomic128_compare_exchange_strong(volatile fs_a128 *a, fs_a128 *c,
                                                           fs_a128 v, int mo, int fmo) {
    return fs_cas128(a, c, v, mo, fmo, FS_PC);
}
FS_API FS_128 int __tsan_atomic128_compare_exchange_weak(volatile fs_a128 *a, fs_a128 *c,
                                                         fs_a128 v, int mo, int fmo) {
    return fs_cas128(a, c, v, mo, fmo, FS_PC);
}
FS_API FS_128 fs_a128 __tsan_atomic128_compare_exchange_val(volatile fs_a128 *a, fs_a128 c,
                                                            fs_a128 v, int mo, int fmo) {
    fs_cas128(a, &c, v, mo, fmo, FS_PC);
    return c;
}
#endif

FS_API void __tsan_atomic_thread_fence(int mo) {
    struct foresight_tsan_runtime *t = RT;
    switch (fs_order(mo)) {
    case 0: break;
    case 1: __atomic_thread_fence(__ATOMIC_CONSUME); break;
    case 2: __atomic_thread_fence(__ATOMIC_ACQUIRE); break;
    case 3: __atomic_thread_fence(__ATOMIC_RELEASE); break;
    case 4: __atomic_thread_fence(__ATOMIC_ACQ_REL); break;
    default: __atomic_thread_fence(__ATOMIC_SEQ_CST); break;
    }
    if (t)
        t->fence(fs_order(mo), FS_PC);
}

/* Orders the thread against its own signal handlers only: nothing another thread sees. */
FS_API void __tsan_atomic_signal_fence(int mo) {
    (void)mo;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/* --- annotations ----------------------------------------------------------------------------- */

static inline uintptr_t fs_annotate(int what, const volatile void *addr, uintptr_t arg, void *pc) {
    struct foresight_tsan_runtime *t = RT;
    return t ? t->annotate(what, (void *)addr, arg, pc) : 0;
}

/* <sanitizer/tsan_interface.h>: custom mutexes (built on atomics or futexes, as in Abseil or
 * Folly) announce themselves, and are recorded as locks. */
FS_API void __tsan_mutex_create(void *m, unsigned flags) {
    fs_annotate(FS_MUTEX_CREATE, m, flags, FS_PC);
}
FS_API void __tsan_mutex_destroy(void *m, unsigned flags) {
    fs_annotate(FS_MUTEX_DESTROY, m, flags, FS_PC);
}
FS_API void __tsan_mutex_pre_lock(void *m, unsigned flags) {
    fs_annotate(FS_MUTEX_PRE_LOCK, m, flags, FS_PC);
}
FS_API void __tsan_mutex_post_lock(void *m, unsigned flags, int recursion) {
    (void)recursion;
    fs_annotate(FS_MUTEX_POST_LOCK, m, flags, FS_PC);
}
FS_API int __tsan_mutex_pre_unlock(void *m, unsigned flags) {
    return (int)fs_annotate(FS_MUTEX_PRE_UNLOCK, m, flags, FS_PC);
}
FS_API void __tsan_mutex_post_unlock(void *m, unsigned flags) {
    fs_annotate(FS_MUTEX_POST_UNLOCK, m, flags, FS_PC);
}
FS_API void __tsan_mutex_pre_signal(void *m, unsigned flags) {
    fs_annotate(FS_MUTEX_PRE_SIGNAL, m, flags, FS_PC);
}
FS_API void __tsan_mutex_post_signal(void *m, unsigned flags) {
    fs_annotate(FS_MUTEX_POST_SIGNAL, m, flags, FS_PC);
}
FS_API void __tsan_mutex_pre_divert(void *m, unsigned flags) {
    fs_annotate(FS_MUTEX_PRE_DIVERT, m, flags, FS_PC);
}
FS_API void __tsan_mutex_post_divert(void *m, unsigned flags) {
    fs_annotate(FS_MUTEX_POST_DIVERT, m, flags, FS_PC);
}

/* Happens-before between a release and every later acquire of the same address. */
FS_API void __tsan_acquire(void *addr) { fs_annotate(FS_HAPPENS_AFTER, addr, 0, FS_PC); }
FS_API void __tsan_release(void *addr) { fs_annotate(FS_HAPPENS_BEFORE, addr, 0, FS_PC); }

FS_API void __tsan_ignore_thread_begin(void) {
    fs_annotate(FS_IGNORE_ACCESSES_BEGIN, 0, 0, FS_PC);
}
FS_API void __tsan_ignore_thread_end(void) { fs_annotate(FS_IGNORE_ACCESSES_END, 0, 0, FS_PC); }

/* Accesses to objects that are not plain memory (a library's handles): recorded as a one-byte
 * access at the object's address, with the caller's pc. Tags only name such objects in
 * ThreadSanitizer's reports: one dummy tag serves. */
FS_API void __tsan_external_read(void *addr, void *caller_pc, void *tag) {
    (void)tag;
    fs_access(addr, 1, 0, caller_pc ? caller_pc : FS_PC);
}
FS_API void __tsan_external_write(void *addr, void *caller_pc, void *tag) {
    (void)tag;
    fs_access(addr, 1, 1, caller_pc ? caller_pc : FS_PC);
}
static char fs_tag;
FS_API void *__tsan_external_register_tag(const char *object_type) {
    (void)object_type;
    return &fs_tag;
}
FS_API void __tsan_external_register_header(void *tag, const char *header) {
    (void)tag, (void)header;
}
FS_API void __tsan_external_assign_tag(void *addr, void *tag) { (void)addr, (void)tag; }

/* Fibers are not told apart: a fiber's accesses are its thread's (races between fibers of one
 * thread are not seen). Fiber handles are distinct dummies the program only passes back. */
static char fs_fibers[64];
static unsigned fs_next_fiber;
FS_API void *__tsan_get_current_fiber(void) { return &fs_fibers[0]; }
FS_API void *__tsan_create_fiber(unsigned flags) {
    (void)flags;
    return &fs_fibers[1 + __atomic_fetch_add(&fs_next_fiber, 1, __ATOMIC_RELAXED) % 63];
}
FS_API void __tsan_destroy_fiber(void *fiber) { (void)fiber; }
FS_API void __tsan_switch_to_fiber(void *fiber, unsigned flags) { (void)fiber, (void)flags; }
FS_API void __tsan_set_fiber_name(void *fiber, const char *name) { (void)fiber, (void)name; }

/* ThreadSanitizer's shadow memory: there is none to flush. */
FS_API void __tsan_flush_memory(void) {}

/* The older dynamic annotations (valgrind's dynamic_annotations.h, Abseil's
 * ABSL_ANNOTATE_*), which ThreadSanitizer's runtime also defines. Weak: a program that
 * defines them itself keeps its own. */
FS_WEAK_API void AnnotateHappensBefore(const char *f, int l, const volatile void *addr) {
    (void)f, (void)l;
    fs_annotate(FS_HAPPENS_BEFORE, addr, 0, FS_PC);
}
FS_WEAK_API void AnnotateHappensAfter(const char *f, int l, const volatile void *addr) {
    (void)f, (void)l;
    fs_annotate(FS_HAPPENS_AFTER, addr, 0, FS_PC);
}
FS_WEAK_API void AnnotateCondVarSignal(const char *f, int l, const volatile void *cv) {
    (void)f, (void)l;
    fs_annotate(FS_HAPPENS_BEFORE, cv, 0, FS_PC);
}
FS_WEAK_API void AnnotateCondVarSignalAll(const char *f, int l, const volatile void *cv) {
    (void)f, (void)l;
    fs_annotate(FS_HAPPENS_BEFORE, cv, 0, FS_PC);
}
FS_WEAK_API void AnnotateCondVarWait(const char *f, int l, const volatile void *cv,
                                     const volatile void *lock) {
    (void)f, (void)l, (void)lock;
    fs_annotate(FS_HAPPENS_AFTER, cv, 0, FS_PC);
}
/* __tsan_mutex_* flags: write_reentrant 2, read_reentrant 4, read_lock 8. */
FS_WEAK_API void AnnotateRWLockCreate(const char *f, int l, const volatile void *m) {
    (void)f, (void)l;
    fs_annotate(FS_MUTEX_CREATE, m, 4, FS_PC);
}
FS_WEAK_API void AnnotateRWLockCreateStatic(const char *f, int l, const volatile void *m) {
    (void)f, (void)l;
    fs_annotate(FS_MUTEX_CREATE, m, 4, FS_PC);
}
FS_WEAK_API void AnnotateRWLockDestroy(const char *f, int l, const volatile void *m) {
    (void)f, (void)l;
    fs_annotate(FS_MUTEX_DESTROY, m, 0, FS_PC);
}
FS_WEAK_API void AnnotateRWLockAcquired(const char *f, int l, const volatile void *m, long w) {
    (void)f, (void)l;
    /* Announced after the fact: the request and the acquisition at once. */
    fs_annotate(FS_MUTEX_PRE_LOCK, m, w ? 0 : 8, FS_PC);
    fs_annotate(FS_MUTEX_POST_LOCK, m, w ? 0 : 8, FS_PC);
}
FS_WEAK_API void AnnotateRWLockReleased(const char *f, int l, const volatile void *m, long w) {
    (void)f, (void)l;
    fs_annotate(FS_MUTEX_PRE_UNLOCK, m, w ? 0 : 8, FS_PC);
    fs_annotate(FS_MUTEX_POST_UNLOCK, m, w ? 0 : 8, FS_PC);
}
FS_WEAK_API void AnnotateIgnoreReadsBegin(const char *f, int l) {
    (void)f, (void)l;
    fs_annotate(FS_IGNORE_ACCESSES_BEGIN, 0, 0, FS_PC);
}
FS_WEAK_API void AnnotateIgnoreReadsEnd(const char *f, int l) {
    (void)f, (void)l;
    fs_annotate(FS_IGNORE_ACCESSES_END, 0, 0, FS_PC);
}
FS_WEAK_API void AnnotateIgnoreWritesBegin(const char *f, int l) {
    (void)f, (void)l;
    fs_annotate(FS_IGNORE_ACCESSES_BEGIN, 0, 0, FS_PC);
}
FS_WEAK_API void AnnotateIgnoreWritesEnd(const char *f, int l) {
    (void)f, (void)l;
    fs_annotate(FS_IGNORE_ACCESSES_END, 0, 0, FS_PC);
}
FS_WEAK_API void AnnotateIgnoreSyncBegin(const char *f, int l) {
    (void)f, (void)l;
    fs_annotate(FS_IGNORE_SYNC_BEGIN, 0, 0, FS_PC);
}
FS_WEAK_API void AnnotateIgnoreSyncEnd(const char *f, int l) {
    (void)f, (void)l;
    fs_annotate(FS_IGNORE_SYNC_END, 0, 0, FS_PC);
}
/* Nothing to record: a race declared benign is the analysis's business (suppressions), a new
 * memory region is what allocation events say, a thread's name comes from the runtime. */
FS_WEAK_API void AnnotateBenignRace(const char *f, int l, const volatile void *m, const char *d) {
    (void)f, (void)l, (void)m, (void)d;
}
FS_WEAK_API void AnnotateBenignRaceSized(const char *f, int l, const volatile void *m,
                                         uintptr_t size, const char *d) {
    (void)f, (void)l, (void)m, (void)size, (void)d;
}
FS_WEAK_API void AnnotateNewMemory(const char *f, int l, const volatile void *m, uintptr_t size) {
    (void)f, (void)l, (void)m, (void)size;
}
FS_WEAK_API void AnnotateThreadName(const char *f, int l, const char *name) {
    (void)f, (void)l, (void)name;
}
FS_WEAK_API void AnnotateFlushState(const char *f, int l) { (void)f, (void)l; }
FS_WEAK_API int RunningOnValgrind(void) { return 0; }
