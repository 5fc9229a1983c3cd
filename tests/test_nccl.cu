/* test_nccl.cu — the NCCL transport (tinyjax_cuda.cu built with -DTJ_NCCL)
 * against the CPU transport.
 *
 * Every collective of the transport table (all_gather, psum and pmax as
 * all_reduce, reduce_scatter sum and max, all_to_all, ppermute as a cycle and
 * as an open chain) runs on f32, bf16, f64 and i32 blocks, for three kinds of
 * groups made by split (all ranks; pairs; all ranks with reversed keys), in
 * blocking mode (stream NULL) and ordered after a compute stream (events, no
 * host sync), in NCCL's own mode and in deterministic mode. The reference is
 * the built-in threads transport running every rank of the job as a thread
 * on host copies of the same data (a rank's data is a function of its world
 * rank, so every process can simulate the whole job). Moves are compared bit
 * for bit; reductions bit for bit in deterministic mode (the CPU's
 * arithmetic), within a tolerance otherwise. With two or more GPUs in one
 * process, a collective that one device never joins must time out with a
 * message naming it, and the transport must then refuse further calls.
 * Then tj_run itself: a context on tj_cuda_backend in process mode with an
 * NCCL transport runs every collective of a shard_map through NCCL (device
 * pointers, the compute stream), against a CPU context with as many devices.
 *
 * One process, all GPUs of the machine (at most 8):   ./build/test_nccl
 * Several processes, one GPU each (TCP rendezvous):
 *   for r in 0 1; do TJ_NPROCS=2 TJ_RANK=$r TJ_COORD=127.0.0.1:29500 ./build/test_nccl & done; wait
 * Without a GPU it says why, prints "0 passed, 0 failed, 1 skipped" and exits 0.
 * TJ_NCCL_TEST_CPU=1 puts a second threads transport (4 devices, host
 * memory) in NCCL's place: it checks this test's plumbing without a GPU.
 * Linked with tests/nccl_mock.cpp (a pretend GPU and NCCL in host memory,
 * -cudart shared, no -lnccl) it runs the transport's host logic here: every
 * comparison above, the timeout of a missing peer, and an asynchronous
 * NCCL error on one device that must fail every device, naming the cause.
 *
 *   nvcc -std=c++17 -DTJ_NCCL -I. -c tinyjax_cuda.cu -o build/tinyjax_cuda_nccl.o
 *   nvcc -std=c++17 -Werror all-warnings -I. tests/test_nccl.cu build/tinyjax_cuda_nccl.o -lcublas -lnccl -o build/test_nccl
 *   g++ -std=c++17 -I/usr/local/cuda/include -c tests/nccl_mock.cpp -o build/nccl_mock.o
 *   nvcc -std=c++17 -I. -cudart shared tests/test_nccl.cu build/nccl_mock.o build/tinyjax_cuda_nccl.o -lcublas -o build/test_nccl_mock
 */
#include "tinyjax.h"
#include "tj_test.h"

#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" int tj_nccl_local_rank(int *local_rank, char *err, size_t errlen);
extern "C" int tj_nccl_device_for(int local_rank, int per_process, int ndevices, char *err, size_t errlen);

/* defined by tests/nccl_mock.cpp only (the pretend GPU): the world rank whose NCCL reports an error */
extern "C" int mock_inject_async_error __attribute__((weak));

#define CHECK TJT_CHECK /* tj_test.h */

enum { AG, AR_SUM, AR_MAX, RS_SUM, RS_MAX, A2A, PERM_CYCLE, PERM_CHAIN, NKIND };
static const char *kind_name[NKIND] = {"all_gather", "psum", "pmax", "reduce_scatter sum", "reduce_scatter max", "all_to_all", "ppermute cycle",
                                       "ppermute chain"};
#define COUNT 1001 /* elements per block */
#define MAXN TJ_MAXDEV

