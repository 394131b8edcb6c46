/* Static data the data-naming tests name: a global array, a file-level static, nested struct
 * members, an array of structs with an array member, a two-dimensional array, a function's
 * static, and (in data_lib.c) a shared library's own variables. It prints the run-time address
 * of `main`, of the library's `lib_here` and of each element the tests look up, then a heap
 * address. */
#include <stdio.h>
#include <stdlib.h>

int counters[8]; /* LINE_COUNTERS */
static long total; /* LINE_TOTAL */

struct limits {
    int min;
    int max;
};
struct config {
    char tag;
    struct limits limits;
    double ratio;
};
struct config cfg; /* LINE_CFG */

struct entry {
    int id;
    char name[8];
};
static struct entry table[4]; /* LINE_TABLE */
int grid[2][3];

static int *hits_slot(void) {
    static int hits; /* LINE_HITS */
    return &hits;
}

int *lib_slot(int i);
void *lib_base_probe(void);

int main(void) {
    void *heap = malloc(16);
    printf("%p %p %p %p %p %p %p %p %p %p %p\n", (void *)main, lib_base_probe(),
           (void *)&counters[3], (void *)&total, (void *)&cfg.limits.max,
           (void *)&table[2].name[5], (void *)&grid[1][2], (void *)hits_slot(),
           (void *)table, (void *)lib_slot(2), heap);
    free(heap);
    return 0;
}
