/* test_attention: tj_attention with k and v shared over some of q's batch
 * axes (grouped-query and multi-query attention, no copies) and
 * tj_attention_masked (padding and arbitrary masks with JAX's
 * jax.nn.dot_product_attention semantics: masked logits become a large
 * finite negative, so a fully masked query row attends uniformly to every
 * key and its output is the mean of v).
 *
 * Each case runs the fused op and the composed form (softmax of the masked
 * scores, dot with v) for values and gradients in f32, f64 and bf16;
 * finite differences in f64; 2 and 4 simulated devices against one; under
 * tj_checkpoint with a policy and inside tj_scan; and numbers from JAX
 * 0.10.2 recorded below. */
#define _POSIX_C_SOURCE 200809L
#include "../tinyjax.h"
#include "tj_test.h"

#define LARGE_NEG (-0.7 * 3.4028234663852886e38) /* JAX's _get_large_negative (capped at f32's range for every dtype) */

typedef struct {
    const char *name;
    const char *q, *k, *v, *mask; /* shapes; mask NULL: tj_attention */
    const char *qpos, *kpos, *dim;
    int causal;
    int mask_kind; /* 0 random (about 1 in 3 masked), 1 padding: the mask's last axis is valid below a length per first-axis index
                      (some lengths 0), 2 random with every third row of the last axis fully masked */
    const char *rules; /* shardings for the 2- and 4-device runs */
} acase;

