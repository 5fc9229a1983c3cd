/* test_cuda.cu — the CUDA backend against the CPU backend.
 *
 * Every program runs twice: in a context on the built-in CPU backend and in a
 * context on tj_cuda_backend(0); every output leaf must agree (relative
 * tolerance 1e-4 for f32, 1e-2 for bf16, 1e-9 for f64, exact for i32).
 * Without a GPU the test prints why, "0 passed, 0 failed, 1 skipped" and
 * exits 0. `test_cuda --coverage` (no GPU needed; build.sh runs it) checks
 * that every op of the op table has an entry in the backend's per-op table
 * (a kernel, the runner, a view, or a gap with its reason), lists the gaps,
 * and fails on any op with no entry or with a gap. Collectives on simulated
 * devices of one GPU are compared bit for bit with as many CPU devices. TJ_CUDA_TEST_CPU=1 compares the CPU backend with itself, which
 * checks the test programs on a machine without a GPU. Without a GPU it still runs the host
 * mirrors of device code: the fused-group emulator, scatter_add's index lists, the tiled
 * transpose's index steps and the flash attention kernels' block code (tj_cuda_attention_host,
 * against the CPU op; and their mma fragments against the PTX ISA's tables, tj_cuda_fa_frag_host). `test_cuda --bench-attention` (GPU) prints attention's forward +
 * backward times (tools/gpu_session.sh's bench step). Only the public API is used: the library implementation lives in
 * tinyjax_cuda.cu, which this file links against.
 *
 *   nvcc -std=c++17 -Werror all-warnings -I. tests/test_cuda.cu tinyjax_cuda.cu -lcublas -o build/test_cuda
 */
#include "tinyjax.h"
#include "tj_test.h"
#include "tj_async_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" tj_backend *tj_cuda_backend(int device, char *err, size_t errlen);
extern "C" void tj_cuda_backend_free(tj_backend *b);
extern "C" int tj_cuda_op_coverage(char *buf, size_t n, int *gaps);

static tj_ctx *cpu, *gpu;

/* ---- inputs: deterministic data, the same bytes in both contexts ---- */

typedef struct {
    const char *name;
    tj_dtype dt;
    const char *shape;
    double lo, hi; /* uniform in [lo, hi); i32: floor of it */
} spec;

static int64_t numel_of(const char *shape) {
    int64_t n = 1;
    const char *s = shape;
    while ((s = strchr(s, '=')) != NULL) n *= strtoll(++s, NULL, 10);
    return n;
}
static void *host_data(const spec *sp, unsigned seed) {
    int64_t n = numel_of(sp->shape), i;
    uint64_t st = seed * 6364136223846793005ull + 1442695040888963407ull;
    void *buf = malloc((size_t)(n + 1) * 8);
    for (i = 0; i < n; i++) {
        double v;
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        v = sp->lo + (sp->hi - sp->lo) * (double)(st >> 11) / 9007199254740992.0;
        switch (sp->dt) {
        case TJ_F32: ((float *)buf)[i] = (float)v; break;
        case TJ_BF16: ((uint16_t *)buf)[i] = tj_f32_to_bf16((float)v); break;
        case TJ_I32: ((int32_t *)buf)[i] = (int32_t)floor(v); break;
        default: ((double *)buf)[i] = v; break;
        }
    }
    return buf;
}
static tj_tree *make_inputs(tj_ctx *ctx, const spec *sp, int n) {
    tj_tree *t = tj_tree_new(ctx);
    int i;
    for (i = 0; i < n; i++) {
        void *h = host_data(&sp[i], 1234u + 77u * (unsigned)i);
        tj_tree_set_array(t, sp[i].name, tj_array_new(ctx, sp[i].dt, sp[i].shape, h));
        free(h);
    }
    return t;
}

/* ---- compare one program on both backends ---- */

static double tol_of(tj_dtype dt) { return dt == TJ_BF16 ? 1e-2 : dt == TJ_F32 ? 1e-4 : dt == TJ_F64 ? 1e-9 : 0.0; }

/* scaled > 0: each output's differences may reach scaled times (its largest
   CPU magnitude + 0.1) (for sums whose rounding is not per element; 0.1:
   an output that is 0 in exact arithmetic, as attention's dq and dk with
   one key, is 0 only up to that rounding) */
static void compare_at(const char *what, tj_fn fn, void *user, const spec *sp, int nsp, double scaled) {
    tj_ctx *cs[2] = {cpu, gpu};
    tj_tree *in[2], *out[2];
    tj_prog *p[2];
    int b, i, ok = 1;
    for (b = 0; b < 2; b++) {
        in[b] = make_inputs(cs[b], sp, nsp);
        out[b] = tj_tree_new(cs[b]);
        p[b] = tj_jit(cs[b], what, fn, user, in[b], NULL);
        if (!p[b]) {
            TJT_CHECK(0, "[%s] jit on %s: %s", what, b ? "cuda" : "cpu", tj_error(cs[b]));
            ok = 0;
        } else if (tj_run(p[b], in[b], out[b]) != TJ_OK) {
            TJT_CHECK(0, "[%s] run on %s: %s", what, b ? "cuda" : "cpu", tj_error(cs[b]));
            ok = 0;
        }
    }
    if (ok) {
        TJT_CHECK(tj_tree_size(out[0]) == tj_tree_size(out[1]), "[%s] %d vs %d outputs", what, tj_tree_size(out[0]), tj_tree_size(out[1]));
        for (i = 0; i < tj_tree_size(out[0]) && i < tj_tree_size(out[1]); i++) {
            tj_array *a = tj_tree_array_at(out[0], i), *g = tj_tree_array_at(out[1], i);
            const char *name = tj_tree_name(out[0], i);
            int64_t n, j, worst = -1;
            double *va, *vg, tol, excess = 0, big = 0;
            char da[256], dg[256];
            if (!a || !g) continue;
            tj_array_describe(a, da, sizeof da);
            tj_array_describe(g, dg, sizeof dg);
            if (strcmp(da, dg) != 0) {
                TJT_CHECK(0, "[%s] output '%s' is %s on cpu but %s on cuda", what, name, da, dg);
                continue;
            }
            n = tj_array_numel(a);
            tol = tol_of(tj_array_dtype(a));
            va = (double *)malloc(sizeof(double) * (size_t)n);
            vg = (double *)malloc(sizeof(double) * (size_t)n);
            tj_array_read(a, TJ_F64, va);
            tj_array_read(g, TJ_F64, vg);
            for (j = 0; j < n; j++) big = fabs(va[j]) > big ? fabs(va[j]) : big;
            for (j = 0; j < n; j++) {
                double d = fabs(va[j] - vg[j]), lim = scaled > 0 ? scaled * (big + 0.1) : tol * (1.0 + fabs(va[j]));
                int same = va[j] == vg[j] || (isnan(va[j]) && isnan(vg[j]));
                if (!same && !(d <= lim) && d - lim >= excess) {
                    excess = d - lim;
                    worst = j;
                }
            }
            TJT_CHECK(worst < 0, "[%s] output '%s' %s: element %lld is %.9g on cpu, %.9g on cuda (tol %g%s)", what, name, da, (long long)worst,
                  worst >= 0 ? va[worst] : 0.0, worst >= 0 ? vg[worst] : 0.0, scaled > 0 ? scaled : tol, scaled > 0 ? " of the largest magnitude + 0.1" : "");
            free(va);
            free(vg);
        }
    }
    for (b = 0; b < 2; b++) {
        tj_prog_free(p[b]);
        tj_tree_free(in[b]);
        tj_tree_free(out[b]);
        tj_clear_error(cs[b]);
    }
}

static void compare(const char *what, tj_fn fn, const spec *sp, int nsp) { compare_at(what, fn, NULL, sp, nsp, 0); }

/* ---- programs ---- */

static void f_elementwise(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), b = tj_tree_v(in, "b"), z = tj_tree_v(in, "z"), p = tj_tree_v(in, "p");
    tj_v x64 = tj_tree_v(in, "x64"), b64 = tj_tree_v(in, "b64"), xb = tj_tree_v(in, "xb"), bb = tj_tree_v(in, "bb");
    tj_v n = tj_tree_v(in, "n"), lab = tj_tree_v(in, "lab"), s = tj_tree_v(in, "s");
    tj_v parts[2];
    (void)u;
    tj_tree_set_v(out, "bcast", tj_tanh(tj_add(tj_mul(x, b), z))); /* z is [feat, batch]: strided broadcast */
    tj_tree_set_v(out, "unary", tj_sub(tj_add(tj_gelu(x), tj_relu(x)), tj_mul(tj_sqrt(p), tj_log(p))));
    tj_tree_set_v(out, "unary2", tj_add(tj_add(tj_rsqrt(p), tj_pows(p, 1.5)), tj_add(tj_neg(x), tj_exp(x))));
    tj_tree_set_v(out, "minmax", tj_add(tj_max2(x, z), tj_min2(x, b)));
    tj_tree_set_v(out, "div", tj_div(x, tj_adds(p, 0.5)));
    tj_tree_set_v(out, "cmp", tj_add(tj_lt(x, z), tj_add(tj_ge(x, b), tj_ne(x, x))));
    tj_tree_set_v(out, "select", tj_select(tj_gt(x, b), x, tj_muls(z, 2.0)));
    tj_tree_set_v(out, "cast", tj_add(tj_cast(tj_cast(x, TJ_BF16), TJ_F32), tj_cast(tj_cast(tj_muls(x, 10.0), TJ_I32), TJ_F32)));
    tj_tree_set_v(out, "transpose", tj_transpose(x, "feat batch"));
    tj_tree_set_v(out, "broadcast", tj_broadcast(b, "feat=6 k=3"));
    tj_tree_set_v(out, "slice", tj_slice(x, "feat", 1, 4));
    tj_tree_set_v(out, "pad", tj_pad(x, "batch", 1, 2, 0.5));
    parts[0] = x;
    parts[1] = tj_muls(x, 3.0);
    tj_tree_set_v(out, "concat", tj_concat(2, parts, "feat"));
    tj_tree_set_v(out, "causal", tj_causal_mask(s, "q", "k", -1e9));
    tj_tree_set_v(out, "one_hot", tj_one_hot(lab, "cls=5", TJ_F32));
    tj_tree_set_v(out, "arange", tj_arange(g, TJ_F32, "a=3 b=4", "b"));
    tj_tree_set_v(out, "uniform", tj_uniform(g, 42, TJ_F32, "a=3 b=5"));
    tj_tree_set_v(out, "normal", tj_normal(g, 7, TJ_F32, "a=4 b=5"));
    tj_tree_set_v(out, "uniform_fold", tj_uniform_fold(42, tj_sum_all(n), TJ_F32, "a=3 b=5")); /* the key folded with a traced i32 */
    tj_tree_set_v(out, "normal_fold", tj_normal_fold(7, tj_sum_all(n), TJ_BF16, "a=4 b=5"));
    tj_tree_set_v(out, "f64", tj_tanh(tj_add(tj_mul(x64, b64), x64)));
    tj_tree_set_v(out, "bf16", tj_gelu(tj_add(tj_mul(xb, bb), xb)));
    tj_tree_set_v(out, "i32", tj_add(tj_mul(n, n), tj_neg(n)));
}
static const spec s_elementwise[] = {
    {"x", TJ_F32, "batch=4 feat=6", -1, 1},   {"b", TJ_F32, "feat=6", -1, 1},        {"z", TJ_F32, "feat=6 batch=4", -1, 1},
    {"p", TJ_F32, "batch=4 feat=6", 0.1, 2},  {"x64", TJ_F64, "batch=4 feat=6", -1, 1}, {"b64", TJ_F64, "feat=6", -1, 1},
    {"xb", TJ_BF16, "batch=4 feat=6", -1, 1}, {"bb", TJ_BF16, "feat=6", -1, 1},      {"n", TJ_I32, "batch=4 feat=6", -1000, 1000},
    {"lab", TJ_I32, "batch=4", 0, 5},         {"s", TJ_F32, "q=5 k=5", -1, 1},
};

static void f_reduce(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), x64 = tj_tree_v(in, "x64"), xb = tj_tree_v(in, "xb"), n = tj_tree_v(in, "n"), big = tj_tree_v(in, "big");
    (void)g;
    (void)u;
    tj_tree_set_v(out, "sum_b", tj_sum(x, "b")); /* a middle axis: strided */
    tj_tree_set_v(out, "sum_ac", tj_sum(x, "a c"));
    tj_tree_set_v(out, "max_bc", tj_max(x, "b c"));
    tj_tree_set_v(out, "max_a", tj_max(x, "a"));
    tj_tree_set_v(out, "min_b", tj_min(x, "b"));
    tj_tree_set_v(out, "min_big", tj_min(big, "r"));
    tj_tree_set_v(out, "mean_all", tj_mean(x, "a b c"));
    tj_tree_set_v(out, "sum64", tj_sum(x64, "c"));
    tj_tree_set_v(out, "sumbf16", tj_sum(xb, "c"));
    tj_tree_set_v(out, "sum_i32", tj_sum(n, "a b"));
    tj_tree_set_v(out, "sum_big", tj_sum(big, "r")); /* more elements than threads in a block */
    tj_tree_set_v(out, "max_big", tj_max(big, "r"));
}
static const spec s_reduce[] = {
    {"x", TJ_F32, "a=3 b=4 c=5", -1, 1},   {"x64", TJ_F64, "a=3 b=4 c=5", -1, 1}, {"xb", TJ_BF16, "a=3 b=4 c=5", -1, 1},
    {"n", TJ_I32, "a=3 b=4 c=5", -50, 50}, {"big", TJ_F32, "o=3 r=3000", -1, 1},
};

static void f_dot(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g;
    (void)u;
    tj_tree_set_v(out, "plain", tj_dot(tj_tree_v(in, "a"), tj_tree_v(in, "b"), "k"));
    tj_tree_set_v(out, "batched", tj_dot(tj_tree_v(in, "a3"), tj_tree_v(in, "b3"), "k"));
    tj_tree_set_v(out, "trans", tj_dot(tj_tree_v(in, "at"), tj_tree_v(in, "bt"), "k")); /* [k,m] . [n,k]: both transposed layouts */
    tj_tree_set_v(out, "relayout", tj_dot(tj_tree_v(in, "amid"), tj_tree_v(in, "b"), "k")); /* k in the middle: an explicit relayout */
    tj_tree_set_v(out, "swapped", tj_dot(tj_tree_v(in, "b3"), tj_tree_v(in, "a3"), "k"));   /* [bt,k,n] . [bt,m,k] */
    tj_tree_set_v(out, "f64", tj_dot(tj_tree_v(in, "a64"), tj_tree_v(in, "b64"), "k"));
    tj_tree_set_v(out, "bf16", tj_dot(tj_tree_v(in, "ab"), tj_tree_v(in, "bb"), "k"));
    tj_tree_set_v(out, "bf16_trans", tj_dot(tj_tree_v(in, "abt"), tj_tree_v(in, "bbt"), "k"));
}
static const spec s_dot[] = {
    {"a", TJ_F32, "m=5 k=7", -1, 1},         {"b", TJ_F32, "k=7 n=3", -1, 1},           {"a3", TJ_F32, "bt=2 m=5 k=7", -1, 1},
    {"b3", TJ_F32, "bt=2 k=7 n=3", -1, 1},   {"at", TJ_F32, "k=7 m=5", -1, 1},          {"bt", TJ_F32, "n=3 k=7", -1, 1},
    {"a64", TJ_F64, "m=33 k=65", -1, 1},     {"b64", TJ_F64, "k=65 n=17", -1, 1},       {"ab", TJ_BF16, "bt=3 m=16 k=40", -1, 1},
    {"bb", TJ_BF16, "bt=3 k=40 n=24", -1, 1}, {"abt", TJ_BF16, "k=40 m=16", -1, 1},     {"bbt", TJ_BF16, "n=24 k=40", -1, 1},
    {"amid", TJ_F32, "m=5 k=7 j=2", -1, 1},
};

static void f_rows(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), xb = tj_tree_v(in, "xb"), x64 = tj_tree_v(in, "x64"), big = tj_tree_v(in, "big");
    (void)g;
    (void)u;
    tj_tree_set_v(out, "softmax_last", tj_softmax(x, "e"));
    tj_tree_set_v(out, "softmax_first", tj_softmax(x, "r")); /* strided rows */
    tj_tree_set_v(out, "log_softmax", tj_log_softmax(x, "e"));
    tj_tree_set_v(out, "masked", tj_softmax(tj_causal_mask(tj_tree_v(in, "s"), "q", "k", -INFINITY), "k"));
    tj_tree_set_v(out, "layer_norm", tj_layer_norm(x, "e", 1e-5));
    tj_tree_set_v(out, "layer_norm_r", tj_layer_norm(x, "r", 1e-5));
    tj_tree_set_v(out, "softmax_bf16", tj_softmax(xb, "e"));
    tj_tree_set_v(out, "layer_norm64", tj_layer_norm(x64, "e", 1e-5));
    tj_tree_set_v(out, "softmax_big", tj_softmax(big, "e"));
    tj_tree_set_v(out, "layer_norm_big", tj_layer_norm(big, "e", 1e-5));
}
static const spec s_rows[] = {
    {"x", TJ_F32, "r=6 e=16", -3, 3},     {"xb", TJ_BF16, "r=6 e=16", -3, 3}, {"x64", TJ_F64, "r=6 e=16", -3, 3},
    {"big", TJ_F32, "r=3 e=1000", -3, 3}, {"s", TJ_F32, "q=4 k=4", -1, 1},
};

static void f_xent(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = tj_tree_v(in, "z"), lab = tj_tree_v(in, "lab");
    (void)g;
    (void)u;
    tj_tree_set_v(out, "mean", tj_cross_entropy(z, lab, "c", "b"));
    tj_tree_set_v(out, "per_row", tj_cross_entropy(z, lab, "c", ""));
    tj_tree_set_v(out, "class_first", tj_cross_entropy(tj_tree_v(in, "zt"), lab, "c", "b"));
    tj_tree_set_v(out, "bf16", tj_cross_entropy(tj_tree_v(in, "zb"), lab, "c", "b"));
    { /* ignore_index a class (3: about a tenth of the rows): the mean over the rest, and its gradient */
        tj_v m = tj_cross_entropy_ignore(z, lab, "c", "b", 3), gz;
        tj_tree_set_v(out, "ignore_mean", m);
        tj_tree_set_v(out, "ignore_per_row", tj_cross_entropy_ignore(tj_tree_v(in, "zb"), lab, "c", NULL, 3));
        if (tj_grad(m, 1, &z, &gz) == TJ_OK) tj_tree_set_v(out, "ignore_grad", gz);
    }
    { /* tj_cross_entropy_padded over 7 of 10 classes (the warp kernel), the class axis first (the general kernels), and 1203 of
         1500 (the long-row kernel; in bf16 widened to f32 too, the GPT-2 head's form): losses and gradients, 0 past the classes */
        tj_v l7 = tj_tree_v(in, "lab7"), zl = tj_tree_v(in, "zl"), ll = tj_tree_v(in, "labl"), zlb = tj_tree_v(in, "zlb"), w[2] = {z, tj_tree_v(in, "zt")}, gw[2];
        tj_v m = tj_add(tj_cross_entropy_padded(z, l7, "c", "b", 7), tj_cross_entropy_padded(w[1], l7, "c", "b", 7)), gl, glb;
        tj_v ml = tj_cross_entropy_padded(zl, ll, "c", "b", 1203), mlb = tj_cross_entropy_padded(tj_cast(zlb, TJ_F32), ll, "c", "b", 1203);
        tj_tree_set_v(out, "padded_mean", m);
        tj_tree_set_v(out, "padded_long", ml);
        tj_tree_set_v(out, "padded_long_bf16", mlb);
        if (tj_grad(m, 2, w, gw) == TJ_OK) tj_tree_set_v(out, "padded_grad", gw[0]), tj_tree_set_v(out, "padded_grad_t", gw[1]);
        if (tj_grad(ml, 1, &zl, &gl) == TJ_OK) tj_tree_set_v(out, "padded_long_grad", gl);
        if (tj_grad(mlb, 1, &zlb, &glb) == TJ_OK) tj_tree_set_v(out, "padded_long_bf16_grad", glb);
    }
}
static const spec s_xent[] = {
    {"z", TJ_F32, "b=8 c=10", -2, 2}, {"zt", TJ_F32, "c=10 b=8", -2, 2}, {"zb", TJ_BF16, "b=8 c=10", -2, 2}, {"lab", TJ_I32, "b=8", 0, 10},
    {"lab7", TJ_I32, "b=8", 0, 7},    {"zl", TJ_F32, "b=4 c=1500", -4, 4}, {"zlb", TJ_BF16, "b=4 c=1500", -4, 4}, {"labl", TJ_I32, "b=4", 0, 1203},
};

