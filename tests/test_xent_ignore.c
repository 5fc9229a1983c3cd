/* test_xent_ignore: tj_cross_entropy_ignore (PyTorch's ignore_index).
   1. PyTorch's numbers (tests/xent_ignore_golden.h, written by
      tools/xent_ignore_golden.py): F.cross_entropy(ignore_index=...,
      reduction='none' and 'mean') and the gradients of the mean and of a
      weighted sum of the per-row losses, for ignore_index -100, 0 (a valid
      class), 7 (= classes), none ignored and all ignored (NaN mean, zero
      gradient), in f64, f32 and bf16; ignored rows exactly 0 (losses and
      gradients), also when their logits are NaN or infinite (there
      PyTorch's gradient is NaN; tinyjax's is 0).
   2. finite differences in f64 (first and second order).
   3. sharded equals one device: 10 programs (mean and gradient, per-row
      losses, a head with grad of grad in f32 and f64, bf16, in a scan, in a
      checkpoint, a mean over one axis with a wholly ignored row, every row
      ignored, NaN and inf logits in ignored rows) on the 14 vocab-parallel
      meshes and 3 data-parallel ones, with ignore_index -100 and 0; the scan
      and the checkpoint under 10 remat policies (every kind; with
      TJ_TEST_QUICK each policy on half of its meshes); the
      vocab-parallel form kept (cross_entropy_part, no collective of the
      logits' size).
   4. inside tj_shard_map (checked and not) against one device.
   5. errors: other labels out of range (run time, naming the op and the
      caller's line), bad operands (build time, naming cross_entropy_ignore).
   usage: test_xent_ignore */
#include "../tinyjax.h"
#include "tj_test.h"
#include "xent_ignore_golden.h"
#include "xent_progs.h" /* the programs and the runner shared with test_xent_split.c */

static int II;

static tj_v xi(tj_v z, tj_v lab, const char *mean) { return tj_cross_entropy_ignore(z, lab, "vocab", mean, II); }

