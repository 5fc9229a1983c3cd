/* test_matmul: the f32 matmul kernel (tj__sgemm, through tjt_sgemm) against
   the double-accumulating reference.
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

/* one case; returns 1 if ok */
static int run_case(unsigned long long *st, int ta, int tb, int M, int N, int K, int pad, int acc,
                    int nthreads, int quiet) {
    int a_rows = ta ? K : M, a_cols = ta ? M : K;
    int b_rows = tb ? N : K, b_cols = tb ? K : N;
    int lda = a_cols + pad, ldb = b_cols + (pad ? pad + 3 : 0), ldc = N + (pad ? 2 * pad + 1 : 0);
    size_t na = (size_t)a_rows * lda + 1, nb = (size_t)b_rows * ldb + 1, nc = (size_t)M * ldc + 1;
    float *A = (float *)malloc(na * sizeof(float));
    float *B = (float *)malloc(nb * sizeof(float));
    float *C = (float *)malloc(nc * sizeof(float));
    float *R = (float *)malloc(nc * sizeof(float));
    size_t x;
    int i, j, ok = 1;
    double maxerr = 0.0, tol;
    for (x = 0; x < na; x++) A[x] = rndf(st);
    for (x = 0; x < nb; x++) B[x] = rndf(st);
    for (i = 0; i < M; i++)
        for (j = 0; j < ldc; j++) C[(size_t)i * ldc + j] = j < N ? rndf(st) : SENTINEL;
    C[nc - 1] = SENTINEL;
    memcpy(R, C, nc * sizeof(float));
    tjt_sgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, nthreads);
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
        printf("FAIL ta=%d tb=%d M=%d N=%d K=%d pad=%d acc=%d threads=%d maxerr=%g tol=%g\n",
               ta, tb, M, N, K, pad, acc, nthreads, maxerr, tol);
    free(A); free(B); free(C); free(R);
    return ok;
}

static void check(int ta, int tb, int M, int N, int K, int pad, int acc, int nthreads) {
    TJT_CHECK(run_case(&main_rng, ta, tb, M, N, K, pad, acc, nthreads, 0), "sgemm ta=%d tb=%d M=%d N=%d K=%d (the line above)", ta, tb, M, N, K);
}

/* concurrent callers: the library runs simulated devices on threads */
typedef struct { int id, fails; } worker_arg;
static void *worker(void *p) {
    worker_arg *w = (worker_arg *)p;
    unsigned long long st = 0x9E3779B97F4A7C15ULL * (unsigned long long)(w->id + 1);
    int r;
    for (r = 0; r < 4; r++) {
        int ok = run_case(&st, r & 1, (r >> 1) & 1, 70 + w->id * 13, 90 + r * 7, 150, r & 1, r & 1,
                      (w->id + r) % 2 + 1, 0);
        if (!ok) w->fails++;
    }
    return NULL;
}

int main(void) {
    static const int small_shapes[][3] = {
        {1, 1, 1}, {1, 1, 7}, {2, 3, 4}, {13, 17, 19}, {17, 13, 19}, {19, 17, 13}, {5, 1, 9},
        {1, 9, 5}, {31, 33, 35}, {64, 64, 63}, {7, 11, 0}, {0, 5, 3}, {4, 0, 3}};
    static const int big_shapes[][3] = {
        {64, 64, 64}, {65, 65, 65}, {1, 768, 3072}, {768, 1, 300}, {3, 500, 200}, {200, 3, 500},
        {14, 32, 256}, {15, 33, 257}, {13, 31, 255}, {28, 64, 512}, {29, 65, 513},
        {127, 129, 131}, {100, 1100, 70}, {1000, 40, 90}, {997, 37, 263}, {37, 1031, 41},
        {256, 192, 768}, {61, 517, 300}, {300, 61, 77}};
    int s, ta, tb, acc, nt, i;
    printf("path: %s\n", tjt_sgemm_path());
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
    /* K == 0 with a big output must zero C (or leave it when accumulating) */
    check(0, 0, 100, 100, 0, 1, 0, 2);
    check(1, 1, 100, 100, 0, 1, 1, 2);
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