/* embedding -> dense + gelu -> layer norm -> dense -> cross entropy, and its
   gradients (scatter_add, dots in every layout, row-op VJPs) */
static void f_mlp(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v wte = tj_tree_v(in, "wte"), w1 = tj_tree_v(in, "w1"), b1 = tj_tree_v(in, "b1"), w2 = tj_tree_v(in, "w2");
    tj_v wrt[4] = {wte, w1, b1, w2}, gr[4];
    tj_v x = tj_take(wte, "vocab", tj_tree_v(in, "tok"));
    tj_v h = tj_gelu(tj_add(tj_dot(x, w1, "in"), b1));
    tj_v logits = tj_dot(tj_layer_norm(h, "hid", 1e-5), w2, "hid");
    tj_v loss = tj_cross_entropy(logits, tj_tree_v(in, "lab"), "cls", "batch");
    (void)g;
    (void)u;
    tj_grad(loss, 4, wrt, gr);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g_wte", gr[0]);
    tj_tree_set_v(out, "g_w1", gr[1]);
    tj_tree_set_v(out, "g_b1", gr[2]);
    tj_tree_set_v(out, "g_w2", gr[3]);
}
static const spec s_mlp[] = {
    {"wte", TJ_F32, "vocab=11 in=6", -1, 1}, {"w1", TJ_F32, "in=6 hid=16", -0.5, 0.5}, {"b1", TJ_F32, "hid=16", -0.1, 0.1},
    {"w2", TJ_F32, "hid=16 cls=5", -0.5, 0.5}, {"tok", TJ_I32, "batch=8", 0, 11}, /* repeats: scatter_add accumulates */
    {"lab", TJ_I32, "batch=8", 0, 5},
};

/* a custom op with a CPU kernel and a CUDA launcher: out = 3 x (f32) */
static int64_t buf_numel(const tj_buf *b) {
    int64_t n = 1;
    for (int i = 0; i < b->rank; i++) n *= b->dim[i];
    return n;
}
static void scale3_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *u) {
    (void)nin; (void)nout; (void)u;
    for (int64_t i = 0; i < buf_numel(&in[0]); i++) ((float *)out[0].data)[i] = 3 * ((const float *)in[0].data)[i];
}
__global__ void scale3_kernel(const float *x, float *y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 3 * x[i];
}
static void scale3_cuda(const tj_buf *in, int nin, tj_buf *out, int nout, void *stream, void *u) {
    int64_t n = buf_numel(&in[0]);
    (void)nin; (void)nout; (void)u;
    scale3_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>((const float *)in[0].data, (float *)out[0].data, n);
}
static void register_scale3(tj_ctx *ctx) {
    tj_op_def d;
    memset(&d, 0, sizeof d);
    d.name = "scale3";
    d.nout = 1;
    d.cpu = scale3_cpu;
    d.cuda = scale3_cuda;
    d.replication = tj_rep_same;
    tj_register_op(ctx, &d);
}
static void scale3_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    (void)g; (void)res; (void)u;
    tj_custom("scale3", 1, in, out);
}
static void scale3_bwd(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *u) {
    (void)g; (void)res; (void)u;
    tj_custom("scale3", 1, ct, gin);
}
/* a second custom_vjp of another arity: each node must find its own entry
   (the CUDA launcher read entry 0 for every one until 2026-11-24) */
static void pair_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    (void)g; (void)u;
    tj_custom("scale3", 1, &in[0], &out[0]);
    out[1] = tj_mul(in[0], in[1]);
    res[0] = in[0];
    res[1] = in[1];
}
static void pair_bwd(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *u) {
    tj_v t;
    (void)g; (void)u;
    tj_custom("scale3", 1, &ct[0], &t);
    gin[0] = tj_add(t, tj_mul(ct[1], res[1]));
    gin[1] = tj_mul(ct[1], res[0]);
}
static void f_custom(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), y = NULL, gx, pin[2], pout[2] = {NULL, NULL};
    (void)g; (void)u;
    tj_custom_vjp(scale3_fwd, scale3_bwd, NULL, 1, &x, 1, &y, 0);
    pin[0] = x;
    pin[1] = tj_muls(x, 0.5);
    tj_custom_vjp(pair_fwd, pair_bwd, NULL, 2, pin, 2, pout, 2);
    tj_tree_set_v(out, "pair0", pout[0]);
    tj_tree_set_v(out, "pair1", pout[1]);
    tj_v loss = tj_add(tj_sum(tj_mul(tj_tanh(y), y), "rows cols"), tj_sum(tj_mul(pout[0], pout[1]), "rows cols"));
    tj_grad(loss, 1, &x, &gx);
    tj_tree_set_v(out, "y", y);
    tj_tree_set_v(out, "gx", gx);
}
static const spec s_custom[] = {{"x", TJ_F32, "rows=7 cols=300", -1, 1}};

/* scatter_add (the VJP of take) with many repeats, f32 and bf16 (an odd
   count: the last bf16 element ends the buffer): the CPU's order of adds,
   and the same bits on every run (test_scatter_rerun) */
static void f_scatter(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v w = tj_tree_v(in, "w"), wb = tj_tree_v(in, "wb"), tok = tj_tree_v(in, "tok"), gw, gwb;
    tj_v loss = tj_sum(tj_mul(tj_take(w, "vocab", tok), tj_tree_v(in, "c")), "n d");
    tj_v lossb = tj_sum(tj_mul(tj_take(wb, "vocab", tok), tj_tree_v(in, "cb")), "n d");
    (void)g;
    (void)u;
    tj_grad(loss, 1, &w, &gw);
    tj_grad(lossb, 1, &wb, &gwb);
    tj_tree_set_v(out, "g_w", gw);
    tj_tree_set_v(out, "g_wb", gwb);
}
static const spec s_scatter[] = {
    {"w", TJ_F32, "vocab=37 d=5", -1, 1},  {"wb", TJ_BF16, "vocab=37 d=5", -1, 1}, {"c", TJ_F32, "n=300 d=5", -1, 1},
    {"cb", TJ_BF16, "n=300 d=5", -1, 1},   {"tok", TJ_I32, "n=300", 0, 37},
};
/* uniform never returns 1.0: half a million bf16 draws, ~0.2% of which
   round up to 1 before the clamp; the count of ones must be 0 as on the CPU */
static void f_uniform(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v ub = tj_uniform(g, 99, TJ_BF16, "a=512 b=1024"), uf = tj_uniform(g, 98, TJ_F32, "a=512 b=1024");
    (void)u;
    tj_tree_set_v(out, "ones_bf16", tj_sum(tj_cast(tj_ge(ub, tj_scalar(g, TJ_BF16, 1.0)), TJ_F32), "a b"));
    tj_tree_set_v(out, "ones_f32", tj_sum(tj_cast(tj_ge(uf, tj_scalar(g, TJ_F32, 1.0)), TJ_F32), "a b"));
    tj_tree_set_v(out, "mean_bf16", tj_add(tj_mean(tj_cast(ub, TJ_F32), "a b"), tj_sum(tj_tree_v(in, "x"), "one")));
}
static const spec s_uniform[] = {{"x", TJ_F32, "one=1", 0, 0}};

static void f_take(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g;
    (void)u;
    tj_tree_set_v(out, "y", tj_take(tj_tree_v(in, "w"), "vocab", tj_tree_v(in, "tok")));
}

/* scatter_add on the GPU gives the same bits twice */
static void test_scatter_rerun(void) {
    tj_tree *in = make_inputs(gpu, s_scatter, (int)(sizeof s_scatter / sizeof *s_scatter)), *o[2];
    tj_prog *p = tj_jit(gpu, "scatter_rerun", f_scatter, NULL, in, NULL);
    float a[2][185];
    uint16_t b[2][185];
    int r;
    for (r = 0; r < 2; r++) {
        o[r] = tj_tree_new(gpu);
        TJT_CHECK(p && tj_run(p, in, o[r]) == TJ_OK, "[scatter rerun] %s", tj_error(gpu));
        memset(a[r], r, sizeof a[r]);
        memset(b[r], r, sizeof b[r]);
        if (tj_tree_array(o[r], "g_w")) tj_array_read(tj_tree_array(o[r], "g_w"), TJ_F32, a[r]);
        if (tj_tree_array(o[r], "g_wb")) tj_array_read(tj_tree_array(o[r], "g_wb"), TJ_BF16, b[r]);
    }
    TJT_CHECK(!memcmp(a[0], a[1], sizeof a[0]) && !memcmp(b[0], b[1], sizeof b[0]), "[scatter rerun] scatter_add gave different bits on two runs");
    tj_clear_error(gpu);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(o[0]);
    tj_tree_free(o[1]);
}

/* scatter_add against the CPU, bit for bit, and against itself on a second
   run: the GPU adds each output element's rows in increasing position and
   rounds after each add exactly as the CPU kernel does, so the bits must
   match. Cases: many positions per index (vocab 7 or 37), indices that
   nobody uses (vocab 1000, 31 positions: rows of zeros), odd counts of
   positions (1, 31, 257, 2^20 + 3), f32 and bf16 outputs (odd element
   counts: the last bf16 ends the buffer). */
static int read_scatter(tj_ctx *c, int64_t ni, int64_t V, int64_t d, float *gw, uint16_t *gwb) {
    char sw[64], sc[64], st[64];
    snprintf(sw, sizeof sw, "vocab=%lld d=%lld", (long long)V, (long long)d);
    snprintf(sc, sizeof sc, "n=%lld d=%lld", (long long)ni, (long long)d);
    snprintf(st, sizeof st, "n=%lld", (long long)ni);
    const spec sp[5] = {{"w", TJ_F32, sw, -1, 1}, {"wb", TJ_BF16, sw, -1, 1}, {"c", TJ_F32, sc, -1, 1}, {"cb", TJ_BF16, sc, -1, 1},
                        {"tok", TJ_I32, st, 0, (double)V}};
    tj_tree *in = make_inputs(c, sp, 5), *out = tj_tree_new(c);
    tj_prog *p = tj_jit(c, "scatter_case", f_scatter, NULL, in, NULL);
    int ok = p && tj_run(p, in, out) == TJ_OK && tj_tree_array(out, "g_w") && tj_tree_array(out, "g_wb");
    TJT_CHECK(ok, "[scatter %lld positions, vocab %lld, d %lld] %s", (long long)ni, (long long)V, (long long)d, tj_error(c));
    if (ok) {
        tj_array_read(tj_tree_array(out, "g_w"), TJ_F32, gw);
        tj_array_read(tj_tree_array(out, "g_wb"), TJ_BF16, gwb);
    }
    tj_clear_error(c);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    return ok;
}
static void scatter_case(int64_t ni, int64_t V, int64_t d) {
    int64_t n = V * d, i;
    float *w[3];
    uint16_t *wb[3];
    int ok = 1, r;
    for (r = 0; r < 3; r++) { /* the CPU, then the GPU twice */
        w[r] = (float *)calloc((size_t)n, sizeof(float));
        wb[r] = (uint16_t *)calloc((size_t)n, sizeof(uint16_t));
        ok &= read_scatter(r ? gpu : cpu, ni, V, d, w[r], wb[r]);
    }
    for (r = 1; r < 3 && ok; r++) {
        for (i = 0; i < n; i++)
            if (memcmp(&w[0][i], &w[r][i], sizeof(float)) || wb[0][i] != wb[r][i]) break;
        TJT_CHECK(i == n, "[scatter %lld positions, vocab %lld, d %lld] gpu run %d, element %lld: f32 %.9g (cpu %.9g), bf16 0x%04x (cpu 0x%04x)",
                  (long long)ni, (long long)V, (long long)d, r, (long long)i, i < n ? w[r][i] : 0.0f, i < n ? w[0][i] : 0.0f, i < n ? wb[r][i] : 0,
                  i < n ? wb[0][i] : 0);
    }
    for (r = 0; r < 3; r++) {
        free(w[r]);
        free(wb[r]);
    }
}
static void test_scatter_cases(void) {
    scatter_case(1, 37, 5);
    scatter_case(31, 37, 3);
    scatter_case(257, 7, 5);
    scatter_case(31, 1000, 5);
    scatter_case((1 << 20) + 3, 37, 3);
}
/* an out-of-range index reaching scatter_add (only the gradient is an
   output, so no take runs before it): the CPU's message word for word,
   read at the end of the run; the next run with good indices succeeds */
static void f_scatter_only(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v w = tj_tree_v(in, "w"), gw;
    (void)g;
    (void)u;
    tj_grad(tj_sum(tj_mul(tj_take(w, "vocab", tj_tree_v(in, "tok")), tj_tree_v(in, "c")), "t e"), 1, &w, &gw);
    tj_tree_set_v(out, "g_w", gw);
}
static void test_scatter_bad_index(void) {
    tj_ctx *cs[2] = {cpu, gpu};
    char msg[2][1024];
    float gw[2][15];
    int b;
    for (b = 0; b < 2; b++) {
        int32_t tok[5] = {1, 4, 2, 9, -3}, good[5] = {1, 4, 2, 4, 0};
        tj_tree *in = tj_tree_new(cs[b]), *out = tj_tree_new(cs[b]);
        tj_prog *p;
        tj_tree_set_array(in, "w", tjt_af32(cs[b], "vocab=5 e=3", 3, -1, 1));
        tj_tree_set_array(in, "c", tjt_af32(cs[b], "t=5 e=3", 4, -1, 1));
        tj_tree_set_array(in, "tok", tj_array_new(cs[b], TJ_I32, "t=5", tok));
        p = tj_jit(cs[b], "scatter_bad_index", f_scatter_only, NULL, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) != TJ_OK, "[scatter bad index] %s: the run should fail", b ? "cuda" : "cpu");
        snprintf(msg[b], sizeof msg[b], "%s", tj_error(cs[b]));
        TJT_CHECK(strstr(msg[b], "scatter_add: index 9 at position 3 is out of range [0, 5) for axis 'vocab'") != NULL, "[scatter bad index] %s message: \"%s\"",
                  b ? "cuda" : "cpu", msg[b]);
        tj_clear_error(cs[b]);
        tj_tree_free(out);
        out = tj_tree_new(cs[b]);
        tj_tree_set_array(in, "tok", tj_array_new(cs[b], TJ_I32, "t=5", good));
        memset(gw[b], 0, sizeof gw[b]);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "[scatter bad index] %s: the next run with good indices: %s", b ? "cuda" : "cpu", tj_error(cs[b]));
        if (tj_tree_array(out, "g_w")) tj_array_read(tj_tree_array(out, "g_w"), TJ_F32, gw[b]);
        tj_clear_error(cs[b]);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
    }
    TJT_CHECK(strcmp(msg[0], msg[1]) == 0, "[scatter bad index] messages differ:\n  cpu:  %s\n  cuda: %s", msg[0], msg[1]);
    TJT_CHECK(!memcmp(gw[0], gw[1], sizeof gw[0]), "[scatter bad index] the rerun's gradient differs from the CPU's");
}
/* The device's index lists (sort keys, stable radix sort, lower bound)
   computed by the same steps on the CPU (tj_cuda_scatter_csr_host; the GPU
   side itself has not run on a GPU here) against a plain stable counting
   sort, on random indices with and without out-of-range ones, the whole
   axis here or split in G blocks of V rows (this device's: block b, the
   others' rows left out as a vocab-parallel take's gradient leaves them).
   Vocab sizes that are powers of two check that the sort looks at enough
   key bits. */
extern "C" int tj_cuda_scatter_csr_host(const int32_t *idx, int64_t ni, int64_t off, int64_t V, int64_t Vg, int64_t *start, int64_t *order,
                                        int64_t *first_bad);
static void csr_case(int64_t ni, int64_t V, int nbad, unsigned seed, int G) {
    int32_t *idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(ni + 1));
    int64_t *st = (int64_t *)malloc(sizeof(int64_t) * (size_t)(V + 1)), *ord = (int64_t *)malloc(sizeof(int64_t) * (size_t)(ni + 1));
    int64_t *rst = (int64_t *)calloc((size_t)(V + 2), sizeof(int64_t)), *rord = (int64_t *)malloc(sizeof(int64_t) * (size_t)(ni + 1));
    int64_t j, v, bad = -1, got_bad = -2, ngood = 0, worst = -1, Vg = V * G, off = (int64_t)(seed % (unsigned)G) * V;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
#define IN_BLOCK(i) ((i) >= off && (i) < off + V)
    for (j = 0; j < ni; j++) { /* skewed: half the positions use 1 of 8 hot indices (of this block) */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        idx[j] = (int32_t)((x >> 40) & 1 ? off + (int64_t)((x >> 20) % (uint64_t)(V < 8 ? V : 8)) : (int64_t)((x >> 20) % (uint64_t)Vg));
    }
    for (j = 0; j < nbad && ni; j++) { /* out of range: past the end, negative, INT32_MIN / MAX */
        int64_t b = j % 4 == 0 ? Vg + j % 3 : j % 4 == 1 ? -1 : j % 4 == 2 ? INT32_MIN : INT32_MAX;
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        idx[(x >> 20) % (uint64_t)ni] = (int32_t)b;
    }
    for (j = 0; j < ni; j++) { /* the reference: a stable counting sort of the block's positions */
        if (IN_BLOCK(idx[j])) rst[idx[j] - off + 1]++;
        if ((idx[j] < 0 || idx[j] >= Vg) && bad < 0) bad = j;
    }
    for (v = 0; v < V; v++) rst[v + 1] += rst[v];
    {
        int64_t *fill = (int64_t *)malloc(sizeof(int64_t) * (size_t)(V + 1));
        memcpy(fill, rst, sizeof(int64_t) * (size_t)(V + 1));
        for (j = 0; j < ni; j++)
            if (IN_BLOCK(idx[j])) rord[fill[idx[j] - off]++] = j;
        free(fill);
    }
    ngood = rst[V];
    TJT_CHECK(tj_cuda_scatter_csr_host(idx, ni, off, V, Vg, st, ord, &got_bad) == 0, "[scatter index lists] out of memory");
    for (v = 0; v <= V && worst < 0; v++)
        if (st[v] != rst[v]) worst = v;
    TJT_CHECK(worst < 0, "[scatter index lists %lld positions, vocab %lld] start[%lld] = %lld, counting sort %lld", (long long)ni, (long long)V,
              (long long)worst, worst >= 0 ? (long long)st[worst] : 0, worst >= 0 ? (long long)rst[worst] : 0);
    for (j = 0, worst = -1; j < ngood && worst < 0; j++)
        if (ord[j] != rord[j]) worst = j;
    TJT_CHECK(worst < 0, "[scatter index lists %lld positions, vocab %lld] order[%lld] = %lld, counting sort %lld", (long long)ni, (long long)V,
              (long long)worst, worst >= 0 ? (long long)ord[worst] : 0, worst >= 0 ? (long long)rord[worst] : 0);
    for (j = ngood, worst = -1; j < ni && worst < 0; j++) /* the rest: the other positions, in increasing order */
        if (IN_BLOCK(idx[ord[j]])) worst = j;
        else if (j > ngood && ord[j] <= ord[j - 1]) worst = j;
    TJT_CHECK(worst < 0, "[scatter index lists %lld positions, vocab %lld] order[%lld] (past start[V]) is not the next bad position", (long long)ni,
              (long long)V, (long long)worst);
    TJT_CHECK(got_bad == bad, "[scatter index lists %lld positions, vocab %lld of %lld] first bad position %lld, expected %lld", (long long)ni,
              (long long)V, (long long)Vg, (long long)got_bad, (long long)bad);
