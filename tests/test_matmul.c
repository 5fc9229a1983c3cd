/* test_matmul: the f32 matmul kernel (tj__sgemm, through tjt_sgemm) and the
   bf16 one (tj__bgemm: vdpbf16ps where the CPU has it, else operands widened
   to f32; both paths run here) against the double-accumulating reference.
   build: gcc -O2 -std=c99 -Wall -Wextra -Werror -I. tests/test_matmul.c tests/tj_impl.c -o build/test_matmul -lm -pthread
   Covers: tiny/odd/prime shapes (direct loop), shapes crossing every cache
   block edge (packed path), all transpose combos, accumulate on/off, padded
   leading dimensions (and checks the padding is left alone), 1 and 2
   threads, concurrent callers, pool shutdown + restart. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <pthread.h>
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"

/* xorshift; each thread passes its own state */
static unsigned long long main_rng = 88172645463325252ULL;
static unsigned rndx(unsigned long long *st) {
    *st ^= *st << 13; *st ^= *st >> 7; *st ^= *st << 17;
    return (unsigned)(*st >> 11);
}
static unsigned rnd(void) { return rndx(&main_rng); }
static float rndf(unsigned long long *st) { return (float)(rndx(st) % 2000001) / 1000000.0f - 1.0f; } /* [-1,1] */

#define SENTINEL 12345.0f

/* which kernel a case calls: f32, bf16 on the CPU's best path, bf16 forced
   to the widened f32 path (the hook is process-wide: the concurrent callers
   below use only the first two); check() uses mm_kind */
enum { MM_F32, MM_BF16, MM_BF16_WIDENED };
static int mm_kind = MM_F32;

/* one case; returns 1 if ok */
static int run_case(unsigned long long *st, int kind, int ta, int tb, int M, int N, int K, int pad, int acc,
                    int nthreads, int quiet) {
    int a_rows = ta ? K : M, a_cols = ta ? M : K;
    int b_rows = tb ? N : K, b_cols = tb ? K : N;
    int lda = a_cols + pad, ldb = b_cols + (pad ? pad + 3 : 0), ldc = N + (pad ? 2 * pad + 1 : 0);
    size_t na = (size_t)a_rows * lda + 1, nb = (size_t)b_rows * ldb + 1, nc = (size_t)M * ldc + 1;
    float *A = (float *)malloc(na * sizeof(float));
    float *B = (float *)malloc(nb * sizeof(float));
    float *C = (float *)malloc(nc * sizeof(float));
    float *R = (float *)malloc(nc * sizeof(float));
    uint16_t *Ah = (uint16_t *)malloc(na * sizeof(uint16_t)), *Bh = (uint16_t *)malloc(nb * sizeof(uint16_t));
    size_t x;
    int i, j, ok = 1;
    double maxerr = 0.0, tol;
    /* bf16 cases: the operands are bf16 values, A and B hold them widened */
    for (x = 0; x < na; x++) { A[x] = rndf(st); Ah[x] = tj_f32_to_bf16(A[x]); if (kind != MM_F32) A[x] = tj_bf16_to_f32(Ah[x]); }
    for (x = 0; x < nb; x++) { B[x] = rndf(st); Bh[x] = tj_f32_to_bf16(B[x]); if (kind != MM_F32) B[x] = tj_bf16_to_f32(Bh[x]); }
    for (i = 0; i < M; i++)
        for (j = 0; j < ldc; j++) C[(size_t)i * ldc + j] = j < N ? rndf(st) : SENTINEL;
    C[nc - 1] = SENTINEL;
    memcpy(R, C, nc * sizeof(float));
    if (kind == MM_F32) tjt_sgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, nthreads);
    else tjt_bgemm(ta, tb, M, N, K, Ah, lda, Bh, ldb, C, ldc, acc, nthreads);
    if (kind == MM_BF16_WIDENED) {
        /* the widened path is the f32 matmul of the widened values, bit for bit */
        float *W = (float *)malloc(nc * sizeof(float));
        memcpy(W, R, nc * sizeof(float));
        tjt_sgemm(ta, tb, M, N, K, A, lda, B, ldb, W, ldc, acc, nthreads);
        if (memcmp(W, C, nc * sizeof(float)) != 0) ok = 0;
        free(W);
    }
    tjt_sgemm_ref(ta, tb, M, N, K, A, lda, B, ldb, R, ldc, acc);
    for (i = 0; i < M; i++)
        for (j = 0; j < ldc; j++) {
            size_t o = (size_t)i * ldc + j;
            if (j < N) {
                double e = fabs((double)C[o] - (double)R[o]);
                if (!(e <= maxerr)) maxerr = e; /* catches NaN too */
            } else if (C[o] != SENTINEL) ok = 0;
        }
    if (C[nc - 1] != SENTINEL) ok = 0;
    /* inputs are in [-1,1]: each output is a sum of K products of magnitude <= 1 */
    tol = 1e-5 * (K > 0 ? K : 1);
    if (!(maxerr <= tol)) ok = 0;
    if (!ok && !quiet)
        printf("FAIL %s ta=%d tb=%d M=%d N=%d K=%d pad=%d acc=%d threads=%d maxerr=%g tol=%g\n",
               kind == MM_F32 ? "f32" : kind == MM_BF16 ? "bf16" : "bf16 widened",
               ta, tb, M, N, K, pad, acc, nthreads, maxerr, tol);
    free(A); free(B); free(C); free(R); free(Ah); free(Bh);
    return ok;
}