#define RULES "b:data kvh:model h:model"
static const acase cases[] = {
    {"gqa g=2", "b=2 kvh=2 g=2 t=5 d=4", "b=2 kvh=2 s=6 d=4", "b=2 kvh=2 s=6 d=3", NULL, "t", "s", "d", 0, 0, RULES},
    {"gqa g=1 causal", "b=2 kvh=2 g=1 t=5 d=4", "b=2 kvh=2 s=6 d=4", "b=2 kvh=2 s=6 d=4", NULL, "t", "s", "d", 1, 0, RULES},
    {"gqa g=4 causal", "b=2 kvh=2 g=4 t=6 d=4", "b=2 kvh=2 s=6 d=4", "b=2 kvh=2 s=6 d=4", NULL, "t", "s", "d", 1, 0, RULES},
    {"mqa", "b=2 h=4 t=5 d=4", "b=2 s=7 d=4", "b=2 s=7 d=4", NULL, "t", "s", "d", 0, 0, RULES},
    {"key padding (one batch row all padding)", "b=4 h=2 t=5 d=4", "b=4 h=2 s=6 d=4", "b=4 h=2 s=6 d=4", "b=4 s=6", "t", "s", "d", 0, 1, RULES},
    {"query padding", "b=4 h=2 t=5 d=4", "b=4 h=2 s=6 d=4", "b=4 h=2 s=6 d=4", "b=4 t=5", "t", "s", "d", 0, 1, RULES},
    {"random mask", "b=2 h=2 t=5 d=4", "b=2 h=2 s=6 d=4", "b=2 h=2 s=6 d=3", "b=2 h=2 t=5 s=6", "t", "s", "d", 0, 0, RULES},
    {"random mask, fully masked rows", "b=2 h=2 t=5 d=4", "b=2 h=2 s=6 d=4", "b=2 h=2 s=6 d=4", "h=2 t=5 s=6", "t", "s", "d", 0, 2, RULES},
    {"causal + key padding", "b=4 h=2 t=6 d=4", "b=4 h=2 s=6 d=4", "b=4 h=2 s=6 d=4", "b=4 s=6", "t", "s", "d", 1, 1, RULES},
    {"causal + mask, fully masked rows", "b=2 h=2 t=6 d=4", "b=2 h=2 s=6 d=4", "b=2 h=2 s=6 d=4", "b=2 t=6 s=6", "t", "s", "d", 1, 2, RULES},
    {"mask over keys only", "b=2 h=2 t=4 d=4", "b=2 h=2 s=6 d=4", "b=2 h=2 s=6 d=4", "s=6", "t", "s", "d", 0, 0, RULES},
    {"gqa + mask over the group", "b=2 kvh=2 g=2 t=5 d=4", "b=2 kvh=2 s=6 d=4", "b=2 kvh=2 s=6 d=4", "g=2 kvh=2 t=5 s=6", "t", "s", "d", 0, 2, RULES},
    {"mqa + key padding, causal", "b=4 h=4 t=7 d=4", "b=4 s=7 d=4", "b=4 s=7 d=4", "b=4 s=7", "t", "s", "d", 1, 1, RULES},
    {"long, causal + mask", "b=1 kvh=2 g=2 t=40 d=4", "b=1 kvh=2 s=70 d=4", "b=1 kvh=2 s=70 d=4", "b=1 t=40 s=70", "t", "s", "d", 1, 2, RULES},
    {"gqa g=3 long", "b=1 kvh=2 g=3 t=40 d=4", "b=1 kvh=2 s=70 d=4", "b=1 kvh=2 s=70 d=4", NULL, "t", "s", "d", 1, 0, RULES},
    {"gqa, q's group axis first, g sharded", "g=2 b=2 t=4 kvh=2 d=4", "kvh=2 s=5 b=2 d=4", "d=4 s=5 kvh=2 b=2", NULL, "t", "s", "d", 0, 0, "b:data g:model"},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct {
    const acase *c;
    int composed;
    const char *mode; /* NULL, "checkpoint" or "scan" */
    tj_v q, w, m;     /* (scan: captured by the body) */
} arun;

static tj_graph *cur_g; /* the graph being traced (the composed form's fill scalar) */
static tj_v attn_fused(const acase *c, tj_v q, tj_v k, tj_v v, tj_v m) {
    if (m) return tj_attention_masked(q, k, v, m, c->qpos, c->kpos, c->dim, 0, c->causal);
    return tj_attention(q, k, v, c->qpos, c->kpos, c->dim, 0, c->causal);
}
/* softmax(where(mask & causal, q.k scale, LARGE_NEG)) . v, as JAX writes it */
static tj_v attn_composed(const acase *c, tj_v q, tj_v k, tj_v v, tj_v m) {
    tj_v s = tj_muls(tj_dot(q, k, c->dim), 0.5); /* (dim 4: 1/sqrt(4)) */
    if (m) s = tj_select(m, s, tj_scalar(cur_g, tj_v_dtype(s), LARGE_NEG));
    if (c->causal) s = tj_causal_mask(s, c->qpos, c->kpos, LARGE_NEG);
    return tj_dot(tj_softmax(s, c->kpos), v, c->kpos);
}
static tj_v attn_any(const arun *r, tj_v q, tj_v k, tj_v v, tj_v m) {
    return r->composed ? attn_composed(r->c, q, k, v, m) : attn_fused(r->c, q, k, v, m);
}
static void region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g;
    out[0] = attn_any((const arun *)u, in[0], in[1], in[2], ((const arun *)u)->c->mask ? in[3] : NULL);
}
/* one step: k and v from xs, q, w and the mask captured; the carry sums the loss */
static void body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    const arun *r = (const arun *)u;
    (void)g, (void)y;
    carry_out[0] = tj_add(carry[0], tj_sum_all(tj_mul(attn_any(r, r->q, x[0], x[1], r->m), r->w)));
}
static void loss_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    arun *r = (arun *)u;
    tj_v q = tj_tree_v(in, "q"), k = tj_tree_v(in, "k"), v = tj_tree_v(in, "v"), w = tj_tree_v(in, "w");
    tj_v m = r->c->mask ? tj_tree_v(in, "mask") : NULL, o = NULL, loss, wrt[3], gr[3];
    int i;
    cur_g = g;
    if (r->mode && !strcmp(r->mode, "checkpoint")) {
        tj_v rin[4];
        tj_policy pol = tj_dots_saveable(); /* (the attention is no dot: recomputed in the backward) */
        rin[0] = q, rin[1] = k, rin[2] = v, rin[3] = m;
        if (tj_checkpoint(region, r, m ? 4 : 3, rin, 1, &o, &pol)) o = NULL;
        loss = tj_sum_all(tj_mul(o, w));
    } else if (r->mode && !strcmp(r->mode, "scan")) { /* two steps of the same k and v: twice the loss */
        char sh[128];
        tj_v xs[2], init, fin = NULL;
        tj_policy pol = tj_nothing_saveable();
        r->q = q, r->w = w, r->m = m;
        snprintf(sh, sizeof sh, "step=2 %s", r->c->k);
        xs[0] = tj_broadcast(k, sh);
        snprintf(sh, sizeof sh, "step=2 %s", r->c->v);
        xs[1] = tj_broadcast(v, sh);
        init = tj_scalar(g, tj_v_dtype(q), 0);
        if (tj_scan(body, r, "step", 1, &init, 2, xs, 0, &fin, NULL, &pol)) fin = NULL;
        loss = tj_muls(fin, 0.5);
    } else if (r->mode && !strcmp(r->mode, "grad2")) { /* second derivatives: the loss is the gradients' sum of squares */
        tj_v g1[3];
        wrt[0] = q, wrt[1] = k, wrt[2] = v;
        loss = tj_sum_all(tj_mul(attn_any(r, q, k, v, m), w));
        if (tj_grad(loss, 3, wrt, g1)) return;
        for (i = 0; i < 3; i++) loss = i ? tj_add(loss, tj_sum_all(tj_mul(g1[i], g1[i]))) : tj_sum_all(tj_mul(g1[i], g1[i]));
    } else {
        o = attn_any(r, q, k, v, m);
        loss = tj_sum_all(tj_mul(o, w));
    }
    tj_tree_set_v(out, "loss", loss);
    if (o) tj_tree_set_v(out, "out", o);
    wrt[0] = q, wrt[1] = k, wrt[2] = v;
    if (tj_grad(loss, 3, wrt, gr)) return;
    for (i = 0; i < 3; i++) {
        const char *nm[3] = {"dq", "dk", "dv"};
        tj_tree_set_v(out, nm[i], gr[i]);
    }
}
/* loss only (finite differences) */
static void loss_only(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    arun *r = (arun *)u;
    tj_v q = tj_tree_v(in, "q"), k = tj_tree_v(in, "k"), v = tj_tree_v(in, "v"), w = tj_tree_v(in, "w");
    cur_g = g;
    tj_tree_set_v(out, "loss", tj_sum_all(tj_mul(attn_any(r, q, k, v, r->c->mask ? tj_tree_v(in, "mask") : NULL), w)));
}

