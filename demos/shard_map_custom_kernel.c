/* shard_map_custom_kernel.c — the scenario of jax-ml/jax#21855: a custom
 * kernel under custom_vjp inside shard_map, differentiated. JAX cannot be
 * told how a Pallas/Triton kernel affects replication, so it must run the
 * shard_map unchecked, and the backward pass gets a "defensive" all-reduce
 * over `model`. In tinyjax the kernel registers a replication rule, the
 * shard_map stays checked, and the all-reduce disappears. The program checks
 * what it prints: it exits 0 only if every confirmation holds.
 *
 *   gcc -std=c99 -O2 -Wall -Wextra -Werror -I. -o build/shard_map_custom_kernel demos/shard_map_custom_kernel.c -lm -pthread && ./build/shard_map_custom_kernel
 *   ./build/shard_map_custom_kernel --dump     (also prints both programs)
 *
 * B = batch (4, split over `data`), E = embed (128, not split).
 * Mesh data=4 x model=2 on 8 simulated devices: each device holds a (1, E)
 * block, and the two `model` devices of a `data` group hold the same one. */
#define TINYJAX_IMPLEMENTATION
#include "tinyjax.h"

#include <math.h>
#include <string.h>

enum { B = 4, E = 128 };

/* ---- the custom kernel: out = in, on one device's block ---- */
static void copy_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *user) {
    int64_t n = 1;
    int i;
    (void)nin; (void)nout; (void)user;
    for (i = 0; i < in[0].rank; i++) n *= in[0].dim[i];
    memcpy(out[0].data, in[0].data, (size_t)n * tj_dtype_size(in[0].dtype));
}

/* ---- custom_vjp(copy): forward and backward are the same kernel ----
   user is the registered op's name, so one pair serves both ops below.
   copy is linear, so the backward needs no residuals. */
static void copy_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *user) {
    (void)g; (void)res;
    tj_custom((const char *)user, 1, in, out);
}
static void copy_bwd(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *user) {
    (void)g; (void)res;
    tj_custom((const char *)user, 1, ct, gin); /* d copy(x)/dx = identity */
}

/* the shard_map body: sees x's local (1, E) block */
static void body(tj_graph *g, const tj_v *in, tj_v *out, void *user) {
    (void)g;
    tj_custom_vjp(copy_fwd, copy_bwd, user, 1, in, 1, out, 0);
}

typedef struct { const char *op; int check; } cfg;

/* loss = sum(shard_map(copy)(x)) in f32; gx = d loss / dx, all ones */
static void loss_and_grad(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) {
    cfg *c = (cfg *)user;
    const char *in_spec[1] = {"batch:data"}, *out_spec[1] = {"batch:data"};
    tj_v x = tj_tree_v(in, "x"), y, loss, gx; /* x, y: (B, E) bf16 */
    (void)g;
    if (tj_shard_map(body, (void *)c->op, 1, &x, in_spec, 1, &y, out_spec, c->check)) return;
    loss = tj_sum(tj_cast(y, TJ_F32), "batch embed");
    tj_grad(loss, 1, &x, &gx);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "gx", gx);
}

static void init(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) {
    (void)in; (void)user;
    tj_tree_set_v(out, "x", tj_normal(g, 42, TJ_BF16, "batch=4 embed=128"));
}

static int confirm(int ok, const char *what) {
    printf("  [%s] %s\n", ok ? " ok " : "FAIL", what);
    return ok;
}

/* compile and run one variant, print its backward collectives, transpose
   report and gradient; returns 1 if its confirmations hold */
