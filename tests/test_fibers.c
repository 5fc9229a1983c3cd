/* Simulated devices as fibers ([11]): when a context has more devices than
   threads (tj_set_threads), the CPU backend runs each device as a fiber on
   the threads, switching only where a device waits at a collective.
   - a sharded training-like program (a scan over layers with tensor
     parallelism, the collective matmul, a vocab-parallel cross-entropy,
     and its gradients) and a shard_map program full of explicit
     collectives (psum, all_gather, psum_scatter, all_to_all, ppermute, in
     a scan): on each mesh, every way of running the devices (1, 2 and 3
     worker threads, a thread per device, TJ_FIBERS=0) gives the same bits,
     and they equal one device to rounding;
   - the transport statistics say which runs used fibers and that devices
     handed their workers over (fibers are the CPU backend's: with
     TJ_BACKEND=devsim, as the suite runs again, every way is threads);
   - a device that does not come to a collective (a custom kernel sleeping
     past TJ_TIMEOUT on one device) makes the others time out with the
     transport's message, on fibers as on threads; devices that are slow
     but running (long kernels one after another on one worker) do not;
   - many runs in a row (the sanitized build checks stacks and leaks). */
#define _POSIX_C_SOURCE 200809L /* setenv, nanosleep */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"
#include <time.h>

/* ---- the training-like program ---- */
static void layer(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    /* x: w1 (embed, mlp), w2 (mlp, embed2); a residual MLP block */
    tj_v h = tj_gelu(tj_dot(tj_layer_norm(c[0], "embed", 1e-5), x[0], "embed"));
    (void)g; (void)y; (void)u;
    co[0] = tj_add(c[0], tj_rename(tj_dot(h, x[1], "mlp"), "embed2", "embed"));
}
static void train_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), xs[2] = {tj_tree_v(in, "w1"), tj_tree_v(in, "w2")}, wv = tj_tree_v(in, "wv"), h = NULL, loss;
    tj_v wrt[4] = {x, xs[0], xs[1], wv}, gr[4];
    tj_policy pol = tj_dots_saveable();
    int i;
    static const char *names[4] = {"g_x", "g_w1", "g_w2", "g_wv"};
    (void)g; (void)u;
    tj_scan(layer, NULL, "layer", 1, &x, 2, xs, 0, &h, NULL, &pol);
    loss = tj_cross_entropy(tj_dot(h, wv, "embed"), tj_tree_v(in, "labels"), "vocab", "batch pos");
    tj_grad(loss, 4, wrt, gr);
    tj_tree_set_v(out, "loss", loss);
    for (i = 0; i < 4; i++) tj_tree_set_v(out, names[i], gr[i]);
}
static void train_inputs(tj_ctx *ctx, tj_tree *in) {
    int32_t lab[12 * 4];
    int i;
    for (i = 0; i < 48; i++) lab[i] = (i * 7 + 3) % 10;
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=12 pos=4 embed=16", 1, -1, 1));
    tj_tree_set_array(in, "w1", tjt_rand(ctx, TJ_F32, "layer=3 embed=16 mlp=32", 2, -0.4, 0.4));
    tj_tree_set_array(in, "w2", tjt_rand(ctx, TJ_F32, "layer=3 mlp=32 embed2=16", 3, -0.4, 0.4));
    tj_tree_set_array(in, "wv", tjt_rand(ctx, TJ_F32, "embed=16 vocab=12", 4, -0.5, 0.5));
    tj_tree_set_array(in, "labels", tj_array_new(ctx, TJ_I32, "batch=12 pos=4", lab));
}

