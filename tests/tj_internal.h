/* tj_internal.h — the implementation's insides that tests look at, as plain
 * functions.
 *
 * The test programs link one compiled copy of the library (tests/tj_impl.c;
 * build.sh: build/o2/tj_impl.o, build/asan/tj_impl.o) instead of compiling
 * its implementation each. What they check beyond the public API (an
 * array's per-device buffers, the op table, the matmul kernel, the JSON
 * reader, the string parsers...) is `static` in tinyjax.h, so it is
 * reached through these thin wrappers. The header's STB convention again:
 * this file declares them; the translation unit that holds the library's
 * implementation defines TJT_INTERNAL_IMPLEMENTATION before including it to
 * define them there, where the statics and the struct layouts are visible.
 * tests/tj_impl.c does; so do the two programs that compile the
 * implementation themselves: the fuzz targets built with clang
 * (tests/fuzz/tjf_common.h, README.md there) and test_mpi.c's mpicc build
 * (its library comes from the demo it includes). Include after tinyjax.h. */
#ifndef TJ_INTERNAL_H
#define TJ_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* element i of a buffer of dtype dt, through double (tj__ld, tj__st) */
double tjt_ld(const void *p, tj_dtype dt, int64_t i);
void tjt_st(void *p, tj_dtype dt, int64_t i, double v);

/* an array's devices, device d's buffer and its size, axis r's name and size */
int tjt_array_ndev(const tj_array *a);
void *tjt_array_data(const tj_array *a, int d);
int64_t tjt_array_local_bytes(const tj_array *a);
const char *tjt_array_axis(const tj_array *a, int r);
int64_t tjt_array_dim_at(const tj_array *a, int r);
/* element k of device d's buffer of a, read and written through the backend's
   copies (a device buffer need not be host memory: TJ_BACKEND=devsim) */
double tjt_array_get(const tj_array *a, int d, int64_t k);
void tjt_array_set(tj_array *a, int d, int64_t k, double v);

/* the backend a context runs on (NULL: the CPU backend) */
tj_backend *tjt_ctx_backend(const tj_ctx *ctx);
/* a program's context and graph; a graph's nodes: their op and body (scan) */
tj_ctx *tjt_prog_ctx(const tj_prog *p);
tj_graph *tjt_prog_graph(const tj_prog *p);
int tjt_graph_size(const tj_graph *g);
int tjt_graph_op(const tj_graph *g, int i);
tj_graph *tjt_graph_sub(const tj_graph *g, int i);

/* the op table: how many ops, op k's name */
int tjt_nops(void);
const char *tjt_opname(int op);

/* the number of elements of a shape string ("a=2 b=3"), -1 and ctx's error
   if it does not parse (tj__parse_shape) */
int64_t tjt_shape_numel(tj_ctx *ctx, const char *shape);
/* n rounded up to the planner's buffer alignment (tj__align) */
int64_t tjt_align(int64_t n);

/* the f32 matmul kernel, C = op(A) op(B) (+ C); its double-accumulating
   reference; the path it picked ("avx512", ...); join its thread pool */
void tjt_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc, int acc, int nth);
void tjt_sgemm_ref(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc, int acc);
const char *tjt_sgemm_path(void);
void tjt_sgemm_shutdown(void);
/* the bf16 matmul kernel (bf16 operands as uint16_t, f32 C); the path it
   picks ("avx512bf16" with vdpbf16ps, else "<f32 path> (bf16 widened)");
   force = 1 makes it widen to f32 even where vdpbf16ps exists (0 undoes);
   whether the CPU has vdpbf16ps (asked through cpuid here, separately) */
void tjt_bgemm(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb, float *C, int ldc, int acc, int nth);
/* nseg products sharing B (the collective matmul's): bf16 operands are uint16_t */
void tjt_gemm_segs(int bf16, int ta, int tb, int nseg, int M, int N, int K, const void *const *As, int lda, const void *B, int ldb, float *const *Cs, int ldc, int acc, int nth);
const char *tjt_bgemm_path(void);
void tjt_bgemm_force_f32(int force);
/* attention's backward: 1 = dq summed in the dk/dv pass, 2 = in a pass of
   its own, whatever the batch rows and threads; 0 = as the kernel picks */