/* ---- 1. PyTorch's numbers ---- */
static tj_dtype G_DT;
static int G_POISON;
static void golden_prog(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = tj_tree_v(in, "z"), lab = tj_tree_v(in, "labels"), per, mean, gm, gs;
    (void)g; (void)u;
    per = xi(z, lab, NULL);
    mean = xi(z, lab, "batch pos");
    tj_tree_set_v(out, "none", per);
    tj_tree_set_v(out, "mean", mean);
    if (tj_grad(mean, 1, &z, &gm) || tj_grad(tj_sum_all(tj_mul(per, tj_tree_v(in, "rw"))), 1, &z, &gs)) return;
    tj_tree_set_v(out, "gmean", gm);
    tj_tree_set_v(out, "gsum", gs);
}
/* got against want: NaN for NaN, else within tol of max(1, |want|'s largest) */
static void near(const char *what, const char *name, const double *want, const double *got, int n, double tol) {
    double scale = 1, worst = 0;
    int i, at = 0;
    for (i = 0; i < n; i++) if (isfinite(want[i]) && fabs(want[i]) > scale) scale = fabs(want[i]);
    for (i = 0; i < n; i++) {
        double d = isnan(want[i]) || isnan(got[i]) ? (isnan(want[i]) && isnan(got[i]) ? 0 : INFINITY) : fabs(want[i] - got[i]) / scale;
        if (d > worst) worst = d, at = i;
    }
    TJT_CHECK(worst <= tol, "%s: %s differs from PyTorch by %.3g at %d (%.17g vs %.17g)", what, name, worst, at, want[at], got[at]);
}
static void golden(void) {
    tj_dtype dts[3] = {TJ_F64, TJ_F32, TJ_BF16};
    double tols[3] = {1e-13, 2e-6, 3e-2}, worst[3] = {0, 0, 0};
    int c, d, i, j;
    tjt_current = "PyTorch's numbers";
    for (G_POISON = 0; G_POISON < 2; G_POISON++)
        for (c = 0; c < XG_NCASES; c++)
            for (d = 0; d < 3; d++) {
                const xg_case *x = &xg_cases[c];
                tj_ctx *ctx = tj_ctx_new();
                tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
                tj_prog *p;
                double zh[XG_B * XG_P * XG_V], got[4][XG_B * XG_P * XG_V];
                char hz[8 * XG_B * XG_P * XG_V], hw[8 * XG_B * XG_P], what[128];
                const char *nm[4] = {"none", "mean", "gmean", "gsum"};
                int len[4] = {XG_B * XG_P, 1, XG_B * XG_P * XG_V, XG_B * XG_P * XG_V}, zeros = 1;
                G_DT = dts[d];
                II = x->ignore_index;
                snprintf(what, sizeof what, "%s, %s%s", x->name, tj_dtype_name(G_DT), G_POISON ? ", NaN and inf logits in ignored rows" : "");
                memcpy(zh, xg_logits, sizeof zh);
                for (i = 0; G_POISON && i < XG_B * XG_P; i++) /* an ignored row: NaN, +inf, -inf, or all of them */
                    if (x->labels[i] == II) {
                        zh[i * XG_V + i % XG_V] = NAN;
                        zh[i * XG_V + (i + 1) % XG_V] = i % 2 ? INFINITY : -INFINITY;
                        if (i % 3 == 0) for (j = 0; j < XG_V; j++) zh[i * XG_V + j] = j % 2 ? INFINITY : NAN;
                    }
                for (i = 0; i < XG_B * XG_P * XG_V; i++) tjt_st(hz, G_DT, i, zh[i]);
                for (i = 0; i < XG_B * XG_P; i++) tjt_st(hw, G_DT, i, xg_rw[i]);
                tj_tree_set_array(in, "z", tj_array_new(ctx, G_DT, "batch=3 pos=4 vocab=7", hz));
                tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=3 pos=4", x->labels));
                tj_tree_set_array(in, "rw", tj_array_new(ctx, G_DT, "batch=3 pos=4", hw));
                p = tj_jit(ctx, "golden", golden_prog, NULL, in, NULL);
                if (!p || tj_run(p, in, out) != TJ_OK) {
                    TJT_CHECK(0, "%s: %s", what, tj_error(ctx));
                } else {
                    const double *want[4] = {x->none, &x->mean, x->gmean, x->gsum};
                    for (i = 0; i < 4; i++) {
                        tj_array_read(tj_tree_array(out, nm[i]), TJ_F64, got[i]);
                        near(what, nm[i], want[i], got[i], len[i], tols[d]);
                        for (j = 0; j < len[i]; j++) {
                            double s = 1;
                            if (isfinite(want[i][j]) && fabs(want[i][j]) > s) s = fabs(want[i][j]);
                            if (fabs(got[i][j] - want[i][j]) / s > worst[d]) worst[d] = fabs(got[i][j] - want[i][j]) / s;
                        }
                    }
                    for (i = 0; i < XG_B * XG_P; i++) /* ignored rows: exactly 0, gradients too */
                        if (x->labels[i] == II) {
                            zeros &= got[0][i] == 0 && !signbit(got[0][i]);
                            for (j = 0; j < XG_V; j++) zeros &= got[2][i * XG_V + j] == 0 && got[3][i * XG_V + j] == 0;
                        }
                    TJT_CHECK(zeros, "%s: an ignored row's loss or gradient is not exactly 0", what);
                    if (!strcmp(x->name, "all_ignored")) TJT_CHECK(isnan(got[1][0]), "%s: the mean of no rows is %g, want NaN", what, got[1][0]);
                }
                tj_prog_free(p);
                tj_tree_free(in);
                tj_tree_free(out);
                tj_ctx_free(ctx);
            }
    printf("against PyTorch (relative to max(1, |value|)): f64 %.3g, f32 %.3g, bf16 %.3g\n", worst[0], worst[1], worst[2]);
}

