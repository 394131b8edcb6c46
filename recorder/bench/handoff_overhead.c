// I/O-heavy loop for the hand-off hooks' cost: N iterations of a 1-byte write and a 1-byte
// read, either through a pipe the program made (a hand-off descriptor: both calls recorded) or
// on descriptors it did not make that way (/dev/null and /dev/zero: one table lookup each).
// Usage: handoff_overhead pipe|other [N]
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc > 2 ? atol(argv[2]) : 1000000;
    int rd, wr;
    if (argc > 1 && strcmp(argv[1], "pipe") == 0) {
        int fds[2];
        if (pipe(fds) != 0)
            return 1;
        rd = fds[0];
        wr = fds[1];
    } else {
        rd = open("/dev/zero", O_RDONLY);
        wr = open("/dev/null", O_WRONLY);
        if (rd < 0 || wr < 0)
            return 1;
    }
    char c = 'x';
    long sum = 0;
    for (long i = 0; i < n; i++) {
        if (write(wr, &c, 1) != 1 || read(rd, &c, 1) != 1)
            return 2;
        sum += c;
    }
    printf("%ld\n", sum);
    return 0;
}
