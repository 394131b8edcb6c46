/* A stand-in for the foresight runtime, for the `foresight record` tests: it keeps the runtime's
 * file contract (FORESIGHT_OUTPUT opened with O_CREAT|O_EXCL; PATH.<pid>, then PATH.<pid>.<n>,
 * when it is taken) and copies a prepared trace (FAKE_RT_TRACE) there. It logs the environment
 * it saw to FAKE_RT_LOG. It defines what `foresight record` looks for to tell the runtime from
 * another library: the ThreadSanitizer-ABI table and an interposed pthread_mutex_lock. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const void *__foresight_tsan_runtime_v1[16];

int pthread_mutex_lock(pthread_mutex_t *m) {
    static int (*real)(pthread_mutex_t *);
    if (!real) real = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    return real(m);
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v ? v : "";
}

static int open_output(const char *out) {
    char path[4096];
    int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST)
        return fd;
    snprintf(path, sizeof path, "%s.%d", out, (int)getpid());
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    for (int n = 1; fd < 0 && errno == EEXIST && n < 100; n++) {
        snprintf(path, sizeof path, "%s.%d.%d", out, (int)getpid(), n);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    return fd;
}

__attribute__((constructor)) static void fake_rt_init(void) {
    const char *log = getenv("FAKE_RT_LOG");
    if (log) {
        FILE *f = fopen(log, "a");
        if (f) {
            fprintf(f, "OUTPUT=%s\nDEPTH=%s\nNOFOLLOW=%s\nPRELOAD=%s\n", env("FORESIGHT_OUTPUT"),
                    env("FORESIGHT_STACK_DEPTH"), env("FORESIGHT_NO_FOLLOW"), env("LD_PRELOAD"));
            fclose(f);
        }
    }
    const char *src = getenv("FAKE_RT_TRACE");
    const char *out = getenv("FORESIGHT_OUTPUT");
    if (!src || !out || !*out)
        return;
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return;
    int fd = open_output(out);
    if (fd >= 0) {
        char buf[65536];
        ssize_t n;
        while ((n = read(in, buf, sizeof buf)) > 0)
            if (write(fd, buf, (size_t)n) != n)
                break;
        close(fd);
    }
    close(in);
}
