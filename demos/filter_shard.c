/* filter_shard.c — place a whole parameter tree with one call (Equinox's
 * filter + Levanter's logical axis rules): array leaves are sharded by the
 * rules, int/float/string leaves pass through untouched. The same call works
 * outside tracing (arrays are re-placed) and inside a traced function (the
 * tree of traced values gets constraints, i.e. collectives in the program).
 *
 *   gcc -std=c99 -O2 -I. demos/filter_shard.c -lm -pthread && ./a.out
 */
#define TINYJAX_IMPLEMENTATION
#include "tinyjax.h"
#include <stdlib.h>
#include <string.h>

enum { VOCAB = 64, EMBED = 32, MLP = 128, LAYER = 4 };

static tj_tree *make_params(tj_ctx *ctx) {
    tj_tree *t = tj_tree_new(ctx);
    char s[96];
    snprintf(s, sizeof s, "vocab=%d embed=%d", VOCAB, EMBED);
    tj_tree_set_array(t, "wte", tj_iota(ctx, TJ_F32, s, "embed"));
    snprintf(s, sizeof s, "layer=%d embed=%d mlp=%d", LAYER, EMBED, MLP);
    tj_tree_set_array(t, "blocks.w1", tj_iota(ctx, TJ_F32, s, "embed")); /* varies along embed, so ln(x) W1 is not 0 */
    snprintf(s, sizeof s, "layer=%d mlp=%d embed=%d", LAYER, MLP, EMBED);
    tj_tree_set_array(t, "blocks.w2", tj_full(ctx, TJ_F32, s, 0.01));
    snprintf(s, sizeof s, "embed=%d", EMBED);
    tj_tree_set_array(t, "ln.g", tj_ones(ctx, TJ_F32, s));
    tj_tree_set_int(t, "n_layer", LAYER);
    tj_tree_set_string(t, "activation", "gelu");
    tj_tree_set_float(t, "eps", 1e-5);
    return t;
}

/* mesh axis sizes, parsed from the mesh string, to compute local bytes */
static int64_t mesh_axis(const char *mesh, const char *axis, size_t n) {
    const char *s = mesh;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), axis);
    while ((s = strstr(s, name)) != NULL) {
        if ((s == mesh || s[-1] == ' ') && s[n] == '=') return atoll(s + n + 1);
        s += n;
    }
    return 1;
}
/* bytes one device holds: global bytes / product of the mesh axes in the sharding string ("embed:data mlp:model vocab:-") */
static int64_t local_bytes(const tj_array *a, const char *mesh, const char *sharding) {
    int64_t b = tj_array_numel(a) * (int64_t)tj_dtype_size(tj_array_dtype(a));
    const char *s = sharding;
    while ((s = strchr(s, ':')) != NULL) {
        s++;
        for (;;) {
            size_t n = strcspn(s, " +");
            if (n && strncmp(s, "-", n) != 0 && strncmp(s, "none", n) != 0) b /= mesh_axis(mesh, s, n);
            s += n;
            if (*s != '+') break;
            s++;
        }
    }
    return b;
}

static void show(tj_tree *t, const char *mesh) {
    int i;
    char d[128], sh[128];
    for (i = 0; i < tj_tree_size(t); i++) {
        const char *nm = tj_tree_name(t, i);
        switch (tj_tree_kind(t, i)) {
        case TJ_LEAF_ARRAY: {
            tj_array *a = tj_tree_array_at(t, i);
            int64_t g = tj_array_numel(a) * (int64_t)tj_dtype_size(tj_array_dtype(a));
            tj_array_sharding(a, sh, sizeof sh);
            printf("  %-12s %-32s %-34s %7lld B global, %7lld B/device\n", nm, tj_array_describe(a, d, sizeof d), sh, (long long)g,
                   (long long)local_bytes(a, mesh, sh));
            break;
        }
        case TJ_LEAF_INT: printf("  %-12s int    %lld   (untouched)\n", nm, (long long)tj_tree_int(t, nm)); break;
        case TJ_LEAF_FLOAT: printf("  %-12s float  %g   (untouched)\n", nm, tj_tree_float(t, nm)); break;
        case TJ_LEAF_STRING: printf("  %-12s string \"%s\"   (untouched)\n", nm, tj_tree_string(t, nm)); break;
        default: printf("  %-12s (traced value)\n", nm); break;
        }
    }
}

/* inside tracing: the params arrive replicated; filter_shard on the tree of
   traced values inserts the slices (and their gradients' collectives) */
