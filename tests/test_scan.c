/* scan, remat policies, named residuals and host offload. */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"

/* one residual MLP block: x + W2 relu(W1 x), with named hidden and output */
static tj_v block(tj_v x, tj_v w1, tj_v w2) {
    tj_v h = tj_checkpoint_name(tj_dot(x, w1, "embed"), "hidden");      /* (batch, hidden) */
    return tj_checkpoint_name(tj_add(x, tj_dot(tj_relu(h), w2, "hidden")), "residual");
}
static void body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    (void)g; (void)y; (void)u;
    carry_out[0] = block(carry[0], x[0], x[1]);
}
typedef struct { const tj_policy *policy; int unrolled; int L; } cfg;
static void stack_loss(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    cfg *c = (cfg *)u;
    tj_v x = tj_tree_v(in, "x"), w1 = tj_tree_v(in, "w1"), w2 = tj_tree_v(in, "w2"), wo = tj_tree_v(in, "wout");
    tj_v h = x;
    (void)g;
    if (c->unrolled) {
        int l;
        for (l = 0; l < c->L; l++)
            h = block(h, tj_merge(tj_slice(w1, "layer", l, l + 1), "layer embed", "embed"), tj_merge(tj_slice(w2, "layer", l, l + 1), "layer hidden", "hidden"));
    } else {
        tj_v xs[2];
        xs[0] = w1;
        xs[1] = w2;
        tj_scan(body, NULL, "layer", 1, &x, 2, xs, 0, &h, NULL, c->policy);
    }
    tj_tree_set_v(out, "loss", tj_mean(tj_dot(h, wo, "embed"), "batch"));
}
static void stack_grads(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_tree *tmp = tj_tree_new(tj_graph_ctx(g));
    tj_v w[3], gr[3];
    stack_loss(g, in, tmp, u);
    w[0] = tj_tree_v(in, "w1");
    w[1] = tj_tree_v(in, "w2");
    w[2] = tj_tree_v(in, "x");
    tj_grad(tj_tree_v(tmp, "loss"), 3, w, gr);
    tj_tree_set_v(out, "loss", tj_tree_v(tmp, "loss"));
    tj_tree_set_v(out, "g_w1", gr[0]);
    tj_tree_set_v(out, "g_w2", gr[1]);
    tj_tree_set_v(out, "g_x", gr[2]);
    tj_tree_free(tmp);
}
/* gradient accumulation: an outer scan over micro-batches whose body runs
   the layer scan forward and backward; with an offload policy the inner
   scan's stacks live in the outer body's host memory */
typedef struct { const tj_policy *policy; } accum_cfg;
static void accum_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    accum_cfg *a = (accum_cfg *)u;
    tj_v xs[2], h = NULL, w[2], gr[2], loss;
    (void)g; (void)y;
    xs[0] = carry[2]; /* the weights ride along as carries so the body can differentiate them */
    xs[1] = carry[3];
    tj_scan(body, NULL, "layer", 1, &x[0], 2, xs, 0, &h, NULL, a->policy);
    loss = tj_mean(tj_mul(h, h), "batch embed");
    w[0] = carry[2];
    w[1] = carry[3];
    tj_grad(loss, 2, w, gr);
    carry_out[0] = tj_add(carry[0], gr[0]);
    carry_out[1] = tj_add(carry[1], gr[1]);
    carry_out[2] = carry[2];
    carry_out[3] = carry[3];
}
static void accum_grads(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v w1 = tj_tree_v(in, "w1"), w2 = tj_tree_v(in, "w2"), init[4], fin[4] = {NULL, NULL, NULL, NULL}, xm = tj_tree_v(in, "xm");
    (void)g;
    init[0] = tj_muls(w1, 0.0);
    init[1] = tj_muls(w2, 0.0);
    init[2] = w1;
    init[3] = w2;
    tj_scan(accum_body, u, "micro", 4, init, 1, &xm, 0, fin, NULL, NULL);
    tj_tree_set_v(out, "g_w1", fin[0]);
    tj_tree_set_v(out, "g_w2", fin[1]);
}
/* a body that differentiates with respect to a weight it closes over:
   sum over x rows of d/dw |x.w|^2 = 2 sum_x x (x.w) */
static void capgrad_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v w = *(tj_v *)u, t = tj_dot(x[0], w, "in"), gw;
    (void)g; (void)y;
    tj_grad(tj_sum(tj_mul(t, t), "out"), 1, &w, &gw);
    co[0] = tj_add(c[0], gw);
}
static void capgrad(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v w = tj_tree_v(in, "w"), x = tj_tree_v(in, "xm"), z = tj_muls(w, 0.0), s = NULL, ref;
    (void)g; (void)u;
    tj_scan(capgrad_body, &w, "micro", 1, &z, 1, &x, 0, &s, NULL, NULL);
    ref = tj_muls(tj_dot(x, tj_dot(x, w, "in"), "micro"), 2.0); /* (in, out) */
    tj_tree_set_v(out, "g", s);
    tj_tree_set_v(out, "ref", ref);
}
static tj_tree *make_inputs(tj_ctx *ctx, tj_dtype dt, int L, int B, int E, int H) {
    tj_tree *in = tj_tree_new(ctx);
    char s[128];
    snprintf(s, sizeof s, "batch=%d embed=%d", B, E);
    tj_tree_set_array(in, "x", tjt_rand(ctx, dt, s, 1, -1, 1));
    snprintf(s, sizeof s, "layer=%d embed=%d hidden=%d", L, E, H);
    tj_tree_set_array(in, "w1", tjt_rand(ctx, dt, s, 2, -0.5, 0.5));
    snprintf(s, sizeof s, "layer=%d hidden=%d embed=%d", L, H, E);
    tj_tree_set_array(in, "w2", tjt_rand(ctx, dt, s, 3, -0.5, 0.5));
    snprintf(s, sizeof s, "embed=%d", E);
    tj_tree_set_array(in, "wout", tjt_rand(ctx, dt, s, 4, -1, 1));
    return in;
}
static double maxdiff(tj_array *a, tj_array *b) {
    int64_t n = tj_array_numel(a), i;
    double *x = (double *)malloc(sizeof(double) * (size_t)n), *y = (double *)malloc(sizeof(double) * (size_t)n), m = 0;
    tj_array_read(a, TJ_F64, x);
    tj_array_read(b, TJ_F64, y);
    for (i = 0; i < n; i++) if (fabs(x[i] - y[i]) > m || x[i] != x[i]) m = fabs(x[i] - y[i]);
    free(x);
    free(y);
    return m;
}
static inline int bits_equal(tj_array *a, tj_array *b) {
    int64_t n = tj_array_numel(a) * (int64_t)tj_dtype_size(tj_array_dtype(a));
    void *x, *y;
    int eq;
    if (tj_array_numel(a) != tj_array_numel(b) || tj_array_dtype(a) != tj_array_dtype(b)) return 0;
    x = malloc((size_t)n + 1);
    y = malloc((size_t)n + 1);
    eq = x && y && !tj_array_read(a, tj_array_dtype(a), x) && !tj_array_read(b, tj_array_dtype(b), y) && memcmp(x, y, (size_t)n) == 0;
    free(x);
    free(y);
    return eq;
}
/* loss, g_x and g_w of out equal ref's to the bit (the same math under
   another policy) */
static void same_bits3(tj_tree *ref, tj_tree *out, const char *what) {
    static const char *nm[] = {"loss", "g_x", "g_w"};
    int k;
    for (k = 0; k < 3; k++)
        TJT_CHECK(bits_equal(tj_tree_array(ref, nm[k]), tj_tree_array(out, nm[k])), "%s: %s differs by %g", what, nm[k],
                  maxdiff(tj_tree_array(ref, nm[k]), tj_tree_array(out, nm[k])));
}

/* a body mixing its own values with outer ones, in either operand order */
static void mix_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    tj_v b = ((tj_v *)u)[0], w = ((tj_v *)u)[1]; /* outer values: (embed), (embed, e2) */
    (void)g; (void)x; (void)y;
    /* outer value first, body value second, in a binary op and in a dot */
    carry_out[0] = tj_add(tj_mul(b, tj_tanh(carry[0])), tj_rename(tj_dot(w, carry[0], "embed"), "e2", "embed"));
    carry_out[0] = tj_sub(carry_out[0], tj_mul(b, b));
}
static void mix_loss(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), ow[2], h;
    (void)g; (void)u;
    ow[0] = tj_tanh(tj_tree_v(in, "b")); /* made outside the body */
    ow[1] = tj_tree_v(in, "w");
    tj_scan(mix_body, ow, "layer=3", 1, &x, 0, NULL, 0, &h, NULL, NULL);
    tj_tree_set_v(out, "loss", tj_sum(tj_mul(h, h), "batch embed"));
}

/* nested: each layer scans a small inner loop over "sub" (two half-blocks) */
static void inner_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    (void)g; (void)u;
    carry_out[0] = tj_add(carry[0], tj_tanh(tj_mul(carry[0], x[0]))); /* x: (embed) scale per sub-step */
    y[0] = tj_sum(carry_out[0], "embed");                                /* (batch) per sub-step */
}
static void outer_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    tj_v h, ys;
    tj_policy *p = (tj_policy *)u;
    (void)g; (void)y;
    tj_scan(inner_body, NULL, "sub", 1, carry, 1, x, 1, &h, &ys, p);          /* x[0]: (sub, embed) */
    carry_out[0] = tj_add(h, tj_muls(tj_tanh(tj_mean(tj_mul(ys, ys), "sub")), 0.1)); /* broadcast over embed; tanh keeps it tame */
}
static void nested_loss(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), s = tj_tree_v(in, "s"), h;
    (void)g;
    tj_scan(outer_body, u, "layer", 1, &x, 1, &s, 0, &h, NULL, (tj_policy *)u);   /* s: (layer, sub, embed) */
    tj_tree_set_v(out, "loss", tj_sum(tj_mul(h, h), "batch embed"));
}
/* a remat region inside a scan body, and a scan inside a remat region */
static void region_fn(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = block(in[0], in[1], in[2]);
}
static void body_with_region(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    tj_v in[3];
    (void)g; (void)y;
    in[0] = carry[0]; in[1] = x[0]; in[2] = x[1];
    tj_checkpoint(region_fn, NULL, 3, in, 1, carry_out, (tj_policy *)u);
}
static void scan_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v xs[2];
    (void)g;
    xs[0] = in[1]; xs[1] = in[2];
    tj_scan(body_with_region, u, "layer", 1, in, 2, xs, 0, out, NULL, (tj_policy *)u);
}
static void remat_loss(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v a[3], h;
    (void)g;
    a[0] = tj_tree_v(in, "x"); a[1] = tj_tree_v(in, "w1"); a[2] = tj_tree_v(in, "w2");
    tj_checkpoint(scan_region, u, 3, a, 1, &h, (tj_policy *)u);
    tj_tree_set_v(out, "loss", tj_mean(tj_dot(h, tj_tree_v(in, "wout"), "embed"), "batch"));
}

/* a body with a loop-invariant value: tanh(u) of a captured u, the same in
   every iteration (JAX's scan saves such a residual once, not stacked) */
static void inv_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    tj_v ut = tj_tanh(*(const tj_v *)u);                                   /* (embed, e2) */
    tj_v h = tj_rename(tj_dot(carry[0], x[0], "embed"), "e2", "embed");
    (void)g; (void)y;
    carry_out[0] = tj_tanh(tj_rename(tj_dot(h, ut, "embed"), "e2", "embed"));
}
/* the same, tanh(u) named "ut" (to offload it) */
static void invo_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    tj_v ut = tj_checkpoint_name(tj_tanh(*(const tj_v *)u), "ut");
    tj_v h = tj_rename(tj_dot(carry[0], x[0], "embed"), "e2", "embed");
    (void)g; (void)y;
    carry_out[0] = tj_tanh(tj_rename(tj_dot(h, ut, "embed"), "e2", "embed"));
}
/* the loss of a scan of `body` over w with the captured u, and its gradients */
static void inv_grads_of(tj_scan_fn body, const tj_tree *in, tj_tree *out, void *pol) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), u = tj_tree_v(in, "u"), fin = NULL, wrt[3], gr[3], loss;
    tj_scan(body, &u, "layer", 1, &x, 1, &w, 0, &fin, NULL, (const tj_policy *)pol);
    loss = tj_sum_all(tj_mul(fin, fin));
    wrt[0] = x, wrt[1] = w, wrt[2] = u;
    tj_grad(loss, 3, wrt, gr);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w", gr[1]);
    tj_tree_set_v(out, "g_u", gr[2]);
}
static void invo_grads(tj_graph *g, const tj_tree *in, tj_tree *out, void *pol) {
    (void)g;
    inv_grads_of(invo_body, in, out, pol);
}
static void inv_grads(tj_graph *g, const tj_tree *in, tj_tree *out, void *pol) {
    (void)g;
    inv_grads_of(inv_body, in, out, pol);
}
/* nested remat regions: the outer policy decides whether the inner
   region's outputs cross the outer boundary, as in JAX (an outer
   nothing_saveable re-runs the inner region in the backward pass) */
static tj_policy nest_pol[3];
static void nest_inner(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_tanh(tj_checkpoint_name(tj_dot(in[0], in[1], "embed"), "h"));
}
static void nest_outer(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v a = NULL;
    (void)g;
    tj_checkpoint(nest_inner, NULL, 2, in, 1, &a, &nest_pol[((const int *)u)[1]]);
    out[0] = tj_tanh(tj_dot(tj_checkpoint_name(tj_exp(a), "g"), in[2], "ff"));
}
static void nest_grads(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x[3], o = NULL, gr[3], loss;
    int i;
    x[0] = tj_tree_v(in, "x"), x[1] = tj_tree_v(in, "w1"), x[2] = tj_tree_v(in, "w2");
    if (((const int *)u)[0] < 0) nest_outer(g, x, &o, u);
    else tj_checkpoint(nest_outer, u, 3, x, 1, &o, &nest_pol[((const int *)u)[0]]);
    loss = tj_sum_all(tj_mul(o, o));
    tj_grad(loss, 3, x, gr);
    tj_tree_set_v(out, "loss", loss);
    for (i = 0; i < 3; i++) tj_tree_set_v(out, i == 0 ? "g_x" : i == 1 ? "g_w1" : "g_w2", gr[i]);
}
/* a scan over a batch split over 4 devices, its carry offloaded */
static void shb_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)y; (void)u;
    co[0] = tj_rename(tj_checkpoint_name(tj_tanh(tj_dot(c[0], x[0], "embed")), "h"), "e2", "embed");
}
static void shb_grads(tj_graph *g, const tj_tree *in, tj_tree *out, void *pol) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), fin = NULL, wrt[2], gr[2], loss;
    (void)g;
    tj_scan(shb_body, NULL, "layer", 1, &x, 1, &w, 0, &fin, NULL, (const tj_policy *)pol);
    loss = tj_sum_all(tj_mul(fin, fin));
    wrt[0] = x, wrt[1] = w;
    tj_grad(loss, 2, wrt, gr);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w", gr[1]);
}

/* nested regions against JAX 0.10.2 (the probe, with x f32[4,8], w f32[8,8];
   ws f32[3,8,8] for the scan; policies P = nothing_saveable,
   everything_saveable, dots_saveable, save_only_these_names('h'),
   save_and_offload_only_these_names([], ['h'], 'device', 'pinned_host')):
     def inner(y, W): h = checkpoint_name(y @ W, 'h'); return h * jnp.tanh(h)
     def mid(y, W): return jax.checkpoint(inner, policy=P[i])(y, W)
     def f(x, W):
         y = checkpoint_name(jnp.tanh(x @ W), 'y')
         z = jax.checkpoint(mid, policy=P[m])(y, W)  # or inner, 2 deep
         return jnp.sum(z * z)
     saved_residuals(jax.checkpoint(f, policy=P[o]), x, W)
   and the scan: body(c, W) = (inner region of (checkpoint_name(tanh(c @ W),
   'y'), W), None); f(x, ws) = sum(c * c) for c, _ = lax.scan(
   jax.checkpoint(body, policy=P[o]), x, ws). JAX printed, besides the
   arguments, whatever the inner (and middle) policies:
     o = nothing: none;  dots: 2 x (4, 8) (output of dot_general, output of
     remat2: the dot inside);  save h: 1 x (4, 8) (output of remat2);
     offload h: the same 1 x (4, 8), moved to pinned_host (one device_put
     to Host in the jaxpr of the gradient; with o = nothing and i = offload
     h also one: the re-run inner region offloads it);
     scan: (4, 8) final carry and (3, 4, 8) stacked carry always, and per
     dot_general or h one more (3, 4, 8).
   (everything_saveable saves JVP coefficients, 7 rows here, which
   tinyjax's residuals of the backward pass are not: not compared.) */
enum { NP_NOTHING, NP_EVERYTHING, NP_DOTS, NP_NAMES, NP_OFFLOAD, NP_N };
static tj_policy np_pol[NP_N];
typedef struct { int o, m, i, scan; } np_cfg;
static void np_inner(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v h = tj_checkpoint_name(tj_rename(tj_dot(in[0], in[1], "embed"), "e2", "embed"), "h");
    (void)g; (void)u;
    out[0] = tj_mul(h, tj_tanh(h));
}
static void np_mid(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g;
    tj_checkpoint(np_inner, NULL, 2, in, 1, out, &np_pol[((const np_cfg *)u)->i]);
}
static tj_v np_layer(tj_v x, tj_v w, const np_cfg *c) {
    tj_v a[2], z = NULL;
    a[0] = tj_checkpoint_name(tj_tanh(tj_rename(tj_dot(x, w, "embed"), "e2", "embed")), "y");
    a[1] = w;
    if (c->m >= 0) tj_checkpoint(np_mid, (void *)c, 2, a, 1, &z, &np_pol[c->m]);
    else tj_checkpoint(np_inner, NULL, 2, a, 1, &z, &np_pol[c->i]);
    return z;
}
static void np_outer(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v z = np_layer(in[0], in[1], (const np_cfg *)u);
    (void)g;
    out[0] = tj_sum_all(tj_mul(z, z));
}
static void np_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)y;
    co[0] = np_layer(c[0], x[0], (const np_cfg *)u);
}
static void np_grads(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const np_cfg *c = (const np_cfg *)u;
    tj_v x[2], l = NULL, gr[2];
    (void)g;
    x[0] = tj_tree_v(in, "x"), x[1] = tj_tree_v(in, "w");
    if (c->scan) {
        tj_v fin = NULL;
        tj_scan(np_body, u, "layer", 1, &x[0], 1, &x[1], 0, &fin, NULL, &np_pol[c->o]);
        l = tj_sum_all(tj_mul(fin, fin));
    } else tj_checkpoint(np_outer, u, 2, x, 1, &l, &np_pol[c->o]);
    tj_grad(l, 2, x, gr);
    tj_tree_set_v(out, "loss", l);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w", gr[1]);
}
static tj_tree *np_inputs(tj_ctx *ctx, tj_dtype dt, int scan, int sharded) {
    tj_tree *in = tj_tree_new(ctx);
    tj_array *x = tjt_rand(ctx, dt, "batch=4 embed=8", 61, -1, 1), *w = tjt_rand(ctx, dt, scan ? "layer=3 embed=8 e2=8" : "embed=8 e2=8", 62, -0.5, 0.5);
    tj_tree_set_array(in, "x", sharded ? tjt_put(x, "batch:data") : x);
    tj_tree_set_array(in, "w", sharded ? tjt_put(w, "e2:model") : w);
    return in;
}
/* Checks the rows that cross the outermost boundary (nested = 0, not
   recomputed) against JAX's; returns the programs' outputs in o. */
