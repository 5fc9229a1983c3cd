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
        if (tjt_cpu_kernels(ctx)) TJT_CHECK(packs > 0 && packs % tjt_gemm_pack_bytes() == 0, "a 64x64x64 dot packs into its workspace: %lld B of packs", (long long)packs);
        TJT_CHECK(tj_prog_memory(p).temp_bytes <= 4 * buf + packs, "a sum of 8 dots needs %lld B of temp, want at most 4 buffers and one dot's packs (%lld B)",
                  (long long)tj_prog_memory(p).temp_bytes, (long long)(4 * buf + packs));
    } else
        TJT_CHECK(0, "dot sum: %s", tj_error(ctx));
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
}

/* AdamW as gpt2_adamw builds it: one fused loop per parameter that
   updates p, m and v (in place when donated) and also stores a member read
   outside the group (upd). Checked bit for bit against the unfused
   program's arithmetic, op by op (each result rounded to f32, constants
   too), over several chunks and threads, in place or not. */
static void adamw_fused(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v p = tj_tree_v(in, "p"), m, v, upd;
    tj_v gr = tj_mul(tj_tree_v(in, "g"), tj_tree_v(in, "clipc"));
    (void)g; (void)u;
    m = tj_add(tj_muls(tj_tree_v(in, "m"), 0.9), tj_muls(gr, 1.0 - 0.9));
    v = tj_add(tj_muls(tj_tree_v(in, "v"), 0.95), tj_muls(tj_mul(gr, gr), 1.0 - 0.95));
    upd = tj_add(tj_div(tj_muls(m, 10.0), tj_adds(tj_sqrt(tj_muls(v, 20.0)), 1e-8)), tj_muls(p, 0.1));
    tj_tree_set_v(out, "p", tj_sub(p, tj_muls(upd, 1e-3)));
    tj_tree_set_v(out, "m", m);
    tj_tree_set_v(out, "v", v);
    tj_tree_set_v(out, "upd", upd);
}
static void test_fused_adamw(void) {
    enum { N = 3 * 50001 };
    static float p[N], gv[N], m[N], v[N], want[4][N], got[4][N];
    const char *names[4] = {"p", "m", "v", "upd"};
    tj_ctx *ctx = tj_ctx_new(); /* its own: 3 threads */
    float cc = 0.75f;
    int i, k, pass;
    tjt_current = "fused AdamW";
    tj_set_threads(ctx, 3);
    {
        tj_array *a[4] = {tjt_rand(ctx, TJ_F32, "r=3 c=50001", 21, -1, 1), tjt_rand(ctx, TJ_F32, "r=3 c=50001", 22, -1, 1),
                          tjt_rand(ctx, TJ_F32, "r=3 c=50001", 23, -0.1, 0.1), tjt_rand(ctx, TJ_F32, "r=3 c=50001", 24, 0, 0.01)};
        tj_array_read(a[0], TJ_F32, p);
        tj_array_read(a[1], TJ_F32, gv);
        tj_array_read(a[2], TJ_F32, m);
        tj_array_read(a[3], TJ_F32, v);
        for (k = 0; k < 4; k++) tj_array_free(a[k]);
    }
    for (i = 0; i < N; i++) { /* the reference: each op rounded to f32, as the unfused program does */
        float gr = gv[i] * cc, mm = m[i] * (float)0.9 + gr * (float)(1.0 - 0.9), vv = v[i] * (float)0.95 + gr * gr * (float)(1.0 - 0.95);
        float up = mm * (float)10.0 / ((float)sqrt((double)(vv * (float)20.0)) + (float)1e-8) + p[i] * (float)0.1;
        want[0][i] = p[i] - up * (float)1e-3;
        want[1][i] = mm;
        want[2][i] = vv;
        want[3][i] = up;
    }
    for (pass = 0; pass < 2; pass++) { /* not donated, then in place */
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        tj_jit_opts o = {pass ? "p m v" : NULL};
        tj_prog *pr;
        tj_tree_set_array(in, "p", tj_array_new(ctx, TJ_F32, "r=3 c=50001", p));
        tj_tree_set_array(in, "g", tj_array_new(ctx, TJ_F32, "r=3 c=50001", gv));
        tj_tree_set_array(in, "m", tj_array_new(ctx, TJ_F32, "r=3 c=50001", m));
        tj_tree_set_array(in, "v", tj_array_new(ctx, TJ_F32, "r=3 c=50001", v));
        tj_tree_set_array(in, "clipc", tj_array_new(ctx, TJ_F32, "", &cc));
        pr = tj_jit(ctx, "adamw", adamw_fused, NULL, in, &o);
        TJT_CHECK(pr && !tj_run(pr, in, out), "adamw: %s", tj_error(ctx));
        if (pass && pr) TJT_CHECK(tj_prog_memory(pr).alias_bytes == 3 * N * 4, "p, m, v updated in place: %lld B aliased", (long long)tj_prog_memory(pr).alias_bytes);
        for (k = 0; k < 4 && pr; k++) {
            int bad = 0;
            tj_array_read(tj_tree_array(out, names[k]), TJ_F32, got[k]);
            for (i = 0; i < N; i++) bad += memcmp(&got[k][i], &want[k][i], sizeof(float)) != 0;
            TJT_CHECK(!bad, "%s%s: %d of %d elements differ from the unfused arithmetic", names[k], pass ? " (in place)" : "", bad, N);
        }
        tj_prog_free(pr);
        tj_tree_free(in);
        tj_tree_free(out);
    }
    tj_ctx_free(ctx);
}

/* A select with a broadcast scalar branch inside a long float chunk: the
   scalar is spread over pieces of the chunk (tj__math_spread), every piece
   the same as element by element */
static void select_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x");
    (void)u;
    tj_tree_set_v(out, "y", tj_select(tj_gt(x, tj_scalar(g, TJ_F32, 0.25)), tj_muls(x, 3.0), tj_scalar(g, TJ_F32, -0.5)));
}
static void test_fused_select(tj_ctx *ctx) {
    enum { N = 20011 };
    static float x[N], y[N];
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    int i, bad = 0;
    tjt_current = "fused select with a scalar branch";
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "n=20011", 41, -1, 1));
    tj_array_read(tj_tree_array(in, "x"), TJ_F32, x);
    p = tj_jit(ctx, "select", select_fn, NULL, in, NULL);
    TJT_CHECK(p && !tj_run(p, in, out) && !tj_array_read(tj_tree_array(out, "y"), TJ_F32, y), "select: %s", tj_error(ctx));
    for (i = 0; i < N && p; i++) bad += y[i] != (x[i] > 0.25f ? x[i] * 3.0f : -0.5f);
    TJT_CHECK(!bad, "%d of %d elements differ", bad, N);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
}

/* A reduction over every axis of an elementwise chain joins the chain's
   fused loop on the CPU backend (the squares are never stored): the same
   bits as when the chain is stored first (an output), in f32 and f64, for
   sum and max, over several blocks of the reduction; also a chain that
   reads broadcast leaves (a row's mean, a column's gain) */