#undef IN_BLOCK
    free(idx);
    free(st);
    free(ord);
    free(rst);
    free(rord);
}
static void test_scatter_csr_host(void) {
    static const int64_t nis[] = {0, 1, 31, 257, (1 << 20) + 3}, Vs[] = {1, 2, 31, 256, 257, 65536, (1 << 20) + 3};
    unsigned seed = 1;
    tjt_current = "scatter index lists";
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 7; b++) {
            if (nis[a] > 300 && Vs[b] < 256 && Vs[b] != 2) continue; /* the big count: vocab 2, 256 and up */
            csr_case(nis[a], Vs[b], 0, seed++, 1);
            csr_case(nis[a], Vs[b], nis[a] < 8 ? 1 : 7, seed++, 1);
            if (Vs[b] < (1 << 20)) csr_case(nis[a], Vs[b], nis[a] < 8 ? 1 : 7, seed++, 4); /* split in 4 blocks, this one's rows */
        }
    tjt_current = "";
}

/* the register slots of a fused group's members (tjc_fslots, for
   tjc_fused_small) on random programs: every operand read from the slot
   that still holds the member it names, every stored member's slot
   holding it at the end (the stores come last), the count right; and
   AdamW's group, 17 members in 4 slots */
extern "C" int tj_cuda_fslots_host(int nm, const int *nin, const int *src, const int *stored, int *slot, int *rs);
static unsigned fs_rand(unsigned *seed) {
    *seed = *seed * 1664525u + 1013904223u;
    return *seed >> 8;
}
static void test_fslots_host(void) {
    unsigned seed = 4242;
    int bad = 0, within = 0, t;
    tjt_current = "fused-group register slots";
    for (t = 0; t < 20000; t++) {
        int nm = 1 + (int)(fs_rand(&seed) % 24), nin[24], src[72], stored[24], slot[24], rs[72], hold[24], most = -1, ns, mi, j;
        for (mi = 0; mi < nm; mi++) {
            nin[mi] = 1 + (int)(fs_rand(&seed) % 3);
            for (j = 0; j < 3; j++) src[mi * 3 + j] = mi && j < nin[mi] && fs_rand(&seed) % 4 ? (int)(fs_rand(&seed) % (unsigned)mi) : -1;
            stored[mi] = mi == nm - 1 || fs_rand(&seed) % 5 == 0;
        }
        ns = tj_cuda_fslots_host(nm, nin, src, stored, slot, rs);
        for (j = 0; j < 24; j++) hold[j] = -1;
        for (mi = 0; mi < nm; mi++) { /* the kernel's order: operands read, then the result written */
            for (j = 0; j < nin[mi]; j++) {
                int s = src[mi * 3 + j];
                if (s >= 0 && (rs[mi * 3 + j] != slot[s] || slot[s] < 0 || slot[s] >= 24 || hold[slot[s]] != s)) bad++;
            }
            if (slot[mi] < 0 || slot[mi] >= 24) {
                bad++;
                continue;
            }
            hold[slot[mi]] = mi;
            most = slot[mi] > most ? slot[mi] : most;
        }
        for (mi = 0; mi < nm; mi++)
            if (stored[mi] && (slot[mi] < 0 || slot[mi] >= 24 || hold[slot[mi]] != mi)) bad++;
        if (ns != most + 1) bad++;
        within += ns <= 4;
    }
    TJT_CHECK(bad == 0, "%d wrong slot assignments in 20000 random programs", bad);
    TJT_CHECK(within > 2000 && within < 18000, "%d of 20000 random programs within 4 slots (want both kinds)", within);
    { /* AdamW (demos/gpt2_model.h): m' = b1 m + (1-b1) g, v' = b2 v + (1-b2) g^2, p' = p - lr (m'/(sqrt(v')+eps) + wd p) */
        static const int nin[14] = {1, 1, 2, 2, 1, 1, 2, 1, 1, 2, 1, 2, 1, 2};
        static const int src[42] = {-1, 0, 0, -1, 0, 0, 0, 1, 0, -1, -1, 0, 3, 0, 0, -1, 0, 0, 5, 4, 0,
                                    6, 0, 0, 7, 0, 0, 2, 8, 0, -1, 0, 0, 9, 10, 0, 11, 0, 0, -1, 12, 0};
        static const int stored[14] = {0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1};
        int slot[14], rs[42];
        int ns = tj_cuda_fslots_host(14, nin, src, stored, slot, rs);
        TJT_CHECK(ns == 4, "AdamW's 14-member chain takes %d register slots (want 4)", ns);
    }
    tjt_current = "";
}

/* element offsets without division (tjc_ix, tjc_div): the walk the
   elementwise, copy and reduce kernels take, run on the host against plain
   row-major strides, for broadcasts (stride 0), size-1 axes, transposed and
   sliced strides, in the 32-bit and 64-bit forms; and the multiply-shift
   quotient against '/' for divisors 1 .. 2^31 and numerators up to 2^32 - 1 */
extern "C" void tj_cuda_ix_host(int rank, const int64_t *dims, int nops, const int64_t *st, int big, int64_t *o);
extern "C" uint32_t tj_cuda_div_host(uint32_t d, uint32_t n);
static void test_ix_host(void) {
    unsigned seed = 12345, bad = 0, checked = 0;
    tjt_current = "ix";
    /* the quotient: small divisors, powers of two and their neighbours, random ones */
    for (uint64_t d = 1; d <= (1ull << 31); d = d < 300 ? d + 1 : d * 2 + (d & 1 ? 0 : 1)) {
        for (int t = 0; t < 3; t++) {
            uint32_t dd = (uint32_t)(t == 0 ? d : t == 1 ? (d > 1 ? d - 1 : 1) : d + (d >> 1) + 1);
            const uint32_t ns[] = {0u, 1u, dd - 1u, dd, dd + 1u, 2u * dd - 1u, 0xffffffffu, 0xfffffffeu, 0x80000000u, 0x7fffffffu};
            for (uint32_t n : ns) {
                checked++;
                if (tj_cuda_div_host(dd, n) != n / dd && bad++ < 5) TJT_CHECK(0, "tjc_div: %u / %u gave %u", n, dd, tj_cuda_div_host(dd, n));
            }
            for (int r = 0; r < 200; r++) {
                seed = seed * 1664525u + 1013904223u;
                uint32_t n = seed ^ (seed << 7);
                checked++;
                if (tj_cuda_div_host(dd, n) != n / dd && bad++ < 5) TJT_CHECK(0, "tjc_div: %u / %u gave %u", n, dd, tj_cuda_div_host(dd, n));
            }
        }
    }
    for (int r = 0; r < 100000; r++) { /* random divisors */
        seed = seed * 1664525u + 1013904223u;
        uint32_t dd = (seed >> (seed & 31)) | 1u, n = seed * 2654435761u;
        if (r & 1) dd &= ~1u;
        if (!dd) dd = 3;
        checked++;
        if (tj_cuda_div_host(dd, n) != n / dd && bad++ < 5) TJT_CHECK(0, "tjc_div: %u / %u gave %u", n, dd, tj_cuda_div_host(dd, n));
    }
    TJT_CHECK(bad == 0, "tjc_div: %u of %u quotients wrong", bad, checked);
    /* the walks: random shapes of rank 0..6 with size-1 axes, operands broadcast, transposed, sliced */
    for (int c = 0; c < 400; c++) {
        int rank = c % 7, nops = 1 + c % 3;
        int64_t dims[6], st[3 * 6], n = 1;
        for (int d = 0; d < rank; d++) {
            seed = seed * 1664525u + 1013904223u;
            dims[d] = (seed >> 8) % 5 == 0 ? 1 : 1 + (seed >> 12) % 7;
            n *= dims[d];
        }
        for (int j = 0; j < nops; j++) {
            seed = seed * 1664525u + 1013904223u;
            int kind = (seed >> 10) % 4; /* 0 row-major, 1 broadcast axes, 2 permuted axes, 3 sliced (padded) */
            int64_t m = 1;
            int perm[6];
            for (int d = 0; d < rank; d++) perm[d] = d;
            if (kind == 2)
                for (int d = rank - 1; d > 0; d--) {
                    seed = seed * 1664525u + 1013904223u;
                    int e = (int)((seed >> 9) % (unsigned)(d + 1)), t = perm[d];
                    perm[d] = perm[e];
                    perm[e] = t;
                }
            for (int d = rank - 1; d >= 0; d--) {
                int a = perm[d];
                seed = seed * 1664525u + 1013904223u;
                st[j * rank + a] = kind == 1 && (seed >> 11) % 2 ? 0 : m;
                m *= dims[a] + (kind == 3 && (seed >> 13) % 2 ? 2 : 0);
            }
        }
        int64_t *got = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n * nops + 1));
        for (int big = 0; big < 2; big++) {
            int wrong = 0;
            tj_cuda_ix_host(rank, dims, nops, st, big, got);
            for (int64_t i = 0; i < n && !wrong; i++)
                for (int j = 0; j < nops; j++) {
                    int64_t r = i, o = 0;
                    for (int d = rank - 1; d >= 0; d--) {
                        o += r % dims[d] * st[j * rank + d];
                        r /= dims[d];
                    }
                    if (got[i * nops + j] != o) wrong = 1;
                }
            TJT_CHECK(!wrong, "tjc_ix: case %d rank %d, %d operands, %s walk: offsets differ from the strides", c, rank, nops, big ? "64-bit" : "32-bit");
        }
        free(got);
    }
    tjt_current = "";
}

/* tjc_k_elementwise's thread loop (TJC_EW_U elements a grid stride apart)
   run on the host: every element written once and right, for sizes around
   the thread count and its multiples, contiguous and with a broadcast
   operand */
extern "C" void tj_cuda_ew_host(const float *a, const float *b, float *out, int64_t rows, int64_t cols, int bcast, int64_t threads);
static void test_ew_threads_host(void) {
    static const int64_t sizes[][2] = {{1, 1}, {1, 7}, {3, 5}, {1, 255}, {2, 128}, {1, 1023}, {4, 256}, {1, 1025}, {7, 300}, {33, 97}};
    static const int64_t threads[] = {1, 3, 32, 256, 1024};
    tjt_current = "ew threads";
    for (int c = 0; c < 10; c++)
        for (int t = 0; t < 5; t++)
            for (int bc = 0; bc < 2; bc++) {
                int64_t R = sizes[c][0], C = sizes[c][1], n = R * C, bad = -1;
                float *a = (float *)malloc(sizeof(float) * (size_t)n), *b = (float *)malloc(sizeof(float) * (size_t)n), *o = (float *)malloc(sizeof(float) * (size_t)(n + 1));
                for (int64_t i = 0; i < n; i++) {
                    a[i] = (float)i;
                    b[i] = (float)(1000000 + i);
                    o[i] = -1.0f;
                }
                o[n] = -7.0f; /* a guard past the end */
                tj_cuda_ew_host(a, b, o, R, C, bc, threads[t]);
                for (int64_t i = 0; i < n && bad < 0; i++)
                    if (o[i] != a[i] + b[bc ? i % C : i]) bad = i;
                TJT_CHECK(bad < 0 && o[n] == -7.0f, "%lld x %lld, %lld threads, %s: element %lld is %g", (long long)R, (long long)C, (long long)threads[t],
                          bc ? "broadcast" : "contiguous", (long long)bad, bad >= 0 ? o[bad] : o[n]);
                free(a);
                free(b);
                free(o);
            }
    tjt_current = "";
}

/* tjc_k_copy's thread loop on the host: a strided region (transposed,
   sliced from an offset, into an offset) copied bit for bit in each
   element size, and converted f32 -> bf16 and i32 -> f64, every element
   once, nothing outside the region touched */
extern "C" void tj_cuda_copy_host(int rank, const int64_t *dims, int sdt, const int64_t *sst, int64_t sbase, const void *src, int ddt, const int64_t *dst_st,
                                  int64_t dbase, void *dst, int64_t threads);
static void test_copy_threads_host(void) {
    static const tj_dtype pairs[][2] = {{TJ_BF16, TJ_BF16}, {TJ_F32, TJ_F32}, {TJ_F64, TJ_F64}, {TJ_F32, TJ_BF16}, {TJ_I32, TJ_F64}};
    static const int64_t threads[] = {1, 5, 64, 1000};
    tjt_current = "copy threads";
    for (int p = 0; p < 5; p++)
        for (int t = 0; t < 4; t++)
            for (int c = 0; c < 3; c++) {
                /* src (A, B) row-major inside a (A+1, B+2) buffer at offset (1, 2); read transposed or not; dst a (R, C) region inside (R+2, C+3) at (2, 1) */
                const int64_t A = 3 + c * 4, B = 5 + c * 7, W = B + 2, H = A + 1;
                const int tr = c == 1;
                const int64_t R = tr ? B : A, C = tr ? A : B, DW = C + 3, DH = R + 2;
                const int64_t dims[2] = {R, C}, sst[2] = {tr ? 1 : W, tr ? W : 1}, dst_st[2] = {DW, 1};
                const size_t ses = tj_dtype_size(pairs[p][0]), des = tj_dtype_size(pairs[p][1]);
                unsigned char *src = (unsigned char *)malloc(ses * (size_t)(H * W)), *dst = (unsigned char *)malloc(des * (size_t)(DH * DW));
                int bad = 0;
                for (int64_t i = 0; i < H * W; i++) { /* small integers: exact in every dtype */
                    double v = (double)(i % 97) - 40;
                    if (pairs[p][0] == TJ_BF16) { uint16_t h = tj_f32_to_bf16((float)v); memcpy(src + i * ses, &h, 2); }
                    else if (pairs[p][0] == TJ_F32) { float f = (float)v; memcpy(src + i * ses, &f, 4); }
                    else if (pairs[p][0] == TJ_I32) { int32_t k = (int32_t)v; memcpy(src + i * ses, &k, 4); }
                    else memcpy(src + i * ses, &v, 8);
                }
                memset(dst, 0x5A, des * (size_t)(DH * DW));
                tj_cuda_copy_host(2, dims, pairs[p][0], sst, 1 * W + 2, src, pairs[p][1], dst_st, 2 * DW + 1, dst, threads[t]);
                for (int64_t y = 0; y < DH && !bad; y++)
                    for (int64_t x = 0; x < DW && !bad; x++) {
                        const unsigned char *d = dst + (y * DW + x) * des;
                        int inside = y >= 2 && y < 2 + R && x >= 1 && x < 1 + C;
                        if (!inside) {
                            for (size_t k = 0; k < des; k++) bad |= d[k] != 0x5A;
                            continue;
                        }
                        int64_t r = y - 2, q = x - 1, si = 1 * W + 2 + r * sst[0] + q * sst[1];
                        double want = (double)(si % 97) - 40, got;
                        if (pairs[p][1] == TJ_BF16) { uint16_t h; memcpy(&h, d, 2); got = tj_bf16_to_f32(h); }
                        else if (pairs[p][1] == TJ_F32) { float f; memcpy(&f, d, 4); got = f; }
                        else memcpy(&got, d, 8);
                        bad |= got != want;
                    }
                TJT_CHECK(!bad, "%s -> %s, case %d, %lld threads: wrong or stray bytes", tj_dtype_name(pairs[p][0]), tj_dtype_name(pairs[p][1]), c, (long long)threads[t]);
                free(src);
                free(dst);
            }
    tjt_current = "";
}

/* relayouts as tiled transposes (tjc_k_transpose): the kernel's index steps
   run on the host (tj_cuda_transpose_host) against an element-by-element
   copy, for every permutation of rank 2..4 shapes with odd sizes (partial
   tiles), broadcast axes (source stride 0) and element sizes 2, 4, 8 */
extern "C" int tj_cuda_transpose_host(int rank, const int64_t *dims, const int64_t *sst, int es, const void *src, void *dst);
static void transpose_case(int rank, const int64_t *idims, const int *perm, int bcast, int es, unsigned seed, int *tiled) {
    int64_t dims[4], sst[4], ist[4], n = 1, ni = 1, i;
    int d;
    for (d = rank - 1; d >= 0; d--) {
        ist[d] = ni;
        ni *= idims[d];
    }
    for (d = 0; d < rank; d++) {
        dims[d] = idims[perm[d]];
        sst[d] = d == bcast ? 0 : ist[perm[d]];
        n *= dims[d];
    }
    unsigned char *src = (unsigned char *)malloc((size_t)ni * es), *want = (unsigned char *)malloc((size_t)n * es),
                  *got = (unsigned char *)malloc((size_t)n * es);
    for (i = 0; i < ni * es; i++) src[i] = (unsigned char)((seed = seed * 1103515245u + 12345u) >> 16);
    for (i = 0; i < n; i++) { /* output element i, row-major over dims */
        int64_t r = i, so = 0;
        for (d = rank - 1; d >= 0; d--) {
            so += r % dims[d] * sst[d];
            r /= dims[d];
        }
        memcpy(want + i * es, src + so * es, (size_t)es);
    }
    memset(got, 0xA5, (size_t)n * es);
    int rc = tj_cuda_transpose_host(rank, dims, sst, es, src, got);
    if (rc == 1) {
        (*tiled)++;
        TJT_CHECK(memcmp(want, got, (size_t)n * es) == 0, "[tiled transpose] rank %d dims %lld %lld %lld %lld es %d broadcast axis %d: wrong bytes", rank,
                  (long long)dims[0], (long long)dims[1], (long long)(rank > 2 ? dims[2] : 0), (long long)(rank > 3 ? dims[3] : 0), es, bcast);
    } else
        TJT_CHECK(rc == 0 && (sst[rank - 1] == 1 || dims[rank - 1] < 2 || bcast >= 0 || rank < 2), "[tiled transpose] rank %d es %d: plan refused (%d)",
                  rank, es, rc);
    free(src);
    free(want);
    free(got);
}
static void test_transpose_host(void) {
    static const int64_t shapes[][4] = {{33, 70, 0, 0}, {1, 31, 0, 0}, {257, 2, 0, 0}, {3, 31, 33, 0}, {2, 1, 65, 40}, {5, 32, 3, 64}};
    static const int ranks[] = {2, 2, 2, 3, 4, 4};
    static const int es[] = {2, 4, 8};
    unsigned seed = 7;
    int tiled = 0;
    for (int c = 0; c < 6; c++) {
        int r = ranks[c], perm[4] = {0, 1, 2, 3};
        /* every permutation of r axes (Heap's order by brute force over r^r) */
        int total = 1;
        for (int d = 0; d < r; d++) total *= r;
        for (int code = 0; code < total; code++) {
            int x = code, used = 0, okp = 1;
            for (int d = 0; d < r; d++) {
                perm[d] = x % r;
                x /= r;
                if (used & (1 << perm[d])) okp = 0;
                used |= 1 << perm[d];
            }
            if (!okp) continue;
            for (int e = 0; e < 3; e++) {
                transpose_case(r, shapes[c], perm, -1, es[e], seed++, &tiled);
                transpose_case(r, shapes[c], perm, 0, es[e], seed++, &tiled); /* the outermost output axis broadcast */
            }
        }
    }
    TJT_CHECK(tiled > 100, "[tiled transpose] only %d cases took the tiled path", tiled);
}
/* ---- attention's flash kernels on the host (no GPU needed) ----
   tj_cuda_attention_host runs the flash kernels' block code (the tiling,
   the masks, the order of the online-softmax updates, P and dS rounded to
   bf16 or TF32) with the tensor-core products done as matrix products on
   the CPU, and its out, dq, dk and dv are compared with the CPU op (out,
   and the gradients of sum(out w) by tj_grad). Tolerance: the largest
   difference at most ATT_TOL (bf16) or ATT_TOL_TF32 (f32 on TF32) times
   (the largest magnitude of the CPU's tensor + 0.1), as compare_at (inputs,
   P and dS rounded before their products, bf16 results; with one key dq
   and dk are 0 up to the rounding). */
