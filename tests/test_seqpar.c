/* Sequence parallelism with a rematerialized all-gather (jax-ml/jax#25010).
 *
 * x (batch, pos, embed) sharded "batch:data pos:tensor" on 8 devices; inside a
 * remat region: layer norm -> checkpoint_name "scattered" -> constraint
 * "batch:data" (all-gathers pos over tensor) -> causal attention. With
 * save_only_these_names("scattered") the backward pass must re-run the
 * all-gather from the saved scattered shard and must not save its output;
 * with a policy that saves all-gather outputs, no all-gather runs backward.
 * Gradients: both policies equal each other and the single-device program. */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"

enum { B = 2, P = 8, E = 8, H = 4 };

typedef struct {
    const tj_policy *policy;
    int sharded;       /* 0: one device, no constraints                         */
    int explicit_scan; /* 1: the region as a length-1 tj_scan with inputs as xs */
} cfg;

static void region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const cfg *c = (const cfg *)u;
    tj_v h, q, k, v, s, a;
    (void)g;
    h = tj_checkpoint_name(tj_mul(tj_layer_norm(in[0], "embed", 1e-5), in[1]), "scattered");
    if (c->sharded) h = tj_with_sharding_constraint(h, "batch:data");
    q = tj_dot(h, in[2], "embed");
    k = tj_rename(tj_dot(h, in[3], "embed"), "pos", "kpos");
    v = tj_rename(tj_dot(h, in[4], "embed"), "pos", "kpos");
    s = tj_muls(tj_dot(q, k, "hd"), 0.5);
    a = tj_softmax(tj_causal_mask(s, "pos", "kpos", -1e9), "kpos");
    out[0] = tj_dot(a, v, "kpos");
}
static void region_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    (void)carry; (void)carry_out;
    region(g, x, y, u);
}
static const char *leaves[5] = {"x", "ln_g", "wq", "wk", "wv"};
static void step(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    cfg *c = (cfg *)u;
    tj_v r[5], y = NULL, gr[5], loss;
    char nm[16];
    int i;
    (void)g;
    for (i = 0; i < 5; i++) r[i] = tj_tree_v(in, leaves[i]);
    if (c->sharded) r[0] = tj_with_sharding_constraint(r[0], "batch:data pos:tensor");
    if (!c->explicit_scan) tj_checkpoint(region, c, 5, r, 1, &y, c->policy);
    else {
        tj_v xs[5], ys = NULL;
        char shp[160];
        for (i = 0; i < 5; i++) {
            int k;
            snprintf(shp, sizeof shp, "one=1");
            for (k = 0; k < tj_v_rank(r[i]); k++) {
                size_t m = strlen(shp);
                snprintf(shp + m, sizeof shp - m, " %s=%lld", tj_v_axis(r[i], k), (long long)tj_v_dim(r[i], tj_v_axis(r[i], k)));
            }
            xs[i] = tj_broadcast(r[i], shp);
        }
        tj_scan(region_body, c, "one", 0, NULL, 5, xs, 1, NULL, &ys, c->policy);
        y = tj_sum(ys, "one");
    }
    loss = tj_mean(tj_mul(y, y), "batch pos hd");
    tj_grad(loss, 5, r, gr);
    tj_tree_set_v(out, "loss", loss);
    for (i = 0; i < 5; i++) {
        snprintf(nm, sizeof nm, "g_%s", leaves[i]);
        tj_tree_set_v(out, nm, gr[i]);
    }
}
static tj_decision save_gathered(const char *op, const char *name, const char *shape, void *u) {
    (void)shape; (void)u;
    return !strcmp(op, "all_gather") || !strcmp(name, "scattered") ? TJ_SAVE : TJ_RECOMPUTE;
}

/* per-device bytes of a residual row: its shape carries the sharding
   ("batch=2@data,pos=8@tensor"); mesh "data=2 tensor=4" */
static int64_t per_device(const tj_residual *r) {
    int64_t b = r->bytes;
    const char *s = r->shape;
    while ((s = strpbrk(s, "@+")) != NULL) {
        s++;
        if (!strncmp(s, "data", 4)) b /= 2;
        else if (!strncmp(s, "tensor", 6)) b /= 4;
    }
    return b;
}