/* ---- the shard_map program: explicit collectives in a scan ---- */
typedef struct {
    int model; /* the mesh's model axis: ppermute's cycle */
} smap_opts;
static void smap_layer(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    /* c: the (batch, embed) block, embed split over model; x: the
       (embed, embed2) block of w, rows split over model */
    int M = ((const smap_opts *)u)->model, pairs[2 * 8], i;
    tj_v part = tj_dot(c[0], x[0], "embed");                      /* partial over model */
    tj_v whole = tj_psum(part, "model");                           /* (batch, embed2) */
    tj_v sc = tj_psum_scatter(part, "model", "embed2");           /* the same sum, scattered */
    tj_v back = tj_all_gather(sc, "model", "embed2");             /* = whole */
    tj_v a2a = tj_all_to_all(tj_all_to_all(sc, "data", "embed2", "batch"), "data", "batch", "embed2"); /* = sc */
    tj_v shifted, stat;
    (void)g; (void)y;
    for (i = 0; i < M; i++) pairs[2 * i] = i, pairs[2 * i + 1] = (i + 1) % M;
    shifted = tj_ppermute(sc, "model", M, pairs);
    stat = tj_muls(tj_sum(tj_mul(whole, back), "embed2"), 0.01); /* (batch) */
    co[0] = tj_tanh(tj_add(tj_add(tj_rename(tj_add(a2a, tj_muls(shifted, 0.25)), "embed2", "embed"), tj_muls(c[0], 0.1)), stat));
}
static void smap_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v h = NULL;
    (void)g;
    tj_scan(smap_layer, u, "layer", 1, &in[0], 1, &in[1], 0, &h, NULL, NULL);
    out[0] = tj_psum(tj_sum(tj_mul(h, h), "batch embed"), "data model");
}
static void smap_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), ins[2] = {x, w}, loss, gr[2];
    const char *ispec[2] = {"batch:data embed:model", "embed:model"}, *ospec[1] = {""};
    (void)g;
    tj_shard_map(smap_body, u, 2, ins, ispec, 1, &loss, ospec, 1);
    tj_grad(loss, 2, ins, gr);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g_x", gr[0]);
    tj_tree_set_v(out, "g_w", gr[1]);
}
static void smap_inputs(tj_ctx *ctx, tj_tree *in) {
    tj_tree_set_array(in, "x", tjt_rand(ctx, TJ_F32, "batch=8 embed=8", 5, -1, 1));
    tj_tree_set_array(in, "w", tjt_rand(ctx, TJ_F32, "layer=3 embed=8 embed2=8", 6, -0.6, 0.6));
}

typedef struct {
    const char *name;
    tj_fn fn;
    void (*inputs)(tj_ctx *, tj_tree *);
    const char *rules; /* tj_filter_shard of the inputs (NULL: shard_map places them) */
    int same_math;     /* every mesh computes what one device does (not so
                          where the body's ppermute and all_to_all depend on it) */
} prog;
static const prog progs[] = {
    {"scan over layers, tensor parallel, collective matmul, vocab-parallel loss", train_fn, train_inputs, "batch:data mlp:model vocab:model", 1},
    {"shard_map: psum, psum_scatter, all_gather, all_to_all, ppermute in a scan", smap_fn, smap_inputs, NULL, 0},
};

static int cpu_backend; /* set by run(): fibers are the CPU backend's */
/* run progs[k] on ndev devices with `threads` threads (0: the default),
   TJ_FIBERS as given (NULL: unset); the outputs into o, the stats' change */
static int run(int k, int ndev, const char *mesh, int threads, const char *fibers, tjt_outs *o, tj_transport_stats *d) {
    tj_ctx *ctx;
    tj_tree *in, *out;
    tj_prog *p;
    tj_transport_stats s0, s1;
    smap_opts so;
    const char *ms = mesh ? strstr(mesh, "model=") : NULL;
    int ok = 1;
    so.model = ms ? atoi(ms + 6) : 1;
    if (fibers) setenv("TJ_FIBERS", fibers, 1);
    else unsetenv("TJ_FIBERS");
    ctx = tj_ctx_new();
    in = tj_tree_new(ctx);
    out = tj_tree_new(ctx);
    cpu_backend = tjt_ctx_backend(ctx) == NULL;
    memset(o, 0, sizeof *o);
    tj_set_devices(ctx, ndev);
    tj_set_mesh(ctx, mesh ? mesh : "data=1 model=1");
    if (threads) tj_set_threads(ctx, threads);
    progs[k].inputs(ctx, in);
    if (progs[k].rules && ndev > 1 && tj_filter_shard(in, progs[k].rules)) ok = 0;
    p = ok ? tj_jit(ctx, "prog", progs[k].fn, &so, in, NULL) : NULL;
    s0 = tj_get_transport_stats(ctx);
    if (!p || tj_run(p, in, out)) ok = 0;
    s1 = tj_get_transport_stats(ctx);
    d->fiber_runs = s1.fiber_runs - s0.fiber_runs;
    d->fiber_switches = s1.fiber_switches - s0.fiber_switches;
    d->collectives = s1.collectives - s0.collectives;
    if (ok) tjt_outs_read(o, out);
    else fprintf(stderr, "%s on %s, %d threads, TJ_FIBERS=%s: %s\n", progs[k].name, mesh ? mesh : "1 device", threads, fibers ? fibers : "-", tj_error(ctx));
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    unsetenv("TJ_FIBERS");
    return ok;
}

