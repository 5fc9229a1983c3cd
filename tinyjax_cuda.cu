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
 * so a mesh of N simulated devices shares one GPU (sharded programs without
 * collectives run; collectives are listed gaps: `test_cuda --coverage`).
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
 *   [11] CUDA backend: memory spaces, copies, sync
 *   [11] CUDA backend: dispatch (the per-op table, coverage) and constructor
 */
#define TINYJAX_IMPLEMENTATION
#include "tinyjax.h"

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

/* One mesh device's state: its own stream, cuBLAS handle, error slot and
   scratch, so the device threads of a mesh of simulated devices on one GPU
   never share a stream or a handle (item 3 of issue 17). Made on the
   device's first use. */
typedef struct {
    int device;                /* the CUDA device                            */
    int dev;                   /* the mesh device                            */
    cudaStream_t compute;      /* every kernel, cuBLAS call and copy of it   */
    cublasHandle_t blas;
    unsigned long long *d_errpos; /* first bad index position, on the device */
    unsigned long long *h_errpos; /* its pinned host mirror                  */
    void *h_csr, *d_csr;       /* scatter_add's index lists (host, device)   */
    size_t csr_cap;            /* bytes of each                              */
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
__device__ __forceinline__ T tjc_ld(const void *p, int dt, int64_t i) {
    switch (dt) {
    case TJ_F32: return (T)((const float *)p)[i];
    case TJ_BF16: return (T)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case TJ_I32: return (T)((const int32_t *)p)[i];
    default: return (T)((const double *)p)[i];
    }
}
/* the device twin of tj__st: bf16 rounds to nearest even, i32 saturates */
template <typename T>
__device__ __forceinline__ void tjc_st(void *p, int dt, int64_t i, T v) {
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
/* offset of row-major index i of dims[rank] in a view with strides st */
__device__ __forceinline__ int64_t tjc_offset(int64_t i, int rank, const int64_t *dim, const int64_t *st) {
    int64_t o = 0;
    for (int d = rank - 1; d >= 0; d--) {
        o += (i % dim[d]) * st[d];
        i /= dim[d];
    }
    return o;
}

/* float math in float, double math in double */
__device__ __forceinline__ float tjc_exp(float x) { return expf(x); }
__device__ __forceinline__ double tjc_exp(double x) { return exp(x); }
__device__ __forceinline__ float tjc_log(float x) { return logf(x); }
__device__ __forceinline__ double tjc_log(double x) { return log(x); }
__device__ __forceinline__ float tjc_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double tjc_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float tjc_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double tjc_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float tjc_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double tjc_pow(double x, double y) { return pow(x, y); }

/* The unary and binary elementwise ops, expanded from the header's formula
   tables (TJ__UNARY_OPS, TJ__BINARY_OPS): an op added there gets its CUDA
   kernel here with no edit. The formulas are the CPU's, evaluated with the
   same promotions (double constants), on T = float for f32/bf16 and double
   for f64/i32. Every op of the tables has a case; anything else is NaN. */
__device__ __forceinline__ double tjc_gelu_d(double a, double t) { return 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * TJ__GELU_C * (1.0 + 3.0 * 0.044715 * a * a); }
#define TJ__EXP(x) tjc_exp(x)
#define TJ__TANH(x) tjc_tanh(x)
#define tj__gelu_d(a, t) tjc_gelu_d(a, t)
#define TJC_UNARY_CASE(op, nm, expr, ...) \
    case TJ__OP_##op: return (T)(expr);
#define TJC_BINARY_CASE(op, nm, expr) \
    case TJ__OP_##op: return (T)(expr);
template <typename T>
__device__ __forceinline__ T tjc_unary(int op, T a, T s) {
    (void)s;
    switch (op) { TJ__UNARY_OPS(TJC_UNARY_CASE) }
    return (T)NAN;
}
template <typename T>
__device__ __forceinline__ T tjc_binary(int op, T a, T b) {
    switch (op) { TJ__BINARY_OPS(TJC_BINARY_CASE) }
    return (T)NAN;
}
#undef TJ__EXP
#undef TJ__TANH
#undef tj__gelu_d
#undef TJC_UNARY_CASE
#undef TJC_BINARY_CASE
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
    int rank, nin;
    int64_t n;                  /* output elements                         */
    int64_t dim[TJ_MAXDIM];     /* output dims                             */
    const void *in[3];
    int dt[3];
    int contig[3];              /* operand laid out exactly as the output  */
    int64_t st[3][TJ_MAXDIM];   /* operand strides per output axis         */
} tjc_ew;

template <typename T>
__global__ void tjc_k_elementwise(tjc_ew e, int op, T s, void *out, int odt) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < e.n; i += (int64_t)gridDim.x * blockDim.x) {
        T v[3] = {(T)0, (T)0, (T)0}, r;
        for (int j = 0; j < e.nin; j++) {
            int64_t o = e.contig[j] ? i : tjc_offset(i, e.rank, e.dim, e.st[j]);
            v[j] = tjc_ld<T>(e.in[j], e.dt[j], o);
        }
        if (op == TJ__OP_SELECT) r = v[0] != (T)0 ? v[1] : v[2];
        else if (op >= TJ__OP_ADD && op <= TJ__OP_NE) r = tjc_binary<T>(op, v[0], v[1]);
        else r = tjc_unary<T>(op, v[0], s);
        tjc_st<T>(out, odt, i, r);
    }
}

