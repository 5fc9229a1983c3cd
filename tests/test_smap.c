/* shard_map, replication (vary) types, custom ops and custom_vjp:
   - the scenario of jax-ml/jax#21855 (no defensive all-reduce when checked);
   - every collective's transpose against finite differences on a 2-d mesh,
     checked and unchecked;
   - shard_map programs against the automatic-sharding program that
     computes the same thing, and against one device;
   - nesting both ways, custom_vjp under scan and remat;
   - errors. */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"

/* ---- a custom "copy" kernel (the Pallas kernel of the JAX issue) ---- */
static void copy_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *u) {
    int64_t n = 1;
    int i;
    (void)nin; (void)nout; (void)u;
    for (i = 0; i < in[0].rank; i++) n *= in[0].dim[i];
    memcpy(out[0].data, in[0].data, (size_t)n * tj_dtype_size(in[0].dtype));
}
/* a kernel with a VJP rule of its own: out = 2 x */
static void twice_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *u) {
    int64_t n = 1, i;
    int k;
    (void)nin; (void)nout; (void)u;
    for (k = 0; k < in[0].rank; k++) n *= in[0].dim[k];
    for (i = 0; i < n; i++) ((double *)out[0].data)[i] = 2 * ((const double *)in[0].data)[i];
}
static tj_status twice_vjp(tj_graph *g, int nin, const tj_v *in, int nout, const tj_v *out, const tj_v *ct, tj_v *gin, void *u) {
    (void)g; (void)nin; (void)in; (void)nout; (void)out; (void)u;
    gin[0] = tj_muls(ct[0], 2.0);
    return TJ_OK;
}
/* a two-output kernel with a shape rule: (sum over embed, x) */
static int rowsum_shape(const tj_buf *in, int nin, int j, char *shape, size_t n, tj_dtype *dt, void *u) {
    (void)nin; (void)u;
    *dt = in[0].dtype;
    if (in[0].rank != 2) {
        snprintf(shape, n, "want a rank-2 input");
        return 1;
    }
    if (j == 0) snprintf(shape, n, "%s=%lld", in[0].axis[0], (long long)in[0].dim[0]);
    else snprintf(shape, n, "%s=%lld %s=%lld", in[0].axis[0], (long long)in[0].dim[0], in[0].axis[1], (long long)in[0].dim[1]);
    return 0;
}
static void rowsum_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *u) {
    int64_t r, c, R = in[0].dim[0], C = in[0].dim[1];
    const double *x = (const double *)in[0].data;
    (void)nin; (void)nout; (void)u;
    for (r = 0; r < R; r++) {
        double s = 0;
        for (c = 0; c < C; c++) s += x[r * C + c];
        ((double *)out[0].data)[r] = s;
    }
    memcpy(out[1].data, x, (size_t)(R * C) * sizeof(double));
}
static void register_ops(tj_ctx *ctx) {
    tj_op_def d;
    memset(&d, 0, sizeof d);
    d.name = "copy";
    d.nout = 1;
    d.cpu = copy_cpu;
    d.replication = tj_rep_same;
    tj_register_op(ctx, &d);
    d.name = "copy_norule";
    d.replication = NULL;
    tj_register_op(ctx, &d);
    d.name = "twice";
    d.cpu = twice_cpu;
    d.vjp = twice_vjp;
    d.replication = tj_rep_same;
    tj_register_op(ctx, &d);
    memset(&d, 0, sizeof d);
    d.name = "rowsum";
    d.nout = 2;
    d.shape = rowsum_shape;
    d.cpu = rowsum_cpu;
    d.replication = tj_rep_same;
    tj_register_op(ctx, &d);
}

/* ---- running a program and reading everything back ---- */
typedef struct {
    tjt_outs o;
    tj_collective col[256];
    int ncol;
    tj_transpose tr[64];
    int ntr;
} result;
static void free_result(result *r) {
    tjt_outs_free(&r->o);
    memset(r, 0, sizeof *r);
}
typedef void (*inputs_fn)(tj_ctx *ctx, tj_tree *in);
static int run(int ndev, const char *mesh, inputs_fn inputs, const char *rules, tj_fn fn, void *user, result *r) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p = NULL;
    int ok = 1;
    memset(r, 0, sizeof *r);
    tj_set_devices(ctx, ndev);
    if (mesh) tj_set_mesh(ctx, mesh);
    register_ops(ctx);
    inputs(ctx, in);
    if (rules && tj_filter_shard(in, rules)) ok = 0;
    if (ok) p = tj_jit(ctx, "prog", fn, user, in, NULL);
    if (!p || tj_run(p, in, out)) {
        fprintf(stderr, "run(%s): %s\n", mesh ? mesh : "1 device", tj_error(ctx));
        ok = 0;
    } else { /* the memory analysis is what the run allocated, on every device */
        tj_memory_analysis m = tj_prog_memory(p);
        tj_alloc_stats st = tj_get_alloc_stats(ctx);
        TJT_CHECK(st.arena_bytes == ndev * (m.temp_bytes + m.host_temp_bytes), "%s: arenas of %lld B, the analysis says %d x %lld B",
                  mesh ? mesh : "1 device", (long long)st.arena_bytes, ndev, (long long)(m.temp_bytes + m.host_temp_bytes));
    }
    if (ok) {
        if (getenv("TJ_TEST_VERBOSE")) {
            tj_prog_print(p, stdout);
            tj_prog_transposes_print(p, stdout);
        }
        tjt_outs_read(&r->o, out);
        r->ncol = tj_prog_collectives(p, r->col, 256);
        r->ntr = tj_prog_transposes(p, r->tr, 64);
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return ok;
}
static void compare(const char *what, const result *a, const result *b, double tol) { tjt_outs_compare(what, &a->o, &b->o, tol); }
/* backward collectives of one kind over given mesh axes ("" = any) */
static int count_bwd(const result *r, const char *kind, const char *axes) {
    int i, n = 0;
    for (i = 0; i < r->ncol && i < 256; i++)
        if (r->col[i].backward && !strcmp(r->col[i].kind, kind) && (!*axes || !strcmp(r->col[i].axes, axes))) n++;
    return n;
}