typedef struct {
    int ok;
    int fwd_ag, bwd_ag;
    int ag_rows, ag_saved, scattered_saved;
    int64_t saved_dev;
    double *v[6];
    int64_t len[6];
} result;
static const char *outs[6] = {"loss", "g_x", "g_ln_g", "g_wq", "g_wk", "g_wv"};

static void run(cfg *c, result *r) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *o = tj_tree_new(ctx);
    tj_prog *p = NULL;
    tj_collective cols[64];
    tj_residual rows[64];
    int i, n;
    memset(r, 0, sizeof *r);
    if (c->sharded) {
        tj_set_devices(ctx, 8);
        tj_set_mesh(ctx, "data=2 tensor=4");
        /* the collectives as the policies leave them: with the collective
           matmul every dot that reads a gathered value gathers in place,
           so a saved all_gather's readers would count one each */
        tj_set_collective_matmul(ctx, 0);
    }
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=2 pos=8 embed=8", 1, -1, 1));
    tj_tree_set_array(in, "ln_g", tjt_rand(ctx, TJ_F32, "embed=8", 2, 0.5, 1.5));
    tj_tree_set_array(in, "wq", tjt_rand(ctx, TJ_F32, "embed=8 hd=4", 3, -0.5, 0.5));
    tj_tree_set_array(in, "wk", tjt_rand(ctx, TJ_F32, "embed=8 hd=4", 4, -0.5, 0.5));
    tj_tree_set_array(in, "wv", tjt_rand(ctx, TJ_F32, "embed=8 hd=4", 5, -0.5, 0.5));
    if (c->sharded && tj_filter_shard(in, "batch:data pos:tensor")) goto done;
    p = tj_jit(ctx, "seqpar", step, c, in, NULL);
    if (!p || tj_run(p, in, o)) goto done;
    if (getenv("TJ_TEST_VERBOSE")) { tj_prog_print(p, stdout); tj_prog_residuals_print(p, stdout); }
    n = tj_prog_collectives(p, cols, 64);
    for (i = 0; i < n && i < 64; i++)
        if (!strcmp(cols[i].kind, "all_gather")) {
            if (cols[i].backward) r->bwd_ag++;
            else r->fwd_ag++;
        }
    n = tj_prog_residuals(p, rows, 64);
    for (i = 0; i < n && i < 64; i++) {
        int saved = rows[i].decision == TJ_SAVE;
        if (!strcmp(rows[i].op, "all_gather")) {
            r->ag_rows++;
            r->ag_saved += saved;
        }
        if (!strcmp(rows[i].name, "scattered")) r->scattered_saved += saved;
        if (saved) r->saved_dev += per_device(&rows[i]);
    }
    for (i = 0; i < 6; i++) {
        tj_array *a = tj_tree_array(o, outs[i]);
        r->len[i] = tj_array_numel(a);
        r->v[i] = (double *)malloc(sizeof(double) * (size_t)(r->len[i] + 1));
        tj_array_read(a, TJ_F64, r->v[i]);
    }
    r->ok = 1;