static void check(int ta, int tb, int M, int N, int K, int pad, int acc, int nthreads) {
    TJT_CHECK(run_case(&main_rng, mm_kind, ta, tb, M, N, K, pad, acc, nthreads, 0), "%s ta=%d tb=%d M=%d N=%d K=%d (the line above)",
              mm_kind == MM_F32 ? "sgemm" : "bgemm", ta, tb, M, N, K);
}

/* products sharing B (tj__gemm_segs, the collective matmul's): each
   segment equals its own matmul bit for bit (the same sums in the same
   order, B packed once for all), in shapes that cross the cache blocks */
static void check_segs(int bf16, int nseg, int ta, int tb, int M, int N, int K, int acc, int nthreads) {
    unsigned long long *st = &main_rng;
    int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3, s, ok = 1;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc, x;
    size_t es = bf16 ? 2 : 4;
    char *A = (char *)malloc(na * es * (size_t)nseg), *B = (char *)malloc(nb * es);
    float *C = (float *)malloc(nc * sizeof(float) * (size_t)nseg), *R = (float *)malloc(nc * sizeof(float) * (size_t)nseg);
    const void *As[8];
    float *Cs[8];
    for (x = 0; x < na * (size_t)nseg; x++) {
        float v = rndf(st);
        if (bf16) ((uint16_t *)A)[x] = tj_f32_to_bf16(v); else ((float *)A)[x] = v;
    }
    for (x = 0; x < nb; x++) {
        float v = rndf(st);
        if (bf16) ((uint16_t *)B)[x] = tj_f32_to_bf16(v); else ((float *)B)[x] = v;
    }
    for (x = 0; x < nc * (size_t)nseg; x++) C[x] = R[x] = x % (size_t)ldc < (size_t)N ? rndf(st) : SENTINEL;
    for (s = 0; s < nseg; s++) {
        As[s] = A + (size_t)s * na * es;
        Cs[s] = C + (size_t)s * nc;
        if (bf16) tjt_bgemm(ta, tb, M, N, K, (const uint16_t *)As[s], lda, (const uint16_t *)B, ldb, R + (size_t)s * nc, ldc, acc, nthreads);
        else tjt_sgemm(ta, tb, M, N, K, (const float *)As[s], lda, (const float *)B, ldb, R + (size_t)s * nc, ldc, acc, nthreads);
    }
    tjt_gemm_segs(bf16, ta, tb, nseg, M, N, K, As, lda, B, ldb, Cs, ldc, acc, nthreads);
    ok = memcmp(C, R, nc * sizeof(float) * (size_t)nseg) == 0;
    TJT_CHECK(ok, "%d products sharing B (%s, ta=%d tb=%d M=%d N=%d K=%d acc=%d, %d threads) equal their own matmuls bit for bit",
              nseg, bf16 ? "bf16" : "f32", ta, tb, M, N, K, acc, nthreads);
    free(A); free(B); free(C); free(R);
}