/* ==== 1. the scenario of jax-ml/jax#21855 ================================ */
static void copy_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    (void)g; (void)res; (void)u;
    tj_custom("copy", 1, in, out);
}
static void copy_bwd(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *u) {
    (void)g; (void)res; (void)u;
    tj_custom("copy", 1, ct, gin);
}
static void copy_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    tj_custom_vjp(copy_fwd, copy_bwd, NULL, 1, in, 1, out, 0);
}
static void scenario_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const char *is[1] = {"batch:data"}, *os[1] = {"batch:data"};
    tj_v x = tj_tree_v(in, "x"), y = NULL, loss, gx;
    (void)g;
    tj_shard_map(copy_body, NULL, 1, &x, is, 1, &y, os, *(int *)u);
    loss = tj_sum(tj_cast(y, TJ_F32), "batch embed");
    tj_grad(loss, 1, &x, &gx);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "gx", gx);
}
static void scenario_inputs(tj_ctx *ctx, tj_tree *in) { tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_BF16, "batch=4 embed=128", 11, -2, 2)); }
static void test_scenario(void) {
    int check;
    tjt_current = "jax#21855 scenario";
    for (check = 1; check >= 0; check--) {
        result r;
        int64_t j, ones = 0;
        if (!run(8, "data=4 model=2", scenario_inputs, "batch:data", scenario_fn, &check, &r)) {
            TJT_CHECK(0, "scenario (check=%d) failed to run", check);
            continue;
        }
        for (j = 0; j < r.o.len[1]; j++) ones += r.o.v[1][j] == 1.0;
        TJT_CHECK(ones == 512, "check=%d: gradient is all ones (analytical): %lld of 512", check, (long long)ones);
        if (check) {
            TJT_CHECK(count_bwd(&r, "psum", "") == 0, "checked: zero all-reduces in the backward pass, got %d", count_bwd(&r, "psum", ""));
            TJT_CHECK(r.ntr == 0, "checked: the transpose report is empty, got %d rows", r.ntr);
        } else {
            TJT_CHECK(count_bwd(&r, "psum", "") == 1 && count_bwd(&r, "psum", "model") == 1, "unchecked: one psum over model in the backward pass, got %d (%d over model)",
                      count_bwd(&r, "psum", ""), count_bwd(&r, "psum", "model"));
            TJT_CHECK(r.ntr == 2 && !strcmp(r.tr[0].kind, "scale") && !strcmp(r.tr[1].kind, "psum") && strstr(r.tr[1].rule, "in_spec does not name model"),
                      "unchecked: the report lists the division and the defensive psum (%d rows)", r.ntr);
        }
        free_result(&r);
    }
}

/* ==== 2. every collective's transpose against finite differences ========= */
typedef struct {
    int which, check;
} coll_case;
static const char *coll_names[] = {"psum model", "psum data+model", "pmax model", "all_gather model", "psum_scatter model", "all_to_all model",
                                   "ppermute model (swap)", "ppermute data (one pair)", "axis_index", "psum of an invariant value", "pvary"};
#define NCOLL 11
static void coll_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const coll_case *k = (const coll_case *)u;
    tj_v x = in[0], t = tj_tanh(in[0]);
    static const int swap[4] = {0, 1, 1, 0}, one[2] = {0, 1};
    switch (k->which) {
    case 0: out[0] = tj_psum(t, "model"); break;
    case 1: out[0] = tj_psum(t, "data+model"); break;
    case 2: out[0] = tj_pmax(x, "model"); break;
    case 3: out[0] = tj_all_gather(t, "model", "embed"); break;
    case 4: out[0] = tj_psum_scatter(t, "model", "embed"); break;
    case 5: out[0] = tj_all_to_all(t, "model", "embed", "batch"); break;
    case 6: out[0] = tj_ppermute(t, "model", 2, swap); break;
    case 7: out[0] = tj_ppermute(t, "data", 1, one); break;
    case 8: out[0] = tj_mul(t, tj_cast(tj_adds(tj_axis_index(g, "data model"), 1), TJ_F64)); break;
    case 9: out[0] = tj_psum(t, "model"); break;      /* t is invariant: 2 t */
    case 10: out[0] = tj_mul(tj_pvary(t, "model"), tj_cast(tj_adds(tj_axis_index(g, "model"), 1), TJ_F64)); break;
    }
}
static const char *coll_in_spec(int which) { return which == 9 ? "batch:data" : which == 10 ? "" : "batch:data embed:model"; }
static const char *coll_out_spec(int which) {
    switch (which) {
    case 0: case 2: case 9: return "batch:data";
    case 1: return "";
    case 10: return "batch:model";
    default: return "batch:data embed:model";
    }
}
static void coll_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const coll_case *k = (const coll_case *)u;
    const char *is[1], *os[1];
    tj_v x = tj_tree_v(in, "x"), y = NULL;
    (void)g;
    is[0] = coll_in_spec(k->which);
    os[0] = coll_out_spec(k->which);
    tj_shard_map(coll_body, (void *)k, 1, &x, is, 1, &y, os, k->check);
    /* loss = sum(y^3/3 + y): its gradient y^2 + 1 is never zero */
    if (y) {
        char axes[64];
        int i;
        axes[0] = 0;
        for (i = 0; i < tj_v_rank(y); i++) {
            strcat(axes, tj_v_axis(y, i));
            strcat(axes, " ");
        }
        tj_tree_set_v(out, "loss", tj_sum(tj_add(tj_muls(tj_pows(y, 3), 1.0 / 3), y), axes));
    }
}
static void coll_inputs(tj_ctx *ctx, tj_tree *in) { tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "batch=4 embed=8", 21, -1.5, 1.5)); }
static void test_collectives(void) {
    int w, check;
    tjt_current = "collective transposes";
    for (w = 0; w < NCOLL; w++) {
        result r[2];
        for (check = 1; check >= 0; check--) {
            coll_case k;
            tj_ctx *ctx = tj_ctx_new();
            tj_tree *in = tj_tree_new(ctx);
            char what[96];
            k.which = w;
            k.check = check;
            tj_set_devices(ctx, 4);
            tj_set_mesh(ctx, "data=2 model=2");
            coll_inputs(ctx, in);
            snprintf(what, sizeof what, "%s, check %s", coll_names[w], check ? "on" : "off");
            TJT_GRADCHECK(ctx, what, coll_fn, &k, in, "x");
            tj_tree_free(in);
            tj_ctx_free(ctx);
            run(4, "data=2 model=2", coll_inputs, NULL, coll_fn, &k, &r[check]);
        }
        compare(coll_names[w], &r[1], &r[0], 1e-12); /* checking changes which collectives run, not the values */
        free_result(&r[0]);
        free_result(&r[1]);
    }
}

/* psum of f32 rounds once (the sum in double, in rank order, then to f32,
   as the transport's all_reduce promises), over groups of 2 (where the
   float add is that already), 4 and 8; pmax likewise. Columns where adding
   in f32 one rank at a time would give other bits. */
