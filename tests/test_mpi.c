/* Multi-process SPMD: the same program in N processes under mpirun, devices
   meeting through the MPI transport, against the thread transport (bit for
   bit) and one device.

   ./build/mpi/test_mpi              the driver: runs the cases below under
       timeout + mpirun --allow-run-as-root --oversubscribe -np N, checks
       their output and exit codes, prints "N passed, N failed"
   mpirun -np N test_mpi --case C    one case (what the driver runs)

   Cases: every collective kind x mesh-axis mask x dtype (shard_map), an
   automatically sharded MLP with gradients, process-local arrays; JAX's
   process-local blocks for specs whose tuples list mesh axes in any order
   (meshes data=2 model=2, data=2 model=3, a=2 b=2 c=2 as 2, 3 and 4
   processes: from_local, read_local, local_shape, device_put, a program
   against one device, and the bytes moved); a sharded state saved and
   loaded into sharded and abstract targets (4 x 1, 2 x 2: each process's
   devices hold their blocks only); the
   GPT-2 training step on data=2 model=2 for 20 steps (plain, sequence
   parallel, remat offload, accum 2) as 4 processes x 1 device and 2 x 2,
   against 1 process x 4 threads; a checkpoint written by 4 processes
   resumed in 1 process and in 2; faults: processes that trace different
   programs, one process out of memory, a bad index on one process, one
   process killed with SIGKILL mid-step, one process hung past the timeout.

   Built without TJ_MPI (the plain test loop of build.sh) it runs the
   one-process parts (process-mode API with one process, a device error
   that must not hang the others) and says the MPI cases were skipped. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>
#include <sys/time.h>
#include <pthread.h>

/* allocation hook: "fail every allocation of at least oom_bytes" */
static size_t oom_bytes = 0;
static void *tmalloc(size_t n) { return oom_bytes && n >= oom_bytes ? NULL : malloc(n); }
static void *trealloc(void *p, size_t n) { return oom_bytes && n >= oom_bytes ? NULL : realloc(p, n); }
#if defined(TJ_MPI)
/* the GPT-2 cases use the demo's trainer, which compiles the library here
   (build.sh's mpicc build): with the hooks above, and the wrappers
   tj_test.h uses */
#define TJ_MALLOC(n) tmalloc(n)
#define TJ_REALLOC(p, n) trealloc(p, n)
#define TJ_FREE(p) free(p)
#define GPT2_NO_MAIN
#include "../demos/gpt2_train.c"
#define TJT_INTERNAL_IMPLEMENTATION
#else
/* one process: the library of tests/tj_impl.c, the hooks set by main */
#include <math.h>
#include "../tinyjax.h"
#endif
#include "tj_test.h"

static int R = 0, NP = 1; /* this process, processes */

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}
/* digest of every array leaf, gathered from all processes (collective) */
static uint64_t digest_tree(tj_tree *t) {
    uint64_t h = 1469598103934665603ull;
    int i;
    for (i = 0; i < tj_tree_size(t); i++) {
        tj_array *a = tj_tree_array_at(t, i);
        size_t nb;
        void *buf;
        if (!a) continue;
        nb = (size_t)tj_array_numel(a) * tj_dtype_size(tj_array_dtype(a));
        buf = malloc(nb + 1);
        if (tj_array_read_all(a, tj_array_dtype(a), buf)) fprintf(stderr, "rank %d: tj_array_read_all of leaf %d failed\n", R, i);
        h = fnv(tj_tree_name(t, i), strlen(tj_tree_name(t, i)), h);
        h = fnv(buf, nb, h);
        free(buf);
    }
    return h;
}
#if defined(TJ_MPI)
static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}
#endif
static void fill(void *h, tj_dtype dt, int64_t n, unsigned seed) {
    uint64_t st = seed;
    int64_t i;
    for (i = 0; i < n; i++) {
        double v;
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        v = -2 + 4 * (double)(st >> 11) / 9007199254740992.0;
        switch (dt) {
        case TJ_F32: ((float *)h)[i] = (float)v; break;
        case TJ_F64: ((double *)h)[i] = v; break;
        case TJ_I32: ((int32_t *)h)[i] = (int32_t)floor(v * 100); break;
        case TJ_BF16: ((uint16_t *)h)[i] = tj_f32_to_bf16((float)v); break;
        default: break;
        }
    }
}
static tj_array *rnd(tj_ctx *ctx, tj_dtype dt, const char *shape, int64_t n, unsigned seed) {
    void *h = malloc((size_t)n * 8);
    tj_array *a;
    fill(h, dt, n, seed);
    a = tj_array_new(ctx, dt, shape, h);
    free(h);
    return a;
}
/* a context in process mode (when launched by mpirun) with `devices` devices */
static tj_ctx *proc_ctx(int devices, const char *mesh) {
    tj_ctx *c = tj_ctx_new();
    tj_set_threads(c, 1);
    if (tj_set_devices(c, devices) || tj_distributed_init(c, NULL) || (mesh && tj_set_mesh(c, mesh))) {
        fprintf(stderr, "rank %d: process context: %s\n", R, tj_error(c));
        exit(3);
    }
    return c;
}
static tj_ctx *thread_ctx(int devices, const char *mesh) {
    tj_ctx *c = tj_ctx_new();
    tj_set_threads(c, 1);
    tj_set_devices(c, devices);
    if (mesh) tj_set_mesh(c, mesh);
    return c;
}

/* ==== 1. collectives: kind x mesh axes x dtype, process mode = threads ==== */
typedef struct {
    int kind, grad;
    const char *axes;
    tj_dtype dt;
} ccase;
static const char *kinds[] = {"psum", "pmax", "all_gather embed", "all_gather batch", "psum_scatter embed", "psum_scatter batch",
                              "all_to_all embed->batch", "all_to_all batch->embed", "ppermute"};
