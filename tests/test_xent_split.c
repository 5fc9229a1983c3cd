/* test_xent_split: cross_entropy with the class axis split over devices
   (the vocab-parallel loss of tinyjax.h [5]: per-block statistics,
   all-gathered and combined; one pass per block for the gradient),
   against the same program on one device: 12 programs (the loss and its
   gradient, per-row losses, a logits head with grad-of-grad, f64 with
   grad-of-grad, bf16, blocks of -inf, inside a scan and a checkpoint,
   losses over 16, the class axis first, partial logits, labels at the
   blocks' edges) on 14 meshes (2, 4 and 8 devices; splits over one, two
   and three mesh axes; rows split too), with 3 class counts each (with
   TJ_TEST_QUICK, one of the 3 on each mesh, by turns). Then
   structure (no collective of the logits' size; the program uses
   cross_entropy_part), finite differences through the sharded program
   (first and second order), a label out of range, and logits the
   vocab-parallel form cannot take (8 axes; an axis named _part, _stat or
   _cls), which must give one device's results through the gathering form;
   rows of NaN, +-inf and large logits and blocks longer than the row
   kernels' chunk (labels at the chunks' edges) against one device, with
   the memory plan checked against the run's allocations.
   usage: test_xent_split [case]   (RV_PRINT=1: print the programs) */
#include "../tinyjax.h"
#include "tj_test.h"
#include "xent_progs.h" /* the programs and the runner shared with test_xent_ignore.c */

static tj_v xent(tj_v z, tj_v lab, const char *mean) { return tj_cross_entropy(z, lab, "vocab", mean); }
/* the programs: 0 the mean loss and its gradient; 1 per-row losses,
   weighted; 2 a head (logits = h . w) with grad of grad, 3 the same in f64,
   9 the same with partial logits (embed split too: the meshes' rules);
   4 bf16 logits; 6 inside a scan; 7 inside a checkpoint (xent_progs.h);
   and own() */