typedef struct { const char *axes; int op; } round_case;
static void round_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const round_case *k = (const round_case *)u;
    (void)g;
    out[0] = k->op ? tj_pmax(in[0], k->axes) : tj_psum(in[0], k->axes);
}
static void round_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const round_case *k = (const round_case *)u;
    char spec[64];
    const char *is[1], *os[1] = {""};
    tj_v x = tj_tree_v(in, "x"), y = NULL;
    (void)g;
    snprintf(spec, sizeof spec, "dev:%s", k->axes);
    is[0] = spec;
    tj_shard_map(round_body, (void *)k, 1, &x, is, 1, &y, os, 1);
    tj_tree_set_v(out, "y", y);
}
static void test_rounding(void) {
    static const struct { int ndev; const char *mesh, *axes; } ms[] = {{2, "model=2", "model"}, {4, "model=4", "model"}, {8, "data=2 model=4", "data+model"}};
    int mi, op, r, c;
    tjt_current = "psum and pmax of f32 round once";
    for (mi = 0; mi < 3; mi++)
        for (op = 0; op < 2; op++) {
            enum { NC = 6 };
            int G = ms[mi].ndev;
            float x[8 * NC];
            char shape[32];
            round_case k;
            tj_ctx *ctx = tj_ctx_new();
            tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
            tj_prog *p;
            uint64_t st = 12345;
            k.axes = ms[mi].axes;
            k.op = op;
            for (r = 0; r < G; r++)
                for (c = 0; c < NC; c++) {
                    st = st * 6364136223846793005ull + 1442695040888963407ull;
                    x[r * NC + c] = c == 0 ? (r ? 0x1p-24f : 1.0f)                        /* ties in f32 one rank at a time */
                                  : c == 1 ? (r ? 0x1p-24f + 0x1p-40f * (float)r : 1.0f)
                                  : c == 2 ? (r % 2 ? -3.0f : 3.0f) + 0x1p-30f * (float)r  /* cancellation */
                                           : (float)((double)(st >> 11) / 9007199254740992.0 * 2 - 1) * (c == 5 ? 1e-8f : 1.0f);
                }
            snprintf(shape, sizeof shape, "dev=%d k=%d", G, NC);
            tj_set_devices(ctx, G);
            tj_set_mesh(ctx, ms[mi].mesh);
            tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F32, shape, x));
            p = tj_jit(ctx, "round", round_fn, &k, in, NULL);
            if (!p || tj_run(p, in, out)) TJT_CHECK(0, "%s over %s: %s", op ? "pmax" : "psum", ms[mi].mesh, tj_error(ctx));
            else {
                float y[NC];
                int ok = 1;
                tj_array_read(tj_tree_array(out, "y"), TJ_F32, y);
                for (c = 0; c < NC; c++) {
                    double acc = x[c];
                    float want;
                    for (r = 1; r < G; r++) acc = op ? ((double)x[r * NC + c] > acc ? (double)x[r * NC + c] : acc) : acc + (double)x[r * NC + c];
                    want = (float)acc;
                    if (memcmp(&want, &y[c], sizeof want)) {
                        ok = 0;
                        fprintf(stderr, "  column %d: %a, want %a\n", c, (double)y[c], (double)want);
                    }
                }
                TJT_CHECK(ok, "%s of f32 over %s (%d devices): the sum in double rounded once, bit for bit", op ? "pmax" : "psum", ms[mi].axes, G);
            }
            tj_prog_free(p);
            tj_tree_free(in);
            tj_tree_free(out);
            tj_ctx_free(ctx);
        }
}

/* ==== 3. shard_map against automatic sharding: the Megatron MLP ========== */
static void mlp_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v h = tj_gelu(tj_dot(in[0], in[1], "embed"));          /* (batch, mlp/model) */
    (void)g; (void)u;
    out[0] = tj_psum(tj_dot(h, in[2], "mlp"), "model");        /* (batch, embed2)    */
}
static tj_v mlp_auto(tj_v x, tj_v w1, tj_v w2) { return tj_dot(tj_gelu(tj_dot(x, w1, "embed")), w2, "mlp"); }
static tj_v mlp_smap(tj_v x, tj_v w1, tj_v w2, int check) {
    const char *is[3] = {"batch:data", "mlp:model", "mlp:model"}, *os[1] = {"batch:data"};
    tj_v in[3], o = NULL;
    in[0] = x; in[1] = w1; in[2] = w2;
    tj_shard_map(mlp_body, NULL, 3, in, is, 1, &o, os, check);
    return o;
}
static void mlp_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int mode = *(int *)u; /* 0 auto, 1 shard_map checked, 2 unchecked */
    tj_v x = tj_tree_v(in, "x"), w1 = tj_tree_v(in, "w1"), w2 = tj_tree_v(in, "w2"), y = tj_tree_v(in, "y");
    tj_v o = mode ? mlp_smap(x, w1, w2, mode == 1) : mlp_auto(x, w1, w2), d = tj_sub(o, y), loss, w[3], gr[3];
    (void)g;
    loss = tj_mean(tj_mul(d, d), "batch embed2");
    w[0] = x; w[1] = w1; w[2] = w2;
    tj_grad(loss, 3, w, gr);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w1", gr[1]);
    tj_tree_set_v(out, "g_w2", gr[2]);
}
static void mlp_inputs(tj_ctx *ctx, tj_tree *in) {
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=8 embed=8", 1, -1, 1));
    tj_tree_set_array(in, "w1", tjt_rand(ctx, TJ_F32, "embed=8 mlp=16", 2, -0.5, 0.5));
    tj_tree_set_array(in, "w2", tjt_rand(ctx, TJ_F32, "mlp=16 embed2=8", 3, -0.5, 0.5));
    tj_tree_set_array(in, "y", tjt_rand(ctx, TJ_F32, "batch=8 embed2=8", 4, -1, 1));
}
static void test_megatron(void) {
    result ref, a, s1, s0;
    int auto_mode = 0, chk = 1, unchk = 2;
    tjt_current = "shard_map vs automatic sharding";
    if (!run(1, NULL, mlp_inputs, NULL, mlp_fn, &auto_mode, &ref) || !run(4, "data=2 model=2", mlp_inputs, "batch:data mlp:model", mlp_fn, &auto_mode, &a) ||
        !run(4, "data=2 model=2", mlp_inputs, NULL, mlp_fn, &chk, &s1) || !run(4, "data=2 model=2", mlp_inputs, NULL, mlp_fn, &unchk, &s0)) {
        TJT_CHECK(0, "a Megatron MLP program failed to run");
        return;
    }
    compare("automatic sharding vs one device", &ref, &a, 1e-5);
    compare("checked shard_map vs one device", &ref, &s1, 1e-5);
    compare("unchecked shard_map vs one device", &ref, &s0, 1e-5);
    compare("checked shard_map vs automatic sharding", &a, &s1, 1e-5);
    /* checked: a psum only where a value went from invariant to varying:
       x (invariant over model) met w1, and w1, w2 (invariant over data) met
       the batch; unchecked adds psum's own transpose and the division */
    TJT_CHECK(count_bwd(&s1, "psum", "model") == 1 && count_bwd(&s1, "psum", "data") == 2 && count_bwd(&s1, "psum", "") == 3,
              "checked: backward psums: 1 over model, 2 over data (got %d, %d of %d)", count_bwd(&s1, "psum", "model"), count_bwd(&s1, "psum", "data"),
              count_bwd(&s1, "psum", ""));
    TJT_CHECK(count_bwd(&s0, "psum", "model") == 2 && count_bwd(&s0, "psum", "data") == 2 && count_bwd(&s0, "psum", "") == 4,
              "unchecked: backward psums: 2 over model, 2 over data (got %d, %d of %d)", count_bwd(&s0, "psum", "model"), count_bwd(&s0, "psum", "data"),
              count_bwd(&s0, "psum", ""));
    {
        int i, pv = 0, dotrule = 0;
        for (i = 0; i < s1.ntr && i < 64; i++) {
            pv += !strcmp(s1.tr[i].kind, "pvary"); /* psum's transpose in the checked program */
            dotrule += !strcmp(s1.tr[i].kind, "psum") && strstr(s1.tr[i].rule, "transpose of the pvary that 'dot'") != NULL;
        }
        TJT_CHECK(dotrule == 3 && pv == 1 && s1.ntr == 4, "checked report: 3 psums explained by dot's pvary, 1 pvary (psum's transpose): got %d, %d of %d rows", dotrule,
                  pv, s1.ntr);
    }
    free_result(&ref);
    free_result(&a);
    free_result(&s1);
    free_result(&s0);
}

