/* Named sharding: every sharded program against the same program on one
   device; collective counts against the analytical ones; errors. */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"
#include <unistd.h>

typedef struct {
    const char *compute; /* logical rules for activations inside the function */
} opts;

/* out: "loss" and "g_NAME", the gradient of loss with respect to each
   input leaf in names (space-separated) */
static void loss_grads(const tj_tree *in, tj_tree *out, tj_v loss, const char *names) {
    char nm[8][32], key[48];
    tj_v w[8], gr[8];
    int n = 0, i, used;
    while (n < 8 && sscanf(names, "%31s%n", nm[n], &used) == 1) w[n] = tj_tree_v(in, nm[n]), n++, names += used;
    tj_grad(loss, n, w, gr);
    tj_tree_set_v(out, "loss", loss);
    for (i = 0; i < n; i++) {
        snprintf(key, sizeof key, "g_%.31s", nm[i]);
        tj_tree_set_v(out, key, gr[i]);
    }
}

/* 2-layer MLP: loss and gradients w.r.t. w1, w2 and x */
static void mlp(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    opts *o = (opts *)u;
    tj_v x = tj_tree_v(in, "x"), w1 = tj_tree_v(in, "w1"), w2 = tj_tree_v(in, "w2"), y = tj_tree_v(in, "y");
    tj_v h = tj_gelu(tj_dot(x, w1, "embed"));                 /* (batch, mlp)   */
    tj_v o2, d;
    (void)g;
    if (o && o->compute) h = tj_shard_by_rules(h, o->compute);
    o2 = tj_dot(h, w2, "mlp");                                /* (batch, embed2) */
    d = tj_sub(o2, y);
    loss_grads(in, out, tj_mean(tj_mul(d, d), "batch embed2"), "w1 w2 x");
}
/* attention-ish block with layer norm, softmax and cross-entropy */
static void attn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), wq = tj_tree_v(in, "wq"), wk = tj_tree_v(in, "wk"), wo = tj_tree_v(in, "wo");
    tj_v xn = tj_layer_norm(x, "embed", 1e-5);
    tj_v q = tj_dot(xn, wq, "embed"), k = tj_rename(tj_dot(xn, wk, "embed"), "pos", "kpos");
    tj_v a = tj_softmax(tj_causal_mask(tj_muls(tj_dot(q, k, "hd"), 0.5), "pos", "kpos", -1e9), "kpos");
    tj_v v = tj_dot(a, tj_rename(xn, "pos", "kpos"), "kpos");          /* (batch, pos, embed) */
    tj_v logits = tj_dot(v, wo, "embed");                              /* (batch, pos, vocab) */
    (void)g; (void)u;
    loss_grads(in, out, tj_cross_entropy(logits, tj_tree_v(in, "labels"), "vocab", "batch pos"), "wq wk wo");
}
/* the same block with the fused attention op and heads: its batch axes
   (batch, heads) may stay sharded, pos/kpos/hd are gathered whole */
static void fattn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), wq = tj_tree_v(in, "wq"), wk = tj_tree_v(in, "wk"), wv = tj_tree_v(in, "wv"), wo = tj_tree_v(in, "wo");
    tj_v xn = tj_layer_norm(x, "embed", 1e-5);
    tj_v q = tj_dot(xn, wq, "embed"), k = tj_rename(tj_dot(xn, wk, "embed"), "pos", "kpos"), v = tj_rename(tj_dot(xn, wv, "embed"), "pos", "kpos");
    tj_v o = tj_attention(q, k, v, "pos", "kpos", "hd", 0, 1);           /* (batch, heads, pos, hd) */
    tj_v logits = tj_dot(o, wo, "heads hd");                           /* (batch, pos, vocab) */
    (void)g; (void)u;
    loss_grads(in, out, tj_cross_entropy(logits, tj_tree_v(in, "labels"), "vocab", "batch pos"), "wq wk wv wo");
}
/* embedding lookup + scan stack */
static void blk(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)y; (void)u;
    co[0] = tj_add(c[0], tj_rename(tj_tanh(tj_dot(c[0], x[0], "embed")), "embed2", "embed")); /* x[0]: (embed, embed2) */
}
static int emb_take_line; /* where emb_scan's take is (the collectives it causes name it) */
static void emb_scan(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v wte = tj_tree_v(in, "wte"), tok = tj_tree_v(in, "tokens"), ws = tj_tree_v(in, "ws");
    tj_v h = tj_take(wte, "vocab", tok); emb_take_line = __LINE__;  /* (batch, pos, embed) */
    tj_v hs = NULL;
    tj_policy pol = tj_nothing_saveable();
    (void)g; (void)u;
    tj_scan(blk, NULL, "layer", 1, &h, 1, &ws, 0, &hs, NULL, &pol);
    loss_grads(in, out, tj_mean(tj_mul(hs, hs), "batch pos embed"), "wte ws");
}

/* a scan whose initial carry is a partial sum (a dot contracting an axis
   split over devices): the carry is added up before the first iteration,
   else later iterations would add up a whole value again. Its backward
   scan's initial carry (the final carry's cotangent, from a dot back
   through wo's split hd) is a partial sum too. */
static void dot_scan(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), wi = tj_tree_v(in, "wi"), ws = tj_tree_v(in, "ws"), wo = tj_tree_v(in, "wo");
    tj_v h = tj_dot(x, wi, "hd"); /* (batch, pos, embed) */
    tj_v hs = NULL, o;
    tj_policy pol = tj_nothing_saveable();
    (void)g; (void)u;
    tj_scan(blk, NULL, "layer", 1, &h, 1, &ws, 0, &hs, NULL, &pol);
    o = tj_tanh(tj_dot(hs, wo, "embed")); /* (batch, pos, hd) */
    loss_grads(in, out, tj_mean(tj_mul(o, o), "batch pos hd"), "wi ws wo");
}

/* partial sums as a scan's xs and as a value its body captures (a dot
   over hd split over devices): each is added up once, outside; the body
   added an x up again, and a captured one gave a wrong gradient */
