/* The shared library of data.c: a global of its own, reached through a function so that the
 * executable holds no copy of it (a copy relocation would move it into the executable). */
struct slot {
    long stamp;
    int values[4];
};
struct slot lib_slots[3]; /* LINE_LIB_SLOTS */

int *lib_slot(int i) {
    return &lib_slots[1].values[i];
}

/* The address of a function of the library's own: a global one's address, taken in a non-PIE
 * executable, would be the executable's PLT entry. */
static void lib_here(void) {}

void *lib_base_probe(void) {
    return (void *)lib_here;
}
