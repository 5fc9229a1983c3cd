/* Model code as ML engineers write it, from README's API alone: RMSNorm +
   SwiGLU (tj_sigmoid), RoPE + grouped-query causal attention with a padding
   mask and a masked token mean, a top-1 mixture of experts dispatched by
   tj_take, and a layer-scanned transformer stack under tj_checkpoint with
   several policies. Each: sharded (data, model, both, sequence, FSDP) against
   one device, finite differences in f64, and the f32 loss of JAX 0.10.2 on
   the same inputs (jax.nn.silu, jnp.einsum, jax.nn.softmax, lax.scan under
   jax.checkpoint; written out by hand in /tmp probes, hunt18).
   TJ_MODELS_DUMP=file writes the inputs and outputs of the one-device f32
   runs, to recompute JAX's numbers. */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"

static tj_v S(tj_v like, double v) { return tj_scalar(tj_graph_of(like), tj_v_dtype(like), v); }
static tj_v sigmoid(tj_v x) { return tj_sigmoid(x); }
static tj_v silu(tj_v x) { return tj_mul(x, sigmoid(x)); }
static tj_v rmsnorm(tj_v x, tj_v gain, const char *axis) {
    tj_v ms = tj_mean(tj_mul(x, x), axis);
    return tj_mul(tj_mul(x, tj_rsqrt(tj_adds(ms, 1e-6))), gain);
}
/* ---- P3 RMSNorm + SwiGLU residual ---- */
static void p_swiglu(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), gn = tj_tree_v(in, "gn"), wg = tj_tree_v(in, "wg"), wu = tj_tree_v(in, "wu"), wd = tj_tree_v(in, "wd"), t = tj_tree_v(in, "t");
    tj_v h = rmsnorm(x, gn, "embed");
    tj_v a = tj_mul(silu(tj_dot(h, wg, "embed")), tj_dot(h, wu, "embed"));
    tj_v y = tj_add(x, tj_dot(a, wd, "mlp"));
    tj_v d = tj_sub(rmsnorm(y, gn, "embed"), t);
    (void)g; (void)u;
    tj_tree_set_v(out, "loss", tj_mean(tj_mul(d, d), "batch pos embed"));
}
static tj_v rope(tj_v q, tj_v cosv, tj_v sinv) {
    tj_v s = tj_split(q, "hd", "half=0 two=2");
    tj_v e = tj_index(s, "two", 0), o = tj_index(s, "two", 1);
    tj_v e2 = tj_sub(tj_mul(e, cosv), tj_mul(o, sinv));
    tj_v o2 = tj_add(tj_mul(e, sinv), tj_mul(o, cosv));
    /* stack back along "two": slices keep a size-1 axis */
    tj_v parts[2];
    parts[0] = tj_split(e2, "half", "half=0 two=1"); parts[1] = tj_split(o2, "half", "half=0 two=1");
    return tj_merge(tj_concat(2, parts, "two"), "half two", "hd");
}
static void p_gqa(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), wq = tj_tree_v(in, "wq"), wk = tj_tree_v(in, "wk"), wv = tj_tree_v(in, "wv"), wo = tj_tree_v(in, "wo"), wh = tj_tree_v(in, "wh"), gn = tj_tree_v(in, "gn");
    tj_v mask = tj_tree_v(in, "mask"); /* batch,pos i32: 1 = real token */
    tj_v cosv = tj_tree_v(in, "cos"), sinv = tj_tree_v(in, "sin"); /* pos, half */
    tj_v h = rmsnorm(x, gn, "embed");
    tj_v q = rope(tj_dot(h, wq, "embed"), cosv, sinv);                 /* batch pos kvh rep hd */
    tj_v k = rope(tj_dot(h, wk, "embed"), cosv, sinv);                 /* batch pos kvh hd */
    tj_v v = tj_dot(h, wv, "embed");
    k = tj_rename(k, "pos", "kpos"); v = tj_rename(v, "pos", "kpos");
    double scale = 1.0 / sqrt((double)tj_v_dim(q, "hd"));
    tj_v s = tj_muls(tj_dot(q, k, "hd"), scale);                        /* batch kvh pos rep kpos */
    s = tj_causal_mask(s, "pos", "kpos", -1e9);
    s = tj_select(tj_rename(mask, "pos", "kpos"), s, S(s, -1e9));
    tj_v p = tj_softmax(s, "kpos");
    tj_v o = tj_dot(p, v, "kpos");                                      /* batch kvh pos rep hd */
    tj_v y = tj_add(x, tj_dot(o, wo, "kvh rep hd"));
    tj_v logits = tj_dot(rmsnorm(y, gn, "embed"), wh, "embed");
    tj_v ce = tj_cross_entropy(logits, tj_tree_v(in, "labels"), "vocab", NULL); /* batch pos */
    tj_v m = tj_cast(mask, tj_v_dtype(ce));
    tj_v loss = tj_div(tj_sum_all(tj_mul(ce, m)), tj_max2(tj_sum_all(m), S(ce, 1.0)));
    (void)g; (void)u;
    tj_tree_set_v(out, "loss", loss);
}
/* ---- P10 top-1 MoE with gather dispatch: per-token expert weights by take ---- */
static void p_moeg(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), wr = tj_tree_v(in, "wr"), w1 = tj_tree_v(in, "w1"), w2 = tj_tree_v(in, "w2"), t = tj_tree_v(in, "t");
    tj_v pr = tj_softmax(tj_dot(x, wr, "embed"), "expert");
    tj_v top = tj_cast(tj_eq(pr, tj_max(pr, "expert")), tj_v_dtype(pr));
    char sh[64]; snprintf(sh, sizeof sh, "expert=%lld", (long long)tj_v_dim(pr, "expert"));
    tj_v ar = tj_arange(g, tj_v_dtype(pr), sh, "expert");
    tj_v idx = tj_cast(tj_stop_gradient(tj_sum(tj_mul(top, ar), "expert")), TJ_I32);   /* argmax, tok */
    tj_v gate = tj_max(pr, "expert");                                    /* tok */
    tj_v W1 = tj_take(w1, "expert", idx), W2 = tj_take(w2, "expert", idx); /* tok embed hid, tok hid embed */
    tj_v h = tj_relu(tj_dot(x, W1, "embed"));                            /* tok hid */
    tj_v y = tj_mul(tj_rename(tj_dot(h, W2, "hid"), "embed", "embed"), gate);
    tj_v d = tj_sub(y, t);
    (void)u;
    tj_tree_set_v(out, "loss", tj_mean(tj_mul(d, d), "tok embed"));
}
/* ---- P7 scanned pre-norm transformer blocks under checkpoint ---- */
static tj_policy policy_of(const char *s) {
    if (!strcmp(s, "nothing")) return tj_nothing_saveable();
    if (!strcmp(s, "dots")) return tj_dots_saveable();
    if (!strcmp(s, "names")) return tj_save_only_these_names("attn_out");
    if (!strcmp(s, "offload")) return tj_save_and_offload_only_these_names("", "attn_out mlp_in");
    if (!strcmp(s, "nobatch")) return tj_dots_with_no_batch_dims_saveable();
    return tj_everything_saveable();
}
static void block(tj_graph *g, const tj_v *c, const tj_v *xs, tj_v *co, tj_v *y, void *u) {
    tj_v h = c[0];
    tj_v gn = xs[0], wq = xs[1], wk = xs[2], wv = xs[3], wo = xs[4], w1 = xs[5], w2 = xs[6];
    tj_v hn = rmsnorm(h, gn, "embed");
    tj_v q = tj_dot(hn, wq, "embed"), k = tj_rename(tj_dot(hn, wk, "embed"), "pos", "kpos"), v = tj_rename(tj_dot(hn, wv, "embed"), "pos", "kpos");
    tj_v s = tj_muls(tj_dot(q, k, "hd"), 0.5);
    tj_v p = tj_softmax(tj_causal_mask(s, "pos", "kpos", -1e9), "kpos");
    tj_v a = tj_checkpoint_name(tj_dot(tj_dot(p, v, "kpos"), wo, "heads hd"), "attn_out");
    h = tj_add(h, a);
    tj_v m = tj_checkpoint_name(rmsnorm(h, gn, "embed"), "mlp_in");
    h = tj_add(h, tj_dot(tj_gelu(tj_dot(m, w1, "embed")), w2, "mlp"));
    co[0] = h;
    (void)g; (void)y; (void)u;
}
static void stack_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_policy pol = policy_of(*(const char **)u);
    tj_v fin;
    (void)g;
    tj_scan(block, NULL, "layer", 1, &in[0], 7, in + 1, 0, &fin, NULL, &pol);
    out[0] = fin;
}
static void p_stack(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const char *nm[8] = {"x", "gn", "wq", "wk", "wv", "wo", "w1", "w2"};
    tj_v vin[8], fin;
    int i;
    for (i = 0; i < 8; i++) vin[i] = tj_tree_v(in, nm[i]);
    tj_policy outer = policy_of(*(const char **)u);
    tj_checkpoint(stack_region, u, 8, vin, 1, &fin, &outer);
    tj_v logits = tj_dot(fin, tj_tree_v(in, "wh"), "embed");
    (void)g;
    tj_tree_set_v(out, "loss", tj_cross_entropy(logits, tj_tree_v(in, "labels"), "vocab", "batch pos"));
}

