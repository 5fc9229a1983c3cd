/* The wrong results of issue #15, each a small program checked against its
   closed form and against the same program on one device:
     1. an op's attributes on a value a scan body captures (softmax of a
        sharded captured weight must gather its axis first);
     2. grad-of-grad through a scan of length > 1 (captured and xs weights);
     3. a scan output that sums over a sharded axis (gradients must not be
        multiplied by the devices on that axis);
     4. take's gradient with the table sharded on its non-indexed axis and a
        2-axis index (the GPT-2 embedding). */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"

/* run fn once on `ndev` devices with `mesh`, inputs placed by `rules`;
   outputs read back into o. Returns 0 on success. */
static int run1(tj_fn fn, void *u, tj_tree *(*mk)(tj_ctx *), int ndev, const char *mesh, const char *rules, tjt_outs *o) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in, *out;
    tj_prog *p = NULL;
    int ok = 1;
    memset(o, 0, sizeof *o);
    tj_set_devices(ctx, ndev);
    if (mesh) tj_set_mesh(ctx, mesh);
    in = mk(ctx);
    out = tj_tree_new(ctx);
    if (rules && tj_filter_shard(in, rules)) ok = 0;
    if (ok && !(p = tj_jit(ctx, "prog", fn, u, in, NULL))) ok = 0;
    if (ok && tj_run(p, in, out)) ok = 0;
    if (!ok) fprintf(stderr, "run1(%s, %s): %s\n", mesh ? mesh : "-", rules ? rules : "-", tj_error(ctx));
    else {
        if (getenv("TJ_TEST_VERBOSE")) tj_prog_print(p, stdout);
        tjt_outs_read(o, out);
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return ok ? 0 : -1;
}
static int all_near(const tjt_outs *o, const char *name, const double *want, int64_t n, double tol) {
    int i;
    int64_t j;
    for (i = 0; i < o->n; i++)
        if (!strcmp(o->name[i], name)) {
            if (o->len[i] != n) return 0;
            for (j = 0; j < n; j++)
                if (!(fabs(o->v[i][j] - want[j]) <= tol * (1 + fabs(want[j])))) {
                    fprintf(stderr, "  %s[%lld] = %.9g, want %.9g\n", name, (long long)j, o->v[i][j], want[j]);
                    return 0;
                }
            return 1;
        }
    fprintf(stderr, "  no output %s\n", name);
    return 0;
}

/* ---- 1. softmax of a captured sharded weight inside a scan body ---- */
static void sm_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v w = *(tj_v *)u;
    (void)g; (void)x; (void)y;
    co[0] = tj_add(c[0], tj_sum(tj_softmax(w, "b"), "b"));
}
static void sm_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v w = tj_tree_v(in, "w"), c0 = tj_muls(tj_sum(w, "b"), 0.0), c = NULL;
    (void)g; (void)u;
    tj_scan(sm_body, &w, "step=2", 1, &c0, 0, NULL, 0, &c, NULL, NULL);
    tj_tree_set_v(out, "c", c);
}
static tj_tree *sm_in(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx);
    tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F32, "a=4 b=6", 1, -1, 1));
    return in;
}
static void test_captured_attr(void) {
    tjt_outs o;
    double want[4] = {2, 2, 2, 2};
    const char *meshes[3] = {NULL, "data=2", "data=2 model=2"};
    int ndev[3] = {1, 2, 4}, m;
    tjt_current = "captured attribute";
    for (m = 0; m < 3; m++) {
        if (run1(sm_fn, NULL, sm_in, ndev[m], meshes[m], m ? "b:data a:model" : NULL, &o)) { TJT_CHECK(0, "run failed"); continue; }
        TJT_CHECK(all_near(&o, "c", want, 4, 1e-5), "softmax of a captured weight in a scan body sums to 1 per row (mesh %s)", meshes[m] ? meshes[m] : "1 device");
        tjt_outs_free(&o);
    }
}

/* ---- 2. grad of grad through a scan of 2 steps: c' = c * w ----
   loss = c0 * w^2 (elementwise, 2 steps); dloss/dw = 2 c0 w; the second
   derivative (through the vjp of sum(dloss/dw)) is 2 c0. With xs w0, w1:
   loss = c0 w0 w1, dl/dw0 = c0 w1, dl/dw1 = c0 w0; grad of their sum:
   d/dw0 = c0, d/dw1 = c0. */
static void mul_body_cap(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)x; (void)y;
    co[0] = tj_mul(c[0], *(tj_v *)u);
}
static void mul_body_xs(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)y; (void)u;
    co[0] = tj_mul(c[0], x[0]);
}
static const tj_policy *gg_pol; /* the scan's remat policy (NULL: save everything) */
static void gg_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int xs = *(int *)u;
    tj_v c0 = tj_tree_v(in, "c0"), w = tj_tree_v(in, xs ? "ws" : "w"), c = NULL, loss, gw, s, ggw;
    (void)g;
    if (xs) tj_scan(mul_body_xs, NULL, "step", 1, &c0, 1, &w, 0, &c, NULL, gg_pol);
    else tj_scan(mul_body_cap, &w, "step=2", 1, &c0, 0, NULL, 0, &c, NULL, gg_pol);
    loss = tj_sum(c, "i");
    tj_grad(loss, 1, &w, &gw);
    s = tj_sum(gw, xs ? "step i" : "i");
    tj_grad(s, 1, &w, &ggw);
    tj_tree_set_v(out, "g", gw);
    tj_tree_set_v(out, "gg", ggw);
}
static tj_tree *gg_in(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx);
    double c0[2] = {1, 3.5}, w[2] = {0.5, 2}, ws[4] = {0.5, 2, 4, 0.25};
    tj_tree_set_array(in, "c0", tj_array_new(ctx, TJ_F64, "i=2", c0));
    tj_tree_set_array(in, "w", tj_array_new(ctx, TJ_F64, "i=2", w));
    tj_tree_set_array(in, "ws", tj_array_new(ctx, TJ_F64, "step=2 i=2", ws));
    return in;
}
static void test_grad_of_grad_scan(void) {
    tjt_outs o;
    int xs, k;
    tj_policy pols[2];
    pols[0] = tj_everything_saveable();
    pols[1] = tj_nothing_saveable();
    tjt_current = "grad of grad through scan";
    for (k = 0; k < 3; k++) {
        gg_pol = k ? &pols[k - 1] : NULL;
        xs = 0;
        if (!run1(gg_fn, &xs, gg_in, 1, NULL, NULL, &o)) {
            double g[2] = {2 * 1 * 0.5, 2 * 3.5 * 2}, gg[2] = {2, 7};
            TJT_CHECK(all_near(&o, "g", g, 2, 1e-12), "captured w: first derivative 2 c0 w");
            TJT_CHECK(all_near(&o, "gg", gg, 2, 1e-12), "captured w: second derivative 2 c0");
            tjt_outs_free(&o);
        } else TJT_CHECK(0, "captured: run failed");
        xs = 1;
        if (!run1(gg_fn, &xs, gg_in, 1, NULL, NULL, &o)) {
            /* w rows: step0 (0.5, 2), step1 (4, 0.25); g step0 = c0 * w1, step1 = c0 * w0 */
            double g[4] = {1 * 4, 3.5 * 0.25, 1 * 0.5, 3.5 * 2}, gg[4] = {1, 3.5, 1, 3.5};
            TJT_CHECK(all_near(&o, "g", g, 4, 1e-12), "xs w: first derivative");
            TJT_CHECK(all_near(&o, "gg", gg, 4, 1e-12), "xs w: second derivative c0");
            tjt_outs_free(&o);
        } else TJT_CHECK(0, "xs: run failed");
    }
}

