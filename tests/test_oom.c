/* Allocation failure: every allocation the library makes while tracing,
   compiling and running a program is made to fail in turn; each time the
   call must return an error that says "out of memory", never crash, and
   leave the context usable. The allocation hooks are the library's own
   TJ_MALLOC / TJ_REALLOC / TJ_FREE, set by main (tjt_set_alloc:
   tests/tj_impl.c calls them for every allocation). */
#include <stdlib.h>
#include "../tinyjax.h"
#include "tj_test.h"
static long oom_count, oom_fail_at = -1;
static void *oom_malloc(size_t n) { return oom_count++ == oom_fail_at ? NULL : malloc(n); }
static void *oom_realloc(void *p, size_t n) { return oom_count++ == oom_fail_at ? NULL : realloc(p, n); }

static void body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)y; (void)u;
    co[0] = tj_add(c[0], tj_rename(tj_tanh(tj_dot(c[0], x[0], "embed")), "embed2", "embed"));
}
static void step(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), h, gw;
    tj_policy p = tj_nothing_saveable();
    (void)g; (void)u;
    tj_scan(body, NULL, "layer", 1, &x, 1, &w, 0, &h, NULL, &p);
    h = tj_mean(tj_mul(h, h), "batch embed");
    tj_grad(h, 1, &w, &gw);
    tj_tree_set_v(out, "loss", h);
    tj_tree_set_v(out, "gw", gw);
}
static void step_inputs(tj_ctx *c, tj_tree *in) {
    tj_tree_set_array(in, "x", tj_full(c, TJ_F32, "batch=4 embed=8", 0.5));
    tj_tree_set_array(in, "w", tj_full(c, TJ_F32, "layer=3 embed=8 embed2=8", 0.1));
}
/* Lists longer than the builders' stack tables (tests/test_limits.c): a
   shard_map of 40 inputs and 35 outputs, a custom op of 20 inputs and 18
   outputs, a custom_vjp of 70 inputs, a stack of 70, their gradient: their
   heap tables fail in turn too (and are freed: the sanitizer pass) */
#define W_N 70
static void sum_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *u) {
    int64_t n = 1, k;
    int i, j;
    (void)u;
    for (i = 0; i < in[0].rank; i++) n *= in[0].dim[i];
    for (k = 0; k < n; k++) {
        float s = 0;
        for (i = 0; i < nin; i++) s += ((const float *)in[i].data)[k];
        for (j = 0; j < nout; j++) ((float *)out[j].data)[k] = s * (float)(j + 1);
    }
}
static tj_status sum_vjp(tj_graph *g, int nin, const tj_v *in, int nout, const tj_v *out, const tj_v *ct, tj_v *gin, void *u) {
    tj_v s = NULL;
    int i, j;
    (void)g; (void)in; (void)out; (void)u;
    for (j = 0; j < nout; j++) s = s ? tj_add(s, tj_muls(ct[j], j + 1.0)) : ct[j];
    for (i = 0; i < nin; i++) gin[i] = s;
    return TJ_OK;
}
static void wide_smap(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    int j;
    (void)g; (void)u;
    for (j = 0; j < 35; j++) out[j] = tj_mul(tj_tanh(in[j]), in[j + 5]);
}
static void wide_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    int i;
    (void)g; (void)u;
    for (i = 0; i < W_N; i++) {
        res[i] = in[i];
        out[i % 20] = i < 20 ? tj_mul(in[i], in[i]) : tj_add(out[i % 20], tj_mul(in[i], in[i]));
    }
}
static void wide_bwd(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *u) {
    int i;
    (void)g; (void)u;
    for (i = 0; i < W_N; i++) gin[i] = tj_mul(tj_muls(res[i], 2.0), ct[i % 20]);
}
static void wide(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x[W_N], y[W_N], z[W_N], gx[W_N], loss;
    const char *sp[W_N];
    int i;
    (void)g; (void)u;
    for (i = 0; i < W_N; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "x%d", i);
        x[i] = tj_tree_v(in, nm);
        sp[i] = "";
    }
    if (tj_shard_map(wide_smap, NULL, 40, x, sp, 35, y, sp, 1)) return;
    if (tj_custom("wsum", 20, y, z)) return;
    for (i = 0; i < W_N; i++) y[i] = tj_add(x[i], z[i % 18]);
    if (tj_custom_vjp(wide_fwd, wide_bwd, NULL, W_N, y, 20, z, W_N)) return;
    loss = tj_sum_all(tj_stack(20, z, "k"));
    if (tj_grad(loss, W_N, x, gx)) return;
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g", tj_stack(W_N, gx, "k"));
}
static void wide_inputs(tj_ctx *c, tj_tree *in) {
    tj_op_def d;
    int i;
    memset(&d, 0, sizeof d);
    d.name = "wsum";
    d.nout = 18;
    d.cpu = sum_cpu;
    d.vjp = sum_vjp;
    d.replication = tj_rep_same;
    tj_register_op(c, &d);
    tj_set_mesh(c, "data=1");
    for (i = 0; i < W_N; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "x%d", i);
        tj_tree_set_array(in, nm, tj_full(c, TJ_F32, "embed=4", 0.01 * i));
    }
}
/* every allocation of fn's trace, compile and run made to fail in turn */
static void sweep(const char *what, tj_fn fn, void (*inputs)(tj_ctx *, tj_tree *)) {
    long total, k;
    int failures_seen = 0, bad = 0;
    tjt_current = what;
    /* count the allocations of one successful trace + compile + run */
    {
        tj_ctx *c = tj_ctx_new();
        tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
        tj_prog *p;
        inputs(c, in);
        oom_count = 0;
        p = tj_jit(c, what, fn, NULL, in, NULL);
        TJT_CHECK(p && !tj_run(p, in, out), "baseline: %s", tj_error(c));
        total = oom_count;
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(c);
    }
    TJT_CHECK(total > 50, "only %ld allocations counted", total);
    for (k = 0; k < total; k++) {
        tj_ctx *c = tj_ctx_new();
        tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
        tj_prog *p;
        tj_status st = TJ_OK;
        inputs(c, in);
        if (getenv("TJ_OOM_TRACE")) fprintf(stderr, "failing allocation %ld\n", k);
        oom_count = 0;
        oom_fail_at = k;
        p = tj_jit(c, what, fn, NULL, in, NULL);
        if (!p) st = tj_status_of(c);
        else st = tj_run(p, in, out);
        oom_fail_at = -1;
        if (st != TJ_OK) {
            failures_seen++;
            /* the message names a line of this file: the op, tj_jit or tj_run that failed */
            if (st != TJ_ERR_OOM || !strstr(tj_error(c), "out of memory") || !strstr(tj_error(c), "test_oom.c:")) {
                bad++;
                if (bad < 50) fprintf(stderr, "allocation %ld failed: status %d, message \"%s\"\n", k, (int)st, tj_error(c));
            }
        }
        /* the context stays usable */
        tj_clear_error(c);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(c);
    }
    TJT_CHECK(failures_seen > 0, "no injected failure was reported");
    TJT_CHECK(bad == 0, "%d of %ld injected allocation failures did not give an out-of-memory error", bad, total);
}

int main(void) {
    tjt_set_alloc(oom_malloc, oom_realloc, free);
    sweep("step", step, step_inputs);
    sweep("wide", wide, wide_inputs);
    return tjt_finish();
}