static void sumsq(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), sq = tj_mul(tj_muls(x, 3.0), x), sq2 = tj_mul(tj_muls(x, 3.0), x);
    tj_v sb = tj_mul(tj_sub(tj_muls(x, 0.5), tj_tree_v(in, "mu")), tj_tree_v(in, "gain"));
    (void)g;
    tj_tree_set_v(out, "s", tj_sum(sq, "r c"));
    tj_tree_set_v(out, "mx", tj_max(tj_neg(sq2), "r c"));
    tj_tree_set_v(out, "sb", tj_sum(sb, "r c"));
    if (u) { /* stored: the reductions read them from memory */
        tj_tree_set_v(out, "sq", sq);
        tj_tree_set_v(out, "sq2", sq2);
        tj_tree_set_v(out, "sbv", sb);
    }
}
static void test_fused_reduce(tj_ctx *ctx) {
    tj_dtype dts[2] = {TJ_F32, TJ_F64};
    int d, k, stored = 1, cpu = !getenv("TJ_BACKEND") || !strcmp(getenv("TJ_BACKEND"), "cpu");
    tjt_current = "fused reduction";
    for (d = 0; d < 2; d++) {
        tj_tree *in = tj_tree_new(ctx), *o[2];
        tj_prog *pr[2];
        tj_event ev[16];
        int n, i, fused = 0;
        tj_tree_set_array(in, "x", tjt_rand(ctx, dts[d], "r=7 c=50001", 31 + (unsigned)d, -2, 2));
        tj_tree_set_array(in, "mu", tjt_rand(ctx, dts[d], "r=7", 33 + (unsigned)d, -1, 1));
        tj_tree_set_array(in, "gain", tjt_rand(ctx, dts[d], "c=50001", 35 + (unsigned)d, -1, 1));
        tj_set_profile(ctx, 1);
        for (k = 0; k < 2; k++) {
            o[k] = tj_tree_new(ctx);
            pr[k] = tj_jit(ctx, k ? "stored" : "fused", sumsq, k ? &stored : NULL, in, NULL);
            TJT_CHECK(pr[k] && !tj_run(pr[k], in, o[k]), "%s: %s", k ? "stored" : "fused", tj_error(ctx));
        }
        tj_set_profile(ctx, 0);
        if (pr[0] && pr[1]) {
            const char *nm[3] = {"s", "mx", "sb"};
            n = tj_prog_events(pr[0], ev, 16);
            for (i = 0; i < n && i < 16; i++) fused += !strncmp(ev[i].op, "fused x3", 8) + !strncmp(ev[i].op, "fused x4", 8);
            TJT_CHECK(!cpu || fused == 3, "%s: the CPU runs each chain and its reduction as one loop (%d of %d events)", tj_dtype_name(dts[d]), fused, n);
            for (k = 0; k < 3; k++) {
                double a = 0, b = 0;
                tj_array_read(tj_tree_array(o[0], nm[k]), TJ_F64, &a);
                tj_array_read(tj_tree_array(o[1], nm[k]), TJ_F64, &b);
                TJT_CHECK(!memcmp(&a, &b, sizeof a), "%s %s: fused %.17g, stored first %.17g", tj_dtype_name(dts[d]), nm[k], a, b);
            }
        }
        for (k = 0; k < 2; k++) {
            tj_prog_free(pr[k]);
            tj_tree_free(o[k]);
        }
        tj_tree_free(in);
    }
}

/* Fused groups with broadcast leaves: a chain over (b, pos, e) that reads a
   gain and a bias along e, a mean along (b, pos), a transposed operand
   (e, b, pos) and a mask along pos runs as one fused group (tj__fuse: the
   CPU's loop, devsim and CUDA read such leaves), and every result, the
   root and a stored member, has the bits of the same ops run as one
   program each (nothing to fuse), in every dtype, over several chunks and
   threads. Donated, the transposed operand is not overwritten in place
   (a later chunk would read elements an earlier one overwrote): the
   result is the same. */
enum { FB_MUL, FB_ADD, FB_SUB, FB_MAX, FB_TANH, FB_SELECT, FB_ADDS };
enum { FB_NOPS = 7 }; /* the chain's ops (fb_op) */
static tj_v fb_apply(int op, tj_v a, tj_v b, tj_v m) {
    switch (op) {
    case FB_MUL: return tj_mul(a, b);
    case FB_ADD: return tj_add(a, b);
    case FB_SUB: return tj_sub(a, b);
    case FB_MAX: return tj_max2(a, b);
    case FB_TANH: return tj_tanh(a);
    case FB_SELECT: return tj_select(m, a, b);
    default: return tj_adds(a, 3.0);
    }
}
static void fb_one(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int op = *(const int *)u;
    (void)g;
    tj_tree_set_v(out, "y", fb_apply(op, tj_tree_v(in, "a"), tj_tree_find(in, "b") >= 0 ? tj_tree_v(in, "b") : NULL,
                                     tj_tree_find(in, "m") >= 0 ? tj_tree_v(in, "m") : NULL));
}
/* the chain: op k reads the previous result and leaf fb_leaf[k] ("" none);
   the select picks between its input and the result of op 1 (stored) */
static const char *fb_leaf[] = {"g", "bias", "mu", "t", "mu", "mask", ""};
static int fb_op(int k, tj_dtype dt) {
    static const int ops[] = {FB_MUL, FB_ADD, FB_SUB, FB_MUL, FB_MAX, FB_SELECT, FB_ADDS};
    return k == 4 && dt != TJ_I32 ? FB_TANH : ops[k];
}
static void fb_chain(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_dtype dt = *(const tj_dtype *)u;
    tj_v v = tj_tree_v(in, "x"), a2 = NULL;
    int k;
    (void)g;
    for (k = 0; k < FB_NOPS; k++) {
        int op = fb_op(k, dt);
        if (op == FB_SELECT) v = fb_apply(op, v, a2, tj_tree_v(in, "mask"));
        else v = fb_apply(op, v, *fb_leaf[k] ? tj_tree_v(in, fb_leaf[k]) : NULL, NULL);
        if (k == 1) a2 = v;
    }
    tj_tree_set_v(out, "y", v);
    tj_tree_set_v(out, "a2", a2);
}
static void test_fused_bcast(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_dtype dts[4] = {TJ_F32, TJ_BF16, TJ_F64, TJ_I32};
    int d, k, pass;
    tjt_current = "fused groups with broadcast leaves";
    tj_set_threads(ctx, 3);
    for (d = 0; d < 4; d++) {
        tj_dtype dt = dts[d];
        double lo = dt == TJ_I32 ? -9 : -1.5, hi = dt == TJ_I32 ? 9 : 1.5;
        tj_tree *in = tj_tree_new(ctx), *ref = tj_tree_new(ctx);
        tj_array *want[2] = {NULL, NULL};
        const char *nm[2] = {"y", "a2"};
        tj_tree_set_array(in, "x", tjt_rand(ctx, dt, "b=3 pos=37 e=1031", 51, lo, hi));
        tj_tree_set_array(in, "g", tjt_rand(ctx, dt, "e=1031", 52, lo, hi));
        tj_tree_set_array(in, "bias", tjt_rand(ctx, dt, "e=1031", 53, lo, hi));
        tj_tree_set_array(in, "mu", tjt_rand(ctx, dt, "b=3 pos=37", 54, lo, hi));
        tj_tree_set_array(in, "t", tjt_rand(ctx, dt, "e=1031 b=3 pos=37", 55, lo, hi));
        tj_tree_set_array(in, "mask", tjt_rand(ctx, TJ_I32, "pos=37", 56, 0, 2));
        /* the reference: one program per op */
        tj_tree_set_array_ref(ref, "a", tj_tree_array(in, "x"));
        for (k = 0; k < FB_NOPS; k++) {
            tj_tree *o = tj_tree_new(ctx);
            int op = fb_op(k, dt);
            tj_prog *p;
            if (op == FB_SELECT) {
                tj_tree_set_array_ref(ref, "b", want[1]);
                tj_tree_set_array_ref(ref, "m", tj_tree_array(in, "mask"));
            } else if (*fb_leaf[k]) tj_tree_set_array_ref(ref, "b", tj_tree_array(in, fb_leaf[k]));
            p = tj_jit(ctx, "one op", fb_one, &op, ref, NULL);
            TJT_CHECK(p && !tj_run(p, ref, o), "%s op %d alone: %s", tj_dtype_name(dt), k, tj_error(ctx));
            tj_prog_free(p);
            tj_tree_clear(ref);
            if (want[0] && k != 2) tj_array_free(want[0]);
            want[0] = tj_tree_find(o, "y") >= 0 ? tj_tree_take(o, "y") : NULL;
            if (k == 1) want[1] = want[0];
            tj_tree_free(o);
            if (!want[0]) break;
            tj_tree_set_array_ref(ref, "a", want[0]);
        }
        for (pass = 0; pass < 2 && want[0]; pass++) { /* not donated, then t donated */
            tj_tree *o = tj_tree_new(ctx), *in2 = tj_tree_new(ctx);
            tj_jit_opts jo = {pass ? "t" : NULL};
            tj_event ev[16];
            tj_prog *p;
            int i, n, groups = 0, members = 0;
            for (i = 0; i < tj_tree_size(in); i++) tj_tree_set_array_ref(in2, tj_tree_name(in, i), tj_tree_array_at(in, i));
            if (pass) tj_tree_set_array(in2, "t", tjt_rand(ctx, dt, "e=1031 b=3 pos=37", 55, lo, hi)); /* (a copy: the run deletes it) */
            tj_set_profile(ctx, 1);
            p = tj_jit(ctx, "chain", fb_chain, &dt, in2, &jo);
            TJT_CHECK(p && !tj_run(p, in2, o), "%s chain: %s", tj_dtype_name(dt), tj_error(ctx));
            tj_set_profile(ctx, 0);
            if (!p) break;
            n = tj_prog_events(p, ev, 16);
            for (i = 0; i < n && i < 16; i++)
                if (!strncmp(ev[i].op, "fused x", 7)) groups++, members = atoi(ev[i].op + 7);
            TJT_CHECK(groups == 1 && members == FB_NOPS, "%s: the chain runs as one fused group of %d members (%d groups, the last of %d; %d events)",
                      tj_dtype_name(dt), FB_NOPS, groups, members, n);
            if (pass) TJT_CHECK(tj_prog_memory(p).alias_bytes == 0, "%s: donated t, read transposed inside the group, is not overwritten (%lld B aliased)",
                                tj_dtype_name(dt), (long long)tj_prog_memory(p).alias_bytes);
            for (k = 0; k < 2; k++) {
                int64_t ne = tj_array_numel(want[k]), bad = 0;
                double *a = (double *)malloc(sizeof(double) * (size_t)ne), *b = (double *)malloc(sizeof(double) * (size_t)ne);
                TJT_CHECK(a && b && tj_tree_find(o, nm[k]) >= 0 && tj_array_numel(tj_tree_array(o, nm[k])) == ne, "%s %s: an output of %lld elements",
                          tj_dtype_name(dt), nm[k], (long long)ne);
                if (a && b && tj_tree_find(o, nm[k]) >= 0 && !tj_array_read(want[k], TJ_F64, a) && !tj_array_read(tj_tree_array(o, nm[k]), TJ_F64, b))
                    for (i = 0; i < ne; i++) bad += memcmp(&a[i], &b[i], sizeof(double)) != 0;
                TJT_CHECK(!bad, "%s %s%s: %lld of %lld elements differ from the ops run one program each", tj_dtype_name(dt), nm[k],
                          pass ? " (t donated)" : "", (long long)bad, (long long)ne);
                free(a);
                free(b);
            }
            tj_prog_free(p);
            tj_tree_free(o);
            tj_tree_free(in2);
        }
        if (want[0] != want[1]) tj_array_free(want[1]);
        tj_array_free(want[0]);
        tj_tree_free(ref);
        tj_tree_free(in);
    }
    tj_ctx_free(ctx);
}