static int kind(int c) {
    static const int k[15] = {XP_MEAN, XP_PER_ROW, XP_HEAD, XP_HEAD_F64, XP_BF16, XP_OWN, XP_SCAN, XP_CHECKPOINT, XP_OWN, XP_HEAD, XP_OWN, XP_OWN, XP_BF16_F32, XP_OWN, XP_OWN};
    return c >= 0 && c < (int)(sizeof k / sizeof k[0]) ? k[c] : XP_OWN;
}
static void own(tj_graph *g, const tj_tree *in, tj_tree *out, tj_v z, tj_v lab, tj_v h, tj_v w) {
    tj_v wr[1];
    (void)h;
    switch (CASE) {
    case 5: { /* the upper half of the classes -inf (whole blocks, on most meshes), or -1e30 */
        char sh[32];
        tj_v col, keep, zm;
        snprintf(sh, sizeof sh, "vocab=%d", VV);
        col = tj_arange(g, TJ_I32, sh, "vocab");
        keep = tj_lt(col, tj_scalar(g, TJ_I32, VV / 2));
        zm = tj_select(keep, z, tj_scalar(g, TJ_F32, -INFINITY));
        zm = tj_add(zm, tj_select(tj_lt(col, tj_scalar(g, TJ_I32, VV / 2 - 1)), tj_mul(z, z), tj_scalar(g, TJ_F32, -1e30)));
        wr[0] = z;
        xp_grads2(out, xent(zm, lab, "batch pos"), 1, wr);
        break;
    }
    case 8: /* losses far over 16 */
        wr[0] = z;
        xp_grads(out, xent(tj_muls(z, 300.0), lab, "batch pos"), 1, wr);
        break;
    case 10: /* the class axis first */
        wr[0] = z;
        xp_grads(out, xent(tj_transpose(z, "vocab pos batch"), lab, "batch pos"), 1, wr);
        break;
    case 13: /* tj_cross_entropy_padded over 3/4 of the classes less one (the edge inside a block), grad of grad */
        wr[0] = z;
        xp_grads2(out, tj_cross_entropy_padded(z, lab, "vocab", "batch pos", VV * 3 / 4 - 1), 1, wr);
        break;
    case 14: /* the same over half of them (whole blocks of padding on most meshes), per-row losses, weighted */
        wr[0] = z;
        xp_grads(out, tj_sum_all(tj_mul(tj_cross_entropy_padded(z, lab, "vocab", "", VV / 2), tj_tanh(tj_tree_v(in, "labels2f")))), 1, wr);
        break;
    case 11: /* the loss of a tied embedding: take and logits from one table */
        wr[0] = w;
        xp_grads2(out, xent(tj_dot(tj_tanh(tj_take(w, "vocab", lab)), w, "embed"), tj_tree_v(in, "labels2"), "batch pos"), 1, wr);
        break;
    }
}
static void labels(int32_t lab[32], int V) {
    int i;
    if (CASE == 5)
        for (i = 0; i < 32; i++) lab[i] %= V / 2 - 1; /* (not masked) */
    if (CASE == 13 || CASE == 14)
        for (i = 0; i < 32; i++) lab[i] %= CASE == 13 ? V * 3 / 4 - 1 : V / 2; /* (not padding) */
}
static void inputs(tj_ctx *ctx, tj_tree *in, const int32_t lab[32], int V, tj_dtype dt) {
    int32_t lab2[32];
    int i;
    (void)lab;
    for (i = 0; i < 32; i++) lab2[i] = (i * 7 + 2) % V;
    tj_tree_set_array(in, "labels2", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", lab2));
    if (CASE == 14) tj_tree_set_array(in, "labels2f", tjt_rand(ctx, dt, "batch=4 pos=8", 6, -2, 2)); /* the rows' weights */
    if (CASE == 11) { /* the table: classes first */
        char shp[64];
        snprintf(shp, sizeof shp, "vocab=%d embed=8", V);
        tj_tree_set_array(in, "w", tjt_rand(ctx, dt, shp, 5, -1, 1));
    }
}
static const xp_test SPLIT = {xent, kind, own, labels, inputs, NULL, ""};

/* finite differences through the sharded program: the loss of logits split
   over model (and its gradient's weighted sum, for the second order) */
static int FD_PAD; /* > 0: tj_cross_entropy_padded over that many classes */
static tj_v fd_xent(tj_v z, tj_v lab) { return FD_PAD ? tj_cross_entropy_padded(z, lab, "vocab", "batch pos", FD_PAD) : xent(z, lab, "batch pos"); }
static int FD_ONE; /* one device: nothing to shard */
static tj_v fd_shard(tj_v z) { return FD_ONE ? z : tj_shard_by_rules(z, "vocab:model batch:data"); }
static void fd_first(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = fd_shard(tj_tree_v(in, "z"));
    (void)g; (void)u;
    tj_tree_set_v(out, "loss", fd_xent(tj_mul(z, z), tj_tree_v(in, "labels")));
}
static void fd_second(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = fd_shard(tj_tree_v(in, "z")), gz;
    (void)g; (void)u;
    tj_grad(fd_xent(tj_mul(z, z), tj_tree_v(in, "labels")), 1, &z, &gz);
    tj_tree_set_v(out, "loss", tj_sum_all(tj_mul(gz, tj_tree_v(in, "wz"))));
}
static void fd_checks(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx);
    int32_t lab[32];
    int i;
    tj_set_devices(ctx, 4);
    tj_set_mesh(ctx, "data=2 model=2");
    for (i = 0; i < 32; i++) lab[i] = (i * 5 + 3) % 16;
    tj_tree_set_array(in, "z", tjt_rand(ctx, TJ_F64, "batch=4 pos=8 vocab=16", 21, -1.5, 1.5));
    tj_tree_set_array(in, "wz", tjt_rand(ctx, TJ_F64, "batch=4 pos=8 vocab=16", 22, -1, 1));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", lab));
    tjt_current = "finite differences";
    TJT_GRADCHECK(ctx, "vocab-parallel cross_entropy", fd_first, NULL, in, "z");
    TJT_GRADCHECK(ctx, "vocab-parallel cross_entropy, grad of grad", fd_second, NULL, in, "z");
    for (i = 0; i < 32; i++) lab[i] = (i * 5 + 3) % 11; /* padded: 11 of 16 classes (the second block of 8 partly padding) */
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", lab));
    FD_PAD = 11;
    TJT_GRADCHECK(ctx, "vocab-parallel cross_entropy_padded", fd_first, NULL, in, "z");
    TJT_GRADCHECK(ctx, "vocab-parallel cross_entropy_padded, grad of grad", fd_second, NULL, in, "z");
    tj_tree_free(in);
    tj_ctx_free(ctx);
    ctx = tj_ctx_new(); /* and on one device, the class axis in the middle */
    in = tj_tree_new(ctx);
    tj_tree_set_array(in, "z", tjt_rand(ctx, TJ_F64, "batch=4 vocab=16 pos=8", 21, -1.5, 1.5));
    tj_tree_set_array(in, "wz", tjt_rand(ctx, TJ_F64, "batch=4 vocab=16 pos=8", 22, -1, 1));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", lab));
    FD_ONE = 1;
    TJT_GRADCHECK(ctx, "cross_entropy_padded, one device", fd_first, NULL, in, "z");
    TJT_GRADCHECK(ctx, "cross_entropy_padded, one device, grad of grad", fd_second, NULL, in, "z");
    FD_ONE = FD_PAD = 0;
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* logits the vocab-parallel form cannot take (8 axes: its statistics would
   need 9; an axis named like one of its own: _part, _stat, _cls) take the
   gathering form: the same loss and gradients (and grad of grad) as one
   device, not a broken type */
static const char *ODD_SHAPE, *ODD_CLS;
static void odd_prog(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = tj_tree_v(in, "z"), gz, ggz, l;
    (void)g; (void)u;
    l = tj_sum_all(tj_cross_entropy(tj_mul(z, z), tj_tree_v(in, "labels"), ODD_CLS, ""));
    tj_tree_set_v(out, "loss", l);
    if (tj_grad(l, 1, &z, &gz) || tj_grad(tj_sum_all(tj_mul(gz, gz)), 1, &z, &ggz)) return;
    tj_tree_set_v(out, "gz", gz);
    tj_tree_set_v(out, "ggz", ggz);
}
static int odd_run(int ndev, tjt_outs *o) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx);
    int32_t lab[64];
    char rows[128], rule[32];
    int i;
    memset(o, 0, sizeof *o);
    for (i = 0; i < 64; i++) lab[i] = (i * 5 + 3) % 8;
    snprintf(rows, sizeof rows, "%s", ODD_SHAPE);
    *strstr(rows, ODD_CLS) = 0; /* (the class axis last) */
    tj_set_devices(ctx, ndev);
    tj_set_mesh(ctx, ndev > 1 ? "model=2" : "model=1");
    tj_tree_set_array(in, "z", tjt_rand(ctx, TJ_F64, ODD_SHAPE, 7, -2, 2));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, rows, lab));
    snprintf(rule, sizeof rule, "%s:model", ODD_CLS);
    tj_filter_shard(in, rule);
    return xp_jit_run(ctx, in, "odd", odd_prog, o, ODD_SHAPE, ndev);
}
static void odd_logits(void) {
    static const char *cs[][2] = {{"a=1 b=2 c=1 d=2 e=1 f=2 pos=2 vocab=8", "vocab"}, {"_part=2 vocab=8", "vocab"}, {"_stat=3 vocab=8", "vocab"},
                                  {"_cls=3 vocab=8", "vocab"}, {"batch=2 _stat=8", "_stat"}};
    int i;
    tjt_current = "logits the vocab-parallel form cannot take";
    for (i = 0; i < 5; i++) {
        tjt_outs a, b;
        ODD_SHAPE = cs[i][0];
        ODD_CLS = cs[i][1];
        if (!odd_run(1, &a)) { TJT_CHECK(0, "%s: one device failed", ODD_SHAPE); continue; }
        if (odd_run(2, &b)) tjt_outs_compare(ODD_SHAPE, &a, &b, 1e-12);
        else TJT_CHECK(0, "%s [%s:model]: 2 devices failed", ODD_SHAPE, ODD_CLS);
        tjt_outs_free(&a);
        tjt_outs_free(&b);
    }
}