done:
    if (!r->ok) fprintf(stderr, "run failed: %s\n", tj_error(ctx));
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(o);
    tj_ctx_free(ctx);
}
static void free_result(result *r) {
    int i;
    for (i = 0; i < 6; i++) free(r->v[i]);
}
/* max over outputs of |a-b| / max|a| */
static double reldiff(const result *a, const result *b) {
    double worst = 0;
    int i;
    int64_t j;
    for (i = 0; i < 6; i++) {
        double scale = 1e-30, d = 0;
        if (a->len[i] != b->len[i]) return 1e30;
        for (j = 0; j < a->len[i]; j++) if (fabs(a->v[i][j]) > scale) scale = fabs(a->v[i][j]);
        for (j = 0; j < a->len[i]; j++) {
            double e = fabs(a->v[i][j] - b->v[i][j]) / scale;
            if (!(e <= d)) d = e;
        }
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

int main(void) {
    tj_policy pa = tj_policy_from_fn(save_gathered, NULL), pb = tj_save_only_these_names("scattered");
    cfg cref = {NULL, 0, 0}, ca = {&pa, 1, 0}, cb = {&pb, 1, 0}, cc = {&pb, 1, 1};
    result ref, ra, rb, rc;
    const int64_t gathered_dev = (int64_t)B * P * E * 4 / 2, scattered_dev = (int64_t)B * P * E * 4 / 8;
    run(&cref, &ref);
    run(&ca, &ra);
    run(&cb, &rb);
    run(&cc, &rc);
    tjt_current = "runs";
    TJT_CHECK(ref.ok && ra.ok && rb.ok && rc.ok, "a program failed to build or run");
    if (!(ref.ok && ra.ok && rb.ok && rc.ok)) return tjt_finish();

    tjt_current = "checkpoint, save_only_these_names(scattered)";
    TJT_CHECK(rb.ag_rows >= 1, "the all-gather's output is not a residual of the remat region (%d residual rows with op all_gather): the region's ops were not traced into its body",
              rb.ag_rows);
    /* re-run at least once; the plan runs a recomputed value again before a
       later use where that lowers the peak (see [10] of tinyjax.h) */
    TJT_CHECK(rb.bwd_ag >= 1, "%d all-gathers in the backward pass, want at least 1 (the re-run one)", rb.bwd_ag);
    TJT_CHECK(rb.ag_saved == 0, "%d all_gather outputs saved, want 0", rb.ag_saved);
    TJT_CHECK(rb.scattered_saved == 1, "'scattered' saved %d times, want 1", rb.scattered_saved);
    TJT_CHECK(rb.saved_dev == scattered_dev, "saved %lld B/device, want the scattered shard, %lld B", (long long)rb.saved_dev, (long long)scattered_dev);
    TJT_CHECK(rb.fwd_ag == 1, "%d forward all-gathers, want 1 (the constraint's; leaving the region should not gather its output)", rb.fwd_ag);

    tjt_current = "checkpoint, save all_gather outputs";
    TJT_CHECK(ra.bwd_ag == 0, "%d all-gathers in the backward pass, want 0", ra.bwd_ag);
    TJT_CHECK(ra.ag_saved == 1, "%d all_gather outputs saved, want 1", ra.ag_saved);
    /* the saved gathered activation replaces the saved scattered shard (the
       backward pass no longer needs 'scattered'): per device the difference
       is gathered - scattered; globally they are the same size */
    TJT_CHECK(ra.saved_dev == gathered_dev, "saved %lld B/device, want the gathered activation, %lld B", (long long)ra.saved_dev, (long long)gathered_dev);
    TJT_CHECK(ra.saved_dev - rb.saved_dev == gathered_dev - scattered_dev, "saved (a) - (b) = %lld B/device, want %lld", (long long)(ra.saved_dev - rb.saved_dev),
              (long long)(gathered_dev - scattered_dev));

    tjt_current = "explicit length-1 scan, save_only_these_names(scattered)";
    TJT_CHECK(rc.ag_rows >= 1 && rc.ag_saved == 0 && rc.scattered_saved == 1, "all_gather rows %d (saved %d), scattered saved %d", rc.ag_rows, rc.ag_saved,
              rc.scattered_saved);
    TJT_CHECK(rc.bwd_ag >= 1, "%d all-gathers reported in the backward pass, want at least 1 (the re-run one, inside the backward scan's body)", rc.bwd_ag);

    tjt_current = "gradients";
    TJT_CHECK(reldiff(&ra, &rb) <= 1e-6, "save-gathered vs save-scattered differ by %.3g", reldiff(&ra, &rb));
    TJT_CHECK(reldiff(&ref, &ra) <= 1e-5, "save-gathered vs one device differ by %.3g", reldiff(&ref, &ra));
    TJT_CHECK(reldiff(&ref, &rb) <= 1e-5, "save-scattered vs one device differ by %.3g", reldiff(&ref, &rb));
    TJT_CHECK(reldiff(&ref, &rc) <= 1e-5, "explicit scan vs one device differ by %.3g", reldiff(&ref, &rc));
    free_result(&ref);
    free_result(&ra);
    free_result(&rb);
    free_result(&rc);
    return tjt_finish();
}