/* The cotangents of slices of one array (tj__ct_sum): adjacent pieces go
   back as one concatenation, however they arrive (case 1's first two meet
   with a gap between them, then the third fills it); with a gap or an
   overlap, pads and adds. Each case: finite differences, the gradient
   against its closed form (the weights in place, summed where slices
   overlap; exact in f64), and the program's ops: no pad where the pieces
   cover the axis, one concat. */
static const int sl_cuts[4][3][2] = {
    {{0, 2}, {2, 5}, {5, 9}}, /* adjacent, in order */
    {{2, 4}, {0, 2}, {4, 9}}, /* adjacent, the first two to arrive ([4, 9), [0, 2)) with a gap */
    {{0, 2}, {3, 6}, {6, 9}}, /* a gap at 2 */
    {{0, 5}, {3, 7}, {7, 9}}, /* an overlap at 3, 4 */
};
static tj_v sl_loss_of(tj_graph *g, const tj_tree *in, int c) {
    tj_v y = tj_tanh(tj_tree_v(in, "x")), loss = NULL;
    int k;
    (void)g;
    for (k = 0; k < 3; k++) {
        char name[16];
        tj_v t;
        snprintf(name, sizeof name, "w%d", k);
        t = tj_sum(tj_mul(tj_slice(y, "a", sl_cuts[c][k][0], sl_cuts[c][k][1]), tj_tree_v(in, name)), "a b");
        loss = loss ? tj_add(loss, t) : t;
    }
    return loss;
}
static void sl_loss(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) { tj_tree_set_v(out, "loss", sl_loss_of(g, in, *(const int *)u)); }
static void sl_grad(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), dx = NULL;
    tj_grad(sl_loss_of(g, in, *(const int *)u), 1, &x, &dx);
    tj_tree_set_v(out, "dx", dx);
}
static void test_slice_cotangents(tj_ctx *ctx) {
    int c, k, i, j;
    tjt_current = "slice cotangents";
    for (c = 0; c < 4; c++) {
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        double x[27], w[3][27], want[27], got[27];
        char what[64];
        tj_prog *p;
        tj_event ev[64];
        int n, pads = 0, cats = 0;
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "a=9 b=3", 40 + (unsigned)c, -1, 1));
        for (k = 0; k < 3; k++) {
            char name[16], shape[32];
            snprintf(name, sizeof name, "w%d", k);
            snprintf(shape, sizeof shape, "a=%d b=3", sl_cuts[c][k][1] - sl_cuts[c][k][0]);
            tj_tree_set_array(in, name, tjt_rand(ctx, TJ_F64, shape, 50 + 3 * (unsigned)c + (unsigned)k, -1, 1));
            tj_array_read(tj_tree_array(in, name), TJ_F64, w[k]);
        }
        tj_array_read(tj_tree_array(in, "x"), TJ_F64, x);
        snprintf(what, sizeof what, "slices of x, case %d", c);
        TJT_GRADCHECK(ctx, what, sl_loss, &c, in, "x w0 w1 w2");
        for (i = 0; i < 27; i++) want[i] = 0;
        for (k = 0; k < 3; k++)
            for (i = sl_cuts[c][k][0]; i < sl_cuts[c][k][1]; i++)
                for (j = 0; j < 3; j++) want[i * 3 + j] += w[k][(i - sl_cuts[c][k][0]) * 3 + j];
        for (i = 0; i < 27; i++) want[i] *= 1 - tanh(x[i]) * tanh(x[i]); /* tanh's backward, (1 - y^2) g, as tinyjax writes it */
        tj_set_profile(ctx, 1);
        p = tj_jit(ctx, "slice cotangents", sl_grad, &c, in, NULL);
        TJT_CHECK(p && !tj_run(p, in, out), "%s: %s", what, tj_error(ctx));
        tj_set_profile(ctx, 0);
        n = p ? tj_prog_events(p, ev, 64) : 0;
        for (i = 0; i < n && i < 64; i++) pads += !strcmp(ev[i].op, "pad"), cats += !strcmp(ev[i].op, "concat");
        if (p && tj_tree_array(out, "dx")) {
            double bad = 0;
            tj_array_read(tj_tree_array(out, "dx"), TJ_F64, got);
            for (i = 0; i < 27; i++) bad = fabs(got[i] - want[i]) > bad ? fabs(got[i] - want[i]) : bad;
            TJT_CHECK(bad <= 1e-15, "%s: the gradient is off its closed form by %g", what, bad);
        }
        if (c < 2) TJT_CHECK(pads == 0 && cats == 1, "%s: the cotangent is one concat (%d pads, %d concats ran)", what, pads, cats);
        else TJT_CHECK(pads >= 1, "%s: pads and adds where the pieces do not tile the axis (%d pads ran)", what, pads);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
    }
}
/* A cast of an exact widening is the cast of what was widened (tj_cast):
   bf16 -> f32 -> bf16 is no op at all (a bf16 tj_index, a sum over an axis
   of size 1, made two casts and a copy), bf16 -> f32 -> f64 one cast, and a
   narrowing in the chain (f32 -> bf16 -> f32) keeps its rounding. */