/* ---- 3. scan ys summing over a sharded axis ---- */
static void ys_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)x; (void)u;
    co[0] = tj_muls(c[0], 2.0);
    y[0] = tj_sum(co[0], "d");
}
static void ys_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), c = NULL, ys = NULL, loss, gx;
    const tj_policy *pol = (const tj_policy *)u;
    (void)g;
    tj_scan(ys_body, NULL, "step=2", 1, &x, 0, NULL, 1, &c, &ys, pol);
    loss = tj_sum(ys, "step");
    tj_grad(loss, 1, &x, &gx);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "gx", gx);
}
static tj_tree *ys_in(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx);
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "d=8", 3, -1, 1));
    return in;
}
static void test_ys_sharded_sum(void) {
    tjt_outs o;
    double want[8] = {6, 6, 6, 6, 6, 6, 6, 6};
    tj_policy pols[3];
    int k;
    pols[0] = tj_everything_saveable();
    pols[1] = tj_nothing_saveable();
    pols[2] = tj_dots_saveable();
    tjt_current = "scan ys sum over a sharded axis";
    for (k = 0; k < 3; k++) {
        if (run1(ys_fn, &pols[k], ys_in, 8, "data=8", "d:data", &o)) { TJT_CHECK(0, "run failed"); continue; }
        TJT_CHECK(all_near(&o, "gx", want, 8, 1e-6), "dloss/dx = 2 + 4 with x sharded (policy %d)", k);
        tjt_outs_free(&o);
    }
}

/* ---- 4. take's gradient, table sharded on embed, 2-axis index ---- */
static void take_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v wte = tj_tree_v(in, "wte"), tok = tj_tree_v(in, "tok"), w = tj_tree_v(in, "w"), h, loss, gw;
    (void)g; (void)u;
    h = tj_take(wte, "vocab", tok); /* batch pos embed */
    loss = tj_sum(tj_mul(tj_mul(h, h), w), "batch pos embed");
    tj_grad(loss, 1, &wte, &gw);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g", gw);
}
static tj_tree *take_in(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx);
    int32_t tok[2 * 3] = {1, 4, 1, 0, 3, 4};
    tj_tree_set_array(in, "wte", tjt_rand(ctx, TJ_F32, "vocab=5 embed=4", 4, -1, 1));
    tj_tree_set_array(in, "tok", tj_array_new(ctx, TJ_I32, "batch=2 pos=3", tok));
    tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F32, "batch=2 pos=3 embed=4", 5, -1, 1));
    return in;
}
static void test_take_grad(void) {
    tjt_outs a, b;
    const char *rules[4] = {"embed:data", "embed:data batch:model", "vocab:data", "batch:data pos:model"};
    int k;
    tjt_current = "take gradient, sharded table";
    if (run1(take_fn, NULL, take_in, 1, NULL, NULL, &a)) { TJT_CHECK(0, "1-device run failed"); return; }
    for (k = 0; k < 4; k++) {
        char what[128];
        if (run1(take_fn, NULL, take_in, 4, "data=2 model=2", rules[k], &b)) { TJT_CHECK(0, "run failed (%s)", rules[k]); continue; }
        snprintf(what, sizeof what, "take on data=2 model=2, %s", rules[k]);
        tjt_outs_compare(what, &a, &b, 1e-6);
        tjt_outs_free(&b);
    }
    tjt_outs_free(&a);
}

/* ---- 6. sharded random init in the usual order ---- */
static void init_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const char *rules = (const char *)u;
    tj_v w = tj_muls(tj_normal(g, 7, TJ_F32, "vocab=64 embed=32"), 0.02), b = tj_adds(tj_uniform(g, 8, TJ_F32, "embed=32"), 1.0);
    (void)in;
    w = tj_add(w, b); /* broadcasting: b's slice too */
    if (rules) w = tj_shard_by_rules(w, rules);
    tj_tree_set_v(out, "w", w);
}
static tj_tree *init_in(tj_ctx *ctx) { return tj_tree_new(ctx); }
static void test_sharded_init(void) {
    const char *rules[3] = {"vocab:data", "embed:data", "vocab:data embed:model"};
    tjt_outs a, b;
    int k;
    tjt_current = "sharded random init";
    if (run1(init_fn, NULL, init_in, 1, NULL, NULL, &a)) { TJT_CHECK(0, "1-device run failed"); return; }
    for (k = 0; k < 3; k++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = tj_tree_new(ctx);
        tj_prog *p;
        tj_collective cols[16];
        int nc = -1;
        tj_set_devices(ctx, 4);
        tj_set_mesh(ctx, k == 2 ? "data=2 model=2" : "data=4");
        p = tj_jit(ctx, "init", init_fn, (void *)rules[k], in, NULL);
        if (p) {
            tj_memory_analysis m = tj_prog_memory(p);
            nc = tj_prog_collectives(p, cols, 16);
            /* the output slice lives in the output; the whole 64x32 tensor (8 KiB) is never made */
            TJT_CHECK(m.temp_bytes < 64 * 32 * 4, "%s: temp %lld B per device (the whole tensor is 8192 B)", rules[k], (long long)m.temp_bytes);
        }
        TJT_CHECK(nc == 0, "%s: %d collectives (shard_slice) where each device should generate its slice", rules[k], nc);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_ctx_free(ctx);
        if (run1(init_fn, (void *)rules[k], init_in, 4, k == 2 ? "data=2 model=2" : "data=4", NULL, &b)) { TJT_CHECK(0, "run failed"); continue; }
        tjt_outs_compare(rules[k], &a, &b, 0);
        tjt_outs_free(&b);
    }
    tjt_outs_free(&a);
}