/* ---- 2. finite differences (f64); FD_SPLIT: inputs replicated (finite
   differences move every copy), the program splits the logits ---- */
static int FD_SPLIT;
static tj_v fd_z(const tj_tree *in) {
    tj_v z = tj_tree_v(in, "z");
    return FD_SPLIT ? tj_shard_by_rules(z, "vocab:model pos:data") : z;
}
static void fd_mean(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = fd_z(in);
    (void)g; (void)u;
    tj_tree_set_v(out, "loss", xi(tj_mul(z, tj_tanh(z)), tj_tree_v(in, "labels"), "batch pos"));
}
static void fd_wsum(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = fd_z(in);
    (void)g; (void)u;
    tj_tree_set_v(out, "loss", tj_sum_all(tj_mul(xi(tj_mul(z, tj_tanh(z)), tj_tree_v(in, "labels"), NULL), tj_tree_v(in, "rw"))));
}
static void fd_second(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z0 = tj_tree_v(in, "z"), z = fd_z(in), gz;
    (void)g; (void)u;
    if (tj_grad(tj_sum_all(xi(tj_mul(z, tj_tanh(z)), tj_tree_v(in, "labels"), "pos")), 1, &z0, &gz)) return;
    tj_tree_set_v(out, "loss", tj_sum_all(tj_mul(tj_mul(gz, gz), tj_tree_v(in, "wz"))));
}
static void fd_checks(void) {
    int c, m;
    tjt_current = "finite differences";
    for (c = 0; c < 3; c++) /* -100, 0, 7 */
        for (m = 0; m < 2; m++) { /* one device; the class axis and the rows split */
            const xg_case *x = &xg_cases[c];
            tj_ctx *ctx = tj_ctx_new();
            tj_tree *in = tj_tree_new(ctx);
            char what[96];
            II = x->ignore_index;
            if (m) { /* 7 classes: one per device */
                tj_set_devices(ctx, 14);
                tj_set_mesh(ctx, "data=2 model=7");
            }
            tj_tree_set_array(in, "z", tj_array_new(ctx, TJ_F64, "batch=3 pos=4 vocab=7", xg_logits));
            tj_tree_set_array(in, "rw", tj_array_new(ctx, TJ_F64, "batch=3 pos=4", xg_rw));
            tj_tree_set_array(in, "wz", tjt_rand(ctx, TJ_F64, "batch=3 pos=4 vocab=7", 5, -1, 1));
            tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=3 pos=4", x->labels));
            snprintf(what, sizeof what, "%s%s: mean", x->name, m ? " (data=2 model=7, z split inside)" : "");
            FD_SPLIT = m;
            tjt_gradcheck(__FILE__, __LINE__, ctx, what, fd_mean, NULL, in, "z", 1e-5);
            snprintf(what, sizeof what, "%s%s: weighted sum", x->name, m ? " (data=2 model=7)" : "");
            tjt_gradcheck(__FILE__, __LINE__, ctx, what, fd_wsum, NULL, in, "z", 1e-5);
            snprintf(what, sizeof what, "%s%s: grad of grad", x->name, m ? " (data=2 model=7)" : "");
            tjt_gradcheck(__FILE__, __LINE__, ctx, what, fd_second, NULL, in, "z", 1e-5);
            tj_tree_free(in);
            tj_ctx_free(ctx);
        }
}

/* ---- 3. sharded equals one device ---- */
/* the programs: 0 the mean loss and its gradient; 1 per-row losses,
   weighted; 2 a head (logits = h . w) with grad of grad, 3 the same in f64;
   4 bf16 logits; 5 inside a scan; 6 inside a checkpoint: the mean over
   pos, per batch row (xent_progs.h, the hidden state named h); and own() */
