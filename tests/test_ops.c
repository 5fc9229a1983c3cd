/* Per-op tests: a finite-difference gradient check for every differentiable
   op (f64 inputs), forward values against hand computations, clear error
   messages for bad input, and the memory analysis against what a run really
   allocates (including donation). */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"
#include "tj_internal.h"

/* ------------------------------------------------------------ helpers --- */
/* "x=3 y=4" and "x y" of a traced value */
static const char *shape_of(tj_v v, char *buf, size_t n) {
    size_t k = 0;
    int i;
    buf[0] = 0;
    for (i = 0; i < tj_v_rank(v); i++) {
        snprintf(buf + k, n - k, "%s%s=%lld", i ? " " : "", tj_v_axis(v, i), (long long)tj_v_dim(v, tj_v_axis(v, i)));
        k = strlen(buf);
    }
    return buf;
}
static const char *axes_of(tj_v v, char *buf, size_t n) {
    size_t k = 0;
    int i;
    buf[0] = 0;
    for (i = 0; i < tj_v_rank(v); i++) {
        snprintf(buf + k, n - k, "%s%s", i ? " " : "", tj_v_axis(v, i));
        k = strlen(buf);
    }
    return buf;
}
/* sum of all elements */
static tj_v sum_all(tj_v y) {
    char ax[256];
    if (!y || tj_v_rank(y) == 0) return y;
    return tj_sum(y, axes_of(y, ax, sizeof ax));
}
/* sum(y * w) with fixed weights w in [0.25, 1.25): a loss whose gradient
   reaches every element with a different weight (plain sums hide bugs:
   e.g. the gradient of sum(softmax) is zero) */
static tj_v wsum(tj_v y, uint64_t key) {
    char sh[256];
    tj_v w;
    if (!y) return NULL;
    w = tj_adds(tj_uniform(tj_graph_of(y), key, tj_v_dtype(y), shape_of(y, sh, sizeof sh)), 0.25);
    return sum_all(tj_mul(y, w));
}
static tj_v leaf(const tj_tree *in, const char *nm) { return tj_tree_find(in, nm) >= 0 ? tj_tree_v(in, nm) : NULL; }

/* jit + run; the output tree (empty on failure, which is counted) */
static tj_tree *run_fn(tj_ctx *ctx, const char *what, tj_fn fn, void *u, tj_tree *in) {
    tj_prog *p = tj_jit(ctx, what, fn, u, in, NULL);
    tj_tree *out = tj_tree_new(ctx);
    if (!p || tj_run(p, in, out) != TJ_OK) {
        TJT_CHECK(0, "%s: could not build/run: %s", what, tj_error(ctx));
        tj_clear_error(ctx);
    }
    tj_prog_free(p);
    return out;
}
/* a leaf read back as doubles (malloc'd; NULL if missing) */
static double *get(tj_tree *t, const char *nm, int64_t *n) {
    tj_array *a;
    double *d;
    if (tj_tree_find(t, nm) < 0 || !(a = tj_tree_array(t, nm))) {
        TJT_CHECK(0, "no output '%s'", nm);
        if (n) *n = 0;
        return NULL;
    }
    d = (double *)malloc(sizeof(double) * (size_t)(tj_array_numel(a) + 1));
    tj_array_read(a, TJ_F64, d);
    if (n) *n = tj_array_numel(a);
    return d;
}
static double *arr(tj_array *a) {
    double *d = (double *)malloc(sizeof(double) * (size_t)(tj_array_numel(a) + 1));
    tj_array_read(a, TJ_F64, d);
    return d;
}
static double maxdiff(const double *a, const double *b, int64_t n) {
    double m = 0;
    int64_t i;
    if (!a || !b) return 1e30;
    for (i = 0; i < n; i++)
        if (!(fabs(a[i] - b[i]) <= m)) m = fabs(a[i] - b[i]);
    return m;
}
/* does the scheduled program text contain s? */
static int prog_has(tj_prog *p, const char *s) { return TJT_PROG_LINES(p, s) > 0; }

/* -------------------------------------------- one traced function per op ---
   `user` is the case name; leaves a, b, c (float) and idx (i32) are used as
   the case needs. Outputs "y" (the op's result) and "loss" (a weighted sum
   of y, or for "2s:" cases a plain sum of a first gradient). */
static tj_v op_y(const char *c, tj_v a, tj_v b, tj_v cc, tj_v idx) {
#define IS(s) (strcmp(c, s) == 0)
    /* unary */
    if (IS("neg")) return tj_neg(a);
    if (IS("exp")) return tj_exp(a);
    if (IS("log")) return tj_log(a);
    if (IS("tanh")) return tj_tanh(a);
    if (IS("sqrt")) return tj_sqrt(a);
    if (IS("rsqrt")) return tj_rsqrt(a);
    if (IS("sigmoid")) return tj_sigmoid(a);
    if (IS("sin")) return tj_sin(a);
    if (IS("cos")) return tj_cos(a);
    if (IS("abs")) return tj_abs(a);
    if (IS("sign")) return tj_sign(a);
    if (IS("log1p")) return tj_log1p(a);
    if (IS("expm1")) return tj_expm1(a);
    if (IS("erf")) return tj_erf(a);
    if (IS("softplus")) return tj_softplus(a);
    if (IS("clip")) return tj_clip(a, -0.5, 0.75);
    if (IS("stack")) {
        tj_v xs[3];
        xs[0] = a, xs[1] = b, xs[2] = cc;
        return tj_stack(3, xs, "k");
    }
    if (IS("gelu_exact")) return tj_mul(tj_muls(a, 0.5), tj_adds(tj_erf(tj_muls(a, 0.7071067811865476)), 1.0));
    if (IS("relu")) return tj_relu(a);
    if (IS("gelu")) return tj_gelu(a);
    if (IS("pows3")) return tj_pows(a, 3.0);
    if (IS("pows0.5")) return tj_pows(a, 0.5);
    if (IS("cast64")) return tj_cast(a, TJ_F64);
    if (IS("cast32-64")) return tj_mul(tj_cast(tj_cast(a, TJ_F32), TJ_F64), tj_cast(a, TJ_F64));
    /* binary (b's shape varies per tree) */
    if (IS("add")) return tj_add(a, b);
    if (IS("sub")) return tj_sub(a, b);
    if (IS("mul")) return tj_mul(a, b);
    if (IS("div")) return tj_div(a, b);
    if (IS("max2")) return tj_max2(a, b);
    if (IS("min2")) return tj_min2(a, b);
    if (IS("adds")) return tj_adds(a, 1.5);
    if (IS("muls")) return tj_muls(a, -2.5);
    if (IS("select")) return tj_select(tj_gt(a, b), tj_mul(a, a), b);
    /* reductions */
    if (IS("sum:y")) return tj_sum(a, "y");
    if (IS("sum:x")) return tj_sum(a, "x");
    if (IS("sum:x z")) return tj_sum(a, "x z");
    if (IS("mean:x")) return tj_mean(a, "x");
    if (IS("mean:z x")) return tj_mean(a, "z x");
    if (IS("max:y")) return tj_max(a, "y");
    if (IS("max:x")) return tj_max(a, "x");
    if (IS("max:x z")) return tj_max(a, "x z");
    if (IS("min:y")) return tj_min(a, "y");
    if (IS("min:x z")) return tj_min(a, "x z");
    /* dot */
    if (IS("dot:k")) return tj_dot(a, b, "k");
    if (IS("dot:k1 k2")) return tj_dot(a, b, "k1 k2");
    if (IS("dot:k2 k1")) return tj_dot(a, b, "k2 k1");
    /* shapes */
    if (IS("rename")) return tj_mul(tj_rename(a, "y", "w"), b); /* b has axis w */
    if (IS("transpose")) return tj_transpose(a, "z x y");
    if (IS("split:h d=0")) return tj_split(a, "y", "h=2 d=0");
    if (IS("split:h=0 d")) return tj_mul(tj_split(a, "y", "h=0 d=3"), b); /* b "d=3" */
    if (IS("merge")) return tj_merge(a, "y z", "yz");
    if (IS("slice")) return tj_slice(a, "x", 1, 4);
    if (IS("concat")) {
        tj_v xs[3];
        xs[0] = a; xs[1] = b; xs[2] = cc;
        return tj_concat(3, xs, "y");
    }
    if (IS("pad")) return tj_pad(a, "x", 1, 2, 0.5);
    if (IS("broadcast")) return tj_broadcast(a, "y=2 x=3 z=4");
    if (IS("take")) return tj_take(a, "vocab", idx);
    if (IS("take:mid")) return tj_take(a, "v", idx); /* a [p, v, q]: pre and post extents */
    if (IS("one_hot")) return tj_one_hot(idx, "cls=5", TJ_F64);
    /* nn */
    if (IS("causal_mask")) return tj_causal_mask(a, "q", "k", -3.0);
    if (IS("softmax:k")) return tj_softmax(a, "k");
    if (IS("softmax:q")) return tj_softmax(a, "q");
    if (IS("log_softmax:k")) return tj_log_softmax(a, "k");
    if (IS("log_softmax:q")) return tj_log_softmax(a, "q");
    if (IS("layer_norm:e")) return tj_layer_norm(a, "e", 1e-5);
    if (IS("layer_norm:p")) return tj_layer_norm(a, "p", 1e-5);
    if (IS("cross_entropy")) return tj_cross_entropy(a, idx, "cls", "pos b");
    if (IS("cross_entropy:nomean")) return tj_cross_entropy(a, idx, "cls", NULL);
    /* squares: their second derivative also flows through the cotangent
       input of the row ops' gradient ops (layer_norm_grad, ...) */
    if (IS("sq:layer_norm")) return tj_pows(tj_layer_norm(a, "e", 1e-5), 2.0);
    if (IS("sq:softmax")) return tj_pows(tj_softmax(a, "k"), 2.0);
    if (IS("sq:cross_entropy")) return tj_pows(tj_cross_entropy(a, idx, "cls", NULL), 2.0);
    /* attention: a = q [.., q, d], b = k [.., k, d], c = v [.., k, e or d] */
    if (IS("attention")) return tj_attention(a, b, cc, "q", "k", "d", 0.7, 0);
    if (IS("attention:causal")) return tj_attention(a, b, cc, "q", "k", "d", 0, 1);
    if (IS("attention:samepos")) return tj_attention(a, b, cc, "q", "q", "d", 0, 1); /* keys on q's own axis name */
    if (IS("attention:composed") || IS("attention:composed causal")) { /* the same from dot, causal_mask and softmax */
        tj_v s = tj_dot(tj_muls(a, IS("attention:composed") ? 0.7 : 1.0 / sqrt((double)tj_v_dim(a, "d"))), b, "d");
        if (IS("attention:composed causal")) s = tj_causal_mask(s, "q", "k", -INFINITY);
        return tj_dot(tj_softmax(s, "k"), cc, "k");
    }
    /* attention's log-sum-exp output feeds the backward through d_lse too
       when the loss uses the output's square (a second output use) */
    if (IS("attention:sq")) return tj_pows(tj_attention(a, b, cc, "q", "k", "d", 0.5, 1), 2.0);
    if (IS("dropout")) return tj_dropout(a, 1234, 0.3);
    if (IS("checkpoint_name")) return tj_mul(tj_checkpoint_name(tj_exp(a), "act"), a);
    /* second order of any case: y = d/da wsum(case) */
    if (c[0] == '2' && c[1] == ':') {
        tj_v f = wsum(op_y(c + 2, a, b, cc, idx), 99), ga = NULL;
        if (!f || tj_grad(f, 1, &a, &ga) != TJ_OK) return NULL;
        return ga;
    }
    /* second order: y = d/da of a scalar f */
    if (IS("2s:gelu") || IS("2s:tanh2") || IS("2w:layer_norm") || IS("2w:softmax") || IS("2w:dot")) {
        tj_v f = NULL, ga = NULL;
        if (IS("2s:gelu")) f = sum_all(tj_mul(tj_gelu(a), b));
        if (IS("2s:tanh2")) f = sum_all(tj_pows(tj_tanh(a), 2.0));
        if (IS("2w:layer_norm")) f = wsum(tj_layer_norm(a, "e", 1e-5), 99);
        if (IS("2w:softmax")) f = wsum(tj_softmax(a, "k"), 99);
        if (IS("2w:dot")) f = wsum(tj_tanh(tj_dot(a, b, "k")), 99);
        if (!f || tj_grad(f, 1, &a, &ga) != TJ_OK) return NULL;
        return ga;
    }
#undef IS
    return NULL;
}
static void op_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const char *c = (const char *)u;
    tj_v y = op_y(c, leaf(in, "a"), leaf(in, "b"), leaf(in, "c"), leaf(in, "idx"));
    (void)g;
    if (!y) {
        if (tj_status_of(tj_graph_ctx(g)) == TJ_OK) fprintf(stderr, "op_fn: unknown case '%s'\n", c);
        return;
    }
    tj_tree_set_v(out, "y", y);
    if (tj_v_dtype(y) == TJ_I32) return;
    if (c[0] == '2' && c[1] == 's') tj_tree_set_v(out, "loss", sum_all(y));
    else tj_tree_set_v(out, "loss", wsum(y, 7));
}

/* build a tree of f64 leaves a, b, c (shape "" = absent) in [lo, hi) */
static unsigned seed_ctr = 100;
static tj_tree *tree3(tj_ctx *ctx, const char *sa, const char *sb, const char *sc, double lo, double hi) {
    tj_tree *in = tj_tree_new(ctx);
    if (sa) tj_tree_set_array(in, "a", tjt_rand(ctx, TJ_F64, sa, seed_ctr++, lo, hi));
    if (sb) tj_tree_set_array(in, "b", tjt_rand(ctx, TJ_F64, sb, seed_ctr++, lo, hi));
    if (sc) tj_tree_set_array(in, "c", tjt_rand(ctx, TJ_F64, sc, seed_ctr++, lo, hi));
    return in;
}
/* gradient-check case c on a fresh tree, w.r.t. the leaves in wrt */
static void gcw(tj_ctx *ctx, const char *c, const char *sa, const char *sb, const char *sc, double lo, double hi, const char *wrt) {
    tj_tree *in = tree3(ctx, sa, sb, sc, lo, hi);
    char what[128];
    snprintf(what, sizeof what, "%s a[%s] b[%s]", c, sa ? sa : "", sb ? sb : "");
    /* second-order checks difference a gradient: a little less precise */
    tjt_gradcheck(__FILE__, __LINE__, ctx, what, op_fn, (void *)c, in, wrt, c[0] == '2' ? 1e-5 : 1e-6);
    tj_tree_free(in);
}
static void gc(tj_ctx *ctx, const char *c, const char *sa, const char *sb, const char *sc, double lo, double hi) { gcw(ctx, c, sa, sb, sc, lo, hi, "a b c"); }

/* ------------------------------------------------ 1. gradient checks --- */
static void test_grads(tj_ctx *ctx) {
    static const char *bops[] = {"add", "sub", "mul", "div", "max2", "min2"};
    static const char *bshapes[] = {"y=4", "z=2 x=3", "z=2 y=4 x=3"};
    int i, j;
    tj_tree *in;

    tjt_current = "grad: unary";
    gc(ctx, "neg", "r=3 c=4", NULL, NULL, -1, 1);
    gc(ctx, "exp", "r=3 c=4", NULL, NULL, -1, 1);
    gc(ctx, "log", "r=3 c=4", NULL, NULL, 0.3, 2);
    gc(ctx, "tanh", "r=3 c=4", NULL, NULL, -2, 2);
    gc(ctx, "sqrt", "r=3 c=4", NULL, NULL, 0.3, 2);
    gc(ctx, "rsqrt", "r=3 c=4", NULL, NULL, 0.3, 2);
    gc(ctx, "sigmoid", "r=3 c=4", NULL, NULL, -4, 4);
    gc(ctx, "sin", "r=3 c=4", NULL, NULL, -4, 4);
    gc(ctx, "cos", "r=3 c=4", NULL, NULL, -4, 4);
    gc(ctx, "abs", "r=3 c=4", NULL, NULL, 0.1, 2);  /* (finite differences across 0 would see the kink) */
    gc(ctx, "abs", "r=3 c=4", NULL, NULL, -2, -0.1);
    gc(ctx, "sign", "r=3 c=4", NULL, NULL, -2, -0.1); /* zero */
    gc(ctx, "log1p", "r=3 c=4", NULL, NULL, -0.7, 3);
    gc(ctx, "expm1", "r=3 c=4", NULL, NULL, -2, 2);
    gc(ctx, "erf", "r=3 c=4", NULL, NULL, -2, 2);
    gc(ctx, "gelu_exact", "r=3 c=4", NULL, NULL, -3, 3);
    gc(ctx, "clip", "r=3 c=4", NULL, NULL, -2, 2);
    gc(ctx, "stack", "r=3 c=4", "r=3 c=4", "r=3 c=4", -2, 2);
    gc(ctx, "softplus", "r=3 c=4", NULL, NULL, -6, 6);
    gc(ctx, "relu", "r=3 c=4", NULL, NULL, -1, 1);
    gc(ctx, "gelu", "r=3 c=4", NULL, NULL, -3, 3);
    gc(ctx, "pows3", "r=3 c=4", NULL, NULL, -1, 1);
    gc(ctx, "pows0.5", "r=3 c=4", NULL, NULL, 0.3, 2);
    gc(ctx, "cast64", "r=3 c=4", NULL, NULL, -1, 1);
    /* f64 -> f32 -> f64: the f32 rounding makes finite differences coarse */
    in = tree3(ctx, "r=3 c=4", NULL, NULL, 0.5, 1);
    tjt_gradcheck(__FILE__, __LINE__, ctx, "cast f64->f32->f64", op_fn, (void *)"cast32-64", in, "a", 0.1);
    tj_tree_free(in);
    /* an f32 leaf cast up to f64 (the gradient is cast back down) */
    in = tj_tree_new(ctx);
    tj_tree_set_array(in, "a", tjt_rand(ctx, TJ_F32, "r=3 c=4", 7, -1, 1));
    tjt_gradcheck(__FILE__, __LINE__, ctx, "cast f32->f64", op_fn, (void *)"cast64", in, "a", 1e-3);
    tj_tree_free(in);

    tjt_current = "grad: binary, broadcasting by name";
    for (i = 0; i < 6; i++)
        for (j = 0; j < 3; j++) {
            int div = strcmp(bops[i], "div") == 0;
            tj_tree *t = tj_tree_new(ctx);
            char what[128];
            tj_tree_set_array(t, "a", tjt_rand(ctx, TJ_F64, "x=3 y=4 z=2", seed_ctr++, -1, 1));
            tj_tree_set_array(t, "b", tjt_rand(ctx, TJ_F64, bshapes[j], seed_ctr++, div ? 0.5 : -1, div ? 2 : 1));
            snprintf(what, sizeof what, "%s a[x=3 y=4 z=2] b[%s]", bops[i], bshapes[j]);
            tjt_gradcheck(__FILE__, __LINE__, ctx, what, op_fn, (void *)bops[i], t, "a b", 1e-6);
            /* and with the operands swapped: b's axes first, a's extra ones after */
            tj_tree_free(t);
            t = tj_tree_new(ctx);
            tj_tree_set_array(t, "a", tjt_rand(ctx, TJ_F64, bshapes[j], seed_ctr++, -1, 1));
            tj_tree_set_array(t, "b", tjt_rand(ctx, TJ_F64, "x=3 y=4 z=2", seed_ctr++, div ? 0.5 : -1, div ? 2 : 1));
            snprintf(what, sizeof what, "%s a[%s] b[x=3 y=4 z=2]", bops[i], bshapes[j]);
            tjt_gradcheck(__FILE__, __LINE__, ctx, what, op_fn, (void *)bops[i], t, "a b", 1e-6);
            tj_tree_free(t);
        }
    gc(ctx, "adds", "x=3 y=4", NULL, NULL, -1, 1);
    gc(ctx, "muls", "x=3 y=4", NULL, NULL, -1, 1);
    gc(ctx, "select", "x=3 y=4", "y=4", NULL, -1, 1);
    gc(ctx, "select", "x=3 y=4", "y=4 x=3", NULL, -1, 1);

    tjt_current = "grad: reductions";
    gc(ctx, "sum:y", "x=3 y=4 z=2", NULL, NULL, -1, 1);
    gc(ctx, "sum:x", "x=3 y=4 z=2", NULL, NULL, -1, 1);
    gc(ctx, "sum:x z", "x=3 y=4 z=2", NULL, NULL, -1, 1);
    gc(ctx, "mean:x", "x=3 y=4 z=2", NULL, NULL, -1, 1);
    gc(ctx, "mean:z x", "x=3 y=4 z=2", NULL, NULL, -1, 1);
    gc(ctx, "max:y", "x=3 y=4 z=2", NULL, NULL, -1, 1);
    gc(ctx, "max:x", "x=3 y=4 z=2", NULL, NULL, -1, 1);
    gc(ctx, "max:x z", "x=3 y=4 z=2", NULL, NULL, -1, 1);
    gc(ctx, "min:y", "x=3 y=4 z=2", NULL, NULL, -1, 1);
    gc(ctx, "min:x z", "x=3 y=4 z=2", NULL, NULL, -1, 1);

    tjt_current = "grad: dot";
    gc(ctx, "dot:k", "m=3 k=4", "k=4 n=5", NULL, -1, 1);                 /* plain */
    gc(ctx, "dot:k", "bt=2 m=3 k=4", "bt=2 k=4 n=5", NULL, -1, 1);       /* batch */
    gc(ctx, "dot:k", "bt=2 m=3 k=4", "k=4 n=5 bt=2", NULL, -1, 1);       /* batch, b relaid */
    gc(ctx, "dot:k1 k2", "m=3 k1=2 k2=4", "k1=2 k2=4 n=3", NULL, -1, 1); /* two contracting */
    gc(ctx, "dot:k2 k1", "m=3 k1=2 k2=4", "k2=4 n=3 k1=2", NULL, -1, 1);
    gc(ctx, "dot:k", "k=4 m=3", "n=5 k=4", NULL, -1, 1);                 /* transposed layouts */
    gc(ctx, "dot:k", "m=3 k=4 p=2", "k=4 n=5", NULL, -1, 1);             /* middle axis: relayout */
    gc(ctx, "dot:k", "k=4", "k=4 n=3", NULL, -1, 1);                     /* vector x matrix */
    gc(ctx, "dot:k", "m=3 k=4", "k=4", NULL, -1, 1);                     /* matrix x vector */
    gc(ctx, "dot:k", "bt=2 k=4", "bt=2 k=4", NULL, -1, 1);               /* batched inner product */

    tjt_current = "grad: shape ops";
    gc(ctx, "rename", "x=3 y=4", "w=4", NULL, -1, 1);
    gc(ctx, "transpose", "x=3 y=4 z=2", NULL, NULL, -1, 1);
    gc(ctx, "split:h d=0", "x=3 y=6", NULL, NULL, -1, 1);
    gc(ctx, "split:h=0 d", "x=3 y=6", "d=3", NULL, -1, 1);
    gc(ctx, "merge", "x=3 y=4 z=2", NULL, NULL, -1, 1);
    gc(ctx, "slice", "x=5 y=4", NULL, NULL, -1, 1);
    gc(ctx, "concat", "x=2 y=3 z=2", "x=2 y=1 z=2", "x=2 y=4 z=2", -1, 1);
    gc(ctx, "pad", "x=3 y=4", NULL, NULL, -1, 1);
    gc(ctx, "broadcast", "x=3", NULL, NULL, -1, 1);
    {
        int32_t ix[6] = {0, 2, 2, 4, 0, 2}, ix2[3] = {3, 1, 3};
        in = tree3(ctx, "vocab=5 embed=3", NULL, NULL, -1, 1);
        tj_tree_set_array(in, "idx", tj_array_new(ctx, TJ_I32, "bt=2 p=3", ix));
        tjt_gradcheck(__FILE__, __LINE__, ctx, "take (embedding, repeated indices)", op_fn, (void *)"take", in, "a", 1e-6);
        tj_tree_free(in);
        in = tree3(ctx, "p=2 v=4 q=3", NULL, NULL, -1, 1);
        tj_tree_set_array(in, "idx", tj_array_new(ctx, TJ_I32, "j=3", ix2));
        tjt_gradcheck(__FILE__, __LINE__, ctx, "take (middle axis)", op_fn, (void *)"take:mid", in, "a", 1e-6);
        tj_tree_free(in);
    }

    tjt_current = "grad: attention";
    gc(ctx, "attention", "h=2 q=3 d=4", "k=5 d=4 h=2", "h=2 k=5 d=3", -1, 1);      /* k, v relaid; dim' 3 */
    gc(ctx, "attention:causal", "q=4 h=2 d=3", "h=2 k=4 d=3", "k=4 h=2 d=3", -1, 1);
    gc(ctx, "attention:causal", "b=2 q=3 d=2", "b=2 k=5 d=2", "b=2 k=5 d=4", -1, 1); /* fewer queries than keys */
    gc(ctx, "attention:causal", "q=5 d=3", "k=2 d=3", "k=2 d=3", -1, 1);           /* more queries than keys */
    gc(ctx, "attention:sq", "h=2 q=4 d=3", "h=2 k=4 d=3", "h=2 k=4 d=3", -2, 2);
    gc(ctx, "attention", "q=1 d=1", "k=1 d=1", "k=1 d=1", -1, 1);                  /* size-1 axes */
    gc(ctx, "attention:samepos", "h=2 q=4 d=3", "q=4 d=3 h=2", "h=2 q=4 d=2", -1, 1);

    tjt_current = "grad: nn ops";
    gc(ctx, "causal_mask", "q=4 k=4 h=2", NULL, NULL, -1, 1);
    gc(ctx, "softmax:k", "q=3 k=4 h=2", NULL, NULL, -2, 2);
    gc(ctx, "softmax:q", "q=3 k=4 h=2", NULL, NULL, -2, 2);
    gc(ctx, "log_softmax:k", "q=3 k=4 h=2", NULL, NULL, -2, 2);
    gc(ctx, "log_softmax:q", "q=3 k=4 h=2", NULL, NULL, -2, 2);
    gc(ctx, "layer_norm:e", "p=3 e=5", NULL, NULL, -2, 2);
    gc(ctx, "layer_norm:p", "p=4 e=3", NULL, NULL, -2, 2);
    {
        int32_t lab[6] = {0, 3, 1, 2, 3, 0}; /* labels [b=2, pos=3], logits [pos=3, b=2, cls=4] */
        in = tree3(ctx, "pos=3 b=2 cls=4", NULL, NULL, -2, 2);
        tj_tree_set_array(in, "idx", tj_array_new(ctx, TJ_I32, "b=2 pos=3", lab));
        tjt_gradcheck(__FILE__, __LINE__, ctx, "cross_entropy (labels in another order)", op_fn, (void *)"cross_entropy", in, "a", 1e-6);
        tjt_gradcheck(__FILE__, __LINE__, ctx, "cross_entropy (no mean)", op_fn, (void *)"cross_entropy:nomean", in, "a", 1e-6);
        tj_tree_free(in);
        in = tree3(ctx, "cls=4 pos=3 b=2", NULL, NULL, -2, 2); /* class axis first */
        tj_tree_set_array(in, "idx", tj_array_new(ctx, TJ_I32, "b=2 pos=3", lab));
        tjt_gradcheck(__FILE__, __LINE__, ctx, "cross_entropy (class axis first)", op_fn, (void *)"cross_entropy", in, "a", 1e-6);
        tj_tree_free(in);
    }
    gc(ctx, "dropout", "x=6 y=5", NULL, NULL, -1, 1);
    gc(ctx, "checkpoint_name", "x=3 y=4", NULL, NULL, -1, 1);

    tjt_current = "grad: second order";
    gc(ctx, "2s:gelu", "x=3 y=4", "x=3 y=4", NULL, -2, 2);
    gc(ctx, "2s:tanh2", "x=3 y=4", NULL, NULL, -1.5, 1.5);
    gc(ctx, "2w:layer_norm", "p=3 e=5", NULL, NULL, -2, 2);
    gc(ctx, "2w:softmax", "q=3 k=4", NULL, NULL, -2, 2);
    gc(ctx, "2w:dot", "m=3 k=4", "k=4 n=2", NULL, -1, 1);
    /* d/da of wsum(op): the backward graph of each op differentiated again
       (only w.r.t. leaves the first gradient depends on smoothly: finite
       differences of an exactly-zero derivative are pure noise) */
    gc(ctx, "2:exp", "x=3 y=4", NULL, NULL, -1, 1);
    gc(ctx, "2:log", "x=3 y=4", NULL, NULL, 0.5, 2);
    gc(ctx, "2:tanh", "x=3 y=4", NULL, NULL, -1, 1);
    gc(ctx, "2:sqrt", "x=3 y=4", NULL, NULL, 0.5, 2);
    gc(ctx, "2:rsqrt", "x=3 y=4", NULL, NULL, 0.5, 2);
    gc(ctx, "2:gelu", "x=3 y=4", NULL, NULL, -2, 2);
    gc(ctx, "2:pows3", "x=3 y=4", NULL, NULL, -1, 1);
    gc(ctx, "2:pows0.5", "x=3 y=4", NULL, NULL, 0.5, 2);
    gc(ctx, "2:cast64", "x=3 y=4", NULL, NULL, -1, 1); /* zero: linear (exact 0 both ways) */
    gcw(ctx, "2:mul", "x=3 y=4 z=2", "z=2 x=3", NULL, -1, 1, "b");
    gcw(ctx, "2:div", "x=3 y=4 z=2", "z=2 x=3", NULL, 0.5, 2, "a b");
    gc(ctx, "2:select", "x=3 y=4", "y=4", NULL, -1, 1);
    gcw(ctx, "2:dot:k", "k=4 m=3", "n=5 k=4", NULL, -1, 1, "b");
    gcw(ctx, "2:dot:k", "m=3 k=4 p=2", "k=4 n=5", NULL, -1, 1, "b");
    gc(ctx, "2:softmax:k", "q=3 k=4 h=2", NULL, NULL, -2, 2);
    gc(ctx, "2:softmax:q", "q=3 k=4 h=2", NULL, NULL, -2, 2);
    gc(ctx, "2:log_softmax:q", "q=3 k=4 h=2", NULL, NULL, -2, 2);
    gc(ctx, "2:layer_norm:p", "p=4 e=3", NULL, NULL, -2, 2);
    gc(ctx, "2:sq:layer_norm", "e=5 p=3", NULL, NULL, -2, 2);
    gc(ctx, "2:sq:softmax", "q=3 k=4 h=2", NULL, NULL, -2, 2);
    gc(ctx, "2:checkpoint_name", "x=3 y=4", NULL, NULL, -1, 1);
    {
        int32_t lab[6] = {0, 3, 1, 2, 3, 0};
        in = tree3(ctx, "pos=3 b=2 cls=4", NULL, NULL, -2, 2);
        tj_tree_set_array(in, "idx", tj_array_new(ctx, TJ_I32, "b=2 pos=3", lab));
        tjt_gradcheck(__FILE__, __LINE__, ctx, "2:cross_entropy", op_fn, (void *)"2:cross_entropy:nomean", in, "a", 1e-5);
        tjt_gradcheck(__FILE__, __LINE__, ctx, "2:sq:cross_entropy", op_fn, (void *)"2:sq:cross_entropy", in, "a", 1e-5);
        tj_tree_free(in);
    }
}

