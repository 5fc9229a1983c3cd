/* seq_parallel_remat.c — jax-ml/jax#25010: "How do you remat GSPMD-inserted
 * all-gathers?"
 *
 * Sequence parallelism on a simulated 8-device mesh "data=2 tensor=4":
 *
 *     x (batch, pos, embed) placed "batch:data pos:tensor"
 *     h = checkpoint_name(layer_norm(x) * ln_g, "scattered")   (still pos-sharded)
 *     h = with_sharding_constraint(h, "batch:data")             (ALL-GATHER over tensor, along pos)
 *     y = causal single-head attention(h)                      (replicated wq, wk, wv)
 *     loss = mean(y^2)
 *
 * The layernorm..attention part is one remat region, tj_checkpoint(fn, policy).
 * The answer in the issue: mark the all-gather's output not-saveable by naming
 * only the value upstream of it (save_only_these_names("scattered")); the
 * backward pass then re-runs the all-gather from the saved scattered shard.
 * This demo runs the block without a region (0), and in a region under
 * everything_saveable (e), nothing_saveable (n), a policy that saves the
 * gathered activation (a) and save_only_these_names("scattered") (b), and
 * prints, for each, the collectives (forward and backward), the saved
 * residuals and the memory analysis (tj_prog_memory: arguments, outputs,
 * temp and peak per device), and compares losses and gradients with (0).
 * A last run, (c), spells the region as an explicit length-1 tj_scan whose
 * inputs are xs, with the same save_only_these_names("scattered") policy.
 *
 * What it prints (this tinyjax.h), the plan's temp per device (what a run
 * allocates): (0) 47,168 B; (e) 47,104 B (a region saving everything costs
 * no more than no region); (n) 40,960 B; (a) 45,056 B; (b) 43,008 B;
 * (c) 47,232 B (an explicit scan stays a loop with its own body arena).
 * Loss and gradients equal (0)'s bit for bit in every run.
 *
 * How: a region's nodes join the enclosing program; its backward nodes come
 * in autodiff's order, as without a region (each cotangent consumed soon
 * after it is made); a y nobody differentiates gets no zero-filled
 * cotangent; the plan places buffers knowing every lifetime; and for each
 * value the policy recomputes it decides, by the most bytes live at one
 * step, whether to read the original where it is still alive, to keep the
 * original where recomputing costs more, or to run the value once more
 * before a later use. So (b) re-runs the all-gather twice in the backward
 * pass (once for the attention, once for the weight gradients) and keeps
 * only the scattered shard (6,144 B less than (a)) between the passes.
 * In this one block the backward pass's peak is where both hold one
 * gathered activation: the most bytes live at one step are 40,960 B for
 * both (a) and (b), and (b)'s lower temp comes from how the buffers pack.
 * With blocks in a row, (a) holds each block's gathered activation while
 * the later blocks run and (b) only its scattered shard: two blocks
 * (tests/test_remat_memory.c) need 51,456 B re-gathering and 57,536 B
 * saving. Collectives that a region re-runs in the backward pass are
 * reported as backward.
 *
 *   gcc -std=c99 -O2 -I. demos/seq_parallel_remat.c -lm -pthread && ./a.out
 *   SHOW_PROGRAM=1 ./a.out     also prints each compiled program
 */
#define TINYJAX_IMPLEMENTATION
#include "tinyjax.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 4, P = 32, E = 32, H = 16 }; /* batch, pos (sequence), embed, head dim */

/* the remat region: in = {x, ln_g, wq, wk, wv}, out = {y} */
static void region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v x = in[0], lng = in[1], wq = in[2], wk = in[3], wv = in[4];
    tj_v h, q, k, v, s, a;
    (void)g; (void)u;
    h = tj_checkpoint_name(tj_mul(tj_layer_norm(x, "embed", 1e-5), lng), "scattered"); /* pos still sharded */
    h = tj_with_sharding_constraint(h, "batch:data");                                  /* gathers pos */
    q = tj_dot(h, wq, "embed");                                                        /* (batch, pos, hd) */
    k = tj_rename(tj_dot(h, wk, "embed"), "pos", "kpos");
    v = tj_rename(tj_dot(h, wv, "embed"), "pos", "kpos");
    s = tj_muls(tj_dot(q, k, "hd"), 1.0 / sqrt((double)H));                            /* (batch, pos, kpos) */
    a = tj_softmax(tj_causal_mask(s, "pos", "kpos", -1e9), "kpos");
    out[0] = tj_dot(a, v, "kpos");                                                     /* (batch, pos, hd) */
}

/* the same region as an explicit scan of length one whose inputs are xs
   (stacked along a new axis "one"), so the body sees body values */