/* attention inside shard_map: queries split over heads and positions, keys
   and values over heads only (invariant over data: checked, the op makes
   them vary, and their gradients come back with a psum over data) */
static void attn_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_attention(in[0], in[1], in[2], "pos", "kpos", "hd", 0, 0);
}
static void attn_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int mode = *(int *)u; /* 0 auto, 1 shard_map checked, 2 unchecked */
    const char *is[3] = {"heads:model pos:data", "heads:model", "heads:model"}, *os[1] = {"heads:model pos:data"};
    tj_v x[3], o = NULL, gx[3];
    (void)g;
    x[0] = tj_tree_v(in, "q"), x[1] = tj_tree_v(in, "k"), x[2] = tj_tree_v(in, "v");
    if (mode) tj_shard_map(attn_body, NULL, 3, x, is, 1, &o, os, mode == 1);
    else o = tj_attention(x[0], x[1], x[2], "pos", "kpos", "hd", 0, 0);
    if (tj_grad(tj_sum(tj_mul(o, tj_tree_v(in, "w")), "batch heads pos hd"), 3, x, gx)) return;
    tj_tree_set_v(out, "o", tj_transpose(o, "batch heads pos hd"));
    tj_tree_set_v(out, "g_q", gx[0]);
    tj_tree_set_v(out, "g_k", gx[1]);
    tj_tree_set_v(out, "g_v", gx[2]);
}
static void attn_inputs(tj_ctx *ctx, tj_tree *in) {
    tj_tree_set_array(in, "q", tjt_rand(ctx, TJ_F64, "batch=2 heads=2 pos=6 hd=4", 31, -1, 1));
    tj_tree_set_array(in, "k", tjt_rand(ctx, TJ_F64, "batch=2 kpos=5 heads=2 hd=4", 32, -1, 1));
    tj_tree_set_array(in, "v", tjt_rand(ctx, TJ_F64, "batch=2 heads=2 kpos=5 hd=4", 33, -1, 1));
    tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F64, "batch=2 heads=2 pos=6 hd=4", 34, -1, 1));
}
static void test_attention(void) {
    result ref, s1, s0;
    int auto_mode = 0, chk = 1, unchk = 2;
    tjt_current = "attention in shard_map";
    if (!run(1, NULL, attn_inputs, NULL, attn_fn, &auto_mode, &ref) || !run(4, "data=2 model=2", attn_inputs, NULL, attn_fn, &chk, &s1) ||
        !run(4, "data=2 model=2", attn_inputs, NULL, attn_fn, &unchk, &s0)) {
        TJT_CHECK(0, "an attention program failed to run");
        return;
    }
    compare("attention: checked shard_map vs one device", &ref, &s1, 1e-12);
    compare("attention: unchecked shard_map vs one device", &ref, &s0, 1e-12);
    TJT_CHECK(count_bwd(&s1, "psum", "data") == 2, "checked: k's and v's gradients each need one psum over data, got %d", count_bwd(&s1, "psum", "data"));
    free_result(&ref);
    free_result(&s1);
    free_result(&s0);
}

/* ==== 4. nesting: shard_map inside an automatic scan, scan and remat
   inside shard_map ===================================================== */
