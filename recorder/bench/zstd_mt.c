/* zstd's multithreaded compressor on generated compressible data: the memory-access-heavy
 * real program of real_programs.sh. The main thread hands the input to a compression context
 * with WORKERS worker threads (zstd's own pool: its jobs, their mutexes and condition
 * variables, and the workers' reads of the shared input and writes of their own outputs).
 * Built against zstd's single-file zstd.c (multithreaded), which real_programs.sh fetches.
 * Usage: zstd_mt [MIB] [WORKERS] [LEVEL] (defaults 32, 2, 3). Prints the input's and the
 * output's sizes and a checksum of the output (the same for every build and run). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZSTD_STATIC_LINKING_ONLY
#include "zstd.h"

/* Text-like input: words from a small vocabulary, picked by a fixed linear congruential
 * generator, in lines of varying length; zstd shrinks it about 4x. */
static void generate(unsigned char *buf, size_t size) {
    static const char *const words[] = {
        "the",     "race",   "lock",    "thread", "memory", "order",  "acquire", "release",
        "happens", "before", "shadow",  "epoch",  "vector", "clock",  "trace",   "event",
        "mutex",   "signal", "barrier", "atomic", "fence",  "load",   "store",   "write",
        "read",    "site",   "frame",   "stack",  "window", "chunk",  "header",  "table",
    };
    uint64_t x = 0x9e3779b97f4a7c15u;
    size_t at = 0;
    unsigned on_line = 0;
    while (at < size) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        const char *w = words[(x >> 33) % 32];
        size_t n = strlen(w);
        for (size_t i = 0; i < n && at < size; i++)
            buf[at++] = (unsigned char)w[i];
        if (at < size)
            buf[at++] = ++on_line > 6 + (x >> 60) ? (on_line = 0, '\n') : ' ';
        /* A number now and then, so that the data is not only the vocabulary. */
        if ((x >> 20) % 16 == 0)
            at += (size_t)snprintf((char *)buf + at, size - at, "%u ", (unsigned)(x >> 40) % 10007);
    }
}

static void check(size_t r, const char *what) {
    if (ZSTD_isError(r)) {
        fprintf(stderr, "zstd_mt: %s: %s\n", what, ZSTD_getErrorName(r));
        exit(1);
    }
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 32;
    int workers = argc > 2 ? atoi(argv[2]) : 2;
    int level = argc > 3 ? atoi(argv[3]) : 3;
    size_t size = mib << 20;
    unsigned char *in = malloc(size + 16);
    size_t bound = ZSTD_compressBound(size);
    unsigned char *out = malloc(bound);
    if (!in || !out)
        return 1;
    generate(in, size);

    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    if (!cctx)
        return 1;
    check(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level), "level");
    check(ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, workers), "workers");
    check(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1), "checksum");
    size_t written = ZSTD_compress2(cctx, out, bound, in, size);
    check(written, "compress");
    ZSTD_freeCCtx(cctx);

    /* FNV-1a of the output: zstd's multithreaded output does not depend on the scheduling. */
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < written; i++)
        h = (h ^ out[i]) * 0x100000001b3u;
    printf("in %zu out %zu fnv %016llx\n", size, written, (unsigned long long)h);
    free(in);
    free(out);
    return 0;
}
