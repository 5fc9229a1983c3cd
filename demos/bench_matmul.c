/* bench_matmul: GFLOP/s of tj__sgemm (f32) and tj__bgemm (bf16 operands, f32
   sums: vdpbf16ps where the CPU has AVX512_BF16) against the machine's
   measured FP32 peak, and OpenBLAS's cblas_sgemm on the same shapes when
   libopenblas.so.0 can be loaded (dlopen: nothing here links against it).
   build: gcc -O2 -std=c99 -pthread demos/bench_matmul.c -o build/bench_matmul
   (no -march: the kernel is picked at run time). Optional argument: number of
   timed runs per shape (default 11; the median is reported). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <pthread.h>
#include <dlfcn.h>
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

/* ---- OpenBLAS, if installed: cblas_sgemm through dlopen ---------------------------- */
typedef void (*cblas_sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                               const float *B, int ldb, float beta, float *C, int ldc);
static cblas_sgemm_fn blas_sgemm;
static void (*blas_threads)(int);
static void blas_open(void) {
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    *(void **)&blas_sgemm = dlsym(h, "cblas_sgemm");
    *(void **)&blas_threads = dlsym(h, "openblas_set_num_threads");
    if (!blas_threads) blas_sgemm = NULL;
}

/* ---- timing ------------------------------------------------------------------------ */
static int nruns = 11;
enum { K_F32, K_BF16, K_BLAS };

/* one C = op(A) op(B) by kind: A and B are f32, or bf16 for K_BF16 */
static void run_once(int kind, int ta, int tb, int M, int N, int K, const void *A, const void *B, float *C, int nt) {
    if (kind == K_F32) tj__sgemm(ta, tb, M, N, K, (const float *)A, ta ? M : K, (const float *)B, tb ? K : N, C, N, 0, nt);
    else if (kind == K_BF16) tj__bgemm(ta, tb, M, N, K, (const uint16_t *)A, ta ? M : K, (const uint16_t *)B, tb ? K : N, C, N, 0, nt);
    else blas_sgemm(101 /* row major */, ta ? 112 : 111, tb ? 112 : 111, M, N, K, 1.0f, (const float *)A, ta ? M : K,
                    (const float *)B, tb ? K : N, 0.0f, C, N);
}

/* Times the nk kinds kind[] on one shape, their runs interleaved (one run of
   each kind in turn, nruns times), so a noisy neighbour slows them alike;
   g[i] gets kind i's median GFLOP/s, best[i] its fastest run's. */
