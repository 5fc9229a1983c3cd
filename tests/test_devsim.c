/* test_devsim.c — the device-like CPU backend (devsim, tinyjax.h [11]).
 *
 * build.sh runs the whole suite a second time with TJ_BACKEND=devsim, which
 * tests the runner (scan iterations, regions, offload and fetch, staged
 * slices, collectives, fused groups) through the backend interface. This
 * file checks the backend itself: that its memory cannot be touched by the
 * host (a direct read faults), that its streams are asynchronous (a missing
 * sync reads stale bytes), that a write past a block is caught, that kernel
 * errors come back at sync with the CPU's message, and that programs give
 * the CPU backend's bits, here and under TJ_BACKEND=devsim. The runner's
 * copy stream (tests/tj_async_test.h): offload_scan's remat policies give
 * the CPU's bits run after run with the device and host bytes of the
 * memory plan (a wait the runner forgets, before reusing a copy's source
 * or touching its destination, makes them differ), and a profiled run's
 * trace has both streams, each in order, copies timed by the device. */
#define _POSIX_C_SOURCE 200809L
/* the implementation is linked in: tests/tj_impl.c */
#include "../tinyjax.h"
#include "tj_test.h"
#include "tj_async_test.h"

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

int main(void) {
    tj_backend *b = tj_devsim_backend();
    tj_ctx *cpu = tj_ctx_new(), *ds = tj_ctx_new();
    const char *env = getenv("TJ_BACKEND");
    int under_devsim = env && !strcmp(env, "devsim");

    tjt_current = "setup";
    TJT_CHECK(b && cpu && ds, "devsim backend or contexts not made");
    if (!b || !cpu || !ds) return tjt_finish();
    TJT_CHECK(!strcmp(b->name, "devsim") && b->fused_groups, "devsim should be named devsim and run fused groups");
    if (env && *env && strcmp(env, "cpu") && !under_devsim) TJT_CHECK(tjt_ctx_backend(cpu) != NULL, "TJ_BACKEND=%s: a new context uses it", env);
    else if (!under_devsim) TJT_CHECK(tjt_ctx_backend(cpu) == NULL, "a context without TJ_BACKEND uses the CPU backend");
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
    tjt_offload_policies(b, 0); /* devsim: the CPU's bits */
    tjt_current = "trace";
    { /* a devsim whose copies lag 300 us: every copy event must show it */
        tj_backend *b2;
        const char *old = getenv("TJ_DEVSIM_COPY_DELAY_US");
        char *keep = old ? strdup(old) : NULL;
        setenv("TJ_DEVSIM_COPY_DELAY_US", "300", 1);
        b2 = tj_devsim_backend();
        if (keep) setenv("TJ_DEVSIM_COPY_DELAY_US", keep, 1);
        else unsetenv("TJ_DEVSIM_COPY_DELAY_US");
        free(keep);
        TJT_CHECK(b2 != NULL, "a second devsim backend");
        if (b2) tjt_trace_streams(b2, 300);
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
        /* cuda names GPU 0 only where tinyjax_cuda.cu holds the library (./build.sh gpu-suite) */
        setenv("TJ_BACKEND", "cuda", 1);
        e = tj_ctx_new();
        if (tj_status_of(e) == TJ_OK) TJT_CHECK(tjt_ctx_backend(e) && !strcmp(tjt_ctx_backend(e)->name, "cuda"), "TJ_BACKEND=cuda: a new context on the GPU");
        else
            TJT_CHECK(strstr(tj_error(e), "TJ_BACKEND") && (strstr(tj_error(e), "cuda where the library is built from tinyjax_cuda.cu") || strstr(tj_error(e), "no CUDA backend on GPU 0")),
                      "TJ_BACKEND=cuda without the CUDA library or a GPU: %s", tj_error(e));
        tj_ctx_free(e);
        if (env) setenv("TJ_BACKEND", env, 1);
        else unsetenv("TJ_BACKEND");
    }

    tj_ctx_free(cpu);
    tj_ctx_free(ds);
    tj_devsim_backend_free(b);
    return tjt_finish();
}
