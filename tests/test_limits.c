/* Lists of any length through the public API, as a pytree of a model's
   parameters passes them (GPT-2 with 12 unstacked layers: ~150 leaves).
   Until 2026-11-24 shard_map took 1..32 inputs and outputs, custom ops
   1..16, custom_vjp 16 outputs and 64 values in all, concat 16, stack 256,
   and a backward body 16 nested remat regions; each case here is past
   the old limit and checked for values:
   - shard_map with 100 inputs and 70 outputs on 4 devices against one
     device, with its gradient;
   - a scan with 100 carries and 80 xs against the same steps unrolled,
     and its gradient under remat policies, and against finite differences;
   - a custom op with 40 inputs and 20 outputs and a custom_vjp with 150
     inputs (20 outputs, 300 residuals): values against the same formula
     in plain ops, gradients against finite differences;
   - tj_jit / tj_run of a 150-leaf tree, every output leaf;
   - concat and stack of 300 values; 20 nested remat regions;
   - error paths with big tables (no leak under ASan), and the limits that
     stay (TJ_MAXDIM axes per value, TJ__MAXMESH mesh axes, TJ_MAXDEV
     devices) name the op, the numbers and the caller's line. */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"

/* ---- helpers ---- */
/* every array leaf of out, flattened to doubles in tree order */
typedef struct {
    int n;
    double *v;
    int64_t len;
} flat;
static flat flatten(tj_tree *out) {
    flat f = {0, NULL, 0};
    int i;
    for (i = 0; i < tj_tree_size(out); i++) {
        tj_array *a = tj_tree_array_at(out, i);
        int64_t k;
        if (!a) continue;
        k = tj_array_numel(a);
        f.v = (double *)realloc(f.v, sizeof(double) * (size_t)(f.len + k));
        tj_array_read(a, TJ_F64, f.v + f.len);
        f.len += k;
        f.n++;
    }
    return f;
}
/* the largest difference relative to the largest magnitude of a */
static double flat_diff(const flat *a, const flat *b) {
    double m = 1e-300, d = 0;
    int64_t i;
    if (a->n != b->n || a->len != b->len) return 1e9;
    for (i = 0; i < a->len; i++) if (fabs(a->v[i]) > m) m = fabs(a->v[i]);
    for (i = 0; i < a->len; i++) {
        double e = fabs(a->v[i] - b->v[i]) / m;
        if (!(e <= d)) d = e;
    }
    return d;
}
/* jit fn on in, run it, flatten the outputs; 0 and a failed check on error */
static int run_flat(tj_ctx *ctx, const char *what, tj_fn fn, void *u, tj_tree *in, flat *f) {
    tj_prog *p = tj_jit(ctx, what, fn, u, in, NULL);
    tj_tree *out = tj_tree_new(ctx);
    int ok = p && tj_run(p, in, out) == TJ_OK;
    TJT_CHECK(ok, "%s: %s", what, tj_error(ctx));
    tj_clear_error(ctx);
    if (ok) *f = flatten(out);
    tj_prog_free(p);
    tj_tree_free(out);
    return ok;
}
static tj_tree *leaves(tj_ctx *ctx, const char *prefix, int n, const char *shape, unsigned seed, const char *spec) {
    tj_tree *t = tj_tree_new(ctx);
    int i;
    for (i = 0; i < n; i++) {
        char nm[32];
        tj_array *a = tjt_rand(ctx, TJ_F64, shape, seed + (unsigned)i, -1, 1);
        if (spec && i % 2 == 0) a = tjt_put(a, spec); /* every other leaf placed by the spec, the rest replicated */
        snprintf(nm, sizeof nm, "%s%d", prefix, i);
        tj_tree_set_array(t, nm, a);
    }
    return t;
}
static void leaves_v(const tj_tree *in, const char *prefix, int n, tj_v *v) {
    int i;
    for (i = 0; i < n; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "%s%d", prefix, i);
        v[i] = tj_tree_v(in, nm);
    }
}
/* the other way: out's leaves prefix00, prefix01, ... (width digits) = v[0..n) */
static void set_leaves(tj_tree *out, const char *prefix, int width, int n, const tj_v *v) {
    int i;
    for (i = 0; i < n; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "%s%0*d", prefix, width, i);
        tj_tree_set_v(out, nm, v[i]);
    }
}
/* the sum over i < n of (1 + step i) sum(y_i^2) */
static tj_v sq_loss(int n, const tj_v *y, double step) {
    tj_v loss = NULL;
    int i;
    for (i = 0; i < n; i++) {
        tj_v l = tj_muls(tj_sum_all(tj_mul(y[i], y[i])), 1.0 + step * i);
        loss = loss ? tj_add(loss, l) : l;
    }
    return loss;
}