static int N, L, P, R, GPU0; /* world ranks, GPUs per process, processes, this process, its first GPU (as the transport picks it) */
static int cpu_mode; /* TJ_NCCL_TEST_CPU=1: the threads transport in NCCL's place, host memory */
static int color[MAXN], key[MAXN], grp_size[MAXN], grp_rank[MAXN];

/* one collective call, the same for both transports */
typedef struct {
    tj_transport *t;
    void *comm;
    int kind, G, me;
    tj_dtype dt;
    const void *send;
    void *recv;
    void *stream;
    int rc;
    char err[1024];
    int cdev; /* NCCL: the CUDA device; CPU: -1 */
} call;
static void *do_call(void *arg) {
    call *c = (call *)arg;
    size_t S = COUNT * tj_dtype_size(c->dt);
    int to = -1, from = -1;
    if (c->cdev >= 0) cudaSetDevice(c->cdev);
    switch (c->kind) {
    case AG: c->rc = c->t->all_gather(c->t, c->comm, c->send, c->recv, S, c->stream, c->err, sizeof c->err); break;
    case AR_SUM:
    case AR_MAX:
        c->rc = c->t->all_reduce(c->t, c->comm, c->send, c->recv, COUNT, c->dt, c->kind == AR_MAX ? TJ_REDUCE_MAX : TJ_REDUCE_SUM, c->stream, c->err,
                                 sizeof c->err);
        break;
    case RS_SUM:
    case RS_MAX:
        c->rc = c->t->reduce_scatter(c->t, c->comm, c->send, c->recv, COUNT, c->dt, c->kind == RS_MAX ? TJ_REDUCE_MAX : TJ_REDUCE_SUM, c->stream, c->err,
                                     sizeof c->err);
        break;
    case A2A: c->rc = c->t->all_to_all(c->t, c->comm, c->send, c->recv, S, c->stream, c->err, sizeof c->err); break;
    default:
        if (c->kind == PERM_CYCLE) {
            to = (c->me + 1) % c->G;
            from = (c->me + c->G - 1) % c->G;
        } else {
            to = c->me + 1 < c->G ? c->me + 1 : -1;
            from = c->me - 1;
        }
        c->rc = c->t->send_recv(c->t, c->comm, c->send, to, c->recv, from, S, c->stream, c->err, sizeof c->err);
        break;
    }
    return NULL;
}
/* device memory, or host memory in cpu_mode */
static void *dalloc(size_t n) {
    void *p = NULL;
    if (cpu_mode) return malloc(n);
    return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}
static void dfree(void *p) {
    if (cpu_mode) free(p);
    else cudaFree(p);
}
static void dcopy(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t st) {
    if (cpu_mode) memcpy(dst, src, n);
    else if (st) cudaMemcpyAsync(dst, src, n, k, st);
    else cudaMemcpy(dst, src, n, k);
}
static void dset(void *p, int v, size_t n, cudaStream_t st) {
    if (cpu_mode) memset(p, v, n);
    else if (st) cudaMemsetAsync(p, v, n, st);
    else cudaMemset(p, v, n);
}
/* blocks each rank sends / receives */
static int send_blocks(int kind, int G) { return kind == RS_SUM || kind == RS_MAX || kind == A2A ? G : 1; }
static int recv_blocks(int kind, int G) { return kind == AG || kind == A2A ? G : 1; }

/* rank r's data: multiples of 1/64 in [-15.6, 15.6] (i32: integers) */
static void gen(void *p, tj_dtype dt, int r, int n, int salt) {
    int i;
    for (i = 0; i < n; i++) {
        double v = (double)((r * 7919 + i * 31 + salt * 17) % 2001 - 1000) / (dt == TJ_I32 ? 1.0 : 64.0);
        switch (dt) {
        case TJ_F32: ((float *)p)[i] = (float)v; break;
        case TJ_BF16: ((uint16_t *)p)[i] = tj_f32_to_bf16((float)v); break;
        case TJ_I32: ((int32_t *)p)[i] = (int32_t)v; break;
        default: ((double *)p)[i] = v; break;
        }
    }
}
static double at(const void *p, tj_dtype dt, int i) {
    switch (dt) {
    case TJ_F32: return ((const float *)p)[i];
    case TJ_BF16: return tj_bf16_to_f32(((const uint16_t *)p)[i]);
    case TJ_I32: return ((const int32_t *)p)[i];
    default: return ((const double *)p)[i];
    }
}