static void test_same_bits(void) {
    static const struct { int ndev; const char *mesh; } meshes[] = {
        {8, "data=4 model=2"}, {4, "data=2 model=2"}, {3, "data=3 model=1"}, {6, "data=3 model=2"}, {8, "data=2 model=4"}};
    static const struct { int threads; const char *env; int fibers; } ways[] = {
        {1, NULL, 1}, {2, NULL, 1}, {3, NULL, 1}, {2, "0", 0}, {64, NULL, 0}};
    int k, m, w;
    for (k = 0; k < (int)(sizeof progs / sizeof progs[0]); k++) {
        tjt_outs one;
        tj_transport_stats d;
        char what[300];
        tjt_current = progs[k].name;
        if (!run(k, 1, NULL, 0, NULL, &one, &d)) {
            TJT_CHECK(0, "%s on one device ran", progs[k].name);
            continue;
        }
        for (m = 0; m < (int)(sizeof meshes / sizeof meshes[0]); m++) {
            tjt_outs ref;
            int have = 0;
            if (k == 1 && strstr(meshes[m].mesh, "data=3")) continue; /* (its all_to_all splits 8 / model over data) */
            for (w = 0; w < (int)(sizeof ways / sizeof ways[0]); w++) {
                tjt_outs o;
                int fib;
                snprintf(what, sizeof what, "%s on %s, %d threads%s", progs[k].name, meshes[m].mesh, ways[w].threads, ways[w].env ? ", TJ_FIBERS=0" : "");
                if (!run(k, meshes[m].ndev, meshes[m].mesh, ways[w].threads, ways[w].env, &o, &d)) {
                    TJT_CHECK(0, "%s: ran", what);
                    continue;
                }
                fib = ways[w].fibers && ways[w].threads < meshes[m].ndev && cpu_backend;
                TJT_CHECK(d.collectives > 0, "%s: %lld collectives", what, (long long)d.collectives);
                TJT_CHECK(d.fiber_runs == fib, "%s: fiber runs %lld, want %d", what, (long long)d.fiber_runs, fib);
                /* a worker of several devices hands over at least once per collective it waits at */
                TJT_CHECK(!fib || d.fiber_switches > 0, "%s: %lld fiber switches", what, (long long)d.fiber_switches);
                if (!have) {
                    if (progs[k].same_math) tjt_outs_compare(what, &one, &o, 2e-5); /* sharded equals one device, to rounding */
                    ref = o;
                    have = 1;
                } else {
                    tjt_outs_compare(what, &ref, &o, 0); /* however the devices ran: the same bits */
                    tjt_outs_free(&o);
                }
            }
            if (have) tjt_outs_free(&ref);
        }
        tjt_outs_free(&one);
    }
}

/* ---- devices that are slow to come to a collective ----
   A custom kernel sleeps on some devices before a psum over data=4 (2
   worker threads: devices 1 and 3 share worker 1). */
typedef struct {
    long ns;  /* how long the kernel sleeps */
    int odd;  /* on every odd device (else on device 1 alone) */
} nap_spec;
static void nap_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *u) {
    const nap_spec *sp = (const nap_spec *)u;
    struct timespec ts;
    int dev = (int)((const float *)in[1].data)[0];
    (void)nin; (void)nout;
    ts.tv_sec = sp->ns / 1000000000L;
    ts.tv_nsec = sp->ns % 1000000000L;
    if (sp->odd ? dev % 2 : dev == 1) nanosleep(&ts, NULL);
    memcpy(out[0].data, in[0].data, sizeof(float) * (size_t)in[0].dim[0]);
}
static void nap_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v a[2] = {in[0], tj_cast(tj_axis_index(g, "data"), TJ_F32)}, o;
    (void)u;
    tj_custom("nap", 2, a, &o);
    out[0] = tj_psum(tj_sum(o, "batch"), "data");
}
static void nap_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), s;
    const char *ispec[1] = {"batch:data"}, *ospec[1] = {""};
    (void)g; (void)u;
    tj_shard_map(nap_body, NULL, 1, &x, ispec, 1, &s, ospec, 1);
    tj_tree_set_v(out, "s", s);
}
/* run it with TJ_TIMEOUT `timeout`, on fibers or (threads) a thread per
   device; the status, the sum (36 when it ran), the error, and whether
   the run used fibers as it should (never with a backend: devsim) */