static void casts_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v xb = tj_tree_v(in, "xb"), xf = tj_tree_v(in, "xf");
    (void)g, (void)u;
    tj_tree_set_v(out, "same", tj_muls(tj_cast(tj_cast(xb, TJ_F32), TJ_BF16), 1.0));
    tj_tree_set_v(out, "index", tj_muls(tj_index(xb, "a", 2), 1.0));
    tj_tree_set_v(out, "f64", tj_cast(tj_cast(xb, TJ_F32), TJ_F64));
    tj_tree_set_v(out, "rounded", tj_cast(tj_cast(xf, TJ_BF16), TJ_F32));
}
static void test_cast_chains(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    int i, casts = 0;
    float xf[12];
    uint16_t xb[12], got_b[12];
    double got_d[12];
    float got_f[12];
    tjt_current = "cast chains";
    for (i = 0; i < 12; i++) xf[i] = (float)(0.3 + 0.123456789 * i), xb[i] = tj_f32_to_bf16(-1.7f + 0.37f * (float)i);
    tj_tree_set_array(in, "xb", tj_array_new(ctx, TJ_BF16, "a=4 b=3", xb));
    tj_tree_set_array(in, "xf", tj_array_new(ctx, TJ_F32, "a=4 b=3", xf));
    p = tj_jit(ctx, "cast chains", casts_fn, NULL, in, NULL);
    TJT_CHECK(p && !tj_run(p, in, out), "cast chains: %s", tj_error(ctx));
    if (p) { /* the program's cast nodes: bf16 -> f64, and f32 -> bf16 -> f32's two */
        FILE *f = tmpfile();
        char line[512];
        if (f) {
            tj_prog_print(p, f);
            rewind(f);
            while (fgets(line, sizeof line, f)) casts += strstr(line, "= cast ") != NULL;
            fclose(f);
        }
        TJT_CHECK(casts == 3, "cast chains: 3 cast nodes (want bf16 -> f64 and f32 -> bf16 -> f32), the program has %d", casts);
    }
    if (p) {
        tj_array_read(tj_tree_array(out, "same"), TJ_BF16, got_b);
        TJT_CHECK(!memcmp(got_b, xb, sizeof xb), "bf16 -> f32 -> bf16 gives the same bits");
        tj_array_read(tj_tree_array(out, "index"), TJ_BF16, got_b);
        TJT_CHECK(!memcmp(got_b, xb + 6, 3 * sizeof *xb), "a bf16 tj_index gives the row's bits");
        tj_array_read(tj_tree_array(out, "f64"), TJ_F64, got_d);
        for (i = 0; i < 12 && got_d[i] == (double)tj_bf16_to_f32(xb[i]); i++) continue;
        TJT_CHECK(i == 12, "bf16 -> f32 -> f64 is the bf16 value, element %d", i);
        tj_array_read(tj_tree_array(out, "rounded"), TJ_F32, got_f);
        for (i = 0; i < 12 && got_f[i] == tj_bf16_to_f32(tj_f32_to_bf16(xf[i])); i++) continue;
        TJT_CHECK(i == 12, "f32 -> bf16 -> f32 keeps the rounding to bf16, element %d", i);
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
}
/* Random fused chains against one program per op: each op reads earlier
   results or leaves (dense, a scalar on either side, a leaf broadcast
   along r), some results are stored, and in a second pass x0 is donated
   so a stored member may be computed straight into it. Bits must agree
   (NaN with NaN) in f32, bf16 and f64, over chunk tails that are not a
   multiple of the vector width, with 3 threads. Two ops reduce (over r,
   read back broadcast; over every axis, read as a scalar), so a chain
   runs as several groups that read each other's results, and a sum over
   every axis of a fused chain runs in the chain's loop (tj__fuse_reduce).
   Found the donation bug of tj__can_donate (2026-11-25). */
enum { FR_ADD, FR_SUB, FR_MUL, FR_DIV, FR_MAX, FR_SQRT, FR_NEG, FR_EXP, FR_SELECT, FR_MULS, FR_SUBROW, FR_SCALEALL, FR_NOPS };
enum { FR_MAXLEN = 14, FR_NLEAF = 5 };
static const char *fr_leaf[FR_NLEAF] = {"x0", "x1", "pos", "s", "row"};
/* leaf k's random values, in `shape` (NULL: r=3 c=1031, a scalar s, a row
   along c); pos positive (sqrt and div read it) */
static tj_array *fr_leaf_rand(tj_ctx *ctx, tj_dtype dt, int k, const char *shape, unsigned seed) {
    static const char *shp[FR_NLEAF] = {"r=3 c=1031", "r=3 c=1031", "r=3 c=1031", "", "c=1031"};
    return tjt_rand(ctx, dt, shape ? shape : shp[k], seed, k == 2 ? 0.5 : -2, 2);
}
typedef struct {
    int len, op[FR_MAXLEN], a[FR_MAXLEN], b[FR_MAXLEN], stored[FR_MAXLEN]; /* operands: < 0 leaf -1 - i, else a step */
    int k;         /* fr_one: the step to run */
    tj_dtype dt;
} fr_recipe;
static tj_v fr_op(int op, tj_v a, tj_v b) {
    switch (op) {
    case FR_ADD: return tj_add(a, b);
    case FR_SUB: return tj_sub(a, b);
    case FR_MUL: return tj_mul(a, b);
    case FR_DIV: return tj_div(a, b);
    case FR_MAX: return tj_max2(a, b);
    case FR_SQRT: return tj_sqrt(a);
    case FR_NEG: return tj_neg(a);
    case FR_EXP: return tj_exp(a);
    case FR_SELECT: return tj_select(tj_gt(a, b), a, b);
    case FR_SUBROW: return tj_sub(a, tj_muls(tj_sum(a, "r"), 1.0 / 3)); /* a reduction over one axis, read back broadcast */
    case FR_SCALEALL: return tj_mul(a, tj_muls(tj_sum(a, "r c"), 1e-3)); /* a sum over every axis (fused into a's loop), read as a scalar */
    default: return tj_muls(a, 0.75);
    }
}
static void fr_one(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const fr_recipe *r = (const fr_recipe *)u;
    (void)g;
    tj_tree_set_v(out, "y", fr_op(r->op[r->k], tj_tree_v(in, "a"), tj_tree_find(in, "b") >= 0 ? tj_tree_v(in, "b") : NULL));
}
static void fr_apply(const fr_recipe *r, const tj_v *leaf, tj_v *v) {
    int k;
    for (k = 0; k < r->len; k++) v[k] = fr_op(r->op[k], r->a[k] < 0 ? leaf[-1 - r->a[k]] : v[r->a[k]], r->b[k] < 0 ? leaf[-1 - r->b[k]] : v[r->b[k]]);
}
static void fr_chain(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const fr_recipe *r = (const fr_recipe *)u;
    tj_v v[FR_MAXLEN], leaf[FR_NLEAF];
    int k;
    char nm[16];
    (void)g;
    for (k = 0; k < FR_NLEAF; k++) leaf[k] = tj_tree_v(in, fr_leaf[k]);
    fr_apply(r, leaf, v);
    for (k = 0; k < r->len; k++) {
        snprintf(nm, sizeof nm, "o%d", k);
        if (r->stored[k] || k == r->len - 1) tj_tree_set_v(out, nm, v[k]);
    }
}
static uint64_t fr_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int fr_unary(int op) { return op == FR_SQRT || op == FR_NEG || op == FR_EXP || op == FR_MULS || op == FR_SUBROW || op == FR_SCALEALL; }
/* a random chain of dtype dt (without the reducing ops unless `reduce`) */
static void fr_make(fr_recipe *r, tj_dtype dt, int reduce, uint64_t *rng) {
    int k;
    memset(r, 0, sizeof *r);
    r->dt = dt;
    r->len = 6 + (int)(fr_next(rng) % (FR_MAXLEN - 5));
    for (k = 0; k < r->len; k++) {
        int pick = (int)(fr_next(rng) % 10);
        r->op[k] = (int)(fr_next(rng) % (uint64_t)(reduce ? FR_NOPS : FR_SUBROW));
        /* a: mostly the previous result; b: any earlier result or leaf (the scalar on the left sometimes) */
        r->a[k] = k && pick < 7 ? k - 1 : k && pick < 8 ? (int)(fr_next(rng) % (uint64_t)k) : -1 - (int)(fr_next(rng) % 3);
        r->b[k] = fr_next(rng) % 3 == 0 && k ? (int)(fr_next(rng) % (uint64_t)k) : -1 - (int)(fr_next(rng) % FR_NLEAF);
        if (!fr_unary(r->op[k]) && fr_next(rng) % 5 == 0) { int t = r->a[k]; r->a[k] = -4; r->b[k] = t; } /* scalar op tensor */
        if (r->a[k] == -5) r->a[k] = -1; /* the broadcast leaf stays on the right: the result keeps (r, c) */
        r->stored[k] = fr_next(rng) % 4 == 0;
    }
    if (r->a[0] == -4) r->b[0] = -1; /* (one operand at least is (r, c)) */
}
/* the elements of got that differ from want in their bits (a NaN equals any
   NaN: of two NaN operands x86 returns the first, and compilers swap a
   commutative op's operands); *ne: the elements, *first: the first that differs */
static int64_t fr_differ(tj_array *got, tj_array *want, int64_t *ne, int64_t *first) {
    static double gv[4 * 1031], wv[4 * 1031];
    int64_t e, bad = 0;
    *ne = tj_array_numel(want);
    *first = -1;
    if (*ne > 4 * 1031 || tj_array_numel(got) != *ne) return *ne ? *ne : 1;
    tj_array_read(got, TJ_F64, gv);
    tj_array_read(want, TJ_F64, wv);
    for (e = 0; e < *ne; e++)
        if (gv[e] == gv[e] || wv[e] == wv[e] ? !(gv[e] == wv[e] && signbit(gv[e]) == signbit(wv[e])) : 0) bad++, *first = *first < 0 ? e : *first;
    return bad;
}
static void test_fused_random(void) {
    tj_ctx *ctx = tj_ctx_new();
    const tj_dtype dts[4] = {TJ_F32, TJ_F32, TJ_BF16, TJ_F64};
    uint64_t rng = 12345;
    int c, k, pass, fails = 0;
    tjt_current = "random fused chains";
    tj_set_threads(ctx, 3);
    for (c = 0; c < 256 && !fails; c++) {
        fr_recipe r;
        tj_tree *in = tj_tree_new(ctx);
        tj_array *want[FR_MAXLEN];
        fr_make(&r, dts[c % 4], 1, &rng);
        for (k = 0; k < FR_NLEAF; k++) tj_tree_set_array(in, fr_leaf[k], fr_leaf_rand(ctx, r.dt, k, NULL, 61 + (unsigned)(c + k)));
        for (k = 0; k < r.len; k++) { /* the reference: one program per op */
            tj_tree *ref = tj_tree_new(ctx), *o = tj_tree_new(ctx);
            tj_prog *p;
            r.k = k;
            tj_tree_set_array_ref(ref, "a", r.a[k] < 0 ? tj_tree_array(in, fr_leaf[-1 - r.a[k]]) : want[r.a[k]]);
            if (!fr_unary(r.op[k])) tj_tree_set_array_ref(ref, "b", r.b[k] < 0 ? tj_tree_array(in, fr_leaf[-1 - r.b[k]]) : want[r.b[k]]);
            p = tj_jit(ctx, "one op", fr_one, &r, ref, NULL);
            TJT_CHECK(p && !tj_run(p, ref, o), "chain %d op %d alone: %s", c, k, tj_error(ctx));
            want[k] = p ? tj_tree_take(o, "y") : NULL;
            tj_prog_free(p);
            tj_tree_free(ref);
            tj_tree_free(o);
            if (!want[k]) { r.len = k; fails++; }
        }
        for (pass = 0; pass < 2 && !fails; pass++) { /* then x0 donated */
            tj_tree *o = tj_tree_new(ctx), *in2 = tj_tree_new(ctx);
            tj_jit_opts jo = {pass ? "x0" : NULL};
            tj_prog *p;
            int i;
            for (i = 0; i < tj_tree_size(in); i++) tj_tree_set_array_ref(in2, tj_tree_name(in, i), tj_tree_array_at(in, i));
            if (pass) tj_tree_set_array(in2, "x0", fr_leaf_rand(ctx, r.dt, 0, NULL, 61 + (unsigned)c)); /* (a copy: the run deletes it) */
            p = tj_jit(ctx, "chain", fr_chain, &r, in2, &jo);
            TJT_CHECK(p && !tj_run(p, in2, o), "chain %d: %s", c, tj_error(ctx));
            for (k = 0; k < r.len && p; k++) {
                char nm[16];
                int64_t ne, bad, first;
                snprintf(nm, sizeof nm, "o%d", k);
                if (tj_tree_find(o, nm) < 0) continue;
                bad = fr_differ(tj_tree_array(o, nm), want[k], &ne, &first);
                TJT_CHECK(!bad, "chain %d (%s, %d ops%s): result %d (op %d) differs from the op alone in %lld of %lld elements (first %lld)", c, tj_dtype_name(r.dt),
                          r.len, pass ? ", x0 donated" : "", k, r.op[k], (long long)bad, (long long)ne, (long long)first);
                fails += bad > 0;
            }
            tj_prog_free(p);
            tj_tree_free(in2);
            tj_tree_free(o);
        }
        for (k = 0; k < r.len; k++) tj_array_free(want[k]);
        tj_tree_free(in);
    }
    tj_ctx_free(ctx);
}

/* The same chains (without reductions) on 4 devices of a 2 x 2 mesh,
   against the chain on one device, bit for bit (elementwise, so nothing
   may differ): as a sharded program, the inputs sharded along both axes
   and x0, x1, pos donated; and as a tj_shard_map body, each device's
   block through the same ops (x1 and row arrive laid out otherwise and
   are resharded to its in_specs; x0 donated). */
static void fr_smap_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const fr_recipe *r = (const fr_recipe *)u;
    tj_v v[FR_MAXLEN];
    int k, n = 0;
    (void)g;
    fr_apply(r, in, v);
    for (k = 0; k < r->len; k++)
        if (r->stored[k] || k == r->len - 1) out[n++] = v[k];
}
static void fr_smap_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const fr_recipe *r = (const fr_recipe *)u;
    static const char *ins[FR_NLEAF] = {"r:a c:b", "r:a c:b", "r:a c:b", "", "c:b"}, *outs[FR_MAXLEN] = {
        "r:a c:b", "r:a c:b", "r:a c:b", "r:a c:b", "r:a c:b", "r:a c:b", "r:a c:b", "r:a c:b", "r:a c:b", "r:a c:b", "r:a c:b", "r:a c:b", "r:a c:b", "r:a c:b"};
    tj_v leaf[FR_NLEAF], o[FR_MAXLEN];
    int k, n = 0;
    char nm[16];
    (void)g;
    for (k = 0; k < FR_NLEAF; k++) leaf[k] = tj_tree_v(in, fr_leaf[k]);
    for (k = 0; k < r->len; k++) n += r->stored[k] || k == r->len - 1;
    if (tj_shard_map(fr_smap_body, (void *)r, FR_NLEAF, leaf, ins, n, o, outs, 1)) return;
    for (k = 0, n = 0; k < r->len; k++) {
        if (!(r->stored[k] || k == r->len - 1)) continue;
        snprintf(nm, sizeof nm, "o%d", k);
        tj_tree_set_v(out, nm, o[n++]);
    }
}
static void test_fused_mesh(void) {
    tj_ctx *c1 = tj_ctx_new(), *c4 = tj_ctx_new();
    const tj_dtype dts[3] = {TJ_F32, TJ_BF16, TJ_F64};
    const char *spec[2][FR_NLEAF] = {{"r:a c:b", "r:b c:a", "r:a c:b", "", "c:b"}, {"r:a c:b", "r:b c:a", "r:a c:b", "", "c:a"}};
    const char *shape[FR_NLEAF] = {"r=4 c=1030", "r=4 c=1030", "r=4 c=1030", "", "c=1030"}, *donate[2] = {"x0 x1 pos", "x0"};
    const char *where[2] = {"on 4 devices", "in shard_map"};
    const uint64_t seed[2] = {777, 31337};
    const unsigned base[2] = {300, 900};
    int c, k, smap, fails;
    tj_set_threads(c1, 2);
    tj_set_devices(c4, 4);
    tj_set_mesh(c4, "a=2 b=2");
    for (smap = 0; smap < 2; smap++) {
        uint64_t rng = seed[smap];
        long long donated = 0;
        tjt_current = smap ? "random fused chains in a shard_map body" : "random fused chains, sharded and donated";
        for (c = 0, fails = 0; c < (smap ? 32 : 48) && !fails; c++) {
            fr_recipe r;
            tj_tree *in1 = tj_tree_new(c1), *in4 = tj_tree_new(c4), *o1 = tj_tree_new(c1), *o4 = tj_tree_new(c4);
            tj_jit_opts jo = {donate[smap]};
            tj_prog *p1, *p4;
            fr_make(&r, dts[c % 3], 0, &rng);
            for (k = 0; k < FR_NLEAF; k++) {
                tj_tree_set_array(in1, fr_leaf[k], fr_leaf_rand(c1, r.dt, k, shape[k], base[smap] + (unsigned)(c * 8 + k)));
                tj_tree_set_array(in4, fr_leaf[k], tjt_put(fr_leaf_rand(c4, r.dt, k, shape[k], base[smap] + (unsigned)(c * 8 + k)), spec[smap][k]));
            }
            p1 = tj_jit(c1, "chain", fr_chain, &r, in1, NULL);
            p4 = tj_jit(c4, smap ? "shard_map chain" : "chain", smap ? fr_smap_fn : fr_chain, &r, in4, &jo);
            TJT_CHECK(p1 && !tj_run(p1, in1, o1), "chain %d on one device: %s", c, tj_error(c1));
            TJT_CHECK(p4 && !tj_run(p4, in4, o4), "chain %d %s: %s", c, where[smap], tj_error(c4));
            if (p4) donated += tj_prog_memory(p4).alias_bytes;
            for (k = 0; k < r.len && p1 && p4; k++) {
                char nm[16];
                int64_t ne, bad, first;
                snprintf(nm, sizeof nm, "o%d", k);
                if (tj_tree_find(o1, nm) < 0) continue;
                bad = fr_differ(tj_tree_array(o4, nm), tj_tree_array(o1, nm), &ne, &first);
                TJT_CHECK(!bad, "chain %d (%s, %d ops): result %d (op %d) %s differs from one device in %lld of %lld elements (first %lld)", c,
                          tj_dtype_name(r.dt), r.len, k, r.op[k], where[smap], (long long)bad, (long long)ne, (long long)first);
                fails += bad > 0;
            }
            tj_prog_free(p1);
            tj_prog_free(p4);
            tj_tree_free(in1);
            tj_tree_free(in4);
            tj_tree_free(o1);
            tj_tree_free(o4);
        }
        if (!smap) TJT_CHECK(donated > 0, "some outputs took donated buffers (%lld B)", donated);
    }
    tj_ctx_free(c1);
    tj_ctx_free(c4);
}