/* concurrent callers: the library runs simulated devices on threads */
typedef struct { int id, fails; } worker_arg;
static void *worker(void *p) {
    worker_arg *w = (worker_arg *)p;
    unsigned long long st = 0x9E3779B97F4A7C15ULL * (unsigned long long)(w->id + 1);
    int r;
    for (r = 0; r < 4; r++) {
        int ok = run_case(&st, w->id == 2 ? MM_BF16 : MM_F32, r & 1, (r >> 1) & 1, 70 + w->id * 13, 90 + r * 7, 150, r & 1, r & 1,
                      (w->id + r) % 2 + 1, 0);
        if (!ok) w->fails++;
    }
    return NULL;
}

/* f32 -> bf16 of many values at once rounds as tj_f32_to_bf16: ties to
   even, carries into the exponent, infinities, NaNs, denormals, signs; lengths
   that end inside a vector */
static void test_round(void) {
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                                       0x7fc00001u, 0xff812345u, 0x00000001u, 0x80008000u, 0x007fffffu, 0x00000000u};
    int n, ok = 1;
    size_t i;
    for (n = 0; n <= 67; n += (n < 20 ? 1 : 47)) {
        float *f = (float *)malloc((size_t)(n + 1) * sizeof(float));
        uint16_t *h = (uint16_t *)malloc((size_t)(n + 1) * sizeof(uint16_t));
        for (i = 0; i < (size_t)n; i++) {
            uint32_t u = i < sizeof special / sizeof special[0] ? special[i] : (uint32_t)rnd() * 2654435761u;
            memcpy(&f[i], &u, 4);
        }
        h[n] = 0xABCD;
        tjt_f32_to_bf16_n(f, h, n);
        for (i = 0; i < (size_t)n; i++) ok &= h[i] == tj_f32_to_bf16(f[i]);
        ok &= h[n] == 0xABCD;
        free(f); free(h);
    }
    TJT_CHECK(ok, "f32 -> bf16 over arrays rounds as tj_f32_to_bf16 and writes n values");
}

