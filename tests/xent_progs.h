/* xent_progs.h: what tests/test_xent_split.c (tj_cross_entropy, the class
   axis split) and tests/test_xent_ignore.c (tj_cross_entropy_ignore) share:
   a loss inside programs of a few kinds (the mean and its gradient, per-row
   losses, a head with grad of grad in f32 and f64, bf16 logits, inside a
   scan, inside a checkpoint), their inputs, a run on a mesh (with the
   vocab-parallel form checked in the program) against one device, and a
   comparison of outputs that matches NaN and infinities.
   Not a test of its own (build.sh builds tests/test_*.c): each of the two
   includes it after tj_test.h, fills an xp_test (its loss, which of its
   CASEs are the shared programs, the rest of its programs, its labels and
   inputs) and points XP at it before running anything here. */
#ifndef XENT_PROGS_H
#define XENT_PROGS_H

static int CASE, VV;  /* the program (in the including test's numbering); the class count of the run */
static tj_policy POL; /* the scan's and the checkpoint's remat policy */

/* the shared programs; XP_OWN: one the test builds itself */
enum { XP_OWN, XP_MEAN, XP_PER_ROW, XP_HEAD, XP_HEAD_F64, XP_BF16, XP_SCAN, XP_CHECKPOINT, XP_BF16_F32 };

typedef struct {
    tj_v (*loss)(tj_v z, tj_v labels, const char *mean_axes); /* class axis "vocab" */
    int (*kind)(int c);                                        /* case c's program: XP_MEAN ..., or XP_OWN */
    /* builds CASE's program where kind gives XP_OWN (the inputs z, labels, h, w as given) */
    void (*own)(tj_graph *g, const tj_tree *in, tj_tree *out, tj_v z, tj_v lab, tj_v h, tj_v w);
    void (*labels)(int32_t lab[32], int V); /* CASE's changes to the 32 labels (every block's edges, and others) */
    /* CASE's inputs besides z, labels, rw, h and w (or in place of them), the labels as set */
    void (*inputs)(tj_ctx *ctx, tj_tree *in, const int32_t lab[32], int V, tj_dtype dt);
    const char *h_name;      /* the scan's and the checkpoint's hidden state named so (tj_checkpoint_name); NULL: not named */
    const char *region_mean; /* the checkpoint's loss: the axes it takes the mean over ("": per row) */
} xp_test;
static const xp_test *XP;