#define NKIND 9
static int group_size(tj_ctx *c, const char *axes) {
    (void)c;
    return (strstr(axes, "data") ? 2 : 1) * (strstr(axes, "model") ? tj_devices(c) / 2 : 1);
}
static void cbody(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const ccase *k = (const ccase *)u;
    tj_v x = in[0];
    int n = group_size(tj_graph_ctx(g), k->axes), pairs[2 * TJ_MAXDEV], i;
    if (k->dt != TJ_I32) x = tj_tanh(x);
    switch (k->kind) {
    case 0: out[0] = tj_psum(x, k->axes); break;
    case 1: out[0] = tj_pmax(x, k->axes); break;
    case 2: out[0] = tj_all_gather(x, k->axes, "embed"); break;
    case 3: out[0] = tj_all_gather(x, k->axes, "batch"); break;
    case 4: out[0] = tj_psum_scatter(x, k->axes, "embed"); break;
    case 5: out[0] = tj_psum_scatter(x, k->axes, "batch"); break;
    case 6: out[0] = tj_all_to_all(x, k->axes, "embed", "batch"); break;
    case 7: out[0] = tj_all_to_all(x, k->axes, "batch", "embed"); break;
    default: /* a permutation with a fixed point and a rank nobody sends to when n > 2 */
        for (i = 0; i < n; i++) {
            pairs[2 * i] = i;
            pairs[2 * i + 1] = (i + 1) % n;
        }
        out[0] = tj_ppermute(x, k->axes, n > 2 ? n - 1 : n, pairs);
        break;
    }
}
static void cfn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const ccase *k = (const ccase *)u;
    const char *is[1] = {"batch:data embed:model"}, *os[1];
    char ob[128];
    int data = strstr(k->axes, "data") != NULL, model = strstr(k->axes, "model") != NULL;
    tj_v x = tj_tree_v(in, "x"), y = NULL;
    (void)g;
    if (k->kind <= 3) snprintf(ob, sizeof ob, "batch:%s embed:%s", data ? "-" : "data", model ? "-" : "model");
    else snprintf(ob, sizeof ob, "batch:data embed:model");
    os[0] = ob;
    tj_shard_map(cbody, (void *)k, 1, &x, is, 1, &y, os, 0);
    tj_tree_set_v(out, "y", y);
    if (k->grad && y) {
        tj_v l = tj_sum(tj_mul(y, y), "batch embed"), gx;
        tj_grad(l, 1, &x, &gx);
        tj_tree_set_v(out, "gx", gx);
    }
}
static uint64_t run_digest(tj_ctx *c, tj_fn fn, void *u, tj_tree *in, const char *what) {
    tj_tree *out = tj_tree_new(c);
    tj_prog *p = tj_jit(c, "case", fn, u, in, NULL);
    uint64_t h = 0;
    if (!p || tj_run(p, in, out)) {
        fprintf(stderr, "rank %d: %s: %s\n", R, what, tj_error(c));
        tj_clear_error(c);
    } else
        h = digest_tree(out);
    tj_prog_free(p);
    tj_tree_free(out);
    return h;
}
/* an automatically sharded two-layer MLP and its gradients */
static void mlp_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w1 = tj_tree_v(in, "w1"), w2 = tj_tree_v(in, "w2"), h, y, l, gw[2], ws[2];
    (void)g; (void)u;
    h = tj_gelu(tj_dot(x, w1, "embed"));
    y = tj_dot(h, w2, "mlp");
    l = tj_mean(tj_mul(y, y), "batch out");
    ws[0] = w1;
    ws[1] = w2;
    tj_grad(l, 2, ws, gw);
    tj_tree_set_v(out, "loss", l);
    tj_tree_set_v(out, "g1", gw[0]);
    tj_tree_set_v(out, "g2", gw[1]);
}
static void mlp_inputs(tj_ctx *c, tj_tree *in, int sharded) {
    tj_tree_set_array(in, "x", rnd(c, TJ_F32, "batch=8 embed=16", 8 * 16, 3));
    tj_tree_set_array(in, "w1", rnd(c, TJ_F32, "embed=16 mlp=32", 16 * 32, 4));
    tj_tree_set_array(in, "w2", rnd(c, TJ_F32, "mlp=32 out=8", 32 * 8, 5));
    if (sharded) tj_filter_shard(in, "batch:data mlp:model embed:model");
}
static void mlp_read(tj_ctx *c, tj_tree *in, double *v) {
    tj_tree *out = tj_tree_new(c);
    tj_prog *p = tj_jit(c, "mlp", mlp_fn, NULL, in, NULL);
    if (p && !tj_run(p, in, out)) {
        tj_array_read_all(tj_tree_array(out, "loss"), TJ_F64, v);
        tj_array_read_all(tj_tree_array(out, "g1"), TJ_F64, v + 1);
        tj_array_read_all(tj_tree_array(out, "g2"), TJ_F64, v + 1 + 16 * 32);
    } else
        fprintf(stderr, "rank %d: mlp: %s\n", R, tj_error(c));
    tj_prog_free(p);
    tj_tree_free(out);
}
static void case_coll(int devices) {
    static const char *axes[] = {"model", "data", "data model"};
    static const tj_dtype dts[] = {TJ_F32, TJ_BF16, TJ_F64, TJ_I32};
    const char *mesh = devices == 8 ? "data=2 model=4" : "data=2 model=2";
    tj_ctx *pc = proc_ctx(devices, mesh), *tc = thread_ctx(devices, mesh);
    int k, a, d, same = 0, total = 0;
    tjt_current = "collectives";
    for (k = 0; k < NKIND; k++)
        for (a = 0; a < 3; a++)
            for (d = 0; d < 4; d++) {
                ccase cc;
                tj_tree *pin = tj_tree_new(pc), *tin = tj_tree_new(tc);
                uint64_t hp, ht;
                char what[128];
                cc.kind = k;
                cc.axes = axes[a];
                cc.dt = dts[d];
                cc.grad = (dts[d] == TJ_F32 || dts[d] == TJ_F64) && k != 1;
                snprintf(what, sizeof what, "%s over %s, %s", kinds[k], axes[a], tj_dtype_name(dts[d]));
                tj_tree_set_array(pin, "x", rnd(pc, dts[d], "batch=16 embed=64", 1024, 7 + k));
                tj_tree_set_array(tin, "x", rnd(tc, dts[d], "batch=16 embed=64", 1024, 7 + k));
                tj_filter_shard(pin, "batch:data embed:model");
                tj_filter_shard(tin, "batch:data embed:model");
                hp = run_digest(pc, cfn, &cc, pin, what);
                ht = run_digest(tc, cfn, &cc, tin, what);
                TJT_CHECK(hp && hp == ht, "%s: processes %016llx, threads %016llx", what, (unsigned long long)hp, (unsigned long long)ht);
                same += hp && hp == ht;
                total++;
                tj_tree_free(pin);
                tj_tree_free(tin);
            }
    if (R == 0) printf("collectives: %d of %d kind x axes x dtype cases bit-identical to the thread transport (%d devices, %d processes)\n", same, total, devices, NP);
    /* automatic sharding with gradients: = threads bit for bit, = one device closely */
    {
        tj_ctx *one = thread_ctx(1, NULL);
        tj_tree *pin = tj_tree_new(pc), *tin = tj_tree_new(tc), *oin = tj_tree_new(one);
        double vp[1 + 16 * 32 + 32 * 8], vt[1 + 16 * 32 + 32 * 8], vo[1 + 16 * 32 + 32 * 8], worst = 0, scale = 1e-30;
        int i, n = 1 + 16 * 32 + 32 * 8;
        tjt_current = "sharded mlp";
        mlp_inputs(pc, pin, 1);
        mlp_inputs(tc, tin, 1);
        mlp_inputs(one, oin, 0);
        mlp_read(pc, pin, vp);
        mlp_read(tc, tin, vt);
        mlp_read(one, oin, vo);
        TJT_CHECK(!memcmp(vp, vt, sizeof vp), "mlp loss and gradients: processes differ from threads");
        for (i = 0; i < n; i++) {
            worst = fabs(vp[i] - vo[i]) > worst ? fabs(vp[i] - vo[i]) : worst;
            scale = fabs(vo[i]) > scale ? fabs(vo[i]) : scale;
        }
        TJT_CHECK(worst <= 1e-5 * scale, "mlp: processes vs one device differ by %g (largest value %g)", worst, scale);
        tj_tree_free(pin);
        tj_tree_free(tin);
        tj_tree_free(oin);
        tj_ctx_free(one);
    }
    /* process-local data: each process gives only its block of the batch */
    {
        int64_t n = 8 * 16;
        float *all = (float *)malloc(sizeof(float) * (size_t)n), *back = (float *)malloc(sizeof(float) * (size_t)n), *loc;
        char shp[128];
        tj_array *g, *l;
        int first, nl = tj_local_devices(pc, &first);
        tjt_current = "process-local arrays";
        fill(all, TJ_F32, n, 11);
        l = tj_array_new(pc, TJ_F32, "batch=8 embed=16", all);
        g = tj_device_put(l, "batch:data");
        tj_array_free(l);
        tj_array_local_shape(g, shp, sizeof shp);
        {   /* the local block: the rows of the batch this process's devices hold
               (data rank of device d: d / (devices / 2)) */
            int dmin = first / (devices / 2), dmax = (first + nl - 1) / (devices / 2);
            int64_t rows = (dmax - dmin + 1) * 4, r0 = dmin * 4;
            char want[64];
            loc = all + r0 * 16;
            l = tj_array_from_local(pc, TJ_F32, "batch=8 embed=16", "batch:data", loc);
            TJT_CHECK(l != NULL, "tj_array_from_local: %s", tj_error(pc));
            snprintf(want, sizeof want, "batch=%lld embed=16", (long long)rows);
            TJT_CHECK(!strcmp(shp, want), "local shape \"%s\", want \"%s\"", shp, want);
            memset(back, 0, sizeof(float) * (size_t)n);
            TJT_CHECK(l && !tj_array_read_all(l, TJ_F32, back) && !memcmp(back, all, sizeof(float) * (size_t)n), "from_local + read_all gives the global array back");
            memset(back, 0, sizeof(float) * (size_t)n);
            TJT_CHECK(l && !tj_array_read_local(l, TJ_F32, back) && !memcmp(back, loc, sizeof(float) * (size_t)(rows * 16)), "read_local gives the block back");
            if (rows < 8) {
                TJT_CHECK(tj_array_spans_processes(l) && tj_array_read(l, TJ_F32, back) == TJ_ERR_STATE, "tj_array_read of an array that spans processes fails");
                TJT_ERROR_HAS(pc, "spans processes", "tj_array_read_all");
            }
        }
        tj_array_free(g);
        tj_array_free(l);
        free(all);
        free(back);
    }
    tj_ctx_free(pc);
    tj_ctx_free(tc);
}

/* ==== 1b. process-local blocks follow the spec's order, as in JAX ==========
   JAX lays out an array axis split over several mesh axes with the FIRST
   listed mesh axis most major ("batch:model+data" on data=2 model=2: global
   block m*2+d on the device data=d model=m), and a process's local block
   (make_array_from_process_local_data) is, per axis, the sorted distinct
   global blocks its devices hold, concatenated. Computed here from that
   rule alone, independently of the library. */