/* stop_gradient: d/da sum(exp(stop(a)) * b) = 0, d/db = exp(a) */
static void stop_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v a = tj_tree_v(in, "a"), b = tj_tree_v(in, "b"), w[2], gr[2];
    tj_v f = sum_all(tj_mul(tj_exp(tj_stop_gradient(a)), b));
    (void)g; (void)u;
    w[0] = a; w[1] = b;
    if (tj_grad(f, 2, w, gr) != TJ_OK) return;
    tj_tree_set_v(out, "ga", gr[0]);
    tj_tree_set_v(out, "gb", gr[1]);
    tj_tree_set_v(out, "y", tj_stop_gradient(a)); /* identity forward */
}
static void test_stop_gradient(tj_ctx *ctx) {
    tj_tree *in = tree3(ctx, "x=3 y=4", "x=3 y=4", NULL, -1, 1), *out;
    double *a, *ga, *gb, *y, e[12], z[12];
    int i;
    tjt_current = "stop_gradient";
    out = run_fn(ctx, "stop", stop_fn, NULL, in);
    a = arr(tj_tree_array(in, "a"));
    ga = get(out, "ga", NULL);
    gb = get(out, "gb", NULL);
    y = get(out, "y", NULL);
    for (i = 0; i < 12; i++) { e[i] = exp(a[i]); z[i] = 0; }
    TJT_CHECK(maxdiff(ga, z, 12) == 0, "gradient through stop_gradient is not zero");
    TJT_CHECK(maxdiff(gb, e, 12) < 1e-12, "gradient beside stop_gradient is wrong");
    TJT_CHECK(maxdiff(y, a, 12) == 0, "stop_gradient is not the identity");
    free(a); free(ga); free(gb); free(y);
    tj_tree_free(out);
    tj_tree_free(in);
}

/* ------------------------------------------------ 2. forward values --- */
static tj_tree *fwd(tj_ctx *ctx, const char *c, tj_tree *in) { return run_fn(ctx, c, op_fn, (void *)c, in); }

static void test_dot_values(tj_ctx *ctx) {
    /* f64: every layout against a naive loop over named indices */
    static const char *la[] = {"bt=2 m=3 k=5", "k=5 m=3 bt=2", "m=3 bt=2 k=5", "bt=2 k=5 m=3"};
    static const char *lb[] = {"bt=2 k=5 n=4", "n=4 k=5 bt=2", "bt=2 n=4 k=5", "k=5 bt=2 n=4"};
    int ia, ib;
    tjt_current = "values: dot";
    for (ia = 0; ia < 4; ia++)
        for (ib = 0; ib < 4; ib++) {
            tj_tree *in = tree3(ctx, la[ia], lb[ib], NULL, -1, 1), *out = fwd(ctx, "dot:k", in);
            tj_array *A = tj_tree_array(in, "a"), *B = tj_tree_array(in, "b"), *Y;
            double *a = arr(A), *b = arr(B), *y = get(out, "y", NULL), worst = 0;
            int64_t sa[TJ_MAXDIM], sb[TJ_MAXDIM], sy[TJ_MAXDIM];
            int bt, m, n, k;
            /* strides by axis name */
            const char *nm[4] = {"bt", "m", "k", "n"};
            int d;
            Y = tj_tree_find(out, "y") >= 0 ? tj_tree_array(out, "y") : NULL;
            TJT_CHECK(Y && tj_array_rank(Y) == 3 && tj_array_dim(Y, "bt") == 2 && tj_array_dim(Y, "m") == 3 && tj_array_dim(Y, "n") == 4,
                      "dot result shape wrong for a[%s] b[%s]", la[ia], lb[ib]);
            if (!Y || !y) { free(a); free(b); free(y); tj_tree_free(in); tj_tree_free(out); continue; }
            for (d = 0; d < 4; d++) {
                sa[d] = sb[d] = sy[d] = 0;
            }
            /* row-major strides of each array, looked up per axis name */
            {
                tj_array *X[3];
                int64_t *S[3];
                int q;
                X[0] = A; X[1] = B; X[2] = Y;
                S[0] = sa; S[1] = sb; S[2] = sy;
                for (q = 0; q < 3; q++) {
                    int r;
                    for (d = 0; d < 4; d++) {
                        int64_t s = 1;
                        if (tj_array_dim(X[q], nm[d]) < 0) continue;
                        /* product of the sizes of the axes after this one */
                        for (r = tj_array_rank(X[q]) - 1; r >= 0 && strcmp(tjt_array_axis(X[q], r), nm[d]) != 0; r--) s *= tjt_array_dim_at(X[q], r);
                        S[q][d] = s;
                    }
                }
            }
            for (bt = 0; bt < 2; bt++)
                for (m = 0; m < 3; m++)
                    for (n = 0; n < 4; n++) {
                        double s = 0, got;
                        for (k = 0; k < 5; k++) s += a[bt * sa[0] + m * sa[1] + k * sa[2]] * b[bt * sb[0] + k * sb[2] + n * sb[3]];
                        got = y[bt * sy[0] + m * sy[1] + n * sy[3]];
                        if (fabs(got - s) > worst) worst = fabs(got - s);
                    }
            TJT_CHECK(worst < 1e-12, "dot a[%s] b[%s] differs from the naive loop by %g", la[ia], lb[ib], worst);
            free(a); free(b); free(y);
            tj_tree_free(in);
            tj_tree_free(out);
        }
    /* the layout rules: transposed operands are used in place, others relaid */
    {
        tj_tree *in = tree3(ctx, "k=4 m=3", "n=5 k=4", NULL, -1, 1);
        tj_prog *p = tj_jit(ctx, "dot T", op_fn, (void *)"dot:k", in, NULL);
        TJT_CHECK(p && prog_has(p, "aT bT") && !prog_has(p, "relayout"), "a=[k,m], b=[n,k] should use the transposed kernel without a copy");
        tj_prog_free(p);
        tj_tree_free(in);
        in = tree3(ctx, "m=3 k=4 p=2", "k=4 n=5", NULL, -1, 1);
        p = tj_jit(ctx, "dot mid", op_fn, (void *)"dot:k", in, NULL);
        TJT_CHECK(p && prog_has(p, "relayout"), "contracting a middle axis should insert a relayout");
        tj_prog_free(p);
        tj_tree_free(in);
    }
    /* f32: the dot equals tj__sgemm on the same data, and is close to a double loop */
    {
        tj_tree *in = tj_tree_new(ctx), *out;
        float A[7 * 9], B[9 * 5], C[7 * 5];
        double *y;
        int i, j, k;
        double werr = 0;
        tj_tree_set_array(in, "a", tjt_rand(ctx, TJ_F32, "m=7 k=9", 41, -1, 1));
        tj_tree_set_array(in, "b", tjt_rand(ctx, TJ_F32, "k=9 n=5", 42, -1, 1));
        tj_array_read(tj_tree_array(in, "a"), TJ_F32, A);
        tj_array_read(tj_tree_array(in, "b"), TJ_F32, B);
        tjt_sgemm(0, 0, 7, 5, 9, A, 9, B, 5, C, 5, 0, 1);
        out = fwd(ctx, "dot:k", in);
        y = get(out, "y", NULL);
        if (y) {
            int same = 1;
            for (i = 0; i < 35; i++) same &= (float)y[i] == C[i];
            TJT_CHECK(same, "f32 dot differs from tj__sgemm");
            for (i = 0; i < 7; i++)
                for (j = 0; j < 5; j++) {
                    double s = 0;
                    for (k = 0; k < 9; k++) s += (double)A[i * 9 + k] * B[k * 5 + j];
                    if (fabs(s - y[i * 5 + j]) > werr) werr = fabs(s - y[i * 5 + j]);
                }
            TJT_CHECK(werr < 1e-5, "f32 dot vs double loop: %g", werr);
        }
        free(y);
        tj_tree_free(out);
        tj_tree_free(in);
    }
}

static void test_row_values(tj_ctx *ctx) {
    tj_tree *in, *out;
    double *a, *y;
    int q, k, h, i;
    tjt_current = "values: softmax, log_softmax, layer_norm, cross_entropy";
    in = tree3(ctx, "q=3 k=4 h=2", NULL, NULL, -3, 3);
    a = arr(tj_tree_array(in, "a"));
    /* softmax over a non-last axis: sums to 1 along q, and equals exp(x)/sum */
    out = fwd(ctx, "softmax:q", in);
    y = get(out, "y", NULL);
    if (y) {
        double worst = 0, wv = 0;
        for (k = 0; k < 4; k++)
            for (h = 0; h < 2; h++) {
                double s = 0, z = 0;
                for (q = 0; q < 3; q++) { s += y[q * 8 + k * 2 + h]; z += exp(a[q * 8 + k * 2 + h]); }
                if (fabs(s - 1) > worst) worst = fabs(s - 1);
                for (q = 0; q < 3; q++)
                    if (fabs(y[q * 8 + k * 2 + h] - exp(a[q * 8 + k * 2 + h]) / z) > wv) wv = fabs(y[q * 8 + k * 2 + h] - exp(a[q * 8 + k * 2 + h]) / z);
            }
        TJT_CHECK(worst < 1e-14 && wv < 1e-14, "softmax over q: rows sum off by %g, values by %g", worst, wv);
    }
    free(y);
    tj_tree_free(out);
    out = fwd(ctx, "log_softmax:k", in);
    y = get(out, "y", NULL);
    if (y) {
        double wv = 0;
        for (q = 0; q < 3; q++)
            for (h = 0; h < 2; h++) {
                double z = 0;
                for (k = 0; k < 4; k++) z += exp(a[q * 8 + k * 2 + h]);
                for (k = 0; k < 4; k++)
                    if (fabs(y[q * 8 + k * 2 + h] - (a[q * 8 + k * 2 + h] - log(z))) > wv) wv = fabs(y[q * 8 + k * 2 + h] - (a[q * 8 + k * 2 + h] - log(z)));
            }
        TJT_CHECK(wv < 1e-13, "log_softmax over k (middle axis) off by %g", wv);
    }
    free(y);
    tj_tree_free(out);
    out = fwd(ctx, "causal_mask", in); /* a is q=3 k=4 h=2 */
    y = get(out, "y", NULL);
    if (y) {
        int ok = 1;
        for (q = 0; q < 3; q++)
            for (k = 0; k < 4; k++)
                for (h = 0; h < 2; h++) ok &= y[q * 8 + k * 2 + h] == (k > q ? -3.0 : a[q * 8 + k * 2 + h]);
        TJT_CHECK(ok, "causal_mask values");
    }
    free(y);
    tj_tree_free(out);
    free(a);
    tj_tree_free(in);

    /* softmax with huge logits stays finite */
    in = tj_tree_new(ctx);
    {
        double big[4] = {1000, 1001, -1000, 1002};
        tj_tree_set_array(in, "a", tj_array_new(ctx, TJ_F64, "q=1 k=4", big));
        out = fwd(ctx, "softmax:k", in);
        y = get(out, "y", NULL);
        if (y) {
            double z = 1 + exp(-1.0) + exp(-2.0);
            TJT_CHECK(fabs(y[3] - 1 / z) < 1e-14 && y[2] == 0 && fabs(y[0] - exp(-2.0) / z) < 1e-14, "softmax of large logits: %g %g %g %g", y[0], y[1], y[2], y[3]);
        }
        free(y);
        tj_tree_free(out);
    }
    tj_tree_free(in);

    /* layer_norm over a non-last axis: mean 0, variance 1 */
    in = tree3(ctx, "p=6 e=3", NULL, NULL, -3, 5);
    out = fwd(ctx, "layer_norm:p", in);
    y = get(out, "y", NULL);
    if (y) {
        double wm = 0, wv = 0;
        int e, p;
        for (e = 0; e < 3; e++) {
            double m = 0, v = 0;
            for (p = 0; p < 6; p++) m += y[p * 3 + e];
            m /= 6;
            for (p = 0; p < 6; p++) v += (y[p * 3 + e] - m) * (y[p * 3 + e] - m);
            v /= 6;
            if (fabs(m) > wm) wm = fabs(m);
            if (fabs(v - 1) > wv) wv = fabs(v - 1);
        }
        TJT_CHECK(wm < 1e-14 && wv < 1e-4, "layer_norm: mean off by %g, variance by %g", wm, wv); /* eps 1e-5 */
    }
    free(y);
    tj_tree_free(out);
    tj_tree_free(in);

    /* cross_entropy vs a manual log-sum-exp; labels [b, pos], logits [pos, b, cls] */
    {
        int32_t lab[6] = {0, 3, 1, 2, 3, 0};
        int pos, b, c;
        double want = 0, per[6];
        in = tree3(ctx, "pos=3 b=2 cls=4", NULL, NULL, -3, 3);
        tj_tree_set_array(in, "idx", tj_array_new(ctx, TJ_I32, "b=2 pos=3", lab));
        a = arr(tj_tree_array(in, "a"));
        for (pos = 0; pos < 3; pos++)
            for (b = 0; b < 2; b++) {
                double m = -1e300, s = 0;
                const double *z = a + (pos * 2 + b) * 4;
                for (c = 0; c < 4; c++) if (z[c] > m) m = z[c];
                for (c = 0; c < 4; c++) s += exp(z[c] - m);
                per[pos * 2 + b] = m + log(s) - z[lab[b * 3 + pos]];
                want += per[pos * 2 + b] / 6;
            }
        out = fwd(ctx, "cross_entropy", in);
        y = get(out, "y", NULL);
        TJT_CHECK(y && fabs(y[0] - want) < 1e-13, "cross_entropy %g, want %g", y ? y[0] : NAN, want);
        free(y);
        tj_tree_free(out);
        out = fwd(ctx, "cross_entropy:nomean", in);
        y = get(out, "y", NULL);
        TJT_CHECK(y && maxdiff(y, per, 6) < 1e-13, "cross_entropy per position");
        free(y);
        free(a);
        tj_tree_free(out);
        tj_tree_free(in);
    }
    (void)i;
}

static void test_shape_values(tj_ctx *ctx) {
    tj_tree *in, *out;
    double *a, *y;
    int x, yy, z, i;
    tjt_current = "values: shape ops";
    in = tree3(ctx, "x=3 y=4 z=2", NULL, NULL, -1, 1);
    a = arr(tj_tree_array(in, "a"));
#define A3(x_, y_, z_) a[(x_) * 8 + (y_) * 2 + (z_)]
    out = fwd(ctx, "transpose", in); /* z x y */
    y = get(out, "y", NULL);
    if (y) {
        int ok = 1;
        for (x = 0; x < 3; x++) for (yy = 0; yy < 4; yy++) for (z = 0; z < 2; z++) ok &= y[z * 12 + x * 4 + yy] == A3(x, yy, z);
        TJT_CHECK(ok, "transpose values");
    }
    free(y); tj_tree_free(out);
    out = fwd(ctx, "merge", in); /* x, yz: same order */
    y = get(out, "y", NULL);
    TJT_CHECK(y && maxdiff(y, a, 24) == 0 && tj_array_dim(tj_tree_array(out, "y"), "yz") == 8, "merge values/shape");
    free(y); tj_tree_free(out);
    out = fwd(ctx, "sum:x z", in);
    y = get(out, "y", NULL);
    if (y) {
        double w = 0;
        for (yy = 0; yy < 4; yy++) {
            double s = 0;
            for (x = 0; x < 3; x++) for (z = 0; z < 2; z++) s += A3(x, yy, z);
            if (fabs(s - y[yy]) > w) w = fabs(s - y[yy]);
        }
        TJT_CHECK(w < 1e-14, "sum over x z");
    }
    free(y); tj_tree_free(out);
    out = fwd(ctx, "max:x", in);
    y = get(out, "y", NULL);
    if (y) {
        int ok = 1;
        for (yy = 0; yy < 4; yy++) for (z = 0; z < 2; z++) {
            double m = -1e300;
            for (x = 0; x < 3; x++) if (A3(x, yy, z) > m) m = A3(x, yy, z);
            ok &= y[yy * 2 + z] == m;
        }
        TJT_CHECK(ok, "max over x");
    }
    free(y); tj_tree_free(out);
    out = fwd(ctx, "mean:z x", in);
    y = get(out, "y", NULL);
    if (y) {
        double w = 0;
        for (yy = 0; yy < 4; yy++) {
            double s = 0;
            for (x = 0; x < 3; x++) for (z = 0; z < 2; z++) s += A3(x, yy, z);
            if (fabs(s / 6 - y[yy]) > w) w = fabs(s / 6 - y[yy]);
        }
        TJT_CHECK(w < 1e-14, "mean over z x");
    }
    free(y); tj_tree_free(out);
    free(a);
    tj_tree_free(in);

    /* slice [1,4) of x (non-last) and pad x by (1, 2) with 0.5 */
    in = tree3(ctx, "x=5 y=4", NULL, NULL, -1, 1);
    a = arr(tj_tree_array(in, "a"));
    out = fwd(ctx, "slice", in);
    y = get(out, "y", NULL);
    TJT_CHECK(y && maxdiff(y, a + 4, 12) == 0, "slice values");
    free(y); tj_tree_free(out);
    out = fwd(ctx, "pad", in);
    y = get(out, "y", NULL);
    if (y) {
        int ok = tj_array_dim(tj_tree_array(out, "y"), "x") == 8;
        for (i = 0; i < 32; i++) ok &= y[i] == (i < 4 || i >= 24 ? 0.5 : a[i - 4]);
        TJT_CHECK(ok, "pad values");
    }
    free(y); tj_tree_free(out);
    free(a);
    tj_tree_free(in);

    /* concat along the middle axis y: 3 + 1 + 4 */
    in = tree3(ctx, "x=2 y=3 z=2", "x=2 y=1 z=2", "x=2 y=4 z=2", -1, 1);
    out = fwd(ctx, "concat", in);
    y = get(out, "y", NULL);
    if (y) {
        double *p0 = arr(tj_tree_array(in, "a")), *p1 = arr(tj_tree_array(in, "b")), *p2 = arr(tj_tree_array(in, "c"));
        int ok = 1;
        for (x = 0; x < 2; x++)
            for (yy = 0; yy < 8; yy++)
                for (z = 0; z < 2; z++) {
                    double w = yy < 3 ? p0[x * 6 + yy * 2 + z] : yy < 4 ? p1[x * 2 + z] : p2[x * 8 + (yy - 4) * 2 + z];
                    ok &= y[x * 16 + yy * 2 + z] == w;
                }
        TJT_CHECK(ok, "concat values");
        free(p0); free(p1); free(p2);
    }
    free(y); tj_tree_free(out);
    tj_tree_free(in);

    /* split with an inferred size; broadcast */
    in = tree3(ctx, "x=3 y=6", NULL, NULL, -1, 1);
    out = fwd(ctx, "split:h d=0", in);
    {
        tj_array *Y = tj_tree_find(out, "y") >= 0 ? tj_tree_array(out, "y") : NULL;
        double *yv = Y ? arr(Y) : NULL, *av = arr(tj_tree_array(in, "a"));
        TJT_CHECK(Y && tj_array_rank(Y) == 3 && tj_array_dim(Y, "h") == 2 && tj_array_dim(Y, "d") == 3 && maxdiff(yv, av, 18) == 0,
                  "split h=2 d=0 should give h=2 d=3 with the same elements");
        free(yv); free(av);
    }
    tj_tree_free(out);
    tj_tree_free(in);
    in = tree3(ctx, "x=3", NULL, NULL, -1, 1);
    out = fwd(ctx, "broadcast", in);
    y = get(out, "y", NULL);
    if (y) {
        double *av = arr(tj_tree_array(in, "a"));
        int ok = 1, w;
        for (w = 0; w < 2; w++) for (x = 0; x < 3; x++) for (z = 0; z < 4; z++) ok &= y[w * 12 + x * 4 + z] == av[x];
        TJT_CHECK(ok, "broadcast values");
        free(av);
    }
    free(y); tj_tree_free(out);
    tj_tree_free(in);
#undef A3
}

