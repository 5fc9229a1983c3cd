/* tj_impl.c — the library's implementation, compiled once for the whole test
 * suite (build.sh: build/o2/tj_impl.o at -O2, build/asan/tj_impl.o under
 * the sanitizers) and linked by every test program that does not
 * configure it itself, with the wrappers of tj_internal.h that reach its
 * statics for the tests. */
#define TINYJAX_IMPLEMENTATION
#include "../tinyjax.h"
#define TJT_INTERNAL_IMPLEMENTATION
#include "tj_internal.h"