typedef struct {
    const char *spec;
    const char *b[4], *e[4]; /* the mesh axes of batch and embed, in the spec's order */
} ospec;
typedef struct {
    int n, size[6];
    char name[6][16];
} omesh;
static void omesh_parse(omesh *m, const char *s) {
    int k;
    m->n = 0;
    while (*s && m->n < 6) {
        while (*s == ' ') s++;
        if (!*s) break;
        k = (int)strcspn(s, "=");
        snprintf(m->name[m->n], sizeof m->name[0], "%.*s", k, s);
        m->size[m->n++] = atoi(s + k + 1);
        s += k + 1;
        while (*s && *s != ' ') s++;
    }
}
/* JAX's rank of device d along the mesh axes `ax` (first most major; d row-major on the mesh) */
static int jax_rank(const omesh *m, int d, const char *const *ax, int *count) {
    int r = 0, n = 1, i, k, coord[6], st = 1;
    for (k = m->n - 1; k >= 0; k--) {
        coord[k] = d / st % m->size[k];
        st *= m->size[k];
    }
    for (i = 0; ax[i]; i++)
        for (k = 0; k < m->n; k++)
            if (!strcmp(ax[i], m->name[k])) {
                r = r * m->size[k] + coord[k];
                n *= m->size[k];
            }
    if (count) *count = n;
    return r;
}
/* the sorted distinct blocks the devices [lo, hi) hold along `ax`; returns how many */
static int local_blocks(const omesh *m, int lo, int hi, const char *const *ax, int *blk) {
    int n = 0, d, i, j;
    for (d = lo; d < hi; d++) {
        int r = jax_rank(m, d, ax, NULL), have = 0;
        for (i = 0; i < n; i++) have |= blk[i] == r;
        if (!have) blk[n++] = r;
    }
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && blk[j - 1] > blk[j]; j--) {
            int t = blk[j];
            blk[j] = blk[j - 1];
            blk[j - 1] = t;
        }
    return n;
}
static void order_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w");
    (void)g; (void)u;
    tj_tree_set_v(out, "y", tj_dot(x, w, "embed"));
    tj_tree_set_v(out, "s", tj_add(tj_mul(x, x), x));
    tj_tree_set_v(out, "t", tj_sum(x, "batch"));
}
static void order_run(tj_ctx *c, tj_array *x, tj_array *w, float *y, float *s, float *t) {
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p;
    tj_tree_set_array_ref(in, "x", x);
    tj_tree_set_array_ref(in, "w", w);
    p = tj_jit(c, "order", order_fn, NULL, in, NULL);
    if (!p || tj_run(p, in, out) || tj_array_read_all(tj_tree_array(out, "y"), TJ_F32, y) || tj_array_read_all(tj_tree_array(out, "s"), TJ_F32, s) ||
        tj_array_read_all(tj_tree_array(out, "t"), TJ_F32, t)) {
        fprintf(stderr, "rank %d: order program: %s\n", R, tj_error(c));
        tj_clear_error(c);
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
}
static void case_order(int devices, const char *mesh) {
    static const ospec two[] = {
        {"batch:Y+X", {"Y", "X"}, {NULL}},          {"batch:X+Y", {"X", "Y"}, {NULL}},          {"embed:Y batch:X", {"X"}, {"Y"}},
        {"batch:Y embed:X", {"Y"}, {"X"}},          {"embed:Y+X", {NULL}, {"Y", "X"}},          {"batch:Y+X embed:-", {"Y", "X"}, {NULL}},
        {"embed:X+Y batch:-", {NULL}, {"X", "Y"}}, {"batch:Y", {"Y"}, {NULL}},
    };
    static const ospec three[] = {
        {"batch:c+a embed:b", {"c", "a"}, {"b"}}, {"batch:b+a+c", {"b", "a", "c"}, {NULL}}, {"batch:c+b+a", {"c", "b", "a"}, {NULL}},
        {"embed:c+a", {NULL}, {"c", "a"}},        {"batch:a embed:c+b", {"a"}, {"c", "b"}}, {"batch:a+b+c", {"a", "b", "c"}, {NULL}},
    };
    omesh m;
    tj_ctx *pc = proc_ctx(devices, mesh), *one = thread_ctx(1, NULL);
    int B = 2 * devices, E = devices, O = 3, si, ns, first, nl = tj_local_devices(pc, &first), i, j;
    const ospec *sp;
    float *G = (float *)malloc(sizeof(float) * (size_t)(B * E)), *W = (float *)malloc(sizeof(float) * (size_t)(E * O));
    float *L = (float *)malloc(sizeof(float) * (size_t)(B * E)), *back = (float *)malloc(sizeof(float) * (size_t)(B * E));
    float *y1 = (float *)malloc(sizeof(float) * (size_t)(B * O)), *yp = (float *)malloc(sizeof(float) * (size_t)(B * O));
    float *s1 = (float *)malloc(sizeof(float) * (size_t)(B * E)), *s2 = (float *)malloc(sizeof(float) * (size_t)(B * E));
    float *t1 = (float *)malloc(sizeof(float) * (size_t)E), *t2 = (float *)malloc(sizeof(float) * (size_t)E);
    char shape[64], wshape[64], what[160];
    tj_array *g1, *w1;
    tj_transport_stats st0, st1;
    int64_t moved = 0;
    omesh_parse(&m, mesh);
    sp = m.n == 3 ? three : two;
    ns = m.n == 3 ? (int)(sizeof three / sizeof three[0]) : (int)(sizeof two / sizeof two[0]);
    for (i = 0; i < B * E; i++) G[i] = (float)(i % 13 - 6); /* small integers: every sum is exact */
    for (i = 0; i < E * O; i++) W[i] = (float)(i % 5 - 2);
    snprintf(shape, sizeof shape, "batch=%d embed=%d", B, E);
    snprintf(wshape, sizeof wshape, "embed=%d out=%d", E, O);
    g1 = tj_array_new(one, TJ_F32, shape, G);
    w1 = tj_array_new(one, TJ_F32, wshape, W);
    order_run(one, g1, w1, y1, s1, t1);
    for (si = 0; si < ns; si++) {
        char spec[64], want[64], got[128];
        const char *bax[4] = {NULL}, *eax[4] = {NULL};
        int bb[64], eb[64], nbb, neb, nb, ne, bs, es, lb, le;
        tj_array *l, *w, *gp, *pl;
        /* the spec with this mesh's axis names (X, Y: the first and second axes of a 2-axis mesh) */
        for (i = 0, j = 0; sp[si].spec[i]; i++) {
            char ch = sp[si].spec[i];
            const char *nm = m.n == 2 && ch == 'X' ? m.name[0] : m.n == 2 && ch == 'Y' ? m.name[1] : NULL;
            if (nm) j += snprintf(spec + j, sizeof spec - (size_t)j, "%s", nm);
            else spec[j++] = ch;
            spec[j] = 0;
        }
        for (i = 0; i < 3 && sp[si].b[i]; i++) bax[i] = m.n == 2 ? m.name[sp[si].b[i][0] == 'Y'] : sp[si].b[i];
        for (i = 0; i < 3 && sp[si].e[i]; i++) eax[i] = m.n == 2 ? m.name[sp[si].e[i][0] == 'Y'] : sp[si].e[i];
        snprintf(what, sizeof what, "mesh \"%s\", %d processes, spec \"%s\"", mesh, NP, spec);
        tjt_current = what;
        jax_rank(&m, 0, bax, &nb);
        jax_rank(&m, 0, eax, &ne);
        bs = B / nb;
        es = E / ne;
        nbb = local_blocks(&m, first, first + nl, bax, bb);
        neb = local_blocks(&m, first, first + nl, eax, eb);
        lb = nbb * bs;
        le = neb * es;
        for (i = 0; i < lb; i++) /* JAX's local block */
            for (j = 0; j < le; j++) L[i * le + j] = G[(bb[i / bs] * bs + i % bs) * E + eb[j / es] * es + j % es];
        snprintf(want, sizeof want, "batch=%d embed=%d", lb, le);
        {   /* a spec in mesh order: every process's devices hold its block, nothing moves */
            int inorder = 1, k, prev;
            for (i = 0; i < 2; i++)
                for (j = 0, prev = -1; (i ? eax : bax)[j]; j++) {
                    for (k = 0; k < m.n && strcmp(m.name[k], (i ? eax : bax)[j]); k++) {}
                    inorder &= k > prev;
                    prev = k;
                }
            st0 = tj_get_transport_stats(pc);
            l = tj_array_from_local(pc, TJ_F32, shape, spec, L);
            st1 = tj_get_transport_stats(pc);
            TJT_CHECK(!inorder || st1.wire_bytes == st0.wire_bytes, "from_local of a spec in mesh order sent %lld bytes", (long long)(st1.wire_bytes - st0.wire_bytes));
            TJT_CHECK(st1.wire_bytes - st0.wire_bytes <= (int64_t)sizeof(float) * lb * le * (NP - 1), "from_local sent %lld bytes, more than its block to each process",
                      (long long)(st1.wire_bytes - st0.wire_bytes));
            moved += st1.wire_bytes - st0.wire_bytes;
        }
        TJT_CHECK(l != NULL, "tj_array_from_local: %s", tj_error(pc));
        if (!l) {
            tj_clear_error(pc);
            continue;
        }
        tj_array_local_shape(l, got, sizeof got);
        TJT_CHECK(!strcmp(got, want), "local shape \"%s\", JAX's \"%s\"", got, want);
        memset(back, 0, sizeof(float) * (size_t)(B * E));
        TJT_CHECK(!tj_array_read_all(l, TJ_F32, back) && !memcmp(back, G, sizeof(float) * (size_t)(B * E)), "from_local + read_all: the global array JAX builds");
        memset(back, 0, sizeof(float) * (size_t)(B * E));
        TJT_CHECK(!tj_array_read_local(l, TJ_F32, back) && !memcmp(back, L, sizeof(float) * (size_t)(lb * le)), "read_local gives the block back");
        tj_array_sharding(l, got, sizeof got);
        for (i = 0; i < 2; i++) { /* tj_array_sharding names the tuples in the spec's order */
            const char *const *ax = i ? eax : bax;
            char tup[64];
            int k, n = 0;
            tup[0] = 0;
            for (k = 0; ax[k]; k++) n += snprintf(tup + n, sizeof tup - (size_t)n, "%s%s", k ? "+" : "", ax[k]);
            if (k > 1) TJT_CHECK(strstr(got, tup) != NULL, "tj_array_sharding \"%s\" names the tuple %s in the spec's order", got, tup);
        }
        /* a program on it = the same program on one device */
        w = tj_array_new(pc, TJ_F32, wshape, W);
        memset(yp, 0, sizeof(float) * (size_t)(B * O));
        memset(s2, 0, sizeof(float) * (size_t)(B * E));
        memset(t2, 0, sizeof(float) * (size_t)E);
        order_run(pc, l, w, yp, s2, t2);
        TJT_CHECK(!memcmp(yp, y1, sizeof(float) * (size_t)(B * O)) && !memcmp(s2, s1, sizeof(float) * (size_t)(B * E)) && !memcmp(t2, t1, sizeof(float) * (size_t)E),
                  "jit on the from_local array = one device");
        /* device_put of the global array by the same spec: the same local block and shape */
        gp = tj_array_new(pc, TJ_F32, shape, G);
        pl = gp ? tj_device_put(gp, spec) : NULL;
        tj_array_local_shape(pl, got, sizeof got);
        TJT_CHECK(!strcmp(got, want), "device_put: local shape \"%s\", JAX's \"%s\"", got, want);
        memset(back, 0, sizeof(float) * (size_t)(B * E));
        TJT_CHECK(pl && !tj_array_read_local(pl, TJ_F32, back) && !memcmp(back, L, sizeof(float) * (size_t)(lb * le)), "device_put: read_local gives JAX's block");
        tj_array_free(pl);
        tj_array_free(gp);
        tj_array_free(w);
        tj_array_free(l);
        tj_clear_error(pc);
    }
    if (R == 0) printf("order: %d specs on mesh \"%s\" (%d devices, %d processes); from_local sent %lld bytes from process 0\n", ns, mesh, devices, NP, (long long)moved);
    tj_array_free(g1);
    tj_array_free(w1);
    free(G), free(W), free(L), free(back), free(y1), free(yp), free(s1), free(s2), free(t1), free(t2);
    tj_ctx_free(pc);
    tj_ctx_free(one);
}

/* ==== 2b. a sharded state saved and loaded into a sharded target ========= */
/* Every process saves (process 0 writes), then loads into a tree of
   sharded and abstract targets: each leaf keeps the target's sharding and
   each process's devices hold their blocks only. */
static void case_sharded_load(int devices, const char *path) {
    static const struct {
        const char *name, *shape, *spec;
        int64_t shard; /* elements per device on data=2 model=2 */
        int abstract;
    } lv[] = {
        {"w", "embed=8 mlp=4", "embed:data mlp:model", 8, 0},
        {"tok", "batch=8 pos=3", "batch:model+data", 6, 1},
        {"b", "mlp=4", "mlp:model", 2, 1},
    };
    enum { NL = (int)(sizeof lv / sizeof lv[0]) };
    tj_ctx *c = proc_ctx(devices, "data=2 model=2");
    tj_tree *src = tj_tree_new(c), *t = tj_tree_new(c);
    float *want[NL], *got;
    int i, d, first, nl = tj_local_devices(c, &first);
    int64_t k, blocks = 0;
    tj_alloc_stats s;
    char what[96];
    snprintf(what, sizeof what, "sharded load, %d processes x %d devices", NP, nl);
    tjt_current = what;
    for (i = 0; i < NL; i++) {
        tj_array *r, *z;
        int64_t n;
        r = tj_zeros(c, TJ_F32, lv[i].shape);
        n = tj_array_numel(r);
        tj_array_free(r);
        want[i] = (float *)malloc(sizeof(float) * (size_t)n);
        for (k = 0; k < n; k++) want[i][k] = (float)(k * 7 % 23) - 11 + 0.25f * (float)i;
        r = tj_array_new(c, TJ_F32, lv[i].shape, want[i]);
        tj_tree_set_array(src, lv[i].name, tj_device_put(r, lv[i].spec));
        tj_array_free(r);
        if (lv[i].abstract) tj_tree_set_array(t, lv[i].name, tj_array_abstract(c, TJ_F32, lv[i].shape, lv[i].spec));
        else {
            z = tj_zeros(c, TJ_F32, lv[i].shape);
            tj_tree_set_array(t, lv[i].name, tj_device_put(z, lv[i].spec));
            tj_array_free(z);
        }
        blocks += lv[i].shard * 4;
    }
    TJT_CHECK(tj_tree_save(src, path) == TJ_OK, "save: %s", tj_error(c));
    tj_tree_free(src);
    TJT_CHECK(tj_tree_load(t, path) == TJ_OK, "load: %s", tj_error(c));
    s = tj_get_alloc_stats(c);
    for (d = 0; d < devices; d++) {
        int mine = d >= first && d < first + nl;
        TJT_CHECK(s.device_bytes[d] == (mine ? blocks : 0), "device %d (%s) holds %lld bytes, want %lld", d, mine ? "this process's" : "another's",
                  (long long)s.device_bytes[d], (long long)(mine ? blocks : 0));
    }
    for (i = 0; i < NL; i++) {
        tj_array *a = tj_tree_array(t, lv[i].name), *z = tj_zeros(c, TJ_F32, lv[i].shape), *p = tj_device_put(z, lv[i].spec);
        char b1[128], b2[128];
        int64_t n = tj_array_numel(a), bad = 0;
        tj_array_sharding(a, b1, sizeof b1);
        tj_array_sharding(p, b2, sizeof b2);
        TJT_CHECK(!strcmp(b1, b2) && !tj_array_is_abstract(a), "leaf %s is sharded \"%s\", its target \"%s\"", lv[i].name, b1, b2);
        got = (float *)malloc(sizeof(float) * (size_t)n);
        TJT_CHECK(tj_array_read_all(a, TJ_F32, got) == TJ_OK, "read %s: %s", lv[i].name, tj_error(c));
        for (k = 0; k < n; k++) bad += got[k] != want[i][k];
        TJT_CHECK(bad == 0, "leaf %s: %lld values differ from the saved ones", lv[i].name, (long long)bad);
        free(got);
        tj_array_free(z);
        tj_array_free(p);
        free(want[i]);
    }
    if (R == 0) printf("sharded load: %d processes, every leaf kept its target's sharding; %lld bytes per device\n", NP, (long long)blocks);
    tj_tree_free(t);
    tj_ctx_free(c);
}

#if defined(TJ_MPI)
/* ==== 2. GPT-2: 20 steps in process mode = 1 process x 4 threads ========== */
static int32_t *corpus(size_t *n) {
    const char *s = "the quick brown fox jumps over the lazy dog; ";
    size_t len = strlen(s), i, k = 0, cap = 8192;
    int32_t *d = (int32_t *)malloc(sizeof(int32_t) * cap);
    for (i = 0; k < cap; i++) {
        size_t j;
        for (j = 0; j < len && k < cap; j++) d[k++] = (unsigned char)s[j];
        if (k < cap) d[k++] = '0' + (int32_t)(i % 10);
    }
    *n = cap;
    return d;
}
static void tiny(gpt2_config *c, int seqp, int remat, int accum) {
    gpt2_default_config(c);
    c->L = 2; c->C = 32; c->H = 2; c->M = 128;
    c->T = c->block = 16; c->B = 8;
    c->V = c->V_real = 256;
    c->param_rules = "embed:data mlp:model heads:model vocab:model";
    c->compute_rules = "batch:data mlp:model heads:model vocab:model";
    c->seq_parallel = seqp;
    c->remat = remat;
    c->accum = accum;
}
/* train `steps` steps; losses out; returns the state digest (0 on error) */
static uint64_t train(gpt2_trainer *tr, const int32_t *data, size_t n, int steps, float *loss) {
    int s, K = tr->cfg.accum;
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * (size_t)(K * tr->cfg.B * tr->cfg.T)), *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)(K * tr->cfg.B * tr->cfg.T));
    for (s = 0; s < steps; s++) {
        gpt2_next_batch(tr, data, n, 5, x, y);
        loss[s] = gpt2_train_step(tr, x, y, 1e-3);
    }
    free(x);
    free(y);
    return digest_tree(tr->state);
}
static void case_gpt2(int devices) {
    static const int cfgs[4][3] = {{0, REMAT_BLOCK_OUT, 1}, {1, REMAT_BLOCK_OUT, 1}, {0, REMAT_OFFLOAD, 1}, {0, REMAT_BLOCK_OUT, 2}};
    static const char *names[4] = {"plain", "--seq-parallel", "--remat offload", "--accum 2"};
    size_t n;
    int32_t *data = corpus(&n);
    int i;
    tjt_current = "gpt2";
    for (i = 0; i < 4; i++) {
        gpt2_config c;
        gpt2_trainer tp, tt;
        float lp[20], lt[20], ev[2], logits[256], logits_t[256];
        uint64_t hp, ht;
        double t0 = now_s(), tpro;
        tiny(&c, cfgs[i][0], cfgs[i][1], cfgs[i][2]);
        c.distributed = 1;
        if (gpt2_trainer_init(&tp, &c, devices, "data=2 model=2", 1)) {
            TJT_CHECK(0, "%s: process-mode trainer", names[i]);
            continue;
        }
        hp = train(&tp, data, n, 20, lp);
        tpro = now_s() - t0;
        if (i == 0) { /* evaluation and a sampling step (logits gathered from every process) */
            int32_t x[8 * 16], y[8 * 16];
            get_batch(data, n, 8, 16, 9, 2, 0, x, y);
            ev[0] = gpt2_eval_loss(&tp, x, y);
            if (gpt2_next_logits(&tp, x, 10, logits)) ev[0] = NAN;
        }
        gpt2_trainer_free(&tp);
        if (R != 0) continue; /* process 0 checks against 1 process x 4 threads */
        c.distributed = 0;
        if (gpt2_trainer_init(&tt, &c, 4, "data=2 model=2", 1)) {
            TJT_CHECK(0, "%s: thread trainer", names[i]);
            continue;
        }
        t0 = now_s();
        ht = train(&tt, data, n, 20, lt);
        TJT_CHECK(!memcmp(lp, lt, sizeof lp), "%s: 20 losses of %d processes differ from 4 threads (last %.9g vs %.9g)", names[i], NP, lp[19], lt[19]);
        TJT_CHECK(hp && hp == ht, "%s: parameters and optimizer state after 20 steps differ", names[i]);
        if (i == 0) {
            int32_t x[8 * 16], y[8 * 16];
            get_batch(data, n, 8, 16, 9, 2, 0, x, y);
            ev[1] = gpt2_eval_loss(&tt, x, y);
            TJT_CHECK(ev[0] == ev[1], "eval loss: processes %.9g, threads %.9g", ev[0], ev[1]);
            TJT_CHECK(!gpt2_next_logits(&tt, x, 10, logits_t) && !memcmp(logits, logits_t, sizeof logits), "sampling logits: processes differ from threads");
        }
        printf("gpt2 %-15s: %d processes x %d devices: 20 losses %.6f .. %.6f and final state bit-identical to 1 process x 4 threads: %s (%.2f s vs %.2f s)\n",
               names[i], NP, devices / NP, lp[0], lp[19], !memcmp(lp, lt, sizeof lp) && hp == ht ? "yes" : "NO", tpro, now_s() - t0);
        if (i == 0) { /* and the one-device run, closely */
            gpt2_trainer t1;
            float l1[20];
            double worst = 0;
            int s;
            if (!gpt2_trainer_init(&t1, &c, 1, NULL, 1)) {
                train(&t1, data, n, 20, l1);
                for (s = 0; s < 20; s++) worst = fabs(l1[s] - lp[s]) > worst ? fabs(l1[s] - lp[s]) : worst;
                TJT_CHECK(worst < 2e-4, "plain: processes vs one device: losses differ by %g", worst);
                gpt2_trainer_free(&t1);
            }
        }
        gpt2_trainer_free(&tt);
    }
    free(data);
}