/* ---- an offloading tj_checkpoint inside a tj_scan that has no policy:
   the region's policy applies (JAX users write it this way; openxla/xla#17541) */
static const tj_policy *off_inner;
static void off_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v h = tj_checkpoint_name(tj_tanh(tj_dot(in[0], in[1], "embed")), "h"); /* b embed2 */
    (void)g; (void)u;
    out[0] = tj_rename(tj_tanh(tj_dot(tj_rename(h, "embed2", "embed"), in[1], "embed")), "embed2", "embed");
}
static void off_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v in[2];
    (void)g; (void)y; (void)u;
    in[0] = c[0];
    in[1] = x[0];
    if (off_inner) tj_checkpoint(off_region, NULL, 2, in, 1, co, off_inner);
    else off_region(g, in, co, NULL);
}
static void off_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), h = NULL, gw, loss;
    (void)g; (void)u;
    tj_scan(off_body, NULL, "layer", 1, &x, 1, &w, 0, &h, NULL, NULL);
    loss = tj_sum(tj_mul(h, h), "b embed");
    tj_grad(loss, 1, &w, &gw);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "gw", gw);
}
static tj_tree *off_in(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx);
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "b=4 embed=8", 3, -1, 1));
    tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F32, "layer=3 embed=8 embed2=8", 4, -1, 1));
    return in;
}
static void test_nested_offload(void) {
    tj_policy pol = tj_save_and_offload_only_these_names("", "h");
    tjt_outs a, b;
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = off_in(ctx);
    tj_prog *p;
    tjt_current = "offloading checkpoint inside a scan without policy";
    off_inner = &pol;
    p = tj_jit(ctx, "nested offload", off_fn, NULL, in, NULL);
    TJT_CHECK(p && tj_prog_memory(p).host_temp_bytes == 3 * 4 * 8 * 4, "host temp %lld B: the region's named value is offloaded in every layer (3 x 128 B)",
              p ? (long long)tj_prog_memory(p).host_temp_bytes : -1LL);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_ctx_free(ctx);
    if (run1(off_fn, NULL, off_in, 1, NULL, NULL, &b)) { TJT_CHECK(0, "run failed"); return; }
    off_inner = NULL;
    if (run1(off_fn, NULL, off_in, 1, NULL, NULL, &a)) { TJT_CHECK(0, "run failed"); tjt_outs_free(&b); return; }
    tjt_outs_compare("offload vs no region", &a, &b, 0);
    tjt_outs_free(&a);
    tjt_outs_free(&b);
}

/* ---- mistakes that used to pass silently ---- */
static void rules_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x");
    (void)g;
    x = tj_shard_by_rules(x, (const char *)u);
    tj_tree_set_v(out, "y", tj_muls(x, 2.0));
}
static void mistakes_scan_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), h = NULL, gw;
    (void)g;
    off_inner = NULL;
    tj_scan(off_body, NULL, "layer", 1, &x, 1, &w, 0, &h, NULL, (const tj_policy *)u);
    tj_grad(tj_sum(tj_mul(h, h), "b embed"), 1, &w, &gw);
    tj_tree_set_v(out, "gw", gw);
}
static void test_mistakes(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *sin = off_in(ctx);
    tj_prog *p;
    tj_policy both = tj_save_and_offload_only_these_names("h", "h"), typo = tj_save_only_these_names("hh");
    tj_jit_opts jo;
    tjt_current = "silent mistakes";
    tj_set_devices(ctx, 4);
    tj_set_mesh(ctx, "data=2 model=2");
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=4 embed=6", 1, -1, 1));
    /* a misspelt mesh axis in a logical rule */
    p = tj_jit(ctx, "typo", rules_fn, (void *)"batch:dta", in, NULL);
    TJT_CHECK(p && strstr(tj_warnings(ctx), "'dta'") && strstr(tj_warnings(ctx), "did you mean 'data'") && strstr(tj_warnings(ctx), "test_wrong.c"),
              "a rule naming 'dta' warns, with the source line: \"%s\"", tj_warnings(ctx));
    tj_prog_free(p);
    /* ... but a mesh axis another mesh may have is fine */
    p = tj_jit(ctx, "other mesh", rules_fn, (void *)"batch:data embed:tensor", in, NULL);
    TJT_CHECK(p && !strstr(tj_warnings(ctx), "tensor"), "a rule for a mesh axis this mesh lacks is skipped quietly");
    tj_prog_free(p);
    /* a rule that cannot split its axis */
    p = tj_jit(ctx, "uneven", rules_fn, (void *)"embed:data+model", in, NULL);
    TJT_CHECK(p && strstr(tj_warnings(ctx), "axis 'embed' of size 6 cannot be split"), "an uneven rule warns: \"%s\"", tj_warnings(ctx));
    tj_prog_free(p);
    /* donate naming no input */
    memset(&jo, 0, sizeof jo);
    jo.donate = "params.";
    p = tj_jit(ctx, "donate", rules_fn, (void *)"batch:data", in, &jo);
    TJT_CHECK(!p, "donate of a prefix no leaf has is an error");
    TJT_ERROR_HAS(ctx, "donate", "params.", "matches no input");
    /* an error never cleared: the next jit says so */
    tj_prog_free(tj_jit(ctx, "donate", rules_fn, (void *)"batch:data", in, &jo));
    p = tj_jit(ctx, "after", rules_fn, (void *)"batch:data", in, NULL);
    TJT_CHECK(!p && strstr(tj_error(ctx), "never cleared") && strstr(tj_error(ctx), "params."), "a stale error is named as such: \"%s\"", tj_error(ctx));
    tj_clear_error(ctx);
    p = tj_jit(ctx, "after clear", rules_fn, (void *)"batch:data", in, NULL);
    TJT_CHECK(p != NULL, "after tj_clear_error jit works again");
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(sin);
    tj_ctx_free(ctx);
    /* policy mistakes (one device) */
    ctx = tj_ctx_new();
    sin = off_in(ctx);
    p = tj_jit(ctx, "both lists", mistakes_scan_fn, &both, sin, NULL);
    TJT_CHECK(!p, "a name in both the save and the offload list is an error");
    TJT_ERROR_HAS(ctx, "'h'", "both the save list", "test_wrong.c");
    p = tj_jit(ctx, "unknown name", mistakes_scan_fn, &typo, sin, NULL);
    TJT_CHECK(p && strstr(tj_warnings(ctx), "'hh'"), "a policy name no residual carries warns at tj_jit: \"%s\"", tj_warnings(ctx));
    tj_prog_free(p);
    tj_tree_free(sin);
    tj_ctx_free(ctx);
}

