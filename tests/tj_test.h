/* tj_test.h — the tiny test runner shared by every test program
 * (tests/test_*.c, tests/test_cuda.cu).
 *
 * TJT_CHECK(cond, fmt, ...) counts a check; a failure prints file:line and
 * the message. tjt_gradcheck() compares reverse-mode gradients with central
 * finite differences. tjt_finish() prints the closing "N passed, N failed"
 * line and returns the exit code; build.sh adds those up. Include after
 * tinyjax.h. The library's insides it needs come through tj_internal.h.
 *
 * TJ_TEST_QUICK=1 (build.sh sets it for the sanitizer pass, where every
 * program runs several times slower, and for the devsim pass, which runs
 * the same code paths again on another backend; the -O2 pass runs
 * everything in full) asks the long tests for less work: test_harness runs
 * 3 of its 4 meshes, and on the 4- and 8-device ones one placement per
 * row, a different one from row to row (every row in every context; over
 * the rows, every kind of placement on each mesh and context),
 * test_xent_split one of its 3 class counts on each mesh (by turns: every
 * program on every mesh, each count on a third of them), test_xent_ignore
 * each remat policy on 3 of its 6 meshes (each mesh under half of them),
 * test_gpt2_cli 3 kill trials instead of 5, test_fibers 20 runs of a
 * program instead of 100, test_fuzz_smoke 0.5 s per target instead of 1 s,
 * and test_gpt2_train 6 training steps instead of 40, checking only that
 * they run: its bounds on the loss curve (a property of the demo's default
 * settings, not of the backend) are checked by the -O2 pass alone. */
#ifndef TJ_TEST_H
#define TJ_TEST_H
#include "tj_internal.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tjt_pass, tjt_fail;
/* TJ_TEST_QUICK is set (and not 0): see above */
static inline int tjt_quick(void) {
    const char *q = getenv("TJ_TEST_QUICK");
    return q && *q && strcmp(q, "0");
}
static const char *tjt_current = "";

#define TJT_CHECK(cond, ...)                                                  \
    do {                                                                      \
        if (cond) tjt_pass++;                                                 \
        else {                                                                \
            tjt_fail++;                                                       \
            fprintf(stderr, "FAIL %s:%d [%s] ", __FILE__, __LINE__, tjt_current); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
        }                                                                     \
    } while (0)

/* An error check: `expr` must return NULL/nonzero status and the context
   message must contain every one of the given substrings. */
#define TJT_ERROR_HAS(ctx, ...) tjt_error_has(__FILE__, __LINE__, ctx, __VA_ARGS__, (const char *)NULL)
static inline void tjt_error_has(const char *file, int line, tj_ctx *ctx, ...) {
    va_list ap;
    const char *s;
    int ok = tj_status_of(ctx) != TJ_OK;
    va_start(ap, ctx);
    while ((s = va_arg(ap, const char *)) != NULL)
        if (!strstr(tj_error(ctx), s)) ok = 0;
    va_end(ap);
    if (ok) tjt_pass++;
    else {
        tjt_fail++;
        fprintf(stderr, "FAIL %s:%d [%s] error message \"%s\" lacks an expected part\n", file, line, tjt_current, tj_error(ctx));
    }
    tj_clear_error(ctx);
}
/* How many lines of p's printed program (tj_prog_print) contain every one
   of the given substrings; -1 when it cannot be printed. */
#define TJT_PROG_LINES(p, ...) tjt_prog_lines(p, __VA_ARGS__, (const char *)NULL)
static inline int tjt_prog_lines(const tj_prog *p, ...) {
    FILE *f = tmpfile();
    char line[4096];
    int n = 0;
    if (!f) return -1;
    tj_prog_print(p, f);
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        va_list ap;
        const char *s;
        int all = 1;
        va_start(ap, p);
        while ((s = va_arg(ap, const char *)) != NULL) all &= strstr(line, s) != NULL;
        va_end(ap);
        n += all;
    }
    fclose(f);
    return n;
}

/* does ctx run the CPU's kernels (the CPU backend, or devsim)? Then its
   dots pack into planned workspace (tj_memory_analysis.pack_bytes); the
   CUDA backend's (cuBLAS) and the cuda-emulator's (TJ_BACKEND) do not */