/* NaN, +-inf and large logits, row by row, and blocks longer than the row
   kernels' chunk (256 doubles, 512 floats) with labels at the chunks' and
   the blocks' edges: per-row losses and their gradient (f64: and grad of
   grad) as on one device, NaN for NaN and inf for inf; and the memory plan
   is what the run allocates */
static tj_dtype SP_DT;
static void sp_prog(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = tj_tree_v(in, "z"), per, ct = tj_tree_v(in, "rw"), gz, ggz;
    (void)g; (void)u;
    per = tj_cross_entropy(z, tj_tree_v(in, "labels"), "vocab", "");
    tj_tree_set_v(out, "per", per);
    if (tj_vjp(1, &per, &ct, 1, &z, &gz)) return;
    tj_tree_set_v(out, "gz", gz);
    if (SP_DT != TJ_F64 || tj_grad(tj_sum_all(tj_mul(tj_tanh(gz), tj_tree_v(in, "wz"))), 1, &z, &ggz)) return;
    tj_tree_set_v(out, "ggz", ggz);
}
static int sp_run(const tjt_mesh_case *mc, int V, tjt_outs *o) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    int32_t lab[12];
    int ok, i, c, chunk[12] = {0, 255, 256, 511, 512, 513, 1023, 1024, 1099, 1100, 1101, 2199};
    char shp[64];
    double *zh = (double *)malloc(sizeof(double) * 12 * (size_t)V);
    void *host = malloc(8 * 12 * (size_t)V);
    tj_array *za;
    memset(o, 0, sizeof *o);
    tj_set_devices(ctx, mc ? mc->ndev : 1);
    if (mc) tj_set_mesh(ctx, mc->mesh);
    snprintf(shp, sizeof shp, "batch=2 pos=6 vocab=%d", V);
    za = tjt_rand(ctx, TJ_F64, shp, 7, -3, 3);
    tj_array_read(za, TJ_F64, zh);
    tj_array_free(za);
    for (i = 0; i < 12; i++) {
        double *r = zh + (int64_t)i * V;
        lab[i] = V > 2199 ? chunk[i] : (i * 5 + 3) % V;
        switch (i) {
        case 0: r[lab[i]] = NAN; break;                                         /* the label's logit NaN */
        case 1: r[(lab[i] + 1) % V] = NAN; break;                               /* another logit NaN */
        case 2: r[lab[i]] = -INFINITY; break;                                   /* the label's logit -inf: loss inf */
        case 3: r[(lab[i] + V / 2) % V] = INFINITY; break;                      /* +inf in another block */
        case 4: r[lab[i]] = INFINITY; break;                                    /* the label's logit +inf */
        case 5: for (c = 0; c < V; c++) r[c] = -INFINITY; break;                /* a row of -inf */
        case 6: for (c = 0; c < V; c++) if (c != lab[i]) r[c] = -INFINITY; break; /* all but the label */
        case 7: for (c = 0; c < V / 2; c++) r[c] = -INFINITY; break;            /* the first half (whole blocks) */
        case 8: for (c = 0; c < V; c++) r[c] *= 1e4; break;                     /* large */
        case 9: for (c = 0; c < V; c++) r[c] = 1e4 + 0.01 * c; break;           /* large and close */
        case 10: for (c = 0; c < V; c++) r[c] = c == lab[i] ? 40 : -40; break;  /* a loss near 0 */
        default: break;
        }
    }
    for (i = 0; i < 12 * V; i++) tjt_st(host, SP_DT, i, zh[i]);
    tj_tree_set_array(in, "z", tj_array_new(ctx, SP_DT, shp, host));
    tj_tree_set_array(in, "wz", tjt_rand(ctx, TJ_F64, shp, 9, -1, 1));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=2 pos=6", lab));
    tj_tree_set_array(in, "rw", tjt_rand(ctx, SP_DT, "batch=2 pos=6", 8, -1, 1));
    if (mc) tj_filter_shard(in, mc->rules);
    p = tj_jit(ctx, "special", sp_prog, NULL, in, NULL);
    tj_reset_alloc_peaks(ctx);
    ok = p && tj_run(p, in, out) == TJ_OK;
    if (!ok) fprintf(stderr, "special rows on %s: %s\n", mc ? mc->mesh : "one device", tj_error(ctx));
    else {
        tj_memory_analysis ma = tj_prog_memory(p);
        tj_alloc_stats st = tj_get_alloc_stats(ctx);
        int64_t peak = 0;
        for (i = 0; i < tj_devices(ctx); i++) peak = st.device_peak_bytes[i] > peak ? st.device_peak_bytes[i] : peak;
        TJT_CHECK(st.peak_arena_bytes == tj_devices(ctx) * ma.temp_bytes && peak == ma.peak_bytes,
                  "%s V=%d: planned %lld temp, %lld peak per device; the run's arenas peaked at %lld on %d devices, a device at %lld",
                  mc ? mc->mesh : "one device", V, (long long)ma.temp_bytes, (long long)ma.peak_bytes, (long long)st.peak_arena_bytes, tj_devices(ctx),
                  (long long)peak);
        tjt_outs_read(o, out);
    }
    free(zh);
    free(host);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return ok;
}
static void special_rows(void) {
    static const int meshes[] = {0, 2, 8, 13}, Vs[] = {16, 2200};
    tj_dtype dts[] = {TJ_F32, TJ_F64, TJ_BF16};
    int d, v, m;
    tjt_current = "special values, long blocks";
    for (d = 0; d < 3; d++)
        for (v = 0; v < 2; v++) {
            tjt_outs a, b;
            SP_DT = dts[d];
            if (!sp_run(NULL, Vs[v], &a)) { TJT_CHECK(0, "%s V=%d: one device failed", tj_dtype_name(SP_DT), Vs[v]); continue; }
            for (m = 0; m < 4; m++) {
                const tjt_mesh_case *mc = &tjt_vocab_meshes[meshes[m]];
                char what[160];
                snprintf(what, sizeof what, "%s V=%d %s [%s]", tj_dtype_name(SP_DT), Vs[v], mc->mesh, mc->rules);
                if (!sp_run(mc, Vs[v], &b)) { TJT_CHECK(0, "%s failed", what); continue; }
                xp_compare(what, &a, &b, SP_DT == TJ_F64 ? 1e-12 : SP_DT == TJ_F32 ? 2e-5 : 1e-2);
                tjt_outs_free(&b);
            }
            tjt_outs_free(&a);
        }
}