/* ==== 3. checkpoints across processes ===================================== */
static void case_ckpt_write(const char *path) {
    gpt2_config c;
    gpt2_trainer tr;
    size_t n;
    int32_t *data = corpus(&n);
    float l[3];
    char lp[1024];
    tjt_current = "checkpoint write";
    tiny(&c, 0, REMAT_BLOCK_OUT, 1);
    c.distributed = 1;
    if (gpt2_trainer_init(&tr, &c, 4, "data=2 model=2", 1)) exit(3);
    train(&tr, data, n, 3, l);
    TJT_CHECK(gpt2_save(&tr, path) == TJ_OK, "save from %d processes: %s", NP, tj_error(tr.ctx));
    train(&tr, data, n, 3, l);
    if (R == 0) {
        FILE *f;
        snprintf(lp, sizeof lp, "%s.losses", path);
        f = fopen(lp, "w");
        fprintf(f, "%a %a %a\n", l[0], l[1], l[2]);
        fclose(f);
        printf("checkpoint: %s written by %d processes after 3 steps; next 3 losses %.6f %.6f %.6f\n", path, NP, l[0], l[1], l[2]);
    }
    gpt2_trainer_free(&tr);
    free(data);
}
static void case_ckpt_resume(const char *path) {
    gpt2_config c;
    gpt2_trainer tr;
    size_t n;
    int32_t *data = corpus(&n);
    float l[3], w[3] = {0, 0, 0};
    char lp[1024];
    FILE *f;
    tjt_current = "checkpoint resume";
    tiny(&c, 0, REMAT_BLOCK_OUT, 1);
    c.distributed = 1;
    if (gpt2_trainer_init(&tr, &c, 4, "data=2 model=2", 1)) exit(3);
    TJT_CHECK(gpt2_resume(&tr, path) == TJ_OK, "resume in %d processes: %s", NP, tj_error(tr.ctx));
    TJT_CHECK(tr.step_no == 3, "resumed at step %lld, want 3", (long long)tr.step_no);
    train(&tr, data, n, 3, l);
    snprintf(lp, sizeof lp, "%s.losses", path);
    f = fopen(lp, "r");
    TJT_CHECK(f && fscanf(f, "%a %a %a", &w[0], &w[1], &w[2]) == 3, "read %s", lp);
    if (f) fclose(f);
    TJT_CHECK(!memcmp(l, w, sizeof l), "resumed in %d processes: losses %.9g %.9g %.9g, the writer had %.9g %.9g %.9g", NP, l[0], l[1], l[2], w[0], w[1], w[2]);
    if (R == 0) printf("checkpoint: resumed in %d process%s; the next 3 losses equal the writer's: %s\n", NP, NP > 1 ? "es" : "", !memcmp(l, w, sizeof l) ? "yes" : "NO");
    {   /* a missing file is an error in every process */
        tj_tree *t = tj_tree_new(tr.ctx);
        TJT_CHECK(tj_tree_load(t, "/nonexistent/ckpt.safetensors") != TJ_OK, "loading a missing file fails");
        tj_clear_error(tr.ctx);
        tj_tree_free(t);
    }
    gpt2_trainer_free(&tr);
    free(data);
}

