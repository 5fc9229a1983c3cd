/* test_devsim.c — the device-like CPU backend (devsim, tinyjax.h [11]).
 *
 * build.sh runs the whole suite a second time with TJ_BACKEND=devsim, which
 * tests the runner (scan iterations, regions, offload and fetch, staged
 * slices, collectives, fused groups) through the backend interface. This
 * file checks the backend itself: that its memory cannot be touched by the
 * host (a direct read faults), that its streams are asynchronous (a missing
 * sync reads stale bytes), that a write past a block is caught, that kernel
 * errors come back at sync with the CPU's message, and that programs give
 * the CPU backend's bits, here and under TJ_BACKEND=devsim. */
#define _POSIX_C_SOURCE 200809L
/* the implementation is linked in: tests/tj_impl.c */
#include "../tinyjax.h"
#include "tj_test.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* run fn(arg) in a child process; returns the signal that ended it, 0 if it
   exited with status 0, 1000 + status for another exit (a sanitizer's
   report of a SEGV ends that way), -1 if fork failed */
static int in_child(void (*fn)(void *), void *arg) {
    pid_t pid;
    int st;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* the child's crash is expected: no sanitizer report, no core */
        fclose(stderr);
        fn(arg);
        _exit(0);
    }
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st) ? 1000 + WEXITSTATUS(st) : 0;
}
static void read_direct(void *p) {
    volatile float *f = (volatile float *)p;
    float x = f[0]; /* the host must not do this */
    (void)x;
}
static void overrun(void *arg) {
    tj_backend *b = (tj_backend *)arg;
    char src[96];
    void *p = b->alloc(b, -1, TJ_SPACE_DEVICE, 32);
    memset(src, 1, sizeof src);
    b->copy(b, -1, p, TJ_SPACE_DEVICE, src, TJ_SPACE_USER, sizeof src); /* 64 bytes too many */
    b->free(b, -1, TJ_SPACE_DEVICE, p);
}

static void mlp(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), w = tj_tree_v(in, "w"), h;
    (void)g;
    (void)u;
    h = tj_tanh(tj_dot(x, w, "in"));
    tj_tree_set_v(out, "y", tj_sum(tj_mul(h, h), "b out"));
}
static void bad_take(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g;
    (void)u;
    tj_tree_set_v(out, "y", tj_take(tj_tree_v(in, "t"), "v", tj_tree_v(in, "i")));
}

/* ---- asynchronous copies: demos/offload_scan.c's model, small ----
   A stack of residual MLP blocks scanned over "layer", loss + gradients
   under a remat/offload policy. Offloading runs a copy to host memory on
   the copy stream each forward iteration (whose source the next iteration
   overwrites), and the backward scan stages each offloaded slice back one
   iteration ahead; a checkpoint with an offload policy fetches its
   residual back (to_device) before the region's backward reads it. On
   devsim each copy lags TJ_DEVSIM_COPY_DELAY_US behind, so a wait the
   runner forgets gives other numbers than the CPU (or a report of ASan). */