typedef struct { const char *rules; } tcfg;
static void traced(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tcfg *c = (tcfg *)u;
    tj_tree *p = tj_tree_new(tj_graph_ctx(g));
    tj_v w1, w2, wte, lng, h, loss;
    char sh[128];
    int i;
    for (i = 0; i < tj_tree_size(in); i++) { /* copy the leaves into a tree we may modify */
        const char *nm = tj_tree_name(in, i);
        if (tj_tree_kind(in, i) == TJ_LEAF_VALUE) tj_tree_set_v(p, nm, tj_tree_v_at(in, i));
        else if (tj_tree_kind(in, i) == TJ_LEAF_INT) tj_tree_set_int(p, nm, tj_tree_int(in, nm));
        else if (tj_tree_kind(in, i) == TJ_LEAF_FLOAT) tj_tree_set_float(p, nm, tj_tree_float(in, nm));
        else if (tj_tree_kind(in, i) == TJ_LEAF_STRING) tj_tree_set_string(p, nm, tj_tree_string(in, nm));
    }
    if (tj_filter_shard(p, c->rules)) { tj_tree_free(p); return; }
    printf("  inside tracing, after tj_filter_shard(tree, \"%s\"):\n", c->rules);
    for (i = 0; i < tj_tree_size(p); i++)
        if (tj_tree_kind(p, i) == TJ_LEAF_VALUE) printf("    %-12s %s\n", tj_tree_name(p, i), tj_v_sharding(tj_tree_v_at(p, i), sh, sizeof sh));
        else printf("    %-12s (kind %d, untouched)\n", tj_tree_name(p, i), (int)tj_tree_kind(p, i));
    wte = tj_tree_v(p, "wte");
    w1 = tj_tree_v(p, "blocks.w1");
    w2 = tj_tree_v(p, "blocks.w2");
    lng = tj_tree_v(p, "ln.g");
    /* a toy use of every leaf: mean over layers of ln(wte) W1 gelu W2 */
    h = tj_mul(tj_layer_norm(wte, "embed", tj_tree_float(p, "eps")), lng);              /* (vocab, embed) */
    h = tj_gelu(tj_dot(h, w1, "embed"));                                                /* (vocab, layer, mlp) */
    h = tj_dot(h, w2, "mlp");                                                           /* (vocab, layer, embed) */
    loss = tj_mean(tj_mul(h, h), "vocab layer embed");
    tj_tree_set_v(out, "loss", loss);
    tj_tree_free(p);
}

int main(void) {
    struct { const char *title, *mesh, *rules; } cfgs[3] = {
        {"replicated", "data=8", ""},
        {"FSDP", "data=8", "embed:data"},
        {"FSDP + tensor parallel", "data=4 model=2", "embed:data mlp:model vocab:model"},
    };
    int k;
    for (k = 0; k < 3; k++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *t;
        tj_set_devices(ctx, 8);
        if (tj_set_mesh(ctx, cfgs[k].mesh)) { fprintf(stderr, "%s\n", tj_error(ctx)); return 1; }
        t = make_params(ctx);
        printf("\n=== %s: mesh \"%s\", rules \"%s\" (outside tracing)\n", cfgs[k].title, cfgs[k].mesh, cfgs[k].rules);
        if (tj_filter_shard(t, cfgs[k].rules)) { fprintf(stderr, "filter_shard: %s\n", tj_error(ctx)); return 1; }
        show(t, cfgs[k].mesh);
        tj_tree_free(t);
        tj_ctx_free(ctx);
    }

    /* the same call inside a traced function */
    for (k = 1; k < 3; k++) {
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *t, *o;
        tj_prog *p;
        tcfg c;
        tj_collective cols[64];
        int n, i;
        tj_set_devices(ctx, 8);
        tj_set_mesh(ctx, cfgs[k].mesh);
        t = make_params(ctx); /* replicated arrays */
        o = tj_tree_new(ctx);
        c.rules = cfgs[k].rules;
        printf("\n=== %s inside tracing: mesh \"%s\"\n", cfgs[k].title, cfgs[k].mesh);
        p = tj_jit(ctx, "filter_shard_traced", traced, &c, t, NULL);
        if (!p || tj_run(p, t, o)) { fprintf(stderr, "traced: %s\n", tj_error(ctx)); return 1; }
        {
            double loss = 0;
            tj_array_read(tj_tree_array(o, "loss"), TJ_F64, &loss);
            printf("  loss %.6g\n", loss);
        }
        n = tj_prog_collectives(p, cols, 64);
        printf("  collectives of the program (%d):\n", n);
        for (i = 0; i < n && i < 64; i++)
            printf("    %-14s %-12s %8lld B/device  %-8s cause %-22s %s:%d\n", cols[i].kind, cols[i].axes, (long long)cols[i].bytes,
                   cols[i].backward ? "backward" : "forward", cols[i].cause, cols[i].file ? (strrchr(cols[i].file, '/') ? strrchr(cols[i].file, '/') + 1 : cols[i].file) : "?",
                   cols[i].line);
        tj_prog_free(p);
        tj_tree_free(t);
        tj_tree_free(o);
        tj_ctx_free(ctx);
    }
    return 0;
}
