/* The memory rules of remat regions (issue 15 item 7), on the plan's temp
 * per device (tj_prog_memory) and on what a run really allocates:
 *   (a) a tj_checkpoint with everything_saveable needs no more temp than
 *       the same program without the region;
 *   (b) a policy that stops saving values never raises the planned temp
 *       above everything_saveable (nothing_saveable, dots_saveable,
 *       save_only_these_names, an offload policy);
 *   (c) in the sequence-parallel block of jax-ml/jax#25010 (the demo's
 *       sizes, mesh data=2 tensor=4), and in two such blocks in a row,
 *       re-gathering the activation in the backward pass
 *       (save_only_these_names("scattered")) needs less temp than saving
 *       the gathered activation (in one block the most bytes live at one
 *       step are the same for both, 40,960 B, and the 2,048 B margin comes
 *       from how the buffers pack; in two blocks re-gathering holds 6,144 B
 *       less per block while the other block runs);
 *   (d) two checkpoints in a row, each around a scan over 6 layers (the
 *       layer stack of Levanter or MaxText under one jax.checkpoint): the
 *       policy judges the values inside the scan as JAX's does, so
 *       nothing_saveable keeps none of the first scan's stacked residuals
 *       while the second runs, and an offload policy moves the named
 *       stack to host memory: each needs less temp than
 *       everything_saveable (until 2026-11-24 the stacks were kept
 *       whatever the policy said: the same temp for every policy);
 * and every variant gives the loss and gradients of the program without a
 * region.
 * TJ_TEST_VERBOSE=1 prints each program's temp (2: and the programs);
 * TJ_TEST_BITS=1 prints a hash of each program's outputs. */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"

/* ---- the programs: each is a region fn(in) -> out[0], and a loss of out[0] ---- */
enum { P_SEQPAR, P_SEQPAR2, P_MLP, P_CHAIN, P_ATTN1, P_SCAN2, NPROG };
static const char *prog_names[NPROG] = {"jax#25010 block", "two jax#25010 blocks", "mlp", "elementwise chain", "attention, one device",
                                        "two checkpointed scans"};
enum { SL = 6, SB = 128, SE = 16 }; /* P_SCAN2: layers, batch, embed */
#define SEQPAR(prog) ((prog) == P_SEQPAR || (prog) == P_SEQPAR2)
enum { B = 4, P = 32, E = 32, H = 16 };

typedef struct {
    int prog;
    int variant; /* -1: no region; else an index into pols */
    const tj_policy *policy;
} cfg;

static void seqpar(const tj_v *in, tj_v *out, int sharded) {
    tj_v h, q, k, v, s, a;
    h = tj_checkpoint_name(tj_mul(tj_layer_norm(in[0], "embed", 1e-5), in[1]), "scattered");
    if (sharded) h = tj_with_sharding_constraint(h, "batch:data");
    q = tj_dot(h, in[2], "embed");
    k = tj_rename(tj_dot(h, in[3], "embed"), "pos", "kpos");
    v = tj_rename(tj_dot(h, in[4], "embed"), "pos", "kpos");
    s = tj_muls(tj_dot(q, k, "hd"), 0.25);
    a = tj_softmax(tj_causal_mask(s, "pos", "kpos", -1e9), "kpos");
    out[0] = tj_dot(a, v, "kpos");
}
static void layer(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v h = tj_checkpoint_name(tj_rename(tj_dot(c[0], x[0], "embed"), "e2", "embed"), "hidden");
    (void)g; (void)y; (void)u;
    co[0] = tj_tanh(h);
}
static void region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const cfg *c = (const cfg *)u;
    (void)g;
    switch (c->prog) {
    case P_SCAN2: tj_scan(layer, NULL, "layer", 1, &in[0], 1, &in[1], 0, &out[0], NULL, NULL); break;
    case P_SEQPAR: case P_SEQPAR2: seqpar(in, out, 1); break;
    case P_ATTN1: seqpar(in, out, 0); break;
    case P_MLP: {
        tj_v h = tj_checkpoint_name(tj_gelu(tj_dot(in[0], in[1], "embed")), "hidden");
        out[0] = tj_dot(h, in[2], "ff");
        break;
    }
    case P_CHAIN: {
        tj_v a = tj_checkpoint_name(tj_exp(tj_muls(in[0], 0.5)), "e");
        tj_v b = tj_tanh(tj_mul(a, in[1]));
        out[0] = tj_mul(b, b);
        break;
    }
    }
}
static int nin_of(int prog) { return SEQPAR(prog) || prog == P_ATTN1 ? 5 : prog == P_MLP ? 3 : 2; }
static const char *leaves[5] = {"x", "w1", "w2", "w3", "w4"};