#endif /* TJ_MPI */

/* ==== 4. faults ============================================================ */
/* a kernel that misbehaves on one process: dies (SIGKILL) or hangs */
static int fault_rank = -1, fault_mode = 0, fault_armed = 0;
static void fault_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *u) {
    int64_t k = 1;
    int i;
    (void)nin; (void)nout; (void)u;
    for (i = 0; i < in[0].rank; i++) k *= in[0].dim[i];
    memcpy(out[0].data, in[0].data, (size_t)k * tj_dtype_size(in[0].dtype));
    if (fault_armed && R == fault_rank) {
        if (fault_mode == 1) raise(SIGKILL);
        else sleep(60);
    }
}
static void fault_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), y, s;
    (void)g; (void)u;
    tj_custom("fault", 1, &x, &y); /* x is gathered first; then the kernel */
    y = tj_with_sharding_constraint(y, "batch:data");
    s = tj_sum(tj_mul(y, y), "batch embed"); /* a psum over data after the kernel */
    tj_tree_set_v(out, "s", s);
}
static tj_ctx *fault_ctx(void) {
    tj_ctx *c = proc_ctx(4, "data=4");
    tj_op_def d;
    memset(&d, 0, sizeof d);
    d.name = "fault";
    d.nout = 1;
    d.cpu = fault_cpu;
    tj_register_op(c, &d);
    return c;
}
static void case_fault_die(int mode) {
    tj_ctx *c = fault_ctx();
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p;
    int i;
    fault_rank = 2;
    fault_mode = mode;
    tj_tree_set_array(in, "x", rnd(c, TJ_F32, "batch=8 embed=4", 32, 1));
    tj_filter_shard(in, "batch:data");
    p = tj_jit(c, "fault", fault_fn, NULL, in, NULL);
    for (i = 0; p && i < 2; i++) {
        fault_armed = i == 1;
        tj_tree_clear(out);
        if (tj_run(p, in, out)) {
            fprintf(stderr, "rank %d: tj_run failed: %s\n", R, tj_error(c));
            tj_distributed_shutdown();
            exit(4);
        }
    }
    printf("rank %d: no fault happened\n", R);
    exit(0);
}
static void bad_program_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x");
    (void)g; (void)u;
    if (R == 1) x = tj_tanh(x); /* process 1 traces one more op */
    tj_tree_set_v(out, "s", tj_sum(x, "batch embed"));
}
static void good_program_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    tj_tree_set_v(out, "s", tj_sum(tj_tree_v(in, "x"), "batch embed"));
}
/* a program with a 256 KB temp per device (the dot's output) */
static void big_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v h = tj_dot(tj_tree_v(in, "x"), tj_tree_v(in, "w"), "embed");
    (void)g; (void)u;
    tj_tree_set_v(out, "s", tj_sum(tj_mul(h, h), "batch out"));
}
/* take with indices that are out of range on one process only */
static void take_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v e = tj_take(tj_tree_v(in, "emb"), "vocab", tj_tree_v(in, "idx"));
    (void)g; (void)u;
    tj_tree_set_v(out, "s", tj_sum(tj_mul(e, e), "batch embed"));
}
static void case_faults(void) {
    tj_ctx *c = proc_ctx(4, "data=4");
    tj_tree *in, *out;
    tj_prog *p;
    float s = 0;
    /* process 1 interns axis names in another order: programs hash names, not ids */
    if (R == 1) tj_array_free(tj_zeros(c, TJ_F32, "only_in_process_1=2 another=3"));
    in = tj_tree_new(c);
    out = tj_tree_new(c);
    /* different programs: an error in every process, then a good one runs */
    tjt_current = "different programs";
    tj_tree_set_array(in, "x", rnd(c, TJ_F32, "batch=8 embed=4", 32, 1));
    tj_filter_shard(in, "batch:data");
    p = tj_jit(c, "bad", bad_program_fn, NULL, in, NULL);
    TJT_CHECK(p == NULL, "processes that trace different programs: tj_jit fails");
    if (R == 0 && !p) printf("different programs, process 0 says: %s\n", tj_error(c));
    TJT_ERROR_HAS(c, "different programs", "process 1");
    tj_prog_free(p);
    p = tj_jit(c, "good", good_program_fn, NULL, in, NULL);
    TJT_CHECK(p && !tj_run(p, in, out) && !tj_array_read(tj_tree_array(out, "s"), TJ_F32, &s), "after it, a good program runs: %s", tj_error(c));
    /* one process out of memory: its arena fails; every process fails the run */
    tjt_current = "out of memory in one process";
    {
        tj_tree *bin = tj_tree_new(c), *bout = tj_tree_new(c);
        tj_prog *bp;
        tj_tree_set_array(bin, "x", rnd(c, TJ_F32, "batch=512 embed=64", 512 * 64, 2));
        tj_tree_set_array(bin, "w", rnd(c, TJ_F32, "embed=64 out=512", 64 * 512, 2));
        tj_filter_shard(bin, "batch:data");
        bp = tj_jit(c, "big", big_fn, NULL, bin, NULL);
        TJT_CHECK(bp != NULL, "jit big: %s", tj_error(c));
        if (R == 2) oom_bytes = 256 * 1024;
        TJT_CHECK(bp && tj_run(bp, bin, bout) != TJ_OK, "a run with process 2 out of memory fails in process %d", R);
        if (R == 0) printf("out of memory in process 2, process 0 says: %s\n", tj_error(c));
        TJT_ERROR_HAS(c, "process 2", "out of memory");
        oom_bytes = 0;
        tj_tree_clear(bout);
        TJT_CHECK(bp && !tj_run(bp, bin, bout), "then the same program runs: %s", tj_error(c));
        tj_prog_free(bp);
        tj_tree_free(bin);
        tj_tree_free(bout);
    }
    /* a bad index on process 1 only: it runs the rest dry, every process fails the run */
    tjt_current = "bad index in one process";
    {
        tj_tree *tin = tj_tree_new(c), *tout = tj_tree_new(c);
        tj_prog *tp;
        int32_t idx[8] = {1, 3, 1, 3, 1, 3, 1, 3}; /* this process's block of the batch (2 rows with 4 processes) */
        int first;
        tj_local_devices(c, &first);
        if (R == 1) idx[1] = 99;
        tj_tree_set_array(tin, "emb", rnd(c, TJ_F32, "vocab=16 embed=4", 64, 3));
        tj_tree_set_array(tin, "idx", tj_array_from_local(c, TJ_I32, "batch=8", "batch:data", idx));
        tp = tj_jit(c, "take", take_fn, NULL, tin, NULL);
        TJT_CHECK(tp && tj_run(tp, tin, tout) != TJ_OK, "a bad index in process 1 fails the run in process %d", R);
        if (R == 0) printf("bad index in process 1, process 0 says: %s\n", tj_error(c));
        TJT_ERROR_HAS(c, "process 1", "out of range");
        idx[1] = 2;
        tj_tree_set_array(tin, "idx", tj_array_from_local(c, TJ_I32, "batch=8", "batch:data", idx));
        tj_tree_clear(tout);
        TJT_CHECK(tp && !tj_run(tp, tin, tout), "then good indices run: %s", tj_error(c));
        tj_prog_free(tp);
        tj_tree_free(tin);
        tj_tree_free(tout);
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(c);
}

static void single_process(void);

/* ==== the driver =========================================================== */
#if defined(TJ_MPI)
typedef struct {
    char out[1 << 16];
    int rc;
    double secs;
} launch;
static void run_cmd(const char *cmd, launch *L) {
    FILE *f;
    size_t n = 0, k;
    double t0 = now_s();
    int st;
    L->out[0] = 0;
    f = popen(cmd, "r");
    if (!f) {
        L->rc = -1;
        return;
    }
    while ((k = fread(L->out + n, 1, sizeof L->out - 1 - n, f)) > 0) n += k;
    L->out[n] = 0;
    {   /* drain what did not fit */
        char junk[4096];
        while (fread(junk, 1, sizeof junk, f) > 0) {
        }
    }
    st = pclose(f);
    L->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    L->secs = now_s() - t0;
}
static int count_lines(const char *s, const char *a, const char *b) {
    int n = 0;
    const char *l = s;
    while (l && *l) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), l);
        if (strstr(line, a) && (!b || strstr(line, b))) n++;
        l = e ? e + 1 : NULL;
    }
    return n;
}
static int line_len(const char *s) { return s ? (int)strcspn(s, "\n") : 0; }
/* sum the "rank R: P passed, F failed" lines of a launch into the totals */
static int add_counts(const launch *L, int want_ranks) {
    const char *l = L->out;
    int ranks = 0, p, f, r, bad = 0;
    while (l && *l) {
        if (sscanf(l, "rank %d: %d passed, %d failed", &r, &p, &f) == 3) {
            tjt_pass += p;
            tjt_fail += f;
            bad |= f > 0;
            ranks++;
        }
        l = strchr(l, '\n');
        if (l) l++;
    }
    return ranks == want_ranks && !bad && L->rc == 0;
}
static void show(const char *what, const launch *L, int ok) {
    printf("%s %-52s %5.1f s\n", ok ? "ok  " : "FAIL", what, L->secs);
    if (!ok) {
        size_t n = strlen(L->out);
        printf("---- exit %d, output%s:\n%s\n----\n", L->rc, n > 6000 ? " (last 6000 bytes)" : "", n > 6000 ? L->out + n - 6000 : L->out);
    }
    fflush(stdout);
}
static int driver(const char *self) {
    char mpirun[256], cmd[2048], ck[512];
    launch *L = (launch *)malloc(sizeof *L);
    const char *mpi = "mpirun --allow-run-as-root --oversubscribe --mca btl_vader_single_copy_mechanism none";
    struct {
        int np;
        const char *args, *what;
    } runs[] = {
        {4, "--case coll --devices 4", "collectives, 4 processes x 1 device"},
        {2, "--case coll --devices 4", "collectives, 2 processes x 2 devices"},
        {2, "--case coll --devices 8", "collectives, 2 processes x 4 devices"},
        {4, "--case gpt2 --devices 4", "GPT-2 20 steps x 4 configs, 4 processes x 1"},
        {2, "--case gpt2 --devices 4", "GPT-2 20 steps x 4 configs, 2 processes x 2"},
        {4, "--case faults", "faults: programs, out of memory, bad index"},
        {4, "--case order --devices 4 --mesh 'data=2 model=2'", "local blocks in the spec's order, 4 x 1, data=2 model=2"},
        {2, "--case order --devices 4 --mesh 'data=2 model=2'", "local blocks in the spec's order, 2 x 2, data=2 model=2"},
        {2, "--case order --devices 6 --mesh 'data=2 model=3'", "local blocks in the spec's order, 2 x 3, data=2 model=3"},
        {3, "--case order --devices 6 --mesh 'data=2 model=3'", "local blocks in the spec's order, 3 x 2, data=2 model=3"},
        {2, "--case order --devices 8 --mesh 'a=2 b=2 c=2'", "local blocks in the spec's order, 2 x 4, a=2 b=2 c=2"},
        {4, "--case order --devices 8 --mesh 'a=2 b=2 c=2'", "local blocks in the spec's order, 4 x 2, a=2 b=2 c=2"},
    };
    int i, ok;
    FILE *w = popen("command -v mpirun", "r");
    mpirun[0] = 0;
    if (w) {
        if (!fgets(mpirun, sizeof mpirun, w)) mpirun[0] = 0;
        pclose(w);
    }
    single_process(); /* this process, no launcher: thread transport */
    printf("one process: %d passed, %d failed\n", tjt_pass, tjt_fail);
    tjt_current = "driver";
    if (!mpirun[0]) {
        printf("MPI cases skipped: mpirun not found (install openmpi-bin)\n");
        free(L);
        return tjt_finish();
    }
    for (i = 0; i < (int)(sizeof runs / sizeof runs[0]); i++) {
        snprintf(cmd, sizeof cmd, "timeout -k 5 240 %s -np %d %s %s 2>&1", mpi, runs[i].np, self, runs[i].args);
        run_cmd(cmd, L);
        ok = add_counts(L, runs[i].np);
        if (!ok) tjt_fail++;
        show(runs[i].what, L, ok);
        if (ok) { /* the cases' own report lines */
            const char *l = L->out;
            while (l && *l) {
                const char *e = strchr(l, '\n');
                if (strncmp(l, "rank ", 5) && strncmp(l, "[", 1)) printf("     %.*s\n", (int)(e ? e - l : (long)strlen(l)), l);
                l = e ? e + 1 : NULL;
            }
        }
    }
    /* a sharded state saved and loaded into sharded targets: 4 x 1 and 2 x 2 */
    for (i = 4; i >= 2; i -= 2) {
        snprintf(ck, sizeof ck, "/tmp/tj_mpi_sharded_%d.safetensors", (int)getpid());
        snprintf(cmd, sizeof cmd, "timeout -k 5 120 %s -np %d %s --case sharded-load --devices 4 %s 2>&1", mpi, i, self, ck);
        run_cmd(cmd, L);
        ok = add_counts(L, i);
        if (!ok) tjt_fail++;
        show(i == 4 ? "sharded save, load into sharded targets, 4 x 1" : "sharded save, load into sharded targets, 2 x 2", L, ok);
        remove(ck);
    }
    /* checkpoint: written by 4 processes, resumed in 1 and in 2 */
    snprintf(ck, sizeof ck, "/tmp/tj_mpi_ckpt_%d.safetensors", (int)getpid());
    snprintf(cmd, sizeof cmd, "timeout -k 5 120 %s -np 4 %s --case ckpt-write %s 2>&1", mpi, self, ck);
    run_cmd(cmd, L);
    ok = add_counts(L, 4);
    if (!ok) tjt_fail++;
    show("checkpoint written by 4 processes", L, ok);
    snprintf(cmd, sizeof cmd, "timeout -k 5 120 %s --case ckpt-resume %s 2>&1", self, ck);
    run_cmd(cmd, L);
    ok = add_counts(L, 1);
    if (!ok) tjt_fail++;
    show("... resumed in 1 process (4 threads)", L, ok);
    snprintf(cmd, sizeof cmd, "timeout -k 5 120 %s -np 2 %s --case ckpt-resume %s 2>&1", mpi, self, ck);
    run_cmd(cmd, L);
    ok = add_counts(L, 2);
    if (!ok) tjt_fail++;
    show("... resumed in 2 processes", L, ok);
    remove(ck);
    snprintf(cmd, sizeof cmd, "%s.losses", ck);
    remove(cmd);
    /* a process killed mid-step: every survivor ends non-zero with a message, soon */
    snprintf(cmd, sizeof cmd, "TJ_TIMEOUT=20 timeout -k 5 60 %s -np 4 %s --case kill 2>&1", mpi, self);
    run_cmd(cmd, L);
    {
        int msgs = count_lines(L->out, "tinyjax: process", "stopped by signal"), waited = count_lines(L->out, "tinyjax: process", "waited in psum");
        ok = L->rc != 0 && L->secs < 30 && msgs >= 3 && waited >= 1 && !strstr(L->out, "no fault happened");
        TJT_CHECK(ok, "SIGKILL of process 2: exit %d after %.1f s, %d survivor messages (%d waiting in the psum)", L->rc, L->secs, msgs, waited);
        show("process 2 killed with SIGKILL mid-step", L, ok);
        if (ok) printf("     exit %d after %.1f s; %d survivors said where they were, e.g.\n     %.*s\n", L->rc, L->secs, msgs, line_len(strstr(L->out, "tinyjax: process")),
                       strstr(L->out, "tinyjax: process"));
    }
    /* a process that hangs: the others time out with the collective's name and line */
    snprintf(cmd, sizeof cmd, "TJ_TIMEOUT=3 timeout -k 5 60 %s -np 4 %s --case hang 2>&1", mpi, self);
    run_cmd(cmd, L);
    {
        int msgs = count_lines(L->out, "timed out after 3 s", "caused by");
        ok = L->rc != 0 && L->secs < 20 && msgs >= 3;
        TJT_CHECK(ok, "hung process 2: exit %d after %.1f s, %d timeout messages", L->rc, L->secs, msgs);
        show("process 2 hangs: the others time out (TJ_TIMEOUT=3)", L, ok);
        if (ok) printf("     exit %d after %.1f s, e.g.\n     %.*s\n", L->rc, L->secs, line_len(strstr(L->out, "rank")), strstr(L->out, "rank"));
    }
    free(L);
    return tjt_finish();
}

