/* nccl_mock.cpp — a pretend GPU and NCCL in host memory, so that the NCCL
 * transport's host logic (communicators, splits, the ring of collectives in
 * flight, events, the watchdog, timeouts and aborts, the deterministic path)
 * runs on a machine without a GPU. Linked into tests/test_nccl.cu instead of
 * libnccl, with the shared CUDA runtime (-cudart shared): the functions
 * defined here take the place of the runtime's for the executable.
 *
 * What it is: 4 "GPUs" whose memory is malloc'd host memory; streams run
 * their work at once; one process, every rank a thread. Collectives meet in
 * shared records; p2p goes through mailboxes. A rank that waits 1 s for a
 * peer gives up and leaves its stream "hung" (its events never complete)
 * until the communicator is aborted: what a GPU does when a peer never
 * comes. The one kernel the transport launches (tjn_k_reduce, deterministic
 * mode) is run by a host copy of its code. What it is not: NCCL's
 * semantics beyond what the transport uses, several processes, real
 * asynchrony, a check of the CUDA kernel itself.
 *
 *   g++ -std=c++17 -O1 -Wall -Wextra -Werror -I/usr/local/cuda/include -c tests/nccl_mock.cpp -o build/nccl_mock.o
 *   nvcc -std=c++17 -I. -cudart shared tests/test_nccl.cu build/nccl_mock.o build/tinyjax_cuda_nccl.o -lcublas -o build/test_nccl_mock
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <map>
#include <set>
#include <deque>
#include <vector>

#define MOCK_GPUS 4
#define MOCK_WAIT_S 1.0 /* generous: a loaded machine must not look like a dead peer */

struct CUstream_st {
    int hung;
};
struct CUevent_st {
    CUstream_st *s;
    int pending; /* recorded while its stream was hung */
};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static std::set<void *> devmem;
static thread_local int cur_dev;
static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}
static void deadline(struct timespec *ts, double s) {
    double t = now_s() + s;
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
}

/* ---- the CUDA runtime ---- */
extern "C" {
cudaError_t cudaGetDeviceCount(int *n) {
    *n = MOCK_GPUS;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= MOCK_GPUS) return cudaErrorInvalidDevice;
    cur_dev = d;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : e == cudaErrorNotReady ? "not ready" : "mock CUDA error"; }
