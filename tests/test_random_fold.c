/* Random numbers folded with a traced i32 scalar (tj_uniform_fold,
   tj_normal_fold, tj_dropout_fold: jax.random.fold_in(key, step) with a
   traced step). One compiled program draws fresh numbers in every run
   and, folding in the layer, in every iteration of a scan, and they are
   bit for bit those of the static form with key tj_key_fold(key, fold):
   - one device, several steps (negative and the largest i32 too), against
     programs traced with the folded key;
   - a scan over layers with dropout folded with step * layers + layer,
     its values and gradients against the same layers unrolled with static
     keys, under every kind of remat policy (a recompute must draw the same
     mask), and reversed;
   - sharded (4 devices, the dropped value split both ways) against one
     device, bit for bit;
   - errors: a fold that is not an i32 scalar, a NULL fold. */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"

#define KEY 0x1234abcd5678ull
#define L 4

/* ---- one device: the folded forms against the static ones ---- */
typedef struct {
    int fold;      /* 1: the _fold forms with the step input; 0: static keys */
    int32_t step;  /* the static forms' step */
} onecfg;
static void one_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) {
    const onecfg *u = (const onecfg *)user;
    tj_v x = tj_tree_v(in, "x"), step = tj_tree_v(in, "step");
    if (u->fold) {
        tj_tree_set_v(out, "u", tj_uniform_fold(KEY, step, TJ_F32, "n=1000"));
        tj_tree_set_v(out, "nrm", tj_normal_fold(KEY + 1, step, TJ_F64, "r=3 c=333"));
        tj_tree_set_v(out, "d", tj_dropout_fold(x, KEY + 2, step, 0.3));
        tj_tree_set_v(out, "ub", tj_uniform_fold(KEY + 3, step, TJ_BF16, "n=100"));
    } else {
        uint32_t s = (uint32_t)u->step;
        tj_tree_set_v(out, "u", tj_uniform(g, tj_key_fold(KEY, s), TJ_F32, "n=1000"));
        tj_tree_set_v(out, "nrm", tj_normal(g, tj_key_fold(KEY + 1, s), TJ_F64, "r=3 c=333"));
        tj_tree_set_v(out, "d", tj_dropout(x, tj_key_fold(KEY + 2, s), 0.3));
        tj_tree_set_v(out, "ub", tj_uniform(g, tj_key_fold(KEY + 3, s), TJ_BF16, "n=100"));
    }
}
static tj_tree *one_in(tj_ctx *c, int32_t step) {
    tj_tree *t = tj_tree_new(c);
    tj_tree_set_array(t, "x", tjt_rand(c, TJ_F32, "batch=8 embed=16", 7, -1, 1));
    tj_tree_set_array(t, "step", tj_array_new(c, TJ_I32, "", &step));
    return t;
}
/* the number of differing bytes of leaf `name` in two trees (-1: unreadable) */
static long long diff_bytes(tj_tree *a, tj_tree *b, const char *name) {
    tj_array *x = tj_tree_array(a, name), *y = tj_tree_array(b, name);
    size_t n, i;
    unsigned char *p, *q;
    long long d = 0;
    if (!x || !y || tj_array_numel(x) != tj_array_numel(y) || tj_array_dtype(x) != tj_array_dtype(y)) return -1;
    n = (size_t)tj_array_numel(x) * tj_dtype_size(tj_array_dtype(x));
    p = (unsigned char *)malloc(n + 1);
    q = (unsigned char *)malloc(n + 1);
    if (tj_array_read(x, tj_array_dtype(x), p) != TJ_OK || tj_array_read(y, tj_array_dtype(y), q) != TJ_OK) d = -1;
    else
        for (i = 0; i < n; i++) d += p[i] != q[i];
    free(p);
    free(q);
    return d;
}
static void test_one_device(void) {
    static const int32_t steps[] = {0, 1, 3, -5, 2147483647};
    static const char *names[] = {"u", "nrm", "d", "ub"};
    tj_ctx *c = tj_ctx_new();
    onecfg fc = {1, 0};
    tj_tree *ex = one_in(c, 0), *prev = NULL;
    tj_prog *pf = tj_jit(c, "fold", one_fn, &fc, ex, NULL);
    int s, i;
    tjt_current = "one device";
    TJT_CHECK(pf != NULL, "jit: %s", tj_error(c));
    for (s = 0; pf && s < (int)(sizeof steps / sizeof *steps); s++) {
        onecfg sc = {0, steps[s]};
        tj_tree *in = one_in(c, steps[s]), *of = tj_tree_new(c), *os = tj_tree_new(c);
        tj_prog *ps = tj_jit(c, "static", one_fn, &sc, in, NULL);
        TJT_CHECK(tj_run(pf, in, of) == TJ_OK && ps && tj_run(ps, in, os) == TJ_OK, "step %d: %s", steps[s], tj_error(c));
        for (i = 0; i < 4; i++) TJT_CHECK(diff_bytes(of, os, names[i]) == 0, "step %d: '%s' differs from the static key's in %lld bytes", steps[s], names[i], diff_bytes(of, os, names[i]));
        if (prev) /* a new step: new numbers (all but a few of 1000) */
            TJT_CHECK(diff_bytes(of, prev, "u") > 3000, "step %d drew the numbers of the step before (%lld bytes differ)", steps[s], diff_bytes(of, prev, "u"));
        if (prev) tj_tree_free(prev);
        prev = of;
        tj_tree_free(os);
        tj_tree_free(in);
        tj_prog_free(ps);
    }
    if (prev) tj_tree_free(prev);
    tj_prog_free(pf);
    tj_tree_free(ex);
    tj_ctx_free(c);
}