extern "C" int tj_cuda_attention_host(tj_dtype dt, int64_t nb, int64_t tq, int64_t tk, int64_t d, double scale, int causal, const void *q, const void *k,
                                      const void *v, void *out, float *lse, const void *dout, void *dq, void *dk, void *dv);
extern "C" int tj_cuda_attention_host_f32x3(int64_t nb, int64_t tq, int64_t tk, int64_t d, double scale, int causal, const float *q, const float *k,
                                            const float *v, float *out, float *lse, const float *dout, float *dq, float *dk, float *dv);
#define ATT_TOL 0.02
#define ATT_TOL_TF32 0.003
#define ATT_TOL_F32X3 2e-5
/* the host emulation of the kernels for dt; f32 on 3xTF32 (the default
   for f32 on the GPU) while att_x3 is set, else on TF32 */
static int att_x3;
static int att_host(tj_dtype dt, int64_t nb, int64_t tq, int64_t tk, int64_t d, double scale, int causal, const void *q, const void *k, const void *v, void *out,
                    float *lse, const void *dout, void *dq, void *dk, void *dv) {
    if (att_x3 && dt == TJ_F32)
        return tj_cuda_attention_host_f32x3(nb, tq, tk, d, scale, causal, (const float *)q, (const float *)k, (const float *)v, (float *)out, lse,
                                            (const float *)dout, (float *)dq, (float *)dk, (float *)dv);
    return tj_cuda_attention_host(dt, nb, tq, tk, d, scale, causal, q, k, v, out, lse, dout, dq, dk, dv);
}
static void f_attn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v q = tj_tree_v(in, "q"), k = tj_tree_v(in, "k"), v = tj_tree_v(in, "v"), wrt[3] = {q, k, v}, gr[3];
    tj_v o = tj_attention(q, k, v, "q", "k", "d", 0, *(const int *)u);
    (void)g;
    tj_grad(tj_sum(tj_mul(o, tj_tree_v(in, "w")), "b q d"), 3, wrt, gr);
    tj_tree_set_v(out, "out", o);
    tj_tree_set_v(out, "dq", gr[0]);
    tj_tree_set_v(out, "dk", gr[1]);
    tj_tree_set_v(out, "dv", gr[2]);
}
static double at_f64(const void *p, tj_dtype dt, int64_t i); /* (below) */
static void attn_host_case(tj_ctx *c, tj_dtype dt, int64_t nb, int64_t tq, int64_t tk, int64_t d, int causal, double *worst) {
    char sq[64], sk[64];
    snprintf(sq, sizeof sq, "b=%lld q=%lld d=%lld", (long long)nb, (long long)tq, (long long)d);
    snprintf(sk, sizeof sk, "b=%lld k=%lld d=%lld", (long long)nb, (long long)tk, (long long)d);
    const spec sp[4] = {{"q", dt, sq, -3, 3}, {"k", dt, sk, -3, 3}, {"v", dt, sk, -1, 1}, {"w", dt, sq, -1, 1}};
    static const char *names[4] = {"out", "dq", "dk", "dv"};
    int64_t nq = nb * tq * d, nk = nb * tk * d, n[4] = {nq, nq, nk, nk};
    void *h[4], *e[4];
    double tol = dt == TJ_BF16 ? ATT_TOL : att_x3 ? ATT_TOL_F32X3 : ATT_TOL_TF32;
    float *lse = (float *)malloc(sizeof(float) * (size_t)(nb * tq)), *ref;
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p;
    for (int i = 0; i < 4; i++) {
        h[i] = host_data(&sp[i], 1234u + 77u * (unsigned)i);
        tj_tree_set_array(in, sp[i].name, tj_array_new(c, dt, sp[i].shape, h[i]));
        e[i] = malloc(tj_dtype_size(dt) * (size_t)n[i]);
    }
    p = tj_jit(c, "attention (reference)", f_attn, &causal, in, NULL);
    TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "[attention host] the CPU reference: %s", tj_error(c));
    TJT_CHECK(att_host(dt, nb, tq, tk, d, 1.0 / sqrt((double)d), causal, h[0], h[1], h[2], e[0], lse, h[3], e[1], e[2], e[3]) == 0,
              "[attention host] %s d=%lld has a flash kernel", tj_dtype_name(dt), (long long)d);
    { /* inputs one element past 16-byte alignment: the kernels stage them an
         element at a time instead of 16 bytes at a time, the same bits */
        size_t es = tj_dtype_size(dt);
        int64_t nin[4] = {nq, nk, nk, nq};
        char *mh[4], *me[4];
        float *mlse = (float *)malloc(sizeof(float) * (size_t)(nb * tq));
        int same = 1;
        for (int i = 0; i < 4; i++) {
            mh[i] = (char *)malloc(es * (size_t)(nin[i] + 1));
            me[i] = (char *)malloc(es * (size_t)n[i]);
            memcpy(mh[i] + es, h[i], es * (size_t)nin[i]);
        }
        TJT_CHECK(att_host(dt, nb, tq, tk, d, 1.0 / sqrt((double)d), causal, mh[0] + es, mh[1] + es, mh[2] + es, me[0], mlse, mh[3] + es, me[1], me[2], me[3]) ==
                      0,
                  "[attention host] %s d=%lld, unaligned inputs", tj_dtype_name(dt), (long long)d);
        for (int i = 0; i < 4; i++) same &= !memcmp(me[i], e[i], es * (size_t)n[i]);
        same &= !memcmp(mlse, lse, sizeof(float) * (size_t)(nb * tq));
        TJT_CHECK(same, "[attention host] %s b=%lld tq=%lld tk=%lld d=%lld causal=%d: unaligned inputs (staged an element at a time) give other bits",
                  tj_dtype_name(dt), (long long)nb, (long long)tq, (long long)tk, (long long)d, causal);
        for (int i = 0; i < 4; i++) free(mh[i]), free(me[i]);
        free(mlse);
    }
    for (int i = 0; p && i < 4; i++) {
        tj_array *a = tj_tree_array(out, names[i]);
        double big = 0, diff = 0;
        int64_t at = 0;
        ref = (float *)malloc(sizeof(float) * (size_t)n[i]);
        if (a) tj_array_read(a, TJ_F32, ref);
        for (int64_t j = 0; a && j < n[i]; j++) {
            double x = at_f64(e[i], dt, j), dj = fabs(x - ref[j]);
            big = fabs(ref[j]) > big ? fabs(ref[j]) : big;
            if (!(dj <= diff)) diff = dj, at = j; /* (NaN counts) */
        }
        /* the ratio the check bounds (diff / big alone made dq of a causal
           query seeing one key, 0 but for rounding, 1e3 on the H100 machine) */
        if (diff / (big + 0.1) > worst[i]) worst[i] = diff / (big + 0.1);
        TJT_CHECK(a && diff <= tol * (big + 0.1), "[attention host] %s b=%lld tq=%lld tk=%lld d=%lld causal=%d: %s element %lld is %g on the host emulation, %g on the "
                  "CPU (largest magnitude %g, tolerance %g of it + 0.1)", tj_dtype_name(dt), (long long)nb, (long long)tq, (long long)tk, (long long)d, causal,
                  names[i], (long long)at, a ? at_f64(e[i], dt, at) : 0.0, a ? ref[at] : 0.0, big, tol);
        free(ref);
    }
    for (int i = 0; i < 4; i++) free(h[i]), free(e[i]);
    free(lse);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_clear_error(c);
}
/* Non-finite inputs on the causal diagonal, against the CPU op: an inf or
   NaN in a row of v, q, k or d_out that a query (or key) of the same
   64-row tile does not see must change nothing there, as on the CPU, where
   masked pairs never meet; the tensor-core products meet them with a
   weight of 0, and 0 inf is NaN. Wherever the CPU's result is finite the
   other's must be, and close (tolerance as attn_host_case); wherever it is
   not, neither. dev NULL: the flash kernels' host emulation
   (tj_cuda_attention_host); else tj_attention in context dev (the GPU:
   whichever path the dtype, TJ_CUDA_FLASH and TJ_CUDA_TF32 choose). */
static void attn_nonfinite_case(tj_ctx *c, tj_ctx *dev, const char *path, tj_dtype dt, int64_t t, int64_t d, int which, double tol) {
    char sh[64], shk[64];
    snprintf(sh, sizeof sh, "b=2 q=%lld d=%lld", (long long)t, (long long)d);
    snprintf(shk, sizeof shk, "b=2 k=%lld d=%lld", (long long)t, (long long)d);
    const spec sp[4] = {{"q", dt, sh, -3, 3}, {"k", dt, shk, -3, 3}, {"v", dt, shk, -1, 1}, {"w", dt, sh, -1, 1}};
    static const char *names[4] = {"out", "dq", "dk", "dv"},
                      *what[10] = {"v inf", "q NaN", "d_out -inf", "k NaN", "v inf in the last, ragged tile", "q NaN in the last, ragged tile",
                                   "v inf seen by the tiles below", "k -inf seen by the tiles below", "d_out inf seeing the tiles above",
                                   "q -inf seeing the tiles above"};
    /* (input, batch row, position, column, value), one per case: v inf (the
       forward's P v), q NaN (dk's dS^T q), d_out -inf (dv's P^T d_out), k
       NaN (dq's dS k), each seen only by the later rows of its tile; and
       (t = 130) v and q in the tile of rows 128 and 129; then a v inf and
       a k -inf of the first tile, which the later tiles' queries see (a
       product off the diagonal, where no pair is masked: 3xTF32's cross
       terms made 0 inf = NaN there, session 22), and a d_out inf and a q
       -inf of the second tile, which see keys of the first */
    static const struct { int in, b, pos, col; double x; } put[10] = {
        {2, 0, 40, 3, INFINITY}, {0, 0, 85, 5, NAN},       {3, 1, 10, 7, -INFINITY}, {1, 1, 100, 2, NAN},  {2, 1, 129, 1, INFINITY},
        {0, 0, 128, 4, NAN},     {2, 0, 3, 3, INFINITY},   {1, 1, 5, 2, -INFINITY},  {3, 0, 100, 1, INFINITY}, {0, 1, 70, 6, -INFINITY}};
    int64_t n = 2 * t * d, at = ((int64_t)put[which].b * t + put[which].pos) * d + put[which].col;
    int icausal = 1;
    void *h[4];
    double *got[4];
    if (put[which].pos >= t) return;
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c), *din = dev ? tj_tree_new(dev) : NULL, *dout = dev ? tj_tree_new(dev) : NULL;
    tj_prog *p, *dp = NULL;
    for (int i = 0; i < 4; i++) h[i] = host_data(&sp[i], 4321u + 77u * (unsigned)i), got[i] = (double *)calloc((size_t)n, sizeof(double));
    if (dt == TJ_BF16) ((uint16_t *)h[put[which].in])[at] = tj_f32_to_bf16((float)put[which].x);
    else ((float *)h[put[which].in])[at] = (float)put[which].x;
    for (int i = 0; i < 4; i++) {
        tj_tree_set_array(in, sp[i].name, tj_array_new(c, dt, sp[i].shape, h[i]));
        if (dev) tj_tree_set_array(din, sp[i].name, tj_array_new(dev, dt, sp[i].shape, h[i]));
    }
    p = tj_jit(c, "attention (reference, non-finite)", f_attn, &icausal, in, NULL);
    TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "[attention %s, non-finite] the CPU reference: %s", path, tj_error(c));
    if (dev) {
        dp = tj_jit(dev, "attention (non-finite)", f_attn, &icausal, din, NULL);
        TJT_CHECK(dp && tj_run(dp, din, dout) == TJ_OK, "[attention %s, non-finite] the run: %s", path, tj_error(dev));
        for (int i = 0; dp && i < 4; i++) {
            tj_array *a = tj_tree_array(dout, names[i]);
            if (a) tj_array_read(a, TJ_F64, got[i]);
        }
    } else {
        void *e[4];
        float *lse = (float *)malloc(sizeof(float) * (size_t)(2 * t));
        for (int i = 0; i < 4; i++) e[i] = malloc(tj_dtype_size(dt) * (size_t)n);
        TJT_CHECK(att_host(dt, 2, t, t, d, 1.0 / sqrt((double)d), 1, h[0], h[1], h[2], e[0], lse, h[3], e[1], e[2], e[3]) == 0,
                  "[attention %s, non-finite] %s d=%lld has a flash kernel", path, tj_dtype_name(dt), (long long)d);
        for (int i = 0; i < 4; i++)
            for (int64_t j = 0; j < n; j++) got[i][j] = at_f64(e[i], dt, j);
        for (int i = 0; i < 4; i++) free(e[i]);
        free(lse);
    }
    for (int i = 0; p && i < 4; i++) {
        tj_array *a = tj_tree_array(out, names[i]);
        float *ref = (float *)malloc(sizeof(float) * (size_t)n);
        double big = 0;
        int64_t bad = 0, first = -1, nonfin = 0;
        if (a) tj_array_read(a, TJ_F32, ref);
        for (int64_t j = 0; a && j < n; j++)
            if (isfinite(ref[j]) && fabs(ref[j]) > big) big = fabs(ref[j]);
        for (int64_t j = 0; a && j < n; j++) {
            double x = got[i][j];
            int ok = isfinite(ref[j]) ? isfinite(x) && fabs(x - ref[j]) <= tol * (big + 0.1) : !isfinite(x);
            nonfin += !isfinite(ref[j]);
            if (!ok && bad++ == 0) first = j;
        }
        TJT_CHECK(a && bad == 0, "[attention %s, non-finite] %s t=%lld d=%lld causal, %s: %s: %lld of %lld elements differ (the CPU has %lld non-finite); "
                  "the first, element %lld (position %lld), is %g there, %g on the CPU",
                  path, tj_dtype_name(dt), (long long)t, (long long)d, what[which], names[i], (long long)bad, (long long)n, (long long)nonfin, (long long)first,
                  (long long)(first / d % t), first >= 0 ? got[i][first] : 0.0, first >= 0 ? ref[first] : 0.0);
        free(ref);
    }
    for (int i = 0; i < 4; i++) free(h[i]), free(got[i]);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    if (dev) {
        tj_prog_free(dp);
        tj_tree_free(din);
        tj_tree_free(dout);
        tj_clear_error(dev);
    }
    tj_clear_error(c);
}
static void test_attention_host(void) {
    static const int64_t sizes[] = {1, 17, 64, 65, 130};
    double worst[3][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};
    tj_ctx *c = tj_ctx_new();
    tj_set_backend(c, NULL); /* the CPU backend, even under TJ_BACKEND=devsim */
    for (int causal = 0; causal < 2; causal++) {
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 5; j++) attn_host_case(c, TJ_BF16, 2, sizes[i], sizes[j], 64, causal, worst[0]);
        attn_host_case(c, TJ_BF16, 1, 130, 65, 128, causal, worst[0]);
        attn_host_case(c, TJ_BF16, 2, 17, 130, 128, causal, worst[0]);
        attn_host_case(c, TJ_F32, 2, 65, 130, 64, causal, worst[1]);
        attn_host_case(c, TJ_F32, 1, 130, 17, 128, causal, worst[1]);
        attn_host_case(c, TJ_F32, 2, 1, 64, 64, causal, worst[1]);
        att_x3 = 1; /* f32 on 3xTF32 */
        attn_host_case(c, TJ_F32, 2, 65, 130, 64, causal, worst[2]);
        attn_host_case(c, TJ_F32, 1, 130, 17, 128, causal, worst[2]);
        attn_host_case(c, TJ_F32, 2, 1, 64, 64, causal, worst[2]);
        att_x3 = 0;
    }
    for (int which = 0; which < 10; which++) {
        attn_nonfinite_case(c, NULL, "host", TJ_BF16, 130, 64, which, ATT_TOL);
        attn_nonfinite_case(c, NULL, "host", TJ_BF16, 128, 128, which, ATT_TOL);
        attn_nonfinite_case(c, NULL, "host", TJ_F32, 130, 64, which, ATT_TOL_TF32);
        attn_nonfinite_case(c, NULL, "host", TJ_F32, 128, 128, which, ATT_TOL_TF32);
        att_x3 = 1;
        attn_nonfinite_case(c, NULL, "host, 3xTF32", TJ_F32, 130, 64, which, ATT_TOL_F32X3);
        attn_nonfinite_case(c, NULL, "host, 3xTF32", TJ_F32, 128, 128, which, ATT_TOL_F32X3);
        att_x3 = 0;
    }
    for (int f = 0; f < 3; f++)
        printf("attention host emulation, %s: largest difference / (largest magnitude + 0.1): out %.2e, dq %.2e, dk %.2e, dv %.2e (tolerance %g)\n",
               f == 2 ? "f32 on 3xTF32" : f ? "f32 on TF32" : "bf16", worst[f][0], worst[f][1], worst[f][2], worst[f][3],
               f == 2 ? ATT_TOL_F32X3 : f ? ATT_TOL_TF32 : ATT_TOL);
    TJT_CHECK(tj_cuda_attention_host(TJ_F64, 1, 1, 1, 64, 1.0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL) < 0 &&
                  tj_cuda_attention_host(TJ_BF16, 1, 1, 1, 32, 1.0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL) < 0,
              "[attention host] f64, or d = 32, has no flash kernel");
    tj_ctx_free(c);
}
/* ---- the flash kernels' fragment layout against the PTX ISA (no GPU needed) ----
   The layout of mma.sync's fragments, written out here from the PTX ISA's
   tables ("Matrix Fragments for mma.m16n8k16 with floating point type",
   and "for mma.m16n8k8", .tf32), apart from the kernels' helpers:
   tj_cuda_attention_host cannot catch a wrong layout, since its products
   rebuild the matrices through the same helpers as the register loads.
   Each check goes through tj_cuda_fa_frag_host: the host product of
   registers placed by these tables (c += a b), the A fragments of a staged
   tile, both kinds of B fragments, and P's A fragments from its C
   fragments. The values are small multiples of 1/16, exact in bf16, TF32
   and float sums, so every comparison is exact. */