/* ---- grad of grad through a tj_checkpoint inside a scan (its backward
   scan, cloned into the outer backward body, shares its body: captures
   must come from the clone's own inputs) ---- */
static void ck_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_mul(tj_tanh(in[0]), in[0]);
}
static void ck_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_policy p = tj_nothing_saveable();
    tj_v r = NULL;
    (void)y;
    if (u) tj_checkpoint(ck_region, NULL, 1, x, 1, &r, &p);
    else ck_region(g, x, &r, NULL);
    co[0] = tj_add(c[0], r);
}
static void ck_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), c0, c = NULL, gx, ggx;
    (void)g;
    c0 = tj_muls(tj_sum(x, "s"), 0.0);
    tj_scan(ck_body, u, "s", 1, &c0, 1, &x, 0, &c, NULL, NULL);
    tj_grad(tj_sum(c, "i"), 1, &x, &gx);
    tj_grad(tj_sum(gx, "s i"), 1, &x, &ggx);
    tj_tree_set_v(out, "gg", ggx);
}
static tj_tree *ck_in(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx);
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "s=2 i=3", 3, -1, 1));
    return in;
}
static void test_gg_nested_checkpoint(void) {
    tjt_outs a, b;
    tjt_current = "grad of grad, checkpoint inside a scan";
    if (run1(ck_fn, NULL, ck_in, 1, NULL, NULL, &a)) { TJT_CHECK(0, "no-region run failed"); return; }
    if (run1(ck_fn, (void *)1, ck_in, 1, NULL, NULL, &b)) { TJT_CHECK(0, "the checkpointed program does not build"); tjt_outs_free(&a); return; }
    tjt_outs_compare("checkpoint vs none", &a, &b, 1e-12);
    tjt_outs_free(&a);
    tjt_outs_free(&b);
}

/* ---- grad of grad through a shard_map with check off: its residuals are
   per-device values, not replicated ones (no psum, no 1/n for them) ---- */
static void smexp(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_exp(in[0]);
}
static void smgg_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), y = NULL, gx, ggx;
    const char *sp = "p:data";
    (void)g;
    tj_shard_map(smexp, NULL, 1, &x, &sp, 1, &y, &sp, u != NULL);
    tj_grad(tj_sum(tj_mul(y, y), "p"), 1, &x, &gx);
    tj_grad(tj_sum(gx, "p"), 1, &x, &ggx);
    tj_tree_set_v(out, "gg", ggx);
}
static tj_tree *smgg_in(tj_ctx *ctx) {
    double xv[4] = {.25, .5, 1, 2};
    tj_tree *in = tj_tree_new(ctx);
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F64, "p=4", xv));
    return in;
}
static void test_gg_smap_unchecked(void) {
    double want[4];
    int k, i;
    tjt_outs o;
    for (i = 0; i < 4; i++) want[i] = 4 * exp(2 * (i == 0 ? .25 : i == 1 ? .5 : i == 2 ? 1 : 2)); /* d/dx of 2 e^{2x} */
    tjt_current = "grad of grad through shard_map";
    for (k = 0; k < 2; k++) {
        if (run1(smgg_fn, k ? (void *)1 : NULL, smgg_in, 2, "data=2", NULL, &o)) { TJT_CHECK(0, "run failed"); continue; }
        TJT_CHECK(all_near(&o, "gg", want, 4, 1e-12), "4 e^{2x} with check %s", k ? "on" : "off");
        tjt_outs_free(&o);
    }
}

/* ---- item 7: a region that saves everything costs no more memory than no
   region (regions run inline in the enclosing program) ---- */
static void mem_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_tanh(tj_dot(in[0], in[1], "k"));
}
static void mem_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x[2], y = NULL, gr[2];
    tj_policy p = tj_everything_saveable();
    x[0] = tj_tree_v(in, "a");
    x[1] = tj_tree_v(in, "b");
    if (u) tj_checkpoint(mem_region, NULL, 2, x, 1, &y, &p);
    else mem_region(g, x, &y, NULL);
    tj_grad(tj_sum(tj_mul(y, y), "p q"), 2, x, gr);
    tj_tree_set_v(out, "ga", gr[0]);
    tj_tree_set_v(out, "gb", gr[1]);
}
static void test_region_memory(void) {
    int64_t t[2];
    int k;
    tjt_current = "remat region memory";
    for (k = 0; k < 2; k++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = tj_tree_new(ctx);
        tj_prog *p;
        tj_set_devices(ctx, 2);
        tj_set_mesh(ctx, "data=2");
        tj_tree_set_array(in, "a", tjt_rand(ctx, TJ_F32, "p=8 k=16", 1, -1, 1));
        tj_tree_set_array(in, "b", tjt_rand(ctx, TJ_F32, "k=16 q=8", 2, -1, 1));
        tj_filter_shard(in, "p:data");
        p = tj_jit(ctx, "mem", mem_fn, k ? (void *)1 : NULL, in, NULL);
        t[k] = p ? tj_prog_memory(p).temp_bytes : -1;
        tj_prog_free(p);
        tj_tree_free(in);
        tj_ctx_free(ctx);
    }
    TJT_CHECK(t[0] > 0 && t[1] == t[0], "temp with an everything_saveable region %lld B, without %lld B", (long long)t[1], (long long)t[0]);
}