static void bench(const int *kind, int nk, int ta, int tb, int M, int N, int K, int nt, double *g, double *best) {
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N, i;
    float *A = (float *)malloc(na * sizeof(float)), *B = (float *)malloc(nb * sizeof(float));
    uint16_t *Ah = (uint16_t *)malloc(na * sizeof(uint16_t)), *Bh = (uint16_t *)malloc(nb * sizeof(uint16_t));
    float *C = (float *)malloc(nc * sizeof(float));
    double *t = (double *)malloc((size_t)nruns * (size_t)nk * sizeof(double));
    int r, j;
    for (i = 0; i < na; i++) { A[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f; Ah[i] = tj_f32_to_bf16(A[i]); }
    for (i = 0; i < nb; i++) { B[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f; Bh[i] = tj_f32_to_bf16(B[i]); }
#define OPERANDS(k) (k) == K_BF16 ? (const void *)Ah : (const void *)A, (k) == K_BF16 ? (const void *)Bh : (const void *)B
    for (j = 0; j < nk; j++) {
        if (kind[j] == K_BLAS) blas_threads(nt);
        /* warm-up: first touch of C, pool creation, caches */
        run_once(kind[j], ta, tb, M, N, K, OPERANDS(kind[j]), C, nt);
        run_once(kind[j], ta, tb, M, N, K, OPERANDS(kind[j]), C, nt);
    }
    for (r = 0; r < nruns; r++)
        for (j = 0; j < nk; j++) {
            double t0 = now();
            run_once(kind[j], ta, tb, M, N, K, OPERANDS(kind[j]), C, nt);
            t[(size_t)j * nruns + r] = now() - t0;
        }
#undef OPERANDS
    for (j = 0; j < nk; j++) {
        double *tj = t + (size_t)j * nruns;
        qsort(tj, (size_t)nruns, sizeof(double), cmp_double);
        g[j] = 2.0 * M * N * K / tj[nruns / 2] * 1e-9;
        best[j] = 2.0 * M * N * K / tj[0] * 1e-9;
    }
    free(A); free(B); free(Ah); free(Bh); free(C); free(t);
}

/* one shape: f32 against the FP32 peak and bf16 (ratio to f32), interleaved;
   then OpenBLAS f32 (tinyjax's f32 rate over OpenBLAS's) in runs of its own:
   both libraries' worker threads spin a while after a call, which would slow
   whichever runs next */
typedef struct {
    double f32, bf16, blas; /* medians in GFLOP/s (blas: 0 without OpenBLAS) */
} rates;
static rates report(const char *label, int ta, int tb, int M, int N, int K, int nt, const double *peak) {
    static const int ours[2] = {K_F32, K_BF16}, blas[1] = {K_BLAS};
    double g[2], best[2], gl = 0, bl;
    rates r;
    bench(ours, 2, ta, tb, M, N, K, nt, g, best);
    printf("%-36s %s%s M=%5d N=%5d K=%5d thr=%d f32 %6.1f GFLOP/s %5.1f%% of peak (best %6.1f) | bf16 %6.1f (%4.2fx f32)",
           label, ta ? "T" : "N", tb ? "T" : "N", M, N, K, nt, g[0], 100.0 * g[0] / peak[nt], best[0], g[1], g[1] / g[0]);
    if (blas_sgemm) {
        bench(blas, 1, ta, tb, M, N, K, nt, &gl, &bl);
        printf(" | OpenBLAS f32 %6.1f (tinyjax %4.2fx)", gl, g[0] / gl);
    }
    printf("\n");
    fflush(stdout);
    r.f32 = g[0];
    r.bf16 = g[1];
    r.blas = gl;
    return r;
}

/* GPT-2 124M's matmuls at B*T=256 (issue #16's weakest shape: fwd proj) */
static const struct {
    const char *label;
    int ta, tb, M, N, K;
} gpt2_shapes[] = {
    {"fwd qkv (256x768)*(768x2304)", 0, 0, 256, 2304, 768},
    {"fwd fc (256x768)*(768x3072)", 0, 0, 256, 3072, 768},
    {"fwd proj (256x3072)*(3072x768)", 0, 0, 256, 768, 3072},
    {"fwd lm head (256x768)*(768x50304)", 0, 0, 256, 50304, 768},
    /* llm.c layout: weights stored (OC x C), out = inp * W^T */
    {"fwd qkv, W stored OCxC", 0, 1, 256, 2304, 768},
    {"fwd lm head, W stored OCxC", 0, 1, 256, 50304, 768},
    /* backward: dinp = dout * W (W stored OC x C), dW = dout^T * inp */
    {"bwd dinp fc (256x3072)*(3072x768)", 0, 0, 256, 768, 3072},
    {"bwd dinp lm (256x50304)*(50304x768)", 0, 0, 256, 768, 50304},
    {"bwd dW qkv dout^T*inp", 1, 0, 2304, 768, 256},
    {"bwd dW fc dout^T*inp", 1, 0, 3072, 768, 256},
    {"bwd dW lm dout^T*inp", 1, 0, 50304, 768, 256},
    {"bwd dinp, W stored CxOC: dout*W^T", 0, 1, 256, 768, 2304},
};
#define NSHAPES ((int)(sizeof gpt2_shapes / sizeof *gpt2_shapes))
#define WEAKEST 2

int main(int argc, char **argv) {
    double peak[3], weakest = 0, ratio[NSHAPES];
    int nt, i;
    if (argc > 2 || (argc > 1 && atoi(argv[1]) < 1)) { /* --help, or not a count */
        fprintf(stderr, "usage: bench_matmul [timed runs per shape (11; fewer than 10 count as 10)]\n");
        return 2;
    }
    if (argc > 1) nruns = atoi(argv[1]) < 10 ? 10 : atoi(argv[1]);
    blas_open();
    printf("path: %s; bf16: %s; OpenBLAS: %s\n", tj__sgemm_path(), tj__bgemm_path(),
           blas_sgemm ? "libopenblas (cblas_sgemm)" : "not found");
    peak[1] = measure_peak(1);
    peak[2] = measure_peak(2);
    printf("FP32 FMA peak: %.1f GFLOP/s (1 thread), %.1f GFLOP/s (2 threads)\n", peak[1], peak[2]);
    printf("GFLOP/s = median of %d runs (best run in parentheses), f32 and bf16 runs interleaved; C = op(A) * op(B), op: N = as stored, T = transposed\n", nruns);
    printf("bf16: bf16 operands, f32 sums, f32 C (vdpbf16ps does two multiply-adds per f32 lane: its peak is twice the FP32 one)\n");
    report("(768x3072)*(3072x768)", 0, 0, 768, 768, 3072, 1, peak);
    report("(768x3072)*(3072x768)", 0, 0, 768, 768, 3072, 2, peak);
    for (nt = 1; nt <= 2; nt++) {
        printf("-- GPT-2 124M, B*T=256, %d thread%s --\n", nt, nt > 1 ? "s" : "");
        for (i = 0; i < NSHAPES; i++) {
            rates r = report(gpt2_shapes[i].label, gpt2_shapes[i].ta, gpt2_shapes[i].tb, gpt2_shapes[i].M, gpt2_shapes[i].N, gpt2_shapes[i].K, nt, peak);
            if (nt < 2) continue; /* the figures are the 2-thread ones */
            ratio[i] = r.bf16 / r.f32;
            if (i == WEAKEST && r.blas > 0) weakest = r.blas / r.f32;
        }
    }
    printf("-- larger batch, 2 threads --\n");
    report("fwd fc B*T=4096", 0, 1, 4096, 3072, 768, 2, peak);
    report("bwd dW fc B*T=4096", 1, 0, 3072, 768, 4096, 2, peak);
    report("bwd dinp fc B*T=4096", 0, 0, 4096, 768, 3072, 2, peak);
    /* ./build.sh bench's table (issue #16 items 2 and 4): the median bf16/f32
       rate over the GPT-2 shapes on 2 threads; OpenBLAS's rate over ours on
       the weakest shape (at most 1.10: within 10%) */
    qsort(ratio, (size_t)NSHAPES, sizeof(double), cmp_double);
    printf("figure: bf16 / f32 matmul rate; %.2f; 1.7; x; higher\n", ratio[NSHAPES / 2]);
    if (weakest > 0) printf("figure: OpenBLAS/tinyjax, weakest shape; %.2f; 1.10; x\n", weakest);
    tj__sgemm_shutdown();
    return 0;
}