/* The same chains (with reductions) as the body of a scan of 3 steps whose
   carry is x0 (the chain's last result is the next x0; the other leaves
   are captured), donated, and again with the chain inside a remat region
   in the body: bit for bit against the chain run 3 times as a program. */
typedef struct {
    const fr_recipe *r;
    tj_v leaf[FR_NLEAF];
    int remat;
} fr_scan_u;
static void fr_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const fr_scan_u *s = (const fr_scan_u *)u;
    tj_v leaf[FR_NLEAF], v[FR_MAXLEN];
    (void)g;
    memcpy(leaf, s->leaf, sizeof leaf);
    leaf[0] = in[0];
    fr_apply(s->r, leaf, v);
    out[0] = v[s->r->len - 1];
}
static void fr_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    const fr_scan_u *s = (const fr_scan_u *)u;
    (void)x; (void)y;
    if (s->remat) tj_checkpoint(fr_region, u, 1, carry, 1, carry_out, NULL);
    else fr_region(g, carry, carry_out, u);
}
static void fr_scan_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    fr_scan_u *s = (fr_scan_u *)u;
    tj_v h = NULL;
    int k;
    (void)g;
    for (k = 0; k < FR_NLEAF; k++) s->leaf[k] = tj_tree_v(in, fr_leaf[k]);
    tj_scan(fr_body, s, "it=3", 1, &s->leaf[0], 0, NULL, 0, &h, NULL, NULL);
    tj_tree_set_v(out, "h", h);
}
static void test_fused_scan(void) {
    tj_ctx *ctx = tj_ctx_new();
    const tj_dtype dts[3] = {TJ_F32, TJ_BF16, TJ_F64};
    uint64_t rng = 4242;
    int c, k, it, fails = 0;
    tjt_current = "random fused chains in a scan";
    tj_set_threads(ctx, 3);
    for (c = 0; c < 48 && !fails; c++) {
        fr_recipe r;
        fr_scan_u su;
        tj_tree *in = tj_tree_new(ctx);
        tj_array *want = NULL;
        fr_make(&r, dts[c % 3], 1, &rng);
        for (k = 0; k < FR_NLEAF; k++)
            tj_tree_set_array(in, fr_leaf[k], fr_leaf_rand(ctx, r.dt, k, NULL, 500 + (unsigned)(c * 8 + k)));
        for (it = 0; it < 3; it++) { /* the reference: the chain 3 times, x0 <- its last result */
            tj_tree *ref = tj_tree_new(ctx), *o = tj_tree_new(ctx);
            tj_prog *p;
            char nm[16];
            for (k = 0; k < FR_NLEAF; k++) tj_tree_set_array_ref(ref, fr_leaf[k], k == 0 && want ? want : tj_tree_array(in, fr_leaf[k]));
            p = tj_jit(ctx, "chain", fr_chain, &r, ref, NULL);
            TJT_CHECK(p && !tj_run(p, ref, o), "chain %d step %d: %s", c, it, tj_error(ctx));
            tj_array_free(want);
            snprintf(nm, sizeof nm, "o%d", r.len - 1);
            want = p ? tj_tree_take(o, nm) : NULL;
            tj_prog_free(p);
            tj_tree_free(ref);
            tj_tree_free(o);
            if (!want) break;
        }
        for (su.remat = 0; su.remat < 2 && want; su.remat++) {
            tj_tree *o = tj_tree_new(ctx), *in2 = tj_tree_new(ctx);
            tj_jit_opts jo = {"x0"};
            tj_prog *p;
            int64_t ne, bad, first;
            su.r = &r;
            for (k = 1; k < FR_NLEAF; k++) tj_tree_set_array_ref(in2, fr_leaf[k], tj_tree_array(in, fr_leaf[k]));
            tj_tree_set_array(in2, "x0", fr_leaf_rand(ctx, r.dt, 0, NULL, 500 + (unsigned)(c * 8))); /* (a copy: donated) */
            p = tj_jit(ctx, "scan", fr_scan_fn, &su, in2, &jo);
            TJT_CHECK(p && !tj_run(p, in2, o), "chain %d in a scan%s: %s", c, su.remat ? " (remat)" : "", tj_error(ctx));
            if (p) {
                bad = fr_differ(tj_tree_array(o, "h"), want, &ne, &first);
                TJT_CHECK(!bad, "chain %d (%s, %d ops) as a scan's body%s: the final carry differs from 3 runs in %lld of %lld elements (first %lld)", c,
                          tj_dtype_name(r.dt), r.len, su.remat ? " in a remat region" : "", (long long)bad, (long long)ne, (long long)first);
                fails += bad > 0;
            }
            tj_prog_free(p);
            tj_tree_free(in2);
            tj_tree_free(o);
        }
        tj_array_free(want);
        tj_tree_free(in);
    }
    tj_ctx_free(ctx);
}