/* ---- grad of grad with a saved dot whose contracted axis is sharded: the
   saved value is an unreduced sum, and a body output listed twice must be
   copied as such (the copy used to psum it while its type said partial) ---- */
static tj_v dx_X, dx_W;
static void dx_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v t = tj_dot(dx_X, dx_W, "k");
    (void)g; (void)y; (void)u;
    co[0] = tj_add(tj_mul(tj_muls(tj_sum(t, "p q"), 0.1), c[0]), tj_mul(x[0], tj_sum(tj_mul(t, t), "p q")));
}
static void dx_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v d = tj_tree_v(in, "d"), c0, c = NULL, gx, ggx;
    tj_policy p = tj_dots_saveable();
    (void)g; (void)u;
    dx_X = tj_tree_v(in, "X");
    dx_W = tj_tree_v(in, "W");
    c0 = tj_adds(tj_muls(tj_sum(d, "L"), 0.0), 1.0);
    tj_scan(dx_body, NULL, "L", 1, &c0, 1, &d, 0, &c, NULL, &p);
    tj_grad(c, 1, &dx_X, &gx);
    tj_grad(tj_sum(gx, "p k"), 1, &dx_X, &ggx);
    tj_tree_set_v(out, "gx", gx);
    tj_tree_set_v(out, "gg", ggx);
}
static tj_tree *dx_in(tj_ctx *ctx) {
    double dv[2] = {1, .5};
    tj_tree *in = tj_tree_new(ctx);
    tj_tree_set_array(in, "X", tjt_rand(ctx, TJ_F64, "p=2 k=4", 1, -1, 1));
    tj_tree_set_array(in, "W", tjt_rand(ctx, TJ_F64, "k=4 q=2", 2, -1, 1));
    tj_tree_set_array(in, "d", tj_array_new(ctx, TJ_F64, "L=2", dv));
    return in;
}
static void test_gg_saved_partial_dot(void) {
    tjt_outs a, b;
    const char *meshes[2] = {"data=2", "data=4"};
    int k;
    tjt_current = "grad of grad, saved dot with a sharded contraction";
    if (run1(dx_fn, NULL, dx_in, 1, NULL, NULL, &a)) { TJT_CHECK(0, "1-device run failed"); return; }
    for (k = 0; k < 2; k++) {
        if (run1(dx_fn, NULL, dx_in, k ? 4 : 2, meshes[k], "k:data", &b)) { TJT_CHECK(0, "run failed"); continue; }
        tjt_outs_compare(meshes[k], &a, &b, 1e-12);
        tjt_outs_free(&b);
    }
    tjt_outs_free(&a);
}

/* ---- errors of autodiff name the tj_grad call's line ---- */
static int grad_line;
static void nonscalar_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), y = tj_mul(x, x), gx = NULL;
    (void)g; (void)u;
    grad_line = __LINE__ + 1;
    tj_grad(y, 1, &x, &gx);
    tj_tree_set_v(out, "gx", gx);
}
static void test_grad_line(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx);
    tj_prog *p;
    char want[64];
    tjt_current = "autodiff errors";
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "i=3", 1, -1, 1));
    p = tj_jit(ctx, "nonscalar", nonscalar_fn, NULL, in, NULL);
    snprintf(want, sizeof want, "test_wrong.c:%d", grad_line);
    TJT_CHECK(!p && strstr(tj_error(ctx), "not a scalar") && strstr(tj_error(ctx), want), "the message names the tj_grad line (%s): \"%s\"", want, tj_error(ctx));
    tj_prog_free(p);
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* ---- tanh's gradient near |tanh x| = 1: g (1 - y y) lost up to 566 f32
   ulps of 1 - y^2 (for the y the forward computed) to cancellation; JAX's
   (g + g y)(1 - y) loses at most about one (jax_diff seed 94008) ---- */
static void tanh_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), y = tj_tanh(x), gx;
    (void)g; (void)u;
    tj_grad(tj_sum_all(y), 1, &x, &gx);
    tj_tree_set_v(out, "y", y);
    tj_tree_set_v(out, "g", gx);
}
static void test_tanh_grad_near_one(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    float xs[8] = {2.5f, 3.0f, 3.5f, 4.0f, 4.5f, 5.0f, -5.0f, 6.0f}, y[8], gr[8];
    tj_prog *p;
    int i;
    tjt_current = "tanh gradient near |y| = 1";
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F32, "a=8", xs));
    p = tj_jit(ctx, "tanh", tanh_fn, NULL, in, NULL);
    if (!p || tj_run(p, in, out)) { TJT_CHECK(0, "run: %s", tj_error(ctx)); tj_prog_free(p); tj_tree_free(in); tj_tree_free(out); tj_ctx_free(ctx); return; }
    tj_array_read(tj_tree_array(out, "y"), TJ_F32, y);
    tj_array_read(tj_tree_array(out, "g"), TJ_F32, gr);
    for (i = 0; i < 8; i++) {
        double want = 1.0 - (double)y[i] * (double)y[i], ulp = nextafterf((float)want, 1.0f) - (float)want;
        TJT_CHECK(fabs(gr[i] - want) <= 2 * ulp, "x = %g: d tanh / dx = %.9g, 1 - y^2 of the forward's y = %.9g (%.0f ulps off)", xs[i], gr[i], want,
                  fabs(gr[i] - want) / ulp);
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
}

/* ---- an i32 sum over a sharded axis wraps as on one device (XLA's s32);
   the partial sums were added by the transport, which saturated: 4 * 2^30
   over two devices gave INT32_MIN (each device's 2^31 wrapped, then
   INT32_MIN + INT32_MIN saturated), one device 0 ---- */