static inline int tjt_cpu_kernels(const tj_ctx *ctx) {
    const tj_backend *b = tjt_ctx_backend(ctx);
    return !b || !strcmp(b->name, "devsim");
}

static inline int tjt_finish(void) {
    printf("%d passed, %d failed\n", tjt_pass, tjt_fail);
    return tjt_fail ? 1 : 0;
}

/* Deterministic pseudo-random array in [-1, 1) (or [lo, hi)). */
static inline tj_array *tjt_rand(tj_ctx *ctx, tj_dtype dt, const char *shape, unsigned seed, double lo, double hi) {
    tj_array *shape_of = tj_zeros(ctx, TJ_F64, shape), *a;
    int64_t i, n;
    double *buf;
    void *host;
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    if (!shape_of) return NULL;
    n = tj_array_numel(shape_of);
    tj_array_free(shape_of);
    buf = (double *)malloc(sizeof(double) * (size_t)(n + 1));
    host = malloc(8 * (size_t)(n + 1));
    for (i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = lo + (hi - lo) * (double)(s >> 11) / 9007199254740992.0;
        tjt_st(host, dt, i, buf[i]);
    }
    a = tj_array_new(ctx, dt, shape, host); /* through the public API: every device gets its copy */
    free(buf);
    free(host);
    return a;
}

/* ---- a program's outputs, read back to host doubles, and comparisons ---- */
typedef struct {
    int n;
    char name[8][32];
    double *v[8];
    int64_t len[8];
} tjt_outs;
static inline void tjt_outs_read(tjt_outs *o, tj_tree *out) {
    int i;
    for (i = 0; i < tj_tree_size(out) && o->n < 8; i++) {
        tj_array *a = tj_tree_array_at(out, i);
        if (!a) continue;
        snprintf(o->name[o->n], 32, "%s", tj_tree_name(out, i) ? tj_tree_name(out, i) : "?");
        o->len[o->n] = tj_array_numel(a);
        o->v[o->n] = (double *)malloc(sizeof(double) * (size_t)(o->len[o->n] + 1));
        tj_array_read(a, TJ_F64, o->v[o->n]);
        o->n++;
    }
}
static inline void tjt_outs_free(tjt_outs *o) {
    int i;
    for (i = 0; i < o->n; i++) free(o->v[i]);
    memset(o, 0, sizeof *o);
}
/* every output of b within tol of a's, relative to the largest of a's */
static inline void tjt_outs_compare(const char *what, const tjt_outs *a, const tjt_outs *b, double tol) {
    int i;
    int64_t j;
    TJT_CHECK(a->n == b->n && a->n > 0, "%s: %d vs %d outputs", what, a->n, b->n);
    for (i = 0; i < a->n && i < b->n; i++) {
        double worst = 0, scale = 1e-9;
        for (j = 0; j < a->len[i]; j++) if (fabs(a->v[i][j]) > scale) scale = fabs(a->v[i][j]);
        for (j = 0; j < a->len[i] && j < b->len[i]; j++) {
            double d = fabs(a->v[i][j] - b->v[i][j]) / scale;
            if (!(d <= worst)) worst = d;
        }
        TJT_CHECK(a->len[i] == b->len[i] && worst <= tol, "%s: output '%s' differs by %.3g (relative to its max)", what, a->name[i], worst);
    }
}

/* ---- finite-difference gradient check ----
   fn maps the input tree to a scalar leaf "loss". Every float array leaf
   whose name is in `wrt` (space separated) is checked: reverse-mode grads
   against (L(x+h) - L(x-h)) / 2h, element by element (up to max_elems per
   leaf, spread over the array). Inputs should be f64 for tight tolerance, and
   replicated (plain arrays: every device holds a copy, and all are moved). */