/* a label out of range is the same clear error as on one device */
static void bad_label(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    int32_t lab[32];
    int i;
    tj_prog *p;
    tj_set_devices(ctx, 2);
    tj_set_mesh(ctx, "model=2");
    for (i = 0; i < 32; i++) lab[i] = i == 9 ? 16 : i % 16;
    tj_tree_set_array(in, "z", tjt_rand(ctx, TJ_F32, "batch=4 pos=8 vocab=16", 21, -1, 1));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", lab));
    tj_tree_set_array(in, "h", tjt_rand(ctx, TJ_F32, "embed=2", 3, -1, 1)); /* (prog reads them) */
    tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F32, "embed=2", 3, -1, 1));
    tj_filter_shard(in, "vocab:model");
    CASE = 0;
    tjt_current = "label out of range";
    p = tj_jit(ctx, "bad", xp_prog, NULL, in, NULL);
    TJT_CHECK(p && tj_run(p, in, out) != TJ_OK, "a label of 16 for 16 classes ran");
    TJT_ERROR_HAS(ctx, "label 16", "out of range [0, 16)", "test_xent_split.c");
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
}

/* bf16 logits widened to f32 (tj_cross_entropy(tj_cast(z, TJ_F32), ...)):
   the op reads the bf16 logits and no f32 copy is made, with the same bits
   as the loss of f32 logits holding the same values: per-row losses, the
   mean, and the gradient (z's in bf16, the f32 program's rounded to bf16
   once), with the class axis in the middle, -1e30 masks and a row of
   large logits; also when the f32 logits are an output too (the copy is
   then made for that reader) */