/* ---- a scan over layers, and the same layers unrolled ---- */
typedef struct {
    int scanned, reverse;
    const tj_policy *pol;
    tj_v step;           /* the outer step, captured by the body */
    int32_t static_step; /* unrolled: the step its static keys fold in */
} scancfg;
/* a layer: h <- tanh(dropout(h) . w), with the layer's fold */
static tj_v layer(tj_v h, tj_v w, tj_v fold, uint64_t static_key) {
    tj_v d = fold ? tj_dropout_fold(h, KEY, fold, 0.25) : tj_dropout(h, static_key, 0.25);
    return tj_rename(tj_tanh(tj_dot(d, w, "embed")), "out", "embed");
}
static void body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *co, tj_v *y, void *user) {
    scancfg *u = (scancfg *)user;
    tj_v fold = tj_add(tj_mul(u->step, tj_scalar(g, TJ_I32, L)), x[1]); /* step * layers + layer */
    (void)y;
    co[0] = layer(carry[0], x[0], fold, 0);
}
static void scan_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) {
    scancfg *u = (scancfg *)user;
    tj_v h = tj_tree_v(in, "h"), w[L], loss, wrt[L + 1], gr[L + 1];
    int i;
    char nm[16];
    for (i = 0; i < L; i++) {
        snprintf(nm, sizeof nm, "w%d", i);
        w[i] = tj_tree_v(in, nm);
        wrt[i] = w[i];
    }
    wrt[L] = h;
    if (u->scanned) {
        tj_v xs[2], fin;
        u->step = tj_tree_v(in, "step");
        xs[0] = tj_stack(L, w, "layer");
        xs[1] = tj_arange(g, TJ_I32, "layer=4", "layer");
        if (u->reverse) { /* reversed: the layers' weights and indices in reverse, so iteration i is layer i */
            tj_v rw[L];
            for (i = 0; i < L; i++) rw[i] = w[L - 1 - i];
            xs[0] = tj_stack(L, rw, "layer");
            xs[1] = tj_add(tj_muls(xs[1], -1), tj_scalar(g, TJ_I32, L - 1));
        }
        tj_scan_dir(body, u, "layer", 1, &h, 2, xs, 0, &fin, NULL, u->pol, u->reverse);
        h = fin;
    } else {
        for (i = 0; i < L; i++) h = layer(h, w[i], NULL, tj_key_fold(KEY, (uint32_t)(u->static_step * L + i)));
    }
    loss = tj_sum_all(tj_mul(h, h));
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "h", h);
    tj_grad(loss, L + 1, wrt, gr);
    for (i = 0; i < L; i++) {
        snprintf(nm, sizeof nm, "g%d", i);
        tj_tree_set_v(out, nm, gr[i]);
    }
    tj_tree_set_v(out, "gh", gr[L]);
}
static tj_tree *scan_in(tj_ctx *c, int32_t step, const char *hspec, const char *wspec) {
    tj_tree *t = tj_tree_new(c);
    char nm[16];
    int i;
    tj_array *h = tjt_rand(c, TJ_F64, "batch=6 embed=8", 3, -1, 1);
    tj_tree_set_array(t, "h", hspec ? tj_device_put(h, hspec) : h);
    if (hspec) tj_array_free(h);
    for (i = 0; i < L; i++) {
        tj_array *w = tjt_rand(c, TJ_F64, "embed=8 out=8", 10 + (unsigned)i, -0.6, 0.6);
        snprintf(nm, sizeof nm, "w%d", i);
        tj_tree_set_array(t, nm, wspec ? tj_device_put(w, wspec) : w);
        if (wspec) tj_array_free(w);
    }
    tj_tree_set_array(t, "step", tj_array_new(c, TJ_I32, "", &step));
    return t;
}
static double max_rel(tj_tree *a, tj_tree *b, const char *name) {
    tj_array *x = tj_tree_array(a, name), *y = tj_tree_array(b, name);
    int64_t n, i;
    double *p, *q, m = 0, big = 0;
    if (!x || !y || tj_array_numel(x) != tj_array_numel(y)) return 1e9;
    n = tj_array_numel(x);
    p = (double *)malloc(sizeof(double) * (size_t)n);
    q = (double *)malloc(sizeof(double) * (size_t)n);
    tj_array_read(x, TJ_F64, p);
    tj_array_read(y, TJ_F64, q);
    for (i = 0; i < n; i++) big = fabs(q[i]) > big ? fabs(q[i]) : big;
    for (i = 0; i < n; i++) m = fabs(p[i] - q[i]) > m ? fabs(p[i] - q[i]) : m;
    free(p);
    free(q);
    return m / (big > 1e-300 ? big : 1);
}
static const char *outs[] = {"loss", "h", "g0", "g1", "g2", "g3", "gh"};
static void test_scan(void) {
    tj_policy pols[6];
    const char *pname[6] = {"everything_saveable", "nothing_saveable", "dots_saveable", "offload_dot_with_no_batch_dims", "dots_with_no_batch_dims_saveable", "none given"};
    tj_ctx *c = tj_ctx_new();
    int p, s, o, rev;
    tjt_current = "scan";
    pols[0] = tj_everything_saveable();
    pols[1] = tj_nothing_saveable();
    pols[2] = tj_dots_saveable();
    pols[3] = tj_offload_dot_with_no_batch_dims();
    pols[4] = tj_dots_with_no_batch_dims_saveable();
    for (rev = 0; rev < 2; rev++)
        for (p = 0; p < 6; p++) {
            scancfg sc = {1, rev, p < 5 ? &pols[p] : NULL, NULL, 0}, uc = {0, 0, NULL, NULL, 0};
            tj_tree *ex = scan_in(c, 0, NULL, NULL);
            tj_prog *ps = tj_jit(c, "scan", scan_fn, &sc, ex, NULL);
            TJT_CHECK(ps != NULL, "%s: jit: %s", pname[p], tj_error(c));
            for (s = 0; ps && s < 3; s++) {
                int32_t step = s == 2 ? 1000 : s;
                tj_tree *in = scan_in(c, step, NULL, NULL), *os = tj_tree_new(c), *ou = tj_tree_new(c);
                tj_prog *pu;
                uc.static_step = step;
                pu = tj_jit(c, "unrolled", scan_fn, &uc, in, NULL);
                TJT_CHECK(tj_run(ps, in, os) == TJ_OK && pu && tj_run(pu, in, ou) == TJ_OK, "%s step %d: %s", pname[p], step, tj_error(c));
                for (o = 0; o < 7; o++)
                    TJT_CHECK(max_rel(os, ou, outs[o]) < 1e-13, "%s%s step %d: '%s' differs from the unrolled layers with static keys by %g", pname[p],
                              rev ? " reversed" : "", step, outs[o], max_rel(os, ou, outs[o]));
                tj_tree_free(in);
                tj_tree_free(os);
                tj_tree_free(ou);
                tj_prog_free(pu);
            }
            tj_prog_free(ps);
            tj_tree_free(ex);
        }
    tj_ctx_free(c);
}