static void isum_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x");
    (void)g; (void)u;
    tj_tree_set_v(out, "s", tj_sum(x, "n"));
    tj_tree_set_v(out, "sp", tj_sum(tj_mul(x, x), "n m"));
}
static const char *isum_spec; /* x's placement (tj_filter_shard places floats only) */
static tj_tree *isum_in(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx);
    int32_t x[4 * 2] = {1 << 30, 7, 1 << 30, -3, 1 << 30, 46341, 1 << 30, 46341}; /* 4 * 2^30 = 2^32 wraps to 0; each device's partial to INT32_MIN */
    tj_array *a = tj_array_new(ctx, TJ_I32, "n=4 m=2", x);
    if (isum_spec) {
        tj_array *b = tj_device_put(a, isum_spec);
        tj_array_free(a);
        a = b;
    }
    tj_tree_set_array(in, "x", a);
    return in;
}
static void test_i32_sharded_sum(void) {
    tjt_outs a, b;
    const char *rules[3] = {"n:data", "n:data m:model", "m:data"};
    const char *meshes[3] = {"data=2", "data=2 model=2", "data=2"};
    const int ndev[3] = {2, 4, 2};
    double want_s[2] = {0.0, 92686.0}; /* 4 * 2^30 wrapped, 7 - 3 + 2 * 46341 */
    int k;
    tjt_current = "i32 sum over a sharded axis wraps";
    if (run1(isum_fn, NULL, isum_in, 1, NULL, NULL, &a)) { TJT_CHECK(0, "1-device run failed"); return; }
    TJT_CHECK(all_near(&a, "s", want_s, 2, 0), "one device: the i32 sum wraps");
    for (k = 0; k < 3; k++) {
        char what[128];
        isum_spec = rules[k];
        if (run1(isum_fn, NULL, isum_in, ndev[k], meshes[k], NULL, &b)) { TJT_CHECK(0, "run failed (%s)", rules[k]); isum_spec = NULL; continue; }
        isum_spec = NULL;
        snprintf(what, sizeof what, "i32 sums on %s, %s", meshes[k], rules[k]);
        tjt_outs_compare(what, &a, &b, 0);
        tjt_outs_free(&b);
    }
    tjt_outs_free(&a);
}
/* ---- a bf16 sum over a sharded axis equals the one-device sum (JAX's
   jnp.sum: an f32 sum rounded once to bf16); each device rounded its
   partial sum to bf16 before the psum: a quarter of the rows an ulp off.
   Its gradient too (the broadcast cotangent) ---- */
static void bsum_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), s, loss, gx;
    (void)g; (void)u;
    s = tj_sum(x, "c");
    loss = tj_sum_all(tj_cast(tj_mul(s, s), TJ_F32));
    tj_tree_set_v(out, "s", s);
    tj_tree_set_v(out, "all", tj_sum_all(x));
    tj_tree_set_v(out, "m", tj_mean(x, "c"));
    if (tj_grad(loss, 1, &x, &gx) == TJ_OK) tj_tree_set_v(out, "gx", gx);
}
static tj_tree *bsum_in(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx);
    uint16_t x[32 * 64];
    uint32_t z = 777;
    int i;
    for (i = 0; i < 32 * 64; i++) {
        z = z * 1664525u + 1013904223u;
        x[i] = tj_f32_to_bf16((float)((double)(z >> 8) / 16777216.0 * 4.0 - 1.4));
    }
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_BF16, "r=32 c=64", x));
    tj_tree_set_array(in, "xs", tj_array_new(ctx, TJ_BF16, "r=32 c=64", x)); /* (a copy for the closed form) */
    return in;
}
static void test_bf16_sharded_sum(void) {
    tjt_outs a, b;
    const char *rules[3] = {"c:data", "c:data r:model", "c:data+model"};
    const char *meshes[3] = {"data=2", "data=2 model=2", "data=2 model=2"};
    const int ndev[3] = {2, 4, 4};
    int k, i, j, bad = 0;
    tjt_current = "bf16 sum over a sharded axis";
    if (run1(bsum_fn, NULL, bsum_in, 1, NULL, NULL, &a)) { TJT_CHECK(0, "1-device run failed"); return; }
    {   /* one device: bf16(f32(sum)) */
        tj_ctx *c = tj_ctx_new();
        tj_tree *in = bsum_in(c);
        uint16_t x[32 * 64];
        tj_array_read(tj_tree_array(in, "x"), TJ_BF16, x);
        for (i = 0; i < a.n; i++)
            if (!strcmp(a.name[i], "s"))
                for (j = 0; j < 32; j++) {
                    double sd = 0;
                    int q;
                    for (q = 0; q < 64; q++) sd += tj_bf16_to_f32(x[j * 64 + q]);
                    bad += a.v[i][j] != tj_bf16_to_f32(tj_f32_to_bf16((float)sd));
                }
        tj_tree_free(in);
        tj_ctx_free(c);
        TJT_CHECK(bad == 0, "one device: bf16 sum = bf16(f32(sum)): %d of 32 rows differ", bad);
    }
    for (k = 0; k < 3; k++) {
        char what[128];
        if (run1(bsum_fn, NULL, bsum_in, ndev[k], meshes[k], rules[k], &b)) { TJT_CHECK(0, "run failed (%s)", rules[k]); continue; }
        snprintf(what, sizeof what, "bf16 sums on %s, %s", meshes[k], rules[k]);
        tjt_outs_compare(what, &a, &b, 0);
        tjt_outs_free(&b);
    }
    tjt_outs_free(&a);
}
/* grad of grad through tj_custom_vjp: f(x) = x^2 with a bwd of g * K x
   (K = 3: a rule unlike the true derivative 2x, so the two paths differ;
   K = 2: the true one, for finite differences). A backward pass reads
   the custom function's outputs (a residual of a second application, a
   factor of a product's rule); JAX computed those inside the inner grad
   with fwd's own ops, so its outer derivative goes through fwd's ops
   there, and through bwd only where a cotangent reaches them by forward
   values. JAX 0.10.2: grad(grad(f . f))(2.0) = 108 = 27 x^2 (tinyjax gave
   144 = 36 x^2, the rule's 3x where JAX differentiates x * x), and
   grad(grad(x -> f(x) f(x)))(2.0) = 72 = 18 x^2 (tinyjax 96 = 24 x^2).
   Each in plain jit, a scan of 2 (h -> f(h)), a remat region with
   nothing_saveable and a checked shard_map, on one device and data=2. */