static int WIDE_KEEP, WIDE_D2; /* the f32 logits are an output too; a second derivative too */
static void wide_prog(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = tj_tree_v(in, "z"), zf = tj_v_dtype(z) == TJ_BF16 ? tj_cast(z, TJ_F32) : z, per, gz = NULL;
    (void)g;
    (void)u;
    per = tj_cross_entropy(zf, tj_tree_v(in, "labels"), "vocab", NULL);
    tj_tree_set_v(out, "per", per);
    if (!tj_grad(tj_mean(per, "pos batch"), 1, &z, &gz) && WIDE_D2) {
        tj_v h = NULL, w = tj_cos(tj_cast(tj_tree_v(in, "z"), TJ_F32)); /* a second derivative: d/dz of sum(dz w) */
        if (!tj_grad(tj_sum_all(tj_mul(tj_v_dtype(gz) == TJ_F32 ? gz : tj_cast(gz, TJ_F32), tj_stop_gradient(w))), 1, &z, &h)) tj_tree_set_v(out, "d2", h);
    }
    if (gz) tj_tree_set_v(out, "dz", gz);
    if (WIDE_KEEP) tj_tree_set_v(out, "zf", zf);
    if (WIDE_KEEP && tj_v_dtype(z) == TJ_BF16) { /* the gradient with respect to the f32 logits themselves */
        tj_v gf = NULL;
        if (!tj_grad(tj_mean(per, "pos batch"), 1, &zf, &gf)) tj_tree_set_v(out, "dzf", gf);
    }
}
static void widened(void) {
    enum { P = 5, V = 37, B = 3, N = P * V * B };
    static uint16_t zb[N], dzb[N];
    static float zf[N], dzf[N], per_b[P * B], per_f[P * B];
    int32_t lab[P * B];
    int i, keep;
    tjt_current = "widened bf16 logits";
    for (i = 0; i < N; i++) zb[i] = tj_f32_to_bf16((float)(8.0 * sin(0.37 * i + 0.1)));
    for (i = 0; i < N; i++) /* (pos, vocab, batch): a masked class in every row, row (pos 1, batch 2) large */
        if (i / B % V == 3) zb[i] = tj_f32_to_bf16(-1e30f);
        else if (i / (V * B) == 1 && i % B == 2) zb[i] = tj_f32_to_bf16(3e4f + (float)(i % 7));
    for (i = 0; i < N; i++) zf[i] = tj_bf16_to_f32(zb[i]);
    for (i = 0; i < P * B; i++) lab[i] = (i * 7 + 1) % V == 3 ? 4 : (i * 7 + 1) % V;
    for (keep = 0; keep < 3; keep++) { /* 2: the first program with a second derivative */
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *ib = tj_tree_new(ctx), *iff = tj_tree_new(ctx), *ob = tj_tree_new(ctx), *of = tj_tree_new(ctx);
        tj_prog *pb, *pf;
        WIDE_KEEP = keep == 1;
        WIDE_D2 = keep == 2;
        tj_tree_set_array(ib, "z", tj_array_new(ctx, TJ_BF16, "pos=5 vocab=37 batch=3", zb));
        tj_tree_set_array(ib, "labels", tj_array_new(ctx, TJ_I32, "pos=5 batch=3", lab));
        tj_tree_set_array(iff, "z", tj_array_new(ctx, TJ_F32, "pos=5 vocab=37 batch=3", zf));
        tj_tree_set_array(iff, "labels", tj_array_new(ctx, TJ_I32, "pos=5 batch=3", lab));
        pb = tj_jit(ctx, "wide bf16", wide_prog, NULL, ib, NULL);
        pf = tj_jit(ctx, "wide f32", wide_prog, NULL, iff, NULL);
        TJT_CHECK(pb && pf && !tj_run(pb, ib, ob) && !tj_run(pf, iff, of), "keep %d: %s", keep, tj_error(ctx));
        if (pb && pf && tj_tree_array(ob, "dz") && tj_tree_array(of, "dz")) {
            int casts = TJT_PROG_LINES(pb, "= cast ", "vocab=");
            if (keep < 2) TJT_CHECK(casts == keep, "keep %d: %d casts of the logits in the bf16 program, want %d", keep, casts, keep);
            tj_array_read(tj_tree_array(ob, "per"), TJ_F32, per_b);
            tj_array_read(tj_tree_array(of, "per"), TJ_F32, per_f);
            TJT_CHECK(tj_array_dtype(tj_tree_array(ob, "per")) == TJ_F32, "keep %d: the loss of widened bf16 logits is f32", keep);
            TJT_CHECK(!memcmp(per_b, per_f, sizeof per_b), "keep %d: per-row losses differ from the f32 logits' (row 0: %.9g vs %.9g)", keep, per_b[0], per_f[0]);
            tj_array_read(tj_tree_array(ob, "dz"), TJ_BF16, dzb);
            tj_array_read(tj_tree_array(of, "dz"), TJ_F32, dzf);
            for (i = 0; i < N && dzb[i] == tj_f32_to_bf16(dzf[i]); i++) continue;
            TJT_CHECK(i == N, "keep %d: dz element %d: %a, the f32 program's rounded to bf16: %a", keep, i, i < N ? tj_bf16_to_f32(dzb[i]) : 0.0,
                      i < N ? tj_bf16_to_f32(tj_f32_to_bf16(dzf[i])) : 0.0);
            if (keep == 1) { /* d loss / d (the f32 logits): the f32 program's gradient, bit for bit */
                static float gf[N];
                TJT_CHECK(tj_tree_array(ob, "dzf") != NULL, "keep 1: no gradient with respect to the f32 logits: %s", tj_error(ctx));
                if (tj_tree_array(ob, "dzf")) {
                    tj_array_read(tj_tree_array(ob, "dzf"), TJ_F32, gf);
                    TJT_CHECK(!memcmp(gf, dzf, sizeof gf), "keep 1: the gradient with respect to the f32 logits differs from the f32 program's (element 0: %g vs %g)", gf[0], dzf[0]);
                }
            }
            /* the second derivative within bf16's rounding of the largest (the f32 program's in f32 throughout) */
            if (keep == 2) TJT_CHECK(tj_tree_array(ob, "d2") && tj_tree_array(of, "d2"), "second derivatives: %s", tj_error(ctx));
            if (keep == 2 && tj_tree_array(ob, "d2") && tj_tree_array(of, "d2")) {
                double big = 0, worst = 0;
                tj_array_read(tj_tree_array(ob, "d2"), TJ_BF16, dzb);
                tj_array_read(tj_tree_array(of, "d2"), TJ_F32, dzf);
                for (i = 0; i < N; i++) big = fabs(dzf[i]) > big ? fabs(dzf[i]) : big;
                for (i = 0; i < N; i++) worst = fabs(tj_bf16_to_f32(dzb[i]) - dzf[i]) > worst ? fabs(tj_bf16_to_f32(dzb[i]) - dzf[i]) : worst;
                TJT_CHECK(big > 0 && worst <= 1e-2 * big, "keep %d: second derivatives differ by %g of the largest %g", keep, worst, big);
            }
        }
        tj_prog_free(pb);
        tj_prog_free(pf);
        tj_tree_free(ib);
        tj_tree_free(iff);
        tj_tree_free(ob);
        tj_tree_free(of);
        tj_ctx_free(ctx);
    }
}