/* ---- sharded: the same bits as one device ---- */
static void test_sharded(void) {
    tj_ctx *c1 = tj_ctx_new(), *c4 = tj_ctx_new();
    onecfg fc = {1, 0};
    scancfg sc = {1, 0, NULL, NULL, 0};
    static const char *names[] = {"u", "nrm", "d", "ub"};
    int i, o;
    tjt_current = "sharded";
    TJT_CHECK(tj_set_devices(c4, 4) == TJ_OK && tj_set_mesh(c4, "data=2 model=2") == TJ_OK, "mesh: %s", tj_error(c4));
    {
        int32_t step = 9;
        tj_tree *i1 = one_in(c1, step), *i4 = tj_tree_new(c4), *o1 = tj_tree_new(c1), *o4 = tj_tree_new(c4);
        tj_array *x = tjt_rand(c4, TJ_F32, "batch=8 embed=16", 7, -1, 1);
        tj_prog *p1 = tj_jit(c1, "fold", one_fn, &fc, i1, NULL), *p4;
        tj_tree_set_array(i4, "x", tj_device_put(x, "batch:data embed:model"));
        tj_array_free(x);
        tj_tree_set_array(i4, "step", tj_array_new(c4, TJ_I32, "", &step));
        p4 = tj_jit(c4, "fold", one_fn, &fc, i4, NULL);
        TJT_CHECK(p1 && p4 && tj_run(p1, i1, o1) == TJ_OK && tj_run(p4, i4, o4) == TJ_OK, "run: %s %s", tj_error(c1), tj_error(c4));
        for (i = 0; i < 4; i++) TJT_CHECK(diff_bytes(o1, o4, names[i]) == 0, "'%s' on 4 devices differs from one device in %lld bytes", names[i], diff_bytes(o1, o4, names[i]));
        tj_tree_free(i1); tj_tree_free(i4); tj_tree_free(o1); tj_tree_free(o4);
        tj_prog_free(p1); tj_prog_free(p4);
    }
    {
        tj_tree *i1 = scan_in(c1, 5, NULL, NULL), *i4 = scan_in(c4, 5, "batch:data", "out:model"), *o1 = tj_tree_new(c1), *o4 = tj_tree_new(c4);
        tj_prog *p1 = tj_jit(c1, "scan", scan_fn, &sc, i1, NULL), *p4 = tj_jit(c4, "scan", scan_fn, &sc, i4, NULL);
        TJT_CHECK(p1 && p4 && tj_run(p1, i1, o1) == TJ_OK && tj_run(p4, i4, o4) == TJ_OK, "scan run: %s %s", tj_error(c1), tj_error(c4));
        for (o = 0; o < 7; o++) TJT_CHECK(max_rel(o4, o1, outs[o]) < 1e-13, "scan: '%s' on 4 devices differs from one device by %g", outs[o], max_rel(o4, o1, outs[o]));
        tj_tree_free(i1); tj_tree_free(i4); tj_tree_free(o1); tj_tree_free(o4);
        tj_prog_free(p1); tj_prog_free(p4);
    }
    tj_ctx_free(c1);
    tj_ctx_free(c4);
}