static int kind(int c) {
    static const int k[10] = {XP_MEAN, XP_PER_ROW, XP_HEAD, XP_HEAD_F64, XP_BF16, XP_SCAN, XP_CHECKPOINT, XP_OWN, XP_OWN, XP_OWN};
    return c >= 0 && c < (int)(sizeof k / sizeof k[0]) ? k[c] : XP_OWN;
}
static void own(tj_graph *g, const tj_tree *in, tj_tree *out, tj_v z, tj_v lab, tj_v h, tj_v w) {
    tj_v wr[1], per;
    (void)g; (void)h; (void)w;
    switch (CASE) {
    case 7: /* the mean over pos; batch row 1 wholly ignored (NaN there, a zero gradient) */
        per = xi(z, lab, "pos");
        tj_tree_set_v(out, "per", per);
        wr[0] = z;
        xp_grads(out, tj_sum_all(tj_mul(per, tj_tree_v(in, "rb"))), 1, wr);
        break;
    case 8: /* every row ignored: NaN, a zero gradient; per-row losses 0 */
        tj_tree_set_v(out, "per", xi(z, lab, NULL));
        wr[0] = z;
        xp_grads(out, xi(z, lab, "pos batch"), 1, wr);
        break;
    case 9: /* NaN and infinities in ignored rows' logits */
        per = xi(z, lab, NULL);
        tj_tree_set_v(out, "per", per);
        tj_tree_set_v(out, "mean", xi(z, lab, "batch pos"));
        wr[0] = z;
        xp_grads(out, tj_add(xi(z, lab, "batch pos"), tj_sum_all(tj_mul(per, tj_tree_v(in, "rw")))), 1, wr);
        break;
    }
}
#define NCASES 10
static void labels(int32_t lab[32], int V) { /* every third row ignored; case 7: batch row 1 too; case 8: all */
    int i;
    (void)V;
    for (i = 0; i < 32; i++)
        if (i % 3 == 1 || (CASE == 7 && i / 8 == 1) || CASE == 8) lab[i] = II;
}
static void inputs(tj_ctx *ctx, tj_tree *in, const int32_t lab[32], int V, tj_dtype dt) {
    int i;
    tj_tree_set_array(in, "rb", tjt_rand(ctx, TJ_F32, "batch=4", 9, -1, 1));
    if (CASE == 9) { /* poison the ignored rows */
        double *zh = (double *)malloc(sizeof(double) * 32 * (size_t)V);
        char *host = (char *)malloc(8 * 32 * (size_t)V), shp[64];
        tj_array_read(tj_tree_array(in, "z"), TJ_F64, zh);
        for (i = 0; i < 32; i++)
            if (lab[i] == II) {
                zh[i * V + i % V] = NAN;
                zh[i * V + (i * 7 + 3) % V] = i % 2 ? INFINITY : -INFINITY;
            }
        for (i = 0; i < 32 * V; i++) tjt_st(host, dt, i, zh[i]);
        snprintf(shp, sizeof shp, "batch=4 pos=8 vocab=%d", V);
        tj_tree_set_array(in, "z", tj_array_new(ctx, dt, shp, host));
        free(zh);
        free(host);
    }
}
static const xp_test IGNORE = {xi, kind, own, labels, inputs, "h", "pos"};

/* one device's results for the cases whose values are known: all ignored
   (NaN mean, zero gradient, zero losses), poisoned rows (finite results,
   zeros in the ignored rows) */