static void blk2(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v cap = *(tj_v *)u;
    (void)g; (void)y;
    co[0] = tj_tanh(tj_add(c[0], tj_mul(x[0], cap)));
}
static void xs_scan(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v xs = tj_dot(tj_tree_v(in, "x"), tj_tree_v(in, "wi"), "hd");   /* (layer, batch, embed), partial */
    tj_v cap = tj_dot(tj_tree_v(in, "z"), tj_tree_v(in, "wc"), "hd");  /* (embed), partial */
    tj_v c0 = tj_tree_v(in, "c0"), hs = NULL;
    tj_policy pol = tj_nothing_saveable();
    (void)g; (void)u;
    tj_scan(blk2, &cap, "layer", 1, &c0, 1, &xs, 0, &hs, NULL, &pol);
    loss_grads(in, out, tj_mean(tj_mul(hs, hs), "batch embed"), "wi wc c0");
}

/* moving a mesh axis from batch to embed: one all-to-all each way */
static void a2a_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), y = tj_with_sharding_constraint(x, "embed:data"), w = tj_tree_v(in, "w"), gx;
    tj_v loss = tj_sum(tj_mul(tj_mul(y, y), w), "batch embed");
    (void)g; (void)u;
    tj_grad(loss, 1, &x, &gx);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "gx", gx);
}
static void random_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const char *spec = tj_tree_string(in, "spec");
    tj_v r = tj_uniform(g, 1234, TJ_F32, "batch=8 embed=8");
    (void)u;
    if (spec && *spec) r = tj_with_sharding_constraint(r, spec);
    tj_tree_set_v(out, "u", tj_add(r, tj_sum(tj_tree_v(in, "dummy"), "one")));
}

/* Build the inputs (same values whatever the mesh), place them by `rules`,
   run fn on ndev devices with `mesh`; return outputs read back to host. */
typedef struct {
    tjt_outs o;
    int count[4]; /* all_gather, psum, reduce_scatter, shard_slice (forward+backward) */
    int fwd[4], bwd[4];
    int take_gathers; /* all_gathers a take asked for (of its table) */
    int table_slices; /* shard_slices of a whole table's gradient (scatter_add made it whole) */
} result;
static const char *kinds[4] = {"all_gather", "psum", "reduce_scatter", "shard_slice"};
static void free_result(result *r) {
    tjt_outs_free(&r->o);
    memset(r, 0, sizeof *r);
}
static int run_prog(int which, int ndev, const char *mesh, const char *rules, opts *o, result *r, int bf) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    tj_collective cols[256];
    int i, nc, ok = 1;
    tj_fn fn = which == 0 ? mlp : which == 1 ? attn : which == 2 || which == 4 ? emb_scan : which == 5 ? dot_scan : which == 6 ? xs_scan : fattn;
    (void)bf;
    memset(r, 0, sizeof *r);
    tj_set_devices(ctx, ndev);
    if (mesh) tj_set_mesh(ctx, mesh);
    if (which == 0) {
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=8 embed=8", 1, -1, 1));
        tj_tree_set_array(in, "w1", tjt_rand(ctx, TJ_F32, "embed=8 mlp=16", 2, -0.5, 0.5));
        tj_tree_set_array(in, "w2", tjt_rand(ctx, TJ_F32, "mlp=16 embed2=8", 3, -0.5, 0.5));
        tj_tree_set_array(in, "y", tjt_rand(ctx, TJ_F32, "batch=8 embed2=8", 4, -1, 1));
    } else if (which == 1) {
        int32_t lab[2 * 8];
        for (i = 0; i < 16; i++) lab[i] = (i * 7) % 8;
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=2 pos=8 embed=8", 5, -1, 1));
        tj_tree_set_array(in, "wq", tjt_rand(ctx, TJ_F32, "embed=8 hd=4", 6, -0.5, 0.5));
        tj_tree_set_array(in, "wk", tjt_rand(ctx, TJ_F32, "embed=8 hd=4", 7, -0.5, 0.5));
        tj_tree_set_array(in, "wo", tjt_rand(ctx, TJ_F32, "embed=8 vocab=8", 8, -0.5, 0.5));
        tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=2 pos=8", lab));
    } else if (which == 5) {
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=4 pos=8 hd=4", 11, -1, 1));
        tj_tree_set_array(in, "wi", tjt_rand(ctx, TJ_F32, "hd=4 embed=8", 12, -0.5, 0.5));
        tj_tree_set_array(in, "ws", tjt_rand(ctx, TJ_F32, "layer=3 embed=8 embed2=8", 10, -0.3, 0.3));
        tj_tree_set_array(in, "wo", tjt_rand(ctx, TJ_F32, "embed=8 hd=4", 13, -0.5, 0.5));
    } else if (which == 6) {
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "layer=3 batch=4 hd=4", 14, -1, 1));
        tj_tree_set_array(in, "wi", tjt_rand(ctx, TJ_F32, "hd=4 embed=8", 15, -0.5, 0.5));
        tj_tree_set_array(in, "z", tjt_rand(ctx, TJ_F32, "hd=4", 16, -1, 1));
        tj_tree_set_array(in, "wc", tjt_rand(ctx, TJ_F32, "hd=4 embed=8", 17, -0.5, 0.5));
        tj_tree_set_array(in, "c0", tjt_rand(ctx, TJ_F32, "batch=4 embed=8", 18, -1, 1));
    } else if (which == 3) {
        int32_t lab[4 * 8];
        for (i = 0; i < 32; i++) lab[i] = (i * 5) % 8;
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=4 pos=8 embed=8", 5, -1, 1));
        tj_tree_set_array(in, "wq", tjt_rand(ctx, TJ_F32, "embed=8 heads=2 hd=4", 6, -0.8, 0.8));
        tj_tree_set_array(in, "wk", tjt_rand(ctx, TJ_F32, "embed=8 heads=2 hd=4", 7, -0.8, 0.8));
        tj_tree_set_array(in, "wv", tjt_rand(ctx, TJ_F32, "embed=8 heads=2 hd=4", 8, -0.8, 0.8));
        tj_tree_set_array(in, "wo", tjt_rand(ctx, TJ_F32, "heads=2 hd=4 vocab=8", 9, -0.5, 0.5));
        tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", lab));
    } else {
        int32_t tok[4 * 8];
        /* 4: a table larger than the rows taken (an embedding): take keeps
           the table's sharding of embed and moves the rows instead */
        for (i = 0; i < 32; i++) tok[i] = (i * 5 + 3) % (which == 4 ? 64 : 16);
        tj_tree_set_array(in, "wte", tjt_rand(ctx, TJ_F32, which == 4 ? "vocab=64 embed=8" : "vocab=16 embed=8", 9, -1, 1));
        tj_tree_set_array(in, "tokens", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", tok));
        tj_tree_set_array(in, "ws", tjt_rand(ctx, TJ_F32, "layer=3 embed=8 embed2=8", 10, -0.3, 0.3));
    }
    if (rules && tj_filter_shard(in, rules)) { fprintf(stderr, "filter_shard: %s\n", tj_error(ctx)); ok = 0; }
    p = ok ? tj_jit(ctx, "prog", fn, o, in, NULL) : NULL;
    if (!p || tj_run(p, in, out)) {
        fprintf(stderr, "run_prog(%d, %s, %s): %s\n", which, mesh ? mesh : "-", rules ? rules : "-", tj_error(ctx));
        ok = 0;
    }
    if (ok) {
        if (getenv("TJ_TEST_VERBOSE")) tj_prog_print(p, stdout);
        tjt_outs_read(&r->o, out);
        nc = tj_prog_collectives(p, cols, 256);
        for (i = 0; i < nc && i < 256; i++) {
            int k;
            for (k = 0; k < 4; k++)
                if (!strcmp(cols[i].kind, kinds[k])) {
                    r->count[k]++;
                    r->take_gathers += k == 0 && !strcmp(cols[i].cause, "take");
                    r->table_slices += k == 3 && cols[i].backward && cols[i].line == emb_take_line;
                    if (cols[i].backward) r->bwd[k]++;
                    else r->fwd[k]++;
                }
        }
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return ok;
}
static void compare(const char *what, const result *a, const result *b, double tol) { tjt_outs_compare(what, &a->o, &b->o, tol); }
static void bit_identical(const char *what, const result *a, const result *b) {
    int i, same = a->o.n == b->o.n;
    for (i = 0; same && i < a->o.n; i++) same = a->o.len[i] == b->o.len[i] && !memcmp(a->o.v[i], b->o.v[i], sizeof(double) * (size_t)a->o.len[i]);
    TJT_CHECK(same, "%s: two runs are not bit-identical", what);
}

/* an init program: the MLP's parameters from random numbers, sharded */
static void mlp_init(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)in;
    (void)u;
    tj_tree_set_v(out, "w1", tj_shard_by_rules(tj_muls(tj_normal(g, 1, TJ_F32, "embed=8 mlp=16"), 0.3), "embed:data mlp:model"));
    tj_tree_set_v(out, "w2", tj_shard_by_rules(tj_muls(tj_normal(g, 2, TJ_F32, "mlp=16 embed2=8"), 0.3), "mlp:model"));
    tj_tree_set_int(out, "step", 7);
}
/* Abstract arrays: a program compiled against shapes and shardings alone has
   the memory analysis and collectives of the same program compiled against
   real arrays; nothing can read, save or run on them. */
