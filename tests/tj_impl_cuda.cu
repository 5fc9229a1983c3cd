/* tj_impl_cuda.cu — the library for `./build.sh gpu-suite`: tests/tj_impl.c
 * (the wrappers of tj_internal.h, the allocation hooks) with tinyjax_cuda.cu
 * (the implementation with the CUDA backend) in place of tinyjax.h's, so the
 * test programs run with TJ_BACKEND=cuda on GPU 0. */
#define TJT_IMPL_CUDA
#include "tj_impl.c"
