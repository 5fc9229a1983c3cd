/* bench_copy_stream: what the copy stream buys, on devsim (no GPU needed).

   demos/offload_scan.c's residual MLP stack, loss + gradients with
   "hidden" and "residual" offloaded to host memory, runs on the device-like
   CPU backend (devsim) whose copies take TJ_DEVSIM_COPY_DELAY_US (a slow
   bus; set here from --delay) in two ways:
     copy stream: offload, fetch and staged slices on the device's copy
                  stream, the next layer's slice prefetched while this one
                  computes (the runner's tj_backend.copy_async / wait);
     in order:    the same backend without copy_async, so every copy runs
                  on the compute stream between the kernels.
   Runs alternate (A, B, A, B, ...); the medians, min and max per step are
   printed with the outputs' largest difference (0: the same bits). The
   figures say how much copy time the runner hides behind compute on this
   machine's devsim, not what a GPU does.

     gcc -std=c99 -O2 -I. demos/bench_copy_stream.c -lm -pthread -o build/bench_copy_stream
     ./build/bench_copy_stream [--layers N] [--delay US (2000)] [--runs N (7)] */
#define _POSIX_C_SOURCE 200809L /* setenv, clock_gettime */
#define TINYJAX_IMPLEMENTATION
#include "tinyjax.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static tj_v block(tj_v x, tj_v w1, tj_v w2) {
    tj_v h = tj_checkpoint_name(tj_dot(x, w1, "embed"), "hidden");  /* (B,P,H) */
    return tj_checkpoint_name(tj_add(x, tj_dot(tj_relu(h), w2, "hidden")), "residual"); /* (B,P,E) */
}
static void body(tj_graph *g, const tj_v *carry, const tj_v *xs, tj_v *carry_out, tj_v *ys, void *u) {
    (void)g, (void)ys, (void)u;
    carry_out[0] = block(carry[0], xs[0], xs[1]);
}
static void step(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), xs[2], h, loss, wrt[2], gr[2];
    (void)g;
    xs[0] = tj_tree_v(in, "w1");
    xs[1] = tj_tree_v(in, "w2");
    if (tj_scan(body, NULL, "layer", 1, &x, 2, xs, 0, &h, NULL, (const tj_policy *)u) != TJ_OK) return;
    loss = tj_mean(tj_dot(h, tj_tree_v(in, "wout"), "embed"), "batch pos");
    wrt[0] = xs[0], wrt[1] = xs[1];
    if (tj_grad(loss, 2, wrt, gr) != TJ_OK) return;
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g_w1", gr[0]);
    tj_tree_set_v(out, "g_w2", gr[1]);
}
static tj_array *rnd(tj_ctx *c, const char *shape, uint64_t seed, double scale) {
    tj_array *z = tj_zeros(c, TJ_F32, shape), *a;
    int64_t n = z ? tj_array_numel(z) : 0, i;
    float *f = (float *)malloc(sizeof(float) * (size_t)(n + 1));
    tj_array_free(z);
    if (!f) return NULL;
    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        f[i] = (float)(((double)(seed >> 11) / 9007199254740992.0 * 2 - 1) * scale);
    }
    a = tj_array_new(c, TJ_F32, shape, f);
    free(f);
    return a;
}
static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int L = 16, delay = 2000, runs = 7, i, r, w;
    const char *label[2] = {"copy stream", "in order"};
    tj_policy pol = tj_save_and_offload_only_these_names("", "hidden residual");
    tj_backend *ds, inorder;
    tj_ctx *c[2];
    tj_tree *in[2];
    tj_prog *p[2];
    double *ms[2], worst = 0;
    char sh[96], d[32];
    for (i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--layers")) L = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--delay")) delay = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
        else break;
    }
    if (i < argc || L < 1 || delay < 0 || runs < 1) {
        fprintf(stderr, "usage: bench_copy_stream [--layers N (16)] [--delay US per copy (2000)] [--runs N per way (7)]\n");
        return 2;
    }
    snprintf(d, sizeof d, "%d", delay);
    setenv("TJ_DEVSIM_COPY_DELAY_US", d, 1);
    if (!(ds = tj_devsim_backend())) return 1;
    inorder = *ds; /* the same devsim (same state), without the copy stream */
    inorder.copy_async = NULL;
    inorder.wait = NULL;
    for (w = 0; w < 2; w++) {
        c[w] = tj_ctx_new();
        tj_set_backend(c[w], w ? &inorder : ds);
        in[w] = tj_tree_new(c[w]);
        tj_tree_set_array(in[w], "x", rnd(c[w], "batch=4 pos=32 embed=128", 1, 1.0));
        snprintf(sh, sizeof sh, "layer=%d embed=128 hidden=512", L);
        tj_tree_set_array(in[w], "w1", rnd(c[w], sh, 2, 0.088));
        snprintf(sh, sizeof sh, "layer=%d hidden=512 embed=128", L);
        tj_tree_set_array(in[w], "w2", rnd(c[w], sh, 3, 0.022));
        tj_tree_set_array(in[w], "wout", rnd(c[w], "embed=128", 4, 0.088));
        p[w] = tj_jit(c[w], "step", step, &pol, in[w], NULL);
        ms[w] = (double *)malloc(sizeof(double) * (size_t)runs);
        if (!p[w] || !ms[w]) {
            fprintf(stderr, "bench_copy_stream: %s\n", tj_error(c[w]));
            return 1;
        }
    }
    printf("bench_copy_stream: devsim, %d layers (batch 4, pos 32, embed 128, hidden 512), 'hidden' and 'residual' offloaded,\n"
           "  copies lag %d us; loss + gradients, %d runs each way, alternating, after one warm-up run each\n",
           L, delay, runs);
    for (r = -1; r < runs; r++)
        for (w = 0; w < 2; w++) {
            tj_tree *out = tj_tree_new(c[w]);
            double t0 = now_ms();
            if (tj_run(p[w], in[w], out) != TJ_OK) {
                fprintf(stderr, "bench_copy_stream: %s: %s\n", label[w], tj_error(c[w]));
                return 1;
            }
            if (r >= 0) ms[w][r] = now_ms() - t0;
            tj_tree_free(out);
        }
    { /* the two ways give the same bits */
        tj_tree *o[2];
        for (w = 0; w < 2; w++) {
            o[w] = tj_tree_new(c[w]);
            tj_run(p[w], in[w], o[w]);
        }
        for (i = 0; i < tj_tree_size(o[0]); i++) {
            tj_array *a = tj_tree_array_at(o[0], i), *b = tj_tree_array_at(o[1], i);
            int64_t n = a ? tj_array_numel(a) : 0, k;
            float *x = (float *)malloc(sizeof(float) * (size_t)(n + 1)), *y = (float *)malloc(sizeof(float) * (size_t)(n + 1));
            if (x && y && b && !tj_array_read(a, TJ_F32, x) && !tj_array_read(b, TJ_F32, y))
                for (k = 0; k < n; k++) worst = fabs((double)x[k] - y[k]) > worst ? fabs((double)x[k] - y[k]) : worst;
            free(x);
            free(y);
        }
        for (w = 0; w < 2; w++) tj_tree_free(o[w]);
    }
    for (w = 0; w < 2; w++) {
        qsort(ms[w], (size_t)runs, sizeof(double), cmp);
        printf("  %-12s median %8.2f ms/step  (min %.2f, max %.2f)\n", label[w], runs % 2 ? ms[w][runs / 2] : 0.5 * (ms[w][runs / 2 - 1] + ms[w][runs / 2]),
               ms[w][0], ms[w][runs - 1]);
    }
    printf("  largest output difference between the two: %g\n", worst);
    for (w = 0; w < 2; w++) {
        tj_prog_free(p[w]);
        tj_tree_free(in[w]);
        tj_ctx_free(c[w]);
        free(ms[w]);
    }
    tj_devsim_backend_free(ds);
    return worst != 0;
}