static void known(const tjt_outs *o, int V) {
    int i;
    int64_t j;
    if (CASE == 8) {
        for (i = 0; i < o->n; i++)
            for (j = 0; j < o->len[i]; j++) {
                int isloss = !strcmp(o->name[i], "loss");
                TJT_CHECK(isloss ? isnan(o->v[i][j]) : o->v[i][j] == 0, "all ignored, V=%d: %s[%lld] = %g", V, o->name[i], (long long)j, o->v[i][j]);
            }
    }
    if (CASE == 9) {
        int fin = 1;
        for (i = 0; i < o->n; i++)
            for (j = 0; j < o->len[i]; j++) fin &= isfinite(o->v[i][j]);
        TJT_CHECK(fin, "NaN logits in ignored rows, V=%d: a result is not finite", V);
        for (i = 0; i < o->n; i++) {
            int zero = 1;
            if (!strcmp(o->name[i], "per")) for (j = 1; j < 32; j += 3) zero &= o->v[i][j] == 0;
            if (!strcmp(o->name[i], "g0")) for (j = 1; j < 32; j += 3) { int64_t c; for (c = 0; c < V; c++) zero &= o->v[i][j * V + c] == 0; }
            TJT_CHECK(zero, "NaN logits in ignored rows, V=%d: %s not 0 in an ignored row", V, o->name[i]);
        }
    }
}
static const tjt_mesh_case dp_meshes[] = {
    {2, "data=2", "batch:data"},
    {4, "data=4", "batch:data"},
    {8, "data=2 seq=4", "batch:data pos:seq"},
};
#define NPOL 10
static tj_policy POL_A, POL_B; /* (save_from_both points to them until tj_jit returns) */
static tj_decision pol_fn(const char *op, const char *name, const char *shape, void *user) {
    (void)name; (void)shape; (void)user;
    return !strcmp(op, "select") ? TJ_OFFLOAD : !strcmp(op, "dot") ? TJ_SAVE : TJ_RECOMPUTE;
}
static void against_one_device(void) {
    const char *polname[NPOL] = {"nothing_saveable", "everything_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable", "save_only_these_names(h)",
                                 "offload_dot_with_no_batch_dims", "save_any_names_but_these(h)", "save_and_offload_only_these_names(-, h)",
                                 "save_from_both(dots, names h)", "policy_from_fn(offload selects, save dots)"};
    int Vs[2] = {16, 40}, IIs[2] = {-100, 0}, vi, m, pol;
    int nm = TJT_NVOCAB_MESHES + (int)(sizeof dp_meshes / sizeof dp_meshes[0]);
    tjt_current = "sharded against one device";
    for (CASE = 0; CASE < NCASES; CASE++)
        for (pol = 0; pol < (CASE == 5 || CASE == 6 ? NPOL : 1); pol++)
            for (vi = 0; vi < 2; vi++) {
                tjt_outs ref;
                int V = Vs[vi];
                tj_policy pols[NPOL];
                pols[0] = tj_nothing_saveable();
                pols[1] = tj_everything_saveable();
                pols[2] = tj_dots_saveable();
                pols[3] = tj_dots_with_no_batch_dims_saveable();
                pols[4] = tj_save_only_these_names("h");
                pols[5] = tj_offload_dot_with_no_batch_dims();
                pols[6] = tj_save_any_names_but_these("h");
                pols[7] = tj_save_and_offload_only_these_names("", "h");
                POL_A = tj_dots_saveable();
                POL_B = tj_save_only_these_names("h");
                pols[8] = tj_save_from_both(&POL_A, &POL_B);
                pols[9] = tj_policy_from_fn(pol_fn, NULL);
                POL = pols[pol];
                II = IIs[vi];
                if (pol > 0 && vi > 0) continue; /* the policies: one class count */
                if (!xp_one_device(&ref, V)) continue;
                known(&ref, V);
                for (m = 0; m < nm; m++) {
                    const tjt_mesh_case *mc = m < TJT_NVOCAB_MESHES ? &tjt_vocab_meshes[m] : &dp_meshes[m - TJT_NVOCAB_MESHES];
                    char what[256];
                    if (pol > 0 && m % 3) continue; /* the policies: every third mesh */
                    /* TJ_TEST_QUICK: each policy on every other one of its
                       meshes (each of those meshes under half the policies) */
                    if (tjt_quick() && pol > 0 && (m / 3 + pol) % 2) continue;
                    snprintf(what, sizeof what, "case %d V=%d ignore_index=%d %s [%s]%s%s", CASE, V, II, mc->mesh, mc->rules, pol ? " " : "", pol ? polname[pol] : "");
                    xp_on_mesh(&ref, mc, V, (CASE <= 1 || CASE >= 7) && (m == 0 || m == 3 || m == 5), what, xp_compare);
                }
                tjt_outs_free(&ref);
            }
}