static uint32_t hash32(uint32_t x) {
    x ^= x >> 16, x *= 0x7feb352dU, x ^= x >> 15, x *= 0x846ca68bU, x ^= x >> 16;
    return x;
}
/* the mask of a case: i32, its shape's last axis the fastest */
static tj_array *make_mask(tj_ctx *ctx, const acase *c, unsigned seed) {
    tj_array *shape = tj_zeros(ctx, TJ_I32, c->mask), *a;
    int64_t n = tj_array_numel(shape), i, last, first;
    int32_t *m = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    const char *sp = strrchr(c->mask, '=');
    last = atoll(sp + 1), first = n / atoll(strchr(c->mask, '=') + 1);
    for (i = 0; i < n; i++) {
        int64_t b = i / first, x = i % last, row = i / last;
        if (c->mask_kind == 1) m[i] = x < (b % 3 == 0 ? last : b % 3 == 1 ? last / 2 : 0);
        else if (c->mask_kind == 2 && row % 3 == 1) m[i] = 0;
        else m[i] = hash32((uint32_t)(i * 2654435761u) ^ seed) % 3 != 0;
    }
    a = tj_array_new(ctx, TJ_I32, c->mask, m);
    free(m);
    tj_array_free(shape);
    return a;
}
static tj_tree *make_inputs(tj_ctx *ctx, const acase *c, tj_dtype dt, unsigned seed) {
    tj_tree *in = tj_tree_new(ctx);
    char wshape[160];
    tj_tree_set_array(in, "q", tjt_rand(ctx, dt, c->q, seed + 1, -2, 2));
    tj_tree_set_array(in, "k", tjt_rand(ctx, dt, c->k, seed + 2, -2, 2));
    tj_tree_set_array(in, "v", tjt_rand(ctx, dt, c->v, seed + 3, -1, 1));
    { /* w: out's shape: q's with the dim of v's size */
        char *p;
        snprintf(wshape, sizeof wshape, "%s", c->q);
        p = strstr(wshape, "d=4");
        p[2] = (char)('0' + tj_array_dim(tj_tree_array(in, "v"), c->dim));
    }
    tj_tree_set_array(in, "w", tjt_rand(ctx, dt, wshape, seed + 4, -1, 1));
    if (c->mask) tj_tree_set_array(in, "mask", make_mask(ctx, c, seed));
    return in;
}
/* loss, out, dq, dk, dv of a run (mesh: NULL or "data=2 ...") */
static int run_case(const acase *c, int composed, const char *mode, tj_dtype dt, int ndev, const char *mesh, tjt_outs *o) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in, *out;
    tj_prog *p;
    arun r;
    int ok;
    memset(&r, 0, sizeof r);
    r.c = c, r.composed = composed, r.mode = mode;
    if (ndev > 1) tj_set_devices(ctx, ndev), tj_set_mesh(ctx, mesh);
    in = make_inputs(ctx, c, dt, 7);
    if (ndev > 1) tj_filter_shard(in, c->rules);
    out = tj_tree_new(ctx);
    p = tj_jit(ctx, c->name, loss_fn, &r, in, NULL);
    ok = p && tj_run(p, in, out) == TJ_OK;
    TJT_CHECK(ok, "%s (%s%s, %s, %d devices): %s", c->name, composed ? "composed" : "fused", mode ? mode : "", tj_dtype_name(dt), ndev, tj_error(ctx));
    memset(o, 0, sizeof *o);
    if (ok) tjt_outs_read(o, out);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return ok;
}
/* a named output of o, or NULL */
static const double *get(const tjt_outs *o, const char *name, int64_t *len) {
    int i;
    for (i = 0; i < o->n; i++)
        if (!strcmp(o->name[i], name)) return *len = o->len[i], o->v[i];
    return NULL;
}
static void compare_named(const char *what, const tjt_outs *a, const tjt_outs *b, double tol) {
    const char *names[5] = {"loss", "out", "dq", "dk", "dv"};
    int i;
    for (i = 0; i < 5; i++) {
        int64_t la = 0, lb = 0, j;
        const double *x = get(a, names[i], &la), *y = get(b, names[i], &lb);
        double sc = i ? 1e-9 : 1, worst = 0; /* (the loss, a sum of signed terms: relative to at least 1) */
        if (!x && !y) continue;
        if (!y && !strcmp(names[i], "out")) continue; /* (the scan's loss only) */
        TJT_CHECK(x && y && la == lb, "%s: output %s missing or of another size", what, names[i]);
        if (!x || !y || la != lb) continue;
        for (j = 0; j < la; j++) sc = fabs(x[j]) > sc ? fabs(x[j]) : sc;
        for (j = 0; j < la; j++) {
            double d = fabs(x[j] - y[j]) / sc;
            if (!(d <= worst)) worst = d;
        }
        TJT_CHECK(worst <= tol, "%s: %s differs by %.3g (relative to its max)", what, names[i], worst);
    }
}

