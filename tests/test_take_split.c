/* test_take_split: a take from a table split along the axis it indexes
   (the vocab-parallel embedding of tj__sh_take: each device takes its
   block's rows, the result a partial sum), against one device: 18
   programs (take as an output, through scans, checkpoints, captured,
   feeding a scan carry, grad-of-grad, bf16 and i32 tables, a tied
   embedding with cross-entropy, a partial table, scalar indices) on 14
   meshes (2, 4 and 8 devices, splits over one, two and three mesh axes,
   the indices sharded too), each with 4 vocabulary sizes.
   usage: test_take_split [case]   (RV_PRINT=1: print the programs) */
#include "../tinyjax.h"
#include "tj_test.h"

static int CASE;
static tj_policy POL;

static void sbody(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v wte = *(tj_v *)u;
    (void)g; (void)y;
    co[0] = tj_add(c[0], tj_tanh(tj_take(wte, "vocab", x[0])));
}
static void sbody2(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)y; (void)u;
    co[0] = tj_add(c[0], tj_rename(tj_tanh(tj_dot(c[0], x[0], "embed")), "embed2", "embed"));
    co[1] = tj_mul(c[1], tj_sum(c[0], "embed"));
}
static void sbody3(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)y; (void)u;
    co[0] = tj_add(c[0], tj_rename(tj_tanh(tj_dot(c[0], x[0], "embed")), "embed2", "embed"));
}
static void region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_tanh(tj_take(in[0], "vocab", in[1]));
}
static void sbody4(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v cap = *(tj_v *)u;
    (void)g; (void)y;
    co[0] = tj_add(tj_mul(c[0], tj_tanh(x[0])), tj_exp(cap));
}
static void region2(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_mul(tj_tanh(in[0]), in[1]);
}
/* out: "loss" and "g", its gradient with respect to the table (returned) */
static tj_v set_loss_g(tj_tree *out, tj_v loss, tj_v wte) {
    tj_v g = NULL;
    tj_grad(loss, 1, &wte, &g);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g", g);
    return g;
}
/* out: "loss", and its gradients with respect to a and b as na and nb */
static void set_loss_g2(tj_tree *out, tj_v loss, tj_v a, const char *na, tj_v b, const char *nb) {
    tj_v wr[2], gr[2];
    wr[0] = a;
    wr[1] = b;
    tj_tree_set_v(out, "loss", loss);
    if (tj_grad(loss, 2, wr, gr)) return;
    tj_tree_set_v(out, na, gr[0]);
    tj_tree_set_v(out, nb, gr[1]);
}
static void prog(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v wte = tj_tree_v(in, "wte"), tok = tj_tree_v(in, "tokens"), w = tj_tree_v(in, "w");
    tj_v h, loss, gr[2], gg;
    (void)g; (void)u;
    switch (CASE) {
    case 0: /* take output directly an output */
    case 9: /* table with vocab not leading */
        h = tj_take(wte, "vocab", tok);
        tj_tree_set_v(out, "h", h);
        loss = tj_sum_all(tj_mul(tj_mul(h, h), w));
        gr[0] = set_loss_g(out, loss, wte);
        break;
    case 1: /* grad of grad */
        h = tj_take(wte, "vocab", tok);
        loss = tj_sum_all(tj_mul(tj_tanh(h), w));
        tj_grad(loss, 1, &wte, gr);
        gg = tj_sum_all(tj_mul(gr[0], tj_mul(gr[0], wte)));
        tj_grad(gg, 1, &wte, &gr[1]);
        tj_tree_set_v(out, "loss", loss);
        tj_tree_set_v(out, "g", gr[0]);
        tj_tree_set_v(out, "gg", gr[1]);
        break;
    case 2: { /* take in scan body, xs = tokens per layer */
        tj_v c0 = tj_mul(tj_tree_v(in, "h0"), tj_tree_v(in, "h0")), fin;
        tj_scan(sbody, &wte, "layer", 1, &c0, 1, &tok, 0, &fin, NULL, CASE == 2 ? NULL : &POL);
        loss = tj_sum_all(tj_mul(fin, fin));
        tj_tree_set_v(out, "fin", fin);
        gr[0] = set_loss_g(out, loss, wte);
        break;
    }
    case 3: { /* checkpoint region */
        tj_v ins[2] = {wte, tok}, o;
        tj_checkpoint(region, NULL, 2, ins, 1, &o, &POL);
        loss = tj_sum_all(tj_mul(tj_mul(o, o), w));
        tj_grad(loss, 1, &wte, gr);
        tj_tree_set_v(out, "o", o);
        tj_tree_set_v(out, "loss", loss);
        tj_tree_set_v(out, "g", gr[0]);
        tj_grad(tj_sum_all(tj_mul(gr[0], gr[0])), 1, &wte, &gr[1]);
        tj_tree_set_v(out, "gg", gr[1]);
        break;
    }
    case 4: { /* take -> scan carry with two carries, partial dot carry too */
        tj_v ws = tj_tree_v(in, "ws"), c[2], fin[2];
        c[0] = tj_take(wte, "vocab", tok);
        c[1] = tj_take(wte, "vocab", tok);
        c[1] = tj_sum(c[1], "embed");
        tj_scan(sbody2, NULL, "layer", 2, c, 1, &ws, 0, fin, NULL, &POL);
        loss = tj_add(tj_sum_all(tj_mul(fin[0], fin[0])), tj_sum_all(fin[1]));
        set_loss_g2(out, loss, wte, "g", ws, "gws");
        tj_tree_set_v(out, "f1", fin[1]);
        break;
    }
    case 5: { /* i32 table */
        tj_v ti = tj_tree_v(in, "ti");
        h = tj_take(ti, "vocab", tok);
        tj_tree_set_v(out, "h", h);
        tj_tree_set_v(out, "hs", tj_mul(tj_cast(h, TJ_F32), w));
        break;
    }
    case 6: /* bf16 table (wte is bf16) */
        h = tj_take(wte, "vocab", tok);
        tj_tree_set_v(out, "h", h);
        loss = tj_sum_all(tj_cast(tj_mul(h, h), TJ_F32));
        gr[0] = set_loss_g(out, loss, wte);
        break;
    case 7: /* tied: take and logits dot */
        h = tj_take(wte, "vocab", tok);
        {
            tj_v lg = tj_dot(tj_tanh(h), wte, "embed"); /* batch pos vocab */
            loss = tj_cross_entropy(lg, tj_tree_v(in, "labels"), "vocab", "batch pos");
        }
        gr[0] = set_loss_g(out, loss, wte);
        tj_grad(tj_sum_all(tj_mul(gr[0], gr[0])), 1, &wte, &gr[1]);
        tj_tree_set_v(out, "gg", gr[1]);
        break;
    case 8: { /* take -> scan carry, one carry, output of take also output */
        tj_v ws = tj_tree_v(in, "ws"), c0, fin;
        c0 = tj_take(wte, "vocab", tok);
        tj_scan(sbody3, NULL, "layer", 1, &c0, 1, &ws, 0, &fin, NULL, &POL);
        loss = tj_sum_all(tj_mul(fin, fin));
        tj_tree_set_v(out, "c0", c0);
        set_loss_g2(out, loss, wte, "g", ws, "gws");
        break;
    }
    case 10: /* take + elementwise with another take; and sum over embed of take (reduction of partial) */
        h = tj_take(wte, "vocab", tok);
        {
            tj_v s = tj_sum(h, "embed");      /* partial */
            tj_v m = tj_exp(s);               /* nonlinear of partial */
            loss = tj_sum_all(m);
            tj_grad(loss, 1, &wte, gr);
            tj_tree_set_v(out, "m", m);
            tj_tree_set_v(out, "loss", loss);
            tj_tree_set_v(out, "g", gr[0]);
        }
        break;
    case 11: { /* second-order through scan with take in body */
        tj_v c0 = tj_mul(tj_tree_v(in, "h0"), tj_tree_v(in, "h0")), fin;
        tj_scan(sbody, &wte, "layer", 1, &c0, 1, &tok, 0, &fin, NULL, &POL);
        loss = tj_sum_all(tj_mul(fin, fin));
        tj_grad(loss, 1, &wte, gr);
        tj_grad(tj_sum_all(tj_mul(gr[0], gr[0])), 1, &wte, &gr[1]);
        tj_tree_set_v(out, "loss", loss);
        tj_tree_set_v(out, "g", gr[0]);
        tj_tree_set_v(out, "gg", gr[1]);
        break;
    }
    case 12: /* take output only an output */
        h = tj_take(wte, "vocab", tok);
        tj_tree_set_v(out, "h", h);
        tj_tree_set_v(out, "h2", tj_rename(h, "embed", "e2"));
        tj_tree_set_v(out, "h3", tj_muls(tj_add(h, h), 3.0));
        tj_tree_set_v(out, "s", tj_sum(h, "batch"));
        break;
    case 13: { /* two tables with different splits, added, then nonlinear */
        tj_v w2 = tj_tree_v(in, "wte2");
        h = tj_add(tj_take(wte, "vocab", tok), tj_take(w2, "vocab", tok));
        tj_tree_set_v(out, "h", h);
        loss = tj_sum_all(tj_tanh(h));
        set_loss_g2(out, loss, wte, "g", w2, "g2");
        break;
    }
    case 14: { /* take output as scan xs and captured */
        tj_v c0 = tj_tree_v(in, "h0"), fin, hs;
        hs = tj_take(wte, "vocab", tok); /* layer batch pos embed */
        tj_v cap = tj_take(wte, "vocab", tj_tree_v(in, "tok2"));
        tj_scan(sbody4, &cap, "layer", 1, &c0, 1, &hs, 0, &fin, NULL, &POL);
        loss = tj_sum_all(tj_mul(fin, fin));
        tj_tree_set_v(out, "fin", fin);
        gr[0] = set_loss_g(out, loss, wte);
        break;
    }
    case 15: { /* take output into a checkpoint region */
        tj_v ins[2], o;
        ins[0] = tj_take(wte, "vocab", tok);
        ins[1] = w;
        tj_checkpoint(region2, NULL, 2, ins, 1, &o, &POL);
        loss = tj_sum_all(o);
        tj_grad(loss, 1, &wte, gr);
        tj_tree_set_v(out, "o", o);
        tj_tree_set_v(out, "g", gr[0]);
        tj_grad(tj_sum_all(tj_mul(gr[0], gr[0])), 1, &wte, &gr[1]);
        tj_tree_set_v(out, "gg", gr[1]);
        break;
    }
    case 16: { /* partial table: a dot contracting a split axis, then take */
        tj_v a = tj_tree_v(in, "ta"), b = tj_tree_v(in, "tb");
        tj_v tab = tj_dot(a, b, "hd"); /* vocab embed */
        h = tj_take(tab, "vocab", tok);
        loss = tj_sum_all(tj_mul(tj_tanh(h), w));
        tj_tree_set_v(out, "h", h);
        set_loss_g2(out, loss, a, "ga", b, "gb");
        break;
    }
    case 17: { /* scalar index, and index of rank 1 */
        tj_v i0 = tj_index(tok, "batch", 1);       /* pos */
        tj_v i1 = tj_index(i0, "pos", 3);          /* scalar */
        tj_v hs = tj_take(wte, "vocab", i1);       /* embed */
        tj_v hp = tj_take(wte, "vocab", i0);       /* pos embed */
        tj_tree_set_v(out, "hs", hs);
        tj_tree_set_v(out, "hp", hp);
        loss = tj_add(tj_sum_all(tj_exp(hs)), tj_sum_all(tj_exp(hp)));
        tj_grad(loss, 1, &wte, gr);
        tj_tree_set_v(out, "g", gr[0]);
        break;
    }
    }
}