static void test_index_values(tj_ctx *ctx) {
    tj_tree *in, *out;
    double *a, *y;
    int32_t ix[6] = {0, 2, 2, 4, 0, 2}, ix2[3] = {3, 1, 3};
    int i, e, p, j, q;
    tjt_current = "values: take, one_hot";
    in = tree3(ctx, "vocab=5 embed=3", NULL, NULL, -1, 1);
    tj_tree_set_array(in, "idx", tj_array_new(ctx, TJ_I32, "bt=2 p=3", ix));
    a = arr(tj_tree_array(in, "a"));
    out = fwd(ctx, "take", in);
    y = get(out, "y", NULL);
    if (y) {
        int ok = tj_array_rank(tj_tree_array(out, "y")) == 3;
        for (i = 0; i < 6; i++) for (e = 0; e < 3; e++) ok &= y[i * 3 + e] == a[ix[i] * 3 + e];
        TJT_CHECK(ok, "take values");
    }
    free(y); free(a); tj_tree_free(out);
    out = fwd(ctx, "one_hot", in);
    y = get(out, "y", NULL);
    if (y) {
        int ok = tj_array_dim(tj_tree_array(out, "y"), "cls") == 5;
        for (i = 0; i < 6; i++) for (e = 0; e < 5; e++) ok &= y[i * 5 + e] == (e == ix[i] ? 1.0 : 0.0);
        TJT_CHECK(ok, "one_hot values");
    }
    free(y); tj_tree_free(out);
    tj_tree_free(in);
    in = tree3(ctx, "p=2 v=4 q=3", NULL, NULL, -1, 1);
    tj_tree_set_array(in, "idx", tj_array_new(ctx, TJ_I32, "j=3", ix2));
    a = arr(tj_tree_array(in, "a"));
    out = fwd(ctx, "take:mid", in);
    y = get(out, "y", NULL);
    if (y) {
        int ok = 1;
        for (p = 0; p < 2; p++) for (j = 0; j < 3; j++) for (q = 0; q < 3; q++) ok &= y[p * 9 + j * 3 + q] == a[p * 12 + ix2[j] * 3 + q];
        TJT_CHECK(ok, "take along a middle axis");
    }
    free(y); free(a); tj_tree_free(out);
    tj_tree_free(in);
}

/* long rows (more than one kernel chunk), strided and broadcast operands */
static void big_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v a = tj_tree_v(in, "a"), r = tj_tree_v(in, "r"), c = tj_tree_v(in, "c"), xs[3];
    (void)g; (void)u;
    tj_tree_set_v(out, "add_r", tj_add(a, r));           /* b lacks the last axis: stride 0 */
    tj_tree_set_v(out, "mul_c", tj_mul(c, a));           /* a's axes after c's */
    tj_tree_set_v(out, "sum_c", tj_sum(a, "c"));
    tj_tree_set_v(out, "sum_r", tj_sum(a, "r"));
    tj_tree_set_v(out, "max_rc", tj_max(a, "r c"));
    tj_tree_set_v(out, "min_c", tj_min(a, "c"));
    tj_tree_set_v(out, "tr", tj_transpose(a, "c r"));
    tj_tree_set_v(out, "slice", tj_slice(a, "c", 100, 650));
    tj_tree_set_v(out, "pad", tj_pad(a, "c", 3, 300, -1.0));
    xs[0] = a; xs[1] = tj_slice(a, "c", 0, 300); xs[2] = a;
    tj_tree_set_v(out, "concat", tj_concat(3, xs, "c"));
    tj_tree_set_v(out, "sm_c", tj_softmax(a, "c"));
    tj_tree_set_v(out, "ln_c", tj_layer_norm(a, "c", 0.0));
}
static void test_big_values(tj_ctx *ctx, tj_dtype dt) {
    enum { R = 3, C = 700 };
    tj_tree *in = tj_tree_new(ctx), *out;
    double *a, *r, *c, *y;
    int i, j;
    double tol = dt == TJ_F64 ? 1e-12 : 1e-5;
    tjt_current = dt == TJ_F64 ? "values: long rows f64" : "values: long rows f32";
    tj_tree_set_array(in, "a", tjt_rand(ctx, dt, "r=3 c=700", 61, -2, 2));
    tj_tree_set_array(in, "r", tjt_rand(ctx, dt, "r=3", 62, -2, 2));
    tj_tree_set_array(in, "c", tjt_rand(ctx, dt, "c=700", 63, -2, 2));
    a = arr(tj_tree_array(in, "a"));
    r = arr(tj_tree_array(in, "r"));
    c = arr(tj_tree_array(in, "c"));
    out = run_fn(ctx, "long rows", big_fn, NULL, in);
    if (tj_tree_find(out, "ln_c") < 0) goto done;
    {
        double w = 0;
        y = get(out, "add_r", NULL);
        for (i = 0; i < R; i++) for (j = 0; j < C; j++) w = fmax(w, fabs(y[i * C + j] - (a[i * C + j] + r[i])));
        free(y);
        TJT_CHECK(w < tol, "add with a broadcast last axis: %g", w);
        w = 0;
        y = get(out, "mul_c", NULL); /* axes c, r */
        TJT_CHECK(tj_array_dim(tj_tree_array(out, "mul_c"), "c") == C && tj_array_rank(tj_tree_array(out, "mul_c")) == 2, "mul_c shape");
        for (i = 0; i < R; i++) for (j = 0; j < C; j++) w = fmax(w, fabs(y[j * R + i] - c[j] * a[i * C + j]));
        free(y);
        TJT_CHECK(w < tol, "mul c * a (result [c, r]): %g", w);
        w = 0;
        y = get(out, "sum_c", NULL);
        for (i = 0; i < R; i++) {
            double s = 0;
            for (j = 0; j < C; j++) s += a[i * C + j];
            w = fmax(w, fabs(y[i] - s));
        }
        free(y);
        TJT_CHECK(w < tol * 100, "sum over a long axis: %g", w);
        w = 0;
        y = get(out, "sum_r", NULL);
        for (j = 0; j < C; j++) w = fmax(w, fabs(y[j] - (a[j] + a[C + j] + a[2 * C + j])));
        free(y);
        TJT_CHECK(w < tol, "sum over r: %g", w);
        {
            double m = -1e300;
            for (i = 0; i < R * C; i++) m = fmax(m, a[i]);
            y = get(out, "max_rc", NULL);
            TJT_CHECK(y && y[0] == m, "max over r c");
            free(y);
        }
        {
            int ok = 1;
            y = get(out, "min_c", NULL);
            for (i = 0; y && i < R; i++) {
                double m = 1e300;
                for (j = 0; j < C; j++) m = fmin(m, a[i * C + j]);
                ok &= y[i] == m;
            }
            TJT_CHECK(y && ok, "min over a long axis");
            free(y);
        }
        w = 0;
        y = get(out, "tr", NULL);
        for (i = 0; i < R; i++) for (j = 0; j < C; j++) w = fmax(w, fabs(y[j * R + i] - a[i * C + j]));
        free(y);
        TJT_CHECK(w == 0, "transpose of long rows");
        w = 0;
        y = get(out, "slice", NULL);
        for (i = 0; i < R; i++) for (j = 0; j < 550; j++) w = fmax(w, fabs(y[i * 550 + j] - a[i * C + 100 + j]));
        free(y);
        TJT_CHECK(w == 0, "slice of long rows");
        w = 0;
        y = get(out, "pad", NULL);
        for (i = 0; i < R; i++) for (j = 0; j < C + 303; j++) w = fmax(w, fabs(y[i * (C + 303) + j] - (j < 3 || j >= C + 3 ? -1.0 : a[i * C + j - 3])));
        free(y);
        TJT_CHECK(w == 0, "pad of long rows");
        w = 0;
        y = get(out, "concat", NULL);
        for (i = 0; i < R; i++)
            for (j = 0; j < 2 * C + 300; j++) {
                int k = j < C ? j : j < C + 300 ? j - C : j - C - 300;
                w = fmax(w, fabs(y[i * (2 * C + 300) + j] - a[i * C + k]));
            }
        free(y);
        TJT_CHECK(w == 0, "concat of long rows");
        w = 0;
        y = get(out, "sm_c", NULL);
        for (i = 0; i < R; i++) {
            double z = 0;
            for (j = 0; j < C; j++) z += exp(a[i * C + j]);
            for (j = 0; j < C; j++) w = fmax(w, fabs(y[i * C + j] - exp(a[i * C + j]) / z) * C);
        }
        free(y);
        TJT_CHECK(w < tol * 10, "softmax over a long axis: %g", w);
        w = 0;
        y = get(out, "ln_c", NULL);
        for (i = 0; i < R; i++) {
            double m = 0, v = 0;
            for (j = 0; j < C; j++) m += a[i * C + j];
            m /= C;
            for (j = 0; j < C; j++) v += (a[i * C + j] - m) * (a[i * C + j] - m);
            v /= C;
            for (j = 0; j < C; j++) w = fmax(w, fabs(y[i * C + j] - (a[i * C + j] - m) / sqrt(v)));
        }
        free(y);
        TJT_CHECK(w < tol * 10, "layer_norm over a long axis: %g", w);
    }
done:
    free(a); free(r); free(c);
    tj_tree_free(out);
    tj_tree_free(in);
}

/* f32 and bf16 dots in every layout against a double loop */
static void test_dot_lowp(tj_ctx *ctx, tj_dtype dt) {
    static const char *la[] = {"b2=2 b1=3 m=5 k=17", "k=17 m=5 b1=3 b2=2", "b1=3 b2=2 k=17 m=5", "m=5 k=17 b1=3 b2=2"};
    static const char *lb[] = {"b1=3 b2=2 k=17 n=4", "b2=2 b1=3 n=4 k=17", "n=4 k=17 b2=2 b1=3", "b2=2 b1=3 k=17 n=4"};
    int ia, ib;
    tjt_current = dt == TJ_F32 ? "values: f32 dot layouts" : "values: bf16 dot layouts";
    for (ia = 0; ia < 4; ia++)
        for (ib = 0; ib < 4; ib++) {
            tj_tree *in = tj_tree_new(ctx), *out, *in64 = tj_tree_new(ctx), *out64;
            double *y, *y64, w = 0, scale = 0;
            int64_t n, n64, i;
            tj_tree_set_array(in, "a", tjt_rand(ctx, dt, la[ia], 70 + ia, -1, 1));
            tj_tree_set_array(in, "b", tjt_rand(ctx, dt, lb[ib], 80 + ib, -1, 1));
            /* the same (rounded) values in f64 */
            {
                tj_array *A = tj_tree_array(in, "a"), *B = tj_tree_array(in, "b");
                double *av = arr(A), *bv = arr(B);
                tj_tree_set_array(in64, "a", tj_array_new(ctx, TJ_F64, la[ia], av));
                tj_tree_set_array(in64, "b", tj_array_new(ctx, TJ_F64, lb[ib], bv));
                free(av); free(bv);
            }
            out = fwd(ctx, "dot:k", in);
            out64 = fwd(ctx, "dot:k", in64);
            y = get(out, "y", &n);
            y64 = get(out64, "y", &n64);
            if (y && y64 && n == n64 && n == 2 * 3 * 5 * 4) {
                for (i = 0; i < n; i++) { w = fmax(w, fabs(y[i] - y64[i])); scale = fmax(scale, fabs(y64[i])); }
                TJT_CHECK(w <= (dt == TJ_F32 ? 1e-5 : 2e-2 * scale), "%s dot a[%s] b[%s]: off by %g", tj_dtype_name(dt), la[ia], lb[ib], w);
                TJT_CHECK(tj_array_dtype(tj_tree_array(out, "y")) == dt, "dot result dtype");
            } else TJT_CHECK(0, "%s dot a[%s] b[%s]: no result", tj_dtype_name(dt), la[ia], lb[ib]);
            free(y); free(y64);
            tj_tree_free(out); tj_tree_free(out64); tj_tree_free(in); tj_tree_free(in64);
        }
}

/* gradients at ties: max reductions share, max2/min2 split in halves */
static void tie_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v a = tj_tree_v(in, "a"), b = tj_tree_v(in, "b"), ga, gm[2], w[2];
    (void)g; (void)u;
    if (tj_grad(tj_sum(tj_max(a, "n"), "m"), 1, &a, &ga) != TJ_OK) return;
    tj_tree_set_v(out, "gmax", ga);
    w[0] = a; w[1] = b;
    if (tj_grad(tj_sum(tj_sum(tj_max2(a, b), "m"), "n"), 2, w, gm) != TJ_OK) return;
    tj_tree_set_v(out, "gmax2a", gm[0]);
    tj_tree_set_v(out, "gmax2b", gm[1]);
    if (tj_grad(tj_sum(tj_sum(tj_relu(a), "m"), "n"), 1, &a, &ga) != TJ_OK) return;
    tj_tree_set_v(out, "grelu", ga);
}
static void test_ties(tj_ctx *ctx) {
    double a[6] = {1, 3, 3, 0, -2, 5}, b[6] = {1, 4, 3, 1, -2, 0};
    double wmax[6] = {0, .5, .5, 0, 0, 1}, wa[6] = {.5, 0, .5, 0, .5, 1}, wb[6] = {.5, 1, .5, 1, .5, 0}, wr[6] = {1, 1, 1, 0, 0, 1};
    tj_tree *in = tj_tree_new(ctx), *out;
    double *y;
    tjt_current = "gradients at ties";
    tj_tree_set_array(in, "a", tj_array_new(ctx, TJ_F64, "m=2 n=3", a));
    tj_tree_set_array(in, "b", tj_array_new(ctx, TJ_F64, "m=2 n=3", b));
    out = run_fn(ctx, "ties", tie_fn, NULL, in);
    y = get(out, "gmax", NULL);
    TJT_CHECK(maxdiff(y, wmax, 6) == 0, "max: tied maxima share the gradient");
    free(y);
    y = get(out, "gmax2a", NULL);
    TJT_CHECK(maxdiff(y, wa, 6) == 0, "max2: d/da with ties");
    free(y);
    y = get(out, "gmax2b", NULL);
    TJT_CHECK(maxdiff(y, wb, 6) == 0, "max2: d/db with ties");
    free(y);
    y = get(out, "grelu", NULL);
    TJT_CHECK(maxdiff(y, wr, 6) == 0, "relu gradient (0 at 0)");
    free(y);
    tj_tree_free(out);
    tj_tree_free(in);
}

/* constants and random numbers */
static void src_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)in; (void)u;
    tj_tree_set_v(out, "fill", tj_fill(g, TJ_F32, "a=2 b=3", 2.5));
    tj_tree_set_v(out, "filli", tj_fill(g, TJ_I32, "a=2", -7));
    tj_tree_set_v(out, "scalar", tj_scalar(g, TJ_F64, 0.125));
    tj_tree_set_v(out, "ar_b", tj_arange(g, TJ_I32, "a=2 b=3", "b"));
    tj_tree_set_v(out, "ar_a", tj_arange(g, TJ_F32, "a=2 b=3", "a"));
    tj_tree_set_v(out, "u1", tj_uniform(g, 42, TJ_F64, "n=100000"));
    tj_tree_set_v(out, "u2", tj_uniform(g, 42, TJ_F64, "n=100000"));
    tj_tree_set_v(out, "u3", tj_uniform(g, 43, TJ_F64, "n=100000"));
    tj_tree_set_v(out, "n1", tj_normal(g, 42, TJ_F64, "n=100000"));
    tj_tree_set_v(out, "n2", tj_normal(g, 42, TJ_F64, "n=100000"));
    tj_tree_set_v(out, "u10", tj_uniform(g, 42, TJ_F64, "n=10"));
    tj_tree_set_v(out, "u2d", tj_uniform(g, 42, TJ_F64, "r=100 c=1000"));
    tj_tree_set_v(out, "n10", tj_normal(g, 42, TJ_F64, "n=10"));
    tj_tree_set_v(out, "uf32", tj_uniform(g, 42, TJ_F32, "n=1000"));
    tj_tree_set_v(out, "ubf16", tj_uniform(g, 42, TJ_BF16, "n=100000"));
    tj_tree_set_v(out, "uf32big", tj_uniform(g, 42, TJ_F32, "n=100000"));
    {
        tj_v x = tj_fill(g, TJ_F32, "n=100000", 1.0);
        tj_tree_set_v(out, "d1", tj_dropout(x, 5, 0.3));
        tj_tree_set_v(out, "d2", tj_dropout(x, 5, 0.3));
        tj_tree_set_v(out, "d3", tj_dropout(x, 6, 0.3));
    }
}
static void test_sources(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx), *out;
    double *v, *w;
    int64_t n, m, i;
    tjt_current = "values: fill, arange, uniform, normal, dropout";
    out = run_fn(ctx, "sources", src_fn, NULL, in);
    v = get(out, "fill", &n);
    {
        double e[6] = {2.5, 2.5, 2.5, 2.5, 2.5, 2.5};
        TJT_CHECK(n == 6 && maxdiff(v, e, 6) == 0 && tj_array_dtype(tj_tree_array(out, "fill")) == TJ_F32, "fill values");
    }
    free(v);
    v = get(out, "filli", &n);
    TJT_CHECK(n == 2 && v && v[0] == -7 && v[1] == -7, "i32 fill");
    free(v);
    v = get(out, "scalar", &n);
    TJT_CHECK(n == 1 && v && v[0] == 0.125 && tj_array_rank(tj_tree_array(out, "scalar")) == 0, "scalar");
    free(v);
    v = get(out, "ar_b", &n);
    {
        double e[6] = {0, 1, 2, 0, 1, 2};
        TJT_CHECK(n == 6 && maxdiff(v, e, 6) == 0, "arange along b");
    }
    free(v);
    v = get(out, "ar_a", &n);
    {
        double e[6] = {0, 0, 0, 1, 1, 1};
        TJT_CHECK(n == 6 && maxdiff(v, e, 6) == 0, "arange along a");
    }
    free(v);
    /* uniform: mean 1/2, variance 1/12; same key same values; counter-based */
    v = get(out, "u1", &n);
    w = get(out, "u2", &m);
    if (v && w) {
        double s = 0, s2 = 0, lo = 1, hi = 0;
        for (i = 0; i < n; i++) { s += v[i]; s2 += v[i] * v[i]; if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i]; }
        s /= (double)n;
        s2 = s2 / (double)n - s * s;
        TJT_CHECK(fabs(s - 0.5) < 0.005 && fabs(s2 - 1.0 / 12) < 0.002 && lo >= 0 && hi < 1, "uniform: mean %g var %g range [%g, %g]", s, s2, lo, hi);
        TJT_CHECK(maxdiff(v, w, n) == 0, "uniform: the same key gives different values");
    }
    free(w);
    w = get(out, "u3", &m);
    if (v && w) {
        int64_t same = 0;
        for (i = 0; i < n; i++) same += v[i] == w[i];
        TJT_CHECK(same < 10, "uniform: keys 42 and 43 agree on %lld elements", (long long)same);
    }
    free(w);
    w = get(out, "u10", &m);
    TJT_CHECK(m == 10 && maxdiff(v, w, 10) == 0, "uniform element i of n=10 differs from element i of n=100000");
    free(w);
    w = get(out, "u2d", &m);
    TJT_CHECK(m == 100000 && maxdiff(v, w, 100000) == 0, "uniform [r=100 c=1000] differs from [n=100000] (row-major index)");
    free(w);
    w = get(out, "uf32", &m);
    if (v && w) {
        int ok = 1;
        for (i = 0; i < m; i++) ok &= w[i] == (double)(float)v[i] || fabs(w[i] - v[i]) < 1e-7;
        TJT_CHECK(ok, "f32 uniform is not the f64 stream rounded");
    }
    free(w);
    free(v);
    /* rounding to a narrow dtype must not turn u < 1 into 1 */
    v = get(out, "ubf16", &n);
    w = get(out, "uf32big", &m);
    if (v && w) {
        int64_t ones = 0, ones32 = 0;
        double s = 0;
        for (i = 0; i < n; i++) { ones += v[i] >= 1.0 || v[i] < 0; s += v[i]; }
        for (i = 0; i < m; i++) ones32 += w[i] >= 1.0 || w[i] < 0;
        TJT_CHECK(ones == 0 && ones32 == 0, "uniform outside [0, 1): %lld bf16 and %lld f32 elements", (long long)ones, (long long)ones32);
        TJT_CHECK(fabs(s / (double)n - 0.5) < 0.005, "bf16 uniform mean %g", s / (double)n);
    }
    free(v);
    free(w);
    v = get(out, "n1", &n);
    w = get(out, "n2", &m);
    if (v && w) {
        double s = 0, s2 = 0, s4 = 0;
        for (i = 0; i < n; i++) { s += v[i]; s2 += v[i] * v[i]; s4 += v[i] * v[i] * v[i] * v[i]; }
        s /= (double)n;
        s2 = s2 / (double)n - s * s;
        s4 /= (double)n;
        TJT_CHECK(fabs(s) < 0.015 && fabs(s2 - 1) < 0.02 && fabs(s4 - 3) < 0.15, "normal: mean %g var %g 4th moment %g", s, s2, s4);
        TJT_CHECK(maxdiff(v, w, n) == 0, "normal: the same key gives different values");
    }
    free(w);
    w = get(out, "n10", &m);
    TJT_CHECK(m == 10 && maxdiff(v, w, 10) == 0, "normal element i of n=10 differs from element i of n=100000");
    free(w);
    free(v);
    /* dropout: kept fraction ~ 0.7, kept values 1/0.7, same key same mask */
    v = get(out, "d1", &n);
    w = get(out, "d2", &m);
    if (v && w) {
        int64_t kept = 0, bad = 0;
        for (i = 0; i < n; i++) {
            if (v[i] != 0) kept++;
            if (v[i] != 0 && v[i] != (double)(float)(1.0 / 0.7)) bad++;
        }
        TJT_CHECK(fabs((double)kept / (double)n - 0.7) < 0.005, "dropout kept fraction %g, want 0.7", (double)kept / (double)n);
        TJT_CHECK(bad == 0, "dropout: %lld kept values are not scaled by 1/(1-rate)", (long long)bad);
        TJT_CHECK(maxdiff(v, w, n) == 0, "dropout: the same key gives another mask");
    }
    free(w);
    w = get(out, "d3", &m);
    if (v && w) {
        int64_t diff = 0;
        for (i = 0; i < n; i++) diff += (v[i] != 0) != (w[i] != 0);
        TJT_CHECK(diff > n / 10, "dropout: another key gives nearly the same mask (%lld differ)", (long long)diff);
    }
    free(w);
    free(v);
    tj_tree_free(out);
    tj_tree_free(in);
}

