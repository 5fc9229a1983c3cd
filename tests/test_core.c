/* Core tests: tracing, autodiff through composites, memory plan, donation. */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"

static void mlp2(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w1 = tj_tree_v(in, "w1"), b1 = tj_tree_v(in, "b1"), w2 = tj_tree_v(in, "w2");
    tj_v h = tj_gelu(tj_add(tj_dot(x, w1, "in"), b1));
    tj_v o = tj_dot(h, w2, "hid");
    tj_v lbl = tj_tree_v(in, "labels");
    (void)g; (void)u;
    tj_tree_set_v(out, "loss", tj_cross_entropy(o, lbl, "cls", "batch"));
}
static void attn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), wq = tj_tree_v(in, "wq"), wk = tj_tree_v(in, "wk"), wv = tj_tree_v(in, "wv");
    tj_v q = tj_dot(x, wq, "embed"), k = tj_rename(tj_dot(x, wk, "embed"), "pos", "kpos"), v = tj_rename(tj_dot(x, wv, "embed"), "pos", "kpos");
    tj_v s = tj_muls(tj_dot(q, k, "hd"), 0.5);
    tj_v a = tj_softmax(tj_causal_mask(s, "pos", "kpos", -1e9), "kpos");
    tj_v o = tj_dot(a, v, "kpos");
    (void)g; (void)u;
    tj_tree_set_v(out, "loss", tj_sum(tj_mul(o, o), "pos hd"));
}
static void lnce(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), gam = tj_tree_v(in, "gamma"), w = tj_tree_v(in, "w");
    tj_v h = tj_mul(tj_layer_norm(x, "embed", 1e-5), gam);
    (void)g; (void)u;
    tj_tree_set_v(out, "loss", tj_cross_entropy(tj_dot(h, w, "embed"), tj_tree_v(in, "labels"), "vocab", "pos"));
}

/* an elementwise chain (fuses: one loop) and a sum of dots made far apart
   (must not fuse: every dot would stay alive until the last add) */
static void chain(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x");
    (void)g; (void)u;
    tj_tree_set_v(out, "y", tj_tanh(tj_adds(tj_mul(tj_muls(x, 2.0), x), 1.0)));
}
static void dot_sum(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), s = NULL;
    int k;
    (void)g; (void)u;
    for (k = 0; k < 8; k++) {
        tj_v t = tj_dot(tj_muls(x, k + 1.0), w, "in");
        s = s ? tj_add(s, t) : t;
    }
    tj_tree_set_v(out, "s", s);
}
static void test_fusion(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    tj_event ev[64];
    int i, n, fused = 0;
    tjt_current = "fusion";
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "b=64 in=64", 12, -1, 1));
    tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F32, "in=64 out=64", 13, -1, 1));
    tj_set_profile(ctx, 1);
    p = tj_jit(ctx, "chain", chain, NULL, in, NULL);
    TJT_CHECK(p && !tj_run(p, in, out), "chain: %s", tj_error(ctx));
    n = tj_prog_events(p, ev, 64);
    for (i = 0; i < n && i < 64; i++) fused += !strncmp(ev[i].op, "fused x4", 8);
    TJT_CHECK(fused == 1, "the 4-op chain runs as one fused loop (%d events)", n);
    tj_prog_free(p);
    tj_set_profile(ctx, 0);
    p = tj_jit(ctx, "dot sum", dot_sum, NULL, in, NULL);
    if (p) { /* buffers of 64x64 f32: the scaled x, a dot, the running sum, and one more in flight;
                and the pack buffers of the one dot running (its planned workspace) */
        int64_t buf = 64 * 64 * 4, packs = tj_prog_memory(p).pack_bytes;
        TJT_CHECK(packs > 0 && packs % tjt_gemm_pack_bytes() == 0, "a 64x64x64 dot packs into its workspace: %lld B of packs", (long long)packs);
        TJT_CHECK(tj_prog_memory(p).temp_bytes <= 4 * buf + packs, "a sum of 8 dots needs %lld B of temp, want at most 4 buffers and one dot's packs (%lld B)",
                  (long long)tj_prog_memory(p).temp_bytes, (long long)(4 * buf + packs));
    } else
        TJT_CHECK(0, "dot sum: %s", tj_error(ctx));
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
}

int main(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in;
    int32_t lbl[4] = {0, 2, 1, 2}, lbl2[5] = {1, 0, 3, 2, 1};

    tjt_current = "composites";
    in = tj_tree_new(ctx);
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "batch=4 in=3", 1, -1, 1));
    tj_tree_set_array(in, "w1", tjt_rand(ctx, TJ_F64, "in=3 hid=5", 2, -1, 1));
    tj_tree_set_array(in, "b1", tjt_rand(ctx, TJ_F64, "hid=5", 3, -1, 1));
    tj_tree_set_array(in, "w2", tjt_rand(ctx, TJ_F64, "hid=5 cls=3", 4, -1, 1));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=4", lbl));
    TJT_GRADCHECK(ctx, "2-layer MLP", mlp2, NULL, in, "x w1 b1 w2");
    tj_tree_free(in);

    in = tj_tree_new(ctx);
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "pos=5 embed=4", 5, -1, 1));
    tj_tree_set_array(in, "wq", tjt_rand(ctx, TJ_F64, "embed=4 hd=3", 6, -1, 1));
    tj_tree_set_array(in, "wk", tjt_rand(ctx, TJ_F64, "embed=4 hd=3", 7, -1, 1));
    tj_tree_set_array(in, "wv", tjt_rand(ctx, TJ_F64, "embed=4 hd=3", 8, -1, 1));
    TJT_GRADCHECK(ctx, "attention head, causal", attn, NULL, in, "x wq wk wv");
    tj_tree_free(in);

    in = tj_tree_new(ctx);
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "pos=5 embed=6", 9, -2, 2));
    tj_tree_set_array(in, "gamma", tjt_rand(ctx, TJ_F64, "embed=6", 10, 0.5, 1.5));
    tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F64, "embed=6 vocab=4", 11, -1, 1));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "pos=5", lbl2));
    TJT_GRADCHECK(ctx, "layer norm + cross-entropy", lnce, NULL, in, "x gamma w");
    tj_tree_free(in);

    test_fusion(ctx);

    /* the axis-name table is finite: running out is an error, not garbage */
    tjt_current = "axis names";
    {
        tj_ctx *c2 = tj_ctx_new();
        int k, failed = 0;
        for (k = 0; k < 300 && !failed; k++) {
            char sh[32];
            tj_array *a;
            snprintf(sh, sizeof sh, "axis%d=2", k);
            a = tj_zeros(c2, TJ_F32, sh);
            if (!a) failed = 1;
            tj_array_free(a);
        }
        TJT_CHECK(failed, "300 distinct axis names were all accepted");
        TJT_ERROR_HAS(c2, "distinct axis names");
        tj_ctx_free(c2);
    }

    tj_ctx_free(ctx);
    return tjt_finish();
}
