/* Robustness of the library against a caller's mistakes (issue 13):
   element/byte counts that overflow, NULL pointer arguments to every public
   function, float -> i32 conversion of NaN and out-of-range values, the
   axis-name limit shared by tree save and load, directories given where
   files are expected, stale temp files of killed writers, TJ_DEVICES, and
   errors that name the caller's file:line. Each section failed (or
   crashed) before the fixes. Files go to a fresh mkdtemp directory. */
#define _POSIX_C_SOURCE 200809L
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#define TJT_FILES
#include "tj_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void write_file(const char *p, const char *data, size_t n) {
    FILE *f = fopen(p, "wb");
    if (f) {
        if (n) fwrite(data, 1, n, f);
        fclose(f);
    }
}

/* the call must fail with an error whose message has every given part */
#define FAILS_WITH(ctx, failed, ...)                                                   \
    do {                                                                               \
        int failed_ = (failed);                                                        \
        TJT_CHECK(failed_, "%s should fail", #failed);                                 \
        if (failed_) TJT_ERROR_HAS(ctx, __VA_ARGS__);                                  \
        else tj_clear_error(ctx);                                                      \
    } while (0)

/* ---------------------------------------------------------------- sizes */
static void overflow_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v x = tj_tree_v(in, "x"), a, b, big, big_xs[2];
    (void)u;
    /* every axis legal, the product not */
    FAILS_WITH(c, tj_fill(g, TJ_F32, "a=1099511627776 b=4194304", 1.0) == NULL, "fill", "too large", "test_robust.c:");
    FAILS_WITH(c, tj_uniform(g, 1, TJ_F64, "a=1099511627776 b=1099511627776 c=2") == NULL, "too large");
    /* a dot of two small values whose result is too large */
    a = tj_fill(g, TJ_F32, "i=1073741824 k=1", 1.0);
    b = tj_fill(g, TJ_F32, "k=1 j=1073741824", 1.0);
    TJT_CHECK(a && b, "operands: %s", tj_error(c));
    tj_clear_error(c);
    FAILS_WITH(c, tj_dot(a, b, "k") == NULL, "dot", "too large", "test_robust.c:");
    big = tj_fill(g, TJ_F32, "i=1073741824", 1.0);
    FAILS_WITH(c, tj_broadcast(big, "i=1073741824 j=1073741824") == NULL, "too large");
    FAILS_WITH(c, tj_add(tj_rename(big, "i", "p"), tj_rename(big, "i", "q")) == NULL, "add", "too large");
    FAILS_WITH(c, tj_pad(x, "a", INT64_MAX, 1, 0.0) == NULL, "pad", "2^40", "test_robust.c:"); /* lo + hi would overflow */
    big_xs[0] = big_xs[1] = tj_broadcast(tj_sum(x, "a b"), "a=1099511627776");
    FAILS_WITH(c, tj_concat(2, big_xs, "a") == NULL, "concat", "2^40");
    FAILS_WITH(c, tj_split(x, "a", "p=1099511627776 q=1099511627776") == NULL, "split", "too large");
    tj_clear_error(c);
    tj_tree_set_v(out, "y", tj_adds(x, 1.0));
}
static void test_overflow(tj_ctx *c) {
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p;
    tj_array *a;
    tjt_current = "size overflow";
    FAILS_WITH(c, tj_zeros(c, TJ_F32, "a=1099511627776 b=4194304") == NULL, "too large", "a=1099511627776", "test_robust.c:");
    FAILS_WITH(c, tj_array_new(c, TJ_F32, "a=1099511627776 b=4194304", NULL) == NULL, "tj_array_new", "too large");
    FAILS_WITH(c, tj_array_new(c, TJ_F64, "a=1099511627776 b=1099511627776 c=2", NULL) == NULL, "too large");
    FAILS_WITH(c, tj_full(c, TJ_I32, "a=1099511627776 b=1099511627776 c=1099511627776 d=1099511627776", 1.0) == NULL, "too large");
    FAILS_WITH(c, tj_iota(c, TJ_I32, "a=1099511627776 b=1099511627776", "a") == NULL, "too large");
    FAILS_WITH(c, tj_zeros(c, TJ_F32, "a=1099511627777") == NULL, "bad size");
    /* big but legal shapes still parse (no allocation happens in tracing) */
    a = tj_zeros(c, TJ_F32, "a=3 b=5");
    TJT_CHECK(a && tj_array_numel(a) == 15, "a small array: %s", tj_error(c));
    tj_tree_set_array(in, "x", a);
    p = tj_jit(c, "overflow", overflow_fn, NULL, in, NULL);
    TJT_CHECK(p != NULL, "tracing continues after the cleared errors: %s", tj_error(c));
    tj_clear_error(c);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
}

/* ----------------------------------------------------- float -> i32 */
static void cast_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    tj_tree_set_v(out, "y", tj_cast(tj_tree_v(in, "x"), TJ_I32));
    tj_tree_set_v(out, "z", tj_cast(tj_cast(tj_tree_v(in, "x"), TJ_BF16), TJ_I32));
}
static void test_f2i(tj_ctx *c) {
    const float inf = (float)INFINITY;
    float v[8];
    double vd[8];
    int32_t want[8] = {0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 2, -2, 0}, got[8];
    tj_array *a;
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p;
    int i, ok;
    tjt_current = "float -> i32";
    v[0] = (float)NAN; v[1] = inf; v[2] = -inf; v[3] = 3e9f; v[4] = -3e9f; v[5] = 2.7f; v[6] = -2.7f; v[7] = -(float)NAN;
    for (i = 0; i < 8; i++) vd[i] = v[i];
    /* tj_array_read converts */
    a = tj_array_new(c, TJ_F32, "n=8", v);
    memset(got, 0x55, sizeof got);
    TJT_CHECK(a && !tj_array_read(a, TJ_I32, got), "read: %s", tj_error(c));
    for (ok = 1, i = 0; i < 8; i++) ok &= got[i] == want[i];
    TJT_CHECK(ok, "tj_array_read f32 -> i32: NaN -> 0, saturating, truncating (got %d %d %d %d %d %d %d %d)", got[0], got[1], got[2], got[3], got[4],
              got[5], got[6], got[7]);
    /* tj_cast in a program (f32 and bf16 sources) */
    tj_tree_set_array(in, "x", a);
    p = tj_jit(c, "cast", cast_fn, NULL, in, NULL);
    TJT_CHECK(p && !tj_run(p, in, out), "cast program: %s", tj_error(c));
    if (p && tj_tree_find(out, "y") >= 0) {
        memset(got, 0x55, sizeof got);
        tj_array_read(tj_tree_array(out, "y"), TJ_I32, got);
        for (ok = 1, i = 0; i < 8; i++) ok &= got[i] == want[i];
        TJT_CHECK(ok, "tj_cast f32 -> i32 (got %d %d %d %d %d %d %d %d)", got[0], got[1], got[2], got[3], got[4], got[5], got[6], got[7]);
        memset(got, 0x55, sizeof got);
        tj_array_read(tj_tree_array(out, "z"), TJ_I32, got);
        TJT_CHECK(got[0] == 0 && got[7] == 0 && got[1] == INT32_MAX && got[2] == INT32_MIN && got[5] == 2, "tj_cast bf16 -> i32 (got %d %d %d %d)",
                  got[0], got[7], got[1], got[2]);
    }
    tj_prog_free(p);
    /* loading a float tensor as i32 */
    {
        tj_st_entry e;
        int64_t shape[1] = {8};
        tj_safetensors *st;
        tj_array *b;
        e.name = "w";
        e.dtype = TJ_ST_F64;
        e.rank = 1;
        e.shape = shape;
        e.data = vd;
        TJT_CHECK(!tj_st_save(c, path_in("f.safetensors"), &e, 1, NULL, 0), "save: %s", tj_error(c));
        st = tj_st_load(c, path_in("f.safetensors"));
        b = st ? tj_st_array(st, "w", TJ_I32, "n") : NULL;
        memset(got, 0x55, sizeof got);
        TJT_CHECK(b && !tj_array_read(b, TJ_I32, got), "load as i32: %s", tj_error(c));
        for (ok = 1, i = 0; i < 8; i++) ok &= got[i] == want[i];
        TJT_CHECK(ok, "f64 tensor loaded as i32 (got %d %d %d %d %d %d %d %d)", got[0], got[1], got[2], got[3], got[4], got[5], got[6], got[7]);
        tj_array_free(b);
        tj_st_free(st);
    }
    tj_clear_error(c);
    tj_tree_free(in);
    tj_tree_free(out);
}