static void np_check(tj_ctx *ctx, const np_cfg *c, tj_tree *in, tj_tree *o, int ndev) {
    static const char *pn[NP_N] = {"nothing", "everything", "dots", "names h", "offload h"};
    tj_prog *p = tj_jit(ctx, "nested policies", np_grads, (void *)c, in, NULL);
    int64_t len = c->scan ? 3 : 1, one = 4 * 8 * 4 * len;
    char what[128];
    snprintf(what, sizeof what, "%s outer %s%s%s inner %s (%d devices)", c->scan ? "scan" : "region", pn[c->o], c->m >= 0 ? " middle " : "",
             c->m >= 0 ? pn[c->m] : "", pn[c->i], ndev);
    TJT_CHECK(p && tj_run(p, in, o) == TJ_OK, "%s: %s", what, tj_error(ctx));
    if (!p) { tj_clear_error(ctx); return; }
    if (c->o != NP_EVERYTHING) {
        tj_residual rows[64];
        int nr = tj_prog_residuals(p, rows, 64), j, ndot = 0, nh = 0, ncarry = 0, other = 0, bad = 0;
        int64_t hdev = 0;
        for (j = 0; j < nr && j < 64; j++) {
            const tj_residual *r = &rows[j];
            if (r->nested || r->decision == TJ_RECOMPUTE) continue;
            if (r->bytes != one || r->device_bytes * ndev < one) bad++;
            if (r->carry && r->decision == TJ_SAVE) ncarry++;
            else if (!strcmp(r->op, "dot") && !r->name[0] && r->decision == TJ_SAVE) ndot++;
            else if (!strcmp(r->name, "h") && r->decision == (c->o == NP_OFFLOAD ? TJ_OFFLOAD : TJ_SAVE)) nh++, hdev = r->device_bytes;
            else other++;
        }
        TJT_CHECK(!bad && !other && ncarry == c->scan && ndot == (c->o == NP_DOTS ? 2 : 0) && nh == (c->o == NP_NAMES || c->o == NP_OFFLOAD),
                  "%s: kept across the outer boundary %d carries, %d dots, %d h, %d others, %d of the wrong size; JAX: %d, %d, %d, 0, 0", what, ncarry, ndot, nh,
                  other, bad, c->scan, c->o == NP_DOTS ? 2 : 0, c->o == NP_NAMES || c->o == NP_OFFLOAD);
        if (c->o == NP_OFFLOAD) { /* one host copy of h per iteration, in the memory plan and in the arena */
            tj_memory_analysis m = tj_prog_memory(p);
            TJT_CHECK(m.host_temp_bytes == tjt_align(hdev) && hdev * ndev >= one, "%s: host temp %lld B, want the row's %lld B per device", what,
                      (long long)m.host_temp_bytes, (long long)hdev);
        }
    }
    tj_prog_free(p);
}
/* review 2: a nested region's saved partial sum (a dot contracting an axis
   split over `model`, kept by the middle region's dots_saveable while the
   scan's policy recomputes it) reached the inner backward pass stacked
   [_remat=1] and was psummed when unstacked, then again by the recomputed
   psum (gradients 5-7% off on a mesh); and a second derivative through
   nested regions failed ("scan vjp: out of memory": the walker looked
   into the first derivative's backward regions, whose parameters are not
   captures) */
static tj_policy rv_pol[3];
static void rv_inner(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v a = tj_tanh(tj_rename(tj_dot(in[0], in[1], "h"), "h2", "h"));
    (void)g, (void)u;
    out[0] = tj_add(tj_mul(a, a), in[0]);
}
static void rv_outer(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v a = tj_checkpoint_name(tj_tanh(tj_rename(tj_dot(in[0], in[1], "h"), "h2", "h")), "h"), ins[2], o;
    (void)g, (void)u;
    ins[0] = a, ins[1] = in[1];
    tj_checkpoint(rv_inner, NULL, 2, ins, 1, &o, &rv_pol[1]);
    out[0] = tj_add(tj_mul(tj_tanh(a), o), in[0]);
}
static void rv_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v ins[2] = {c[0], x[0]};
    (void)g, (void)u, (void)y;
    tj_checkpoint(rv_outer, NULL, 2, ins, 1, co, &rv_pol[0]);
}
static void rv_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), fin, gr[2], wrt[2], loss;
    (void)g;
    tj_scan(rv_body, NULL, "layer", 1, &x, 1, &w, 0, &fin, NULL, &rv_pol[2]);
    wrt[0] = x, wrt[1] = w;
    tj_grad(loss = tj_sum_all(fin), 2, wrt, gr);
    if (u) { /* a second derivative: d/dx, d/dw of sum(gx) + sum(gw * gw) */
        loss = tj_add(tj_sum_all(gr[0]), tj_sum_all(tj_mul(gr[1], gr[1])));
        tj_grad(loss, 2, wrt, gr);
    }
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "gx", gr[0]);
    tj_tree_set_v(out, "gw", gr[1]);
}
static tj_tree *rv_inputs(tj_ctx *ctx, tj_dtype dt, const char *rules) {
    tj_tree *in = tj_tree_new(ctx);
    tj_tree_set_array(in, "x", tjt_rand(ctx, dt, "b=2 h=4", 1, -1, 1));
    tj_tree_set_array(in, "w", tjt_rand(ctx, dt, "layer=2 h=4 h2=4", 2, -1, 1));
    if (rules) tj_filter_shard(in, rules);
    return in;
}
static int rv_run(tj_ctx *ctx, tj_tree *in, int second, tj_tree *out) {
    tj_prog *p = tj_jit(ctx, "nested partial sums", rv_fn, second ? (void *)1 : NULL, in, NULL);
    int ok = p && !tj_run(p, in, out);
    if (!ok) {
        TJT_CHECK(0, "nested regions (second derivative %d): %s", second, tj_error(ctx));
        tj_clear_error(ctx);
    }
    tj_prog_free(p);
    return ok;
}

/* Programs past the runner's old fixed tables (tj__kern's 128 inputs and
   64 outputs, tj__k_scan's 128 parameters, 64 outputs, 32 carries, 64 xs,
   tj__node's 64 inputs, tj_scan's 32 carries, xs and ys, the scan VJP's 64
   and 128): 4 tj_grad calls through checkpoints 4 deep (a backward scan of
   70 outputs), 4 nested tj_grad through them, and a scan of 100 carries,
   100 xs, 100 ys closing over 200 weights. Until 2026-11-24 tj_jit
   refused the first ("the runner takes at most ..."), and tj_scan the last
   ("at most 32 each"); they now run, checked against finite differences
   and against the same computation unrolled, on one device and on two. */
/* checkpoint around a scan, as JAX 0.10.2 (the probe, x f32[2,4], ws
   f32[L,4,4]):
     def body(c, w):
         h = checkpoint_name(c @ w, 'h'); a = checkpoint_name(jnp.tanh(h), 'a')
         return a, None
     f = lambda ws, x: lax.scan(body, x, ws)[0].sum()
     print_saved_residuals(jax.checkpoint(f, policy=P), ws, x)
   printed, besides the arguments, for L = 3 and L = 1, and reverse=True
   alike: nothing_saveable none; dots_saveable,
   dots_with_no_batch_dims_saveable, save_only_these_names('h'),
   save_any_names_but_these('h') one f32[L,2,4];
   save_and_offload_only_these_names([], ['h']) and
   offload_dot_with_no_batch_dims one f32<host>[L,2,4] (everything_saveable:
   JVP coefficients, not compared). The gradient's jaxpr: the forward scan
   returns the final carry and that stack only; the backward pass runs a
   forward scan (the carry chain recomputed from x and the stack) that
   stacks what the reverse scan reads. With the body's own
   jax.checkpoint(body, policy=Q) (tinyjax: the scan's policy) the same for
   every Q. Under lax.scan(jax.checkpoint(ob, policy=P), x, ws2), ob running
   that scan over its slice of ws2 f32[2,3,4,4]: the outer carry f32[2,2,4]
   always, and one f32[2,3,2,4] more for the policies that keep one above
   (<host> for the offloading ones). */
enum { CS_NOTHING, CS_EVERYTHING, CS_DOTS, CS_DOTSNB, CS_NAMES, CS_ANYBUT, CS_OFFNAMES, CS_OFFDOTS, CS_N };
static tj_policy cs_pol[CS_N];
typedef struct { int p, q, outer, second; } cs_cfg; /* q: the scan's own policy, -1 none; outer: the scan runs in a scan with policy p;
                                                       second: the gradient of the gradients' squared norm */
static void cs_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v h = tj_checkpoint_name(tj_rename(tj_dot(c[0], x[0], "embed"), "e2", "embed"), "h");
    (void)g; (void)y; (void)u;
    co[0] = tj_checkpoint_name(tj_tanh(h), "a");
}
static void cs_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const cs_cfg *c = (const cs_cfg *)u;
    tj_v fin = NULL;
    (void)g;
    tj_scan(cs_body, NULL, "layer", 1, &in[0], 1, &in[1], 0, &fin, NULL, c->q >= 0 ? &cs_pol[c->q] : NULL);
    out[0] = tj_sum_all(fin);
}
static void cs_obody(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)y; (void)u;
    tj_scan(cs_body, NULL, "layer", 1, &c[0], 1, &x[0], 0, &co[0], NULL, NULL);
}
static void cs_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const cs_cfg *c = (const cs_cfg *)u;
    tj_v x[2], l = NULL, gr[2];
    (void)g;
    x[0] = tj_tree_v(in, "x"), x[1] = tj_tree_v(in, "w");
    if (c->outer) {
        tj_v fin = NULL;
        tj_scan(cs_obody, NULL, "outer", 1, &x[0], 1, &x[1], 0, &fin, NULL, &cs_pol[c->p]);
        l = tj_sum_all(fin);
    } else tj_checkpoint(cs_region, u, 2, x, 1, &l, &cs_pol[c->p]);
    tj_grad(l, 2, x, gr);
    if (c->second) {
        l = tj_add(tj_sum_all(tj_mul(gr[0], gr[0])), tj_sum_all(tj_mul(gr[1], gr[1])));
        tj_grad(l, 2, x, gr);
    }
    tj_tree_set_v(out, "loss", l);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w", gr[1]);
}
static tj_tree *cs_inputs(tj_ctx *ctx, tj_dtype dt, int L, int outer, int sharded) {
    char ws[64];
    tj_tree *in = tj_tree_new(ctx);
    tj_array *x = tjt_rand(ctx, dt, "batch=2 embed=4", 71, -1, 1), *w;
    snprintf(ws, sizeof ws, "%slayer=%d embed=4 e2=4", outer ? "outer=2 " : "", L);
    w = tjt_rand(ctx, dt, ws, 72, -0.5, 0.5);
    tj_tree_set_array(in, "x", sharded ? tjt_put(x, "batch:data") : x);
    tj_tree_set_array(in, "w", sharded ? tjt_put(w, "e2:model") : w);
    return in;
}
/* Runs cfg c; checks the rows that cross the outermost boundary against
   JAX's (above) and the memory plan against what the run allocates. */
static void cs_check(tj_ctx *ctx, const cs_cfg *c, int L, tj_tree *in, tj_tree *o, int ndev) {
    static const char *pn[CS_N] = {"nothing", "everything", "dots", "dots no batch", "names h", "any names but h", "offload h", "offload dots"};
    tj_prog *p = tj_jit(ctx, "checkpoint around a scan", cs_fn, (void *)c, in, NULL);
    int K = c->outer ? 2 : 1, keep = c->p != CS_NOTHING, off = c->p == CS_OFFNAMES || c->p == CS_OFFDOTS;
    int64_t stack = 2 * 4 * 4 * (int64_t)L * K, ocarry = 2 * 4 * 4 * 2;
    char what[160];
    snprintf(what, sizeof what, "%s %s over a scan (policy %s) of length %d (%d devices)", c->outer ? "scan" : "checkpoint", pn[c->p], c->q >= 0 ? pn[c->q] : "none", L, ndev);
    TJT_CHECK(p && tj_run(p, in, o) == TJ_OK, "%s: %s", what, tj_error(ctx));
    if (!p) { tj_clear_error(ctx); return; }
    if (c->p != CS_EVERYTHING) {
        tj_residual rows[128];
        int nr = tj_prog_residuals(p, rows, 128), j, nstack = 0, ncar = 0, other = 0;
        for (j = 0; j < nr && j < 128; j++) {
            const tj_residual *r = &rows[j];
            if (r->nested || r->decision == TJ_RECOMPUTE) continue;
            if (r->bytes == stack && r->decision == (off ? TJ_OFFLOAD : TJ_SAVE) && (r->device_bytes * ndev >= stack)) nstack++;
            else if (c->outer && r->carry && r->bytes == ocarry && r->decision == TJ_SAVE) ncar++;
            else other++;
        }
        TJT_CHECK(nstack == keep && ncar == c->outer && !other, "%s: kept across the boundary %d stacks of %lld B, %d outer carries, %d others; JAX: %d, %d, 0", what,
                  nstack, (long long)stack, ncar, other, keep, c->outer);
    }
    { /* the plan is what the run holds (every device's arenas); host memory
         where the policy offloads, or where it recomputes a value that the
         scan's own policy offloads (the re-run offloads it again: JAX's
         gradient has a device_put to the host then too, and none where the
         outer policy keeps h, or keeps the dot and the scan's policy
         offloads dots; at length 1 the scan's backward pass keeps the tanh
         its one iteration returns, tinyjax's refinement for regions, so
         it needs no h) */
        tj_memory_analysis m = tj_prog_memory(p);
        int qoff = L > 1 && ((c->q == CS_OFFNAMES && c->p != CS_NAMES && c->p != CS_EVERYTHING) ||
                                      (c->q == CS_OFFDOTS && c->p != CS_DOTS && c->p != CS_DOTSNB && c->p != CS_NAMES && c->p != CS_EVERYTHING));
        TJT_CHECK(tj_get_alloc_stats(ctx).arena_bytes == ndev * (m.temp_bytes + m.host_temp_bytes), "%s: the arenas held (%lld B) are not %d x the plan's %lld + %lld B",
                  what, (long long)tj_get_alloc_stats(ctx).arena_bytes, ndev, (long long)m.temp_bytes, (long long)m.host_temp_bytes);
        TJT_CHECK((off || qoff) == (m.host_temp_bytes > 0), "%s: host temp %lld B", what, (long long)m.host_temp_bytes);
    }
    tj_prog_free(p);
}
/* ... and around or inside a shard_map. JAX 0.10.2, mesh d=2, x f32[4,4]
   split over d, ws f32[3,4,4] replicated, in_specs (P('d'), P()), out_specs
   P('d'), body and policies as above: saved_residuals of
   jax.checkpoint(lambda ws, x: shard_map(scan)(x, ws).sum(), policy=P) and
   of shard_map(jax.checkpoint(scan, policy=P)) alike: nothing_saveable
   none; dots_saveable, save_only_these_names('h') and the offload of h one
   f32[6,2,4] (each device's f32[3,2,4] stack, side by side). */
typedef struct { int p, mode, check; } sm_cfg; /* mode 0: shard_map(checkpoint(scan)); 1: checkpoint(shard_map(scan)) */
static void sm_scan(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    tj_scan(cs_body, NULL, "layer", 1, &in[0], 1, &in[1], 0, &out[0], NULL, NULL);
}
static void sm_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const sm_cfg *c = (const sm_cfg *)u;
    if (c->mode == 0) tj_checkpoint(sm_scan, NULL, 2, in, 1, out, &cs_pol[c->p]);
    else sm_scan(g, in, out, NULL);
}
static void sm_map(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const char *is[2] = {"batch:data", ""}, *os[1] = {"batch:data"};
    (void)g;
    tj_shard_map(sm_body, u, 2, in, is, 1, out, os, ((const sm_cfg *)u)->check);
}
static void sm_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const sm_cfg *c = (const sm_cfg *)u;
    tj_v x[2], y = NULL, l, gr[2];
    x[0] = tj_tree_v(in, "x"), x[1] = tj_tree_v(in, "w");
    if (c->mode == 0) sm_map(g, x, &y, u);
    else tj_checkpoint(sm_map, u, 2, x, 1, &y, &cs_pol[c->p]);
    l = tj_sum_all(tj_mul(y, y));
    tj_grad(l, 2, x, gr);
    tj_tree_set_v(out, "loss", l);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w", gr[1]);
}
static tj_tree *sm_inputs(tj_ctx *ctx, tj_dtype dt, int sharded) {
    tj_tree *in = tj_tree_new(ctx);
    tj_array *x = tjt_rand(ctx, dt, "batch=4 embed=4", 73, -1, 1);
    tj_tree_set_array(in, "x", sharded ? tjt_put(x, "batch:data") : x); /* (the shard_map splits it) */
    tj_tree_set_array(in, "w", tjt_rand(ctx, dt, "layer=3 embed=4 e2=4", 74, -0.5, 0.5));
    return in;
}
/* ... and around a tj_custom_vjp: JAX 0.10.2's policy sees into a
   custom_vjp's fwd (f(x, w) = tanh(x @ w) with fwd naming x @ w 'h' and
   returning (x, w, y) as residuals; loss sum(sin(f(x, w))), x f32[2,4],
   w f32[4,4]): print_saved_residuals of jax.checkpoint(loss, policy=P)
   shows, besides the arguments, nothing_saveable none, dots_saveable the
   fwd's dot, save_only_these_names('h') h. (tinyjax kept the custom_vjp's
   output until 2026-11-24.) */
static const tj_policy *cv_pol;
static void cv_fwd(tj_graph *g, const tj_v *in, tj_v *y, tj_v *r, void *u) {
    tj_v h = tj_checkpoint_name(tj_rename(tj_dot(in[0], in[1], "embed"), "e2", "embed"), "h");
    (void)g; (void)u;
    y[0] = tj_tanh(h);
    r[0] = in[0], r[1] = in[1], r[2] = y[0];
}
static void cv_bwd(tj_graph *g, const tj_v *r, const tj_v *ct, tj_v *gx, void *u) {
    tj_v gh = tj_rename(tj_sub(ct[0], tj_mul(ct[0], tj_mul(r[2], r[2]))), "embed", "e2");
    (void)g; (void)u;
    gx[0] = tj_dot(gh, r[1], "e2");
    gx[1] = tj_dot(r[0], gh, "batch");
}
static void cv_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v y = NULL;
    (void)g; (void)u;
    tj_custom_vjp(cv_fwd, cv_bwd, NULL, 2, in, 1, &y, 3);
    out[0] = tj_sum_all(tj_exp(y));
}
static void cv_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x[2], l = NULL, gr[2];
    (void)g; (void)u;
    x[0] = tj_tree_v(in, "x"), x[1] = tj_tree_v(in, "w");
    tj_checkpoint(cv_region, NULL, 2, x, 1, &l, cv_pol);
    tj_grad(l, 2, x, gr);
    tj_tree_set_v(out, "loss", l);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w", gr[1]);
}
/* ... and around a kernel of the user's (tj_custom): JAX's remat judges
   a primitive's output like any other (a jax.extend Primitive sq, x * x,
   with a JVP rule: print_saved_residuals of jax.checkpoint(lambda x, w:
   exp(sq(x @ w) * 0.1).sum(), policy=P) shows nothing_saveable none,
   dots_saveable the dot), and re-runs the primitive for the rest. (tinyjax
   kept a custom op's outputs until 2026-11-24.) */