/* tj_cross_entropy_padded against tj_cross_entropy of the logits sliced
   to its classes: per-row losses bit for bit, and the gradient bit for bit
   (the sliced program's is 0 past the slice too), in f32, f64 and bf16
   widened to f32 (the GPT-2 demo's head); rows of 600 classes, longer than
   the kernels' chunk, 333 of them real (the edge inside a chunk), the
   class axis in the middle; then its errors: classes outside [1, 600], and
   a label past the classes at run time */
static tj_dtype PAD_DT;
static int PAD_SLICE, PAD_CLASSES = 333;
/* a and b hold the same bits (shapes, dtypes and values) */
static int same_bits(tj_array *a, tj_array *b) {
    int64_t n = tj_array_numel(a);
    size_t sz = (size_t)n * tj_dtype_size(tj_array_dtype(a));
    char *x = (char *)malloc(sz + 1), *y = (char *)malloc(sz + 1);
    int ok = x && y && n == tj_array_numel(b) && tj_array_dtype(a) == tj_array_dtype(b) && !tj_array_read(a, tj_array_dtype(a), x) &&
             !tj_array_read(b, tj_array_dtype(a), y) && !memcmp(x, y, sz);
    free(x);
    free(y);
    return ok;
}
static void pad_prog(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = tj_tree_v(in, "z"), zz = PAD_DT == TJ_BF16 ? tj_cast(z, TJ_F32) : z, lab = tj_tree_v(in, "labels"), per, gz = NULL;
    (void)g;
    (void)u;
    per = PAD_SLICE ? tj_cross_entropy(tj_slice(zz, "vocab", 0, PAD_CLASSES), lab, "vocab", NULL) : tj_cross_entropy_padded(zz, lab, "vocab", NULL, PAD_CLASSES);
    tj_tree_set_v(out, "per", per);
    if (!tj_grad(tj_mean(per, "pos batch"), 1, &z, &gz)) tj_tree_set_v(out, "dz", gz);
}
static void padded(void) {
    static const tj_dtype dts[3] = {TJ_F32, TJ_F64, TJ_BF16};
    int32_t lab[6] = {0, 332, 331, 17, 100, 256};
    int di;
    tjt_current = "cross_entropy_padded";
    for (di = 0; di < 3; di++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = tj_tree_new(ctx), *o[2];
        tj_prog *p[2];
        int k;
        PAD_DT = dts[di];
        tj_tree_set_array(in, "z", tjt_rand(ctx, PAD_DT, "pos=3 vocab=600 batch=2", 31 + di, -6, 6));
        tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "pos=3 batch=2", lab));
        for (k = 0; k < 2; k++) {
            PAD_SLICE = k;
            o[k] = tj_tree_new(ctx);
            p[k] = tj_jit(ctx, k ? "sliced" : "padded", pad_prog, NULL, in, NULL);
            TJT_CHECK(p[k] && !tj_run(p[k], in, o[k]), "%s, %s: %s", tj_dtype_name(PAD_DT), k ? "sliced" : "padded", tj_error(ctx));
        }
        if (p[0] && p[1] && tj_tree_array(o[0], "dz") && tj_tree_array(o[1], "dz")) {
            TJT_CHECK(same_bits(tj_tree_array(o[0], "per"), tj_tree_array(o[1], "per")), "%s: per-row losses differ from the sliced logits'", tj_dtype_name(PAD_DT));
            TJT_CHECK(same_bits(tj_tree_array(o[0], "dz"), tj_tree_array(o[1], "dz")), "%s: the gradient differs from the sliced logits'", tj_dtype_name(PAD_DT));
            TJT_CHECK(TJT_PROG_LINES(p[0], "= slice") + TJT_PROG_LINES(p[0], "= select") + TJT_PROG_LINES(p[0], "= pad") == 0 &&
                          TJT_PROG_LINES(p[0], "cross_entropy(", "over the first 333 classes") == 1,
                      "%s: the padded program slices, pads or selects, or its op does not say its classes", tj_dtype_name(PAD_DT));
        }
        for (k = 0; k < 2; k++) {
            tj_prog_free(p[k]);
            tj_tree_free(o[k]);
        }
        if (di == 0) { /* the errors */
            tj_tree *out = tj_tree_new(ctx);
            int bad[2] = {0, 601}, b;
            PAD_SLICE = 0;
            for (b = 0; b < 2; b++) {
                tj_prog *q;
                PAD_CLASSES = bad[b];
                q = tj_jit(ctx, "bad classes", pad_prog, NULL, in, NULL);
                TJT_CHECK(!q, "classes %d was taken", bad[b]);
                TJT_ERROR_HAS(ctx, "cross_entropy_padded", "must be in [1, 600]", "'vocab'", "test_xent_split.c");
                tj_prog_free(q);
            }
            PAD_CLASSES = 332; /* label 332 is past them */
            p[0] = tj_jit(ctx, "label past", pad_prog, NULL, in, NULL);
            TJT_CHECK(p[0] && tj_run(p[0], in, out) != TJ_OK, "a label of 332 for 332 classes ran");
            TJT_ERROR_HAS(ctx, "label 332", "out of range [0, 332)");
            tj_prog_free(p[0]);
            PAD_CLASSES = 333;
            tj_tree_free(out);
        }
        tj_tree_free(in);
        tj_ctx_free(ctx);
    }
}

