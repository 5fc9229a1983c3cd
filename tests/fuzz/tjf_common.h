/* Shared by the fuzz targets in tests/fuzz/ (see README.md there): the
   library, gpt2_io.h and tests/tj_internal.h (the parsers' wrappers), each
   with its implementation once per program, and scratch files for parsers
   that read from a path. A program that links the implementations instead
   (tests/test_fuzz_smoke.c: tests/tj_impl.c, tests/gpt2_io_impl.c) defines
   TINYJAX_IMPLEMENTATION_DONE, GPT2_IO_IMPLEMENTATION_DONE and
   TJT_INTERNAL_IMPLEMENTATION_DONE before including a target: the requests
   below are then skipped. */
#ifndef TJF_COMMON_H
#define TJF_COMMON_H
#define _POSIX_C_SOURCE 200809L
#define TINYJAX_IMPLEMENTATION
#include "../../tinyjax.h"
#define GPT2_IO_IMPLEMENTATION
#include "../../demos/gpt2_io.h"
#define TJT_INTERNAL_IMPLEMENTATION
#include "../tj_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* a property the parser promised does not hold: a crash for the fuzzer */
#define TJF_ASSERT(cond, ...)                                                        \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "tjf: %s:%d: property failed: ", __FILE__, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                                            \
            fprintf(stderr, "\n");                                                   \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* path of scratch file k of this process (in TMPDIR or /tmp) */
static const char *tjf_path(int k) {
    static char buf[8][256];
    const char *dir = getenv("TMPDIR");
    snprintf(buf[k & 7], sizeof buf[0], "%s/tjf_%ld_%d", dir && *dir ? dir : "/tmp", (long)getpid(), k);
    return buf[k & 7];
}
/* write n bytes to scratch file k; returns its path */
static const char *tjf_file(int k, const void *d, size_t n) {
    const char *p = tjf_path(k);
    FILE *f = fopen(p, "wb");
    if (f) {
        if (n) fwrite(d, 1, n, f);
        fclose(f);
    }
    return p;
}
#endif