static void sq_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *u) {
    int64_t n = 1, i;
    int k;
    (void)nin; (void)nout; (void)u;
    for (k = 0; k < in[0].rank; k++) n *= in[0].dim[k];
    for (i = 0; i < n; i++) ((double *)out[0].data)[i] = ((const double *)in[0].data)[i] * ((const double *)in[0].data)[i];
}
static tj_status sq_vjp(tj_graph *g, int nin, const tj_v *in, int nout, const tj_v *out, const tj_v *ct, tj_v *gin, void *u) {
    (void)g; (void)nin; (void)nout; (void)out; (void)u;
    gin[0] = tj_mul(tj_muls(in[0], 2.0), ct[0]);
    return TJ_OK;
}
static void sq_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v h = tj_dot(in[0], in[1], "embed"), y = NULL;
    (void)g; (void)u;
    tj_custom("sq", 1, &h, &y);
    out[0] = tj_sum_all(tj_exp(tj_muls(y, 0.1)));
}
static void sq_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x[2], l = NULL, gr[2];
    (void)g;
    x[0] = tj_tree_v(in, "x"), x[1] = tj_tree_v(in, "w");
    tj_checkpoint(sq_region, NULL, 2, x, 1, &l, (const tj_policy *)u);
    tj_grad(l, 2, x, gr);
    tj_tree_set_v(out, "loss", l);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w", gr[1]);
}
/* Nested scans re-run under an enclosing policy (tj__rerun_scan), as an
   adversarial review of 2026-11-24 broke them: a step with two carries
   (c0 [batch embed], c1 [embed]) and an optional i32 counter, xs w and
   b, ys; run as checkpoint(scan(checkpoint(step))) (mode 1), as
   scan(checkpoint(K scans in series)) (mode 2) and as
   checkpoint(scan(K scans in series)) (mode 3). Every policy must give
   everything_saveable's values (f64, to rounding) and the plan what the
   run allocates. Before the fixes: mode 1 failed to compile ("the re-run
   of a nested scan made output 3 with another type or memory space": a
   region's residual stacked [_remat=1], and one its own policy offloaded),
   mode 2 with two scans wrote past a walker's row table (a stack a re-run
   added; heap corruption), and mode 3 with three scans stopped at "more
   than 8 nested scans recomputed" (a carry that was chained but not
   asked for made a second re-run of the same scan, and so on). */
enum { NR_EV, NR_NO, NR_DOTS, NR_NAMES, NR_OFFH, NR_SAVEA_OFFH, NR_OFFDOTS, NR_N };
static tj_policy nr_pol[NR_N];
typedef struct { int mode, p, q, k, ic, nograd, extra; } nr_cfg; /* nograd: the loss alone (for tjt_gradcheck); extra: more tj_grad calls */
static void nr_step(const nr_cfg *c, tj_v c0, tj_v c1, tj_v ci, tj_v w, tj_v b, tj_v *o0, tj_v *o1, tj_v *oi, tj_v *y) {
    tj_v h = tj_checkpoint_name(tj_rename(tj_dot(c0, w, "embed"), "e2", "embed"), "h");
    tj_v a = tj_checkpoint_name(tj_add(tj_tanh(h), tj_mul(b, c1)), "a");
    (void)c;
    *o0 = tj_add(tj_mul(a, tj_tanh(c1)), tj_muls(c0, 0.5));
    *o1 = tj_add(c1, tj_muls(tj_sum(tj_mul(a, a), "batch"), 0.1));
    if (ci) {
        *o1 = tj_add(*o1, tj_muls(tj_cast(ci, TJ_F64), 0.01));
        *oi = tj_adds(ci, 1);
    }
    *y = tj_sum(a, "embed");
}
static void nr_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    const nr_cfg *cf = (const nr_cfg *)u;
    (void)g;
    nr_step(cf, c[0], c[1], cf->ic ? c[2] : NULL, x[0], x[1], &co[0], &co[1], cf->ic ? &co[2] : NULL, &y[0]);
}
static void nr_series(const nr_cfg *c, tj_v *car, tj_v W, tj_v Bv, tj_v *Y) { /* c->k scans in series */
    int k;
    tj_v xs[2] = {W, Bv};
    *Y = NULL;
    for (k = 0; k < c->k; k++) {
        tj_v fin[3], ys = NULL;
        tj_scan(nr_body, (void *)c, "layer", c->ic ? 3 : 2, car, 2, xs, 1, fin, &ys, NULL);
        car[0] = fin[0], car[1] = fin[1];
        if (c->ic) car[2] = fin[2];
        if (!ys) return;
        *Y = *Y ? tj_add(*Y, tj_mul(ys, ys)) : ys;
    }
}
static void nr_reg_series(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const nr_cfg *c = (const nr_cfg *)u;
    tj_v car[3] = {in[0], in[1], c->ic ? in[4] : NULL}, Y;
    (void)g;
    nr_series(c, car, in[2], in[3], &Y);
    out[0] = car[0], out[1] = car[1], out[2] = Y;
    if (c->ic) out[3] = car[2];
}
static void nr_reg_step(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const nr_cfg *c = (const nr_cfg *)u;
    (void)g;
    nr_step(c, in[0], in[1], c->ic ? in[4] : NULL, in[2], in[3], &out[0], &out[1], c->ic ? &out[3] : NULL, &out[2]);
}
static void nr_mid(tj_graph *g, const tj_v *cr, const tj_v *x, tj_v *co, tj_v *y, void *u) { /* mode 1's scan body, mode 2's and 3's outer body */
    const nr_cfg *c = (const nr_cfg *)u;
    tj_v in[5] = {cr[0], cr[1], x[0], x[1], c->ic ? cr[2] : NULL}, out[4] = {NULL, NULL, NULL, NULL};
    (void)g;
    if (c->mode == 1) tj_checkpoint(nr_reg_step, u, c->ic ? 5 : 4, in, c->ic ? 4 : 3, out, c->q >= 0 ? &nr_pol[c->q] : NULL);
    else if (c->mode == 2) tj_checkpoint(nr_reg_series, u, c->ic ? 5 : 4, in, c->ic ? 4 : 3, out, c->q >= 0 ? &nr_pol[c->q] : NULL);
    else {
        tj_v car[3] = {cr[0], cr[1], c->ic ? cr[2] : NULL};
        nr_series(c, car, x[0], x[1], &out[2]);
        out[0] = car[0], out[1] = car[1], out[3] = car[2];
    }
    co[0] = out[0], co[1] = out[1];
    if (c->ic) co[2] = out[3];
    y[0] = out[2] && c->mode != 1 ? tj_sum(out[2], "layer") : out[2];
}
static void nr_reg_scan(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const nr_cfg *c = (const nr_cfg *)u;
    tj_v car[3] = {in[0], in[1], c->ic ? in[4] : NULL}, xs[2] = {in[2], in[3]}, fin[3], ys = NULL;
    (void)g;
    tj_scan(nr_mid, u, c->mode == 1 ? "layer" : "outer", c->ic ? 3 : 2, car, 2, xs, 1, fin, &ys, NULL);
    out[0] = fin[0], out[1] = fin[1], out[2] = ys;
    if (c->ic) out[3] = fin[2];
}
static void nr_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const nr_cfg *c = (const nr_cfg *)u;
    tj_v x = tj_tree_v(in, "x"), cv = tj_tree_v(in, "c"), w = tj_tree_v(in, "w"), b = tj_tree_v(in, "b");
    tj_v wrt[4] = {x, cv, w, b}, gr[4], o[4] = {NULL, NULL, NULL, NULL}, loss;
    tj_v ins[5] = {x, cv, w, b, c->ic ? tj_fill(g, TJ_I32, "", 3) : NULL};
    int i;
    if (c->mode == 2) {
        tj_v fin[3], ys = NULL;
        tj_scan(nr_mid, u, "outer", c->ic ? 3 : 2, ins, 2, &ins[2], 1, fin, &ys, &nr_pol[c->p]);
        o[0] = fin[0], o[1] = fin[1], o[2] = ys;
    } else tj_checkpoint(nr_reg_scan, u, c->ic ? 5 : 4, ins, c->ic ? 4 : 3, o, &nr_pol[c->p]);
    if (!o[0] || !o[1] || !o[2]) return;
    loss = tj_add(tj_add(tj_sum_all(tj_tanh(o[0])), tj_sum_all(tj_mul(o[1], o[1]))), tj_sum_all(tj_mul(o[2], o[2])));
    tj_tree_set_v(out, "loss", loss);
    if (c->nograd || tj_grad(loss, 4, wrt, gr)) return;
    for (i = 0; i < c->extra; i++) { /* gradients of gradients: each tj_grad adds residual outputs to the scans */
        loss = tj_add(loss, tj_sum_all(tj_mul(gr[i % 4], gr[i % 4])));
        if (tj_grad(loss, 4, wrt, gr)) return;
    }
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_c", gr[1]);
    tj_tree_set_v(out, "g_w", gr[2]);
    tj_tree_set_v(out, "g_b", gr[3]);
}
static double nr_reldiff(tj_array *a, tj_array *b) { /* (missing or unlike arrays: infinitely far) */
    int64_t n = a && b ? tj_array_numel(a) : -1, i;
    double *x, *y, m = 0;
    if (n < 0 || tj_array_numel(b) != n) return INFINITY;
    x = (double *)malloc(sizeof(double) * (size_t)(n + 1));
    y = (double *)malloc(sizeof(double) * (size_t)(n + 1));
    tj_array_read(a, TJ_F64, x);
    tj_array_read(b, TJ_F64, y);
    for (i = 0; i < n; i++) {
        double d = fabs(x[i] - y[i]) / (1e-12 + fabs(x[i]) + fabs(y[i]));
        if (!(d <= m)) m = d;
    }
    free(x);
    free(y);
    return m;
}
static void test_nested_rerun(tj_ctx *ctx) {
    static const nr_cfg cf[] = {{1, 0, -1, 1, 0, 0, 0}, {1, 0, NR_OFFH, 1, 1, 0, 0}, {2, 0, NR_NO, 2, 0, 0, 0}, {3, 0, NR_OFFH, 3, 1, 0, 0}, {3, 0, -1, 2, 0, 0, 0}};
    static const int L[] = {3, 1, 2, 1, 2};
    int i, p;
    nr_pol[NR_EV] = tj_everything_saveable();
    nr_pol[NR_NO] = tj_nothing_saveable();
    nr_pol[NR_DOTS] = tj_dots_saveable();
    nr_pol[NR_NAMES] = tj_save_only_these_names("h");
    nr_pol[NR_OFFH] = tj_save_and_offload_only_these_names("", "h");
    nr_pol[NR_SAVEA_OFFH] = tj_save_and_offload_only_these_names("a", "h");
    nr_pol[NR_OFFDOTS] = tj_offload_dot_with_no_batch_dims();
    tjt_current = "nested scans re-run: checkpoint(scan(checkpoint)), scans in series";
    for (i = 0; i < (int)(sizeof cf / sizeof cf[0]); i++) {
        tj_tree *in = tj_tree_new(ctx), *ref = NULL;
        char s[96];
        const char *outer = cf[i].mode == 1 ? "" : "outer=2 ";
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "batch=2 embed=4", 11, -1, 1));
        tj_tree_set_array(in, "c", tjt_rand(ctx, TJ_F64, "embed=4", 14, -0.5, 0.5));
        snprintf(s, sizeof s, "%slayer=%d embed=4 e2=4", outer, L[i]);
        tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F64, s, 12, -0.7, 0.7));
        snprintf(s, sizeof s, "%slayer=%d embed=4", outer, L[i]);
        tj_tree_set_array(in, "b", tjt_rand(ctx, TJ_F64, s, 13, -0.5, 0.5));
        for (p = 0; p < NR_N; p++) {
            nr_cfg c = cf[i];
            tj_tree *out = tj_tree_new(ctx);
            tj_prog *pr;
            char what[128];
            c.p = p;
            snprintf(what, sizeof what, "mode %d, %d scans, policy %d, inner %d, i32 carry %d", c.mode, c.k, p, c.q, c.ic);
            pr = tj_jit(ctx, "nested re-run", nr_fn, &c, in, NULL);
            TJT_CHECK(pr && tj_run(pr, in, out) == TJ_OK, "%s: %s", what, tj_error(ctx));
            if (pr) {
                tj_memory_analysis m = tj_prog_memory(pr);
                TJT_CHECK(tj_get_alloc_stats(ctx).arena_bytes == m.temp_bytes + m.host_temp_bytes, "%s: the arenas held (%lld B) are not the plan's %lld + %lld B", what,
                          (long long)tj_get_alloc_stats(ctx).arena_bytes, (long long)m.temp_bytes, (long long)m.host_temp_bytes);
            }
            tj_clear_error(ctx);
            tj_prog_free(pr);
            if (!ref) ref = out;
            else {
                static const char *nm[] = {"loss", "g_x", "g_c", "g_w", "g_b"};
                int j;
                for (j = 0; j < 5 && tj_tree_size(out) == 5; j++)
                    TJT_CHECK(nr_reldiff(tj_tree_array(ref, nm[j]), tj_tree_array(out, nm[j])) < 1e-12, "%s: %s differs from everything_saveable by %g (relative)", what, nm[j],
                              nr_reldiff(tj_tree_array(ref, nm[j]), tj_tree_array(out, nm[j])));
                tj_tree_free(out);
            }
        }
        if (i == 3) {
            nr_cfg c = cf[i];
            c.p = NR_SAVEA_OFFH;
            c.nograd = 1;
            TJT_GRADCHECK(ctx, "checkpoint(scan(3 scans in series)), save a offload h", nr_fn, &c, in, "w"); /* (one wrt: each tj_grad adds its stacks to the scans, and four pass the runner's limits) */
        }
        if (i == 4) { /* eight nested scans re-run in one body, nine and twelve: the walker's table of re-runs grows (until 2026-11-24
                         nine were refused, "more than 8 nested scans recomputed"; before that nine wrote past the table when the re-runs
                         of the scans before it were made during its own: a crash in mode 3); nothing_saveable's values are
                         everything_saveable's */
            int m, k;
            for (m = 0; m < 2; m++)
                for (k = 8; k <= 12; k += k == 8 ? 1 : 3) {
                    nr_cfg c = {3, NR_NO, -1, k, 0, 0, 0}, e; /* (the second time with an i32 carry) */
                    tj_prog *pr, *pe;
                    tj_tree *o1 = tj_tree_new(ctx), *o2 = tj_tree_new(ctx);
                    c.ic = m;
                    e = c;
                    e.p = NR_EV;
                    pr = tj_jit(ctx, "nested re-run, 8, 9 and 12 scans", nr_fn, &c, in, NULL);
                    pe = tj_jit(ctx, "nested re-run, 8, 9 and 12 scans, everything saveable", nr_fn, &e, in, NULL);
                    TJT_CHECK(pr && pe && tj_run(pr, in, o1) == TJ_OK && tj_run(pe, in, o2) == TJ_OK && tj_tree_size(o1) == 5 && tj_tree_size(o2) == 5,
                              "%d nested scans re-run in one body: %s", k, tj_error(ctx));
                    /* (values: with the i32 carry, 9 scans in series overflow to inf, either policy; 8 are finite) */
                    if (tj_tree_size(o1) == 5 && tj_tree_size(o2) == 5 && (m == 0 || k == 8)) {
                        static const char *nm[] = {"loss", "g_x", "g_c", "g_w", "g_b"};
                        int j;
                        for (j = 0; j < 5; j++)
                            TJT_CHECK(nr_reldiff(tj_tree_array(o2, nm[j]), tj_tree_array(o1, nm[j])) < 1e-12, "%d nested scans: %s differs from everything_saveable by %g", k,
                                      nm[j], nr_reldiff(tj_tree_array(o2, nm[j]), tj_tree_array(o1, nm[j])));
                    }
                    tj_clear_error(ctx);
                    tj_prog_free(pr);
                    tj_prog_free(pe);
                    tj_tree_free(o1);
                    tj_tree_free(o2);
                }
        }
        if (i == 4) { /* derivatives of derivatives until a limit: an error naming it and the scan's line */
            nr_cfg c = cf[i];
            tj_tree *out = tj_tree_new(ctx);
            tj_prog *pr;
            c.p = NR_NO, c.extra = 3;
            pr = tj_jit(ctx, "nested re-run, gradients of gradients", nr_fn, &c, in, NULL);
            if (pr) TJT_CHECK(tj_run(pr, in, out) == TJ_OK, "%d derivatives: %s", 1 + c.extra, tj_error(ctx));
            else
                TJT_CHECK(strstr(tj_error(ctx), " 64") && strstr(tj_error(ctx), "test_scan.c:"), "%d derivatives: the error names the limit and the line: %s", 1 + c.extra,
                          tj_error(ctx));
            tj_clear_error(ctx);
            tj_prog_free(pr);
            tj_tree_free(out);
        }
        tj_tree_free(ref);
        tj_tree_free(in);
    }
}
/* An offloading policy and a partial sum (found 2026-11-24): a dot over
   an axis split over `model` leaves each device a partial sum, which an
   offload copied to host memory after adding it up (the offload op's
   sharding rule) while the backward pass read it back as the partial sum
   and added it up again: gradients twice too large in that term, in a
   plain tj_scan with an offloading policy as under a tj_checkpoint around
   it. And in a second derivative of checkpoint(offloading policy)(scan),
   the enclosing policy saw into the clone of the scan's backward scan (a
   scan autodiff made, which it must not re-run), and re-ran it with that
   partial sum. mode 0: scan(P); 1: checkpoint(P)(scan); 2: as 1, the
   second derivative. */
static tj_policy po_pol;
static void po_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    int two = (int)(intptr_t)u;
    (void)g; (void)y;
    if (two) co[0] = tj_tanh(tj_dot(tj_tanh(tj_dot(c[0], x[0], "embed")), x[0], "e2")); /* the second dot: a partial sum over model */
    else co[0] = tj_tanh(tj_rename(tj_dot(c[0], x[0], "embed"), "e2", "embed"));
}
static void po_reg(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g;
    tj_scan(po_body, u, "layer", 1, &in[0], 1, &in[1], 0, &out[0], NULL, NULL);
}
static void po_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int mode = (int)(intptr_t)u;
    tj_v x[2] = {tj_tree_v(in, "x"), tj_tree_v(in, "w")}, o = NULL, l, gr[2];
    (void)g;
    if (mode == 0) tj_scan(po_body, (void *)1, "layer", 1, &x[0], 1, &x[1], 0, &o, NULL, &po_pol);
    else tj_checkpoint(po_reg, (void *)(intptr_t)(mode == 1), 2, x, 1, &o, &po_pol);
    l = tj_sum_all(tj_mul(o, o));
    tj_grad(l, 2, x, gr);
    if (mode == 2) {
        l = tj_add(tj_sum_all(tj_mul(gr[0], gr[0])), tj_sum_all(tj_mul(gr[1], gr[1])));
        tj_grad(l, 2, x, gr);
    }
    tj_tree_set_v(out, "loss", l);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w", gr[1]);
}
static tj_decision po_all_dots(const char *op, const char *name, const char *shape, void *u) {
    (void)name, (void)shape, (void)u;
    return strcmp(op, "dot") == 0 ? TJ_OFFLOAD : TJ_RECOMPUTE;
}
static void test_partial_offload(void) {
    int mode, pk, k, j;
    tjt_current = "offloading a partial sum";
    for (pk = 0; pk < 2; pk++) {
        po_pol = pk ? tj_offload_dot_with_no_batch_dims() : tj_policy_from_fn(po_all_dots, NULL);
        for (mode = 0; mode < 3; mode++) {
            tj_ctx *cs[2];
            tj_tree *o[2];
            for (k = 0; k < 2; k++) {
                tj_ctx *c = cs[k] = tj_ctx_new();
                tj_tree *in = tj_tree_new(c);
                tj_array *x, *w;
                tj_prog *p;
                if (k) {
                    tj_set_devices(c, 2);
                    tj_set_mesh(c, "model=2");
                }
                x = tjt_rand(c, TJ_F64, "batch=2 embed=4", 1, -1, 1), w = tjt_rand(c, TJ_F64, "layer=2 embed=4 e2=4", 2, -0.7, 0.7);
                if (k) w = tjt_put(w, "e2:model");
                tj_tree_set_array(in, "x", x);
                tj_tree_set_array(in, "w", w);
                o[k] = tj_tree_new(c);
                p = tj_jit(c, "partial offload", po_fn, (void *)(intptr_t)mode, in, NULL);
                TJT_CHECK(p && tj_run(p, in, o[k]) == TJ_OK, "policy %d, mode %d on %d devices: %s", pk, mode, k + 1, tj_error(c));
                if (p) TJT_CHECK(tj_prog_memory(p).host_temp_bytes > 0, "policy %d, mode %d: nothing offloaded", pk, mode);
                tj_prog_free(p);
                tj_tree_free(in);
            }
            for (j = 0; j < 3 && tj_tree_size(o[0]) == 3 && tj_tree_size(o[1]) == 3; j++) {
                static const char *nm[] = {"loss", "g_x", "g_w"};
                double d = maxdiff(tj_tree_array(o[0], nm[j]), tj_tree_array(o[1], nm[j]));
                TJT_CHECK(d < 1e-12, "policy %d, mode %d: %s on 2 devices (model=2) differs from one device by %g", pk, mode, nm[j], d);
            }
            for (k = 0; k < 2; k++) {
                tj_tree_free(o[k]);
                tj_ctx_free(cs[k]);
            }
        }
    }
}
/* A second derivative through shard_map(checkpoint(save_only_these_names
   "h")(scan)): the shard_map's backward body holds a clone of the
   region's backward region (pass 0 there), whose first VJP linted the
   forward policy's names against that backward body and warned "no value
   in the scan or checkpoint body carries the name 'h'" (2026-11-24). */
