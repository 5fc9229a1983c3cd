/* scan, remat policies, named residuals and host offload. */
#define TINYJAX_IMPLEMENTATION
#include "../tinyjax.h"
#include "tj_test.h"

/* one residual MLP block: x + W2 relu(W1 x), with named hidden and output */
static tj_v block(tj_v x, tj_v w1, tj_v w2) {
    tj_v h = tj_checkpoint_name(tj_dot(x, w1, "embed"), "hidden");      /* (batch, hidden) */
    return tj_checkpoint_name(tj_add(x, tj_dot(tj_relu(h), w2, "hidden")), "residual");
}
static void body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    (void)g; (void)y; (void)u;
    carry_out[0] = block(carry[0], x[0], x[1]);
}
typedef struct { const tj_policy *policy; int unrolled; int L; } cfg;
static void stack_loss(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    cfg *c = (cfg *)u;
    tj_v x = tj_tree_v(in, "x"), w1 = tj_tree_v(in, "w1"), w2 = tj_tree_v(in, "w2"), wo = tj_tree_v(in, "wout");
    tj_v h = x;
    (void)g;
    if (c->unrolled) {
        int l;
        for (l = 0; l < c->L; l++)
            h = block(h, tj_merge(tj_slice(w1, "layer", l, l + 1), "layer embed", "embed"), tj_merge(tj_slice(w2, "layer", l, l + 1), "layer hidden", "hidden"));
    } else {
        tj_v xs[2];
        xs[0] = w1;
        xs[1] = w2;
        tj_scan(body, NULL, "layer", 1, &x, 2, xs, 0, &h, NULL, c->policy);
    }
    tj_tree_set_v(out, "loss", tj_mean(tj_dot(h, wo, "embed"), "batch"));
}
static void stack_grads(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_tree *tmp = tj_tree_new(tj_graph_ctx(g));
    tj_v w[3], gr[3];
    stack_loss(g, in, tmp, u);
    w[0] = tj_tree_v(in, "w1");
    w[1] = tj_tree_v(in, "w2");
    w[2] = tj_tree_v(in, "x");
    tj_grad(tj_tree_v(tmp, "loss"), 3, w, gr);
    tj_tree_set_v(out, "loss", tj_tree_v(tmp, "loss"));
    tj_tree_set_v(out, "g_w1", gr[0]);
    tj_tree_set_v(out, "g_w2", gr[1]);
    tj_tree_set_v(out, "g_x", gr[2]);
    tj_tree_free(tmp);
}
static tj_tree *make_inputs(tj_ctx *ctx, tj_dtype dt, int L, int B, int E, int H) {
    tj_tree *in = tj_tree_new(ctx);
    char s[128];
    snprintf(s, sizeof s, "batch=%d embed=%d", B, E);
    tj_tree_set_array(in, "x", tjt_rand(ctx, dt, s, 1, -1, 1));
    snprintf(s, sizeof s, "layer=%d embed=%d hidden=%d", L, E, H);
    tj_tree_set_array(in, "w1", tjt_rand(ctx, dt, s, 2, -0.5, 0.5));
    snprintf(s, sizeof s, "layer=%d hidden=%d embed=%d", L, H, E);
    tj_tree_set_array(in, "w2", tjt_rand(ctx, dt, s, 3, -0.5, 0.5));
    snprintf(s, sizeof s, "embed=%d", E);
    tj_tree_set_array(in, "wout", tjt_rand(ctx, dt, s, 4, -1, 1));
    return in;
}
static double maxdiff(tj_array *a, tj_array *b) {
    int64_t n = tj_array_numel(a), i;
    double *x = (double *)malloc(sizeof(double) * (size_t)n), *y = (double *)malloc(sizeof(double) * (size_t)n), m = 0;
    tj_array_read(a, TJ_F64, x);
    tj_array_read(b, TJ_F64, y);
    for (i = 0; i < n; i++) if (fabs(x[i] - y[i]) > m || x[i] != x[i]) m = fabs(x[i] - y[i]);
    free(x);
    free(y);
    return m;
}
static inline int bits_equal(tj_array *a, tj_array *b) {
    int64_t n = tj_array_numel(a) * (int64_t)tj_dtype_size(tj_array_dtype(a));
    return tj_array_numel(a) == tj_array_numel(b) && memcmp(a->data[0], b->data[0], (size_t)n) == 0;
}

int main(void) {
    tj_ctx *ctx = tj_ctx_new();
    enum { L = 3, B = 4, E = 6, H = 8 };
    tj_policy everything = tj_everything_saveable();
    cfg cs = {&everything, 0, L}, cu = {NULL, 1, L};
    tj_tree *in, *o1, *o2;
    tj_prog *p1, *p2;

    tjt_current = "scan vs unrolled";
    in = make_inputs(ctx, TJ_F64, L, B, E, H);
    p1 = tj_jit(ctx, "scan", stack_grads, &cs, in, NULL);
    p2 = tj_jit(ctx, "unrolled", stack_grads, &cu, in, NULL);
    TJT_CHECK(p1 && p2, "jit failed: %s", tj_error(ctx));
    o1 = tj_tree_new(ctx);
    o2 = tj_tree_new(ctx);
    if (p1 && p2 && !tj_run(p1, in, o1) && !tj_run(p2, in, o2)) {
        const char *names[] = {"loss", "g_w1", "g_w2", "g_x"};
        int i;
        for (i = 0; i < 4; i++)
            TJT_CHECK(maxdiff(tj_tree_array(o1, names[i]), tj_tree_array(o2, names[i])) < 1e-12, "%s differs: %g", names[i],
                      maxdiff(tj_tree_array(o1, names[i]), tj_tree_array(o2, names[i])));
    } else TJT_CHECK(0, "run failed: %s", tj_error(ctx));
    tj_tree_free(o1);
    tj_tree_free(o2);
    tj_prog_free(p1);
    tj_prog_free(p2);
    TJT_GRADCHECK(ctx, "scanned MLP stack", stack_loss, &cs, in, "x w1 w2 wout");
    tj_tree_free(in);

    tj_ctx_free(ctx);
    return tjt_finish();
}