/* bf16 rounding, and exact i32 arithmetic */
static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static void i32_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v a = tj_tree_v(in, "a"), b = tj_tree_v(in, "b"), x = tj_tree_v(in, "x");
    (void)g; (void)u;
    tj_tree_set_v(out, "add", tj_add(a, b));
    tj_tree_set_v(out, "sub", tj_sub(a, b));
    tj_tree_set_v(out, "neg", tj_neg(a));
    tj_tree_set_v(out, "lt", tj_lt(a, b));
    tj_tree_set_v(out, "le", tj_le(a, b));
    tj_tree_set_v(out, "gt", tj_gt(a, b));
    tj_tree_set_v(out, "ge", tj_ge(a, b));
    tj_tree_set_v(out, "eq", tj_eq(a, b));
    tj_tree_set_v(out, "ne", tj_ne(a, b));
    tj_tree_set_v(out, "sum", tj_sum(a, "n"));
    tj_tree_set_v(out, "bf", tj_cast(x, TJ_BF16));
    tj_tree_set_v(out, "bfmul", tj_cast(tj_mul(tj_cast(x, TJ_BF16), tj_cast(x, TJ_BF16)), TJ_F32));
}
static void test_dtypes(tj_ctx *ctx) {
    /* (input bits, expected bf16 bits) */
    static const uint32_t cases[][2] = {
        {0x3f800000u, 0x3f80}, /* 1.0 exact */
        {0x3f808000u, 0x3f80}, /* tie, even stays */
        {0x3f818000u, 0x3f82}, /* tie, odd rounds up */
        {0x3f808001u, 0x3f81}, /* above the tie */
        {0x3f807fffu, 0x3f80}, /* below the tie */
        {0xbf818000u, 0xbf82}, /* negative tie, odd */
        {0x7f7fffffu, 0x7f80}, /* max float rounds to inf */
        {0x7f800000u, 0x7f80}, /* inf */
        {0xff800000u, 0xff80}, /* -inf */
        {0x00000001u, 0x0000}, /* smallest denormal -> 0 */
        {0x80000000u, 0x8000}, /* -0 */
        {0x007f8000u, 0x0080}, /* denormal tie, odd -> rounds up to min normal */
    };
    int i, ok = 1;
    tjt_current = "values: bf16 rounding, i32 exact";
    for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        uint16_t h = tj_f32_to_bf16(f_of(cases[i][0]));
        if (h != cases[i][1]) {
            ok = 0;
            fprintf(stderr, "  bf16(0x%08x) = 0x%04x, want 0x%04x\n", (unsigned)cases[i][0], (unsigned)h, (unsigned)cases[i][1]);
        }
    }
    TJT_CHECK(ok, "tj_f32_to_bf16 round-to-nearest-even");
    {   /* NaNs stay NaN (quiet), even when the payload lives in the low bits only */
        uint32_t nans[4] = {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7f80ffffu};
        int nan_ok = 1;
        for (i = 0; i < 4; i++) {
            uint16_t h = tj_f32_to_bf16(f_of(nans[i]));
            float back = tj_bf16_to_f32(h);
            nan_ok &= back != back && (h & 0x7f80) == 0x7f80 && (h & 0x0040) && (h & 0x8000) == ((nans[i] >> 16) & 0x8000);
        }
        TJT_CHECK(nan_ok, "NaN -> bf16 stays a (quiet) NaN with its sign");
        TJT_CHECK(tj_bf16_to_f32(0x3f80) == 1.0f && tj_bf16_to_f32(0xc040) == -3.0f, "bf16 -> f32");
    }
    {
        int32_t a[6] = {1073741824, -5, 16777217, 7, -2147483647, 0};
        int32_t b[6] = {1073741823, -5, 16777216, 9, 0, -1};
        float x[4];
        tj_tree *in = tj_tree_new(ctx), *out;
        double *v;
        x[0] = f_of(0x3f808000u); x[1] = f_of(0x3f818000u); x[2] = 3.14159f; x[3] = f_of(0x7fc00000u);
        tj_tree_set_array(in, "a", tj_array_new(ctx, TJ_I32, "n=6", a));
        tj_tree_set_array(in, "b", tj_array_new(ctx, TJ_I32, "n=6", b));
        tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F32, "m=4", x));
        out = run_fn(ctx, "i32", i32_fn, NULL, in);
        if (tj_tree_find(out, "add") >= 0) {
            int32_t r[6];
            uint16_t bf[4];
            float bm[4];
            int k, ok2 = 1;
            const char *cmp[6] = {"lt", "le", "gt", "ge", "eq", "ne"};
            TJT_CHECK(tj_array_dtype(tj_tree_array(out, "add")) == TJ_I32 && tj_array_dtype(tj_tree_array(out, "lt")) == TJ_I32, "i32 results are i32");
            tj_array_read(tj_tree_array(out, "add"), TJ_I32, r);
            for (k = 0; k < 6; k++) ok2 &= r[k] == a[k] + b[k];
            TJT_CHECK(ok2, "i32 add exact (2^30 + 2^30-1 = %d, 2^24+1 + 2^24 = %d)", r[0], r[2]);
            tj_array_read(tj_tree_array(out, "sub"), TJ_I32, r);
            ok2 = 1;
            for (k = 0; k < 6; k++) ok2 &= r[k] == a[k] - b[k];
            TJT_CHECK(ok2, "i32 sub exact");
            tj_array_read(tj_tree_array(out, "neg"), TJ_I32, r);
            ok2 = 1;
            for (k = 0; k < 6; k++) ok2 &= r[k] == -a[k];
            TJT_CHECK(ok2, "i32 neg exact");
            for (i = 0; i < 6; i++) {
                ok2 = 1;
                tj_array_read(tj_tree_array(out, cmp[i]), TJ_I32, r);
                for (k = 0; k < 6; k++) {
                    int want = i == 0 ? a[k] < b[k] : i == 1 ? a[k] <= b[k] : i == 2 ? a[k] > b[k] : i == 3 ? a[k] >= b[k] : i == 4 ? a[k] == b[k] : a[k] != b[k];
                    ok2 &= r[k] == want;
                }
                TJT_CHECK(ok2, "i32 compare '%s' exact (2^24+1 vs 2^24 must differ)", cmp[i]);
            }
            v = get(out, "sum", NULL);
            TJT_CHECK(v && v[0] == (double)a[0] + a[1] + a[2] + a[3] + a[4] + a[5], "i32 sum exact: %.17g", v ? v[0] : NAN);
            free(v);
            tj_array_read(tj_tree_array(out, "bf"), TJ_BF16, bf);
            ok2 = 1;
            for (k = 0; k < 4; k++) ok2 &= bf[k] == tj_f32_to_bf16(x[k]) || (k == 3 && (bf[k] & 0x7fc0) == 0x7fc0);
            TJT_CHECK(ok2, "cast f32 -> bf16 in a program rounds like tj_f32_to_bf16");
            tj_array_read(tj_tree_array(out, "bfmul"), TJ_F32, bm);
            ok2 = 1;
            for (k = 0; k < 3; k++) {
                float q = tj_bf16_to_f32(tj_f32_to_bf16(x[k]));
                ok2 &= bm[k] == tj_bf16_to_f32(tj_f32_to_bf16(q * q));
            }
            TJT_CHECK(ok2, "bf16 mul rounds its result to bf16");
        }
        tj_tree_free(out);
        tj_tree_free(in);
    }
}

/* ------------------------------------------------ 3. clear errors --- */
static tj_v stash; /* a value of another traced function */
static void err_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const char *c = (const char *)u;
    tj_v a = leaf(in, "a"), b = leaf(in, "b"), y = NULL;
#define IS(s) (strcmp(c, s) == 0)
    if (IS("add size")) y = tj_add(a, b);
    if (IS("sum axis")) y = tj_sum(a, "nope");
    if (IS("mean dup")) y = tj_mean(a, "x x");
    if (IS("dot size")) y = tj_dot(a, b, "k");
    if (IS("dot dtype")) y = tj_dot(a, tj_cast(b, TJ_F32), "k");
    if (IS("dot dup")) y = tj_dot(a, b, "k k");
    if (IS("log i32")) y = tj_log(tj_cast(a, TJ_I32));
    if (IS("shape 0")) y = tj_fill(g, TJ_F32, "batch=0", 1);
    if (IS("shape x")) y = tj_fill(g, TJ_F32, "batch=x", 1);
    if (IS("shape dup")) y = tj_fill(g, TJ_F32, "batch=2 batch=3", 1);
    if (IS("split")) y = tj_split(a, "k", "h=3 d=2");
    if (IS("split infer")) y = tj_split(a, "k", "h=3 d=0");
    if (IS("merge")) y = tj_merge(a, "m k", "mk"); /* a = m, j, k */
    if (IS("slice")) y = tj_slice(a, "k", 2, 9);
    if (IS("take f32")) y = tj_take(a, "k", b);
    if (IS("take oob")) y = tj_take(a, "vocab", leaf(in, "idx"));
    if (IS("ce oob")) y = tj_cross_entropy(a, leaf(in, "idx"), "cls", "pos");
    if (IS("foreign op")) y = tj_add(a, stash);
    if (IS("foreign out")) y = stash;
    if (IS("grad nonscalar")) {
        tj_v e = tj_exp(a), ga;
        if (tj_grad(e, 1, &a, &ga) == TJ_OK) y = ga;
    }
    if (IS("stash")) { y = tj_exp(a); stash = y; }
    if (IS("update")) y = tj_sub(a, tj_muls(b, 0.1)); /* w - 0.1 g */
    if (IS("concat")) { tj_v xs[2]; xs[0] = a; xs[1] = b; y = tj_concat(2, xs, "m"); } /* b has another k */
    if (IS("pad")) y = tj_pad(a, "k", -2, -2, 0.0); /* crops all of k */
    if (IS("transpose dup")) y = tj_transpose(a, "k m k");
    if (IS("rename")) y = tj_rename(a, "m", "k");
    if (IS("one_hot")) y = tj_one_hot(tj_cast(a, TJ_I32), "k=3", TJ_F32);
    if (IS("causal")) y = tj_causal_mask(a, "k", "k", 0.0);
    if (IS("ce labels")) y = tj_cross_entropy(a, tj_cast(b, TJ_I32), "k", NULL);
    if (IS("select mask")) y = tj_select(a, a, a);
    if (IS("dropout rate")) y = tj_dropout(a, 1, 1.0);
    if (IS("broadcast")) y = tj_broadcast(a, "m=3 k=5");
    if (IS("checkpoint_name")) y = tj_checkpoint_name(a, "");
    if (IS("softmax axis")) y = tj_softmax(a, "m k");
    if (IS("take axis")) y = tj_take(a, "vocab", tj_cast(b, TJ_I32));
    if (IS("i32 pows -1")) y = tj_cast(tj_pows(tj_cast(a, TJ_I32), -1.0), TJ_F64);
    if (IS("i32 pows 0.5")) y = tj_cast(tj_pows(tj_cast(a, TJ_I32), 0.5), TJ_F64);
    /* attention: a [m=3 k=4], b [m=2 k=5] */
    if (IS("attn batch")) y = tj_attention(a, tj_rename(b, "m", "j"), tj_rename(b, "m", "j"), "m", "j", "k", 0, 0);
    if (IS("attn size")) y = tj_attention(tj_rename(a, "k", "d"), tj_rename(b, "k", "d"), tj_rename(b, "k", "d"), "m", "m", "d", 0, 0);
    if (IS("attn dtype")) y = tj_attention(a, tj_cast(a, TJ_F32), a, "m", "m", "k", 0, 0);
    if (IS("attn axes")) y = tj_attention(a, a, a, "m", "m", "m", 0, 0);
    if (IS("attn scale")) y = tj_attention(a, a, a, "m", "m", "k", INFINITY, 0);
    if (IS("attn kpos")) y = tj_attention(a, a, tj_rename(a, "m", "n"), "m", "m", "k", 0, 0);
    if (IS("attn big")) y = tj_attention(tj_broadcast(a, "m=3 k=4 e=300"), tj_broadcast(a, "m=3 k=4 e=300"), tj_broadcast(a, "m=3 k=4 e=300"), "m", "m", "k e", 0, 0);
    if (IS("attn dim")) { tj_v w = tj_merge(tj_broadcast(a, "m=3 k=4 e=300"), "k e", "ke"); y = tj_attention(w, w, w, "m", "m", "ke", 0, 0); }
#undef IS
    tj_tree_set_v(out, "y", y);
}
/* jit case c on tree in; expect failure; check the message parts */
#define EXPECT_JIT_ERROR(ctx, c, in, ...)                                                   \
    do {                                                                                    \
        tj_prog *p_ = tj_jit(ctx, c, err_fn, (void *)(c), in, NULL);                        \
        TJT_CHECK(!p_, "jit '%s' should fail", c);                                          \
        TJT_ERROR_HAS(ctx, __VA_ARGS__);                                                    \
        tj_prog_free(p_);                                                                   \
    } while (0)

/* i32 arithmetic is XLA's s32 arithmetic (JAX's lax.add/sub/mul/div/neg,
   jnp's int32 + - *): it wraps around, division truncates toward zero
   (lax.div, not jnp.floor_divide), x / 0 = -1 and INT32_MIN / -1 =
   INT32_MIN; an i32 sum wraps. tinyjax computed them in double and stored
   through the saturating float -> i32 conversion: INT32_MAX + 1 gave
   INT32_MAX, 65536 * 65536 INT32_MAX, 5 / 0 INT32_MAX, 0 / 0 0, a product
   past 2^53 lost its low bits. Unfused, fused into a chain (mul, add, div,
   then a cast), and broadcast from a scalar. */
static uint32_t i32w(int op, uint32_t x, uint32_t y) {
    switch (op) {
    case 0: return x + y;
    case 1: return x - y;
    case 2: return x * y;
    case 3: return y == 0 ? 0xffffffffu : x == 0x80000000u && y == 0xffffffffu ? x : (uint32_t)((int32_t)x / (int32_t)y);
    default: return 0u - x;
    }
}
static int32_t i32s(uint32_t r) { return r >= 0x80000000u ? (int32_t)(r - 0x80000000u) + INT32_MIN : (int32_t)r; }
static void i32_wrap_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v a = tj_tree_v(in, "a"), b = tj_tree_v(in, "b");
    (void)g; (void)u;
    tj_tree_set_v(out, "add", tj_add(a, b));
    tj_tree_set_v(out, "sub", tj_sub(a, b));
    tj_tree_set_v(out, "mul", tj_mul(a, b));
    tj_tree_set_v(out, "div", tj_div(a, b));
    tj_tree_set_v(out, "neg", tj_neg(a));
    tj_tree_set_v(out, "adds", tj_adds(a, 2147483647.0));
    tj_tree_set_v(out, "muls", tj_muls(a, -65536.0));
    tj_tree_set_v(out, "sum", tj_sum(a, "n"));
    tj_tree_set_v(out, "sum_mul", tj_sum(tj_mul(a, b), "n"));
    /* a fused chain: nothing stored between the members */
    tj_tree_set_v(out, "chain", tj_cast(tj_div(tj_add(tj_mul(a, b), a), b), TJ_F64));
}
static void test_i32_wrap(tj_ctx *ctx) {
    enum { N = 12 };
    static const int32_t a[N] = {INT32_MAX, INT32_MIN, INT32_MIN, 65536, 46341, 7, -7, 7, -7, 5, 0, 2147483000};
    static const int32_t b[N] = {1, -1, 1, 65536, 46341, 2, 2, -2, -2, 0, 0, 2147483001};
    static const char *names[5] = {"add", "sub", "mul", "div", "neg"};
    tj_tree *in = tj_tree_new(ctx), *out;
    int32_t r[N];
    int op, k, ok;
    tjt_current = "values: i32 wraps as XLA's s32";
    tj_tree_set_array(in, "a", tj_array_new(ctx, TJ_I32, "n=12", a));
    tj_tree_set_array(in, "b", tj_array_new(ctx, TJ_I32, "n=12", b));
    out = run_fn(ctx, "i32_wrap", i32_wrap_fn, NULL, in);
    if (tj_tree_find(out, "add") >= 0) {
        uint32_t s = 0, sm = 0;
        double ch[N];
        for (op = 0; op < 5; op++) {
            tj_array_read(tj_tree_array(out, names[op]), TJ_I32, r);
            for (k = 0, ok = 1; k < N; k++) ok &= r[k] == i32s(i32w(op, (uint32_t)a[k], (uint32_t)b[k]));
            TJT_CHECK(ok, "i32 %s wraps (XLA: INT32_MAX + 1 = INT32_MIN, 65536^2 = 0, 5 / 0 = -1, INT32_MIN / -1 = INT32_MIN); "
                      "element 0 %d, 3 %d, 9 %d", names[op], r[0], r[3], r[9]);
        }
        tj_array_read(tj_tree_array(out, "adds"), TJ_I32, r);
        for (k = 0, ok = 1; k < N; k++) ok &= r[k] == i32s((uint32_t)a[k] + 2147483647u);
        TJT_CHECK(ok, "i32 adds wraps: %d", r[0]);
        tj_array_read(tj_tree_array(out, "muls"), TJ_I32, r);
        for (k = 0, ok = 1; k < N; k++) ok &= r[k] == i32s((uint32_t)a[k] * (uint32_t)-65536);
        TJT_CHECK(ok, "i32 muls wraps: %d", r[0]);
        for (k = 0; k < N; k++) {
            s += (uint32_t)a[k];
            sm += (uint32_t)a[k] * (uint32_t)b[k];
        }
        tj_array_read(tj_tree_array(out, "sum"), TJ_I32, r);
        TJT_CHECK(r[0] == i32s(s), "i32 sum wraps: %d, want %d", r[0], i32s(s));
        tj_array_read(tj_tree_array(out, "sum_mul"), TJ_I32, r);
        TJT_CHECK(r[0] == i32s(sm), "i32 sum of products (fused) wraps: %d, want %d", r[0], i32s(sm));
        tj_array_read(tj_tree_array(out, "chain"), TJ_F64, ch);
        for (k = 0, ok = 1; k < N; k++) {
            uint32_t t = i32w(3, i32w(0, i32w(2, (uint32_t)a[k], (uint32_t)b[k]), (uint32_t)a[k]), (uint32_t)b[k]);
            ok &= ch[k] == (double)i32s(t);
        }
        TJT_CHECK(ok, "i32 (a b + a) / b fused wraps at each step: element 0 %.17g, 11 %.17g", ch[0], ch[11]);
    }
    tj_tree_free(out);
    tj_tree_free(in);
}
/* i32 tj_pows is JAX's x ** p on int32 with a Python int p: lax.integer_pow,
   an i32 result that wraps as i32 mul does (0 ** 0 = 1); a negative or
   non-integer exponent is refused (JAX: an error, or a float result). The
   want table is JAX 0.10.2's (x ** p).tolist(). Unfused, fused into a
   chain, and inside a program differentiated for a float input (the i32
   value carries no gradient, as in JAX). Refused until 2026-11-24. */