static void lb_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x[2], y = NULL, l, gr[2];
    x[0] = tj_tree_v(in, "x"), x[1] = tj_tree_v(in, "w");
    sm_map(g, x, &y, u);
    l = tj_sum_all(tj_mul(y, y));
    tj_grad(l, 2, x, gr);
    l = tj_add(tj_sum_all(tj_mul(gr[0], gr[0])), tj_sum_all(tj_mul(gr[1], gr[1])));
    tj_grad(l, 2, x, gr);
    tj_tree_set_v(out, "loss", l);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w", gr[1]);
}
static void test_lint_backward(void) {
    tj_ctx *c2 = tj_ctx_new();
    sm_cfg c = {CS_NAMES, 0, 1};
    tj_tree *sin;
    tj_prog *p;
    char lint[2048] = "";
    tjt_current = "the policy's names, linted once";
    tj_set_devices(c2, 2);
    tj_set_mesh(c2, "data=2");
    sin = sm_inputs(c2, TJ_F64, 1);
    p = tj_jit(c2, "second derivative through shard_map(checkpoint(scan))", lb_fn, &c, sin, NULL);
    TJT_CHECK(p != NULL, "%s", tj_error(c2));
    if (p) tj_prog_lint(p, lint, sizeof lint);
    TJT_CHECK(!strstr(tj_warnings(c2), "carries the name 'h'") && !strstr(lint, "names 'h'"), "no warning about 'h', which the body names: %s%s", tj_warnings(c2), lint);
    tj_prog_free(p);
    tj_tree_free(sin);
    tj_ctx_free(c2);
}
/* checkpoint(nothing_saveable)(scan): the forward scan returns its final
   carry only (JAX's known scan), the stacks its own backward pass read being
   the re-run's now (tj__drop_reran_outputs). Until 2026-11-24 the drop
   never happened for a scan in a tj_checkpoint region, the common case:
   the region is inlined and its copy of the scan shared its body with the
   dead original, so the forward scan still wrote every residual stack. */
static void test_drop_inlined(void) {
    tj_ctx *c = tj_ctx_new();
    cs_cfg cf = {CS_NOTHING, -1, 0, 0};
    tj_tree *in = cs_inputs(c, TJ_F64, 3, 0, 0), *out = tj_tree_new(c);
    tj_prog *p;
    tjt_current = "checkpoint(scan): the forward scan's unread outputs dropped";
    p = tj_jit(c, "checkpoint(scan)", cs_fn, &cf, in, NULL);
    TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "%s", tj_error(c));
    if (p) {
        FILE *f = tmpfile();
        char line[512];
        char use[32] = "";
        int nout = -1;
        tj_prog_print(p, f);
        rewind(f);
        while (fgets(line, sizeof line, f)) {
            int id;
            if (strncmp(line, "  %", 3) != 0) continue; /* (top-level lines only) */
            if (!use[0] && strstr(line, "= scan ") && !strstr(line, "bwd") && sscanf(line, "  %%%d", &id) == 1) snprintf(use, sizeof use, "(%%%d)", id), nout = 0;
            else if (use[0] && strstr(line, "= out ") && strstr(line, use)) nout++;
        }
        fclose(f);
        TJT_CHECK(nout == 1, "the forward scan writes %d outputs; its final carry alone is read", nout);
    }
    tj_prog_free(p);
    tj_tree_free(out);
    tj_tree_free(in);
    tj_ctx_free(c);
}
static const tj_policy *deep_pol[4];
static void deep_level(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    int lev = (int)(intptr_t)u;
    tj_v x = in[0], w = in[1], a = tj_checkpoint_name(tj_tanh(tj_rename(tj_dot(x, w, "h"), "h2", "h")), "h");
    (void)g;
    if (lev + 1 < 4) {
        tj_v ins[2] = {a, w}, o;
        tj_checkpoint(deep_level, (void *)(intptr_t)(lev + 1), 2, ins, 1, &o, deep_pol[lev + 1]);
        out[0] = tj_add(tj_mul(tj_tanh(tj_muls(a, 1.3)), o), x);
    } else
        out[0] = tj_add(tj_mul(tj_exp(tj_muls(a, 0.3)), a), x);
}
static void deep_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v ins[2] = {c[0], x[0]}, o;
    (void)g; (void)u;
    tj_checkpoint(deep_level, (void *)(intptr_t)0, 2, ins, 1, &o, deep_pol[0]);
    co[0] = o;
    y[0] = tj_sum(tj_mul(o, o), "h");
}
static void deep_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), fin, ys, loss, gx, extra;
    tj_policy ev = tj_everything_saveable();
    int q;
    (void)g; (void)u;
    if (tj_scan(deep_body, NULL, "layer", 1, &x, 1, &w, 1, &fin, &ys, &ev)) return;
    loss = tj_add(tj_sum_all(ys), tj_sum_all(tj_tanh(fin)));
    if (tj_grad(loss, 1, &x, &gx)) return;
    for (q = 1; q < 4; q++)
        if (!tj_grad(loss, 1, &x, &extra)) gx = tj_add(gx, tj_muls(extra, 0.0));
    tj_tree_set_v(out, "gx", gx);
}
/* the same loss without checkpoints (deep_pol unused) */
static void deep_level_plain(tj_v x, tj_v w, int lev, tj_v *out) {
    tj_v a = tj_checkpoint_name(tj_tanh(tj_rename(tj_dot(x, w, "h"), "h2", "h")), "h"), o;
    if (lev + 1 < 4) {
        deep_level_plain(a, w, lev + 1, &o);
        *out = tj_add(tj_mul(tj_tanh(tj_muls(a, 1.3)), o), x);
    } else
        *out = tj_add(tj_mul(tj_exp(tj_muls(a, 0.3)), a), x);
}
/* the loss of deep_fn: 0 the scan of checkpoints, 1 unrolled without them */
static tj_v deep_loss(const tj_tree *in, int plain) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), fin, ys, acc = NULL, h = x;
    tj_policy ev = tj_everything_saveable();
    int l;
    if (!plain) {
        if (tj_scan(deep_body, NULL, "layer", 1, &x, 1, &w, 1, &fin, &ys, &ev)) return NULL;
        return tj_add(tj_sum_all(ys), tj_sum_all(tj_tanh(fin)));
    }
    for (l = 0; l < 3; l++) {
        tj_v o;
        deep_level_plain(h, tj_index(w, "layer", l), 0, &o);
        h = o;
        o = tj_sum_all(tj_mul(o, o));
        acc = acc ? tj_add(acc, o) : o;
    }
    return tj_add(acc, tj_sum_all(tj_tanh(h)));
}
/* deep_fn's gradient, unrolled (one tj_grad) */
static void deep_plain_grad(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), l = deep_loss(in, 1), gx;
    (void)g; (void)u;
    if (l && !tj_grad(l, 1, &x, &gx)) tj_tree_set_v(out, "gx", gx);
}
/* 4 nested derivatives: l1 = loss, l(k+1) = sum(grad(lk, x)^2) / 8, and
   the gradient of the last; u bit 0: unrolled; bit 1: up to l3 only, the
   loss (tjt_gradcheck makes the 4th derivative), else up to l4 and its
   gradient */
static void deep_nested_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int mode = (int)(intptr_t)u, k, levels = (mode & 2) ? 3 : 4;
    tj_v x = tj_tree_v(in, "x"), l = deep_loss(in, mode & 1), gx = NULL;
    (void)g;
    for (k = 1; k < levels && l; k++) {
        if (tj_grad(l, 1, &x, &gx)) return;
        l = tj_muls(tj_sum_all(tj_mul(gx, gx)), 0.125);
    }
    tj_tree_set_v(out, "loss", l);
    if (!(mode & 2) && l && !tj_grad(l, 1, &x, &gx)) tj_tree_set_v(out, "gx", gx);
}
static tj_tree *deep_inputs(tj_ctx *ctx, tj_dtype dt) {
    tj_tree *in = tj_tree_new(ctx);
    tj_tree_set_array(in, "x", tjt_rand(ctx, dt, "b=4 h=8", 1, -1, 1));
    tj_tree_set_array(in, "w", tjt_rand(ctx, dt, "layer=3 h=8 h2=8", 2, -0.5, 0.5));
    return in;
}
/* the outputs of fn(user) on in, read back; 0 (a failed check) if it did not build or run */
static int run_read(tj_ctx *ctx, const char *what, tj_fn fn, void *user, tj_tree *in, tjt_outs *o) {
    tj_prog *p = tj_jit(ctx, what, fn, user, in, NULL);
    tj_tree *out = tj_tree_new(ctx);
    int ok = p && tj_run(p, in, out) == TJ_OK;
    memset(o, 0, sizeof *o);
    TJT_CHECK(ok, "%s: builds and runs: %s", what, ok ? "" : tj_error(ctx));
    if (ok) tjt_outs_read(o, out);
    else tj_clear_error(ctx);
    tj_tree_free(out);
    tj_prog_free(p);
    return ok;
}
static tj_ctx *ctx_on(int ndev) {
    tj_ctx *ctx = tj_ctx_new();
    if (ndev > 1) {
        tj_set_devices(ctx, ndev);
        tj_set_mesh(ctx, "data=2");
    }
    return ctx;
}
/* checkpoints nested deeper than the walker's table of enclosing policies
   (16): refused with the limit and the line (past it, the outermost
   policies were dropped silently until 2026-11-24); 16 deep runs */
static tj_policy deep16_pol;
static void deep16_region(tj_graph *g, const tj_v *in, tj_v *out, void *user) {
    int depth = *(const int *)user - 1;
    (void)g;
    if (depth > 0) tj_checkpoint(deep16_region, &depth, 1, in, 1, out, &deep16_pol);
    else out[0] = tj_tanh(in[0]);
}
static void deep16_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) {
    tj_v x = tj_tree_v(in, "x"), y, gx;
    (void)g;
    if (tj_checkpoint(deep16_region, user, 1, &x, 1, &y, &deep16_pol) || tj_grad(tj_sum_all(y), 1, &x, &gx)) return;
    tj_tree_set_v(out, "g_x", gx);
}
static void test_deep_policies(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx);
    int depth;
    deep16_pol = tj_nothing_saveable();
    tjt_current = "checkpoints nested past 16 policies";
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "b=4", 1, -1, 1));
    for (depth = 16; depth <= 18; depth += 2) {
        tj_prog *p = tj_jit(ctx, "deep16", deep16_fn, &depth, in, NULL);
        if (depth == 16) TJT_CHECK(p != NULL, "16 nested checkpoints: %s", tj_error(ctx));
        else TJT_CHECK(p == NULL && strstr(tj_error(ctx), "more than 16 enclosing remat policies") && strstr(tj_error(ctx), "test_scan.c"),
                       "18 nested checkpoints: refused naming the limit and the line: %s", p ? "(compiled)" : tj_error(ctx));
        tj_clear_error(ctx);
        tj_prog_free(p);
    }
    tj_tree_free(in);
    tj_ctx_free(ctx);
}
static void test_deep(int ndev) {
    tj_ctx *ctx = ctx_on(ndev);
    tj_tree *in = deep_inputs(ctx, TJ_F64);
    tj_policy nothing = tj_nothing_saveable(), dots = tj_dots_saveable(), ev = tj_everything_saveable(), names = tj_save_only_these_names("h");
    tjt_outs a, b;
    char what[96];
    deep_pol[0] = &nothing, deep_pol[1] = &dots, deep_pol[2] = &ev, deep_pol[3] = &names;
    snprintf(what, sizeof what, "a backward scan past the runner's old tables, %d device%s", ndev, ndev > 1 ? "s" : "");
    tjt_current = what;
    /* 4 tj_grad calls of one loss (tj_jit refused it: 70 outputs) against
       one tj_grad of the unrolled loss */
    if (run_read(ctx, "deep", deep_fn, NULL, in, &a) && run_read(ctx, "deep unrolled", deep_plain_grad, NULL, in, &b))
        tjt_outs_compare("4 tj_grad calls through checkpoints 4 deep vs unrolled", &b, &a, 1e-12);
    tjt_outs_free(&a);
    tjt_outs_free(&b);
    /* 4 nested tj_grad through checkpoints 4 deep, against the unrolled */
    if (run_read(ctx, "deep nested", deep_nested_fn, (void *)(intptr_t)0, in, &a) &&
        run_read(ctx, "deep nested unrolled", deep_nested_fn, (void *)(intptr_t)1, in, &b))
        tjt_outs_compare("4 nested tj_grad through checkpoints 4 deep vs unrolled", &b, &a, 1e-10);
    tjt_outs_free(&a);
    tjt_outs_free(&b);
    /* the 4th derivative against finite differences of the 3rd */
    TJT_GRADCHECK(ctx, "deep nested, 4th derivative", deep_nested_fn, (void *)(intptr_t)2, in, "x w");
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* The big scan: BIG_NC carries, BIG_NC xs and BIG_NC ys, closing over
   BIG_NW weights (slices of the inputs W, C, X, taken outside it). */
enum { BIG_NC = 100, BIG_NW = 200, BIG_L = 3 };
static tj_v big_w[BIG_NW];
static void big_step(const tj_v *c, const tj_v *x, tj_v *co, tj_v *y) {
    int i;
    for (i = 0; i < BIG_NC; i++) {
        tj_v a = tj_add(tj_mul(c[i], big_w[2 * i]), tj_mul(x[i], big_w[2 * i + 1]));
        co[i] = tj_tanh(tj_add(a, tj_muls(c[(i + 1) % BIG_NC], 0.1)));
        y[i] = tj_mul(co[i], big_w[(7 * i + 3) % BIG_NW]);
    }
}
static void big_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)u;
    big_step(c, x, co, y);
}
/* u: 0 the scan, 1 unrolled; the loss */
static void big_loss(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v W = tj_tree_v(in, "W"), C = tj_tree_v(in, "C"), X = tj_tree_v(in, "X");
    static tj_v c[BIG_NC], x[BIG_NC], fin[BIG_NC], ys[BIG_NC], xt[BIG_NC], yt[BIG_NC];
    tj_v loss = NULL;
    int i, l;
    (void)g;
    for (i = 0; i < BIG_NW; i++) big_w[i] = tj_index(W, "k", i);
    for (i = 0; i < BIG_NC; i++) c[i] = tj_index(C, "c", i), x[i] = tj_index(X, "c", i);
    if (!u) {
        if (tj_scan(big_body, NULL, "layer", BIG_NC, c, BIG_NC, x, BIG_NC, fin, ys, NULL)) return;
        for (i = 0; i < BIG_NC; i++) {
            tj_v t = tj_add(tj_sum_all(tj_tanh(fin[i])), tj_muls(tj_sum_all(tj_mul(ys[i], ys[i])), 0.5));
            loss = loss ? tj_add(loss, t) : t;
        }
    } else
        for (l = 0; l < BIG_L; l++) {
            for (i = 0; i < BIG_NC; i++) xt[i] = tj_index(x[i], "layer", l);
            big_step(c, xt, fin, yt);
            for (i = 0; i < BIG_NC; i++) {
                tj_v t = tj_muls(tj_sum_all(tj_mul(yt[i], yt[i])), 0.5);
                c[i] = fin[i];
                loss = loss ? tj_add(loss, t) : t;
            }
            if (l == BIG_L - 1)
                for (i = 0; i < BIG_NC; i++) loss = tj_add(loss, tj_sum_all(tj_tanh(fin[i])));
        }
    tj_tree_set_v(out, "loss", loss);
}
static void big_grads(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_tree *tmp = tj_tree_new(tj_graph_ctx(g));
    tj_v wrt[3], gr[3], loss;
    big_loss(g, in, tmp, u);
    loss = tj_tree_v(tmp, "loss");
    wrt[0] = tj_tree_v(in, "W"), wrt[1] = tj_tree_v(in, "C"), wrt[2] = tj_tree_v(in, "X");
    if (loss && !tj_grad(loss, 3, wrt, gr)) {
        tj_tree_set_v(out, "loss", loss);
        tj_tree_set_v(out, "gW", gr[0]);
        tj_tree_set_v(out, "gC", gr[1]);
        tj_tree_set_v(out, "gX", gr[2]);
    }
    tj_tree_free(tmp);
}
static tj_tree *big_inputs(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx);
    tj_tree_set_array(in, "W", tjt_rand(ctx, TJ_F64, "k=200 h=2", 11, -0.9, 0.9));
    tj_tree_set_array(in, "C", tjt_rand(ctx, TJ_F64, "c=100 h=2", 12, -1, 1));
    tj_tree_set_array(in, "X", tjt_rand(ctx, TJ_F64, "layer=3 c=100 h=2", 13, -1, 1));
    return in;
}
static void test_big_scan(void) {
    tjt_outs o[3][2]; /* [scan, unrolled][device count] */
    int nd, m;
    tjt_current = "a scan of 100 carries, 100 xs and 100 ys over 200 weights";
    for (nd = 0; nd < 2; nd++) {
        tj_ctx *ctx = ctx_on(nd ? 2 : 1);
        tj_tree *in = big_inputs(ctx);
        for (m = 0; m < 2; m++) run_read(ctx, m ? "big unrolled" : "big scan", big_grads, (void *)(intptr_t)m, in, &o[m][nd]);
        TJT_GRADCHECK(ctx, "big scan", big_loss, NULL, in, "W C X");
        tj_tree_free(in);
        tj_ctx_free(ctx);
    }
    tjt_outs_compare("big scan vs unrolled, 1 device", &o[1][0], &o[0][0], 1e-12);
    tjt_outs_compare("big scan vs unrolled, 2 devices", &o[1][1], &o[0][1], 1e-12);
    tjt_outs_compare("big scan on 2 devices vs 1", &o[0][0], &o[0][1], 1e-14);
    for (nd = 0; nd < 2; nd++)
        for (m = 0; m < 2; m++) tjt_outs_free(&o[m][nd]);
}
/* ---- reverse scans (tj_scan_reverse, JAX's lax.scan(reverse=True)) ----
   Iteration i reads slice L-1-i of each x and stores its ys at L-1-i; the
   final carry is the one after slice 0. rs_fn runs one body, either
   direction, as a scan (rs_cfg.K = 0) or a scan nested in a scan over
   "outer" (K > 0), the inner scan optionally inside a tj_checkpoint (a
   reverse scan under a checkpoint under a scan) or a tj_shard_map; or the
   same steps unrolled by hand in the order JAX's scan runs them. The loss
   weighs every y by its own element of r0 / r1, so a y stored at the wrong
   index changes the loss and the gradients. */
