/* bench_matmul: GFLOP/s of tj__sgemm against the machine's measured FP32 peak.
   build: gcc -O2 -std=c99 -pthread demos/bench_matmul.c -o build/bench_matmul
   (no -march: the kernel is picked at run time). Optional argument: number of
   timed runs per shape (default 11; the median is reported). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <pthread.h>
#define TINYJAX_IMPLEMENTATION
#include "../tinyjax.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- peak: independent FMA chains that never touch memory (bench_peak.h) ---- */
#include "bench_peak.h"
static double measure_peak(int nt) { return bench_peak_gflops(nt); }

/* ---- sgemm timing ---------------------------------------------------------------- */
static int nruns = 11;

/* returns median GFLOP/s; *best gets the fastest run (robust to a noisy neighbour) */
static double bench(int ta, int tb, int M, int N, int K, int nt, double *best) {
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N, i;
    float *A = (float *)malloc(na * sizeof(float));
    float *B = (float *)malloc(nb * sizeof(float));
    float *C = (float *)malloc(nc * sizeof(float));
    double *t = (double *)malloc((size_t)nruns * sizeof(double)), med;
    int r;
    for (i = 0; i < na; i++) A[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (i = 0; i < nb; i++) B[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    /* warm-up: first touch of C, pool creation, caches */
    tj__sgemm(ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, C, N, 0, nt);
    tj__sgemm(ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, C, N, 0, nt);
    for (r = 0; r < nruns; r++) {
        double t0 = now();
        tj__sgemm(ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, C, N, 0, nt);
        t[r] = now() - t0;
    }
    qsort(t, (size_t)nruns, sizeof(double), cmp_double);
    med = t[nruns / 2];
    *best = 2.0 * M * N * K / t[0] * 1e-9;
    free(A); free(B); free(C); free(t);
    return 2.0 * M * N * K / med * 1e-9;
}

static void report(const char *label, int ta, int tb, int M, int N, int K, int nt, const double *peak) {
    double best, g = bench(ta, tb, M, N, K, nt, &best);
    printf("%-36s %s%s M=%5d N=%5d K=%5d thr=%d %6.1f GFLOP/s %5.1f%% of peak (best %6.1f, %5.1f%%)\n",
           label, ta ? "T" : "N", tb ? "T" : "N", M, N, K, nt, g, 100.0 * g / peak[nt],
           best, 100.0 * best / peak[nt]);
    fflush(stdout);
}

int main(int argc, char **argv) {
    double peak[3];
    int nt;
    if (argc > 1) nruns = atoi(argv[1]) < 10 ? 10 : atoi(argv[1]);
    printf("path: %s\n", tj__sgemm_path());
    peak[1] = measure_peak(1);
    peak[2] = measure_peak(2);
    printf("FP32 FMA peak: %.1f GFLOP/s (1 thread), %.1f GFLOP/s (2 threads)\n", peak[1], peak[2]);
    printf("GFLOP/s = median of %d runs (best run in parentheses); C = op(A) * op(B), op: N = as stored, T = transposed\n", nruns);
    report("(768x3072)*(3072x768)", 0, 0, 768, 768, 3072, 1, peak);
    report("(768x3072)*(3072x768)", 0, 0, 768, 768, 3072, 2, peak);
    for (nt = 1; nt <= 2; nt++) {
        printf("-- GPT-2 124M, B*T=256, %d thread%s --\n", nt, nt > 1 ? "s" : "");
        report("fwd qkv (256x768)*(768x2304)", 0, 0, 256, 2304, 768, nt, peak);
        report("fwd fc (256x768)*(768x3072)", 0, 0, 256, 3072, 768, nt, peak);
        report("fwd proj (256x3072)*(3072x768)", 0, 0, 256, 768, 3072, nt, peak);
        report("fwd lm head (256x768)*(768x50304)", 0, 0, 256, 50304, 768, nt, peak);
        /* llm.c layout: weights stored (OC x C), out = inp * W^T */
        report("fwd qkv, W stored OCxC", 0, 1, 256, 2304, 768, nt, peak);
        report("fwd lm head, W stored OCxC", 0, 1, 256, 50304, 768, nt, peak);
        /* backward: dinp = dout * W (W stored OC x C), dW = dout^T * inp */
        report("bwd dinp fc (256x3072)*(3072x768)", 0, 0, 256, 768, 3072, nt, peak);
        report("bwd dinp lm (256x50304)*(50304x768)", 0, 0, 256, 768, 50304, nt, peak);
        report("bwd dW qkv dout^T*inp", 1, 0, 2304, 768, 256, nt, peak);
        report("bwd dW fc dout^T*inp", 1, 0, 3072, 768, 256, nt, peak);
        report("bwd dW lm dout^T*inp", 1, 0, 50304, 768, 256, nt, peak);
        report("bwd dinp, W stored CxOC: dout*W^T", 0, 1, 256, 768, 2304, nt, peak);
    }
    printf("-- larger batch, 2 threads --\n");
    report("fwd fc B*T=4096", 0, 1, 4096, 3072, 768, 2, peak);
    report("bwd dW fc B*T=4096", 1, 0, 3072, 768, 4096, 2, peak);
    report("bwd dinp fc B*T=4096", 0, 0, 4096, 768, 3072, 2, peak);
    tj__sgemm_shutdown();
    return 0;
}