static void step(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const cfg *c = (const cfg *)u;
    tj_v r[5], y = NULL, gr[5], loss;
    char nm[16];
    int i, n = nin_of(c->prog);
    for (i = 0; i < n; i++) r[i] = tj_tree_v(in, leaves[i]);
    if (SEQPAR(c->prog)) r[0] = tj_with_sharding_constraint(r[0], "batch:data pos:tensor");
    if (c->variant < 0) region(g, r, &y, (void *)c);
    else tj_checkpoint(region, (void *)c, n, r, 1, &y, c->policy);
    loss = tj_mean(tj_mul(y, y), SEQPAR(c->prog) || c->prog == P_ATTN1 ? "batch pos hd" : c->prog == P_MLP ? "batch embed2" : "batch embed");
    if (c->prog == P_SEQPAR2 || c->prog == P_SCAN2) { /* a second block on x / 2: the first one's residuals wait across it */
        tj_v r2[5], y2 = NULL;
        for (i = 0; i < n; i++) r2[i] = r[i];
        r2[0] = tj_muls(r[0], 0.5);
        if (c->variant < 0) region(g, r2, &y2, (void *)c);
        else tj_checkpoint(region, (void *)c, n, r2, 1, &y2, c->policy);
        loss = tj_add(loss, tj_mean(tj_mul(y2, y2), c->prog == P_SCAN2 ? "batch embed" : "batch pos hd"));
    }
    tj_grad(loss, n, r, gr);
    tj_tree_set_v(out, "loss", loss);
    for (i = 0; i < n; i++) {
        snprintf(nm, sizeof nm, "g_%s", leaves[i]);
        tj_tree_set_v(out, nm, gr[i]);
    }
}

/* policy: save the all-gather's output and the named scattered value (the
   jax#25010 "save the gathered activation" variant) */
static tj_decision save_gathered(const char *op, const char *name, const char *shape, void *u) {
    (void)shape; (void)u;
    return !strcmp(op, "all_gather") || !strcmp(name, "scattered") ? TJ_SAVE : TJ_RECOMPUTE;
}

enum { V_ALL, V_NONE, V_DOTS, V_NAMES, V_OFFLOAD, V_GATHERED, NVAR };
static const char *var_names[NVAR] = {"everything_saveable", "nothing_saveable", "dots_saveable", "save_only_these_names", "offload names", "save all_gather + scattered"};

typedef struct {
    int ok;
    int64_t temp, host_temp, measured;
    int64_t peak, device_peak; /* the plan's peak per device; the most a device held during the run */
    int ndev;
    tjt_outs o;
} result;

