/* tinyjax.h — JAX's core ideas in one readable C header.            MIT license
 *
 * Trace a C function into a graph of named-axis tensors, differentiate it,
 * choose what the backward pass saves or recomputes, plan every buffer, and run
 * it on the CPU (or on CUDA with tinyjax_cuda.cu).
 *
 * Do this in exactly one C or C++ file:
 *     #define TINYJAX_IMPLEMENTATION
 *     #include "tinyjax.h"
 * and just #include "tinyjax.h" everywhere else. Link with -lm -pthread.
 *
 * Configuration macros (define before the implementation include):
 *     TJ_STATIC          make every function static to that file
 *     TJ_MPI             multi-process runs through MPI (build with mpicc;
 *                        see tj_distributed_init)
 *     TJ_MALLOC/TJ_REALLOC/TJ_FREE   allocation hooks (all three or none)
 *
 * ---------------------------------------------------------------- manual ---
 * Values have a dtype (f32, bf16, i32, f64), and a shape whose axes have
 * names: "batch=4 embed=128". Ops refer to axes by name:
 *     tj_dot(x, w, "embed")      contract "embed"; axes both share are batch
 *     tj_sum(x, "pos")           reduce over "pos"
 *     tj_add(x, b)               broadcast by name: b's axes ⊆ result's axes
 * Two axes with the same name must have the same size.
 *
 * A traced function receives a graph and a tree of input values, and fills a
 * tree of outputs. tj_jit traces it once and compiles it (schedule + memory
 * plan); tj_run calls it on arrays as often as you like:
 *
 *   static void loss_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
 *       tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), y = tj_tree_v(in, "y");
 *       tj_v h = tj_tanh(tj_dot(x, w, "in"));             // (batch, out)
 *       tj_v d = tj_sub(h, y);
 *       tj_v loss = tj_mean(tj_mul(d, d), "batch out");   // scalar
 *       tj_v gw;  tj_grad(loss, 1, &w, &gw);              // d loss / d w
 *       tj_tree_set_v(out, "loss", loss);  tj_tree_set_v(out, "gw", gw);
 *       (void)g; (void)u;
 *   }
 *   ...
 *   tj_ctx *ctx = tj_ctx_new();
 *   tj_tree *in = tj_tree_new(ctx);
 *   tj_tree_set_array(in, "x", tj_full(ctx, TJ_F32, "batch=8 in=4", 0.5));
 *   ...
 *   tj_prog *p = tj_jit(ctx, "loss", loss_fn, NULL, in, NULL);
 *   tj_tree *out = tj_tree_new(ctx);
 *   if (!p || tj_run(p, in, out)) fprintf(stderr, "%s\n", tj_error(ctx));
 *
 * Errors: no function exits or aborts on a caller's mistake. A failing op
 * returns NULL and records a message naming the op, the axes and the caller's
 * file:line; later ops given NULL return NULL quietly, so the first message
 * survives and tj_jit reports it. Other calls return a tj_status.
 * Every pointer argument is checked: a NULL one is TJ_ERR_ARG with a message
 * naming the function and the argument, recorded in the context of the
 * call's other arguments (a call whose context, tree, array or program is
 * itself NULL can only return NULL / TJ_ERR_ARG). NULL is a value only where
 * documented: array data (zeros), specs and rules (""), cotangents (ones),
 * policies and jit options (defaults), cross_entropy's mean_axes (none).
 * Sizes: an axis has 1..2^40 elements and a value at most 2^50 bytes, checked
 * with one overflow-safe multiply wherever a type is made, so no element,
 * byte or stride count can overflow.
 *
 * Dumps: set TJ_DUMP=1 (or tj_set_dump) to print every pipeline stage at
 * tj_jit: the traced graph (autodiff runs while tracing, so it already holds
 * the backward pass, and each scan and region body with its policy's
 * decisions), then the scheduled program after regions are inlined, with
 * each value's buffer offset, the memory analysis and the saved-residuals
 * report.
 *
 * ------------------------------------------------------------- contents ---
 *   [1]  basics: status, errors, allocation, dtypes, named shapes
 *   [2]  arrays and parameter trees
 *   [3]  graph and tracing: nodes, the op table (one row per op: name,
 *        kernel, VJP, cost, scratch, sharding rule, attribute printer),
 *        captures
 *   [4]  sharding on a device mesh: specs, rules, collectives; each op's
 *        sharding rule is its own function (tj__sh_*), named by its row
 *   [5]  ops: one block each (builder = shape rule, CPU kernel, VJP rule,
 *        cost); a unary elementwise op is one row of TJ__UNARY_OPS (its
 *        formula and derivative), a reduction one row of TJ__REDUCE_OPS
 *        (its empty value, step, sharding and VJP rules), from which the
 *        rest is generated
 *   [6]  autodiff: vjp, grad, stop_gradient, checkpoint_name
 *   [7]  control flow: scan, remat regions
 *   [8]  remat and offload policies, the saved-residuals report, lint
 *   [9]  schedule
 *   [10] memory plan and analysis (device and host), donation
 *   [11] run: backend interface (tinyjax_cuda.cu implements it for CUDA,
 *        with an NCCL transport), the CPU backend (device threads, fusion
 *        of elementwise loops and of full reductions of them, matmul), a
 *        device-like CPU backend (devsim: memory the host cannot touch,
 *        asynchronous streams; tests run on it), transports (threads, MPI)
 *        and process mode
 *   [12] jit: trace + compile + call
 *   [13] program text
 *   [A]  appendix, out of the pipeline's way: files (tj_read_file,
 *        tj_write_file_atomic), a string buffer, UTF-8, a strict JSON
 *        reader (tj_json), safetensors, tree save/load, the trace writer
 * The API below follows the same numbers, and so does the implementation,
 * whose [A] comes last; find a stage with
 *   grep -n '==== \[' tinyjax.h
 */
#ifndef TINYJAX_H
#define TINYJAX_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef TJ_STATIC
#define TJDEF static
#else
#ifdef __cplusplus
#define TJDEF extern "C"
#else
#define TJDEF extern
#endif
#endif

#define TJ_MAXDIM 8   /* axes per value */
#define TJ_MAXDEV 64  /* simulated devices */

/* ==== [1] basics ========================================================= */

typedef enum { TJ_F32 = 0, TJ_BF16, TJ_I32, TJ_F64, TJ_NDTYPE } tj_dtype;

typedef enum {
    TJ_OK = 0,
    TJ_ERR_SHAPE,       /* axis sizes do not fit                          */
    TJ_ERR_AXIS,        /* unknown or duplicated axis name                */
    TJ_ERR_DTYPE,       /* wrong or mixed dtypes                          */
    TJ_ERR_ARG,         /* wrong argument: count, NULL, range, tree leaf  */
    TJ_ERR_OOM,         /* allocation failed                              */
    TJ_ERR_IO,          /* file missing, truncated or corrupt             */
    TJ_ERR_STATE,       /* e.g. using a donated array                     */
    TJ_ERR_UNSUPPORTED  /* a rule this op does not have                   */
} tj_status;

typedef struct tj_ctx tj_ctx;
typedef struct tj_graph tj_graph;
typedef struct tj_node tj_node;
typedef tj_node *tj_v;            /* a traced value: a node of a graph     */
typedef struct tj_array tj_array; /* a concrete array in device memory     */
typedef struct tj_tree tj_tree;   /* ordered named leaves (a pytree)       */
typedef struct tj_prog tj_prog;   /* a compiled program                    */

/* One context per thread of control: it owns axis names, the error message,
   devices and allocation statistics. A TJ_DEVICES environment variable that
   is not a count from 1 to TJ_MAXDEV is an error of the new context (check
   tj_status_of; tracing fails with that message until tj_clear_error). */
TJDEF tj_ctx *tj_ctx_new(void);
TJDEF void tj_ctx_free(tj_ctx *ctx);
/* The last error message ("" if none), its status, and a reset. */
TJDEF const char *tj_error(tj_ctx *ctx);
TJDEF tj_status tj_status_of(tj_ctx *ctx);
TJDEF void tj_clear_error(tj_ctx *ctx);
/* Warnings: what the user asked for but cannot happen as asked (a policy
   name no residual carries, a logical rule naming a mesh axis that looks
   like a typo of one the mesh has, a rule on an axis its mesh axes cannot
   divide). Each distinct warning is printed once to stderr ("tinyjax:
   warning: ...", unless TJ_QUIET=1) and kept: tj_warnings returns them all,
   one per line ("" if none). An error is different: it is sticky. Until
   tj_clear_error, every traced op, tj_jit and tj_run fail and the first
   message stands; calls on arrays, trees and files still work (a failure
   of theirs returns its status but leaves the first message). */
TJDEF const char *tj_warnings(tj_ctx *ctx);
/* Print each pipeline stage to stderr (also: environment TJ_DUMP=1). */
TJDEF void tj_set_dump(tj_ctx *ctx, int on);
/* Threads the CPU kernels may use in all (default: the cores, at most
   16), split evenly among this process's devices (each gets at least one).
   When the devices outnumber them (8 simulated devices on 2 cores), the
   devices run as fibers on that many threads ([11]: TJ_FIBERS). */
TJDEF void tj_set_threads(tj_ctx *ctx, int n);

TJDEF const char *tj_dtype_name(tj_dtype t);
TJDEF size_t tj_dtype_size(tj_dtype t);
/* bf16 <-> f32: round to nearest even; NaN stays NaN. Float -> i32 (tj_cast,
   tj_array_read, loading a float tensor as i32) truncates toward zero,
   saturates at INT32_MIN / INT32_MAX, and maps NaN to 0. */
TJDEF uint16_t tj_f32_to_bf16(float f);
TJDEF float tj_bf16_to_f32(uint16_t h);

/* Bytes the library has allocated, by kind (the memory-analysis tests
   compare these with the planner's prediction), and per device: arrays and
   arenas together, now and at most (what tj_memory_analysis's peak_bytes
   predicts for one program). */
typedef struct {
    int64_t arena_bytes;      /* temp arenas of runs in flight              */
    int64_t array_bytes;      /* live arrays (arguments, outputs)           */
    int64_t peak_arena_bytes; /* most arena bytes live at one time          */
    int64_t arena_allocs;     /* how many arenas were allocated             */
    int64_t device_bytes[TJ_MAXDEV];      /* device d: arrays + device arenas now (host arenas: arena_bytes only) */
    int64_t device_peak_bytes[TJ_MAXDEV]; /* ... most at one time           */
} tj_alloc_stats;
TJDEF tj_alloc_stats tj_get_alloc_stats(tj_ctx *ctx);
/* Restart the peaks (peak_arena_bytes, device_peak_bytes) from what is
   allocated now: to measure one program's runs apart from what came before. */
TJDEF void tj_reset_alloc_peaks(tj_ctx *ctx);

/* ==== [2] arrays and parameter trees ===================================== */

/* Shapes are strings of "name=size" separated by spaces or commas:
   "batch=4 embed=128"; "" is a scalar. Arrays hold their data in device
   memory (host memory for the CPU backend). Creating returns NULL and sets
   the context error on a bad shape or out of memory. */
#define tj_array_new(ctx, dt, shape, data) tj_array_new_at(__FILE__, __LINE__, ctx, dt, shape, data)
#define tj_zeros(ctx, dt, shape) tj_full_at(__FILE__, __LINE__, ctx, dt, shape, 0.0)
#define tj_ones(ctx, dt, shape) tj_full_at(__FILE__, __LINE__, ctx, dt, shape, 1.0)
#define tj_full(ctx, dt, shape, v) tj_full_at(__FILE__, __LINE__, ctx, dt, shape, v)
#define tj_iota(ctx, dt, shape, axis) tj_iota_at(__FILE__, __LINE__, ctx, dt, shape, axis)
/* data: row-major, in dtype dt (bf16 as uint16 bits); NULL = zeros. */
TJDEF tj_array *tj_array_new_at(const char *file, int line, tj_ctx *ctx, tj_dtype dt, const char *shape, const void *data);
TJDEF tj_array *tj_full_at(const char *file, int line, tj_ctx *ctx, tj_dtype dt, const char *shape, double v);
/* values 0,1,2.. along `axis`, constant along the others */
TJDEF tj_array *tj_iota_at(const char *file, int line, tj_ctx *ctx, tj_dtype dt, const char *shape, const char *axis);
TJDEF void tj_array_free(tj_array *a);
/* Read the whole array back, row-major, converted to `dt`. dst holds
   tj_array_numel(a) elements. */
TJDEF tj_status tj_array_read(tj_array *a, tj_dtype dt, void *dst);
TJDEF int64_t tj_array_numel(const tj_array *a);
TJDEF tj_dtype tj_array_dtype(const tj_array *a);
TJDEF int tj_array_rank(const tj_array *a);
/* Size of the axis called `name`, or -1. */
TJDEF int64_t tj_array_dim(const tj_array *a, const char *name);
/* "f32[batch=4,embed=128]" into buf; returns buf. */
TJDEF const char *tj_array_describe(const tj_array *a, char *buf, size_t n);
/* 1 if the array's buffer was donated to a program and is gone. */
TJDEF int tj_array_is_deleted(const tj_array *a);
/* Abstract arrays (JAX's ShapeDtypeStruct): a dtype, a shape and a sharding
   (a spec as tj_device_put takes, "" or NULL: replicated) with no buffers.
   tj_jit compiles against them, so a program's memory analysis and
   collectives can be read at sizes no machine here could hold; tj_device_put
   and tj_filter_shard give them another sharding; tj_run, reads and saves
   refuse them with an error. tj_prog_output_shapes (jax.eval_shape) fills a
   tree with abstract arrays of a compiled program's outputs, e.g. the
   parameters an init program would make. */
#define tj_array_abstract(ctx, dt, shape, spec) tj_array_abstract_at(__FILE__, __LINE__, ctx, dt, shape, spec)
TJDEF tj_array *tj_array_abstract_at(const char *file, int line, tj_ctx *ctx, tj_dtype dt, const char *shape, const char *spec);
TJDEF int tj_array_is_abstract(const tj_array *a);

/* A tree is an ordered list of leaves with path names ("blocks.0.w1").
   A leaf is an array, a traced value (inside a traced function), an integer,
   a float or a string. Non-array leaves pass through transformations
   untouched, as in Equinox. The tree owns its arrays (tj_tree_free frees
   them) unless set with tj_tree_set_array_ref. Setting an existing name
   replaces the leaf in place (order kept). A tree holds arrays of its own
   context only, and an array has one owner: setting an array of another
   context, or one that a leaf of any tree owns, is TJ_ERR_ARG (so is
   tj_tree_map's fn returning one, and merging trees of two contexts);
   borrow it with tj_tree_set_array_ref, or tj_tree_take it first. */
typedef enum { TJ_LEAF_ARRAY, TJ_LEAF_VALUE, TJ_LEAF_INT, TJ_LEAF_FLOAT, TJ_LEAF_STRING } tj_leaf_kind;
TJDEF tj_tree *tj_tree_new(tj_ctx *ctx);
TJDEF void tj_tree_free(tj_tree *t);
TJDEF void tj_tree_clear(tj_tree *t);
TJDEF int tj_tree_size(const tj_tree *t);
TJDEF const char *tj_tree_name(const tj_tree *t, int i);
TJDEF tj_leaf_kind tj_tree_kind(const tj_tree *t, int i);
TJDEF int tj_tree_find(const tj_tree *t, const char *name); /* index or -1 */
TJDEF tj_status tj_tree_set_array(tj_tree *t, const char *name, tj_array *a);     /* takes ownership, even on failure */
TJDEF tj_status tj_tree_set_array_ref(tj_tree *t, const char *name, tj_array *a); /* borrows */
TJDEF tj_status tj_tree_set_v(tj_tree *t, const char *name, tj_v v);
TJDEF tj_status tj_tree_set_int(tj_tree *t, const char *name, int64_t v);
TJDEF tj_status tj_tree_set_float(tj_tree *t, const char *name, double v);
TJDEF tj_status tj_tree_set_string(tj_tree *t, const char *name, const char *s);
/* Getters return NULL / 0 and set the context error, naming the leaf and
   the caller's file:line, if the leaf is missing or of another kind.
   tj_tree_v is for traced functions. (Macros over the _at functions, which
   take the caller's file and line.) */
#define tj_tree_array(t, name) tj_tree_get_array_at(__FILE__, __LINE__, t, name)
#define tj_tree_v(t, name) tj_tree_get_v_at(__FILE__, __LINE__, t, name)
#define tj_tree_int(t, name) tj_tree_get_int_at(__FILE__, __LINE__, t, name)
#define tj_tree_float(t, name) tj_tree_get_float_at(__FILE__, __LINE__, t, name)
#define tj_tree_string(t, name) tj_tree_get_string_at(__FILE__, __LINE__, t, name)
TJDEF tj_array *tj_tree_get_array_at(const char *file, int line, const tj_tree *t, const char *name);
TJDEF tj_v tj_tree_get_v_at(const char *file, int line, const tj_tree *t, const char *name);
TJDEF int64_t tj_tree_get_int_at(const char *file, int line, const tj_tree *t, const char *name);
TJDEF double tj_tree_get_float_at(const char *file, int line, const tj_tree *t, const char *name);
TJDEF const char *tj_tree_get_string_at(const char *file, int line, const tj_tree *t, const char *name);
TJDEF tj_array *tj_tree_array_at(const tj_tree *t, int i);
TJDEF tj_v tj_tree_v_at(const tj_tree *t, int i);
/* Remove the array leaf `name` and hand its ownership to the caller (NULL
   and an error if there is no such array leaf). */
#define tj_tree_take(t, name) tj_tree_take_at(__FILE__, __LINE__, t, name)
TJDEF tj_array *tj_tree_take_at(const char *file, int line, tj_tree *t, const char *name);
/* Move every leaf of src into dst (replacing same names); src ends empty. */
TJDEF void tj_tree_merge(tj_tree *dst, tj_tree *src);
/* Apply fn to every array leaf; fn returns the replacement (or the same
   array). Non-array leaves are passed through. */
typedef tj_array *(*tj_tree_map_fn)(tj_array *a, const char *name, void *user);
TJDEF tj_status tj_tree_map(tj_tree *t, tj_tree_map_fn fn, void *user);
/* Save all array leaves (and int/float/string leaves as metadata) to a
   safetensors file, atomically; load it back into a tree. The file format,
   the safetensors reader and writer, and the file and JSON helpers they are
   built from: [A], at the end of this API. */
TJDEF tj_status tj_tree_save(const tj_tree *t, const char *path);
TJDEF tj_status tj_tree_load(tj_tree *t, const char *path);

/* ==== [3] graph and tracing (op builders: [5]) =========================== */

/* Every builder records the caller's file:line; the macros pass it. Use the
   _at forms to attribute ops to your own caller (e.g. inside a layer helper). */
#define TJ_AT __FILE__, __LINE__
TJDEF tj_graph *tj_graph_of(tj_v v);
TJDEF tj_ctx *tj_graph_ctx(tj_graph *g);
TJDEF tj_dtype tj_v_dtype(tj_v v);
TJDEF int tj_v_rank(tj_v v);
TJDEF int64_t tj_v_dim(tj_v v, const char *axis);     /* -1 if absent */
TJDEF const char *tj_v_axis(tj_v v, int i);           /* name of axis i */
TJDEF const char *tj_v_describe(tj_v v, char *buf, size_t n);

/* ---- constants ---- */
#define tj_scalar(g, dt, v) tj_scalar_at(TJ_AT, g, dt, v)
#define tj_fill(g, dt, shape, v) tj_fill_at(TJ_AT, g, dt, shape, v)
#define tj_arange(g, dt, shape, axis) tj_arange_at(TJ_AT, g, dt, shape, axis)
TJDEF tj_v tj_scalar_at(const char *f, int l, tj_graph *g, tj_dtype dt, double v);
TJDEF tj_v tj_fill_at(const char *f, int l, tj_graph *g, tj_dtype dt, const char *shape, double v);
TJDEF tj_v tj_arange_at(const char *f, int l, tj_graph *g, tj_dtype dt, const char *shape, const char *axis);

/* ---- elementwise, unary ----
   One row per op; the op table of [3] is built from these rows. Columns:
   the op, its name, its value as a formula in double of the input a (s is
   the op's constant), PUB when tj_NAME(x) is its public builder (OWN: it
   has its own below; GRAD: the derivative op of the row above it), its
   derivative as graph ops on the input x, the output y and the cotangent g
   (evaluated inside the VJP, so the ops it makes are attributed to the
   forward op's source line), and the range [lo, hi) the tests draw inputs
   from. Adding a unary op is one row here and its tj_NAME macro below:
   the builder, the CPU and CUDA kernels, the fused loops, the VJP and the
   harness test (tests/test_harness.c) all come from the row. tanh's
   derivative is JAX's (g + g y)(1 - y), not g (1 - y y): 1 - y is exact
   near |y| = 1, so the product is 1 - y^2 of the rounded y within an ulp,
   where 1 - y y loses up to hundreds of f32 ulps (566 at x = 5). rsqrt's
   is JAX's too, -0.5 y / x: at x = -0 (y = -inf) it is -inf, where
   -0.5 y^3 gave +inf. */
#define TJ__UNARY_OPS(X)                                                                                          \
    X(NEG, neg, -a, PUB, tj_neg(g), -1, 1)                                                                          \
    X(EXP, exp, TJ__EXP(a), PUB, tj_mul(g, y), -1, 1)                                                               \
    X(LOG, log, log(a), PUB, tj_div(g, x), 0.5, 2)                                                                  \
    X(TANH, tanh, TJ__TANH(a), PUB, tj_mul(tj_add(g, tj_mul(g, y)), tj_adds(tj_neg(y), 1.0)), -1, 1)                \
    X(SIGMOID, sigmoid, 1.0 / (1.0 + TJ__EXP(-a)), PUB, tj_mul(g, tj_mul(y, tj_adds(tj_neg(y), 1.0))), -1, 1)        \
    X(SIN, sin, sin(a), PUB, tj_mul(g, tj_cos(x)), -3, 3)                                                           \
    X(COS, cos, cos(a), PUB, tj_mul(g, tj_neg(tj_sin(x))), -3, 3)                                                   \
    X(ABS, abs, fabs(a), PUB, tj_select(tj_ge(x, tj_scalar(x->g, x->t.dt, 0)), g, tj_neg(g)), -1, 1)                  \
    X(SIGN, sign, a > 0 ? 1.0 : a < 0 ? -1.0 : a, PUB, ((void)g, (tj_v)NULL), -1, 1)                                  \
    X(LOG1P, log1p, log1p(a), PUB, tj_div(g, tj_adds(x, 1.0)), -0.5, 2)                                              \
    X(EXPM1, expm1, expm1(a), PUB, tj_mul(g, tj_adds(y, 1.0)), -1, 1)                                               \
    X(ERF, erf, erf(a), PUB, tj_mul(g, tj_muls(tj_exp(tj_neg(tj_mul(x, x))), 1.1283791670955126)), -2, 2)          \
    X(SOFTPLUS, softplus, a > 0 ? a + log1p(TJ__EXP(-a)) : log1p(TJ__EXP(a)), PUB, tj_mul(g, tj_sigmoid(x)), -4, 4) \
    X(SQRT, sqrt, sqrt(a), PUB, tj_div(tj_muls(g, 0.5), y), 0.5, 2)                                                 \
    X(RSQRT, rsqrt, 1.0 / sqrt(a), PUB, tj_mul(g, tj_muls(tj_div(y, x), -0.5)), 0.5, 2)                              \
    X(RELU, relu, a > 0 || a != a ? a : 0.0, PUB, tj_select(tj_gt(x, tj_scalar(x->g, x->t.dt, 0)), g, tj_scalar(g->g, g->t.dt, 0)), -1, 1) \
    X(GELU, gelu, 0.5 * a * (1.0 + TJ__TANH(TJ__GELU_U(a))), PUB, tj_mul(g, tj__gelu_grad(TJ_AT, x)), -1, 1)       \
    X(GELU_D, gelu_grad, tj__gelu_d(a, TJ__TANH(TJ__GELU_U(a))), GRAD, tj__gelu_grad_vjp(TJ_AT, x, g), -1, 1)       \
    X(POWS, pows, pow(a, s), OWN, tj_mul(g, tj_muls(tj_pows(x, s - 1.0), s)), -1, 1)                                \
    X(CAST, cast, a, OWN, g, -1, 1)
#define TJ__GELU_U(a) (TJ__GELU_C * ((a) + 0.044715 * (a) * (a) * (a)))
/* the public builders of the PUB rows: tj_neg_at, tj_exp_at, ... */
#define TJ__U_DECL(op, nm, fwd, kind, deriv, lo, hi) TJ__U_DECL_##kind(nm)
#define TJ__U_DECL_PUB(nm) TJDEF tj_v tj_##nm##_at(const char *f, int l, tj_v x);
#define TJ__U_DECL_OWN(nm)
#define TJ__U_DECL_GRAD(nm)
TJ__UNARY_OPS(TJ__U_DECL)
#define tj_neg(x) tj_neg_at(TJ_AT, x)
#define tj_exp(x) tj_exp_at(TJ_AT, x)
#define tj_log(x) tj_log_at(TJ_AT, x)
#define tj_tanh(x) tj_tanh_at(TJ_AT, x)
/* logistic 1 / (1 + e^-x), as jax.nn.sigmoid (lax.logistic): 0 (not NaN)
   far below zero, and its gradient g y (1 - y) is JAX's, finite where
   the hand-written 1 / (1 + exp(-x)) has exp(-x) = inf (x < -88 in f32:
   its gradient is 0 * inf = NaN). silu / swish: tj_mul(x, tj_sigmoid(x)). */
#define tj_sigmoid(x) tj_sigmoid_at(TJ_AT, x)
/* sin, cos: sin(x) and cos(x) in double, rounded once (XLA's f32 sin and
   cos are within an ulp or two of that); large |x| is reduced exactly */
#define tj_sin(x) tj_sin_at(TJ_AT, x)
#define tj_cos(x) tj_cos_at(TJ_AT, x)
/* |x|, as jnp.abs: abs(-0) = +0, abs(NaN) = NaN; on i32 an i32 result that
   wraps as XLA's s32 abs (abs(INT32_MIN) = INT32_MIN). Its gradient is
   JAX's select(x >= 0, g, -g): +g at x = 0 and -0 (not the 0 of sign(x) g),
   -g at NaN. */
#define tj_abs(x) tj_abs_at(TJ_AT, x)
/* sign(x), as jnp.sign: -1, 0 or 1, with sign(-0) = -0, sign(+0) = +0 and
   sign(NaN) = NaN; on i32 an i32 result. Its gradient is zero (JAX's
   symbolic zero: 0 even where the cotangent is infinite or NaN). */
#define tj_sign(x) tj_sign_at(TJ_AT, x)
/* log(1 + x) and e^x - 1, accurate near 0 (jnp.log1p, jnp.expm1):
   log1p(-1) = -inf, log1p(x < -1) = NaN, expm1(-inf) = -1; gradients
   g / (1 + x) and g (y + 1), as JAX's */
#define tj_log1p(x) tj_log1p_at(TJ_AT, x)
#define tj_expm1(x) tj_expm1_at(TJ_AT, x)
/* the error function (jax.scipy.special.erf, lax.erf): exact GELU is
   0.5 x (1 + erf(x / sqrt 2)) (jax.nn.gelu(x, approximate=False)); its
   gradient is JAX's g (2 / sqrt(pi)) exp(-x^2) */
#define tj_erf(x) tj_erf_at(TJ_AT, x)
/* log(1 + e^x), as jax.nn.softplus (logaddexp(x, 0)): max(x, 0) +
   log1p(e^-|x|) in double, rounded once: x itself for large x (never
   inf before x is), e^x for very negative x (not 0 from log(1 + tiny)),
   softplus(-inf) = 0, softplus(inf) = inf. Gradient g sigmoid(x): 0 at
   -inf, 1 at inf, NaN at NaN, as JAX's. */
#define tj_softplus(x) tj_softplus_at(TJ_AT, x)
#define tj_sqrt(x) tj_sqrt_at(TJ_AT, x)
#define tj_rsqrt(x) tj_rsqrt_at(TJ_AT, x)
#define tj_relu(x) tj_relu_at(TJ_AT, x)
#define tj_gelu(x) tj_gelu_at(TJ_AT, x)     /* tanh approximation (GPT-2)  */
#define tj_pows(x, p) tj_pows_at(TJ_AT, x, p) /* x^p, p a constant (rounded to x's dtype, as JAX's weak types); on i32
                                                 p must be an integer >= 0: lax.integer_pow, wrapping as i32 mul */
#define tj_cast(x, dt) tj_cast_at(TJ_AT, x, dt)
TJDEF tj_v tj_pows_at(const char *f, int l, tj_v x, double p);
TJDEF tj_v tj_cast_at(const char *f, int l, tj_v x, tj_dtype dt);

/* ---- elementwise, binary, broadcasting by axis name ----
   The result has a's axes followed by b's axes that a lacks. Dtypes must
   match (cast first). Compare ops give i32 0/1 masks. max2 and min2 (and
   relu) return NaN for a NaN operand, as JAX does; relu's gradient
   selects (0 where x <= 0 or NaN, whatever the cotangent: a NaN cotangent
   there gives 0), as jax.nn.relu's, while max2's and min2's multiply.
   i32 add, sub, mul, div, neg (adds, muls) and sum are XLA's s32 ops (JAX's
   lax ops, jnp's int32 + - *): they wrap around (INT32_MAX + 1 =
   INT32_MIN); div truncates toward zero as lax.div (not jnp's
   floor_divide), x / 0 = -1 and INT32_MIN / -1 = INT32_MIN. (Across devices
   too: the transports add i32 partial sums, and tj_psum's, modulo 2^32.) */
#define tj_add(a, b) tj_add_at(TJ_AT, a, b)
#define tj_sub(a, b) tj_sub_at(TJ_AT, a, b)
#define tj_mul(a, b) tj_mul_at(TJ_AT, a, b)
#define tj_div(a, b) tj_div_at(TJ_AT, a, b)
#define tj_max2(a, b) tj_max2_at(TJ_AT, a, b)
#define tj_min2(a, b) tj_min2_at(TJ_AT, a, b)
#define tj_lt(a, b) tj_lt_at(TJ_AT, a, b)
#define tj_le(a, b) tj_le_at(TJ_AT, a, b)
#define tj_gt(a, b) tj_gt_at(TJ_AT, a, b)
#define tj_ge(a, b) tj_ge_at(TJ_AT, a, b)
#define tj_eq(a, b) tj_eq_at(TJ_AT, a, b)
#define tj_ne(a, b) tj_ne_at(TJ_AT, a, b)
#define tj_adds(a, s) tj_adds_at(TJ_AT, a, s)  /* a + constant */
#define tj_muls(a, s) tj_muls_at(TJ_AT, a, s)  /* a * constant */
TJDEF tj_v tj_add_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_sub_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_mul_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_div_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_max2_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_min2_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_lt_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_le_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_gt_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_ge_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_eq_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_ne_at(const char *f, int l, tj_v a, tj_v b);
TJDEF tj_v tj_adds_at(const char *f, int l, tj_v a, double s);
TJDEF tj_v tj_muls_at(const char *f, int l, tj_v a, double s);
/* where(mask != 0, a, b); mask is i32 and broadcasts by name too. */
#define tj_select(m, a, b) tj_select_at(TJ_AT, m, a, b)
TJDEF tj_v tj_select_at(const char *f, int l, tj_v mask, tj_v a, tj_v b);
/* jnp.clip(x, lo, hi) with constant bounds: min(hi, max(x, lo)) (JAX
   0.10.2's jnp.clip is that max and min, not lax.clamp), so NaN passes
   through, lo > hi gives hi everywhere, and the gradient is max's and
   min's: g inside, 0 outside, g/2 exactly at a bound (lax.clamp's would be
   0 there). The bounds take x's dtype (rounded as tj_adds' constant); on
   i32 they must be i32 values (jnp.clip with int bounds; a fractional
   bound would make JAX's result a float: cast x first). +-inf bounds are
   allowed on floats (no bound on that side). */
#define tj_clip(x, lo, hi) tj_clip_at(TJ_AT, x, lo, hi)
TJDEF tj_v tj_clip_at(const char *f, int l, tj_v x, double lo, double hi);

/* ---- reductions over named axes ("pos" or "batch pos") ----
   One row per reduction; the op table of [3] is built from these rows.
   Columns: the op, its public name (tj_NAME), its name in programs, the
   value of an empty reduction, how a value v joins the accumulator acc (in
   double; a NaN stays), its sharding rule (tj__sh_sum: over a sharded axis
   each device keeps a partial sum, which one psum adds up where a later op
   needs it whole; tj__sh_whole: the reduced axes are gathered first) and
   its VJP rule (tj__vjp_sum: the cotangent broadcast back over the reduced
   axes; tj__vjp_ties: shared equally among the elements equal to the
   result). Adding a reduction is one row here and its tj_NAME macro below:
   the builder, the CPU and CUDA kernels' folds, the VJP and the harness
   test (tests/test_harness.c) come from the row. */
#define TJ__REDUCE_OPS(X)                                                                               \
    X(SUM, sum, "sum", 0.0, acc + v, tj__sh_sum, tj__vjp_sum)                                          \
    X(MAXR, max, "reduce_max", -INFINITY, (v > acc || v != v ? v : v == acc && v == 0.0 ? acc + v : acc), tj__sh_whole, tj__vjp_ties)  \
    X(MINR, min, "reduce_min", INFINITY, (v < acc || v != v ? v : v == acc && v == 0.0 ? -(-acc - v) : acc), tj__sh_whole, tj__vjp_ties)
#define TJ__R_DECL(op, nm, ...) TJDEF tj_v tj_##nm##_at(const char *f, int l, tj_v x, const char *axes);
TJ__REDUCE_OPS(TJ__R_DECL)
#undef TJ__R_DECL
#define tj_sum(x, axes) tj_sum_at(TJ_AT, x, axes)
#define tj_max(x, axes) tj_max_at(TJ_AT, x, axes)
#define tj_min(x, axes) tj_min_at(TJ_AT, x, axes)
/* jnp.argmax / jnp.argmin along one axis: the i32 index of the largest
   (smallest) element, the axis dropped; the first on ties (-0 and +0 tie),
   a NaN counts as larger (smaller) than anything, so the first NaN wins,
   as in JAX. For f32, f64, bf16 and i32 values. The result is an integer:
   no gradient flows through it (as through compares: tj_grad gives zeros
   for what reaches the loss only through it). Sharded, other axes keep
   their sharding, and a reduced axis split over devices is not gathered:
   each device finds its block's winner and global index, and only those
   pairs move (argmax_part, [5]). Inside tj_shard_map it is the local
   block's index, as jnp.argmax there. */
#define tj_argmax(x, axis) tj_argmax_at(TJ_AT, x, axis)
#define tj_argmin(x, axis) tj_argmin_at(TJ_AT, x, axis)
TJDEF tj_v tj_argmax_at(const char *f, int l, tj_v x, const char *axis);
TJDEF tj_v tj_argmin_at(const char *f, int l, tj_v x, const char *axis);
/* sum and mean as jnp's: bf16 in f32 (partial sums on a mesh too), one
   rounding to bf16; mean is the sum times 1/count, as jnp.mean under jit */
#define tj_mean(x, axes) tj_mean_at(TJ_AT, x, axes)
TJDEF tj_v tj_mean_at(const char *f, int l, tj_v x, const char *axes);
/* the sum of every element: a rank-0 value */
#define tj_sum_all(x) tj_sum_all_at(TJ_AT, x)
TJDEF tj_v tj_sum_all_at(const char *f, int l, tj_v x);

/* ---- dot: contract the named axes; axes in both operands that are not
   contracted are batch axes; the result is (batch, a's free, b's free). ---- */
#define tj_dot(a, b, contract) tj_dot_at(TJ_AT, a, b, contract)
TJDEF tj_v tj_dot_at(const char *f, int l, tj_v a, tj_v b, const char *contract);

/* ---- shape ops ---- */
#define tj_rename(x, from, to) tj_rename_at(TJ_AT, x, from, to)
#define tj_transpose(x, order) tj_transpose_at(TJ_AT, x, order)
#define tj_split(x, axis, into) tj_split_at(TJ_AT, x, axis, into)
#define tj_merge(x, axes, into) tj_merge_at(TJ_AT, x, axes, into)
#define tj_slice(x, axis, start, stop) tj_slice_at(TJ_AT, x, axis, start, stop)
#define tj_concat(n, xs, axis) tj_concat_at(TJ_AT, n, xs, axis)
#define tj_pad(x, axis, lo, hi, v) tj_pad_at(TJ_AT, x, axis, lo, hi, v)
#define tj_broadcast(x, shape) tj_broadcast_at(TJ_AT, x, shape)
TJDEF tj_v tj_rename_at(const char *f, int l, tj_v x, const char *from, const char *to);
/* order: all axis names, space separated, in the new order */
TJDEF tj_v tj_transpose_at(const char *f, int l, tj_v x, const char *order);
/* split "embed" into "heads=12 head_dim=64" (sizes must multiply out; one
   size may be left as 0 and is inferred) */
TJDEF tj_v tj_split_at(const char *f, int l, tj_v x, const char *axis, const char *into);
/* merge adjacent axes "heads head_dim" into one axis "embed" */
TJDEF tj_v tj_merge_at(const char *f, int l, tj_v x, const char *axes, const char *into);
TJDEF tj_v tj_slice_at(const char *f, int l, tj_v x, const char *axis, int64_t start, int64_t stop);
/* element i of `axis`, the axis dropped (x[..., i, ...]) */
#define tj_index(x, axis, i) tj_index_at(TJ_AT, x, axis, i)
TJDEF tj_v tj_index_at(const char *f, int l, tj_v x, const char *axis, int64_t i);
TJDEF tj_v tj_concat_at(const char *f, int l, int n, const tj_v *xs, const char *axis);
/* jnp.stack(xs, axis=0): n (1..256) values of one type (axes, sizes,
   dtype) side by side along a new leading axis `axis` (a name none of them
   has) of size n. Each gains a size-1 axis (a reshape: no copy) and they
   are concatenated, so sharded inputs keep their sharding along their
   own axes; the gradient is the cotangent sliced back per input. */
#define tj_stack(n, xs, axis) tj_stack_at(TJ_AT, n, xs, axis)
TJDEF tj_v tj_stack_at(const char *f, int l, int n, const tj_v *xs, const char *axis);
/* lo and hi elements of `value` before and after; a negative count crops
   (lax.pad's rule); an axis left with no element is an error */
TJDEF tj_v tj_pad_at(const char *f, int l, tj_v x, const char *axis, int64_t lo, int64_t hi, double value);
/* broadcast x to a shape that contains all its axes (extra axes added) */
TJDEF tj_v tj_broadcast_at(const char *f, int l, tj_v x, const char *shape);

/* ---- indexing ---- */
/* take(x, axis, idx): gather along `axis` of x with i32 indices idx; the
   result has x's axes with `axis` replaced by idx's axes (embedding lookup:
   take(wte[vocab,embed], "vocab", tokens[batch,pos]) -> [batch,pos,embed]).
   Out-of-range indices are a run-time error (jnp.take fills or clamps
   them instead). Its transpose is scatter-add. Sharded, a table larger
   than the result stays where it is (tj__sh_take): split along `axis`
   too, each device takes the rows of its block (a vocab-parallel
   embedding; the result is a partial sum its reader adds up). */
#define tj_take(x, axis, idx) tj_take_at(TJ_AT, x, axis, idx)
TJDEF tj_v tj_take_at(const char *f, int l, tj_v x, const char *axis, tj_v idx);
/* one_hot(idx, "vocab=256", dt): idx's axes plus the new axis. */
#define tj_one_hot(idx, axis, dt) tj_one_hot_at(TJ_AT, idx, axis, dt)
TJDEF tj_v tj_one_hot_at(const char *f, int l, tj_v idx, const char *axis, tj_dtype dt);

/* ---- neural-network ops (fused, numerically stable) ----
   softmax, log_softmax, layer_norm and cross_entropy compute a row in f32
   (f64 for f64) and round once to the result's dtype: for bf16 they equal
   JAX's forms on an f32 upcast, not JAX's bf16 ops step by step. */
/* set x to `fill` where key position > query position (causal attention) */
#define tj_causal_mask(x, q_axis, k_axis, fill) tj_causal_mask_at(TJ_AT, x, q_axis, k_axis, fill)
#define tj_softmax(x, axis) tj_softmax_at(TJ_AT, x, axis)
#define tj_log_softmax(x, axis) tj_log_softmax_at(TJ_AT, x, axis)
/* normalise over `axis` (no scale/shift: multiply and add yours) */
#define tj_layer_norm(x, axis, eps) tj_layer_norm_at(TJ_AT, x, axis, eps)
/* mean over `mean_axes` of -log softmax(logits)[label] along class_axis;
   labels are i32 with logits' axes minus class_axis. Sharded, logits
   split along class_axis stay split (a vocab-parallel head): each device
   reduces its block of classes to a max, a sum of exponentials and the
   label's logit per row, and only those move ([5]). */
#define tj_cross_entropy(logits, labels, class_axis, mean_axes) \
    tj_cross_entropy_at(TJ_AT, logits, labels, class_axis, mean_axes)
TJDEF tj_v tj_causal_mask_at(const char *f, int l, tj_v x, const char *q_axis, const char *k_axis, double fill);
TJDEF tj_v tj_softmax_at(const char *f, int l, tj_v x, const char *axis);
TJDEF tj_v tj_log_softmax_at(const char *f, int l, tj_v x, const char *axis);
TJDEF tj_v tj_layer_norm_at(const char *f, int l, tj_v x, const char *axis, double eps);
TJDEF tj_v tj_cross_entropy_at(const char *f, int l, tj_v logits, tj_v labels, const char *class_axis, const char *mean_axes);
/* Fused scaled dot-product attention, flash-style: for each query position
   out = sum over kpos of softmax_kpos(scale * q.k) v, where q.k sums over
   `dim`, without ever making the (qpos, kpos) scores or probabilities as
   values: the kernel keeps a running max and sum per query (online softmax)
   and saves only the output and each query's log-sum-exp for the backward
   pass, which recomputes the probabilities. q is (batch..., qpos, dim), k
   (batch'..., kpos, dim) and v (batch'..., kpos, dim') where batch' is
   some of q's batch axes, the same in k and v (any names, any order; dim'
   may differ in size from dim). k and v are shared over the batch axes of
   q they lack, without copies: grouped-query attention is q (batch,
   kvheads, group, qpos, dim) with k, v (batch, kvheads, kpos, dim), and
   multi-query q (batch, heads, qpos, dim) with k, v (batch, kpos, dim);
   their gradients sum over those axes. out has q's batch axes, qpos and
   dim' (its axis order: q's batch axes that k has, as in q, then those it
   lacks, then qpos, then dim). causal: query i sees keys j <= i only (JAX's is_causal,
   top-left aligned). scale 0 means 1/sqrt(size of dim). f32 and bf16 compute
   in f32, f64 in f64; the same result as softmax(causal_mask(dot)) . v
   within rounding. On a mesh, batch axes may stay sharded (k and v follow
   q, replicated along a sharded axis they lack); qpos, kpos and dim are
   gathered whole. dim and dim' at most 256. */
#define tj_attention(q, k, v, qpos, kpos, dim, scale, causal) tj_attention_at(TJ_AT, q, k, v, qpos, kpos, dim, scale, causal)
TJDEF tj_v tj_attention_at(const char *f, int l, tj_v q, tj_v k, tj_v v, const char *qpos, const char *kpos, const char *dim, double scale, int causal);
/* tj_attention with a mask, as jax.nn.dot_product_attention(q, k, v,
   mask=..., is_causal=causal): mask is i32 (nonzero: attend), its axes any
   of q's batch axes, qpos and kpos (it broadcasts over the rest; qpos and
   kpos must then have different names); causal ANDs with it. A masked
   score becomes -0.7 times f32's largest value (JAX's large negative), not
   -inf: a query row with every key masked attends to ALL keys uniformly
   (its output is the mean of v over kpos; dq of it and its share of dk are
   0, dv gets 1/kpos of its cotangent), as JAX gives. The mask has no
   gradient. On a mesh the mask is split like q's batch axes. */
#define tj_attention_masked(q, k, v, mask, qpos, kpos, dim, scale, causal) \
    tj_attention_masked_at(TJ_AT, q, k, v, mask, qpos, kpos, dim, scale, causal)
TJDEF tj_v tj_attention_masked_at(const char *f, int l, tj_v q, tj_v k, tj_v v, tj_v mask, const char *qpos, const char *kpos, const char *dim,
                                  double scale, int causal);

/* ---- random numbers (counter-based) ----
   Element i of a random tensor (its row-major index in the full shape) has
   bits hash(key, i): the same key and index give the same number whatever
   shape or sharding surrounds it. tj_dropout keeps x / (1 - rate) where
   a uniform (f32 for bf16 x, which keeps 1 - rate of the elements, not
   what 8-bit uniforms would) is >= rate, and 0 elsewhere. */
#define tj_uniform(g, key, dt, shape) tj_uniform_at(TJ_AT, g, key, dt, shape)
#define tj_normal(g, key, dt, shape) tj_normal_at(TJ_AT, g, key, dt, shape)
#define tj_dropout(x, key, rate) tj_dropout_at(TJ_AT, x, key, rate)
TJDEF tj_v tj_uniform_at(const char *f, int l, tj_graph *g, uint64_t key, tj_dtype dt, const char *shape);
TJDEF tj_v tj_normal_at(const char *f, int l, tj_graph *g, uint64_t key, tj_dtype dt, const char *shape);
TJDEF tj_v tj_dropout_at(const char *f, int l, tj_v x, uint64_t key, double rate);
/* derive a new key from a key and a counter (fold_in) */
TJDEF uint64_t tj_key_fold(uint64_t key, uint64_t data);

/* ---- custom ops: your own kernels ----
   Register an op by name once per context, then call it while tracing with
   tj_custom. A tj_buf describes one input or output: on each device, its
   local block (inside tj_shard_map) or the whole value (outside, where the
   inputs are first made whole). */
typedef struct {
    void *data;                   /* NULL in shape rules                   */
    tj_dtype dtype;
    int rank;
    int64_t dim[TJ_MAXDIM];
    const char *axis[TJ_MAXDIM];  /* axis names                            */
} tj_buf;
typedef struct {
    const char *name;
    int nout;  /* outputs, 1..16 */
    /* Shape rule, NULL: every output has input 0's shape and dtype. Else
       write output j's shape ("batch=4 embed=128") and dtype; return 0, or
       nonzero after writing the reason into shape. */
    int (*shape)(const tj_buf *in, int nin, int j, char *shape, size_t n, tj_dtype *dt, void *user);
    /* CPU kernel; optional CUDA launcher (run on the backend's stream) */
    void (*cpu)(const tj_buf *in, int nin, tj_buf *out, int nout, void *user);
    void (*cuda)(const tj_buf *in, int nin, tj_buf *out, int nout, void *stream, void *user);
    /* Replication rule: which mesh axes (bit i = the i-th axis of the mesh)
       each output varies over, given the inputs' sets. Needed to use the op
       in a checked tj_shard_map; tj_rep_same says "like the union of the
       inputs" (an op that does not communicate). Return nonzero to reject. */
    int (*replication)(const unsigned *in_vary, int nin, unsigned *out_vary, int nout, void *user);
    /* VJP rule, optional: trace the input cotangents gin[i] from the
       inputs, outputs and output cotangents (NULL gin[i]: zero). */
    tj_status (*vjp)(tj_graph *g, int nin, const tj_v *in, int nout, const tj_v *out, const tj_v *ct, tj_v *gin, void *user);
    void *user;
} tj_op_def;
TJDEF tj_status tj_register_op(tj_ctx *ctx, const tj_op_def *def); /* again with the same name: replaces */
TJDEF int tj_rep_same(const unsigned *in_vary, int nin, unsigned *out_vary, int nout, void *user);
#define tj_custom(name, nin, in, out) tj_custom_at(TJ_AT, name, nin, in, out)
TJDEF tj_status tj_custom_at(const char *f, int l, const char *name, int nin, const tj_v *in, tj_v *out);

/* ==== [4] sharding on a device mesh ====================================== */

/* The CPU backend simulates N devices, each a thread with its own memory
   (tj_set_devices, or the environment variable TJ_DEVICES). A mesh names the
   devices' axes: "data=2 model=4" (row-major device order; the product must
   be N). A value's sharding is part of its type: for each of its axes, the
   mesh axes it is split over. Specs are strings "batch:data embed:model",
   "pos:data+model" (a tuple of mesh axes), "vocab:none"; axes not named are
   replicated. While tracing, each op's sharding rule fits its inputs
   together and inserts the collectives it needs (all-gather, psum, reduce-
   scatter) as graph nodes that remember which op and line caused them, so
   autodiff, remat policies and the program text all see them. */
TJDEF tj_status tj_set_devices(tj_ctx *ctx, int n);
TJDEF int tj_devices(tj_ctx *ctx);
/* Set the mesh for everything traced or placed from now on. */
#define tj_set_mesh(ctx, mesh) tj_set_mesh_at(TJ_AT, ctx, mesh)
TJDEF tj_status tj_set_mesh_at(const char *file, int line, tj_ctx *ctx, const char *mesh);
/* Reshard x to `spec` (every axis it names must be an axis of x). The
   collective it inserts is attributed to this call. */
#define tj_with_sharding_constraint(x, spec) tj_with_sharding_constraint_at(TJ_AT, x, spec)
TJDEF tj_v tj_with_sharding_constraint_at(const char *f, int l, tj_v x, const char *spec);
/* Logical axis rules (Levanter's mapping): like a spec, but rules for axes x
   does not have are ignored, so one rule string serves every value. */
#define tj_shard_by_rules(x, rules) tj_shard_by_rules_at(TJ_AT, x, rules)
TJDEF tj_v tj_shard_by_rules_at(const char *f, int l, tj_v x, const char *rules);
/* Outside tracing: a copy of array a placed with `spec` (each device gets
   only its slice). spec NULL or "" replicates. The copy keeps the order of
   the spec's tuples ("batch:model+data"): it lays out the process-local
   blocks as JAX does (tj_array_read_local, [11]). */
#define tj_device_put(a, spec) tj_device_put_at(TJ_AT, a, spec)
TJDEF tj_array *tj_device_put_at(const char *f, int l, tj_array *a, const char *spec);
/* One call for a whole tree, inside or outside tracing: every array (or
   traced value) leaf is placed by the logical `rules`; other leaves are
   untouched. Outside tracing the tree's arrays are replaced. */
#define tj_filter_shard(t, rules) tj_filter_shard_at(TJ_AT, t, rules)
TJDEF tj_status tj_filter_shard_at(const char *f, int l, tj_tree *t, const char *rules);
/* Check a rules string without a value (a command line's, say): the
   parser's errors (TJ_ERR_ARG, "bad partition spec near ...") and warnings
   (a mesh axis the context's mesh lacks but one it has resembles) as
   tj_shard_by_rules and tj_filter_shard would give them; TJ_OK if fine.
   Mesh axes the mesh lacks are skipped, as the rules skip them. */
#define tj_check_rules(ctx, rules) tj_check_rules_at(TJ_AT, ctx, rules)
TJDEF tj_status tj_check_rules_at(const char *f, int l, tj_ctx *ctx, const char *rules);
/* "batch:data embed:-" for a value or an array (buf returned); an array's
   tuples in its spec's order ("batch:model+data"), a value's in mesh order. */
TJDEF const char *tj_v_sharding(tj_v v, char *buf, size_t n);
TJDEF const char *tj_array_sharding(const tj_array *a, char *buf, size_t n);
/* The same for one axis, as a spec writes it: the mesh axes that split
   `axis` of v ("model", "data+model"), or "" when every device holds all
   of it. NULL (buf "") when v has no such axis. */
TJDEF const char *tj_v_axis_sharding(tj_v v, const char *axis, char *buf, size_t n);
/* Collectives of a compiled program, for tests and reports. */
typedef struct {
    char kind[16];      /* all_gather, psum, reduce_scatter, shard_slice   */
    char axes[64];      /* mesh axes                                       */
    int64_t bytes;      /* each device's buffer: all_gather's output, the
                           input of the others (0: shard_slice)           */
    int64_t calls;      /* times it runs per call of the program: the
                           lengths of the scans around it, multiplied     */
    int backward;       /* made by autodiff                                */
    char cause[96];     /* the op (or constraint) whose rule inserted it   */
    const char *file;
    int line;
    int in_dot;         /* runs inside its dot (tj_set_collective_matmul);
                           file:line are then the dot's                */
} tj_collective;
TJDEF int tj_prog_collectives(const tj_prog *p, tj_collective *rows, int max);

/* ---- shard_map's explicit collectives (only inside tj_shard_map; see [7]) ----
   mesh_axes: "model", or several ("data model" / "data+model"). As in JAX,
   a group's ranks (axis_index) and the block order of all_gather,
   psum_scatter and all_to_all follow the order given, the first axis most
   major ("model data" numbers the devices model-major on a "data model"
   mesh), and so does a shard_map spec "batch:model+data"; ppermute's pairs
   are ranks in mesh order whatever the order given (JAX's numbering too).
   In a checked shard_map the input is
   first made to vary over those axes (pvary), so psum of an invariant
   value is n times it, as in JAX. Types change as:
     psum, pmax      varying -> invariant over mesh_axes     (transpose: pvary)
     pvary           invariant -> varying (no data moves)    (transpose: psum)
     all_gather      `axis` grows n times, blocks in rank order  (psum_scatter)
     psum_scatter    sum, then keep this rank's block of `axis`  (all_gather)
     all_to_all      split `split_axis` into n blocks, send block r to rank r,
                     concatenate what arrives along `concat_axis` (all_to_all)
     ppermute        rank pairs[2i] sends to rank pairs[2i+1]; ranks nobody
                     sends to get zeros                       (the inverse)
     axis_index      this device's rank along mesh_axes (i32, varying) */
#define tj_psum(x, mesh_axes) tj_psum_at(TJ_AT, x, mesh_axes)
#define tj_pmax(x, mesh_axes) tj_pmax_at(TJ_AT, x, mesh_axes)
#define tj_pvary(x, mesh_axes) tj_pvary_at(TJ_AT, x, mesh_axes)
#define tj_all_gather(x, mesh_axes, axis) tj_all_gather_at(TJ_AT, x, mesh_axes, axis)
#define tj_psum_scatter(x, mesh_axes, axis) tj_psum_scatter_at(TJ_AT, x, mesh_axes, axis)
#define tj_all_to_all(x, mesh_axes, split_axis, concat_axis) tj_all_to_all_at(TJ_AT, x, mesh_axes, split_axis, concat_axis)
#define tj_ppermute(x, mesh_axes, npairs, pairs) tj_ppermute_at(TJ_AT, x, mesh_axes, npairs, pairs)
#define tj_axis_index(g, mesh_axes) tj_axis_index_at(TJ_AT, g, mesh_axes)
TJDEF tj_v tj_psum_at(const char *f, int l, tj_v x, const char *mesh_axes);
TJDEF tj_v tj_pmax_at(const char *f, int l, tj_v x, const char *mesh_axes);
TJDEF tj_v tj_pvary_at(const char *f, int l, tj_v x, const char *mesh_axes);
TJDEF tj_v tj_all_gather_at(const char *f, int l, tj_v x, const char *mesh_axes, const char *axis);
TJDEF tj_v tj_psum_scatter_at(const char *f, int l, tj_v x, const char *mesh_axes, const char *axis);
TJDEF tj_v tj_all_to_all_at(const char *f, int l, tj_v x, const char *mesh_axes, const char *split_axis, const char *concat_axis);
TJDEF tj_v tj_ppermute_at(const char *f, int l, tj_v x, const char *mesh_axes, int npairs, const int *pairs);
TJDEF tj_v tj_axis_index_at(const char *f, int l, tj_graph *g, const char *mesh_axes);

/* ==== [6] autodiff ======================================================= */

/* Identity in the forward pass, zero gradient. */
#define tj_stop_gradient(x) tj_stop_gradient_at(TJ_AT, x)
TJDEF tj_v tj_stop_gradient_at(const char *f, int l, tj_v x);
/* Identity that names a value, so remat policies and reports can refer to
   it. Gradients flowing through it are not named. */
#define tj_checkpoint_name(x, name) tj_checkpoint_name_at(TJ_AT, x, name)
TJDEF tj_v tj_checkpoint_name_at(const char *f, int l, tj_v x, const char *name);
/* Reverse mode. Given outputs `outs` with cotangents `cts` (NULL: ones, for
   scalar outputs), write d(sum <outs,cts>)/d wrt[i] into grads[i]. The
   backward ops are ordinary nodes of the same graph: they can be printed,
   compiled and differentiated again. A wrt value the outputs do not depend
   on gets zeros. Returns TJ_OK or an error status. */
#define tj_vjp(nout, outs, cts, nwrt, wrt, grads) tj_vjp_at(TJ_AT, nout, outs, cts, nwrt, wrt, grads)
TJDEF tj_status tj_vjp_at(const char *f, int l, int nout, const tj_v *outs, const tj_v *cts, int nwrt, const tj_v *wrt, tj_v *grads);
/* grad of a scalar */
#define tj_grad(loss, nwrt, wrt, grads) tj_grad_at(TJ_AT, loss, nwrt, wrt, grads)
TJDEF tj_status tj_grad_at(const char *f, int l, tj_v loss, int nwrt, const tj_v *wrt, tj_v *grads);
/* Convenience for trees: gradients of scalar `loss` w.r.t. every VALUE leaf
   of `params`, written to `grads` under the same names (non-array leaves are
   copied through). */
#define tj_grad_tree(loss, params, grads) tj_grad_tree_at(TJ_AT, loss, params, grads)
TJDEF tj_status tj_grad_tree_at(const char *f, int l, tj_v loss, const tj_tree *params, tj_tree *grads);

/* custom_vjp(fwd, bwd): out = the outputs fwd traces from in; autodiff
   does not look inside fwd but calls bwd with the nres residuals fwd
   returned and the outputs' cotangents, and gives bwd's gin[i] (NULL:
   zero) to in[i]. Works inside tj_shard_map, scan and remat regions (the
   residuals are ordinary forward values there, so policies decide them).
   A derivative of a derivative (tj_grad of a gradient) differentiates bwd's
   ops, and reaches the outputs y through fwd's ops where the first
   gradient's backward nodes read them (a residual that is y, a product's
   rule), as JAX's grad(grad(f)) does; a cotangent that reaches y through
   forward values alone goes to bwd (JAX: fwd's ops for a value computed
   inside the inner grad, as value_and_grad's value; call the function
   again outside it for bwd there).
   user must stay valid until tj_jit returns. */
typedef void (*tj_vjp_fwd_fn)(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *user);
typedef void (*tj_vjp_bwd_fn)(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *user);
#define tj_custom_vjp(fwd, bwd, user, nin, in, nout, out, nres) tj_custom_vjp_at(TJ_AT, fwd, bwd, user, nin, in, nout, out, nres)
TJDEF tj_status tj_custom_vjp_at(const char *f, int l, tj_vjp_fwd_fn fwd, tj_vjp_bwd_fn bwd, void *user, int nin, const tj_v *in, int nout, tj_v *out,
                                 int nres);

/* The transpose report: every collective and pvary that autodiff put into
   a shard_map body (and each defensive rescaling of an unchecked one),
   with the value it applies to and the rule that required it. */
typedef struct {
    char kind[16];      /* psum, pvary, all_gather, psum_scatter, .., scale */
    char axes[64];      /* mesh axes                                       */
    char value[160];    /* the cotangent it applies to                     */
    char rule[256];     /* why it exists                                   */
    const char *file;   /* the forward op it belongs to                    */
    int line;
} tj_transpose;
TJDEF int tj_prog_transposes(const tj_prog *p, tj_transpose *rows, int max);
TJDEF void tj_prog_transposes_print(const tj_prog *p, FILE *out);

/* ==== [7] control flow: scan ============================================= */

/* scan(body, carry, xs): the body is traced ONCE into a subgraph and run
   `length` times. It receives the carry and one slice of each x (the
   `axis` removed), and returns the next carry (same types) and per-
   iteration outputs y, which come back stacked along `axis` (leading).
   Values of the enclosing function used in the body (weights) are captured
   automatically; every op the body function makes belongs to the body,
   even one on captured values alone, and the body may differentiate with
   respect to them. Its VJP is a reverse scan over the body's VJP; what each
   iteration keeps for the backward pass (its residuals, the carry included)
   is decided by `policy` (NULL: everything_saveable).
   axis: the scanned axis name, e.g. "layer" (length from xs), or
   "layer=12" when there are no xs; at most 2^31-1 iterations.
   tj_scan_reverse (same arguments) is JAX's lax.scan(..., reverse=True):
   iteration i (i = 0 .. length-1) reads slice length-1-i of each x and its
   y is stored at index length-1-i, so the ys come back in the xs' order
   (not reversed); the final carry is the one after the iteration that read
   slice 0. Everything else is tj_scan's: policies (offloaded slices are
   fetched back in the order the iterations read them), gradients (the VJP
   of a reverse scan is a forward scan over the body's VJP), nesting,
   sharding. tj_scan_dir takes the direction as its last argument (0
   forward, nonzero reverse), for a direction chosen at run time. */
typedef struct tj_policy tj_policy;
typedef void (*tj_scan_fn)(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *user);
#define tj_scan(body, user, axis, ncarry, init, nx, xs, ny, final, ys, policy) \
    tj_scan_at(TJ_AT, body, user, axis, ncarry, init, nx, xs, ny, final, ys, policy)
#define tj_scan_reverse(body, user, axis, ncarry, init, nx, xs, ny, final, ys, policy) \
    tj_scan_dir_at(TJ_AT, body, user, axis, ncarry, init, nx, xs, ny, final, ys, policy, 1)
#define tj_scan_dir(body, user, axis, ncarry, init, nx, xs, ny, final, ys, policy, reverse) \
    tj_scan_dir_at(TJ_AT, body, user, axis, ncarry, init, nx, xs, ny, final, ys, policy, reverse)
TJDEF tj_status tj_scan_at(const char *f, int l, tj_scan_fn body, void *user, const char *axis, int ncarry, const tj_v *init, int nx,
                           const tj_v *xs, int ny, tj_v *final, tj_v *ys, const tj_policy *policy);
TJDEF tj_status tj_scan_dir_at(const char *f, int l, tj_scan_fn body, void *user, const char *axis, int ncarry, const tj_v *init, int nx,
                               const tj_v *xs, int ny, tj_v *final, tj_v *ys, const tj_policy *policy, int reverse);

/* A remat region: checkpoint(fn, policy)(in) computes fn(in), and in the
   backward pass keeps only what the policy says, recomputing the rest from
   the region's inputs. It is a scan of length one, so regions and scans
   share one mechanism (and nest in each other). */
typedef void (*tj_region_fn)(tj_graph *g, const tj_v *in, tj_v *out, void *user);
#define tj_checkpoint(fn, user, nin, in, nout, out, policy) tj_checkpoint_at(TJ_AT, fn, user, nin, in, nout, out, policy)
TJDEF tj_status tj_checkpoint_at(const char *f, int l, tj_region_fn fn, void *user, int nin, const tj_v *in, int nout, tj_v *out,
                                 const tj_policy *policy);

/* shard_map(fn, in_specs, out_specs, check): manual SPMD. in[i] is
   resharded to in_specs[i] ("batch:data embed:-"; unnamed axes
   replicated) and fn runs once per device on its local block, with local
   shapes, calling explicit collectives ([4]) as it likes. Output out[i] is
   the blocks fn returns, laid out by out_specs[i]: an axis sharded over
   mesh axes has global size local size x their devices. Values of the
   enclosing function that fn uses are captured whole (replicated).
   Every value inside records the mesh axes it varies over. With check on,
   an out_spec that replicates a value over a mesh axis it varies over is
   an error, and autodiff adds a psum only where a value went from
   invariant to varying. With check off (JAX's check_vma=False) nothing is
   tracked and the transpose is defensive: output cotangents are divided by
   the devices their out_spec replicates over, and input gradients psummed
   over the mesh axes their in_spec does not name. It nests inside traced
   code with automatic sharding (scan bodies included), and scans and remat
   regions nest inside it. It is a scan of length one over a manual body. */
#define tj_shard_map(fn, user, nin, in, in_specs, nout, out, out_specs, check) \
    tj_shard_map_at(TJ_AT, fn, user, nin, in, in_specs, nout, out, out_specs, check)
TJDEF tj_status tj_shard_map_at(const char *f, int l, tj_region_fn fn, void *user, int nin, const tj_v *in, const char *const *in_specs, int nout,
                                tj_v *out, const char *const *out_specs, int check);

/* ==== [8] remat and offload policies ===================================== */

/* After autodiff, a residual is a forward value that the backward pass
   uses. A policy decides, per residual: keep it in device memory, offload
   it to host memory (copied out when made, copied back before its backward
   use), or recompute it in the backward pass from kept values. The policy
   sees the op kind, the names given with tj_checkpoint_name (a scan
   carry is named by the name of the value the body returns for it), and
   the shape. Policies act where they are given: on a tj_scan, a
   tj_checkpoint (a scan of length one) or a tj_shard_map body. A top-level
   program has no policy: the values its own tj_grad needs are saved, as
   in JAX without jax.checkpoint; wrap the part to rematerialise in a
   tj_checkpoint. Nested regions follow JAX: the outermost policy judges
   every value, those inside nested tj_checkpoint regions, scans,
   tj_shard_map bodies and tj_custom_vjp fwds too (an outer
   save_only_these_names("h") keeps an "h" named inside a region whose
   own policy is nothing_saveable; a tj_checkpoint around a scan over
   layers with dots_saveable keeps the body's dots, stacked over the
   layers, and the backward pass re-runs the scan forward for the rest,
   its carries included), and each nested region's or scan's policy
   decides what its own backward pass keeps when the enclosing backward
   pass recomputes it; tj_prog_residuals marks the nested regions' and
   scans' own rows (tj_residual.nested). Policies are plain structs that tj_scan copies; the name
   strings, and the two policies a save_from_both points to, must stay
   valid until tj_jit returns. Logical rules (tj_shard_by_rules,
   tj_filter_shard) skip mesh axes the mesh does not have, so one rule string
   serves every mesh; explicit specs treat them as errors. */
typedef enum { TJ_SAVE = 0, TJ_RECOMPUTE = 1, TJ_OFFLOAD = 2 } tj_decision;
typedef tj_decision (*tj_policy_fn)(const char *op, const char *name, const char *shape, void *user);
typedef enum {
    TJ_POLICY_EVERYTHING_SAVEABLE,
    TJ_POLICY_NOTHING_SAVEABLE,
    TJ_POLICY_DOTS_SAVEABLE,
    TJ_POLICY_DOTS_NO_BATCH_SAVEABLE,
    TJ_POLICY_SAVE_ONLY_THESE_NAMES,
    TJ_POLICY_SAVE_ANY_NAMES_BUT_THESE,
    TJ_POLICY_SAVE_AND_OFFLOAD_ONLY_THESE_NAMES,
    TJ_POLICY_SAVE_FROM_BOTH,
    TJ_POLICY_FN,
    TJ_POLICY_OFFLOAD_DOTS_NO_BATCH
} tj_policy_kind;
struct tj_policy {
    tj_policy_kind kind;
    const char *names;          /* space-separated names to save (or to exclude) */
    const char *offload_names;  /* names to offload (save_and_offload)           */
    const char *offload_dst;    /* memory space to offload to: "host" (default)  */
    const tj_policy *a, *b;     /* save_from_both                                */
    tj_policy_fn fn;            /* TJ_POLICY_FN                                  */
    void *user;
};
TJDEF tj_policy tj_everything_saveable(void);
TJDEF tj_policy tj_nothing_saveable(void);
TJDEF tj_policy tj_dots_saveable(void);
TJDEF tj_policy tj_dots_with_no_batch_dims_saveable(void);
TJDEF tj_policy tj_save_only_these_names(const char *names);
TJDEF tj_policy tj_save_any_names_but_these(const char *names);
TJDEF tj_policy tj_save_and_offload_only_these_names(const char *save, const char *offload);
/* saves what either saves; offloads what either offloads and none saves */
TJDEF tj_policy tj_save_from_both(const tj_policy *a, const tj_policy *b);
TJDEF tj_policy tj_policy_from_fn(tj_policy_fn fn, void *user);
/* JAX's offload_dot_with_no_batch_dims: offloads the outputs of dots that
   have no batch axes (axes both operands share), recomputes the rest */
TJDEF tj_policy tj_offload_dot_with_no_batch_dims(void);

/* The saved-residuals report (JAX's print_saved_residuals, but after every
   decision): one row per residual of every differentiated scan. */
typedef struct {
    char name[64];      /* checkpoint name, or ""                          */
    char op[32];        /* op that made it ("param" for a carry)           */
    char shape[160];    /* named shape of one iteration's value            */
    int64_t bytes;      /* bytes over all iterations, of the global value
                           (every device's block together), as JAX's
                           saved_residuals shows global shapes           */
    tj_decision decision;
    char rule[160];     /* why                                             */
    const char *file;   /* where the value was made                        */
    int line;
    int carry;          /* 1: the value is a scan carry                    */
    char via[96];       /* "" if the backward pass uses the value itself;
                           else the recomputed value whose recomputation
                           needs it ("hidden (name) at f.c:12"): a chain
                           member, whose bytes a total of recomputed
                           values should not count again                 */
    int64_t device_bytes; /* one device's share of bytes: what its memory
                           plan holds (= bytes on one device)            */
    int nested;         /* 1: a decision of a region (or scan with a
                           policy) nested in a region or scan with a
                           policy: what its own backward pass keeps when
                           the enclosing backward pass re-runs it. The
                           rows with nested = 0 are what crosses the
                           outermost boundary: JAX's saved_residuals */
} tj_residual;
/* Number of residual rows of p; copies up to max into rows. */
TJDEF int tj_prog_residuals(const tj_prog *p, tj_residual *rows, int max);
TJDEF void tj_prog_residuals_print(const tj_prog *p, FILE *out);
/* Policy lint: names a policy mentions that no residual carries, and
   policies that decide nothing differently from saving everything. Returns
   the number of warnings; writes them, one per line, into buf. */
TJDEF int tj_prog_lint(const tj_prog *p, char *buf, size_t n);

/* ==== [11] backends ====================================================== */

/* One interface for every backend. Memory space 0 is device memory, 1 is
   host memory (the offload target). The CPU backend is built in and used
   when none is set; tinyjax_cuda.cu provides tj_cuda_backend(), and
   TJ_BACKEND=devsim in the environment gives every new context the
   device-like CPU backend (tj_devsim_backend). The runner ([11]) owns the
   control flow: it runs scan iterations (and so tj_checkpoint and
   tj_shard_map regions), projections, views and moves between memory
   spaces (offload, fetch, a scan's staged slices and final carry) itself,
   through these calls, so a backend only allocates, copies, runs one node
   and waits. A kernel call describes one node: op id, local shapes of
   inputs and output, buffers (see struct tj__kern in the implementation).
   Ordering: each device `dev` (0 .. devices-1) has one stream; run(k) and
   copy(dev, ..) are queued on it (k->dev) and run in the order issued, and
   may still be running when the call returns. dev -1 means "no particular
   device": copy(-1, ..) waits for every device's work, copies, and returns
   when the bytes have landed (arrays in and out of tj_run); alloc and free
   with -1 are not ordered (free waits for the work that may use p). The
   host reaches device and host-space memory only through copy: a pointer
   from alloc may not be host-addressable. */
typedef struct tj_backend tj_backend;
struct tj__kern;
struct tj_backend {
    const char *name;
    void *state;
    void *(*alloc)(tj_backend *b, int dev, int space, size_t bytes); /* NULL on failure */
    void (*free)(tj_backend *b, int dev, int space, void *p);
    /* copy bytes between spaces (TJ_SPACE_USER: the caller's plain memory);
       returns 0, or nonzero when the copy could not be issued */
    int (*copy)(tj_backend *b, int dev, void *dst, int dst_space, const void *src, int src_space, size_t bytes);
    /* run one node on device k->dev; returns 0, or nonzero after writing a
       message to k->err. A kernel error found later (a bad index) comes
       back from sync. */
    int (*run)(tj_backend *b, struct tj__kern *k);
    /* wait until device dev's work (-1: every device's) is done; returns 0,
       or nonzero after writing the first error since the last sync into
       err[errlen] (kernels after a kernel error are skipped, collectives
       excepted, so peers are not left waiting) */
    int (*sync)(tj_backend *b, int dev, char *err, size_t errlen);
    /* nonzero: run() also takes fused groups (k->n->members; the group's
       leaf inputs in k->in[member * 3 + j], NULL where a member reads
       another member, its stores in k->pout[member], NULL if none); zero:
       programs for this backend are compiled with one node per kernel */
    int fused_groups;
    /* Optional (NULL: every copy goes through copy, on the device's stream).
       copy_async queues a copy on device dev's copy stream, after the work
       issued to its compute stream so far, and returns its ticket (> 0; 0:
       not issued); tickets of a device grow in issue order. wait makes
       device dev's compute stream wait, before its later work, for the
       copies up to `ticket` (0, or nonzero after writing err). sync waits for
       the copy stream too. The runner sends offload, fetch and a scan's
       staged slices (the next iteration's, while this one runs) there, and
       calls wait before the first work that reads or writes a pending
       copy's destination or writes its source. */
    uint64_t (*copy_async)(tj_backend *b, int dev, void *dst, int dst_space, const void *src, int src_space, size_t bytes);
    int (*wait)(tj_backend *b, int dev, uint64_t ticket, char *err, size_t errlen);
    /* Optional (NULL: profiles time each call on the host). mark records a
       time stamp on device dev's compute (stream 0) or copy (stream 1)
       stream, after the work issued to it so far (on the copy stream, also
       after the compute stream's, as a copy), and returns its index: 0, 1,
       ... since the last mark_times (-1: none). After sync, mark_times
       writes the times of the device's first n marks in microseconds from
       mark 0 into us, forgets them, and returns how many it wrote. */
    int (*mark)(tj_backend *b, int dev, int stream);
    int (*mark_times)(tj_backend *b, int dev, double *us, int n);
};
/* space ids for tj_backend */
#define TJ_SPACE_DEVICE 0
#define TJ_SPACE_HOST 1
#define TJ_SPACE_USER (-1) /* caller memory (for copies) */
/* Use backend b for arrays and programs created from now on (NULL: CPU).
   A program runs on the backend it was compiled for (tj_jit fuses and
   places for it): tj_run of a program compiled before the switch is
   refused with an error naming both backends; call tj_jit again. Arrays
   stay on the backend that made them: reading, saving or running on one
   of another backend is refused the same way (freeing it works). A
   backend without name, alloc, free, copy, run or sync is refused. */
TJDEF void tj_set_backend(tj_ctx *ctx, tj_backend *b);
/* In tinyjax_cuda.cu: a backend for CUDA device `device`, or NULL with a
   reason in err (no GPU, driver too old, ...). */
TJDEF tj_backend *tj_cuda_backend(int device, char *err, size_t errlen);
TJDEF void tj_cuda_backend_free(tj_backend *b);
/* In tinyjax_cuda.cu, no GPU needed: one line per op of the op table, "name:
   how" (kernel, runner, view, or why it has no CUDA path yet) into buf;
   returns the number of ops with no entry at all; *gaps the known gaps. */
TJDEF int tj_cuda_op_coverage(char *buf, size_t n, int *gaps);
/* The device-like CPU backend (tests the runner without a GPU): device and
   host-space memory the host cannot dereference (pointers are poisoned:
   any direct read or write faults), two streams per device (compute, and
   copies for copy_async), each run by a worker thread, so kernels and
   copies run asynchronously in issue order, ordered across the two by
   events; kernel errors come back at sync. Free it after the arrays and
   programs of the contexts that use it. */
TJDEF tj_backend *tj_devsim_backend(void);
TJDEF void tj_devsim_backend_free(tj_backend *b);

/* ---- transports and processes: where devices meet ----
   A transport is the only place devices exchange data. A collective kernel
   packs the device's strided block into planned scratch, calls the
   transport on contiguous buffers, and unpacks. Groups are made once per
   program (at tj_jit) by a split: the devices with the same color (their
   coordinates off the collective's mesh axes) form a group, ranked by key
   (their rank along those axes), so rank r of a group is the device of rank
   r along the axes, in mesh order. Built in: "threads" (the devices of one
   process meet in shared memory, in a fixed order) and, compiled with
   -DTJ_MPI (mpicc), "mpi" (devices of other processes are reached through
   MPI; those of this process still through shared memory). Both reduce in
   rank order in the same arithmetic (all_reduce: in double, rounded once;
   reduce_scatter: rounded after each add, as the kernels always did), so
   any placement of devices on processes gives the same bits. A GPU
   transport (NCCL: tj_nccl_transport_new below) implements the same table:
   `stream` is the device's compute stream, the one whose work made `send`
   and will read `recv` (NULL on the CPU, and for a blocking call); the
   transport runs the collective on a communication stream of its own,
   ordered after `stream`'s work and before its later work by events, and
   returns at once. Every function returns 0, or nonzero after writing a
   message into err[errlen]. */
typedef enum { TJ_REDUCE_SUM = 0, TJ_REDUCE_MAX = 1 } tj_reduce_op;
typedef struct tj_transport tj_transport;
struct tj_transport {
    const char *name;
    void *state;
    int nprocs, rank; /* processes, and this one's index                  */
    double timeout_s; /* a wait longer than this is an error               */
    /* Split: this process's n devices dev[i] give color[i] and key[i]; the
       handle of dev[i] in its group goes to comm[i]. Every process calls it
       at the same point (it is collective over processes). */
    int (*split)(tj_transport *t, int n, const int *dev, const int *color, const int *key, void **comm, char *err, size_t errlen);
    void (*comm_free)(tj_transport *t, void *comm);
    /* Collectives: every member of the group calls, from its device's
       thread. recv of all_gather and all_to_all holds one block per rank,
       in rank order; reduce_scatter's send holds one block of count
       elements per rank, and rank r receives the reduction of block r.
       send_recv: send to rank `to`, receive from rank `from` (-1: none). */
    int (*all_gather)(tj_transport *t, void *comm, const void *send, void *recv, size_t bytes, void *stream, char *err, size_t errlen);
    int (*all_reduce)(tj_transport *t, void *comm, const void *send, void *recv, size_t count, tj_dtype dt, tj_reduce_op op, void *stream, char *err,
                      size_t errlen);
    int (*reduce_scatter)(tj_transport *t, void *comm, const void *send, void *recv, size_t count, tj_dtype dt, tj_reduce_op op, void *stream,
                          char *err, size_t errlen);
    int (*all_to_all)(tj_transport *t, void *comm, const void *send, void *recv, size_t bytes, void *stream, char *err, size_t errlen);
    int (*send_recv)(tj_transport *t, void *comm, const void *send, int to, void *recv, int from, size_t bytes, void *stream, char *err, size_t errlen);
    /* Between processes, host memory, blocking: recv gets every process's
       `bytes` in process order (agreement on programs and errors, gathers
       of arrays). */
    int (*proc_allgather)(tj_transport *t, const void *send, void *recv, size_t bytes, char *err, size_t errlen);
    void (*free)(tj_transport *t);
};

/* Process mode (jax.distributed.initialize): run the same program in N
   processes, e.g. `mpirun -np 4 ./prog`. Each process owns a contiguous
   block of the mesh's devices (devices / N of them, each a thread);
   tracing, autodiff and planning are global and identical in every
   process, which runs only its own devices. Arrays hold only the shards of
   local devices. Safety: at tj_jit the processes agree on a hash of the
   compiled program (a mismatch is an error in every process); an error in
   one process during tj_run (out of memory, a bad index) makes tj_run
   return an error naming it in every process, because a failed device
   keeps taking part in collectives without computing; a wait longer than
   the timeout ends the run with a message naming the collective and the
   line that caused it. A process stopped by the launcher (its peer died)
   prints the collective it was in.
   tj_distributed_init reads nprocs and rank from opts, else from the
   launcher's environment (OMPI_COMM_WORLD_SIZE/RANK, PMI_SIZE/RANK, or
   TJ_NPROCS/TJ_RANK); with one process it does nothing. Without TJ_MPI a
   multi-process launch is an error unless opts gives a transport. If the
   context still has one device (no tj_set_devices, no TJ_DEVICES), it gets
   one device per process. Timeout: opts, else TJ_TIMEOUT seconds, else 300.
   If tinyjax initialized MPI it finalizes it at exit, or earlier with
   tj_distributed_shutdown() (after a timeout broke the transport, it
   aborts the job instead: a finalize could wait forever). */
typedef struct {
    int nprocs, rank;        /* 0, 0: from the environment                  */
    double timeout_s;        /* 0: TJ_TIMEOUT or 300                        */
    tj_transport *transport; /* NULL: MPI (TJ_MPI builds)                   */
} tj_distributed_opts;
TJDEF tj_status tj_distributed_init(tj_ctx *ctx, const tj_distributed_opts *opts);
TJDEF void tj_distributed_shutdown(void);
TJDEF int tj_process_count(tj_ctx *ctx);
TJDEF int tj_process_index(tj_ctx *ctx);
/* number of this process's devices; *first gets the first one's index */
TJDEF int tj_local_devices(tj_ctx *ctx, int *first);
TJDEF const char *tj_transport_name(tj_ctx *ctx);
/* The built-in threads transport, for wrapping (e.g. to count or trace
   calls) and passing as tj_distributed_opts.transport; free with t->free. */
TJDEF tj_transport *tj_threads_transport_new(double timeout_s);
/* The NCCL transport (defined in tinyjax_cuda.cu when compiled with -DTJ_NCCL;
   link -lnccl): each process drives gpus_per_process GPUs (0: one), the
   unique id by MPI_Bcast (TJ_MPI under mpirun), else TJ_COORD=host:port or
   a shared file's path; timeout_s 0: TJ_TIMEOUT or 300; deterministic 1
   reduces in rank order as the CPU transports do (-1: TJ_NCCL_DETERMINISTIC).
   NULL and a message in err on failure. tj_run reaches it from a context
   on tj_cuda_backend after tj_distributed_init(ctx, &opts) with
   opts.transport = it: the CUDA collective kernels pass device pointers and
   the compute stream. The backend must run on the GPU the transport picked
   for this process (one GPU per process with tj_cuda_backend). */
TJDEF tj_transport *tj_nccl_transport_new(int gpus_per_process, double timeout_s, int deterministic, char *err, size_t errlen);
/* The CUDA device an NCCL transport picked for this process's local GPU i
   (the node's local rank: pass it to tj_cuda_backend). */
TJDEF int tj_nccl_transport_gpu(const tj_transport *t, int i);
/* Arrays across processes. An array "spans processes" when some of its
   shards live only on other processes' devices; tj_array_read of such an
   array is an error. tj_array_read_all gathers it into every process (all
   processes must call it; without processes it is tj_array_read).
   tj_device_put and tj_tree_save call it when needed, so call them in every
   process too; tj_tree_save writes the file from process 0 and every
   process returns process 0's status. Make an array from each process's
   block of the data with tj_array_from_local (JAX's
   make_array_from_process_local_data: each process reads only its part of
   a batch; `shape` is the global shape) and read it back with
   tj_array_read_local. The process-local block is JAX's: along each axis
   a device holds the global block of its rank along the axis's mesh axes
   in the order the spec lists them, the FIRST most major ("batch:model+
   data" on "data=2 model=2": block m*2+d on the device data=d model=m),
   and a process's block is, per axis, the sorted distinct blocks its
   devices hold, concatenated (2 processes of 2 devices on that mesh:
   process 0 gives blocks 0 and 2 of batch, process 1 blocks 1 and 3; a
   grid of blocks, not always a box of the array). The array keeps the
   spec's order (tj_array_sharding prints it; tj_device_put,
   tj_array_abstract and tj_filter_shard's rules set it too), while its
   shards stay in mesh order ([4]) for the programs; so with a tuple out
   of mesh order a process's block may be held by other processes'
   devices, and then the blocks a process lacks move between processes
   (one all-gather of just those): call tj_array_from_local and
   tj_array_read_local in every process (they move no data where each
   process's devices hold its block). */
TJDEF int tj_array_spans_processes(const tj_array *a);
TJDEF tj_status tj_array_read_all(tj_array *a, tj_dtype dt, void *dst);
/* the shape of this process's block: "batch=4 pos=64" into buf */
TJDEF const char *tj_array_local_shape(const tj_array *a, char *buf, size_t n);
TJDEF tj_status tj_array_read_local(tj_array *a, tj_dtype dt, void *dst);
#define tj_array_from_local(ctx, dt, shape, spec, data) tj_array_from_local_at(__FILE__, __LINE__, ctx, dt, shape, spec, data)
TJDEF tj_array *tj_array_from_local_at(const char *file, int line, tj_ctx *ctx, tj_dtype dt, const char *shape, const char *spec, const void *data);
/* What the transport did, summed over this process's devices since the
   context was made: collective calls, bytes the devices sent to other
   devices, bytes this process sent to other processes, and the seconds
   device threads spent inside the transport (waiting included); and the
   runs whose devices ran as fibers ([11]: simulated devices as fibers)
   and the times one of them handed its worker thread to another. */
typedef struct {
    int64_t collectives, bytes_sent, wire_bytes;
    double transport_s;
    int64_t fiber_runs, fiber_switches;
} tj_transport_stats;
TJDEF tj_transport_stats tj_get_transport_stats(tj_ctx *ctx);
/* Collective matmul. Simulated devices of one process share its memory, so
   a dot whose operand is all-gathered can read the peers' blocks where
   they are, and a dot whose result is reduce-scattered can compute each
   device's block from every peer's operands, summing inside the matmul:
   neither the gathered operand nor the whole partial product is made, and
   no separate pass copies or adds them (XLA's collective matmul overlaps
   the same pairs between GPUs). tj_jit turns such a pair into one node
   (all_gather_dot, dot_scatter in the program text; tj_prog_collectives
   still lists the collective, with in_dot set) when the program runs on
   the CPU backend in one process over the built-in threads transport, for
   f32 and bf16 dots. The products are the same; their sums are rounded in
   another order than the separate collective's: dot_scatter adds every
   device's terms in one chain, as the one-device dot does, where the
   reduce_scatter adds the devices' rounded partial products. 0 turns it
   off (then processes under MPI give the same bits as simulated devices);
   it is read at tj_jit. Default: on; TJ_NO_COLL_MATMUL=1 in the environment
   turns it off too (to compare). tj_get_collective_matmul: 1 when a
   program tj_jit compiles now would use it (on, and the context as above,
   with more than one device). */
TJDEF void tj_set_collective_matmul(tj_ctx *ctx, int on);
TJDEF int tj_get_collective_matmul(tj_ctx *ctx);

/* ==== [12] jit =========================================================== */

typedef void (*tj_fn)(tj_graph *g, const tj_tree *in, tj_tree *out, void *user);

typedef struct {
    /* space-separated input leaf names (or prefixes ending in '.') whose
       buffers an output of the same shape and dtype may reuse; after a run
       those arrays are deleted. */
    const char *donate;
} tj_jit_opts;

/* Memory analysis of a compiled program, per device, in bytes. peak is the
   most live at once: arguments + outputs + temp arena - donated. */
typedef struct {
    int64_t argument_bytes, output_bytes, alias_bytes, temp_bytes, peak_bytes;
    int64_t host_temp_bytes; /* host memory space (offload)               */
    int64_t pack_bytes;      /* of temp: the CPU matmul's pack buffers (per
                                thread, in the workspace of each dot)     */
} tj_memory_analysis;

/* Trace fn on the structure, shapes and dtypes of `example` and compile it.
   Returns NULL (and sets the context error) if tracing or compiling fails. */
#define tj_jit(ctx, name, fn, user, example, opts) tj_jit_at(TJ_AT, ctx, name, fn, user, example, opts)
TJDEF tj_prog *tj_jit_at(const char *file, int line, tj_ctx *ctx, const char *name, tj_fn fn, void *user,
                         const tj_tree *example, const tj_jit_opts *opts);
/* Run on arrays whose tree matches the example's names, shapes and dtypes.
   The example's non-array leaves were constants of the trace: a leaf of the
   same name in `in` must have the same value (else TJ_ERR_ARG; tj_jit again).
   Fills `out` with new arrays (and the non-array leaves the function set). */
#define tj_run(p, in, out) tj_run_at(TJ_AT, p, in, out)
TJDEF tj_status tj_run_at(const char *file, int line, tj_prog *p, const tj_tree *in, tj_tree *out);
/* What tj_run would put in `out`, without running (jax.eval_shape): an
   abstract array (tj_array_abstract) of each output's dtype, shape and
   sharding, and the non-array leaves. */
TJDEF tj_status tj_prog_output_shapes(const tj_prog *p, tj_tree *out);
TJDEF void tj_prog_free(tj_prog *p);
TJDEF tj_memory_analysis tj_prog_memory(const tj_prog *p);
/* Estimated floating point ops of one call (from each op's cost rule). */
TJDEF double tj_prog_flops(const tj_prog *p);

/* ==== [13] program text ================================================== */

/* The scheduled program: one line per node with op, named shape, dtype,
   buffer offset, and the caller's file:line. */
TJDEF void tj_prog_print(const tj_prog *p, FILE *out);
TJDEF void tj_graph_print(tj_graph *g, FILE *out);
TJDEF void tj_memory_print(const tj_prog *p, FILE *out);
/* Profiling: with tj_set_profile(ctx, 1), each run records a timeline, one
   event per kernel, fused group, collective and memory-space copy on every
   device (scan bodies included, each iteration). tj_prog_events returns the
   last run's events; tj_prog_write_trace writes them as a Chrome trace /
   Perfetto JSON file (a track per device and stream), atomically. On a
   backend with device time stamps (tj_backend.mark: CUDA events, devsim)
   the times are the device's, read once at the end of the run. */
typedef struct {
    int device;
    char op[24];      /* op name ("dot", "all_gather", "offload", "fused x4") */
    char what[64];    /* the collective's cause, or the node id             */
    const char *file; /* the source line that made the node                 */
    int line;
    double start_us, dur_us; /* from the start of the run                   */
    int kind;         /* 0 kernel, 1 collective, 2 copy between spaces       */
    int stream;       /* the device's compute stream (0) or copy stream (1)  */
} tj_event;
TJDEF void tj_set_profile(tj_ctx *ctx, int on);
TJDEF int tj_prog_events(const tj_prog *p, tj_event *rows, int max);
TJDEF tj_status tj_prog_write_trace(const tj_prog *p, const char *path);

/* ==== [A] appendix: files, JSON, safetensors ============================ */

/* Helpers for files and text, the ones the safetensors code below is built
   from. They need no context: a failing call returns TJ_ERR_IO (TJ_ERR_OOM
   when memory runs out) and writes a one-line message naming the file and
   the problem into err (errlen bytes; err may be NULL). Memory they hand
   back comes from TJ_MALLOC: release it with tj_free. */
TJDEF void tj_free(void *p);
/* The whole file into memory: *data holds *len bytes plus a NUL after them
   (text can be used as a C string). A directory, a missing file or a read
   error is TJ_ERR_IO. */
TJDEF tj_status tj_read_file(const char *path, char **data, size_t *len, char *err, size_t errlen);
/* Write len bytes to path atomically: "<path>.tmp.<pid>.<k>" (locked while
   it is written), fsync, rename over path, fsync the directory; a crash
   leaves the old file or the new one, never part of one. Temp files that
   writers killed mid-write left are removed first. A failed write, fsync or
   rename is TJ_ERR_IO, and the temp file is removed. */
TJDEF tj_status tj_write_file_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* A growable string buffer: zero it (tj_strbuf b = {NULL, 0, 0, 0}), append,
   use b.p (NUL-terminated, b.n bytes; NULL while empty), tj_strbuf_free.
   Out of memory (or a length past SIZE_MAX / 4) sets b.oom and later
   appends do nothing; appending NULL appends nothing. */
typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} tj_strbuf;
TJDEF void tj_strbuf_put(tj_strbuf *b, const char *s, size_t n);
TJDEF void tj_strbuf_puts(tj_strbuf *b, const char *s);
TJDEF void tj_strbuf_printf(tj_strbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* s as a JSON string literal: quoted, with '"', '\\' and control characters
   escaped; other bytes (UTF-8) as they are. s NULL: "". */
TJDEF void tj_strbuf_json(tj_strbuf *b, const char *s);
TJDEF void tj_strbuf_free(tj_strbuf *b);

/* UTF-8: the length of the valid sequence at s (n bytes available) and its
   code point in *cp, or 0 when invalid (overlong, surrogate, > U+10FFFF,
   truncated); and code point c encoded into o (4 bytes room), returning
   its length (0 for c > U+10FFFF). */
TJDEF size_t tj_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
TJDEF size_t tj_utf8_encode(uint32_t c, char *o);

/* A strict JSON reader (RFC 8259: valid UTF-8, paired surrogates, nesting
   at most 64 deep) that walks the text as a cursor, for callers that know
   the schema they want: no tree is built. Every function skips white space
   first. An error is TJ_ERR_IO with the message "<label>: bad <what> at
   byte <k>: <problem>" (what is "JSON" unless set) in (err, errlen), like
   the file helpers, and in ctx too when it is set. A NULL cursor is
   TJ_ERR_ARG (-1 from the functions that return int).
       tj_json j;
       char *key, err[256];
       int first = 1, r;
       tj_json_init(&j, text, len, "config.json", err, sizeof err);
       if (tj_json_expect(&j, '{')) return error(err);
       while ((r = tj_json_object_next(&j, &first, &key)) == 1) {
           if (strcmp(key, "n_layer") == 0) r = tj_json_number(&j, &x) ? -1 : 1;
           else r = tj_json_skip(&j) ? -1 : 1;
           tj_free(key);
           if (r < 0) break;
       }
       if (r < 0) return error(err);                                      */
typedef struct {
    const unsigned char *s;
    size_t n, i;       /* the text, its length, the cursor                  */
    size_t base;       /* offset of s[0] in its file, for messages          */
    const char *label; /* names the text in messages (a file name)          */
    const char *what;  /* "JSON", or e.g. "safetensors header"              */
    char *err;         /* where messages go (NULL: nowhere), errlen bytes   */
    size_t errlen;
    tj_ctx *ctx;       /* NULL, or a context that records errors too        */
    int depth;
} tj_json;
TJDEF void tj_json_init(tj_json *j, const char *text, size_t len, const char *label, char *err, size_t errlen);
/* The next byte after white space, -1 at the end (nothing consumed). */
TJDEF int tj_json_peek(tj_json *j);
/* Consume the byte c (one of {}[]:,), else an error. */
TJDEF tj_status tj_json_expect(tj_json *j, char c);
/* A string into *out (NUL-terminated, from TJ_MALLOC; *len bytes, which may
   include a \u0000); out NULL only checks it. tj_json_cstring refuses a
   \u0000, so the result is a C string. */
TJDEF tj_status tj_json_string(tj_json *j, char **out, size_t *len);
TJDEF tj_status tj_json_cstring(tj_json *j, char **out);
/* A number as a double; an integer in 0..2^64-1 with no fraction or
   exponent; true / false / null as 1 / 0 / -1. */
TJDEF tj_status tj_json_number(tj_json *j, double *v);
TJDEF tj_status tj_json_u64(tj_json *j, uint64_t *v);
TJDEF tj_status tj_json_literal(tj_json *j, int *v);
/* Members of an object whose '{' was consumed, with first = 1 before the
   first call: 1 = a member, *key read (a C string: tj_free it) and ':'
   consumed, its value next; 0 = the closing '}' consumed; -1 = an error.
   tj_json_array_next is the same for the elements of an array after its
   '[' (no key). */
TJDEF int tj_json_object_next(tj_json *j, int *first, char **key);
TJDEF int tj_json_array_next(tj_json *j, int *first);
/* Skip one value of any kind, checking it all the same. */
TJDEF tj_status tj_json_skip(tj_json *j);
/* Report a schema error at the cursor ("field x: expected an integer"),
   with the same prefix as the reader's own errors; returns TJ_ERR_IO. */
TJDEF tj_status tj_json_fail(tj_json *j, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Safetensors files: an 8-byte little-endian header length, a JSON header
   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...,
   "__metadata__": {"key": "value", ...}}, then the data section. The reader
   is as strict as the reference implementation (valid UTF-8, no duplicate
   names, offsets tile the data section with no holes or overlaps, bounded
   nesting) and never crashes on a corrupt file: every problem is a
   TJ_ERR_IO whose message names the file and the problem (a directory
   given as a file included). Writes are atomic: "<path>.tmp.<pid>.<k>"
   (locked while it is written), fsync, rename over <path>, fsync the
   directory, so a crash leaves the old file or the new one; the next write
   to <path> removes the temp files that writers killed mid-write left.

   tj_tree_save writes each array leaf as a tensor named by its leaf path
   and keeps everything else in __metadata__: "tinyjax.order" (leaf names
   in order, one per line), "tinyjax.axes.<leaf>" ("batch,embed"),
   "tinyjax.int.<leaf>", "tinyjax.float.<leaf>", "tinyjax.string.<leaf>",
   and "tinyjax.checksum", a 64-bit hash of the whole file that the reader
   verifies, so a flipped byte anywhere is an error. Axis names of saved
   arrays are at most 64 characters, the readers' limit: tj_tree_save
   refuses longer ones (TJ_ERR_ARG), so every file it writes loads. tj_tree_load restores
   the same leaves: an array leaf already in the tree must have the file's
   dtype and named shape exactly (else an error naming the leaf) and is
   replaced by an array with its sharding, abstract leaves included (a
   restore with target shardings: each device gets only its block; in
   process mode every process reads the file, whose checksum covers all of
   it, and places its own devices' blocks; a leaf sharded under an earlier
   mesh is an error); other leaves replace or are appended in file order,
   replicated. tj_tree_save gathers sharded leaves (from every process) and
   writes whole tensors. It loads everything or nothing: on an error
   the tree is unchanged. Files without tinyjax metadata (e.g. Hugging
   Face checkpoints) load as array leaves in header order, with the axis
   names of the tree's existing leaf, else "d0,d1,..". */
typedef enum {
    TJ_ST_F32, TJ_ST_BF16, TJ_ST_F16, TJ_ST_F64, TJ_ST_I64, TJ_ST_I32, TJ_ST_I16, TJ_ST_I8,
    TJ_ST_U64, TJ_ST_U32, TJ_ST_U16, TJ_ST_U8, TJ_ST_BOOL, TJ_ST_NDTYPE
} tj_st_dtype;
typedef struct tj_safetensors tj_safetensors; /* a parsed file; owns its bytes */
typedef struct {
    const char *name;
    tj_st_dtype dtype;
    int rank;
    int64_t shape[TJ_MAXDIM];
    int64_t numel;
    size_t nbytes;
    const void *data; /* into the file's bytes: little-endian, maybe unaligned */
} tj_st_tensor;
typedef struct {      /* one tensor for tj_st_save */
    const char *name;
    tj_st_dtype dtype;
    int rank;
    const int64_t *shape; /* rank sizes (>= 0); may be NULL when rank is 0 */
    const void *data;     /* numel * item size bytes, little-endian          */
} tj_st_entry;
TJDEF const char *tj_st_dtype_name(tj_st_dtype d);          /* "F32", "BF16", .. */
TJDEF size_t tj_st_dtype_size(tj_st_dtype d);               /* 0 if invalid      */
TJDEF tj_st_dtype tj_st_dtype_from_name(const char *name);  /* TJ_ST_NDTYPE if unknown */
TJDEF tj_st_dtype tj_st_dtype_of(tj_dtype dt);              /* TJ_F32 -> TJ_ST_F32 .. */
/* Parse a file (load) or a copy of bytes (parse; label names it in
   messages). NULL and the context error on a missing or corrupt file. */
TJDEF tj_safetensors *tj_st_load(tj_ctx *ctx, const char *path);
TJDEF tj_safetensors *tj_st_parse(tj_ctx *ctx, const void *bytes, size_t len, const char *label);
TJDEF void tj_st_free(tj_safetensors *st);
TJDEF int tj_st_count(const tj_safetensors *st);                      /* tensors */
TJDEF const tj_st_tensor *tj_st_at(const tj_safetensors *st, int i);  /* header order */
TJDEF const tj_st_tensor *tj_st_find(const tj_safetensors *st, const char *name); /* NULL if absent, no error */
/* Like find, but NULL and an error naming the file if the tensor is missing,
   has another dtype, or another shape (shape NULL: only the rank counts). */
TJDEF const tj_st_tensor *tj_st_expect(const tj_safetensors *st, const char *name, tj_st_dtype dt, int rank, const int64_t *shape);
TJDEF int tj_st_meta_count(const tj_safetensors *st);
TJDEF const char *tj_st_meta_key(const tj_safetensors *st, int i);
TJDEF const char *tj_st_meta(const tj_safetensors *st, const char *key); /* NULL if absent */
/* Every element as float, whatever the dtype (alignment and endian safe). */
TJDEF tj_status tj_st_to_f32(const tj_st_tensor *t, float *out);
/* A new array of dtype dt from tensor `name` (any dtype, converted), its
   axes named in order by `axes` ("vocab embed"). NULL and an error if the
   tensor is missing, has a zero size, or the axis count is not its rank. */
TJDEF tj_array *tj_st_array(const tj_safetensors *st, const char *name, tj_dtype dt, const char *axes);
/* Write n tensors and n_meta metadata pairs (meta_kv[2i] = key, [2i+1] =
   value, UTF-8) atomically. Data is laid out by decreasing item size, so
   every tensor of a file written here is naturally aligned. */
TJDEF tj_status tj_st_save(tj_ctx *ctx, const char *path, const tj_st_entry *tensors, int n, const char *const *meta_kv, int n_meta);


#endif /* TINYJAX_H */

/* ======================================================================== */
/*                            IMPLEMENTATION                                 */
/* ======================================================================== */
#ifdef TINYJAX_IMPLEMENTATION
#ifndef TINYJAX_IMPLEMENTATION_DONE
#define TINYJAX_IMPLEMENTATION_DONE

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <sys/time.h>
/* x86-64 with gcc or clang: the hot kernels (sgemm, float elementwise math)
   have AVX-512 / AVX2 versions compiled with target attributes, chosen at
   run time, so a plain -O2 build uses the wide units */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <cpuid.h>
#define TJ__X86 1
#else
#define TJ__X86 0
#endif
/* gcc vectorises a loop at -O2 only where it needs no remainder loop (its
   "very cheap" cost model), so the chunk loops of the elementwise, row and
   fused kernels, whose length is any n, stayed scalar in -O2 builds (the
   GPT-2 step 1.5x slower than at -O3). The implementation asks for -O3's
   vectoriser, whatever the command line says; the results do not change
   (it adds no contraction and no reassociation). */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

#if defined(TJ_MALLOC) && defined(TJ_REALLOC) && defined(TJ_FREE)
#elif !defined(TJ_MALLOC) && !defined(TJ_REALLOC) && !defined(TJ_FREE)
#define TJ_MALLOC(sz) malloc(sz)
#define TJ_REALLOC(p, sz) realloc(p, sz)
#define TJ_FREE(p) free(p)
#else
#error "define all of TJ_MALLOC, TJ_REALLOC, TJ_FREE or none"
#endif

/* ==== [1] basics: status, errors, allocation, dtypes, named shapes ======= */
/* Axis names are interned into small integers per context, so shapes are
   cheap to compare. A value's type is a tj__type: dtype, rank, and per axis
   a name id and a global size. Sharding (per-axis mesh axes) and the set of
   mesh axes a value varies over live in the type too, so every stage after
   tracing sees them. */

#define TJ__MAXNAMES 256
#define TJ__MSG 1024
#define TJ__ALIGN 64

#define TJ__MAXMESH 6
typedef struct {
    tj_dtype dt;
    int rank;
    int ax[TJ_MAXDIM];       /* axis name ids                             */
    int64_t dim[TJ_MAXDIM];  /* global sizes                              */
    uint8_t sh[TJ_MAXDIM];   /* per axis: mesh axes it is split over (bits) */
    uint8_t partial;         /* mesh axes over which the value is an unreduced sum */
    uint8_t vary;            /* inside shard_map: mesh axes it varies over ({V:..});
                                outside: a per-device value (a residual stack) */
} tj__type;

struct tj_ctx {
    char *names[TJ__MAXNAMES];
    int nnames;
    char msg[TJ__MSG];
    tj_status status;
    int dump;
    int threads;
    pthread_mutex_t stats_mu;
    tj_alloc_stats stats;
    tj_backend *backend; /* NULL: the built-in CPU backend                */
    tj_backend *own_backend; /* made by tj_ctx_new (TJ_BACKEND), freed with it */
    int ndev;            /* simulated devices                             */
    int profile;         /* record a timeline of each run                 */
    int no_coll_matmul;  /* tj_set_collective_matmul(ctx, 0)              */
    int no_fibers;       /* TJ_FIBERS=0: a thread per simulated device ([11]) */
    int nmesh;           /* mesh axes (0: no mesh)                         */
    int mesh_ax[TJ__MAXMESH];
    int mesh_size[TJ__MAXMESH];
    unsigned mesh_gen;   /* bumped when the mesh changes: arrays and programs
                            made under another mesh read their sharding
                            bits wrongly, so they are refused ([4])     */
    tj_graph *cur;          /* the scan or shard_map body being traced now  */
    struct tj_node **proj_ct; /* autodiff: the cotangents (by node id) a multi-output
                                 node's VJP reads for its projections; set by the
                                 driver just before it calls that VJP ([6]) */
    struct tj__opreg *ops;  /* custom ops (tj_register_op)                  */
    int nops, capops;
    struct tj__cvjp *cvjps; /* custom_vjp backward functions                */
    int ncvjp, capcvjp;
    char *warn;             /* the warnings so far, one per line            */
    size_t nwarn;
    int quiet;              /* TJ_QUIET: do not print warnings              */
    struct tj__procs *procs; /* processes, transport and groups ([11])      */
    int autodiff;           /* > 0 while tj_vjp builds nodes, also into sealed bodies */
    int vjp_hi;             /* tj_vjp of a body for a cotangent that came through an
                               earlier pass's backward nodes (see tj_vjp_at) */
};

static void *tj__malloc(size_t n) { return TJ_MALLOC(n ? n : 1); }
static void *tj__calloc(size_t n) {
    void *p = tj__malloc(n);
    if (p) memset(p, 0, n ? n : 1);
    return p;
}
static char *tj__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = (char *)tj__malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}
static const char *tj__base(const char *file) {
    const char *s = file ? strrchr(file, '/') : NULL;
    return s ? s + 1 : (file ? file : "?");
}

/* Record an error; the first one wins until tj_clear_error, so the message
   the user sees names the op that really failed. */
static void tj__err(tj_ctx *ctx, tj_status st, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    size_t k;
    if (!ctx || ctx->status != TJ_OK) return;
    ctx->status = st;
    va_start(ap, fmt);
    vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
    va_end(ap);
    if (file) {
        k = strlen(ctx->msg);
        snprintf(ctx->msg + k, sizeof ctx->msg - k, " (at %s:%d)", tj__base(file), line);
    }
    if (ctx->dump) fprintf(stderr, "tinyjax: error: %s\n", ctx->msg);
}
/* Record a warning (once per distinct text) and print it. */
static void tj__warn(tj_ctx *ctx, const char *file, int line, const char *fmt, ...) {
    char m[TJ__MSG + 64];
    va_list ap;
    size_t k, n;
    char *w;
    if (!ctx) return;
    va_start(ap, fmt);
    vsnprintf(m, TJ__MSG, fmt, ap);
    va_end(ap);
    k = strlen(m);
    if (file) snprintf(m + k, sizeof m - k, " (at %s:%d)", tj__base(file), line);
    k = strlen(m);
    m[k++] = '\n';
    m[k] = 0;
    if (ctx->warn && strstr(ctx->warn, m)) return;
    n = ctx->nwarn;
    if (!(w = (char *)TJ_REALLOC(ctx->warn, n + k + 1))) return;
    memcpy(w + n, m, k + 1);
    ctx->warn = w;
    ctx->nwarn = n + k;
    if (!ctx->quiet) fprintf(stderr, "tinyjax: warning: %s", m);
}
TJDEF const char *tj_warnings(tj_ctx *c) { return c && c->warn ? c->warn : ""; }

/* The graph tj_jit is tracing on this thread (NULL: none). A builder whose
   arguments hold no value to take a context from (a count of 0, so no
   input to look at) records its error in that graph's context, so the
   caller still reads a message naming the call, not a bare failure. */
static pthread_key_t tj__trace_key;
static pthread_once_t tj__trace_once = PTHREAD_ONCE_INIT;
static void tj__trace_key_make(void) { (void)pthread_key_create(&tj__trace_key, NULL); }
static struct tj_graph *tj__tracing(void) {
    pthread_once(&tj__trace_once, tj__trace_key_make);
    return (struct tj_graph *)pthread_getspecific(tj__trace_key);
}
static void tj__set_tracing(struct tj_graph *g) {
    pthread_once(&tj__trace_once, tj__trace_key_make);
    (void)pthread_setspecific(tj__trace_key, g);
}
static tj_ctx *tj__tracing_ctx(void);

/* Add "(<what> at file:line)" to the recorded message unless it already
   names that line: errors found deep inside a call (a run's kernels, its
   arena) then also name the caller's line. */
static void tj__err_line(tj_ctx *ctx, const char *what, const char *file, int line) {
    char at[300];
    size_t k;
    if (!ctx || ctx->status == TJ_OK || !file) return;
    snprintf(at, sizeof at, "%s:%d)", tj__base(file), line);
    if (strstr(ctx->msg, at)) return;
    k = strlen(ctx->msg);
    snprintf(ctx->msg + k, sizeof ctx->msg - k, " (%s at %s:%d)", what, tj__base(file), line);
}

TJDEF tj_ctx *tj_ctx_new(void) {
    tj_ctx *c = (tj_ctx *)tj__calloc(sizeof *c);
    const char *d;
    long nc;
    if (!c) return NULL;
    pthread_mutex_init(&c->stats_mu, NULL);
    d = getenv("TJ_DUMP");
    c->dump = d && *d && strcmp(d, "0") != 0;
    d = getenv("TJ_QUIET");
    c->quiet = d && *d && strcmp(d, "0") != 0;
    c->ndev = 1;
    d = getenv("TJ_DEVICES");
    if (d && *d) { /* a bad value is an error of the context, not silently 1 device */
        char *e;
        long v = strtol(d, &e, 10);
        if (e == d || *e || v < 1 || v > TJ_MAXDEV)
            tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_ctx_new: environment variable TJ_DEVICES=\"%.32s\" is not a device count from 1 to %d", d, TJ_MAXDEV);
        else c->ndev = (int)v;
    }
    d = getenv("TJ_FIBERS");
    c->no_fibers = d && !strcmp(d, "0");
    d = getenv("TJ_BACKEND"); /* devsim: the device-like CPU backend ([11]) */
    if (d && *d && strcmp(d, "cpu") != 0) {
        if (strcmp(d, "devsim") != 0)
            tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_ctx_new: environment variable TJ_BACKEND=\"%.32s\" is not a backend (cpu, devsim)", d);
        else if (!(c->backend = c->own_backend = tj_devsim_backend()))
            tj__err(c, TJ_ERR_OOM, NULL, 0, "tj_ctx_new: out of memory starting the devsim backend (TJ_BACKEND)");
    }
    nc = sysconf(_SC_NPROCESSORS_ONLN);
    c->threads = nc > 0 ? (int)nc : 1;
    if (c->threads > 16) c->threads = 16;
    return c;
}
static void tj__free_ops(tj_ctx *c); /* custom ops, in [5] */
static void tj__procs_free(tj_ctx *c); /* transport and groups, in [11] */
TJDEF void tj_ctx_free(tj_ctx *c) {
    int i;
    if (!c) return;
    tj__procs_free(c);
    tj_devsim_backend_free(c->own_backend);
    for (i = 0; i < c->nnames; i++) TJ_FREE(c->names[i]);
    tj__free_ops(c);
    TJ_FREE(c->warn);
    pthread_mutex_destroy(&c->stats_mu);
    TJ_FREE(c);
}
TJDEF const char *tj_error(tj_ctx *c) { return c ? c->msg : "no context"; }
TJDEF tj_status tj_status_of(tj_ctx *c) { return c ? c->status : TJ_ERR_ARG; }
TJDEF void tj_clear_error(tj_ctx *c) {
    if (!c) return;
    c->status = TJ_OK;
    c->msg[0] = 0;
}
TJDEF void tj_set_dump(tj_ctx *c, int on) { if (c) c->dump = on; }
TJDEF void tj_set_threads(tj_ctx *c, int n) { if (c) c->threads = n < 1 ? 1 : n; }
TJDEF void tj_set_profile(tj_ctx *c, int on) { if (c) c->profile = on; }
TJDEF void tj_set_collective_matmul(tj_ctx *c, int on) { if (c) c->no_coll_matmul = !on; }
static double tj__now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec * 1e6 + (double)tv.tv_usec;
}
TJDEF tj_alloc_stats tj_get_alloc_stats(tj_ctx *c) {
    tj_alloc_stats s;
    memset(&s, 0, sizeof s);
    if (!c) return s;
    pthread_mutex_lock(&c->stats_mu);
    s = c->stats;
    pthread_mutex_unlock(&c->stats_mu);
    return s;
}
TJDEF void tj_reset_alloc_peaks(tj_ctx *c) {
    int d;
    if (!c) return;
    pthread_mutex_lock(&c->stats_mu);
    c->stats.peak_arena_bytes = c->stats.arena_bytes;
    for (d = 0; d < TJ_MAXDEV; d++) c->stats.device_peak_bytes[d] = c->stats.device_bytes[d];
    pthread_mutex_unlock(&c->stats_mu);
}
/* bytes allocated (> 0) or freed (< 0) on device dev: an arena or an array */
static void tj__count(tj_ctx *c, int arena, int dev, int64_t bytes) {
    pthread_mutex_lock(&c->stats_mu);
    if (dev >= 0 && dev < TJ_MAXDEV) {
        c->stats.device_bytes[dev] += bytes;
        if (c->stats.device_bytes[dev] > c->stats.device_peak_bytes[dev]) c->stats.device_peak_bytes[dev] = c->stats.device_bytes[dev];
    }
    if (arena) {
        c->stats.arena_bytes += bytes;
        if (bytes > 0) c->stats.arena_allocs++;
        if (c->stats.arena_bytes > c->stats.peak_arena_bytes) c->stats.peak_arena_bytes = c->stats.arena_bytes;
    } else {
        c->stats.array_bytes += bytes;
    }
    pthread_mutex_unlock(&c->stats_mu);
}

static const char *tj__dtnames[TJ_NDTYPE] = {"f32", "bf16", "i32", "f64"};
static const size_t tj__dtsize[TJ_NDTYPE] = {4, 2, 4, 8};
TJDEF const char *tj_dtype_name(tj_dtype t) { return (unsigned)t < TJ_NDTYPE ? tj__dtnames[t] : "bad-dtype"; }
TJDEF size_t tj_dtype_size(tj_dtype t) { return (unsigned)t < TJ_NDTYPE ? tj__dtsize[t] : 0; }
static int tj__isfloat(tj_dtype t) { return t == TJ_F32 || t == TJ_BF16 || t == TJ_F64; }

TJDEF uint16_t tj_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}
TJDEF float tj_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* The one float -> i32 conversion (element stores, tj_cast, loading a float
   tensor as i32): truncate toward zero, saturate at the i32 range, NaN -> 0.
   A plain (int32_t) cast of NaN or of an out-of-range value is undefined. */
static int32_t tj__f2i32(double v) {
    if (v != v) return 0;
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)v;
}
/* Element access through double: every dtype's value fits exactly (i32
   included), so generic kernels are written once. */
static double tj__ld(const void *p, tj_dtype t, int64_t i) {
    switch (t) {
    case TJ_F32: return ((const float *)p)[i];
    case TJ_BF16: return tj_bf16_to_f32(((const uint16_t *)p)[i]);
    case TJ_I32: return ((const int32_t *)p)[i];
    case TJ_F64: return ((const double *)p)[i];
    default: return 0;
    }
}
static void tj__st(void *p, tj_dtype t, int64_t i, double v) {
    switch (t) {
    case TJ_F32: ((float *)p)[i] = (float)v; break;
    case TJ_BF16: ((uint16_t *)p)[i] = tj_f32_to_bf16((float)v); break;
    case TJ_I32: ((int32_t *)p)[i] = tj__f2i32(v); break;
    case TJ_F64: ((double *)p)[i] = v; break;
    default: break;
    }
}
/* Bulk conversions of n elements (the hot path of kernels), to and from
   double, or float (exact for f32, bf16, and i32 below 2^24; kernels use it
   only where it gives the same bits, see tj__flt_ok). */
static void tj__load_n(const void *p, tj_dtype t, int64_t i0, int64_t stride, int64_t n, double *dst) {
    int64_t k;
    if (t == TJ_F32) {
        const float *s = (const float *)p + i0;
        if (stride == 1) for (k = 0; k < n; k++) dst[k] = s[k];
        else for (k = 0; k < n; k++) dst[k] = s[k * stride];
    } else if (t == TJ_F64) {
        const double *s = (const double *)p + i0;
        for (k = 0; k < n; k++) dst[k] = s[k * stride];
    } else if (t == TJ_BF16) {
        const uint16_t *s = (const uint16_t *)p + i0;
        for (k = 0; k < n; k++) dst[k] = tj_bf16_to_f32(s[k * stride]);
    } else {
        for (k = 0; k < n; k++) dst[k] = tj__ld(p, t, i0 + k * stride);
    }
}
static void tj__store_n(void *p, tj_dtype t, int64_t i0, int64_t stride, int64_t n, const double *src) {
    int64_t k;
    if (t == TJ_F32) {
        float *d = (float *)p + i0;
        if (stride == 1) for (k = 0; k < n; k++) d[k] = (float)src[k];
        else for (k = 0; k < n; k++) d[k * stride] = (float)src[k];
    } else if (t == TJ_F64 && stride == 1) {
        memcpy((double *)p + i0, src, (size_t)n * 8);
    } else if (t == TJ_BF16) { /* (as tj__st: through f32) */
        uint16_t *d = (uint16_t *)p + i0;
        for (k = 0; k < n; k++) d[k * stride] = tj_f32_to_bf16((float)src[k]);
    } else {
        for (k = 0; k < n; k++) tj__st(p, t, i0 + k * stride, src[k]);
    }
}
static void tj__load_nf(const void *p, tj_dtype t, int64_t i0, int64_t stride, int64_t n, float *dst) {
    int64_t k;
    if (t == TJ_F32) {
        const float *s = (const float *)p + i0;
        if (stride == 1) memcpy(dst, s, (size_t)n * 4);
        else for (k = 0; k < n; k++) dst[k] = s[k * stride];
    } else if (t == TJ_BF16) {
        const uint16_t *s = (const uint16_t *)p + i0;
        for (k = 0; k < n; k++) dst[k] = tj_bf16_to_f32(s[k * stride]);
    } else {
        for (k = 0; k < n; k++) dst[k] = (float)tj__ld(p, t, i0 + k * stride);
    }
}
static void tj__f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n); /* (vectorised, with the matmul kernels in [11]) */
static void tj__store_nf(void *p, tj_dtype t, int64_t i0, int64_t stride, int64_t n, const float *src) {
    int64_t k;
    if (t == TJ_F32) {
        float *d = (float *)p + i0;
        if (stride == 1) memcpy(d, src, (size_t)n * 4);
        else for (k = 0; k < n; k++) d[k * stride] = src[k];
    } else if (t == TJ_BF16) {
        uint16_t *d = (uint16_t *)p + i0;
        if (stride == 1) tj__f32_to_bf16_n(src, d, n);
        else for (k = 0; k < n; k++) d[k * stride] = tj_f32_to_bf16(src[k]);
    } else {
        for (k = 0; k < n; k++) tj__st(p, t, i0 + k * stride, src[k]);
    }
}

/* The id of axis name s[0..n) (interned on first use); -1 and an error
   naming `what` and the caller's file:line when the table is full. */
static int tj__intern_at(tj_ctx *c, const char *s, size_t n, const char *what, const char *file, int line) {
    int i;
    for (i = 0; i < c->nnames; i++)
        if (strlen(c->names[i]) == n && memcmp(c->names[i], s, n) == 0) return i;
    if (c->nnames >= TJ__MAXNAMES) {
        tj__err(c, TJ_ERR_ARG, file, line, "%s: more than %d distinct axis names in one context (\"%.*s\")", what ? what : "axis name", TJ__MAXNAMES,
                (int)(n < 64 ? n : 64), s);
        return -1;
    }
    c->names[c->nnames] = (char *)tj__malloc(n + 1);
    if (!c->names[c->nnames]) {
        tj__err(c, TJ_ERR_OOM, file, line, "%s: out of memory recording an axis name", what ? what : "axis name");
        return -1;
    }
    memcpy(c->names[c->nnames], s, n);
    c->names[c->nnames][n] = 0;
    return c->nnames++;
}
static int tj__intern(tj_ctx *c, const char *s, size_t n) { return tj__intern_at(c, s, n, NULL, NULL, 0); }
static const char *tj__name(tj_ctx *c, int id) { return id >= 0 && id < c->nnames ? c->names[id] : "?"; }
static int tj__isname(char ch) { return ch == '_' || ch == '.' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'); }

/* Parse "a b c" (or "a,b,c") into name ids. Returns count, or -1 with the
   context error set (what = the op, for the message). */
static int tj__parse_names(tj_ctx *c, const char *s, int *ids, int max, const char *what, const char *file, int line) {
    int n = 0;
    if (!s) {
        tj__err(c, TJ_ERR_ARG, file, line, "%s: an axis-name argument is NULL", what);
        return -1;
    }
    while (*s) {
        const char *b;
        if (*s == ' ' || *s == ',' || *s == '\t') { s++; continue; }
        b = s;
        while (*s && tj__isname(*s)) s++;
        if (s == b) {
            tj__err(c, TJ_ERR_AXIS, file, line, "%s: bad character '%c' in axis list", what, *s);
            return -1;
        }
        if (n >= max) {
            tj__err(c, TJ_ERR_AXIS, file, line, "%s: more than %d axes", what, max);
            return -1;
        }
        if ((ids[n++] = tj__intern_at(c, b, (size_t)(s - b), what, file, line)) < 0) return -1;
    }
    return n;
}

/* ord (NULL: mesh order) lists, per axis, its mesh axes in the order to
   print them (an array's spec order: tj_array_describe) */
static void tj__type_str_ord(tj_ctx *c, const tj__type *t, const int (*ord)[TJ__MAXMESH], char *buf, size_t n) {
    size_t k;
    int i;
    snprintf(buf, n, "%s[", tj_dtype_name(t->dt));
    for (i = 0; i < t->rank; i++) {
        k = strlen(buf);
        snprintf(buf + k, n - k, "%s%s=%lld", i ? "," : "", tj__name(c, t->ax[i]), (long long)t->dim[i]);
        if (t->sh[i]) { /* "@data+model": the mesh axes this axis is split over */
            int j, q = 0;
            for (j = 0; j < c->nmesh; j++)
                if (t->sh[i] >> j & 1) {
                    k = strlen(buf);
                    snprintf(buf + k, n - k, "%s%s", q ? "+" : "@", tj__name(c, c->mesh_ax[ord ? ord[i][q] : j]));
                    q++;
                }
        }
    }
    k = strlen(buf);
    snprintf(buf + k, n - k, "]");
    if (t->vary) {
        int j, first = 1;
        for (j = 0; j < c->nmesh; j++)
            if (t->vary >> j & 1) {
                k = strlen(buf);
                snprintf(buf + k, n - k, "%s%s", first ? "{V:" : ",", tj__name(c, c->mesh_ax[j]));
                first = 0;
            }
        k = strlen(buf);
        snprintf(buf + k, n - k, "}");
    }
    if (t->partial) {
        int j;
        for (j = 0; j < c->nmesh; j++)
            if (t->partial >> j & 1) {
                k = strlen(buf);
                snprintf(buf + k, n - k, "{partial sum over %s}", tj__name(c, c->mesh_ax[j]));
            }
    }
}
static void tj__type_str(tj_ctx *c, const tj__type *t, char *buf, size_t n) { tj__type_str_ord(c, t, NULL, buf, n); }

/* Sizes. An axis has at most 2^40 elements (TJ__MAXDIM_SIZE), and a whole
   value at most TJ__MAXBYTES bytes: every element, byte and stride count
   derived from a valid type then fits int64_t and size_t, and sums of many
   buffers (the memory planner's) cannot overflow either. Every type is
   checked once, where it is made (tj__parse_shape for user shapes, tj__node
   for every traced value), with the one checked multiply below. */
#define TJ__MAXDIM_SIZE ((int64_t)1 << 40)
#define TJ__MAXBYTES ((int64_t)1 << 50 < (int64_t)(SIZE_MAX / 4) ? (int64_t)1 << 50 : (int64_t)(SIZE_MAX / 4))
/* *r = a * b for 0 <= a, b; returns 1 (and leaves *r alone) if the product
   exceeds `limit`. */
static int tj__mul_ovf(int64_t a, int64_t b, int64_t limit, int64_t *r) {
    if (a < 0 || b < 0) return 1;
    if (a != 0 && b > limit / a) return 1;
    *r = a * b;
    return 0;
}
/* 0 if t's element count and bytes are within the limits, else -1 and an
   error naming `what` (the function or op), the shape and file:line. */
static void tj__type_str(tj_ctx *c, const tj__type *t, char *buf, size_t n);
static int tj__type_check(tj_ctx *c, const tj__type *t, const char *what, const char *file, int line) {
    int64_t n = 1, bytes = 0;
    int i, bad = 0;
    char b[512];
    for (i = 0; i < t->rank; i++)
        if (t->dim[i] < 0 || t->dim[i] > TJ__MAXDIM_SIZE) {
            tj__type_str(c, t, b, sizeof b);
            tj__err(c, TJ_ERR_SHAPE, file, line, "%s: axis '%s' of shape %s has size %lld, outside 0..2^40", what, tj__name(c, t->ax[i]), b, (long long)t->dim[i]);
            return -1;
        }
    for (i = 0; i < t->rank && !bad; i++) bad = tj__mul_ovf(n, t->dim[i], TJ__MAXBYTES, &n);
    if (!bad) bad = tj__mul_ovf(n, (int64_t)tj_dtype_size(t->dt), TJ__MAXBYTES, &bytes);
    if (bad) {
        tj__type_str(c, t, b, sizeof b);
        tj__err(c, TJ_ERR_SHAPE, file, line, "%s: shape %s is too large: more than %lld bytes, the limit of one value", what, b, (long long)TJ__MAXBYTES);
        return -1;
    }
    return 0;
}

/* Parse "batch=4 embed=128" into a type. Sizes must be >= 1 (0 allowed only
   when allow_zero, for split's inferred size); names must be distinct. */
static int tj__parse_shape(tj_ctx *c, const char *s, tj_dtype dt, tj__type *t, int allow_zero, const char *what, const char *file, int line) {
    const char *s0 = s;
    memset(t, 0, sizeof *t);
    t->dt = dt;
    if ((unsigned)dt >= TJ_NDTYPE) {
        tj__err(c, TJ_ERR_DTYPE, file, line, "%s: bad dtype %d", what, (int)dt);
        return -1;
    }
    if (!s) {
        tj__err(c, TJ_ERR_ARG, file, line, "%s: the shape argument is NULL (\"\" is a scalar)", what);
        return -1;
    }
    while (*s) {
        const char *b;
        char *e;
        long long v;
        int i, id;
        if (*s == ' ' || *s == ',' || *s == '\t') { s++; continue; }
        b = s;
        while (*s && tj__isname(*s)) s++;
        if (s == b || (*s != '=' && *s != ':')) {
            tj__err(c, TJ_ERR_SHAPE, file, line, "%s: bad shape string near \"%s\" (want \"name=size name=size\")", what, b);
            return -1;
        }
        if (t->rank >= TJ_MAXDIM) {
            tj__err(c, TJ_ERR_SHAPE, file, line, "%s: more than %d axes", what, TJ_MAXDIM);
            return -1;
        }
        id = tj__intern_at(c, b, (size_t)(s - b), what, file, line);
        if (id < 0) return -1;
        s++;
        v = strtoll(s, &e, 10);
        if (e == s || *s < '0' || *s > '9' || v < (allow_zero ? 0 : 1) || v > TJ__MAXDIM_SIZE) { /* digits only: strtoll takes " +3" too */
            tj__err(c, TJ_ERR_SHAPE, file, line, "%s: axis '%s' has bad size \"%.12s\"", what, tj__name(c, id), s);
            return -1;
        }
        s = e;
        for (i = 0; i < t->rank; i++)
            if (t->ax[i] == id) {
                tj__err(c, TJ_ERR_AXIS, file, line, "%s: axis '%s' appears twice in \"%s\"", what, tj__name(c, id), s0); /* (the whole string, not its tail) */
                return -1;
            }
        t->ax[t->rank] = id;
        t->dim[t->rank++] = v;
    }
    return tj__type_check(c, t, what, file, line);
}
/* product of t's dims [lo, hi) */
static int64_t tj__dims_prod(const tj__type *t, int lo, int hi) {
    int64_t p = 1;
    int i;
    for (i = lo; i < hi; i++) p *= t->dim[i];
    return p;
}
static int64_t tj__numel(const tj__type *t) { return tj__dims_prod(t, 0, t->rank); }
static int64_t tj__bytes(const tj__type *t) { return tj__numel(t) * (int64_t)tj_dtype_size(t->dt); }
static int tj__axis_index(const tj__type *t, int id) {
    int i;
    for (i = 0; i < t->rank; i++)
        if (t->ax[i] == id) return i;
    return -1;
}
/* row-major strides of t, in elements */
static void tj__strides(const tj__type *t, int64_t *st) {
    int64_t s = 1;
    int i;
    for (i = t->rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= t->dim[i];
    }
}
static int64_t tj__align(int64_t n) { return (n + TJ__ALIGN - 1) / TJ__ALIGN * TJ__ALIGN; }
/* The mesh, the device count and the backend are fixed while a function
   of the context is traced: its values were typed (sharded, placed) for
   them, and the program compiles for what tj_jit began with. */
static int tj__changing_while_tracing(tj_ctx *c, const char *what, const char *file, int line) {
    if (tj__tracing_ctx() != c) return 0;
    tj__err(c, TJ_ERR_STATE, file, line, "%s: called while a function of this context is being traced (its values are laid out for the current "
            "setting): change it before tj_jit", what);
    return 1;
}
TJDEF void tj_set_backend(tj_ctx *c, tj_backend *b) {
    if (!c) return;
    if (b != c->backend && tj__changing_while_tracing(c, "tj_set_backend", NULL, 0)) return;
    if (b && (!b->name || !b->alloc || !b->free || !b->copy || !b->run || !b->sync)) { /* the runner calls each of these */
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_set_backend: backend '%s' lacks %s (name, alloc, free, copy, run and sync are required); the backend is unchanged",
                b->name ? b->name : "(no name)", !b->name ? "a name" : !b->alloc ? "alloc" : !b->free ? "free" : !b->copy ? "copy" : !b->run ? "run" : "sync");
        return;
    }
    c->backend = b;
}
static void *tj__aligned_alloc(int64_t n, void **raw) {
    char *p = (char *)tj__malloc((size_t)n + TJ__ALIGN);
    uintptr_t u;
    *raw = p;
    if (!p) return NULL;
    u = ((uintptr_t)p + TJ__ALIGN - 1) & ~(uintptr_t)(TJ__ALIGN - 1);
    return (void *)u;
}
/* Memory of a space through the context's backend (CPU: aligned malloc).
   *raw is what to pass to tj__mem_free. */
static void *tj__mem_alloc(tj_ctx *c, int space, int64_t n, void **raw) {
    if (c->backend) {
        *raw = c->backend->alloc(c->backend, -1, space, (size_t)(n ? n : 1));
        return *raw;
    }
    return tj__aligned_alloc(n, raw);
}
static void tj__mem_free_on(tj_backend *b, int space, void *raw) { /* b: the backend that allocated raw */
    if (!raw) return;
    if (b) b->free(b, -1, space, raw);
    else TJ_FREE(raw);
}
static void tj__mem_free(tj_ctx *c, int space, void *raw) { tj__mem_free_on(c->backend, space, raw); }
/* host <-> device copies outside runs (they wait for every device's work);
   on the CPU backend device memory is host memory */
static int tj__mem_copy(tj_ctx *c, void *dst, int dspace, const void *src, int sspace, int64_t n) {
    if (c->backend) return c->backend->copy(c->backend, -1, dst, dspace, src, sspace, (size_t)n);
    memcpy(dst, src, (size_t)n);
    return 0;
}

/* ==== [2] arrays and parameter trees ===================================== */
/* An array is a typed buffer per device. With one device (this section's
   case) data[0] holds the whole row-major array. A donated array keeps its
   type but loses its buffer: using it again is an error, not a crash. */

struct tj_array {
    tj_ctx *ctx;
    tj__type t;
    int ndev;
    void *data[TJ_MAXDEV]; /* aligned per-device buffers                   */
    void *raw[TJ_MAXDEV];  /* what was allocated (NULL if not owned)       */
    int64_t local_bytes;   /* bytes per device                             */
    int deleted;
    int abstract;          /* shape and sharding only: no buffers          */
    unsigned mesh_gen;     /* the context's mesh when it was made          */
    tj_backend *backend;   /* the backend its buffers came from (NULL: CPU) */
    int in_tree;           /* a tree leaf owns it: a second owner would free
                              it twice, so tj_tree_set_array refuses one   */
    unsigned char ord[TJ_MAXDIM][TJ__MAXMESH]; /* per axis: its mesh axes in
                              the order its spec gave them, which lays out
                              its process-local blocks as JAX does (the
                              shards themselves are in mesh order, [4]);
                              zeros, or a list that is not the axis's mesh
                              axes: mesh order (tj__arr_order)            */
};

static tj__type tj__local(const tj_ctx *c, const tj__type *t);
static int tj__mesh_rank(const tj_ctx *c, int dev, unsigned m);
/* process mode ([11]): does this process run device d; do a's shards live
   only partly here */
static int tj__dev_mine(const tj_ctx *c, int d);
static int tj__spans(const tj_ctx *c, const tj__type *t);
static void tj__copy_region(const void *src, const tj__type *st, int64_t sbase, void *dst, const tj__type *dt, int64_t dbase, const int64_t *dims,
                            int nthreads);
/* One buffer per device: the device's shard (the whole array where it is
   replicated). */
/* an array of type t (global shape, sharding), with a buffer on each of
   this process's devices unless it is abstract */
static tj_array *tj__array_make(tj_ctx *c, const tj__type *t, int abstract, const char *file, int line) {
    tj_array *a = (tj_array *)tj__calloc(sizeof *a);
    tj__type lt = tj__local(c, t);
    int64_t nb = tj__bytes(&lt);
    int d;
    if (!a) {
        tj__err(c, TJ_ERR_OOM, file, line, "out of memory allocating an array header");
        return NULL;
    }
    a->ctx = c;
    a->t = *t;
    a->t.partial = 0;
    a->ndev = c->ndev;
    a->local_bytes = nb;
    a->abstract = abstract;
    a->mesh_gen = c->mesh_gen;
    a->backend = c->backend;
    for (d = 0; d < a->ndev && !abstract; d++) {
        if (!tj__dev_mine(c, d)) continue; /* another process's device */
        a->data[d] = tj__mem_alloc(c, TJ_SPACE_DEVICE, nb, &a->raw[d]);
        if (!a->data[d]) {
            char b[256];
            tj__type_str(c, t, b, sizeof b);
            tj__err(c, TJ_ERR_OOM, file, line, "out of memory allocating %lld bytes for array %s on device %d", (long long)nb, b, d);
            a->ndev = d;
            tj_array_free(a);
            return NULL;
        }
        tj__count(c, 0, d, nb);
    }
    return a;
}
static tj_array *tj__array_alloc(tj_ctx *c, const tj__type *t, const char *file, int line) { return tj__array_make(c, t, 0, file, line); }
/* element offset of device d's shard inside the global row-major array */
static int64_t tj__shard_base(const tj_ctx *c, const tj__type *t, int d) {
    int64_t st[TJ_MAXDIM], base = 0;
    tj__type lt = tj__local(c, t);
    int i;
    tj__strides(t, st);
    for (i = 0; i < t->rank; i++)
        if (t->sh[i]) base += (int64_t)tj__mesh_rank(c, d, t->sh[i]) * lt.dim[i] * st[i];
    return base;
}
/* global host data (row-major, dtype of a) -> every device's shard */
static tj_status tj__array_upload(tj_array *a, const void *host) {
    tj_ctx *c = a->ctx;
    tj__type gt = a->t, lt = tj__local(c, &a->t);
    void *tmp = NULL;
    int d;
    memset(gt.sh, 0, sizeof gt.sh);
    if (c->backend && !(tmp = tj__malloc((size_t)a->local_bytes))) return TJ_ERR_OOM;
    for (d = 0; d < a->ndev; d++) {
        void *dst = tmp ? tmp : a->data[d];
        if (!a->data[d]) continue;
        tj__copy_region(host, &gt, tj__shard_base(c, &a->t, d), dst, &lt, 0, lt.dim, 1);
        if (tmp && tj__mem_copy(c, a->data[d], TJ_SPACE_DEVICE, tmp, TJ_SPACE_USER, a->local_bytes)) {
            TJ_FREE(tmp);
            tj__err(c, TJ_ERR_IO, NULL, 0, "copying an array to device %d failed", d);
            return TJ_ERR_IO;
        }
    }
    TJ_FREE(tmp);
    return TJ_OK;
}
TJDEF void tj_array_free(tj_array *a) {
    int d;
    if (!a) return;
    for (d = 0; d < a->ndev; d++)
        if (a->raw[d]) {
            tj__mem_free_on(a->backend, TJ_SPACE_DEVICE, a->raw[d]); /* (the context's may have changed since) */
            tj__count(a->ctx, 0, d, -a->local_bytes);
        }
    TJ_FREE(a);
}
TJDEF tj_array *tj_array_new_at(const char *file, int line, tj_ctx *c, tj_dtype dt, const char *shape, const void *data) {
    tj__type t;
    tj_array *a;
    if (!c) return NULL;
    if (tj__parse_shape(c, shape, dt, &t, 0, "tj_array_new", file, line)) return NULL;
    a = tj__array_alloc(c, &t, file, line);
    if (!a) return NULL;
    if (data) {
        if (tj__array_upload(a, data)) {
            if (!c->status) tj__err(c, TJ_ERR_OOM, file, line, "tj_array_new: out of memory");
            tj_array_free(a);
            return NULL;
        }
    } else if (!c->backend) {
        int d;
        for (d = 0; d < a->ndev; d++) if (a->data[d]) memset(a->data[d], 0, (size_t)a->local_bytes);
    } else {
        void *z = tj__calloc((size_t)tj__bytes(&t));
        if (!z || tj__array_upload(a, z)) {
            TJ_FREE(z);
            tj__err(c, TJ_ERR_OOM, file, line, "tj_array_new: out of memory");
            tj_array_free(a);
            return NULL;
        }
        TJ_FREE(z);
    }
    return a;
}
/* Fill an array from a host-side generator (value of element i). */
/* A constant given for i32 values (a fill, a pad or mask value, adds and
   muls) must be an i32 value: 0.5 would become 0, NaN 0 and 1e10
   INT32_MAX, silently. of: what is i32, for the message. */
static int tj__i32_const_ok(tj_ctx *c, tj_dtype dt, double s, const char *what, const char *of, const char *f, int l) {
    if (dt != TJ_I32 || (s == floor(s) && s >= -2147483648.0 && s <= 2147483647.0)) return 1;
    tj__err(c, TJ_ERR_DTYPE, f, l, "%s: constant %g is not an i32 value, but %s is i32 (cast it to a float dtype first)", what, s, of);
    return 0;
}
static tj_array *tj__array_gen(const char *file, int line, tj_ctx *c, tj_dtype dt, const char *shape, double (*gen)(int64_t i, const tj__type *t, const void *u), const void *u,
                               const char *what) {
    tj__type t;
    int64_t i, n;
    void *h;
    tj_array *a;
    if (!c) return NULL;
    if (tj__parse_shape(c, shape, dt, &t, 0, what, file, line)) return NULL;
    n = tj__numel(&t);
    h = tj__malloc((size_t)tj__bytes(&t));
    if (!h) {
        tj__err(c, TJ_ERR_OOM, file, line, "%s: out of memory", what);
        return NULL;
    }
    for (i = 0; i < n; i++) tj__st(h, dt, i, gen(i, &t, u));
    a = tj_array_new_at(file, line, c, dt, shape, h);
    TJ_FREE(h);
    return a;
}
static double tj__gen_const(int64_t i, const tj__type *t, const void *u) { (void)i; (void)t; return *(const double *)u; }
static double tj__gen_iota(int64_t i, const tj__type *t, const void *u) {
    int64_t st[TJ_MAXDIM];
    int k = *(const int *)u;
    tj__strides(t, st);
    return (double)((i / st[k]) % t->dim[k]);
}
TJDEF tj_array *tj_full_at(const char *file, int line, tj_ctx *c, tj_dtype dt, const char *shape, double v) {
    if (c && !tj__i32_const_ok(c, dt, v, "tj_full", "the array", file, line)) return NULL;
    return tj__array_gen(file, line, c, dt, shape, tj__gen_const, &v, "tj_full");
}
TJDEF tj_array *tj_iota_at(const char *file, int line, tj_ctx *c, tj_dtype dt, const char *shape, const char *axis) {
    tj__type t;
    int k;
    if (!c) return NULL;
    if (tj__parse_shape(c, shape, dt, &t, 0, "tj_iota", file, line)) return NULL;
    if (!axis) {
        tj__err(c, TJ_ERR_ARG, file, line, "tj_iota: argument axis is NULL");
        return NULL;
    }
    k = tj__axis_index(&t, tj__intern_at(c, axis, strlen(axis), "tj_iota", file, line));
    if (k < 0) {
        tj__err(c, TJ_ERR_AXIS, file, line, "tj_iota: axis '%s' is not in shape \"%s\"", axis ? axis : "(null)", shape);
        return NULL;
    }
    return tj__array_gen(file, line, c, dt, shape, tj__gen_iota, &k, "tj_iota");
}
/* 1 if a's sharding means what it meant when a was made: a sharded array
   of an earlier mesh (tj_set_mesh, tj_set_devices since) has its shards
   laid out for that mesh, so reading it under this one would scramble it. */
static int tj__array_mesh_ok(tj_array *a, const char *what, const char *file, int line) {
    int i;
    char b[256];
    if (a->mesh_gen == a->ctx->mesh_gen) return 1;
    for (i = 0; i < a->t.rank && !a->t.sh[i]; i++) {}
    if (i == a->t.rank) return 1; /* replicated: the same on every mesh */
    tj__type_str(a->ctx, &a->t, b, sizeof b);
    tj__err(a->ctx, TJ_ERR_STATE, file, line, "%s: array %s was sharded under an earlier mesh (tj_set_mesh or tj_set_devices changed it since): "
            "read or re-place arrays before changing the mesh", what, b);
    return 0;
}
/* 1 if a's buffers are on the context's backend now (tj_set_backend may
   have switched it since a was made: the host cannot read them through
   another backend's copies). */
static int tj__array_here(tj_array *a, const char *what, const char *file, int line) {
    if (a->abstract || a->backend == a->ctx->backend) return 1;
    tj__err(a->ctx, TJ_ERR_STATE, file, line, "%s: this array's buffers are on backend '%s' but the context now runs on backend '%s' (tj_set_backend "
            "since it was made): set the backend back to use it", what, a->backend ? a->backend->name : "cpu", a->ctx->backend ? a->ctx->backend->name : "cpu");
    return 0;
}
static int tj__array_live(tj_array *a, const char *what, const char *file, int line) {
    if (!a) return 0;
    if (!tj__array_mesh_ok(a, what, file, line)) return 0;
    if (a->deleted) {
        tj__err(a->ctx, TJ_ERR_STATE, file, line, "%s: this array was donated to a program and its buffer is gone", what);
        return 0;
    }
    if (!tj__array_here(a, what, file, line)) return 0;
    if (a->abstract) {
        char b[256];
        tj__err(a->ctx, TJ_ERR_STATE, file, line, "%s: array %s is abstract (a shape and a sharding, no data: tj_array_abstract, tj_prog_output_shapes); "
                "programs compile against it, but it cannot be read, saved or run on", what, tj_array_describe(a, b, sizeof b));
        return 0;
    }
    return 1;
}
TJDEF int tj_array_is_abstract(const tj_array *a) { return a ? a->abstract : 0; }
TJDEF tj_status tj_array_read(tj_array *a, tj_dtype dt, void *dst) {
    int64_t n;
    if (!a) return TJ_ERR_ARG; /* no context to put a message in */
    if (!dst) {
        tj__err(a->ctx, TJ_ERR_ARG, NULL, 0, "tj_array_read: argument dst is NULL");
        return TJ_ERR_ARG;
    }
    if (!tj__array_live(a, "tj_array_read", NULL, 0)) return TJ_ERR_STATE;
    if ((unsigned)dt >= TJ_NDTYPE) {
        tj__err(a->ctx, TJ_ERR_DTYPE, NULL, 0, "tj_array_read: bad dtype %d", (int)dt);
        return TJ_ERR_DTYPE;
    }
    n = tj__numel(&a->t);
    if (n == 0) return TJ_OK;
    if (tj__spans(a->ctx, &a->t)) {
        char b[256];
        tj__type_str(a->ctx, &a->t, b, sizeof b);
        tj__err(a->ctx, TJ_ERR_STATE, NULL, 0, "tj_array_read: array %s spans processes (some shards live only on other processes' devices): "
                "gather it with tj_array_read_all in every process, or read this process's block with tj_array_read_local", b);
        return TJ_ERR_STATE;
    }
    {   /* every device's shard into its place in the global array */
        tj_ctx *c = a->ctx;
        tj__type gt = a->t, lt = tj__local(c, &a->t);
        int d;
        void *h = c->backend ? tj__malloc((size_t)a->local_bytes) : NULL;
        if (c->backend && !h) return TJ_ERR_OOM;
        memset(gt.sh, 0, sizeof gt.sh);
        gt.dt = dt;
        /* the last copy written wins: going down to device 0, a block that
           several devices hold is read from the first of them, as JAX reads
           a replicated array (an unchecked shard_map's output whose copies
           differ: the first device's, as in JAX) */
        for (d = a->ndev - 1; d >= 0; d--) {
            const void *src = a->data[d];
            if (!src) continue; /* another process's device: its shards are here too (tj__spans) */
            if (h) {
                if (tj__mem_copy(c, h, TJ_SPACE_USER, a->data[d], TJ_SPACE_DEVICE, a->local_bytes)) {
                    TJ_FREE(h);
                    tj__err(c, TJ_ERR_IO, NULL, 0, "tj_array_read: copying from device %d failed", d);
                    return TJ_ERR_IO;
                }
                src = h;
            }
            tj__copy_region(src, &lt, 0, dst, &gt, tj__shard_base(c, &a->t, d), lt.dim, 1);
        }
        TJ_FREE(h);
    }
    return TJ_OK;
}
TJDEF int64_t tj_array_numel(const tj_array *a) { return a ? tj__numel(&a->t) : 0; }
TJDEF tj_dtype tj_array_dtype(const tj_array *a) { return a ? a->t.dt : TJ_F32; }
TJDEF int tj_array_rank(const tj_array *a) { return a ? a->t.rank : 0; }
TJDEF int tj_array_is_deleted(const tj_array *a) { return a ? a->deleted : 1; }
TJDEF int64_t tj_array_dim(const tj_array *a, const char *name) {
    int i;
    if (!a || !name) return -1;
    for (i = 0; i < a->t.rank; i++)
        if (strcmp(tj__name(a->ctx, a->t.ax[i]), name) == 0) return a->t.dim[i];
    return -1;
}
static int tj__arr_order(const tj_array *a, int i, int *ord);
TJDEF const char *tj_array_describe(const tj_array *a, char *buf, size_t n) {
    int ord[TJ_MAXDIM][TJ__MAXMESH], i;
    if (!buf || !n) return "";
    if (!a) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    for (i = 0; i < a->t.rank; i++) tj__arr_order(a, i, ord[i]); /* tuples in the spec's order, as tj_array_sharding */
    tj__type_str_ord(a->ctx, &a->t, (const int(*)[TJ__MAXMESH])ord, buf, n);
    return buf;
}

/* ---- trees ---- */
typedef struct {
    char *name;
    tj_leaf_kind kind;
    tj_array *arr;
    int owned;
    tj_v v;
    int64_t i;
    double f;
    char *s;
} tj__leaf;

struct tj_tree {
    tj_ctx *ctx;
    tj__leaf *leaf;
    int n, cap;
};

TJDEF tj_tree *tj_tree_new(tj_ctx *c) {
    tj_tree *t;
    if (!c) return NULL;
    t = (tj_tree *)tj__calloc(sizeof *t);
    if (t) t->ctx = c;
    else tj__err(c, TJ_ERR_OOM, NULL, 0, "tj_tree_new: out of memory");
    return t;
}
static void tj__leaf_release(tj__leaf *l) {
    if (l->kind == TJ_LEAF_ARRAY && l->owned) tj_array_free(l->arr);
    if (l->kind == TJ_LEAF_STRING) TJ_FREE(l->s);
    l->arr = NULL;
    l->s = NULL;
}
TJDEF void tj_tree_clear(tj_tree *t) {
    int i;
    if (!t) return;
    for (i = 0; i < t->n; i++) {
        tj__leaf_release(&t->leaf[i]);
        TJ_FREE(t->leaf[i].name);
    }
    t->n = 0;
}
TJDEF void tj_tree_free(tj_tree *t) {
    if (!t) return;
    tj_tree_clear(t);
    TJ_FREE(t->leaf);
    TJ_FREE(t);
}
TJDEF int tj_tree_size(const tj_tree *t) { return t ? t->n : 0; }
TJDEF const char *tj_tree_name(const tj_tree *t, int i) { return t && i >= 0 && i < t->n ? t->leaf[i].name : NULL; }
TJDEF tj_leaf_kind tj_tree_kind(const tj_tree *t, int i) { return t && i >= 0 && i < t->n ? t->leaf[i].kind : TJ_LEAF_INT; }
TJDEF int tj_tree_find(const tj_tree *t, const char *name) {
    int i;
    if (!t || !name) return -1;
    for (i = 0; i < t->n; i++)
        if (strcmp(t->leaf[i].name, name) == 0) return i;
    return -1;
}
/* The slot for `name`: an existing leaf (released) or a new one at the end. */
static tj__leaf *tj__tree_slot_for(tj_tree *t, const char *name, const char *what) {
    int i;
    if (!t) return NULL;
    if (!name || !*name) {
        tj__err(t->ctx, TJ_ERR_ARG, NULL, 0, "%s: argument name is %s", what, name ? "empty" : "NULL");
        return NULL;
    }
    i = tj_tree_find(t, name);
    if (i >= 0) {
        tj__leaf_release(&t->leaf[i]);
        return &t->leaf[i];
    }
    if (t->n == t->cap) {
        int nc = t->cap ? t->cap * 2 : 8;
        tj__leaf *nl = (tj__leaf *)TJ_REALLOC(t->leaf, sizeof(tj__leaf) * (size_t)nc);
        if (!nl) {
            tj__err(t->ctx, TJ_ERR_OOM, NULL, 0, "tree: out of memory adding leaf '%s'", name);
            return NULL;
        }
        t->leaf = nl;
        t->cap = nc;
    }
    memset(&t->leaf[t->n], 0, sizeof(tj__leaf));
    t->leaf[t->n].name = tj__strdup(name);
    if (!t->leaf[t->n].name) {
        tj__err(t->ctx, TJ_ERR_OOM, NULL, 0, "tree: out of memory adding leaf '%s'", name);
        return NULL;
    }
    return &t->leaf[t->n++];
}
static tj__leaf *tj__tree_slot(tj_tree *t, const char *name) { return tj__tree_slot_for(t, name, "tree"); }
/* 0 if t may hold array a under `name` (owned: as its owner); else an error
   and -1 when a belongs to another context (its buffers live on that
   context's devices and backend), -2 when a leaf of t (another name) or of
   another tree already owns a (tj_tree_free would free it twice). */
static int tj__tree_may_hold(tj_tree *t, const char *name, const tj_array *a, int owned, const char *what) {
    int i;
    if (a->ctx != t->ctx) {
        tj__err(t->ctx, TJ_ERR_ARG, NULL, 0, "%s: the array for leaf '%s' belongs to another context than the tree's (arrays and trees of one context only)", what,
                name ? name : "(null)");
        return -1;
    }
    if (!owned || !a->in_tree) return 0; /* no leaf owns a */
    for (i = 0; i < t->n; i++) /* the owner in t, to name it */
        if (t->leaf[i].kind == TJ_LEAF_ARRAY && t->leaf[i].arr == a && t->leaf[i].owned && (!name || strcmp(t->leaf[i].name, name))) {
            tj__err(t->ctx, TJ_ERR_ARG, NULL, 0, "%s: leaf '%s' would own the array that leaf '%s' already owns (one owner per array: use tj_tree_set_array_ref)",
                    what, name ? name : "(null)", t->leaf[i].name);
            return -2;
        }
    tj__err(t->ctx, TJ_ERR_ARG, NULL, 0, "%s: leaf '%s' would own an array another tree already owns (one owner per array: use tj_tree_set_array_ref, "
            "or tj_tree_take it from the other tree first)", what, name ? name : "(null)");
    return -2;
}
static const tj__leaf *tj__tree_get(const tj_tree *t, const char *name, tj_leaf_kind k, const char *what, const char *file, int line);
TJDEF tj_array *tj_tree_take_at(const char *file, int line, tj_tree *t, const char *name) {
    const tj__leaf *l = tj__tree_get(t, name, TJ_LEAF_ARRAY, "tj_tree_take", file, line);
    tj_array *a;
    int i;
    if (!l) return NULL;
    a = l->arr;
    if (l->owned) a->in_tree = 0; /* the caller's now */
    i = (int)(l - t->leaf);
    TJ_FREE(t->leaf[i].name);
    for (; i + 1 < t->n; i++) t->leaf[i] = t->leaf[i + 1];
    t->n--;
    return a;
}
TJDEF tj_status tj_tree_set_array(tj_tree *t, const char *name, tj_array *a) {
    tj__leaf *l;
    int k = tj_tree_find(t, name);
    if (k >= 0 && t->leaf[k].kind == TJ_LEAF_ARRAY && t->leaf[k].arr == a) { /* same array: just take ownership */
        if (!t->leaf[k].owned && tj__tree_may_hold(t, name, a, 1, "tj_tree_set_array")) return t->ctx->status;
        t->leaf[k].owned = a->in_tree = 1;
        return TJ_OK;
    }
    if (!t) { /* ownership was given: do not leak it */
        tj_array_free(a);
        return TJ_ERR_ARG;
    }
    if (!a) { /* usually an earlier failure (its message stands) */
        tj__err(t->ctx, TJ_ERR_ARG, NULL, 0, "tj_tree_set_array: argument a (leaf '%s') is NULL", name ? name : "(null)");
        return t->ctx->status;
    }
    if ((k = tj__tree_may_hold(t, name, a, 1, "tj_tree_set_array")) != 0) {
        if (k == -1) tj_array_free(a); /* ownership was given; a twice-owned array is left to its owner */
        return t->ctx->status;
    }
    if (!(l = tj__tree_slot_for(t, name, "tj_tree_set_array"))) {
        tj_array_free(a);
        return tj_status_of(t->ctx);
    }
    l->kind = TJ_LEAF_ARRAY;
    l->arr = a;
    l->owned = a->in_tree = 1;
    return TJ_OK;
}
TJDEF tj_status tj_tree_set_array_ref(tj_tree *t, const char *name, tj_array *a) {
    tj__leaf *l;
    int k = tj_tree_find(t, name);
    if (!t) return TJ_ERR_ARG;
    if (!a) {
        tj__err(t->ctx, TJ_ERR_ARG, NULL, 0, "tj_tree_set_array_ref: argument a (leaf '%s') is NULL", name ? name : "(null)");
        return t->ctx->status;
    }
    if (tj__tree_may_hold(t, name, a, 0, "tj_tree_set_array_ref")) return t->ctx->status;
    if (k >= 0 && t->leaf[k].kind == TJ_LEAF_ARRAY && t->leaf[k].arr == a) {
        if (t->leaf[k].owned) a->in_tree = 0; /* the caller owns it now */
        t->leaf[k].owned = 0;
        return TJ_OK;
    }
    if (!(l = tj__tree_slot_for(t, name, "tj_tree_set_array_ref"))) return tj_status_of(t->ctx); /* borrowed: not ours to free */
    l->kind = TJ_LEAF_ARRAY;
    l->arr = a;
    l->owned = 0;
    return TJ_OK;
}
TJDEF tj_status tj_tree_set_v(tj_tree *t, const char *name, tj_v v) {
    tj__leaf *l;
    if (!t) return TJ_ERR_ARG;
    if (!v) { /* usually an earlier failed op (its message stands) */
        tj__err(t->ctx, TJ_ERR_ARG, NULL, 0, "tj_tree_set_v: argument v (leaf '%s') is NULL", name ? name : "(null)");
        return t->ctx->status;
    }
    if (!(l = tj__tree_slot_for(t, name, "tj_tree_set_v"))) return tj_status_of(t->ctx);
    l->kind = TJ_LEAF_VALUE;
    l->v = v;
    return TJ_OK;
}
TJDEF tj_status tj_tree_set_int(tj_tree *t, const char *name, int64_t v) {
    tj__leaf *l = tj__tree_slot_for(t, name, "tj_tree_set_int");
    if (!l) return t ? tj_status_of(t->ctx) : TJ_ERR_ARG;
    l->kind = TJ_LEAF_INT;
    l->i = v;
    return TJ_OK;
}
TJDEF tj_status tj_tree_set_float(tj_tree *t, const char *name, double v) {
    tj__leaf *l = tj__tree_slot_for(t, name, "tj_tree_set_float");
    if (!l) return t ? tj_status_of(t->ctx) : TJ_ERR_ARG;
    l->kind = TJ_LEAF_FLOAT;
    l->f = v;
    return TJ_OK;
}
TJDEF tj_status tj_tree_set_string(tj_tree *t, const char *name, const char *s) {
    tj__leaf *l;
    char *copy;
    if (!t) return TJ_ERR_ARG;
    if (!s) {
        tj__err(t->ctx, TJ_ERR_ARG, NULL, 0, "tj_tree_set_string: argument s (leaf '%s') is NULL", name ? name : "(null)");
        return t->ctx->status;
    }
    if (!(copy = tj__strdup(s))) {
        tj__err(t->ctx, TJ_ERR_OOM, NULL, 0, "tj_tree_set_string: out of memory");
        return t->ctx->status;
    }
    if (!(l = tj__tree_slot_for(t, name, "tj_tree_set_string"))) {
        TJ_FREE(copy);
        return tj_status_of(t->ctx);
    }
    l->kind = TJ_LEAF_STRING;
    l->s = copy;
    return TJ_OK;
}
static const tj__leaf *tj__tree_get(const tj_tree *t, const char *name, tj_leaf_kind k, const char *what, const char *file, int line) {
    static const char *kn[] = {"an array", "a traced value", "an int", "a float", "a string"};
    int i;
    if (!t) return NULL;
    if (!name) {
        tj__err(t->ctx, TJ_ERR_ARG, file, line, "%s: argument name is NULL", what);
        return NULL;
    }
    i = tj_tree_find(t, name);
    if (i < 0) {
        tj__err(t->ctx, TJ_ERR_ARG, file, line, "%s: the tree has no leaf named '%s'", what, name);
        return NULL;
    }
    if (t->leaf[i].kind != k) {
        tj__err(t->ctx, TJ_ERR_ARG, file, line, "%s: leaf '%s' is %s, not %s", what, name, kn[t->leaf[i].kind], kn[k]);
        return NULL;
    }
    return &t->leaf[i];
}
TJDEF tj_array *tj_tree_get_array_at(const char *file, int line, const tj_tree *t, const char *name) {
    const tj__leaf *l = tj__tree_get(t, name, TJ_LEAF_ARRAY, "tj_tree_array", file, line);
    return l ? l->arr : NULL;
}
TJDEF tj_v tj_tree_get_v_at(const char *file, int line, const tj_tree *t, const char *name) {
    const tj__leaf *l = tj__tree_get(t, name, TJ_LEAF_VALUE, "tj_tree_v", file, line);
    return l ? l->v : NULL;
}
TJDEF int64_t tj_tree_get_int_at(const char *file, int line, const tj_tree *t, const char *name) {
    const tj__leaf *l = tj__tree_get(t, name, TJ_LEAF_INT, "tj_tree_int", file, line);
    return l ? l->i : 0;
}
TJDEF double tj_tree_get_float_at(const char *file, int line, const tj_tree *t, const char *name) {
    const tj__leaf *l = tj__tree_get(t, name, TJ_LEAF_FLOAT, "tj_tree_float", file, line);
    return l ? l->f : 0;
}
TJDEF const char *tj_tree_get_string_at(const char *file, int line, const tj_tree *t, const char *name) {
    const tj__leaf *l = tj__tree_get(t, name, TJ_LEAF_STRING, "tj_tree_string", file, line);
    return l ? l->s : NULL;
}
TJDEF tj_array *tj_tree_array_at(const tj_tree *t, int i) {
    return t && i >= 0 && i < t->n && t->leaf[i].kind == TJ_LEAF_ARRAY ? t->leaf[i].arr : NULL;
}
TJDEF tj_v tj_tree_v_at(const tj_tree *t, int i) {
    return t && i >= 0 && i < t->n && t->leaf[i].kind == TJ_LEAF_VALUE ? t->leaf[i].v : NULL;
}
TJDEF void tj_tree_merge(tj_tree *dst, tj_tree *src) {
    int i;
    if (!src) return;
    if (!dst) {
        tj__err(src->ctx, TJ_ERR_ARG, NULL, 0, "tj_tree_merge: argument dst is NULL");
        return;
    }
    if (dst == src) return; /* every leaf is already there */
    if (dst->ctx != src->ctx) {
        tj__err(dst->ctx, TJ_ERR_ARG, NULL, 0, "tj_tree_merge: src belongs to another context than dst (both trees are left as they were)");
        tj__err(src->ctx, TJ_ERR_ARG, NULL, 0, "tj_tree_merge: dst belongs to another context than src (both trees are left as they were)");
        return;
    }
    for (i = 0; i < src->n; i++) {
        tj__leaf *l = tj__tree_slot(dst, src->leaf[i].name), *s = &src->leaf[i];
        if (!l) continue;
        l->kind = s->kind;
        l->arr = s->arr;
        l->owned = s->owned;
        l->v = s->v;
        l->i = s->i;
        l->f = s->f;
        l->s = s->s;
        s->kind = TJ_LEAF_INT; /* ownership moved */
        s->s = NULL;
    }
    tj_tree_clear(src);
}
TJDEF tj_status tj_tree_map(tj_tree *t, tj_tree_map_fn fn, void *user) {
    int i, k;
    if (!t) return TJ_ERR_ARG;
    if (!fn) {
        tj__err(t->ctx, TJ_ERR_ARG, NULL, 0, "tj_tree_map: argument fn is NULL");
        return TJ_ERR_ARG;
    }
    for (i = 0; i < t->n; i++) {
        tj__leaf *l = &t->leaf[i];
        tj_array *r;
        if (l->kind != TJ_LEAF_ARRAY) continue;
        r = fn(l->arr, l->name, user);
        if (!r) { /* the leaf keeps its array */
            tj__err(t->ctx, TJ_ERR_ARG, NULL, 0, "tj_tree_map: fn returned NULL for leaf '%s'", l->name);
            return tj_status_of(t->ctx);
        }
        if (r != l->arr && (k = tj__tree_may_hold(t, l->name, r, 1, "tj_tree_map")) != 0) { /* the leaf keeps its array */
            if (k == -1) tj_array_free(r); /* the replacement was given to the tree */
            return tj_status_of(t->ctx);
        }
        if (r != l->arr) {
            if (l->owned) tj_array_free(l->arr);
            l->arr = r;
            l->owned = r->in_tree = 1;
        }
    }
    return TJ_OK;
}

/* ==== [3] graph and tracing ============================================== */
/* A graph is a list of nodes in creation order, which is a topological
   order: an op can only use values that exist. A node is one op applied to
   earlier nodes; its type is fully known when it is made (shape rules run at
   trace time), and it remembers the caller's file:line. Nodes made by an
   autodiff call carry that call's pass number, so later stages can tell the
   forward pass from the backward pass. */

typedef struct {
    int axis, axis2;             /* axis name ids (slice, concat, take, ...) */
    int axes[TJ_MAXDIM], naxes;  /* reduced / contracted axes                */
    int64_t start, stop;         /* slice bounds; pad lo, hi                 */
    double s;                    /* constant, exponent, eps, fill            */
    uint64_t key;                /* random key                               */
    int nb, nm, nk, nn;          /* dot: batch, m, k, n axis counts          */
    int trans_a, trans_b;        /* dot: operand layouts                     */
    int index;                   /* param: input position; proj: output #    */
    unsigned mesh;               /* collectives, axis_index, shard_slice: mesh axes (bit set) */
    int reg;                     /* custom, custom_vjp: the op's registry slot */
    int ncarry, nx, ncap;        /* scan: inputs are carry, xs, captures     */
    int length, reverse;         /* scan: iterations, direction              */
    int causal;                  /* attention: keys j <= query i only        */
    signed char perm[TJ_MAXDEV]; /* ppermute: destination rank of each rank, -1 none */
} tj__attr;

struct tj_node {
    tj_graph *g;
    int id, op;
    tj__type t;
    int nin;
    tj_node **in;
    tj__attr a;
    const char *file;
    int line;
    char *name;   /* checkpoint name (name op) or param leaf name           */
    int pass;     /* 0: forward; k: made by the k-th tj_vjp of the graph     */
    int remat;    /* a forward node that a backward body re-runs (recompute) */
    int reran;    /* a nested scan an enclosing backward body recomputes with
                     a scan of its own ([8] tj__rerun_scan): the outputs that
                     no scheduled node reads are dropped when compiled     */
    tj_node *summed; /* a partial sum: the psum that added it up ([4]), which
                        later uses in the same graph share */
    /* filled by the later stages */
    int live;     /* reachable from the outputs                              */
    int sched;    /* position in the schedule                                */
    int last;     /* schedule position of the last use                       */
    tj_node *root;/* the node whose buffer this one uses (views)             */
    int64_t off;  /* offset in the arena; -1: argument or output buffer     */
    int out_index;/* >= 0: this node's buffer is output #out_index          */
    int64_t scratch_off; /* kernel workspace in the arena, if any          */
    int64_t scratch_host_off; /* a scan body's host temp (nested offload)  */
    int pack_slots; /* matmul pack buffers its workspace holds, one per thread
                       of a device at compile time (tj__pack_slots, [10]) */
    tj__type lt;  /* its local (per-device) type, set by the planner        */
    tj_node *fused;   /* computed inside this consumer's fused loop (no buffer) */
    tj_node **members;/* a fused group's root: the nodes it computes, in order */
    int nmembers;
    int store;        /* a fused member read outside its group: also written to its buffer */
    int space;    /* memory space of its buffer: TJ_SPACE_DEVICE or _HOST   */
    tj_graph *sub;/* scan: the body                                         */
    tj_node **proj; /* multi-output ops: the projection nodes, one per output */
    int nproj;
    const tj_policy *policy; /* scan: what its VJP keeps per iteration (-> pol) */
    tj_policy pol;           /* the caller's policy, copied                   */
    tj_node *repl;           /* an inlined region's output: the node that replaced it */
    tj_node *rerun;          /* scan: the next node in the ring of scans that run
                                this body (a region re-run by a backward body,
                                [8] tj__rerun_region): an output one of them
                                gains, all gain */
};

struct tj_graph {
    tj_ctx *ctx;
    tj_node **nodes;
    int n, cap;
    tj_node **params;
    int nparam, capparam;
    int npass;    /* how many tj_vjp calls this graph has seen          */
    int cur_pass; /* the pass new nodes belong to (0 outside tj_vjp)     */
    const char *file;
    int line;
    /* subgraphs (scan bodies): the enclosing graph, values captured from it
       (outer value -> this graph's PARAM), and the body's outputs */
    tj_graph *parent;
    tj_node **cap_outer, **cap_param;
    int ncap, capcap;
    tj_node **outs;
    int nout;
    int refs;              /* bodies are shared by clones of scan nodes  */
    struct tj_prog *prog;  /* the compiled body                          */
    struct tj__report *report; /* residual decisions (top graph only)    */
    /* inside shard_map: types are per-device (local) and record the mesh
       axes each value varies over; check: enforce and use those sets */
    int manual, check;
    tj_node **cap_src;     /* a capture into shard_map: the value before it was replicated */
    int sealed;            /* a body whose SCAN node exists: the user's ops may
                              no longer add to it (tj__node; autodiff may) */
    int finished;          /* a top-level graph whose tj_jit has returned:
                              nothing may add to it or its bodies */
    tj_node *owner;        /* a body: the first scan node made for it (the
                              user's scan or region; [8] tj__enclosing) */
};

/* A compiled program: the schedule and the memory plan of a graph. */
struct tj_prog {
    tj_ctx *ctx;
    tj_graph *g;
    int owns_graph;        /* top-level programs own their graph; bodies don't */
    char *name;
    const char *file;
    int line;
    unsigned mesh_gen;     /* the context's mesh at tj_jit                 */
    int nout;
    tj_node **outs;        /* graph outputs, in output-tree order          */
    char **out_names;
    tj_tree *static_out;   /* non-array leaves the function returned       */
    tj_tree *static_in;    /* the example's non-array leaves: traced in as
                              constants, so a run must not ask for others */
    tj_node **sched;
    int nsched;
    int *donate;           /* per param: may its buffer be reused          */
    int *out_donor;        /* per output: param index whose buffer it takes, or -1 */
    int64_t arena_bytes[2];/* temp arena per memory space                  */
    void *arena_raw[TJ_MAXDEV][2]; /* kept between runs (no page faults per
                                      step); freed with the program         */
    tj_event *events;      /* the last profiled run's timeline              */
    int nevents;
    tj_backend *backend;   /* the context's backend at tj_jit (NULL: CPU): fusion
                              and the arenas were made for it ([12] tj_run_at) */
    tj_memory_analysis mem;
    double flops;
};

/* What a CPU kernel sees: the node (op, attributes), local types of inputs
   and output, and buffers. With sharding, local types are each device's
   shard; kernels never look at global shapes.
   The tables it, in (nin entries) and pout (one per output: nproj, a
   fused group's nmembers) point into the kern's own arrays below when they
   fit (every op but a big scan: custom ops and concat take 16 inputs, a
   fused group of TJ__MAXFUSE members 3 inputs and 1 store each), else into
   one block the runner allocated for this call (heap; [11]
   tj__kern_tables); so a copy of a kern (devsim queues them) must set its
   tables again. */
typedef struct tj__kern tj__kern;
#define TJ__KIN 72  /* at least 3 * TJ__MAXFUSE ([11] checks) */
#define TJ__KOUT 24 /* at least TJ__MAXFUSE */
struct tj__kern {
    tj_ctx *ctx;
    tj_node *n;
    int nin;
    const tj__type **it; /* the inputs' local types, nin of them           */
    const void **in;     /* the inputs' buffers, nin of them               */
    tj__type ot;
    void *out;
    void *scratch;
    void *scratch_host; /* a scan's body temp in host memory (offload inside nested scans) */
    void **pout; /* multi-output ops: the buffers of their outputs (nproj)   */
    int nthreads;
    struct tj__rdv *rdv; /* where this device meets the others (collectives) */
    int dev;
    char *err; /* a kernel that finds bad data (index out of range) writes here */
    /* a GPU backend runs a custom op's launcher on its stream with this */
    int (*custom_gpu)(struct tj__kern *k, void *stream);
    void *heap; /* the tables' block when they do not fit the arrays below */
    /* the tables' own storage (not cleared per call: only [0, nin) is set) */
    const tj__type *it_s[TJ__KIN];
    const void *in_s[TJ__KIN];
    void *pout_s[TJ__KOUT];
};

/* A VJP rule: given the cotangent g of node n, the cotangents of its
   inputs in gin. A multi-output node (scan, custom ops) reads its
   projections' cotangents from ctx->proj_ct instead. */
typedef tj_status (*tj__vjp_fn)(tj_node *n, tj_v g, tj_v *gin);

/* TJ__RERUN: a multi-output op that a remat policy may recompute (run
   again for its outputs); the others (scans, custom ops) are saved */
enum { TJ__VIEW = 1, TJ__NODIFF = 2, TJ__SOURCE = 4, TJ__MULTI = 8, TJ__RERUN = 16 };
/* a sharding rule: fits the inputs in[] and sets the output's sharding in *t */
typedef int (*tj__shard_fn)(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line);

typedef struct {
    const char *name;
    unsigned flags;
    void (*cpu)(tj__kern *k);
    tj__vjp_fn vjp;
    double (*flops)(const tj_node *n);
    int64_t (*scratch)(const tj_node *n); /* kernel workspace in the arena */
    tj__shard_fn shard;                   /* sharding rule ([4])              */
    void (*attrs)(const tj_node *n, FILE *f); /* its attributes in the program text ([13]) */
} tj__opdef;

/* The op table. Unary elementwise ops are the rows of TJ__UNARY_OPS (in
   the public part, with their forward formula and derivative: their
   builders, CPU and CUDA kernels, fused loops, VJP and harness test come
   from the row); binary ones are the rows of TJ__BINARY_OPS (formula here,
   VJP in [5]); every other op is one line here plus one block in [5]
   holding its builder (shape rule), CPU kernel, VJP rule and cost, and
   names its sharding rule ([4]). Formulas evaluate in double; TJ__EXP and
   TJ__TANH are libm's, or, for f32 and bf16 results, tj__fexp and
   tj__ftanh (see there). max and min return a NaN operand, as JAX does,
   and order -0 below +0 as JAX (XLA) does: max(-0, +0) = +0 and
   min(+0, -0) = -0 in either order (the sum of two zeros is -0 only when
   both are; the reductions' folds do the same). */
#define TJ__BINARY_OPS(X)            \
    X(ADD, "add", a + b)             \
    X(SUB, "sub", a - b)             \
    X(MUL, "mul", a * b)             \
    X(DIV, "div", a / b)             \
    X(MAX2, "max", a > b || a != a ? a : a == b && a == 0.0 ? a + b : b) \
    X(MIN2, "min", a < b || a != a ? a : a == b && a == 0.0 ? -(-a - b) : b) \
    X(LT, "lt", (double)(a < b))     \
    X(LE, "le", (double)(a <= b))    \
    X(GT, "gt", (double)(a > b))     \
    X(GE, "ge", (double)(a >= b))    \
    X(EQ, "eq", (double)(a == b))    \
    X(NE, "ne", (double)(a != b))
#define TJ__OTHER_OPS(X)                                                                                       \
    /*  op             name            flags                    CPU kernel        VJP rule            flops            scratch   sharding rule   attributes printed */ \
    X(PARAM, "param", TJ__SOURCE | TJ__NODIFF, tj__k_none, 0, tj__flops_zero, 0, tj__sh_given, tj__pr_name)                                         \
    X(FILL, "fill", TJ__SOURCE | TJ__NODIFF, tj__k_fill, 0, tj__flops_out, 0, tj__sh_given, tj__pr_const)                                            \
    X(ARANGE, "arange", TJ__SOURCE | TJ__NODIFF, tj__k_arange, 0, tj__flops_out, 0, tj__sh_given, tj__pr_axes)                                      \
    X(UNIFORM, "uniform", TJ__SOURCE | TJ__NODIFF, tj__k_random, 0, tj__flops_out, 0, tj__sh_given, tj__pr_axes)                                    \
    X(NORMAL, "normal", TJ__SOURCE | TJ__NODIFF, tj__k_random, 0, tj__flops_out, 0, tj__sh_given, tj__pr_axes)                                      \
    X(SELECT, "select", 0, tj__k_ew, tj__vjp_select, tj__flops_out, 0, tj__sh_ew, tj__pr_axes)                                              \
    X(DOT, "dot", 0, tj__k_dot, tj__vjp_dot, tj__flops_dot, tj__dot_scratch, tj__sh_dot, tj__pr_dot)                                            \
    X(RELAYOUT, "relayout", 0, tj__k_copy, tj__vjp_id, tj__flops_zero, 0, tj__sh_ew, tj__pr_axes)                                               \
    X(RESHAPE, "reshape", TJ__VIEW, tj__k_none, tj__vjp_reshape, tj__flops_zero, 0, tj__sh_reshape, tj__pr_axes)                                     \
    X(SLICE, "slice", 0, tj__k_slice, tj__vjp_slice, tj__flops_zero, 0, tj__sh_whole, tj__pr_axes)                                                 \
    X(CONCAT, "concat", 0, tj__k_concat, tj__vjp_concat, tj__flops_zero, 0, tj__sh_whole, tj__pr_axes)                                             \
    X(PAD, "pad", 0, tj__k_pad, tj__vjp_pad, tj__flops_zero, 0, tj__sh_whole, tj__pr_axes)                                                         \
    X(TAKE, "take", 0, tj__k_take, tj__vjp_take, tj__flops_zero, 0, tj__sh_take, tj__pr_axes)                                                     \
    X(SCATTER_ADD, "scatter_add", 0, tj__k_take, tj__vjp_scatter, tj__flops_in, 0, tj__sh_scatter, tj__pr_axes)                                      \
    X(ONE_HOT, "one_hot", TJ__NODIFF, tj__k_one_hot, 0, tj__flops_zero, 0, tj__sh_ew, tj__pr_axes)                                              \
    X(ARGMAX, "argmax", TJ__NODIFF, tj__k_argm, 0, tj__flops_in, 0, tj__sh_whole, tj__pr_axes)                                               \
    X(ARGMIN, "argmin", TJ__NODIFF, tj__k_argm, 0, tj__flops_in, 0, tj__sh_whole, tj__pr_axes)                                               \
    X(ARGMAX_PART, "argmax_part", TJ__NODIFF, tj__k_argm, 0, tj__flops_in, 0, tj__sh_argm_part, tj__pr_axes)                                \
    X(ARGMIN_PART, "argmin_part", TJ__NODIFF, tj__k_argm, 0, tj__flops_in, 0, tj__sh_argm_part, tj__pr_axes)                                \
    X(CAUSAL, "causal_mask", 0, tj__k_causal, tj__vjp_causal, tj__flops_zero, 0, tj__sh_whole, tj__pr_axes)                                        \
    X(SOFTMAX, "softmax", 0, tj__k_rowop, tj__vjp_softmax, tj__flops_row, 0, tj__sh_whole, tj__pr_axes)                                            \
    X(LOG_SOFTMAX, "log_softmax", 0, tj__k_rowop, tj__vjp_log_softmax, tj__flops_row, 0, tj__sh_whole, tj__pr_axes)                                \
    X(LAYER_NORM, "layer_norm", 0, tj__k_rowop, tj__vjp_layer_norm, tj__flops_row, 0, tj__sh_whole, tj__pr_axes)                                   \
    X(CROSS_ENTROPY, "cross_entropy", 0, tj__k_rowop, tj__vjp_cross_entropy, tj__flops_row, 0, tj__sh_whole, tj__pr_axes)                          \
    X(SOFTMAX_GRAD, "softmax_grad", 0, tj__k_rowop, tj__vjp_row_grad, tj__flops_row, 0, tj__sh_whole, tj__pr_axes)                                 \
    X(LAYER_NORM_GRAD, "layer_norm_grad", 0, tj__k_rowop, tj__vjp_row_grad, tj__flops_row, 0, tj__sh_whole, tj__pr_axes)                           \
    X(CROSS_ENTROPY_GRAD, "cross_entropy_grad", 0, tj__k_rowop, tj__vjp_row_grad, tj__flops_row, 0, tj__sh_whole, tj__pr_axes)                     \
    X(XENT_PART, "cross_entropy_part", 0, tj__k_rowop, tj__vjp_cross_entropy, tj__flops_row, 0, tj__sh_xent_part, tj__pr_axes)                     \
    X(XENT_PART_GRAD, "cross_entropy_part_grad", 0, tj__k_rowop, tj__vjp_row_grad, tj__flops_row, 0, tj__sh_xent_part, tj__pr_axes)               \
    X(ATTENTION, "attention", TJ__MULTI | TJ__RERUN, tj__k_attention, tj__vjp_attention, tj__flops_attention, 0, tj__sh_given, tj__pr_attention)            \
    X(ATTENTION_GRAD, "attention_grad", TJ__MULTI, tj__k_attention_grad, tj__vjp_attention_grad, tj__flops_attention, tj__attention_scratch, tj__sh_given, tj__pr_attention) \
    X(STOP_GRADIENT, "stop_gradient", TJ__VIEW | TJ__NODIFF, tj__k_none, 0, tj__flops_zero, 0, tj__sh_ew, tj__pr_axes)                          \
    X(NAME, "name", TJ__VIEW, tj__k_none, tj__vjp_id, tj__flops_zero, 0, tj__sh_ew, tj__pr_name)                                                \
    X(COPY, "copy", 0, tj__k_copy, tj__vjp_id, tj__flops_zero, 0, tj__sh_ew, tj__pr_axes)                                                      \
    X(TO_HOST, "offload", 0, tj__k_memcpy, tj__vjp_id, tj__flops_zero, 0, tj__sh_copy, tj__pr_axes)                                            \
    X(TO_DEVICE, "fetch", 0, tj__k_memcpy, tj__vjp_id, tj__flops_zero, 0, tj__sh_copy, tj__pr_axes)                                            \
    X(SCAN, "scan", TJ__MULTI, tj__k_scan, tj__vjp_scan, tj__flops_scan, tj__scan_scratch, tj__sh_given, tj__pr_axes)                              \
    X(PROJ, "out", 0, tj__k_none, 0, tj__flops_zero, 0, tj__sh_given, tj__pr_axes)                                                     \
    X(ALL_GATHER, "all_gather", 0, tj__k_all_gather, tj__vjp_coll, tj__flops_zero, tj__coll_scratch, tj__sh_given, tj__pr_coll)                  \
    X(PSUM, "psum", 0, tj__k_psum, tj__vjp_coll, tj__flops_zero, tj__coll_scratch, tj__sh_given, tj__pr_coll)                                    \
    X(REDUCE_SCATTER, "reduce_scatter", 0, tj__k_reduce_scatter, tj__vjp_coll, tj__flops_zero, tj__coll_scratch, tj__sh_given, tj__pr_coll)      \
    X(SHARD_SLICE, "shard_slice", 0, tj__k_shard_slice, tj__vjp_coll, tj__flops_zero, 0, tj__sh_given, tj__pr_coll)                    \
    X(ALL_TO_ALL, "all_to_all", 0, tj__k_all_to_all, tj__vjp_coll, tj__flops_zero, tj__coll_scratch, tj__sh_given, tj__pr_coll)                    \
    X(PPERMUTE, "ppermute", 0, tj__k_ppermute, tj__vjp_coll, tj__flops_zero, tj__coll_scratch, tj__sh_given, tj__pr_coll)                          \
    X(AG_DOT, "all_gather_dot", 0, tj__k_cdot, 0, tj__flops_dot, tj__cdot_scratch, tj__sh_given, tj__pr_cdot)                                      \
    X(DOT_RS, "dot_scatter", 0, tj__k_cdot, 0, tj__flops_dot, tj__cdot_scratch, tj__sh_given, tj__pr_cdot)                                         \
    X(PMAX, "pmax", 0, tj__k_psum, tj__vjp_coll, tj__flops_zero, tj__coll_scratch, tj__sh_given, tj__pr_coll)                                      \
    X(PVARY, "pvary", TJ__VIEW, tj__k_none, tj__vjp_coll, tj__flops_zero, 0, tj__sh_given, tj__pr_mesh)                             \
    X(AXIS_INDEX, "axis_index", TJ__SOURCE | TJ__NODIFF, tj__k_axis_index, 0, tj__flops_zero, 0, tj__sh_given, tj__pr_mesh)         \
    X(CUSTOM, "custom", TJ__MULTI, tj__k_custom, tj__vjp_custom, tj__flops_zero, 0, tj__sh_given, tj__pr_custom)                     \
    X(CUSTOM_VJP, "custom_vjp", TJ__MULTI, tj__k_custom_vjp, tj__vjp_custom_vjp, tj__flops_zero, 0, tj__sh_given, tj__pr_axes)

/* ops that move data between devices (all_gather .. pmax; all_gather_dot
   and dot_scatter are a dot and its collective in one node, made by
   tj_jit for simulated devices: see "collective matmul" in [11]) */
#define TJ__IS_COLL(op) ((op) >= TJ__OP_ALL_GATHER && (op) <= TJ__OP_PMAX)
enum {
#define TJ__E1(op, ...) TJ__OP_##op,
#define TJ__E2(op, ...) TJ__OP_##op,
    TJ__UNARY_OPS(TJ__E1) TJ__BINARY_OPS(TJ__E1) TJ__OTHER_OPS(TJ__E2) TJ__REDUCE_OPS(TJ__E1)
#undef TJ__E1
#undef TJ__E2
    TJ__NOPS
};

static const char *tj__opname(int op);
static unsigned tj__ops_flags(int op);
#define TJ__OPNAME(op) tj__opname(op)

static tj_graph *tj__graph_new(tj_ctx *c, const char *file, int line) {
    tj_graph *g = (tj_graph *)tj__calloc(sizeof *g);
    if (!g) {
        tj__err(c, TJ_ERR_OOM, file, line, "out of memory creating a graph");
        return NULL;
    }
    g->ctx = c;
    g->file = file;
    g->line = line;
    g->refs = 1;
    return g;
}
struct tj_prog;
static void tj__prog_free_body(struct tj_prog *p);
static void tj__report_free(struct tj__report *r);
static void tj__graph_free(tj_graph *g) {
    int i;
    if (!g || --g->refs > 0) return;
    for (i = 0; i < g->n; i++) {
        tj__graph_free(g->nodes[i]->sub);
        TJ_FREE(g->nodes[i]->members);
        TJ_FREE(g->nodes[i]->proj);
        TJ_FREE(g->nodes[i]->in);
        TJ_FREE(g->nodes[i]->name);
        TJ_FREE(g->nodes[i]);
    }
    tj__prog_free_body(g->prog);
    tj__report_free(g->report);
    TJ_FREE(g->nodes);
    TJ_FREE(g->params);
    TJ_FREE(g->cap_outer);
    TJ_FREE(g->cap_param);
    TJ_FREE(g->cap_src);
    TJ_FREE(g->outs);
    TJ_FREE(g);
}
TJDEF tj_graph *tj_graph_of(tj_v v) { return v ? v->g : NULL; }
TJDEF tj_ctx *tj_graph_ctx(tj_graph *g) { return g ? g->ctx : NULL; }
TJDEF tj_dtype tj_v_dtype(tj_v v) { return v ? v->t.dt : TJ_F32; }
TJDEF int tj_v_rank(tj_v v) { return v ? v->t.rank : 0; }
TJDEF int64_t tj_v_dim(tj_v v, const char *axis) {
    int i;
    if (!v || !axis) return -1;
    for (i = 0; i < v->t.rank; i++)
        if (strcmp(tj__name(v->g->ctx, v->t.ax[i]), axis) == 0) return v->t.dim[i];
    return -1;
}
TJDEF const char *tj_v_axis(tj_v v, int i) { return v && i >= 0 && i < v->t.rank ? tj__name(v->g->ctx, v->t.ax[i]) : NULL; }
TJDEF const char *tj_v_describe(tj_v v, char *buf, size_t n) {
    if (!buf || !n) return "";
    if (!v) snprintf(buf, n, "(null)");
    else tj__type_str(v->g->ctx, &v->t, buf, n);
    return buf;
}

/* Append a node. Inputs must be non-NULL values of g (a NULL input means an
   earlier op failed: return NULL quietly so its message survives). `a` holds
   the op's attributes (NULL: none); they are set before the sharding rule
   runs, which may read them (the axes a softmax needs whole, ...). */
static tj_node *tj__capture(tj_graph *g, tj_node *v);
static int tj__shard_rule(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line);
static int tj__vary_rule(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const char *file, int line);
/* The graph new ops go to: while a body is being traced, an op whose
   inputs all come from enclosing functions still belongs to the body (its
   inputs are captured), as in JAX: the body function's ops are the body. */
static int tj__encloses(const tj_graph *outer, const tj_graph *g) {
    for (; g; g = g->parent) if (g == outer) return 1;
    return 0;
}
static tj_graph *tj__cur(tj_graph *g) { return g && g->ctx->cur && tj__encloses(g, g->ctx->cur) ? g->ctx->cur : g; }
/* A value kept (through a global or user data) past the tj_jit that traced
   it: an op on it would grow a compiled program's graph. An error. */
static int tj__finished(tj_graph *g, const char *what, const char *file, int line) {
    while (g && g->parent) g = g->parent;
    if (!g || !g->finished) return 0;
    if (g->ctx->status == TJ_OK)
        tj__err(g->ctx, TJ_ERR_ARG, file, line, "%s: an input is a value of a traced function whose tj_jit has returned: a traced value lives only while "
                "its function is traced (pass arrays in as inputs instead)", what);
    return 1;
}
static tj_node *tj__node_t(tj_graph *g, int op, const tj__type *t, int nin, tj_node *const *in, const tj__attr *a, const char *file, int line,
                           tj_node **cin, tj_node **fin);
/* tj__node_t with its two tables of nin inputs: on the stack up to 64 (every
   op but a big scan), else on the heap */
static tj_node *tj__node(tj_graph *g, int op, const tj__type *t, int nin, tj_node *const *in, const tj__attr *a, const char *file, int line) {
    tj_node *cin[64], *fin[64], **h, *n;
    if (nin <= 64) return tj__node_t(g, op, t, nin, in, a, file, line, cin, fin);
    if (!(h = (tj_node **)tj__malloc(sizeof(tj_node *) * 2 * (size_t)nin))) {
        if (g) tj__err(g->ctx, TJ_ERR_OOM, file, line, "%s: out of memory for %d inputs", TJ__OPNAME(op), nin);
        return NULL;
    }
    n = tj__node_t(g, op, t, nin, in, a, file, line, h, h + nin);
    TJ_FREE(h);
    return n;
}
static tj_node *tj__node_t(tj_graph *g, int op, const tj__type *t, int nin, tj_node *const *in, const tj__attr *a, const char *file, int line,
                           tj_node **cin, tj_node **fin) {
    tj_node *n;
    int i;
    tj__type tt;
    tj__attr at;
    if (!g) return NULL;
    g = tj__cur(g);
    if (g->sealed && !g->ctx->autodiff && tj__tracing() && g->ctx->status == TJ_OK) { /* a value the body function leaked (through user data) */
        tj__err(g->ctx, TJ_ERR_ARG, file, line, "%s: an input is a value made inside a scan, checkpoint or shard_map body that has finished tracing: "
                "use the values it returned", TJ__OPNAME(op));
        return NULL;
    }
    if (tj__finished(g, TJ__OPNAME(op), file, line)) return NULL;
    for (i = 0; i < nin; i++) {
        if (!in[i]) { /* an earlier op failed (its message stands), or the caller passed NULL */
            if (g->ctx->status == TJ_OK) tj__err(g->ctx, TJ_ERR_ARG, file, line, "%s: input %d is NULL", TJ__OPNAME(op), i);
            return NULL;
        }
        cin[i] = in[i];
        if (in[i]->g != g) { /* a value of an enclosing function: capture it */
            if (!(cin[i] = tj__capture(g, in[i]))) {
                if (g->ctx->status == TJ_OK)
                    tj__err(g->ctx, TJ_ERR_ARG, file, line, "%s: input %d belongs to another traced function", TJ__OPNAME(op), i);
                return NULL;
            }
        }
    }
    if (g->ctx->status != TJ_OK) return NULL; /* tracing already failed */
    if (tj__type_check(g->ctx, t, TJ__OPNAME(op), file, line)) return NULL; /* element and byte counts fit */
    if (a) at = *a; /* the op's attributes: its sharding rule reads them */
    else memset(&at, 0, sizeof at);
    for (i = 0; i < nin; i++) fin[i] = cin[i];
    tt = *t;
    if (g->manual ? tj__vary_rule(g, op, &tt, nin, fin, file, line) : g->ctx->nmesh && tj__shard_rule(g, op, &tt, nin, fin, &at, file, line)) return NULL;
    t = &tt;
    if (g->n == g->cap) {
        int nc = g->cap ? g->cap * 2 : 64;
        tj_node **nn = (tj_node **)TJ_REALLOC(g->nodes, sizeof(tj_node *) * (size_t)nc);
        if (!nn) {
            tj__err(g->ctx, TJ_ERR_OOM, file, line, "%s: out of memory growing the graph", TJ__OPNAME(op));
            return NULL;
        }
        g->nodes = nn;
        g->cap = nc;
    }
    n = (tj_node *)tj__calloc(sizeof *n);
    if (!n || (nin && !(n->in = (tj_node **)tj__malloc(sizeof(tj_node *) * (size_t)nin)))) {
        TJ_FREE(n);
        tj__err(g->ctx, TJ_ERR_OOM, file, line, "%s: out of memory", TJ__OPNAME(op));
        return NULL;
    }
    n->g = g;
    n->id = g->n;
    n->op = op;
    n->t = *t;
    n->nin = nin;
    for (i = 0; i < nin; i++) n->in[i] = fin[i];
    n->a = at;
    n->file = file;
    n->line = line;
    n->pass = g->cur_pass;
    n->off = -1;
    n->out_index = -1;
    g->nodes[g->n++] = n;
    return n;
}
static tj_ctx *tj__vctx(tj_v v) { return v ? v->g->ctx : NULL; }
static tj_ctx *tj__tracing_ctx(void) { return tj__tracing() ? tj__tracing()->ctx : NULL; }
/* Append p to g's parameter list (p->a.index is its position). */
static int tj__add_param(tj_graph *g, tj_node *p) {
    if (g->nparam == g->capparam) {
        int nc = g->capparam ? 2 * g->capparam : 16;
        tj_node **np = (tj_node **)TJ_REALLOC(g->params, sizeof(tj_node *) * (size_t)nc);
        if (!np) {
            tj__err(g->ctx, TJ_ERR_OOM, p->file, p->line, "out of memory adding a parameter");
            return -1;
        }
        g->params = np;
        g->capparam = nc;
    }
    p->a.index = g->nparam;
    g->params[g->nparam++] = p;
    return 0;
}
/* The PARAM of g standing for v, a value of an enclosing graph (made on
   first use, through every graph in between). This is how a scan body
   closes over the weights of the function around it. A value captured
   into a shard_map body is replicated first (in_spec "all replicated"),
   so the body sees all of it, invariant over every mesh axis. */
static tj_node *tj__reshard(tj_node *x, const uint8_t *sh, const char *cause, const char *file, int line);
static unsigned tj__sh_used(const uint8_t *sh, int rank);
static tj_node *tj__capture1(tj_graph *g, tj_node *v);
static tj_node *tj__capture(tj_graph *g, tj_node *v) { /* makes nodes in exactly these graphs */
    tj_graph *saved = g->ctx->cur;
    tj_node *p;
    g->ctx->cur = NULL;
    p = tj__capture1(g, v);
    g->ctx->cur = saved;
    return p;
}
static tj_node *tj__capture1(tj_graph *g, tj_node *v) {
    tj_node *outer, *src, *p;
    int i;
    if (v->g == g) return v;
    if (!g->parent) return NULL;
    for (i = 0; i < g->ncap; i++)
        if (g->cap_outer[i] == v || g->cap_param[i] == v || g->cap_src[i] == v) return g->cap_param[i];
    if (!(outer = src = tj__capture1(g->parent, v))) return NULL;
    for (i = 0; i < g->ncap; i++)
        if (g->cap_src[i] == src) return g->cap_param[i];
    if (g->manual && !g->parent->manual && (outer->t.partial || outer->t.vary || tj__sh_used(outer->t.sh, outer->t.rank))) {
        uint8_t none[TJ_MAXDIM] = {0};
        char b[256];
        if (outer->t.vary) { /* a per-device value (a residual stack) has no replicated form */
            tj__err(g->ctx, TJ_ERR_ARG, v->file, v->line, "shard_map: cannot capture the per-device value %s", tj_v_describe(outer, b, sizeof b));
            return NULL;
        }
        if (!(outer = tj__reshard(outer, none, "shard_map capture", v->file, v->line))) return NULL;
    } else if (!g->manual && outer->t.partial) { /* a partial sum is added up once, outside (else its gradient is wrong) */
        if (!(outer = tj__reshard(outer, outer->t.sh, "scan capture", v->file, v->line))) return NULL;
    }
    if (g->ncap == g->capcap) {
        int nc = g->capcap ? 2 * g->capcap : 8;
        tj_node **a = (tj_node **)TJ_REALLOC(g->cap_outer, sizeof(tj_node *) * (size_t)nc);
        tj_node **b = a ? (tj_node **)TJ_REALLOC(g->cap_param, sizeof(tj_node *) * (size_t)nc) : NULL;
        tj_node **c = b ? (tj_node **)TJ_REALLOC(g->cap_src, sizeof(tj_node *) * (size_t)nc) : NULL;
        if (a) g->cap_outer = a;
        if (b) g->cap_param = b;
        if (!c) {
            tj__err(g->ctx, TJ_ERR_OOM, v->file, v->line, "out of memory capturing a value into a scan body");
            return NULL;
        }
        g->cap_src = c;
        g->capcap = nc;
    }
    p = tj__node(g, TJ__OP_PARAM, &outer->t, 0, NULL, NULL, v->file, v->line);
    if (!p || tj__add_param(g, p)) {
        tj__err(g->ctx, TJ_ERR_OOM, v->file, v->line, "out of memory capturing a value into a scan body");
        return NULL;
    }
    p->name = tj__strdup("capture");
    g->cap_src[g->ncap] = src;
    g->cap_outer[g->ncap] = outer;
    g->cap_param[g->ncap++] = p;
    return p;
}
/* Axis list of a builder argument, each of which must be an axis of x. */
static int tj__axes_of(tj_v x, const char *s, int *ids, const char *what, const char *file, int line) {
    tj_ctx *c = tj__vctx(x);
    int n = s ? tj__parse_names(c, s, ids, TJ_MAXDIM, what, file, line) : -1, i;
    if (!s) tj__err(c, TJ_ERR_ARG, file, line, "%s: the axis argument is NULL", what);
    char b[256];
    for (i = 0; i < n; i++)
        if (tj__axis_index(&x->t, ids[i]) < 0) {
            tj__type_str(c, &x->t, b, sizeof b);
            tj__err(c, TJ_ERR_AXIS, file, line, "%s: axis '%s' is not an axis of %s", what, tj__name(c, ids[i]), b);
            return -1;
        }
    return n;
}
static int tj__one_axis(tj_v x, const char *s, const char *what, const char *file, int line) {
    int ids[TJ_MAXDIM], n = tj__axes_of(x, s, ids, what, file, line);
    if (n < 0) return -1;
    if (n != 1) {
        tj__err(tj__vctx(x), TJ_ERR_AXIS, file, line, "%s: want exactly one axis name, got \"%s\"", what, s ? s : "");
        return -1;
    }
    return ids[0];
}

/* ==== [4] sharding on a device mesh ====================================== */
/* The mesh lives in the context; a sharding lives in each value's type
   (tj__type.sh: per axis a bit set of mesh axes, in mesh order; .partial:
   mesh axes over which devices hold partial sums still to be added). Local
   (per-device) shapes divide each axis by the sizes of its mesh axes.
   tj__node calls tj__shard_rule before it records a node: the op's rule
   (a function its row of the op table names: tj__sh_ew, tj__sh_sum, ...)
   says how inputs must be laid out, tj__reshard inserts the collectives
   that get them there, and the output's sharding follows.
   Collectives are ordinary nodes; their VJP is "reshard the cotangent back",
   which turns all-gather into reduce-scatter and psum into a broadcast. */

static tj_status tj__procs_devices(tj_ctx *c); /* process mode: this process's devices ([11]) */
static tj__shard_fn tj__opshard(int op);        /* the op's sharding rule (the op table) */

TJDEF int tj_devices(tj_ctx *c) { return c ? c->ndev : 0; }
TJDEF tj_status tj_set_devices(tj_ctx *c, int n) {
    if (!c) return TJ_ERR_ARG;
    if (n < 1 || n > TJ_MAXDEV) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_set_devices: %d devices (1..%d)", n, TJ_MAXDEV);
        return TJ_ERR_ARG;
    }
    if ((c->nmesh || c->ndev != n) && tj__changing_while_tracing(c, "tj_set_devices", NULL, 0)) return TJ_ERR_STATE;
    if (c->nmesh || c->ndev != n) c->mesh_gen++;
    c->ndev = n;
    c->nmesh = 0;
    return tj__procs_devices(c);
}
TJDEF tj_status tj_set_mesh_at(const char *file, int line, tj_ctx *c, const char *mesh) {
    tj__type t;
    int64_t prod = 1;
    int i;
    if (!c) return TJ_ERR_ARG;
    if (!mesh) {
        tj__err(c, TJ_ERR_ARG, file, line, "tj_set_mesh: argument mesh is NULL");
        return TJ_ERR_ARG;
    }
    if (tj__parse_shape(c, mesh, TJ_F32, &t, 0, "tj_set_mesh", file, line)) return c->status;
    if (t.rank > TJ__MAXMESH) {
        tj__err(c, TJ_ERR_ARG, file, line, "tj_set_mesh: \"%s\" has %d axes (at most %d)", mesh, t.rank, TJ__MAXMESH);
        return TJ_ERR_ARG;
    }
    for (i = 0; i < t.rank; i++) prod *= t.dim[i];
    if (prod != c->ndev) {
        tj__err(c, TJ_ERR_SHAPE, file, line, "tj_set_mesh: mesh \"%s\" has %lld devices but there are %d (tj_set_devices / TJ_DEVICES)", mesh, (long long)prod,
                c->ndev);
        return TJ_ERR_SHAPE;
    }
    for (i = 0; i < t.rank && t.rank == c->nmesh; i++)
        if (c->mesh_ax[i] != t.ax[i] || c->mesh_size[i] != (int)t.dim[i]) break;
    if ((t.rank != c->nmesh || i < t.rank) && tj__changing_while_tracing(c, "tj_set_mesh", file, line)) return TJ_ERR_STATE;
    if (t.rank != c->nmesh || i < t.rank) c->mesh_gen++; /* another mesh: see tj__array_mesh_ok */
    c->nmesh = t.rank;
    for (i = 0; i < t.rank; i++) {
        c->mesh_ax[i] = t.ax[i];
        c->mesh_size[i] = (int)t.dim[i];
    }
    return TJ_OK;
}
/* devices along the mesh axes in mask m */
static int tj__mesh_count(const tj_ctx *c, unsigned m) {
    int i, n = 1;
    for (i = 0; i < c->nmesh; i++) if (m >> i & 1) n *= c->mesh_size[i];
    return n;
}
static int tj__mesh_coord(const tj_ctx *c, int dev, int i) {
    int k, stride = 1;
    for (k = c->nmesh - 1; k > i; k--) stride *= c->mesh_size[k];
    return dev / stride % c->mesh_size[i];
}
/* rank of dev inside its group along mask m (mixed radix, mesh order) */
static int tj__mesh_rank(const tj_ctx *c, int dev, unsigned m) {
    int i, r = 0;
    for (i = 0; i < c->nmesh; i++) if (m >> i & 1) r = r * c->mesh_size[i] + tj__mesh_coord(c, dev, i);
    return r;
}
/* the device of rank r in dev's group along m */
static int tj__mesh_peer(const tj_ctx *c, int dev, unsigned m, int r) {
    int i, d = 0, coord[TJ__MAXMESH];
    for (i = c->nmesh - 1; i >= 0; i--) {
        if (m >> i & 1) { coord[i] = r % c->mesh_size[i]; r /= c->mesh_size[i]; }
        else coord[i] = tj__mesh_coord(c, dev, i);
    }
    for (i = 0; i < c->nmesh; i++) d = d * c->mesh_size[i] + coord[i];
    return d;
}
static tj__type tj__local(const tj_ctx *c, const tj__type *t) {
    tj__type l = *t;
    int i;
    for (i = 0; i < t->rank; i++) {
        if (t->sh[i]) l.dim[i] = t->dim[i] / tj__mesh_count(c, t->sh[i]);
        l.sh[i] = 0;
    }
    l.partial = 0;
    return l;
}
static int64_t tj__lbytes(const tj_ctx *c, const tj__type *t) {
    tj__type l = tj__local(c, t);
    return tj__bytes(&l);
}
static const char *tj__mesh_names(const tj_ctx *c, unsigned m, char *buf, size_t n) {
    size_t k = 0;
    int i;
    buf[0] = 0;
    for (i = 0; i < c->nmesh; i++)
        if (m >> i & 1) {
            snprintf(buf + k, n - k, "%s%s", k ? "+" : "", tj__name((tj_ctx *)c, c->mesh_ax[i]));
            k = strlen(buf);
        }
    return buf;
}
static const char *tj__spec_str(const tj_ctx *c, const tj__type *t, char *buf, size_t n) {
    size_t k = 0;
    int i;
    char m[64];
    buf[0] = 0;
    for (i = 0; i < t->rank; i++) {
        snprintf(buf + k, n - k, "%s%s:%s", i ? " " : "", tj__name((tj_ctx *)c, t->ax[i]), t->sh[i] ? tj__mesh_names(c, t->sh[i], m, sizeof m) : "-");
        k = strlen(buf);
    }
    if (t->partial) snprintf(buf + k, n - k, " (partial sum over %s)", tj__mesh_names(c, t->partial, m, sizeof m));
    return buf;
}
/* axis i of array a: its mesh axes in the order its spec gave them (mesh
   order for an array made without one); returns their count */
static int tj__arr_order(const tj_array *a, int i, int *ord) {
    int j, n = 0;
    unsigned got = 0;
    for (j = 0; j < a->ctx->nmesh; j++)
        if (a->t.sh[i] >> j & 1) ord[n++] = j;
    for (j = 0; j < n; j++) got |= a->ord[i][j] < TJ__MAXMESH ? 1u << a->ord[i][j] : 1u << 31;
    for (j = 0; got == a->t.sh[i] && j < n; j++) ord[j] = a->ord[i][j]; /* (an order of these mesh axes only) */
    return n;
}
/* a takes the order a spec gave (tj__parse_spec_ord's ord) */
static void tj__arr_set_order(tj_array *a, unsigned char (*ord)[TJ__MAXMESH]) { memcpy(a->ord, ord, sizeof a->ord); }
/* an array's spec as a spec writes it, its tuples in its order */
static const char *tj__arr_spec_str(const tj_array *a, char *buf, size_t n) {
    size_t k = 0;
    int i, j, m, ord[TJ__MAXMESH];
    buf[0] = 0;
    for (i = 0; i < a->t.rank; i++) {
        snprintf(buf + k, n - k, "%s%s:%s", i ? " " : "", tj__name(a->ctx, a->t.ax[i]), a->t.sh[i] ? "" : "-");
        k = strlen(buf);
        for (j = 0, m = tj__arr_order(a, i, ord); j < m; j++) {
            snprintf(buf + k, n - k, "%s%s", j ? "+" : "", tj__name(a->ctx, a->ctx->mesh_ax[ord[j]]));
            k = strlen(buf);
        }
    }
    return buf;
}
/* Parse a spec into sh[] for type t. strict: every named axis must be an
   axis of t. Checks: known mesh axes, each used once, divisible sizes. */
/* Levenshtein distance between a and the n bytes at b (short names only) */
static int tj__edit_distance(const char *a, const char *b, size_t n) {
    int d[2][65], i, j;
    size_t m = strlen(a);
    if (m > 64 || n > 64) return 99;
    for (j = 0; j <= (int)n; j++) d[0][j] = j;
    for (i = 1; i <= (int)m; i++) {
        int *p = d[(i - 1) & 1], *q = d[i & 1];
        q[0] = i;
        for (j = 1; j <= (int)n; j++) {
            int v = p[j - 1] + (a[i - 1] != b[j - 1]);
            if (p[j] + 1 < v) v = p[j] + 1;
            if (q[j - 1] + 1 < v) v = q[j - 1] + 1;
            q[j] = v;
        }
    }
    return d[m & 1][n];
}
/* a likely misspelling: a few edits, few for the length ("dta" ~ "data", not "tp" ~ "dp") */
static int tj__similar(const char *a, const char *b, size_t n) {
    size_t m = strlen(a) > n ? strlen(a) : n;
    int d = tj__edit_distance(a, b, n);
    return d > 0 && d <= 2 && (size_t)(3 * d) <= m;
}
/* Parse a partition spec ("embed:data batch:data+model") or, not strict,
   logical rules: a rule's mesh axis missing from the mesh is skipped (one
   rule string serves every mesh), and when two rules claim the same mesh
   axis for one value, the first in the string wins. */
/* ord (NULL: not wanted) gets, per axis of t, its mesh axes in the order
   the spec lists them (JAX's layout of the axis: the first most major). */
#define TJ__SPEC_SEP(ch) ((ch) == ' ' || (ch) == ',' || (ch) == '\t' || (ch) == '\n')
static int tj__parse_spec_ord(tj_ctx *c, const char *spec, const tj__type *t, uint8_t *sh, unsigned char (*ord)[TJ__MAXMESH], int strict, const char *what,
                              const char *file, int line) {
    const char *s = spec ? spec : "";
    unsigned used = 0, named = 0; /* mesh axes used; axes of t the spec named */
    int i;
    for (i = 0; i < TJ_MAXDIM; i++) sh[i] = 0;
    if (ord) memset(ord, 0, sizeof(unsigned char[TJ__MAXMESH]) * TJ_MAXDIM);
    while (*s) {
        const char *b;
        int id, k, no = 0;
        unsigned m = 0;
        unsigned char lst[TJ__MAXMESH];
        if (TJ__SPEC_SEP(*s)) { s++; continue; }
        b = s;
        while (*s && tj__isname(*s)) s++;
        if (s == b || *s != ':') {
            tj__err(c, TJ_ERR_ARG, file, line, "%s: bad partition spec near \"%s\" (want \"axis:mesh_axis axis:mesh_axis+mesh_axis\")", what, b);
            return -1;
        }
        id = tj__intern(c, b, (size_t)(s - b));
        s++;
        /* the tuple: items ("-", "none" or a mesh axis) joined by '+' ("a:" alone: replicated) */
        while (*s && !TJ__SPEC_SEP(*s)) {
            const char *e = s;
            int j, mid, found = -1;
            if (*s == '-') e++; /* "-": replicated */
            else
                while (*e && tj__isname(*e)) e++;
            if (e == s || (*e && *e != '+' && !TJ__SPEC_SEP(*e)) || (*e == '+' && (!e[1] || TJ__SPEC_SEP(e[1])))) { /* ("a:data-model", "a:data+") */
                const char *at = e == s ? s : e;
                tj__err(c, TJ_ERR_ARG, file, line, "%s: bad mesh axis in spec near \"%s\" (want mesh axes joined by '+', \"none\" or \"-\")", what, at);
                return -1;
            }
            if (!((e - s == 4 && strncmp(s, "none", 4) == 0) || (e - s == 1 && *s == '-'))) {
                mid = tj__intern(c, s, (size_t)(e - s));
                for (j = 0; j < c->nmesh; j++) if (c->mesh_ax[j] == mid) found = j;
                if (found < 0 && !strict) { /* rules may name mesh axes this mesh lacks */
                    for (j = 0; j < c->nmesh; j++) /* .. but not a misspelt one */
                        if (tj__similar(tj__name(c, c->mesh_ax[j]), s, (size_t)(e - s)))
                            tj__warn(c, file, line, "%s: the rules name mesh axis '%.*s', which the mesh does not have; did you mean '%s'? (the rule is skipped)", what,
                                     (int)(e - s), s, tj__name(c, c->mesh_ax[j]));
                    s = *e == '+' ? e + 1 : e;
                    continue;
                }
                if (found < 0) {
                    tj__err(c, TJ_ERR_AXIS, file, line, "%s: '%s' is not an axis of the mesh (spec \"%s\")", what, tj__name(c, mid), spec);
                    return -1;
                }
                if ((used | m) >> found & 1) {
                    if (!strict) { /* rules: the first rule that claims a mesh axis wins */
                        s = *e == '+' ? e + 1 : e;
                        continue;
                    }
                    tj__err(c, TJ_ERR_AXIS, file, line, "%s: mesh axis '%s' is used twice in spec \"%s\"", what, tj__name(c, mid), spec);
                    return -1;
                }
                m |= 1u << found;
                lst[no++] = (unsigned char)found;
            }
            s = *e == '+' ? e + 1 : e;
        }
        k = tj__axis_index(t, id);
        if (k < 0) {
            if (strict) {
                char b2[256];
                tj__type_str(c, t, b2, sizeof b2);
                tj__err(c, TJ_ERR_AXIS, file, line, "%s: spec names axis '%s', which %s does not have", what, tj__name(c, id), b2);
                return -1;
            }
            continue;
        }
        if (named >> k & 1) { /* "a:data a:model": which one was meant? (rules: the first wins) */
            if (!strict) continue;
            tj__err(c, TJ_ERR_AXIS, file, line, "%s: axis '%s' is named twice in spec \"%s\"", what, tj__name(c, id), spec);
            return -1;
        }
        named |= 1u << k;
        if (m && t->dim[k] % tj__mesh_count(c, m) && !strict) { /* rules do not apply to axes they cannot split */
            char mb[64];
            if (t->dim[k] > 1) /* (a size-1 axis, e.g. one sample, is plainly whole) */
                tj__warn(c, file, line, "%s: axis '%s' of size %lld cannot be split over mesh axes %s (%d devices): the rule is skipped, the axis replicated", what,
                     tj__name(c, id), (long long)t->dim[k], tj__mesh_names(c, m, mb, sizeof mb), tj__mesh_count(c, m));
            m = 0;
        }
        if (m && t->dim[k] % tj__mesh_count(c, m)) {
            char mb[64];
            tj__err(c, TJ_ERR_SHAPE, file, line, "%s: axis '%s' of size %lld is not divisible by mesh axes %s (%d devices)", what, tj__name(c, id),
                    (long long)t->dim[k], tj__mesh_names(c, m, mb, sizeof mb), tj__mesh_count(c, m));
            return -1;
        }
        used |= m;
        sh[k] = (uint8_t)m;
        if (ord && m) memcpy(ord[k], lst, (size_t)no);
    }
    return 0;
}
static int tj__parse_spec(tj_ctx *c, const char *spec, const tj__type *t, uint8_t *sh, int strict, const char *what, const char *file, int line) {
    return tj__parse_spec_ord(c, spec, t, sh, NULL, strict, what, file, line);
}

/* ---- collectives as nodes ---- */
static tj_node *tj__collective(tj_graph *g, int op, tj_node *x, const tj__type *t, int axis, unsigned mesh, const char *cause, const char *file, int line) {
    tj_node *n = tj__node(g, op, t, 1, &x, NULL, file, line); /* a given type: no rule runs */
    if (!n) return NULL;
    n->a.axis = axis;
    n->a.mesh = mesh;
    if (cause && !(n->name = tj__strdup(cause))) return NULL;
    return n;
}
/* Make x have sharding sh (and no partial sums): psum / reduce-scatter the
   partial sums, all-gather axes that must lose mesh axes, slice axes that
   gain them (a local slice moves no data). */
/* A replicated value made by elementwise ops from constant and random
   sources (scalars aside) need not be made whole and sliced: sharding
   propagates back through the elementwise ops to the sources, so that each
   device generates only its slice (JAX does the same for a sharded random
   init). Sources are counter-based: a slice has the values it has in the
   whole. The whole chain stays if something else uses it. */
static int tj__regen_ok(const tj_node *x, int depth) {
    int j;
    if (depth > 16 || x->t.partial || tj__sh_used(x->t.sh, x->t.rank)) return 0;
    if (tj__ops_flags(x->op) & TJ__SOURCE) return x->op != TJ__OP_PARAM && x->op != TJ__OP_AXIS_INDEX;
    if (!(x->op < TJ__OP_PARAM || x->op == TJ__OP_SELECT)) return 0; /* unary, binary, select */
    for (j = 0; j < x->nin; j++)
        if (x->in[j]->t.rank > 0 && !tj__regen_ok(x->in[j], depth + 1)) return 0;
    return 1;
}
static tj_node *tj__regen(tj_node *x, const uint8_t *sh) {
    tj_node *in[3];
    tj__type t = x->t;
    int i, j;
    for (i = 0; i < t.rank; i++) t.sh[i] = sh[i];
    if (tj__ops_flags(x->op) & TJ__SOURCE) return tj__node(x->g, x->op, &t, 0, NULL, &x->a, x->file, x->line);
    for (j = 0; j < x->nin && j < 3; j++) {
        uint8_t w[TJ_MAXDIM];
        in[j] = x->in[j];
        if (in[j]->t.rank == 0) continue;
        for (i = 0; i < in[j]->t.rank; i++) w[i] = sh[tj__axis_index(&x->t, in[j]->t.ax[i])];
        if (!(in[j] = tj__regen(in[j], w))) return NULL;
    }
    return tj__node(x->g, x->op, &t, x->nin, in, &x->a, x->file, x->line);
}
static tj_node *tj__reshard(tj_node *x, const uint8_t *sh, const char *cause, const char *file, int line) {
    tj_graph *g;
    tj__type t;
    int i;
    if (!x) return NULL;
    g = x->g;
    t = x->t;
    for (i = 0; i < t.rank; i++) /* a rule that asks for an uneven split is a bug, never a silent wrong block */
        if (sh[i] && t.dim[i] % tj__mesh_count(g->ctx, sh[i])) {
            char mb[64];
            tj__err(g->ctx, TJ_ERR_SHAPE, file, line, "%s: axis '%s' of size %lld cannot be split over mesh axes %s (%d devices)", cause,
                    tj__name(g->ctx, t.ax[i]), (long long)t.dim[i], tj__mesh_names(g->ctx, sh[i], mb, sizeof mb), tj__mesh_count(g->ctx, sh[i]));
            return NULL;
        }
    if (t.partial) {
        int a = -1;
        for (i = 0; i < t.rank; i++) if (!t.sh[i] && sh[i] == t.partial && t.dim[i] % tj__mesh_count(g->ctx, t.partial) == 0) a = i;
        if (a >= 0) {
            t.sh[a] = t.partial;
            t.partial = 0;
            x = tj__collective(g, TJ__OP_REDUCE_SCATTER, x, &t, x->t.ax[a], x->t.partial, cause, file, line);
        } else if (x->summed && x->summed->g == tj__cur(g)) {
            x = x->summed; /* added up once already, where this use can see it */
            t = x->t;
        } else {
            tj_node *p;
            t.partial = 0;
            p = tj__collective(g, TJ__OP_PSUM, x, &t, -1, x->t.partial, cause, file, line);
            if (p) x->summed = p;
            x = p;
        }
        if (!x) return NULL;
    }
    for (i = 0; i < t.rank; i++) { /* a mesh set moving to another axis: one all-to-all */
        int j;
        if (!t.sh[i] || t.sh[i] == sh[i]) continue;
        for (j = 0; j < t.rank; j++)
            if (j != i && !t.sh[j] && sh[j] == t.sh[i] && !sh[i] && t.dim[j] % tj__mesh_count(g->ctx, t.sh[i]) == 0) {
                tj_node *y;
                t.sh[j] = t.sh[i];
                t.sh[i] = 0;
                y = tj__collective(g, TJ__OP_ALL_TO_ALL, x, &t, t.ax[j], t.sh[j], cause, file, line);
                if (!y) return NULL;
                y->a.axis2 = t.ax[i];
                x = y;
                break;
            }
    }
    for (i = 0; i < t.rank; i++)
        if (t.sh[i] && t.sh[i] != sh[i]) {
            unsigned m = t.sh[i];
            t.sh[i] = 0;
            if (!(x = tj__collective(g, TJ__OP_ALL_GATHER, x, &t, t.ax[i], m, cause, file, line))) return NULL;
        }
    if (!tj__sh_used(t.sh, t.rank) && tj__sh_used(sh, t.rank) && !(tj__ops_flags(x->op) & TJ__SOURCE) && tj__regen_ok(x, 0))
        return tj__regen(x, sh); /* e.g. normal * std: each device makes its slice of the normal */
    for (i = 0; i < t.rank; i++)
        if (!t.sh[i] && sh[i]) {
            t.sh[i] = sh[i];
            if ((tj__ops_flags(x->op) & TJ__SOURCE) && x->op != TJ__OP_PARAM) {
                /* a constant or random source: make only this device's slice */
                if (!(x = tj__node(g, x->op, &t, 0, NULL, &x->a, x->file, x->line))) return NULL;
            } else if (!(x = tj__collective(g, TJ__OP_SHARD_SLICE, x, &t, t.ax[i], sh[i], cause, file, line))) return NULL;
        }
    return x;
}
/* Does sharding sh use any mesh axis twice (across axes, or with partial)? */
static unsigned tj__sh_used(const uint8_t *sh, int rank) {
    unsigned u = 0;
    int i;
    for (i = 0; i < rank; i++) u |= sh[i];
    return u;
}
/* Do a and b differ only by axes of size 1 (a reshape that adds or drops
   them moves no data, so sharding can follow the axis names)? */
static int tj__same_but_ones(const tj__type *a, const tj__type *b) {
    int i = 0, j = 0;
    for (;;) {
        while (i < a->rank && a->dim[i] == 1) i++;
        while (j < b->rank && b->dim[j] == 1) j++;
        if (i == a->rank || j == b->rank) return i == a->rank && j == b->rank;
        if (a->ax[i] != b->ax[j] || a->dim[i] != b->dim[j]) return 0;
        i++, j++;
    }
}
/* ---- sharding rules: one function per kind of op ----
   Each op's row in the op table names its rule; tj__node runs it before it
   records the node. A rule fits the inputs (replacing in[] by resharded
   values) and sets the output's sharding in *t; -1 on error. The rules are
   built from three steps: the output follows its inputs by axis name
   (tj__sh_follow), each input is asked for a sharding (want), and
   tj__sh_fit inserts the collectives that get it there. */

/* The output's sharding by axis name: the first input that shards an axis
   wins; axes the op needs whole stay replicated (whole & 1: the attribute's
   axis and axis2, whole & 2: its axes list); a mesh axis is used once.
   same_pos: an axis follows only an input axis at the same position, or an
   input that differs only by size-1 axes (reshape). */
static int tj__sh_given(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line);
/* run by tj__node before it records a node (outside shard_map) */
static int tj__shard_rule(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    return tj__opshard(op)(g, op, t, nin, in, at, file, line);
}
static void tj__sh_follow(tj__type *t, int nin, tj_node *const *in, const tj__attr *at, int whole_mask, int same_pos) {
    int i, j, k;
    for (i = 0; i < TJ_MAXDIM; i++) t->sh[i] = 0;
    t->partial = 0;
    for (i = 0; i < t->rank; i++) {
        int whole = 0;
        if (whole_mask & 1) whole = t->ax[i] == at->axis || t->ax[i] == at->axis2;
        if (whole_mask & 2)
            for (j = 0; j < at->naxes; j++) whole |= t->ax[i] == at->axes[j];
        for (j = 0; j < nin && !whole && !t->sh[i]; j++) {
            k = tj__axis_index(&in[j]->t, t->ax[i]);
            if (k >= 0 && in[j]->t.dim[k] == t->dim[i] && (!same_pos || k == i || tj__same_but_ones(&in[j]->t, t))) t->sh[i] = in[j]->t.sh[k];
        }
        if (t->sh[i] & tj__sh_used(t->sh, i)) t->sh[i] = 0;
    }
}
/* What an input is asked for by default: the output's sharding on the axes
   they share, its other axes whole. */
static void tj__sh_want_out(const tj__type *t, const tj_node *x, uint8_t *want) {
    int i, k;
    for (i = 0; i < x->t.rank; i++) {
        k = tj__axis_index(t, x->t.ax[i]);
        want[i] = k >= 0 ? t->sh[k] : 0;
    }
}
/* Reshard *x to want (adding up any partial sums it carries). */
static int tj__sh_fit(tj_node **x, const uint8_t *want, int op, const char *file, int line) {
    int i, need = (*x)->t.partial != 0;
    for (i = 0; i < (*x)->t.rank; i++) need |= want[i] != (*x)->t.sh[i];
    return need && !(*x = tj__reshard(*x, want, tj__opname(op), file, line)) ? -1 : 0;
}
/* Every input takes the output's sharding on the axes it shares. */
static int tj__sh_fit_all(tj__type *t, int nin, tj_node **in, int op, const char *file, int line) {
    uint8_t want[TJ_MAXDIM];
    int j;
    for (j = 0; j < nin; j++) {
        tj__sh_want_out(t, in[j], want);
        if (tj__sh_fit(&in[j], want, op, file, line)) return -1;
    }
    return 0;
}

/* The builder sets the sharding itself (sources, parameters, collectives,
   scan, custom ops): nothing to do. */
static int tj__sh_given(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    (void)g, (void)op, (void)t, (void)nin, (void)in, (void)at, (void)file, (void)line;
    return 0;
}
/* Elementwise (and relayout, copy, ...): the output follows the inputs. */
static int tj__sh_ew(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    (void)g;
    tj__sh_follow(t, nin, in, at, 0, 0);
    return tj__sh_fit_all(t, nin, in, op, file, line);
}
/* A copy between memory spaces (offload, fetch) of a value of the same
   type: each device copies its block as it is, a partial sum included
   (the residual an offloading policy keeps of a dot over a sharded axis:
   adding it up here, where its reader adds it up again, summed it twice). */
static int tj__sh_copy(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    int i, same = nin == 1 && in[0]->t.rank == t->rank;
    for (i = 0; same && i < t->rank; i++) same = in[0]->t.ax[i] == t->ax[i] && in[0]->t.dim[i] == t->dim[i];
    if (!same) return tj__sh_ew(g, op, t, nin, in, at, file, line);
    for (i = 0; i < t->rank; i++) t->sh[i] = in[0]->t.sh[i];
    t->partial = in[0]->t.partial;
    return 0;
}
/* Binary ops: elementwise, except that a sum or difference of two partial
   sums over the same mesh axes, laid out alike, is itself one: it stays
   unreduced, and one psum later serves both (a gradient with two
   contributions, as a tied embedding's, is added up once, not twice). */
static int tj__sh_binary(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    int i, alike = (op == TJ__OP_ADD || op == TJ__OP_SUB) && in[0]->t.partial && in[0]->t.partial == in[1]->t.partial &&
                   in[0]->t.rank == t->rank && in[1]->t.rank == t->rank;
    for (i = 0; alike && i < t->rank; i++)
        alike = in[0]->t.ax[i] == t->ax[i] && in[1]->t.ax[i] == t->ax[i] && in[0]->t.sh[i] == in[1]->t.sh[i];
    if (!alike) return tj__sh_ew(g, op, t, nin, in, at, file, line);
    for (i = 0; i < t->rank; i++) t->sh[i] = in[0]->t.sh[i];
    t->partial = in[0]->t.partial;
    return 0;
}
/* An op that needs the axes its attribute names whole (reduce_max, slice,
   pad, concat, the row ops, causal_mask): those are gathered. */
static int tj__sh_whole(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    (void)g;
    tj__sh_follow(t, nin, in, at, 3, 0);
    return tj__sh_fit_all(t, nin, in, op, file, line);
}
/* sum: a reduced axis may stay sharded; each device sums its part and the
   result is a partial SUM over those mesh axes, added up (psum) where a
   later op needs it whole. Only a sum may leave partials this way: max or
   min over a sharded axis would need a pmax, so they use tj__sh_whole. */
static int tj__sh_sum(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    uint8_t want[TJ_MAXDIM];
    int i;
    (void)g, (void)nin;
    tj__sh_follow(t, 1, in, at, 0, 0);
    tj__sh_want_out(t, in[0], want);
    for (i = 0; i < in[0]->t.rank; i++)
        if (tj__axis_index(t, in[0]->t.ax[i]) < 0) want[i] = in[0]->t.sh[i] & ~tj__sh_used(t->sh, t->rank);
    if (tj__sh_fit(&in[0], want, op, file, line)) return -1;
    for (i = 0; i < in[0]->t.rank; i++)
        if (tj__axis_index(t, in[0]->t.ax[i]) < 0) t->partial |= in[0]->t.sh[i];
    return 0;
}
/* reshape: renames and size-1 axes move no data, so sharding follows the
   names; a split or merge keeps sharded only the axes left where they are. */
static int tj__sh_reshape(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    uint8_t want[TJ_MAXDIM] = {0}; /* (tj__sh_want_out fills in[0]'s rank; g++ -O3 cannot see it) */
    int i, k, ones = tj__same_but_ones(&in[0]->t, t), moved = in[0]->t.rank != t->rank && !ones;
    (void)g, (void)nin;
    tj__sh_follow(t, 1, in, at, 0, 1);
    for (i = 0; moved && i < t->rank; i++) {
        k = tj__axis_index(&in[0]->t, t->ax[i]);
        if (k < 0 || k != i) t->sh[i] = 0;
    }
    tj__sh_want_out(t, in[0], want);
    for (i = 0; moved && i < in[0]->t.rank; i++) {
        k = tj__axis_index(t, in[0]->t.ax[i]);
        if (k < 0 || k != i) want[i] = 0;
    }
    if (in[0]->t.partial && ones && !memcmp(want, in[0]->t.sh, (size_t)in[0]->t.rank)) {
        /* a length-1 axis added or dropped (a nested region's residual, stacked
           [_remat=1] and unstacked): a partial sum stays one, added up where
           the region's body adds it up (summing it here too psummed it twice) */
        t->partial = in[0]->t.partial;
        return 0;
    }
    return tj__sh_fit(&in[0], want, op, file, line);
}
/* take(table, idx): the indices' axes sit inside the output and take its
   sharding, and the indexed axis of the table is made whole. Where the
   indices and a kept axis of the table use the same mesh axis, the axis
   that comes first in the output would win: usually an index axis, so the
   table would be gathered along its kept axis. When the table is larger
   than the output (an embedding: a few rows of a big table), the table
   moves not at all instead:
   - its kept axes keep their sharding, and the indices (and the rows
     taken) are what moves;
   - an indexed axis split over mesh axes stays split (Megatron's
     vocab-parallel embedding): each device takes the rows its block holds
     and zeros for the others (tj__k_take), so the output is a partial sum
     over those mesh axes, which its reader adds up (the rows taken, where
     gathering would move the table). Its gradient, scatter_add, keeps the
     table's split (tj__vjp_take passes it on). */
static int tj__sh_take(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    unsigned kept = 0, split = 0;
    uint8_t want[TJ_MAXDIM];
    int i, k, ax = tj__axis_index(&in[0]->t, at->axis);
    (void)g;
    tj__sh_follow(t, nin, in, at, 1, 0);
    if (tj__bytes(&in[0]->t) > tj__bytes(t)) {
        for (i = 0; i < t->rank; i++)
            if ((k = tj__axis_index(&in[0]->t, t->ax[i])) >= 0) kept |= in[0]->t.sh[k];
        split = ax >= 0 ? in[0]->t.sh[ax] & ~kept : 0;
        for (i = 0; i < t->rank; i++) {
            k = tj__axis_index(&in[0]->t, t->ax[i]);
            t->sh[i] = k >= 0 ? in[0]->t.sh[k] : t->sh[i] & ~kept & ~split;
        }
    }
    if (!split) return tj__sh_fit_all(t, nin, in, op, file, line);
    t->partial = split;
    for (i = 0; i < in[0]->t.rank; i++) want[i] = in[0]->t.sh[i]; /* (a partial table is added up) */
    if (tj__sh_fit(&in[0], want, op, file, line)) return -1;
    tj__sh_want_out(t, in[1], want);
    return tj__sh_fit(&in[1], want, op, file, line);
}
/* a take or scatter_add whose indexed axis (ax, V rows here) is split
   over devices (above), or a cross_entropy_part (or its gradient) whose
   class axis is: the first row of this device's block and the whole
   axis's length, from the table's (logits') global type */
static void tj__split_block(const tj__kern *k, int ax, int64_t V, int64_t *off, int64_t *Vg) {
    const tj__type *gt = k->n->op == TJ__OP_SCATTER_ADD ? &k->n->t : &k->n->in[0]->t;
    *off = gt->sh[ax] ? (int64_t)tj__mesh_rank(k->ctx, k->dev, gt->sh[ax]) * V : 0;
    *Vg = gt->dim[ax];
}
/* scatter_add(upd, idx) into a table: the table's axes follow the update,
   its indexed axis whole unless split over at->mesh (the gradient of a
   vocab-parallel take: each device adds only the rows of its block);
   update axes that the indices drop may stay sharded, and sharded indices
   leave each device a partial sum of the table (scatter-add is a sum). */
static int tj__sh_scatter(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    uint8_t want[TJ_MAXDIM];
    int i, k;
    unsigned used;
    (void)g;
    tj__sh_follow(t, nin, in, at, 1, 0);
    if (at->mesh && (k = tj__axis_index(t, at->axis)) >= 0 && !(tj__sh_used(t->sh, t->rank) & at->mesh)) t->sh[k] = (uint8_t)at->mesh;
    used = tj__sh_used(t->sh, t->rank);
    for (i = 0; i < in[0]->t.rank; i++) {
        k = tj__axis_index(t, in[0]->t.ax[i]);
        want[i] = k >= 0 ? t->sh[k] : in[0]->t.sh[i] & ~used;
    }
    if (tj__sh_fit(&in[0], want, op, file, line)) return -1;
    for (i = 0; i < in[1]->t.rank; i++) {
        k = tj__axis_index(&in[0]->t, in[1]->t.ax[i]);
        want[i] = k >= 0 && tj__axis_index(t, in[1]->t.ax[i]) < 0 ? in[0]->t.sh[k] & ~used : 0;
    }
    if (tj__sh_fit(&in[1], want, op, file, line)) return -1;
    for (i = 0; i < in[1]->t.rank; i++) t->partial |= in[1]->t.sh[i];
    return 0;
}

/* cross_entropy_part and its gradient (the vocab-parallel loss, [5]): the
   logits keep their sharding, their split class axis (at->axis) included;
   the statistics (the rows, _part, _stat) are split along _part as the
   class axis is, and the labels follow the rows. */
static int tj__sh_xent_part(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    uint8_t want[TJ_MAXDIM];
    int i, j, k, part = tj__intern(g->ctx, "_part", 5);
    unsigned cls;
    for (i = 0; i < in[0]->t.rank; i++) want[i] = in[0]->t.sh[i];
    if (tj__sh_fit(&in[0], want, op, file, line)) return -1; /* (partial logits are added up) */
    cls = in[0]->t.sh[tj__axis_index(&in[0]->t, at->axis)];
    for (j = 1; j <= nin; j++) { /* the labels (the statistics, the cotangent), then the output */
        const tj__type *x = j < nin ? &in[j]->t : t;
        for (i = 0; i < TJ_MAXDIM; i++) want[i] = 0;
        for (i = 0; i < x->rank; i++) want[i] = (k = tj__axis_index(&in[0]->t, x->ax[i])) >= 0 ? in[0]->t.sh[k] : x->ax[i] == part ? (uint8_t)cls : 0;
        if (j < nin && tj__sh_fit(&in[j], want, op, file, line)) return -1;
    }
    memcpy(t->sh, want, sizeof want);
    t->partial = 0;
    return 0;
}

/* argmax_part / argmin_part (a tj_argmax over a split axis, [5]): the
   input keeps its sharding, its split reduced axis (at->axis) included;
   the output's rows follow the input's axes, its _part axis is split as
   the reduced axis is (device r holds block r's winner), _vi whole. */
static int tj__sh_argm_part(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    uint8_t want[TJ_MAXDIM];
    int i, k, part = tj__intern(g->ctx, "_part", 5);
    (void)nin;
    for (i = 0; i < in[0]->t.rank; i++) want[i] = in[0]->t.sh[i];
    if (tj__sh_fit(&in[0], want, op, file, line)) return -1; /* (a partial input is added up) */
    for (i = 0; i < TJ_MAXDIM; i++) t->sh[i] = 0;
    for (i = 0; i < t->rank; i++)
        t->sh[i] = (k = tj__axis_index(&in[0]->t, t->ax[i])) >= 0 ? in[0]->t.sh[k] : t->ax[i] == part ? in[0]->t.sh[tj__axis_index(&in[0]->t, at->axis)] : 0;
    t->partial = 0;
    return 0;
}

/* dot: contracted and batch axes must be sharded alike on both sides (slice
   the replicated side when it can, else gather); the result is a partial
   sum over the contracted axes' mesh axes. */
static int tj__shard_dot(tj_node **a, tj_node **b, const int *ck, int nk, const char *file, int line) {
    uint8_t wa[TJ_MAXDIM], wb[TJ_MAXDIM];
    int i, ka, kb, changed;
    tj_node *x = *a, *y = *b;
    for (i = 0; i < x->t.rank; i++) wa[i] = x->t.sh[i];
    for (i = 0; i < y->t.rank; i++) wb[i] = y->t.sh[i];
    /* every axis the two share (contracted or batch) */
    for (ka = 0; ka < x->t.rank; ka++) {
        unsigned sa, sb;
        kb = tj__axis_index(&y->t, x->t.ax[ka]);
        if (kb < 0) continue;
        sa = wa[ka];
        sb = wb[kb];
        if (sa == sb) continue;
        if (sa && !sb && !(tj__sh_used(wb, y->t.rank) & sa)) wb[kb] = (uint8_t)sa;       /* slice y: free */
        else if (sb && !sa && !(tj__sh_used(wa, x->t.rank) & sb)) wa[ka] = (uint8_t)sb;  /* slice x: free */
        else if (sa && sb && tj__lbytes(x->g->ctx, &x->t) <= tj__lbytes(y->g->ctx, &y->t) && !(tj__sh_used(wa, x->t.rank) & sb & ~sa))
            wa[ka] = (uint8_t)sb; /* move the smaller operand to the other's sharding */
        else if (sa && sb && !(tj__sh_used(wb, y->t.rank) & sa & ~sb)) wb[kb] = (uint8_t)sa;
        else { wa[ka] = 0; wb[kb] = 0; } /* gather the axis on both sides */
    }
    /* a mesh axis may appear once in the result: free axes of a and b, plus the contracted ones */
    do {
        unsigned ua = 0, ub = 0, uk = 0;
        changed = 0;
        for (i = 0; i < x->t.rank; i++) {
            int isk = 0, j;
            for (j = 0; j < nk; j++) isk |= x->t.ax[i] == ck[j];
            if (isk) uk |= wa[i];
            else ua |= wa[i];
        }
        for (i = 0; i < y->t.rank; i++) if (tj__axis_index(&x->t, y->t.ax[i]) < 0) ub |= wb[i];
        if (ub & (ua | uk))
            for (i = 0; i < y->t.rank; i++)
                if (tj__axis_index(&x->t, y->t.ax[i]) < 0 && (wb[i] & (ua | uk))) { wb[i] = 0; changed = 1; }
        if (!changed && (ua & uk))
            for (i = 0; i < x->t.rank; i++) {
                int isk = 0, j;
                for (j = 0; j < nk; j++) isk |= x->t.ax[i] == ck[j];
                if (!isk && (wa[i] & uk)) { wa[i] = 0; changed = 1; }
            }
    } while (changed);
    if (x->t.partial || memcmp(wa, x->t.sh, (size_t)x->t.rank)) *a = tj__reshard(x, wa, "dot", file, line);
    if (y->t.partial || memcmp(wb, y->t.sh, (size_t)y->t.rank)) *b = tj__reshard(y, wb, "dot", file, line);
    return *a && *b ? 0 : -1;
}
/* The output sharding of a dot whose operands are fitted. */
static void tj__dot_out_sharding(const tj_node *a, const tj_node *b, const int *ck, int nk, tj__type *t) {
    int i, j, k;
    for (i = 0; i < TJ_MAXDIM; i++) t->sh[i] = 0;
    t->partial = 0;
    for (i = 0; i < t->rank; i++) {
        k = tj__axis_index(&a->t, t->ax[i]);
        if (k >= 0) t->sh[i] = a->t.sh[k];
        else if ((k = tj__axis_index(&b->t, t->ax[i])) >= 0) t->sh[i] = b->t.sh[k];
    }
    for (j = 0; j < nk; j++) t->partial |= a->t.sh[tj__axis_index(&a->t, ck[j])];
}
/* dot's rule (at->axes: the contracted axes). The builder runs it once
   before it lays the operands out for the kernel, so that relayouts copy
   slices; tj__node runs it again and finds the operands fitted. */
static int tj__sh_dot(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const tj__attr *at, const char *file, int line) {
    (void)g, (void)op, (void)nin;
    if (tj__shard_dot(&in[0], &in[1], at->axes, at->naxes, file, line)) return -1;
    tj__dot_out_sharding(in[0], in[1], at->axes, at->naxes, t);
    return 0;
}

/* inside shard_map there is no sharding to constrain: types are local */
static int tj__auto_only(tj_v x, const char *what, const char *f, int l) {
    if (!x->g->manual) return 0;
    tj__err(x->g->ctx, TJ_ERR_STATE, f, l, "%s: not inside tj_shard_map, whose values are per-device blocks (use the explicit collectives there)", what);
    return -1;
}
TJDEF tj_v tj_with_sharding_constraint_at(const char *f, int l, tj_v x, const char *spec) {
    uint8_t sh[TJ_MAXDIM];
    if (!x || tj__auto_only(x, "with_sharding_constraint", f, l)) return NULL;
    if (tj__parse_spec(x->g->ctx, spec, &x->t, sh, 1, "with_sharding_constraint", f, l)) return NULL;
    return tj__reshard(x, sh, "with_sharding_constraint", f, l);
}
TJDEF tj_v tj_shard_by_rules_at(const char *f, int l, tj_v x, const char *rules) {
    uint8_t sh[TJ_MAXDIM];
    if (!x || tj__auto_only(x, "shard_by_rules", f, l)) return NULL;
    if (tj__parse_spec(x->g->ctx, rules, &x->t, sh, 0, "shard_by_rules", f, l)) return NULL;
    return tj__reshard(x, sh, "shard_by_rules", f, l);
}
TJDEF tj_array *tj_device_put_at(const char *f, int l, tj_array *a, const char *spec) {
    tj__type t;
    tj_array *b;
    void *host;
    unsigned char ord[TJ_MAXDIM][TJ__MAXMESH];
    if (!a || (a->abstract ? !tj__array_mesh_ok(a, "device_put", f, l) : !tj__array_live(a, "device_put", f, l))) return NULL;
    t = a->t;
    if (tj__parse_spec_ord(a->ctx, spec, &a->t, t.sh, ord, 1, "device_put", f, l)) return NULL;
    if (a->abstract) { /* a new sharding, still no data */
        if ((b = tj__array_make(a->ctx, &t, 1, f, l))) tj__arr_set_order(b, ord);
        return b;
    }
    host = tj__malloc((size_t)tj__bytes(&a->t));
    if (!host) {
        tj__err(a->ctx, TJ_ERR_OOM, f, l, "device_put: out of memory");
        return NULL;
    }
    /* through the host: gather a's shards (from every process if they
       span processes), give each device its new slice */
    if (tj_array_read_all(a, a->t.dt, host) || !(b = tj__array_alloc(a->ctx, &t, f, l)) || tj__array_upload(b, host)) {
        TJ_FREE(host);
        return NULL;
    }
    TJ_FREE(host);
    tj__arr_set_order(b, ord);
    return b;
}
/* an array without buffers, placed by spec (tj_array_abstract, [2]) */
TJDEF tj_array *tj_array_abstract_at(const char *file, int line, tj_ctx *c, tj_dtype dt, const char *shape, const char *spec) {
    tj__type t;
    tj_array *a;
    unsigned char ord[TJ_MAXDIM][TJ__MAXMESH];
    if (!c) return NULL;
    memset(ord, 0, sizeof ord);
    if (tj__parse_shape(c, shape, dt, &t, 0, "tj_array_abstract", file, line)) return NULL;
    if (spec && *spec && tj__parse_spec_ord(c, spec, &t, t.sh, ord, 1, "tj_array_abstract", file, line)) return NULL;
    if ((a = tj__array_make(c, &t, 1, file, line))) tj__arr_set_order(a, ord);
    return a;
}
TJDEF tj_status tj_filter_shard_at(const char *f, int l, tj_tree *t, const char *rules) {
    int i;
    if (!t) return TJ_ERR_ARG;
    for (i = 0; i < t->n; i++) {
        tj__leaf *x = &t->leaf[i];
        if (x->kind == TJ_LEAF_VALUE) {
            tj_v v = tj_shard_by_rules_at(f, l, x->v, rules);
            if (!v) return tj_status_of(t->ctx);
            x->v = v;
        } else if (x->kind == TJ_LEAF_ARRAY) {
            tj_array r;
            char spec[512];
            tj_array *b;
            r = *x->arr; /* the rules, restricted to this leaf's axes, their tuples in the rules' order */
            if (tj__parse_spec_ord(t->ctx, rules, &x->arr->t, r.t.sh, r.ord, 0, "filter_shard", f, l)) return t->ctx->status;
            tj__arr_spec_str(&r, spec, sizeof spec);
            if (!(b = tj_device_put_at(f, l, x->arr, spec))) return t->ctx->status;
            if (x->owned) tj_array_free(x->arr);
            x->arr = b;
            x->owned = b->in_tree = 1;
        }
    }
    return TJ_OK;
}
TJDEF tj_status tj_check_rules_at(const char *f, int l, tj_ctx *c, const char *rules) {
    tj__type t; /* a scalar: every rule is parsed, none applies */
    uint8_t sh[TJ_MAXDIM];
    if (!c) return TJ_ERR_ARG;
    if (!rules) {
        tj__err(c, TJ_ERR_ARG, f, l, "tj_check_rules: argument rules is NULL");
        return TJ_ERR_ARG;
    }
    memset(&t, 0, sizeof t);
    return tj__parse_spec(c, rules, &t, sh, 0, "rules", f, l) ? (c->status ? c->status : TJ_ERR_ARG) : TJ_OK;
}
TJDEF const char *tj_v_sharding(tj_v v, char *buf, size_t n) {
    if (!buf || !n) return "";
    if (!v) { snprintf(buf, n, "(null)"); return buf; }
    return tj__spec_str(v->g->ctx, &v->t, buf, n);
}
TJDEF const char *tj_array_sharding(const tj_array *a, char *buf, size_t n) {
    if (!buf || !n) return "";
    if (!a) { snprintf(buf, n, "(null)"); return buf; }
    return tj__arr_spec_str(a, buf, n); /* (an array is never a partial sum) */
}
TJDEF const char *tj_v_axis_sharding(tj_v v, const char *axis, char *buf, size_t n) {
    int i;
    if (!buf || !n) return NULL;
    buf[0] = 0;
    for (i = 0; v && axis && i < v->t.rank; i++)
        if (strcmp(tj__name(v->g->ctx, v->t.ax[i]), axis) == 0) return v->t.sh[i] ? tj__mesh_names(v->g->ctx, v->t.sh[i], buf, n) : buf;
    return NULL;
}

/* ---- manual mode: inside shard_map ----
   A shard_map body is traced with each device's local types: no sharding
   rule runs there. Instead every value's type records the mesh axes it
   varies over (tj__type.vary, printed {V:data}): a body input varies over
   the mesh axes its in_spec names, a captured value over none. With
   checking on, each op's output varies over the union of its inputs' sets,
   and an input that varies over fewer axes is cast with pvary, a no-op at
   run time whose transpose is a psum. That psum is the only one autodiff
   adds, so a cotangent is summed only where a value really went from
   invariant to varying. With checking off nothing is tracked, and the
   boundary transposes defensively as JAX does (see tj__vjp_scan). The
   body calls collectives itself (tj_psum, tj_all_gather, ..); in manual
   graphs their VJPs are explicit transposes (tj__vjp_coll). */

/* The one parser of a list of mesh axes ("data model", "model+data",
   "data,model"), read in place (len bytes at axes: a spec's tuple too):
   ord[] gets the mesh axes in the order given, the count is returned, or
   -1 and an error naming `what` (what NULL: quietly) for a NULL list, a bad
   character, a name that is not an axis of the mesh, one named twice, or
   no axes. Mesh axes listed out of mesh order ("model data" on the mesh
   "data=2 model=2"): JAX numbers a group's devices, and lays out an axis
   split over several mesh axes, in the order given (the first most major),
   where the collectives' kernels and the sharding types number them in
   mesh order. So the axis_index and the blocks of an all_gather,
   psum_scatter or all_to_all, and of a shard_map in_spec or out_spec, are
   renumbered from one order to the other (tj__reorder), and an array keeps
   its spec's order for its process-local blocks (tj_array.ord).
   ppermute's pairs stay mesh-order ranks: JAX 0.10.2 numbers them so too
   (("model", "data") on a data=2 model=3 mesh: rank 1 is the device data=0
   model=1, whose axis_index is 2). */
static int tj__mesh_list(tj_ctx *c, const char *axes, size_t len, int *ord, const char *what, const char *f, int l) {
    const char *s = axes, *end = axes ? axes + len : NULL;
    unsigned seen = 0;
    int n = 0, j;
    if (!axes) {
        if (what) tj__err(c, TJ_ERR_ARG, f, l, "%s: an axis-name argument is NULL", what);
        return -1;
    }
    while (s < end) {
        const char *b = s;
        int found = -1;
        if (*s == ' ' || *s == '+' || *s == ',' || *s == '\t') {
            s++;
            continue;
        }
        while (s < end && tj__isname(*s)) s++;
        if (s == b) {
            if (what) tj__err(c, TJ_ERR_AXIS, f, l, "%s: bad character '%c' in axis list", what, *s);
            return -1;
        }
        for (j = 0; j < c->nmesh; j++) {
            const char *nm = tj__name(c, c->mesh_ax[j]);
            if (strlen(nm) == (size_t)(s - b) && !strncmp(nm, b, (size_t)(s - b))) found = j;
        }
        if (found < 0 || (seen >> found & 1)) {
            char mb[64];
            if (what)
                tj__err(c, TJ_ERR_AXIS, f, l, "%s: '%.*s' %s (mesh axes: %s)", what, (int)(s - b > 200 ? 200 : s - b), b,
                        found < 0 ? "is not an axis of the mesh" : "is named twice", tj__mesh_names(c, (1u << c->nmesh) - 1, mb, sizeof mb));
            return -1;
        }
        seen |= 1u << found;
        ord[n++] = found; /* (at most nmesh: each once) */
    }
    if (n == 0) {
        if (what) tj__err(c, TJ_ERR_AXIS, f, l, "%s: no mesh axes given", what);
        return -1;
    }
    return n;
}
/* the mesh axis bits of a list */
static unsigned tj__list_mask(const int *ord, int n) {
    unsigned m = 0;
    int i;
    for (i = 0; i < n; i++) m |= 1u << ord[i];
    return m;
}
/* "data model" or "data+model" -> mesh axis bits (ord, when not NULL,
   and *n get the order given); -1 and an error */
static int tj__mesh_mask(tj_ctx *c, const char *axes, int *ord, int *n, const char *what, const char *f, int l) {
    int o[TJ__MAXMESH], k = tj__mesh_list(c, axes, axes ? strlen(axes) : 0, ord ? ord : o, what, f, l);
    if (k < 0) return -1;
    if (n) *n = k;
    return (int)tj__list_mask(ord ? ord : o, k);
}
static int tj__in_order(const int *ord, int n) {
    int i;
    for (i = 1; i < n; i++) if (ord[i] < ord[i - 1]) return 0;
    return 1;
}
/* Renumber the blocks of `axis` of x (the group's devices, ord): to_mesh,
   from the order given to mesh order (block r of the order given moves to
   where the device of rank r sits in mesh order), else back. The axis is
   split into one axis per mesh axis and the block, transposed, merged. */
static tj_node *tj__reorder(const char *f, int l, tj_node *x, int axis, const int *ord, int n, int to_mesh) {
    tj_ctx *c;
    char into[256], grp[256], tag[16], *order;
    int i, k, sfx, G = 1, sorted[TJ__MAXMESH], src[TJ__MAXMESH], dst[TJ__MAXMESH];
    int64_t d;
    size_t w, cap;
    if (!x || tj__in_order(ord, n)) return x;
    c = x->g->ctx;
    if ((k = tj__axis_index(&x->t, axis)) < 0) return x;
    for (i = 0; i < n; i++) G *= c->mesh_size[ord[i]], sorted[i] = ord[i];
    d = x->t.dim[k];
    if (G <= 1 || d % G) return x; /* (the collective or the spec says why) */
    for (i = 1; i < n; i++) { /* mesh order */
        int v = sorted[i], j = i;
        while (j > 0 && sorted[j - 1] > v) { sorted[j] = sorted[j - 1]; j--; }
        sorted[j] = v;
    }
    for (i = 0; i < n; i++) src[i] = to_mesh ? ord[i] : sorted[i], dst[i] = to_mesh ? sorted[i] : ord[i];
    /* the helper axes' names: _mo<j> per mesh axis j and _mb, with a suffix
       where x already has an axis of such a name */
    for (sfx = 0;; sfx++) {
        char nm[48];
        int hit = 0, j, id;
        if (sfx) snprintf(tag, sizeof tag, "_%d", sfx);
        else tag[0] = 0;
        for (j = 0; j <= n && !hit; j++) {
            if (j < n) snprintf(nm, sizeof nm, "_mo%d%s", ord[j], tag);
            else snprintf(nm, sizeof nm, "_mb%s", tag);
            if ((id = tj__intern_at(c, nm, strlen(nm), "shard_map", f, l)) < 0) return NULL;
            hit = tj__axis_index(&x->t, id) >= 0;
        }
        if (!hit) break;
    }
    for (i = 0, w = 0; i < n; i++) w += (size_t)snprintf(into + w, sizeof into - w, "_mo%d%s=%d ", src[i], tag, c->mesh_size[src[i]]);
    snprintf(into + w, sizeof into - w, "_mb%s=%lld", tag, (long long)(d / G));
    for (i = 0, w = 0; i < n; i++) w += (size_t)snprintf(grp + w, sizeof grp - w, "_mo%d%s ", dst[i], tag);
    snprintf(grp + w, sizeof grp - w, "_mb%s", tag);
    for (i = 0, cap = strlen(grp) + 1; i < x->t.rank; i++) cap += strlen(tj__name(c, x->t.ax[i])) + 1; /* (axis names of any length) */
    if (!(order = (char *)tj__malloc(cap))) {
        tj__err(c, TJ_ERR_OOM, f, l, "out of memory");
        return NULL;
    }
    for (i = 0, w = 0; i < x->t.rank; i++) w += (size_t)snprintf(order + w, cap - w, "%s%s", w ? " " : "", i == k ? grp : tj__name(c, x->t.ax[i]));
    x = tj_split_at(f, l, x, tj__name(c, axis), into);
    x = x ? tj_transpose_at(f, l, x, order) : NULL;
    TJ_FREE(order);
    return x ? tj_merge_at(f, l, x, grp, tj__name(c, axis)) : NULL;
}
/* A shard_map spec's tuples listed out of mesh order: renumber the blocks
   of those axes of x (to_mesh: an input on its way in; else an output). */
static tj_node *tj__spec_reorder(const char *f, int l, tj_node *x, const char *spec, int to_mesh) {
    const char *s = spec ? spec : "";
    while (x && *s) {
        const char *b, *e;
        int ord[TJ__MAXMESH], n, id;
        if (*s == ' ' || *s == ',' || *s == '\t') { s++; continue; }
        for (b = s; *s && *s != ':' && *s != ' ' && *s != ','; s++) {}
        if (*s != ':') continue;
        id = tj__intern(x->g->ctx, b, (size_t)(s - b));
        for (e = ++s; *e && *e != ' ' && *e != ','; e++) {}
        for (n = 0; s < e && n < TJ__MAXMESH;) { /* the tuple's mesh axes, one name at a time: its "-" and "none" (replicated, which the
                                                    spec's parser skips) stand for no mesh axis ("model+none+data" = "model+data") */
            const char *q;
            int one;
            if (*s == '+' || *s == '-') { s++; continue; }
            for (q = s; q < e && tj__isname(*q); q++) {}
            if (q == s) break;
            if (!(q - s == 4 && !strncmp(s, "none", 4)) && tj__mesh_list(x->g->ctx, s, (size_t)(q - s), &one, NULL, f, l) == 1) ord[n++] = one;
            s = q;
        }
        s = e;
        if (n > 1 && !tj__in_order(ord, n)) x = tj__reorder(f, l, x, id, ord, n, to_mesh);
    }
    return x;
}
static tj_node *tj__manual_coll(int op, tj_node *x, unsigned m, int axis, int axis2, const signed char *perm, const char *cause, const char *f, int l);
static tj_node *tj__pvary(tj_node *x, unsigned m, const char *cause, const char *f, int l) {
    return tj__manual_coll(TJ__OP_PVARY, x, m, -1, -1, NULL, cause, f, l);
}
/* The vary rule: run by tj__node in place of the sharding rule. Ops whose
   rule is tj__sh_given (params, sources, collectives, scan, custom ops) set their
   own set in their builders. */
static int tj__vary_rule(tj_graph *g, int op, tj__type *t, int nin, tj_node **in, const char *file, int line) {
    unsigned u = 0;
    int j;
    if (tj__opshard(op) == tj__sh_given) return 0;
    for (j = 0; j < TJ_MAXDIM; j++) t->sh[j] = 0;
    t->partial = 0;
    for (j = 0; j < nin; j++) u |= in[j]->t.vary;
    t->vary = g->check ? (uint8_t)u : 0;
    for (j = 0; g->check && j < nin; j++)
        if (in[j]->t.vary != u && !(in[j] = tj__pvary(in[j], u & ~in[j]->t.vary, tj__opname(op), file, line))) return -1;
    return 0;
}
/* A collective inside shard_map on local types. Under checking, its input
   is first made to vary over the mesh axes it communicates over (psum of
   an invariant value is then n times it, as in JAX). */
static tj_node *tj__manual_coll(int op, tj_node *x, unsigned m, int axis, int axis2, const signed char *perm, const char *cause, const char *f, int l) {
    tj_graph *g;
    tj_ctx *c;
    tj__type t;
    int G, k, k2;
    tj_node *n;
    char b[256];
    if (!x) return NULL;
    g = x->g;
    c = g->ctx;
    if (g->check && op != TJ__OP_PVARY && (x->t.vary & m) != m && !(x = tj__pvary(x, m & ~x->t.vary, cause, f, l))) return NULL;
    t = x->t;
    G = tj__mesh_count(c, m);
    k = axis >= 0 ? tj__axis_index(&t, axis) : -1;
    k2 = axis2 >= 0 ? tj__axis_index(&t, axis2) : -1;
    if (op == TJ__OP_ALL_TO_ALL && k == k2) { /* the public builder checked that the axes exist */
        tj__err(c, TJ_ERR_AXIS, f, l, "all_to_all: the split and concat axes of %s must differ", tj_v_describe(x, b, sizeof b));
        return NULL;
    }
    if ((op == TJ__OP_REDUCE_SCATTER || op == TJ__OP_ALL_TO_ALL) && t.dim[k] % G) {
        char mb[64];
        tj__err(c, TJ_ERR_SHAPE, f, l, "%s: axis '%s' of %s has size %lld, not divisible by the %d devices of %s", tj__opname(op), tj__name(c, axis),
                tj_v_describe(x, b, sizeof b), (long long)t.dim[k], G, tj__mesh_names(c, m, mb, sizeof mb));
        return NULL;
    }
    if (op == TJ__OP_PSUM || op == TJ__OP_PMAX) t.vary &= (uint8_t)~m;
    if (op == TJ__OP_PVARY) t.vary |= (uint8_t)m;
    if (op == TJ__OP_ALL_GATHER) t.dim[k] *= G;
    if (op == TJ__OP_REDUCE_SCATTER || op == TJ__OP_ALL_TO_ALL) t.dim[k] /= G;
    if (op == TJ__OP_ALL_TO_ALL) t.dim[k2] *= G;
    if (!g->check) t.vary = 0;
    /* the all_to_all kernel names the axis split on the output `axis` and
       the one gathered `axis2` */
    n = tj__collective(g, op, x, &t, axis, m, cause, f, l);
    if (!n) return NULL;
    n->a.axis2 = axis2;
    if (perm) memcpy(n->a.perm, perm, sizeof n->a.perm);
    return n;
}
/* the public collectives: only inside shard_map */
static tj_node *tj__mcoll(const char *what, int op, tj_v x, const char *mesh_axes, const char *axis, const char *axis2, const signed char *perm,
                          const char *f, int l) {
    int m, a = -1, a2 = -1, ord[TJ__MAXMESH], n = 0;
    if (!x) return NULL;
    if (!x->g->manual) {
        tj__err(x->g->ctx, TJ_ERR_STATE, f, l,
                "%s: explicit collectives exist only inside tj_shard_map (outside it, sharding rules insert them; use tj_with_sharding_constraint)", what);
        return NULL;
    }
    if ((m = tj__mesh_mask(x->g->ctx, mesh_axes, ord, &n, what, f, l)) < 0) return NULL;
    if ((op == TJ__OP_ALL_GATHER || op == TJ__OP_REDUCE_SCATTER || op == TJ__OP_ALL_TO_ALL) && (!axis || (op == TJ__OP_ALL_TO_ALL && !axis2))) {
        char b[256]; /* (the kernel indexed the axis -1) */
        tj__err(x->g->ctx, TJ_ERR_ARG, f, l, "%s: the %saxis argument is NULL (name an axis of %s)", what,
                op != TJ__OP_ALL_TO_ALL ? "" : !axis ? "split " : "concat ", tj_v_describe(x, b, sizeof b));
        return NULL;
    }
    if (axis && (a = tj__one_axis(x, axis, what, f, l)) < 0) return NULL;
    if (axis2 && (a2 = tj__one_axis(x, axis2, what, f, l)) < 0) return NULL;
    if (op == TJ__OP_REDUCE_SCATTER || op == TJ__OP_ALL_TO_ALL) x = tj__reorder(f, l, x, a, ord, n, 1); /* (blocks sent in mesh order) */
    x = tj__manual_coll(op, x, (unsigned)m, a, a2, perm, what, f, l);
    if (op == TJ__OP_ALL_GATHER) x = tj__reorder(f, l, x, a, ord, n, 0); /* (blocks received in mesh order) */
    if (op == TJ__OP_ALL_TO_ALL) x = tj__reorder(f, l, x, a2, ord, n, 0);
    return x;
}
TJDEF tj_v tj_psum_at(const char *f, int l, tj_v x, const char *mesh_axes) { return tj__mcoll("psum", TJ__OP_PSUM, x, mesh_axes, NULL, NULL, NULL, f, l); }
TJDEF tj_v tj_pmax_at(const char *f, int l, tj_v x, const char *mesh_axes) { return tj__mcoll("pmax", TJ__OP_PMAX, x, mesh_axes, NULL, NULL, NULL, f, l); }
/* unchecked, nothing is tracked and pvary is the identity (as in JAX) */
TJDEF tj_v tj_pvary_at(const char *f, int l, tj_v x, const char *mesh_axes) {
    tj_v y;
    if (x && x->g->manual && x->g->check && x->g->ctx->status == TJ_OK) { /* checked: only over axes it is invariant over, as JAX's pcast(to='varying') */
        int m = tj__mesh_mask(x->g->ctx, mesh_axes, NULL, NULL, "pvary", f, l);
        if (m < 0) return NULL;
        if (x->t.vary & (unsigned)m) {
            char b[256], mb[64];
            tj__err(x->g->ctx, TJ_ERR_ARG, f, l, "pvary: %s already varies over %s (JAX refuses it too; its transpose would psum a gradient that is not replicated): "
                    "pvary only over the mesh axes it is invariant over", tj_v_describe(x, b, sizeof b), tj__mesh_names(x->g->ctx, x->t.vary & (unsigned)m, mb, sizeof mb));
            return NULL;
        }
    }
    y = tj__mcoll("pvary", TJ__OP_PVARY, x, mesh_axes, NULL, NULL, NULL, f, l);
    return y && !y->g->check ? x : y;
}
TJDEF tj_v tj_all_gather_at(const char *f, int l, tj_v x, const char *mesh_axes, const char *axis) {
    return tj__mcoll("all_gather", TJ__OP_ALL_GATHER, x, mesh_axes, axis, NULL, NULL, f, l);
}
TJDEF tj_v tj_psum_scatter_at(const char *f, int l, tj_v x, const char *mesh_axes, const char *axis) {
    return tj__mcoll("psum_scatter", TJ__OP_REDUCE_SCATTER, x, mesh_axes, axis, NULL, NULL, f, l);
}
TJDEF tj_v tj_all_to_all_at(const char *f, int l, tj_v x, const char *mesh_axes, const char *split_axis, const char *concat_axis) {
    return tj__mcoll("all_to_all", TJ__OP_ALL_TO_ALL, x, mesh_axes, split_axis, concat_axis, NULL, f, l);
}
TJDEF tj_v tj_ppermute_at(const char *f, int l, tj_v x, const char *mesh_axes, int npairs, const int *pairs) {
    signed char perm[TJ_MAXDEV];
    int m, G, i;
    if (!x) return NULL;
    if (!x->g->manual) return tj__mcoll("ppermute", TJ__OP_PPERMUTE, x, mesh_axes, NULL, NULL, NULL, f, l); /* the error */
    if ((m = tj__mesh_mask(x->g->ctx, mesh_axes, NULL, NULL, "ppermute", f, l)) < 0) return NULL;
    G = tj__mesh_count(x->g->ctx, (unsigned)m);
    if (npairs < 0 || (npairs && !pairs)) {
        tj__err(x->g->ctx, TJ_ERR_ARG, f, l, "ppermute: %d pairs (0..%d)%s", npairs, G, npairs > 0 ? ", and the list pairs is NULL" : "");
        return NULL;
    }
    memset(perm, -1, sizeof perm);
    for (i = 0; i < npairs; i++) {
        int s = pairs ? pairs[2 * i] : -1, d = pairs ? pairs[2 * i + 1] : -1, j, dup = 0;
        for (j = 0; j < G && s >= 0 && d >= 0 && s < G && d < G; j++) dup |= perm[j] == d;
        if (s < 0 || d < 0 || s >= G || d >= G || perm[s] >= 0 || dup) {
            tj__err(x->g->ctx, TJ_ERR_ARG, f, l, "ppermute: pair %d (%d -> %d) is out of range [0, %d) or repeats a source or destination", i, s, d, G);
            return NULL;
        }
        perm[s] = (signed char)d;
    }
    return tj__mcoll("ppermute", TJ__OP_PPERMUTE, x, mesh_axes, NULL, NULL, perm, f, l);
}
TJDEF tj_v tj_axis_index_at(const char *f, int l, tj_graph *g, const char *mesh_axes) {
    tj__type t;
    int m, ord[TJ__MAXMESH], k, i;
    tj_node *n;
    if (!g || g->ctx->status) return NULL;
    if (!g->manual) {
        tj__err(g->ctx, TJ_ERR_STATE, f, l, "axis_index: only inside tj_shard_map");
        return NULL;
    }
    if ((m = tj__mesh_mask(g->ctx, mesh_axes, ord, &k, "axis_index", f, l)) < 0) return NULL;
    if (!tj__in_order(ord, k)) { /* the rank in the order given: first axis most major */
        tj_v r = NULL;
        for (i = 0; i < k; i++) {
            tj_v a = tj_axis_index_at(f, l, g, tj__name(g->ctx, g->ctx->mesh_ax[ord[i]]));
            r = !r ? a : tj_add_at(f, l, tj_muls_at(f, l, r, g->ctx->mesh_size[ord[i]]), a);
        }
        return r;
    }
    memset(&t, 0, sizeof t);
    t.dt = TJ_I32;
    t.vary = g->check ? (uint8_t)m : 0;
    if ((n = tj__node(g, TJ__OP_AXIS_INDEX, &t, 0, NULL, NULL, f, l))) n->a.mesh = (unsigned)m;
    return n;
}

/* ==== [5] ops ============================================================ */
/* Each op: its builder (the shape and dtype rule, run while tracing), its
   CPU kernel, its VJP rule (which emits graph ops, so gradients are graphs
   too) and its cost. VJP rules may return cotangents in any axis order, with
   axes to sum out or broadcast in, and in another float dtype: the autodiff
   driver fits each one to its input's exact type (tj__fit), so rules stay
   short. VJP rules build their ops at n->file, n->line, the node's own
   source location: backward ops are attributed to the forward line that
   caused them. */

#define TJ__GELU_C 0.7978845608028654 /* sqrt(2/pi) */
#define TJ__CHUNK 256

/* gelu'(a), given t = tanh(TJ__GELU_U(a)) */
/* inlined into every chunk loop that uses it (a call stops vectorisation) */
#if defined(__GNUC__)
#define TJ__INLINE __attribute__((always_inline)) inline
#else
#define TJ__INLINE inline
#endif
static TJ__INLINE double tj__gelu_d(double a, double t) { return 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * TJ__GELU_C * (1.0 + 3.0 * 0.044715 * a * a); }

/* ---- shared iteration: strided copies and elementwise loops ----
   A view of an operand is (buffer, dtype, base offset, stride per output
   axis); broadcast axes have stride 0, so one loop serves broadcasting,
   transposes, slices and pads. The loop walks the output in chunks of its
   last axis; the device's threads take slices of its first axis. */
static void tj__bstrides(const tj__type *it, const tj__type *ot, int64_t *st) {
    int64_t s[TJ_MAXDIM];
    int i, k;
    tj__strides(it, s);
    for (i = 0; i < ot->rank; i++) {
        k = tj__axis_index(it, ot->ax[i]);
        st[i] = k < 0 ? 0 : s[k];
    }
}
typedef struct {
    const void *p;
    tj_dtype dt;
    int64_t base;
    int64_t st[TJ_MAXDIM];
} tj__opnd;

/* run fn(arg, part, nparts) for each part on the thread pool of [11],
   part 0 on the calling thread */
static void tj__parallel(int nparts, void (*fn)(const void *arg, int part, int nparts), const void *arg);
/* how many threads a loop over n elements gets: waking a worker costs
   ~10 us, so each gets at least TJ__PAR_MIN elements */
#define TJ__PAR_MIN 32768
static int tj__nparts(int64_t n, int nthreads) {
    int64_t p = n / TJ__PAR_MIN;
    return p < 1 ? 1 : p < nthreads ? (int)p : nthreads;
}

/* Chunks compute in double, or in float when every value is f32 or bf16
   (or a compare's 0/1, or an i32 read only as a select mask or cast input).
   Float gives the same bits: + - * / rounded once to f32 equal the double
   result rounded to f32 (53 >= 2*24 + 2 bits, so the double rounding is
   innocuous), compares and selects are exact, and unary ops still evaluate
   in double (tj__math). It halves the memory a chunk touches and doubles
   the vector width. */
static int tj__flt_ok(int op, tj_dtype odt, int nin, const tj_dtype *idt) {
    int j, cmp = op >= TJ__OP_LT && op <= TJ__OP_NE;
    if (odt != TJ_F32 && odt != TJ_BF16 && !(cmp && odt == TJ_I32)) return 0;
    for (j = 0; j < nin; j++)
        if (idt[j] != TJ_F32 && idt[j] != TJ_BF16 && !(idt[j] == TJ_I32 && (op == TJ__OP_CAST || (op == TJ__OP_SELECT && j == 0)))) return 0;
    return 1;
}
/* The chunk math below is compiled without floating-point contraction (so
   every build and every vector width gives the same bits) and, for gcc,
   without -ftrapping-math, under which gcc keeps a select of a constant (the
   clamps in tj__fexp_q) as a branch, and a branch stops a loop from
   vectorising. Nothing here relies on floating-point traps. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#endif
/* exp and tanh for results stored as f32 or bf16: double arithmetic with
   relative error below 1e-14, and no calls or branches, so chunk loops
   vectorise (libm's are calls). Rounded to f32 they give libm's bits except
   where the exact value lies within 1e-14 of an f32 rounding boundary, and
   there they are one ulp off. */
static TJ__INLINE double tj__fexp_q(double x, double *s) {
    /* e^x = s (1 + q): s = 2^n, n = round(x / ln 2), q = e^r - 1 for
       r = x - n ln 2, |r| <= ln 2 / 2, by Taylor to r^12 */
    double t, n, r, q;
    uint64_t b;
    x = x < -708.0 ? -708.0 : x; /* exp(-708) and exp(709) round to f32 0 and inf */
    x = x > 709.0 ? 709.0 : x;
    t = x * 1.4426950408889634 + 6755399441055744.0; /* + 1.5 * 2^52: n lands in the low bits */
    n = t - 6755399441055744.0;
    r = x - n * 6.93147180369123816490e-01 - n * 1.90821492927058770002e-10; /* ln 2 in two parts: n * hi is exact */
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
    memcpy(&b, &t, 8);
    b = (b - 0x4338000000000000ull + 1023) << 52;
    memcpy(s, &b, 8);
    return q;
}
static TJ__INLINE double tj__fexp(double x) {
    double s, q = tj__fexp_q(x, &s);
    return (q + 1.0) * s;
}
static TJ__INLINE double tj__ftanh(double x) {
    /* e / (e + 2) for e = e^2|x| - 1 = s q + (s - 1): no cancellation near 0,
       one rounding near 1 */
    double s, q = tj__fexp_q(2.0 * fabs(x), &s), e = s * q + (s - 1.0);
    return copysign(e / (e + 2.0), x);
}
/* One chunk of an elementwise op (TJ__UNARY_OPS, TJ__BINARY_OPS, select)
   in the compute type `real`; unary ops evaluate in double. */
#define TJ__MATH_U(op_, nm, expr, ...)\
    case TJ__OP_##op_:                \
        for (j = 0; j < n; j++) {     \
            double a = A[j];          \
            out[j] = (real)(expr);    \
        }                             \
        break;
#define TJ__MATH_B(op_, nm, expr)              \
    case TJ__OP_##op_:                         \
        if (one & 2) {                         \
            real b = B[0];                     \
            for (j = 0; j < n; j++) {          \
                real a = A[j];                 \
                out[j] = (real)(expr);         \
            }                                  \
        } else if (one & 1) {                  \
            real a = A[0];                     \
            for (j = 0; j < n; j++) {          \
                real b = B[j];                 \
                out[j] = (real)(expr);         \
            }                                  \
        } else                                 \
            for (j = 0; j < n; j++) {          \
                real a = A[j], b = B[j];       \
                out[j] = (real)(expr);         \
            }                                  \
        break;
/* bit j of `one`: in[j] is one value for all n (binary ops only, not both) */
#define TJ__MATH(name, T, attr)                                                                   \
    attr static void name(int op, double s, unsigned one, const T *const *in, T *out, int64_t n) { \
        typedef T real;                                                             \
        const real *A = in[0], *B = in[1], *C = in[2];                              \
        int64_t j;                                                                  \
        (void)s;                                                                    \
        (void)one;                                                                  \
        switch (op) {                                                               \
            TJ__UNARY_OPS(TJ__MATH_U)                                               \
            TJ__BINARY_OPS(TJ__MATH_B)                                              \
        case TJ__OP_SELECT:                                                         \
            for (j = 0; j < n; j++) out[j] = A[j] != 0 ? B[j] : C[j];               \
            break;                                                                  \
        default: break;                                                             \
        }                                                                           \
    }
/* a[j] = exp(a[j] - sub) for results stored as f32 or bf16 */
#define TJ__EXP_N(name, attr) \
    attr static void name(double *a, int64_t m, double sub) { \
        int64_t j;                                            \
        for (j = 0; j < m; j++) a[j] = tj__fexp(a[j] - sub);  \
    }
#define TJ__EXP exp
#define TJ__TANH tanh
TJ__MATH(tj__math_d, double, )
#undef TJ__EXP
#undef TJ__TANH
#define TJ__EXP tj__fexp
#define TJ__TANH tj__ftanh
TJ__MATH(tj__math_f, float, )
TJ__EXP_N(tj__fexp_n, )
#if TJ__X86 /* the same code, 8 doubles or 16 floats wide */
TJ__MATH(tj__math_f512, float, __attribute__((target("avx512f"))))
TJ__EXP_N(tj__fexp_n512, __attribute__((target("avx512f"))))
/* libm's sqrt may set errno, so compilers keep it scalar */
__attribute__((target("avx512f"))) static void tj__sqrt_f512(const float *a, float *out, int64_t n) {
    int64_t j;
    for (j = 0; j + 16 <= n; j += 16) { /* the full-mask form keeps g++ 12 -Wall quiet (see TJ__UNPLO) */
        __m512 x = _mm512_loadu_ps(a + j);
        _mm512_storeu_ps(out + j, _mm512_mask_sqrt_ps(x, (__mmask16)0xFFFF, x));
    }
    for (; j < n; j++) out[j] = (float)sqrt(a[j]);
}
#endif
#undef TJ__EXP
#undef TJ__TANH
#undef TJ__MATH
#undef TJ__MATH_U
#undef TJ__MATH_B
#undef TJ__EXP_N
#if defined(__clang__)
#pragma STDC FP_CONTRACT DEFAULT
#elif defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC pop_options
#endif
/* out[0..n) <- op of in[]; bit j of `one` says in[j] holds one value for
   all n (a broadcast scalar: binary ops read it as is, others get it
   spread over a chunk) */
static void tj__math_spread(int flt, int op, double s, unsigned one, const void *const *in, void *out, int64_t n);
static void tj__math(int flt, int op, double s, unsigned one, const void *const *in, void *out, int64_t n) {
    if (one && (op < TJ__OP_ADD || op > TJ__OP_NE || one == 3)) tj__math_spread(flt, op, s, one, in, out, n);
    else if (!flt) tj__math_d(op, s, one, (const double *const *)in, (double *)out, n);
#if TJ__X86
    else if (__builtin_cpu_supports("avx512f") && op == TJ__OP_SQRT) tj__sqrt_f512(*(const float *const *)in, (float *)out, n);
    else if (__builtin_cpu_supports("avx512f")) tj__math_f512(op, s, one, (const float *const *)in, (float *)out, n);
#endif
    else tj__math_f(op, s, one, (const float *const *)in, (float *)out, n);
}
/* i32 arithmetic (add, sub, mul, div, neg, abs with an i32 result) as XLA's s32
   ops, which JAX's lax.add/mul/div/neg and jnp's int32 + - * are: two's
   complement wraparound (INT32_MAX + 1 = INT32_MIN, -INT32_MIN =
   INT32_MIN, abs(INT32_MIN) = INT32_MIN), division truncated toward zero (lax.div, not jnp's
   floor_divide), x / 0 = -1 and INT32_MIN / -1 = INT32_MIN; pows (b the
   exponent, an integer 0 .. INT32_MAX: tj_pows_at checks) is
   lax.integer_pow's s32 power, by squaring with the same wrapping multiply
   (0^0 = 1). The chunk math
   in double would round products past 2^53 and the i32 store saturates (it
   is the float -> i32 conversion), so these ops take this loop instead;
   the operands are i32 values held in doubles, the results too. One
   definition for both backends: tinyjax_cuda.cu expands TJ__I32_MATH as
   __host__ __device__ tjc_i32_arith, tjc_i32_op and tjc_i32_wrap. */
#define TJ__I32_MATH(Q, P)                                                                                            \
    Q int P##i32_arith(int op) {                                                                                      \
        return op == TJ__OP_ADD || op == TJ__OP_SUB || op == TJ__OP_MUL || op == TJ__OP_DIV || op == TJ__OP_NEG || op == TJ__OP_ABS || op == TJ__OP_POWS; \
    }                                                                                                                 \
    Q double P##i32_op(int op, double a, double b) {                                                                  \
        uint32_t x = (uint32_t)(int32_t)a, y = (uint32_t)(int32_t)b, r;                                               \
        switch (op) {                                                                                                 \
        case TJ__OP_ADD: r = x + y; break;                                                                            \
        case TJ__OP_SUB: r = x - y; break;                                                                            \
        case TJ__OP_MUL: r = x * y; break;                                                                            \
        case TJ__OP_NEG: r = 0u - x; break;                                                                           \
        case TJ__OP_ABS: r = x >= 0x80000000u ? 0u - x : x; break;                                                    \
        case TJ__OP_POWS:                                                                                             \
            for (r = 1u; y; y >>= 1, x *= x)                                                                          \
                if (y & 1u) r *= x;                                                                                   \
            break;                                                                                                    \
        default: /* TJ__OP_DIV */                                                                                     \
            if (y == 0) r = 0xffffffffu;                                                                              \
            else if (x == 0x80000000u && y == 0xffffffffu) r = x;                                                     \
            else r = (uint32_t)((int32_t)x / (int32_t)y);                                                             \
            break;                                                                                                    \
        }                                                                                                             \
        return r >= 0x80000000u ? (double)r - 4294967296.0 : (double)r;                                               \
    }                                                                                                                 \
    /* x mod 2^32 in [INT32_MIN, INT32_MAX]: an i32 sum accumulated exactly in                                        \
       double (reductions), wrapped as XLA's s32 sum wraps */                                                         \
    Q double P##i32_wrap(double v) {                                                                                  \
        double w = fmod(v, 4294967296.0); /* exact */                                                                 \
        if (w >= 2147483648.0) w -= 4294967296.0;                                                                     \
        if (w < -2147483648.0) w += 4294967296.0;                                                                     \
        return w;                                                                                                     \
    }
TJ__I32_MATH(static, tj__)
/* s: pows' exponent */
static void tj__imath(int op, double s, unsigned one, const void *const *in, void *out, int64_t n) {
    const double *A = (const double *)in[0], *B = (const double *)in[1];
    double *o = (double *)out;
    int64_t j;
    for (j = 0; j < n; j++) o[j] = tj__i32_op(op, A[one & 1 ? 0 : j], op == TJ__OP_NEG || op == TJ__OP_ABS ? 0.0 : op == TJ__OP_POWS ? s : B[one & 2 ? 0 : j]);
}
/* (kept out of tj__math: a large stack frame on every call costs more than
   the math); the spread values fill TJ__CHUNK doubles, so a longer n (the
   fused loop's float chunks) goes in pieces of that size */
static void tj__math_spread(int flt, int op, double s, unsigned one, const void *const *in, void *out, int64_t n) {
    double spread[3][TJ__CHUNK];
    const void *v[3];
    size_t es = flt ? sizeof(float) : sizeof(double);
    int64_t q, q0, m, pm = flt ? 2 * TJ__CHUNK : TJ__CHUNK;
    int j;
    for (j = 0; j < 3; j++) {
        if (!(one >> j & 1)) continue;
        for (q = 0; q < n && q < pm; q++) {
            if (flt) ((float *)spread[j])[q] = *(const float *)in[j];
            else spread[j][q] = *(const double *)in[j];
        }
    }
    for (q0 = 0; q0 < n; q0 += m) {
        m = n - q0 < pm ? n - q0 : pm;
        for (j = 0; j < 3; j++) v[j] = one >> j & 1 ? (const void *)spread[j] : in[j] ? (const void *)((const char *)in[j] + (size_t)q0 * es) : NULL;
        tj__math(flt, op, s, 0, v, (char *)out + (size_t)q0 * es, m);
    }
}
/* a[j] = exp(a[j] - sub); results stored as f32 or bf16 take tj__fexp */
static void tj__exp_n(int fast, double *a, int64_t m, double sub) {
    int64_t j;
    if (!fast) {
        for (j = 0; j < m; j++) a[j] = exp(a[j] - sub);
        return;
    }
#if TJ__X86
    if (__builtin_cpu_supports("avx512f")) {
        tj__fexp_n512(a, m, sub);
        return;
    }
#endif
    tj__fexp_n(a, m, sub);
}
/* m elements of a view from offset `at` with stride st, in the compute
   type: converted into buf, or read in place when already contiguous f32 */
static const void *tj__chunk(int flt, const void *p, tj_dtype dt, int64_t at, int64_t st, int64_t m, double *buf) {
    if (flt && dt == TJ_F32 && st == 1) return (const float *)p + at;
    if (flt) tj__load_nf(p, dt, at, st, m, (float *)buf);
    else tj__load_n(p, dt, at, st, m, buf);
    return buf;
}
static void tj__unchunk(int flt, void *p, tj_dtype dt, int64_t at, int64_t st, int64_t m, const void *v) {
    if (flt) tj__store_nf(p, dt, at, st, m, (const float *)v);
    else tj__store_n(p, dt, at, st, m, (const double *)v);
}

/* out (dims, strides ost, from obase) <- op of the operand views, or a
   copy of operand 0 (op < 0) */
typedef struct {
    int op, nin, rank, flt;
    double s;
    tj__opnd x[3];
    void *out;
    tj_dtype odt;
    int64_t obase, ost[TJ_MAXDIM], dims[TJ_MAXDIM];
} tj__ew;
/* the slice [lo, hi) of the first axis */
static void tj__ew_rows(const tj__ew *e, int64_t lo, int64_t hi) {
    double buf[3][TJ__CHUNK], res[TJ__CHUNK];
    const void *ins[3] = {NULL, NULL, NULL};
    int64_t idx[TJ_MAXDIM] = {0}, dims[TJ_MAXDIM], off[3], oo, outer = 1, inner, o, c0, m;
    int i, d, r = e->rank;
    int64_t osl = e->ost[r - 1];
    memcpy(dims, e->dims, sizeof dims);
    dims[0] = hi - lo;
    for (d = 0; d < r; d++) outer *= dims[d];
    if (outer == 0) return;
    inner = dims[r - 1];
    outer /= inner;
    for (i = 0; i < e->nin; i++) off[i] = e->x[i].base + lo * e->x[i].st[0];
    oo = e->obase + lo * e->ost[0];
    for (o = 0; o < outer; o++) {
        for (c0 = 0; c0 < inner; c0 += m) {
            void *dst = res;
            m = inner - c0 < TJ__CHUNK ? inner - c0 : TJ__CHUNK;
            unsigned one = 0;
            for (i = 0; i < e->nin; i++) { /* an operand broadcast along the last axis: one value */
                int64_t sl = e->x[i].st[r - 1];
                ins[i] = tj__chunk(e->flt, e->x[i].p, e->x[i].dt, off[i] + c0 * sl, sl, sl || e->op < 0 ? m : 1, buf[i]);
                one |= (unsigned)(!sl && e->op >= 0) << i;
            }
            if (e->op < 0) {
                tj__unchunk(e->flt, e->out, e->odt, oo + c0 * osl, osl, m, ins[0]);
                continue;
            }
            if (e->flt && e->odt == TJ_F32 && osl == 1) dst = (float *)e->out + oo + c0; /* straight into the output */
            if (e->odt == TJ_I32 && tj__i32_arith(e->op)) tj__imath(e->op, e->s, one, ins, dst, m);
            else tj__math(e->flt, e->op, e->s, one, ins, dst, m);
            if (dst == res) tj__unchunk(e->flt, e->out, e->odt, oo + c0 * osl, osl, m, res);
        }
        for (d = r - 2; d >= 0; d--) {
            idx[d]++;
            for (i = 0; i < e->nin; i++) off[i] += e->x[i].st[d];
            oo += e->ost[d];
            if (idx[d] < dims[d]) break;
            for (i = 0; i < e->nin; i++) off[i] -= e->x[i].st[d] * dims[d];
            oo -= e->ost[d] * dims[d];
            idx[d] = 0;
        }
    }
}
static void tj__ew_part(const void *arg, int part, int nparts) {
    const tj__ew *e = (const tj__ew *)arg;
    tj__ew_rows(e, e->dims[0] * part / nparts, e->dims[0] * (part + 1) / nparts);
}
static void tj__ew_run(tj__ew *e, int nthreads) {
    int64_t n = 1;
    int i, d, np;
    if (e->rank == 0) { /* a scalar: one element along one axis */
        e->rank = 1;
        e->dims[0] = 1;
        e->ost[0] = 1;
        for (i = 0; i < e->nin; i++) e->x[i].st[0] = 0;
    }
    for (d = 0; d < e->rank; d++) n *= e->dims[d];
    np = tj__nparts(n, nthreads);
    tj__parallel(np < e->dims[0] ? np : (int)e->dims[0], tj__ew_part, e);
}
/* out (type ot, contiguous) <- elementwise op of the inputs broadcast by
   name; op < 0 copies input 0 */
static void tj__ew_kernel(tj__kern *k, int op) {
    tj__ew e;
    tj_dtype idt[3];
    int i, j, flat = 1;
    memset(&e, 0, sizeof e);
    e.op = op;
    e.s = k->n->a.s;
    e.nin = k->nin < 3 ? k->nin : 3;
    e.out = k->out;
    e.odt = k->ot.dt;
    e.rank = k->ot.rank;
    memcpy(e.dims, k->ot.dim, sizeof e.dims);
    tj__strides(&k->ot, e.ost);
    for (i = 0; i < e.nin; i++) {
        e.x[i].p = k->in[i];
        e.x[i].dt = idt[i] = k->it[i]->dt;
        tj__bstrides(k->it[i], &k->ot, e.x[i].st);
        /* the common case: every operand laid out like the output, or a
           scalar; then the whole array is one long row */
        if (k->it[i]->rank && k->it[i]->rank != k->ot.rank) flat = 0;
        for (j = 0; flat && k->it[i]->rank && j < k->ot.rank; j++) flat = k->it[i]->ax[j] == k->ot.ax[j];
    }
    if (flat && e.rank > 1) {
        e.dims[0] = tj__numel(&k->ot);
        e.ost[0] = 1;
        e.rank = 1;
        for (i = 0; i < e.nin; i++) e.x[i].st[0] = k->it[i]->rank ? 1 : 0;
    }
    e.flt = tj__flt_ok(op < 0 ? TJ__OP_CAST : op, e.odt, e.nin, idt);
    tj__ew_run(&e, k->nthreads);
}
static void tj__k_ew(tj__kern *k) { tj__ew_kernel(k, k->n->op); }
static double tj__flops_out(const tj_node *n) { return (double)tj__numel(&n->t); }
static double tj__flops_in(const tj_node *n) { return (double)tj__numel(&n->in[0]->t); }
static double tj__flops_zero(const tj_node *n) { (void)n; return 0; }

/* ---- fitting a cotangent to a type (used by autodiff and by builders) ---- */
static tj_v tj__relayout(const char *f, int l, tj_v x, const tj__type *to);
static tj_node *tj__reshard(tj_node *x, const uint8_t *sh, const char *cause, const char *file, int line);
static tj_v tj__sum_ids(const char *f, int l, tj_v x, const int *ids, int n);
/* Make v have exactly type t's axes (in t's order) and dtype: sum out axes t
   lacks, broadcast in axes v lacks, reorder, cast. */
static tj_v tj__fit2(const char *f, int l, tj_v v, const tj__type *t, int keep_partial);
static tj_node *tj__manual_coll(int op, tj_node *x, unsigned m, int axis, int axis2, const signed char *perm, const char *cause, const char *f, int l);
static tj_node *tj__pvary(tj_node *x, unsigned m, const char *cause, const char *f, int l);
static tj_v tj__fit(const char *f, int l, tj_v v, const tj__type *t) { return tj__fit2(f, l, v, t, 0); }
/* Cotangents may stay unreduced (partial sums) until something needs them
   reduced: then an all-gather's transpose becomes one reduce-scatter rather
   than a psum and a slice. */
static tj_v tj__fit_ct(const char *f, int l, tj_v v, const tj__type *t) { return tj__fit2(f, l, v, t, 1); }
static tj_v tj__fit2(const char *f, int l, tj_v v, const tj__type *t, int keep_partial) {
    int extra[TJ_MAXDIM], ne = 0, i, same;
    if (!v) return NULL;
    for (i = 0; i < v->t.rank; i++)
        if (tj__axis_index(t, v->t.ax[i]) < 0) extra[ne++] = v->t.ax[i];
    if (ne) v = tj__sum_ids(f, l, v, extra, ne);
    if (!v) return NULL;
    same = v->t.rank == t->rank;
    for (i = 0; same && i < t->rank; i++) same = v->t.ax[i] == t->ax[i];
    if (!same) v = tj__relayout(f, l, v, t);
    if (v && v->t.dt != t->dt) v = tj_cast_at(f, l, v, t->dt);
    if (v && v->g->ctx->nmesh && !v->g->manual) { /* and its sharding (a cotangent of a partial sum is replicated) */
        int need = v->t.partial != 0 && !keep_partial;
        for (i = 0; i < t->rank; i++) need |= v->t.sh[i] != t->sh[i];
        if (need) v = tj__reshard(v, t->sh, "autodiff", f, l);
    }
    if (v && v->g->manual && v->g->check && v->t.vary != t->vary) { /* and its vary set (shard_map) */
        unsigned more = v->t.vary & ~t->vary, fewer = t->vary & ~v->t.vary;
        if (more) v = tj__manual_coll(TJ__OP_PSUM, v, more, -1, -1, NULL, "a cotangent varies over mesh axes its primal does not", f, l);
        if (v && fewer) v = tj__pvary(v, fewer, "autodiff", f, l);
    }
    return v;
}

/* ---- unary elementwise (TJ__UNARY_OPS; chunk math: tj__math) ---- */
static tj_v tj__unary(const char *f, int l, int op, tj_v x, tj_dtype odt, double s) {
    tj__type t;
    tj_node *n;
    if (!x) return NULL;
    if (op != TJ__OP_CAST && op != TJ__OP_NEG && op != TJ__OP_ABS && op != TJ__OP_SIGN && !(op == TJ__OP_POWS && x->t.dt == TJ_I32) && !tj__isfloat(x->t.dt)) {
        char b[256];
        tj__err(x->g->ctx, TJ_ERR_DTYPE, f, l, "%s: needs a float dtype, got %s (cast first)", TJ__OPNAME(op), tj_v_describe(x, b, sizeof b));
        return NULL;
    }
    t = x->t;
    t.dt = odt;
    n = tj__node(x->g, op, &t, 1, &x, NULL, f, l);
    if (n) n->a.s = s;
    return n;
}
#define TJ__U_DEF(op, nm, fwd, kind, deriv, lo, hi) TJ__U_DEF_##kind(op, nm)
#define TJ__U_DEF_PUB(op, nm) \
    TJDEF tj_v tj_##nm##_at(const char *f, int l, tj_v x) { return tj__unary(f, l, TJ__OP_##op, x, x ? x->t.dt : TJ_F32, 0); }
#define TJ__U_DEF_OWN(op, nm)
#define TJ__U_DEF_GRAD(op, nm)
TJ__UNARY_OPS(TJ__U_DEF)
#undef TJ__U_DEF
#undef TJ__U_DEF_PUB
#undef TJ__U_DEF_OWN
#undef TJ__U_DEF_GRAD
TJDEF tj_v tj_pows_at(const char *f, int l, tj_v x, double p) {
    if (x && (!isfinite(p) || (x->t.dt != TJ_F64 && fabs(p) > 3.4028234663852886e38))) { /* x^NaN is NaN everywhere, x^inf 0 or inf: never what was meant */
        tj__err(x->g->ctx, TJ_ERR_ARG, f, l, "pows: exponent %g is not a finite number (in %s)", p, tj_dtype_name(x->t.dt));
        return NULL;
    }
    /* the exponent takes x's dtype, as JAX's weak-typed x ** p does (as
       tj_adds' and tj_muls' constants): x ** (1/3) on bf16 raises to
       0.333984375 there, 4.7% apart from x^(1/3) at x = 1e30 */
    if (x && x->t.dt == TJ_I32 && (p != floor(p) || p < 0 || p > 2147483647.0)) { /* lax.integer_pow: an int exponent >= 0 */
        tj__err(x->g->ctx, TJ_ERR_DTYPE, f, l, "pows: exponent %g on i32 is not an integer >= 0 (x ** p on int32 is lax.integer_pow, which takes "
                "integer exponents 0 .. INT32_MAX and wraps as i32 mul does; for %s, cast x to a float dtype first)", p, p < 0 ? "a negative power" : "this power");
        return NULL;
    }
    if (x && x->t.dt == TJ_F32) p = (float)p;
    else if (x && x->t.dt == TJ_BF16) p = tj_bf16_to_f32(tj_f32_to_bf16((float)p));
    return tj__unary(f, l, TJ__OP_POWS, x, x ? x->t.dt : TJ_F32, p);
}
TJDEF tj_v tj_cast_at(const char *f, int l, tj_v x, tj_dtype dt) {
    if (x && (unsigned)dt >= TJ_NDTYPE) {
        tj__err(x->g->ctx, TJ_ERR_DTYPE, f, l, "cast: bad dtype %d", (int)dt);
        return NULL;
    }
    if (x && x->t.dt == dt) return x;
    return tj__unary(f, l, TJ__OP_CAST, x, dt, 0);
}
/* gelu's derivative is an op of its own (gelu_grad, one fused pass); its
   derivative in turn (grad of grad) differentiates gelu' written in
   primitives: gelu'(x) = 0.5(1+t) + 0.5 x (1-t^2) c (1 + 3k x^2),
   t = tanh(c(x + k x^3)) */
static tj_v tj__gelu_grad(const char *f, int l, tj_v x) { return tj__unary(f, l, TJ__OP_GELU_D, x, x ? x->t.dt : TJ_F32, 0); }
static tj_v tj__gelu_grad_vjp(const char *f, int l, tj_v x, tj_v g) {
    tj_v x2 = tj_mul_at(f, l, x, x), d = NULL;
    tj_v u = tj_muls_at(f, l, tj_add_at(f, l, x, tj_muls_at(f, l, tj_mul_at(f, l, x2, x), 0.044715)), TJ__GELU_C);
    tj_v t = tj_tanh_at(f, l, u);
    tj_v a = tj_muls_at(f, l, tj_adds_at(f, l, t, 1.0), 0.5);
    tj_v sech2 = tj_adds_at(f, l, tj_neg_at(f, l, tj_mul_at(f, l, t, t)), 1.0);
    tj_v du = tj_muls_at(f, l, tj_adds_at(f, l, tj_muls_at(f, l, x2, 3 * 0.044715), 1.0), TJ__GELU_C);
    tj_v c = tj_add_at(f, l, a, tj_mul_at(f, l, tj_muls_at(f, l, x, 0.5), tj_mul_at(f, l, sech2, du)));
    return tj_vjp_at(f, l, 1, &c, &g, 1, &x, &d) ? NULL : d;
}
/* The VJP of every unary op: the derivative column of its row, evaluated
   with TJ_AT standing for the forward op's source line. */
static tj_status tj__vjp_unary(tj_node *n, tj_v g, tj_v *gin) {
    tj_v x = n->in[0], y = n, d = NULL;
    double s = n->a.s;
    (void)y, (void)s;
#undef TJ_AT
#define TJ_AT n->file, n->line
#define TJ__U_VJP(op, nm, fwd, kind, deriv, lo, hi) \
    case TJ__OP_##op: d = (deriv); break;
    switch (n->op) {
        TJ__UNARY_OPS(TJ__U_VJP)
    default: break;
    }
#undef TJ__U_VJP
#undef TJ_AT
#define TJ_AT __FILE__, __LINE__
    gin[0] = d;
    return d ? TJ_OK : tj_status_of(x->g->ctx);
}

/* ---- binary elementwise (TJ__BINARY_OPS), broadcasting by name ---- */
/* The status to return after a NULL input: the error standing in c (an
   input's context, or NULL: the context being traced), else TJ_ERR_ARG. */
static tj_status tj__failed(tj_ctx *c) {
    if (!c) c = tj__tracing_ctx();
    return c && c->status ? c->status : TJ_ERR_ARG;
}
/* A NULL input: an earlier op failed (its message stands), or the caller
   passed NULL, which is an error of its own. */
static tj_status tj__null_input(tj_ctx *c, const char *what, const char *which, int i, const char *f, int l) {
    if (!c) c = tj__tracing_ctx();
    if (c && c->status == TJ_OK) tj__err(c, TJ_ERR_ARG, f, l, "%s: %s %d is NULL", what, which, i);
    return tj__failed(c);
}
/* 1 if one of the n values is NULL, reported in the context of one that is
   not (all NULL: quiet when all_quiet, as the unary ops; else in the
   context being traced) */
static int tj__null_among(int n, tj_node *const *v, const char *what, const char *f, int l, int all_quiet) {
    int i, j;
    for (i = 0; i < n; i++)
        if (!v[i]) {
            for (j = 0; j < n && !v[j]; j++) {}
            if (j < n || !all_quiet) tj__null_input(j < n ? v[j]->g->ctx : NULL, what, "operand", i, f, l);
            return 1;
        }
    return 0;
}
static int tj__any_null(const char *what, const char *f, int l, int n, tj_v a, tj_v b, tj_v c) {
    tj_v v[3];
    v[0] = a, v[1] = b, v[2] = c;
    return tj__null_among(n, v, what, f, l, 1);
}
static tj_status tj__inner_status(int n, tj_node *const *v) { /* the status after tj__inner failed */
    int i;
    for (i = 0; i < n; i++)
        if (v[i]) return tj__failed(v[i]->g->ctx);
    return tj__failed(NULL);
}
/* The graph an op on these values belongs to: the innermost of their
   graphs, when the others enclose it (a scan body using outer weights;
   tj__node captures them). NULL, with an error, for unrelated graphs or a
   NULL value. */
static tj_graph *tj__inner(int n, tj_node *const *v, const char *what, const char *f, int l) {
    tj_graph *g = NULL, *h;
    int i;
    if (tj__null_among(n, v, what, f, l, 0)) return NULL;
    for (i = 0; i < n; i++) {
        if (!g) { g = v[i]->g; continue; }
        for (h = v[i]->g; h && h != g; h = h->parent) {}
        if (h == g) { g = v[i]->g; continue; } /* v[i] is deeper */
        for (h = g; h && h != v[i]->g; h = h->parent) {}
        if (!h) { /* (in both contexts when they differ: the caller may check either) */
            const char *two = v[i]->g->ctx != g->ctx ? " of two contexts" : "";
            tj__err(g->ctx, TJ_ERR_ARG, f, l, "%s: operands come from unrelated traced functions%s", what, two);
            if (*two) tj__err(v[i]->g->ctx, TJ_ERR_ARG, f, l, "%s: operands come from unrelated traced functions%s", what, two);
            return NULL;
        }
    }
    return g;
}
/* The broadcast type of a and b: a's axes then b's axes a lacks; shared
   names must have equal sizes. */
static int tj__bcast(const char *what, tj_v a, tj_v b, tj__type *t, const char *f, int l) {
    int i, k;
    char ba[256], bb[256];
    *t = a->t;
    for (i = 0; i < b->t.rank; i++) {
        k = tj__axis_index(&a->t, b->t.ax[i]);
        if (k >= 0 && a->t.dim[k] != b->t.dim[i]) {
            tj__err(a->g->ctx, TJ_ERR_SHAPE, f, l, "%s: axis '%s' has size %lld in %s but %lld in %s", what, tj__name(a->g->ctx, b->t.ax[i]),
                    (long long)a->t.dim[k], tj_v_describe(a, ba, sizeof ba), (long long)b->t.dim[i], tj_v_describe(b, bb, sizeof bb));
            return -1;
        }
        if (k < 0) {
            if (t->rank >= TJ_MAXDIM) {
                tj__err(a->g->ctx, TJ_ERR_SHAPE, f, l, "%s: result would have more than %d axes", what, TJ_MAXDIM);
                return -1;
            }
            t->ax[t->rank] = b->t.ax[i];
            t->dim[t->rank++] = b->t.dim[i];
        }
    }
    return 0;
}
static tj_v tj__binary(const char *f, int l, int op, tj_v a, tj_v b) {
    tj_graph *g;
    tj__type t;
    tj_node *in[2];
    char ba[256], bb[256];
    if (tj__any_null(TJ__OPNAME(op), f, l, 2, a, b, NULL)) return NULL;
    in[0] = a;
    in[1] = b;
    if (!(g = tj__inner(2, in, TJ__OPNAME(op), f, l))) return NULL;
    if (a->t.dt != b->t.dt) {
        tj__err(a->g->ctx, TJ_ERR_DTYPE, f, l, "%s: dtypes differ: %s vs %s (cast one)", TJ__OPNAME(op), tj_v_describe(a, ba, sizeof ba),
                tj_v_describe(b, bb, sizeof bb));
        return NULL;
    }
    if (tj__bcast(TJ__OPNAME(op), a, b, &t, f, l)) return NULL;
    if (op >= TJ__OP_LT && op <= TJ__OP_NE) t.dt = TJ_I32;
    in[0] = a;
    in[1] = b;
    return tj__node(g, op, &t, 2, in, NULL, f, l);
}
#define TJ__B(op_, nm, expr) \
    TJDEF tj_v tj_##nm##_at(const char *f, int l, tj_v a, tj_v b) { return tj__binary(f, l, TJ__OP_##op_, a, b); }
TJ__B(ADD, add, 0)
TJ__B(SUB, sub, 0)
TJ__B(MUL, mul, 0)
TJ__B(DIV, div, 0)
TJ__B(MAX2, max2, 0)
TJ__B(MIN2, min2, 0)
TJ__B(LT, lt, 0)
TJ__B(LE, le, 0)
TJ__B(GT, gt, 0)
TJ__B(GE, ge, 0)
TJ__B(EQ, eq, 0)
TJ__B(NE, ne, 0)
#undef TJ__B
/* The constant becomes a scalar of a's dtype: for i32 it must be an i32
   value (x * 0.5 would multiply by 0, silently). */
static int tj__const_fits(const char *f, int l, tj_v a, double s, const char *what) {
    char b[256];
    return tj__i32_const_ok(a->g->ctx, a->t.dt, s, what, tj_v_describe(a, b, sizeof b), f, l);
}
TJDEF tj_v tj_adds_at(const char *f, int l, tj_v a, double s) { return a && tj__const_fits(f, l, a, s, "adds") ? tj_add_at(f, l, a, tj_scalar_at(f, l, a->g, a->t.dt, s)) : NULL; }
TJDEF tj_v tj_muls_at(const char *f, int l, tj_v a, double s) { return a && tj__const_fits(f, l, a, s, "muls") ? tj_mul_at(f, l, a, tj_scalar_at(f, l, a->g, a->t.dt, s)) : NULL; }
static tj_status tj__vjp_binary(tj_node *n, tj_v g, tj_v *gin) {
    tj_v a = n->in[0], b = n->in[1], half, eq;
    switch (n->op) {
    case TJ__OP_ADD: gin[0] = g; gin[1] = g; break;
    case TJ__OP_SUB: gin[0] = g; gin[1] = tj_neg_at(n->file, n->line, g); break;
    case TJ__OP_MUL: gin[0] = tj_mul_at(n->file, n->line, g, b); gin[1] = tj_mul_at(n->file, n->line, g, a); break;
    case TJ__OP_DIV:
        gin[0] = tj_div_at(n->file, n->line, g, b);
        gin[1] = tj_neg_at(n->file, n->line, tj_div_at(n->file, n->line, tj_mul_at(n->file, n->line, g, n), b)); /* -g a/b^2 = -g y/b */
        break;
    case TJ__OP_MAX2:
    case TJ__OP_MIN2:
        /* the winner gets g; a tie splits it in halves (as JAX does: g times
           one weight 1, 1/2 or 0, so an infinite g stays infinite at the winner) */
        eq = tj_cast_at(n->file, n->line, tj_eq_at(n->file, n->line, a, b), g->t.dt);
        half = tj_muls_at(n->file, n->line, eq, 0.5);
        {
            tj_v wa = tj_cast_at(n->file, n->line, n->op == TJ__OP_MAX2 ? tj_gt_at(n->file, n->line, a, b) : tj_lt_at(n->file, n->line, a, b), g->t.dt);
            tj_v wb = tj_cast_at(n->file, n->line, n->op == TJ__OP_MAX2 ? tj_gt_at(n->file, n->line, b, a) : tj_lt_at(n->file, n->line, b, a), g->t.dt);
            gin[0] = tj_mul_at(n->file, n->line, g, tj_add_at(n->file, n->line, wa, half));
            gin[1] = tj_mul_at(n->file, n->line, g, tj_add_at(n->file, n->line, wb, half));
        }
        break;
    default: break; /* compares: no gradient */
    }
    return TJ_OK;
}

TJDEF tj_v tj_clip_at(const char *f, int l, tj_v x, double lo, double hi) {
    if (!x) return NULL;
    if (x->t.dt == TJ_I32 && (!tj__i32_const_ok(x->g->ctx, TJ_I32, lo, "clip", "x (the lower bound)", f, l) ||
                              !tj__i32_const_ok(x->g->ctx, TJ_I32, hi, "clip", "x (the upper bound)", f, l)))
        return NULL;
    return tj_min2_at(f, l, tj_max2_at(f, l, x, tj_scalar_at(f, l, x->g, x->t.dt, lo)), tj_scalar_at(f, l, x->g, x->t.dt, hi));
}
/* ---- select(mask, a, b) ---- */
TJDEF tj_v tj_select_at(const char *f, int l, tj_v m, tj_v a, tj_v b) {
    tj__type t, t2;
    tj_node *in[3];
    char bm[256];
    if (tj__any_null("select", f, l, 3, m, a, b)) return NULL;
    if (m->t.dt != TJ_I32) {
        tj__err(m->g->ctx, TJ_ERR_DTYPE, f, l, "select: mask must be i32 (from a compare), got %s", tj_v_describe(m, bm, sizeof bm));
        return NULL;
    }
    if (a->t.dt != b->t.dt) {
        tj__err(m->g->ctx, TJ_ERR_DTYPE, f, l, "select: branches have dtypes %s and %s", tj_dtype_name(a->t.dt), tj_dtype_name(b->t.dt));
        return NULL;
    }
    if (tj__bcast("select", a, b, &t, f, l)) return NULL;
    {   /* t ∪ mask's axes */
        tj_node tmp;
        tmp = *a;
        tmp.t = t;
        if (tj__bcast("select", &tmp, m, &t2, f, l)) return NULL;
    }
    t2.dt = a->t.dt;
    in[0] = m;
    in[1] = a;
    in[2] = b;
    {
        tj_graph *g = tj__inner(3, in, "select", f, l);
        return g ? tj__node(g, TJ__OP_SELECT, &t2, 3, in, NULL, f, l) : NULL;
    }
}
static tj_status tj__vjp_select(tj_node *n, tj_v g, tj_v *gin) {
    tj_v z = tj_scalar_at(n->file, n->line, n->g, g->t.dt, 0);
    gin[1] = tj_select_at(n->file, n->line, n->in[0], g, z);
    gin[2] = tj_select_at(n->file, n->line, n->in[0], z, g);
    return TJ_OK;
}

/* ---- constants and random sources ---- */
static tj_v tj__source(const char *f, int l, tj_graph *g, int op, tj_dtype dt, const char *shape, const char *what) {
    tj__type t;
    if (!g) return NULL;
    if (tj__parse_shape(g->ctx, shape, dt, &t, 0, what, f, l)) return NULL;
    return tj__node(g, op, &t, 0, NULL, NULL, f, l);
}
TJDEF tj_v tj_fill_at(const char *f, int l, tj_graph *g, tj_dtype dt, const char *shape, double v) {
    tj_node *n;
    if (g && !tj__i32_const_ok(g->ctx, dt, v, "fill", "the value", f, l)) return NULL;
    n = tj__source(f, l, g, TJ__OP_FILL, dt, shape, "fill");
    if (n) n->a.s = v;
    return n;
}
TJDEF tj_v tj_scalar_at(const char *f, int l, tj_graph *g, tj_dtype dt, double v) { return tj_fill_at(f, l, g, dt, "", v); }
TJDEF tj_v tj_arange_at(const char *f, int l, tj_graph *g, tj_dtype dt, const char *shape, const char *axis) {
    tj_node *n = tj__source(f, l, g, TJ__OP_ARANGE, dt, shape, "arange");
    if (n && (n->a.axis = tj__one_axis(n, axis, "arange", f, l)) < 0) return NULL;
    return n;
}
static int64_t tj__global_index(const tj__kern *k, int64_t i);
/* on all threads: a large fill (the optimizer state's zeros) costs mostly
   the first touch of fresh pages, which the kernel serves per thread */
static void tj__fill_part(const void *arg, int part, int nparts) {
    const tj__kern *k = (const tj__kern *)arg;
    int64_t m = tj__numel(&k->ot), i = m * part / nparts, hi = m * (part + 1) / nparts;
    double v = k->n->a.s;
    if (k->ot.dt == TJ_F32) {
        float fv = (float)v, *o = (float *)k->out;
        for (; i < hi; i++) o[i] = fv;
    } else
        for (; i < hi; i++) tj__st(k->out, k->ot.dt, i, v);
}
static void tj__k_fill(tj__kern *k) { tj__parallel(tj__nparts(tj__numel(&k->ot), k->nthreads), tj__fill_part, k); }
static void tj__k_arange(tj__kern *k) {
    int64_t st[TJ_MAXDIM], i, m = tj__numel(&k->ot);
    int ax = tj__axis_index(&k->ot, k->n->a.axis);
    tj__strides(&k->ot, st);
    tj__strides(&k->n->t, st);
    for (i = 0; i < m; i++) tj__st(k->out, k->ot.dt, i, (double)((tj__global_index(k, i) / st[ax]) % k->n->t.dim[ax]));
}
/* Counter-based bits: a keyed mix of the element's global index (splitmix64
   finaliser applied twice, keyed by xor). */
static TJ__INLINE uint64_t tj__mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static TJ__INLINE uint64_t tj__bits(uint64_t key, uint64_t i) { return tj__mix(tj__mix(i + 0x9e3779b97f4a7c15ull) ^ key); }
static TJ__INLINE double tj__u01(uint64_t key, uint64_t i) { return (double)(tj__bits(key, i) >> 11) * (1.0 / 9007199254740992.0); }
TJDEF uint64_t tj_key_fold(uint64_t key, uint64_t data) { return tj__mix(key ^ tj__mix(data ^ 0x5851f42d4c957f2dull)); }
static int tj__random_dt(const char *f, int l, tj_graph *g, tj_dtype dt, const char *what) { /* random numbers are floats */
    if (!g || (unsigned)dt >= TJ_NDTYPE || tj__isfloat(dt)) return 0; /* (a bad dtype: tj__source says so) */
    tj__err(g->ctx, TJ_ERR_DTYPE, f, l, "%s: dtype %s is not a float dtype (make floats, then cast)", what, tj_dtype_name(dt));
    return -1;
}
TJDEF tj_v tj_uniform_at(const char *f, int l, tj_graph *g, uint64_t key, tj_dtype dt, const char *shape) {
    tj_node *n = tj__random_dt(f, l, g, dt, "uniform") ? NULL : tj__source(f, l, g, TJ__OP_UNIFORM, dt, shape, "uniform");
    if (n) n->a.key = key;
    return n;
}
TJDEF tj_v tj_normal_at(const char *f, int l, tj_graph *g, uint64_t key, tj_dtype dt, const char *shape) {
    tj_node *n = tj__random_dt(f, l, g, dt, "normal") ? NULL : tj__source(f, l, g, TJ__OP_NORMAL, dt, shape, "normal");
    if (n) n->a.key = key;
    return n;
}
/* Box-Muller's log and cos for f32 and bf16 results, without libm calls:
   double arithmetic with relative error below 1e-15, so the rounded
   result is libm's but where the exact value lies within that of an f32
   rounding boundary (f64 results use libm). tj__flog: x in (0, 1], a
   normal number; log x = e ln 2 + 2 atanh((m-1)/(m+1)), m in [0.707, 1.414).
   tj__fcos2pi: cos(2 pi u), u in [0, 1), exact quarter-turn reduction.
   Compiled as the chunk math is (no contraction, no trapping math) and
   without errno for sqrt (its argument is never negative), with no
   branches, so the loops over a chunk vectorise. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math", "fp-contract=off", "no-math-errno")
#endif
static TJ__INLINE double tj__flog(double x) {
    uint64_t b, eb;
    double m, t, t2, p, e;
    memcpy(&b, &x, 8);
    eb = 0x4330000000000000ull | (b >> 52); /* 2^52 + the exponent field: integer ops only */
    memcpy(&e, &eb, 8);
    e -= 4503599627370496.0 + 1023.0;
    b = (b & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
    memcpy(&m, &b, 8);
    { double big = m > 1.4142135623730951 ? 1.0 : 0.0; m *= 1.0 - 0.5 * big; e += big; }
    t = (m - 1.0) / (m + 1.0);
    t2 = t * t; /* <= 0.0295: 12 terms reach 1e-17 */
    p = 1.0 / 23;
    p = p * t2 + 1.0 / 21; p = p * t2 + 1.0 / 19; p = p * t2 + 1.0 / 17; p = p * t2 + 1.0 / 15;
    p = p * t2 + 1.0 / 13; p = p * t2 + 1.0 / 11; p = p * t2 + 1.0 / 9; p = p * t2 + 1.0 / 7;
    p = p * t2 + 1.0 / 5; p = p * t2 + 1.0 / 3; p = p * t2 + 1.0;
    return e * 6.93147180369123816490e-01 + (e * 1.90821492927058770002e-10 + 2.0 * t * p);
}
static TJ__INLINE double tj__fcos2pi(double u) {
    int qi = (int)(4.0 * u + 0.5); /* the nearest quarter turn, 0..4 */
    double r = (4.0 * u - (double)qi) * 1.5707963267948966, r2 = r * r, c, sn; /* |r| <= pi/4 */
    c = -1.0 / 20922789888000.0; /* cos: Taylor to r^16, sin to r^17 */
    c = c * r2 + 1.0 / 87178291200.0; c = c * r2 - 1.0 / 479001600.0; c = c * r2 + 1.0 / 3628800.0;
    c = c * r2 - 1.0 / 40320.0; c = c * r2 + 1.0 / 720.0; c = c * r2 - 1.0 / 24.0; c = c * r2 + 0.5;
    c = 1.0 - c * r2;
    sn = 1.0 / 355687428096000.0;
    sn = sn * r2 - 1.0 / 1307674368000.0; sn = sn * r2 + 1.0 / 6227020800.0; sn = sn * r2 - 1.0 / 39916800.0;
    sn = sn * r2 + 1.0 / 362880.0; sn = sn * r2 - 1.0 / 5040.0; sn = sn * r2 + 1.0 / 120.0; sn = sn * r2 - 1.0 / 6.0;
    sn = r + r * r2 * sn;
    { /* quarter turn q = 0 1 2 3 (4 = 0): cos r, -sin r, -cos r, sin r (no branches) */
        double odd = (double)(qi & 1), neg = 1.0 - 2.0 * (double)(((qi + 1) >> 1) & 1);
        return neg * (odd * sn + (1.0 - odd) * c);
    }
}
/* The draws of a chunk of f32 or bf16 results: v[j] for global indices
   gi + j, j < n (uniform, or normal by Box-Muller from two draws of the
   element's own counters). Inlined into a plain and an AVX-512 copy (8
   doubles wide; the integer hash needs AVX512DQ's 64-bit multiply): the
   same operations in the same order, so the same bits. */
#define TJ__RANDOM_CHUNK(name, attr, sqrt_mul)                                                                                              \
    attr static void name(uint64_t key, uint64_t gi, int64_t n, int uni, double *v) {                                                      \
        double u1[TJ__CHUNK], u2[TJ__CHUNK];                                                                                                \
        int64_t j;                                                                                                                          \
        if (uni) {                                                                                                                          \
            for (j = 0; j < n; j++) v[j] = tj__u01(key, gi + (uint64_t)j);                                                                  \
            return;                                                                                                                         \
        }                                                                                                                                   \
        for (j = 0; j < n; j++) u1[j] = tj__u01(key, 2 * (gi + (uint64_t)j)), u2[j] = tj__u01(key, 2 * (gi + (uint64_t)j) + 1);            \
        for (j = 0; j < n; j++) u1[j] = -2.0 * tj__flog(1.0 - u1[j]), u2[j] = tj__fcos2pi(u2[j]);                                          \
        sqrt_mul(u1, u2, v, n);                                                                                                             \
    }
/* v = sqrt(w) * c, apart: libm's sqrt may set errno, so compilers keep a
   loop that calls it scalar (see tj__sqrt_f512) */
static void tj__sqrt_mul(const double *w, const double *c, double *v, int64_t n) {
    int64_t j;
    for (j = 0; j < n; j++) v[j] = sqrt(w[j]) * c[j];
}
TJ__RANDOM_CHUNK(tj__random_chunk, , tj__sqrt_mul)
#if TJ__X86
__attribute__((target("avx512f"))) static void tj__sqrt_mul512(const double *w, const double *c, double *v, int64_t n) {
    int64_t j;
    for (j = 0; j + 8 <= n; j += 8) { /* the full-mask form keeps g++ 12 -Wall quiet (see TJ__UNPLO) */
        __m512d x = _mm512_loadu_pd(w + j);
        _mm512_storeu_pd(v + j, _mm512_mul_pd(_mm512_mask_sqrt_pd(x, (__mmask8)0xFF, x), _mm512_loadu_pd(c + j)));
    }
    for (; j < n; j++) v[j] = sqrt(w[j]) * c[j];
}
TJ__RANDOM_CHUNK(tj__random_chunk512, __attribute__((target("avx512f,avx512dq"))), tj__sqrt_mul512)
#endif
/* One part of a random kernel: local elements [lo, hi). The global index
   (what the value depends on) is found once per run of the innermost local
   axis and counts up along it. f64 results use libm's log and cos. */
static void tj__random_part(const void *arg, int part, int nparts) {
    const tj__kern *k = (const tj__kern *)arg;
    int64_t m = tj__numel(&k->ot), lo = m * part / nparts, hi = m * (part + 1) / nparts, i, j;
    int64_t row = k->ot.rank ? k->ot.dim[k->ot.rank - 1] : 1;
    uint64_t key = k->n->a.key;
    int uni = k->n->op == TJ__OP_UNIFORM, fast = k->ot.dt == TJ_F32 || k->ot.dt == TJ_BF16;
    float *of = k->ot.dt == TJ_F32 ? (float *)k->out : NULL;
    double u1[TJ__CHUNK], u2[TJ__CHUNK], v[TJ__CHUNK];
#if TJ__X86
    int wide = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#endif
    if (row < 1) row = 1;
    for (i = lo; i < hi;) {
        int64_t end = i + row - i % row, n;
        uint64_t gi = (uint64_t)tj__global_index(k, i); /* each device makes only its slice */
        if (end > hi) end = hi;
        if (end > i + TJ__CHUNK) end = i + TJ__CHUNK;
        n = end - i;
#if TJ__X86
        if (fast && wide) tj__random_chunk512(key, gi, n, uni, v);
        else
#endif
        if (fast || uni) tj__random_chunk(key, gi, n, uni, v);
        else {
            for (j = 0; j < n; j++) u1[j] = tj__u01(key, 2 * (gi + (uint64_t)j)), u2[j] = tj__u01(key, 2 * (gi + (uint64_t)j) + 1);
            for (j = 0; j < n; j++) v[j] = sqrt(-2.0 * log(1.0 - u1[j])) * cos(6.283185307179586 * u2[j]);
        }
        for (j = 0; j < n; j++) {
            if (of) {
                float fv = (float)v[j];
                /* u < 1 can round up to 1 in f32: keep uniform in [0, 1) */
                of[i + j] = uni && fv >= 1.0f ? 0.99999994f : fv;
            } else {
                tj__st(k->out, k->ot.dt, i + j, v[j]);
                if (uni && tj__ld(k->out, k->ot.dt, i + j) >= 1.0) tj__st(k->out, k->ot.dt, i + j, k->ot.dt == TJ_BF16 ? 0.99609375 : 0.99999994039535522);
            }
        }
        i = end;
    }
}
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC pop_options
#endif
static void tj__k_random(tj__kern *k) { tj__parallel(tj__nparts(tj__numel(&k->ot), k->nthreads), tj__random_part, k); }
TJDEF tj_v tj_dropout_at(const char *f, int l, tj_v x, uint64_t key, double rate) {
    tj_v u, keep;
    char sh[512];
    size_t k = 0;
    int i;
    if (!x) return NULL;
    if (!(rate >= 0 && rate < 1)) {
        tj__err(x->g->ctx, TJ_ERR_ARG, f, l, "dropout: rate %g not in [0, 1)", rate);
        return NULL;
    }
    if (!tj__isfloat(x->t.dt)) { /* x / (1 - rate) would truncate */
        char b[256];
        tj__err(x->g->ctx, TJ_ERR_DTYPE, f, l, "dropout: needs a float dtype, got %s (cast first)", tj_v_describe(x, b, sizeof b));
        return NULL;
    }
    if (rate == 0) return x;
    sh[0] = 0;
    for (i = 0; i < x->t.rank; i++) {
        snprintf(sh + k, sizeof sh - k, "%s=%lld ", tj__name(x->g->ctx, x->t.ax[i]), (long long)x->t.dim[i]);
        k = strlen(sh);
    }
    /* the mask from an f32 uniform for bf16 (a bf16 one has 8 bits, rounded
       to nearest: at rate 0.5 it kept 2^-10 too many) */
    u = tj_uniform_at(f, l, x->g, key, x->t.dt == TJ_F64 ? TJ_F64 : TJ_F32, sh);
    keep = tj_ge_at(f, l, u, tj_scalar_at(f, l, x->g, tj_v_dtype(u), rate));
    return tj_select_at(f, l, keep, tj_muls_at(f, l, x, 1.0 / (1.0 - rate)), tj_scalar_at(f, l, x->g, x->t.dt, 0));
}

/* ---- reductions over named axes (TJ__REDUCE_OPS) ---- */
static tj_v tj__reshape(const char *f, int l, tj_v x, const tj__type *t);
/* the reduction's result has dtype odt (a bf16 sum's f32, see tj__sum_pub) */
static tj_v tj__reduce_ids_dt(const char *f, int l, int op, tj_v x, const int *ids, int nr, tj_dtype odt) {
    tj__type t;
    tj_node *n;
    tj__attr pa;
    int i, j, keep;
    int64_t size = 1;
    if (!x) return NULL;
    if (nr == 0) return x;
    t = x->t;
    t.rank = 0;
    for (i = 0; i < x->t.rank; i++) {
        keep = 1;
        for (j = 0; j < nr; j++)
            if (ids[j] == x->t.ax[i]) keep = 0;
        if (keep) {
            t.ax[t.rank] = x->t.ax[i];
            t.dim[t.rank++] = x->t.dim[i];
        } else size *= x->t.dim[i];
    }
    if (size == 1 && op == TJ__OP_SUM) { /* a sum over axes of size 1: same elements, a view (max and min
                                              stay reductions: their gradient is JAX's g (x == y) / count,
                                              NaN where x is NaN, which a view's would pass through) */
        tj_v v = tj__reshape(f, l, x, &t);
        return odt == x->t.dt ? v : tj_cast_at(f, l, v, odt);
    }
    t.dt = odt;
    memset(&pa, 0, sizeof pa);
    pa.naxes = nr;
    for (j = 0; j < nr; j++) pa.axes[j] = ids[j];
    n = tj__node(x->g, op, &t, 1, &x, &pa, f, l);
    return n;
}
static tj_v tj__reduce_ids(const char *f, int l, int op, tj_v x, const int *ids, int nr) { return x ? tj__reduce_ids_dt(f, l, op, x, ids, nr, x->t.dt) : NULL; }
static tj_v tj__sum_ids(const char *f, int l, tj_v x, const int *ids, int n) { return tj__reduce_ids(f, l, TJ__OP_SUM, x, ids, n); }
/* tj_sum and tj_sum_all as jnp.sum: a bf16 sum is an f32 sum rounded once
   to bf16 (jnp.sum upcasts bf16). The kernel adds in double whatever the
   dtypes, so on one device this is the sum rounded once either way; over a
   sharded axis the devices' partial sums stay f32 and their psum is f32,
   where bf16 partials rounded each device's share first (a quarter of the
   rows of a sharded bf16 sum were an ulp off the one-device sum and JAX's) */
static tj_v tj__sum_pub(const char *f, int l, tj_v x, const int *ids, int nr) {
    if (x && x->t.dt == TJ_BF16 && nr > 0) return tj_cast_at(f, l, tj__reduce_ids_dt(f, l, TJ__OP_SUM, x, ids, nr, TJ_F32), TJ_BF16);
    return tj__sum_ids(f, l, x, ids, nr);
}
/* an axis named twice in a list is a mistake (mean "x x" would divide twice) */
static int tj__dup_axis(tj_v x, const int *ids, int n, const char *what, const char *f, int l) {
    int i, j;
    for (i = 0; i < n; i++)
        for (j = 0; j < i; j++)
            if (ids[i] == ids[j]) {
                tj__err(x->g->ctx, TJ_ERR_AXIS, f, l, "%s: axis '%s' named twice", what, tj__name(x->g->ctx, ids[i]));
                return 1;
            }
    return 0;
}
/* the builders of TJ__REDUCE_OPS: tj_sum_at, tj_max_at, ... */
#define TJ__R_DEF(op, nm, ...)                                                                                   \
    TJDEF tj_v tj_##nm##_at(const char *f, int l, tj_v x, const char *axes) {                                   \
        int ids[TJ_MAXDIM], n;                                                                                   \
        if (!x || (n = tj__axes_of(x, axes, ids, #nm, f, l)) < 0 || tj__dup_axis(x, ids, n, #nm, f, l)) return NULL; \
        return TJ__OP_##op == TJ__OP_SUM ? tj__sum_pub(f, l, x, ids, n) : tj__reduce_ids(f, l, TJ__OP_##op, x, ids, n); \
    }
TJ__REDUCE_OPS(TJ__R_DEF)
#undef TJ__R_DEF
TJDEF tj_v tj_sum_all_at(const char *f, int l, tj_v x) {
    int ids[TJ_MAXDIM], i;
    if (!x || x->t.rank == 0) return x;
    for (i = 0; i < x->t.rank; i++) ids[i] = x->t.ax[i];
    return tj__sum_pub(f, l, x, ids, x->t.rank);
}
TJDEF tj_v tj_mean_at(const char *f, int l, tj_v x, const char *axes) {
    int ids[TJ_MAXDIM], n, i;
    double cnt = 1;
    if (!x || (n = tj__axes_of(x, axes, ids, "mean", f, l)) < 0 || tj__dup_axis(x, ids, n, "mean", f, l)) return NULL;
    if (!tj__isfloat(x->t.dt)) {
        tj__err(x->g->ctx, TJ_ERR_DTYPE, f, l, "mean: needs a float dtype, got %s", tj_dtype_name(x->t.dt));
        return NULL;
    }
    for (i = 0; i < n; i++) cnt *= (double)x->t.dim[tj__axis_index(&x->t, ids[i])];
    /* as jnp.mean under jit: the sum times the reciprocal of the count (XLA
       turns the division by a constant into that), and for bf16 both in
       f32 with one rounding to bf16 at the end (jnp.mean upcasts bf16; the
       bf16 sum, the bf16 reciprocal and the bf16 product rounded three
       times: 40% of bf16 means were an ulp off JAX's) */
    if (x->t.dt == TJ_BF16)
        return tj_cast_at(f, l, tj_muls_at(f, l, tj__reduce_ids_dt(f, l, TJ__OP_SUM, x, ids, n, TJ_F32), 1.0 / cnt), TJ_BF16);
    return tj_muls_at(f, l, tj__sum_ids(f, l, x, ids, n), 1.0 / cnt);
}
/* For each output element, loop over the reduced axes (innermost reduced
   axis in chunks). Sums accumulate in double, in 8 interleaved lanes so the
   adds vectorise. The threads split the outputs, or, for one output, a
   fixed number of blocks of it whose partial sums add in order: results
   depend on the shapes only, never on the thread count. The input is read
   from its buffer, or (gen) computed a chunk at a time by the fused loop
   of its elementwise producers ([11]: a sum of squares never stores the
   squares). */
typedef struct {
    const void *p;
    tj_dtype dt;
    void (*gen)(const void *src, int64_t at, int64_t m, double *buf); /* input elements [at, at + m) as doubles */
    const void *src;
    int nr, op, sum; /* sum: op is TJ__OP_SUM (the vectorised paths) */
    int64_t rd[TJ_MAXDIM], rs[TJ_MAXDIM], od[TJ_MAXDIM], os[TJ_MAXDIM];
    int64_t on, rn, inner, nblk;
    int no, lead;   /* lead: the kept axes are the trailing ones */
    void *out;
    tj_dtype odt;
    double *part;   /* nblk > 1: each block's result */
} tj__red;
static void tj__lanes(const double *v, int64_t m, double *lane) {
    int64_t j;
    int l;
    for (j = 0; j + 8 <= m; j += 8)
        for (l = 0; l < 8; l++) lane[l] += v[j + l];
    for (l = 0; j < m; j++, l++) lane[l] += v[j];
}
/* one reduction step and the empty reduction, from TJ__REDUCE_OPS */
static double tj__fold(int op, double acc, double v) {
    switch (op) {
#define TJ__FOLD_CASE(op_, nm, name, id, fold, ...) \
    case TJ__OP_##op_: return (fold);
        TJ__REDUCE_OPS(TJ__FOLD_CASE)
#undef TJ__FOLD_CASE
    default: return acc + v;
    }
}
static double tj__fold_identity(int op) {
    switch (op) {
#define TJ__ID_CASE(op_, nm, name, id, ...) \
    case TJ__OP_##op_: return (id);
        TJ__REDUCE_OPS(TJ__ID_CASE)
#undef TJ__ID_CASE
    default: return 0.0;
    }
}
/* the output whose first input element is at ob, over reduced rows [r0, r1) */
static double tj__red_one(const tj__red *e, int64_t ob, int64_t r0, int64_t r1) {
    double buf[TJ__CHUNK], lane[8] = {0}, acc = tj__fold_identity(e->op);
    int64_t ri[TJ_MAXDIM], rb = 0, r, c0, m, q = r0, sl = e->nr ? e->rs[e->nr - 1] : 0;
    int i, j;
    for (i = e->nr - 2; i >= 0; i--) {
        ri[i] = q % e->rd[i];
        q /= e->rd[i];
        rb += ri[i] * e->rs[i];
    }
    for (r = r0; r < r1; r++) {
        for (c0 = 0; c0 < e->inner; c0 += m) {
            m = e->inner - c0 < TJ__CHUNK ? e->inner - c0 : TJ__CHUNK;
            if (e->gen) e->gen(e->src, ob + rb + c0, m, buf); /* a reduction over every axis: sl == 1 */
            else tj__load_n(e->p, e->dt, ob + rb + c0 * sl, sl, m, buf);
            if (!e->sum) for (j = 0; j < m; j++) acc = tj__fold(e->op, acc, buf[j]);
            else tj__lanes(buf, m, lane);
        }
        for (i = e->nr - 2; i >= 0; i--) {
            ri[i]++;
            rb += e->rs[i];
            if (ri[i] < e->rd[i]) break;
            rb -= e->rs[i] * e->rd[i];
            ri[i] = 0;
        }
    }
    return !e->sum ? acc : ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
static void tj__red_part(const void *arg, int part, int nparts) {
    const tj__red *e = (const tj__red *)arg;
    double buf[TJ__CHUNK], acc[TJ__CHUNK];
    int64_t o, o0, o1, r, c0, m, j, ob = 0, oi[TJ_MAXDIM];
    int i;
    if (e->lead) { /* a block of kept columns; each sums its rows in order */
        int64_t lo = e->on * part / nparts, hi = e->on * (part + 1) / nparts;
        for (c0 = lo; c0 < hi; c0 += m) {
            m = hi - c0 < TJ__CHUNK ? hi - c0 : TJ__CHUNK;
            for (j = 0; j < m; j++) acc[j] = 0;
            for (r = 0; r < e->rn * e->inner; r++) {
                tj__load_n(e->p, e->dt, r * e->on + c0, 1, m, buf);
                for (j = 0; j < m; j++) acc[j] += buf[j];
            }
            if (e->odt == TJ_I32) for (j = 0; j < m; j++) acc[j] = tj__i32_wrap(acc[j]); /* (exact in double: wraps as XLA's s32 sum) */
            tj__store_n(e->out, e->odt, c0, 1, m, acc);
        }
        return;
    }
    if (e->nblk > 1) {
        for (o = e->nblk * part / nparts; o < e->nblk * (part + 1) / nparts; o++) e->part[o] = tj__red_one(e, 0, e->rn * o / e->nblk, e->rn * (o + 1) / e->nblk);
        return;
    }
    o0 = e->on * part / nparts;
    o1 = e->on * (part + 1) / nparts;
    for (i = e->no - 1, o = o0; i >= 0; i--) { /* the index and input offset of output o0 */
        oi[i] = o % e->od[i];
        ob += oi[i] * e->os[i];
        o /= e->od[i];
    }
    for (o = o0; o < o1; o++) {
        double v = tj__red_one(e, ob, 0, e->rn);
        tj__st(e->out, e->odt, o, e->sum && e->odt == TJ_I32 ? tj__i32_wrap(v) : v);
        for (i = e->no - 1; i >= 0; i--) {
            oi[i]++;
            ob += e->os[i];
            if (oi[i] < e->od[i]) break;
            ob -= e->os[i] * e->od[i];
            oi[i] = 0;
        }
    }
}
static void tj__reduce_run(tj__kern *k, void (*gen)(const void *, int64_t, int64_t, double *), const void *src) {
    const tj__type *it = k->it[0];
    tj__red e;
    int64_t ist[TJ_MAXDIM], total = tj__numel(it);
    double part[64];
    int i, j, red;
    memset(&e, 0, sizeof e);
    e.p = k->in[0];
    e.gen = gen;
    e.src = src;
    e.dt = it->dt;
    e.out = k->out;
    e.odt = k->ot.dt;
    e.op = k->n->op;
    e.sum = e.op == TJ__OP_SUM;
    e.on = tj__numel(&k->ot);
    e.part = part;
    tj__strides(it, ist);
    for (i = 0; i < it->rank; i++) {
        red = 0;
        for (j = 0; j < k->n->a.naxes; j++)
            if (k->n->a.axes[j] == it->ax[i]) red = 1;
        if (red) { e.rd[e.nr] = it->dim[i]; e.rs[e.nr++] = ist[i]; }
        else { e.od[e.no] = it->dim[i]; e.os[e.no++] = ist[i]; }
    }
    e.rn = 1;
    for (i = 0; i + 1 < e.nr; i++) e.rn *= e.rd[i];
    e.inner = e.nr ? e.rd[e.nr - 1] : 1;
    if (total == 0) { /* nothing to reduce: the empty reduction (0, -inf, ..) */
        for (i = 0; i < e.on; i++) tj__st(e.out, e.odt, i, tj__fold_identity(e.op));
        return;
    }
    /* e.g. a bias gradient summed over (batch, pos): whole rows accumulate */
    e.lead = e.nr > 0 && e.no > 0 && e.sum;
    for (i = 0; i < e.no && e.lead; i++) e.lead = tj__axis_index(&k->ot, it->ax[it->rank - e.no + i]) >= 0;
    if (e.lead) {
        tj__parallel(tj__nparts(total, k->nthreads) < e.on ? tj__nparts(total, k->nthreads) : (int)e.on, tj__red_part, &e);
        return;
    }
    if (e.on == 1) {
        e.nblk = total / TJ__PAR_MIN;
        if (e.nblk > 64) e.nblk = 64;
        if (e.nblk > e.rn) e.nblk = e.rn;
    }
    if (e.nblk > 1) {
        double acc = tj__fold_identity(e.op);
        tj__parallel(k->nthreads < e.nblk ? k->nthreads : (int)e.nblk, tj__red_part, &e);
        for (i = 0; i < e.nblk; i++) acc = tj__fold(e.op, acc, part[i]);
        tj__st(e.out, e.odt, 0, e.sum && e.odt == TJ_I32 ? tj__i32_wrap(acc) : acc);
        return;
    }
    tj__parallel(tj__nparts(total, k->nthreads) < e.on ? tj__nparts(total, k->nthreads) : (int)e.on, tj__red_part, &e);
}
static void tj__k_reduce(tj__kern *k) { tj__reduce_run(k, NULL, NULL); }
static tj_status tj__vjp_sum(tj_node *n, tj_v g, tj_v *gin) {
    if (g && g->t.dt != n->in[0]->t.dt) g = tj_cast_at(n->file, n->line, g, n->in[0]->t.dt); /* (a bf16 sum's f32 result: cast before the broadcast, not after) */
    gin[0] = tj__relayout(n->file, n->line, g, &n->in[0]->t); /* broadcast back */
    return TJ_OK;
}
static tj_status tj__vjp_ties(tj_node *n, tj_v g, tj_v *gin) {
    /* max, min: g flows to every position equal to the result, shared equally
       (a multiply by the 0/1 mask, as JAX's rule: where g is infinite or
       NaN the other positions get NaN too) */
    tj_v x = n->in[0];
    tj_v mask = tj_cast_at(n->file, n->line, tj_eq_at(n->file, n->line, x, n), g->t.dt);
    tj_v cnt = tj__sum_ids(n->file, n->line, mask, n->a.axes, n->a.naxes);
    gin[0] = tj_mul_at(n->file, n->line, mask, tj_div_at(n->file, n->line, g, cnt));
    return TJ_OK;
}

/* ---- relayout: transpose and broadcast (output axes ⊇ input axes) ---- */
static tj_v tj__relayout(const char *f, int l, tj_v x, const tj__type *to) {
    tj__type t;
    int i, k;
    char b1[256], b2[256];
    if (!x) return NULL;
    t = *to;
    t.dt = x->t.dt;
    for (i = 0; i < x->t.rank; i++) {
        k = tj__axis_index(&t, x->t.ax[i]);
        if (k < 0 || t.dim[k] != x->t.dim[i]) {
            tj__type_str(x->g->ctx, to, b2, sizeof b2);
            tj__err(x->g->ctx, TJ_ERR_SHAPE, f, l, "broadcast: %s does not fit in %s", tj_v_describe(x, b1, sizeof b1), b2);
            return NULL;
        }
    }
    return tj__node(x->g, TJ__OP_RELAYOUT, &t, 1, &x, NULL, f, l);
}
static void tj__k_copy(tj__kern *k) {
    if (k->it[0]->rank == k->ot.rank && k->it[0]->dt == k->ot.dt) {
        int i, same = 1;
        for (i = 0; i < k->ot.rank; i++) same &= k->it[0]->ax[i] == k->ot.ax[i];
        if (same) {
            memcpy(k->out, k->in[0], (size_t)tj__bytes(&k->ot));
            return;
        }
    }
    tj__ew_kernel(k, -1);
}
static tj_status tj__vjp_id(tj_node *n, tj_v g, tj_v *gin) {
    (void)n;
    gin[0] = g; /* tj__fit sums broadcast axes and restores the order */
    return TJ_OK;
}
TJDEF tj_v tj_transpose_at(const char *f, int l, tj_v x, const char *order) {
    int ids[TJ_MAXDIM], n, i;
    tj__type t;
    if (!x || (n = tj__axes_of(x, order, ids, "transpose", f, l)) < 0) return NULL;
    if (n != x->t.rank) {
        tj__err(x->g->ctx, TJ_ERR_AXIS, f, l, "transpose: \"%s\" names %d axes, the value has %d", order, n, x->t.rank);
        return NULL;
    }
    t = x->t;
    for (i = 0; i < n; i++) {
        int j;
        for (j = 0; j < i; j++)
            if (ids[j] == ids[i]) {
                tj__err(x->g->ctx, TJ_ERR_AXIS, f, l, "transpose: axis '%s' named twice", tj__name(x->g->ctx, ids[i]));
                return NULL;
            }
        t.ax[i] = ids[i];
        t.dim[i] = x->t.dim[tj__axis_index(&x->t, ids[i])];
    }
    return tj__relayout(f, l, x, &t);
}
TJDEF tj_v tj_broadcast_at(const char *f, int l, tj_v x, const char *shape) {
    tj__type t;
    if (!x || tj__parse_shape(x->g->ctx, shape, x->t.dt, &t, 0, "broadcast", f, l)) return NULL;
    return tj__relayout(f, l, x, &t);
}

/* ---- reshape: rename, split, merge (same elements, same order; a view) ---- */
static tj_v tj__reshape(const char *f, int l, tj_v x, const tj__type *t) {
    return tj__node(x->g, TJ__OP_RESHAPE, t, 1, &x, NULL, f, l);
}
static tj_status tj__vjp_reshape(tj_node *n, tj_v g, tj_v *gin) {
    /* g has n's type once fitted; reinterpret it with the input's axes */
    tj_v gf = tj__fit(n->file, n->line, g, &n->t);
    tj__type t = n->in[0]->t;
    if (!gf) return tj_status_of(n->g->ctx);
    t.dt = gf->t.dt;
    gin[0] = tj__reshape(n->file, n->line, gf, &t);
    return TJ_OK;
}
TJDEF tj_v tj_rename_at(const char *f, int l, tj_v x, const char *from, const char *to) {
    int a, b[TJ_MAXDIM], nb;
    tj__type t;
    if (!x || (a = tj__one_axis(x, from, "rename", f, l)) < 0) return NULL;
    if ((nb = tj__parse_names(x->g->ctx, to, b, TJ_MAXDIM, "rename", f, l)) != 1) {
        if (nb >= 0) tj__err(x->g->ctx, TJ_ERR_AXIS, f, l, "rename: want one new axis name, got \"%s\"", to ? to : "");
        return NULL;
    }
    if (b[0] != a && tj__axis_index(&x->t, b[0]) >= 0) {
        tj__err(x->g->ctx, TJ_ERR_AXIS, f, l, "rename: '%s' is already an axis", tj__name(x->g->ctx, b[0]));
        return NULL;
    }
    t = x->t;
    t.ax[tj__axis_index(&t, a)] = b[0];
    return tj__reshape(f, l, x, &t);
}
TJDEF tj_v tj_split_at(const char *f, int l, tj_v x, const char *axis, const char *into) {
    int a, k, i, zero = -1;
    tj__type parts, t;
    int64_t prod = 1;
    if (!x || (a = tj__one_axis(x, axis, "split", f, l)) < 0) return NULL;
    if (tj__parse_shape(x->g->ctx, into, x->t.dt, &parts, 1, "split", f, l)) return NULL;
    k = tj__axis_index(&x->t, a);
    for (i = 0; i < parts.rank; i++) {
        if (parts.dim[i] == 0) {
            if (zero >= 0) {
                tj__err(x->g->ctx, TJ_ERR_SHAPE, f, l, "split: only one size in \"%s\" may be inferred", into);
                return NULL;
            }
            zero = i;
        } else prod *= parts.dim[i];
        if (parts.ax[i] != a && tj__axis_index(&x->t, parts.ax[i]) >= 0) {
            tj__err(x->g->ctx, TJ_ERR_AXIS, f, l, "split: '%s' is already an axis", tj__name(x->g->ctx, parts.ax[i]));
            return NULL;
        }
    }
    if (zero >= 0 && prod > 0 && x->t.dim[k] % prod == 0) { parts.dim[zero] = x->t.dim[k] / prod; prod = x->t.dim[k]; }
    if (parts.rank < 1 || prod != x->t.dim[k] || x->t.rank - 1 + parts.rank > TJ_MAXDIM) {
        tj__err(x->g->ctx, TJ_ERR_SHAPE, f, l, "split: axis '%s' of size %lld cannot split into \"%s\"", axis, (long long)x->t.dim[k], into);
        return NULL;
    }
    t = x->t;
    t.rank = 0;
    for (i = 0; i < x->t.rank; i++) {
        if (i == k) {
            int j;
            for (j = 0; j < parts.rank; j++) { t.ax[t.rank] = parts.ax[j]; t.dim[t.rank++] = parts.dim[j]; }
        } else { t.ax[t.rank] = x->t.ax[i]; t.dim[t.rank++] = x->t.dim[i]; }
    }
    return tj__reshape(f, l, x, &t);
}
TJDEF tj_v tj_merge_at(const char *f, int l, tj_v x, const char *axes, const char *into) {
    int ids[TJ_MAXDIM], n, i, k0, b[TJ_MAXDIM];
    tj__type t;
    int64_t prod = 1;
    if (!x || (n = tj__axes_of(x, axes, ids, "merge", f, l)) < 0) return NULL;
    if (tj__parse_names(x->g->ctx, into, b, TJ_MAXDIM, "merge", f, l) != 1 || n < 1) {
        tj__err(x->g->ctx, TJ_ERR_AXIS, f, l, "merge: want axes to merge and one new name, got \"%s\" -> \"%s\"", axes ? axes : "", into ? into : "");
        return NULL;
    }
    k0 = tj__axis_index(&x->t, ids[0]);
    for (i = 0; i < n; i++) {
        if (tj__axis_index(&x->t, ids[i]) != k0 + i) {
            tj__err(x->g->ctx, TJ_ERR_AXIS, f, l, "merge: axes \"%s\" must be adjacent and in this order (tj_transpose first)", axes);
            return NULL;
        }
        prod *= x->t.dim[k0 + i];
    }
    for (i = 0; i < x->t.rank; i++)
        if ((i < k0 || i >= k0 + n) && x->t.ax[i] == b[0]) {
            tj__err(x->g->ctx, TJ_ERR_AXIS, f, l, "merge: '%s' is already an axis", into);
            return NULL;
        }
    t = x->t;
    t.rank = 0;
    for (i = 0; i < x->t.rank; i++) {
        if (i == k0) { t.ax[t.rank] = b[0]; t.dim[t.rank++] = prod; }
        else if (i < k0 || i >= k0 + n) { t.ax[t.rank] = x->t.ax[i]; t.dim[t.rank++] = x->t.dim[i]; }
    }
    return tj__reshape(f, l, x, &t);
}

/* ---- slice, pad, concat along one axis ---- */
static void tj__copy_region(const void *src, const tj__type *st, int64_t sbase, void *dst, const tj__type *dt, int64_t dbase, const int64_t *dims,
                            int nthreads) {
    tj__ew e;
    memset(&e, 0, sizeof e);
    e.op = -1;
    e.nin = 1;
    e.x[0].p = src;
    e.x[0].dt = st->dt;
    e.x[0].base = sbase;
    tj__strides(st, e.x[0].st);
    e.out = dst;
    e.odt = dt->dt;
    e.obase = dbase;
    tj__strides(dt, e.ost);
    e.rank = dt->rank;
    memcpy(e.dims, dims, sizeof(int64_t) * (size_t)dt->rank);
    e.flt = tj__flt_ok(TJ__OP_CAST, dt->dt, 1, &st->dt);
    tj__ew_run(&e, nthreads);
}
TJDEF tj_v tj_slice_at(const char *f, int l, tj_v x, const char *axis, int64_t start, int64_t stop) {
    int a, k;
    tj__type t;
    tj__attr pa;
    if (!x || (a = tj__one_axis(x, axis, "slice", f, l)) < 0) return NULL;
    k = tj__axis_index(&x->t, a);
    if (start < 0 || stop > x->t.dim[k] || start >= stop) {
        tj__err(x->g->ctx, TJ_ERR_SHAPE, f, l, "slice: [%lld, %lld) is not a non-empty range of axis '%s' (size %lld)", (long long)start,
                (long long)stop, axis, (long long)x->t.dim[k]);
        return NULL;
    }
    t = x->t;
    t.dim[k] = stop - start;
    memset(&pa, 0, sizeof pa);
    pa.axis = a;
    pa.start = start;
    pa.stop = stop;
    return tj__node(x->g, TJ__OP_SLICE, &t, 1, &x, &pa, f, l);
}
/* a slice of one element, then a sum over that size-1 axis, which drops it */
TJDEF tj_v tj_index_at(const char *f, int l, tj_v x, const char *axis, int64_t i) {
    int a;
    int64_t d;
    if (!x || (a = tj__one_axis(x, axis, "index", f, l)) < 0) return NULL;
    d = x->t.dim[tj__axis_index(&x->t, a)];
    if (i < 0 || i >= d) {
        tj__err(x->g->ctx, TJ_ERR_SHAPE, f, l, "index: %lld is not an element of axis '%s' (size %lld)", (long long)i, axis, (long long)d);
        return NULL;
    }
    return tj_sum_at(f, l, tj_slice_at(f, l, x, axis, i, i + 1), axis);
}
static void tj__k_slice(tj__kern *k) {
    int64_t st[TJ_MAXDIM];
    int ax = tj__axis_index(k->it[0], k->n->a.axis);
    tj__strides(k->it[0], st);
    tj__copy_region(k->in[0], k->it[0], k->n->a.start * st[ax], k->out, &k->ot, 0, k->ot.dim, k->nthreads);
}
static tj_status tj__vjp_slice(tj_node *n, tj_v g, tj_v *gin) {
    int k = tj__axis_index(&n->in[0]->t, n->a.axis);
    gin[0] = tj_pad_at(n->file, n->line, tj__fit(n->file, n->line, g, &n->t), tj__name(n->g->ctx, n->a.axis), n->a.start, n->in[0]->t.dim[k] - n->a.stop, 0.0);
    return TJ_OK;
}
TJDEF tj_v tj_pad_at(const char *f, int l, tj_v x, const char *axis, int64_t lo, int64_t hi, double value) {
    int a, k;
    tj__type t;
    tj__attr pa;
    if (!x || (a = tj__one_axis(x, axis, "pad", f, l)) < 0 || !tj__const_fits(f, l, x, value, "pad")) return NULL;
    if (lo < 0 || hi < 0) { /* negative padding crops, as in lax.pad: a slice, then the rest */
        int64_t d = x->t.dim[tj__axis_index(&x->t, a)];
        int64_t clo = lo < 0 ? (lo <= -d ? d : -lo) : 0, chi = hi < 0 ? (hi <= -d ? d : -hi) : 0; /* (no -INT64_MIN) */
        if (clo >= d || chi >= d - clo) {
            tj__err(x->g->ctx, TJ_ERR_SHAPE, f, l, "pad: padding (%lld, %lld) leaves no element of axis '%s' (size %lld)", (long long)lo, (long long)hi, axis,
                    (long long)d);
            return NULL;
        }
        x = tj_slice_at(f, l, x, axis, clo, d - chi);
        lo += clo, hi += chi;
        if (!lo && !hi) return x;
    }
    if (lo > TJ__MAXDIM_SIZE || hi > TJ__MAXDIM_SIZE) { /* (negative counts were cropped above; lo + hi cannot overflow) */
        tj__err(x->g->ctx, TJ_ERR_SHAPE, f, l, "pad: padding (%lld, %lld) on axis '%s' is more than 2^40", (long long)lo, (long long)hi, axis);
        return NULL;
    }
    k = tj__axis_index(&x->t, a);
    t = x->t;
    t.dim[k] += lo + hi;
    memset(&pa, 0, sizeof pa);
    pa.axis = a;
    pa.start = lo;
    pa.stop = hi;
    pa.s = value;
    return tj__node(x->g, TJ__OP_PAD, &t, 1, &x, &pa, f, l);
}
static void tj__k_pad(tj__kern *k) {
    int64_t st[TJ_MAXDIM];
    int ax = tj__axis_index(&k->ot, k->n->a.axis);
    tj__k_fill(k);
    tj__strides(&k->ot, st);
    tj__copy_region(k->in[0], k->it[0], 0, k->out, &k->ot, k->n->a.start * st[ax], k->it[0]->dim, k->nthreads);
}
static tj_status tj__vjp_pad(tj_node *n, tj_v g, tj_v *gin) {
    int k = tj__axis_index(&n->in[0]->t, n->a.axis);
    gin[0] = tj_slice_at(n->file, n->line, tj__fit(n->file, n->line, g, &n->t), tj__name(n->g->ctx, n->a.axis), n->a.start, n->a.start + n->in[0]->t.dim[k]);
    return TJ_OK;
}
/* a builder's list of nx inputs (1..max, none NULL): 1, or 0 after the error */
static int tj__list_ok(int nx, int max, const tj_v *xs, const char *op, const char *f, int l) {
    int i;
    if (nx < 1 || nx > max || !xs) {
        tj__err(nx >= 1 && xs && xs[0] ? xs[0]->g->ctx : tj__tracing_ctx(), TJ_ERR_ARG, f, l, "%s: %d inputs (1..%d allowed)%s", op, nx, max,
                xs ? "" : ", and the list xs is NULL");
        return 0;
    }
    for (i = 0; i < nx; i++)
        if (!xs[i]) {
            (void)tj__inner(nx, xs, op, f, l); /* reports a NULL the caller passed */
            return 0;
        }
    return 1;
}
TJDEF tj_v tj_concat_at(const char *f, int l, int nx, const tj_v *xs, const char *axis) {
    int a, k, i, j;
    tj__type t;
    tj__attr pa;
    char b1[256], b2[256];
    if (!tj__list_ok(nx, 16, xs, "concat", f, l)) return NULL;
    if ((a = tj__one_axis(xs[0], axis, "concat", f, l)) < 0) return NULL;
    k = tj__axis_index(&xs[0]->t, a);
    t = xs[0]->t;
    for (i = 1; i < nx; i++) {
        int ok = xs[i]->t.rank == t.rank;
        if (xs[i]->t.dt != t.dt) { /* no promotion: one dtype, as the binary ops want */
            tj__err(xs[0]->g->ctx, TJ_ERR_DTYPE, f, l, "concat along '%s': dtypes differ: input %d is %s (%s), input 0 is %s (%s) (cast one)", axis,
                    i, tj_dtype_name(xs[i]->t.dt), tj_v_describe(xs[i], b1, sizeof b1), tj_dtype_name(t.dt), tj_v_describe(xs[0], b2, sizeof b2));
            return NULL;
        }
        for (j = 0; ok && j < t.rank; j++) ok = xs[i]->t.ax[j] == t.ax[j] && (j == k || xs[i]->t.dim[j] == t.dim[j]);
        if (!ok) {
            tj__err(xs[0]->g->ctx, TJ_ERR_SHAPE, f, l, "concat: input %d %s does not match input 0 %s except along '%s'", i,
                    tj_v_describe(xs[i], b1, sizeof b1), tj_v_describe(xs[0], b2, sizeof b2), axis);
            return NULL;
        }
        t.dim[k] += xs[i]->t.dim[k];
    }
    memset(&pa, 0, sizeof pa);
    pa.axis = a;
    return tj__node(tj__inner(nx, xs, "concat", f, l), TJ__OP_CONCAT, &t, nx, xs, &pa, f, l);
}
TJDEF tj_v tj_stack_at(const char *f, int l, int nx, const tj_v *xs, const char *axis) {
    tj_v parts[256], grp[16];
    int a[TJ_MAXDIM], i, j, ng = 0;
    char b1[256], b2[256];
    tj__type t;
    if (!tj__list_ok(nx, 256, xs, "stack", f, l)) return NULL;
    if (!tj__inner(nx, xs, "stack", f, l)) return NULL;
    if ((j = tj__parse_names(xs[0]->g->ctx, axis, a, TJ_MAXDIM, "stack", f, l)) != 1) {
        if (j >= 0) tj__err(xs[0]->g->ctx, TJ_ERR_AXIS, f, l, "stack: want one new axis name, got \"%s\"", axis ? axis : "");
        return NULL;
    }
    for (i = 0; i < nx; i++) {
        int same = xs[i]->t.rank == xs[0]->t.rank && xs[i]->t.dt == xs[0]->t.dt;
        for (j = 0; same && j < xs[0]->t.rank; j++) same = xs[i]->t.ax[j] == xs[0]->t.ax[j] && xs[i]->t.dim[j] == xs[0]->t.dim[j];
        if (!same) {
            tj__err(xs[0]->g->ctx, TJ_ERR_SHAPE, f, l, "stack: input %d %s differs from input 0 %s (stack wants one type: axes in one order, sizes, dtype)", i,
                    tj_v_describe(xs[i], b1, sizeof b1), tj_v_describe(xs[0], b2, sizeof b2));
            return NULL;
        }
    }
    if (tj__axis_index(&xs[0]->t, a[0]) >= 0 || xs[0]->t.rank >= TJ_MAXDIM) {
        tj__err(xs[0]->g->ctx, TJ_ERR_AXIS, f, l, "stack: the inputs %s %s", tj_v_describe(xs[0], b1, sizeof b1),
                tj__axis_index(&xs[0]->t, a[0]) >= 0 ? "already have the new axis" : "have the most axes a value may have");
        return NULL;
    }
    t = xs[0]->t;
    for (j = t.rank; j > 0; j--) t.ax[j] = t.ax[j - 1], t.dim[j] = t.dim[j - 1], t.sh[j] = t.sh[j - 1];
    t.ax[0] = a[0];
    t.dim[0] = 1;
    t.sh[0] = 0;
    t.rank++;
    for (i = 0; i < nx; i++)
        if (!(parts[i] = tj__reshape(f, l, xs[i], &t))) return NULL;
    if (nx <= 16) return tj_concat_at(f, l, nx, parts, axis);
    for (i = 0; i < nx; i += 16)
        if (!(grp[ng++] = tj_concat_at(f, l, nx - i < 16 ? nx - i : 16, parts + i, axis))) return NULL;
    return tj_concat_at(f, l, ng, grp, axis);
}
static void tj__k_concat(tj__kern *k) {
    int64_t st[TJ_MAXDIM], at = 0;
    int ax = tj__axis_index(&k->ot, k->n->a.axis), i;
    tj__strides(&k->ot, st);
    for (i = 0; i < k->nin; i++) {
        tj__copy_region(k->in[i], k->it[i], 0, k->out, &k->ot, at * st[ax], k->it[i]->dim, k->nthreads);
        at += k->it[i]->dim[ax];
    }
}
static tj_status tj__vjp_concat(tj_node *n, tj_v g, tj_v *gin) {
    int64_t at = 0;
    int i, k = tj__axis_index(&n->t, n->a.axis);
    tj_v gf = tj__fit(n->file, n->line, g, &n->t);
    for (i = 0; i < n->nin; i++) {
        gin[i] = tj_slice_at(n->file, n->line, gf, tj__name(n->g->ctx, n->a.axis), at, at + n->in[i]->t.dim[k]);
        at += n->in[i]->t.dim[k];
    }
    return TJ_OK;
}

/* ---- dot ----
   The builder sorts axes into batch (B, in both, not contracted), free (M in
   a, N in b) and contracted (K). The kernel wants a as [B,M,K] or [B,K,M]
   and b as [B,K,N] or [B,N,K]; any other layout gets an explicit relayout
   node, visible in the program text and counted by the memory plan. */
/* the tuned f32 and bf16 kernels live with the CPU backend in [11] */
static void tj__gemm_ws(int bf16, int ta, int tb, int M, int N, int K, const void *A, int lda, const void *B, int ldb,
                        float *C, int ldc, int acc, int nth, char *ws, int ws_n);
static int64_t tj__gemm_pack_bytes(void);
#define TJ__SGEMM_PER_THREAD 4e6 /* multiply-adds that pay for waking one more sgemm thread */
#define TJ__SGEMM_SMALL (64.0 * 64.0 * 64.0) /* multiply-adds below which no packing pays */
static void tj__dgemm_ref(int ta, int tb, int64_t M, int64_t N, int64_t K, const double *A, const double *B, double *C) {
    int64_t i, j, p;
    for (i = 0; i < M; i++)
        for (j = 0; j < N; j++) {
            double s = 0;
            for (p = 0; p < K; p++) s += (ta ? A[p * M + i] : A[i * K + p]) * (tb ? B[j * K + p] : B[p * N + j]);
            C[i * N + j] = s;
        }
}
TJDEF tj_v tj_dot_at(const char *f, int l, tj_v a, tj_v b, const char *contract) {
    int ck[TJ_MAXDIM], nk, i, j, nb = 0, nm = 0, nn = 0;
    int B[TJ_MAXDIM], M[TJ_MAXDIM], N[TJ_MAXDIM];
    tj__type ta, tb, to;
    tj_node *in[2], *n;
    int trans_a, trans_b, autosh;
    char b1[256], b2[256];
    tj_ctx *c;
    if (tj__any_null("dot", f, l, 2, a, b, NULL)) return NULL;
    c = a->g->ctx;
    if (a->t.dt != b->t.dt || !tj__isfloat(a->t.dt)) {
        tj__err(c, TJ_ERR_DTYPE, f, l, "dot: operands must share a float dtype: %s vs %s", tj_v_describe(a, b1, sizeof b1), tj_v_describe(b, b2, sizeof b2));
        return NULL;
    }
    if ((nk = tj__axes_of(a, contract, ck, "dot", f, l)) < 0 || tj__axes_of(b, contract, ck, "dot", f, l) < 0 || tj__dup_axis(a, ck, nk, "dot", f, l)) return NULL;
    if (nk == 0) {
        tj__err(c, TJ_ERR_AXIS, f, l, "dot: no contracting axis given (use tj_mul for an outer product)");
        return NULL;
    }
    for (i = 0; i < nk; i++)
        if (a->t.dim[tj__axis_index(&a->t, ck[i])] != b->t.dim[tj__axis_index(&b->t, ck[i])]) {
            tj__err(c, TJ_ERR_SHAPE, f, l, "dot: contracted axis '%s' has size %lld in %s but %lld in %s", tj__name(c, ck[i]),
                    (long long)a->t.dim[tj__axis_index(&a->t, ck[i])], tj_v_describe(a, b1, sizeof b1),
                    (long long)b->t.dim[tj__axis_index(&b->t, ck[i])], tj_v_describe(b, b2, sizeof b2));
            return NULL;
        }
    {
        tj_node *ab[2];
        tj_graph *ig;
        ab[0] = a;
        ab[1] = b;
        if (!(ig = tj__inner(2, ab, "dot", f, l))) return NULL;
        autosh = c->nmesh && !ig->manual; /* inside shard_map: local types, no rule */
    }
    /* fit the operands now, before they are laid out for the kernel, so
       that relayouts copy slices (dot's rule, tj__sh_dot, does this fit) */
    if (autosh && tj__shard_dot(&a, &b, ck, nk, f, l)) return NULL;
    for (i = 0; i < a->t.rank; i++) {
        int isk = 0, kb;
        for (j = 0; j < nk; j++) isk |= ck[j] == a->t.ax[i];
        if (isk) continue;
        kb = tj__axis_index(&b->t, a->t.ax[i]);
        if (kb >= 0) {
            if (b->t.dim[kb] != a->t.dim[i]) {
                tj__err(c, TJ_ERR_SHAPE, f, l, "dot: batch axis '%s' has size %lld in %s but %lld in %s", tj__name(c, a->t.ax[i]),
                        (long long)a->t.dim[i], tj_v_describe(a, b1, sizeof b1), (long long)b->t.dim[kb], tj_v_describe(b, b2, sizeof b2));
                return NULL;
            }
            B[nb++] = i;
        } else M[nm++] = i;
    }
    for (i = 0; i < b->t.rank; i++) {
        int isk = 0;
        for (j = 0; j < nk; j++) isk |= ck[j] == b->t.ax[i];
        if (!isk && tj__axis_index(&a->t, b->t.ax[i]) < 0) N[nn++] = i;
    }
    /* canonical layouts: a = [B, M, K] and b = [B, K, N] (K in the order given) */
    ta = a->t; ta.rank = 0;
    tb = b->t; tb.rank = 0;
    to = a->t; to.rank = 0;
#define TJ__PUSH(T, X, I) ((T).ax[(T).rank] = (X)->t.ax[I], (T).dim[(T).rank++] = (X)->t.dim[I])
    for (i = 0; i < nb; i++) { TJ__PUSH(ta, a, B[i]); TJ__PUSH(tb, a, B[i]); TJ__PUSH(to, a, B[i]); }
    for (i = 0; i < nm; i++) { TJ__PUSH(ta, a, M[i]); TJ__PUSH(to, a, M[i]); }
    for (i = 0; i < nk; i++) { TJ__PUSH(ta, a, tj__axis_index(&a->t, ck[i])); TJ__PUSH(tb, a, tj__axis_index(&a->t, ck[i])); }
    for (i = 0; i < nn; i++) { TJ__PUSH(tb, b, N[i]); TJ__PUSH(to, b, N[i]); }
#undef TJ__PUSH
    if (to.rank > TJ_MAXDIM) {
        tj__err(c, TJ_ERR_SHAPE, f, l, "dot: result would have more than %d axes", TJ_MAXDIM);
        return NULL;
    }
    /* accept the transposed layouts [B,K,M] / [B,N,K] without a copy */
    {
        tj__type tat = ta, tbt = tb;
        int same = 1, samet = 1;
        for (i = 0; i < nk; i++) { tat.ax[nb + i] = ta.ax[nb + nm + i]; tat.dim[nb + i] = ta.dim[nb + nm + i]; }
        for (i = 0; i < nm; i++) { tat.ax[nb + nk + i] = ta.ax[nb + i]; tat.dim[nb + nk + i] = ta.dim[nb + i]; }
        for (i = 0; i < a->t.rank; i++) { same &= a->t.ax[i] == ta.ax[i]; samet &= a->t.ax[i] == tat.ax[i]; }
        trans_a = !same && samet;
        in[0] = same || samet ? a : tj__relayout(f, l, a, &ta);
        for (i = 0; i < nn; i++) { tbt.ax[nb + i] = tb.ax[nb + nk + i]; tbt.dim[nb + i] = tb.dim[nb + nk + i]; }
        for (i = 0; i < nk; i++) { tbt.ax[nb + nn + i] = tb.ax[nb + i]; tbt.dim[nb + nn + i] = tb.dim[nb + i]; }
        same = samet = 1;
        for (i = 0; i < b->t.rank; i++) { same &= b->t.ax[i] == tb.ax[i]; samet &= b->t.ax[i] == tbt.ax[i]; }
        trans_b = !same && samet;
        in[1] = same || samet ? b : tj__relayout(f, l, b, &tb);
    }
    if (!in[0] || !in[1]) return NULL;
    {
        tj_graph *g = tj__inner(2, in, "dot", f, l);
        tj__attr at;
        memset(&at, 0, sizeof at);
        at.nb = nb, at.nm = nm, at.nk = nk, at.nn = nn;
        at.trans_a = trans_a, at.trans_b = trans_b;
        at.naxes = nk;
        for (i = 0; i < nk; i++) at.axes[i] = ck[i];
        n = g ? tj__node(g, TJ__OP_DOT, &to, 2, in, &at, f, l) : NULL;
    }
    return n;
}
/* sizes of the dot's batch, m, k, n groups from the (local) types */
static void tj__dot_dims(const tj_node *n, const tj__type *ot, const tj__type *at, int64_t *Bn, int64_t *Mn, int64_t *Kn, int64_t *Nn) {
    int i;
    *Bn = *Mn = *Kn = *Nn = 1;
    for (i = 0; i < n->a.nb; i++) *Bn *= ot->dim[i];
    for (i = 0; i < n->a.nm; i++) *Mn *= ot->dim[n->a.nb + i];
    for (i = 0; i < n->a.nn; i++) *Nn *= ot->dim[n->a.nb + n->a.nm + i];
    for (i = 0; i < n->a.nk; i++) *Kn *= at->dim[tj__axis_index(at, n->a.axes[i])];
}
/* A dot's workspace (local shapes): for bf16, one batch of c summed in f32;
   then, unless the product is small enough for the direct loop, the pack
   buffers of the f32/bf16 matmul ([11]), one per thread (n->pack_slots), so
   the memory plan holds them and a run allocates nothing else. f64 multiplies
   in place. */
static int64_t tj__dot_staging(const tj_node *n, int64_t Mn, int64_t Nn) { return n->t.dt == TJ_BF16 ? tj__align(Mn * Nn * 4) : 0; }
static int64_t tj__dot_pack_bytes(const tj_node *n) {
    int64_t Bn, Mn, Kn, Nn;
    if (n->t.dt == TJ_F64) return 0;
    tj__dot_dims(n, &n->lt, &n->in[0]->lt, &Bn, &Mn, &Kn, &Nn);
    return (double)Mn * (double)Nn * (double)Kn < TJ__SGEMM_SMALL ? 0 : n->pack_slots * tj__gemm_pack_bytes();
}
static int64_t tj__dot_scratch(const tj_node *n) {
    int64_t Bn, Mn, Kn, Nn;
    if (n->t.dt == TJ_F64) return 0;
    tj__dot_dims(n, &n->lt, &n->in[0]->lt, &Bn, &Mn, &Kn, &Nn);
    return tj__dot_staging(n, Mn, Nn) + tj__dot_pack_bytes(n);
}
/* batch bi of a dot; the f32/bf16 matmul packs into ws_n per-thread pack
   buffers at ws (NULL, 0: small products, or threads past the planned ones,
   use the matmul's own per-thread buffers) */
static void tj__dot_batch(const tj__kern *k, int64_t bi, int64_t Mn, int64_t Kn, int64_t Nn, int nthreads, char *ws, int ws_n) {
    int ta = k->n->a.trans_a, tb = k->n->a.trans_b, lda = ta ? (int)Mn : (int)Kn, ldb = tb ? (int)Kn : (int)Nn;
    if (k->ot.dt == TJ_F32) {
        tj__gemm_ws(0, ta, tb, (int)Mn, (int)Nn, (int)Kn, (const float *)k->in[0] + bi * Mn * Kn, lda, (const float *)k->in[1] + bi * Kn * Nn,
                    ldb, (float *)k->out + bi * Mn * Nn, (int)Nn, 0, nthreads, ws, ws_n);
    } else if (k->ot.dt == TJ_F64) {
        tj__dgemm_ref(ta, tb, Mn, Nn, Kn, (const double *)k->in[0] + bi * Mn * Kn, (const double *)k->in[1] + bi * Kn * Nn, (double *)k->out + bi * Mn * Nn);
    } else { /* bf16: products summed in f32, then rounded once */
        float *C = (float *)k->scratch;
        tj__gemm_ws(1, ta, tb, (int)Mn, (int)Nn, (int)Kn, (const uint16_t *)k->in[0] + bi * Mn * Kn, lda,
                    (const uint16_t *)k->in[1] + bi * Kn * Nn, ldb, C, (int)Nn, 0, nthreads, ws, ws_n);
        tj__f32_to_bf16_n(C, (uint16_t *)k->out + bi * Mn * Nn, Mn * Nn);
    }
}
/* the planned pack buffers of a dot (see tj__dot_scratch) */
static char *tj__dot_ws(const tj__kern *k, int64_t Mn, int64_t Kn, int64_t Nn, int *ws_n) {
    *ws_n = 0;
    if (k->ot.dt == TJ_F64 || !k->scratch || (double)Mn * (double)Nn * (double)Kn < TJ__SGEMM_SMALL) return NULL;
    *ws_n = k->n->pack_slots;
    return (char *)k->scratch + tj__dot_staging(k->n, Mn, Nn);
}
static void tj__dot_part(const void *arg, int part, int nparts) {
    const tj__kern *k = (const tj__kern *)arg;
    int64_t Bn, Mn, Kn, Nn, bi;
    int ws_n;
    char *ws;
    tj__dot_dims(k->n, &k->ot, k->it[0], &Bn, &Mn, &Kn, &Nn);
    ws = tj__dot_ws(k, Mn, Kn, Nn, &ws_n);
    /* one thread per part: part p packs into buffer p */
    if (part < ws_n) ws += (size_t)part * (size_t)tj__gemm_pack_bytes();
    else ws = NULL;
    for (bi = Bn * part / nparts; bi < Bn * (part + 1) / nparts; bi++) tj__dot_batch(k, bi, Mn, Kn, Nn, 1, ws, ws ? 1 : 0);
}
static void tj__k_dot(tj__kern *k) {
    int64_t Bn, Mn, Kn, Nn, bi;
    int ws_n;
    char *ws;
    tj__dot_dims(k->n, &k->ot, k->it[0], &Bn, &Mn, &Kn, &Nn);
    /* many small products (attention's heads): a batch per thread, except
       bf16, whose one f32 batch of c is shared */
    if (Bn > 1 && k->ot.dt != TJ_BF16 && (double)Mn * (double)Nn * (double)Kn < TJ__SGEMM_PER_THREAD * k->nthreads) {
        tj__parallel(Bn < k->nthreads ? (int)Bn : k->nthreads, tj__dot_part, k);
        return;
    }
    ws = tj__dot_ws(k, Mn, Kn, Nn, &ws_n);
    for (bi = 0; bi < Bn; bi++) tj__dot_batch(k, bi, Mn, Kn, Nn, k->nthreads, ws, ws_n);
}
static double tj__flops_dot(const tj_node *n) {
    int64_t Bn, Mn, Kn, Nn;
    tj__dot_dims(n, &n->t, &n->in[0]->t, &Bn, &Mn, &Kn, &Nn);
    return 2.0 * (double)Bn * (double)Mn * (double)Nn * (double)Kn;
}
/* names of a group of axes of a type, as a string for a builder */
static const char *tj__names_str(tj_ctx *c, const int *ids, int n, char *buf, size_t cap) {
    size_t k = 0;
    int i;
    buf[0] = 0;
    for (i = 0; i < n; i++) {
        snprintf(buf + k, cap - k, "%s%s", i ? " " : "", tj__name(c, ids[i]));
        k = strlen(buf);
    }
    return buf;
}
static tj_status tj__vjp_dot(tj_node *n, tj_v g, tj_v *gin) {
    /* da = g . b over N;  db = a . g over M (names put every axis in place).
       The operand order gives each result its input's layout ([B,M,K] or
       [B,K,M] for a, [B,K,N] or [B,N,K] for b), so no relayout follows */
    tj_ctx *c = n->g->ctx;
    int Nids[TJ_MAXDIM], Mids[TJ_MAXDIM], i;
    char buf[512];
    tj_v a = n->in[0], b = n->in[1];
    for (i = 0; i < n->a.nm; i++) Mids[i] = n->t.ax[n->a.nb + i];
    for (i = 0; i < n->a.nn; i++) Nids[i] = n->t.ax[n->a.nb + n->a.nm + i];
    if (n->a.nn) gin[0] = n->a.trans_a ? tj_dot_at(n->file, n->line, b, g, tj__names_str(c, Nids, n->a.nn, buf, sizeof buf))
                                       : tj_dot_at(n->file, n->line, g, b, tj__names_str(c, Nids, n->a.nn, buf, sizeof buf));
    else gin[0] = tj_mul_at(n->file, n->line, g, b);
    if (n->a.nm) gin[1] = n->a.trans_b ? tj_dot_at(n->file, n->line, g, a, tj__names_str(c, Mids, n->a.nm, buf, sizeof buf))
                                       : tj_dot_at(n->file, n->line, a, g, tj__names_str(c, Mids, n->a.nm, buf, sizeof buf));
    else gin[1] = tj_mul_at(n->file, n->line, a, g);
    return TJ_OK;
}

/* ---- take (gather), scatter_add, one_hot ---- */
/* x = [pre, V, post], idx = [I...] -> out = [pre, I..., post] */
static int tj__take_type(const char *what, tj_v x, int axis, tj_v idx, tj__type *t, const char *f, int l) {
    int k = tj__axis_index(&x->t, axis), i;
    *t = x->t;
    t->rank = 0;
    if (x->t.rank - 1 + idx->t.rank > TJ_MAXDIM) {
        tj__err(x->g->ctx, TJ_ERR_SHAPE, f, l, "%s: result would have more than %d axes", what, TJ_MAXDIM);
        return -1;
    }
    for (i = 0; i < x->t.rank; i++) {
        if (i == k) {
            int j;
            for (j = 0; j < idx->t.rank; j++) {
                if (tj__axis_index(&x->t, idx->t.ax[j]) >= 0) {
                    tj__err(x->g->ctx, TJ_ERR_AXIS, f, l, "%s: index axis '%s' is also an axis of the operand", what, tj__name(x->g->ctx, idx->t.ax[j]));
                    return -1;
                }
                t->ax[t->rank] = idx->t.ax[j];
                t->sh[t->rank] = idx->t.sh[j];
                t->dim[t->rank++] = idx->t.dim[j];
            }
        } else {
            t->ax[t->rank] = x->t.ax[i];
            t->sh[t->rank] = x->t.sh[i];
            t->dim[t->rank++] = x->t.dim[i];
        }
    }
    /* shardings follow their axes (not their positions); an index axis
       loses a mesh axis the operand's kept axes already use */
    t->partial = 0;
    for (i = 0; i < t->rank; i++)
        if (tj__axis_index(&idx->t, t->ax[i]) >= 0) {
            int j;
            for (j = 0; j < t->rank; j++)
                if (tj__axis_index(&idx->t, t->ax[j]) < 0) t->sh[i] &= (uint8_t)~t->sh[j];
        }
    for (i = t->rank; i < TJ_MAXDIM; i++) t->sh[i] = 0;
    return 0;
}
TJDEF tj_v tj_take_at(const char *f, int l, tj_v x, const char *axis, tj_v idx) {
    int a;
    tj__type t;
    tj_node *in[2];
    tj__attr pa;
    char b[256];
    if (tj__any_null("take", f, l, 2, x, idx, NULL) || (a = tj__one_axis(x, axis, "take", f, l)) < 0) return NULL;
    if (idx->t.dt != TJ_I32) {
        tj__err(x->g->ctx, TJ_ERR_DTYPE, f, l, "take: indices must be i32, got %s", tj_v_describe(idx, b, sizeof b));
        return NULL;
    }
    if (tj__take_type("take", x, a, idx, &t, f, l)) return NULL;
    in[0] = x;
    in[1] = idx;
    memset(&pa, 0, sizeof pa);
    pa.axis = a;
    return tj__node(tj__inner(2, in, "take", f, l), TJ__OP_TAKE, &t, 2, in, &pa, f, l);
}
/* pre/V/post extents of x around axis k (local type) */
static void tj__ppv(const tj__type *t, int k, int64_t *pre, int64_t *v, int64_t *post) {
    int i;
    *pre = *post = 1;
    for (i = 0; i < k; i++) *pre *= t->dim[i];
    for (i = k + 1; i < t->rank; i++) *post *= t->dim[i];
    *v = t->dim[k];
}
/* "position 5", or where the input is sharded (the kernel sees its block)
   "position 1 of device 3's block": a kernel's message about input i */
static void tj__kpos(const tj__kern *k, int i, int64_t pos, char *b, size_t n) {
    if (k->ctx->ndev > 1 && tj__numel(k->it[i]) != tj__numel(&k->n->in[i]->t))
        snprintf(b, n, "position %lld of device %d's block", (long long)pos, k->dev);
    else snprintf(b, n, "position %lld", (long long)pos);
}
static void tj__k_take(tj__kern *k) {
    int take = k->n->op == TJ__OP_TAKE;
    const tj__type *xt = take ? k->it[0] : &k->ot;
    int ax = tj__axis_index(xt, k->n->a.axis);
    int64_t pre, V, post, ni = tj__numel(k->it[1]), p, j, e, off, Vg;
    size_t es = tj_dtype_size(k->ot.dt);
    const int32_t *idx = (const int32_t *)k->in[1];
    tj__ppv(xt, ax, &pre, &V, &post);
    tj__split_block(k, ax, V, &off, &Vg); /* rows [off, off + V) of Vg here */
    if (!take) memset(k->out, 0, (size_t)tj__bytes(&k->ot));
    for (j = 0; j < ni; j++)
        if (idx[j] < 0 || idx[j] >= Vg) {
            char at[64];
            tj__kpos(k, 1, j, at, sizeof at);
            if (k->err) snprintf(k->err, TJ__MSG, "%s: index %d at %s is out of range [0, %lld) for axis '%s' (at %s:%d)", TJ__OPNAME(k->n->op),
                                 (int)idx[j], at, (long long)Vg, tj__name(k->ctx, k->n->a.axis), tj__base(k->n->file), k->n->line);
            return;
        }
    for (p = 0; p < pre; p++)
        for (j = 0; j < ni; j++) {
            int64_t r = idx[j] - off, xo = (p * V + r) * post, oo = (p * ni + j) * post;
            if (r < 0 || r >= V) { /* another device's row: zeros here (take), nothing to add (scatter_add) */
                if (take) memset((char *)k->out + oo * (int64_t)es, 0, (size_t)post * es);
            } else if (take) memcpy((char *)k->out + oo * (int64_t)es, (const char *)k->in[0] + xo * (int64_t)es, (size_t)post * es);
            else for (e = 0; e < post; e++) tj__st(k->out, k->ot.dt, xo + e, tj__ld(k->out, k->ot.dt, xo + e) + tj__ld(k->in[0], k->it[0]->dt, oo + e));
        }
}
/* scatter_add(g, idx) into the shape of x: the transpose of take */
/* (split: mesh axes the table's indexed axis stays split over, tj__sh_scatter) */
static tj_v tj__scatter_add(const char *f, int l, tj_v g, tj_v idx, tj_v x, int axis, unsigned split) {
    tj__type t, gt;
    tj_node *in[2];
    tj__attr pa;
    if (!g || tj__take_type("scatter_add", x, axis, idx, &gt, f, l)) return NULL;
    in[0] = tj__fit(f, l, g, &gt);
    in[1] = idx;
    t = x->t;
    t.dt = g->t.dt;
    memset(&pa, 0, sizeof pa);
    pa.axis = axis;
    pa.mesh = split;
    return tj__node(x->g, TJ__OP_SCATTER_ADD, &t, 2, in, &pa, f, l);
}
static tj_status tj__vjp_take(tj_node *n, tj_v g, tj_v *gin) {
    /* a take from a table split along the indexed axis is a partial sum
       over exactly those mesh axes (tj__sh_take) */
    gin[0] = tj__scatter_add(n->file, n->line, g, n->in[1], n->in[0], n->a.axis, n->t.partial);
    return TJ_OK;
}
static tj_status tj__vjp_scatter(tj_node *n, tj_v g, tj_v *gin) {
    gin[0] = tj_take_at(n->file, n->line, tj__fit(n->file, n->line, g, &n->t), tj__name(n->g->ctx, n->a.axis), n->in[1]);
    return TJ_OK;
}
TJDEF tj_v tj_one_hot_at(const char *f, int l, tj_v idx, const char *axis, tj_dtype dt) {
    tj__type nt, t;
    tj_node *n;
    if (!idx || tj__parse_shape(idx->g->ctx, axis, dt, &nt, 0, "one_hot", f, l)) return NULL;
    if (nt.rank != 1 || idx->t.dt != TJ_I32 || tj__axis_index(&idx->t, nt.ax[0]) >= 0 || idx->t.rank >= TJ_MAXDIM) {
        char b[256];
        tj__err(idx->g->ctx, TJ_ERR_ARG, f, l, "one_hot: want i32 indices and one new axis \"name=size\" they lack, got indices %s and \"%s\"",
                tj_v_describe(idx, b, sizeof b), axis);
        return NULL;
    }
    t = idx->t;
    t.dt = dt;
    t.ax[t.rank] = nt.ax[0];
    t.dim[t.rank++] = nt.dim[0];
    n = tj__node(idx->g, TJ__OP_ONE_HOT, &t, 1, &idx, NULL, f, l);
    if (n) n->a.axis = nt.ax[0];
    return n;
}
/* ---- argmax, argmin along one axis (i32 result, no VJP) ---- */
static tj_v tj__argm(const char *f, int l, int op, tj_v x, const char *axis);
/* Over an axis split into P blocks over mesh axes, the axis is not
   gathered: each device finds its block's winner, its value and its
   global index (the block's offset added: argmax_part, one f64 pair per
   row, along a new axis _part split as the reduced axis is, so device r
   holds block r's pair); those pairs (rows x P x 2, where gathering would
   move rows x the axis) are all-gathered and every device picks the
   first block whose winner wins (an argmax over _part: blocks are in
   index order, so the first global index on ties, the first NaN), and
   takes that block's index. The values and indices are exact in f64. */
static tj_v tj__argm_split(const char *f, int l, int op, tj_node *x, const tj__type *rows, const tj__attr *pa) {
    tj_ctx *c = x->g->ctx;
    tj__type t = *rows;
    uint8_t want[TJ_MAXDIM];
    tj_v st, win;
    char ax[48];
    int i, P = tj__mesh_count(c, x->t.sh[tj__axis_index(&x->t, pa->axis)]);
    t.ax[t.rank] = tj__intern(c, "_part", 5);
    t.dim[t.rank++] = P;
    t.ax[t.rank] = tj__intern(c, "_vi", 3);
    t.dim[t.rank++] = 2;
    t.dt = TJ_F64;
    if (!(st = tj__node(x->g, op == TJ__OP_ARGMAX ? TJ__OP_ARGMAX_PART : TJ__OP_ARGMIN_PART, &t, 1, &x, pa, f, l))) return NULL;
    for (i = 0; i < st->t.rank; i++) want[i] = i == st->t.rank - 2 ? 0 : st->t.sh[i];
    if (!(st = tj__reshard(st, want, TJ__OPNAME(op), f, l))) return NULL; /* every device sees every block's winner */
    win = tj__argm(f, l, op, tj_index_at(f, l, st, "_vi", 0), "_part");
    snprintf(ax, sizeof ax, "_part=%d", P);
    return tj_cast_at(f, l, tj_sum_at(f, l, tj_mul_at(f, l, tj_one_hot_at(f, l, win, ax, TJ_F64), tj_index_at(f, l, st, "_vi", 1)), "_part"), TJ_I32);
}
static tj_v tj__argm(const char *f, int l, int op, tj_v x, const char *axis) {
    tj__type t;
    tj__attr pa;
    int a, k;
    if (!x || (a = tj__one_axis(x, axis, TJ__OPNAME(op), f, l)) < 0) return NULL;
    k = tj__axis_index(&x->t, a);
    if (x->t.dim[k] > 2147483647) {
        tj__err(x->g->ctx, TJ_ERR_SHAPE, f, l, "%s: axis '%s' has %lld elements, more than an i32 index can name", TJ__OPNAME(op), axis, (long long)x->t.dim[k]);
        return NULL;
    }
    t = x->t;
    for (; k + 1 < t.rank; k++) t.ax[k] = t.ax[k + 1], t.dim[k] = t.dim[k + 1], t.sh[k] = t.sh[k + 1];
    t.rank--;
    t.dt = TJ_I32;
    memset(&pa, 0, sizeof pa);
    pa.axis = a;
    pa.axes[0] = a;
    pa.naxes = 1;
    {   /* the reduced axis split over devices (outside shard_map): below */
        tj_graph *g = tj__cur(x->g);
        tj_ctx *c = x->g->ctx;
        k = tj__axis_index(&x->t, a);
        if (g && !g->manual && c->nmesh && tj__mesh_count(c, x->t.sh[k]) > 1 && x->t.rank < TJ_MAXDIM && tj__axis_index(&x->t, tj__intern(c, "_part", 5)) < 0 &&
            tj__axis_index(&x->t, tj__intern(c, "_vi", 3)) < 0)
            return tj__argm_split(f, l, op, x, &t, &pa);
    }
    return tj__node(x->g, op, &t, 1, &x, &pa, f, l);
}
TJDEF tj_v tj_argmax_at(const char *f, int l, tj_v x, const char *axis) { return tj__argm(f, l, TJ__OP_ARGMAX, x, axis); }
TJDEF tj_v tj_argmin_at(const char *f, int l, tj_v x, const char *axis) { return tj__argm(f, l, TJ__OP_ARGMIN, x, axis); }
/* one output element per row along the axis; the first winner is kept:
   a later element wins only if strictly better, or NaN where the best so
   far is not (CUDA: tjc_k_argm, the same loop) */
static void tj__k_argm(tj__kern *k) {
    const tj__type *it = k->it[0];
    int64_t ist[TJ_MAXDIM], ost[TJ_MAXDIM], st[TJ_MAXDIM], od[TJ_MAXDIM], m, o, j, d, off = 0, Vg;
    int ka = tj__axis_index(it, k->n->a.axis), i, mx = k->n->op == TJ__OP_ARGMAX || k->n->op == TJ__OP_ARGMAX_PART;
    int part = k->n->op == TJ__OP_ARGMAX_PART || k->n->op == TJ__OP_ARGMIN_PART;
    tj__type rt = k->ot; /* the rows: a part's output without its _part (1 here) and _vi axes */
    rt.rank -= part ? 2 : 0;
    m = tj__numel(&rt);
    tj__strides(it, ist);
    tj__strides(&rt, ost);
    for (i = 0; i < rt.rank; i++) st[i] = ist[tj__axis_index(it, rt.ax[i])], od[i] = rt.dim[i];
    d = it->dim[ka];
    if (part) tj__split_block(k, ka, d, &off, &Vg);
    for (o = 0; o < m; o++) {
        int64_t base = 0, best = 0;
        double bv;
        for (i = 0; i < rt.rank; i++) base += (o / ost[i]) % od[i] * st[i];
        bv = tj__ld(k->in[0], it->dt, base);
        for (j = 1; j < d && bv == bv; j++) {
            double v = tj__ld(k->in[0], it->dt, base + j * ist[ka]);
            if (v != v || (mx ? v > bv : v < bv)) bv = v, best = j;
        }
        if (part) ((double *)k->out)[2 * o] = bv, ((double *)k->out)[2 * o + 1] = (double)(best + off);
        else tj__st(k->out, TJ_I32, o, (double)best);
    }
}
static void tj__k_one_hot(tj__kern *k) {
    int64_t ni = tj__numel(k->it[0]), V = k->ot.dim[k->ot.rank - 1], j, v;
    const int32_t *idx = (const int32_t *)k->in[0];
    for (j = 0; j < ni; j++)
        for (v = 0; v < V; v++) tj__st(k->out, k->ot.dt, j * V + v, idx[j] == v ? 1.0 : 0.0);
}

/* ---- fused row ops along one axis: softmax, log_softmax, layer_norm,
   cross_entropy, and their gradients. A "row" is every element along the
   axis with the other indices fixed: row r starts at (r / st) * st * d +
   r % st, and steps by st, the axis's stride. Kernels read each row in
   chunks once per pass, in double for f64 results, else in float (16
   lanes, vectorised; a chunk's sums add in double); the threads split the
   rows. cross_entropy's gradient takes the forward's per-row loss as a
   residual: lse = loss + z[label] gives the row's statistics, so the
   gradient is one pass over the logits (no max, no sum of exps again). ---- */
/* a row op node along axis id a: in[0] gives the rows, t is the output type */
static tj_v tj__rownode(const char *f, int l, int op, int nin, tj_node **in, int a, double s, const tj__type *t) {
    tj_graph *g = tj__inner(nin, in, TJ__OPNAME(op), f, l);
    tj__attr pa;
    if (!g) return NULL;
    memset(&pa, 0, sizeof pa);
    pa.axis = a;
    pa.s = s;
    return tj__node(g, op, t, nin, in, &pa, f, l);
}
static tj_v tj__rowop(const char *f, int l, int op, tj_v x, const char *axis, double s) {
    int a;
    if (!x || (a = tj__one_axis(x, axis, TJ__OPNAME(op), f, l)) < 0) return NULL;
    if (!tj__isfloat(x->t.dt)) {
        tj__err(x->g->ctx, TJ_ERR_DTYPE, f, l, "%s: needs a float dtype, got %s", TJ__OPNAME(op), tj_dtype_name(x->t.dt));
        return NULL;
    }
    return tj__rownode(f, l, op, 1, &x, a, s, &x->t);
}
TJDEF tj_v tj_softmax_at(const char *f, int l, tj_v x, const char *axis) { return tj__rowop(f, l, TJ__OP_SOFTMAX, x, axis, 0); }
TJDEF tj_v tj_log_softmax_at(const char *f, int l, tj_v x, const char *axis) { return tj__rowop(f, l, TJ__OP_LOG_SOFTMAX, x, axis, 0); }
TJDEF tj_v tj_layer_norm_at(const char *f, int l, tj_v x, const char *axis, double eps) {
    if (x && !(eps >= 0 && eps < INFINITY)) { /* 0 is allowed, as in JAX: a constant row then gives NaN */
        tj__err(x->g->ctx, TJ_ERR_ARG, f, l, "layer_norm: eps %g must be finite and >= 0", eps);
        return NULL;
    }
    return tj__rowop(f, l, TJ__OP_LAYER_NORM, x, axis, eps);
}
/* ---- vocab-parallel cross-entropy: the class axis split over mesh axes
   (Megatron-LM's loss for a vocabulary-parallel head). Gathering the
   logits would move rows x classes; instead each of the P devices along
   the split reduces its block of classes to three numbers per row
   (cross_entropy_part: the block's max m_p, its sum s_p of exp(z - m_p),
   and the label's logit zl_p if the label falls in the block, else 0).
   Those statistics, rows x P x 3, are all-gathered, and every device
   combines them in small ops:
     M = max_p m_p,   loss = (M - sum_p zl_p) + log(sum_p s_p exp(m_p - M)).
   The loss does not depend on the shifts m_p and M (they cancel), so they
   carry no gradient (stop_gradient), and the gradient of each block,
   cross_entropy_part_grad, is one pass over it:
     dz = g_s exp(z - m_p) + g_zl [z is the label's logit],
   where g_s = g exp(m_p - M) / S and g_zl = -g come from the VJP of the
   combination (softmax(z) - onehot(label), times g). A block whose logits
   are all -inf has m_p = -inf and adds nothing. ---- */
static tj_v tj__xent_split(const char *f, int l, tj_node *z, tj_node *lab, int a, const tj__type *rows) {
    tj_ctx *c = z->g->ctx;
    tj__type t = *rows;
    tj_node *in[2];
    uint8_t want[TJ_MAXDIM];
    tj_v st, mx, m, s, loss;
    int i, k = tj__axis_index(&z->t, a);
    t.ax[t.rank] = tj__intern(c, "_part", 5); /* (split as the class axis is: tj__sh_xent_part) */
    t.dim[t.rank++] = tj__mesh_count(c, z->t.sh[k]);
    t.ax[t.rank] = tj__intern(c, "_stat", 5);
    t.dim[t.rank++] = 3;
    t.dt = z->t.dt == TJ_F64 ? TJ_F64 : TJ_F32; /* the statistics of bf16 logits in f32 */
    in[0] = z;
    in[1] = lab;
    if (!(st = tj__rownode(f, l, TJ__OP_XENT_PART, 2, in, a, 0, &t))) return NULL;
    for (i = 0; i < st->t.rank; i++) want[i] = i == st->t.rank - 2 ? 0 : st->t.sh[i];
    if (!(st = tj__reshard(st, want, "cross_entropy", f, l))) return NULL; /* every device sees every block's statistics */
    mx = tj_stop_gradient_at(f, l, tj_index_at(f, l, st, "_stat", 0));
    m = tj_stop_gradient_at(f, l, tj_max_at(f, l, mx, "_part"));
    s = tj_sum_at(f, l, tj_mul_at(f, l, tj_index_at(f, l, st, "_stat", 1), tj_exp_at(f, l, tj_sub_at(f, l, mx, m))), "_part");
    loss = tj_add_at(f, l, tj_sub_at(f, l, m, tj_sum_at(f, l, tj_index_at(f, l, st, "_stat", 2), "_part")), tj_log_at(f, l, s));
    return loss && loss->t.dt != z->t.dt ? tj_cast_at(f, l, loss, z->t.dt) : loss;
}
/* Whether the vocab-parallel form above can take logits z: its statistics
   add two axes (_part, _stat) to the rows, and its second-order VJP splits
   the class axis in two (_part, _cls), so logits with TJ_MAXDIM axes, or
   with an axis of one of those names (the sharding rule and the combine
   ops find axes by name), take the gathering form instead. */
static int tj__xent_split_fits(tj_ctx *c, const tj_node *z) {
    int i;
    const char *nm;
    if (z->t.rank >= TJ_MAXDIM) return 0;
    for (i = 0; i < z->t.rank; i++)
        if (!strcmp(nm = tj__name(c, z->t.ax[i]), "_part") || !strcmp(nm, "_stat") || !strcmp(nm, "_cls")) return 0;
    return 1;
}
/* cross-entropy: per position lse(z) - z[label]; then the mean */
TJDEF tj_v tj_cross_entropy_at(const char *f, int l, tj_v z, tj_v labels, const char *class_axis, const char *mean_axes) {
    int a, i;
    tj__type t;
    tj_node *in[2], *n;
    char b1[256], b2[256];
    if (tj__any_null("cross_entropy", f, l, 2, z, labels, NULL) || (a = tj__one_axis(z, class_axis, "cross_entropy", f, l)) < 0) return NULL;
    if (!tj__isfloat(z->t.dt) || labels->t.dt != TJ_I32) {
        tj__err(z->g->ctx, TJ_ERR_DTYPE, f, l, "cross_entropy: want float logits and i32 labels, got %s and %s", tj_v_describe(z, b1, sizeof b1),
                tj_v_describe(labels, b2, sizeof b2));
        return NULL;
    }
    t = z->t;
    t.rank = 0;
    for (i = 0; i < z->t.rank; i++) /* (each kept axis keeps its own sharding) */
        if (z->t.ax[i] != a) { t.ax[t.rank] = z->t.ax[i]; t.sh[t.rank] = z->t.sh[i]; t.dim[t.rank++] = z->t.dim[i]; }
    for (i = t.rank; i < TJ_MAXDIM; i++) t.sh[i] = 0;
    {
        int ok = labels->t.rank == t.rank;
        for (i = 0; ok && i < labels->t.rank; i++) {
            int k = tj__axis_index(&t, labels->t.ax[i]);
            ok = k >= 0 && t.dim[k] == labels->t.dim[i];
        }
        if (!ok) {
            tj__err(z->g->ctx, TJ_ERR_SHAPE, f, l, "cross_entropy: labels %s must have the axes of logits %s without '%s'", tj_v_describe(labels, b1, sizeof b1),
                    tj_v_describe(z, b2, sizeof b2), class_axis);
            return NULL;
        }
    }
    t.dt = TJ_I32;
    in[0] = z;
    in[1] = tj__fit(f, l, labels, &t); /* label r belongs to row r */
    t.dt = z->t.dt;
    if (!in[1]) return NULL;
    {   /* the class axis split over devices (outside shard_map): the vocab-parallel form above */
        tj_graph *g = tj__cur(tj__inner(2, in, "cross_entropy", f, l));
        int k = tj__axis_index(&z->t, a);
        n = g && !g->manual && g->ctx->nmesh && tj__mesh_count(g->ctx, z->t.sh[k]) > 1 && tj__xent_split_fits(g->ctx, z)
                ? tj__xent_split(f, l, z, in[1], a, &t)
                : tj__rownode(f, l, TJ__OP_CROSS_ENTROPY, 2, in, a, 0, &t);
    }
    if (!n) return NULL;
    if (mean_axes && *mean_axes) { /* named in cross_entropy's words (the class axis is gone) */
        int ids[TJ_MAXDIM];
        if (tj__axes_of(n, mean_axes, ids, "cross_entropy mean_axes", f, l) < 0) return NULL;
    }
    return mean_axes && *mean_axes ? tj_mean_at(f, l, n, mean_axes) : n;
}
static tj_v tj__copy(const char *f, int l, tj_v x);
/* The gradient op of row op n: dx from x (whose type the result takes), the
   labels and n's own per-row loss (cross_entropy: its residual) and the
   cotangent g of n, always the last input. Rows as in n. */
static tj_v tj__row_grad(const char *f, int l, int op, tj_node *n, tj_v x, tj_v labels, tj_v g) {
    tj_node *in[4];
    int nin = 0;
    in[nin++] = x;
    if (labels) {
        in[nin++] = labels;
        in[nin++] = n;
    }
    if (!(in[nin++] = tj__fit(f, l, g, &n->t))) return NULL;
    return tj__rownode(f, l, op, nin, in, n->a.axis, n->a.s, &x->t);
}
static tj_status tj__vjp_softmax(tj_node *n, tj_v g, tj_v *gin) {
    gin[0] = tj__row_grad(n->file, n->line, TJ__OP_SOFTMAX_GRAD, n, n, NULL, g);
    return gin[0] ? TJ_OK : tj_status_of(n->g->ctx);
}
static tj_status tj__vjp_log_softmax(tj_node *n, tj_v g, tj_v *gin) {
    /* dx = g - softmax(x) sum(g) */
    gin[0] = tj_sub_at(n->file, n->line, g, tj_mul_at(n->file, n->line, tj_exp_at(n->file, n->line, n), tj__sum_ids(n->file, n->line, g, &n->a.axis, 1)));
    return TJ_OK;
}
static tj_status tj__vjp_layer_norm(tj_node *n, tj_v g, tj_v *gin) {
    gin[0] = tj__row_grad(n->file, n->line, TJ__OP_LAYER_NORM_GRAD, n, n->in[0], NULL, g);
    return gin[0] ? TJ_OK : tj_status_of(n->g->ctx);
}
static tj_status tj__vjp_cross_entropy(tj_node *n, tj_v g, tj_v *gin) { /* (and cross_entropy_part's) */
    gin[0] = tj__row_grad(n->file, n->line, n->op == TJ__OP_XENT_PART ? TJ__OP_XENT_PART_GRAD : TJ__OP_CROSS_ENTROPY_GRAD, n, n->in[0], n->in[1], g);
    return gin[0] ? TJ_OK : tj_status_of(n->g->ctx);
}
/* What gradient op n computes from x and g, written in primitives: the
   reference for its kernel, and the graph its own VJP differentiates. */
static tj_v tj__row_grad_composite(const char *f, int l, const tj_node *n, tj_v x, tj_v g) {
    const char *ax = tj__name(n->g->ctx, n->a.axis);
    switch (n->op) {
    case TJ__OP_SOFTMAX_GRAD: /* y = softmax(x): dx = y (g - sum(g y)) */
        return tj_mul_at(f, l, x, tj_sub_at(f, l, g, tj__sum_ids(f, l, tj_mul_at(f, l, g, x), &n->a.axis, 1)));
    case TJ__OP_LAYER_NORM_GRAD: { /* y = (x - mu) r,  dx = r (g - mean(g) - y mean(g y)),  r = 1/sqrt(var + eps) */
        tj_v xc = tj_sub_at(f, l, x, tj_mean_at(f, l, x, ax));
        tj_v r = tj_rsqrt_at(f, l, tj_adds_at(f, l, tj_mean_at(f, l, tj_mul_at(f, l, xc, xc), ax), n->a.s)), y = tj_mul_at(f, l, xc, r);
        tj_v mg = tj_mean_at(f, l, g, ax), mgy = tj_mean_at(f, l, tj_mul_at(f, l, g, y), ax);
        return tj_mul_at(f, l, r, tj_sub_at(f, l, tj_sub_at(f, l, g, mg), tj_mul_at(f, l, y, mgy)));
    }
    case TJ__OP_XENT_PART_GRAD: { /* by blocks (the class axis split into _part, _cls): dz = g_s exp(z - m_p) + g_zl onehot(label) */
        const tj_node *st = n->in[2];
        tj_dtype dt = st->t.dt;
        char into[64], cls[128];
        tj_v m = tj_index_at(f, l, (tj_v)st, "_stat", 0), z, oh;
        snprintf(into, sizeof into, "_part=%lld _cls=0", (long long)st->t.dim[st->t.rank - 2]);
        snprintf(cls, sizeof cls, "%s=%lld", ax, (long long)x->t.dim[tj__axis_index(&x->t, n->a.axis)]);
        m = tj_select_at(f, l, tj_eq_at(f, l, m, tj_scalar_at(f, l, st->g, dt, -INFINITY)), tj_scalar_at(f, l, st->g, dt, 0), m);
        z = tj_split_at(f, l, x->t.dt == dt ? x : tj_cast_at(f, l, x, dt), ax, into);
        z = tj_mul_at(f, l, tj_exp_at(f, l, tj_sub_at(f, l, z, m)), tj_index_at(f, l, g, "_stat", 1));
        oh = tj_split_at(f, l, tj_one_hot_at(f, l, n->in[1], cls, dt), ax, into);
        z = tj_merge_at(f, l, tj_add_at(f, l, z, tj_mul_at(f, l, oh, tj_index_at(f, l, g, "_stat", 2))), "_part _cls", ax);
        return z && z->t.dt != x->t.dt ? tj_cast_at(f, l, z, x->t.dt) : z;
    }
    default: { /* cross_entropy: dz = g (softmax(z) - onehot(label)) */
        char sh[128];
        snprintf(sh, sizeof sh, "%s=%lld", ax, (long long)x->t.dim[tj__axis_index(&x->t, n->a.axis)]);
        return tj_mul_at(f, l, g, tj_sub_at(f, l, tj_softmax_at(f, l, x, ax), tj_one_hot_at(f, l, n->in[1], sh, x->t.dt)));
    }
    }
}
static tj_status tj__vjp_row_grad(tj_node *n, tj_v h, tj_v *gin) {
    /* partial derivatives: x and g enter as copies, so the inner vjp does not
       also follow g's own dependence on x (the outer one does) */
    tj_v wrt[2], c, d[2];
    wrt[0] = tj__copy(n->file, n->line, n->in[0]);
    wrt[1] = tj__copy(n->file, n->line, n->in[n->nin - 1]);
    c = tj__row_grad_composite(n->file, n->line, n, wrt[0], wrt[1]);
    if (!c || tj_vjp_at(n->file, n->line, 1, &c, &h, 2, wrt, d)) return tj_status_of(n->g->ctx);
    gin[0] = d[0];
    gin[n->nin - 1] = d[1];
    return TJ_OK;
}
/* elements [c0, c0 + m) of the row at base (stride s1, length d) of input
   i, as doubles; returns m */
static int64_t tj__row_get(const tj__kern *k, int i, int64_t base, int64_t s1, int64_t d, int64_t c0, double *buf) {
    int64_t m = d - c0 < TJ__CHUNK ? d - c0 : TJ__CHUNK;
    tj__load_n(k->in[i], k->it[i]->dt, base + c0 * s1, s1, m, buf);
    return m;
}
/* cross_entropy_grad of row r: z[label] and the forward's loss, or 0 when
   the loss was stored narrower than f32 (bf16: too coarse to give the
   softmax; the kernel then computes the row's max and sum of exps), when
   they do not give a finite lse (z[label] = -inf: an infinite loss), or
   when the loss is over 16. The stored loss is rounded to its dtype, and
   each probability exp((z - z[label]) - loss) inherits that rounding,
   |loss| ulps; computed from the row's max, a probability above e^-16
   has an exponent under 16 in magnitude. So the loss serves as long as it
   is no larger (the label's probability above e^-16, as in training);
   a row with the label's logit far below the others (a loss of 1177:
   2e-5 relative error against JAX's 1e-7) gets its statistics again. */
static int tj__xent_stats(const tj__kern *k, int64_t r, int64_t base, int64_t s1, int64_t lab, double *zl, double *loss) {
    if (k->n->op != TJ__OP_CROSS_ENTROPY_GRAD || (k->it[2]->dt != TJ_F32 && k->it[2]->dt != TJ_F64)) return 0;
    *zl = tj__ld(k->in[0], k->it[0]->dt, base + lab * s1);
    *loss = tj__ld(k->in[2], k->it[2]->dt, r);
    return isfinite(*zl + *loss) && fabs(*loss) <= 16.0;
}
/* row r's statistics (max, sum of exps, label logit) out of cross_entropy_part */
static void tj__xent_part_out(const tj__kern *k, int64_t r, double mx, double s, double zl) {
    tj__st(k->out, k->ot.dt, 3 * r, mx);
    tj__st(k->out, k->ot.dt, 3 * r + 1, s);
    tj__st(k->out, k->ot.dt, 3 * r + 2, zl);
}
/* into cross_entropy_part_grad: row r's shift (its block's max; 0 for a
   block of -inf) and the cotangents of its sum of exps and label logit */
static void tj__xent_part_in(const tj__kern *k, int64_t r, double *mx, double *gs, double *gz) {
    *mx = tj__ld(k->in[2], k->it[2]->dt, 3 * r);
    if (*mx == -INFINITY) *mx = 0;
    *gs = tj__ld(k->in[3], k->it[3]->dt, 3 * r + 1);
    *gz = tj__ld(k->in[3], k->it[3]->dt, 3 * r + 2);
}
/* row r of op k->n, in double (f64 results); off: the first class of this
   device's block (cross_entropy_part and its gradient: labels are global),
   else 0 */
static void tj__row(const tj__kern *k, int64_t r, int64_t base, int64_t s1, int64_t d, int64_t off) {
    double a[TJ__CHUNK], b[TJ__CHUNK], mx = -INFINITY, mraw = -INFINITY, s = 0, mean = 0, mlo = 0, var = 0, gy = 0, gr = 0, gz = 0, zl = 0, loss = 0, ls = 0, ones = 0;
    int op = k->n->op, g = k->nin - 1, part = op == TJ__OP_XENT_PART || op == TJ__OP_XENT_PART_GRAD; /* g: the cotangent's input */
    int ce = op == TJ__OP_CROSS_ENTROPY || op == TJ__OP_CROSS_ENTROPY_GRAD || part, rowg = op == TJ__OP_LAYER_NORM_GRAD || op == TJ__OP_SOFTMAX_GRAD;
    int64_t c0, m, j, lab = ce ? ((const int32_t *)k->in[1])[r] - off : -1;
    tj_dtype odt = k->ot.dt;
    int fast = odt != TJ_F64, stats = tj__xent_stats(k, r, base, s1, lab, &zl, &loss);
    if ((ce && !stats && op != TJ__OP_XENT_PART_GRAD) || op == TJ__OP_SOFTMAX || op == TJ__OP_LOG_SOFTMAX) { /* max, sum(exp(x - max)) */
        for (c0 = 0; c0 < d; c0 += m)
            for (m = tj__row_get(k, 0, base, s1, d, c0, a), j = 0; j < m; j++)
                if (a[j] > mx) mx = a[j];
        mraw = mx;
        if (mx == -INFINITY) mx = 0; /* a fully masked row: all -inf */
        for (c0 = 0; c0 < d; c0 += m) { /* the max's own terms (exactly 1) apart: log s = log1p(the rest) keeps the digits of a loss near 0 */
            m = tj__row_get(k, 0, base, s1, d, c0, a);
            tj__exp_n(fast, a, m, mx);
            for (j = 0; j < m; j++)
                if (a[j] == 1) ones++;
                else s += a[j];
        }
        ls = log1p(s + (ones - 1));
        s += ones;
    }
    if (op == TJ__OP_LAYER_NORM || op == TJ__OP_LAYER_NORM_GRAD) { /* mean, then var = 1 / sqrt(variance + eps) */
        double corr = 0;
        for (c0 = 0; c0 < d; c0 += m)
            for (m = tj__row_get(k, 0, base, s1, d, c0, a), j = 0; j < m; j++) mean += a[j];
        mean /= (double)d;
        for (c0 = 0; c0 < d; c0 += m)
            for (m = tj__row_get(k, 0, base, s1, d, c0, a), j = 0; j < m; j++) {
                var += (a[j] - mean) * (a[j] - mean);
                corr += a[j] - mean;
            }
        /* The mean in two parts, mean + mlo (as the float kernel's meanf +
           meanlo): the first mean's rounding (an ulp of |mean|, which may
           dwarf the row's spread) comes back as sum(x - mean), and x - mean
           is taken as (x - mean) - mlo, so the centred row sums to ~0 and
           the gradient is mean-free to rounding of its own size. A value
           added to the whole row (x - c) then gets a gradient of ~0: JAX
           gives 0 in f64 where this gave 1e-12 for a row of 2 whose mean
           was 170 times its spread (jax_diff seed 400223). */
        mlo = corr / (double)d;
        var = 1.0 / sqrt((var - corr * corr / (double)d) / (double)d + k->n->a.s);
    }
    if (rowg) { /* sum(g), sum(g y) */
        for (c0 = 0; c0 < d; c0 += m) {
            m = tj__row_get(k, 0, base, s1, d, c0, a);
            tj__row_get(k, g, base, s1, d, c0, b);
            for (j = 0; j < m; j++) {
                gr += b[j];
                gy += b[j] * (op == TJ__OP_SOFTMAX_GRAD ? a[j] : ((a[j] - mean) - mlo) * var);
            }
        }
        gr /= (double)d;
        gy /= op == TJ__OP_SOFTMAX_GRAD ? 1.0 : (double)d;
    }
    if (op == TJ__OP_CROSS_ENTROPY) {
        tj__st(k->out, odt, r, (mx - tj__ld(k->in[0], k->it[0]->dt, base + lab * s1)) + ls); /* (0 + log s when the label is the max) */
        return;
    }
    if (op == TJ__OP_XENT_PART) {
        tj__xent_part_out(k, r, mraw, s, lab >= 0 && lab < d ? tj__ld(k->in[0], k->it[0]->dt, base + lab * s1) : 0.0);
        return;
    }
    if (op == TJ__OP_CROSS_ENTROPY_GRAD) gr = tj__ld(k->in[g], k->it[g]->dt, r);
    if (op == TJ__OP_XENT_PART_GRAD) tj__xent_part_in(k, r, &mx, &gr, &gz);
    for (c0 = 0; c0 < d; c0 += m) {
        m = tj__row_get(k, 0, base, s1, d, c0, a);
        if (rowg) tj__row_get(k, g, base, s1, d, c0, b);
        if (op == TJ__OP_SOFTMAX || (op == TJ__OP_CROSS_ENTROPY_GRAD && !stats) || part) tj__exp_n(fast, a, m, mx);
        for (j = 0; j < m; j++) switch (op) {
            case TJ__OP_SOFTMAX: a[j] /= s; break;
            case TJ__OP_LOG_SOFTMAX: a[j] = (a[j] - mx) - ls; break; /* (as JAX) */
            case TJ__OP_LAYER_NORM: a[j] = ((a[j] - mean) - mlo) * var; break;
            case TJ__OP_SOFTMAX_GRAD: a[j] *= b[j] - gy; break;
            case TJ__OP_LAYER_NORM_GRAD: a[j] = var * (b[j] - gr - ((a[j] - mean) - mlo) * var * gy); break;
            case TJ__OP_XENT_PART_GRAD: a[j] = gr * a[j] + (c0 + j == lab ? gz : 0.0); break;
            default: /* cross_entropy_grad; with the loss: exp((x - z[label]) - loss), and expm1(-loss) at the label, as in float */
                a[j] = !stats ? gr * (a[j] / s - (double)(c0 + j == lab)) : c0 + j == lab ? gr * expm1(-loss) : gr * exp((a[j] - zl) - loss);
                break;
            }
        tj__store_n(k->out, odt, base + c0 * s1, s1, m, a);
    }
}
/* ---- the same in float, for results stored as f32 or bf16. Every pass is
   a loop over a chunk of TJ__FROW floats that the compiler vectorises (16
   lanes for sums and maxima, so no loop carries one accumulator); each
   chunk's sum then adds into a double. exp is tj__fexpf. Results agree with
   the double kernel within a few f32 ulps of the row's scale (test_ops:
   rows of 50304 logits near 1000). ---- */
#define TJ__FROW (2 * TJ__CHUNK)
/* e^x in float: x = n ln 2 + r, |r| <= ln 2 / 2, e^r by Taylor to r^7
   (truncation < 1e-8 relative); below -87 (results under FLT_MIN) 0 */
static TJ__INLINE float tj__fexpf(float x) {
    float c = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x, t = c * 1.44269504f + 12582912.0f, n = t - 12582912.0f; /* + 1.5 * 2^23: n lands in the low bits */
    float r = c - n * 0.693145752f - n * 1.42860677e-6f, q = 1.0f / 5040;                                          /* ln 2 in two parts */
    int32_t bits;
    float sc;
    q = q * r + 1.0f / 720;
    q = q * r + 1.0f / 120;
    q = q * r + 1.0f / 24;
    q = q * r + 1.0f / 6;
    q = q * r + 0.5f;
    q = q * r + 1.0f;
    q = q * r + 1.0f;
    memcpy(&bits, &t, 4);
    bits = (int32_t)((uint32_t)(bits - 0x4B400000 + 127) << 23);
    memcpy(&sc, &bits, 4);
    return x < -87.0f ? 0.0f : q * sc;
}
/* the sum of v[0..m) in 16 lanes, then in double */
static TJ__INLINE double tj__fsum(const float *v, int64_t m) {
    float lane[16] = {0};
    double s = 0;
    int64_t j;
    int l;
    for (j = 0; j + 16 <= m; j += 16)
        for (l = 0; l < 16; l++) lane[l] += v[j + l];
    for (l = 0; j < m; j++, l++) lane[l] += v[j];
    for (l = 0; l < 16; l++) s += lane[l];
    return s;
}
#define TJ__ROWF(name, attr)                                                                                                                    \
    attr static void name(const tj__kern *k, int64_t r, int64_t base, int64_t s1, int64_t d, int64_t off) {                                    \
        float a[TJ__FROW], b[TJ__FROW], lane[16], mxf = 0, meanf = 0, meanlo = 0, varf = 0, gyf = 0, grf = 0, grlo = 0, lsef = 0, zlf = 0, lossf = 0;   \
        double mx = -INFINITY, mraw = -INFINITY, s = 0, mean = 0, var = 0, gy = 0, gr = 0, gz = 0, zl = 0, loss = 0;                          \
        int op = k->n->op, g = k->nin - 1, l, part = op == TJ__OP_XENT_PART || op == TJ__OP_XENT_PART_GRAD;                                    \
        int ce = op == TJ__OP_CROSS_ENTROPY || op == TJ__OP_CROSS_ENTROPY_GRAD || part, rowg = op == TJ__OP_LAYER_NORM_GRAD || op == TJ__OP_SOFTMAX_GRAD; \
        int64_t c0, m, j, lab = ce ? ((const int32_t *)k->in[1])[r] - off : -1;                                                                 \
        int stats = tj__xent_stats(k, r, base, s1, lab, &zl, &loss);                                                                            \
        const void *x = k->in[0];                                                                                                               \
        tj_dtype xdt = k->it[0]->dt;                                                                                                            \
        if ((ce && !stats && op != TJ__OP_XENT_PART_GRAD) || op == TJ__OP_SOFTMAX || op == TJ__OP_LOG_SOFTMAX) { /* max, sum(exp(x - max)) */  \
            for (l = 0; l < 16; l++) lane[l] = -INFINITY;                                                                                       \
            for (c0 = 0; c0 < d; c0 += m) {                                                                                                     \
                m = d - c0 < TJ__FROW ? d - c0 : TJ__FROW;                                                                                      \
                tj__load_nf(x, xdt, base + c0 * s1, s1, m, a);                                                                                  \
                for (j = 0; j < m; j++) lane[j & 15] = a[j] > lane[j & 15] ? a[j] : lane[j & 15];                                              \
            }                                                                                                                                   \
            for (l = 0; l < 16; l++) mx = lane[l] > mx ? lane[l] : mx;                                                                          \
            mraw = mx;                                                                                                                          \
            if (mx == -INFINITY) mx = 0; /* a fully masked row: all -inf */                                                                     \
            mxf = (float)mx;                                                                                                                    \
            for (c0 = 0; c0 < d; c0 += m) {                                                                                                     \
                m = d - c0 < TJ__FROW ? d - c0 : TJ__FROW;                                                                                      \
                tj__load_nf(x, xdt, base + c0 * s1, s1, m, a);                                                                                  \
                for (j = 0; j < m; j++) a[j] = tj__fexpf(a[j] - mxf);                                                                           \
                s += tj__fsum(a, m);                                                                                                            \
            }                                                                                                                                   \
            lsef = (float)log(s);                                                                                                               \
        }                                                                                                                                       \
        if (op == TJ__OP_LAYER_NORM || op == TJ__OP_LAYER_NORM_GRAD) { /* mean, then var = 1 / sqrt(variance + eps) */                         \
            for (c0 = 0; c0 < d; c0 += m) {                                                                                                     \
                m = d - c0 < TJ__FROW ? d - c0 : TJ__FROW;                                                                                      \
                tj__load_nf(x, xdt, base + c0 * s1, s1, m, a);                                                                                  \
                mean += tj__fsum(a, m);                                                                                                         \
            }                                                                                                                                   \
            meanf = (float)(mean /= (double)d), meanlo = (float)(mean - meanf); /* x - mean as (x - meanf) - meanlo: exact, then small */      \
            for (c0 = 0; c0 < d; c0 += m) {                                                                                                     \
                m = d - c0 < TJ__FROW ? d - c0 : TJ__FROW;                                                                                      \
                tj__load_nf(x, xdt, base + c0 * s1, s1, m, a);                                                                                  \
                for (j = 0; j < m; j++) a[j] = ((a[j] - meanf) - meanlo) * ((a[j] - meanf) - meanlo);                                           \
                var += tj__fsum(a, m);                                                                                                          \
            }                                                                                                                                   \
            varf = (float)(var = 1.0 / sqrt(var / (double)d + k->n->a.s));                                                                     \
        }                                                                                                                                       \
        if (rowg) { /* sum(g), sum(g y) */                                                                                                      \
            for (c0 = 0; c0 < d; c0 += m) {                                                                                                     \
                m = d - c0 < TJ__FROW ? d - c0 : TJ__FROW;                                                                                      \
                tj__load_nf(x, xdt, base + c0 * s1, s1, m, a);                                                                                  \
                tj__load_nf(k->in[g], k->it[g]->dt, base + c0 * s1, s1, m, b);                                                                  \
                gr += tj__fsum(b, m);                                                                                                           \
                if (op == TJ__OP_SOFTMAX_GRAD) for (j = 0; j < m; j++) a[j] *= b[j];                                                            \
                else for (j = 0; j < m; j++) a[j] = b[j] * (((a[j] - meanf) - meanlo) * varf);                                                  \
                gy += tj__fsum(a, m);                                                                                                           \
            }                                                                                                                                   \
            grf = (float)(gr /= (double)d), grlo = (float)(gr - grf); /* g - mean(g) as (g - grf) - grlo, as x - mean */                    \
            gyf = (float)(op == TJ__OP_SOFTMAX_GRAD ? gy : gy / (double)d);                                                                     \
        }                                                                                                                                       \
        if (op == TJ__OP_CROSS_ENTROPY) {                                                                                                       \
            tj__st(k->out, k->ot.dt, r, (mx - tj__ld(x, xdt, base + lab * s1)) + log(s));                                                       \
            return;                                                                                                                             \
        }                                                                                                                                       \
        if (op == TJ__OP_XENT_PART) {                                                                                                           \
            tj__xent_part_out(k, r, mraw, s, lab >= 0 && lab < d ? tj__ld(x, xdt, base + lab * s1) : 0.0);                                     \
            return;                                                                                                                             \
        }                                                                                                                                       \
        if (op == TJ__OP_CROSS_ENTROPY_GRAD) grf = (float)tj__ld(k->in[g], k->it[g]->dt, r);                                                    \
        if (op == TJ__OP_XENT_PART_GRAD) tj__xent_part_in(k, r, &mx, &gr, &gz), mxf = (float)mx, grf = (float)gr;                             \
        zlf = (float)zl, lossf = (float)loss, s = 1.0 / s;                                                                                      \
        for (c0 = 0; c0 < d; c0 += m) {                                                                                                         \
            float sf = (float)s;                                                                                                                \
            m = d - c0 < TJ__FROW ? d - c0 : TJ__FROW;                                                                                          \
            tj__load_nf(x, xdt, base + c0 * s1, s1, m, a);                                                                                      \
            if (rowg) tj__load_nf(k->in[g], k->it[g]->dt, base + c0 * s1, s1, m, b);                                                            \
            switch (op) {                                                                                                                       \
            case TJ__OP_SOFTMAX: for (j = 0; j < m; j++) a[j] = tj__fexpf(a[j] - mxf) * sf; break;                                             \
            case TJ__OP_LOG_SOFTMAX: for (j = 0; j < m; j++) a[j] = (a[j] - mxf) - lsef; break;                                                \
            case TJ__OP_LAYER_NORM: for (j = 0; j < m; j++) a[j] = ((a[j] - meanf) - meanlo) * varf; break;                                    \
            case TJ__OP_SOFTMAX_GRAD: for (j = 0; j < m; j++) a[j] *= b[j] - gyf; break;                                                       \
            case TJ__OP_LAYER_NORM_GRAD: for (j = 0; j < m; j++) a[j] = varf * (((b[j] - grf) - grlo) - ((a[j] - meanf) - meanlo) * varf * gyf); break; \
            case TJ__OP_XENT_PART_GRAD:                                                                                                         \
                for (j = 0; j < m; j++) a[j] = grf * tj__fexpf(a[j] - mxf);                                                                    \
                if (lab >= c0 && lab < c0 + m) a[lab - c0] += (float)gz;                                                                       \
                break;                                                                                                                          \
            default: /* cross_entropy_grad: exp(x - lse) = exp((x - z[label]) - loss), or from the max and sum */                              \
                if (stats) for (j = 0; j < m; j++) a[j] = grf * tj__fexpf((a[j] - zlf) - lossf);                                               \
                else for (j = 0; j < m; j++) a[j] = grf * (tj__fexpf(a[j] - mxf) * sf);                                                        \
                if (lab >= c0 && lab < c0 + m) /* the label's p - 1 = expm1(-loss): no cancellation as the loss nears 0 */                      \
                    a[lab - c0] = stats ? (float)((double)grf * expm1(-loss)) : a[lab - c0] - grf;                                              \
                break;                                                                                                                          \
            }                                                                                                                                   \
            tj__store_nf(k->out, k->ot.dt, base + c0 * s1, s1, m, a);                                                                           \
        }                                                                                                                                       \
    }
TJ__ROWF(tj__row_f, )
#if TJ__X86
TJ__ROWF(tj__row_f512, __attribute__((target("avx512f"))))
#endif
#undef TJ__ROWF
typedef struct {
    const tj__kern *k;
    int64_t st, d, rows, off; /* off: as tj__row's */
} tj__rows;
static void tj__rows_part(const void *arg, int part, int nparts) {
    const tj__rows *e = (const tj__rows *)arg;
    int64_t r;
    void (*row)(const tj__kern *, int64_t, int64_t, int64_t, int64_t, int64_t) = e->k->ot.dt == TJ_F64 ? tj__row : tj__row_f;
#if TJ__X86
    if (row == tj__row_f && __builtin_cpu_supports("avx512f")) row = tj__row_f512;
#endif
    for (r = e->rows * part / nparts; r < e->rows * (part + 1) / nparts; r++) row(e->k, r, (r / e->st) * e->st * e->d + r % e->st, e->st, e->d, e->off);
}
static void tj__k_rowop(tj__kern *k) {
    const tj__type *t = k->it[0];
    int64_t st[TJ_MAXDIM], r, V;
    int op = k->n->op, ax = tj__axis_index(t, k->n->a.axis), np = tj__nparts(tj__numel(t), k->nthreads);
    tj__rows e;
    tj__strides(t, st);
    e.k = k;
    e.st = st[ax];
    e.d = V = t->dim[ax];
    e.rows = e.d ? tj__numel(t) / e.d : 0;
    e.off = 0;
    if (op == TJ__OP_XENT_PART || op == TJ__OP_XENT_PART_GRAD) tj__split_block(k, ax, e.d, &e.off, &V); /* this block of V classes */
    if (op == TJ__OP_CROSS_ENTROPY || op == TJ__OP_CROSS_ENTROPY_GRAD || op == TJ__OP_XENT_PART || op == TJ__OP_XENT_PART_GRAD)
        for (r = 0; r < e.rows; r++) {
            int32_t lab = ((const int32_t *)k->in[1])[r];
            if (lab < 0 || lab >= V) {
                char at[64];
                tj__kpos(k, 1, r, at, sizeof at);
                if (k->err) snprintf(k->err, TJ__MSG, "%s: label %d at %s is out of range [0, %lld) (at %s:%d)", TJ__OPNAME(k->n->op), (int)lab, at,
                                     (long long)V, tj__base(k->n->file), k->n->line);
                return;
            }
        }
    tj__parallel(np < e.rows ? np : (int)e.rows, tj__rows_part, &e);
}
static double tj__flops_row(const tj_node *n) { return 5.0 * (double)tj__numel(&n->in[0]->t); }

/* ---- causal mask ---- */
TJDEF tj_v tj_causal_mask_at(const char *f, int l, tj_v x, const char *q_axis, const char *k_axis, double fill) {
    int q, kk;
    tj__attr pa;
    if (!x || (q = tj__one_axis(x, q_axis, "causal_mask", f, l)) < 0 || (kk = tj__one_axis(x, k_axis, "causal_mask", f, l)) < 0 ||
        !tj__const_fits(f, l, x, fill, "causal_mask")) return NULL;
    if (q == kk) {
        tj__err(x->g->ctx, TJ_ERR_AXIS, f, l, "causal_mask: query and key axes must differ (rename one), both are '%s'", q_axis);
        return NULL;
    }
    memset(&pa, 0, sizeof pa);
    pa.axis = q;
    pa.axis2 = kk;
    pa.s = fill;
    return tj__node(x->g, TJ__OP_CAUSAL, &x->t, 1, &x, &pa, f, l);
}
/* in rows of the last axis; the threads split the rows */
static void tj__causal_part(const void *arg, int part, int nparts) {
    const tj__kern *k = (const tj__kern *)arg;
    const tj__type *t = &k->ot;
    int qa = tj__axis_index(t, k->n->a.axis), ka = tj__axis_index(t, k->n->a.axis2), last = t->rank - 1;
    int64_t st[TJ_MAXDIM], d = t->dim[last], rows = tj__numel(t) / d, r, c0, m, j;
    double a[TJ__CHUNK];
    tj__strides(t, st);
    for (r = rows * part / nparts; r < rows * (part + 1) / nparts; r++) {
        int64_t i0 = r * d, qi = i0 / st[qa] % t->dim[qa], ki = i0 / st[ka] % t->dim[ka];
        for (c0 = 0; c0 < d; c0 += m) {
            m = d - c0 < TJ__CHUNK ? d - c0 : TJ__CHUNK;
            tj__load_n(k->in[0], k->it[0]->dt, i0 + c0, 1, m, a);
            for (j = 0; j < m; j++)
                if ((ka == last ? c0 + j : ki) > (qa == last ? c0 + j : qi)) a[j] = k->n->a.s;
            tj__store_n(k->out, t->dt, i0 + c0, 1, m, a);
        }
    }
}
static void tj__k_causal(tj__kern *k) {
    int64_t n = tj__numel(&k->ot), rows = n ? n / k->ot.dim[k->ot.rank - 1] : 0;
    int np = tj__nparts(n, k->nthreads);
    if (rows) tj__parallel(np < rows ? np : (int)rows, tj__causal_part, k);
}
static tj_status tj__vjp_causal(tj_node *n, tj_v g, tj_v *gin) {
    gin[0] = tj_causal_mask_at(n->file, n->line, tj__fit(n->file, n->line, g, &n->t), tj__name(n->g->ctx, n->a.axis), tj__name(n->g->ctx, n->a.axis2), 0.0);
    return TJ_OK;
}

/* ---- attention (flash-style) ----
   tj_attention lays q, k and v out as [batch..., pos, dim] (the batch axes
   in q's order; a relayout node where they are not) and makes one
   ATTENTION node with two outputs: out [batch..., qpos, dim'] and the
   log-sum-exp of each query's scaled scores, lse [batch..., qpos] (f32;
   f64 for f64), which only the backward pass reads. Its VJP is one
   ATTENTION_GRAD node: inputs q, k, v, out, lse, d_out, outputs dq, dk, dv.
   With P = exp(s - lse) the probabilities and D_i = sum_c d_out[i,c] out[i,c]:
       dv_j = sum_i P_ij d_out_i       ds_ij = P_ij (d_out_i . v_j - D_i)
       dk_j = scale sum_i ds_ij q_i    dq_i  = scale sum_j ds_ij k_j
   The CPU kernels below compute rows in f32 (f64 for f64): the forward
   splits the query rows over the threads, the backward first computes D
   (its workspace), then dk and dv by key rows and dq by query rows, so no
   two threads ever add into one row and every run gives the same bits.
   Grouped k and v (they lack some of q's batch axes): q is laid out with
   those axes last among its batch axes, so q's batch row b reads k's and
   v's row b / grp, and the dk/dv pass of a k/v row walks the queries of
   all grp rows of q. A mask is a 4th input (a 7th of attention_grad),
   laid out [its batch axes, qpos, kpos] and read in place (tj__attn_mrow:
   stride 0 over the axes it lacks): a masked score becomes
   TJ__ATTN_MASKED, JAX's finite fill, and a row whose scores are all that
   is the mean of v with lse +inf, which the backward reads as P = 0 at
   every pair plus a 1/tk share of its d_out in every dv row. */
static int tj__add_proj(tj_node *m, const tj__type *t, int space); /* in [7] */
#define TJ__ATTN_MAXD 256 /* dim and dim' (the kernels keep tiles on the stack; FlashAttention's limit too) */
/* x with its axes in the order of ord[0..n) (those x has; every axis of x is
   in ord): a relayout node where they are not in that order already */
static tj_node *tj__attn_layout(const char *f, int l, tj_node *x, const int *ord, int n) {
    tj__type t = x->t;
    int i, k, same = 1;
    t.rank = 0;
    for (i = 0; i < n; i++)
        if ((k = tj__axis_index(&x->t, ord[i])) >= 0) t.ax[t.rank] = x->t.ax[k], t.dim[t.rank] = x->t.dim[k], t.sh[t.rank++] = x->t.sh[k];
    for (i = 0; i < t.rank; i++) same &= t.ax[i] == x->t.ax[i];
    return same ? x : tj__relayout(f, l, x, &t);
}
/* the sharding the op wants for x: q's batch axes' mesh axes (after q's
   qpos and dim are made whole), every other axis whole */
static tj_node *tj__attn_fit(const char *f, int l, tj_node *x, const tj__type *q, int qpos, int qdim) {
    uint8_t want[TJ_MAXDIM];
    int i, k, need = x->t.partial != 0;
    for (i = 0; i < x->t.rank; i++) {
        k = tj__axis_index(q, x->t.ax[i]);
        want[i] = k < 0 || q->ax[k] == qpos || q->ax[k] == qdim ? 0 : q->sh[k];
        need |= want[i] != x->t.sh[i];
    }
    return need ? tj__reshard(x, want, "attention", f, l) : x;
}
#define TJ__ATTN_MASKED (-0.7 * 3.4028234663852886e38) /* a masked pair's score: JAX's _get_large_negative (f32's range) */
static tj_v tj__attention(const char *f, int l, tj_v q, tj_v k, tj_v v, tj_v mask, int masked, const char *qpos, const char *kpos, const char *dim,
                          double scale, int causal);
TJDEF tj_v tj_attention_at(const char *f, int l, tj_v q, tj_v k, tj_v v, const char *qpos, const char *kpos, const char *dim, double scale, int causal) {
    return tj__attention(f, l, q, k, v, NULL, 0, qpos, kpos, dim, scale, causal);
}
TJDEF tj_v tj_attention_masked_at(const char *f, int l, tj_v q, tj_v k, tj_v v, tj_v mask, const char *qpos, const char *kpos, const char *dim, double scale,
                                  int causal) {
    return tj__attention(f, l, q, k, v, mask, 1, qpos, kpos, dim, scale, causal);
}
static tj_v tj__attention(const char *f, int l, tj_v q, tj_v k, tj_v v, tj_v mask, int masked, const char *qpos, const char *kpos, const char *dim,
                          double scale, int causal) {
    tj_ctx *c;
    tj_node *x[4], *n;
    tj_graph *ig;
    tj__type to, tl, dummy;
    tj__attr at;
    int qp, kp, d, i, j, nsh, nin = 3 + masked, ord[TJ_MAXDIM + 2];
    unsigned u = 0;
    char b1[256], b2[256], b3[256];
    x[0] = q, x[1] = k, x[2] = v, x[3] = mask;
    if (tj__null_among(nin, x, "attention", f, l, 1)) return NULL;
    c = q->g->ctx;
    if (q->t.dt != k->t.dt || q->t.dt != v->t.dt || !tj__isfloat(q->t.dt)) {
        tj__err(c, TJ_ERR_DTYPE, f, l, "attention: q, k and v must share a float dtype: %s, %s, %s", tj_v_describe(q, b1, sizeof b1),
                tj_v_describe(k, b2, sizeof b2), tj_v_describe(v, b3, sizeof b3));
        return NULL;
    }
    if ((qp = tj__one_axis(q, qpos, "attention (q) qpos", f, l)) < 0 || (d = tj__one_axis(q, dim, "attention (q) dim", f, l)) < 0 ||
        (kp = tj__one_axis(k, kpos, "attention (k) kpos", f, l)) < 0 || tj__one_axis(k, dim, "attention (k) dim", f, l) < 0 ||
        tj__one_axis(v, kpos, "attention (v) kpos", f, l) < 0 || tj__one_axis(v, dim, "attention (v) dim", f, l) < 0)
        return NULL;
    if (qp == d || kp == d) {
        tj__err(c, TJ_ERR_AXIS, f, l, "attention: the position axes ('%s', '%s') and the contracted axis '%s' must differ", qpos, kpos, dim);
        return NULL;
    }
    if (kp != qp && tj__axis_index(&q->t, kp) >= 0) { /* it would be a batch axis of q and the keys' axis of k at once */
        tj__err(c, TJ_ERR_AXIS, f, l, "attention: the key axis '%s' is also an axis of q %s (name the keys' axis apart, or the same as q's '%s')", kpos,
                tj_v_describe(q, b1, sizeof b1), qpos);
        return NULL;
    }
    /* k and v: kpos, dim and some of q's batch axes (the same sizes; the
       same ones in both), nothing else: they are shared over the rest */
    for (j = 0; j < 2; j++) {
        tj_v y = j ? v : k;
        for (i = 0; i < y->t.rank; i++) {
            int a = y->t.ax[i], kq = tj__axis_index(&q->t, a);
            if (a == kp || a == d) continue;
            if (kq < 0 || a == qp || y->t.dim[i] != q->t.dim[kq] || (j && tj__axis_index(&k->t, a) < 0)) {
                tj__err(c, TJ_ERR_SHAPE, f, l,
                        "attention: %s's axis '%s' is %s: k and v have '%s', '%s' and some of q's batch axes (the same in both, of q's sizes; q's "
                        "others are shared): q is %s, %s is %s",
                        j ? "v" : "k", tj__name(c, a), kq < 0 || a == qp ? "not a batch axis of q" : y->t.dim[i] != q->t.dim[kq] ? "not of q's size" : "not one of k's",
                        kpos, dim, tj_v_describe(q, b1, sizeof b1), j ? "v" : "k", tj_v_describe(y, b2, sizeof b2));
                return NULL;
            }
        }
        if (j && k->t.rank != v->t.rank) {
            tj__err(c, TJ_ERR_SHAPE, f, l, "attention: k and v must have the same batch axes: k is %s, v is %s", tj_v_describe(k, b1, sizeof b1),
                    tj_v_describe(v, b2, sizeof b2));
            return NULL;
        }
    }
    if (k->t.dim[tj__axis_index(&k->t, d)] != q->t.dim[tj__axis_index(&q->t, d)]) {
        tj__err(c, TJ_ERR_SHAPE, f, l, "attention: k must have q's batch axes (or some of them), '%s' and '%s' (the size of q's: %lld, not %lld): q is %s, k is %s",
                kpos, dim, (long long)q->t.dim[tj__axis_index(&q->t, d)], (long long)k->t.dim[tj__axis_index(&k->t, d)], tj_v_describe(q, b1, sizeof b1),
                tj_v_describe(k, b2, sizeof b2));
        return NULL;
    }
    if (k->t.dim[tj__axis_index(&k->t, kp)] != v->t.dim[tj__axis_index(&v->t, kp)]) {
        tj__err(c, TJ_ERR_SHAPE, f, l, "attention: '%s' has size %lld in k but %lld in v", kpos, (long long)k->t.dim[tj__axis_index(&k->t, kp)],
                (long long)v->t.dim[tj__axis_index(&v->t, kp)]);
        return NULL;
    }
    if (q->t.dim[tj__axis_index(&q->t, d)] > TJ__ATTN_MAXD || v->t.dim[tj__axis_index(&v->t, d)] > TJ__ATTN_MAXD) {
        tj__err(c, TJ_ERR_UNSUPPORTED, f, l, "attention: '%s' of size %lld (q) / %lld (v): at most %d", dim, (long long)q->t.dim[tj__axis_index(&q->t, d)],
                (long long)v->t.dim[tj__axis_index(&v->t, d)], TJ__ATTN_MAXD);
        return NULL;
    }
    if (scale != scale || scale == INFINITY || scale == -INFINITY) {
        tj__err(c, TJ_ERR_ARG, f, l, "attention: scale %g is not finite (0: 1/sqrt(size of '%s'))", scale, dim);
        return NULL;
    }
    if (masked) { /* the mask: i32, its axes q's batch axes, qpos and kpos (some of them) */
        if (mask->t.dt != TJ_I32) {
            tj__err(c, TJ_ERR_DTYPE, f, l, "attention: the mask must be i32 (nonzero: attend), not %s", tj_v_describe(mask, b1, sizeof b1));
            return NULL;
        }
        for (i = 0; i < mask->t.rank; i++) {
            int a = mask->t.ax[i], kq = tj__axis_index(&q->t, a);
            int64_t want = a == kp ? k->t.dim[tj__axis_index(&k->t, kp)] : kq >= 0 && a != d ? q->t.dim[kq] : -1;
            if (a == qp && qp == kp) {
                tj__err(c, TJ_ERR_AXIS, f, l, "attention: the mask's axis '%s' is both the queries' and the keys' axis (name k's axis apart, as '%s' and another, "
                        "to mask by position): mask is %s", qpos, qpos, tj_v_describe(mask, b1, sizeof b1));
                return NULL;
            }
            if (want != mask->t.dim[i]) {
                tj__err(c, TJ_ERR_SHAPE, f, l, "attention: the mask's axis '%s' is %s: a mask has some of q's batch axes, '%s' and '%s' (of their sizes) and "
                        "broadcasts over the rest: mask is %s, q is %s, k is %s", tj__name(c, a),
                        want < 0 ? (a == d ? "the contracted axis" : "neither a batch axis of q nor a position axis") : "of another size", qpos, kpos,
                        tj_v_describe(mask, b1, sizeof b1), tj_v_describe(q, b2, sizeof b2), tj_v_describe(k, b3, sizeof b3));
                return NULL;
            }
        }
    }
    if (scale == 0) scale = 1.0 / sqrt((double)q->t.dim[tj__axis_index(&q->t, d)]);
    if (!(ig = tj__inner(nin, x, "attention", f, l))) return NULL;
    if (c->nmesh && !ig->manual) { /* fit before the relayouts, so that they copy slices */
        if (!(x[0] = tj__attn_fit(f, l, q, &q->t, qp, d))) return NULL;
        for (i = 1; i < nin; i++) /* (the mask too: split like q's batch axes, its positions whole) */
            if (!(x[i] = tj__attn_fit(f, l, x[i], &x[0]->t, qp, d))) return NULL;
    } else if (ig->manual && ig->check) { /* every output varies like the union of the inputs */
        for (i = 0; i < nin; i++) u |= x[i]->t.vary;
        for (i = 0; i < nin; i++)
            if (x[i]->t.vary != u && !(x[i] = tj__pvary(x[i], u & ~x[i]->t.vary, "attention", f, l))) return NULL;
    }
    /* the layouts: q [shared..., q's own..., qpos, dim] (the batch axes k
       and v have, then those they lack: q's batch row b uses k's and v's
       row b / (the product of the sizes they lack)), k and v [shared...,
       kpos, dim] */
    for (i = 0, j = 0; i < q->t.rank; i++)
        if (q->t.ax[i] != qp && q->t.ax[i] != d && tj__axis_index(&k->t, q->t.ax[i]) >= 0) ord[j++] = q->t.ax[i];
    nsh = j;
    for (i = 0; i < q->t.rank; i++)
        if (q->t.ax[i] != qp && q->t.ax[i] != d && tj__axis_index(&k->t, q->t.ax[i]) < 0) ord[j++] = q->t.ax[i];
    ord[j] = qp, ord[j + 1] = d;
    if (!(x[0] = tj__attn_layout(f, l, x[0], ord, j + 2))) return NULL;
    ord[j + 1] = kp; /* the mask: [its batch axes in q's order, qpos, kpos] */
    if (masked && !(x[3] = tj__attn_layout(f, l, x[3], ord, j + 2))) return NULL;
    ord[nsh] = kp, ord[nsh + 1] = d;
    for (i = 1; i < 3; i++)
        if (!(x[i] = tj__attn_layout(f, l, x[i], ord, nsh + 2))) return NULL;
    memset(&at, 0, sizeof at);
    at.s = scale;
    at.causal = causal != 0;
    at.axis = qp, at.axis2 = kp;
    at.axes[0] = d, at.naxes = 1;
    memset(&dummy, 0, sizeof dummy);
    dummy.dt = TJ_I32;
    if (!(ig = tj__inner(nin, x, "attention", f, l)) || !(n = tj__node(ig, TJ__OP_ATTENTION, &dummy, nin, x, &at, f, l))) return NULL;
    to = n->in[0]->t; /* out: q's layout with dim' */
    to.dim[to.rank - 1] = n->in[2]->t.dim[n->in[2]->t.rank - 1];
    to.partial = 0;
    tl = to; /* lse: without dim */
    tl.rank--;
    tl.sh[tl.rank] = 0;
    tl.dt = to.dt == TJ_F64 ? TJ_F64 : TJ_F32;
    if (tj__add_proj(n, &to, TJ_SPACE_DEVICE) || tj__add_proj(n, &tl, TJ_SPACE_DEVICE)) return NULL;
    return n->proj[0];
}
static tj_status tj__vjp_attention(tj_node *n, tj_v g, tj_v *gin) {
    tj_ctx *c = n->g->ctx;
    tj_node *in[7], *m, *o = n->proj[0];
    tj__type dummy;
    int i, nin = n->nin == 4 ? 7 : 6; /* (the mask last: it has no gradient) */
    (void)g;
    for (i = 0; i < 3; i++) in[i] = n->in[i];
    in[3] = o, in[4] = n->proj[1]; /* (lse is no public value: only out has a cotangent) */
    if (nin == 7) in[6] = n->in[3];
    if (!(in[5] = tj__fit(n->file, n->line, c->proj_ct[o->id], &o->t))) return c->status;
    memset(&dummy, 0, sizeof dummy);
    dummy.dt = TJ_I32;
    if (!(m = tj__node(tj__inner(nin, in, "attention", n->file, n->line), TJ__OP_ATTENTION_GRAD, &dummy, nin, in, &n->a, n->file, n->line)))
        return c->status ? c->status : TJ_ERR_OOM;
    for (i = 0; i < 3; i++) {
        tj__type t = m->in[i]->t;
        int a;
        if (i) /* dk, dv: sums over q's batch axes k and v lack, partial where those are split */
            for (a = 0; a < in[0]->t.rank - 2; a++)
                if (tj__axis_index(&t, in[0]->t.ax[a]) < 0) t.partial |= in[0]->t.sh[a];
        if (tj__add_proj(m, &t, TJ_SPACE_DEVICE)) return c->status;
        gin[i] = m->proj[i];
    }
    return TJ_OK;
}
/* What attention_grad computes from q, k, v and the cotangent g (its
   inputs 0, 1, 2, 5: [batch.., pos, dim]), written in primitives: the
   scores, P = softmax over the keys, dv = P^T g, dS = P (g v^T - rowsum(P
   g v^T)), dq = scale dS k, dk = scale dS^T q. Its out and lse inputs are
   functions of q, k, v, so leaving them out changes no total derivative.
   The graph attention_grad's own VJP differentiates (second derivatives). */
static tj_status tj__attn_grad_composite(const char *f, int l, const tj_node *n, tj_v q, tj_v k, tj_v v, tj_v g, tj_v *d) {
    tj_ctx *c = n->g->ctx;
    const char *qp = tj__name(c, n->a.axis), *kp = tj__name(c, n->a.axis2), *dim = tj__name(c, n->a.axes[0]);
    const char *kq = n->a.axis == n->a.axis2 ? "attention_keys_" : kp; /* the keys' axis apart from the queries' */
    tj_v s, p, dp, ds;
    char over[TJ__MSG]; /* dk and dv sum over the queries and q's batch axes k lacks */
    int i;
    if (!q || !k) return tj_status_of(c);
    snprintf(over, sizeof over, "%s", qp);
    for (i = 0; i < q->t.rank; i++)
        if (q->t.ax[i] != n->a.axis && q->t.ax[i] != n->a.axes[0] && tj__axis_index(&k->t, q->t.ax[i]) < 0)
            snprintf(over + strlen(over), sizeof over - strlen(over), " %s", tj__name(c, q->t.ax[i]));
    if (kq != kp) k = tj_rename_at(f, l, k, kp, kq), v = tj_rename_at(f, l, v, kp, kq);
    s = tj_muls_at(f, l, tj_dot_at(f, l, q, k, dim), n->a.s);
    if (n->nin == 7) s = tj_select_at(f, l, n->in[6], s, tj_scalar_at(f, l, q->g, q->t.dt, TJ__ATTN_MASKED)); /* as JAX: a large negative, not -inf */
    if (n->a.causal) s = tj_causal_mask_at(f, l, s, qp, kq, n->nin == 7 ? TJ__ATTN_MASKED : -INFINITY);
    p = tj_softmax_at(f, l, s, kq);
    dp = tj_dot_at(f, l, g, v, dim);
    ds = tj_mul_at(f, l, p, tj_sub_at(f, l, dp, tj_sum_at(f, l, tj_mul_at(f, l, p, dp), kq)));
    if (n->nin == 7) { /* no gradient through a masked score (a fully masked row's P is 1 / tk there, not 0) */
        ds = tj_select_at(f, l, n->in[6], ds, tj_scalar_at(f, l, q->g, q->t.dt, 0));
        if (n->a.causal) ds = tj_causal_mask_at(f, l, ds, qp, kq, 0);
    }
    d[0] = tj_muls_at(f, l, tj_dot_at(f, l, ds, k, kq), n->a.s);
    d[1] = tj_muls_at(f, l, tj_dot_at(f, l, ds, q, over), n->a.s);
    d[2] = tj_dot_at(f, l, p, g, over);
    if (kq != kp) d[1] = tj_rename_at(f, l, d[1], kq, kp), d[2] = tj_rename_at(f, l, d[2], kq, kp);
    return d[0] && d[1] && d[2] ? TJ_OK : tj_status_of(c);
}
static tj_status tj__vjp_attention_grad(tj_node *n, tj_v g, tj_v *gin) {
    /* partial derivatives, as tj__vjp_row_grad: q, k, v and g enter as copies */
    tj_ctx *c = n->g->ctx;
    tj_v wrt[4], outs[3], cts[3], d[3], dw[4];
    int i, nout = 0;
    (void)g;
    for (i = 0; i < 4; i++) wrt[i] = tj__copy(n->file, n->line, n->in[i < 3 ? i : 5]);
    if (tj__attn_grad_composite(n->file, n->line, n, wrt[0], wrt[1], wrt[2], wrt[3], d)) return tj_status_of(c);
    for (i = 0; i < 3; i++)
        if (c->proj_ct[n->proj[i]->id]) {
            outs[nout] = tj__fit(n->file, n->line, d[i], &n->proj[i]->t);
            cts[nout++] = tj__fit(n->file, n->line, c->proj_ct[n->proj[i]->id], &n->proj[i]->t);
        }
    if (!nout) return TJ_OK;
    if (tj_vjp_at(n->file, n->line, nout, outs, cts, 4, wrt, dw)) return tj_status_of(c);
    for (i = 0; i < 4; i++) gin[i < 3 ? i : 5] = dw[i];
    return TJ_OK;
}
/* sizes from the local types: nb rows of (batch...), tq queries, tk keys */
typedef struct {
    const tj__kern *k;
    int64_t nb, tq, tk, d, dv;
    int64_t nbk, grp; /* k's and v's batch rows; q's batch row b uses their row b / grp */
    double scale;
    int causal;
    /* the mask (NULL: none): element (b, i, j) at tj__attn_mrow(a, b) + i mq + j mk,
       b split over q's batch axes (sizes bdim, the mask's strides bst, 0 where it lacks one) */
    const int32_t *mask;
    int64_t mq, mk, bdim[TJ_MAXDIM], bst[TJ_MAXDIM];
    int nbd;
    void *dl;   /* backward: D per query row (f32, or f64 for f64) */
    int fuse;   /* backward: dq summed in the dk/dv pass (one pass; see tj__k_attention_grad) */
    void *dqs;  /* ... into this (f32 sums of a bf16 dq, all rows), or into dq itself */
} tj__attn;
static void tj__attn_init(const tj__kern *k, tj__attn *a) {
    const tj__type *q = k->it[0], *v = k->it[2];
    a->k = k;
    a->tq = q->dim[q->rank - 2];
    a->d = q->dim[q->rank - 1];
    a->tk = v->dim[v->rank - 2];
    a->dv = v->dim[v->rank - 1];
    a->nb = tj__numel(q) / (a->tq * a->d); /* (no axis is empty) */
    a->nbk = tj__numel(v) / (a->tk * a->dv);
    a->grp = a->nb / a->nbk;
    a->scale = k->n->a.s;
    a->causal = k->n->a.causal;
    a->dl = k->scratch;
    a->fuse = 0;
    a->mask = NULL;
    a->mq = a->mk = 0;
    a->nbd = q->rank - 2;
    {
        int mi = k->n->op == TJ__OP_ATTENTION ? 3 : 6, i, j;
        const tj__type *m = k->n->nin > mi ? k->it[mi] : NULL;
        int64_t st = 1;
        for (i = 0; i < a->nbd; i++) a->bdim[i] = q->dim[i], a->bst[i] = 0;
        for (j = m ? m->rank - 1 : -1; j >= 0; st *= m->dim[j--]) {
            if (m->ax[j] == k->n->a.axis2 && j == m->rank - 1 && k->n->a.axis2 != k->n->a.axis) a->mk = st; /* (kpos: last, when the mask has it) */
            else if (m->ax[j] == k->n->a.axis) a->mq = st;
            else
                for (i = 0; i < a->nbd; i++)
                    if (q->ax[i] == m->ax[j]) a->bst[i] = st;
        }
        if (m) a->mask = (const int32_t *)k->in[mi];
    }
    a->dqs = k->n->op != TJ__OP_ATTENTION_GRAD || q->dt == TJ_F32 || q->dt == TJ_F64 ? NULL : (char *)k->scratch + tj__align(a->nb * a->tq * 4);
}
/* the mask's row of query 0 of q's batch row b */
static const int32_t *tj__attn_mrow(const tj__attn *a, int64_t b) {
    int64_t off = 0;
    int i;
    for (i = a->nbd - 1; i >= 0; i--) off += b % a->bdim[i] * a->bst[i], b /= a->bdim[i];
    return a->mask + off;
}
/* the keys query i sees */
static int64_t tj__attn_nkeys(const tj__attn *a, int64_t i) { return a->causal ? (i + 1 < a->tk ? i + 1 : a->tk) : a->tk; }
/* The loops, for float (f32 and bf16 data; also compiled for AVX-512 where
   the CPU has it) and for double (f64), work on tiles as a flash-attention
   GPU kernel does: a block of OWN rows of one side (queries in the forward
   and for dq, keys for dk and dv) against blocks of BLK rows of the other
   side (OWN x BLK: 32 x 64 in float, 8 x 16 in double). Every product is
   one small matmul, tj__attn_mm: 4 rows by 16 columns at a time, kept in
   registers over the whole sum (a broadcast and a fused multiply-add per
   term, no horizontal sums). Score tiles multiply rows of one side by the
   other side's block copied transposed (its columns past the block's end
   zero); the softmax steps then run along each row of scores (exps with
   tj__fexpf in float), and the weighted sums of rows are matmuls again.
   Rows of a dtype the loop does not compute in are converted as copied. */
#if defined(__GNUC__) || defined(__clang__)
#define TJ__RESTRICT __restrict /* (C99's restrict, also in C++) */
#else
#define TJ__RESTRICT
#endif
#define TJ__ATTN_ROUND(m) (((m) + 15) / 16 * 16) /* columns tj__attn_mm computes */
#define TJ__ATTN_ROWS(T, SFX, LOADN, STOREN, NATIVE, EXP, ATTR, OWN, BLK)                                                               \
    static const T tj__attn_zero_##SFX[TJ__ATTN_MAXD > BLK ? TJ__ATTN_MAXD : BLK] = {0}; /* zeros: the unused rows of a 4 */   \
    /* row r (n elements) of input x, converted into buf unless it is of type T */                                                     \
    ATTR static const T *tj__attn_ld_##SFX(const tj__kern *k, int x, int64_t r, int64_t n, T *buf) {                                   \
        if (k->it[x]->dt == NATIVE) return (const T *)k->in[x] + r * n;                                                                \
        LOADN(k->in[x], k->it[x]->dt, r * n, 1, n, buf);                                                                               \
        return buf;                                                                                                                    \
    }                                                                                                                                  \
    /* m rows of x from row r0 (n elements each): pointers in rp[]; and with                                                           \
       tr, the block transposed (element c of row t at tr[c BLK + t], zero                                                             \
       for t >= m) with tp[c] pointing at its rows */                                                                                  \
    ATTR static void tj__attn_tile_##SFX(const tj__kern *k, int x, int64_t r0, int64_t m, int64_t n, T *buf, const T **rp, T *tr,      \
                                         const T **tp) {                                                                               \
        int64_t t, c;                                                                                                                  \
        for (t = 0; t < m; t++) rp[t] = tj__attn_ld_##SFX(k, x, r0 + t, n, buf + t * n);                                               \
        if (!tr) return;                                                                                                               \
        for (c = 0; c < n; c++) {                                                                                                      \
            T *o = tr + c * BLK;                                                                                                       \
            for (t = 0; t < m; t++) o[t] = rp[t][c];                                                                                   \
            for (; t < BLK; t++) o[t] = 0;                                                                                             \
            tp[c] = o;                                                                                                                 \
        }                                                                                                                              \
    }                                                                                                                                  \
    /* C[r][j] = (acc ? C[r][j] : 0) + sum_k A[r][k] B[k][j] for r < 4, j < n:                                                         \
       A's rows a[r] (K long), B's rows b[k] (n long), C's rows c[r]. Columns                                                          \
       j0..j0+15 in 4 x 16 sums the compiler keeps in registers (with                                                                  \
       AVX-512: 4 registers, a broadcast fused multiply-add per term) */                                                               \
    ATTR static void tj__attn_mm16_##SFX(const T *const *a, int64_t K, const T *const *b, int64_t j0, T *const *cr, int acc) {       \
        T s0[16], s1[16], s2[16], s3[16];                                                                                              \
        int64_t kk, t;                                                                                                                 \
        for (t = 0; t < 16; t++) {                                                                                                     \
            s0[t] = acc ? cr[0][j0 + t] : 0, s1[t] = acc ? cr[1][j0 + t] : 0;                                                          \
            s2[t] = acc ? cr[2][j0 + t] : 0, s3[t] = acc ? cr[3][j0 + t] : 0;                                                          \
        }                                                                                                                              \
        for (kk = 0; kk < K; kk++) {                                                                                                   \
            const T *br = b[kk] + j0, x0 = a[0][kk], x1 = a[1][kk], x2 = a[2][kk], x3 = a[3][kk];                                      \
            for (t = 0; t < 16; t++) {                                                                                                 \
                s0[t] += x0 * br[t];                                                                                                   \
                s1[t] += x1 * br[t];                                                                                                   \
                s2[t] += x2 * br[t];                                                                                                   \
                s3[t] += x3 * br[t];                                                                                                   \
            }                                                                                                                          \
        }                                                                                                                              \
        for (t = 0; t < 16; t++) cr[0][j0 + t] = s0[t], cr[1][j0 + t] = s1[t], cr[2][j0 + t] = s2[t], cr[3][j0 + t] = s3[t];           \
    }                                                                                                                                  \
    ATTR static void tj__attn_mm_##SFX(const T *const *a, int64_t K, const T *const *b, int64_t n, T *const *cr, int acc) {          \
        int64_t j0, kk, r, t;                                                                                                          \
        for (j0 = 0; j0 + 16 <= n; j0 += 16) tj__attn_mm16_##SFX(a, K, b, j0, cr, acc);                                                \
        for (r = 0; r < 4; r++) /* the last columns (a row size not a multiple of 16) */                                               \
            for (t = j0; t < n; t++) {                                                                                                 \
                T sum = acc ? cr[r][t] : 0;                                                                                            \
                for (kk = 0; kk < K; kk++) sum += a[r][kk] * b[kk][t];                                                                 \
                cr[r][t] = sum;                                                                                                        \
            }                                                                                                                          \
    }                                                                                                                                  \
    /* y += a x, n long */                                                                                                             \
    ATTR static void tj__attn_axpy_##SFX(T *TJ__RESTRICT y, T a, const T *TJ__RESTRICT x, int64_t n) {                                 \
        int64_t c;                                                                                                                     \
        for (c = 0; c < n; c++) y[c] += a * x[c];                                                                                      \
    }                                                                                                                                  \
    /* The weighted sums of rows, C[r] += sum_t A[r][t] B[t] over the pairs                                                            \
       (r, t) that meet: t in [lo[r], hi[r]). Masked pairs never meet (an inf                                                          \
       or NaN in a row a query does not see changes nothing), while a pair that                                                        \
       meets with weight 0 still multiplies (0 inf is NaN, as in JAX): the                                                             \
       range all 4 rows share goes through tj__attn_mm, the rest row by row.                                                           \
       Rows with use[r] 0 (padding, a row already NaN, a key no query of                                                               \
       the tile sees) are left as they are. */                                                                                         \
    ATTR static void tj__attn_wsum_##SFX(T *const *a, const int64_t *lo, const int64_t *hi, const int *use, const T *const *b, int64_t n, \
                                         T *const *cr) {                                                                               \
        int64_t l = 0, h = -1, t;                                                                                                      \
        const T *ar[4];                                                                                                                \
        T dump[TJ__ATTN_MAXD], *co[4]; /* an unused row's sums go to dump: its weights are 0, but b may hold an inf */                 \
        int g, any = 0;                                                                                                                \
        for (g = 0; g < 4; g++)                                                                                                        \
            if (use[g]) {                                                                                                              \
                l = !any || lo[g] > l ? lo[g] : l, h = !any || hi[g] < h ? hi[g] : h;                                                  \
                any = 1;                                                                                                               \
            }                                                                                                                          \
        if (!any) return;                                                                                                              \
        if (l < h) {                                                                                                                   \
            for (g = 0; g < 4; g++) ar[g] = use[g] ? a[g] + l : tj__attn_zero_##SFX, co[g] = use[g] ? cr[g] : dump;                    \
            tj__attn_mm_##SFX(ar, h - l, b + l, n, co, 1);                                                                             \
        } else h = l; /* no shared range */                                                                                            \
        for (g = 0; g < 4; g++)                                                                                                        \
            if (use[g])                                                                                                                \
                for (t = lo[g]; t < hi[g]; t++)                                                                                        \
                    if (t < l || t >= h) tj__attn_axpy_##SFX(cr[g], a[g][t], b[t], n);                                                 \
    }                                                                                                                                  \
    ATTR static void tj__attn_fwd_##SFX(const void *arg, int part, int nparts) {                                                       \
        const tj__attn *a = (const tj__attn *)arg;                                                                                     \
        const tj__kern *k = a->k;                                                                                                      \
        T qb[OWN * TJ__ATTN_MAXD], kb[BLK * TJ__ATTN_MAXD], kt[TJ__ATTN_MAXD * BLK], vb[BLK * TJ__ATTN_MAXD];                          \
        T acc[OWN * TJ__ATTN_MAXD], s[4 * BLK], dump[TJ__ATTN_MAXD], mx[OWN], sum[OWN], sc = (T)a->scale, lneg = (T)TJ__ATTN_MASKED;   \
        T scs = a->mask ? (T)1 : sc; /* (masked: scaled before, with the masked scores set) */                                         \
        const T *qp[OWN], *kp[BLK], *vp[BLK], *ktp[TJ__ATTN_MAXD];                                                                     \
        int nan[OWN];                                                                                                                  \
        int64_t nblk = (a->tq + OWN - 1) / OWN, units = a->nb * nblk, w, u, g, t, c, j0, m;                                            \
        for (w = units * part / nparts; w < units * (part + 1) / nparts; w++) {                                                        \
            int64_t b = w / nblk, i0 = w % nblk * OWN, nq = a->tq - i0 < OWN ? a->tq - i0 : OWN;                                       \
            int64_t nk = tj__attn_nkeys(a, i0 + nq - 1); /* the keys the block's last query sees */                                    \
            const int32_t *mb = a->mask ? tj__attn_mrow(a, b) : NULL;                                                                  \
            tj__attn_tile_##SFX(k, 0, b * a->tq + i0, nq, a->d, qb, qp, NULL, NULL);                                                   \
            for (u = 0; u < nq; u++) mx[u] = -INFINITY, sum[u] = 0, nan[u] = 0;                                                        \
            for (c = 0; c < nq * a->dv; c++) acc[c] = 0;                                                                               \
            for (j0 = 0; j0 < nk; j0 += m) {                                                                                           \
                m = nk - j0 < BLK ? nk - j0 : BLK;                                                                                     \
                tj__attn_tile_##SFX(k, 1, b / a->grp * a->tk + j0, m, a->d, kb, kp, kt, ktp);                                                   \
                tj__attn_tile_##SFX(k, 2, b / a->grp * a->tk + j0, m, a->dv, vb, vp, NULL, NULL);                                               \
                for (u = 0; u < nq; u += 4) { /* 4 queries at a time */                                                                \
                    const T *ar[4];                                                                                                    \
                    T *sr[4], *orow[4];                                                                                                \
                    int64_t lim[4], lo[4] = {0, 0, 0, 0}, mm = 0;                                                                      \
                    int use[4];                                                                                                        \
                    for (g = 0; g < 4; g++) {                                                                                          \
                        int in = u + g < nq && !nan[u + g];                                                                            \
                        use[g] = in;                                                                                                   \
                        lim[g] = in ? tj__attn_nkeys(a, i0 + u + g) - j0 : 0;                                                          \
                        lim[g] = lim[g] < 0 ? 0 : lim[g] > m ? m : lim[g];                                                             \
                        mm = lim[g] > mm ? lim[g] : mm;                                                                                \
                        ar[g] = in ? qp[u + g] : tj__attn_zero_##SFX;                                                                  \
                        sr[g] = s + g * BLK;                                                                                           \
                        orow[g] = in ? acc + (u + g) * a->dv : dump;                                                                   \
                    }                                                                                                                  \
                    if (!mm) continue;                                                                                                 \
                    tj__attn_mm_##SFX(ar, a->d, ktp, TJ__ATTN_ROUND(mm), sr, 0); /* scores */                                          \
                    for (g = 0; g < 4; g++) { /* the online softmax: p = exp(s - max) in sr, a new max rescales */                    \
                        T *TJ__RESTRICT row = sr[g], bm = -INFINITY, *o = orow[g], lm[16];                                             \
                        int64_t ui = u + g;                                                                                            \
                        int l, bad = 0;                                                                                                \
                        for (l = 0; l < 16; l++) lm[l] = -INFINITY;                                                                    \
                        if (mb && lim[g] > 0) { /* masked scores: JAX's large negative (a NaN there is gone too) */                    \
                            const int32_t *mr = mb + (i0 + ui) * a->mq + j0 * a->mk;                                                   \
                            for (t = 0; t < lim[g]; t++) row[t] = mr[t * a->mk] ? row[t] * sc : lneg;                                  \
                        }                                                                                                              \
                        for (t = 0; t + 16 <= lim[g]; t += 16) /* scaled, and the row's max in 16 lanes (vectorised) */                \
                            for (l = 0; l < 16; l++) {                                                                                 \
                                T x = row[t + l] * scs;                                                                                \
                                row[t + l] = x, bad |= x != x, lm[l] = x > lm[l] ? x : lm[l];                                          \
                            }                                                                                                          \
                        for (; t < lim[g]; t++) {                                                                                      \
                            T x = row[t] * scs;                                                                                        \
                            row[t] = x, bad |= x != x, bm = x > bm ? x : bm;                                                           \
                        }                                                                                                              \
                        for (l = 0; l < 16; l++) bm = lm[l] > bm ? lm[l] : bm;                                                         \
                        if (bad) nan[ui] = 1; /* (lim[g] > 0: a row of this block) */                                                  \
                        if (!lim[g] || nan[ui] || bm == -INFINITY) { /* nothing to add: a NaN score, or all exps 0 */                  \
                            for (t = 0; t < mm; t++) row[t] = 0;                                                                       \
                            continue;                                                                                                  \
                        }                                                                                                              \
                        if (bm > mx[ui]) {                                                                                             \
                            T cr = mx[ui] == -INFINITY ? 0 : EXP(mx[ui] - bm);                                                         \
                            sum[ui] *= cr;                                                                                             \
                            for (c = 0; c < a->dv; c++) o[c] *= cr;                                                                    \
                            mx[ui] = bm;                                                                                               \
                        }                                                                                                              \
                        for (t = 0; t < lim[g]; t++) row[t] = EXP(row[t] - mx[ui]);                                                    \
                        for (t = 0; t < lim[g]; t++) sum[ui] += row[t];                                                                \
                        for (; t < mm; t++) row[t] = 0; /* keys this query does not see */                                             \
                    }                                                                                                                  \
                    for (g = 0; g < 4; g++) use[g] = use[g] && lim[g] > 0 && !nan[u + g];                                              \
                    tj__attn_wsum_##SFX(sr, lo, lim, use, vp, a->dv, orow); /* out += p v over the keys each query sees */             \
                }                                                                                                                      \
            }                                                                                                                          \
            for (u = 0; u < nq; u++) {                                                                                                 \
                T *o = acc + u * a->dv, ls;                                                                                            \
                if (mb && !nan[u] && mx[u] == lneg) { /* every key masked: all scores equal, the mean of v over ALL keys (causal too), as JAX */ \
                    T inv = (T)1 / (T)a->tk;                                                                                           \
                    for (c = 0; c < a->dv; c++) o[c] = 0;                                                                              \
                    for (t = 0; t < a->tk; t++) tj__attn_axpy_##SFX(o, inv, tj__attn_ld_##SFX(k, 2, b / a->grp * a->tk + t, a->dv, dump), a->dv); \
                    ls = (T)INFINITY; /* (the backward: P 0 at every pair, and dv gets its 1 / tk share apart) */                      \
                } else if (nan[u] || sum[u] == 0 || mx[u] == INFINITY) { /* a NaN score, no finite one, or an infinite one: NaN, as softmax */ \
                    for (c = 0; c < a->dv; c++) o[c] = (T)NAN;                                                                         \
                    ls = (T)NAN;                                                                                                       \
                } else {                                                                                                               \
                    T inv = 1 / sum[u];                                                                                                \
                    for (c = 0; c < a->dv; c++) o[c] *= inv;                                                                           \
                    ls = mx[u] + (T)log(sum[u]);                                                                                       \
                }                                                                                                                      \
                STOREN(k->pout[0], k->it[0]->dt, (b * a->tq + i0 + u) * a->dv, 1, a->dv, o);                                           \
                STOREN(k->pout[1], k->it[0]->dt == TJ_F64 ? TJ_F64 : TJ_F32, b * a->tq + i0 + u, 1, 1, &ls);                            \
            }                                                                                                                          \
        }                                                                                                                              \
    }                                                                                                                                  \
    /* D_i = d_out_i . out_i */                                                                                                        \
    ATTR static void tj__attn_dl_##SFX(const void *arg, int part, int nparts) {                                                        \
        const tj__attn *a = (const tj__attn *)arg;                                                                                     \
        T ob[TJ__ATTN_MAXD], gb[TJ__ATTN_MAXD];                                                                                       \
        int64_t rows = a->nb * a->tq, r, c;                                                                                            \
        for (r = rows * part / nparts; r < rows * (part + 1) / nparts; r++) {                                                          \
            const T *g = tj__attn_ld_##SFX(a->k, 5, r, a->dv, gb), *o = tj__attn_ld_##SFX(a->k, 3, r, a->dv, ob);                      \
            T dl = 0;                                                                                                                  \
            for (c = 0; c < a->dv; c++) dl += g[c] * o[c];                                                                             \
            ((T *)a->dl)[r] = dl;                                                                                                      \
        }                                                                                                                              \
    }                                                                                                                                  \
    /* dk_j and dv_j: a block of keys against the blocks of queries that                                                               \
       see them: P = exp(s - lse) and dP = d_out . v as tiles, dS = P (dP - D),                                                        \
       then dv += P d_out and dk += dS q */                                                                                            \
    ATTR static void tj__attn_dkv_##SFX(const void *arg, int part, int nparts) {                                                      \
        const tj__attn *a = (const tj__attn *)arg;                                                                                     \
        const tj__kern *k = a->k;                                                                                                      \
        T kb[OWN * TJ__ATTN_MAXD], vb[OWN * TJ__ATTN_MAXD], dk[OWN * TJ__ATTN_MAXD], dv[OWN * TJ__ATTN_MAXD];                          \
        T qb[BLK * TJ__ATTN_MAXD], gb[BLK * TJ__ATTN_MAXD], qt[TJ__ATTN_MAXD * BLK], gt[TJ__ATTN_MAXD * BLK];                         \
        T s[4 * BLK], dp[4 * BLK], lse[BLK], dump[TJ__ATTN_MAXD], sc = (T)a->scale, dsk[OWN * BLK], dst[BLK * OWN], *dq = NULL;       \
        const T *kp[OWN], *vp[OWN], *qp[BLK], *gp[BLK], *qtp[TJ__ATTN_MAXD], *gtp[TJ__ATTN_MAXD], *dl = (const T *)a->dl;             \
        int64_t nblk = (a->tk + OWN - 1) / OWN, units = a->fuse ? a->nbk : a->nbk * nblk, w, u, g, t, c, i0, m, jb, gi;                \
        for (w = units * part / nparts; w < units * (part + 1) / nparts; w++)                                                          \
            for (jb = a->fuse ? 0 : w % nblk; jb < (a->fuse ? nblk : w % nblk + 1); jb++) {                                            \
            /* key row bk of k and v: the queries of q's batch rows bk grp .. bk grp + grp - 1 */                                      \
            int64_t bk = a->fuse ? w : w / nblk, j0 = jb * OWN, nk = a->tk - j0 < OWN ? a->tk - j0 : OWN;                              \
            T *dqg = !a->fuse ? NULL : a->dqs ? (T *)a->dqs + bk * a->grp * a->tq * a->d : (T *)k->pout[0] + bk * a->grp * a->tq * a->d; \
            if (a->fuse && !jb) /* dq of those batch rows: summed here over the key blocks, in order */                                \
                for (c = 0; c < a->grp * a->tq * a->d; c++) dqg[c] = 0;                                                                \
            tj__attn_tile_##SFX(k, 1, bk * a->tk + j0, nk, a->d, kb, kp, NULL, NULL);                                                  \
            tj__attn_tile_##SFX(k, 2, bk * a->tk + j0, nk, a->dv, vb, vp, NULL, NULL);                                                 \
            for (c = 0; c < nk * a->d; c++) dk[c] = 0;                                                                                 \
            for (c = 0; c < nk * a->dv; c++) dv[c] = 0;                                                                                \
            for (gi = 0; gi < a->grp; gi++) {                                                                                          \
            int64_t b = bk * a->grp + gi;                                                                                              \
            const int32_t *mb = a->mask ? tj__attn_mrow(a, b) : NULL;                                                                  \
            dq = dqg ? dqg + gi * a->tq * a->d : NULL;                                                                                 \
            for (i0 = a->causal ? j0 : 0; i0 < a->tq; i0 += m) { /* (causal: no query before j0 sees the block) */                     \
                int64_t q0 = b * a->tq + i0;                                                                                           \
                m = a->tq - i0 < BLK ? a->tq - i0 : BLK;                                                                               \
                tj__attn_tile_##SFX(k, 0, q0, m, a->d, qb, qp, qt, qtp);                                                               \
                tj__attn_tile_##SFX(k, 5, q0, m, a->dv, gb, gp, gt, gtp);                                                              \
                LOADN(k->in[4], k->it[4]->dt, q0, 1, m, lse);                                                                          \
                for (u = 0; u < nk; u += 4) { /* 4 keys at a time */                                                                   \
                    const T *ak[4], *av[4];                                                                                            \
                    T *sr[4], *dr[4], *dkr[4], *dvr[4];                                                                                \
                    int64_t t0[4], hi[4] = {m, m, m, m}, any = 0;                                                                      \
                    int use[4];                                                                                                        \
                    for (g = 0; g < 4; g++) {                                                                                          \
                        int in = u + g < nk;                                                                                           \
                        t0[g] = !in ? m : a->causal && j0 + u + g > i0 ? j0 + u + g - i0 : 0; /* the first query that sees the key */  \
                        any |= use[g] = t0[g] < m;                                                                                     \
                        ak[g] = in ? kp[u + g] : tj__attn_zero_##SFX;                                                                  \
                        av[g] = in ? vp[u + g] : tj__attn_zero_##SFX;                                                                  \
                        sr[g] = s + g * BLK, dr[g] = in ? dsk + (u + g) * BLK : dp + g * BLK; /* (dS kept for dq) */                   \
                        dkr[g] = in ? dk + (u + g) * a->d : dump;                                                                      \
                        dvr[g] = in ? dv + (u + g) * a->dv : dump;                                                                     \
                    }                                                                                                                  \
                    if (!any) continue;                                                                                                \
                    tj__attn_mm_##SFX(ak, a->d, qtp, TJ__ATTN_ROUND(m), sr, 0);  /* s = k . q */                                       \
                    tj__attn_mm_##SFX(av, a->dv, gtp, TJ__ATTN_ROUND(m), dr, 0); /* dP = v . d_out */                                  \
                    for (g = 0; g < 4; g++) {                                                                                          \
                        T *TJ__RESTRICT sg = sr[g], *TJ__RESTRICT dg = dr[g];                                                          \
                        const T *TJ__RESTRICT dlq = dl + q0;                                                                           \
                        for (t = 0; t < t0[g] && t < m; t++) sg[t] = 0, dg[t] = 0;                                                     \
                        for (t = t0[g]; t < m; t++) { /* (a loop the compiler vectorises: no branch) */                                \
                            T p = EXP(sc * sg[t] - lse[t]);                                                                            \
                            dg[t] = p * (dg[t] - dlq[t]);                                                                              \
                            sg[t] = p;                                                                                                 \
                        }                                                                                                              \
                        if (mb && u + g < nk) { /* a masked pair: P 0 and no gradient through its score (JAX's where) */               \
                            const int32_t *mc = mb + i0 * a->mq + (j0 + u + g) * a->mk;                                                \
                            for (t = t0[g]; t < m; t++)                                                                                \
                                if (!mc[t * a->mq]) sg[t] = 0, dg[t] = 0;                                                              \
                        }                                                                                                              \
                    }                                                                                                                  \
                    tj__attn_wsum_##SFX(sr, t0, hi, use, gp, a->dv, dvr); /* dv += P d_out over the queries that see each key */       \
                    tj__attn_wsum_##SFX(dr, t0, hi, use, qp, a->d, dkr);  /* dk += dS q */                                             \
                }                                                                                                                      \
                for (t = 0; a->fuse && t < m; t += 4) { /* dq += dS k over the block's keys each query sees, 4 queries at a time */    \
                    T *dsr[4], *dqr[4];                                                                                                \
                    int64_t lo[4] = {0, 0, 0, 0}, vis[4];                                                                              \
                    int use[4], any = 0;                                                                                               \
                    for (g = 0; g < 4; g++) {                                                                                          \
                        int64_t e = a->causal ? i0 + t + g - j0 + 1 : nk; /* keys [0, e) of the block: seen by query i0 + t + g */    \
                        vis[g] = t + g >= m || e < 0 ? 0 : e > nk ? nk : e;                                                            \
                        any |= use[g] = vis[g] > 0;                                                                                    \
                        dsr[g] = use[g] ? dst + g * OWN : (T *)tj__attn_zero_##SFX; /* (an unused row is only read) */                \
                        dqr[g] = use[g] ? dq + (i0 + t + g) * a->d : dump;                                                             \
                        for (u = 0; u < vis[g]; u++) dsr[g][u] = dsk[u * BLK + t + g]; /* dS transposed */                             \
                    }                                                                                                                  \
                    if (any) tj__attn_wsum_##SFX(dsr, lo, vis, use, kp, a->d, dqr);                                                    \
                }                                                                                                                      \
            }                                                                                                                          \
            }                                                                                                                          \
            if (a->mask) { /* the fully masked query rows (lse +inf): P = 1 / tk at every key, so dv += (their d_out summed) / tk */   \
                T gs[TJ__ATTN_MAXD];                                                                                                   \
                int any = 0;                                                                                                           \
                for (c = 0; c < a->dv; c++) gs[c] = 0;                                                                                 \
                for (gi = 0; gi < a->grp; gi++)                                                                                        \
                    for (i0 = 0; i0 < a->tq; i0 += m) {                                                                                \
                        int64_t q0 = (bk * a->grp + gi) * a->tq + i0;                                                                  \
                        m = a->tq - i0 < BLK ? a->tq - i0 : BLK;                                                                       \
                        LOADN(k->in[4], k->it[4]->dt, q0, 1, m, lse);                                                                  \
                        for (t = 0; t < m; t++)                                                                                        \
                            if (lse[t] == (T)INFINITY) tj__attn_axpy_##SFX(gs, 1, tj__attn_ld_##SFX(k, 5, q0 + t, a->dv, dump), a->dv), any = 1; \
                    }                                                                                                                  \
                for (u = 0; any && u < nk; u++) tj__attn_axpy_##SFX(dv + u * a->dv, (T)1 / (T)a->tk, gs, a->dv);                       \
            }                                                                                                                          \
            for (u = 0; u < nk; u++) {                                                                                                 \
                for (c = 0; c < a->d; c++) dk[u * a->d + c] *= sc;                                                                     \
                STOREN(k->pout[1], k->it[1]->dt, (bk * a->tk + j0 + u) * a->d, 1, a->d, dk + u * a->d);                                \
                STOREN(k->pout[2], k->it[2]->dt, (bk * a->tk + j0 + u) * a->dv, 1, a->dv, dv + u * a->dv);                             \
            }                                                                                                                          \
            if (a->fuse && jb == nblk - 1) { /* the batch rows' dq is complete */                                                      \
                for (c = 0; c < a->grp * a->tq * a->d; c++) dqg[c] *= sc;                                                              \
                if (a->dqs) STOREN(k->pout[0], k->it[0]->dt, bk * a->grp * a->tq * a->d, 1, a->grp * a->tq * a->d, dqg);               \
            }                                                                                                                          \
        }                                                                                                                              \
    }                                                                                                                                  \
    /* dq_i: a block of queries against the blocks of keys they see:                                                                   \
       dq += dS k */                                                                                                                   \
    ATTR static void tj__attn_dq_##SFX(const void *arg, int part, int nparts) {                                                        \
        const tj__attn *a = (const tj__attn *)arg;                                                                                     \
        const tj__kern *k = a->k;                                                                                                      \
        T qb[OWN * TJ__ATTN_MAXD], gb[OWN * TJ__ATTN_MAXD], dq[OWN * TJ__ATTN_MAXD], kb[BLK * TJ__ATTN_MAXD], vb[BLK * TJ__ATTN_MAXD];  \
        T kt[TJ__ATTN_MAXD * BLK], vt[TJ__ATTN_MAXD * BLK], s[4 * BLK], dp[4 * BLK], lse[OWN], dump[TJ__ATTN_MAXD], sc = (T)a->scale;  \
        const T *qp[OWN], *gp[OWN], *kp[BLK], *vp[BLK], *ktp[TJ__ATTN_MAXD], *vtp[TJ__ATTN_MAXD], *dl = (const T *)a->dl;             \
        int64_t nblk = (a->tq + OWN - 1) / OWN, units = a->nb * nblk, w, u, g, t, c, j0, m;                                            \
        for (w = units * part / nparts; w < units * (part + 1) / nparts; w++) {                                                        \
            int64_t b = w / nblk, i0 = w % nblk * OWN, nq = a->tq - i0 < OWN ? a->tq - i0 : OWN;                                       \
            int64_t nk = tj__attn_nkeys(a, i0 + nq - 1), q0 = b * a->tq + i0;                                                          \
            const int32_t *mb = a->mask ? tj__attn_mrow(a, b) : NULL;                                                                  \
            tj__attn_tile_##SFX(k, 0, q0, nq, a->d, qb, qp, NULL, NULL);                                                               \
            tj__attn_tile_##SFX(k, 5, q0, nq, a->dv, gb, gp, NULL, NULL);                                                              \
            LOADN(k->in[4], k->it[4]->dt, q0, 1, nq, lse);                                                                             \
            for (c = 0; c < nq * a->d; c++) dq[c] = 0;                                                                                 \
            for (j0 = 0; j0 < nk; j0 += m) {                                                                                           \
                m = nk - j0 < BLK ? nk - j0 : BLK;                                                                                     \
                tj__attn_tile_##SFX(k, 1, b / a->grp * a->tk + j0, m, a->d, kb, kp, kt, ktp);                                                   \
                tj__attn_tile_##SFX(k, 2, b / a->grp * a->tk + j0, m, a->dv, vb, vp, vt, vtp);                                                  \
                for (u = 0; u < nq; u += 4) { /* 4 queries at a time */                                                                \
                    const T *aq[4], *ag[4];                                                                                            \
                    T *sr[4], *dr[4], *dqr[4];                                                                                         \
                    int64_t lim[4], lo[4] = {0, 0, 0, 0}, mm = 0;                                                                      \
                    int use[4];                                                                                                        \
                    for (g = 0; g < 4; g++) {                                                                                          \
                        int in = u + g < nq;                                                                                           \
                        lim[g] = in ? tj__attn_nkeys(a, i0 + u + g) - j0 : 0;                                                          \
                        lim[g] = lim[g] < 0 ? 0 : lim[g] > m ? m : lim[g];                                                             \
                        mm = lim[g] > mm ? lim[g] : mm;                                                                                \
                        aq[g] = in ? qp[u + g] : tj__attn_zero_##SFX;                                                                  \
                        ag[g] = in ? gp[u + g] : tj__attn_zero_##SFX;                                                                  \
                        sr[g] = s + g * BLK, dr[g] = dp + g * BLK;                                                                     \
                        dqr[g] = in ? dq + (u + g) * a->d : dump;                                                                      \
                        use[g] = lim[g] > 0;                                                                                           \
                    }                                                                                                                  \
                    if (!mm) continue;                                                                                                 \
                    tj__attn_mm_##SFX(aq, a->d, ktp, TJ__ATTN_ROUND(mm), sr, 0);  /* s = q . k */                                      \
                    tj__attn_mm_##SFX(ag, a->dv, vtp, TJ__ATTN_ROUND(mm), dr, 0); /* dP = d_out . v */                                 \
                    for (g = 0; g < 4; g++) { /* dS = P (dP - D) */                                                                    \
                        T *TJ__RESTRICT dg = dr[g], lq = lim[g] ? lse[u + g] : 0, dq0 = lim[g] ? dl[q0 + u + g] : 0;                  \
                        const T *TJ__RESTRICT sg = sr[g];                                                                              \
                        for (t = 0; t < lim[g]; t++) dg[t] = EXP(sc * sg[t] - lq) * (dg[t] - dq0);                                     \
                        for (; t < mm; t++) dg[t] = 0;                                                                                 \
                        if (mb && lim[g] > 0) { /* masked pairs: no gradient */                                                        \
                            const int32_t *mr = mb + (i0 + u + g) * a->mq + j0 * a->mk;                                                \
                            for (t = 0; t < lim[g]; t++)                                                                               \
                                if (!mr[t * a->mk]) dg[t] = 0;                                                                         \
                        }                                                                                                              \
                    }                                                                                                                  \
                    tj__attn_wsum_##SFX(dr, lo, lim, use, kp, a->d, dqr); /* dq += dS k over the keys each query sees */               \
                }                                                                                                                      \
            }                                                                                                                          \
            for (u = 0; u < nq; u++) {                                                                                                 \
                for (c = 0; c < a->d; c++) dq[u * a->d + c] *= sc;                                                                     \
                STOREN(k->pout[0], k->it[0]->dt, (q0 + u) * a->d, 1, a->d, dq + u * a->d);                                             \
            }                                                                                                                          \
        }                                                                                                                              \
    }
TJ__ATTN_ROWS(float, f, tj__load_nf, tj__store_nf, TJ_F32, tj__fexpf, , 32, 64)
TJ__ATTN_ROWS(double, d, tj__load_n, tj__store_n, TJ_F64, exp, , 8, 16) /* (f64: tests; small tiles, a small stack) */
#if TJ__X86
TJ__ATTN_ROWS(float, f512, tj__load_nf, tj__store_nf, TJ_F32, tj__fexpf, __attribute__((target("avx512f"))), 32, 64)
#endif
#undef TJ__ATTN_ROWS
/* the three variants of a pass, picked by dtype and CPU */
typedef void (*tj__attn_pass)(const void *arg, int part, int nparts);
static tj__attn_pass tj__attn_pick(const tj__kern *k, tj__attn_pass d, tj__attn_pass f, tj__attn_pass f512) {
    (void)f512;
    if (k->it[0]->dt == TJ_F64) return d;
#if TJ__X86
    if (__builtin_cpu_supports("avx512f")) return f512;
#endif
    return f;
}
#if TJ__X86
#define TJ__ATTN_PICK(k, pass) tj__attn_pick(k, pass##_d, pass##_f, pass##_f512)
#else
#define TJ__ATTN_PICK(k, pass) tj__attn_pick(k, pass##_d, pass##_f, pass##_f)
#endif
static int tj__attn_parts(const tj__kern *k, int64_t rows, int64_t per_row) {
    int np = tj__nparts(rows * per_row, k->nthreads);
    return np < rows ? np : (int)rows;
}
static void tj__k_attention(tj__kern *k) {
    tj__attn a;
    tj__attn_init(k, &a);
    tj__parallel(tj__attn_parts(k, a.nb * a.tq, a.tk * (a.d + a.dv)), TJ__ATTN_PICK(k, tj__attn_fwd), &a);
}
/* The backward: D, then one pass by key blocks for dk and dv that also
   sums dq (each dS tile is made once) when whole batch rows keep the
   threads about as busy: a thread then takes a batch row's key blocks in
   order, as dq's sums must be; else (few batch rows) the key blocks of a
   row are shared out and a second pass by query blocks makes dS again for
   dq. Both sum each dq element over the keys in order, one term at a
   time: the same bits either way. */
static int tj__attn_passes; /* test hook: 1 or 2 passes whatever the rows, 0 as above */
static void tj__k_attention_grad(tj__kern *k) {
    tj__attn a;
    int np;
    tj__attn_init(k, &a);
    tj__parallel(tj__attn_parts(k, a.nb * a.tq, a.dv), TJ__ATTN_PICK(k, tj__attn_dl), &a);
    np = tj__attn_parts(k, a.nbk * a.tk, a.grp * a.tq * (a.d + a.dv));
    /* one pass does 5 of the two passes' 7 products: worth rows of uneven count per thread while ceil(nb / np) 5 <= (nb / np) 7 */
    a.fuse = tj__attn_passes ? tj__attn_passes == 1 : 5 * ((a.nbk + np - 1) / np) * np <= 7 * a.nbk;
    tj__parallel(a.fuse && a.nbk < np ? (int)a.nbk : np, TJ__ATTN_PICK(k, tj__attn_dkv), &a);
    if (!a.fuse) tj__parallel(tj__attn_parts(k, a.nb * a.tq, a.tk * (a.d + a.dv)), TJ__ATTN_PICK(k, tj__attn_dq), &a);
}
/* the backward's workspace: D, one per query row (local shapes), and for a
   dq not of the loop's type (bf16) its f32 sums */
static int64_t tj__attention_scratch(const tj_node *n) {
    const tj__type *q = &n->in[0]->lt;
    int64_t rows = tj__numel(q) / q->dim[q->rank - 1];
    return tj__align(rows * (q->dt == TJ_F64 ? 8 : 4)) + (q->dt == TJ_F32 || q->dt == TJ_F64 ? 0 : tj__align(tj__numel(q) * 4));
}
/* multiply-adds of the (query, key) pairs each pass visits (causal: about half) */
static double tj__flops_attention(const tj_node *n) {
    const tj__type *q = &n->in[0]->t, *v = &n->in[2]->t;
    double tq = (double)q->dim[q->rank - 2], tk = (double)v->dim[v->rank - 2], d = (double)q->dim[q->rank - 1], dv = (double)v->dim[v->rank - 1];
    double nb = (double)tj__numel(q) / (tq * d), pairs = nb * tq * tk;
    if (n->a.causal) pairs = nb * (tq <= tk ? tq * (tq + 1) / 2 : tk * (tk + 1) / 2 + (tq - tk) * tk);
    /* forward: s and p v; backward: s, dp, dv, dk by keys, then s, dp, dq by queries (the
       CPU's one-pass form makes s and dp once: 3 d + 2 dv; counted here as the two passes) */
    return 2.0 * pairs * (n->op == TJ__OP_ATTENTION ? d + dv : 4 * d + 3 * dv);
}

/* ---- identities: stop_gradient, name, copy; and parameters ---- */
TJDEF tj_v tj_stop_gradient_at(const char *f, int l, tj_v x) { return x ? tj__node(x->g, TJ__OP_STOP_GRADIENT, &x->t, 1, &x, NULL, f, l) : NULL; }
TJDEF tj_v tj_checkpoint_name_at(const char *f, int l, tj_v x, const char *name) {
    tj_node *n;
    if (!x) return NULL;
    if (!name || !*name) {
        tj__err(x->g->ctx, TJ_ERR_ARG, f, l, "checkpoint_name: empty name");
        return NULL;
    }
    if (strpbrk(name, " ,\t\n")) { /* policies take space- or comma-separated lists: no list could name it */
        tj__err(x->g->ctx, TJ_ERR_ARG, f, l, "checkpoint_name: name \"%s\" has a space or comma, so no policy's list can name it", name);
        return NULL;
    }
    n = tj__node(x->g, TJ__OP_NAME, &x->t, 1, &x, NULL, f, l);
    if (n && !(n->name = tj__strdup(name))) return NULL;
    return n;
}
static tj_v tj__copy(const char *f, int l, tj_v x) { return x ? tj__node(x->g, TJ__OP_COPY, &x->t, 1, &x, NULL, f, l) : NULL; }
static void tj__k_none(tj__kern *k) { (void)k; }


/* ---- collective kernels ----
   The kernels that move data between devices (all_gather, psum, pmax,
   reduce_scatter, all_to_all, ppermute) live with the transports in [11];
   here are the ones that only look at the device's own rank. */
static void tj__k_shard_slice(tj__kern *k) {
    unsigned m = k->n->a.mesh;
    int ax = tj__axis_index(&k->ot, k->n->a.axis), me = tj__mesh_rank(k->ctx, k->dev, m);
    int64_t ist[TJ_MAXDIM] = {0};
    tj__strides(k->it[0], ist);
    tj__copy_region(k->in[0], k->it[0], me * k->ot.dim[ax] * ist[ax], k->out, &k->ot, 0, k->ot.dim, k->nthreads);
}
static void tj__k_axis_index(tj__kern *k) { *(int32_t *)k->out = tj__mesh_rank(k->ctx, k->dev, k->n->a.mesh); }
/* A collective's VJP. Outside shard_map: bring the cotangent back to the
   input's sharding (tj__fit reshards), which makes all-gather's transpose
   a reduce-scatter (or a free slice) and psum's a plain broadcast. Inside:
   the explicit transposes (psum <-> pvary, all_gather <-> psum_scatter,
   all_to_all with its axes swapped, ppermute inverted). With checking off
   psum transposes to psum, as in JAX. */
static tj_status tj__vjp_coll(tj_node *n, tj_v g, tj_v *gin) {
    unsigned m = n->a.mesh;
    signed char inv[TJ_MAXDEV];
    char why[256];
    int r;
    if (!n->g->manual) {
        gin[0] = g;
        return TJ_OK;
    }
    if (n->op == TJ__OP_PVARY && n->name && strchr(n->name, ' ')) /* a pvary with its own reason (a shard_map out_spec) */
        snprintf(why, sizeof why, "transpose of the pvary at %s:%d: %s", tj__base(n->file), n->line, n->name);
    else if (n->op == TJ__OP_PVARY)
        snprintf(why, sizeof why, "transpose of the pvary that '%s' at %s:%d needed to mix %s values", n->name ? n->name : "?", tj__base(n->file), n->line,
                 n->in[0]->t.vary ? "less and more varying" : "invariant and varying");
    else
        snprintf(why, sizeof why, "transpose of %s at %s:%d", tj__opname(n->op), tj__base(n->file), n->line);
    switch (n->op) {
    case TJ__OP_PSUM: gin[0] = tj__manual_coll(n->g->check ? TJ__OP_PVARY : TJ__OP_PSUM, g, m, -1, -1, NULL, why, n->file, n->line); break;
    case TJ__OP_PVARY: gin[0] = tj__manual_coll(TJ__OP_PSUM, g, m, -1, -1, NULL, why, n->file, n->line); break;
    case TJ__OP_ALL_GATHER: gin[0] = tj__manual_coll(TJ__OP_REDUCE_SCATTER, g, m, n->a.axis, -1, NULL, why, n->file, n->line); break;
    case TJ__OP_REDUCE_SCATTER: gin[0] = tj__manual_coll(TJ__OP_ALL_GATHER, g, m, n->a.axis, -1, NULL, why, n->file, n->line); break;
    case TJ__OP_ALL_TO_ALL: gin[0] = tj__manual_coll(TJ__OP_ALL_TO_ALL, g, m, n->a.axis2, n->a.axis, NULL, why, n->file, n->line); break;
    case TJ__OP_PPERMUTE:
        memset(inv, -1, sizeof inv);
        for (r = 0; r < TJ_MAXDEV; r++) if (n->a.perm[r] >= 0) inv[(int)n->a.perm[r]] = (signed char)r;
        gin[0] = tj__manual_coll(TJ__OP_PPERMUTE, g, m, -1, -1, inv, why, n->file, n->line);
        break;
    case TJ__OP_PMAX: /* the gradient goes to the devices that hold the maximum (unchecked,
                         each device holds a share of the cotangent: add them up first) */
        if (!n->g->check) g = tj__manual_coll(TJ__OP_PSUM, g, m, -1, -1, NULL, why, n->file, n->line);
        gin[0] = tj_mul_at(n->file, n->line, g, tj_cast_at(n->file, n->line, tj_eq_at(n->file, n->line, n->in[0], n), g ? g->t.dt : TJ_F32));
        break;
    default:
        tj__err(n->g->ctx, TJ_ERR_UNSUPPORTED, n->file, n->line, "vjp: %s has no transpose inside shard_map", tj__opname(n->op));
        return TJ_ERR_UNSUPPORTED;
    }
    return gin[0] ? TJ_OK : tj_status_of(n->g->ctx);
}
/* global row-major index of local element i on device dev (for random and
   arange: the values do not depend on the sharding) */
static int64_t tj__global_index(const tj__kern *k, int64_t i) {
    const tj__type *gt = &k->n->t;
    int64_t gi = 0, gs = 1, li = i;
    int d;
    for (d = gt->rank - 1; d >= 0; d--) {
        int64_t ld = k->ot.dim[d], c = li % ld;
        li /= ld;
        if (gt->sh[d]) c += (int64_t)tj__mesh_rank(k->ctx, k->dev, gt->sh[d]) * ld;
        gi += c * gs;
        gs *= gt->dim[d];
    }
    return gi;
}

/* ---- custom ops: your kernels, registered by name ----
   A registered op is a multi-output node (its outputs are PROJ nodes, as
   for scan). Its shape rule runs while tracing; its replication rule gives
   the vary sets of its outputs inside shard_map; its kernel runs on each
   device's block; its VJP rule, if any, is a traced function. Outside
   shard_map the sharding rule cannot know what the kernel does with a
   block, so its inputs are first made whole (replicated). */
struct tj__opreg {
    tj_op_def d;
    char *name;
};
static void tj__free_ops(tj_ctx *c) {
    int i;
    for (i = 0; i < c->nops; i++) TJ_FREE(c->ops[i].name);
    TJ_FREE(c->ops);
    TJ_FREE(c->cvjps);
}
TJDEF tj_status tj_register_op(tj_ctx *c, const tj_op_def *d) {
    int i;
    if (!c) return TJ_ERR_ARG;
    if (!d || !d->name || !*d->name || d->nout < 1 || d->nout > 16) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "register_op: need a name and 1..16 outputs (got %s, %d)", d && d->name ? d->name : "no name", d ? d->nout : 0);
        return TJ_ERR_ARG;
    }
    for (i = 0; i < c->nops; i++)
        if (!strcmp(c->ops[i].name, d->name)) break; /* registering again replaces */
    if (i == c->nops) {
        if (c->nops == c->capops) {
            int nc = c->capops ? 2 * c->capops : 8;
            struct tj__opreg *no = (struct tj__opreg *)TJ_REALLOC(c->ops, sizeof *no * (size_t)nc);
            if (!no) {
                tj__err(c, TJ_ERR_OOM, NULL, 0, "register_op '%s': out of memory", d->name);
                return TJ_ERR_OOM;
            }
            c->ops = no;
            c->capops = nc;
        }
        if (!(c->ops[i].name = tj__strdup(d->name))) {
            tj__err(c, TJ_ERR_OOM, NULL, 0, "register_op '%s': out of memory", d->name);
            return TJ_ERR_OOM;
        }
        c->nops++;
    }
    c->ops[i].d = *d;
    c->ops[i].d.name = c->ops[i].name;
    return TJ_OK;
}
TJDEF int tj_rep_same(const unsigned *in_vary, int nin, unsigned *out_vary, int nout, void *user) {
    unsigned u = 0;
    int i;
    (void)user;
    for (i = 0; i < nin; i++) u |= in_vary[i];
    for (i = 0; i < nout; i++) out_vary[i] = u;
    return 0;
}
static void tj__to_buf(tj_ctx *c, const tj__type *t, void *data, tj_buf *b) {
    int i;
    memset(b, 0, sizeof *b);
    b->data = data;
    b->dtype = t->dt;
    b->rank = t->rank;
    for (i = 0; i < t->rank; i++) {
        b->dim[i] = t->dim[i];
        b->axis[i] = tj__name(c, t->ax[i]);
    }
}
TJDEF tj_status tj_custom_at(const char *f, int l, const char *name, int nin, const tj_v *in, tj_v *out) {
    tj_ctx *c;
    tj_graph *g;
    const tj_op_def *d = NULL;
    tj_node *x[16], *n;
    tj_buf ib[16];
    tj__type t[16];
    unsigned iv[16], ov[16];
    int i, j, k = -1;
    if (nin < 1 || nin > 16 || !in || !out) {
        tj__err(nin >= 1 && in && in[0] ? tj__vctx(in[0]) : tj__tracing_ctx(), TJ_ERR_ARG, f, l, "custom '%s': %s (%d inputs)", name ? name : "(null)",
                !out ? "argument out is NULL" : !in ? "argument in is NULL" : "1..16 inputs", nin);
        return TJ_ERR_ARG;
    }
    if (!(g = tj__cur(tj__inner(nin, in, name ? name : "custom", f, l)))) return tj__inner_status(nin, in);
    c = g->ctx;
    for (i = 0; name && i < c->nops; i++) if (!strcmp(c->ops[i].name, name)) k = i;
    if (k < 0) {
        tj__err(c, TJ_ERR_ARG, f, l, "custom: no op named '%s' is registered (tj_register_op)", name ? name : "(null)");
        return TJ_ERR_ARG;
    }
    d = &c->ops[k].d;
    for (i = 0; i < d->nout; i++) out[i] = NULL;
    for (i = 0; i < nin; i++) {
        uint8_t none[TJ_MAXDIM] = {0};
        x[i] = tj__capture(g, in[i]);
        if (x[i] && !g->manual && (x[i]->t.partial || tj__sh_used(x[i]->t.sh, x[i]->t.rank))) x[i] = tj__reshard(x[i], none, d->name, f, l);
        if (!x[i]) return c->status ? c->status : TJ_ERR_ARG;
        tj__to_buf(c, &x[i]->t, NULL, &ib[i]);
        iv[i] = x[i]->t.vary;
    }
    /* the shape rule */
    for (j = 0; j < d->nout; j++) {
        char shape[512];
        tj_dtype dt = x[0]->t.dt;
        int rej = 0;
        shape[0] = shape[sizeof shape - 1] = 0;
        if (d->shape) {
            rej = d->shape(ib, nin, j, shape, sizeof shape, &dt, d->user);
            if (shape[sizeof shape - 1]) { /* the rule filled the buffer without ending the string */
                shape[sizeof shape - 1] = 0;
                tj__err(c, TJ_ERR_ARG, f, l, "custom op '%s': its shape rule wrote a %s of %d or more characters for output %d (at most %d): \"%.40s...\"",
                        d->name, rej ? "reason" : "shape", (int)sizeof shape, j, (int)sizeof shape - 1, shape);
                return TJ_ERR_ARG;
            }
        }
        if (!d->shape) t[j] = x[0]->t;
        else if (rej) {
            tj__err(c, TJ_ERR_SHAPE, f, l, "custom op '%s': its shape rule rejects the inputs: %s", d->name, shape[0] ? shape : "(no reason given)");
            return TJ_ERR_SHAPE;
        } else if (tj__parse_shape(c, shape, dt, &t[j], 0, d->name, f, l))
            return c->status;
        memset(t[j].sh, 0, sizeof t[j].sh);
        t[j].partial = 0;
        t[j].vary = 0;
    }
    /* the replication rule */
    if (g->manual && g->check) {
        if (!d->replication) {
            tj__err(c, TJ_ERR_UNSUPPORTED, f, l,
                    "custom op '%s' has no replication rule, so a checked shard_map cannot know which mesh axes its outputs vary over: register one "
                    "(tj_op_def.replication; tj_rep_same if every output varies like the union of the inputs), or call tj_shard_map with check off",
                    d->name);
            return TJ_ERR_UNSUPPORTED;
        }
        for (j = 0; j < d->nout; j++) ov[j] = 0;
        if (d->replication(iv, nin, ov, d->nout, d->user)) {
            tj__err(c, TJ_ERR_ARG, f, l, "custom op '%s': its replication rule rejects the inputs' vary sets", d->name);
            return TJ_ERR_ARG;
        }
        for (j = 0; j < d->nout; j++) {
            if (ov[j] >> c->nmesh) {
                tj__err(c, TJ_ERR_ARG, f, l, "custom op '%s': its replication rule names mesh axis bits beyond the %d of the mesh", d->name, c->nmesh);
                return TJ_ERR_ARG;
            }
            t[j].vary = (uint8_t)ov[j];
        }
    }
    {
        tj__type dummy;
        memset(&dummy, 0, sizeof dummy);
        dummy.dt = TJ_I32;
        if (!(n = tj__node(g, TJ__OP_CUSTOM, &dummy, nin, x, NULL, f, l))) return c->status ? c->status : TJ_ERR_OOM;
    }
    n->a.reg = k;
    for (j = 0; j < d->nout; j++) {
        if (tj__add_proj(n, &t[j], TJ_SPACE_DEVICE)) return c->status;
        out[j] = n->proj[j];
    }
    return TJ_OK;
}
static void tj__custom_bufs(tj__kern *k, tj_buf *ib, tj_buf *ob) {
    int i;
    for (i = 0; i < k->nin && i < 16; i++) tj__to_buf(k->ctx, k->it[i], (void *)k->in[i], &ib[i]);
    for (i = 0; i < k->n->nproj && i < 16; i++) tj__to_buf(k->ctx, &k->n->proj[i]->lt, k->pout[i], &ob[i]);
}
static void tj__k_custom(tj__kern *k) {
    const tj_op_def *d = &k->ctx->ops[k->n->a.reg].d;
    tj_buf ib[16], ob[16];
    if (!d->cpu) {
        snprintf(k->err, TJ__MSG, "custom op '%s' has no CPU kernel (at %s:%d)", d->name, tj__base(k->n->file), k->n->line);
        return;
    }
    tj__custom_bufs(k, ib, ob);
    d->cpu(ib, k->nin, ob, k->n->nproj, d->user);
}
/* for GPU backends: run a custom op's CUDA launcher on `stream` */
static int tj__k_custom_gpu(tj__kern *k, void *stream) {
    const tj_op_def *d = &k->ctx->ops[k->n->a.reg].d;
    tj_buf ib[16], ob[16];
    if (!d->cuda) {
        snprintf(k->err, TJ__MSG, "custom op '%s' has no CUDA kernel (tj_op_def.cuda) (at %s:%d)", d->name, tj__base(k->n->file), k->n->line);
        return 1;
    }
    tj__custom_bufs(k, ib, ob);
    d->cuda(ib, k->nin, ob, k->n->nproj, stream, d->user);
    return 0;
}
/* output cotangents of a multi-output node: the accumulated ones, zeros
   where an output got none */
static void tj__multi_cts(tj_node *n, tj_v *ct) {
    int j;
    for (j = 0; j < n->nproj; j++) {
        tj_node *p = n->proj[j];
        ct[j] = n->g->ctx->proj_ct[p->id] ? tj__fit(n->file, n->line, n->g->ctx->proj_ct[p->id], &p->t) : tj__relayout(n->file, n->line, tj_scalar_at(n->file, n->line, n->g, p->t.dt, 0.0), &p->t);
    }
}
/* A user's VJP rule (tj_op_def.vjp, tj_custom_vjp's bwd) must give each
   input's gradient with that input's dtype and axes (any order): autodiff
   would otherwise sum away extra axes and broadcast missing ones, a wrong
   gradient without a word. 0, or -1 and an error naming `what`. */
static int tj__same_axes(const tj__type *a, const tj__type *b); /* same dtype, axes and sizes, any order ([7]) */
static int tj__user_grads_fit(tj_node *n, int nin, tj_node *const *in, const tj_v *gin, const char *what) {
    int i;
    for (i = 0; i < nin; i++)
        if (gin[i] && tj__isfloat(in[i]->t.dt) && !tj__same_axes(&gin[i]->t, &in[i]->t)) { /* (an int input's is ignored) */
            char b1[256], b2[256];
            tj__err(n->g->ctx, TJ_ERR_SHAPE, n->file, n->line, "%s: the gradient it gave for input %d is %s, but the input is %s (same dtype and axes)", what, i,
                    tj_v_describe(gin[i], b1, sizeof b1), tj_v_describe(in[i], b2, sizeof b2));
            return -1;
        }
    return 0;
}
static tj_status tj__vjp_custom(tj_node *n, tj_v g, tj_v *gin) {
    const tj_op_def *d = &n->g->ctx->ops[n->a.reg].d;
    tj_v ct[16];
    (void)g;
    if (!d->vjp) {
        tj__err(n->g->ctx, TJ_ERR_UNSUPPORTED, n->file, n->line, "vjp: custom op '%s' has no VJP rule: set tj_op_def.vjp, or wrap the call in tj_custom_vjp", d->name);
        return TJ_ERR_UNSUPPORTED;
    }
    tj__multi_cts(n, ct);
    if (n->g->ctx->status) return n->g->ctx->status;
    {
        tj_status us = d->vjp(n->g, n->nin, n->in, n->nproj, n->proj, ct, gin, d->user);
        if (us != TJ_OK && !n->g->ctx->status) /* (the gradient was taken as zero) */
            tj__err(n->g->ctx, us, n->file, n->line, "custom op '%s': its vjp returned status %d without setting an error", d->name, (int)us);
    }
    if (!n->g->ctx->status) {
        char what[96];
        snprintf(what, sizeof what, "custom op '%.64s': its vjp", d->name);
        (void)tj__user_grads_fit(n, n->nin, n->in, gin, what);
    }
    return n->g->ctx->status;
}

/* ---- the op table ----
   Built from the rows of [3] (TJ__UNARY_OPS, TJ__BINARY_OPS, TJ__OTHER_OPS)
   now that every op's builder, kernel, VJP rule and cost exist. */
/* ops whose blocks live in other sections */
static void tj__pr_axes(const tj_node *n, FILE *f); /* attribute printers: [13] */
static void tj__pr_name(const tj_node *n, FILE *f);
static void tj__pr_const(const tj_node *n, FILE *f);
static void tj__pr_dot(const tj_node *n, FILE *f);
static void tj__pr_custom(const tj_node *n, FILE *f);
static void tj__pr_attention(const tj_node *n, FILE *f);
static void tj__pr_mesh(const tj_node *n, FILE *f);
static void tj__pr_coll(const tj_node *n, FILE *f);
static void tj__k_all_gather(tj__kern *k); /* collectives: [11], transports */
static void tj__k_psum(tj__kern *k);
static void tj__k_reduce_scatter(tj__kern *k);
static void tj__k_all_to_all(tj__kern *k);
static void tj__k_ppermute(tj__kern *k);
static int64_t tj__coll_scratch(const tj_node *n);
static void tj__k_cdot(tj__kern *k);
static int64_t tj__cdot_scratch(const tj_node *n);
static int64_t tj__cdot_pack_bytes(const tj_node *n);
static void tj__pr_cdot(const tj_node *n, FILE *f);
static void tj__k_custom_vjp(tj__kern *k);
static tj_status tj__vjp_custom_vjp(tj_node *n, tj_v g, tj_v *gin);
static void tj__k_memcpy(tj__kern *k);
static void tj__k_scan(tj__kern *k);
static tj_status tj__vjp_scan(tj_node *n, tj_v g, tj_v *gin);
static double tj__flops_scan(const tj_node *n);
static int64_t tj__scan_scratch(const tj_node *n);
#define TJ__OPDEF_U(op, nm, ...) {#nm, 0, tj__k_ew, tj__vjp_unary, tj__flops_out, 0, tj__sh_ew, tj__pr_const},
#define TJ__OPDEF_B(op, nm, expr) {nm, 0, tj__k_ew, tj__vjp_binary, tj__flops_out, 0, tj__sh_binary, tj__pr_axes},
#define TJ__OPDEF_O(op, nm, fl, k, v, fp, sc, sh, pr) {nm, (fl), k, v, fp, sc, sh, pr},
#define TJ__OPDEF_R(op, nm, name, id, fold, sh, vjp) {name, 0, tj__k_reduce, vjp, tj__flops_in, 0, sh, tj__pr_axes},
static const tj__opdef tj__ops[TJ__NOPS] = {TJ__UNARY_OPS(TJ__OPDEF_U) TJ__BINARY_OPS(TJ__OPDEF_B) TJ__OTHER_OPS(TJ__OPDEF_O) TJ__REDUCE_OPS(TJ__OPDEF_R)};
static const char *tj__opname(int op) { return op >= 0 && op < TJ__NOPS ? tj__ops[op].name : "?"; }
static unsigned tj__ops_flags(int op) { return tj__ops[op].flags; }
static tj__shard_fn tj__opshard(int op) { return tj__ops[op].shard; }

/* ==== [6] autodiff ======================================================= */
/* Reverse mode over the graph built so far. Walk the nodes that lie between
   `wrt` and `outs` in reverse creation order (a reverse topological order),
   call each op's VJP rule on its accumulated cotangent, fit each result to
   the input's exact type, and accumulate with add (fan-out is a sum). The
   new nodes belong to a fresh pass number, so the remat stage can tell the
   backward pass from the forward pass. */

static int tj__cvjp_nin(const tj_node *n); /* a custom_vjp node's count of inputs x (below) */
/* does g (or a body of its scans, regions and shard_maps) hold a custom_vjp node? */
static int tj__has_cvjp(const tj_graph *g, int top, int depth) {
    int i;
    for (i = 0; i <= top && i < g->n; i++) {
        const tj_node *n = g->nodes[i];
        if (n->op == TJ__OP_CUSTOM_VJP) return 1;
        if (n->op == TJ__OP_SCAN && n->sub && depth < 16 && tj__has_cvjp(n->sub, n->sub->n - 1, depth + 1)) return 1;
    }
    return 0;
}
TJDEF tj_status tj_vjp_at(const char *f, int l, int nout, const tj_v *outs, const tj_v *cts, int nwrt, const tj_v *wrt_in, tj_v *grads) {
    tj_graph *g;
    tj_ctx *c;
    int i, j, top = -1, n0, cap, saved_pass, hi_all = 0;
    unsigned char *needs = NULL, *reach = NULL;
    tj_v *ct = NULL, *cth = NULL, *wrt = NULL, *ginh = NULL; /* ginh: gin of a node of more than 64 inputs */
    int nginh = 0;
    tj_graph *saved_cur;
    tj_status st = TJ_OK;
    if (nout < 1 || !outs || !outs[0] || nwrt < 0 || (nwrt && (!wrt_in || !grads))) {
        tj_ctx *ec = nout >= 1 && outs && outs[0] ? outs[0]->g->ctx : tj__tracing_ctx();
        if (nout < 1 || !outs || outs[0] || tj_status_of(ec) == TJ_OK) /* (a NULL output: an earlier op failed, its message stands) */
            tj__err(ec, TJ_ERR_ARG, f, l, "vjp: bad arguments (nout %d, nwrt %d, outs %s, wrt %s, grads %s)", nout, nwrt,
                    !outs ? "NULL" : nout >= 1 && !outs[0] ? "given, output 0 NULL" : "given", wrt_in ? "given" : "NULL", grads ? "given" : "NULL");
        return TJ_ERR_ARG;
    }
    g = outs[0]->g;
    c = g->ctx;
    for (i = 0; i < nwrt; i++) grads[i] = NULL;
    if (tj__finished(g, "vjp", f, l)) return c->status;
    for (i = 0; i < nout; i++) {
        if (!outs[i] || (cts && !cts[i])) return tj__null_input(c, "vjp", !outs[i] ? "output" : "cotangent", i, f, l);
        if (outs[i]->g != g) {
            tj__err(c, TJ_ERR_ARG, f, l, "vjp: output %d belongs to another traced function", i);
            return TJ_ERR_ARG;
        }
        if (!cts && outs[i]->t.rank != 0) {
            char b[256];
            tj__err(c, TJ_ERR_SHAPE, f, l, "grad: output %s is not a scalar (reduce it, or pass cotangents to tj_vjp)",
                    tj_v_describe(outs[i], b, sizeof b));
            return TJ_ERR_SHAPE;
        }
        if (!tj__isfloat(outs[i]->t.dt)) { /* as in JAX: an integer output has no derivative to speak of */
            char b[256];
            tj__err(c, TJ_ERR_DTYPE, f, l, "vjp: output %d %s is not a float (differentiate a float value)", i, tj_v_describe(outs[i], b, sizeof b));
            return TJ_ERR_DTYPE;
        }
        if (cts && !tj__same_axes(&cts[i]->t, &outs[i]->t)) { /* else it would be broadcast or summed to fit, silently */
            char b[256], b2[256];
            tj__err(c, TJ_ERR_SHAPE, f, l, "vjp: cotangent %d is %s but output %d is %s (same dtype and axes)", i, tj_v_describe(cts[i], b, sizeof b), i,
                    tj_v_describe(outs[i], b2, sizeof b2));
            return TJ_ERR_SHAPE;
        }
        if (outs[i]->id > top) top = outs[i]->id;
    }
    if (!(wrt = (tj_v *)tj__calloc(sizeof(tj_v) * (size_t)(nwrt + 1)))) {
        tj__err(c, TJ_ERR_OOM, f, l, "vjp: out of memory");
        return TJ_ERR_OOM;
    }
    for (i = 0; i < nwrt; i++) {
        /* a value of an enclosing function (a scan body differentiating
           with respect to a weight it closes over): its capture */
        if (!wrt_in[i] || !(wrt[i] = tj__capture(g, wrt_in[i]))) {
            TJ_FREE(wrt);
            if (!wrt_in[i]) return tj__null_input(c, "vjp", "wrt", i, f, l);
            if (c->status) return c->status;
            tj__err(c, TJ_ERR_ARG, f, l, "vjp: wrt %d belongs to another traced function", i);
            return TJ_ERR_ARG;
        }
        if (!tj__isfloat(wrt[i]->t.dt)) {
            char b[256];
            tj__err(c, TJ_ERR_DTYPE, f, l, "vjp: cannot differentiate with respect to %s (not a float)", tj_v_describe(wrt[i], b, sizeof b));
            TJ_FREE(wrt);
            return TJ_ERR_DTYPE;
        }
    }
    n0 = cap = g->n;
    needs = (unsigned char *)tj__calloc((size_t)n0);
    reach = (unsigned char *)tj__calloc((size_t)n0);
    ct = (tj_v *)tj__calloc(sizeof(tj_v) * (size_t)n0);
    if (!needs || !reach || !ct) {
        tj__err(c, TJ_ERR_OOM, f, l, "vjp: out of memory");
        st = TJ_ERR_OOM;
        goto done;
    }
    /* needs: depends on some wrt; reach: some output depends on it */
    for (i = 0; i < nwrt; i++) needs[wrt[i]->id] = 1;
    for (i = 0; i <= top; i++) {
        tj_node *n = g->nodes[i];
        if (tj__ops[n->op].flags & TJ__NODIFF) continue;
        for (j = 0; j < n->nin && !needs[i]; j++) needs[i] = needs[n->in[j]->id];
    }
    for (i = 0; i < nout; i++) reach[outs[i]->id] = 1;
    for (i = top; i >= 0; i--)
        if (reach[i])
            for (j = 0; j < g->nodes[i]->nin; j++) reach[g->nodes[i]->in[j]->id] = 1;
    /* A derivative of a derivative through a tj_custom_vjp (JAX's
       grad(grad(f)) over a jax.custom_vjp): what an earlier pass's
       backward nodes read of the custom function's outputs was, in JAX,
       computed by fwd's own ops inside the inner transformation, so a
       cotangent that reaches those outputs through such nodes is
       differentiated through fwd's ops; bwd serves the cotangents that
       reach them through forward values alone. Where the graph has a
       custom_vjp node to differentiate, cth carries the first kind
       (ct the second) until the two meet at a wrt. */
    /* A scan's (region's, shard_map's) VJP differentiates its body with a
       tj_vjp of its own: for a cotangent of the first kind, c->vjp_hi
       says so, and every cotangent of that tj_vjp is of the first kind. */
    hi_all = c->vjp_hi;
    c->vjp_hi = 0;
    if ((hi_all || g->npass > 0) && tj__has_cvjp(g, top, 0) && !(cth = (tj_v *)tj__calloc(sizeof(tj_v) * (size_t)n0))) {
        tj__err(c, TJ_ERR_OOM, f, l, "vjp: out of memory");
        st = TJ_ERR_OOM;
        goto done;
    }
    saved_pass = g->cur_pass;
    g->cur_pass = ++g->npass;
    saved_cur = c->cur;
    c->cur = NULL; /* autodiff puts each node in the graph it names */
    c->autodiff++; /* (bodies' backward nodes included: see tj__node) */
    for (i = 0; i < nout; i++) {
        tj_node *o = outs[i];
        tj_v v = cts ? tj__fit(o->file, o->line, cts[i], &o->t) : tj_scalar_at(o->file, o->line, g, o->t.dt, 1.0);
        tj_v *to = cth && hi_all ? cth : ct;
        to[o->id] = to[o->id] ? tj_add_at(o->file, o->line, to[o->id], v) : v;
    }
    for (i = top; i >= 0 && c->status == TJ_OK; i--) {
        tj_node *n = g->nodes[i];
        tj_v gin_s[64], *gin = gin_s;
        const tj__opdef *d = &tj__ops[n->op];
        int any = 0, flow, ngin = n->nin > 64 ? n->nin : 64;
        if (!needs[i] || !reach[i] || (d->flags & TJ__NODIFF) || n->op == TJ__OP_PROJ) continue;
        for (j = 0; j < n->nin; j++) any |= needs[n->in[j]->id];
        if (!any) continue;
        if (ngin > 64) { /* a big scan's: one table, grown as needed */
            if (ngin > nginh) {
                tj_v *a = (tj_v *)TJ_REALLOC(ginh, sizeof(tj_v) * (size_t)ngin);
                if (!a) {
                    tj__err(c, TJ_ERR_OOM, f, l, "vjp: out of memory");
                    break;
                }
                ginh = a;
                nginh = ngin;
            }
            gin = ginh;
        }
        if (cth && n->pass > 0 && !(d->flags & TJ__MULTI) && ct[i]) { /* a backward node: what passes it is of the first kind */
            cth[i] = cth[i] ? tj_add_at(n->file, n->line, cth[i], ct[i]) : ct[i];
            ct[i] = NULL;
        }
        for (flow = 0; flow < (cth ? 2 : 1) && c->status == TJ_OK; flow++) {
            tj_v *fc, *to;
            if (cth && (d->flags & TJ__MULTI) && g->n > cap) {
                /* the other flow's VJP of this node added outputs to it (a
                   scan's residuals), which its VJP reads by id in proj_ct */
                tj_v *a = (tj_v *)TJ_REALLOC(ct, sizeof(tj_v) * (size_t)g->n), *b;
                if (a) ct = a;
                b = a ? (tj_v *)TJ_REALLOC(cth, sizeof(tj_v) * (size_t)g->n) : NULL;
                if (b) cth = b;
                if (!a || !b) {
                    tj__err(c, TJ_ERR_OOM, f, l, "vjp: out of memory");
                    break;
                }
                for (j = cap; j < g->n; j++) ct[j] = cth[j] = NULL;
                cap = g->n;
            }
            fc = flow ? cth : ct;
            if (d->flags & TJ__MULTI) { /* its cotangents sit on its projections */
                for (any = 0, j = 0; j < n->nproj; j++) any |= n->proj[j]->id < n0 && fc[n->proj[j]->id] != NULL;
                if (!any) continue;
                c->proj_ct = fc;
            } else if (!fc[i]) continue;
            to = cth && (flow || n->pass > 0) ? cth : ct;
            for (j = 0; j < ngin; j++) gin[j] = NULL;
            if (flow && n->op == TJ__OP_CUSTOM_VJP) { /* through fwd's ops: its outputs y are inputs nin.. of the node */
                int nin = tj__cvjp_nin(n);
                for (j = 0; j < n->nproj; j++)
                    if (n->proj[j]->id < n0 && cth[n->proj[j]->id]) gin[nin + j] = cth[n->proj[j]->id];
            } else {
                if (!d->vjp) {
                    tj__err(c, TJ_ERR_UNSUPPORTED, n->file, n->line, "vjp: op '%s' has no VJP rule", d->name);
                    break;
                }
                c->vjp_hi = flow && (d->flags & TJ__MULTI);
                st = d->vjp(n, fc[i], gin);
                c->vjp_hi = 0;
                if (st != TJ_OK) {
                    if (c->status == TJ_OK) tj__err(c, st, n->file, n->line, "vjp: the VJP rule of op '%s' failed", d->name); /* (else: no gradients, no error) */
                    break;
                }
            }
            for (j = 0; j < n->nin; j++) {
                tj_node *x = n->in[j];
                tj_v v;
                if (!gin[j] || !needs[x->id] || !tj__isfloat(x->t.dt)) continue;
                v = tj__fit_ct(n->file, n->line, gin[j], &x->t);
                to[x->id] = to[x->id] ? tj_add_at(n->file, n->line, to[x->id], v) : v;
            }
        }
        if (st != TJ_OK) break;
    }
    for (i = 0; i < nwrt && c->status == TJ_OK; i++) {
        tj_node *w = wrt[i];
        tj_v v = w->id < n0 ? ct[w->id] : NULL;
        if (cth && w->id < n0 && cth[w->id]) v = v ? tj_add_at(w->file, w->line, v, cth[w->id]) : cth[w->id];
        grads[i] = v ? v : tj__relayout(w->file, w->line, tj_scalar_at(w->file, w->line, g, w->t.dt, 0.0), &w->t);
    }
    g->cur_pass = saved_pass;
    c->cur = saved_cur;
    c->autodiff--;
    st = c->status;
done:
    TJ_FREE(needs);
    TJ_FREE(reach);
    TJ_FREE(ct);
    TJ_FREE(cth);
    TJ_FREE(wrt);
    TJ_FREE(ginh);
    return st;
}
TJDEF tj_status tj_grad_at(const char *f, int l, tj_v loss, int nwrt, const tj_v *wrt, tj_v *grads) { return tj_vjp_at(f, l, 1, &loss, NULL, nwrt, wrt, grads); }
TJDEF tj_status tj_grad_tree_at(const char *f, int l, tj_v loss, const tj_tree *params, tj_tree *grads) {
    tj_v *w, *gr;
    int i, k = 0;
    tj_status st;
    if (!loss || !params || !grads) {
        if (loss) tj__err(loss->g->ctx, TJ_ERR_ARG, f, l, "tj_grad_tree: argument %s is NULL", !params ? "params" : "grads");
        return TJ_ERR_ARG;
    }
    w = (tj_v *)tj__calloc(sizeof(tj_v) * (size_t)(params->n + 1));
    gr = (tj_v *)tj__calloc(sizeof(tj_v) * (size_t)(params->n + 1));
    if (!w || !gr) {
        TJ_FREE(w);
        TJ_FREE(gr);
        tj__err(loss->g->ctx, TJ_ERR_OOM, NULL, 0, "grad_tree: out of memory");
        return TJ_ERR_OOM;
    }
    for (i = 0; i < params->n; i++)
        if (params->leaf[i].kind == TJ_LEAF_VALUE && tj__isfloat(params->leaf[i].v->t.dt)) w[k++] = params->leaf[i].v;
    st = tj_grad_at(f, l, loss, k, w, gr);
    for (i = 0, k = 0; st == TJ_OK && i < params->n; i++) {
        const tj__leaf *l = &params->leaf[i];
        if (l->kind == TJ_LEAF_VALUE && tj__isfloat(l->v->t.dt)) tj_tree_set_v(grads, l->name, gr[k++]);
        else if (l->kind == TJ_LEAF_INT) tj_tree_set_int(grads, l->name, l->i);
        else if (l->kind == TJ_LEAF_FLOAT) tj_tree_set_float(grads, l->name, l->f);
        else if (l->kind == TJ_LEAF_STRING) tj_tree_set_string(grads, l->name, l->s);
    }
    TJ_FREE(w);
    TJ_FREE(gr);
    return st;
}

/* ---- custom_vjp ----
   fwd is traced inline: its ops are ordinary nodes that compute the
   outputs y and residuals r. A CUSTOM_VJP node takes (x, y, r) and hands
   y on as its outputs; its VJP rule calls bwd(r, cotangents of y) and
   gives the results to x directly. So autodiff never looks inside fwd,
   and under a remat policy the residuals r are saved, offloaded or
   recomputed like any other forward value. */
struct tj__cvjp {
    tj_vjp_bwd_fn bwd;
    void *user;
    int nin, nout, nres;
};
TJDEF tj_status tj_custom_vjp_at(const char *f, int l, tj_vjp_fwd_fn fwd, tj_vjp_bwd_fn bwd, void *user, int nin, const tj_v *in, int nout, tj_v *out,
                                 int nres) {
    tj_graph *g;
    tj_ctx *c;
    tj_node *all[64], *n;
    tj_v y[16], r[16];
    tj__type dummy;
    int i, k;
    if (nin < 1 || !in || !out || nout < 1 || nout > 16 || nres < 0 || nres > 16 || nin + nout + nres > 64) {
        tj__err(nin >= 1 && in && in[0] ? tj__vctx(in[0]) : tj__tracing_ctx(), TJ_ERR_ARG, f, l,
                "custom_vjp: %s (%d inputs, %d outputs, %d residuals: 1.., 1..16, 0..16, 64 in all)", !out ? "argument out is NULL" : !in ? "argument in is NULL" : "bad counts",
                nin, nout, nres);
        return TJ_ERR_ARG;
    }
    for (i = 0; i < nout; i++) out[i] = NULL;
    if (!(g = tj__cur(tj__inner(nin, in, "custom_vjp", f, l)))) return tj__inner_status(nin, in);
    c = g->ctx;
    if (!fwd || !bwd) {
        tj__err(c, TJ_ERR_ARG, f, l, "custom_vjp: fwd and bwd are both needed");
        return TJ_ERR_ARG;
    }
    for (i = 0; i < 16; i++) y[i] = r[i] = NULL;
    for (i = 0; i < nin; i++) if (!(all[i] = tj__capture(g, in[i]))) return c->status ? c->status : TJ_ERR_ARG;
    fwd(g, all, y, r, user);
    if (c->status) return c->status;
    for (i = 0; i < nout + nres; i++) {
        tj_v v = i < nout ? y[i] : r[i - nout];
        if (!v || !(all[nin + i] = tj__capture(g, v))) {
            if (!c->status) tj__err(c, TJ_ERR_ARG, f, l, "custom_vjp: fwd returned no %s %d", i < nout ? "output" : "residual", i < nout ? i : i - nout);
            return c->status;
        }
    }
    if (c->ncvjp == c->capcvjp) {
        int nc = c->capcvjp ? 2 * c->capcvjp : 8;
        struct tj__cvjp *nv = (struct tj__cvjp *)TJ_REALLOC(c->cvjps, sizeof *nv * (size_t)nc);
        if (!nv) {
            tj__err(c, TJ_ERR_OOM, f, l, "custom_vjp: out of memory");
            return TJ_ERR_OOM;
        }
        c->cvjps = nv;
        c->capcvjp = nc;
    }
    k = c->ncvjp++;
    c->cvjps[k].bwd = bwd;
    c->cvjps[k].user = user;
    c->cvjps[k].nin = nin;
    c->cvjps[k].nout = nout;
    c->cvjps[k].nres = nres;
    memset(&dummy, 0, sizeof dummy);
    dummy.dt = TJ_I32;
    if (!(n = tj__node(g, TJ__OP_CUSTOM_VJP, &dummy, nin + nout + nres, all, NULL, f, l))) return c->status ? c->status : TJ_ERR_OOM;
    n->a.reg = k;
    for (i = 0; i < nout; i++) {
        if (tj__add_proj(n, &all[nin + i]->t, TJ_SPACE_DEVICE)) return c->status;
        out[i] = n->proj[i];
    }
    return TJ_OK;
}
static int tj__cvjp_nin(const tj_node *n) { return n->g->ctx->cvjps[n->a.reg].nin; }
static void tj__k_custom_vjp(tj__kern *k) { /* hand y on */
    const struct tj__cvjp *cv = &k->ctx->cvjps[k->n->a.reg];
    int j;
    for (j = 0; j < cv->nout; j++) memcpy(k->pout[j], k->in[cv->nin + j], (size_t)tj__bytes(&k->n->proj[j]->lt));
}
static tj_status tj__vjp_custom_vjp(tj_node *n, tj_v g_unused, tj_v *gin) {
    const struct tj__cvjp *cv = &n->g->ctx->cvjps[n->a.reg];
    tj_v ct[16], gx[64];
    int i;
    (void)g_unused;
    for (i = 0; i < 64; i++) gx[i] = NULL;
    tj__multi_cts(n, ct);
    if (n->g->ctx->status) return n->g->ctx->status;
    cv->bwd(n->g, n->in + cv->nin + cv->nout, ct, gx, cv->user);
    if (!n->g->ctx->status) (void)tj__user_grads_fit(n, cv->nin, n->in, gx, "custom_vjp's bwd");
    for (i = 0; i < cv->nin; i++) gin[i] = gx[i];
    return n->g->ctx->status;
}

/* ==== [7] control flow: scan ============================================= */
/* A SCAN node holds its body graph. Its inputs are the initial carries, the
   stacked xs (scanned axis leading) and the captured outer values; its
   outputs are PROJ nodes: final carries, stacked ys, and (after autodiff)
   stacked residuals. The kernel runs the compiled body once per iteration
   on pointers: x slices and y slices are offsets into the stacked buffers,
   and the carry ping-pongs between two buffers in the node's workspace.
   a.reverse runs the iterations from the last slice to the first (a user's
   tj_scan_reverse, the backward pass of a forward scan or region): every
   slice index, the staged prefetch of host slices included, is the
   iteration's t, never its count s (tj__k_scan). Stacks are indexed by
   slice either way, so a residual stacked by a forward pass is read back
   by its backward pass, which runs the other way, at the same index. */

struct tj__report {
    tj_residual *rows;
    int n, cap;
    char lint[2048];
    int nlint;
    int nested;  /* rows being added now belong to a nested region ([8]) */
};
static void tj__report_free(struct tj__report *r) {
    if (!r) return;
    TJ_FREE(r->rows);
    TJ_FREE(r);
}

static tj__type tj__type_drop(const tj__type *t, int axis) {
    tj__type o = *t;
    int i;
    o.rank = 0;
    for (i = 0; i < TJ_MAXDIM; i++) o.sh[i] = 0;
    for (i = 0; i < t->rank; i++)
        if (t->ax[i] != axis) { o.ax[o.rank] = t->ax[i]; o.sh[o.rank] = t->sh[i]; o.dim[o.rank++] = t->dim[i]; }
    return o;
}
static tj__type tj__type_lead(const tj__type *t, int axis, int64_t len) {
    tj__type o = *t;
    int i;
    o.ax[0] = axis;
    o.dim[0] = len;
    o.rank = 1;
    for (i = 0; i < TJ_MAXDIM; i++) o.sh[i] = 0;
    for (i = 0; i < t->rank; i++)
        if (t->ax[i] != axis) { o.ax[o.rank] = t->ax[i]; o.sh[o.rank] = t->sh[i]; o.dim[o.rank++] = t->dim[i]; }
    return o;
}
/* A multi-output node's outputs: one PROJ node each, made right after it. */
static int tj__add_proj(tj_node *m, const tj__type *t, int space) {
    tj_node **np, *p;
    np = (tj_node **)TJ_REALLOC(m->proj, sizeof(tj_node *) * (size_t)(m->nproj + 1));
    if (!np) {
        tj__err(m->g->ctx, TJ_ERR_OOM, m->file, m->line, "%s: out of memory adding an output", tj__opname(m->op));
        return -1;
    }
    m->proj = np;
    p = tj__node(m->g, TJ__OP_PROJ, t, 1, &m, NULL, m->file, m->line);
    if (!p) return -1;
    p->a.index = m->nproj;
    p->space = space;
    p->pass = m->pass; /* outputs added by a later VJP still belong to m's pass */
    m->proj[m->nproj++] = p;
    return 0;
}
static int tj__body_add_out(tj_graph *b, tj_node *v) {
    tj_node **no;
    if (!v) return -1; /* the value failed to build: its error is already set */
    no = (tj_node **)TJ_REALLOC(b->outs, sizeof(tj_node *) * (size_t)(b->nout + 1));
    if (!no) {
        tj__err(b->ctx, TJ_ERR_OOM, b->file, b->line, "scan: out of memory adding a body output");
        return -1;
    }
    b->outs = no;
    b->outs[b->nout++] = v;
    return 0;
}
static int tj__same_axes(const tj__type *a, const tj__type *b) {
    int i, k;
    if (a->rank != b->rank || a->dt != b->dt) return 0;
    for (i = 0; i < a->rank; i++) {
        k = tj__axis_index(b, a->ax[i]);
        if (k < 0 || b->dim[k] != a->dim[i]) return 0;
    }
    return 1;
}

/* Make the SCAN node: inputs carry, xs (axis-first), captures; outputs
   (PROJ) final carries and stacked ys. yt: the ys' outer types when they
   are not the body's (a shard_map body's are local blocks), else NULL. */
/* A policy the caller filled in by hand (or by mistake): a known kind, a
   known memory space, and save_from_both's policies neither missing from
   the chain nor pointing back into it (tj__decide would recurse forever).
   0, or -1 and an error at the scan's line. */
static int tj__policy_check(tj_ctx *c, const tj_policy *p, int depth, const char *f, int l) {
    if (!p) return 0;
    if ((unsigned)p->kind > (unsigned)TJ_POLICY_OFFLOAD_DOTS_NO_BATCH) {
        tj__err(c, TJ_ERR_ARG, f, l, "scan policy: kind %d is not a tj_policy_kind (make policies with tj_save_only_these_names and the like)", (int)p->kind);
        return -1;
    }
    if (p->offload_dst && strcmp(p->offload_dst, "host") != 0 && strcmp(p->offload_dst, "pinned_host") != 0) {
        tj__err(c, TJ_ERR_ARG, f, l, "scan policy: unknown memory space '%s' to offload to (use \"host\" or \"pinned_host\")", p->offload_dst);
        return -1;
    }
    if (p->kind != TJ_POLICY_SAVE_FROM_BOTH) return 0;
    if (depth >= 16) {
        tj__err(c, TJ_ERR_ARG, f, l, "scan policy: save_from_both nests more than 16 deep (does it point to itself?)");
        return -1;
    }
    return tj__policy_check(c, p->a, depth + 1, f, l) || tj__policy_check(c, p->b, depth + 1, f, l) ? -1 : 0;
}
static tj_node *tj__scan_node(const char *f, int l, tj_graph *g, tj_graph *b, int axis, int64_t len, int reverse, int nc, tj_node *const *init,
                              int nx, tj_node *const *xs, int ny, const tj_policy *policy, const tj__type *yt) {
    tj_node *in_s[64], **in = in_s, *n;
    tj__type t;
    int i, nin = 0;
    if (tj__policy_check(g->ctx, policy, 0, f, l)) return NULL;
    if (nc + nx + b->ncap > 64 && !(in = (tj_node **)tj__malloc(sizeof(tj_node *) * (size_t)(nc + nx + b->ncap)))) {
        tj__err(g->ctx, TJ_ERR_OOM, f, l, "scan: out of memory for %d carries, xs and captured values", nc + nx + b->ncap);
        return NULL;
    }
    for (i = 0; i < nc; i++) in[nin++] = init[i];
    for (i = 0; i < nx; i++) in[nin++] = xs[i];
    for (i = 0; i < b->ncap; i++) in[nin++] = b->cap_outer[i];
    memset(&t, 0, sizeof t);
    t.dt = TJ_I32;
    n = tj__node(g, TJ__OP_SCAN, &t, nin, in, NULL, f, l);
    if (in != in_s) TJ_FREE(in);
    if (!n) return NULL;
    n->sub = b;
    b->refs++;
    b->sealed = 1;
    if (!b->owner) b->owner = n;
    n->a.ncarry = nc;
    n->a.nx = nx;
    n->a.ncap = b->ncap;
    n->a.length = (int)len;
    n->a.reverse = reverse;
    n->a.axis = axis;
    if (policy) { /* copy: the caller's struct may be a local of a helper function */
        n->pol = *policy;
        n->policy = &n->pol;
    }
    for (i = 0; i < nc; i++)
        if (tj__add_proj(n, &b->outs[i]->t, TJ_SPACE_DEVICE)) return NULL;
    for (i = 0; i < ny; i++) {
        tj__type t1 = yt ? yt[i] : tj__type_lead(&b->outs[nc + i]->t, axis, len);
        if (tj__add_proj(n, &t1, b->outs[nc + i]->space)) return NULL;
    }
    return n;
}

static tj_status tj__scan(const char *f, int l, tj_graph *g, tj_scan_fn body, void *user, const char *axis, int nc, const tj_v *init, int nx,
                          const tj_v *xs, int ny, tj_v *final, tj_v *ys, const tj_policy *policy, int reverse);
TJDEF tj_status tj_scan_at(const char *f, int l, tj_scan_fn body, void *user, const char *axis, int nc, const tj_v *init, int nx, const tj_v *xs,
                           int ny, tj_v *final, tj_v *ys, const tj_policy *policy) {
    return tj_scan_dir_at(f, l, body, user, axis, nc, init, nx, xs, ny, final, ys, policy, 0);
}
/* tj_scan, tj_scan_reverse and tj_scan_dir: one scan, either direction
   (the SCAN node's a.reverse; the runner, the VJP and the re-run read it) */
TJDEF tj_status tj_scan_dir_at(const char *f, int l, tj_scan_fn body, void *user, const char *axis, int nc, const tj_v *init, int nx,
                               const tj_v *xs, int ny, tj_v *final, tj_v *ys, const tj_policy *policy, int reverse) {
    const char *op = reverse ? "reverse scan" : "scan";
    tj_graph *g = NULL;
    tj_node *all_s[64], **all = all_s;
    int i, n = 0;
    tj_status st;
    if ((nc > 0 && init ? nc : 0) + (nx > 0 && xs ? nx : 0) > 64 &&
        !(all = (tj_node **)tj__malloc(sizeof(tj_node *) * (size_t)((nc > 0 && init ? nc : 0) + (nx > 0 && xs ? nx : 0))))) {
        tj__err(tj__tracing_ctx(), TJ_ERR_OOM, f, l, "%s: out of memory for %d carries and %d xs", op, nc, nx);
        return TJ_ERR_OOM;
    }
    for (i = 0; i < nc && init; i++) all[n++] = init[i];
    for (i = 0; i < nx && xs; i++) all[n++] = xs[i];
    if (!n) { /* no carry and no xs: no value to take the context from */
        tj__err(tj__tracing_ctx(), TJ_ERR_ARG, f, l, "%s: %d carries and %d xs: give at least one (a scan needs a value to run over; see tj_checkpoint)", op, nc, nx);
        return TJ_ERR_ARG;
    }
    if (!(g = tj__inner(n, all, op, f, l))) st = tj__inner_status(n, all);
    else st = tj__scan(f, l, g, body, user, axis, nc, init, nx, xs, ny, final, ys, policy, reverse != 0);
    if (all != all_s) TJ_FREE(all);
    return st;
}
static tj_status tj__scan_t(const char *f, int l, tj_graph *g, tj_scan_fn body, void *user, const char *axis, int nc, const tj_v *init, int nx,
                            const tj_v *xs, int ny, tj_v *final, tj_v *ys, const tj_policy *policy, int reverse, tj_node **tab);
/* tj__scan_t with its tables, sized by the counts: on the stack up to 32
   each, else on the heap */
static tj_status tj__scan(const char *f, int l, tj_graph *g, tj_scan_fn body, void *user, const char *axis, int nc, const tj_v *init, int nx,
                          const tj_v *xs, int ny, tj_v *final, tj_v *ys, const tj_policy *policy, int reverse) {
    const char *op = reverse ? "reverse scan" : "scan";
    tj_node *tab_s[7 * 32], **tab = tab_s;
    tj_ctx *c = g->ctx;
    tj_status st;
    int z, m = nc > nx ? nc : nx;
    for (z = 0; final && z < nc; z++) final[z] = NULL; /* a failed scan leaves NULLs, never garbage */
    for (z = 0; ys && z < ny; z++) ys[z] = NULL;
    if (c->status) return c->status;
    if (!body || nc < 0 || nx < 0 || ny < 0 || (nc && !init) || (nx && !xs) || (nc && !final) || (ny && !ys)) {
        tj__err(c, TJ_ERR_ARG, f, l, "%s: bad arguments (%d carries, %d xs, %d ys)", op, nc, nx, ny);
        return TJ_ERR_ARG;
    }
    if (ny > m) m = ny;
    if (m > 32 && !(tab = (tj_node **)tj__calloc(sizeof(tj_node *) * 7 * (size_t)m))) {
        tj__err(c, TJ_ERR_OOM, f, l, "%s: out of memory for %d carries, %d xs and %d ys", op, nc, nx, ny);
        return TJ_ERR_OOM;
    }
    st = tj__scan_t(f, l, g, body, user, axis, nc, init, nx, xs, ny, final, ys, policy, reverse, tab);
    if (tab != tab_s) TJ_FREE(tab);
    return st;
}
static tj_status tj__scan_t(const char *f, int l, tj_graph *g, tj_scan_fn body, void *user, const char *axis, int nc, const tj_v *init, int nx,
                            const tj_v *xs, int ny, tj_v *final, tj_v *ys, const tj_policy *policy, int reverse, tj_node **tab) {
    const char *op = reverse ? "reverse scan" : "scan";
    tj_graph *b = NULL;
    tj_ctx *c;
    int m = nc > nx ? (nc > ny ? nc : ny) : (nx > ny ? nx : ny);
    tj_node **cp, **xp, **co, **yo, **xr, **ini, **xin, *n;
    tj__type at;
    int i, ax;
    int64_t len = -1;
    char b1[256];
    if (m < 32) m = 32;
    cp = tab, xp = tab + m, co = tab + 2 * m, yo = tab + 3 * m, xr = tab + 4 * m, ini = tab + 5 * m, xin = tab + 6 * m;
    c = g->ctx;
    g = tj__cur(g); /* a scan written inside a body belongs to it */
    for (i = 0; i < nc; i++) if (!init[i]) return c->status ? c->status : TJ_ERR_ARG;
    for (i = 0; i < nx; i++) if (!xs[i]) return c->status ? c->status : TJ_ERR_ARG;
    /* the body sees whole values: an initial carry or xs that is a partial
       sum (a dot's over a split contracted axis, a vocab-parallel take) is
       added up once, first (a carry's type is the same in every iteration,
       and what the body returns is whole; captures: tj__capture1) */
    for (i = 0; i < nc + nx; i++) {
        tj_node *v = i < nc ? init[i] : xs[i - nc], **to = i < nc ? &ini[i] : &xin[i - nc];
        if ((*to = v)->t.partial && !(*to = tj__reshard(v, v->t.sh, op, f, l))) return c->status;
    }
    init = ini;
    xs = xin;
    /* the axis, and the length */
    if (axis && strchr(axis, '=')) {
        if (tj__parse_shape(c, axis, TJ_F32, &at, 0, op, f, l)) return c->status;
        if (at.rank != 1) { tj__err(c, TJ_ERR_AXIS, f, l, "%s: want one axis, got \"%s\"", op, axis); return TJ_ERR_AXIS; }
        ax = at.ax[0];
        len = at.dim[0];
    } else {
        int ids[TJ_MAXDIM];
        if (tj__parse_names(c, axis, ids, TJ_MAXDIM, op, f, l) != 1) {
            if (!c->status) tj__err(c, TJ_ERR_AXIS, f, l, "%s: want one axis name, got \"%s\"", op, axis ? axis : "(null)");
            return c->status;
        }
        ax = ids[0];
    }
    for (i = 0; i < nx; i++) {
        int k = tj__axis_index(&xs[i]->t, ax);
        if (k < 0 || (len >= 0 && xs[i]->t.dim[k] != len)) {
            char was[64] = "";
            if (k >= 0) snprintf(was, sizeof was, ": %lld, not %lld", (long long)xs[i]->t.dim[k], (long long)len);
            tj__err(c, TJ_ERR_SHAPE, f, l, "%s: x %d %s %s axis '%s'%s%s", op, i, tj_v_describe(xs[i], b1, sizeof b1), k < 0 ? "has no" : "disagrees on the length of",
                    tj__name(c, ax), k < 0 ? "" : " with the other xs or the length given", was);
            return TJ_ERR_SHAPE;
        }
        len = xs[i]->t.dim[k];
    }
    if (len < 1) {
        tj__err(c, TJ_ERR_ARG, f, l, "%s: no xs to take the length of '%s' from: write \"%s=N\"", op, tj__name(c, ax), tj__name(c, ax));
        return TJ_ERR_ARG;
    }
    if (len > 2147483647) { /* the SCAN node counts iterations in an int */
        tj__err(c, TJ_ERR_SHAPE, f, l, "%s: %lld iterations of '%s' (at most 2^31-1)", op, (long long)len, tj__name(c, ax));
        return TJ_ERR_SHAPE;
    }
    for (i = 0; i < nc; i++)
        if (tj__axis_index(&init[i]->t, ax) >= 0) {
            tj__err(c, TJ_ERR_AXIS, f, l, "%s: carry %d %s must not have the scanned axis '%s'", op, i, tj_v_describe(init[i], b1, sizeof b1), tj__name(c, ax));
            return TJ_ERR_AXIS;
        }
    /* trace the body once */
    if (!(b = tj__graph_new(c, f, l))) return c->status;
    b->parent = g;
    b->manual = g->manual; /* a scan inside shard_map works on local blocks too */
    b->check = g->check;
    for (i = 0; i < nc; i++) {
        if (!(cp[i] = tj__node(b, TJ__OP_PARAM, &init[i]->t, 0, NULL, NULL, f, l)) || tj__add_param(b, cp[i])) goto fail;
        cp[i]->name = tj__strdup("carry");
    }
    for (i = 0; i < nx; i++) {
        tj__type xt = tj__type_drop(&xs[i]->t, ax);
        if (!(xp[i] = tj__node(b, TJ__OP_PARAM, &xt, 0, NULL, NULL, f, l)) || tj__add_param(b, xp[i])) goto fail;
        xp[i]->name = tj__strdup("x");
    }
    for (i = 0; i < m; i++) co[i] = yo[i] = NULL;
    {
        tj_graph *saved = c->cur;
        c->cur = b; /* ops the body makes belong to it */
        body(b, cp, xp, co, yo, user);
        c->cur = saved;
    }
    if (c->status) goto fail;
    for (i = 0; i < nc; i++) {
        tj_node *v = co[i] ? tj__capture(b, co[i]) : NULL;
        if (!v) {
            tj__err(c, TJ_ERR_ARG, f, l, "%s: the body returned no carry %d", op, i);
            goto fail;
        }
        if (!tj__same_axes(&v->t, &init[i]->t)) {
            char b2[256];
            tj__err(c, TJ_ERR_SHAPE, f, l, "%s: carry %d goes in as %s but the body returns %s", op, i, tj_v_describe(init[i], b1, sizeof b1), tj_v_describe(v, b2, sizeof b2));
            goto fail;
        }
        if (v->t.vary & ~init[i]->t.vary) { /* shard_map: the carry's type must not change across iterations */
            char b2[256], mb[64];
            tj__err(c, TJ_ERR_ARG, f, l, "%s: carry %d goes in as %s but the body returns %s, which varies over %s too: pvary the initial value (tj_pvary)", op, i,
                    tj_v_describe(init[i], b1, sizeof b1), tj_v_describe(v, b2, sizeof b2), tj__mesh_names(c, v->t.vary & ~init[i]->t.vary, mb, sizeof mb));
            goto fail;
        }
        if (init[i]->t.vary & ~v->t.vary) { /* nor become less varying: JAX's types must be equal too */
            char b2[256], mb[64];
            tj__err(c, TJ_ERR_ARG, f, l, "%s: carry %d goes in as %s but the body returns %s, which does not vary over %s: the carry's type must not change "
                    "(pvary the value the body returns, tj_pvary, or psum the initial value)", op, i, tj_v_describe(init[i], b1, sizeof b1), tj_v_describe(v, b2, sizeof b2),
                    tj__mesh_names(c, init[i]->t.vary & ~v->t.vary, mb, sizeof mb));
            goto fail;
        }
        if (tj__body_add_out(b, tj__fit(f, l, v, &init[i]->t))) goto oom;
    }
    for (i = 0; i < ny; i++) {
        tj_node *v = yo[i] ? tj__capture(b, yo[i]) : NULL;
        if (!v) {
            tj__err(c, TJ_ERR_ARG, f, l, "%s: the body returned no y %d", op, i);
            goto fail;
        }
        if (tj__axis_index(&v->t, ax) >= 0 || v->t.rank >= TJ_MAXDIM) {
            tj__err(c, TJ_ERR_AXIS, f, l, "%s: y %d %s already has the scanned axis '%s' (or too many axes)", op, i, tj_v_describe(v, b1, sizeof b1), tj__name(c, ax));
            goto fail;
        }
        if (tj__body_add_out(b, v)) goto oom;
    }
    if (c->status) goto fail;
    /* stacked xs with the scanned axis leading, so a slice is contiguous */
    for (i = 0; i < nx; i++) {
        tj__type lt = tj__type_lead(&xs[i]->t, ax, len);
        int k = tj__axis_index(&xs[i]->t, ax);
        xr[i] = xs[i];
        if (xs[i]->t.sh[k]) { /* each device runs every iteration */
            uint8_t sh[TJ_MAXDIM];
            memcpy(sh, xs[i]->t.sh, sizeof sh);
            sh[k] = 0;
            xr[i] = tj__reshard(xs[i], sh, op, f, l);
        }
        if (xr[i] && xr[i]->t.ax[0] != ax) xr[i] = tj__relayout(f, l, xr[i], &lt);
        if (!xr[i]) goto fail;
    }
    n = tj__scan_node(f, l, g, b, ax, len, reverse, nc, init, nx, xr, ny, policy, NULL);
    tj__graph_free(b); /* the node holds its own reference */
    if (!n) return c->status ? c->status : TJ_ERR_OOM;
    for (i = 0; i < nc; i++) final[i] = n->proj[i];
    for (i = 0; i < ny; i++) ys[i] = n->proj[nc + i];
    return TJ_OK;
oom:
    tj__err(c, TJ_ERR_OOM, f, l, "%s: out of memory", op);
fail:
    tj__graph_free(b);
    return c->status ? c->status : TJ_ERR_ARG;
}

/* checkpoint = scan over a private axis of length one */
typedef struct {
    tj_region_fn fn;
    void *user;
    int nin, nout;
    const tj_v *in;
    const char *file; /* the tj_checkpoint call, for messages */
    int line;
} tj__region;
static void tj__region_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    tj__region *r = (tj__region *)u;
    tj_v cin_s[64], *cin = cin_s;
    int i;
    (void)carry; (void)x; (void)carry_out;
    if (r->nin > 64 && !(cin = (tj_v *)tj__malloc(sizeof(tj_v) * (size_t)r->nin))) {
        tj__err(g->ctx, TJ_ERR_OOM, r->file, r->line, "checkpoint: out of memory for %d inputs", r->nin);
        return;
    }
    for (i = 0; i < r->nin; i++) /* capture the inputs, so fn's ops are traced into the body */
        if (!(cin[i] = tj__capture(g, r->in[i]))) break;
    if (i == r->nin) r->fn(g, cin, y, r->user);
    if (cin != cin_s) TJ_FREE(cin);
    if (i < r->nin) return;
    for (i = 0; i < r->nout; i++) /* say it in the caller's words before the scan does */
        if (!y[i] && g->ctx->status == TJ_OK) tj__err(g->ctx, TJ_ERR_ARG, r->file, r->line, "checkpoint: fn returned no output %d (out[%d] is NULL)", i, i);
}
TJDEF tj_status tj_checkpoint_at(const char *f, int l, tj_region_fn fn, void *user, int nin, const tj_v *in, int nout, tj_v *out, const tj_policy *policy) {
    tj__region r;
    tj_status st;
    tj_graph *g = NULL;
    int i, ax;
    for (i = 0; i < nin && !g; i++) if (in && in[i]) g = in[i]->g;
    if (!g) {
        if (nin < 1 || !in) tj__err(tj__tracing_ctx(), TJ_ERR_ARG, f, l, "checkpoint: %d inputs%s (at least 1)", nin, in ? "" : ", and the list in is NULL");
        return TJ_ERR_ARG;
    }
    if (!fn || nout < 1 || !out || nin < 0) {
        tj__err(g->ctx, TJ_ERR_ARG, f, l, "checkpoint: bad arguments (%d inputs, %d outputs; at least 1 output)", nin, nout);
        return TJ_ERR_ARG;
    }
    for (i = 0; i < nin; i++) if (!in[i]) return tj__null_input(g->ctx, "checkpoint", "input", i, f, l);
    r.fn = fn;
    r.user = user;
    r.nin = nin;
    r.nout = nout;
    r.in = in;
    r.file = f;
    r.line = l;
    st = tj__scan(f, l, g, tj__region_body, &r, "_remat=1", 0, NULL, 0, NULL, nout, NULL, out, policy, 0); /* the stacked ys, reshaped in place */
    if (st) return st;
    ax = tj__intern(g->ctx, "_remat", 6);
    for (i = 0; i < nout; i++) {
        tj__type t = tj__type_drop(&out[i]->t, ax);
        out[i] = tj__reshape(f, l, out[i], &t);
        if (!out[i]) {
            for (; i < nout; i++) out[i] = NULL;
            return g->ctx->status;
        }
    }
    return TJ_OK;
}

/* ---- shard_map: a scan of length one over a manual body ----
   Each input is resharded to its in_spec and gets a leading axis of size
   one, so the scan machinery (residuals, policies, the reverse scan) works
   unchanged. The body's parameters are the local blocks, varying over the
   mesh axes the in_spec names. Each output's outer type is the block
   scaled up by its out_spec. Residuals that the backward pass needs are
   per-device values in the outer graph: their type keeps the body's vary
   set and no sharding, so each device stores exactly its own block. */
typedef struct {
    tj_region_fn fn;
    void *user;
    int nout;
} tj__smap;
static void tj__smap_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    tj__smap *s = (tj__smap *)u;
    (void)carry; (void)carry_out;
    s->fn(g, x, y, s->user);
}
/* the sharding a spec gives a block of local type t (every axis it names
   is scaled up, so divisibility is not in question) */
static int tj__out_spec(tj_ctx *c, const char *spec, const tj__type *t, uint8_t *sh, int i, const char *f, int l) {
    tj__type big = *t;
    int k;
    char what[64];
    snprintf(what, sizeof what, "shard_map out_specs[%d]", i);
    for (k = 0; k < big.rank; k++) big.dim[k] *= c->ndev;
    return tj__parse_spec(c, spec, &big, sh, 1, what, f, l);
}
TJDEF tj_status tj_shard_map_at(const char *f, int l, tj_region_fn fn, void *user, int nin, const tj_v *in, const char *const *in_specs, int nout,
                                tj_v *out, const char *const *out_specs, int check) {
    tj_graph *g = NULL, *b = NULL;
    tj_ctx *c;
    tj_node *xs[32], *xp[32], *yo[32], *n;
    tj__type yt[32], gt[32];
    tj__smap s;
    int i, ax;
    char b1[256], what[64];
    for (i = 0; out && i < nout && i < 32; i++) out[i] = NULL;
    for (i = 0; i < nin && !g; i++) if (in && in[i]) g = in[i]->g;
    if (!g) {
        if (nin < 1 || !in) tj__err(tj__tracing_ctx(), TJ_ERR_ARG, f, l, "shard_map: %d inputs%s (1..32)", nin, in ? "" : ", and the list in is NULL");
        return TJ_ERR_ARG;
    }
    c = g->ctx;
    if (c->status) return c->status;
    if (!fn || nin < 1 || nin > 32 || nout < 1 || nout > 32 || !out || !in_specs || !out_specs) {
        tj__err(c, TJ_ERR_ARG, f, l, "shard_map: bad arguments (%d inputs, %d outputs: 1..32 each, with a spec for each)", nin, nout);
        return TJ_ERR_ARG;
    }
    if (!c->nmesh) {
        tj__err(c, TJ_ERR_STATE, f, l, "shard_map: no mesh (tj_set_mesh)");
        return TJ_ERR_STATE;
    }
    for (i = 0; i < nin; i++) {
        if (!in[i]) return tj__null_input(c, "shard_map", "input", i, f, l);
        if (in[i]->g->manual || g->manual) {
            tj__err(c, TJ_ERR_UNSUPPORTED, f, l, "shard_map: a shard_map inside another one is not supported");
            return TJ_ERR_UNSUPPORTED;
        }
    }
    if (!(g = tj__cur(tj__inner(nin, in, "shard_map", f, l)))) return c->status;
    ax = tj__intern(c, "_shard_map", 10);
    /* the inputs: resharded to their specs, with the scanned axis of one */
    for (i = 0; i < nin; i++) {
        uint8_t sh[TJ_MAXDIM];
        tj__type lt;
        tj_node *x = tj__capture(g, in[i]);
        snprintf(what, sizeof what, "shard_map in_specs[%d]", i);
        if (!x || tj__parse_spec(c, in_specs[i], &x->t, sh, 1, what, f, l)) return c->status ? c->status : TJ_ERR_ARG;
        if (x->t.vary) {
            tj__err(c, TJ_ERR_ARG, f, l, "shard_map: input %d %s is a per-device value", i, tj_v_describe(x, b1, sizeof b1));
            return TJ_ERR_ARG;
        }
        if (!(x = tj__spec_reorder(f, l, x, in_specs[i], 1)) || !(x = tj__reshard(x, sh, "shard_map in_specs", f, l))) return c->status;
        lt = tj__type_lead(&x->t, ax, 1);
        if (!(xs[i] = tj__reshape(f, l, x, &lt))) return c->status;
    }
    /* trace the body once on local blocks */
    if (!(b = tj__graph_new(c, f, l))) return c->status;
    b->parent = g;
    b->manual = 1;
    b->check = check != 0;
    for (i = 0; i < nin; i++) {
        tj__type lt = tj__type_drop(&xs[i]->t, ax);
        unsigned v = tj__sh_used(lt.sh, lt.rank);
        lt = tj__local(c, &lt);
        lt.vary = check ? (uint8_t)v : 0;
        if (!(xp[i] = tj__node(b, TJ__OP_PARAM, &lt, 0, NULL, NULL, f, l)) || tj__add_param(b, xp[i])) goto fail;
        xp[i]->name = tj__strdup("block");
    }
    for (i = 0; i < 32; i++) yo[i] = NULL;
    s.fn = fn;
    s.user = user;
    s.nout = nout;
    {
        tj_graph *saved = c->cur;
        c->cur = b;
        tj__smap_body(b, NULL, xp, NULL, yo, &s);
        c->cur = saved;
    }
    if (c->status) goto fail;
    /* the outputs: blocks laid out by their specs */
    for (i = 0; i < nout; i++) {
        tj_node *v = yo[i] ? tj__capture(b, yo[i]) : NULL;
        uint8_t sh[TJ_MAXDIM];
        unsigned spread;
        int k;
        if (!v) {
            if (!c->status) tj__err(c, TJ_ERR_ARG, f, l, "shard_map: the function returned no output %d", i);
            goto fail;
        }
        if (v->t.rank >= TJ_MAXDIM) {
            tj__err(c, TJ_ERR_SHAPE, f, l, "shard_map: output %d %s has too many axes", i, tj_v_describe(v, b1, sizeof b1));
            goto fail;
        }
        if (tj__out_spec(c, out_specs[i], &v->t, sh, i, f, l)) goto fail;
        spread = tj__sh_used(sh, v->t.rank);
        if (check && (v->t.vary & ~spread)) {
            char mb[64];
            tj__err(c, TJ_ERR_SHAPE, f, l,
                    "shard_map: output %d %s varies over %s, but out_specs[%d] \"%s\" replicates it there: psum it over %s, or name %s in the spec", i,
                    tj_v_describe(v, b1, sizeof b1), tj__mesh_names(c, v->t.vary & ~spread, mb, sizeof mb), i, out_specs[i], mb, mb);
            goto fail;
        }
        if (check && (spread & ~v->t.vary)) {
            /* a spec that splits an output over mesh axes it is invariant
               over: each device returns its copy as its block, a pvary (as in
               JAX), whose transpose sums the blocks' cotangents */
            char why[160], mb[64];
            snprintf(why, sizeof why, "out_specs[%d] \"%.40s\" splits output %d over %s, which it does not vary over", i, out_specs[i], i,
                     tj__mesh_names(c, spread & ~v->t.vary, mb, sizeof mb));
            if (!(v = tj__pvary(v, spread & ~v->t.vary, why, f, l))) goto fail;
        }
        gt[i] = v->t;
        gt[i].vary = 0;
        for (k = 0; k < v->t.rank; k++) {
            gt[i].sh[k] = sh[k];
            gt[i].dim[k] *= tj__mesh_count(c, sh[k]);
        }
        yt[i] = tj__type_lead(&gt[i], ax, 1);
        if (tj__body_add_out(b, v)) goto fail;
    }
    n = tj__scan_node(f, l, g, b, ax, 1, 0, 0, NULL, nin, xs, nout, NULL, yt);
    tj__graph_free(b); /* the node holds its own reference */
    if (!n) return c->status ? c->status : TJ_ERR_OOM;
    for (i = 0; i < nout; i++)
        if (!(out[i] = tj__reshape(f, l, n->proj[i], &gt[i])) || !(out[i] = tj__spec_reorder(f, l, out[i], out_specs[i], 0))) return c->status;
    return TJ_OK;
fail:
    tj__graph_free(b);
    return c->status ? c->status : TJ_ERR_ARG;
}

/* scratch: the body's device arena, then one buffer per carry: the carry
   ping-pongs between it and the final output's buffer */
static int64_t tj__carry_bytes(const tj_node *n) {
    int64_t s = 0;
    int i;
    for (i = 0; i < n->a.ncarry; i++) s += tj__align(tj__lbytes(n->g->ctx, &n->proj[i]->t));
    return s;
}
/* two device staging buffers per x that lives in host memory (prefetch) */
static int64_t tj__stage_bytes(const tj_node *n) {
    int64_t s = 0;
    int i;
    for (i = 0; i < n->a.nx; i++)
        if (n->in[n->a.ncarry + i]->space == TJ_SPACE_HOST) s += 2 * tj__align(tj__lbytes(n->g->ctx, &n->in[n->a.ncarry + i]->t) / n->a.length);
    return s;
}
static int64_t tj__scan_scratch(const tj_node *n) {
    int64_t body = n->sub->prog ? n->sub->prog->arena_bytes[TJ_SPACE_DEVICE] : 0;
    return tj__align(body) + tj__carry_bytes(n) + tj__stage_bytes(n);
}
static double tj__flops_scan(const tj_node *n) { return n->sub->prog ? n->sub->prog->flops * n->a.length : 0; }
static tj_status tj__run_body(tj_prog *p, void **args, void **outs, char **arena, char *err, int nthreads, int dev, struct tj__rdv *rdv);
static void tj__pend_copy(tj__kern *k, const void *dst, const void *src, int64_t n);
static void tj__dev_copy_async(tj__kern *k, void *dst, int dspace, const void *src, int sspace, int64_t n, const char *what);
/* A copy the runner makes on device k->dev's compute stream (a final
   carry), after the copy-stream copies it touches ([11] tj__pend_copy): a
   backend copy, or memcpy on the CPU backend. A copy that cannot be issued
   is the node's error. Offload, fetch and staged slices go to the copy
   stream instead ([11] tj__dev_copy_async). */
static void tj__dev_copy(tj__kern *k, void *dst, int dspace, const void *src, int sspace, int64_t n) {
    tj_ctx *c = k->ctx;
    if (n <= 0 || dst == src) return;
    tj__pend_copy(k, dst, src, n);
    if (!c->backend) memcpy(dst, src, (size_t)n);
    else if (c->backend->copy(c->backend, k->dev, dst, dspace, src, sspace, (size_t)n) && !k->err[0])
        snprintf(k->err, TJ__MSG, "%s: backend '%s' could not copy %lld bytes on device %d (at %s:%d)", tj__opname(k->n->op), c->backend->name,
                 (long long)n, k->dev, tj__base(k->n->file), k->n->line);
}
/* The runner's scan ([11] calls it for every backend): the body's schedule
   once per iteration on the parent's workspace; every move of bytes is a
   runner copy, every node of the body a backend call, so a backend needs no
   scan kernel of its own. */
static void tj__k_scan(tj__kern *k) {
    tj_node *n = k->n;
    tj_prog *bp = n->sub->prog;
    int nc = n->a.ncarry, nx = n->a.nx, ncap = n->a.ncap, ny = n->nproj - nc, i, s;
    int np = n->sub->nparam;
    /* the tables, sized by the node: on the stack up to these counts (every
       scan but a big one), else one heap block for this run */
    void *args_s[128], *outs_s[128], *buf_s[32][2];
    int par_s[32];
    char *stage_s[64][2];
    int64_t xsl_s[64], ysl_s[128];
    void **args = args_s, **outs = outs_s, *(*buf)[2] = buf_s;
    int *par = par_s;
    char *(*stage)[2] = stage_s;
    int64_t *xsl = xsl_s, *ysl = ysl_s;
    char *heap = NULL;
    char *arena[2];
    char *carry0 = (char *)k->scratch + tj__align(bp->arena_bytes[TJ_SPACE_DEVICE]);
    int64_t off = 0;
    if (np > 128 || n->nproj > 128 || nx > 64 || nc > 32 || ny > 128) {
        size_t na = (size_t)np + 1, no = (size_t)n->nproj + 1, nb = (size_t)nc + 1, ns = (size_t)nx + 1, ny1 = (size_t)ny + 1;
        /* pointers first, then the int64s, then the ints (each part aligned for what follows) */
        if (!(heap = (char *)tj__malloc(sizeof(void *) * (na + no + 2 * nb + 2 * ns) + sizeof(int64_t) * (ns + ny1) + sizeof(int) * nb))) {
            if (!k->err[0])
                snprintf(k->err, TJ__MSG, "scan: out of memory for the tables of a body of %d parameters and %d outputs (at %s:%d)", np, n->nproj,
                         tj__base(n->file), n->line);
            return;
        }
        args = (void **)heap;
        outs = args + na;
        buf = (void *(*)[2])(outs + no);
        stage = (char *(*)[2])(buf + nb);
        xsl = (int64_t *)(stage + ns);
        ysl = xsl + ns;
        par = (int *)(ysl + ny1);
    }
    arena[TJ_SPACE_DEVICE] = (char *)k->scratch;
    arena[TJ_SPACE_HOST] = (char *)k->scratch_host;
    for (i = 0; i < nc; i++) {
        /* iteration s writes buf[i][(s + par) & 1]; par makes the last one
           write the output, unless the output is the initial carry's buffer
           (donated), which the first iteration reads while it writes */
        buf[i][0] = carry0 + off;
        buf[i][1] = k->pout[i];
        par[i] = k->pout[i] == k->in[i] ? 0 : n->a.length & 1;
        off += tj__align(tj__lbytes(n->g->ctx, &n->proj[i]->t));
    }
    for (i = 0; i < np; i++) args[i] = NULL; /* cotangent params of a differentiated body are unused here */
    for (i = 0; i < ncap; i++) args[nc + nx + i] = (void *)k->in[nc + nx + i];
    for (i = 0; i < nx; i++) xsl[i] = tj__bytes(k->it[nc + i]) / n->a.length;
    for (i = 0; i < ny; i++) ysl[i] = tj__lbytes(n->g->ctx, &n->proj[nc + i]->t) / n->a.length;
    {   /* xs in host memory (offloaded residuals) are staged into device
           buffers on the copy stream, the next iteration's slice copied
           while this one runs (the body waits for its own: [11]) */
        char *st = carry0 + tj__carry_bytes(n);
        for (i = 0; i < nx; i++) {
            stage[i][0] = stage[i][1] = NULL;
            if (n->in[nc + i]->space != TJ_SPACE_HOST) continue;
            stage[i][0] = st;
            stage[i][1] = st + tj__align(xsl[i]);
            st += 2 * tj__align(xsl[i]);
            if (n->a.length)
                tj__dev_copy_async(k, stage[i][0], TJ_SPACE_DEVICE, (const char *)k->in[nc + i] + (n->a.reverse ? n->a.length - 1 : 0) * xsl[i],
                                   TJ_SPACE_HOST, xsl[i], "prefetch");
        }
    }
    for (s = 0; s < n->a.length; s++) {
        int t = n->a.reverse ? n->a.length - 1 - s : s;
        int tn = n->a.reverse ? t - 1 : t + 1;
        for (i = 0; i < nc; i++) {
            args[i] = s == 0 ? (void *)k->in[i] : buf[i][(s - 1 + par[i]) & 1];
            outs[i] = buf[i][(s + par[i]) & 1];
        }
        for (i = 0; i < nx; i++) {
            if (!stage[i][0]) {
                args[nc + i] = (char *)k->in[nc + i] + t * xsl[i];
                continue;
            }
            args[nc + i] = stage[i][s & 1];
            if (s + 1 < n->a.length) /* prefetch: after iteration s - 1, which read this buffer */
                tj__dev_copy_async(k, stage[i][(s + 1) & 1], TJ_SPACE_DEVICE, (const char *)k->in[nc + i] + tn * xsl[i], TJ_SPACE_HOST, xsl[i],
                                   "prefetch");
        }
        for (i = 0; i < ny; i++) outs[nc + i] = (char *)k->pout[nc + i] + t * ysl[i];
        tj__run_body(bp, args, outs, arena, k->err, k->nthreads, k->dev, k->rdv); /* after an error the rest runs dry ([11]) */
    }
    for (i = 0; i < nc; i++) {
        const void *last = n->a.length ? buf[i][(n->a.length - 1 + par[i]) & 1] : k->in[i];
        if (last != k->pout[i])
            tj__dev_copy(k, k->pout[i], n->proj[i]->space, last, n->a.length ? TJ_SPACE_DEVICE : n->in[i]->space, tj__lbytes(n->g->ctx, &n->proj[i]->t));
    }
    if (heap) TJ_FREE(heap);
}
/* offload and fetch: a move between memory spaces, which the runner makes
   on every backend, on the copy stream where the backend has one */
static void tj__k_memcpy(tj__kern *k) { tj__dev_copy_async(k, k->out, k->n->space, k->in[0], k->n->in[0]->space, tj__bytes(&k->ot), NULL); }

/* ==== [8] remat and offload policies ===================================== */
/* The VJP rule of scan is where policies act. It differentiates the body
   in place (the body graph becomes the joint forward+backward graph), then
   builds the backward body by cloning the backward nodes. Each forward
   value a cloned node needs is a residual, and the policy decides it:
     save       the forward body returns it; the scan stacks it per iteration
     offload    the forward body returns offload(it), stacked in host memory;
                the backward body fetches each slice back before use
     recompute  its producer is cloned into the backward body (recursively,
                down to saved values, xs and captured weights)
   A carry cannot be recomputed inside one iteration, so "recompute" on a
   carry means save (and the report says so); it can be offloaded. A saved
   value that depends only on captured values and constants (loop-
   invariant) is computed once more outside the scan and captured by the
   backward body: one copy, not a stack (JAX hoists it too); an offloaded
   one is offloaded once there, one host copy, and each backward iteration
   fetches it back.
   Nested regions (tj_checkpoint inside a region or a scan with a policy),
   as JAX's partial evaluation of a nested jax.checkpoint: the outermost
   policy judges every value the backward pass needs, also those computed
   inside nested regions. An output of a nested region is judged as the
   value inside it that it stands for (tj__region_value); recomputed, that
   value is cloned from its producers inside the region (tj__through, a
   walker per nested body), where the values the outer policy keeps are
   returned by the region and kept. Each region also keeps, for its own
   backward pass, what an enclosing policy saves or offloads
   (tj__decide_nested), and its own policy decides the rest: what its
   backward pass keeps when the enclosing backward pass recomputes it.
   Those rows of the report are marked nested.
   Nested scans and shard_map bodies (tj__see_into_scan), as JAX's
   partial evaluation of scan under an enclosing jax.checkpoint: an output
   of a nested scan is judged as the value its body returns for it (a
   stacked carry by the value the body returns for that carry, through
   views). What the policy keeps the nested scan returns stacked and the
   enclosing walker keeps (saved or offloaded whole); for the rest the
   enclosing backward body runs a scan of its own over the same
   iterations, in the nested scan's direction (tj__rerun_scan), whose body a re-run walker clones from the
   nested body: kept values are read one slice per iteration, everything
   else (carries included) is recomputed. The nested scan's own VJP keeps
   what the enclosing policy keeps (tj__enclosing reaches it), and at
   compile the forward scan stops returning the stacks nobody reads any
   more (tj__drop_reran_outputs). An output of a tj_custom_vjp is the
   value its fwd made: judged as that value. A tj_custom kernel is re-run
   where its outputs are recomputed (JAX re-runs any primitive). */

TJDEF tj_policy tj_everything_saveable(void) {
    tj_policy p;
    memset(&p, 0, sizeof p);
    p.kind = TJ_POLICY_EVERYTHING_SAVEABLE;
    return p;
}
TJDEF tj_policy tj_nothing_saveable(void) {
    tj_policy p = tj_everything_saveable();
    p.kind = TJ_POLICY_NOTHING_SAVEABLE;
    return p;
}
TJDEF tj_policy tj_dots_saveable(void) {
    tj_policy p = tj_everything_saveable();
    p.kind = TJ_POLICY_DOTS_SAVEABLE;
    return p;
}
TJDEF tj_policy tj_dots_with_no_batch_dims_saveable(void) {
    tj_policy p = tj_everything_saveable();
    p.kind = TJ_POLICY_DOTS_NO_BATCH_SAVEABLE;
    return p;
}
TJDEF tj_policy tj_save_only_these_names(const char *names) {
    tj_policy p = tj_everything_saveable();
    p.kind = TJ_POLICY_SAVE_ONLY_THESE_NAMES;
    p.names = names;
    return p;
}
TJDEF tj_policy tj_save_any_names_but_these(const char *names) {
    tj_policy p = tj_everything_saveable();
    p.kind = TJ_POLICY_SAVE_ANY_NAMES_BUT_THESE;
    p.names = names;
    return p;
}
TJDEF tj_policy tj_save_and_offload_only_these_names(const char *save, const char *offload) {
    tj_policy p = tj_everything_saveable();
    p.kind = TJ_POLICY_SAVE_AND_OFFLOAD_ONLY_THESE_NAMES;
    p.names = save;
    p.offload_names = offload;
    return p;
}
TJDEF tj_policy tj_save_from_both(const tj_policy *a, const tj_policy *b) {
    tj_policy p = tj_everything_saveable();
    p.kind = TJ_POLICY_SAVE_FROM_BOTH;
    p.a = a;
    p.b = b;
    return p;
}
TJDEF tj_policy tj_offload_dot_with_no_batch_dims(void) {
    tj_policy p = tj_everything_saveable();
    p.kind = TJ_POLICY_OFFLOAD_DOTS_NO_BATCH;
    return p;
}
TJDEF tj_policy tj_policy_from_fn(tj_policy_fn fn, void *user) {
    tj_policy p = tj_everything_saveable();
    p.kind = TJ_POLICY_FN;
    p.fn = fn;
    p.user = user;
    return p;
}
static int tj__in_list(const char *list, const char *name) {
    size_t n = name ? strlen(name) : 0;
    const char *s = list;
    if (!list || !n) return 0;
    while (*s) {
        size_t k;
        while (*s == ' ' || *s == ',') s++;
        k = 0;
        while (s[k] && s[k] != ' ' && s[k] != ',') k++;
        if (k == n && strncmp(s, name, n) == 0) return 1;
        s += k;
    }
    return 0;
}
/* The decision for residual v (named `name`, or ""), with the reason. */
static tj_decision tj__decide(const tj_policy *p, const tj_node *v, const char *name, char *why, size_t wn) {
    char shape[256];
    tj_decision a, b;
    char wa[160], wb[160];
    if (!p) {
        snprintf(why, wn, "no policy: everything saveable");
        return TJ_SAVE;
    }
    switch (p->kind) {
    case TJ_POLICY_EVERYTHING_SAVEABLE: snprintf(why, wn, "everything_saveable"); return TJ_SAVE;
    case TJ_POLICY_NOTHING_SAVEABLE: snprintf(why, wn, "nothing_saveable"); return TJ_RECOMPUTE;
    case TJ_POLICY_DOTS_SAVEABLE:
        snprintf(why, wn, "dots_saveable: %s", v->op == TJ__OP_DOT ? "a dot" : "not a dot");
        return v->op == TJ__OP_DOT ? TJ_SAVE : TJ_RECOMPUTE;
    case TJ_POLICY_DOTS_NO_BATCH_SAVEABLE:
        snprintf(why, wn, "dots_with_no_batch_dims_saveable: %s", v->op != TJ__OP_DOT ? "not a dot" : v->a.nb ? "a dot with batch axes" : "a dot, no batch axes");
        return v->op == TJ__OP_DOT && v->a.nb == 0 ? TJ_SAVE : TJ_RECOMPUTE;
    case TJ_POLICY_OFFLOAD_DOTS_NO_BATCH:
        snprintf(why, wn, "offload_dot_with_no_batch_dims: %s", v->op != TJ__OP_DOT ? "not a dot" : v->a.nb ? "a dot with batch axes" : "a dot, no batch axes");
        return v->op == TJ__OP_DOT && v->a.nb == 0 ? TJ_OFFLOAD : TJ_RECOMPUTE;
    case TJ_POLICY_SAVE_ONLY_THESE_NAMES:
        snprintf(why, wn, "save_only_these_names: %s", tj__in_list(p->names, name) ? "named in the list" : *name ? "name not in the list" : "unnamed");
        return tj__in_list(p->names, name) ? TJ_SAVE : TJ_RECOMPUTE;
    case TJ_POLICY_SAVE_ANY_NAMES_BUT_THESE:
        snprintf(why, wn, "save_any_names_but_these: %s", !*name ? "unnamed" : tj__in_list(p->names, name) ? "excluded by name" : "named, not excluded");
        return *name && !tj__in_list(p->names, name) ? TJ_SAVE : TJ_RECOMPUTE;
    case TJ_POLICY_SAVE_AND_OFFLOAD_ONLY_THESE_NAMES:
        if (tj__in_list(p->names, name)) { snprintf(why, wn, "save_and_offload: '%s' in the save list", name); return TJ_SAVE; }
        if (tj__in_list(p->offload_names, name)) { snprintf(why, wn, "save_and_offload: '%s' in the offload list", name); return TJ_OFFLOAD; }
        snprintf(why, wn, "save_and_offload: %s", *name ? "name in neither list" : "unnamed");
        return TJ_RECOMPUTE;
    case TJ_POLICY_SAVE_FROM_BOTH:
        a = tj__decide(p->a, v, name, wa, sizeof wa);
        b = tj__decide(p->b, v, name, wb, sizeof wb);
        if (a == TJ_SAVE || b == TJ_SAVE) { snprintf(why, wn, "save_from_both: %.120s", a == TJ_SAVE ? wa : wb); return TJ_SAVE; }
        if (a == TJ_OFFLOAD || b == TJ_OFFLOAD) { snprintf(why, wn, "save_from_both: %.120s", a == TJ_OFFLOAD ? wa : wb); return TJ_OFFLOAD; }
        snprintf(why, wn, "save_from_both: neither saves");
        return TJ_RECOMPUTE;
    case TJ_POLICY_FN:
        tj_v_describe((tj_v)v, shape, sizeof shape);
        snprintf(why, wn, "user policy function");
        if (!p->fn) return TJ_SAVE;
        a = p->fn(tj__ops[v->op].name, name, shape, p->user);
        if ((unsigned)a > (unsigned)TJ_OFFLOAD) { /* saved, and said so */
            tj__err(v->g->ctx, TJ_ERR_ARG, v->file, v->line, "policy function: returned %d for %s (want TJ_SAVE, TJ_RECOMPUTE or TJ_OFFLOAD)", (int)a, shape);
            return TJ_SAVE;
        }
        return a;
    }
    return TJ_SAVE;
}
/* The checkpoint name of v: its own (a name node), or, for a carry
   parameter of body b, the name on the value the body returns for it. */
static const char *tj__resid_name(const tj_node *v, const tj_graph *b, int ncarry) {
    const tj_node *o;
    if (v->op == TJ__OP_NAME) return v->name;
    if (v->op == TJ__OP_PARAM && v->a.index < ncarry && b->nout > v->a.index) {
        for (o = b->outs[v->a.index]; o; o = (tj__ops[o->op].flags & TJ__VIEW) || o->op == TJ__OP_RELAYOUT ? o->in[0] : NULL)
            if (o->op == TJ__OP_NAME) return o->name;
    }
    return "";
}
/* The value body b returns for carry i, seen through views and layout
   changes: what a policy judges when it judges the carry (JAX stages a
   scan's carry when the equation that makes it is not saveable). */
static const tj_node *tj__carry_value(const tj_graph *b, int i) {
    const tj_node *o = b->outs[i];
    while (((tj__ops[o->op].flags & TJ__VIEW) || o->op == TJ__OP_RELAYOUT) && o->nin == 1) o = o->in[0];
    return o;
}
static struct tj__report *tj__report_of(tj_graph *g) {
    while (g->parent) g = g->parent;
    if (!g->report) g->report = (struct tj__report *)tj__calloc(sizeof(struct tj__report));
    return g->report;
}
static void tj__report_add(tj_graph *g, const tj_node *v, const char *name, int64_t bytes, tj_decision d, const char *why, int carry, const tj_node *via) {
    struct tj__report *r = tj__report_of(g);
    tj_residual *row;
    if (!r) return;
    if (r->n == r->cap) {
        int nc = r->cap ? 2 * r->cap : 16;
        tj_residual *nr = (tj_residual *)TJ_REALLOC(r->rows, sizeof(tj_residual) * (size_t)nc);
        if (!nr) return;
        r->rows = nr;
        r->cap = nc;
    }
    row = &r->rows[r->n++];
    memset(row, 0, sizeof *row);
    snprintf(row->name, sizeof row->name, "%s", name);
    snprintf(row->op, sizeof row->op, "%s", tj__ops[v->op].name);
    tj_v_describe((tj_v)v, row->shape, sizeof row->shape);
    row->bytes = bytes;
    row->device_bytes = tj__bytes(&v->t) > 0 ? bytes / tj__bytes(&v->t) * tj__lbytes(v->g->ctx, &v->t) : 0;
    row->decision = d;
    snprintf(row->rule, sizeof row->rule, "%s", why);
    row->file = v->file;
    row->line = v->line;
    row->carry = carry;
    row->nested = r->nested;
    if (via) snprintf(row->via, sizeof row->via, "%s (%s) at %s:%d", via->op == TJ__OP_NAME ? via->name : tj__ops[via->op].name, via->op == TJ__OP_NAME ? "name" : "op",
                      tj__base(via->file), via->line);
}
/* A tj_checkpoint region (a scan of length one, not a shard_map body):
   its enclosing policy sees inside it, and may re-run it. */
static int tj__is_region(const tj_node *s) {
    return s->op == TJ__OP_SCAN && s->a.length == 1 && s->sub && !s->sub->manual;
}
/* Does body b, or a region or scan nested in it, hold a value named nm? */
static int tj__has_name(const tj_graph *b, const char *nm) {
    int i;
    for (i = 0; i < b->n; i++) {
        const tj_node *v = b->nodes[i];
        if ((v->op == TJ__OP_NAME && strcmp(v->name, nm) == 0) || (v->op == TJ__OP_SCAN && v->sub && tj__has_name(v->sub, nm))) return 1;
    }
    return 0;
}
static int tj__see_into(const tj_node *s);
/* A scan autodiff made (a backward scan or region, a re-run): pass > 0, or
   a backward body's clone of one (pass 0 in that body, its body shared
   with the scan that first ran it). */
static int tj__autodiff_made(const tj_node *s) {
    const tj_node *o = s->sub ? s->sub->owner : NULL;
    return s->pass != 0 || (o && o != s && (o->pass != 0 || o->remat));
}
/* A scan nested in a body whose policy sees into it, as JAX's partial
   evaluation of scan under an enclosing jax.checkpoint (its rule applies
   the policy to the equations of the scan's body): a scan or tj_shard_map
   the user wrote (not one autodiff made, not a re-run), other than a
   tj_checkpoint region (tj__see_into's path). Its outputs are judged as
   the values its body returns for them; what the policy recomputes, a
   forward scan (or shard_map) in the enclosing backward body recomputes
   (tj__rerun_scan). */
static int tj__see_into_scan(const tj_node *s) {
    int i, np = 0;
    if (s->op != TJ__OP_SCAN || !s->sub || s->pass != 0 || s->remat || tj__see_into(s)) return 0;
    if (tj__autodiff_made(s)) return 0;
    for (i = 0; i < s->sub->nparam; i++) np += s->sub->params[i]->pass == 0;
    return np == s->a.ncarry + s->a.nx + s->a.ncap && s->sub->nout == s->nproj;
}
/* Nested regions, as in JAX: the outermost policy judges every value the
   backward pass needs, those computed inside nested regions too (an
   outer save_only_these_names("h") keeps an "h" named inside a region
   whose own policy is nothing_saveable); each nested region's policy
   decides what its own backward pass keeps when the enclosing backward
   pass re-runs it. The policies that judge the residuals of region or
   scan s besides its own: those of the regions, scans and shard_map
   bodies around it, nearest first, up to and including the first one its
   own enclosing policy cannot see into (a scan autodiff made). */
static int tj__enclosing(const tj_node *s, const tj_policy **out, int max) {
    const tj_graph *g = s->g;
    int n = 0;
    if (s->pass != 0 || !(tj__is_region(s) || tj__see_into_scan(s))) return 0;
    while (g && g->owner) {
        const tj_node *o = g->owner;
        if (o->policy && n == max) return -1; /* (more enclosing policies than the table: the caller's error) */
        if (o->policy) out[n++] = o->policy;
        if (!tj__is_region(o) && !tj__see_into_scan(o)) break; /* (a scan or shard_map the enclosing policy sees into: on to its own enclosing one) */
        g = g->parent;
    }
    return n;
}
/* The value an output v of a nested region stands for: the value its body
   returns (through regions nested in it), or v itself. */
/* Can a walker see into region s: is every parameter of its body a capture
   (a tj_checkpoint's)? A region that autodiff built (a region's backward
   pass, met again by a second derivative) has slice parameters instead,
   which the walker cannot map to the region's inputs: it is re-run whole. */
static int tj__see_into(const tj_node *s) {
    int i, k, ok;
    if (!tj__is_region(s)) return 0;
    for (i = 0; i < s->sub->n; i++) {
        const tj_node *p = s->sub->nodes[i];
        if (p->op != TJ__OP_PARAM || p->pass != 0) continue;
        for (k = 0, ok = 0; k < s->sub->ncap && !ok; k++) ok = s->sub->cap_param[k] == p;
        if (!ok) return 0;
    }
    return 1;
}
static const tj_node *tj__region_value(const tj_node *v) {
    while (v->op == TJ__OP_PROJ && tj__see_into(v->in[0]) && v->a.index < v->in[0]->sub->nout) {
        const tj_node *o = v->in[0]->sub->outs[v->a.index];
        if (o->op == TJ__OP_TO_HOST) o = o->in[0];
        if (o->op == TJ__OP_PARAM) break;
        v = o;
    }
    return v;
}
/* Lint: every name a policy lists must be carried by some residual it saw. */
static void tj__lint_names(tj_graph *g, const char *list, const char *policy_name, tj_graph *b, int ncarry);
static void tj__lint_policy(tj_graph *g, const tj_policy *p, tj_graph *b, int ncarry, int first_row) {
    struct tj__report *r = tj__report_of(g);
    int i, changed = 0;
    if (!p || !r) return;
    if (p->kind == TJ_POLICY_SAVE_FROM_BOTH) {
        tj__lint_policy(g, p->a, b, ncarry, r->n);
        tj__lint_policy(g, p->b, b, ncarry, r->n);
    }
    if (p->kind == TJ_POLICY_SAVE_AND_OFFLOAD_ONLY_THESE_NAMES && p->names && p->offload_names) { /* JAX raises this too */
        const char *s = p->names;
        while (*s) {
            size_t k = 0;
            char nm[64];
            while (*s == ' ' || *s == ',') s++;
            while (s[k] && s[k] != ' ' && s[k] != ',') k++;
            if (!k) break;
            snprintf(nm, sizeof nm, "%.*s", (int)(k < 63 ? k : 63), s);
            if (tj__in_list(p->offload_names, nm)) {
                tj__err(g->ctx, TJ_ERR_ARG, b->file, b->line, "save_and_offload_only_these_names: '%s' is in both the save list (\"%s\") and the offload list (\"%s\")", nm,
                        p->names, p->offload_names);
                return;
            }
            s += k;
        }
    }
    tj__lint_names(g, p->names, "names", b, ncarry);
    tj__lint_names(g, p->offload_names, "offload names", b, ncarry);
    if (p->offload_dst && strcmp(p->offload_dst, "host") != 0 && strcmp(p->offload_dst, "pinned_host") != 0) {
        tj__err(g->ctx, TJ_ERR_ARG, b->file, b->line, "scan policy: unknown memory space '%s' to offload to (use \"host\" or \"pinned_host\")", p->offload_dst);
        return;
    }
    for (i = first_row; i < r->n; i++) changed |= r->rows[i].decision != TJ_SAVE;
    if (!changed && p->kind != TJ_POLICY_EVERYTHING_SAVEABLE && first_row < r->n) {
        size_t m = strlen(r->lint);
        snprintf(r->lint + m, sizeof r->lint - m, "the policy of the scan at %s:%d saves every residual: it changes nothing\n", tj__base(b->file), b->line);
        r->nlint++;
    }
}
static void tj__lint_names(tj_graph *g, const char *list, const char *policy_name, tj_graph *b, int ncarry) {
    struct tj__report *r = tj__report_of(g);
    const char *s = list;
    if (!r || !list) return;
    while (*s) {
        size_t k = 0, m;
        int found = 0, i;
        char nm[64];
        while (*s == ' ' || *s == ',') s++;
        while (s[k] && s[k] != ' ' && s[k] != ',') k++;
        if (!k) break;
        snprintf(nm, sizeof nm, "%.*s", (int)(k < 63 ? k : 63), s);
        for (i = 0; i < b->n && !found; i++) {
            const tj_node *v = b->nodes[i];
            found = (v->op == TJ__OP_NAME && strcmp(v->name, nm) == 0) || (v->op == TJ__OP_PARAM && strcmp(tj__resid_name(v, b, ncarry), nm) == 0) ||
                    (v->op == TJ__OP_SCAN && v->sub && tj__has_name(v->sub, nm)); /* the policy sees inside nested regions, scans and shard_map bodies */
        }
        if (!found) {
            m = strlen(r->lint);
            snprintf(r->lint + m, sizeof r->lint - m, "policy %s names '%s', but no value in the scan body (%s:%d) carries that name\n", policy_name, nm,
                     tj__base(b->file), b->line);
            r->nlint++;
            /* the user asked for something that cannot happen: say so at tj_jit, not only in tj_prog_lint */
            tj__warn(g->ctx, b->file, b->line, "remat policy: no value in the scan or checkpoint body carries the name '%s' (from the policy's %s)", nm, policy_name);
        }
        s += k;
    }
}

/* ---- the VJP of scan ---- */
typedef struct tj__bwd_s {
    tj_graph *b, *bk;     /* forward (now joint) body, backward body          */
    tj_node *scan;        /* the forward scan node in the outer graph         */
    tj_node **map;        /* body node id -> backward-body node               */
    int nmap;
    const tj_policy *policy;
    int nc, nx;
    /* the backward scan's xs, in order: (outer stacked value, body slice param) */
    tj_node **bx_outer, **bx_param; /* (grown by tj__bk_xparam) */
    int nbx, capbx;
    tj_node *via;         /* the forward value being recomputed right now     */
    int *row;             /* body node id -> its residual report row, or -1  */
    signed char *inv;     /* body node id -> loop-invariant? (-1: not yet known) */
    tj_node **hoist;      /* body node id -> its copy in the enclosing graph  */
    const tj_policy *encl[16]; /* the enclosing policies (tj__enclosing)      */
    int nencl;
    /* a walker of a nested region's body (tj__inner): its values are
       recomputed in the backward body of `up`, whose policy judges them */
    struct tj__bwd_s *up;
    struct tj__bwd_s *kids[16]; /* the walkers of regions nested in b      */
    int nkids;
    /* a re-run walker (tj__rerun_scan): b is the body of a scan nested in
       rr's body, bk the body of the forward scan that rr's backward body
       runs to recompute that scan's outputs; rr's policy judges b's values */
    struct tj__bwd_s *rr;
    tj_node **rcar;       /* its body's carry parameters                     */
    char *rcar_used;      /* carry i's parameter was used                    */
    struct tj__rerun_s { tj_node *s, *n; int *pj; } rrs[8]; /* scans nested in b re-run in bk: s's output j is n's pj[j] (-1: not made) */
    int nrrs;
    const tj_node *forcing; /* the nested scan whose kept outputs are being captured */
    const tj_node *norow; /* a re-run's output: its row is the enclosing walker's */
    tj_status st;
} tj__bwd;
/* The decision for residual u of the body: its own policy's, but what an
   enclosing policy saves or offloads is kept (on the device: that policy
   decides where it goes when it judges the region's output). */
static tj_decision tj__decide_nested(const tj__bwd *w, const tj_node *u, const char *nm, char *why, size_t wn) {
    tj_decision d = tj__decide(w->policy, u, nm, why, wn);
    int i;
    for (i = 0; i < w->nencl && d != TJ_SAVE; i++) {
        char ew[160];
        tj_decision e = tj__decide(w->encl[i], u, nm, ew, sizeof ew);
        if (e != TJ_RECOMPUTE) {
            size_t m = strlen(why);
            snprintf(why + m, wn - m, "; kept for the enclosing policy (%.80s)", ew);
            d = TJ_SAVE;
        }
    }
    return d;
}

/* Loop-invariant residuals (JAX's scan hoists them): a forward value of a
   scan body that depends only on captured values and constants is the same
   in every iteration. Saved, it is computed once more in the enclosing graph
   and the backward body captures it, instead of a stack of `length` equal
   copies. Random numbers, collectives, nested scans and multi-output ops
   are not treated as invariant. */
static int tj__same_type(const tj__type *a, const tj__type *b); /* in [9] */
static int tj__loop_invariant(tj__bwd *w, const tj_node *v) {
    int i, r = 1;
    if (v->g != w->b || v->id >= w->nmap || v->pass != 0) return 0;
    if (w->inv[v->id] >= 0) return w->inv[v->id];
    if (v->op == TJ__OP_PARAM) r = v->a.index >= w->nc + w->nx;
    else if (v->op == TJ__OP_UNIFORM || v->op == TJ__OP_NORMAL || v->op == TJ__OP_AXIS_INDEX || v->op == TJ__OP_PROJ || v->op == TJ__OP_TO_HOST || v->sub ||
             (tj__ops[v->op].flags & TJ__MULTI) || TJ__IS_COLL(v->op) || v->space != TJ_SPACE_DEVICE || v->t.partial || v->t.vary)
        r = 0;
    else
        for (i = 0; i < v->nin && r; i++) r = tj__loop_invariant(w, v->in[i]);
    w->inv[v->id] = (signed char)r;
    return r;
}
/* The enclosing graph's copy of loop-invariant body value v. */
static tj_node *tj__hoist(tj__bwd *w, tj_node *v) {
    tj_node *in[64], *n = NULL;
    int i, k;
    if (w->hoist[v->id]) return w->hoist[v->id];
    if (v->op == TJ__OP_PARAM) { /* a capture: the enclosing graph's value */
        for (k = 0; k < w->b->ncap && !n; k++)
            if (w->b->cap_param[k] == v) n = v->a.index < w->scan->nin ? w->scan->in[v->a.index] : w->b->cap_outer[k];
        return w->hoist[v->id] = n;
    }
    if (v->nin > 64) return NULL;
    for (i = 0; i < v->nin; i++)
        if (!(in[i] = tj__hoist(w, v->in[i]))) return NULL;
    n = tj__node(w->scan->g, v->op, &v->t, v->nin, in, &v->a, v->file, v->line);
    if (!n || !tj__same_type(&n->t, &v->t) || n->space != v->space) return NULL; /* (the enclosing graph's rules laid it out otherwise: stack it) */
    if (v->name && !(n->name = tj__strdup(v->name))) return NULL;
    return w->hoist[v->id] = n;
}

static tj_node *tj__bk_xparam(tj__bwd *w, tj_node *outer, const tj__type *slice, int space, const char *name) {
    tj_node *p;
    if (w->nbx == w->capbx) {
        int nc = w->capbx ? 2 * w->capbx : 16;
        tj_node **a = (tj_node **)TJ_REALLOC(w->bx_outer, sizeof(tj_node *) * (size_t)nc), **b;
        if (a) w->bx_outer = a;
        b = a ? (tj_node **)TJ_REALLOC(w->bx_param, sizeof(tj_node *) * (size_t)nc) : NULL;
        if (b) w->bx_param = b;
        if (!a || !b) return NULL; /* (the caller's out of memory) */
        w->capbx = nc;
    }
    p = tj__node(w->bk, TJ__OP_PARAM, slice, 0, NULL, NULL, w->scan->file, w->scan->line);
    if (!p || tj__add_param(w->bk, p)) return NULL;
    p->name = tj__strdup(name);
    p->space = space;
    w->bx_outer[w->nbx] = outer;
    w->bx_param[w->nbx++] = p;
    return p;
}
/* An output of a nested tj_checkpoint region (a scan of length one, not a
   shard_map body) that the policy recomputes: the backward body re-runs the
   region, as JAX re-runs a nested jax.checkpoint under the outer policy
   (its residuals and outputs are not kept across the outer region). The
   scans and shard_map bodies the policy sees into are re-run by
   tj__rerun_scan, custom kernels like attention (tj__clone); the rest (a
   scan autodiff made) stays saved. */
static int tj__rerun_region(const tj__bwd *w, const tj_node *v) {
    const tj_node *s = v->in[0];
    return tj__is_region(s) && s->pass == 0 && w->b; /* (an output its own policy offloaded too: the re-run offloads it again) */
}
/* A residual: make the forward body return it (offloaded if so decided),
   and give the backward body a slice parameter for it. */
/* v, or a view of it, is one of body b's outputs */
static int tj__body_returns(const tj_graph *b, const tj_node *v) {
    int i;
    for (i = 0; i < b->nout; i++) {
        const tj_node *x = b->outs[i];
        while (x != v && (tj__ops[x->op].flags & TJ__VIEW) && x->nin == 1) x = x->in[0];
        if (x == v) return 1;
    }
    return 0;
}
static tj_node *tj__residual(tj__bwd *w, tj_node *v, tj_decision d) {
    tj_node *out = v, *p;
    int space = d == TJ_OFFLOAD ? TJ_SPACE_HOST : TJ_SPACE_DEVICE;
    if (w->rr) { /* a re-run walker: the nested scan returns v (stacked, on the
                    device), the enclosing walker keeps that output as its
                    policy decides (saved or offloaded whole), and the re-run
                    scan reads it back one slice per iteration */
        tj_node *s = w->scan, *q = NULL;
        int i;
        for (i = s->a.ncarry; i < w->b->nout && i < s->nproj && !q; i++)
            if (w->b->outs[i] == v && s->proj[i]->space == TJ_SPACE_DEVICE) q = s->proj[i];
        if (!q) {
            tj__type yt = tj__type_lead(&v->t, s->a.axis, s->a.length);
            if (w->b->manual && !w->b->check && !s->g->manual) /* (an unchecked shard_map's residual is per-device all the same) */
                yt.vary = (uint8_t)((1u << w->b->ctx->nmesh) - 1);
            if (tj__body_add_out(w->b, v) || tj__add_proj(s, &yt, TJ_SPACE_DEVICE)) return NULL;
            for (p = s->rerun; p && p != s; p = p->rerun)
                if (tj__add_proj(p, &yt, TJ_SPACE_DEVICE)) return NULL;
            q = s->proj[s->nproj - 1];
        }
        (void)space;
        return tj__bk_xparam(w, q, &v->t, TJ_SPACE_DEVICE, "residual");
    }
    if (w->up) { /* a value inside a nested region: the region returns it (once),
                    and the enclosing body keeps that output as decided */
        tj_node *q = NULL;
        int i;
        for (i = 0; i < w->b->nout && i < w->scan->nproj && !q; i++)
            if (w->b->outs[i] == v && w->scan->proj[i]->space == TJ_SPACE_DEVICE) q = w->scan->proj[i];
        if (!q) {
            tj__type yt = tj__type_lead(&v->t, w->scan->a.axis, 1);
            if (tj__body_add_out(w->b, v) || tj__add_proj(w->scan, &yt, TJ_SPACE_DEVICE)) return NULL;
            for (p = w->scan->rerun; p && p != w->scan; p = p->rerun)
                if (tj__add_proj(p, &yt, TJ_SPACE_DEVICE)) return NULL;
            q = w->scan->proj[w->scan->nproj - 1];
        }
        p = q->id < w->up->nmap && w->up->map[q->id] ? w->up->map[q->id] : tj__residual(w->up, q, d);
        if (p && q->id < w->up->nmap) {
            w->up->map[q->id] = p;
            if (w->up->row && w->row && v->id < w->nmap) w->up->row[q->id] = w->row[v->id]; /* (its row, if the backward pass reads it itself) */
        }
        return p ? tj__reshape(v->file, v->line, p, &v->t) : NULL; /* (drops the length-1 axis) */
    }
    if (d == TJ_OFFLOAD && v->space != TJ_SPACE_HOST) {
        out = tj__node(w->b, TJ__OP_TO_HOST, &v->t, 1, &v, NULL, v->file, v->line);
        if (!out) return NULL;
        out->space = TJ_SPACE_HOST;
        out->pass = 0;
    }
    if (tj__body_add_out(w->b, out)) return NULL;
    {
        tj__type yt = tj__type_lead(&v->t, w->scan->a.axis, w->scan->a.length);
        if (w->b->manual && !w->b->check && !w->scan->g->manual) /* an unchecked shard_map's residual is per-device all the same */
            yt.vary = (uint8_t)((1u << w->b->ctx->nmesh) - 1);
        if (tj__add_proj(w->scan, &yt, space)) return NULL;
        for (p = w->scan->rerun; p && p != w->scan; p = p->rerun) /* the clones that re-run this body return it too (unused) */
            if (tj__add_proj(p, &yt, space)) return NULL;
    }
    /* the backward body sees a device buffer either way: for an offloaded
       residual the reverse scan copies each slice back from host memory one
       iteration ahead of its use (see tj__k_scan) */
    p = tj__bk_xparam(w, w->scan->proj[w->scan->nproj - 1], &v->t, TJ_SPACE_DEVICE, "residual");
    return p;
}
static tj_node *tj__clone(tj__bwd *w, tj_node *v);
static tj_node *tj__clone_op(tj__bwd *w, tj_node *v);
/* The length of the outermost scan whose backward body is being built. */
static int64_t tj__wlen(const tj__bwd *w) {
    int64_t m = 1;
    for (;;) {
        while (w->up) w = w->up;
        m *= w->scan->a.length;
        if (!w->rr) return m;
        w = w->rr; /* a re-run scan's values: per iteration of the scans around it too */
    }
}
/* The walker of region s nested in w's body (made at its first use). */
static tj__bwd *tj__inner_walker(tj__bwd *w, tj_node *s) {
    tj__bwd *k;
    int i, n = s->sub->n;
    for (i = 0; i < w->nkids; i++) if (w->kids[i]->scan == s) return w->kids[i];
    if (w->nkids == 16) {
        tj__err(w->b->ctx, TJ_ERR_UNSUPPORTED, s->file, s->line, "remat: more than 16 nested regions recomputed in one body");
        return NULL;
    }
    if (!(k = (tj__bwd *)tj__calloc(sizeof *k))) return NULL;
    w->kids[w->nkids++] = k;
    k->b = s->sub, k->bk = w->bk, k->scan = s, k->policy = w->policy, k->up = w;
    k->nencl = w->nencl;
    memcpy(k->encl, w->encl, sizeof k->encl);
    k->nmap = n;
    k->map = (tj_node **)tj__calloc(sizeof(tj_node *) * (size_t)(n + 1));
    k->row = (int *)tj__malloc(sizeof(int) * (size_t)(n + 1));
    if (!k->map || !k->row) return NULL;
    for (i = 0; i <= n; i++) k->row[i] = -1;
    return k;
}
static void tj__bwd_free_kids(tj__bwd *w) {
    int i;
    for (i = 0; i < w->nrrs; i++) TJ_FREE(w->rrs[i].pj);
    w->nrrs = 0;
    for (i = 0; i < w->nkids; i++) {
        tj__bwd_free_kids(w->kids[i]);
        TJ_FREE(w->kids[i]->map);
        TJ_FREE(w->kids[i]->row);
        TJ_FREE(w->kids[i]->bx_outer);
        TJ_FREE(w->kids[i]->bx_param);
        TJ_FREE(w->kids[i]);
    }
    w->nkids = 0;
}
/* Recompute v, an output of a nested region that the policy recomputes,
   from inside the region (JAX's partial evaluation sees through a nested
   jax.checkpoint): the value it stands for is cloned into the backward
   body from its producers in the region's body, each judged by this
   walker's policy (values it saves are returned by the region and kept),
   instead of re-running the whole region. */
static tj_node *tj__through(tj__bwd *w, tj_node *v) {
    tj__bwd *x = w;
    tj_node *t = v, *r, *via;
    while (t->op == TJ__OP_PROJ && tj__see_into(t->in[0]) && t->in[0]->pass == 0 && t->a.index < t->in[0]->sub->nout) {
        tj_node *o = t->in[0]->sub->outs[t->a.index];
        if (o->op == TJ__OP_TO_HOST) o = o->in[0];
        if (o->op == TJ__OP_PARAM) break;
        if (!(x = tj__inner_walker(x, t->in[0]))) return NULL;
        t = o;
    }
    if (x == w) return tj__clone_op(w, v);
    if (t->id < x->nmap && x->map[t->id]) return x->map[t->id];
    via = x->via;
    x->via = t; /* the values its producers need are rows "via" it */
    r = tj__clone_op(x, t);
    x->via = via;
    if (r) r->remat = 1;
    if (r && t->id < x->nmap) x->map[t->id] = r;
    return r;
}
/* The decision for v, an output of a scan nested in w's body
   (tj__see_into_scan): the value the nested body returns for it is judged
   (*u; a stacked carry by the value the body returns for that carry, as
   JAX stages a carry whose equation its policy does not save). */
static tj_decision tj__scan_out_decide(tj__bwd *w, tj_node *v, tj_node **u, const char **nm, int *carry, char *why, size_t wn) {
    tj_node *s = v->in[0], *o = v->a.index < s->sub->nout ? s->sub->outs[v->a.index] : v;
    const tj_node *judge;
    for (;;) { /* through the scans and regions nested in it (a stack a shard_map keeps of a scan inside it) */
        tj_node *t;
        if (o->op == TJ__OP_TO_HOST) o = o->in[0];
        if (o->op == TJ__OP_PROJ && tj__see_into_scan(o->in[0]) && o->a.index < o->in[0]->sub->nout) {
            s = o->in[0];
            o = s->sub->outs[o->a.index];
            continue;
        }
        if ((t = (tj_node *)tj__region_value(o)) == o) break;
        o = t;
    }
    *carry = o->op == TJ__OP_PARAM && o->pass == 0 && o->a.index < s->a.ncarry;
    judge = *carry ? tj__carry_value(s->sub, o->a.index) : o;
    *nm = *carry ? tj__resid_name(o, s->sub, s->a.ncarry) : tj__resid_name(o, s->sub, 0);
    *u = o;
    return tj__decide_nested(w, judge, *nm, why, wn);
}
static void tj__rerun_free(tj__bwd *r) {
    tj__bwd_free_kids(r);
    TJ_FREE(r->map);
    TJ_FREE(r->row);
    TJ_FREE(r->rcar);
    TJ_FREE(r->rcar_used);
    TJ_FREE(r->bx_outer);
    TJ_FREE(r->bx_param);
}
/* A scan body's parameters in the order its node passes them: lead (the
   carries), the slice parameters bx, then the captures. Returns how many it
   placed (all of B's when that is B->nparam; else nothing is changed), or
   -1 out of memory. */
static int tj__order_params(tj_graph *B, tj_node *const *lead, int nlead, tj_node *const *bx, int nbx) {
    int i, np = 0;
    tj_node **o = (tj_node **)tj__malloc(sizeof(tj_node *) * ((size_t)nlead + (size_t)nbx + (size_t)B->ncap + 1));
    if (!o) return -1;
    for (i = 0; i < nlead; i++) o[np++] = lead[i];
    for (i = 0; i < nbx; i++) o[np++] = bx[i];
    for (i = 0; i < B->ncap; i++) o[np++] = B->cap_param[i];
    if (np == B->nparam)
        for (i = 0; i < np; i++) {
            B->params[i] = o[i];
            o[i]->a.index = i;
        }
    TJ_FREE(o);
    return np;
}
/* Recompute v, an output of a scan nested in w's body (tj__see_into_scan)
   that w's policy recomputes, as JAX's partial evaluation of scan inside
   jax.checkpoint: w's backward body runs a scan over the same iterations
   in the same direction (a reverse scan's re-run runs in reverse), whose body clones from the nested body what the outputs the
   backward pass reads need, each value judged by w's policy. What it keeps
   the nested scan returns stacked (w keeps the stack across its boundary,
   saved or offloaded, and a row says so) and the re-run reads one slice
   per iteration; the rest, carries included, it recomputes. One re-run
   makes every output of the scan that the backward pass reads. */
static tj_node *tj__rerun_scan(tj__bwd *w, tj_node *v) {
    tj_node *s = v->in[0], *n = NULL, **init = NULL, **xs = NULL, **yo = NULL, **co = NULL; /* (sized by s and its body) */
    tj_graph *B = s->sub, *Bp = NULL;
    tj_ctx *c = B->ctx;
    int nc = s->a.ncarry, np = s->nproj, i, k, ny = 0, changed, *pj = NULL, nparam = 0;
    char *want = NULL;
    const tj_node *forcing = w->forcing;
    tj_node *via = w->via;
    tj__bwd r;
    for (i = 0; i < w->nrrs; i++)
        if (w->rrs[i].s == s && w->rrs[i].pj[v->a.index] >= 0) return w->rrs[i].n->proj[w->rrs[i].pj[v->a.index]];
    memset(&r, 0, sizeof r);
    if (w->nrrs == 8) {
        tj__err(c, TJ_ERR_UNSUPPORTED, s->file, s->line, "remat: more than 8 nested scans recomputed in one body");
        return NULL;
    }
    want = (char *)tj__calloc((size_t)np + 1);
    pj = (int *)tj__malloc(sizeof(int) * ((size_t)np + 1));
    yo = (tj_node **)tj__calloc(sizeof(tj_node *) * ((size_t)np + 1));
    co = (tj_node **)tj__calloc(sizeof(tj_node *) * ((size_t)nc + 1));
    if (!want || !pj || !yo || !co) goto fail;
    for (i = 0; i < np; i++) pj[i] = -1;
    want[v->a.index] = 1;
    for (i = 0; i < s->g->n; i++) { /* the other outputs the backward pass reads that the policy recomputes */
        tj_node *x = s->g->nodes[i];
        if (x->pass == 0) continue;
        for (k = 0; k < x->nin; k++) {
            tj_node *q = x->in[k], *u;
            const char *nm;
            int car;
            char why[160];
            if (q->op == TJ__OP_PROJ && q->in[0] == s && !want[q->a.index] && tj__scan_out_decide(w, q, &u, &nm, &car, why, sizeof why) == TJ_RECOMPUTE)
                want[q->a.index] = 1;
        }
    }
    if (!(Bp = tj__graph_new(c, s->file, s->line))) goto fail;
    Bp->parent = w->bk;
    Bp->manual = B->manual; /* (a scan inside a shard_map body) */
    Bp->check = B->check;
    r.b = B, r.bk = Bp, r.scan = s, r.policy = w->policy, r.rr = w;
    r.nencl = w->nencl;
    memcpy(r.encl, w->encl, sizeof r.encl);
    r.nc = nc, r.nx = s->a.nx;
    r.nmap = B->n;
    r.map = (tj_node **)tj__calloc(sizeof(tj_node *) * ((size_t)B->n + 1));
    r.row = (int *)tj__malloc(sizeof(int) * ((size_t)B->n + 1));
    r.rcar = (tj_node **)tj__calloc(sizeof(tj_node *) * ((size_t)nc + 1));
    r.rcar_used = (char *)tj__calloc((size_t)nc + 1);
    if (!r.map || !r.row || !r.rcar || !r.rcar_used) goto fail;
    for (i = 0; i <= B->n; i++) r.row[i] = -1;
    for (i = 0; i < nc; i++) {
        tj_node *p = tj__node(Bp, TJ__OP_PARAM, &B->params[i]->t, 0, NULL, NULL, s->file, s->line);
        if (!p || tj__add_param(Bp, p) || !(p->name = tj__strdup("carry"))) goto fail;
        r.rcar[i] = p;
    }
    for (i = nc; i < np; i++) /* the stacked outputs */
        if (want[i]) {
            tj_node *o = B->outs[i], *x;
            int host = o->space == TJ_SPACE_HOST; /* (a to_host, or a region's output its own policy offloaded) */
            if (o->op == TJ__OP_TO_HOST) o = o->in[0];
            r.norow = o; /* (its row is w's, for v) */
            x = tj__clone(&r, o);
            r.norow = NULL;
            if (x && !tj__same_type(&x->t, &o->t) && tj__numel(&x->t) == tj__numel(&o->t) && x->t.dt == o->t.dt)
                x = tj__reshape(o->file, o->line, x, &o->t); /* (a residual of a region nested in it: the re-run's clone drops the region's length-1 axis) */
            if (x && host && x->space != TJ_SPACE_HOST && (x = tj__node(Bp, TJ__OP_TO_HOST, &x->t, 1, &x, NULL, o->file, o->line)) != NULL) x->space = TJ_SPACE_HOST;
            if (!x) goto fail;
            yo[ny] = x;
            pj[i] = nc + ny++;
        }
    do { /* the carries: chained where a recomputed value reads one, or its final value is read */
        changed = 0;
        for (i = 0; i < nc; i++)
            if ((want[i] || r.rcar_used[i]) && !co[i]) {
                if (!(co[i] = tj__clone(&r, B->outs[i]))) goto fail;
                changed = 1;
            }
    } while (changed);
    for (i = 0; i < nc; i++)
        if (co[i]) pj[i] = i; /* (every chained carry's final value: a later use of one that was not wanted finds it here, not in a second re-run) */
    for (i = 0; i < nc; i++)
        if (tj__body_add_out(Bp, co[i] ? co[i] : r.rcar[i])) goto fail; /* (a carry nothing reads: passed through) */
    for (i = 0; i < ny; i++)
        if (tj__body_add_out(Bp, yo[i])) goto fail;
    init = (tj_node **)tj__malloc(sizeof(tj_node *) * ((size_t)nc + 1));
    xs = (tj_node **)tj__malloc(sizeof(tj_node *) * ((size_t)r.nbx + 1));
    if (!init || !xs) goto fail;
    if ((nparam = tj__order_params(Bp, r.rcar, nc, r.bx_param, r.nbx)) != Bp->nparam) {
        if (nparam >= 0)
            tj__err(c, TJ_ERR_UNSUPPORTED, s->file, s->line, "remat: internal parameter bookkeeping mismatch re-running a nested scan (%d vs %d)", nparam, Bp->nparam);
        goto fail;
    }
    /* its inputs, in w's backward body: the stacks the policy keeps are
       judged there (kept across w's boundary) */
    for (i = 0; i < nc; i++) init[i] = tj__clone(w, s->in[i]);
    w->forcing = s;
    w->via = NULL; /* (the backward pass reads the kept stacks itself) */
    for (i = 0; i < r.nbx; i++) xs[i] = tj__clone(w, r.bx_outer[i]);
    w->forcing = forcing;
    w->via = via;
    for (i = 0; i < nc; i++) if (!init[i]) goto fail;
    for (i = 0; i < r.nbx; i++) if (!xs[i]) goto fail;
    if (B->manual && !s->g->manual) { /* a shard_map: its outputs' outer types are the forward's */
        tj__type *yt = (tj__type *)tj__malloc(sizeof(tj__type) * ((size_t)ny + 1));
        if (!yt) goto fail;
        for (i = nc; i < np; i++) if (pj[i] >= 0) yt[pj[i] - nc] = s->proj[i]->t;
        n = tj__scan_node(s->file, s->line, w->bk, Bp, s->a.axis, s->a.length, s->a.reverse, nc, init, r.nbx, xs, ny, NULL, yt);
        TJ_FREE(yt);
    } else
        n = tj__scan_node(s->file, s->line, w->bk, Bp, s->a.axis, s->a.length, s->a.reverse, nc, init, r.nbx, xs, ny, NULL, NULL);
    if (!n) goto fail;
    n->remat = 1;
    s->reran = 1;
    for (i = 0; i < np; i++)
        if (pj[i] >= 0 && (!tj__same_type(&n->proj[pj[i]]->t, &s->proj[i]->t) || n->proj[pj[i]]->space != s->proj[i]->space)) {
            tj__err(c, TJ_ERR_UNSUPPORTED, s->file, s->line, "remat: the re-run of a nested scan made output %d with another type or memory space", i);
            goto fail;
        }
    if (w->nrrs == 8) { /* (the re-runs of the scans that made its inputs, made since the check above) */
        tj__err(c, TJ_ERR_UNSUPPORTED, s->file, s->line, "remat: more than 8 nested scans recomputed in one body");
        goto fail;
    }
    tj__graph_free(Bp);
    tj__rerun_free(&r);
    w->rrs[w->nrrs].s = s;
    w->rrs[w->nrrs].n = n;
    w->rrs[w->nrrs++].pj = pj;
    TJ_FREE(want);
    TJ_FREE(yo);
    TJ_FREE(co);
    TJ_FREE(init);
    TJ_FREE(xs);
    return n->proj[pj[v->a.index]];
fail:
    w->forcing = forcing;
    w->via = via;
    tj__graph_free(Bp);
    tj__rerun_free(&r);
    TJ_FREE(want);
    TJ_FREE(pj);
    TJ_FREE(yo);
    TJ_FREE(co);
    TJ_FREE(init);
    TJ_FREE(xs);
    if (!c->status) tj__err(c, TJ_ERR_OOM, s->file, s->line, "remat: out of memory re-running a nested scan");
    return NULL;
}
static tj_node *tj__clone_op(tj__bwd *w, tj_node *v) {
    tj_node *in_s[64] = {NULL}, **in = in_s, *n = NULL; /* (initialised: gcc -O2 cannot tell a 0-input op reads none) */
    int i;
    if (v->op == TJ__OP_PROJ) { /* clone the multi-output node, then pick */
        tj_node *m = tj__clone(w, v->in[0]);
        return m ? m->proj[v->a.index] : NULL;
    }
    if (v->nin > 64 && !(in = (tj_node **)tj__malloc(sizeof(tj_node *) * (size_t)v->nin))) return NULL; /* (a big scan's) */
    for (i = 0; i < v->nin; i++)
        if (!(in[i] = tj__clone(w, v->in[i]))) break;
    if (i == v->nin) n = tj__node(w->bk, v->op, &v->t, v->nin, in, &v->a, v->file, v->line);
    if (in != in_s) TJ_FREE(in);
    if (!n) return NULL;
    n->space = v->space;
    if (v->name && !(n->name = tj__strdup(v->name))) return NULL;
    if (v->sub) {
        n->sub = v->sub;
        v->sub->refs++;
        if (v->policy) {
            n->pol = v->pol;
            n->policy = &n->pol;
        }
    }
    for (i = 0; i < v->nproj; i++) /* a multi-output node's outputs */
        if (tj__add_proj(n, &v->proj[i]->t, v->proj[i]->space)) return NULL;
    return n;
}
/* The backward body's node for body node v. */
static tj_node *tj__clone(tj__bwd *w, tj_node *v) {
    tj_node *r = NULL;
    if (v->id < w->nmap && w->map[v->id]) {
        /* a forward value first met while recomputing another, now needed
           by the backward pass itself: its row is no longer "via" that one */
        struct tj__report *rep = w->via || !w->row || w->row[v->id] < 0 ? NULL : tj__report_of(w->scan->g);
        if (rep && w->row[v->id] < rep->n) rep->rows[w->row[v->id]].via[0] = 0;
        return w->map[v->id];
    }
    if (w->b->ctx->status) return NULL;
    if (v->op == TJ__OP_PARAM && v->pass == 0) {
        int idx = v->a.index, k;
        if (idx >= w->nc && idx < w->nc + w->nx) { /* an x: slice the same stacked input */
            r = tj__bk_xparam(w, w->scan->in[idx], &v->t, TJ_SPACE_DEVICE, "x");
        } else if (idx >= w->nc + w->nx) { /* a captured outer value: capture it again (the scan's own input:
               a body shared by a clone of the scan has captures of another graph) */
            for (k = 0; k < w->b->ncap; k++)
                if (w->b->cap_param[k] == v) {
                    tj_node *o = idx < w->scan->nin ? w->scan->in[idx] : w->b->cap_outer[k];
                    r = w->rr   ? tj__capture(w->bk, tj__clone(w->rr, o)) /* a re-run scan's capture: the enclosing backward body's value */
                        : w->up ? tj__clone(w->up, o) /* a nested region's input: the enclosing body's value */
                                : tj__capture(w->bk, o);
                }
        } else if (w->rr) { /* a re-run scan's carry: recomputed by its own chain
                               (JAX stages it), unless the policy keeps the value
                               the body returns for it: then the stacked carry */
            char why[160];
            tj_node *prod = (tj_node *)tj__carry_value(w->b, idx);
            tj_decision d = tj__decide_nested(w, prod, tj__resid_name(v, w->b, w->nc), why, sizeof why);
            if (d == TJ_RECOMPUTE || prod->op == TJ__OP_PARAM) {
                r = w->rcar[idx];
                w->rcar_used[idx] = 1;
            } else
                r = tj__residual(w, v, d); /* (its row: the enclosing walker's, for the stack) */
        } else { /* a carry: a residual by nature */
            char why[160];
            const char *nm = tj__resid_name(v, w->b, w->nc);
            tj_decision d = tj__decide(w->policy, v, nm, why, sizeof why);
            if (d == TJ_RECOMPUTE) {
                d = TJ_SAVE;
                snprintf(why + strlen(why), sizeof why - strlen(why), "; a carry cannot be recomputed, saved");
            }
            tj__report_add(w->scan->g, v, nm, tj__bytes(&v->t) * tj__wlen(w), d, why, 1, w->via);
            if (w->row && v->id < w->nmap && tj__report_of(w->scan->g)) w->row[v->id] = tj__report_of(w->scan->g)->n - 1; /* (a stack a re-run added is past the map) */
            r = tj__residual(w, v, d);
        }
    } else if (v->op == TJ__OP_SCAN && v->pass == 0) { /* a nested region whose outputs the policy recomputes (tj__rerun_region) */
        r = tj__clone_op(w, v);
        if (r) {
            r->remat = 1;
            r->rerun = v->rerun ? v->rerun : v; /* join v's ring: they share one body */
            v->rerun = r;
        }
    } else if (v->op == TJ__OP_PROJ && v->pass == 0 && v->in[0]->op == TJ__OP_CUSTOM_VJP && v->in[0]->a.reg < w->b->ctx->ncvjp &&
               v->in[0]->nin > w->b->ctx->cvjps[v->in[0]->a.reg].nin + v->a.index) {
        /* an output of a tj_custom_vjp is the value its fwd made (the node
           hands it on): the policy judges that value, which it may keep or
           recompute like any other, as JAX's policy sees into the fwd */
        r = tj__clone(w, v->in[0]->in[w->b->ctx->cvjps[v->in[0]->a.reg].nin + v->a.index]);
    } else if ((tj__ops[v->op].flags & TJ__RERUN) || (v->op == TJ__OP_CUSTOM && v->pass == 0)) {
        /* the node of outputs the policy recomputes (attention's out and
           lse; a user's kernel, which JAX's remat re-runs as any primitive) */
        r = tj__clone_op(w, v);
        if (r) r->remat = 1;
    } else if (v->pass == 0 && !(tj__ops[v->op].flags & TJ__SOURCE)) {
        /* a forward value the backward pass needs; an output of a nested
           region is judged as the value inside it that it stands for */
        char why[160];
        tj_node *u = (tj_node *)tj__region_value(v);
        const char *nm = u == v ? tj__resid_name(v, w->b, w->nc) : tj__resid_name(u, u->g, 0);
        int sc = v->op == TJ__OP_PROJ && tj__see_into_scan(v->in[0]), carry = 0;
        tj_decision d = sc ? tj__scan_out_decide(w, v, &u, &nm, &carry, why, sizeof why) : tj__decide_nested(w, u, nm, why, sizeof why);
        if (v->op == TJ__OP_PROJ && v->a.index > 0 && (tj__ops[v->in[0]->op].flags & TJ__RERUN)) {
            /* a rerunnable op's other outputs (attention's log-sum-exps) go
               as its first goes: saving the output but recomputing its
               small statistics would re-run the whole op for them */
            tj_node *o = v->in[0]->proj[0];
            char ow[160];
            d = tj__decide_nested(w, o, tj__resid_name(o, w->b, w->nc), ow, sizeof ow);
            snprintf(why, sizeof why, "as %s's first output: %.120s", tj__opname(v->in[0]->op), ow);
        }
        if ((tj__ops[v->op].flags & TJ__VIEW) && d != TJ_RECOMPUTE && !nm[0]) d = TJ_RECOMPUTE, snprintf(why, sizeof why, "a view: recomputed from its root");
        else if (d == TJ_RECOMPUTE && w->scan->a.length == 1 && !w->b->manual && !w->up && !w->rr && tj__body_returns(w->b, v)) {
            /* a region (not a shard_map body) returns it: the program holds
               it anyway, and an inlined region's residual is that value */
            d = TJ_SAVE;
            snprintf(why + strlen(why), sizeof why - strlen(why), "; the region returns it, so it is kept");
        }
        if (sc && d == TJ_RECOMPUTE && w->forcing == v->in[0]) { /* (a re-run's input is what the policy keeps) */
            d = TJ_SAVE;
            snprintf(why + strlen(why), sizeof why - strlen(why), "; read by the re-run, kept");
        }
        if (v->op == TJ__OP_PROJ && d == TJ_RECOMPUTE && !sc && !(tj__ops[v->in[0]->op].flags & TJ__RERUN) && v->in[0]->op != TJ__OP_CUSTOM && !tj__rerun_region(w, v)) { /* (a scan autodiff made, a custom_vjp node: kept) */
            d = TJ_SAVE;
            snprintf(why + strlen(why), sizeof why - strlen(why), "; output of a nested %s, saved", v->in[0]->op == TJ__OP_SCAN ? "scan or region" : v->in[0]->op == TJ__OP_CUSTOM ? "custom op" : "custom_vjp");
        }
        if (v->op == TJ__OP_PROJ && v->space == TJ_SPACE_HOST && d == TJ_SAVE) { /* a nested region's policy offloaded it: it stays on the host */
            d = TJ_OFFLOAD;
            snprintf(why + strlen(why), sizeof why - strlen(why), "; offloaded by the nested region's own policy, kept in host memory");
        }
        if ((d == TJ_SAVE || d == TJ_OFFLOAD) && w->scan->a.length > 1 && w->inv && w->hoist && tj__loop_invariant(w, v) && tj__hoist(w, v)) {
            /* the same in every iteration: kept once, not stacked; offloaded,
               one host copy (made before the backward scan), which each
               backward iteration fetches back (JAX: one device_put to the
               host, one back in the backward body) */
            tj_node *h = tj__hoist(w, v);
            snprintf(why + strlen(why), sizeof why - strlen(why), "; loop-invariant, kept once");
            tj__report_add(w->scan->g, u, nm, tj__bytes(&v->t), d, why, 0, w->via);
            if (w->row && v->id < w->nmap && tj__report_of(w->scan->g)) w->row[v->id] = tj__report_of(w->scan->g)->n - 1; /* (a stack a re-run added is past the map) */
            if (h && d == TJ_OFFLOAD) {
                tj_node *hh = tj__node(w->scan->g, TJ__OP_TO_HOST, &h->t, 1, &h, NULL, v->file, v->line);
                if (hh) hh->space = TJ_SPACE_HOST;
                h = hh;
            }
            r = h ? tj__capture(w->bk, h) : NULL;
            if (r && d == TJ_OFFLOAD) {
                r->space = TJ_SPACE_HOST;
                r = tj__node(w->bk, TJ__OP_TO_DEVICE, &v->t, 1, &r, NULL, v->file, v->line);
                if (r) r->space = TJ_SPACE_DEVICE;
            }
            if (r && v->id < w->nmap) w->map[v->id] = r;
            return r;
        }
        if (v != w->norow && !(w->rr && d != TJ_RECOMPUTE)) { /* (a value a re-run keeps: the row of the enclosing walker, for the stack) */
            tj__report_add(w->scan->g, u, nm, tj__bytes(&v->t) * tj__wlen(w), d, why, carry, w->via);
            if (w->row && v->id < w->nmap && tj__report_of(w->scan->g)) w->row[v->id] = tj__report_of(w->scan->g)->n - 1; /* (a stack a re-run added is past the map) */
        }
        if (d == TJ_RECOMPUTE) {
            tj_node *outer = w->via;
            w->via = v; /* the values its producers need are rows "via" v */
            r = sc ? tj__rerun_scan(w, v) : u != v && v->op == TJ__OP_PROJ && tj__rerun_region(w, v) ? tj__through(w, v) : tj__clone_op(w, v);
            if (r && u != v && v->space == TJ_SPACE_HOST && r->space != TJ_SPACE_HOST) {
                /* the nested region's own policy offloaded it: the recomputation
                   offloads it again for the region's backward pass (as JAX) */
                tj_node *o = r;
                if ((r = tj__node(w->bk, TJ__OP_TO_HOST, &o->t, 1, &o, NULL, v->file, v->line)) != NULL) r->space = TJ_SPACE_HOST;
            }
            w->via = outer;
            if (r) r->remat = 1;
        } else
            r = tj__residual(w, v, d);
    } else {
        r = tj__clone_op(w, v); /* backward nodes, and constants */
        if (r && v->pass == 0) r->remat = 1;
    }
    if (r && v->id < w->nmap) w->map[v->id] = r;
    return r;
}

/* The type of a cotangent of a value of type t: a partial sum's cotangent is
   the same on every device (d sum_k p_k / d p_k = 1), so it is not partial. */
static tj__type tj__ct_type(const tj__type *t) {
    tj__type c = *t;
    c.partial = 0;
    return c;
}
/* Zeros of type t (its sharding: each device fills only its block). */
static tj_node *tj__zeros(tj_graph *g, const tj__type *t, const char *f, int l) {
    tj__type z = tj__ct_type(t);
    if (g->manual) return tj__relayout(f, l, tj_scalar_at(f, l, g, t->dt, 0), t);
    return tj__node(g, TJ__OP_FILL, &z, 0, NULL, NULL, f, l);
}
/* Is v zero by construction: a fill of 0, seen through reshapes, layout
   changes and pvary? A gradient of the backward body that is makes no
   gradient outside: the scan's VJP gives none for that input (JAX's
   symbolic zero) instead of a zero that the rules of later ops would carry
   through, where 0 / 0 or 0 * inf is NaN (a second derivative through the
   max of a row holding NaN: the mask's count is 0) and work is done for
   nothing. */
static int tj__zero_made(const tj_node *v) {
    while (v && v->nin == 1 && (v->op == TJ__OP_RESHAPE || v->op == TJ__OP_RELAYOUT || v->op == TJ__OP_COPY || v->op == TJ__OP_PVARY)) v = v->in[0];
    return v && v->op == TJ__OP_FILL && v->a.s == 0.0;
}
/* tj__vjp_scan's tables (sized by its node) and its walker's stacked xs */
static void tj__vjp_scan_free(tj__bwd *w, tj_v *cts, tj_v *outs, tj_v *ctp, tj_v *wrt, tj_v *grads, int *wrt_kind, int *wrt_idx, char *zero,
                              tj_node **binit, tj_node **bfinal, tj__type *yt) {
    TJ_FREE(w->bx_outer);
    TJ_FREE(w->bx_param);
    TJ_FREE(cts);
    TJ_FREE(outs);
    TJ_FREE(ctp);
    TJ_FREE(wrt);
    TJ_FREE(grads);
    TJ_FREE(wrt_kind);
    TJ_FREE(wrt_idx);
    TJ_FREE(zero);
    TJ_FREE(binit);
    TJ_FREE(bfinal);
    TJ_FREE(yt);
}
static tj_status tj__vjp_scan(tj_node *n, tj_v g_unused, tj_v *gin) {
    tj_graph *G = n->g, *B = n->sub, *bk = NULL;
    tj_ctx *c = G->ctx;
    int nc = n->a.ncarry, nx = n->a.nx, ncap = n->a.ncap, ny = n->nproj - nc, i, k, nw = 0, nf = 0;
    /* tables sized by the node: outputs (nproj) and inputs (nin) */
    tj_v *pct = n->g->ctx->proj_ct, *cts = NULL, *outs = NULL, *wrt = NULL, *grads = NULL, *ctp = NULL;
    int *wrt_kind = NULL, *wrt_idx = NULL;
    char *zero = NULL; /* backward body output i is zero by construction (tj__zero_made) */
    tj__bwd w;
    tj_node **binit = NULL, **bxs = NULL, *bn, **bfinal = NULL;
    int nbinit = 0, first_row, first_vjp, saved_nested = 0;
    /* the boundary of a shard_map body; unchecked, its transpose is defensive */
    int smap = B->manual && !G->manual, defensive = smap && !B->check;
    /* a region (one iteration, no shard_map boundary) returns its captures'
       gradients as outputs: no zero-filled running sums, no carry buffers */
    int capy = n->a.length == 1 && !smap;
    unsigned all = (1u << c->nmesh) - 1;
    tj__type *yt = NULL;
    size_t no = (size_t)n->nproj + 1, ni = (size_t)n->nin + 1;
    (void)g_unused;
    memset(&w, 0, sizeof w);
    cts = (tj_v *)tj__calloc(sizeof(tj_v) * no), outs = (tj_v *)tj__calloc(sizeof(tj_v) * no), ctp = (tj_v *)tj__calloc(sizeof(tj_v) * no);
    wrt = (tj_v *)tj__calloc(sizeof(tj_v) * ni), grads = (tj_v *)tj__calloc(sizeof(tj_v) * ni);
    wrt_kind = (int *)tj__calloc(sizeof(int) * ni), wrt_idx = (int *)tj__calloc(sizeof(int) * ni), zero = (char *)tj__calloc(ni);
    binit = (tj_node **)tj__calloc(sizeof(tj_node *) * ni), bfinal = (tj_node **)tj__calloc(sizeof(tj_node *) * ni);
    yt = (tj__type *)tj__calloc(sizeof(tj__type) * ni);
    if (!cts || !outs || !ctp || !wrt || !grads || !wrt_kind || !wrt_idx || !zero || !binit || !bfinal || !yt) goto fail;
    /* 1. differentiate the body in place: cotangent params in, grads out
       (a body differentiated before has cotangent params already) */
    first_vjp = B->nparam == nc + nx + ncap;
    B->cur_pass = ++B->npass;
    for (i = 0; i < nc + ny; i++) {
        tj_node *o = B->outs[i];
        tj__type ct = tj__ct_type(&o->t);
        ctp[i] = NULL;
        if (!tj__isfloat(o->t.dt)) continue;
        /* a y nobody differentiates (its cotangent is zero) adds nothing to
           any gradient: no zero-filled cotangent, no work on it */
        if (i >= nc && !pct[n->proj[i]->id]) continue;
        ctp[i] = tj__node(B, TJ__OP_PARAM, &ct, 0, NULL, NULL, n->file, n->line);
        if (!ctp[i] || tj__add_param(B, ctp[i])) goto fail;
        ctp[i]->name = tj__strdup(i < nc ? "carry cotangent" : "y cotangent");
        outs[nf] = o;
        cts[nf++] = ctp[i];
    }
    B->cur_pass = 0;
    for (i = 0; i < nc + nx + ncap; i++) {
        tj_node *p = B->params[i];
        if (!tj__isfloat(p->t.dt)) continue;
        wrt_kind[nw] = i < nc ? 0 : i < nc + nx ? 1 : 2;
        wrt_idx[nw] = i;
        wrt[nw++] = p;
    }
    if (nf == 0 || tj_vjp_at(n->file, n->line, nf, outs, cts, nw, wrt, grads) != TJ_OK) goto fail;
    /* 2. the backward body: carries are (carry cotangents, capture grad sums) */
    if (!(bk = tj__graph_new(c, n->file, n->line))) goto fail;
    bk->parent = G;
    bk->manual = B->manual;
    bk->check = B->check;
    w.b = B;
    w.bk = bk;
    w.scan = n;
    w.policy = n->policy;
    w.nc = nc;
    w.nx = nx;
    if ((w.nencl = tj__enclosing(n, w.encl, 16)) < 0) {
        tj__err(c, TJ_ERR_UNSUPPORTED, n->file, n->line, "scan vjp: more than 16 enclosing remat policies (checkpoints or scans with a policy nested more than 16 deep)");
        w.nencl = 0;
        goto fail;
    }
    w.nmap = B->n;
    w.map = (tj_node **)tj__calloc(sizeof(tj_node *) * (size_t)(B->n + 1));
    w.row = (int *)tj__malloc(sizeof(int) * (size_t)(B->n + 1));
    w.inv = (signed char *)tj__malloc((size_t)(B->n + 1));
    w.hoist = (tj_node **)tj__calloc(sizeof(tj_node *) * (size_t)(B->n + 1));
    if (!w.map || !w.row || !w.inv || !w.hoist) goto fail;
    for (i = 0; i <= B->n; i++) w.row[i] = -1, w.inv[i] = -1;
    for (i = 0; i < nc; i++) { /* backward carry i: cotangent of carry i */
        tj__type ct = tj__ct_type(&B->outs[i]->t);
        tj_node *p = tj__node(bk, TJ__OP_PARAM, &ct, 0, NULL, NULL, n->file, n->line);
        if (!p || tj__add_param(bk, p)) goto fail;
        p->name = tj__strdup("carry cotangent");
        if (ctp[i]) w.map[ctp[i]->id] = p;
        binit[nbinit++] = pct[n->proj[i]->id] ? tj__fit(n->file, n->line, pct[n->proj[i]->id], &n->proj[i]->t) /* partial sums resolved */
                                              : tj__zeros(G, &n->proj[i]->t, n->file, n->line);
    }
    for (k = 0; k < nw && !capy; k++) /* a gradient-sum carry per float capture */
        if (wrt_kind[k] == 2) {
            tj_node *p = tj__node(bk, TJ__OP_PARAM, &wrt[k]->t, 0, NULL, NULL, n->file, n->line);
            if (!p || tj__add_param(bk, p)) goto fail;
            p->name = tj__strdup("capture gradient sum");
            binit[nbinit++] = tj__zeros(G, &wrt[k]->t, n->file, n->line);
        }
    for (i = 0; i < ny; i++) /* y cotangent slices */
        if (ctp[nc + i]) {
            tj_node *yct = pct[n->proj[nc + i]->id], *p;
            const tj__type *pt = &n->proj[nc + i]->t;
            tj__type yt1 = tj__ct_type(&B->outs[nc + i]->t);
            yct = yct ? tj__fit(n->file, n->line, yct, pt) : tj__zeros(G, pt, n->file, n->line);
            p = tj__bk_xparam(&w, yct, &yt1, TJ_SPACE_DEVICE, "y cotangent");
            if (p && defensive && tj__mesh_count(c, all & ~tj__sh_used(pt->sh, pt->rank) & ~pt->vary) > 1) {
                /* every device holds the replicated output: each gets 1/n of its cotangent
                   (not a per-device output: the gradient of a residual) */
                unsigned rep = all & ~tj__sh_used(pt->sh, pt->rank) & ~pt->vary;
                char why[256], mb[64];
                p = tj_muls_at(n->file, n->line, p, 1.0 / tj__mesh_count(c, rep));
                snprintf(why, sizeof why, "check off: output %d's out_spec replicates it over %s, so its cotangent is divided by %d", i,
                         tj__mesh_names(c, rep, mb, sizeof mb), tj__mesh_count(c, rep));
                if (p && !(p->name = tj__strdup(why))) goto fail;
                if (p) p->a.mesh = rep; /* for the transpose report */
            }
            w.map[ctp[nc + i]->id] = p;
        }
    /* 3. clone what the gradients need; residuals appear on the way */
    first_row = tj__report_of(G) ? tj__report_of(G)->n : 0;
    if (tj__report_of(G)) { /* the rows of a region inside another (restored below) */
        saved_nested = tj__report_of(G)->nested;
        tj__report_of(G)->nested = w.nencl > 0;
    }
    { /* the backward nodes the gradients need, cloned in the order autodiff
         made them (a reverse walk of the forward body), as in a program
         without a region: each cotangent is consumed soon after it is made
         (a weight's gradient right after the cotangent it needs, not after
         every other input's), and each forward value is read or recomputed
         at its first use. (Cloning from each gradient depth-first kept
         cotangents alive across the other gradients' work.) */
        int nb = B->n; /* (an offloaded residual adds a node to the body on the way) */
        char *need = (char *)tj__calloc((size_t)nb + 1);
        if (!need) goto fail;
        for (k = 0; k < nw; k++) if (grads[k] && grads[k]->g == B && grads[k]->pass != 0) need[grads[k]->id] = 1;
        for (i = nb - 1; i >= 0; i--) {
            tj_node *v = B->nodes[i];
            if (!need[i] || (i < w.nmap && w.map[i])) continue;
            for (k = 0; k < v->nin; k++) if (v->in[k]->pass != 0) need[v->in[k]->id] = 1;
        }
        for (i = 0; i < nb && !c->status; i++)
            if (need[i] && !tj__clone(&w, B->nodes[i]) && !c->status) tj__err(c, TJ_ERR_OOM, n->file, n->line, "scan vjp: out of memory");
        TJ_FREE(need);
        if (c->status) goto fail;
    }
    {
        int ncar = 0;
        for (i = 0; i < nc; i++) { /* d carry_in */
            tj_node *gv = NULL;
            for (k = 0; k < nw; k++) if (wrt_kind[k] == 0 && wrt_idx[k] == i) gv = tj__clone(&w, grads[k]);
            if (!gv) gv = tj__zeros(bk, &B->outs[i]->t, n->file, n->line);
            zero[bk->nout] = tj__zero_made(gv);
            if (tj__body_add_out(bk, tj__fit(n->file, n->line, gv, &B->outs[i]->t))) goto fail;
            ncar++;
        }
        for (k = 0; k < nw && capy; k++) /* a region: each capture's gradient is an output of its one iteration */
            if (wrt_kind[k] == 2) {
                tj_node *gk = tj__clone(&w, grads[k]);
                zero[bk->nout] = tj__zero_made(gk);
                if (tj__body_add_out(bk, gk)) goto fail;
            }
        for (k = 0; k < nw && !capy; k++)
            if (wrt_kind[k] == 2) { /* running sum of the capture's gradient (its initial zeros: none made) */
                tj_node *acc = bk->params[ncar++], *gk = tj__clone(&w, grads[k]);
                if ((zero[bk->nout] = tj__zero_made(gk)) != 0) {
                    if (tj__body_add_out(bk, acc)) goto fail;
                    continue;
                }
                if (defensive && c->ndev > 1) gk = tj__manual_coll(TJ__OP_PSUM, gk, all, -1, -1, NULL, "check off: a captured value is replicated, so its gradient is summed over every mesh axis", n->file, n->line);
                if (tj__body_add_out(bk, tj_add_at(n->file, n->line, acc, gk))) goto fail;
            }
        for (k = 0; k < nw; k++)
            if (wrt_kind[k] == 1) {
                tj_node *gk = tj__clone(&w, grads[k]);
                const tj__type *xt = &n->in[wrt_idx[k]]->t;
                unsigned rep = all & ~tj__sh_used(xt->sh, xt->rank) & ~xt->vary; /* a per-device input (a residual) is not replicated */
                zero[bk->nout] = tj__zero_made(gk);
                if (defensive && gk && tj__mesh_count(c, rep) > 1) {
                    char why[256], mb[64];
                    snprintf(why, sizeof why, "check off: input %d's in_spec does not name %s, so its gradient is summed over them", wrt_idx[k] - nc,
                             tj__mesh_names(c, rep, mb, sizeof mb));
                    gk = tj__manual_coll(TJ__OP_PSUM, gk, rep, -1, -1, NULL, why, n->file, n->line);
                }
                if (smap) yt[bk->nout - nbinit] = *xt; /* the gradient of a block is laid out like the block */
                if (tj__body_add_out(bk, gk)) goto fail;
            }
    }
    if (tj__report_of(G)) tj__report_of(G)->nested = saved_nested;
    if (c->status) goto fail;
    /* the user's scan, not a backward scan being differentiated again, and
       at its first VJP (a second one, in a grad of grad, sees only the
       outputs that the first made the second derivative need) */
    if (n->pass == 0 && first_vjp && !tj__autodiff_made(n)) tj__lint_policy(G, n->policy, B, nc, first_row); /* (not the forward policy on a backward body's names) */
    if (c->status) goto fail;
    /* the forward body's new outputs made new PROJ nodes of n; its
       captures are the same, so its inputs are unchanged */
    /* 4. the reverse scan */
    bxs = w.bx_outer;
    {
        /* the backward body's params must be ordered carry, xs, captures: the
           slice params were added in discovery order after the carries, and
           captures after them as found. Reorder the param list to match. */
        int np = tj__order_params(bk, bk->params, nbinit, w.bx_param, w.nbx);
        if (np != bk->nparam) {
            if (np >= 0) tj__err(c, TJ_ERR_UNSUPPORTED, n->file, n->line, "scan vjp: internal parameter bookkeeping mismatch (%d vs %d)", np, bk->nparam);
            goto fail;
        }
    }
    {
        int nyb = bk->nout - nbinit;
        /* it runs the other way round (the VJP of a reverse scan, as in a
           second derivative, runs forward) */
        bn = tj__scan_node(n->file, n->line, G, bk, n->a.axis, n->a.length, !n->a.reverse, nbinit, binit, w.nbx, bxs, nyb, n->policy, smap ? yt : NULL);
        if (!bn) goto fail;
        for (i = 0; i < nbinit; i++) bfinal[i] = zero[i] ? NULL : bn->proj[i];
        /* 5. cotangents of the forward scan's inputs (none for a gradient
           that is zero by construction) */
        for (i = 0; i < nc; i++) gin[i] = bfinal[i];
        {
            int ci = nc, yi = nbinit;
            for (k = 0; k < nw; k++) /* in the order the backward body's outputs were added */
                if (wrt_kind[k] == 2 && capy) {
                    gin[wrt_idx[k]] = zero[yi] ? NULL : tj__fit(n->file, n->line, bn->proj[yi], &n->in[wrt_idx[k]]->t); /* drops the length-1 axis */
                    yi++;
                } else if (wrt_kind[k] == 2) gin[wrt_idx[k]] = bfinal[ci++];
            for (k = 0; k < nw; k++)
                if (wrt_kind[k] == 1) {
                    gin[wrt_idx[k]] = zero[yi] ? NULL : bn->proj[yi];
                    yi++;
                }
        }
    }
    tj__bwd_free_kids(&w);
    TJ_FREE(w.map);
    TJ_FREE(w.row);
    TJ_FREE(w.inv);
    TJ_FREE(w.hoist);
    tj__graph_free(bk);
    tj__vjp_scan_free(&w, cts, outs, ctp, wrt, grads, wrt_kind, wrt_idx, zero, binit, bfinal, yt);
    return TJ_OK;
fail:
    tj__bwd_free_kids(&w);
    TJ_FREE(w.map);
    TJ_FREE(w.row);
    TJ_FREE(w.inv);
    TJ_FREE(w.hoist);
    tj__graph_free(bk);
    tj__vjp_scan_free(&w, cts, outs, ctp, wrt, grads, wrt_kind, wrt_idx, zero, binit, bfinal, yt);
    if (!c->status) tj__err(c, TJ_ERR_OOM, n->file, n->line, "scan vjp: out of memory");
    return c->status;
}

/* ==== [9] schedule ======================================================= */
/* One linear order of the nodes the outputs need. Creation order is already
   topological, so the schedule keeps it and drops dead nodes (autodiff rules
   emit cotangents for every input; the ones nobody uses vanish here). A
   multi-output node keeps all its outputs: its kernel writes them all. */


static tj_node *tj__root(tj_node *n) {
    while (tj__ops[n->op].flags & TJ__VIEW) n = n->in[0];
    return n;
}
/* ---- regions inline ----
   A scan of one iteration over an automatically sharded body (a
   tj_checkpoint region, and the backward scan autodiff made for it) needs
   no loop: its body's nodes join the enclosing program in its place, so
   the schedule and the planner see one liveness, and a region costs no
   more memory than its own values. What the remat policy decided stays
   decided: the backward body has its own copies of what it recomputes.
   Regions whose values cross memory spaces (an offloaded residual read back
   by the backward body) or whose boundary changes a type keep their scan,
   as shard_map bodies do. TJ_NO_INLINE=1 keeps every region a scan (to
   compare the plans). */
static int tj__same_type(const tj__type *a, const tj__type *b) {
    int i;
    if (a->rank != b->rank || a->dt != b->dt || a->partial != b->partial) return 0;
    for (i = 0; i < a->rank; i++)
        if (a->ax[i] != b->ax[i] || a->dim[i] != b->dim[i] || a->sh[i] != b->sh[i]) return 0;
    return 1;
}
/* a node of g with the given type and inputs; no shape or sharding rule runs */
static tj_node *tj__raw_node(tj_graph *g, const tj_node *like, int op, const tj__type *t, int nin, tj_node *const *in) {
    tj_node *n = (tj_node *)tj__calloc(sizeof *n), **ins = nin ? (tj_node **)tj__calloc(sizeof(tj_node *) * (size_t)nin) : NULL;
    int i;
    if (!n || (nin && !ins)) {
        TJ_FREE(n);
        TJ_FREE(ins);
        return NULL;
    }
    if (like) *n = *like;
    else n->off = -1, n->out_index = -1;
    n->in = ins;
    for (i = 0; i < nin && in; i++) ins[i] = in[i];
    n->g = g;
    n->op = op;
    n->t = *t;
    n->nin = nin;
    return n;
}
static int tj__can_inline(const tj_node *n) {
    const tj_graph *b = n->sub;
    int i, nc = n->a.ncarry, nx = n->a.nx;
    if (n->op != TJ__OP_SCAN || n->a.length != 1 || !b || b->manual || n->g->manual || n->repl) return 0; /* (repl: inlined already) */
    if (b->nparam < n->nin || b->nout != n->nproj) return 0; /* (a differentiated body has cotangent params its forward run leaves alone) */
    for (i = 0; i < n->nin; i++) {
        const tj_node *p = b->params[i], *x = n->in[i];
        if (p->space != TJ_SPACE_DEVICE || (x->space != TJ_SPACE_DEVICE && !(i >= nc && i < nc + nx))) return 0; /* (an offloaded x is fetched) */
        if (i >= nc && i < nc + nx) {
            tj__type lead = tj__type_lead(&p->t, n->a.axis, 1);
            if (!tj__same_type(&lead, &x->t)) return 0;
        } else if (!tj__same_type(&p->t, &x->t)) return 0;
    }
    for (i = 0; i < n->nproj; i++) {
        const tj_node *o = b->outs[i], *q = n->proj[i];
        if (q->space != o->space) return 0;
        if (i < nc && !tj__same_type(&o->t, &q->t)) return 0;
    }
    return 1;
}
/* Inline every inlinable region of g (again for regions inside them); outs
   (n of them) are remapped. Returns TJ_OK or TJ_ERR_OOM. */
static tj_status tj__inline_regions(tj_graph *g, tj_node **outs, int nout) {
    int changed = 1;
    while (changed) {
        int i, j, k, m = 0, cap = 0;
        tj_node **nn = NULL;
        changed = 0;
        for (i = 0; i < g->n; i++) cap += 1 + (g->nodes[i]->sub && tj__can_inline(g->nodes[i]) ? 2 * g->nodes[i]->sub->n + g->nodes[i]->nproj : 0);
        if (!(nn = (tj_node **)tj__malloc(sizeof(tj_node *) * (size_t)(cap + 1)))) return TJ_ERR_OOM;
        for (i = 0; i < g->n; i++) {
            tj_node *n = g->nodes[i];
            tj_graph *b = n->sub;
            tj_node **map;
            for (j = 0; j < n->nin; j++) /* an input that was a region's output: its replacement */
                while (n->in[j]->repl && n->in[j]->repl != n->in[j]) n->in[j] = n->in[j]->repl;
            if (n->op == TJ__OP_RESHAPE && n->in[0]->op == TJ__OP_RESHAPE && n->in[0]->nin == 1) { /* a region's boundary views, back to back */
                n->in[0] = n->in[0]->in[0];
                if (tj__same_type(&n->t, &n->in[0]->t) && n->space == n->in[0]->space) n->repl = n->in[0]; /* the same view as its input's input */
            }
            if (!(b && tj__can_inline(n))) { nn[m++] = n; continue; }
            if (!(map = (tj_node **)tj__calloc(sizeof(tj_node *) * (size_t)(2 * b->n + 1)))) { TJ_FREE(nn); return TJ_ERR_OOM; }
            { /* the body nodes its outputs need (a multi-output node with all its outputs) */
                char *need = (char *)(map + b->n);
                for (j = 0; j < b->nout; j++) need[b->outs[j]->id] = 1;
                for (j = b->n - 1; j >= 0; j--) {
                    tj_node *v = b->nodes[j];
                    if (v->op == TJ__OP_PROJ && need[j]) need[v->in[0]->id] = 1;
                }
                for (j = b->n - 1; j >= 0; j--) {
                    tj_node *v = b->nodes[j];
                    if (!need[j]) continue;
                    for (k = 0; k < v->nin; k++) need[v->in[k]->id] = 1;
                    for (k = 0; k < v->nproj; k++) need[v->proj[k]->id] = 1;
                }
                for (j = 0; j < b->n; j++) if (!need[j]) b->nodes[j]->repl = b->nodes[j]; /* (skipped below; reset after) */
            }
            for (j = 0; j < b->n; j++) {
                tj_node *v = b->nodes[j], *c;
                if (v->repl == v) { v->repl = NULL; continue; } /* not needed */
                if (v->op == TJ__OP_PARAM) {
                    int idx = v->a.index, nc = n->a.ncarry, nx = n->a.nx;
                    if (idx >= nc && idx < nc + nx) { /* the one slice of a stacked x: a view without the scanned axis */
                        if (!(c = tj__raw_node(g, NULL, TJ__OP_RESHAPE, &v->t, 1, &n->in[idx]))) goto oom;
                        c->file = n->file;
                        c->line = n->line;
                        c->pass = n->pass;
                        c->space = n->in[idx]->space;
                        nn[m++] = c;
                        if (c->space != v->space) { /* an offloaded residual: fetched back to device memory where the region ran */
                            tj_node *f = tj__raw_node(g, NULL, TJ__OP_TO_DEVICE, &v->t, 1, &c);
                            if (!f) goto oom;
                            f->file = n->file;
                            f->line = n->line;
                            f->pass = n->pass;
                            f->space = v->space;
                            nn[m++] = c = f;
                        }
                    } else c = n->in[idx];
                } else {
                    if (!(c = tj__raw_node(g, v, v->op, &v->t, v->nin, NULL))) goto oom;
                    for (k = 0; k < v->nin; k++) c->in[k] = map[v->in[k]->id];
                    c->pass = n->pass;
                    c->name = v->name ? tj__strdup(v->name) : NULL;
                    c->members = NULL, c->nmembers = 0, c->fused = NULL, c->store = 0;
                    c->proj = NULL, c->nproj = 0, c->repl = NULL;
                    if (v->sub && b->refs == 1 && !n->rerun && !v->rerun)
                        v->sub = NULL; /* (the region is inlined once and its body nowhere else: v is dead, c holds its body alone, so
                                          tj__drop_reran_outputs may drop the outputs of a nested scan nobody reads) */
                    else if (v->sub)
                        v->sub->refs++;
                    if (v->policy == &v->pol) c->policy = &c->pol;
                    if (v->nproj && !(c->proj = (tj_node **)tj__calloc(sizeof(tj_node *) * (size_t)v->nproj))) goto oom;
                    if (v->op == TJ__OP_PROJ) { /* an output of a multi-output body node */
                        tj_node *mc = c->in[0];
                        mc->proj[v->a.index] = c;
                        if (mc->nproj <= v->a.index) mc->nproj = v->a.index + 1;
                    }
                    nn[m++] = c;
                }
                map[v->id] = c;
            }
            for (j = 0; j < n->nproj; j++) { /* the scan's outputs: the body's, the ys with their length-1 axis */
                tj_node *q = n->proj[j], *o = map[b->outs[j]->id], *r = o;
                if (j >= n->a.ncarry) {
                    if (!(r = tj__raw_node(g, NULL, TJ__OP_RESHAPE, &q->t, 1, &o))) goto oom;
                    r->file = q->file;
                    r->line = q->line;
                    r->pass = q->pass;
                    r->space = q->space;
                    nn[m++] = r;
                }
                q->repl = r;
            }
            TJ_FREE(map);
            n->repl = n;  /* inlined: the scan and its outputs stay, unused, until the graph is freed */
            nn[m++] = n;
            changed = 1;
            continue;
        oom:
            TJ_FREE(map);
            TJ_FREE(nn);
            return TJ_ERR_OOM;
        }
        for (j = 0; j < nout; j++)
            while (outs[j]->repl && outs[j]->repl != outs[j]) outs[j] = outs[j]->repl;
        for (j = 0; j < g->nout; j++)
            while (g->outs[j]->repl && g->outs[j]->repl != g->outs[j]) g->outs[j] = g->outs[j]->repl;
        for (j = 0; j < m; j++) nn[j]->id = j;
        TJ_FREE(g->nodes);
        g->nodes = nn;
        g->n = g->cap = m;
    }
    return TJ_OK;
}
static tj_status tj__schedule(tj_prog *p) {
    tj_graph *g = p->g;
    int i, j, k = 0;
    for (i = 0; i < g->n; i++) g->nodes[i]->live = 0;
    for (i = 0; i < p->nout; i++) p->outs[i]->live = 1;
    for (i = g->n - 1; i >= 0; i--) {
        tj_node *n = g->nodes[i];
        if (n->op == TJ__OP_PROJ && n->live) n->in[0]->live = 1;
        if (!n->live) continue;
        for (j = 0; j < n->nin; j++) n->in[j]->live = 1;
        for (j = 0; j < n->nproj; j++) n->proj[j]->live = 1;
    }
    for (i = 0; i < g->nparam; i++) g->params[i]->live = 1; /* arguments always exist */
    TJ_FREE(p->sched);
    p->sched = (tj_node **)tj__malloc(sizeof(tj_node *) * (size_t)(g->n + 1));
    if (!p->sched) {
        tj__err(p->ctx, TJ_ERR_OOM, p->file, p->line, "jit '%s': out of memory scheduling", p->name);
        return TJ_ERR_OOM;
    }
    for (i = 0; i < g->n; i++)
        if (g->nodes[i]->live) {
            g->nodes[i]->sched = k;
            p->sched[k++] = g->nodes[i];
        }
    p->nsched = k;
    return TJ_OK;
}

/* ==== [10] memory plan and analysis, donation ============================ */
/* Every non-view node gets a buffer in its memory space: arguments live in
   the caller's arrays, outputs in fresh arrays (or a donated argument's
   buffer), and everything else in one temp arena per space, placed by
   liveness over the schedule (see "placement"). A view (reshape, name,
   stop_gradient) shares its root's buffer and keeps it alive. The outputs
   of a multi-output node (scan) are placed when it runs. Kernel workspace
   is planned like any other buffer, freed right after its node. The run
   allocates exactly what this plan says.
   Values the remat policy recomputes get three more looks (tj__plan): one
   whose original is still alive is read from it; one whose recomputation
   costs more memory than keeping the original (the values it is made from,
   the cotangents it runs beside) is read from the original where that
   makes the arena smaller; and one alive across the peak is run once more
   before its later use where that makes the arena smaller. Each keeps the
   same bits (same op, same inputs). */

typedef struct {
    int64_t off, size;
} tj__blk;
typedef struct {
    tj__blk *b;
    int n, cap;
    int64_t peak;
} tj__heap;

static int64_t tj__heap_alloc(tj__heap *h, int64_t size) {
    int64_t at = 0;
    int i, pos;
    size = tj__align(size ? size : 1);
    for (pos = 0; pos < h->n; pos++) {
        if (h->b[pos].off - at >= size) break;
        at = h->b[pos].off + h->b[pos].size;
    }
    if (h->n == h->cap) {
        int nc = h->cap ? h->cap * 2 : 64;
        tj__blk *nb = (tj__blk *)TJ_REALLOC(h->b, sizeof(tj__blk) * (size_t)nc);
        if (!nb) return -1;
        h->b = nb;
        h->cap = nc;
    }
    for (i = h->n; i > pos; i--) h->b[i] = h->b[i - 1];
    h->b[pos].off = at;
    h->b[pos].size = size;
    h->n++;
    if (at + size > h->peak) h->peak = at + size;
    return at;
}
static void tj__heap_free(tj__heap *h, int64_t off) {
    int i;
    for (i = 0; i < h->n; i++)
        if (h->b[i].off == off) {
            for (; i + 1 < h->n; i++) h->b[i] = h->b[i + 1];
            h->n--;
            return;
        }
}

/* Can output node o (a root) take the buffer of param p? Every use of p
   must come before o is computed, or o must be an elementwise op reading p
   in exactly o's layout (in place is then safe). */
static int tj__can_donate(tj_node *p, tj_node *o) {
    int i, j, ok = 1, ew = o->op < TJ__OP_LT || o->op == TJ__OP_SELECT;
    tj_graph *g = p->g;
    if (p->t.dt != o->t.dt || memcmp(p->t.sh, o->t.sh, TJ_MAXDIM) || tj__bytes(&p->t) != tj__bytes(&o->t) || o->space != TJ_SPACE_DEVICE) return 0;
    for (i = 0; i < g->n && ok; i++) {
        tj_node *u = g->nodes[i];
        if (!u->live || u == o) continue;
        for (j = 0; j < u->nin; j++)
            if (tj__root(u->in[j]) == p && u->sched > o->sched) ok = 0;
    }
    for (j = 0; ok && j < o->nin; j++) {
        tj_node *x = o->in[j];
        if (tj__root(x) != p) continue;
        if (!ew || x->t.rank != o->t.rank) ok = 0;
        else {
            int k;
            for (k = 0; k < o->t.rank; k++) ok &= x->t.ax[k] == o->t.ax[k];
        }
    }
    return ok;
}
static int tj__needs_buffer(const tj_node *n) {
    return n->root == n && n->op != TJ__OP_PARAM && n->out_index < 0 && !(tj__ops[n->op].flags & TJ__MULTI);
}

/* fusion groups (which elementwise nodes run as one loop) are the CPU
   backend's decision; the plan asks for them first: [11] */
static tj_status tj__fuse(tj_prog *p);
static tj_node *tj__froot(tj_node *n);

/* ---- placement ----
   The plan first walks the schedule and records each buffer's interval:
   made at step `start` (while its node runs), last needed at step `end`
   (a node's inputs are freed after its outputs are made, so the two never
   share memory). Then it places the buffers of each space knowing every
   interval, and keeps the smallest arena of: first fit in schedule order
   (as a running allocator would); four orders (largest first, longest-lived
   first, most bytes x steps first, the buffers of the widest step first),
   each buffer at the lowest offset clear of the placed buffers whose
   intervals meet its own; and a bounded local search from the best order
   (a few buffers swapped, a fixed seed: the same plan on every run). The
   most bytes live at one step is the least any placement needs; the
   search stops there. */
typedef struct {
    int64_t size, off;
    int start, end, space;
    int64_t *at;       /* the offset field it fills */
    int64_t key, key2; /* the order of the placement being tried */
} tj__bufreq;
typedef struct {
    tj__bufreq *r;
    int n, cap;
} tj__reqs;
/* a buffer made at step `start`, live to the end of the run until its end
   is set; returns its index */
static int64_t tj__req(tj__reqs *q, int space, int64_t size, int start, int64_t *at) {
    if (q->n == q->cap) {
        int nc = q->cap ? 2 * q->cap : 64;
        tj__bufreq *nr = (tj__bufreq *)TJ_REALLOC(q->r, sizeof(tj__bufreq) * (size_t)nc);
        if (!nr) return -1;
        q->r = nr;
        q->cap = nc;
    }
    q->r[q->n].size = tj__align(size ? size : 1);
    q->r[q->n].off = -1;
    q->r[q->n].start = start;
    q->r[q->n].end = 0x7fffffff;
    q->r[q->n].space = space;
    q->r[q->n].at = at;
    return q->n++;
}
/* the order of an offline placement: key descending, then key2, size
   descending, made first */
static int tj__req_cmp(const void *a, const void *b) {
    const tj__bufreq *x = *(const tj__bufreq *const *)a, *y = *(const tj__bufreq *const *)b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    if (x->key2 != y->key2) return x->key2 < y->key2 ? -1 : 1;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x < y ? -1 : x > y;
}
/* every buffer of ord, in that order, at the lowest offset clear of the
   placed buffers it meets in time (placed: scratch, kept sorted by offset);
   returns the arena size */
static int64_t tj__place_order(tj__bufreq **ord, int n, tj__bufreq **placed) {
    int64_t top = 0;
    int i, j, np = 0;
    for (i = 0; i < n; i++) {
        tj__bufreq *r = ord[i];
        int64_t at = 0;
        for (j = 0; j < np; j++) {
            const tj__bufreq *o = placed[j];
            if (o->end < r->start || r->end < o->start) continue; /* never live together */
            if (o->off - at >= r->size) break;
            if (o->off + o->size > at) at = o->off + o->size;
        }
        r->off = at;
        if (at + r->size > top) top = at + r->size;
        for (j = np; j > 0 && placed[j - 1]->off > at; j--) placed[j] = placed[j - 1];
        placed[j] = r;
        np++;
    }
    return top;
}
/* place the requests of one space; h->peak is the arena size. Returns 0, or
   -1 out of memory. */
static int tj__place(tj__reqs *q, int space, tj__heap *h, int quick) {
    tj__bufreq **ord = NULL, **placed = NULL, **bord = NULL;
    int64_t *ff = NULL, *best = NULL, *breadth = NULL, peak_ff = 0, peak_big = 0, most = 0;
    int i, j, k, n = 0, step = -1, key, nstep = 0, tries, since;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (i = 0; i < q->n; i++) n += q->r[i].space == space;
    if (!n) return 0;
    ord = (tj__bufreq **)tj__malloc(sizeof *ord * (size_t)n);
    bord = (tj__bufreq **)tj__malloc(sizeof *bord * (size_t)n);
    placed = (tj__bufreq **)tj__malloc(sizeof *placed * (size_t)n);
    ff = (int64_t *)tj__malloc(sizeof *ff * (size_t)n);
    best = (int64_t *)tj__malloc(sizeof *best * (size_t)n);
    if (!ord || !bord || !placed || !ff || !best) goto oom;
    for (i = 0, k = 0; i < q->n; i++)
        if (q->r[i].space == space) ord[k++] = &q->r[i];
    /* 1. first fit in schedule order (requests are in the order they were
       made; a buffer ending at step s is freed before step s + 1 allocates) */
    {
        tj__heap fh;
        memset(&fh, 0, sizeof fh);
        for (i = 0; i < n; i++) {
            tj__bufreq *r = ord[i];
            if (r->start != step) { /* free what ended before this step */
                for (j = 0; j < i; j++)
                    if (ff[j] >= 0 && ord[j]->end < r->start) {
                        tj__heap_free(&fh, ff[j]);
                        ff[j] = -1;
                    }
                step = r->start;
            }
            if ((ff[i] = tj__heap_alloc(&fh, r->size)) < 0) {
                TJ_FREE(fh.b);
                goto oom;
            }
            r->off = ff[i];
        }
        peak_ff = fh.peak;
        for (i = 0; i < n; i++) ff[i] = ord[i]->off;
        TJ_FREE(fh.b);
    }
    /* the bytes live at each step (the breadth); the most of them is the
       least any placement needs */
    for (i = 0; i < n; i++) if (ord[i]->start > nstep) nstep = ord[i]->start;
    for (i = 0; i < n; i++) if (ord[i]->end < 0x7fffffff && ord[i]->end > nstep) nstep = ord[i]->end;
    if (!(breadth = (int64_t *)tj__calloc(sizeof(int64_t) * (size_t)(nstep + 2)))) goto oom;
    for (i = 0; i < n; i++) {
        breadth[ord[i]->start] += ord[i]->size;
        breadth[(ord[i]->end < nstep ? ord[i]->end : nstep) + 1] -= ord[i]->size;
    }
    for (i = 0; i <= nstep; i++) {
        if (i) breadth[i] += breadth[i - 1];
        if (breadth[i] > most) most = breadth[i];
    }
    /* 2. each of the orders; the best one's offsets are kept in best[] (in
       request order) and the order itself in bord[] */
    for (key = 0; key < 4 && peak_ff > most; key++) {
        int64_t top;
        for (i = 0; i < n; i++) { /* largest; longest-lived; most bytes x steps; in the widest step first */
            tj__bufreq *r = ord[i];
            int64_t len = (int64_t)(r->end < nstep ? r->end : nstep) - r->start + 1;
            r->key2 = 0;
            if (key == 0) r->key = r->size;
            else if (key == 1) r->key = len;
            else if (key == 2) r->key = r->size * len;
            else {
                r->key = -1;
                for (j = r->start; j <= r->end && j <= nstep; j++)
                    if (breadth[j] > r->key) r->key = breadth[j], r->key2 = j;
            }
        }
        qsort(ord, (size_t)n, sizeof *ord, tj__req_cmp);
        top = tj__place_order(ord, n, placed);
        if (key == 0 || top < peak_big) {
            peak_big = top;
            memcpy(bord, ord, sizeof *ord * (size_t)n);
            for (i = 0, k = 0; i < q->n; i++)
                if (q->r[i].space == space) best[k++] = q->r[i].off;
        }
    }
    /* 3. a local search from the best order while it is above the least:
       swap a few buffers (a fixed seed: the same plan every time) and keep
       the order when its arena is no larger; the work is bounded */
    tries = peak_ff > most && peak_big > most && n > 1 ? (int)((quick ? 5000000 : 50000000) / ((int64_t)n * n + 1)) : 0;
    if (tries > (quick ? 200 : 2000)) tries = quick ? 200 : 2000;
    for (k = 0, since = 0; k < tries && peak_big > most && since < (quick ? 100 : 400); k++, since++) { /* (that many in a row no better: stop) */
        int64_t top;
        int m;
        memcpy(ord, bord, sizeof *ord * (size_t)n);
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        m = 1 + (int)((seed >> 33) % 8);
        while (m--) { /* swap two buffers, or move one earlier */
            tj__bufreq *t;
            int x, y, mtf = (int)((seed >> 40) & 1);
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            x = (int)((seed >> 33) % (uint64_t)n);
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            y = (int)((seed >> 33) % (uint64_t)(mtf ? x + 1 : n));
            if (mtf) {
                t = ord[x];
                memmove(ord + y + 1, ord + y, sizeof *ord * (size_t)(x - y));
                ord[y] = t;
            } else t = ord[x], ord[x] = ord[y], ord[y] = t;
        }
        top = tj__place_order(ord, n, placed);
        if (top <= peak_big) {
            if (top < peak_big) since = 0;
            peak_big = top;
            memcpy(bord, ord, sizeof *ord * (size_t)n);
            for (i = 0, j = 0; i < q->n; i++)
                if (q->r[i].space == space) best[j++] = q->r[i].off;
        }
    }
    for (i = 0, k = 0; i < q->n; i++) /* first fit unless an order did better (both in request order) */
        if (q->r[i].space == space) q->r[i].off = peak_ff <= peak_big || peak_ff <= most ? ff[k++] : best[k++];
    h->peak = peak_ff <= peak_big || peak_ff <= most ? peak_ff : peak_big;
    for (i = 0; i < q->n; i++)
        if (q->r[i].space == space) *q->r[i].at = q->r[i].off;
    TJ_FREE(ord);
    TJ_FREE(bord);
    TJ_FREE(placed);
    TJ_FREE(ff);
    TJ_FREE(best);
    TJ_FREE(breadth);
    return 0;
oom:
    TJ_FREE(ord);
    TJ_FREE(bord);
    TJ_FREE(placed);
    TJ_FREE(ff);
    TJ_FREE(best);
    TJ_FREE(breadth);
    return -1;
}

/* Pack buffers of the CPU matmul in a dot's workspace: one per thread a
   device runs with (the threads of the context shared by its local
   devices, as tj_run splits them), on the backends that run the CPU kernels
   (none, devsim); none on others (CUDA multiplies with cuBLAS); never more
   than the matmul splits a product into. A run with more threads than
   planned gives the extra threads their own buffers. */
static int tj__ds_run(tj_backend *b, struct tj__kern *k);
static int tj__gemm_max_parts(void);
static int tj__pack_slots(tj_ctx *c) {
    int lo, t = c->threads / tj_local_devices(c, &lo);
    if (c->backend && c->backend->run != tj__ds_run) return 0;
    return t < 1 ? 1 : t > tj__gemm_max_parts() ? tj__gemm_max_parts() : t;
}
static tj_status tj__plan_once(tj_prog *p, int quick) {
    tj_graph *g = p->g;
    tj__heap h[2];
    tj__reqs rq;
    int i, j, s;
    tj_memory_analysis *m = &p->mem;
    memset(h, 0, sizeof h);
    memset(&rq, 0, sizeof rq);
    memset(m, 0, sizeof *m);
    for (i = 0; i < p->nsched; i++) {
        tj_node *n = p->sched[i];
        n->lt = tj__local(p->ctx, &n->t);
        n->root = tj__root(n);
        n->last = n->sched;
        n->off = -1;
        n->out_index = -1;
        n->scratch_off = -1;
        n->scratch_host_off = -1;
        n->pack_slots = tj__pack_slots(p->ctx);
        n->fused = NULL;
        TJ_FREE(n->members);
        n->members = NULL;
        n->nmembers = 0;
        n->store = 0;
    }
    if (tj__fuse(p)) return p->ctx->status;
    for (i = 0; i < p->nsched; i++)
        for (j = 0; j < p->sched[i]->nin; j++) {
            tj_node *r = p->sched[i]->in[j]->root;
            int at = p->sched[i]->fused ? tj__froot(p->sched[i])->sched : i; /* read when the group runs */
            if (r->last < at) r->last = at;
        }
    for (i = 0; i < p->nsched; i++) /* a stored member's buffer is written when its group runs */
        if (p->sched[i]->store && p->sched[i]->fused && p->sched[i]->last < tj__froot(p->sched[i])->sched) p->sched[i]->last = tj__froot(p->sched[i])->sched;
    for (i = 0; i < p->nout; i++) {
        tj_node *r = p->outs[i]->root;
        r->last = p->nsched; /* outputs outlive the run */
        r->out_index = i;
        p->out_donor[i] = -1;
    }
    /* donation: pair each output with a donated argument it may overwrite */
    for (i = 0; p->donate && i < p->nout; i++) {
        tj_node *r = p->outs[i]->root;
        for (j = 0; j < g->nparam; j++) {
            int k, used = 0;
            if (!p->donate[j]) continue;
            for (k = 0; k < i; k++) used |= p->out_donor[k] == j;
            if (!used && tj__can_donate(g->params[j], r)) {
                p->out_donor[i] = j;
                m->alias_bytes += tj__lbytes(p->ctx, &r->t);
                break;
            }
        }
    }
    for (i = 0; i < g->nparam; i++) m->argument_bytes += tj__lbytes(p->ctx, &g->params[i]->t);
    for (i = 0; i < p->nout; i++) m->output_bytes += tj__lbytes(p->ctx, &p->outs[i]->t);
    for (i = 0; i < p->nsched; i++) {
        tj_node *n = p->sched[i];
        const tj__opdef *d = &tj__ops[n->op];
        if (n->fused) continue; /* computed in its group's loop; buffers of stored members come with the group */
        for (j = 0; j < (n->members ? n->nmembers : 1); j++) {
            tj_node *x = n->members ? n->members[j] : n;
            if ((x == n || x->store) && tj__needs_buffer(x) && x->op != TJ__OP_PROJ && (x->off = tj__req(&rq, x->space, tj__bytes(&x->lt), i, &x->off)) < 0) goto oom;
        }
        for (j = 0; j < n->nproj; j++) { /* a scan writes all its outputs */
            tj_node *q = n->proj[j];
            q->root = q;
            if (tj__needs_buffer(q) && (q->off = tj__req(&rq, q->space, tj__bytes(&q->lt), i, &q->off)) < 0) goto oom;
        }
        if (d->scratch && d->scratch(n) > 0) {
            if ((n->scratch_off = tj__req(&rq, TJ_SPACE_DEVICE, d->scratch(n), i, &n->scratch_off)) < 0) goto oom;
            rq.r[n->scratch_off].end = i;
        }
        if (n->sub && n->sub->prog && n->sub->prog->arena_bytes[TJ_SPACE_HOST] > 0) { /* a nested scan's offloaded residuals */
            if ((n->scratch_host_off = tj__req(&rq, TJ_SPACE_HOST, n->sub->prog->arena_bytes[TJ_SPACE_HOST], i, &n->scratch_host_off)) < 0) goto oom;
            rq.r[n->scratch_host_off].end = i;
        }
        /* free the buffers whose last use is this node (its own, if unused;
           a fused group frees what its members read) */
        {
            int mi, nm = n->members ? n->nmembers : 1;
            for (mi = 0; mi < nm; mi++) {
                tj_node *x = n->members ? n->members[mi] : n;
                for (j = -1; j < x->nin; j++) {
                    tj_node *r = (j < 0 ? x : x->in[j])->root;
                    if (r->off >= 0 && r->last == i && r->live != 2) {
                        rq.r[r->off].end = i;
                        r->live = 2; /* freed once even if used twice here */
                    }
                }
            }
        }
    }
    for (i = 0; i < p->nsched; i++) p->sched[i]->live = 1;
    /* every buffer's interval is known: place them (the request index each
       offset field holds becomes its offset) */
    for (s = 0; s < 2; s++)
        if (tj__place(&rq, s, &h[s], quick) < 0) goto oom;
    for (s = 0; s < 2; s++) {
        p->arena_bytes[s] = h[s].peak;
        TJ_FREE(h[s].b);
    }
    TJ_FREE(rq.r);
    m->temp_bytes = h[TJ_SPACE_DEVICE].peak;
    m->host_temp_bytes = h[TJ_SPACE_HOST].peak;
    m->pack_bytes = 0; /* the most any one dot holds (scan bodies' included) */
    for (i = 0; i < p->nsched; i++) {
        const tj_node *n = p->sched[i];
        int64_t b = n->scratch_off < 0 && !n->sub ? 0
                  : n->op == TJ__OP_DOT ? tj__dot_pack_bytes(n)
                  : n->op == TJ__OP_AG_DOT || n->op == TJ__OP_DOT_RS ? tj__cdot_pack_bytes(n)
                  : n->sub && n->sub->prog ? n->sub->prog->mem.pack_bytes : 0;
        if (b > m->pack_bytes) m->pack_bytes = b;
    }
    m->peak_bytes = m->argument_bytes + m->output_bytes + m->temp_bytes - m->alias_bytes;
    p->flops = 0;
    for (i = 0; i < p->nsched; i++) p->flops += tj__ops[p->sched[i]->op].flops(p->sched[i]);
    return TJ_OK;
oom:
    TJ_FREE(h[0].b);
    TJ_FREE(h[1].b);
    TJ_FREE(rq.r);
    tj__err(p->ctx, TJ_ERR_OOM, p->file, p->line, "jit '%s': out of memory planning", p->name);
    return TJ_ERR_OOM;
}
/* ---- recomputing a recomputed value again ----
   A value the remat policy recomputes in the backward pass (a re-run
   all-gather, say) is used early in the backward pass and again late (a
   weight gradient); between the two it would sit in memory through the
   backward pass's peak. The plan tries running it once more, right before
   its first use after the peak, from the same inputs, and keeps that where
   the arena gets smaller (never otherwise). Same op, same inputs: the
   same bits. */
/* bytes of device temp live at each step (views and outputs aside; kernel
   workspace included) */
static int64_t *tj__live_steps(const tj_prog *p) {
    int64_t *d = (int64_t *)tj__calloc(sizeof(int64_t) * (size_t)(p->nsched + 2));
    int i;
    if (!d) return NULL;
    for (i = 0; i < p->nsched; i++) {
        const tj_node *x = p->sched[i];
        int at = x->fused ? tj__froot((tj_node *)x)->sched : i, end = x->last < p->nsched ? x->last : p->nsched;
        if (x->scratch_off >= 0 && tj__ops[x->op].scratch) { /* kernel workspace, during its node */
            d[i] += tj__align(tj__ops[x->op].scratch(x));
            d[i + 1] -= tj__align(tj__ops[x->op].scratch(x));
        }
        if (x->off < 0 || x->root != x || x->space != TJ_SPACE_DEVICE || x->out_index >= 0) continue;
        d[at] += tj__align(tj__bytes(&x->lt));
        d[end + 1] -= tj__align(tj__bytes(&x->lt));
    }
    for (i = 1; i <= p->nsched; i++) d[i] += d[i - 1];
    return d;
}
/* what the remat decisions below compare: the most bytes live at one step
   (the least any placement needs: it does not depend on the placement
   heuristics), then the arena of a quick placement. -1 out of memory. */
static int64_t tj__most_live(const tj_prog *p) {
    int64_t *lv = tj__live_steps(p), m = 0;
    int i;
    if (!lv) return -1;
    for (i = 0; i < p->nsched; i++) if (lv[i] > m) m = lv[i];
    TJ_FREE(lv);
    return m;
}
static int tj__plan_cmp(int64_t ml0, int64_t t0, const tj_prog *p, int64_t *ml) {
    *ml = tj__most_live(p);
    if (*ml != ml0) return *ml < ml0 ? -1 : 1;
    return p->mem.temp_bytes < t0 ? -1 : p->mem.temp_bytes > t0;
}
/* ---- a recomputed value that is still there ----
   A value the backward pass recomputes (a node copied for the remat policy)
   whose original is alive anyway at that point (a program output, or a
   value read later still) is read from the original: the copy would only
   hold the same bits twice. Nodes are numbered by value: same op, same
   attributes and type, inputs of the same values (a recomputed chain is
   the same value as the chain it copies). Returns how many were replaced,
   or -1 out of memory. */
static uint64_t tj__vn_hash(const tj_node *x, const int *cls) {
    uint64_t h = 1469598103934665603ull;
    int j;
    h = (h ^ (uint64_t)x->op) * 1099511628211ull;
    h = (h ^ (uint64_t)x->nin) * 1099511628211ull;
    for (j = 0; j < x->nin; j++) h = (h ^ (uint64_t)cls[x->in[j]->id]) * 1099511628211ull;
    h = (h ^ (uint64_t)x->t.rank) * 1099511628211ull;
    for (j = 0; j < x->t.rank; j++) h = (h ^ (uint64_t)x->t.dim[j]) * 1099511628211ull;
    return h; /* (attributes and the rest: compared in full) */
}
static int tj__vn_same(const tj_node *x, const tj_node *y, const int *cls) {
    int j;
    if (x->op != y->op || x->nin != y->nin || x->space != y->space || !tj__same_type(&x->t, &y->t)) return 0;
    if (x->op == TJ__OP_FILL ? x->a.s != y->a.s : memcmp(&x->a, &y->a, sizeof x->a) != 0) return 0; /* (a fill is its value and type) */
    if ((x->name == NULL) != (y->name == NULL) || (x->name && strcmp(x->name, y->name) != 0)) return 0;
    for (j = 0; j < x->nin; j++)
        if (cls[x->in[j]->id] != cls[y->in[j]->id]) return 0;
    return 1;
}
/* the input slots a reuse redirected, to undo it */
typedef struct {
    tj_node ***slot;
    tj_node **old;
    int n, cap;
} tj__redir;
static int tj__redir_add(tj__redir *r, tj_node **slot) {
    if (!r) return 0;
    if (r->n == r->cap) {
        int nc = r->cap ? 2 * r->cap : 64;
        tj_node ***ns = (tj_node ***)TJ_REALLOC(r->slot, sizeof(tj_node **) * (size_t)nc);
        tj_node **no;
        if (!ns) return -1;
        r->slot = ns;
        if (!(no = (tj_node **)TJ_REALLOC(r->old, sizeof(tj_node *) * (size_t)nc))) return -1;
        r->old = no;
        r->cap = nc;
    }
    r->slot[r->n] = slot;
    r->old[r->n++] = *slot;
    return 0;
}
static void tj__redir_undo(tj__redir *r) {
    while (r->n > 0) {
        r->n--;
        *r->slot[r->n] = r->old[r->n];
    }
}
/* mode 0: every recomputed value whose original is still alive there;
   mode 1: every recomputed value (read from its original, alive or not:
   the original is then kept instead); mode 2: the only-th of those whose
   original is not alive. Returns how many were replaced, -1 out of memory. */
static int tj__reuse(tj_prog *p, int mode, int only, tj__redir *log) {
    tj_graph *g = p->g;
    int *cls = (int *)tj__malloc(sizeof(int) * (size_t)(g->n + 1)), i, j, k, nrep = 0, cap = 16, ncand = 0;
    tj_node **latest = NULL, **tab = NULL;
    while (cap < 2 * p->nsched + 2) cap *= 2;
    latest = (tj_node **)tj__calloc(sizeof(tj_node *) * (size_t)(g->n + 1));
    tab = (tj_node **)tj__calloc(sizeof(tj_node *) * (size_t)cap);
    if (!cls || !latest || !tab) goto oom;
    for (i = 0; i < g->n; i++) cls[i] = i;
    for (i = 0; i < p->nsched; i++) {
        tj_node *x = p->sched[i], *o;
        uint64_t h;
        int alive, take;
        if (x->op == TJ__OP_PARAM || x->sub || (tj__ops[x->op].flags & TJ__MULTI) || x->op == TJ__OP_PROJ) continue; /* values of their own */
        h = tj__vn_hash(x, cls);
        for (k = (int)(h & (uint64_t)(cap - 1)); tab[k] && !tj__vn_same(tab[k], x, cls); k = (k + 1) & (cap - 1)) {}
        if (!tab[k]) { /* a new value */
            tab[k] = x;
            latest[x->id] = x;
            continue;
        }
        cls[x->id] = cls[tab[k]->id];
        o = latest[cls[x->id]];
        take = 0;
        if (x->remat && x->root == x && x->out_index < 0 && o->root == o && o->sched < i && o->space == x->space) { /* (an output keeps its own node) */
            alive = o->last >= i || o->out_index >= 0;
            /* (a value made from nothing, a constant, is cheaper made again:
               keeping it would only stretch its life) */
            take = mode == 0 ? alive : !x->nin ? 0 : mode == 1 ? 1 : !alive && ncand++ == only;
        }
        if (take) {
            for (k = i + 1; k < p->nsched; k++) /* its readers read the original */
                for (j = 0; j < p->sched[k]->nin; j++)
                    if (p->sched[k]->in[j] == x) {
                        if (tj__redir_add(log, &p->sched[k]->in[j])) goto oom;
                        p->sched[k]->in[j] = o;
                    }
            nrep++;
        } else latest[cls[x->id]] = x;
    }
    TJ_FREE(cls);
    TJ_FREE(latest);
    TJ_FREE(tab);
    return nrep;
oom:
    TJ_FREE(cls);
    TJ_FREE(latest);
    TJ_FREE(tab);
    return -1;
}
/* try a reuse; keep it only if the arena gets smaller (mode 0: no larger).
   Returns 1 kept, 0 not (or nothing to reuse), -1 out of memory, or the
   status of a failed plan as -2. */
static int tj__try_reuse(tj_prog *p, int mode, int only, tj_status *st) {
    tj__redir log;
    int64_t before = p->mem.temp_bytes, ml0 = tj__most_live(p), ml;
    int n, cmp;
    memset(&log, 0, sizeof log);
    if ((n = tj__reuse(p, mode, only, &log)) < 0) {
        tj__redir_undo(&log);
        TJ_FREE(log.slot);
        TJ_FREE(log.old);
        return -1;
    }
    if (n) {
        if (!(*st = tj__schedule(p))) *st = tj__plan_once(p, 1);
        cmp = *st ? 0 : tj__plan_cmp(ml0, before, p, &ml);
        if (!*st && (ml < 0 || ml0 < 0 || (mode ? cmp >= 0 : cmp > 0))) {
            tj__redir_undo(&log);
            if (!(*st = tj__schedule(p))) *st = tj__plan_once(p, 1);
            n = 0;
        }
    }
    TJ_FREE(log.slot);
    TJ_FREE(log.old);
    return *st ? -2 : n > 0;
}
/* runs of recomputed values once more (see above), while they lower the
   plan; -1 out of memory (st: a failed plan's status) */
static int tj__try_splits(tj_prog *p, tj_status *stp) {
    tj_graph *g = p->g;
    tj_status st = *stp;
    tj_node *tried[16];
    int tries = 0;
    while (!st && tries < 16) {
        int i, j, k, u = -1, ok, vs = -1;
        tj_node *v = NULL, *v2, **nn;
        int64_t before = p->mem.temp_bytes, vlive = -1, *live = tj__live_steps(p), ml0 = tj__most_live(p), ml;
        if (!live) return -1;
        /* the recomputed value whose unread stretch meets the most live bytes */
        for (i = 0; i < p->nsched; i++) {
            tj_node *x = p->sched[i];
            int s = -1, last = -1;
            if (!x->remat || x->off < 0 || x->root != x || x->space != TJ_SPACE_DEVICE || x->out_index >= 0 || x->sub || x->nproj ||
                (tj__ops[x->op].flags & TJ__MULTI) || ((!x->nin || (tj__ops[x->op].flags & TJ__SOURCE)) && x->op != TJ__OP_FILL) || x->op == TJ__OP_PARAM ||
                x->op == TJ__OP_PROJ || x->last >= p->nsched)
                continue; /* (a constant is made again as well) */
            for (ok = 1, k = 0; k < tries; k++) ok &= tried[k] != x;
            for (k = i + 1; k <= x->last && ok; k++) {
                int reads = 0;
                for (j = 0; j < p->sched[k]->nin; j++)
                    if (p->sched[k]->in[j] == x) {
                        reads = 1;
                        if (tj__ops[p->sched[k]->op].flags & TJ__VIEW) ok = 0; /* a view keeps it alive: no */
                    }
                if (reads) last = k;
                else if (last > i && (s < 0 || live[k] > live[s])) s = k; /* unread, after a use */
            }
            if (!ok || s < 0 || last <= s) continue;
            if (live[s] > vlive || (live[s] == vlive && tj__bytes(&x->lt) > tj__bytes(&v->lt))) v = x, vs = s, vlive = live[s];
        }
        TJ_FREE(live);
        if (!v) break;
        tried[tries++] = v;
        for (k = vs + 1; k < p->nsched && u < 0; k++)
            for (j = 0; j < p->sched[k]->nin; j++)
                if (p->sched[k]->in[j] == v) u = k;
        if (u < 0) continue;
        /* the copy, in the graph right before that use */
        if (!(v2 = tj__raw_node(g, v, v->op, &v->t, v->nin, v->in))) return -1;
        v2->members = NULL, v2->nmembers = 0, v2->fused = NULL, v2->store = 0, v2->proj = NULL, v2->nproj = 0, v2->repl = NULL, v2->name = NULL;
        if (v->name && !(v2->name = tj__strdup(v->name))) {
            TJ_FREE(v2->in);
            TJ_FREE(v2);
            return -1;
        }
        if (!(nn = (tj_node **)TJ_REALLOC(g->nodes, sizeof(tj_node *) * (size_t)(g->n + 1)))) {
            TJ_FREE(v2->in);
            TJ_FREE(v2->name);
            TJ_FREE(v2);
            return -1;
        }
        g->nodes = nn;
        for (i = g->n, k = p->sched[u]->id; i > k; i--) g->nodes[i] = g->nodes[i - 1];
        g->nodes[k] = v2;
        g->n++;
        g->cap = g->n;
        for (i = 0; i < g->n; i++) g->nodes[i]->id = i;
        for (k = u; k < p->nsched; k++)
            for (j = 0; j < p->sched[k]->nin; j++)
                if (p->sched[k]->in[j] == v) p->sched[k]->in[j] = v2;
        st = tj__schedule(p);
        if (!st) st = tj__plan_once(p, 1);
        if (st || (ml0 >= 0 && tj__plan_cmp(ml0, before, p, &ml) < 0 && ml >= 0)) continue;
        for (i = 0; i < g->n; i++) /* no better: the later uses read v again (the copy is dead) */
            for (j = 0; j < g->nodes[i]->nin; j++)
                if (g->nodes[i]->in[j] == v2) g->nodes[i]->in[j] = v;
        st = tj__schedule(p);
        if (!st) st = tj__plan_once(p, 1);
    }
    *stp = st;
    return 0;
}
static tj_status tj__plan(tj_prog *p) {
    tj_status st = tj__plan_once(p, 1);
    int nrep, k;
    if (!st && tj__try_reuse(p, 0, 0, &st) == -1) goto oom; /* recomputed values that are still there */
    if (!st && tj__try_splits(p, &st)) goto oom;
    /* recomputing costs memory too (the values it recomputes from, and
       it runs where the backward pass holds its cotangents): where reading
       a recomputed value from its original makes the plan smaller, the
       original is kept. All of them at once, then one by one (bounded). */
    if (!st && (nrep = tj__try_reuse(p, 1, 0, &st)) == -1) goto oom;
    for (k = 0, nrep = 0; !st && k < 16 && nrep < 16; nrep++) {
        int r = tj__try_reuse(p, 2, k, &st);
        if (r == -1) goto oom;
        if (r == 0) k++; /* not kept (or none left): the next one */
    }
    if (!st && tj__try_reuse(p, 0, 0, &st) == -1) goto oom; /* again: the groups of fused loops may have grown */
    if (!st && tj__try_splits(p, &st)) goto oom;
    /* the decisions above compare quick placements (no local search); the
       plan itself takes the best placement there is */
    if (!st) st = tj__plan_once(p, 0);
    return st;
oom:
    tj__err(p->ctx, TJ_ERR_OOM, p->file, p->line, "jit '%s': out of memory planning", p->name);
    return TJ_ERR_OOM;
}
TJDEF tj_memory_analysis tj_prog_memory(const tj_prog *p) {
    tj_memory_analysis z;
    memset(&z, 0, sizeof z);
    return p ? p->mem : z;
}
TJDEF double tj_prog_flops(const tj_prog *p) { return p ? p->flops : 0; }

/* ==== [11] run: backends, CPU backend, matmul kernel ===================== */
/* The CPU backend runs the schedule: one arena allocation per memory space
   per call (its size is the plan's temp bytes), then each node's kernel on
   pointers into the arenas, the argument buffers, or the output buffers.
   A scan body runs through the same loop on its parent's workspace. */

/* ---- fusion of elementwise loops (the CPU backend's; the plan calls tj__fuse) ----
   Elementwise nodes of one local layout that feed one another run as one
   loop, a chunk at a time, at the place of their last member in the
   schedule (AdamW: the moments, the update and the new parameters in one
   pass over memory; GELU's backward; bias adds). A member read outside its
   group (an output, or an input of another node) is also written to its
   buffer (it is "stored"); the others never touch memory. A producer's
   group joins its consumer's when every node outside both that reads a
   member comes after the consumer, and the group only moves past scalars
   and elementwise nodes of its layout (moving past other work would keep
   the group's inputs alive through it). Each member's result is rounded to its
   dtype as if it had been stored, so fused and unfused runs give the same
   bits. */
#define TJ__MAXFUSE 24
#if TJ__MAXFUSE * 3 > TJ__KIN || TJ__MAXFUSE > TJ__KOUT
#error "a fused group's tables must fit tj__kern's own (TJ__KIN, TJ__KOUT)"
#endif
static int tj__is_ew(const tj_node *n) { return n->op < TJ__OP_PARAM || n->op == TJ__OP_SELECT; }
static int tj__same_layout(const tj__type *a, const tj__type *b) {
    int i;
    if (a->rank != b->rank) return 0;
    for (i = 0; i < a->rank; i++)
        if (a->ax[i] != b->ax[i] || a->dim[i] != b->dim[i]) return 0;
    return 1;
}
static tj_node *tj__froot(tj_node *n) {
    while (n->fused) n = n->fused;
    return n;
}
/* elementwise, on the device, every input laid out like it or a scalar */
static int tj__fusable(const tj_node *n) {
    int j;
    if (!tj__is_ew(n) || n->space != TJ_SPACE_DEVICE || n->nin > 3) return 0;
    for (j = 0; j < n->nin; j++)
        if (n->in[j]->lt.rank && !tj__same_layout(&n->in[j]->lt, &n->lt)) return 0;
    return 1;
}
typedef struct {
    tj_node **cons;   /* the scheduled readers of node id: cons[at[id] .. at[id + 1]) */
    int *at;
    int *next, *tail; /* each group as a list of node ids from its root */
    int *size;
} tj__fusion;
/* may group rx join group c? */
static int tj__fuse_ok(const tj_prog *p, const tj__fusion *f, tj_node *rx, tj_node *c) {
    int y, k, g;
    for (k = rx->sched + 1; k < c->sched; k++) {
        tj_node *z = p->sched[k], *r = tj__froot(z);
        if (r != rx && r != c && z->lt.rank && !(tj__fusable(z) && tj__same_layout(&z->lt, &c->lt))) return 0;
    }
    for (g = 0; g < 2; g++) /* members' other readers come after c */
        for (y = (g ? c : rx)->id; y >= 0; y = f->next[y])
            for (k = f->at[y]; k < f->at[y + 1]; k++) {
                tj_node *r = tj__froot(f->cons[k]);
                if (r != rx && r != c && f->cons[k]->sched < c->sched) return 0;
            }
    return 1;
}
/* The CPU backend's own step (no other backend sees such groups): a
   reduction over every axis of an elementwise group's root x joins that
   group when nothing else reads the group's members, so a sum of squares
   reads its input once and never stores the squares (tj__k_fused). Between
   the two in the schedule only the group's members, scalars and
   elementwise nodes of x's layout may run (as for groups: tj__fuse_ok). */
static void tj__fuse_reduce(tj_prog *p, const tj__fusion *f) {
    int i, y, k;
    for (i = 0; i < p->nsched; i++) {
        tj_node *c = p->sched[i], *x = c->nin == 1 ? c->in[0] : NULL;
        int ok;
        if (!x || tj__ops[c->op].cpu != tj__k_reduce || c->lt.rank || x->g != p->g || !x->live || x->fused || !tj__fusable(x) || c->space != x->space ||
            f->size[x->id] + 1 > TJ__MAXFUSE)
            continue;
        for (ok = 1, k = x->sched + 1; k < c->sched && ok; k++) {
            tj_node *z = p->sched[k];
            ok = tj__froot(z) == x || !z->lt.rank || (tj__fusable(z) && tj__same_layout(&z->lt, &x->lt));
        }
        for (y = x->id; y >= 0 && ok; y = f->next[y]) { /* the members' readers: the group's own and c */
            for (k = f->at[y]; k < f->at[y + 1] && ok; k++) ok = f->cons[k] == c || tj__froot(f->cons[k]) == x;
            for (k = 0; k < p->nout && ok; k++) ok = p->outs[k] != p->g->nodes[y];
        }
        if (ok) x->fused = c;
    }
}
static tj_status tj__fuse(tj_prog *p) {
    int i, j, k, n = p->g->n;
    tj__fusion f;
    if (p->ctx->backend && !p->ctx->backend->fused_groups) return TJ_OK; /* such a backend runs one kernel per node */
    memset(&f, 0, sizeof f);
    f.at = (int *)tj__calloc(sizeof(int) * (size_t)(n + 2));
    f.next = (int *)tj__malloc(sizeof(int) * (size_t)(n + 1));
    f.tail = (int *)tj__malloc(sizeof(int) * (size_t)(n + 1));
    f.size = (int *)tj__malloc(sizeof(int) * (size_t)(n + 1));
    if (!f.at || !f.next || !f.tail || !f.size) goto oom;
    for (i = 0; i < p->nsched; i++) /* readers: counted, then placed */
        for (j = 0; j < p->sched[i]->nin; j++) f.at[p->sched[i]->in[j]->id + 2]++;
    for (i = 2; i <= n + 1; i++) f.at[i] += f.at[i - 1];
    if (!(f.cons = (tj_node **)tj__malloc(sizeof(tj_node *) * (size_t)(f.at[n + 1] + 1)))) goto oom;
    for (i = 0; i < p->nsched; i++)
        for (j = 0; j < p->sched[i]->nin; j++) f.cons[f.at[p->sched[i]->in[j]->id + 1]++] = p->sched[i];
    for (i = 0; i < n; i++) {
        f.next[i] = -1;
        f.tail[i] = i;
        f.size[i] = 1;
    }
    for (i = 0; i < p->nsched; i++) {
        tj_node *c = p->sched[i];
        if (!tj__fusable(c)) continue;
        for (j = 0; j < c->nin; j++) {
            tj_node *x = c->in[j], *rx;
            if (x->g != p->g || !x->live || !tj__fusable(x) || !tj__same_layout(&x->lt, &c->lt)) continue;
            rx = tj__froot(x);
            if (rx == c || f.size[c->id] + f.size[rx->id] > TJ__MAXFUSE || !tj__fuse_ok(p, &f, rx, c)) continue;
            rx->fused = c;
            f.next[f.tail[c->id]] = rx->id;
            f.tail[c->id] = f.tail[rx->id];
            f.size[c->id] += f.size[rx->id];
        }
    }
    if (!p->ctx->backend) tj__fuse_reduce(p, &f);
    for (i = 0; i < p->nout; i++) p->outs[i]->store = 1;
    for (i = 0; i < p->nsched; i++) { /* each root's members, in schedule order */
        tj_node *m = p->sched[i], *r;
        if (!m->fused) continue;
        r = tj__froot(m);
        for (k = f.at[m->id]; k < f.at[m->id + 1]; k++) m->store |= tj__froot(f.cons[k]) != r;
        if (!r->members && !(r->members = (tj_node **)tj__malloc(sizeof(tj_node *) * (TJ__MAXFUSE + 1)))) goto oom;
        r->members[r->nmembers++] = m;
    }
    for (i = 0; i < p->nsched; i++)
        if (p->sched[i]->members) p->sched[i]->members[p->sched[i]->nmembers++] = p->sched[i];
    TJ_FREE(f.cons);
    TJ_FREE(f.at);
    TJ_FREE(f.next);
    TJ_FREE(f.tail);
    TJ_FREE(f.size);
    return TJ_OK;
oom:
    TJ_FREE(f.cons);
    TJ_FREE(f.at);
    TJ_FREE(f.next);
    TJ_FREE(f.tail);
    TJ_FREE(f.size);
    tj__err(p->ctx, TJ_ERR_OOM, p->file, p->line, "jit '%s': out of memory fusing", p->name);
    return TJ_ERR_OOM;
}
/* round n values of the compute type as if stored in dtype dt and loaded
   again (in float, only bf16 needs it: see tj__flt_ok) */
static void tj__round_n(int flt, void *v, int64_t n, tj_dtype dt) {
    int64_t i;
    if (flt) {
        float *f = (float *)v;
        if (dt == TJ_BF16) for (i = 0; i < n; i++) f[i] = tj_bf16_to_f32(tj_f32_to_bf16(f[i]));
    } else if (dt == TJ_F32) {
        double *d = (double *)v;
        for (i = 0; i < n; i++) d[i] = (float)d[i];
    } else if (dt != TJ_F64) {
        double *d = (double *)v;
        unsigned char b[8];
        for (i = 0; i < n; i++) {
            tj__st(b, dt, 0, d[i]);
            d[i] = tj__ld(b, dt, 0);
        }
    }
}
/* The fused loop of group root r: leaves are read from their buffers.
   The device's threads take slices of the elements, a chunk at a time, and
   each member computes the whole chunk (one tj__math call) before the next
   one starts. A call costs about as much as a hundred elements of work, so
   float chunks are long (up to TJ__FMAX): a member's result lives in a slot
   of resbuf that is reused once no later member reads it (AdamW's 17
   members need 3 slots), and a stored f32 member computes straight into
   its output when that is safe (tj__fused_direct). The chunk length never
   changes a result: every member is elementwise.
   A group whose root is a reduction over every axis (tj__fuse_reduce)
   runs the reduction's own kernel, which asks for its input a chunk at a
   time (tj__fused_gen): the elementwise members are computed then, never
   stored. */
#define TJ__FRES (TJ__MAXFUSE * TJ__CHUNK) /* resbuf, in doubles */
#define TJ__FMAX (16 * TJ__CHUNK)          /* the longest float chunk */
typedef struct {
    const tj_node *r;
    const void *const *leafp; /* per member and input: a leaf's buffer (NULL: a member's result) */
    void *const *storep;      /* per member: the buffer it is stored to, or NULL */
    int flt, nm;             /* nm: the elementwise members (all but a reduction root) */
    int64_t n, cm;           /* their elements, and elements per chunk */
    int src[TJ__MAXFUSE][3]; /* where each operand comes from: a member's result, or a leaf (-1) */
    int slot[TJ__MAXFUSE];   /* the member's slot in resbuf, or -1: computed straight into its output */
} tj__fused;
/* the members' results for elements [c0, c0 + m) into res[]; resbuf holds
   TJ__FRES doubles, opnd 3 x TJ__FMAX / 2 */
static void tj__fused_chunk(const tj__fused *fu, int64_t c0, int64_t m, double *resbuf, double (*opnd)[TJ__FMAX / 2], void **res) {
    size_t es = fu->flt ? sizeof(float) : sizeof(double); /* results packed densely: the chunk's working set stays in cache */
    int mi, j, flt = fu->flt;
    for (mi = 0; mi < fu->nm; mi++) {
        const tj_node *x = fu->r->members[mi];
        const void *ins[3] = {NULL, NULL, NULL};
        unsigned one = 0;
        for (j = 0; j < x->nin; j++) {
            const tj_node *y = x->in[j];
            if (fu->src[mi][j] >= 0) ins[j] = res[fu->src[mi][j]];
            else { /* a leaf; a scalar is one value, broadcast */
                ins[j] = tj__chunk(flt, fu->leafp[mi * 3 + j], y->lt.dt, y->lt.rank ? c0 : 0, 1, y->lt.rank ? m : 1, opnd[j]);
                one |= (unsigned)!y->lt.rank << j;
            }
        }
        res[mi] = fu->slot[mi] < 0 ? (void *)((float *)fu->storep[mi] + c0) : (void *)((char *)resbuf + (size_t)fu->slot[mi] * (size_t)fu->cm * es);
        if (x->lt.dt == TJ_I32 && tj__i32_arith(x->op)) tj__imath(x->op, x->a.s, one, ins, res[mi], m); /* (flt is 0: an i32 result) */
        else tj__math(flt, x->op, x->a.s, one, ins, res[mi], m);
        tj__round_n(flt, res[mi], m, x->lt.dt);
    }
}
static void tj__fused_part(const void *arg, int part, int nparts) {
    const tj__fused *fu = (const tj__fused *)arg;
    double resbuf[TJ__FRES], opnd[3][TJ__FMAX / 2]; /* opnd: a converted leaf chunk (TJ__CHUNK doubles or TJ__FMAX floats) */
    void *res[TJ__MAXFUSE];                          /* this chunk's result of each member */
    int64_t lo = fu->n * part / nparts, hi = fu->n * (part + 1) / nparts, c0, m, cm = fu->cm;
    int mi;
    for (c0 = lo; c0 < hi; c0 += m) {
        m = hi - c0 < cm ? hi - c0 : cm;
        tj__fused_chunk(fu, c0, m, resbuf, opnd, res);
        /* the others are stored after the whole chunk is computed: a member
           may overwrite a donated argument that a later member reads */
        for (mi = 0; mi < fu->nm; mi++)
            if (fu->storep[mi] && fu->slot[mi] >= 0) tj__unchunk(fu->flt, fu->storep[mi], fu->r->members[mi]->lt.dt, c0, 1, m, res[mi]);
    }
}
/* a reduction root's input, elements [at, at + m) (m <= TJ__CHUNK), as
   doubles: the last elementwise member's values as stored in its dtype */
static void tj__fused_gen(const void *arg, int64_t at, int64_t m, double *buf) {
    const tj__fused *fu = (const tj__fused *)arg;
    double resbuf[TJ__FRES], opnd[3][TJ__FMAX / 2];
    void *res[TJ__MAXFUSE];
    int64_t j;
    tj__fused_chunk(fu, at, m, resbuf, opnd, res);
    if (!fu->flt) memcpy(buf, res[fu->nm - 1], sizeof(double) * (size_t)m);
    else for (j = 0; j < m; j++) buf[j] = ((const float *)res[fu->nm - 1])[j];
}
/* may member mi compute straight into its stored buffer? When it is f32 in
   a float loop and no leaf overlaps the buffer, other than the very same
   array read only by members up to mi (a donated argument updated in place:
   each chunk of it is read before mi writes that chunk) */
static int tj__fused_direct(const tj__fused *fu, int mi) {
    const tj_node *r = fu->r;
    const char *s = (const char *)fu->storep[mi];
    int64_t nb = fu->n * 4;
    int k, j;
    if (!fu->flt || !s || r->members[mi]->lt.dt != TJ_F32) return 0;
    for (k = 0; k < fu->nm; k++)
        for (j = 0; j < r->members[k]->nin; j++) {
            const tj_node *y = r->members[k]->in[j];
            const char *l = (const char *)fu->leafp[k * 3 + j];
            if (fu->src[k][j] >= 0 || !l) continue;
            if (l == s && y->lt.dt == TJ_F32 && y->lt.rank && k <= mi) continue;
            if (l < s + nb && s < l + tj__bytes(&y->lt)) return 0;
        }
    return 1;
}
static void tj__k_fused(const tj_node *r, const void *const *leafp, void *const *storep, int nthreads) {
    tj__fused fu;
    int mi, j, k, nslot = 0, lastuse[TJ__MAXFUSE], holder[TJ__MAXFUSE], red = tj__ops[r->op].cpu == tj__k_reduce;
    fu.r = r;
    fu.leafp = leafp;
    fu.storep = storep;
    fu.flt = 1;
    fu.nm = r->nmembers - red;
    fu.n = tj__numel(&r->members[fu.nm - 1]->lt);
    for (mi = 0; mi < fu.nm; mi++) {
        const tj_node *x = r->members[mi];
        tj_dtype idt[3];
        lastuse[mi] = storep[mi] || mi == fu.nm - 1 ? fu.nm : mi; /* a stored result is kept to the chunk's end */
        for (j = 0; j < x->nin; j++) {
            idt[j] = x->in[j]->lt.dt;
            fu.src[mi][j] = -1;
            for (k = 0; k < mi; k++)
                if (r->members[k] == x->in[j]) fu.src[mi][j] = k, lastuse[k] = lastuse[k] > mi ? lastuse[k] : mi;
        }
        fu.flt &= tj__flt_ok(x->op, x->lt.dt, x->nin, idt);
    }
    /* slots: a member takes the lowest free one while its operands still
       hold theirs (it never writes over an operand), then frees those that
       no later member reads */
    for (k = 0; k < TJ__MAXFUSE; k++) holder[k] = -1;
    for (mi = 0; mi < fu.nm; mi++) {
        fu.slot[mi] = -1;
        if (!tj__fused_direct(&fu, mi)) {
            for (k = 0; holder[k] >= 0; k++) continue;
            holder[k] = mi;
            fu.slot[mi] = k;
            nslot = k + 1 > nslot ? k + 1 : nslot;
        }
        for (k = 0; k < TJ__MAXFUSE; k++)
            if (holder[k] >= 0 && lastuse[holder[k]] <= mi) holder[k] = -1;
    }
    /* doubles: TJ__CHUNK; floats: as many as the slots hold, up to TJ__FMAX, whole cache lines */
    fu.cm = TJ__CHUNK;
    if (fu.flt) fu.cm = nslot ? (int64_t)TJ__FRES * 2 / nslot / 16 * 16 : TJ__FMAX;
    if (fu.cm > TJ__FMAX) fu.cm = TJ__FMAX;
    if (red) { /* the reduction's kernel, its input made by tj__fused_gen */
        tj__kern k;
        memset(&k, 0, offsetof(tj__kern, it_s));
        k.it = k.it_s;
        k.in = k.in_s;
        k.pout = k.pout_s;
        k.n = (tj_node *)r;
        k.nin = 1;
        k.it[0] = &r->members[fu.nm - 1]->lt;
        k.ot = r->lt;
        k.out = storep[fu.nm];
        k.nthreads = nthreads;
        tj__reduce_run(&k, tj__fused_gen, &fu);
    } else
        tj__parallel(tj__nparts(fu.n, nthreads), tj__fused_part, &fu);
}

/* ---- the f32 matmul (sgemm) ---- */
/* ---------------------------------------------------------------------------
   The f32 matrix multiply (sgemm) of the CPU backend.

   C[M,N] = (accumulate ? C : 0) + op(A)[M,K] * op(B)[K,N], all row-major.

   Blocking scheme (GotoBLAS/BLIS style, adapted to row-major C):
   the output is first cut into one rectangle per thread (split along N when
   that balances, else along M), so threads never share a C element and need
   no synchronisation beyond the final join. Inside its rectangle a thread
   loops ic (MC rows) -> pc (KC deep slice of K) -> jc (NC columns). For each
   (ic,pc) it packs op(A)[ic:ic+MC, pc:pc+KC] into MR-row micro-panels stored
   k-major (MR floats per k step), for each (ic,pc,jc) it packs
   op(B)[pc:pc+KC, jc:jc+NC] into NR-column micro-panels stored k-major (NR
   floats per k step). Packing absorbs the four transpose combinations and
   any leading dimensions, so one micro-kernel serves everything; edges are
   zero-padded in the packs and masked at store time. The micro-kernel keeps
   an MR x NR tile of C in registers (AVX-512: 14x32 = 28 zmm accumulators,
   2 zmm of B and one broadcast of A per k step) and runs over the whole KC.
   Loop order inside a block is ir (A micro-panel, ~14 KB, stays in L1) then
   jr (B micro-panels streamed from the packed B block, ~512 KB, in L2), so
   each A micro-panel is loaded from L1 NC/NR times and the B block from L2
   MC/MR times. Every element of A and B is packed once per (rectangle)
   except B, which is repacked once per MC rows (MC is large, so that's a
   small cost).

   Dispatch is at run time: AVX-512F (14x32), AVX2+FMA (6x16), or portable C
   (4x16 plain loops, left to the auto-vectoriser). Tiny products skip all of
   this and use a direct loop. bf16 operands (tj__bgemm, f32 C) take the same
   loops with k packed in pairs for vdpbf16ps where the CPU has AVX512_BF16,
   else the f32 kernel on operands widened while packing. In a program the
   pack buffers are part of each dot's planned workspace. Threads come from a small persistent pthread
   pool created on first use; callers with nthreads == 1 never touch the pool
   or any global state, so they may run concurrently from many threads.
   Calls with nthreads > 1 serialize on the pool mutex.
   ------------------------------------------------------------------------- */
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <pthread.h>
#define TJ__SGEMM_THREADS 1

#if defined(__GNUC__)
#define TJ__MAYBE_UNUSED __attribute__((unused))
#else
#define TJ__MAYBE_UNUSED
#endif

/* micro-kernel: C[0:mr,0:nr] = (load_c ? C : 0) + sum_k Ap[k*MR+i]*Bp[k*NR+j].
   Ap/Bp are packed, zero-padded micro-panels; mr<=MR, nr<=NR mark the valid
   part of the tile (edge tiles). */
typedef void (*tj__sgemm_kernel_fn)(int kc, const void *Ap, const void *Bp,
                                    float *C, int ldc, int mr, int nr, int load_c);

/* packers: op(A)[i0:i0+mc, p0:p0+kc] into MR-row micro-panels and
   op(B)[p0:p0+kc, j0:j0+nc] into NR-column micro-panels (see tj__sgemm_pack_a/b) */
typedef void (*tj__sgemm_pack_fn)(int trans, const void *X, int ldx, int r0, int rn,
                                  int c0, int cn, int R, void *dst);

typedef struct {
    int mr, nr;      /* register tile */
    int kc, mc, nc;  /* cache blocks; mc multiple of mr, nc multiple of nr */
    int esz;         /* bytes per packed element: 4 (f32), 2 (bf16 pairs, kc even) */
    tj__sgemm_kernel_fn kernel;
    tj__sgemm_pack_fn pack_a, pack_b;
    const char *name;
} tj__sgemm_cfg;

/* ---- packing ------------------------------------------------------------------ */
/* op(A)[i0:i0+mc, p0:p0+kc] -> MR-row micro-panels, k-major, rows padded with 0;
   op(B)[p0:p0+kc, j0:j0+nc] -> NR-column micro-panels, k-major, columns padded
   with 0. One template, two sources: f32 (copied) and bf16 (widened to f32,
   exactly: the bf16 fallback on CPUs without AVX512_BF16). */
#define TJ__SGEMM_PACKERS(NAME_A, NAME_B, T, LD)                                           \
static void NAME_A(int trans_a, const void *A_, int lda, int i0, int mc,                   \
                   int p0, int kc, int MR, void *dst_) {                                   \
    const T *A = (const T *)A_;                                                            \
    float *dst = (float *)dst_;                                                            \
    int ir, i, k;                                                                          \
    for (ir = 0; ir < mc; ir += MR) {                                                      \
        int rows = mc - ir < MR ? mc - ir : MR;                                            \
        if (!trans_a) {                                                                    \
            /* each source row is contiguous in k: read it once, scatter with stride MR */ \
            for (i = 0; i < rows; i++) {                                                   \
                const T *src = A + (size_t)(i0 + ir + i) * lda + p0;                       \
                for (k = 0; k < kc; k++) dst[(size_t)k * MR + i] = LD(src[k]);             \
            }                                                                              \
        } else {                                                                           \
            /* A stored K x M: the MR rows for one k are contiguous */                    \
            for (k = 0; k < kc; k++) {                                                     \
                const T *src = A + (size_t)(p0 + k) * lda + i0 + ir;                       \
                for (i = 0; i < rows; i++) dst[(size_t)k * MR + i] = LD(src[i]);           \
            }                                                                              \
        }                                                                                  \
        for (i = rows; i < MR; i++)                                                        \
            for (k = 0; k < kc; k++) dst[(size_t)k * MR + i] = 0.0f;                       \
        dst += (size_t)MR * kc;                                                            \
    }                                                                                      \
}                                                                                          \
static void NAME_B(int trans_b, const void *B_, int ldb, int p0, int kc,                   \
                   int j0, int nc, int NR, void *dst_) {                                   \
    const T *B = (const T *)B_;                                                            \
    float *dst = (float *)dst_;                                                            \
    int jr, j, k;                                                                          \
    for (jr = 0; jr < nc; jr += NR) {                                                      \
        int cols = nc - jr < NR ? nc - jr : NR;                                            \
        if (!trans_b) {                                                                    \
            for (k = 0; k < kc; k++) {                                                     \
                const T *src = B + (size_t)(p0 + k) * ldb + j0 + jr;                       \
                float *d = dst + (size_t)k * NR;                                           \
                for (j = 0; j < cols; j++) d[j] = LD(src[j]);                              \
                for (; j < NR; j++) d[j] = 0.0f;                                           \
            }                                                                              \
        } else {                                                                           \
            /* B stored N x K: each of the NR source rows is contiguous in k */           \
            for (j = 0; j < cols; j++) {                                                   \
                const T *src = B + (size_t)(j0 + jr + j) * ldb + p0;                       \
                for (k = 0; k < kc; k++) dst[(size_t)k * NR + j] = LD(src[k]);             \
            }                                                                              \
            for (; j < NR; j++)                                                            \
                for (k = 0; k < kc; k++) dst[(size_t)k * NR + j] = 0.0f;                   \
        }                                                                                  \
        dst += (size_t)NR * kc;                                                            \
    }                                                                                      \
}
#define TJ__LD_F32(x) (x)
TJ__SGEMM_PACKERS(tj__sgemm_pack_a, tj__sgemm_pack_b, float, TJ__LD_F32)
TJ__SGEMM_PACKERS(tj__sgemm_pack_a_bf16, tj__sgemm_pack_b_bf16, uint16_t, tj_bf16_to_f32)
#undef TJ__LD_F32

/* ---- portable kernel ---------------------------------------------------- */
#define TJ__P_MR 4
#define TJ__P_NR 16
static void tj__sgemm_kernel_portable(int kc, const void *Ap_, const void *Bp_,
                                      float *C, int ldc, int mr, int nr, int load_c) {
    const float *Ap = (const float *)Ap_, *Bp = (const float *)Bp_;
    float acc[TJ__P_MR][TJ__P_NR];
    int i, j, k;
    for (i = 0; i < TJ__P_MR; i++)
        for (j = 0; j < TJ__P_NR; j++) acc[i][j] = 0.0f;
    for (k = 0; k < kc; k++) {
        const float *a = Ap + (size_t)k * TJ__P_MR, *b = Bp + (size_t)k * TJ__P_NR;
        for (i = 0; i < TJ__P_MR; i++) {
            float ai = a[i];
            for (j = 0; j < TJ__P_NR; j++) acc[i][j] += ai * b[j];
        }
    }
    for (i = 0; i < mr; i++) {
        float *c = C + (size_t)i * ldc;
        if (load_c) for (j = 0; j < nr; j++) c[j] += acc[i][j];
        else        for (j = 0; j < nr; j++) c[j] = acc[i][j];
    }
}

#if TJ__X86
/* ---- AVX-512 kernel: 14 x 32 ------------------------------------------------
   28 accumulators + 2 B vectors + 1 broadcast = 31 of 32 zmm registers. Per k
   step: 2 vector loads of B, 14 broadcasts of A (folded into the FMA as
   {1to16} memory operands), 28 FMAs; the FMA:load ratio keeps the FMA pipes
   the bottleneck rather than the load ports. A tile of at most 4 or 8 rows
   (the last of an M that 14 does not divide: 64 = 4 x 14 + 8) runs a
   kernel of 4 or 8 rows, the same code over fewer rows (the same sums, in
   the same order), instead of computing 14 and storing a few. */
#define TJ__A5_MR 14
#define TJ__A5_NR 32
#define TJ__A5_ROWS4(X) X(0) X(1) X(2) X(3)
#define TJ__A5_ROWS8(X) TJ__A5_ROWS4(X) X(4) X(5) X(6) X(7)
#define TJ__A5_ROWS(X) TJ__A5_ROWS8(X) X(8) X(9) X(10) X(11) X(12) X(13)
/* the parts the f32 and the bf16 (below) kernels share: 28 accumulators
   c<row>_<half>, a prefetch of the C tile (touched only at the end), and the
   store (masks cover a partial N edge, mr cuts a partial M edge) */
#define TJ__A5_DECL(i) __m512 c##i##_0 = _mm512_setzero_ps(), c##i##_1 = _mm512_setzero_ps();
#define TJ__A5_PREFETCH_C()                                                   \
    for (k = 0; k < mr; k++) {                                                \
        _mm_prefetch((const char *)(C + (size_t)k * ldc), _MM_HINT_T0);       \
        _mm_prefetch((const char *)(C + (size_t)k * ldc + 16), _MM_HINT_T0);  \
    }
#define TJ__A5_ST(i) if (i < mr) { \
            if (load_c) { c##i##_0 = _mm512_add_ps(c##i##_0, _mm512_maskz_loadu_ps(m0, c)); \
                          c##i##_1 = _mm512_add_ps(c##i##_1, _mm512_maskz_loadu_ps(m1, c + 16)); } \
            _mm512_mask_storeu_ps(c, m0, c##i##_0); _mm512_mask_storeu_ps(c + 16, m1, c##i##_1); \
            c += ldc; }
#define TJ__A5_STORE(ROWS) {                                                                    \
        __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : ((1u << nr) - 1u));                     \
        __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : ((1u << (nr - 16)) - 1u)); \
        float *c = C;                                                                           \
        ROWS(TJ__A5_ST)                                                                         \
    }
/* the kernel over the rows ROWS lists (of a 14-row micro-panel), for the
   f32 kernel and the bf16 one below: the packs hold ET, KN steps of k
   (pairs for bf16), the B vectors are VT loaded by LOADB, and STEP(i) is
   row i's two multiply-adds */
#define TJ__A5_KERNEL(name, TGT, ET, KN, VT, LOADB, STEP, ROWS)                                                    \
    __attribute__((target(TGT))) TJ__MAYBE_UNUSED static void name(int kc, const void *Ap_, const void *Bp_, float *C, int ldc, \
                                                                   int mr, int nr, int load_c) {                 \
        const ET *Ap = (const ET *)Ap_, *Bp = (const ET *)Bp_;                                                   \
        ROWS(TJ__A5_DECL)                                                                                        \
        int k, kn = (KN);                                                                                        \
        TJ__A5_PREFETCH_C()                                                                                      \
        for (k = 0; k < kn; k++) {                                                                               \
            VT b0 = LOADB(Bp), b1 = LOADB(Bp + 16);                                                              \
            VT a;                                                                                                \
            ROWS(STEP)                                                                                           \
            Ap += TJ__A5_MR;                                                                                     \
            Bp += TJ__A5_NR;                                                                                     \
        }                                                                                                        \
        TJ__A5_STORE(ROWS)                                                                                       \
    }
/* the kernels of 14, 8 and 4 rows, and the one that picks by mr */
#define TJ__A5_KERNELS(name, TGT, ET, KN, VT, LOADB, STEP)                                                         \
    TJ__A5_KERNEL(name##_14, TGT, ET, KN, VT, LOADB, STEP, TJ__A5_ROWS)                                            \
    TJ__A5_KERNEL(name##_8, TGT, ET, KN, VT, LOADB, STEP, TJ__A5_ROWS8)                                            \
    TJ__A5_KERNEL(name##_4, TGT, ET, KN, VT, LOADB, STEP, TJ__A5_ROWS4)                                            \
    TJ__MAYBE_UNUSED static void name(int kc, const void *Ap, const void *Bp, float *C, int ldc, int mr, int nr, int load_c) { \
        (mr <= 4 ? name##_4 : mr <= 8 ? name##_8 : name##_14)(kc, Ap, Bp, C, ldc, mr, nr, load_c);              \
    }
#define TJ__A5_FMA(i) a = _mm512_set1_ps(Ap[i]); \
        c##i##_0 = _mm512_fmadd_ps(a, b0, c##i##_0); c##i##_1 = _mm512_fmadd_ps(a, b1, c##i##_1);
TJ__A5_KERNELS(tj__sgemm_kernel_avx512, "avx512f,fma", float, kc, __m512, _mm512_loadu_ps, TJ__A5_FMA)
#undef TJ__A5_FMA

/* ---- AVX-512 packing ------------------------------------------------------------
   The generic packers move one float per iteration with strided stores, which
   cost ~20% of the run time on GPT-2 shapes; these move whole vectors. The two
   layouts that need a transpose (A not transposed: rows of A become columns of
   the micro-panel; B transposed: likewise) go through a 16x16 in-register
   transpose. */

/* Full-mask forms of the shuffles: the plain intrinsics pass
   _mm512_undefined_ps() through, which g++ 12 -Wall flags as uninitialised. */
#define TJ__UNPLO(a, b) _mm512_mask_unpacklo_ps(a, (__mmask16)0xFFFF, a, b)
#define TJ__UNPHI(a, b) _mm512_mask_unpackhi_ps(a, (__mmask16)0xFFFF, a, b)
#define TJ__SHUF(a, b, i) _mm512_mask_shuffle_ps(a, (__mmask16)0xFFFF, a, b, i)
#define TJ__SHUF4(a, b, i) _mm512_mask_shuffle_f32x4(a, (__mmask16)0xFFFF, a, b, i)

/* dst[c*ldd + r] = src[r*lds + c] for a 16x16 block; rows >= nr and columns
   >= nc of the source read as zero; each of the nc output rows is written with
   store mask sm. */
__attribute__((target("avx512f")))
TJ__MAYBE_UNUSED static void tj__tr16_avx512(const float *src, size_t lds, int nr, int nc,
                            float *dst, size_t ldd, __mmask16 sm) {
    __mmask16 lm = (__mmask16)(nc >= 16 ? 0xFFFF : ((1u << nc) - 1u));
    __m512 r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15;
    __m512 t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15;
#define TJ__TR_LD(i) r##i = i < nr ? _mm512_maskz_loadu_ps(lm, src + (size_t)i * lds) : _mm512_setzero_ps();
    TJ__TR_LD(0) TJ__TR_LD(1) TJ__TR_LD(2) TJ__TR_LD(3) TJ__TR_LD(4) TJ__TR_LD(5) TJ__TR_LD(6) TJ__TR_LD(7)
    TJ__TR_LD(8) TJ__TR_LD(9) TJ__TR_LD(10) TJ__TR_LD(11) TJ__TR_LD(12) TJ__TR_LD(13) TJ__TR_LD(14) TJ__TR_LD(15)
#undef TJ__TR_LD
    /* 32-bit interleave, 64-bit interleave, then two 128-bit lane shuffles */
    t0 = TJ__UNPLO(r0, r1);   t1 = TJ__UNPHI(r0, r1);
    t2 = TJ__UNPLO(r2, r3);   t3 = TJ__UNPHI(r2, r3);
    t4 = TJ__UNPLO(r4, r5);   t5 = TJ__UNPHI(r4, r5);
    t6 = TJ__UNPLO(r6, r7);   t7 = TJ__UNPHI(r6, r7);
    t8 = TJ__UNPLO(r8, r9);   t9 = TJ__UNPHI(r8, r9);
    t10 = TJ__UNPLO(r10, r11); t11 = TJ__UNPHI(r10, r11);
    t12 = TJ__UNPLO(r12, r13); t13 = TJ__UNPHI(r12, r13);
    t14 = TJ__UNPLO(r14, r15); t15 = TJ__UNPHI(r14, r15);
    r0 = TJ__SHUF(t0, t2, 0x44);   r1 = TJ__SHUF(t0, t2, 0xEE);
    r2 = TJ__SHUF(t1, t3, 0x44);   r3 = TJ__SHUF(t1, t3, 0xEE);
    r4 = TJ__SHUF(t4, t6, 0x44);   r5 = TJ__SHUF(t4, t6, 0xEE);
    r6 = TJ__SHUF(t5, t7, 0x44);   r7 = TJ__SHUF(t5, t7, 0xEE);
    r8 = TJ__SHUF(t8, t10, 0x44);  r9 = TJ__SHUF(t8, t10, 0xEE);
    r10 = TJ__SHUF(t9, t11, 0x44); r11 = TJ__SHUF(t9, t11, 0xEE);
    r12 = TJ__SHUF(t12, t14, 0x44); r13 = TJ__SHUF(t12, t14, 0xEE);
    r14 = TJ__SHUF(t13, t15, 0x44); r15 = TJ__SHUF(t13, t15, 0xEE);
    t0 = TJ__SHUF4(r0, r4, 0x88);  t1 = TJ__SHUF4(r1, r5, 0x88);
    t2 = TJ__SHUF4(r2, r6, 0x88);  t3 = TJ__SHUF4(r3, r7, 0x88);
    t4 = TJ__SHUF4(r0, r4, 0xDD);  t5 = TJ__SHUF4(r1, r5, 0xDD);
    t6 = TJ__SHUF4(r2, r6, 0xDD);  t7 = TJ__SHUF4(r3, r7, 0xDD);
    t8 = TJ__SHUF4(r8, r12, 0x88); t9 = TJ__SHUF4(r9, r13, 0x88);
    t10 = TJ__SHUF4(r10, r14, 0x88); t11 = TJ__SHUF4(r11, r15, 0x88);
    t12 = TJ__SHUF4(r8, r12, 0xDD); t13 = TJ__SHUF4(r9, r13, 0xDD);
    t14 = TJ__SHUF4(r10, r14, 0xDD); t15 = TJ__SHUF4(r11, r15, 0xDD);
    r0 = TJ__SHUF4(t0, t8, 0x88);  r1 = TJ__SHUF4(t1, t9, 0x88);
    r2 = TJ__SHUF4(t2, t10, 0x88); r3 = TJ__SHUF4(t3, t11, 0x88);
    r4 = TJ__SHUF4(t4, t12, 0x88); r5 = TJ__SHUF4(t5, t13, 0x88);
    r6 = TJ__SHUF4(t6, t14, 0x88); r7 = TJ__SHUF4(t7, t15, 0x88);
    r8 = TJ__SHUF4(t0, t8, 0xDD);  r9 = TJ__SHUF4(t1, t9, 0xDD);
    r10 = TJ__SHUF4(t2, t10, 0xDD); r11 = TJ__SHUF4(t3, t11, 0xDD);
    r12 = TJ__SHUF4(t4, t12, 0xDD); r13 = TJ__SHUF4(t5, t13, 0xDD);
    r14 = TJ__SHUF4(t6, t14, 0xDD); r15 = TJ__SHUF4(t7, t15, 0xDD);
#define TJ__TR_ST(i) if (i < nc) _mm512_mask_storeu_ps(dst + (size_t)i * ldd, sm, r##i);
    TJ__TR_ST(0) TJ__TR_ST(1) TJ__TR_ST(2) TJ__TR_ST(3) TJ__TR_ST(4) TJ__TR_ST(5) TJ__TR_ST(6) TJ__TR_ST(7)
    TJ__TR_ST(8) TJ__TR_ST(9) TJ__TR_ST(10) TJ__TR_ST(11) TJ__TR_ST(12) TJ__TR_ST(13) TJ__TR_ST(14) TJ__TR_ST(15)
#undef TJ__TR_ST
}

__attribute__((target("avx512f")))
TJ__MAYBE_UNUSED static void tj__sgemm_pack_a_avx512(int trans_a, const void *A_, int lda, int i0, int mc,
                                    int p0, int kc, int MR, void *dst_) {
    const float *A = (const float *)A_;
    float *dst = (float *)dst_;
    int ir, k;
    (void)MR; /* always TJ__A5_MR */
    for (ir = 0; ir < mc; ir += TJ__A5_MR) {
        int rows = mc - ir < TJ__A5_MR ? mc - ir : TJ__A5_MR;
        if (!trans_a) {
            /* 14 rows x 16 k -> 16 k-steps of 14 floats; the overlapping 14-lane
               stores land in k order so later ones never clobber earlier ones */
            const float *src = A + (size_t)(i0 + ir) * lda + p0;
            int nnext = mc - ir - TJ__A5_MR, r;
            if (nnext > TJ__A5_MR) nnext = TJ__A5_MR;
            for (k = 0; k < kc; k += 16) {
                /* same k range of the next panel's rows: see pack_b */
                for (r = 0; r < nnext; r++)
                    _mm_prefetch((const char *)(src + (size_t)(TJ__A5_MR + r) * lda + k), _MM_HINT_T0);
                tj__tr16_avx512(src + k, (size_t)lda, rows, kc - k < 16 ? kc - k : 16,
                                dst + (size_t)k * TJ__A5_MR, TJ__A5_MR, (__mmask16)0x3FFF);
            }
        } else {
            __mmask16 m = (__mmask16)((1u << rows) - 1u);
            const float *src = A + (size_t)p0 * lda + i0 + ir;
            for (k = 0; k < kc; k++)
                _mm512_mask_storeu_ps(dst + (size_t)k * TJ__A5_MR, (__mmask16)0x3FFF,
                                      _mm512_maskz_loadu_ps(m, src + (size_t)k * lda));
        }
        dst += (size_t)TJ__A5_MR * kc;
    }
}

__attribute__((target("avx512f")))
TJ__MAYBE_UNUSED static void tj__sgemm_pack_b_avx512(int trans_b, const void *B_, int ldb, int p0, int kc,
                                    int j0, int nc, int NR, void *dst_) {
    const float *B = (const float *)B_;
    float *dst = (float *)dst_;
    int jr, k, g;
    (void)NR; /* always TJ__A5_NR */
    for (jr = 0; jr < nc; jr += TJ__A5_NR) {
        int cols = nc - jr < TJ__A5_NR ? nc - jr : TJ__A5_NR;
        if (!trans_b) {
            /* 32 floats from each of kc rows: one short piece per row, which the
               hardware prefetcher does not see coming, so ask 8 rows ahead */
            __mmask16 m0 = (__mmask16)(cols >= 16 ? 0xFFFF : ((1u << cols) - 1u));
            __mmask16 m1 = (__mmask16)(cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : ((1u << (cols - 16)) - 1u));
            const float *src = B + (size_t)p0 * ldb + j0 + jr;
            for (k = 0; k < kc; k++) {
                const float *s = src + (size_t)k * ldb;
                if (k + 8 < kc) {
                    _mm_prefetch((const char *)(s + (size_t)8 * ldb), _MM_HINT_T0);
                    _mm_prefetch((const char *)(s + (size_t)8 * ldb + 16), _MM_HINT_T0);
                }
                _mm512_store_ps(dst + (size_t)k * TJ__A5_NR, _mm512_maskz_loadu_ps(m0, s));
                _mm512_store_ps(dst + (size_t)k * TJ__A5_NR + 16, _mm512_maskz_loadu_ps(m1, s + 16));
            }
        } else {
            /* B stored N x K: 16 source rows (= 16 columns of op(B)) at a time.
               Sixteen interleaved streams are more than the hardware prefetcher
               tracks, so while transposing one group, prefetch the same k range
               of the next group's 16 rows (one line per row per 16x16 block). */
            for (g = 0; g < 2; g++) {
                int nrow = cols - 16 * g, r;
                const float *src = B + (size_t)(j0 + jr + 16 * g) * ldb + p0;
                int nnext = nc - (jr + 16 * g + 16);
                if (nrow < 0) nrow = 0;
                if (nrow > 16) nrow = 16;
                if (nnext > 16) nnext = 16;
                for (k = 0; k < kc; k += 16) {
                    for (r = 0; r < nnext; r++)
                        _mm_prefetch((const char *)(src + (size_t)(16 + r) * ldb + k), _MM_HINT_T0);
                    tj__tr16_avx512(src + k, (size_t)ldb, nrow, kc - k < 16 ? kc - k : 16,
                                    dst + (size_t)k * TJ__A5_NR + 16 * g, TJ__A5_NR, (__mmask16)0xFFFF);
                }
            }
        }
        dst += (size_t)TJ__A5_NR * kc;
    }
}

/* ---- AVX2 kernel: 6 x 16 ------------------------------------------------------
   12 ymm accumulators + 2 B + 1 broadcast of the 16 ymm registers. */
#define TJ__A2_MR 6
#define TJ__A2_NR 16
#define TJ__A2_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
__attribute__((target("avx2,fma")))
TJ__MAYBE_UNUSED static void tj__sgemm_kernel_avx2(int kc, const void *Ap_, const void *Bp_,
                                  float *C, int ldc, int mr, int nr, int load_c) {
    const float *Ap = (const float *)Ap_, *Bp = (const float *)Bp_;
#define TJ__A2_DECL(i) __m256 c##i##_0 = _mm256_setzero_ps(), c##i##_1 = _mm256_setzero_ps();
    TJ__A2_ROWS(TJ__A2_DECL)
#undef TJ__A2_DECL
    int k;
    for (k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(Bp), b1 = _mm256_loadu_ps(Bp + 8);
        __m256 a;
#define TJ__A2_FMA(i) a = _mm256_broadcast_ss(Ap + i); \
        c##i##_0 = _mm256_fmadd_ps(a, b0, c##i##_0); c##i##_1 = _mm256_fmadd_ps(a, b1, c##i##_1);
        TJ__A2_ROWS(TJ__A2_FMA)
#undef TJ__A2_FMA
        Ap += TJ__A2_MR;
        Bp += TJ__A2_NR;
    }
    if (nr == TJ__A2_NR) {
        float *c = C;
#define TJ__A2_ST(i) if (i < mr) { \
            if (load_c) { c##i##_0 = _mm256_add_ps(c##i##_0, _mm256_loadu_ps(c)); \
                          c##i##_1 = _mm256_add_ps(c##i##_1, _mm256_loadu_ps(c + 8)); } \
            _mm256_storeu_ps(c, c##i##_0); _mm256_storeu_ps(c + 8, c##i##_1); c += ldc; }
        TJ__A2_ROWS(TJ__A2_ST)
#undef TJ__A2_ST
    } else {
        /* partial N edge: spill the tile and copy the valid part */
        float t[TJ__A2_MR * TJ__A2_NR];
        int i, j;
#define TJ__A2_SP(i) _mm256_storeu_ps(t + i * 16, c##i##_0); _mm256_storeu_ps(t + i * 16 + 8, c##i##_1);
        TJ__A2_ROWS(TJ__A2_SP)
#undef TJ__A2_SP
        for (i = 0; i < mr; i++) {
            float *c = C + (size_t)i * ldc;
            if (load_c) for (j = 0; j < nr; j++) c[j] += t[i * 16 + j];
            else        for (j = 0; j < nr; j++) c[j] = t[i * 16 + j];
        }
    }
}

/* ---- bf16 matmul on AVX512_BF16: 14 x 32 ------------------------------------------
   vdpbf16ps multiplies the two bf16 halves of each 32-bit lane of a and b and
   adds both products to an f32 lane: twice the multiply-adds of an f32 FMA in
   one instruction. So the packs hold k in pairs: A micro-panels as [k/2][MR]
   and B micro-panels as [k/2][NR] 32-bit words, each word (x[k], x[k+1]) with
   the even k in the low half; an odd last k pairs with a zero. The kernel is
   the f32 one above with vdpbf16ps for the FMA, over k pairs. Products of
   bf16 are exact in f32; the instruction treats denormal inputs and results
   as zero and adds in its own order, so sums differ from the widened f32
   path by f32 rounding (and denormals) only. */
#define TJ__A5_DP(i) a = (__m512bh)_mm512_set1_epi32((int)Ap[i]); \
        c##i##_0 = _mm512_dpbf16_ps(c##i##_0, a, b0); c##i##_1 = _mm512_dpbf16_ps(c##i##_1, a, b1);
#define TJ__A5_LDBH(p) ((__m512bh)_mm512_loadu_si512(p))
TJ__A5_KERNELS(tj__bgemm_kernel_avx512, "avx512f,avx512bf16", uint32_t, (kc + 1) / 2, __m512bh, TJ__A5_LDBH, TJ__A5_DP)
#undef TJ__A5_DP
#undef TJ__A5_LDBH

/* Pair packing, any layout: X(r, k) = X[r*rs + k*cs] for rows r < rows and
   k < kc; dst[p*R + r] = (X(r, 2p), X(r, 2p+1)) for r < lanes, zero past rows
   and kc. The vector packers below use it where a source is not 32-bit
   aligned (odd leading dimension). */
TJ__MAYBE_UNUSED static void tj__bgemm_pack_pairs(const uint16_t *X, size_t rs, size_t cs, int rows, int lanes, int R,
                                                  int kc, uint32_t *dst) {
    int p, r, kp = (kc + 1) / 2;
    for (p = 0; p < kp; p++)
        for (r = 0; r < lanes; r++) {
            uint32_t lo = 0, hi = 0;
            if (r < rows) {
                lo = X[(size_t)r * rs + (size_t)(2 * p) * cs];
                if (2 * p + 1 < kc) hi = X[(size_t)r * rs + (size_t)(2 * p + 1) * cs];
            }
            dst[(size_t)p * R + r] = lo | hi << 16;
        }
}

/* rows k and k+1 (the first n bf16 of each, mask m; k+1 absent: zeros) ->
   32 pair words, columns 0-15 to lo (store mask slo), 16-31 to hi (shi).
   Full-mask forms of the widening and shifts: see TJ__UNPLO. */
#define TJ__HALF16(x, i) _mm512_maskz_cvtepu16_epi32((__mmask16)0xFFFF, _mm512_maskz_extracti64x4_epi64((__mmask8)0xFF, x, i))
#define TJ__PAIRS(x0, x1, i) _mm512_or_si512(TJ__HALF16(x0, i), _mm512_maskz_slli_epi32((__mmask16)0xFFFF, TJ__HALF16(x1, i), 16))
__attribute__((target("avx512f,avx512bw")))
TJ__MAYBE_UNUSED static void tj__bgemm_interleave(const uint16_t *r0, const uint16_t *r1, __mmask32 m,
                                                  uint32_t *lo, uint32_t *hi, __mmask16 slo, __mmask16 shi) {
    __m512i x0 = _mm512_maskz_loadu_epi16(m, r0);
    __m512i x1 = r1 ? _mm512_maskz_loadu_epi16(m, r1) : _mm512_setzero_si512();
    _mm512_mask_storeu_epi32(lo, slo, TJ__PAIRS(x0, x1, 0));
    if (shi) _mm512_mask_storeu_epi32(hi, shi, TJ__PAIRS(x0, x1, 1));
}
#undef TJ__PAIRS
#undef TJ__HALF16

/* X(r, k) = X[r*ld + k] (k contiguous): pairs are 32-bit words, so the panel
   is a 32-bit transpose (tj__tr16_avx512), 16 rows x 16 pairs at a time, into
   lanes r0..r0+lanes-1 (lanes <= 16) of dst, R words per pair */
__attribute__((target("avx512f,avx512bw")))
TJ__MAYBE_UNUSED static void tj__bgemm_pack_rows(const uint16_t *X, int ld, int rows, int R, int r0, int lanes,
                                                 int kc, uint32_t *dst) {
    int p, kfull = kc / 2;
    __mmask16 sm = (__mmask16)((1u << lanes) - 1u);
    if ((ld & 1) || ((uintptr_t)X & 3)) {
        tj__bgemm_pack_pairs(X, (size_t)ld, 1, rows, lanes, R, kc, dst + r0);
        return;
    }
    for (p = 0; p < kfull; p += 16)
        tj__tr16_avx512((const float *)(const void *)(X + 2 * p), (size_t)ld / 2, rows, kfull - p < 16 ? kfull - p : 16,
                        (float *)(void *)(dst + (size_t)p * R + r0), (size_t)R, sm);
    if (kc & 1) {
        /* the odd last k: one pair per row, zero above; lanes past rows zero */
        uint32_t *d = dst + (size_t)kfull * R + r0;
        int r;
        for (r = 0; r < lanes; r++) d[r] = r < rows ? X[(size_t)r * ld + 2 * kfull] : 0;
    }
}

__attribute__((target("avx512f,avx512bw")))
TJ__MAYBE_UNUSED static void tj__bgemm_pack_a_avx512(int trans_a, const void *A_, int lda, int i0, int mc,
                                                     int p0, int kc, int MR, void *dst_) {
    const uint16_t *A = (const uint16_t *)A_;
    uint32_t *dst = (uint32_t *)dst_;
    int ir, p, kp = (kc + 1) / 2;
    (void)MR; /* always TJ__A5_MR */
    for (ir = 0; ir < mc; ir += TJ__A5_MR) {
        int rows = mc - ir < TJ__A5_MR ? mc - ir : TJ__A5_MR;
        if (!trans_a)
            tj__bgemm_pack_rows(A + (size_t)(i0 + ir) * lda + p0, lda, rows, TJ__A5_MR, 0, TJ__A5_MR, kc, dst);
        else {
            /* A stored K x M: rows k and k+1 hold the panel's rows side by side */
            const uint16_t *src = A + (size_t)p0 * lda + i0 + ir;
            for (p = 0; p < kp; p++)
                tj__bgemm_interleave(src + (size_t)(2 * p) * lda, 2 * p + 1 < kc ? src + (size_t)(2 * p + 1) * lda : NULL,
                                     (__mmask32)((1u << rows) - 1u), dst + (size_t)p * TJ__A5_MR, NULL, (__mmask16)0x3FFF, 0);
        }
        dst += (size_t)TJ__A5_MR * kp;
    }
}

__attribute__((target("avx512f,avx512bw")))
TJ__MAYBE_UNUSED static void tj__bgemm_pack_b_avx512(int trans_b, const void *B_, int ldb, int p0, int kc,
                                                     int j0, int nc, int NR, void *dst_) {
    const uint16_t *B = (const uint16_t *)B_;
    uint32_t *dst = (uint32_t *)dst_;
    int jr, p, g, kp = (kc + 1) / 2;
    (void)NR; /* always TJ__A5_NR */
    for (jr = 0; jr < nc; jr += TJ__A5_NR) {
        int cols = nc - jr < TJ__A5_NR ? nc - jr : TJ__A5_NR;
        if (!trans_b) {
            /* B stored K x N: rows k and k+1, 32 columns each; prefetch 8 pairs
               ahead (short pieces of many rows: see the f32 packer) */
            const uint16_t *src = B + (size_t)p0 * ldb + j0 + jr;
            __mmask32 m = (__mmask32)(cols >= 32 ? 0xFFFFFFFFu : ((1u << cols) - 1u));
            for (p = 0; p < kp; p++) {
                const uint16_t *s = src + (size_t)(2 * p) * ldb;
                if (2 * p + 17 < kc) {
                    _mm_prefetch((const char *)(s + (size_t)16 * ldb), _MM_HINT_T0);
                    _mm_prefetch((const char *)(s + (size_t)17 * ldb), _MM_HINT_T0);
                }
                tj__bgemm_interleave(s, 2 * p + 1 < kc ? s + ldb : NULL, m, dst + (size_t)p * TJ__A5_NR,
                                     dst + (size_t)p * TJ__A5_NR + 16, (__mmask16)0xFFFF, (__mmask16)0xFFFF);
            }
        } else {
            /* B stored N x K: each column's k are contiguous: two 16-row transposes */
            for (g = 0; g < 2; g++) {
                int nrow = cols - 16 * g;
                if (nrow < 0) nrow = 0;
                if (nrow > 16) nrow = 16;
                tj__bgemm_pack_rows(B + (size_t)(j0 + jr + 16 * g) * ldb + p0, ldb, nrow, TJ__A5_NR, 16 * g, 16, kc, dst);
            }
        }
        dst += (size_t)TJ__A5_NR * kp;
    }
}
#endif /* TJ__X86 */

/* Does this CPU run vdpbf16ps (CPUID leaf 7 subleaf 1, EAX bit 5) with
   AVX-512BW for the packers? Asked once. TJ_BF16_DOT=f32 in the environment,
   or the test hook below, makes bf16 matmuls take the widened f32 path. */
static int tj__bgemm_cpu;
static pthread_once_t tj__bgemm_once = PTHREAD_ONCE_INIT;
static int tj__bgemm_force_f32; /* test hook: 1 = widen to f32 even where vdpbf16ps exists */
static void tj__bgemm_probe(void) {
    const char *e = getenv("TJ_BF16_DOT");
    tj__bgemm_cpu = 0;
    if (e && !strcmp(e, "f32")) return;
#if TJ__X86 && !defined(TJ_SGEMM_NO_SIMD) && !defined(TJ_SGEMM_NO_AVX512)
    {
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __get_cpuid_count(7, 1, &a, &b, &c, &d))
            tj__bgemm_cpu = (a >> 5) & 1u;
    }
#endif
}
static int tj__bgemm_native(void) {
    pthread_once(&tj__bgemm_once, tj__bgemm_probe);
    return tj__bgemm_cpu && !tj__bgemm_force_f32;
}

/* pick the widest kernel the CPU (and OS) support for f32 (bf16 = 0) or bf16
   (bf16 = 1) operands. Tests can define TJ_SGEMM_NO_AVX512 / TJ_SGEMM_NO_SIMD
   to exercise the narrower paths. bf16 without vdpbf16ps uses the f32 kernel
   on operands widened while packing: the same products and sums as an f32
   matmul of the widened values. */
static void tj__sgemm_get_cfg(tj__sgemm_cfg *cfg, int bf16) {
    cfg->esz = 4;
#if TJ__X86
    if (bf16 && tj__bgemm_native()) {
        /* pairs of k: KC = 512 keeps the byte sizes of the f32 blocks */
        cfg->mr = TJ__A5_MR; cfg->nr = TJ__A5_NR; cfg->esz = 2;
        cfg->kc = 512; cfg->nc = 512; cfg->mc = 70 * TJ__A5_MR;
        cfg->kernel = tj__bgemm_kernel_avx512; cfg->name = "avx512bf16";
        cfg->pack_a = tj__bgemm_pack_a_avx512; cfg->pack_b = tj__bgemm_pack_b_avx512;
        return;
    }
#endif
#if TJ__X86 && !defined(TJ_SGEMM_NO_SIMD)
#if !defined(TJ_SGEMM_NO_AVX512)
    if (__builtin_cpu_supports("avx512f")) {
        /* KC*MR*4 = 14 KB A micro-panel (L1); KC*NC*4 = 512 KB B block (L2);
           MC*KC*4 = ~1 MB A block (L3, re-read once per NC columns) */
        cfg->mr = TJ__A5_MR; cfg->nr = TJ__A5_NR;
        cfg->kc = 256; cfg->nc = 512; cfg->mc = 70 * TJ__A5_MR;
        cfg->kernel = tj__sgemm_kernel_avx512; cfg->name = bf16 ? "avx512 (bf16 widened)" : "avx512";
        cfg->pack_a = bf16 ? tj__sgemm_pack_a_bf16 : tj__sgemm_pack_a_avx512;
        cfg->pack_b = bf16 ? tj__sgemm_pack_b_bf16 : tj__sgemm_pack_b_avx512;
        return;
    }
#endif
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        cfg->mr = TJ__A2_MR; cfg->nr = TJ__A2_NR;
        cfg->kc = 256; cfg->nc = 512; cfg->mc = 168 * TJ__A2_MR;
        cfg->kernel = tj__sgemm_kernel_avx2; cfg->name = bf16 ? "avx2 (bf16 widened)" : "avx2";
        cfg->pack_a = bf16 ? tj__sgemm_pack_a_bf16 : tj__sgemm_pack_a;
        cfg->pack_b = bf16 ? tj__sgemm_pack_b_bf16 : tj__sgemm_pack_b;
        return;
    }
#endif
    cfg->mr = TJ__P_MR; cfg->nr = TJ__P_NR;
    cfg->kc = 256; cfg->nc = 512; cfg->mc = 256;
    cfg->kernel = tj__sgemm_kernel_portable; cfg->name = bf16 ? "portable (bf16 widened)" : "portable";
    cfg->pack_a = bf16 ? tj__sgemm_pack_a_bf16 : tj__sgemm_pack_a;
    cfg->pack_b = bf16 ? tj__sgemm_pack_b_bf16 : tj__sgemm_pack_b;
}

TJ__MAYBE_UNUSED static const char *tj__sgemm_path(void) {
    tj__sgemm_cfg cfg;
    tj__sgemm_get_cfg(&cfg, 0);
    return cfg.name;
}
TJ__MAYBE_UNUSED static const char *tj__bgemm_path(void) {
    tj__sgemm_cfg cfg;
    tj__sgemm_get_cfg(&cfg, 1);
    return cfg.name;
}

/* ---- reference ---------------------------------------------------------------- */
TJ__MAYBE_UNUSED static void tj__sgemm_ref(int trans_a, int trans_b, int M, int N, int K,
                                           const float *A, int lda, const float *B, int ldb,
                                           float *C, int ldc, int accumulate) {
    int i, j, k;
    for (i = 0; i < M; i++)
        for (j = 0; j < N; j++) {
            double s = accumulate ? (double)C[(size_t)i * ldc + j] : 0.0;
            for (k = 0; k < K; k++) {
                float a = trans_a ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = trans_b ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += (double)a * (double)b;
            }
            C[(size_t)i * ldc + j] = (float)s;
        }
}

/* ---- small products: direct loops, no packing, no threads ----------------------
   Row i of C is built in place: for non-transposed B an axpy per k (contiguous
   in j, vectorisable); for transposed B a dot product per j (contiguous in k).
   One template for f32 and bf16 operands (widened as they are read: the same
   sums as f32 on the widened values); bf16's also serves when a pack buffer
   cannot be had. */
#define TJ__SGEMM_SMALL_LOOP(NAME, T, LD)                                                        \
static void NAME(int trans_a, int trans_b, int M, int N, int K,                             \
                 const void *A_, int lda, const void *B_, int ldb,                          \
                 float *C, int ldc, int accumulate) {                                       \
    const T *A = (const T *)A_, *B = (const T *)B_;                                         \
    int i, j, k;                                                                            \
    for (i = 0; i < M; i++) {                                                               \
        float *c = C + (size_t)i * ldc;                                                     \
        if (!trans_b) {                                                                     \
            if (!accumulate) for (j = 0; j < N; j++) c[j] = 0.0f;                           \
            for (k = 0; k < K; k++) {                                                       \
                float a = LD(trans_a ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);    \
                const T *b = B + (size_t)k * ldb;                                           \
                for (j = 0; j < N; j++) c[j] += a * LD(b[j]);                               \
            }                                                                               \
        } else {                                                                            \
            for (j = 0; j < N; j++) {                                                       \
                const T *b = B + (size_t)j * ldb;                                           \
                float s = 0.0f;                                                             \
                if (trans_a) for (k = 0; k < K; k++) s += LD(A[(size_t)k * lda + i]) * LD(b[k]); \
                else { const T *a = A + (size_t)i * lda; for (k = 0; k < K; k++) s += LD(a[k]) * LD(b[k]); } \
                c[j] = accumulate ? c[j] + s : s;                                           \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
}
#define TJ__LD_F32(x) (x)
TJ__SGEMM_SMALL_LOOP(tj__sgemm_small, float, TJ__LD_F32)
TJ__SGEMM_SMALL_LOOP(tj__bgemm_small, uint16_t, tj_bf16_to_f32)
#undef TJ__LD_F32

/* ---- one thread's rectangle ------------------------------------------------------ */
typedef struct {
    const tj__sgemm_cfg *cfg;
    int trans_a, trans_b, K;
    const void *B;        /* f32, or bf16 (uint16_t) when bf16; so are the As */
    int bf16;
    int lda, ldb, ldc, accumulate;
    int m0[65], n0[65];   /* rectangle t = rows [m0[t],m0[t+1]) x cols [n0[t],n0[t+1]) */
    int split_n;          /* 1: rectangles split N (m0 = {0,M}), 0: split M */
    int nparts;
    char *ws;             /* ws_n pack buffers of tj__gemm_pack_bytes() (part t < ws_n */
    int ws_n;             /* uses buffer t; the others their thread's own)             */
    int nseg;             /* nseg products As[s] B -> Cs[s] sharing B (> 1: split_n) */
    const void *const *As;
    float *const *Cs;
} tj__sgemm_job;

/* Pack buffers: a program's dots pack into buffers of their planned
   workspace (tj__dot_scratch), so a run allocates what the memory plan
   says. Other callers (and threads past the planned ones) use buffers kept
   per thread (freed when the thread ends): a fresh megabyte per call would
   come from mmap and fault in every page again. */
#if TJ__SGEMM_THREADS
static pthread_key_t tj__pack_key;
static pthread_once_t tj__pack_once = PTHREAD_ONCE_INIT;
static void tj__pack_free(void *p) { TJ_FREE(p); }
static void tj__pack_init(void) { pthread_key_create(&tj__pack_key, tj__pack_free); }
static long tj__pack_uses; /* calls so far (tests: a program's dots make none) */
static char *tj__pack_get(size_t n) {
    size_t *h;
#if defined(__GNUC__)
    __atomic_add_fetch(&tj__pack_uses, 1, __ATOMIC_RELAXED);
#else
    tj__pack_uses++;
#endif
    pthread_once(&tj__pack_once, tj__pack_init);
    h = (size_t *)pthread_getspecific(tj__pack_key);
    if (h && h[0] >= n) return (char *)(h + 8);
    TJ_FREE(h);
    h = (size_t *)TJ_MALLOC(n + 8 * sizeof(size_t));
    pthread_setspecific(tj__pack_key, h);
    if (!h) return NULL;
    h[0] = n;
    return (char *)(h + 8);
}
#define TJ__PACK_GET(n) tj__pack_get(n)
#define TJ__PACK_PUT(p) ((void)(p))
#else
#define TJ__PACK_GET(n) ((char *)TJ_MALLOC(n))
#define TJ__PACK_PUT(p) TJ_FREE(p)
#endif
/* bytes of one pack buffer: an A block and a B block, 64-byte aligned by hand */
static int64_t tj__sgemm_pack_size(const tj__sgemm_cfg *cf) {
    return ((int64_t)cf->mc * cf->kc + (int64_t)cf->kc * cf->nc) * cf->esz + 128;
}
/* the micro-kernel over one packed mc x kc block of A and kc x nc block
   of B, into C at the block's corner */
static void tj__sgemm_block(const tj__sgemm_cfg *cf, int mc, int kc, int nc, const char *Ap, const char *Bp, float *C, int ldc, int load_c) {
    const int MR = cf->mr, NR = cf->nr;
    const size_t es = (size_t)cf->esz, kcp = es == 2 ? (size_t)(kc + 1) / 2 * 2 : (size_t)kc; /* k per micro-panel row: bf16 packs hold whole pairs */
    int ir, jr;
    for (ir = 0; ir < mc; ir += MR) {
        int mr = mc - ir < MR ? mc - ir : MR;
        const char *ap = Ap + (size_t)ir * kcp * es;
        float *crow = C + (size_t)ir * ldc;
        for (jr = 0; jr < nc; jr += NR) {
            int nr = nc - jr < NR ? nc - jr : NR;
            cf->kernel(kc, ap, Bp + (size_t)jr * kcp * es, crow + jr, ldc, mr, nr, load_c);
        }
    }
}
/* part t's rectangle; returns 0 on success, -1 if the pack buffer could not
   be allocated. One product packs a block of A once for all its columns
   (B once per row block: one for the M of a transformer's matmuls); nseg
   products sharing B pack each block of B once for all of them, GotoBLAS's
   order (the collective matmul: one block of columns for each rank's rows) */
static int tj__sgemm_rect(const tj__sgemm_job *jb, int t, int m_lo, int m_hi, int n_lo, int n_hi) {
    const tj__sgemm_cfg *cf = jb->cfg;
    const int MR = cf->mr, NR = cf->nr, KC = cf->kc, MC = cf->mc, NC = cf->nc;
    const int K = jb->K;
    const size_t es = (size_t)cf->esz, a_sz = (size_t)MC * KC * es, b_sz = (size_t)KC * NC * es;
    char *raw, *Ap, *Bp;
    int ic, pc, jc, s;
    if (m_lo >= m_hi || n_lo >= n_hi) return 0;
    /* over-allocate and round up by hand: 64-byte aligned packs keep every
       micro-panel row on a cache line boundary */
    raw = t < jb->ws_n ? jb->ws + (size_t)t * (size_t)tj__gemm_pack_bytes() : TJ__PACK_GET(a_sz + b_sz + 128);
    if (!raw) return -1;
    Ap = (char *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    Bp = Ap + a_sz;
    /* the first K slice overwrites C unless the caller accumulates */
    if (jb->nseg > 1)
        for (pc = 0; pc < K; pc += KC) {
            int kc = K - pc < KC ? K - pc : KC;
            for (jc = n_lo; jc < n_hi; jc += NC) {
                int nc = n_hi - jc < NC ? n_hi - jc : NC;
                cf->pack_b(jb->trans_b, jb->B, jb->ldb, pc, kc, jc, nc, NR, Bp);
                for (s = 0; s < jb->nseg; s++)
                    for (ic = m_lo; ic < m_hi; ic += MC) {
                        int mc = m_hi - ic < MC ? m_hi - ic : MC;
                        cf->pack_a(jb->trans_a, jb->As[s], jb->lda, ic, mc, pc, kc, MR, Ap);
                        tj__sgemm_block(cf, mc, kc, nc, Ap, Bp, jb->Cs[s] + (size_t)ic * jb->ldc + jc, jb->ldc, pc > 0 || jb->accumulate);
                    }
            }
        }
    else
        for (ic = m_lo; ic < m_hi; ic += MC) {
            int mc = m_hi - ic < MC ? m_hi - ic : MC;
            for (pc = 0; pc < K; pc += KC) {
                int kc = K - pc < KC ? K - pc : KC;
                cf->pack_a(jb->trans_a, jb->As[0], jb->lda, ic, mc, pc, kc, MR, Ap);
                for (jc = n_lo; jc < n_hi; jc += NC) {
                    int nc = n_hi - jc < NC ? n_hi - jc : NC;
                    cf->pack_b(jb->trans_b, jb->B, jb->ldb, pc, kc, jc, nc, NR, Bp);
                    tj__sgemm_block(cf, mc, kc, nc, Ap, Bp, jb->Cs[0] + (size_t)ic * jb->ldc + jc, jb->ldc, pc > 0 || jb->accumulate);
                }
            }
        }
    if (t >= jb->ws_n) TJ__PACK_PUT(raw);
    return 0;
}

static void tj__sgemm_run_part(const void *arg, int t, int nparts) {
    const tj__sgemm_job *jb = (const tj__sgemm_job *)arg;
    int m_lo, m_hi, n_lo, n_hi;
    (void)nparts;
    if (jb->split_n) { m_lo = jb->m0[0]; m_hi = jb->m0[1]; n_lo = jb->n0[t]; n_hi = jb->n0[t + 1]; }
    else             { m_lo = jb->m0[t]; m_hi = jb->m0[t + 1]; n_lo = jb->n0[0]; n_hi = jb->n0[1]; }
    if (tj__sgemm_rect(jb, t, m_lo, m_hi, n_lo, n_hi) != 0) {
        /* out of memory for the pack buffer: still produce the right answer */
        size_t es = jb->bf16 ? 2 : 4;
        const char *B = (const char *)jb->B + es * (jb->trans_b ? (size_t)n_lo * jb->ldb : (size_t)n_lo);
        int s;
        for (s = 0; s < jb->nseg; s++) {
            const char *A = (const char *)jb->As[s] + es * (jb->trans_a ? (size_t)m_lo : (size_t)m_lo * jb->lda);
            (jb->bf16 ? tj__bgemm_small : tj__sgemm_small)(jb->trans_a, jb->trans_b, m_hi - m_lo, n_hi - n_lo, jb->K, A, jb->lda,
                                                           B, jb->ldb, jb->Cs[s] + (size_t)m_lo * jb->ldc + n_lo, jb->ldc, jb->accumulate);
        }
    }
}

/* ---- persistent worker pool ------------------------------------------------------
   Runs the parts of a job (an sgemm, an elementwise or row loop: tj__parallel)
   on worker threads. Workers sleep on a condition variable and wake on a
   generation bump; the caller runs part 0 itself and waits for the rest. One
   job at a time (tj__pool_call_mu).
   Both sides spin briefly (~1 ms) before sleeping. Besides saving the wake-up
   latency for back-to-back calls, this matters for placement: a worker that
   sleeps between every few-ms call tends to be woken onto the caller's core
   and time-share it (measured: 2-thread GPT-2 shapes stuck at 1-thread
   speed); a spinning worker stays on its own core. */
#define TJ__SGEMM_MAXT 64
typedef struct {
    void (*fn)(const void *arg, int part, int nparts);
    const void *arg;
    int nparts;
} tj__pool_task;
#if TJ__SGEMM_THREADS
static pthread_mutex_t tj__pool_call_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t tj__pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tj__pool_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t tj__pool_done = PTHREAD_COND_INITIALIZER;
static pthread_t tj__pool_th[TJ__SGEMM_MAXT];
static int tj__pool_n;               /* workers alive (thread ids 1..n) */
static unsigned long tj__pool_gen;   /* bumped per job */
static int tj__pool_pending;         /* workers still busy with the current job */
static int tj__pool_quit;
static const tj__pool_task *tj__pool_job;
static unsigned long tj__pool_start_gen[TJ__SGEMM_MAXT + 1];
/* gen, pending and quit are written under tj__pool_mu but also polled without
   it while spinning, hence the atomics */
#if defined(__GNUC__)
#define TJ__LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define TJ__STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#define TJ__DEC(x) __atomic_sub_fetch(&(x), 1, __ATOMIC_ACQ_REL)
#if defined(__x86_64__) || defined(__i386__)
#define TJ__PAUSE() __builtin_ia32_pause()
#else
#define TJ__PAUSE() ((void)0)
#endif
#ifndef TJ_SGEMM_SPIN
#define TJ_SGEMM_SPIN 50000   /* polls before sleeping, ~1 ms with pause */
#endif
#else
#define TJ__LOAD(x) (x)
#define TJ__STORE(x, v) ((x) = (v))
#define TJ__DEC(x) (--(x))
#define TJ__PAUSE() ((void)0)
#undef TJ_SGEMM_SPIN
#define TJ_SGEMM_SPIN 0       /* no atomics: never poll outside the mutex */
#endif

static void *tj__pool_worker(void *arg) {
    int id = (int)(intptr_t)arg;
    unsigned long seen;
    pthread_mutex_lock(&tj__pool_mu);
    /* the generation current when we were created, not when we got scheduled:
       a job posted in between must not be missed */
    seen = tj__pool_start_gen[id];
    for (;;) {
        const tj__pool_task *jb;
        if (tj__pool_gen == seen && !tj__pool_quit) {
            int spin;
            pthread_mutex_unlock(&tj__pool_mu);
            for (spin = 0; spin < TJ_SGEMM_SPIN; spin++) {
                if (TJ__LOAD(tj__pool_gen) != seen || TJ__LOAD(tj__pool_quit)) break;
                TJ__PAUSE();
            }
            pthread_mutex_lock(&tj__pool_mu);
        }
        while (tj__pool_gen == seen && !tj__pool_quit) pthread_cond_wait(&tj__pool_wake, &tj__pool_mu);
        if (tj__pool_quit) break;
        seen = tj__pool_gen;
        jb = tj__pool_job;
        pthread_mutex_unlock(&tj__pool_mu);
        if (id < jb->nparts) jb->fn(jb->arg, id, jb->nparts);
        pthread_mutex_lock(&tj__pool_mu);
        if (TJ__DEC(tj__pool_pending) == 0)
            pthread_cond_signal(&tj__pool_done);
    }
    pthread_mutex_unlock(&tj__pool_mu);
    return NULL;
}

/* run jb->nparts parts on the pool; the caller does part 0 (and any part no
   worker exists for, if thread creation failed) */
static void tj__pool_run(const tj__pool_task *jb) {
    pthread_mutex_lock(&tj__pool_call_mu);
    while (tj__pool_n < jb->nparts - 1) {
        /* a new worker must see the current generation as already done */
        int id = tj__pool_n + 1;
        pthread_mutex_lock(&tj__pool_mu);
        tj__pool_start_gen[id] = tj__pool_gen;
        if (pthread_create(&tj__pool_th[tj__pool_n], NULL, tj__pool_worker, (void *)(intptr_t)id) != 0) {
            pthread_mutex_unlock(&tj__pool_mu);
            break;
        }
        tj__pool_n++;
        pthread_mutex_unlock(&tj__pool_mu);
    }
    if (tj__pool_n > 0) {
        pthread_mutex_lock(&tj__pool_mu);
        tj__pool_job = jb;
        TJ__STORE(tj__pool_pending, tj__pool_n);
        TJ__STORE(tj__pool_gen, tj__pool_gen + 1);
        pthread_cond_broadcast(&tj__pool_wake);
        pthread_mutex_unlock(&tj__pool_mu);
    }
    jb->fn(jb->arg, 0, jb->nparts);
    {
        /* parts nobody could take (thread creation failed) run here */
        int t;
        for (t = tj__pool_n + 1; t < jb->nparts; t++) jb->fn(jb->arg, t, jb->nparts);
    }
    if (tj__pool_n > 0) {
        int spin;
        for (spin = 0; spin < TJ_SGEMM_SPIN && TJ__LOAD(tj__pool_pending) > 0; spin++) TJ__PAUSE();
        pthread_mutex_lock(&tj__pool_mu);
        while (tj__pool_pending > 0) pthread_cond_wait(&tj__pool_done, &tj__pool_mu);
        tj__pool_job = NULL;
        pthread_mutex_unlock(&tj__pool_mu);
    }
    pthread_mutex_unlock(&tj__pool_call_mu);
}
#endif

static void tj__parallel(int nparts, void (*fn)(const void *arg, int part, int nparts), const void *arg) {
    tj__pool_task task;
    int t;
    task.fn = fn;
    task.arg = arg;
    task.nparts = nparts < TJ__SGEMM_MAXT ? nparts : TJ__SGEMM_MAXT;
#if TJ__SGEMM_THREADS
    if (task.nparts > 1) {
        tj__pool_run(&task);
        return;
    }
#endif
    for (t = 0; t < task.nparts; t++) fn(arg, t, task.nparts);
}

/* join and free the worker pool; the next multi-threaded call recreates it */
TJ__MAYBE_UNUSED static void tj__sgemm_shutdown(void) {
#if TJ__SGEMM_THREADS
    int i;
    pthread_mutex_lock(&tj__pool_call_mu);
    pthread_mutex_lock(&tj__pool_mu);
    TJ__STORE(tj__pool_quit, 1);
    pthread_cond_broadcast(&tj__pool_wake);
    pthread_mutex_unlock(&tj__pool_mu);
    for (i = 0; i < tj__pool_n; i++) pthread_join(tj__pool_th[i], NULL);
    tj__pool_n = 0;
    TJ__STORE(tj__pool_quit, 0);
    pthread_mutex_unlock(&tj__pool_call_mu);
#endif
}

/* split [0,n) into parts pieces on multiples of unit, as evenly as possible */
static void tj__sgemm_split(int n, int unit, int parts, int *bounds) {
    int units = (n + unit - 1) / unit, t;
    for (t = 0; t <= parts; t++) {
        long long u = (long long)units * t / parts;
        long long b = u * unit;
        bounds[t] = (int)(b > n ? n : b);
    }
}

/* ---- entry points -------------------------------------------------------------------
   tj__sgemm: f32 operands; tj__bgemm: bf16 operands (uint16_t), f32 C. Both
   go through tj__gemm_ws, which splits C among threads and runs the blocked
   loops above with the configuration for the operand type; its callers in
   a program pass ws_n pack buffers of tj__gemm_pack_bytes() at ws. */
static int tj__gemm_max_parts(void) { return TJ__SGEMM_MAXT; }
static int64_t tj__gemm_pack_bytes(void) {
    /* one size for f32 and bf16 (and either bf16 path): a plan made before
       TJ_BF16_DOT or the test hook changes still fits */
    tj__sgemm_cfg f, b;
    tj__sgemm_get_cfg(&f, 0);
    tj__sgemm_get_cfg(&b, 1);
    return tj__align(tj__sgemm_pack_size(&f) > tj__sgemm_pack_size(&b) ? tj__sgemm_pack_size(&f) : tj__sgemm_pack_size(&b));
}
/* nseg products op(As[s]) op(B) -> Cs[s], all M x N x K with the same
   leading dimensions, sharing B: each block of B is packed once for all of
   them (nseg 1: one product, as tj__gemm_ws) */
static void tj__gemm_segs(int bf16, int trans_a, int trans_b, int nseg, int M, int N, int K,
                          const void *const *As, int lda, const void *B, int ldb,
                          float *const *Cs, int ldc, int accumulate, int nthreads, char *ws, int ws_n) {
    tj__sgemm_cfg cfg;
    tj__sgemm_job jb;
    double flops;
    int i, j, s;
    if (M <= 0 || N <= 0 || nseg <= 0) return;
    if (K <= 0) {
        if (!accumulate)
            for (s = 0; s < nseg; s++)
                for (i = 0; i < M; i++)
                    for (j = 0; j < N; j++) Cs[s][(size_t)i * ldc + j] = 0.0f;
        return;
    }
    flops = (double)M * N * K;
    if (flops < TJ__SGEMM_SMALL) {
        for (s = 0; s < nseg; s++)
            (bf16 ? tj__bgemm_small : tj__sgemm_small)(trans_a, trans_b, M, N, K, As[s], lda, B, ldb, Cs[s], ldc, accumulate);
        return;
    }
    tj__sgemm_get_cfg(&cfg, bf16);
    jb.cfg = &cfg;
    jb.bf16 = bf16;
    jb.trans_a = trans_a; jb.trans_b = trans_b; jb.K = K;
    jb.B = B; jb.lda = lda; jb.ldb = ldb; jb.ldc = ldc;
    jb.nseg = nseg; jb.As = As; jb.Cs = Cs;
    jb.accumulate = accumulate;
    jb.ws = ws; jb.ws_n = ws ? ws_n : 0;
    /* waking a worker costs ~10-50 us, so give each thread at least ~8 MFLOP
       (4M multiply-adds); never more threads than register tiles (below) */
    flops *= nseg;
    if (nthreads > TJ__SGEMM_MAXT) nthreads = TJ__SGEMM_MAXT;
    if (nthreads < 1) nthreads = 1;
    if (nthreads > 1 && flops < TJ__SGEMM_PER_THREAD * nthreads) nthreads = (int)(flops / TJ__SGEMM_PER_THREAD) > 1 ? (int)(flops / TJ__SGEMM_PER_THREAD) : 1;
    {
        /* split along whichever dimension wastes less in partial tiles; prefer N
           (each thread then packs only its own part of B, A is shared read-only);
           products sharing B always split N */
        int un = (N + cfg.nr - 1) / cfg.nr, um = (M + cfg.mr - 1) / cfg.mr;
        int tn = un < nthreads ? un : nthreads, tm = um < nthreads ? um : nthreads;
        double eff_n = (double)un / (((un + tn - 1) / tn) * (double)tn);
        double eff_m = (double)um / (((um + tm - 1) / tm) * (double)tm);
        eff_n *= (double)tn / nthreads; eff_m *= (double)tm / nthreads;
        if (nseg > 1 || eff_n >= eff_m * 0.98) {
            jb.split_n = 1; jb.nparts = tn;
            jb.m0[0] = 0; jb.m0[1] = M;
            tj__sgemm_split(N, cfg.nr, tn, jb.n0);
        } else {
            jb.split_n = 0; jb.nparts = tm;
            jb.n0[0] = 0; jb.n0[1] = N;
            tj__sgemm_split(M, cfg.mr, tm, jb.m0);
        }
    }
    tj__parallel(jb.nparts, tj__sgemm_run_part, &jb);
}
static void tj__gemm_ws(int bf16, int trans_a, int trans_b, int M, int N, int K,
                        const void *A, int lda, const void *B, int ldb,
                        float *C, int ldc, int accumulate, int nthreads, char *ws, int ws_n) {
    tj__gemm_segs(bf16, trans_a, trans_b, 1, M, N, K, &A, lda, B, ldb, &C, ldc, accumulate, nthreads, ws, ws_n);
}
TJ__MAYBE_UNUSED static void tj__sgemm(int trans_a, int trans_b, int M, int N, int K,
                                       const float *A, int lda, const float *B, int ldb,
                                       float *C, int ldc, int accumulate, int nthreads) {
    tj__gemm_ws(0, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, accumulate, nthreads, NULL, 0);
}
TJ__MAYBE_UNUSED static void tj__bgemm(int trans_a, int trans_b, int M, int N, int K,
                                       const uint16_t *A, int lda, const uint16_t *B, int ldb,
                                       float *C, int ldc, int accumulate, int nthreads) {
    tj__gemm_ws(1, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, accumulate, nthreads, NULL, 0);
}

/* C (f32) -> bf16, rounded as tj_f32_to_bf16: to nearest even, a NaN stays
   a quiet NaN with its sign (vcvtneps2bf16 would flush denormals: not used).
   Full-mask shifts: see TJ__UNPLO. */
#if TJ__X86
__attribute__((target("avx512f")))
TJ__MAYBE_UNUSED static void tj__f32_to_bf16_avx512(const float *src, uint16_t *dst, int64_t n) {
    const __m512i expm = _mm512_set1_epi32(0x7f800000), manm = _mm512_set1_epi32(0x007fffff);
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), qb = _mm512_set1_epi32(0x40);
    int64_t i;
    for (i = 0; i < n; i += 16) {
        __mmask16 m = (__mmask16)(n - i >= 16 ? 0xFFFF : ((1u << (n - i)) - 1u));
        __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + i));
        __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, expm), expm) &
                        _mm512_test_epi32_mask(u, manm);
        __m512i hi = _mm512_maskz_srli_epi32((__mmask16)0xFFFF, u, 16);
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(hi, one)));
        r = _mm512_maskz_srli_epi32((__mmask16)0xFFFF, r, 16);
        r = _mm512_mask_or_epi32(r, nan, hi, qb);
        _mm512_mask_cvtepi32_storeu_epi16(dst + i, m, r);
    }
}
#endif
TJ__MAYBE_UNUSED static void tj__f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n) {
    int64_t i;
#if TJ__X86 && !defined(TJ_SGEMM_NO_SIMD) && !defined(TJ_SGEMM_NO_AVX512)
    if (__builtin_cpu_supports("avx512f")) {
        tj__f32_to_bf16_avx512(src, dst, n);
        return;
    }
#endif
    for (i = 0; i < n; i++) dst[i] = tj_f32_to_bf16(src[i]);
}

/* ==== [11] transports: where devices meet; process mode ================== */
/* Three layers (see the API): the collective kernels below pack a device's
   strided block into planned scratch, call the transport on contiguous
   buffers, and unpack. The CPU transport serves "threads" (one process) and
   "mpi" (TJ_MPI): for each group it keeps one shared record for the
   group's members in this process. A member publishes its buffers there and
   waits at a barrier. If the group has members in other processes, its
   lowest local member (the leader) sends each other process one message
   holding what that process's members need from this one (tag = the group's
   id, so successive collectives of a group match in order) and receives
   theirs; the others wait at a second barrier. Then every member computes
   its result from its local peers' buffers and the received messages,
   reducing in rank order, and a last barrier lets buffers be reused. With
   one process nothing is sent and this is the shared-memory rendezvous the
   CPU backend always had. Every wait has the timeout; a timeout breaks the
   transport (later calls fail at once), since MPI cannot cancel what is in
   flight.
   Process mode: ctx->procs says which devices this process runs; arrays
   allocate only those devices' shards; a device that fails keeps running
   the schedule "dry" (collectives only, see tj__run_body), and the
   processes agree on errors before and after each run and on a hash of each
   program at tj_jit. */

#if defined(TJ_MPI)
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 /* the C API only, also from C++ */
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif
#include <signal.h>
#include <errno.h>

/* ---- the process layer: processes, groups and statistics of a context ---- */
struct tj__gset { /* the groups of one (mesh, mask): a handle per local device */
    int nmesh, size[TJ__MAXMESH];
    unsigned mask;
    void *comm[TJ_MAXDEV];
    struct tj__gset *next;
};
struct tj__procs {
    tj_transport *t;
    int own;                 /* the context made t (threads) and frees it    */
    int nprocs, rank, lo, hi;/* this process runs devices [lo, hi)           */
    double timeout_s;
    struct tj__gset *groups;
    int64_t ncoll[TJ_MAXDEV], sent[TJ_MAXDEV];
    int64_t fiber_runs, fiber_switches;
    double us[TJ_MAXDEV];
    int in_tree_io;          /* inside tj__procs_tree_io                      */
};
/* per device of this process: the collective it is in now, for the message
   printed when the process is stopped by a signal (its peer died) */
static char tj__where[TJ_MAXDEV][200];
static volatile int tj__inside[TJ_MAXDEV]; /* 1 while the device is in that collective */
static int tj__where_rank = -1;

static tj_transport *tj__threads_transport(double timeout_s);
static struct tj__procs *tj__procs_get(tj_ctx *c) {
    struct tj__procs *P = c->procs;
    const char *e;
    if (P) return P;
    P = (struct tj__procs *)tj__calloc(sizeof *P);
    if (!P) return NULL;
    e = getenv("TJ_TIMEOUT");
    P->timeout_s = e && atof(e) > 0 ? atof(e) : 300.0;
    P->t = tj__threads_transport(P->timeout_s);
    if (!P->t) {
        TJ_FREE(P);
        return NULL;
    }
    P->own = 1;
    P->nprocs = 1;
    P->lo = 0;
    P->hi = c->ndev;
    c->procs = P;
    return P;
}
static void tj__groups_free(struct tj__procs *P) {
    while (P->groups) {
        struct tj__gset *s = P->groups;
        int d;
        P->groups = s->next;
        for (d = 0; d < TJ_MAXDEV; d++)
            if (s->comm[d] && P->t->comm_free) P->t->comm_free(P->t, s->comm[d]);
        TJ_FREE(s);
    }
}
static void tj__procs_free(tj_ctx *c) {
    struct tj__procs *P = c->procs;
    if (!P) return;
    tj__groups_free(P);
    if (P->own && P->t->free) P->t->free(P->t);
    TJ_FREE(P);
    c->procs = NULL;
}
static int tj__nprocs(const tj_ctx *c) { return c && c->procs ? c->procs->nprocs : 1; }
static int tj__dev_mine(const tj_ctx *c, int d) { return !c->procs || c->procs->nprocs <= 1 || (d >= c->procs->lo && d < c->procs->hi); }
static tj_status tj__procs_devices(tj_ctx *c) {
    struct tj__procs *P = c->procs;
    if (!P) return TJ_OK;
    if (c->ndev % P->nprocs) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_set_devices: %d devices cannot be shared by %d processes (each process owns devices / processes of them)", c->ndev,
                P->nprocs);
        return TJ_ERR_ARG;
    }
    P->lo = P->rank * (c->ndev / P->nprocs);
    P->hi = P->lo + c->ndev / P->nprocs;
    return TJ_OK;
}
TJDEF int tj_process_count(tj_ctx *c) { return tj__nprocs(c); }
TJDEF int tj_process_index(tj_ctx *c) { return c && c->procs ? c->procs->rank : 0; }
TJDEF int tj_local_devices(tj_ctx *c, int *first) {
    int lo = 0, hi = c ? c->ndev : 0;
    if (c && c->procs && c->procs->nprocs > 1) {
        lo = c->procs->lo;
        hi = c->procs->hi;
    }
    if (first) *first = lo;
    return hi - lo;
}
TJDEF const char *tj_transport_name(tj_ctx *c) { return c && c->procs ? c->procs->t->name : "threads"; }
/* FNV-1a, for program hashes */
static uint64_t tj__fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}
static uint64_t tj__fnv_name(uint64_t h, tj_ctx *c, int id) {
    const char *s = id >= 0 ? tj__name(c, id) : "";
    return tj__fnv(h, s, strlen(s) + 1);
}
/* everything the run depends on: ops, types (axis names, not ids),
   attributes, buffer offsets, source lines; scan bodies included */
static uint64_t tj__prog_hash(const tj_prog *p, uint64_t h) {
    int i, j;
    tj_ctx *c = p->ctx;
    h = tj__fnv(h, &p->nsched, sizeof p->nsched);
    h = tj__fnv(h, p->arena_bytes, sizeof p->arena_bytes);
    for (i = 0; i < p->nsched; i++) {
        const tj_node *n = p->sched[i];
        const tj__attr *a = &n->a;
        int64_t v[16];
        const char *f = tj__base(n->file);
        memset(v, 0, sizeof v);
        v[0] = n->op; v[1] = n->nin; v[2] = n->t.dt; v[3] = n->t.rank; v[4] = n->t.partial; v[5] = n->t.vary;
        v[6] = n->off; v[7] = n->scratch_off; v[8] = n->out_index; v[9] = n->space; v[10] = n->line;
        v[11] = a->index; v[12] = a->length; v[13] = a->reverse; v[14] = a->start; v[15] = a->stop;
        h = tj__fnv(h, v, sizeof v);
        h = tj__fnv(h, n->t.dim, sizeof n->t.dim);
        h = tj__fnv(h, n->t.sh, sizeof n->t.sh);
        h = tj__fnv(h, f, strlen(f) + 1);
        for (j = 0; j < n->t.rank; j++) h = tj__fnv_name(h, c, n->t.ax[j]);
        for (j = 0; j < n->nin; j++) h = tj__fnv(h, &n->in[j]->id, sizeof(int));
        h = tj__fnv_name(h, c, a->axis);
        h = tj__fnv_name(h, c, a->axis2);
        for (j = 0; j < a->naxes; j++) h = tj__fnv_name(h, c, a->axes[j]);
        h = tj__fnv(h, &a->s, sizeof a->s);
        h = tj__fnv(h, &a->key, sizeof a->key);
        h = tj__fnv(h, a->perm, sizeof a->perm);
        v[0] = a->nb; v[1] = a->nm; v[2] = a->nk; v[3] = a->nn; v[4] = a->trans_a; v[5] = a->trans_b; v[6] = a->ncarry; v[7] = a->nx; v[8] = a->ncap;
        h = tj__fnv(h, v, 9 * sizeof(int64_t));
        if (n->op == TJ__OP_CUSTOM) h = tj__fnv(h, c->ops[a->index].d.name, strlen(c->ops[a->index].d.name));
        if (n->sub && n->sub->prog) h = tj__prog_hash(n->sub->prog, h);
    }
    return h;
}

/* Agreement: every process contributes its status and message; *gst gets
   the first failed process's status (TJ_OK if none) and out "process r
   (device d): msg". Returns nonzero if the processes could not be reached
   (out says why). */
typedef struct {
    int32_t st, dev;
    uint64_t hash;
    char msg[496];
} tj__agree_rec;
static int tj__agree(tj_ctx *c, tj_status st, int dev, uint64_t hash, const char *msg, tj_status *gst, char *out, size_t on, uint64_t *hashes) {
    struct tj__procs *P = c->procs;
    tj__agree_rec mine, *all;
    char err[512];
    int r;
    out[0] = 0;
    *gst = st;
    if (!P || P->nprocs <= 1) {
        if (hashes) hashes[0] = hash;
        return 0;
    }
    memset(&mine, 0, sizeof mine);
    mine.st = (int32_t)st;
    mine.dev = dev;
    mine.hash = hash;
    snprintf(mine.msg, sizeof mine.msg, "%.495s", msg ? msg : "");
    all = (tj__agree_rec *)tj__calloc(sizeof *all * (size_t)P->nprocs);
    if (!all) {
        snprintf(out, on, "out of memory agreeing with the other processes");
        return 1;
    }
    if (P->t->proc_allgather(P->t, &mine, all, sizeof mine, err, sizeof err)) {
        snprintf(out, on, "process %d could not reach the other processes: %s", P->rank, err);
        TJ_FREE(all);
        return 1;
    }
    *gst = TJ_OK;
    for (r = 0; r < P->nprocs; r++) {
        if (hashes) hashes[r] = all[r].hash;
        if (all[r].st != TJ_OK && *gst == TJ_OK) {
            *gst = (tj_status)all[r].st;
            if (all[r].dev >= 0) snprintf(out, on, "process %d (device %d): %s", r, all[r].dev, all[r].msg);
            else snprintf(out, on, "process %d: %s", r, all[r].msg);
        }
    }
    TJ_FREE(all);
    return 0;
}

/* ---- groups: made once per program by a split ---- */
static void *tj__group_find(tj_ctx *c, unsigned m, int dev) {
    struct tj__gset *s;
    int i, same;
    if (!c->procs) return NULL;
    for (s = c->procs->groups; s; s = s->next) {
        if (s->mask != m || s->nmesh != c->nmesh) continue;
        for (i = 0, same = 1; i < c->nmesh; i++) same &= s->size[i] == c->mesh_size[i];
        if (same) return s->comm[dev];
    }
    return NULL;
}
/* color: the device's coordinates off the mask (mixed radix, mesh order);
   key: its rank along the mask. Ranks in a group sorted by key are then
   tj__mesh_peer's order. */
static tj_status tj__groups_make(tj_ctx *c, unsigned m) {
    struct tj__procs *P = c->procs;
    struct tj__gset *s;
    int dev[TJ_MAXDEV], color[TJ_MAXDEV], key[TJ_MAXDEV], n = 0, d, i;
    char err[512];
    if (tj__group_find(c, m, P->lo)) return TJ_OK;
    s = (struct tj__gset *)tj__calloc(sizeof *s);
    if (!s) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "out of memory making device groups");
        return TJ_ERR_OOM;
    }
    s->nmesh = c->nmesh;
    s->mask = m;
    for (i = 0; i < c->nmesh; i++) s->size[i] = c->mesh_size[i];
    for (d = 0; d < c->ndev; d++) {
        int col = 0;
        if (!tj__dev_mine(c, d)) continue;
        for (i = 0; i < c->nmesh; i++)
            if (!(m >> i & 1)) col = col * c->mesh_size[i] + tj__mesh_coord(c, d, i);
        dev[n] = d;
        color[n] = col;
        key[n] = tj__mesh_rank(c, d, m);
        n++;
    }
    if (P->t->split(P->t, n, dev, color, key, s->comm + dev[0], err, sizeof err)) {
        char mb[64];
        tj__err(c, TJ_ERR_IO, NULL, 0, "making the device groups over mesh axes %s (transport '%s'): %s", tj__mesh_names(c, m, mb, sizeof mb), P->t->name, err);
        TJ_FREE(s);
        return TJ_ERR_IO;
    }
    s->next = P->groups;
    P->groups = s;
    return TJ_OK;
}
static tj_status tj__groups_for(tj_ctx *c, const tj_prog *p) {
    int i;
    for (i = 0; i < p->nsched; i++) {
        const tj_node *n = p->sched[i];
        if (TJ__IS_COLL(n->op) && n->op != TJ__OP_SHARD_SLICE && tj__groups_make(c, n->a.mesh)) return c->status;
        if (n->sub && n->sub->prog && tj__groups_for(c, n->sub->prog)) return c->status;
    }
    return TJ_OK;
}
/* At the end of tj_jit (p NULL: tracing or compiling failed here): agree
   with the other processes on the program, then make its groups. Returns
   nonzero if the program must not be used. */
static int tj__procs_jit(tj_ctx *c, tj_prog *p, const char *name) {
    struct tj__procs *P = tj__procs_get(c);
    char out[TJ__MSG];
    uint64_t h = p ? tj__prog_hash(p, 1469598103934665603ull) : 0, hs[TJ_MAXDEV];
    tj_status st;
    int r;
    if (!P) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "jit '%s': out of memory", name);
        return 1;
    }
    if (P->nprocs > 1) {
        if (tj__agree(c, p ? TJ_OK : (c->status ? c->status : TJ_ERR_ARG), -1, h, p ? "" : c->msg, &st, out, sizeof out, hs)) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "jit '%s': %s", name, out);
            return 1;
        }
        if (st != TJ_OK) {
            tj__err(c, st, NULL, 0, "jit '%s': %s", name, out);
            return 1;
        }
        for (r = 1; r < P->nprocs; r++)
            if (hs[r] != hs[0]) {
                tj__err(c, TJ_ERR_STATE, NULL, 0,
                        "jit '%s': the processes compiled different programs (program hash %016llx in process 0, %016llx in process %d); every process "
                        "must trace the same function on the same shapes, dtypes, shardings and mesh",
                        name, (unsigned long long)hs[0], (unsigned long long)hs[r], r);
                return 1;
            }
    }
    if (!p) return 1;
    return tj__groups_for(c, p) != TJ_OK;
}

/* ---- the CPU transport: shared memory between this process's devices,
   and a wire (MPI) to other processes ---- */
typedef struct tj__wire tj__wire;
struct tj__wire {
    /* send sbuf[i] to process peer[i] and receive rbuf[i] from it, all at
       once, tagged; returns 0, or nonzero with a message */
    int (*exchange)(tj__wire *w, int n, const int *peer, const void *const *sbuf, const size_t *slen, void *const *rbuf, const size_t *rlen, int tag,
                    double timeout_s, char *err, size_t en);
    int (*allgather)(tj__wire *w, const void *send, void *recv, size_t bytes, double timeout_s, char *err, size_t en);
    void (*free)(tj__wire *w);
};
typedef struct {
    int64_t wire_bytes; /* bytes sent to other processes                   */
    tj_transport t;
    tj__wire *wire;
    pthread_mutex_t mu;
    int next_tag, tag_ub;
    char broken[512];   /* the first fatal error: later calls fail at once */
    int isbroken;       /* set once broken is written (tj__ct_failed)      */
} tj__ct;
typedef struct tj__cgroup {
    tj__ct *ct;
    int G, tag, refs, me_proc;
    int dev[TJ_MAXDEV], proc[TJ_MAXDEV], lidx[TJ_MAXDEV]; /* per rank            */
    int nloc, loc[TJ_MAXDEV];   /* ranks in this process, ascending           */
    int nrem, rem[TJ_MAXDEV];   /* the other processes of the group, ascending */
    int ridx[TJ_MAXDEV];        /* process -> index in rem, or -1               */
    int pcnt[TJ_MAXDEV];        /* process -> its members in the group          */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting, broken;   /* members arrived at the barrier; a timeout broke it */
    int sleepers;          /* members asleep on cv (under mu)                   */
    unsigned long gen;     /* barriers passed                                   */
    struct {
        const void *send;
        void *recv;
        void *out;             /* a collective matmul's output (tj__cdot_meet) */
        int to, from;
    } slot[TJ_MAXDEV];
    char *sbuf, *rbuf;          /* the leader's messages                      */
    size_t scap, rcap, roff[TJ_MAXDEV];
    int wire_rc;
    char wire_err[400];
    /* a small collective's inputs, copied by each member (see tj__ct_coll):
       two generations, each member's buffer its own to grow */
    char *stage[2][TJ_MAXDEV];
    size_t stage_cap[2][TJ_MAXDEV];
    unsigned long staged[TJ_MAXDEV]; /* per rank: its staged collectives so far */
} tj__cgroup;
typedef struct {
    tj__cgroup *g;
    int rank;
} tj__chandle;
enum { TJ__AG, TJ__AR, TJ__RS, TJ__A2A, TJ__PERM };

static void tj__ct_break(tj__ct *ct, const char *msg) {
    pthread_mutex_lock(&ct->mu);
    if (!ct->broken[0]) snprintf(ct->broken, sizeof ct->broken, "%s", msg);
#if defined(__GNUC__)
    __atomic_store_n(&ct->isbroken, 1, __ATOMIC_RELEASE);
#else
    ct->isbroken = 1;
#endif
    pthread_mutex_unlock(&ct->mu);
}
/* has the transport broken: then nonzero, and err says why (every call
   checks: a flag read without the lock, the message copied under it, as
   another device may be writing it) */
static int tj__ct_failed(tj__ct *ct, char *err, size_t en) {
#if defined(__GNUC__)
    if (!__atomic_load_n(&ct->isbroken, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&ct->mu);
#else
    pthread_mutex_lock(&ct->mu);
    if (!ct->isbroken) {
        pthread_mutex_unlock(&ct->mu);
        return 0;
    }
#endif
    snprintf(err, en, "the transport is broken: %s", ct->broken);
    pthread_mutex_unlock(&ct->mu);
    return 1;
}
static void tj__deadline(struct timespec *ts, double s) {
    double t = tj__now_us() * 1e-6 + s;
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
    if (ts->tv_nsec >= 1000000000L) ts->tv_nsec = 999999999L;
}
/* sleep about us microseconds (nanosleep is not in C99) */
TJ__MAYBE_UNUSED static void tj__nap(int us) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    struct timespec ts;
    tj__deadline(&ts, us * 1e-6);
    pthread_mutex_lock(&m);
    pthread_cond_timedwait(&cv, &m, &ts);
    pthread_mutex_unlock(&m);
    pthread_cond_destroy(&cv);
    pthread_mutex_destroy(&m);
}
/* ---- simulated devices as fibers ----
   Simulated devices usually outnumber the cores (8 on 2). As threads, the
   kernel time-slices them: a device that waits at a collective for one
   that is not running spins away its slice or sleeps (a system call to
   wake it), and every slice switches caches between devices. So when
   there are more devices than threads (tj_set_threads), the CPU backend
   runs each device as a fiber instead, a stack of its own switched in user
   space (ucontext), on W worker threads (W = the threads; device i on
   worker i mod W; the caller is worker 0). A fiber runs until it must wait
   at a barrier (tj__cg_barrier, where every collective and the collective
   matmul meet), then hands its worker to the worker's next device, which
   runs until it waits in turn; nothing slices a kernel, and nobody sleeps
   while a device of its worker can run. Devices do the same work between
   collectives, so W workers finish a round together.
   Not used with a backend (a GPU keeps per-thread state; devsim's stream
   waits block a worker), across processes (an MPI wait blocks its worker
   too, and a device of the same worker may be the one its peer waits
   for), under ThreadSanitizer, or with TJ_FIBERS=0 in the environment when the context is made
   (threads, as before). A fiber's stack is TJ_FIBER_STACK bytes, a
   thread's default, with a guard page below it. */
#if defined(__linux__) && defined(__GNUC__) && !defined(TJ_NO_FIBERS) && !defined(__SANITIZE_THREAD__) /* (the barrier's fiber wait needs atomics) */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TJ__NO_FIBERS_HERE 1
#endif
#endif
#ifndef TJ__NO_FIBERS_HERE
#define TJ__FIBERS 1
#endif
#endif
#ifndef TJ__FIBERS
#define TJ__FIBERS 0
#endif
#if TJ__FIBERS
#include <ucontext.h>
#include <sys/mman.h>
#ifndef TJ_FIBER_STACK
#define TJ_FIBER_STACK ((size_t)8 << 20)
#endif
/* AddressSanitizer must be told when the stack changes under it */
#if defined(__SANITIZE_ADDRESS__)
#define TJ__FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TJ__FIBER_ASAN 1
#endif
#endif
#ifdef TJ__FIBER_ASAN
#ifdef __cplusplus
extern "C" {
#endif
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
#ifdef __cplusplus
}
#endif
#define TJ__SWITCH_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define TJ__SWITCH_DONE(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define TJ__SWITCH_START(save, bottom, size) ((void)0)
#define TJ__SWITCH_DONE(save, bottom, size) ((void)0)
#endif
typedef struct tj__fworker tj__fworker;
typedef struct {
    ucontext_t uc;
    char *mem, *stack;    /* TJ_MALLOC'd; the stack is page-aligned above a guard page */
    void *run;            /* the device's tj__devrun */
    tj__fworker *w;
    int done;
    int64_t switches;     /* times it handed its worker over */
    void *fake;           /* ASan's: this fiber's fake stack while it is off  */
    const void *wbot;     /* ASan's: the worker's stack                      */
    size_t wsize;
} tj__fiber;
struct tj__fworker {
    ucontext_t home;      /* the worker's loop, where a fiber that waits returns */
    tj__fiber *f[TJ_MAXDEV], *cur;
    int nf;
    void *fake;
    int64_t *progress;    /* the run's (us): when a device last arrived at a barrier or ended (tj__cg_fiber_wait) */
};
static pthread_key_t tj__fiber_key; /* a worker thread's tj__fworker */
static pthread_once_t tj__fiber_once = PTHREAD_ONCE_INIT;
static void tj__fiber_key_make(void) { (void)pthread_key_create(&tj__fiber_key, NULL); }
static void *tj__device_main(void *arg);
/* a device of this run got somewhere (arrived at a barrier, or ended):
   the waits' timeout counts from the last such moment (tj__cg_fiber_wait) */
static void tj__fiber_progress(tj__fworker *w) {
    if (w && w->progress) __atomic_store_n(w->progress, (int64_t)tj__now_us(), __ATOMIC_RELAXED);
}
/* this thread's worker when it runs a fiber now, else NULL */
static tj__fworker *tj__fiber_here(void) {
    tj__fworker *w;
    pthread_once(&tj__fiber_once, tj__fiber_key_make);
    w = (tj__fworker *)pthread_getspecific(tj__fiber_key);
    return w && w->cur ? w : NULL;
}
/* On a fiber (w from tj__fiber_here): hand the worker to its next device,
   and return when this device's turn comes round again. */
static void tj__fiber_yield(tj__fworker *w) {
    tj__fiber *f = w->cur;
    f->switches++;
    TJ__SWITCH_START(&f->fake, f->wbot, f->wsize);
    swapcontext(&f->uc, &w->home);
    TJ__SWITCH_DONE(f->fake, &f->wbot, &f->wsize);
}
static void tj__fiber_entry(void) {
    tj__fworker *w = (tj__fworker *)pthread_getspecific(tj__fiber_key);
    tj__fiber *f = w->cur;
    TJ__SWITCH_DONE(NULL, &f->wbot, &f->wsize);
    tj__device_main(f->run);
    f->done = 1;
    TJ__SWITCH_START(NULL, f->wbot, f->wsize); /* for good: ASan drops its fake stack */
    setcontext(&f->w->home);
}
/* a worker: its fibers in turn, each until it waits or ends */
static void *tj__fworker_main(void *arg) {
    tj__fworker *w = (tj__fworker *)arg;
    void *outer; /* a run inside a device's kernel: that device's worker */
    int i, live = 1;
    pthread_once(&tj__fiber_once, tj__fiber_key_make);
    outer = pthread_getspecific(tj__fiber_key);
    pthread_setspecific(tj__fiber_key, w);
    while (live)
        for (i = 0, live = 0; i < w->nf; i++) {
            tj__fiber *f = w->f[i];
            if (f->done) continue;
            w->cur = f;
            TJ__SWITCH_START(&w->fake, f->stack, TJ_FIBER_STACK);
            swapcontext(&w->home, &f->uc);
            TJ__SWITCH_DONE(w->fake, NULL, NULL);
            w->cur = NULL;
            if (f->done) tj__fiber_progress(w);
            live += !f->done;
        }
    pthread_setspecific(tj__fiber_key, outer);
    return NULL;
}
/* a fiber's context on its stack (a function of its own: getcontext
   returns twice, like setjmp, which would endanger the caller's locals) */
static void tj__fiber_make(tj__fiber *f, size_t page) {
    f->stack = (char *)(((uintptr_t)f->mem + page - 1) & ~(uintptr_t)(page - 1)) + page;
    (void)mprotect(f->stack - page, page, PROT_NONE); /* an overflow faults */
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = TJ_FIBER_STACK;
    f->uc.uc_link = NULL; /* (the entry ends with setcontext) */
    makecontext(&f->uc, tj__fiber_entry, 0);
}
/* run nl devices (runs[i], each a tj__devrun of `rsize` bytes) as fibers
   on W workers; 0 when they ran (*switches: the hand-overs), 1 when
   nothing ran (out of memory for the stacks: the caller runs threads) */
static int tj__fibers_run(void *runs, size_t rsize, int nl, int W, int64_t *switches) {
    tj__fworker *ws = (tj__fworker *)tj__calloc(sizeof(tj__fworker) * (size_t)W);
    tj__fiber *fs = (tj__fiber *)tj__calloc(sizeof(tj__fiber) * (size_t)nl);
    pthread_t th[TJ_MAXDEV];
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    int i, started = 1, ok = ws && fs;
    int64_t progress = (int64_t)tj__now_us();
    for (i = 0; ok && i < W; i++) ws[i].progress = &progress;
    for (i = 0; ok && i < nl; i++) {
        tj__fiber *f = &fs[i];
        if (!(f->mem = (char *)TJ_MALLOC(TJ_FIBER_STACK + 2 * page))) ok = 0;
        else {
            tj__fiber_make(f, page);
            f->run = (char *)runs + (size_t)i * rsize;
            f->w = &ws[i % W];
            f->w->f[f->w->nf++] = f;
        }
    }
    if (ok) {
        for (i = 1; i < W; i++, started++)
            if (pthread_create(&th[i], NULL, tj__fworker_main, &ws[i])) break;
        for (i = 0; i < nl; i++) /* workers that did not start: worker 0 runs their devices */
            if (fs[i].w - ws >= started) {
                fs[i].w = &ws[0];
                ws[0].f[ws[0].nf++] = &fs[i];
            }
        tj__fworker_main(&ws[0]);
        for (i = 1; i < started; i++) pthread_join(th[i], NULL);
    }
    for (i = 0; fs && i < nl; i++)
        if (fs[i].mem) {
            *switches += fs[i].switches;
            (void)mprotect(fs[i].stack - page, page, PROT_READ | PROT_WRITE);
            TJ_FREE(fs[i].mem);
        }
    TJ_FREE(ws);
    TJ_FREE(fs);
    return !ok;
}
#endif
/* the group's members of this process meet; nonzero on a timeout (which
   breaks the group: its other members fail at once).
   Simulated devices usually outnumber the cores (8 on 2), and a collective
   meets once or twice (tj__ct_coll), so this is the hot path of a sharded
   step. The last member
   to arrive bumps the generation with an atomic store; the others first
   wait by yielding the core (to a device that has not arrived yet: the one
   everybody waits for) and see the bump without a system call to wake
   them; only one that waits past TJ__BARRIER_YIELDS sleeps on cv, and only
   then does the last member take the mutex to wake it. */
#ifndef TJ__BARRIER_YIELDS
#define TJ__BARRIER_YIELDS 64
#endif
#if defined(__GNUC__)
#define TJ__CG_LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define TJ__CG_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#define TJ__CG_INC(x) __atomic_add_fetch(&(x), 1, __ATOMIC_ACQ_REL)
#endif
#if TJ__FIBERS
/* a fiber's wait at a barrier: its worker's other devices run meanwhile.
   One that waits long (all of its worker's devices wait for the other
   workers') lets the core go, and past the timeout breaks the group. */
#ifndef TJ__FIBER_NAP_US
#define TJ__FIBER_NAP_US 2000
#endif
static void tj__cg_fiber_wait(tj__cgroup *g, unsigned long gen, tj__fworker *fw) {
    double t0 = tj__now_us(), w, last;
    tj__fiber_progress(fw); /* (this device has arrived) */
    tj__fiber_yield(fw);
    while (TJ__CG_LOAD(g->gen) == gen && !TJ__CG_LOAD(g->broken)) {
        w = tj__now_us() - t0;
        /* the timeout counts from the last arrival of any device of the
           run: a peer on another worker may be waiting for its turn behind
           that worker's long kernels (threads would run them side by side) */
        last = (double)__atomic_load_n(fw->progress, __ATOMIC_RELAXED);
        if (tj__now_us() - (last > t0 ? last : t0) > g->ct->t.timeout_s * 1e6) {
            pthread_mutex_lock(&g->mu);
            if (g->gen == gen) {
                TJ__CG_STORE(g->broken, 1);
                pthread_cond_broadcast(&g->cv);
            }
            pthread_mutex_unlock(&g->mu);
            return;
        }
        if (w > TJ__FIBER_NAP_US) tj__nap(50);
        else if (w > TJ__FIBER_NAP_US / 10) sched_yield();
        tj__fiber_yield(fw);
    }
}
#endif
static int tj__cg_barrier(tj__cgroup *g, char *err, size_t en) {
    unsigned long gen;
    int rc = 0;
    struct timespec ts;
    if (g->nloc <= 1) return 0;
#if defined(__GNUC__)
    gen = TJ__CG_LOAD(g->gen);
    if (TJ__CG_LOAD(g->broken)) rc = 1;
    else if (TJ__CG_INC(g->waiting) == g->nloc) {
        /* the others cannot arrive at the next barrier before the bump */
        TJ__CG_STORE(g->waiting, 0);
        pthread_mutex_lock(&g->mu); /* a member between its check and its wait holds mu */
        TJ__CG_STORE(g->gen, gen + 1);
        if (g->sleepers) pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return 0;
    } else {
        int y;
#if TJ__FIBERS
        tj__fworker *fw = tj__fiber_here();
        if (fw) tj__cg_fiber_wait(g, gen, fw); /* (then gen moved on, or the group broke) */
        else
#endif
        for (y = 0; y < TJ__BARRIER_YIELDS; y++) {
            if (TJ__CG_LOAD(g->gen) != gen || TJ__CG_LOAD(g->broken)) break;
            sched_yield();
        }
        pthread_mutex_lock(&g->mu);
        if (g->gen == gen && !g->broken) {
            tj__deadline(&ts, g->ct->t.timeout_s);
            g->sleepers++;
            while (g->gen == gen && !g->broken)
                if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) == ETIMEDOUT && g->gen == gen) {
                    TJ__CG_STORE(g->broken, 1);
                    pthread_cond_broadcast(&g->cv);
                }
            g->sleepers--;
        }
        rc = g->gen == gen;
        pthread_mutex_unlock(&g->mu);
    }
#else /* no atomics: everything under the mutex */
    pthread_mutex_lock(&g->mu);
    gen = g->gen;
    if (g->broken) rc = 1;
    else if (++g->waiting == g->nloc) {
        g->waiting = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        tj__deadline(&ts, g->ct->t.timeout_s);
        while (gen == g->gen && !g->broken)
            if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) == ETIMEDOUT && gen == g->gen) {
                g->broken = 1;
                pthread_cond_broadcast(&g->cv);
            }
        rc = gen == g->gen;
    }
    pthread_mutex_unlock(&g->mu);
#endif
    if (rc) {
        snprintf(err, en, "timed out after %g s waiting for the other devices of this process in the group (or the group broke earlier)", g->ct->t.timeout_s);
        tj__ct_break(g->ct, err);
    }
    return rc;
}
/* Reductions in rank order, as the CPU kernels always did. all_reduce:
   accumulate in double, round once; reduce_scatter: round after each add
   (out = block 0, then out += block r in rank order). f32, the sharded
   step's gradients, has loops of its own with the same arithmetic (the
   generic load/store per chunk was a tenth of an 8-device step's CPU time):
   they vectorise. */
static void tj__reduce_f32(int G, const void *const *src, void *dst, size_t count, int op);
static void tj__reduce_once(int G, const void *const *src, void *dst, size_t count, tj_dtype dt, int op) {
    double acc[TJ__CHUNK], b[TJ__CHUNK];
    int64_t n = (int64_t)count, c0, c, j;
    int r;
    if (dt == TJ_F32 && (G <= 2 || op == TJ_REDUCE_MAX)) {
        /* a max, or the sum of two: the float op in rank order gives the same
           bits as the double one rounded once (the sum of two floats rounded
           to double and then to float is the float sum: 53 >= 2 * 24 + 2;
           a NaN comes out quiet either way, unless it was a signalling one) */
        tj__reduce_f32(G, src, dst, count, op);
        return;
    }
    for (c0 = 0; c0 < n; c0 += c) {
        c = n - c0 < TJ__CHUNK ? n - c0 : TJ__CHUNK;
        if (dt == TJ_F32) {
            const float *s0 = (const float *)src[0] + c0;
            float *o = (float *)dst + c0;
            for (j = 0; j < c; j++) acc[j] = (double)s0[j];
            for (r = 1; r < G; r++) { /* (a sum: a max took the path above) */
                const float *s = (const float *)src[r] + c0;
                for (j = 0; j < c; j++) acc[j] += (double)s[j];
            }
            for (j = 0; j < c; j++) o[j] = (float)acc[j];
            continue;
        }
        tj__load_n(src[0], dt, c0, 1, c, acc);
        for (r = 1; r < G; r++) {
            tj__load_n(src[r], dt, c0, 1, c, b);
            if (op == TJ_REDUCE_MAX)
                for (j = 0; j < c; j++) acc[j] = b[j] > acc[j] || b[j] != b[j] ? b[j] : acc[j];
            else if (dt == TJ_I32) /* XLA's s32 psum wraps (tj__i32_op) */
                for (j = 0; j < c; j++) acc[j] = tj__i32_op(TJ__OP_ADD, acc[j], b[j]);
            else
                for (j = 0; j < c; j++) acc[j] += b[j];
        }
        tj__store_n(dst, dt, c0, 1, c, acc);
    }
}
/* o[0..c) = s[0] op s[1] op ... op s[G-1], left to right, each step rounded
   to f32: the float add (max) gives the bits of the double one rounded to
   f32 (see [5]'s chunks), in one pass over o however many ranks there are */
static void tj__reduce_f32_run(int G, const float *const *s, int64_t off, float *o, int64_t c, int op) {
    int64_t j;
    int r;
    if (G < 2) {
        if (o != s[0] + off) memmove(o, s[0] + off, (size_t)c * sizeof(float));
        return;
    }
    for (r = 1; r < G; r++) {
        const float *a = r == 1 ? s[0] + off : o, *b = s[r] + off;
        if (op == TJ_REDUCE_MAX)
            for (j = 0; j < c; j++) o[j] = b[j] > a[j] || b[j] != b[j] ? b[j] : a[j];
        else
            for (j = 0; j < c; j++) o[j] = a[j] + b[j];
    }
}
/* the same over whole f32 buffers, chunk by chunk: each chunk of dst stays
   in cache across the G steps */
static void tj__reduce_f32(int G, const void *const *src, void *dst, size_t count, int op) {
    int64_t n = (int64_t)count, c0, c;
    for (c0 = 0; c0 < n; c0 += c) {
        c = n - c0 < TJ__CHUNK * 4 ? n - c0 : TJ__CHUNK * 4;
        tj__reduce_f32_run(G, (const float *const *)src, c0, (float *)dst + c0, c, op);
    }
}
static void tj__reduce_steps(int G, const void *const *src, void *dst, size_t count, tj_dtype dt, int op) {
    double acc[TJ__CHUNK], b[TJ__CHUNK];
    int64_t n = (int64_t)count, c0, c, j;
    int r;
    if (dt == TJ_F32) {
        tj__reduce_f32(G, src, dst, count, op);
        return;
    }
    if (dst != src[0]) memmove(dst, src[0], count * tj_dtype_size(dt));
    for (r = 1; r < G; r++)
        for (c0 = 0; c0 < n; c0 += c) {
            c = n - c0 < TJ__CHUNK ? n - c0 : TJ__CHUNK;
            tj__load_n(dst, dt, c0, 1, c, acc);
            tj__load_n(src[r], dt, c0, 1, c, b);
            if (op == TJ_REDUCE_MAX)
                for (j = 0; j < c; j++) acc[j] = b[j] > acc[j] || b[j] != b[j] ? b[j] : acc[j];
            else if (dt == TJ_I32) /* XLA's s32 psum wraps (tj__i32_op) */
                for (j = 0; j < c; j++) acc[j] = tj__i32_op(TJ__OP_ADD, acc[j], b[j]);
            else
                for (j = 0; j < c; j++) acc[j] += b[j];
            tj__store_n(dst, dt, c0, 1, c, acc);
        }
}
/* reduce_steps on f32 views: out (contiguous, type ot) = the view of src[0]
   at element base (src's type it: ot's axes, larger along one), then += the
   same view of src[r] in rank order; row by row along the innermost axis,
   each element summed in the same order as tj__reduce_steps does */
static void tj__reduce_steps_view(int G, const float *const *src, int64_t base, const tj__type *it, const tj__type *ot, float *out, int op) {
    int64_t ist[TJ_MAXDIM] = {0}, idx[TJ_MAXDIM] = {0}, inner, rows, row, off;
    int d, R = ot->rank;
    tj__strides(it, ist);
    inner = R ? ot->dim[R - 1] : 1;
    rows = inner > 0 ? tj__numel(ot) / inner : 0;
    for (row = 0; row < rows; row++) {
        float *o = out + row * inner;
        for (off = base, d = 0; d < R - 1; d++) off += idx[d] * ist[d];
        tj__reduce_f32_run(G, src, off, o, inner, op);
        for (d = R - 2; d >= 0 && ++idx[d] == ot->dim[d]; d--) idx[d] = 0;
    }
}
static int tj__grow(char **p, size_t *cap, size_t n) {
    char *q;
    if (n <= *cap) return 0;
    q = (char *)TJ_REALLOC(*p, n);
    if (!q) return 1;
    *p = q;
    *cap = n;
    return 0;
}
/* the leader: one message to and from each other process of the group */
static int tj__cg_wire(tj__cgroup *g, int kind, size_t S) {
    int q, i, l, r, L = g->nloc, peer[TJ_MAXDEV];
    size_t slen[TJ_MAXDEV], rlen[TJ_MAXDEV], soff[TJ_MAXDEV], stot = 0, rtot = 0;
    const void *sb[TJ_MAXDEV];
    void *rb[TJ_MAXDEV];
    int bcast = kind == TJ__AG || kind == TJ__AR;
    for (i = 0; i < g->nrem; i++) {
        int p = g->rem[i], nq = g->pcnt[p], ns = 0, nr = 0;
        peer[i] = p;
        if (kind == TJ__PERM) {
            for (l = 0; l < L; l++) {
                int m = g->loc[l], to = g->slot[m].to, from = g->slot[m].from;
                ns += to >= 0 && g->proc[to] == p;
                nr += from >= 0 && g->proc[from] == p;
            }
            slen[i] = (size_t)ns * S;
            rlen[i] = (size_t)nr * S;
        } else if (bcast) {
            slen[i] = (size_t)L * S;
            rlen[i] = (size_t)nq * S;
        } else {
            slen[i] = (size_t)L * (size_t)nq * S;
            rlen[i] = slen[i];
        }
        soff[i] = bcast ? 0 : stot;
        if (!bcast || i == 0) stot += slen[i];
        g->roff[i] = rtot;
        rtot += rlen[i];
    }
    if (tj__grow(&g->rbuf, &g->rcap, rtot) || (!(bcast && L == 1) && tj__grow(&g->sbuf, &g->scap, stot))) {
        snprintf(g->wire_err, sizeof g->wire_err, "out of memory for the messages of a collective (%zu B)", stot + rtot);
        return 1;
    }
    for (i = 0; i < g->nrem; i++) {
        char *o = g->sbuf + soff[i];
        int p = g->rem[i];
        rb[i] = g->rbuf + g->roff[i];
        if (bcast && L == 1) { /* the member's buffer as it is */
            sb[i] = g->slot[g->loc[0]].send;
            continue;
        }
        sb[i] = o;
        if (bcast && i > 0) continue; /* the same message to every process */
        for (l = 0; l < L; l++) {
            int m = g->loc[l];
            const char *s = (const char *)g->slot[m].send;
            if (bcast) {
                memcpy(o, s, S);
                o += S;
            } else if (kind == TJ__PERM) {
                int to = g->slot[m].to;
                if (to >= 0 && g->proc[to] == p) {
                    memcpy(o, s, S);
                    o += S;
                }
            } else
                for (r = 0; r < g->G; r++)
                    if (g->proc[r] == p) {
                        memcpy(o, s + (size_t)r * S, S);
                        o += S;
                    }
        }
    }
    for (q = 0; q < g->nrem; q++) g->ct->wire_bytes += (int64_t)slen[q];
    return g->ct->wire->exchange(g->ct->wire, g->nrem, peer, sb, slen, rb, rlen, g->tag, g->ct->t.timeout_s, g->wire_err, sizeof g->wire_err);
}
/* where rank m's piece for rank me is (in[m]: a member of this process's
   input) */
static const char *tj__cg_src(tj__cgroup *g, const void *const *in, int kind, int m, int me, size_t S) {
    int p = g->proc[m], l, pos = 0;
    if (p == g->me_proc) {
        const char *s = (const char *)in[m];
        return kind == TJ__RS || kind == TJ__A2A ? s + (size_t)me * S : s;
    }
    if (kind == TJ__AG || kind == TJ__AR) return g->rbuf + g->roff[g->ridx[p]] + (size_t)g->lidx[m] * S;
    if (kind == TJ__PERM) {
        for (l = 0; l < g->nloc; l++) {
            int f = g->slot[g->loc[l]].from;
            pos += f >= 0 && g->proc[f] == p && f < m;
        }
        return g->rbuf + g->roff[g->ridx[p]] + (size_t)pos * S;
    }
    return g->rbuf + g->roff[g->ridx[p]] + ((size_t)g->lidx[m] * (size_t)g->nloc + (size_t)g->lidx[me]) * S;
}
/* Collectives on a view, for the CPU kernels (the transport interface has
   only contiguous buffers): an all_gather's output, or a reduce_scatter's
   input, where the split axis ax is not the outermost. all_gather: rank m's
   block goes to the view of out at m * (its extent) along ax, straight from
   the peers' buffers; reduce_scatter (f32, one process): rank me sums the
   views at me * (its extent) of every rank's input. Neither needs a
   contiguous copy first. */
typedef struct {
    const tj__type *it, *ot; /* one rank's block, the whole output */
    int ax, nthreads;
} tj__ct_region;
/* One collective among the members of this process: each publishes its
   buffers, they meet, each reads what it needs from the others' inputs
   into its own output, and they meet again, so that nobody overwrites an
   input (or its slot) that a slower member still reads. A small input
   (up to TJ__STAGE_MAX bytes, a group without other processes) is copied
   first into the member's staging buffer, of which it has two, used in
   turn: the members read the copies, and the second meeting goes. A
   member's next staged collective writes the other buffer; the one after
   that, this buffer again, but only after the next collective's meeting,
   which every member reaches after it has read this one. Most of a
   sharded step's collectives are small (a layer norm's gathered vectors,
   a row's statistics), and on simulated devices each meeting is a round
   of thread switches. */
#ifndef TJ__STAGE_MAX
#define TJ__STAGE_MAX ((size_t)64 << 10)
#endif
static int tj__ct_coll(tj_transport *t, void *comm, int kind, const void *send, void *recv, size_t S, size_t count, tj_dtype dt, int op, int to, int from,
                       char *err, size_t en, const tj__ct_region *reg) {
    tj__chandle *h = (tj__chandle *)comm;
    tj__cgroup *g = h->g;
    tj__ct *ct = (tj__ct *)t->state;
    int me = h->rank, G = g->G, m, rc = 0, staged = 0;
    size_t in_bytes = kind == TJ__RS || kind == TJ__A2A ? (size_t)G * S : S;
    const void *src[TJ_MAXDEV], *in[TJ_MAXDEV];
    src[0] = send; /* (G >= 1 fills it below; gcc -O2 cannot see that: maybe-uninitialized) */
    if (tj__ct_failed(ct, err, en)) return 1;
    g->slot[me].send = send;
    g->slot[me].recv = recv;
    g->slot[me].to = to;
    g->slot[me].from = from;
    if (!g->nrem && in_bytes <= TJ__STAGE_MAX) {
        int gen = (int)(g->staged[me]++ & 1);
        if (tj__grow(&g->stage[gen][me], &g->stage_cap[gen][me], in_bytes ? in_bytes : 1)) {
            snprintf(err, en, "out of memory for a collective's input (%zu B)", in_bytes);
            tj__ct_break(ct, err);
            return 1;
        }
        if (in_bytes && (kind != TJ__PERM || to >= 0)) memcpy(g->stage[gen][me], send, in_bytes); /* (a member that sends nothing) */
        staged = 1 + gen;
    }
    if (tj__cg_barrier(g, err, en)) return 1;
    for (m = 0; m < G; m++) in[m] = staged ? g->stage[staged - 1][m] : g->slot[m].send;
    if (g->nrem) {
        if (me == g->loc[0]) g->wire_rc = tj__cg_wire(g, kind, S);
        if (tj__cg_barrier(g, err, en)) return 1;
        if (g->wire_rc) {
            snprintf(err, en, "%s", g->wire_err);
            if (me == g->loc[0]) tj__ct_break(ct, g->wire_err);
            rc = 1;
        }
    }
    if (!rc) switch (kind) {
        case TJ__AG:
        case TJ__A2A:
            if (reg) { /* all_gather into a region (reg is given with TJ__AG alone) */
                int64_t st[TJ_MAXDIM] = {0};
                tj__strides(reg->ot, st);
                for (m = 0; m < G; m++)
                    tj__copy_region(tj__cg_src(g, in, kind, m, me, S), reg->it, 0, recv, reg->ot, m * reg->it->dim[reg->ax] * st[reg->ax], reg->it->dim,
                                    reg->nthreads);
                break;
            }
            for (m = 0; m < G; m++) {
                const char *s = tj__cg_src(g, in, kind, m, me, S);
                if ((char *)recv + (size_t)m * S != s) memcpy((char *)recv + (size_t)m * S, s, S);
            }
            break;
        case TJ__AR:
        case TJ__RS:
            if (reg) { /* reduce_scatter of views (reg is given with TJ__RS alone) */
                int64_t ist[TJ_MAXDIM] = {0};
                tj__strides(reg->it, ist);
                for (m = 0; m < G; m++) src[m] = in[m];
                tj__reduce_steps_view(G, (const float *const *)src, me * reg->ot->dim[reg->ax] * ist[reg->ax], reg->it, reg->ot, (float *)recv, op);
                break;
            }
            for (m = 0; m < G; m++) src[m] = tj__cg_src(g, in, kind, m, me, S);
            if (kind == TJ__AR) tj__reduce_once(G, src, recv, count, dt, op);
            else tj__reduce_steps(G, src, recv, count, dt, op);
            break;
        case TJ__PERM:
            if (from >= 0) {
                const char *s = tj__cg_src(g, in, kind, from, me, S);
                if (s != recv) memcpy(recv, s, S);
            }
            break;
        }
    if (!staged && tj__cg_barrier(g, err, en)) return 1;
    return rc;
}
static int tj__ct_all_gather(tj_transport *t, void *comm, const void *send, void *recv, size_t bytes, void *stream, char *err, size_t en) {
    (void)stream;
    return tj__ct_coll(t, comm, TJ__AG, send, recv, bytes, 0, TJ_F32, 0, -1, -1, err, en, NULL);
}
static int tj__ct_all_reduce(tj_transport *t, void *comm, const void *send, void *recv, size_t count, tj_dtype dt, tj_reduce_op op, void *stream, char *err,
                             size_t en) {
    (void)stream;
    return tj__ct_coll(t, comm, TJ__AR, send, recv, count * tj_dtype_size(dt), count, dt, (int)op, -1, -1, err, en, NULL);
}
static int tj__ct_reduce_scatter(tj_transport *t, void *comm, const void *send, void *recv, size_t count, tj_dtype dt, tj_reduce_op op, void *stream,
                                 char *err, size_t en) {
    (void)stream;
    return tj__ct_coll(t, comm, TJ__RS, send, recv, count * tj_dtype_size(dt), count, dt, (int)op, -1, -1, err, en, NULL);
}
static int tj__ct_all_to_all(tj_transport *t, void *comm, const void *send, void *recv, size_t bytes, void *stream, char *err, size_t en) {
    (void)stream;
    return tj__ct_coll(t, comm, TJ__A2A, send, recv, bytes, 0, TJ_F32, 0, -1, -1, err, en, NULL);
}
static int tj__ct_send_recv(tj_transport *t, void *comm, const void *send, int to, void *recv, int from, size_t bytes, void *stream, char *err, size_t en) {
    (void)stream;
    return tj__ct_coll(t, comm, TJ__PERM, send, recv, bytes, 0, TJ_F32, 0, to, from, err, en, NULL);
}
static int tj__ct_proc_allgather(tj_transport *t, const void *send, void *recv, size_t bytes, char *err, size_t en) {
    tj__ct *ct = (tj__ct *)t->state;
    if (tj__ct_failed(ct, err, en)) return 1;
    if (!ct->wire) {
        memcpy(recv, send, bytes);
        return 0;
    }
    ct->wire_bytes += (int64_t)bytes * (t->nprocs - 1);
    if (ct->wire->allgather(ct->wire, send, recv, bytes, t->timeout_s, err, en)) {
        tj__ct_break(ct, err);
        return 1;
    }
    return 0;
}
static void tj__ct_comm_free(tj_transport *t, void *comm) {
    tj__chandle *h = (tj__chandle *)comm;
    tj__cgroup *g = h->g;
    int i;
    (void)t;
    TJ_FREE(h);
    if (--g->refs > 0) return;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    TJ_FREE(g->sbuf);
    TJ_FREE(g->rbuf);
    for (i = 0; i < 2 * TJ_MAXDEV; i++) TJ_FREE(g->stage[i / TJ_MAXDEV][i % TJ_MAXDEV]);
    TJ_FREE(g);
}
/* split: every process's devices, colors and keys (gathered over the wire),
   then one group record per color that has a device here */
static int tj__ct_split(tj_transport *t, int n, const int *dev, const int *color, const int *key, void **comm, char *err, size_t en) {
    tj__ct *ct = (tj__ct *)t->state;
    int (*all)[4] = NULL, N = 0, i, j, k, P = t->nprocs, ncol = 0, cols[TJ_MAXDEV];
    tj__cgroup *made[TJ_MAXDEV];
    if (n < 1 || n > TJ_MAXDEV) {
        snprintf(err, en, "split of %d devices", n);
        return 1;
    }
    all = (int(*)[4])tj__calloc(sizeof(int[4]) * TJ_MAXDEV * (size_t)P);
    if (!all) {
        snprintf(err, en, "out of memory");
        return 1;
    }
    { /* each process: TJ_MAXDEV records (dev, color, key, used) */
        int mine[TJ_MAXDEV][4];
        memset(mine, 0, sizeof mine);
        for (i = 0; i < n; i++) {
            mine[i][0] = dev[i];
            mine[i][1] = color[i];
            mine[i][2] = key[i];
            mine[i][3] = 1;
        }
        if (tj__ct_proc_allgather(t, mine, all, sizeof mine, err, en)) {
            TJ_FREE(all);
            return 1;
        }
    }
    /* compact: entries (dev, color, key, process) */
    for (i = 0; i < P * TJ_MAXDEV; i++)
        if (all[i][3]) {
            all[N][0] = all[i][0];
            all[N][1] = all[i][1];
            all[N][2] = all[i][2];
            all[N][3] = i / TJ_MAXDEV;
            N++;
        }
    /* colors in increasing order give tags: every process numbers them alike */
    for (i = 0; i < N; i++) {
        int c = all[i][1], seen = 0;
        for (j = 0; j < ncol; j++) seen |= cols[j] == c;
        if (!seen && ncol < TJ_MAXDEV) cols[ncol++] = c;
    }
    for (i = 1; i < ncol; i++)
        for (j = i; j > 0 && cols[j - 1] > cols[j]; j--) {
            int x = cols[j];
            cols[j] = cols[j - 1];
            cols[j - 1] = x;
        }
    memset(made, 0, sizeof made);
    for (i = 0; i < n; i++) {
        int ci = 0;
        tj__cgroup *g;
        tj__chandle *h;
        while (cols[ci] != color[i]) ci++;
        if (!(g = made[ci])) {
            int G = 0, mem[TJ_MAXDEV];
            g = (tj__cgroup *)tj__calloc(sizeof *g);
            if (!g) break;
            made[ci] = g;
            g->ct = ct;
            g->me_proc = t->rank;
            g->tag = (ct->next_tag + ci) % (ct->tag_ub > 0 ? ct->tag_ub : 32767);
            pthread_mutex_init(&g->mu, NULL);
            pthread_cond_init(&g->cv, NULL);
            for (j = 0; j < N; j++)
                if (all[j][1] == color[i]) mem[G++] = j;
            for (j = 1; j < G; j++) /* by key, then device */
                for (k = j; k > 0 && (all[mem[k - 1]][2] > all[mem[k]][2] || (all[mem[k - 1]][2] == all[mem[k]][2] && all[mem[k - 1]][0] > all[mem[k]][0])); k--) {
                    int x = mem[k];
                    mem[k] = mem[k - 1];
                    mem[k - 1] = x;
                }
            g->G = G;
            for (j = 0; j < TJ_MAXDEV; j++) g->ridx[j] = -1;
            for (j = 0; j < G; j++) {
                int p = all[mem[j]][3];
                g->dev[j] = all[mem[j]][0];
                g->proc[j] = p;
                g->lidx[j] = g->pcnt[p]++;
                if (p == t->rank) g->loc[g->nloc++] = j;
                else if (g->ridx[p] < 0) g->ridx[p] = 0;
            }
            for (j = 0; j < P; j++)
                if (g->ridx[j] == 0 && j != t->rank) {
                    g->ridx[j] = g->nrem;
                    g->rem[g->nrem++] = j;
                }
        }
        h = (tj__chandle *)tj__calloc(sizeof *h);
        if (!h) break;
        h->g = g;
        g->refs++;
        for (j = 0; j < g->G; j++)
            if (g->dev[j] == dev[i]) h->rank = j;
        comm[i] = h;
    }
    ct->next_tag += ncol;
    TJ_FREE(all);
    if (i < n) {
        for (j = 0; j < i; j++) tj__ct_comm_free(t, comm[j]);
        for (j = 0; j < ncol; j++)
            if (made[j] && !made[j]->refs) TJ_FREE(made[j]);
        snprintf(err, en, "out of memory");
        return 1;
    }
    return 0;
}
static void tj__ct_free(tj_transport *t) {
    tj__ct *ct = (tj__ct *)t->state;
    if (ct->wire && ct->wire->free) ct->wire->free(ct->wire);
    pthread_mutex_destroy(&ct->mu);
    TJ_FREE(ct);
}
static tj_transport *tj__ct_new(const char *name, int nprocs, int rank, tj__wire *wire, int tag_ub, double timeout_s) {
    tj__ct *ct = (tj__ct *)tj__calloc(sizeof *ct);
    tj_transport *t;
    if (!ct) return NULL;
    t = &ct->t;
    t->name = name;
    t->state = ct;
    t->nprocs = nprocs;
    t->rank = rank;
    t->timeout_s = timeout_s;
    t->split = tj__ct_split;
    t->comm_free = tj__ct_comm_free;
    t->all_gather = tj__ct_all_gather;
    t->all_reduce = tj__ct_all_reduce;
    t->reduce_scatter = tj__ct_reduce_scatter;
    t->all_to_all = tj__ct_all_to_all;
    t->send_recv = tj__ct_send_recv;
    t->proc_allgather = tj__ct_proc_allgather;
    t->free = tj__ct_free;
    ct->wire = wire;
    ct->tag_ub = tag_ub;
    pthread_mutex_init(&ct->mu, NULL);
    return t;
}
static tj_transport *tj__threads_transport(double timeout_s) { return tj__ct_new("threads", 1, 0, NULL, 0, timeout_s); }
TJDEF tj_transport *tj_threads_transport_new(double timeout_s) { return tj__threads_transport(timeout_s > 0 ? timeout_s : 300.0); }
TJDEF tj_transport_stats tj_get_transport_stats(tj_ctx *c) {
    tj_transport_stats s;
    int d;
    memset(&s, 0, sizeof s);
    if (!c || !c->procs) return s;
    for (d = 0; d < TJ_MAXDEV; d++) {
        s.collectives += c->procs->ncoll[d];
        s.bytes_sent += c->procs->sent[d];
        s.transport_s += c->procs->us[d] * 1e-6;
    }
    s.fiber_runs = c->procs->fiber_runs;
    s.fiber_switches = c->procs->fiber_switches;
    if (c->procs->t->split == tj__ct_split) s.wire_bytes = ((const tj__ct *)c->procs->t->state)->wire_bytes;
    return s;
}


/* ---- the MPI wire (TJ_MPI) ---- */
#if defined(TJ_MPI)
typedef struct {
    tj__wire w;
    MPI_Comm comm;
    pthread_mutex_t mu; /* MPI_THREAD_SERIALIZED: one thread in MPI at a time */
} tj__mpiw;
static int tj__mpi_fail(int rc, const char *what, char *err, size_t en) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, s, &len);
    s[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = 0;
    snprintf(err, en, "MPI %s failed: %s (a peer process may have died)", what, s);
    return 1;
}
/* poll the requests until done or past the timeout; MPI progresses while
   we test, and the lock is not held while we nap */
static int tj__mpi_wait(tj__mpiw *mw, int n, MPI_Request *rq, double timeout_s, const char *what, char *err, size_t en) {
    double t0 = tj__now_us();
    int flag = 0, rc, spins = 0, nap = 20;
    for (;;) {
        pthread_mutex_lock(&mw->mu);
        rc = MPI_Testall(n, rq, &flag, MPI_STATUSES_IGNORE);
        pthread_mutex_unlock(&mw->mu);
        if (rc != MPI_SUCCESS) return tj__mpi_fail(rc, what, err, en);
        if (flag) return 0;
        if ((tj__now_us() - t0) * 1e-6 > timeout_s) {
            snprintf(err, en, "timed out after %g s in MPI %s (a peer process died, hangs, or runs another program; the timeout is TJ_TIMEOUT)", timeout_s, what);
            return 1;
        }
        if (++spins < 200) sched_yield();
        else {
            tj__nap(nap);
            if (nap < 1000) nap += nap / 4 + 1;
        }
    }
}
#define TJ__MPI_CHUNK ((size_t)1 << 30)
static int tj__mpi_exchange(tj__wire *w, int n, const int *peer, const void *const *sbuf, const size_t *slen, void *const *rbuf, const size_t *rlen, int tag,
                            double timeout_s, char *err, size_t en) {
    tj__mpiw *mw = (tj__mpiw *)w;
    MPI_Request *rq;
    int nr = 0, i, rc = MPI_SUCCESS, cap = 0;
    size_t o;
    for (i = 0; i < n; i++) cap += (int)(slen[i] / TJ__MPI_CHUNK + rlen[i] / TJ__MPI_CHUNK + 2);
    rq = (MPI_Request *)tj__malloc(sizeof(MPI_Request) * (size_t)cap);
    if (!rq) {
        snprintf(err, en, "out of memory for MPI requests");
        return 1;
    }
    pthread_mutex_lock(&mw->mu);
    for (i = 0; i < n && rc == MPI_SUCCESS; i++)
        for (o = 0; o < rlen[i] && rc == MPI_SUCCESS; o += TJ__MPI_CHUNK) {
            size_t c = rlen[i] - o < TJ__MPI_CHUNK ? rlen[i] - o : TJ__MPI_CHUNK;
            rc = MPI_Irecv((char *)rbuf[i] + o, (int)c, MPI_BYTE, peer[i], tag, mw->comm, &rq[nr++]);
        }
    for (i = 0; i < n && rc == MPI_SUCCESS; i++)
        for (o = 0; o < slen[i] && rc == MPI_SUCCESS; o += TJ__MPI_CHUNK) {
            size_t c = slen[i] - o < TJ__MPI_CHUNK ? slen[i] - o : TJ__MPI_CHUNK;
            rc = MPI_Isend((char *)sbuf[i] + o, (int)c, MPI_BYTE, peer[i], tag, mw->comm, &rq[nr++]);
        }
    pthread_mutex_unlock(&mw->mu);
    if (rc != MPI_SUCCESS) {
        TJ_FREE(rq);
        return tj__mpi_fail(rc, "send/receive", err, en);
    }
    rc = tj__mpi_wait(mw, nr, rq, timeout_s, "send/receive between processes", err, en);
    TJ_FREE(rq);
    return rc;
}
static int tj__mpi_allgather(tj__wire *w, const void *send, void *recv, size_t bytes, double timeout_s, char *err, size_t en) {
    tj__mpiw *mw = (tj__mpiw *)w;
    MPI_Request rq;
    int rc;
    if (bytes > (size_t)0x7fffffff) {
        snprintf(err, en, "MPI allgather of %zu B per process is too large", bytes);
        return 1;
    }
    pthread_mutex_lock(&mw->mu);
    rc = MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, mw->comm, &rq);
    pthread_mutex_unlock(&mw->mu);
    if (rc != MPI_SUCCESS) return tj__mpi_fail(rc, "allgather", err, en);
    return tj__mpi_wait(mw, 1, &rq, timeout_s, "allgather between processes", err, en);
}
static void tj__mpi_wire_free(tj__wire *w) {
    tj__mpiw *mw = (tj__mpiw *)w;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&mw->comm);
    pthread_mutex_destroy(&mw->mu);
    TJ_FREE(mw);
}
static tj_transport *tj__mpi_t;  /* one per process, shared by contexts */
static int tj__mpi_ours;         /* tinyjax called MPI_Init_thread        */
static tj_transport *tj__mpi_transport(double timeout_s, char *err, size_t en) {
    int inited = 0, prov = 0, size = 0, rank = 0, flag = 0, rc, ub = 32767;
    void *v = NULL;
    tj__mpiw *mw;
    if (tj__mpi_t) return tj__mpi_t;
    MPI_Initialized(&inited);
    if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &prov);
        if (rc != MPI_SUCCESS) {
            tj__mpi_fail(rc, "init", err, en);
            return NULL;
        }
        tj__mpi_ours = 1;
        atexit(tj_distributed_shutdown); /* MPI_Finalize at exit, unless called earlier */
    } else
        MPI_Query_thread(&prov);
    if (prov < MPI_THREAD_SERIALIZED) {
        snprintf(err, en, "MPI provides thread level %d; tinyjax needs MPI_THREAD_SERIALIZED (its device threads take turns in MPI)", prov);
        return NULL;
    }
    mw = (tj__mpiw *)tj__calloc(sizeof *mw);
    if (!mw) {
        snprintf(err, en, "out of memory");
        return NULL;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &mw->comm);
    MPI_Comm_set_errhandler(mw->comm, MPI_ERRORS_RETURN);
    MPI_Comm_size(mw->comm, &size);
    MPI_Comm_rank(mw->comm, &rank);
    MPI_Comm_get_attr(mw->comm, MPI_TAG_UB, &v, &flag);
    if (flag && v) ub = *(int *)v;
    pthread_mutex_init(&mw->mu, NULL);
    mw->w.exchange = tj__mpi_exchange;
    mw->w.allgather = tj__mpi_allgather;
    mw->w.free = tj__mpi_wire_free;
    tj__mpi_t = tj__ct_new("mpi", size, rank, &mw->w, ub, timeout_s);
    if (!tj__mpi_t) {
        tj__mpi_wire_free(&mw->w);
        snprintf(err, en, "out of memory");
    }
    return tj__mpi_t;
}
#endif

/* ---- process mode ---- */
/* The launcher stopped this process (typically: a peer died and mpirun
   ends the job): say which collective each device was in, then die of the
   same signal. Only async-signal-safe calls. */
static void tj__on_signal(int sig) {
    char b[400];
    int d, k, said = 0;
    for (d = 0; d < TJ_MAXDEV; d++)
        if (tj__where[d][0]) {
            k = snprintf(b, sizeof b, "tinyjax: process %d stopped by signal %d while device %d %s %s\n", tj__where_rank, sig, d,
                         tj__inside[d] ? "waited in" : "computed after", tj__where[d]);
            if (k > 0 && write(2, b, (size_t)(k < (int)sizeof b ? k : (int)sizeof b - 1)) < 0) break;
            said = 1;
        }
    if (!said) {
        k = snprintf(b, sizeof b, "tinyjax: process %d stopped by signal %d before any collective\n", tj__where_rank, sig);
        if (k > 0 && write(2, b, (size_t)(k < (int)sizeof b ? k : (int)sizeof b - 1)) < 0) k = 0;
    }
    sleep(1); /* let the launcher forward the message before this process is gone */
    signal(sig, SIG_DFL);
    raise(sig);
}
TJDEF tj_status tj_distributed_init(tj_ctx *c, const tj_distributed_opts *o) {
    const char *e;
    int np = 0, rank = 0;
    double timeout;
    tj_transport *t = o ? o->transport : NULL;
    struct tj__procs *P;
    char err[512];
    if (!c) return TJ_ERR_ARG;
    if (o && (o->nprocs < 0 || (o->nprocs == 0 && o->rank != 0) || !(o->timeout_s >= 0 && o->timeout_s < INFINITY))) { /* 0, 0, 0: from the environment */
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_distributed_init: opts say process %d of %d, timeout %g s (want 0 <= rank < nprocs, or both 0 for the launcher's; "
                "a timeout > 0, or 0 for TJ_TIMEOUT / 300)", o->rank, o->nprocs, o->timeout_s);
        return TJ_ERR_ARG;
    }
    if (o && o->nprocs > 0) {
        np = o->nprocs;
        rank = o->rank;
    } else if ((e = getenv("OMPI_COMM_WORLD_SIZE")) || (e = getenv("PMI_SIZE")) || (e = getenv("TJ_NPROCS"))) {
        const char *r = getenv("OMPI_COMM_WORLD_RANK");
        if (!r) r = getenv("PMI_RANK");
        if (!r) r = getenv("TJ_RANK");
        np = atoi(e);
        rank = r ? atoi(r) : -1;
    }
    if (t) {
        if (o->nprocs > 0 && (o->nprocs != t->nprocs || o->rank != t->rank)) {
            tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_distributed_init: opts say process %d of %d, the transport '%s' says %d of %d", o->rank, o->nprocs,
                    t->name ? t->name : "?", t->rank, t->nprocs);
            return TJ_ERR_ARG;
        }
        np = t->nprocs;
        rank = t->rank;
    }
    timeout = o && o->timeout_s > 0 ? o->timeout_s : 300.0;
    e = getenv("TJ_TIMEOUT");
    if (e && *e && !(o && o->timeout_s > 0)) { /* a typo is an error, not 300 s */
        char *end;
        double v = strtod(e, &end);
        if (end == e || *end || !(v > 0 && v < INFINITY)) {
            tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_distributed_init: environment variable TJ_TIMEOUT=\"%.32s\" is not a number of seconds > 0", e);
            return TJ_ERR_ARG;
        }
        timeout = v;
    }
    if (np <= 1 && !t) { /* one process: the threads transport */
        if (!(P = tj__procs_get(c))) return TJ_ERR_OOM;
        P->timeout_s = P->t->timeout_s = timeout;
        return TJ_OK;
    }
    if (rank < 0 || rank >= np || np > TJ_MAXDEV) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_distributed_init: process %d of %d (want 0 <= rank < processes <= %d)", rank, np, TJ_MAXDEV);
        return TJ_ERR_ARG;
    }
    if (c->procs && c->procs->nprocs > 1) {
        tj__err(c, TJ_ERR_STATE, NULL, 0, "tj_distributed_init: this context is already in process mode");
        return TJ_ERR_STATE;
    }
    if (!t) {
#if defined(TJ_MPI)
        if (!(t = tj__mpi_transport(timeout, err, sizeof err))) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "tj_distributed_init: %s", err);
            return TJ_ERR_IO;
        }
        t->timeout_s = timeout;
#else
        (void)err;
        tj__err(c, TJ_ERR_UNSUPPORTED, NULL, 0,
                "tj_distributed_init: launched as process %d of %d, but tinyjax was built without MPI: compile with mpicc -DTJ_MPI, or give "
                "tj_distributed_opts.transport",
                rank, np);
        return TJ_ERR_UNSUPPORTED;
#endif
    }
    if (t->nprocs != np || t->rank != rank) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_distributed_init: the launcher says process %d of %d, the transport '%s' says %d of %d", rank, np, t->name, t->rank,
                t->nprocs);
        return TJ_ERR_ARG;
    }
    if (!(c->ndev == 1 && !getenv("TJ_DEVICES")) && c->ndev % np) { /* checked before the context changes */
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_distributed_init: %d devices cannot be shared by %d processes (each process owns devices / processes of them)",
                c->ndev, np);
        return TJ_ERR_ARG;
    }
    tj__procs_free(c);
    P = (struct tj__procs *)tj__calloc(sizeof *P);
    if (!P) return TJ_ERR_OOM;
    P->t = t;
    P->nprocs = np;
    P->rank = rank;
    P->timeout_s = timeout;
    c->procs = P;
    if (c->ndev == 1 && !getenv("TJ_DEVICES")) { /* one device per process */
        c->ndev = np;
        c->nmesh = 0;
        c->mesh_gen++;
    }
    if (tj__procs_devices(c)) return c->status;
    if (tj__where_rank < 0 && np > 1) {
        void (*old)(int) = signal(SIGTERM, tj__on_signal);
        tj__where_rank = rank;
        if (old != SIG_DFL && old != SIG_ERR) signal(SIGTERM, old); /* the program has a handler of its own */
    }
    return TJ_OK;
}
TJDEF void tj_distributed_shutdown(void) {
#if defined(TJ_MPI)
    int fin = 0;
    if (!tj__mpi_t) return;
    MPI_Finalized(&fin);
    if (fin) return;
    if (((tj__ct *)tj__mpi_t->state)->broken[0]) {
        fprintf(stderr, "tinyjax: process %d: the transport broke (%s); aborting the job\n", tj__mpi_t->rank, ((tj__ct *)tj__mpi_t->state)->broken);
        sleep(1); /* peers that timed out too get to say so before the job ends */
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    tj__mpi_t = NULL; /* contexts may still point at it: its memory stays */
    if (tj__mpi_ours) MPI_Finalize();
#endif
}

/* ---- arrays across processes ---- */
/* shard id of device d for type t: its ranks along each split axis */
static int tj__shard_id(const tj_ctx *c, const tj__type *t, int d) {
    int i, id = 0;
    for (i = 0; i < t->rank; i++)
        if (t->sh[i]) id = id * tj__mesh_count(c, t->sh[i]) + tj__mesh_rank(c, d, t->sh[i]);
    return id;
}
static int tj__nshards(const tj_ctx *c, const tj__type *t) {
    int i, n = 1;
    for (i = 0; i < t->rank; i++)
        if (t->sh[i]) n *= tj__mesh_count(c, t->sh[i]);
    return n;
}
/* does some process lack some shard (every process can tell) */
static int tj__spans(const tj_ctx *c, const tj__type *t) {
    const struct tj__procs *P = c->procs;
    int q, d, per, ns;
    if (!P || P->nprocs <= 1) return 0;
    per = c->ndev / P->nprocs;
    ns = tj__nshards(c, t);
    for (q = 0; q < P->nprocs; q++) {
        unsigned char have[TJ_MAXDEV];
        int k = 0;
        memset(have, 0, sizeof have);
        for (d = q * per; d < (q + 1) * per; d++) {
            int s = tj__shard_id(c, t, d);
            if (!have[s]) k++;
            have[s] = 1;
        }
        if (k < ns) return 1;
    }
    return 0;
}
TJDEF int tj_array_spans_processes(const tj_array *a) { return a ? tj__spans(a->ctx, &a->t) : 0; }
/* one local device's shard into host memory (a copy only for backends) */
static const void *tj__shard_host(tj_array *a, int d, void *tmp) {
    if (!a->ctx->backend) return a->data[d];
    if (tj__mem_copy(a->ctx, tmp, TJ_SPACE_USER, a->data[d], TJ_SPACE_DEVICE, a->local_bytes)) return NULL;
    return tmp;
}
TJDEF tj_status tj_array_read_all(tj_array *a, tj_dtype dt, void *dst) {
    tj_ctx *c;
    struct tj__procs *P;
    int per, ns, d, q, s, owner[TJ_MAXDEV], cnt[TJ_MAXDEV], maxc = 0;
    char *send = NULL, *recv = NULL, err[512];
    size_t lb;
    tj__type gt, lt;
    tj_status st = TJ_OK;
    if (!a) return TJ_ERR_ARG;
    c = a->ctx;
    if (!dst) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_array_read_all: argument dst is NULL");
        return TJ_ERR_ARG;
    }
    if (!tj__spans(c, &a->t)) return tj_array_read(a, dt, dst);
    if (!tj__array_live(a, "tj_array_read_all", NULL, 0)) return TJ_ERR_STATE;
    if ((unsigned)dt >= TJ_NDTYPE) {
        tj__err(c, TJ_ERR_DTYPE, NULL, 0, "tj_array_read_all: bad dtype %d", (int)dt);
        return TJ_ERR_DTYPE;
    }
    P = c->procs;
    per = c->ndev / P->nprocs;
    ns = tj__nshards(c, &a->t);
    lb = (size_t)a->local_bytes;
    /* each shard comes from the lowest device that holds it */
    for (s = 0; s < ns; s++) owner[s] = -1;
    memset(cnt, 0, sizeof cnt);
    for (d = 0; d < c->ndev; d++) {
        s = tj__shard_id(c, &a->t, d);
        if (owner[s] < 0) {
            owner[s] = d;
            cnt[d / per]++;
        }
    }
    for (q = 0; q < P->nprocs; q++) maxc = cnt[q] > maxc ? cnt[q] : maxc;
    send = (char *)tj__calloc(lb * (size_t)maxc + 1);
    recv = (char *)tj__malloc(lb * (size_t)maxc * (size_t)P->nprocs + 1);
    if (!send || !recv) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "tj_array_read_all: out of memory");
        st = TJ_ERR_OOM;
    }
    for (s = 0, q = 0; st == TJ_OK && s < ns; s++) /* this process's shards, in device order */
        if (owner[s] / per == P->rank) {
            const void *h = tj__shard_host(a, owner[s], send + (size_t)q * lb);
            if (!h) st = TJ_ERR_IO;
            else if (h != send + (size_t)q * lb) memcpy(send + (size_t)q * lb, h, lb);
            q++;
        }
    if (st == TJ_OK && P->t->proc_allgather(P->t, send, recv, lb * (size_t)maxc, err, sizeof err)) {
        tj__err(c, TJ_ERR_IO, NULL, 0, "tj_array_read_all: %s", err);
        st = TJ_ERR_IO;
    }
    if (st == TJ_OK) {
        int idx[TJ_MAXDEV];
        memset(idx, 0, sizeof idx);
        gt = a->t;
        memset(gt.sh, 0, sizeof gt.sh);
        gt.dt = dt;
        lt = tj__local(c, &a->t);
        for (s = 0; s < ns; s++) {
            int o = owner[s], p = o / per;
            tj__copy_region(recv + ((size_t)p * (size_t)maxc + (size_t)idx[p]++) * lb, &lt, 0, dst, &gt, tj__shard_base(c, &a->t, o), lt.dim, 1);
        }
    }
    TJ_FREE(send);
    TJ_FREE(recv);
    return st;
}
/* Process-local blocks, as JAX's make_array_from_process_local_data lays
   them out. Along each axis a device holds one global block: its rank
   along the axis's mesh axes in the order the spec gave them (the first
   most major: "batch:model+data" on data=2 model=2 puts block m*2+d on the
   device data=d model=m). A process's block is, per axis, the sorted
   distinct blocks its devices hold, concatenated: a grid of global blocks
   (not always a box of the array: blocks 0 and 2 of "batch:model+data"
   for the process of the devices data=0). The shards themselves are in
   mesh order ([4]: block d*2+m on that device), so where a spec lists
   mesh axes out of mesh order a process's block may hold data that other
   processes' devices keep; then the data moves through the transport. */
typedef struct {
    int lo, hi;                           /* the process's devices [lo, hi) */
    int64_t size[TJ_MAXDIM];              /* its block's shape              */
    signed char at[TJ_MAXDIM][TJ_MAXDEV]; /* global block b of axis i -> its
                                             place in the process's block;
                                             -1: not there                 */
} tj__pgrid;
/* JAX's block of device d along axis i of a (the spec's order) */
static int tj__jblock(const tj_array *a, int i, int d) {
    int ord[TJ__MAXMESH], n = tj__arr_order(a, i, ord), k, r = 0;
    for (k = 0; k < n; k++) r = r * a->ctx->mesh_size[ord[k]] + tj__mesh_coord(a->ctx, d, ord[k]);
    return r;
}
static int tj__nprocs_of(const tj_ctx *c) { return c->procs && c->procs->nprocs > 1 ? c->procs->nprocs : 1; }
/* process q's grid of a */
static void tj__proc_grid(const tj_array *a, int q, tj__pgrid *g) {
    tj_ctx *c = a->ctx;
    tj__type lt = tj__local(c, &a->t);
    int per = c->ndev / tj__nprocs_of(c), i, d, b, k;
    g->lo = q * per;
    g->hi = g->lo + per;
    memset(g->at, -1, sizeof g->at);
    for (i = 0; i < a->t.rank; i++) {
        for (d = g->lo; d < g->hi; d++) g->at[i][tj__jblock(a, i, d)] = 0;
        for (b = 0, k = 0; b < TJ_MAXDEV; b++)
            if (g->at[i][b] >= 0) g->at[i][b] = (signed char)k++; /* (sorted) */
        g->size[i] = (int64_t)k * lt.dim[i];
    }
}
/* does a device of process grid g hold global block blk (one per axis) in
   JAX's layout (jax) or in a's shards (else) */
static int tj__grid_holds(const tj_array *a, const tj__pgrid *g, const int *blk, int jax) {
    int d, i, ok;
    for (d = g->lo; d < g->hi; d++) {
        for (i = 0, ok = 1; ok && i < a->t.rank; i++) ok = (jax ? tj__jblock(a, i, d) : a->t.sh[i] ? tj__mesh_rank(a->ctx, d, a->t.sh[i]) : 0) == blk[i];
        if (ok) return 1;
    }
    return 0;
}
/* global block blk's element offset inside grid g's block (row-major, type bt) */
static int64_t tj__grid_base(const tj_array *a, const tj__pgrid *g, const int *blk) {
    tj__type lt = tj__local(a->ctx, &a->t);
    int64_t base = 0;
    int i;
    for (i = 0; i < a->t.rank; i++) base = base * g->size[i] + g->at[i][blk[i]] * lt.dim[i];
    return base;
}
/* the type of grid g's block: a's axes at g's sizes, unsharded, dtype dt */
static tj__type tj__grid_type(const tj_array *a, const tj__pgrid *g, tj_dtype dt) {
    tj__type bt = a->t;
    int i;
    bt.dt = dt;
    memset(bt.sh, 0, sizeof bt.sh);
    for (i = 0; i < a->t.rank; i++) bt.dim[i] = g->size[i];
    return bt;
}
/* device d's block of a's shards (mesh order), one per axis */
static void tj__shard_blk(const tj_array *a, int d, int *blk) {
    int i;
    for (i = 0; i < a->t.rank; i++) blk[i] = a->t.sh[i] ? tj__mesh_rank(a->ctx, d, a->t.sh[i]) : 0;
}
/* every process's grid (NULL and an error when out of memory) */
static tj__pgrid *tj__all_grids(const tj_array *a, const char *what) {
    int q, P = tj__nprocs_of(a->ctx);
    tj__pgrid *g = (tj__pgrid *)tj__malloc(sizeof *g * (size_t)P);
    if (!g) {
        tj__err(a->ctx, TJ_ERR_OOM, NULL, 0, "%s: out of memory", what);
        return NULL;
    }
    for (q = 0; q < P; q++) tj__proc_grid(a, q, &g[q]);
    return g;
}
TJDEF const char *tj_array_local_shape(const tj_array *a, char *buf, size_t n) {
    tj__pgrid g;
    int i;
    size_t k = 0;
    if (!buf || !n) return buf;
    buf[0] = 0;
    if (!a) return buf;
    tj__proc_grid(a, tj_process_index(a->ctx), &g);
    for (i = 0; i < a->t.rank; i++) {
        snprintf(buf + k, n - k, "%s%s=%lld", i ? " " : "", tj__name(a->ctx, a->t.ax[i]), (long long)g.size[i]);
        k = strlen(buf);
    }
    return buf;
}
/* one local device's shard <-> host memory (through tmp with a backend) */
static tj_status tj__shard_put(tj_array *a, int d, const void *src, const tj__type *st, int64_t sbase, void *tmp) {
    tj__type lt = tj__local(a->ctx, &a->t);
    tj__copy_region(src, st, sbase, tmp ? tmp : a->data[d], &lt, 0, lt.dim, 1);
    if (tmp && tj__mem_copy(a->ctx, a->data[d], TJ_SPACE_DEVICE, tmp, TJ_SPACE_USER, a->local_bytes)) {
        tj__err(a->ctx, TJ_ERR_IO, NULL, 0, "copying an array to device %d failed", d);
        return TJ_ERR_IO;
    }
    return TJ_OK;
}
/* Blocks between processes. Block k is the row-major index of a global
   block (one per axis; at most TJ_MAXDEV of them, the mesh axes of the
   axes being distinct). A process "has" a block in JAX's layout (how 1:
   one of its devices holds it there, the block it was given), in a's
   shards (0), or in its grid (2); each block that some process wants and
   has not comes from the lowest process that has it. Every process makes
   the same plan; each sends the blocks it is the source of, in block
   order, padded to the most any process sends (one all-gather of just
   those blocks, none when no block moves). */
typedef struct {
    int nblk, maxc;      /* blocks; the most blocks one process sends     */
    int src[TJ_MAXDEV];  /* block k's source process (-1: nobody needs it) */
    int slot[TJ_MAXDEV]; /* its place among its source's blocks           */
} tj__xplan;
static void tj__blk_of(const tj_array *a, int k, int *blk) {
    int i;
    for (i = a->t.rank - 1; i >= 0; i--) {
        int n = a->t.sh[i] ? tj__mesh_count(a->ctx, a->t.sh[i]) : 1;
        blk[i] = k % n;
        k /= n;
    }
}
static int tj__proc_has(const tj_array *a, const tj__pgrid *g, const int *blk, int how) {
    int i;
    if (how < 2) return tj__grid_holds(a, g, blk, how);
    for (i = 0; i < a->t.rank; i++)
        if (g->at[i][blk[i]] < 0) return 0;
    return 1;
}
static void tj__xplan_make(const tj_array *a, const tj__pgrid *g, int has, int want, tj__xplan *x) {
    int P = tj__nprocs_of(a->ctx), q, k, i, blk[TJ_MAXDIM], cnt[TJ_MAXDEV];
    for (i = 0, x->nblk = 1; i < a->t.rank; i++) x->nblk *= a->t.sh[i] ? tj__mesh_count(a->ctx, a->t.sh[i]) : 1;
    memset(cnt, 0, sizeof cnt);
    x->maxc = 0;
    for (k = 0; k < x->nblk; k++) {
        int needed = 0;
        x->src[k] = x->slot[k] = -1;
        tj__blk_of(a, k, blk);
        for (q = 0; q < P && !needed; q++) needed = tj__proc_has(a, &g[q], blk, want) && !tj__proc_has(a, &g[q], blk, has);
        for (q = 0; needed && q < P; q++)
            if (tj__proc_has(a, &g[q], blk, has)) {
                x->src[k] = q;
                x->slot[k] = cnt[q]++;
                x->maxc = cnt[q] > x->maxc ? cnt[q] : x->maxc;
                break;
            }
    }
}
/* the all-gather of the plan's blocks (lb bytes each; send holds this
   process's, packed by the caller); recv gets every process's */
static tj_status tj__xplan_move(tj_ctx *c, const tj__xplan *x, const void *send, void *recv, size_t lb, const char *what, const char *f, int l) {
    char err[512];
    if (!x->maxc) return TJ_OK;
    if (c->procs->t->proc_allgather(c->procs->t, send, recv, lb * (size_t)x->maxc, err, sizeof err)) {
        tj__err(c, TJ_ERR_IO, f, l, "%s: moving blocks between processes: %s", what, err);
        return TJ_ERR_IO;
    }
    return TJ_OK;
}
TJDEF tj_status tj_array_read_local(tj_array *a, tj_dtype dt, void *dst) {
    tj_ctx *c;
    tj__pgrid *g;
    tj__xplan x;
    tj__type bt, lt;
    char *send = NULL, *recv = NULL, *tmp = NULL;
    size_t lb;
    int d, k, me, blk[TJ_MAXDIM];
    tj_status st = TJ_OK;
    if (!a) return TJ_ERR_ARG;
    c = a->ctx;
    if (!dst) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_array_read_local: argument dst is NULL");
        return TJ_ERR_ARG;
    }
    if (!tj__array_live(a, "tj_array_read_local", NULL, 0)) return TJ_ERR_STATE;
    if ((unsigned)dt >= TJ_NDTYPE) {
        tj__err(c, TJ_ERR_DTYPE, NULL, 0, "tj_array_read_local: bad dtype %d", (int)dt);
        return TJ_ERR_DTYPE;
    }
    if (!(g = tj__all_grids(a, "tj_array_read_local"))) return TJ_ERR_OOM;
    me = tj_process_index(c);
    tj__xplan_make(a, g, 0, 2, &x); /* the grid's cells from the shards */
    bt = tj__grid_type(a, &g[me], dt);
    lt = tj__local(c, &a->t);
    lb = (size_t)a->local_bytes;
    send = (char *)tj__malloc(lb * (size_t)x.maxc + 1);
    recv = (char *)tj__malloc(lb * (size_t)x.maxc * (size_t)tj__nprocs_of(c) + 1);
    tmp = (char *)tj__malloc(lb + 1);
    if (!send || !recv || !tmp) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "tj_array_read_local: out of memory");
        st = TJ_ERR_OOM;
    }
    for (d = g[me].lo; st == TJ_OK && d < g[me].hi; d++) { /* each local shard: to the grid, and out when this process sends it */
        const void *h;
        int in = 1, i;
        tj__shard_blk(a, d, blk);
        for (i = 0, k = 0; i < a->t.rank; i++) {
            in &= g[me].at[i][blk[i]] >= 0;
            k = k * (a->t.sh[i] ? tj__mesh_count(c, a->t.sh[i]) : 1) + blk[i];
        }
        if (!in && x.src[k] != me) continue;
        if (!a->data[d] || !(h = tj__shard_host(a, d, tmp))) {
            st = TJ_ERR_IO;
            break;
        }
        if (in) tj__copy_region(h, &lt, 0, dst, &bt, tj__grid_base(a, &g[me], blk), lt.dim, 1);
        if (x.src[k] == me) memcpy(send + lb * (size_t)x.slot[k], h, lb);
    }
    /* (every process takes part in the move, even after a local failure: the others wait in it) */
    if (send && recv && tj__xplan_move(c, &x, send, recv, lb, "tj_array_read_local", NULL, 0) && st == TJ_OK) st = TJ_ERR_IO;
    for (k = 0; st == TJ_OK && k < x.nblk; k++) { /* the grid's cells this process's shards lack */
        tj__blk_of(a, k, blk);
        if (x.src[k] < 0 || x.src[k] == me || !tj__proc_has(a, &g[me], blk, 2) || tj__proc_has(a, &g[me], blk, 0)) continue;
        tj__copy_region(recv + lb * (size_t)(x.src[k] * x.maxc + x.slot[k]), &lt, 0, dst, &bt, tj__grid_base(a, &g[me], blk), lt.dim, 1);
    }
    TJ_FREE(send);
    TJ_FREE(recv);
    TJ_FREE(tmp);
    TJ_FREE(g);
    return st;
}
TJDEF tj_array *tj_array_from_local_at(const char *file, int line, tj_ctx *c, tj_dtype dt, const char *shape, const char *spec, const void *data) {
    tj__type t, bt, lt;
    tj_array *a;
    tj__pgrid *g = NULL;
    tj__xplan x;
    unsigned char ord[TJ_MAXDIM][TJ__MAXMESH];
    void *zeros = NULL, *tmp = NULL;
    char *send = NULL, *recv = NULL;
    size_t lb;
    int d, k, me, blk[TJ_MAXDIM];
    tj_status st = TJ_OK;
    if (!c) return NULL;
    if (tj__parse_shape(c, shape, dt, &t, 0, "tj_array_from_local", file, line)) return NULL;
    if (tj__parse_spec_ord(c, spec, &t, t.sh, ord, 1, "tj_array_from_local", file, line)) return NULL;
    if (!(a = tj__array_alloc(c, &t, file, line))) return NULL;
    tj__arr_set_order(a, ord);
    me = tj_process_index(c);
    if (!(g = tj__all_grids(a, "tj_array_from_local"))) goto fail;
    tj__xplan_make(a, g, 1, 0, &x); /* the shards from the blocks the processes gave */
    bt = tj__grid_type(a, &g[me], dt);
    lt = tj__local(c, &a->t);
    lb = (size_t)a->local_bytes;
    if (!data) data = zeros = tj__calloc((size_t)tj__bytes(&bt) + 1); /* NULL: zeros */
    send = (char *)tj__malloc(lb * (size_t)x.maxc + 1);
    recv = (char *)tj__malloc(lb * (size_t)x.maxc * (size_t)tj__nprocs_of(c) + 1);
    if (c->backend) tmp = tj__malloc(lb + 1);
    if (!data || !send || !recv || (c->backend && !tmp)) {
        tj__err(c, TJ_ERR_OOM, file, line, "tj_array_from_local: out of memory");
        st = TJ_ERR_OOM;
    }
    for (k = 0; st == TJ_OK && k < x.nblk; k++) /* the blocks this process sends */
        if (x.src[k] == me) {
            tj__blk_of(a, k, blk);
            tj__copy_region(data, &bt, tj__grid_base(a, &g[me], blk), send + lb * (size_t)x.slot[k], &lt, 0, lt.dim, 1);
        }
    /* (every process takes part in the move, even after a local failure: the others wait in it) */
    if (send && recv && tj__xplan_move(c, &x, send, recv, lb, "tj_array_from_local", file, line) && st == TJ_OK) st = TJ_ERR_IO;
    for (d = g[me].lo; st == TJ_OK && d < g[me].hi; d++) { /* each local shard: from this process's block, else from its source's */
        tj__shard_blk(a, d, blk);
        if (tj__proc_has(a, &g[me], blk, 1)) st = tj__shard_put(a, d, data, &bt, tj__grid_base(a, &g[me], blk), tmp);
        else {
            int i;
            for (i = 0, k = 0; i < a->t.rank; i++) k = k * (a->t.sh[i] ? tj__mesh_count(c, a->t.sh[i]) : 1) + blk[i];
            st = tj__shard_put(a, d, recv + lb * (size_t)(x.src[k] * x.maxc + x.slot[k]), &lt, 0, tmp);
        }
    }
    if (st != TJ_OK) goto fail;
    TJ_FREE(zeros);
    TJ_FREE(tmp);
    TJ_FREE(send);
    TJ_FREE(recv);
    TJ_FREE(g);
    return a;
fail:
    TJ_FREE(zeros);
    TJ_FREE(tmp);
    TJ_FREE(send);
    TJ_FREE(recv);
    TJ_FREE(g);
    tj_array_free(a);
    return NULL;
}

/* tj_tree_save / tj_tree_load in process mode: the call itself (save reads
   arrays with tj_array_read_all and writes from process 0), then every
   process returns the first failure of any. save < 0: are we inside. A
   load that fails in one process only leaves the file's leaves in the
   others' trees, and they return the error too. */
static tj_status tj__procs_tree_io(const tj_tree *t, const char *path, int save) {
    tj_ctx *c = t->ctx;
    struct tj__procs *P = c->procs;
    tj_status st, g;
    char out[TJ__MSG];
    const char *fn = save ? "tj_tree_save" : "tj_tree_load";
    if (save < 0) return P && P->in_tree_io ? TJ_ERR_STATE : TJ_OK;
    P->in_tree_io = 1;
    st = save ? tj_tree_save(t, path) : tj_tree_load((tj_tree *)t, path);
    P->in_tree_io = 0;
    if (tj__agree(c, st, -1, 0, c->msg, &g, out, sizeof out, NULL)) {
        if (st == TJ_OK) tj__err(c, TJ_ERR_IO, NULL, 0, "%s: %s: %s", fn, path, out);
        return st == TJ_OK ? TJ_ERR_IO : st;
    }
    if (g != TJ_OK && st == TJ_OK) {
        tj__err(c, g, NULL, 0, "%s: %s: %s", fn, path, out);
        st = g;
    }
    return st;
}

/* ---- collective kernels: pack -> transport -> unpack ---- */
/* Blocks along axis ax of t are contiguous and in order when every axis
   before ax has size 1: then the transport reads or writes the buffer
   itself and there is nothing to pack. */
static int tj__outer(const tj__type *t, int ax) {
    int i;
    for (i = 0; i < ax; i++)
        if (t->dim[i] != 1) return 0;
    return 1;
}
static int64_t tj__coll_scratch(const tj_node *n) {
    tj_ctx *c = n->g->ctx;
    tj__type it = tj__local(c, &n->in[0]->t), ot = tj__local(c, &n->t);
    int64_t s = 0;
    switch (n->op) {
    case TJ__OP_ALL_GATHER:
        if (!tj__outer(&ot, tj__axis_index(&ot, n->a.axis))) s = tj__align(tj__bytes(&ot));
        break;
    case TJ__OP_REDUCE_SCATTER:
        if (!tj__outer(&it, tj__axis_index(&it, n->a.axis))) s = tj__align(tj__bytes(&it));
        break;
    case TJ__OP_ALL_TO_ALL:
        if (!tj__outer(&it, tj__axis_index(&it, n->a.axis))) s += tj__align(tj__bytes(&it));
        if (!tj__outer(&ot, tj__axis_index(&ot, n->a.axis2))) s += tj__align(tj__bytes(&ot));
        break;
    default: break;
    }
    return s;
}
/* call the transport for node k->n; on failure write k->err (unless an
   earlier error is there) naming the collective and its cause. The hook
   for a GPU backend's collective launchers (tinyjax_cuda.cu): `over`, when
   not NULL, is called instead of the context's transport with the context's
   group handles (the backend's transport on device buffers, which meets in
   the threads transport's groups), and `stream` is passed on (the device's
   compute stream; NULL on the CPU). */
static int tj__coll_call_reg(tj__kern *k, tj_transport *over, void *stream, int kind, const void *send, void *recv, size_t bytes, size_t count, int to,
                             int from, const tj__ct_region *reg);
static int tj__coll_call_on(tj__kern *k, tj_transport *over, void *stream, int kind, const void *send, void *recv, size_t bytes, size_t count, int to,
                            int from) {
    return tj__coll_call_reg(k, over, stream, kind, send, recv, bytes, count, to, from, NULL);
}
/* the same; reg (a collective on views on the threads transport,
   tj__on_views): no contiguous copy */
static int tj__coll_call_reg(tj__kern *k, tj_transport *over, void *stream, int kind, const void *send, void *recv, size_t bytes, size_t count, int to,
                             int from, const tj__ct_region *reg) {
    tj_ctx *c = k->ctx;
    tj_node *n = k->n;
    struct tj__procs *P = c->procs;
    tj_transport *t = over ? over : P ? P->t : NULL;
    unsigned m = n->a.mesh;
    void *comm = tj__group_find(c, m, k->dev);
    char e[600], mb[64];
    int rc, G = tj__mesh_count(c, m);
    double t0 = tj__now_us();
    tj_reduce_op op = n->op == TJ__OP_PMAX ? TJ_REDUCE_MAX : TJ_REDUCE_SUM;
    mb[0] = 0;
    if (!comm || P->nprocs > 1) tj__mesh_names(c, m, mb, sizeof mb);
    if (!comm) {
        snprintf(e, sizeof e, "no device group for mesh axes %s (was the program compiled under another mesh?)", mb);
        rc = 1;
    } else {
        if (P->nprocs > 1) {
            tj__inside[k->dev] = 0;
            snprintf(tj__where[k->dev], sizeof tj__where[0], "%s over %s (caused by %s at %s:%d)", tj__ops[n->op].name, mb, n->name ? n->name : "?",
                     tj__base(n->file), n->line);
            tj__inside[k->dev] = 1;
        }
        switch (kind) {
        case TJ__AG:
            rc = reg ? tj__ct_coll(t, comm, TJ__AG, send, recv, bytes, 0, TJ_F32, 0, -1, -1, e, sizeof e, reg)
                     : t->all_gather(t, comm, send, recv, bytes, stream, e, sizeof e);
            break;
        case TJ__AR: rc = t->all_reduce(t, comm, send, recv, count, k->ot.dt, op, stream, e, sizeof e); break;
        case TJ__RS:
            rc = reg ? tj__ct_coll(t, comm, TJ__RS, send, recv, count * tj_dtype_size(k->ot.dt), count, k->ot.dt, (int)op, -1, -1, e, sizeof e, reg)
                     : t->reduce_scatter(t, comm, send, recv, count, k->ot.dt, op, stream, e, sizeof e);
            break;
        case TJ__A2A: rc = t->all_to_all(t, comm, send, recv, bytes, stream, e, sizeof e); break;
        default: rc = t->send_recv(t, comm, send, to, recv, from, bytes, stream, e, sizeof e); break;
        }
        tj__inside[k->dev] = 0; /* tj__where keeps the last one */
        P->us[k->dev] += tj__now_us() - t0;
        P->ncoll[k->dev]++;
        P->sent[k->dev] += kind == TJ__PERM ? (to >= 0 && to != tj__mesh_rank(c, k->dev, m) ? (int64_t)bytes : 0) : (int64_t)bytes * (G - 1);
    }
    if (rc && !k->err[0]) {
        if (!mb[0]) tj__mesh_names(c, m, mb, sizeof mb);
        snprintf(k->err, TJ__MSG, "%s over %s (caused by %s at %s:%d) on device %d: %s", tj__ops[n->op].name, mb, n->name ? n->name : "?", tj__base(n->file), n->line,
                 k->dev, e);
    }
    return rc;
}
static int tj__coll_call(tj__kern *k, int kind, const void *send, void *recv, size_t bytes, size_t count, int to, int from) {
    return tj__coll_call_on(k, NULL, NULL, kind, send, recv, bytes, count, to, from);
}
/* can this CPU collective work on views (tj__ct_region): the threads
   transport (every CPU run, simulated devices and process mode alike);
   a reduce_scatter also needs f32 and one process (the wire packs
   contiguous blocks) */
static int tj__on_views(const tj__kern *k, int kind) {
    struct tj__procs *P = k->ctx->procs;
    if (!P || !P->t || P->t->all_gather != tj__ct_all_gather) return 0;
    return kind == TJ__AG || (k->ot.dt == TJ_F32 && P->nprocs <= 1);
}
static tj__ct_region tj__region_of(const tj__kern *k, int ax) {
    tj__ct_region reg;
    reg.it = k->it[0];
    reg.ot = &k->ot;
    reg.ax = ax;
    reg.nthreads = k->nthreads;
    return reg;
}
static void tj__k_all_gather(tj__kern *k) {
    unsigned m = k->n->a.mesh;
    int G = tj__mesh_count(k->ctx, m), r, ax = tj__axis_index(&k->ot, k->n->a.axis), direct = tj__outer(&k->ot, ax);
    size_t S = (size_t)tj__bytes(k->it[0]);
    char *recv = direct ? (char *)k->out : (char *)k->scratch;
    int64_t st[TJ_MAXDIM] = {0};
    if (!direct && tj__on_views(k, TJ__AG)) { /* no contiguous copy (the scratch stays unused) */
        tj__ct_region reg = tj__region_of(k, ax);
        tj__coll_call_reg(k, NULL, NULL, TJ__AG, k->in[0], k->out, S, 0, -1, -1, &reg);
        return;
    }
    if (tj__coll_call(k, TJ__AG, k->in[0], recv, S, 0, -1, -1) || direct) return;
    tj__strides(&k->ot, st);
    for (r = 0; r < G; r++) tj__copy_region(recv + (size_t)r * S, k->it[0], 0, k->out, &k->ot, r * k->it[0]->dim[ax] * st[ax], k->it[0]->dim, k->nthreads);
}
static void tj__k_psum(tj__kern *k) {
    size_t n = (size_t)tj__numel(&k->ot);
    tj__coll_call(k, TJ__AR, k->in[0], k->out, n * tj_dtype_size(k->ot.dt), n, -1, -1);
}
static void tj__k_reduce_scatter(tj__kern *k) {
    unsigned m = k->n->a.mesh;
    int G = tj__mesh_count(k->ctx, m), r, ax = tj__axis_index(&k->ot, k->n->a.axis), direct = tj__outer(k->it[0], ax);
    int64_t ist[TJ_MAXDIM] = {0}, n = tj__numel(&k->ot);
    const void *send = direct ? k->in[0] : k->scratch;
    if (!direct && tj__on_views(k, TJ__RS)) { /* no contiguous copy (the scratch stays unused) */
        tj__ct_region reg = tj__region_of(k, ax);
        tj__coll_call_reg(k, NULL, NULL, TJ__RS, k->in[0], k->out, (size_t)tj__bytes(&k->ot), (size_t)n, -1, -1, &reg);
        return;
    }
    tj__strides(k->it[0], ist);
    if (!direct) /* block r (rank r's part of axis ax) contiguous at r * n */
        for (r = 0; r < G; r++) tj__copy_region(k->in[0], k->it[0], r * k->ot.dim[ax] * ist[ax], k->scratch, &k->ot, r * n, k->ot.dim, k->nthreads);
    tj__coll_call(k, TJ__RS, send, k->out, (size_t)tj__bytes(&k->ot), (size_t)n, -1, -1);
}
/* all_to_all: mesh axes m move from axis `axis2` (split on input) to
   `axis` (split on output): each device sends peer r the r-th block of its
   `axis` and receives peer r's block of `axis2`. */
static void tj__k_all_to_all(tj__kern *k) {
    unsigned m = k->n->a.mesh;
    int G = tj__mesh_count(k->ctx, m), r;
    int to = tj__axis_index(&k->ot, k->n->a.axis), from = tj__axis_index(&k->ot, k->n->a.axis2);
    int sdirect = tj__outer(k->it[0], to), rdirect = tj__outer(&k->ot, from);
    int64_t ist[TJ_MAXDIM] = {0}, ost[TJ_MAXDIM] = {0}, nb;
    tj__type bt = k->ot; /* one peer's block */
    const char *send = sdirect ? (const char *)k->in[0] : (const char *)k->scratch;
    char *recv = rdirect ? (char *)k->out : (char *)k->scratch + (sdirect ? 0 : tj__align(tj__bytes(k->it[0])));
    tj__strides(k->it[0], ist);
    tj__strides(&k->ot, ost);
    bt.dim[from] = k->it[0]->dim[from];
    nb = tj__numel(&bt);
    if (!sdirect)
        for (r = 0; r < G; r++) tj__copy_region(k->in[0], k->it[0], r * k->ot.dim[to] * ist[to], (void *)send, &bt, r * nb, bt.dim, k->nthreads);
    if (tj__coll_call(k, TJ__A2A, send, recv, (size_t)tj__bytes(&bt), 0, -1, -1) || rdirect) return;
    for (r = 0; r < G; r++) tj__copy_region(recv, &bt, r * nb, k->out, &k->ot, r * k->it[0]->dim[from] * ost[from], bt.dim, k->nthreads);
}
/* ppermute: rank r's block goes to rank perm[r]; a rank nobody sends to
   gets zeros */
static void tj__k_ppermute(tj__kern *k) {
    unsigned m = k->n->a.mesh;
    int G = tj__mesh_count(k->ctx, m), r, me = tj__mesh_rank(k->ctx, k->dev, m), src = -1;
    for (r = 0; r < G; r++)
        if (k->n->a.perm[r] == me) src = r;
    if (tj__coll_call(k, TJ__PERM, k->in[0], k->out, (size_t)tj__bytes(&k->ot), 0, k->n->a.perm[me], src)) return;
    if (src < 0) memset(k->out, 0, (size_t)tj__bytes(&k->ot));
}

/* ---- collective matmul: a dot and its collective in one node ----
   (What and when: tj_set_collective_matmul in the API.) tj__compile calls
   tj__coll_matmul before the schedule; it rewrites
     dot(a, all_gather(w))      -> all_gather_dot(a, w)  (a.index: which operand is gathered)
     reduce_scatter(dot(a, b))  -> dot_scatter(a, b)
   when the dot is f32 or bf16, nothing else reads the value that goes
   away, and the collective's axis is, in the local layout, the outermost
   axis of the dot's m, k or n group that is not 1 (never a batch axis), so
   that each rank's block is a range of rows, of k or of columns. The node
   keeps the dot's attributes and the collective's axis and mesh axes. Its
   kernel meets its group as a collective does (each member publishes its
   operands' addresses, then a barrier), runs one matmul per rank on the
   peers' buffers, and meets again, so no peer overwrites an operand that
   is still being read. With rank j's block of rows, k or columns:
     gathered rows or columns   C[rows j] = A_j B      C[cols j] = A B_j
     gathered k                 C = sum over j of A[:, k j] B_j  (or A_j B[k j, :])
     scattered rows or columns  C = sum over j of A_j[rows me] B_j  (or A_j B_j[:, cols me])
   Sums over j accumulate into C in rank order, the order the ranks' rows
   of k (the batch the dot contracts) have in the whole array. bf16 sums in
   f32 scratch and rounds once, as the dot does. Where b (a weight) is the
   gathered operand, along k or n, each rank may instead compute one block
   of columns of every rank's product, so that the group packs b once
   (tj__cdot_coop: when that packs fewer elements); every element is the
   same sum either way. */
typedef struct {
    int where;                 /* the distributed axis's group: 1 m, 2 k, 3 n (0: not eligible) */
    int64_t Bn, Mo, No;        /* batch, and the node's own output rows and columns */
    int64_t Ma, Ka, Kb, Nb;    /* the operands' own m, k (a and b) and n */
} tj__cdot_dims;
static const char *tj__groups_str(const tj_ctx *c, unsigned m, char *buf, size_t n); /* [13] */
/* the group of axis ax in operand or output type t, whose groups start at
   s[0..2] (m, k, n; -1 absent) with lengths len[0..2]: 1 + the group, or 0
   if ax is a batch axis, absent, or has an axis of size > 1 before it in
   its group */
static int tj__cdot_group(const tj__type *t, int ax, const int *s, const int *len) {
    int p = tj__axis_index(t, ax), gi;
    for (gi = 0; gi < 3; gi++)
        if (s[gi] >= 0 && p >= s[gi] && p < s[gi] + len[gi]) return tj__dims_prod(t, s[gi], p) == 1 ? gi + 1 : 0;
    return 0;
}
/* dims of a node of op (AG_DOT or DOT_RS) with attributes a from local
   types; d->where 0 if the kernel cannot run it */
static void tj__cdot_shape(int op, const tj__attr *a, const tj__type *at, const tj__type *bt, const tj__type *ot, int G, tj__cdot_dims *d) {
    int nb = a->nb, nm = a->nm, nk = a->nk, nn = a->nn, ta = a->trans_a, tb = a->trans_b;
    int sa[3], sb[3], so[3], len[3];
    len[0] = nm, len[1] = nk, len[2] = nn;
    sa[0] = nb + (ta ? nk : 0), sa[1] = nb + (ta ? 0 : nm), sa[2] = -1;
    sb[0] = -1, sb[1] = nb + (tb ? nn : 0), sb[2] = nb + (tb ? 0 : nk);
    so[0] = nb, so[1] = -1, so[2] = nb + nm;
    memset(d, 0, sizeof *d);
    d->Bn = tj__dims_prod(ot, 0, nb);
    d->Mo = tj__dims_prod(ot, nb, nb + nm);
    d->No = tj__dims_prod(ot, nb + nm, nb + nm + nn);
    d->Ma = tj__dims_prod(at, sa[0], sa[0] + nm);
    d->Ka = tj__dims_prod(at, sa[1], sa[1] + nk);
    d->Kb = tj__dims_prod(bt, sb[1], sb[1] + nk);
    d->Nb = tj__dims_prod(bt, sb[2], sb[2] + nn);
    if (op == TJ__OP_AG_DOT) d->where = a->index == 0 ? tj__cdot_group(at, a->axis, sa, len) : tj__cdot_group(bt, a->axis, sb, len);
    else d->where = tj__cdot_group(ot, a->axis, so, len);
    /* the sizes must say the same (a defensive check: the rewrite keeps types) */
    if (op == TJ__OP_AG_DOT) {
        int ok = d->where == 1 ? d->Ma * G == d->Mo && d->Ka == d->Kb && d->Nb == d->No
               : d->where == 3 ? d->Nb * G == d->No && d->Ka == d->Kb && d->Ma == d->Mo
               : d->where == 2 ? (a->index == 0 ? d->Ka * G == d->Kb : d->Kb * G == d->Ka) && d->Ma == d->Mo && d->Nb == d->No : 0;
        if (!ok) d->where = 0;
    } else {
        int ok = d->where == 1 ? d->Ma == d->Mo * G && d->Nb == d->No && d->Ka == d->Kb
               : d->where == 3 ? d->Nb == d->No * G && d->Ma == d->Mo && d->Ka == d->Kb : 0;
        if (!ok) d->where = 0;
    }
    if (d->Bn < 1 || tj__dims_prod(at, 0, nb) != d->Bn || tj__dims_prod(bt, 0, nb) != d->Bn) d->where = 0;
}
/* m, n and k of each of the G matmuls */
static void tj__cdot_mnk(const tj_node *n, const tj__cdot_dims *d, int64_t *m, int64_t *nn, int64_t *kk) {
    int ag = n->op == TJ__OP_AG_DOT;
    *m = ag && d->where == 1 ? d->Ma : d->Mo;
    *nn = ag && d->where == 3 ? d->Nb : d->No;
    *kk = ag && d->where == 2 ? (n->a.index == 0 ? d->Ka : d->Kb) : d->Ka < d->Kb ? d->Ka : d->Kb;
}
/* is b gathered along k or n (the weight of a data-parallel matmul) */
static int tj__cdot_b_gathered(const tj_node *n, const tj__cdot_dims *d) {
    return n->op == TJ__OP_AG_DOT && n->a.index == 1 && (d->where == 2 || d->where == 3);
}
/* When b (a weight) is gathered along k or n, rank me may compute, instead
   of its own product whole (packing all of b for its few rows), one block
   of columns of every rank's product: the group then packs b once in all,
   and each rank packs the rows of a of every rank (G times as many as its
   own). Chosen when that packs fewer elements per element of k, counted in
   tj__sgemm_rect's orders: one product packs its a once and its b once per
   MC rows; products sharing b pack b once and each a once per NC columns.
   [*lo, *hi): my columns. */
static int tj__cdot_coop(const tj_node *n, const tj__cdot_dims *d, int G, int me, int64_t *lo, int64_t *hi) {
    tj__sgemm_cfg cf;
    int64_t m = d->Mo, w = (d->No + G - 1) / G, own;
    if (!tj__cdot_b_gathered(n, d) || G < 2) return 0;
    tj__sgemm_get_cfg(&cf, n->t.dt == TJ_BF16);
    own = (d->where == 3 ? G * m : m) + d->No * ((m + cf.mc - 1) / cf.mc); /* G products with all of a, or a's G blocks of k */
    if (G * m * ((w + cf.nc - 1) / cf.nc) + w >= own) return 0;
    *lo = d->where == 3 ? me * d->Nb : d->No * me / G;
    *hi = d->where == 3 ? (me + 1) * d->Nb : d->No * (me + 1) / G;
    return 1;
}
/* workspace, from the dims: bf16's f32 sums of one batch (staging), then
   the matmul's pack buffers (pack, also counted by
   tj_memory_analysis.pack_bytes; 0 for products the direct loop runs) */
static void tj__cdot_ws(const tj_node *n, const tj__cdot_dims *d, int64_t *staging, int64_t *pack) {
    int64_t m, nn, kk;
    int G = tj__mesh_count(n->g->ctx, n->a.mesh);
    tj__cdot_mnk(n, d, &m, &nn, &kk);
    /* (a gathered b: room for my columns of each rank's rows, tj__cdot_coop) */
    *staging = n->t.dt != TJ_BF16 ? 0 : tj__align(d->Mo * (tj__cdot_b_gathered(n, d) ? (d->No + G - 1) / G * G : d->No) * 4);
    *pack = (double)m * (double)nn * (double)kk < TJ__SGEMM_SMALL ? 0 : n->pack_slots * tj__gemm_pack_bytes();
}
/* the same for a node of the plan (local types from its global ones) */
static void tj__cdot_plan_ws(const tj_node *n, int64_t *staging, int64_t *pack) {
    tj_ctx *c = n->g->ctx;
    tj__type at = tj__local(c, &n->in[0]->t), bt = tj__local(c, &n->in[1]->t), ot = tj__local(c, &n->t);
    tj__cdot_dims d;
    tj__cdot_shape(n->op, &n->a, &at, &bt, &ot, tj__mesh_count(c, n->a.mesh), &d);
    tj__cdot_ws(n, &d, staging, pack);
}
static int64_t tj__cdot_scratch(const tj_node *n) {
    int64_t staging, pack;
    tj__cdot_plan_ws(n, &staging, &pack);
    return staging + pack;
}
static int64_t tj__cdot_pack_bytes(const tj_node *n) {
    int64_t staging, pack;
    tj__cdot_plan_ws(n, &staging, &pack);
    return pack;
}
static void tj__pr_cdot(const tj_node *n, FILE *f) {
    char mb[64], gb[256];
    tj__pr_dot(n, f);
    fprintf(f, ", %s %s along %s over %s [groups %s, caused by %s]", n->op == TJ__OP_AG_DOT ? (n->a.index ? "gathers b" : "gathers a") : "scatters the result",
            n->op == TJ__OP_AG_DOT ? "in place" : "summed in the matmul", tj__name(n->g->ctx, n->a.axis), tj__mesh_names(n->g->ctx, n->a.mesh, mb, sizeof mb),
            tj__groups_str(n->g->ctx, n->a.mesh, gb, sizeof gb), n->name ? n->name : "?");
}
/* meet the group: phase 0 publishes the operands and the output and fills
   pa, pb, po with every rank's; phase 1 waits until every rank is done
   reading and writing. Nonzero (and k->err) on a timeout or a broken
   transport. */
static int tj__cdot_meet(tj__kern *k, int phase, const void **pa, const void **pb, void **po) {
    tj_ctx *c = k->ctx;
    tj__chandle *h = (tj__chandle *)tj__group_find(c, k->n->a.mesh, k->dev);
    char e[600], mb[64];
    double t0 = tj__now_us();
    int m, rc = 1;
    if (!h) snprintf(e, sizeof e, "no device group for these mesh axes (was the program compiled under another mesh?)");
    else if (h->g->nrem) snprintf(e, sizeof e, "a collective matmul needs every member of its group in this process");
    else if (tj__ct_failed(h->g->ct, e, sizeof e)) rc = 1; /* (e says why) */
    else {
        if (phase == 0) {
            h->g->slot[h->rank].send = k->in[0];
            h->g->slot[h->rank].recv = (void *)k->in[1];
            h->g->slot[h->rank].out = k->out;
        }
        rc = tj__cg_barrier(h->g, e, sizeof e);
        if (!rc && phase == 0)
            for (m = 0; m < h->g->G; m++) {
                pa[m] = h->g->slot[m].send;
                pb[m] = h->g->slot[m].recv;
                po[m] = h->g->slot[m].out;
            }
        c->procs->us[k->dev] += tj__now_us() - t0;
    }
    if (rc && !k->err[0])
        snprintf(k->err, TJ__MSG, "%s over %s (caused by %s at %s:%d) on device %d: %s", tj__ops[k->n->op].name, tj__mesh_names(c, k->n->a.mesh, mb, sizeof mb),
                 k->n->name ? k->n->name : "?", tj__base(k->n->file), k->n->line, k->dev, e);
    return rc;
}
/* rank me's columns [lo, hi) of every rank's product (tj__cdot_coop): one
   product per gathered block of b (one, the own block, when b is gathered
   along n), its block of b packed once for the G ranks' rows of a */
static void tj__cdot_cols(tj__kern *k, const tj__cdot_dims *d, int G, int64_t lo, int64_t hi, const void *const *pa,
                          const void *const *pb, void *const *po) {
    tj_node *n = k->n;
    int ta = n->a.trans_a, tb = n->a.trans_b, bf16 = k->ot.dt == TJ_BF16, e, j, J = d->where == 3 ? 1 : G;
    int64_t w = hi - lo, kk = d->Kb, bi, r, ldc = bf16 ? w : d->No;
    int64_t lda = ta ? d->Ma : d->Ka, ldb = tb ? d->Kb : d->Nb;
    size_t es = tj_dtype_size(k->ot.dt);
    const void *A[TJ_MAXDEV];
    float *C[TJ_MAXDEV];
    int64_t pack = 0, staging = 0;
    char *ws = NULL;
    tj__cdot_ws(n, d, &staging, &pack);
    if (k->scratch && pack) ws = (char *)k->scratch + staging;
    for (bi = 0; bi < d->Bn; bi++) {
        for (e = 0; e < G; e++)
            C[e] = bf16 ? (float *)k->scratch + e * d->Mo * w : (float *)po[e] + bi * d->Mo * d->No + lo;
        for (j = 0; j < J; j++) {
            /* k block j (rank j's b) or, gathered along n, my own b whole */
            const char *B = (const char *)(d->where == 3 ? k->in[1] : pb[j]) + (size_t)(bi * d->Kb * d->Nb) * es;
            if (d->where == 2) B += (size_t)(tb ? lo * ldb : lo) * es;
            for (e = 0; e < G; e++)
                A[e] = (const char *)pa[e] + (size_t)(bi * d->Ma * d->Ka + (d->where == 2 ? (ta ? j * kk * d->Ma : j * kk) : 0)) * es;
            tj__gemm_segs(bf16, ta, tb, G, (int)d->Mo, (int)w, (int)kk, A, (int)lda, B, (int)ldb, C, (int)ldc, j > 0, k->nthreads, ws, ws ? n->pack_slots : 0);
        }
        if (bf16)
            for (e = 0; e < G; e++)
                for (r = 0; r < d->Mo; r++) tj__f32_to_bf16_n(C[e] + r * w, (uint16_t *)po[e] + (bi * d->Mo + r) * d->No + lo, w);
    }
}
/* rank me's own product whole: one matmul per rank j on rank j's operands
   (the table in the block comment above) */
static void tj__cdot_own(tj__kern *k, const tj__cdot_dims *d, int G, int me, const void *const *pa, const void *const *pb) {
    tj_node *n = k->n;
    int ag = n->op == TJ__OP_AG_DOT, w = n->a.index, ta = n->a.trans_a, tb = n->a.trans_b, bf16 = k->ot.dt == TJ_BF16, j, ws_n = 0;
    int64_t m, nn, kk, bi, staging, pack, lda = ta ? d->Ma : d->Ka, ldb = tb ? d->Kb : d->Nb; /* every rank's operand has the same local shape */
    size_t es = tj_dtype_size(k->ot.dt);
    char *ws = NULL;
    tj__cdot_mnk(n, d, &m, &nn, &kk);
    tj__cdot_ws(n, d, &staging, &pack);
    if (k->scratch && pack) {
        ws = (char *)k->scratch + staging;
        ws_n = n->pack_slots;
    }
    for (bi = 0; bi < d->Bn; bi++) {
        float *C = bf16 ? (float *)k->scratch : (float *)k->out + bi * d->Mo * d->No;
        for (j = 0; j < G; j++) {
            /* rank j's operands (the node's own where nothing is gathered) at batch bi */
            const char *A = (const char *)(ag && w == 1 ? k->in[0] : pa[j]) + (size_t)(bi * d->Ma * d->Ka) * es;
            const char *B = (const char *)(ag && w == 0 ? k->in[1] : pb[j]) + (size_t)(bi * d->Kb * d->Nb) * es;
            float *Cj = C;
            int acc = j > 0;
            if (ag && d->where == 1) Cj += (int64_t)j * d->Ma * d->No, acc = 0;     /* rows j   */
            else if (ag && d->where == 3) Cj += (int64_t)j * d->Nb, acc = 0;        /* cols j   */
            else if (ag && w == 0) B += (size_t)(tb ? j * kk : j * kk * d->Nb) * es; /* k block j of b */
            else if (ag) A += (size_t)(ta ? j * kk * d->Ma : j * kk) * es;          /* k block j of a */
            else if (d->where == 1) A += (size_t)(ta ? me * d->Mo : me * d->Mo * d->Ka) * es; /* my rows of a_j */
            else B += (size_t)(tb ? me * d->No * d->Kb : me * d->No) * es;          /* my cols of b_j */
            tj__gemm_ws(bf16, ta, tb, (int)m, (int)nn, (int)kk, A, (int)lda, B, (int)ldb, Cj, (int)d->No, acc, k->nthreads, ws, ws_n);
        }
        if (bf16) tj__f32_to_bf16_n(C, (uint16_t *)k->out + bi * d->Mo * d->No, d->Mo * d->No);
    }
}
static void tj__k_cdot(tj__kern *k) {
    tj_node *n = k->n;
    struct tj__procs *P = k->ctx->procs;
    int G = tj__mesh_count(k->ctx, n->a.mesh), me = tj__mesh_rank(k->ctx, k->dev, n->a.mesh);
    int64_t lo, hi;
    const void *pa[TJ_MAXDEV], *pb[TJ_MAXDEV];
    void *po[TJ_MAXDEV];
    tj__cdot_dims d;
    tj__cdot_shape(n->op, &n->a, k->it[0], k->it[1], &k->ot, G, &d);
    if (!d.where) { /* the rewrite checked these shapes: a bug if reached, reported rather than run out of bounds */
        if (!k->err[0]) snprintf(k->err, TJ__MSG, "%s at %s:%d: the local shapes do not fit the collective matmul", tj__ops[n->op].name, tj__base(n->file), n->line);
        return;
    }
    if (tj__cdot_meet(k, 0, pa, pb, po)) return;
    if (tj__cdot_coop(n, &d, G, me, &lo, &hi)) tj__cdot_cols(k, &d, G, lo, hi, pa, pb, po);
    else tj__cdot_own(k, &d, G, me, pa, pb);
    tj__cdot_meet(k, 1, NULL, NULL, NULL);
    if (P) { /* counted as the collective it replaces */
        P->ncoll[k->dev]++;
        P->sent[k->dev] += (G - 1) * (n->op == TJ__OP_AG_DOT ? tj__bytes(k->it[n->a.index]) : tj__bytes(&k->ot));
    }
}
/* is the collective matmul on for programs compiled now */
static int tj__coll_matmul_on(const tj_ctx *c) {
    const struct tj__procs *P = c->procs;
    return c->ndev > 1 && !c->backend && !c->no_coll_matmul && !getenv("TJ_NO_COLL_MATMUL") && (!P || (P->nprocs <= 1 && P->t && P->t->all_gather == tj__ct_all_gather));
}
TJDEF int tj_get_collective_matmul(tj_ctx *c) { return c && tj__coll_matmul_on(c); }
/* may n (a dot) with the collective x's attributes become op */
static int tj__cdot_fits(tj_prog *p, tj_node *n, const tj_node *x, int op, int w) {
    tj__attr a = n->a;
    tj__type at, bt, ot;
    tj__cdot_dims d;
    if ((n->t.dt != TJ_F32 && n->t.dt != TJ_BF16) || n->space != TJ_SPACE_DEVICE || x->space != TJ_SPACE_DEVICE || x->in[0]->space != TJ_SPACE_DEVICE) return 0;
    a.index = w;
    a.axis = x->a.axis;
    a.mesh = x->a.mesh;
    at = tj__local(p->ctx, op == TJ__OP_AG_DOT && w == 0 ? &x->in[0]->t : &n->in[0]->t);
    bt = tj__local(p->ctx, op == TJ__OP_AG_DOT && w == 1 ? &x->in[0]->t : &n->in[1]->t);
    ot = tj__local(p->ctx, op == TJ__OP_DOT_RS ? &x->t : &n->t);
    tj__cdot_shape(op, &a, &at, &bt, &ot, tj__mesh_count(p->ctx, x->a.mesh), &d);
    return d.where != 0;
}
/* the bytes a collective over `mesh` moves to each device: (G - 1) / G
   of its whole buffer (an all_gather's output, a reduce_scatter's input) */
static int64_t tj__moved(tj_ctx *c, const tj__type *whole, unsigned mesh) {
    int G = tj__mesh_count(c, mesh);
    return G > 1 ? tj__bytes(whole) * (G - 1) / G : 0;
}
static tj_status tj__coll_matmul(tj_prog *p) {
    tj_graph *g = p->g;
    int i, j, w;
    if (!tj__coll_matmul_on(p->ctx)) return TJ_OK;
    /* uses of each node (in ->live, which the schedule sets afresh): its
       consumers', the outputs, and values the bodies capture */
    for (i = 0; i < g->n; i++) g->nodes[i]->live = 0;
    for (i = 0; i < g->n; i++) {
        tj_node *n = g->nodes[i];
        for (j = 0; j < n->nin; j++) n->in[j]->live++;
        for (j = 0; n->sub && j < n->sub->ncap; j++) n->sub->cap_outer[j]->live++;
    }
    for (i = 0; i < p->nout; i++) p->outs[i]->live++;
    /* A dot takes one collective, the one that moves the most bytes
       (tj__moved: a group of 2 moves half its buffer, of 4 three quarters): its
       result's reduce_scatter unless an all_gather of an operand it could
       take instead is larger (sequence parallelism's weight gradient: the
       activation gathered along pos over model, the gradient scattered
       over data), else the larger gathered operand (its forward: the
       activation gathered along pos, the weight over data) */
    for (i = 0; i < g->n; i++) {
        tj_node *n = g->nodes[i], *x;
        int64_t ag = 0;
        if (n->op != TJ__OP_REDUCE_SCATTER || (x = n->in[0])->op != TJ__OP_DOT || x->live != 1 || !tj__cdot_fits(p, x, n, TJ__OP_DOT_RS, 0)) continue;
        for (w = 0; w < 2; w++)
            if (x->in[w]->op == TJ__OP_ALL_GATHER && tj__cdot_fits(p, x, x->in[w], TJ__OP_AG_DOT, w) && tj__moved(p->ctx, &x->in[w]->t, x->in[w]->a.mesh) > ag)
                ag = tj__moved(p->ctx, &x->in[w]->t, x->in[w]->a.mesh);
        if (tj__moved(p->ctx, &x->t, n->a.mesh) < ag) continue;
        {
            tj_node **in = (tj_node **)TJ_REALLOC(n->in, 2 * sizeof *in);
            tj__attr a = x->a;
            if (!in) {
                tj__err(p->ctx, TJ_ERR_OOM, p->file, p->line, "jit '%s': out of memory", p->name);
                return TJ_ERR_OOM;
            }
            a.axis = n->a.axis;
            a.mesh = n->a.mesh;
            a.index = 0;
            n->in = in;
            n->nin = 2;
            n->in[0] = x->in[0];
            n->in[1] = x->in[1];
            n->a = a;
            n->op = TJ__OP_DOT_RS;
            x->live = 0;
        }
    }
    for (i = 0; i < g->n; i++) { /* the rest: the larger of two gathered operands */
        tj_node *n = g->nodes[i], *x;
        int best = -1;
        for (w = 0; n->op == TJ__OP_DOT && w < 2; w++)
            if (n->in[w]->op == TJ__OP_ALL_GATHER && tj__cdot_fits(p, n, n->in[w], TJ__OP_AG_DOT, w) &&
                (best < 0 || tj__moved(p->ctx, &n->in[w]->t, n->in[w]->a.mesh) > tj__moved(p->ctx, &n->in[best]->t, n->in[best]->a.mesh)))
                best = w;
        if (best < 0) continue;
        x = n->in[best];
        x->live--;
        if (!n->name && x->name && !(n->name = tj__strdup(x->name))) {
            tj__err(p->ctx, TJ_ERR_OOM, p->file, p->line, "jit '%s': out of memory", p->name);
            return TJ_ERR_OOM;
        }
        n->in[best] = x->in[0];
        n->a.index = best;
        n->a.axis = x->a.axis;
        n->a.mesh = x->a.mesh;
        n->op = TJ__OP_AG_DOT;
    }
    return TJ_OK;
}

/* ---- the per-run record: profiling events, pending copies of each device ----
   One per tj_run, shared by the device threads; each device touches only
   its own rows, so no locks. */
#define TJ__NPEND 64 /* copies in flight per device before the oldest is waited for */
typedef struct {
    uintptr_t src, dst; /* the copy's bytes [src, src + n) -> [dst, dst + n) */
    int64_t n;
    uint64_t ticket;
} tj__pend;
typedef struct tj__rdv {
    tj_event *ev[TJ_MAXDEV]; /* the device's profile events                  */
    int nev[TJ_MAXDEV], capev[TJ_MAXDEV];
    int (*mk[TJ_MAXDEV])[2]; /* per event: its backend marks (start, end), or -1 */
    int nmk[TJ_MAXDEV];      /* marks issued on the device in this run       */
    double mark0[TJ_MAXDEV]; /* host time of the device's mark 0            */
    double t0;               /* host time of the run's start                */
    tj__pend *pend[TJ_MAXDEV]; /* copies on the copy stream not yet waited for */
    int npend[TJ_MAXDEV];
} tj__rdv;
static void tj__rdv_free(tj__rdv *r) {
    int d;
    for (d = 0; d < TJ_MAXDEV; d++) {
        TJ_FREE(r->ev[d]);
        TJ_FREE(r->mk[d]);
        TJ_FREE(r->pend[d]);
    }
}

/* ---- running the schedule on each device ---- */
static void *tj__buf(tj_node *n, char **arena, void **args, void **outs) {
    tj_node *r = n->root;
    if (r->op == TJ__OP_PARAM) return args[r->a.index];
    if (r->out_index >= 0) return outs[r->out_index];
    return r->off < 0 ? NULL : arena[r->space] + r->off; /* a multi-output node has no buffer of its own */
}
/* ---- profiling: events, and the device's own time stamps ----
   Without tj_backend.mark an event is the host's time around the call
   (the CPU backend runs the kernel in it). With marks, the runner stamps
   the device's stream before and after each node or copy it issues, and
   after the device's sync turns the stamps into times (tj__marks_to_times):
   the stream's own time per node, read once per run. */
/* One timeline event for node n on device dev: host times t0, t1, and the
   marks m0, m1 (-1: none) on stream `stream`. op: a name other than the
   node's op ("prefetch"), which also makes it a copy; NULL: the node's. */
static void tj__record(tj__rdv *r, int dev, const tj_node *n, double t0, double t1, int m0, int m1, int stream, const char *op) {
    tj_event *e;
    if (r->nev[dev] == r->capev[dev]) {
        int nc = r->capev[dev] ? 2 * r->capev[dev] : 256;
        tj_event *ne = (tj_event *)TJ_REALLOC(r->ev[dev], sizeof(tj_event) * (size_t)nc);
        int(*nm)[2];
        if (!ne) return; /* a profile is best effort: drop the event */
        r->ev[dev] = ne;
        if (!(nm = (int(*)[2])TJ_REALLOC(r->mk[dev], sizeof(int[2]) * (size_t)nc))) return;
        r->mk[dev] = nm;
        r->capev[dev] = nc;
    }
    r->mk[dev][r->nev[dev]][0] = m0;
    r->mk[dev][r->nev[dev]][1] = m1;
    e = &r->ev[dev][r->nev[dev]++];
    memset(e, 0, sizeof *e);
    e->device = dev;
    e->stream = stream;
    if (op) snprintf(e->op, sizeof e->op, "%s", op);
    else if (n->members) snprintf(e->op, sizeof e->op, "fused x%d", n->nmembers);
    else snprintf(e->op, sizeof e->op, "%s", tj__ops[n->op].name);
    e->kind = TJ__IS_COLL(n->op) ? 1 : op || n->op == TJ__OP_TO_HOST || n->op == TJ__OP_TO_DEVICE ? 2 : 0;
    if (e->kind == 1 && n->name) snprintf(e->what, sizeof e->what, "caused by %s", n->name);
    else snprintf(e->what, sizeof e->what, "%%%d", n->id);
    e->file = n->file;
    e->line = n->line;
    e->start_us = t0 - r->t0;
    e->dur_us = t1 - t0;
}
/* a mark on device dev's stream 0 (compute) or 1 (copies); -1 where the
   backend has none. The host time of mark 0 places the device's times on
   the run's timeline. */
static int tj__mark(tj_ctx *c, tj__rdv *r, int dev, int stream) {
    tj_backend *b = c->backend;
    int m = b && b->mark && b->mark_times ? b->mark(b, dev, stream) : -1;
    if (m == 0) r->mark0[dev] = tj__now_us();
    if (m >= r->nmk[dev]) r->nmk[dev] = m + 1;
    return m;
}
/* After device dev's sync: its marks' times (read once, here) replace the
   host times of its marked events, and the backend forgets the marks. */
static void tj__marks_to_times(tj_ctx *c, tj__rdv *r, int dev) {
    tj_backend *b = c->backend;
    int i, n = r->nmk[dev];
    double *us;
    if (!n || !b || !b->mark_times) return;
    if (!(us = (double *)tj__malloc(sizeof(double) * (size_t)n))) {
        b->mark_times(b, dev, NULL, 0); /* forget them; the events keep host times */
        return;
    }
    n = b->mark_times(b, dev, us, n);
    for (i = 0; i < r->nev[dev]; i++) {
        int m0 = r->mk[dev][i][0], m1 = r->mk[dev][i][1];
        if (m0 < 0 || m1 < 0 || m0 >= n || m1 >= n) continue;
        r->ev[dev][i].start_us = r->mark0[dev] - r->t0 + us[m0];
        r->ev[dev][i].dur_us = us[m1] > us[m0] ? us[m1] - us[m0] : 0;
    }
    TJ_FREE(us);
}

/* ---- asynchronous copies: where the compute stream waits ----
   With a backend that has copy_async, offload, fetch and a scan's staged
   slices go to the device's copy stream (tj__dev_copy_async), where each
   copy starts after the compute work issued before it, and they are kept
   in the device's pending list until waited for. Before work on the
   compute stream that reads or writes a pending copy's destination, or
   writes its source (the buffer is reused), the runner makes the stream
   wait for that copy, and so for every earlier one (the copy stream runs
   in order); everything else runs without waiting, and the host never
   waits for the device during a run. */
/* the latest ticket among t and the pending copies that work touching
   [p, p + n) (writes: and writing it) must wait for */
static uint64_t tj__pend_need(const tj__rdv *r, int dev, const void *p, int64_t n, int writes, uint64_t t) {
    uintptr_t a = (uintptr_t)p, b = a + (uintptr_t)n;
    int i;
    if (!p || n <= 0) return t;
    for (i = 0; i < r->npend[dev]; i++) {
        const tj__pend *e = &r->pend[dev][i];
        if (e->ticket > t && ((a < e->dst + (uintptr_t)e->n && e->dst < b) || (writes && a < e->src + (uintptr_t)e->n && e->src < b))) t = e->ticket;
    }
    return t;
}
/* the compute stream of k->dev waits for the copies up to ticket t, which
   leave the pending list */
static void tj__pend_wait(tj__kern *k, uint64_t t) {
    tj__rdv *r = k->rdv;
    tj_backend *b = k->ctx->backend;
    int i, j;
    char e[TJ__MSG];
    if (!t) return;
    e[0] = 0;
    if (b->wait(b, k->dev, t, e, sizeof e) && !k->err[0])
        snprintf(k->err, TJ__MSG, "%s: backend '%s' could not wait for a copy on device %d (at %s:%d): %.512s", tj__opname(k->n->op), b->name, k->dev,
                 tj__base(k->n->file), k->n->line, e[0] ? e : "no reason given");
    for (i = j = 0; i < r->npend[k->dev]; i++)
        if (r->pend[k->dev][i].ticket > t) r->pend[k->dev][j++] = r->pend[k->dev][i];
    r->npend[k->dev] = j;
}
/* before node k runs on the compute stream: wait for the copies it touches
   (inputs, output, projections, scratch; a fused group's leaves and stores) */
static void tj__pend_node(tj__kern *k) {
    tj__rdv *r = k->rdv;
    tj_node *n = k->n;
    uint64_t t = 0;
    int j, mi;
    if (!r || !r->npend[k->dev]) return;
    if (n->members)
        for (mi = 0; mi < n->nmembers; mi++) {
            tj_node *x = n->members[mi];
            for (j = 0; j < x->nin; j++) t = tj__pend_need(r, k->dev, k->in[mi * 3 + j], tj__bytes(&x->in[j]->lt), 0, t);
            t = tj__pend_need(r, k->dev, k->pout[mi], tj__bytes(&x->lt), 1, t);
        }
    else {
        for (j = 0; j < k->nin; j++) t = tj__pend_need(r, k->dev, k->in[j], tj__bytes(k->it[j]), 0, t);
        t = tj__pend_need(r, k->dev, k->out, tj__bytes(&k->ot), 1, t);
        for (j = 0; j < n->nproj; j++) t = tj__pend_need(r, k->dev, k->pout[j], tj__bytes(&n->proj[j]->lt), 1, t);
        if (k->scratch && tj__ops[n->op].scratch) t = tj__pend_need(r, k->dev, k->scratch, tj__ops[n->op].scratch(n), 1, t);
    }
    tj__pend_wait(k, t);
}
/* before a copy on the compute stream (tj__dev_copy): wait for the pending
   copies it touches */
static void tj__pend_copy(tj__kern *k, const void *dst, const void *src, int64_t n) {
    if (!k->rdv || !k->rdv->npend[k->dev]) return;
    tj__pend_wait(k, tj__pend_need(k->rdv, k->dev, src, n, 0, tj__pend_need(k->rdv, k->dev, dst, n, 1, 0)));
}
/* A move of bytes on device k->dev's copy stream (offload, fetch, a staged
   slice), recorded in the pending list; a backend without copy_async gets
   tj__dev_copy on the compute stream. what: the profile's name for it
   (NULL: the node's op). */
static void tj__dev_copy_async(tj__kern *k, void *dst, int dspace, const void *src, int sspace, int64_t n, const char *what) {
    tj_ctx *c = k->ctx;
    tj_backend *b = c->backend;
    tj__rdv *r = k->rdv;
    int prof = c->profile && r, m0 = -1, m1 = -1;
    double t0 = 0;
    uint64_t t;
    tj__pend *e;
    if (n <= 0 || dst == src || k->err[0]) return;
    if (prof) t0 = tj__now_us();
    if (!b || !b->copy_async || !b->wait || !r) {
        if (prof) m0 = tj__mark(c, r, k->dev, 0);
        tj__dev_copy(k, dst, dspace, src, sspace, n);
        if (prof) tj__record(r, k->dev, k->n, t0, tj__now_us(), m0, m0 < 0 ? -1 : tj__mark(c, r, k->dev, 0), 0, what);
        return;
    }
    if (!r->pend[k->dev] && !(r->pend[k->dev] = (tj__pend *)tj__malloc(sizeof(tj__pend) * TJ__NPEND))) {
        snprintf(k->err, TJ__MSG, "%s: out of memory (at %s:%d)", tj__opname(k->n->op), tj__base(k->n->file), k->n->line);
        return;
    }
    if (r->npend[k->dev] == TJ__NPEND) tj__pend_wait(k, r->pend[k->dev][0].ticket); /* full: the oldest must land */
    if (prof) m0 = tj__mark(c, r, k->dev, 1);
    if (!(t = b->copy_async(b, k->dev, dst, dspace, src, sspace, (size_t)n))) {
        snprintf(k->err, TJ__MSG, "%s: backend '%s' could not queue a copy of %lld bytes on device %d's copy stream (at %s:%d)", tj__opname(k->n->op),
                 b->name, (long long)n, k->dev, tj__base(k->n->file), k->n->line);
        return;
    }
    if (prof) {
        m1 = tj__mark(c, r, k->dev, 1);
        tj__record(r, k->dev, k->n, t0, tj__now_us(), m0, m1, 1, what);
    }
    e = &r->pend[k->dev][r->npend[k->dev]++];
    e->src = (uintptr_t)src;
    e->dst = (uintptr_t)dst;
    e->n = n;
    e->ticket = t;
}
/* Ops the runner executes itself on every backend, with backend copies and
   backend runs of the nodes inside: scan (tj__k_scan: iterations, regions,
   staged slices, the final carry) and the moves between memory spaces
   (tj__k_memcpy). Parameters, projections and views own no work. */
#define TJ__RUNNER_OP(op) ((op) == TJ__OP_SCAN || (op) == TJ__OP_TO_HOST || (op) == TJ__OP_TO_DEVICE)
/* node k on the backend (its compute stream), after the copies it touches,
   between two marks when profiling */
static void tj__backend_node(tj__kern *k) {
    tj_ctx *c = k->ctx;
    int prof = c->profile && k->rdv, m0 = -1;
    double t0 = prof ? tj__now_us() : 0;
    tj__pend_node(k);
    if (prof) m0 = tj__mark(c, k->rdv, k->dev, 0);
    if (c->backend->run(c->backend, k) && !k->err[0]) {
        if (k->n->members) snprintf(k->err, TJ__MSG, "backend '%s' failed to run a fused group (at %s:%d)", c->backend->name, tj__base(k->n->file), k->n->line);
        else
            snprintf(k->err, TJ__MSG, "backend '%s' failed to run op '%s' (at %s:%d)", c->backend->name, tj__opname(k->n->op), tj__base(k->n->file),
                     k->n->line);
    }
    if (prof) tj__record(k->rdv, k->dev, k->n, t0, tj__now_us(), m0, m0 < 0 ? -1 : tj__mark(c, k->rdv, k->dev, 0), 0, NULL);
}
/* k's tables for nin inputs and nout outputs: its own arrays (every op but
   a big scan), else one block for this call (k->heap, which
   tj__kern_done frees): sized by the node, so no program overruns them.
   0, or -1 with the error in err. */
static int tj__kern_tables(tj__kern *k, int nin, int nout, char *err) {
    void **h;
    k->heap = NULL;
    k->it = k->it_s;
    k->in = k->in_s;
    k->pout = k->pout_s;
    if (nin <= TJ__KIN && nout <= TJ__KOUT) return 0;
    if (!(h = (void **)tj__malloc(sizeof(void *) * ((size_t)nin * 2 + (size_t)nout + 1)))) {
        if (!err[0])
            snprintf(err, TJ__MSG, "%s: out of memory for the tables of %d inputs and %d outputs (at %s:%d)", tj__opname(k->n->op), nin, nout,
                     tj__base(k->n->file), k->n->line);
        return -1;
    }
    k->heap = h;
    k->it = (const tj__type **)h;
    k->in = (const void **)(h + nin);
    k->pout = h + 2 * nin;
    return 0;
}
static void tj__kern_done(tj__kern *k) {
    if (k->heap) TJ_FREE(k->heap);
    k->heap = NULL;
}
/* Run a compiled program on raw buffers: args[param index], outs[output
   index], arena[space]. Kernel errors land in err. */
static tj_status tj__run_body(tj_prog *p, void **args, void **outs, char **arena, char *err, int nthreads, int dev, tj__rdv *rdv) {
    int i, j, prof = p->ctx->profile && rdv;
    for (i = 0; i < p->nsched; i++) {
        tj_node *n = p->sched[i];
        tj__kern k;
        double t0 = 0;
        if (n->op == TJ__OP_PARAM || n->op == TJ__OP_PROJ || (tj__ops[n->op].flags & TJ__VIEW) || n->fused) continue;
        /* after an error the device runs dry: only collectives (and the scans
           that hold some) run, so no peer is left waiting for it */
        if (err[0] && !TJ__IS_COLL(n->op) && n->op != TJ__OP_SCAN) continue;
        if (prof) t0 = tj__now_us();
        if (n->members) {
            const void *leafp[TJ__MAXFUSE * 3];
            void *storep[TJ__MAXFUSE];
            int mi;
            for (mi = 0; mi < n->nmembers; mi++) {
                tj_node *x = n->members[mi];
                storep[mi] = x == n || x->store ? tj__buf(x, arena, args, outs) : NULL;
                for (j = 0; j < x->nin; j++) {
                    tj_node *y = x->in[j];
                    leafp[mi * 3 + j] = y->fused && tj__froot(y) == n ? NULL : tj__buf(y, arena, args, outs);
                }
            }
            if (!p->ctx->backend) {
                tj__k_fused(n, leafp, storep, nthreads);
                if (prof) tj__record(rdv, dev, n, t0, tj__now_us(), -1, -1, 0, NULL);
            } else { /* a backend with fused_groups: the group as one call */
                memset(&k, 0, offsetof(tj__kern, it_s));
                k.ctx = p->ctx;
                k.n = n;
                k.nin = n->nmembers * 3;
                tj__kern_tables(&k, 0, 0, err); /* its own arrays (TJ__MAXFUSE) */
                for (j = 0; j < k.nin; j++) k.in[j] = j % 3 < n->members[j / 3]->nin ? leafp[j] : NULL;
                for (j = 0; j < n->nmembers; j++) k.pout[j] = storep[j];
                k.ot = n->lt;
                k.nthreads = nthreads;
                k.dev = dev;
                k.rdv = rdv;
                k.err = err;
                tj__backend_node(&k);
            }
            continue;
        }
        memset(&k, 0, offsetof(tj__kern, it_s));
        k.ctx = p->ctx;
        k.n = n;
        k.nin = n->nin;
        if (tj__kern_tables(&k, n->nin, n->nproj, err)) continue; /* (the device runs dry) */
        for (j = 0; j < n->nin; j++) {
            k.it[j] = &n->in[j]->lt;
            k.in[j] = tj__buf(n->in[j], arena, args, outs);
        }
        for (j = 0; j < n->nproj; j++) k.pout[j] = tj__buf(n->proj[j], arena, args, outs);
        k.ot = n->lt;
        k.out = tj__buf(n, arena, args, outs);
        k.scratch = n->scratch_off >= 0 ? arena[TJ_SPACE_DEVICE] + n->scratch_off : NULL;
        k.scratch_host = n->scratch_host_off >= 0 ? arena[TJ_SPACE_HOST] + n->scratch_host_off : NULL;
        k.nthreads = nthreads;
        k.dev = dev;
        k.rdv = rdv;
        k.err = err;
        k.custom_gpu = tj__k_custom_gpu;
        if (TJ__RUNNER_OP(n->op)) tj__ops[n->op].cpu(&k); /* the runner's own, through backend calls; they record their own events */
        else if (!p->ctx->backend) {
            tj__ops[n->op].cpu(&k);
            if (prof) tj__record(rdv, dev, n, t0, tj__now_us(), -1, -1, 0, NULL);
        } else tj__backend_node(&k);
        tj__kern_done(&k);
    }
    return err[0] ? TJ_ERR_ARG : TJ_OK;
}

/* One device's run: its arenas, its argument and output buffers. With
   several devices each runs on its own thread; they meet only in
   collectives, through the transport. In process mode only this process's
   devices run here. */
typedef struct {
    tj_prog *p;
    int dev, nth;
    void **args, **outs;
    char *arena[2];
    tj__rdv *rdv;
    char err[TJ__MSG];
    tj_status st;
} tj__devrun;
static void *tj__device_main(void *arg) {
    tj__devrun *r = (tj__devrun *)arg;
    tj_backend *b = r->p->ctx->backend;
    tj__run_body(r->p, r->args, r->outs, r->arena, r->err, r->nth, r->dev, r->rdv);
    if (b) { /* the device's streams may still run; its kernel errors come back here */
        char e[TJ__MSG];
        e[0] = 0;
        if (b->sync(b, r->dev, e, sizeof e) && !r->err[0])
            snprintf(r->err, sizeof r->err, "%s", e[0] ? e : "the backend failed to synchronise");
        if (r->p->ctx->profile) tj__marks_to_times(r->p->ctx, r->rdv, r->dev);
    }
    if (r->err[0]) r->st = TJ_ERR_ARG;
    return NULL;
}
/* the first run allocates exactly the planned bytes; later runs of the
   same program reuse them (one call at a time per program) */
static tj_status tj__arenas(tj__devrun *r) {
    tj_prog *p = r->p;
    tj_ctx *c = p->ctx;
    int s;
    for (s = 0; s < 2; s++)
        if (p->arena_bytes[s]) {
            void **raw = &p->arena_raw[r->dev][s];
            if (!*raw) {
                if (!tj__mem_alloc(c, s, p->arena_bytes[s], raw)) {
                    snprintf(r->err, sizeof r->err, "out of memory allocating a %lld-byte %s arena on device %d", (long long)p->arena_bytes[s],
                             s ? "host" : "device", r->dev);
                    return r->st = TJ_ERR_OOM;
                }
                tj__count(c, 1, s == TJ_SPACE_HOST ? -1 : r->dev, p->arena_bytes[s]); /* (host memory is no device's: device_bytes is what peak_bytes predicts) */
            }
            r->arena[s] = c->backend ? (char *)*raw : (char *)(((uintptr_t)*raw + TJ__ALIGN - 1) & ~(uintptr_t)(TJ__ALIGN - 1));
        }
    return TJ_OK;
}
/* In process mode a process that cannot run (an input it lacks, out of
   memory) says so to the others, which then do not start either. */
static void tj__run_refused(tj_prog *p, tj_status st) {
    tj_ctx *c = p->ctx;
    tj_status g;
    char out[TJ__MSG];
    if (tj__nprocs(c) > 1) tj__agree(c, st, -1, 0, c->msg, &g, out, sizeof out, NULL);
}
static tj_status tj__execute(tj_prog *p, tj_array *const *args, tj_array **outs) {
    tj_ctx *c = p->ctx;
    int lo, nl = tj_local_devices(c, &lo), d, i, j, np = p->g->nparam, nth, bad = -1, multi = tj__nprocs(c) > 1;
    tj__devrun *runs;
    void **bufs;
    pthread_t th[TJ_MAXDEV];
    tj__rdv rdv;
    tj_status st = TJ_OK, gst;
    char out[TJ__MSG];
    runs = (tj__devrun *)tj__calloc(sizeof(tj__devrun) * (size_t)nl);
    bufs = (void **)tj__calloc(sizeof(void *) * (size_t)nl * (size_t)(np + p->nout + 1));
    if (!runs || !bufs) {
        TJ_FREE(runs);
        TJ_FREE(bufs);
        tj__err(c, TJ_ERR_OOM, p->file, p->line, "run '%s': out of memory", p->name);
        tj__run_refused(p, TJ_ERR_OOM);
        return TJ_ERR_OOM;
    }
    memset(&rdv, 0, sizeof rdv);
    rdv.t0 = c->profile ? tj__now_us() : 0;
    nth = c->threads / nl;
    for (i = 0; i < nl; i++) {
        void **b = bufs + (size_t)i * (size_t)(np + p->nout + 1);
        d = lo + i;
        for (j = 0; j < np; j++) b[j] = args[j]->data[d];
        for (j = 0; j < p->nout; j++) b[np + 1 + j] = outs[j]->data[d];
        runs[i].p = p;
        runs[i].dev = d;
        runs[i].nth = nth < 1 ? 1 : nth;
        runs[i].args = b;
        runs[i].outs = b + np + 1;
        runs[i].rdv = &rdv;
        if (tj__arenas(&runs[i]) && bad < 0) bad = i;
    }
    /* no device starts unless all can (in every process): a device that
       cannot would leave its peers waiting in a collective */
    if (multi) {
        if (tj__agree(c, bad >= 0 ? runs[bad].st : TJ_OK, bad >= 0 ? runs[bad].dev : -1, 0, bad >= 0 ? runs[bad].err : "", &gst, out, sizeof out, NULL))
            gst = TJ_ERR_IO;
        if (gst != TJ_OK) {
            tj__err(c, gst, NULL, 0, "run '%s': %s", p->name, out);
            st = gst;
        }
    } else if (bad >= 0) {
        tj__err(c, runs[bad].st, NULL, 0, "run '%s'%s: %s", p->name, c->ndev > 1 ? " (a device)" : "", runs[bad].err);
        st = runs[bad].st;
    }
    if (st == TJ_OK) {
        if (nl == 1) tj__device_main(&runs[0]);
#if TJ__FIBERS
        else if (c->threads < nl && !c->backend && !multi && !c->no_fibers && c->procs &&
                 !tj__fibers_run(runs, sizeof *runs, nl, c->threads, &c->procs->fiber_switches))
            c->procs->fiber_runs++; /* the devices ran as fibers (simulated devices as fibers, above) */
#endif
        else {
            for (i = 0; i < nl; i++)
                if (pthread_create(&th[i], NULL, tj__device_main, &runs[i])) {
                    /* the started devices wait for this one in their next
                       collective until the transport's timeout */
                    int k;
                    tj__err(c, TJ_ERR_OOM, p->file, p->line, "run '%s': cannot start the thread of device %d", p->name, lo + i);
                    for (k = 0; k < i; k++) pthread_join(th[k], NULL);
                    st = TJ_ERR_OOM;
                    break;
                }
            for (i = 0; i < nl && st == TJ_OK; i++) pthread_join(th[i], NULL);
        }
        for (i = 0, bad = -1; i < nl; i++)
            if (runs[i].st != TJ_OK && bad < 0) bad = i;
        if (multi) { /* an error anywhere is an error everywhere */
            int lost = tj__agree(c, bad >= 0 ? runs[bad].st : TJ_OK, bad >= 0 ? runs[bad].dev : -1, 0, bad >= 0 ? runs[bad].err : "", &gst, out, sizeof out, NULL);
            if (bad >= 0 && st == TJ_OK) {
                tj__err(c, runs[bad].st, NULL, 0, "run '%s': process %d (device %d): %s", p->name, tj_process_index(c), runs[bad].dev, runs[bad].err);
                st = runs[bad].st;
            } else if (st == TJ_OK && (lost || gst != TJ_OK)) {
                tj__err(c, lost ? TJ_ERR_IO : gst, NULL, 0, "run '%s': %s", p->name, out);
                st = lost ? TJ_ERR_IO : gst;
            }
        } else if (bad >= 0 && st == TJ_OK) {
            tj__err(c, runs[bad].st, NULL, 0, "run '%s'%s: %s", p->name, c->ndev > 1 ? " (a device)" : "", runs[bad].err);
            st = runs[bad].st;
        }
        if (st == TJ_OK && c->status) st = c->status;
    }
    if (c->profile) { /* keep this run's timeline, devices in order */
        int total = 0;
        for (d = 0; d < c->ndev; d++) total += rdv.nev[d];
        TJ_FREE(p->events);
        p->nevents = 0;
        p->events = (tj_event *)tj__malloc(sizeof(tj_event) * (size_t)(total + 1));
        for (d = 0; p->events && d < c->ndev; d++) {
            if (rdv.nev[d]) memcpy(p->events + p->nevents, rdv.ev[d], sizeof(tj_event) * (size_t)rdv.nev[d]);
            p->nevents += rdv.nev[d];
        }
    }
    tj__rdv_free(&rdv);
    TJ_FREE(runs);
    TJ_FREE(bufs);
    return st;
}

/* ---- the device-like CPU backend (devsim) ----
   Runs the CPU kernels the way a GPU backend runs its own, so the runner's
   control flow, stream ordering and copies are tested without a GPU
   (TJ_BACKEND=devsim, or tj_set_backend(ctx, tj_devsim_backend())).
   Memory: every allocation (device and host space) is returned as a
   poisoned pointer, the real address plus 2^62: not canonical on x86-64 and
   above any user address elsewhere, so the host code that dereferences one
   instead of going through copy faults at once (a SEGV, or an ASan report).
   Pointer arithmetic and comparisons on them still work. New memory is
   filled with 0xff bytes (NaN in every float dtype), and 64 guard bytes
   after each block are checked at free. Streams: two per device, compute
   and copy, each a queue run in issue order by a worker thread of its own;
   run and copy go to the compute stream, copy_async to the copy stream,
   and every call returns when the work is queued. Events: each stream
   counts the items it has finished; an item may first wait until another
   stream has finished a given count (a copy_async waits for the compute
   work issued before it, a wait for the copy with its ticket, the ticket
   being the copy stream's count after it). A copy to or from host space
   on a device's stream first sleeps TJ_DEVSIM_COPY_DELAY_US microseconds
   (default 100), as a slow bus would, so the runner's missing wait reads
   stale bytes (tests see a wrong result) instead of winning a race by
   luck, and a copy on the compute stream costs what it costs on the copy
   stream (demos/bench_copy_stream.c compares the two). A mark is an item
   that reads the clock when its stream reaches it. A kernel's error goes
   to the stream's slot; after it, the stream skips everything but
   collectives (as the CPU device thread does) until sync hands the error
   back. */
#define TJ__DS_POISON ((uintptr_t)1 << 62)
#define TJ__DS_QUEUE 64
#define TJ__DS_GUARD 64
#define TJ__DS_MAGIC 0x7464657673696d21ull
struct tj__ds_stream;
typedef struct {
    int kind; /* 0: kernel, 1: copy, 2: only the wait, 3: mark */
    tj__kern k;
    void *dst;
    const void *src;
    size_t n;
    int mark, delay_us;           /* kind 3: the mark's index; kind 1: sleep first */
    struct tj__ds_stream *after;  /* first wait until this stream has finished */
    uint64_t after_n;             /* ... this many items (after NULL: no wait) */
} tj__ds_item;
typedef struct tj__ds_stream {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t more, idle;
    tj__ds_item *q;
    int head, count, quit;
    uint64_t issued, done; /* items queued and finished since the start */
    char err[TJ__MSG];
} tj__ds_stream;
typedef struct {
    tj_backend b;
    pthread_mutex_t mu;           /* starting streams; the mark tables       */
    tj__ds_stream *st[TJ_MAXDEV][2]; /* per device: compute, copy           */
    double *mt[TJ_MAXDEV];        /* per device: the time of each mark       */
    int nmt[TJ_MAXDEV], capmt[TJ_MAXDEV];
    int copy_delay_us;
} tj__devsim;
typedef struct {
    void *raw;
    size_t n;
    uint64_t magic;
} tj__ds_hdr;
static void *tj__ds_real(const void *p) { return p ? (void *)((uintptr_t)p - TJ__DS_POISON) : NULL; }
static void *tj__ds_alloc(tj_backend *b, int dev, int space, size_t n) {
    char *raw, *p;
    tj__ds_hdr *h;
    (void)b;
    (void)dev;
    if (space != TJ_SPACE_DEVICE && space != TJ_SPACE_HOST) return NULL;
    raw = (char *)TJ_MALLOC(n + sizeof(tj__ds_hdr) + 2 * TJ__ALIGN + TJ__DS_GUARD);
    if (!raw) return NULL;
    p = (char *)(((uintptr_t)raw + sizeof(tj__ds_hdr) + TJ__ALIGN - 1) & ~(uintptr_t)(TJ__ALIGN - 1));
    h = (tj__ds_hdr *)(void *)(p - sizeof(tj__ds_hdr));
    h->raw = raw;
    h->n = n;
    h->magic = TJ__DS_MAGIC;
    memset(p, 0xff, n);
    memset(p + n, 0xcd, TJ__DS_GUARD);
    return (void *)((uintptr_t)p + TJ__DS_POISON);
}
/* wait until stream s has run everything queued */
static void tj__ds_drain(tj__ds_stream *s) {
    pthread_mutex_lock(&s->mu);
    while (s->count) pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
}
static void tj__ds_drain_all(tj__devsim *d) {
    int i, j;
    for (i = 0; i < TJ_MAXDEV; i++)
        for (j = 0; j < 2; j++)
            if (d->st[i][j]) tj__ds_drain(d->st[i][j]);
}
static void tj__ds_free(tj_backend *b, int dev, int space, void *p) {
    tj__ds_hdr *h;
    char *q;
    int i;
    (void)dev;
    (void)space;
    if (!p) return;
    tj__ds_drain_all((tj__devsim *)b->state); /* queued work may still use p */
    q = (char *)tj__ds_real(p);
    h = (tj__ds_hdr *)(void *)(q - sizeof(tj__ds_hdr));
    if (h->magic != TJ__DS_MAGIC) {
        fprintf(stderr, "tinyjax devsim: free of %p, which devsim did not allocate (or its header was overwritten)\n", p);
        abort();
    }
    for (i = 0; i < TJ__DS_GUARD; i++)
        if ((unsigned char)q[h->n + (size_t)i] != 0xcd) {
            fprintf(stderr, "tinyjax devsim: a kernel or copy wrote past the end of a %zu-byte block (guard byte %d)\n", h->n, i);
            abort();
        }
    h->magic = 0;
    TJ_FREE(h->raw);
}
/* the worker's hold on the backend, for the mark tables */
typedef struct {
    tj__ds_stream *s;
    tj__devsim *d;
    int dev;
} tj__ds_worker_arg;
static void *tj__ds_worker(void *arg) {
    tj__ds_stream *s = ((tj__ds_worker_arg *)arg)->s;
    tj__devsim *d = ((tj__ds_worker_arg *)arg)->d;
    int dev = ((tj__ds_worker_arg *)arg)->dev;
    free(arg);
    for (;;) {
        tj__ds_item *it;
        pthread_mutex_lock(&s->mu);
        while (!s->count && !s->quit) pthread_cond_wait(&s->more, &s->mu);
        if (!s->count) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        it = &s->q[s->head]; /* the producer leaves this slot alone until count drops */
        pthread_mutex_unlock(&s->mu);
        if (it->after) { /* an event: the other stream's progress */
            pthread_mutex_lock(&it->after->mu);
            while (it->after->done < it->after_n) pthread_cond_wait(&it->after->idle, &it->after->mu);
            pthread_mutex_unlock(&it->after->mu);
        }
        if (it->kind == 1) {
            if (it->delay_us > 0) tj__nap(it->delay_us);
            memcpy(it->dst, it->src, it->n);
        } else if (it->kind == 3) {
            pthread_mutex_lock(&d->mu);
            d->mt[dev][it->mark] = tj__now_us();
            pthread_mutex_unlock(&d->mu);
        } else if (it->kind == 0 && it->k.n->members) {
            if (!s->err[0]) tj__k_fused(it->k.n, it->k.in, it->k.pout, it->k.nthreads);
        } else if (it->kind == 0 && (!s->err[0] || TJ__IS_COLL(it->k.n->op))) {
            it->k.err = s->err;
            tj__ops[it->k.n->op].cpu(&it->k);
        }
        if (it->kind == 0 && it->k.heap) {
            free(it->k.heap); /* (tj__ds_run's) */
            it->k.heap = NULL;
        }
        pthread_mutex_lock(&s->mu);
        s->head = (s->head + 1) % TJ__DS_QUEUE;
        s->count--;
        s->done++;
        pthread_cond_broadcast(&s->idle); /* drains wait for 0, producers for a free slot, other streams for done */
        pthread_mutex_unlock(&s->mu);
    }
}
static void tj__ds_stream_free(tj__ds_stream *s) {
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->more);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->more);
    pthread_cond_destroy(&s->idle);
    free(s->q);
    free(s);
}
/* a new stream of device dev with its worker, or NULL */
static tj__ds_stream *tj__ds_stream_new(tj__devsim *d, int dev) {
    /* the simulated hardware's queue: plain calloc, not the library's
       allocator (TJ_MALLOC), whose failures are out of memory on the host
       (test_oom injects them) */
    tj__ds_stream *s = (tj__ds_stream *)calloc(1, sizeof *s);
    tj__ds_worker_arg *a = (tj__ds_worker_arg *)malloc(sizeof *a);
    if (!s || !a || !(s->q = (tj__ds_item *)calloc(TJ__DS_QUEUE, sizeof(tj__ds_item)))) {
        free(s);
        free(a);
        return NULL;
    }
    a->s = s;
    a->d = d;
    a->dev = dev;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->more, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (pthread_create(&s->th, NULL, tj__ds_worker, a)) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->more);
        pthread_cond_destroy(&s->idle);
        free(s->q);
        free(s);
        free(a);
        return NULL;
    }
    return s;
}
/* device dev's stream w (0: compute, 1: copy), both started on first use */
static tj__ds_stream *tj__ds_stream_of(tj__devsim *d, int dev, int w) {
    tj__ds_stream *s;
    if (dev < 0 || dev >= TJ_MAXDEV) return NULL;
    pthread_mutex_lock(&d->mu);
    if (!d->st[dev][0]) {
        d->st[dev][0] = tj__ds_stream_new(d, dev);
        d->st[dev][1] = d->st[dev][0] ? tj__ds_stream_new(d, dev) : NULL;
        if (d->st[dev][0] && !d->st[dev][1]) {
            tj__ds_stream_free(d->st[dev][0]);
            d->st[dev][0] = NULL;
        }
    }
    s = d->st[dev][w];
    pthread_mutex_unlock(&d->mu);
    return s;
}
/* a free slot at the queue's tail (waits while the queue is full), cleared;
   the caller fills it and calls tj__ds_push */
static tj__ds_item *tj__ds_slot(tj__ds_stream *s) {
    tj__ds_item *it;
    pthread_mutex_lock(&s->mu);
    while (s->count == TJ__DS_QUEUE) pthread_cond_wait(&s->idle, &s->mu);
    it = &s->q[(s->head + s->count) % TJ__DS_QUEUE];
    pthread_mutex_unlock(&s->mu);
    it->after = NULL;
    it->after_n = 0;
    it->delay_us = 0;
    return it;
}
/* queue the filled slot; returns the stream's count of items once it has run */
static uint64_t tj__ds_push(tj__ds_stream *s) {
    uint64_t n;
    pthread_mutex_lock(&s->mu);
    s->count++;
    n = ++s->issued;
    pthread_cond_broadcast(&s->more);
    pthread_mutex_unlock(&s->mu);
    return n;
}
/* the items stream s has been given so far (an event recorded now) */
static uint64_t tj__ds_issued(tj__ds_stream *s) {
    uint64_t n;
    pthread_mutex_lock(&s->mu);
    n = s->issued;
    pthread_mutex_unlock(&s->mu);
    return n;
}
static int tj__ds_copy(tj_backend *b, int dev, void *dst, int dspace, const void *src, int sspace, size_t n) {
    tj__devsim *d = (tj__devsim *)b->state;
    tj__ds_stream *s;
    tj__ds_item *it;
    void *rd = dspace == TJ_SPACE_USER ? dst : tj__ds_real(dst);
    const void *rs = sspace == TJ_SPACE_USER ? src : tj__ds_real(src);
    if (!n) return 0;
    if (dev < 0) { /* arrays in and out: after all work, done on return */
        tj__ds_drain_all(d);
        memcpy(rd, rs, n);
        return 0;
    }
    if (!(s = tj__ds_stream_of(d, dev, 0))) return 1;
    it = tj__ds_slot(s);
    it->kind = 1;
    it->dst = rd;
    it->src = rs;
    it->n = n;
    if (dspace == TJ_SPACE_HOST || sspace == TJ_SPACE_HOST) it->delay_us = d->copy_delay_us; /* over the bus */
    tj__ds_push(s);
    return 0;
}
/* on device dev's copy stream after the compute work issued so far */
static uint64_t tj__ds_copy_async(tj_backend *b, int dev, void *dst, int dspace, const void *src, int sspace, size_t n) {
    tj__devsim *d = (tj__devsim *)b->state;
    tj__ds_stream *s = tj__ds_stream_of(d, dev, 1);
    tj__ds_item *it;
    if (!s || dspace == TJ_SPACE_USER || sspace == TJ_SPACE_USER) return 0; /* user memory: copy with dev -1 */
    it = tj__ds_slot(s);
    it->kind = 1;
    it->dst = tj__ds_real(dst);
    it->src = tj__ds_real(src);
    it->n = n;
    it->delay_us = d->copy_delay_us;
    it->after = d->st[dev][0];
    it->after_n = tj__ds_issued(d->st[dev][0]);
    return tj__ds_push(s);
}
/* device dev's compute stream waits for the copy stream's item `ticket` */
static int tj__ds_wait(tj_backend *b, int dev, uint64_t ticket, char *err, size_t errlen) {
    tj__devsim *d = (tj__devsim *)b->state;
    tj__ds_stream *s = tj__ds_stream_of(d, dev, 0);
    tj__ds_item *it;
    if (!s) {
        if (err && errlen) snprintf(err, errlen, "devsim: cannot start the streams of device %d", dev);
        return 1;
    }
    it = tj__ds_slot(s);
    it->kind = 2;
    it->after = d->st[dev][1];
    it->after_n = ticket;
    tj__ds_push(s);
    return 0;
}
/* a mark on device dev's stream w: its index in the device's table */
static int tj__ds_mark(tj_backend *b, int dev, int w) {
    tj__devsim *d = (tj__devsim *)b->state;
    tj__ds_stream *s = tj__ds_stream_of(d, dev, w ? 1 : 0);
    tj__ds_item *it;
    int m;
    if (!s) return -1;
    pthread_mutex_lock(&d->mu);
    if (d->nmt[dev] == d->capmt[dev]) {
        int nc = d->capmt[dev] ? 2 * d->capmt[dev] : 256;
        double *nt = (double *)realloc(d->mt[dev], sizeof(double) * (size_t)nc);
        if (!nt) {
            pthread_mutex_unlock(&d->mu);
            return -1;
        }
        d->mt[dev] = nt;
        d->capmt[dev] = nc;
    }
    m = d->nmt[dev]++;
    d->mt[dev][m] = 0;
    pthread_mutex_unlock(&d->mu);
    it = tj__ds_slot(s);
    it->kind = 3;
    it->mark = m;
    if (w) { /* on the copy stream: where a copy issued now would start */
        it->after = d->st[dev][0];
        it->after_n = tj__ds_issued(d->st[dev][0]);
    }
    tj__ds_push(s);
    return m;
}
/* after sync: the first n marks' times from mark 0; forgets them all */
static int tj__ds_mark_times(tj_backend *b, int dev, double *us, int n) {
    tj__devsim *d = (tj__devsim *)b->state;
    int i;
    if (dev < 0 || dev >= TJ_MAXDEV) return 0;
    pthread_mutex_lock(&d->mu);
    if (n > d->nmt[dev]) n = d->nmt[dev];
    for (i = 0; us && i < n; i++) us[i] = d->mt[dev][i] - d->mt[dev][0];
    d->nmt[dev] = 0;
    pthread_mutex_unlock(&d->mu);
    return us ? n : 0;
}
static int tj__ds_run(tj_backend *b, tj__kern *k) {
    tj__devsim *d = (tj__devsim *)b->state;
    tj__ds_stream *s = tj__ds_stream_of(d, k->dev, 0);
    tj__ds_item *it;
    int j, nout;
    if (!s) {
        snprintf(k->err, TJ__MSG, "devsim: cannot start the streams of device %d", k->dev);
        return 1;
    }
    it = tj__ds_slot(s);
    it->kind = 0;
    it->k = *k; /* the kernel runs later: a copy, with real addresses, and tables of its own */
    nout = k->n->members ? k->n->nmembers : k->n->nproj;
    it->k.heap = NULL;
    it->k.it = it->k.it_s;
    it->k.in = it->k.in_s;
    it->k.pout = it->k.pout_s;
    if (k->nin > TJ__KIN || nout > TJ__KOUT) { /* the simulated device's memory: plain malloc, as its queue */
        void **h = (void **)malloc(sizeof(void *) * ((size_t)k->nin * 2 + (size_t)nout + 1));
        if (!h) {
            snprintf(k->err, TJ__MSG, "devsim: out of memory queueing op '%s' on device %d", tj__opname(k->n->op), k->dev);
            return 1;
        }
        it->k.heap = h;
        it->k.it = (const tj__type **)h;
        it->k.in = (const void **)(h + k->nin);
        it->k.pout = h + 2 * k->nin;
    }
    for (j = 0; j < k->nin; j++) {
        it->k.it[j] = k->it[j];
        it->k.in[j] = tj__ds_real(k->in[j]);
    }
    for (j = 0; j < nout; j++) it->k.pout[j] = tj__ds_real(k->pout[j]);
    it->k.out = tj__ds_real(k->out);
    it->k.scratch = tj__ds_real(k->scratch);
    it->k.scratch_host = tj__ds_real(k->scratch_host);
    it->k.err = NULL; /* the stream's slot, set by the worker */
    tj__ds_push(s);
    return 0;
}
static int tj__ds_sync(tj_backend *b, int dev, char *err, size_t errlen) {
    tj__devsim *d = (tj__devsim *)b->state;
    int i, bad = 0;
    for (i = dev < 0 ? 0 : dev; i < (dev < 0 ? TJ_MAXDEV : dev + 1) && i < TJ_MAXDEV; i++) {
        tj__ds_stream *s = d->st[i][0];
        if (!s) continue;
        tj__ds_drain(s);
        tj__ds_drain(d->st[i][1]);
        if (s->err[0]) {
            if (!bad && err && errlen) snprintf(err, errlen, "%s", s->err);
            s->err[0] = 0;
            bad = 1;
        }
    }
    return bad;
}
TJDEF tj_backend *tj_devsim_backend(void) {
    tj__devsim *d = (tj__devsim *)tj__calloc(sizeof *d);
    const char *e = getenv("TJ_DEVSIM_COPY_DELAY_US");
    if (!d) return NULL;
    pthread_mutex_init(&d->mu, NULL);
    d->copy_delay_us = e && *e ? atoi(e) : 100;
    d->b.name = "devsim";
    d->b.state = d;
    d->b.alloc = tj__ds_alloc;
    d->b.free = tj__ds_free;
    d->b.copy = tj__ds_copy;
    d->b.run = tj__ds_run;
    d->b.sync = tj__ds_sync;
    d->b.fused_groups = 1;
    d->b.copy_async = tj__ds_copy_async;
    d->b.wait = tj__ds_wait;
    d->b.mark = tj__ds_mark;
    d->b.mark_times = tj__ds_mark_times;
    return &d->b;
}
TJDEF void tj_devsim_backend_free(tj_backend *b) {
    tj__devsim *d;
    int i, j;
    if (!b) return;
    d = (tj__devsim *)b->state;
    tj__ds_drain_all(d);
    for (i = 0; i < TJ_MAXDEV; i++) {
        for (j = 0; j < 2; j++)
            if (d->st[i][j]) tj__ds_stream_free(d->st[i][j]);
        free(d->mt[i]);
    }
    pthread_mutex_destroy(&d->mu);
    TJ_FREE(d);
}

/* ==== [12] jit: trace + compile + call =================================== */
/* Tracing runs the user's C function once on PARAM nodes shaped like the
   example tree's arrays. Compiling inlines regions, makes every output own
   its buffer (copying an argument or a buffer two outputs share), joins a
   dot and its collective into one node on simulated devices (the
   collective matmul, [11]), compiles each scan body (innermost first: a
   scan's workspace is its body's arena), then schedules and plans. */

static void tj__prog_free_body(tj_prog *p) {
    if (!p) return;
    TJ_FREE(p->sched);
    TJ_FREE(p->out_donor);
    TJ_FREE(p->name);
    TJ_FREE(p);
}
TJDEF void tj_prog_free(tj_prog *p) {
    int i, s;
    if (!p) return;
    for (i = 0; i < TJ_MAXDEV; i++)
        for (s = 0; s < 2; s++)
            if (p->arena_raw[i][s]) { /* to the backend that made it, even after a tj_set_backend */
                if (p->backend) p->backend->free(p->backend, -1, s, p->arena_raw[i][s]);
                else TJ_FREE(p->arena_raw[i][s]);
                tj__count(p->ctx, 1, s == TJ_SPACE_HOST ? -1 : i, -p->arena_bytes[s]);
            }
    tj__graph_free(p->g);
    for (i = 0; i < p->nout; i++) TJ_FREE(p->out_names[i]);
    TJ_FREE(p->out_names);
    TJ_FREE(p->outs);
    TJ_FREE(p->donate);
    tj_tree_free(p->static_out);
    tj_tree_free(p->static_in);
    TJ_FREE(p->events);
    tj__prog_free_body(p);
}
static tj_node *tj__raw_node(tj_graph *g, const tj_node *like, int op, const tj__type *t, int nin, tj_node *const *in); /* in [9] */
/* outputs must own their buffers: copy arguments and shared buffers */
static tj_status tj__own_outputs(tj_graph *g, tj_node **outs, int n, int resolve_partial) {
    int i, j;
    for (i = 0; i < n; i++) {
        int shared;
        if (outs[i]->t.partial && resolve_partial) { /* finish pending sums (a scan body's
            outputs may stay partial: the scan's output type says so) */
            int saved = g->cur_pass;
            g->cur_pass = outs[i]->pass;
            outs[i] = tj__reshard(outs[i], outs[i]->t.sh, "output", outs[i]->file, outs[i]->line);
            g->cur_pass = saved;
            if (!outs[i]) return g->ctx->status ? g->ctx->status : TJ_ERR_OOM;
        }
        shared = tj__root(outs[i])->op == TJ__OP_PARAM;
        for (j = 0; j < i; j++) shared |= tj__root(outs[j]) == tj__root(outs[i]);
        if (shared && outs[i]->t.partial && !resolve_partial) { /* a body output stays an unreduced sum: copy it as it is */
            tj_node *cp = tj__raw_node(g, NULL, TJ__OP_COPY, &outs[i]->t, 1, &outs[i]), **nn;
            if (cp && g->n == g->cap) {
                if ((nn = (tj_node **)TJ_REALLOC(g->nodes, sizeof(tj_node *) * (size_t)(2 * g->cap + 1)))) g->nodes = nn, g->cap = 2 * g->cap + 1;
                else TJ_FREE(cp->in), TJ_FREE(cp), cp = NULL;
            }
            if (!cp) return TJ_ERR_OOM;
            cp->file = outs[i]->file;
            cp->line = outs[i]->line;
            cp->pass = outs[i]->pass;
            cp->space = outs[i]->space;
            cp->id = g->n;
            g->nodes[g->n++] = cp;
            outs[i] = cp;
        } else if (shared) {
            int saved = g->cur_pass;
            g->cur_pass = outs[i]->pass;
            outs[i] = tj__copy(outs[i]->file, outs[i]->line, outs[i]);
            g->cur_pass = saved;
            if (!outs[i]) return g->ctx->status ? g->ctx->status : TJ_ERR_OOM;
            outs[i]->space = outs[i]->in[0]->space;
        }
    }
    return TJ_OK;
}
static tj_status tj__compile(tj_prog *p);
/* [8] A nested scan that an enclosing backward body recomputes (tj__rerun_scan)
   keeps, as JAX's known scan does, only the outputs something reads: the
   final carries, the ys the program uses and the stacks the enclosing
   policy keeps. The stacks its own backward pass read, now read by the
   re-run's copy of it, are dropped from its body before it is compiled (no
   stacked buffer, no copy per iteration). Done at compile, after every
   tj_grad: a later derivative may still clone the forward scan's outputs.
   Returns 1 if anything was dropped (schedule again). */
static int tj__drop_reran_outputs(tj_prog *p) {
    int i, j, k, dropped = 0;
    for (i = 0; i < p->nsched; i++) {
        tj_node *n = p->sched[i];
        tj_graph *b = n->sub;
        char *used;
        if (n->op != TJ__OP_SCAN || !n->reran || !b || b->prog || b->refs != 1 || n->rerun || b->nout != n->nproj) continue;
        if (!(used = (char *)tj__calloc((size_t)n->nproj + 1))) return -1;
        for (j = 0; j < n->a.ncarry; j++) used[j] = 1;
        for (j = 0; j < p->nsched; j++)
            for (k = 0; k < p->sched[j]->nin; k++) {
                const tj_node *x = p->sched[j]->in[k];
                if (x->op == TJ__OP_PROJ && x->in[0] == n && p->sched[j]->op != TJ__OP_PROJ) used[x->a.index] = 1;
            }
        for (j = 0; j < p->nout; j++)
            for (k = 0; k < n->nproj; k++) {
                const tj_node *o = p->outs[j];
                while (o != n->proj[k] && (tj__ops[o->op].flags & TJ__VIEW) && o->nin == 1) o = o->in[0];
                if (o == n->proj[k]) used[k] = 1;
            }
        for (j = k = 0; j < n->nproj; j++)
            if (used[j]) {
                b->outs[k] = b->outs[j];
                n->proj[k] = n->proj[j];
                n->proj[k]->a.index = k;
                k++;
            } else
                n->proj[j]->live = 0, dropped = 1;
        b->nout = n->nproj = k;
        TJ_FREE(used);
    }
    return dropped;
}
/* compile the bodies of the scans this program runs */
static tj_status tj__compile_bodies(tj_prog *p) {
    int i;
    for (i = 0; i < p->nsched; i++) {
        tj_node *n = p->sched[i];
        tj_graph *b = n->sub;
        tj_prog *bp;
        if (!b || b->prog) continue;
        bp = (tj_prog *)tj__calloc(sizeof *bp);
        if (!bp) return TJ_ERR_OOM;
        b->prog = bp;
        bp->ctx = p->ctx;
        bp->g = b;
        bp->name = tj__strdup("scan body");
        bp->file = b->file;
        bp->line = b->line;
        bp->outs = b->outs;
        bp->nout = b->nout;
        bp->out_donor = (int *)tj__calloc(sizeof(int) * (size_t)(b->nout + 1));
        if (!bp->name || !bp->out_donor) return TJ_ERR_OOM;
        if (tj__own_outputs(b, b->outs, b->nout, 0) || tj__compile(bp)) return p->ctx->status ? p->ctx->status : TJ_ERR_OOM;
    }
    return TJ_OK;
}
static tj_status tj__coll_matmul(tj_prog *p); /* [11] transports */
static tj_status tj__compile(tj_prog *p) {
    tj_status st = TJ_OK;
    if (!getenv("TJ_NO_INLINE")) { /* regions run in the enclosing program (see [9]) */
        if (tj__inline_regions(p->g, p->outs, p->nout)) {
            tj__err(p->ctx, TJ_ERR_OOM, p->file, p->line, "jit '%s': out of memory inlining regions", p->name);
            return TJ_ERR_OOM;
        }
        if (tj__own_outputs(p->g, p->outs, p->nout, 0)) return p->ctx->status ? p->ctx->status : TJ_ERR_OOM;
    }
    st = tj__coll_matmul(p);
    if (!st) st = tj__schedule(p);
    if (!st && tj__drop_reran_outputs(p)) st = tj__schedule(p); /* ([8]) */
    if (!st) st = tj__compile_bodies(p);
    if (!st) st = tj__plan(p);
    return st;
}
static int tj__donated(const char *list, const char *name) {
    const char *s = list;
    size_t n;
    if (!list) return 0;
    while (*s) {
        while (*s == ' ' || *s == ',') s++;
        n = 0;
        while (s[n] && s[n] != ' ' && s[n] != ',') n++;
        if (n && ((strlen(name) == n && strncmp(name, s, n) == 0) || (s[n - 1] == '.' && strncmp(name, s, n) == 0))) return 1;
        s += n;
    }
    return 0;
}
TJDEF tj_prog *tj_jit_at(const char *file, int line, tj_ctx *c, const char *name, tj_fn fn, void *user, const tj_tree *ex, const tj_jit_opts *opts) {
    tj_prog *p;
    tj_tree *tin = NULL, *tout = NULL;
    int i, nv, agreed = 0;
    if (!c) return NULL;
    if (!fn || !ex) {
        tj__err(c, TJ_ERR_ARG, file, line, "jit '%s': NULL function or example tree", name ? name : "?");
        return NULL;
    }
    if (c->status != TJ_OK) { /* errors are sticky: say so, rather than repeat an old message as if new */
        char pre[256];
        int k = snprintf(pre, sizeof pre, "jit '%.64s' at %.64s:%d: an earlier error was never cleared (call tj_clear_error): ", name ? name : "?", tj__base(file), line);
        size_t ol = strlen(c->msg);
        if (!strstr(c->msg, "never cleared (call tj_clear_error)") && k > 0 && (size_t)k < sizeof pre) {
            if (ol + (size_t)k >= sizeof c->msg) ol = sizeof c->msg - (size_t)k - 1;
            memmove(c->msg + k, c->msg, ol);
            c->msg[(size_t)k + ol] = 0;
            memcpy(c->msg, pre, (size_t)k);
        }
        return NULL;
    }
    p = (tj_prog *)tj__calloc(sizeof *p);
    if (!p) {
        tj__err(c, TJ_ERR_OOM, file, line, "jit: out of memory");
        return NULL;
    }
    p->ctx = c;
    p->backend = c->backend;
    p->mesh_gen = c->mesh_gen;
    p->file = file;
    p->line = line;
    p->name = tj__strdup(name ? name : "fn");
    p->g = tj__graph_new(c, file, line);
    tin = tj_tree_new(c);
    tout = tj_tree_new(c);
    p->static_out = tj_tree_new(c);
    p->static_in = tj_tree_new(c);
    if (!p->g || !tin || !tout || !p->static_out || !p->static_in || !p->name) goto fail;
    /* parameters: one PARAM node per array leaf */
    for (i = 0; i < ex->n; i++) {
        const tj__leaf *l = &ex->leaf[i];
        if (l->kind == TJ_LEAF_ARRAY) {
            tj_node *n;
            /* only the shape and sharding count (abstract examples, or arrays of another backend, are fine) */
            if (!tj__array_mesh_ok(l->arr, "jit", file, line) || (l->arr->deleted && !tj__array_live(l->arr, "jit", file, line))) goto fail;
            n = tj__node(p->g, TJ__OP_PARAM, &l->arr->t, 0, NULL, NULL, file, line);
            if (!n || !(n->name = tj__strdup(l->name)) || tj__add_param(p->g, n)) goto fail;
            tj_tree_set_v(tin, l->name, n);
        } else if (l->kind == TJ_LEAF_VALUE) {
            tj__err(c, TJ_ERR_ARG, file, line, "jit '%s': example leaf '%s' is a traced value, not an array", p->name, l->name);
            goto fail;
        } else if (l->kind == TJ_LEAF_INT) tj_tree_set_int(tin, l->name, l->i), tj_tree_set_int(p->static_in, l->name, l->i);
        else if (l->kind == TJ_LEAF_FLOAT) tj_tree_set_float(tin, l->name, l->f), tj_tree_set_float(p->static_in, l->name, l->f);
        else tj_tree_set_string(tin, l->name, l->s), tj_tree_set_string(p->static_in, l->name, l->s);
    }
    if (c->status) goto fail;
    {
        tj_graph *outer = tj__tracing(); /* a tj_jit inside a traced function */
        tj__set_tracing(p->g);
        fn(p->g, tin, tout, user);
        tj__set_tracing(outer);
    }
    if (c->status) goto fail;
    /* outputs */
    for (i = 0, nv = 0; i < tout->n; i++) nv += tout->leaf[i].kind == TJ_LEAF_VALUE;
    p->outs = (tj_node **)tj__calloc(sizeof(tj_node *) * (size_t)(nv + 1));
    p->out_names = (char **)tj__calloc(sizeof(char *) * (size_t)(nv + 1));
    p->out_donor = (int *)tj__calloc(sizeof(int) * (size_t)(nv + 1));
    p->donate = (int *)tj__calloc(sizeof(int) * (size_t)(p->g->nparam + 1));
    if (!p->outs || !p->out_names || !p->out_donor || !p->donate) goto oom;
    for (i = 0; i < tout->n; i++) {
        tj__leaf *l = &tout->leaf[i];
        if (l->kind == TJ_LEAF_ARRAY) { /* (it came back as the int 0) */
            tj__err(c, TJ_ERR_ARG, file, line, "jit '%s': output '%s' is an array; a traced function outputs traced values (tj_tree_set_v; a constant: tj_fill)",
                    p->name, l->name);
            goto fail;
        }
        if (l->kind != TJ_LEAF_VALUE) {
            tj__leaf *s = tj__tree_slot(p->static_out, l->name);
            if (!s) goto fail;
            s->kind = l->kind;
            s->i = l->i;
            s->f = l->f;
            s->s = l->kind == TJ_LEAF_STRING ? tj__strdup(l->s) : NULL;
            continue;
        }
        if (l->v->g != p->g) {
            tj__err(c, TJ_ERR_ARG, file, line, "jit '%s': output '%s' was made in another traced function", p->name, l->name);
            goto fail;
        }
        if (!(p->out_names[p->nout] = tj__strdup(l->name))) goto oom;
        p->outs[p->nout++] = l->v;
    }
    if (tj__own_outputs(p->g, p->outs, p->nout, 1)) goto fail;
    for (i = 0; i < p->g->nparam; i++) p->donate[i] = opts && tj__donated(opts->donate, p->g->params[i]->name);
    if (opts && opts->donate) { /* every name or prefix in the list must match some input leaf */
        const char *s = opts->donate;
        while (*s) {
            size_t k = 0;
            int hit = 0;
            char one[256];
            while (*s == ' ' || *s == ',') s++;
            while (s[k] && s[k] != ' ' && s[k] != ',') k++;
            if (!k) break;
            snprintf(one, sizeof one, "%.*s", (int)(k < 255 ? k : 255), s);
            for (i = 0; i < p->g->nparam && !hit; i++) hit = tj__donated(one, p->g->params[i]->name);
            if (!hit) {
                tj__err(c, TJ_ERR_ARG, file, line, "jit '%s': donate names '%s', which matches no input leaf (a prefix ends in '.')", p->name, one);
                goto fail;
            }
            s += k;
        }
    }
    if (c->dump) {
        fprintf(stderr, "=== traced graph '%s' (%d nodes)\n", p->name, p->g->n);
        tj_graph_print(p->g, stderr);
    }
    if (tj__compile(p)) goto fail;
    if (c->dump) {
        fprintf(stderr, "=== scheduled program '%s'\n", p->name);
        tj_prog_print(p, stderr);
        tj_memory_print(p, stderr);
        if (p->g->report) tj_prog_residuals_print(p, stderr);
    }
    agreed = 1; /* with the other processes (process mode); then make the device groups */
    if (tj__procs_jit(c, p, p->name)) goto fail;
    tj_tree_free(tin);
    tj_tree_free(tout);
    p->g->finished = 1;
    return p;
oom:
    tj__err(c, TJ_ERR_OOM, file, line, "jit '%s': out of memory", p->name);
fail:
    if (!c->status) tj__err(c, TJ_ERR_OOM, file, line, "jit '%s': out of memory while tracing", name ? name : "?");
    tj__err_line(c, "in tj_jit", file, line); /* errors of calls without a line of their own (tj_vjp, trees) */
    if (!agreed) tj__procs_jit(c, NULL, name ? name : "fn");
    tj_tree_free(tin);
    tj_tree_free(tout);
    tj_prog_free(p);
    return NULL;
}

static void tj__leaf_text(const tj__leaf *l, char *b, size_t n) { /* a leaf's kind and value, for messages */
    switch (l->kind) {
    case TJ_LEAF_INT: snprintf(b, n, "the int %lld", (long long)l->i); break;
    case TJ_LEAF_FLOAT: snprintf(b, n, "the float %.17g", l->f); break;
    case TJ_LEAF_STRING: snprintf(b, n, "the string \"%.64s%s\"", l->s, strlen(l->s) > 64 ? "..." : ""); break;
    case TJ_LEAF_ARRAY: snprintf(b, n, "an array"); break;
    default: snprintf(b, n, "a traced value"); break;
    }
}
TJDEF tj_status tj_run_at(const char *file, int line, tj_prog *p, const tj_tree *in, tj_tree *out) {
    tj_array **args = NULL, **outs = NULL;
    tj_ctx *c;
    tj_graph *g;
    int i, j, ran = 0;
    tj_status st = TJ_OK;
    char b1[256], b2[256];
    if (!p) return TJ_ERR_ARG;
    if (!in || !out) {
        tj__err(p->ctx, TJ_ERR_ARG, file, line, "run '%s': argument %s is NULL", p->name, !in ? "in" : "out");
        return TJ_ERR_ARG;
    }
    c = p->ctx;
    g = p->g;
    if (in->ctx != c || out->ctx != c) { /* its arrays live on another context's devices */
        tj__err(c, TJ_ERR_ARG, file, line, "run '%s': the %s tree belongs to another context than the program", p->name, in->ctx != c ? "input" : "output");
        tj__run_refused(p, TJ_ERR_ARG);
        return TJ_ERR_ARG;
    }
    if (p->mesh_gen != c->mesh_gen) { /* its shardings and device groups are the old mesh's */
        tj__err(c, TJ_ERR_STATE, file, line, "run '%s': the program was compiled (tj_jit) under another mesh than the context's now (tj_set_mesh or "
                "tj_set_devices after tj_jit): call tj_jit again", p->name);
        tj__run_refused(p, TJ_ERR_STATE);
        return TJ_ERR_STATE;
    }
    if (p->backend != c->backend) { /* fused groups and arenas were made for the other one */
        tj__err(c, TJ_ERR_STATE, file, line,
                "run '%s': the program was compiled (tj_jit) for backend '%s' but the context now runs on backend '%s' (tj_set_backend after "
                "tj_jit): call tj_jit again after tj_set_backend, or set the backend back",
                p->name, p->backend ? p->backend->name : "cpu", c->backend ? c->backend->name : "cpu");
        tj__run_refused(p, TJ_ERR_STATE);
        return TJ_ERR_STATE;
    }
    for (i = 0; i < p->static_in->n; i++) { /* a non-array leaf was a constant of the trace: another value would be ignored */
        const tj__leaf *s = &p->static_in->leaf[i];
        int k = tj_tree_find(in, s->name);
        const tj__leaf *l = k >= 0 ? &in->leaf[k] : NULL;
        if (!l || (l->kind == s->kind && (s->kind == TJ_LEAF_INT ? l->i == s->i
                                          : s->kind == TJ_LEAF_FLOAT ? l->f == s->f || (l->f != l->f && s->f != s->f)
                                                                     : !strcmp(l->s, s->s))))
            continue; /* absent (the program does not read it) or the same */
        tj__leaf_text(l, b1, sizeof b1);
        tj__leaf_text(s, b2, sizeof b2);
        tj__err(c, TJ_ERR_ARG, file, line, "run '%s': input leaf '%s' is %s, but the program was traced with %s (a non-array leaf is a constant "
                "of the trace: tj_jit again for another value, or pass it as an array)", p->name, s->name, b1, b2);
        tj__run_refused(p, TJ_ERR_ARG);
        return TJ_ERR_ARG;
    }
    args = (tj_array **)tj__calloc(sizeof(tj_array *) * (size_t)(g->nparam + 1));
    outs = (tj_array **)tj__calloc(sizeof(tj_array *) * (size_t)(p->nout + 1));
    if (!args || !outs) {
        tj__err(c, TJ_ERR_OOM, file, line, "run '%s': out of memory", p->name);
        st = TJ_ERR_OOM;
        goto done;
    }
    for (i = 0; i < g->nparam; i++) {
        tj_node *n = g->params[i];
        int k = tj_tree_find(in, n->name), same;
        tj_array *a;
        if (k < 0 || in->leaf[k].kind != TJ_LEAF_ARRAY) {
            tj__err(c, TJ_ERR_ARG, file, line, "run '%s': input tree has no array leaf '%s' (want %s)", p->name, n->name, tj_v_describe(n, b1, sizeof b1));
            st = TJ_ERR_ARG;
            goto done;
        }
        a = in->leaf[k].arr;
        if (a && a->deleted) {
            tj__err(c, TJ_ERR_STATE, file, line, "run '%s': input '%s' was donated to a program and its buffer is gone", p->name, n->name);
            st = TJ_ERR_STATE;
            goto done;
        }
        if (a && a->ctx != c) {
            tj__err(c, TJ_ERR_ARG, file, line, "run '%s': input '%s' is an array of another context than the program", p->name, n->name);
            st = TJ_ERR_ARG;
            goto done;
        }
        if (a) { /* its sharding and buffers must be the ones the program was made for */
            char what[160];
            snprintf(what, sizeof what, "run '%.64s': input '%.64s'", p->name, n->name);
            if (!tj__array_mesh_ok(a, what, file, line) || !tj__array_here(a, what, file, line)) {
                st = TJ_ERR_STATE;
                goto done;
            }
        }
        if (a && a->abstract) {
            tj__err(c, TJ_ERR_STATE, file, line, "run '%s': input '%s' is an abstract array (shape and sharding only): compile against it, run with data",
                    p->name, n->name);
            st = TJ_ERR_STATE;
            goto done;
        }
        same = a->t.dt == n->t.dt && a->t.rank == n->t.rank && a->ndev == c->ndev;
        for (j = 0; same && j < n->t.rank; j++) same = a->t.ax[j] == n->t.ax[j] && a->t.dim[j] == n->t.dim[j] && a->t.sh[j] == n->t.sh[j];
        if (!same && a->ndev != c->ndev) { /* the same type, on another device count */
            tj__err(c, TJ_ERR_SHAPE, file, line, "run '%s': input '%s' was made for %d devices, the context now has %d (tj_set_devices since): make it again", p->name,
                    n->name, a->ndev, c->ndev);
            st = TJ_ERR_SHAPE;
            goto done;
        }
        if (!same) {
            tj__err(c, TJ_ERR_SHAPE, file, line, "run '%s': input '%s' is %s but the program was traced for %s", p->name, n->name,
                    tj_array_describe(a, b2, sizeof b2), tj_v_describe(n, b1, sizeof b1));
            st = TJ_ERR_SHAPE;
            goto done;
        }
        for (j = 0; j < i; j++)
            if (args[j] == a && (p->donate[i] || p->donate[j])) {
                tj__err(c, TJ_ERR_ARG, file, line, "run '%s': array passed as both '%s' and '%s' while one is donated", p->name, g->params[j]->name, n->name);
                st = TJ_ERR_ARG;
                goto done;
            }
        args[i] = a;
    }
    for (i = 0; i < p->nout; i++) {
        int d = p->out_donor[i];
        if (d >= 0) { /* take over the donated argument's buffer */
            tj_array *a = (tj_array *)tj__calloc(sizeof *a);
            if (!a) {
                tj__err(c, TJ_ERR_OOM, file, line, "run '%s': out of memory", p->name);
                st = TJ_ERR_OOM;
                break;
            }
            *a = *args[d];
            a->t = p->outs[i]->t;
            a->in_tree = 0; /* a new array, nobody's yet */
            memset(a->ord, 0, sizeof a->ord); /* laid out as the program's outputs are: mesh order */
            outs[i] = a;
        } else if (!(outs[i] = tj__array_alloc(c, &p->outs[i]->t, file, line))) {
            st = TJ_ERR_OOM;
            break;
        }
    }
    if (st == TJ_OK) {
        ran = 1;
        st = tj__execute(p, args, outs);
    }
    if (st != TJ_OK) {
        if (!c->status) tj__err(c, st, file, line, "run '%s': failed (%s)", p->name, st == TJ_ERR_OOM ? "out of memory" : "error");
        for (i = 0; i < p->nout; i++)
            if (outs[i] && p->out_donor[i] >= 0) TJ_FREE(outs[i]); /* the argument keeps its buffer */
            else tj_array_free(outs[i]);
        goto done;
    }
    for (i = 0; i < p->nout; i++) {
        int d = p->out_donor[i];
        if (d >= 0) { /* the argument is gone: its buffer now belongs to the output */
            int dv;
            for (dv = 0; dv < args[d]->ndev; dv++) args[d]->raw[dv] = args[d]->data[dv] = NULL;
            args[d]->deleted = 1;
        }
        if (tj_tree_set_array(out, p->out_names[i], outs[i]) != TJ_OK && st == TJ_OK) st = c->status ? c->status : TJ_ERR_OOM;
    }
    for (i = 0; i < g->nparam; i++) /* donated but not reused: still deleted, as promised */
        if (p->donate[i] && !args[i]->deleted) {
            int dv;
            for (dv = 0; dv < args[i]->ndev; dv++) {
                if (!args[i]->raw[dv]) continue; /* another process's device */
                tj__mem_free(c, TJ_SPACE_DEVICE, args[i]->raw[dv]);
                tj__count(c, 0, dv, -args[i]->local_bytes);
                args[i]->raw[dv] = args[i]->data[dv] = NULL;
            }
            args[i]->deleted = 1;
        }
    for (i = 0; i < p->static_out->n; i++) {
        const tj__leaf *l = &p->static_out->leaf[i];
        tj_status s2 = TJ_OK;
        if (l->kind == TJ_LEAF_INT) s2 = tj_tree_set_int(out, l->name, l->i);
        else if (l->kind == TJ_LEAF_FLOAT) s2 = tj_tree_set_float(out, l->name, l->f);
        else if (l->kind == TJ_LEAF_STRING) s2 = tj_tree_set_string(out, l->name, l->s);
        if (s2 != TJ_OK && st == TJ_OK) st = s2;
    }
done:
    if (st != TJ_OK) tj__err_line(c, "tj_run", file, line); /* errors found inside the run name the caller too */
    if (!ran) tj__run_refused(p, st); /* process mode: the others must not wait for this one */
    TJ_FREE(args);
    TJ_FREE(outs);
    return st;
}

TJDEF tj_status tj_prog_output_shapes(const tj_prog *p, tj_tree *out) {
    int i;
    tj_status st = TJ_OK;
    if (!p) return TJ_ERR_ARG;
    if (!out) {
        tj__err(p->ctx, TJ_ERR_ARG, NULL, 0, "tj_prog_output_shapes '%s': argument out is NULL", p->name);
        return TJ_ERR_ARG;
    }
    if (out->ctx != p->ctx) {
        tj__err(p->ctx, TJ_ERR_ARG, NULL, 0, "tj_prog_output_shapes '%s': the tree belongs to another context than the program", p->name);
        return TJ_ERR_ARG;
    }
    for (i = 0; i < p->nout && st == TJ_OK; i++) {
        tj_array *a = tj__array_make(p->ctx, &p->outs[i]->t, 1, p->file, p->line);
        if (!a || tj_tree_set_array(out, p->out_names[i], a) != TJ_OK) /* (which frees a on failure) */
            st = p->ctx->status ? p->ctx->status : TJ_ERR_OOM;
    }
    for (i = 0; i < p->static_out->n && st == TJ_OK; i++) {
        const tj__leaf *l = &p->static_out->leaf[i];
        if (l->kind == TJ_LEAF_INT) st = tj_tree_set_int(out, l->name, l->i);
        else if (l->kind == TJ_LEAF_FLOAT) st = tj_tree_set_float(out, l->name, l->f);
        else if (l->kind == TJ_LEAF_STRING) st = tj_tree_set_string(out, l->name, l->s);
    }
    return st;
}

/* ==== [13] program text ================================================== */

/* the device groups a collective over mesh axes m runs in: "{0,1}{2,3}" */
static const char *tj__groups_str(const tj_ctx *c, unsigned m, char *buf, size_t n) {
    int d, r, G = tj__mesh_count(c, m), seen[TJ_MAXDEV];
    size_t k = 0;
    buf[0] = 0;
    memset(seen, 0, sizeof seen);
    for (d = 0; d < c->ndev && k + 8 < n; d++) {
        if (seen[d]) continue;
        snprintf(buf + k, n - k, "{");
        k = strlen(buf);
        for (r = 0; r < G; r++) {
            int p = tj__mesh_peer(c, d, m, r);
            seen[p] = 1;
            snprintf(buf + k, n - k, "%s%d", r ? "," : "", p);
            k = strlen(buf);
        }
        snprintf(buf + k, n - k, "}");
        k = strlen(buf);
    }
    return buf;
}
/* Each op's attributes as its row of the op table prints them. */
static void tj__pr_axes(const tj_node *n, FILE *f) { /* the axes it reduces or needs whole */
    int j;
    if (!n->a.naxes) return;
    fprintf(f, " over");
    for (j = 0; j < n->a.naxes; j++) fprintf(f, " %s", tj__name(n->g->ctx, n->a.axes[j]));
}
static void tj__pr_name(const tj_node *n, FILE *f) { fprintf(f, " '%s'", n->name); }
static void tj__pr_const(const tj_node *n, FILE *f) { /* fill's value, pows' exponent */
    if (n->op == TJ__OP_FILL || n->a.s != 0) fprintf(f, " %g", n->a.s);
}
static void tj__pr_dot(const tj_node *n, FILE *f) { fprintf(f, " contract=%d%s%s", n->a.nk, n->a.trans_a ? " aT" : "", n->a.trans_b ? " bT" : ""); }
static void tj__pr_custom(const tj_node *n, FILE *f) { fprintf(f, " '%s'", n->g->ctx->ops[n->a.reg].name); }
static void tj__pr_attention(const tj_node *n, FILE *f) {
    fprintf(f, " over %s, %s x %s, scale %g%s", tj__name(n->g->ctx, n->a.axes[0]), tj__name(n->g->ctx, n->a.axis), tj__name(n->g->ctx, n->a.axis2), n->a.s,
            n->a.causal ? ", causal" : "");
}
static void tj__pr_mesh(const tj_node *n, FILE *f) {
    char mb[64];
    fprintf(f, " over %s (no data moves)", tj__mesh_names(n->g->ctx, n->a.mesh, mb, sizeof mb));
}
static void tj__pr_coll(const tj_node *n, FILE *f) {
    char mb[256];
    fprintf(f, " over %s", tj__mesh_names(n->g->ctx, n->a.mesh, mb, sizeof mb));
    if (n->op == TJ__OP_ALL_TO_ALL) fprintf(f, " from %s to %s", tj__name(n->g->ctx, n->a.axis2), tj__name(n->g->ctx, n->a.axis));
    else if (n->a.axis >= 0 && n->op != TJ__OP_PSUM) fprintf(f, " along %s", tj__name(n->g->ctx, n->a.axis));
    fprintf(f, " [%lld B/device, groups %s, caused by %s]", n->op == TJ__OP_SHARD_SLICE ? 0LL : (long long)tj__lbytes(n->g->ctx, &n->in[0]->t),
            tj__groups_str(n->g->ctx, n->a.mesh, mb, sizeof mb), n->name ? n->name : "?");
}
static void tj__node_line(tj_node *n, FILE *f, int planned, int indent) {
    char b[256];
    int j;
    fprintf(f, "%*s  %%%-4d = %-13s(", indent, "", n->id, tj__ops[n->op].name);
    for (j = 0; j < n->nin; j++) fprintf(f, "%s%%%d", j ? ", " : "", n->in[j]->id);
    fprintf(f, ")");
    tj__ops[n->op].attrs(n, f);
    fprintf(f, "  %s", tj_v_describe(n, b, sizeof b));
    if (n->pass) fprintf(f, "  bwd%d", n->pass);
    if (n->remat) fprintf(f, "  remat");
    if (planned) {
        if (n->fused) fprintf(f, "  fused into %%%d%s", tj__froot(n)->id, n->store ? ", stored" : "");
        if (!n->fused || n->store) {
            if (n->root != n) fprintf(f, "  view of %%%d", n->root->id);
            else if (n->op == TJ__OP_PARAM) fprintf(f, "  @arg%d", n->a.index);
            else if (tj__ops[n->op].flags & TJ__MULTI) fprintf(f, "  (writes the outputs below)");
            else if (n->out_index >= 0) fprintf(f, "  @out%d", n->out_index);
            else fprintf(f, "  @%lld+%lld", (long long)n->off, (long long)tj__bytes(&n->lt));
        }
    }
    fprintf(f, "  %s:%d\n", tj__base(n->file), n->line);
}
/* a NULL stream for a print function: an error in p's context */
static int tj__no_stream(tj_ctx *c, FILE *f, const char *what) {
    if (f) return 0;
    tj__err(c, TJ_ERR_ARG, NULL, 0, "%s: argument out (the FILE) is NULL", what);
    return 1;
}
TJDEF void tj_graph_print(tj_graph *g, FILE *f) {
    int i;
    if (!g || tj__no_stream(g->ctx, f, "tj_graph_print")) return;
    for (i = 0; g && i < g->n; i++) tj__node_line(g->nodes[i], f, 0, 0);
}
/* a scan body's kind: its direction, and whether autodiff made it (the
   backward pass of a scan or region; a forward scan is the backward pass
   of a reverse one) or a remat policy re-runs it */
static const char *tj__scan_label(const tj_node *n) {
    if (n->remat) return n->a.reverse ? "reverse scan (re-run)" : "scan (re-run)";
    if (tj__autodiff_made(n)) return n->a.reverse ? "reverse scan (backward pass)" : "scan (backward pass)";
    return n->a.reverse ? "reverse scan" : "scan";
}
/* a program's schedule, each scan body printed under its scan node */
static void tj__sched_print(const tj_prog *p, FILE *f, int indent) {
    int i;
    for (i = 0; i < p->nsched; i++) {
        tj_node *n = p->sched[i];
        tj__node_line(n, f, 1, indent);
        if (n->sub && n->sub->prog) {
            tj_graph *b = n->sub;
            fprintf(f, "%*s    body of %%%d: %s, %d iteration%s, temp %lld B\n", indent, "", n->id,
                    b->manual && !n->g->manual ? (b->check ? "shard_map, per-device blocks, vary sets checked" : "shard_map, per-device blocks, unchecked")
                                               : tj__scan_label(n),
                    n->a.length, n->a.length == 1 ? "" : "s", (long long)b->prog->arena_bytes[TJ_SPACE_DEVICE]);
            tj__sched_print(b->prog, f, indent + 4);
        }
    }
}
TJDEF void tj_prog_print(const tj_prog *p, FILE *f) {
    int i;
    if (!p || tj__no_stream(p->ctx, f, "tj_prog_print")) return;
    fprintf(f, "program '%s' (%s:%d): %d ops, %.3g flops\n", p->name, tj__base(p->file), p->line, p->nsched, p->flops);
    tj__sched_print(p, f, 0);
    for (i = 0; i < p->nout; i++)
        fprintf(f, "  out%d '%s' = %%%d%s\n", i, p->out_names[i], p->outs[i]->id, p->out_donor[i] >= 0 ? "  (reuses donated argument)" : "");
}
static const char *tj__decision_name(tj_decision d) { return d == TJ_SAVE ? "saved" : d == TJ_OFFLOAD ? "offloaded" : "recomputed"; }
TJDEF int tj_prog_residuals(const tj_prog *p, tj_residual *rows, int max) {
    struct tj__report *r = p && p->g ? p->g->report : NULL;
    int i;
    if (!r) return 0;
    for (i = 0; rows && i < r->n && i < max; i++) rows[i] = r->rows[i];
    return r->n;
}
TJDEF void tj_prog_residuals_print(const tj_prog *p, FILE *f) {
    struct tj__report *r = p && p->g ? p->g->report : NULL;
    int i;
    if (!p || tj__no_stream(p->ctx, f, "tj_prog_residuals_print")) return;
    fprintf(f, "residuals of '%s' (%d):\n", p ? p->name : "?", r ? r->n : 0);
    for (i = 0; r && i < r->n; i++) {
        const tj_residual *x = &r->rows[i];
        char per[48] = "";
        if (x->device_bytes != x->bytes) snprintf(per, sizeof per, " (%lld B per device)", (long long)x->device_bytes);
        fprintf(f, "  %-10s %-12s %-36s %10lld B%s  %-10s %s:%d  (%s)%s%s%s\n", x->name[0] ? x->name : "-", x->carry ? "carry" : x->op, x->shape, (long long)x->bytes, per,
                tj__decision_name(x->decision), tj__base(x->file), x->line, x->rule, x->via[0] ? ", needed to recompute " : "", x->via,
                x->nested ? "  [nested: the region's own backward pass, inside the enclosing one's]" : "");
    }
    if (r && r->nlint) fprintf(f, "policy lint:\n%s", r->lint);
}
TJDEF int tj_prog_lint(const tj_prog *p, char *buf, size_t n) {
    struct tj__report *r = p && p->g ? p->g->report : NULL;
    if (buf && n) snprintf(buf, n, "%s", r ? r->lint : "");
    return r ? r->nlint : 0;
}
static void tj__collect(const tj_prog *p, tj_collective *rows, int max, int *n, int bwd, int64_t calls) {
    int i;
    for (i = 0; i < p->nsched; i++) {
        tj_node *x = p->sched[i];
        if (TJ__IS_COLL(x->op)) {
            if (rows && *n < max) {
                tj_collective *r = &rows[*n];
                int64_t G = tj__mesh_count(p->ctx, x->a.mesh);
                memset(r, 0, sizeof *r);
                snprintf(r->kind, sizeof r->kind, "%s", x->op == TJ__OP_AG_DOT ? "all_gather" : x->op == TJ__OP_DOT_RS ? "reduce_scatter" : tj__ops[x->op].name);
                tj__mesh_names(p->ctx, x->a.mesh, r->axes, sizeof r->axes);
                r->bytes = x->op == TJ__OP_ALL_GATHER ? tj__lbytes(p->ctx, &x->t)
                         : x->op == TJ__OP_SHARD_SLICE ? 0
                         : x->op == TJ__OP_AG_DOT ? G * tj__lbytes(p->ctx, &x->in[x->a.index]->t) /* the operand it gathers */
                         : x->op == TJ__OP_DOT_RS ? G * tj__lbytes(p->ctx, &x->t)                 /* the whole product it sums */
                                                  : tj__lbytes(p->ctx, &x->in[0]->t);
                r->in_dot = x->op == TJ__OP_AG_DOT || x->op == TJ__OP_DOT_RS;
                r->calls = calls;
                r->backward = bwd || x->pass > 0;
                snprintf(r->cause, sizeof r->cause, "%s", x->name ? x->name : "?");
                r->file = x->file;
                r->line = x->line;
            }
            (*n)++;
        }
        if (x->sub && x->sub->prog) tj__collect(x->sub->prog, rows, max, n, bwd || x->pass > 0, calls * (x->a.length > 0 ? x->a.length : 1));
    }
}
/* the transpose report: nodes autodiff put into shard_map bodies */
static void tj__transposes(const tj_prog *p, tj_transpose *rows, int max, int *n, int bwd) {
    int i;
    for (i = 0; i < p->nsched; i++) {
        tj_node *x = p->sched[i];
        int scale = x->op == TJ__OP_MUL && x->name;
        if (x->g->manual && (bwd || x->pass > 0) && !x->remat && (TJ__IS_COLL(x->op) || x->op == TJ__OP_PVARY || scale)) {
            if (rows && *n < max) {
                tj_transpose *r = &rows[*n];
                memset(r, 0, sizeof *r);
                snprintf(r->kind, sizeof r->kind, "%s", scale ? "scale" : x->op == TJ__OP_REDUCE_SCATTER ? "psum_scatter" : tj__ops[x->op].name);
                tj__mesh_names(p->ctx, x->a.mesh, r->axes, sizeof r->axes); /* a scale keeps the replicated axes there */
                tj_v_describe(x->in[0], r->value, sizeof r->value);
                if (x->op == TJ__OP_PVARY && x->name && !strchr(x->name, ' ')) /* made by the vary rule of op x->name */
                    snprintf(r->rule, sizeof r->rule, "'%s' mixes values that vary over different mesh axes", x->name);
                else
                    snprintf(r->rule, sizeof r->rule, "%s", x->name ? x->name : "?");
                r->file = x->file;
                r->line = x->line;
            }
            (*n)++;
        }
        if (x->sub && x->sub->prog) tj__transposes(x->sub->prog, rows, max, n, bwd || x->pass > 0);
    }
}
TJDEF int tj_prog_transposes(const tj_prog *p, tj_transpose *rows, int max) {
    int n = 0;
    if (p) tj__transposes(p, rows, max, &n, 0);
    return n;
}
TJDEF void tj_prog_transposes_print(const tj_prog *p, FILE *f) {
    tj_transpose r[256];
    int i, n;
    if (!p || tj__no_stream(p->ctx, f, "tj_prog_transposes_print")) return;
    n = tj_prog_transposes(p, r, 256);
    fprintf(f, "transposes of '%s': %d inserted by autodiff inside shard_map\n", p ? p->name : "?", n);
    for (i = 0; i < n && i < 256; i++)
        fprintf(f, "  %-12s %-10s %s:%d  on %s\n      because %s\n", r[i].kind, r[i].axes[0] ? r[i].axes : "-", tj__base(r[i].file), r[i].line, r[i].value, r[i].rule);
}
TJDEF int tj_prog_collectives(const tj_prog *p, tj_collective *rows, int max) {
    int n = 0;
    if (p) tj__collect(p, rows, max, &n, 0, 1);
    return n;
}
TJDEF int tj_prog_events(const tj_prog *p, tj_event *rows, int max) {
    int i;
    if (!p) return 0;
    for (i = 0; rows && i < p->nevents && i < max; i++) rows[i] = p->events[i];
    return p->nevents;
}
TJDEF void tj_memory_print(const tj_prog *p, FILE *f) {
    const tj_memory_analysis *m;
    if (!p || tj__no_stream(p->ctx, f, "tj_memory_print")) return;
    m = &p->mem;
    fprintf(f, "memory '%s': arguments %lld B, outputs %lld B, aliased %lld B, temp %lld B (matmul packs %lld B), peak %lld B; host temp %lld B\n",
            p->name, (long long)m->argument_bytes, (long long)m->output_bytes, (long long)m->alias_bytes, (long long)m->temp_bytes,
            (long long)m->pack_bytes, (long long)m->peak_bytes, (long long)m->host_temp_bytes);
}

/* ==== [A] appendix: files, JSON, safetensors, tree save/load =========== */
/* Everything that touches a file lives here, out of the pipeline's reading
   path, in the order each piece builds on the last: the public helpers
   (tj_strbuf and JSON string escaping, UTF-8, a 64-bit checksum,
   tj_read_file, atomic writes with tj_write_file_atomic: temp file, lock,
   fsync, rename, stale temp files cleaned; the tj_json cursor), then
   safetensors parse and write, tj_tree_save / tj_tree_load, and the
   Chrome trace writer of [13]. Sections [1]-[13] reach this code only
   through the public API. The helpers report into a caller's (err,
   errlen); safetensors and trees into the context, as everything else. */

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/types.h>

/* ---- files and text: the public helpers ---- */
TJDEF void tj_free(void *p) { TJ_FREE(p); }
/* a message into a caller's (err, errlen); returns st */
static tj_status tj__seterr(char *err, size_t errlen, tj_status st, const char *fmt, ...) {
    va_list ap;
    if (!err || !errlen) return st;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return st;
}

/* -- growable string buffer -- */
TJDEF void tj_strbuf_put(tj_strbuf *b, const char *s, size_t n) {
    if (!b || b->oom || (!s && n)) return; /* (NULL appends nothing, like tj_strbuf_puts) */
    if (n > SIZE_MAX / 4 - b->n) { /* the capacity below would overflow */
        b->oom = 1;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *p;
        while (cap < b->n + n + 1) cap *= 2;
        p = (char *)TJ_REALLOC(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
TJDEF void tj_strbuf_puts(tj_strbuf *b, const char *s) { tj_strbuf_put(b, s ? s : "", s ? strlen(s) : 0); }
TJDEF void tj_strbuf_printf(tj_strbuf *b, const char *fmt, ...) {
    char tmp[256], *big;
    va_list ap;
    int n;
    if (!b || b->oom || !fmt) return;
    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        tj_strbuf_put(b, tmp, (size_t)n);
        return;
    }
    if (!(big = (char *)tj__malloc((size_t)n + 1))) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    tj_strbuf_put(b, big, (size_t)n);
    TJ_FREE(big);
}
TJDEF void tj_strbuf_json(tj_strbuf *b, const char *s) {
    char u[8];
    tj_strbuf_put(b, "\"", 1);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"') tj_strbuf_puts(b, "\\\"");
        else if (c == '\\') tj_strbuf_puts(b, "\\\\");
        else if (c == '\n') tj_strbuf_puts(b, "\\n");
        else if (c == '\t') tj_strbuf_puts(b, "\\t");
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            tj_strbuf_puts(b, u);
        } else tj_strbuf_put(b, s, 1);
    }
    tj_strbuf_put(b, "\"", 1);
}
TJDEF void tj_strbuf_free(tj_strbuf *b) {
    if (!b) return;
    TJ_FREE(b->p);
    memset(b, 0, sizeof *b);
}

/* -- UTF-8: overlongs, surrogates and > U+10FFFF are invalid, as JSON requires -- */
TJDEF size_t tj_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    uint32_t c;
    size_t len, k;
    if (!s || n == 0) return 0;
    c = s[0];
    if (c < 0x80) {
        if (cp) *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) len = 2, c &= 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, c &= 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, c &= 0x07;
    else return 0;
    if (n < len) return 0;
    for (k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[k] & 0x3F);
    }
    if ((len == 3 && c < 0x800) || (len == 4 && c < 0x10000) || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    if (cp) *cp = c;
    return len;
}
TJDEF size_t tj_utf8_encode(uint32_t c, char *o) {
    if (!o || c > 0x10FFFF) return 0;
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}
static int tj__u8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i = 0, l;
    uint32_t cp;
    while (i < n) {
        if (!(l = tj_utf8_decode(p + i, n - i, &cp))) return 0;
        i += l;
    }
    return 1;
}

/* -- a 64-bit hash of a byte stream; every step is a bijection of the state,
   so any single changed byte always changes the result -- */
typedef struct {
    uint64_t h, total;
    unsigned char pend[8];
    int np;
} tj__hash;
static void tj__hash_init(tj__hash *s) { memset(s, 0, sizeof *s), s->h = 0x243F6A8885A308D3ull; }
static void tj__hash_word(tj__hash *s, uint64_t w) {
    s->h = (s->h ^ w) * 0x9E3779B97F4A7C15ull;
    s->h ^= s->h >> 29;
}
static uint64_t tj__le64(const unsigned char *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}
static void tj__hash_put(tj__hash *s, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    s->total += n;
    while (n && s->np) {
        s->pend[s->np++] = *p++, n--;
        if (s->np == 8) tj__hash_word(s, tj__le64(s->pend)), s->np = 0;
    }
    for (; n >= 8; p += 8, n -= 8) tj__hash_word(s, tj__le64(p));
    while (n) s->pend[s->np++] = *p++, n--;
}
static uint64_t tj__hash_end(tj__hash *s) {
    int k;
    for (k = s->np; k < 8; k++) s->pend[k] = 0;
    tj__hash_word(s, tj__le64(s->pend));
    tj__hash_word(s, s->total);
    s->h ^= s->h >> 31;
    s->h *= 0xD6E8FEB86659FD93ull;
    return s->h ^ (s->h >> 32);
}

/* -- whole-file read and atomic write -- */
/* The file into a new buffer with a NUL after its len bytes. */
static tj_status tj__file_read(const char *path, char **data, size_t *len, char *err, size_t errlen) {
    FILE *f;
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    struct stat sb;
    *data = NULL;
    *len = 0;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return tj__seterr(err, errlen, TJ_ERR_IO, "%s: is a directory, not a file", path);
    f = fopen(path, "rb");
    if (!f) return tj__seterr(err, errlen, TJ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    /* The size is only a hint (files may change): the loop reads to EOF. */
    if (fseek(f, 0, SEEK_END) == 0) {
        long sz = ftell(f);
        if (sz > 0 && (unsigned long)sz < (unsigned long)SIZE_MAX / 2) {
            buf = (char *)tj__malloc((size_t)sz + 65536 + 1);
            if (buf) cap = (size_t)sz + 65536;
        }
        rewind(f);
    }
    for (;;) {
        if (cap - n < 65536) {
            size_t nc = cap ? cap * 2 : (size_t)1 << 20;
            char *p = (char *)TJ_REALLOC(buf, nc + 1);
            if (!p) {
                TJ_FREE(buf);
                fclose(f);
                return tj__seterr(err, errlen, TJ_ERR_OOM, "%s: out of memory reading the file", path);
            }
            buf = p;
            cap = nc;
        }
        errno = 0;
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        int e = errno;
        TJ_FREE(buf);
        fclose(f);
        return tj__seterr(err, errlen, TJ_ERR_IO, "%s: read error: %s", path, e ? strerror(e) : "unknown");
    }
    fclose(f);
    buf[n] = 0;
    *data = buf;
    *len = n;
    return TJ_OK;
}
TJDEF tj_status tj_read_file(const char *path, char **data, size_t *len, char *err, size_t errlen) {
    size_t ignored;
    if (data) *data = NULL;
    if (len) *len = 0;
    if (!path || !data) return tj__seterr(err, errlen, TJ_ERR_ARG, "tj_read_file: argument %s is NULL", path ? "data" : "path");
    return tj__file_read(path, data, len ? len : &ignored, err, errlen);
}
/* An atomic write in progress. Its errors go to ctx when set, else to the
   caller's (err, errlen); st keeps the first. */
typedef struct {
    tj_ctx *ctx;
    char *err;
    size_t errlen;
    int fd;
    char *tmp;
    const char *path;
} tj__afile;
static int tj__af_fail(tj__afile *f, tj_status st, const char *fmt, ...) {
    char m[TJ__MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (f->ctx) tj__err(f->ctx, st, NULL, 0, "%s", m);
    else tj__seterr(f->err, f->errlen, st, "%s", m);
    return 1;
}
static void tj__af_abort(tj__afile *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) {
        unlink(f->tmp);
        TJ_FREE(f->tmp);
    }
    f->fd = -1;
    f->tmp = NULL;
}
/* A write lock on a whole open file (fcntl, so it dies with its process);
   0 if taken. */
static int tj__lock_fd(int fd) {
    struct flock l;
    memset(&l, 0, sizeof l);
    l.l_type = F_WRLCK;
    l.l_whence = SEEK_SET;
    l.l_start = 0;
    l.l_len = 0;
    return fcntl(fd, F_SETLK, &l);
}
/* The pid of name "<base>.tmp.<pid>.<k>" when that pid is not ours, else 0. */
static long tj__is_foreign_tmp(const char *name, const char *base, size_t bl, long self) {
    const char *p;
    long pid = 0;
    if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".tmp.", 5) != 0) return 0;
    p = name + bl + 5;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') {
        if (pid > 100000000L) return 0;
        pid = pid * 10 + (*p++ - '0');
    }
    if (*p++ != '.' || *p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    return *p == 0 && pid != self ? pid : 0;
}
/* Remove the temp files that writers of `path` killed mid-write left behind.
   A live writer holds a lock on its temp file from before its first byte
   (tj__af_open), so a temp file nobody holds a lock on, with data in it,
   older than a minute, or named for a pid that no process of this host has
   (a writer killed between creating and locking it), belongs to a dead
   process. Temp files of this
   process are never touched (a lock is per process). Best effort: errors
   are ignored. */
static void tj__af_clean_stale(const char *path) {
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t dl = slash ? (size_t)(slash - path) : 0, bl = strlen(base);
    char *dir, *full;
    DIR *d;
    struct dirent *e;
    long self = (long)getpid();
    if (!bl) return;
    dir = (char *)tj__malloc(dl + 2);
    if (!dir) return;
    if (!slash) strcpy(dir, ".");
    else if (dl == 0) strcpy(dir, "/");
    else {
        memcpy(dir, path, dl);
        dir[dl] = 0;
    }
    d = opendir(dir);
    while (d && (e = readdir(d)) != NULL) {
        struct stat sb;
        int fd, gone;
        long pid = tj__is_foreign_tmp(e->d_name, base, bl, self);
        if (!pid) continue;
        { /* no /proc/<pid> on a host that has /proc: no such process */
            char pp[40];
            snprintf(pp, sizeof pp, "/proc/%ld", pid);
            gone = stat("/proc/self", &sb) == 0 && stat(pp, &sb) != 0 && errno == ENOENT;
        }
        if (!(full = (char *)tj__malloc(strlen(dir) + strlen(e->d_name) + 2))) break;
        sprintf(full, "%s/%s", dir, e->d_name);
        fd = open(full, O_RDWR);
        if (fd >= 0) {
            if (tj__lock_fd(fd) == 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_size > 0 || gone || time(NULL) - sb.st_mtime > 60)) unlink(full);
            close(fd); /* drops our lock */
        }
        TJ_FREE(full);
    }
    if (d) closedir(d);
    TJ_FREE(dir);
}
static int tj__af_open(tj__afile *f, tj_ctx *c, char *err, size_t errlen, const char *path) {
    size_t n = strlen(path) + 48;
    int k;
    struct stat sb;
    f->ctx = c;
    f->err = err;
    f->errlen = errlen;
    f->path = path;
    f->fd = -1;
    f->tmp = NULL;
    if (!*path) {
        tj__af_fail(f, TJ_ERR_IO, "an empty file name to write");
        return 1;
    }
    if (path[strlen(path) - 1] == '/' || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))) {
        tj__af_fail(f, TJ_ERR_IO, "%s: is a directory, not a file name to write", path);
        return 1;
    }
    f->tmp = (char *)tj__malloc(n);
    if (!f->tmp) {
        tj__af_fail(f, TJ_ERR_OOM, "%s: out of memory", path);
        return 1;
    }
    tj__af_clean_stale(path);
    /* O_EXCL: never write into another writer's (or a crashed one's) temp file */
    for (k = 0; k < 1000; k++) {
        snprintf(f->tmp, n, "%s.tmp.%ld.%d", path, (long)getpid(), k);
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (f->fd >= 0 || errno != EEXIST) break;
    }
    if (f->fd < 0) {
        tj__af_fail(f, TJ_ERR_IO, "%s: cannot create %s: %s", path, f->tmp, strerror(errno));
        TJ_FREE(f->tmp);
        f->tmp = NULL;
        return 1;
    }
    (void)tj__lock_fd(f->fd); /* marks the temp file as in use (see tj__af_clean_stale) */
    return 0;
}
static int tj__af_write(tj__afile *f, const void *data, size_t len) {
    const char *p = (const char *)data;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t w = write(f->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            tj__af_fail(f, TJ_ERR_IO, "%s: write to %s failed: %s", f->path, f->tmp, strerror(errno));
            tj__af_abort(f);
            return 1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}
static int tj__af_commit(tj__afile *f) {
    const char *slash;
    char *dir;
    int dfd;
    /* fsync before rename: else the rename may reach the disk before the
       data, and a crash would leave an empty or partial file at path. */
    if (fsync(f->fd) != 0) {
        tj__af_fail(f, TJ_ERR_IO, "%s: fsync of %s failed: %s", f->path, f->tmp, strerror(errno));
        tj__af_abort(f);
        return 1;
    }
    /* rename while the temp file is still open: its lock tells cleaners of
       stale temp files (tj__af_clean_stale) that it is in use */
    if (rename(f->tmp, f->path) != 0) {
        tj__af_fail(f, TJ_ERR_IO, "%s: rename from %s failed: %s", f->path, f->tmp, strerror(errno));
        tj__af_abort(f);
        return 1;
    }
    if (close(f->fd) != 0) { /* the data was synced: the new file is in place */
        f->fd = -1;
        tj__af_fail(f, TJ_ERR_IO, "%s: close failed: %s", f->path, strerror(errno));
        TJ_FREE(f->tmp);
        f->tmp = NULL;
        return 1;
    }
    f->fd = -1;
    /* The rename lives in the directory: sync it too (best effort, some
       filesystems refuse fsync on directories). */
    slash = strrchr(f->path, '/');
    dir = (char *)tj__malloc(slash ? (size_t)(slash - f->path) + 2 : 2);
    if (dir) {
        if (!slash) strcpy(dir, ".");
        else if (slash == f->path) strcpy(dir, "/");
        else {
            memcpy(dir, f->path, (size_t)(slash - f->path));
            dir[slash - f->path] = 0;
        }
        dfd = open(dir, O_RDONLY);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        TJ_FREE(dir);
    }
    TJ_FREE(f->tmp);
    f->tmp = NULL;
    return 0;
}
TJDEF tj_status tj_write_file_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    tj__afile f;
    if (!path || (!data && len)) return tj__seterr(err, errlen, TJ_ERR_ARG, "tj_write_file_atomic: argument %s is NULL", path ? "data" : "path");
    if (tj__af_open(&f, NULL, err, errlen, path)) return TJ_ERR_IO;
    if (tj__af_write(&f, data, len) || tj__af_commit(&f)) return TJ_ERR_IO;
    return TJ_OK;
}

/* -- a JSON cursor: the callers know the schema, so no DOM -- */
TJDEF void tj_json_init(tj_json *j, const char *text, size_t len, const char *label, char *err, size_t errlen) {
    if (!j) return;
    memset(j, 0, sizeof *j);
    j->err = err;
    j->errlen = errlen;
    j->s = (const unsigned char *)text;
    j->n = text ? len : 0;
    j->label = label ? label : "JSON text";
    j->what = "JSON";
}
TJDEF tj_status tj_json_fail(tj_json *j, const char *fmt, ...) {
    char m[256], full[TJ__MSG];
    va_list ap;
    if (!j || !fmt) return TJ_ERR_ARG;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s: bad %s at byte %llu: %s", j->label, j->what ? j->what : "JSON", (unsigned long long)(j->base + j->i), m);
    tj__seterr(j->err, j->errlen, TJ_ERR_IO, "%s", full);
    if (j->ctx) tj__err(j->ctx, TJ_ERR_IO, NULL, 0, "%s", full);
    return TJ_ERR_IO;
}
/* a NULL argument of a cursor function */
static tj_status tj__json_null(tj_json *j, const char *fn, const char *arg) {
    tj__seterr(j->err, j->errlen, TJ_ERR_ARG, "%s: argument %s is NULL", fn, arg);
    if (j->ctx) tj__err(j->ctx, TJ_ERR_ARG, NULL, 0, "%s: argument %s is NULL", fn, arg);
    return TJ_ERR_ARG;
}
static void tj__json_ws(tj_json *j) {
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}
TJDEF int tj_json_peek(tj_json *j) {
    if (!j) return -1;
    tj__json_ws(j);
    return j->i < j->n ? j->s[j->i] : -1;
}
TJDEF tj_status tj_json_expect(tj_json *j, char c) {
    if (!j) return TJ_ERR_ARG;
    if (tj_json_peek(j) == (unsigned char)c) {
        j->i++;
        return TJ_OK;
    }
    return tj_json_fail(j, "expected '%c'", c);
}
static int tj__json_hex(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }
static int tj__json_hex4(tj_json *j, size_t at, uint32_t *v) {
    size_t k;
    *v = 0;
    for (k = 0; k < 4; k++) {
        int h = tj__json_hex(j->s[at + k]);
        if (h < 0) return 1;
        *v = (*v << 4) | (uint32_t)h;
    }
    return 0;
}
/* out NULL only validates. The result may hold \u0000, hence outlen. */
TJDEF tj_status tj_json_string(tj_json *j, char **out, size_t *outlen) {
    size_t k, m = 0;
    char *o = NULL, tmp[4];
    if (out) *out = NULL;
    if (!j) return TJ_ERR_ARG;
    if (tj_json_peek(j) != '"') return tj_json_fail(j, "expected string");
    /* find the closing quote first: escapes never expand, so one allocation */
    k = j->i + 1;
    while (k < j->n && j->s[k] != '"') k += j->s[k] == '\\' ? 2 : 1;
    if (k >= j->n) return tj_json_fail(j, "unterminated string");
    if (out && !(o = (char *)tj__malloc(k - j->i))) return tj_json_fail(j, "out of memory");
    j->i++;
    while (j->i < k) {
        unsigned char c = j->s[j->i];
        if (c < 0x20) {
            TJ_FREE(o);
            return tj_json_fail(j, "control character in string");
        }
        if (c == '\\') {
            unsigned char e = j->s[j->i + 1]; /* j->i + 1 < k: the scan skipped it */
            const char *simple = "\"\\/bfnrt", *rep = "\"\\/\b\f\n\r\t";
            const char *hit = e ? strchr(simple, e) : NULL;
            if (hit) {
                if (o) o[m] = rep[hit - simple];
                m++;
                j->i += 2;
            } else if (e == 'u') {
                uint32_t cp, lo;
                if (j->i + 6 > k || tj__json_hex4(j, j->i + 2, &cp)) {
                    TJ_FREE(o);
                    return tj_json_fail(j, "bad \\u escape");
                }
                j->i += 6;
                if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    TJ_FREE(o);
                    return tj_json_fail(j, "unpaired surrogate");
                }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (j->i + 6 > k || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u' || tj__json_hex4(j, j->i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                        TJ_FREE(o);
                        return tj_json_fail(j, "unpaired surrogate");
                    }
                    j->i += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                m += tj_utf8_encode(cp, o ? o + m : tmp);
            } else {
                TJ_FREE(o);
                return tj_json_fail(j, "bad escape");
            }
        } else if (c >= 0x80) {
            uint32_t cp;
            size_t l = tj_utf8_decode(j->s + j->i, k - j->i, &cp);
            if (!l) {
                TJ_FREE(o);
                return tj_json_fail(j, "invalid UTF-8 in string");
            }
            if (o) memcpy(o + m, j->s + j->i, l);
            m += l;
            j->i += l;
        } else {
            if (o) o[m] = (char)c;
            m++;
            j->i++;
        }
    }
    j->i = k + 1;
    if (o) o[m] = 0, *out = o;
    if (outlen) *outlen = m;
    return TJ_OK;
}
/* Strings kept as C strings must not hide a \u0000: two different keys
   would compare equal. */
TJDEF tj_status tj_json_cstring(tj_json *j, char **out) {
    size_t l, at;
    if (!j) return TJ_ERR_ARG;
    if (!out) return tj__json_null(j, "tj_json_cstring", "out");
    at = j->i;
    if (tj_json_string(j, out, &l)) return TJ_ERR_IO;
    if (strlen(*out) != l) {
        TJ_FREE(*out);
        *out = NULL;
        j->i = at;
        return tj_json_fail(j, "string contains \\u0000");
    }
    return TJ_OK;
}
TJDEF tj_status tj_json_u64(tj_json *j, uint64_t *v) {
    int c;
    if (!j) return TJ_ERR_ARG;
    if (!v) return tj__json_null(j, "tj_json_u64", "v");
    c = tj_json_peek(j);
    *v = 0;
    if (c < '0' || c > '9') return tj_json_fail(j, "expected non-negative integer");
    if (c == '0' && j->i + 1 < j->n && j->s[j->i + 1] >= '0' && j->s[j->i + 1] <= '9') return tj_json_fail(j, "leading zero in number");
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
        unsigned d = (unsigned)(j->s[j->i] - '0');
        if (*v > (UINT64_MAX - d) / 10) return tj_json_fail(j, "integer overflow");
        *v = *v * 10 + d;
        j->i++;
    }
    if (j->i < j->n && (j->s[j->i] == '.' || j->s[j->i] == 'e' || j->s[j->i] == 'E')) return tj_json_fail(j, "expected integer, got fraction/exponent");
    return TJ_OK;
}
static int tj__json_digits(tj_json *j) {
    size_t at = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
    return j->i > at ? 0 : tj_json_fail(j, "expected digit");
}
/* past one number of the strict grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int tj__json_num_span(tj_json *j) {
    if (j->i < j->n && j->s[j->i] == '-') j->i++;
    if (j->i < j->n && j->s[j->i] == '0') j->i++;
    else if (tj__json_digits(j)) return 1;
    if (j->i < j->n && j->s[j->i] == '.') {
        j->i++;
        if (tj__json_digits(j)) return 1;
    }
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
        j->i++;
        if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
        if (tj__json_digits(j)) return 1;
    }
    return 0;
}
TJDEF tj_status tj_json_number(tj_json *j, double *v) {
    int c;
    size_t at;
    char tmp[64], *s = tmp;
    if (!j) return TJ_ERR_ARG;
    if (!v) return tj__json_null(j, "tj_json_number", "v");
    c = tj_json_peek(j);
    at = j->i;
    *v = 0;
    if (c != '-' && (c < '0' || c > '9')) return tj_json_fail(j, "expected a number");
    if (tj__json_num_span(j)) return TJ_ERR_IO;
    if (j->i - at >= sizeof tmp && !(s = (char *)tj__malloc(j->i - at + 1))) return tj_json_fail(j, "out of memory");
    memcpy(s, j->s + at, j->i - at);
    s[j->i - at] = 0;
    *v = strtod(s, NULL);
    if (s != tmp) TJ_FREE(s);
    return TJ_OK;
}
TJDEF tj_status tj_json_literal(tj_json *j, int *v) {
    static const char *const w[3] = {"null", "false", "true"};
    int k;
    if (!j) return TJ_ERR_ARG;
    if (!v) return tj__json_null(j, "tj_json_literal", "v");
    tj__json_ws(j);
    for (k = 0; k < 3; k++) {
        size_t l = strlen(w[k]);
        if (j->n - j->i >= l && memcmp(j->s + j->i, w[k], l) == 0) {
            j->i += l;
            *v = k - 1;
            return TJ_OK;
        }
    }
    return tj_json_fail(j, "expected true, false or null");
}
TJDEF int tj_json_object_next(tj_json *j, int *first, char **key) {
    int c;
    if (!j) return -1;
    if (!first || !key) return tj__json_null(j, "tj_json_object_next", first ? "key" : "first"), -1;
    c = tj_json_peek(j);
    *key = NULL;
    if (c == '}') {
        j->i++;
        return 0;
    }
    if (!*first) {
        if (c != ',') return tj_json_fail(j, "expected ',' or '}'"), -1;
        j->i++;
    }
    *first = 0;
    if (tj_json_cstring(j, key)) return -1;
    if (tj_json_peek(j) != ':') {
        TJ_FREE(*key);
        *key = NULL;
        return tj_json_fail(j, "expected ':'"), -1;
    }
    j->i++;
    return 1;
}
TJDEF int tj_json_array_next(tj_json *j, int *first) {
    int c;
    if (!j) return -1;
    if (!first) return tj__json_null(j, "tj_json_array_next", "first"), -1;
    c = tj_json_peek(j);
    if (c == ']') {
        j->i++;
        return 0;
    }
    if (!*first) {
        if (c != ',') return tj_json_fail(j, "expected ',' or ']'"), -1;
        j->i++;
    }
    *first = 0;
    return 1;
}
TJDEF tj_status tj_json_skip(tj_json *j) {
    int c = tj_json_peek(j), first = 1, r, lit;
    char *key;
    if (!j) return TJ_ERR_ARG;
    if (c == '"') return tj_json_string(j, NULL, NULL);
    if (c == '{' || c == '[') {
        if (++j->depth > 64) return tj_json_fail(j, "nesting too deep"); /* 1e6 '[' must not blow the stack */
        j->i++;
        if (c == '{') {
            while ((r = tj_json_object_next(j, &first, &key)) == 1) {
                TJ_FREE(key);
                if (tj_json_skip(j)) return TJ_ERR_IO;
            }
        } else {
            while ((r = tj_json_array_next(j, &first)) == 1)
                if (tj_json_skip(j)) return TJ_ERR_IO;
        }
        j->depth--;
        return r < 0 ? TJ_ERR_IO : TJ_OK;
    }
    if (c == 't' || c == 'f' || c == 'n') return tj_json_literal(j, &lit);
    if (c == '-' || (c >= '0' && c <= '9')) return tj__json_num_span(j) ? TJ_ERR_IO : TJ_OK;
    return tj_json_fail(j, c < 0 ? "unexpected end" : "unexpected character");
}

/* ---- safetensors ---- */
/* -- dtypes -- */
static const char *const tj__st_dtnames[TJ_ST_NDTYPE] = {"F32", "BF16", "F16", "F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL"};
static const unsigned char tj__st_dtsize[TJ_ST_NDTYPE] = {4, 2, 2, 8, 8, 4, 2, 1, 8, 4, 2, 1, 1};
TJDEF const char *tj_st_dtype_name(tj_st_dtype d) { return (unsigned)d < TJ_ST_NDTYPE ? tj__st_dtnames[d] : "?"; }
TJDEF size_t tj_st_dtype_size(tj_st_dtype d) { return (unsigned)d < TJ_ST_NDTYPE ? tj__st_dtsize[d] : 0; }
TJDEF tj_st_dtype tj_st_dtype_from_name(const char *name) {
    int i;
    for (i = 0; name && i < TJ_ST_NDTYPE; i++)
        if (strcmp(name, tj__st_dtnames[i]) == 0) return (tj_st_dtype)i;
    return TJ_ST_NDTYPE;
}
TJDEF tj_st_dtype tj_st_dtype_of(tj_dtype dt) {
    switch (dt) {
    case TJ_F32: return TJ_ST_F32;
    case TJ_BF16: return TJ_ST_BF16;
    case TJ_I32: return TJ_ST_I32;
    case TJ_F64: return TJ_ST_F64;
    default: return TJ_ST_NDTYPE;
    }
}
static int tj__st_to_tj(tj_st_dtype d, tj_dtype *out) {
    switch (d) {
    case TJ_ST_F32: *out = TJ_F32; return 0;
    case TJ_ST_BF16: *out = TJ_BF16; return 0;
    case TJ_ST_I32: *out = TJ_I32; return 0;
    case TJ_ST_F64: *out = TJ_F64; return 0;
    default: return 1;
    }
}

/* -- reader -- */
typedef struct {
    tj_st_tensor t;
    uint64_t begin, end; /* data_offsets, relative to the data section */
} tj__st_ten;
struct tj_safetensors {
    tj_ctx *ctx;
    char *path;
    unsigned char *buf; /* the whole file */
    size_t len, data_start;
    int n, cap;
    tj__st_ten *ten;     /* header order */
    int *by_name;        /* indices into ten, sorted by name */
    int n_meta, meta_cap;
    char **meta;         /* meta[2i] = key, meta[2i+1] = value */
};
/* The writer of tj_tree_save puts the checksum first, at a fixed place. */
#define TJ__ST_CKKEY "tinyjax.checksum"
static const char tj__st_ckpre[] = "{\"__metadata__\":{\"" TJ__ST_CKKEY "\":\"";

TJDEF void tj_st_free(tj_safetensors *st) {
    int i;
    if (!st) return;
    for (i = 0; i < st->n; i++) TJ_FREE((void *)st->ten[i].t.name);
    for (i = 0; i < 2 * st->n_meta; i++) TJ_FREE(st->meta[i]);
    TJ_FREE(st->ten);
    TJ_FREE(st->by_name);
    TJ_FREE(st->meta);
    TJ_FREE(st->buf);
    TJ_FREE(st->path);
    TJ_FREE(st);
}
/* Sort indices into base by name or by data offsets (a merge sort: qsort
   has no user pointer, and this stays reentrant). */
static void tj__st_sort(int *v, int *tmp, int n, const tj__st_ten *base, int by_off) {
    int h, i, j, k;
    if (n < 2) return;
    h = n / 2;
    tj__st_sort(v, tmp, h, base, by_off);
    tj__st_sort(v + h, tmp, n - h, base, by_off);
    for (i = 0, j = h, k = 0; i < h || j < n;) {
        int takeleft;
        if (i >= h) takeleft = 0;
        else if (j >= n) takeleft = 1;
        else if (by_off) {
            const tj__st_ten *x = &base[v[i]], *y = &base[v[j]];
            takeleft = x->begin != y->begin ? x->begin < y->begin : x->end <= y->end;
        } else takeleft = strcmp(base[v[i]].t.name, base[v[j]].t.name) <= 0;
        tmp[k++] = takeleft ? v[i++] : v[j++];
    }
    memcpy(v, tmp, sizeof(int) * (size_t)n);
}
static int tj__st_tensor_hdr(tj_json *j, tj__st_ten *x) {
    int first = 1, r, have_dtype = 0, have_shape = 0, have_off = 0;
    char *key;
    const char *nm = x->t.name;
    if (tj_json_expect(j, '{')) return 1;
    while ((r = tj_json_object_next(j, &first, &key)) == 1) {
        if (strcmp(key, "dtype") == 0) {
            char *v;
            TJ_FREE(key);
            if (have_dtype++) return tj_json_fail(j, "duplicate dtype in tensor '%.64s'", nm);
            if (tj_json_cstring(j, &v)) return 1;
            x->t.dtype = tj_st_dtype_from_name(v);
            if (x->t.dtype == TJ_ST_NDTYPE) {
                tj__err(j->ctx, TJ_ERR_IO, NULL, 0, "%s: tensor '%.64s': unsupported dtype \"%.32s\"", j->label, nm, v);
                TJ_FREE(v);
                return 1;
            }
            TJ_FREE(v);
        } else if (strcmp(key, "shape") == 0) {
            int af = 1, ar;
            TJ_FREE(key);
            if (have_shape++) return tj_json_fail(j, "duplicate shape in tensor '%.64s'", nm);
            if (tj_json_expect(j, '[')) return 1;
            x->t.rank = 0;
            while ((ar = tj_json_array_next(j, &af)) == 1) {
                uint64_t d;
                if (x->t.rank >= TJ_MAXDIM) return tj_json_fail(j, "rank exceeds 8 in tensor '%.64s'", nm);
                if (tj_json_u64(j, &d)) return 1;
                if (d > (uint64_t)INT64_MAX) return tj_json_fail(j, "dimension too large in tensor '%.64s'", nm);
                x->t.shape[x->t.rank++] = (int64_t)d;
            }
            if (ar < 0) return 1;
        } else if (strcmp(key, "data_offsets") == 0) {
            int af = 1, ar, cnt = 0;
            uint64_t v[2] = {0, 0};
            TJ_FREE(key);
            if (have_off++) return tj_json_fail(j, "duplicate data_offsets in tensor '%.64s'", nm);
            if (tj_json_expect(j, '[')) return 1;
            while ((ar = tj_json_array_next(j, &af)) == 1) {
                if (cnt >= 2) return tj_json_fail(j, "data_offsets needs 2 entries in tensor '%.64s'", nm);
                if (tj_json_u64(j, &v[cnt++])) return 1;
            }
            if (ar < 0) return 1;
            if (cnt != 2) return tj_json_fail(j, "data_offsets needs 2 entries in tensor '%.64s'", nm);
            x->begin = v[0];
            x->end = v[1];
        } else { /* unknown fields are tolerated, as serde does by default */
            TJ_FREE(key);
            if (tj_json_skip(j)) return 1;
        }
    }
    if (r < 0) return 1;
    if (!have_dtype) return tj_json_fail(j, "missing dtype in tensor '%.64s'", nm);
    if (!have_shape) return tj_json_fail(j, "missing shape in tensor '%.64s'", nm);
    if (!have_off) return tj_json_fail(j, "missing data_offsets in tensor '%.64s'", nm);
    return 0;
}
static int tj__st_meta_hdr(tj_json *j, tj_safetensors *st) {
    int first = 1, r, k;
    char *key, *val;
    if (tj_json_expect(j, '{')) return 1;
    while ((r = tj_json_object_next(j, &first, &key)) == 1) {
        for (k = 0; k < st->n_meta; k++)
            if (strcmp(st->meta[2 * k], key) == 0) {
                tj_json_fail(j, "duplicate __metadata__ key '%.64s'", key);
                TJ_FREE(key);
                return 1;
            }
        if (tj_json_peek(j) != '"') {
            tj_json_fail(j, "__metadata__ value is not a string for key '%.64s'", key);
            TJ_FREE(key);
            return 1;
        }
        if (tj_json_cstring(j, &val)) {
            TJ_FREE(key);
            return 1;
        }
        if (st->n_meta == st->meta_cap) {
            int nc = st->meta_cap ? st->meta_cap * 2 : 8;
            char **m = (char **)TJ_REALLOC(st->meta, sizeof(char *) * 2 * (size_t)nc);
            if (!m) {
                TJ_FREE(key);
                TJ_FREE(val);
                return tj_json_fail(j, "out of memory");
            }
            st->meta = m;
            st->meta_cap = nc;
        }
        st->meta[2 * st->n_meta] = key;
        st->meta[2 * st->n_meta + 1] = val;
        st->n_meta++;
    }
    return r < 0;
}
/* If the file carries tinyjax's checksum, it must be at its place and match
   the hash of the file with its 16 digits read as '0'. */
static int tj__st_verify(tj_safetensors *st) {
    const char *v = tj_st_meta(st, TJ__ST_CKKEY);
    size_t p = 8 + sizeof tj__st_ckpre - 1;
    tj__hash h;
    char want[17];
    int k;
    if (!v) return 0;
    if (strlen(v) != 16 || st->data_start < p + 16 || memcmp(st->buf + 8, tj__st_ckpre, p - 8) != 0 || memcmp(st->buf + p, v, 16) != 0) {
        tj__err(st->ctx, TJ_ERR_IO, NULL, 0, "%s: corrupt file: the " TJ__ST_CKKEY " entry is not where tinyjax writes it", st->path);
        return 1;
    }
    tj__hash_init(&h);
    tj__hash_put(&h, st->buf, p);
    tj__hash_put(&h, "0000000000000000", 16);
    tj__hash_put(&h, st->buf + p + 16, st->len - p - 16);
    snprintf(want, sizeof want, "%016llx", (unsigned long long)tj__hash_end(&h));
    for (k = 0; k < 16; k++)
        if (want[k] != v[k]) {
            tj__err(st->ctx, TJ_ERR_IO, NULL, 0, "%s: corrupt file: checksum %.16s does not match the contents (%s)", st->path, v, want);
            return 1;
        }
    return 0;
}
/* Takes ownership of buf (len bytes, from tj__malloc). */
static tj_safetensors *tj__st_parse_owned(tj_ctx *c, unsigned char *buf, size_t len, const char *label) {
    tj_safetensors *st = (tj_safetensors *)tj__calloc(sizeof *st);
    uint64_t hlen = 0, pos;
    size_t data_len;
    int k, first = 1, r, seen_meta = 0;
    tj_json j;
    char *key;
    int *by_off = NULL, *tmp = NULL;
    if (!st) {
        TJ_FREE(buf);
        tj__err(c, TJ_ERR_OOM, NULL, 0, "%s: out of memory", label);
        return NULL;
    }
    st->ctx = c;
    st->buf = buf;
    st->len = len;
    if (!(st->path = tj__strdup(label))) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "%s: out of memory", label);
        goto fail;
    }
    if (len < 8) {
        tj__err(c, TJ_ERR_IO, NULL, 0, "%s: file is %llu bytes, too short for the 8-byte header length", label, (unsigned long long)len);
        goto fail;
    }
    for (k = 7; k >= 0; k--) hlen = (hlen << 8) | buf[k];
    if (hlen > len - 8) {
        tj__err(c, TJ_ERR_IO, NULL, 0, "%s: header length %llu exceeds file size %llu (truncated file?)", label, (unsigned long long)hlen, (unsigned long long)len);
        goto fail;
    }
    if (hlen < 2) {
        tj__err(c, TJ_ERR_IO, NULL, 0, "%s: header length %llu too small for a JSON object", label, (unsigned long long)hlen);
        goto fail;
    }
    st->data_start = 8 + (size_t)hlen;
    data_len = len - st->data_start;
    tj_json_init(&j, (const char *)buf + 8, (size_t)hlen, label, NULL, 0);
    j.base = 8;
    j.what = "safetensors header";
    j.ctx = c;
    if (buf[8] != '{') { /* the spec wants no leading space */
        tj_json_fail(&j, "header must start with '{'");
        goto fail;
    }
    j.i = 1;
    while ((r = tj_json_object_next(&j, &first, &key)) == 1) {
        tj__st_ten *x;
        if (strcmp(key, "__metadata__") == 0) {
            TJ_FREE(key);
            if (seen_meta++) {
                tj_json_fail(&j, "duplicate __metadata__");
                goto fail;
            }
            if (tj__st_meta_hdr(&j, st)) goto fail;
            continue;
        }
        if (st->n == st->cap) {
            int nc = st->cap ? st->cap * 2 : 16;
            tj__st_ten *nt = (tj__st_ten *)TJ_REALLOC(st->ten, sizeof(tj__st_ten) * (size_t)nc);
            if (!nt) {
                TJ_FREE(key);
                tj__err(c, TJ_ERR_OOM, NULL, 0, "%s: out of memory", label);
                goto fail;
            }
            st->ten = nt;
            st->cap = nc;
        }
        x = &st->ten[st->n++];
        memset(x, 0, sizeof *x);
        x->t.name = key;
        if (tj__st_tensor_hdr(&j, x)) goto fail;
    }
    if (r < 0) goto fail;
    tj__json_ws(&j); /* only whitespace padding may follow */
    if (j.i != j.n) {
        tj_json_fail(&j, "trailing garbage after the header object");
        goto fail;
    }
    for (k = 0; k < st->n; k++) {
        tj__st_ten *x = &st->ten[k];
        uint64_t isz = tj_st_dtype_size(x->t.dtype), numel = 1, nb;
        int d;
        for (d = 0; d < x->t.rank; d++) {
            uint64_t dim = (uint64_t)x->t.shape[d];
            if (dim != 0 && numel > (uint64_t)INT64_MAX / dim) {
                tj__err(c, TJ_ERR_IO, NULL, 0, "%s: tensor '%.64s': element count overflows", label, x->t.name);
                goto fail;
            }
            numel *= dim;
        }
        if (numel > UINT64_MAX / isz) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: tensor '%.64s': byte size overflows", label, x->t.name);
            goto fail;
        }
        nb = numel * isz;
        if (x->begin > x->end || x->end > data_len) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: tensor '%.64s': data_offsets [%llu,%llu] outside the data section of %llu bytes (truncated file?)", label, x->t.name,
                    (unsigned long long)x->begin, (unsigned long long)x->end, (unsigned long long)data_len);
            goto fail;
        }
        if (x->end - x->begin != nb) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: tensor '%.64s': data_offsets [%llu,%llu] span %llu bytes, but %s shape needs %llu", label, x->t.name,
                    (unsigned long long)x->begin, (unsigned long long)x->end, (unsigned long long)(x->end - x->begin), tj_st_dtype_name(x->t.dtype),
                    (unsigned long long)nb);
            goto fail;
        }
        x->t.numel = (int64_t)numel;
        x->t.nbytes = (size_t)nb;
        x->t.data = buf + st->data_start + x->begin;
    }
    st->by_name = (int *)tj__malloc(sizeof(int) * (size_t)st->n);
    by_off = (int *)tj__malloc(sizeof(int) * (size_t)st->n);
    tmp = (int *)tj__malloc(sizeof(int) * (size_t)st->n);
    if (!st->by_name || !by_off || !tmp) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "%s: out of memory", label);
        goto fail;
    }
    for (k = 0; k < st->n; k++) st->by_name[k] = by_off[k] = k;
    tj__st_sort(st->by_name, tmp, st->n, st->ten, 0);
    for (k = 1; k < st->n; k++)
        if (strcmp(st->ten[st->by_name[k - 1]].t.name, st->ten[st->by_name[k]].t.name) == 0) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: duplicate tensor name '%.64s'", label, st->ten[st->by_name[k]].t.name);
            goto fail;
        }
    /* Tensors must tile the data section: overlaps would alias weights,
       holes could smuggle other content (the spec forbids both). */
    tj__st_sort(by_off, tmp, st->n, st->ten, 1);
    pos = 0;
    for (k = 0; k < st->n; k++) {
        const tj__st_ten *x = &st->ten[by_off[k]];
        if (x->begin < pos) {
            const tj__st_ten *y = &st->ten[by_off[k - 1]];
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: tensor '%.64s' [%llu,%llu] overlaps tensor '%.64s' [%llu,%llu]", label, x->t.name, (unsigned long long)x->begin,
                    (unsigned long long)x->end, y->t.name, (unsigned long long)y->begin, (unsigned long long)y->end);
            goto fail;
        }
        if (x->begin > pos) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: hole in the data section at bytes [%llu,%llu) before tensor '%.64s'", label, (unsigned long long)pos,
                    (unsigned long long)x->begin, x->t.name);
            goto fail;
        }
        pos = x->end;
    }
    if (pos != data_len) {
        tj__err(c, TJ_ERR_IO, NULL, 0, "%s: data section has %llu trailing bytes not covered by any tensor", label, (unsigned long long)(data_len - pos));
        goto fail;
    }
    if (tj__st_verify(st)) goto fail;
    TJ_FREE(by_off);
    TJ_FREE(tmp);
    return st;
fail:
    TJ_FREE(by_off);
    TJ_FREE(tmp);
    tj_st_free(st);
    return NULL;
}
TJDEF tj_safetensors *tj_st_parse(tj_ctx *c, const void *bytes, size_t len, const char *label) {
    unsigned char *copy;
    if (!label) label = "(bytes)";
    if (!c) return NULL;
    if (!bytes && len) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_st_parse: %s: argument bytes is NULL", label);
        return NULL;
    }
    if (!(copy = (unsigned char *)tj__malloc(len))) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "%s: out of memory", label);
        return NULL;
    }
    if (len) memcpy(copy, bytes, len);
    return tj__st_parse_owned(c, copy, len, label);
}
TJDEF tj_safetensors *tj_st_load(tj_ctx *c, const char *path) {
    char *buf, err[TJ__MSG];
    size_t len;
    tj_status st;
    if (!c) return NULL;
    if (!path) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_st_load: argument path is NULL");
        return NULL;
    }
    if ((st = tj__file_read(path, &buf, &len, err, sizeof err)) != TJ_OK) {
        tj__err(c, st, NULL, 0, "%s", err);
        return NULL;
    }
    return tj__st_parse_owned(c, (unsigned char *)buf, len, path);
}
TJDEF int tj_st_count(const tj_safetensors *st) { return st ? st->n : 0; }
TJDEF const tj_st_tensor *tj_st_at(const tj_safetensors *st, int i) { return st && i >= 0 && i < st->n ? &st->ten[i].t : NULL; }
TJDEF const tj_st_tensor *tj_st_find(const tj_safetensors *st, const char *name) {
    int lo = 0, hi = st ? st->n : 0;
    if (!name) return NULL;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, r = strcmp(st->ten[st->by_name[mid]].t.name, name);
        if (r == 0) return &st->ten[st->by_name[mid]].t;
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}
static void tj__st_fmt_shape(char *o, size_t on, int rank, const int64_t *shape) {
    size_t m;
    int d;
    snprintf(o, on, "[");
    for (d = 0; d < rank; d++) {
        m = strlen(o);
        snprintf(o + m, on - m, d ? ",%lld" : "%lld", (long long)shape[d]);
    }
    m = strlen(o);
    snprintf(o + m, on - m, "]");
}
TJDEF const tj_st_tensor *tj_st_expect(const tj_safetensors *st, const char *name, tj_st_dtype dt, int rank, const int64_t *shape) {
    const tj_st_tensor *t;
    int d, bad;
    if (!st) return NULL;
    if (!name) {
        tj__err(st->ctx, TJ_ERR_ARG, NULL, 0, "tj_st_expect: %s: argument name is NULL", st->path);
        return NULL;
    }
    if ((unsigned)dt >= TJ_ST_NDTYPE || rank < 0 || rank > TJ_MAXDIM) { /* the caller's mistake, not the file's */
        tj__err(st->ctx, TJ_ERR_ARG, NULL, 0, "tj_st_expect: %s: tensor '%s': bad expectation (dtype %d, rank %d; rank 0..%d)", st->path, name, (int)dt, rank,
                TJ_MAXDIM);
        return NULL;
    }
    if (!(t = tj_st_find(st, name))) {
        tj__err(st->ctx, TJ_ERR_IO, NULL, 0, "%s: no tensor named '%s'", st->path, name ? name : "(null)");
        return NULL;
    }
    if (t->dtype != dt) {
        tj__err(st->ctx, TJ_ERR_IO, NULL, 0, "%s: tensor '%s' has dtype %s, want %s", st->path, name, tj_st_dtype_name(t->dtype), tj_st_dtype_name(dt));
        return NULL;
    }
    bad = rank != t->rank;
    for (d = 0; !bad && shape && d < rank; d++) bad = t->shape[d] != shape[d];
    if (bad) {
        char a[200], b[200];
        tj__st_fmt_shape(a, sizeof a, t->rank, t->shape);
        if (shape && rank >= 0 && rank <= TJ_MAXDIM) tj__st_fmt_shape(b, sizeof b, rank, shape);
        else snprintf(b, sizeof b, "rank %d", rank);
        tj__err(st->ctx, TJ_ERR_IO, NULL, 0, "%s: tensor '%s' has shape %s, want %s", st->path, name, a, b);
        return NULL;
    }
    return t;
}
TJDEF int tj_st_meta_count(const tj_safetensors *st) { return st ? st->n_meta : 0; }
TJDEF const char *tj_st_meta_key(const tj_safetensors *st, int i) { return st && i >= 0 && i < st->n_meta ? st->meta[2 * i] : NULL; }
TJDEF const char *tj_st_meta(const tj_safetensors *st, const char *key) {
    int k;
    for (k = 0; st && key && k < st->n_meta; k++)
        if (strcmp(st->meta[2 * k], key) == 0) return st->meta[2 * k + 1];
    return NULL;
}
static float tj__f16_to_f32(uint32_t h) {
    uint32_t sign = (h & 0x8000u) << 16, ex = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    float f;
    if (ex == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: renormalize */
            ex = 127 - 15 + 1;
            while (!(man & 0x400)) man <<= 1, ex--;
            man &= 0x3FF;
            bits = sign | (ex << 23) | (man << 13);
        }
    } else if (ex == 31) bits = sign | 0x7F800000u | (man << 13);
    else bits = sign | ((ex + 127 - 15) << 23) | (man << 13);
    memcpy(&f, &bits, 4);
    return f;
}
/* element i of a tensor, little-endian and unaligned safe */
static double tj__st_elem(const tj_st_tensor *t, int64_t i) {
    size_t isz = tj_st_dtype_size(t->dtype);
    const unsigned char *p = (const unsigned char *)t->data + (size_t)i * isz;
    uint64_t v = 0;
    int n = (int)isz;
    while (n-- > 0) v = (v << 8) | p[n];
    switch (t->dtype) {
    case TJ_ST_F32: {
        uint32_t b = (uint32_t)v;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    case TJ_ST_BF16: return tj_bf16_to_f32((uint16_t)v);
    case TJ_ST_F16: return tj__f16_to_f32((uint32_t)v);
    case TJ_ST_F64: {
        double d;
        memcpy(&d, &v, 8);
        return d;
    }
    case TJ_ST_I64: return (double)(int64_t)v;
    case TJ_ST_I32: return (double)(int32_t)(uint32_t)v;
    case TJ_ST_I16: return (double)(int16_t)(uint16_t)v;
    case TJ_ST_I8: return (double)(int8_t)(uint8_t)v;
    default: return (double)v;
    }
}
TJDEF tj_status tj_st_to_f32(const tj_st_tensor *t, float *out) {
    int64_t i;
    if (!t || !out || !tj_st_dtype_size(t->dtype)) return TJ_ERR_ARG;
    for (i = 0; i < t->numel; i++) out[i] = (float)tj__st_elem(t, i);
    return TJ_OK;
}
static int tj__little_endian(void) {
    uint16_t x = 1;
    unsigned char b;
    memcpy(&b, &x, 1);
    return b == 1;
}
/* Copy n bytes of little-endian items of size isz to host order. */
static void tj__st_copy_le(void *dst, const void *src, size_t n, size_t isz) {
    size_t i, k;
    if (tj__little_endian() || isz == 1) {
        if (n) memcpy(dst, src, n);
        return;
    }
    for (i = 0; i + isz <= n; i += isz)
        for (k = 0; k < isz; k++) ((unsigned char *)dst)[i + k] = ((const unsigned char *)src)[i + isz - 1 - k];
}
/* The longest axis name a file may carry: tj_tree_save refuses to write
   longer ones, and every reader accepts up to this. */
#define TJ__AXNAME_MAX 64
/* "a=2 b=3" from axis names and a tensor's sizes; 0 and an error naming
   `who` on a bad axis list or a size tinyjax arrays cannot have. */
static int tj__st_shape_str(tj_ctx *c, const char *file, const char *who, const char *axes, const tj_st_tensor *t, char *out, size_t on) {
    const char *s = axes ? axes : "";
    char nm[TJ_MAXDIM][TJ__AXNAME_MAX + 1];
    int n = 0, d, e;
    size_t m;
    while (*s) {
        const char *b;
        if (*s == ' ' || *s == ',' || *s == '\t') {
            s++;
            continue;
        }
        b = s;
        while (*s && tj__isname(*s)) s++;
        if (s == b || (*s && *s != ' ' && *s != ',' && *s != '\t') || s - b > TJ__AXNAME_MAX || n >= TJ_MAXDIM) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: %s: bad axis names \"%.80s\" (names of letters, digits, '_' and '.', at most %d characters)", file, who,
                    axes, TJ__AXNAME_MAX);
            return 0;
        }
        memcpy(nm[n], b, (size_t)(s - b));
        nm[n++][s - b] = 0;
    }
    if (n != t->rank) {
        tj__err(c, TJ_ERR_IO, NULL, 0, "%s: %s: %d axis names \"%.80s\" for a rank-%d tensor", file, who, n, axes ? axes : "", t->rank);
        return 0;
    }
    out[0] = 0;
    for (d = 0; d < n; d++) {
        for (e = 0; e < d; e++)
            if (strcmp(nm[e], nm[d]) == 0) {
                tj__err(c, TJ_ERR_IO, NULL, 0, "%s: %s: axis '%s' appears twice in \"%.80s\"", file, who, nm[d], axes);
                return 0;
            }
        if (t->shape[d] < 1 || t->shape[d] > TJ__MAXDIM_SIZE) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: %s: axis '%s' has size %lld (tinyjax arrays need 1 .. 2^40)", file, who, nm[d], (long long)t->shape[d]);
            return 0;
        }
        m = strlen(out);
        snprintf(out + m, on - m, "%s%s=%lld", d ? " " : "", nm[d], (long long)t->shape[d]);
    }
    return 1;
}
/* The type (named shape, dtype dt, replicated) of a tensor with these axis
   names; 0 and an error naming `who` when they do not fit it. */
static int tj__st_type(tj_ctx *c, const char *file, const char *who, const tj_st_tensor *t, tj_dtype dt, const char *axes, tj__type *ty) {
    char shape[TJ_MAXDIM * 96];
    if (!tj__st_shape_str(c, file, who, axes, t, shape, sizeof shape)) return 0;
    return !tj__parse_shape(c, shape, dt, ty, 0, who, NULL, 0);
}
/* An array of type ty (its sharding included: each of this process's
   devices gets only its block; ord: the spec's tuple order, or NULL) from a
   tensor whose dtype is ty's, or any dtype when converted. The whole
   tensor passes through the host once. */
static tj_array *tj__st_fill_array(tj_ctx *c, const char *file, const char *who, const tj_st_tensor *t, const tj__type *ty,
                                   unsigned char (*ord)[TJ__MAXMESH]) {
    tj_dtype dt = ty->dt;
    void *h;
    tj_array *a;
    int64_t i;
    if (!(h = tj__malloc((size_t)t->numel * tj_dtype_size(dt)))) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "%s: %s: out of memory", file, who);
        return NULL;
    }
    if (tj_st_dtype_of(dt) == t->dtype) tj__st_copy_le(h, t->data, t->nbytes, tj_dtype_size(dt));
    else
        for (i = 0; i < t->numel; i++) tj__st(h, dt, i, tj__st_elem(t, i));
    if ((a = tj__array_alloc(c, ty, NULL, 0)) && tj__array_upload(a, h)) {
        if (!c->status) tj__err(c, TJ_ERR_OOM, NULL, 0, "%s: %s: out of memory", file, who);
        tj_array_free(a);
        a = NULL;
    }
    if (a && ord) tj__arr_set_order(a, ord);
    TJ_FREE(h);
    return a;
}
/* An array from a tensor whose dtype is dt's, or any dtype when convert. */
static tj_array *tj__st_make_array(tj_ctx *c, const char *file, const char *who, const tj_st_tensor *t, tj_dtype dt, const char *axes) {
    tj__type ty;
    if (!tj__st_type(c, file, who, t, dt, axes, &ty)) return NULL;
    return tj__st_fill_array(c, file, who, t, &ty, NULL);
}
TJDEF tj_array *tj_st_array(const tj_safetensors *st, const char *name, tj_dtype dt, const char *axes) {
    const tj_st_tensor *t;
    char who[96];
    if (!st) return NULL;
    if ((unsigned)dt >= TJ_NDTYPE) {
        tj__err(st->ctx, TJ_ERR_DTYPE, NULL, 0, "tj_st_array: bad dtype %d", (int)dt);
        return NULL;
    }
    if (!name || !axes) {
        tj__err(st->ctx, TJ_ERR_ARG, NULL, 0, "tj_st_array: %s: argument %s is NULL", st->path, !name ? "name" : "axes");
        return NULL;
    }
    if (!(t = tj_st_find(st, name))) {
        tj__err(st->ctx, TJ_ERR_IO, NULL, 0, "%s: no tensor named '%s'", st->path, name ? name : "(null)");
        return NULL;
    }
    snprintf(who, sizeof who, "tensor '%.64s'", name);
    return tj__st_make_array(st->ctx, st->path, who, t, dt, axes);
}

/* -- writer -- */
static int tj__st_write(tj_ctx *c, const char *path, const tj_st_entry *ten, int n, const char *const *meta_kv, int n_meta, int checksum) {
    tj_strbuf h;
    tj__afile f;
    tj__hash hs;
    uint64_t *offs = NULL, pos = 0;
    size_t *nbytes = NULL, pre = sizeof tj__st_ckpre - 1;
    int *order = NULL, *tmp = NULL, i, k, no = 0, rc = 1;
    tj__st_ten *fake = NULL;
    unsigned char lenb[8];
    unsigned sz;
    char num[64], hex[17];
    memset(&h, 0, sizeof h);
    if (!path) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_st_save: argument path is NULL");
        return 1;
    }
    if (n < 0 || n_meta < 0 || (n && !ten) || (n_meta && !meta_kv)) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "%s: bad tensor or metadata list (%d tensors, %d metadata pairs)", path, n, n_meta);
        return 1;
    }
    offs = (uint64_t *)tj__malloc(sizeof(uint64_t) * (size_t)n);
    nbytes = (size_t *)tj__malloc(sizeof(size_t) * (size_t)n);
    order = (int *)tj__malloc(sizeof(int) * (size_t)n);
    tmp = (int *)tj__malloc(sizeof(int) * (size_t)n);
    fake = (tj__st_ten *)tj__calloc(sizeof(tj__st_ten) * (size_t)n);
    if (!offs || !nbytes || !order || !tmp || !fake) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "%s: out of memory", path);
        goto done;
    }
    for (i = 0; i < n; i++) {
        const tj_st_entry *e = &ten[i];
        uint64_t numel = 1, isz = tj_st_dtype_size(e->dtype);
        if (!e->name || !*e->name || !tj__u8_valid(e->name) || strcmp(e->name, "__metadata__") == 0) {
            tj__err(c, TJ_ERR_ARG, NULL, 0, "%s: tensor %d: invalid name (NULL, empty, not UTF-8 or \"__metadata__\")", path, i);
            goto done;
        }
        if (!isz) {
            tj__err(c, TJ_ERR_DTYPE, NULL, 0, "%s: tensor '%s': invalid dtype %d", path, e->name, (int)e->dtype);
            goto done;
        }
        if (e->rank < 0 || e->rank > TJ_MAXDIM || (e->rank > 0 && !e->shape)) {
            tj__err(c, TJ_ERR_ARG, NULL, 0, "%s: tensor '%s': %s rank %d (0..%d)", path, e->name, e->rank >= 0 && e->rank <= TJ_MAXDIM ? "shape is NULL for" : "invalid",
                    e->rank, TJ_MAXDIM);
            goto done;
        }
        for (k = 0; k < e->rank; k++) {
            if (e->shape[k] < 0) {
                tj__err(c, TJ_ERR_SHAPE, NULL, 0, "%s: tensor '%s': negative dimension %lld", path, e->name, (long long)e->shape[k]);
                goto done;
            }
            if (e->shape[k] != 0 && numel > (uint64_t)SIZE_MAX / 2 / isz / (uint64_t)e->shape[k]) {
                tj__err(c, TJ_ERR_SHAPE, NULL, 0, "%s: tensor '%s': too large", path, e->name);
                goto done;
            }
            numel *= (uint64_t)e->shape[k];
        }
        nbytes[i] = (size_t)(numel * isz);
        if (nbytes[i] && !e->data) {
            tj__err(c, TJ_ERR_ARG, NULL, 0, "%s: tensor '%s': NULL data", path, e->name);
            goto done;
        }
        fake[i].t.name = e->name;
        order[i] = i;
    }
    tj__st_sort(order, tmp, n, fake, 0);
    for (i = 1; i < n; i++)
        if (strcmp(ten[order[i - 1]].name, ten[order[i]].name) == 0) {
            tj__err(c, TJ_ERR_ARG, NULL, 0, "%s: duplicate tensor name '%s'", path, ten[order[i]].name);
            goto done;
        }
    for (i = 0; i < n_meta; i++)
        if (!meta_kv[2 * i] || !meta_kv[2 * i + 1] || !tj__u8_valid(meta_kv[2 * i]) || !tj__u8_valid(meta_kv[2 * i + 1]) ||
            strcmp(meta_kv[2 * i], TJ__ST_CKKEY) == 0) {
            tj__err(c, TJ_ERR_ARG, NULL, 0, "%s: metadata entry %d is NULL, not UTF-8, or the reserved key " TJ__ST_CKKEY, path, i);
            goto done;
        }
        else
            for (k = 0; k < i; k++)
                if (strcmp(meta_kv[2 * k], meta_kv[2 * i]) == 0) {
                    tj__err(c, TJ_ERR_ARG, NULL, 0, "%s: duplicate metadata key '%s'", path, meta_kv[2 * i]);
                    goto done;
                }
    /* Largest item size first: with the 8-aligned data start every tensor
       is naturally aligned for zero-copy use. */
    for (sz = 8; sz >= 1; sz /= 2)
        for (i = 0; i < n; i++)
            if (tj_st_dtype_size(ten[i].dtype) == sz) {
                order[no++] = i;
                offs[i] = pos;
                pos += nbytes[i];
            }
    if (checksum) tj_strbuf_puts(&h, tj__st_ckpre), tj_strbuf_puts(&h, "0000000000000000\"");
    else tj_strbuf_put(&h, "{", 1);
    if (n_meta > 0) {
        if (!checksum) tj_strbuf_puts(&h, "\"__metadata__\":{");
        for (i = 0; i < n_meta; i++) {
            if (i || checksum) tj_strbuf_put(&h, ",", 1);
            tj_strbuf_json(&h, meta_kv[2 * i]);
            tj_strbuf_put(&h, ":", 1);
            tj_strbuf_json(&h, meta_kv[2 * i + 1]);
        }
    }
    if (n_meta > 0 || checksum) tj_strbuf_put(&h, "}", 1);
    for (i = 0; i < n; i++) {
        const tj_st_entry *e = &ten[i];
        if (i || n_meta > 0 || checksum) tj_strbuf_put(&h, ",", 1);
        tj_strbuf_json(&h, e->name);
        tj_strbuf_puts(&h, ":{\"dtype\":\"");
        tj_strbuf_puts(&h, tj_st_dtype_name(e->dtype));
        tj_strbuf_puts(&h, "\",\"shape\":[");
        for (k = 0; k < e->rank; k++) {
            snprintf(num, sizeof num, k ? ",%lld" : "%lld", (long long)e->shape[k]);
            tj_strbuf_puts(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offs[i], (unsigned long long)(offs[i] + nbytes[i]));
        tj_strbuf_puts(&h, num);
    }
    tj_strbuf_put(&h, "}", 1);
    while ((8 + h.n) % 8) tj_strbuf_put(&h, " ", 1);
    if (h.oom) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "%s: out of memory", path);
        goto done;
    }
    for (k = 0; k < 8; k++) lenb[k] = (unsigned char)((uint64_t)h.n >> (8 * k));
    if (checksum) {
        tj__hash_init(&hs);
        tj__hash_put(&hs, lenb, 8);
        tj__hash_put(&hs, h.p, h.n);
        for (k = 0; k < no; k++) tj__hash_put(&hs, ten[order[k]].data, nbytes[order[k]]);
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)tj__hash_end(&hs));
        memcpy(h.p + pre, hex, 16);
    }
    if (tj__af_open(&f, c, NULL, 0, path)) goto done;
    if (tj__af_write(&f, lenb, 8) || tj__af_write(&f, h.p, h.n)) goto done;
    for (k = 0; k < no; k++)
        if (nbytes[order[k]] && tj__af_write(&f, ten[order[k]].data, nbytes[order[k]])) goto done;
    if (tj__af_commit(&f)) goto done;
    rc = 0;
done:
    TJ_FREE(h.p);
    TJ_FREE(offs);
    TJ_FREE(nbytes);
    TJ_FREE(order);
    TJ_FREE(tmp);
    TJ_FREE(fake);
    return rc;
}
TJDEF tj_status tj_st_save(tj_ctx *c, const char *path, const tj_st_entry *tensors, int n, const char *const *meta_kv, int n_meta) {
    if (!c) return TJ_ERR_ARG;
    return tj__st_write(c, path, tensors, n, meta_kv, n_meta, 0) ? (c->status ? c->status : TJ_ERR_IO) : TJ_OK;
}

/* -- trees -- */
typedef struct { /* growable list of owned metadata strings */
    char **kv;
    int n, cap, oom;
} tj__kvlist;
static void tj__kv_add(tj__kvlist *l, const char *prefix, const char *name, const char *val) {
    size_t a = strlen(prefix), b = name ? strlen(name) : 0;
    char *k, *v;
    if (l->oom) return;
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 16;
        char **p = (char **)TJ_REALLOC(l->kv, sizeof(char *) * 2 * (size_t)nc);
        if (!p) {
            l->oom = 1;
            return;
        }
        l->kv = p;
        l->cap = nc;
    }
    k = (char *)tj__malloc(a + b + 1);
    v = tj__strdup(val);
    if (!k || !v) {
        TJ_FREE(k);
        TJ_FREE(v);
        l->oom = 1;
        return;
    }
    memcpy(k, prefix, a);
    if (b) memcpy(k + a, name, b);
    k[a + b] = 0;
    l->kv[2 * l->n] = k;
    l->kv[2 * l->n + 1] = v;
    l->n++;
}
static void tj__kv_free(tj__kvlist *l) {
    int i;
    for (i = 0; i < 2 * l->n; i++) TJ_FREE(l->kv[i]);
    TJ_FREE(l->kv);
}

static tj_status tj__procs_tree_io(const tj_tree *t, const char *path, int save); /* process mode: [11] */
TJDEF tj_status tj_tree_save(const tj_tree *t, const char *path) {
    tj_ctx *c;
    tj__kvlist kv;
    tj_strbuf order;
    tj_st_entry *e = NULL;
    int64_t (*shapes)[TJ_MAXDIM] = NULL;
    void **bufs = NULL;
    int i, d, ne = 0, na = 0;
    tj_status rc = TJ_ERR_IO;
    char num[64], axes[TJ_MAXDIM * (TJ__AXNAME_MAX + 1) + 1];
    if (!t) return TJ_ERR_ARG;
    c = t->ctx;
    if (!path) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_tree_save: argument path is NULL");
        return TJ_ERR_ARG;
    }
    if (tj_process_count(c) > 1 && !tj__procs_tree_io(t, path, -1)) return tj__procs_tree_io(t, path, 1);
    memset(&kv, 0, sizeof kv);
    memset(&order, 0, sizeof order);
    for (i = 0; i < t->n; i++) na += t->leaf[i].kind == TJ_LEAF_ARRAY;
    e = (tj_st_entry *)tj__calloc(sizeof(tj_st_entry) * (size_t)na);
    shapes = (int64_t(*)[TJ_MAXDIM])tj__calloc(sizeof(int64_t) * TJ_MAXDIM * (size_t)na);
    bufs = (void **)tj__calloc(sizeof(void *) * (size_t)na);
    if (!e || !shapes || !bufs) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "tj_tree_save: %s: out of memory", path);
        rc = TJ_ERR_OOM;
        goto done;
    }
    tj__kv_add(&kv, "format", NULL, "pt");
    tj__kv_add(&kv, "tinyjax.version", NULL, "1");
    tj__kv_add(&kv, "tinyjax.order", NULL, ""); /* filled in below */
    for (i = 0; i < t->n; i++) {
        const tj__leaf *l = &t->leaf[i];
        if (strchr(l->name, '\n') || !tj__u8_valid(l->name)) {
            tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_tree_save: %s: leaf name '%s' has a newline or is not UTF-8", path, l->name);
            rc = TJ_ERR_ARG;
            goto done;
        }
        if (i) tj_strbuf_put(&order, "\n", 1);
        tj_strbuf_puts(&order, l->name);
        switch (l->kind) {
        case TJ_LEAF_ARRAY: {
            const tj_array *a = l->arr;
            if (!tj__array_live(l->arr, "tj_tree_save", NULL, 0)) {
                rc = TJ_ERR_STATE;
                goto done;
            }
            axes[0] = 0;
            for (d = 0; d < a->t.rank; d++) {
                size_t m = strlen(axes);
                if (strlen(tj__name(c, a->t.ax[d])) > TJ__AXNAME_MAX) { /* what save writes, load must read */
                    tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_tree_save: %s: leaf '%s': axis name '%.80s...' is longer than %d characters, the limit of saved axis names",
                            path, l->name, tj__name(c, a->t.ax[d]), TJ__AXNAME_MAX);
                    rc = TJ_ERR_ARG;
                    goto done;
                }
                snprintf(axes + m, sizeof axes - m, "%s%s", d ? "," : "", tj__name(c, a->t.ax[d]));
                shapes[ne][d] = a->t.dim[d];
            }
            tj__kv_add(&kv, "tinyjax.axes.", l->name, axes);
            if (!(bufs[ne] = tj__malloc((size_t)tj__bytes(&a->t)))) {
                tj__err(c, TJ_ERR_OOM, NULL, 0, "tj_tree_save: %s: out of memory reading leaf '%s'", path, l->name);
                rc = TJ_ERR_OOM;
                goto done;
            }
            if ((rc = tj_array_read_all(l->arr, a->t.dt, bufs[ne])) != TJ_OK) goto done; /* process mode: from every process */
            rc = TJ_ERR_IO;
            e[ne].name = l->name;
            e[ne].dtype = tj_st_dtype_of(a->t.dt);
            e[ne].rank = a->t.rank;
            e[ne].shape = shapes[ne];
            e[ne].data = bufs[ne];
            ne++;
            break;
        }
        case TJ_LEAF_INT:
            snprintf(num, sizeof num, "%lld", (long long)l->i);
            tj__kv_add(&kv, "tinyjax.int.", l->name, num);
            break;
        case TJ_LEAF_FLOAT:
            snprintf(num, sizeof num, "%.17g", l->f);
            tj__kv_add(&kv, "tinyjax.float.", l->name, num);
            break;
        case TJ_LEAF_STRING:
            if (!tj__u8_valid(l->s)) {
                tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_tree_save: %s: string leaf '%s' is not UTF-8", path, l->name);
                rc = TJ_ERR_ARG;
                goto done;
            }
            tj__kv_add(&kv, "tinyjax.string.", l->name, l->s);
            break;
        default:
            tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_tree_save: %s: leaf '%s' is a traced value; only arrays, ints, floats and strings can be saved", path, l->name);
            rc = TJ_ERR_ARG;
            goto done;
        }
    }
    if (kv.oom || order.oom) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "tj_tree_save: %s: out of memory", path);
        rc = TJ_ERR_OOM;
        goto done;
    }
    TJ_FREE(kv.kv[5]);
    kv.kv[5] = order.p ? order.p : tj__strdup("");
    order.p = NULL;
    if (!kv.kv[5]) {
        tj__err(c, TJ_ERR_OOM, NULL, 0, "tj_tree_save: %s: out of memory", path);
        rc = TJ_ERR_OOM;
        goto done;
    }
    if (tj_process_index(c) == 0) /* process mode: process 0 writes */
        rc = tj__st_write(c, path, e, ne, (const char *const *)kv.kv, kv.n, 1) ? (c->status ? c->status : TJ_ERR_IO) : TJ_OK;
    else rc = TJ_OK;
done:
    for (i = 0; bufs && i < na; i++) TJ_FREE(bufs[i]);
    TJ_FREE(bufs);
    TJ_FREE(shapes);
    TJ_FREE(e);
    TJ_FREE(order.p);
    tj__kv_free(&kv);
    return rc;
}

/* meta[prefix + name]; key has room for the longest prefix and name */
static const char *tj__st_meta2(const tj_safetensors *st, const char *prefix, const char *name, char *key) {
    size_t a = strlen(prefix);
    memcpy(key, prefix, a);
    strcpy(key + a, name);
    return tj_st_meta(st, key);
}
static int tj__cmp_cstr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

TJDEF tj_status tj_tree_load(tj_tree *t, const char *path) {
    static const char *kn[] = {"an array", "a traced value", "an int", "a float", "a string"};
    tj_ctx *c;
    tj_safetensors *st = NULL;
    const char *ord, *ver;
    char *names_buf = NULL, **names = NULL, **sorted = NULL, *key = NULL, *end;
    size_t maxlen = 0;
    tj__leaf *stage = NULL;
    int *at = NULL, nn = 0, i, k, nnew = 0, counts[4] = {0, 0, 0, 0}, nmeta_tj[4] = {0, 0, 0, 0};
    tj_status rc = TJ_ERR_IO;
    if (!t) return TJ_ERR_ARG;
    c = t->ctx;
    if (!path) {
        tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_tree_load: argument path is NULL");
        return TJ_ERR_ARG;
    }
    if (tj_process_count(c) > 1 && !tj__procs_tree_io(t, path, -1)) return tj__procs_tree_io(t, path, 0);
    if (!(st = tj_st_load(c, path))) return c->status ? c->status : TJ_ERR_IO;
    ord = tj_st_meta(st, "tinyjax.order");
    ver = tj_st_meta(st, "tinyjax.version");
    if (ver || ord) {
        if (!ver || strcmp(ver, "1") != 0) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: tinyjax.version is %s%s%s, this tinyjax reads version 1", path, ver ? "\"" : "", ver ? ver : "missing", ver ? "\"" : "");
            goto done;
        }
        if (!ord || !tj_st_meta(st, TJ__ST_CKKEY)) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: corrupt tinyjax file: no %s", path, ord ? TJ__ST_CKKEY : "tinyjax.order");
            goto done;
        }
        /* the leaf names, one per line */
        if (!(names_buf = tj__strdup(ord))) goto oom;
        for (i = 0, nn = *ord ? 1 : 0; ord[i]; i++) nn += ord[i] == '\n';
        names = (char **)tj__malloc(sizeof(char *) * (size_t)nn);
        if (!names) goto oom;
        for (i = 0, k = 0; k < nn; k++) {
            names[k] = names_buf + i;
            while (names_buf[i] && names_buf[i] != '\n') i++;
            if (names_buf[i]) names_buf[i++] = 0;
            if (!*names[k]) {
                tj__err(c, TJ_ERR_IO, NULL, 0, "%s: corrupt tinyjax file: empty leaf name in tinyjax.order", path);
                goto done;
            }
        }
    } else { /* a foreign file: its tensors in header order */
        nn = st->n;
        names = (char **)tj__malloc(sizeof(char *) * (size_t)nn);
        if (!names) goto oom;
        for (k = 0; k < nn; k++) names[k] = (char *)st->ten[k].t.name;
    }
    sorted = (char **)tj__malloc(sizeof(char *) * (size_t)nn);
    stage = (tj__leaf *)tj__calloc(sizeof(tj__leaf) * (size_t)nn);
    at = (int *)tj__malloc(sizeof(int) * (size_t)nn);
    for (k = 0; k < nn; k++)
        if (strlen(names[k]) > maxlen) maxlen = strlen(names[k]);
    key = (char *)tj__malloc(maxlen + 32);
    if (!sorted || !stage || !at || !key) goto oom;
    memcpy(sorted, names, sizeof(char *) * (size_t)nn);
    qsort(sorted, (size_t)nn, sizeof(char *), tj__cmp_cstr);
    for (k = 1; k < nn; k++)
        if (strcmp(sorted[k - 1], sorted[k]) == 0) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: corrupt tinyjax file: leaf '%s' is listed twice", path, sorted[k]);
            goto done;
        }
    if (ord) /* every tinyjax.* key must belong to a listed leaf of its kind */
        for (k = 0; k < st->n_meta; k++) {
            const char *key = st->meta[2 * k];
            if (strncmp(key, "tinyjax.axes.", 13) == 0) nmeta_tj[0]++;
            else if (strncmp(key, "tinyjax.int.", 12) == 0) nmeta_tj[1]++;
            else if (strncmp(key, "tinyjax.float.", 14) == 0) nmeta_tj[2]++;
            else if (strncmp(key, "tinyjax.string.", 15) == 0) nmeta_tj[3]++;
        }
    /* stage every leaf; the tree is not touched until all of them are good */
    for (k = 0; k < nn; k++) {
        const char *nm = names[k], *iv = NULL, *fv = NULL, *sv = NULL, *axes = NULL;
        const tj_st_tensor *ten = tj_st_find(st, nm);
        tj__leaf *l = &stage[k];
        int have, ex = tj_tree_find(t, nm);
        if (ord) {
            iv = tj__st_meta2(st, "tinyjax.int.", nm, key);
            fv = tj__st_meta2(st, "tinyjax.float.", nm, key);
            sv = tj__st_meta2(st, "tinyjax.string.", nm, key);
            axes = tj__st_meta2(st, "tinyjax.axes.", nm, key);
        }
        have = (ten != NULL) + (iv != NULL) + (fv != NULL) + (sv != NULL);
        if (have != 1 || (ten && ord && !axes) || (!ten && axes)) {
            tj__err(c, TJ_ERR_IO, NULL, 0, "%s: corrupt tinyjax file: leaf '%s' has %s", path, nm, have ? "conflicting entries" : "no tensor or value");
            goto done;
        }
        at[k] = ex;
        l->kind = ten ? TJ_LEAF_ARRAY : iv ? TJ_LEAF_INT : fv ? TJ_LEAF_FLOAT : TJ_LEAF_STRING;
        counts[l->kind == TJ_LEAF_ARRAY ? 0 : l->kind - 1]++;
        if (ex >= 0 && t->leaf[ex].kind == TJ_LEAF_ARRAY && l->kind != TJ_LEAF_ARRAY) {
            tj__err(c, TJ_ERR_ARG, NULL, 0, "tj_tree_load: %s: leaf '%s' is an array in the tree but %s in the file", path, nm, kn[l->kind]);
            rc = TJ_ERR_ARG;
            goto done;
        }
        if (ten) {
            tj_dtype dt;
            tj__type ty;
            unsigned char ord[TJ_MAXDIM][TJ__MAXMESH];
            char who[96], axbuf[TJ_MAXDIM * 72];
            const tj_array *old = ex >= 0 && t->leaf[ex].kind == TJ_LEAF_ARRAY ? t->leaf[ex].arr : NULL;
            int d;
            memset(ord, 0, sizeof ord);
            snprintf(who, sizeof who, "leaf '%.64s'", nm);
            if (tj__st_to_tj(ten->dtype, &dt)) {
                tj__err(c, TJ_ERR_DTYPE, NULL, 0, "tj_tree_load: %s: leaf '%s' has dtype %s, which tinyjax arrays do not have (use tj_st_array to convert)", path, nm,
                        tj_st_dtype_name(ten->dtype));
                rc = TJ_ERR_DTYPE;
                goto done;
            }
            if (!axes) { /* a foreign file: the tree's axis names, else d0,d1,.. */
                axbuf[0] = 0;
                for (d = 0; d < ten->rank; d++) {
                    size_t m = strlen(axbuf);
                    if (old && old->t.rank == ten->rank) snprintf(axbuf + m, sizeof axbuf - m, "%s%s", d ? "," : "", tj__name(c, old->t.ax[d]));
                    else snprintf(axbuf + m, sizeof axbuf - m, "%sd%d", d ? "," : "", d);
                }
                axes = axbuf;
            }
            if (old && old->t.dt != dt) {
                tj__err(c, TJ_ERR_DTYPE, NULL, 0, "tj_tree_load: %s: leaf '%s' is %s in the tree but %s in the file", path, nm, tj_dtype_name(old->t.dt), tj_dtype_name(dt));
                rc = TJ_ERR_DTYPE;
                goto done;
            }
            if (!tj__st_type(c, path, who, ten, dt, axes, &ty)) {
                rc = c->status ? c->status : TJ_ERR_IO;
                goto done;
            }
            if (old) {
                int same = old->t.dt == ty.dt && old->t.rank == ty.rank, sharded = 0;
                for (d = 0; same && d < old->t.rank; d++) same = old->t.ax[d] == ty.ax[d] && old->t.dim[d] == ty.dim[d];
                if (!same) {
                    char a[256], b[256];
                    tj__type_str(c, &old->t, a, sizeof a);
                    tj__type_str(c, &ty, b, sizeof b);
                    tj__err(c, TJ_ERR_SHAPE, NULL, 0, "tj_tree_load: %s: leaf '%s' is %s in the tree but %s in the file", path, nm, a, b);
                    rc = TJ_ERR_SHAPE;
                    goto done;
                }
                /* the tree's leaf keeps its sharding (abstract or not): each
                   device gets only its block of the file's tensor */
                for (d = 0; d < old->t.rank; d++) sharded |= old->t.sh[d] != 0;
                if (sharded) {
                    char a[256];
                    if (old->mesh_gen != c->mesh_gen) {
                        tj__type_str(c, &old->t, a, sizeof a);
                        tj__err(c, TJ_ERR_STATE, NULL, 0, "tj_tree_load: %s: leaf '%s' (%s) was sharded under an earlier mesh (tj_set_mesh or tj_set_devices "
                                "changed it since), so its sharding means nothing now: re-place it (tj_device_put) or set a new leaf before loading", path, nm, a);
                        rc = TJ_ERR_STATE;
                        goto done;
                    }
                    memcpy(ty.sh, old->t.sh, sizeof ty.sh);
                    memcpy(ord, old->ord, sizeof ord);
                }
            }
            l->arr = tj__st_fill_array(c, path, who, ten, &ty, ord);
            if (!l->arr) {
                rc = c->status ? c->status : TJ_ERR_IO;
                goto done;
            }
            l->owned = l->arr->in_tree = 1;
        } else if (iv) {
            long long v;
            errno = 0;
            v = strtoll(iv, &end, 10);
            if (!*iv || *end || errno == ERANGE || (*iv != '-' && (*iv < '0' || *iv > '9'))) {
                tj__err(c, TJ_ERR_IO, NULL, 0, "%s: corrupt tinyjax file: int leaf '%s' is \"%.32s\"", path, nm, iv);
                goto done;
            }
            l->i = (int64_t)v;
        } else if (fv) {
            const char *p = fv;
            if (*p == '-') p++;
            l->f = strtod(fv, &end);
            if (!*fv || *end || !((*p >= '0' && *p <= '9') || *p == 'i' || *p == 'n')) {
                tj__err(c, TJ_ERR_IO, NULL, 0, "%s: corrupt tinyjax file: float leaf '%s' is \"%.32s\"", path, nm, fv);
                goto done;
            }
        } else if (!(l->s = tj__strdup(sv))) goto oom;
        if (ex < 0) {
            if (!(l->name = tj__strdup(nm))) goto oom;
            nnew++;
        }
    }
    if (ord && (counts[0] != st->n || nmeta_tj[0] != counts[0] || nmeta_tj[1] != counts[1] || nmeta_tj[2] != counts[2] || nmeta_tj[3] != counts[3])) {
        tj__err(c, TJ_ERR_IO, NULL, 0, "%s: corrupt tinyjax file: tensors or tinyjax.* metadata not listed in tinyjax.order", path);
        goto done;
    }
    if (t->n + nnew > t->cap) {
        int nc = t->n + nnew;
        tj__leaf *nl = (tj__leaf *)TJ_REALLOC(t->leaf, sizeof(tj__leaf) * (size_t)nc);
        if (!nl) goto oom;
        t->leaf = nl;
        t->cap = nc;
    }
    /* commit: no allocation, nothing can fail from here */
    for (k = 0; k < nn; k++) {
        tj__leaf *l = &stage[k];
        if (at[k] >= 0) {
            tj__leaf *d = &t->leaf[at[k]];
            tj__leaf_release(d);
            l->name = d->name;
            *d = *l;
        } else t->leaf[t->n++] = *l;
        memset(l, 0, sizeof *l);
    }
    rc = TJ_OK;
    goto done;
oom:
    tj__err(c, TJ_ERR_OOM, NULL, 0, "tj_tree_load: %s: out of memory", path);
    rc = TJ_ERR_OOM;
done:
    for (k = 0; stage && k < nn; k++) {
        if (stage[k].kind == TJ_LEAF_ARRAY) tj_array_free(stage[k].arr);
        TJ_FREE(stage[k].s);
        TJ_FREE(stage[k].name);
    }
    TJ_FREE(stage);
    TJ_FREE(at);
    TJ_FREE(sorted);
    TJ_FREE(names);
    TJ_FREE(names_buf);
    TJ_FREE(key);
    tj_st_free(st);
    return rc;
}

/* tj_prog_write_trace ([13]): the events as Chrome trace JSON, written
   like every other file of the library (temp file, fsync, rename), so a
   crash never leaves half a trace at path. A track (tid) per device and
   stream: 2 * device for its compute stream, 2 * device + 1 for its copy
   stream (named only where it has events). */
TJDEF tj_status tj_prog_write_trace(const tj_prog *p, const char *path) {
    tj_strbuf b = {NULL, 0, 0, 0};
    tj__afile af;
    char where[280];
    int i, d, bad, copies = 0;
    static const char *cat[3] = {"kernel", "collective", "copy"};
    if (!p) return TJ_ERR_ARG;
    if (!path) {
        tj__err(p->ctx, TJ_ERR_ARG, NULL, 0, "tj_prog_write_trace: argument path is NULL");
        return TJ_ERR_ARG;
    }
    tj_strbuf_puts(&b, "{\"traceEvents\": [\n");
    for (i = 0; i < p->nevents; i++) copies |= p->events[i].stream == 1;
    for (d = 0; d < p->ctx->ndev; d++) {
        tj_strbuf_printf(&b, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"device %d compute\"}},\n", 2 * d, d);
        if (copies)
            tj_strbuf_printf(&b, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"device %d copies\"}},\n", 2 * d + 1,
                             d);
    }
    for (i = 0; i < p->nevents; i++) {
        const tj_event *e = &p->events[i];
        snprintf(where, sizeof where, "%s:%d", tj__base(e->file), e->line);
        tj_strbuf_puts(&b, "{\"name\": ");
        tj_strbuf_json(&b, e->op);
        tj_strbuf_printf(&b, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"node\": ", cat[e->kind],
                         2 * e->device + (e->stream == 1), e->start_us, e->dur_us);
        tj_strbuf_json(&b, e->what);
        tj_strbuf_puts(&b, ", \"source\": ");
        tj_strbuf_json(&b, where);
        tj_strbuf_puts(&b, "}},\n");
    }
    tj_strbuf_puts(&b, "{\"name\": \"end\", \"ph\": \"i\", \"pid\": 1, \"tid\": 0, \"ts\": 0, \"s\": \"g\"}\n]}\n");
    if (b.oom) {
        tj_strbuf_free(&b);
        tj__err(p->ctx, TJ_ERR_OOM, NULL, 0, "tj_prog_write_trace: %s: out of memory", path);
        return TJ_ERR_OOM;
    }
    bad = tj__af_open(&af, p->ctx, NULL, 0, path) || tj__af_write(&af, b.p, b.n) || tj__af_commit(&af);
    tj_strbuf_free(&b);
    if (bad) return tj_status_of(p->ctx) ? tj_status_of(p->ctx) : TJ_ERR_IO;
    return TJ_OK;
}


#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC pop_options
#endif
#endif /* TINYJAX_IMPLEMENTATION_DONE */
#endif /* TINYJAX_IMPLEMENTATION */
