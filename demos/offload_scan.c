/* offload_scan: remat and host offload of a scanned residual MLP stack, the
   scenario of openxla/xla#17541 (jax-ml/jax#23869). There, a transformer's
   block is scanned over its layers under jax.remat; the block output is named
   "residual" with checkpoint_name, and save_and_offload_only_these_names(
   offloaded=["residual"]) changes nothing: the scan carry is not a residual
   JAX's policy ever sees, so it stays on the device. Here the carry of
   tj_scan is named by the value the body returns for it, so the same policy
   offloads it, and the report below shows it.

   For each policy the program jit-compiles loss + gradients, runs it --steps
   times and prints one row: device temp and host bytes from the memory plan,
   what the saved-residuals report saved / offloaded / recomputed, the median
   step time, the loss, and the largest gradient difference from the
   nothing_saveable run (remat changes where values live, never their bits,
   so it must be 0).

     gcc -std=c99 -O2 -I. demos/offload_scan.c -lm -pthread -o build/offload_scan
     ./build/offload_scan [--layers N --batch N --pos N --embed N --hidden N --steps N]

   Dimension letters in the shape comments:
     L = layers (the scanned axis "layer")
     B = batch
     P = pos (sequence positions)
     E = embed (the residual stream)
     H = hidden (the MLP's inner width) */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c99 */
#define TINYJAX_IMPLEMENTATION
#include "tinyjax.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ model */

/* one residual MLP block: x + W2 relu(W1 x); W1 x is named "hidden" and the
   block output (the scan carry) "residual" */
static tj_v block(tj_v x, tj_v w1, tj_v w2) {
    /* x: (B,P,E)  w1: (E,H)  w2: (H,E) */
    tj_v h = tj_checkpoint_name(tj_dot(x, w1, "embed"), "hidden"); /* (B,P,H) */
    tj_v y = tj_dot(tj_relu(h), w2, "hidden");                     /* (B,P,E) */
    return tj_checkpoint_name(tj_add(x, y), "residual");           /* (B,P,E) */
}

/* scan body: carry = the residual stream, xs = this layer's weights */
static void body(tj_graph *g, const tj_v *carry, const tj_v *xs, tj_v *carry_out, tj_v *ys, void *user) {
    (void)g; (void)ys; (void)user;
    carry_out[0] = block(carry[0], xs[0], xs[1]); /* xs[0]: (E,H)  xs[1]: (H,E) */
}

/* loss and the gradients of every input, under one remat/offload policy */
static void loss_and_grads(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) {
    const tj_policy *policy = (const tj_policy *)user;
    tj_v x = tj_tree_v(in, "x");       /* (B,P,E)   */
    tj_v w1 = tj_tree_v(in, "w1");     /* (L,E,H)   */
    tj_v w2 = tj_tree_v(in, "w2");     /* (L,H,E)   */
    tj_v wout = tj_tree_v(in, "wout"); /* (E)       */
    tj_v xs[2], h, loss, wrt[4], grads[4];
    (void)g;
    xs[0] = w1;
    xs[1] = w2;
    /* h = block_{L-1}(... block_0(x)): the body is traced once, run L times */
    if (tj_scan(body, NULL, "layer", 1, &x, 2, xs, 0, &h, NULL, policy) != TJ_OK) return; /* h: (B,P,E) */
    loss = tj_mean(tj_dot(h, wout, "embed"), "batch pos"); /* scalar: mean of the final projection */
    wrt[0] = w1; wrt[1] = w2; wrt[2] = wout; wrt[3] = x;
    if (tj_grad(loss, 4, wrt, grads) != TJ_OK) return;
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g_w1", grads[0]);   /* (L,E,H) */
    tj_tree_set_v(out, "g_w2", grads[1]);   /* (L,H,E) */
    tj_tree_set_v(out, "g_wout", grads[2]); /* (E)     */
    tj_tree_set_v(out, "g_x", grads[3]);    /* (B,P,E) */
}

/* -------------------------------------------------------------- utilities */

static void die(tj_ctx *ctx, const char *what) {
    fprintf(stderr, "offload_scan: %s: %s\n", what, tj_error(ctx));
    exit(1);
}

/* n floats uniform in [-scale, scale), from a 64-bit LCG */
static float *rand_floats(int64_t n, uint64_t seed, double scale) {
    float *a = (float *)malloc(sizeof(float) * (size_t)n);
    int64_t i;
    if (!a) { fprintf(stderr, "offload_scan: out of memory\n"); exit(1); }
    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (float)(((double)(seed >> 11) / 9007199254740992.0 * 2 - 1) * scale);
    }
    return a;
}