/* Gradients of the scanned chains under remat and offload policies: loss =
   sum(h w) after 3 steps; the gradients with respect to every leaf, with
   the scan under everything_saveable, nothing_saveable, offload-everything
   and a policy that mixes the three (x0 donated), against the same three
   steps unrolled in one program (no scan, no policy). The policy decides
   what is kept, recomputed or copied to the host, never the values: the
   four agree bit for bit (a zero's sign aside), and with the unrolled
   steps too, but for the captured leaves' gradients, which a scan sums
   over its steps in another order (within rounding). */
static tj_decision fr_offload_all(const char *op, const char *name, const char *shape, void *u) {
    (void)op; (void)name; (void)shape; (void)u;
    return TJ_OFFLOAD;
}
static tj_decision fr_mixed(const char *op, const char *name, const char *shape, void *u) {
    unsigned h = 2166136261u;
    const char *q;
    (void)name; (void)u;
    for (q = op; *q; q++) h = (h ^ (unsigned char)*q) * 16777619u;
    for (q = shape; *q; q++) h = (h ^ (unsigned char)*q) * 16777619u;
    return (tj_decision)(h % 3);
}
typedef struct {
    fr_scan_u su;
    const tj_policy *policy; /* NULL: the steps unrolled, no scan */
} fr_grad_u;
static void fr_grad_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    fr_grad_u *gu = (fr_grad_u *)u;
    tj_v h = NULL, gr[FR_NLEAF], wrt[FR_NLEAF];
    int k;
    (void)g;
    for (k = 0; k < FR_NLEAF; k++) gu->su.leaf[k] = wrt[k] = tj_tree_v(in, fr_leaf[k]);
    if (gu->policy) tj_scan(fr_body, &gu->su, "it=3", 1, &gu->su.leaf[0], 0, NULL, 0, &h, NULL, gu->policy);
    else {
        h = gu->su.leaf[0];
        for (k = 0; k < 3; k++) fr_body(g, &h, NULL, &h, NULL, &gu->su);
    }
    h = tj_sum(tj_mul(h, tj_tree_v(in, "w")), "r c");
    tj_tree_set_v(out, "loss", h);
    if (tj_grad(h, FR_NLEAF, wrt, gr)) return;
    for (k = 0; k < FR_NLEAF; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "d%s", fr_leaf[k]);
        tj_tree_set_v(out, nm, gr[k]);
    }
}
static void test_fused_grad(void) {
    static double gv[3 * 1031], wv[3 * 1031];
    tj_ctx *ctx = tj_ctx_new();
    const tj_dtype dts[2] = {TJ_F32, TJ_F64};
    tj_policy pol[4];
    const char *pname[4] = {"everything_saveable", "nothing_saveable", "offload everything", "mixed"};
    uint64_t rng = 9191;
    int c, k, q, fails = 0;
    double gmax;
    tj_tree *o[4] = {NULL, NULL, NULL, NULL};
    tjt_current = "gradients of random fused chains in a scan, under policies";
    tj_set_threads(ctx, 3);
    pol[0] = tj_everything_saveable();
    pol[1] = tj_nothing_saveable();
    pol[2] = tj_policy_from_fn(fr_offload_all, NULL);
    pol[3] = tj_policy_from_fn(fr_mixed, NULL);
    for (c = 0; c < 24 && !fails; c++) {
        fr_recipe r;
        fr_grad_u gu;
        tj_tree *in = tj_tree_new(ctx), *ref = tj_tree_new(ctx);
        tj_prog *p;
        fr_make(&r, dts[c % 2], 1, &rng);
        for (k = 0; k < FR_NLEAF; k++)
            tj_tree_set_array(in, fr_leaf[k], fr_leaf_rand(ctx, r.dt, k, NULL, 700 + (unsigned)(c * 8 + k)));
        tj_tree_set_array(in, "w", tjt_rand(ctx, r.dt, "r=3 c=1031", 707 + (unsigned)(c * 8), -1, 1));
        memset(&gu, 0, sizeof gu);
        gu.su.r = &r;
        gu.su.remat = c % 3 == 2; /* sometimes a remat region inside the body too */
        p = tj_jit(ctx, "unrolled", fr_grad_fn, &gu, in, NULL);
        TJT_CHECK(p && !tj_run(p, in, ref), "chain %d unrolled: %s", c, tj_error(ctx));
        tj_prog_free(p);
        for (gmax = 0, k = 0; k < tj_tree_size(ref); k++) { /* the largest gradient: the scale of the rounding in sums that cancel */
            tj_array *w = tj_tree_array_at(ref, k);
            int64_t e, ne = tj_array_numel(w);
            tj_array_read(w, TJ_F64, wv);
            for (e = 0; e < ne; e++) gmax = isfinite(wv[e]) && fabs(wv[e]) > gmax ? fabs(wv[e]) : gmax;
        }
        for (q = 0; q < 4 && tj_tree_size(ref); q++) {
            tj_tree *in2 = tj_tree_new(ctx);
            tj_jit_opts jo = {"x0"};
            o[q] = tj_tree_new(ctx);
            for (k = 0; k < tj_tree_size(in); k++) tj_tree_set_array_ref(in2, tj_tree_name(in, k), tj_tree_array_at(in, k));
            tj_tree_set_array(in2, "x0", tjt_rand(ctx, r.dt, "r=3 c=1031", 700 + (unsigned)(c * 8), -2, 2)); /* (a copy: donated) */
            gu.policy = &pol[q];
            p = tj_jit(ctx, "scan", fr_grad_fn, &gu, in2, &jo);
            TJT_CHECK(p && !tj_run(p, in2, o[q]), "chain %d scanned, %s: %s", c, pname[q], tj_error(ctx));
            for (k = 0; k < tj_tree_size(ref) && p; k++) {
                const char *nm = tj_tree_name(ref, k);
                /* against everything_saveable: the same bits; against the unrolled steps: the same bits for the loss and
                   dx0 (through the carry only), and within rounding of the largest gradient for the captured leaves',
                   which the scan sums over the steps in another order (from +0, as JAX's) */
                int exact = q > 0 || !strcmp(nm, "loss") || !strcmp(nm, "dx0");
                tj_array *w = tj_tree_array(q ? o[0] : ref, nm);
                int64_t ne = tj_array_numel(w), e, bad = 0, first = -1;
                double mx = 0, tol;
                tj_array_read(tj_tree_array(o[q], nm), TJ_F64, gv);
                tj_array_read(w, TJ_F64, wv);
                for (e = 0; e < ne; e++) mx = isfinite(wv[e]) && fabs(wv[e]) > mx ? fabs(wv[e]) : mx;
                tol = exact ? 0 : (r.dt == TJ_F64 ? 1e-12 : 1e-5) * (mx > gmax ? mx : gmax);
                for (e = 0; e < ne; e++) /* as test_fused_random, but -0 = +0, and within rounding any two non-finite values
                                            (an inf summed with -inf in one order is NaN, -inf in another) */
                    if (exact ? (gv[e] == gv[e] || wv[e] == wv[e] ? gv[e] != wv[e] : 0)
                              : (isfinite(gv[e]) || isfinite(wv[e])) && !(fabs(gv[e] - wv[e]) <= tol))
                        bad++, first = first < 0 ? e : first;
                TJT_CHECK(!bad, "chain %d (%s, %d ops%s), scanned under %s: %s differs from %s in %lld of %lld elements (first %lld: %.17g, want %.17g)", c,
                          tj_dtype_name(r.dt), r.len, gu.su.remat ? ", a remat region in the body" : "", pname[q], nm, q ? "everything_saveable" : "the unrolled steps",
                          (long long)bad, (long long)ne, (long long)first, first >= 0 ? gv[first] : 0.0, first >= 0 ? wv[first] : 0.0);
                fails += bad > 0;
            }
            tj_prog_free(p);
            tj_tree_free(in2);
        }
        for (q = 0; q < 4; q++) tj_tree_free(o[q]);
        tj_tree_free(in);
        tj_tree_free(ref);
    }
    tj_ctx_free(ctx);
}