/* ==== 1. shard_map: 100 inputs, 70 outputs ============================== */
#define SM_IN 100
#define SM_OUT 70
static void sm_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    int j;
    (void)g; (void)u;
    for (j = 0; j < SM_OUT; j++) { /* a block's own ops, and a psum over the mesh */
        tj_v a = tj_mul(in[j], tj_tanh(in[j + 30]));
        tj_v s = tj_psum(tj_sum(in[SM_IN - 1 - j], "batch"), "data");
        out[j] = tj_add(a, tj_muls(s, 0.1));
    }
}
static void sm_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x[SM_IN], y[SM_OUT], gx[SM_IN], loss;
    const char *is[SM_IN], *os[SM_OUT];
    int i;
    (void)g; (void)u;
    leaves_v(in, "x", SM_IN, x);
    for (i = 0; i < SM_IN; i++) is[i] = "batch:data";
    for (i = 0; i < SM_OUT; i++) os[i] = "batch:data";
    if (tj_shard_map(sm_body, NULL, SM_IN, x, is, SM_OUT, y, os, 1)) return;
    loss = sq_loss(SM_OUT, y, 0.01);
    set_leaves(out, "y", 2, SM_OUT, y);
    if (tj_grad(loss, SM_IN, x, gx)) return;
    tj_tree_set_v(out, "loss", loss);
    set_leaves(out, "g", 2, SM_IN, gx);
}
/* the same outputs in plain ops (no shard_map), one device */
static void sm_plain_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x[SM_IN], y[SM_OUT], gx[SM_IN], loss;
    int i;
    (void)g; (void)u;
    leaves_v(in, "x", SM_IN, x);
    for (i = 0; i < SM_OUT; i++) y[i] = tj_add(tj_mul(x[i], tj_tanh(x[i + 30])), tj_muls(tj_sum(x[SM_IN - 1 - i], "batch"), 0.1));
    loss = sq_loss(SM_OUT, y, 0.01);
    set_leaves(out, "y", 2, SM_OUT, y);
    if (tj_grad(loss, SM_IN, x, gx)) return;
    tj_tree_set_v(out, "loss", loss);
    set_leaves(out, "g", 2, SM_IN, gx);
}
static void test_shard_map(void) {
    tj_ctx *c1 = tj_ctx_new(), *c4 = tj_ctx_new();
    tj_tree *in1, *in4;
    flat a = {0, NULL, 0}, b = {0, NULL, 0}, p = {0, NULL, 0};
    tjt_current = "shard_map, 100 inputs and 70 outputs";
    TJT_CHECK(tj_set_devices(c4, 4) == TJ_OK && tj_set_mesh(c4, "data=4") == TJ_OK && tj_set_mesh(c1, "data=1") == TJ_OK, "mesh: %s", tj_error(c4));
    in1 = leaves(c1, "x", SM_IN, "batch=8 embed=3", 11, NULL);
    in4 = leaves(c4, "x", SM_IN, "batch=8 embed=3", 11, "batch:data");
    if (run_flat(c1, "shard_map on one device", sm_fn, NULL, in1, &a) && run_flat(c4, "shard_map on four devices", sm_fn, NULL, in4, &b) &&
        run_flat(c1, "the same in plain ops", sm_plain_fn, NULL, in1, &p)) {
        TJT_CHECK(a.n == SM_OUT + 1 + SM_IN && a.len == SM_OUT * 24 + 1 + SM_IN * 24, "one device: %d leaves, %lld numbers", a.n, (long long)a.len);
        TJT_CHECK(flat_diff(&a, &b) < 1e-13, "4 devices vs one: the outputs and gradients differ by %g", flat_diff(&a, &b));
        TJT_CHECK(flat_diff(&p, &a) < 1e-13, "shard_map vs plain ops: the outputs and gradients differ by %g", flat_diff(&p, &a));
    }
    free(a.v), free(b.v), free(p.v);
    tj_tree_free(in1);
    tj_tree_free(in4);
    tj_ctx_free(c1);
    tj_ctx_free(c4);
}