extern "C" int tj_cuda_fa_frag_host(int tf32, int op, const float *m, int i0, int i1, uint32_t *a, uint32_t *b, float *c);
/* element i of a fragment (bf16: 2 per register, low half first; TF32: 1): its row and column */
static void ptx_a(int tf32, int lane, int i, int *row, int *col) {
    int g = lane >> 2, t = lane % 4;
    if (tf32) *row = g + (i == 1 || i == 3 ? 8 : 0), *col = t + (i >= 2 ? 4 : 0);
    else *row = g + ((i < 2 || (i >= 4 && i < 6)) ? 0 : 8), *col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
}
static void ptx_b(int tf32, int lane, int i, int *row, int *col) {
    int g = lane >> 2, t = lane % 4;
    if (tf32) *row = t + (i == 1 ? 4 : 0);
    else *row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
    *col = g;
}
static void ptx_c(int lane, int i, int *row, int *col) { *row = (lane >> 2) + (i >= 2 ? 8 : 0), *col = (lane % 4) * 2 + (i & 1); }
/* value h of a register (bf16: bits 16 h..; TF32: the float's bits) */
static float frag_val(int tf32, uint32_t r, int h) {
    uint32_t u = tf32 ? r : ((r >> (16 * h)) & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t frag_bits(int tf32, float x) { /* x exact in the format */
    uint32_t u;
    memcpy(&u, &x, 4);
    return tf32 ? u : u >> 16;
}
static float frag_rand(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int)(*st >> 33) % 129 - 64) / 16.f;
}
static void test_fa_fragments(void) {
    uint64_t st = 99;
    static float m[64 * 64], p[16 * 64], cf[32 * 8 * 4];
    for (int tf32 = 0; tf32 < 2; tf32++) {
        const int K = tf32 ? 8 : 16, epr = tf32 ? 1 : 2;
        const char *fmt = tf32 ? "m16n8k8 tf32" : "m16n8k16 bf16";
        int bad = 0;
        for (int rep = 0; rep < 4; rep++) { /* c += a b with registers placed by the tables */
            float A[16][16], B[16][8], C[16][8], c[32][4];
            uint32_t a[32][4], b[32][2];
            for (int r = 0; r < 16; r++)
                for (int x = 0; x < K; x++) A[r][x] = frag_rand(&st);
            for (int x = 0; x < K; x++)
                for (int n = 0; n < 8; n++) B[x][n] = frag_rand(&st);
            for (int r = 0; r < 16; r++)
                for (int n = 0; n < 8; n++) C[r][n] = frag_rand(&st);
            memset(a, 0, sizeof a), memset(b, 0, sizeof b);
            for (int l = 0; l < 32; l++) {
                int row, col;
                for (int i = 0; i < 4 * epr; i++) ptx_a(tf32, l, i, &row, &col), a[l][i / epr] |= frag_bits(tf32, A[row][col]) << (16 * (i % epr));
                for (int i = 0; i < 2 * epr; i++) ptx_b(tf32, l, i, &row, &col), b[l][i / epr] |= frag_bits(tf32, B[row][col]) << (16 * (i % epr));
                for (int i = 0; i < 4; i++) ptx_c(l, i, &row, &col), c[l][i] = C[row][col];
            }
            TJT_CHECK(tj_cuda_fa_frag_host(tf32, 0, NULL, 0, 0, &a[0][0], &b[0][0], &c[0][0]) == 0, "[fragments] %s: the host product", fmt);
            for (int l = 0; l < 32; l++)
                for (int i = 0; i < 4; i++) {
                    int row, col;
                    float want;
                    ptx_c(l, i, &row, &col);
                    want = C[row][col];
                    for (int x = 0; x < K; x++) want += A[row][x] * B[x][col];
                    bad += c[l][i] != want;
                }
        }
        TJT_CHECK(bad == 0, "[fragments] %s: c += a b on registers placed by the PTX tables: %d of 512 values wrong", fmt, bad);
        for (int i = 0; i < 64 * 64; i++) m[i] = frag_rand(&st);
        bad = 0;
        for (int w0 = 0; w0 < 64; w0 += 16) /* A fragments of a staged tile: rows w0.., columns K kk.. */
            for (int kk = 0; kk < 64 / K; kk++) {
                uint32_t a[32][4];
                TJT_CHECK(tj_cuda_fa_frag_host(tf32, 1, m, w0, kk, &a[0][0], NULL, NULL) == 0, "[fragments] %s: afrag", fmt);
                for (int l = 0; l < 32; l++)
                    for (int i = 0; i < 4 * epr; i++) {
                        int row, col;
                        ptx_a(tf32, l, i, &row, &col);
                        bad += frag_val(tf32, a[l][i / epr], i % epr) != m[(w0 + row) * 64 + kk * K + col];
                    }
            }
        TJT_CHECK(bad == 0, "[fragments] %s: A fragments of a staged tile: %d values not where the PTX tables put them", fmt, bad);
        bad = 0;
        for (int n0 = 0; n0 < 64; n0 += 8) /* B fragments: B[k][n] = M[n0 + n][k0 + k] ("nk") and M[k0 + k][n0 + n] ("kn") */
            for (int k0 = 0; k0 < 64; k0 += K) {
                uint32_t bnk[32][2], bkn[32][2];
                TJT_CHECK(tj_cuda_fa_frag_host(tf32, 2, m, n0, k0, NULL, &bnk[0][0], NULL) == 0 && tj_cuda_fa_frag_host(tf32, 3, m, k0, n0, NULL, &bkn[0][0], NULL) == 0,
                          "[fragments] %s: bfrag", fmt);
                for (int l = 0; l < 32; l++)
                    for (int i = 0; i < 2 * epr; i++) {
                        int row, col;
                        ptx_b(tf32, l, i, &row, &col);
                        bad += frag_val(tf32, bnk[l][i / epr], i % epr) != m[(n0 + col) * 64 + k0 + row];
                        bad += frag_val(tf32, bkn[l][i / epr], i % epr) != m[(k0 + row) * 64 + n0 + col];
                    }
            }
        TJT_CHECK(bad == 0, "[fragments] %s: B fragments of a staged tile: %d values not where the PTX tables put them", fmt, bad);
        bad = 0;
        for (int i = 0; i < 16 * 64; i++) p[i] = frag_rand(&st);
        for (int l = 0; l < 32; l++) /* P (16 x 64) as eight C fragments */
            for (int n = 0; n < 8; n++)
                for (int i = 0; i < 4; i++) {
                    int row, col;
                    ptx_c(l, i, &row, &col);
                    cf[(l * 8 + n) * 4 + i] = p[row * 64 + 8 * n + col];
                }
        for (int kc = 0; kc < 64 / K; kc++) { /* P's A fragments for k step kc: columns K kc.. */
            uint32_t a[32][4];
            TJT_CHECK(tj_cuda_fa_frag_host(tf32, 4, NULL, kc, 0, &a[0][0], NULL, cf) == 0, "[fragments] %s: pfrag", fmt);
            for (int l = 0; l < 32; l++)
                for (int i = 0; i < 4 * epr; i++) {
                    int row, col;
                    ptx_a(tf32, l, i, &row, &col);
                    bad += frag_val(tf32, a[l][i / epr], i % epr) != p[row * 64 + kc * K + col];
                }
        }
        TJT_CHECK(bad == 0, "[fragments] %s: P's A fragments from its C fragments: %d values not where the PTX tables put them", fmt, bad);
    }
    { /* a NaN whose payload lies only in the 13 bits the TF32 tensor core
         ignores is staged as the quiet NaN, not left to read as inf */
        uint32_t nanbits = 0x7f800001u, b[32][2];
        memset(m, 0, sizeof m);
        memcpy(&m[0], &nanbits, 4);
        TJT_CHECK(tj_cuda_fa_frag_host(1, 2, m, 0, 0, NULL, &b[0][0], NULL) == 0 && b[0][0] == 0x7fc00000u,
                  "[fragments] TF32: a NaN of payload 1 is staged as 0x%08x (want the quiet NaN 0x7fc00000)", b[0][0]);
    }
}
/* attention on the GPU against the CPU backend, out and the gradients of
   sum(out w): path 1 in every dtype (dim 40, dim' 24; and the widest rows,
   256 / 250, the builder's limit), path 1 on the flash shapes (TJ_CUDA_FLASH=0) and the flash
   path (bf16, f32 with TJ_CUDA_TF32=1, f32 on 3xTF32 without it; dim 64
   and 128), causal or not, tq = tk of 1, 31, 257 (and 1024 for flash), and
   tq != tk; and an inf or NaN that a causal query does not see
   (attn_nonfinite_case), flash and path 1. Tolerances as scaled in
   compare_at. (Run without TJ_CUDA_TF32 set: it picks TF32 over 3xTF32.) */
static void attn_gpu_case(const char *path, tj_dtype dt, int64_t tq, int64_t tk, int64_t d, int64_t dv, int causal, double scaled) {
    char what[160], sq[64], sk[64], sv[64], sw[64];
    snprintf(what, sizeof what, "attention %s %s tq=%lld tk=%lld d=%lld dv=%lld%s", path, tj_dtype_name(dt), (long long)tq, (long long)tk, (long long)d,
             (long long)dv, causal ? " causal" : "");
    snprintf(sq, sizeof sq, "b=2 q=%lld d=%lld", (long long)tq, (long long)d);
    snprintf(sk, sizeof sk, "b=2 k=%lld d=%lld", (long long)tk, (long long)d);
    snprintf(sv, sizeof sv, "b=2 k=%lld d=%lld", (long long)tk, (long long)dv);
    snprintf(sw, sizeof sw, "b=2 q=%lld d=%lld", (long long)tq, (long long)dv);
    const spec sp[4] = {{"q", dt, sq, -3, 3}, {"k", dt, sk, -3, 3}, {"v", dt, sv, -1, 1}, {"w", dt, sw, -1, 1}};
    compare_at(what, f_attn, &causal, sp, 4, scaled);
}
static void test_attention_gpu(void) {
    static const int64_t sizes[] = {1, 31, 257, 1024};
    for (int causal = 0; causal < 2; causal++) {
        for (int i = 0; i < 3; i++) {
            attn_gpu_case("path 1", TJ_F32, sizes[i], sizes[i], 40, 24, causal, 1e-4);
            attn_gpu_case("path 1", TJ_F64, sizes[i], sizes[i], 40, 24, causal, 1e-9);
            attn_gpu_case("path 1", TJ_BF16, sizes[i], sizes[i], 40, 24, causal, 1e-2);
        }
        attn_gpu_case("path 1", TJ_F32, 31, 31, 256, 250, causal, 1e-4);
        setenv("TJ_CUDA_FLASH", "0", 1);
        for (int i = 1; i < 3; i++) attn_gpu_case("path 1 (TJ_CUDA_FLASH=0)", TJ_BF16, sizes[i], sizes[i], 64, 64, causal, 1e-2);
        attn_gpu_case("path 1 (TJ_CUDA_FLASH=0)", TJ_F32, 257, 31, 64, 64, causal, 1e-4);
        unsetenv("TJ_CUDA_FLASH");
        for (int i = 0; i < 4; i++) { /* f32 without TJ_CUDA_TF32: the flash kernels on 3xTF32 */
            attn_gpu_case("flash (3xTF32)", TJ_F32, sizes[i], sizes[i], 64, 64, causal, 1e-4);
            attn_gpu_case("flash (3xTF32)", TJ_F32, sizes[i], sizes[i], 128, 128, causal, 1e-4);
        }
        attn_gpu_case("flash (3xTF32)", TJ_F32, 257, 31, 64, 64, causal, 1e-4);
        for (int i = 0; i < 4; i++) {
            attn_gpu_case("flash", TJ_BF16, sizes[i], sizes[i], 64, 64, causal, ATT_TOL);
            attn_gpu_case("flash", TJ_BF16, sizes[i], sizes[i], 128, 128, causal, ATT_TOL);
        }
        attn_gpu_case("flash", TJ_BF16, 31, 257, 64, 64, causal, ATT_TOL);
        attn_gpu_case("flash", TJ_BF16, 257, 31, 128, 128, causal, ATT_TOL);
        setenv("TJ_CUDA_TF32", "1", 1);
        for (int i = 0; i < 4; i++) {
            attn_gpu_case("flash (TJ_CUDA_TF32=1)", TJ_F32, sizes[i], sizes[i], 64, 64, causal, ATT_TOL_TF32);
            attn_gpu_case("flash (TJ_CUDA_TF32=1)", TJ_F32, sizes[i], sizes[i], 128, 128, causal, ATT_TOL_TF32);
        }
        attn_gpu_case("flash (TJ_CUDA_TF32=1)", TJ_F32, 257, 31, 64, 64, causal, ATT_TOL_TF32);
        unsetenv("TJ_CUDA_TF32");
    }
    for (int which = 0; which < 10; which++) { /* an inf or NaN a causal query does not see, or sees off the diagonal (attn_nonfinite_case) */
        attn_nonfinite_case(cpu, gpu, "flash", TJ_BF16, 130, 64, which, ATT_TOL);
        attn_nonfinite_case(cpu, gpu, "flash", TJ_BF16, 128, 128, which, ATT_TOL);
        setenv("TJ_CUDA_FLASH", "0", 1);
        attn_nonfinite_case(cpu, gpu, "path 1 (TJ_CUDA_FLASH=0)", TJ_BF16, 130, 64, which, 1e-2);
        unsetenv("TJ_CUDA_FLASH");
        setenv("TJ_CUDA_TF32", "1", 1);
        attn_nonfinite_case(cpu, gpu, "flash (TJ_CUDA_TF32=1)", TJ_F32, 130, 128, which, ATT_TOL_TF32);
        unsetenv("TJ_CUDA_TF32");
        attn_nonfinite_case(cpu, gpu, "flash (3xTF32)", TJ_F32, 130, 64, which, ATT_TOL_F32X3);
    }
}

/* `test_cuda --bench-attention` (tools/gpu_session.sh's bench step): one
   training step's attention, forward and backward (the gradients of
   sum(out w) for q, k and v), at GPT-2's B=16 H=12 T=1024 D=64 in bf16
   and in f32 (whose flash path is 3xTF32), causal: tj_attention on the
   flash path, on path 1 (TJ_CUDA_FLASH=0), and
   composed as dot, causal_mask, softmax and dot. Prints the median, min and
   max of 7 runs after a warm-up (tj_run waits for the device). */
static void f_attn_bench(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v q = tj_tree_v(in, "q"), k = tj_tree_v(in, "k"), v = tj_tree_v(in, "v"), wrt[3] = {q, k, v}, gr[3], o;
    (void)g;
    if (*(const int *)u) { /* composed */
        tj_v s = tj_causal_mask(tj_dot(tj_muls(q, 1.0 / sqrt((double)tj_v_dim(q, "d"))), k, "d"), "q", "k", -INFINITY);
        o = tj_dot(tj_softmax(s, "k"), v, "k");
    } else
        o = tj_attention(q, k, v, "q", "k", "d", 0, 1);
    tj_grad(tj_sum(tj_mul(o, tj_tree_v(in, "w")), "b h q d"), 3, wrt, gr);
    tj_tree_set_v(out, "dq", gr[0]);
    tj_tree_set_v(out, "dk", gr[1]);
    tj_tree_set_v(out, "dv", gr[2]);
}
static int cmp_double(const void *a, const void *b) { return *(const double *)a < *(const double *)b ? -1 : *(const double *)a > *(const double *)b; }
/* the three forms in dtype dt (f32: the flash path on 3xTF32) */
static void bench_attention_dt(tj_ctx *c, tj_dtype dt) {
    static const char *modes[3] = {"tj_attention, flash path", "tj_attention, path 1 (TJ_CUDA_FLASH=0)", "composed: dot, causal_mask, softmax, dot"};
    const spec sp[4] = {{"q", dt, "b=16 h=12 q=1024 d=64", -3, 3}, {"k", dt, "b=16 h=12 k=1024 d=64", -3, 3},
                        {"v", dt, "b=16 h=12 k=1024 d=64", -1, 1}, {"w", dt, "b=16 h=12 q=1024 d=64", -1, 1}};
    tj_tree *in = make_inputs(c, sp, 4);
    for (int mode = 0; mode < 3; mode++) {
        int composed = mode == 2;
        double ms[7];
        tj_tree *out = tj_tree_new(c);
        if (mode == 1) setenv("TJ_CUDA_FLASH", "0", 1);
        tj_prog *p = tj_jit(c, modes[mode], f_attn_bench, &composed, in, NULL);
        int ok = p && tj_run(p, in, out) == TJ_OK;
        for (int r = 0; ok && r < 7; r++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            ok = tj_run(p, in, out) == TJ_OK;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            ms[r] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
        }
        unsetenv("TJ_CUDA_FLASH");
        if (ok) {
            qsort(ms, 7, sizeof *ms, cmp_double);
            printf("attention bench: B=16 H=12 T=1024 D=64 %s causal, fwd+bwd: %s%s: median %.2f ms (min %.2f, max %.2f, 7 runs)\n", tj_dtype_name(dt), modes[mode],
                   dt == TJ_F32 && mode == 0 ? " (3xTF32)" : "", ms[3], ms[0], ms[6]);
        } else
            printf("attention bench: %s %s failed: %s\n", tj_dtype_name(dt), modes[mode], tj_error(c));
        tj_prog_free(p);
        tj_tree_free(out);
        tj_clear_error(c);
    }
    tj_tree_free(in);
}
static int bench_attention(void) {
    char why[512];
    tj_backend *be = tj_cuda_backend(0, why, sizeof why);
    if (!be) {
        printf("attention bench: no GPU (%s)\n", why);
        return 1;
    }
    tj_ctx *c = tj_ctx_new();
    tj_set_backend(c, be);
    bench_attention_dt(c, TJ_BF16);
    bench_attention_dt(c, TJ_F32);
    tj_ctx_free(c);
    tj_cuda_backend_free(be);
    return 0;
}
static void f_relayout(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    static const char *names[] = {"f", "b", "d", "i"};
    char key[32];
    (void)g;
    (void)u;
    for (int j = 0; j < 4; j++) {
        tj_v x = tj_tree_v(in, names[j]);
        snprintf(key, sizeof key, "%s_cba", names[j]);
        tj_tree_set_v(out, key, tj_transpose(x, "c b a"));
        snprintf(key, sizeof key, "%s_acb", names[j]);
        tj_tree_set_v(out, key, tj_transpose(x, "a c b"));
        snprintf(key, sizeof key, "%s_cab", names[j]);
        tj_tree_set_v(out, key, tj_transpose(x, "c a b"));
        snprintf(key, sizeof key, "%s_bac", names[j]); /* innermost kept: the plain copy */
        tj_tree_set_v(out, key, tj_transpose(x, "b a c"));
    }
}
static const spec s_relayout[] = {
    {"f", TJ_F32, "a=3 b=33 c=257", -2, 2},
    {"b", TJ_BF16, "a=2 b=31 c=65", -2, 2},
    {"d", TJ_F64, "a=5 b=64 c=1", -2, 2},
    {"i", TJ_I32, "a=1 b=70 c=33", -100, 100},
};

/* random numbers and arange by global index: 4 simulated devices on one GPU
   (each its own stream) give the values of one CPU device, whatever the
   sharding */
static tj_backend *gbe;
static void f_sharded_sources(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)u;
    tj_tree_set_v(out, "u", tj_with_sharding_constraint(tj_uniform(g, 1234, TJ_F32, "batch=8 embed=8"), "batch:data"));
    tj_tree_set_v(out, "n", tj_with_sharding_constraint(tj_normal(g, 77, TJ_F32, "batch=8 embed=8"), "embed:data"));
    tj_tree_set_v(out, "a", tj_with_sharding_constraint(tj_arange(g, TJ_F32, "batch=8 embed=8", "embed"), "embed:data"));
    tj_tree_set_v(out, "x", tj_muls(tj_tree_v(in, "x"), 2.0));
}
static void test_sharded_sources(void) {
    const char *names[4] = {"u", "n", "a", "x"};
    float v[2][4][64];
    int k, i, j;
    for (k = 0; k < 2; k++) { /* 0: one CPU device; 1: four devices on the backend under test */
        tj_ctx *c = tj_ctx_new();
        tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
        tj_prog *p;
        float x[64];
        for (i = 0; i < 64; i++) x[i] = (float)i * 0.25f;
        if (k && gbe) tj_set_backend(c, gbe);
        tj_set_devices(c, k ? 4 : 1);
        tj_set_mesh(c, k ? "data=4" : "data=1"); /* one device: a mesh of one */
        tj_tree_set_array(in, "x", tj_array_new(c, TJ_F32, "batch=8 embed=8", x));
        if (k) tj_filter_shard(in, "batch:data");
        p = tj_jit(c, "sharded_sources", f_sharded_sources, NULL, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "[sharded sources] %s: %s", k ? "4 devices" : "1 device", tj_error(c));
        for (j = 0; j < 4; j++) {
            memset(v[k][j], 0, sizeof v[k][j]);
            if (tj_tree_array(out, names[j])) tj_array_read(tj_tree_array(out, names[j]), TJ_F32, v[k][j]);
        }
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(c);
    }
    for (j = 0; j < 4; j++) {
        double worst = 0;
        for (i = 0; i < 64; i++) {
            double d = fabs((double)v[0][j][i] - (double)v[1][j][i]);
            if (d > worst) worst = d;
        }
        TJT_CHECK(worst <= 1e-6, "[sharded sources] '%s' on 4 devices differs from one device by %g", names[j], worst);
    }
}

