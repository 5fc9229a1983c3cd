/* Collective matmul (tj_set_collective_matmul): on simulated devices a dot
   of an all_gather becomes all_gather_dot and a reduce_scatter of a dot
   becomes dot_scatter. Each program below puts the collective in another
   place of the dot (the gathered operand a or b, along rows, k or
   columns; the scattered result along rows or columns; transposed
   layouts, batch axes, scan bodies, odd blocks, products large enough for
   the packed matmul; in shard_map, explicit collectives over one or two
   mesh axes of 2, 4 and 8 devices, and places the rewrite must leave
   alone), and is compared, in f32 and bf16, on its meshes, with the same
   program on one device and with the rewrite off: the values, the
   collectives it reports (the same list, with in_dot set) and the memory
   plan (never larger). */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"

typedef struct {
    const char *name;
    const char *x, *w;     /* shapes */
    const char *spec;      /* tj_filter_shard of the inputs */
    const char *contract;  /* the dot's axes */
    int w_first;           /* dot(w, x) instead of dot(x, w) */
    const char *x_rules;   /* constraint on x before the dot, or NULL */
    int scan;              /* w has a leading layer axis: a scan over it (2: that
                              saves nothing, so the backward pass gathers again) */
    int meshes;            /* which of meshes[] (M2 .. M8, bits) it runs on */
    /* shard_map (NULL sx: automatic sharding): in_specs of x and w, the
       out_spec, and the explicit collective in the body: `op` 'w' or 'x'
       all_gathers that operand, 'b' both, 's' psum_scatters the product,
       along caxis over cmesh; psum: mesh axes the product is then summed
       over, or NULL. fires: the body's dot takes the collective in (0:
       it must not, and only the gradient's may) */
    const char *sx, *sw, *so;
    char op;
    const char *cmesh, *caxis, *psum;
    int extra;             /* the gathered w is also read by a non-dot */
    int fires;
    /* op 'g': x gathered as by 'x', and the product then psum_scattered
       along saxis over smesh; op 'h': x gathered as by 'x', w along saxis
       over smesh. The dot can take one of the two collectives, the one
       that moves more bytes: want 'a' (the gather) or 's' (the scatter);
       'x' or 'w' (which operand's gather) */
    const char *smesh, *saxis;
    char want;
} cm_case;

enum { M2 = 1, M4 = 2, M42 = 4, M8 = 8, M24 = 16, M22 = 32 };
static const struct { int ndev; const char *mesh; } meshes[] = {{2, "data=2"},  {4, "data=4"},        {8, "data=4 model=2"},
                                                                {8, "data=8"}, {8, "data=2 model=4"}, {4, "data=2 model=2"}};
#define NMESH ((int)(sizeof meshes / sizeof meshes[0]))
#define AUTO(name, x, w, spec, contract, w_first, x_rules, scan, m) {name, x, w, spec, contract, w_first, x_rules, scan, m, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, 1, NULL, NULL, 0}
#define SMAP(name, x, w, contract, m, sx, sw, so, op, cmesh, caxis, psum, extra, fires) \
    {name, x, w, NULL, contract, 0, NULL, 0, m, sx, sw, so, op, cmesh, caxis, psum, extra, fires, NULL, NULL, 0}
#define SMAP2(name, x, w, contract, m, sx, sw, so, cmesh, caxis, smesh, saxis, want) \
    {name, x, w, NULL, contract, 0, NULL, 0, m, sx, sw, so, 'g', cmesh, caxis, NULL, 0, 1, smesh, saxis, want}
#define SMAP3(name, x, w, contract, m, sx, sw, so, cmesh, caxis, smesh, saxis, want) \
    {name, x, w, NULL, contract, 0, NULL, 0, m, sx, sw, so, 'h', cmesh, caxis, NULL, 0, 1, smesh, saxis, want}