static int run(int ndev, const char *mesh, const char *rules, tjt_outs *o, int V, int threads) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p = NULL;
    int i, ok = 1;
    int32_t tok[3 * 4 * 8 + 8], lab[32];
    char shp[64];
    memset(o, 0, sizeof *o);
    tj_set_devices(ctx, ndev);
    if (threads) tj_set_threads(ctx, threads);
    if (mesh) tj_set_mesh(ctx, mesh);
    for (i = 0; i < 104; i++) tok[i] = (i * 7 + 3) % V;
    for (i = 0; i < 32; i++) lab[i] = (i * 5 + 1) % V;
    if (CASE == 14) {
        tj_tree_set_array(in, "tok2", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", tok + 5));
        tj_tree_set_array(in, "h0", tjt_rand(ctx, TJ_F32, "batch=4 pos=8 embed=8", 3, -1, 1));
    }
    if (CASE == 16) {
        snprintf(shp, sizeof shp, "vocab=%d hd=4", V);
        tj_tree_set_array(in, "ta", tjt_rand(ctx, TJ_F32, shp, 31, -1, 1));
        tj_tree_set_array(in, "tb", tjt_rand(ctx, TJ_F32, "hd=4 embed=8", 32, -1, 1));
    }
    if (CASE == 13) {
        snprintf(shp, sizeof shp, "vocab=%d embed=8", V);
        tj_tree_set_array(in, "wte2", tjt_rand(ctx, TJ_F32, shp, 33, -1, 1));
    }
    if (CASE == 2 || CASE == 11 || CASE == 14) {
        tj_tree_set_array(in, "tokens", tj_array_new(ctx, TJ_I32, "layer=3 batch=4 pos=8", tok));
        tj_tree_set_array(in, "h0", tjt_rand(ctx, TJ_F32, "batch=4 pos=8 embed=8", 3, -1, 1));
    } else
        tj_tree_set_array(in, "tokens", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", tok));
    if (CASE == 9) snprintf(shp, sizeof shp, "embed=8 vocab=%d", V);
    else snprintf(shp, sizeof shp, "vocab=%d embed=8", V);
    tj_tree_set_array(in, "wte", tjt_rand(ctx, CASE == 6 ? TJ_BF16 : TJ_F32, shp, 9, -1, 1));
    if (CASE == 5) {
        int32_t *ti = malloc(sizeof(int32_t) * V * 8);
        for (i = 0; i < V * 8; i++) ti[i] = i * 3 - 7;
        tj_tree_set_array(in, "ti", tj_array_new(ctx, TJ_I32, shp, ti));
        free(ti);
    }
    tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F32, "batch=4 pos=8 embed=8", 5, -1, 1));
    tj_tree_set_array(in, "ws", tjt_rand(ctx, TJ_F32, "layer=3 embed=8 embed2=8", 10, -0.3, 0.3));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=4 pos=8", lab));
    if (rules && tj_filter_shard(in, rules)) { fprintf(stderr, "filter_shard: %s\n", tj_error(ctx)); ok = 0; }
    p = ok ? tj_jit(ctx, "prog", prog, NULL, in, NULL) : NULL;
    if (!p || tj_run(p, in, out)) {
        fprintf(stderr, "case %d run(%d, %s, %s): %s\n", CASE, ndev, mesh ? mesh : "-", rules ? rules : "-", tj_error(ctx));
        ok = 0;
    }
    if (ok) {
        if (getenv("RV_PRINT")) tj_prog_print(p, stdout);
        tjt_outs_read(o, out);
        if (getenv("RV_SH")) {
            char b[128];
            int k;
            for (k = 0; k < tj_tree_size(in); k++) printf("  in %s: %s\n", tj_tree_name(in, k), tj_array_sharding(tj_tree_array_at(in, k), b, sizeof b));
        }
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return ok;
}