typedef struct {
    int L, K;           /* the scanned length; the outer scan's (0: none)      */
    int din, dout;      /* directions (1: reverse) of the inner and outer scan */
    int p, q;           /* cs_pol indices (-1: none): the outer scan's (or the
                           only scan's) policy; the inner scan's, or with ckpt
                           the checkpoint's                                   */
    int ckpt, smap;     /* the inner scan in a tj_checkpoint / a tj_shard_map  */
    int unrolled, second, loss_only;
} rs_cfg;
static tj_v rs_b; /* a weight every body captures (its tanh a loop-invariant residual) */
static void rs_step(tj_v c, tj_v w, tj_v v, tj_v *co, tj_v *y0, tj_v *y1) {
    tj_v h = tj_checkpoint_name(tj_rename(tj_dot(c, w, "embed"), "e2", "embed"), "h");
    tj_v a = tj_checkpoint_name(tj_tanh(tj_add(tj_add(h, v), tj_tanh(rs_b))), "a");
    *co = tj_add(tj_muls(a, 0.8), tj_mul(c, v));
    *y0 = tj_mul(a, c);
    *y1 = tj_sum(tj_mul(h, h), "embed");
}
static void rs_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)u;
    rs_step(c[0], x[0], x[1], &co[0], &y[0], &y[1]);
}
/* in: c, w, v (w and v with the layer axis); out: final carry, ys0, ys1 */
static void rs_scan(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const rs_cfg *c = (const rs_cfg *)u;
    tj_v xs[2];
    (void)g;
    xs[0] = in[1], xs[1] = in[2];
    tj_scan_dir(rs_body, NULL, "layer", 1, &in[0], 2, xs, 2, &out[0], &out[1], c->K && c->ckpt ? NULL : c->q >= 0 ? &cs_pol[c->q] : NULL, c->din);
}
static void rs_inner(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const rs_cfg *c = (const rs_cfg *)u;
    if (c->ckpt) tj_checkpoint(rs_scan, u, 3, in, 3, out, c->q >= 0 ? &cs_pol[c->q] : NULL);
    else if (c->smap) {
        const char *is[3] = {"batch:data", "", "batch:data"}, *os[3] = {"batch:data", "batch:data", "batch:data"};
        tj_shard_map(rs_scan, u, 3, in, is, 3, out, os, 1);
    } else rs_scan(g, in, out, u);
}
static void rs_obody(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v in[3], out[3];
    in[0] = c[0], in[1] = x[0], in[2] = x[1];
    rs_inner(g, in, out, u);
    co[0] = out[0], y[0] = out[1], y[1] = out[2];
}
/* the steps unrolled: JAX's order of the slices, the ys stacked by index */
static void rs_unrolled(const rs_cfg *c, tj_v x, tj_v w, tj_v v, tj_v *fin, tj_v *ys0, tj_v *ys1) {
    int K = c->K ? c->K : 1, i, j;
    tj_v o0[8], o1[8], l0[8], l1[8], h = x;
    char s0[96], s1[96];
    for (i = 0; i < K; i++) {
        int k = c->dout ? K - 1 - i : i;
        tj_v wk = c->K ? tj_index(w, "outer", k) : w, vk = c->K ? tj_index(v, "outer", k) : v;
        for (j = 0; j < c->L; j++) {
            int l = c->din ? c->L - 1 - j : j;
            tj_v y0, y1;
            rs_step(h, tj_index(wk, "layer", l), tj_index(vk, "layer", l), &h, &y0, &y1);
            l0[l] = tj_broadcast(y0, "layer=1 batch=2 embed=4");
            l1[l] = tj_broadcast(y1, "layer=1 batch=2");
        }
        snprintf(s0, sizeof s0, "outer=1 layer=%d batch=2 embed=4", c->L);
        snprintf(s1, sizeof s1, "outer=1 layer=%d batch=2", c->L);
        o0[k] = tj_concat(c->L, l0, "layer");
        o1[k] = tj_concat(c->L, l1, "layer");
        if (c->K) o0[k] = tj_broadcast(o0[k], s0), o1[k] = tj_broadcast(o1[k], s1);
    }
    *fin = h;
    *ys0 = c->K ? tj_concat(K, o0, "outer") : o0[0];
    *ys1 = c->K ? tj_concat(K, o1, "outer") : o1[0];
}
static void rs_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const rs_cfg *c = (const rs_cfg *)u;
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), v = tj_tree_v(in, "v"), r0 = tj_tree_v(in, "r0"), r1 = tj_tree_v(in, "r1");
    tj_v fin = NULL, ys[2] = {NULL, NULL}, l, wrt[4], gr[4];
    rs_b = tj_tree_v(in, "b");
    if (c->unrolled) rs_unrolled(c, x, w, v, &fin, &ys[0], &ys[1]);
    else if (c->K) {
        tj_v xs[2];
        xs[0] = w, xs[1] = v;
        tj_scan_dir(rs_obody, u, "outer", 1, &x, 2, xs, 2, &fin, ys, c->p >= 0 ? &cs_pol[c->p] : NULL, c->dout);
    } else if (c->ckpt || c->smap) {
        tj_v i3[3], o3[3];
        rs_cfg ci = *c;
        i3[0] = x, i3[1] = w, i3[2] = v;
        ci.q = c->p; /* (the only policy: the checkpoint's, the scan's none) */
        ci.K = c->ckpt; /* (rs_scan: the checkpoint has the policy) */
        rs_inner(g, i3, o3, &ci);
        fin = o3[0], ys[0] = o3[1], ys[1] = o3[2];
    } else {
        tj_v xs[2];
        xs[0] = w, xs[1] = v;
        tj_scan_dir(rs_body, NULL, "layer", 1, &x, 2, xs, 2, &fin, ys, c->p >= 0 ? &cs_pol[c->p] : NULL, c->din);
    }
    l = tj_add(tj_add(tj_sum_all(tj_mul(fin, fin)), tj_sum_all(tj_mul(ys[0], r0))), tj_sum_all(tj_mul(ys[1], r1)));
    if (c->loss_only) {
        tj_tree_set_v(out, "loss", l);
        return;
    }
    wrt[0] = x, wrt[1] = w, wrt[2] = v, wrt[3] = rs_b;
    tj_grad(l, 4, wrt, gr);
    if (c->second) {
        l = tj_add(tj_add(tj_sum_all(tj_mul(gr[0], gr[0])), tj_sum_all(tj_mul(gr[1], gr[1]))), tj_sum_all(tj_mul(gr[2], gr[2])));
        tj_grad(l, 4, wrt, gr);
    }
    tj_tree_set_v(out, "loss", l);
    tj_tree_set_v(out, "fin", fin);
    tj_tree_set_v(out, "ys0", ys[0]);
    tj_tree_set_v(out, "ys1", ys[1]);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w", gr[1]);
    tj_tree_set_v(out, "g_v", gr[2]);
    tj_tree_set_v(out, "g_b", gr[3]);
}
/* sharded: 0 none; 1 the batch over data and e2 over model where the mesh
   has them; 2 also the scanned axis over data (the scan gathers it) */
static tj_tree *rs_inputs(tj_ctx *ctx, tj_dtype dt, int L, int K, int sharded, int model) {
    char s[128], pre[32] = "";
    tj_tree *in = tj_tree_new(ctx);
    tj_array *a;
    if (K) snprintf(pre, sizeof pre, "outer=%d ", K);
    a = tjt_rand(ctx, dt, "batch=2 embed=4", 81, -1, 1);
    tj_tree_set_array(in, "x", sharded ? tjt_put(a, "batch:data") : a);
    snprintf(s, sizeof s, "%slayer=%d embed=4 e2=4", pre, L);
    a = tjt_rand(ctx, dt, s, 82, -0.7, 0.7);
    tj_tree_set_array(in, "w", sharded == 2 && L % 2 == 0 ? tjt_put(a, model ? "layer:data e2:model" : "layer:data") : sharded && model ? tjt_put(a, "e2:model") : a);
    snprintf(s, sizeof s, "%slayer=%d batch=2 embed=4", pre, L);
    a = tjt_rand(ctx, dt, s, 83, -0.5, 0.5);
    tj_tree_set_array(in, "v", sharded ? tjt_put(a, "batch:data") : a);
    a = tjt_rand(ctx, dt, s, 84, -1, 1);
    tj_tree_set_array(in, "r0", sharded ? tjt_put(a, "batch:data") : a);
    snprintf(s, sizeof s, "%slayer=%d batch=2", pre, L);
    tj_tree_set_array(in, "r1", tjt_rand(ctx, dt, s, 85, -1, 1));
    tj_tree_set_array(in, "b", tjt_rand(ctx, dt, "embed=4", 86, -1, 1));
    return in;
}
static const char *rs_pn(int p) {
    static const char *pn[CS_N] = {"nothing", "everything", "dots", "dots no batch", "names h", "any names but h", "offload h", "offload dots"};
    return p < 0 ? "none" : pn[p];
}
static void rs_what(const rs_cfg *c, int ndev, char *b, size_t n) {
    if (c->unrolled) snprintf(b, n, "unrolled, L=%d K=%d, %s/%s", c->L, c->K, c->din ? "rev" : "fwd", c->dout ? "rev" : "fwd");
    else if (!c->K)
        snprintf(b, n, "%s%s scan L=%d, policy %s%s, %d devices", c->ckpt ? "checkpoint(" : c->smap ? "shard_map(" : "", c->din ? "reverse" : "forward", c->L,
                 rs_pn(c->p), c->ckpt || c->smap ? ")" : "", ndev);
    else
        snprintf(b, n, "%s scan (policy %s) over %s%s scan (policy %s)%s, K=%d L=%d, %d devices", c->dout ? "reverse" : "forward", rs_pn(c->p),
                 c->ckpt ? "checkpoint(" : "", c->din ? "reverse" : "forward", rs_pn(c->q), c->ckpt ? ")" : "", c->K, c->L, ndev);
    if (c->second) snprintf(b + strlen(b), n - strlen(b), ", second derivatives");
}
/* builds and runs cfg c on in; its outputs into o (0: it failed, a failed
   check); the arenas held are the plan's, host memory where it offloads */
static int rs_run(tj_ctx *ctx, const rs_cfg *c, tj_tree *in, tjt_outs *o, int ndev) {
    char what[256];
    tj_prog *p;
    tj_tree *out = tj_tree_new(ctx);
    int ok;
    rs_what(c, ndev, what, sizeof what);
    p = tj_jit(ctx, what, rs_fn, (void *)c, in, NULL);
    ok = p && tj_run(p, in, out) == TJ_OK;
    memset(o, 0, sizeof *o);
    TJT_CHECK(ok, "%s: builds and runs: %s", what, ok ? "" : tj_error(ctx));
    if (ok) {
        tj_memory_analysis m = tj_prog_memory(p);
        tjt_outs_read(o, out);
        TJT_CHECK(tj_get_alloc_stats(ctx).arena_bytes == ndev * (m.temp_bytes + m.host_temp_bytes), "%s: the arenas held (%lld B) are not %d x the plan's %lld + %lld B",
                  what, (long long)tj_get_alloc_stats(ctx).arena_bytes, ndev, (long long)m.temp_bytes, (long long)m.host_temp_bytes);
        if (!c->K && !c->ckpt && !c->smap && c->L > 1 && (c->p == CS_OFFNAMES || c->p == CS_OFFDOTS))
            TJT_CHECK(m.host_temp_bytes > 0, "%s: an offloading policy, no host memory", what);
    } else tj_clear_error(ctx);
    tj_prog_free(p);
    tj_tree_free(out);
    return ok;
}
/* the residual rows of c with the scan reversed equal those of the forward
   scan (JAX's saved_residuals are the same for reverse=True) */
static void rs_rows(tj_ctx *ctx, const rs_cfg *c, tj_tree *in) {
    rs_cfg f = *c;
    tj_prog *p[2];
    tj_residual r[2][64];
    int n[2], k, j;
    char what[256];
    rs_what(c, 1, what, sizeof what);
    f.din = f.dout = 0;
    p[0] = tj_jit(ctx, "forward", rs_fn, &f, in, NULL);
    p[1] = tj_jit(ctx, "reverse", rs_fn, (void *)c, in, NULL);
    TJT_CHECK(p[0] && p[1], "%s: %s", what, tj_error(ctx));
    if (p[0] && p[1]) {
        for (k = 0; k < 2; k++) n[k] = tj_prog_residuals(p[k], r[k], 64);
        TJT_CHECK(n[0] == n[1] && n[0] <= 64, "%s: %d residual rows, the forward scan %d", what, n[1], n[0]);
        for (j = 0; j < n[0] && j < n[1] && j < 64; j++)
            TJT_CHECK(r[0][j].decision == r[1][j].decision && r[0][j].bytes == r[1][j].bytes && r[0][j].nested == r[1][j].nested &&
                          strcmp(r[0][j].name, r[1][j].name) == 0 && strcmp(r[0][j].shape, r[1][j].shape) == 0,
                      "%s: residual row %d is %s %s %lld B, the forward scan's %s %s %lld B", what, j, r[1][j].name, r[1][j].shape, (long long)r[1][j].bytes,
                      r[0][j].name, r[0][j].shape, (long long)r[0][j].bytes);
    } else tj_clear_error(ctx);
    tj_prog_free(p[0]);
    tj_prog_free(p[1]);
}
/* the final carry of a reverse scan written into its donated initial carry */
static void rs_donate_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), xs[2], fin = NULL, ys[2];
    (void)g; (void)u;
    rs_b = tj_tree_v(in, "b");
    xs[0] = tj_tree_v(in, "w"), xs[1] = tj_tree_v(in, "v");
    tj_scan_reverse(rs_body, NULL, "layer", 1, &x, 2, xs, 2, &fin, ys, NULL);
    tj_tree_set_v(out, "x", fin);
    tj_tree_set_v(out, "ys0", ys[0]);
}
static void test_reverse_donated(void) {
    tj_ctx *ctx = tj_ctx_new();
    int L;
    tjt_current = "reverse scan: donated carry";
    for (L = 1; L <= 4; L++) {
        tj_tree *in0 = rs_inputs(ctx, TJ_F64, L, 0, 0, 0), *in1 = rs_inputs(ctx, TJ_F64, L, 0, 0, 0), *o0 = tj_tree_new(ctx), *o1 = tj_tree_new(ctx);
        tj_jit_opts opt;
        tj_prog *p0 = tj_jit(ctx, "kept", rs_donate_fn, NULL, in0, NULL), *p1;
        opt.donate = "x";
        p1 = tj_jit(ctx, "donated", rs_donate_fn, NULL, in1, &opt);
        TJT_CHECK(p0 && p1 && tj_run(p0, in0, o0) == TJ_OK && tj_run(p1, in1, o1) == TJ_OK, "length %d: %s", L, tj_error(ctx));
        if (tj_tree_size(o0) == 2 && tj_tree_size(o1) == 2) {
            TJT_CHECK(bits_equal(tj_tree_array(o0, "x"), tj_tree_array(o1, "x")) && bits_equal(tj_tree_array(o0, "ys0"), tj_tree_array(o1, "ys0")),
                      "length %d: donating the carry changes the reverse scan's results", L);
            TJT_CHECK(tj_prog_memory(p1).alias_bytes > 0, "length %d: the donated carry is not reused", L);
        }
        tj_clear_error(ctx);
        tj_prog_free(p0);
        tj_prog_free(p1);
        tj_tree_free(o0);
        tj_tree_free(o1);
        tj_tree_free(in0);
        tj_tree_free(in1);
    }
    tj_ctx_free(ctx);
}
/* tj_prog_print names a reverse scan's body and its backward pass, a
   forward scan */
static void test_reverse_print(void) {
    tj_ctx *ctx = tj_ctx_new();
    rs_cfg c = {3, 0, 1, 0, -1, -1, 0, 0, 0, 0, 0};
    tj_tree *in = rs_inputs(ctx, TJ_F64, 3, 0, 0, 0);
    tj_prog *p;
    tjt_current = "reverse scan: printed";
    p = tj_jit(ctx, "print", rs_fn, &c, in, NULL);
    TJT_CHECK(p != NULL, "%s", tj_error(ctx));
    if (p) {
        int fwd = TJT_PROG_LINES(p, "body of", ": reverse scan, 3 iterations"), bwd = TJT_PROG_LINES(p, "body of", ": scan (backward pass), 3 iterations");
        TJT_CHECK(fwd == 1 && bwd == 1, "tj_prog_print: %d reverse scan bodies, %d forward backward-pass bodies (want 1 and 1)", fwd, bwd);
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_ctx_free(ctx);
}
/* JAX 0.10.2 (float64), the same body and loss as rs_fn:
     def step(c, xs):
         w, v = xs; h = (c @ w); a = jnp.tanh(h + v + jnp.tanh(bb))
         return a * 0.8 + c * v, (a * c, (h * h).sum(-1))
     fin, (ys0, ys1) = lax.scan(step, x, (w, v), reverse=True)
     loss = (fin**2).sum() + (ys0 * r0).sum() + (ys1 * r1).sum()
   with x[b,e] = sin(1 + b*3 + e) / 2 (batch 2, embed 3), w[l,e,f] =
   cos(l*9 + e*3 + f) / 2, v[l,b,e] = sin(0.5 * (l*6 + b*3 + e)) / 3,
   r0[l,b,e] = cos(0.3 * (l*6 + b*3 + e)), r1[l,b] = sin(0.7 * (l*2 + b) + 1),
   bb[e] = cos(0.9 e + 0.2) / 2 (rs_b, captured), L = 3: the numbers
   jax.value_and_grad(f, argnums=(0, 1, 2, 3), has_aux=True)(x, w, v, bb)
   printed with jax_enable_x64, run by hand (not in CI). */
static void rs_fill(tj_ctx *ctx, tj_tree *in) {
    double x[6], w[27], v[18], r0[18], r1[6], b[3];
    int i;
    for (i = 0; i < 6; i++) x[i] = sin(1.0 + i) / 2;
    for (i = 0; i < 27; i++) w[i] = cos((double)i) / 2;
    for (i = 0; i < 18; i++) v[i] = sin(0.5 * i) / 3, r0[i] = cos(0.3 * i);
    for (i = 0; i < 6; i++) r1[i] = sin(0.7 * i + 1);
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F64, "batch=2 embed=3", x));
    tj_tree_set_array(in, "w", tj_array_new(ctx, TJ_F64, "layer=3 embed=3 e2=3", w));
    tj_tree_set_array(in, "v", tj_array_new(ctx, TJ_F64, "layer=3 batch=2 embed=3", v));
    tj_tree_set_array(in, "r0", tj_array_new(ctx, TJ_F64, "layer=3 batch=2 embed=3", r0));
    tj_tree_set_array(in, "r1", tj_array_new(ctx, TJ_F64, "layer=3 batch=2", r1));
    for (i = 0; i < 3; i++) b[i] = cos(0.9 * i + 0.2) / 2;
    tj_tree_set_array(in, "b", tj_array_new(ctx, TJ_F64, "embed=3", b));
}
static const double rsg_loss[1] = {0.37261087444009716};
static const double rsg_fin[6] = {0.33934913445545312, 0.27071234441550457, -0.070392689896403834, 0.4461499381773123, 0.2731503615704256, -0.058346318845699574};
static const double rsg_ys0[18] = {0.15999386927722981, 0.01916180027662855, -0.0099264049522206632, -0.05363968968232144, -0.084416424205255802, -0.0026407358027514035, 0.11782446560179158, 0.030940401880937642, -0.0068669745978563665, 0.017354284470908508, -0.037196503512963691, -0.0063622019211959048, 0.15641361386334865, 0.13673404263513031, 0.00010009055814259872, -0.23890285603744876, -0.23498466203122398, -0.0092599373850077594};
static const double rsg_ys1[6] = {0.0040057595690952408, 0.016958898149695888, 0.00042202113827280555, 0.011244129917814373, 0.0012620612021964463, 0.00084422709221210689};
static const double rsg_gx[6] = {-0.59741356638899867, 0.046103056540023613, -0.21814191828883095, -0.20065956849111199, 0.031049840572470094, 0.19310127953873718};
static const double rsg_gw[27] = {0.26347525951629636, 0.12447059617929045, -0.16777727652815391, -0.0011682984901764696, -0.0069381952672118927, -0.009352971705525721, -0.32512909879938307, -0.16736453644726829, 0.18527059654899508, 0.26800940716849003, -0.10964086830063817, 0.12459135049880329, 0.22908787986669413, -0.095690854344757589, 0.1169534582033501, 0.014417103517838611, -0.0059992995384053225, 0.0072394495538939622, -0.17481207889954928, -0.14462866264231672, -0.061572039574003069, -0.18173133815903883, -0.164668329211211, -0.07830255899407583, -0.021567643212113366, -0.033312693310225759, -0.023042066785747353};
static const double rsg_gv[18] = {1.0105629996848158, 0.46873325075867223, -0.34187129025486673, 0.34439549374671907, 0.18995465569520556, -0.078408379255261576, 0.84111928665717484, -0.30471130637720895, 0.34110396016987454, 0.64072946349152382, -0.07604232441727457, 0.085883525921606377, -0.55995615129709264, -0.16626611748974074, -0.0095642934414347583, 0.0063233105419764268, -0.0069006021848892051, 0.13690324298191553};
static const double rsg_gb[3] = {1.1612511147448037, 0.22225912598590042, 0.073106450517775437};
static void test_reverse_golden(void) {
    static const struct { const char *name; const double *v; int n; } want[] = {{"loss", rsg_loss, 1}, {"fin", rsg_fin, 6},   {"ys0", rsg_ys0, 18}, {"ys1", rsg_ys1, 6},
                                                                                {"g_x", rsg_gx, 6},     {"g_w", rsg_gw, 27}, {"g_v", rsg_gv, 18}, {"g_b", rsg_gb, 3}};
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx);
    rs_cfg c = {3, 0, 1, 0, -1, -1, 0, 0, 0, 0, 0};
    tjt_outs o;
    int p, k, i, j;
    tjt_current = "reverse scan: JAX's numbers";
    rs_fill(ctx, in);
    for (p = -1; p < CS_N; p++) { /* every policy: JAX's numbers */
        c.p = p;
        if (!rs_run(ctx, &c, in, &o, 1)) continue;
        for (k = 0; k < (int)(sizeof want / sizeof want[0]); k++) {
            double worst = 0;
            for (i = 0; i < o.n && strcmp(o.name[i], want[k].name) != 0; i++) {}
            TJT_CHECK(i < o.n && o.len[i] == want[k].n, "policy %s: output %s missing or of another size", rs_pn(p), want[k].name);
            if (i == o.n || o.len[i] != want[k].n) continue;
            for (j = 0; j < want[k].n; j++)
                if (!(fabs(o.v[i][j] - want[k].v[j]) <= worst)) worst = fabs(o.v[i][j] - want[k].v[j]);
            TJT_CHECK(worst <= 1e-14, "policy %s: %s differs from JAX's by %.3g", rs_pn(p), want[k].name, worst);
        }
        tjt_outs_free(&o);
    }
    tj_tree_free(in);
    tj_ctx_free(ctx);
}
/* values and gradients against the unrolled steps; every policy the same
   bits as none; finite differences; 2 and 4 devices against one */