/* ------------------------------------------------ axis-name limit of files */
static void test_name_limit(tj_ctx *c) {
    char shape[256], name65[80], name64[80];
    tj_tree *t = tj_tree_new(c), *back = tj_tree_new(c);
    tjt_current = "saved axis-name limit";
    memset(name65, 'x', 65);
    name65[65] = 0;
    memset(name64, 'y', 64);
    name64[64] = 0;
    snprintf(shape, sizeof shape, "%s=2 b=3", name65);
    tj_tree_set_array(t, "w", tj_zeros(c, TJ_F32, shape));
    TJT_CHECK(tj_status_of(c) == TJ_OK, "a 65-character axis name is a legal array: %s", tj_error(c));
    FAILS_WITH(c, tj_tree_save(t, path_in("long.safetensors")) == TJ_ERR_ARG, "tj_tree_save", "leaf 'w'", "longer than 64");
    TJT_CHECK(!file_exists(path_in("long.safetensors")), "nothing written that cannot be loaded");
    snprintf(shape, sizeof shape, "%s=2 b=3", name64);
    tj_tree_set_array(t, "w", tj_zeros(c, TJ_F32, shape));
    TJT_CHECK(!tj_tree_save(t, path_in("ok.safetensors")), "64 characters save: %s", tj_error(c));
    TJT_CHECK(!tj_tree_load(back, path_in("ok.safetensors")) && tj_array_dim(tj_tree_array(back, "w"), name64) == 2, "and load: %s", tj_error(c));
    tj_clear_error(c);
    tj_tree_free(t);
    tj_tree_free(back);
}

/* --------------------------------------------- a directory, not a file */
static void test_directories(tj_ctx *c) {
    tj_tree *t = tj_tree_new(c);
    tjt_current = "directories";
    mkdir(path_in("adir"), 0755);
    FAILS_WITH(c, tj_tree_load(t, path_in("adir")) != TJ_OK, "adir", "is a directory");
    FAILS_WITH(c, tj_st_load(c, path_in("adir")) == NULL, "is a directory");
    tj_tree_set_int(t, "step", 3);
    FAILS_WITH(c, tj_tree_save(t, path_in("adir")) != TJ_OK, "adir", "is a directory");
    FAILS_WITH(c, tj_tree_save(t, g_dir) != TJ_OK, "is a directory");
    FAILS_WITH(c, tj_tree_save(t, ".") != TJ_OK, "is a directory");
    FAILS_WITH(c, tj_tree_save(t, "") != TJ_OK, "empty file name");
    FAILS_WITH(c, tj_tree_load(t, "") != TJ_OK, "cannot open");
    FAILS_WITH(c, tj_tree_save(t, path_in("nodir/x.safetensors")) != TJ_OK, "nodir", "No such file");
    FAILS_WITH(c, tj_tree_load(t, path_in("missing.safetensors")) != TJ_OK, "missing.safetensors", "No such file");
    rmdir(path_in("adir"));
    tj_tree_free(t);
}