static const cm_case cases[] = {
    AUTO("fsdp: b gathered along k, its gradient scattered along rows", "batch=8 embed=16", "embed=16 mlp=12", "batch:data embed:data", "embed", 0, NULL, 0, M4 | M42),
    AUTO("fsdp, operands swapped: a gathered along k", "batch=8 embed=16", "embed=16 mlp=12", "batch:data embed:data", "embed", 1, NULL, 0, M4 | M42),
    AUTO("b gathered along columns, its gradient scattered along columns", "batch=8 embed=16", "embed=16 mlp=12", "batch:data mlp:data", "embed", 0, NULL, 0, M4 | M42),
    AUTO("a gathered along rows (x made whole first)", "batch=8 embed=16", "embed=16 mlp=12", "batch:data", "embed", 0, "", 0, M4 | M42),
    AUTO("transposed b (mlp, embed), gathered along k", "batch=8 embed=16", "mlp=12 embed=16", "batch:data embed:data", "embed", 0, NULL, 0, M4 | M42),
    AUTO("a batch axis (heads)", "heads=2 batch=8 embed=16", "heads=2 embed=16 mlp=4", "batch:data embed:data", "embed", 0, NULL, 0, M4 | M42),
    AUTO("two contracted axes, the outer one split", "batch=8 heads=4 hd=4", "heads=4 hd=4 embed=8", "batch:data heads:data", "heads hd", 0, NULL, 0, M4 | M42),
    AUTO("in a scan body, the layers' weights split along k", "batch=8 embed=16", "layer=3 embed=16 embed2=16", "batch:data embed:data", "embed", 0, NULL, 1, M4 | M42),
    AUTO("in a scan body that saves nothing (the backward pass gathers again)", "batch=8 embed=16", "layer=3 embed=16 embed2=16", "batch:data embed:data", "embed", 0, NULL, 2, M2 | M4 | M8),
    /* 2 and 8 devices, odd blocks (3, 5, 7 per device), size-1 and several axes in a group */
    AUTO("fsdp, 3 of k per device on 8", "batch=8 embed=24", "embed=24 mlp=5", "batch:data embed:data", "embed", 0, NULL, 0, M2 | M8),
    AUTO("b gathered along columns, 7 per device", "batch=8 embed=6", "embed=6 mlp=28", "batch:data mlp:data", "embed", 0, NULL, 0, M2 | M4),
    AUTO("a gathered along rows, 5 per device", "batch=20 embed=6", "embed=6 mlp=4", "batch:data", "embed", 0, "", 0, M2 | M4),
    AUTO("transposed a (embed, mlp) gathered along rows", "batch=8 embed=12", "embed=12 mlp=20", "batch:data mlp:data", "embed", 1, NULL, 0, M2 | M4),
    AUTO("columns (one=1, mlp): a size-1 axis before the split one", "batch=8 embed=16", "embed=16 one=1 mlp=12", "batch:data mlp:data", "embed", 0, NULL, 0, M4),
    AUTO("two column axes, the outer one split", "batch=8 embed=8", "embed=8 heads=4 hd=6", "batch:data heads:data", "embed", 0, NULL, 0, M2 | M4),
    /* the packed matmul (products past TJ__SGEMM_SMALL) on odd k: 37 per device */
    AUTO("fsdp, large enough to pack, 37 of k per device", "batch=256 embed=148", "embed=148 mlp=160", "batch:data embed:data", "embed", 0, NULL, 0, M4),
    AUTO("transposed b gathered along k, packed, 37 per device", "batch=256 embed=148", "mlp=160 embed=148", "batch:data embed:data", "embed", 0, NULL, 0, M4),
    /* the column split with two blocks of columns per member and two of k,
       with 256 rows per rank, and with a batch axis */
    AUTO("fsdp, packed, past one block of columns and of k", "batch=64 embed=600", "embed=600 mlp=2100", "batch:data embed:data", "embed", 0, NULL, 0, M4),
    AUTO("fsdp, packed, 256 rows per rank", "batch=1024 embed=160", "embed=160 mlp=96", "batch:data embed:data", "embed", 0, NULL, 0, M4),
    AUTO("fsdp, packed, past one block of columns, a batch axis", "heads=2 batch=32 embed=600", "heads=2 embed=600 mlp=1100", "batch:data embed:data", "embed", 0,
         NULL, 0, M4 | M8),
    /* shard_map: the collective exactly where it is written */
    SMAP("shard_map: w gathered along k over data model (3 per device)", "batch=8 embed=24", "embed=24 mlp=12", "embed", M42 | M24, "batch:data", "embed:data+model",
         "batch:data", 'w', "data model", "embed", NULL, 0, 1),
    SMAP("shard_map: the gathered w also read by a non-dot", "batch=8 embed=24", "embed=24 mlp=12", "embed", M42 | M22, "batch:data", "embed:data+model",
         "batch:data", 'w', "data model", "embed", NULL, 1, 1),
    SMAP("shard_map: only model gathered of an axis split data+model", "batch=8 embed=16", "embed=16 mlp=12", "embed", M42 | M24 | M22, "embed:data",
         "embed:data+model", "", 'w', "model", "embed", "data", 0, 1),
    SMAP("shard_map: product scattered along columns over data model", "batch=8 embed=16", "embed=16 mlp=16", "embed", M42 | M24, "embed:data+model",
         "embed:data+model", "mlp:data+model", 's', "data model", "mlp", NULL, 0, 1),
    SMAP("shard_map: product scattered along rows over model, summed over data", "batch=8 embed=16", "embed=16 mlp=12", "embed", M42 | M22,
         "embed:data+model", "embed:data+model", "batch:model", 's', "model", "batch", "data", 0, 1),
    SMAP("shard_map: both operands gathered along k", "batch=8 embed=16", "embed=16 mlp=12", "embed", M2 | M4 | M8, "embed:data", "embed:data", "", 'b',
         "data", "embed", NULL, 0, 1),
    SMAP("shard_map: gathered along the inner column axis (not eligible)", "batch=8 embed=8", "embed=8 heads=2 hd=8", "embed", M2 | M4, "",
         "hd:data", "", 'w', "data", "hd", NULL, 0, 0),
    SMAP("shard_map: gathered along hd after heads split to 1", "batch=8 embed=8", "embed=8 heads=2 hd=8", "embed", M42 | M22, "batch:data",
         "heads:model hd:data", "batch:data heads:model", 'w', "data", "hd", NULL, 0, 1),
    SMAP("shard_map: gathered along a batch axis (not eligible)", "heads=2 batch=8 embed=8", "heads=2 embed=8 mlp=4", "embed", M2, "", "heads:data", "",
         'w', "data", "heads", NULL, 0, 0),
    /* sequence parallelism's weight gradient: the activation gathered along
       pos over model, the product (the gradient) scattered over data */
    SMAP2("shard_map: x gathered along k and the product scattered, the product larger", "batch=2 pos=8 embed=32", "batch=2 pos=8 mlp=64",
          "batch pos", M22 | M24, "batch:data pos:model", "batch:data mlp:model", "embed:data mlp:model", "model", "pos", "data", "embed", 's'),
    SMAP2("shard_map: x gathered along k and the product scattered, x larger", "batch=2 pos=32 embed=8", "batch=2 pos=32 mlp=8", "batch pos",
          M22 | M24, "batch:data pos:model", "batch:data mlp:model", "embed:data mlp:model", "model", "pos", "data", "embed", 'a'),
    /* and its forward: the activation gathered along pos over model, the
       weight along embed over data */
    SMAP3("shard_map: x gathered along rows, w along k, w larger", "batch=2 pos=8 embed=8", "embed=8 mlp=64", "embed", M22 | M24, "batch:data pos:model",
          "embed:data mlp:model", "batch:data mlp:model", "model", "pos", "data", "embed", 'w'),
    SMAP3("shard_map: x gathered along rows, w along k, x larger", "batch=2 pos=64 embed=8", "embed=8 mlp=8", "embed", M22 | M24, "batch:data pos:model",
          "embed:data mlp:model", "batch:data mlp:model", "model", "pos", "data", "embed", 'x'),
    /* groups of other sizes: a collective over 4 devices moves 3/4 of its
       buffer, over 2 a half, so the smaller buffer can move more bytes
       (the gather over model=4: 96 of 128 elements; the scatter, or the
       gather of w, over data=2: 80 of 160) */
    SMAP2("shard_map: x gathered over 4, the product scattered over 2, the product larger but moving less", "batch=2 pos=16 embed=8",
          "batch=2 pos=16 mlp=80", "batch pos", M24, "batch:data pos:model", "batch:data mlp:model", "embed:data mlp:model", "model", "pos", "data", "embed",
          'a'),
    SMAP3("shard_map: x gathered over 4, w over 2, w larger but moving less", "batch=2 pos=16 embed=8", "embed=8 mlp=80", "embed", M24,
          "batch:data pos:model", "embed:data mlp:model", "batch:data mlp:model", "model", "pos", "data", "embed", 'x'),
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static const cm_case *cur;
static int cur_mesh; /* the program runs on a mesh (shard_map cases need one) */
static tj_v cm_dot(tj_v x, tj_v w) {
    tj_v y;
    if (cur->x_rules) x = tj_shard_by_rules(x, cur->x_rules);
    y = cur->w_first ? tj_dot(w, x, cur->contract) : tj_dot(x, w, cur->contract);
    if (cur->extra) y = tj_mul(y, tj_sum(tj_tanh(w), cur->contract));
    return y;
}
static void cm_body(tj_graph *g, const tj_v *carry, const tj_v *xs, tj_v *carry_out, tj_v *y, void *u) {
    (void)g; (void)y; (void)u;
    carry_out[0] = tj_rename(tj_tanh(cm_dot(carry[0], xs[0])), "embed2", "embed");
}
/* the shard_map body: the dot with the case's explicit collectives */
static void cm_smap_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v x = in[0], w = in[1], y;
    (void)g; (void)u;
    if (cur->op == 'x' || cur->op == 'b' || cur->op == 'g' || cur->op == 'h') x = tj_all_gather(x, cur->cmesh, cur->caxis);
    if (cur->op == 'h') w = tj_all_gather(w, cur->smesh, cur->saxis);
    if (cur->op == 'w' || cur->op == 'b') w = tj_all_gather(w, cur->cmesh, cur->caxis);
    y = cm_dot(x, w);
    if (cur->op == 's') y = tj_psum_scatter(y, cur->cmesh, cur->caxis);
    if (cur->op == 'g') y = tj_psum_scatter(y, cur->smesh, cur->saxis);
    if (cur->psum) y = tj_psum(y, cur->psum);
    out[0] = y;
}
static void cm_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), y = NULL, loss, wrt[2], gr[2];
    char axes[128];
    int i, k;
    (void)g; (void)u;
    if (cur->scan) {
        tj_policy none = tj_nothing_saveable();
        tj_scan(cm_body, NULL, "layer", 1, &x, 1, &w, 0, &y, NULL, cur->scan == 2 ? &none : NULL);
    } else if (cur->sx && cur_mesh) {
        const char *is[2], *os[1];
        tj_v xw[2];
        is[0] = cur->sx, is[1] = cur->sw, os[0] = cur->so;
        xw[0] = x, xw[1] = w;
        tj_shard_map(cm_smap_body, NULL, 2, xw, is, 1, &y, os, 0); /* unchecked: all_gather results vary */
    } else y = cm_dot(x, w);
    y = tj_cast(y, TJ_F32);
    for (i = 0, k = 0, axes[0] = 0; i < tj_v_rank(y); i++) k += snprintf(axes + k, sizeof axes - (size_t)k, "%s%s", i ? " " : "", tj_v_axis(y, i));
    loss = tj_sum(tj_mul(y, tj_tanh(y)), axes); /* a cotangent that varies */
    wrt[0] = x;
    wrt[1] = w;
    tj_grad(loss, 2, wrt, gr);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "y", y);
    tj_tree_set_v(out, "gx", gr[0]);
    tj_tree_set_v(out, "gw", gr[1]);
}