/* ---- 4. inside shard_map: rows split over data, each device its own block ---- */
static void smap_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = xi(in[0], in[1], NULL);
    out[1] = xi(in[0], in[1], "pos");
}
static int SM_CHECK, SM_MESH;
static void smap_prog(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v z = tj_tree_v(in, "z"), lab = tj_tree_v(in, "labels"), o[2], gz;
    const char *is[2] = {"batch:data", "batch:data"}, *os[2] = {"batch:data", "batch:data"};
    tj_v ins[2];
    (void)g; (void)u;
    ins[0] = tj_mul(z, z);
    ins[1] = lab;
    if (SM_MESH) {
        if (tj_shard_map(smap_body, NULL, 2, ins, is, 2, o, os, SM_CHECK)) return;
    } else smap_body(g, ins, o, NULL);
    tj_tree_set_v(out, "per", o[0]);
    tj_tree_set_v(out, "pos_mean", o[1]);
    if (tj_grad(tj_add(tj_sum_all(tj_mul(o[0], tj_tree_v(in, "rw"))), tj_sum_all(tj_mul(o[1], tj_tree_v(in, "rb")))), 1, &z, &gz)) return;
    tj_tree_set_v(out, "gz", gz);
}
static int smap_run(int ndev, tjt_outs *o) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx);
    int32_t lab[32];
    int i;
    memset(o, 0, sizeof *o);
    for (i = 0; i < 32; i++) lab[i] = i % 3 == 1 || i / 8 == 2 ? II : (i * 5 + 2) % 16;
    tj_set_devices(ctx, ndev);
    tj_set_mesh(ctx, ndev > 1 ? "data=2 model=2" : "data=1");
    SM_MESH = ndev > 1;
    tj_tree_set_array(in, "z", tjt_rand(ctx, TJ_F64, "batch=4 pos=8 vocab=16", 7, -2, 2));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", lab));
    tj_tree_set_array(in, "rw", tjt_rand(ctx, TJ_F64, "batch=4 pos=8", 8, -1, 1));
    tj_tree_set_array(in, "rb", tjt_rand(ctx, TJ_F64, "batch=4", 9, -1, 1));
    return xp_jit_run(ctx, in, "smap", smap_prog, o, "shard_map", ndev);
}
static void in_shard_map(void) {
    tjt_outs a, b;
    tjt_current = "inside shard_map";
    II = -100;
    if (!smap_run(1, &a)) { TJT_CHECK(0, "one device failed"); return; }
    for (SM_CHECK = 0; SM_CHECK < 2; SM_CHECK++) {
        char what[64];
        snprintf(what, sizeof what, "shard_map (check %d) on a 2x2 mesh", SM_CHECK);
        if (!smap_run(4, &b)) { TJT_CHECK(0, "%s failed", what); continue; }
        xp_compare(what, &a, &b, 1e-12);
        tjt_outs_free(&b);
    }
    tjt_outs_free(&a);
}