static int cv_k, cv_where, cv_prod;
static void cv_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    (void)g; (void)u;
    out[0] = tj_mul(in[0], in[0]);
    res[0] = in[0];
}
static void cv_bwd(tj_graph *g, const tj_v *r, const tj_v *ct, tj_v *gin, void *u) {
    (void)g; (void)u;
    gin[0] = tj_mul(ct[0], tj_muls(r[0], (double)cv_k));
}
static tj_v cv_f(tj_v x) {
    tj_v y = NULL;
    tj_custom_vjp(cv_fwd, cv_bwd, NULL, 1, &x, 1, &y, 1);
    return y;
}
static tj_v cv_ff(tj_v x) { return cv_prod ? tj_mul(cv_f(x), cv_f(x)) : cv_f(cv_f(x)); }
static void cv_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *ys, void *u) {
    (void)g; (void)x; (void)u; (void)ys;
    co[0] = cv_f(c[0]);
}
static void cv_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = cv_ff(in[0]);
}
static tj_v cv_loss(tj_v x) {
    tj_v y = NULL;
    if (cv_where == 0) y = cv_ff(x);
    else if (cv_where == 1) tj_scan(cv_body, NULL, "l=2", 1, &x, 0, NULL, 0, &y, NULL, NULL);
    else if (cv_where == 2) {
        tj_policy p = tj_nothing_saveable();
        tj_checkpoint(cv_region, NULL, 1, &x, 1, &y, &p);
    } else {
        const char *is = "a:data", *os = "a:data";
        tj_shard_map(cv_region, NULL, 1, &x, &is, 1, &y, &os, 1);
    }
    return y ? tj_sum(y, "a") : NULL;
}
static void cv_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), g1, g2, l2;
    (void)g; (void)u;
    if (tj_grad(cv_loss(x), 1, &x, &g1)) return;
    l2 = tj_sum(g1, "a");
    if (tj_grad(l2, 1, &x, &g2)) return;
    tj_tree_set_v(out, "g1", g1);
    tj_tree_set_v(out, "g2", g2);
    tj_tree_set_v(out, "loss", l2); /* for the finite-difference check */
}
static void cv_fd_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) { /* loss = sum of the first derivative */
    tj_v x = tj_tree_v(in, "x"), g1;
    (void)g; (void)u;
    if (tj_grad(cv_loss(x), 1, &x, &g1)) return;
    tj_tree_set_v(out, "loss", tj_sum(g1, "a"));
}
static tj_tree *cv_in(tj_ctx *ctx) {
    tj_tree *in = tj_tree_new(ctx);
    double x[4] = {0.5, -1.0, 2.0, 1.5};
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F64, "a=4", x));
    return in;
}
static void test_gg_custom_vjp(void) {
    static const char *where[4] = {"jit", "scan", "checkpoint", "shard_map"};
    double x[4] = {0.5, -1.0, 2.0, 1.5};
    tjt_current = "grad of grad through custom_vjp";
    cv_k = 3;
    for (cv_prod = 0; cv_prod < 2; cv_prod++)
        for (cv_where = 0; cv_where < 4; cv_where++) {
            int nd;
            if (cv_prod && cv_where == 1) continue; /* (the scan composes f with itself) */
            for (nd = 1; nd <= 2; nd++) {
                tjt_outs o;
                int i, j, bad1 = 0, bad2 = 0;
                if (run1(cv_fn, NULL, cv_in, nd, nd == 2 ? "data=2" : (cv_where == 3 ? "data=1" : NULL), nd == 2 ? "a:data" : NULL, &o)) {
                    TJT_CHECK(0, "%s (%d devices) failed", where[cv_where], nd);
                    continue;
                }
                for (i = 0; i < o.n; i++)
                    for (j = 0; j < 4; j++) {
                        double v = x[j], f = v * v;
                        /* d/dx through the rule: 3 f(x) 3x (composed) or 2 f(x) 3x (product); then JAX's outer derivative */
                        double g1 = cv_prod ? 6 * v * f : 9 * v * f, g2 = cv_prod ? 18 * v * v : 27 * v * v;
                        if (!strcmp(o.name[i], "g1")) bad1 += fabs(o.v[i][j] - g1) > 1e-12 * fabs(g1);
                        if (!strcmp(o.name[i], "g2")) bad2 += fabs(o.v[i][j] - g2) > 1e-12 * fabs(g2);
                    }
                TJT_CHECK(bad1 == 0, "%s%s (%d devices): first derivative off the rule's in %d of 4", where[cv_where], cv_prod ? ", f(x) f(x)" : "", nd, bad1);
                TJT_CHECK(bad2 == 0, "%s%s (%d devices): second derivative off JAX's 27 x^2 / 18 x^2 in %d of 4", where[cv_where], cv_prod ? ", f(x) f(x)" : "", nd, bad2);
                tjt_outs_free(&o);
            }
        }
    /* with the true rule (K = 2) the second derivative is the finite difference of the first */
    cv_k = 2;
    for (cv_prod = 0; cv_prod < 2; cv_prod++)
        for (cv_where = 0; cv_where < 3; cv_where++) {
            tj_ctx *ctx = tj_ctx_new();
            tj_tree *in = cv_in(ctx);
            TJT_GRADCHECK(ctx, where[cv_where], cv_fd_fn, NULL, in, "x");
            tj_tree_free(in);
            tj_ctx_free(ctx);
        }
}
/* layer_norm of x - c: the gradient with respect to c (added to the whole
   row) is 0 analytically. The row's mean rounds to an ulp of |mean|, and
   where that is large against the row's spread, x - mean did not sum to 0
   and neither did the gradient: 9.7e-13 in f64 for the row (0.0199,
   0.0011) - (-1.6028), where JAX gives 0 (jax_diff seed 400223), 5.1e-11 for the rows below. Now the
   mean is kept in two parts; each dtype's sum of the row's gradient must
   be a few roundings of its terms. */