/* Where the layout is observable in one process: an array keeps its spec's
   tuple order (JAX's: "batch:model+data"), and its process-local block is
   the whole array (one process holds every block), whatever the order. */
static void dbl_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g, (void)u;
    tj_tree_set_v(out, "y", tj_sum(tj_mul(tj_tree_v(in, "x"), tj_tree_v(in, "x")), "embed"));
}
static void sq_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g, (void)u;
    tj_tree_set_v(out, "x", tj_mul(tj_tree_v(in, "x"), tj_tree_v(in, "x")));
}
static void test_layout_order(void) {
    tj_ctx *ctx = tj_ctx_new();
    float G[8 * 4], back[8 * 4], y[8];
    char b[128];
    tj_array *a, *l, *p, *ab;
    tj_tree *t, *in, *out;
    tj_prog *pr;
    int i, ok;
    tjt_current = "layout order, one process";
    tj_set_devices(ctx, 4);
    tj_set_mesh(ctx, "data=2 model=2");
    for (i = 0; i < 32; i++) G[i] = (float)(i % 7 - 3);
    l = tj_array_from_local(ctx, TJ_F32, "batch=8 embed=4", "batch:model+data", G);
    TJT_CHECK(l != NULL, "from_local: %s", tj_error(ctx));
    TJT_CHECK(l && !strcmp(tj_array_sharding(l, b, sizeof b), "batch:model+data embed:-"), "from_local keeps the spec's order: \"%s\"", b);
    TJT_CHECK(l && !strcmp(tj_array_local_shape(l, b, sizeof b), "batch=8 embed=4"), "one process: the local block is the array: \"%s\"", b);
    memset(back, 0, sizeof back);
    TJT_CHECK(l && !tj_array_read(l, TJ_F32, back) && !memcmp(back, G, sizeof G), "from_local in one process = the global array");
    memset(back, 0, sizeof back);
    TJT_CHECK(l && !tj_array_read_local(l, TJ_F32, back) && !memcmp(back, G, sizeof G), "read_local in one process = the global array");
    a = tj_array_new(ctx, TJ_F32, "batch=8 embed=4", G);
    p = tj_device_put(a, "embed:model+data batch:-");
    TJT_CHECK(p && !strcmp(tj_array_sharding(p, b, sizeof b), "batch:- embed:model+data"), "device_put keeps the spec's order: \"%s\"", b);
    TJT_CHECK(p && !strcmp(tj_array_describe(p, b, sizeof b), "f32[batch=8,embed=4@model+data]"), "tj_array_describe names the spec's order too: \"%s\"", b);
    TJT_CHECK(l && !strcmp(tj_array_describe(l, b, sizeof b), "f32[batch=8@model+data,embed=4]"), "tj_array_describe of from_local: \"%s\"", b);
    memset(back, 0, sizeof back);
    TJT_CHECK(p && !tj_array_read_local(p, TJ_F32, back) && !memcmp(back, G, sizeof G), "device_put: read_local = the global array");
    ab = tj_array_abstract(ctx, TJ_F32, "batch=8 embed=4", "batch:model+data");
    TJT_CHECK(ab && !strcmp(tj_array_sharding(ab, b, sizeof b), "batch:model+data embed:-"), "tj_array_abstract keeps the spec's order: \"%s\"", b);
    tj_array_free(ab);
    ab = tj_array_abstract(ctx, TJ_F32, "batch=8 embed=4", "batch:data+model");
    TJT_CHECK(ab && !strcmp(tj_array_sharding(ab, b, sizeof b), "batch:data+model embed:-"), "mesh order stays mesh order: \"%s\"", b);
    tj_array_free(ab);
    t = tj_tree_new(ctx); /* logical rules keep theirs too */
    tj_tree_set_array(t, "x", tj_array_new(ctx, TJ_F32, "batch=8 embed=4", G));
    TJT_CHECK(!tj_filter_shard(t, "batch:model+data vocab:data"), "filter_shard: %s", tj_error(ctx));
    TJT_CHECK(!strcmp(tj_array_sharding(tj_tree_array(t, "x"), b, sizeof b), "batch:model+data embed:-"), "filter_shard keeps the rules' order: \"%s\"", b);
    tj_tree_free(t);
    /* a program on it: its value is the global array's */
    in = tj_tree_new(ctx);
    out = tj_tree_new(ctx);
    tj_tree_set_array_ref(in, "x", l);
    pr = tj_jit(ctx, "dbl", dbl_fn, NULL, in, NULL);
    ok = pr && !tj_run(pr, in, out) && !tj_array_read(tj_tree_array(out, "y"), TJ_F32, y);
    for (i = 0; ok && i < 8; i++) {
        float w = 0;
        int j;
        for (j = 0; j < 4; j++) w += G[i * 4 + j] * G[i * 4 + j];
        ok = y[i] == w;
    }
    TJT_CHECK(ok, "a program on the from_local array computes on the global array: %s", tj_error(ctx));
    tj_prog_free(pr);
    tj_tree_free(in);
    tj_tree_free(out);
    {   /* a program's output is laid out in mesh order, also where it takes over a donated argument's buffer */
        tj_jit_opts o;
        tj_array *x2;
        memset(&o, 0, sizeof o);
        o.donate = "x";
        in = tj_tree_new(ctx);
        out = tj_tree_new(ctx);
        tj_tree_set_array(in, "x", tj_array_from_local(ctx, TJ_F32, "batch=8 embed=4", "batch:model+data", G));
        pr = tj_jit(ctx, "sq", sq_fn, NULL, in, &o);
        ok = pr && !tj_run(pr, in, out) && (x2 = tj_tree_array(out, "x")) != NULL;
        TJT_CHECK(ok && tj_array_is_deleted(tj_tree_array(in, "x")), "the donated run: %s", tj_error(ctx));
        TJT_CHECK(ok && !strcmp(tj_array_sharding(x2, b, sizeof b), "batch:data+model embed:-"), "a program's output (donated buffer): \"%s\"", b);
        tj_prog_free(pr);
        tj_tree_free(in);
        tj_tree_free(out);
    }
    tj_array_free(a);
    tj_array_free(p);
    tj_array_free(l);
    tj_ctx_free(ctx);
}
static void test_abstract(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *none = tj_tree_new(ctx), *real = tj_tree_new(ctx), *abs_ = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *init, *pr = NULL, *pa = NULL;
    tj_collective cr[64], ca[64];
    int nr, na, i;
    char b1[128], b2[128];
    tjt_current = "abstract arrays";
    tj_set_devices(ctx, 4);
    tj_set_mesh(ctx, "data=2 model=2");
    init = tj_jit(ctx, "init", mlp_init, NULL, none, NULL);
    TJT_CHECK(init && !tj_run(init, none, real), "init: %s", tj_error(ctx));
    TJT_CHECK(init && !tj_prog_output_shapes(init, abs_), "output shapes: %s", tj_error(ctx));
    TJT_CHECK(tj_tree_size(abs_) == tj_tree_size(real) && tj_tree_int(abs_, "step") == 7, "output shapes: %d leaves, step %lld", tj_tree_size(abs_),
              (long long)tj_tree_int(abs_, "step"));
    for (i = 0; i < 2; i++) {
        const char *nm = i ? "w2" : "w1";
        tj_array *a = tj_tree_array(abs_, nm), *r = tj_tree_array(real, nm);
        TJT_CHECK(a && r && tj_array_is_abstract(a) && !tj_array_is_abstract(r), "%s: abstract %d, real %d", nm, tj_array_is_abstract(a),
                  tj_array_is_abstract(r));
        if (!a || !r) continue;
        TJT_CHECK(!strcmp(tj_array_describe(a, b1, sizeof b1), tj_array_describe(r, b2, sizeof b2)), "%s: %s vs %s", nm, b1, b2);
        TJT_CHECK(!strcmp(tj_array_sharding(a, b1, sizeof b1), tj_array_sharding(r, b2, sizeof b2)), "%s sharding: %s vs %s", nm, b1, b2);
    }
    /* the same training program against both */
    tj_tree_set_array(real, "x", tjt_rand(ctx, TJ_F32, "batch=8 embed=8", 1, -1, 1));
    tj_tree_set_array(real, "y", tjt_rand(ctx, TJ_F32, "batch=8 embed2=8", 4, -1, 1));
    tj_tree_set_array(abs_, "x", tj_array_abstract(ctx, TJ_F32, "batch=8 embed=8", NULL));
    tj_tree_set_array(abs_, "y", tj_array_abstract(ctx, TJ_F32, "batch=8 embed2=8", "batch:data"));
    TJT_CHECK(!tj_filter_shard(real, "batch:data") && !tj_filter_shard(abs_, "batch:data"), "filter_shard: %s", tj_error(ctx));
    TJT_CHECK(tj_array_is_abstract(tj_tree_array(abs_, "x")) && !strcmp(tj_array_sharding(tj_tree_array(abs_, "x"), b1, sizeof b1),
                                                                          tj_array_sharding(tj_tree_array(real, "x"), b2, sizeof b2)),
              "filter_shard of an abstract array: %s vs %s", b1, b2);
    pr = tj_jit(ctx, "train", mlp, NULL, real, NULL);
    pa = tj_jit(ctx, "train", mlp, NULL, abs_, NULL);
    TJT_CHECK(pr && pa, "jit: %s", tj_error(ctx));
    if (pr && pa) {
        tj_memory_analysis mr = tj_prog_memory(pr), ma = tj_prog_memory(pa);
        TJT_CHECK(!memcmp(&mr, &ma, sizeof mr), "memory analysis: temp %lld vs %lld, peak %lld vs %lld", (long long)mr.temp_bytes, (long long)ma.temp_bytes,
                  (long long)mr.peak_bytes, (long long)ma.peak_bytes);
        nr = tj_prog_collectives(pr, cr, 64);
        na = tj_prog_collectives(pa, ca, 64);
        TJT_CHECK(nr == na && nr > 0, "collectives: %d vs %d", nr, na);
        for (i = 0; i < nr && i < na && i < 64; i++)
            TJT_CHECK(!strcmp(cr[i].kind, ca[i].kind) && cr[i].bytes == ca[i].bytes, "collective %d: %s %lld B vs %s %lld B", i, cr[i].kind,
                      (long long)cr[i].bytes, ca[i].kind, (long long)ca[i].bytes);
        TJT_CHECK(!tj_run(pr, real, out), "run on real arrays: %s", tj_error(ctx));
        TJT_CHECK(tj_run(pa, abs_, out) == TJ_ERR_STATE && strstr(tj_error(ctx), "input 'w1' is an abstract array"), "run on abstract arrays: %s",
                  tj_error(ctx));
        tj_clear_error(ctx);
    }
    {
        float v[64];
        char path[512];
        TJT_CHECK(tj_array_read(tj_tree_array(abs_, "w1"), TJ_F32, v) == TJ_ERR_STATE && strstr(tj_error(ctx), "is abstract"), "read: %s", tj_error(ctx));
        tj_clear_error(ctx);
        snprintf(path, sizeof path, "/tmp/tj_abstract_%d.safetensors", (int)getpid());
        TJT_CHECK(tj_tree_save(abs_, path) != TJ_OK && strstr(tj_error(ctx), "is abstract") && access(path, F_OK) != 0, "save: %s", tj_error(ctx));
        tj_clear_error(ctx);
        TJT_CHECK(tj_array_abstract(ctx, TJ_F32, "a=3", "a:data") == NULL && strstr(tj_error(ctx), "tj_array_abstract"),
                  "an abstract array that cannot be split: %s", tj_error(ctx));
        tj_clear_error(ctx);
    }
    tj_prog_free(init);
    tj_prog_free(pr);
    tj_prog_free(pa);
    tj_tree_free(none);
    tj_tree_free(real);
    tj_tree_free(abs_);
    tj_tree_free(out);
    tj_ctx_free(ctx);
}