#define NPI 13
static const int32_t g_pi_x[NPI] = {0, 1, -1, 2, -2, 3, 7, -7, 46341, 65536, INT32_MAX, INT32_MIN, 12345};
static const int g_pi_p[] = {0, 1, 2, 3, 5, 31, 32, 33, 1000000007};
#define NPP ((int)(sizeof g_pi_p / sizeof g_pi_p[0]))
static void i32_pows_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v a = tj_tree_v(in, "a"), x = tj_tree_v(in, "x"), gx = NULL, f;
    char nm[16];
    int k;
    (void)g; (void)u;
    for (k = 0; k < NPP; k++) {
        snprintf(nm, sizeof nm, "p%d", k);
        tj_tree_set_v(out, nm, tj_pows(a, (double)g_pi_p[k]));
    }
    tj_tree_set_v(out, "chain", tj_cast(tj_add(tj_pows(tj_add(a, a), 3.0), a), TJ_F64)); /* fused: (2a)^3 + a */
    /* d/dx sum(x * f32(a^2)) = f32(a^2): the i32 pows is on the way, not differentiated */
    f = tj_sum(tj_mul(x, tj_cast(tj_pows(tj_index(a, "n", 6), 2.0), TJ_F32)), "m");
    if (tj_grad(f, 1, &x, &gx) == TJ_OK) tj_tree_set_v(out, "gx", gx);
}
static void test_i32_pows(tj_ctx *ctx) {
    static const int32_t want[NPP][NPI] = {
        {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
        {0, 1, -1, 2, -2, 3, 7, -7, 46341, 65536, 2147483647, INT32_MIN, 12345},
        {0, 1, 1, 4, 4, 9, 49, 49, -2147479015, 0, 1, 0, 152399025},
        {0, 1, -1, 8, -8, 27, 343, -343, -1932785795, 0, 2147483647, 0, 170287977},
        {0, 1, -1, 32, -32, 243, 16807, -16807, -1737259723, 0, 2147483647, 0, 253233049},
        {0, 1, -1, INT32_MIN, INT32_MIN, 1264544299, 265001655, -265001655, -741033651, 0, 2147483647, 0, -388802295},
        {0, 1, 1, 0, 0, -501334399, 1855011585, 1855011585, -1976889471, 0, 1, 0, 2009105153},
        {0, 1, -1, 0, 0, -1504003197, 100179207, -100179207, 617448069, 0, 2147483647, 0, -1033020615},
        {0, 1, -1, 0, 0, 577888395, 1254924535, -1254924535, -2021739475, 0, 2147483647, 0, -1129497399},
    };
    static const float xv[4] = {1, 2, 3, 4};
    tj_tree *in = tj_tree_new(ctx), *out;
    int32_t r[NPI];
    double ch[NPI], gx[4];
    char nm[16];
    int k, j, bad;
    tjt_current = "values: i32 pows is lax.integer_pow";
    tj_tree_set_array(in, "a", tj_array_new(ctx, TJ_I32, "n=13", g_pi_x));
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F32, "m=4", xv));
    out = run_fn(ctx, "i32_pows", i32_pows_fn, NULL, in);
    if (tj_tree_find(out, "p0") >= 0) {
        for (k = 0; k < NPP; k++) {
            tj_array *o;
            snprintf(nm, sizeof nm, "p%d", k);
            o = tj_tree_array(out, nm);
            TJT_CHECK(tj_array_dtype(o) == TJ_I32, "x ** %d is %s, JAX's int32", g_pi_p[k], tj_dtype_name(tj_array_dtype(o)));
            tj_array_read(o, TJ_I32, r);
            for (j = 0, bad = -1; j < NPI; j++)
                if (r[j] != want[k][j] && bad < 0) bad = j;
            TJT_CHECK(bad < 0, "i32 x ** %d: element %d (x = %d) is %d, JAX %d", g_pi_p[k], bad, g_pi_x[bad < 0 ? 0 : bad], r[bad < 0 ? 0 : bad],
                      want[k][bad < 0 ? 0 : bad]);
        }
        tj_array_read(tj_tree_array(out, "chain"), TJ_F64, ch);
        for (j = 0, bad = 0; j < NPI; j++) {
            uint32_t t = (uint32_t)g_pi_x[j] * 2u;
            bad += ch[j] != (double)i32s(t * t * t + (uint32_t)g_pi_x[j]);
        }
        TJT_CHECK(bad == 0, "fused (2a)^3 + a wraps at each step: %d of %d elements differ (element 9: %.17g)", bad, NPI, ch[9]);
        TJT_CHECK(tj_tree_find(out, "gx") >= 0, "a gradient through an i32 pows: %s", tj_error(ctx));
        if (tj_tree_find(out, "gx") >= 0) {
            tj_array_read(tj_tree_array(out, "gx"), TJ_F64, gx);
            TJT_CHECK(gx[0] == 49 && gx[3] == 49, "d/dx sum(x * f32(7^2)) = %g, want 49", gx[0]);
        }
    }
    tj_tree_free(out);
    tj_tree_free(in);
}
static void test_errors(tj_ctx *ctx) {
    tj_tree *in, *out;
    tj_prog *p;
    tjt_current = "errors: trace time";
    in = tree3(ctx, "x=3 y=4", "y=5", NULL, -1, 1);
    EXPECT_JIT_ERROR(ctx, "add size", in, "add", "'y'", "size 4", "5", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "sum axis", in, "sum", "'nope'", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "mean dup", in, "mean", "'x'", "test_ops.c");
    tj_tree_free(in);
    in = tree3(ctx, "m=3 k=4", "k=5 n=2", NULL, -1, 1);
    EXPECT_JIT_ERROR(ctx, "dot size", in, "dot", "'k'", "4", "5", "test_ops.c");
    tj_tree_free(in);
    in = tree3(ctx, "m=3 k=4", "k=4 n=2", NULL, -1, 1);
    EXPECT_JIT_ERROR(ctx, "dot dtype", in, "dot", "f64", "f32", "k=4", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "dot dup", in, "dot", "'k'", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "log i32", in, "log", "i32", "m=3", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "shape 0", in, "fill", "'batch'", "\"0\"", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "shape x", in, "fill", "'batch'", "\"x\"", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "shape dup", in, "fill", "'batch'", "twice", "test_ops.c");
    tj_tree_free(in);
    in = tree3(ctx, "m=3 j=2 k=8", "k=8", NULL, -1, 1);
    EXPECT_JIT_ERROR(ctx, "split", in, "split", "'k'", "8", "h=3 d=2", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "split infer", in, "split", "'k'", "h=3 d=0", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "merge", in, "merge", "m k", "adjacent", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "slice", in, "slice", "'k'", "[2, 9)", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "take f32", in, "take", "i32", "f64[k=8]", "test_ops.c");
    tj_tree_free(in);
    in = tree3(ctx, "m=3 k=4", "m=2 k=5", NULL, -1, 1);
    EXPECT_JIT_ERROR(ctx, "concat", in, "concat", "input 1", "'m'", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "pad", in, "pad", "'k'", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "transpose dup", in, "transpose", "k m k", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "rename", in, "rename", "'k'", "already", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "one_hot", in, "one_hot", "k=3", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "causal", in, "causal_mask", "'k'", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "ce labels", in, "cross_entropy", "labels", "m=2", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "select mask", in, "select", "i32", "f64[m=3,k=4]", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "dropout rate", in, "dropout", "rate", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "broadcast", in, "broadcast", "k=4", "k=5", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "checkpoint_name", in, "checkpoint_name", "empty", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "softmax axis", in, "softmax", "m k", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "take axis", in, "take", "'vocab'", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "i32 pows -1", in, "pows", "exponent -1 on i32", "integer >= 0", "negative power", "cast x to a float dtype", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "i32 pows 0.5", in, "pows", "exponent 0.5 on i32", "integer >= 0", "cast x to a float dtype", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "attn batch", in, "attention", "k must have q's batch axes", "f64[m=3,k=4]", "f64[j=2,k=5]", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "attn size", in, "attention", "k must have", "'d'", "f64[m=2,d=5]", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "attn dtype", in, "attention", "float dtype", "f32[m=3,k=4]", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "attn axes", in, "attention", "'m'", "must differ", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "attn scale", in, "attention", "scale inf", "'k'", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "attn kpos", in, "attention (v)", "'m'", "f64[n=3,k=4]", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "attn big", in, "attention", "exactly one axis", "k e", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "attn dim", in, "attention", "'ke'", "1200", "at most 256", "test_ops.c");
    tj_tree_free(in);
    /* shapes of arrays, outside tracing */
    TJT_CHECK(!tj_zeros(ctx, TJ_F32, "batch=0"), "zeros batch=0 should fail");
    TJT_ERROR_HAS(ctx, "tj_", "'batch'", "\"0\"", "test_ops.c");
    TJT_CHECK(!tj_array_new(ctx, TJ_F32, "batch=x", NULL), "array batch=x should fail");
    TJT_ERROR_HAS(ctx, "tj_array_new", "'batch'", "\"x\"", "test_ops.c");
    TJT_CHECK(!tj_zeros(ctx, TJ_F32, "batch=2 embed=3 batch=2"), "duplicate axis should fail");
    TJT_ERROR_HAS(ctx, "tj_", "'batch'", "twice", "test_ops.c");

    /* grad of a non-scalar */
    in = tree3(ctx, "x=3", NULL, NULL, -1, 1);
    EXPECT_JIT_ERROR(ctx, "grad nonscalar", in, "grad", "not a scalar", "x=3", "test_ops.c");
    /* an output of one traced function used inside another */
    p = tj_jit(ctx, "stash", err_fn, (void *)"stash", in, NULL);
    TJT_CHECK(p != NULL, "stash jit: %s", tj_error(ctx));
    EXPECT_JIT_ERROR(ctx, "foreign op", in, "add", "traced function", "test_ops.c");
    EXPECT_JIT_ERROR(ctx, "foreign out", in, "output 'y'", "another traced function", "test_ops.c");
    tj_prog_free(p);
    stash = NULL;
    tj_tree_free(in);

    tjt_current = "errors: run time";
    {   /* take with an index out of range: found by the kernel */
        int32_t ix[3] = {1, 7, 0};
        in = tree3(ctx, "vocab=5 embed=2", NULL, NULL, -1, 1);
        tj_tree_set_array(in, "idx", tj_array_new(ctx, TJ_I32, "p=3", ix));
        p = tj_jit(ctx, "take oob", err_fn, (void *)"take oob", in, NULL);
        out = tj_tree_new(ctx);
        TJT_CHECK(p && tj_run(p, in, out) != TJ_OK, "take with index 7 of 5 should fail at run time");
        TJT_ERROR_HAS(ctx, "take", "out of range", "7", "'vocab'", "test_ops.c");
        TJT_CHECK(tj_tree_size(out) == 0, "a failed run should leave no outputs");
        tj_prog_free(p);
        tj_tree_free(out);
        tj_tree_free(in);
    }
    {
        int32_t lab[2] = {0, 4};
        in = tree3(ctx, "pos=2 cls=4", NULL, NULL, -1, 1);
        tj_tree_set_array(in, "idx", tj_array_new(ctx, TJ_I32, "pos=2", lab));
        p = tj_jit(ctx, "ce oob", err_fn, (void *)"ce oob", in, NULL);
        out = tj_tree_new(ctx);
        TJT_CHECK(p && tj_run(p, in, out) != TJ_OK, "cross_entropy with label 4 of 4 should fail at run time");
        TJT_ERROR_HAS(ctx, "cross_entropy", "out of range", "test_ops.c");
        tj_prog_free(p);
        tj_tree_free(out);
        tj_tree_free(in);
    }
    {   /* wrong input shape; missing leaf */
        tj_tree *in2;
        in = tree3(ctx, "x=3 y=4", "y=4", NULL, -1, 1);
        p = tj_jit(ctx, "add", err_fn, (void *)"add size", in, NULL);
        TJT_CHECK(p != NULL, "jit add: %s", tj_error(ctx));
        in2 = tree3(ctx, "x=3 y=4", "y=5", NULL, -1, 1);
        out = tj_tree_new(ctx);
        TJT_CHECK(tj_run(p, in2, out) != TJ_OK, "run with a wrongly shaped input should fail");
        TJT_ERROR_HAS(ctx, "run", "'b'", "y=5", "y=4", "test_ops.c");
        tj_tree_free(in2);
        in2 = tree3(ctx, "x=3 y=4", NULL, NULL, -1, 1);
        TJT_CHECK(tj_run(p, in2, out) != TJ_OK, "run with a missing leaf should fail");
        TJT_ERROR_HAS(ctx, "run", "'b'", "test_ops.c");
        tj_tree_free(in2);
        tj_tree_free(out);
        tj_prog_free(p);
        tj_tree_free(in);
    }
    {   /* a donated array used afterwards */
        tj_jit_opts o;
        memset(&o, 0, sizeof o);
        o.donate = "a";
        in = tree3(ctx, "p=10", "p=10", NULL, -1, 1);
        p = tj_jit(ctx, "update", err_fn, (void *)"update", in, &o);
        out = tj_tree_new(ctx);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "donating run: %s", tj_error(ctx));
        TJT_CHECK(tj_array_is_deleted(tj_tree_array(in, "a")), "donated input should be deleted");
        tj_tree_clear(out);
        TJT_CHECK(tj_run(p, in, out) != TJ_OK, "running again on a donated array should fail");
        TJT_ERROR_HAS(ctx, "run", "donated", "test_ops.c");
        {
            double d[10];
            TJT_CHECK(tj_array_read(tj_tree_array(in, "a"), TJ_F64, d) != TJ_OK, "reading a donated array should fail");
            TJT_ERROR_HAS(ctx, "donated");
        }
        tj_tree_free(out);
        tj_prog_free(p);
        tj_tree_free(in);
    }
    tj_clear_error(ctx);
}

/* ------------------------------------------------ 4. memory analysis --- */
static void mlp_fb(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w1 = tj_tree_v(in, "w1"), b1 = tj_tree_v(in, "b1"), w2 = tj_tree_v(in, "w2");
    tj_v h = tj_gelu(tj_add(tj_dot(x, w1, "in"), b1));
    tj_v o = tj_dot(h, w2, "hid");
    tj_v loss = tj_cross_entropy(o, tj_tree_v(in, "labels"), "cls", "batch");
    tj_v w[3], gr[3];
    (void)g;
    w[0] = w1; w[1] = b1; w[2] = w2;
    if (tj_grad(loss, 3, w, gr) != TJ_OK) return;
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "gw1", gr[0]);
    tj_tree_set_v(out, "gb1", gr[1]);
    tj_tree_set_v(out, "gw2", gr[2]);
    if (u) tj_tree_set_v(out, "h", h); /* an extra output (a forward activation) */
}
/* a lone dot of two arguments needs no temp memory, except bf16's f32 sums
   and, for products big enough to be packed, the matmul's pack buffers:
   one per thread (2 threads, 1 device here), planned, so the run allocates
   the plan and no pack buffer of its own */
static void dot_only(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    tj_tree_set_v(out, "y", tj_dot(tj_tree_v(in, "a"), tj_tree_v(in, "b"), "k"));
}
static void test_dot_temp(void) {
    tj_dtype dts[3] = {TJ_F32, TJ_F64, TJ_BF16};
    int i, big;
    for (big = 0; big < 2; big++)
        for (i = 0; i < 3; i++) {
            tj_ctx *ctx = tj_ctx_new();
            tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
            tj_prog *p;
            int64_t want, packs;
            long own;
            /* big: 70 x 80 x 90 per batch, above the direct loop's 64^3 */
            int m = big ? 70 : 3, k = big ? 80 : 5, n = big ? 90 : 4;
            char sa[64], sb[64];
            tj_set_threads(ctx, 2);
            snprintf(sa, sizeof sa, "bt=2 m=%d k=%d", m, k);
            snprintf(sb, sizeof sb, "bt=2 k=%d n=%d", k, n);
            tj_tree_set_array(in, "a", tjt_rand(ctx, dts[i], sa, 1, -1, 1));
            tj_tree_set_array(in, "b", tjt_rand(ctx, dts[i], sb, 2, -1, 1));
            p = tj_jit(ctx, "dot only", dot_only, NULL, in, NULL);
            packs = big && dts[i] != TJ_F64 && tjt_cpu_kernels(ctx) ? 2 * tjt_gemm_pack_bytes() : 0;
            /* per batch: c [m,n] summed in f32 (bf16), then the packs */
            want = (dts[i] == TJ_BF16 ? tjt_align(m * n * 4) : 0) + packs;
            TJT_CHECK(p && tj_prog_memory(p).temp_bytes == want && tj_prog_memory(p).pack_bytes == packs,
                      "%s %s dot: temp_bytes %lld (packs %lld), want %lld (%lld)", big ? "big" : "small", tj_dtype_name(dts[i]),
                      (long long)tj_prog_memory(p).temp_bytes, (long long)tj_prog_memory(p).pack_bytes, (long long)want, (long long)packs);
            own = tjt_pack_unplanned();
            TJT_CHECK(p && tj_run(p, in, out) == TJ_OK && tj_get_alloc_stats(ctx).peak_arena_bytes == want, "%s %s dot run",
                      big ? "big" : "small", tj_dtype_name(dts[i]));
            TJT_CHECK(!tjt_cpu_kernels(ctx) || tjt_pack_unplanned() == own, "%s %s dot: the run packed %ld times outside the plan", big ? "big" : "small",
                      tj_dtype_name(dts[i]), tjt_pack_unplanned() - own);
            tj_prog_free(p);
            tj_tree_free(in);
            tj_tree_free(out);
            tj_ctx_free(ctx);
        }
}
/* fresh context: jit, run once, compare the analysis with the counters */
static void check_memory(tj_dtype dt, const char *what, int extra, int batch) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    tj_alloc_stats s0, s1;
    tj_memory_analysis m;
    int32_t lbl[64];
    char sh[64];
    int i;
    int64_t out_exact = 0, arg_exact = 0;
    for (i = 0; i < batch; i++) lbl[i] = (i * 7) % 10;
    snprintf(sh, sizeof sh, "batch=%d in=13", batch);
    tj_tree_set_array(in, "x", tjt_rand(ctx, dt, sh, 1, -1, 1));
    tj_tree_set_array(in, "w1", tjt_rand(ctx, dt, "in=13 hid=24", 2, -1, 1));
    tj_tree_set_array(in, "b1", tjt_rand(ctx, dt, "hid=24", 3, -1, 1));
    tj_tree_set_array(in, "w2", tjt_rand(ctx, dt, "hid=24 cls=10", 4, -1, 1));
    snprintf(sh, sizeof sh, "batch=%d", batch);
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, sh, lbl));
    p = tj_jit(ctx, what, mlp_fb, extra ? (void *)1 : NULL, in, NULL);
    TJT_CHECK(p != NULL, "%s: %s", what, tj_error(ctx));
    if (!p) goto done;
    m = tj_prog_memory(p);
    s0 = tj_get_alloc_stats(ctx);
    TJT_CHECK(s0.peak_arena_bytes == 0, "fresh context has arena history");
    for (i = 0; i < tj_tree_size(in); i++) arg_exact += tj_array_numel(tj_tree_array_at(in, i)) * (int64_t)tj_dtype_size(tj_array_dtype(tj_tree_array_at(in, i)));
    if (tj_run(p, in, out) != TJ_OK) {
        TJT_CHECK(0, "%s run: %s", what, tj_error(ctx));
        goto done;
    }
    s1 = tj_get_alloc_stats(ctx);
    for (i = 0; i < tj_tree_size(out); i++) out_exact += tj_array_numel(tj_tree_array_at(out, i)) * (int64_t)tj_dtype_size(tj_array_dtype(tj_tree_array_at(out, i)));
    TJT_CHECK(m.temp_bytes > 0 && m.temp_bytes == s1.peak_arena_bytes - s0.peak_arena_bytes,
              "%s: temp_bytes %lld but the run's arena peaked at %lld", what, (long long)m.temp_bytes, (long long)(s1.peak_arena_bytes - s0.peak_arena_bytes));
    /* the program keeps its arena for the next run, until tj_prog_free */
    TJT_CHECK(s1.arena_bytes == m.temp_bytes && s1.arena_allocs == 1, "%s: %lld arena bytes held, %lld arenas", what, (long long)s1.arena_bytes,
              (long long)s1.arena_allocs);
    /* the arrays a run creates are its outputs: the analysis must predict them */
    TJT_CHECK(s1.array_bytes - s0.array_bytes == out_exact, "%s: array bytes grew by %lld, outputs hold %lld", what,
              (long long)(s1.array_bytes - s0.array_bytes), (long long)out_exact);
    TJT_CHECK(m.output_bytes == s1.array_bytes - s0.array_bytes, "%s: output_bytes %lld but the run allocated %lld bytes of outputs", what,
              (long long)m.output_bytes, (long long)(s1.array_bytes - s0.array_bytes));
    TJT_CHECK(m.argument_bytes == s0.array_bytes && s0.array_bytes == arg_exact, "%s: argument_bytes %lld but the arguments hold %lld", what,
              (long long)m.argument_bytes, (long long)s0.array_bytes);
    TJT_CHECK(m.alias_bytes == 0 && m.peak_bytes == m.argument_bytes + m.output_bytes + m.temp_bytes, "%s: peak %lld", what, (long long)m.peak_bytes);
    /* a second run allocates the same again */
    tj_tree_clear(out);
    s0 = tj_get_alloc_stats(ctx);
    TJT_CHECK(tj_run(p, in, out) == TJ_OK, "%s second run", what);
    s1 = tj_get_alloc_stats(ctx);
    /* ... which reuses the arena: no new temp memory, the same outputs */
    TJT_CHECK(s1.peak_arena_bytes == m.temp_bytes && s1.arena_allocs == 1 && s1.array_bytes - s0.array_bytes == out_exact, "%s: second run", what);
    tj_prog_free(p);
    p = NULL;
    TJT_CHECK(tj_get_alloc_stats(ctx).arena_bytes == 0, "%s: the arena outlived its program", what);
done:
    tj_clear_error(ctx);
    tj_prog_free(p);
    tj_tree_free(out);
    tj_tree_free(in);
    tj_ctx_free(ctx);
}
static void upd_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v w = tj_tree_v(in, "w"), gr = tj_tree_v(in, "g");
    (void)g; (void)u;
    tj_tree_set_v(out, "w", tj_sub(w, tj_muls(gr, 0.1)));
}
static void test_donation(const char *donate, int n) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in1 = tj_tree_new(ctx), *in2 = tj_tree_new(ctx), *o1 = tj_tree_new(ctx), *o2 = tj_tree_new(ctx);
    tj_prog *plain, *don;
    tj_jit_opts opts;
    tj_memory_analysis m;
    tj_alloc_stats s0, s1;
    char sh[32];
    int64_t wbytes = (int64_t)n * 4;
    void *wbuf;
    memset(&opts, 0, sizeof opts);
    opts.donate = donate;
    snprintf(sh, sizeof sh, "p=%d", n);
    tj_tree_set_array(in1, "w", tjt_rand(ctx, TJ_F32, sh, 5, -1, 1));
    tj_tree_set_array(in1, "g", tjt_rand(ctx, TJ_F32, sh, 6, -1, 1));
    tj_tree_set_array(in2, "w", tjt_rand(ctx, TJ_F32, sh, 5, -1, 1));
    tj_tree_set_array(in2, "g", tjt_rand(ctx, TJ_F32, sh, 6, -1, 1));
    plain = tj_jit(ctx, "update", upd_fn, NULL, in1, NULL);
    don = tj_jit(ctx, "update donated", upd_fn, NULL, in2, &opts);
    TJT_CHECK(plain && don, "update jit: %s", tj_error(ctx));
    if (!plain || !don) goto done;
    m = tj_prog_memory(don);
    TJT_CHECK(m.alias_bytes == wbytes, "donate \"%s\": alias_bytes %lld, want %lld", donate, (long long)m.alias_bytes, (long long)wbytes);
    TJT_CHECK(m.peak_bytes == m.argument_bytes + m.output_bytes + m.temp_bytes - m.alias_bytes, "donate \"%s\": peak %lld is not args + outs + temp - alias",
              donate, (long long)m.peak_bytes);
    TJT_CHECK(m.argument_bytes == 2 * wbytes && m.output_bytes == wbytes, "donate \"%s\": arguments %lld (want %lld), outputs %lld (want %lld)", donate,
              (long long)m.argument_bytes, (long long)(2 * wbytes), (long long)m.output_bytes, (long long)wbytes);
    /* donation removes exactly the output's bytes from the peak */
    TJT_CHECK(tj_prog_memory(plain).alias_bytes == 0 && tj_prog_memory(plain).temp_bytes == m.temp_bytes &&
              tj_prog_memory(plain).peak_bytes - m.peak_bytes == wbytes, "no donation: peak %lld, donated %lld",
              (long long)tj_prog_memory(plain).peak_bytes, (long long)m.peak_bytes);
    TJT_CHECK(tj_run(plain, in1, o1) == TJ_OK, "plain run: %s", tj_error(ctx));
    wbuf = tjt_array_data(tj_tree_array(in2, "w"), 0);
    s0 = tj_get_alloc_stats(ctx);
    TJT_CHECK(tj_run(don, in2, o2) == TJ_OK, "donated run: %s", tj_error(ctx));
    s1 = tj_get_alloc_stats(ctx);
    TJT_CHECK(tj_array_is_deleted(tj_tree_array(in2, "w")), "donated w should be deleted");
    TJT_CHECK(tj_tree_find(o2, "w") >= 0 && tjt_array_data(tj_tree_array(o2, "w"), 0) == wbuf, "the new w should live in the donated buffer");
    if (strstr(donate, "g")) {
        TJT_CHECK(tj_array_is_deleted(tj_tree_array(in2, "g")), "donated (unused) g should be deleted");
        TJT_CHECK(s1.array_bytes - s0.array_bytes == -wbytes, "donate \"%s\": array bytes changed by %lld, want %lld", donate,
                  (long long)(s1.array_bytes - s0.array_bytes), (long long)-wbytes);
    } else {
        TJT_CHECK(!tj_array_is_deleted(tj_tree_array(in2, "g")), "g was not donated");
        TJT_CHECK(s1.array_bytes == s0.array_bytes, "donate \"%s\": array bytes grew by %lld, want 0", donate, (long long)(s1.array_bytes - s0.array_bytes));
    }
    TJT_CHECK(m.output_bytes - m.alias_bytes == s1.array_bytes - s0.array_bytes + (strstr(donate, "g") ? wbytes : 0),
              "donate \"%s\": fresh output bytes predicted %lld", donate, (long long)(m.output_bytes - m.alias_bytes));
    if (tj_tree_find(o1, "w") >= 0 && tj_tree_find(o2, "w") >= 0) {
        double *a = arr(tj_tree_array(o1, "w")), *b = arr(tj_tree_array(o2, "w"));
        TJT_CHECK(maxdiff(a, b, n) == 0, "donated and plain updates differ");
        free(a); free(b);
    }
done:
    tj_clear_error(ctx);
    tj_prog_free(plain);
    tj_prog_free(don);
    tj_tree_free(in1); tj_tree_free(in2); tj_tree_free(o1); tj_tree_free(o2);
    tj_ctx_free(ctx);
}
static void test_memory(void) {
    tjt_current = "memory analysis";
    check_memory(TJ_F32, "mlp f32 fwd+bwd", 0, 8);
    check_memory(TJ_F32, "mlp f32 fwd+bwd + activation output", 1, 5);
    check_memory(TJ_F64, "mlp f64 fwd+bwd", 0, 7);
    check_memory(TJ_BF16, "mlp bf16 fwd+bwd", 1, 3);
    test_dot_temp();
    tjt_current = "donation";
    test_donation("w", 100);
    test_donation("w", 64);
    test_donation("w g", 100);
}

/* The f32 row kernels (float arithmetic, vectorised) against the f64 ones
   on the same values: rows of 50304 logits near 1000 (spread +-12: large
   logits, where a float lse loses digits unless x - max is taken first),
   forward and gradient of softmax, log_softmax, layer_norm, cross_entropy.
   Each f32 output is within tol of the f64 one, relative to that output's
   largest magnitude; tol is 10 to 100 times the error measured when
   written (softmax grad: 4e-5, from y = softmax(x) stored in f32, which
   the double kernel shows too: 2.7e-5). TJT_ROWS=1 prints the errors. */
static void rows_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), c = tj_tree_v(in, "c"), ys[4], d;
    int i;
    (void)g; (void)u;
    ys[0] = tj_softmax(x, "v");
    ys[1] = tj_log_softmax(x, "v");
    ys[2] = tj_layer_norm(x, "v", 1e-5);
    ys[3] = tj_cross_entropy(x, tj_tree_v(in, "lab"), "v", NULL);
    for (i = 0; i < 4; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "y%d", i);
        tj_tree_set_v(out, nm, ys[i]);
        if (tj_vjp(1, &ys[i], i < 3 ? &w : &c, 1, &x, &d) == TJ_OK) {
            snprintf(nm, sizeof nm, "d%d", i);
            tj_tree_set_v(out, nm, d);
        }
    }
}
/* bf16 logits: the forward's loss, stored in bf16, is too coarse to give
   the softmax (2^-8 relative: up to 6% error in exp for a loss of 16), so cross_entropy_grad
   computes the row's max and sum of exps itself. Each element is within
   2^-7 of the f64 gradient of the same values (bf16 rounds to 2^-9). */