/* run every kind and dtype on one split; ct: the CPU reference */
static void run_split(const char *what, tj_transport *nt, tj_transport *ct, int det) {
    static const tj_dtype dts[4] = {TJ_F32, TJ_BF16, TJ_F64, TJ_I32};
    void *ncomm[MAXN], *ccomm[MAXN];
    int dev[MAXN], i, k, d, mode, lo = R * L;
    char err[1024];
    for (i = 0; i < N; i++) dev[i] = i;
    err[0] = 0;
    if (nt->split(nt, L, dev + lo, color + lo, key + lo, ncomm, err, sizeof err)) {
        CHECK(0, "%s: NCCL split: %s", what, err);
        return;
    }
    if (ct->split(ct, N, dev, color, key, ccomm, err, sizeof err)) {
        CHECK(0, "%s: CPU split: %s", what, err);
        return;
    }
    for (d = 0; d < 4; d++)
        for (k = 0; k < NKIND; k++)
            for (mode = 0; mode < 2; mode++) { /* 0: blocking, 1: after a compute stream */
                tj_dtype dt = dts[d];
                size_t S = COUNT * tj_dtype_size(dt);
                call cc[MAXN], nc[MAXN];
                pthread_t th[MAXN];
                void *hsend[MAXN], *hrecv[MAXN], *dsend[MAXN], *drecv[MAXN], *back[MAXN];
                cudaStream_t st[MAXN];
                int r, ok = 1, exact = !(k == AR_SUM || k == RS_SUM) || det || dt == TJ_I32;
                double worst = 0;
                for (r = 0; r < N; r++) { /* the CPU: every rank of the job */
                    int G = grp_size[r], sb = send_blocks(k, G), rb = recv_blocks(k, G);
                    hsend[r] = malloc(S * (size_t)sb);
                    hrecv[r] = malloc(S * (size_t)rb);
                    gen(hsend[r], dt, r, COUNT * sb, k);
                    memset(hrecv[r], 0x5a, S * (size_t)rb); /* what a rank that receives nothing keeps */
                    memset(&cc[r], 0, sizeof cc[r]);
                    cc[r].t = ct;
                    cc[r].comm = ccomm[r];
                    cc[r].kind = k;
                    cc[r].G = G;
                    cc[r].me = grp_rank[r];
                    cc[r].dt = dt;
                    cc[r].send = hsend[r];
                    cc[r].recv = hrecv[r];
                    cc[r].cdev = -1;
                    pthread_create(&th[r], NULL, do_call, &cc[r]);
                }
                for (r = 0; r < N; r++) pthread_join(th[r], NULL);
                for (i = 0; i < L; i++) { /* NCCL: this process's ranks */
                    int g = lo + i, G = grp_size[g], sb = send_blocks(k, G), rb = recv_blocks(k, G);
                    memset(&nc[i], 0, sizeof nc[i]);
                    nc[i].cdev = cpu_mode ? -1 : GPU0 + i;
                    st[i] = NULL;
                    if (!cpu_mode) cudaSetDevice(nc[i].cdev);
                    if (mode && !cpu_mode) cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking);
                    dsend[i] = dalloc(S * (size_t)sb);
                    drecv[i] = dalloc(S * (size_t)rb);
                    back[i] = malloc(S * (size_t)rb);
                    /* mode 1: the data arrives on the compute stream: the transport must wait for it */
                    dcopy(dsend[i], hsend[g], S * (size_t)sb, cudaMemcpyHostToDevice, st[i]);
                    dset(drecv[i], 0x5a, S * (size_t)rb, st[i]);
                    nc[i].t = nt;
                    nc[i].comm = ncomm[i];
                    nc[i].kind = k;
                    nc[i].G = G;
                    nc[i].me = grp_rank[g];
                    nc[i].dt = dt;
                    nc[i].send = dsend[i];
                    nc[i].recv = drecv[i];
                    nc[i].stream = st[i];
                    pthread_create(&th[i], NULL, do_call, &nc[i]);
                }
                for (i = 0; i < L; i++) pthread_join(th[i], NULL);
                for (i = 0; i < L; i++) {
                    int g = lo + i, rb = recv_blocks(k, grp_size[g]), j;
                    if (!cpu_mode) cudaSetDevice(nc[i].cdev);
                    dcopy(back[i], drecv[i], S * (size_t)rb, cudaMemcpyDeviceToHost, st[i]); /* mode 1: ordered after the collective by its event */
                    if (st[i]) cudaStreamSynchronize(st[i]);
                    if (nc[i].rc || cc[g].rc) {
                        ok = 0;
                        fprintf(stderr, "  rank %d: nccl: %s cpu: %s\n", g, nc[i].err, cc[g].err);
                    } else if (exact) ok &= !memcmp(back[i], hrecv[g], S * (size_t)rb);
                    else { /* relative to the largest value: each rank-order rounding is within an ulp of it */
                        double scale = 1;
                        for (j = 0; j < COUNT * rb; j++) scale = fabs(at(hrecv[g], dt, j)) > scale ? fabs(at(hrecv[g], dt, j)) : scale;
                        for (j = 0; j < COUNT * rb; j++) {
                            double e = fabs(at(back[i], dt, j) - at(hrecv[g], dt, j)) / scale;
                            worst = e > worst ? e : worst;
                        }
                    }
                    dfree(dsend[i]);
                    dfree(drecv[i]);
                    if (st[i]) cudaStreamDestroy(st[i]);
                    free(back[i]);
                }
                if (!exact) ok &= worst <= (dt == TJ_BF16 ? 2e-2 : dt == TJ_F32 ? 1e-5 : 1e-12);
                CHECK(ok, "%s, %s, %s, %s, %s: NCCL %s the CPU transport (worst relative error %g)", what, kind_name[k], tj_dtype_name(dt),
                      mode ? "after a compute stream" : "blocking", det ? "deterministic" : "NCCL order", exact ? "bit-equal to" : "close to", worst);
                for (r = 0; r < N; r++) {
                    free(hsend[r]);
                    free(hrecv[r]);
                }
            }
    for (i = 0; i < L; i++) nt->comm_free(nt, ncomm[i]);
    for (i = 0; i < N; i++) ct->comm_free(ct, ccomm[i]);
}
/* the groups of a split: rank in group = position by key, then device */
static void groups(void) {
    int i, j;
    for (i = 0; i < N; i++) {
        grp_size[i] = grp_rank[i] = 0;
        for (j = 0; j < N; j++)
            if (color[j] == color[i]) {
                grp_size[i]++;
                grp_rank[i] += key[j] < key[i] || (key[j] == key[i] && j < i);
            }
    }
}