static void test_reverse(void) {
    tj_ctx *ctx = tj_ctx_new();
    static const int Ls[] = {1, 2, 3, 5};
    int li, p, din, k;
    tjt_current = "reverse scan vs unrolled, every policy";
    for (li = 0; li < 4; li++)
        for (din = 0; din < 2; din++) {
            rs_cfg u = {Ls[li], 0, din, 0, -1, -1, 0, 0, 1, 0, 0};
            tj_tree *in = rs_inputs(ctx, TJ_F64, Ls[li], 0, 0, 0);
            tjt_outs ref, none;
            char what[256];
            if (!rs_run(ctx, &u, in, &ref, 1)) { tj_tree_free(in); continue; }
            memset(&none, 0, sizeof none);
            for (p = -1; p < CS_N; p++) {
                rs_cfg c = u;
                tjt_outs o;
                c.unrolled = 0, c.p = p;
                rs_what(&c, 1, what, sizeof what);
                if (!rs_run(ctx, &c, in, &o, 1)) continue;
                tjt_outs_compare(what, &ref, &o, 1e-13);
                if (p < 0) none = o;
                else {
                    char w2[300];
                    snprintf(w2, sizeof w2, "%s (the same bits as no policy)", what);
                    if (none.n) tjt_outs_compare(w2, &none, &o, 0);
                    if (din) rs_rows(ctx, &c, in);
                    tjt_outs_free(&o);
                }
            }
            for (k = 0; k < 2 && din; k++) { /* the same, second derivatives */
                rs_cfg c = u, cu = u;
                tjt_outs a, b;
                c.unrolled = 0, c.p = k ? CS_OFFNAMES : CS_NOTHING, c.second = 1, cu.second = 1;
                rs_what(&c, 1, what, sizeof what);
                if (rs_run(ctx, &cu, in, &a, 1) && rs_run(ctx, &c, in, &b, 1)) tjt_outs_compare(what, &a, &b, 1e-12);
                tjt_outs_free(&a);
                tjt_outs_free(&b);
            }
            tjt_outs_free(&none);
            tjt_outs_free(&ref);
            tj_tree_free(in);
        }
    tjt_current = "reverse scan: finite differences";
    {
        static const rs_cfg fd[] = {
            {3, 0, 1, 0, -1, -1, 0, 0, 0, 0, 1}, {1, 0, 1, 0, CS_NOTHING, -1, 0, 0, 0, 0, 1}, {2, 0, 1, 0, CS_OFFNAMES, -1, 0, 0, 0, 0, 1},
            {5, 0, 1, 0, CS_OFFDOTS, -1, 0, 0, 0, 0, 1}, {3, 0, 1, 0, CS_NAMES, -1, 0, 0, 0, 1, 0}, {3, 0, 1, 0, CS_OFFNAMES, -1, 0, 0, 0, 1, 0},
            {3, 2, 1, 0, CS_NOTHING, -1, 0, 0, 0, 0, 1}, {3, 2, 0, 1, CS_DOTS, CS_OFFNAMES, 0, 0, 0, 0, 1}, {3, 3, 1, 0, CS_OFFNAMES, CS_NOTHING, 1, 0, 0, 0, 1},
            {2, 2, 1, 1, CS_NAMES, -1, 0, 0, 0, 1, 0}};
        for (k = 0; k < (int)(sizeof fd / sizeof fd[0]); k++) {
            tj_tree *in = rs_inputs(ctx, TJ_F64, fd[k].L, fd[k].K, 0, 0);
            char what[256];
            rs_what(&fd[k], 1, what, sizeof what);
            TJT_GRADCHECK(ctx, what, rs_fn, (void *)&fd[k], in, "x w v r0 b");
            tj_tree_free(in);
        }
    }
    tjt_current = "reverse scans nested";
    { /* both directions of both scans, the outer policy seeing into the
         inner scan (the re-run of a reverse scan), the inner scan in a
         checkpoint */
        static const int pq[][2] = {{-1, -1}, {CS_NOTHING, -1}, {CS_NAMES, CS_NOTHING}, {CS_OFFNAMES, -1}, {CS_DOTS, CS_OFFDOTS}, {CS_NOTHING, CS_OFFNAMES}};
        int dout, ck, j;
        for (ck = 0; ck < 2; ck++)
            for (dout = 0; dout < 2; dout++)
                for (din = 0; din < 2; din++) {
                    int K = 2 + din, L = 3 - dout;
                    rs_cfg u = {L, K, din, dout, -1, -1, ck, 0, 1, 0, 0};
                    tj_tree *in = rs_inputs(ctx, TJ_F64, L, K, 0, 0);
                    tjt_outs ref, o;
                    if (!rs_run(ctx, &u, in, &ref, 1)) { tj_tree_free(in); continue; }
                    for (j = 0; j < (int)(sizeof pq / sizeof pq[0]); j++) {
                        rs_cfg c = u;
                        char what[256];
                        c.unrolled = 0, c.p = pq[j][0], c.q = pq[j][1];
                        rs_what(&c, 1, what, sizeof what);
                        if (!rs_run(ctx, &c, in, &o, 1)) continue;
                        tjt_outs_compare(what, &ref, &o, 1e-13);
                        tjt_outs_free(&o);
                        if (j == 2 && (din || dout)) { /* second derivatives */
                            rs_cfg s = c, su = u;
                            tjt_outs a;
                            s.second = su.second = 1;
                            rs_what(&s, 1, what, sizeof what);
                            if (rs_run(ctx, &su, in, &a, 1) && rs_run(ctx, &s, in, &o, 1)) tjt_outs_compare(what, &a, &o, 1e-12);
                            tjt_outs_free(&a);
                            tjt_outs_free(&o);
                        }
                    }
                    tjt_outs_free(&ref);
                    tj_tree_free(in);
                }
    }
    tjt_current = "reverse scan on 2 and 4 devices";
    {
        static const rs_cfg sc[] = {{3, 0, 1, 0, -1, -1, 0, 0, 0, 0, 0},        {4, 0, 1, 0, CS_NOTHING, -1, 0, 0, 0, 0, 0}, {3, 0, 1, 0, CS_OFFNAMES, -1, 0, 0, 0, 0, 0},
                                    {2, 0, 1, 0, CS_OFFDOTS, -1, 0, 0, 0, 0, 0}, {1, 0, 1, 0, CS_DOTS, -1, 0, 0, 0, 0, 0},   {3, 0, 1, 0, CS_NAMES, -1, 0, 0, 0, 1, 0},
                                    {3, 0, 1, 0, CS_OFFNAMES, -1, 1, 0, 0, 0, 0}, {3, 0, 1, 0, -1, -1, 0, 1, 0, 0, 0},       {2, 0, 1, 0, CS_NOTHING, -1, 0, 1, 0, 0, 0},
                                    {3, 2, 1, 0, CS_NOTHING, -1, 0, 0, 0, 0, 0}, {2, 2, 0, 1, CS_OFFNAMES, CS_NOTHING, 0, 0, 0, 0, 0},
                                    {3, 3, 1, 0, CS_DOTS, CS_OFFNAMES, 1, 0, 0, 0, 0}, {2, 2, 1, 1, CS_NAMES, -1, 0, 0, 0, 1, 0}};
        int nd, sh;
        for (nd = 2; nd <= 4; nd += 2) {
            tj_ctx *cn = tj_ctx_new();
            tj_set_devices(cn, nd);
            tj_set_mesh(cn, nd == 2 ? "data=2" : "data=2 model=2");
            for (k = 0; k < (int)(sizeof sc / sizeof sc[0]); k++)
                for (sh = 0; sh < 3; sh++) {
                    tj_tree *i1, *in;
                    tjt_outs a, b;
                    char what[300];
                    if (sc[k].smap && sh == 0) continue; /* (the shard_map splits x itself) */
                    i1 = rs_inputs(ctx, TJ_F64, sc[k].L, sc[k].K, 0, 0);
                    in = rs_inputs(cn, TJ_F64, sc[k].L, sc[k].K, sh, nd == 4);
                    {
                        rs_cfg one = sc[k];
                        one.smap = 0; /* (one device: the plain scan) */
                        if (rs_run(ctx, &one, i1, &a, 1) && rs_run(cn, &sc[k], in, &b, nd)) {
                            rs_what(&sc[k], nd, what, sizeof what);
                            snprintf(what + strlen(what), sizeof what - strlen(what), ", inputs %s", sh == 0 ? "replicated" : sh == 1 ? "sharded" : "sharded, the scanned axis too");
                            tjt_outs_compare(what, &a, &b, 1e-12);
                        }
                    }
                    tjt_outs_free(&a);
                    tjt_outs_free(&b);
                    tj_tree_free(i1);
                    tj_tree_free(in);
                }
            tj_ctx_free(cn);
        }
    }
    tj_ctx_free(ctx);
    test_reverse_donated();
    test_reverse_print();
    test_reverse_golden();
}
int main(void) {
    tj_ctx *ctx = tj_ctx_new();
    enum { L = 3, B = 4, E = 6, H = 8 };
    tj_policy everything = tj_everything_saveable();
    cfg cs = {&everything, 0, L}, cu = {NULL, 1, L};
    tj_tree *in, *o1, *o2;
    tj_prog *p1, *p2;

    test_deep(1);
    test_deep(2);
    test_deep_policies();
    test_big_scan();
    test_nested_rerun(ctx);
    test_partial_offload();
    tjt_current = "scan vs unrolled";
    in = make_inputs(ctx, TJ_F64, L, B, E, H);
    p1 = tj_jit(ctx, "scan", stack_grads, &cs, in, NULL);
    p2 = tj_jit(ctx, "unrolled", stack_grads, &cu, in, NULL);
    TJT_CHECK(p1 && p2, "jit failed: %s", tj_error(ctx));
    o1 = tj_tree_new(ctx);
    o2 = tj_tree_new(ctx);
    if (p1 && p2 && !tj_run(p1, in, o1) && !tj_run(p2, in, o2)) {
        const char *names[] = {"loss", "g_w1", "g_w2", "g_x"};
        int i;
        for (i = 0; i < 4; i++)
            TJT_CHECK(maxdiff(tj_tree_array(o1, names[i]), tj_tree_array(o2, names[i])) < 1e-12, "%s differs: %g", names[i],
                      maxdiff(tj_tree_array(o1, names[i]), tj_tree_array(o2, names[i])));
    } else TJT_CHECK(0, "run failed: %s", tj_error(ctx));
    tj_tree_free(o1);
    tj_tree_free(o2);
    tj_prog_free(p1);
    tj_prog_free(p2);
    TJT_GRADCHECK(ctx, "scanned MLP stack", stack_loss, &cs, in, "x w1 w2 wout");
    tj_tree_free(in);

    tjt_current = "outer values in a body";
    {
        tj_tree *mi = tj_tree_new(ctx);
        tj_tree_set_array(mi, "x", tjt_rand(ctx, TJ_F64, "batch=2 embed=3", 21, -1, 1));
        tj_tree_set_array(mi, "b", tjt_rand(ctx, TJ_F64, "embed=3", 22, -1, 1));
        tj_tree_set_array(mi, "w", tjt_rand(ctx, TJ_F64, "embed=3 e2=3", 23, -0.5, 0.5));
        TJT_GRADCHECK(ctx, "outer value as either operand", mix_loss, NULL, mi, "x b w");
        tj_tree_free(mi);
    }
    tjt_current = "nested scan";
    {
        tj_policy ev = tj_everything_saveable(), no = tj_nothing_saveable();
        tj_tree *nin = tj_tree_new(ctx);
        tj_tree_set_array(nin, "x", tjt_rand(ctx, TJ_F64, "batch=2 embed=3", 7, -1, 1));
        tj_tree_set_array(nin, "s", tjt_rand(ctx, TJ_F64, "layer=3 sub=2 embed=3", 8, -0.7, 0.7));
        TJT_GRADCHECK(ctx, "nested scan, everything saveable", nested_loss, &ev, nin, "x s");
        TJT_GRADCHECK(ctx, "nested scan, nothing saveable", nested_loss, &no, nin, "x s");
        tj_tree_free(nin);
    }
    tjt_current = "remat regions";
    {
        tj_policy no = tj_nothing_saveable();
        in = make_inputs(ctx, TJ_F64, L, B, E, H);
        TJT_GRADCHECK(ctx, "checkpoint inside scan inside checkpoint", remat_loss, &no, in, "x w1 w2 wout");
        tj_tree_free(in);
    }

    /* every policy: same bits as everything_saveable; bytes as the shapes say */
    tjt_current = "policies";
    {
        tj_policy pol[8];
        const char *pname[8] = {"everything_saveable", "nothing_saveable", "dots_saveable", "save 'hidden'", "offload 'hidden'", "offload 'residual'",
                                "offload both", "save_from_both(save hidden, offload residual)"};
        tj_policy sh, orr;
        tj_tree *outs[8];
        tj_memory_analysis mem[8];
        int i, k;
        int64_t hidden_bytes = (int64_t)L * B * H * 4, resid_bytes = (int64_t)L * B * E * 4, saved_bytes[8];
        sh = tj_save_only_these_names("hidden");
        orr = tj_save_and_offload_only_these_names("", "residual");
        pol[0] = tj_everything_saveable();
        pol[1] = tj_nothing_saveable();
        pol[2] = tj_dots_saveable();
        pol[3] = tj_save_only_these_names("hidden");
        pol[4] = tj_save_and_offload_only_these_names("", "hidden");
        pol[5] = tj_save_and_offload_only_these_names("", "residual");
        pol[6] = tj_save_and_offload_only_these_names("", "hidden residual");
        pol[7] = tj_save_from_both(&sh, &orr);
        in = make_inputs(ctx, TJ_F32, L, B, E, H);
        for (i = 0; i < 8; i++) {
            cfg c = {&pol[i], 0, L};
            tj_prog *p = tj_jit(ctx, pname[i], stack_grads, &c, in, NULL);
            outs[i] = tj_tree_new(ctx);
            TJT_CHECK(p != NULL, "%s: jit failed: %s", pname[i], tj_error(ctx));
            if (!p) { tj_clear_error(ctx); continue; }
            TJT_CHECK(tj_run(p, in, outs[i]) == TJ_OK, "%s: run failed: %s", pname[i], tj_error(ctx));
            mem[i] = tj_prog_memory(p);
            if (getenv("TJ_TEST_VERBOSE")) { tj_prog_residuals_print(p, stdout); tj_memory_print(p, stdout); }
            if (i > 0)
                for (k = 0; k < 4; k++) {
                    const char *nm[] = {"loss", "g_w1", "g_w2", "g_x"};
                    TJT_CHECK(bits_equal(tj_tree_array(outs[0], nm[k]), tj_tree_array(outs[i], nm[k])), "%s: %s not bit-identical to everything_saveable (max diff %g)",
                              pname[i], nm[k], maxdiff(tj_tree_array(outs[0], nm[k]), tj_tree_array(outs[i], nm[k])));
                }
            /* the report: what each policy kept */
            {
                tj_residual rows[64];
                int nr = tj_prog_residuals(p, rows, 64), j;
                int64_t saved = 0, off = 0;
                for (j = 0; j < nr && j < 64; j++) {
                    if (rows[j].decision == TJ_SAVE) saved += rows[j].bytes;
                    if (rows[j].decision == TJ_OFFLOAD) off += rows[j].bytes;
                }
                /* host memory holds exactly the offloaded stacks (each 64-byte aligned) */
                {
                    int64_t host = 0;
                    for (j = 0; j < nr && j < 64; j++) if (rows[j].decision == TJ_OFFLOAD) host += tjt_align(rows[j].bytes);
                    TJT_CHECK(host == mem[i].host_temp_bytes, "%s: offloaded %lld B per report but host temp %lld B", pname[i], (long long)host,
                              (long long)mem[i].host_temp_bytes);
                }
                saved_bytes[i] = saved;
                if (i == 4) TJT_CHECK(off == hidden_bytes, "offload hidden: %lld B offloaded, want L*size(hidden) = %lld", (long long)off, (long long)hidden_bytes);
                if (i == 5) TJT_CHECK(off == resid_bytes, "offload residual: %lld B offloaded, want L*size(carry) = %lld", (long long)off, (long long)resid_bytes);
                if (i == 6) TJT_CHECK(off == hidden_bytes + resid_bytes, "offload both: %lld B", (long long)off);
            }
            tj_prog_free(p);
        }
        /* offloading 'hidden' instead of saving it moves exactly its bytes off the device */
        TJT_CHECK(saved_bytes[3] - saved_bytes[4] == hidden_bytes, "saved on device: save hidden %lld B, offload hidden %lld B, want a difference of %lld",
                  (long long)saved_bytes[3], (long long)saved_bytes[4], (long long)hidden_bytes);
        TJT_CHECK(mem[4].temp_bytes < mem[3].temp_bytes, "offloading hidden should lower device temp (%lld vs %lld)", (long long)mem[4].temp_bytes,
                  (long long)mem[3].temp_bytes);
        TJT_CHECK(saved_bytes[5] == 0 && mem[5].host_temp_bytes == tjt_align(resid_bytes), "offload residual: %lld B still saved on device",
                  (long long)saved_bytes[5]);
        TJT_CHECK(mem[1].temp_bytes < mem[0].temp_bytes, "nothing_saveable should need less device memory (%lld vs %lld)", (long long)mem[1].temp_bytes,
                  (long long)mem[0].temp_bytes);
        for (i = 0; i < 8; i++) tj_tree_free(outs[i]);
        tj_tree_free(in);
    }

    /* tj_grad inside a body, with respect to a captured weight */
    tjt_current = "grad of a capture";
    {
        tj_tree *o = tj_tree_new(ctx);
        tj_prog *p;
        in = tj_tree_new(ctx);
        tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F64, "in=3 out=2", 6, -1, 1));
        tj_tree_set_array(in, "xm", tjt_rand(ctx, TJ_F64, "micro=4 in=3", 7, -1, 1));
        p = tj_jit(ctx, "capgrad", capgrad, NULL, in, NULL);
        TJT_CHECK(p && !tj_run(p, in, o), "grad inside a body w.r.t. a capture: %s", tj_error(ctx));
        if (p && tj_tree_size(o) == 2) TJT_CHECK(maxdiff(tj_tree_array(o, "g"), tj_tree_array(o, "ref")) < 1e-12, "gradient of a captured weight is wrong");
        tj_prog_free(p);
        tj_tree_free(o);
        tj_tree_free(in);
    }

    /* offload inside a scan inside a scan: same bits, host memory in use */
    tjt_current = "nested offload";
    {
        tj_policy save = tj_everything_saveable(), off = tj_save_and_offload_only_these_names("", "hidden residual");
        accum_cfg a0 = {&save}, a1 = {&off};
        tj_prog *p0, *p1;
        tj_tree *o0 = tj_tree_new(ctx), *o1 = tj_tree_new(ctx);
        char s[96];
        in = make_inputs(ctx, TJ_F32, L, B, E, H);
        snprintf(s, sizeof s, "micro=3 batch=%d embed=%d", B, E);
        tj_tree_set_array(in, "xm", tjt_rand(ctx, TJ_F32, s, 5, -1, 1));
        p0 = tj_jit(ctx, "accum saved", accum_grads, &a0, in, NULL);
        p1 = tj_jit(ctx, "accum offloaded", accum_grads, &a1, in, NULL);
        TJT_CHECK(p0 && p1 && !tj_run(p0, in, o0) && !tj_run(p1, in, o1), "nested offload programs: %s", tj_error(ctx));
        if (p0 && p1 && tj_tree_size(o1) == 2) {
            tj_memory_analysis m0 = tj_prog_memory(p0), m1 = tj_prog_memory(p1);
            TJT_CHECK(bits_equal(tj_tree_array(o0, "g_w1"), tj_tree_array(o1, "g_w1")) && bits_equal(tj_tree_array(o0, "g_w2"), tj_tree_array(o1, "g_w2")),
                      "offloading inside a nested scan changes the gradients");
            TJT_CHECK(tj_get_alloc_stats(ctx).arena_bytes == m0.temp_bytes + m1.temp_bytes + m1.host_temp_bytes,
                      "nested offload: the arenas held (%lld B) are not what the two analyses say", (long long)tj_get_alloc_stats(ctx).arena_bytes);
            TJT_CHECK(m1.host_temp_bytes > 0 && m0.host_temp_bytes == 0 && m1.temp_bytes < m0.temp_bytes,
                      "nested offload: host temp %lld B (want > 0), device temp %lld B vs %lld B saved", (long long)m1.host_temp_bytes,
                      (long long)m1.temp_bytes, (long long)m0.temp_bytes);
        }
        tj_prog_free(p0);
        tj_prog_free(p1);
        tj_tree_free(o0);
        tj_tree_free(o1);
        tj_tree_free(in);
    }

    /* lint: a name no value carries; an unknown memory space */
    tjt_current = "lint";
    {
        tj_policy bad = tj_save_only_these_names("hiddden");
        tj_policy space = tj_save_and_offload_only_these_names("", "hidden");
        cfg c = {&bad, 0, L};
        tj_prog *p;
        char buf[1024];
        in = make_inputs(ctx, TJ_F32, L, B, E, H);
        p = tj_jit(ctx, "lint", stack_grads, &c, in, NULL);
        TJT_CHECK(p && tj_prog_lint(p, buf, sizeof buf) >= 1 && strstr(buf, "'hiddden'"), "lint should name 'hiddden': %s", p ? buf : tj_error(ctx));
        tj_prog_free(p);
        space.offload_dst = "nvme";
        c.policy = &space;
        p = tj_jit(ctx, "space", stack_grads, &c, in, NULL);
        TJT_CHECK(p == NULL, "unknown memory space accepted");
        TJT_ERROR_HAS(ctx, "nvme", "memory space", "test_scan.c");
        tj_prog_free(p);
        tj_tree_free(in);
    }

    /* a loop-invariant residual (made from captured values alone) is kept
       once, as JAX's scan hoists it, not stacked over the iterations */
    tjt_current = "loop-invariant residual";
    {
        tj_policy ev = tj_everything_saveable(), no = tj_nothing_saveable();
        const tj_policy *pols[3] = {NULL, &ev, &no};
        tj_tree *o[3];
        int i, k, j;
        in = tj_tree_new(ctx);
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=4 embed=8", 31, -1, 1));
        tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F32, "layer=5 embed=8 e2=8", 32, -0.5, 0.5));
        tj_tree_set_array(in, "u", tjt_rand(ctx, TJ_F32, "embed=8 e2=8", 33, -0.5, 0.5));
        for (i = 0; i < 3; i++) {
            tj_prog *p = tj_jit(ctx, "invariant", inv_grads, (void *)pols[i], in, NULL);
            tj_residual rows[32];
            int nr, found = 0;
            o[i] = tj_tree_new(ctx);
            TJT_CHECK(p && tj_run(p, in, o[i]) == TJ_OK, "policy %d: %s", i, tj_error(ctx));
            if (!p) { tj_clear_error(ctx); continue; }
            nr = tj_prog_residuals(p, rows, 32);
            for (j = 0; j < nr && j < 32; j++)
                if (strcmp(rows[j].op, "tanh") == 0 && strstr(rows[j].shape, "e2=8") && strstr(rows[j].shape, "embed=8") && !strstr(rows[j].shape, "batch")) {
                    found = 1;
                    if (i < 2)
                        TJT_CHECK(rows[j].decision == TJ_SAVE && rows[j].bytes == 8 * 8 * 4, "policy %d: tanh(u) %s %lld B, want saved once (256 B, JAX hoists it): %s", i,
                                  rows[j].decision == TJ_SAVE ? "saved" : "not saved", (long long)rows[j].bytes, rows[j].rule);
                }
            TJT_CHECK(found, "policy %d: no residual row for tanh(u)", i);
            if (i > 0)
                for (k = 0; k < 4; k++) {
                    const char *nm[] = {"loss", "g_x", "g_w", "g_u"};
                    TJT_CHECK(bits_equal(tj_tree_array(o[0], nm[k]), tj_tree_array(o[i], nm[k])), "policy %d: %s differs from no policy by %g", i, nm[k],
                              maxdiff(tj_tree_array(o[0], nm[k]), tj_tree_array(o[i], nm[k])));
                }
            tj_prog_free(p);
        }
        for (i = 0; i < 3; i++) tj_tree_free(o[i]);
        tj_tree_free(in);
        in = tj_tree_new(ctx);
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "batch=4 embed=8", 31, -1, 1));
        tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F64, "layer=5 embed=8 e2=8", 32, -0.5, 0.5));
        tj_tree_set_array(in, "u", tjt_rand(ctx, TJ_F64, "embed=8 e2=8", 33, -0.5, 0.5));
        TJT_GRADCHECK(ctx, "loop-invariant residual, everything saveable", inv_grads, &ev, in, "x w u");
        tj_tree_free(in);
    }
    /* an offloaded loop-invariant residual: one host copy, as JAX (0.10.2:
       saved_residuals of lax.scan(jax.checkpoint(body, policy=
       save_and_offload_only_these_names([], ['ut'], 'device',
       'pinned_host'))) with ut = checkpoint_name(tanh(u), 'ut') of a
       captured u f32[8,8], ws f32[5,8,8], x f32[4,8] lists "(8, 8) output of
       device_put" once, and the gradient's jaxpr has one device_put to Host
       and one back), not a stack of 5; on one device and on a 2x2 mesh */
    tjt_current = "offloaded loop-invariant residual";
    {
        tj_policy ev = tj_everything_saveable(), off = tj_save_and_offload_only_these_names("", "ut");
        int d;
        for (d = 0; d < 2; d++) {
            tj_ctx *cx = d ? tj_ctx_new() : ctx;
            tj_prog *p0, *p1;
            tj_tree *o0, *o1;
            int nd = d ? 4 : 1;
            tj_alloc_stats a0;
            if (d) {
                tj_set_devices(cx, 4);
                tj_set_mesh(cx, "data=2 model=2");
            }
            in = tj_tree_new(cx);
            tj_tree_set_array(in, "x", d ? tjt_put(tjt_rand(cx, TJ_F32, "batch=4 embed=8", 31, -1, 1), "batch:data") : tjt_rand(cx, TJ_F32, "batch=4 embed=8", 31, -1, 1));
            tj_tree_set_array(in, "w", tjt_rand(cx, TJ_F32, "layer=5 embed=8 e2=8", 32, -0.5, 0.5));
            tj_tree_set_array(in, "u", d ? tjt_put(tjt_rand(cx, TJ_F32, "embed=8 e2=8", 33, -0.5, 0.5), "e2:model") : tjt_rand(cx, TJ_F32, "embed=8 e2=8", 33, -0.5, 0.5));
            o0 = tj_tree_new(cx);
            o1 = tj_tree_new(cx);
            a0 = tj_get_alloc_stats(cx);
            p0 = tj_jit(cx, "invariant saved", invo_grads, &ev, in, NULL);
            p1 = tj_jit(cx, "invariant offloaded", invo_grads, &off, in, NULL);
            TJT_CHECK(p0 && p1 && !tj_run(p0, in, o0) && !tj_run(p1, in, o1), "%d devices: %s", nd, tj_error(cx));
            if (p0 && p1 && tj_tree_size(o0) == 4 && tj_tree_size(o1) == 4) {
                tj_residual rows[32];
                int nr = tj_prog_residuals(p1, rows, 32), j, k, n = 0;
                int64_t hb = -1;
                tj_memory_analysis m0 = tj_prog_memory(p0), m1 = tj_prog_memory(p1);
                for (j = 0; j < nr && j < 32; j++)
                    if (rows[j].decision == TJ_OFFLOAD) {
                        n++;
                        hb = rows[j].device_bytes;
                        TJT_CHECK(!strcmp(rows[j].name, "ut") && rows[j].bytes == 8 * 8 * 4, "%d devices: offloaded %s, %lld B (want ut, 256 B once)", nd, rows[j].name,
                                  (long long)rows[j].bytes);
                    }
                TJT_CHECK(n == 1 && hb > 0 && m1.host_temp_bytes == tjt_align(hb), "%d devices: %d offloaded rows, host temp %lld B, want one copy (%lld B)", nd, n,
                          (long long)m1.host_temp_bytes, (long long)tjt_align(hb));
                TJT_CHECK(tj_get_alloc_stats(cx).arena_bytes - a0.arena_bytes == nd * (m0.temp_bytes + m1.temp_bytes + m1.host_temp_bytes),
                          "%d devices: the arenas held (%lld B) are not what the analyses say (%lld B)", nd, (long long)(tj_get_alloc_stats(cx).arena_bytes - a0.arena_bytes),
                          (long long)(nd * (m0.temp_bytes + m1.temp_bytes + m1.host_temp_bytes)));
                for (k = 0; k < 4; k++) {
                    const char *nm[] = {"loss", "g_x", "g_w", "g_u"};
                    TJT_CHECK(bits_equal(tj_tree_array(o0, nm[k]), tj_tree_array(o1, nm[k])), "%d devices: %s differs from everything_saveable by %g", nd, nm[k],
                              maxdiff(tj_tree_array(o0, nm[k]), tj_tree_array(o1, nm[k])));
                }
            }
            tj_prog_free(p0);
            tj_prog_free(p1);
            tj_tree_free(o0);
            tj_tree_free(o1);
            tj_tree_free(in);
            if (d) tj_ctx_free(cx);
        }
        in = tj_tree_new(ctx);
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "batch=4 embed=8", 31, -1, 1));
        tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F64, "layer=5 embed=8 e2=8", 32, -0.5, 0.5));
        tj_tree_set_array(in, "u", tjt_rand(ctx, TJ_F64, "embed=8 e2=8", 33, -0.5, 0.5));
        TJT_GRADCHECK(ctx, "offloaded loop-invariant residual", invo_grads, &off, in, "x w u");
        tj_tree_free(in);
    }

    tjt_current = "nested remat regions";
    {
        /* (outer, inner) policies: 0 everything, 1 nothing, 2 save "g" */
        int cfgs[4][2] = {{-1, 0}, {1, 0}, {2, 1}, {0, 1}}, i, j, k;
        tj_tree *o[4];
        in = tj_tree_new(ctx);
        nest_pol[0] = tj_everything_saveable();
        nest_pol[1] = tj_nothing_saveable();
        nest_pol[2] = tj_save_only_these_names("g");
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=4 embed=8", 41, -1, 1));
        tj_tree_set_array(in, "w1", tjt_rand(ctx, TJ_F32, "embed=8 ff=16", 42, -0.5, 0.5));
        tj_tree_set_array(in, "w2", tjt_rand(ctx, TJ_F32, "ff=16 out=8", 43, -0.5, 0.5));
        for (i = 0; i < 4; i++) {
            tj_prog *p = tj_jit(ctx, "nested regions", nest_grads, cfgs[i], in, NULL);
            tj_residual rows[32];
            int nr, inner_out = -1;
            o[i] = tj_tree_new(ctx);
            TJT_CHECK(p && tj_run(p, in, o[i]) == TJ_OK, "outer %d inner %d: %s", cfgs[i][0], cfgs[i][1], tj_error(ctx));
            if (!p) { tj_clear_error(ctx); continue; }
            nr = tj_prog_residuals(p, rows, 32);
            for (j = 0; j < nr && j < 32; j++)
                if (!rows[j].nested && !strcmp(rows[j].op, "tanh") && strstr(rows[j].shape, "ff=16") && rows[j].decision != TJ_RECOMPUTE) inner_out = j; /* (rows name the value inside) */
            /* the inner region's output crosses the outer boundary only
               where the outer policy saves it (everything_saveable) */
            if (cfgs[i][0] == 1 || cfgs[i][0] == 2)
                TJT_CHECK(inner_out < 0, "outer %d inner %d: the inner region's output is kept across the outer region (%s), JAX recomputes it", cfgs[i][0], cfgs[i][1],
                          inner_out >= 0 ? rows[inner_out].rule : "");
            if (i > 0)
                for (k = 0; k < 4; k++) {
                    const char *nm[] = {"loss", "g_x", "g_w1", "g_w2"};
                    TJT_CHECK(bits_equal(tj_tree_array(o[0], nm[k]), tj_tree_array(o[i], nm[k])), "outer %d inner %d: %s differs by %g", cfgs[i][0], cfgs[i][1],
                              nm[k], maxdiff(tj_tree_array(o[0], nm[k]), tj_tree_array(o[i], nm[k])));
                }
            tj_prog_free(p);
        }
        for (i = 0; i < 4; i++) tj_tree_free(o[i]);
        tj_tree_free(in);
        in = tj_tree_new(ctx);
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "batch=4 embed=8", 41, -1, 1));
        tj_tree_set_array(in, "w1", tjt_rand(ctx, TJ_F64, "embed=8 ff=16", 42, -0.5, 0.5));
        tj_tree_set_array(in, "w2", tjt_rand(ctx, TJ_F64, "ff=16 out=8", 43, -0.5, 0.5));
        TJT_GRADCHECK(ctx, "nested regions, outer nothing_saveable", nest_grads, cfgs[1], in, "x w1 w2");
        tj_tree_free(in);
    }


    /* nested regions: the outermost policy judges every value, inside
       nested regions too (JAX's numbers: np_check's comment) */
    tjt_current = "nested policies as JAX";
    {
        int o, m, i, sc, k;
        tj_tree *ref = NULL;
        np_pol[NP_NOTHING] = tj_nothing_saveable();
        np_pol[NP_EVERYTHING] = tj_everything_saveable();
        np_pol[NP_DOTS] = tj_dots_saveable();
        np_pol[NP_NAMES] = tj_save_only_these_names("h");
        np_pol[NP_OFFLOAD] = tj_save_and_offload_only_these_names("", "h");
        for (sc = 0; sc < 2; sc++) {
            tj_tree *nin = np_inputs(ctx, TJ_F32, sc, 0);
            for (m = -1; m < (sc ? 0 : NP_N); m++)
                for (o = 0; o < NP_N; o++)
                    for (i = 0; i < NP_N; i++) {
                        np_cfg c = {o, m, i, sc};
                        tj_tree *out = tj_tree_new(ctx);
                        np_check(ctx, &c, nin, out, 1);
                        if (!ref) ref = out, out = NULL;
                        else if (tj_tree_size(out) == 3) { /* the same math: the same bits */
                            char what[96];
                            snprintf(what, sizeof what, "%s outer %d middle %d inner %d", sc ? "scan" : "region", o, m, i);
                            same_bits3(ref, out, what);
                        }
                        tj_tree_free(out);
                    }
            tj_tree_free(ref);
            ref = NULL;
            tj_tree_free(nin);
        }
        { /* finite differences (f64, replicated inputs) */
            static const np_cfg fd[] = {{NP_NAMES, -1, NP_NOTHING, 0}, {NP_OFFLOAD, -1, NP_NOTHING, 0}, {NP_NOTHING, -1, NP_OFFLOAD, 0},
                                        {NP_DOTS, -1, NP_EVERYTHING, 0}, {NP_NAMES, NP_OFFLOAD, NP_NOTHING, 0}, {NP_OFFLOAD, -1, NP_NAMES, 1},
                                        {NP_DOTS, -1, NP_NOTHING, 1}};
            for (k = 0; k < (int)(sizeof fd / sizeof fd[0]); k++) {
                tj_tree *nin = np_inputs(ctx, TJ_F64, fd[k].scan, 0);
                TJT_GRADCHECK(ctx, "nested policies", np_grads, (void *)&fd[k], nin, "x w");
                tj_tree_free(nin);
            }
        }
        { /* a 2x2 mesh of simulated devices, the inputs sharded: the same
             rows (global bytes, a quarter or half per device), the same
             values as one device */
            tj_ctx *c4 = tj_ctx_new();
            tj_set_devices(c4, 4);
            tj_set_mesh(c4, "data=2 model=2");
            for (sc = 0; sc < 2; sc++) {
                tj_tree *n1 = np_inputs(ctx, TJ_F32, sc, 0), *n4 = np_inputs(c4, TJ_F32, sc, 1);
                static const int cs[][3] = {{NP_NAMES, -1, NP_NOTHING}, {NP_OFFLOAD, -1, NP_NOTHING}, {NP_DOTS, -1, NP_OFFLOAD}, {NP_NOTHING, -1, NP_NAMES},
                                            {NP_OFFLOAD, NP_NAMES, NP_NOTHING}};
                for (k = 0; k < (int)(sizeof cs / sizeof cs[0]); k++) {
                    np_cfg c = {cs[k][0], sc ? -1 : cs[k][1], cs[k][2], sc};
                    tj_tree *o1 = tj_tree_new(ctx), *o4 = tj_tree_new(c4);
                    int j;
                    np_check(ctx, &c, n1, o1, 1);
                    np_check(c4, &c, n4, o4, 4);
                    for (j = 0; j < 3 && tj_tree_size(o1) == 3 && tj_tree_size(o4) == 3; j++) {
                        const char *nm[] = {"loss", "g_x", "g_w"};
                        tj_array *a = tj_tree_array(o1, nm[j]), *b = tj_tree_array(o4, nm[j]);
                        double md = tj_array_numel(a) == tj_array_numel(b) ? maxdiff(a, b) : 1e30;
                        TJT_CHECK(md < 1e-5, "%s outer %d inner %d: %s on 2x2 devices differs from one device by %g", sc ? "scan" : "region",
                                  c.o, c.i, nm[j], md);
                    }
                    tj_tree_free(o1);
                    tj_tree_free(o4);
                }
                tj_tree_free(n1);
                tj_tree_free(n4);
            }
            tj_ctx_free(c4);
        }
    }
    /* the report's bytes are the global value's (JAX's global shapes);
       device_bytes one device's share, which its host memory holds */
    tjt_current = "residual bytes per device";
    {
        tj_ctx *c4 = tj_ctx_new();
        tj_policy off = tj_save_and_offload_only_these_names("", "h");
        tj_prog *p;
        tj_tree *o = tj_tree_new(c4);
        tj_set_devices(c4, 4);
        tj_set_mesh(c4, "data=4");
        in = tj_tree_new(c4);
        tj_tree_set_array(in, "x", tjt_put(tjt_rand(c4, TJ_F32, "batch=16 embed=64", 51, -1, 1), "batch:data"));
        tj_tree_set_array(in, "w", tjt_rand(c4, TJ_F32, "layer=3 embed=64 e2=64", 52, -0.2, 0.2));
        p = tj_jit(c4, "sharded offload", shb_grads, &off, in, NULL);
        TJT_CHECK(p && tj_run(p, in, o) == TJ_OK, "sharded offload: %s", tj_error(c4));
        if (p) {
            tj_residual rows[16];
            int nr = tj_prog_residuals(p, rows, 16), j, noff = 0;
            int64_t host = 0;
            for (j = 0; j < nr && j < 16; j++) {
                TJT_CHECK(rows[j].bytes == 4 * rows[j].device_bytes, "row %d (%s): %lld B global, %lld B per device, want a quarter", j, rows[j].op,
                          (long long)rows[j].bytes, (long long)rows[j].device_bytes);
                if (rows[j].decision == TJ_OFFLOAD) host += tjt_align(rows[j].device_bytes), noff++;
            }
            TJT_CHECK(noff == 1 && host == tj_prog_memory(p).host_temp_bytes, "%d offloaded rows, %lld B per device, host temp %lld B", noff, (long long)host,
                      (long long)tj_prog_memory(p).host_temp_bytes);
        }
        tj_prog_free(p);
        tj_tree_free(o);
        tj_tree_free(in);
        tj_ctx_free(c4);
    }

    /* JAX's offload_dot_with_no_batch_dims: the dots without batch axes
       go to host memory, the rest is recomputed */
    tjt_current = "offload_dot_with_no_batch_dims";
    {
        tj_policy od = tj_offload_dot_with_no_batch_dims(), ev = tj_everything_saveable();
        cfg c0 = {&ev, 0, L}, c1 = {&od, 0, L};
        tj_prog *p0, *p1;
        tj_tree *o0, *o1;
        in = make_inputs(ctx, TJ_F32, L, B, E, H);
        p0 = tj_jit(ctx, "everything", stack_grads, &c0, in, NULL);
        p1 = tj_jit(ctx, "offload dots", stack_grads, &c1, in, NULL);
        o0 = tj_tree_new(ctx);
        o1 = tj_tree_new(ctx);
        TJT_CHECK(p0 && p1 && !tj_run(p0, in, o0) && !tj_run(p1, in, o1), "offload_dot_with_no_batch_dims: %s", tj_error(ctx));
        if (p0 && p1) {
            tj_residual rows[64];
            int nr = tj_prog_residuals(p1, rows, 64), j, k;
            int64_t off = 0, host = 0;
            for (j = 0; j < nr && j < 64; j++) {
                if (rows[j].decision == TJ_OFFLOAD) {
                    TJT_CHECK(!strcmp(rows[j].op, "dot"), "offloaded a %s (%s), want only dots", rows[j].op, rows[j].rule);
                    off += rows[j].bytes;
                    host += tjt_align(rows[j].bytes);
                }
                if (rows[j].decision == TJ_SAVE) TJT_CHECK(rows[j].carry, "saved a %s (%s), want only the carry", rows[j].op, rows[j].rule);
            }
            /* (JAX: the first dot's output, which relu's recomputation needs, stacked on the host; the second is not needed) */
            TJT_CHECK(off == (int64_t)L * B * H * 4, "offloaded %lld B, want L*size(hidden) = %lld", (long long)off, (long long)L * B * H * 4);
            TJT_CHECK(host == tj_prog_memory(p1).host_temp_bytes, "host temp %lld B, offloaded %lld B", (long long)tj_prog_memory(p1).host_temp_bytes, (long long)host);
            for (k = 0; k < 4; k++) {
                const char *nm[] = {"loss", "g_w1", "g_w2", "g_x"};
                TJT_CHECK(bits_equal(tj_tree_array(o0, nm[k]), tj_tree_array(o1, nm[k])), "%s differs from everything_saveable", nm[k]);
            }
        }
        tj_prog_free(p0);
        tj_prog_free(p1);
        tj_tree_free(o0);
        tj_tree_free(o1);
        tj_tree_free(in);
    }

    tjt_current = "nested regions: saved partial sums, second derivatives";
    {
        static const char *meshes[] = {"model=2", "data=2 model=2"};
        static const int nd[] = {2, 4};
        int m, k, second;
        rv_pol[0] = tj_dots_saveable();
        rv_pol[1] = tj_everything_saveable();
        rv_pol[2] = tj_save_only_these_names("h");
        for (second = 0; second < 2; second++) {
            tj_tree *i1 = rv_inputs(ctx, TJ_F32, NULL), *o1 = tj_tree_new(ctx);
            if (rv_run(ctx, i1, second, o1))
                for (m = 0; m < 2; m++) {
                    tj_ctx *cm = tj_ctx_new();
                    tj_tree *im, *om;
                    tj_set_devices(cm, nd[m]);
                    tj_set_mesh(cm, meshes[m]);
                    im = rv_inputs(cm, TJ_F32, "h:model");
                    om = tj_tree_new(cm);
                    if (rv_run(cm, im, second, om))
                        for (k = 0; k < 2; k++) {
                            const char *nm[] = {"gx", "gw"};
                            double d = maxdiff(tj_tree_array(o1, nm[k]), tj_tree_array(om, nm[k]));
                            TJT_CHECK(d < 1e-5, "%s on %s (second derivative %d) differs from one device by %g", nm[k], meshes[m], second, d);
                        }
                    tj_tree_free(om);
                    tj_tree_free(im);
                    tj_ctx_free(cm);
                }
            tj_tree_free(o1);
            tj_tree_free(i1);
        }
        { /* finite differences of the second derivative (f64, replicated) */
            tj_tree *in = rv_inputs(ctx, TJ_F64, NULL);
            TJT_GRADCHECK(ctx, "nested regions, second derivative", rv_fn, (void *)1, in, "x w");
            tj_tree_free(in);
        }
    }

    /* checkpoint (or a scan with a policy) around a scan: the policy judges
       the values inside the nested scan, as JAX (cs_check's comment); until
       2026-11-24 tinyjax kept the nested scan's stacked residuals whatever
       the policy said */
    tjt_current = "checkpoint around a scan";
    {
        int pk, q, L, outer, k;
        cs_pol[CS_NOTHING] = tj_nothing_saveable();
        cs_pol[CS_EVERYTHING] = tj_everything_saveable();
        cs_pol[CS_DOTS] = tj_dots_saveable();
        cs_pol[CS_DOTSNB] = tj_dots_with_no_batch_dims_saveable();
        cs_pol[CS_NAMES] = tj_save_only_these_names("h");
        cs_pol[CS_ANYBUT] = tj_save_any_names_but_these("h");
        cs_pol[CS_OFFNAMES] = tj_save_and_offload_only_these_names("", "h");
        cs_pol[CS_OFFDOTS] = tj_offload_dot_with_no_batch_dims();
        for (outer = 0; outer < 2; outer++)
            for (L = outer ? 3 : 1; L <= 3; L += 2) {
                tj_tree *cin = cs_inputs(ctx, TJ_F32, L, outer, 0), *ref = NULL;
                for (pk = 0; pk < CS_N; pk++)
                    for (q = -1; q < (outer ? 0 : CS_N); q++) {
                        cs_cfg c = {pk, q, outer, 0};
                        tj_tree *out = tj_tree_new(ctx);
                        cs_check(ctx, &c, L, cin, out, 1);
                        if (!ref) ref = out, out = NULL;
                        else if (tj_tree_size(out) == 3) { /* the same math: the same bits */
                            char what[96];
                            snprintf(what, sizeof what, "%s %d over a scan (policy %d), length %d", outer ? "scan" : "checkpoint", pk, q, L);
                            same_bits3(ref, out, what);
                        }
                        tj_tree_free(out);
                    }
                tj_tree_free(ref);
                tj_tree_free(cin);
            }
        { /* finite differences (f64) */
            static const cs_cfg fd[] = {{CS_NAMES, -1, 0, 0}, {CS_OFFNAMES, CS_NOTHING, 0, 0}, {CS_ANYBUT, -1, 0, 0}, {CS_DOTS, -1, 1, 0}, {CS_NOTHING, -1, 1, 0},
                                        {CS_NAMES, -1, 0, 1}, {CS_NOTHING, CS_DOTS, 0, 1}, {CS_OFFNAMES, -1, 1, 1}}; /* (the last three: second derivatives) */
            for (k = 0; k < (int)(sizeof fd / sizeof fd[0]); k++) {
                tj_tree *cin = cs_inputs(ctx, TJ_F64, 3, fd[k].outer, 0);
                TJT_GRADCHECK(ctx, "checkpoint around a scan", cs_fn, (void *)&fd[k], cin, "x w");
                tj_tree_free(cin);
            }
        }
        { /* a 2x2 mesh, the inputs sharded: the same rows, the values of one device */
            tj_ctx *c4 = tj_ctx_new();
            static const cs_cfg cs4[] = {{CS_NAMES, -1, 0, 0}, {CS_DOTS, CS_NOTHING, 0, 0}, {CS_OFFNAMES, -1, 0, 0}, {CS_NOTHING, -1, 0, 0}, {CS_NAMES, -1, 1, 0},
                                         {CS_OFFDOTS, -1, 1, 0}};
            tj_set_devices(c4, 4);
            tj_set_mesh(c4, "data=2 model=2");
            for (k = 0; k < (int)(sizeof cs4 / sizeof cs4[0]); k++) {
                tj_tree *n1 = cs_inputs(ctx, TJ_F32, 3, cs4[k].outer, 0), *n4 = cs_inputs(c4, TJ_F32, 3, cs4[k].outer, 1);
                tj_tree *o1 = tj_tree_new(ctx), *o4 = tj_tree_new(c4);
                int j;
                cs_check(ctx, &cs4[k], 3, n1, o1, 1);
                cs_check(c4, &cs4[k], 3, n4, o4, 4);
                for (j = 0; j < 3 && tj_tree_size(o1) == 3 && tj_tree_size(o4) == 3; j++) {
                    const char *nm[] = {"loss", "g_x", "g_w"};
                    tj_array *a = tj_tree_array(o1, nm[j]), *b = tj_tree_array(o4, nm[j]);
                    double md = tj_array_numel(a) == tj_array_numel(b) ? maxdiff(a, b) : 1e30;
                    TJT_CHECK(md < 1e-5, "config %d: %s on 2x2 devices differs from one device by %g", k, nm[j], md);
                }
                tj_tree_free(o1);
                tj_tree_free(o4);
                tj_tree_free(n1);
                tj_tree_free(n4);
            }
            tj_ctx_free(c4);
        }
        { /* around a custom_vjp (cv_fn's comment) */
            static const int cp[] = {CS_NOTHING, CS_DOTS, CS_NAMES};
            tj_tree *cin = tj_tree_new(ctx);
            tj_tree_set_array(cin, "x", tjt_rand(ctx, TJ_F64, "batch=2 embed=4", 75, -1, 1));
            tj_tree_set_array(cin, "w", tjt_rand(ctx, TJ_F64, "embed=4 e2=4", 76, -0.5, 0.5));
            for (k = 0; k < 3; k++) {
                tj_prog *p;
                tj_tree *out = tj_tree_new(ctx);
                cv_pol = &cs_pol[cp[k]];
                p = tj_jit(ctx, "checkpoint around a custom_vjp", cv_fn, NULL, cin, NULL);
                TJT_CHECK(p && tj_run(p, cin, out) == TJ_OK, "custom_vjp, policy %d: %s", cp[k], tj_error(ctx));
                if (p) {
                    tj_residual rows[32];
                    int nr = tj_prog_residuals(p, rows, 32), j, kept = 0, ok = 0;
                    for (j = 0; j < nr && j < 32; j++)
                        if (!rows[j].nested && rows[j].decision != TJ_RECOMPUTE) {
                            kept++;
                            ok += cp[k] == CS_DOTS ? !strcmp(rows[j].op, "dot") : !strcmp(rows[j].name, "h");
                        }
                    TJT_CHECK(kept == (cp[k] != CS_NOTHING) && ok == kept, "custom_vjp, policy %d: %d kept (%d as JAX's), JAX: %d", cp[k], kept, ok, cp[k] != CS_NOTHING);
                    tj_prog_free(p);
                } else
                    tj_clear_error(ctx);
                tj_tree_free(out);
                TJT_GRADCHECK(ctx, "checkpoint around a custom_vjp", cv_fn, NULL, cin, "x w");
            }
            tj_tree_free(cin);
        }
        { /* around a kernel of the user's (sq_fn's comment): the same bits as everything_saveable */
            static const int cp[] = {CS_EVERYTHING, CS_NOTHING, CS_DOTS};
            tj_tree *cin = tj_tree_new(ctx), *ref = NULL;
            tj_op_def d;
            memset(&d, 0, sizeof d);
            d.name = "sq";
            d.nout = 1;
            d.cpu = sq_cpu;
            d.vjp = sq_vjp;
            d.replication = tj_rep_same;
            tj_register_op(ctx, &d);
            tj_tree_set_array(cin, "x", tjt_rand(ctx, TJ_F64, "batch=2 embed=4", 77, -1, 1));
            tj_tree_set_array(cin, "w", tjt_rand(ctx, TJ_F64, "embed=4 e2=4", 78, -0.5, 0.5));
            for (k = 0; k < 3; k++) {
                tj_tree *out = tj_tree_new(ctx);
                tj_prog *p = tj_jit(ctx, "checkpoint around a custom op", sq_fn, (void *)&cs_pol[cp[k]], cin, NULL);
                TJT_CHECK(p && tj_run(p, cin, out) == TJ_OK, "custom op, policy %d: %s", cp[k], tj_error(ctx));
                if (p && k) {
                    tj_residual rows[32];
                    int nr = tj_prog_residuals(p, rows, 32), j, kept = 0, dots = 0;
                    for (j = 0; j < nr && j < 32; j++)
                        if (!rows[j].nested && rows[j].decision != TJ_RECOMPUTE) kept++, dots += !strcmp(rows[j].op, "dot");
                    TJT_CHECK(kept == dots && dots == (cp[k] == CS_DOTS), "custom op, policy %d: %d kept (%d dots), JAX: %d dots", cp[k], kept, dots, cp[k] == CS_DOTS);
                }
                if (!p) tj_clear_error(ctx);
                tj_prog_free(p);
                if (!ref) ref = out, out = NULL;
                else if (tj_tree_size(out) == 3) {
                    int j;
                    for (j = 0; j < 3; j++) {
                        const char *nm[] = {"loss", "g_x", "g_w"};
                        TJT_CHECK(bits_equal(tj_tree_array(ref, nm[j]), tj_tree_array(out, nm[j])), "custom op, policy %d: %s differs from everything_saveable by %g", cp[k],
                                  nm[j], maxdiff(tj_tree_array(ref, nm[j]), tj_tree_array(out, nm[j])));
                    }
                }
                tj_tree_free(out);
            }
            tj_tree_free(ref);
            tj_tree_free(cin);
        }
        { /* around and inside a shard_map (2 devices): the rows JAX keeps
             (a shard_map without a policy also lists, as "no policy", what
             a region inside it keeps: not counted), the bits of
             everything_saveable, finite differences */
            tj_ctx *c2 = tj_ctx_new();
            int mode, ck;
            static const int sp[] = {CS_EVERYTHING, CS_NOTHING, CS_DOTS, CS_NAMES, CS_OFFNAMES};
            tj_set_devices(c2, 2);
            tj_set_mesh(c2, "data=2");
            for (mode = 0; mode < 2; mode++)
                for (ck = 0; ck < 2; ck++) {
                    tj_tree *sin = sm_inputs(c2, TJ_F32, 1), *ref = NULL;
                    for (k = 0; k < (int)(sizeof sp / sizeof sp[0]); k++) {
                        sm_cfg c = {sp[k], mode, ck};
                        tj_tree *out = tj_tree_new(c2);
                        tj_prog *p = tj_jit(c2, "checkpoint and shard_map", sm_fn, &c, sin, NULL);
                        char what[128];
                        snprintf(what, sizeof what, "%s, policy %d, check %d", mode ? "checkpoint(shard_map(scan))" : "shard_map(checkpoint(scan))", sp[k], ck);
                        TJT_CHECK(p && tj_run(p, sin, out) == TJ_OK, "%s: %s", what, tj_error(c2));
                        if (!p) { tj_clear_error(c2); tj_tree_free(out); continue; }
                        if (sp[k] != CS_EVERYTHING) {
                            tj_residual rows[128];
                            int nr = tj_prog_residuals(p, rows, 128), j, kept = 0, bad = 0;
                            tj_memory_analysis m = tj_prog_memory(p);
                            for (j = 0; j < nr && j < 128; j++) {
                                const tj_residual *r = &rows[j];
                                if (r->nested || r->decision == TJ_RECOMPUTE || !strncmp(r->rule, "no policy", 9)) continue;
                                kept++;
                                bad += r->decision != (sp[k] == CS_OFFNAMES ? TJ_OFFLOAD : TJ_SAVE) || r->device_bytes != 3 * 2 * 4 * 4;
                            }
                            TJT_CHECK(kept == (sp[k] != CS_NOTHING) && !bad, "%s: %d stacks kept (%d not as JAX's), JAX: %d", what, kept, bad, sp[k] != CS_NOTHING);
                            TJT_CHECK(tj_get_alloc_stats(c2).arena_bytes == 2 * (m.temp_bytes + m.host_temp_bytes), "%s: the arenas held (%lld B) are not 2 x the plan's %lld + %lld B",
                                      what, (long long)tj_get_alloc_stats(c2).arena_bytes, (long long)m.temp_bytes, (long long)m.host_temp_bytes);
                        }
                        tj_prog_free(p);
                        if (!ref) ref = out, out = NULL;
                        else if (tj_tree_size(out) == 3) {
                            int j;
                            for (j = 0; j < 3; j++) {
                                const char *nm[] = {"loss", "g_x", "g_w"};
                                TJT_CHECK(bits_equal(tj_tree_array(ref, nm[j]), tj_tree_array(out, nm[j])), "%s: %s differs from everything_saveable by %g", what, nm[j],
                                          maxdiff(tj_tree_array(ref, nm[j]), tj_tree_array(out, nm[j])));
                            }
                        }
                        tj_tree_free(out);
                    }
                    tj_tree_free(ref);
                    tj_tree_free(sin);
                }
            {
                static const sm_cfg fd[] = {{CS_NAMES, 1, 1}, {CS_NOTHING, 1, 0}, {CS_OFFNAMES, 0, 1}};
                for (k = 0; k < (int)(sizeof fd / sizeof fd[0]); k++) {
                    tj_tree *sin = sm_inputs(c2, TJ_F64, 0);
                    TJT_GRADCHECK(c2, "checkpoint and shard_map", sm_fn, (void *)&fd[k], sin, "x w");
                    tj_tree_free(sin);
                }
            }
            tj_ctx_free(c2);
        }
    }

    test_lint_backward(); /* (after cs_pol is set) */
    test_drop_inlined();
    test_reverse(); /* (after cs_pol is set) */
    tj_ctx_free(ctx);
    return tjt_finish();
}