typedef struct {
    int smap, check;
} nest_opts;
static void layer_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    const nest_opts *o = (const nest_opts *)u;
    tj_v w1 = tj_rename(x[0], "embed2", "mlp"), f;
    (void)g; (void)y;
    f = o->smap ? mlp_smap(c[0], w1, x[1], o->check) : mlp_auto(c[0], w1, x[1]);
    co[0] = tj_add(c[0], tj_rename(f, "embed2", "embed"));
}
static void nest_outer_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v h = tj_tree_v(in, "x"), xs[2], hf = NULL, loss, w[3], gr[3];
    tj_policy pol = tj_nothing_saveable();
    (void)g;
    xs[0] = tj_tree_v(in, "ws1");
    xs[1] = tj_tree_v(in, "ws2");
    tj_scan(layer_body, u, "layer", 1, &h, 2, xs, 0, &hf, NULL, &pol);
    loss = tj_mean(tj_mul(hf, hf), "batch embed");
    w[0] = h; w[1] = xs[0]; w[2] = xs[1];
    tj_grad(loss, 3, w, gr);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_ws1", gr[1]);
    tj_tree_set_v(out, "g_ws2", gr[2]);
}
static void nest_inputs(tj_ctx *ctx, tj_tree *in) {
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=8 embed=8", 5, -1, 1));
    tj_tree_set_array(in, "ws1", tjt_rand(ctx, TJ_F32, "layer=3 embed=8 embed2=16", 6, -0.4, 0.4));
    tj_tree_set_array(in, "ws2", tjt_rand(ctx, TJ_F32, "layer=3 mlp=16 embed2=8", 7, -0.4, 0.4));
}
/* a scan over "step" and a remat region inside the body */
static void inner_step(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)u;
    co[0] = tj_tanh(tj_add(c[0], x[0]));
    y[0] = tj_mul(co[0], co[0]);
}
static void inner_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_psum(tj_sum(tj_gelu(in[0]), "step feat"), "model");
}
static void inner_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_policy pol = tj_nothing_saveable();
    tj_v c0 = tj_mul(tj_sum(in[0], "step"), tj_fill(g, TJ_F32, "", 0.1)), cf = NULL, ys = NULL, r = NULL;
    (void)u;
    tj_scan(inner_step, NULL, "step", 1, &c0, 1, in, 1, &cf, &ys, &pol);
    tj_checkpoint(inner_region, NULL, 1, &ys, 1, &r, &pol);
    out[0] = tj_add(tj_psum(tj_sum(cf, "feat"), "model"), r); /* (batch), invariant over model */
}
static void nest_inner_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const nest_opts *o = (const nest_opts *)u;
    const char *is[1] = {"batch:data feat:model"}, *os[1] = {"batch:data"};
    tj_v x = tj_tree_v(in, "x"), r = NULL, loss, gx;
    tj_v xt = tj_transpose(x, "step batch feat");
    (void)g;
    if (o->smap) tj_shard_map(inner_body, NULL, 1, &xt, is, 1, &r, os, o->check);
    else {
        tj_v c0 = tj_muls(tj_sum(xt, "step"), 0.1), cf = NULL, ys = NULL;
        tj_scan(inner_step, NULL, "step", 1, &c0, 1, &xt, 1, &cf, &ys, NULL);
        r = tj_add(tj_sum(cf, "feat"), tj_sum(tj_gelu(ys), "step feat"));
    }
    loss = tj_sum(tj_mul(r, r), "batch");
    tj_grad(loss, 1, &x, &gx);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "gx", gx);
}
static void inner_inputs(tj_ctx *ctx, tj_tree *in) { tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=4 step=3 feat=4", 8, -1, 1)); }
static void test_nesting(void) {
    result ref, r;
    nest_opts plain = {0, 0}, on = {1, 1}, off = {1, 0};
    tjt_current = "nesting";
    if (run(1, NULL, nest_inputs, NULL, nest_outer_fn, &plain, &ref)) {
        if (run(4, "data=2 model=2", nest_inputs, "batch:data", nest_outer_fn, &on, &r)) compare("shard_map in a scan body with remat, checked", &ref, &r, 1e-5);
        free_result(&r);
        if (run(4, "data=2 model=2", nest_inputs, "batch:data", nest_outer_fn, &off, &r)) compare("shard_map in a scan body with remat, unchecked", &ref, &r, 1e-5);
        free_result(&r);
    } else
        TJT_CHECK(0, "the plain scan program failed");
    free_result(&ref);
    if (run(1, NULL, inner_inputs, NULL, nest_inner_fn, &plain, &ref)) {
        if (run(4, "data=2 model=2", inner_inputs, NULL, nest_inner_fn, &on, &r)) compare("scan and remat inside shard_map, checked", &ref, &r, 1e-5);
        free_result(&r);
        if (run(4, "data=2 model=2", inner_inputs, NULL, nest_inner_fn, &off, &r)) compare("scan and remat inside shard_map, unchecked", &ref, &r, 1e-5);
        free_result(&r);
    } else
        TJT_CHECK(0, "the plain inner program failed");
    free_result(&ref);
}

/* ==== 5. custom_vjp under scan and remat; custom ops outside shard_map ==== */
static void tanh_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    (void)g; (void)u;
    out[0] = tj_tanh(in[0]);
    res[0] = out[0];
}
static void tanh_bwd(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *u) {
    (void)g; (void)u;
    gin[0] = tj_mul(ct[0], tj_sub(tj_fill(g, TJ_F64, "", 1.0), tj_mul(res[0], res[0])));
}
static tj_v my_tanh(tj_v x, int custom) {
    tj_v y = NULL;
    if (!custom) return tj_tanh(x);
    tj_custom_vjp(tanh_fwd, tanh_bwd, NULL, 1, &x, 1, &y, 1);
    return y;
}
static void cv_step(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)y;
    co[0] = my_tanh(tj_dot(c[0], x[0], "embed"), *(int *)u);
    co[0] = tj_rename(co[0], "embed2", "embed");
}
static void cv_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g;
    out[0] = my_tanh(tj_mul(in[0], in[0]), *(int *)u);
}
static void cv_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v h = tj_tree_v(in, "x"), ws = tj_tree_v(in, "ws"), hf = NULL, r = NULL, loss, w[2], gr[2];
    tj_policy pol = tj_nothing_saveable();
    (void)g;
    tj_scan(cv_step, u, "layer", 1, &h, 1, &ws, 0, &hf, NULL, &pol);
    tj_checkpoint(cv_region, u, 1, &hf, 1, &r, &pol);
    loss = tj_sum(r, "batch embed");
    w[0] = h; w[1] = ws;
    tj_grad(loss, 2, w, gr);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_ws", gr[1]);
}
static void cv_inputs(tj_ctx *ctx, tj_tree *in) {
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "batch=3 embed=4", 9, -1, 1));
    tj_tree_set_array(in, "ws", tjt_rand(ctx, TJ_F64, "layer=2 embed=4 embed2=4", 10, -0.8, 0.8));
}
/* custom ops outside shard_map: the inputs are made whole first */
static void op_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), xs = tj_stop_gradient(x), t2 = NULL, rs[2] = {NULL, NULL}, loss, gx;
    (void)g; (void)u;
    tj_custom("twice", 1, &x, &t2);
    tj_custom("rowsum", 1, &xs, rs); /* no VJP rule: not differentiated */
    loss = tj_add(tj_sum(tj_mul(t2, x), "batch embed"), tj_sum(tj_mul(rs[0], rs[0]), "batch"));
    tj_grad(loss, 1, &x, &gx);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "gx", gx);
    tj_tree_set_v(out, "rowsum", rs[0]);
    tj_tree_set_v(out, "copy", rs[1]);
}
static void op_grad_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), t2 = NULL;
    (void)g; (void)u;
    tj_custom("twice", 1, &x, &t2);
    tj_tree_set_v(out, "loss", tj_sum(tj_mul(tj_mul(t2, x), x), "batch embed"));
}
static void op_inputs(tj_ctx *ctx, tj_tree *in) { tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F64, "batch=4 embed=6", 12, -1, 1)); }
static void test_custom(void) {
    result a, b;
    int plain = 0, custom = 1;
    tj_ctx *ctx;
    tj_tree *in;
    tjt_current = "custom_vjp and custom ops";
    if (run(1, NULL, cv_inputs, NULL, cv_fn, &plain, &a) && run(1, NULL, cv_inputs, NULL, cv_fn, &custom, &b))
        compare("custom_vjp tanh in a scan and a remat region vs tanh", &a, &b, 1e-13);
    else
        TJT_CHECK(0, "custom_vjp programs failed");
    free_result(&a);
    free_result(&b);
    ctx = tj_ctx_new();
    in = tj_tree_new(ctx);
    cv_inputs(ctx, in);
    TJT_GRADCHECK(ctx, "custom_vjp under scan and remat", cv_fn, &custom, in, "x ws");
    tj_tree_free(in);
    in = tj_tree_new(ctx);
    register_ops(ctx);
    op_inputs(ctx, in);
    TJT_GRADCHECK(ctx, "custom op with a VJP rule", op_grad_fn, NULL, in, "x");
    tj_tree_free(in);
    tj_ctx_free(ctx);
    /* sharded inputs are gathered: the same numbers on 4 devices as on 1 */
    if (run(1, NULL, op_inputs, NULL, op_fn, NULL, &a) && run(4, "data=2 model=2", op_inputs, "batch:data embed:model", op_fn, NULL, &b)) {
        compare("custom ops on sharded inputs vs one device", &a, &b, 1e-14);
        TJT_CHECK(b.ncol > 0, "the sharded inputs were gathered (%d collectives)", b.ncol);
    } else
        TJT_CHECK(0, "custom op programs failed");
    free_result(&a);
    free_result(&b);
}