typedef struct {
    tjt_outs o;
    tj_collective col[64];
    int ncol, in_dot, fwd_in_dot; /* rows run inside a dot (fwd: outside the gradient) */
    int fwd_ag_in_dot, fwd_rs_in_dot; /* of those forward rows: gathers, scatters */
    char fwd_in_dot_axes[64];         /* and the mesh axes of the last one */
    int64_t peak, pack; /* the memory plan: peak, and the matmul pack buffers in it */
    int has_ag_dot, has_dot_rs; /* in the program text */
    int backend;                /* the context has one (TJ_BACKEND=devsim): no rewrite */
} cm_result;

static int cm_threads; /* kernel threads per device (0: the default, cores / devices) */
static int cm_run(const cm_case *c, int ndev, const char *mesh, tj_dtype dt, int on, cm_result *r) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p = NULL;
    int ok = 1, i;
    memset(r, 0, sizeof *r);
    cur = c;
    cur_mesh = mesh != NULL;
    tj_set_devices(ctx, ndev);
    if (mesh) tj_set_mesh(ctx, mesh);
    if (cm_threads) tj_set_threads(ctx, cm_threads * ndev);
    tj_set_collective_matmul(ctx, on);
    r->backend = tjt_ctx_backend(ctx) != NULL;
    TJT_CHECK(tj_get_collective_matmul(ctx) == (on && ndev > 1 && !r->backend && !getenv("TJ_NO_COLL_MATMUL")),
              "tj_get_collective_matmul says %d (on %d, %d devices, backend %d)", tj_get_collective_matmul(ctx), on, ndev, r->backend);
    tj_tree_set_array(in, "x", tjt_rand(ctx, dt, c->x, 1, -1, 1));
    tj_tree_set_array(in, "w", tjt_rand(ctx, dt, c->w, 2, -0.4, 0.4));
    if (mesh && c->spec && tj_filter_shard(in, c->spec)) ok = 0;
    if (ok) p = tj_jit(ctx, "collmm", cm_fn, NULL, in, NULL);
    if (!p || tj_run(p, in, out)) {
        fprintf(stderr, "%s on %s: %s\n", c->name, mesh ? mesh : "one device", tj_error(ctx));
        ok = 0;
    }
    if (ok) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        tjt_outs_read(&r->o, out);
        r->ncol = tj_prog_collectives(p, r->col, 64);
        for (i = 0; i < r->ncol && i < 64; i++) {
            r->in_dot += r->col[i].in_dot;
            r->fwd_in_dot += r->col[i].in_dot && !r->col[i].backward;
            r->fwd_ag_in_dot += r->col[i].in_dot && !r->col[i].backward && strstr(r->col[i].kind, "gather");
            r->fwd_rs_in_dot += r->col[i].in_dot && !r->col[i].backward && strstr(r->col[i].kind, "scatter");
            if (r->col[i].in_dot && !r->col[i].backward) snprintf(r->fwd_in_dot_axes, sizeof r->fwd_in_dot_axes, "%s", r->col[i].axes);
        }
        r->peak = tj_prog_memory(p).peak_bytes;
        r->pack = tj_prog_memory(p).pack_bytes;
        if (getenv("CM_PRINT")) tj_prog_print(p, stdout);
        if (f) {
            tj_prog_print(p, f);
            fclose(f);
            r->has_ag_dot = text && strstr(text, "all_gather_dot") != NULL;
            r->has_dot_rs = text && strstr(text, "dot_scatter") != NULL;
            free(text);
        }
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return ok;
}