void tjt_attn_passes(int n);
int tjt_cpu_has_avx512bf16(void);
/* f32 -> bf16 over n values, as tj_f32_to_bf16 */
void tjt_f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n);
/* bytes of one thread's matmul pack buffer in a dot's planned workspace;
   how many times so far the matmul packed into a buffer of its own, outside
   any plan (direct calls, threads past the planned ones) */
int64_t tjt_gemm_pack_bytes(void);
long tjt_pack_unplanned(void);

/* a parsed safetensors file's data section: [*begin, *end) of its bytes */
void tjt_st_data_section(const tj_safetensors *st, const unsigned char **begin, const unsigned char **end);

/* the string parsers, as the library calls them (the fuzz targets,
   tests/fuzz/fuzz_parsers.c). Each returns 0, or -1 with ctx's error set
   (its message starts with `what`). A named shape of dtype dt ("a=2 b=3"):
   its rank and its axes' sizes (dims: TJ_MAXDIM of them) (tj__parse_shape); */
int tjt_parse_shape(tj_ctx *ctx, const char *shape, tj_dtype dt, int *rank, int64_t *dims, const char *what);
/* an axis list ("a b" or "a,b") into at most max name ids: how many, or -1
   (tj__parse_names); */
int tjt_parse_names(tj_ctx *ctx, const char *names, int *ids, int max, const char *what);
/* a partition spec ("embed:data batch:data+model"; strict = 1) or logical
   rules (strict = 0) for a value of the f32 named shape `shape`: per axis,
   the bits of the mesh axes it is split over, into sh (tj__parse_spec) */
int tjt_parse_spec(tj_ctx *ctx, const char *spec, const char *shape, uint8_t *sh, int strict, const char *what);

/* The library's allocation hooks (TJ_MALLOC, TJ_REALLOC, TJ_FREE): every
   allocation it makes calls m, r and f from here on (malloc, realloc and
   free until then). Set them before the library's first allocation and
   keep them: a block goes back to the hooks it came from. Defined by
   tests/tj_impl.c (not where a program compiles the implementation
   itself: it would define TJ_MALLOC there). */
void tjt_set_alloc(void *(*m)(size_t), void *(*r)(void *, size_t), void (*f)(void *));

#ifdef __cplusplus
}
#endif
#endif /* TJ_INTERNAL_H */