#endif

/* ==== one process, no MPI: what can be checked without a launcher ========= */
/* A transport of the program's own, given to tj_distributed_init: it
   forwards to the built-in threads transport and counts the calls (an NCCL
   transport plugs in the same way). */
static tj_transport *inner_t;
static long wrap_calls;
static pthread_mutex_t wrap_mu = PTHREAD_MUTEX_INITIALIZER;
static void wrap_count(void) {
    pthread_mutex_lock(&wrap_mu);
    wrap_calls++;
    pthread_mutex_unlock(&wrap_mu);
}
static int w_split(tj_transport *t, int n, const int *dev, const int *color, const int *key, void **comm, char *err, size_t en) {
    (void)t;
    return inner_t->split(inner_t, n, dev, color, key, comm, err, en);
}
static void w_comm_free(tj_transport *t, void *comm) { (void)t; inner_t->comm_free(inner_t, comm); }
static int w_ag(tj_transport *t, void *comm, const void *send, void *recv, size_t bytes, void *stream, char *err, size_t en) {
    (void)t;
    wrap_count();
    return inner_t->all_gather(inner_t, comm, send, recv, bytes, stream, err, en);
}
static int w_ar(tj_transport *t, void *comm, const void *send, void *recv, size_t count, tj_dtype dt, tj_reduce_op op, void *stream, char *err, size_t en) {
    (void)t;
    wrap_count();
    return inner_t->all_reduce(inner_t, comm, send, recv, count, dt, op, stream, err, en);
}
static int w_rs(tj_transport *t, void *comm, const void *send, void *recv, size_t count, tj_dtype dt, tj_reduce_op op, void *stream, char *err, size_t en) {
    (void)t;
    wrap_count();
    return inner_t->reduce_scatter(inner_t, comm, send, recv, count, dt, op, stream, err, en);
}
static int w_a2a(tj_transport *t, void *comm, const void *send, void *recv, size_t bytes, void *stream, char *err, size_t en) {
    (void)t;
    wrap_count();
    return inner_t->all_to_all(inner_t, comm, send, recv, bytes, stream, err, en);
}
static int w_sr(tj_transport *t, void *comm, const void *send, int to, void *recv, int from, size_t bytes, void *stream, char *err, size_t en) {
    (void)t;
    wrap_count();
    return inner_t->send_recv(inner_t, comm, send, to, recv, from, bytes, stream, err, en);
}
static int w_pag(tj_transport *t, const void *send, void *recv, size_t bytes, char *err, size_t en) {
    (void)t;
    return inner_t->proc_allgather(inner_t, send, recv, bytes, err, en);
}
static void own_transport(void) {
    tj_transport w;
    tj_distributed_opts o;
    tj_ctx *c = tj_ctx_new(), *tc = thread_ctx(4, "data=2 model=2");
    int k, same = 0;
    tjt_current = "a transport of the program's own";
    inner_t = tj_threads_transport_new(0);
    memset(&w, 0, sizeof w);
    w.name = "counting";
    w.nprocs = 1;
    w.timeout_s = 60;
    w.split = w_split;
    w.comm_free = w_comm_free;
    w.all_gather = w_ag;
    w.all_reduce = w_ar;
    w.reduce_scatter = w_rs;
    w.all_to_all = w_a2a;
    w.send_recv = w_sr;
    w.proc_allgather = w_pag;
    memset(&o, 0, sizeof o);
    o.transport = &w;
    tj_set_threads(c, 1);
    TJT_CHECK(!tj_set_devices(c, 4) && !tj_distributed_init(c, &o) && !tj_set_mesh(c, "data=2 model=2") && !strcmp(tj_transport_name(c), "counting"),
              "tj_distributed_init with a transport: %s", tj_error(c));
    for (k = 0; k < NKIND; k++) {
        ccase cc;
        tj_tree *pin = tj_tree_new(c), *tin = tj_tree_new(tc);
        cc.kind = k;
        cc.axes = "data model";
        cc.dt = TJ_F32;
        cc.grad = k != 1;
        tj_tree_set_array(pin, "x", rnd(c, TJ_F32, "batch=16 embed=64", 1024, 5));
        tj_tree_set_array(tin, "x", rnd(tc, TJ_F32, "batch=16 embed=64", 1024, 5));
        tj_filter_shard(pin, "batch:data embed:model");
        tj_filter_shard(tin, "batch:data embed:model");
        same += run_digest(c, cfn, &cc, pin, kinds[k]) == run_digest(tc, cfn, &cc, tin, kinds[k]);
        tj_tree_free(pin);
        tj_tree_free(tin);
    }
    TJT_CHECK(same == NKIND && wrap_calls > 0, "through the counting transport: %d of %d kinds as the built-in one, %ld calls", same, NKIND, wrap_calls);
    tj_ctx_free(c);
    tj_ctx_free(tc);
    inner_t->free(inner_t);
}