static int run_case(tj_ctx *ctx, tj_tree *in, cfg *c, int dump) {
    static float x[B * E], gx[B * E];
    tj_collective col[64];
    tj_transpose tr[64];
    tj_tree *out = tj_tree_new(ctx);
    tj_prog *p = tj_jit(ctx, c->check ? "grad_checked" : "grad_unchecked", loss_and_grad, c, in, NULL);
    int i, n, ok = 1, npsum = 0, npsum_model = 0, nscale2 = 0, nones = 0;
    float loss = 0;
    double want = 0;
    printf("\n=== (%d) %s shard_map (check=%d)%s\n", 2 - c->check, c->check ? "checked" : "unchecked", c->check,
           c->check ? ", copy has a replication rule" : ", as JAX with check_rep=False");
    if (!p || tj_run(p, in, out)) {
        printf("  error: %s\n", tj_error(ctx));
        tj_prog_free(p);
        tj_tree_free(out);
        return 0;
    }
    if (dump) tj_prog_print(p, stdout);

    n = tj_prog_collectives(p, col, 64);
    printf("backward-pass collectives:\n");
    for (i = 0; i < n && i < 64; i++) {
        if (!col[i].backward) continue;
        if (!strcmp(col[i].kind, "shard_slice")) /* each device keeps its block of a replicated value: nothing moves */
            printf("  %-12s over %-6s   local, no data moves  cause: %s\n", col[i].kind, col[i].axes, col[i].cause);
        else
            printf("  %-12s over %-6s %6lld B/device        cause: %s\n", col[i].kind, col[i].axes, (long long)col[i].bytes, col[i].cause);
        if (!strcmp(col[i].kind, "psum")) npsum++, npsum_model += !strcmp(col[i].axes, "model");
    }
    tj_prog_transposes_print(p, stdout);
    n = tj_prog_transposes(p, tr, 64);
    for (i = 0; i < n && i < 64; i++) nscale2 += !strcmp(tr[i].kind, "scale") && !strcmp(tr[i].axes, "model");

    tj_array_read(tj_tree_array(in, "x"), TJ_F32, x);
    tj_array_read(tj_tree_array(out, "gx"), TJ_F32, gx);
    tj_array_read(tj_tree_array(out, "loss"), TJ_F32, &loss);
    for (i = 0; i < B * E; i++) nones += gx[i] == 1.0f, want += x[i];
    printf("gradient: gx[0,0..3] = %g %g %g %g, gx[3,127] = %g; %d of %d equal 1\n", gx[0], gx[1], gx[2], gx[3], gx[B * E - 1], nones, B * E);
    printf("loss %.6f (sum of x on the host: %.6f)\n", loss, want);

    ok &= confirm(fabs(loss - want) <= 1e-4 * (1 + fabs(want)), "forward: loss = sum(x), the kernel copied every block");
    if (c->check) {
        ok &= confirm(npsum == 0, "backward has no all-reduce (psum)");
        ok &= confirm(n == 0, "autodiff inserted no psum, pvary or scaling in the shard_map body");
    } else {
        ok &= confirm(npsum == 1 && npsum_model == 1, "backward has exactly one all-reduce, a psum over model (the defensive one)");
        ok &= confirm(nscale2 == 1, "the output cotangent is divided by 2 (model devices holding the replicated output)");
    }
    ok &= confirm(nones == B * E, "gradient equals the analytical one: d sum(copy(x))/dx = 1 everywhere");
    tj_prog_free(p);
    tj_tree_free(out);
    return ok;
}

int main(int argc, char **argv) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *none = tj_tree_new(ctx), *in = tj_tree_new(ctx);
    tj_prog *p;
    tj_op_def d;
    cfg checked = {"copy", 1}, unchecked = {"copy", 0}, norule = {"copy_norule", 1};
    int ok = 1, dump = argc > 1 && !strcmp(argv[1], "--dump");

    printf("jax-ml/jax#21855: grad of sum(shard_map(custom_vjp(copy kernel))(x)), x (batch=4, embed=128) bf16,\n"
           "mesh data=4 x model=2, in/out specs batch:data. Every device holds one row of x; the two `model`\n"
           "devices of a `data` group hold the same row, and the output is declared replicated over `model` too.\n\n"
           "Differentiating it, the gradient of x must also be the same on both `model` devices. If the system\n"
           "cannot see how the kernel affects replication (JAX: a Pallas kernel, which forces check_rep=False),\n"
           "it must assume the two copies may differ: it divides the output's cotangent by 2 and sums the\n"
           "input gradient over `model`, an all-reduce that adds two identical halves. The replication rule\n"
           "(tj_rep_same: the output varies over the same mesh axes as the input) lets a checked shard_map\n"
           "prove the gradient is already identical across `model`, so no all-reduce is needed.\n");

    tj_set_devices(ctx, 8);
    if (tj_set_mesh(ctx, "data=4 model=2")) { fprintf(stderr, "%s\n", tj_error(ctx)); return 1; }
    memset(&d, 0, sizeof d);
    d.name = "copy";
    d.nout = 1;
    d.cpu = copy_cpu;
    d.replication = tj_rep_same; /* copy does not communicate */
    tj_register_op(ctx, &d);
    d.name = "copy_norule";
    d.replication = NULL;
    tj_register_op(ctx, &d);

    /* x ~ N(0, 1) from a small jitted program, then placed batch:data */
    if (!(p = tj_jit(ctx, "init", init, NULL, none, NULL)) || tj_run(p, none, in)) { fprintf(stderr, "init: %s\n", tj_error(ctx)); return 1; }
    tj_prog_free(p);
    if (tj_tree_set_array(in, "x", tj_device_put(tj_tree_array(in, "x"), "batch:data"))) { fprintf(stderr, "device_put: %s\n", tj_error(ctx)); return 1; }

    ok &= run_case(ctx, in, &checked, dump);
    ok &= run_case(ctx, in, &unchecked, dump);

    printf("\n=== (3) the same kernel registered without a replication rule, checked shard_map\n");
    p = tj_jit(ctx, "grad_norule", loss_and_grad, &norule, in, NULL);
    printf("tj_jit: %s\n  error: %s\n", p ? "compiled (unexpected)" : "NULL", tj_error(ctx));
    ok &= confirm(!p && strstr(tj_error(ctx), "copy_norule") && strstr(tj_error(ctx), "replication rule"),
                  "a clear error that names the op and says how to register a rule");
    tj_prog_free(p);
    tj_clear_error(ctx);

    printf("\n%s\n", ok ? "all confirmations hold" : "SOME CONFIRMATIONS FAILED");
    tj_tree_free(none);
    tj_tree_free(in);
    tj_ctx_free(ctx);
    return ok ? 0 : 1;
}