static void xent_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), c = tj_tree_v(in, "c"), y = tj_cross_entropy(x, tj_tree_v(in, "lab"), "v", NULL), d;
    (void)g; (void)u;
    if (tj_vjp(1, &y, &c, 1, &x, &d) == TJ_OK) tj_tree_set_v(out, "d", d);
}
static void test_xent_bf16(tj_ctx *ctx) {
    enum { R = 2, V = 4099 };
    static uint16_t xh[R * V];
    static double xd[R * V], yh[R * V], yd[R * V];
    uint16_t ch[R] = {tj_f32_to_bf16(1.0f), tj_f32_to_bf16(-3.0f)};
    double cd[R] = {1.0, -3.0}, err = 0, big = 0;
    int32_t lab[R] = {0, 0};
    tj_tree *in[2], *out[2];
    int i, k, ok = 1;
    for (i = 0; i < R * V; i++) { /* labels at each row's smallest logit: a loss near 16, whose bf16 ulp is 1/8 */
        xh[i] = tj_f32_to_bf16((float)(7.9 * sin(0.37 * i))); /* losses 22.19 and 22.19: 0.06 from a bf16 value */
        xd[i] = tj_bf16_to_f32(xh[i]);
        if (xd[i] < xd[i / V * V + lab[i / V]]) lab[i / V] = i % V;
    }
    for (k = 0; k < 2; k++) {
        tj_prog *p;
        in[k] = tj_tree_new(ctx);
        out[k] = tj_tree_new(ctx);
        tj_tree_set_array(in[k], "x", tj_array_new(ctx, k ? TJ_F64 : TJ_BF16, "r=2 v=4099", k ? (const void *)xd : (const void *)xh));
        tj_tree_set_array(in[k], "c", tj_array_new(ctx, k ? TJ_F64 : TJ_BF16, "r=2", k ? (const void *)cd : (const void *)ch));
        tj_tree_set_array(in[k], "lab", tj_array_new(ctx, TJ_I32, "r=2", lab));
        p = tj_jit(ctx, "xent", xent_fn, NULL, in[k], NULL);
        ok &= p && !tj_run(p, in[k], out[k]) && tj_tree_array(out[k], "d") && !tj_array_read(tj_tree_array(out[k], "d"), TJ_F64, k ? yd : yh);
        TJT_CHECK(ok, "bf16 cross_entropy grad (%s): %s", k ? "f64" : "bf16", tj_error(ctx));
        tj_prog_free(p);
    }
    for (i = 0; i < R * V && ok; i++) big = fabs(yd[i]) > big ? fabs(yd[i]) : big;
    for (i = 0; i < R * V && ok; i++) /* each element that is not ~0: relative */
        if (fabs(yd[i]) > 1e-4 * big && fabs(yh[i] - yd[i]) / fabs(yd[i]) > err) err = fabs(yh[i] - yd[i]) / fabs(yd[i]);
    if (getenv("TJT_ROWS")) printf("cross_entropy grad, bf16: %.3g\n", err);
    TJT_CHECK(!ok || err <= 1.0 / 128, "bf16 cross_entropy grad: an element differs from f64 by %.3g of itself (want <= 2^-7: bf16 rounding)", err);
    for (k = 0; k < 2; k++) {
        tj_tree_free(in[k]);
        tj_tree_free(out[k]);
    }
}
/* tj_attention against the same attention from dot, causal_mask and
   softmax in f64 on the same (rounded) inputs: values and gradients, in
   f64, f32 and bf16, over rows long enough to need the online softmax's
   rescaling. u: "fused" or "f64 composed", then " causal" or not. */
static void attn_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int ref = ((const char *)u)[0] == 'f' && ((const char *)u)[1] == '6', causal = strstr((const char *)u, "causal") != NULL, i;
    tj_v x[3], gx[3], y;
    (void)g;
    x[0] = leaf(in, "a"), x[1] = leaf(in, "b"), x[2] = leaf(in, "c");
    for (i = 0; ref && i < 3; i++) x[i] = tj_cast(x[i], TJ_F64);
    y = op_y(ref ? (causal ? "attention:composed causal" : "attention:composed") : (causal ? "attention:causal" : "attention"), x[0], x[1], x[2], NULL);
    y = tj_transpose(y, "b h q d"); /* one axis order for both */
    tj_tree_set_v(out, "y", y);
    if (tj_grad(wsum(tj_cast(y, TJ_F64), 7), 3, x, gx) != TJ_OK) return;
    tj_tree_set_v(out, "ga", gx[0]);
    tj_tree_set_v(out, "gb", gx[1]);
    tj_tree_set_v(out, "gc", gx[2]);
}
static void test_attention_values(tj_ctx *ctx) {
    static const tj_dtype dts[3] = {TJ_F64, TJ_F32, TJ_BF16};
    static const double tol[3] = {1e-12, 2e-6, 1e-2};
    /* 37 x 37: partial tiles of queries and keys; 70 x 45 and 20 x 75: more
       queries than keys and fewer (causal: rows that see every key, keys no
       query sees) */
    static const char *shapes[3][3] = {{"b=2 q=37 h=3 d=20", "h=3 b=2 k=37 d=20", "k=37 b=2 h=3 d=9"},
                                       {"b=1 q=70 h=2 d=33", "h=2 b=1 k=45 d=33", "k=45 b=1 h=2 d=17"},
                                       {"b=1 q=20 h=2 d=16", "h=2 b=1 k=75 d=16", "k=75 b=1 h=2 d=16"}};
    int d, causal;
    tjt_current = "attention values";
    for (d = 0; d < 9; d++)
        for (causal = 0; causal < 2; causal++) {
            tjt_outs o[2];
            int v;
            char what[96];
            tj_tree *in = tj_tree_new(ctx);
            memset(o, 0, sizeof o);
            tj_tree_set_array(in, "a", tjt_rand(ctx, dts[d % 3], shapes[d / 3][0], 11 + d, -2, 2));
            tj_tree_set_array(in, "b", tjt_rand(ctx, dts[d % 3], shapes[d / 3][1], 21 + d, -2, 2));
            tj_tree_set_array(in, "c", tjt_rand(ctx, dts[d % 3], shapes[d / 3][2], 31 + d, -1, 1));
            for (v = 0; v < 2; v++) {
                tj_tree *out = tj_tree_new(ctx);
                tj_prog *p = tj_jit(ctx, "attention", attn_fn, (void *)(v ? (causal ? "f64 composed causal" : "f64 composed") : (causal ? "fused causal" : "fused")), in, NULL);
                TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "attention %d run: %s", v, tj_error(ctx));
                tj_clear_error(ctx);
                tjt_outs_read(&o[v], out);
                tj_prog_free(p);
                tj_tree_free(out);
            }
            snprintf(what, sizeof what, "attention %s %s%s vs dot+softmax in f64", tj_dtype_name(dts[d % 3]), shapes[d / 3][0], causal ? " causal" : "");
            tjt_outs_compare(what, &o[1], &o[0], tol[d % 3]);
            { /* the backward in one pass and in two (dq apart): the same bits */
                tjt_outs w[2];
                int pass;
                memset(w, 0, sizeof w);
                for (pass = 1; pass <= 2; pass++) {
                    tj_tree *out = tj_tree_new(ctx);
                    tj_prog *p;
                    tjt_attn_passes(pass);
                    p = tj_jit(ctx, "attention", attn_fn, (void *)(causal ? "fused causal" : "fused"), in, NULL);
                    TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "attention, backward in %d passes: %s", pass, tj_error(ctx));
                    tj_clear_error(ctx);
                    tjt_outs_read(&w[pass - 1], out);
                    tj_prog_free(p);
                    tj_tree_free(out);
                }
                tjt_attn_passes(0);
                snprintf(what, sizeof what, "attention %s %s%s: backward in one pass vs two", tj_dtype_name(dts[d % 3]), shapes[d / 3][0], causal ? " causal" : "");
                tjt_outs_compare(what, &w[0], &w[1], 0);
                tjt_outs_free(&w[0]);
                tjt_outs_free(&w[1]);
            }
            tjt_outs_free(&o[0]);
            tjt_outs_free(&o[1]);
            tj_tree_free(in);
        }
}
/* cross_entropy near a loss of 0 (the label's logit far above the rest):
   the loss and the label's gradient keep their relative accuracy, (max -
   z[label]) + log(sum) and expm1(-loss), where lse - z[label] and p - 1
   cancel (about 1e-7 relative off at a loss of 2e-9, in f64) */
static void xent_small_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x"), lab = leaf(in, "lab"), l = tj_cross_entropy(x, lab, "a", ""), gx;
    (void)g, (void)u;
    tj_tree_set_v(out, "loss", l);
    if (tj_grad(tj_sum(l, "r"), 1, &x, &gx) == TJ_OK) tj_tree_set_v(out, "gx", gx);
}
static void test_xent_small_loss(tj_ctx *ctx) {
    static const double x[2 * 3] = {-2.64114467, -22.7531793, -30.0, 5.0, -14.5, -15.25};
    static const int32_t lab[2] = {0, 0};
    double loss[2], gx[6];
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    int r;
    tjt_current = "cross_entropy near 0";
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F64, "r=2 a=3", x));
    tj_tree_set_array(in, "lab", tj_array_new(ctx, TJ_I32, "r=2", lab));
    p = tj_jit(ctx, "xent small", xent_small_fn, NULL, in, NULL);
    TJT_CHECK(p && tj_run(p, in, out) == TJ_OK && !tj_array_read(tj_tree_array(out, "loss"), TJ_F64, loss) &&
                  !tj_array_read(tj_tree_array(out, "gx"), TJ_F64, gx), "xent small: %s", tj_error(ctx));
    for (r = 0; p && r < 2; r++) {
        const double *z = x + 3 * r;
        double e1 = exp(z[1] - z[0]), e2 = exp(z[2] - z[0]), want = log1p(e1 + e2), wantg = -(e1 + e2) / (1 + e1 + e2);
        TJT_CHECK(fabs(loss[r] - want) <= 1e-14 * want, "row %d: loss %.17g, want %.17g (relative error %.2g)", r, loss[r], want, fabs(loss[r] - want) / want);
        TJT_CHECK(fabs(gx[3 * r] - wantg) <= 1e-14 * fabs(wantg), "row %d: the label's gradient %.17g, want %.17g (relative error %.2g)", r, gx[3 * r], wantg,
                  fabs(gx[3 * r] - wantg) / fabs(wantg));
    }
    tj_clear_error(ctx);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
}
/* relu's gradient selects, as jax.nn.relu's: 0 where x <= 0 or x is NaN
   even for a NaN or inf cotangent (a product would give NaN there) */
static void relu_ct_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x"), ct = leaf(in, "ct"), y, gx;
    (void)g, (void)u;
    y = tj_relu(x);
    if (tj_vjp(1, &y, &ct, 1, &x, &gx) == TJ_OK) tj_tree_set_v(out, "gx", gx);
}
static void test_relu_select(tj_ctx *ctx) {
    static const double x[6] = {-1, 0, 2, NAN, -INFINITY, 0.5}, ct[6] = {NAN, INFINITY, 3, 5, NAN, -INFINITY}, want[6] = {0, 0, 3, 0, 0, -INFINITY};
    double got[6];
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    int i;
    tjt_current = "relu gradient: a select";
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F64, "n=6", x));
    tj_tree_set_array(in, "ct", tj_array_new(ctx, TJ_F64, "n=6", ct));
    p = tj_jit(ctx, "relu ct", relu_ct_fn, NULL, in, NULL);
    TJT_CHECK(p && tj_run(p, in, out) == TJ_OK && !tj_array_read(tj_tree_array(out, "gx"), TJ_F64, got), "relu ct: %s", tj_error(ctx));
    for (i = 0; p && i < 6; i++)
        TJT_CHECK(got[i] == want[i], "relu gradient at x = %g with cotangent %g: %g, want %g (JAX: select(x > 0, g, 0))", x[i], ct[i], got[i], want[i]);
    tj_clear_error(ctx);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
}
/* max and min order -0 below +0, as JAX (XLA) does: max(-0, +0) = +0 and
   min(+0, -0) = -0 in either order, elementwise and reduced; tinyjax kept
   the first operand of a tie (max2(+0, -0) gave -0, so 1 / max2 was -inf) */
static void signed_zero_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v a = leaf(in, "a"), b = leaf(in, "b"), r = leaf(in, "r");
    (void)g, (void)u;
    tj_tree_set_v(out, "max2", tj_max2(a, b));
    tj_tree_set_v(out, "min2", tj_min2(a, b));
    tj_tree_set_v(out, "inv_max2", tj_div(tj_scalar(g, tj_v_dtype(a), 1.0), tj_max2(a, b)));
    tj_tree_set_v(out, "max", tj_max(r, "k"));
    tj_tree_set_v(out, "min", tj_min(r, "k"));
}
static void test_signed_zero(tj_ctx *ctx) {
    static const double a[6] = {-0.0, 0.0, -0.0, 0.0, 1.0, NAN}, b[6] = {0.0, -0.0, -0.0, 0.0, 1.0, -0.0};
    static const double wmax[6] = {0.0, 0.0, -0.0, 0.0, 1.0, NAN}, wmin[6] = {-0.0, -0.0, -0.0, 0.0, 1.0, NAN};
    static const double r[3][2] = {{-0.0, 0.0}, {0.0, -0.0}, {-0.0, -0.0}}, rmax[3] = {0.0, 0.0, -0.0}, rmin[3] = {-0.0, -0.0, -0.0};
    static const tj_dtype dts[3] = {TJ_F64, TJ_F32, TJ_BF16};
    int d, i;
    tjt_current = "max and min: -0 < +0";
    for (d = 0; d < 3; d++) {
        tj_tree *in = tj_tree_new(ctx), *out;
        float af[6], bf[6], rf[6];
        uint16_t ah[6], bh[6], rh[6];
        const void *pa = a, *pb = b, *pr = r;
        double got[6];
        int ok;
        for (i = 0; i < 6; i++) {
            af[i] = (float)a[i], bf[i] = (float)b[i], rf[i] = (float)r[i / 2][i % 2];
            ah[i] = tj_f32_to_bf16(af[i]), bh[i] = tj_f32_to_bf16(bf[i]), rh[i] = tj_f32_to_bf16(rf[i]);
        }
        if (d == 1) pa = af, pb = bf, pr = rf;
        if (d == 2) pa = ah, pb = bh, pr = rh;
        tj_tree_set_array(in, "a", tj_array_new(ctx, dts[d], "n=6", pa));
        tj_tree_set_array(in, "b", tj_array_new(ctx, dts[d], "n=6", pb));
        tj_tree_set_array(in, "r", tj_array_new(ctx, dts[d], "m=3 k=2", pr));
        out = run_fn(ctx, "signed zero", signed_zero_fn, NULL, in);
        if (tj_tree_find(out, "max2") >= 0) {
            tj_array_read(tj_tree_array(out, "max2"), TJ_F64, got);
            for (i = 0, ok = 1; i < 6; i++) ok &= i == 5 ? got[i] != got[i] : got[i] == wmax[i] && signbit(got[i]) == signbit(wmax[i]);
            TJT_CHECK(ok, "%s max2(-0, +0) = max2(+0, -0) = +0: %g %g %g", tj_dtype_name(dts[d]), got[0], got[1], got[2]);
            tj_array_read(tj_tree_array(out, "min2"), TJ_F64, got);
            for (i = 0, ok = 1; i < 6; i++) ok &= i == 5 ? got[i] != got[i] : got[i] == wmin[i] && signbit(got[i]) == signbit(wmin[i]);
            TJT_CHECK(ok, "%s min2(-0, +0) = min2(+0, -0) = -0: %g %g %g", tj_dtype_name(dts[d]), got[0], got[1], got[2]);
            tj_array_read(tj_tree_array(out, "inv_max2"), TJ_F64, got);
            TJT_CHECK(got[0] == INFINITY && got[1] == INFINITY && got[2] == -INFINITY, "%s 1 / max2 of zeros (fused): %g %g %g", tj_dtype_name(dts[d]), got[0], got[1], got[2]);
            tj_array_read(tj_tree_array(out, "max"), TJ_F64, got);
            for (i = 0, ok = 1; i < 3; i++) ok &= got[i] == 0 && signbit(got[i]) == signbit(rmax[i]);
            TJT_CHECK(ok, "%s reduce max of zeros: %g %g %g", tj_dtype_name(dts[d]), got[0], got[1], got[2]);
            tj_array_read(tj_tree_array(out, "min"), TJ_F64, got);
            for (i = 0, ok = 1; i < 3; i++) ok &= got[i] == 0 && signbit(got[i]) == signbit(rmin[i]);
            TJT_CHECK(ok, "%s reduce min of zeros: %g %g %g", tj_dtype_name(dts[d]), got[0], got[1], got[2]);
        }
        tj_tree_free(out);
        tj_tree_free(in);
    }
}
/* tj_mean of bf16 is jnp.mean's: the sum and the scaling in f32, one
   rounding to bf16 (jnp.mean upcasts; XLA multiplies by the reciprocal of
   the count). It rounded the sum to bf16, then multiplied by bf16(1/n):
   40% of rows of 3 were an ulp off. Its gradient: g / n rounded once. */
static void mean_bf16_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x"), ct = leaf(in, "ct"), m, gx;
    (void)g, (void)u;
    m = tj_mean(x, "c");
    tj_tree_set_v(out, "m", m);
    if (tj_vjp(1, &m, &ct, 1, &x, &gx) == TJ_OK) tj_tree_set_v(out, "gx", gx);
}
static void test_mean_bf16(tj_ctx *ctx) {
    enum { R = 64, C = 3 };
    uint16_t x[R * C], ct[R], got[R], gx[R * C];
    tj_tree *in = tj_tree_new(ctx), *out;
    uint32_t z = 12345;
    int r, c, bad = 0, badg = 0;
    tjt_current = "mean of bf16: f32 inside, one rounding";
    for (r = 0; r < R * C; r++) {
        z = z * 1664525u + 1013904223u;
        x[r] = tj_f32_to_bf16((float)((double)(z >> 8) / 16777216.0 * 8.0 - 4.0));
        if (r < R) {
            z = z * 1664525u + 1013904223u;
            ct[r] = tj_f32_to_bf16((float)((double)(z >> 8) / 16777216.0 * 3.0 - 1.5));
        }
    }
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_BF16, "r=64 c=3", x));
    tj_tree_set_array(in, "ct", tj_array_new(ctx, TJ_BF16, "r=64", ct));
    out = run_fn(ctx, "mean bf16", mean_bf16_fn, NULL, in);
    if (tj_tree_find(out, "m") >= 0 && tj_tree_find(out, "gx") >= 0) {
        tj_array_read(tj_tree_array(out, "m"), TJ_BF16, got);
        tj_array_read(tj_tree_array(out, "gx"), TJ_BF16, gx);
        for (r = 0; r < R; r++) {
            double sd = 0;
            float want, wg = tj_bf16_to_f32(ct[r]) * (float)(1.0 / C);
            for (c = 0; c < C; c++) sd += tj_bf16_to_f32(x[r * C + c]);
            want = (float)sd * (float)(1.0 / C);
            bad += got[r] != tj_f32_to_bf16(want);
            for (c = 0; c < C; c++) badg += gx[r * C + c] != tj_f32_to_bf16(wg);
        }
        TJT_CHECK(bad == 0, "bf16 mean = bf16(f32(sum) * f32(1/n)) as jnp.mean: %d of %d rows differ", bad, R);
        TJT_CHECK(badg == 0, "bf16 mean's gradient = bf16(f32(g) * f32(1/n)): %d of %d differ", badg, R * C);
    }
    tj_tree_free(out);
    tj_tree_free(in);
}
/* tj_pows' exponent takes x's dtype, as JAX's weak-typed x ** p: on bf16,
   x ** 1.1 raises to bf16(1.1) = 1.1015625 (10% apart from x^1.1 at
   1e30, where tinyjax used 1.1 in double); f32 rounds p to f32. Its
   gradient p x^(p-1) too. */
static double pw_p;
static void pows_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x"), y, gx;
    (void)g, (void)u;
    y = tj_pows(x, pw_p);
    tj_tree_set_v(out, "y", y);
    if (tj_grad(tj_sum_all(tj_cast(y, TJ_F64)), 1, &x, &gx) == TJ_OK) tj_tree_set_v(out, "gx", gx);
}
/* dropout keeps a fraction 1 - rate of the elements in every float dtype:
   a bf16 uniform has 8 bits, and rounded to nearest it put values just
   below the rate on it (at 0.5: 4157 of 2^22 too many kept, 4 sigma) */
static double drop_rate;
static void drop_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x");
    (void)g; (void)u;
    tj_tree_set_v(out, "k", tj_sum_all(tj_cast(tj_ne(tj_dropout(x, 99, drop_rate), tj_scalar(g, tj_v_dtype(x), 0)), TJ_F64)));
}
static void test_dropout_rate(tj_ctx *ctx) {
    tj_dtype dts[3] = {TJ_F32, TJ_BF16, TJ_F64};
    double rates[3] = {0.5, 0.1, 0.3};
    const int64_t n = 1 << 22;
    int d, r;
    tjt_current = "dropout keeps 1 - rate";
    for (d = 0; d < 3; d++)
        for (r = 0; r < 3; r++) {
            tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
            tj_array *a = tj_ones(ctx, dts[d], "n=4194304");
            tj_prog *p;
            double k = 0, want = (1 - rates[r]) * (double)n, sigma = sqrt((double)n * rates[r] * (1 - rates[r]));
            tj_tree_set_array(in, "x", a);
            drop_rate = rates[r];
            p = tj_jit(ctx, "dropout rate", drop_fn, NULL, in, NULL);
            TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "runs: %s", tj_error(ctx));
            if (p && !tj_status_of(ctx)) tj_array_read(tj_tree_array(out, "k"), TJ_F64, &k);
            if (getenv("DROP_PRINT")) printf("%s %g kept %.0f want %.0f sigma %.0f\n", tj_dtype_name(dts[d]), rates[r], k, want, sigma);
            TJT_CHECK(fabs(k - want) < 3 * sigma, "%s rate %g: kept %.0f of %lld, want %.0f +- %.0f (3 sigma; the key is fixed, so this is deterministic)", tj_dtype_name(dts[d]), rates[r], k, (long long)n, want, 3 * sigma);
            tj_clear_error(ctx);
            tj_prog_free(p);
            tj_tree_free(in);
            tj_tree_free(out);
        }
}
static void test_pows_weak(tj_ctx *ctx) {
    static const double ps[3] = {1.1, 1.0 / 3.0, -0.7};
    static const float xs[4] = {1e30f, 8.0f, 3.0f, 1e-20f};
    int d, k, i;
    tjt_current = "pows: the exponent in x's dtype";
    for (d = 0; d < 2; d++)
        for (k = 0; k < 3; k++) {
            tj_dtype dt = d ? TJ_BF16 : TJ_F32;
            tj_tree *in = tj_tree_new(ctx), *out;
            uint16_t xb[4];
            float xf[4], y[4], gx[4];
            double p = d ? tj_bf16_to_f32(tj_f32_to_bf16((float)ps[k])) : (double)(float)ps[k], pm1;
            int bad = 0, badg = 0;
            pm1 = d ? tj_bf16_to_f32(tj_f32_to_bf16((float)(p - 1.0))) : (double)(float)(p - 1.0);
            for (i = 0; i < 4; i++) xb[i] = tj_f32_to_bf16(xs[i]), xf[i] = d ? tj_bf16_to_f32(xb[i]) : xs[i];
            tj_tree_set_array(in, "x", tj_array_new(ctx, dt, "n=4", d ? (const void *)xb : (const void *)xf));
            pw_p = ps[k];
            out = run_fn(ctx, "pows weak", pows_fn, NULL, in);
            if (tj_tree_find(out, "y") >= 0 && tj_tree_find(out, "gx") >= 0) {
                tj_array_read(tj_tree_array(out, "y"), TJ_F32, y);
                tj_array_read(tj_tree_array(out, "gx"), TJ_F32, gx);
                for (i = 0; i < 4; i++) {
                    float want = (float)pow(xf[i], p), wg;
                    if (d) want = tj_bf16_to_f32(tj_f32_to_bf16(want));
                    wg = (float)pow(xf[i], pm1);
                    if (d) wg = tj_bf16_to_f32(tj_f32_to_bf16(wg));
                    wg = (float)((double)wg * p);
                    if (d) wg = tj_bf16_to_f32(tj_f32_to_bf16(wg));
                    bad += y[i] != want;
                    badg += !(fabs(gx[i] - wg) <= 1e-6 * fabs(wg)) && !(gx[i] == wg);
                }
                TJT_CHECK(bad == 0, "%s x ** %g raises to %.9g (x's dtype): %d of 4 differ (x = 1e30: %g)", tj_dtype_name(dt), ps[k], p, bad, y[0]);
                TJT_CHECK(badg == 0, "%s gradient of x ** %g is %.9g x ** %.9g: %d of 4 differ", tj_dtype_name(dt), ps[k], p, pm1, badg);
            }
            tj_tree_free(out);
            tj_tree_free(in);
        }
}
/* tj_sigmoid is jax.nn.sigmoid (lax.logistic). silu = x sigmoid(x), its
   gradient and sigmoid itself at x = -100, -50, 0, 100, 1e30, -inf against
   JAX 0.10.2 (jax.nn.silu, jax.grad of its sum, jax.nn.sigmoid; f64 values
   below; f32 and bf16 within 1 and 2 ulps, except that JAX flushes the
   denormal results at -100 to 0, where tinyjax keeps them: README,
   "Denormal numbers are kept"; at -inf silu is -inf * 0 = NaN in both).
   Before tj_sigmoid the only way was 1 / (1 + exp(-x)), whose gradient at
   x = -100 is 0 * inf = NaN in f32 (so is JAX's for that hand-written form). */