/* ---- errors ---- */
static void bad_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) {
    int which = *(int *)user;
    tj_v x = tj_tree_v(in, "x");
    (void)g;
    if (which == 0) tj_tree_set_v(out, "u", tj_uniform_fold(KEY, x, TJ_F32, "n=4")); /* f32, not i32 */
    if (which == 1) tj_tree_set_v(out, "u", tj_normal_fold(KEY, tj_tree_v(in, "steps"), TJ_F32, "n=4")); /* not a scalar */
    if (which == 2) tj_tree_set_v(out, "u", tj_dropout_fold(x, KEY, NULL, 0.5));
    if (which == 3) tj_tree_set_v(out, "u", tj_uniform_fold(KEY, tj_tree_v(in, "step"), TJ_I32, "n=4")); /* an integer dtype */
}
static void test_errors(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = one_in(c, 1);
    int32_t st[3] = {1, 2, 3};
    int which;
    tjt_current = "errors";
    tj_tree_set_array(in, "steps", tj_array_new(c, TJ_I32, "k=3", st));
    tj_tree_set_array(in, "x", tj_array_new(c, TJ_F32, "", &(float){1.0f}));
    for (which = 0; which < 4; which++) {
        tj_prog *p = tj_jit(c, "bad", bad_fn, &which, in, NULL);
        TJT_CHECK(p == NULL, "case %d compiled", which);
        if (which == 0) TJT_ERROR_HAS(c, "uniform: fold", "must be an i32 scalar", "test_random_fold.c:");
        if (which == 1) TJT_ERROR_HAS(c, "normal: fold", "k=3", "must be an i32 scalar", "test_random_fold.c:");
        if (which == 2) TJT_ERROR_HAS(c, "dropout", "NULL", "test_random_fold.c:");
        if (which == 3) TJT_ERROR_HAS(c, "uniform", "not a float dtype", "test_random_fold.c:");
        tj_prog_free(p);
    }
    tj_tree_free(in);
    tj_ctx_free(c);
}

int main(void) {
    test_one_device();
    test_scan();
    test_sharded();
    test_errors();
    return tjt_finish();
}
