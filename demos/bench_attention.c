/* bench_attention: the fused attention op (tj_attention) against the same
   attention from dot, causal_mask and softmax, forward and backward (the
   gradients of a weighted sum of the output w.r.t. q, k and v), causal, f32,
   at GPT-2 124M's heads (12) and head size (64) for sequence lengths 64, 256
   and 1024. Prints per shape: ms per run of each (median, min, max of runs
   taken in turn, fused then composed; and the median process CPU time,
   steadier on a shared machine), the temp memory each program's plan
   needs (the composed form keeps (batch, heads, pos, kpos) scores and
   probabilities; the fused one per-query log-sum-exps), and the largest
   difference between the two results relative to the largest value.
   build: gcc -O3 -std=c99 -pthread -I. demos/bench_attention.c -o build/bench_attention -lm
   Optional argument: timed runs per program (default 5). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define TINYJAX_IMPLEMENTATION
#include "../tinyjax.h"

static double now_ms(int cpu) {
    struct timespec ts;
    clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* u: "fused" or "composed" */
static void attn_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v q = tj_tree_v(in, "q"), k = tj_tree_v(in, "k"), v = tj_tree_v(in, "v"), w = tj_tree_v(in, "w"), o, x[3], gx[3];
    double scale = 1.0 / sqrt((double)tj_v_dim(q, "head_dim"));
    (void)g;
    if (!strcmp((const char *)u, "fused")) o = tj_attention(q, k, v, "pos", "kpos", "head_dim", scale, 1);
    else o = tj_dot(tj_softmax(tj_causal_mask(tj_dot(tj_muls(q, scale), k, "head_dim"), "pos", "kpos", -1e9), "kpos"), v, "kpos");
    x[0] = q, x[1] = k, x[2] = v;
    if (tj_grad(tj_sum(tj_mul(o, w), "batch heads pos head_dim"), 3, x, gx) != TJ_OK) return;
    tj_tree_set_v(out, "o", tj_transpose(o, "batch heads pos head_dim"));
    tj_tree_set_v(out, "dq", gx[0]);
    tj_tree_set_v(out, "dk", gx[1]);
    tj_tree_set_v(out, "dv", gx[2]);
}
static tj_array *rnd(tj_ctx *ctx, const char *shape, unsigned seed, int64_t n) {
    float *f = (float *)malloc(sizeof(float) * (size_t)n);
    tj_array *a;
    int64_t i;
    for (i = 0; i < n; i++) f[i] = (float)sin(0.7 * (double)i + seed) * (seed == 3 ? 1.0f : 2.0f);
    a = tj_array_new(ctx, TJ_F32, shape, f);
    free(f);
    return a;
}
int main(int argc, char **argv) {
    static const int T[3] = {64, 256, 1024}, B[3] = {4, 4, 1};
    int runs = argc > 1 ? atoi(argv[1]) : 5, s, r, v, n;
    tj_ctx *ctx = tj_ctx_new();
    if (runs < 1) runs = 1;
    n = runs < 64 ? runs : 64;
    printf("bench_attention: causal, f32, heads 12, head_dim 64, forward + backward (dq, dk, dv); %d runs each, taken in turn\n", runs);
    for (s = 0; s < 3; s++) {
        char sq[96], sk[96], sw[96];
        tj_tree *in = tj_tree_new(ctx), *out[2];
        tj_prog *p[2];
        double ms[2][64], cpu[2][64], worst = 0, big = 0;
        int64_t temp[2];
        snprintf(sq, sizeof sq, "batch=%d pos=%d heads=12 head_dim=64", B[s], T[s]);
        snprintf(sk, sizeof sk, "batch=%d kpos=%d heads=12 head_dim=64", B[s], T[s]);
        snprintf(sw, sizeof sw, "batch=%d heads=12 pos=%d head_dim=64", B[s], T[s]);
        tj_tree_set_array(in, "q", rnd(ctx, sq, 1, (int64_t)B[s] * T[s] * 12 * 64));
        tj_tree_set_array(in, "k", rnd(ctx, sk, 2, (int64_t)B[s] * T[s] * 12 * 64));
        tj_tree_set_array(in, "v", rnd(ctx, sk, 3, (int64_t)B[s] * T[s] * 12 * 64));
        tj_tree_set_array(in, "w", rnd(ctx, sw, 4, (int64_t)B[s] * T[s] * 12 * 64));
        for (v = 0; v < 2; v++) {
            p[v] = tj_jit(ctx, v ? "composed" : "fused", attn_fn, (void *)(v ? "composed" : "fused"), in, NULL);
            out[v] = tj_tree_new(ctx);
            if (!p[v] || tj_run(p[v], in, out[v])) { /* (the first run: warm-up) */
                fprintf(stderr, "bench_attention: %s\n", tj_error(ctx));
                return 1;
            }
            temp[v] = tj_prog_memory(p[v]).temp_bytes;
        }
        for (r = 0; r < n; r++)
            for (v = 0; v < 2; v++) {
                double t0 = now_ms(0), c0 = now_ms(1);
                tj_run(p[v], in, out[v]);
                ms[v][r] = now_ms(0) - t0;
                cpu[v][r] = now_ms(1) - c0;
            }
        for (v = 0; v < tj_tree_size(out[0]); v++) { /* the largest difference, relative to the largest value */
            tj_array *a = tj_tree_array_at(out[0], v), *b = tj_tree_array(out[1], tj_tree_name(out[0], v));
            int64_t i, n = tj_array_numel(a);
            double *x = (double *)malloc(sizeof(double) * (size_t)n), *y = (double *)malloc(sizeof(double) * (size_t)n);
            tj_array_read(a, TJ_F64, x);
            tj_array_read(b, TJ_F64, y);
            for (i = 0, big = 0; i < n; i++) big = fabs(y[i]) > big ? fabs(y[i]) : big;
            for (i = 0; i < n; i++) worst = fabs(x[i] - y[i]) / big > worst ? fabs(x[i] - y[i]) / big : worst;
            free(x);
            free(y);
        }
        printf("B=%d T=%-5d", B[s], T[s]);
        for (v = 0; v < 2; v++) {
            qsort(ms[v], (size_t)n, sizeof(double), cmp_double);
            qsort(cpu[v], (size_t)n, sizeof(double), cmp_double);
            printf("  %s %7.2f ms (%.2f-%.2f; CPU %.2f), temp %6.1f MB", v ? "composed" : "fused", ms[v][n / 2], ms[v][0], ms[v][n - 1], cpu[v][n / 2],
                   (double)temp[v] / 1e6);
        }
        printf("  fused/composed: %.2fx wall, %.2fx CPU; largest difference %.1e\n", ms[0][n / 2] / ms[1][n / 2], cpu[0][n / 2] / cpu[1][n / 2], worst);
        for (v = 0; v < 2; v++) {
            tj_prog_free(p[v]);
            tj_tree_free(out[v]);
        }
        tj_tree_free(in);
    }
    tj_ctx_free(ctx);
    return 0;
}
