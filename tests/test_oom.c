/* Allocation failure: every allocation the library makes while tracing,
   compiling and running a program is made to fail in turn; each time the
   call must return an error that says "out of memory", never crash, and
   leave the context usable. The allocation hooks are the library's own
   TJ_MALLOC / TJ_REALLOC / TJ_FREE. */
#include <stdlib.h>
static long oom_count, oom_fail_at = -1;
static void *oom_malloc(size_t n) { return oom_count++ == oom_fail_at ? NULL : malloc(n); }
static void *oom_realloc(void *p, size_t n) { return oom_count++ == oom_fail_at ? NULL : realloc(p, n); }
#define TJ_MALLOC(n) oom_malloc(n)
#define TJ_REALLOC(p, n) oom_realloc(p, n)
#define TJ_FREE(p) free(p)
#define TINYJAX_IMPLEMENTATION /* here, with the hooks above, not tests/tj_impl.c */
#include "../tinyjax.h"
#define TJT_INTERNAL_IMPLEMENTATION /* and the wrappers tj_test.h uses */
#include "tj_test.h"

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

int main(void) {
    long total, k;
    int failures_seen = 0, bad = 0;
    /* count the allocations of one successful trace + compile + run */
    {
        tj_ctx *c = tj_ctx_new();
        tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
        tj_prog *p;
        tj_tree_set_array(in, "x", tj_full(c, TJ_F32, "batch=4 embed=8", 0.5));
        tj_tree_set_array(in, "w", tj_full(c, TJ_F32, "layer=3 embed=8 embed2=8", 0.1));
        oom_count = 0;
        p = tj_jit(c, "step", step, NULL, in, NULL);
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
        tj_tree_set_array(in, "x", tj_full(c, TJ_F32, "batch=4 embed=8", 0.5));
        tj_tree_set_array(in, "w", tj_full(c, TJ_F32, "layer=3 embed=8 embed2=8", 0.1));
        if (getenv("TJ_OOM_TRACE")) fprintf(stderr, "failing allocation %ld\n", k);
        oom_count = 0;
        oom_fail_at = k;
        p = tj_jit(c, "step", step, NULL, in, NULL);
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
    return tjt_finish();
}