/* a bad index is a run-time error with the CPU's wording, not a crash */
static void test_bad_index(void) {
    tj_ctx *cs[2] = {cpu, gpu};
    char msg[2][1024];
    int b;
    for (b = 0; b < 2; b++) {
        int32_t tok[4] = {1, 2, 9, 0};
        tj_tree *in = tj_tree_new(cs[b]), *out = tj_tree_new(cs[b]);
        tj_prog *p;
        tj_tree_set_array(in, "w", tj_ones(cs[b], TJ_F32, "vocab=5 e=3"));
        tj_tree_set_array(in, "tok", tj_array_new(cs[b], TJ_I32, "t=4", tok));
        p = tj_jit(cs[b], "bad_index", f_take, NULL, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) != TJ_OK, "[bad index] %s: the run should fail", b ? "cuda" : "cpu");
        snprintf(msg[b], sizeof msg[b], "%s", tj_error(cs[b]));
        TJT_CHECK(strstr(msg[b], "out of range") != NULL, "[bad index] %s message: \"%s\"", b ? "cuda" : "cpu", msg[b]);
        tj_clear_error(cs[b]);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
    }
    TJT_CHECK(strcmp(msg[0], msg[1]) == 0, "[bad index] messages differ:\n  cpu:  %s\n  cuda: %s", msg[0], msg[1]);
}

/* the same compiled program, run again (fresh arena, same results) */
static void test_rerun(void) {
    tj_tree *in = make_inputs(gpu, s_mlp, 6), *o1 = tj_tree_new(gpu), *o2 = tj_tree_new(gpu);
    tj_prog *p = tj_jit(gpu, "mlp_rerun", f_mlp, NULL, in, NULL);
    float a = 0, b = 1;
    TJT_CHECK(p && tj_run(p, in, o1) == TJ_OK && tj_run(p, in, o2) == TJ_OK, "[rerun] %s", tj_error(gpu));
    if (p && tj_tree_array(o1, "loss") && tj_tree_array(o2, "loss")) {
        tj_array_read(tj_tree_array(o1, "loss"), TJ_F32, &a);
        tj_array_read(tj_tree_array(o2, "loss"), TJ_F32, &b);
        TJT_CHECK(a == b, "[rerun] loss %.9g then %.9g", a, b);
    }
    tj_clear_error(gpu);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(o1);
    tj_tree_free(o2);
}

/* ---- collectives on simulated devices of one GPU ([11] collectives of
   tinyjax_cuda.cu) ----
   Every collective in f32, bf16, f64 and i32, inside a shard_map, with
   blocks that need packing (the collective's axis is not the first: a copy
   kernel packs them into scratch) and blocks that do not (the first axis:
   the transport reads or writes the buffer itself), on 2 devices (mesh
   model=2) and 4 (data=2 model=2: groups of 2 over model, and one group of
   4 over data+model). The same program runs on as many CPU devices; every
   output must be bit-equal, reductions included (the device-buffer
   transport reduces in rank order with the CPU transports' arithmetic). */
typedef struct {
    const char *axes; /* the collectives' mesh axes */
    int G;            /* devices in each group      */
} coll_case;
#define NCOLLOUT 11
static const char *coll_out[NCOLLOUT] = {"psum",          "pmax",          "all_gather_packed", "all_gather_direct", "psum_scatter_packed",
                                         "psum_scatter_direct", "all_to_all_packed_send", "all_to_all_packed_recv", "ppermute_cycle",
                                         "ppermute_one_pair", "axis_index"};
static void coll_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const coll_case *cc = (const coll_case *)u;
    int cycle[2 * TJ_MAXDEV], r;
    static const int pair[2] = {0, 1}; /* rank 1 gets rank 0's block; every other rank zeros */
    tj_v x = tj_muls(in[0], 2.0); /* made by a kernel on each device's stream just before (exact in every dtype) */
    for (r = 0; r < cc->G; r++) {
        cycle[2 * r] = r;
        cycle[2 * r + 1] = (r + 1) % cc->G;
    }
    out[0] = tj_psum(x, cc->axes);
    out[1] = tj_pmax(x, cc->axes);
    out[2] = tj_all_gather(x, cc->axes, "embed"); /* batch comes first and is not 1: packed */
    out[3] = tj_all_gather(x, cc->axes, "batch");
    out[4] = tj_psum_scatter(x, cc->axes, "embed");
    out[5] = tj_psum_scatter(x, cc->axes, "batch");
    out[6] = tj_all_to_all(x, cc->axes, "embed", "batch"); /* sends blocks of embed (packed), receives along batch (direct) */
    out[7] = tj_all_to_all(x, cc->axes, "batch", "embed"); /* sends blocks of batch (direct), receives along embed (unpacked) */
    out[8] = tj_ppermute(x, cc->axes, cc->G, cycle);
    out[9] = tj_ppermute(x, cc->axes, 1, pair);
    out[10] = tj_mul(x, tj_cast(tj_adds(tj_axis_index(g, cc->axes), 1), tj_v_dtype(x))); /* and shard_slice (the in_spec): each device's own rank */
}
static const char *coll_spec; /* every device's block of every output is kept */
static void f_coll(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const char *is[1], *os[NCOLLOUT];
    tj_v x = tj_tree_v(in, "x"), y[NCOLLOUT];
    int i;
    (void)g;
    is[0] = coll_spec;
    for (i = 0; i < NCOLLOUT; i++) os[i] = coll_spec;
    if (tj_shard_map(coll_region, u, 1, &x, is, NCOLLOUT, y, os, 0) != TJ_OK) return;
    for (i = 0; i < NCOLLOUT; i++) tj_tree_set_v(out, coll_out[i], y[i]);
}
/* ndev devices with `mesh` on the CPU and on the backend under test */
static void mesh_ctxs(tj_ctx *c[2], int ndev, const char *mesh) {
    int b;
    for (b = 0; b < 2; b++) {
        c[b] = tj_ctx_new();
        if (b && gbe) tj_set_backend(c[b], gbe);
        tj_set_devices(c[b], ndev);
        tj_set_mesh(c[b], mesh);
    }
}
/* element i of a host buffer of dtype dt */
static double at_f64(const void *p, tj_dtype dt, int64_t i) {
    switch (dt) {
    case TJ_F32: return ((const float *)p)[i];
    case TJ_BF16: return tj_bf16_to_f32(((const uint16_t *)p)[i]);
    case TJ_I32: return ((const int32_t *)p)[i];
    default: return ((const double *)p)[i];
    }
}
/* outputs of a program on both contexts, compared bit for bit */
static void compare_bits(const char *what, tj_ctx *c[2], tj_fn fn, void *user, const spec *sp, int nsp, const char *rules) {
    tj_tree *in[2], *out[2];
    tj_prog *p[2];
    int b, i, ok = 1;
    for (b = 0; b < 2; b++) {
        in[b] = make_inputs(c[b], sp, nsp);
        out[b] = tj_tree_new(c[b]);
        if (rules) tj_filter_shard(in[b], rules);
        p[b] = tj_jit(c[b], what, fn, user, in[b], NULL);
        if (!p[b] || tj_run(p[b], in[b], out[b]) != TJ_OK) {
            TJT_CHECK(0, "[%s] %s on %s: %s", what, p[b] ? "run" : "jit", b ? "cuda" : "cpu", tj_error(c[b]));
            ok = 0;
        }
    }
    if (ok) {
        TJT_CHECK(tj_tree_size(out[0]) == tj_tree_size(out[1]) && tj_tree_size(out[0]) > 0, "[%s] %d vs %d outputs", what, tj_tree_size(out[0]),
                  tj_tree_size(out[1]));
        for (i = 0; i < tj_tree_size(out[0]) && i < tj_tree_size(out[1]); i++) {
            tj_array *a = tj_tree_array_at(out[0], i), *g = tj_tree_array_at(out[1], i);
            int64_t n = a ? tj_array_numel(a) : 0, j, first = -1;
            tj_dtype dt = a ? tj_array_dtype(a) : TJ_F32;
            size_t es = tj_dtype_size(dt);
            char *va, *vg;
            if (!a || !g || tj_array_numel(g) != n || tj_array_dtype(g) != dt) {
                TJT_CHECK(0, "[%s] output '%s' differs in shape or dtype", what, tj_tree_name(out[0], i));
                continue;
            }
            va = (char *)calloc((size_t)n + 1, es);
            vg = (char *)calloc((size_t)n + 1, es);
            tj_array_read(a, dt, va);
            tj_array_read(g, dt, vg);
            for (j = 0; j < n && first < 0; j++)
                if (memcmp(va + (size_t)j * es, vg + (size_t)j * es, es)) first = j;
            TJT_CHECK(first < 0, "[%s] output '%s' (%s, %lld elements): element %lld differs (cpu %.9g, cuda %.9g)", what, tj_tree_name(out[0], i),
                      tj_dtype_name(dt), (long long)n, (long long)first, first >= 0 ? at_f64(va, dt, first) : 0.0, first >= 0 ? at_f64(vg, dt, first) : 0.0);
            free(va);
            free(vg);
        }
    }
    for (b = 0; b < 2; b++) {
        tj_prog_free(p[b]);
        tj_tree_free(in[b]);
        tj_tree_free(out[b]);
    }
}
static void test_collectives_sim(void) {
    static const tj_dtype dts[4] = {TJ_F32, TJ_BF16, TJ_F64, TJ_I32};
    static const struct {
        int ndev;
        const char *mesh, *spec, *shape;
        coll_case cc;
    } cases[4] = {
        {2, "model=2", "embed:model", "batch=4 embed=16", {"model", 2}},
        {4, "data=2 model=2", "batch:data embed:model", "batch=8 embed=16", {"model", 2}},
        {4, "data=2 model=2", "batch:data embed:model", "batch=8 embed=16", {"data model", 4}},
        {4, "data=2 model=2", "batch:data embed:model", "batch=8 embed=131072", {"data model", 4}}, /* long kernels: a missing wait shows */
    };
    int ci, d;
    for (ci = 0; ci < 4; ci++) {
        tj_ctx *c[2];
        mesh_ctxs(c, cases[ci].ndev, cases[ci].mesh);
        coll_spec = cases[ci].spec;
        for (d = 0; d < 4; d++) {
            spec sp = {"x", dts[d], cases[ci].shape, dts[d] == TJ_I32 ? -1000.0 : -2.0, dts[d] == TJ_I32 ? 1000.0 : 2.0};
            char what[128];
            snprintf(what, sizeof what, "collectives over %s, %d devices, %s", cases[ci].cc.axes, cases[ci].ndev, tj_dtype_name(dts[d]));
            compare_bits(what, c, f_coll, (void *)&cases[ci].cc, &sp, 1, NULL);
        }
        {
            tj_transport_stats st = tj_get_transport_stats(c[1]);
            TJT_CHECK(st.collectives >= 4 * (NCOLLOUT - 1) * cases[ci].ndev, "[collectives, %d devices] %lld collective calls on the backend under test (want >= %d)",
                      cases[ci].ndev, (long long)st.collectives, 4 * (NCOLLOUT - 1) * cases[ci].ndev);
        }
        tj_ctx_free(c[0]);
        tj_ctx_free(c[1]);
    }
}

/* ---- a sharded training step on 4 simulated devices of one GPU ----
   An MLP with its hidden axis (w1, b1, w2) sharded over 'model' and the
   batch over 'data' (mesh data=2 model=2): the sharding rules insert the
   psums and gathers, forward and backward. One SGD step (loss and updated
   weights) must equal the same program on one device, on the CPU and on
   the backend under test (sums in another order: f32 tolerance). */
static int TRAIN_PAD; /* the loss tj_cross_entropy_padded over 5 of the 6 classes (the second model block of 3 partly padding) */
static void f_train(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v w1 = tj_tree_v(in, "w1"), b1 = tj_tree_v(in, "b1"), w2 = tj_tree_v(in, "w2"), wrt[3] = {w1, b1, w2}, gr[3];
    tj_v h = tj_gelu(tj_add(tj_dot(tj_tree_v(in, "x"), w1, "in"), b1)), z = tj_dot(h, w2, "hid");
    tj_v loss = TRAIN_PAD ? tj_cross_entropy_padded(z, tj_tree_v(in, "lab"), "cls", "batch", 5) : tj_cross_entropy(z, tj_tree_v(in, "lab"), "cls", "batch");
    (void)g;
    (void)u;
    tj_grad(loss, 3, wrt, gr);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "w1", tj_sub(w1, tj_muls(gr[0], 0.5)));
    tj_tree_set_v(out, "b1", tj_sub(b1, tj_muls(gr[1], 0.5)));
    tj_tree_set_v(out, "w2", tj_sub(w2, tj_muls(gr[2], 0.5)));
}
static const spec s_train[] = {
    {"x", TJ_F32, "batch=8 in=6", -1, 1},       {"lab", TJ_I32, "batch=8", 0, 5},           {"w1", TJ_F32, "in=6 hid=16", -0.5, 0.5},
    {"b1", TJ_F32, "hid=16", -0.1, 0.1},        {"w2", TJ_F32, "hid=16 cls=6", -0.5, 0.5},
};
/* rules: "batch:data hid:model" (Megatron's MLP), or "batch:data
   cls:model" (the logits split over their classes: the vocab-parallel
   cross-entropy, cross_entropy_part and its gradient) */
static void test_sharded_train(const char *rules) {
    static const char *names[4] = {"loss", "w1", "b1", "w2"};
    double *v[3][4];
    int64_t n[4] = {0, 0, 0, 0};
    int k, j, i, ncoll = 0;
    memset(v, 0, sizeof v);
    for (k = 0; k < 3; k++) { /* 0: one CPU device; 1: one device and 2: four devices on the backend under test */
        tj_ctx *c = tj_ctx_new();
        tj_tree *in, *out;
        tj_prog *p;
        if (k && gbe) tj_set_backend(c, gbe);
        tj_set_devices(c, k == 2 ? 4 : 1);
        tj_set_mesh(c, k == 2 ? "data=2 model=2" : "data=1 model=1");
        in = make_inputs(c, s_train, (int)(sizeof s_train / sizeof *s_train));
        out = tj_tree_new(c);
        tj_filter_shard(in, rules);
        p = tj_jit(c, "sharded_train", f_train, NULL, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "[sharded train, %s] %s: %s", rules, k == 0 ? "1 cpu device" : k == 1 ? "1 device" : "4 devices", tj_error(c));
        if (p && k == 2) {
            tj_collective rows[64];
            ncoll = tj_prog_collectives(p, rows, 64);
        }
        for (j = 0; j < 4; j++) {
            tj_array *a = tj_tree_array(out, names[j]);
            if (!a) continue;
            n[j] = tj_array_numel(a);
            v[k][j] = (double *)calloc((size_t)n[j], sizeof(double));
            tj_array_read(a, TJ_F64, v[k][j]);
        }
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(c);
    }
    TJT_CHECK(ncoll >= 3, "[sharded train, %s] the 4-device program has %d collectives (the sharding should need collectives forward and backward)", rules, ncoll);
    for (k = 1; k < 3; k++)
        for (j = 0; j < 4; j++) {
            double worst = 0;
            int bad = !v[0][j] || !v[k][j];
            for (i = 0; !bad && i < n[j]; i++) {
                double d = fabs(v[0][j][i] - v[k][j][i]) / (1.0 + fabs(v[0][j][i]));
                if (!(d <= worst)) worst = d;
            }
            TJT_CHECK(!bad && worst <= 1e-5, "[sharded train, %s] '%s' on %s differs from one CPU device by %g (relative)", rules, names[j],
                      k == 1 ? "one device" : "4 devices", worst);
        }
    for (k = 0; k < 3; k++)
        for (j = 0; j < 4; j++) free(v[k][j]);
}

/* index checks are read once at the end of the run: with a good take
   before a bad one (and a bad label after), the error is the first bad
   check's, worded and placed as on the CPU; the next run is clean */
static void f_two_takes(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v w = tj_tree_v(in, "w"), a, b;
    (void)g;
    (void)u;
    a = tj_take(w, "vocab", tj_tree_v(in, "good"));
    b = tj_take(w, "vocab", tj_tree_v(in, "tok"));
    tj_tree_set_v(out, "y", tj_add(tj_sum(tj_mul(a, b), "t e"), tj_cross_entropy(b, tj_tree_v(in, "lab"), "e", "t"))); /* after the bad take */
}
static void test_bad_index_deferred(void) {
    tj_ctx *cs[2] = {cpu, gpu};
    char msg[2][1024];
    float y[2] = {0, 1};
    int b;
    for (b = 0; b < 2; b++) {
        int32_t good[4] = {4, 0, 3, 1}, tok[4] = {1, 2, 7, -1}, lab[4] = {0, 2, 1, 5}; /* e has 3 classes */
        tj_tree *in = tj_tree_new(cs[b]), *out = tj_tree_new(cs[b]);
        tj_prog *p;
        tj_tree_set_array(in, "w", tjt_af32(cs[b], "vocab=5 e=3", 7, -1, 1));
        tj_tree_set_array(in, "good", tj_array_new(cs[b], TJ_I32, "t=4", good));
        tj_tree_set_array(in, "tok", tj_array_new(cs[b], TJ_I32, "t=4", tok));
        tj_tree_set_array(in, "lab", tj_array_new(cs[b], TJ_I32, "t=4", lab));
        p = tj_jit(cs[b], "bad_index_deferred", f_two_takes, NULL, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) != TJ_OK, "[deferred index check] %s: the run should fail", b ? "cuda" : "cpu");
        snprintf(msg[b], sizeof msg[b], "%s", tj_error(cs[b]));
        TJT_CHECK(strstr(msg[b], "index 7 at position 2") != NULL, "[deferred index check] %s message: \"%s\"", b ? "cuda" : "cpu", msg[b]);
        tj_clear_error(cs[b]);
        tj_tree_free(out);
        out = tj_tree_new(cs[b]);
        tj_tree_set_array(in, "tok", tj_array_new(cs[b], TJ_I32, "t=4", good));
        lab[3] = 2;
        tj_tree_set_array(in, "lab", tj_array_new(cs[b], TJ_I32, "t=4", lab));
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "[deferred index check] %s: the next run with good indices: %s", b ? "cuda" : "cpu", tj_error(cs[b]));
        if (tj_tree_array(out, "y")) tj_array_read(tj_tree_array(out, "y"), TJ_F32, &y[b]);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
    }
    TJT_CHECK(strcmp(msg[0], msg[1]) == 0, "[deferred index check] messages differ:\n  cpu:  %s\n  cuda: %s", msg[0], msg[1]);
    TJT_CHECK(fabs((double)y[0] - (double)y[1]) <= 1e-5 * (1 + fabs((double)y[0])), "[deferred index check] rerun: cuda %.9g vs cpu %.9g", y[1], y[0]);
}
/* index checks in a scan body run more often than the device's check
   table has slots (TJC_NCHECK, 4096, in tinyjax_cuda.cu): the table fills,
   the host reads and resets it during the run, and the first bad index is
   still the one reported, worded as on the CPU, whether it came before the
   table filled (iteration 100) or after (4500); then a clean run. Written
   without a GPU: checked here CPU against CPU only (TJ_CUDA_TEST_CPU=1). */