static void ln_shift_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v c = tj_tree_v(in, "c"), x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), ins[2] = {c, x}, gr[2];
    tj_v loss = tj_sum(tj_mul(tj_tanh(tj_layer_norm(tj_sub(x, c), "e", 1e-5)), w), "e b");
    (void)g; (void)u;
    tj_grad(loss, 2, ins, gr);
    tj_tree_set_v(out, "gc", gr[0]);
    tj_tree_set_v(out, "gx", gr[1]);
}
static tj_array *ln_arr(tj_ctx *ctx, tj_dtype dt, const char *shape, const double *v, int n) {
    char host[8 * 10];
    int i;
    for (i = 0; i < n; i++) tjt_st(host, dt, i, v[i]);
    return tj_array_new(ctx, dt, shape, host);
}
static void test_ln_shift_grad(void) {
    static const tj_dtype dts[3] = {TJ_F64, TJ_F32, TJ_BF16};
    int t, i;
    tjt_current = "layer_norm: the gradient of a shift of the row is ~0";
    for (t = 0; t < 3; t++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        tj_prog *p;
        /* rows of 2 whose means are 170 to 5000 times their spread */
        double c = -1.60275785, x[5 * 2] = {0.019932222, 0.0010719689, 151.25, 151.2503, 151.2497, 151.2501, 0.5, 0.5001, 1000.1, 1000.1003};
        double w[5 * 2] = {0.7, -1.3, 0.5, -0.25, 1.5, -2, 0.125, 0.75, -0.6, 0.3}, gc = 1, gx[10], terms = 0, eps = t == 0 ? 0x1p-53 : t == 1 ? 0x1p-24 : 0x1p-8;
        tj_tree_set_array(in, "c", ln_arr(ctx, dts[t], "", &c, 1));
        tj_tree_set_array(in, "x", ln_arr(ctx, dts[t], "b=5 e=2", x, 10));
        tj_tree_set_array(in, "w", ln_arr(ctx, dts[t], "b=5 e=2", w, 10));
        p = tj_jit(ctx, "ln_shift", ln_shift_fn, NULL, in, NULL);
        TJT_CHECK(p && !tj_run(p, in, out) && !tj_array_read(tj_tree_array(out, "gc"), TJ_F64, &gc) && !tj_array_read(tj_tree_array(out, "gx"), TJ_F64, gx),
                  "%s: ran (%s)", tj_dtype_name(dts[t]), tj_error(ctx));
        for (i = 0; i < 10; i++) terms += fabs(gx[i]);
        TJT_CHECK(terms > 1 && fabs(gc) <= 8 * eps * terms, "%s: d/dc layer_norm(x - c) = %.3g, want 0 to %.3g (8 roundings of its terms, %.3g)", tj_dtype_name(dts[t]),
                  gc, 8 * eps * terms, terms);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(ctx);
    }
}

/* max / min over axes of size 1: the result is x itself, but the gradient is
   JAX's g (x == y) / count, NaN where x is NaN (count 0). tinyjax made the
   reduction a view there, whose gradient passed g through (jax_diff seed
   503009 --attention: tinyjax 0.0637, JAX NaN). */
static void size1_maxmin_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), gx[2], l;
    (void)g; (void)u;
    l = tj_sum_all(tj_mul(tj_max(x, "a"), w));
    tj_grad(l, 1, &x, &gx[0]);
    l = tj_sum_all(tj_mul(tj_min(x, "a b"), w));
    tj_grad(l, 1, &x, &gx[1]);
    tj_tree_set_v(out, "gmax", gx[0]);
    tj_tree_set_v(out, "gmin", gx[1]);
    tj_tree_set_v(out, "y", tj_max(x, "a b"));
}
static void test_size1_maxmin_nan_grad(void) {
    static const tj_dtype dts[3] = {TJ_F64, TJ_F32, TJ_BF16};
    int t, i, k;
    tjt_current = "max / min over axes of size 1: NaN gradient at NaN, as JAX";
    for (t = 0; t < 3; t++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        tj_prog *p;
        double x[4] = {NAN, 2.0, INFINITY, -0.0}, w[4] = {0.5, -1.5, 2.0, 3.0}, gx[2][4], y[4];
        tj_tree_set_array(in, "x", ln_arr(ctx, dts[t], "c=4 a=1 b=1", x, 4));
        tj_tree_set_array(in, "w", ln_arr(ctx, dts[t], "c=4", w, 4));
        p = tj_jit(ctx, "size1_maxmin", size1_maxmin_fn, NULL, in, NULL);
        TJT_CHECK(p && !tj_run(p, in, out) && !tj_array_read(tj_tree_array(out, "gmax"), TJ_F64, gx[0]) &&
                      !tj_array_read(tj_tree_array(out, "gmin"), TJ_F64, gx[1]) && !tj_array_read(tj_tree_array(out, "y"), TJ_F64, y),
                  "%s: ran (%s)", tj_dtype_name(dts[t]), tj_error(ctx));
        for (k = 0; k < 2; k++) {
            TJT_CHECK(isnan(gx[k][0]), "%s: %s gradient at a NaN element is %g, JAX NaN", tj_dtype_name(dts[t]), k ? "min" : "max", gx[k][0]);
            for (i = 1; i < 4; i++)
                TJT_CHECK(gx[k][i] == w[i], "%s: %s gradient [%d] is %g, want %g", tj_dtype_name(dts[t]), k ? "min" : "max", i, gx[k][i], w[i]);
        }
        TJT_CHECK(isnan(y[0]) && y[1] == 2 && y[2] == INFINITY && y[3] == 0 && signbit(y[3]), "%s: max over size-1 axes is x (%g %g %g %g)",
                  tj_dtype_name(dts[t]), y[0], y[1], y[2], y[3]);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(ctx);
    }
}

int main(void) {
    test_tanh_grad_near_one();
    test_captured_attr();
    test_grad_of_grad_scan();
    test_ys_sharded_sum();
    test_take_grad();
    test_sharded_init();
    test_nested_offload();
    test_mistakes();
    test_gg_nested_checkpoint();
    test_gg_smap_unchecked();
    test_region_memory();
    test_gg_saved_partial_dot();
    test_grad_line();
    test_i32_sharded_sum();
    test_bf16_sharded_sum();
    test_gg_custom_vjp();
    test_ln_shift_grad();
    test_size1_maxmin_nan_grad();
    return tjt_finish();
}