/* ==== 6. errors ========================================================== */
static void norule_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    tj_custom("copy_norule", 1, in, out);
}
static void identity_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_tanh(in[0]);
}
static void carry_step(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)y; (void)u;
    co[0] = tj_add(c[0], x[0]);
}
static void carry_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v c0 = tj_fill(g, TJ_F32, "embed=8", 0.0), cf = NULL;
    (void)u;
    tj_scan(carry_step, NULL, "batch", 1, &c0, 1, in, 0, &cf, NULL, NULL); /* the carry starts invariant, the xs vary */
    out[0] = cf ? tj_psum(cf, "data") : NULL;
}
static void shrink_step(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)x; (void)y; (void)u;
    co[0] = tj_psum(c[0], "data"); /* the carry went in varying over data and comes back invariant */
}
static void shrink_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v cf = NULL;
    (void)g; (void)u;
    tj_scan(shrink_step, NULL, "it=2", 1, in, 0, NULL, 0, &cf, NULL, NULL);
    out[0] = cf;
}
static void misuse_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    int which = *(int *)u;
    (void)g;
    if (which == 0) out[0] = tj_psum(in[0], "pipeline");
    else if (which == 1) out[0] = tj_with_sharding_constraint(in[0], "batch:data");
    else if (which == 3) out[0] = tj_pvary(in[0], "data"); /* already varying over data */
    else out[0] = tj_all_to_all(in[0], "data", "embed", "embed");
}
typedef struct {
    int which;
    const char *in_spec, *out_spec;
    int check;
} err_case;
static void err_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const err_case *e = (const err_case *)u;
    tj_region_fn bodies[] = {norule_body, identity_body, carry_body, identity_body, misuse_body, misuse_body, misuse_body, NULL, identity_body, shrink_body, misuse_body};
    static int misuse[4] = {0, 1, 2, 3};
    const char *is[1], *os[1];
    tj_v x = tj_tree_v(in, "x"), y = NULL;
    is[0] = e->in_spec;
    os[0] = e->out_spec;
    if (e->which == 7) { /* a collective outside shard_map */
        tj_tree_set_v(out, "y", tj_psum(x, "data"));
        return;
    }
    (void)g;
    tj_shard_map(bodies[e->which], e->which >= 4 && e->which <= 6 ? &misuse[e->which - 4] : e->which == 10 ? &misuse[3] : NULL, 1, &x, is, 1, &y, os, e->check);
    tj_tree_set_v(out, "y", y);
}
static void test_errors(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx);
    err_case cases[] = {
        {0, "batch:data", "batch:data", 1}, {1, "batch:data", "", 1},          {2, "batch:data", "", 1},       {3, "batch:data pos:model", "batch:data", 1},
        {4, "batch:data", "batch:data", 1}, {5, "batch:data", "batch:data", 1}, {6, "batch:data", "batch:data", 1}, {7, "", "", 1},
        {8, "batch:data", "batch:data heads:model", 1}, {9, "batch:data", "batch:data", 1},
        {10, "batch:data", "batch:data", 1},
    };
    const char *want[][3] = {
        {"custom op 'copy_norule' has no replication rule", "tj_op_def.replication", "test_smap.c"},
        {"output 0", "varies over data", "replicates it there"},
        {"carry 0", "varies over data too", "pvary the initial value"},
        {"in_specs[0]", "names axis 'pos'", "does not have"},
        {"psum", "'pipeline' is not an axis of the mesh", "data+model"},
        {"with_sharding_constraint", "not inside tj_shard_map", "test_smap.c"},
        {"all_to_all", "must differ", "test_smap.c"},
        {"psum", "only inside tj_shard_map", "test_smap.c"},
        {"out_specs[0]", "names axis 'heads'", "does not have"},
        {"carry 0", "does not vary over data", "must not change"}, /* (JAX 0.10.2: "carry input and carry output must have equal types") */
        {"pvary", "already varies over data", "test_smap.c"},               /* (JAX 0.10.2: "Unsupported pcast from=varying, to='varying'"; it gave a psummed gradient) */
    };
    int i;
    tjt_current = "errors";
    tj_set_devices(ctx, 4);
    tj_set_mesh(ctx, "data=2 model=2");
    register_ops(ctx);
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=4 embed=8", 13, -1, 1));
    for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        tj_prog *p = tj_jit(ctx, "bad", err_fn, &cases[i], in, NULL);
        TJT_CHECK(p == NULL, "case %d is an error", i);
        TJT_ERROR_HAS(ctx, want[i][0], want[i][1], want[i][2]);
        tj_prog_free(p);
        tj_clear_error(ctx);
    }
    /* unchecked, the same two are allowed (as in JAX): no rule needed, no vary tracked */
    cases[0].check = cases[1].check = 0;
    for (i = 0; i < 2; i++) {
        tj_prog *p = tj_jit(ctx, "ok", err_fn, &cases[i], in, NULL);
        TJT_CHECK(p != NULL, "unchecked case %d compiles: %s", i, tj_error(ctx));
        tj_prog_free(p);
        tj_clear_error(ctx);
    }
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* Mesh axes listed out of mesh order ("model data" on "data=2 model=2"):
   JAX numbers the group, and lays out an axis split over the tuple, in the
   order given (the first axis most major). tinyjax used mesh order for
   both, so axis_index, all_gather, all_to_all and shard_map specs such as
   "batch:model+data" gave other numbers than JAX (the expected values
   below are JAX 0.10.2's); ppermute's pairs are mesh-order ranks in JAX too.
   Mode 3 is mode 1 with "none" inside the tuples ("model+none+data", which
   the spec's parser reads as "model+data"): the renumbering read such a
   tuple as no list and left it in mesh order. */
static void order_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    int mode = *(int *)u;
    tj_v x = in[0];
    if (mode == 0) out[0] = tj_all_to_all(x, "model data", "e", "batch");
    if (mode == 1 || mode == 3) out[0] = tj_add(tj_muls(x, 0), tj_cast(tj_axis_index(g, "model"), TJ_F64));
    if (mode == 2) {
        out[0] = tj_add(x, tj_muls(tj_cast(tj_axis_index(g, "model data"), TJ_F64), 100));
        out[1] = tj_split(tj_all_gather(x, "model data", "batch"), "batch", "one=1 b2=8");
    }
}
static void order_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    int mode = *(int *)u;
    tj_v x = tj_tree_v(in, "x"), o[2], gx;
    const char *is[4] = {"batch:data+model", "batch:model+data", "batch:data+model", "batch:model+none+data"};
    const char *os[4][2] = {{"e:data+model", ""}, {"batch:model+data", ""}, {"batch:data+model", "one:data+model"}, {"batch:none+model+data", ""}};
    (void)g;
    if (tj_shard_map(order_body, u, 1, &x, &is[mode], mode == 2 ? 2 : 1, o, os[mode], mode != 2)) return;
    tj_tree_set_v(out, "o", o[0]);
    if (mode == 2) tj_tree_set_v(out, "g", o[1]);
    if (mode == 0 && !tj_grad(tj_sum_all(tj_mul(o[0], tj_tree_v(in, "w"))), 1, &x, &gx)) tj_tree_set_v(out, "gx", gx);
}
static void test_axis_order(void) {
    static const int perm[4] = {0, 2, 1, 3}; /* rank in the order (model, data) <-> mesh-order rank, on 2x2 */
    static const double want1[8] = {0, 0, 0, 0, 1, 1, 1, 1}, want2[8] = {0, 1, 202, 203, 104, 105, 306, 307}, want3[8] = {0, 1, 4, 5, 2, 3, 6, 7};
    int mode, i, j;
    tjt_current = "mesh axes out of mesh order";
    for (mode = 0; mode < 4; mode++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        double x[16], w[16], o[32], gx[16];
        tj_prog *p;
        for (i = 0; i < 16; i++) x[i] = mode == 0 ? 10 * (i / 4) + i % 4 : i, w[i] = 100 * (i / 4) + i % 4;
        tj_set_devices(ctx, 4);
        tj_set_mesh(ctx, "data=2 model=2");
        tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F64, mode == 0 ? "batch=4 e=4" : "batch=8", x));
        tj_tree_set_array(in, "w", tj_array_new(ctx, TJ_F64, "batch=4 e=4", w));
        p = tj_jit(ctx, "order", order_fn, &mode, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "mode %d runs: %s", mode, tj_error(ctx));
        if (p && tj_status_of(ctx) == TJ_OK) {
            tj_array_read(tj_tree_array(out, "o"), TJ_F64, o);
            if (mode == 0) {
                tj_array_read(tj_tree_array(out, "gx"), TJ_F64, gx);
                for (i = 0; i < 4; i++)
                    for (j = 0; j < 4; j++) {
                        TJT_CHECK(o[i * 4 + j] == 10 * perm[i] + perm[j], "all_to_all over \"model data\": out[%d][%d] = %g, JAX %d", i, j, o[i * 4 + j], 10 * perm[i] + perm[j]);
                        TJT_CHECK(gx[i * 4 + j] == 100 * perm[i] + perm[j], "its gradient [%d][%d] = %g, want %d", i, j, gx[i * 4 + j], 100 * perm[i] + perm[j]);
                    }
            }
            for (i = 0; (mode == 1 || mode == 3) && i < 8; i++)
                TJT_CHECK(o[i] == want1[i], "in/out_spec %s, axis_index(model): [%d] = %g, JAX %g", mode == 1 ? "batch:model+data" : "batch:model+none+data", i, o[i], want1[i]);
            for (i = 0; mode == 2 && i < 8; i++) TJT_CHECK(o[i] == want2[i], "axis_index(\"model data\"): [%d] = %g, JAX %g", i, o[i], want2[i]);
            if (mode == 2) {
                tj_array_read(tj_tree_array(out, "g"), TJ_F64, o);
                for (j = 0; j < 4; j++)
                    for (i = 0; i < 8; i++) TJT_CHECK(o[j * 8 + i] == want3[i], "all_gather over \"model data\", device %d: [%d] = %g, JAX %g", j, i, o[j * 8 + i], want3[i]);
            }
        }
        tj_clear_error(ctx);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(ctx);
    }
}