#if defined(TJT_INTERNAL_IMPLEMENTATION) && !defined(TJT_INTERNAL_IMPLEMENTATION_DONE)
#define TJT_INTERNAL_IMPLEMENTATION_DONE
#ifndef TINYJAX_IMPLEMENTATION_DONE
#error "tj_internal.h: TJT_INTERNAL_IMPLEMENTATION needs tinyjax.h's implementation (TINYJAX_IMPLEMENTATION) earlier in this file"
#endif
double tjt_ld(const void *p, tj_dtype dt, int64_t i) { return tj__ld(p, dt, i); }
void tjt_st(void *p, tj_dtype dt, int64_t i, double v) { tj__st(p, dt, i, v); }
int tjt_array_ndev(const tj_array *a) { return a->ndev; }
void *tjt_array_data(const tj_array *a, int d) { return a->data[d]; }
int64_t tjt_array_local_bytes(const tj_array *a) { return a->local_bytes; }
const char *tjt_array_axis(const tj_array *a, int r) { return tj__name(a->ctx, a->t.ax[r]); }
int64_t tjt_array_dim_at(const tj_array *a, int r) { return a->t.dim[r]; }
tj_backend *tjt_ctx_backend(const tj_ctx *ctx) { return ctx->backend; }
double tjt_array_get(const tj_array *a, int d, int64_t k) {
    char b[8];
    size_t es = tj_dtype_size(a->t.dt);
    tj__mem_copy(a->ctx, b, TJ_SPACE_USER, (const char *)a->data[d] + (size_t)k * es, TJ_SPACE_DEVICE, (int64_t)es);
    return tj__ld(b, a->t.dt, 0);
}
void tjt_array_set(tj_array *a, int d, int64_t k, double v) {
    char b[8];
    size_t es = tj_dtype_size(a->t.dt);
    tj__st(b, a->t.dt, 0, v);
    tj__mem_copy(a->ctx, (char *)a->data[d] + (size_t)k * es, TJ_SPACE_DEVICE, b, TJ_SPACE_USER, (int64_t)es);
}
tj_ctx *tjt_prog_ctx(const tj_prog *p) { return p->ctx; }
tj_graph *tjt_prog_graph(const tj_prog *p) { return p->g; }
int tjt_graph_size(const tj_graph *g) { return g->n; }
int tjt_graph_op(const tj_graph *g, int i) { return g->nodes[i]->op; }
tj_graph *tjt_graph_sub(const tj_graph *g, int i) { return g->nodes[i]->sub; }
int tjt_nops(void) { return TJ__NOPS; }
const char *tjt_opname(int op) { return tj__opname(op); }
int64_t tjt_shape_numel(tj_ctx *ctx, const char *shape) {
    tj__type t;
    return tj__parse_shape(ctx, shape, TJ_F64, &t, 0, "tjt_shape_numel", __FILE__, __LINE__) ? -1 : tj__numel(&t);
}
int64_t tjt_align(int64_t n) { return tj__align(n); }
void tjt_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc, int acc, int nth) {
    tj__sgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, nth);
}
void tjt_sgemm_ref(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc, int acc) {
    tj__sgemm_ref(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc);
}
const char *tjt_sgemm_path(void) { return tj__sgemm_path(); }
void tjt_sgemm_shutdown(void) { tj__sgemm_shutdown(); }
void tjt_bgemm(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb, float *C, int ldc, int acc, int nth) {
    tj__bgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, nth);
}
const char *tjt_bgemm_path(void) { return tj__bgemm_path(); }
void tjt_gemm_segs(int bf16, int ta, int tb, int nseg, int M, int N, int K, const void *const *As, int lda, const void *B, int ldb, float *const *Cs, int ldc, int acc, int nth) {
    tj__gemm_segs(bf16, ta, tb, nseg, M, N, K, As, lda, B, ldb, Cs, ldc, acc, nth, NULL, 0);
}
void tjt_bgemm_force_f32(int force) { tj__bgemm_force_f32 = force; }
void tjt_attn_passes(int n) { tj__attn_passes = n; }
int tjt_cpu_has_avx512bf16(void) {
#if TJ__X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1u);
#else
    return 0;
#endif
}
void tjt_f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n) { tj__f32_to_bf16_n(src, dst, n); }
int64_t tjt_gemm_pack_bytes(void) { return tj__gemm_pack_bytes(); }
long tjt_pack_unplanned(void) {
#if defined(__GNUC__)
    return __atomic_load_n(&tj__pack_uses, __ATOMIC_RELAXED);
#else
    return tj__pack_uses;
#endif
}
void tjt_st_data_section(const tj_safetensors *st, const unsigned char **begin, const unsigned char **end) {
    *begin = st->buf + st->data_start;
    *end = st->buf + st->len;
}
int tjt_parse_shape(tj_ctx *ctx, const char *shape, tj_dtype dt, int *rank, int64_t *dims, const char *what) {
    tj__type t;
    int r = tj__parse_shape(ctx, shape, dt, &t, 0, what, NULL, 0), k;
    *rank = r ? 0 : t.rank;
    for (k = 0; k < *rank; k++) dims[k] = t.dim[k];
    return r;
}
int tjt_parse_names(tj_ctx *ctx, const char *names, int *ids, int max, const char *what) { return tj__parse_names(ctx, names, ids, max, what, NULL, 0); }
int tjt_parse_spec(tj_ctx *ctx, const char *spec, const char *shape, uint8_t *sh, int strict, const char *what) {
    tj__type t;
    if (tj__parse_shape(ctx, shape, TJ_F32, &t, 0, what, NULL, 0)) return -1;
    return tj__parse_spec(ctx, spec, &t, sh, strict, what, NULL, 0);
}
#endif /* TJT_INTERNAL_IMPLEMENTATION */