static void silu_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x"), s, y, gx;
    (void)g, (void)u;
    s = tj_sigmoid(x);
    y = tj_mul(x, s);
    tj_tree_set_v(out, "s", s);
    tj_tree_set_v(out, "y", y);
    if (tj_grad(tj_sum_all(y), 1, &x, &gx) == TJ_OK) tj_tree_set_v(out, "gx", gx);
}
static void test_sigmoid_extremes(tj_ctx *ctx) {
    static const double x[6] = {-100.0, -50.0, 0.0, 100.0, 1e30, -INFINITY};
    static const double want_y[6] = {-3.72007598e-42, -9.64374924e-21, 0.0, 100.0, 1e30, NAN};
    static const double want_g[6] = {-3.68287522e-42, -9.45087426e-21, 0.5, 1.0, 1.0, NAN};
    static const double want_s[6] = {3.72007598e-44, 1.92874985e-22, 0.5, 1.0, 1.0, 0.0};
    static const tj_dtype dts[3] = {TJ_F32, TJ_F64, TJ_BF16};
    int d, i, k;
    tjt_current = "sigmoid (silu) at extremes";
    for (d = 0; d < 3; d++) {
        double got[3][6];
        const double *want[3] = {want_y, want_g, want_s};
        const char *names[3] = {"silu", "silu gradient", "sigmoid"};
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        tj_array *a = tj_array_new(ctx, TJ_F64, "n=6", x);
        tj_prog *p;
        if (dts[d] != TJ_F64) { /* the same values in f32 / bf16 */
            float xf[6];
            uint16_t h[6];
            for (i = 0; i < 6; i++) xf[i] = (float)x[i], h[i] = tj_f32_to_bf16(xf[i]);
            tj_array_free(a);
            a = tj_array_new(ctx, dts[d], "n=6", dts[d] == TJ_F32 ? (const void *)xf : (const void *)h);
        }
        tj_tree_set_array(in, "x", a);
        p = tj_jit(ctx, "silu", silu_fn, NULL, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK && !tj_array_read(tj_tree_array(out, "y"), TJ_F64, got[0]) &&
                      !tj_array_read(tj_tree_array(out, "gx"), TJ_F64, got[1]) && !tj_array_read(tj_tree_array(out, "s"), TJ_F64, got[2]),
                  "silu: %s", tj_error(ctx));
        for (k = 0; p && k < 3; k++)
            for (i = 0; i < 6; i++) {
                double w = want[k][i], v = got[k][i], tol = dts[d] == TJ_BF16 ? 1.6e-2 : dts[d] == TJ_F32 ? 1.2e-7 : 1e-8;
                int ok = isnan(w) ? isnan(v)
                         : dts[d] != TJ_F64 && fabs(w) < 1.2e-38 ? !isnan(v) && fabs(v) < 1.2e-38 /* a denormal: JAX flushes it */
                                                                  : fabs(v - w) <= tol * fabs(w);
                TJT_CHECK(ok, "%s %s at x = %g: %.9g, want %.9g (JAX)", tj_dtype_name(dts[d]), names[k], x[i], v, w);
            }
        tj_clear_error(ctx);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
    }
}
/* sin, cos, abs, sign, log1p, expm1, erf, softplus: value and gradient at
   infinities, NaN, signed zeros, denormals (2^-133: normal in f64,
   denormal in f32 and bf16), huge |x| (2^100: sin and cos reduce it
   exactly, as XLA's f32 sin does) against JAX 0.10.2 in f32, f64 and
   bf16 (x values exact in bf16). tinyjax evaluates each op in double and
   rounds once, JAX's f32 and bf16 kernels step by step: within 2 ulps
   (bf16: 2^-6 relative); gradients are the same ops as JAX's rules (expm1's
   g (y + 1) is 0 at x = -20 in f32, where y rounds to -1, in both). Where
   JAX's CPU flushes a denormal to 0 (README, "Denormal numbers are kept"),
   the value is JAX's f64 one: sign(-2^-133) = -1 (JAX f32: -0), abs' gradient
   there -1 (JAX f32: +1, seeing x = 0), softplus(-100) = 3.8e-44 (JAX f32: 0). */
/* generated from JAX 0.10.2 (jax.numpy / jax.nn / jax.scipy.special, the gradient jax.grad of the op: /tmp gen script in the commit message) */
static const double un_x[20] = {-INFINITY, -1.2676506002282294e+30, -100, -20, -3, -1, -0.5, -9.1835496157991212e-41, -0.0, 0.0, 9.1835496157991212e-41, 9.5367431640625e-07, 0.5, 1, 3, 20, 100, 1.2676506002282294e+30, INFINITY, NAN};
static const struct { const char *op; double y[3][20], g[3][20]; } un_want[] = {
    {"sin",
     {{NAN, 0.87218362092971802, 0.50636565685272217, -0.91294527053833008, -0.14112000167369843, -0.84147095680236816, -0.47942554950714111, -9.1835496157991212e-41, -0.0, 0.0, 9.1835496157991212e-41, 9.5367431640625e-07, 0.47942554950714111, 0.84147095680236816, 0.14112000167369843, 0.91294527053833008, -0.50636565685272217, -0.87218362092971802, NAN, NAN},
      {NAN, 0.87218360541826734, 0.50636564110975879, -0.91294525072762767, -0.14112000805986721, -0.8414709848078965, -0.47942553860420301, -9.1835496157991212e-41, -0.0, 0.0, 9.1835496157991212e-41, 9.5367431640610548e-07, 0.47942553860420301, 0.8414709848078965, 0.14112000805986721, 0.91294525072762767, -0.50636564110975879, -0.87218360541826734, NAN, NAN},
      {NAN, 0.87109375, 0.5078125, -0.9140625, -0.1416015625, -0.83984375, -0.478515625, -9.1835496157991212e-41, -0.0, 0.0, 9.1835496157991212e-41, 9.5367431640625e-07, 0.478515625, 0.83984375, 0.1416015625, 0.9140625, -0.5078125, -0.87109375, NAN, NAN}},
     {{NAN, 0.48917865753173828, 0.86231887340545654, 0.40808206796646118, -0.98999249935150146, 0.54030227661132812, 0.87758255004882812, 1, 1, 1, 1, 1, 0.87758255004882812, 0.54030227661132812, -0.98999249935150146, 0.40808206796646118, 0.86231887340545654, 0.48917865753173828, NAN, NAN},
      {NAN, 0.48917865697472146, 0.86231887228768389, 0.40808206181339196, -0.98999249660044542, 0.54030230586813977, 0.87758256189037276, 1, 1, 1, 1, 0.99999999999954525, 0.87758256189037276, 0.54030230586813977, -0.98999249660044542, 0.40808206181339196, 0.86231887228768389, 0.48917865697472146, NAN, NAN},
      {NAN, 0.48828125, 0.86328125, 0.408203125, -0.98828125, 0.5390625, 0.87890625, 1, 1, 1, 1, 1, 0.87890625, 0.5390625, -0.98828125, 0.408203125, 0.86328125, 0.48828125, NAN, NAN}}},
    {"cos",
     {{NAN, 0.48917865753173828, 0.86231887340545654, 0.40808206796646118, -0.98999249935150146, 0.54030227661132812, 0.87758255004882812, 1, 1, 1, 1, 1, 0.87758255004882812, 0.54030227661132812, -0.98999249935150146, 0.40808206796646118, 0.86231887340545654, 0.48917865753173828, NAN, NAN},
      {NAN, 0.48917865697472146, 0.86231887228768389, 0.40808206181339196, -0.98999249660044542, 0.54030230586813977, 0.87758256189037276, 1, 1, 1, 1, 0.99999999999954525, 0.87758256189037276, 0.54030230586813977, -0.98999249660044542, 0.40808206181339196, 0.86231887228768389, 0.48917865697472146, NAN, NAN},
      {NAN, 0.48828125, 0.86328125, 0.408203125, -0.98828125, 0.5390625, 0.87890625, 1, 1, 1, 1, 1, 0.87890625, 0.5390625, -0.98828125, 0.408203125, 0.86328125, 0.48828125, NAN, NAN}},
     {{NAN, -0.87218362092971802, -0.50636565685272217, 0.91294527053833008, 0.14112000167369843, 0.84147095680236816, 0.47942554950714111, 0.0, 0.0, -0.0, -0.0, -9.5367431640625e-07, -0.47942554950714111, -0.84147095680236816, -0.14112000167369843, -0.91294527053833008, 0.50636565685272217, 0.87218362092971802, NAN, NAN},
      {NAN, -0.87218360541826734, -0.50636564110975879, 0.91294525072762767, 0.14112000805986721, 0.8414709848078965, 0.47942553860420301, 9.1835496157991212e-41, 0.0, -0.0, -9.1835496157991212e-41, -9.5367431640610548e-07, -0.47942553860420301, -0.8414709848078965, -0.14112000805986721, -0.91294525072762767, 0.50636564110975879, 0.87218360541826734, NAN, NAN},
      {NAN, -0.87109375, -0.5078125, 0.9140625, 0.1416015625, 0.83984375, 0.478515625, 0.0, 0.0, -0.0, -0.0, -9.5367431640625e-07, -0.478515625, -0.83984375, -0.1416015625, -0.9140625, 0.5078125, 0.87109375, NAN, NAN}}},
    {"abs",
     {{INFINITY, 1.2676506002282294e+30, 100, 20, 3, 1, 0.5, 9.1835496157991212e-41, 0.0, 0.0, 9.1835496157991212e-41, 9.5367431640625e-07, 0.5, 1, 3, 20, 100, 1.2676506002282294e+30, INFINITY, NAN},
      {INFINITY, 1.2676506002282294e+30, 100, 20, 3, 1, 0.5, 9.1835496157991212e-41, 0.0, 0.0, 9.1835496157991212e-41, 9.5367431640625e-07, 0.5, 1, 3, 20, 100, 1.2676506002282294e+30, INFINITY, NAN},
      {INFINITY, 1.2676506002282294e+30, 100, 20, 3, 1, 0.5, 9.1835496157991212e-41, 0.0, 0.0, 9.1835496157991212e-41, 9.5367431640625e-07, 0.5, 1, 3, 20, 100, 1.2676506002282294e+30, INFINITY, NAN}},
     {{-1, -1, -1, -1, -1, -1, -1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1},
      {-1, -1, -1, -1, -1, -1, -1, -1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1},
      {-1, -1, -1, -1, -1, -1, -1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1}}},
    {"sign",
     {{-1, -1, -1, -1, -1, -1, -1, -0.0, -0.0, 0.0, 0.0, 1, 1, 1, 1, 1, 1, 1, 1, NAN},
      {-1, -1, -1, -1, -1, -1, -1, -1, -0.0, 0.0, 1, 1, 1, 1, 1, 1, 1, 1, 1, NAN},
      {-1, -1, -1, -1, -1, -1, -1, -0.0, -0.0, 0.0, 0.0, 1, 1, 1, 1, 1, 1, 1, 1, NAN}},
     {{0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0},
      {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0},
      {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}}},
    {"log1p",
     {{NAN, NAN, NAN, NAN, NAN, -INFINITY, -0.69314718246459961, -0.0, -0.0, 0.0, 0.0, 9.5367386165889911e-07, 0.40546509623527527, 0.69314718246459961, 1.3862943649291992, 3.0445225238800049, 4.6151204109191895, 69.314720153808594, INFINITY, NAN},
      {NAN, NAN, NAN, NAN, NAN, -INFINITY, -0.69314718055994529, -9.1835496157991212e-41, -0.0, 0.0, 9.1835496157991212e-41, 9.5367386165918827e-07, 0.40546510810816438, 0.69314718055994529, 1.3862943611198906, 3.044522437723423, 4.6151205168412597, 69.314718055994533, INFINITY, NAN},
      {NAN, NAN, NAN, NAN, NAN, -INFINITY, -0.69140625, -0.0, -0.0, 0.0, 0.0, 9.5367431640625e-07, 0.40625, 0.69140625, 1.3828125, 3.046875, 4.625, 69.5, INFINITY, NAN}},
     {{-0.0, -7.8886090522101181e-31, -0.010101010091602802, -0.052631579339504242, -0.5, INFINITY, 2, 1, 1, 1, 1, 0.99999904632568359, 0.66666668653488159, 0.5, 0.25, 0.0476190485060215, 0.009900989942252636, 7.8886090522101181e-31, 0.0, NAN},
      {-0.0, -7.8886090522101181e-31, -0.010101010101010102, -0.052631578947368418, -0.5, INFINITY, 2, 1, 1, 1, 1, 0.99999904632659309, 0.66666666666666663, 0.5, 0.25, 0.047619047619047616, 0.0099009900990099011, 7.8886090522101181e-31, 0.0, NAN},
      {-0.0, -7.8886090522101181e-31, -0.01007080078125, -0.052734375, -0.5, INFINITY, 2, 1, 1, 1, 1, 1, 0.66796875, 0.5, 0.25, 0.047607421875, 0.0098876953125, 7.8886090522101181e-31, 0.0, NAN}}},
    {"expm1",
     {{-1, -1, -1, -1, -0.95021295547485352, -0.63212054967880249, -0.39346933364868164, -9.1835496157991212e-41, -0.0, 0.0, 9.1835496157991212e-41, 9.5367477115360089e-07, 0.64872127771377563, 1.7182817459106445, 19.085536956787109, 485165184, INFINITY, INFINITY, INFINITY, NAN},
      {-1, -1, -1, -0.99999999793884642, -0.95021293163213605, -0.63212055882855767, -0.39346934028736652, -9.1835496157991212e-41, -0.0, 0.0, 9.1835496157991212e-41, 9.5367477115374531e-07, 0.64872127070012808, 1.7182818284590455, 19.085536923187668, 485165194.40979028, 2.6881171418161356e+43, INFINITY, INFINITY, NAN},
      {-1, -1, -1, -1, -0.94921875, -0.6328125, -0.392578125, -9.1835496157991212e-41, -0.0, 0.0, 9.1835496157991212e-41, 9.5367431640625e-07, 0.6484375, 1.71875, 19.125, 484442112, INFINITY, INFINITY, INFINITY, NAN}},
     {{0.0, 0.0, 0.0, 0.0, 0.049787044525146484, 0.36787945032119751, 0.60653066635131836, 1, 1, 1, 1, 1.0000009536743164, 1.6487212181091309, 2.7182817459106445, 20.085536956787109, 485165184, INFINITY, INFINITY, INFINITY, NAN},
      {0.0, 0.0, 0.0, 2.0611535811454473e-09, 0.049787068367863951, 0.36787944117144233, 0.60653065971263342, 1, 1, 1, 1, 1.0000009536747712, 1.6487212707001282, 2.7182818284590455, 20.085536923187668, 485165195.40979028, 2.6881171418161356e+43, INFINITY, INFINITY, NAN},
      {0.0, 0.0, 0.0, 0.0, 0.05078125, 0.3671875, 0.609375, 1, 1, 1, 1, 1, 1.6484375, 2.71875, 20.125, 484442112, INFINITY, INFINITY, INFINITY, NAN}}},
    {"erf",
     {{-1, -1, -1, -1, -0.99997794628143311, -0.84270083904266357, -0.52049988508224487, -0.0, -0.0, 0.0, 0.0, 1.0761061730590882e-06, 0.52049988508224487, 0.84270083904266357, 0.99997794628143311, 1, 1, 1, 1, NAN},
      {-1, -1, -1, -1, -0.99997790950300136, -0.84270079294971489, -0.52049987781304652, -1.0362526066455727e-40, -0.0, 0.0, 1.0362526066455727e-40, 1.0761062308265404e-06, 0.52049987781304652, 0.84270079294971489, 0.99997790950300136, 1, 1, 1, 1, NAN},
      {-1, -1, -1, -1, -1, -0.84375, -0.51953125, -0.0, -0.0, 0.0, 0.0, 1.0728836059570312e-06, 0.51953125, 0.84375, 1, 1, 1, 1, 1, NAN}},
     {{0.0, 0.0, 0.0, 0.0, 0.00013925305393058807, 0.41510751843452454, 0.87878262996673584, 1.128379225730896, 1.128379225730896, 1.128379225730896, 1.128379225730896, 1.128379225730896, 0.87878262996673584, 0.41510751843452454, 0.00013925305393058807, 0.0, 0.0, 0.0, 0.0, NAN},
      {0.0, 0.0, 0.0, 2.1610374743867984e-174, 0.00013925305194674786, 0.41510749742059466, 0.87878257893544476, 1.1283791670955126, 1.1283791670955126, 1.1283791670955126, 1.1283791670955126, 1.1283791670944863, 0.87878257893544476, 0.41510749742059466, 0.00013925305194674786, 2.1610374743867984e-174, 0.0, 0.0, 0.0, NAN},
      {0.0, 0.0, 0.0, 0.0, 0.00013828277587890625, 0.4140625, 0.875, 1.125, 1.125, 1.125, 1.125, 1.125, 0.875, 0.4140625, 0.00013828277587890625, 0.0, 0.0, 0.0, 0.0, NAN}}},
    {"softplus",
     {{0.0, 0.0, 0.0, 2.0611536921677498e-09, 0.04858735203742981, 0.31326168775558472, 0.47407698631286621, 0.69314718246459961, 0.69314718246459961, 0.69314718246459961, 0.69314718246459961, 0.69314765930175781, 0.97407698631286621, 1.3132617473602295, 3.0485873222351074, 20, 100, 1.2676506002282294e+30, INFINITY, NAN},
      {0.0, 0.0, 3.7200759760208356e-44, 2.0611536203143808e-09, 0.048587351573742062, 0.31326168751822281, 0.47407698418010669, 0.69314718055994529, 0.69314718055994529, 0.69314718055994529, 0.69314718055994529, 0.69314765739721718, 0.97407698418010669, 1.3132616875182228, 3.0485873515737421, 20.000000002061153, 100, 1.2676506002282294e+30, INFINITY, NAN},
      {0.0, 0.0, 0.0, 2.066371962428093e-09, 0.048583984375, 0.3125, 0.47265625, 0.69140625, 0.69140625, 0.69140625, 0.69140625, 0.69140625, 0.97265625, 1.3125, 3.046875, 20, 100, 1.2676506002282294e+30, INFINITY, NAN}},
     {{0.0, 0.0, 0.0, 2.0611536921677498e-09, 0.047425873577594757, 0.26894140243530273, 0.37754067778587341, 0.5, 0.5, 0.5, 0.5, 0.5000002384185791, 0.62245935201644897, 0.73105853796005249, 0.95257413387298584, 1, 1, 1, 1, NAN},
      {0.0, 0.0, 3.7200759760208356e-44, 2.061153618190205e-09, 0.047425873177566781, 0.2689414213699951, 0.37754066879814541, 0.5, 0.5, 0.5, 0.5, 0.5000002384185791, 0.62245933120185459, 0.73105857863000501, 0.95257412682243325, 0.99999999793884697, 1, 1, 1, NAN},
      {0.0, 0.0, 0.0, 2.066371962428093e-09, 0.047607421875, 0.26953125, 0.37890625, 0.5, 0.5, 0.5, 0.5, 0.5, 0.625, 0.73046875, 0.953125, 1, 1, 1, 1, NAN}}},
};
static const int32_t un_xi[7] = {INT32_MIN, -5, -1, 0, 1, 7, 2147483647}, un_abs_i[7] = {INT32_MIN, 5, 1, 0, 1, 7, 2147483647}, un_sign_i[7] = {-1, -1, -1, 0, 1, 1, 1};
static void un_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x"), y = op_y((const char *)u, x, NULL, NULL, NULL), gx;
    (void)g;
    tj_tree_set_v(out, "y", y);
    if (tj_grad(tj_sum_all(y), 1, &x, &gx) == TJ_OK) tj_tree_set_v(out, "gx", gx);
}
static int un_ok(double v, double w, double w64, double x, int d) {
    double tol = d == 1 ? 1e-15 : d == 0 ? 2.4e-7 : 1.6e-2;
    if (d != 1 && x != 0 && fabs(x) < 1.2e-38) w = w64; /* a denormal input: JAX flushes it */
    if (isnan(w)) return isnan(v);
    if (isinf(w)) return v == w;
    if (d != 1 && fabs(w) < 1.2e-38 && (w != 0 || fabs(w64) != 0)) /* a denormal result (or JAX's flushed one) */
        return fabs(v) < 1.2e-38 && !signbit(v) == !signbit(w64);
    if (w == 0) return v == 0 && !signbit(v) == !signbit(w);
    return fabs(v - w) <= tol * fabs(w);
}
static void test_unary_specials(tj_ctx *ctx) {
    static const tj_dtype dts[3] = {TJ_F32, TJ_F64, TJ_BF16};
    enum { N = sizeof un_x / sizeof un_x[0] };
    int o, d, i;
    tjt_current = "sin cos abs sign log1p expm1 erf softplus at special values (JAX 0.10.2)";
    for (o = 0; o < (int)(sizeof un_want / sizeof un_want[0]); o++)
        for (d = 0; d < 3; d++) {
            double got[2][N];
            float xf[N];
            uint16_t h[N];
            tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
            tj_prog *p;
            for (i = 0; i < N; i++) xf[i] = (float)un_x[i], h[i] = tj_f32_to_bf16(xf[i]);
            tj_tree_set_array(in, "x", tj_array_new(ctx, dts[d], "n=20", d == 0 ? (const void *)xf : d == 1 ? (const void *)un_x : (const void *)h));
            p = tj_jit(ctx, un_want[o].op, un_fn, (void *)un_want[o].op, in, NULL);
            TJT_CHECK(p && tj_run(p, in, out) == TJ_OK && !tj_array_read(tj_tree_array(out, "y"), TJ_F64, got[0]) &&
                          !tj_array_read(tj_tree_array(out, "gx"), TJ_F64, got[1]),
                      "%s %s: %s", un_want[o].op, tj_dtype_name(dts[d]), tj_error(ctx));
            for (i = 0; p && i < N; i++) {
                TJT_CHECK(un_ok(got[0][i], un_want[o].y[d][i], un_want[o].y[1][i], un_x[i], d), "%s %s(%g) = %.17g, want %.17g (JAX)",
                          tj_dtype_name(dts[d]), un_want[o].op, un_x[i], got[0][i], un_want[o].y[d][i]);
                TJT_CHECK(un_ok(got[1][i], un_want[o].g[d][i], un_want[o].g[1][i], un_x[i], d), "%s %s' at %g = %.17g, want %.17g (JAX)",
                          tj_dtype_name(dts[d]), un_want[o].op, un_x[i], got[1][i], un_want[o].g[d][i]);
            }
            tj_clear_error(ctx);
            tj_prog_free(p);
            tj_tree_free(in);
            tj_tree_free(out);
        }
}
/* abs and sign of i32 are i32 (jnp's: abs(INT32_MIN) wraps to INT32_MIN);
   the other new unary ops need a float (JAX would promote i32 to f32:
   tinyjax asks for the cast, as tj_exp does) */
static void un_i32_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x");
    (void)g, (void)u;
    tj_tree_set_v(out, "abs", tj_abs(x));
    tj_tree_set_v(out, "sign", tj_sign(x));
}
static void un_i32_bad_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x");
    (void)g;
    tj_tree_set_v(out, "y", op_y((const char *)u, x, NULL, NULL, NULL));
}
static void test_unary_i32(tj_ctx *ctx) {
    static const char *bad[] = {"sin", "cos", "log1p", "expm1", "erf", "softplus"};
    int32_t ga[7], gs[7];
    int i;
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    tjt_current = "abs, sign of i32";
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_I32, "n=7", un_xi));
    p = tj_jit(ctx, "abs_sign_i32", un_i32_fn, NULL, in, NULL);
    TJT_CHECK(p && tj_run(p, in, out) == TJ_OK && tj_array_dtype(tj_tree_array(out, "abs")) == TJ_I32 &&
                  tj_array_dtype(tj_tree_array(out, "sign")) == TJ_I32 && !tj_array_read(tj_tree_array(out, "abs"), TJ_I32, ga) &&
                  !tj_array_read(tj_tree_array(out, "sign"), TJ_I32, gs),
              "abs/sign i32: %s", tj_error(ctx));
    for (i = 0; p && i < 7; i++) {
        TJT_CHECK(ga[i] == un_abs_i[i], "abs(%d) = %d, want %d (JAX)", un_xi[i], ga[i], un_abs_i[i]);
        TJT_CHECK(gs[i] == un_sign_i[i], "sign(%d) = %d, want %d (JAX)", un_xi[i], gs[i], un_sign_i[i]);
    }
    tj_prog_free(p);
    for (i = 0; i < 6; i++) {
        tj_clear_error(ctx);
        p = tj_jit(ctx, bad[i], un_i32_bad_fn, (void *)bad[i], in, NULL);
        TJT_CHECK(!p && strstr(tj_error(ctx), bad[i]) && strstr(tj_error(ctx), "cast"), "%s of i32: want an error asking for a cast, got %s", bad[i],
                  p ? "a program" : tj_error(ctx));
        tj_prog_free(p);
    }
    tj_clear_error(ctx);
    tj_tree_free(in);
    tj_tree_free(out);
}
/* tj_clip is jnp.clip (JAX 0.10.2: max then min, not lax.clamp): NaN
   passes, the gradient is 1/2 exactly at a bound and 0 at NaN; lo > hi
   gives hi; the bounds take x's dtype; i32 with integer bounds stays i32,
   a fractional bound on i32 is an error. Values from JAX 0.10.2. */