#define SCAN_CHECKS 5000
static void scan_take_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    (void)g;
    (void)y;
    carry_out[0] = tj_add(carry[0], tj_sum(tj_take(*(const tj_v *)u, "vocab", x[0]), "t"));
}
static void f_scan_takes(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v w = tj_tree_v(in, "w"), c = tj_tree_v(in, "c"), xs = tj_tree_v(in, "idx"), fin = NULL;
    (void)g;
    (void)u;
    if (tj_scan(scan_take_body, &w, "layer", 1, &c, 1, &xs, 0, &fin, NULL, NULL) == TJ_OK) tj_tree_set_v(out, "y", fin);
}
static void test_scan_index_checks(void) {
    static int32_t idx[SCAN_CHECKS * 2];
    static const int bad_at[2] = {100, 4500};
    tj_ctx *cs[2] = {cpu, gpu};
    char msg[2][2][1024];
    float y[2][3];
    int b, v, l;
    char shape[64];
    snprintf(shape, sizeof shape, "layer=%d t=2", SCAN_CHECKS);
    memset(y, 0, sizeof y);
    for (b = 0; b < 2; b++) {
        tj_tree *in = tj_tree_new(cs[b]), *out;
        tj_prog *p;
        tj_tree_set_array(in, "w", tjt_af32(cs[b], "vocab=5 e=3", 21, -1, 1));
        tj_tree_set_array(in, "c", tj_zeros(cs[b], TJ_F32, "e=3"));
        for (l = 0; l < 2 * SCAN_CHECKS; l++) idx[l] = (l / 2 + l % 2) % 5;
        tj_tree_set_array(in, "idx", tj_array_new(cs[b], TJ_I32, shape, idx));
        p = tj_jit(cs[b], "scan_index_checks", f_scan_takes, NULL, in, NULL);
        TJT_CHECK(p != NULL, "[scan index checks] %s: jit: %s", b ? "cuda" : "cpu", tj_error(cs[b]));
        for (v = 0; p && v < 3; v++) { /* bad at iteration 100, at 4500, then none */
            for (l = 0; l < 2 * SCAN_CHECKS; l++) idx[l] = (l / 2 + l % 2) % 5;
            if (v < 2) idx[2 * bad_at[v] + 1] = 9;
            tj_tree_set_array(in, "idx", tj_array_new(cs[b], TJ_I32, shape, idx));
            out = tj_tree_new(cs[b]);
            if (v < 2) {
                TJT_CHECK(tj_run(p, in, out) != TJ_OK, "[scan index checks] %s: the run with a bad index at iteration %d should fail", b ? "cuda" : "cpu",
                          bad_at[v]);
                snprintf(msg[b][v], sizeof msg[b][v], "%s", tj_error(cs[b]));
                TJT_CHECK(strstr(msg[b][v], "index 9 at position 1 is out of range [0, 5)") != NULL, "[scan index checks] %s, bad at %d: \"%s\"",
                          b ? "cuda" : "cpu", bad_at[v], msg[b][v]);
                tj_clear_error(cs[b]);
            } else {
                TJT_CHECK(tj_run(p, in, out) == TJ_OK, "[scan index checks] %s: the clean run after two failed ones: %s", b ? "cuda" : "cpu", tj_error(cs[b]));
                if (tj_tree_array(out, "y")) tj_array_read(tj_tree_array(out, "y"), TJ_F32, y[b]);
            }
            tj_tree_free(out);
        }
        tj_prog_free(p);
        tj_tree_free(in);
    }
    for (v = 0; v < 2; v++)
        TJT_CHECK(strcmp(msg[0][v], msg[1][v]) == 0, "[scan index checks] bad at %d: messages differ:\n  cpu:  %s\n  cuda: %s", bad_at[v], msg[0][v],
                  msg[1][v]);
    for (l = 0; l < 3; l++)
        TJT_CHECK(fabs((double)y[0][l] - (double)y[1][l]) <= 1e-5 * (1 + fabs((double)y[0][l])) && y[0][l] != 0,
                  "[scan index checks] clean run, element %d: cuda %.9g vs cpu %.9g", l, y[1][l], y[0][l]);
}
/* the runner's copy stream and device time stamps on the GPU (on devsim
   with TJ_CUDA_TEST_CPU, which checks the test): offload_scan's policies
   against the CPU with the bytes of the memory plan, and a trace with
   both streams in order. On a GPU twice: as it runs, and on a second
   backend whose copies start ASYNC_DELAY_US late (TJ_CUDA_COPY_DELAY_US,
   the devsim delay's twin), so a wait the runner forgot gives other
   numbers, and each copy's device time must show the delay (written
   without a GPU: the delayed pass has not yet run on one). */
#define ASYNC_DELAY_US 300
static void test_async(tj_backend *be) {
    tj_backend *ab = be ? be : tj_devsim_backend(), *slow = NULL;
    char why[512], us[32];
    if (!ab) {
        TJT_CHECK(0, "[async] no backend");
        return;
    }
    tjt_current = "async copies";
    tjt_offload_policies(ab, be ? 1e-4 : 0);
    tjt_current = "device time stamps";
    tjt_trace_streams(ab, 0);
    tjt_current = "";
    if (!be) {
        tj_devsim_backend_free(ab);
        return;
    }
    snprintf(us, sizeof us, "%d", ASYNC_DELAY_US);
    setenv("TJ_CUDA_COPY_DELAY_US", us, 1);
    slow = tj_cuda_backend(0, why, sizeof why);
    unsetenv("TJ_CUDA_COPY_DELAY_US");
    TJT_CHECK(slow != NULL, "[async] a second CUDA backend: %s", why);
    if (!slow) return;
    tjt_current = "async copies, each 300 us late";
    tjt_offload_policies(slow, 1e-4);
    tjt_current = "device time stamps, copies 300 us late";
    tjt_trace_streams(slow, 0.9 * ASYNC_DELAY_US);
    tjt_current = "";
    tj_cuda_backend_free(slow);
}
/* a bad index before a collective on 2 simulated devices: the run fails
   with the CPU's message; the failed devices still meet in the collective
   (they run dry), so nobody waits for the transport's timeout */
static void f_take_sum(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g;
    (void)u;
    tj_tree_set_v(out, "y", tj_sum(tj_take(tj_tree_v(in, "w"), "vocab", tj_tree_v(in, "tok")), "e"));
}
static void test_collective_after_error(void) {
    tj_ctx *c[2];
    char msg[2][1024];
    int b;
    mesh_ctxs(c, 2, "model=2");
    for (b = 0; b < 2; b++) {
        int32_t tok[4] = {1, 2, 9, 0};
        tj_tree *in = tj_tree_new(c[b]), *out = tj_tree_new(c[b]);
        tj_prog *p;
        tj_tree_set_array(in, "w", tj_ones(c[b], TJ_F32, "vocab=5 e=4"));
        tj_tree_set_array(in, "tok", tj_array_new(c[b], TJ_I32, "t=4", tok));
        tj_filter_shard(in, "e:model"); /* the sum over e is a psum over model */
        p = tj_jit(c[b], "bad_index_then_psum", f_take_sum, NULL, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) != TJ_OK, "[collective after an error] %s: the run should fail", b ? "cuda" : "cpu");
        snprintf(msg[b], sizeof msg[b], "%s", tj_error(c[b]));
        TJT_CHECK(strstr(msg[b], "out of range") != NULL, "[collective after an error] %s message: \"%s\"", b ? "cuda" : "cpu", msg[b]);
        if (p) {
            tj_collective rows[8];
            TJT_CHECK(tj_prog_collectives(p, rows, 8) >= 1, "[collective after an error] the program has no collective");
        }
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
    }
    TJT_CHECK(strcmp(msg[0], msg[1]) == 0, "[collective after an error] messages differ:\n  cpu:  %s\n  cuda: %s", msg[0], msg[1]);
    tj_ctx_free(c[0]);
    tj_ctx_free(c[1]);
}

/* ---- the GPT-2 training step (demos/gpt2_model.h) on both backends ----
   A small GPT-2 (2 layers, 32 channels, vocabulary 250 padded to 256) takes
   G2_STEPS AdamW steps from the same init on the CPU and on the GPU: each
   step's loss and gradient norm, and the final parameters, agree within
   the compute dtype's tolerance. Variants: f32, bf16 compute, the offload
   remat policy (block outputs to host memory and back), and gradient
   accumulation over 2 micro-batches (a scan over them). */
#include "../demos/gpt2_model.h"
#define G2_STEPS 3
typedef struct {
    float loss[G2_STEPS], gnorm[G2_STEPS];
    double *params; /* every parameter after the last step, in gpt2_params order */
    int64_t n;
} g2_result;
/* deterministic token ids in [0, V_real): (micro,) batch, pos */
static tj_array *g2_tokens(tj_ctx *c, const gpt2_config *cfg, int step, int salt) {
    int64_t n = (int64_t)cfg->accum * cfg->B * cfg->T, i;
    int32_t *t = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    char shape[96];
    tj_array *a;
    for (i = 0; i < n; i++) t[i] = (int32_t)((i * 7919 + step * 104729 + salt * 31 + (i * i) % 13) % cfg->V_real);
    if (cfg->accum > 1) snprintf(shape, sizeof shape, "micro=%d batch=%d pos=%d", cfg->accum, cfg->B, cfg->T);
    else snprintf(shape, sizeof shape, "batch=%d pos=%d", cfg->B, cfg->T);
    a = tj_array_new(c, TJ_I32, shape, t);
    free(t);
    return a;
}
static void g2_inputs(tj_ctx *c, tj_tree *st, const gpt2_config *cfg, int step) {
    float lr = 1e-3f, t = (float)(step + 1);
    tj_tree_set_array(st, "tokens", g2_tokens(c, cfg, step, 0));
    tj_tree_set_array(st, "targets", g2_tokens(c, cfg, step, 1));
    tj_tree_set_array(st, "lr", tj_array_new(c, TJ_F32, "", &lr));
    tj_tree_set_array(st, "t", tj_array_new(c, TJ_F32, "", &t));
}
/* init and G2_STEPS steps in c; 0, or 1 after a failed check */
static int g2_train(tj_ctx *c, const char *where, const gpt2_config *cfg, const char *what, g2_result *r) {
    tj_tree *empty = tj_tree_new(c), *state = tj_tree_new(c);
    tj_prog *init = tj_jit(c, "g2_init", gpt2_init_fn, (void *)cfg, empty, NULL), *step = NULL;
    tj_jit_opts donate;
    int s, i, bad = 0;
    memset(r, 0, sizeof *r);
    if (!init || tj_run(init, empty, state)) bad = 1;
    if (!bad) {
        g2_inputs(c, state, cfg, 0);
        memset(&donate, 0, sizeof donate);
        donate.donate = "params. m. v.";
        if (!(step = tj_jit(c, "g2_step", gpt2_step_fn, (void *)cfg, state, &donate))) bad = 1;
    }
    for (s = 0; !bad && s < G2_STEPS; s++) {
        tj_tree *out = tj_tree_new(c);
        g2_inputs(c, state, cfg, s);
        if (tj_run(step, state, out) || tj_array_read(tj_tree_array(out, "loss"), TJ_F32, &r->loss[s]) ||
            tj_array_read(tj_tree_array(out, "gnorm"), TJ_F32, &r->gnorm[s]))
            bad = 1;
        for (i = tj_tree_size(out) - 1; !bad && i >= 0; i--) { /* the new params, m, v replace the donated ones */
            char n[128];
            snprintf(n, sizeof n, "%s", tj_tree_name(out, i));
            if (!strncmp(n, "params.", 7) || !strncmp(n, "m.", 2) || !strncmp(n, "v.", 2)) tj_tree_set_array(state, n, tj_tree_take(out, n));
        }
        tj_tree_free(out);
    }
    for (i = 0; !bad && i < NPARAMS; i++) r->n += param_numel(cfg, i);
    if (!bad) r->params = (double *)malloc(sizeof(double) * (size_t)r->n);
    for (i = 0, r->n = 0; !bad && i < NPARAMS; i++) {
        char n[128];
        snprintf(n, sizeof n, "params.%s", gpt2_params[i].name);
        if (tj_array_read(tj_tree_array(state, n), TJ_F64, r->params + r->n)) bad = 1;
        r->n += param_numel(cfg, i);
    }
    TJT_CHECK(!bad, "[gpt2 %s] on %s: %s", what, where, tj_error(c));
    tj_prog_free(init);
    tj_prog_free(step);
    tj_tree_free(empty);
    tj_tree_free(state);
    return bad;
}
static void test_gpt2_step(const char *what, int bf16, int remat, int accum) {
    gpt2_config cfg;
    g2_result r[2];
    tj_ctx *cs[2];
    double tol = bf16 ? 2e-2 : 1e-4;
    int b, s, ok = 1;
    gpt2_default_config(&cfg);
    cfg.L = 2; cfg.C = 32; cfg.H = 2; cfg.M = 128; cfg.T = cfg.block = 16; cfg.B = 4;
    cfg.V = 256; cfg.V_real = 250;
    cfg.bf16 = bf16; cfg.remat = remat; cfg.accum = accum;
    for (b = 0; b < 2; b++) {
        cs[b] = tj_ctx_new();
        if (b && gbe) tj_set_backend(cs[b], gbe);
        ok &= !g2_train(cs[b], b ? "cuda" : "cpu", &cfg, what, &r[b]);
    }
    if (ok) {
        int64_t j, worst = -1;
        double excess = 0;
        for (s = 0; s < G2_STEPS; s++) {
            TJT_CHECK(fabs(r[0].loss[s] - r[1].loss[s]) <= tol * (1 + fabs(r[0].loss[s])), "[gpt2 %s] step %d loss %.7g on cpu, %.7g on cuda", what, s + 1,
                      r[0].loss[s], r[1].loss[s]);
            TJT_CHECK(fabs(r[0].gnorm[s] - r[1].gnorm[s]) <= tol * (1 + fabs(r[0].gnorm[s])), "[gpt2 %s] step %d gradient norm %.7g on cpu, %.7g on cuda",
                      what, s + 1, r[0].gnorm[s], r[1].gnorm[s]);
        }
        for (j = 0; j < r[0].n; j++) {
            double d = fabs(r[0].params[j] - r[1].params[j]), lim = tol * (1 + fabs(r[0].params[j]));
            if (!(d <= lim) && d - lim >= excess) {
                excess = d - lim;
                worst = j;
            }
        }
        TJT_CHECK(worst < 0, "[gpt2 %s] parameter element %lld is %.9g on cpu, %.9g on cuda after %d steps (tol %g)", what, (long long)worst,
                  worst >= 0 ? r[0].params[worst] : 0.0, worst >= 0 ? r[1].params[worst] : 0.0, G2_STEPS, tol);
    }
    for (b = 0; b < 2; b++) {
        free(r[b].params);
        tj_ctx_free(cs[b]);
    }
}

/* long reductions into few outputs (tinyjax_cuda.cu's two-stage reduce:
   a gradient's sum of squares for the global norm is one output of
   millions of elements): contiguous and strided reduced axes, sum and max,
   f32 and bf16 */
static void f_reduce_long(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), y = tj_tree_v(in, "y"), xb = tj_tree_v(in, "xb");
    (void)g;
    (void)u;
    tj_tree_set_v(out, "sum_all", tj_sum_all(tj_mul(x, x)));
    tj_tree_set_v(out, "max_all", tj_max(x, "p q"));
    tj_tree_set_v(out, "sum_rows", tj_sum(y, "r"));      /* three outputs, contiguous rows */
    tj_tree_set_v(out, "sum_strided", tj_sum(x, "p"));   /* 300 outputs: one block each */
    tj_tree_set_v(out, "sum_first", tj_sum(tj_transpose(y, "r a"), "r")); /* strided reduced axis */
    tj_tree_set_v(out, "sum_bf16", tj_sum_all(xb));
    /* outer axes reduced, inner kept (tjc_k_reduce_cols): one stage, and partials folded after */
    tj_tree_set_v(out, "sum_cols_bf16", tj_sum(xb, "p"));
    tj_tree_set_v(out, "min_cols", tj_min(x, "p"));
    tj_tree_set_v(out, "sum_cols_f64", tj_sum(tj_tree_v(in, "z"), "p"));
    tj_tree_set_v(out, "sum_cols_i32", tj_sum(tj_tree_v(in, "n"), "p"));
}
static const spec s_reduce_long[] = {
    {"x", TJ_F32, "p=200 q=300", -1, 1}, {"y", TJ_F32, "a=3 r=40000", -1, 1}, {"xb", TJ_BF16, "p=256 q=257", 0, 1},
    {"z", TJ_F64, "p=5000 q=7", -1, 1},  {"n", TJ_I32, "p=70 q=33", -1000, 1000},
};

/* ---- fused groups: one kernel per group, the CPU's bits ----
   Outputs are compared bit for bit in their own dtype, except those named
   "tol_*" (a reduction's order, libm calls in double: relative 1e-5 in f32,
   1e-12 in f64). The run is profiled: both sides must have run fused groups
   ("fused xN" events), so the comparison is of the fused paths. ref is the
   CPU backend; test the GPU, or the fused-group emulator (the CUDA path's
   program builder and per-element code on the host) where no GPU exists. */