static tj_v xp_hidden(tj_v x) { return XP->h_name ? tj_checkpoint_name(tj_tanh(x), XP->h_name) : tj_tanh(x); }
static void xp_sbody(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v lab = *(tj_v *)u;
    (void)g; (void)y;
    co[0] = xp_hidden(c[0]);
    co[1] = tj_add(c[1], XP->loss(tj_dot(c[0], x[0], "embed"), lab, "batch pos"));
}
static void xp_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = XP->loss(tj_dot(xp_hidden(in[0]), in[1], "embed"), in[2], XP->region_mean);
}
/* out: "loss", and the gradients of loss with respect to wrt[0..n) as g0, g1 */
static void xp_grads(tj_tree *out, tj_v loss, int n, tj_v *wrt) {
    tj_v g[4];
    int i;
    char nm[16];
    tj_tree_set_v(out, "loss", loss);
    if (tj_grad(loss, n, wrt, g)) return;
    for (i = 0; i < n; i++) {
        snprintf(nm, sizeof nm, "g%d", i);
        tj_tree_set_v(out, nm, g[i]);
    }
}
/* and the gradient of sum(g_i^2 w) (grad of grad) as gg0, gg1 */
static void xp_grads2(tj_tree *out, tj_v loss, int n, tj_v *wrt) {
    tj_v g[4], gg[4], s = NULL;
    int i;
    char nm[16];
    tj_tree_set_v(out, "loss", loss);
    if (tj_grad(loss, n, wrt, g)) return;
    for (i = 0; i < n; i++) {
        tj_v t = tj_sum_all(tj_mul(tj_mul(g[i], g[i]), tj_tanh(wrt[i])));
        s = s ? tj_add(s, t) : t;
        snprintf(nm, sizeof nm, "g%d", i);
        tj_tree_set_v(out, nm, g[i]);
    }
    if (tj_grad(s, n, wrt, gg)) return;
    for (i = 0; i < n; i++) {
        snprintf(nm, sizeof nm, "gg%d", i);
        tj_tree_set_v(out, nm, gg[i]);
    }
}
static void xp_prog(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = tj_tree_v(in, "z"), lab = tj_tree_v(in, "labels"), h = tj_tree_v(in, "h"), w = tj_tree_v(in, "w");
    tj_v wr[2], per;
    (void)u;
    switch (XP->kind(CASE)) {
    case XP_MEAN: /* the mean loss and its gradient */
        wr[0] = z;
        xp_grads(out, XP->loss(z, lab, "batch pos"), 1, wr);
        break;
    case XP_PER_ROW: /* per-row losses, weighted */
        per = XP->loss(z, lab, "");
        tj_tree_set_v(out, "per", per);
        wr[0] = z;
        xp_grads(out, tj_sum_all(tj_mul(per, tj_tree_v(in, "rw"))), 1, wr);
        break;
    case XP_HEAD: /* a head: logits = h . w, grad of grad */
    case XP_HEAD_F64: /* the same in f64 */
        wr[0] = h;
        wr[1] = w;
        xp_grads2(out, XP->loss(tj_dot(h, w, "embed"), lab, "batch pos"), 2, wr);
        break;
    case XP_BF16: /* bf16 logits */
        wr[0] = z;
        xp_grads(out, tj_cast(XP->loss(tj_cast(z, TJ_BF16), lab, "batch pos"), TJ_F32), 1, wr);
        break;
    case XP_BF16_F32: /* bf16 logits widened to f32 (the op reads them as bf16: tj_cross_entropy) */
        wr[0] = z;
        xp_grads(out, XP->loss(tj_cast(tj_cast(z, TJ_BF16), TJ_F32), lab, "batch pos"), 1, wr);
        break;
    case XP_SCAN: { /* inside a scan: each layer's loss adds to a carry */
        tj_v c[2], fin[2];
        c[0] = h;
        c[1] = tj_scalar(g, TJ_F32, 0);
        if (tj_scan(xp_sbody, &lab, "layer", 2, c, 1, &w, 0, fin, NULL, &POL)) return;
        wr[0] = h;
        wr[1] = w;
        xp_grads(out, fin[1], 2, wr);
        break;
    }
    case XP_CHECKPOINT: { /* inside a checkpoint (the loss's mean over XP->region_mean) */
        tj_v ins[3] = {h, w, lab}, o;
        if (tj_checkpoint(xp_region, NULL, 3, ins, 1, &o, &POL)) return;
        tj_tree_set_v(out, "per", o);
        wr[0] = h;
        wr[1] = w;
        xp_grads2(out, tj_sum_all(tj_mul(o, o)), 2, wr);
        break;
    }
    default:
        XP->own(g, in, out, z, lab, h, w);
    }
}
/* the tolerance of CASE's outputs against one device's (relative to the largest) */
static double xp_tol(void) {
    int k = XP->kind(CASE);
    return k == XP_BF16 || k == XP_BF16_F32 ? 1e-2 : k == XP_HEAD_F64 ? 1e-12 : 2e-5;
}

/* check: the program uses the vocab-parallel form, and nothing of the logits' size moves */
static void xp_check_vocab_parallel(tj_prog *p, const char *mesh, const char *rules) {
    int part = TJT_PROG_LINES(p, "= cross_entropy_part(") > 0,
        big = TJT_PROG_LINES(p, "= all_gather", "vocab=") + TJT_PROG_LINES(p, "= psum", "vocab=") + TJT_PROG_LINES(p, "= reduce_scatter", "vocab=") +
                  TJT_PROG_LINES(p, "= all_to_all", "vocab=") > 0;
    TJT_CHECK(part && !big, "case %d on %s [%s]: cross_entropy_part %s, a collective of the logits' size %s", CASE, mesh, rules, part ? "used" : "NOT used",
              big ? "FOUND" : "not found");
}
/* CASE's program with V classes on ndev devices (mesh and rules: NULL for
   one device) into o; 0 (and the error on stderr) when it fails */