cudaError_t cudaMalloc(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    pthread_mutex_lock(&mu);
    devmem.insert(*p);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    pthread_mutex_lock(&mu);
    devmem.erase(p);
    pthread_mutex_unlock(&mu);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t cudaFreeAsync(void *p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) { /* device memory: the start of a cudaMalloc block */
    memset(a, 0, sizeof *a);
    pthread_mutex_lock(&mu);
    a->type = devmem.count((void *)p) ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t) { return cudaMemcpy(d, s, n, k); }
cudaError_t cudaMemset(void *p, int v, size_t n) {
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { return cudaMemset(p, v, n); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = (cudaStream_t)calloc(1, sizeof(CUstream_st));
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    free(s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return s && s->hung ? cudaErrorLaunchTimeout : cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    *e = (cudaEvent_t)calloc(1, sizeof(CUevent_st));
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    free(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    pthread_mutex_lock(&mu);
    e->s = s;
    e->pending = s && s->hung;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    cudaError_t r;
    pthread_mutex_lock(&mu);
    r = e->pending && e->s && e->s->hung ? cudaErrorNotReady : cudaSuccess;
    pthread_mutex_unlock(&mu);
    return r;
}

/* kernel launches: the configuration stack and the one kernel of the transport */
static thread_local dim3 cfg_grid, cfg_block;
static thread_local size_t cfg_shmem;
static thread_local void *cfg_stream;
unsigned __cudaPushCallConfiguration(dim3 g, dim3 b, size_t sh, struct CUstream_st *s) {
    cfg_grid = g;
    cfg_block = b;
    cfg_shmem = sh;
    cfg_stream = s;
    return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3 *g, dim3 *b, size_t *sh, void *s) {
    *g = cfg_grid;
    *b = cfg_block;
    *sh = cfg_shmem;
    *(void **)s = cfg_stream;
    return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *f) {
    *k = (cudaKernel_t)f;
    return cudaSuccess;
}
}
/* host copies of tjc_cpu_ld / tjc_cpu_st (tj__ld / tj__st) */
static double ld(const void *p, int dt, int64_t i) {
    switch (dt) {
    case 0: return ((const float *)p)[i];
    case 1: {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case 2: return ((const int32_t *)p)[i];
    default: return ((const double *)p)[i];
    }
}
static void st(void *p, int dt, int64_t i, double v) {
    switch (dt) {
    case 0: ((float *)p)[i] = (float)v; break;
    case 1: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) u = (u >> 16) | 0x40;
        else u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        ((uint16_t *)p)[i] = (uint16_t)u;
        break;
    }
    case 2: ((int32_t *)p)[i] = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v; break;
    default: ((double *)p)[i] = v; break;
    }
}
extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void **a, size_t, cudaStream_t) { /* tjn_k_reduce */
    const char *blocks = *(const char **)a[0];
    size_t stride = *(size_t *)a[1];
    int G = *(int *)a[2], dt = *(int *)a[4], ismax = *(int *)a[6], steps = *(int *)a[7];
    void *out = *(void **)a[3];
    int64_t n = *(int64_t *)a[5], i;
    for (i = 0; i < n; i++) {
        double acc = ld(blocks, dt, i);
        for (int r = 1; r < G; r++) {
            double b = ld(blocks + (size_t)r * stride, dt, i);
            acc = ismax ? (b > acc ? b : acc) : acc + b;
            if (steps && r + 1 < G) {
                double x[1];
                st(x, dt, 0, acc);
                acc = ld(x, dt, 0);
            }
        }
        st(out, dt, i, acc);
    }
    return cudaSuccess;
}

/* ---- NCCL ---- */
struct mgroup { /* the members of one communicator */
    int size;
    unsigned long gen;
    int arrived;
    int broken; /* a member gave up: the others give up too */
    const void *send[64];
    void *recv[64];
};
struct ncclComm {
    mgroup *g;
    int rank, aborted, world_rank;
    cudaStream_t last;
    ncclResult_t async;
};
/* the group call of this thread: splits and p2p wait for ncclGroupEnd */
struct pending_split {
    ncclComm_t parent;
    int color, key;
    ncclComm_t *out;
};
struct pending_p2p {
    int send, peer;
    const void *sbuf;
    void *rbuf;
    size_t bytes;
    ncclComm_t comm;
    cudaStream_t s;
};
static thread_local int depth;
static thread_local std::vector<pending_split> splits;
static thread_local std::vector<pending_p2p> p2p;
static std::map<int, mgroup *> worlds;
static std::map<std::pair<mgroup *, int>, std::deque<std::vector<char> > > mail; /* (group, from * 256 + to) -> messages */
static std::vector<pending_split> split_all; /* splits of every world rank (threads may split separately) */
static unsigned long split_gen;
extern "C" int mock_inject_async_error;
int mock_inject_async_error = -1; /* world rank whose communicators report ncclRemoteError */

static void hang(ncclComm_t c, cudaStream_t s) {
    c->last = s;
    if (s) s->hung = 1;
}
/* every member posts, waits (MOCK_WAIT_S at most), computes, waits again */
static int meet(ncclComm_t c, const void *send, void *recv, void (*f)(ncclComm_t, void *), void *arg, cudaStream_t s) {
    mgroup *g = c->g;
    struct timespec ts;
    unsigned long gen;
    int ok = 1, phase;
    c->last = s;
    for (phase = 0; phase < 2 && ok; phase++) {
        pthread_mutex_lock(&mu);
        if (phase == 0) {
            g->send[c->rank] = send;
            g->recv[c->rank] = recv;
        }
        gen = g->gen;
        if (++g->arrived == g->size) {
            g->arrived = 0;
            g->gen++;
            pthread_cond_broadcast(&cv);
        } else {
            deadline(&ts, MOCK_WAIT_S);
            while (gen == g->gen && !g->broken && pthread_cond_timedwait(&cv, &mu, &ts) == 0) {
            }
            if (gen == g->gen) { /* gave up: as a GPU kernel waiting forever */
                g->broken = 1;
                g->arrived--;
                pthread_cond_broadcast(&cv);
                ok = 0;
            }
        }
        pthread_mutex_unlock(&mu);
        if (ok && phase == 0) f(c, arg);
    }
    if (!ok) hang(c, s);
    return ok;
}
static size_t tsize(ncclDataType_t t) { return t == ncclFloat64 ? 8 : t == ncclBfloat16 ? 2 : t == ncclUint8 || t == ncclInt8 ? 1 : 4; }
static int tdt(ncclDataType_t t) { return t == ncclFloat32 ? 0 : t == ncclBfloat16 ? 1 : t == ncclInt32 ? 2 : 3; }
struct carg {
    size_t count;
    ncclDataType_t t;
    ncclRedOp_t op;
};
static void f_gather(ncclComm_t c, void *a) {
    size_t n = ((carg *)a)->count * tsize(((carg *)a)->t);
    for (int r = 0; r < c->g->size; r++) memcpy((char *)c->g->recv[c->rank] + r * n, c->g->send[r], n);
}
/* a ring-like order: start at rank+1 (not the CPU's order, like NCCL) */
static void f_reduce(ncclComm_t c, void *a, int scatter) {
    carg *x = (carg *)a;
    size_t n = x->count, i;
    int dt = tdt(x->t), G = c->g->size;
    size_t off = scatter ? (size_t)c->rank * n : 0;
    for (i = 0; i < n; i++) {
        double acc = 0;
        for (int k = 0; k < G; k++) {
            int r = (c->rank + 1 + k) % G;
            double v = ld(c->g->send[r], dt, (int64_t)(off + i));
            acc = k == 0 ? v : x->op == ncclMax ? (v > acc ? v : acc) : acc + v;
        }
        st(c->g->recv[c->rank], dt, (int64_t)i, acc);
    }
}
static void f_allreduce(ncclComm_t c, void *a) { f_reduce(c, a, 0); }
static void f_scatter(ncclComm_t c, void *a) { f_reduce(c, a, 1); }

extern "C" {
const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : r == ncclRemoteError ? "remote process exited or there was a network error" : "mock NCCL error"; }
const char *ncclGetLastError(ncclComm_t) { return "mock"; }
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 7, sizeof *id);
    return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t *c, int nranks, ncclUniqueId, int rank, ncclConfig_t *cfg) {
    mgroup *g;
    if (!cfg || cfg->blocking != 0) return ncclInvalidArgument; /* the transport asks for non-blocking communicators */
    pthread_mutex_lock(&mu);
    if (!worlds.count(nranks) || worlds[nranks]->broken) {
        g = (mgroup *)calloc(1, sizeof *g);
        g->size = nranks;
        worlds[nranks] = g;
    }
    g = worlds[nranks];
    pthread_mutex_unlock(&mu);
    *c = (ncclComm_t)calloc(1, sizeof(ncclComm));
    (*c)->g = g;
    (*c)->rank = (*c)->world_rank = rank;
    (*c)->async = ncclInProgress; /* ready after the first poll */
    return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) {
    if (c->async == ncclInProgress) {
        c->async = ncclSuccess;
        *r = ncclInProgress;
        return ncclSuccess;
    }
    *r = c->world_rank == mock_inject_async_error ? ncclRemoteError : c->async;
    return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t c, int *n) {
    *n = c->g->size;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r) {
    *r = c->rank;
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) {
    pthread_mutex_lock(&mu);
    c->aborted = 1;
    if (c->last) c->last->hung = 0; /* its kernels end */
    c->g->broken = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclInProgress; }