static void f_fused(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), y = tj_tree_v(in, "y"), xb = tj_tree_v(in, "xb"), yb = tj_tree_v(in, "yb");
    tj_v xd = tj_tree_v(in, "xd"), yd = tj_tree_v(in, "yd"), row = tj_tree_v(in, "row"), bias = tj_tree_v(in, "bias");
    tj_v mid, h;
    (void)u;
    /* f32: every unary formula the CPU evaluates exactly, scalars broadcast into the group, a stored middle member */
    mid = tj_add(tj_mul(x, y), tj_scalar(g, TJ_F32, 0.5));
    tj_tree_set_v(out, "f32_mid", mid);
    h = tj_sub(tj_mul(tj_gelu(mid), tj_tanh(x)), tj_div(tj_exp(tj_neg(tj_mul(x, x))), tj_adds(tj_relu(y), 1.0)));
    h = tj_add(h, tj_mul(tj_sqrt(tj_adds(tj_mul(y, y), 1.0)), tj_rsqrt(tj_adds(tj_mul(x, x), 2.0))));
    h = tj_add(h, tj_select(tj_gt(x, y), tj_max2(x, mid), tj_muls(tj_min2(y, mid), 2.0)));
    tj_tree_set_v(out, "f32", tj_add(h, tj_cast(tj_cast(y, TJ_BF16), TJ_F32)));
    { /* gelu's derivative (gelu_grad) times a broadcast cotangent */
        tj_v gx = NULL;
        tj_grad(tj_sum(tj_gelu(x), "n"), 1, &x, &gx);
        tj_tree_set_v(out, "f32_gelu_grad", gx);
    }
    /* bf16: each member rounded to bf16 */
    tj_tree_set_v(out, "bf16", tj_sub(tj_gelu(tj_add(tj_mul(xb, yb), tj_scalar(g, TJ_BF16, 1.0))), tj_mul(tj_exp(xb), tj_tanh(yb))));
    /* f64: the exact ops */
    tj_tree_set_v(out, "f64", tj_add(tj_div(tj_sqrt(tj_add(tj_mul(xd, xd), tj_mul(yd, yd))), tj_adds(tj_relu(xd), 1.0)),
                                     tj_sub(tj_max2(xd, yd), tj_select(tj_lt(xd, yd), tj_min2(xd, tj_neg(yd)), tj_muls(yd, 3.0)))));
    /* casts and compares: a cast to i32 saturates as tj__st does (the add after it wraps) */
    tj_tree_set_v(out, "i32", tj_add(tj_cast(tj_muls(x, 3e9), TJ_I32), tj_cast(tj_lt(x, y), TJ_I32)));
    { /* i32 arithmetic wraps (XLA's s32; tjc_i32_op), x / 0 = -1; a max and a min of +-0 ties give +0 and -0 */
        tj_v ix = tj_cast(tj_muls(x, 1e9), TJ_I32), iy = tj_cast(tj_muls(y, 1e9), TJ_I32), m = tj_cast(tj_lt(x, y), TJ_I32);
        tj_tree_set_v(out, "i32_wrap", tj_add(tj_div(tj_sub(tj_mul(ix, iy), tj_neg(ix)), m), tj_mul(ix, ix)));
        tj_tree_set_v(out, "zero_ties", tj_add(tj_max2(tj_muls(x, 0.0), tj_neg(tj_muls(y, 0.0))), tj_min2(tj_muls(y, 0.0), tj_muls(x, 0.0))));
    }
    tj_tree_set_v(out, "mixed", tj_add(tj_cast(tj_muls(xd, 7.0), TJ_F32), tj_cast(tj_cast(tj_mul(x, y), TJ_BF16), TJ_F32)));
    /* broadcast leaves (tj_backend.fused_groups 2): a bias along c, a mean
       along r (two reads, one offset), a transposed operand (c, r); in
       bf16 and f64; a chain of 7 broadcast reads, which tj__fuse splits
       (at most TJ_FUSED_BCAST per group) */
    tj_tree_set_v(out, "bcast", tj_muls(tj_gelu(tj_add(row, bias)), 2.0));
    {
        tj_v rowm = tj_tree_v(in, "rowm"), rowt = tj_tree_v(in, "rowt"), rowb = tj_tree_v(in, "rowb"), biasb = tj_tree_v(in, "biasb");
        tj_v rowd = tj_tree_v(in, "rowd"), rowmd = tj_tree_v(in, "rowmd"), c;
        tj_tree_set_v(out, "bcast_rows", tj_add(tj_mul(tj_sub(tj_mul(row, bias), rowm), rowt), tj_tanh(tj_mul(row, rowm))));
        tj_tree_set_v(out, "bcast_bf16", tj_sub(tj_mul(rowb, biasb), tj_gelu(tj_add(rowb, biasb))));
        tj_tree_set_v(out, "bcast_f64", tj_div(tj_sub(rowd, rowmd), tj_adds(tj_mul(rowmd, rowmd), 1.0)));
        c = tj_sub(tj_mul(tj_add(row, bias), rowm), rowt);
        c = tj_sub(tj_add(tj_mul(c, bias), rowm), rowt);
        tj_tree_set_v(out, "bcast_many", tj_mul(c, bias));
    }
    { /* AdamW's shape: moments and the param updated, all three stored,
         in one group of 14 members that needs 4 register slots
         (tjc_fused_small); and 6 stored members summed, which needs more
         than 4 (tjc_fused_at) */
        tj_v am = tj_tree_v(in, "am"), av = tj_tree_v(in, "av"), m1, v1, w;
        m1 = tj_add(tj_muls(am, 0.9), tj_muls(y, 0.1));
        v1 = tj_add(tj_muls(av, 0.95), tj_muls(tj_mul(y, y), 0.05));
        tj_tree_set_v(out, "adam_m", m1);
        tj_tree_set_v(out, "adam_v", v1);
        tj_tree_set_v(out, "adam_p", tj_sub(x, tj_muls(tj_add(tj_div(m1, tj_adds(tj_sqrt(v1), 1e-8)), tj_muls(x, 0.1)), 3e-3)));
        w = NULL;
        for (int k = 0; k < 6; k++) {
            char name[16];
            tj_v t = tj_muls(tj_add(x, am), 1.0 + k);
            snprintf(name, sizeof name, "wide_%d", k);
            tj_tree_set_v(out, name, t);
            w = w ? tj_add(w, t) : t;
        }
        tj_tree_set_v(out, "wide", w);
    }
    /* a group feeding a reduction (its last member is stored for the sum) */
    tj_tree_set_v(out, "tol_sum", tj_sum(tj_gelu(tj_adds(tj_mul(x, y), 1.0)), "n"));
    /* libm in double: CUDA's may differ in the last bit */
    tj_tree_set_v(out, "tol_f64_libm", tj_add(tj_mul(tj_exp(xd), tj_tanh(yd)), tj_log(tj_adds(tj_mul(xd, xd), 1.0))));
    tj_tree_set_v(out, "tol_f32_libm", tj_add(tj_log(tj_adds(tj_mul(x, x), 1.0)), tj_pows(tj_adds(tj_mul(y, y), 0.5), 1.5)));
}
static double elem(const void *p, tj_dtype dt, int64_t j) {
    switch (dt) {
    case TJ_F32: return ((const float *)p)[j];
    case TJ_BF16: return tj_bf16_to_f32(((const uint16_t *)p)[j]);
    case TJ_I32: return ((const int32_t *)p)[j];
    default: return ((const double *)p)[j];
    }
}
/* the fused groups a profiled run ran, and (*most) the most members in one */
static int fused_events(const tj_prog *p, int *most) {
    tj_event ev[4096];
    int n = tj_prog_events(p, ev, 4096), i, k = 0, m;
    *most = 0;
    for (i = 0; i < n && i < 4096; i++)
        if (!strncmp(ev[i].op, "fused", 5)) {
            k++;
            if (sscanf(ev[i].op, "fused x%d", &m) == 1 && m > *most) *most = m;
            if (getenv("FEV")) printf("EV %s\n", ev[i].op);
        }
    return k;
}
static void fused_case(tj_ctx *ref, tj_ctx *test, const char *label, int64_t n) {
    char sx[64], sr[64], sm[64], st[64];
    tj_ctx *cs[2] = {ref, test};
    tj_tree *in[2], *out[2];
    tj_prog *p[2];
    int b, i, ok = 1;
    snprintf(sx, sizeof sx, "n=%lld", (long long)n);
    snprintf(sr, sizeof sr, "r=%lld c=3", (long long)(n + 2) / 3);
    snprintf(sm, sizeof sm, "r=%lld", (long long)(n + 2) / 3);
    snprintf(st, sizeof st, "c=3 r=%lld", (long long)(n + 2) / 3);
    const spec sp[] = {
        {"x", TJ_F32, sx, -2, 2},   {"y", TJ_F32, sx, -2, 2},   {"xb", TJ_BF16, sx, -2, 2}, {"yb", TJ_BF16, sx, -2, 2},
        {"xd", TJ_F64, sx, -2, 2},  {"yd", TJ_F64, sx, -2, 2},  {"row", TJ_F32, sr, -2, 2}, {"bias", TJ_F32, "c=3", -1, 1},
        {"rowm", TJ_F32, sm, -1, 1}, {"rowt", TJ_F32, st, -1, 1}, {"rowb", TJ_BF16, sr, -2, 2}, {"biasb", TJ_BF16, "c=3", -1, 1},
        {"rowd", TJ_F64, sr, -2, 2}, {"rowmd", TJ_F64, sm, -1, 1}, {"am", TJ_F32, sx, -1, 1}, {"av", TJ_F32, sx, 0, 1},
    };
    for (b = 0; b < 2; b++) {
        tj_set_profile(cs[b], 1);
        in[b] = make_inputs(cs[b], sp, (int)(sizeof sp / sizeof *sp));
        out[b] = tj_tree_new(cs[b]);
        p[b] = tj_jit(cs[b], "fused", f_fused, NULL, in[b], NULL);
        if (!p[b] || tj_run(p[b], in[b], out[b]) != TJ_OK) {
            TJT_CHECK(0, "[fused %s n=%lld] %s: %s", label, (long long)n, b ? label : "cpu", tj_error(cs[b]));
            ok = 0;
        } else {
            int most, nf = fused_events(p[b], &most);
            TJT_CHECK(nf >= 5 && most >= 14, "[fused %s n=%lld] %s ran %d fused groups of at most %d members (want at least 5, one of 14 or more)", label,
                      (long long)n, b ? label : "cpu", nf, most);
        }
        tj_set_profile(cs[b], 0);
    }
    for (i = 0; ok && i < tj_tree_size(out[0]); i++) {
        const char *name = tj_tree_name(out[0], i);
        tj_array *a = tj_tree_array_at(out[0], i), *t = tj_tree_array(out[1], name);
        tj_dtype dt;
        int64_t m, j, bad = -1;
        size_t es;
        unsigned char *va, *vt;
        if (!a || !t) {
            TJT_CHECK(0, "[fused %s n=%lld] output '%s' missing", label, (long long)n, name);
            continue;
        }
        dt = tj_array_dtype(a);
        m = tj_array_numel(a);
        es = tj_dtype_size(dt);
        va = (unsigned char *)malloc(es * (size_t)m + 8);
        vt = (unsigned char *)malloc(es * (size_t)m + 8);
        tj_array_read(a, dt, va);
        tj_array_read(t, dt, vt);
        if (!strncmp(name, "tol_", 4)) {
            double tol = dt == TJ_F64 ? 1e-12 : 1e-5;
            for (j = 0; j < m && bad < 0; j++) {
                double da = dt == TJ_F64 ? ((double *)va)[j] : ((float *)va)[j], dtv = dt == TJ_F64 ? ((double *)vt)[j] : ((float *)vt)[j];
                if (!(fabs(da - dtv) <= tol * (1.0 + fabs(da)))) bad = j;
            }
        } else
            for (j = 0; j < m && bad < 0; j++)
                if (memcmp(va + (size_t)j * es, vt + (size_t)j * es, es)) bad = j;
        TJT_CHECK(bad < 0, "[fused %s n=%lld] output '%s' (%s) differs from the CPU first at element %lld: cpu %.17g, %s %.17g", label, (long long)n, name,
                  tj_dtype_name(dt), (long long)bad, bad >= 0 ? elem(va, dt, bad) : 0.0, label, bad >= 0 ? elem(vt, dt, bad) : 0.0);
        free(va);
        free(vt);
    }
    for (b = 0; b < 2; b++) {
        tj_prog_free(p[b]);
        tj_tree_free(in[b]);
        tj_tree_free(out[b]);
        tj_clear_error(cs[b]);
    }
}
static void test_fused(tj_ctx *ref, tj_ctx *test, const char *label) {
    static const int64_t sizes[] = {1, 31, 257, (1 << 20) + 3};
    tjt_current = "fused groups";
    for (int i = 0; i < 4; i++) fused_case(ref, test, label, sizes[i]);
}

/* The per-device table of fused-group programs (tjc_fprog_dev in
   tinyjax_cuda.cu), which the emulator does not use: FTAB_N groups that
   differ only in pows' constant are FTAB_N programs, so the table grows
   (64 slots, rehashed at 32, 64, 128 programs) and takes a second slab of
   device memory (256 programs a slab); a second run finds every program in
   it. Against the CPU within 1e-6 (pow is CUDA's in double), the two GPU
   runs bit for bit, and every group ran as one. Written without a GPU:
   checked here CPU against CPU only (TJ_CUDA_TEST_CPU=1). */
#define FTAB_N 300
static void f_fused_table(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x");
    char nm[16];
    (void)g;
    (void)u;
    for (int i = 0; i < FTAB_N; i++) {
        snprintf(nm, sizeof nm, "p%03d", i);
        tj_tree_set_v(out, nm, tj_exp(tj_neg(tj_pows(tj_adds(tj_mul(x, x), 1.0), 1.0 + i / 128.0))));
    }
}
static void test_fused_table(void) {
    static const spec sp[] = {{"x", TJ_F32, "n=1000", -1, 1}};
    tj_ctx *cs[2] = {cpu, gpu};
    tj_tree *in[2], *out[3];
    tj_prog *p[2];
    int b, i, r;
    tjt_current = "fused-program table";
    for (b = 0; b < 2; b++) {
        tj_set_profile(cs[b], 1);
        in[b] = make_inputs(cs[b], sp, 1);
        p[b] = tj_jit(cs[b], "fused_table", f_fused_table, NULL, in[b], NULL);
        for (r = 0; r < 1 + b; r++) { /* the GPU twice */
            out[b + r] = tj_tree_new(cs[b]);
            TJT_CHECK(p[b] && tj_run(p[b], in[b], out[b + r]) == TJ_OK, "%s run %d: %s", b ? "cuda" : "cpu", r, tj_error(cs[b]));
        }
        {
            int most, nf = p[b] ? fused_events(p[b], &most) : 0;
            TJT_CHECK(nf >= FTAB_N, "%s ran %d fused groups (want %d)", b ? "cuda" : "cpu", nf, FTAB_N);
        }
        tj_set_profile(cs[b], 0);
    }
    for (i = 0; i < FTAB_N; i++) {
        char nm[16];
        float v[3][1000];
        int64_t j, bad = -1;
        snprintf(nm, sizeof nm, "p%03d", i);
        for (r = 0; r < 3; r++) {
            memset(v[r], 0, sizeof v[r]);
            if (tj_tree_array(out[r], nm)) tj_array_read(tj_tree_array(out[r], nm), TJ_F32, v[r]);
        }
        for (j = 0; j < 1000 && bad < 0; j++)
            if (!(fabs((double)v[0][j] - (double)v[1][j]) <= 1e-6 * (1 + fabs((double)v[0][j])) && v[0][j] > 0)) bad = j;
        TJT_CHECK(bad < 0, "output %s element %lld: cpu %.9g, cuda %.9g", nm, (long long)bad, bad < 0 ? 0.0 : v[0][bad], bad < 0 ? 0.0 : v[1][bad]);
        TJT_CHECK(!memcmp(v[1], v[2], sizeof v[1]), "output %s: the second GPU run (table hits) gave other bits than the first", nm);
    }
    for (b = 0; b < 2; b++) {
        tj_prog_free(p[b]);
        tj_tree_free(in[b]);
        tj_clear_error(cs[b]);
    }
    for (r = 0; r < 3; r++) tj_tree_free(out[r]);
    tjt_current = "";
}

/* every op of the op table has a CUDA path (or a listed gap): no GPU needed */
static int coverage(void) {
    static char list[16384];
    int gaps = 0, missing = tj_cuda_op_coverage(list, sizeof list, &gaps);
    char *line = list, *nl;
    printf("cuda coverage: %d ops with no CUDA path, %d known gaps\n", missing, gaps);
    for (; *line; line = nl + 1) { /* print the gaps and the missing ones */
        if (!(nl = strchr(line, '\n'))) break;
        *nl = 0;
        if (!strstr(line, ": kernel") && !strstr(line, ": runner") && !strstr(line, ": view")) printf("  %s\n", line);
    }
    TJT_CHECK(missing == 0, "%d op%s of the op table %s no entry in tinyjax_cuda.cu's tjc_path (listed above as NO CUDA PATH)", missing,
          missing == 1 ? "" : "s", missing == 1 ? "has" : "have");
    TJT_CHECK(gaps == 0, "%d op%s of the op table %s no CUDA path yet (listed above with the reason)", gaps, gaps == 1 ? "" : "s", gaps == 1 ? "has" : "have");
    return tjt_finish();
}

int main(int argc, char **argv) {
    char why[512];
    if (argc > 1 && !strcmp(argv[1], "--coverage")) return coverage();
    if (argc > 1 && !strcmp(argv[1], "--bench-attention")) return bench_attention();
    const char *self = getenv("TJ_CUDA_TEST_CPU");
    int selfcheck = self && *self && strcmp(self, "0") != 0;
    tj_backend *be = selfcheck ? NULL : tj_cuda_backend(0, why, sizeof why);
    { /* the fused-group path on the host (no GPU needed) */
        tj_backend *emu = tj_cuda_fused_emulator();
        tj_ctx *c0 = tj_ctx_new(), *c1 = tj_ctx_new();
        tj_set_backend(c0, NULL); /* the CPU backend, even under TJ_BACKEND=devsim */
        tj_set_backend(c1, emu);
        test_fused(c0, c1, "emulator");
        setenv("TJ_CUDA_FUSED_SMALL", "0", 1); /* small groups one element at a time too */
        test_fused(c0, c1, "emulator, TJ_CUDA_FUSED_SMALL=0");
        unsetenv("TJ_CUDA_FUSED_SMALL");
        tj_ctx_free(c0);
        tj_ctx_free(c1);
        tj_cuda_fused_emulator_free(emu);
    }
    test_scatter_csr_host(); /* the device's scatter_add index logic, on the host */
    test_transpose_host();   /* the tiled relayout's index steps, on the host */
    test_ix_host();          /* the kernels' element offsets without division, on the host */
    test_fslots_host();      /* fused groups' register slots, on the host */
    test_ew_threads_host();  /* the elementwise kernel's thread loop, on the host */
    test_copy_threads_host(); /* the copy kernel's thread loop, on the host */
    test_attention_host();   /* the flash attention kernels' block code, on the host */
    test_fa_fragments();     /* their fragment layout against the PTX ISA's tables */
    if (!be && !selfcheck) {
        printf("cuda: no GPU available (%s): the GPU tests are skipped (the fused-group emulator, the scatter_add index lists, the tiled transpose's index steps, the flash attention kernels' block code and their fragment layout ran above)\n", why);
        printf("%d passed, %d failed, 1 skipped\n", tjt_pass, tjt_fail);
        return tjt_fail ? 1 : 0;
    }
    cpu = tj_ctx_new();
    gpu = tj_ctx_new();
    if (be) tj_set_backend(gpu, be);
    else printf("cuda: TJ_CUDA_TEST_CPU set: comparing the CPU backend with itself (checks this test, not the GPU)\n");
    compare("elementwise", f_elementwise, s_elementwise, (int)(sizeof s_elementwise / sizeof *s_elementwise));
    compare("reduce", f_reduce, s_reduce, (int)(sizeof s_reduce / sizeof *s_reduce));
    compare("dot", f_dot, s_dot, (int)(sizeof s_dot / sizeof *s_dot));
    compare("rows", f_rows, s_rows, (int)(sizeof s_rows / sizeof *s_rows));
    compare("cross_entropy", f_xent, s_xent, (int)(sizeof s_xent / sizeof *s_xent));
    compare("mlp", f_mlp, s_mlp, (int)(sizeof s_mlp / sizeof *s_mlp));
    compare("relayout", f_relayout, s_relayout, (int)(sizeof s_relayout / sizeof *s_relayout));
    test_attention_gpu();
    test_fused(cpu, gpu, "cuda");
    setenv("TJ_CUDA_FUSED_SMALL", "0", 1);
    test_fused(cpu, gpu, "cuda, TJ_CUDA_FUSED_SMALL=0");
    unsetenv("TJ_CUDA_FUSED_SMALL");
    test_fused_table();
    register_scale3(cpu);
    register_scale3(gpu);
    compare("custom op + custom_vjp", f_custom, s_custom, 1);
    compare("scatter_add", f_scatter, s_scatter, (int)(sizeof s_scatter / sizeof *s_scatter));
    compare("uniform", f_uniform, s_uniform, 1);
    test_scatter_rerun();
    test_scatter_cases();
    test_scatter_bad_index();
    gbe = be;
    test_sharded_sources();
    test_bad_index();
    test_bad_index_deferred();
    test_async(be);
    test_scan_index_checks();
    test_rerun();
    test_collectives_sim();
    test_sharded_train("batch:data hid:model");
    test_sharded_train("batch:data cls:model");
    TRAIN_PAD = 1;
    test_sharded_train("batch:data cls:model");
    TRAIN_PAD = 0;
    test_collective_after_error();
    compare("long reductions", f_reduce_long, s_reduce_long, (int)(sizeof s_reduce_long / sizeof *s_reduce_long));
    test_gpt2_step("f32", 0, REMAT_BLOCK_OUT, 1);
    test_gpt2_step("bf16", 1, REMAT_BLOCK_OUT, 1);
    test_gpt2_step("remat offload", 0, REMAT_OFFLOAD, 1);
    test_gpt2_step("accum 2", 0, REMAT_BLOCK_OUT, 2);
    {
        tj_alloc_stats st = tj_get_alloc_stats(gpu);
        TJT_CHECK(st.array_bytes == 0 && st.arena_bytes == 0, "[leaks] %lld array bytes, %lld arena bytes still live on the GPU", (long long)st.array_bytes,
              (long long)st.arena_bytes);
    }
    tj_ctx_free(cpu);
    tj_ctx_free(gpu);
    if (be) tj_cuda_backend_free(be);
    return tjt_finish();
}