/* ==== 2. scan: 100 carries, 80 xs ======================================= */
#define SC_C 100
#define SC_X 80
#define SC_LEN 3
typedef struct {
    int unrolled;           /* the same steps without a scan */
    const tj_policy *policy;
    int loss_only;          /* for tjt_gradcheck */
} sc_cfg;
static void sc_step(const tj_v *c, const tj_v *x, tj_v *co, tj_v *y) {
    int i;
    for (i = 0; i < SC_C; i++) co[i] = tj_add(tj_tanh(tj_mul(c[i], x[i % SC_X])), tj_muls(c[(i + 1) % SC_C], 0.3));
    co[0] = tj_checkpoint_name(co[0], "h"); /* (what save_only_these_names keeps) */
    y[0] = tj_sum(tj_mul(co[0], co[SC_C - 1]), "embed");
    y[1] = tj_mul(co[7], x[SC_X - 1]);
}
static void sc_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)u;
    sc_step(c, x, co, y);
}
static void sc_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const sc_cfg *cf = (const sc_cfg *)u;
    tj_v c[SC_C], x[SC_X], fin[SC_C], ys[2], wrt[SC_C + SC_X], gr[SC_C + SC_X], loss;
    int i;
    (void)g;
    leaves_v(in, "c", SC_C, c);
    leaves_v(in, "x", SC_X, x);
    if (!cf->unrolled) {
        if (tj_scan(sc_body, NULL, "layer", SC_C, c, SC_X, x, 2, fin, ys, cf->policy)) return;
    } else { /* the iterations one after another on slices, the ys stacked */
        tj_v cur[SC_C], y0[SC_LEN], y1[SC_LEN];
        int s;
        for (i = 0; i < SC_C; i++) cur[i] = c[i];
        for (s = 0; s < SC_LEN; s++) {
            tj_v xs[SC_X], co[SC_C], y[2];
            for (i = 0; i < SC_X; i++) xs[i] = tj_index(x[i], "layer", s);
            sc_step(cur, xs, co, y);
            for (i = 0; i < SC_C; i++) cur[i] = co[i];
            y0[s] = y[0], y1[s] = y[1];
        }
        for (i = 0; i < SC_C; i++) fin[i] = cur[i];
        ys[0] = tj_stack(SC_LEN, y0, "layer");
        ys[1] = tj_stack(SC_LEN, y1, "layer");
    }
    loss = tj_add(tj_sum_all(ys[0]), tj_sum_all(tj_mul(ys[1], ys[1])));
    for (i = 0; i < SC_C; i++) loss = tj_add(loss, tj_muls(tj_sum_all(tj_mul(fin[i], fin[i])), 0.01 * (i % 7 + 1)));
    tj_tree_set_v(out, "loss", loss);
    if (cf->loss_only) return;
    for (i = 0; i < SC_C; i++) wrt[i] = c[i];
    for (i = 0; i < SC_X; i++) wrt[SC_C + i] = x[i];
    if (tj_grad(loss, SC_C + SC_X, wrt, gr)) return;
    tj_tree_set_v(out, "ys0", ys[0]);
    tj_tree_set_v(out, "ys1", ys[1]);
    set_leaves(out, "fin", 3, SC_C, fin);
    set_leaves(out, "grad", 3, SC_C + SC_X, gr);
}
static void test_scan(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = leaves(ctx, "c", SC_C, "embed=4", 100, NULL), *xs = leaves(ctx, "x", SC_X, "layer=3 embed=4", 300, NULL);
    tj_policy pols[3];
    const char *pn[3] = {"nothing_saveable", "dots_saveable", "save_only_these_names"};
    sc_cfg ref = {1, NULL, 0};
    flat r = {0, NULL, 0};
    int i;
    tjt_current = "scan, 100 carries and 80 xs";
    pols[0] = tj_nothing_saveable();
    pols[1] = tj_dots_saveable();
    pols[2] = tj_save_only_these_names("h");
    for (i = 0; i < SC_X; i++) { /* one tree: the carries, then the xs */
        char nm[32];
        snprintf(nm, sizeof nm, "x%d", i);
        tj_tree_set_array(in, nm, tj_tree_take(xs, nm));
    }
    tj_tree_free(xs);
    if (run_flat(ctx, "the steps unrolled", sc_fn, &ref, in, &r)) {
        flat f = {0, NULL, 0};
        sc_cfg plain = {0, NULL, 0};
        TJT_CHECK(r.n == 1 + 2 + SC_C + SC_C + SC_X && r.len == 1 + 3 + 12 + SC_C * 4 + SC_C * 4 + SC_X * 12, "unrolled: %d leaves, %lld numbers", r.n,
                  (long long)r.len);
        if (run_flat(ctx, "scan, no policy", sc_fn, &plain, in, &f))
            TJT_CHECK(flat_diff(&r, &f) < 1e-13, "scan vs unrolled: the outputs and gradients differ by %g", flat_diff(&r, &f));
        free(f.v);
        for (i = 0; i < 3; i++) {
            sc_cfg p = {0, &pols[i], 0};
            flat q = {0, NULL, 0};
            if (run_flat(ctx, pn[i], sc_fn, &p, in, &q))
                TJT_CHECK(flat_diff(&r, &q) < 1e-13, "scan under %s vs unrolled: the outputs and gradients differ by %g", pn[i], flat_diff(&r, &q));
            free(q.v);
        }
    }
    free(r.v);
    {
        sc_cfg p = {0, &pols[0], 1};
        TJT_GRADCHECK(ctx, "scan of 100 carries and 80 xs under nothing_saveable", sc_fn, &p, in, "c0 c41 c99 x0 x79");
    }
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* ==== 3. a custom op of 40 inputs and 20 outputs ======================== */
/* out_j = in_j * in_{j+20} + 0.01 (j + 1) sum_i in_i, elementwise */
#define CO_IN 40
#define CO_OUT 20
static void co_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *u) {
    int64_t n = 1, k;
    int i, j;
    (void)u;
    for (i = 0; i < in[0].rank; i++) n *= in[0].dim[i];
    for (k = 0; k < n; k++) {
        double s = 0;
        for (i = 0; i < nin; i++) s += ((const double *)in[i].data)[k];
        for (j = 0; j < nout; j++)
            ((double *)out[j].data)[k] = ((const double *)in[j].data)[k] * ((const double *)in[j + CO_OUT].data)[k] + 0.01 * (j + 1) * s;
    }
}
static tj_status co_vjp(tj_graph *g, int nin, const tj_v *in, int nout, const tj_v *out, const tj_v *ct, tj_v *gin, void *u) {
    tj_v s = NULL;
    int i, j;
    (void)g; (void)out; (void)u;
    for (j = 0; j < nout; j++) {
        tj_v t = tj_muls(ct[j], 0.01 * (j + 1));
        s = s ? tj_add(s, t) : t;
    }
    for (i = 0; i < nin; i++) gin[i] = tj_add(tj_mul(ct[i % CO_OUT], in[i < CO_OUT ? i + CO_OUT : i - CO_OUT]), s);
    return TJ_OK;
}
static void co_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int plain = u ? *(const int *)u : 0, i, j;
    tj_v x[CO_IN], y[CO_OUT], loss = NULL;
    (void)g;
    leaves_v(in, "x", CO_IN, x);
    if (plain) {
        tj_v s = x[0];
        for (i = 1; i < CO_IN; i++) s = tj_add(s, x[i]);
        for (j = 0; j < CO_OUT; j++) y[j] = tj_add(tj_mul(x[j], x[j + CO_OUT]), tj_muls(s, 0.01 * (j + 1)));
    } else if (tj_custom("wide", CO_IN, x, y))
        return;
    for (j = 0; j < CO_OUT; j++) {
        tj_v l = tj_sum_all(tj_mul(tj_sin(y[j]), y[j]));
        loss = loss ? tj_add(loss, l) : l;
    }
    set_leaves(out, "y", 2, CO_OUT, y);
    tj_tree_set_v(out, "loss", loss);
}
static void test_custom_op(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = leaves(ctx, "x", CO_IN, "embed=5", 500, NULL);
    tj_op_def d;
    int plain = 1;
    flat a = {0, NULL, 0}, b = {0, NULL, 0};
    tjt_current = "custom op, 40 inputs and 20 outputs";
    memset(&d, 0, sizeof d);
    d.name = "wide";
    d.nout = CO_OUT;
    d.cpu = co_cpu;
    d.vjp = co_vjp;
    d.replication = tj_rep_same;
    TJT_CHECK(tj_register_op(ctx, &d) == TJ_OK, "register an op of 20 outputs: %s", tj_error(ctx));
    if (run_flat(ctx, "custom op", co_fn, NULL, in, &a) && run_flat(ctx, "the same in plain ops", co_fn, &plain, in, &b)) {
        TJT_CHECK(a.n == CO_OUT + 1 && a.len == CO_OUT * 5 + 1, "%d leaves, %lld numbers", a.n, (long long)a.len);
        TJT_CHECK(flat_diff(&b, &a) < 1e-14, "custom op vs plain ops: %g", flat_diff(&b, &a));
    }
    free(a.v), free(b.v);
    TJT_GRADCHECK(ctx, "custom op of 40 inputs and 20 outputs", co_fn, NULL, in, "x0 x7 x19 x20 x33 x39");
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* ==== 4. a custom_vjp of 150 inputs ====================================== */
/* out_j = sum over i = j mod 20 of tanh(in_i) in_i; residuals in_i and
   tanh(in_i) (300); bwd: ct_{i mod 20} (tanh + in (1 - tanh^2)) */
#define CV_IN 150
#define CV_OUT 20
static void cv_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    int i;
    (void)g; (void)u;
    for (i = 0; i < CV_IN; i++) {
        tj_v t = tj_tanh(in[i]), p = tj_mul(t, in[i]);
        res[i] = in[i];
        res[CV_IN + i] = t;
        out[i % CV_OUT] = i < CV_OUT ? p : tj_add(out[i % CV_OUT], p);
    }
}
static void cv_bwd(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *u) {
    int i;
    (void)g; (void)u;
    for (i = 0; i < CV_IN; i++) {
        tj_v x = res[i], t = res[CV_IN + i];
        tj_v d = tj_add(t, tj_mul(x, tj_adds(tj_muls(tj_mul(t, t), -1.0), 1.0)));
        gin[i] = tj_mul(ct[i % CV_OUT], d);
    }
}
static void cv_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int plain = u ? *(const int *)u : 0;
    tj_v x[CV_IN], y[CV_OUT], gx[CV_IN], loss;
    (void)g;
    leaves_v(in, "x", CV_IN, x);
    if (plain) {
        tj_v r[2 * CV_IN];
        cv_fwd(g, x, y, r, NULL);
    } else if (tj_custom_vjp(cv_fwd, cv_bwd, NULL, CV_IN, x, CV_OUT, y, 2 * CV_IN))
        return;
    loss = sq_loss(CV_OUT, y, 0.1);
    set_leaves(out, "y", 2, CV_OUT, y);
    tj_tree_set_v(out, "loss", loss);
    if (tj_grad(loss, CV_IN, x, gx)) return;
    set_leaves(out, "g", 3, CV_IN, gx);
}
static void cv_loss_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x[CV_IN], y[CV_OUT];
    (void)g; (void)u;
    leaves_v(in, "x", CV_IN, x);
    if (tj_custom_vjp(cv_fwd, cv_bwd, NULL, CV_IN, x, CV_OUT, y, 2 * CV_IN)) return;
    tj_tree_set_v(out, "loss", sq_loss(CV_OUT, y, 0.1));
}
static void test_custom_vjp(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = leaves(ctx, "x", CV_IN, "embed=3", 900, NULL);
    int plain = 1;
    flat a = {0, NULL, 0}, b = {0, NULL, 0};
    tjt_current = "custom_vjp, 150 inputs, 20 outputs, 300 residuals";
    if (run_flat(ctx, "custom_vjp", cv_fn, NULL, in, &a) && run_flat(ctx, "the same in plain ops", cv_fn, &plain, in, &b)) {
        TJT_CHECK(a.n == CV_OUT + 1 + CV_IN && a.len == CV_OUT * 3 + 1 + CV_IN * 3, "%d leaves, %lld numbers", a.n, (long long)a.len);
        /* bwd's rule is the exact derivative: the same gradient as autodiff of fwd's ops */
        TJT_CHECK(flat_diff(&b, &a) < 1e-13, "custom_vjp vs plain ops: outputs and gradients differ by %g", flat_diff(&b, &a));
    }
    free(a.v), free(b.v);
    TJT_GRADCHECK(ctx, "custom_vjp of 150 inputs", cv_loss_fn, NULL, in, "x0 x19 x20 x77 x131 x149");
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* ==== 5. tj_jit / tj_run of a 150-leaf tree ============================== */
#define TR_N 150
static void tr_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int i;
    (void)g; (void)u;
    for (i = 0; i < TR_N; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "layer%03d.out", i);
        tj_tree_set_v(out, nm, tj_add(tj_muls(tj_tree_v_at(in, i), i + 1.0), tj_tree_v_at(in, (i + 1) % TR_N)));
    }
}
static void test_tree(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    int i, bad = 0, badn = 0;
    tjt_current = "tj_jit and tj_run of a 150-leaf tree";
    for (i = 0; i < TR_N; i++) {
        char nm[32];
        double v[2] = {i, -0.5 * i};
        snprintf(nm, sizeof nm, "layer%03d.w", i);
        tj_tree_set_array(in, nm, tj_array_new(ctx, TJ_F64, "embed=2", v));
    }
    p = tj_jit(ctx, "150 leaves", tr_fn, NULL, in, NULL);
    TJT_CHECK(p && tj_run(p, in, out) == TJ_OK && tj_tree_size(out) == TR_N, "150 leaves in and out: %s", tj_error(ctx));
    for (i = 0; i < tj_tree_size(out) && i < TR_N; i++) {
        char nm[32];
        double v[2], j = (i + 1) % TR_N;
        snprintf(nm, sizeof nm, "layer%03d.out", i);
        if (tj_tree_find(out, nm) < 0) {
            badn++;
            continue;
        }
        tj_array_read(tj_tree_array(out, nm), TJ_F64, v);
        if (v[0] != i * (i + 1.0) + j || v[1] != -0.5 * i * (i + 1.0) - 0.5 * j) bad++;
    }
    TJT_CHECK(badn == 0 && bad == 0, "150 output leaves: %d missing, %d with wrong values", badn, bad);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
}