/* ---- 5. errors ---- */
static int BAD_AT;
static void bad_prog(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    BAD_AT = __LINE__ + 1;
    tj_tree_set_v(out, "loss", tj_cross_entropy_ignore(tj_tree_v(in, "z"), tj_tree_v(in, "labels"), "vocab", "batch pos", II));
}
static void bad_label(int ndev, int ii, int badlab) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    int32_t lab[32];
    int i;
    tj_prog *p;
    char at[64], want[64];
    tj_set_devices(ctx, ndev);
    if (ndev > 1) tj_set_mesh(ctx, "model=2");
    II = ii;
    for (i = 0; i < 32; i++) lab[i] = i == 9 ? badlab : i % 2 ? ii : i % 16;
    tj_tree_set_array(in, "z", tjt_rand(ctx, TJ_F32, "batch=4 pos=8 vocab=16", 21, -1, 1));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", lab));
    if (ndev > 1) tj_filter_shard(in, "vocab:model");
    p = tj_jit(ctx, "bad", bad_prog, NULL, in, NULL);
    TJT_CHECK(p && tj_run(p, in, out) != TJ_OK, "a label of %d (ignore_index %d) for 16 classes ran on %d devices", badlab, ii, ndev);
    snprintf(at, sizeof at, "test_xent_ignore.c:%d", BAD_AT);
    snprintf(want, sizeof want, "label %d", badlab);
    TJT_ERROR_HAS(ctx, "cross_entropy", want, "out of range [0, 16)", at);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
}
static void bad_ops(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v x = tj_fill(g, TJ_F32, "a=4 b=6", 1.0), i = tj_fill(g, TJ_I32, "a=4", 0), xf = tj_fill(g, TJ_F32, "a=4", 0);
    (void)in; (void)u;
    II = -100;
    TJT_CHECK(tj_cross_entropy_ignore(x, i, "b", "a", -100) != NULL, "a good call failed: %s", tj_error(c));
    TJT_CHECK(tj_cross_entropy_ignore(x, i, "b", "a", TJ_IGNORE_INDEX) != NULL, "TJ_IGNORE_INDEX: %s", tj_error(c));
    TJT_CHECK(tj_cross_entropy_ignore(NULL, i, "b", "a", -100) == NULL, "NULL logits accepted");
    TJT_ERROR_HAS(c, "cross_entropy_ignore", "NULL");
    tj_clear_error(c);
    TJT_CHECK(tj_cross_entropy_ignore(x, xf, "b", "a", -100) == NULL, "f32 labels accepted");
    TJT_ERROR_HAS(c, "cross_entropy_ignore", "i32 labels", "f32[a=4]");
    tj_clear_error(c);
    TJT_CHECK(tj_cross_entropy_ignore(tj_cast(x, TJ_I32), i, "b", "a", -100) == NULL, "i32 logits accepted");
    TJT_ERROR_HAS(c, "cross_entropy_ignore", "float logits");
    tj_clear_error(c);
    TJT_CHECK(tj_cross_entropy_ignore(x, i, "c", "a", -100) == NULL, "a missing class axis accepted");
    TJT_ERROR_HAS(c, "cross_entropy_ignore", "'c'");
    tj_clear_error(c);
    TJT_CHECK(tj_cross_entropy_ignore(x, tj_fill(g, TJ_I32, "b=6", 0), "b", "a", -100) == NULL, "labels of the wrong axes accepted");
    TJT_ERROR_HAS(c, "cross_entropy_ignore", "labels", "must have the axes of logits");
    tj_clear_error(c);
    TJT_CHECK(tj_cross_entropy_ignore(x, i, "b", "b", -100) == NULL, "the class axis as a mean axis accepted");
    TJT_ERROR_HAS(c, "cross_entropy_ignore mean_axes", "'b'");
    tj_clear_error(c);
    tj_tree_set_v(out, "y", tj_cross_entropy_ignore(x, i, "b", NULL, 0));
}
static void errors(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = tj_tree_new(c);
    tj_prog *p;
    tjt_current = "errors";
    bad_label(1, -100, 16);
    bad_label(1, -100, -1);
    bad_label(1, 0, -100); /* -100 is an ordinary label when ignore_index is 0 */
    bad_label(2, -100, 16);
    bad_label(2, 3, -100);
    tj_tree_set_array(in, "x", tj_zeros(c, TJ_F32, "a=2"));
    p = tj_jit(c, "bad operands", bad_ops, NULL, in, NULL);
    TJT_CHECK(p != NULL, "the program of bad operands failed: %s", tj_error(c));
    tj_prog_free(p);
    tj_tree_free(in);
    tj_ctx_free(c);
}

int main(void) {
    XP = &IGNORE;
    golden();
    fd_checks();
    in_shard_map();
    errors();
    against_one_device();
    return tjt_finish();
}