static int xp_run(int ndev, const char *mesh, const char *rules, tjt_outs *o, int V, int check) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p = NULL;
    tj_dtype dt = XP->kind(CASE) == XP_HEAD_F64 ? TJ_F64 : TJ_F32;
    int i, ok = 1;
    int32_t lab[32];
    char shp[64];
    memset(o, 0, sizeof *o);
    tj_set_devices(ctx, ndev);
    if (mesh) tj_set_mesh(ctx, mesh);
    for (i = 0; i < 32; i++) { /* every block's edges, and others */
        int e[8] = {0, V - 1, V / 2 - 1, V / 2, V / 4 - 1, V / 4, 3 * V / 4, 3 * V / 4 - 1};
        lab[i] = i < 8 ? e[i] : (i * 5 + 1) % V;
    }
    XP->labels(lab, V);
    VV = V;
    snprintf(shp, sizeof shp, "batch=4 pos=8 vocab=%d", V);
    tj_tree_set_array(in, "z", tjt_rand(ctx, dt, shp, 7, -3, 3));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", lab));
    tj_tree_set_array(in, "rw", tjt_rand(ctx, TJ_F32, "batch=4 pos=8", 8, -1, 1));
    tj_tree_set_array(in, "h", tjt_rand(ctx, dt, "batch=4 pos=8 embed=8", 3, -1, 1));
    snprintf(shp, sizeof shp, XP->kind(CASE) == XP_SCAN ? "layer=3 embed=8 vocab=%d" : "embed=8 vocab=%d", V);
    tj_tree_set_array(in, "w", tjt_rand(ctx, dt, shp, 5, -1, 1));
    XP->inputs(ctx, in, lab, V, dt);
    if (rules && tj_filter_shard(in, rules)) { fprintf(stderr, "filter_shard: %s\n", tj_error(ctx)); ok = 0; }
    p = ok ? tj_jit(ctx, "prog", xp_prog, NULL, in, NULL) : NULL;
    if (!p || tj_run(p, in, out)) {
        fprintf(stderr, "case %d run(%d, %s, %s): %s\n", CASE, ndev, mesh ? mesh : "-", rules ? rules : "-", tj_error(ctx));
        ok = 0;
    }
    if (ok && check) xp_check_vocab_parallel(p, mesh, rules);
    if (ok) {
        if (getenv("RV_PRINT")) tj_prog_print(p, stdout);
        tjt_outs_read(o, out);
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return ok;
}
/* jit fn (named name) on in, run it on ctx's ndev devices and read its
   outputs into o; 0, and "<what> on <ndev> devices: <error>" on stderr, when
   it fails; frees in and ctx */
static int xp_jit_run(tj_ctx *ctx, tj_tree *in, const char *name, tj_fn fn, tjt_outs *o, const char *what, int ndev) {
    tj_tree *out = tj_tree_new(ctx);
    tj_prog *p = tj_jit(ctx, name, fn, NULL, in, NULL);
    int ok = p && tj_run(p, in, out) == TJ_OK;
    if (!ok) fprintf(stderr, "%s on %d devices: %s\n", what, ndev, tj_error(ctx));
    else tjt_outs_read(o, out);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return ok;
}
/* b against a: NaN where a has NaN, the same infinities, else within tol of a's largest finite value */
static void xp_compare(const char *what, const tjt_outs *a, const tjt_outs *b, double tol) {
    int i;
    int64_t j;
    TJT_CHECK(a->n == b->n && a->n > 0, "%s: %d vs %d outputs", what, a->n, b->n);
    for (i = 0; i < a->n && i < b->n; i++) {
        double worst = 0, scale = 1e-9;
        int64_t at = 0;
        for (j = 0; j < a->len[i]; j++) if (isfinite(a->v[i][j]) && fabs(a->v[i][j]) > scale) scale = fabs(a->v[i][j]);
        for (j = 0; j < a->len[i] && j < b->len[i]; j++) {
            double x = a->v[i][j], y = b->v[i][j];
            double d = isnan(x) || isnan(y) ? (isnan(x) && isnan(y) ? 0 : INFINITY) : isinf(x) || isinf(y) ? (x == y ? 0 : INFINITY) : fabs(x - y) / scale;
            if (d > worst) worst = d, at = j;
        }
        TJT_CHECK(a->len[i] == b->len[i] && worst <= tol, "%s: output '%s' differs by %.3g at %lld (%g vs %g)", what, a->name[i], worst, (long long)at,
                  a->v[i][at], b->v[i][at]);
    }
}
/* one device's outputs of CASE with V classes into ref; 0 and a failed check when it fails */
static int xp_one_device(tjt_outs *ref, int V) {
    if (xp_run(1, NULL, NULL, ref, V, 0)) return 1;
    TJT_CHECK(0, "case %d V %d: 1 device failed", CASE, V);
    return 0;
}
/* CASE with V classes on mc against one device's ref, compared by cmp within
   xp_tol(); what names it in the messages; check: xp_check_vocab_parallel too */
static void xp_on_mesh(const tjt_outs *ref, const tjt_mesh_case *mc, int V, int check, const char *what,
                       void (*cmp)(const char *, const tjt_outs *, const tjt_outs *, double)) {
    tjt_outs r;
    if (!xp_run(mc->ndev, mc->mesh, mc->rules, &r, V, check)) {
        TJT_CHECK(0, "%s failed", what);
        return;
    }
    cmp(what, ref, &r, xp_tol());
    tjt_outs_free(&r);
}

#endif