ncclResult_t ncclCommDestroy(ncclComm_t c) {
    free(c);
    return ncclSuccess;
}
ncclResult_t ncclGroupStart(void) {
    depth++;
    return ncclSuccess;
}
ncclResult_t ncclCommSplit(ncclComm_t parent, int color, int key, ncclComm_t *out, ncclConfig_t *cfg) {
    pending_split p = {parent, color, key, out};
    if (!cfg || cfg->blocking != 0) return ncclInvalidArgument;
    *out = NULL;
    if (!depth) return ncclInvalidUsage; /* the transport always splits in a group */
    splits.push_back(p);
    return ncclSuccess;
}
ncclResult_t ncclSend(const void *b, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    pending_p2p p = {1, peer, b, NULL, n * tsize(t), c, s};
    if (!depth) return ncclInvalidUsage;
    if (peer < 0 || peer >= c->g->size || peer == c->rank) return ncclInvalidArgument; /* the transport copies its own block */
    p2p.push_back(p);
    return ncclSuccess;
}
ncclResult_t ncclRecv(void *b, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    pending_p2p p = {0, peer, NULL, b, n * tsize(t), c, s};
    if (!depth) return ncclInvalidUsage;
    if (peer < 0 || peer >= c->g->size || peer == c->rank) return ncclInvalidArgument;
    p2p.push_back(p);
    return ncclSuccess;
}
static std::pair<mgroup *, int> mkey(mgroup *g, int from, int to) { return std::make_pair(g, from * 256 + to); }
ncclResult_t ncclGroupEnd(void) {
    size_t i;
    struct timespec ts;
    if (--depth) return ncclSuccess;
    if (!splits.empty()) { /* all world ranks split together (the transport: one thread per process, every local GPU) */
        pthread_mutex_lock(&mu);
        int W = splits[0].parent->g->size;
        for (i = 0; i < splits.size(); i++) split_all.push_back(splits[i]);
        splits.clear();
        if ((int)split_all.size() == W) {
            std::map<int, mgroup *> made;
            for (i = 0; i < split_all.size(); i++) {
                pending_split &p = split_all[i];
                ncclComm_t c = (ncclComm_t)calloc(1, sizeof(ncclComm));
                int rank = 0;
                for (size_t j = 0; j < split_all.size(); j++) {
                    pending_split &q = split_all[j];
                    if (q.color == p.color && (q.key < p.key || (q.key == p.key && q.parent->rank < p.parent->rank))) rank++;
                }
                if (!made.count(p.color)) {
                    made[p.color] = (mgroup *)calloc(1, sizeof(mgroup));
                    for (size_t j = 0; j < split_all.size(); j++) made[p.color]->size += split_all[j].color == p.color;
                }
                c->g = made[p.color];
                c->rank = rank;
                c->world_rank = p.parent->world_rank;
                c->async = ncclInProgress;
                *p.out = c;
            }
            split_all.clear();
            split_gen++;
            pthread_cond_broadcast(&cv);
        } else { /* wait for the other threads' splits */
            unsigned long gen = split_gen;
            deadline(&ts, MOCK_WAIT_S * 10);
            while (gen == split_gen && pthread_cond_timedwait(&cv, &mu, &ts) == 0) {
            }
        }
        pthread_mutex_unlock(&mu);
        return ncclInProgress;
    }
    if (!p2p.empty()) {
        std::vector<pending_p2p> ops;
        ops.swap(p2p);
        pthread_mutex_lock(&mu);
        for (i = 0; i < ops.size(); i++)
            if (ops[i].send) {
                std::vector<char> m((const char *)ops[i].sbuf, (const char *)ops[i].sbuf + ops[i].bytes);
                mail[mkey(ops[i].comm->g, ops[i].comm->rank, ops[i].peer)].push_back(m);
                ops[i].comm->last = ops[i].s;
            }
        pthread_cond_broadcast(&cv);
        deadline(&ts, MOCK_WAIT_S);
        for (i = 0; i < ops.size(); i++) {
            if (ops[i].send) continue;
            std::deque<std::vector<char> > &q = mail[mkey(ops[i].comm->g, ops[i].peer, ops[i].comm->rank)];
            while (q.empty() && !ops[i].comm->g->broken && pthread_cond_timedwait(&cv, &mu, &ts) == 0) {
            }
            if (q.empty()) {
                hang(ops[i].comm, ops[i].s);
                break;
            }
            memcpy(ops[i].rbuf, q.front().data(), q.front().size() < ops[i].bytes ? q.front().size() : ops[i].bytes);
            q.pop_front();
        }
        pthread_mutex_unlock(&mu);
        return ncclInProgress;
    }
    return ncclSuccess;
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
    carg a = {n, t, ncclSum};
    if (depth) return ncclInvalidUsage;
    meet(c, s, r, f_gather, &a, st);
    return ncclInProgress;
}
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
    carg a = {n, t, op};
    if (depth) return ncclInvalidUsage;
    meet(c, s, r, f_allreduce, &a, st);
    return ncclSuccess;
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
    carg a = {n, t, op};
    if (depth) return ncclInvalidUsage;
    meet(c, s, r, f_scatter, &a, st);
    return ncclSuccess;
}
}
