/* tj_impl.c — the library's implementation, compiled once for the whole test
 * suite (build.sh: build/o2/tj_impl.o at -O2, build/asan/tj_impl.o under
 * the sanitizers) and linked by every test program, with the wrappers of
 * tj_internal.h that reach its statics for the tests.
 *
 * The allocation hooks (TJ_MALLOC/TJ_REALLOC/TJ_FREE, tinyjax.h) call
 * through pointers, malloc/realloc/free until a test sets its own with
 * tjt_set_alloc (tj_internal.h): test_oom fails the n-th allocation,
 * test_tree_stream counts the peak, test_mpi fails the large ones. Every
 * allocation of the library goes through them, as it would with the hooks
 * compiled into the test itself.
 *
 * tests/tj_impl_cuda.cu includes this file with TJT_IMPL_CUDA defined:
 * the same, with tinyjax_cuda.cu's library (./build.sh gpu-suite). */
#include <stdlib.h>
static void *(*tjt_hook_malloc)(size_t) = malloc;
static void *(*tjt_hook_realloc)(void *, size_t) = realloc;
static void (*tjt_hook_free)(void *) = free;
#define TJ_MALLOC(n) tjt_hook_malloc(n)
#define TJ_REALLOC(p, n) tjt_hook_realloc(p, n)
#define TJ_FREE(p) tjt_hook_free(p)

#ifdef TJT_IMPL_CUDA
#include "../tinyjax_cuda.cu" /* the implementation, with the CUDA backend */
#else
#define TINYJAX_IMPLEMENTATION
#include "../tinyjax.h"
#endif
#define TJT_INTERNAL_IMPLEMENTATION
#include "tj_internal.h"

void tjt_set_alloc(void *(*m)(size_t), void *(*r)(void *, size_t), void (*f)(void *)) {
    tjt_hook_malloc = m;
    tjt_hook_realloc = r;
    tjt_hook_free = f;
}