/* The same renumbering where x has axes named as the helper axes of the
   renumbering ("_mb", "_mo0": the split failed, "is already an axis"), and
   with mesh axis names of over 64 characters (a spec tuple longer than 127
   characters was cut short and silently left in mesh order) */
typedef struct { const char *ord, *spec; } order_names_cfg;
static void order_names_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const order_names_cfg *c = (const order_names_cfg *)u;
    out[0] = tj_all_gather(in[0], c->ord, "batch");
    out[1] = tj_add(in[0], tj_muls(tj_cast(tj_axis_index(g, c->ord), TJ_F64), 1000));
}
static void order_names_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const order_names_cfg *c = (const order_names_cfg *)u;
    tj_v x = tj_tree_v(in, "x"), o[2];
    const char *is[1], *os[2];
    char spec[300];
    (void)g;
    snprintf(spec, sizeof spec, "batch:%s", c->spec);
    is[0] = spec, os[0] = "", os[1] = spec;
    if (tj_shard_map(order_names_body, u, 1, &x, is, 2, o, os, 0)) return;
    tj_tree_set_v(out, "g", o[0]);
    tj_tree_set_v(out, "o", o[1]);
}
static void test_axis_order_names(void) {
    static const char *xn[3] = {"_mb", "_mo0", "_mo1"};
    char la[80], lb[80], mesh[200], ord[200], spec[200];
    int t, i;
    tjt_current = "mesh axes out of mesh order: odd names";
    memset(la, 'a', 70), la[70] = 0;
    memset(lb, 'b', 70), lb[70] = 0;
    for (t = 0; t < 4; t++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        double x[16], o[16];
        char shape[64];
        order_names_cfg c;
        tj_prog *p;
        for (i = 0; i < 16; i++) x[i] = i;
        if (t < 3) snprintf(mesh, sizeof mesh, "data=2 model=2"), snprintf(ord, sizeof ord, "model data"), snprintf(spec, sizeof spec, "model+data");
        else snprintf(mesh, sizeof mesh, "%s=2 %s=2", la, lb), snprintf(ord, sizeof ord, "%s %s", lb, la), snprintf(spec, sizeof spec, "%s+%s", lb, la);
        snprintf(shape, sizeof shape, "batch=8 %s=2", t < 3 ? xn[t] : "e");
        c.ord = ord, c.spec = spec;
        tj_set_devices(ctx, 4);
        tj_set_mesh(ctx, mesh);
        tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F64, shape, x));
        p = tj_jit(ctx, "order_names", order_names_fn, &c, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "x of %s, spec %.20s..: runs: %s", shape, spec, tj_error(ctx));
        if (p && tj_status_of(ctx) == TJ_OK) {
            tj_array_read(tj_tree_array(out, "g"), TJ_F64, o);
            for (i = 0; i < 16; i++) TJT_CHECK(o[i] == x[i], "x of %s: all_gather in the spec's order: [%d] = %g, want %g", shape, i, o[i], x[i]);
            tj_array_read(tj_tree_array(out, "o"), TJ_F64, o);
            for (i = 0; i < 16; i++) TJT_CHECK(o[i] == x[i] + 1000 * (i / 4), "x of %s: axis_index in the spec's order: [%d] = %g, want %g", shape, i, o[i], x[i] + 1000 * (i / 4));
        }
        tj_clear_error(ctx);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(ctx);
    }
}

/* pmax over a group where a device other than rank 0 holds a NaN: NaN, as
   jnp.max gives (the rank-ordered max kept the other ranks' maximum: a NaN
   counted only on rank 0; jax_diff seed 124057) */
static void pmax_nan_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_pmax(in[0], "model");
}
static void pmax_nan_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), y;
    const char *is[1] = {"n:model"}, *os[1] = {""};
    (void)g; (void)u;
    if (!tj_shard_map(pmax_nan_body, NULL, 1, &x, is, 1, &y, os, 1)) tj_tree_set_v(out, "y", y);
}
static void test_pmax_nan(void) {
    tj_dtype dts[3] = {TJ_F32, TJ_BF16, TJ_F64};
    int d, at;
    tjt_current = "pmax with a NaN";
    for (d = 0; d < 3; d++)
        for (at = 0; at < 4; at++) {
            tj_ctx *ctx = tj_ctx_new();
            tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
            double x[8] = {1, 3, 2, -1, 0.5, 4, 7, -2}, y[2] = {0, 0};
            tj_prog *p;
            x[2 * at] = NAN; /* device `at` of the model axis holds a NaN in column 0 */
            tj_set_devices(ctx, 4);
            tj_set_mesh(ctx, "model=4");
            {
                tj_array *a = tj_array_new(ctx, TJ_F64, "n=4 c=2", x);
                tj_tree_set_array(in, "x", a);
                if (dts[d] != TJ_F64) { /* (as the dtype) */
                    void *h = malloc(64);
                    int i;
                    for (i = 0; i < 8; i++) tjt_st(h, dts[d], i, x[i]);
                    tj_tree_set_array(in, "x", tj_array_new(ctx, dts[d], "n=4 c=2", h));
                    free(h);
                }
            }
            p = tj_jit(ctx, "pmax_nan", pmax_nan_fn, NULL, in, NULL);
            TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "runs: %s", tj_error(ctx));
            if (p && tj_status_of(ctx) == TJ_OK) {
                tj_array_read(tj_tree_array(out, "y"), TJ_F64, y);
                TJT_CHECK(y[0] != y[0], "%s, NaN on model rank %d: pmax is %g, want NaN", tj_dtype_name(dts[d]), at, y[0]);
                TJT_CHECK(y[1] == 4, "%s: the other column's pmax is %g, want 4", tj_dtype_name(dts[d]), y[1]);
            }
            tj_clear_error(ctx);
            tj_prog_free(p);
            tj_tree_free(in);
            tj_tree_free(out);
            tj_ctx_free(ctx);
        }
}