/* row r of x has a row like it in y (kind, mesh axes, bytes, calls; forward
   or backward and the source line too unless either runs in a dot: an
   all_gather that a forward and a backward dot read becomes one
   all_gather_dot each, at the dot's line) */
static int has_row(const tj_collective *r, const cm_result *y) {
    int j;
    for (j = 0; j < y->ncol && j < 64; j++) {
        const tj_collective *s = &y->col[j];
        if (!strcmp(r->kind, s->kind) && !strcmp(r->axes, s->axes) && r->bytes == s->bytes && r->calls == s->calls &&
            (r->in_dot || s->in_dot || (r->backward == s->backward && r->line == s->line)))
            return 1;
    }
    return 0;
}
/* the rewrite changes where the collectives run, not what they move: each
   row of either report has one like it in the other, and off's rows all
   have in_dot 0 */
static int same_collectives(const cm_result *off, const cm_result *on) {
    int i;
    for (i = 0; i < off->ncol && i < 64; i++)
        if (off->col[i].in_dot || !has_row(&off->col[i], on)) return 0;
    for (i = 0; i < on->ncol && i < 64; i++)
        if (!has_row(&on->col[i], off)) return 0;
    return 1;
}

int main(void) {
    int ci, mi, di, ag = 0, rs = 0, runs = 0;
    tjt_current = "collective matmul";
    for (ci = 0; ci < NCASES; ci++)
        for (di = 0; di < 2; di++) {
            if (getenv("CM_CASE") && atoi(getenv("CM_CASE")) != ci) continue;
            tj_dtype dt = di ? TJ_BF16 : TJ_F32;
            double tol = di ? 3e-2 : 2e-6;
            cm_result ref;
            if (!cm_run(&cases[ci], 1, NULL, dt, 1, &ref)) {
                TJT_CHECK(0, "%s: one device failed", cases[ci].name);
                continue;
            }
            for (mi = 0; mi < NMESH; mi++) {
                cm_result on, off;
                char what[256];
                if (!(cases[ci].meshes >> mi & 1)) continue;
                snprintf(what, sizeof what, "%s (%s, mesh %s)", cases[ci].name, di ? "bf16" : "f32", meshes[mi].mesh);
                if (!cm_run(&cases[ci], meshes[mi].ndev, meshes[mi].mesh, dt, 1, &on) || !cm_run(&cases[ci], meshes[mi].ndev, meshes[mi].mesh, dt, 0, &off)) {
                    TJT_CHECK(0, "%s failed", what);
                    continue;
                }
                if (on.backend) /* made for the CPU backend only: a backend gets the dot and the collective */
                    TJT_CHECK(!on.in_dot && !on.has_ag_dot && !on.has_dot_rs, "%s: a collective ran inside its dot on a backend", what);
                else if (cases[ci].fires) TJT_CHECK(on.in_dot > 0 && (on.has_ag_dot || on.has_dot_rs) && (!cases[ci].sx || on.fwd_in_dot > 0), "%s: no collective ran inside its dot", what);
                else TJT_CHECK(!on.fwd_in_dot, "%s: the forward dot took a collective it cannot run", what);
                if ((cases[ci].want == 'x' || cases[ci].want == 'w') && !on.backend)
                    TJT_CHECK(on.fwd_ag_in_dot == 1 && !strcmp(on.fwd_in_dot_axes, cases[ci].want == 'x' ? cases[ci].cmesh : cases[ci].smesh),
                              "%s: the forward dot should take the gather of %s, moving more (it took %d gathers, the last over %s)", what,
                              cases[ci].want == 'x' ? "x" : "w", on.fwd_ag_in_dot, on.fwd_in_dot_axes);
                else if (cases[ci].want && !on.backend)
                    TJT_CHECK(cases[ci].want == 'a' ? on.fwd_ag_in_dot == 1 && !on.fwd_rs_in_dot : on.fwd_rs_in_dot == 1 && !on.fwd_ag_in_dot,
                              "%s: the forward dot should take the %s, moving more (it took %d gathers, %d scatters)", what, cases[ci].want == 'a' ? "gather" : "scatter",
                              on.fwd_ag_in_dot, on.fwd_rs_in_dot);
                TJT_CHECK(!off.in_dot && !off.has_ag_dot && !off.has_dot_rs, "%s: tj_set_collective_matmul(ctx, 0) did not turn it off", what);
                TJT_CHECK(same_collectives(&off, &on), "%s: the collectives reported differ (%d without, %d with)", what, off.ncol, on.ncol);
                /* a matmul big enough to pack holds its pack buffers in the node's
                   scratch, and the analysis says so */
                TJT_CHECK((on.pack > 0) == (off.pack > 0), "%s: pack buffers in the plan: %lld B, %lld B without", what, (long long)on.pack, (long long)off.pack);
                TJT_CHECK(on.peak <= off.peak, "%s: the memory plan grew (%lld B, %lld B without)", what, (long long)on.peak, (long long)off.peak);
                tjt_outs_compare(what, &ref.o, &on.o, tol);
                tjt_outs_compare(what, &off.o, &on.o, tol);
                if (mi == 0) { /* 2 kernel threads per device: the matmuls split their columns (and share the pool) */
                    cm_result two;
                    char w2[300];
                    snprintf(w2, sizeof w2, "%s, 2 threads per device", what);
                    cm_threads = 2;
                    if (cm_run(&cases[ci], meshes[mi].ndev, meshes[mi].mesh, dt, 1, &two)) {
                        tjt_outs_compare(w2, &ref.o, &two.o, tol);
                        tjt_outs_free(&two.o);
                    } else TJT_CHECK(0, "%s failed", w2);
                    cm_threads = 0;
                }
                ag += on.has_ag_dot;
                rs += on.has_dot_rs;
                runs++;
                tjt_outs_free(&on.o);
                tjt_outs_free(&off.o);
            }
            tjt_outs_free(&ref.o);
        }
    if (!getenv("TJ_BACKEND") || !strcmp(getenv("TJ_BACKEND"), "cpu")) TJT_CHECK(ag > 0 && rs > 0, "all_gather_dot in %d programs, dot_scatter in %d", ag, rs);
    printf("collective matmul: %d cases x f32, bf16 on their meshes (%d programs): all_gather_dot in %d, dot_scatter in %d\n", NCASES, runs, ag, rs);

    /* f64 (and any program with one device) keeps the separate collectives */
    {
        cm_result r;
        if (cm_run(&cases[0], 4, "data=4", TJ_F64, 1, &r)) {
            TJT_CHECK(!r.in_dot, "f64: a collective ran inside a dot (the rewrite is for f32 and bf16)");
            tjt_outs_free(&r.o);
        } else TJT_CHECK(0, "f64 program failed");
    }
    tj_set_collective_matmul(NULL, 1); /* no context: nothing happens */
    return tjt_finish();
}