static void run(int prog, int variant, result *r) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *o = tj_tree_new(ctx);
    tj_prog *p = NULL;
    cfg c;
    tj_policy pol[NVAR];
    const char *names = prog == P_MLP || prog == P_SCAN2 ? "hidden" : prog == P_CHAIN ? "e" : "scattered";
    pol[V_ALL] = tj_everything_saveable();
    pol[V_NONE] = tj_nothing_saveable();
    pol[V_DOTS] = tj_dots_saveable();
    pol[V_NAMES] = tj_save_only_these_names(names);
    pol[V_OFFLOAD] = tj_save_and_offload_only_these_names("", names);
    pol[V_GATHERED] = tj_policy_from_fn(save_gathered, NULL);
    memset(r, 0, sizeof *r);
    c.prog = prog;
    c.variant = variant;
    c.policy = variant >= 0 ? &pol[variant] : NULL;
    if (SEQPAR(prog)) {
        tj_set_devices(ctx, 8);
        tj_set_mesh(ctx, "data=2 tensor=4");
    }
    if (SEQPAR(prog) || prog == P_ATTN1) {
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=4 pos=32 embed=32", 1, -1, 1));
        tj_tree_set_array(in, "w1", tjt_rand(ctx, TJ_F32, "embed=32", 2, 0.5, 1.5));
        tj_tree_set_array(in, "w2", tjt_rand(ctx, TJ_F32, "embed=32 hd=16", 3, -0.3, 0.3));
        tj_tree_set_array(in, "w3", tjt_rand(ctx, TJ_F32, "embed=32 hd=16", 4, -0.3, 0.3));
        tj_tree_set_array(in, "w4", tjt_rand(ctx, TJ_F32, "embed=32 hd=16", 5, -0.3, 0.3));
        if (SEQPAR(prog) && tj_filter_shard(in, "batch:data pos:tensor")) goto done;
    } else if (prog == P_MLP) {
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=16 embed=32", 1, -1, 1));
        tj_tree_set_array(in, "w1", tjt_rand(ctx, TJ_F32, "embed=32 ff=128", 2, -0.2, 0.2));
        tj_tree_set_array(in, "w2", tjt_rand(ctx, TJ_F32, "ff=128 embed2=32", 3, -0.2, 0.2));
    } else if (prog == P_SCAN2) {
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=128 embed=16", 1, -1, 1));
        tj_tree_set_array(in, "w1", tjt_rand(ctx, TJ_F32, "layer=6 embed=16 e2=16", 2, -0.4, 0.4));
    } else {
        tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=16 embed=64", 1, -1, 1));
        tj_tree_set_array(in, "w1", tjt_rand(ctx, TJ_F32, "batch=16 embed=64", 2, -1, 1));
    }
    p = tj_jit(ctx, "remat_memory", step, &c, in, NULL);
    tj_reset_alloc_peaks(ctx);
    if (!p || tj_run(p, in, o)) goto done;
    {
        tj_alloc_stats st = tj_get_alloc_stats(ctx);
        int d;
        for (d = 0; d < tj_devices(ctx); d++) r->device_peak = st.device_peak_bytes[d] > r->device_peak ? st.device_peak_bytes[d] : r->device_peak;
        r->peak = tj_prog_memory(p).peak_bytes;
    }
    r->temp = tj_prog_memory(p).temp_bytes;
    r->host_temp = tj_prog_memory(p).host_temp_bytes;
    r->measured = tj_get_alloc_stats(ctx).arena_bytes; /* the arenas the run allocated, on every device */
    r->ndev = SEQPAR(prog) ? 8 : 1;
    if (getenv("TJ_TEST_VERBOSE") && getenv("TJ_TEST_VERBOSE")[0] == '2') tj_prog_print(p, stdout);
    tjt_outs_read(&r->o, o);
    if (getenv("TJ_TEST_BITS")) { /* a hash of every output's bits, to compare tinyjax.h versions */
        uint64_t h = 1469598103934665603ull;
        int i;
        int64_t j;
        for (i = 0; i < r->o.n; i++)
            for (j = 0; j < r->o.len[i]; j++) {
                uint64_t b;
                memcpy(&b, &r->o.v[i][j], 8);
                h = (h ^ b) * 1099511628211ull;
            }
        printf("bits %s / %s: %016llx\n", prog_names[prog], variant < 0 ? "no region" : var_names[variant], (unsigned long long)h);
    }
    r->ok = 1;
done:
    if (!r->ok) fprintf(stderr, "%s / %s: %s\n", prog_names[prog], variant < 0 ? "no region" : var_names[variant], tj_error(ctx));
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(o);
    tj_ctx_free(ctx);
}