enum { AL = 24, AB = 2, AP = 4, AE = 16, AH = 32 };
static tj_v ablock(tj_v x, tj_v w1, tj_v w2) {
    tj_v h = tj_checkpoint_name(tj_dot(x, w1, "embed"), "hidden");
    return tj_checkpoint_name(tj_add(x, tj_dot(tj_relu(h), w2, "hidden")), "residual");
}
static void abody(tj_graph *g, const tj_v *carry, const tj_v *xs, tj_v *carry_out, tj_v *ys, void *u) {
    (void)g;
    (void)ys;
    (void)u;
    carry_out[0] = ablock(carry[0], xs[0], xs[1]);
}
static void aregion(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g;
    (void)u;
    out[0] = tj_tanh(ablock(in[0], in[1], in[2]));
}
static void astack(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const tj_policy *pol = (const tj_policy *)u;
    tj_v x = tj_tree_v(in, "x"), xs[2], h, r[3], loss, wrt[4], gr[4];
    (void)g;
    xs[0] = tj_tree_v(in, "w1");
    xs[1] = tj_tree_v(in, "w2");
    if (tj_scan(abody, NULL, "layer", 1, &x, 2, xs, 0, &h, NULL, pol) != TJ_OK) return;
    r[0] = h; /* then one more block in a checkpoint: to_host and to_device */
    r[1] = tj_tree_v(in, "v1");
    r[2] = tj_tree_v(in, "v2");
    if (tj_checkpoint(aregion, NULL, 3, r, 1, &h, pol) != TJ_OK) return;
    loss = tj_mean(tj_dot(h, tj_tree_v(in, "wout"), "embed"), "batch pos");
    wrt[0] = xs[0], wrt[1] = xs[1], wrt[2] = r[1], wrt[3] = x;
    if (tj_grad(loss, 4, wrt, gr) != TJ_OK) return;
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g_w1", gr[0]);
    tj_tree_set_v(out, "g_w2", gr[1]);
    tj_tree_set_v(out, "g_v1", gr[2]);
    tj_tree_set_v(out, "g_x", gr[3]);
}
static tj_tree *astack_in(tj_ctx *c) {
    tj_tree *in = tj_tree_new(c);
    char sh[96];
    snprintf(sh, sizeof sh, "batch=%d pos=%d embed=%d", AB, AP, AE);
    tj_tree_set_array(in, "x", tjt_rand(c, TJ_F32, sh, 11, -1, 1));
    snprintf(sh, sizeof sh, "layer=%d embed=%d hidden=%d", AL, AE, AH);
    tj_tree_set_array(in, "w1", tjt_rand(c, TJ_F32, sh, 12, -0.25, 0.25));
    snprintf(sh, sizeof sh, "layer=%d hidden=%d embed=%d", AL, AH, AE);
    tj_tree_set_array(in, "w2", tjt_rand(c, TJ_F32, sh, 13, -0.18, 0.18));
    snprintf(sh, sizeof sh, "embed=%d hidden=%d", AE, AH);
    tj_tree_set_array(in, "v1", tjt_rand(c, TJ_F32, sh, 14, -0.25, 0.25));
    snprintf(sh, sizeof sh, "hidden=%d embed=%d", AH, AE);
    tj_tree_set_array(in, "v2", tjt_rand(c, TJ_F32, sh, 15, -0.18, 0.18));
    snprintf(sh, sizeof sh, "embed=%d", AE);
    tj_tree_set_array(in, "wout", tjt_rand(c, TJ_F32, sh, 16, -0.25, 0.25));
    return in;
}

/* ---- a backend that counts the bytes it holds in each memory space ----
   It passes every call on to devsim; the offload tests compare its device
   and host bytes with the memory plan. */
#define NBLK 4096
typedef struct {
    tj_backend b;
    tj_backend *in;
    void *blk[NBLK];
    size_t blkn[NBLK];
    int blks[NBLK];
    int64_t live[2]; /* TJ_SPACE_DEVICE, TJ_SPACE_HOST */
} counting;
static tj_backend *inner(tj_backend *b) { return ((counting *)b->state)->in; }
static void *cnt_alloc(tj_backend *b, int dev, int space, size_t n) {
    counting *c = (counting *)b->state;
    void *p = c->in->alloc(c->in, dev, space, n);
    int i;
    if (p && (space == TJ_SPACE_DEVICE || space == TJ_SPACE_HOST)) {
        for (i = 0; i < NBLK && c->blk[i]; i++) {}
        if (i < NBLK) {
            c->blk[i] = p;
            c->blkn[i] = n;
            c->blks[i] = space;
            c->live[space] += (int64_t)n;
        }
    }
    return p;
}
static void cnt_free(tj_backend *b, int dev, int space, void *p) {
    counting *c = (counting *)b->state;
    int i;
    for (i = 0; p && i < NBLK; i++)
        if (c->blk[i] == p) {
            c->live[c->blks[i]] -= (int64_t)c->blkn[i];
            c->blk[i] = NULL;
            break;
        }
    c->in->free(c->in, dev, space, p);
}
static int cnt_copy(tj_backend *b, int dev, void *d, int ds, const void *s, int ss, size_t n) { return inner(b)->copy(inner(b), dev, d, ds, s, ss, n); }
static int cnt_run(tj_backend *b, struct tj__kern *k) { return inner(b)->run(inner(b), k); }
static int cnt_sync(tj_backend *b, int dev, char *e, size_t en) { return inner(b)->sync(inner(b), dev, e, en); }
static uint64_t cnt_copy_async(tj_backend *b, int dev, void *d, int ds, const void *s, int ss, size_t n) {
    return inner(b)->copy_async(inner(b), dev, d, ds, s, ss, n);
}
static int cnt_wait(tj_backend *b, int dev, uint64_t t, char *e, size_t en) { return inner(b)->wait(inner(b), dev, t, e, en); }
static int cnt_mark(tj_backend *b, int dev, int w) { return inner(b)->mark(inner(b), dev, w); }
static int cnt_mark_times(tj_backend *b, int dev, double *us, int n) { return inner(b)->mark_times(inner(b), dev, us, n); }
static void counting_init(counting *c, tj_backend *in) {
    memset(c, 0, sizeof *c);
    c->in = in;
    c->b = *in;
    c->b.state = c;
    c->b.alloc = cnt_alloc;
    c->b.free = cnt_free;
    c->b.copy = cnt_copy;
    c->b.run = cnt_run;
    c->b.sync = cnt_sync;
    c->b.copy_async = cnt_copy_async;
    c->b.wait = cnt_wait;
    c->b.mark = cnt_mark;
    c->b.mark_times = cnt_mark_times;
}