/* ----------------------------------------------- stale temp files */
static int count_tmp(const char *base) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    int n = 0;
    size_t bl = strlen(base);
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) n += !strncmp(e->d_name, base, bl) && strstr(e->d_name + bl, ".tmp.") == e->d_name + bl;
    closedir(d);
    return n;
}
static void test_stale_tmp(tj_ctx *c) {
    tj_tree *t = tj_tree_new(c);
    char name[600];
    pid_t dead, live;
    int pfd[2], qfd[2], k;
    tjt_current = "stale temp files";
    tj_tree_set_array(t, "w", tj_full(c, TJ_F32, "a=64 b=64", 0.5));
    /* a process that is gone */
    dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    snprintf(name, sizeof name, "%s.tmp.%ld.0", path_in("ck.st"), (long)dead);
    write_file(name, "partial checkpoint", 18);
    snprintf(name, sizeof name, "%s.tmp.%ld.7", path_in("ck.st"), (long)dead);
    write_file(name, "another", 7);
    /* a live writer: holds its lock (as tj__af_open does) */
    if (pipe(pfd) || pipe(qfd)) return;
    live = fork();
    if (live == 0) {
        char nm[600], b;
        struct flock l;
        int fd;
        snprintf(nm, sizeof nm, "%s.tmp.%ld.0", path_in("ck.st"), (long)getpid());
        fd = open(nm, O_WRONLY | O_CREAT | O_EXCL, 0644);
        memset(&l, 0, sizeof l);
        l.l_type = F_WRLCK;
        l.l_whence = SEEK_SET;
        if (fd < 0 || fcntl(fd, F_SETLK, &l) || write(fd, "in progress", 11) != 11) _exit(1);
        if (write(pfd[1], "r", 1) != 1) _exit(1);
        if (read(qfd[0], &b, 1) < 0) _exit(1); /* until the parent is done */
        _exit(0);
    }
    {
        char b;
        if (read(pfd[0], &b, 1) != 1) TJT_CHECK(0, "the live writer did not start");
    }
    /* our own process's temp file, and other files that only look alike */
    snprintf(name, sizeof name, "%s.tmp.%ld.3", path_in("ck.st"), (long)getpid());
    write_file(name, "ours", 4);
    write_file(path_in("ck.st.tmp.abc.1"), "x", 1);
    write_file(path_in("other.st.tmp.1.1"), "x", 1);
    TJT_CHECK(count_tmp("ck.st") == 5, "setup: %d temp files", count_tmp("ck.st"));
    TJT_CHECK(!tj_tree_save(t, path_in("ck.st")), "save: %s", tj_error(c));
    snprintf(name, sizeof name, "%s.tmp.%ld.0", path_in("ck.st"), (long)dead);
    TJT_CHECK(!file_exists(name), "the dead writer's temp file is removed");
    snprintf(name, sizeof name, "%s.tmp.%ld.0", path_in("ck.st"), (long)live);
    TJT_CHECK(file_exists(name), "the live writer's temp file is kept");
    snprintf(name, sizeof name, "%s.tmp.%ld.3", path_in("ck.st"), (long)getpid());
    TJT_CHECK(file_exists(name), "this process's temp file is kept");
    TJT_CHECK(file_exists(path_in("ck.st.tmp.abc.1")) && file_exists(path_in("other.st.tmp.1.1")), "files of other names are kept");
    TJT_CHECK(count_tmp("ck.st") == 3, "%d temp files left, want 3", count_tmp("ck.st"));
    if (write(qfd[1], "q", 1) != 1) TJT_CHECK(0, "pipe");
    close(pfd[0]);
    close(pfd[1]);
    close(qfd[0]);
    close(qfd[1]);
    waitpid(live, NULL, 0);
    unlink(name);
    unlink(path_in("ck.st.tmp.abc.1"));
    unlink(path_in("other.st.tmp.1.1"));
    /* now the finished writer's file is stale too */
    TJT_CHECK(!tj_tree_save(t, path_in("ck.st")) && count_tmp("ck.st") == 0, "after the writer died: %d temp files", count_tmp("ck.st"));
    /* real kills in the middle of saves: the next save leaves no temp file */
    {
        tj_tree *bigt = tj_tree_new(c);
        tj_tree_set_array(bigt, "w", tj_full(c, TJ_F32, "a=512 b=1024", 0.25));
        for (k = 0; k < 4; k++) {
            pid_t w = fork();
            if (w == 0) {
                for (;;) tj_tree_save(bigt, path_in("big.st"));
            }
            {
                struct timespec ts = {0, 20000000L + 7919000L * k};
                nanosleep(&ts, NULL);
            }
            kill(w, SIGKILL);
            waitpid(w, NULL, 0);
        }
        TJT_CHECK(!tj_tree_save(bigt, path_in("big.st")), "save after kills: %s", tj_error(c));
        TJT_CHECK(count_tmp("big.st") == 0, "%d temp files of killed writers left", count_tmp("big.st"));
        tj_tree_free(bigt);
    }
    tj_clear_error(c);
    tj_tree_free(t);
}

/* ------------------------------------------------------------ TJ_DEVICES */
static void test_env_devices(void) {
    const char *bad[] = {"abc", "100", "0", "-2", "4x", "65"};
    int i;
    tjt_current = "TJ_DEVICES";
    for (i = 0; i < 6; i++) {
        tj_ctx *c;
        setenv("TJ_DEVICES", bad[i], 1);
        c = tj_ctx_new();
        TJT_CHECK(c && tj_status_of(c) == TJ_ERR_ARG && strstr(tj_error(c), "TJ_DEVICES") && strstr(tj_error(c), bad[i]), "TJ_DEVICES=%s: \"%s\"", bad[i],
                  c ? tj_error(c) : "no context");
        tj_ctx_free(c);
    }
    setenv("TJ_DEVICES", "4", 1);
    {
        tj_ctx *c = tj_ctx_new();
        TJT_CHECK(c && tj_status_of(c) == TJ_OK && tj_devices(c) == 4, "TJ_DEVICES=4");
        tj_ctx_free(c);
    }
    unsetenv("TJ_DEVICES");
}

/* ------------------------------------------- errors name the caller's line */
static void test_caller_lines(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *t = tj_tree_new(c);
    char shape[64];
    int i;
    tjt_current = "caller lines";
    FAILS_WITH(c, tj_tree_array(t, "weights") == NULL, "tj_tree_array", "'weights'", "test_robust.c:");
    FAILS_WITH(c, tj_tree_int(t, "step") == 0, "tj_tree_int", "'step'", "test_robust.c:");
    tj_tree_set_int(t, "step", 1);
    FAILS_WITH(c, tj_tree_take(t, "step") == NULL, "tj_tree_take", "'step' is an int", "test_robust.c:");
    FAILS_WITH(c, tj_set_mesh(c, "data=3") != TJ_OK, "tj_set_mesh", "3 devices", "test_robust.c:");
    FAILS_WITH(c, tj_set_mesh(c, "data=x") != TJ_OK, "tj_set_mesh", "test_robust.c:");
    /* axis names: the table grows (until 2026-11-24 the 257th distinct name was refused) */
    for (i = 0; i < 300 && tj_status_of(c) == TJ_OK; i++) {
        tj_array *a;
        snprintf(shape, sizeof shape, "axis%d=1", i);
        a = tj_zeros(c, TJ_F32, shape);
        if (i == 299) {
            char d[64];
            TJT_CHECK(a && !strcmp(tj_array_describe(a, d, sizeof d), "f32[axis299=1]"), "the 300th axis name: %s", a ? d : tj_error(c));
        }
        tj_array_free(a);
    }
    TJT_CHECK(i == 300 && tj_status_of(c) == TJ_OK, "300 distinct axis names: %s", tj_error(c));
    tj_tree_free(t);
    tj_ctx_free(c);
}