/* strided copy of a region (tj__copy_region / tj__k_copy) */
typedef struct {
    int rank, sdt, ddt, es;
    int64_t n, sbase, dbase;
    int64_t dim[TJ_MAXDIM], sst[TJ_MAXDIM], dst[TJ_MAXDIM];
} tjc_cp;

__global__ void tjc_k_copy(tjc_cp c, const void *src, void *dst) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c.n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t so = c.sbase, dof = c.dbase, r = i;
        for (int d = c.rank - 1; d >= 0; d--) {
            int64_t x = r % c.dim[d];
            r /= c.dim[d];
            so += x * c.sst[d];
            dof += x * c.dst[d];
        }
        if (c.sdt == c.ddt) tjc_move(dst, dof, src, so, c.es);
        else tjc_st<double>(dst, c.ddt, dof, tjc_ld<double>(src, c.sdt, so));
    }
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
__global__ void tjc_k_random(void *out, int dt, int64_t n, tjc_gidx g, uint64_t key, int normal) {
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

/* sum / max over named axes: one block per output element */
typedef struct {
    int nr, no;                 /* reduced / kept axis counts              */
    int64_t rn, on;             /* reduced / kept element counts           */
    int64_t rd[TJ_MAXDIM], rs[TJ_MAXDIM]; /* reduced dims, input strides    */
    int64_t od[TJ_MAXDIM], os[TJ_MAXDIM]; /* kept dims, input strides       */
} tjc_red;

template <typename T>
__global__ void tjc_k_reduce(tjc_red r, const void *in, int idt, void *out, int odt, int ismax) {
    __shared__ T sh[TJC_THREADS];
    for (int64_t o = blockIdx.x; o < r.on; o += gridDim.x) {
        int64_t ob = tjc_offset(o, r.no, r.od, r.os);
        T acc = ismax ? (T)(-INFINITY) : (T)0;
        for (int64_t j = threadIdx.x; j < r.rn; j += blockDim.x) {
            T v = tjc_ld<T>(in, idt, ob + tjc_offset(j, r.nr, r.rd, r.rs));
            acc = ismax ? tjc_maxnan(acc, v) : acc + v;
        }
        acc = tjc_block_reduce(acc, sh, ismax);
        if (threadIdx.x == 0) tjc_st<T>(out, odt, o, acc);
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
            T sum = 0, var = 0, mean, rs;
            for (j = threadIdx.x; j < d; j += blockDim.x) sum += tjc_ld<T>(in, idt, base + j * st);
            mean = tjc_block_reduce(sum, sh, 0) / (T)d;
            for (j = threadIdx.x; j < d; j += blockDim.x) {
                T x = tjc_ld<T>(in, idt, base + j * st) - mean;
                var += x * x;
            }
            rs = (T)1 / tjc_sqrt(tjc_block_reduce(var, sh, 0) / (T)d + eps);
            for (j = threadIdx.x; j < d; j += blockDim.x) tjc_st<T>(out, odt, base + j * st, (tjc_ld<T>(in, idt, base + j * st) - mean) * rs);
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
                T lse = m + tjc_log(s);
                for (j = threadIdx.x; j < d; j += blockDim.x) tjc_st<T>(out, odt, base + j * st, tjc_ld<T>(in, idt, base + j * st) - lse);
            }
        }
    }
}