static tj_status nap_run(const char *timeout, const nap_spec *sp, int threads, double *sum, char *err, size_t en, int *fibers_ok) {
    tj_ctx *ctx;
    tj_tree *in, *out;
    tj_prog *p;
    tj_op_def d;
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    tj_status st;
    setenv("TJ_TIMEOUT", timeout, 1);
    if (threads) setenv("TJ_FIBERS", "0", 1);
    ctx = tj_ctx_new();
    in = tj_tree_new(ctx);
    out = tj_tree_new(ctx);
    tj_set_devices(ctx, 4);
    tj_set_mesh(ctx, "data=4");
    tj_set_threads(ctx, 2);
    memset(&d, 0, sizeof d);
    d.name = "nap";
    d.nout = 1;
    d.cpu = nap_cpu;
    d.replication = tj_rep_same;
    d.user = (void *)sp;
    tj_register_op(ctx, &d);
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F32, "batch=8", x));
    p = tj_jit(ctx, "nap", nap_fn, NULL, in, NULL);
    st = p ? tj_run(p, in, out) : TJ_ERR_ARG;
    *sum = 0;
    if (st == TJ_OK) tj_array_read(tj_tree_array(out, "s"), TJ_F64, sum);
    snprintf(err, en, "%s", tj_error(ctx));
    *fibers_ok = tj_get_transport_stats(ctx).fiber_runs == (!threads && !tjt_ctx_backend(ctx));
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    unsetenv("TJ_TIMEOUT");
    unsetenv("TJ_FIBERS");
    return st;
}
/* Two cases, on fibers as on threads:
   - a device that does not come (1.5 s past a timeout of 0.3 s): the
     others time out with the transport's message;
   - long kernels on another worker are no hang: devices 1 and 3 (worker
     1) each sleep 0.3 s, one after the other on their worker, so device
     0 waits 0.6 s, past a TJ_TIMEOUT of 0.5 s, though no device ever
     stopped: as threads they run side by side, and on fibers the timeout
     counts from the last time any device arrived (it timed out here
     before). */
static void test_slow_devices(void) {
    static const struct {
        const char *name, *timeout;
        nap_spec sp;
        int ok; /* the run succeeds (else it times out) */
    } cases[2] = {{"a device that does not come to a collective", "0.3", {1500000000L, 0}, 0},
                  {"long kernels on another worker", "0.5", {300000000L, 1}, 1}};
    char err[600];
    double sum;
    int k, way, fib;
    for (k = 0; k < 2; k++)
        for (way = 0; way < 2; way++) {
            tj_status st = nap_run(cases[k].timeout, &cases[k].sp, way, &sum, err, sizeof err, &fib);
            tjt_current = cases[k].name;
            if (cases[k].ok)
                TJT_CHECK(st == TJ_OK && sum == 36, "%s: the run succeeds (status %d, %s), sum %g", way ? "threads" : "fibers", (int)st, err, sum);
            else
                TJT_CHECK(st != TJ_OK && strstr(err, "timed out after 0.3 s") && strstr(err, "psum"), "%s: the run fails with the timeout (status %d: %s)",
                          way ? "threads" : "fibers", (int)st, err);
            TJT_CHECK(fib, "%s: the run used fibers as it should", way ? "threads" : "fibers");
        }
}

/* ---- many runs: stacks made and freed each time ---- */
static void test_many_runs(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_prog *p;
    tj_transport_stats s;
    int i, ok = 1, n = getenv("TJ_TEST_QUICK") ? 20 : 100;
    smap_opts so = {2};
    double first = 0, v;
    tjt_current = "many runs";
    tj_set_devices(ctx, 4);
    tj_set_mesh(ctx, "data=2 model=2");
    tj_set_threads(ctx, 2);
    smap_inputs(ctx, in);
    p = tj_jit(ctx, "smap", smap_fn, &so, in, NULL);
    for (i = 0; i < n && ok; i++) {
        ok = p && !tj_run(p, in, out) && !tj_array_read(tj_tree_array(out, "loss"), TJ_F64, &v);
        if (i == 0) first = v;
        ok = ok && v == first;
    }
    s = tj_get_transport_stats(ctx);
    TJT_CHECK(ok, "%d runs of the same program give the same loss (%s)", n, tj_error(ctx));
    TJT_CHECK(s.fiber_runs == (tjt_ctx_backend(ctx) == NULL ? n : 0), "%d runs on fibers: %lld", n, (long long)s.fiber_runs);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
}

int main(void) {
    test_same_bits();
    test_slow_devices();
    test_many_runs();
    return tjt_finish();
}