static void clip_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x"), y, gx;
    const double *b = (const double *)u;
    (void)g;
    y = tj_clip(x, b[0], b[1]);
    tj_tree_set_v(out, "y", y);
    if (tj_v_dtype(x) != TJ_I32 && tj_grad(tj_sum_all(y), 1, &x, &gx) == TJ_OK) tj_tree_set_v(out, "gx", gx);
}
static void test_clip(tj_ctx *ctx) {
    static const double x[12] = {-INFINITY, -3, -1, -0.5, -0.0, 0.0, 0.5, 1, 3, INFINITY, NAN, 0.3};
    static const double b1[2] = {-1, 1}, b2[2] = {1, -1}, b3[2] = {0.0, 1}, b4[2] = {-1, -0.0}, b5[2] = {0.2, 0.3};
    /* jnp.clip(x, -1., 1.), its gradient; jnp.clip(x, 1., -1.) */
    static const double w1[12] = {-1, -1, -1, -0.5, -0.0, 0.0, 0.5, 1, 1, 1, NAN, 0.3}, g1[12] = {0, 0, 0.5, 1, 1, 1, 1, 0.5, 0, 0, 0, 1};
    static const double w2[12] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, NAN, -1};
    static const tj_dtype dts[3] = {TJ_F32, TJ_F64, TJ_BF16};
    const double *bs[5] = {b1, b2, b3, b4, b5};
    int d, c, i;
    tjt_current = "clip (jnp.clip, JAX 0.10.2)";
    for (d = 0; d < 3; d++)
        for (c = 0; c < 5; c++) {
            double y[12], gx[12];
            float xf[12];
            uint16_t h[12];
            tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
            tj_prog *p;
            for (i = 0; i < 12; i++) xf[i] = (float)x[i], h[i] = tj_f32_to_bf16(xf[i]);
            tj_tree_set_array(in, "x", tj_array_new(ctx, dts[d], "n=12", d == 0 ? (const void *)xf : d == 1 ? (const void *)x : (const void *)h));
            p = tj_jit(ctx, "clip", clip_fn, (void *)bs[c], in, NULL);
            TJT_CHECK(p && tj_run(p, in, out) == TJ_OK && !tj_array_read(tj_tree_array(out, "y"), TJ_F64, y) && !tj_array_read(tj_tree_array(out, "gx"), TJ_F64, gx),
                      "clip %s: %s", tj_dtype_name(dts[d]), tj_error(ctx));
            for (i = 0; p && i < 12; i++) {
                /* the expected value: JAX's where given, else max then min in the dtype */
                double lo = bs[c][0], hi = bs[c][1], xv = d == 2 ? tj_bf16_to_f32(h[i]) : d == 0 ? xf[i] : x[i], w, wg;
                if (d == 0) lo = (float)lo, hi = (float)hi;
                if (d == 2) lo = tj_bf16_to_f32(tj_f32_to_bf16((float)lo)), hi = tj_bf16_to_f32(tj_f32_to_bf16((float)hi));
                if (c == 0) w = i == 11 ? xv : w1[i], wg = g1[i]; /* (0.3 as rounded to the dtype) */
                else if (c == 1) w = w2[i], wg = 0;
                else {
                    w = xv != xv ? xv : xv < lo ? lo : xv > hi ? hi : xv == 0 && lo == 0 ? 0.0 : xv == 0 && hi == 0 ? -0.0 : xv;
                    wg = xv != xv ? 0 : xv == lo || xv == hi ? 0.5 : xv > lo && xv < hi ? 1 : 0;
                }
                TJT_CHECK(isnan(w) ? isnan(y[i]) : y[i] == w && !signbit(y[i]) == !signbit(w), "%s clip(%g, %g, %g) = %.9g, want %.9g", tj_dtype_name(dts[d]), xv,
                          bs[c][0], bs[c][1], y[i], w);
                TJT_CHECK(gx[i] == wg, "%s clip'(%g, %g, %g) = %g, want %g (JAX: 1/2 at a bound)", tj_dtype_name(dts[d]), xv, bs[c][0], bs[c][1], gx[i], wg);
            }
            tj_clear_error(ctx);
            tj_prog_free(p);
            tj_tree_free(in);
            tj_tree_free(out);
        }
    { /* i32: jnp.clip(x, -4, 2) */
        static const int32_t xi[5] = {INT32_MIN, -5, 0, 3, INT32_MAX}, wi[5] = {-4, -4, 0, 2, 2};
        static const double bi[2] = {-4, 2}, bf[2] = {1.5, 3};
        int32_t yi[5];
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        tj_prog *p;
        tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_I32, "n=5", xi));
        p = tj_jit(ctx, "clip_i32", clip_fn, (void *)bi, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK && tj_array_dtype(tj_tree_array(out, "y")) == TJ_I32 && !tj_array_read(tj_tree_array(out, "y"), TJ_I32, yi),
                  "clip i32: %s", tj_error(ctx));
        for (i = 0; p && i < 5; i++) TJT_CHECK(yi[i] == wi[i], "i32 clip(%d, -4, 2) = %d, want %d", xi[i], yi[i], wi[i]);
        tj_prog_free(p);
        p = tj_jit(ctx, "clip_i32_frac", clip_fn, (void *)bf, in, NULL);
        TJT_CHECK(!p && strstr(tj_error(ctx), "clip") && strstr(tj_error(ctx), "1.5") && strstr(tj_error(ctx), "cast"), "clip of i32 with 1.5: want an error, got %s",
                  p ? "a program" : tj_error(ctx));
        tj_prog_free(p);
        tj_clear_error(ctx);
        tj_tree_free(in);
        tj_tree_free(out);
    }
}
/* tj_argmax / tj_argmin are jnp.argmax / jnp.argmin: the first index on
   ties (-0 ties +0), the first NaN wins both; i32 results; along either
   axis; f32, bf16, f64 and i32 inputs. Values from JAX 0.10.2. No
   gradient flows through the index: d/dx sum(argmax(x) * x) = argmax(x). */
static void argm_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x"), gx;
    (void)g, (void)u;
    tj_tree_set_v(out, "max1", tj_argmax(x, "c"));
    tj_tree_set_v(out, "min1", tj_argmin(x, "c"));
    tj_tree_set_v(out, "max0", tj_argmax(x, "r"));
    tj_tree_set_v(out, "min0", tj_argmin(x, "r"));
    if (tj_v_dtype(x) != TJ_I32 && tj_grad(tj_sum_all(tj_mul(tj_cast(tj_argmax(x, "r"), tj_v_dtype(x)), x)), 1, &x, &gx) == TJ_OK) tj_tree_set_v(out, "gx", gx);
}
static void test_argmax(tj_ctx *ctx) {
    static const double x[5][4] = {{1, 3, 3, -INFINITY}, {NAN, 2, NAN, 5}, {-0.0, 0.0, -1, -1}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, {2, NAN, INFINITY, INFINITY}};
    static const int32_t w_max1[5] = {1, 0, 0, 0, 1}, w_min1[5] = {3, 0, 2, 0, 1}, w_max0[4] = {1, 4, 1, 4}, w_min0[4] = {1, 4, 1, 0};
    static const int32_t xi[2][4] = {{1, 3, 3, INT32_MIN}, {7, -5, 7, INT32_MAX}}, wi_max1[2] = {1, 3}, wi_min1[2] = {3, 1}, wi_max0[4] = {1, 0, 1, 1},
                         wi_min0[4] = {0, 1, 0, 0};
    static const tj_dtype dts[4] = {TJ_F32, TJ_F64, TJ_BF16, TJ_I32};
    int d, i;
    tjt_current = "argmax, argmin (jnp.argmax / argmin, JAX 0.10.2)";
    for (d = 0; d < 4; d++) {
        int32_t got[4][5];
        double gx[20];
        float xf[20];
        uint16_t h[20];
        int I = d == 3;
        const char *names[4] = {"max1", "min1", "max0", "min0"};
        const int32_t *want[4] = {I ? wi_max1 : w_max1, I ? wi_min1 : w_min1, I ? wi_max0 : w_max0, I ? wi_min0 : w_min0};
        int len[4] = {I ? 2 : 5, I ? 2 : 5, 4, 4}, k, ok;
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        tj_prog *p;
        for (i = 0; i < 20; i++) xf[i] = (float)x[i / 4][i % 4], h[i] = tj_f32_to_bf16(xf[i]);
        tj_tree_set_array(in, "x", tj_array_new(ctx, dts[d], I ? "r=2 c=4" : "r=5 c=4", d == 0 ? (const void *)xf : d == 1 ? (const void *)x : d == 2 ? (const void *)h : (const void *)xi));
        p = tj_jit(ctx, "argm", argm_fn, NULL, in, NULL);
        ok = p && tj_run(p, in, out) == TJ_OK;
        for (k = 0; ok && k < 4; k++) ok = tj_array_dtype(tj_tree_array(out, names[k])) == TJ_I32 && !tj_array_read(tj_tree_array(out, names[k]), TJ_I32, got[k]);
        TJT_CHECK(ok, "argmax/argmin %s: %s", tj_dtype_name(dts[d]), tj_error(ctx));
        for (k = 0; ok && k < 4; k++)
            for (i = 0; i < len[k]; i++) TJT_CHECK(got[k][i] == want[k][i], "%s arg%s [%d] = %d, want %d (JAX)", tj_dtype_name(dts[d]), names[k], i, got[k][i], want[k][i]);
        if (ok && !I) {
            TJT_CHECK(!tj_array_read(tj_tree_array(out, "gx"), TJ_F64, gx), "read gx: %s", tj_error(ctx));
            for (i = 0; i < 20; i++) TJT_CHECK(gx[i] == w_max0[i % 4], "%s: gradient through argmax [%d] = %g, want %d", tj_dtype_name(dts[d]), i, gx[i], w_max0[i % 4]);
        }
        tj_clear_error(ctx);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
    }
}
/* misuse of tj_stack and tj_argmax: a message naming the call */
static int stack_err_case;
static void stack_err_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x"), xs[3], r = NULL;
    (void)g, (void)u;
    xs[0] = x, xs[1] = tj_muls(x, 2.0), xs[2] = NULL;
    switch (stack_err_case) {
    case 0: r = tj_stack(0, xs, "k"); break;
    case 1: r = tj_stack(2, xs, "r"); break;
    case 2: r = tj_stack(2, xs, "k j"); break;
    case 3: xs[1] = tj_transpose(x, "c r"); r = tj_stack(2, xs, "k"); break;
    case 4: xs[1] = tj_cast(x, TJ_F32); r = tj_stack(2, xs, "k"); break;
    case 5: r = tj_argmax(x, "zz"); break;
    default: r = tj_stack(3, xs, "k"); break; /* a NULL in the list (257 inputs were refused until 2026-11-24: any number now) */
    }
    tj_tree_set_v(out, "y", r);
}
static void test_stack_errors(tj_ctx *ctx) {
    static const char *want[7][2] = {{"stack", "0 inputs"}, {"stack", "already have the new axis"}, {"stack", "one new axis"}, {"stack", "differs"},
                                     {"stack", "differs"},  {"argmax", "'zz'"},                      {"stack", "operand 2 is NULL"}};
    tj_tree *in = tj_tree_new(ctx);
    int i;
    tjt_current = "stack, argmax: errors";
    tj_tree_set_array(in, "x", tj_zeros(ctx, TJ_F64, "r=2 c=3"));
    for (i = 0; i < 7; i++) {
        tj_prog *p;
        stack_err_case = i;
        tj_clear_error(ctx);
        p = tj_jit(ctx, "stack_err", stack_err_fn, NULL, in, NULL);
        TJT_CHECK(!p && strstr(tj_error(ctx), want[i][0]) && strstr(tj_error(ctx), want[i][1]) && strstr(tj_error(ctx), "test_ops.c"),
                  "case %d: want an error with '%s', got %s", i, want[i][1], p ? "a program" : tj_error(ctx));
        tj_prog_free(p);
    }
    tj_clear_error(ctx);
    tj_tree_free(in);
}
/* tj_stack is jnp.stack(xs, axis=0): the new axis leads, input i at index i */
static void stack_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v xs[20];
    int i, n = *(const int *)u;
    (void)g;
    for (i = 0; i < n; i++) xs[i] = tj_muls(leaf(in, "x"), (double)i);
    tj_tree_set_v(out, "y", tj_stack(n, xs, "k"));
}
static void test_stack(tj_ctx *ctx) {
    static const int ns[3] = {1, 3, 20};
    double x[6] = {1, 2, 3, 4, 5, 6}, y[120];
    int c, i;
    tjt_current = "stack (jnp.stack, axis 0)";
    for (c = 0; c < 3; c++) {
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        tj_prog *p;
        tj_array *a;
        tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F64, "r=2 c=3", x));
        p = tj_jit(ctx, "stack", stack_fn, (void *)&ns[c], in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK && (a = tj_tree_array(out, "y")) && !tj_array_read(a, TJ_F64, y), "stack of %d: %s", ns[c], tj_error(ctx));
        if (p) {
            char sh[64], got[128];
            snprintf(sh, sizeof sh, "f64[k=%d,r=2,c=3]", ns[c]);
            tj_array_describe(tj_tree_array(out, "y"), got, sizeof got);
            TJT_CHECK(!strcmp(got, sh), "stack of %d: %s, want %s", ns[c], got, sh);
            for (i = 0; i < 6 * ns[c]; i++) TJT_CHECK(y[i] == x[i % 6] * (i / 6), "stack of %d: [%d] = %g, want %g", ns[c], i, y[i], x[i % 6] * (i / 6));
        }
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
    }
}
/* rsqrt's gradient is JAX's -0.5 y / x: -inf at x = -0 (y = -inf) as at
   +0; -0.5 y^3 gave +inf there */
static void rsqrt_ct_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = leaf(in, "x"), ct = leaf(in, "ct"), y, gx;
    (void)g, (void)u;
    y = tj_rsqrt(x);
    if (tj_vjp(1, &y, &ct, 1, &x, &gx) == TJ_OK) tj_tree_set_v(out, "gx", gx);
}
static void test_rsqrt_zero(tj_ctx *ctx) {
    static const double x[4] = {-0.0, 0.0, 4.0, INFINITY}, ct[4] = {1, 1, 1, 1}, want[4] = {-INFINITY, -INFINITY, -0.0625, 0};
    static const tj_dtype dts[2] = {TJ_F64, TJ_F32};
    int d, i;
    tjt_current = "rsqrt gradient at +-0";
    for (d = 0; d < 2; d++) {
        double got[4];
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        tj_prog *p;
        float xf[4], cf[4];
        for (i = 0; i < 4; i++) xf[i] = (float)x[i], cf[i] = (float)ct[i];
        tj_tree_set_array(in, "x", tj_array_new(ctx, dts[d], "n=4", d ? (const void *)xf : (const void *)x));
        tj_tree_set_array(in, "ct", tj_array_new(ctx, dts[d], "n=4", d ? (const void *)cf : (const void *)ct));
        p = tj_jit(ctx, "rsqrt ct", rsqrt_ct_fn, NULL, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK && !tj_array_read(tj_tree_array(out, "gx"), TJ_F64, got), "rsqrt ct: %s", tj_error(ctx));
        for (i = 0; p && i < 4; i++)
            TJT_CHECK(got[i] == want[i], "%s rsqrt gradient at x = %g: %g, want %g (JAX: -0.5 rsqrt(x) / x)", tj_dtype_name(dts[d]), x[i], got[i], want[i]);
        tj_clear_error(ctx);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
    }
}
/* Keys that no query sees (causal, more keys than queries) get dk = dv = 0
   exactly, even where a cotangent row of a query is NaN: their pairs never
   meet (JAX gives 0 there too). Was NaN: a tile's weighted sums also ran
   over rows with no pair, 0 times the NaN. Every dtype, one pass and two. */
static void attn_unseen_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x[3] = {leaf(in, "q"), leaf(in, "k"), leaf(in, "v")}, gx[3], y, ct = leaf(in, "ct");
    (void)g, (void)u;
    y = tj_attention(x[0], x[1], x[2], "q", "k", "d", 0, 1);
    if (tj_vjp(1, &y, &ct, 3, x, gx) != TJ_OK) return;
    tj_tree_set_v(out, "dq", gx[0]);
    tj_tree_set_v(out, "dk", gx[1]);
    tj_tree_set_v(out, "dv", gx[2]);
}
static void test_attention_unseen_keys(tj_ctx *ctx) {
    static const tj_dtype dts[3] = {TJ_F64, TJ_F32, TJ_BF16};
    enum { TQ = 37, TK = 75, D = 8 }; /* keys 37..74: no query sees them; 32..36 a ragged tile of queries */
    static double ct[TQ * D], dk[TK * D], dv[TK * D];
    int d, pass, j, c;
    tjt_current = "attention: keys no query sees";
    for (j = 0; j < TQ * D; j++) ct[j] = (j % 7) * 0.25 - 0.5;
    ct[36 * D + 3] = NAN; /* the last query: sees keys 0..36, in a tile with keys it does not see */
    for (d = 0; d < 3; d++)
        for (pass = 1; pass <= 2; pass++) {
            tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
            tj_prog *p;
            int bad = 0, nan_seen = 0;
            tj_tree_set_array(in, "q", tjt_rand(ctx, dts[d], "q=37 d=8", 41, -1, 1));
            tj_tree_set_array(in, "k", tjt_rand(ctx, dts[d], "k=75 d=8", 42, -1, 1));
            tj_tree_set_array(in, "v", tjt_rand(ctx, dts[d], "k=75 d=8", 43, -1, 1));
            { /* the cotangent in the dtype */
                static float f[TQ * D];
                static uint16_t h[TQ * D];
                for (j = 0; j < TQ * D; j++) f[j] = (float)ct[j], h[j] = tj_f32_to_bf16(f[j]);
                tj_tree_set_array(in, "ct", tj_array_new(ctx, dts[d], "q=37 d=8", d == 0 ? (const void *)ct : d == 1 ? (const void *)f : (const void *)h));
            }
            tjt_attn_passes(pass);
            p = tj_jit(ctx, "attention unseen keys", attn_unseen_fn, NULL, in, NULL);
            TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "%s: %s", tj_dtype_name(dts[d]), tj_error(ctx));
            tjt_attn_passes(0);
            if (p && !tj_array_read(tj_tree_array(out, "dk"), TJ_F64, dk) && !tj_array_read(tj_tree_array(out, "dv"), TJ_F64, dv)) {
                for (j = 0; j < TK; j++)
                    for (c = 0; c < D; c++) {
                        if (j >= TQ && (dk[j * D + c] != 0 || dv[j * D + c] != 0)) bad++;
                        if (j <= 36 && dv[j * D + c] != dv[j * D + c]) nan_seen++;
                    }
                TJT_CHECK(!bad, "%s, %d pass(es): %d elements of dk, dv of keys 37..74 (no query sees them) are not 0", tj_dtype_name(dts[d]), pass, bad);
                TJT_CHECK(nan_seen, "%s, %d pass(es): the NaN cotangent of query 36 reaches no dv of the keys it sees", tj_dtype_name(dts[d]), pass);
            } else TJT_CHECK(0, "%s: outputs not read", tj_dtype_name(dts[d]));
            tj_clear_error(ctx);
            tj_prog_free(p);
            tj_tree_free(in);
            tj_tree_free(out);
        }
}
static void test_rows_f32(tj_ctx *ctx) {
    enum { R = 3, V = 50304 };
    static float xf[R * V], wf[R * V];
    static double xd[R * V], wd[R * V], yf[R * V], yd[R * V];
    const char *names[8] = {"y0", "y1", "y2", "y3", "d0", "d1", "d2", "d3"}, *what[8] = {"softmax", "log_softmax", "layer_norm", "cross_entropy",
                                                                                        "softmax grad", "log_softmax grad", "layer_norm grad", "cross_entropy grad"};
    double tol[8] = {1e-6, 1e-6, 1e-6, 1e-6, 2e-4, 1e-6, 1e-6, 1e-6};
    float cf[R] = {1.0f, -0.5f, 2.0f};
    double cd[R] = {1.0, -0.5, 2.0};
    int32_t lab[R] = {7, 50303, 25000};
    tj_tree *in[2], *out[2];
    tj_prog *p[2];
    int i, k;
    tjt_current = "row ops: f32 kernels vs f64";
    {
        tj_array *a = tjt_rand(ctx, TJ_F32, "r=3 v=50304", 71, 988, 1012), *b = tjt_rand(ctx, TJ_F32, "r=3 v=50304", 72, -1, 1);
        tj_array_read(a, TJ_F32, xf);
        tj_array_read(b, TJ_F32, wf);
        tj_array_free(a);
        tj_array_free(b);
    }
    for (i = 0; i < R * V; i++) xd[i] = xf[i], wd[i] = wf[i];
    xf[V + 50303] = xf[V + 50303] + 20, xd[V + 50303] = xf[V + 50303]; /* a label at the row's top */
    for (k = 0; k < 2; k++) {
        in[k] = tj_tree_new(ctx);
        out[k] = tj_tree_new(ctx);
        tj_tree_set_array(in[k], "x", tj_array_new(ctx, k ? TJ_F64 : TJ_F32, "r=3 v=50304", k ? (const void *)xd : (const void *)xf));
        tj_tree_set_array(in[k], "w", tj_array_new(ctx, k ? TJ_F64 : TJ_F32, "r=3 v=50304", k ? (const void *)wd : (const void *)wf));
        tj_tree_set_array(in[k], "c", tj_array_new(ctx, k ? TJ_F64 : TJ_F32, "r=3", k ? (const void *)cd : (const void *)cf));
        tj_tree_set_array(in[k], "lab", tj_array_new(ctx, TJ_I32, "r=3", lab));
        p[k] = tj_jit(ctx, k ? "rows f64" : "rows f32", rows_fn, NULL, in[k], NULL);
        TJT_CHECK(p[k] && !tj_run(p[k], in[k], out[k]), "%s: %s", k ? "f64" : "f32", tj_error(ctx));
    }
    for (i = 0; i < 8 && p[0] && p[1]; i++) {
        tj_array *af = tj_tree_array(out[0], names[i]), *ad = tj_tree_array(out[1], names[i]);
        int64_t n = af ? tj_array_numel(af) : 0, j;
        double err = 0, big = 0;
        if (!af || !ad || tj_array_read(af, TJ_F64, yf) || tj_array_read(ad, TJ_F64, yd)) {
            TJT_CHECK(0, "%s: no output %s", what[i], names[i]);
            continue;
        }
        for (j = 0; j < n; j++) {
            err = fabs(yf[j] - yd[j]) > err || yf[j] != yf[j] ? fabs(yf[j] - yd[j]) : err;
            big = fabs(yd[j]) > big ? fabs(yd[j]) : big;
        }
        if (getenv("TJT_ROWS")) printf("%s: %.3g\n", what[i], err / big);
        TJT_CHECK(err <= tol[i] * big, "%s: f32 differs from f64 by %.3g, %.3g of the largest value %.4g (tol %g)", what[i], err, err / big, big, tol[i]);
    }
    for (k = 0; k < 2; k++) {
        tj_prog_free(p[k]);
        tj_tree_free(in[k]);
        tj_tree_free(out[k]);
    }
    test_xent_bf16(ctx);
}

int main(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_set_threads(ctx, 2);
    test_grads(ctx);
    test_dropout_rate(ctx);
    test_stop_gradient(ctx);
    test_dot_values(ctx);
    test_row_values(ctx);
    test_rows_f32(ctx);
    test_attention_values(ctx);
    test_attention_unseen_keys(ctx);
    test_relu_select(ctx);
    test_rsqrt_zero(ctx);
    test_sigmoid_extremes(ctx);
    test_unary_specials(ctx);
    test_unary_i32(ctx);
    test_clip(ctx);
    test_argmax(ctx);
    test_stack(ctx);
    test_stack_errors(ctx);
    test_signed_zero(ctx);
    test_mean_bf16(ctx);
    test_pows_weak(ctx);
    test_xent_small_loss(ctx);
    test_shape_values(ctx);
    test_index_values(ctx);
    test_big_values(ctx, TJ_F64);
    test_big_values(ctx, TJ_F32);
    test_dot_lowp(ctx, TJ_F32);
    test_dot_lowp(ctx, TJ_BF16);
    test_ties(ctx);
    test_sources(ctx);
    test_dtypes(ctx);
    test_i32_wrap(ctx);
    test_i32_pows(ctx);
    test_errors(ctx);
    test_memory();
    TJT_CHECK(tj_status_of(ctx) == TJ_OK, "stray error left: %s", tj_error(ctx));
    tj_ctx_free(ctx);
    return tjt_finish();
}