int main(void) {
    tj_backend *b = tj_devsim_backend();
    tj_ctx *cpu = tj_ctx_new(), *ds = tj_ctx_new();
    const char *env = getenv("TJ_BACKEND");
    int under_devsim = env && !strcmp(env, "devsim");

    tjt_current = "setup";
    TJT_CHECK(b && cpu && ds, "devsim backend or contexts not made");
    if (!b || !cpu || !ds) return tjt_finish();
    TJT_CHECK(!strcmp(b->name, "devsim") && b->fused_groups, "devsim should be named devsim and run fused groups");
    if (!under_devsim) TJT_CHECK(tjt_ctx_backend(cpu) == NULL, "a context without TJ_BACKEND uses the CPU backend");
    else TJT_CHECK(tjt_ctx_backend(cpu) && !strcmp(tjt_ctx_backend(cpu)->name, "devsim"), "TJ_BACKEND=devsim: a new context uses devsim");
    tj_set_backend(ds, b);

    tjt_current = "memory";
    {
        float in[4] = {1, 2, 3, 4}, outv[4] = {0};
        void *p = b->alloc(b, -1, TJ_SPACE_DEVICE, sizeof in), *h = b->alloc(b, -1, TJ_SPACE_HOST, sizeof in);
        TJT_CHECK(p && h, "alloc failed");
        TJT_CHECK(((uintptr_t)p & (uintptr_t)63) == 0, "device pointers are 64-byte aligned");
        b->copy(b, -1, p, TJ_SPACE_DEVICE, in, TJ_SPACE_USER, sizeof in);
        b->copy(b, 0, h, TJ_SPACE_HOST, p, TJ_SPACE_DEVICE, sizeof in); /* on device 0's stream */
        b->copy(b, 0, outv, TJ_SPACE_USER, h, TJ_SPACE_HOST, sizeof in);
        TJT_CHECK(b->sync(b, 0, NULL, 0) == 0, "sync after copies reports no error");
        TJT_CHECK(!memcmp(in, outv, sizeof in), "bytes through device and host space come back: %g %g %g %g", outv[0], outv[1], outv[2], outv[3]);
        {
            int sig = in_child(read_direct, p);
            TJT_CHECK(sig == SIGSEGV || sig == SIGBUS || sig > 1000, "the host reading device memory directly should fault (child: %d)", sig);
            sig = in_child(read_direct, h);
            TJT_CHECK(sig == SIGSEGV || sig == SIGBUS || sig > 1000, "the host reading host-space memory directly should fault (child: %d)", sig);
        }
        b->free(b, -1, TJ_SPACE_DEVICE, p);
        b->free(b, -1, TJ_SPACE_HOST, h);
        TJT_CHECK(in_child(overrun, b) == SIGABRT, "a copy past the end of a block is caught at free (abort)");
    }

    tjt_current = "streams";
    { /* a copy queued on a stream lands at sync, not before: a missing wait reads stale bytes */
        size_t n = (size_t)32 << 20;
        unsigned char *src = (unsigned char *)malloc(n), *dst = (unsigned char *)malloc(n);
        void *p = b->alloc(b, -1, TJ_SPACE_DEVICE, n);
        int t, stale = 0;
        if (src && dst && p) {
            memset(src, 7, n);
            b->copy(b, -1, p, TJ_SPACE_DEVICE, src, TJ_SPACE_USER, n);
            for (t = 0; t < 10; t++) {
                volatile unsigned char *last = dst + n - 1;
                memset(dst, 0, n);
                b->copy(b, 1, dst, TJ_SPACE_USER, p, TJ_SPACE_DEVICE, n);
                stale += *last != 7; /* no sync yet */
                b->sync(b, 1, NULL, 0);
                TJT_CHECK(*last == 7 && dst[0] == 7, "after sync the copy has landed");
            }
            TJT_CHECK(stale > 0, "copies should be asynchronous: all %d reads before sync saw the new bytes", t);
        } else TJT_CHECK(0, "out of memory");
        b->free(b, -1, TJ_SPACE_DEVICE, p);
        free(src);
        free(dst);
    }

    tjt_current = "programs";
    { /* the same bits as the CPU backend, fused groups and all */
        tj_tree *in[2], *out[2];
        tj_ctx *c[2];
        float y[2] = {0, 1};
        int i;
        c[0] = cpu;
        c[1] = ds;
        for (i = 0; i < 2; i++) {
            tj_prog *p;
            in[i] = tj_tree_new(c[i]);
            out[i] = tj_tree_new(c[i]);
            tj_tree_set_array(in[i], "x", tjt_rand(c[i], TJ_F32, "b=33 in=17", 3, -1, 1));
            tj_tree_set_array(in[i], "w", tjt_rand(c[i], TJ_F32, "in=17 out=9", 4, -1, 1));
            p = tj_jit(c[i], "mlp", mlp, NULL, in[i], NULL);
            TJT_CHECK(p && tj_run(p, in[i], out[i]) == TJ_OK, "mlp: %s", tj_error(c[i]));
            if (tj_tree_array(out[i], "y")) tj_array_read(tj_tree_array(out[i], "y"), TJ_F32, &y[i]);
            tj_prog_free(p);
        }
        TJT_CHECK(y[0] == y[1], "devsim %.9g vs CPU %.9g", y[1], y[0]);
        for (i = 0; i < 2; i++) {
            tj_tree_free(in[i]);
            tj_tree_free(out[i]);
        }
    }

    tjt_current = "errors";
    { /* a bad index: the kernel's error comes back at sync with the CPU's words; the next run is clean */
        tj_tree *in = tj_tree_new(ds), *out = tj_tree_new(ds);
        int32_t bad[3] = {0, 5, 1}, good[3] = {2, 0, 1};
        tj_prog *p;
        tj_tree_set_array(in, "t", tjt_rand(ds, TJ_F32, "v=3 d=4", 5, -1, 1));
        tj_tree_set_array(in, "i", tj_array_new(ds, TJ_I32, "n=3", bad));
        p = tj_jit(ds, "take", bad_take, NULL, in, NULL);
        TJT_CHECK(p != NULL, "jit: %s", tj_error(ds));
        if (p) {
            TJT_CHECK(tj_run(p, in, out) != TJ_OK, "a bad index should fail the run");
            TJT_ERROR_HAS(ds, "index 5 at position 1", "out of range");
            tj_tree_free(out);
            out = tj_tree_new(ds);
            tj_tree_set_array(in, "i", tj_array_new(ds, TJ_I32, "n=3", good));
            TJT_CHECK(tj_run(p, in, out) == TJ_OK, "the next run with good indices: %s", tj_error(ds));
        }
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
    }

    tjt_current = "offload policies";
    { /* every remat policy of demos/offload_scan.c: the CPU's bits, and the
         device and host bytes the memory plan says, on devsim */
        const char *label[6] = {"everything_saveable", "nothing_saveable", "save hidden", "offload hidden", "offload residual", "offload hidden residual"};
        tj_policy pol[6];
        counting cb;
        int v, r;
        pol[0] = tj_everything_saveable();
        pol[1] = tj_nothing_saveable();
        pol[2] = tj_save_only_these_names("hidden");
        pol[3] = tj_save_and_offload_only_these_names("", "hidden");
        pol[4] = tj_save_and_offload_only_these_names("", "residual");
        pol[5] = tj_save_and_offload_only_these_names("", "hidden residual");
        counting_init(&cb, b);
        for (v = 0; v < 6; v++) {
            tj_ctx *c[2];
            tjt_outs o[2];
            tj_memory_analysis mem;
            memset(o, 0, sizeof o);
            c[0] = tj_ctx_new();
            c[1] = tj_ctx_new();
            tj_set_backend(c[0], NULL); /* the CPU, also under TJ_BACKEND=devsim */
            tj_set_backend(c[1], &cb.b);
            for (r = 0; r < 2; r++) {
                tj_tree *in = astack_in(c[r]), *out = tj_tree_new(c[r]);
                tj_prog *p = tj_jit(c[r], "astack", astack, &pol[v], in, NULL);
                int run;
                TJT_CHECK(p != NULL, "%s: jit: %s", label[v], tj_error(c[r]));
                for (run = 0; p && run < (r ? 3 : 1); run++) { /* devsim: again on the same arenas */
                    tj_tree_free(out);
                    out = tj_tree_new(c[r]);
                    TJT_CHECK(tj_run(p, in, out) == TJ_OK, "%s: run %d: %s", label[v], run, tj_error(c[r]));
                    if (r && run) {
                        tjt_outs again;
                        char what[96];
                        memset(&again, 0, sizeof again);
                        tjt_outs_read(&again, out);
                        snprintf(what, sizeof what, "%s: devsim run %d vs run 0", label[v], run);
                        tjt_outs_compare(what, &o[1], &again, 0);
                        tjt_outs_free(&again);
                    } else tjt_outs_read(&o[r], out);
                }
                if (p && r) {
                    mem = tj_prog_memory(p);
                    TJT_CHECK(cb.live[TJ_SPACE_HOST] == mem.host_temp_bytes, "%s: devsim holds %lld B of host space, the plan says %lld B", label[v],
                              (long long)cb.live[TJ_SPACE_HOST], (long long)mem.host_temp_bytes);
                    TJT_CHECK(tj_get_alloc_stats(c[1]).arena_bytes - cb.live[TJ_SPACE_HOST] == mem.temp_bytes,
                              "%s: devsim holds %lld B of device arena, the plan says %lld B", label[v],
                              (long long)(tj_get_alloc_stats(c[1]).arena_bytes - cb.live[TJ_SPACE_HOST]), (long long)mem.temp_bytes);
                    TJT_CHECK((mem.host_temp_bytes > 0) == (v >= 3), "%s: %lld B planned in host space", label[v], (long long)mem.host_temp_bytes);
                }
                tj_prog_free(p);
                tj_tree_free(in);
                tj_tree_free(out);
            }
            {
                char what[96];
                snprintf(what, sizeof what, "%s: devsim vs CPU", label[v]);
                tjt_outs_compare(what, &o[0], &o[1], 0);
            }
            tjt_outs_free(&o[0]);
            tjt_outs_free(&o[1]);
            tj_ctx_free(c[0]);
            tj_ctx_free(c[1]);
        }
        TJT_CHECK(cb.live[TJ_SPACE_DEVICE] == 0 && cb.live[TJ_SPACE_HOST] == 0, "after the programs and arrays are freed devsim still holds %lld + %lld B",
                  (long long)cb.live[TJ_SPACE_DEVICE], (long long)cb.live[TJ_SPACE_HOST]);
    }

    tjt_current = "trace";
    { /* device time stamps: a track per stream, each stream's events in
         order and never overlapping; a copy takes the copy stream's lag
         (device time: the host only queued it) */
        tj_backend *b2;
        tj_ctx *c = tj_ctx_new();
        tj_tree *in, *out;
        tj_policy pol = tj_save_and_offload_only_these_names("", "hidden residual");
        tj_prog *p;
        const char *old = getenv("TJ_DEVSIM_COPY_DELAY_US");
        char *keep = old ? strdup(old) : NULL;
        setenv("TJ_DEVSIM_COPY_DELAY_US", "300", 1);
        b2 = tj_devsim_backend();
        if (keep) setenv("TJ_DEVSIM_COPY_DELAY_US", keep, 1);
        else unsetenv("TJ_DEVSIM_COPY_DELAY_US");
        free(keep);
        tj_set_backend(c, b2);
        tj_set_profile(c, 1);
        in = astack_in(c);
        out = tj_tree_new(c);
        p = tj_jit(c, "astack", astack, &pol, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "profiled run: %s", tj_error(c));
        if (p) {
            int n = tj_prog_events(p, NULL, 0), i, w, cnt[2] = {0, 0}, copies = 0, slow = 0, names = 0;
            tj_event *ev = (tj_event *)calloc((size_t)n + 1, sizeof *ev);
            double end[2] = {-1e300, -1e300};
            n = ev ? tj_prog_events(p, ev, n) : 0;
            for (i = 0; i < n; i++) {
                w = ev[i].stream;
                TJT_CHECK(w == 0 || w == 1, "event %d (%s) on stream %d", i, ev[i].op, w);
                if (w != 0 && w != 1) continue;
                cnt[w]++;
                TJT_CHECK(ev[i].dur_us >= 0 && ev[i].start_us >= end[w] - 1e-6, "stream %d: event %d (%s) starts at %.3f us, before the last one ended (%.3f us)", w, i,
                          ev[i].op, ev[i].start_us, end[w]);
                end[w] = ev[i].start_us + ev[i].dur_us;
                if (w == 1) {
                    copies += ev[i].kind == 2;
                    slow += ev[i].dur_us >= 300;
                    names += !strcmp(ev[i].op, "offload") || !strcmp(ev[i].op, "fetch") || !strcmp(ev[i].op, "prefetch");
                }
            }
            TJT_CHECK(cnt[0] > 0 && cnt[1] > 0, "events on both streams: compute %d, copy %d", cnt[0], cnt[1]);
            TJT_CHECK(copies == cnt[1] && names == cnt[1], "the copy stream holds copies only (offload, fetch, prefetch): %d of %d", names, cnt[1]);
            TJT_CHECK(slow == cnt[1], "device times: %d of %d copies took the copy stream's 300 us", slow, cnt[1]);
            {
                const char *path = "build_test_devsim_trace.json";
                FILE *f;
                char buf[1 << 16];
                size_t got = 0;
                TJT_CHECK(tj_prog_write_trace(p, path) == TJ_OK, "write trace: %s", tj_error(c));
                if ((f = fopen(path, "rb")) != NULL) {
                    got = fread(buf, 1, sizeof buf - 1, f);
                    fclose(f);
                }
                buf[got] = 0;
                TJT_CHECK(strstr(buf, "\"device 0 compute\"") && strstr(buf, "\"device 0 copies\""), "the trace names a track per stream");
                TJT_CHECK(strstr(buf, "\"tid\": 1, \"ts\""), "the trace has events on the copy stream's track");
                remove(path);
            }
            free(ev);
        }
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(c);
        tj_devsim_backend_free(b2);
    }

    tjt_current = "wrong backend";
    { /* a program compiled for one backend is refused on another (its fused
         groups and arenas were made for the first), in both directions */
        tj_ctx *c = tj_ctx_new();
        tj_backend *orig = tjt_ctx_backend(c), *other = orig ? NULL : b;
        const char *oname = orig ? orig->name : "cpu", *nname = other ? other->name : "cpu";
        tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
        tj_prog *p;
        tj_tree_set_array(in, "x", tjt_rand(c, TJ_F32, "b=5 in=3", 3, -1, 1));
        tj_tree_set_array(in, "w", tjt_rand(c, TJ_F32, "in=3 out=2", 4, -1, 1));
        p = tj_jit(c, "mlp_here", mlp, NULL, in, NULL);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "run on the backend it was compiled for: %s", tj_error(c));
        tj_set_backend(c, other);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_ERR_STATE, "a run after tj_set_backend should be refused");
        TJT_ERROR_HAS(c, "mlp_here", oname, nname, "tj_jit again");
        tj_clear_error(c);
        tj_set_backend(c, orig); /* back: it runs again */
        tj_tree_free(out);
        out = tj_tree_new(c);
        TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "run after setting the backend back: %s", tj_error(c));
        tj_prog_free(p);
        tj_tree_free(in);
        tj_tree_free(out);
        tj_ctx_free(c);
    }

    tjt_current = "environment";
    {
        tj_ctx *e;
        setenv("TJ_BACKEND", "warp-drive", 1);
        e = tj_ctx_new();
        TJT_ERROR_HAS(e, "TJ_BACKEND", "warp-drive", "devsim");
        tj_ctx_free(e);
        if (env) setenv("TJ_BACKEND", env, 1);
        else unsetenv("TJ_BACKEND");
    }

    tj_ctx_free(cpu);
    tj_ctx_free(ds);
    tj_devsim_backend_free(b);
    return tjt_finish();
}