/* The same list as input and output: x = scan(x), x = checkpoint(x),
   x = shard_map(x), x = grad(.., x), x = custom_vjp(x). Each clears its
   outputs before it runs; until 2026-11-25 that cleared the inputs too (a
   NULL result, a crash in tj_checkpoint, "wrt 0 is NULL" from tj_grad).
   Each against the same call with separate lists. */
static void ia_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    (void)g; (void)x; (void)y; (void)u;
    carry_out[0] = tj_tanh(tj_muls(carry[0], 1.5));
}
static void ia_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_mul(in[0], tj_exp(in[0]));
}
static void ia_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    (void)g; (void)u;
    out[0] = tj_sin(in[0]);
    res[0] = in[0];
}
static void ia_bwd(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *u) {
    (void)g; (void)u;
    gin[0] = tj_mul(ct[0], tj_cos(res[0]));
}
static void ia_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int alias = *(const int *)u, k;
    const char *sp = "r:d";
    tj_v x[5], y[5];
    (void)g;
    for (k = 0; k < 5; k++) x[k] = y[k] = tj_tree_v(in, "x");
    tj_scan(ia_body, NULL, "it=3", 1, &x[0], 0, NULL, 0, alias ? &x[0] : &y[0], NULL, NULL);
    tj_checkpoint(ia_region, NULL, 1, &x[1], 1, alias ? &x[1] : &y[1], NULL);
    tj_shard_map(ia_region, NULL, 1, &x[2], &sp, 1, alias ? &x[2] : &y[2], &sp, 1);
    tj_grad(tj_sum(tj_mul(x[3], tj_tanh(x[3])), "r"), 1, &x[3], alias ? &x[3] : &y[3]);
    tj_custom_vjp(ia_fwd, ia_bwd, NULL, 1, &x[4], 1, alias ? &x[4] : &y[4], 1);
    for (k = 0; k < 5; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "y%d", k);
        tj_tree_set_v(out, nm, alias ? x[k] : y[k]);
    }
}
static void test_inout_alias(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in, *o[2];
    int alias, k;
    tjt_current = "the same list as input and output";
    tj_set_devices(ctx, 2);
    tj_set_mesh(ctx, "d=2");
    in = tj_tree_new(ctx);
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "r=6", 91, -1, 1));
    for (alias = 0; alias < 2; alias++) {
        tj_prog *p = tj_jit(ctx, alias ? "aliased" : "separate", ia_fn, &alias, in, NULL);
        o[alias] = tj_tree_new(ctx);
        TJT_CHECK(p && !tj_run(p, in, o[alias]), "%s lists: %s", alias ? "the same" : "separate", tj_error(ctx));
        tj_prog_free(p);
    }
    for (k = 0; k < 5 && tj_tree_size(o[0]) == 5 && tj_tree_size(o[1]) == 5; k++) {
        static const char *what[5] = {"scan", "checkpoint", "shard_map", "grad", "custom_vjp"};
        float a[6], b[6];
        tj_array_read(tj_tree_array_at(o[0], k), TJ_F32, a);
        tj_array_read(tj_tree_array_at(o[1], k), TJ_F32, b);
        TJT_CHECK(!memcmp(a, b, sizeof a), "%s with its output list its input list: %g, want %g", what[k], b[0], a[0]);
    }
    tj_tree_free(o[0]);
    tj_tree_free(o[1]);
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* tj_prog_cost and tj_cost_print: kernels, flops and bytes by their
   rules, counted by hand. Each scalar constant (2 and 1) is a kernel
   writing 4 B (1 flop). The fused tanh(2x + 1) of x (4 x 8 f32) reads x
   and the two scalars and writes its result: 264 B, 96 flops. The dot of
   that with w (8 x 3) reads 128 + 96 B and writes 48 B, 2 * 4 * 8 * 3
   flops. A take of 3 rows of 4 from a 10 x 4 table reads the 3 indices and
   the 3 rows and writes 3 rows (108 B; nothing of the rest of the table).
   A scan of 5 steps of c * 2 (c: 8 f32) runs its 2 kernels 5 times: the
   scalar (4 B) and the product (32 + 4 + 32 B, 8 flops). */