/* cross_entropy per row: lse(z) - z[label]; a bad label records its row */
template <typename T>
__global__ void tjc_k_cross_entropy(const void *z, int zdt, const int32_t *lab, void *out, int odt, int64_t rows, int64_t d, int64_t st,
                                    unsigned long long *errpos) {
    __shared__ T sh[TJC_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = (r / st) * st * d + r % st, j;
        int32_t l = lab[r];
        T m = (T)(-INFINITY), s = 0;
        if (l < 0 || l >= d) { /* the whole block takes this branch */
            if (threadIdx.x == 0) atomicMin(errpos, (unsigned long long)r);
            continue;
        }
        for (j = threadIdx.x; j < d; j += blockDim.x) m = tjc_maxnan(m, tjc_ld<T>(z, zdt, base + j * st));
        m = tjc_block_reduce(m, sh, 1);
        for (j = threadIdx.x; j < d; j += blockDim.x) s += tjc_exp(tjc_ld<T>(z, zdt, base + j * st) - m);
        s = tjc_block_reduce(s, sh, 0);
        if (threadIdx.x == 0) tjc_st<T>(out, odt, r, m + tjc_log(s) - tjc_ld<T>(z, zdt, base + (int64_t)l * st));
    }
}

/* the row ops' gradients (tj__row): softmax_grad(y, g), layer_norm_grad(x, g),
   cross_entropy_grad(z, labels, g); one block per row */
template <typename T>
__global__ void tjc_k_row_grad(const void *x, int xdt, const int32_t *lab, const void *g, int gdt, void *out, int odt, int op, int64_t rows, int64_t d,
                               int64_t st, T eps, unsigned long long *errpos) {
    __shared__ T sh[TJC_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = (r / st) * st * d + r % st, j;
        if (op == TJ__OP_CROSS_ENTROPY_GRAD) {
            int32_t l = lab[r];
            T m = (T)(-INFINITY), s = 0, gr = tjc_ld<T>(g, gdt, r);
            if (l < 0 || l >= d) { /* the whole block takes this branch */
                if (threadIdx.x == 0) atomicMin(errpos, (unsigned long long)r);
                continue;
            }
            for (j = threadIdx.x; j < d; j += blockDim.x) m = tjc_maxnan(m, tjc_ld<T>(x, xdt, base + j * st));
            m = tjc_block_reduce(m, sh, 1);
            if (m == (T)(-INFINITY)) m = 0;
            for (j = threadIdx.x; j < d; j += blockDim.x) s += tjc_exp(tjc_ld<T>(x, xdt, base + j * st) - m);
            s = tjc_block_reduce(s, sh, 0);
            for (j = threadIdx.x; j < d; j += blockDim.x)
                tjc_st<T>(out, odt, base + j * st, gr * (tjc_exp(tjc_ld<T>(x, xdt, base + j * st) - m) / s - (T)(j == l)));
        } else if (op == TJ__OP_LAYER_NORM_GRAD) { /* dx = r (g - mean(g) - y mean(g y)) */
            T sum = 0, var = 0, mg = 0, mgy = 0, mean, rs;
            for (j = threadIdx.x; j < d; j += blockDim.x) sum += tjc_ld<T>(x, xdt, base + j * st);
            mean = tjc_block_reduce(sum, sh, 0) / (T)d;
            for (j = threadIdx.x; j < d; j += blockDim.x) {
                T v = tjc_ld<T>(x, xdt, base + j * st) - mean;
                var += v * v;
            }
            rs = (T)1 / tjc_sqrt(tjc_block_reduce(var, sh, 0) / (T)d + eps);
            for (j = threadIdx.x; j < d; j += blockDim.x) {
                T gv = tjc_ld<T>(g, gdt, base + j * st);
                mg += gv;
                mgy += gv * (tjc_ld<T>(x, xdt, base + j * st) - mean) * rs;
            }
            mg = tjc_block_reduce(mg, sh, 0) / (T)d;
            mgy = tjc_block_reduce(mgy, sh, 0) / (T)d;
            for (j = threadIdx.x; j < d; j += blockDim.x)
                tjc_st<T>(out, odt, base + j * st, rs * (tjc_ld<T>(g, gdt, base + j * st) - mg - (tjc_ld<T>(x, xdt, base + j * st) - mean) * rs * mgy));
        } else { /* softmax_grad: dx = y (g - sum(g y)) */
            T gy = 0;
            for (j = threadIdx.x; j < d; j += blockDim.x) gy += tjc_ld<T>(g, gdt, base + j * st) * tjc_ld<T>(x, xdt, base + j * st);
            gy = tjc_block_reduce(gy, sh, 0);
            for (j = threadIdx.x; j < d; j += blockDim.x)
                tjc_st<T>(out, odt, base + j * st, tjc_ld<T>(x, xdt, base + j * st) * (tjc_ld<T>(g, gdt, base + j * st) - gy));
        }
    }
}