/* a weight used twice (as a tied embedding is) whose gradient is then used
   twice (a norm and an update) */
static void tied_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w");
    tj_v h = tj_tanh(tj_dot(x, w, "embed"));             /* (batch, mlp)   */
    tj_v o = tj_dot(h, w, "mlp");                        /* (batch, embed) */
    tj_v loss = tj_mean(tj_mul(o, o), "batch embed"), gw, gn;
    (void)g;
    (void)u;
    tj_grad(loss, 1, &w, &gw);
    gn = tj_sum_all(tj_mul(gw, gw));
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "gn", gn);
    tj_tree_set_v(out, "w_new", tj_sub(w, tj_mul(gw, gn)));
}
/* Data parallel: the gradient of a weight with two uses, used twice itself,
   is added up across devices once (one psum of the weight's size), and the
   results equal one device's. */
static void test_one_psum_per_gradient(void) {
    tjt_outs o[2];
    int k;
    tjt_current = "one psum per gradient";
    memset(o, 0, sizeof o);
    for (k = 0; k < 2; k++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        tj_prog *p;
        tj_set_devices(ctx, k ? 4 : 1);
        if (k) tj_set_mesh(ctx, "data=4");
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=8 embed=6", 21, -1, 1));
        tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F32, "embed=6 mlp=6", 22, -0.5, 0.5));
        if (k) tj_filter_shard(in, "batch:data");
        p = tj_jit(ctx, "tied", tied_fn, NULL, in, NULL);
        TJT_CHECK(p && !tj_run(p, in, out), "%s: %s", k ? "4 devices" : "1 device", tj_error(ctx));
        tjt_outs_read(&o[k], out);
        if (p && k) {
            tj_collective cols[64];
            int n = tj_prog_collectives(p, cols, 64), i, big = 0;
            for (i = 0; i < n && i < 64; i++) big += !strcmp(cols[i].kind, "psum") && cols[i].bytes == 6 * 6 * 4;
            TJT_CHECK(big == 1, "the gradient of w is added up %d times (want 1)", big);
        }
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(ctx);
    }
    tjt_outs_compare("tied weight, 4 devices vs 1", &o[0], &o[1], 1e-5);
    tjt_outs_free(&o[0]);
    tjt_outs_free(&o[1]);
}