int main(int argc, char **argv) {
    const tjt_mesh_case *cs = tjt_vocab_meshes;
    int Vs[] = {64, 32, 16, 128};
    int c0 = argc > 1 ? atoi(argv[1]) : 0, c1 = argc > 1 ? c0 + 1 : 18, vi, m;
    int threads = getenv("RV_THREADS") ? atoi(getenv("RV_THREADS")) : 0;
    POL = tj_nothing_saveable();
    for (CASE = c0; CASE < c1; CASE++)
        for (vi = 0; vi < 4; vi++) {
            tjt_outs ref, r;
            int V = Vs[vi];
            if (!run(1, NULL, NULL, &ref, V, threads)) { TJT_CHECK(0, "case %d V %d: 1 device failed", CASE, V); continue; }
            for (m = 0; m < TJT_NVOCAB_MESHES; m++) {
                char what[200];
                if (getenv("RV_M") && atoi(getenv("RV_M")) != m) continue;
                if (getenv("RV_V") && atoi(getenv("RV_V")) != V) continue;
                snprintf(what, sizeof what, "case %d V=%d %s [%s]", CASE, V, cs[m].mesh, cs[m].rules);
                if (!run(cs[m].ndev, cs[m].mesh, cs[m].rules, &r, V, threads)) { TJT_CHECK(0, "%s failed", what); continue; }
                tjt_outs_compare(what, &ref, &r, CASE == 6 ? 1e-2 : 2e-5);
                tjt_outs_free(&r);
            }
            tjt_outs_free(&ref);
        }
    return tjt_finish();
}