static void region_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    (void)carry; (void)carry_out;
    region(g, x, y, u);
}
typedef struct { const tj_policy *policy; int explicit_scan; } cfg; /* explicit_scan -1: no region at all */
static void step(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    cfg *c = (cfg *)u;
    tj_v r[5], y = NULL, loss, gr[5];
    const char *names[5] = {"x", "ln_g", "wq", "wk", "wv"};
    char nm[32];
    int i;
    (void)g;
    for (i = 0; i < 5; i++) r[i] = tj_tree_v(in, names[i]);
    r[0] = tj_with_sharding_constraint(r[0], "batch:data pos:tensor");
    if (c->explicit_scan < 0) region(g, r, &y, NULL);
    else if (!c->explicit_scan) tj_checkpoint(region, NULL, 5, r, 1, &y, c->policy);
    else {
        tj_v xs[5], ys = NULL;
        char shp[160];
        for (i = 0; i < 5; i++) {
            int k, n = tj_v_rank(r[i]);
            size_t m;
            snprintf(shp, sizeof shp, "one=1");
            for (k = 0; k < n; k++) {
                m = strlen(shp);
                snprintf(shp + m, sizeof shp - m, " %s=%lld", tj_v_axis(r[i], k), (long long)tj_v_dim(r[i], tj_v_axis(r[i], k)));
            }
            xs[i] = tj_broadcast(r[i], shp);
        }
        tj_scan(region_body, NULL, "one", 0, NULL, 5, xs, 1, NULL, &ys, c->policy);
        y = tj_sum(ys, "one"); /* drop the length-1 axis (a reduction keeps the sharding) */
    }
    loss = tj_mean(tj_mul(y, y), "batch pos hd");
    tj_grad(loss, 5, r, gr);
    tj_tree_set_v(out, "loss", loss);
    for (i = 0; i < 5; i++) {
        snprintf(nm, sizeof nm, "g_%s", names[i]);
        tj_tree_set_v(out, nm, gr[i]);
    }
}

/* policy (a): save the all-gather's output (and the named scattered value) */
static tj_decision save_gathered(const char *op, const char *name, const char *shape, void *u) {
    (void)shape; (void)u;
    return !strcmp(op, "all_gather") || !strcmp(name, "scattered") ? TJ_SAVE : TJ_RECOMPUTE;
}