static void single_process(void) {
    tj_ctx *c = proc_ctx(4, "data=4");
    tj_tree *tin = tj_tree_new(c), *tout = tj_tree_new(c);
    tj_prog *tp;
    int32_t idx[8] = {1, 3, 0, 2, 5, 99, 7, 1}, first;
    tjt_current = "one process";
    TJT_CHECK(tj_process_count(c) == 1 && tj_local_devices(c, &first) == 4 && first == 0, "one process owns every device");
    /* a device error must not leave the other devices waiting */
    tj_tree_set_array(tin, "emb", rnd(c, TJ_F32, "vocab=16 embed=4", 64, 3));
    tj_tree_set_array(tin, "idx", tj_array_from_local(c, TJ_I32, "batch=8", "batch:data", idx));
    tp = tj_jit(c, "take", take_fn, NULL, tin, NULL);
    TJT_CHECK(tp && tj_run(tp, tin, tout) != TJ_OK, "a bad index on device 2 fails the run (and does not hang)");
    TJT_ERROR_HAS(c, "out of range");
    idx[5] = 4;
    tj_tree_set_array(tin, "idx", tj_array_from_local(c, TJ_I32, "batch=8", "batch:data", idx));
    tj_tree_clear(tout);
    TJT_CHECK(tp && !tj_run(tp, tin, tout), "then good indices run: %s", tj_error(c));
    tj_prog_free(tp);
    tj_tree_free(tin);
    tj_tree_free(tout);
    tj_ctx_free(c);
    case_coll(4);
    case_order(4, "data=2 model=2");
    case_order(6, "data=2 model=3");
    {
        char p[64];
        snprintf(p, sizeof p, "/tmp/tj_mpi_sharded_%d.safetensors", (int)getpid());
        case_sharded_load(4, p);
        remove(p);
    }
    own_transport();
}