typedef struct { const char *name, *shape; double lo, hi; int param; } minput;
typedef struct {
    const char *name;
    tj_fn fn;
    const char *policy;
    double jax_loss; /* JAX 0.10.2, f32, one device */
    minput in[12];
} mprog;
static const mprog mprogs[] = {
    {"swiglu", p_swiglu, NULL, 1.27616584,
     {{"x", "batch=8 pos=4 embed=16", -2, 2, 1}, {"gn", "embed=16", 0.8, 1.2, 1}, {"wg", "embed=16 mlp=24", -0.5, 0.5, 1},
      {"wu", "embed=16 mlp=24", -0.5, 0.5, 1}, {"wd", "mlp=24 embed=16", -0.4, 0.4, 1}, {"t", "batch=8 pos=4 embed=16", -1, 1, 0}}},
    {"gqa", p_gqa, NULL, 2.98446076,
     {{"x", "batch=8 pos=8 embed=16", -2, 2, 1}, {"gn", "embed=16", 0.8, 1.2, 1},
      {"wq", "embed=16 kvh=2 rep=2 hd=4", -0.5, 0.5, 1}, {"wk", "embed=16 kvh=2 hd=4", -0.5, 0.5, 1},
      {"wv", "embed=16 kvh=2 hd=4", -0.5, 0.5, 1}, {"wo", "kvh=2 rep=2 hd=4 embed=16", -0.4, 0.4, 1},
      {"wh", "embed=16 vocab=11", -0.6, 0.6, 1}, {"labels", "batch=8 pos=8", 0, 11, 0},
      {"mask", "batch=8 pos=8", 0, 0, 0}, {"cos", "pos=8 half=2", 0, 0, 0}, {"sin", "pos=8 half=2", 0, 0, 0}}},
    {"moe", p_moeg, NULL, 0.641947508,
     {{"x", "tok=16 embed=8", -2, 2, 1}, {"wr", "embed=8 expert=4", -1, 1, 1}, {"w1", "expert=4 embed=8 hid=12", -0.6, 0.6, 1},
      {"w2", "expert=4 hid=12 embed=8", -0.6, 0.6, 1}, {"t", "tok=16 embed=8", -1, 1, 0}}},
    {"stack nothing", p_stack, "nothing", 3.16863012,
     {{"x", "batch=4 pos=6 embed=8", -2, 2, 1}, {"gn", "layer=3 embed=8", 0.8, 1.2, 1},
      {"wq", "layer=3 embed=8 heads=2 hd=4", -0.6, 0.6, 1}, {"wk", "layer=3 embed=8 heads=2 hd=4", -0.6, 0.6, 1},
      {"wv", "layer=3 embed=8 heads=2 hd=4", -0.6, 0.6, 1}, {"wo", "layer=3 heads=2 hd=4 embed=8", -0.6, 0.6, 1},
      {"w1", "layer=3 embed=8 mlp=16", -0.6, 0.6, 1}, {"w2", "layer=3 mlp=16 embed=8", -0.5, 0.5, 1},
      {"wh", "embed=8 vocab=7", -0.6, 0.6, 1}, {"labels", "batch=4 pos=6", 0, 7, 0}}},
};
#define NMP ((int)(sizeof mprogs / sizeof mprogs[0]))
static const char *stack_policies[4] = {"nothing", "dots", "names", "offload"};