static tj_array *rnd(tj_ctx *ctx, const char *shape, unsigned seed, double scale) {
    tj_array *z = tj_zeros(ctx, TJ_F32, shape);
    int64_t n = tj_array_numel(z), i;
    float *d = (float *)malloc(sizeof(float) * (size_t)n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    tj_array *a;
    for (i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        d[i] = (float)(scale * (2.0 * (double)(s >> 11) / 9007199254740992.0 - 1.0));
    }
    a = tj_array_new(ctx, TJ_F32, shape, d);
    tj_array_free(z);
    free(d);
    return a;
}

/* per-device bytes of a residual row: its shape string carries the sharding
   ("f32[_remat=1,batch=4:data,pos=32,embed=32]" style); divide by the mesh
   sizes it names. Falls back to the global bytes. */
static int64_t mesh_size(const char *axis) {
    if (!strncmp(axis, "data", 4)) return 2;
    if (!strncmp(axis, "tensor", 6)) return 4;
    return 1;
}
static int64_t per_device(const tj_residual *r) {
    int64_t b = r->bytes;
    const char *s = r->shape;
    while ((s = strchr(s, '@')) != NULL) {
        s++;
        b /= mesh_size(s);
        while (*s == '+' || (*s >= 'a' && *s <= 'z')) {
            if (*s == '+') b /= mesh_size(s + 1);
            s++;
        }
    }
    return b;
}

typedef struct {
    int fwd_ag, bwd_ag, ag_saved, nrows;
    int64_t saved_global, saved_dev;
    tj_memory_analysis mem;
    tj_tree *out;
} report;

static int run(tj_ctx *ctx, const char *title, const tj_policy *pol, int explicit_scan, tj_tree *in, report *rep) {
    cfg c;
    tj_prog *p;
    tj_collective cols[128];
    tj_residual rows[64];
    int nc, nr, i;
    c.policy = pol;
    c.explicit_scan = explicit_scan;
    memset(rep, 0, sizeof *rep);
    printf("\n=== policy: %s\n", title);
    p = tj_jit(ctx, title, step, &c, in, NULL);
    rep->out = tj_tree_new(ctx);
    if (!p || tj_run(p, in, rep->out)) {
        printf("failed: %s\n", tj_error(ctx));
        tj_prog_free(p);
        return 1;
    }
    if (getenv("SHOW_PROGRAM")) tj_prog_print(p, stdout);
    nc = tj_prog_collectives(p, cols, 128);
    printf("collectives (%d; rows from a scan body are reported from the body program):\n", nc);
    printf("  %-14s %-12s %10s  %-8s %-26s %s\n", "kind", "mesh axes", "B/device", "pass", "cause", "at");
    for (i = 0; i < nc && i < 128; i++) {
        printf("  %-14s %-12s %10lld  %-8s %-26s %s:%d\n", cols[i].kind, cols[i].axes, (long long)cols[i].bytes, cols[i].backward ? "backward" : "forward",
               cols[i].cause, cols[i].file ? (strrchr(cols[i].file, '/') ? strrchr(cols[i].file, '/') + 1 : cols[i].file) : "?", cols[i].line);
        if (!strcmp(cols[i].kind, "all_gather")) {
            if (cols[i].backward) rep->bwd_ag++;
            else rep->fwd_ag++;
        }
    }
    nr = tj_prog_residuals(p, rows, 64);
    rep->nrows = nr;
    printf("residuals of the remat region (bytes: the report's global bytes over all iterations; the region is 1 iteration):\n");
    for (i = 0; i < nr && i < 64; i++) {
        const tj_residual *r = &rows[i];
        printf("  %-10s %-12s %-44s %8lld B global %7lld B/device  %-10s (%s)\n", r->name[0] ? r->name : "-", r->carry ? "carry" : r->op, r->shape,
               (long long)r->bytes, (long long)per_device(r), r->decision == TJ_SAVE ? "saved" : r->decision == TJ_OFFLOAD ? "offloaded" : "recomputed",
               r->rule);
        if (r->decision == TJ_SAVE) {
            rep->saved_global += r->bytes;
            rep->saved_dev += per_device(r);
            if (!strcmp(r->op, "all_gather")) rep->ag_saved++;
        }
    }
    rep->mem = tj_prog_memory(p);
    printf("saved: %lld B global = %lld B per device\n", (long long)rep->saved_global, (long long)rep->saved_dev);
    printf("memory analysis (per device): arguments %lld B, outputs %lld B, temp %lld B, peak %lld B; host temp %lld B\n", (long long)rep->mem.argument_bytes,
           (long long)rep->mem.output_bytes, (long long)rep->mem.temp_bytes, (long long)rep->mem.peak_bytes, (long long)rep->mem.host_temp_bytes);
    printf("all-gathers: %d forward, %d backward (re-run); all_gather outputs saved: %d\n", rep->fwd_ag, rep->bwd_ag, rep->ag_saved);
    tj_prog_free(p);
    return 0;
}

static double maxdiff(tj_array *a, tj_array *b) {
    int64_t n = tj_array_numel(a), i;
    double *x = (double *)malloc(sizeof(double) * (size_t)n), *y = (double *)malloc(sizeof(double) * (size_t)n), m = 0;
    tj_array_read(a, TJ_F64, x);
    tj_array_read(b, TJ_F64, y);
    for (i = 0; i < n; i++) if (fabs(x[i] - y[i]) > m || x[i] != x[i] || y[i] != y[i]) m = fabs(x[i] - y[i]);
    free(x);
    free(y);
    return m;
}

int main(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in;
    tj_policy pa = tj_policy_from_fn(save_gathered, NULL), pb = tj_save_only_these_names("scattered"), pe = tj_everything_saveable(),
              pn = tj_nothing_saveable();
    report r0, ra, rb, rc, re, rn;
    char sh[64];
    int fail = 0, i;
    const char *g[6] = {"loss", "g_x", "g_ln_g", "g_wq", "g_wk", "g_wv"};
    if (tj_set_devices(ctx, 8) || tj_set_mesh(ctx, "data=2 tensor=4")) {
        fprintf(stderr, "mesh: %s\n", tj_error(ctx));
        return 1;
    }
    in = tj_tree_new(ctx);
    {
        char s[96];
        snprintf(s, sizeof s, "batch=%d pos=%d embed=%d", B, P, E);
        tj_tree_set_array(in, "x", rnd(ctx, s, 1, 1.0));
        snprintf(s, sizeof s, "embed=%d", E);
        tj_tree_set_array(in, "ln_g", rnd(ctx, s, 2, 1.0));
        snprintf(s, sizeof s, "embed=%d hd=%d", E, H);
        tj_tree_set_array(in, "wq", rnd(ctx, s, 3, 0.3));
        tj_tree_set_array(in, "wk", rnd(ctx, s, 4, 0.3));
        tj_tree_set_array(in, "wv", rnd(ctx, s, 5, 0.3));
    }
    /* the activation lives sequence-sharded; the weights replicated */
    if (tj_filter_shard(in, "batch:data pos:tensor")) {
        fprintf(stderr, "filter_shard: %s\n", tj_error(ctx));
        return 1;
    }
    printf("mesh data=2 tensor=4 (8 simulated devices); x is %s, placed %s\n", "f32[batch=4,pos=32,embed=32]",
           tj_array_sharding(tj_tree_array(in, "x"), sh, sizeof sh));
    printf("gathered activation (batch, pos, embed) f32 = %d B global, %d B per device (batch:data)\n", B * P * E * 4, B * P * E * 4 / 2);
    printf("scattered activation                    f32 = %d B global, %d B per device (batch:data pos:tensor)\n", B * P * E * 4, B * P * E * 4 / 8);

    fail |= run(ctx, "(0) no tj_checkpoint: the block traced inline, autodiff saves what it needs", NULL, -1, in, &r0);
    fail |= run(ctx, "(e) tj_checkpoint, everything_saveable", &pe, 0, in, &re);
    fail |= run(ctx, "(n) tj_checkpoint, nothing_saveable", &pn, 0, in, &rn);
    fail |= run(ctx, "(a) tj_checkpoint, save the gathered activation: policy_from_fn(all_gather or 'scattered')", &pa, 0, in, &ra);
    fail |= run(ctx, "(b) tj_checkpoint, save_only_these_names(\"scattered\")", &pb, 0, in, &rb);
    fail |= run(ctx, "(c) explicit length-1 tj_scan (inputs as xs), save_only_these_names(\"scattered\")", &pb, 1, in, &rc);
    if (fail) return 1;

    printf("\n=== comparison\n");
    for (i = 0; i < 6; i++)
        printf("  max |%s(0) - %s(a)| = %.3g   (b): %.3g   (c): %.3g   (e): %.3g   (n): %.3g\n", g[i], g[i], maxdiff(tj_tree_array(r0.out, g[i]), tj_tree_array(ra.out, g[i])),
               maxdiff(tj_tree_array(r0.out, g[i]), tj_tree_array(rb.out, g[i])), maxdiff(tj_tree_array(r0.out, g[i]), tj_tree_array(rc.out, g[i])),
               maxdiff(tj_tree_array(r0.out, g[i]), tj_tree_array(re.out, g[i])), maxdiff(tj_tree_array(r0.out, g[i]), tj_tree_array(rn.out, g[i])));
    {
        const report *rr[6] = {&r0, &re, &rn, &ra, &rb, &rc};
        const char *nm[6] = {"(0)", "(e)", "(n)", "(a)", "(b)", "(c)"};
        for (i = 0; i < 6; i++) {
            const report *r = rr[i];
            printf("  %s: all-gathers %d forward / %d backward; all_gather output saved: %s; residual rows %d; saved %lld B/device; temp %lld B/device\n", nm[i],
                   r->fwd_ag, r->bwd_ag, r->ag_saved ? "yes" : "no", r->nrows, (long long)r->saved_dev, (long long)r->mem.temp_bytes);
        }
    }
    printf("  (b) %s\n", rb.bwd_ag >= 1 && !rb.ag_saved ? "re-runs the all-gather in the backward pass and keeps only the scattered shard, as #25010 asks"
                                                         : "does NOT rematerialize the all-gather (see the notes at the top of this file)");
    printf("  saved per device: (a) - (b) = %lld B (gathered %d B/device minus scattered %d B/device = %d B)\n", (long long)(ra.saved_dev - rb.saved_dev),
           B * P * E * 4 / 2, B * P * E * 4 / 8, B * P * E * 4 / 2 - B * P * E * 4 / 8);
    printf("  temp per device: no region %lld B; everything_saveable %lld B (%s); nothing_saveable %lld B (%s)\n", (long long)r0.mem.temp_bytes,
           (long long)re.mem.temp_bytes, re.mem.temp_bytes <= r0.mem.temp_bytes ? "no more than no region" : "MORE than no region", (long long)rn.mem.temp_bytes,
           rn.mem.temp_bytes <= re.mem.temp_bytes ? "no more than everything_saveable" : "MORE than everything_saveable");
    printf("  re-gathering (b) %lld B vs saving the gathered activation (a) %lld B: %s\n", (long long)rb.mem.temp_bytes, (long long)ra.mem.temp_bytes,
           rb.mem.temp_bytes < ra.mem.temp_bytes ? "re-gathering is lower" : "re-gathering is NOT lower (see the notes at the top of this file)");
    tj_tree_free(r0.out);
    tj_tree_free(re.out);
    tj_tree_free(rn.out);
    tj_tree_free(ra.out);
    tj_tree_free(rb.out);
    tj_tree_free(rc.out);
    tj_tree_free(in);
    tj_ctx_free(ctx);
    return 0;
}