/* sin .. softplus, clip, stack, argmax/argmin sharded: the same results
   as one device. x's values are quarters in [-1, 1], so rows hold ties
   (across device blocks too: argmax must pick the first global index);
   z holds NaNs (the first NaN wins argmax and argmin) and -0 / +0 ties.
   Over a split vocab axis argmax and argmin gather only each block's
   winner (argmax_part: rows x blocks x 2 values), never x or z. */
static void newops_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), z = tj_tree_v(in, "z"), xs[3], s, gx;
    tj_v v = tj_add(tj_add(tj_softplus(x), tj_mul(tj_sin(x), tj_cos(x))), tj_mul(tj_abs(x), tj_sign(x)));
    v = tj_add(tj_add(v, tj_log1p(tj_abs(x))), tj_add(tj_expm1(tj_muls(x, 0.5)), tj_erf(x)));
    (void)g, (void)u;
    xs[0] = x, xs[1] = v, xs[2] = tj_clip(x, -0.5, 0.5);
    s = tj_stack(3, xs, "k");
    tj_grad(tj_sum_all(tj_mul(s, s)), 1, &x, &gx);
    tj_tree_set_v(out, "s", s);
    tj_tree_set_v(out, "gx", gx);
    tj_tree_set_v(out, "am_v", tj_argmax(x, "vocab"));
    tj_tree_set_v(out, "an_v", tj_argmin(x, "vocab"));
    tj_tree_set_v(out, "am_b", tj_argmax(x, "batch"));
    tj_tree_set_v(out, "zm_v", tj_argmax(z, "vocab"));
    tj_tree_set_v(out, "zn_v", tj_argmin(z, "vocab"));
    tj_tree_set_v(out, "zn_b", tj_argmin(z, "batch"));
}
static int run_newops(int ndev, const char *mesh, const char *rules, tjt_outs *o, int *parts) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    double xv[128], zv[128];
    int i, ok;
    for (i = 0; i < 128; i++) {
        xv[i] = (double)((i * 37 + 11) % 9 - 4) / 4.0;
        zv[i] = (i * 13) % 11 == 3 ? NAN : (i * 29) % 7 == 1 ? -0.0 : (i * 29) % 7 == 2 ? 0.0 : (double)((i * 17) % 5) - 2.0;
    }
    memset(o, 0, sizeof *o);
    tj_set_devices(ctx, ndev);
    if (mesh) tj_set_mesh(ctx, mesh);
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F64, "batch=8 vocab=16", xv));
    tj_tree_set_array(in, "z", tj_array_new(ctx, TJ_F32, "batch=8 vocab=16", NULL));
    {
        float zf[128];
        for (i = 0; i < 128; i++) zf[i] = (float)zv[i];
        tj_tree_set_array(in, "z", tj_array_new(ctx, TJ_F32, "batch=8 vocab=16", zf));
    }
    ok = !(rules && tj_filter_shard(in, rules));
    p = ok ? tj_jit(ctx, "newops", newops_fn, NULL, in, NULL) : NULL;
    ok = p && tj_run(p, in, out) == TJ_OK;
    TJT_CHECK(ok, "new ops on %s (%s): %s", mesh ? mesh : "one device", rules ? rules : "-", tj_error(ctx));
    if (ok) tjt_outs_read(o, out);
    *parts = 0; /* argmax_part / argmin_part nodes in the program */
    if (p) *parts = TJT_PROG_LINES(p, "argmax_part") + TJT_PROG_LINES(p, "argmin_part"); /* (one node per line) */
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return ok;
}
static void test_new_ops(void) {
    static const struct { int ndev; const char *mesh, *rules; int parts; } cs[] = { /* parts: reductions over a split axis */
        {2, "data=2", "vocab:data", 4},
        {4, "data=4", "vocab:data", 4},
        {2, "data=2", "batch:data", 2},
        {4, "data=2 model=2", "batch:data vocab:model", 6},
        {8, "data=2 model=4", "vocab:data+model", 4},
        {8, "data=4 model=2", "batch:model vocab:data", 6},
        {8, "data=8", "batch:data", 2},
    };
    tjt_outs ref, o;
    int m, xg;
    tjt_current = "new ops sharded (sin .. softplus, clip, stack, argmax, argmin)";
    if (!run_newops(1, NULL, NULL, &ref, &xg)) return;
    for (m = 0; m < (int)(sizeof cs / sizeof cs[0]); m++) {
        char what[128];
        snprintf(what, sizeof what, "new ops on %s (%s)", cs[m].mesh, cs[m].rules);
        if (!run_newops(cs[m].ndev, cs[m].mesh, cs[m].rules, &o, &xg)) continue;
        tjt_outs_compare(what, &ref, &o, 1e-12);
        TJT_CHECK(xg == cs[m].parts, "%s: %d argmax/argmin reduce a split axis by blocks (argmax_part), want %d: the others gathered their input", what, xg,
                  cs[m].parts);
        tjt_outs_free(&o);
    }
    tjt_outs_free(&ref);
}
int main(void) {
    result ref, r, r2;
    int which, m;
    struct { int ndev; const char *mesh, *rules; const char *name; } cases[] = {
        {2, "data=2", "batch:data", "data parallel, 2"},
        {4, "data=4", "batch:data", "data parallel, 4"},
        {8, "data=8", "batch:data", "data parallel, 8"},
        {2, "model=2", "mlp:model", "tensor parallel, 2"},
        {4, "data=2 model=2", "batch:data mlp:model", "data x tensor, 2x2"},
        {8, "data=2 model=4", "batch:data mlp:model hd:model", "data x tensor, 2x4"},
        {4, "data=4", "batch:data embed:data", "FSDP, 4"},
        {8, "data=4 model=2", "batch:data embed:data mlp:model", "FSDP x tensor, 4x2"},
        {2, "data=2", "pos:data", "sequence, 2"},
        {8, "data=2 seq=4", "batch:data pos:seq", "data x sequence, 2x4"},
        {8, "all=8", "batch:all", "1-d mesh of 8, batch"},
        {4, "data=2 model=2", "batch:data heads:model", "data x heads, 2x2"},
        {8, "data=2 model=4", "batch:data hd:model vocab:model", "data x head_dim, 2x4"},
    };
    test_new_ops();
    test_layout_order();
    tjt_current = "equivalence";
    for (which = 0; which < 7; which++) {
        if (!run_prog(which, 1, NULL, NULL, NULL, &ref, 0)) { TJT_CHECK(0, "single-device program %d failed", which); continue; }
        for (m = 0; m < (int)(sizeof cases / sizeof cases[0]); m++) {
            char what[128];
            snprintf(what, sizeof what, "program %d on %s", which, cases[m].name);
            if (!run_prog(which, cases[m].ndev, cases[m].mesh, cases[m].rules, NULL, &r, 0)) { TJT_CHECK(0, "%s failed", what); continue; }
            compare(what, &ref, &r, 1e-5);
            if (m == 5 && run_prog(which, cases[m].ndev, cases[m].mesh, cases[m].rules, NULL, &r2, 0)) {
                bit_identical(what, &r, &r2);
                free_result(&r2);
            }
            free_result(&r);
        }
        free_result(&ref);
    }

    /* a table split along the rows it is indexed by (an embedding with its
       vocabulary over "model"): each device takes the rows of its block,
       the rows taken are added up; the table is never gathered, nor its
       gradient made whole and sliced again */
    if (run_prog(4, 8, "data=2 model=4", "batch:data hd:model vocab:model", NULL, &r, 0)) {
        TJT_CHECK(r.take_gathers == 0 && r.table_slices == 0, "vocab-parallel take: %d gathers of the table, %d slices of its gradient (want 0, 0)",
                  r.take_gathers, r.table_slices);
        free_result(&r);
    } else TJT_CHECK(0, "vocab-parallel take: the program failed");

    /* collective counts */
    tjt_current = "collective counts";
    if (run_prog(0, 4, "data=4", "batch:data", NULL, &r, 0)) {
        /* data parallel: one all-reduce per parameter gradient (w1, w2), plus the loss's mean */
        TJT_CHECK(r.fwd[0] == 0 && r.fwd[2] == 0, "data parallel: %d all-gathers, %d reduce-scatters forward", r.fwd[0], r.fwd[2]);
        TJT_CHECK(r.bwd[1] == 2, "data parallel: want one psum per parameter gradient (2), got %d", r.bwd[1]);
        free_result(&r);
    }
    if (run_prog(0, 4, "data=4", "batch:data embed:data mlp:data", NULL, &r, 0)) {
        /* FSDP: x batch-sharded, w1 (embed) and w2 (mlp) sharded on data */
        TJT_CHECK(r.fwd[0] == 2, "FSDP: want one all-gather per parameter forward (2), got %d", r.fwd[0]);
        TJT_CHECK(r.bwd[2] == 2, "FSDP: want one reduce-scatter per gradient (2), got %d", r.bwd[2]);
        TJT_CHECK(r.bwd[1] == 0, "FSDP: want no psum in the backward pass, got %d", r.bwd[1]);
        free_result(&r);
    }
    if (run_prog(0, 2, "model=2", "mlp:model", NULL, &r, 0)) {
        /* Megatron MLP: w1 column-sharded, w2 row-sharded: one psum forward, one backward (for dx) */
        TJT_CHECK(r.fwd[1] == 1, "tensor parallel: want exactly one psum forward, got %d", r.fwd[1]);
        TJT_CHECK(r.bwd[1] == 1, "tensor parallel: want exactly one psum backward, got %d", r.bwd[1]);
        TJT_CHECK(r.count[0] == 0, "tensor parallel: want no all-gather, got %d", r.count[0]);
        free_result(&r);
    }

    tjt_current = "all_to_all";
    {
        double ref_v[2][64], v[2][64];
        int k;
        for (k = 0; k < 2; k++) {
            tj_ctx *c = tj_ctx_new();
            tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
            tj_prog *p;
            tj_set_devices(c, k ? 4 : 1);
            tj_set_mesh(c, k ? "data=4" : "data=1"); /* one device: a mesh of one */
            tj_tree_set_array(in, "x", tjt_rand(c, TJ_F32, "batch=8 embed=8", 11, -1, 1));
            tj_tree_set_array(in, "w", tjt_rand(c, TJ_F32, "batch=8 embed=8", 12, -1, 1));
            if (k) {
                tj_array *w = tj_device_put(tj_tree_array(in, "w"), ""); /* w replicated */
                tj_filter_shard(in, "batch:data");
                tj_tree_set_array(in, "w", w);
            }
            p = tj_jit(c, "a2a", a2a_fn, NULL, in, NULL);
            TJT_CHECK(p && !tj_run(p, in, out), "all_to_all program: %s", tj_error(c));
            if (p) {
                tj_collective cols[32];
                int n = tj_prog_collectives(p, cols, 32), i, fa = 0, ba = 0;
                tj_array_read(tj_tree_array(out, "loss"), TJ_F64, k ? v[0] : ref_v[0]);
                tj_array_read(tj_tree_array(out, "gx"), TJ_F64, k ? v[1] : ref_v[1]);
                for (i = 0; i < n && i < 32; i++)
                    if (!strcmp(cols[i].kind, "all_to_all")) { if (cols[i].backward) ba++; else fa++; }
                if (k) {
                    double d = 0;
                    for (i = 0; i < 64; i++) if (fabs(v[1][i] - ref_v[1][i]) > d) d = fabs(v[1][i] - ref_v[1][i]);
                    TJT_CHECK(fabs(v[0][0] - ref_v[0][0]) <= 1e-5 * fabs(ref_v[0][0]) && d < 1e-5, "all_to_all: results differ from one device (%g)", d);
                    TJT_CHECK(fa == 1 && ba == 1, "want one all_to_all forward and one backward, got %d and %d", fa, ba);
                }
            }
            tj_prog_free(p);
            tj_tree_free(in);
            tj_tree_free(out);
            tj_ctx_free(c);
        }
    }

    tjt_current = "profile";
    {   /* a timeline: every device, kernels and collectives, written as a Chrome trace */
        tj_ctx *c = tj_ctx_new();
        tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
        tj_prog *p;
        tj_event ev[4096];
        int n, i, devs[8] = {0}, colls = 0, ok = 1;
        tj_set_devices(c, 4);
        tj_set_mesh(c, "data=4");
        tj_set_profile(c, 1);
        tj_tree_set_array(in, "wte", tjt_rand(c, TJ_F32, "vocab=16 embed=8", 9, -1, 1));
        {
            int32_t tok[32];
            for (i = 0; i < 32; i++) tok[i] = (i * 5 + 3) % 16;
            tj_tree_set_array(in, "tokens", tj_array_new(c, TJ_I32, "batch=4 pos=8", tok));
        }
        tj_tree_set_array(in, "ws", tjt_rand(c, TJ_F32, "layer=3 embed=8 embed2=8", 10, -0.3, 0.3));
        tj_filter_shard(in, "batch:data");
        p = tj_jit(c, "profiled", emb_scan, NULL, in, NULL);
        TJT_CHECK(p && !tj_run(p, in, out), "profiled run: %s", tj_error(c));
        n = p ? tj_prog_events(p, ev, 4096) : 0;
        for (i = 0; i < n && i < 4096; i++) {
            if (ev[i].device >= 0 && ev[i].device < 4) devs[ev[i].device]++;
            colls += ev[i].kind == 1;
            ok &= ev[i].dur_us >= 0 && ev[i].start_us >= 0 && ev[i].file != NULL;
        }
        TJT_CHECK(n > 0 && devs[0] > 0 && devs[0] == devs[1] && devs[1] == devs[2] && devs[2] == devs[3], "events per device: %d %d %d %d", devs[0], devs[1],
                  devs[2], devs[3]);
        TJT_CHECK(colls > 0 && ok, "%d collective events; times and sources %s", colls, ok ? "ok" : "bad");
        if (p) {
            char path[512]; /* this process's own file: runs of the suite may overlap */
            const char *tmp = getenv("TMPDIR");
            FILE *f;
            char head[32] = {0};
            snprintf(path, sizeof path, "%s/tj_trace_test_%ld.json", tmp && *tmp ? tmp : "/tmp", (long)getpid());
            TJT_CHECK(tj_prog_write_trace(p, path) == TJ_OK, "write trace: %s", tj_error(c));
            f = fopen(path, "r");
            if (f) {
                if (!fgets(head, sizeof head, f)) head[0] = 0;
                fclose(f);
            }
            TJT_CHECK(strncmp(head, "{\"traceEvents\"", 14) == 0, "trace file starts with \"%s\"", head);
            remove(path);
        }
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(c);
    }

    tjt_current = "errors";
    {
        tj_ctx *ctx = tj_ctx_new();
        tj_array *a;
        TJT_CHECK(tj_set_devices(ctx, 8) == TJ_OK, "8 devices");
        TJT_CHECK(tj_set_mesh(ctx, "data=2 model=2") != TJ_OK, "a mesh of 4 on 8 devices was accepted");
        TJT_ERROR_HAS(ctx, "data=2 model=2", "4 devices", "8");
        TJT_CHECK(tj_set_mesh(ctx, "data=2 model=4") == TJ_OK, "mesh: %s", tj_error(ctx));
        a = tj_zeros(ctx, TJ_F32, "batch=6 embed=8");
        TJT_CHECK(tj_device_put(a, "batch:dta") == NULL, "unknown mesh axis accepted");
        TJT_ERROR_HAS(ctx, "dta", "not an axis of the mesh", "test_shard.c");
        TJT_CHECK(tj_device_put(a, "batch:data embed:data") == NULL, "mesh axis used twice accepted");
        TJT_ERROR_HAS(ctx, "data", "used twice", "test_shard.c");
        TJT_CHECK(tj_device_put(a, "batch:model") == NULL, "indivisible axis accepted");
        TJT_ERROR_HAS(ctx, "batch", "not divisible", "model", "test_shard.c");
        TJT_CHECK(tj_device_put(a, "pos:data") == NULL, "unknown value axis accepted");
        TJT_ERROR_HAS(ctx, "pos", "does not have", "test_shard.c");
        tj_array_free(a);
        tj_ctx_free(ctx);
    }

    tjt_current = "random";
    {
        /* the same key gives the same numbers whatever the sharding, and each
           device generates only its slice (no slice collective, no full tensor) */
        const char *specs[3] = {"batch:data", "embed:data", "batch:data embed:model"};
        const char *meshes[3] = {"data=4", "data=4", "data=2 model=2"};
        double ref_v[64], v[64];
        int k;
        for (k = -1; k < 3; k++) {
            tj_ctx *c = tj_ctx_new();
            tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
            tj_prog *p;
            const char *spec = k < 0 ? NULL : specs[k];
            tj_set_devices(c, k < 0 ? 1 : 4);
            if (k >= 0) tj_set_mesh(c, meshes[k]);
            tj_tree_set_string(in, "spec", spec ? spec : "");
            tj_tree_set_array(in, "dummy", tj_zeros(c, TJ_F32, "one=1"));
            p = tj_jit(c, "random", random_fn, NULL, in, NULL);
            TJT_CHECK(p && !tj_run(p, in, out), "random %d: %s", k, tj_error(c));
            if (p) {
                tj_collective cols[8];
                tj_array_read(tj_tree_array(out, "u"), TJ_F64, k < 0 ? ref_v : v);
                if (k >= 0) {
                    TJT_CHECK(!memcmp(ref_v, v, sizeof v), "random values depend on the sharding %s", spec);
                    TJT_CHECK(tj_prog_collectives(p, cols, 8) == 0, "sharded random made by slicing a full tensor (%d collectives)", tj_prog_collectives(p, cols, 8));
                    TJT_CHECK(tjt_array_local_bytes(tj_tree_array(out, "u")) * 4 == 64 * 4, "each device holds %lld B of a 256 B tensor sharded 4 ways",
                              (long long)tjt_array_local_bytes(tj_tree_array(out, "u")));
                }
            }
            tj_prog_free(p);
            tj_tree_free(in);
            tj_tree_free(out);
            tj_ctx_free(c);
        }
    }
    test_abstract();
    test_one_psum_per_gradient();
    return tjt_finish();
}
