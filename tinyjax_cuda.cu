/* tinyjax_cuda.cu — the CUDA backend of tinyjax.h.                 MIT license
 *
 * This file is the translation unit that holds the library: it defines
 * TINYJAX_IMPLEMENTATION, includes tinyjax.h, and adds a tj_backend that runs
 * every node of a program on one CUDA device. Build and link:
 *
 *     nvcc -std=c++17 -O2 -I. -c tinyjax_cuda.cu -o tinyjax_cuda.o
 *     nvcc -std=c++17 -O2 -I. my_program.cu tinyjax_cuda.o -lcublas -o my_program
 *
 * (my_program includes tinyjax.h WITHOUT TINYJAX_IMPLEMENTATION). tinyjax.h
 * declares the constructor and its destructor (section [11], backends):
 *
 *     char err[256];
 *     tj_backend *gpu = tj_cuda_backend(0, err, sizeof err);
 *     if (!gpu) fprintf(stderr, "no GPU: %s\n", err);
 *     else tj_set_backend(ctx, gpu);   // arrays and runs of ctx now live on the GPU
 *
 * Arrays keep the CPU layout (row-major over their named axes, bf16 as the
 * upper 16 bits of an f32), so the planner, tj_array_read and the trees do
 * not know which backend ran. Create arrays in a context after setting its
 * backend, and free them before freeing the backend.
 *
 * The runner of tinyjax.h [11] runs scans (and so checkpoint and shard_map
 * regions), offload and fetch itself, through this backend's copies and
 * runs. Each mesh device has its own stream, cuBLAS handle and error slot,
 * so a mesh of N simulated devices shares one GPU; their collectives meet in
 * a transport on device buffers, bit-identical to the CPU backend, and with
 * tj_distributed_init and tj_nccl_transport_new (-DTJ_NCCL) they go through
 * NCCL between GPUs.
 * Random numbers and arange use each element's global index, as the CPU
 * does; scatter_add adds in the CPU's order without atomics.
 *
 * The CUDA code mirrors the CPU kernels of tinyjax.h's sections [5] (ops) and
 * [11] (run: backends, CPU backend): the same op names, the same
 * stride rules (tj__bstrides), the same row formula (tj__k_rowop), the same
 * error messages for bad indices. Math runs in float for f32 and bf16 and in
 * double for f64 and i32 (the CPU uses double throughout, so f32 results may
 * differ in the last bits; bf16 rounds to nearest even as tj_f32_to_bf16).
 * Dots go through cuBLAS.
 *
 * ------------------------------------------------------------- contents ---
 *   [11] CUDA backend: state (per mesh device) and error messages
 *   [11] CUDA backend: device helpers (dtype access, math, block reductions)
 *   [11] CUDA backend: kernels
 *   [11] CUDA backend: launchers (one per CPU kernel of [5])
 *   [11] CUDA backend: fused groups (one kernel per group, the CPU's bits)
 *   [11] CUDA backend: memory spaces, copies, sync
 *   [11] CUDA backend: collectives (launchers, the device-buffer transport)
 *   [11] CUDA backend: dispatch (the per-op table, coverage) and constructor
 */
#define TINYJAX_IMPLEMENTATION
#define TJ__WITH_CUDA /* TJ_BACKEND=cuda: every new context on GPU 0 (tj_ctx_new) */
#include "tinyjax.h"

#include <cub/device/device_radix_sort.cuh>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>

extern "C" tj_backend *tj_cuda_backend(int device, char *err, size_t errlen);
extern "C" void tj_cuda_backend_free(tj_backend *b);
extern "C" int tj_cuda_op_coverage(char *buf, size_t n, int *gaps);

// ==== [11] CUDA backend: state and error messages ==========================

#define TJC_THREADS 256        /* threads per block (a power of two)          */
#define TJC_MAXGRID (1 << 20)  /* blocks per launch; kernels loop beyond this */
#define TJC_NOERR (~0ull)      /* "no bad index seen" in the error slot       */
#define TJC_NCHECK 4096        /* index checks per device between host reads */
#define TJC_NTICKET 256        /* copy-stream tickets with a live event (> TJ__NPEND) */

/* what an index check was, to word its error at sync (tjc_check_read) */
typedef struct {
    int op, line, used;
    int64_t bound;
    const char *axis, *file;
} tjc_check;
/* One mesh device's state: its own stream, cuBLAS handle, error slot and
   scratch, so the device threads of a mesh of simulated devices on one GPU
   never share a stream or a handle (item 3 of issue 17). Made on the
   device's first use. */
typedef struct {
    int device;                /* the CUDA device                            */
    int dev;                   /* the mesh device                            */
    int sms;                   /* the device's multiprocessors (grid sizes)  */
    cudaStream_t compute;      /* every kernel, cuBLAS call and copy of it   */
    cudaStream_t copy;         /* offload, fetch, staged slices (copy_async) */
    cudaEvent_t issued;        /* the compute work so far, for the copy stream */
    cudaEvent_t ticket[TJC_NTICKET]; /* copy t lands: ticket[t % TJC_NTICKET] */
    uint64_t ntickets;         /* copies queued on `copy` so far             */
    cudaEvent_t *mark;         /* time stamps (tjc_mark); nmark used, capmark made */
    int nmark, capmark;
    cublasHandle_t blas;
    /* index checks (tjc_check_begin): slot i = {first bad position, its
       index value} on the device, read at sync; what each check was */
    unsigned long long *d_chk, *h_chk;
    unsigned long long *d_errpos; /* the slot kernels write now (d_chk + 2 i) */
    tjc_check chk[TJC_NCHECK];
    int nchk;
    void *d_csr;               /* scatter_add's sort and index lists (tjc_csr_layout), */
    size_t csr_cap;            /* bytes; grown on the compute stream, never shrunk */
    struct tjc_ftab *fused;    /* fused-group programs on the device (tjc_fused) */
    /* an error the interface could not return (a failed copy); this
       device's next sync reports it */
    char pending[512];
} tjc_state;

/* the backend: one CUDA device serving every mesh device */
typedef struct {
    tj_backend b;              /* what tj_cuda_backend returns; b.state = this */
    int device;
    cudaStream_t copy;         /* copies with dev -1 (arrays in and out)     */
    pthread_mutex_t mu;        /* making per-device states                   */
    tjc_state *per[TJ_MAXDEV];
    char pending[512];         /* an error of a call with dev -1 (free)      */
    tj_transport *coll;        /* the device-buffer transport ([11] collectives), made on first use under mu */
    unsigned long long copy_delay_ns; /* test hook: each copy_async starts this late (TJ_CUDA_COPY_DELAY_US) */
} tjc_backend;

static tjc_backend *tjc_be_of(tj_backend *b) { return (tjc_backend *)b->state; }
static tjc_state *tjc_state_of(tjc_backend *be, int dev, char *err, size_t errlen);

/* Write "cuda backend: op 'X': <what> (at file:line)" to k->err; returns 1. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int tjc_fail(tj__kern *k, const char *fmt, ...) {
    char m[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (k->err && !k->err[0])
        snprintf(k->err, TJ__MSG, "cuda backend: op '%s': %s (at %s:%d)", tj__opname(k->n->op), m, tj__base(k->n->file), k->n->line);
    return 1;
}
static int tjc_unsupported(tj__kern *k) {
    if (k->err && !k->err[0])
        snprintf(k->err, TJ__MSG, "cuda backend: op '%s' has no CUDA path (no entry in tjc_path) (at %s:%d)", tj__opname(k->n->op), tj__base(k->n->file), k->n->line);
    return 1;
}
/* check a CUDA / cuBLAS call or a launch inside a launcher */
#define TJC_CUDA(k, call)                                                                             \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) return tjc_fail((k), "%s failed: %s", #call, cudaGetErrorString(e_)); \
    } while (0)
#define TJC_BLAS(k, what, call)                                                                            \
    do {                                                                                                   \
        cublasStatus_t s_ = (call);                                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS) return tjc_fail((k), "%s failed: %s", what, cublasGetStatusString(s_)); \
    } while (0)
#define TJC_LAUNCHED(k, name)                                                                                  \
    do {                                                                                                       \
        cudaError_t e_ = cudaGetLastError();                                                                   \
        if (e_ != cudaSuccess) return tjc_fail((k), "launching kernel %s failed: %s", name, cudaGetErrorString(e_)); \
    } while (0)

/* Kernel parameters are at most 4096 bytes per launch on CUDA before 12.1
   (32764 from 12.1 on Volta and newer): each struct passed by value to a
   kernel is checked against the smaller limit where it is defined, with
   room for the launch's other parameters. */
#define TJC_PARAMS_FIT(T) static_assert(sizeof(T) + 256 <= 4096, #T " is too large for a kernel parameter (4 KB before CUDA 12.1)")
static unsigned tjc_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > TJC_MAXGRID ? TJC_MAXGRID : b);
}
static unsigned tjc_grid(int64_t n) { return (unsigned)(n < 1 ? 1 : n > TJC_MAXGRID ? TJC_MAXGRID : n); }
/* compute in double when the data needs it (f64, or i32 which float would round) */
static int tjc_wide(tj_dtype t) { return t == TJ_F64 || t == TJ_I32; }

// ==== [11] CUDA backend: device helpers (dtype access, math, block reductions)

/* element i of a buffer of dtype dt, as T (the device twin of tj__ld) */
template <typename T>
__host__ __device__ __forceinline__ T tjc_ld(const void *p, int dt, int64_t i) {
    switch (dt) {
    case TJ_F32: return (T)((const float *)p)[i];
    case TJ_BF16: return (T)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case TJ_I32: return (T)((const int32_t *)p)[i];
    default: return (T)((const double *)p)[i];
    }
}
/* the device twin of tj__st: bf16 rounds to nearest even, i32 saturates */
template <typename T>
__host__ __device__ __forceinline__ void tjc_st(void *p, int dt, int64_t i, T v) {
    switch (dt) {
    case TJ_F32: ((float *)p)[i] = (float)v; break;
    case TJ_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    case TJ_I32: {
        double d = (double)v;
        ((int32_t *)p)[i] = d >= 2147483647.0 ? INT_MAX : d <= -2147483648.0 ? INT_MIN : (int32_t)d;
        break;
    }
    default: ((double *)p)[i] = (double)v; break;
    }
}
/* copy one element between same-dtype buffers, bit for bit */
__device__ __forceinline__ void tjc_move(void *dst, int64_t di, const void *src, int64_t si, int es) {
    if (es == 2) ((uint16_t *)dst)[di] = ((const uint16_t *)src)[si];
    else if (es == 4) ((uint32_t *)dst)[di] = ((const uint32_t *)src)[si];
    else ((uint64_t *)dst)[di] = ((const uint64_t *)src)[si];
}
/* ---- element offsets without division ----
   Kernels that walk an output row-major and read operands through strides
   (broadcasts, transposed views) turn the flat index i into coordinates.
   With int64 % and / per axis and per operand that costs far more than the
   memory access: a bias add over (batch, pos, mlp) ran at an eighth of the
   H100's bandwidth. tjc_ix does it once per element for all operands, over
   axes merged wherever every operand steps through them as one (a bias's
   (batch, pos) becomes one axis of stride 0), and, when every index is
   below 2^32, divides by multiply and shift (tjc_udiv). tjc_ix_at is
   __host__ __device__: build/test_cuda checks it against plain strides on
   the host (tj_cuda_ix_host), no GPU needed. */
/* n / d for n < 2^32 by multiply and shift (Granlund and Montgomery,
   "Division by invariant integers using multiplication", 1994: l =
   ceil(log2 d), m = floor(2^32 (2^l - d) / d) + 1, n / d = (mulhi(m, n) + n)
   >> l, the sum in 64 bits) */
typedef struct {
    uint32_t d, m, l;
} tjc_udiv;
static tjc_udiv tjc_udiv_make(uint32_t d) {
    tjc_udiv r;
    r.d = d ? d : 1;
    r.l = 0;
    while ((1ull << r.l) < r.d) r.l++;
    r.m = (uint32_t)((((1ull << r.l) - r.d) << 32) / r.d + 1);
    return r;
}
__host__ __device__ __forceinline__ uint32_t tjc_udiv_q(const tjc_udiv &v, uint32_t n) {
#ifdef __CUDA_ARCH__
    uint32_t hi = __umulhi(v.m, n);
#else
    uint32_t hi = (uint32_t)(((uint64_t)v.m * n) >> 32);
#endif
    return (uint32_t)(((uint64_t)hi + n) >> v.l);
}
#define TJC_IXOPS 3 /* operands whose offsets one walk computes */
typedef struct {
    int rank, nops, small;      /* small: every flat index < 2^32           */
    int64_t dim[TJ_MAXDIM];     /* merged axes, row-major                   */
    tjc_udiv dv[TJ_MAXDIM];     /* their divisors (small walks)             */
    int64_t st[TJC_IXOPS][TJ_MAXDIM]; /* each operand's stride per merged axis */
} tjc_ix;
/* the walk over dims[rank] (n elements) of nops operands with strides
   st[j][rank]: size-1 axes dropped, an axis merged into the next (inner) one
   where every operand's stride is the inner stride times the inner size */
static void tjc_ix_make(tjc_ix *x, int rank, const int64_t *dim, int nops, const int64_t *const *st, int64_t n) {
    memset(x, 0, sizeof *x);
    x->nops = nops;
    for (int d = 0; d < rank; d++) {
        if (dim[d] == 1) continue;
        int r = x->rank, merge = r > 0; /* into the axis before, r - 1 */
        for (int j = 0; j < nops && merge; j++) merge = x->st[j][r - 1] == st[j][d] * dim[d];
        if (merge) {
            x->dim[r - 1] *= dim[d];
            for (int j = 0; j < nops; j++) x->st[j][r - 1] = st[j][d];
        } else {
            x->dim[r] = dim[d];
            for (int j = 0; j < nops; j++) x->st[j][r] = st[j][d];
            x->rank++;
        }
    }
    x->small = n <= (int64_t)UINT32_MAX;
    for (int d = 0; d < x->rank; d++) x->dv[d] = tjc_udiv_make(x->small ? (uint32_t)x->dim[d] : 1u);
}
/* the offsets of flat index i, operands 0, 1, 2 (named fields, no array:
   an array indexed by a loop variable would live in local memory, and its
   traffic doubled the time of every elementwise kernel) */
typedef struct {
    int64_t a, b, c;
} tjc_off3;
__host__ __device__ __forceinline__ tjc_off3 tjc_ix_at(const tjc_ix &x, int64_t i) {
    tjc_off3 o = {0, 0, 0};
    if (x.small) {
        uint32_t r = (uint32_t)i;
        for (int d = x.rank - 1; d >= 0; d--) {
            uint32_t q = tjc_udiv_q(x.dv[d], r);
            int64_t c = (int64_t)(r - q * x.dv[d].d);
            o.a += c * x.st[0][d];
            if (x.nops > 1) o.b += c * x.st[1][d];
            if (x.nops > 2) o.c += c * x.st[2][d];
            r = q;
        }
    } else {
        for (int d = x.rank - 1; d >= 0; d--) {
            int64_t c = i % x.dim[d];
            o.a += c * x.st[0][d];
            if (x.nops > 1) o.b += c * x.st[1][d];
            if (x.nops > 2) o.c += c * x.st[2][d];
            i /= x.dim[d];
        }
    }
    return o;
}

/* float math in float, double math in double */
__host__ __device__ __forceinline__ float tjc_exp(float x) { return expf(x); }
__host__ __device__ __forceinline__ double tjc_exp(double x) { return exp(x); }
__host__ __device__ __forceinline__ float tjc_log(float x) { return logf(x); }
__host__ __device__ __forceinline__ double tjc_log(double x) { return log(x); }
__host__ __device__ __forceinline__ float tjc_tanh(float x) { return tanhf(x); }
__host__ __device__ __forceinline__ double tjc_tanh(double x) { return tanh(x); }
__host__ __device__ __forceinline__ float tjc_sqrt(float x) { return sqrtf(x); }
__host__ __device__ __forceinline__ double tjc_sqrt(double x) { return sqrt(x); }
__host__ __device__ __forceinline__ float tjc_pow(float x, float y) { return powf(x, y); }
__host__ __device__ __forceinline__ double tjc_pow(double x, double y) { return pow(x, y); }

/* The unary and binary elementwise ops, expanded from the header's formula
   tables (TJ__UNARY_OPS, TJ__BINARY_OPS): an op added there gets its CUDA
   kernel here with no edit. The formulas are the CPU's, evaluated with the
   same promotions (double constants), on T = float for f32/bf16 and double
   for f64/i32. Every op of the tables has a case; anything else is NaN. */
__host__ __device__ __forceinline__ double tjc_gelu_d(double a, double t) { return 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * TJ__GELU_C * (1.0 + 3.0 * 0.044715 * a * a); }
#define TJ__EXP(x) tjc_exp(x)
#define TJ__TANH(x) tjc_tanh(x)
#define tj__gelu_d(a, t) tjc_gelu_d(a, t)
#define TJC_UNARY_CASE(op, nm, expr, ...) \
    case TJ__OP_##op: return (T)(expr);
#define TJC_BINARY_CASE(op, nm, expr) \
    case TJ__OP_##op: return (T)(expr);
template <typename T>
__host__ __device__ __forceinline__ T tjc_unary(int op, T a, T s) {
    (void)s;
    switch (op) { TJ__UNARY_OPS(TJC_UNARY_CASE) }
    return (T)NAN;
}
template <typename T>
__host__ __device__ __forceinline__ T tjc_binary(int op, T a, T b) {
    switch (op) { TJ__BINARY_OPS(TJC_BINARY_CASE) }
    return (T)NAN;
}
#undef TJ__EXP
#undef TJ__TANH
#undef tj__gelu_d
#undef TJC_UNARY_CASE
#undef TJC_BINARY_CASE
/* i32 add, sub, mul, div, neg as XLA's s32 ops, and an exact i32 sum
   wrapped: the header's TJ__I32_MATH (tj__i32_op, tj__i32_wrap), here for
   the device */
TJ__I32_MATH(__host__ __device__ __forceinline__, tjc_)
/* the max of tj__k_reduce: NaN wins */
template <typename T>
__device__ __forceinline__ T tjc_maxnan(T acc, T v) { return (v > acc || v != v) ? v : acc; }

/* Shared-memory tree reduction over the block (blockDim.x a power of two,
   sh holds blockDim.x values). Every thread gets the result. */
template <typename T>
__device__ T tjc_block_reduce(T v, T *sh, int ismax) {
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = ismax ? tjc_maxnan(sh[t], sh[t + s]) : sh[t] + sh[t + s];
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads(); /* sh may be reused right away */
    return r;
}

/* the counter-based bits of tj__k_random (same constants, same values) */
__device__ __forceinline__ uint64_t tjc_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ double tjc_u01(uint64_t key, uint64_t i) {
    return (double)(tjc_mix(tjc_mix(i + 0x9e3779b97f4a7c15ull) ^ key) >> 11) * (1.0 / 9007199254740992.0);
}

// ==== [11] CUDA backend: kernels ===========================================
/* Kernels take small structs by value (dims and strides, up to TJ_MAXDIM)
   and loop grid-stride, so any size runs with a bounded grid. */

/* elementwise: up to 3 operands broadcast by strides (tj__bstrides) */
typedef struct {
    int nin, allcontig;
    int64_t n;                  /* output elements                         */
    const void *in[3];
    int dt[3];
    int contig[3];              /* operand laid out exactly as the output  */
    tjc_ix ix;                  /* the operands' offsets (tj__bstrides)    */
} tjc_ew;
TJC_PARAMS_FIT(tjc_ew);

/* One thread handles TJC_EW_U elements a grid stride apart (each access
   still coalesced across the warp), loading all of them before it computes
   and stores any: one element per thread left each thread a single load in
   flight, and a contiguous bf16 add ran at a quarter of the H100's
   bandwidth, bound by load latency per wave of blocks, not by bytes. */
#define TJC_EW_U 4
/* #pragma unroll in code compiled for the host too (where gcc would warn) */
#ifdef __CUDA_ARCH__
#define TJC_UNROLL _Pragma("unroll")
#else
#define TJC_UNROLL
#endif
template <typename T>
__host__ __device__ __forceinline__ T tjc_ew_val(int op, T s, int odt, T v0, T v1, T v2) {
    if (op == TJ__OP_SELECT) return v0 != (T)0 ? v1 : v2;
    if (odt == TJ_I32 && tjc_i32_arith(op)) return (T)tjc_i32_op(op, (double)v0, op == TJ__OP_POWS ? (double)s : (double)v1); /* (pows: s the exponent) */
    if (op >= TJ__OP_ADD && op <= TJ__OP_NE) return tjc_binary<T>(op, v0, v1);
    return tjc_unary<T>(op, v0, s);
}
/* thread t of stride threads (__host__ __device__: tj_cuda_ew_host runs it
   thread by thread on the host, so build/test_cuda checks without a GPU
   that the threads cover every element once) */
template <typename T>
__host__ __device__ __forceinline__ void tjc_ew_thread(const tjc_ew &e, int op, T s, void *out, int odt, int64_t t, int64_t stride) {
    for (int64_t i0 = t; i0 < e.n; i0 += TJC_EW_U * stride) {
        T v0[TJC_EW_U], v1[TJC_EW_U], v2[TJC_EW_U];
        TJC_UNROLL
        for (int u = 0; u < TJC_EW_U; u++) {
            const int64_t i = i0 + u * stride;
            v0[u] = v1[u] = v2[u] = (T)0;
            if (i < e.n) {
                tjc_off3 o = {i, i, i};
                if (!e.allcontig) o = tjc_ix_at(e.ix, i);
                v0[u] = tjc_ld<T>(e.in[0], e.dt[0], e.contig[0] ? i : o.a);
                if (e.nin > 1) v1[u] = tjc_ld<T>(e.in[1], e.dt[1], e.contig[1] ? i : o.b);
                if (e.nin > 2) v2[u] = tjc_ld<T>(e.in[2], e.dt[2], e.contig[2] ? i : o.c);
            }
        }
        TJC_UNROLL
        for (int u = 0; u < TJC_EW_U; u++) {
            const int64_t i = i0 + u * stride;
            if (i < e.n) tjc_st<T>(out, odt, i, tjc_ew_val<T>(op, s, odt, v0[u], v1[u], v2[u]));
        }
    }
}
template <typename T>
__global__ void tjc_k_elementwise(tjc_ew e, int op, T s, void *out, int odt) {
    tjc_ew_thread<T>(e, op, s, out, odt, blockIdx.x * (int64_t)blockDim.x + threadIdx.x, (int64_t)gridDim.x * blockDim.x);
}

/* strided copy of a region (tj__copy_region / tj__k_copy) */
typedef struct {
    int rank, sdt, ddt, es;
    int64_t n, sbase, dbase;
    int64_t dim[TJ_MAXDIM], sst[TJ_MAXDIM], dst[TJ_MAXDIM];
} tjc_cp;
TJC_PARAMS_FIT(tjc_cp);

/* (TJC_EW_U elements per thread, as tjc_k_elementwise: the reads first;
   the walk x has operands 0 and 1: c.sst and c.dst; same dtypes move bits,
   others convert through double; thread t of stride, __host__ __device__
   for tj_cuda_copy_host) */
__host__ __device__ __forceinline__ void tjc_copy_thread(const tjc_cp &c, const tjc_ix &x, const void *src, void *dst, int64_t t, int64_t stride) {
    for (int64_t i0 = t; i0 < c.n; i0 += TJC_EW_U * stride) {
        uint64_t b[TJC_EW_U];
        double v[TJC_EW_U];
        int64_t dof[TJC_EW_U];
        TJC_UNROLL
        for (int u = 0; u < TJC_EW_U; u++) {
            const int64_t i = i0 + u * stride;
            b[u] = 0;
            v[u] = 0;
            dof[u] = -1;
            if (i < c.n) {
                tjc_off3 o = tjc_ix_at(x, i);
                const int64_t so = c.sbase + o.a;
                dof[u] = c.dbase + o.b;
                if (c.sdt != c.ddt) v[u] = tjc_ld<double>(src, c.sdt, so);
                else if (c.es == 2) b[u] = ((const uint16_t *)src)[so];
                else if (c.es == 4) b[u] = ((const uint32_t *)src)[so];
                else b[u] = ((const uint64_t *)src)[so];
            }
        }
        TJC_UNROLL
        for (int u = 0; u < TJC_EW_U; u++) {
            if (dof[u] < 0) continue;
            if (c.sdt != c.ddt) tjc_st<double>(dst, c.ddt, dof[u], v[u]);
            else if (c.es == 2) ((uint16_t *)dst)[dof[u]] = (uint16_t)b[u];
            else if (c.es == 4) ((uint32_t *)dst)[dof[u]] = (uint32_t)b[u];
            else ((uint64_t *)dst)[dof[u]] = b[u];
        }
    }
}
__global__ void tjc_k_copy(tjc_cp c, tjc_ix x, const void *src, void *dst) {
    tjc_copy_thread(c, x, src, dst, blockIdx.x * (int64_t)blockDim.x + threadIdx.x, (int64_t)gridDim.x * blockDim.x);
}

/* fill, arange, uniform / normal */
__global__ void tjc_k_fill(void *out, int dt, int64_t n, double v) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) tjc_st<double>(out, dt, i, v);
}
/* The global row-major index of local element i of a device's shard (the
   device twin of tj__global_index): random numbers and arange depend on the
   element's place in the whole array, not in the shard, so every sharding
   gives the same values. */
typedef struct {
    int rank;
    int64_t ld[TJ_MAXDIM];  /* local dims                                   */
    int64_t off[TJ_MAXDIM]; /* this shard's offset along each axis          */
    int64_t gs[TJ_MAXDIM];  /* global strides                               */
} tjc_gidx;
TJC_PARAMS_FIT(tjc_gidx);
__device__ __forceinline__ int64_t tjc_global(const tjc_gidx &g, int64_t i) {
    int64_t gi = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
        gi += (i % g.ld[d] + g.off[d]) * g.gs[d];
        i /= g.ld[d];
    }
    return gi;
}
__global__ void tjc_k_arange(void *out, int dt, int64_t n, tjc_gidx g, int64_t st, int64_t dim) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        tjc_st<double>(out, dt, i, (double)((tjc_global(g, i) / st) % dim));
}
/* uniform in [0, 1): a draw that rounds up to 1 in f32 or bf16 is clamped
   to the largest value below 1, as the CPU does */
__global__ void tjc_k_random(void *out, int dt, int64_t n, tjc_gidx g, uint64_t key, const int32_t *fold, int normal) {
    if (fold) key = tjc_mix(key ^ tjc_mix((uint64_t)(uint32_t)*fold ^ 0x5851f42d4c957f2dull)); /* tj_key_fold: the _fold forms */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t gi = (uint64_t)tjc_global(g, i);
        double v;
        if (!normal) v = tjc_u01(key, gi);
        else {
            double u1 = tjc_u01(key, 2 * gi), u2 = tjc_u01(key, 2 * gi + 1);
            v = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
        }
        tjc_st<double>(out, dt, i, v);
        if (!normal && tjc_ld<double>(out, dt, i) >= 1.0) tjc_st<double>(out, dt, i, dt == TJ_BF16 ? 0.99609375 : 0.99999994039535522);
    }
}

/* the reductions of TJ__REDUCE_OPS (sum, max, min, ..) over named axes: one
   block per output element; a step and the empty reduction come from the
   table's formulas, as on the CPU (tj__fold) */
template <typename T>
__device__ __forceinline__ T tjc_fold(int op, T acc, T v) {
    switch (op) {
#define TJC_FOLD_CASE(op_, nm, name, id, fold, ...) \
    case TJ__OP_##op_: return (fold);
        TJ__REDUCE_OPS(TJC_FOLD_CASE)
#undef TJC_FOLD_CASE
    default: return acc + v;
    }
}
template <typename T>
__device__ __forceinline__ T tjc_fold_identity(int op) {
    switch (op) {
#define TJC_ID_CASE(op_, nm, name, id, ...) \
    case TJ__OP_##op_: return (T)(id);
        TJ__REDUCE_OPS(TJC_ID_CASE)
#undef TJC_ID_CASE
    default: return (T)0;
    }
}
/* tjc_block_reduce with the fold of reduction op */
template <typename T>
__device__ T tjc_block_fold(T v, T *sh, int op) {
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = tjc_fold<T>(op, sh[t], sh[t + s]);
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}
typedef struct {
    int nr, no;                 /* reduced / kept axis counts              */
    int64_t rn, on;             /* reduced / kept element counts           */
    int64_t rd[TJ_MAXDIM], rs[TJ_MAXDIM]; /* reduced dims, input strides    */
    int64_t od[TJ_MAXDIM], os[TJ_MAXDIM]; /* kept dims, input strides       */
    tjc_ix rx, ox;              /* walks of the reduced and kept axes      */
} tjc_red;
TJC_PARAMS_FIT(tjc_red);

/* a reduction's result into out[o]: an i32 sum wraps as XLA's s32 does */
template <typename T>
__device__ __forceinline__ void tjc_reduce_store(void *out, int odt, int64_t o, T acc, int op) {
    if (odt == TJ_I32 && op == TJ__OP_SUM) acc = (T)tjc_i32_wrap((double)acc);
    tjc_st<T>(out, odt, o, acc);
}
template <typename T>
__global__ void tjc_k_reduce(tjc_red r, const void *in, int idt, void *out, int odt, int op) {
    __shared__ T sh[TJC_THREADS];
    for (int64_t o = blockIdx.x; o < r.on; o += gridDim.x) {
        const int64_t ob = tjc_ix_at(r.ox, o).a;
        T acc = tjc_fold_identity<T>(op);
        for (int64_t j = threadIdx.x; j < r.rn; j += blockDim.x) {
            T v = tjc_ld<T>(in, idt, ob + tjc_ix_at(r.rx, j).a);
            acc = tjc_fold<T>(op, acc, v);
        }
        acc = tjc_block_fold(acc, sh, op);
        if (threadIdx.x == 0) tjc_reduce_store<T>(out, odt, o, acc, op);
    }
}

/* A long reduction into few outputs (a sum of a whole gradient: one
   output, millions of elements), which one block per output would do on
   one SM: P blocks per output each reduce a strided share into a partial
   (part[o * P + p]), then one block per output reduces its P partials.
   Reduced axes that are contiguous in the input (rcontig) index directly. */
template <typename T>
__global__ void tjc_k_reduce_part(tjc_red r, int rcontig, const void *in, int idt, T *part, int P, int op) {
    __shared__ T sh[TJC_THREADS];
    const int64_t o = blockIdx.y;
    const int64_t ob = tjc_ix_at(r.ox, o).a;
    T acc = tjc_fold_identity<T>(op);
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < r.rn; j += (int64_t)P * blockDim.x) {
        T v = tjc_ld<T>(in, idt, ob + (rcontig ? j : tjc_ix_at(r.rx, j).a));
        acc = tjc_fold<T>(op, acc, v);
    }
    acc = tjc_block_fold(acc, sh, op);
    if (threadIdx.x == 0) part[o * P + blockIdx.x] = acc;
}
template <typename T>
__global__ void tjc_k_reduce_final(const T *part, int P, void *out, int odt, int64_t on, int op) {
    __shared__ T sh[TJC_THREADS];
    for (int64_t o = blockIdx.x; o < on; o += gridDim.x) {
        T acc = tjc_fold_identity<T>(op);
        for (int p = threadIdx.x; p < P; p += blockDim.x) acc = tjc_fold<T>(op, acc, part[o * P + p]);
        acc = tjc_block_fold(acc, sh, op);
        if (threadIdx.x == 0) tjc_reduce_store<T>(out, odt, o, acc, op);
    }
}

/* A reduction over the outer axes of a row-major input, keeping the inner
   ones: the input is [R][K] and output c folds column c (a bias's gradient:
   the sum over batch and pos of (batch, pos, embed)). One block per output
   would read a column, one 32-byte sector per element; here a warp reads
   32 neighbouring columns of a row, coalesced. Block (32, 8), grid
   (ceil(K / 32), P): thread (x, y) folds column c over rows y, y + 8P, ...
   of its block's share; the block folds its 8 rows of partials in shared
   memory; with P > 1 the partials part[p * K + c] are folded by
   tjc_k_reduce_cols_final, one thread per column, p in order. */
#define TJC_RC_ROWS 8
template <typename T>
__global__ void __launch_bounds__(32 * TJC_RC_ROWS) tjc_k_reduce_cols(const void *in, int idt, int64_t R, int64_t K, T *part, void *out, int odt, int op) {
    __shared__ T sh[TJC_RC_ROWS][33];
    const int64_t c = blockIdx.x * 32ll + threadIdx.x;
    T acc = tjc_fold_identity<T>(op);
    if (c < K)
        for (int64_t j = blockIdx.y * (int64_t)TJC_RC_ROWS + threadIdx.y; j < R; j += (int64_t)gridDim.y * TJC_RC_ROWS)
            acc = tjc_fold<T>(op, acc, tjc_ld<T>(in, idt, j * K + c));
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < K) {
        for (int y = 1; y < TJC_RC_ROWS; y++) acc = tjc_fold<T>(op, acc, sh[y][threadIdx.x]);
        if (gridDim.y == 1) tjc_reduce_store<T>(out, odt, c, acc, op);
        else part[blockIdx.y * K + c] = acc;
    }
}
template <typename T>
__global__ void tjc_k_reduce_cols_final(const T *part, int P, int64_t K, void *out, int odt, int op) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < K; c += (int64_t)gridDim.x * blockDim.x) {
        T acc = part[c];
        for (int p = 1; p < P; p++) acc = tjc_fold<T>(op, acc, part[p * K + c]);
        tjc_reduce_store<T>(out, odt, c, acc, op);
    }
}

/* softmax, log_softmax, layer_norm along one axis: one block per row; row r
   starts at (r / st) * st * d + r % st and steps by st (tj__k_rowop) */
template <typename T>
__global__ void tjc_k_rowop(const void *in, int idt, void *out, int odt, int op, int64_t rows, int64_t d, int64_t st, T eps) {
    __shared__ T sh[TJC_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = (r / st) * st * d + r % st, j;
        if (op == TJ__OP_LAYER_NORM) {
            T sum = 0, var = 0, corr = 0, mean, mlo, rs;
            for (j = threadIdx.x; j < d; j += blockDim.x) sum += tjc_ld<T>(in, idt, base + j * st);
            mean = tjc_block_reduce(sum, sh, 0) / (T)d;
            for (j = threadIdx.x; j < d; j += blockDim.x) {
                T x = tjc_ld<T>(in, idt, base + j * st) - mean;
                var += x * x;
                corr += x;
            }
            /* the mean in two parts, mean + mlo, as the CPU's tj__row */
            var = tjc_block_reduce(var, sh, 0);
            corr = tjc_block_reduce(corr, sh, 0);
            mlo = corr / (T)d;
            rs = (T)1 / tjc_sqrt((var - corr * mlo) / (T)d + eps);
            for (j = threadIdx.x; j < d; j += blockDim.x) tjc_st<T>(out, odt, base + j * st, ((tjc_ld<T>(in, idt, base + j * st) - mean) - mlo) * rs);
        } else {
            T m = (T)(-INFINITY), s = 0;
            for (j = threadIdx.x; j < d; j += blockDim.x) m = tjc_maxnan(m, tjc_ld<T>(in, idt, base + j * st));
            m = tjc_block_reduce(m, sh, 1);
            if (m == (T)(-INFINITY)) m = 0; /* a fully masked row: all -inf */
            for (j = threadIdx.x; j < d; j += blockDim.x) s += tjc_exp(tjc_ld<T>(in, idt, base + j * st) - m);
            s = tjc_block_reduce(s, sh, 0);
            if (op == TJ__OP_SOFTMAX)
                for (j = threadIdx.x; j < d; j += blockDim.x) tjc_st<T>(out, odt, base + j * st, tjc_exp(tjc_ld<T>(in, idt, base + j * st) - m) / s);
            else {
                T ls = tjc_log(s);
                for (j = threadIdx.x; j < d; j += blockDim.x) tjc_st<T>(out, odt, base + j * st, (tjc_ld<T>(in, idt, base + j * st) - m) - ls);
            }
        }
    }
}

/* cross_entropy per row: lse(z) - z[label] over the row's first dn
   classes (tj_cross_entropy_padded's; d for all); a bad label records its
   row */
template <typename T>
__global__ void tjc_k_cross_entropy(const void *z, int zdt, const int32_t *lab, void *out, int odt, int64_t rows, int64_t d, int64_t dn, int64_t st,
                                    unsigned long long *errpos) {
    __shared__ T sh[TJC_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = (r / st) * st * d + r % st, j;
        int32_t l = lab[r];
        T m = (T)(-INFINITY), s = 0;
        if (l < 0 || l >= dn) { /* the whole block takes this branch */
            if (threadIdx.x == 0) atomicMin(errpos, (unsigned long long)r);
            continue;
        }
        for (j = threadIdx.x; j < dn; j += blockDim.x) m = tjc_maxnan(m, tjc_ld<T>(z, zdt, base + j * st));
        m = tjc_block_reduce(m, sh, 1);
        for (j = threadIdx.x; j < dn; j += blockDim.x) s += tjc_exp(tjc_ld<T>(z, zdt, base + j * st) - m);
        s = tjc_block_reduce(s, sh, 0);
        if (threadIdx.x == 0) tjc_st<T>(out, odt, r, (m - tjc_ld<T>(z, zdt, base + (int64_t)l * st)) + tjc_log(s));
    }
}

/* cross_entropy_part (g NULL) and its gradient: the vocab-parallel loss's
   block statistics (tinyjax.h [5]: max, sum of exp(z - max) with 0 for the
   shift of a block of -inf, the label's logit or 0; three per row, in
   `st`'s dtype) and its one-pass gradient g_s exp(z - max) + g_zl at the
   label, from the statistics st and their cotangent g. Labels are global,
   this block's classes start at off, and only classes below cl take part
   (tj_cross_entropy_padded's; Vg for all: the rest have a gradient of 0);
   one block per row */
template <typename T>
__global__ void tjc_k_xent_part(const void *z, int zdt, const int32_t *lab, const void *st, int sdt, const void *g, int gdt, void *out, int odt,
                                int64_t rows, int64_t d, int64_t stz, int64_t off, int64_t cl, unsigned long long *errpos) {
    __shared__ T sh[TJC_THREADS];
    const int64_t dn = cl - off < 0 ? 0 : cl - off > d ? d : cl - off; /* this block's classes that take part */
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = (r / stz) * stz * d + r % stz, j, l = lab[r];
        if (l < 0 || l >= cl) { /* the whole block takes this branch */
            if (threadIdx.x == 0) atomicMin(errpos, (unsigned long long)r);
            continue;
        }
        l -= off;
        if (!g) {
            T m = (T)(-INFINITY), s = 0, shift;
            for (j = threadIdx.x; j < dn; j += blockDim.x) m = tjc_maxnan(m, tjc_ld<T>(z, zdt, base + j * stz));
            m = tjc_block_reduce(m, sh, 1);
            shift = m == (T)(-INFINITY) ? (T)0 : m;
            for (j = threadIdx.x; j < dn; j += blockDim.x) s += tjc_exp(tjc_ld<T>(z, zdt, base + j * stz) - shift);
            s = tjc_block_reduce(s, sh, 0);
            if (threadIdx.x == 0) {
                tjc_st<T>(out, odt, 3 * r, m);
                tjc_st<T>(out, odt, 3 * r + 1, s);
                tjc_st<T>(out, odt, 3 * r + 2, l >= 0 && l < d ? tjc_ld<T>(z, zdt, base + l * stz) : (T)0);
            }
        } else {
            T m = tjc_ld<T>(st, sdt, 3 * r), gs = tjc_ld<T>(g, gdt, 3 * r + 1), gz = tjc_ld<T>(g, gdt, 3 * r + 2);
            if (m == (T)(-INFINITY)) m = 0;
            for (j = threadIdx.x; j < d; j += blockDim.x)
                tjc_st<T>(out, odt, base + j * stz, j < dn ? gs * tjc_exp(tjc_ld<T>(z, zdt, base + j * stz) - m) + (j == l ? gz : (T)0) : (T)0);
        }
    }
}

/* the row ops' gradients (tj__row): softmax_grad(y, g), layer_norm_grad(x, g),
   cross_entropy_grad(z, labels, g) over the row's first dn classes (0
   past them); one block per row */
template <typename T>
__global__ void tjc_k_row_grad(const void *x, int xdt, const int32_t *lab, const void *g, int gdt, void *out, int odt, int op, int64_t rows, int64_t d,
                               int64_t dn, int64_t st, T eps, unsigned long long *errpos) {
    __shared__ T sh[TJC_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = (r / st) * st * d + r % st, j;
        if (op == TJ__OP_CROSS_ENTROPY_GRAD) {
            int32_t l = lab[r];
            T m = (T)(-INFINITY), s = 0, gr = tjc_ld<T>(g, gdt, r);
            if (l < 0 || l >= dn) { /* the whole block takes this branch */
                if (threadIdx.x == 0) atomicMin(errpos, (unsigned long long)r);
                continue;
            }
            for (j = threadIdx.x; j < dn; j += blockDim.x) m = tjc_maxnan(m, tjc_ld<T>(x, xdt, base + j * st));
            m = tjc_block_reduce(m, sh, 1);
            if (m == (T)(-INFINITY)) m = 0;
            for (j = threadIdx.x; j < dn; j += blockDim.x) s += tjc_exp(tjc_ld<T>(x, xdt, base + j * st) - m);
            s = tjc_block_reduce(s, sh, 0);
            for (j = threadIdx.x; j < d; j += blockDim.x)
                tjc_st<T>(out, odt, base + j * st, j < dn ? gr * (tjc_exp(tjc_ld<T>(x, xdt, base + j * st) - m) / s - (T)(j == l)) : (T)0);
        } else if (op == TJ__OP_LAYER_NORM_GRAD) { /* dx = r (g - mean(g) - y mean(g y)) */
            T sum = 0, var = 0, corr = 0, mg = 0, mgy = 0, mean, mlo, rs;
            for (j = threadIdx.x; j < d; j += blockDim.x) sum += tjc_ld<T>(x, xdt, base + j * st);
            mean = tjc_block_reduce(sum, sh, 0) / (T)d;
            for (j = threadIdx.x; j < d; j += blockDim.x) {
                T v = tjc_ld<T>(x, xdt, base + j * st) - mean;
                var += v * v;
                corr += v;
            }
            var = tjc_block_reduce(var, sh, 0);
            corr = tjc_block_reduce(corr, sh, 0);
            mlo = corr / (T)d; /* the mean in two parts, as the forward */
            rs = (T)1 / tjc_sqrt((var - corr * mlo) / (T)d + eps);
            for (j = threadIdx.x; j < d; j += blockDim.x) {
                T gv = tjc_ld<T>(g, gdt, base + j * st);
                mg += gv;
                mgy += gv * ((tjc_ld<T>(x, xdt, base + j * st) - mean) - mlo) * rs;
            }
            mg = tjc_block_reduce(mg, sh, 0) / (T)d;
            mgy = tjc_block_reduce(mgy, sh, 0) / (T)d;
            for (j = threadIdx.x; j < d; j += blockDim.x)
                tjc_st<T>(out, odt, base + j * st, rs * (tjc_ld<T>(g, gdt, base + j * st) - mg - ((tjc_ld<T>(x, xdt, base + j * st) - mean) - mlo) * rs * mgy));
        } else { /* softmax_grad: dx = y (g - sum(g y)) */
            T gy = 0;
            for (j = threadIdx.x; j < d; j += blockDim.x) gy += tjc_ld<T>(g, gdt, base + j * st) * tjc_ld<T>(x, xdt, base + j * st);
            gy = tjc_block_reduce(gy, sh, 0);
            for (j = threadIdx.x; j < d; j += blockDim.x)
                tjc_st<T>(out, odt, base + j * st, tjc_ld<T>(x, xdt, base + j * st) * (tjc_ld<T>(g, gdt, base + j * st) - gy));
        }
    }
}

/* ---- fast row kernels: contiguous rows (stride 1) of f32 / bf16 ----
   The same formulas as the kernels above and the CPU's tj__row (float math,
   one rounding at each store), laid out for a GPU:
   - rows of at most TJC_WARP_ROW elements: one warp per row, the row held in
     registers (each load of the warp is one coalesced line: lane l reads
     element l, or the 4 from 4 l on, of each 32 or 128), reductions by warp
     shuffles; the row is read once and written once.
   - longer rows (cross-entropy over a vocabulary): one block per row, max
     and sum of exponentials in one pass (the online softmax: a larger max
     rescales the sum so far), f32 rows read as float4. */
#define TJC_WARP_ROW 1024
__device__ __forceinline__ float tjc_ldf(const void *p, int dt, int64_t i) {
    return dt == TJ_BF16 ? __bfloat162float(((const __nv_bfloat16 *)p)[i]) : ((const float *)p)[i];
}
__device__ __forceinline__ void tjc_stf(void *p, int dt, int64_t i, float v) {
    if (dt == TJ_BF16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else ((float *)p)[i] = v;
}
__device__ __forceinline__ float tjc_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float tjc_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = tjc_maxnan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* (max, sum of exp(x - max)) pairs combined; an empty side has max -inf */
__device__ __forceinline__ void tjc_lse_merge(float &m, float &s, float m2, float s2) {
    if (m2 > m || m2 != m2) { float t = m; m = m2; m2 = t; t = s; s = s2; s2 = t; }
    if (m2 != -INFINITY) s += s2 * expf(m2 - m);
}
__device__ __forceinline__ void tjc_lse_add(float &m, float &s, float x) {
    if (x > m || x != x) { s = (m == -INFINITY ? 0.f : s * expf(m - x)) + 1.f; m = x; }
    else if (x != -INFINITY) s += expf(x - m);
}

/* PACK (1 or 4) consecutive elements from i on, as floats, and back: one
   8-byte (bf16) or 16-byte (f32) access for 4 (the caller checks alignment) */
template <int PACK>
__device__ __forceinline__ void tjc_ldp(const void *p, int dt, int64_t i, float *o) {
    if (PACK == 1) o[0] = tjc_ldf(p, dt, i);
    else if (dt == TJ_BF16) {
        uint2 u = *(const uint2 *)((const __nv_bfloat16 *)p + i);
        __nv_bfloat162 a = *(__nv_bfloat162 *)&u.x, b = *(__nv_bfloat162 *)&u.y;
        o[0] = __low2float(a), o[1] = __high2float(a), o[2] = __low2float(b), o[3] = __high2float(b);
    } else {
        float4 f = *(const float4 *)((const float *)p + i);
        o[0] = f.x, o[1] = f.y, o[2] = f.z, o[3] = f.w;
    }
}
template <int PACK>
__device__ __forceinline__ void tjc_stp(void *p, int dt, int64_t i, const float *v) {
    if (PACK == 1) tjc_stf(p, dt, i, v[0]);
    else if (dt == TJ_BF16) { /* __floats2bfloat162_rn: to nearest even, as __float2bfloat16_rn */
        __nv_bfloat162 a = __floats2bfloat162_rn(v[0], v[1]), b = __floats2bfloat162_rn(v[2], v[3]);
        uint2 u;
        u.x = *(unsigned *)&a;
        u.y = *(unsigned *)&b;
        *(uint2 *)((__nv_bfloat16 *)p + i) = u;
    } else *(float4 *)((float *)p + i) = make_float4(v[0], v[1], v[2], v[3]);
}

/* one warp per row: softmax, log_softmax, layer_norm, their gradients (x,
   g), and cross_entropy (z, labels) and its gradient (z, labels, g). NV
   elements per lane (d <= 32 NV), in packs of PACK consecutive ones: slot i
   of lane l is element (l + 32 (i / PACK)) PACK + i % PACK (with PACK 4, d
   is a multiple of 4 and the rows are aligned) */
#define TJC_COL(i) ((lane + 32 * ((i) / PACK)) * PACK + (i) % PACK)
template <int NV, int PACK>
__global__ void tjc_k_row_warp(const void *x, int xdt, const int32_t *lab, const void *g, int gdt, void *out, int odt, int op, int64_t rows, int d,
                               int dn, float eps, unsigned long long *errpos) {
    const int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
    const int lim = op == TJ__OP_CROSS_ENTROPY || op == TJ__OP_CROSS_ENTROPY_GRAD ? dn : d; /* the classes cross-entropy reduces */
    for (int64_t r = blockIdx.x * (int64_t)wpb + (threadIdx.x >> 5); r < rows; r += (int64_t)gridDim.x * wpb) {
        const int64_t base = r * d;
        float v[NV], w[NV];
        int l = -1;
        if (op == TJ__OP_CROSS_ENTROPY || op == TJ__OP_CROSS_ENTROPY_GRAD) {
            l = lab[r];
            if (l < 0 || l >= dn) { /* the whole warp takes this branch */
                if (lane == 0) atomicMin(errpos, (unsigned long long)r);
                continue;
            }
        }
#pragma unroll
        for (int i = 0; i < NV; i += PACK) {
            int j = TJC_COL(i);
            if (j < d) {
                tjc_ldp<PACK>(x, xdt, base + j, v + i);
                if (op == TJ__OP_SOFTMAX_GRAD || op == TJ__OP_LAYER_NORM_GRAD) tjc_ldp<PACK>(g, gdt, base + j, w + i);
                else
                    for (int q = 0; q < PACK; q++) w[i + q] = 0.f;
            } else
                for (int q = 0; q < PACK; q++) v[i + q] = w[i + q] = 0.f;
        }
        if (op == TJ__OP_LAYER_NORM || op == TJ__OP_LAYER_NORM_GRAD) {
            float sum = 0, var = 0, corr = 0, mean, rs;
#pragma unroll
            for (int i = 0; i < NV; i++) sum += v[i]; /* the padding is 0 */
            mean = tjc_warp_sum(sum) / (float)d;
#pragma unroll
            for (int i = 0; i < NV; i++)
                if (TJC_COL(i) < d) {
                    var += (v[i] - mean) * (v[i] - mean);
                    corr += v[i] - mean;
                }
            /* the mean in two parts, as the CPU's: x - mean is (x - mean) - mlo */
            var = tjc_warp_sum(var);
            corr = tjc_warp_sum(corr);
            rs = 1.f / sqrtf((var - corr * (corr / (float)d)) / (float)d + eps);
            corr /= (float)d; /* (mlo) */
#pragma unroll
            for (int i = 0; i < NV; i++) v[i] = (v[i] - mean) - corr; /* (the padding is not read again) */
            if (op == TJ__OP_LAYER_NORM) {
#pragma unroll
                for (int i = 0; i < NV; i++) v[i] = v[i] * rs;
            } else { /* dx = r (g - mean(g) - y mean(g y)) */
                float mg = 0, mgy = 0;
#pragma unroll
                for (int i = 0; i < NV; i++) {
                    mg += w[i];
                    mgy += w[i] * v[i] * rs;
                }
                mg = tjc_warp_sum(mg) / (float)d;
                mgy = tjc_warp_sum(mgy) / (float)d;
#pragma unroll
                for (int i = 0; i < NV; i++) v[i] = rs * (w[i] - mg - v[i] * rs * mgy);
            }
        } else if (op == TJ__OP_SOFTMAX_GRAD) { /* dx = y (g - sum(g y)) */
            float gy = 0;
#pragma unroll
            for (int i = 0; i < NV; i++) gy += w[i] * v[i];
            gy = tjc_warp_sum(gy);
#pragma unroll
            for (int i = 0; i < NV; i++) v[i] = v[i] * (w[i] - gy);
        } else { /* softmax, log_softmax, cross_entropy and its gradient: max, sum(exp(x - max)) */
            float m = -INFINITY, s = 0;
#pragma unroll
            for (int i = 0; i < NV; i++)
                if (TJC_COL(i) < lim) m = tjc_maxnan(m, v[i]);
            m = tjc_warp_max(m);
            if (m == -INFINITY) m = 0; /* a fully masked row: all -inf */
#pragma unroll
            for (int i = 0; i < NV; i++) {
                w[i] = TJC_COL(i) < lim ? expf(v[i] - m) : 0.f;
                s += w[i];
            }
            s = tjc_warp_sum(s);
            if (op == TJ__OP_CROSS_ENTROPY) { /* lse - z[label] (loaded again: v indexed by a variable would live in local memory) */
                if (lane == 0) tjc_stf(out, odt, r, (m - tjc_ldf(x, xdt, base + l)) + logf(s));
                continue;
            }
            {
                float gr = op == TJ__OP_CROSS_ENTROPY_GRAD ? tjc_ldf(g, gdt, r) : 0.f, ls = logf(s);
#pragma unroll
                for (int i = 0; i < NV; i++)
                    v[i] = op == TJ__OP_SOFTMAX           ? w[i] / s
                           : op == TJ__OP_LOG_SOFTMAX     ? (v[i] - m) - ls
                           : TJC_COL(i) < lim             ? gr * (w[i] / s - (float)(TJC_COL(i) == l))
                                                          : 0.f; /* (cross_entropy_padded's padding: +0, as the CPU's) */
            }
        }
#pragma unroll
        for (int i = 0; i < NV; i += PACK) /* the result, in v */
            if (TJC_COL(i) < d) tjc_stp<PACK>(out, odt, base + TJC_COL(i), v + i);
    }
}
#undef TJC_COL

/* one block per row of a long row: cross_entropy (g NULL) or its gradient.
   One pass for the max and the sum of exponentials, a second one for the
   gradient; f32 rows whose length is a multiple of 4 load float4s. */
__global__ void tjc_k_xent_long(const void *z, int zdt, const int32_t *lab, const void *g, int gdt, void *out, int odt, int grad, int64_t rows, int64_t d,
                                int64_t dn, unsigned long long *errpos) {
    __shared__ float shm[32], shs[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int vec = zdt == TJ_F32 && d % 4 == 0 && dn == d && ((uintptr_t)z & 15) == 0; /* (dn: the classes that take part, d for all) */
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * d;
        const int32_t l = lab[r];
        float m = -INFINITY, s = 0;
        if (l < 0 || l >= dn) { /* the whole block takes this branch */
            if (threadIdx.x == 0) atomicMin(errpos, (unsigned long long)r);
            continue;
        }
        if (vec) {
            const float4 *p = (const float4 *)((const float *)z + base);
            for (int64_t j = threadIdx.x; j < d / 4; j += blockDim.x) {
                float4 q = p[j];
                tjc_lse_add(m, s, q.x);
                tjc_lse_add(m, s, q.y);
                tjc_lse_add(m, s, q.z);
                tjc_lse_add(m, s, q.w);
            }
        } else
            for (int64_t j = threadIdx.x; j < dn; j += blockDim.x) tjc_lse_add(m, s, tjc_ldf(z, zdt, base + j));
        for (int o = 16; o > 0; o >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
            tjc_lse_merge(m, s, m2, s2);
        }
        if (lane == 0) { shm[wid] = m; shs[wid] = s; }
        __syncthreads();
        m = -INFINITY;
        s = 0;
        for (int k = 0; k < nw; k++) tjc_lse_merge(m, s, shm[k], shs[k]);
        __syncthreads(); /* shm, shs are reused by the next row */
        if (m == -INFINITY) m = 0; /* a fully masked row: all -inf */
        if (!grad) {
            if (threadIdx.x == 0) tjc_stf(out, odt, r, (m - tjc_ldf(z, zdt, base + l)) + logf(s));
            continue;
        }
        {
            const float gr = tjc_ldf(g, gdt, r);
            if (vec && odt == TJ_F32 && ((uintptr_t)out & 15) == 0) {
                const float4 *p = (const float4 *)((const float *)z + base);
                float4 *q = (float4 *)((float *)out + base);
                for (int64_t j = threadIdx.x; j < d / 4; j += blockDim.x) {
                    float4 a = p[j], o;
                    o.x = gr * (expf(a.x - m) / s - (float)(4 * j == l));
                    o.y = gr * (expf(a.y - m) / s - (float)(4 * j + 1 == l));
                    o.z = gr * (expf(a.z - m) / s - (float)(4 * j + 2 == l));
                    o.w = gr * (expf(a.w - m) / s - (float)(4 * j + 3 == l));
                    q[j] = o;
                }
            } else
                for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
                    tjc_stf(out, odt, base + j, j < dn ? gr * (expf(tjc_ldf(z, zdt, base + j) - m) / s - (float)(j == l)) : 0.f);
        }
    }
}

/* take: x = [pre, V, post], idx = [ni] -> out = [pre, ni, post]; x holds
   rows [off, off + V) of Vg (tj__split_block), other rows read as zeros */
__global__ void tjc_k_take(const void *x, void *out, int es, const int32_t *idx, int64_t pre, int64_t off, int64_t V, int64_t Vg, int64_t post,
                           int64_t ni, unsigned long long *errpos) {
    int64_t n = pre * ni * post;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t e = i % post, j = (i / post) % ni, p = i / (post * ni), r;
        int32_t v = idx[j];
        if (v < 0 || v >= Vg) {
            atomicMin(errpos, (unsigned long long)j);
            continue;
        }
        r = (int64_t)v - off;
        if (r < 0 || r >= V) memset((char *)out + i * es, 0, (size_t)es);
        else tjc_move(out, i, x, (p * V + r) * post + e, es);
    }
}
/* v rounded to dtype dt, as a store and a load would (tj__st, tj__ld) */
__device__ __forceinline__ double tjc_round(double v, int dt) {
    switch (dt) {
    case TJ_F32: return (double)(float)v;
    case TJ_BF16: return (double)__bfloat162float(__float2bfloat16_rn((float)v));
    case TJ_I32: return v != v ? 0.0 : v >= 2147483647.0 ? 2147483647.0 : v <= -2147483648.0 ? -2147483648.0 : (double)(int32_t)v;
    default: return v;
    }
}
/* scatter_add, the transpose of take: out [pre, V, post] = sum of g [pre, ni,
   post] over the positions j with idx[j] == v. Deterministic: one thread per
   output element adds its rows in increasing j (order[start[v] ..
   start[v+1]), the index lists tjc_scatter_add sorts on the device), and
   rounds to the output dtype after each add, as the CPU kernel does; every
   element is written once (no atomics, no read-modify-write of a bf16
   neighbour past the buffer). */
__global__ void tjc_k_scatter_add(const void *g, int gdt, void *out, int odt, const int64_t *start, const int64_t *order, int64_t pre, int64_t V,
                                  int64_t post, int64_t ni) {
    int64_t n = pre * V * post;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t e = i % post, v = (i / post) % V, p = i / (post * V);
        double acc = 0;
        for (int64_t r = start[v]; r < start[v + 1]; r++) acc = tjc_round(acc + tjc_ld<double>(g, gdt, (p * ni + order[r]) * post + e), odt);
        tjc_st<double>(out, odt, i, acc);
    }
}
/* ---- scatter_add's index lists, sorted on the device ----
   Each position j gets a sort key: its index if in [0, V), else one "bad"
   key above every good one, so out-of-range positions sort past start[V]
   and the kernel above never reads them. A stable radix sort of (key, j)
   over the key's low tjc_csr_bits(V) bits (CUB's, on the compute stream)
   gives order[]: the positions grouped by index, in increasing j within
   one index, as a stable counting sort would. start[v] is the lower bound
   of v in the sorted keys. These helpers are shared by the kernels and by
   tj_cuda_scatter_csr_host, which tests the same steps on the CPU. */
__host__ __device__ __forceinline__ unsigned tjc_csr_bad(int64_t V) { return V < ((int64_t)1 << 31) ? (unsigned)V : 1u << 31; }
/* index v's key in a block of V rows starting at row off (the whole axis,
   of Vg rows, split over devices: tj__sh_take); rows of other blocks and
   indices out of range sort last, with the bad key */
__host__ __device__ __forceinline__ unsigned tjc_csr_key(int32_t v, int64_t off, int64_t V) {
    return (int64_t)v >= off && (int64_t)v - off < V ? (unsigned)((int64_t)v - off) : tjc_csr_bad(V);
}
/* key bits the sort must look at: enough for the bad key, at least one */
static int tjc_csr_bits(int64_t V) {
    unsigned bad = tjc_csr_bad(V);
    int bits = 1;
    while (bits < 32 && (bad >> bits)) bits++;
    return bits;
}
/* the first r in sorted keys[0, n) with keys[r] >= v (values past the bad
   key, possible only when V > 2^31, stop at the bad keys too) */
__host__ __device__ __forceinline__ int64_t tjc_csr_lower(const unsigned *keys, int64_t n, int64_t v, int64_t V) {
    int64_t lo = 0, hi = n, b = tjc_csr_bad(V);
    if (v > b) v = b;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if ((int64_t)keys[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
/* keys and positions to sort; the first bad position into the check slot */
__global__ void tjc_k_csr_keys(const int32_t *idx, int64_t ni, int64_t off, int64_t V, int64_t Vg, unsigned *keys, int64_t *pos,
                               unsigned long long *errpos) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < ni; j += (int64_t)gridDim.x * blockDim.x) {
        int32_t v = idx[j];
        keys[j] = tjc_csr_key(v, off, V);
        pos[j] = j;
        if (v < 0 || v >= Vg) atomicMin(errpos, (unsigned long long)j);
    }
}
/* start[v] for v in [0, V] from the sorted keys */
__global__ void tjc_k_csr_start(const unsigned *sorted, int64_t ni, int64_t V, int64_t *start) {
    for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v <= V; v += (int64_t)gridDim.x * blockDim.x)
        start[v] = tjc_csr_lower(sorted, ni, v, V);
}
/* one_hot: out[j, v] = idx[j] == v */
__global__ void tjc_k_one_hot(const int32_t *idx, void *out, int dt, int64_t n, int64_t V) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        tjc_st<double>(out, dt, i, idx[i / V] == i % V ? 1.0 : 0.0);
}
/* argmax / argmin (and their _part forms) along one axis (tj__k_argm's loop): output o's row
   starts at the offset sum over its axes of (o / ost[i]) % od[i] * st[i]
   and steps by ast; the first winner is kept, a NaN wins and ends the row */
struct tjc_argm_geo {
    int rank;
    int64_t ost[TJ_MAXDIM], od[TJ_MAXDIM], st[TJ_MAXDIM];
};
__global__ void tjc_k_argm(const void *in, int idt, void *out, int64_t m, int64_t d, int64_t ast, tjc_argm_geo g, int mx, int part, int64_t off) {
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < m; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t base = 0, best = 0;
        for (int i = 0; i < g.rank; i++) base += (o / g.ost[i]) % g.od[i] * g.st[i];
        double bv = tjc_ld<double>(in, idt, base);
        for (int64_t j = 1; j < d && bv == bv; j++) {
            double v = tjc_ld<double>(in, idt, base + j * ast);
            if (v != v || (mx ? v > bv : v < bv)) bv = v, best = j;
        }
        if (part) ((double *)out)[2 * o] = bv, ((double *)out)[2 * o + 1] = (double)(best + off); /* argmax_part: value, global index */
        else ((int32_t *)out)[o] = (int32_t)best;
    }
}
/* causal mask: fill where key index > query index */
__global__ void tjc_k_causal(const void *in, int idt, void *out, int odt, int64_t n, int64_t qst, int64_t qd, int64_t kst, int64_t kd, double fill) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t qi = (i / qst) % qd, ki = (i / kst) % kd;
        if (ki > qi) tjc_st<double>(out, odt, i, fill);
        else if (idt == odt) {
            int es = idt == TJ_BF16 ? 2 : idt == TJ_F64 ? 8 : 4;
            tjc_move(out, i, in, i, es);
        } else tjc_st<double>(out, odt, i, tjc_ld<double>(in, idt, i));
    }
}

// ==== [11] CUDA backend: launchers (one per CPU kernel of [5]) =============
/* Each returns 0, or 1 after writing k->err. They mirror the CPU kernels'
   setup code, then launch on the compute stream. */

/* tj__k_ew: unary and binary ops, select */
static int tjc_elementwise(tjc_state *s, tj__kern *k) {
    tjc_ew e;
    int64_t ost[TJ_MAXDIM], st[3][TJ_MAXDIM];
    const int64_t *stp[3] = {st[0], st[1], st[2]};
    int i, d, wide = k->ot.dt == TJ_F64, op = k->n->op;
    if (k->nin < 1 || k->nin > 3) return tjc_fail(k, "%d inputs (want 1 to 3)", k->nin);
    memset(&e, 0, sizeof e);
    e.nin = k->nin;
    e.n = tj__numel(&k->ot);
    e.allcontig = 1;
    tj__strides(&k->ot, ost);
    for (i = 0; i < k->nin; i++) {
        e.in[i] = k->in[i];
        e.dt[i] = k->it[i]->dt;
        tj__bstrides(k->it[i], &k->ot, st[i]);
        e.contig[i] = tj__numel(k->it[i]) == e.n;
        for (d = 0; d < k->ot.rank; d++) e.contig[i] &= st[i][d] == ost[d];
        e.allcontig &= e.contig[i];
        if (!(op == TJ__OP_SELECT && i == 0)) wide |= tjc_wide(k->it[i]->dt); /* the mask is only tested for zero */
    }
    tjc_ix_make(&e.ix, k->ot.rank, k->ot.dim, k->nin, stp, e.n);
    if (wide)
        tjc_k_elementwise<double><<<tjc_blocks((e.n + TJC_EW_U - 1) / TJC_EW_U, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(e, op, k->n->a.s, k->out, k->ot.dt);
    else
        tjc_k_elementwise<float><<<tjc_blocks((e.n + TJC_EW_U - 1) / TJC_EW_U, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(e, op, (float)k->n->a.s, k->out, k->ot.dt);
    TJC_LAUNCHED(k, "tjc_k_elementwise");
    return 0;
}

/* tjc_k_copy over c's dims */
static int tjc_copy_launch(tjc_state *s, tj__kern *k, const tjc_cp *c, const void *src, void *dst) {
    tjc_ix x;
    const int64_t *stp[2] = {c->sst, c->dst};
    tjc_ix_make(&x, c->rank, c->dim, 2, stp, c->n);
    tjc_k_copy<<<tjc_blocks((c->n + TJC_EW_U - 1) / TJC_EW_U, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(*c, x, src, dst);
    TJC_LAUNCHED(k, "tjc_k_copy");
    return 0;
}
/* tj__copy_region: copy dims[] from src (type st, at sbase) into dst (type dt, at dbase) */
static int tjc_copy_region(tjc_state *s, tj__kern *k, const void *src, const tj__type *st, int64_t sbase, void *dst, const tj__type *dt,
                           int64_t dbase, const int64_t *dims) {
    tjc_cp c;
    int d;
    memset(&c, 0, sizeof c);
    c.rank = dt->rank;
    c.sdt = st->dt;
    c.ddt = dt->dt;
    c.es = (int)tj_dtype_size(st->dt);
    c.sbase = sbase;
    c.dbase = dbase;
    c.n = 1;
    for (d = 0; d < c.rank; d++) {
        c.dim[d] = dims[d];
        c.n *= dims[d];
    }
    tj__strides(st, c.sst);
    tj__strides(dt, c.dst);
    return tjc_copy_launch(s, k, &c, src, dst);
}
/* ---- relayout as a tiled transpose ----
   A relayout whose output's innermost axis is not the source's innermost
   (q . k's head split, the gradients' transposes) makes tjc_k_copy read one
   element per 32-byte sector: a warp's 32 reads touch 32 sectors. The tiled
   kernel moves 32 x 32 tiles through shared memory instead: threads read a
   tile along the source's contiguous axis p, and write it along the
   output's innermost axis q, so both sides are coalesced. Every other axis
   is a batch index (a broadcast one has source stride 0). The index steps
   (tjc_tr_load / tjc_tr_store) are __host__ __device__: the host mirror
   tj_cuda_transpose_host runs them thread by thread, phase by phase, and
   build/test_cuda compares it with a plain copy without a GPU. */
#define TJC_TILE 32 /* tile side: a warp's width                   */
#define TJC_TROWS 8 /* block (32, 8): each thread moves 4 elements */
typedef struct {
    int64_t P, Q;   /* sizes of p (source stride 1) and q (output innermost)        */
    int64_t sq, dp; /* the source's stride of q, the output's stride of p           */
    int64_t tp, tq; /* tiles along p and q                                          */
    int64_t nb;     /* batch indices: the product of the other axes                 */
    int nbr;        /* the other axes, outermost first: sizes, source and output strides */
    int64_t bdim[TJ_MAXDIM], bsst[TJ_MAXDIM], bdst[TJ_MAXDIM];
} tjc_tr;
TJC_PARAMS_FIT(tjc_tr);
/* the plan for an output of rank dims[] whose axis d is read at source
   stride sst[d] (output strides: row-major); 0 when the plain copy is as
   good (the innermost axis already contiguous in the source, or no axis is) */
static int tjc_tr_plan(int rank, const int64_t *dims, const int64_t *sst, tjc_tr *t) {
    int d, p = -1, q = rank - 1;
    int64_t ost[TJ_MAXDIM], o = 1;
    if (rank < 2 || dims[q] < 2 || sst[q] == 1) return 0;
    for (d = rank - 1; d >= 0; d--) {
        ost[d] = o;
        o *= dims[d];
    }
    for (d = 0; d < q; d++)
        if (sst[d] == 1 && dims[d] > 1) p = d;
    if (p < 0) return 0;
    memset(t, 0, sizeof *t);
    t->P = dims[p]; t->Q = dims[q]; t->sq = sst[q]; t->dp = ost[p];
    t->tp = (t->P + TJC_TILE - 1) / TJC_TILE; t->tq = (t->Q + TJC_TILE - 1) / TJC_TILE;
    t->nb = 1;
    for (d = 0; d < q; d++) {
        if (d == p) continue;
        t->bdim[t->nbr] = dims[d]; t->bsst[t->nbr] = sst[d]; t->bdst[t->nbr] = ost[d];
        t->nbr++;
        t->nb *= dims[d];
    }
    return 1;
}
/* tile i of the plan: its batch's offsets in source and output, its corner */
__host__ __device__ static inline void tjc_tr_tile(const tjc_tr *t, int64_t i, int64_t *sb, int64_t *db, int64_t *p0, int64_t *q0) {
    int64_t b = i / (t->tp * t->tq), r = i % (t->tp * t->tq);
    *p0 = r / t->tq * TJC_TILE;
    *q0 = r % t->tq * TJC_TILE;
    *sb = *db = 0;
    for (int d = t->nbr - 1; d >= 0; d--) {
        int64_t x = b % t->bdim[d];
        b /= t->bdim[d];
        *sb += x * t->bsst[d];
        *db += x * t->bdst[d];
    }
}
/* thread (tx, ty) reads column p0+tx of the tile, rows q0+ty, q0+ty+8, ... */
template <typename E>
__host__ __device__ static inline void tjc_tr_load(const tjc_tr *t, int64_t sb, int64_t p0, int64_t q0, int tx, int ty, const E *src,
                                                   E (*tile)[TJC_TILE + 1]) {
    int64_t p = p0 + tx;
    for (int j = ty; j < TJC_TILE; j += TJC_TROWS)
        if (p < t->P && q0 + j < t->Q) tile[j][tx] = src[sb + p + (q0 + j) * t->sq];
}
/* ... and writes output row p0+ty, p0+ty+8, ... at column q0+tx */
template <typename E>
__host__ __device__ static inline void tjc_tr_store(const tjc_tr *t, int64_t db, int64_t p0, int64_t q0, int tx, int ty, E *dst,
                                                    const E (*tile)[TJC_TILE + 1]) {
    int64_t q = q0 + tx;
    for (int j = ty; j < TJC_TILE; j += TJC_TROWS)
        if (p0 + j < t->P && q < t->Q) dst[db + (p0 + j) * t->dp + q] = tile[tx][j];
}
template <typename E>
__global__ void __launch_bounds__(TJC_TILE *TJC_TROWS) tjc_k_transpose(tjc_tr t, const E *src, E *dst) {
    __shared__ E tile[TJC_TILE][TJC_TILE + 1];
    for (int64_t i = blockIdx.x; i < t.nb * t.tp * t.tq; i += gridDim.x) { /* the same trip count in every thread */
        int64_t sb, db, p0, q0;
        tjc_tr_tile(&t, i, &sb, &db, &p0, &q0);
        tjc_tr_load<E>(&t, sb, p0, q0, threadIdx.x, threadIdx.y, src, tile);
        __syncthreads();
        tjc_tr_store<E>(&t, db, p0, q0, threadIdx.x, threadIdx.y, dst, tile);
        __syncthreads(); /* the tile is reused by the next i */
    }
}
template <typename E>
static void tjc_tr_host(const tjc_tr *t, const E *src, E *dst) {
    E tile[TJC_TILE][TJC_TILE + 1];
    for (int64_t i = 0; i < t->nb * t->tp * t->tq; i++) {
        int64_t sb, db, p0, q0;
        tjc_tr_tile(t, i, &sb, &db, &p0, &q0);
        for (int ty = 0; ty < TJC_TROWS; ty++)
            for (int tx = 0; tx < TJC_TILE; tx++) tjc_tr_load<E>(t, sb, p0, q0, tx, ty, src, tile);
        for (int ty = 0; ty < TJC_TROWS; ty++)
            for (int tx = 0; tx < TJC_TILE; tx++) tjc_tr_store<E>(t, db, p0, q0, tx, ty, dst, tile);
    }
}
/* the host mirror of tjc_ix (no GPU needed): the offsets o[i * nops + j]
   of every flat index i < n of dims[rank] for operands with strides
   st[j * rank + d], by the walk the kernels take (big: the 64-bit one even
   below 2^32); and tjc_udiv's quotient n / d */
extern "C" void tj_cuda_ix_host(int rank, const int64_t *dims, int nops, const int64_t *st, int big, int64_t *o);
extern "C" void tj_cuda_ix_host(int rank, const int64_t *dims, int nops, const int64_t *st, int big, int64_t *o) {
    const int64_t *stp[TJC_IXOPS];
    int64_t n = 1, i;
    tjc_ix x;
    for (int d = 0; d < rank; d++) n *= dims[d];
    for (int j = 0; j < nops; j++) stp[j] = st + j * rank;
    tjc_ix_make(&x, rank, dims, nops, stp, big ? (int64_t)UINT32_MAX + 1 : n);
    for (i = 0; i < n; i++) {
        tjc_off3 oi = tjc_ix_at(x, i);
        const int64_t v[TJC_IXOPS] = {oi.a, oi.b, oi.c};
        for (int j = 0; j < nops; j++) o[i * nops + j] = v[j];
    }
}
extern "C" uint32_t tj_cuda_div_host(uint32_t d, uint32_t n);
extern "C" uint32_t tj_cuda_div_host(uint32_t d, uint32_t n) {
    tjc_udiv v = tjc_udiv_make(d);
    return tjc_udiv_q(v, n);
}
/* tjc_k_copy's threads on the host: dims[rank] elements from src (dtype
   sdt, strides sst from sbase) to dst (dtype ddt, strides dst_st from
   dbase), by `threads` threads */
extern "C" void tj_cuda_copy_host(int rank, const int64_t *dims, int sdt, const int64_t *sst, int64_t sbase, const void *src, int ddt, const int64_t *dst_st,
                                  int64_t dbase, void *dst, int64_t threads);
extern "C" void tj_cuda_copy_host(int rank, const int64_t *dims, int sdt, const int64_t *sst, int64_t sbase, const void *src, int ddt, const int64_t *dst_st,
                                  int64_t dbase, void *dst, int64_t threads) {
    tjc_cp c;
    tjc_ix x;
    const int64_t *stp[2] = {sst, dst_st};
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.sdt = sdt;
    c.ddt = ddt;
    c.es = (int)tj_dtype_size((tj_dtype)sdt);
    c.sbase = sbase;
    c.dbase = dbase;
    c.n = 1;
    for (int d = 0; d < rank; d++) c.n *= dims[d];
    tjc_ix_make(&x, rank, dims, 2, stp, c.n);
    for (int64_t t = 0; t < threads; t++) tjc_copy_thread(c, x, src, dst, t, threads);
}
/* tjc_k_elementwise's threads on the host: out[i] = a[i] + b[i] (f32; b
   broadcast along the inner axis of (rows, cols) when bcast: b[i % cols])
   by `threads` threads, each running tjc_ew_thread as on the GPU */
extern "C" void tj_cuda_ew_host(const float *a, const float *b, float *out, int64_t rows, int64_t cols, int bcast, int64_t threads);
extern "C" void tj_cuda_ew_host(const float *a, const float *b, float *out, int64_t rows, int64_t cols, int bcast, int64_t threads) {
    tjc_ew e;
    const int64_t dims[2] = {rows, cols}, sa[2] = {cols, 1}, sb[2] = {bcast ? 0 : cols, 1};
    const int64_t *stp[2] = {sa, sb};
    memset(&e, 0, sizeof e);
    e.nin = 2;
    e.n = rows * cols;
    e.in[0] = a;
    e.in[1] = b;
    e.dt[0] = e.dt[1] = TJ_F32;
    e.contig[0] = 1;
    e.contig[1] = !bcast;
    e.allcontig = !bcast;
    tjc_ix_make(&e.ix, 2, dims, 2, stp, e.n);
    for (int64_t t = 0; t < threads; t++) tjc_ew_thread<float>(e, TJ__OP_ADD, 0.0f, out, TJ_F32, t, threads);
}
/* the host mirror: 1 when the tiled path applies (dst written), 0 when the
   plain copy would run (dst untouched), -1 for an element size it lacks */
extern "C" int tj_cuda_transpose_host(int rank, const int64_t *dims, const int64_t *sst, int es, const void *src, void *dst);
extern "C" int tj_cuda_transpose_host(int rank, const int64_t *dims, const int64_t *sst, int es, const void *src, void *dst) {
    tjc_tr t;
    if (!tjc_tr_plan(rank, dims, sst, &t)) return 0;
    switch (es) {
    case 2: tjc_tr_host<uint16_t>(&t, (const uint16_t *)src, (uint16_t *)dst); return 1;
    case 4: tjc_tr_host<uint32_t>(&t, (const uint32_t *)src, (uint32_t *)dst); return 1;
    case 8: tjc_tr_host<uint64_t>(&t, (const uint64_t *)src, (uint64_t *)dst); return 1;
    default: return -1;
    }
}
/* launch the tiled kernel: the launch's status (0 or 1), or -1 when the
   plan does not apply (the caller copies) */
static int tjc_transpose(tjc_state *s, tj__kern *k, const tjc_cp *c) {
    tjc_tr t;
    dim3 blk(TJC_TILE, TJC_TROWS);
    if (c->sdt != c->ddt || c->sbase || c->dbase || !tjc_tr_plan(c->rank, c->dim, c->sst, &t)) return -1;
    unsigned g = tjc_grid(t.nb * t.tp * t.tq);
    switch (c->es) {
    case 2: tjc_k_transpose<uint16_t><<<g, blk, 0, s->compute>>>(t, (const uint16_t *)k->in[0], (uint16_t *)k->out); break;
    case 4: tjc_k_transpose<uint32_t><<<g, blk, 0, s->compute>>>(t, (const uint32_t *)k->in[0], (uint32_t *)k->out); break;
    case 8: tjc_k_transpose<uint64_t><<<g, blk, 0, s->compute>>>(t, (const uint64_t *)k->in[0], (uint64_t *)k->out); break;
    default: return -1;
    }
    TJC_LAUNCHED(k, "tjc_k_transpose");
    return 0;
}
/* tj__k_copy: relayout (transpose / broadcast) and copy */
static int tjc_copy_op(tjc_state *s, tj__kern *k) {
    tjc_cp c;
    int d, same = k->it[0]->rank == k->ot.rank && k->it[0]->dt == k->ot.dt;
    for (d = 0; same && d < k->ot.rank; d++) same = k->it[0]->ax[d] == k->ot.ax[d];
    if (same) {
        TJC_CUDA(k, cudaMemcpyAsync(k->out, k->in[0], (size_t)tj__bytes(&k->ot), cudaMemcpyDeviceToDevice, s->compute));
        return 0;
    }
    memset(&c, 0, sizeof c);
    c.rank = k->ot.rank;
    c.sdt = k->it[0]->dt;
    c.ddt = k->ot.dt;
    c.es = (int)tj_dtype_size(k->ot.dt);
    c.n = tj__numel(&k->ot);
    for (d = 0; d < c.rank; d++) c.dim[d] = k->ot.dim[d];
    tj__bstrides(k->it[0], &k->ot, c.sst);
    tj__strides(&k->ot, c.dst);
    {
        int rc = tjc_transpose(s, k, &c);
        if (rc >= 0) return rc;
    }
    return tjc_copy_launch(s, k, &c, k->in[0], k->out);
}
/* tj__k_fill */
static int tjc_fill(tjc_state *s, tj__kern *k) {
    int64_t n = tj__numel(&k->ot);
    tjc_k_fill<<<tjc_blocks(n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(k->out, k->ot.dt, n, k->n->a.s);
    TJC_LAUNCHED(k, "tjc_k_fill");
    return 0;
}
/* where device k->dev's shard sits in the global array (tj__global_index) */
static void tjc_gidx_of(const tj__kern *k, tjc_gidx *g) {
    const tj__type *gt = &k->n->t;
    int64_t gs = 1;
    memset(g, 0, sizeof *g);
    g->rank = gt->rank;
    for (int d = gt->rank - 1; d >= 0; d--) {
        g->ld[d] = k->ot.dim[d];
        g->off[d] = gt->sh[d] ? (int64_t)tj__mesh_rank(k->ctx, k->dev, gt->sh[d]) * k->ot.dim[d] : 0;
        g->gs[d] = gs;
        gs *= gt->dim[d];
    }
}
/* tj__k_arange: the global index along the axis */
static int tjc_arange(tjc_state *s, tj__kern *k) {
    int64_t st[TJ_MAXDIM], n = tj__numel(&k->ot);
    int ax = tj__axis_index(&k->ot, k->n->a.axis);
    tjc_gidx g;
    if (ax < 0) return tjc_fail(k, "axis not found in the output");
    tj__strides(&k->n->t, st);
    tjc_gidx_of(k, &g);
    tjc_k_arange<<<tjc_blocks(n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(k->out, k->ot.dt, n, g, st[ax], k->n->t.dim[ax]);
    TJC_LAUNCHED(k, "tjc_k_arange");
    return 0;
}
/* tj__k_random: counters from the global index */
static int tjc_random(tjc_state *s, tj__kern *k) {
    int64_t n = tj__numel(&k->ot);
    tjc_gidx g;
    tjc_gidx_of(k, &g);
    tjc_k_random<<<tjc_blocks(n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(k->out, k->ot.dt, n, g, k->n->a.key,
                                                                                     k->n->nin ? (const int32_t *)k->in[0] : NULL, k->n->op == TJ__OP_NORMAL);
    TJC_LAUNCHED(k, "tjc_k_random");
    return 0;
}
/* tj__k_reduce: split the input's axes into reduced and kept, as the CPU does */
static int tjc_reduce(tjc_state *s, tj__kern *k) {
    const tj__type *it = k->it[0];
    int64_t ist[TJ_MAXDIM];
    tjc_red r;
    int i, j, red, threads = 32, op = k->n->op;
    memset(&r, 0, sizeof r);
    tj__strides(it, ist);
    r.rn = 1;
    for (i = 0; i < it->rank; i++) {
        red = 0;
        for (j = 0; j < k->n->a.naxes; j++)
            if (k->n->a.axes[j] == it->ax[i]) red = 1;
        if (red) { r.rd[r.nr] = it->dim[i]; r.rs[r.nr++] = ist[i]; r.rn *= it->dim[i]; }
        else { r.od[r.no] = it->dim[i]; r.os[r.no++] = ist[i]; }
    }
    r.on = tj__numel(&k->ot);
    {
        const int64_t *rs = r.rs, *os = r.os;
        tjc_ix_make(&r.rx, r.nr, r.rd, 1, &rs, r.rn);
        tjc_ix_make(&r.ox, r.no, r.od, 1, &os, r.on);
    }
    while (threads < r.rn && threads < TJC_THREADS) threads *= 2;
    /* the kept axes inner and contiguous, the reduced ones outer: [R][K] columns */
    if (r.rn > 1 && r.on > 1 && r.ox.rank == 1 && r.ox.st[0][0] == 1 && r.rx.rank == 1 && r.rx.st[0][0] == r.on) {
        int64_t K = r.on, R = r.rn, bx = (K + 31) / 32, P = (4 * s->sms + bx - 1) / bx, maxp = R / (8 * TJC_RC_ROWS);
        int wide = tjc_wide(it->dt) || k->ot.dt == TJ_F64;
        void *part = NULL;
        if (P > maxp) P = maxp;
        if (P > 1024) P = 1024;
        if (P < 1) P = 1;
        if (bx > 0x7fffffffll) goto general; /* (a grid of at most 2^31 - 1 blocks along x) */
        if (P > 1) TJC_CUDA(k, cudaMallocAsync(&part, (size_t)(K * P) * (wide ? sizeof(double) : sizeof(float)), s->compute));
        dim3 grid((unsigned)bx, (unsigned)P), block(32, TJC_RC_ROWS);
        if (wide) {
            tjc_k_reduce_cols<double><<<grid, block, 0, s->compute>>>(k->in[0], it->dt, R, K, (double *)part, k->out, k->ot.dt, op);
            if (P > 1) tjc_k_reduce_cols_final<double><<<tjc_blocks(K, TJC_THREADS), TJC_THREADS, 0, s->compute>>>((const double *)part, (int)P, K, k->out, k->ot.dt, op);
        } else {
            tjc_k_reduce_cols<float><<<grid, block, 0, s->compute>>>(k->in[0], it->dt, R, K, (float *)part, k->out, k->ot.dt, op);
            if (P > 1) tjc_k_reduce_cols_final<float><<<tjc_blocks(K, TJC_THREADS), TJC_THREADS, 0, s->compute>>>((const float *)part, (int)P, K, k->out, k->ot.dt, op);
        }
        TJC_LAUNCHED(k, "tjc_k_reduce_cols");
        if (part) TJC_CUDA(k, cudaFreeAsync(part, s->compute));
        return 0;
    }
general:
    if (r.on < 256 && r.rn >= 8 * 16 * TJC_THREADS) { /* few outputs, long reductions: in two stages (tjc_k_reduce_part) */
        int P = (int)(r.rn / (16 * TJC_THREADS) < 512 ? r.rn / (16 * TJC_THREADS) : 512), rcontig = r.rs[r.nr - 1] == 1, wide = tjc_wide(it->dt) || k->ot.dt == TJ_F64;
        void *part = NULL;
        dim3 grid((unsigned)P, (unsigned)r.on);
        for (i = 0; i + 1 < r.nr; i++) rcontig &= r.rs[i] == r.rs[i + 1] * r.rd[i + 1];
        TJC_CUDA(k, cudaMallocAsync(&part, (size_t)(r.on * P) * (wide ? sizeof(double) : sizeof(float)), s->compute));
        if (wide) {
            tjc_k_reduce_part<double><<<grid, TJC_THREADS, 0, s->compute>>>(r, rcontig, k->in[0], it->dt, (double *)part, P, op);
            tjc_k_reduce_final<double><<<tjc_grid(r.on), TJC_THREADS, 0, s->compute>>>((const double *)part, P, k->out, k->ot.dt, r.on, op);
        } else {
            tjc_k_reduce_part<float><<<grid, TJC_THREADS, 0, s->compute>>>(r, rcontig, k->in[0], it->dt, (float *)part, P, op);
            tjc_k_reduce_final<float><<<tjc_grid(r.on), TJC_THREADS, 0, s->compute>>>((const float *)part, P, k->out, k->ot.dt, r.on, op);
        }
        TJC_LAUNCHED(k, "tjc_k_reduce_part / tjc_k_reduce_final");
        TJC_CUDA(k, cudaFreeAsync(part, s->compute));
        return 0;
    }
    if (tjc_wide(it->dt) || k->ot.dt == TJ_F64)
        tjc_k_reduce<double><<<tjc_grid(r.on), threads, 0, s->compute>>>(r, k->in[0], it->dt, k->out, k->ot.dt, op);
    else
        tjc_k_reduce<float><<<tjc_grid(r.on), threads, 0, s->compute>>>(r, k->in[0], it->dt, k->out, k->ot.dt, op);
    TJC_LAUNCHED(k, "tjc_k_reduce");
    return 0;
}
/* tj__k_dot through cuBLAS. Row-major C[M,N] = A[M,K] B[K,N] is column-major
   C^T[N,M] = B^T A^T, so cuBLAS gets (b, a) with m = N, n = M. a is [M,K]
   (lda K) or, with trans_a, [K,M] (lda M); b is [K,N] (ldb N) or, with
   trans_b, [N,K] (ldb K).
   Precision, as the CPU's tj__k_dot: f32 multiplies and accumulates in f32
   (CUBLAS_COMPUTE_32F: no TF32 unless TJ_CUDA_TF32=1 in the environment
   allows it, read at each dot: about 7x the f32 peak on an H100, with
   products of 10-bit mantissas); bf16 runs on tensor cores, products
   accumulated in f32 and rounded to bf16 once at the store (to nearest
   even), as the CPU widens to f32, multiplies, and rounds once; f64 in f64. */
static int tjc_tf32(void) {
    const char *e = getenv("TJ_CUDA_TF32");
    return e && *e && strcmp(e, "0") != 0;
}
static int tjc_dot(tjc_state *s, tj__kern *k) {
    int64_t Bn, Mn, Kn, Nn;
    int ta = k->n->a.trans_a, tb = k->n->a.trans_b;
    tj__dot_dims(k->n, &k->ot, k->it[0], &Bn, &Mn, &Kn, &Nn);
    if (Bn > INT_MAX || Mn > INT_MAX || Kn > INT_MAX || Nn > INT_MAX)
        return tjc_fail(k, "sizes B=%lld M=%lld K=%lld N=%lld exceed cuBLAS's int range", (long long)Bn, (long long)Mn, (long long)Kn, (long long)Nn);
    if (k->it[0]->dt != k->ot.dt || k->it[1]->dt != k->ot.dt) return tjc_fail(k, "operand dtypes differ from the result's");
    {
        cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        int M = (int)Mn, N = (int)Nn, K = (int)Kn, batch = (int)Bn, ldb = tb ? K : N, lda = ta ? M : K;
        long long sb = Kn * Nn, sa = Mn * Kn, sc = Mn * Nn;
        switch (k->ot.dt) {
        case TJ_F32: {
            const float one = 1.0f, zero = 0.0f;
            TJC_BLAS(k, "cublasGemmStridedBatchedEx (f32)",
                     cublasGemmStridedBatchedEx(s->blas, opb, opa, N, M, K, &one, k->in[1], CUDA_R_32F, ldb, sb, k->in[0], CUDA_R_32F, lda, sa, &zero,
                                                k->out, CUDA_R_32F, N, sc, batch, tjc_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT));
            break;
        }
        case TJ_F64: {
            const double one = 1.0, zero = 0.0;
            TJC_BLAS(k, "cublasDgemmStridedBatched",
                     cublasDgemmStridedBatched(s->blas, opb, opa, N, M, K, &one, (const double *)k->in[1], ldb, sb, (const double *)k->in[0], lda, sa,
                                               &zero, (double *)k->out, N, sc, batch));
            break;
        }
        case TJ_BF16: { /* bf16 in and out, f32 accumulation: rounds once, as the CPU */
            const float one = 1.0f, zero = 0.0f;
            TJC_BLAS(k, "cublasGemmStridedBatchedEx",
                     cublasGemmStridedBatchedEx(s->blas, opb, opa, N, M, K, &one, k->in[1], CUDA_R_16BF, ldb, sb, k->in[0], CUDA_R_16BF, lda, sa, &zero,
                                                k->out, CUDA_R_16BF, N, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            break;
        }
        default: return tjc_fail(k, "dtype %s is not supported by the CUDA dot", tj_dtype_name(k->ot.dt));
        }
    }
    return 0;
}
/* ---- index checks without a host wait ----
   A kernel that checks indices (take, cross_entropy and its gradient)
   atomicMin's the first bad position into its own slot of a device table
   (tjc_check_begin points s->d_errpos at it); right after it, on the same
   stream, tjc_k_errval copies that index's value into the slot while the
   index buffer still holds it. The table comes to the host once, at the
   device's sync (tjc_check_read): the first check in issue order that saw
   a bad index is the run's error, worded as the CPU kernel words it. Only
   a table full of checks makes the host wait early. */
__global__ void tjc_k_errval(unsigned long long *slot, const int32_t *idx) {
    if (slot[0] != TJC_NOERR) slot[1] = (unsigned long long)(unsigned)idx[slot[0]];
}
/* slots 0 .. s->nchk - 1 to the host (after the stream's sync): the first
   bad one's message into msg (returns 1), or 0; the table is reset. The
   read and the reset go on the compute stream (not cudaMemcpy's legacy
   default stream, which would also wait for every blocking stream of the
   device, other libraries' included). */
static int tjc_check_read(tjc_state *s, char *msg, size_t n) {
    cudaError_t e;
    int i, bad = 0;
    size_t bytes = sizeof(unsigned long long) * 2 * (size_t)s->nchk;
    if (!s->nchk) return 0;
    if ((e = cudaSetDevice(s->device)) != cudaSuccess || (e = cudaMemcpyAsync(s->h_chk, s->d_chk, bytes, cudaMemcpyDeviceToHost, s->compute)) != cudaSuccess ||
        (e = cudaStreamSynchronize(s->compute)) != cudaSuccess ||
        (e = cudaMemsetAsync(s->d_chk, 0xff, bytes, s->compute)) != cudaSuccess) { /* before the next kernels */
        snprintf(msg, n, "cuda backend: reading the index checks failed: %s", cudaGetErrorString(e));
        s->nchk = 0;
        return 1;
    }
    for (i = 0; i < s->nchk && !bad; i++) {
        const tjc_check *c = &s->chk[i];
        unsigned long long pos = s->h_chk[2 * i];
        int v = (int)(int32_t)(unsigned)s->h_chk[2 * i + 1];
        if (!c->used || pos == TJC_NOERR) continue;
        bad = 1;
        if (c->op == TJ__OP_CROSS_ENTROPY || c->op == TJ__OP_CROSS_ENTROPY_GRAD)
            snprintf(msg, n, "%s: label %d at position %llu is out of range [0, %lld) (at %s:%d)", tj__opname(c->op), v, pos, (long long)c->bound,
                     tj__base(c->file), c->line);
        else
            snprintf(msg, n, "%s: index %d at position %llu is out of range [0, %lld) for axis '%s' (at %s:%d)", tj__opname(c->op), v, pos,
                     (long long)c->bound, c->axis, tj__base(c->file), c->line);
    }
    s->nchk = 0;
    s->d_errpos = s->d_chk;
    return bad;
}
/* before a kernel that checks indices: a fresh slot (the table full: wait,
   read it, and stop here if an earlier check failed) */
static int tjc_check_begin(tjc_state *s, tj__kern *k) {
    if (s->nchk == TJC_NCHECK) {
        char msg[TJ__MSG];
        TJC_CUDA(k, cudaStreamSynchronize(s->compute));
        if (tjc_check_read(s, msg, sizeof msg)) {
            if (k->err && !k->err[0]) snprintf(k->err, TJ__MSG, "%s", msg);
            return 1;
        }
    }
    s->chk[s->nchk].used = 0;
    s->d_errpos = s->d_chk + 2 * s->nchk++;
    return 0;
}
/* after the kernel: save the bad index's value on the device, and what to
   say about it at sync */
static int tjc_index_check(tjc_state *s, tj__kern *k, const int32_t *idx, int64_t bound) {
    tjc_check *c = &s->chk[(s->d_errpos - s->d_chk) / 2];
    tjc_k_errval<<<1, 1, 0, s->compute>>>(s->d_errpos, idx);
    TJC_LAUNCHED(k, "tjc_k_errval");
    c->used = 1;
    c->op = k->n->op;
    c->bound = bound;
    c->axis = tj__name(k->ctx, k->n->a.axis);
    c->file = k->n->file;
    c->line = k->n->line;
    return 0;
}
/* scatter_add without a host wait: keys (checking the range into a slot
   of the index-check table, as take does), CUB's stable radix sort, start[]
   by lower bound, then the sum, all on the compute stream. The buffers
   live in one grow-only device block per mesh device (s->d_csr), offsets
   by tjc_csr_layout; it is not in the memory plan or tj_alloc_stats (like
   the check table and the fused-group programs, it is backend-private).
   Not yet run on a GPU: it compiles with -Werror, and the index logic runs
   on the CPU in tj_cuda_scatter_csr_host (tests/test_cuda.cu compares it
   with a counting sort). */
typedef struct {
    size_t order, pos, keys, sorted, temp, total; /* byte offsets; start[] at 0 */
} tjc_csr_at;
static size_t tjc_up256(size_t b) { return (b + 255) & ~(size_t)255; }
static tjc_csr_at tjc_csr_layout(int64_t V, int64_t ni, size_t temp_bytes) {
    tjc_csr_at L;
    L.order = tjc_up256(sizeof(int64_t) * (size_t)(V + 1));
    L.pos = L.order + tjc_up256(sizeof(int64_t) * (size_t)ni);
    L.keys = L.pos + tjc_up256(sizeof(int64_t) * (size_t)ni);
    L.sorted = L.keys + tjc_up256(sizeof(unsigned) * (size_t)ni);
    L.temp = L.sorted + tjc_up256(sizeof(unsigned) * (size_t)ni);
    L.total = L.temp + tjc_up256(temp_bytes);
    return L;
}
static int tjc_scatter_add(tjc_state *s, tj__kern *k, const int32_t *idx, int64_t pre, int64_t off, int64_t V, int64_t Vg, int64_t post, int64_t ni) {
    int bits = tjc_csr_bits(V);
    size_t temp_bytes = 0;
    tjc_csr_at L;
    char *d;
    int64_t n = pre * V * post;
    if (ni > 0) /* a size query: nothing runs */
        TJC_CUDA(k, cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const unsigned *)NULL, (unsigned *)NULL, (const int64_t *)NULL, (int64_t *)NULL,
                                                    ni, 0, bits, s->compute));
    L = tjc_csr_layout(V, ni, temp_bytes);
    if (L.total > s->csr_cap) { /* stream-ordered: after the kernels that used the old block */
        void *nd = NULL;
        if (s->d_csr) TJC_CUDA(k, cudaFreeAsync(s->d_csr, s->compute));
        s->d_csr = NULL;
        s->csr_cap = 0;
        TJC_CUDA(k, cudaMallocAsync(&nd, L.total, s->compute));
        s->d_csr = nd;
        s->csr_cap = L.total;
    }
    d = (char *)s->d_csr;
    if (ni > 0) {
        if (tjc_check_begin(s, k)) return 1;
        tjc_k_csr_keys<<<tjc_blocks(ni, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(idx, ni, off, V, Vg, (unsigned *)(d + L.keys),
                                                                                 (int64_t *)(d + L.pos), s->d_errpos);
        TJC_LAUNCHED(k, "tjc_k_csr_keys");
        if (tjc_index_check(s, k, idx, Vg)) return 1;
        TJC_CUDA(k, cub::DeviceRadixSort::SortPairs(d + L.temp, temp_bytes, (const unsigned *)(d + L.keys), (unsigned *)(d + L.sorted),
                                                    (const int64_t *)(d + L.pos), (int64_t *)(d + L.order), ni, 0, bits, s->compute));
    }
    tjc_k_csr_start<<<tjc_blocks(V + 1, TJC_THREADS), TJC_THREADS, 0, s->compute>>>((const unsigned *)(d + L.sorted), ni, V, (int64_t *)d);
    TJC_LAUNCHED(k, "tjc_k_csr_start");
    tjc_k_scatter_add<<<tjc_blocks(n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(k->in[0], k->it[0]->dt, k->out, k->ot.dt, (const int64_t *)d,
                                                                                (const int64_t *)(d + L.order), pre, V, post, ni);
    TJC_LAUNCHED(k, "tjc_k_scatter_add");
    return 0;
}
/* The same steps on the CPU, for tests: keys and positions, a stable LSD
   radix sort over the same bits (8 at a time; CUB's passes differ, its
   result is the same for a stable sort), start[] by the same lower bound.
   start has V + 1 entries, order ni (the positions of the block's rows
   [off, off + V) first); *first_bad is the first position out of [0, Vg)
   or -1. Returns 0, or 1 out of memory. */
extern "C" int tj_cuda_scatter_csr_host(const int32_t *idx, int64_t ni, int64_t off, int64_t V, int64_t Vg, int64_t *start, int64_t *order,
                                        int64_t *first_bad);
extern "C" int tj_cuda_scatter_csr_host(const int32_t *idx, int64_t ni, int64_t off, int64_t V, int64_t Vg, int64_t *start, int64_t *order,
                                        int64_t *first_bad) {
    int bits = tjc_csr_bits(V), shift;
    unsigned *keys = (unsigned *)TJ_MALLOC(sizeof(unsigned) * (size_t)(2 * ni + 1)), *k2 = keys + ni;
    int64_t *p2 = (int64_t *)TJ_MALLOC(sizeof(int64_t) * (size_t)(ni + 1)), j, v;
    if (!keys || !p2) {
        TJ_FREE(keys);
        TJ_FREE(p2);
        return 1;
    }
    *first_bad = -1;
    for (j = 0; j < ni; j++) {
        keys[j] = tjc_csr_key(idx[j], off, V);
        order[j] = j;
        if ((idx[j] < 0 || idx[j] >= Vg) && *first_bad < 0) *first_bad = j;
    }
    for (shift = 0; shift < bits; shift += 8) { /* one stable counting pass per digit */
        int64_t cnt[257] = {0};
        unsigned mask = bits - shift >= 8 ? 255u : (1u << (bits - shift)) - 1;
        for (j = 0; j < ni; j++) cnt[((keys[j] >> shift) & mask) + 1]++;
        for (j = 0; j < 256; j++) cnt[j + 1] += cnt[j];
        for (j = 0; j < ni; j++) {
            int64_t r = cnt[(keys[j] >> shift) & mask]++;
            k2[r] = keys[j];
            p2[r] = order[j];
        }
        memcpy(keys, k2, sizeof(unsigned) * (size_t)ni);
        memcpy(order, p2, sizeof(int64_t) * (size_t)ni);
    }
    for (v = 0; v <= V; v++) start[v] = tjc_csr_lower(keys, ni, v, V);
    TJ_FREE(keys);
    TJ_FREE(p2);
    return 0;
}
/* tj__k_take: take and scatter_add */
static int tjc_take(tjc_state *s, tj__kern *k) {
    const tj__type *xt = k->n->op == TJ__OP_TAKE ? k->it[0] : &k->ot;
    int ax = tj__axis_index(xt, k->n->a.axis);
    int64_t pre, V, post, ni = tj__numel(k->it[1]), n, off, Vg;
    const int32_t *idx = (const int32_t *)k->in[1];
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__ppv(xt, ax, &pre, &V, &post);
    tj__split_block(k, ax, V, &off, &Vg); /* rows [off, off + V) of Vg here */
    n = pre * ni * post;
    if (k->n->op == TJ__OP_TAKE) {
        if (k->it[0]->dt != k->ot.dt) return tjc_fail(k, "operand and result dtypes differ");
        if (tjc_check_begin(s, k)) return 1;
        tjc_k_take<<<tjc_blocks(n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(k->in[0], k->out, (int)tj_dtype_size(k->ot.dt), idx, pre, off, V, Vg,
                                                                             post, ni, s->d_errpos);
        TJC_LAUNCHED(k, "tjc_k_take");
        return tjc_index_check(s, k, idx, Vg);
    }
    return tjc_scatter_add(s, k, idx, pre, off, V, Vg, post, ni);
}
/* tj__k_one_hot */
static int tjc_one_hot(tjc_state *s, tj__kern *k) {
    int64_t n = tj__numel(&k->ot), V = k->ot.dim[k->ot.rank - 1];
    tjc_k_one_hot<<<tjc_blocks(n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>((const int32_t *)k->in[0], k->out, k->ot.dt, n, V);
    TJC_LAUNCHED(k, "tjc_k_one_hot");
    return 0;
}
/* tj__k_argm */
static int tjc_argm(tjc_state *s, tj__kern *k) {
    const tj__type *it = k->it[0];
    int op = k->n->op, part = op == TJ__OP_ARGMAX_PART || op == TJ__OP_ARGMIN_PART;
    int64_t ist[TJ_MAXDIM], m, off = 0, Vg;
    int ka = tj__axis_index(it, k->n->a.axis);
    tj__type rt = k->ot; /* the rows: a part's output without its _part (1 here) and _vi axes */
    tjc_argm_geo g;
    rt.rank -= part ? 2 : 0;
    m = tj__numel(&rt);
    tj__strides(it, ist);
    tj__strides(&rt, g.ost);
    g.rank = rt.rank;
    for (int i = 0; i < rt.rank; i++) g.st[i] = ist[tj__axis_index(it, rt.ax[i])], g.od[i] = rt.dim[i];
    if (part) tj__split_block(k, ka, it->dim[ka], &off, &Vg);
    tjc_k_argm<<<tjc_blocks(m, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(k->in[0], it->dt, k->out, m, it->dim[ka], ist[ka], g,
                                                                         op == TJ__OP_ARGMAX || op == TJ__OP_ARGMAX_PART, part, off);
    TJC_LAUNCHED(k, "tjc_k_argm");
    return 0;
}
/* tj__k_causal */
static int tjc_causal(tjc_state *s, tj__kern *k) {
    const tj__type *t = &k->ot;
    int qa = tj__axis_index(t, k->n->a.axis), ka = tj__axis_index(t, k->n->a.axis2);
    int64_t st[TJ_MAXDIM], n = tj__numel(t);
    if (qa < 0 || ka < 0) return tjc_fail(k, "axes not found");
    tj__strides(t, st);
    tjc_k_causal<<<tjc_blocks(n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(k->in[0], k->it[0]->dt, k->out, t->dt, n, st[qa], t->dim[qa], st[ka],
                                                                           t->dim[ka], k->n->a.s);
    TJC_LAUNCHED(k, "tjc_k_causal");
    return 0;
}
/* tj__k_slice, tj__k_pad, tj__k_concat: strided region copies */
static int tjc_slice(tjc_state *s, tj__kern *k) {
    int64_t st[TJ_MAXDIM];
    int ax = tj__axis_index(k->it[0], k->n->a.axis);
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__strides(k->it[0], st);
    return tjc_copy_region(s, k, k->in[0], k->it[0], k->n->a.start * st[ax], k->out, &k->ot, 0, k->ot.dim);
}
static int tjc_pad(tjc_state *s, tj__kern *k) {
    int64_t st[TJ_MAXDIM];
    int ax = tj__axis_index(&k->ot, k->n->a.axis);
    if (ax < 0) return tjc_fail(k, "axis not found");
    if (tjc_fill(s, k)) return 1;
    tj__strides(&k->ot, st);
    return tjc_copy_region(s, k, k->in[0], k->it[0], 0, k->out, &k->ot, k->n->a.start * st[ax], k->it[0]->dim);
}
static int tjc_concat(tjc_state *s, tj__kern *k) {
    int64_t st[TJ_MAXDIM], at = 0;
    int ax = tj__axis_index(&k->ot, k->n->a.axis), i;
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__strides(&k->ot, st);
    for (i = 0; i < k->nin; i++) {
        if (tjc_copy_region(s, k, k->in[i], k->it[i], 0, k->out, &k->ot, at * st[ax], k->it[i]->dim)) return 1;
        at += k->it[i]->dim[ax];
    }
    return 0;
}
/* Launch the fast row kernels when they apply: rows along the last axis
   (stride 1), f32 or bf16 operands; returns 1 if launched, 0 if the
   caller's general kernel is needed. rows and d as tjc_rowop computes them,
   dn of the d the op reduces (tj__xent_cols: cross-entropy's classes);
   lab / g NULL where the op has none. */
static int tjc_rows_fast(tjc_state *s, tj__kern *k, int64_t st, int64_t d, int64_t dn, int64_t rows, const int32_t *lab, const void *g, int gdt) {
    int op = k->n->op, xdt = k->it[0]->dt, odt = k->ot.dt, ce = op == TJ__OP_CROSS_ENTROPY || op == TJ__OP_CROSS_ENTROPY_GRAD;
    float eps = ce ? 0.f : (float)k->n->a.s;
    if (st != 1 || d < 1 || rows < 1) return 0;
    if ((xdt != TJ_F32 && xdt != TJ_BF16) || (odt != TJ_F32 && odt != TJ_BF16) || (g && gdt != TJ_F32 && gdt != TJ_BF16)) return 0;
    if (d <= TJC_WARP_ROW) {
        const int wpb = 8; /* warps per block */
        unsigned grid = tjc_blocks(rows, wpb);
        /* packs of 4: rows of a multiple of 4 elements, every buffer 16-byte aligned */
        int pack = d % 4 == 0 && ((uintptr_t)k->in[0] & 15) == 0 && ((uintptr_t)k->out & 15) == 0 && (!g || ((uintptr_t)g & 15) == 0);
#define TJC_ROW_WARP(NV, P) \
    tjc_k_row_warp<NV, P><<<grid, 32 * wpb, 0, s->compute>>>(k->in[0], xdt, lab, g, gdt, k->out, odt, op, rows, (int)d, (int)dn, eps, s->d_errpos)
        if (d <= 128) pack ? TJC_ROW_WARP(4, 4) : TJC_ROW_WARP(4, 1);
        else if (d <= 256) pack ? TJC_ROW_WARP(8, 4) : TJC_ROW_WARP(8, 1);
        else if (d <= 512) pack ? TJC_ROW_WARP(16, 4) : TJC_ROW_WARP(16, 1);
        else pack ? TJC_ROW_WARP(32, 4) : TJC_ROW_WARP(32, 1);
#undef TJC_ROW_WARP
        return 1;
    }
    if (!ce) return 0;
    tjc_k_xent_long<<<tjc_grid(rows), 512, 0, s->compute>>>(k->in[0], xdt, lab, g, gdt, k->out, odt, op == TJ__OP_CROSS_ENTROPY_GRAD, rows, d, dn, s->d_errpos);
    return 1;
}
/* tj__k_rowop: softmax, log_softmax, layer_norm */
static int tjc_rowop(tjc_state *s, tj__kern *k) {
    const tj__type *t = k->it[0];
    int ax = tj__axis_index(t, k->n->a.axis);
    int64_t st[TJ_MAXDIM], d, rows;
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__strides(t, st);
    d = t->dim[ax];
    rows = tj__numel(t) / d;
    if (tjc_rows_fast(s, k, st[ax], d, d, rows, NULL, NULL, 0)) {
        TJC_LAUNCHED(k, "tjc_k_row_warp");
        return 0;
    }
    if (t->dt == TJ_F64 || k->ot.dt == TJ_F64)
        tjc_k_rowop<double><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, k->out, k->ot.dt, k->n->op, rows, d, st[ax], k->n->a.s);
    else
        tjc_k_rowop<float><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, k->out, k->ot.dt, k->n->op, rows, d, st[ax],
                                                                        (float)k->n->a.s);
    TJC_LAUNCHED(k, "tjc_k_rowop");
    return 0;
}
/* tj__k_rowop: cross_entropy */
static int tjc_cross_entropy(tjc_state *s, tj__kern *k) {
    const tj__type *t = k->it[0];
    int ax = tj__axis_index(t, k->n->a.axis);
    int64_t st[TJ_MAXDIM], d, dn, rows;
    const int32_t *lab = (const int32_t *)k->in[1];
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__strides(t, st);
    d = t->dim[ax];
    rows = tj__numel(t) / d;
    dn = tj__xent_cols(k, d, 0);
    if (tjc_check_begin(s, k)) return 1;
    if (tjc_rows_fast(s, k, st[ax], d, dn, rows, lab, NULL, 0)) {
        TJC_LAUNCHED(k, "tjc_k_row_warp / tjc_k_xent_long");
        return tjc_index_check(s, k, lab, dn);
    }
    if (t->dt == TJ_F64 || k->ot.dt == TJ_F64)
        tjc_k_cross_entropy<double><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, lab, k->out, k->ot.dt, rows, d, dn, st[ax], s->d_errpos);
    else
        tjc_k_cross_entropy<float><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, lab, k->out, k->ot.dt, rows, d, dn, st[ax], s->d_errpos);
    TJC_LAUNCHED(k, "tjc_k_cross_entropy");
    return tjc_index_check(s, k, lab, dn);
}

/* tj__k_rowop: softmax_grad, layer_norm_grad, cross_entropy_grad */
static int tjc_row_grad(tjc_state *s, tj__kern *k) {
    const tj__type *t = k->it[0];
    int ax = tj__axis_index(t, k->n->a.axis), ce = k->n->op == TJ__OP_CROSS_ENTROPY_GRAD, gi = k->nin - 1;
    int64_t st[TJ_MAXDIM], d, dn, rows;
    const int32_t *lab = ce ? (const int32_t *)k->in[1] : NULL;
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__strides(t, st);
    d = t->dim[ax];
    rows = tj__numel(t) / d;
    dn = tj__xent_cols(k, d, 0);
    if (ce && tjc_check_begin(s, k)) return 1;
    if (tjc_rows_fast(s, k, st[ax], d, dn, rows, lab, k->in[gi], k->it[gi]->dt)) {
        TJC_LAUNCHED(k, "tjc_k_row_warp / tjc_k_xent_long");
        return ce ? tjc_index_check(s, k, lab, dn) : 0;
    }
    if (t->dt == TJ_F64 || k->ot.dt == TJ_F64)
        tjc_k_row_grad<double><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, lab, k->in[gi], k->it[gi]->dt, k->out, k->ot.dt, k->n->op, rows,
                                                                             d, dn, st[ax], ce ? 0.0 : k->n->a.s, s->d_errpos);
    else
        tjc_k_row_grad<float><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, lab, k->in[gi], k->it[gi]->dt, k->out, k->ot.dt, k->n->op, rows,
                                                                            d, dn, st[ax], ce ? 0.f : (float)k->n->a.s, s->d_errpos);
    TJC_LAUNCHED(k, "tjc_k_row_grad");
    return ce ? tjc_index_check(s, k, lab, dn) : 0;
}

/* tj__k_rowop: cross_entropy_part and cross_entropy_part_grad (the class
   axis split over devices: this device's block of classes). f64 logits
   compute in double, f32 and bf16 in float. */
static int tjc_xent_part(tjc_state *s, tj__kern *k) {
    const tj__type *t = k->it[0];
    int ax = tj__axis_index(t, k->n->a.axis), grad = k->n->op == TJ__OP_XENT_PART_GRAD;
    int64_t st[TJ_MAXDIM], d, rows, off, Vg;
    const int32_t *lab = (const int32_t *)k->in[1];
    const void *sv = grad ? k->in[2] : NULL, *g = grad ? k->in[3] : NULL;
    int sdt = grad ? k->it[2]->dt : 0, gdt = grad ? k->it[3]->dt : 0;
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__strides(t, st);
    d = t->dim[ax];
    rows = d ? tj__numel(t) / d : 0;
    tj__split_block(k, ax, d, &off, &Vg);
    Vg = tj__xent_classes(k->n, Vg); /* tj_cross_entropy_padded: the classes that take part */
    if (tjc_check_begin(s, k)) return 1;
    if (t->dt == TJ_F64)
        tjc_k_xent_part<double><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, lab, sv, sdt, g, gdt, k->out, k->ot.dt, rows, d, st[ax], off,
                                                                              Vg, s->d_errpos);
    else
        tjc_k_xent_part<float><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, lab, sv, sdt, g, gdt, k->out, k->ot.dt, rows, d, st[ax], off,
                                                                             Vg, s->d_errpos);
    TJC_LAUNCHED(k, "tjc_k_xent_part");
    return tjc_index_check(s, k, lab, Vg);
}

/* ---- attention (tj_attention, tinyjax.h [5] "attention (flash-style)") ----
   Two paths. Path 1, below, computes what the CPU kernels compute (their
   formulas, one key or query at a time where the CPU goes by tiles) for
   every dtype and size (dim, dim' up to the builder's 256, which the
   launchers check): one warp per row, the row spread over the lanes
   (element lane + 32 i in slot i, 2 or 8 slots), each dot a warp sum. The
   forward keeps the CPU's online softmax per query (a running max m and
   sum, the output accumulated and rescaled when m grows) with its NaN
   rules; the backward computes D_i = d_out_i . out_i, then dk and dv by key
   rows, then dq by query rows: every output row is summed by one warp in a
   fixed order, so runs give the same bits, with no atomics. f32 and bf16
   compute in float, f64 in double, as the CPU. Rows are visited
   grid-stride with 64-bit offsets (any number of rows, a 1-D grid).
   Path 2 (the flash kernels, after this) takes dim = dim' of 64 or 128 on
   tensor cores: bf16, f32 as TF32 with TJ_CUDA_TF32=1, and f32 as 3xTF32
   otherwise (since 2026-11-24, session 22; f32 had taken path 1 before,
   13x slower than the composed form on the H100). Both paths ran on an
   H100 on 2026-11-24 (session 20); the 3xTF32 kernels have not yet, only
   their host emulation. */
#define TJC_ATT_WPB 4 /* warps per block */
typedef struct {
    int64_t nb, tq, tk, d, dv; /* batch rows, queries, keys, dim, dim' (tj__attn_init) */
    int64_t nbk, grp;          /* k's and v's batch rows; q's row b uses their row b / grp */
    double scale;
    int causal, dt, ldt;       /* input dtype; lse's (and D's): f32, f64 for f64 */
    const int32_t *mask;       /* NULL, or the mask: as tj__attn's (tj__attn_mrow) */
    int64_t mq, mk, bdim[TJ_MAXDIM], bst[TJ_MAXDIM];
    int nbd;
} tjc_att;
TJC_PARAMS_FIT(tjc_att);
static void tjc_att_of(const tj__kern *k, tjc_att *a) {
    tj__attn x;
    tj__attn_init(k, &x);
    a->nb = x.nb, a->tq = x.tq, a->tk = x.tk, a->d = x.d, a->dv = x.dv;
    a->nbk = x.nbk, a->grp = x.grp;
    a->mask = x.mask, a->mq = x.mq, a->mk = x.mk, a->nbd = x.nbd;
    for (int i = 0; i < TJ_MAXDIM; i++) a->bdim[i] = x.bdim[i], a->bst[i] = x.bst[i];
    a->scale = x.scale;
    a->causal = x.causal;
    a->dt = k->it[0]->dt;
    a->ldt = a->dt == TJ_F64 ? TJ_F64 : TJ_F32;
}
/* mask element (q's batch row b, query i, key j): nonzero = attend (tj__attn_mrow) */
__device__ __forceinline__ int tjc_att_seen(const tjc_att &a, int64_t b, int64_t i, int64_t j) {
    int64_t off = i * a.mq + j * a.mk;
    for (int d = a.nbd - 1; d >= 0; d--) off += b % a.bdim[d] * a.bst[d], b /= a.bdim[d];
    return a.mask[off] != 0;
}
#define TJC_ATT_MASKED (-0.7 * 3.4028234663852886e38) /* TJ__ATTN_MASKED: a masked pair's score (JAX's large negative) */
/* the keys query i sees (tj__attn_nkeys) */
__host__ __device__ static inline int64_t tjc_att_nkeys(const tjc_att *a, int64_t i) { return a->causal ? (i + 1 < a->tk ? i + 1 : a->tk) : a->tk; }
template <typename T>
__device__ __forceinline__ T tjc_att_wsum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); /* every lane ends with the same bits */
    return v;
}
/* this lane's slots of row `base` (n elements), 0 past the end */
template <typename T, int NV>
__device__ __forceinline__ void tjc_att_row(const void *p, int dt, int64_t base, int64_t n, int lane, T *x) {
#pragma unroll
    for (int i = 0; i < NV; i++) x[i] = lane + 32 * i < n ? tjc_ld<T>(p, dt, base + lane + 32 * i) : (T)0;
}
template <typename T, int NV>
__device__ __forceinline__ void tjc_att_store(void *p, int dt, int64_t base, int64_t n, int lane, const T *x) {
#pragma unroll
    for (int i = 0; i < NV; i++)
        if (lane + 32 * i < n) tjc_st<T>(p, dt, base + lane + 32 * i, x[i]);
}
template <typename T, int NV>
__device__ __forceinline__ T tjc_att_dot(const T *x, const T *y) {
    T s = 0;
#pragma unroll
    for (int i = 0; i < NV; i++) s += x[i] * y[i];
    return tjc_att_wsum(s);
}
#define TJC_ATT_ROWS(r, rows) \
    for (int64_t r = blockIdx.x * (int64_t)TJC_ATT_WPB + (threadIdx.x >> 5); r < (rows); r += (int64_t)gridDim.x * TJC_ATT_WPB)
/* forward: out and lse of query row r = b tq + i */
template <typename T, int NV>
__global__ void __launch_bounds__(32 * TJC_ATT_WPB) tjc_k_att_fwd(tjc_att a, const void *q, const void *k, const void *v, void *out, void *lse) {
    const int lane = threadIdx.x & 31;
    TJC_ATT_ROWS(r, a.nb * a.tq) {
        int64_t b = r / a.tq, nk = tjc_att_nkeys(&a, r % a.tq);
        T qi[NV], kj[NV], vj[NV], acc[NV], m = -INFINITY, sum = 0, ls;
        int nan = 0;
        tjc_att_row<T, NV>(q, a.dt, r * a.d, a.d, lane, qi);
#pragma unroll
        for (int i = 0; i < NV; i++) acc[i] = 0;
        for (int64_t j = 0; j < nk && !nan; j++) { /* s is the same in every lane: the branches are the warp's */
            tjc_att_row<T, NV>(k, a.dt, (b / a.grp * a.tk + j) * a.d, a.d, lane, kj);
            T s = (T)a.scale * tjc_att_dot<T, NV>(qi, kj), p;
            if (a.mask && !tjc_att_seen(a, b, r % a.tq, j)) s = (T)TJC_ATT_MASKED; /* (a NaN score there is gone too) */
            if (s != s) nan = 1;
            if (nan) continue;
            if (s > m) { /* a new max: rescale what was summed so far */
                T cr = m == -INFINITY ? (T)0 : tjc_exp(m - s);
                sum *= cr;
#pragma unroll
                for (int i = 0; i < NV; i++) acc[i] *= cr;
                m = s;
            }
            /* a visible key of score -inf weighs 0 but still multiplies its
               value (0 inf is NaN), as on the CPU and in JAX */
            p = s == -INFINITY ? (T)0 : tjc_exp(s - m);
            sum += p;
            tjc_att_row<T, NV>(v, a.dt, (b / a.grp * a.tk + j) * a.dv, a.dv, lane, vj);
#pragma unroll
            for (int i = 0; i < NV; i++) acc[i] += p * vj[i];
        }
        if (a.mask && !nan && m == (T)TJC_ATT_MASKED) { /* every key masked: the mean of v over ALL keys, lse +inf (the CPU's rule) */
            T inv = (T)1 / (T)a.tk;
#pragma unroll
            for (int i = 0; i < NV; i++) acc[i] = 0;
            for (int64_t j = 0; j < a.tk; j++) {
                tjc_att_row<T, NV>(v, a.dt, (b / a.grp * a.tk + j) * a.dv, a.dv, lane, vj);
#pragma unroll
                for (int i = 0; i < NV; i++) acc[i] += inv * vj[i];
            }
            ls = (T)INFINITY;
        } else if (nan || sum == 0 || m == INFINITY) { /* a NaN score, no finite score, or an infinite one: NaN, as softmax gives */
#pragma unroll
            for (int i = 0; i < NV; i++) acc[i] = (T)NAN;
            ls = (T)NAN;
        } else {
#pragma unroll
            for (int i = 0; i < NV; i++) acc[i] /= sum;
            ls = m + tjc_log(sum);
        }
        tjc_att_store<T, NV>(out, a.dt, r * a.dv, a.dv, lane, acc);
        if (lane == 0) tjc_st<T>(lse, a.ldt, r, ls);
    }
}
/* backward, first: D_r = d_out_r . out_r into dl (T per query row) */
template <typename T>
__global__ void __launch_bounds__(32 * TJC_ATT_WPB) tjc_k_att_dl(tjc_att a, const void *out, const void *g, T *dl) {
    const int lane = threadIdx.x & 31;
    TJC_ATT_ROWS(r, a.nb * a.tq) {
        T s = 0;
        for (int64_t c = lane; c < a.dv; c += 32) s += tjc_ld<T>(g, a.dt, r * a.dv + c) * tjc_ld<T>(out, a.dt, r * a.dv + c);
        s = tjc_att_wsum(s);
        if (lane == 0) dl[r] = s;
    }
}
/* ds = P (dP - D) (and P in *p) of query row qr with key row kj, vj */
template <typename T, int NV>
__device__ __forceinline__ T tjc_att_ds(const tjc_att &a, const T *qi, const T *gi, const T *kj, const T *vj, const void *lse, const T *dl, int64_t qr, int64_t j,
                                        T *p) {
    T s = (T)a.scale * tjc_att_dot<T, NV>(qi, kj), dp = tjc_att_dot<T, NV>(gi, vj);
    if (a.mask && !tjc_att_seen(a, qr / a.tq, qr % a.tq, j)) return *p = 0, (T)0; /* a masked pair: P 0, no gradient (the CPU's rule) */
    *p = tjc_exp(s - tjc_ld<T>(lse, a.ldt, qr));
    return *p * (dp - dl[qr]);
}
/* backward, second: dk and dv of key row r = b tk + j, over the queries that
   see it in q's batch rows b grp .. b grp + grp - 1 */
template <typename T, int NV>
__global__ void __launch_bounds__(32 * TJC_ATT_WPB) tjc_k_att_dkv(tjc_att a, const void *q, const void *k, const void *v, const void *lse, const void *g,
                                                                 const T *dl, void *dk, void *dv) {
    const int lane = threadIdx.x & 31;
    TJC_ATT_ROWS(r, a.nbk * a.tk) {
        int64_t b = r / a.tk, j = r % a.tk;
        T kj[NV], vj[NV], qi[NV], gi[NV], sk[NV], sv[NV];
        tjc_att_row<T, NV>(k, a.dt, r * a.d, a.d, lane, kj);
        tjc_att_row<T, NV>(v, a.dt, r * a.dv, a.dv, lane, vj);
#pragma unroll
        for (int i = 0; i < NV; i++) sk[i] = sv[i] = 0;
        for (int64_t h = 0; h < a.grp; h++)
        for (int64_t i = a.causal ? j : 0; i < a.tq; i++) {
            int64_t qr = (b * a.grp + h) * a.tq + i;
            T p, ds;
            tjc_att_row<T, NV>(q, a.dt, qr * a.d, a.d, lane, qi);
            tjc_att_row<T, NV>(g, a.dt, qr * a.dv, a.dv, lane, gi);
            ds = tjc_att_ds<T, NV>(a, qi, gi, kj, vj, lse, dl, qr, j, &p);
#pragma unroll
            for (int c = 0; c < NV; c++) {
                sv[c] += p * gi[c];
                sk[c] += ds * qi[c];
            }
        }
        if (a.mask) /* the fully masked query rows (lse +inf): P = 1 / tk at every key */
            for (int64_t h = 0; h < a.grp; h++)
                for (int64_t i = 0; i < a.tq; i++) {
                    int64_t qr = (b * a.grp + h) * a.tq + i;
                    if (tjc_ld<T>(lse, a.ldt, qr) != (T)INFINITY) continue;
                    tjc_att_row<T, NV>(g, a.dt, qr * a.dv, a.dv, lane, gi);
#pragma unroll
                    for (int c = 0; c < NV; c++) sv[c] += (T)1 / (T)a.tk * gi[c];
                }
#pragma unroll
        for (int c = 0; c < NV; c++) sk[c] *= (T)a.scale;
        tjc_att_store<T, NV>(dk, a.dt, r * a.d, a.d, lane, sk);
        tjc_att_store<T, NV>(dv, a.dt, r * a.dv, a.dv, lane, sv);
    }
}
/* backward, third: dq of query row r, over the keys it sees */
template <typename T, int NV>
__global__ void __launch_bounds__(32 * TJC_ATT_WPB) tjc_k_att_dq(tjc_att a, const void *q, const void *k, const void *v, const void *lse, const void *g,
                                                                const T *dl, void *dq) {
    const int lane = threadIdx.x & 31;
    TJC_ATT_ROWS(r, a.nb * a.tq) {
        int64_t b = r / a.tq, nk = tjc_att_nkeys(&a, r % a.tq);
        T qi[NV], gi[NV], kj[NV], vj[NV], sq[NV];
        tjc_att_row<T, NV>(q, a.dt, r * a.d, a.d, lane, qi);
        tjc_att_row<T, NV>(g, a.dt, r * a.dv, a.dv, lane, gi);
#pragma unroll
        for (int c = 0; c < NV; c++) sq[c] = 0;
        for (int64_t j = 0; j < nk; j++) {
            T p, ds;
            tjc_att_row<T, NV>(k, a.dt, (b / a.grp * a.tk + j) * a.d, a.d, lane, kj);
            tjc_att_row<T, NV>(v, a.dt, (b / a.grp * a.tk + j) * a.dv, a.dv, lane, vj);
            ds = tjc_att_ds<T, NV>(a, qi, gi, kj, vj, lse, dl, r, j, &p);
#pragma unroll
            for (int c = 0; c < NV; c++) sq[c] += ds * kj[c];
        }
#pragma unroll
        for (int c = 0; c < NV; c++) sq[c] *= (T)a.scale;
        tjc_att_store<T, NV>(dq, a.dt, r * a.d, a.d, lane, sq);
    }
}
#undef TJC_ATT_ROWS
/* launch path 1's kernel KERN for T and the slots per lane that max(d, dv)
   needs (at most TJ__ATTN_MAXD, checked before: 8 slots) */
static_assert(TJ__ATTN_MAXD <= 8 * 32, "path 1's rows: at most 8 slots per lane");
#define TJC_ATT_LAUNCH(KERN, T, a, rows, ...)                                                                   \
    do {                                                                                                        \
        unsigned g_ = tjc_blocks(rows, TJC_ATT_WPB);                                                            \
        int64_t w_ = (a).d > (a).dv ? (a).d : (a).dv;                                                           \
        if (w_ <= 64) KERN<T, 2><<<g_, 32 * TJC_ATT_WPB, 0, s->compute>>>(a, __VA_ARGS__);                      \
        else KERN<T, 8><<<g_, 32 * TJC_ATT_WPB, 0, s->compute>>>(a, __VA_ARGS__);                               \
        TJC_LAUNCHED(k, #KERN);                                                                                 \
    } while (0)

/* ---- attention, path 2: flash kernels on tensor cores (bf16, or f32 as TF32 or 3xTF32; dim = dim' of 64 or 128) ----
   FlashAttention-2's tiling with mma.sync (f32 sums; sm_80 and newer): bf16
   inputs through m16n8k16, f32 inputs through m16n8k8 on TF32 (their
   mantissas rounded to 10 bits, to nearest, ties away) when TJ_CUDA_TF32=1
   allows it as for dots, else each f32 product as three TF32 ones
   (tjc_fa_fmt_f32x3: about f32's accuracy). A block of 4 warps
   owns 64 rows of one batch row (the forward and dq: queries; dk/dv: keys),
   16 rows per warp, and walks the other side in tiles of 64 that it stages
   in shared memory:
     forward  S = Q K^T, the online softmax in registers (per row: running
              max m and sum l; a larger max rescales l and O by
              exp(m_old - m_new)), P rounded to the input format, O += P V;
              at the end out = O / l and lse = m + log l.
     dk, dv   per key block, over the query tiles that see it: P^T from
              lse, dP^T = V dO^T, dS^T = P^T (dP^T - D), dV += P^T dO,
              dK += dS^T Q (P and dS rounded), dK scaled at the end.
     dq       per query block, over the key tiles it sees: P, dP = dO V^T,
              dS, dQ += dS K.
   D comes from path 1's kernel. Each output row is summed by one warp in a
   fixed order: deterministic, no atomics. Causal tiles wholly above the
   diagonal are skipped; the diagonal tile and the ragged edges (rows past
   tq or tk) are masked element by element. A masked pair must not meet at
   all (the CPU's rule: an inf or NaN that a query does not see changes
   nothing), but the tensor cores' P V and kin multiply it with a weight of
   0, and 0 inf is NaN: so a diagonal tile whose staged V (forward), Q or
   dO (dk, dv) or K (dq) holds an inf or NaN takes that product term by
   term over the pairs that meet (tjc_fa_pgemm_met; rare, and slower).

   Fragments (PTX ISA, "matrix fragments for mma.m16n8k16" and "m16n8k8",
   g = lane / 4, t = lane % 4, E values per 32-bit register: 2 for bf16, 1
   for TF32, so k = 8 E): A (16 x k) register r holds row g + 8 (r & 1),
   columns E t + 4 E (r >> 1) (+ 1 for bf16's second value); B (k x 8)
   register r rows E t + 4 E r (+ 1), column g; C (16 x 8) element e sits
   at row g + 8 (e >> 1), column 2t + (e & 1). For bf16 the C fragments of
   two adjacent 8-column tiles of S are, rounded, the A fragment of P for
   the next product; for TF32 each lane takes its two values of P from the
   lanes of its quad that hold them (shuffles), again without a trip
   through shared memory.

   Testing without a GPU: every step below is __host__ __device__ and is
   written for L lanes at once, L = 1 on the device (this thread's lane)
   and L = 32 on the host, where tjc_fa_mma multiplies the fragments as
   matrices (rebuilt through the layout above) and the quad reductions and
   shuffles index the other lanes. tj_cuda_attention_host runs the kernels'
   code that way, block by block, warp by warp, and test_cuda compares it
   with the CPU op. What that cannot check is the layout itself against the
   hardware, the PTX, and the shared-memory timing: that needs a GPU run
   (test_cuda's GPU part): bf16 and TF32 passed on an H100 (2026-11-24). */
#define TJC_FA_ROWS 64 /* rows per block (4 warps x 16) and per tile of the other side */
#define TJC_FA_WARPS 4
__host__ __device__ static inline float tjc_fa_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
__host__ __device__ static inline uint32_t tjc_fa_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
/* float to bf16 bits, to nearest even (tj_f32_to_bf16 on the host) */
__host__ __device__ static inline uint16_t tjc_fa_bf16(float x) {
#ifdef __CUDA_ARCH__
    __nv_bfloat16 h = __float2bfloat16_rn(x);
    return *(uint16_t *)&h;
#else
    return tj_f32_to_bf16(x);
#endif
}
/* float to TF32 (kept in a float): 10 mantissa bits, to nearest, ties away
   from zero (cvt.rna.tf32.f32), the same bit steps on both sides */
__host__ __device__ static inline float tjc_fa_round_tf32(float x) {
    uint32_t u = tjc_fa_f32_bits(x);
    if ((u & 0x7f800000u) == 0x7f800000u) /* inf as it is; a NaN as the quiet NaN (the tensor core reads 19 bits: a payload in the rest alone would read as inf) */
        return u & 0x007fffffu ? tjc_fa_bits_f32(0x7fc00000u | (u & 0x80000000u)) : x;
    return tjc_fa_bits_f32((u + 0x1000u) & 0xffffe000u);
}
/* The two input formats. E: the element in memory; EPR: values per
   register; PAD: elements of padding per shared row (16 bytes: the 8 rows
   of a fragment start in different banks); stage: what shared memory
   holds of an input element; out: an output element from a float; val: an
   input element as a float; reg: the register whose first value is at p
   (the second, for bf16, at p + next); dec: value h of a register; rnd: a
   float rounded to the format (as P and dS go into a product). */
struct tjc_fa_fmt_bf16 {
    typedef uint16_t E;
    enum { EPR = 2, PAD = 8, SPLIT = 0 };
    __host__ __device__ static E stage(E x) { return x; }
    __host__ __device__ static E out(float x) { return tjc_fa_bf16(x); }
    __host__ __device__ static float val(E x) { return tjc_fa_bits_f32((uint32_t)x << 16); }
    __host__ __device__ static uint32_t reg(const E *p, int next) {
#ifdef __CUDA_ARCH__
        if (next == 1) return *(const uint32_t *)p; /* 4-byte aligned: even columns, even pitches */
#endif
        return (uint32_t)p[0] | (uint32_t)p[next] << 16;
    }
    __host__ __device__ static float dec(uint32_t r, int h) { return val((E)(r >> 16 * h)); }
    __host__ __device__ static float rnd(float x) { return val(out(x)); }
};
struct tjc_fa_fmt_tf32 {
    typedef float E;
    enum { EPR = 1, PAD = 4, SPLIT = 0 };
    __host__ __device__ static E stage(E x) { return tjc_fa_round_tf32(x); }
    __host__ __device__ static E out(float x) { return x; }
    __host__ __device__ static float val(E x) { return x; }
    __host__ __device__ static uint32_t reg(const E *p, int next) { return (void)next, tjc_fa_f32_bits(p[0]); }
    __host__ __device__ static float dec(uint32_t r, int h) { return (void)h, tjc_fa_bits_f32(r); }
    __host__ __device__ static float rnd(float x) { return tjc_fa_round_tf32(x); }
};
/* f32 without TF32's rounding (the default for f32): staged, P and dS kept
   as f32, and each product of fragments a b taken on the TF32 tensor
   cores as three, a_lo b_hi + a_hi b_lo + a_hi b_hi, where x_hi is x
   rounded to TF32 and x_lo the rest rounded to TF32 (tjc_fa_split): 22 of
   f32's 24 significant bits of each operand, the a_lo b_lo term (below
   2^-22 of the product) dropped, f32 sums ("3xTF32", as CUTLASS's
   emulation of f32 products). Three times TF32's tensor-core work. */
struct tjc_fa_fmt_f32x3 {
    typedef float E;
    enum { EPR = 1, PAD = 4, SPLIT = 1 };
    __host__ __device__ static E stage(E x) { return x; }
    __host__ __device__ static E out(float x) { return x; }
    __host__ __device__ static float val(E x) { return x; }
    __host__ __device__ static uint32_t reg(const E *p, int next) { return (void)next, tjc_fa_f32_bits(p[0]); }
    __host__ __device__ static float dec(uint32_t r, int h) { return (void)h, tjc_fa_bits_f32(r); }
    __host__ __device__ static float rnd(float x) { return x; }
};
/* a register's f32 value as TF32 hi + lo, and hc: hi for the cross terms,
   0 where hi is inf or NaN (lo is 0 there too), so that only hi hi meets
   an inf or NaN, as on TF32 (else 0 inf or inf - inf would make a NaN
   where the CPU has inf or a finite value: found in review, session 22);
   a finite x that TF32 rounds up to inf keeps its truncated hi */
__host__ __device__ static __forceinline__ void tjc_fa_split(uint32_t r, uint32_t *hi, uint32_t *hc, uint32_t *lo) {
    float x = tjc_fa_bits_f32(r), h = tjc_fa_round_tf32(x);
    if (h - h != 0.f && x - x == 0.f) h = tjc_fa_bits_f32(r & 0xffffe000u); /* finite x rounded up to inf: truncated */
    const int fin = h - h == 0.f;
    *hi = tjc_fa_f32_bits(h);
    *hc = fin ? *hi : 0u; /* hi in the cross terms: 0 for inf and NaN, so that only hi hi meets them */
    *lo = fin ? tjc_fa_f32_bits(tjc_fa_round_tf32(x - h)) : 0u; /* (x - h is exact) */
}
#define TJC_FA_E typename F::E /* F's element, in the templates below */
/* where a fragment's values sit (the layout above; e: values per register) */
__host__ __device__ static inline int tjc_fa_arow(int lane, int r) { return (lane >> 2) + 8 * (r & 1); }
__host__ __device__ static inline int tjc_fa_acol(int lane, int r, int e) { return e * (lane & 3) + 4 * e * (r >> 1); }
__host__ __device__ static inline int tjc_fa_brow(int lane, int r, int e) { return e * (lane & 3) + 4 * e * r; }
__host__ __device__ static inline int tjc_fa_bcol(int lane) { return lane >> 2; }
__host__ __device__ static inline int tjc_fa_crow(int lane, int e) { return (lane >> 2) + 8 * (e >> 1); }
__host__ __device__ static inline int tjc_fa_ccol(int lane, int e) { return 2 * (lane & 3) + (e & 1); }
/* c += a b for the L lanes: the tensor-core instruction on the device, the
   product of the rebuilt matrices (k in order) on the host */
template <class F, int L>
__host__ __device__ static __forceinline__ void tjc_fa_mma1(float (*c)[4], const uint32_t (*a)[4], const uint32_t (*b)[2]) {
#ifdef __CUDA_ARCH__
#if __CUDA_ARCH__ >= 800
    if (F::EPR == 2)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0][0]), "+f"(c[0][1]), "+f"(c[0][2]), "+f"(c[0][3])
                     : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "r"(b[0][0]), "r"(b[0][1]));
    else
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0][0]), "+f"(c[0][1]), "+f"(c[0][2]), "+f"(c[0][3])
                     : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "r"(b[0][0]), "r"(b[0][1]));
#else
    __trap(); /* never launched below sm_80 (tjc_fa_applies) */
#endif
#else
    const int K = 8 * F::EPR;
    float A[16][16], B[16][8];
    for (int l = 0; l < L; l++) {
        for (int r = 0; r < 4; r++)
            for (int h = 0; h < F::EPR; h++) A[tjc_fa_arow(l, r)][tjc_fa_acol(l, r, F::EPR) + h] = F::dec(a[l][r], h);
        for (int r = 0; r < 2; r++)
            for (int h = 0; h < F::EPR; h++) B[tjc_fa_brow(l, r, F::EPR) + h][tjc_fa_bcol(l)] = F::dec(b[l][r], h);
    }
    for (int l = 0; l < L; l++)
        for (int e = 0; e < 4; e++) {
            float s = 0;
            for (int x = 0; x < K; x++) s += A[tjc_fa_crow(l, e)][x] * B[x][tjc_fa_ccol(l, e)];
            c[l][e] += s;
        }
#endif
}
/* the same, or three products for a SPLIT format */
template <class F, int L>
__host__ __device__ static __forceinline__ void tjc_fa_mma(float (*c)[4], const uint32_t (*a)[4], const uint32_t (*b)[2]) {
    if (F::SPLIT) { /* three TF32 products, the small ones first */
        uint32_t ah[L][4], ac[L][4], al[L][4], bh[L][2], bc[L][2], bl[L][2];
        for (int x = 0; x < L; x++) {
            for (int r = 0; r < 4; r++) tjc_fa_split(a[x][r], &ah[x][r], &ac[x][r], &al[x][r]);
            for (int r = 0; r < 2; r++) tjc_fa_split(b[x][r], &bh[x][r], &bc[x][r], &bl[x][r]);
        }
        tjc_fa_mma1<tjc_fa_fmt_tf32, L>(c, al, bc);
        tjc_fa_mma1<tjc_fa_fmt_tf32, L>(c, ac, bl);
        tjc_fa_mma1<tjc_fa_fmt_tf32, L>(c, ah, bh);
        return;
    }
    tjc_fa_mma1<F, L>(c, a, b);
}
/* c[.][n] += a b: the n-th 8-column tile of an accumulator of N tiles */
template <class F, int L, int N>
__host__ __device__ static __forceinline__ void tjc_fa_mma_at(float (*c)[N][4], int n, const uint32_t (*a)[4], const uint32_t (*b)[2]) {
    float t[L][4];
    for (int x = 0; x < L; x++)
        for (int e = 0; e < 4; e++) t[x][e] = c[x][n][e];
    tjc_fa_mma<F, L>(t, a, b);
    for (int x = 0; x < L; x++)
        for (int e = 0; e < 4; e++) c[x][n][e] = t[x][e];
}
/* the 4 lanes of a quad (one row of C) combine v: max (NaN-free inputs) or sum */
template <int L>
__host__ __device__ static inline void tjc_fa_quad(float *v, int ismax) {
#ifdef __CUDA_ARCH__
    for (int o = 1; o < 4; o <<= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v[0], o);
        v[0] = ismax ? fmaxf(v[0], w) : v[0] + w;
    }
#else
    for (int o = 1; o < 4; o <<= 1) {
        float w[32];
        for (int l = 0; l < L; l++) w[l] = v[l ^ o];
        for (int l = 0; l < L; l++) v[l] = ismax ? fmaxf(v[l], w[l]) : v[l] + w[l];
    }
#endif
}
/* the lane number of slot x */
__host__ __device__ static inline int tjc_fa_lane(int x) {
#ifdef __CUDA_ARCH__
    (void)x;
    return threadIdx.x & 31;
#else
    return x;
#endif
}
/* Stage rows [r0, r0 + 64) of a [rows, D] matrix in shared memory (pitch
   D + PAD), zeros past `rows`: thread `tid` of `nt` copies elements. With
   `check`, returns whether one of them was an inf or NaN (0 without).
   Where src is 16-byte aligned (every row then is: D elements are 128 to
   512 bytes, and so is every staged row's pitch) a thread moves 16 bytes
   at a time (8 bf16 or 4 f32), one load and one store instead of 8 or 4;
   else an element at a time. Both give the same staged bits. */
template <class F, int D>
__host__ __device__ static inline int tjc_fa_stage(typename F::E *sh, const typename F::E *src, int64_t r0, int64_t rows, int tid, int nt, int check = 0) {
    typedef typename F::E E;
    enum { V = 16 / sizeof(E), DV = D / V }; /* elements per 16 bytes, 16-byte pieces per row */
    int nf = 0;
    if (!((uintptr_t)src & 15)) {
        for (int i = tid; i < TJC_FA_ROWS * DV; i += nt) {
            const int r = i / DV, c = i % DV * V;
            union {
                uint4 u;
                E e[V];
            } w;
            if (r0 + r < rows) {
#ifdef __CUDA_ARCH__
                w.u = *(const uint4 *)(src + (r0 + r) * D + c);
#else
                memcpy(&w, src + (r0 + r) * D + c, 16);
#endif
            } else
                w.u = make_uint4(0, 0, 0, 0);
            for (int j = 0; j < V; j++) {
                w.e[j] = F::stage(w.e[j]);
                if (check) nf |= !(F::val(w.e[j]) - F::val(w.e[j]) == 0.f);
            }
#ifdef __CUDA_ARCH__
            *(uint4 *)(sh + r * (D + F::PAD) + c) = w.u;
#else
            memcpy(sh + r * (D + F::PAD) + c, &w, 16);
#endif
        }
        return nf;
    }
    for (int i = tid; i < TJC_FA_ROWS * D; i += nt) {
        int r = i / D, c = i % D;
        E x = r0 + r < rows ? F::stage(src[(r0 + r) * D + c]) : (E)0;
        sh[r * (D + F::PAD) + c] = x;
        if (check) nf |= !(F::val(x) - F::val(x) == 0.f);
    }
    return nf;
}
/* one 64-element vector (lse or D of a tile's rows) in shared memory; 0 past `rows` */
__host__ __device__ static inline void tjc_fa_stage_vec(float *sh, const float *src, int64_t r0, int64_t rows, int tid, int nt) {
    for (int i = tid; i < TJC_FA_ROWS; i += nt) sh[i] = r0 + i < rows ? src[r0 + i] : 0.f;
}
/* The A fragments of rows [w0, w0 + 16) of a staged matrix, k step kk: L lanes */
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_afrag(const typename F::E *sh, int w0, int kk, uint32_t (*a)[4]) {
    for (int x = 0; x < L; x++) {
        int lane = tjc_fa_lane(x);
        for (int r = 0; r < 4; r++) a[x][r] = F::reg(sh + (w0 + tjc_fa_arow(lane, r)) * (D + F::PAD) + kk * 8 * F::EPR + tjc_fa_acol(lane, r, F::EPR), 1);
    }
}
/* B fragments from a staged matrix M: "nk" (B = M^T, B[k][n] = M[n0 + n][k0 + k]:
   a bf16 pair along a row) or "kn" (B = M, B[k][n] = M[k0 + k][n0 + n]: two rows) */
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_bfrag_nk(const typename F::E *sh, int n0, int k0, uint32_t (*b)[2]) {
    for (int x = 0; x < L; x++) {
        int lane = tjc_fa_lane(x);
        for (int r = 0; r < 2; r++) b[x][r] = F::reg(sh + (n0 + tjc_fa_bcol(lane)) * (D + F::PAD) + k0 + tjc_fa_brow(lane, r, F::EPR), 1);
    }
}
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_bfrag_kn(const typename F::E *sh, int k0, int n0, uint32_t (*b)[2]) {
    for (int x = 0; x < L; x++) {
        int lane = tjc_fa_lane(x);
        for (int r = 0; r < 2; r++) b[x][r] = F::reg(sh + (k0 + tjc_fa_brow(lane, r, F::EPR)) * (D + F::PAD) + n0 + tjc_fa_bcol(lane), D + F::PAD);
    }
}
#ifdef __CUDA_ARCH__
#define TJC_FA_UNROLL _Pragma("unroll")
#define TJC_FA_ROLLED _Pragma("unroll 1") /* (fewer registers for a path that is seldom taken) */
#define TJC_FA_SYNCWARP() __syncwarp()
#else
#define TJC_FA_UNROLL
#define TJC_FA_ROLLED
#define TJC_FA_SYNCWARP() (void)0 /* (the lanes' loops below run one after the other) */
#endif
/* C[16 x 64] = A[16 x D] B where A's rows are w0.. of staged `as` and B = M^T
   of staged `ms` (rows are the 64 columns of C): S = Q K^T and its kin */
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_sgemm(const typename F::E *as, int w0, const typename F::E *ms, float (*c)[8][4]) {
    uint32_t a[L][4], b[L][2];
    for (int x = 0; x < L; x++)
        for (int n = 0; n < 8; n++)
            for (int e = 0; e < 4; e++) c[x][n][e] = 0.f;
    for (int kk = 0; kk < D / (8 * F::EPR); kk++) {
        tjc_fa_afrag<F, D, L>(as, w0, kk, a);
        for (int n = 0; n < 8; n++) {
            tjc_fa_bfrag_nk<F, D, L>(ms, n * 8, kk * 8 * F::EPR, b);
            tjc_fa_mma_at<F, L, 8>(c, n, a, b);
        }
    }
}
/* The A fragment of k step kc of P (a 16 x 64 tile as C fragments),
   rounded to the input format. bf16: register r is elements 2 (r & 1) and
   2 (r & 1) + 1 of this lane's tile 2 kc + (r >> 1). TF32: register r is
   column t + 4 (r >> 1) of tile kc, held by quad lane t / 2 + 2 (r >> 1) as
   its element 2 (r & 1) + t % 2 (both candidates shuffled, one kept). */
__host__ __device__ static inline int tjc_fa_tf32_src(int lane, int r) { return (lane & ~3) | (((lane & 3) >> 1) + 2 * (r >> 1)); }
template <class F, int L>
__host__ __device__ static inline void tjc_fa_pfrag(const float (*p)[8][4], int kc, uint32_t (*a)[4]) {
    for (int r = 0; r < 4; r++) {
        if (F::EPR == 2) {
            for (int x = 0; x < L; x++) a[x][r] = (uint32_t)tjc_fa_bf16(p[x][2 * kc + (r >> 1)][2 * (r & 1)]) | (uint32_t)tjc_fa_bf16(p[x][2 * kc + (r >> 1)][2 * (r & 1) + 1]) << 16;
            continue;
        }
#ifdef __CUDA_ARCH__
        int lane = threadIdx.x & 31, src = tjc_fa_tf32_src(lane, r);
        float v0 = __shfl_sync(0xffffffffu, p[0][kc][2 * (r & 1)], src), v1 = __shfl_sync(0xffffffffu, p[0][kc][2 * (r & 1) + 1], src);
        a[0][r] = tjc_fa_f32_bits(F::rnd(lane & 1 ? v1 : v0));
#else
        for (int x = 0; x < L; x++) a[x][r] = tjc_fa_f32_bits(F::rnd(p[tjc_fa_tf32_src(x, r)][kc][2 * (r & 1) + (x & 1)]));
#endif
    }
}
/* acc[16 x D] += P[16 x 64] M where P is C fragments (rounded by
   tjc_fa_pfrag) and M is staged, 64 rows: O += P V and kin */
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_pgemm(const float (*p)[8][4], const typename F::E *ms, float (*acc)[D / 8][4]) {
    uint32_t a[L][4], b[L][2];
    for (int kc = 0; kc < 8 / F::EPR; kc++) {
        tjc_fa_pfrag<F, L>(p, kc, a);
        for (int n = 0; n < D / 8; n++) {
            tjc_fa_bfrag_kn<F, D, L>(ms, kc * 8 * F::EPR, n * 8, b);
            tjc_fa_mma_at<F, L, D / 8>(acc, n, a, b);
        }
    }
}
/* element (x, n, e) of a 16 x 64 C tile: row wrow + crow of the warp's
   rows, column col0 + 8 n + ccol of the tile's */
#define TJC_FA_ROW(x, e) (tjc_fa_crow(tjc_fa_lane(x), e))
#define TJC_FA_COL(x, n, e) (8 * (n) + tjc_fa_ccol(tjc_fa_lane(x), e))
/* query qi sees key kj */
__host__ __device__ static inline int tjc_fa_sees(int64_t qi, int64_t kj, int64_t tq, int64_t tk, int causal) {
    return qi < tq && kj < tk && (!causal || kj <= qi);
}
/* the key tiles [0, n) query rows [q0, q0 + 64) see; the first query tile key rows [k0, ..) are seen by */
__host__ __device__ static inline int64_t tjc_fa_ktiles(int64_t q0, int64_t tk, int causal) {
    int64_t end = causal && q0 + TJC_FA_ROWS < tk ? q0 + TJC_FA_ROWS : tk;
    return (end + TJC_FA_ROWS - 1) / TJC_FA_ROWS;
}
__host__ __device__ static inline int64_t tjc_fa_qtile0(int64_t k0, int causal) { return causal ? k0 / TJC_FA_ROWS : 0; }
/* acc[16 x D] += P[16 x 64] M as tjc_fa_pgemm (P rounded the same way),
   but term by term over the pairs that meet only: P's rows r0 + row are
   queries and its columns c0 + column keys (rq), or the other way round.
   tjc_fa_pgemm meets the masked pairs too, with a weight of 0, and 0 times
   an inf or NaN of M is NaN where the CPU, whose masked pairs never meet,
   stays finite; the blocks take this instead for a tile with masked pairs
   whose staged M holds an inf or NaN (rare, and slow: CUDA cores). P goes
   8 columns at a time through sc, the warp's 16 x 8 floats of shared
   memory, to the lanes that need its values. */
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_pgemm_met(const float (*p)[8][4], const TJC_FA_E *ms, float (*acc)[D / 8][4], float *sc, int rq, int64_t r0,
                                                       int64_t c0, int64_t tq, int64_t tk, int causal) {
    /* tjc_fa_sees in the tile's own 32-bit terms: row rr and column cc meet
       when rr < nr, cc < nc and (causal) the key is not after the query,
       sg (cc - rr) <= dg */
    const int64_t rl = rq ? tq : tk, cl = rq ? tk : tq, dd = rq ? r0 - c0 : c0 - r0;
    const int nr = (int)(rl - r0 < 16 ? rl - r0 : 16), nc = (int)(cl - c0 < 64 ? cl - c0 : 64), sg = rq ? 1 : -1;
    const int dg = causal ? (int)(dd < -128 ? -128 : dd > 128 ? 128 : dd) : 128;
    TJC_FA_UNROLL for (int n = 0; n < 8; n++) { /* P's columns 8 n.. */
        TJC_FA_SYNCWARP(); /* every lane is done with sc */
        for (int x = 0; x < L; x++)
            TJC_FA_UNROLL for (int e = 0; e < 4; e++) sc[tjc_fa_crow(tjc_fa_lane(x), e) * 8 + tjc_fa_ccol(tjc_fa_lane(x), e)] = F::rnd(p[x][n][e]);
        TJC_FA_SYNCWARP();
        for (int x = 0; x < L; x++)
            TJC_FA_ROLLED for (int j = 0; j < 8; j++)
                TJC_FA_UNROLL for (int h = 0; h < 2; h++) {
                    const int lane = tjc_fa_lane(x), row = tjc_fa_crow(lane, 2 * h), col = 8 * n + j;
                    if (row >= nr || col >= nc || sg * (col - row) > dg) continue;
                    const float w = sc[row * 8 + j];
                    const TJC_FA_E *mr = ms + (8 * n + j) * (D + F::PAD);
                    TJC_FA_UNROLL for (int n2 = 0; n2 < D / 8; n2++)
                        TJC_FA_UNROLL for (int e2 = 0; e2 < 2; e2++) acc[x][n2][2 * h + e2] += w * F::val(mr[8 * n2 + tjc_fa_ccol(lane, e2)]);
                }
    }
}
#undef TJC_FA_UNROLL
#undef TJC_FA_ROLLED
#undef TJC_FA_SYNCWARP
/* the 64 x 64 tile of queries from q0 and keys from k0 has pairs that do not meet (causal) */
__host__ __device__ static inline int tjc_fa_masked(int64_t q0, int64_t k0, int causal) { return causal && k0 + TJC_FA_ROWS - 1 > q0; }

/* the forward's per-warp state: O, and per row (2 per lane) m, l (this
   lane's part), whether a score was NaN or +inf */
template <int D, int L>
struct tjc_fa_fwd_st {
    float o[L][D / 8][4], m[L][2], l[L][2];
    int bad[L][2];
};
template <int D, int L>
__host__ __device__ static inline void tjc_fa_fwd_begin(tjc_fa_fwd_st<D, L> *st) {
    for (int x = 0; x < L; x++) {
        for (int n = 0; n < D / 8; n++)
            for (int e = 0; e < 4; e++) st->o[x][n][e] = 0.f;
        for (int h = 0; h < 2; h++) st->m[x][h] = -INFINITY, st->l[x][h] = 0.f, st->bad[x][h] = 0;
    }
}
/* one key tile [k0, k0 + 64) for the warp's queries [qw, qw + 16): Qs holds
   the block's queries (the warp's at row w0), Ks and Vs the tile; met: P V
   by tjc_fa_pgemm_met (sc: the warp's scratch) */
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_fwd_tile(tjc_fa_fwd_st<D, L> *st, const TJC_FA_E *Qs, int w0, const TJC_FA_E *Ks, const TJC_FA_E *Vs, int64_t qw,
                                                      int64_t k0, int64_t tq, int64_t tk, int causal, float scale, int met, float *sc) {
    float s[L][8][4], mx[2][L], p;
    tjc_fa_sgemm<F, D, L>(Qs, w0, Ks, s);
    for (int x = 0; x < L; x++) { /* scale, mask, this lane's row maxima */
        mx[0][x] = mx[1][x] = -INFINITY;
        for (int n = 0; n < 8; n++)
            for (int e = 0; e < 4; e++) {
                float v = scale * s[x][n][e];
                if (!tjc_fa_sees(qw + TJC_FA_ROW(x, e), k0 + TJC_FA_COL(x, n, e), tq, tk, causal)) v = -INFINITY;
                else if (v != v || v == INFINITY) st->bad[x][e >> 1] = 1, v = -INFINITY; /* the row will be NaN (the CPU's rule) */
                s[x][n][e] = v;
                mx[e >> 1][x] = fmaxf(mx[e >> 1][x], v);
            }
    }
    tjc_fa_quad<L>(mx[0], 1);
    tjc_fa_quad<L>(mx[1], 1);
    for (int x = 0; x < L; x++)
        for (int h = 0; h < 2; h++) { /* the new max; the factor for what was summed so far */
            float mn = fmaxf(st->m[x][h], mx[h][x]), mu = mn == -INFINITY ? 0.f : mn, cr = expf(st->m[x][h] - mu);
            st->m[x][h] = mn;
            mx[h][x] = mu;
            st->l[x][h] *= cr;
            for (int n = 0; n < D / 8; n++) st->o[x][n][2 * h] *= cr, st->o[x][n][2 * h + 1] *= cr;
        }
    for (int x = 0; x < L; x++)
        for (int n = 0; n < 8; n++)
            for (int e = 0; e < 4; e++) {
                p = expf(s[x][n][e] - mx[e >> 1][x]);
                s[x][n][e] = p;
                st->l[x][e >> 1] += p; /* l sums the f32 p; P V takes p rounded to the input format */
            }
    if (met) tjc_fa_pgemm_met<F, D, L>(s, Vs, st->o, sc, 1, qw, k0, tq, tk, causal);
    else tjc_fa_pgemm<F, D, L>(s, Vs, st->o);
}
/* out = O / l and lse = m + log l for the warp's rows that exist; NaN for a
   row with a NaN or +inf score, or none that is finite */
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_fwd_end(tjc_fa_fwd_st<D, L> *st, int64_t qw, int64_t tq, TJC_FA_E *out, float *lse) {
    float l[2][L], bad[2][L];
    for (int x = 0; x < L; x++)
        for (int h = 0; h < 2; h++) l[h][x] = st->l[x][h], bad[h][x] = (float)st->bad[x][h];
    for (int h = 0; h < 2; h++) tjc_fa_quad<L>(l[h], 0), tjc_fa_quad<L>(bad[h], 1);
    for (int x = 0; x < L; x++)
        for (int h = 0; h < 2; h++) {
            int64_t qi = qw + tjc_fa_crow(tjc_fa_lane(x), 2 * h);
            int nan = bad[h][x] != 0.f || l[h][x] == 0.f;
            if (qi >= tq) continue;
            for (int n = 0; n < D / 8; n++)
                for (int e = 2 * h; e < 2 * h + 2; e++) out[qi * D + TJC_FA_COL(x, n, e)] = F::out(nan ? NAN : st->o[x][n][e] / l[h][x]);
            if ((tjc_fa_lane(x) & 3) == 0) lse[qi] = nan ? NAN : st->m[x][h] + logf(l[h][x]);
        }
}
/* the backward's per-warp state: the dk and dv (or dq in dk) accumulators,
   and for dq this lane's two rows' lse and D */
template <int D, int L>
struct tjc_fa_bwd_st {
    float dk[L][D / 8][4], dv[L][D / 8][4], lse[L][2], dl[L][2];
};
template <int D, int L>
__host__ __device__ static inline void tjc_fa_bwd_begin(tjc_fa_bwd_st<D, L> *st) {
    for (int x = 0; x < L; x++)
        for (int n = 0; n < D / 8; n++)
            for (int e = 0; e < 4; e++) st->dk[x][n][e] = st->dv[x][n][e] = 0.f;
}
/* P and dS of a 16 x 64 tile from S and dP: rows and columns are queries or
   keys (rq: the rows are queries), lse and D by row (lr, dr) or by column
   (lc, dc); entries a query does not see are 0 */
template <int L>
__host__ __device__ static inline void tjc_fa_pds(float (*s)[8][4], float (*dp)[8][4], int rq, int64_t r0, int64_t c0, const tjc_att *a, const float (*lr)[2],
                                                 const float (*dr)[2], const float *lc, const float *dc) {
    for (int x = 0; x < L; x++)
        for (int n = 0; n < 8; n++)
            for (int e = 0; e < 4; e++) {
                int64_t r = r0 + TJC_FA_ROW(x, e), c = c0 + TJC_FA_COL(x, n, e);
                float lse = rq ? lr[x][e >> 1] : lc[TJC_FA_COL(x, n, e)], dl = rq ? dr[x][e >> 1] : dc[TJC_FA_COL(x, n, e)], p = 0.f, ds = 0.f;
                if (rq ? tjc_fa_sees(r, c, a->tq, a->tk, a->causal) : tjc_fa_sees(c, r, a->tq, a->tk, a->causal)) {
                    p = expf((float)a->scale * s[x][n][e] - lse);
                    ds = p * (dp[x][n][e] - dl);
                }
                s[x][n][e] = p, dp[x][n][e] = ds;
            }
}
/* store a warp's 16 x D accumulator (times `scale`) as bf16 rows r0.. of dst, those < rows */
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_store(const float (*acc)[D / 8][4], float scale, int64_t r0, int64_t rows, TJC_FA_E *dst) {
    for (int x = 0; x < L; x++)
        for (int n = 0; n < D / 8; n++)
            for (int e = 0; e < 4; e++)
                if (r0 + TJC_FA_ROW(x, e) < rows) dst[(r0 + TJC_FA_ROW(x, e)) * D + TJC_FA_COL(x, n, e)] = F::out(acc[x][n][e] * scale);
}

/* One block of each kernel, written once for both sides: on the device a
   thread runs it for its own warp (L = 1) between __syncthreads; on the
   host (L = 32) the same code stages with every thread id in turn and runs
   the 4 warps one after the other, which is what the barriers allow. */
#ifdef __CUDA_ARCH__
#define TJC_FA_SYNC() __syncthreads()
#define TJC_FA_SYNC_OR(x) __syncthreads_or(x) /* and x of any thread */
#define TJC_FA_THREADS(tid) for (int tid = threadIdx.x, once_ = 1; once_; once_ = 0)
#define TJC_FA_EACH_WARP(w) for (int w = threadIdx.x >> 5, once_ = 1; once_; once_ = 0)
#else
#define TJC_FA_SYNC() (void)0
#define TJC_FA_SYNC_OR(x) (x) /* (x gathered over every thread id already) */
#define TJC_FA_THREADS(tid) for (int tid = 0; tid < 32 * TJC_FA_WARPS; tid++)
#define TJC_FA_EACH_WARP(w) for (int w = 0; w < TJC_FA_WARPS; w++)
#endif
#define TJC_FA_NT (32 * TJC_FA_WARPS)
#define TJC_FA_ST(st, w) (&(st)[L == 1 ? 0 : (w)]) /* this warp's state */
/* thread tid's share of staging the same rows of two matrices (K and V, Q and dO) */
template <class F, int D>
__host__ __device__ static inline int tjc_fa_stage2(TJC_FA_E *sa, const TJC_FA_E *ga, TJC_FA_E *sb, const TJC_FA_E *gb, int64_t r0, int64_t rows, int tid,
                                                    int check = 0) {
    return tjc_fa_stage<F, D>(sa, ga, r0, rows, tid, TJC_FA_NT, check) | tjc_fa_stage<F, D>(sb, gb, r0, rows, tid, TJC_FA_NT, check);
}
/* shared memory: nmat staged 64 x D matrices, then two 64-float vectors,
   then each warp's 16 x 8 floats for tjc_fa_pgemm_met (tjc_fa_sc) */
template <class F, int D>
static size_t tjc_fa_smem(int nmat) {
    return (size_t)nmat * TJC_FA_ROWS * (D + F::PAD) * sizeof(typename F::E) + (2 * TJC_FA_ROWS + TJC_FA_ROWS * 8) * sizeof(float);
}
template <class F, int D>
__host__ __device__ static inline float *tjc_fa_sc(TJC_FA_E *sh, int nmat, int w) { return (float *)(sh + nmat * TJC_FA_ROWS * (D + F::PAD)) + 2 * TJC_FA_ROWS + 128 * w; }
/* block blk of the forward: batch row blk / nqb, queries from 64 (blk % nqb) */
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_fwd_block(const tjc_att *a, int64_t blk, const TJC_FA_E *q, const TJC_FA_E *k, const TJC_FA_E *v, TJC_FA_E *out,
                                                       float *lse, TJC_FA_E *sh, tjc_fa_fwd_st<D, L> *st) {
    const int64_t nqb = (a->tq + TJC_FA_ROWS - 1) / TJC_FA_ROWS, b = blk / nqb, q0 = blk % nqb * TJC_FA_ROWS, nkt = tjc_fa_ktiles(q0, a->tk, a->causal);
    TJC_FA_E *Qs = sh, *Ks = Qs + TJC_FA_ROWS * (D + F::PAD), *Vs = Ks + TJC_FA_ROWS * (D + F::PAD);
    q += b * a->tq * D, k += b * a->tk * D, v += b * a->tk * D, out += b * a->tq * D, lse += b * a->tq;
    TJC_FA_EACH_WARP(w) tjc_fa_fwd_begin<D, L>(TJC_FA_ST(st, w));
    TJC_FA_SYNC(); /* the previous block is done with the shared tiles */
    TJC_FA_THREADS(tid) tjc_fa_stage<F, D>(Qs, q, q0, a->tq, tid, TJC_FA_NT);
    for (int64_t kt = 0; kt < nkt; kt++) {
        const int check = tjc_fa_masked(q0, kt * TJC_FA_ROWS, a->causal); /* an inf or NaN in V there takes tjc_fa_pgemm_met */
        int met = 0;
        TJC_FA_SYNC();
        TJC_FA_THREADS(tid) {
            tjc_fa_stage<F, D>(Ks, k, kt * TJC_FA_ROWS, a->tk, tid, TJC_FA_NT);
            met |= tjc_fa_stage<F, D>(Vs, v, kt * TJC_FA_ROWS, a->tk, tid, TJC_FA_NT, check);
        }
        met = TJC_FA_SYNC_OR(met);
        TJC_FA_EACH_WARP(w) {
            tjc_fa_fwd_tile<F, D, L>(TJC_FA_ST(st, w), Qs, 16 * w, Ks, Vs, q0 + 16 * w, kt * TJC_FA_ROWS, a->tq, a->tk, a->causal, (float)a->scale, met,
                                     tjc_fa_sc<F, D>(sh, 3, w));
        }
    }
    TJC_FA_EACH_WARP(w) tjc_fa_fwd_end<F, D, L>(TJC_FA_ST(st, w), q0 + 16 * w, a->tq, out, lse);
}
/* block blk of dk, dv: batch row blk / nkb, keys from 64 (blk % nkb), over the query tiles that see them */
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_dkv_block(const tjc_att *a, int64_t blk, const TJC_FA_E *q, const TJC_FA_E *k, const TJC_FA_E *v, const float *lse,
                                                       const TJC_FA_E *g, const float *dl, TJC_FA_E *dk, TJC_FA_E *dv, TJC_FA_E *sh, tjc_fa_bwd_st<D, L> *st) {
    const int64_t nkb = (a->tk + TJC_FA_ROWS - 1) / TJC_FA_ROWS, nqt = (a->tq + TJC_FA_ROWS - 1) / TJC_FA_ROWS, b = blk / nkb, k0 = blk % nkb * TJC_FA_ROWS;
    TJC_FA_E *Ks = sh, *Vs = Ks + TJC_FA_ROWS * (D + F::PAD), *Qs = Vs + TJC_FA_ROWS * (D + F::PAD), *Gs = Qs + TJC_FA_ROWS * (D + F::PAD);
    float *ls = (float *)(Gs + TJC_FA_ROWS * (D + F::PAD)), *ds = ls + TJC_FA_ROWS;
    q += b * a->tq * D, g += b * a->tq * D, lse += b * a->tq, dl += b * a->tq, k += b * a->tk * D, v += b * a->tk * D, dk += b * a->tk * D, dv += b * a->tk * D;
    TJC_FA_EACH_WARP(w) tjc_fa_bwd_begin<D, L>(TJC_FA_ST(st, w));
    TJC_FA_SYNC();
    TJC_FA_THREADS(tid) tjc_fa_stage2<F, D>(Ks, k, Vs, v, k0, a->tk, tid);
    for (int64_t qt = tjc_fa_qtile0(k0, a->causal); qt < nqt; qt++) {
        const int check = tjc_fa_masked(qt * TJC_FA_ROWS, k0, a->causal); /* an inf or NaN in Q or dO there takes tjc_fa_pgemm_met */
        int met = 0;
        TJC_FA_SYNC();
        TJC_FA_THREADS(tid) {
            met |= tjc_fa_stage2<F, D>(Qs, q, Gs, g, qt * TJC_FA_ROWS, a->tq, tid, check);
            tjc_fa_stage_vec(ls, lse, qt * TJC_FA_ROWS, a->tq, tid, TJC_FA_NT);
            tjc_fa_stage_vec(ds, dl, qt * TJC_FA_ROWS, a->tq, tid, TJC_FA_NT);
        }
        met = TJC_FA_SYNC_OR(met);
        TJC_FA_EACH_WARP(w) { /* S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys; dV += P^T dO, dK += dS^T Q */
            tjc_fa_bwd_st<D, L> *sw = TJC_FA_ST(st, w);
            float s[L][8][4], dp[L][8][4];
            tjc_fa_sgemm<F, D, L>(Ks, 16 * w, Qs, s);
            tjc_fa_sgemm<F, D, L>(Vs, 16 * w, Gs, dp);
            tjc_fa_pds<L>(s, dp, 0, k0 + 16 * w, qt * TJC_FA_ROWS, a, NULL, NULL, ls, ds);
            if (met) {
                tjc_fa_pgemm_met<F, D, L>(s, Gs, sw->dv, tjc_fa_sc<F, D>(sh, 4, w), 0, k0 + 16 * w, qt * TJC_FA_ROWS, a->tq, a->tk, a->causal);
                tjc_fa_pgemm_met<F, D, L>(dp, Qs, sw->dk, tjc_fa_sc<F, D>(sh, 4, w), 0, k0 + 16 * w, qt * TJC_FA_ROWS, a->tq, a->tk, a->causal);
            } else {
                tjc_fa_pgemm<F, D, L>(s, Gs, sw->dv);
                tjc_fa_pgemm<F, D, L>(dp, Qs, sw->dk);
            }
        }
    }
    TJC_FA_EACH_WARP(w) {
        tjc_fa_store<F, D, L>(TJC_FA_ST(st, w)->dk, (float)a->scale, k0 + 16 * w, a->tk, dk);
        tjc_fa_store<F, D, L>(TJC_FA_ST(st, w)->dv, 1.f, k0 + 16 * w, a->tk, dv);
    }
}
/* block blk of dq: batch row blk / nqb, queries from 64 (blk % nqb), over the key tiles they see (dq accumulates in dk) */
template <class F, int D, int L>
__host__ __device__ static inline void tjc_fa_dq_block(const tjc_att *a, int64_t blk, const TJC_FA_E *q, const TJC_FA_E *k, const TJC_FA_E *v, const float *lse,
                                                      const TJC_FA_E *g, const float *dl, TJC_FA_E *dq, TJC_FA_E *sh, tjc_fa_bwd_st<D, L> *st) {
    const int64_t nqb = (a->tq + TJC_FA_ROWS - 1) / TJC_FA_ROWS, b = blk / nqb, q0 = blk % nqb * TJC_FA_ROWS, nkt = tjc_fa_ktiles(q0, a->tk, a->causal);
    TJC_FA_E *Qs = sh, *Gs = Qs + TJC_FA_ROWS * (D + F::PAD), *Ks = Gs + TJC_FA_ROWS * (D + F::PAD), *Vs = Ks + TJC_FA_ROWS * (D + F::PAD);
    q += b * a->tq * D, g += b * a->tq * D, lse += b * a->tq, dl += b * a->tq, dq += b * a->tq * D, k += b * a->tk * D, v += b * a->tk * D;
    TJC_FA_EACH_WARP(w) {
        tjc_fa_bwd_st<D, L> *sw = TJC_FA_ST(st, w);
        tjc_fa_bwd_begin<D, L>(sw);
        for (int x = 0; x < L; x++)
            for (int h = 0; h < 2; h++) {
                int64_t qi = q0 + 16 * w + tjc_fa_crow(tjc_fa_lane(x), 2 * h);
                sw->lse[x][h] = qi < a->tq ? lse[qi] : 0.f;
                sw->dl[x][h] = qi < a->tq ? dl[qi] : 0.f;
            }
    }
    TJC_FA_SYNC();
    TJC_FA_THREADS(tid) tjc_fa_stage2<F, D>(Qs, q, Gs, g, q0, a->tq, tid);
    for (int64_t kt = 0; kt < nkt; kt++) {
        const int check = tjc_fa_masked(q0, kt * TJC_FA_ROWS, a->causal); /* an inf or NaN in K there takes tjc_fa_pgemm_met */
        int met = 0;
        TJC_FA_SYNC();
        TJC_FA_THREADS(tid) {
            met |= tjc_fa_stage<F, D>(Ks, k, kt * TJC_FA_ROWS, a->tk, tid, TJC_FA_NT, check);
            tjc_fa_stage<F, D>(Vs, v, kt * TJC_FA_ROWS, a->tk, tid, TJC_FA_NT);
        }
        met = TJC_FA_SYNC_OR(met);
        TJC_FA_EACH_WARP(w) { /* S = Q K^T and dP = dO V^T for the warp's 16 queries; dQ += dS K */
            tjc_fa_bwd_st<D, L> *sw = TJC_FA_ST(st, w);
            float s[L][8][4], dp[L][8][4];
            tjc_fa_sgemm<F, D, L>(Qs, 16 * w, Ks, s);
            tjc_fa_sgemm<F, D, L>(Gs, 16 * w, Vs, dp);
            tjc_fa_pds<L>(s, dp, 1, q0 + 16 * w, kt * TJC_FA_ROWS, a, sw->lse, sw->dl, NULL, NULL);
            if (met) tjc_fa_pgemm_met<F, D, L>(dp, Ks, sw->dk, tjc_fa_sc<F, D>(sh, 4, w), 1, q0 + 16 * w, kt * TJC_FA_ROWS, a->tq, a->tk, a->causal);
            else tjc_fa_pgemm<F, D, L>(dp, Ks, sw->dk);
        }
    }
    TJC_FA_EACH_WARP(w) tjc_fa_store<F, D, L>(TJC_FA_ST(st, w)->dk, (float)a->scale, q0 + 16 * w, a->tq, dq);
}
/* the kernels: blocks grid-stride over the (batch row, 64-row block) pairs */
extern __shared__ uint4 tjc_fa_sh[];
template <class F, int D>
__global__ void __launch_bounds__(TJC_FA_NT) tjc_k_fa_fwd(tjc_att a, const TJC_FA_E *q, const TJC_FA_E *k, const TJC_FA_E *v, TJC_FA_E *out, float *lse) {
    tjc_fa_fwd_st<D, 1> st;
    for (int64_t blk = blockIdx.x; blk < a.nb * ((a.tq + TJC_FA_ROWS - 1) / TJC_FA_ROWS); blk += gridDim.x)
        tjc_fa_fwd_block<F, D, 1>(&a, blk, q, k, v, out, lse, (TJC_FA_E *)tjc_fa_sh, &st);
}
template <class F, int D>
__global__ void __launch_bounds__(TJC_FA_NT) tjc_k_fa_dkv(tjc_att a, const TJC_FA_E *q, const TJC_FA_E *k, const TJC_FA_E *v, const float *lse, const TJC_FA_E *g,
                                                          const float *dl, TJC_FA_E *dk, TJC_FA_E *dv) {
    tjc_fa_bwd_st<D, 1> st;
    for (int64_t blk = blockIdx.x; blk < a.nb * ((a.tk + TJC_FA_ROWS - 1) / TJC_FA_ROWS); blk += gridDim.x)
        tjc_fa_dkv_block<F, D, 1>(&a, blk, q, k, v, lse, g, dl, dk, dv, (TJC_FA_E *)tjc_fa_sh, &st);
}
template <class F, int D>
__global__ void __launch_bounds__(TJC_FA_NT) tjc_k_fa_dq(tjc_att a, const TJC_FA_E *q, const TJC_FA_E *k, const TJC_FA_E *v, const float *lse, const TJC_FA_E *g,
                                                         const float *dl, TJC_FA_E *dq) {
    tjc_fa_bwd_st<D, 1> st;
    for (int64_t blk = blockIdx.x; blk < a.nb * ((a.tq + TJC_FA_ROWS - 1) / TJC_FA_ROWS); blk += gridDim.x)
        tjc_fa_dq_block<F, D, 1>(&a, blk, q, k, v, lse, g, dl, dq, (TJC_FA_E *)tjc_fa_sh, &st);
}
/* The flash path on the host (a test hook; no GPU needed): the kernels'
   block code above with L = 32 lanes, on [nb, tq, d] (k, v: [nb, tk, d])
   of dt: TJ_BF16 (bf16 bits) or TJ_F32 (the TF32 kernels). Writes out and
   lse; with dout, also dq, dk and dv from those, D computed in f32 in row
   order. Returns 0, or -1 for a dtype or d (not 64 or 128) with no flash
   kernel, or when memory runs out. */
extern "C" int tj_cuda_attention_host(tj_dtype dt, int64_t nb, int64_t tq, int64_t tk, int64_t d, double scale, int causal, const void *q, const void *k,
                                      const void *v, void *out, float *lse, const void *dout, void *dq, void *dk, void *dv);
template <class F, int D>
static int tjc_fa_host(const tjc_att *a, const void *q_, const void *k_, const void *v_, void *out_, float *lse, const void *g_, void *dq_, void *dk_,
                       void *dv_) {
    typedef typename F::E E;
    const E *q = (const E *)q_, *k = (const E *)k_, *v = (const E *)v_, *g = (const E *)g_;
    E *out = (E *)out_, *dq = (E *)dq_, *dk = (E *)dk_, *dv = (E *)dv_, *sh = (E *)malloc(tjc_fa_smem<F, D>(4));
    tjc_fa_fwd_st<D, 32> *fst = (tjc_fa_fwd_st<D, 32> *)malloc(sizeof *fst * TJC_FA_WARPS);
    tjc_fa_bwd_st<D, 32> *bst = (tjc_fa_bwd_st<D, 32> *)malloc(sizeof *bst * TJC_FA_WARPS);
    float *dl = (float *)malloc(sizeof(float) * (size_t)(a->nb * a->tq));
    int64_t blk, r, c, nqb = (a->tq + TJC_FA_ROWS - 1) / TJC_FA_ROWS, nkb = (a->tk + TJC_FA_ROWS - 1) / TJC_FA_ROWS;
    int rc = sh && fst && bst && dl ? 0 : -1;
    for (blk = 0; !rc && blk < a->nb * nqb; blk++) tjc_fa_fwd_block<F, D, 32>(a, blk, q, k, v, out, lse, sh, fst);
    if (!rc && g) {
        for (r = 0; r < a->nb * a->tq; r++) { /* D = d_out . out (path 1's kernel on the device) */
            float s = 0.f;
            for (c = 0; c < D; c++) s += F::val(g[r * D + c]) * F::val(out[r * D + c]);
            dl[r] = s;
        }
        for (blk = 0; blk < a->nb * nkb; blk++) tjc_fa_dkv_block<F, D, 32>(a, blk, q, k, v, lse, g, dl, dk, dv, sh, bst);
        for (blk = 0; blk < a->nb * nqb; blk++) tjc_fa_dq_block<F, D, 32>(a, blk, q, k, v, lse, g, dl, dq, sh, bst);
    }
    free(sh), free(fst), free(bst), free(dl);
    return rc;
}
/* the attention the host hooks below run: nb rows of [tq, d] against [tk, d] */
static tjc_att tjc_fa_host_att(tj_dtype dt, int64_t nb, int64_t tq, int64_t tk, int64_t d, double scale, int causal) {
    tjc_att a;
    memset(&a, 0, sizeof a);
    a.nb = a.nbk = nb, a.grp = 1, a.tq = tq, a.tk = tk, a.d = a.dv = d, a.scale = scale, a.causal = causal != 0, a.dt = dt, a.ldt = TJ_F32;
    return a;
}
extern "C" int tj_cuda_attention_host(tj_dtype dt, int64_t nb, int64_t tq, int64_t tk, int64_t d, double scale, int causal, const void *q, const void *k,
                                      const void *v, void *out, float *lse, const void *dout, void *dq, void *dk, void *dv) {
    tjc_att a = tjc_fa_host_att(dt, nb, tq, tk, d, scale, causal);
    if (dt == TJ_BF16 && d == 64) return tjc_fa_host<tjc_fa_fmt_bf16, 64>(&a, q, k, v, out, lse, dout, dq, dk, dv);
    if (dt == TJ_BF16 && d == 128) return tjc_fa_host<tjc_fa_fmt_bf16, 128>(&a, q, k, v, out, lse, dout, dq, dk, dv);
    if (dt == TJ_F32 && d == 64) return tjc_fa_host<tjc_fa_fmt_tf32, 64>(&a, q, k, v, out, lse, dout, dq, dk, dv);
    if (dt == TJ_F32 && d == 128) return tjc_fa_host<tjc_fa_fmt_tf32, 128>(&a, q, k, v, out, lse, dout, dq, dk, dv);
    return -1;
}
/* the same for f32 on the 3xTF32 kernels (tjc_fa_fmt_f32x3) */
extern "C" int tj_cuda_attention_host_f32x3(int64_t nb, int64_t tq, int64_t tk, int64_t d, double scale, int causal, const float *q, const float *k,
                                            const float *v, float *out, float *lse, const float *dout, float *dq, float *dk, float *dv);
extern "C" int tj_cuda_attention_host_f32x3(int64_t nb, int64_t tq, int64_t tk, int64_t d, double scale, int causal, const float *q, const float *k,
                                            const float *v, float *out, float *lse, const float *dout, float *dq, float *dk, float *dv) {
    tjc_att a = tjc_fa_host_att(TJ_F32, nb, tq, tk, d, scale, causal);
    if (d == 64) return tjc_fa_host<tjc_fa_fmt_f32x3, 64>(&a, q, k, v, out, lse, dout, dq, dk, dv);
    if (d == 128) return tjc_fa_host<tjc_fa_fmt_f32x3, 128>(&a, q, k, v, out, lse, dout, dq, dk, dv);
    return -1;
}
/* The fragment steps alone on the host (a test hook; no GPU needed), for a
   test that checks them against the PTX ISA's fragment tables written out
   on its own (tj_cuda_attention_host cannot: its products rebuild the
   matrices through the same layout helpers as the register loads, so a
   wrong layout agrees with itself there). tf32: 0 bf16 (m16n8k16), 1 TF32
   (m16n8k8). m: a 64 x 64 matrix (row-major floats, exact in the format),
   staged as the kernels stage a tile. op:
     0  c[32][4] += the product of the lanes' registers a[32][4] and b[32][2] (tjc_fa_mma)
     1  a = the A fragments of staged rows i0.., k step i1 (tjc_fa_afrag)
     2  b = the "nk" B fragments, n0 = i0, k0 = i1 (tjc_fa_bfrag_nk)
     3  b = the "kn" B fragments, k0 = i0, n0 = i1 (tjc_fa_bfrag_kn)
     4  a = the A fragments of k step i0 of P, c being P's C fragments as [32][8][4] (tjc_fa_pfrag)
   Returns 0, or -1 for an op it does not know or when memory runs out. */
extern "C" int tj_cuda_fa_frag_host(int tf32, int op, const float *m, int i0, int i1, uint32_t *a, uint32_t *b, float *c);
template <class F>
static int tjc_fa_frag_host(int op, const float *m, int i0, int i1, uint32_t (*a)[4], uint32_t (*b)[2], float *c) {
    typedef typename F::E E;
    E *src = NULL, *sh = NULL;
    int rc = 0;
    if (op == 0) tjc_fa_mma<F, 32>((float(*)[4])c, a, b);
    else if (op == 4) tjc_fa_pfrag<F, 32>((const float(*)[8][4])c, i0, a);
    else if (op >= 1 && op <= 3) {
        src = (E *)malloc(sizeof(E) * 64 * 64), sh = (E *)malloc(tjc_fa_smem<F, 64>(1));
        if (!src || !sh) rc = -1;
        for (int i = 0; !rc && i < 64 * 64; i++) src[i] = F::stage(F::out(m[i]));
        TJC_FA_THREADS(tid) if (!rc) tjc_fa_stage<F, 64>(sh, src, 0, 64, tid, TJC_FA_NT);
        if (!rc && op == 1) tjc_fa_afrag<F, 64, 32>(sh, i0, i1, a);
        if (!rc && op == 2) tjc_fa_bfrag_nk<F, 64, 32>(sh, i0, i1, b);
        if (!rc && op == 3) tjc_fa_bfrag_kn<F, 64, 32>(sh, i0, i1, b);
    } else rc = -1;
    free(src), free(sh);
    return rc;
}
extern "C" int tj_cuda_fa_frag_host(int tf32, int op, const float *m, int i0, int i1, uint32_t *a, uint32_t *b, float *c) {
    return tf32 ? tjc_fa_frag_host<tjc_fa_fmt_tf32>(op, m, i0, i1, (uint32_t(*)[4])a, (uint32_t(*)[2])b, c)
                : tjc_fa_frag_host<tjc_fa_fmt_bf16>(op, m, i0, i1, (uint32_t(*)[4])a, (uint32_t(*)[2])b, c);
}

/* Which flash kernels apply: 1 bf16, 2 TF32 (f32 with TJ_CUDA_TF32=1), 3
   3xTF32 (f32 otherwise), 0 none (path 1). They need dim = dim' of 64 or
   128, a GPU with mma.sync (sm_80 on) and the backward's shared memory per
   block (up to 135 KB: f32, dim 128; not on sm_86 / sm_89 cards), and
   16-byte aligned buffers; TJ_CUDA_FLASH=0 in the environment (read at
   each launch) keeps path 1, to compare the two. */
static int tjc_fa_applies(tjc_state *s, const tjc_att *a, int n, const void *const *p) {
    const char *e = getenv("TJ_CUDA_FLASH");
    int major = 0, smem = 0, kind = a->dt == TJ_BF16 ? 1 : a->dt == TJ_F32 ? (tjc_tf32() ? 2 : 3) : 0;
    size_t need;
    if (!kind || a->d != a->dv || (a->d != 64 && a->d != 128) || (e && !strcmp(e, "0"))) return 0;
    if (a->grp != 1 || a->mask) return 0; /* (k and v shared over some of q's batch axes, or a mask: path 1) */
    need = kind == 1 ? (a->d == 64 ? tjc_fa_smem<tjc_fa_fmt_bf16, 64>(4) : tjc_fa_smem<tjc_fa_fmt_bf16, 128>(4))
                     : (a->d == 64 ? tjc_fa_smem<tjc_fa_fmt_tf32, 64>(4) : tjc_fa_smem<tjc_fa_fmt_tf32, 128>(4));
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, s->device) != cudaSuccess || major < 8) return 0;
    if (cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, s->device) != cudaSuccess || (size_t)smem < need) return 0;
    for (int i = 0; i < n; i++)
        if ((uintptr_t)p[i] & 15) return 0;
    return kind;
}
/* launch flash kernel KERN<F, D> over `blocks` blocks with `nmat` staged matrices of shared memory */
#define TJC_FA_LAUNCH(KERN, D, blocks, nmat, ...)                                                                                      \
    do {                                                                                                                               \
        size_t sm_ = tjc_fa_smem<F, D>(nmat);                                                                                          \
        TJC_CUDA(k, cudaFuncSetAttribute(KERN<F, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_));                         \
        KERN<F, D><<<tjc_grid(blocks), TJC_FA_NT, sm_, s->compute>>>(__VA_ARGS__);                                                    \
        TJC_LAUNCHED(k, #KERN);                                                                                                        \
    } while (0)
/* the forward on the flash kernels of format F: out (pout[0]) and lse (pout[1]) */
template <class F>
static int tjc_fa_forward(tjc_state *s, tj__kern *k, const tjc_att &a) {
    typedef typename F::E E;
    const E *q = (const E *)k->in[0], *kk = (const E *)k->in[1], *v = (const E *)k->in[2];
    const int64_t blocks = a.nb * ((a.tq + TJC_FA_ROWS - 1) / TJC_FA_ROWS);
    if (a.d == 64) TJC_FA_LAUNCH(tjc_k_fa_fwd, 64, blocks, 3, a, q, kk, v, (E *)k->pout[0], (float *)k->pout[1]);
    else TJC_FA_LAUNCH(tjc_k_fa_fwd, 128, blocks, 3, a, q, kk, v, (E *)k->pout[0], (float *)k->pout[1]);
    return 0;
}
/* the backward after D (dl): dk and dv (pout[1], pout[2]), then dq (pout[0]) */
template <class F>
static int tjc_fa_backward(tjc_state *s, tj__kern *k, const tjc_att &a, const float *dl) {
    typedef typename F::E E;
    const E *q = (const E *)k->in[0], *kk = (const E *)k->in[1], *v = (const E *)k->in[2], *g = (const E *)k->in[5];
    const float *lse = (const float *)k->in[4];
    E *dq = (E *)k->pout[0], *dk = (E *)k->pout[1], *dv = (E *)k->pout[2];
    const int64_t nqb = (a.tq + TJC_FA_ROWS - 1) / TJC_FA_ROWS, nkb = (a.tk + TJC_FA_ROWS - 1) / TJC_FA_ROWS;
    if (a.d == 64) {
        TJC_FA_LAUNCH(tjc_k_fa_dkv, 64, a.nb * nkb, 4, a, q, kk, v, lse, g, dl, dk, dv);
        TJC_FA_LAUNCH(tjc_k_fa_dq, 64, a.nb * nqb, 4, a, q, kk, v, lse, g, dl, dq);
    } else {
        TJC_FA_LAUNCH(tjc_k_fa_dkv, 128, a.nb * nkb, 4, a, q, kk, v, lse, g, dl, dk, dv);
        TJC_FA_LAUNCH(tjc_k_fa_dq, 128, a.nb * nqb, 4, a, q, kk, v, lse, g, dl, dq);
    }
    return 0;
}
#undef TJC_FA_LAUNCH
/* tj__k_attention: out (pout[0]) and lse (pout[1]) */
static int tjc_attention(tjc_state *s, tj__kern *k) {
    tjc_att a;
    tjc_att_of(k, &a);
    const void *p[5] = {k->in[0], k->in[1], k->in[2], k->pout[0], k->pout[1]};
    if (a.d > TJ__ATTN_MAXD || a.dv > TJ__ATTN_MAXD) return tjc_fail(k, "dim %lld / dim' %lld: at most %d", (long long)a.d, (long long)a.dv, TJ__ATTN_MAXD);
    switch (tjc_fa_applies(s, &a, 5, p)) {
    case 1: return tjc_fa_forward<tjc_fa_fmt_bf16>(s, k, a);
    case 2: return tjc_fa_forward<tjc_fa_fmt_tf32>(s, k, a);
    case 3: return tjc_fa_forward<tjc_fa_fmt_f32x3>(s, k, a);
    }
    if (a.dt == TJ_F64) TJC_ATT_LAUNCH(tjc_k_att_fwd, double, a, a.nb * a.tq, k->in[0], k->in[1], k->in[2], k->pout[0], k->pout[1]);
    else TJC_ATT_LAUNCH(tjc_k_att_fwd, float, a, a.nb * a.tq, k->in[0], k->in[1], k->in[2], k->pout[0], k->pout[1]);
    return 0;
}
/* tj__k_attention_grad: inputs q, k, v, out, lse, d_out; D into the
   scratch, then dk and dv (pout[1], pout[2]), then dq (pout[0]) */
static int tjc_attention_grad(tjc_state *s, tj__kern *k) {
    tjc_att a;
    tjc_att_of(k, &a);
    const void *p[9] = {k->in[0], k->in[1], k->in[2], k->in[4], k->in[5], k->scratch, k->pout[0], k->pout[1], k->pout[2]};
    if (a.d > TJ__ATTN_MAXD || a.dv > TJ__ATTN_MAXD) return tjc_fail(k, "dim %lld / dim' %lld: at most %d", (long long)a.d, (long long)a.dv, TJ__ATTN_MAXD);
    if (!k->scratch) return tjc_fail(k, "no workspace for D (tj__attention_scratch)");
    if (a.dt == TJ_F64) {
        const double *dl = (const double *)k->scratch;
        tjc_k_att_dl<double><<<tjc_blocks(a.nb * a.tq, TJC_ATT_WPB), 32 * TJC_ATT_WPB, 0, s->compute>>>(a, k->in[3], k->in[5], (double *)k->scratch);
        TJC_LAUNCHED(k, "tjc_k_att_dl");
        TJC_ATT_LAUNCH(tjc_k_att_dkv, double, a, a.nbk * a.tk, k->in[0], k->in[1], k->in[2], k->in[4], k->in[5], dl, k->pout[1], k->pout[2]);
        TJC_ATT_LAUNCH(tjc_k_att_dq, double, a, a.nb * a.tq, k->in[0], k->in[1], k->in[2], k->in[4], k->in[5], dl, k->pout[0]);
        return 0;
    }
    const float *dl = (const float *)k->scratch;
    tjc_k_att_dl<float><<<tjc_blocks(a.nb * a.tq, TJC_ATT_WPB), 32 * TJC_ATT_WPB, 0, s->compute>>>(a, k->in[3], k->in[5], (float *)k->scratch);
    TJC_LAUNCHED(k, "tjc_k_att_dl");
    switch (tjc_fa_applies(s, &a, 9, p)) {
    case 1: return tjc_fa_backward<tjc_fa_fmt_bf16>(s, k, a, dl);
    case 2: return tjc_fa_backward<tjc_fa_fmt_tf32>(s, k, a, dl);
    case 3: return tjc_fa_backward<tjc_fa_fmt_f32x3>(s, k, a, dl);
    }
    TJC_ATT_LAUNCH(tjc_k_att_dkv, float, a, a.nbk * a.tk, k->in[0], k->in[1], k->in[2], k->in[4], k->in[5], dl, k->pout[1], k->pout[2]);
    TJC_ATT_LAUNCH(tjc_k_att_dq, float, a, a.nb * a.tq, k->in[0], k->in[1], k->in[2], k->in[4], k->in[5], dl, k->pout[0]);
    return 0;
}
#undef TJC_ATT_LAUNCH
#undef TJC_FA_E

// ==== [11] CUDA backend: fused groups =======================================
/* A fused group (tinyjax.h [11], tj__fuse) is a chain of elementwise nodes of
   one layout that the CPU runs as one loop (tj__k_fused / tj__fused_part).
   Here it is one kernel: each thread computes its elements through every
   member in thread-private storage (registers, spilling to the thread's
   local memory), so members that are not stored never touch a buffer.
   A leaf operand is laid out like the group (element i), a scalar (element
   0), or laid out otherwise (a bias, a row's mean, a transposed operand:
   tj_backend.fused_groups 2), read through its strides in the group's
   layout (tj__bstrides). Leaves of the same strides share one offset; the
   distinct ones (at most TJ_FUSED_BCAST, as tj__fuse keeps them) are
   computed per element by two walks of three operands (tjc_ix), only in
   groups that have them.

   Bits: the CPU computes a group in float when every member passes
   tj__flt_ok, else in double, and rounds each member's result to its dtype
   as a store and a load would (tj__round_n). The kernel does the same, with
   the formulas of TJ__UNARY_OPS / TJ__BINARY_OPS expanded over tjc_rn, a
   number type whose + - * / are the round-to-nearest intrinsics: nvcc never
   contracts them into an FMA (the CPU compiles its chunk math without
   contraction). Unary formulas run in double as on the CPU, exp and tanh by
   tj__fexp / tj__ftanh (ported below) for float groups. So a group gives the
   CPU's bits, except where the CPU calls libm in double (log, pows, and exp
   and tanh of f64 groups): CUDA's may differ in the last bit of the double.
   A NaN made by an op (0 / 0, sqrt of a negative) has the GPU's bits
   (0x7fffffff in f32), where x86 makes its default NaN with the sign bit
   set: NaN on both, not the same bits (tests use inputs that make none).

   The group's program (per member: op, dtype, scalar attribute, where each
   operand comes from, a leaf's dtype and whether it is a scalar) is built on
   the host at each run (a few dozen bytes per member, no device work) and
   uploaded to the device once per distinct program: mesh device states keep
   a table keyed by its bytes. The kernel copies it to shared memory; the
   leaf and store pointers, which change from run to run, are a
   __grid_constant__ parameter (read in place, never copied per thread).

   tjc_fused_at is compiled for the host too: tj_cuda_fused_emulator (test
   hook, no GPU needed) runs fused groups through the same program builder
   and per-element code on the CPU, so test_cuda checks both here. */

#define TJC_FMAX TJ__MAXFUSE
typedef struct {
    double s;          /* the op's scalar attribute (pows)                  */
    int16_t op;
    int8_t dt, nin;    /* result dtype, operands                           */
    int8_t src[3];     /* operand j: an earlier member's index, or -1: a leaf */
    int8_t ldt[3];     /* a leaf's dtype                                    */
    int8_t lone[3];    /* a leaf that is a scalar: element 0 for every i    */
    int8_t lbc[3];     /* a broadcast leaf: its offset (tjc_fptr.bix), or -1 */
    int8_t slot;       /* the register slot of its result (tjc_fused_small) */
    int8_t rs[3];      /* operand j's register slot, where src[j] >= 0     */
} tjc_fmem;
typedef struct {
    int32_t nm, flt;   /* members (the root last); compute in float        */
    int32_t nslot;     /* register slots tjc_fused_small needs (tjc_fslots) */
    tjc_fmem m[TJC_FMAX];
} tjc_fprog;
/* tjc_k_fused copies it into static shared memory in 4-byte words */
static_assert(sizeof(tjc_fprog) % 4 == 0 && sizeof(tjc_fprog) <= 16384, "tjc_fprog: whole 4-byte words, well under 48 KB of static shared memory");
#define TJC_FBIX ((TJ_FUSED_BCAST + TJC_IXOPS - 1) / TJC_IXOPS) /* walks of broadcast leaves */
typedef struct {
    const void *leaf[TJC_FMAX * 3]; /* member mi's operand j: leaf[mi * 3 + j] */
    void *store[TJC_FMAX];          /* member mi's buffer, or NULL: not stored */
    int nbix;                       /* walks in use: broadcast offset b is operand b % 3 of walk b / 3 */
    tjc_ix bix[TJC_FBIX];
} tjc_fptr;
TJC_PARAMS_FIT(tjc_fptr);
static_assert(TJC_FBIX == 2 && TJC_IXOPS == 3, "tjc_fbc_off picks among two walks of three offsets");
/* broadcast offset b of walks 0 and 1 (named values, no array indexed at
   run time: it would live in local memory) */
__host__ __device__ __forceinline__ int64_t tjc_fbc_off(const tjc_off3 &o0, const tjc_off3 &o1, int b) {
    int c = b < 3 ? b : b - 3;
    int64_t a = b < 3 ? o0.a : o1.a, m = b < 3 ? o0.b : o1.b, z = b < 3 ? o0.c : o1.c;
    return c == 0 ? a : c == 1 ? m : z;
}

/* + - * / rounded to nearest, never contracted (the CPU's float or double
   arithmetic, op by op); comparisons as usual */
__host__ __device__ __forceinline__ float tjc_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
__host__ __device__ __forceinline__ double tjc_add(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
__host__ __device__ __forceinline__ float tjc_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
__host__ __device__ __forceinline__ double tjc_sub(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}
__host__ __device__ __forceinline__ float tjc_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
__host__ __device__ __forceinline__ double tjc_mul(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
__host__ __device__ __forceinline__ float tjc_div(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
__host__ __device__ __forceinline__ double tjc_div(double a, double b) {
#ifdef __CUDA_ARCH__
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}
template <typename T>
struct tjc_rn {
    T v;
    __host__ __device__ tjc_rn(T x) : v(x) {} /* implicit: constants of the formulas */
    __host__ __device__ explicit operator float() const { return (float)v; }
    __host__ __device__ explicit operator double() const { return (double)v; }
    __host__ __device__ friend tjc_rn operator+(tjc_rn a, tjc_rn b) { return tjc_add(a.v, b.v); }
    __host__ __device__ friend tjc_rn operator-(tjc_rn a, tjc_rn b) { return tjc_sub(a.v, b.v); }
    __host__ __device__ friend tjc_rn operator*(tjc_rn a, tjc_rn b) { return tjc_mul(a.v, b.v); }
    __host__ __device__ friend tjc_rn operator/(tjc_rn a, tjc_rn b) { return tjc_div(a.v, b.v); }
    __host__ __device__ friend tjc_rn operator-(tjc_rn a) { return -a.v; }
    __host__ __device__ friend bool operator<(tjc_rn a, tjc_rn b) { return a.v < b.v; }
    __host__ __device__ friend bool operator<=(tjc_rn a, tjc_rn b) { return a.v <= b.v; }
    __host__ __device__ friend bool operator>(tjc_rn a, tjc_rn b) { return a.v > b.v; }
    __host__ __device__ friend bool operator>=(tjc_rn a, tjc_rn b) { return a.v >= b.v; }
    __host__ __device__ friend bool operator==(tjc_rn a, tjc_rn b) { return a.v == b.v; }
    __host__ __device__ friend bool operator!=(tjc_rn a, tjc_rn b) { return a.v != b.v; }
};
typedef tjc_rn<double> tjc_rd;
/* the libm calls of the unary formulas, in double: sqrt is correctly
   rounded on both sides; log, log1p, expm1, sin, cos, erf and pow are
   CUDA's on the device */
__host__ __device__ __forceinline__ tjc_rd sqrt(tjc_rd a) {
#ifdef __CUDA_ARCH__
    return __dsqrt_rn(a.v);
#else
    return ::sqrt(a.v);
#endif
}
__host__ __device__ __forceinline__ tjc_rd log(tjc_rd a) { return ::log(a.v); }
__host__ __device__ __forceinline__ tjc_rd log1p(tjc_rd a) { return ::log1p(a.v); }
__host__ __device__ __forceinline__ tjc_rd expm1(tjc_rd a) { return ::expm1(a.v); }
__host__ __device__ __forceinline__ tjc_rd sin(tjc_rd a) { return ::sin(a.v); }
__host__ __device__ __forceinline__ tjc_rd cos(tjc_rd a) { return ::cos(a.v); }
__host__ __device__ __forceinline__ tjc_rd erf(tjc_rd a) { return ::erf(a.v); }
__host__ __device__ __forceinline__ tjc_rd fabs(tjc_rd a) { return ::fabs(a.v); }
__host__ __device__ __forceinline__ tjc_rd pow(tjc_rd a, tjc_rd b) { return ::pow(a.v, b.v); }
__host__ __device__ __forceinline__ uint64_t tjc_dbits(double d) {
#ifdef __CUDA_ARCH__
    return (uint64_t)__double_as_longlong(d);
#else
    uint64_t b;
    memcpy(&b, &d, 8);
    return b;
#endif
}
__host__ __device__ __forceinline__ double tjc_bitsd(uint64_t b) {
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)b);
#else
    double d;
    memcpy(&d, &b, 8);
    return d;
#endif
}
/* tj__fexp_q, tj__fexp, tj__ftanh of tinyjax.h [5], operation for operation */
__host__ __device__ __forceinline__ tjc_rd tjc_fexp_q(tjc_rd x, tjc_rd *s) {
    tjc_rd t = 0.0, n = 0.0, r = 0.0, q = 0.0;
    x = x < -708.0 ? tjc_rd(-708.0) : x;
    x = x > 709.0 ? tjc_rd(709.0) : x;
    t = x * 1.4426950408889634 + 6755399441055744.0;
    n = t - 6755399441055744.0;
    r = x - n * 6.93147180369123816490e-01 - n * 1.90821492927058770002e-10;
    q = 1.0 / 479001600;
    q = q * r + 1.0 / 39916800;
    q = q * r + 1.0 / 3628800;
    q = q * r + 1.0 / 362880;
    q = q * r + 1.0 / 40320;
    q = q * r + 1.0 / 5040;
    q = q * r + 1.0 / 720;
    q = q * r + 1.0 / 120;
    q = q * r + 1.0 / 24;
    q = q * r + 1.0 / 6;
    q = q * r + 0.5;
    q = q * r + 1.0;
    q = q * r;
    *s = tjc_bitsd((tjc_dbits(t.v) - 0x4338000000000000ull + 1023) << 52);
    return q;
}
__host__ __device__ __forceinline__ tjc_rd tjc_fexp(tjc_rd x) {
    tjc_rd s = 0.0, q = tjc_fexp_q(x, &s);
    return (q + 1.0) * s;
}
__host__ __device__ __forceinline__ tjc_rd tjc_ftanh(tjc_rd x) {
    tjc_rd s = 0.0, q = tjc_fexp_q(2.0 * tjc_rd(fabs(x.v)), &s), e = s * q + (s - 1.0);
    return copysign((e / (e + 2.0)).v, x.v);
}
/* exp and tanh of the unary formulas: float groups take the CPU's
   tj__fexp / tj__ftanh, double groups libm's (CUDA's on the device) */
template <typename T>
__host__ __device__ __forceinline__ tjc_rd tjc_fu_exp(tjc_rd x) {
    return sizeof(T) == 4 ? tjc_fexp(x) : tjc_rd(::exp(x.v));
}
template <typename T>
__host__ __device__ __forceinline__ tjc_rd tjc_fu_tanh(tjc_rd x) {
    return sizeof(T) == 4 ? tjc_ftanh(x) : tjc_rd(::tanh(x.v));
}
__host__ __device__ __forceinline__ tjc_rd tjc_fu_gelu_d(tjc_rd a, tjc_rd t) {
    return 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * TJ__GELU_C * (1.0 + 3.0 * 0.044715 * a * a);
}
/* one member's op on its operands, in compute type T (tj__math): unary
   formulas on a double, binary ones on T, select picks */
#define TJ__EXP(x) tjc_fu_exp<T>(x)
#define TJ__TANH(x) tjc_fu_tanh<T>(x)
#define tj__gelu_d(a, t) tjc_fu_gelu_d(a, t)
#define TJC_FU_UNARY(op_, nm, expr, ...) \
    case TJ__OP_##op_: {                 \
        tjc_rd a = (double)v0;           \
        return (T)(double)(tjc_rd)(expr); \
    }
#define TJC_FU_BINARY(op_, nm, expr) \
    case TJ__OP_##op_: {             \
        tjc_rn<T> a = v0, b = v1;    \
        return (T)(tjc_rn<T>)(expr); \
    }
template <typename T>
__host__ __device__ __forceinline__ T tjc_fu_op(int op, double s, T v0, T v1, T v2) {
    (void)s;
    switch (op) {
        TJ__UNARY_OPS(TJC_FU_UNARY)
        TJ__BINARY_OPS(TJC_FU_BINARY)
    case TJ__OP_SELECT: return v0 != (T)0 ? v1 : v2;
    default: return (T)NAN;
    }
}
/* the same on U elements at once (tjc_fused_small): one switch, each
   formula written out U times */
#define TJC_FU_UNARY_U(op_, nm, expr, ...)    \
    case TJ__OP_##op_:                        \
        TJC_UNROLL                            \
        for (int u = 0; u < U; u++) {         \
            tjc_rd a = (double)v[u][0];       \
            o[u] = (T)(double)(tjc_rd)(expr); \
        }                                     \
        return;
#define TJC_FU_BINARY_U(op_, nm, expr)         \
    case TJ__OP_##op_:                         \
        TJC_UNROLL                             \
        for (int u = 0; u < U; u++) {          \
            tjc_rn<T> a = v[u][0], b = v[u][1]; \
            o[u] = (T)(tjc_rn<T>)(expr);       \
        }                                      \
        return;
template <typename T, int U>
__host__ __device__ __forceinline__ void tjc_fu_op_u(int op, double s, const T (&v)[U][3], T (&o)[U]) {
    (void)s;
    switch (op) {
        TJ__UNARY_OPS(TJC_FU_UNARY_U)
        TJ__BINARY_OPS(TJC_FU_BINARY_U)
    case TJ__OP_SELECT:
        TJC_UNROLL
        for (int u = 0; u < U; u++) o[u] = v[u][0] != (T)0 ? v[u][1] : v[u][2];
        return;
    default:
        TJC_UNROLL
        for (int u = 0; u < U; u++) o[u] = (T)NAN;
        return;
    }
}
#undef TJ__EXP
#undef TJ__TANH
#undef tj__gelu_d
#undef TJC_FU_UNARY
#undef TJC_FU_BINARY
#undef TJC_FU_UNARY_U
#undef TJC_FU_BINARY_U
/* bf16 as tj_f32_to_bf16 (NaN kept quiet with its sign) and back */
__host__ __device__ __forceinline__ uint32_t tjc_fbits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}
__host__ __device__ __forceinline__ float tjc_bitsf(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}
__host__ __device__ __forceinline__ uint16_t tjc_to_bf16(float f) {
    uint32_t u = tjc_fbits(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
__host__ __device__ __forceinline__ float tjc_from_bf16(uint16_t h) { return tjc_bitsf((uint32_t)h << 16); }
/* tj__f2i32 */
__host__ __device__ __forceinline__ int32_t tjc_f2i32(double v) {
    return v != v ? 0 : v >= 2147483647.0 ? INT_MAX : v <= -2147483648.0 ? INT_MIN : (int32_t)v;
}
/* a leaf's element as T (tj__load_nf in float, tj__load_n in double) */
template <typename T>
__host__ __device__ __forceinline__ T tjc_fu_ld(const void *p, int dt, int64_t i) {
    switch (dt) {
    case TJ_F32: return (T)((const float *)p)[i];
    case TJ_BF16: return (T)tjc_from_bf16(((const uint16_t *)p)[i]);
    case TJ_I32: return (T)(double)((const int32_t *)p)[i];
    default: return (T)((const double *)p)[i];
    }
}
/* v rounded to dtype dt as if stored and loaded again (tj__round_n) */
template <typename T>
__host__ __device__ __forceinline__ T tjc_fu_round(T v, int dt) {
    if (sizeof(T) == 4) return dt == TJ_BF16 ? (T)tjc_from_bf16(tjc_to_bf16((float)v)) : v;
    switch (dt) {
    case TJ_F32: return (T)(float)v;
    case TJ_BF16: return (T)tjc_from_bf16(tjc_to_bf16((float)v));
    case TJ_I32: return (T)(double)tjc_f2i32((double)v);
    default: return v;
    }
}
/* store a (rounded) member value (tj__store_nf, tj__store_n) */
template <typename T>
__host__ __device__ __forceinline__ void tjc_fu_st(void *p, int dt, int64_t i, T v) {
    switch (dt) {
    case TJ_F32: ((float *)p)[i] = (float)v; break;
    case TJ_BF16: ((uint16_t *)p)[i] = tjc_to_bf16((float)v); break;
    case TJ_I32: ((int32_t *)p)[i] = tjc_f2i32((double)v); break;
    default: ((double *)p)[i] = (double)v; break;
    }
}
/* element i of every member, then the stores (after all members: a member
   may be stored over a donated argument that a later member reads) */
/* (BC: the group has broadcast leaves; a kernel without them keeps the
   registers the offsets would take, and with them its occupancy) */
template <typename T, bool BC>
__host__ __device__ __forceinline__ void tjc_fused_at(const tjc_fprog &p, const tjc_fptr &q, int64_t i) {
    T r[TJC_FMAX];
    tjc_off3 o0 = {0, 0, 0}, o1 = {0, 0, 0};
    if (BC && q.nbix > 0) o0 = tjc_ix_at(q.bix[0], i);
    if (BC && q.nbix > 1) o1 = tjc_ix_at(q.bix[1], i);
    for (int mi = 0; mi < p.nm; mi++) {
        const tjc_fmem &x = p.m[mi];
        T v[3] = {(T)0, (T)0, (T)0};
        for (int j = 0; j < x.nin; j++)
            v[j] = x.src[j] >= 0 ? r[x.src[j]] : tjc_fu_ld<T>(q.leaf[mi * 3 + j], x.ldt[j], x.lone[j] ? 0 : BC && x.lbc[j] >= 0 ? tjc_fbc_off(o0, o1, x.lbc[j]) : i);
        if (x.dt == TJ_I32 && tjc_i32_arith(x.op)) r[mi] = (T)tjc_i32_op(x.op, (double)v[0], x.op == TJ__OP_POWS ? (double)x.s : (double)v[1]); /* (T is double: an i32 result) */
        else r[mi] = tjc_fu_round<T>(tjc_fu_op<T>(x.op, x.s, v[0], v[1], v[2]), x.dt);
    }
    for (int mi = 0; mi < p.nm; mi++)
        if (q.store[mi]) tjc_fu_st<T>(q.store[mi], p.m[mi].dt, i, r[mi]);
}
/* Groups whose live results fit TJC_FSMALL register slots keep every
   result in registers and take TJC_FSMALL_U elements per thread a grid
   stride apart (the elementwise kernel's reason: more loads in flight per
   thread). The host gives each member a slot (tjc_fslots: the lowest free
   one once the operands that die at this member are freed; a stored
   member keeps its slot to the end, where the stores are), so the member
   count does not matter: in the GPT-2 step, groups of 2 need 1 slot and
   AdamW's 17 members 4. Results are written and read by unrolled selects
   over the slots (tjc_fpick), so every index is a constant: tjc_fused_at's
   results array, indexed by each operand's source at run time, lives in
   local memory. The member loop is not unrolled (one copy of the formulas,
   U elements wide: tjc_fu_op_u). Same members, same formulas, same
   rounding: the same bits. TJ_CUDA_FUSED_SMALL=0 in the environment (read
   at each launch) runs every group one element at a time, to compare the
   two. Each slot costs a select per operand read and per result written:
   by count, 8 slots would make AdamW's group compute-bound on an H100
   (about 370 instructions per element against 170 with 4; not measured). */
#define TJC_FSMALL 4
#define TJC_FSMALL_U(BC) ((BC) ? 2 : 4) /* (a broadcast walk's offsets take registers per element) */
template <typename T>
__host__ __device__ __forceinline__ T tjc_fpick(const T (&r)[TJC_FSMALL], int k) {
    T v = r[0];
    TJC_UNROLL
    for (int c = 1; c < TJC_FSMALL; c++) v = c == k ? r[c] : v;
    return v;
}
/* thread t of stride threads (__host__ __device__: the fused-group emulator
   runs it thread by thread) */
template <typename T, bool BC>
__host__ __device__ __forceinline__ void tjc_fused_small(const tjc_fprog &p, const tjc_fptr &q, int64_t n, int64_t t, int64_t stride) {
    enum { U = TJC_FSMALL_U(BC) };
    for (int64_t i0 = t; i0 < n; i0 += U * stride) {
        T r[U][TJC_FSMALL];
        tjc_off3 o0[U], o1[U];
        TJC_UNROLL
        for (int u = 0; u < U; u++) {
            const tjc_off3 z = {0, 0, 0};
            o0[u] = o1[u] = z;
            if (BC && q.nbix > 0 && i0 + u * stride < n) o0[u] = tjc_ix_at(q.bix[0], i0 + u * stride);
            if (BC && q.nbix > 1 && i0 + u * stride < n) o1[u] = tjc_ix_at(q.bix[1], i0 + u * stride);
            TJC_UNROLL
            for (int c = 0; c < TJC_FSMALL; c++) r[u][c] = (T)0;
        }
        for (int mi = 0; mi < p.nm; mi++) {
            const tjc_fmem &x = p.m[mi];
            T v[U][3], res[U];
            TJC_UNROLL
            for (int u = 0; u < U; u++) { /* every element's operands first: the loads in flight together */
                const int64_t i = i0 + u * stride;
                TJC_UNROLL
                for (int j = 0; j < 3; j++) {
                    v[u][j] = (T)0;
                    if (j >= x.nin || i >= n) continue;
                    if (x.src[j] >= 0) v[u][j] = tjc_fpick<T>(r[u], x.rs[j]);
                    else v[u][j] = tjc_fu_ld<T>(q.leaf[mi * 3 + j], x.ldt[j], x.lone[j] ? 0 : BC && x.lbc[j] >= 0 ? tjc_fbc_off(o0[u], o1[u], x.lbc[j]) : i);
                }
            }
            tjc_fu_op_u<T, U>(x.op, x.s, v, res);
            TJC_UNROLL
            for (int u = 0; u < U; u++) {
                if (x.dt == TJ_I32 && tjc_i32_arith(x.op)) res[u] = (T)tjc_i32_op(x.op, (double)v[u][0], x.op == TJ__OP_POWS ? (double)x.s : (double)v[u][1]);
                else res[u] = tjc_fu_round<T>(res[u], x.dt);
                TJC_UNROLL
                for (int c = 0; c < TJC_FSMALL; c++) r[u][c] = c == x.slot ? res[u] : r[u][c];
            }
        }
        for (int mi = 0; mi < p.nm; mi++) {
            if (!q.store[mi]) continue;
            TJC_UNROLL
            for (int u = 0; u < U; u++)
                if (i0 + u * stride < n) tjc_fu_st<T>(q.store[mi], p.m[mi].dt, i0 + u * stride, tjc_fpick<T>(r[u], p.m[mi].slot));
        }
    }
}
/* The register slots of program p's members (p->m[].slot, .rs[]) and how
   many it needs (p->nslot; above TJC_FSMALL: tjc_fused_at runs it). A
   member's operands are read before its result is written, so the slot of
   an operand read for the last time is free for the result; a stored
   member's slot is held to the end, where the stores are (a member may be
   stored over a donated argument that a later member reads). */
static void tjc_fslots(tjc_fprog *p, void *const *store) { /* the header's tj__fslots, operands freed first */
    int nin[TJC_FMAX], src[TJC_FMAX * 3], keep[TJC_FMAX], none[TJC_FMAX] = {0}, slot[TJC_FMAX];
    for (int mi = 0; mi < p->nm; mi++) {
        nin[mi] = p->m[mi].nin;
        for (int j = 0; j < 3; j++) src[mi * 3 + j] = j < nin[mi] ? p->m[mi].src[j] : -1;
        keep[mi] = store[mi] != NULL;
    }
    p->nslot = tj__fslots(p->nm, nin, src, keep, none, 1, slot);
    for (int mi = 0; mi < p->nm; mi++) p->m[mi].slot = (int8_t)slot[mi];
    for (int mi = 0; mi < p->nm; mi++)
        for (int j = 0; j < p->m[mi].nin; j++) p->m[mi].rs[j] = p->m[mi].src[j] >= 0 ? p->m[p->m[mi].src[j]].slot : (int8_t)-1;
}
/* test hook (test_cuda, no GPU needed): the slots of a program of nm
   members, operand j of member mi reading member src[mi * 3 + j] (-1: a
   leaf), member mi stored where stored[mi]; returns the slots needed */
extern "C" int tj_cuda_fslots_host(int nm, const int *nin, const int *src, const int *stored, int *slot, int *rs);
extern "C" int tj_cuda_fslots_host(int nm, const int *nin, const int *src, const int *stored, int *slot, int *rs) {
    tjc_fprog p;
    void *store[TJC_FMAX];
    memset(&p, 0, sizeof p);
    p.nm = nm;
    for (int mi = 0; mi < nm; mi++) {
        p.m[mi].nin = (int8_t)nin[mi];
        for (int j = 0; j < 3; j++) p.m[mi].src[j] = (int8_t)(j < nin[mi] ? src[mi * 3 + j] : -1);
        store[mi] = stored[mi] ? (void *)&p : NULL;
    }
    tjc_fslots(&p, store);
    for (int mi = 0; mi < nm; mi++) {
        slot[mi] = p.m[mi].slot;
        for (int j = 0; j < 3; j++) rs[mi * 3 + j] = p.m[mi].rs[j];
    }
    return p.nslot;
}
/* thread t of stride: a small group (SMALL) or one element at a time */
template <typename T, bool BC, bool SMALL>
__host__ __device__ __forceinline__ void tjc_fused_thread(const tjc_fprog &p, const tjc_fptr &q, int64_t n, int64_t t, int64_t stride) {
    if (SMALL) tjc_fused_small<T, BC>(p, q, n, t, stride);
    else
        for (int64_t i = t; i < n; i += stride) tjc_fused_at<T, BC>(p, q, i);
}
template <typename T, bool BC, bool SMALL>
__global__ void __launch_bounds__(TJC_THREADS) tjc_k_fused(const tjc_fprog *gp, const __grid_constant__ tjc_fptr q, int64_t n) {
    __shared__ tjc_fprog p;
    for (int w = threadIdx.x; w < (int)(sizeof p / sizeof(int32_t)); w += blockDim.x) ((int32_t *)&p)[w] = ((const int32_t *)gp)[w];
    __syncthreads();
    tjc_fused_thread<T, BC, SMALL>(p, q, n, blockIdx.x * (int64_t)blockDim.x + threadIdx.x, (int64_t)gridDim.x * blockDim.x);
}
static bool tjc_fsmall_on(void) {
    const char *e = getenv("TJ_CUDA_FUSED_SMALL");
    return !(e && !strcmp(e, "0"));
}
/* the kernel (or, on the host, the thread loop) for program p: float or
   double, broadcast walks or not, small or not */
#define TJC_FUSED_DISPATCH(p, q, CALL)                                                   \
    do {                                                                                 \
        const bool small_ = (p).nslot <= TJC_FSMALL && tjc_fsmall_on(), bc_ = (q).nbix > 0; \
        if ((p).flt) {                                                  \
            if (small_ && bc_) CALL(float, true, true);                 \
            else if (small_) CALL(float, false, true);                  \
            else if (bc_) CALL(float, true, false);                     \
            else CALL(float, false, false);                             \
        } else {                                                        \
            if (small_ && bc_) CALL(double, true, true);                \
            else if (small_) CALL(double, false, true);                 \
            else if (bc_) CALL(double, true, false);                    \
            else CALL(double, false, false);                            \
        }                                                               \
    } while (0)

/* The program and pointers of fused group k->n (the runner's layout: member
   mi's operand j in k->in[mi * 3 + j], NULL where it reads a member; its
   store in k->pout[mi]), as tj__k_fused sets them up. 0, or 1 after
   writing k->err. */
static int tjc_fused_prog(tj__kern *k, tjc_fprog *p, tjc_fptr *q) {
    const tj_node *r = k->n;
    int64_t bst[TJ_FUSED_BCAST][TJ_MAXDIM]; /* the broadcast leaves' distinct strides */
    int nbc = 0;
    memset(p, 0, sizeof *p); /* the table compares the bytes, padding included */
    memset(q, 0, sizeof *q);
    if (r->nmembers < 1 || r->nmembers > TJC_FMAX || r->members[r->nmembers - 1] != r)
        return tjc_fail(k, "a fused group of %d members (want 1 to %d, the root last)", r->nmembers, TJC_FMAX);
    p->nm = r->nmembers;
    p->flt = 1;
    for (int mi = 0; mi < r->nmembers; mi++) {
        const tj_node *x = r->members[mi];
        tjc_fmem *m = &p->m[mi];
        tj_dtype idt[3];
        if (!tj__is_ew(x) || x->nin < 1 || x->nin > 3) return tjc_fail(k, "fused member %d is op '%s', not elementwise", mi, tj__opname(x->op));
        if (!tj__same_layout(&x->lt, &r->lt)) return tjc_fail(k, "fused member %d ('%s') is laid out unlike its group", mi, tj__opname(x->op));
        m->op = (int16_t)x->op;
        m->dt = (int8_t)x->lt.dt;
        m->nin = (int8_t)x->nin;
        m->s = x->a.s;
        for (int j = 0; j < x->nin; j++) {
            const tj_node *y = x->in[j];
            idt[j] = y->lt.dt;
            m->src[j] = m->lbc[j] = -1;
            for (int c = 0; c < mi; c++)
                if (r->members[c] == y) m->src[j] = (int8_t)c;
            if (m->src[j] >= 0) continue;
            if (!k->in[mi * 3 + j]) return tjc_fail(k, "fused member %d ('%s'): operand %d has no buffer", mi, tj__opname(x->op), j);
            if (y->lt.rank && !tj__same_layout(&y->lt, &r->lt)) { /* a broadcast leaf: its strides, shared with any leaf of the same */
                int64_t st[TJ_MAXDIM] = {0};
                int b;
                tj__bstrides(&y->lt, &r->lt, st);
                for (b = 0; b < nbc && memcmp(bst[b], st, sizeof st); b++) continue;
                if (b == TJ_FUSED_BCAST)
                    return tjc_fail(k, "fused member %d ('%s'): more than %d broadcast leaves in one group", mi, tj__opname(x->op), TJ_FUSED_BCAST);
                if (b == nbc) memcpy(bst[nbc++], st, sizeof st);
                m->lbc[j] = (int8_t)b;
            }
            m->ldt[j] = (int8_t)y->lt.dt;
            m->lone[j] = (int8_t)!y->lt.rank;
            q->leaf[mi * 3 + j] = k->in[mi * 3 + j];
        }
        q->store[mi] = k->pout[mi];
        p->flt &= tj__flt_ok(x->op, x->lt.dt, x->nin, idt);
    }
    if (!q->store[r->nmembers - 1]) return tjc_fail(k, "the fused group's root has no buffer");
    tjc_fslots(p, q->store);
    for (int w = 0; w * TJC_IXOPS < nbc; w++) { /* the walks: three broadcast leaves each */
        const int64_t *st[TJC_IXOPS];
        int nops = nbc - w * TJC_IXOPS < TJC_IXOPS ? nbc - w * TJC_IXOPS : TJC_IXOPS;
        for (int c = 0; c < nops; c++) st[c] = bst[w * TJC_IXOPS + c];
        tjc_ix_make(&q->bix[w], r->lt.rank, r->lt.dim, nops, st, tj__numel(&r->lt));
        q->nbix = w + 1;
    }
    return 0;
}

/* Programs uploaded to device memory, per mesh device: an open-addressing
   table on the program's bytes (FNV-1a), entries in slabs of device memory
   allocated TJC_FSLAB programs at a time. */
#define TJC_FSLAB 256
typedef struct {
    uint64_t h;
    tjc_fprog *host; /* the bytes (compared on a hash hit)                  */
    tjc_fprog *dev;
} tjc_fentry;
typedef struct tjc_ftab {
    tjc_fentry *e;
    int cap, n;            /* slots (a power of two), programs             */
    void **slab;           /* device slabs                                 */
    int nslab, used;       /* slabs, programs in the last one              */
} tjc_ftab;
static uint64_t tjc_fhash(const tjc_fprog *p) {
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *p; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
static void tjc_ftab_free(tjc_ftab *t) {
    if (!t) return;
    for (int i = 0; i < t->cap; i++) TJ_FREE(t->e[i].host);
    for (int i = 0; i < t->nslab; i++) cudaFree(t->slab[i]);
    TJ_FREE(t->e);
    TJ_FREE(t->slab);
    TJ_FREE(t);
}
/* the device copy of program p on stream st (uploaded on first sight);
   NULL after writing k->err */
static const tjc_fprog *tjc_fprog_dev(tjc_ftab **tp, cudaStream_t st, tj__kern *k, const tjc_fprog *p) {
    tjc_ftab *t = *tp;
    uint64_t h = tjc_fhash(p);
    int i;
    if (!t && !(t = *tp = (tjc_ftab *)tj__calloc(sizeof *t))) {
        tjc_fail(k, "out of host memory for the fused-program table");
        return NULL;
    }
    if (2 * (t->n + 1) > t->cap) { /* grow: rehash into twice the slots */
        int nc = t->cap ? 2 * t->cap : 64;
        tjc_fentry *ne = (tjc_fentry *)tj__calloc(sizeof *ne * (size_t)nc);
        if (!ne) {
            tjc_fail(k, "out of host memory for the fused-program table");
            return NULL;
        }
        for (i = 0; i < t->cap; i++)
            if (t->e[i].host) {
                int j = (int)(t->e[i].h & (uint64_t)(nc - 1));
                while (ne[j].host) j = (j + 1) & (nc - 1);
                ne[j] = t->e[i];
            }
        TJ_FREE(t->e);
        t->e = ne;
        t->cap = nc;
    }
    for (i = (int)(h & (uint64_t)(t->cap - 1)); t->e[i].host; i = (i + 1) & (t->cap - 1))
        if (t->e[i].h == h && !memcmp(t->e[i].host, p, sizeof *p)) return t->e[i].dev;
    if (!t->nslab || t->used == TJC_FSLAB) {
        void **ns = (void **)TJ_REALLOC(t->slab, sizeof(void *) * (size_t)(t->nslab + 1)), *d = NULL;
        cudaError_t e;
        if (!ns) {
            tjc_fail(k, "out of host memory for the fused-program table");
            return NULL;
        }
        t->slab = ns;
        if ((e = cudaMalloc(&d, sizeof(tjc_fprog) * TJC_FSLAB)) != cudaSuccess) {
            (void)cudaGetLastError();
            tjc_fail(k, "cudaMalloc of %zu bytes for fused-group programs failed: %s", sizeof(tjc_fprog) * TJC_FSLAB, cudaGetErrorString(e));
            return NULL;
        }
        t->slab[t->nslab++] = d;
        t->used = 0;
    }
    if (!(t->e[i].host = (tjc_fprog *)tj__malloc(sizeof *p))) {
        tjc_fail(k, "out of host memory for the fused-program table");
        return NULL;
    }
    memcpy(t->e[i].host, p, sizeof *p);
    t->e[i].h = h;
    t->e[i].dev = (tjc_fprog *)t->slab[t->nslab - 1] + t->used++;
    t->n++;
    /* pageable source: staged before the call returns, so the entry's bytes
       may move later; the kernel after it on the stream sees them */
    if (cudaMemcpyAsync(t->e[i].dev, t->e[i].host, sizeof *p, cudaMemcpyHostToDevice, st) != cudaSuccess) {
        cudaError_t e = cudaGetLastError();
        TJ_FREE(t->e[i].host);
        t->e[i].host = NULL;
        t->n--;
        t->used--;
        tjc_fail(k, "uploading a fused-group program failed: %s", cudaGetErrorString(e));
        return NULL;
    }
    return t->e[i].dev;
}
/* tj__k_fused: the group as one kernel */
static int tjc_fused(tjc_state *s, tj__kern *k) {
    tjc_fprog p;
    tjc_fptr q;
    const tjc_fprog *dp;
    int64_t n = tj__numel(&k->ot);
    if (tjc_fused_prog(k, &p, &q)) return 1;
    if (!n) return 0;
    if (!(dp = tjc_fprog_dev(&s->fused, s->compute, k, &p))) return 1;
    /* every block copies the program first: enough blocks to fill the GPU
       (8 of 256 threads per SM, 4 rounds), each looping over many elements */
    unsigned grid = tjc_blocks(n, TJC_THREADS), fill = (unsigned)(s->sms > 0 ? 32 * s->sms : TJC_MAXGRID);
    if (grid > fill) grid = fill;
#define TJC_FUSED_LAUNCH(T, BC, SMALL) tjc_k_fused<T, BC, SMALL><<<grid, TJC_THREADS, 0, s->compute>>>(dp, q, n)
    TJC_FUSED_DISPATCH(p, q, TJC_FUSED_LAUNCH);
#undef TJC_FUSED_LAUNCH
    TJC_LAUNCHED(k, "tjc_k_fused");
    return 0;
}

/* ---- the fused-group emulator (a test hook; no GPU needed) ----
   A backend in plain host memory that runs every fused group through
   tjc_fused_prog and the host build of tjc_fused_thread (the CUDA path's own
   code), and every other node through its CPU kernel. test_cuda compares it
   with the CPU backend bit for bit where no GPU exists, and
   TJ_BACKEND=cuda-emulator runs whole test programs on it (tinyjax.h
   declares both). */
static void *tjc_emu_alloc(tj_backend *b, int dev, int space, size_t bytes) {
    void *p = NULL;
    (void)b;
    (void)dev;
    if (space != TJ_SPACE_DEVICE && space != TJ_SPACE_HOST) return NULL;
    return posix_memalign(&p, TJ__ALIGN, bytes ? bytes : 1) ? NULL : p;
}
static void tjc_emu_free(tj_backend *b, int dev, int space, void *p) {
    (void)b;
    (void)dev;
    (void)space;
    free(p);
}
static int tjc_emu_copy(tj_backend *b, int dev, void *dst, int dst_space, const void *src, int src_space, size_t bytes) {
    (void)b;
    (void)dev;
    (void)dst_space;
    (void)src_space;
    if (bytes) memcpy(dst, src, bytes);
    return 0;
}
static int tjc_emu_run(tj_backend *b, tj__kern *k) {
    tjc_fprog p;
    tjc_fptr q;
    int64_t n = tj__numel(&k->ot);
    (void)b;
    if (!k->n->members) {
        tj__ops[k->n->op].cpu(k); /* an error lands in k->err, as on the CPU */
        return 0;
    }
    if (tjc_fused_prog(k, &p, &q)) return 1;
    /* the kernel's threads one after another: 37 of them, so a thread's
       elements a stride apart reach every case of its last round */
#define TJC_FUSED_HOST(T, BC, SMALL) for (int64_t t = 0; t < 37; t++) tjc_fused_thread<T, BC, SMALL>(p, q, n, t, 37)
    TJC_FUSED_DISPATCH(p, q, TJC_FUSED_HOST);
#undef TJC_FUSED_HOST
    return 0;
}
static int tjc_emu_sync(tj_backend *b, int dev, char *err, size_t errlen) {
    (void)b;
    (void)dev;
    (void)err;
    (void)errlen;
    return 0; /* runs are synchronous: their errors went to k->err */
}
extern "C" tj_backend *tj_cuda_fused_emulator(void) {
    tj_backend *b = (tj_backend *)tj__calloc(sizeof *b);
    if (!b) return NULL;
    b->name = "cuda-fused-emulator";
    b->alloc = tjc_emu_alloc;
    b->free = tjc_emu_free;
    b->copy = tjc_emu_copy;
    b->run = tjc_emu_run;
    b->sync = tjc_emu_sync;
    b->fused_groups = 2; /* broadcast leaves too */
    return b;
}
extern "C" void tj_cuda_fused_emulator_free(tj_backend *b) { TJ_FREE(b); }

// ==== [11] CUDA backend: memory spaces, copies, sync =======================
/* TJ_SPACE_DEVICE is cudaMalloc memory, TJ_SPACE_HOST pinned host memory
   (cudaHostAlloc, the offload target), TJ_SPACE_USER the caller's pageable
   memory. A copy on a mesh device (dev >= 0: a final carry) is queued on
   that device's compute stream after its kernels; a copy with dev -1
   (arrays in and out) waits for every device's streams, copies, and waits
   for the bytes to land.

   The runner's offload, fetch and staged slices go to copy_async: the
   device's own copy stream, after an event recorded on its compute stream
   (so a copy reads what the kernels before it wrote), and each copy's
   ticket is an event recorded after it; wait makes the compute stream wait
   for that event (cudaStreamWaitEvent), so neither the host nor the other
   kernels wait. Host space is pinned (cudaHostAlloc), so these copies are
   truly asynchronous DMA. devsim ([11] in tinyjax.h) mirrors this with a
   worker thread per stream; that mirror, not this code, is what the test
   suite runs where there is no GPU. */

static void tjc_pending(char *slot, size_t n, const char *what, cudaError_t e) {
    if (!slot[0]) snprintf(slot, n, "cuda backend: %s failed: %s", what, cudaGetErrorString(e));
}
/* wait for every mesh device's stream; the first failure goes to be->pending */
static int tjc_sync_all(tjc_backend *be) {
    int i, bad = 0;
    cudaError_t se = cudaSetDevice(be->device);
    if (se != cudaSuccess) {
        tjc_pending(be->pending, sizeof be->pending, "cudaSetDevice", se);
        return 1;
    }
    for (i = 0; i < TJ_MAXDEV; i++) {
        cudaError_t e;
        if (!be->per[i]) continue;
        if ((e = cudaStreamSynchronize(be->per[i]->compute)) != cudaSuccess || (e = cudaStreamSynchronize(be->per[i]->copy)) != cudaSuccess) {
            tjc_pending(be->pending, sizeof be->pending, "cudaStreamSynchronize", e);
            bad = 1;
        }
    }
    return bad;
}
static void *tjc_alloc(tj_backend *b, int dev, int space, size_t bytes) {
    tjc_backend *be = tjc_be_of(b);
    void *p = NULL;
    cudaError_t e = cudaSetDevice(be->device);
    (void)dev; /* one GPU serves every mesh device */
    if (e == cudaSuccess) {
        if (space == TJ_SPACE_DEVICE) e = cudaMalloc(&p, bytes ? bytes : 1);
        else if (space == TJ_SPACE_HOST) e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
        else return NULL;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is not sticky: clear it; the library reports OOM */
        return NULL;
    }
    return p;
}
static void tjc_free(tj_backend *b, int dev, int space, void *p) {
    tjc_backend *be = tjc_be_of(b);
    cudaError_t e = cudaSuccess;
    (void)dev;
    if (!p) return;
    if ((e = cudaSetDevice(be->device)) != cudaSuccess) { /* a device thread's first CUDA call would make a context on GPU 0 */
        tjc_pending(be->pending, sizeof be->pending, "cudaSetDevice", e);
        return;
    }
    if (space == TJ_SPACE_DEVICE) e = cudaFree(p); /* cudaFree waits for the device */
    else if (space == TJ_SPACE_HOST && !tjc_sync_all(be)) e = cudaFreeHost(p);
    if (e != cudaSuccess) tjc_pending(be->pending, sizeof be->pending, space == TJ_SPACE_DEVICE ? "cudaFree" : "cudaFreeHost", e);
}
static int tjc_copy(tj_backend *b, int dev, void *dst, int dst_space, const void *src, int src_space, size_t bytes) {
    tjc_backend *be = tjc_be_of(b);
    cudaError_t e;
    if (!bytes) return 0;
    if (dev >= 0) { /* stream-ordered; pinned host memory is device-addressable */
        char why[256];
        tjc_state *s = tjc_state_of(be, dev, why, sizeof why);
        if (!s) {
            if (!be->pending[0]) snprintf(be->pending, sizeof be->pending, "cuda backend: device %d: %s", dev, why);
            return 1;
        }
        if ((e = cudaSetDevice(be->device)) != cudaSuccess || (e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->compute)) != cudaSuccess) {
            tjc_pending(s->pending, sizeof s->pending, "cudaMemcpyAsync", e);
            return 1;
        }
        return 0;
    }
    if (tjc_sync_all(be)) return 1;
    if (dst_space != TJ_SPACE_DEVICE && src_space != TJ_SPACE_DEVICE) { /* host and user memory: both are plain host memory */
        memcpy(dst, src, bytes);
        return 0;
    }
    /* User memory is pageable: the driver stages it; the stream sync makes
       sure the bytes have landed before any device's kernel can read them. */
    if ((e = cudaSetDevice(be->device)) == cudaSuccess && (e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, be->copy)) == cudaSuccess)
        e = cudaStreamSynchronize(be->copy);
    if (e != cudaSuccess) {
        tjc_pending(be->pending, sizeof be->pending, "cudaMemcpyAsync", e);
        return 1;
    }
    return 0;
}
/* wait for mesh device dev (-1: all); hands back the first error pending
   for it (and any error of a dev -1 call) */
static int tjc_sync(tj_backend *b, int dev, char *err, size_t errlen) {
    tjc_backend *be = tjc_be_of(b);
    int i, bad = 0;
    cudaError_t se = cudaSetDevice(be->device); /* this thread may not have run a kernel on it yet */
    if (se != cudaSuccess) tjc_pending(be->pending, sizeof be->pending, "cudaSetDevice", se);
    for (i = dev < 0 ? 0 : dev; i < TJ_MAXDEV && (dev < 0 || i == dev); i++) {
        tjc_state *s = be->per[i];
        cudaError_t e;
        if (!s) continue;
        if ((e = cudaStreamSynchronize(s->compute)) != cudaSuccess) tjc_pending(s->pending, sizeof s->pending, "a kernel (seen at cudaStreamSynchronize)", e);
        if ((e = cudaStreamSynchronize(s->copy)) != cudaSuccess) tjc_pending(s->pending, sizeof s->pending, "a copy (seen at cudaStreamSynchronize)", e);
        { /* the run's index checks, read once (and reset); an earlier error stays the one reported */
            char m[sizeof s->pending];
            if (tjc_check_read(s, m, sizeof m) && !s->pending[0]) snprintf(s->pending, sizeof s->pending, "%s", m);
        }
        if (s->pending[0]) {
            if (!bad && err && errlen) snprintf(err, errlen, "%s", s->pending);
            s->pending[0] = 0;
            bad = 1;
        }
    }
    if (be->pending[0]) {
        if (!bad && err && errlen) snprintf(err, errlen, "%s", be->pending);
        be->pending[0] = 0;
        bad = 1;
    }
    return bad;
}

/* The test hook TJ_CUDA_COPY_DELAY_US (read when the backend is made; 0 or
   unset: off): a kernel that spins that long on the copy stream before each
   copy_async, as devsim's TJ_DEVSIM_COPY_DELAY_US, so a wait the runner
   forgot reads or overwrites bytes too early on a GPU too, where the small
   copies of the tests would otherwise land before anyone looks (run on an
   H100 in build/test_cuda, 2026-11-24). */
__global__ void tjc_k_spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
static cudaError_t tjc_copy_delay(tjc_backend *be, cudaStream_t st) {
    if (!be->copy_delay_ns) return cudaSuccess;
    tjc_k_spin<<<1, 1, 0, st>>>(be->copy_delay_ns);
    return cudaGetLastError();
}
/* copy_async: on mesh device dev's copy stream after its compute work so
   far; the ticket (> 0) is the copy's count, its event ticket % TJC_NTICKET
   (the runner holds at most TJ__NPEND unwaited tickets); 0 if not queued */
static uint64_t tjc_copy_async(tj_backend *b, int dev, void *dst, int dst_space, const void *src, int src_space, size_t bytes) {
    tjc_backend *be = tjc_be_of(b);
    char why[256];
    tjc_state *s = tjc_state_of(be, dev, why, sizeof why);
    cudaError_t e;
    uint64_t t;
    if (!s) return 0;
    if (dst_space == TJ_SPACE_USER || src_space == TJ_SPACE_USER) return 0; /* pageable memory: copy with dev -1 */
    t = s->ntickets + 1;
    if ((e = cudaSetDevice(be->device)) != cudaSuccess || (e = cudaEventRecord(s->issued, s->compute)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(s->copy, s->issued, 0)) != cudaSuccess || (e = tjc_copy_delay(be, s->copy)) != cudaSuccess ||
        (e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->copy)) != cudaSuccess ||
        (e = cudaEventRecord(s->ticket[t % TJC_NTICKET], s->copy)) != cudaSuccess) {
        tjc_pending(s->pending, sizeof s->pending, "queueing a copy on the copy stream", e);
        return 0;
    }
    s->ntickets = t;
    return t;
}
/* wait: device dev's compute stream waits for the copy with this ticket
   (and so for every earlier one: the copy stream runs in order) */
static int tjc_wait(tj_backend *b, int dev, uint64_t ticket, char *err, size_t errlen) {
    tjc_backend *be = tjc_be_of(b);
    char why[256];
    tjc_state *s = tjc_state_of(be, dev, why, sizeof why);
    cudaError_t e;
    if (!s || !ticket || ticket > s->ntickets || s->ntickets - ticket >= TJC_NTICKET) {
        if (err && errlen) snprintf(err, errlen, "cuda backend: device %d: %s", dev, !s ? why : "no live copy with that ticket");
        return 1;
    }
    if ((e = cudaSetDevice(be->device)) != cudaSuccess || (e = cudaStreamWaitEvent(s->compute, s->ticket[ticket % TJC_NTICKET], 0)) != cudaSuccess) {
        if (err && errlen) snprintf(err, errlen, "cuda backend: cudaStreamWaitEvent: %s", cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

// ==== [11] CUDA backend: profiling (device time stamps) ====================
/* mark records a timing event on device dev's compute (0) or copy (1)
   stream; on the copy stream after the compute work issued so far, as a
   copy_async would start. Events are made on first use and kept for the
   next runs. mark_times (after sync) reads each mark's time from mark 0
   (cudaEventElapsedTime, about 0.5 us resolution) once per run. */
static int tjc_mark(tj_backend *b, int dev, int stream) {
    tjc_backend *be = tjc_be_of(b);
    char why[256];
    tjc_state *s = tjc_state_of(be, dev, why, sizeof why);
    cudaStream_t st;
    if (!s || cudaSetDevice(be->device) != cudaSuccess) return -1;
    if (s->nmark == s->capmark) {
        int nc = s->capmark ? 2 * s->capmark : 256, i;
        cudaEvent_t *ne = (cudaEvent_t *)TJ_REALLOC(s->mark, sizeof(cudaEvent_t) * (size_t)nc);
        if (!ne) return -1;
        s->mark = ne;
        for (i = s->capmark; i < nc; i++)
            if (cudaEventCreate(&s->mark[i]) != cudaSuccess) break;
        s->capmark = i;
        if (s->nmark == s->capmark) return -1;
    }
    st = stream ? s->copy : s->compute;
    if (stream && (cudaEventRecord(s->issued, s->compute) != cudaSuccess || cudaStreamWaitEvent(s->copy, s->issued, 0) != cudaSuccess)) return -1;
    if (cudaEventRecord(s->mark[s->nmark], st) != cudaSuccess) return -1;
    return s->nmark++;
}
static int tjc_mark_times(tj_backend *b, int dev, double *us, int n) {
    tjc_backend *be = tjc_be_of(b);
    tjc_state *s = dev >= 0 && dev < TJ_MAXDEV ? be->per[dev] : NULL;
    int i;
    if (!s) return 0;
    if (n > s->nmark) n = s->nmark;
    for (i = 0; us && i < n; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, s->mark[0], s->mark[i]) != cudaSuccess) break;
        us[i] = 1e3 * (double)ms;
    }
    s->nmark = 0;
    (void)cudaGetLastError(); /* a mark that never ran (a failed run) is not sticky */
    return us ? i : 0;
}

// ==== [11] CUDA backend: collectives =========================================
/* The six collectives (all_gather, psum, pmax, reduce_scatter, all_to_all,
   ppermute) mirror the CPU kernels of tinyjax.h [11] ("collective kernels:
   pack -> transport -> unpack"): a copy kernel packs the device's strided
   blocks into the scratch the plan reserved (tj__coll_scratch; nothing to
   pack when tj__outer finds them contiguous), the transport runs on device
   pointers with the device's compute stream (through tj__coll_call_on: the
   same error messages naming the collective and the line that caused it,
   the same statistics), and a copy kernel unpacks. Which transport:
   - the context's threads transport (one process: the default), or one
     given by tj_threads_transport_new: the device-buffer transport below,
     which meets in that transport's groups;
   - NCCL (tj_distributed_init with tj_nccl_transport_new): NCCL itself, on
     its communication stream ordered by events (glue at the end of the file);
   - the MPI transport: refused (it moves host memory between processes);
   - any other transport: called with device pointers and the stream, as the
     transport table of tinyjax.h says.

   The device-buffer transport: the simulated devices of one process on one
   GPU. The devices meet in the threads transport's group records (the same
   split, so the same group and rank rules), exchanging pointers; every copy
   and reduction then runs on the GPU, queued on the calling device's stream,
   in rank order with the CPU transports' arithmetic (all_reduce: a sum in
   double rounded once; reduce_scatter: rounded after each add; max exact),
   so results are bit-identical to the CPU backend. Ordering without waiting
   for the GPU: each device records an event "input ready" on its stream
   before the first meeting; after it, a device makes its stream wait for the
   events of the peers it reads, queues its copies or its reduction, and
   records "done"; after a second meeting it makes its stream wait for the
   "done" of every peer that reads its input, so its later kernels cannot
   overwrite (and nothing can free) that input before the peers have read it.
   Cost per collective and device: two meetings of the host threads (mutex
   and condition variable, as the threads transport; the host never waits
   for the GPU), two event records and up to 2 (G - 1) stream waits, then
   G - 1 device copies (all_gather, all_to_all), one copy (ppermute) or one
   reduction kernel reading the G inputs. Events are per device, not per
   group: a slow peer may wait for a later record of the same event, which
   only waits longer. A call with stream NULL (blocking, as the table allows)
   runs on the default stream and returns when it is done.
   Without a GPU: the devsim backend (TJ_BACKEND=devsim) runs the header's
   CPU collective kernels on its stream threads, through the threads
   transport, whose meeting and group records this transport reuses; the
   event ordering here needs events and cross-stream waits, which the
   backend interface (tj_backend) does not offer, so it runs only on a GPU
   (tests/test_cuda.cu). */

/* element i as the CPU's tj__ld reads it, and stored as tj__st stores it
   (f32 rounds, bf16 as tj_f32_to_bf16 with its quiet NaN, i32 as tj__f2i32) */
__device__ __forceinline__ double tjc_cpu_ld(const void *p, int dt, int64_t i) {
    switch (dt) {
    case TJ_F32: return ((const float *)p)[i];
    case TJ_BF16: return __uint_as_float((unsigned)((const uint16_t *)p)[i] << 16);
    case TJ_I32: return ((const int32_t *)p)[i];
    default: return ((const double *)p)[i];
    }
}
__device__ __forceinline__ void tjc_cpu_st(void *p, int dt, int64_t i, double v) {
    switch (dt) {
    case TJ_F32: ((float *)p)[i] = (float)v; break;
    case TJ_BF16: {
        unsigned u = __float_as_uint((float)v);
        if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) u = (u >> 16) | 0x40;
        else u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        ((uint16_t *)p)[i] = (uint16_t)u;
        break;
    }
    case TJ_I32: ((int32_t *)p)[i] = v != v ? 0 : v >= 2147483647.0 ? INT_MAX : v <= -2147483648.0 ? INT_MIN : (int32_t)v; break;
    default: ((double *)p)[i] = v; break;
    }
}
/* The loop of the reductions (here and NCCL's deterministic mode): out[i]
   = input 0 [op] input 1 [op] ... in rank order, src.at(r) being rank r's
   input; steps: round to dt after each (tj__reduce_steps), else once
   (tj__reduce_once). */
template <typename Src>
__device__ __forceinline__ void tjc_reduce_loop(const Src &src, int G, void *out, int dt, int64_t n, int ismax, int steps) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double acc = tjc_cpu_ld(src.at(0), dt, i);
        for (int r = 1; r < G; r++) {
            double b = tjc_cpu_ld(src.at(r), dt, i);
            acc = ismax ? (b > acc || b != b ? b : acc) : dt == TJ_I32 ? tjc_i32_op(TJ__OP_ADD, acc, b) : acc + b; /* (pmax: a NaN on any rank wins; an i32 psum wraps, as the CPU's) */
            if (steps && r + 1 < G) {
                double x[1];
                tjc_cpu_st(x, dt, 0, acc);
                acc = tjc_cpu_ld(x, dt, 0);
            }
        }
        tjc_cpu_st(out, dt, i, acc);
    }
}
/* the G inputs of a reduction, one pointer per rank */
struct tjc_srcs {
    const void *p[TJ_MAXDEV];
    __device__ const void *at(int r) const { return p[r]; }
};
TJC_PARAMS_FIT(tjc_srcs);
__global__ void tjc_k_coll_reduce(tjc_srcs src, int G, void *out, int dt, int64_t n, int ismax, int steps) { tjc_reduce_loop(src, G, out, dt, n, ismax, steps); }

/* ---- the device-buffer transport ---- */
typedef struct tjc_dtrans {
    tj_transport t;            /* its table; t.state = this                  */
    tj_transport *inner;       /* a threads transport: split, comm_free      */
    int device;                /* the CUDA device                            */
    pthread_mutex_t mu;        /* making events                              */
    cudaEvent_t ready[TJ_MAXDEV], done[TJ_MAXDEV]; /* per mesh device        */
} tjc_dtrans;

/* mesh device dev's two events, made on first use */
static cudaError_t tjc_dt_events(tjc_dtrans *d, int dev) {
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&d->mu);
    if (!d->ready[dev]) e = cudaEventCreateWithFlags(&d->ready[dev], cudaEventDisableTiming);
    if (e == cudaSuccess && !d->done[dev]) e = cudaEventCreateWithFlags(&d->done[dev], cudaEventDisableTiming);
    pthread_mutex_unlock(&d->mu);
    return e;
}
/* rank m's piece for rank me (tj__cg_src for the devices of one process) */
static const char *tjc_dt_src(const tj__cgroup *g, int kind, int m, int me, size_t S) {
    const char *s = (const char *)g->slot[m].send;
    return kind == TJ__RS || kind == TJ__A2A ? s + (size_t)me * S : s;
}
/* does rank me read rank m's input in this collective? */
static int tjc_dt_reads(const tj__cgroup *g, int kind, int me, int m) { return m != me && (kind != TJ__PERM || g->slot[me].from == m); }

static int tjc_dt_coll(tj_transport *t, void *comm, int kind, const void *send, void *recv, size_t S, size_t count, tj_dtype dt, int op, int to, int from,
                       void *stream, char *err, size_t en) {
    tjc_dtrans *d = (tjc_dtrans *)t->state;
    tj__chandle *h = (tj__chandle *)comm;
    tj__cgroup *g = h->g;
    cudaStream_t st = (cudaStream_t)stream;
    cudaError_t e = cudaSuccess;
    const char *what = "";
    int me = h->rank, G = g->G, dev = g->dev[me], m, readers[TJ_MAXDEV], nreaders = 0;
    if (tj__ct_failed(g->ct, err, en)) return 1;
    if (g->nrem) { /* a split by a transport with a wire: not this one's groups */
        snprintf(err, en, "the device-buffer transport serves the devices of one process; this group spans %d other process%s", g->nrem, g->nrem == 1 ? "" : "es");
        return 1;
    }
    if ((e = cudaSetDevice(d->device)) != cudaSuccess || (e = tjc_dt_events(d, dev)) != cudaSuccess ||
        (G > 1 && (e = cudaEventRecord(d->ready[dev], st)) != cudaSuccess)) {
        /* still meet: the peers must not wait for this device until the timeout */
        what = "recording the input's event";
    }
    g->slot[me].send = send;
    g->slot[me].recv = recv;
    g->slot[me].to = to;
    g->slot[me].from = from;
    if (tj__cg_barrier(g, err, en)) return 1;
    for (m = 0; m < G; m++) /* the slots hold still until the second meeting */
        if (tjc_dt_reads(g, kind, m, me)) readers[nreaders++] = g->dev[m];
    for (m = 0; m < G && e == cudaSuccess; m++)
        if (tjc_dt_reads(g, kind, me, m) && (e = cudaStreamWaitEvent(st, d->ready[g->dev[m]], 0)) != cudaSuccess) what = "waiting for a peer's input";
    if (e == cudaSuccess) {
        what = "the copies or the reduction";
        switch (kind) {
        case TJ__AG:
        case TJ__A2A:
            for (m = 0; m < G && e == cudaSuccess; m++) {
                const char *s = tjc_dt_src(g, kind, m, me, S);
                if ((char *)recv + (size_t)m * S != s && S) e = cudaMemcpyAsync((char *)recv + (size_t)m * S, s, S, cudaMemcpyDeviceToDevice, st);
            }
            break;
        case TJ__AR:
        case TJ__RS: {
            tjc_srcs src;
            memset(&src, 0, sizeof src);
            for (m = 0; m < G; m++) src.p[m] = tjc_dt_src(g, kind, m, me, S);
            if (count) {
                tjc_k_coll_reduce<<<tjc_blocks((int64_t)count, TJC_THREADS), TJC_THREADS, 0, st>>>(src, G, recv, (int)dt, (int64_t)count, op == TJ_REDUCE_MAX,
                                                                                                   kind == TJ__RS);
                e = cudaGetLastError();
            }
            break;
        }
        default: /* TJ__PERM */
            if (from >= 0 && S && (const char *)recv != g->slot[from].send) e = cudaMemcpyAsync(recv, g->slot[from].send, S, cudaMemcpyDeviceToDevice, st);
            break;
        }
        if (e == cudaSuccess && G > 1 && (e = cudaEventRecord(d->done[dev], st)) != cudaSuccess) what = "recording the result's event";
    }
    if (tj__cg_barrier(g, err, en)) return 1;
    /* this device's later work waits until the peers that read its input are done */
    for (m = 0; m < nreaders && e == cudaSuccess; m++)
        if ((e = cudaStreamWaitEvent(st, d->done[readers[m]], 0)) != cudaSuccess) what = "waiting for the peers' reads";
    if (e == cudaSuccess && !stream && (e = cudaStreamSynchronize(st)) != cudaSuccess) what = "the blocking call";
    if (e != cudaSuccess) {
        snprintf(err, en, "device-buffer transport, %s: %s", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}
static int tjc_dt_all_gather(tj_transport *t, void *comm, const void *send, void *recv, size_t bytes, void *stream, char *err, size_t en) {
    return tjc_dt_coll(t, comm, TJ__AG, send, recv, bytes, 0, TJ_F32, 0, -1, -1, stream, err, en);
}
static int tjc_dt_all_reduce(tj_transport *t, void *comm, const void *send, void *recv, size_t count, tj_dtype dt, tj_reduce_op op, void *stream, char *err,
                             size_t en) {
    return tjc_dt_coll(t, comm, TJ__AR, send, recv, count * tj_dtype_size(dt), count, dt, (int)op, -1, -1, stream, err, en);
}
static int tjc_dt_reduce_scatter(tj_transport *t, void *comm, const void *send, void *recv, size_t count, tj_dtype dt, tj_reduce_op op, void *stream,
                                 char *err, size_t en) {
    return tjc_dt_coll(t, comm, TJ__RS, send, recv, count * tj_dtype_size(dt), count, dt, (int)op, -1, -1, stream, err, en);
}
static int tjc_dt_all_to_all(tj_transport *t, void *comm, const void *send, void *recv, size_t bytes, void *stream, char *err, size_t en) {
    return tjc_dt_coll(t, comm, TJ__A2A, send, recv, bytes, 0, TJ_F32, 0, -1, -1, stream, err, en);
}
static int tjc_dt_send_recv(tj_transport *t, void *comm, const void *send, int to, void *recv, int from, size_t bytes, void *stream, char *err, size_t en) {
    return tjc_dt_coll(t, comm, TJ__PERM, send, recv, bytes, 0, TJ_F32, 0, to, from, stream, err, en);
}
/* groups and host agreement: the inner threads transport's */
static int tjc_dt_split(tj_transport *t, int n, const int *dev, const int *color, const int *key, void **comm, char *err, size_t en) {
    tj_transport *in = ((tjc_dtrans *)t->state)->inner;
    return in->split(in, n, dev, color, key, comm, err, en);
}
static void tjc_dt_comm_free(tj_transport *t, void *comm) {
    tj_transport *in = ((tjc_dtrans *)t->state)->inner;
    in->comm_free(in, comm);
}
static int tjc_dt_proc_allgather(tj_transport *t, const void *send, void *recv, size_t bytes, char *err, size_t en) {
    tj_transport *in = ((tjc_dtrans *)t->state)->inner;
    return in->proc_allgather(in, send, recv, bytes, err, en);
}
static void tjc_dt_free(tj_transport *t) {
    tjc_dtrans *d;
    int i;
    if (!t) return;
    d = (tjc_dtrans *)t->state;
    cudaSetDevice(d->device);
    for (i = 0; i < TJ_MAXDEV; i++) {
        if (d->ready[i]) cudaEventDestroy(d->ready[i]);
        if (d->done[i]) cudaEventDestroy(d->done[i]);
    }
    d->inner->free(d->inner);
    pthread_mutex_destroy(&d->mu);
    TJ_FREE(d);
}
/* the transport of a backend on CUDA device `device`; NULL when out of memory */
static tj_transport *tjc_dt_new(int device) {
    tjc_dtrans *d = (tjc_dtrans *)tj__calloc(sizeof *d);
    if (!d) return NULL;
    if (!(d->inner = tj_threads_transport_new(0))) {
        TJ_FREE(d);
        return NULL;
    }
    d->device = device;
    pthread_mutex_init(&d->mu, NULL);
    d->t.name = "cuda-local";
    d->t.state = d;
    d->t.nprocs = 1;
    d->t.rank = 0;
    d->t.timeout_s = d->inner->timeout_s;
    d->t.split = tjc_dt_split;
    d->t.comm_free = tjc_dt_comm_free;
    d->t.all_gather = tjc_dt_all_gather;
    d->t.all_reduce = tjc_dt_all_reduce;
    d->t.reduce_scatter = tjc_dt_reduce_scatter;
    d->t.all_to_all = tjc_dt_all_to_all;
    d->t.send_recv = tjc_dt_send_recv;
    d->t.proc_allgather = tjc_dt_proc_allgather;
    d->t.free = tjc_dt_free;
    return &d->t;
}

/* ---- the launchers ---- */
#if defined(TJ_NCCL)
static int tjc_nccl_glue(tj_transport *t, void *comm, int device, char *why, size_t n); /* the NCCL section */
#endif
/* call the transport for node k->n on device k->dev's stream: the
   transport the context's transport stands for on this backend (see the
   introduction); 1 with k->err on failure */
static int tjc_coll_call(tjc_state *s, tj__kern *k, int kind, const void *send, void *recv, size_t bytes, size_t count, int to, int from) {
    tjc_backend *be = tjc_be_of(k->ctx->backend);
    struct tj__procs *P = k->ctx->procs;
    tj_transport *t = P ? P->t : NULL, *over = NULL;
    if (t && t->split == tj__ct_split) { /* a CPU transport */
        if (((tj__ct *)t->state)->wire)
            return tjc_fail(k, "the transport '%s' moves host memory between processes; collectives of the CUDA backend between processes go through NCCL "
                            "(tj_nccl_transport_new)", t->name);
        pthread_mutex_lock(&be->mu);
        if (!be->coll) be->coll = tjc_dt_new(be->device);
        over = be->coll;
        pthread_mutex_unlock(&be->mu);
        if (!over) return tjc_fail(k, "out of memory making the device-buffer transport");
    }
#if defined(TJ_NCCL)
    else if (t) {
        char why[400];
        void *comm = tj__group_find(k->ctx, k->n->a.mesh, k->dev);
        if (comm && tjc_nccl_glue(t, comm, s->device, why, sizeof why)) return tjc_fail(k, "%s", why);
    }
#endif
    return tj__coll_call_on(k, over, (void *)s->compute, kind, send, recv, bytes, count, to, from);
}
/* tj__k_all_gather: rank r's block lands at r along the axis */
static int tjc_all_gather(tjc_state *s, tj__kern *k) {
    unsigned m = k->n->a.mesh;
    int G = tj__mesh_count(k->ctx, m), r, ax = tj__axis_index(&k->ot, k->n->a.axis), direct;
    size_t S = (size_t)tj__bytes(k->it[0]);
    int64_t st[TJ_MAXDIM] = {0};
    char *recv;
    if (ax < 0) return tjc_fail(k, "axis not found");
    direct = tj__outer(&k->ot, ax);
    recv = direct ? (char *)k->out : (char *)k->scratch;
    if (tjc_coll_call(s, k, TJ__AG, k->in[0], recv, S, 0, -1, -1)) return 1;
    if (direct) return 0;
    tj__strides(&k->ot, st);
    for (r = 0; r < G; r++)
        if (tjc_copy_region(s, k, recv + (size_t)r * S, k->it[0], 0, k->out, &k->ot, r * k->it[0]->dim[ax] * st[ax], k->it[0]->dim)) return 1;
    return 0;
}
/* tj__k_psum (psum and pmax) */
static int tjc_psum(tjc_state *s, tj__kern *k) {
    size_t n = (size_t)tj__numel(&k->ot);
    return tjc_coll_call(s, k, TJ__AR, k->in[0], k->out, n * tj_dtype_size(k->ot.dt), n, -1, -1);
}
/* tj__k_reduce_scatter: block r (rank r's part of the axis) packed at r * n */
static int tjc_reduce_scatter(tjc_state *s, tj__kern *k) {
    unsigned m = k->n->a.mesh;
    int G = tj__mesh_count(k->ctx, m), r, ax = tj__axis_index(&k->ot, k->n->a.axis), direct;
    int64_t ist[TJ_MAXDIM] = {0}, n = tj__numel(&k->ot);
    if (ax < 0) return tjc_fail(k, "axis not found");
    direct = tj__outer(k->it[0], ax);
    tj__strides(k->it[0], ist);
    if (!direct)
        for (r = 0; r < G; r++)
            if (tjc_copy_region(s, k, k->in[0], k->it[0], r * k->ot.dim[ax] * ist[ax], k->scratch, &k->ot, r * n, k->ot.dim)) return 1;
    return tjc_coll_call(s, k, TJ__RS, direct ? k->in[0] : k->scratch, k->out, (size_t)tj__bytes(&k->ot), (size_t)n, -1, -1);
}
/* tj__k_all_to_all: block r of `axis` to rank r, rank r's block into `axis2` */
static int tjc_all_to_all(tjc_state *s, tj__kern *k) {
    unsigned m = k->n->a.mesh;
    int G = tj__mesh_count(k->ctx, m), r;
    int to = tj__axis_index(&k->ot, k->n->a.axis), from = tj__axis_index(&k->ot, k->n->a.axis2), sdirect, rdirect;
    int64_t ist[TJ_MAXDIM] = {0}, ost[TJ_MAXDIM] = {0}, nb;
    tj__type bt = k->ot; /* one peer's block */
    const char *send;
    char *recv;
    if (to < 0 || from < 0) return tjc_fail(k, "axis not found");
    sdirect = tj__outer(k->it[0], to);
    rdirect = tj__outer(&k->ot, from);
    send = sdirect ? (const char *)k->in[0] : (const char *)k->scratch;
    recv = rdirect ? (char *)k->out : (char *)k->scratch + (sdirect ? 0 : tj__align(tj__bytes(k->it[0])));
    tj__strides(k->it[0], ist);
    tj__strides(&k->ot, ost);
    bt.dim[from] = k->it[0]->dim[from];
    nb = tj__numel(&bt);
    if (!sdirect)
        for (r = 0; r < G; r++)
            if (tjc_copy_region(s, k, k->in[0], k->it[0], r * k->ot.dim[to] * ist[to], (void *)send, &bt, r * nb, bt.dim)) return 1;
    if (tjc_coll_call(s, k, TJ__A2A, send, recv, (size_t)tj__bytes(&bt), 0, -1, -1)) return 1;
    if (rdirect) return 0;
    for (r = 0; r < G; r++)
        if (tjc_copy_region(s, k, recv, &bt, r * nb, k->out, &k->ot, r * k->it[0]->dim[from] * ost[from], bt.dim)) return 1;
    return 0;
}
/* tj__k_ppermute: a rank nobody sends to gets zeros */
static int tjc_ppermute(tjc_state *s, tj__kern *k) {
    unsigned m = k->n->a.mesh;
    int G = tj__mesh_count(k->ctx, m), r, me = tj__mesh_rank(k->ctx, k->dev, m), src = -1;
    for (r = 0; r < G; r++)
        if (k->n->a.perm[r] == me) src = r;
    if (tjc_coll_call(s, k, TJ__PERM, k->in[0], k->out, (size_t)tj__bytes(&k->ot), 0, k->n->a.perm[me], src)) return 1;
    if (src < 0) TJC_CUDA(k, cudaMemsetAsync(k->out, 0, (size_t)tj__bytes(&k->ot), s->compute));
    return 0;
}

// ==== [11] CUDA backend: dispatch and constructor ==========================

/* ---- the per-op table ----
   Every op of the op table (TJ__UNARY_OPS, TJ__BINARY_OPS, TJ__OTHER_OPS in
   tinyjax.h [3]) gets one entry here, explicitly: its launcher, or what else
   runs it (the runner, or nothing: views), or why it has no CUDA path yet.
   There is no default: an op added to the header and not here has no entry
   (tjc_path returns 0), which tj_cuda_op_coverage lists and
   `test_cuda --coverage` (no GPU needed, run by build.sh) fails on. */
typedef int (*tjc_launch_fn)(tjc_state *s, tj__kern *k);
enum { TJC_NONE = 0, TJC_KERNEL, TJC_RUNNER, TJC_VIEW, TJC_GAP, TJC_CPU_ONLY };

/* tj__k_axis_index: this device's rank along the mesh axes */
static int tjc_axis_index(tjc_state *s, tj__kern *k) {
    tjc_k_fill<<<1, 1, 0, s->compute>>>(k->out, TJ_I32, 1, (double)tj__mesh_rank(k->ctx, k->dev, (unsigned)k->n->a.mesh));
    TJC_LAUNCHED(k, "tjc_k_fill");
    return 0;
}
/* tj__k_shard_slice: this device's block of a replicated value along one axis */
static int tjc_shard_slice(tjc_state *s, tj__kern *k) {
    int64_t ist[TJ_MAXDIM];
    int ax = tj__axis_index(&k->ot, k->n->a.axis), me = tj__mesh_rank(k->ctx, k->dev, (unsigned)k->n->a.mesh);
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__strides(k->it[0], ist);
    return tjc_copy_region(s, k, k->in[0], k->it[0], me * k->ot.dim[ax] * ist[ax], k->out, &k->ot, 0, k->ot.dim);
}
/* tj__k_custom: the op's own CUDA launcher (tj_op_def.cuda) */
static int tjc_custom(tjc_state *s, tj__kern *k) {
    if (k->custom_gpu(k, (void *)s->compute)) return 1;
    TJC_LAUNCHED(k, "the custom op's CUDA launcher (tj_op_def.cuda)");
    return 0;
}
/* tj__k_custom_vjp: hands its inputs y on as outputs */
static int tjc_custom_vjp(tjc_state *s, tj__kern *k) {
    const struct tj__cvjp *cv = &k->ctx->cvjps[k->n->a.reg];
    for (int j = 0; j < cv->nout; j++)
        TJC_CUDA(k, cudaMemcpyAsync(k->pout[j], k->in[cv->nin + j], (size_t)tj__bytes(&k->n->proj[j]->lt), cudaMemcpyDeviceToDevice, s->compute));
    return 0;
}
/* the kind of CUDA path op has; *fn its launcher (TJC_KERNEL), *why the
   reason (TJC_GAP, TJC_CPU_ONLY) */
static int tjc_path(int op, tjc_launch_fn *fn, const char **why) {
    *fn = NULL;
    *why = NULL;
#define TJC_K(f) return *fn = (f), TJC_KERNEL
    switch (op) {
    /* unary and binary ops: the formula tables, expanded into tjc_unary / tjc_binary */
#define TJC_EW_CASE(op_, ...) case TJ__OP_##op_:
    TJ__UNARY_OPS(TJC_EW_CASE) TJ__BINARY_OPS(TJC_EW_CASE)
#undef TJC_EW_CASE
    case TJ__OP_SELECT: TJC_K(tjc_elementwise);
    case TJ__OP_FILL: TJC_K(tjc_fill);
    case TJ__OP_ARANGE: TJC_K(tjc_arange);
    case TJ__OP_UNIFORM: case TJ__OP_NORMAL: TJC_K(tjc_random);
#define TJC_RED_CASE(op_, ...) case TJ__OP_##op_:
    TJ__REDUCE_OPS(TJC_RED_CASE)
#undef TJC_RED_CASE
        TJC_K(tjc_reduce);
    case TJ__OP_DOT: TJC_K(tjc_dot);
    case TJ__OP_RELAYOUT: case TJ__OP_COPY: TJC_K(tjc_copy_op);
    case TJ__OP_SLICE: TJC_K(tjc_slice);
    case TJ__OP_CONCAT: TJC_K(tjc_concat);
    case TJ__OP_PAD: TJC_K(tjc_pad);
    case TJ__OP_TAKE: case TJ__OP_SCATTER_ADD: TJC_K(tjc_take);
    case TJ__OP_ONE_HOT: TJC_K(tjc_one_hot);
    case TJ__OP_ARGMAX: case TJ__OP_ARGMIN: case TJ__OP_ARGMAX_PART: case TJ__OP_ARGMIN_PART: TJC_K(tjc_argm);
    case TJ__OP_CAUSAL: TJC_K(tjc_causal);
    case TJ__OP_SOFTMAX: case TJ__OP_LOG_SOFTMAX: case TJ__OP_LAYER_NORM: TJC_K(tjc_rowop);
    case TJ__OP_CROSS_ENTROPY: TJC_K(tjc_cross_entropy);
    case TJ__OP_SOFTMAX_GRAD: case TJ__OP_LAYER_NORM_GRAD: case TJ__OP_CROSS_ENTROPY_GRAD: TJC_K(tjc_row_grad);
    case TJ__OP_XENT_PART: case TJ__OP_XENT_PART_GRAD: TJC_K(tjc_xent_part);
    case TJ__OP_ATTENTION: TJC_K(tjc_attention);
    case TJ__OP_ATTENTION_GRAD: TJC_K(tjc_attention_grad);
    case TJ__OP_SHARD_SLICE: TJC_K(tjc_shard_slice);
    case TJ__OP_AXIS_INDEX: TJC_K(tjc_axis_index);
    case TJ__OP_CUSTOM: TJC_K(tjc_custom);
    case TJ__OP_CUSTOM_VJP: TJC_K(tjc_custom_vjp);
    /* the runner runs these with backend copies and backend runs of the nodes inside (tj__k_scan, tj__k_memcpy) */
    case TJ__OP_SCAN: case TJ__OP_TO_HOST: case TJ__OP_TO_DEVICE: return TJC_RUNNER;
    /* arguments, projections and views own no work (the runner skips them) */
    case TJ__OP_PARAM: case TJ__OP_PROJ: case TJ__OP_RESHAPE: case TJ__OP_STOP_GRADIENT: case TJ__OP_NAME: case TJ__OP_PVARY: return TJC_VIEW;
    /* collectives: pack, the transport on device pointers and the stream, unpack ([11] collectives) */
    case TJ__OP_ALL_GATHER: TJC_K(tjc_all_gather);
    case TJ__OP_PSUM: case TJ__OP_PMAX: TJC_K(tjc_psum);
    case TJ__OP_REDUCE_SCATTER: TJC_K(tjc_reduce_scatter);
    case TJ__OP_ALL_TO_ALL: TJC_K(tjc_all_to_all);
    case TJ__OP_PPERMUTE: TJC_K(tjc_ppermute);
    /* a dot and its collective in one node: tj_jit makes them only for the CPU backend (tj__coll_matmul_on) */
    case TJ__OP_AG_DOT: case TJ__OP_DOT_RS:
        *why = "never made for a backend (the collective matmul of simulated devices on the CPU; a backend gets the dot and the collective)";
        return TJC_CPU_ONLY;
    }
#undef TJC_K
    return TJC_NONE;
}

/* The coverage check (no GPU needed): for every op id, one line "name: how"
   into buf (kernel, runner, view, or the gap's reason); returns the number
   of ops with no entry in tjc_path at all (each listed as "name: NO CUDA
   PATH"); *gaps gets the number of known gaps. */
extern "C" int tj_cuda_op_coverage(char *buf, size_t n, int *gaps) {
    int op, missing = 0, g = 0;
    size_t at = 0;
    if (buf && n) buf[0] = 0;
    for (op = 0; op < TJ__NOPS; op++) {
        tjc_launch_fn fn;
        const char *why, *how;
        int kind = tjc_path(op, &fn, &why);
        how = kind == TJC_KERNEL ? "kernel" : kind == TJC_RUNNER ? "runner" : kind == TJC_VIEW ? "view (no work)" : kind == TJC_GAP || kind == TJC_CPU_ONLY ? why : "NO CUDA PATH";
        missing += kind == TJC_NONE || (kind == TJC_KERNEL && !fn);
        g += kind == TJC_GAP;
        if (buf && at < n) {
            int w = snprintf(buf + at, n - at, "%s: %s\n", tj__opname(op), how);
            if (w > 0) at += (size_t)w < n - at ? (size_t)w : n - at;
        }
    }
    if (gaps) *gaps = g;
    return missing;
}

/* run one node on mesh device k->dev's stream */
static int tjc_run(tj_backend *b, tj__kern *k) {
    tjc_backend *be = tjc_be_of(b);
    tjc_state *s;
    cudaError_t e;
    tjc_launch_fn fn;
    const char *why;
    char msg[256];
    int kind;
    if (!(s = tjc_state_of(be, k->dev, msg, sizeof msg))) return tjc_fail(k, "device %d: %s", k->dev, msg);
    if (s->pending[0] && !TJ__IS_COLL(k->n->op)) { /* an error the interface could not return earlier (collectives still run: peers wait for them) */
        if (k->err && !k->err[0]) snprintf(k->err, TJ__MSG, "%.511s (reported at op '%s', %s:%d)", s->pending, tj__opname(k->n->op), tj__base(k->n->file), k->n->line);
        s->pending[0] = 0;
        return 1;
    }
    if ((e = cudaSetDevice(s->device)) != cudaSuccess) return tjc_fail(k, "cudaSetDevice(%d) failed: %s", s->device, cudaGetErrorString(e));
    if (k->n->members) return tjc_fused(s, k); /* one kernel per fused group */
    kind = tjc_path(k->n->op, &fn, &why);
    if (kind == TJC_KERNEL && fn) return fn(s, k);
    if (kind == TJC_VIEW) return 0;
    if (kind == TJC_RUNNER) return tjc_fail(k, "the runner runs this op itself (tj__k_scan / tj__k_memcpy); it should not reach the backend");
    if (kind == TJC_GAP || kind == TJC_CPU_ONLY) return tjc_fail(k, "%s", why);
    return tjc_unsupported(k);
}

static void tjc_state_free(tjc_state *s) {
    if (!s) return;
    int i;
    if (s->compute) cudaStreamSynchronize(s->compute);
    if (s->copy) cudaStreamSynchronize(s->copy);
    if (s->blas) cublasDestroy(s->blas);
    if (s->d_chk) cudaFree(s->d_chk);
    if (s->h_chk) cudaFreeHost(s->h_chk);
    for (i = 0; i < TJC_NTICKET; i++)
        if (s->ticket[i]) cudaEventDestroy(s->ticket[i]);
    if (s->issued) cudaEventDestroy(s->issued);
    for (i = 0; i < s->capmark; i++) cudaEventDestroy(s->mark[i]);
    TJ_FREE(s->mark);
    if (s->copy) cudaStreamDestroy(s->copy);
    if (s->d_csr) cudaFreeAsync(s->d_csr, s->compute); /* stream-ordered, as it was allocated */
    tjc_ftab_free(s->fused);
    if (s->compute) cudaStreamDestroy(s->compute);
    TJ_FREE(s);
}
/* mesh device dev's state, made on first use; NULL with a reason in err */
static tjc_state *tjc_state_of(tjc_backend *be, int dev, char *err, size_t errlen) {
    tjc_state *s;
    cudaError_t e;
    cublasStatus_t bs;
    int i;
    if (dev < 0 || dev >= TJ_MAXDEV) {
        snprintf(err, errlen, "device %d out of range", dev);
        return NULL;
    }
    pthread_mutex_lock(&be->mu);
    if ((s = be->per[dev]) != NULL) {
        pthread_mutex_unlock(&be->mu);
        return s;
    }
    if (!(s = (tjc_state *)tj__calloc(sizeof *s))) {
        pthread_mutex_unlock(&be->mu);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->device = be->device;
    s->dev = dev;
#define TJC_INIT(call)                                                                              \
    if ((e = (call)) != cudaSuccess) {                                                            \
        snprintf(err, errlen, "%s: %s", #call, cudaGetErrorString(e));                            \
        tjc_state_free(s);                                                                        \
        pthread_mutex_unlock(&be->mu);                                                            \
        return NULL;                                                                              \
    }
    TJC_INIT(cudaSetDevice(be->device));
    TJC_INIT(cudaDeviceGetAttribute(&s->sms, cudaDevAttrMultiProcessorCount, be->device));
    TJC_INIT(cudaStreamCreateWithFlags(&s->compute, cudaStreamNonBlocking));
    TJC_INIT(cudaStreamCreateWithFlags(&s->copy, cudaStreamNonBlocking));
    TJC_INIT(cudaEventCreateWithFlags(&s->issued, cudaEventDisableTiming));
    for (i = 0; i < TJC_NTICKET; i++) TJC_INIT(cudaEventCreateWithFlags(&s->ticket[i], cudaEventDisableTiming));
    TJC_INIT(cudaMalloc((void **)&s->d_chk, sizeof(unsigned long long) * 2 * TJC_NCHECK));
    TJC_INIT(cudaHostAlloc((void **)&s->h_chk, sizeof(unsigned long long) * 2 * TJC_NCHECK, cudaHostAllocDefault));
    TJC_INIT(cudaMemsetAsync(s->d_chk, 0xff, sizeof(unsigned long long) * 2 * TJC_NCHECK, s->compute)); /* ordered before every kernel */
    s->d_errpos = s->d_chk;
#undef TJC_INIT
    if ((bs = cublasCreate(&s->blas)) != CUBLAS_STATUS_SUCCESS || (bs = cublasSetStream(s->blas, s->compute)) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cuBLAS initialisation: %s", cublasGetStatusString(bs));
        tjc_state_free(s);
        pthread_mutex_unlock(&be->mu);
        return NULL;
    }
    be->per[dev] = s;
    pthread_mutex_unlock(&be->mu);
    return s;
}

extern "C" void tj_cuda_backend_free(tj_backend *b) {
    tjc_backend *be;
    int i;
    if (!b) return;
    be = tjc_be_of(b);
    cudaSetDevice(be->device);
    for (i = 0; i < TJ_MAXDEV; i++) tjc_state_free(be->per[i]);
    if (be->coll) be->coll->free(be->coll);
    if (be->copy) cudaStreamDestroy(be->copy);
    pthread_mutex_destroy(&be->mu);
    TJ_FREE(be);
}

extern "C" tj_backend *tj_cuda_backend(int device, char *err, size_t errlen) {
    char dummy[1];
    int n = 0;
    cudaError_t e;
    tjc_backend *be;
    if (!err || !errlen) { err = dummy; errlen = sizeof dummy; }
    err[0] = 0;
    if ((e = cudaGetDeviceCount(&n)) != cudaSuccess) {
        snprintf(err, errlen, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return NULL;
    }
    if (n < 1) {
        snprintf(err, errlen, "no CUDA device found");
        return NULL;
    }
    if (device < 0 || device >= n) {
        snprintf(err, errlen, "CUDA device %d does not exist (%d device%s)", device, n, n == 1 ? "" : "s");
        return NULL;
    }
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        snprintf(err, errlen, "cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
        return NULL;
    }
    { /* the stream-ordered scratch (two-stage reductions, scatter_add's
         index lists) comes from the device's default pool; by default the
         pool hands its memory back to the driver at every synchronisation,
         so each run would allocate it anew. Keep it (a few MB for GPT-2);
         a driver without pools just keeps its default. Not yet run on a GPU. */
        cudaMemPool_t pool;
        uint64_t keep = UINT64_MAX;
        if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        (void)cudaGetLastError();
    }
    be = (tjc_backend *)tj__calloc(sizeof *be);
    if (!be) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    be->b.state = be;
    be->device = device;
    { /* the test hook of copy_async (tjc_copy_delay), at most a second */
        const char *d = getenv("TJ_CUDA_COPY_DELAY_US");
        double us = d && *d ? strtod(d, NULL) : 0;
        be->copy_delay_ns = us > 0 ? (unsigned long long)(1e3 * (us < 1e6 ? us : 1e6)) : 0;
    }
    pthread_mutex_init(&be->mu, NULL);
    if ((e = cudaStreamCreateWithFlags(&be->copy, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(err, errlen, "cudaStreamCreateWithFlags: %s", cudaGetErrorString(e));
        tj_cuda_backend_free(&be->b);
        return NULL;
    }
    if (!tjc_state_of(be, 0, err, errlen)) { /* device 0 now: a broken setup fails here, not in a run */
        tj_cuda_backend_free(&be->b);
        return NULL;
    }
    be->b.name = "cuda";
    be->b.alloc = tjc_alloc;
    be->b.free = tjc_free;
    be->b.copy = tjc_copy;
    be->b.run = tjc_run;
    be->b.sync = tjc_sync;
    be->b.fused_groups = 2; /* tjc_fused, broadcast leaves too */
    be->b.copy_async = tjc_copy_async;
    be->b.wait = tjc_wait;
    be->b.mark = tjc_mark;
    be->b.mark_times = tjc_mark_times;
    return &be->b;
}

/* ==== NCCL: the transport between GPUs, and its bootstrap ================== */
/* One process per GPU (or one process driving several), collectives through
   NCCL, behind the transport table of tinyjax.h ([11], "transports and
   processes"). Link with -lnccl (and -lcublas as before).

     char err[512];
     tj_transport *t = tj_nccl_transport_new(0, 0, -1, err, sizeof err);
     tj_backend *gpu = t ? tj_cuda_backend(tj_nccl_transport_gpu(t, 0), err, sizeof err) : NULL;
     tj_distributed_opts o = {0, 0, 0, t};    // processes and rank from t
     tj_set_backend(ctx, gpu);                // the GPU the transport picked
     if (!t || !gpu || tj_distributed_init(ctx, &o)) ... // err says why

   Bootstrap (this part needs no GPU and no CUDA call; tests/test_nccl_boot.cu
   runs it with forked processes):
   - processes and rank: OMPI_COMM_WORLD_SIZE/RANK, PMI_SIZE/RANK or
     TJ_NPROCS/TJ_RANK, as tj_distributed_init reads them;
   - local rank -> GPU: TJ_LOCAL_RANK, else (TJ_MPI builds, MPI initialized)
     an MPI_COMM_TYPE_SHARED split, else the launcher's variable
     (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID, LOCAL_RANK),
     else rank mod (GPUs of the node / g) (right when each node runs a
     contiguous block of ranks); a process with local rank l and g GPUs uses
     GPUs l*g .. l*g+g-1;
   - the NCCL unique id (128 opaque bytes) goes from process 0 to the others
     by MPI_Bcast in TJ_MPI builds when TJ_COORD is unset, else through
     TJ_COORD: "host:port" (process 0 listens on port, the others connect to
     host with retries until the timeout) or a path containing '/' on a file
     system every process sees (process 0 writes it atomically, the others
     poll for it, acknowledge, and process 0 removes it; a file written more
     than a timeout before a process began waiting is left from an earlier
     run and ignored). Every wait has the timeout (TJ_TIMEOUT, default 300 s)
     and a failure names TJ_COORD, the process and what did not arrive.
     Under mpirun the processes first agree that each found its GPU, so
     one that cannot start fails them all with its message at once (with
     TJ_COORD the others wait for it until the timeout).
   The transport: see "NCCL: the transport" below.
   The section is compiled with -DTJ_NCCL only (like -DTJ_MPI for MPI), so
   builds without NCCL need neither nccl.h nor -lnccl:

     nvcc -std=c++17 -O2 -DTJ_NCCL -I. -c tinyjax_cuda.cu -o tinyjax_cuda.o
     nvcc -std=c++17 -O2 -I. my_program.cu tinyjax_cuda.o -lcublas -lnccl -o my_program */
#if defined(TJ_NCCL)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

extern "C" int tj_nccl_local_rank(int *local_rank, char *err, size_t errlen);
extern "C" int tj_nccl_device_for(int local_rank, int per_process, int ndevices, char *err, size_t errlen);
extern "C" int tj_nccl_share_id(const char *coord, int rank, int nprocs, void *blob, size_t bytes, double timeout_s, char *err, size_t errlen);

#define TJN_MAGIC 0x544a4e43u /* "TJNC": every message and file of the bootstrap */

static double tjn_now(void) { return tj__now_us() * 1e-6; }
static void tjn_nap(double *nap_s) { /* sleep, backing off by 1.5x up to 10 ms */
    tj__nap((int)(*nap_s * 1e6));
    if (*nap_s < 0.01) *nap_s *= 1.5;
}
/* a non-negative decimal integer, the whole string */
static int tjn_parse_int(const char *s, long lo, long hi, long *out) {
    char *end = NULL;
    long v;
    if (!s || !*s) return 1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || !end || *end || v < lo || v > hi) return 1;
    *out = v;
    return 0;
}

extern "C" int tj_nccl_local_rank(int *local_rank, char *err, size_t en) {
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
    const char *e = getenv("TJ_LOCAL_RANK");
    long v = 0;
    size_t i;
    *local_rank = -1; /* no source */
    if (e) {
        if (tjn_parse_int(e, 0, TJ_MAXDEV * 64, &v)) {
            snprintf(err, en, "nccl bootstrap: TJ_LOCAL_RANK='%s' is not a local rank (a number >= 0)", e);
            return 1;
        }
        *local_rank = (int)v;
        return 0;
    }
#if defined(TJ_MPI)
    {
        int inited = 0, fin = 0, r = 0;
        MPI_Initialized(&inited);
        MPI_Finalized(&fin);
        if (inited && !fin) {
            MPI_Comm node;
            if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
                MPI_Comm_rank(node, &r);
                MPI_Comm_free(&node);
                *local_rank = r;
                return 0;
            }
        }
    }
#endif
    for (i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if ((e = getenv(vars[i])) != NULL) {
            if (tjn_parse_int(e, 0, TJ_MAXDEV * 64, &v)) {
                snprintf(err, en, "nccl bootstrap: %s='%s' is not a local rank (set TJ_LOCAL_RANK)", vars[i], e);
                return 1;
            }
            *local_rank = (int)v;
            return 0;
        }
    return 0; /* -1: the caller decides (tj_nccl_transport_new: rank mod GPUs of the node) */
}
extern "C" int tj_nccl_device_for(int local_rank, int per, int ndev, char *err, size_t en) {
    if (per < 1 || local_rank < 0) {
        snprintf(err, en, "nccl bootstrap: local rank %d with %d GPU%s per process", local_rank, per, per == 1 ? "" : "s");
        return -1;
    }
    if ((long)local_rank * per + per > ndev) {
        snprintf(err, en,
                 "nccl bootstrap: local rank %d with %d GPU%s per process needs GPU%s %d..%d, but this node has %d (more processes on this node "
                 "than GPUs / GPUs per process; check the launcher's processes per node, or TJ_LOCAL_RANK)",
                 local_rank, per, per == 1 ? "" : "s", per == 1 ? "" : "s", local_rank * per, local_rank * per + per - 1, ndev);
        return -1;
    }
    return local_rank * per;
}

/* ---- the id over TCP: TJ_COORD=host:port ---- */
typedef struct {
    uint32_t magic, rank, nprocs, bytes; /* hello; the reply: rank = status */
} tjn_hdr;
enum { TJN_OK = 0, TJN_BAD_NPROCS = 1, TJN_BAD_RANK = 2, TJN_BAD_BYTES = 3 };

/* whole buffers with a deadline; 0, or nonzero with *why */
static int tjn_io(int fd, void *buf, size_t n, int wr, double deadline, const char **why) {
    char *p = (char *)buf;
    while (n) {
        struct pollfd pf;
        double left = deadline - tjn_now();
        ssize_t k;
        if (left <= 0) {
            *why = "timed out";
            return 1;
        }
        pf.fd = fd;
        pf.events = wr ? POLLOUT : POLLIN;
        pf.revents = 0;
        if (poll(&pf, 1, (int)(left * 1000) + 1) <= 0) continue;
        k = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k == 0) {
            *why = "the other side closed the connection";
            return 1;
        }
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            *why = strerror(errno);
            return 1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}
static int tjn_tcp_root(const char *coord, int port, int nprocs, const void *blob, size_t bytes, double timeout_s, char *err, size_t en) {
    struct sockaddr_in a;
    int fd, one = 1, got = 0, r, rc = 0;
    unsigned char seen[TJ_MAXDEV * 64 + 1];
    double deadline = tjn_now() + timeout_s;
    if (nprocs > (int)sizeof seen - 1) {
        snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): %d processes is too many", coord, nprocs);
        return 1;
    }
    memset(seen, 0, sizeof seen);
    if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0) {
        snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process 0: socket: %s", coord, strerror(errno));
        return 1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, nprocs)) {
        snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process 0 cannot listen on port %d: %s (choose a free port)", coord, port, strerror(errno));
        close(fd);
        return 1;
    }
    while (got < nprocs - 1 && !rc) {
        struct pollfd pf;
        double left = deadline - tjn_now();
        int c;
        tjn_hdr h, rep;
        const char *why = "";
        if (left <= 0) {
            char miss[256];
            size_t o = 0;
            miss[0] = 0;
            for (r = 1; r < nprocs && o + 16 < sizeof miss; r++)
                if (!seen[r]) o += (size_t)snprintf(miss + o, sizeof miss - o, "%s%d", o ? ", " : "", r);
            snprintf(err, en,
                     "nccl bootstrap (TJ_COORD=%s): process 0 timed out after %g s waiting on port %d: %d of %d other processes connected (missing: "
                     "%s); are they running, with the same TJ_COORD, and can they reach this host?",
                     coord, timeout_s, port, got, nprocs - 1, miss);
            rc = 1;
            break;
        }
        pf.fd = fd;
        pf.events = POLLIN;
        pf.revents = 0;
        if (poll(&pf, 1, (int)(left * 1000) + 1) <= 0) continue;
        if ((c = accept(fd, NULL, NULL)) < 0) continue;
        if (tjn_io(c, &h, sizeof h, 0, deadline, &why) || h.magic != TJN_MAGIC) { /* not one of ours: ignore it */
            close(c);
            continue;
        }
        memset(&rep, 0, sizeof rep);
        rep.magic = TJN_MAGIC;
        rep.nprocs = (uint32_t)nprocs;
        rep.bytes = (uint32_t)bytes;
        rep.rank = h.nprocs != (uint32_t)nprocs ? TJN_BAD_NPROCS
                   : h.rank < 1 || h.rank >= (uint32_t)nprocs || seen[h.rank] ? TJN_BAD_RANK
                   : h.bytes != (uint32_t)bytes ? TJN_BAD_BYTES
                   : TJN_OK;
        if (tjn_io(c, &rep, sizeof rep, 1, deadline, &why) || (rep.rank == TJN_OK && tjn_io(c, (void *)blob, bytes, 1, deadline, &why))) {
            close(c);
            continue; /* it gave up; it may come back */
        }
        close(c);
        if (rep.rank == TJN_BAD_NPROCS) {
            snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process %u says %u processes, process 0 was told %d", coord, h.rank, h.nprocs, nprocs);
            rc = 1;
        } else if (rep.rank == TJN_BAD_RANK) {
            snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): a process with rank %u connected (%s)", coord, h.rank,
                     h.rank >= 1 && h.rank < (uint32_t)nprocs ? "twice: two processes have the same rank" : "out of range");
            rc = 1;
        } else if (rep.rank == TJN_BAD_BYTES) {
            snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process %u expects a %u-byte id, process 0 has %zu bytes (different builds?)", coord, h.rank,
                     h.bytes, bytes);
            rc = 1;
        } else {
            seen[h.rank] = 1;
            got++;
        }
    }
    close(fd);
    return rc;
}
static int tjn_tcp_peer(const char *coord, const char *host, const char *port, int rank, int nprocs, void *blob, size_t bytes, double timeout_s, char *err,
                        size_t en) {
    double deadline = tjn_now() + timeout_s, nap = 0.001;
    char last[200];
    snprintf(last, sizeof last, "no attempt");
    for (;;) {
        struct addrinfo hints, *res = NULL, *ai;
        int g, done = 0;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        g = getaddrinfo(host, port, &hints, &res);
        if (g && g != EAI_AGAIN) {
            snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process %d cannot resolve host '%s': %s", coord, rank, host, gai_strerror(g));
            return 1;
        }
        if (g) snprintf(last, sizeof last, "resolving '%.100s': %s", host, gai_strerror(g));
        for (ai = g ? NULL : res; ai && !done; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol), fl, e = 0;
            socklen_t el = sizeof e;
            struct pollfd pf;
            tjn_hdr h, rep;
            const char *why = "";
            double left = deadline - tjn_now();
            if (fd < 0) {
                snprintf(last, sizeof last, "socket: %s", strerror(errno));
                continue;
            }
            fl = fcntl(fd, F_GETFL, 0);
            fcntl(fd, F_SETFL, fl | O_NONBLOCK);
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
                snprintf(last, sizeof last, "connect: %s", strerror(errno));
                close(fd);
                continue;
            }
            pf.fd = fd;
            pf.events = POLLOUT;
            pf.revents = 0;
            if (poll(&pf, 1, left > 2 ? 2000 : left > 0 ? (int)(left * 1000) + 1 : 1) <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) || e) {
                snprintf(last, sizeof last, "connect: %s", e ? strerror(e) : "no answer");
                close(fd);
                continue;
            }
            h.magic = TJN_MAGIC;
            h.rank = (uint32_t)rank;
            h.nprocs = (uint32_t)nprocs;
            h.bytes = (uint32_t)bytes;
            if (tjn_io(fd, &h, sizeof h, 1, deadline, &why) || tjn_io(fd, &rep, sizeof rep, 0, deadline, &why)) {
                snprintf(last, sizeof last, "exchanging with process 0: %s", why);
                close(fd);
                continue;
            }
            if (rep.magic != TJN_MAGIC || rep.rank != TJN_OK) {
                close(fd);
                if (rep.magic != TJN_MAGIC) snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process %d: the server at %s:%s is not a tinyjax process 0", coord, rank, host, port);
                else if (rep.rank == TJN_BAD_NPROCS)
                    snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process %d was told %d processes, process 0 says %u", coord, rank, nprocs, rep.nprocs);
                else if (rep.rank == TJN_BAD_RANK)
                    snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process 0 refused rank %d (out of range, or another process has it)", coord, rank);
                else snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process %d expects a %zu-byte id, process 0 has %u bytes", coord, rank, bytes, rep.bytes);
                freeaddrinfo(res);
                return 1;
            }
            if (tjn_io(fd, blob, bytes, 0, deadline, &why)) snprintf(last, sizeof last, "receiving the id: %s", why);
            else done = 1;
            close(fd);
        }
        if (res) freeaddrinfo(res);
        if (done) return 0;
        if (tjn_now() >= deadline) {
            snprintf(err, en,
                     "nccl bootstrap (TJ_COORD=%s): process %d timed out after %g s connecting to process 0 at %s port %s (last: %s); is process 0 "
                     "running on that host, with the same TJ_COORD?",
                     coord, rank, timeout_s, host, port, last);
            return 1;
        }
        tjn_nap(&nap);
    }
}

/* ---- the id through a shared file: TJ_COORD=/path ---- */
typedef struct {
    uint32_t magic, nprocs, bytes, pad;
    int64_t written; /* time(NULL) of process 0 when it wrote the file */
} tjn_fhdr;
static void tjn_ack_name(char *b, size_t n, const char *path, int r) { snprintf(b, n, "%s.ack.%d", path, r); }
static int tjn_file_root(const char *path, int nprocs, const void *blob, size_t bytes, double timeout_s, char *err, size_t en) {
    char tmp[4200], ack[4200];
    tjn_fhdr h;
    FILE *f;
    int r, ok = 0, got;
    double deadline = tjn_now() + timeout_s, nap = 0.001;
    if (strlen(path) > 4000) {
        snprintf(err, en, "nccl bootstrap: TJ_COORD path is too long");
        return 1;
    }
    for (r = 1; r < nprocs; r++) { /* acknowledgements of an earlier run */
        tjn_ack_name(ack, sizeof ack, path, r);
        remove(ack);
    }
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    memset(&h, 0, sizeof h);
    h.magic = TJN_MAGIC;
    h.nprocs = (uint32_t)nprocs;
    h.bytes = (uint32_t)bytes;
    h.written = (int64_t)time(NULL);
    if ((f = fopen(tmp, "wb")) != NULL) {
        ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(blob, 1, bytes, f) == bytes;
        ok = (fflush(f) == 0) & ok;
        ok = (fsync(fileno(f)) == 0) & ok;
        ok = (fclose(f) == 0) & ok;
    }
    if (!ok || rename(tmp, path)) {
        snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process 0 cannot write the id file: %s (is the directory there and writable by every process?)", path,
                 strerror(errno));
        remove(tmp);
        return 1;
    }
    for (;;) {
        for (r = 1, got = 0; r < nprocs; r++) {
            tjn_ack_name(ack, sizeof ack, path, r);
            got += access(ack, F_OK) == 0;
        }
        if (got == nprocs - 1) break;
        if (tjn_now() >= deadline) {
            char miss[256];
            size_t o = 0;
            for (r = 1, miss[0] = 0; r < nprocs && o + 16 < sizeof miss; r++) {
                tjn_ack_name(ack, sizeof ack, path, r);
                if (access(ack, F_OK)) o += (size_t)snprintf(miss + o, sizeof miss - o, "%s%d", o ? ", " : "", r);
            }
            snprintf(err, en,
                     "nccl bootstrap (TJ_COORD=%s): process 0 timed out after %g s: %d of %d other processes read the id file (missing: %s); are they "
                     "running, with the same TJ_COORD, on a file system they share with this one?",
                     path, timeout_s, got, nprocs - 1, miss);
            remove(path);
            return 1;
        }
        tjn_nap(&nap);
    }
    remove(path);
    for (r = 1; r < nprocs; r++) {
        tjn_ack_name(ack, sizeof ack, path, r);
        remove(ack);
    }
    return 0;
}
static int tjn_file_peer(const char *path, int rank, int nprocs, void *blob, size_t bytes, double timeout_s, char *err, size_t en) {
    double deadline = tjn_now() + timeout_s, nap = 0.001;
    int64_t began = (int64_t)time(NULL);
    char stale[160], ack[4200], tmp[4300];
    stale[0] = 0;
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            tjn_fhdr h;
            int whole = fread(&h, sizeof h, 1, f) == 1 && h.magic == TJN_MAGIC && h.bytes == (uint32_t)bytes && fread(blob, 1, bytes, f) == bytes;
            fclose(f);
            if (whole && h.written + (int64_t)timeout_s < began)
                snprintf(stale, sizeof stale, " (a stale file, written %lld s before this process began waiting, was ignored)", (long long)(began - h.written));
            else if (whole && h.nprocs != (uint32_t)nprocs) {
                snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process %d was told %d processes, process 0 says %u", path, rank, nprocs, h.nprocs);
                return 1;
            } else if (whole) {
                FILE *a;
                tjn_ack_name(ack, sizeof ack, path, rank);
                snprintf(tmp, sizeof tmp, "%s.tmp.%ld", ack, (long)getpid());
                if (!(a = fopen(tmp, "wb")) || fclose(a) || rename(tmp, ack)) {
                    snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process %d cannot write its acknowledgement %s: %s", path, rank, ack, strerror(errno));
                    remove(tmp);
                    return 1;
                }
                return 0;
            }
        }
        if (tjn_now() >= deadline) {
            snprintf(err, en, "nccl bootstrap (TJ_COORD=%s): process %d timed out after %g s waiting for process 0 to write the id file%s", path, rank,
                     timeout_s, stale);
            return 1;
        }
        tjn_nap(&nap);
    }
}

extern "C" int tj_nccl_share_id(const char *coord, int rank, int nprocs, void *blob, size_t bytes, double timeout_s, char *err, size_t en) {
    char host[256];
    const char *colon;
    long port = 0;
    if (nprocs <= 1) return 0;
    if (rank < 0 || rank >= nprocs) {
        snprintf(err, en, "nccl bootstrap: process %d of %d", rank, nprocs);
        return 1;
    }
    if (timeout_s <= 0) timeout_s = 300;
    if (!coord) coord = getenv("TJ_COORD");
#if defined(TJ_MPI)
    if (!coord || !*coord) {
        int inited = 0, fin = 0, rc;
        MPI_Initialized(&inited);
        MPI_Finalized(&fin);
        if (inited && !fin) {
            if (bytes > (size_t)0x7fffffff) {
                snprintf(err, en, "nccl bootstrap: an id of %zu bytes", bytes);
                return 1;
            }
            if ((rc = MPI_Bcast(blob, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD)) != MPI_SUCCESS) return tj__mpi_fail(rc, "broadcast of the NCCL id", err, en);
            return 0;
        }
    }
#endif
    if (!coord || !*coord) {
        snprintf(err, en,
                 "nccl bootstrap: no way to share the NCCL id between %d processes: launch with mpirun (a TJ_MPI build), or set TJ_COORD=host:port "
                 "(process 0's host and a free port) or TJ_COORD=/path/on/a/shared/file/system in every process",
                 nprocs);
        return 1;
    }
    if (strchr(coord, '/')) return rank ? tjn_file_peer(coord, rank, nprocs, blob, bytes, timeout_s, err, en) : tjn_file_root(coord, nprocs, blob, bytes, timeout_s, err, en);
    colon = strrchr(coord, ':');
    if (!colon || colon == coord || (size_t)(colon - coord) >= sizeof host || tjn_parse_int(colon + 1, 1, 65535, &port)) {
        snprintf(err, en, "nccl bootstrap: TJ_COORD='%s' is neither host:port (a port 1..65535) nor a path containing '/'", coord);
        return 1;
    }
    memcpy(host, coord, (size_t)(colon - coord));
    host[colon - coord] = 0;
    return rank ? tjn_tcp_peer(coord, host, colon + 1, rank, nprocs, blob, bytes, timeout_s, err, en)
                : tjn_tcp_root(coord, (int)port, nprocs, blob, bytes, timeout_s, err, en);
}

/* ---- NCCL: the transport ----
   One NCCL communicator per local GPU spans the job (the world: rank =
   process * GPUs per process + local index, which is tinyjax's device
   index). A split (once per mesh-axis group, at tj_jit) is ncclCommSplit of
   the world with the other transports' rule: color = the device's
   coordinates off the axes, key = its rank along them (ties by world rank,
   so NCCL's rank r is tj__mesh_peer's rank r). Communicators are
   non-blocking (config.blocking = 0), so no NCCL call can hang the host:
   every "in progress" is polled with ncclCommGetAsyncError under the
   timeout.
   A collective runs on its group's communication stream. `stream`, when
   not NULL, is the cudaStream_t whose work made `send` and will read
   `recv` (the device's compute stream): the transport records an event on
   it, makes the communication stream wait for it, enqueues NCCL, records a
   second event and makes `stream` wait for that: no host synchronisation,
   and the call returns at once. A watchdog thread polls the outstanding
   collectives (event done? ncclCommGetAsyncError? older than the
   timeout?); on an error or a timeout it aborts the communicator
   (ncclCommAbort, which also frees the streams waiting on it) and the
   transport is broken: the next call on any group fails with the message,
   naming the collective that failed and the line that caused it (from
   tj__where when the program runs in process mode). With stream NULL the
   call is blocking, as on the CPU transport: `send` must be ready, and the
   call returns when `recv` is written, polling the same way.
   NCCL's own reductions (ring / tree order) differ from the CPU's rank
   order and may differ run to run. Deterministic mode
   (TJ_NCCL_DETERMINISTIC=1, or deterministic = 1 at creation): psum is an
   all-gather then a rank-ordered sum in double rounded once, reduce-scatter
   an all-to-all then a rank-ordered sum rounded after each add, exactly the
   CPU transport's arithmetic (tj__reduce_once, tj__reduce_steps), so the
   bits equal the CPU's and do not change run to run, for G times the
   traffic of psum. all_gather, all_to_all and ppermute move bytes and are
   exact in both modes. all_to_all and ppermute are grouped ncclSend /
   ncclRecv (a device's own block is a device copy). proc_allgather (host
   agreement between processes) is an ncclAllGather over the world
   communicators through device buffers.
   Tests: tests/test_nccl.cu against the CPU transport where GPUs exist;
   the same test linked with tests/nccl_mock.cpp (a pretend GPU and NCCL in
   host memory) runs this host logic without one. Never run on a GPU yet. */
#include <nccl.h>

#define TJN_RING 64 /* collectives in flight per communicator, at most */

typedef struct tjn_world tjn_world;
typedef struct {
    cudaEvent_t ev;
    double t;        /* when it was enqueued, seconds               */
    char what[320];  /* "psum #3 (4096 B, group of 8): <where>"     */
} tjn_op;
typedef struct tjn_comm {
    tjn_world *w;
    ncclComm_t comm;
    int cdev, dev, rank, G; /* CUDA device, tinyjax device, rank and size in the group */
    cudaStream_t cs;        /* the communication stream                                 */
    cudaEvent_t ready;
    tjn_op ring[TJN_RING];
    int head, n;            /* collectives in flight: ring[head .. head + n)            */
    void *scratch;          /* deterministic mode, proc_allgather                       */
    size_t scap;
    unsigned long seq;
    pthread_mutex_t mu;
    char err[700];          /* the communicator failed: later calls fail with this      */
    struct tjn_comm *next;  /* every communicator of the transport, for the watchdog    */
} tjn_comm;
struct tjn_world {
    tj_transport t;
    int L, cdev0, det;
    tjn_comm *world[TJ_MAXDEV];
    pthread_mutex_t mu;     /* the list below; taken before any tjn_comm.mu */
    tjn_comm *all;
    pthread_mutex_t bmu;    /* broken                                       */
    char broken[700];
    pthread_t dog;
    int dog_on;
    volatile int stop;
};

static int tjn_dtype(tj_dtype dt, ncclDataType_t *o) {
    switch (dt) {
    case TJ_F32: *o = ncclFloat32; return 0;
    case TJ_F64: *o = ncclFloat64; return 0;
    case TJ_BF16: *o = ncclBfloat16; return 0;
    case TJ_I32: *o = ncclInt32; return 0;
    default: return 1;
    }
}
static void tjn_break(tjn_world *w, const char *msg) {
    pthread_mutex_lock(&w->bmu);
    if (!w->broken[0]) snprintf(w->broken, sizeof w->broken, "%s", msg);
    pthread_mutex_unlock(&w->bmu);
}
/* h failed (h->mu held): keep the message, abort the communicator, break the transport */
static void tjn_fail(tjn_comm *h, const char *what, const char *why) {
    if (!h->err[0]) snprintf(h->err, sizeof h->err, "NCCL %.330s failed: %.340s", what, why);
    if (h->comm) ncclCommAbort(h->comm); /* ends its kernels: streams waiting on them go on */
    h->comm = NULL;
    h->n = 0;
    tjn_break(h->w, h->err);
}
/* settle a non-blocking NCCL call: poll until it is no longer in progress */
static ncclResult_t tjn_settle(ncclComm_t c, ncclResult_t r, double timeout_s, int *timed_out) {
    double t0 = tjn_now(), nap = 0.0001;
    *timed_out = 0;
    while (r == ncclInProgress) {
        if (tjn_now() - t0 > timeout_s) {
            *timed_out = 1;
            return r;
        }
        tjn_nap(&nap);
        if (ncclCommGetAsyncError(c, &r) != ncclSuccess) break;
    }
    return r;
}
static void tjn_why(char *b, size_t n, ncclComm_t c, ncclResult_t r, int timed_out, double timeout_s) {
    if (timed_out)
        snprintf(b, n, "timed out after %g s (a peer process died, hangs, or runs another program; the timeout is TJ_TIMEOUT)", timeout_s);
    else snprintf(b, n, "%s (%s)", ncclGetErrorString(r), c ? ncclGetLastError(c) : "");
}
/* poll h's collectives in flight (h->mu held): 0, or 1 after failing h */
static int tjn_poll(tjn_comm *h) {
    ncclResult_t a = ncclSuccess;
    char why[300];
    cudaError_t e = cudaSuccess;
    if (h->err[0]) return 1;
    while (h->n) {
        e = cudaEventQuery(h->ring[h->head].ev);
        if (e != cudaSuccess) break;
        h->head = (h->head + 1) % TJN_RING;
        h->n--;
    }
    if (!h->n) return 0;
    if (h->w->broken[0]) { /* another group failed: its peers will not come; do not wait for the timeout */
        snprintf(why, sizeof why, "aborted, the transport broke: %.250s", h->w->broken);
        tjn_fail(h, h->ring[h->head].what, why);
        return 1;
    }
    if (e != cudaErrorNotReady) {
        snprintf(why, sizeof why, "CUDA error %s", cudaGetErrorString(e));
        tjn_fail(h, h->ring[h->head].what, why);
        return 1;
    }
    if (ncclCommGetAsyncError(h->comm, &a) == ncclSuccess && a != ncclSuccess && a != ncclInProgress) {
        tjn_why(why, sizeof why, h->comm, a, 0, 0);
        tjn_fail(h, h->ring[h->head].what, why);
        return 1;
    }
    if (tjn_now() - h->ring[h->head].t > h->w->t.timeout_s) {
        tjn_why(why, sizeof why, h->comm, a, 1, h->w->t.timeout_s);
        tjn_fail(h, h->ring[h->head].what, why);
        return 1;
    }
    return 0;
}
/* wait until at most `keep` collectives of h are in flight (h->mu held; released while napping) */
static int tjn_wait(tjn_comm *h, int keep) {
    double nap = 0.00002;
    for (;;) {
        if (tjn_poll(h)) return 1;
        if (h->n <= keep) return 0;
        pthread_mutex_unlock(&h->mu);
        if (nap < 0.0002) {
            sched_yield();
            nap *= 1.1;
        } else tjn_nap(&nap);
        pthread_mutex_lock(&h->mu);
    }
}
static void *tjn_watchdog(void *arg) {
    tjn_world *w = (tjn_world *)arg;
    while (!w->stop) {
        tjn_comm *h;
        pthread_mutex_lock(&w->mu);
        for (h = w->all; h; h = h->next) {
            pthread_mutex_lock(&h->mu);
            if (h->n && cudaSetDevice(h->cdev) == cudaSuccess) tjn_poll(h);
            pthread_mutex_unlock(&h->mu);
        }
        pthread_mutex_unlock(&w->mu);
        tj__nap(5000);
    }
    return NULL;
}

/* start a collective on h: returns with h->mu held, or 1 (unlocked) with err */
static int tjn_begin(tjn_comm *h, void *stream, char *err, size_t en) {
    cudaError_t e;
    pthread_mutex_lock(&h->mu);
    if (h->err[0] || h->w->broken[0]) {
        if (h->err[0]) snprintf(err, en, "%s", h->err);
        else snprintf(err, en, "the NCCL transport is broken: %s", h->w->broken);
        pthread_mutex_unlock(&h->mu);
        return 1;
    }
    if ((e = cudaSetDevice(h->cdev)) != cudaSuccess) {
        snprintf(err, en, "cudaSetDevice(%d): %s", h->cdev, cudaGetErrorString(e));
        pthread_mutex_unlock(&h->mu);
        return 1;
    }
    { /* an error NCCL found after the last collective finished (a peer died since) */
        ncclResult_t a = ncclSuccess;
        if (ncclCommGetAsyncError(h->comm, &a) == ncclSuccess && a != ncclSuccess && a != ncclInProgress) {
            char why[300], what[96];
            snprintf(what, sizeof what, "communicator of device %d (found before collective #%lu)", h->dev, h->seq + 1);
            tjn_why(why, sizeof why, h->comm, a, 0, 0);
            tjn_fail(h, what, why);
            snprintf(err, en, "%s", h->err);
            pthread_mutex_unlock(&h->mu);
            return 1;
        }
    }
    if (h->n == TJN_RING && tjn_wait(h, TJN_RING - 1)) { /* bounded: the oldest must finish first */
        snprintf(err, en, "%s", h->err);
        pthread_mutex_unlock(&h->mu);
        return 1;
    }
    if (stream && ((e = cudaEventRecord(h->ready, (cudaStream_t)stream)) != cudaSuccess || (e = cudaStreamWaitEvent(h->cs, h->ready, 0)) != cudaSuccess)) {
        snprintf(err, en, "ordering the communication stream after the compute stream: %s", cudaGetErrorString(e));
        pthread_mutex_unlock(&h->mu);
        return 1;
    }
    return 0;
}
static int tjn_scratch(tjn_comm *h, size_t bytes, cudaError_t *e) {
    if (bytes <= h->scap) return 0;
    if (h->scratch) cudaFreeAsync(h->scratch, h->cs);
    h->scratch = NULL;
    h->scap = 0;
    if ((*e = cudaMallocAsync(&h->scratch, bytes, h->cs)) != cudaSuccess) return 1;
    h->scap = bytes;
    return 0;
}
static void tjn_start_dog(tjn_world *w) {
    pthread_mutex_lock(&w->bmu);
    if (!w->dog_on && !pthread_create(&w->dog, NULL, tjn_watchdog, w)) w->dog_on = 1;
    pthread_mutex_unlock(&w->bmu);
}
/* finish a collective on h (h->mu held, released here): r is what NCCL
   returned, e the first CUDA error around it */
static int tjn_end(tjn_comm *h, ncclResult_t r, cudaError_t e, const char *kind, size_t bytes, void *stream, char *err, size_t en, int to = 0) {
    tjn_op *op = &h->ring[(h->head + h->n) % TJN_RING];
    const char *where = h->dev >= 0 && h->dev < TJ_MAXDEV ? tj__where[h->dev] : "";
    int rc = 0;
    char why[300];
    snprintf(op->what, sizeof op->what, "%s #%lu (%zu B, group of %d, device %d)%s%.200s", kind, ++h->seq, bytes, h->G, h->dev, where[0] ? ": " : "", where);
    if (e == cudaSuccess && !to) r = tjn_settle(h->comm, r, h->w->t.timeout_s, &to);
    if (e != cudaSuccess) {
        snprintf(why, sizeof why, "CUDA error %s", cudaGetErrorString(e));
        tjn_fail(h, op->what, why);
        rc = 1;
    } else if (r != ncclSuccess) {
        tjn_why(why, sizeof why, h->comm, r, to, h->w->t.timeout_s);
        tjn_fail(h, op->what, why);
        rc = 1;
    } else if ((e = cudaEventRecord(op->ev, h->cs)) != cudaSuccess || (stream && (e = cudaStreamWaitEvent((cudaStream_t)stream, op->ev, 0)) != cudaSuccess)) {
        snprintf(why, sizeof why, "ordering the compute stream after it: %s", cudaGetErrorString(e));
        tjn_fail(h, op->what, why);
        rc = 1;
    } else {
        op->t = tjn_now();
        h->n++;
        if (!stream) rc = tjn_wait(h, 0);
    }
    if (rc) snprintf(err, en, "%s", h->err);
    pthread_mutex_unlock(&h->mu);
    if (!rc && stream && !h->w->dog_on) tjn_start_dog(h->w);
    return rc;
}

/* ---- the deterministic reduction: the CPU transport's arithmetic ----
   (tjc_cpu_ld / tjc_cpu_st of [11] collectives: tj__ld / tj__st on the device) */
/* the G blocks of a reduction, `stride` bytes apart */
struct tjn_blocks {
    const char *b;
    size_t stride;
    __device__ const void *at(int r) const { return b + (size_t)r * stride; }
};
__global__ void tjn_k_reduce(const char *blocks, size_t stride, int G, void *out, int dt, int64_t n, int ismax, int steps) {
    tjn_blocks src = {blocks, stride};
    tjc_reduce_loop(src, G, out, dt, n, ismax, steps);
}
static cudaError_t tjn_reduce(tjn_comm *h, const void *blocks, size_t stride, void *out, tj_dtype dt, size_t count, int ismax, int steps) {
    unsigned nb = (unsigned)(count / 256 + 1 < 65536 ? count / 256 + 1 : 65536);
    if (!count) return cudaSuccess;
    if (steps && h->G == 1) return cudaMemcpyAsync(out, blocks, count * tj_dtype_size(dt), cudaMemcpyDeviceToDevice, h->cs); /* bit for bit */
    tjn_k_reduce<<<nb, 256, 0, h->cs>>>((const char *)blocks, stride, h->G, out, (int)dt, (int64_t)count, ismax, steps);
    return cudaGetLastError();
}

/* ---- the table ---- */
/* NCCL moves device memory: a host pointer (the CPU backend) is an error here, not a crash in NCCL */
static int tjn_device_mem(const char *kind, const void *send, const void *recv, size_t bytes, char *err, size_t en) {
    const void *p[2];
    int i;
    p[0] = send;
    p[1] = recv;
    for (i = 0; i < 2 && bytes; i++) {
        cudaPointerAttributes a;
        if (!p[i]) continue;
        if (cudaPointerGetAttributes(&a, p[i]) != cudaSuccess || (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)) {
            (void)cudaGetLastError();
            snprintf(err, en, "NCCL transport: the %s buffer of %s is not CUDA device memory (NCCL moves GPU memory: run the context on tj_cuda_backend)",
                     i ? "receive" : "send", kind);
            return 1;
        }
    }
    return 0;
}
static int tjn_all_gather(tj_transport *t, void *comm, const void *send, void *recv, size_t bytes, void *stream, char *err, size_t en) {
    tjn_comm *h = (tjn_comm *)comm;
    (void)t;
    if (tjn_device_mem("all_gather", send, recv, bytes, err, en) || tjn_begin(h, stream, err, en)) return 1;
    return tjn_end(h, ncclAllGather(send, recv, bytes, ncclUint8, h->comm, h->cs), cudaSuccess, "all_gather", bytes, stream, err, en);
}
/* grouped send/recv of G blocks: block q of send to rank q, rank q's block to block q of recv; own block copied */
static ncclResult_t tjn_a2a(tjn_comm *h, const char *send, char *recv, size_t S, cudaError_t *e) {
    int q;
    ncclResult_t r = ncclGroupStart();
    for (q = 0; q < h->G && r == ncclSuccess; q++) {
        if (q == h->rank) continue;
        r = ncclSend(send + (size_t)q * S, S, ncclUint8, q, h->comm, h->cs);
        if (r == ncclSuccess) r = ncclRecv(recv + (size_t)q * S, S, ncclUint8, q, h->comm, h->cs);
    }
    {
        ncclResult_t r2 = ncclGroupEnd();
        if (r == ncclSuccess) r = r2;
    }
    if (S) *e = cudaMemcpyAsync(recv + (size_t)h->rank * S, send + (size_t)h->rank * S, S, cudaMemcpyDeviceToDevice, h->cs);
    return r;
}
/* psum / pmax (scatter 0) and reduce_scatter (scatter 1): NCCL's own
   reduction, or in deterministic mode every rank's block gathered here
   (all_gather; all_to_all for the scatter) and reduced in rank order with
   the CPU transport's arithmetic */
static int tjn_reduction(tj_transport *t, void *comm, const void *send, void *recv, size_t count, tj_dtype dt, tj_reduce_op op, void *stream, char *err,
                         size_t en, int scatter) {
    tjn_comm *h = (tjn_comm *)comm;
    tjn_world *w = (tjn_world *)t->state;
    const char *what = scatter ? "reduce_scatter" : "psum";
    ncclDataType_t nt;
    ncclResult_t r;
    cudaError_t e = cudaSuccess;
    size_t S = count * tj_dtype_size(dt), moved = scatter ? S * (size_t)h->G : S;
    char label[96];
    if (tjn_dtype(dt, &nt)) {
        snprintf(err, en, "NCCL transport: dtype %s has no NCCL type", tj_dtype_name(dt));
        return 1;
    }
    if (tjn_device_mem(what, send, recv, S, err, en) || tjn_begin(h, stream, err, en)) return 1;
    if (!w->det) {
        ncclRedOp_t rop = op == TJ_REDUCE_MAX ? ncclMax : ncclSum;
        r = scatter ? ncclReduceScatter(send, recv, count, nt, rop, h->comm, h->cs) : ncclAllReduce(send, recv, count, nt, rop, h->comm, h->cs);
        snprintf(label, sizeof label, "%s (%s)", what, scatter ? "ncclReduceScatter" : "ncclAllReduce");
        return tjn_end(h, r, e, label, moved, stream, err, en);
    }
    snprintf(label, sizeof label, "%s (deterministic: %s + ordered sum)", what, scatter ? "all_to_all" : "all_gather");
    if (tjn_scratch(h, S * (size_t)h->G + 1, &e)) return tjn_end(h, ncclSuccess, e, label, moved, stream, err, en);
    {
        int to = 0;
        r = tjn_settle(h->comm, scatter ? tjn_a2a(h, (const char *)send, (char *)h->scratch, S, &e) : ncclAllGather(send, h->scratch, S, ncclUint8, h->comm, h->cs),
                       w->t.timeout_s, &to);
        if (r == ncclSuccess && e == cudaSuccess) e = tjn_reduce(h, h->scratch, S, recv, dt, count, op == TJ_REDUCE_MAX, scatter);
        return tjn_end(h, r, e, label, moved, stream, err, en, to);
    }
}
static int tjn_all_reduce(tj_transport *t, void *comm, const void *send, void *recv, size_t count, tj_dtype dt, tj_reduce_op op, void *stream, char *err,
                          size_t en) {
    return tjn_reduction(t, comm, send, recv, count, dt, op, stream, err, en, 0);
}
static int tjn_reduce_scatter(tj_transport *t, void *comm, const void *send, void *recv, size_t count, tj_dtype dt, tj_reduce_op op, void *stream,
                              char *err, size_t en) {
    return tjn_reduction(t, comm, send, recv, count, dt, op, stream, err, en, 1);
}
static int tjn_all_to_all(tj_transport *t, void *comm, const void *send, void *recv, size_t bytes, void *stream, char *err, size_t en) {
    tjn_comm *h = (tjn_comm *)comm;
    ncclResult_t r;
    cudaError_t e = cudaSuccess;
    (void)t;
    if (tjn_device_mem("all_to_all", send, recv, bytes, err, en) || tjn_begin(h, stream, err, en)) return 1;
    if (send == recv) { /* in place: through scratch */
        int to = 0;
        if (!tjn_scratch(h, bytes * (size_t)h->G + 1, &e)) {
            /* settled first: a non-blocking communicator may not have queued
               the sends and receives yet, and the copy reads what they wrote */
            r = tjn_settle(h->comm, tjn_a2a(h, (const char *)send, (char *)h->scratch, bytes, &e), h->w->t.timeout_s, &to);
            if (r == ncclSuccess && e == cudaSuccess) e = cudaMemcpyAsync(recv, h->scratch, bytes * (size_t)h->G, cudaMemcpyDeviceToDevice, h->cs);
        } else r = ncclSuccess;
        return tjn_end(h, r, e, "all_to_all (grouped ncclSend/ncclRecv)", bytes * (size_t)h->G, stream, err, en, to);
    }
    r = tjn_a2a(h, (const char *)send, (char *)recv, bytes, &e);
    return tjn_end(h, r, e, "all_to_all (grouped ncclSend/ncclRecv)", bytes * (size_t)h->G, stream, err, en);
}
static int tjn_send_recv(tj_transport *t, void *comm, const void *send, int to, void *recv, int from, size_t bytes, void *stream, char *err, size_t en) {
    tjn_comm *h = (tjn_comm *)comm;
    ncclResult_t r;
    cudaError_t e = cudaSuccess;
    (void)t;
    if (to >= h->G || from >= h->G) {
        snprintf(err, en, "NCCL transport: ppermute between ranks %d -> %d -> %d of a group of %d", from, h->rank, to, h->G);
        return 1;
    }
    if (tjn_device_mem("ppermute", to >= 0 ? send : NULL, from >= 0 ? recv : NULL, bytes, err, en) || tjn_begin(h, stream, err, en)) return 1;
    r = ncclGroupStart();
    if (r == ncclSuccess && to >= 0 && to != h->rank) r = ncclSend(send, bytes, ncclUint8, to, h->comm, h->cs);
    if (r == ncclSuccess && from >= 0 && from != h->rank) r = ncclRecv(recv, bytes, ncclUint8, from, h->comm, h->cs);
    {
        ncclResult_t r2 = ncclGroupEnd();
        if (r == ncclSuccess) r = r2;
    }
    if (from == h->rank && recv != send && bytes) e = cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, h->cs);
    return tjn_end(h, r, e, "ppermute (grouped ncclSend/ncclRecv)", bytes, stream, err, en);
}

/* ---- glue: tj_run's collectives on the CUDA backend ([11] collectives)
   call the table above with device pointers and the device's compute
   stream. This checks what NCCL would not say clearly: the communicator
   must live on the GPU the backend computes on (0, or 1 with why). Not
   NCCL: nothing to check. */
static int tjn_split(tj_transport *t, int n, const int *dev, const int *color, const int *key, void **comm, char *err, size_t en);
static int tjc_nccl_glue(tj_transport *t, void *comm, int device, char *why, size_t n) {
    tjn_comm *h = (tjn_comm *)comm;
    if (t->split != tjn_split || h->cdev == device) return 0;
    snprintf(why, n,
             "the NCCL transport's communicator of device %d is on GPU %d, but the context's CUDA backend computes on GPU %d (make the backend with "
             "tj_cuda_backend(%d): with tj_cuda_backend each process drives one GPU)",
             h->dev, h->cdev, device, h->cdev);
    return 1;
}

/* ---- communicators: made at creation (the world) and by split ---- */
static void tjn_register(tjn_world *w, tjn_comm *h) {
    pthread_mutex_lock(&w->mu);
    h->next = w->all;
    w->all = h;
    pthread_mutex_unlock(&w->mu);
}
/* a handle for communicator c on CUDA device cdev (tinyjax device dev); NULL with err */
static tjn_comm *tjn_comm_make(tjn_world *w, ncclComm_t c, int cdev, int dev, char *err, size_t en) {
    tjn_comm *h = (tjn_comm *)tj__calloc(sizeof *h);
    cudaError_t e = cudaSuccess;
    int i;
    if (!h) {
        snprintf(err, en, "out of memory");
        return NULL;
    }
    h->w = w;
    h->comm = c;
    h->cdev = cdev;
    h->dev = dev;
    pthread_mutex_init(&h->mu, NULL);
    if (ncclCommCount(c, &h->G) != ncclSuccess || ncclCommUserRank(c, &h->rank) != ncclSuccess) {
        snprintf(err, en, "ncclCommCount / ncclCommUserRank failed: %s", ncclGetLastError(c));
        e = cudaErrorUnknown;
    }
    if (e == cudaSuccess) e = cudaSetDevice(cdev);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&h->cs, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&h->ready, cudaEventDisableTiming);
    for (i = 0; i < TJN_RING && e == cudaSuccess; i++) e = cudaEventCreateWithFlags(&h->ring[i].ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        if (e != cudaErrorUnknown) snprintf(err, en, "making the communication stream on GPU %d: %s", cdev, cudaGetErrorString(e));
        for (i = 0; i < TJN_RING; i++)
            if (h->ring[i].ev) cudaEventDestroy(h->ring[i].ev);
        if (h->ready) cudaEventDestroy(h->ready);
        if (h->cs) cudaStreamDestroy(h->cs);
        pthread_mutex_destroy(&h->mu);
        TJ_FREE(h);
        return NULL;
    }
    tjn_register(w, h);
    return h;
}
static void tjn_comm_free(tj_transport *t, void *comm) {
    tjn_comm *h = (tjn_comm *)comm, **pp;
    tjn_world *w = (tjn_world *)t->state;
    int i;
    if (!h) return;
    pthread_mutex_lock(&w->mu);
    for (pp = &w->all; *pp; pp = &(*pp)->next)
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_lock(&h->mu);
    cudaSetDevice(h->cdev);
    if (h->comm && !w->broken[0] && !tjn_wait(h, 0)) { /* finished cleanly: finalize, then destroy */
        int to = 0;
        ncclResult_t r = tjn_settle(h->comm, ncclCommFinalize(h->comm), w->t.timeout_s, &to);
        if (r == ncclSuccess) ncclCommDestroy(h->comm);
        else ncclCommAbort(h->comm);
        h->comm = NULL;
    }
    if (h->comm) ncclCommAbort(h->comm);
    if (h->scratch) cudaFreeAsync(h->scratch, h->cs);
    cudaStreamSynchronize(h->cs); /* the communicator is gone: nothing on it can hang */
    for (i = 0; i < TJN_RING; i++) cudaEventDestroy(h->ring[i].ev);
    cudaEventDestroy(h->ready);
    cudaStreamDestroy(h->cs);
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_destroy(&h->mu);
    TJ_FREE(h);
}
/* split: this process's devices dev[i] (all of them, tinyjax device =
   world rank) join the group of color[i], ranked by key[i] */
static int tjn_split(tj_transport *t, int n, const int *dev, const int *color, const int *key, void **comm, char *err, size_t en) {
    tjn_world *w = (tjn_world *)t->state;
    ncclComm_t nc[TJ_MAXDEV];
    ncclResult_t r, ri[TJ_MAXDEV];
    int i, l, used[TJ_MAXDEV], to = 0, bad = -1;
    char why[300] = "";
    if (w->broken[0]) {
        snprintf(err, en, "the NCCL transport is broken: %s", w->broken);
        return 1;
    }
    if (n != w->L) {
        snprintf(err, en, "the context runs %d device%s in this process, the NCCL transport was made for %d GPU%s per process (tj_nccl_transport_new)", n,
                 n == 1 ? "" : "s", w->L, w->L == 1 ? "" : "s");
        return 1;
    }
    memset(used, 0, sizeof used);
    for (i = 0; i < n; i++) {
        l = dev[i] - t->rank * w->L;
        if (l < 0 || l >= w->L || used[l]++ || color[i] < 0 || key[i] < 0) {
            snprintf(err, en, "split: device %d (color %d, key %d) is not one of this process's GPUs %d..%d, or comes twice", dev[i], color[i], key[i],
                     t->rank * w->L, t->rank * w->L + w->L - 1);
            return 1;
        }
    }
    for (l = 0; l < w->L; l++) { /* the world communicators must be idle */
        tjn_comm *h = w->world[l];
        pthread_mutex_lock(&h->mu);
        cudaSetDevice(h->cdev);
        if (tjn_wait(h, 0)) {
            snprintf(err, en, "%s", h->err);
            pthread_mutex_unlock(&h->mu);
            return 1;
        }
        pthread_mutex_unlock(&h->mu);
    }
    r = ncclGroupStart();
    for (i = 0; i < n; i++) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        tjn_comm *h = w->world[dev[i] - t->rank * w->L];
        cfg.blocking = 0;
        nc[i] = NULL;
        cudaSetDevice(h->cdev);
        ri[i] = r == ncclSuccess ? ncclCommSplit(h->comm, color[i], key[i], &nc[i], &cfg) : r;
        if (ri[i] != ncclSuccess && ri[i] != ncclInProgress && bad < 0) bad = i;
    }
    r = ncclGroupEnd();
    for (i = 0; i < n; i++) { /* settle every new communicator */
        ncclResult_t s = r == ncclSuccess || r == ncclInProgress ? ri[i] : r;
        if ((s == ncclSuccess || s == ncclInProgress) && !nc[i]) { /* the handle may come once the parent settles */
            tjn_comm *h = w->world[dev[i] - t->rank * w->L];
            cudaSetDevice(h->cdev);
            s = tjn_settle(h->comm, ncclInProgress, w->t.timeout_s, &to);
            if (s == ncclSuccess && !nc[i]) {
                snprintf(why, sizeof why, "NCCL gave no communicator (split returned %s, group end %s)", ncclGetErrorString(ri[i]), ncclGetErrorString(r));
                s = ncclInvalidUsage;
            }
        }
        if (s == ncclSuccess || s == ncclInProgress) s = nc[i] ? tjn_settle(nc[i], ncclInProgress, w->t.timeout_s, &to) : s;
        if (s != ncclSuccess && bad < 0) {
            bad = i;
            ri[i] = s;
        }
    }
    for (i = 0; i < n; i++) comm[i] = NULL;
    if (bad < 0)
        for (i = 0; i < n; i++) {
            tjn_comm *h = tjn_comm_make(w, nc[i], w->world[dev[i] - t->rank * w->L]->cdev, dev[i], why, sizeof why);
            if (!h) {
                bad = i;
                snprintf(err, en, "split of device %d (color %d, key %d): %s", dev[i], color[i], key[i], why);
                break;
            }
            nc[i] = NULL;
            comm[i] = h;
        }
    else {
        char w2[300];
        tjn_why(w2, sizeof w2, nc[bad], ri[bad], to, w->t.timeout_s);
        snprintf(err, en, "ncclCommSplit of device %d (color %d, key %d) failed: %s%s%s (split returned %s, group end %s)", dev[bad], color[bad], key[bad], w2,
                 why[0] ? "; " : "", why, ncclGetErrorString(ri[bad]), ncclGetErrorString(r));
        tjn_break(w, err);
    }
    if (bad >= 0) {
        for (i = 0; i < n; i++) {
            if (comm[i]) tjn_comm_free(t, comm[i]);
            if (nc[i]) ncclCommAbort(nc[i]);
            comm[i] = NULL;
        }
        return 1;
    }
    return 0;
}
/* between processes, host memory: an ncclAllGather over every local GPU's
   world communicator (one group call), through device buffers */
static int tjn_proc_allgather(tj_transport *t, const void *send, void *recv, size_t bytes, char *err, size_t en) {
    tjn_world *w = (tjn_world *)t->state;
    int l, p, N = t->nprocs * w->L, rc = 0;
    cudaError_t e = cudaSuccess;
    ncclResult_t r;
    if (t->nprocs <= 1) {
        memcpy(recv, send, bytes);
        return 0;
    }
    for (l = 0; l < w->L; l++)
        if (tjn_begin(w->world[l], NULL, err, en)) {
            while (l-- > 0) pthread_mutex_unlock(&w->world[l]->mu);
            return 1;
        }
    for (l = 0; l < w->L && e == cudaSuccess; l++) {
        tjn_comm *h = w->world[l];
        if ((e = cudaSetDevice(h->cdev)) == cudaSuccess && !tjn_scratch(h, bytes * (size_t)(N + 1) + 1, &e))
            e = cudaMemcpyAsync(h->scratch, send, bytes, cudaMemcpyHostToDevice, h->cs);
    }
    r = ncclGroupStart();
    for (l = 0; l < w->L && e == cudaSuccess && r == ncclSuccess; l++) {
        tjn_comm *h = w->world[l];
        r = ncclAllGather(h->scratch, (char *)h->scratch + bytes, bytes, ncclUint8, h->comm, h->cs);
    }
    {
        ncclResult_t r2 = ncclGroupEnd();
        if (r == ncclSuccess) r = r2;
    }
    for (l = 0; l < w->L; l++) { /* settles, waits (blocking) and unlocks each */
        tjn_comm *h = w->world[l];
        if (tjn_end(h, r, e, "allgather between processes (host agreement)", bytes * (size_t)N, NULL, err, en)) rc = 1;
    }
    if (rc) return 1;
    for (p = 0; p < t->nprocs && e == cudaSuccess; p++) /* process p's block: its local GPU 0, world rank p * L */
        e = cudaMemcpy((char *)recv + (size_t)p * bytes, (char *)w->world[0]->scratch + bytes + (size_t)p * w->L * bytes, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        snprintf(err, en, "copying the gathered bytes to the host: %s", cudaGetErrorString(e));
        return 1;
    }
    return 0;
}
static void tjn_free(tj_transport *t) {
    tjn_world *w;
    int l;
    if (!t) return;
    w = (tjn_world *)t->state;
    if (w->dog_on) {
        w->stop = 1;
        pthread_join(w->dog, NULL);
    }
    for (l = 0; l < w->L; l++) w->world[l] = NULL;
    while (w->all) tjn_comm_free(t, w->all); /* the world, and groups nobody freed */
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->bmu);
    TJ_FREE(w);
}

/* processes and rank from the launcher, as tj_distributed_init reads them */
static int tjn_launcher(int *np, int *rank, char *err, size_t en) {
    static const char *sz[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "TJ_NPROCS"}, *rk[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "TJ_RANK"};
    size_t i;
    long n = 1, r = 0;
    *np = 1;
    *rank = 0;
    for (i = 0; i < 3; i++) {
        const char *e = getenv(sz[i]);
        if (!e) continue;
        if (tjn_parse_int(e, 1, TJ_MAXDEV, &n) || tjn_parse_int(getenv(rk[i]), 0, n - 1, &r)) {
            snprintf(err, en, "%s='%s' and %s='%s' are not a process count (1..%d) and a rank below it", sz[i], e, rk[i], getenv(rk[i]) ? getenv(rk[i]) : "(unset)",
                     TJ_MAXDEV);
            return 1;
        }
        *np = (int)n;
        *rank = (int)r;
        return 0;
    }
    return 0;
}
/* This process's first GPU (local rank -> device, as the introduction
   says) and, in process 0, a new NCCL id; -1 with err */
static int tjn_pick(int gpus, int rank, ncclUniqueId *id, char *err, size_t en) {
    int local = 0, ndev = 0, first;
    ncclResult_t r;
    cudaError_t ce;
    if (tj_nccl_local_rank(&local, err, en)) return -1;
    if ((ce = cudaGetDeviceCount(&ndev)) != cudaSuccess) {
        snprintf(err, en, "NCCL transport: cudaGetDeviceCount: %s", cudaGetErrorString(ce));
        (void)cudaGetLastError();
        return -1;
    }
    if (local < 0) local = ndev / gpus > 0 ? rank % (ndev / gpus) : 0; /* no launcher variable: ranks in blocks per node */
    if ((first = tj_nccl_device_for(local, gpus, ndev, err, en)) < 0) return -1;
    memset(id, 0, sizeof *id);
    if (rank == 0 && (r = ncclGetUniqueId(id)) != ncclSuccess) {
        snprintf(err, en, "ncclGetUniqueId: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
        return -1;
    }
    return first;
}
#if defined(TJ_MPI)
/* Under mpirun every process says whether it can start (tjn_pick), so a
   process that cannot (more processes on a node than GPUs, no GPU) fails
   every process with its message instead of leaving them in MPI_Bcast.
   1 when any process failed (err: the first one's message), else 0. */
static int tjn_agree(tj_transport *m, int failed, char *err, size_t en) {
    enum { MSG = 400 };
    char mine[MSG], *all = (char *)tj__calloc((size_t)m->nprocs * MSG), why[MSG];
    int p, rc = 0;
    snprintf(mine, sizeof mine, "%s", failed ? (err[0] ? err : "failed") : "");
    if (!all || m->proc_allgather(m, mine, all, MSG, why, sizeof why)) {
        snprintf(err, en, "NCCL transport: agreeing on the start between processes: %s", all ? why : "out of memory");
        TJ_FREE(all);
        return 1;
    }
    for (p = 0; p < m->nprocs && !rc; p++)
        if (all[(size_t)p * MSG]) {
            snprintf(err, en, "NCCL transport: process %d of %d cannot start: %.*s", p, m->nprocs, MSG, all + (size_t)p * MSG);
            rc = 1;
        }
    TJ_FREE(all);
    return rc;
}
#endif
/* the CUDA device of local GPU i (0 .. gpus_per_process - 1) of an NCCL
   transport, for the backend (tj_cuda_backend) of that GPU; -1 if t is not
   one or i is out of range */
extern "C" int tj_nccl_transport_gpu(const tj_transport *t, int i) {
    const tjn_world *w;
    if (!t || t->free != tjn_free) return -1;
    w = (const tjn_world *)t->state;
    return i >= 0 && i < w->L ? w->cdev0 + i : -1;
}
extern "C" tj_transport *tj_nccl_transport_new(int gpus, double timeout_s, int det, char *err, size_t en) {
    char dummy[1], why[300];
    const char *e;
    int np = 1, rank = 0, first, l, to = 0, bad = -1;
    tjn_world *w;
    ncclUniqueId id;
    ncclComm_t c[TJ_MAXDEV];
    ncclResult_t r, ri[TJ_MAXDEV];
    cudaError_t ce;
#if defined(TJ_MPI)
    tj_transport *m = NULL;
#endif
    if (!err || !en) {
        err = dummy;
        en = sizeof dummy;
    }
    err[0] = 0;
    if (gpus <= 0) gpus = 1;
    e = getenv("TJ_TIMEOUT");
    if (timeout_s <= 0) timeout_s = e && atof(e) > 0 ? atof(e) : 300.0;
    if (det < 0) det = (e = getenv("TJ_NCCL_DETERMINISTIC")) != NULL && atoi(e) > 0;
#if defined(TJ_MPI)
    if (!getenv("TJ_COORD") && (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE"))) { /* mpirun: MPI gives the ranks and carries the id */
        if (!(m = tj__mpi_transport(timeout_s, err, en))) return NULL;
        np = m->nprocs;
        rank = m->rank;
    } else
#endif
        if (tjn_launcher(&np, &rank, err, en))
        return NULL;
    if (np * gpus > TJ_MAXDEV) {
        snprintf(err, en, "NCCL transport: %d processes x %d GPUs is more than TJ_MAXDEV = %d devices", np, gpus, TJ_MAXDEV);
        return NULL;
    }
    first = tjn_pick(gpus, rank, &id, err, en);
#if defined(TJ_MPI)
    if (m && tjn_agree(m, first < 0, err, en)) return NULL; /* one process cannot start: none waits for it in MPI_Bcast */
#endif
    if (first < 0) return NULL;
    if (tj_nccl_share_id(NULL, rank, np, &id, sizeof id, timeout_s, err, en)) return NULL;
    w = (tjn_world *)tj__calloc(sizeof *w);
    if (!w) {
        snprintf(err, en, "out of memory");
        return NULL;
    }
    w->L = gpus;
    w->cdev0 = first;
    w->det = det;
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->bmu, NULL);
    w->t.name = "nccl";
    w->t.state = w;
    w->t.nprocs = np;
    w->t.rank = rank;
    w->t.timeout_s = timeout_s;
    w->t.split = tjn_split;
    w->t.comm_free = tjn_comm_free;
    w->t.all_gather = tjn_all_gather;
    w->t.all_reduce = tjn_all_reduce;
    w->t.reduce_scatter = tjn_reduce_scatter;
    w->t.all_to_all = tjn_all_to_all;
    w->t.send_recv = tjn_send_recv;
    w->t.proc_allgather = tjn_proc_allgather;
    w->t.free = tjn_free;
    /* the world: one communicator per local GPU, world rank = tinyjax device */
    r = ncclGroupStart();
    for (l = 0; l < gpus; l++) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        c[l] = NULL;
        if ((ce = cudaSetDevice(first + l)) != cudaSuccess) {
            snprintf(err, en, "cudaSetDevice(%d): %s", first + l, cudaGetErrorString(ce));
            ri[l] = ncclUnhandledCudaError;
        } else ri[l] = r == ncclSuccess ? ncclCommInitRankConfig(&c[l], np * gpus, id, rank * gpus + l, &cfg) : r;
        if (ri[l] != ncclSuccess && ri[l] != ncclInProgress && bad < 0) bad = l;
    }
    r = ncclGroupEnd();
    for (l = 0; l < gpus; l++) {
        ncclResult_t s = r == ncclSuccess || r == ncclInProgress ? ri[l] : r;
        if (s == ncclSuccess || s == ncclInProgress) s = c[l] ? tjn_settle(c[l], ncclInProgress, timeout_s, &to) : ncclInvalidUsage;
        if (s != ncclSuccess && bad < 0) {
            bad = l;
            ri[l] = s;
        }
    }
    if (bad >= 0) {
        if (!err[0]) {
            tjn_why(why, sizeof why, c[bad], ri[bad], to, timeout_s);
            snprintf(err, en, "ncclCommInitRankConfig of process %d of %d, GPU %d (world rank %d of %d) failed: %s%s", rank, np, first + bad, rank * gpus + bad,
                     np * gpus, why, to ? "; did every process start, with the same TJ_COORD?" : "");
        }
        for (l = 0; l < gpus; l++)
            if (c[l]) ncclCommAbort(c[l]);
        tjn_free(&w->t);
        return NULL;
    }
    for (l = 0; l < gpus; l++) {
        if (!(w->world[l] = tjn_comm_make(w, c[l], first + l, rank * gpus + l, why, sizeof why))) {
            snprintf(err, en, "NCCL transport, GPU %d: %s", first + l, why);
            for (; l < gpus; l++) ncclCommAbort(c[l]);
            tjn_free(&w->t);
            return NULL;
        }
    }
    return &w->t;
}
#endif /* TJ_NCCL */