/* the inputs of program k: random floats of the given range (seeded by the
   leaf's index), labels, a right-padding mask, RoPE tables */
static tj_tree *make_inputs(tj_ctx *ctx, const mprog *m, tj_dtype dt) {
    tj_tree *in = tj_tree_new(ctx);
    int i;
    for (i = 0; i < 12 && m->in[i].name; i++) {
        const minput *s = &m->in[i];
        tj_array *a;
        if (!strcmp(s->name, "labels")) {
            tj_array *r = tjt_rand(ctx, TJ_F64, s->shape, 100 + i, 0, s->hi);
            double v[64];
            int32_t iv[64];
            int64_t j, n = tj_array_numel(r);
            tj_array_read(r, TJ_F64, v);
            for (j = 0; j < n; j++) iv[j] = (int32_t)v[j];
            a = tj_array_new(ctx, TJ_I32, s->shape, iv);
            tj_array_free(r);
        } else if (!strcmp(s->name, "mask")) { /* row b has b % 4 padded positions at the end */
            int32_t iv[64];
            int j;
            for (j = 0; j < 64; j++) iv[j] = j % 8 < 8 - (j / 8) % 4;
            a = tj_array_new(ctx, TJ_I32, s->shape, iv);
        } else if (!strcmp(s->name, "cos") || !strcmp(s->name, "sin")) {
            double v[16];
            int j;
            for (j = 0; j < 16; j++) {
                double ang = (double)(j / 2) * pow(10000.0, -2.0 * (double)(j % 2) / 4.0);
                v[j] = s->name[0] == 'c' ? cos(ang) : sin(ang);
            }
            tj_array *a64 = tj_array_new(ctx, TJ_F64, s->shape, v);
            float f[16];
            if (dt == TJ_F64) a = a64;
            else {
                for (j = 0; j < 16; j++) f[j] = (float)v[j];
                a = tj_array_new(ctx, TJ_F32, s->shape, f);
                tj_array_free(a64);
            }
        } else a = tjt_rand(ctx, dt, s->shape, 100 + i, s->lo, s->hi);
        tj_tree_set_array(in, s->name, a);
    }
    return in;
}
typedef struct { const mprog *m; } mctx;
static void loss_and_grads(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const mprog *m = (const mprog *)u;
    tj_v w[12], gr[12], loss;
    int n = 0, i;
    const char *pol = m->policy;
    tj_tree *tmp = tj_tree_new(tj_graph_ctx(g));
    m->fn(g, in, tmp, &pol);
    loss = tj_tree_v(tmp, "loss");
    tj_tree_free(tmp);
    tj_tree_set_v(out, "loss", loss);
    for (i = 0; i < 12 && m->in[i].name; i++)
        if (m->in[i].param) w[n++] = tj_tree_v(in, m->in[i].name);
    if (tj_grad(loss, n, w, gr) != TJ_OK) return;
    for (i = 0, n = 0; i < 12 && m->in[i].name; i++)
        if (m->in[i].param) {
            char key[48];
            snprintf(key, sizeof key, "g.%s", m->in[i].name);
            tj_tree_set_v(out, key, gr[n++]);
        }
}
static void loss_only(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const mprog *m = (const mprog *)u;
    const char *pol = m->policy;
    m->fn(g, in, out, &pol);
}
/* loss and every gradient (up to 8 outputs) on a mesh; rules place the inputs */
static int run_on(const mprog *m, int ndev, const char *mesh, const char *rules, tj_dtype dt, tjt_outs *o) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in, *out;
    tj_prog *p;
    int ok;
    tj_set_devices(ctx, ndev);
    if (mesh) tj_set_mesh(ctx, mesh);
    in = make_inputs(ctx, m, dt);
    out = tj_tree_new(ctx);
    if (rules) tj_filter_shard(in, rules);
    p = tj_jit(ctx, m->name, loss_and_grads, (void *)m, in, NULL);
    ok = p && tj_run(p, in, out) == TJ_OK;
    TJT_CHECK(ok, "%s on %s: %s", m->name, mesh ? mesh : "one device", tj_error(ctx));
    memset(o, 0, sizeof *o);
    if (ok) tjt_outs_read(o, out);
    if (ok && getenv("TJ_MODELS_DUMP") && ndev == 1 && dt == TJ_F32) {
        FILE *f = fopen(getenv("TJ_MODELS_DUMP"), "a");
        int i, k;
        for (k = 0; f && k < 2; k++) {
            tj_tree *t = k ? out : in;
            for (i = 0; i < tj_tree_size(t); i++) {
                tj_array *a = tj_tree_array_at(t, i);
                char d[256];
                int64_t n = tj_array_numel(a), j;
                double *v = (double *)malloc(sizeof(double) * (size_t)n);
                tj_array_read(a, TJ_F64, v);
                fprintf(f, "%s %s %s %s", k ? "out" : "in", tj_tree_name(t, i), tj_dtype_name(tj_array_dtype(a)), tj_array_describe(a, d, sizeof d));
                for (j = 0; j < n; j++) fprintf(f, " %.17g", v[j]);
                fprintf(f, "\n");
                free(v);
            }
        }
        if (f) fprintf(f, "end %s\n", m->name), fclose(f);
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return ok;
}