/* ---- tj_run's collectives through NCCL on the CUDA backend ----
   A context on tj_cuda_backend with tj_distributed_init(ctx, {transport =
   an NCCL transport of one GPU per process}): one mesh device per process,
   mesh "model=P" (a mesh of size 1 in one process still calls NCCL). A
   shard_map runs psum, pmax, all_gather, psum_scatter, all_to_all and
   ppermute (f32, bf16, f64, i32) through NCCL with device pointers and the
   compute stream; the reference is a CPU context with P devices in this
   process. Moves are compared bit for bit, reductions bit for bit in
   deterministic mode, within a tolerance in NCCL's order. */
extern "C" tj_backend *tj_cuda_backend(int device, char *err, size_t errlen);
extern "C" void tj_cuda_backend_free(tj_backend *b);
#define NRUNOUT 6
static int run_G;
static void run_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    int cycle[2 * MAXN], r;
    (void)g;
    (void)u;
    for (r = 0; r < run_G; r++) cycle[2 * r] = r, cycle[2 * r + 1] = (r + 1) % run_G;
    out[0] = tj_psum(in[0], "model");
    out[1] = tj_pmax(in[0], "model");
    out[2] = tj_all_gather(in[0], "model", "embed");
    out[3] = tj_psum_scatter(in[0], "model", "embed");
    out[4] = tj_all_to_all(in[0], "model", "embed", "batch");
    out[5] = tj_ppermute(in[0], "model", run_G, cycle);
}
static void run_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    static const char *names[NRUNOUT] = {"psum", "pmax", "all_gather", "psum_scatter", "all_to_all", "ppermute"};
    const char *is[1] = {"embed:model"}, *os[NRUNOUT];
    tj_v x = tj_tree_v(in, "x"), y[NRUNOUT];
    int i;
    (void)g;
    for (i = 0; i < NRUNOUT; i++) os[i] = "embed:model";
    if (tj_shard_map(run_region, u, 1, &x, is, NRUNOUT, y, os, 0) != TJ_OK) return;
    for (i = 0; i < NRUNOUT; i++) tj_tree_set_v(out, names[i], y[i]);
}
/* run_fn on x in ctx; the outputs (every process's blocks) into res[i] */
static int run_program(tj_ctx *ctx, tj_dtype dt, void **res, int64_t *n) {
    int64_t ne = 4 * 8 * (int64_t)P, i;
    char shape[64];
    void *h = malloc((size_t)ne * 8);
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    int rc = 1;
    gen(h, dt, 0, (int)ne, 5);
    snprintf(shape, sizeof shape, "batch=4 embed=%d", 8 * P);
    tj_tree_set_array(in, "x", tj_array_new(ctx, dt, shape, h));
    p = tj_jit(ctx, "collectives through the transport", run_fn, NULL, in, NULL);
    if (p && tj_run(p, in, out) == TJ_OK && tj_tree_size(out) == NRUNOUT) {
        rc = 0;
        for (i = 0; i < NRUNOUT; i++) {
            tj_array *a = tj_tree_array_at(out, (int)i);
            n[i] = tj_array_numel(a);
            res[i] = calloc((size_t)n[i] + 1, 8);
            if (tj_array_read_all(a, dt, res[i]) != TJ_OK) rc = 1;
        }
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    free(h);
    return rc;
}
static void test_cuda_backend_runs(void) {
    static const tj_dtype dts[4] = {TJ_F32, TJ_BF16, TJ_F64, TJ_I32};
    int det, d, i, local = 0, ndev = 0, gpu;
    char err[1024];
    cudaGetDeviceCount(&ndev);
    if (tj_nccl_local_rank(&local, err, sizeof err)) local = -1;
    if (local < 0) local = ndev > 0 ? R % ndev : 0; /* as the transport picks its GPU */
    gpu = tj_nccl_device_for(local, 1, ndev, err, sizeof err);
    run_G = P;
    for (det = 0; det < 2; det++) {
        tj_transport *nt = tj_nccl_transport_new(1, 60, det, err, sizeof err);
        tj_backend *be = gpu >= 0 ? tj_cuda_backend(gpu, err, sizeof err) : NULL;
        tj_ctx *ctx = tj_ctx_new(), *cpu = tj_ctx_new();
        tj_distributed_opts o;
        char mesh[32];
        CHECK(nt && be, "CUDA backend + NCCL: %s", err);
        if (!nt || !be) {
            tj_ctx_free(ctx);
            tj_ctx_free(cpu);
            if (nt) nt->free(nt);
            if (be) tj_cuda_backend_free(be);
            return;
        }
        memset(&o, 0, sizeof o);
        o.transport = nt;
        tj_set_backend(ctx, be);
        snprintf(mesh, sizeof mesh, "model=%d", P);
        CHECK(tj_distributed_init(ctx, &o) == TJ_OK && tj_set_mesh(ctx, mesh) == TJ_OK && tj_devices(ctx) == P, "tj_distributed_init: %s", tj_error(ctx));
        tj_set_devices(cpu, P);
        tj_set_mesh(cpu, mesh);
        for (d = 0; d < 4; d++) {
            void *rn[NRUNOUT], *rc[NRUNOUT];
            int64_t nn[NRUNOUT], nc[NRUNOUT];
            tj_transport_stats s0 = tj_get_transport_stats(ctx), s1;
            int okn = !run_program(ctx, dts[d], rn, nn), okc = !run_program(cpu, dts[d], rc, nc);
            s1 = tj_get_transport_stats(ctx);
            CHECK(okn && okc, "tj_run %s on the CUDA backend through NCCL: %s / cpu: %s", tj_dtype_name(dts[d]), tj_error(ctx), tj_error(cpu));
            CHECK(!strcmp(tj_transport_name(ctx), "nccl") && s1.collectives - s0.collectives == NRUNOUT,
                  "tj_run's collectives went through '%s' (%lld calls, want %d)", tj_transport_name(ctx), (long long)(s1.collectives - s0.collectives), NRUNOUT);
            for (i = 0; okn && okc && i < NRUNOUT; i++) {
                int exact = det || P == 1 || dts[d] == TJ_I32 || (i != 0 && i != 3), j; /* 0, 3: sums in NCCL's order */
                double worst = 0;
                if (nn[i] != nc[i]) {
                    CHECK(0, "output %d: %lld vs %lld elements", i, (long long)nn[i], (long long)nc[i]);
                    continue;
                }
                for (j = 0; j < nn[i]; j++) {
                    double e = fabs(at(rn[i], dts[d], j) - at(rc[i], dts[d], j)) / (1 + fabs(at(rc[i], dts[d], j)));
                    worst = e > worst ? e : worst;
                }
                if (exact) CHECK(!memcmp(rn[i], rc[i], (size_t)nn[i] * tj_dtype_size(dts[d])), "tj_run %s, output %d, %s: NCCL on the CUDA backend bit-equal to the CPU (worst %g)",
                                 tj_dtype_name(dts[d]), i, det ? "deterministic" : "NCCL order", worst);
                else CHECK(worst <= (dts[d] == TJ_BF16 ? 2e-2 : dts[d] == TJ_F32 ? 1e-5 : 1e-12), "tj_run %s, output %d: close to the CPU (worst %g)",
                           tj_dtype_name(dts[d]), i, worst);
            }
            for (i = 0; i < NRUNOUT; i++) {
                if (okn) free(rn[i]);
                if (okc) free(rc[i]);
            }
            tj_clear_error(ctx);
            tj_clear_error(cpu);
        }
        tj_ctx_free(ctx);
        tj_ctx_free(cpu);
        nt->free(nt);
        tj_cuda_backend_free(be);
    }
}

int main(void) {
    int ndev = 0, det, i, local = 0;
    char err[1024];
    const char *e;
    cudaError_t ce;
    cpu_mode = (e = getenv("TJ_NCCL_TEST_CPU")) != NULL && atoi(e) > 0;
    ce = cpu_mode ? cudaSuccess : cudaGetDeviceCount(&ndev);
    if (cpu_mode) ndev = 4;
    if (ce != cudaSuccess || ndev < 1) {
        printf("test_nccl: skipped: %s (the NCCL transport needs a GPU; tests/test_nccl_boot.cu covers its bootstrap here)\n",
               ce != cudaSuccess ? cudaGetErrorString(ce) : "no CUDA device");
        printf("0 passed, 0 failed, 1 skipped\n");
        return 0;
    }
    P = (e = getenv("TJ_NPROCS")) ? atoi(e) : (e = getenv("OMPI_COMM_WORLD_SIZE")) ? atoi(e) : 1;
    R = (e = getenv("TJ_RANK")) ? atoi(e) : (e = getenv("OMPI_COMM_WORLD_RANK")) ? atoi(e) : 0;
    L = P > 1 ? 1 : ndev < 8 ? ndev : 8;
    N = P * L;
    if (cpu_mode) P = 1, R = 0, L = N = 4;
    if (tj_nccl_local_rank(&local, err, sizeof err)) GPU0 = -1;
    else {
        if (local < 0) local = ndev / L > 0 ? R % (ndev / L) : 0; /* as the transport does */
        GPU0 = tj_nccl_device_for(local, L, ndev, err, sizeof err);
    }
    if (GPU0 < 0) {
        CHECK(0, "%s", err);
        tjt_finish();
        return 1;
    }
    printf("test_nccl: %d process%s x %d GPU%s\n", P, P == 1 ? "" : "es", L, L == 1 ? "" : "s");
    for (det = 0; det < 2; det++) {
        tj_transport *nt = cpu_mode ? tj_threads_transport_new(60) : tj_nccl_transport_new(L, 60, det, err, sizeof err), *ct = tj_threads_transport_new(60);
        CHECK(nt != NULL, "tj_nccl_transport_new: %s", err);
        if (!nt) break;
        CHECK(!strcmp(nt->name, cpu_mode ? "threads" : "nccl") && nt->nprocs == P && nt->rank == R, "transport %s, process %d of %d", nt->name, nt->rank, nt->nprocs);
        for (i = 0; i < N; i++) color[i] = 0, key[i] = i;
        groups();
        run_split("one group", nt, ct, det);
        for (i = 0; i < N; i++) color[i] = i / 2, key[i] = i % 2;
        groups();
        run_split("pairs", nt, ct, det);
        for (i = 0; i < N; i++) color[i] = 0, key[i] = N - 1 - i;
        groups();
        run_split("one group, reversed keys", nt, ct, det);
        if (P > 1) { /* host agreement between processes */
            int mine[2] = {R, 1000 + R}, all[2 * MAXN], ok = 1;
            CHECK(!nt->proc_allgather(nt, mine, all, sizeof mine, err, sizeof err), "proc_allgather: %s", err);
            for (i = 0; i < P; i++) ok &= all[2 * i] == i && all[2 * i + 1] == 1000 + i;
            CHECK(ok, "proc_allgather: every process's bytes in process order");
        }
        nt->free(nt);
        ct->free(ct);
    }
    if (!cpu_mode) { /* host memory is refused before NCCL sees it */
        tj_transport *nt = tj_nccl_transport_new(L, 60, 0, err, sizeof err);
        void *comm[MAXN];
        int dev[MAXN];
        char hs[64], hr[64 * MAXN];
        CHECK(nt != NULL, "tj_nccl_transport_new: %s", err);
        for (i = 0; i < L; i++) dev[R * L + i] = R * L + i, color[R * L + i] = 0, key[R * L + i] = R * L + i;
        if (nt && !nt->split(nt, L, dev + R * L, color + R * L, key + R * L, comm, err, sizeof err)) {
            int rc = nt->all_gather(nt, comm[0], hs, hr, sizeof hs, NULL, err, sizeof err);
            CHECK(rc && strstr(err, "send buffer of all_gather is not CUDA device memory"), "host buffers: %s", err);
            printf("  host buffers: %s\n", err);
            for (i = 0; i < L; i++) nt->comm_free(nt, comm[i]);
        } else CHECK(0, "split: %s", err);
        if (nt) nt->free(nt);
    }
    if (&mock_inject_async_error && !cpu_mode && P == 1 && L >= 2) { /* tests/nccl_mock.cpp: device 1's NCCL reports a remote error */
        tj_transport *nt = tj_nccl_transport_new(L, 5, 0, err, sizeof err);
        void *comm[MAXN], *buf[MAXN];
        int dev[MAXN], bad = 0, named = 0;
        call nc[MAXN];
        pthread_t th[MAXN];
        for (i = 0; i < L; i++) dev[i] = i, color[i] = 0, key[i] = i;
        if (nt && !nt->split(nt, L, dev, color, key, comm, err, sizeof err)) {
            mock_inject_async_error = 1;
            for (i = 0; i < L; i++) {
                memset(&nc[i], 0, sizeof nc[i]);
                cudaSetDevice(GPU0 + i);
                buf[i] = dalloc(COUNT * 4 * (size_t)L);
                nc[i].t = nt, nc[i].comm = comm[i], nc[i].kind = AG, nc[i].G = L, nc[i].me = i, nc[i].dt = TJ_F32;
                nc[i].send = buf[i], nc[i].recv = buf[i], nc[i].cdev = GPU0 + i; /* all_gather of block 0 in place: only the failure matters */
                pthread_create(&th[i], NULL, do_call, &nc[i]);
            }
            for (i = 0; i < L; i++) pthread_join(th[i], NULL);
            mock_inject_async_error = -1;
            printf("  device 1: %s\n  device 0: %s\n", nc[1].err, nc[0].err);
            for (i = 0; i < L; i++) {
                bad += nc[i].rc != 0;
                named += strstr(nc[i].err, i == 1 ? "remote process exited" : "broke") != NULL;
                if (!strstr(nc[i].err, i == 1 ? "remote process exited" : "broke")) fprintf(stderr, "  device %d: %s\n", i, nc[i].err);
                dfree(buf[i]);
            }
            CHECK(bad == L && named == L, "an asynchronous NCCL error on device 1: every device fails (%d of %d), naming the cause (%d)", bad, L, named);
            for (i = 0; i < L; i++) nt->comm_free(nt, comm[i]);
        } else CHECK(0, "transport or split: %s", err);
        if (nt) nt->free(nt);
    }
    if (P == 1 && L >= 2 && !cpu_mode) { /* a device that never joins: a timeout naming the collective, then a broken transport */
        tj_transport *nt = tj_nccl_transport_new(L, 2, 0, err, sizeof err);
        void *comm[MAXN], *buf = NULL, *out = NULL;
        int dev[MAXN];
        CHECK(nt != NULL, "tj_nccl_transport_new: %s", err);
        if (nt) {
            for (i = 0; i < L; i++) dev[i] = i, color[i] = 0, key[i] = i;
            if (!nt->split(nt, L, dev, color, key, comm, err, sizeof err)) {
                int rc;
                cudaSetDevice(0);
                cudaMalloc(&buf, 4096);
                cudaMalloc(&out, 4096 * (size_t)L);
                rc = nt->all_gather(nt, comm[0], buf, out, 4096, NULL, err, sizeof err); /* device 1 never joins */
                CHECK(rc && strstr(err, "all_gather #1") && strstr(err, "timed out after 2 s"), "a missing peer: %s", err);
                printf("  a missing peer: %s\n", err);
                rc = nt->all_reduce(nt, comm[1], buf, out, 16, TJ_F32, TJ_REDUCE_SUM, NULL, err, sizeof err);
                CHECK(rc && strstr(err, "broken") && strstr(err, "all_gather #1"), "after the timeout: %s", err);
                printf("  the next call: %s\n", err);
                cudaFree(buf);
                cudaFree(out);
                for (i = 0; i < L; i++) nt->comm_free(nt, comm[i]);
            } else CHECK(0, "split: %s", err);
            nt->free(nt);
        }
    }
    if (!cpu_mode && !&mock_inject_async_error) test_cuda_backend_runs(); /* the mock pretends no GPU a backend could compute on */
    return tjt_finish();
}
