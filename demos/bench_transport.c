/* bench_transport.c — the GPT-2 demo's training step on mesh data=2 model=2,
 * as 4 threads of one process or as N processes under mpirun: step time,
 * collectives and bytes each device sends per step, and the time devices
 * spend inside the transport (waiting for peers included).
 *
 *   ./build.sh bench                       (threads, then 4 MPI processes)
 *   ./build/bench_transport [steps]        4 devices as threads
 *   mpirun -np 4 ./build/mpi/bench_transport [steps]   (built with mpicc -DTJ_MPI)
 *   mpirun -np 2 ./build/mpi/bench_transport [steps]   2 processes x 2 devices
 */
#define GPT2_NO_MAIN
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function" /* the demo's helpers this program does not call */
#endif
#include "gpt2_train.c"

static int cmp_ms(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    gpt2_config c;
    gpt2_trainer tr;
    int n = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 10, warm = 2, i, k, np, ntok;
    int32_t *x, *y;
    double *ms, t0, med, mean = 0;
    tj_transport_stats s0, s1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (argc > 2 || (argc > 1 && atoi(argv[1]) < 1)) { /* --help, or not a count */
        fprintf(stderr, "usage: bench_transport [timed steps (10)]   (under mpirun: mpirun -np 4 or -np 2 build/mpi/bench_transport)\n");
        return 2;
    }
    gpt2_default_config(&c); /* the demo's model: L=4 H=4 C=128 T=64 B=8, byte vocab */
    c.param_rules = GPT2_PARAM_RULES;
    c.compute_rules = GPT2_COMPUTE_RULES;
    c.distributed = 1; /* one of several processes when launched by mpirun */
    if (gpt2_trainer_init(&tr, &c, 4, "data=2 model=2", (int)(ncpu / 4 > 0 ? ncpu / 4 : 1))) return 1;
    np = tj_process_count(tr.ctx);
    ntok = c.B * c.T;
    x = (int32_t *)malloc(sizeof(int32_t) * (size_t)ntok);
    y = (int32_t *)malloc(sizeof(int32_t) * (size_t)ntok);
    ms = (double *)malloc(sizeof(double) * (size_t)n);
    s0 = tj_get_transport_stats(tr.ctx);
    for (i = 0; i < n + warm; i++) {
        float loss;
        if (i == warm) s0 = tj_get_transport_stats(tr.ctx);
        for (k = 0; k < ntok; k++) {
            x[k] = (int32_t)(mix64((uint64_t)(i * 100003 + k)) % 256u);
            y[k] = (int32_t)(mix64((uint64_t)(i * 100003 + k) ^ 0xabcdefull) % 256u);
        }
        t0 = now_ms();
        loss = gpt2_train_step(&tr, x, y, 1e-4);
        if (loss != loss) return 1;
        if (i >= warm) ms[i - warm] = now_ms() - t0;
    }
    s1 = tj_get_transport_stats(tr.ctx);
    for (i = 0; i < n; i++) mean += ms[i] / n;
    qsort(ms, (size_t)n, sizeof(double), cmp_ms);
    med = ms[n / 2];
    if (tj_process_index(tr.ctx) == 0) {
        int nl = tj_local_devices(tr.ctx, NULL);
        double steps = n, per = steps * nl;
        printf("bench_transport: GPT-2 demo step (L=%d C=%d T=%d B=%d), mesh data=2 model=2, %d process%s x %d device%s (transport %s), %d thread%s per device\n",
               c.L, c.C, c.T, c.B, np, np > 1 ? "es" : "", nl, nl > 1 ? "s" : "", tj_transport_name(tr.ctx), tr.ctx->threads / nl > 0 ? tr.ctx->threads / nl : 1,
               tr.ctx->threads / nl > 1 ? "s" : "");
        printf("bench_transport: median %.1f ms/step (mean %.1f, best %.1f, worst %.1f) over %d steps\n", med, mean, ms[0], ms[n - 1], n);
        printf("bench_transport: per device per step: %.0f collectives, %.3f MB sent to other devices, %.1f ms inside the transport (%.0f%% of the mean step, "
               "waiting for peers included)\n",
               (double)(s1.collectives - s0.collectives) / per, (double)(s1.bytes_sent - s0.bytes_sent) / per / 1e6, (s1.transport_s - s0.transport_s) / per * 1e3,
               100.0 * (s1.transport_s - s0.transport_s) / per * 1e3 / mean);
        if (np > 1) printf("bench_transport: per process per step: %.3f MB sent to other processes (MPI)\n", (double)(s1.wire_bytes - s0.wire_bytes) / steps / 1e6);
    }
    free(x);
    free(y);
    free(ms);
    gpt2_trainer_free(&tr);
    return 0;
}