typedef struct {
    tj_fn fn;
    void *user;
    const char *wrt;
} tjt__gc;
static inline void tjt__gc_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tjt__gc *gc = (tjt__gc *)u;
    tj_tree *tmp = tj_tree_new(tj_graph_ctx(g));
    tj_v loss;
    int i;
    gc->fn(g, in, tmp, gc->user);
    loss = tj_tree_v(tmp, "loss");
    tj_tree_set_v(out, "loss", loss);
    for (i = 0; i < tj_tree_size(in); i++) {
        const char *nm = tj_tree_name(in, i);
        char pat[256];
        tj_v w, gw;
        snprintf(pat, sizeof pat, " %s ", nm);
        {
            char list[1024];
            snprintf(list, sizeof list, " %s ", gc->wrt);
            if (!strstr(list, pat)) continue;
        }
        w = tj_tree_v_at(in, i);
        if (!w || tj_grad(loss, 1, &w, &gw) != TJ_OK) break;
        snprintf(pat, sizeof pat, "grad.%s", nm);
        tj_tree_set_v(out, pat, gw);
    }
    tj_tree_free(tmp);
}
static inline void tjt__loss_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tjt__gc *gc = (tjt__gc *)u;
    tj_tree *tmp = tj_tree_new(tj_graph_ctx(g));
    gc->fn(g, in, tmp, gc->user);
    tj_tree_set_v(out, "loss", tj_tree_v(tmp, "loss"));
    tj_tree_free(tmp);
}
static inline double tjt__run_loss(tj_prog *p, tj_tree *in) {
    tj_tree *o = tj_tree_new(tjt_prog_ctx(p));
    double v = NAN;
    if (tj_run(p, in, o) == TJ_OK) tj_array_read(tj_tree_array(o, "loss"), TJ_F64, &v);
    tj_tree_free(o);
    return v;
}
/* a placed copy of a, and a freed (tj_device_put leaves its argument alone) */
static inline tj_array *tjt_put(tj_array *a, const char *spec) {
    tj_array *b = tj_device_put(a, spec);
    tj_array_free(a);
    return b;
}
/* set element k of a replicated array on every device (each holds a copy) */
static inline void tjt__set_all(tj_array *a, int64_t k, double v) {
    int d;
    for (d = 0; d < tjt_array_ndev(a); d++) tjt_array_set(a, d, k, v);
}
/* returns the max relative error seen; checks it against tol */
static inline double tjt_gradcheck(const char *file, int line, tj_ctx *ctx, const char *what, tj_fn fn, void *user, tj_tree *in, const char *wrt, double tol) {
    tjt__gc gc;
    tj_prog *pg, *pl;
    tj_tree *out;
    double worst = 0;
    int i, checked = 0;
    gc.fn = fn;
    gc.user = user;
    gc.wrt = wrt;
    pg = tj_jit(ctx, what, tjt__gc_fn, &gc, in, NULL);
    pl = tj_jit(ctx, what, tjt__loss_fn, &gc, in, NULL);
    out = tj_tree_new(ctx);
    if (!pg || !pl || tj_run(pg, in, out) != TJ_OK) {
        tjt_fail++;
        fprintf(stderr, "FAIL %s:%d [%s] gradcheck '%s' could not build/run: %s\n", file, line, tjt_current, what, tj_error(ctx));
        tj_clear_error(ctx);
        tj_prog_free(pg);
        tj_prog_free(pl);
        tj_tree_free(out);
        return 1e9;
    }
    for (i = 0; i < tj_tree_size(in); i++) {
        char gname[256];
        tj_array *a = tj_tree_array_at(in, i), *ga;
        int64_t n, k, step;
        if (!a) continue;
        snprintf(gname, sizeof gname, "grad.%s", tj_tree_name(in, i));
        if (tj_tree_find(out, gname) < 0) continue;
        ga = tj_tree_array(out, gname);
        n = tj_array_numel(a);
        if (tjt_array_local_bytes(a) < n * (int64_t)tj_dtype_size(tj_array_dtype(a))) { /* tjt__set_all writes element k on every device */
            tjt_fail++;
            fprintf(stderr, "FAIL %s:%d [%s] gradcheck '%s': input '%s' is sharded; perturbing element by element needs replicated inputs "
                    "(check the sharded program's gradients against one device instead)\n", file, line, tjt_current, what, tj_tree_name(in, i));
            tj_prog_free(pg);
            tj_prog_free(pl);
            tj_tree_free(out);
            return 1e9;
        }
        step = n > 24 ? n / 24 : 1;
        for (k = 0; k < n; k += step) {
            double x0 = tjt_array_get(a, 0, k), h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1.0), lp, lm, fd, an, err;
            if (tj_array_dtype(a) != TJ_F64) h = 1e-2 * (fabs(x0) > 1 ? fabs(x0) : 1.0);
            tjt__set_all(a, k, x0 + h);
            lp = tjt__run_loss(pl, in);
            tjt__set_all(a, k, x0 - h);
            lm = tjt__run_loss(pl, in);
            tjt__set_all(a, k, x0);
            fd = (lp - lm) / (2 * h);
            an = tjt_array_get(ga, 0, k);
            err = fabs(fd - an) / (fabs(fd) + fabs(an) + 1e-6);
            if (!(err <= worst)) worst = err;
            checked++;
            if (!(err <= tol)) {
                fprintf(stderr, "  %s: d/d %s[%lld]: autodiff %.9g, finite difference %.9g\n", what, tj_tree_name(in, i), (long long)k, an, fd);
            }
        }
    }
    if (worst <= tol && checked > 0) tjt_pass++;
    else {
        tjt_fail++;
        fprintf(stderr, "FAIL %s:%d [%s] gradcheck '%s': worst relative error %.3g (tol %.3g), %d elements\n", file, line, tjt_current, what, worst, tol, checked);
    }
    tj_prog_free(pg);
    tj_prog_free(pl);
    tj_tree_free(out);
    return worst;
}
#define TJT_GRADCHECK(ctx, what, fn, user, in, wrt) tjt_gradcheck(__FILE__, __LINE__, ctx, what, fn, user, in, wrt, 1e-6)
/* ---- meshes that split a "vocab" axis (test_take_split, test_xent_split):
   2, 4 and 8 devices; the vocabulary over one, two and three mesh axes, in
   either order; other axes (batch, pos, embed) split too, or competing for
   the same mesh axis ---- */