int main(int argc, char **argv) {
    const tjt_mesh_case *cs = tjt_vocab_meshes;
    int Vs[] = {16, 64, 128};
    int c0 = argc > 1 ? atoi(argv[1]) : 0, c1 = argc > 1 ? c0 + 1 : 15, vi, m;
    XP = &SPLIT;
    POL = tj_nothing_saveable();
    for (CASE = c0; CASE < c1; CASE++)
        for (vi = 0; vi < 3; vi++) {
            tjt_outs ref;
            int V = Vs[vi];
            tjt_current = "against one device";
            if (!xp_one_device(&ref, V)) continue;
            for (m = 0; m < TJT_NVOCAB_MESHES; m++) {
                char what[200];
                if (getenv("RV_M") && atoi(getenv("RV_M")) != m) continue;
                /* TJ_TEST_QUICK: each mesh with one of the three class counts
                   (every case still on every mesh, and with each) */
                if (tjt_quick() && (m + CASE) % 3 != vi) continue;
                snprintf(what, sizeof what, "case %d V=%d %s [%s]", CASE, V, cs[m].mesh, cs[m].rules);
                xp_on_mesh(&ref, &cs[m], V, CASE <= 1 && (m == 0 || m == 3 || m == 5), what, tjt_outs_compare);
            }
            tjt_outs_free(&ref);
        }
    if (argc <= 1) {
        fd_checks();
        bad_label();
        odd_logits();
        special_rows();
        widened();
        padded();
    }
    return tjt_finish();
}