static void test_case(const acase *c) {
    tjt_outs f, g;
    char what[256];
    tjt_current = c->name;
    /* fused vs composed: f64, f32, bf16 */
    {
        const tj_dtype dts[3] = {TJ_F64, TJ_F32, TJ_BF16};
        const double tol[3] = {1e-12, 2e-6, 3e-2};
        int i;
        for (i = 0; i < 3; i++) {
            if (run_case(c, 0, NULL, dts[i], 1, NULL, &f) && run_case(c, 1, NULL, dts[i], 1, NULL, &g)) {
                snprintf(what, sizeof what, "%s %s: fused vs composed", c->name, tj_dtype_name(dts[i]));
                compare_named(what, &g, &f, tol[i]);
            }
            tjt_outs_free(&f), tjt_outs_free(&g);
        }
        if (run_case(c, 0, "grad2", TJ_F64, 1, NULL, &f) && run_case(c, 1, "grad2", TJ_F64, 1, NULL, &g)) {
            snprintf(what, sizeof what, "%s f64 second derivatives: fused vs composed", c->name);
            compare_named(what, &g, &f, 1e-11);
        }
        tjt_outs_free(&f), tjt_outs_free(&g);
        for (i = 1; i <= 2; i++) { /* the backward in one pass and in two */
            tjt_attn_passes(i);
            if (run_case(c, 0, NULL, TJ_F32, 1, NULL, &f) && run_case(c, 1, NULL, TJ_F32, 1, NULL, &g)) {
                snprintf(what, sizeof what, "%s f32, backward in %d pass(es): fused vs composed", c->name, i);
                compare_named(what, &g, &f, 2e-6);
            }
            tjt_outs_free(&f), tjt_outs_free(&g);
        }
        tjt_attn_passes(0);
    }
    /* one device vs 2 and 4; checkpoint and scan */
    if (run_case(c, 0, NULL, TJ_F64, 1, NULL, &f)) {
        const struct { int ndev; const char *mesh; } meshes[3] = {{2, "data=2"}, {2, "model=2"}, {4, "data=2 model=2"}};
        int i;
        for (i = 0; i < 3; i++) {
            if (run_case(c, 0, NULL, TJ_F64, meshes[i].ndev, meshes[i].mesh, &g)) {
                snprintf(what, sizeof what, "%s on %s (%s) vs one device", c->name, meshes[i].mesh, c->rules);
                compare_named(what, &f, &g, 1e-13);
            }
            tjt_outs_free(&g);
        }
        if (run_case(c, 0, "checkpoint", TJ_F64, 1, NULL, &g)) {
            snprintf(what, sizeof what, "%s under tj_checkpoint vs plain", c->name);
            compare_named(what, &f, &g, 1e-13);
        }
        tjt_outs_free(&g);
        if (run_case(c, 0, "checkpoint", TJ_F64, 4, "data=2 model=2", &g)) {
            snprintf(what, sizeof what, "%s under tj_checkpoint on 4 devices vs plain", c->name);
            compare_named(what, &f, &g, 1e-13);
        }
        tjt_outs_free(&g);
        if (run_case(c, 0, "scan", TJ_F64, 1, NULL, &g)) {
            snprintf(what, sizeof what, "%s inside tj_scan vs plain", c->name);
            compare_named(what, &f, &g, 1e-13);
        }
        tjt_outs_free(&g);
    }
    tjt_outs_free(&f);
    { /* finite differences, f64 */
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = make_inputs(ctx, c, TJ_F64, 11);
        arun r;
        memset(&r, 0, sizeof r);
        r.c = c;
        snprintf(what, sizeof what, "%s f64 finite differences", c->name);
        tjt_gradcheck(__FILE__, __LINE__, ctx, what, loss_only, &r, in, "q k v", 1e-6);
        tj_tree_free(in);
        tj_ctx_free(ctx);
    }
}