/* ==== 6. concat and stack of 300; 20 nested remat regions ================ */
static void cat_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), xs[300], gx;
    int i;
    (void)g; (void)u;
    for (i = 0; i < 300; i++) xs[i] = tj_muls(x, i + 1.0);
    tj_tree_set_v(out, "cat", tj_concat(300, xs, "embed"));
    tj_tree_set_v(out, "stack", tj_stack(300, xs, "k"));
    tj_grad(tj_sum_all(tj_mul(tj_stack(300, xs, "k"), tj_stack(300, xs, "k"))), 1, &x, &gx);
    tj_tree_set_v(out, "grad", gx);
}
typedef struct { int n; const tj_policy *inner, *outer; } nest_cfg;
static void nest_inner(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_sin(tj_mul(in[0], in[1]));
}
static void nest_outer(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const nest_cfg *c = (const nest_cfg *)u;
    tj_v h = in[0];
    int i;
    (void)g;
    for (i = 0; i < c->n; i++) {
        tj_v a[2] = {h, in[1]};
        if (tj_checkpoint(nest_inner, NULL, 2, a, 1, &h, c->inner)) return;
    }
    out[0] = h;
}
static void nest_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const nest_cfg *c = (const nest_cfg *)u;
    tj_v x[2] = {tj_tree_v(in, "x"), tj_tree_v(in, "w")}, y = NULL, gr[2];
    (void)g;
    if (tj_checkpoint(nest_outer, u, 2, x, 1, &y, c->outer)) return;
    y = tj_sum_all(y);
    if (tj_grad(y, 2, x, gr)) return;
    tj_tree_set_v(out, "y", y);
    tj_tree_set_v(out, "gx", gr[0]);
    tj_tree_set_v(out, "gw", gr[1]);
}
static void test_lists(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx);
    double xv[2] = {0.5, -0.25};
    flat f = {0, NULL, 0};
    tjt_current = "concat and stack of 300, 20 nested regions";
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F64, "embed=2", xv));
    tj_tree_set_array(in, "w", tj_array_new(ctx, TJ_F64, "embed=2", xv));
    if (run_flat(ctx, "concat and stack of 300", cat_fn, NULL, in, &f)) {
        int i, bad = 0;
        double s = 0;
        TJT_CHECK(f.n == 3 && f.len == 600 + 600 + 2, "%d leaves, %lld numbers", f.n, (long long)f.len);
        for (i = 0; i < 300 && f.len == 1202; i++) { /* (the leaves in the order set: cat, stack, grad) */
            if (f.v[2 * i] != 0.5 * (i + 1) || f.v[2 * i + 1] != -0.25 * (i + 1)) bad++;          /* cat: x (i+1) along embed */
            if (f.v[600 + 2 * i] != 0.5 * (i + 1) || f.v[600 + 2 * i + 1] != -0.25 * (i + 1)) bad++; /* stack: [k, embed] */
            s += 2.0 * (i + 1) * (i + 1);
        }
        TJT_CHECK(bad == 0, "concat / stack of 300: %d wrong slices", bad);
        TJT_CHECK(f.len == 1202 && fabs(f.v[1200] - s * 0.5) < 1e-9 * s && fabs(f.v[1201] + s * 0.25) < 1e-9 * s, "the gradient through 300-way stacks: %g %g, want %g %g",
                  f.len == 1202 ? f.v[1200] : 0, f.len == 1202 ? f.v[1201] : 0, s * 0.5, -s * 0.25);
    }
    free(f.v);
    {
        tj_policy none = tj_nothing_saveable(), dots = tj_dots_saveable();
        nest_cfg ref = {20, NULL, NULL}, pol = {20, &dots, &none};
        flat a = {0, NULL, 0}, b = {0, NULL, 0};
        if (run_flat(ctx, "20 nested regions, no policy", nest_fn, &ref, in, &a) && run_flat(ctx, "20 nested regions under policies", nest_fn, &pol, in, &b))
            TJT_CHECK(a.len == 5 && flat_diff(&a, &b) < 1e-14, "20 regions nested in a region with a policy: %g from the same without policies",
                      flat_diff(&a, &b));
        free(a.v), free(b.v);
    }
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* ==== 7. errors with big tables, and the limits that stay ================ */
static void sm_short_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    int j;
    (void)g; (void)u;
    for (j = 0; j < SM_OUT; j++) out[j] = j == 50 ? NULL : tj_muls(in[j], 2.0);
}
static int rej_shape(const tj_buf *in, int nin, int j, char *shape, size_t n, tj_dtype *dt, void *u) {
    (void)in; (void)j; (void)dt; (void)u;
    snprintf(shape, n, "refuses %d inputs", nin);
    return 1;
}
static void cv_short_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    cv_fwd(g, in, out, res, u);
    res[2 * CV_IN - 1] = NULL; /* one residual missing */
}
typedef struct { int which; } err_cfg;
static void err_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int which = ((const err_cfg *)u)->which, i;
    tj_v x[CV_IN], y[CV_IN], r = NULL;
    const char *sp[SM_IN];
    leaves_v(in, "x", CV_IN, x);
    for (i = 0; i < SM_IN; i++) sp[i] = "";
    if (which == 0) tj_shard_map(sm_short_body, NULL, SM_IN, x, sp, SM_OUT, y, sp, 1);
    else if (which == 1) tj_custom("rejects", CO_IN, x, y);
    else if (which == 2) tj_custom_vjp(cv_short_fwd, cv_bwd, NULL, CV_IN, x, CV_OUT, y, 2 * CV_IN);
    else if (which == 3) {
        x[99] = tj_sum_all(x[99]);
        r = tj_stack(CV_IN, x, "k"); /* input 99 of another type */
    } else if (which == 4)
        r = tj_fill(g, TJ_F32, "a=1 b=1 c=1 d=1 e=1 f=1 g=1 h=1 i=1", 0.0);
    else if (which == 5) {
        tj_v v = tj_fill(g, TJ_F64, "a=1 b=1 c=1 d=1 e=1 f=1 g=1 h=1", 0.0);
        r = tj_stack(1, &v, "k");
    }
    tj_tree_set_v(out, "y", r ? r : x[0]);
}
static void test_errors(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in;
    tj_op_def d;
    static const char *want[][3] = {
        {"shard_map", "returned no output 50", "test_limits.c:"},
        {"custom op 'rejects'", "refuses 40 inputs", "test_limits.c:"},
        {"custom_vjp", "fwd returned no residual 299", "test_limits.c:"},
        {"stack", "input 99", "test_limits.c:"},
        {"fill", "more than 8 axes", "test_limits.c:"},
        {"stack", "have 8 axes, the most a value may have (TJ_MAXDIM 8)", "test_limits.c:"},
    };
    int i;
    tjt_current = "errors with big tables, and the limits that stay";
    TJT_CHECK(tj_set_devices(ctx, 2) == TJ_OK && tj_set_mesh(ctx, "data=2") == TJ_OK, "mesh: %s", tj_error(ctx));
    in = leaves(ctx, "x", CV_IN, "embed=2", 7, NULL);
    memset(&d, 0, sizeof d);
    d.name = "rejects";
    d.nout = 30;
    d.shape = rej_shape;
    d.cpu = co_cpu;
    tj_register_op(ctx, &d);
    for (i = 0; i < 6; i++) {
        err_cfg e = {i};
        tj_prog *p = tj_jit(ctx, "error", err_fn, &e, in, NULL);
        TJT_CHECK(p == NULL, "case %d compiled", i);
        TJT_ERROR_HAS(ctx, want[i][0], want[i][1], want[i][2]);
        tj_prog_free(p);
    }
    TJT_CHECK(tj_set_mesh(ctx, "a=1 b=1 c=1 d=1 e=1 f=1 g=2") != TJ_OK, "a mesh of 7 axes was accepted");
    TJT_ERROR_HAS(ctx, "tj_set_mesh", "7 axes (at most 6)", "test_limits.c:");
    TJT_CHECK(tj_set_devices(ctx, TJ_MAXDEV + 1) != TJ_OK, "65 devices were accepted");
    TJT_ERROR_HAS(ctx, "tj_set_devices", "65 devices (1..64", "test_limits.c:");
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

int main(void) {
    test_shard_map();
    test_scan();
    test_custom_op();
    test_custom_vjp();
    test_tree();
    test_lists();
    test_errors();
    return tjt_finish();
}
