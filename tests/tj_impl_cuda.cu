/* tj_impl_cuda.cu — the library for `./build.sh gpu-suite`: tinyjax_cuda.cu
 * (the implementation with the CUDA backend) and the wrappers of
 * tj_internal.h, in place of tj_impl.c, so the test programs run with
 * TJ_BACKEND=cuda on GPU 0. */
#include "../tinyjax_cuda.cu"
#define TJT_INTERNAL_IMPLEMENTATION
#include "tj_internal.h"