/* ---- against JAX 0.10.2: jax.nn.dot_product_attention(q, k, v, mask=m,
   is_causal=causal, implementation='xla') with q (B=2, T=4, N=4, H=4), k
   and v (B, S=5, K=2, H) (grouped: head n = kvhead * 2 + group), element i
   of each sin(a i + b) c, and m (B, N, T, S): key padding (batch 1 keeps 2
   keys), holes where (i 7919) % 11 == 3, and query 1 of head 3 in batch 0
   fully masked (causal also masks all of query 0 of head 3 in batch 1).
   Recorded: sum(out w) and the sums of squares of dq, dk, dv. ---- */
static const struct { int causal; tj_dtype dt; double loss, ss[3]; } jax_rec[] = {
    {0, TJ_F32, 11.847681491595795, {4.822367555788246, 24.984364468202198, 74.53173639087254}},
    {0, TJ_BF16, 11.856569218795016, {4.821004768149578, 25.08793551567942, 74.64586361148395}},
    {0, TJ_F64, 11.847681846151023, {4.822367719859957, 24.984365284449588, 74.53174023825046}},
    {1, TJ_F32, 30.489881803291798, {1.1655474549167346, 1.6214983449892912, 99.66424430263842}},
    {1, TJ_BF16, 30.509953212274525, {1.168460237691761, 1.622109331190586, 99.81886237859726}},
    {1, TJ_F64, 30.489882033992153, {1.1655475467630496, 1.6214983266833656, 99.66424263334268}},
};
typedef struct { int causal; tj_dtype dt; } jcase;
static tj_array *jfill(tj_ctx *ctx, const char *shape, int64_t n, double a, double b, double c) {
    double *x = (double *)malloc(sizeof(double) * (size_t)n);
    tj_array *r;
    int64_t i;
    for (i = 0; i < n; i++) x[i] = sin(a * (double)i + b) * c;
    r = tj_array_new(ctx, TJ_F64, shape, x);
    free(x);
    return r;
}
static void jax_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const jcase *jc = (const jcase *)u;
    tj_v x[3], o, loss, gr[3];
    int i;
    (void)g;
    for (i = 0; i < 3; i++) x[i] = tj_tree_v(in, i == 0 ? "q" : i == 1 ? "k" : "v");
    o = tj_attention_masked(tj_cast(x[0], jc->dt), tj_cast(x[1], jc->dt), tj_cast(x[2], jc->dt), tj_tree_v(in, "mask"), "t", "s", "h", 0, jc->causal);
    loss = tj_sum_all(tj_mul(tj_cast(o, TJ_F64), tj_tree_v(in, "w")));
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "out", tj_cast(o, TJ_F64));
    if (tj_grad(loss, 3, x, gr)) return;
    for (i = 0; i < 3; i++) tj_tree_set_v(out, i == 0 ? "dq" : i == 1 ? "dk" : "dv", tj_sum_all(tj_mul(gr[i], gr[i])));
}
static void test_jax(void) {
    int r;
    tjt_current = "JAX 0.10.2";
    for (r = 0; r < (int)(sizeof jax_rec / sizeof jax_rec[0]); r++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        int32_t m[2 * 4 * 4 * 5];
        int64_t i;
        jcase jc;
        tj_prog *p;
        double tol = jax_rec[r].dt == TJ_BF16 ? 1e-2 : jax_rec[r].dt == TJ_F32 ? 2e-6 : 1e-6; /* (JAX's f64 softmax is f32) */
        jc.causal = jax_rec[r].causal, jc.dt = jax_rec[r].dt;
        tj_tree_set_array(in, "q", jfill(ctx, "b=2 t=4 kvh=2 g=2 h=4", 128, 0.37, 0.1, 1.5));
        tj_tree_set_array(in, "k", jfill(ctx, "b=2 s=5 kvh=2 h=4", 80, 0.23, 0.7, 1.5));
        tj_tree_set_array(in, "v", jfill(ctx, "b=2 s=5 kvh=2 h=4", 80, 0.11, 0.3, 1.0));
        tj_tree_set_array(in, "w", jfill(ctx, "b=2 t=4 kvh=2 g=2 h=4", 128, 0.05, 0.9, 1.0));
        for (i = 0; i < 160; i++) { /* (b, n, t, s) */
            int64_t b = i / 80, n = i / 20 % 4, t = i / 5 % 4, sj = i % 5;
            m[i] = (i * 7919) % 11 != 3 && !(b == 1 && sj >= 2) && !(b == 0 && n == 3 && t == 1);
        }
        tj_tree_set_array(in, "mask", tj_array_new(ctx, TJ_I32, "b=2 kvh=2 g=2 t=4 s=5", m));
        p = tj_jit(ctx, "jax", jax_fn, &jc, in, NULL);
        if (!p || tj_run(p, in, out)) {
            TJT_CHECK(0, "JAX case %d: %s", r, tj_error(ctx));
        } else {
            double l, ss, o[128], vv[80], mean;
            int j, c;
            tj_array_read(tj_tree_array(out, "loss"), TJ_F64, &l);
            TJT_CHECK(fabs(l - jax_rec[r].loss) <= tol * fabs(jax_rec[r].loss), "causal %d %s: loss %.12g, JAX %.12g", jc.causal, tj_dtype_name(jc.dt), l,
                      jax_rec[r].loss);
            for (j = 0; j < 3; j++) {
                tj_array_read(tj_tree_array(out, j == 0 ? "dq" : j == 1 ? "dk" : "dv"), TJ_F64, &ss);
                TJT_CHECK(fabs(ss - jax_rec[r].ss[j]) <= tol * fabs(jax_rec[r].ss[j]), "causal %d %s: sum of d%c^2 %.12g, JAX %.12g", jc.causal,
                          tj_dtype_name(jc.dt), "qkv"[j], ss, jax_rec[r].ss[j]);
            }
            /* the fully masked row (b 0, t 1, head 3 = kvh 1 g 1): the mean of v (kvh 1, batch 0) over all keys, as JAX gives */
            tj_array_read(tj_tree_array(out, "out"), TJ_F64, o);
            tj_array_read(tj_tree_array(in, "v"), TJ_F64, vv);
            for (c = 0; c < 4 && jc.dt != TJ_BF16; c++) {
                int64_t oi = (((0 * 2 + 1) * 2 + 1) * 4 + 1) * 4 + c; /* (out's axis order: b kvh (k's batch axes), g, t, h) */
                for (mean = 0, j = 0; j < 5; j++) mean += vv[(j * 2 + 1) * 4 + c] / 5;
                TJT_CHECK(fabs(o[oi] - mean) <= 1e-6, "causal %d %s: fully masked row, element %d: %.9g, the mean of v %.9g", jc.causal, tj_dtype_name(jc.dt), c,
                          o[oi], mean);
            }
        }
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(ctx);
    }
}

int main(void) {
    int i;
    test_jax();
    for (i = 0; i < NCASES; i++) test_case(&cases[i]);
    return tjt_finish();
}