int main(void) {
    static const int small_shapes[][3] = {
        {1, 1, 1}, {1, 1, 7}, {2, 3, 4}, {13, 17, 19}, {17, 13, 19}, {19, 17, 13}, {5, 1, 9},
        {1, 9, 5}, {31, 33, 35}, {64, 64, 63}, {7, 11, 0}, {0, 5, 3}, {4, 0, 3}};
    static const int big_shapes[][3] = {
        {64, 64, 64}, {65, 65, 65}, {1, 768, 3072}, {768, 1, 300}, {3, 500, 200}, {200, 3, 500},
        {14, 32, 256}, {15, 33, 257}, {13, 31, 255}, {28, 64, 512}, {29, 65, 513},
        {127, 129, 131}, {100, 1100, 70}, {1000, 40, 90}, {997, 37, 263}, {37, 1031, 41},
        {256, 192, 768}, {61, 517, 300}, {300, 61, 77}, {30, 70, 1025}, {43, 40, 1023}};
    int s, ta, tb, acc, nt, i;
    printf("path: %s; bf16: %s\n", tjt_sgemm_path(), tjt_bgemm_path());
    /* the bf16 path follows the CPU: vdpbf16ps wherever cpuid reports it
       (unless TJ_BF16_DOT=f32), the widened f32 path when forced */
    {
        const char *env = getenv("TJ_BF16_DOT");
        int want_native = tjt_cpu_has_avx512bf16() && !(env && !strcmp(env, "f32"));
        TJT_CHECK((strcmp(tjt_bgemm_path(), "avx512bf16") == 0) == want_native, "bf16 path '%s' on a CPU %s vdpbf16ps",
                  tjt_bgemm_path(), tjt_cpu_has_avx512bf16() ? "with" : "without");
        tjt_bgemm_force_f32(1);
        TJT_CHECK(strstr(tjt_bgemm_path(), "widened") != NULL, "forced bf16 path '%s'", tjt_bgemm_path());
        tjt_bgemm_force_f32(0);
    }
    test_round();
    for (mm_kind = MM_F32; mm_kind <= MM_BF16_WIDENED; mm_kind++) {
        tjt_bgemm_force_f32(mm_kind == MM_BF16_WIDENED);
        for (s = 0; s < (int)(sizeof(small_shapes) / sizeof(small_shapes[0])); s++)
            for (ta = 0; ta < 2; ta++)
                for (tb = 0; tb < 2; tb++)
                    for (acc = 0; acc < 2; acc++)
                        check(ta, tb, small_shapes[s][0], small_shapes[s][1], small_shapes[s][2], acc, acc, 1);
        for (s = 0; s < (int)(sizeof(big_shapes) / sizeof(big_shapes[0])); s++)
            for (ta = 0; ta < 2; ta++)
                for (tb = 0; tb < 2; tb++)
                    for (nt = 1; nt <= 2; nt++) {
                        acc = (s + ta + tb + nt) & 1;
                        check(ta, tb, big_shapes[s][0], big_shapes[s][1], big_shapes[s][2], (s + nt) % 3, acc, nt);
                    }
        /* random shapes, biased to straddle the tile sizes */
        for (i = 0; i < 60; i++) {
            int M = 1 + (int)(rnd() % 160), N = 1 + (int)(rnd() % 160), K = 1 + (int)(rnd() % 400);
            check((int)(rnd() & 1), (int)(rnd() & 1), M, N, K, (int)(rnd() % 3), (int)(rnd() & 1),
                  1 + (int)(rnd() & 1));
        }
        /* every row count of the last tile (the 4-, 8- and 14-row kernels), in
           products big enough to be packed (M N K >= 64^3): M = 1..30, odd N
           (a partial column tile) and odd K, every layout, accumulate on/off */
        for (i = 1; i <= 30; i++)
            for (ta = 0; ta < 2; ta++)
                for (tb = 0; tb < 2; tb++) {
                    int N = i % 3 ? 257 : 95, K = (262144 / (i * N) + 2) | 1;
                    check(ta, tb, i, N, K < 257 ? 257 : K, i % 3, (i + ta + tb) & 1, 1 + (i & 1));
                }
        /* K == 0 with a big output must zero C (or leave it when accumulating) */
        check(0, 0, 100, 100, 0, 1, 0, 2);
        check(1, 1, 100, 100, 0, 1, 1, 2);
    }
    tjt_bgemm_force_f32(0);
    mm_kind = MM_F32;
    {
        /* rows, columns and k on both sides of the blocks (MC 280 or 672, NC 512, KC 256 or 512) */
        static const int seg_shapes[][3] = {{64, 288, 768}, {3, 17, 5}, {300, 530, 520}, {64, 1100, 70}, {700, 40, 257}, {65, 192, 3072}, {15, 1030, 1027}};
        int bf;
        for (bf = 0; bf < 2; bf++)
            for (s = 0; s < (int)(sizeof(seg_shapes) / sizeof(seg_shapes[0])); s++)
                for (ta = 0; ta < 2; ta++)
                    for (tb = 0; tb < 2; tb++)
                        check_segs(bf, 2 + (s + ta) % 3 * 2, ta, tb, seg_shapes[s][0], seg_shapes[s][1], seg_shapes[s][2], (s + tb) & 1, 1 + ((s + ta + tb) & 1));
    }
    /* pool shutdown, restart, then concurrent callers mixing 1 and 2 threads */
    tjt_sgemm_shutdown();
    check(0, 1, 300, 200, 100, 0, 0, 2);
    {
        pthread_t th[3];
        worker_arg wa[3];
        for (i = 0; i < 3; i++) { wa[i].id = i; wa[i].fails = 0; pthread_create(&th[i], NULL, worker, &wa[i]); }
        for (i = 0; i < 3; i++) {
            pthread_join(th[i], NULL);
            tjt_pass += 4 - wa[i].fails; tjt_fail += wa[i].fails;
        }
    }
    tjt_sgemm_shutdown();
    return tjt_finish();
}
