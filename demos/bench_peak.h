/* bench_peak.h: this machine's FP32 FMA peak, measured, for the benchmark
   programs' "% of peak" (gpt2_train --bench). Each thread runs many
   independent FMA chains that never touch memory (16 chains of 16 lanes
   with AVX-512, 12 of 8 with AVX2: more than FMA latency x throughput needs),
   so the figure is what the cores can do, not what one dependent chain does.
   The path is picked at run time, like the library's kernels (no -march).
   Needs pthreads; uses nothing of tinyjax. */
#ifndef BENCH_PEAK_H
#define BENCH_PEAK_H
#include <pthread.h>
#include <time.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#define BENCH_PEAK_ITERS 20000000L
static double bench_peak_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#if defined(__x86_64__) && defined(__GNUC__)
/* Named chains, not an array: an array the compiler does not unroll (-O2)
   goes through memory and measures store forwarding instead. */
#define BENCH_PEAK_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define BENCH_PEAK_MORE(X) X(12) X(13) X(14) X(15)
__attribute__((target("avx512f,fma"))) static double bench_peak_avx512(float *sink) {
    __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f), s = _mm512_setzero_ps();
    float t[16];
    long i;
    int j;
#define BENCH_PEAK_D(j) __m512 c##j = _mm512_set1_ps((float)j); /* distinct: equal chains could be merged */
#define BENCH_PEAK_F(j) c##j = _mm512_fmadd_ps(c##j, m, a);
#define BENCH_PEAK_S(j) s = _mm512_add_ps(s, c##j);
    BENCH_PEAK_CHAINS(BENCH_PEAK_D) BENCH_PEAK_MORE(BENCH_PEAK_D)
    for (i = 0; i < BENCH_PEAK_ITERS; i++) { BENCH_PEAK_CHAINS(BENCH_PEAK_F) BENCH_PEAK_MORE(BENCH_PEAK_F) }
    BENCH_PEAK_CHAINS(BENCH_PEAK_S) BENCH_PEAK_MORE(BENCH_PEAK_S)
#undef BENCH_PEAK_D
#undef BENCH_PEAK_F
#undef BENCH_PEAK_S
    _mm512_storeu_ps(t, s); /* not _mm512_reduce_add_ps: g++ warns inside it */
    for (j = 0; j < 16; j++) *sink += t[j];
    return (double)BENCH_PEAK_ITERS * 16 * 16 * 2;
}
__attribute__((target("avx2,fma"))) static double bench_peak_avx2(float *sink) {
    __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f), s = _mm256_setzero_ps();
    float t[8];
    long i;
    int j;
#define BENCH_PEAK_D(j) __m256 c##j = _mm256_set1_ps((float)j);
#define BENCH_PEAK_F(j) c##j = _mm256_fmadd_ps(c##j, m, a);
#define BENCH_PEAK_S(j) s = _mm256_add_ps(s, c##j);
    BENCH_PEAK_CHAINS(BENCH_PEAK_D)
    for (i = 0; i < BENCH_PEAK_ITERS; i++) { BENCH_PEAK_CHAINS(BENCH_PEAK_F) }
    BENCH_PEAK_CHAINS(BENCH_PEAK_S)
#undef BENCH_PEAK_D
#undef BENCH_PEAK_F
#undef BENCH_PEAK_S
    _mm256_storeu_ps(t, s);
    for (j = 0; j < 8; j++) *sink += t[j];
    return (double)BENCH_PEAK_ITERS * 12 * 8 * 2;
}
#endif
/* portable fallback: 8 scalar chains (the compiler may vectorise them) */
static double bench_peak_scalar(float *sink) {
    float c[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    long i;
    int j;
    for (i = 0; i < BENCH_PEAK_ITERS / 4; i++)
        for (j = 0; j < 8; j++) c[j] = c[j] * 0.999999f + 1e-7f;
    for (j = 0; j < 8; j++) *sink += c[j];
    return (double)(BENCH_PEAK_ITERS / 4) * 8 * 2;
}
typedef struct {
    double flops, secs;
    float sink;
} bench_peak_arg;
static void *bench_peak_thread(void *p) {
    bench_peak_arg *a = (bench_peak_arg *)p;
    double t0 = bench_peak_now();
    a->sink = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) a->flops = bench_peak_avx512(&a->sink);
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) a->flops = bench_peak_avx2(&a->sink);
    else
#endif
        a->flops = bench_peak_scalar(&a->sink);
    a->secs = bench_peak_now() - t0;
    return NULL;
}
/* GFLOP/s of nt threads (1..16) together, the best of 3 tries; 0 if no
   thread could be started */
static double bench_peak_gflops(int nt) {
    double best = 0;
    int r, t;
    if (nt < 1) nt = 1;
    if (nt > 16) nt = 16;
    for (r = 0; r < 3; r++) {
        pthread_t th[16];
        bench_peak_arg a[16];
        double g = 0;
        int ok[16];
        for (t = 0; t < nt; t++) ok[t] = !pthread_create(&th[t], NULL, bench_peak_thread, &a[t]);
        for (t = 0; t < nt; t++)
            if (ok[t]) {
                pthread_join(th[t], NULL);
                g += a[t].flops / a[t].secs * 1e-9;
                if (a[t].sink == 12345.f) printf(" "); /* keeps the chains' results alive */
            }
        if (g > best) best = g;
    }
    return best;
}
#endif