typedef struct {
    int ndev;
    const char *mesh, *rules;
} tjt_mesh_case;
static const tjt_mesh_case tjt_vocab_meshes[] = {
    {2, "model=2", "vocab:model"},
    {4, "model=4", "vocab:model"},
    {8, "all=8", "vocab:all"},
    {8, "data=2 model=4", "batch:data vocab:model"},
    {4, "data=2 model=2", "vocab:data+model"},
    {8, "data=2 model=4", "vocab:data+model"},
    {8, "data=2 model=4", "vocab:model+data"},
    {4, "data=2 model=2", "vocab:model batch:model"},
    {4, "data=2 model=2", "vocab:model pos:model batch:data"},
    {4, "data=2 model=2", "vocab:model embed:data"},
    {8, "data=2 model=4", "vocab:model embed:data batch:data"},
    {4, "data=2 model=2", "vocab:data batch:model embed:model"},
    {8, "a=2 b=2 c=2", "vocab:a+c batch:b"},
    {8, "a=2 b=2 c=2", "vocab:c+a pos:a batch:b"},
};
#define TJT_NVOCAB_MESHES ((int)(sizeof tjt_vocab_meshes / sizeof tjt_vocab_meshes[0]))
/* ---- tests that write files (define TJT_FILES, and _POSIX_C_SOURCE
   200809L, before including): g_dir is a fresh mkdtemp directory the test
   makes (make_dir); path_in names a file in it; remove_dir deletes it and its files
   (and empty subdirectories) at the end ---- */
#ifdef TJT_FILES
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
static char g_dir[64];
/* make g_dir, a fresh directory /tmp/<name>.<6 random characters>; 0, or
   -1 after printing why and the closing line of a failed test */
static inline int make_dir(const char *name) {
    snprintf(g_dir, sizeof g_dir, "/tmp/%.40s.XXXXXX", name); /* (mkdtemp's template) */
    if (mkdtemp(g_dir)) return 0;
    printf("mkdtemp %s failed\n0 passed, 1 failed\n", g_dir);
    return -1;
}
static inline const char *path_in(const char *name) {
    static char bufs[8][512];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, 512, "%s/%s", g_dir, name);
    return b;
}
static inline void remove_dir(void) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    if (!d) return;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            const char *p = path_in(e->d_name);
            if (unlink(p)) rmdir(p);
        }
    closedir(d);
    rmdir(g_dir);
}
static inline int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}
/* temp files of atomic writes ("<path>.tmp.<pid>.<k>") left in g_dir */
static inline int count_tmp_files(void) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}
#endif

#endif