/* ------------------------------------------- NULL pointer arguments */
static void null_body(tj_graph *g, const tj_v *c, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)x; (void)y; (void)u;
    co[0] = c[0];
}
static void null_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = in[0];
}
static void null_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    (void)g; (void)u; (void)res;
    out[0] = in[0];
}
static tj_decision null_pfn(const char *op, const char *name, const char *shape, void *u) {
    (void)op; (void)name; (void)shape; (void)u;
    return TJ_SAVE;
}
static void null_ops_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v x = tj_tree_v(in, "x"), idx = tj_tree_v(in, "idx"), lbl = tj_tree_v(in, "lbl"), xs[2], y = NULL, gw = NULL;
    char buf[64];
    tj_policy pol;
    (void)u;
    xs[0] = x;
    xs[1] = NULL;
    /* constants and shapes */
    FAILS_WITH(c, tj_fill(g, TJ_F32, NULL, 1.0) == NULL, "fill", "NULL");
    FAILS_WITH(c, tj_uniform(g, 1, TJ_F32, NULL) == NULL, "uniform", "NULL");
    FAILS_WITH(c, tj_normal(g, 1, TJ_F32, NULL) == NULL, "normal", "NULL");
    FAILS_WITH(c, tj_arange(g, TJ_F32, "a=3", NULL) == NULL, "arange", "NULL");
    TJT_CHECK(tj_scalar(NULL, TJ_F32, 1.0) == NULL && tj_fill(NULL, TJ_F32, "a=2", 1) == NULL && tj_arange(NULL, TJ_F32, "a=2", "a") == NULL,
              "NULL graph: NULL");
    TJT_CHECK(tj_uniform(NULL, 1, TJ_F32, "a=2") == NULL && tj_axis_index(NULL, "d") == NULL, "NULL graph: NULL");
    /* value queries */
    TJT_CHECK(tj_graph_of(NULL) == NULL && tj_graph_ctx(NULL) == NULL && tj_v_rank(NULL) == 0 && tj_v_dim(NULL, "a") == -1 && tj_v_dim(x, NULL) == -1 &&
                  tj_v_axis(NULL, 0) == NULL,
              "value queries with NULL");
    TJT_CHECK(!strcmp(tj_v_describe(NULL, buf, sizeof buf), "(null)") && tj_v_describe(x, NULL, 0) != NULL, "tj_v_describe with NULL");
    TJT_CHECK(tj_v_sharding(NULL, buf, sizeof buf) != NULL && tj_v_sharding(x, NULL, 0) != NULL, "tj_v_sharding with NULL");
    /* unary ops with NULL: NULL (no context to tell) */
    TJT_CHECK(!tj_neg(NULL) && !tj_exp(NULL) && !tj_log(NULL) && !tj_tanh(NULL) && !tj_sqrt(NULL) && !tj_rsqrt(NULL) && !tj_relu(NULL) && !tj_gelu(NULL) &&
                  !tj_pows(NULL, 2) && !tj_cast(NULL, TJ_F64) && !tj_adds(NULL, 1) && !tj_muls(NULL, 1) && !tj_stop_gradient(NULL) &&
                  !tj_dropout(NULL, 1, 0.5) && !tj_one_hot(NULL, "v=4", TJ_F32),
              "unary ops of NULL");
    TJT_CHECK(tj_status_of(c) == TJ_OK, "...quietly: %s", tj_error(c));
    /* binary ops: the other operand gives the context */
    FAILS_WITH(c, tj_add(x, NULL) == NULL, "add", "NULL");
    FAILS_WITH(c, tj_sub(NULL, x) == NULL, "sub", "NULL");
    FAILS_WITH(c, tj_mul(x, NULL) == NULL, "mul", "NULL");
    FAILS_WITH(c, tj_div(x, NULL) == NULL, "div", "NULL");
    FAILS_WITH(c, tj_max2(x, NULL) == NULL, "NULL");
    FAILS_WITH(c, tj_min2(x, NULL) == NULL, "NULL");
    FAILS_WITH(c, tj_lt(x, NULL) == NULL, "NULL");
    FAILS_WITH(c, tj_le(x, NULL) == NULL, "NULL");
    FAILS_WITH(c, tj_gt(x, NULL) == NULL, "NULL");
    FAILS_WITH(c, tj_ge(x, NULL) == NULL, "NULL");
    FAILS_WITH(c, tj_eq(x, NULL) == NULL, "NULL");
    FAILS_WITH(c, tj_ne(x, NULL) == NULL, "NULL");
    FAILS_WITH(c, tj_select(NULL, x, x) == NULL, "select", "NULL");
    FAILS_WITH(c, tj_select(idx, NULL, x) == NULL, "select", "NULL");
    FAILS_WITH(c, tj_dot(x, NULL, "b") == NULL, "dot", "NULL");
    FAILS_WITH(c, tj_dot(NULL, x, "b") == NULL, "dot", "NULL");
    FAILS_WITH(c, tj_take(x, "a", NULL) == NULL, "take", "NULL");
    FAILS_WITH(c, tj_cross_entropy(x, NULL, "b", "a") == NULL, "cross_entropy", "NULL");
    FAILS_WITH(c, tj_concat(2, xs, "a") == NULL, "concat", "NULL");
    /* string arguments */
    FAILS_WITH(c, tj_sum(x, NULL) == NULL, "sum", "NULL");
    FAILS_WITH(c, tj_mean(x, NULL) == NULL, "mean", "NULL");
    FAILS_WITH(c, tj_max(x, NULL) == NULL, "max", "NULL");
    FAILS_WITH(c, tj_dot(x, x, NULL) == NULL, "dot", "NULL");
    FAILS_WITH(c, tj_rename(x, NULL, "z") == NULL, "rename", "NULL");
    FAILS_WITH(c, tj_rename(x, "a", NULL) == NULL, "rename", "NULL");
    FAILS_WITH(c, tj_transpose(x, NULL) == NULL, "transpose", "NULL");
    FAILS_WITH(c, tj_split(x, NULL, "p=2 q=2") == NULL, "split", "NULL");
    FAILS_WITH(c, tj_split(x, "a", NULL) == NULL, "split", "NULL");
    FAILS_WITH(c, tj_merge(x, NULL, "m") == NULL, "merge", "NULL");
    FAILS_WITH(c, tj_merge(x, "a b", NULL) == NULL, "merge", "NULL");
    FAILS_WITH(c, tj_slice(x, NULL, 0, 1) == NULL, "slice", "NULL");
    FAILS_WITH(c, tj_concat(1, xs, NULL) == NULL, "concat", "NULL");
    TJT_CHECK(tj_concat(2, NULL, "a") == NULL, "concat of a NULL list");
    tj_clear_error(c);
    FAILS_WITH(c, tj_pad(x, NULL, 1, 1, 0.0) == NULL, "pad", "NULL");
    FAILS_WITH(c, tj_broadcast(x, NULL) == NULL, "broadcast", "NULL");
    FAILS_WITH(c, tj_take(x, NULL, idx) == NULL, "take", "NULL");
    FAILS_WITH(c, tj_one_hot(idx, NULL, TJ_F32) == NULL, "one_hot", "NULL");
    FAILS_WITH(c, tj_causal_mask(x, NULL, "b", 0.0) == NULL, "causal_mask", "NULL");
    FAILS_WITH(c, tj_causal_mask(x, "a", NULL, 0.0) == NULL, "causal_mask", "NULL");
    FAILS_WITH(c, tj_softmax(x, NULL) == NULL, "softmax", "NULL");
    FAILS_WITH(c, tj_log_softmax(x, NULL) == NULL, "softmax", "NULL");
    FAILS_WITH(c, tj_layer_norm(x, NULL, 1e-5) == NULL, "layer_norm", "NULL");
    FAILS_WITH(c, tj_cross_entropy(x, lbl, NULL, "a") == NULL, "cross_entropy", "NULL");
    TJT_CHECK(tj_cross_entropy(x, lbl, "b", NULL) != NULL, "cross_entropy with NULL mean_axes: per-element losses: %s", tj_error(c));
    FAILS_WITH(c, tj_checkpoint_name(x, NULL) == NULL, "checkpoint_name", "empty name");
    /* a NULL spec or rule string is "": replicated */
    TJT_CHECK(tj_with_sharding_constraint(x, NULL) != NULL && tj_shard_by_rules(x, NULL) != NULL, "NULL specs replicate: %s", tj_error(c));
    FAILS_WITH(c, tj_psum(x, NULL) == NULL, "psum");
    FAILS_WITH(c, tj_all_gather(x, NULL, "a") == NULL, "all_gather");
    FAILS_WITH(c, tj_ppermute(x, "d", 1, NULL) == NULL, "ppermute");
    FAILS_WITH(c, tj_axis_index(g, NULL) == NULL, "axis_index");
    /* custom ops */
    {
        tj_v o = NULL;
        FAILS_WITH(c, tj_custom(NULL, 1, &x, &o) != TJ_OK, "custom", "(null)");
        FAILS_WITH(c, tj_custom("nosuch", 1, &x, NULL) != TJ_OK, "custom", "NULL");
        TJT_CHECK(tj_custom("nosuch", 1, NULL, &o) != TJ_OK, "custom with NULL inputs fails");
        tj_clear_error(c);
    }
    /* autodiff */
    y = tj_sum(tj_mul(x, x), "a b");
    FAILS_WITH(c, tj_grad(y, 1, NULL, &gw) != TJ_OK, "vjp", "bad arguments");
    FAILS_WITH(c, tj_grad(y, 1, &x, NULL) != TJ_OK, "vjp", "bad arguments");
    TJT_CHECK(tj_grad(NULL, 1, &x, &gw) != TJ_OK, "grad of NULL fails");
    tj_clear_error(c);
    FAILS_WITH(c, tj_vjp(1, &y, NULL, 1, NULL, &gw) != TJ_OK, "vjp", "bad arguments");
    FAILS_WITH(c, tj_vjp(1, &y, NULL, 1, &x, NULL) != TJ_OK, "vjp", "bad arguments");
    TJT_CHECK(tj_vjp(1, NULL, NULL, 1, &x, &gw) != TJ_OK, "vjp of NULL outputs fails");
    tj_clear_error(c);
    FAILS_WITH(c, tj_grad_tree(y, NULL, out) != TJ_OK, "grad_tree", "NULL", "test_robust.c:"); /* (the caller's line was missing) */
    FAILS_WITH(c, tj_grad_tree(y, in, NULL) != TJ_OK, "grad_tree", "NULL");
    {
        tj_v o = NULL;
        FAILS_WITH(c, tj_custom_vjp(NULL, NULL, NULL, 1, &x, 1, &o, 0) != TJ_OK, "custom_vjp", "fwd and bwd");
        FAILS_WITH(c, tj_custom_vjp(null_fwd, NULL, NULL, 1, &x, 1, &o, 0) != TJ_OK, "custom_vjp", "fwd and bwd");
        FAILS_WITH(c, tj_custom_vjp(null_fwd, NULL, NULL, 1, &x, 1, NULL, 0) != TJ_OK, "custom_vjp", "NULL");
    }
    /* scan, checkpoint, shard_map */
    {
        tj_v fin = NULL, o = NULL;
        const char *spec[1] = {""};
        FAILS_WITH(c, tj_scan(NULL, NULL, "l=2", 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", "bad arguments");
        FAILS_WITH(c, tj_scan(null_body, NULL, NULL, 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", "NULL");
        TJT_CHECK(tj_scan(null_body, NULL, "l=2", 1, NULL, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan without init fails");
        tj_clear_error(c);
        FAILS_WITH(c, tj_scan(null_body, NULL, "l=2", 1, &x, 0, NULL, 0, NULL, NULL, NULL) != TJ_OK, "scan", "bad arguments");
        FAILS_WITH(c, tj_scan(null_body, NULL, "l=2", 1, &x, 1, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", "bad arguments");
        FAILS_WITH(c, tj_scan(null_body, NULL, "l=2", 1, &x, 0, NULL, 1, &fin, NULL, NULL) != TJ_OK, "scan", "bad arguments");
        /* a policy function or sub-policy that is NULL means "save" (defined, no crash), also when differentiated */
        pol = tj_policy_from_fn(NULL, NULL);
        TJT_CHECK(tj_scan(null_body, NULL, "l=2", 1, &x, 0, NULL, 0, &fin, NULL, &pol) == TJ_OK && tj_grad(tj_sum(fin, "a b"), 1, &x, &gw) == TJ_OK,
                  "policy_from_fn(NULL): %s", tj_error(c));
        pol = tj_save_from_both(NULL, NULL);
        TJT_CHECK(tj_scan(null_body, NULL, "l=2", 1, &x, 0, NULL, 0, &fin, NULL, &pol) == TJ_OK && tj_grad(tj_sum(fin, "a b"), 1, &x, &gw) == TJ_OK,
                  "save_from_both(NULL, NULL): %s", tj_error(c));
        tj_clear_error(c);
        FAILS_WITH(c, tj_checkpoint(NULL, NULL, 1, &x, 1, &o, NULL) != TJ_OK, "checkpoint", "bad arguments");
        FAILS_WITH(c, tj_checkpoint(null_region, NULL, 1, &x, 1, NULL, NULL) != TJ_OK, "checkpoint", "bad arguments");
        TJT_CHECK(tj_checkpoint(null_region, NULL, 1, NULL, 1, &o, NULL) != TJ_OK, "checkpoint without inputs fails");
        tj_clear_error(c);
        FAILS_WITH(c, tj_shard_map(NULL, NULL, 1, &x, spec, 1, &o, spec, 1) != TJ_OK, "shard_map", "bad arguments");
        FAILS_WITH(c, tj_shard_map(null_region, NULL, 1, &x, NULL, 1, &o, spec, 1) != TJ_OK, "shard_map", "bad arguments");
        FAILS_WITH(c, tj_shard_map(null_region, NULL, 1, &x, spec, 1, &o, NULL, 1) != TJ_OK, "shard_map", "bad arguments");
        FAILS_WITH(c, tj_shard_map(null_region, NULL, 1, &x, spec, 1, NULL, spec, 1) != TJ_OK, "shard_map", "bad arguments");
    }
    /* a policy function that exists works */
    {
        tj_v fin = NULL;
        pol = tj_policy_from_fn(null_pfn, NULL);
        TJT_CHECK(tj_scan(null_body, NULL, "l=2", 1, &x, 0, NULL, 0, &fin, NULL, &pol) == TJ_OK, "scan with a policy function: %s", tj_error(c));
    }
    tj_clear_error(c);
    FAILS_WITH(c, tj_tree_v(in, NULL) == NULL, "tj_tree_v", "NULL", "test_robust.c:");
    FAILS_WITH(c, tj_tree_set_v(out, NULL, x) != TJ_OK, "tj_tree_set_v", "name");
    FAILS_WITH(c, tj_tree_set_v(out, "y", NULL) != TJ_OK, "tj_tree_set_v", "NULL");
    tj_tree_set_v(out, "y", tj_adds(x, 1.0));
}
static int g_custom_ran;
static void id_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *user) {
    (void)in; (void)nin; (void)out; (void)nout; (void)user;
    g_custom_ran = 1;
}
static void good_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    tj_tree_set_v(out, "y", tj_adds(tj_tree_v(in, "x"), 1.0));
}
static tj_array *map_id(tj_array *a, const char *name, void *user) {
    (void)name; (void)user;
    return a;
}
static void test_null_args(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *t = tj_tree_new(c), *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_array *a = tj_zeros(c, TJ_F32, "a=2 b=3");
    tj_prog *p;
    char buf[64];
    int32_t idx[2] = {0, 1};
    tj_safetensors *st;
    tj_op_def def;
    float f[6];
    tjt_current = "NULL arguments: basics";
    /* [1] */
    TJT_CHECK(tj_error(NULL) != NULL && tj_status_of(NULL) == TJ_ERR_ARG, "tj_error / tj_status_of of NULL");
    tj_clear_error(NULL);
    tj_set_dump(NULL, 1);
    tj_set_threads(NULL, 2);
    tj_set_profile(NULL, 1);
    tj_set_backend(NULL, NULL);
    (void)tj_get_alloc_stats(NULL);
    tj_ctx_free(NULL);
    TJT_CHECK(tj_set_devices(NULL, 2) != TJ_OK && tj_devices(NULL) >= 0, "devices of NULL");
    /* [2] arrays */
    TJT_CHECK(tj_zeros(NULL, TJ_F32, "a=2") == NULL && tj_array_new(NULL, TJ_F32, "a=2", NULL) == NULL && tj_iota(NULL, TJ_F32, "a=2", "a") == NULL,
              "NULL context: NULL");
    FAILS_WITH(c, tj_zeros(c, TJ_F32, NULL) == NULL, "tj_full", "shape", "NULL", "test_robust.c:");
    FAILS_WITH(c, tj_array_new(c, TJ_F32, NULL, NULL) == NULL, "tj_array_new", "shape", "NULL");
    FAILS_WITH(c, tj_iota(c, TJ_F32, "a=3", NULL) == NULL, "tj_iota", "axis", "NULL");
    FAILS_WITH(c, tj_iota(c, TJ_F32, NULL, "a") == NULL, "tj_iota", "shape", "NULL");
    FAILS_WITH(c, tj_array_read(a, TJ_F32, NULL) == TJ_ERR_ARG, "tj_array_read", "dst");
    TJT_CHECK(tj_array_read(NULL, TJ_F32, f) == TJ_ERR_ARG, "tj_array_read(NULL)");
    FAILS_WITH(c, tj_array_read_local(a, TJ_F32, NULL) == TJ_ERR_ARG, "tj_array_read_local", "dst"); /* (it wrote through NULL) */
    FAILS_WITH(c, tj_array_read_all(a, TJ_F32, NULL) == TJ_ERR_ARG, "tj_array_read_all", "dst");
    TJT_CHECK(tj_array_read_local(NULL, TJ_F32, f) == TJ_ERR_ARG && tj_array_read_all(NULL, TJ_F32, f) == TJ_ERR_ARG, "read_local/read_all of NULL");
    TJT_CHECK(tj_array_local_shape(NULL, buf, sizeof buf) == buf && !buf[0] && tj_array_local_shape(a, NULL, 0) == NULL, "tj_array_local_shape with NULL");
    tj_array_free(NULL);
    TJT_CHECK(tj_array_numel(NULL) == 0 && tj_array_rank(NULL) == 0 && tj_array_dim(NULL, "a") == -1 && tj_array_dim(a, NULL) == -1 &&
                  tj_array_is_deleted(NULL),
              "array queries of NULL");
    TJT_CHECK(!strcmp(tj_array_describe(NULL, buf, sizeof buf), "(null)") && tj_array_describe(a, NULL, 0) != NULL, "tj_array_describe with NULL");
    TJT_CHECK(tj_array_sharding(NULL, buf, sizeof buf) != NULL && tj_array_sharding(a, NULL, 0) != NULL, "tj_array_sharding with NULL");
    TJT_CHECK(tj_device_put(NULL, "") == NULL, "tj_device_put(NULL)");
    /* [2] trees */
    tjt_current = "NULL arguments: trees";
    TJT_CHECK(tj_tree_new(NULL) == NULL, "tj_tree_new(NULL)");
    tj_tree_free(NULL);
    tj_tree_clear(NULL);
    TJT_CHECK(tj_tree_size(NULL) == 0 && tj_tree_name(NULL, 0) == NULL && tj_tree_find(NULL, "a") == -1 && tj_tree_find(t, NULL) == -1, "tree queries");
    TJT_CHECK(tj_tree_set_array(NULL, "a", tj_zeros(c, TJ_F32, "a=1")) == TJ_ERR_ARG, "set_array on NULL tree (and no leak)");
    FAILS_WITH(c, tj_tree_set_array(t, NULL, tj_zeros(c, TJ_F32, "a=1")) != TJ_OK, "tj_tree_set_array", "name", "NULL");
    FAILS_WITH(c, tj_tree_set_array(t, "", tj_zeros(c, TJ_F32, "a=1")) != TJ_OK, "tj_tree_set_array", "name", "empty");
    FAILS_WITH(c, tj_tree_set_array(t, "x", NULL) != TJ_OK, "tj_tree_set_array", "NULL");
    FAILS_WITH(c, tj_tree_set_array_ref(t, NULL, a) != TJ_OK, "tj_tree_set_array_ref", "name");
    FAILS_WITH(c, tj_tree_set_array_ref(t, "x", NULL) != TJ_OK, "tj_tree_set_array_ref", "NULL");
    TJT_CHECK(tj_tree_set_array_ref(NULL, "x", a) == TJ_ERR_ARG, "set_array_ref on NULL tree");
    FAILS_WITH(c, tj_tree_set_int(t, NULL, 1) != TJ_OK, "tj_tree_set_int", "name");
    FAILS_WITH(c, tj_tree_set_float(t, NULL, 1) != TJ_OK, "tj_tree_set_float", "name");
    FAILS_WITH(c, tj_tree_set_string(t, NULL, "s") != TJ_OK, "tj_tree_set_string", "name");
    FAILS_WITH(c, tj_tree_set_string(t, "s", NULL) != TJ_OK, "tj_tree_set_string", "NULL");
    TJT_CHECK(tj_tree_set_int(NULL, "a", 1) == TJ_ERR_ARG && tj_tree_set_float(NULL, "a", 1) == TJ_ERR_ARG && tj_tree_set_string(NULL, "a", "b") == TJ_ERR_ARG &&
                  tj_tree_set_v(NULL, "a", NULL) == TJ_ERR_ARG,
              "setters on a NULL tree");
    FAILS_WITH(c, tj_tree_array(t, NULL) == NULL, "tj_tree_array", "name", "NULL", "test_robust.c:");
    FAILS_WITH(c, tj_tree_string(t, NULL) == NULL, "tj_tree_string", "NULL");
    FAILS_WITH(c, tj_tree_float(t, NULL) == 0, "tj_tree_float", "NULL");
    FAILS_WITH(c, tj_tree_take(t, NULL) == NULL, "tj_tree_take", "NULL");
    TJT_CHECK(tj_tree_array(NULL, "a") == NULL && tj_tree_array_at(NULL, 0) == NULL && tj_tree_v_at(NULL, 0) == NULL && tj_tree_take(NULL, "a") == NULL,
              "getters of a NULL tree");
    FAILS_WITH(c, (tj_tree_merge(NULL, t), 1), "tj_tree_merge", "dst");
    tj_tree_merge(t, NULL);
    FAILS_WITH(c, tj_tree_map(t, NULL, NULL) != TJ_OK, "tj_tree_map", "fn");
    TJT_CHECK(tj_tree_map(NULL, map_id, NULL) == TJ_ERR_ARG, "tj_tree_map(NULL)");
    FAILS_WITH(c, tj_tree_save(t, NULL) != TJ_OK, "tj_tree_save", "path");
    FAILS_WITH(c, tj_tree_load(t, NULL) != TJ_OK, "tj_tree_load", "path");
    TJT_CHECK(tj_tree_save(NULL, "x") == TJ_ERR_ARG && tj_tree_load(NULL, "x") == TJ_ERR_ARG, "save/load of a NULL tree");
    /* [2] safetensors */
    tjt_current = "NULL arguments: safetensors";
    TJT_CHECK(tj_st_dtype_from_name(NULL) == TJ_ST_NDTYPE && tj_st_load(NULL, "x") == NULL && tj_st_parse(NULL, "x", 1, NULL) == NULL, "st of NULL");
    FAILS_WITH(c, tj_st_load(c, NULL) == NULL, "tj_st_load", "path");
    FAILS_WITH(c, tj_st_parse(c, NULL, 10, NULL) == NULL, "tj_st_parse", "bytes");
    FAILS_WITH(c, tj_st_parse(c, NULL, 0, NULL) == NULL, "too short");
    tj_st_free(NULL);
    TJT_CHECK(tj_st_count(NULL) == 0 && tj_st_at(NULL, 0) == NULL && tj_st_find(NULL, "a") == NULL && tj_st_meta_count(NULL) == 0 &&
                  tj_st_meta_key(NULL, 0) == NULL && tj_st_meta(NULL, "a") == NULL && tj_st_expect(NULL, "a", TJ_ST_F32, 0, NULL) == NULL &&
                  tj_st_array(NULL, "a", TJ_F32, "a") == NULL,
              "st queries of NULL");
    TJT_CHECK(tj_st_to_f32(NULL, f) == TJ_ERR_ARG, "tj_st_to_f32(NULL)");
    {
        tj_st_entry e;
        int64_t shape[2] = {2, 3};
        e.name = "w";
        e.dtype = TJ_ST_F32;
        e.rank = 2;
        e.shape = shape;
        e.data = f;
        memset(f, 0, sizeof f);
        FAILS_WITH(c, tj_st_save(c, NULL, &e, 1, NULL, 0) != TJ_OK, "tj_st_save", "path");
        FAILS_WITH(c, tj_st_save(c, path_in("n.st"), NULL, 1, NULL, 0) != TJ_OK, "n.st", "tensor");
        FAILS_WITH(c, tj_st_save(c, path_in("n.st"), &e, 1, NULL, 1) != TJ_OK, "n.st", "metadata");
        e.data = NULL;
        FAILS_WITH(c, tj_st_save(c, path_in("n.st"), &e, 1, NULL, 0) != TJ_OK, "NULL data");
        e.data = f;
        e.name = NULL;
        FAILS_WITH(c, tj_st_save(c, path_in("n.st"), &e, 1, NULL, 0) != TJ_OK, "invalid name");
        e.name = "w";
        e.shape = NULL;
        FAILS_WITH(c, tj_st_save(c, path_in("n.st"), &e, 1, NULL, 0) != TJ_OK, "shape is NULL", "rank 2"); /* (it said "invalid rank 2") */
        e.shape = shape;
        TJT_CHECK(tj_st_save(NULL, path_in("n.st"), &e, 1, NULL, 0) == TJ_ERR_ARG, "tj_st_save(NULL ctx)");
        TJT_CHECK(!tj_st_save(c, path_in("n.st"), &e, 1, NULL, 0), "save: %s", tj_error(c));
    }
    st = tj_st_load(c, path_in("n.st"));
    TJT_CHECK(st != NULL, "load: %s", tj_error(c));
    TJT_CHECK(tj_st_find(st, NULL) == NULL && tj_st_meta(st, NULL) == NULL, "st lookups of NULL names");
    FAILS_WITH(c, tj_st_expect(st, NULL, TJ_ST_F32, 2, NULL) == NULL, "NULL");
    TJT_CHECK(tj_st_expect(st, "w", TJ_ST_F32, 2, NULL) != NULL, "tj_st_expect with a NULL shape checks the rank only");
    FAILS_WITH(c, tj_st_array(st, NULL, TJ_F32, "a b") == NULL, "tj_st_array", "name", "NULL");
    FAILS_WITH(c, tj_st_array(st, "w", TJ_F32, NULL) == NULL, "tj_st_array", "axes", "NULL");
    TJT_CHECK(tj_st_to_f32(tj_st_find(st, "w"), NULL) == TJ_ERR_ARG, "tj_st_to_f32 into NULL");
    tj_st_free(st);
    /* [3]-[8] inside a traced function */
    tjt_current = "NULL arguments: tracing";
    tj_tree_set_array(in, "x", tj_full(c, TJ_F32, "a=2 b=3", 0.5));
    tj_tree_set_array(in, "idx", tj_array_new(c, TJ_I32, "a=2", idx));
    tj_tree_set_array(in, "lbl", tj_array_new(c, TJ_I32, "a=2", idx));
    p = tj_jit(c, "nulls", null_ops_fn, NULL, in, NULL);
    TJT_CHECK(p != NULL, "tracing continues after the cleared errors: %s", tj_error(c));
    tj_clear_error(c);
    /* [4] */
    FAILS_WITH(c, tj_set_mesh(c, NULL) != TJ_OK, "tj_set_mesh", "NULL");
    TJT_CHECK(tj_set_mesh(NULL, "d=1") != TJ_OK, "tj_set_mesh(NULL)");
    TJT_CHECK(tj_filter_shard(in, NULL) == TJ_OK, "filter_shard with NULL rules replicates: %s", tj_error(c));
    TJT_CHECK(tj_filter_shard(NULL, "a:d") != TJ_OK, "filter_shard(NULL)");
    tj_clear_error(c);
    /* [5] custom ops */
    memset(&def, 0, sizeof def);
    FAILS_WITH(c, tj_register_op(c, NULL) != TJ_OK, "register_op", "no name");
    FAILS_WITH(c, tj_register_op(c, &def) != TJ_OK, "register_op", "name");
    def.name = "noop";
    FAILS_WITH(c, tj_register_op(c, &def) != TJ_OK, "register_op", "outputs");
    def.cpu = id_cpu;
    def.nout = 1;
    TJT_CHECK(tj_register_op(NULL, &def) != TJ_OK, "tj_register_op(NULL)");
    /* [8] policies and reports */
    tjt_current = "NULL arguments: programs";
    TJT_CHECK(tj_prog_residuals(NULL, NULL, 0) == 0 && tj_prog_lint(NULL, buf, sizeof buf) == 0 && tj_prog_collectives(NULL, NULL, 0) == 0 &&
                  tj_prog_transposes(NULL, NULL, 0) == 0 && tj_prog_events(NULL, NULL, 0) == 0,
              "reports of NULL programs");
    tj_prog_residuals_print(NULL, stdout);
    tj_prog_transposes_print(NULL, stdout);
    tj_prog_print(NULL, stdout);
    tj_memory_print(NULL, stdout);
    tj_graph_print(NULL, stdout);
    tj_prog_free(NULL);
    (void)tj_prog_memory(NULL);
    (void)tj_prog_flops(NULL);
    TJT_CHECK(tj_prog_cost(NULL).kernels == 0 && tj_cost_print(NULL, 1, 1, 0, 1, stdout) == 0 && tj_prog_cost_ops(NULL, NULL, 0) == 0, "the cost of no program is 0");
    if (p) {
        tj_residual r[2];
        tj_collective col[2];
        tj_transpose tr[2];
        tj_event ev[2];
        TJT_CHECK(tj_prog_residuals(p, NULL, 4) >= 0 && tj_prog_collectives(p, NULL, 4) >= 0 && tj_prog_transposes(p, NULL, 4) >= 0 &&
                      tj_prog_events(p, NULL, 4) >= 0 && tj_prog_lint(p, NULL, 4) >= 0,
                  "reports into NULL rows");
        TJT_CHECK(tj_prog_residuals(p, r, 2) >= 0 && tj_prog_collectives(p, col, 2) >= 0 && tj_prog_transposes(p, tr, 2) >= 0 && tj_prog_events(p, ev, 2) >= 0,
                  "reports");
        FAILS_WITH(c, (tj_prog_print(p, NULL), 1), "tj_prog_print", "NULL");
        FAILS_WITH(c, (tj_memory_print(p, NULL), 1), "tj_memory_print", "NULL");
        FAILS_WITH(c, (tj_prog_residuals_print(p, NULL), 1), "tj_prog_residuals_print", "NULL");
        FAILS_WITH(c, (tj_prog_transposes_print(p, NULL), 1), "tj_prog_transposes_print", "NULL");
        FAILS_WITH(c, tj_prog_write_trace(p, NULL) != TJ_OK, "tj_prog_write_trace", "path");
        TJT_CHECK(tj_prog_write_trace(NULL, "x") != TJ_OK, "tj_prog_write_trace(NULL)");
        FAILS_WITH(c, tj_prog_output_shapes(p, NULL) == TJ_ERR_ARG, "tj_prog_output_shapes", "out is NULL"); /* (failed with no message) */
        TJT_CHECK(tj_prog_output_shapes(NULL, out) == TJ_ERR_ARG, "tj_prog_output_shapes(NULL)");
    }
    tj_prog_free(p);
    /* [12] */
    TJT_CHECK(tj_jit(NULL, "f", good_fn, NULL, in, NULL) == NULL, "tj_jit(NULL ctx)");
    FAILS_WITH(c, tj_jit(c, "f", NULL, NULL, in, NULL) == NULL, "jit", "NULL", "test_robust.c:");
    FAILS_WITH(c, tj_jit(c, "f", good_fn, NULL, NULL, NULL) == NULL, "jit", "NULL", "test_robust.c:");
    p = tj_jit(c, NULL, good_fn, NULL, in, NULL);
    TJT_CHECK(p != NULL, "a NULL name is allowed: %s", tj_error(c));
    TJT_CHECK(tj_run(NULL, in, out) == TJ_ERR_ARG, "tj_run(NULL)");
    FAILS_WITH(c, tj_run(p, NULL, out) == TJ_ERR_ARG, "run", "in", "NULL", "test_robust.c:");
    FAILS_WITH(c, tj_run(p, in, NULL) == TJ_ERR_ARG, "run", "out", "NULL", "test_robust.c:");
    TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "and a correct run works: %s", tj_error(c));
    tj_prog_free(p);
    (void)g_custom_ran;
    tj_array_free(a);
    tj_tree_free(t);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(c);
}

/* --------------------------------------------- donated leaf is named */
static void donate_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    tj_tree_set_v(out, "w", tj_adds(tj_tree_v(in, "w"), 1.0));
}
static void test_donated(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_jit_opts o;
    tj_prog *p;
    tjt_current = "donated leaf";
    o.donate = "w";
    tj_tree_set_array(in, "w", tj_zeros(c, TJ_F32, "a=4"));
    p = tj_jit(c, "donate", donate_fn, NULL, in, &o);
    TJT_CHECK(p && !tj_run(p, in, out), "first run: %s", tj_error(c));
    FAILS_WITH(c, tj_run(p, in, out) == TJ_ERR_STATE, "'w'", "donated", "test_robust.c:");
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(c);
}

/* ./test_robust [section]: one section only (overflow, f2i, names, dirs,
   tmp, env, lines, null, donated) */
int main(int argc, char **argv) {
    tj_ctx *c;
    const char *only = argc > 1 ? argv[1] : NULL;
    unsetenv("TJ_DEVICES");
    c = tj_ctx_new();
    if (make_dir("tj_robust")) return 1;
#define SECTION(name, call) if (!only || !strcmp(only, name)) call
    SECTION("overflow", test_overflow(c));
    SECTION("f2i", test_f2i(c));
    SECTION("names", test_name_limit(c));
    SECTION("dirs", test_directories(c));
    SECTION("tmp", test_stale_tmp(c));
    SECTION("env", test_env_devices());
    SECTION("lines", test_caller_lines());
    SECTION("null", test_null_args());
    SECTION("donated", test_donated());
    tj_ctx_free(c);
    remove_dir();
    return tjt_finish();
}