#define TP "hid:model mlp:model kvh:model heads:model expert:model vocab:model"
static const struct { int ndev; const char *mesh, *rules; } meshes[] = {
    {2, "data=2", "batch:data tok:data"},
    {8, "data=8", "batch:data tok:data"},
    {2, "model=2", TP},
    {4, "data=2 model=2", "batch:data tok:data " TP},
    {8, "data=2 model=4", "batch:data tok:data " TP},
    {4, "data=2 model=2", "batch:data pos:model"},      /* sequence parallel */
    {8, "data=8", "embed:data"},                        /* FSDP: weights split along embed */
};

int main(void) {
    int k, j, q;
    for (k = 0; k < NMP; k++) {
        tjt_outs one, sh;
        mprog m = mprogs[k];
        tjt_current = m.name;
        if (!run_on(&m, 1, NULL, NULL, TJ_F32, &one)) continue;
        for (j = 0; j < (int)(sizeof meshes / sizeof meshes[0]); j++) {
            char what[160];
            snprintf(what, sizeof what, "%s on %s (%s) vs one device", m.name, meshes[j].mesh, meshes[j].rules);
            if (run_on(&m, meshes[j].ndev, meshes[j].mesh, meshes[j].rules, TJ_F32, &sh)) tjt_outs_compare(what, &one, &sh, 2e-6);
            tjt_outs_free(&sh);
        }
        if (m.jax_loss != 0)
            TJT_CHECK(fabs(one.v[0][0] - m.jax_loss) <= 4e-7 * fabs(m.jax_loss), "%s: loss %.9g, JAX 0.10.2 %.9g", m.name, one.v[0][0], m.jax_loss);
        if (m.policy) /* every policy gives the same bits */
            for (q = 1; q < 4; q++) {
                char what[96];
                m.policy = stack_policies[q];
                snprintf(what, sizeof what, "%s: policy %s vs nothing (data=2 model=2)", mprogs[k].name, m.policy);
                if (run_on(&m, 4, "data=2 model=2", "batch:data " TP, TJ_F32, &sh)) tjt_outs_compare(what, &one, &sh, 2e-6);
                tjt_outs_free(&sh);
            }
        m.policy = mprogs[k].policy;
        { /* finite differences in f64 on one device */
            tj_ctx *ctx = tj_ctx_new();
            tj_tree *in = make_inputs(ctx, &m, TJ_F64);
            char wrt[256] = "";
            int i;
            for (i = 0; i < 12 && m.in[i].name; i++)
                if (m.in[i].param) strcat(wrt, m.in[i].name), strcat(wrt, " ");
            tjt_gradcheck(__FILE__, __LINE__, ctx, m.name, loss_only, &m, in, wrt, 1e-5); /* f64, h = 1e-6: gradients of 3e-5 carry 1e-10 of rounding */
            tj_tree_free(in);
            tj_ctx_free(ctx);
        }
        tjt_outs_free(&one);
    }
    return tjt_finish();
}