int main(void) {
    int prog, v;
    result none, res[NVAR];
    for (prog = 0; prog < NPROG; prog++) {
        char where[96];
        run(prog, -1, &none);
        for (v = 0; v < NVAR; v++) run(prog, v, &res[v]);
        snprintf(where, sizeof where, "%s", prog_names[prog]);
        tjt_current = where;
        if (getenv("TJ_TEST_VERBOSE")) {
            printf("%-24s no region: temp %7lld B/device\n", prog_names[prog], (long long)none.temp);
            for (v = 0; v < NVAR; v++)
                printf("%-24s %-28s temp %7lld B/device, host %6lld B\n", "", var_names[v], (long long)res[v].temp, (long long)res[v].host_temp);
        }
        TJT_CHECK(none.ok, "the program without a region failed");
        for (v = 0; v < NVAR; v++) TJT_CHECK(res[v].ok, "%s failed", var_names[v]);
        for (v = -1; v < NVAR; v++) { /* what a run allocates is what the plan says */
            const result *r = v < 0 ? &none : &res[v];
            if (r->ok)
                TJT_CHECK(r->measured == r->ndev * (r->temp + r->host_temp), "%s: the run holds %lld B of arenas, the analysis says %d x %lld B",
                          v < 0 ? "no region" : var_names[v], (long long)r->measured, r->ndev, (long long)(r->temp + r->host_temp));
        }
        for (v = -1; v < NVAR; v++) { /* and a device holds at most the plan's peak (arguments, outputs, device temp): host memory is no device's */
            const result *r = v < 0 ? &none : &res[v];
            if (r->ok)
                TJT_CHECK(r->device_peak == r->peak, "%s: a device held %lld B at most, the analysis's peak is %lld B (host temp %lld B)", v < 0 ? "no region" : var_names[v],
                          (long long)r->device_peak, (long long)r->peak, (long long)r->host_temp);
        }
        if (!none.ok) continue;
        /* (a) */
        TJT_CHECK(res[V_ALL].temp <= none.temp, "(a) a region saving everything needs %lld B temp, no region %lld B", (long long)res[V_ALL].temp, (long long)none.temp);
        /* (b) */
        for (v = V_NONE; v <= V_OFFLOAD; v++)
            TJT_CHECK(!res[v].ok || res[v].temp <= res[V_ALL].temp, "(b) %s needs %lld B temp, everything_saveable %lld B", var_names[v], (long long)res[v].temp,
                      (long long)res[V_ALL].temp);
        /* (d): a stack is SL x SB x SE floats. everything_saveable's peak
           holds the two stacks of each scan (carries, tanh outputs);
           nothing_saveable's the two that one scan's re-run makes, with a
           few per-iteration buffers: at least 1.5 stacks less; offloading
           'hidden' puts one stack per scan in host memory (JAX: one
           f32<host>[6,128,16] each) and keeps a stack less on the device.
           (save_only_these_names("hidden") keeps one stack per scan, and the
           re-run of the second makes two while the first's waits: the same
           peak as everything_saveable here, as in JAX.) */
        if (prog == P_SCAN2) {
            int64_t stack = (int64_t)SL * SB * SE * 4;
            TJT_CHECK(res[V_NONE].temp + 3 * stack / 2 <= res[V_ALL].temp, "(d) nothing_saveable needs %lld B temp, everything_saveable %lld B: want 1.5 stacks (%lld B) less",
                      (long long)res[V_NONE].temp, (long long)res[V_ALL].temp, (long long)(3 * stack / 2));
            TJT_CHECK(res[V_OFFLOAD].host_temp == 2 * stack && res[V_OFFLOAD].temp + stack <= res[V_ALL].temp,
                      "(d) offloading 'hidden' holds %lld B of host memory (want two stacks, %lld B) and %lld B temp (everything_saveable %lld B)",
                      (long long)res[V_OFFLOAD].host_temp, (long long)(2 * stack), (long long)res[V_OFFLOAD].temp, (long long)res[V_ALL].temp);
        }
        /* (c) */
        if (SEQPAR(prog))
            TJT_CHECK(res[V_NAMES].temp < res[V_GATHERED].temp, "(c) re-gathering needs %lld B temp, saving the gathered activation %lld B",
                      (long long)res[V_NAMES].temp, (long long)res[V_GATHERED].temp);
        for (v = 0; v < NVAR; v++) {
            if (!res[v].ok) continue;
            char what[160];
            snprintf(what, sizeof what, "%s, %s vs no region", prog_names[prog], var_names[v]);
            tjt_outs_compare(what, &none.o, &res[v].o, 1e-6);
            tjt_outs_free(&res[v].o);
        }
        tjt_outs_free(&none.o);
    }
    return tjt_finish();
}