static void cost_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v y = tj_tanh(tj_adds(tj_muls(tj_tree_v(in, "x"), 2.0), 1.0));
    (void)g;
    (void)u;
    tj_tree_set_v(out, "y", y);
    tj_tree_set_v(out, "d", tj_dot(y, tj_tree_v(in, "w"), "b"));
    tj_tree_set_v(out, "t", tj_take(tj_tree_v(in, "table"), "v", tj_tree_v(in, "idx")));
}
static void cost_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g, (void)x, (void)y, (void)u;
    co[0] = tj_muls(c[0], 2.0);
}
static void cost_scan(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v c = tj_tree_v(in, "c");
    (void)g;
    (void)u;
    if (!tj_scan(cost_body, NULL, "it=5", 1, &c, 0, NULL, 0, &c, NULL, NULL)) tj_tree_set_v(out, "c", c);
}
static void test_cost(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx), *in2 = tj_tree_new(ctx);
    int32_t idx[3] = {7, 0, 7};
    tj_prog *p, *ps;
    tjt_current = "cost analysis";
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "a=4 b=8", 1, -1, 1));
    tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F32, "b=8 c=3", 2, -1, 1));
    tj_tree_set_array(in, "table", tjt_rand(ctx, TJ_F32, "v=10 e=4", 3, -1, 1));
    tj_tree_set_array(in, "idx", tj_array_new(ctx, TJ_I32, "n=3", idx));
    tj_tree_set_array(in2, "c", tjt_rand(ctx, TJ_F32, "b=8", 4, -1, 1));
    p = tj_jit(ctx, "cost", cost_fn, NULL, in, NULL);
    ps = tj_jit(ctx, "cost scan", cost_scan, NULL, in2, NULL);
    TJT_CHECK(p && ps, "cost programs: %s", tj_error(ctx));
    if (p && ps) {
        tj_cost c = tj_prog_cost(p), cs = tj_prog_cost(ps);
        FILE *f = tmpfile();
        char text[4096];
        size_t n;
        double secs, want;
        TJT_CHECK(c.kernels == 5 && c.flops == 2 + 96 + 192 && c.bytes == 8 + 264 + 272 + 108 && c.coll_bytes == 0 && c.copy_bytes == 0,
                  "cost: %g kernels, %g flops, %g bytes; want 5, 290, 652", c.kernels, c.flops, c.bytes);
        TJT_CHECK(c.flops == tj_prog_flops(p), "cost: %g flops, tj_prog_flops %g", c.flops, tj_prog_flops(p));
        { /* by op, in schedule order: the two scalars, the group, the dot, the take */
            tj_cost_op ops[8];
            int nops = tj_prog_cost_ops(p, ops, 8);
            TJT_CHECK(nops == 4 && tj_prog_cost_ops(p, NULL, 0) == 4 && !strcmp(ops[0].op, "fill") && ops[0].kernels == 2 && ops[0].bytes == 8 &&
                          !strcmp(ops[1].op, "fused x3") && ops[1].bytes == 264 && ops[1].flops == 96 && !strcmp(ops[2].op, "dot") && ops[2].flops == 192 &&
                          ops[2].bytes == 272 && !strcmp(ops[3].op, "take") && ops[3].bytes == 108,
                      "tj_prog_cost_ops: %d ops (%s %g B, %s %g B, ...)", nops, nops > 0 ? ops[0].op : "-", nops > 0 ? ops[0].bytes : 0.0,
                      nops > 1 ? ops[1].op : "-", nops > 1 ? ops[1].bytes : 0.0);
        }
        TJT_CHECK(cs.kernels == 10 && cs.flops == 45 && cs.bytes == 360, "cost of the scan: %g kernels, %g flops, %g bytes; want 10, 45, 360", cs.kernels,
                  cs.flops, cs.bytes);
        /* at 1 GFLOP/s, 0.5 GB/s and 1 us a launch: each kernel max(flops, 2 bytes) ns + 1000 */
        want = (2 * (2.0 * 4 + 1000) + (2.0 * 264 + 1000) + (2.0 * 272 + 1000) + (2.0 * 108 + 1000)) * 1e-9;
        secs = f ? tj_cost_print(p, 1e9, 0.5e9, 1e-6, 3, f) : 0;
        TJT_CHECK(fabs(secs - want) < 1e-15, "tj_cost_print's estimate %.12g s, want %.12g", secs, want);
        if (f) {
            rewind(f);
            n = fread(text, 1, sizeof text - 1, f);
            text[n] = 0;
            fclose(f);
            TJT_CHECK(strstr(text, "cost 'cost' per device: 2.9e-07 GFLOP, 6.52e-07 GB moved") && strstr(text, "\n  fill ") && strstr(text, "\n  dot ") &&
                          strstr(text, "\n  fused x3 ") && !strstr(text, "\n  take "),
                      "tj_cost_print (top 3: the scalars' launches, the dot and the fused group, not the take):\n%s", text);
        }
        TJT_CHECK(tj_cost_print(p, 0, 1e9, 0, 1, stdout) == 0, "flop_s 0 is refused");
        TJT_ERROR_HAS(ctx, "tj_cost_print", "flop_s 0");
        TJT_CHECK(tj_cost_print(p, 1e9, 1e9, 0, 1, NULL) == 0, "a NULL stream is refused");
        TJT_ERROR_HAS(ctx, "tj_cost_print", "NULL");
    }
    tj_prog_free(p);
    tj_prog_free(ps);
    tj_tree_free(in);
    tj_tree_free(in2);
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
    test_cost(ctx);
    test_fused_adamw();
    test_fused_reduce(ctx);
    test_fused_select(ctx);
    test_fused_bcast();
    test_fused_random();
    test_fused_mesh();
    test_fused_scan();
    test_fused_grad();
    test_inout_alias();
    test_slice_cotangents(ctx);
    test_cast_chains(ctx);

    /* the axis-name table grows: a long-running process may make any number
       of distinct names (until 2026-11-24 the 257th was refused) */
    tjt_current = "axis names";
    {
        tj_ctx *c2 = tj_ctx_new();
        int k, failed = 0;
        for (k = 0; k < 1000 && !failed; k++) {
            char sh[32];
            tj_array *a;
            snprintf(sh, sizeof sh, "axis%d=2", k);
            a = tj_zeros(c2, TJ_F32, sh);
            if (!a || tj_array_numel(a) != 2) failed = 1;
            tj_array_free(a);
        }
        TJT_CHECK(!failed, "1000 distinct axis names: name %d failed: %s", k - 1, tj_error(c2));
        tj_ctx_free(c2);
    }

    tj_ctx_free(ctx);
    return tjt_finish();
}