int main(int argc, char **argv) {
    const char *cs = NULL, *path = "", *mesh = "data=2 model=2";
    int devices = 4, i;
#if !defined(TJ_MPI)
    tjt_set_alloc(tmalloc, trealloc, free); /* before the library's first allocation */
#endif
    /* the bit-for-bit comparisons with 1 process x N threads: the threads
       side runs the separate collectives too (tj_set_collective_matmul) */
    setenv("TJ_NO_COLL_MATMUL", "1", 1);
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--case") && i + 1 < argc) cs = argv[++i];
        else if (!strcmp(argv[i], "--devices") && i + 1 < argc) devices = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mesh") && i + 1 < argc) mesh = argv[++i];
        else path = argv[i];
    }
#if defined(TJ_MPI)
    if (argc < 0) { /* demo helpers this test does not call */
        lr_at(0, 1, 1, 0, 0);
        gpt2_hf_config(NULL, NULL, 0, NULL, 0);
    }
#endif
    (void)path;
    if (!cs) {
#if defined(TJ_MPI)
        return driver(argv[0]);
#else
        single_process();
        printf("MPI cases skipped: built without TJ_MPI (build.sh builds build/mpi/test_mpi with mpicc -DTJ_MPI)\n");
        return tjt_finish();
#endif
    }
    {   /* rank and size, for the kernels and the reports */
        tj_ctx *c = tj_ctx_new();
        if (tj_distributed_init(c, NULL)) {
            fprintf(stderr, "%s\n", tj_error(c));
            return 3;
        }
        R = tj_process_index(c);
        NP = tj_process_count(c);
        tj_ctx_free(c);
    }
    if (!strcmp(cs, "coll")) case_coll(devices);
    else if (!strcmp(cs, "order")) case_order(devices, mesh);
    else if (!strcmp(cs, "sharded-load")) case_sharded_load(devices, path);
#if defined(TJ_MPI)
    else if (!strcmp(cs, "gpt2")) case_gpt2(devices);
    else if (!strcmp(cs, "ckpt-write")) case_ckpt_write(path);
    else if (!strcmp(cs, "ckpt-resume")) case_ckpt_resume(path);
#endif
    else if (!strcmp(cs, "faults")) case_faults();
    else if (!strcmp(cs, "kill")) case_fault_die(1);
    else if (!strcmp(cs, "hang")) case_fault_die(2);
    else {
        fprintf(stderr, "unknown case %s\n", cs);
        return 2;
    }
    printf("rank %d: %d passed, %d failed\n", R, tjt_pass, tjt_fail);
    fflush(stdout);
    tj_distributed_shutdown();
    return tjt_fail ? 1 : 0;
}