/* psum and pmax of i32 values wrap as XLA's s32 adds (JAX: lax.psum of
   int32 in shard_map); the transport saturated through a double: 4 x 2^30
   gave INT32_MAX, not 0. psum_scatter too. */
static int i32_scatter = 0;
static void psum_i32_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = i32_scatter ? tj_psum_scatter(in[0], "model", "c") : tj_psum(in[0], "model");
    out[1] = tj_pmax(in[0], "model");
}
static void psum_i32_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), y[2];
    const char *is[1] = {"n:model"}, *os[2] = {"c:model", ""};
    (void)g; (void)u;
    if (!i32_scatter) os[0] = "";
    if (!tj_shard_map(psum_i32_body, NULL, 1, &x, is, 2, y, os, 1)) {
        tj_tree_set_v(out, "s", y[0]);
        tj_tree_set_v(out, "m", y[1]);
    }
}
static void test_psum_i32(void) {
    int32_t x[16] = {1 << 30, INT32_MAX, -5, 7, 1 << 30, 1, 3, -7, 1 << 30, 0, INT32_MIN, 9, 1 << 30, 0, -1, 11};
    int sc;
    tjt_current = "psum of i32 wraps";
    for (sc = 0; sc < 2; sc++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
        int32_t s[4] = {0}, m[4] = {0};
        tj_prog *p;
        int c, r;
        i32_scatter = sc;
        tj_set_devices(ctx, 4);
        tj_set_mesh(ctx, "model=4");
        tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_I32, "n=4 c=4", x));
        p = tj_jit(ctx, "psum_i32", psum_i32_fn, NULL, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "runs: %s", tj_error(ctx));
        if (p && tj_status_of(ctx) == TJ_OK) {
            tj_array_read(tj_tree_array(out, "s"), TJ_I32, s);
            tj_array_read(tj_tree_array(out, "m"), TJ_I32, m);
            for (c = 0; c < 4; c++) {
                uint32_t want = 0;
                int32_t mx = INT32_MIN;
                for (r = 0; r < 4; r++) {
                    want += (uint32_t)x[r * 4 + c];
                    mx = x[r * 4 + c] > mx ? x[r * 4 + c] : mx;
                }
                TJT_CHECK((uint32_t)s[c] == want, "%s column %d: %d, want %d (modulo 2^32)", sc ? "psum_scatter" : "psum", c, s[c], (int32_t)want);
                TJT_CHECK(m[c] == mx, "pmax column %d: %d, want %d", c, m[c], mx);
            }
        }
        tj_clear_error(ctx);
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(ctx);
    }
    i32_scatter = 0;
}

/* Programs whose out_specs and vary sets meet at the edge, against the
   numbers JAX 0.10.2 gives (jax.shard_map on a 2x2 CPU mesh, x = 0, 0.1,
   .., 1.5 as f32[4,4], loss = sum(y * arange(y.size))):
   (a) an invariant value under an out_spec that splits it (in_specs P(),
       out_specs P('data'), y = 2x): each device's copy is its block, so
       the gradient sums both blocks' cotangents, checked or not
       (g[0..3] = 32 36 40 44; checked, the gradient was one block's,
       32 34 36 38);
   (b) unchecked, a value that differs across devices under a replicated
       out_spec: JAX's array holds the first device's copy (y = 2x of the
       first data block), as tj_array_read now reads it (it read the last). */
static void edge_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_muls(in[0], 2);
}
typedef struct { const char *in, *out; int check; } edge_cfg;
static void edge_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const edge_cfg *e = (const edge_cfg *)u;
    tj_v x = tj_tree_v(in, "x"), y = NULL, gx = NULL, w;
    char sh[64];
    if (tj_shard_map(edge_body, NULL, 1, &x, &e->in, 1, &y, &e->out, e->check)) return;
    snprintf(sh, sizeof sh, "r=%lld c=%lld", (long long)tj_v_dim(y, "r"), (long long)tj_v_dim(y, "c"));
    w = tj_add(tj_muls(tj_arange(g, TJ_F32, sh, "r"), (double)tj_v_dim(y, "c")), tj_arange(g, TJ_F32, sh, "c"));
    tj_grad(tj_sum_all(tj_mul(y, w)), 1, &x, &gx);
    tj_tree_set_v(out, "y", y);
    tj_tree_set_v(out, "g", gx);
}
static void test_out_spec_edges(void) {
    tj_ctx *ctx = tj_ctx_new();
    float xb[16], yb[32], gb[16];
    int k, chk;
    tjt_current = "out_specs against JAX";
    for (k = 0; k < 16; k++) xb[k] = (float)k / 10.0f;
    tj_set_devices(ctx, 4);
    tj_set_mesh(ctx, "data=2 model=2");
    for (chk = 1; chk >= 0; chk--) {
        edge_cfg e[2] = {{"", "r:data", 0}, {"r:data", "", 0}};
        int t;
        for (t = 0; t < 2; t++) {
            tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
            tj_prog *p;
            e[t].check = chk;
            tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F32, "r=4 c=4", xb));
            p = tj_jit(ctx, "edge", edge_fn, &e[t], in, NULL);
            if (t == 1 && chk) { /* JAX refuses it too */
                TJT_CHECK(p == NULL, "a varying value under a replicated out_spec was accepted with checking on");
                tj_clear_error(ctx);
            } else if (p && tj_run(p, in, out) == TJ_OK) {
                tj_array_read(tj_tree_array(out, "y"), TJ_F32, yb);
                tj_array_read(tj_tree_array(out, "g"), TJ_F32, gb);
                for (k = 0; k < 16; k++) {
                    double want_g = t == 0 ? 2.0 * (k + (k + 16)) : k < 8 ? k : 0, want_y = 2.0 * xb[k];
                    if (t == 1 && k >= 8) break;
                    TJT_CHECK(fabs(gb[k] - want_g) < 1e-4, "(%c) check %d: g[%d] = %g, JAX gives %g", 'a' + t, chk, k, gb[k], want_g);
                    TJT_CHECK(fabs(yb[k] - want_y) < 1e-5, "(%c) check %d: y[%d] = %g, JAX gives %g", 'a' + t, chk, k, yb[k], want_y);
                }
            } else {
                TJT_CHECK(0, "(%c) check %d: %s", 'a' + t, chk, tj_error(ctx));
                tj_clear_error(ctx);
            }
            tj_prog_free(p);
            tj_tree_free(in);
            tj_tree_free(out);
        }
    }
    tj_ctx_free(ctx);
}

int main(void) {
    test_scenario();
    test_collectives();
    test_rounding();
    test_megatron();
    test_attention();
    test_nesting();
    test_custom();
    test_errors();
    test_axis_order();
    test_axis_order_names();
    test_pmax_nan();
    test_psum_i32();
    test_out_spec_edges();
    return tjt_finish();
}