static tj_array *rand_array(tj_ctx *ctx, const char *shape, int64_t n, uint64_t seed, double scale) {
    float *d = rand_floats(n, seed, scale);
    tj_array *a = tj_array_new(ctx, TJ_F32, shape, d);
    free(d);
    if (!a) die(ctx, "tj_array_new");
    return a;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* "12.00 MiB", "640.0 KiB", "0 B" */
static const char *fmt_bytes(int64_t b, char *buf, size_t n) {
    if (b == 0) snprintf(buf, n, "0 B");
    else if (b < 1024 * 1024) snprintf(buf, n, "%.1f KiB", b / 1024.0);
    else snprintf(buf, n, "%.2f MiB", b / (1024.0 * 1024.0));
    return buf;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: offload_scan [--layers N] [--batch N] [--pos N] [--embed N] [--hidden N] [--steps N]\n"
            "  A stack of N residual MLP blocks x + W2 relu(W1 x), scanned over a 'layer' axis,\n"
            "  with W1 x named \"hidden\" and the block output (the scan carry) named \"residual\".\n"
            "  For each remat/offload policy: compile loss + gradients, run, print memory and time.\n"
            "    --layers N   blocks in the stack, the scan length (default 8)\n"
            "    --batch N    batch size (default 16)\n"
            "    --pos N      positions per sequence (default 8)\n"
            "    --embed N    width of the residual stream (default 256)\n"
            "    --hidden N   inner width of each MLP (default 1024)\n"
            "    --steps N    timed runs per policy; the median is printed (default 7)\n"
            "    --help       this text\n");
}

/* ------------------------------------------------------------------- main */

/* the graph's outputs, in the order the comparison reads them */
static const char *const out_names[] = {"loss", "g_w1", "g_w2", "g_wout", "g_x"};
#define NOUT 5

typedef struct {
    const char *label;
    tj_policy policy;
    tj_prog *prog;
    tj_memory_analysis mem;
    int64_t saved, offloaded, recomputed; /* residual bytes, by decision */
    double ms;                            /* median step time           */
    float *vals[NOUT];                    /* outputs of the first run   */
    int64_t nvals[NOUT];
} row;

