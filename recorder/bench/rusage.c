/* Runs a command and writes what GNU time's `-f '%e %M %U %S'` would, at a finer grain.
 *
 * Usage: rusage OUT COMMAND [ARG...]
 *
 * Writes to OUT one line: the wall seconds, the peak resident set in KiB, and the user and
 * system CPU seconds of the command and every descendant it waited for, as wait4(2) reports
 * them. GNU time prints CPU times to a hundredth of a second, so that a run of a few tens of
 * milliseconds (SQLite's plain build on a fast machine) rounds its ratio to another build by
 * up to a half; wait4's times are microseconds (the kernel's run time, split between user and
 * system by its samples). A small C program, as GNU time is, because the peak of the forked
 * child before its exec counts too: a Python parent's would be 10 MiB. The command's
 * standard streams are its own; the exit status is the command's (128 + the signal's number
 * if a signal ended it). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double seconds(struct timeval tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: rusage OUT COMMAND [ARG...]\n");
    return 2;
  }
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "rusage: fork: %s\n", strerror(errno));
    return 2;
  }
  if (pid == 0) {
    execvp(argv[2], argv + 2);
    fprintf(stderr, "rusage: %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  int status;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      fprintf(stderr, "rusage: wait4: %s\n", strerror(errno));
      return 2;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  FILE *out = fopen(argv[1], "w");
  if (!out) {
    fprintf(stderr, "rusage: %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  double wall = (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
  fprintf(out, "%.6f %ld %.6f %.6f\n", wall, ru.ru_maxrss, seconds(ru.ru_utime),
          seconds(ru.ru_stime));
  if (fclose(out) != 0) {
    fprintf(stderr, "rusage: %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}