/* take: x = [pre, V, post], idx = [ni] -> out = [pre, ni, post] */
__global__ void tjc_k_take(const void *x, void *out, int es, const int32_t *idx, int64_t pre, int64_t V, int64_t post, int64_t ni,
                           unsigned long long *errpos) {
    int64_t n = pre * ni * post;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t e = i % post, j = (i / post) % ni, p = i / (post * ni);
        int32_t v = idx[j];
        if (v < 0 || v >= V) {
            atomicMin(errpos, (unsigned long long)j);
            continue;
        }
        tjc_move(out, i, x, (p * V + v) * post + e, es);
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
   start[v+1]), a stable counting sort of the indices made on the host), and
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
/* one_hot: out[j, v] = idx[j] == v */
__global__ void tjc_k_one_hot(const int32_t *idx, void *out, int dt, int64_t n, int64_t V) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        tjc_st<double>(out, dt, i, idx[i / V] == i % V ? 1.0 : 0.0);
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
    int64_t ost[TJ_MAXDIM];
    int i, d, wide = k->ot.dt == TJ_F64, op = k->n->op;
    if (k->nin < 1 || k->nin > 3) return tjc_fail(k, "%d inputs (want 1 to 3)", k->nin);
    memset(&e, 0, sizeof e);
    e.rank = k->ot.rank;
    e.nin = k->nin;
    e.n = tj__numel(&k->ot);
    for (d = 0; d < e.rank; d++) e.dim[d] = k->ot.dim[d];
    tj__strides(&k->ot, ost);
    for (i = 0; i < k->nin; i++) {
        e.in[i] = k->in[i];
        e.dt[i] = k->it[i]->dt;
        tj__bstrides(k->it[i], &k->ot, e.st[i]);
        e.contig[i] = tj__numel(k->it[i]) == e.n;
        for (d = 0; d < e.rank; d++) e.contig[i] &= e.st[i][d] == ost[d];
        if (!(op == TJ__OP_SELECT && i == 0)) wide |= tjc_wide(k->it[i]->dt); /* the mask is only tested for zero */
    }
    if (wide)
        tjc_k_elementwise<double><<<tjc_blocks(e.n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(e, op, k->n->a.s, k->out, k->ot.dt);
    else
        tjc_k_elementwise<float><<<tjc_blocks(e.n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(e, op, (float)k->n->a.s, k->out, k->ot.dt);
    TJC_LAUNCHED(k, "tjc_k_elementwise");
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
    tjc_k_copy<<<tjc_blocks(c.n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(c, src, dst);
    TJC_LAUNCHED(k, "tjc_k_copy");
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
    tjc_k_copy<<<tjc_blocks(c.n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(c, k->in[0], k->out);
    TJC_LAUNCHED(k, "tjc_k_copy");
    return 0;
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
    tjc_k_random<<<tjc_blocks(n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(k->out, k->ot.dt, n, g, k->n->a.key, k->n->op == TJ__OP_NORMAL);
    TJC_LAUNCHED(k, "tjc_k_random");
    return 0;
}
/* tj__k_reduce: split the input's axes into reduced and kept, as the CPU does */
static int tjc_reduce(tjc_state *s, tj__kern *k) {
    const tj__type *it = k->it[0];
    int64_t ist[TJ_MAXDIM];
    tjc_red r;
    int i, j, red, threads = 32, ismax = k->n->op == TJ__OP_MAXR;
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
    while (threads < r.rn && threads < TJC_THREADS) threads *= 2;
    if (tjc_wide(it->dt) || k->ot.dt == TJ_F64)
        tjc_k_reduce<double><<<tjc_grid(r.on), threads, 0, s->compute>>>(r, k->in[0], it->dt, k->out, k->ot.dt, ismax);
    else
        tjc_k_reduce<float><<<tjc_grid(r.on), threads, 0, s->compute>>>(r, k->in[0], it->dt, k->out, k->ot.dt, ismax);
    TJC_LAUNCHED(k, "tjc_k_reduce");
    return 0;
}
/* tj__k_dot through cuBLAS. Row-major C[M,N] = A[M,K] B[K,N] is column-major
   C^T[N,M] = B^T A^T, so cuBLAS gets (b, a) with m = N, n = M. a is [M,K]
   (lda K) or, with trans_a, [K,M] (lda M); b is [K,N] (ldb N) or, with
   trans_b, [N,K] (ldb K). */
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
            TJC_BLAS(k, "cublasSgemmStridedBatched",
                     cublasSgemmStridedBatched(s->blas, opb, opa, N, M, K, &one, (const float *)k->in[1], ldb, sb, (const float *)k->in[0], lda, sa, &zero,
                                               (float *)k->out, N, sc, batch));
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
/* after a kernel that checks indices: wait for it, read the first bad
   position, and word the error as the CPU kernel does */
static int tjc_index_check(tjc_state *s, tj__kern *k, const int32_t *idx, int64_t bound) {
    unsigned long long pos;
    int32_t v = 0;
    TJC_CUDA(k, cudaMemcpyAsync(s->h_errpos, s->d_errpos, sizeof *s->d_errpos, cudaMemcpyDeviceToHost, s->compute));
    TJC_CUDA(k, cudaStreamSynchronize(s->compute));
    pos = *s->h_errpos;
    if (pos == TJC_NOERR) return 0;
    TJC_CUDA(k, cudaMemcpy(&v, idx + pos, sizeof v, cudaMemcpyDeviceToHost));
    if (k->err && !k->err[0]) {
        if (k->n->op == TJ__OP_CROSS_ENTROPY || k->n->op == TJ__OP_CROSS_ENTROPY_GRAD)
            snprintf(k->err, TJ__MSG, "%s: label %d at position %lld is out of range [0, %lld) (at %s:%d)", tj__opname(k->n->op), (int)v, (long long)pos,
                     (long long)bound, tj__base(k->n->file), k->n->line);
        else
            snprintf(k->err, TJ__MSG, "%s: index %d at position %lld is out of range [0, %lld) for axis '%s' (at %s:%d)", tj__opname(k->n->op), (int)v,
                     (long long)pos, (long long)bound, tj__name(k->ctx, k->n->a.axis), tj__base(k->n->file), k->n->line);
    }
    return 1;
}
/* scatter_add: the indices come to the host (the CPU's range check, word
   for word), a stable counting sort groups their positions by value, and
   the kernel sums each output element's rows in that order */
static int tjc_scatter_add(tjc_state *s, tj__kern *k, const int32_t *idx, int64_t pre, int64_t V, int64_t post, int64_t ni) {
    size_t need = sizeof(int64_t) * (size_t)(V + 1 + ni) + sizeof(int32_t) * (size_t)ni;
    int64_t *start, *order, j;
    int32_t *hidx;
    if (need > s->csr_cap) {
        void *h = TJ_REALLOC(s->h_csr, need), *d = NULL;
        if (!h) return tjc_fail(k, "out of host memory for %zu bytes of index lists", need);
        s->h_csr = h;
        if (s->d_csr) TJC_CUDA(k, cudaFree(s->d_csr));
        s->d_csr = NULL;
        s->csr_cap = 0;
        TJC_CUDA(k, cudaMalloc(&d, need));
        s->d_csr = d;
        s->csr_cap = need;
    }
    start = (int64_t *)s->h_csr;
    order = start + V + 1;
    hidx = (int32_t *)(order + ni);
    TJC_CUDA(k, cudaMemcpyAsync(hidx, idx, sizeof(int32_t) * (size_t)ni, cudaMemcpyDeviceToHost, s->compute));
    TJC_CUDA(k, cudaStreamSynchronize(s->compute));
    for (j = 0; j < ni; j++)
        if (hidx[j] < 0 || hidx[j] >= V) {
            if (k->err && !k->err[0])
                snprintf(k->err, TJ__MSG, "%s: index %d at position %lld is out of range [0, %lld) for axis '%s' (at %s:%d)", tj__opname(k->n->op),
                         (int)hidx[j], (long long)j, (long long)V, tj__name(k->ctx, k->n->a.axis), tj__base(k->n->file), k->n->line);
            return 1;
        }
    memset(start, 0, sizeof(int64_t) * (size_t)(V + 1));
    for (j = 0; j < ni; j++) start[hidx[j] + 1]++;
    for (j = 0; j < V; j++) start[j + 1] += start[j];
    { /* positions in increasing j within each value: order[start[v] + r] */
        int64_t *fill = (int64_t *)TJ_MALLOC(sizeof(int64_t) * (size_t)(V ? V : 1));
        if (!fill) return tjc_fail(k, "out of host memory");
        memcpy(fill, start, sizeof(int64_t) * (size_t)V);
        for (j = 0; j < ni; j++) order[fill[hidx[j]]++] = j;
        TJ_FREE(fill);
    }
    /* pageable source: the call returns once the bytes are staged, so the
       host buffer may be reused by the next scatter_add */
    TJC_CUDA(k, cudaMemcpyAsync(s->d_csr, start, sizeof(int64_t) * (size_t)(V + 1 + ni), cudaMemcpyHostToDevice, s->compute));
    {
        const int64_t *ds = (const int64_t *)s->d_csr, *dord = ds + V + 1;
        int64_t n = pre * V * post;
        tjc_k_scatter_add<<<tjc_blocks(n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(k->in[0], k->it[0]->dt, k->out, k->ot.dt, ds, dord, pre, V, post, ni);
        TJC_LAUNCHED(k, "tjc_k_scatter_add");
    }
    return 0;
}
/* tj__k_take: take and scatter_add */
static int tjc_take(tjc_state *s, tj__kern *k) {
    const tj__type *xt = k->n->op == TJ__OP_TAKE ? k->it[0] : &k->ot;
    int ax = tj__axis_index(xt, k->n->a.axis);
    int64_t pre, V, post, ni = tj__numel(k->it[1]), n;
    const int32_t *idx = (const int32_t *)k->in[1];
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__ppv(xt, ax, &pre, &V, &post);
    n = pre * ni * post;
    if (k->n->op == TJ__OP_TAKE) {
        if (k->it[0]->dt != k->ot.dt) return tjc_fail(k, "operand and result dtypes differ");
        TJC_CUDA(k, cudaMemsetAsync(s->d_errpos, 0xff, sizeof *s->d_errpos, s->compute));
        tjc_k_take<<<tjc_blocks(n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>(k->in[0], k->out, (int)tj_dtype_size(k->ot.dt), idx, pre, V, post, ni,
                                                                             s->d_errpos);
        TJC_LAUNCHED(k, "tjc_k_take");
        return tjc_index_check(s, k, idx, V);
    }
    return tjc_scatter_add(s, k, idx, pre, V, post, ni);
}
/* tj__k_one_hot */
static int tjc_one_hot(tjc_state *s, tj__kern *k) {
    int64_t n = tj__numel(&k->ot), V = k->ot.dim[k->ot.rank - 1];
    tjc_k_one_hot<<<tjc_blocks(n, TJC_THREADS), TJC_THREADS, 0, s->compute>>>((const int32_t *)k->in[0], k->out, k->ot.dt, n, V);
    TJC_LAUNCHED(k, "tjc_k_one_hot");
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
/* tj__k_rowop: softmax, log_softmax, layer_norm */
static int tjc_rowop(tjc_state *s, tj__kern *k) {
    const tj__type *t = k->it[0];
    int ax = tj__axis_index(t, k->n->a.axis);
    int64_t st[TJ_MAXDIM], d, rows;
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__strides(t, st);
    d = t->dim[ax];
    rows = tj__numel(t) / d;
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
    int64_t st[TJ_MAXDIM], d, rows;
    const int32_t *lab = (const int32_t *)k->in[1];
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__strides(t, st);
    d = t->dim[ax];
    rows = tj__numel(t) / d;
    TJC_CUDA(k, cudaMemsetAsync(s->d_errpos, 0xff, sizeof *s->d_errpos, s->compute));
    if (t->dt == TJ_F64 || k->ot.dt == TJ_F64)
        tjc_k_cross_entropy<double><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, lab, k->out, k->ot.dt, rows, d, st[ax], s->d_errpos);
    else
        tjc_k_cross_entropy<float><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, lab, k->out, k->ot.dt, rows, d, st[ax], s->d_errpos);
    TJC_LAUNCHED(k, "tjc_k_cross_entropy");
    return tjc_index_check(s, k, lab, d);
}

/* tj__k_rowop: softmax_grad, layer_norm_grad, cross_entropy_grad */
static int tjc_row_grad(tjc_state *s, tj__kern *k) {
    const tj__type *t = k->it[0];
    int ax = tj__axis_index(t, k->n->a.axis), ce = k->n->op == TJ__OP_CROSS_ENTROPY_GRAD, gi = k->nin - 1;
    int64_t st[TJ_MAXDIM], d, rows;
    const int32_t *lab = ce ? (const int32_t *)k->in[1] : NULL;
    if (ax < 0) return tjc_fail(k, "axis not found");
    tj__strides(t, st);
    d = t->dim[ax];
    rows = tj__numel(t) / d;
    TJC_CUDA(k, cudaMemsetAsync(s->d_errpos, 0xff, sizeof *s->d_errpos, s->compute));
    if (t->dt == TJ_F64 || k->ot.dt == TJ_F64)
        tjc_k_row_grad<double><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, lab, k->in[gi], k->it[gi]->dt, k->out, k->ot.dt, k->n->op, rows,
                                                                             d, st[ax], k->n->a.s, s->d_errpos);
    else
        tjc_k_row_grad<float><<<tjc_grid(rows), TJC_THREADS, 0, s->compute>>>(k->in[0], t->dt, lab, k->in[gi], k->it[gi]->dt, k->out, k->ot.dt, k->n->op, rows,
                                                                            d, st[ax], (float)k->n->a.s, s->d_errpos);
    TJC_LAUNCHED(k, "tjc_k_row_grad");
    return ce ? tjc_index_check(s, k, lab, d) : 0;
}

// ==== [11] CUDA backend: memory spaces, copies, sync =======================
/* TJ_SPACE_DEVICE is cudaMalloc memory, TJ_SPACE_HOST pinned host memory
   (cudaHostAlloc, the offload target), TJ_SPACE_USER the caller's pageable
   memory. A copy on a mesh device (dev >= 0: the runner's staged slices,
   carries, offload and fetch) is queued on that device's compute stream
   after its kernels; a copy with dev -1 (arrays in and out) waits for every
   device's stream, copies, and waits for the bytes to land. */

static void tjc_pending(char *slot, size_t n, const char *what, cudaError_t e) {
    if (!slot[0]) snprintf(slot, n, "cuda backend: %s failed: %s", what, cudaGetErrorString(e));
}
/* wait for every mesh device's stream; the first failure goes to be->pending */
static int tjc_sync_all(tjc_backend *be) {
    int i, bad = 0;
    for (i = 0; i < TJ_MAXDEV; i++) {
        cudaError_t e;
        if (!be->per[i]) continue;
        if ((e = cudaStreamSynchronize(be->per[i]->compute)) != cudaSuccess) {
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
    for (i = dev < 0 ? 0 : dev; i < TJ_MAXDEV && (dev < 0 || i == dev); i++) {
        tjc_state *s = be->per[i];
        cudaError_t e;
        if (!s) continue;
        if ((e = cudaStreamSynchronize(s->compute)) != cudaSuccess) tjc_pending(s->pending, sizeof s->pending, "a kernel (seen at cudaStreamSynchronize)", e);
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

// ==== [11] CUDA backend: dispatch and constructor ==========================

/* ---- the per-op table ----
   Every op of the op table (TJ__UNARY_OPS, TJ__BINARY_OPS, TJ__OTHER_OPS in
   tinyjax.h [3]) gets one entry here, explicitly: its launcher, or what else
   runs it (the runner, or nothing: views), or why it has no CUDA path yet.
   There is no default: an op added to the header and not here has no entry
   (tjc_path returns 0), which tj_cuda_op_coverage lists and
   `test_cuda --coverage` (no GPU needed, run by build.sh) fails on. */
typedef int (*tjc_launch_fn)(tjc_state *s, tj__kern *k);
enum { TJC_NONE = 0, TJC_KERNEL, TJC_RUNNER, TJC_VIEW, TJC_GAP };

/* tj__k_axis_index: this device's rank along the mesh axes */
static int tjc_axis_index(tjc_state *s, tj__kern *k) {
    tjc_k_fill<<<1, 1, 0, s->compute>>>(k->out, TJ_I32, 1, (double)tj__mesh_rank(k->ctx, k->dev, (unsigned)k->n->a.index));
    TJC_LAUNCHED(k, "tjc_k_fill");
    return 0;
}
/* tj__k_shard_slice: this device's block of a replicated value along one axis */
static int tjc_shard_slice(tjc_state *s, tj__kern *k) {
    int64_t ist[TJ_MAXDIM];
    int ax = tj__axis_index(&k->ot, k->n->a.axis), me = tj__mesh_rank(k->ctx, k->dev, (unsigned)k->n->a.index);
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
    const struct tj__cvjp *cv = &k->ctx->cvjps[k->n->a.index];
    for (int j = 0; j < cv->nout; j++)
        TJC_CUDA(k, cudaMemcpyAsync(k->pout[j], k->in[cv->nin + j], (size_t)tj__bytes(&k->n->proj[j]->lt), cudaMemcpyDeviceToDevice, s->compute));
    return 0;
}
/* the kind of CUDA path op has; *fn its launcher (TJC_KERNEL), *why the
   reason (TJC_GAP) */
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
    case TJ__OP_SUM: case TJ__OP_MAXR: TJC_K(tjc_reduce);
    case TJ__OP_DOT: TJC_K(tjc_dot);
    case TJ__OP_RELAYOUT: case TJ__OP_COPY: TJC_K(tjc_copy_op);
    case TJ__OP_SLICE: TJC_K(tjc_slice);
    case TJ__OP_CONCAT: TJC_K(tjc_concat);
    case TJ__OP_PAD: TJC_K(tjc_pad);
    case TJ__OP_TAKE: case TJ__OP_SCATTER_ADD: TJC_K(tjc_take);
    case TJ__OP_ONE_HOT: TJC_K(tjc_one_hot);
    case TJ__OP_CAUSAL: TJC_K(tjc_causal);
    case TJ__OP_SOFTMAX: case TJ__OP_LOG_SOFTMAX: case TJ__OP_LAYER_NORM: TJC_K(tjc_rowop);
    case TJ__OP_CROSS_ENTROPY: TJC_K(tjc_cross_entropy);
    case TJ__OP_SOFTMAX_GRAD: case TJ__OP_LAYER_NORM_GRAD: case TJ__OP_CROSS_ENTROPY_GRAD: TJC_K(tjc_row_grad);
    case TJ__OP_SHARD_SLICE: TJC_K(tjc_shard_slice);
    case TJ__OP_AXIS_INDEX: TJC_K(tjc_axis_index);
    case TJ__OP_CUSTOM: TJC_K(tjc_custom);
    case TJ__OP_CUSTOM_VJP: TJC_K(tjc_custom_vjp);
    /* the runner runs these with backend copies and backend runs of the nodes inside (tj__k_scan, tj__k_memcpy) */
    case TJ__OP_SCAN: case TJ__OP_TO_HOST: case TJ__OP_TO_DEVICE: return TJC_RUNNER;
    /* arguments, projections and views own no work (the runner skips them) */
    case TJ__OP_PARAM: case TJ__OP_PROJ: case TJ__OP_RESHAPE: case TJ__OP_STOP_GRADIENT: case TJ__OP_NAME: case TJ__OP_PVARY: return TJC_VIEW;
    /* collectives: the CPU kernels pack host buffers for the transport; the
       simulated devices of one GPU have their own streams now, but the
       device-side pack/unpack and a transport on device buffers are missing */
    case TJ__OP_ALL_GATHER: case TJ__OP_PSUM: case TJ__OP_REDUCE_SCATTER: case TJ__OP_ALL_TO_ALL: case TJ__OP_PPERMUTE: case TJ__OP_PMAX:
        *why = "collective: no CUDA path yet (simulated devices on one GPU need device-side pack/unpack and a transport on device buffers)";
        return TJC_GAP;
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
        how = kind == TJC_KERNEL ? "kernel" : kind == TJC_RUNNER ? "runner" : kind == TJC_VIEW ? "view (no work)" : kind == TJC_GAP ? why : "NO CUDA PATH";
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
    if (s->pending[0]) { /* an error the interface could not return earlier */
        if (k->err && !k->err[0]) snprintf(k->err, TJ__MSG, "%.511s (reported at op '%s', %s:%d)", s->pending, tj__opname(k->n->op), tj__base(k->n->file), k->n->line);
        s->pending[0] = 0;
        return 1;
    }
    if ((e = cudaSetDevice(s->device)) != cudaSuccess) return tjc_fail(k, "cudaSetDevice(%d) failed: %s", s->device, cudaGetErrorString(e));
    if (k->n->members) return tjc_fail(k, "a fused group reached the CUDA backend, which runs one node per kernel (fused_groups is 0)");
    kind = tjc_path(k->n->op, &fn, &why);
    if (kind == TJC_KERNEL && fn) return fn(s, k);
    if (kind == TJC_VIEW) return 0;
    if (kind == TJC_RUNNER) return tjc_fail(k, "the runner runs this op itself (tj__k_scan / tj__k_memcpy); it should not reach the backend");
    if (kind == TJC_GAP) return tjc_fail(k, "%s", why);
    return tjc_unsupported(k);
}

static void tjc_state_free(tjc_state *s) {
    if (!s) return;
    if (s->compute) cudaStreamSynchronize(s->compute);
    if (s->blas) cublasDestroy(s->blas);
    if (s->d_errpos) cudaFree(s->d_errpos);
    if (s->h_errpos) cudaFreeHost(s->h_errpos);
    if (s->d_csr) cudaFree(s->d_csr);
    TJ_FREE(s->h_csr);
    if (s->compute) cudaStreamDestroy(s->compute);
    TJ_FREE(s);
}
/* mesh device dev's state, made on first use; NULL with a reason in err */
static tjc_state *tjc_state_of(tjc_backend *be, int dev, char *err, size_t errlen) {
    tjc_state *s;
    cudaError_t e;
    cublasStatus_t bs;
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
    TJC_INIT(cudaStreamCreateWithFlags(&s->compute, cudaStreamNonBlocking));
    TJC_INIT(cudaMalloc((void **)&s->d_errpos, sizeof *s->d_errpos));
    TJC_INIT(cudaHostAlloc((void **)&s->h_errpos, sizeof *s->h_errpos, cudaHostAllocDefault));
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
    be = (tjc_backend *)tj__calloc(sizeof *be);
    if (!be) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    be->b.state = be;
    be->device = device;
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
    return &be->b;
}