int main(int argc, char **argv) {
    int L = 8, B = 16, P = 8, E = 256, H = 1024, steps = 7;
    int i, k, r, s, ref, all_identical = 1;
    tj_ctx *ctx;
    tj_tree *in;
    char shape[128];
    row rows[6];
    const int nrows = 6;
    double *times;

    for (i = 1; i < argc; i++) {
        int *dst = NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--layers")) dst = &L;
        else if (!strcmp(argv[i], "--batch")) dst = &B;
        else if (!strcmp(argv[i], "--pos")) dst = &P;
        else if (!strcmp(argv[i], "--embed")) dst = &E;
        else if (!strcmp(argv[i], "--hidden")) dst = &H;
        else if (!strcmp(argv[i], "--steps")) dst = &steps;
        if (!dst || i + 1 >= argc) { fprintf(stderr, "offload_scan: bad argument '%s'\n", argv[i]); usage(stderr); return 2; }
        {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1000000) { fprintf(stderr, "offload_scan: %s wants a positive integer, got '%s'\n", argv[i - 1], argv[i]); return 2; }
            *dst = (int)v;
        }
    }

    ctx = tj_ctx_new();
    if (!ctx) { fprintf(stderr, "offload_scan: tj_ctx_new failed\n"); return 1; }
    in = tj_tree_new(ctx);
    /* small weights keep the residual stream O(1) through the stack */
    snprintf(shape, sizeof shape, "batch=%d pos=%d embed=%d", B, P, E);
    tj_tree_set_array(in, "x", rand_array(ctx, shape, (int64_t)B * P * E, 1, 1.0));                 /* (B,P,E) */
    snprintf(shape, sizeof shape, "layer=%d embed=%d hidden=%d", L, E, H);
    tj_tree_set_array(in, "w1", rand_array(ctx, shape, (int64_t)L * E * H, 2, 1.0 / sqrt(E)));      /* (L,E,H) */
    snprintf(shape, sizeof shape, "layer=%d hidden=%d embed=%d", L, H, E);
    tj_tree_set_array(in, "w2", rand_array(ctx, shape, (int64_t)L * H * E, 3, 0.5 / sqrt(H)));      /* (L,H,E) */
    snprintf(shape, sizeof shape, "embed=%d", E);
    tj_tree_set_array(in, "wout", rand_array(ctx, shape, E, 4, 1.0 / sqrt(E)));                     /* (E) */

    /* the policies of the issue; everything_saveable first as the reference */
    memset(rows, 0, sizeof rows);
    rows[0].label = "everything_saveable";        rows[0].policy = tj_everything_saveable();
    rows[1].label = "nothing_saveable";           rows[1].policy = tj_nothing_saveable();
    rows[2].label = "save \"hidden\"";            rows[2].policy = tj_save_only_these_names("hidden");
    rows[3].label = "offload \"hidden\"";         rows[3].policy = tj_save_and_offload_only_these_names("", "hidden");
    rows[4].label = "offload \"residual\"";       rows[4].policy = tj_save_and_offload_only_these_names("", "residual");
    rows[5].label = "offload \"hidden residual\""; rows[5].policy = tj_save_and_offload_only_these_names("", "hidden residual");
    ref = 1; /* gradients are compared with nothing_saveable's */

    printf("offload_scan: %d residual MLP blocks scanned over 'layer', f32, x (batch=%d, pos=%d, embed=%d), hidden=%d; %d timed steps per policy\n",
           L, B, P, E, H, steps);
    printf("  one stack of 'hidden' (L*B*P*H*4) = %lld B, one stack of 'residual' (L*B*P*E*4) = %lld B\n\n",
           (long long)L * B * P * H * 4, (long long)L * B * P * E * 4);

    times = (double *)malloc(sizeof(double) * (size_t)steps);
    if (!times) { fprintf(stderr, "offload_scan: out of memory\n"); return 1; }
    for (r = 0; r < nrows; r++) {
        row *w = &rows[r];
        tj_residual res[64];
        tj_tree *out = tj_tree_new(ctx);
        int nres;
        w->prog = tj_jit(ctx, w->label, loss_and_grads, &w->policy, in, NULL);
        if (!w->prog) die(ctx, "tj_jit");
        w->mem = tj_prog_memory(w->prog);
        nres = tj_prog_residuals(w->prog, res, 64);
        for (k = 0; k < nres && k < 64; k++) {
            if (res[k].decision == TJ_SAVE) w->saved += res[k].bytes;
            else if (res[k].decision == TJ_OFFLOAD) w->offloaded += res[k].bytes;
            else if (!res[k].via[0]) w->recomputed += res[k].bytes; /* not again for each chain member */
        }
        /* one untimed run (its outputs are kept for the comparison), then the timed ones */
        if (tj_run(w->prog, in, out) != TJ_OK) die(ctx, "tj_run");
        for (k = 0; k < NOUT; k++) {
            tj_array *a = tj_tree_array(out, out_names[k]);
            if (!a) die(ctx, "missing output");
            w->nvals[k] = tj_array_numel(a);
            w->vals[k] = (float *)malloc(sizeof(float) * (size_t)w->nvals[k]);
            if (!w->vals[k] || tj_array_read(a, TJ_F32, w->vals[k]) != TJ_OK) die(ctx, "tj_array_read");
        }
        tj_tree_clear(out);
        for (s = 0; s < steps; s++) {
            double t0 = now_ms();
            if (tj_run(w->prog, in, out) != TJ_OK) die(ctx, "tj_run");
            times[s] = now_ms() - t0;
            tj_tree_clear(out);
        }
        qsort(times, (size_t)steps, sizeof(double), cmp_double);
        w->ms = steps % 2 ? times[steps / 2] : 0.5 * (times[steps / 2 - 1] + times[steps / 2]);
        tj_tree_free(out);
    }
    free(times);

    /* the table */
    printf("%-26s %12s %12s %12s %12s %12s %9s %12s %12s\n", "policy", "device temp", "host", "saved", "offloaded", "recomputed", "ms/step", "loss",
           "max|dgrad|");
    for (r = 0; r < nrows; r++) {
        row *w = &rows[r];
        char b1[32], b2[32], b3[32], b4[32], b5[32];
        double md = 0;
        int identical = 1;
        /* largest |difference| over the loss and every gradient, and a bitwise check */
        for (k = 0; k < NOUT; k++) {
            int64_t j;
            for (j = 0; j < w->nvals[k]; j++) {
                double d = fabs((double)w->vals[k][j] - (double)rows[ref].vals[k][j]);
                if (d > md || d != d) md = d;
            }
            if (memcmp(w->vals[k], rows[ref].vals[k], sizeof(float) * (size_t)w->nvals[k])) identical = 0;
        }
        if (!identical) all_identical = 0;
        printf("%-26s %12s %12s %12s %12s %12s %9.2f %12.6f %12g%s\n", w->label, fmt_bytes(w->mem.temp_bytes, b1, sizeof b1),
               fmt_bytes(w->mem.host_temp_bytes, b2, sizeof b2), fmt_bytes(w->saved, b3, sizeof b3), fmt_bytes(w->offloaded, b4, sizeof b4),
               fmt_bytes(w->recomputed, b5, sizeof b5), w->ms, w->vals[0][0], md, identical ? "" : "  (NOT bit-identical)");
    }
    printf("\n  device temp, host: the planned temp arenas (tj_prog_memory: temp_bytes, host_temp_bytes)\n"
           "  saved/offloaded/recomputed: residual bytes over all %d layers (tj_prog_residuals); the producers\n"
           "  a recomputation re-runs (rows with a `via`) are not counted again\n", L);
    printf("\n%s\n\n", all_identical ? "loss and every gradient are bit-identical to nothing_saveable's under every policy (memcmp)"
                                     : "WARNING: some policy changed the bits of the loss or a gradient");

    /* what "offload \"residual\"" did with the carry: JAX ignores this name, here it is offloaded */
    printf("saved-residuals report and memory plan of policy offload \"residual\":\n");
    tj_prog_residuals_print(rows[4].prog, stdout);
    tj_memory_print(rows[4].prog, stdout);

    for (r = 0; r < nrows; r++) {
        tj_prog_free(rows[r].prog);
        for (k = 0; k < NOUT; k++) free(rows[r].vals[k]);
    }
    tj_tree_free(in);
    tj_ctx_free(ctx);
    return all_identical ? 0 : 1;
}
