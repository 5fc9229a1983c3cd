/* Misuse of the public API: a sweep of the ways a caller can hold it wrong
   that the library can detect, one case a line (the cases that crashed or
   answered wrongly before the fixes say so). Each must return an error (NULL
   or a non-zero status) whose message names the function or op, the
   offending axes or values, and, where the call takes the caller's file and
   line (the tj_*_at forms the macros fill in), this file's line. After each
   error the context is cleared and used again, so an error never poisons
   later work; section "sticky errors" checks what the header says happens
   without a clear. Nothing may crash, leak (the ASan pass), or print to
   stderr other than documented warnings: main sends stderr to a file and
   checks it at the end. tests/test_robust.c holds the NULL-argument and
   size-overflow cases; this file the rest. */
#define _POSIX_C_SOURCE 200809L
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#define TJT_FILES
#include "tj_test.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>

/* ---- the checks ----
   BAD(c, failed, parts...): `failed` (an expression that is true when the
   call failed) must hold, the context must hold an error whose message has
   every part and "test_misuse.c:<this line>"; the error is then cleared.
   BAD_NL is the same for calls that take no file:line (the message names
   the function instead). Keep each on one line: __LINE__ is the call's. */
static int misuse_cases;
static void misuse_check(tj_ctx *c, int failed, const char *expr, int line, int want_line, ...) {
    va_list ap;
    const char *s;
    char at[64];
    int ok = failed && tj_status_of(c) != TJ_OK;
    misuse_cases++;
    snprintf(at, sizeof at, "test_misuse.c:%d", line);
    if (!failed) {
        tjt_fail++;
        fprintf(stderr, "FAIL test_misuse.c:%d [%s] should fail: %s (context says \"%s\")\n", line, tjt_current, expr, tj_error(c));
        tj_clear_error(c);
        return;
    }
    { /* the parts are matched without this file's line numbers, whose digits could stand in for a size */
        char m[1100], *p;
        snprintf(m, sizeof m, "%s", tj_error(c));
        while ((p = strstr(m, "test_misuse.c:")) != NULL) {
            char *e = p + 14;
            while (*e >= '0' && *e <= '9') e++;
            memmove(p, e, strlen(e) + 1);
        }
        va_start(ap, want_line);
        while ((s = va_arg(ap, const char *)) != NULL)
            if (!strstr(m, s)) ok = 0;
        va_end(ap);
    }
    if (want_line && !strstr(tj_error(c), at)) ok = 0;
    if (ok) tjt_pass++;
    else {
        tjt_fail++;
        fprintf(stderr, "FAIL test_misuse.c:%d [%s] %s: the message \"%s\" lacks an expected part%s\n", line, tjt_current, expr, tj_error(c),
                want_line ? " (or this line)" : "");
    }
    tj_clear_error(c);
}
#define BAD(c, failed, ...) misuse_check(c, (failed), #failed, __LINE__, 1, __VA_ARGS__, (const char *)NULL)
#define BAD_NL(c, failed, ...) misuse_check(c, (failed), #failed, __LINE__, 0, __VA_ARGS__, (const char *)NULL)
/* a call that must work (after the errors before it) */
#define WORKS(c, ok) TJT_CHECK((ok) && tj_status_of(c) == TJ_OK, "%s: %s", #ok, tj_error(c))

/* ------------------------------------------------------------ context */
static void test_context(void) {
    tj_ctx *c = tj_ctx_new();
    tj_array *a, *r;
    tjt_current = "context and mesh";
    BAD_NL(c, tj_set_devices(c, 0) != TJ_OK, "tj_set_devices", "0");
    BAD_NL(c, tj_set_devices(c, -3) != TJ_OK, "tj_set_devices", "-3");
    BAD_NL(c, tj_set_devices(c, TJ_MAXDEV + 1) != TJ_OK, "tj_set_devices", "65");
    WORKS(c, tj_set_devices(c, 4) == TJ_OK && tj_devices(c) == 4);
    BAD(c, tj_set_mesh(c, "data=2 model=4") != TJ_OK, "tj_set_mesh", "data=2 model=4", "8 devices", "there are 4");
    BAD(c, tj_set_mesh(c, "data=2 data=2") != TJ_OK, "tj_set_mesh", "'data'");
    BAD(c, tj_set_mesh(c, "data=0 model=4") != TJ_OK, "tj_set_mesh", "data");
    BAD(c, tj_set_mesh(c, "data=-4") != TJ_OK, "tj_set_mesh", "data");
    BAD(c, tj_set_mesh(c, "data=4 a=1 b=1 d=1 e=1 f=1 g=1") != TJ_OK, "tj_set_mesh");
    BAD(c, tj_set_mesh(c, "data") != TJ_OK, "tj_set_mesh", "data");
    WORKS(c, tj_set_mesh(c, "data=2 model=2") == TJ_OK);
    /* the mesh stays what it was after a refused one */
    BAD(c, tj_set_mesh(c, "data=3") != TJ_OK, "tj_set_mesh");
    a = tj_zeros(c, TJ_F32, "a=4 b=2");
    r = tj_device_put(a, "a:data b:model");
    WORKS(c, r != NULL);
    tj_array_free(r);
    tj_array_free(a);
    /* a new device count drops the mesh: its axes are unknown after */
    WORKS(c, tj_set_devices(c, 2) == TJ_OK);
    a = tj_zeros(c, TJ_F32, "a=4 b=2");
    BAD(c, tj_device_put(a, "a:data") == NULL, "device_put", "'data'", "not an axis of the mesh");
    tj_array_free(a);
    tj_ctx_free(c);
}

/* ---- sticky errors: the header says traced ops, tj_jit and tj_run fail
   until tj_clear_error, and calls on arrays, trees and files work on ---- */
static void id_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    tj_tree_set_v(out, "y", tj_adds(tj_tree_v(in, "x"), 1.0));
}
static void test_sticky(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p;
    tjt_current = "sticky errors";
    tj_tree_set_array(in, "x", tj_zeros(c, TJ_F32, "a=2"));
    p = tj_jit(c, "id", id_fn, NULL, in, NULL);
    WORKS(c, p != NULL);
    TJT_CHECK(tj_zeros(c, TJ_F32, "a=0") == NULL, "a bad shape fails");
    TJT_CHECK(tj_jit(c, "id", id_fn, NULL, in, NULL) == NULL && strstr(tj_error(c), "a=0") == NULL && strstr(tj_error(c), "'a'"),
              "tj_jit after an uncleared error fails with the first message: %s", tj_error(c));
    TJT_CHECK(tj_run(p, in, out) != TJ_OK && strstr(tj_error(c), "'a'"), "tj_run after an uncleared error fails: %s", tj_error(c));
    TJT_CHECK(tj_status_of(c) == TJ_ERR_SHAPE, "the first status stands: %d", (int)tj_status_of(c));
    { /* arrays and trees work on (the header says so), and the first message stays */
        tj_array *z = tj_zeros(c, TJ_F32, "a=2");
        float r[2] = {1, 1};
        TJT_CHECK(z && tj_array_read(z, TJ_F32, r) == TJ_OK && r[0] == 0 && tj_tree_set_int(out, "k", 1) == TJ_OK, "arrays and trees work with an error pending");
        TJT_CHECK(tj_array_read(z, (tj_dtype)9, r) == TJ_ERR_DTYPE && strstr(tj_error(c), "'a'") && !strstr(tj_error(c), "dtype 9"),
                  "a later failure returns its status and keeps the first message: %s", tj_error(c));
        tj_array_free(z);
    }
    tj_clear_error(c);
    WORKS(c, tj_run(p, in, out) == TJ_OK);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(c);
}

/* ------------------------------------------------------------- arrays */
static void test_arrays(void) {
    tj_ctx *c = tj_ctx_new(), *c2 = tj_ctx_new();
    tj_array *a, *b;
    float f[4] = {0};
    char buf[8];
    tjt_current = "arrays";
    BAD(c, tj_zeros(c, (tj_dtype)7, "a=2") == NULL, "tj_full", "dtype 7");
    BAD(c, tj_zeros(c, (tj_dtype)-1, "a=2") == NULL, "tj_full", "dtype -1");
    BAD(c, tj_array_new(c, TJ_F32, "a=0", NULL) == NULL, "tj_array_new", "'a'", "\"0\"");
    BAD(c, tj_array_new(c, TJ_F32, "a=-2", NULL) == NULL, "tj_array_new", "'a'", "-2");
    BAD(c, tj_zeros(c, TJ_F32, "a=2 b=3 a=4") == NULL, "tj_full", "'a'", "twice", "\"a=2 b=3 a=4\""); /* (it quoted "a=4") */
    BAD(c, tj_zeros(c, TJ_F32, "a=2x") == NULL, "tj_full", "x");
    BAD(c, tj_zeros(c, TJ_F32, "a=1e3") == NULL, "tj_full", "e3");
    BAD(c, tj_zeros(c, TJ_F32, "a= 3") == NULL, "tj_full", "'a'");
    BAD(c, tj_zeros(c, TJ_F32, "a=+3") == NULL, "tj_full", "'a'");
    BAD(c, tj_zeros(c, TJ_F32, "a=99999999999999999999") == NULL, "tj_full", "'a'");
    BAD(c, tj_zeros(c, TJ_F32, "a=2 b") == NULL, "tj_full", "b");
    BAD(c, tj_zeros(c, TJ_F32, "=2") == NULL, "tj_full", "=2");
    BAD(c, tj_zeros(c, TJ_F32, "a-b=2") == NULL, "tj_full", "a-b");
    BAD(c, tj_zeros(c, TJ_F32, "a=1 b=1 c=1 d=1 e=1 f=1 g=1 h=1 i=1") == NULL, "tj_full", "more than 8 axes");
    BAD(c, tj_iota(c, TJ_I32, "a=2 b=3", "c") == NULL, "tj_iota", "'c'");
    BAD(c, tj_iota(c, TJ_I32, "a=2 b=3", "a b") == NULL, "tj_iota", "a b");
    BAD(c, tj_iota(c, TJ_I32, "a=2 b=3", "") == NULL, "tj_iota");
    BAD(c, tj_array_abstract(c, (tj_dtype)9, "a=2", NULL) == NULL, "dtype 9");
    a = tj_zeros(c, TJ_F32, "a=2 b=2");
    BAD_NL(c, tj_array_read(a, (tj_dtype)5, f) != TJ_OK, "tj_array_read", "dtype 5");
    TJT_CHECK(!strcmp(tj_array_describe(a, buf, sizeof buf), "f32[a=2") && tj_array_describe(a, buf, 1)[0] == 0, "describe truncates: \"%s\"", buf);
    TJT_CHECK(tj_array_dim(a, "nosuch") == -1 && tj_array_dim(a, "") == -1, "dims of absent axes");
    /* an array of another context in a tree (tj_run read it through the wrong backend) */
    b = tj_zeros(c2, TJ_F32, "a=2 b=2");
    {
        tj_tree *t = tj_tree_new(c);
        BAD_NL(c, tj_tree_set_array(t, "x", b) != TJ_OK, "tj_tree_set_array", "'x'", "another context");
        BAD_NL(c, tj_tree_set_array_ref(t, "x", a) != TJ_OK || tj_tree_set_array(t, "y", tj_zeros(c2, TJ_F32, "a=1")) != TJ_OK, "another context");
        tj_tree_free(t);
    }
    tj_array_free(a);
    tj_ctx_free(c2);
    tj_ctx_free(c);
}

/* ---- specs: device_put, abstract arrays, from_local ---- */
static void test_specs(void) {
    tj_ctx *c = tj_ctx_new();
    tj_array *a, *r;
    float data[12] = {0};
    tjt_current = "sharding specs";
    tj_set_devices(c, 4);
    tj_set_mesh(c, "data=2 model=2");
    a = tj_zeros(c, TJ_F32, "a=4 b=6");
    BAD(c, tj_device_put(a, "a:nosuch") == NULL, "device_put", "'nosuch'");
    BAD(c, tj_device_put(a, "c:data") == NULL, "device_put", "'c'");
    BAD(c, tj_device_put(a, "a:data b:data") == NULL, "device_put", "'data'");
    BAD(c, tj_device_put(a, "a:data+data") == NULL, "device_put", "'data'");
    BAD(c, tj_device_put(a, "a:data a:model") == NULL, "device_put", "'a'");
    BAD(c, tj_device_put(a, "a:data+model b:model") == NULL, "device_put", "'model'");
    BAD(c, tj_device_put(a, "a") == NULL, "device_put", "near \"a\"");
    /* a tuple is mesh axes (or none, -) joined by '+' ("data-model" was data+model, "data+" and "-data" data) */
    BAD(c, tj_device_put(a, "a:data-model") == NULL, "device_put", "bad mesh axis", "near \"-model\"");
    BAD(c, tj_device_put(a, "a:data+ b:model") == NULL, "device_put", "bad mesh axis", "near \"+ b:model\"");
    BAD(c, tj_device_put(a, "a:-data") == NULL, "device_put", "bad mesh axis", "near \"data\"");
    BAD(c, tj_array_from_local(c, TJ_F32, "a=4 b=6", "a:data+", data) == NULL, "tj_array_from_local", "bad mesh axis");
    {
        char sb[64];
        r = tj_device_put(a, "a:data\tb:model"); /* (a tab ended the spec's items but not a tuple) */
        WORKS(c, r != NULL && !strcmp(tj_array_sharding(r, sb, sizeof sb), "a:data b:model"));
        tj_array_free(r);
    }
    r = tj_device_put(a, "a:data+model b:none");
    WORKS(c, r != NULL);
    BAD_NL(c, tj_array_read_local(r, (tj_dtype)9, data) != TJ_OK, "tj_array_read_local", "dtype 9");
    BAD_NL(c, tj_array_read_all(r, (tj_dtype)9, data) != TJ_OK, "dtype 9");
    tj_array_free(r);
    tj_array_free(a);
    a = tj_zeros(c, TJ_F32, "a=3 b=5");
    BAD(c, tj_device_put(a, "a:data") == NULL, "device_put", "'a' of size 3", "data (2 devices)");
    BAD(c, tj_device_put(a, "b:data+model") == NULL, "device_put", "'b' of size 5", "data+model (4 devices)");
    tj_array_free(a);
    BAD(c, tj_array_abstract(c, TJ_F32, "a=3 b=4", "a:data") == NULL, "tj_array_abstract", "'a'", "3");
    BAD(c, tj_array_abstract(c, TJ_F32, "a=4 b=4", "a:model b:model") == NULL, "tj_array_abstract", "'model'");
    BAD(c, tj_array_abstract(c, TJ_F32, "a=4 b=4", "a:pipe") == NULL, "tj_array_abstract", "'pipe'");
    BAD(c, tj_array_from_local(c, TJ_F32, "a=4 b=6", "a:nosuch", data) == NULL, "tj_array_from_local", "'nosuch'");
    BAD(c, tj_array_from_local(c, TJ_F32, "a=3 b=6", "a:data", data) == NULL, "tj_array_from_local", "'a'");
    tj_ctx_free(c);
}

/* -------------------------------------------------------------- trees */
static tj_array *map_null(tj_array *a, const char *name, void *user) {
    (void)a; (void)name; (void)user;
    return NULL;
}
static tj_array *map_foreign(tj_array *a, const char *name, void *user) {
    (void)a; (void)name;
    return tj_zeros((tj_ctx *)user, TJ_F32, "a=1");
}
static void test_trees(void) {
    tj_ctx *c = tj_ctx_new(), *c2 = tj_ctx_new();
    tj_tree *t = tj_tree_new(c), *t2 = tj_tree_new(c2);
    tj_array *a = tj_zeros(c, TJ_F32, "a=2");
    tjt_current = "trees";
    /* one array owned under two names would be freed twice */
    WORKS(c, tj_tree_set_array(t, "w", a) == TJ_OK);
    BAD_NL(c, tj_tree_set_array(t, "v", a) != TJ_OK, "tj_tree_set_array", "'v'", "'w'");
    TJT_CHECK(tj_tree_size(t) == 1 && tj_tree_array(t, "w") == a, "the tree is unchanged: %d leaves", tj_tree_size(t));
    /* a borrowed second name is fine */
    WORKS(c, tj_tree_set_array_ref(t, "v", a) == TJ_OK);
    /* ... and so is a second tree that borrows; owning is refused until the
       first gives it up (both trees freed it) */
    {
        tj_tree *t3 = tj_tree_new(c);
        WORKS(c, tj_tree_set_array_ref(t3, "w", a) == TJ_OK);
        BAD_NL(c, tj_tree_set_array(t3, "w", a) != TJ_OK, "tj_tree_set_array", "'w'", "another tree already owns");
        BAD_NL(c, tj_tree_set_array(t3, "u", a) != TJ_OK, "tj_tree_set_array", "'u'", "another tree already owns");
        WORKS(c, tj_tree_take(t, "w") == a && tj_tree_set_array(t3, "u", a) == TJ_OK); /* t's 'v' still borrows it */
        WORKS(c, tj_tree_set_array_ref(t3, "u", a) == TJ_OK && tj_tree_set_array(t, "w", a) == TJ_OK); /* and back */
        tj_tree_free(t3);
    }
    BAD_NL(c, tj_tree_set_string(t, "", "x") != TJ_OK, "tj_tree_set_string", "empty");
    BAD_NL(c, tj_tree_set_int(t, "", 1) != TJ_OK, "tj_tree_set_int", "empty");
    /* merging a tree into itself: nothing changes (it emptied the tree) */
    tj_tree_merge(t, t);
    TJT_CHECK(tj_tree_size(t) == 2 && tj_tree_array(t, "w") == a, "merge(t, t) keeps t: %d leaves", tj_tree_size(t));
    tj_clear_error(c);
    /* trees of two contexts */
    tj_tree_set_array(t2, "z", tj_zeros(c2, TJ_F32, "a=3"));
    tj_tree_merge(t, t2);
    BAD_NL(c, tj_status_of(c) != TJ_OK && tj_tree_find(t, "z") < 0 && tj_tree_size(t2) == 1, "tj_tree_merge", "another context");
    /* map: a NULL replacement, an array of another context */
    BAD_NL(c, tj_tree_map(t, map_null, NULL) != TJ_OK, "tj_tree_map", "fn returned NULL for leaf 'v'");
    TJT_CHECK(tj_tree_array(t, "w") == a, "a failed map leaves the leaf");
    tj_clear_error(c);
    BAD_NL(c, tj_tree_map(t, map_foreign, c2) != TJ_OK, "tj_tree_map", "leaf 'v'", "another context");
    tj_tree_free(t);
    tj_tree_free(t2);
    tj_ctx_free(c2);
    tj_ctx_free(c);
}

/* -------------------------------------------------- ops while tracing */
static tj_v g_outer_x; /* a value of the program being traced around inner_fn */
static void inner_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v x = tj_tree_v(in, "x");
    BAD(c, tj_add(x, g_outer_x) == NULL, "add", "unrelated traced functions");
    BAD(c, tj_dot(g_outer_x, x, "b") == NULL, "dot", "unrelated traced functions");
    tj_clear_error(tj_graph_ctx(tj_graph_of(g_outer_x))); /* told too, when it is another context */
    if (u) tj_tree_set_v(out, "o", g_outer_x); /* an output that is not this program's value */
    tj_tree_set_v(out, "y", tj_adds(x, 1.0));
}
static void ops_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v x = tj_tree_v(in, "x");     /* f32[a=4, b=6] */
    tj_v y = tj_tree_v(in, "y");     /* f32[a=3, b=6] */
    tj_v i = tj_tree_v(in, "i");     /* i32[a=4] */
    tj_v k = tj_tree_v(in, "k");     /* f32[b=6, n=5] */
    tj_v k2 = tj_tree_v(in, "k2");   /* f32[b=7, n=5] */
    tj_v s = tj_scalar(g, TJ_F32, 1.0), xs[3];
    /* dtypes */
    BAD(c, tj_scalar(g, (tj_dtype)4, 1.0) == NULL, "dtype 4");
    BAD(c, tj_fill(g, (tj_dtype)11, "a=2", 1.0) == NULL, "fill", "dtype 11");
    BAD(c, tj_cast(x, (tj_dtype)6) == NULL, "cast", "dtype 6");
    BAD(c, tj_add(x, tj_cast(x, TJ_F64)) == NULL, "add", "f32", "f64");
    BAD(c, tj_mul(i, tj_cast(i, TJ_F32)) == NULL, "mul", "i32", "f32");
    BAD(c, tj_lt(x, tj_cast(x, TJ_I32)) == NULL, "lt", "f32", "i32");
    BAD(c, tj_exp(i) == NULL, "exp", "i32");
    BAD(c, tj_log(i) == NULL, "log", "i32");
    BAD(c, tj_tanh(i) == NULL, "tanh", "i32");
    BAD(c, tj_sqrt(i) == NULL, "sqrt", "i32");
    BAD(c, tj_rsqrt(i) == NULL, "rsqrt", "i32");
    BAD(c, tj_gelu(i) == NULL, "gelu", "i32");
    BAD(c, tj_pows(i, 2.5) == NULL, "pows", "2.5 on i32", "cast x to a float dtype"); /* (i32 ** 2 is lax.integer_pow: test_ops) */
    BAD(c, tj_pows(i, -2.0) == NULL, "pows", "-2 on i32", "negative power");
    BAD(c, tj_softmax(i, "a") == NULL, "softmax", "i32");
    BAD(c, tj_log_softmax(i, "a") == NULL, "softmax", "i32");
    BAD(c, tj_layer_norm(i, "a", 1e-5) == NULL, "layer_norm", "i32");
    BAD(c, tj_mean(i, "a") == NULL, "mean", "i32");
    BAD(c, tj_dropout(i, 1, 0.5) == NULL, "dropout", "i32");
    BAD(c, tj_uniform(g, 1, TJ_I32, "a=4") == NULL, "uniform", "i32");
    BAD(c, tj_normal(g, 1, TJ_I32, "a=4") == NULL, "normal", "i32");
    BAD(c, tj_select(x, x, x) == NULL, "select", "f32");
    BAD(c, tj_select(i, x, tj_cast(x, TJ_F64)) == NULL, "select", "f32", "f64");
    BAD(c, tj_take(x, "a", tj_cast(i, TJ_F32)) == NULL, "take", "f32");
    BAD(c, tj_one_hot(tj_cast(i, TJ_F32), "v=4", TJ_F32) == NULL, "one_hot", "i32 indices", "f32[a=4]");
    BAD(c, tj_one_hot(i, "v=4", (tj_dtype)8) == NULL, "one_hot", "dtype 8");
    BAD(c, tj_cross_entropy(tj_cast(x, TJ_I32), tj_index(i, "a", 0), "b", NULL) == NULL, "cross_entropy", "i32");
    BAD(c, tj_cross_entropy(x, tj_cast(tj_sum(x, "b"), TJ_F32), "b", "a") == NULL, "cross_entropy", "f32");
    BAD(c, tj_dot(x, tj_cast(k, TJ_F64), "b") == NULL, "dot", "f32", "f64");
    BAD(c, tj_muls(i, 0.5) == NULL, "muls", "0.5", "i32[a=4]"); /* multiplied by 0 */
    BAD(c, tj_adds(i, 1e10) == NULL, "adds", "1e+10", "i32[a=4]");
    BAD(c, tj_adds(i, NAN) == NULL, "adds", "nan");
    WORKS(c, tj_muls(i, -3.0) != NULL && tj_adds(i, 2147483647.0) != NULL);
    /* the same for the other constants of i32 values (they became 2, INT32_MAX, 0 silently) */
    BAD(c, tj_scalar(g, TJ_I32, 2.5) == NULL, "fill", "2.5", "i32");
    BAD(c, tj_fill(g, TJ_I32, "a=2", 1e20) == NULL, "fill", "1e+20", "i32");
    BAD(c, tj_fill(g, TJ_I32, "a=2", NAN) == NULL, "fill", "nan");
    BAD(c, tj_pad(i, "a", 1, 1, 0.5) == NULL, "pad", "0.5", "i32[a=4]");
    BAD(c, tj_causal_mask(tj_broadcast(i, "a=4 q=4"), "a", "q", -INFINITY) == NULL, "causal_mask", "-inf", "i32[a=4,q=4]");
    BAD(c, tj_full(c, TJ_I32, "a=2", 0.5) == NULL, "tj_full", "0.5", "i32");
    WORKS(c, tj_fill(g, TJ_I32, "a=2", -2147483648.0) != NULL && tj_pad(i, "a", 1, 0, -1) != NULL && tj_pad(x, "a", 1, 0, NAN) != NULL);
    /* shape arguments that are NaN, infinite or out of range */
    BAD(c, tj_pows(x, NAN) == NULL, "pows", "nan");
    BAD(c, tj_pows(x, INFINITY) == NULL, "pows", "inf");
    BAD(c, tj_dropout(x, 1, -0.1) == NULL, "dropout", "-0.1");
    BAD(c, tj_dropout(x, 1, 1.0) == NULL, "dropout", "1");
    BAD(c, tj_dropout(x, 1, NAN) == NULL, "dropout", "nan");
    WORKS(c, tj_layer_norm(x, "b", 0.0) != NULL); /* as in JAX */
    BAD(c, tj_layer_norm(x, "b", -1e-5) == NULL, "layer_norm", "eps");
    BAD(c, tj_layer_norm(x, "b", NAN) == NULL, "layer_norm", "eps");
    BAD(c, tj_layer_norm(x, "b", INFINITY) == NULL, "layer_norm", "eps");
    /* broadcasting by name: one name, two sizes */
    BAD(c, tj_add(x, y) == NULL, "add", "'a'", "4", "3");
    BAD(c, tj_max2(x, tj_rename(k, "n", "a")) == NULL, "max", "'a'", "4", "5");
    BAD(c, tj_select(tj_cast(tj_index(y, "b", 0), TJ_I32), x, x) == NULL, "select", "'a'");
    /* reductions */
    BAD(c, tj_sum(x, "c") == NULL, "sum", "'c'");
    BAD(c, tj_sum(x, "a a") == NULL, "sum", "'a'");
    BAD(c, tj_max(x, "a c") == NULL, "max", "'c'");
    BAD(c, tj_mean(x, "b b") == NULL, "mean", "'b'");
    BAD(c, tj_sum(x, "a-b") == NULL, "sum", "-");
    /* dot */
    BAD(c, tj_dot(x, k, "n") == NULL, "dot", "'n'");
    BAD(c, tj_dot(x, k, "c") == NULL, "dot", "'c'");
    BAD(c, tj_dot(x, k2, "b") == NULL, "dot", "'b'", "6", "7");
    BAD(c, tj_dot(x, tj_rename(k, "n", "a"), "b") == NULL, "dot", "'a'", "4", "5");
    BAD(c, tj_dot(x, k, "b b") == NULL, "dot", "'b'");
    /* shape ops */
    BAD(c, tj_rename(x, "a", "b") == NULL, "rename", "'b'");
    BAD(c, tj_rename(x, "c", "d") == NULL, "rename", "'c'");
    BAD(c, tj_rename(x, "a", "c d") == NULL, "rename", "c d");
    BAD(c, tj_rename(x, "a", "") == NULL, "rename");
    BAD(c, tj_rename(x, "a b", "c") == NULL, "rename", "a b");
    BAD(c, tj_transpose(x, "a") == NULL, "transpose", "\"a\" names 1 axes", "has 2");
    BAD(c, tj_transpose(x, "b a c") == NULL, "transpose", "'c'");
    BAD(c, tj_transpose(x, "a a") == NULL, "transpose", "'a'");
    BAD(c, tj_split(x, "b", "p=4 q=2") == NULL, "split", "'b'", "6");
    BAD(c, tj_split(x, "b", "p=0 q=0") == NULL, "split", "p=0 q=0");
    BAD(c, tj_split(x, "b", "p=0 q=4") == NULL, "split", "'b'", "6", "4");
    BAD(c, tj_split(x, "b", "p=-2 q=-3") == NULL, "split", "'p'");
    BAD(c, tj_split(x, "b", "a=2 q=3") == NULL, "split", "'a'");
    BAD(c, tj_split(x, "b", "p=2 p=3") == NULL, "split", "'p'");
    BAD(c, tj_split(x, "c", "p=2 q=3") == NULL, "split", "'c'");
    BAD(c, tj_split(x, "a b", "p=2 q=12") == NULL, "split", "a b");
    BAD(c, tj_merge(x, "b a", "m") == NULL, "merge", "\"b a\"", "adjacent");
    BAD(c, tj_merge(tj_broadcast(x, "a=4 b=6 c=2"), "a c", "m") == NULL, "merge", "\"a c\"", "adjacent");
    BAD(c, tj_merge(x, "a c", "m") == NULL, "merge", "'c'");
    BAD(c, tj_merge(x, "a a", "m") == NULL, "merge", "\"a a\"");
    BAD(c, tj_merge(tj_broadcast(x, "a=4 b=6 c=2"), "a b", "c") == NULL, "merge", "'c'");
    BAD(c, tj_merge(x, "a b", "m n") == NULL, "merge", "m n");
    BAD(c, tj_merge(x, "a b", "m=24") == NULL, "merge", "'='");
    BAD(c, tj_slice(x, "a", -1, 2) == NULL, "slice", "'a'", "-1");
    BAD(c, tj_slice(x, "a", 0, 5) == NULL, "slice", "'a'", "5");
    BAD(c, tj_slice(x, "a", 3, 1) == NULL, "slice", "'a'", "3", "1");
    BAD(c, tj_slice(x, "a", 2, 2) == NULL, "slice", "'a'", "2");
    BAD(c, tj_slice(x, "a", INT64_MIN, 1) == NULL, "slice", "'a'");
    BAD(c, tj_slice(x, "a", 1, INT64_MAX) == NULL, "slice", "'a'");
    BAD(c, tj_slice(x, "c", 0, 1) == NULL, "slice", "'c'");
    BAD(c, tj_index(x, "a", 4) == NULL, "index", "'a'", "4");
    BAD(c, tj_index(x, "a", -1) == NULL, "index", "'a'", "-1");
    BAD(c, tj_index(x, "a", INT64_MIN) == NULL, "index", "'a'");
    BAD(c, tj_index(x, "c", 0) == NULL, "index", "'c'");
    BAD(c, tj_pad(x, "a", -5, 0, 0.0) == NULL, "pad", "'a'", "-5");
    BAD(c, tj_pad(x, "a", 0, INT64_MIN, 0.0) == NULL, "pad", "'a'");
    BAD(c, tj_pad(x, "a", INT64_MIN, INT64_MIN, 0.0) == NULL, "pad", "'a'");
    BAD(c, tj_pad(x, "c", 1, 1, 0.0) == NULL, "pad", "'c'");
    xs[0] = x; xs[1] = y; xs[2] = tj_cast(x, TJ_F64);
    BAD(c, tj_concat(0, xs, "a") == NULL, "concat", "0");
    BAD(c, tj_concat(-1, xs, "a") == NULL, "concat", "-1");
    BAD(c, tj_concat(2, xs, "b") == NULL, "concat", "a=3", "a=4", "'b'");
    BAD(c, tj_concat(3, xs, "a") == NULL && tj_status_of(c) == TJ_ERR_DTYPE, "concat along 'a'", "dtypes differ", "input 2 is f64 (f64[a=4,b=6])",
        "input 0 is f32 (f32[a=4,b=6])", "cast one");
    xs[1] = tj_cast(y, TJ_I32); /* a dtype mismatch is told before a shape one */
    BAD(c, tj_concat(2, xs, "b") == NULL && tj_status_of(c) == TJ_ERR_DTYPE, "concat along 'b'", "input 1 is i32", "input 0 is f32");
    xs[1] = y;
    BAD(c, tj_concat(2, xs, "c") == NULL, "concat", "'c'");
    xs[1] = tj_rename(y, "b", "q");
    BAD(c, tj_concat(2, xs, "a") == NULL, "concat", "q=6", "b=6");
    BAD(c, tj_broadcast(x, "a=4") == NULL, "broadcast", "f32[a=4,b=6] does not fit in f32[a=4]");
    BAD(c, tj_broadcast(x, "a=4 b=5") == NULL, "broadcast", "b=6", "b=5");
    BAD(c, tj_broadcast(x, "a=4 b=6 c=0") == NULL, "broadcast", "'c'");
    BAD(c, tj_broadcast(x, "a=4 b=6 b=6") == NULL, "broadcast", "'b'");
    /* indexing */
    BAD(c, tj_take(x, "c", i) == NULL, "take", "'c'");
    BAD(c, tj_take(k, "n", tj_cast(tj_broadcast(i, "a=4 b=6"), TJ_I32)) == NULL, "take", "'b'");
    BAD(c, tj_one_hot(i, "v", TJ_F32) == NULL, "one_hot", "v");
    BAD(c, tj_one_hot(i, "v=0", TJ_F32) == NULL, "one_hot", "'v'");
    BAD(c, tj_one_hot(i, "v=2 w=2", TJ_F32) == NULL, "one_hot", "v=2 w=2");
    BAD(c, tj_one_hot(i, "a=4", TJ_F32) == NULL, "one_hot", "they lack", "i32[a=4]", "\"a=4\"");
    /* neural-network ops */
    BAD(c, tj_causal_mask(x, "a", "a", 0.0) == NULL, "causal_mask", "'a'");
    BAD(c, tj_causal_mask(x, "a", "c", 0.0) == NULL, "causal_mask", "'c'");
    BAD(c, tj_softmax(x, "c") == NULL, "softmax", "'c'");
    BAD(c, tj_softmax(x, "a b") == NULL, "softmax", "a b");
    BAD(c, tj_layer_norm(x, "c", 1e-5) == NULL, "layer_norm", "'c'");
    BAD(c, tj_cross_entropy(x, tj_cast(tj_sum(x, "b"), TJ_I32), "c", "a") == NULL, "cross_entropy", "'c'");
    BAD(c, tj_cross_entropy(x, i, "b", "b") == NULL, "cross_entropy mean_axes", "'b'");
    BAD(c, tj_cross_entropy(x, i, "b", "c") == NULL, "cross_entropy mean_axes", "'c'");
    BAD(c, tj_cross_entropy(x, tj_cast(tj_sum(y, "b"), TJ_I32), "b", "a") == NULL, "cross_entropy", "i32[a=3]", "f32[a=4,b=6]");
    BAD(c, tj_cross_entropy(x, tj_cast(tj_sum(k, "b"), TJ_I32), "b", "a") == NULL, "cross_entropy", "i32[n=5]");
    BAD(c, tj_cross_entropy(x, tj_cast(x, TJ_I32), "b", "a") == NULL, "cross_entropy", "'b'");
    /* constants */
    BAD(c, tj_arange(g, TJ_F32, "a=3", "b") == NULL, "arange", "'b'");
    BAD(c, tj_arange(g, TJ_F32, "a=3 b=2", "a b") == NULL, "arange", "a b");
    BAD(c, tj_fill(g, TJ_F32, "a=3 a=3", 0.0) == NULL, "fill", "'a'");
    BAD(c, tj_uniform(g, 1, TJ_F32, "a=0") == NULL, "uniform", "'a'");
    /* names */
    BAD(c, tj_checkpoint_name(x, "") == NULL, "checkpoint_name", "empty");
    BAD(c, tj_checkpoint_name(x, "attn out") == NULL, "checkpoint_name", "\"attn out\"", "space");
    /* mesh collectives outside shard_map, and a constraint without a mesh */
    BAD(c, tj_psum(x, "data") == NULL, "psum", "shard_map");
    BAD(c, tj_all_gather(x, "data", "a") == NULL, "all_gather", "shard_map");
    BAD(c, tj_axis_index(g, "data") == NULL, "axis_index", "shard_map");
    BAD(c, tj_with_sharding_constraint(x, "a:data") == NULL, "with_sharding_constraint", "'data'");
    /* values of another traced function: a program traced while this one
       is (in this context and in another) sees x, which is not its own */
    g_outer_x = x;
    {
        tj_prog *p = tj_jit(c, "inner", inner_fn, NULL, (const tj_tree *)u, NULL);
        WORKS(c, p != NULL);
        tj_prog_free(p);
    }
    BAD(c, tj_jit(c, "inner", inner_fn, &g_outer_x, (const tj_tree *)u, NULL) == NULL, "'o'", "another traced function");
    {
        tj_ctx *c2 = tj_ctx_new();
        tj_tree *in2 = tj_tree_new(c2);
        tj_prog *p2;
        tj_tree_set_array(in2, "x", tj_zeros(c2, TJ_F32, "a=4 b=6"));
        p2 = tj_jit(c2, "inner2", inner_fn, NULL, in2, NULL);
        WORKS(c2, p2 != NULL); /* its errors were checked and cleared inside */
        tj_prog_free(p2);
        tj_tree_free(in2);
        tj_ctx_free(c2);
    }
    g_outer_x = NULL;
    tj_clear_error(c);
    tj_tree_set_v(out, "z", tj_add(tj_sum(x, "a b"), s));
}

/* ------------------------------------- autodiff and control flow */
static int g_body_kind; /* which wrong body the scan cases trace */
static void scan_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    (void)u; (void)x;
    switch (g_body_kind) {
    case 0: carry_out[0] = NULL; break;                                  /* no carry returned */
    case 1: carry_out[0] = tj_broadcast(carry[0], "a=4 b=6 c=2"); break; /* carry grows an axis */
    case 2: carry_out[0] = tj_cast(carry[0], TJ_F64); break;             /* carry changes dtype */
    case 3: carry_out[0] = tj_rename(carry[0], "b", "q"); break;          /* carry renames an axis */
    case 4: carry_out[0] = carry[0]; y[0] = NULL; break;                 /* no y returned */
    case 5: carry_out[0] = tj_scalar(g, TJ_F32, 1.0); break;              /* carry loses its axes */
    default: carry_out[0] = carry[0]; if (y) y[0] = carry[0]; break;
    }
}
static tj_v g_leaked; /* a body value a body function hands out through a global */
static void leaky_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    (void)g; (void)x; (void)y; (void)u;
    carry_out[0] = g_leaked = tj_tanh(carry[0]);
}
static void region_null(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)in; (void)u;
    out[0] = NULL;
}
static void fwd_fn(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    (void)g;
    out[0] = tj_muls(in[0], 2.0);
    if (u) res[0] = NULL; /* a residual fwd promised but did not give */
    else res[0] = in[0];
}
static void bwd_fn(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *u) {
    (void)g; (void)u;
    gin[0] = tj_sum(tj_mul(ct[0], res[0]), "a"); /* the wrong shape: 'a' summed away */
}
static void ad_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v x = tj_tree_v(in, "x"), i = tj_tree_v(in, "i"), loss = tj_sum(tj_mul(x, x), "a b"), gx = NULL, fin = NULL, ys[2] = {NULL, NULL}, o = NULL;
    tj_v xs2[2], wrt[2];
    tj_policy pol;
    (void)u;
    /* grad */
    BAD(c, tj_grad(tj_mul(x, x), 1, &x, &gx) != TJ_OK, "grad", "scalar", "a=4");
    BAD(c, tj_grad(loss, -1, &x, &gx) != TJ_OK, "-1");
    BAD(c, tj_grad(loss, 1, &i, &gx) != TJ_OK, "vjp", "i32[a=4]", "not a float");
    BAD(c, tj_grad(tj_cast(tj_sum(i, "a"), TJ_I32), 1, &x, &gx) != TJ_OK, "vjp", "i32[]", "not a float");
    BAD(c, tj_vjp(0, &loss, NULL, 1, &x, &gx) != TJ_OK, "vjp", "0");
    BAD(c, tj_vjp(1, &x, &loss, 1, &x, &gx) != TJ_OK, "vjp", "a=4");
    wrt[0] = tj_cast(x, TJ_F64);
    BAD(c, tj_vjp(1, &x, wrt, 1, &x, &gx) != TJ_OK, "vjp", "f64");
    /* custom_vjp */
    BAD(c, tj_custom_vjp(fwd_fn, bwd_fn, &g_body_kind, 1, &x, 1, &o, 1) != TJ_OK, "custom_vjp", "residual 0");
    BAD(c, tj_custom_vjp(fwd_fn, bwd_fn, NULL, 0, &x, 1, &o, 1) != TJ_OK, "custom_vjp", "0");
    BAD(c, tj_custom_vjp(fwd_fn, bwd_fn, NULL, 1, &x, -1, &o, 1) != TJ_OK, "custom_vjp", "-1");
    BAD(c, tj_custom_vjp(fwd_fn, bwd_fn, NULL, 1, &x, 1, &o, -2) != TJ_OK, "custom_vjp", "-2");
    /* bwd's gradient lacks axis 'a': the message names the custom_vjp's line */
    BAD(c, tj_custom_vjp(fwd_fn, bwd_fn, NULL, 1, &x, 1, &o, 1) != TJ_OK || tj_grad(tj_sum(o, "a b"), 1, &x, &gx) != TJ_OK, "custom_vjp's bwd", "f32[b=6]", "f32[a=4,b=6]");
    /* scan */
    for (g_body_kind = 0; g_body_kind < 6; g_body_kind++) {
        static const char *want[6] = {"carry 0", "carry 0", "carry 0", "carry 0", "y 0", "carry 0"};
        if (g_body_kind == 4) BAD(c, tj_scan(scan_body, NULL, "l=3", 1, &x, 0, NULL, 1, &fin, ys, NULL) != TJ_OK, "scan", want[g_body_kind]);
        else BAD(c, tj_scan(scan_body, NULL, "l=3", 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", want[g_body_kind]);
    }
    g_body_kind = 9;
    xs2[0] = x;
    xs2[1] = tj_slice(x, "a", 0, 3);
    BAD(c, tj_scan(scan_body, NULL, "a", 1, &x, 2, xs2, 0, &fin, NULL, NULL) != TJ_OK, "scan", "x 1", "axis 'a'", "3, not 4");
    BAD(c, tj_scan(scan_body, NULL, "a=3", 1, &x, 1, xs2, 0, &fin, NULL, NULL) != TJ_OK, "scan", "x 0", "axis 'a'", "4, not 3");
    BAD(c, tj_scan(scan_body, NULL, "l", 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", "'l'");
    BAD(c, tj_scan(scan_body, NULL, "l", 1, &x, 1, &x, 0, &fin, NULL, NULL) != TJ_OK, "scan", "'l'");
    BAD(c, tj_scan(scan_body, NULL, "l=0", 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", "'l'");
    BAD(c, tj_scan(scan_body, NULL, "l=-2", 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", "'l'");
    BAD(c, tj_scan(scan_body, NULL, "l=4294967297", 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", "4294967297 iterations"); /* ran once */
    BAD(c, tj_scan(scan_body, NULL, "l=2 m=2", 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", "l=2 m=2");
    BAD(c, tj_scan(scan_body, NULL, "l=2", -1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", "-1");
    BAD(c, tj_scan(scan_body, NULL, "l=2", 1, &x, -1, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", "-1");
    BAD(c, tj_scan(scan_body, NULL, "a=4", 1, &x, 0, NULL, 1, &fin, ys, NULL) != TJ_OK, "scan", "'a'");
    pol.kind = (tj_policy_kind)42;
    BAD(c, tj_scan(scan_body, NULL, "l=2", 1, &x, 0, NULL, 0, &fin, NULL, &pol) != TJ_OK, "scan", "policy", "42");
    pol = tj_save_and_offload_only_these_names("", "h");
    pol.offload_dst = "disk";
    BAD(c, tj_scan(scan_body, NULL, "l=2", 1, &x, 0, NULL, 0, &fin, NULL, &pol) != TJ_OK, "scan", "disk");
    /* the same mistakes in a reverse scan: the same messages, naming it */
    for (g_body_kind = 0; g_body_kind < 6; g_body_kind++) {
        static const char *want[6] = {"carry 0", "carry 0", "carry 0", "carry 0", "y 0", "carry 0"};
        if (g_body_kind == 4) BAD(c, tj_scan_reverse(scan_body, NULL, "l=3", 1, &x, 0, NULL, 1, &fin, ys, NULL) != TJ_OK, "reverse scan", want[g_body_kind]);
        else BAD(c, tj_scan_dir(scan_body, NULL, "l=3", 1, &x, 0, NULL, 0, &fin, NULL, NULL, 1) != TJ_OK, "reverse scan", want[g_body_kind]);
    }
    g_body_kind = 9;
    BAD(c, tj_scan_reverse(scan_body, NULL, "a", 1, &x, 2, xs2, 0, &fin, NULL, NULL) != TJ_OK, "reverse scan", "x 1", "axis 'a'", "3, not 4");
    BAD(c, tj_scan_reverse(scan_body, NULL, "a=3", 1, &x, 1, xs2, 0, &fin, NULL, NULL) != TJ_OK, "reverse scan", "x 0", "axis 'a'", "4, not 3");
    BAD(c, tj_scan_reverse(scan_body, NULL, "l", 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "reverse scan", "'l'");
    BAD(c, tj_scan_reverse(scan_body, NULL, "l", 1, &x, 1, &x, 0, &fin, NULL, NULL) != TJ_OK, "reverse scan", "'l'");
    BAD(c, tj_scan_reverse(scan_body, NULL, "l=0", 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "reverse scan", "'l'");
    BAD(c, tj_scan_reverse(scan_body, NULL, "l=4294967297", 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "reverse scan", "4294967297 iterations");
    BAD(c, tj_scan_reverse(scan_body, NULL, "l=2 m=2", 1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "reverse scan", "l=2 m=2");
    BAD(c, tj_scan_reverse(scan_body, NULL, "l=2", -1, &x, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "reverse scan", "-1");
    BAD(c, tj_scan_reverse(scan_body, NULL, "a=4", 1, &x, 0, NULL, 1, &fin, ys, NULL) != TJ_OK, "reverse scan", "'a'");
    BAD(c, tj_scan_reverse(scan_body, NULL, "l=2", 0, NULL, 0, NULL, 0, NULL, NULL, NULL) != TJ_OK, "reverse scan", "0 carries and 0 xs");
    pol.kind = (tj_policy_kind)42;
    BAD(c, tj_scan_reverse(scan_body, NULL, "l=2", 1, &x, 0, NULL, 0, &fin, NULL, &pol) != TJ_OK, "scan", "policy", "42");
    {
        tj_v nul[1] = {NULL};
        BAD(c, tj_scan_reverse(scan_body, NULL, "a", 1, &x, 1, nul, 0, &fin, NULL, NULL) != TJ_OK, "reverse scan", "operand 1 is NULL");
    }
    /* a value of a body whose tracing is over (these ops went into the finished body) */
    WORKS(c, tj_scan(leaky_body, NULL, "l=2", 1, &x, 0, NULL, 0, &fin, NULL, NULL) == TJ_OK);
    BAD(c, tj_add(x, g_leaked) == NULL, "add", "body that has finished tracing");
    BAD(c, tj_grad(tj_sum(g_leaked, "a b"), 1, &x, &gx) != TJ_OK, "sum", "body that has finished tracing");
    BAD(c, tj_scalar(tj_graph_of(g_leaked), TJ_F32, 1.0) == NULL, "body that has finished tracing");
    /* checkpoint */
    BAD(c, tj_checkpoint(region_null, NULL, 1, &x, 1, &o, NULL) != TJ_OK, "checkpoint", "output 0");
    BAD(c, tj_checkpoint(region_null, NULL, -1, &x, 1, &o, NULL) != TJ_OK, "checkpoint", "-1");
    BAD(c, tj_checkpoint(region_null, NULL, 1, &x, 0, &o, NULL) != TJ_OK, "checkpoint", "0");
    /* a NULL the caller passed (no earlier op failed): an error of its own (these failed with no message) */
    {
        tj_v nul[2] = {NULL, NULL}, two[2];
        two[0] = x, two[1] = NULL;
        BAD(c, tj_scan(scan_body, NULL, "l=2", 1, nul, 0, NULL, 0, &fin, NULL, NULL) != TJ_OK, "scan", "operand 0 is NULL");
        BAD(c, tj_scan(scan_body, NULL, "a", 1, &x, 1, nul, 0, &fin, NULL, NULL) != TJ_OK, "scan", "operand 1 is NULL");
        BAD(c, tj_grad(loss, 1, nul, &gx) != TJ_OK, "vjp", "wrt 0 is NULL");
        BAD(c, tj_vjp(1, &loss, nul, 1, &x, &gx) != TJ_OK, "vjp", "cotangent 0 is NULL");
        BAD(c, tj_grad(NULL, 1, &x, &gx) != TJ_OK, "vjp", "output 0 NULL");
        BAD(c, tj_checkpoint(region_null, NULL, 2, two, 1, &o, NULL) != TJ_OK, "checkpoint", "input 1 is NULL");
        BAD(c, tj_custom_vjp(fwd_fn, bwd_fn, NULL, 2, two, 1, &o, 1) != TJ_OK, "custom_vjp", "operand 1 is NULL");
    }
    /* shard_map without a mesh axis of that name */
    {
        const char *sp[1] = {"a:data"}, *rep[1] = {""};
        BAD(c, tj_shard_map(region_null, NULL, 1, &x, sp, 1, &o, rep, 1) != TJ_OK, "shard_map", "no mesh");
        BAD(c, tj_shard_map(region_null, NULL, -1, &x, rep, 1, &o, rep, 1) != TJ_OK, "shard_map", "-1");
    }
    g_body_kind = 9;
    tj_clear_error(c);
    tj_tree_set_v(out, "loss", loss);
}

/* shard_map and specs on a mesh (4 devices, data=2 model=2) */
static void smap_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g;
    out[0] = u ? NULL : in[0];
}
static void mesh_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v x = tj_tree_v(in, "x"), o = NULL; /* f32[a=4, b=6] */
    const char *rep[1] = {""}, *sp[1];
    int pairs[4];
    (void)u;
    sp[0] = "a:data";
    BAD(c, tj_shard_map(smap_body, &o, 1, &x, sp, 1, &o, sp, 1) != TJ_OK, "shard_map", "output 0");
    sp[0] = "b:data+model";
    BAD(c, tj_shard_map(smap_body, NULL, 1, &x, sp, 1, &o, sp, 1) != TJ_OK, "shard_map", "'b'", "6");
    sp[0] = "a:nosuch";
    BAD(c, tj_shard_map(smap_body, NULL, 1, &x, sp, 1, &o, rep, 1) != TJ_OK, "shard_map", "'nosuch'");
    sp[0] = "a:data b:data";
    BAD(c, tj_shard_map(smap_body, NULL, 1, &x, sp, 1, &o, rep, 1) != TJ_OK, "shard_map", "'data'");
    sp[0] = "a:data";
    BAD(c, tj_shard_map(smap_body, NULL, 1, &x, sp, 1, &o, rep, 1) != TJ_OK, "shard_map", "data");
    {
        const char *in1[1] = {"a:data"}, *o1[1];
        o1[0] = "c:data";
        BAD(c, tj_shard_map(smap_body, NULL, 1, &x, in1, 1, &o, o1, 1) != TJ_OK, "shard_map out_specs[0]", "'c'");
        o1[0] = "a:data b:data";
        BAD(c, tj_shard_map(smap_body, NULL, 1, &x, in1, 1, &o, o1, 1) != TJ_OK, "shard_map out_specs[0]", "'data'", "twice");
        o1[0] = "a:nosuch";
        BAD(c, tj_shard_map(smap_body, NULL, 1, &x, in1, 1, &o, o1, 1) != TJ_OK, "shard_map out_specs[0]", "'nosuch'");
    }
    BAD(c, tj_with_sharding_constraint(x, "a:nosuch") == NULL, "with_sharding_constraint", "'nosuch'");
    BAD(c, tj_with_sharding_constraint(x, "c:data") == NULL, "with_sharding_constraint", "'c'");
    BAD(c, tj_with_sharding_constraint(x, "a:data b:data") == NULL, "with_sharding_constraint", "'data'");
    BAD(c, tj_with_sharding_constraint(x, "a:model+model") == NULL, "with_sharding_constraint", "'model'");
    BAD(c, tj_with_sharding_constraint(x, "b:data+model") == NULL, "with_sharding_constraint", "'b'", "6");
    pairs[0] = 0; pairs[1] = 5; pairs[2] = 1; pairs[3] = 0;
    BAD(c, tj_ppermute(x, "data", 2, pairs) == NULL, "ppermute");
    /* the mesh, devices and backend stay while tracing (the program compiled, then every run said "another mesh") */
    BAD(c, tj_set_mesh(c, "data=4 model=1") != TJ_OK, "tj_set_mesh", "being traced");
    WORKS(c, tj_set_mesh(c, "data=2 model=2") == TJ_OK); /* the same mesh: nothing changes */
    BAD_NL(c, tj_set_devices(c, 2) != TJ_OK, "tj_set_devices", "being traced");
    {
        tj_backend *ds = tj_devsim_backend();
        tj_set_backend(c, ds);
        BAD_NL(c, tj_status_of(c) != TJ_OK, "tj_set_backend", "being traced");
        tj_devsim_backend_free(ds);
    }
    tj_clear_error(c);
    tj_tree_set_v(out, "y", tj_adds(x, 1.0));
}
static void ppermute_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    int pairs[4];
    (void)u;
    pairs[0] = 0; pairs[1] = 2; pairs[2] = 1; pairs[3] = 0; /* rank 2 of 2 */
    BAD(c, tj_ppermute(in[0], "data", 2, pairs) == NULL, "ppermute", "2");
    pairs[0] = 0; pairs[1] = 1; pairs[2] = 0; pairs[3] = 0; /* rank 0 sends twice */
    BAD(c, tj_ppermute(in[0], "data", 2, pairs) == NULL, "ppermute", "0");
    pairs[0] = 0; pairs[1] = 1; pairs[2] = 1; pairs[3] = 1; /* rank 1 receives twice */
    BAD(c, tj_ppermute(in[0], "data", 2, pairs) == NULL, "ppermute", "1");
    BAD(c, tj_ppermute(in[0], "data", -1, pairs) == NULL, "ppermute", "-1");
    BAD(c, tj_psum(in[0], "nosuch") == NULL, "psum", "'nosuch'");
    BAD(c, tj_psum(in[0], "data data") == NULL, "psum", "'data'");
    BAD(c, tj_all_gather(in[0], "data", "c") == NULL, "all_gather", "'c'");
    BAD(c, tj_psum_scatter(in[0], "data model", "b") == NULL, "reduce_scatter", "'b'", "size 3", "4 devices");
    BAD(c, tj_all_to_all(in[0], "data", "a", "a") == NULL, "all_to_all", "split and concat axes", "must differ");
    BAD(c, tj_all_to_all(in[0], "data", "c", "a") == NULL, "all_to_all", "'c'");
    BAD(c, tj_axis_index(g, "nosuch") == NULL, "axis_index", "'nosuch'");
    /* NULL axes and pairs (all_gather indexed the axis -1: UBSan; ppermute said "pair 0 (-1 -> -1)") */
    BAD(c, tj_all_gather(in[0], "data", NULL) == NULL, "all_gather", "axis argument is NULL", "f32[a=4,b=3]");
    BAD(c, tj_psum_scatter(in[0], "data", NULL) == NULL, "psum_scatter", "axis argument is NULL");
    BAD(c, tj_all_to_all(in[0], "data", "a", NULL) == NULL, "all_to_all", "concat axis argument is NULL");
    BAD(c, tj_all_to_all(in[0], "data", NULL, "a") == NULL, "all_to_all", "split axis argument is NULL");
    BAD(c, tj_ppermute(in[0], "data", 2, NULL) == NULL, "ppermute", "2 pairs", "pairs is NULL");
    {   /* a mesh-axis list is read whole, in place (it was copied into 256
           bytes: past them "nosuch" was cut off and "data" alone passed) */
        char lng[400];
        memset(lng, ' ', sizeof lng);
        memcpy(lng, "data", 4);
        memcpy(lng + 300, "nosuch", 6);
        lng[306] = 0;
        BAD(c, tj_psum(in[0], lng) == NULL, "psum", "'nosuch' is not an axis of the mesh", "mesh axes: data+model");
        memcpy(lng + 300, "+data ", 6);
        BAD(c, tj_all_gather(in[0], lng, "a") == NULL, "all_gather", "'data' is named twice");
        BAD(c, tj_axis_index(g, " + ,") == NULL, "axis_index", "no mesh axes given");
        BAD(c, tj_psum(in[0], "data;model") == NULL, "psum", "bad character ';' in axis list");
        BAD(c, tj_pmax(in[0], NULL) == NULL, "pmax", "axis-name argument is NULL");
    }
    tj_clear_error(c);
    out[0] = in[0];
}
static void smap_ops_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_tree_v(in, "x"), o = NULL; /* f32[a=4, b=6] */
    const char *sp[1] = {"b:data"};
    (void)u; (void)g;
    tj_shard_map(ppermute_body, NULL, 1, &x, sp, 1, &o, sp, 1);
    tj_tree_set_v(out, "o", o);
}

/* ------------------------------------------------------- attention
   q f32[b=2,t=3,h=4,u=1], k f32[b=2,s=5,h=4,u=1], v f32[b=2,s=5,h=3,u=1]
   (op_inputs); the wrong ones are made from them. */
static tj_v attn_grow(tj_v x) { /* x with axis b one longer */
    tj_v p[2];
    p[0] = x, p[1] = tj_slice(x, "b", 0, 1);
    return tj_concat(2, p, "b");
}
static tj_status attn_grad2(tj_v o, tj_v q, tj_v k, tj_v v) { /* d/dq of |d sum(o) / dq|^2 */
    tj_v w[3], g1[3], g2[1];
    tj_status s;
    w[0] = q, w[1] = k, w[2] = v;
    if ((s = tj_grad(tj_sum_all(o), 3, w, g1)) != TJ_OK) return s;
    return tj_grad(tj_sum_all(tj_mul(g1[0], g1[0])), 1, w, g2);
}
static void attn_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v q = tj_tree_v(in, "q"), k = tj_tree_v(in, "kq"), v = tj_tree_v(in, "vq");
    tj_v kb = attn_grow(k), kx = tj_index(k, "u", 0), ke = tj_broadcast(k, "b=2 s=5 h=4 u=1 c=2"); /* b=3; without u; with c */
    tj_v v4 = tj_slice(v, "s", 0, 4), vr = tj_rename(v, "s", "r"), kr = tj_rename(k, "h", "e");
    tj_v wide = tj_broadcast(tj_index(q, "h", 0), "b=2 t=3 h=257 u=1"), wk = tj_broadcast(tj_index(k, "h", 0), "b=2 s=5 h=257 u=1");
    tj_v wv = tj_broadcast(tj_index(v, "h", 0), "b=2 s=5 h=257 u=1"), kz = tj_broadcast(tj_index(k, "s", 0), "b=2 h=4 u=1 z=7");
    (void)u;
    BAD(c, tj_attention(NULL, k, v, "t", "s", "h", 0, 0) == NULL, "attention", "operand 0 is NULL");
    BAD(c, tj_attention(q, NULL, v, "t", "s", "h", 0, 0) == NULL, "attention", "operand 1 is NULL");
    BAD(c, tj_attention(q, k, NULL, "t", "s", "h", 0, 0) == NULL, "attention", "operand 2 is NULL");
    /* the axes: missing, NULL, several names in one, one axis twice */
    BAD(c, tj_attention(q, k, v, NULL, "s", "h", 0, 0) == NULL, "attention (q) qpos", "NULL");
    BAD(c, tj_attention(q, k, v, "t", "s", NULL, 0, 0) == NULL, "attention (q) dim", "NULL");
    BAD(c, tj_attention(q, k, v, "x", "s", "h", 0, 0) == NULL, "attention (q)", "'x'", "f32[b=2,t=3,h=4,u=1]");
    BAD(c, tj_attention(q, k, v, "t", "x", "h", 0, 0) == NULL, "attention (k)", "'x'", "f32[b=2,s=5,h=4,u=1]");
    BAD(c, tj_attention(q, k, vr, "t", "s", "h", 0, 0) == NULL, "attention (v)", "'s'", "f32[b=2,r=5,h=3,u=1]");
    BAD(c, tj_attention(q, kr, v, "t", "s", "h", 0, 0) == NULL, "attention (k)", "'h'", "f32[b=2,s=5,e=4,u=1]");
    BAD(c, tj_attention(q, k, v, "t h", "s", "h", 0, 0) == NULL, "attention (q)", "exactly one axis", "\"t h\"");
    BAD(c, tj_attention(q, k, v, "t", "s", "", 0, 0) == NULL, "attention (q)", "exactly one axis");
    BAD(c, tj_attention(q, q, q, "t", "t", "t", 0, 0) == NULL, "attention", "('t', 't')", "contracted axis 't'", "must differ");
    BAD(c, tj_attention(q, k, v, "t", "s", "t", 0, 0) == NULL, "attention (k)", "'t'", "f32[b=2,s=5,h=4,u=1]"); /* (q's dim: k lacks it) */
    BAD(c, tj_attention(q, k, v, "t", "h", "h", 0, 0) == NULL, "attention", "('t', 'h')", "contracted axis 'h'", "must differ");
    /* dtypes */
    BAD(c, tj_attention(q, tj_cast(k, TJ_F64), v, "t", "s", "h", 0, 0) == NULL, "attention", "float dtype", "f32[b=2,t=3,h=4,u=1]", "f64[b=2,s=5,h=4,u=1]");
    BAD(c, tj_attention(q, k, tj_cast(v, TJ_BF16), "t", "s", "h", 0, 0) == NULL, "attention", "float dtype", "bf16[b=2,s=5,h=3,u=1]");
    BAD(c, tj_attention(tj_cast(q, TJ_I32), tj_cast(k, TJ_I32), tj_cast(v, TJ_I32), "t", "s", "h", 0, 0) == NULL, "attention", "float dtype", "i32[b=2,t=3,h=4,u=1]");
    /* batch axes: another size, one missing, one more; kpos sizes */
    BAD(c, tj_attention(q, kb, v, "t", "s", "h", 0, 0) == NULL, "attention", "k's axis 'b' is not of q's size", "f32[b=3,s=5,h=4,u=1]");
    BAD(c, tj_attention(q, k, attn_grow(v), "t", "s", "h", 0, 0) == NULL, "attention", "v's axis 'b' is not of q's size", "f32[b=3,s=5,h=3,u=1]");
    BAD(c, tj_attention(q, kx, v, "t", "s", "h", 0, 0) == NULL, "attention", "v's axis 'u' is not one of k's", "f32[b=2,s=5,h=3,u=1]");
    BAD(c, tj_attention(q, k, tj_index(v, "u", 0), "t", "s", "h", 0, 0) == NULL, "attention", "k and v must have the same batch axes", "f32[b=2,s=5,h=4,u=1]",
        "f32[b=2,s=5,h=3]");
    /* k and v with a batch axis q lacks (k and v may lack some of q's: grouped-query attention) */
    BAD(c, tj_attention(q, ke, v, "t", "s", "h", 0, 0) == NULL, "attention", "k's axis 'c' is not a batch axis of q", "f32[b=2,s=5,h=4,u=1,c=2]");
    WORKS(c, tj_attention(q, kx, tj_index(v, "u", 0), "t", "s", "h", 0, 1) != NULL); /* (shared over u) */
    /* the mask: i32, its axes q's batch axes, qpos and kpos (of their sizes), qpos and kpos apart */
    {
        tj_v m = tj_ge(tj_index(tj_dot(q, k, "h"), "u", 0), tj_scalar(g, TJ_F32, 0)); /* (b, t, s) */
        tj_v mi = tj_cast(m, TJ_I32), kt = tj_rename(k, "s", "t"), vt = tj_rename(v, "s", "t");
        WORKS(c, tj_attention_masked(q, k, v, mi, "t", "s", "h", 0, 1) != NULL);
        WORKS(c, tj_attention_masked(q, kx, tj_index(v, "u", 0), tj_index(mi, "t", 0), "t", "s", "h", 0, 0) != NULL);
        BAD(c, tj_attention_masked(q, k, v, NULL, "t", "s", "h", 0, 0) == NULL, "attention", "operand 3 is NULL");
        BAD(c, tj_attention_masked(q, k, v, tj_cast(m, TJ_F32), "t", "s", "h", 0, 0) == NULL, "attention", "mask must be i32", "f32[b=2,t=3,s=5]");
        BAD(c, tj_attention_masked(q, k, v, tj_broadcast(mi, "b=2 t=3 s=5 z=2"), "t", "s", "h", 0, 0) == NULL, "attention", "mask's axis 'z'",
            "neither a batch axis of q nor a position axis", "i32[b=2,t=3,s=5,z=2]", "f32[b=2,t=3,h=4,u=1]");
        BAD(c, tj_attention_masked(q, k, v, tj_broadcast(mi, "b=2 t=3 s=5 h=4"), "t", "s", "h", 0, 0) == NULL, "attention", "mask's axis 'h'", "the contracted axis");
        BAD(c, tj_attention_masked(q, k, v, tj_slice(mi, "s", 0, 4), "t", "s", "h", 0, 0) == NULL, "attention", "mask's axis 's'", "of another size");
        BAD(c, tj_attention_masked(q, kt, vt, tj_index(mi, "s", 0), "t", "t", "h", 0, 0) == NULL, "attention", "mask's axis 't'", "both the queries' and the keys'");
        WORKS(c, tj_attention_masked(q, kt, vt, tj_index(tj_index(mi, "s", 0), "t", 0), "t", "t", "h", 0, 0) != NULL); /* (a mask over b only) */
    }
    BAD(c, tj_attention(q, k, v4, "t", "s", "h", 0, 0) == NULL, "attention", "'s' has size 5 in k but 4 in v");
    /* kpos naming one of q's batch axes: k's 'b' would be both (this said "broadcast: ... does not fit") */
    BAD(c, tj_attention(q, kz, kz, "t", "b", "h", 0, 0) == NULL, "attention", "'b'");
    BAD(c, tj_attention(q, tj_broadcast(tj_index(k, "h", 0), "b=2 s=5 h=5 u=1"), v, "t", "s", "h", 0, 0) == NULL, "attention", "k must have", "'h' (the size of q's: 4, not 5)", "f32[b=2,s=5,h=5,u=1]");
    /* the scale; dim and dim' at most 256 */
    BAD(c, tj_attention(q, k, v, "t", "s", "h", NAN, 1) == NULL, "attention", "scale nan", "not finite", "'h'");
    BAD(c, tj_attention(q, k, v, "t", "s", "h", INFINITY, 1) == NULL, "attention", "scale inf", "not finite");
    BAD(c, tj_attention(q, k, v, "t", "s", "h", -INFINITY, 0) == NULL, "attention", "scale -inf", "not finite");
    BAD(c, tj_attention(wide, wk, v, "t", "s", "h", 0, 0) == NULL, "attention", "'h'", "257 (q)", "at most 256");
    BAD(c, tj_attention(q, k, wv, "t", "s", "h", 0, 0) == NULL, "attention", "'h'", "257 (v)", "at most 256");
    /* a second derivative (it was refused): through the composed form of the backward */
    TJT_CHECK(attn_grad2(tj_attention(q, k, v, "t", "s", "h", 0, 1), q, k, v) == TJ_OK, "attention's second derivative: %s", tj_error(c));
    tj_clear_error(c);
    tj_tree_set_v(out, "o", tj_attention(q, k, v, "t", "s", "h", 0, 1));
}
/* on the mesh data=2 model=2: inside shard_map the op is local, so q's
   batch block must have k's size; a constraint that cannot split dim' */
static void attn_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    (void)u;
    BAD(c, tj_attention(in[0], in[1], in[1], "t", "s", "h", 0, 1) == NULL, "attention", "k's axis 'b' is not of q's size", "f32[b=1,t=3,h=4,u=1]", "f32[b=2,s=5,h=4,u=1]");
    out[0] = in[0];
}
static void attn_mesh_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v x[2], o = NULL, q = tj_with_sharding_constraint(tj_tree_v(in, "q"), "b:data"), k = tj_tree_v(in, "kq"), v = tj_tree_v(in, "vq");
    const char *is[2] = {"b:data", ""}, *os[1] = {"b:data"};
    char d[128];
    (void)u;
    x[0] = q, x[1] = k;
    WORKS(c, tj_shard_map(attn_body, NULL, 2, x, is, 1, &o, os, 1) == TJ_OK);
    BAD(c, tj_with_sharding_constraint(tj_attention(q, k, v, "t", "s", "h", 0, 0), "h:data") == NULL, "with_sharding_constraint", "'h' of size 3", "data (2 devices)");
    o = tj_attention(q, k, v, "t", "s", "h", 0, 1); /* the batch axis stays split; the rest whole */
    WORKS(c, o && strcmp(tj_v_describe(o, d, sizeof d), "f32[b=2@data,u=1,t=3,h=3]") == 0);
    tj_clear_error(c);
    tj_tree_set_v(out, "o", o);
}

static tj_tree *op_inputs(tj_ctx *c) {
    tj_tree *t = tj_tree_new(c);
    tj_tree_set_array(t, "x", tj_full(c, TJ_F32, "a=4 b=6", 0.5));
    tj_tree_set_array(t, "y", tj_full(c, TJ_F32, "a=3 b=6", 0.5));
    tj_tree_set_array(t, "i", tj_iota(c, TJ_I32, "a=4", "a"));
    tj_tree_set_array(t, "k", tj_full(c, TJ_F32, "b=6 n=5", 0.5));
    tj_tree_set_array(t, "k2", tj_full(c, TJ_F32, "b=7 n=5", 0.5));
    tj_tree_set_array(t, "q", tj_full(c, TJ_F32, "b=2 t=3 h=4 u=1", 0.5)); /* attention's */
    tj_tree_set_array(t, "kq", tj_full(c, TJ_F32, "b=2 s=5 h=4 u=1", 0.25));
    tj_tree_set_array(t, "vq", tj_full(c, TJ_F32, "b=2 s=5 h=3 u=1", -0.5));
    return t;
}
/* trace fn on op_inputs; it checks its cases and must then compile */
static void trace_cases(const char *what, tj_fn fn, int devices) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in, *out;
    tj_prog *p;
    tjt_current = what;
    if (devices > 1) {
        tj_set_devices(c, devices);
        tj_set_mesh(c, "data=2 model=2");
    }
    in = op_inputs(c);
    out = tj_tree_new(c);
    p = tj_jit(c, what, fn, in, in, NULL);
    TJT_CHECK(p != NULL, "%s: tracing goes on after each cleared error: %s", what, tj_error(c));
    TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "%s: and the program runs: %s", what, tj_error(c));
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(c);
}

/* ------------------------------------------------------ jit and run */
static void two_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    tj_tree_set_v(out, "y", tj_add(tj_tree_v(in, "x"), tj_tree_v(in, "w")));
}
static void array_out_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)in; (void)u;
    tj_tree_set_array(out, "c", tj_zeros(tj_graph_ctx(g), TJ_F32, "a=2")); /* came back as the int 0 */
}
static void test_jit_run(void) {
    tj_ctx *c = tj_ctx_new(), *c2 = tj_ctx_new();
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c), *bad = tj_tree_new(c), *out2 = tj_tree_new(c2);
    tj_prog *p;
    tj_jit_opts o;
    tjt_current = "jit and run";
    tj_set_devices(c, 2);
    tj_set_mesh(c, "data=2");
    tj_tree_set_array(in, "x", tj_full(c, TJ_F32, "a=4 b=2", 1.0));
    tj_tree_set_array(in, "w", tj_full(c, TJ_F32, "b=2", 2.0));
    BAD(c, tj_jit(c, "arr", array_out_fn, NULL, in, NULL) == NULL, "jit 'arr'", "output 'c' is an array");
    o.donate = "nosuch";
    BAD(c, tj_jit(c, "two", two_fn, NULL, in, &o) == NULL, "donate", "nosuch");
        p = tj_jit(c, "two", two_fn, NULL, in, NULL);
    WORKS(c, p != NULL);
    /* the wrong arguments: count, names, shapes, dtypes, shardings, contexts */
    tj_tree_set_array(bad, "x", tj_full(c, TJ_F32, "a=4 b=2", 1.0));
    BAD(c, tj_run(p, bad, out) != TJ_OK, "run 'two'", "no array leaf 'w'", "f32[b=2]");
    tj_tree_set_array(bad, "w", tj_full(c, TJ_F32, "b=3", 1.0));
    BAD(c, tj_run(p, bad, out) != TJ_OK, "'w'", "b=3", "b=2");
    tj_tree_set_array(bad, "w", tj_full(c, TJ_F64, "b=2", 1.0));
    BAD(c, tj_run(p, bad, out) != TJ_OK, "'w'", "f64", "f32");
    tj_tree_set_array(bad, "w", tj_full(c, TJ_F32, "q=2", 1.0));
    BAD(c, tj_run(p, bad, out) != TJ_OK, "'w'", "q=2");
    tj_tree_set_array(bad, "w", tj_device_put(tj_tree_array(in, "w"), "b:data"));
    BAD(c, tj_run(p, bad, out) != TJ_OK, "'w'", "data");
    tj_tree_set_array(bad, "w", tj_full(c, TJ_F32, "b=2", 1.0));
    tj_tree_clear(bad);
    tj_tree_set_int(bad, "x", 1);
    tj_tree_set_array(bad, "w", tj_full(c, TJ_F32, "b=2", 1.0));
    BAD(c, tj_run(p, bad, out) != TJ_OK, "'x'");
    tj_tree_clear(bad);
    tj_tree_set_array(bad, "x", tj_array_abstract(c, TJ_F32, "a=4 b=2", NULL));
    tj_tree_set_array(bad, "w", tj_full(c, TJ_F32, "b=2", 1.0));
    BAD(c, tj_run(p, bad, out) != TJ_OK, "'x'", "abstract");
    /* trees of another context: its arrays live on its devices */
    BAD(c, tj_run(p, in, out2) != TJ_OK, "run 'two'", "another context");
    BAD_NL(c, tj_prog_output_shapes(p, out2) != TJ_OK, "tj_prog_output_shapes 'two'", "another context");
    tj_tree_set_array(out2, "x", tj_full(c2, TJ_F32, "a=4 b=2", 1.0));
    tj_tree_set_array(out2, "w", tj_full(c2, TJ_F32, "b=2", 1.0));
    BAD(c, tj_run(p, out2, out) != TJ_OK, "run 'two'", "another context");
    /* the inputs as the outputs: run reads in, then writes out */
    WORKS(c, tj_run(p, in, in) == TJ_OK && tj_tree_find(in, "y") >= 0);
    /* an array of another device count (the message said f32[b=2] is not f32[b=2]) */
    tj_tree_clear(bad);
    tj_tree_set_array(bad, "x", tj_full(c, TJ_F32, "a=4 b=2", 1.0));
    tj_set_devices(c, 4);
    tj_tree_set_array(bad, "w", tj_full(c, TJ_F32, "b=2", 1.0));
    tj_set_devices(c, 2);
    tj_set_mesh(c, "data=2");
    tj_prog_free(p);
    p = tj_jit(c, "two", two_fn, NULL, in, NULL);
    BAD(c, tj_run(p, bad, out) != TJ_OK, "run 'two'", "input 'w' was made for 4 devices", "now has 2");
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_tree_free(bad);
    tj_tree_free(out2);
    tj_ctx_free(c2);
    tj_ctx_free(c);
}

/* ---- a traced value kept past its tj_jit (through a global): an op on it
   grew the compiled program's graph, silently, inside another trace or
   outside any ---- */
static tj_v g_kept;
static void keep_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    g_kept = tj_tree_v(in, "x");
    tj_tree_set_v(out, "y", tj_tanh(g_kept));
}
static void use_kept_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v gx = NULL;
    (void)u;
    BAD(c, tj_tanh(g_kept) == NULL, "tanh", "tj_jit has returned");
    BAD(c, tj_grad(tj_sum_all(g_kept), 1, &g_kept, &gx) != TJ_OK, "sum", "tj_jit has returned");
    tj_tree_set_v(out, "y", tj_tanh(tj_tree_v(in, "x")));
}
static void test_finished_trace(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p, *q;
    float r[2];
    tjt_current = "a value kept past its trace";
    tj_tree_set_array(in, "x", tj_full(c, TJ_F32, "a=2", 0.5));
    p = tj_jit(c, "keep", keep_fn, NULL, in, NULL);
    WORKS(c, p != NULL);
    BAD(c, tj_exp(g_kept) == NULL, "exp", "tj_jit has returned");
    q = tj_jit(c, "use", use_kept_fn, NULL, in, NULL);
    WORKS(c, q != NULL);
    WORKS(c, tj_run(p, in, out) == TJ_OK && tj_array_read(tj_tree_array(out, "y"), TJ_F32, r) == TJ_OK && fabsf(r[0] - tanhf(0.5f)) < 1e-6f);
    tj_prog_free(q);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(c);
}

/* ---- non-array leaves are constants of the trace: a run that gives
   another value (a learning-rate schedule, say) got the traced one ---- */
static void static_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    tj_tree_set_v(out, "y", tj_muls(tj_tree_v(in, "x"), tj_tree_float(in, "lr") * (double)tj_tree_int(in, "n")));
}
static void test_static_leaves(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p;
    float r[2];
    tjt_current = "non-array leaves at run";
    tj_tree_set_array(in, "x", tj_full(c, TJ_F32, "a=2", 1.0));
    tj_tree_set_float(in, "lr", 0.5);
    tj_tree_set_int(in, "n", 3);
    tj_tree_set_string(in, "note", "any");
    p = tj_jit(c, "static", static_fn, NULL, in, NULL);
    WORKS(c, p != NULL);
    tj_tree_set_float(in, "lr", 0.25);
    BAD(c, tj_run(p, in, out) != TJ_OK, "run 'static'", "'lr'", "the float 0.25", "traced with the float 0.5", "tj_jit again"); /* y was 1.5 */
    tj_tree_set_float(in, "lr", 0.5);
    tj_tree_set_string(in, "n", "3");
    BAD(c, tj_run(p, in, out) != TJ_OK, "run 'static'", "'n'", "the string \"3\"", "the int 3");
    tj_tree_set_int(in, "n", 3);
    tj_tree_set_string(in, "note", "other");
    BAD(c, tj_run(p, in, out) != TJ_OK, "'note'", "\"other\"", "\"any\"");
    tj_tree_set_string(in, "note", "any");
    WORKS(c, tj_run(p, in, out) == TJ_OK && tj_array_read(tj_tree_array(out, "y"), TJ_F32, r) == TJ_OK && r[0] == 1.5f);
    tj_tree_free(in); /* a tree without them: the program does not read them */
    in = tj_tree_new(c);
    tj_tree_set_array(in, "x", tj_full(c, TJ_F32, "a=2", 2.0));
    WORKS(c, tj_run(p, in, out) == TJ_OK && tj_array_read(tj_tree_array(out, "y"), TJ_F32, r) == TJ_OK && r[0] == 3.0f);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(c);
}

/* ---- bad data found by a kernel: an index out of range in a sharded
   index array (the message gave the position in the device's block as if
   it were the array's: 1 for the array's 3) ---- */
static void take_ce_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g;
    if (u) tj_tree_set_v(out, "ce", tj_cross_entropy(tj_tree_v(in, "l"), tj_tree_v(in, "i"), "v", "a"));
    else tj_tree_set_v(out, "t", tj_take(tj_tree_v(in, "z"), "v", tj_tree_v(in, "i")));
}
static void test_bad_data(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p;
    tj_array *a;
    int idx[4] = {1, 2, 0, 9}, good[4] = {1, 2, 0, 3}, k;
    tjt_current = "bad data at run";
    tj_set_devices(c, 2);
    tj_set_mesh(c, "d=2");
    tj_tree_set_array(in, "z", tj_full(c, TJ_F32, "v=8 e=3", 0.5));
    tj_tree_set_array(in, "l", tj_full(c, TJ_F32, "a=4 v=8", 0.5));
    a = tj_array_new(c, TJ_I32, "a=4", idx);
    tj_tree_set_array(in, "i", tj_device_put(a, "a:d"));
    tj_array_free(a);
    for (k = 0; k < 2; k++) { /* take, then cross_entropy (which gathers the labels whole: the array's position) */
        p = tj_jit(c, "take_ce", take_ce_fn, k ? &k : NULL, in, NULL);
        WORKS(c, p != NULL);
        if (!k) BAD(c, tj_run(p, in, out) != TJ_OK, "run 'take_ce'", "index 9 at position 1 of device 1's block", "out of range [0, 8)", "'v'");
        else BAD(c, tj_run(p, in, out) != TJ_OK, "run 'take_ce'", "label 9 at position 3 is out of range [0, 8)");
        tj_prog_free(p);
    }
    /* the same run with good indices works after */
    p = tj_jit(c, "take_ce", take_ce_fn, NULL, in, NULL);
    a = tj_array_new(c, TJ_I32, "a=4", good);
    tj_tree_set_array(in, "i", tj_device_put(a, "a:d"));
    tj_array_free(a);
    WORKS(c, p && tj_run(p, in, out) == TJ_OK);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(c);
}

/* ---- after the context changes: another mesh, another backend ---- */
static void double_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    tj_tree_set_v(out, "y", tj_sum(tj_muls(tj_tree_v(in, "x"), 2.0), "a"));
}
static void test_changed_context(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p;
    tj_array *a;
    float v[8], r[8];
    int i;
    tj_backend *ds = tj_devsim_backend(), *was;
    tjt_current = "after tj_set_mesh, tj_set_backend";
    for (i = 0; i < 8; i++) v[i] = (float)i;
    tj_set_devices(c, 4);
    tj_set_mesh(c, "d=2 m=2");
    a = tj_array_new(c, TJ_F32, "a=4 b=2", v);
    tj_tree_set_array(in, "x", tj_device_put(a, "a:d b:m"));
    tj_array_free(a);
    p = tj_jit(c, "double", double_fn, NULL, in, NULL);
    WORKS(c, p != NULL);
    /* another mesh: the shards were laid out for the old one (this read gave 0 2 1 3 4 6 5 7) */
    WORKS(c, tj_set_mesh(c, "d=4 m=1") == TJ_OK);
    BAD_NL(c, tj_array_read(tj_tree_array(in, "x"), TJ_F32, r) != TJ_OK, "tj_array_read", "f32[a=4@d,b=2@m]", "earlier mesh");
    BAD(c, tj_run(p, in, out) != TJ_OK, "run 'double'", "another mesh", "tj_jit again");
    BAD(c, tj_device_put(tj_tree_array(in, "x"), "") == NULL, "device_put", "earlier mesh");
    BAD_NL(c, tj_tree_save(in, path_in("remesh.safetensors")) != TJ_OK, "tj_tree_save", "earlier mesh");
    /* the same mesh again: nothing changed, everything works */
    WORKS(c, tj_set_mesh(c, "d=2 m=2") == TJ_OK);
    BAD_NL(c, tj_array_read(tj_tree_array(in, "x"), TJ_F32, r) != TJ_OK, "earlier mesh"); /* d=4 m=1 came between */
    tj_tree_set_array(in, "x", tj_array_new(c, TJ_F32, "a=4 b=2", v));
    tj_tree_set_array(in, "x", tj_device_put(tj_tree_array(in, "x"), "a:d b:m")); /* (frees the unplaced one) */
    tj_prog_free(p);
    p = tj_jit(c, "double", double_fn, NULL, in, NULL);
    WORKS(c, p && tj_set_mesh(c, "d=2 m=2") == TJ_OK && tj_run(p, in, out) == TJ_OK);
    WORKS(c, tj_array_read(tj_tree_array(in, "x"), TJ_F32, r) == TJ_OK && r[5] == 5.0f);
    /* another backend: these buffers are not its memory (each of these crashed) */
    was = tjt_ctx_backend(c);
    tj_set_backend(c, was ? NULL : ds);
    BAD_NL(c, tj_array_read(tj_tree_array(in, "x"), TJ_F32, r) != TJ_OK, "tj_array_read", "backend", "tj_set_backend");
    BAD(c, tj_run(p, in, out) != TJ_OK, "run 'double'", "backend");
    tj_prog_free(p);
    p = tj_jit(c, "double", double_fn, NULL, in, NULL); /* only shapes: fine */
    WORKS(c, p != NULL);
    BAD(c, tj_run(p, in, out) != TJ_OK, "run 'double': input 'x'", "backend");
    { /* a backend missing a function the runner calls (this crashed at the first array) */
        tj_backend bogus;
        memset(&bogus, 0, sizeof bogus);
        bogus.name = "bogus";
        tj_set_backend(c, &bogus);
        BAD_NL(c, tjt_ctx_backend(c) != &bogus && tj_status_of(c) != TJ_OK, "tj_set_backend", "'bogus'", "alloc");
        a = tj_zeros(c, TJ_F32, "a=2");
        WORKS(c, a != NULL);
        tj_array_free(a);
    }
    tj_tree_free(out); /* outputs of the old backend: freed through it */
    tj_tree_free(in);
    tj_prog_free(p);
    tj_set_backend(c, was);
    tj_ctx_free(c);
    tj_devsim_backend_free(ds);
}

/* ---- custom ops ---- */
static int long_shape_rule(const tj_buf *in, int nin, int j, char *shape, size_t n, tj_dtype *dt, void *user) {
    (void)in; (void)nin; (void)j; (void)dt;
    memset(shape, 'a', n); /* no room left for the NUL */
    return user != NULL;   /* user set: a rejection whose reason fills the buffer */
}
static void cop_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *user) {
    (void)in; (void)nin; (void)out; (void)nout; (void)user;
}
static tj_status cop_vjp(tj_graph *g, int nin, const tj_v *in, int nout, const tj_v *out, const tj_v *ct, tj_v *gin, void *user) {
    (void)g; (void)nin; (void)nout; (void)out; (void)user;
    gin[0] = tj_sum(tj_mul(ct[0], in[0]), "b"); /* the wrong shape: 'b' summed away */
    return TJ_OK;
}
static tj_status cop_vjp_fails(tj_graph *g, int nin, const tj_v *in, int nout, const tj_v *out, const tj_v *ct, tj_v *gin, void *user) {
    (void)g; (void)nin; (void)in; (void)nout; (void)out; (void)ct; (void)gin; (void)user;
    return TJ_ERR_UNSUPPORTED; /* and no message */
}
static void custom_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v x = tj_tree_v(in, "x"), o[2] = {NULL, NULL}, gx = NULL;
    (void)u;
    BAD(c, tj_custom("cop", 0, &x, o) != TJ_OK, "custom 'cop'", "0 inputs");
    BAD(c, tj_custom("cop", -1, &x, o) != TJ_OK, "custom 'cop'", "-1 inputs");
    /* (17 inputs were refused until 2026-11-24: custom ops take any number, tests/test_limits.c) */
    BAD(c, tj_custom("nosuch", 1, &x, o) != TJ_OK, "custom", "'nosuch'");
    {
        tj_v nul[2] = {NULL, NULL};
        BAD(c, tj_custom("cop", 1, nul, o) != TJ_OK, "cop", "operand 0 is NULL");
    }
    /* a shape rule that fills its buffer without a NUL (the parser and the message read past it) */
    BAD(c, tj_custom("long_shape", 1, &x, o) != TJ_OK, "custom op 'long_shape'", "shape of 512 or more characters", "output 0");
    BAD(c, tj_custom("long_reason", 1, &x, o) != TJ_OK, "custom op 'long_reason'", "reason of 512 or more characters");
    /* a VJP rule that fails without a message (the gradient was zero, and tj_grad said TJ_OK) */
    BAD(c, tj_custom("cop_fails", 1, &x, o) != TJ_OK || tj_grad(tj_sum(o[0], "a b"), 1, &x, &gx) != TJ_OK, "custom op 'cop_fails'",
        "its vjp returned status 8 without setting an error");
    BAD(c, tj_custom("cop", 1, &x, o) != TJ_OK || tj_grad(tj_sum(o[0], "a b"), 1, &x, &gx) != TJ_OK, "custom op 'cop'", "f32[a=4]", "f32[a=4,b=6]");
    tj_clear_error(c);
    tj_tree_set_v(out, "y", tj_adds(x, 1.0));
}
static void test_custom_ops(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = tj_tree_new(c);
    tj_prog *p;
    tj_op_def d;
    tjt_current = "custom ops";
    memset(&d, 0, sizeof d);
    d.name = "cop"; d.nout = 0; d.cpu = cop_cpu; d.vjp = cop_vjp;
    BAD_NL(c, tj_register_op(c, &d) != TJ_OK, "register_op", "cop", "0");
    d.nout = 17; /* any number of outputs (1..16 until 2026-11-24); registered again below with 1 */
    WORKS(c, tj_register_op(c, &d) == TJ_OK);
    d.nout = 1; d.name = "";
    BAD_NL(c, tj_register_op(c, &d) != TJ_OK, "register_op", "name");
    d.name = "cop";
    WORKS(c, tj_register_op(c, &d) == TJ_OK);
    d.name = "long_shape"; d.shape = long_shape_rule;
    WORKS(c, tj_register_op(c, &d) == TJ_OK);
    d.name = "long_reason"; d.user = &d;
    WORKS(c, tj_register_op(c, &d) == TJ_OK);
    d.user = NULL; d.shape = NULL; d.name = "cop_fails"; d.vjp = cop_vjp_fails;
    WORKS(c, tj_register_op(c, &d) == TJ_OK);
    d.vjp = cop_vjp; d.name = "cop";
    tj_tree_set_array(in, "x", tj_zeros(c, TJ_F32, "a=4 b=6"));
    p = tj_jit(c, "custom", custom_fn, NULL, in, NULL);
    WORKS(c, p != NULL);
    tj_prog_free(p);
    tj_tree_free(in);
    tj_ctx_free(c);
}

/* ---- policies: names no residual carries warn; broken policies fail ---- */
static void pol_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    (void)g; (void)x; (void)y; (void)u;
    carry_out[0] = tj_checkpoint_name(tj_tanh(carry[0]), "h");
}
static tj_decision bad_decision(const char *op, const char *name, const char *shape, void *u) {
    (void)op; (void)name; (void)shape; (void)u;
    return (tj_decision)7;
}
static int g_pol_case;
static void pol_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_ctx *c = tj_graph_ctx(g);
    tj_v x = tj_tree_v(in, "x"), fin = NULL, gx = NULL;
    tj_policy pol = tj_save_only_these_names("h nosuch"), self;
    (void)u;
    if (g_pol_case == 1) pol = tj_policy_from_fn(bad_decision, NULL);
    if (g_pol_case == 2) { self = tj_save_from_both(&self, &self); pol = self; }
    if (g_pol_case == 3) pol.kind = (tj_policy_kind)42;
    if (tj_scan(pol_body, NULL, "l=3", 1, &x, 0, NULL, 0, &fin, NULL, &pol) == TJ_OK) tj_grad(tj_sum(fin, "a"), 1, &x, &gx);
    tj_tree_set_v(out, "gx", gx);
    (void)c;
}
static void test_policies(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = tj_tree_new(c);
    tj_prog *p;
    tjt_current = "policies";
    tj_tree_set_array(in, "x", tj_full(c, TJ_F32, "a=3", 0.5));
    g_pol_case = 0;
    p = tj_jit(c, "pol", pol_fn, NULL, in, NULL);
    WORKS(c, p != NULL);
    TJT_CHECK(strstr(tj_warnings(c), "nosuch") != NULL, "a policy name no residual carries is a warning: \"%s\"", tj_warnings(c));
    tj_prog_free(p);
    g_pol_case = 1;
    BAD(c, tj_jit(c, "pol", pol_fn, NULL, in, NULL) == NULL, "policy function", "returned 7");
    g_pol_case = 2;
    BAD(c, tj_jit(c, "pol", pol_fn, NULL, in, NULL) == NULL, "scan policy", "save_from_both", "16");
    g_pol_case = 3;
    BAD(c, tj_jit(c, "pol", pol_fn, NULL, in, NULL) == NULL, "scan policy", "kind 42");
    tj_tree_free(in);
    tj_ctx_free(c);
}

/* ---- queries on a program: NULL rows with max > 0, a NULL stream ---- */
static void test_prog_queries(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = tj_tree_new(c);
    tj_prog *p;
    char b[16];
    tjt_current = "program queries";
    tj_tree_set_array(in, "x", tj_zeros(c, TJ_F32, "a=2"));
    p = tj_jit(c, "id", id_fn, NULL, in, NULL);
    WORKS(c, p != NULL);
    TJT_CHECK(tj_prog_residuals(p, NULL, 5) == 0 && tj_prog_collectives(p, NULL, 5) == 0 && tj_prog_events(p, NULL, 5) == 0 &&
                  tj_prog_transposes(p, NULL, 5) == 0,
              "NULL rows: counts only");
    TJT_CHECK(tj_prog_residuals(p, NULL, -1) == 0 && tj_prog_collectives(p, NULL, -1) == 0, "negative max");
    TJT_CHECK(tj_prog_lint(p, NULL, 10) >= 0 && tj_prog_lint(p, b, 0) >= 0, "lint without a buffer");
    tj_prog_print(p, NULL);
    tj_memory_print(p, NULL);
    tj_prog_residuals_print(p, NULL);
    tj_prog_transposes_print(p, NULL);
    tj_graph_print(NULL, NULL);
    TJT_CHECK(1, "printing to a NULL stream does not crash");
    tj_prog_free(p);
    tj_tree_free(in);
    tj_ctx_free(c);
}

/* ------------------------------------------------------------- files */
/* A full disk, as far as a process can tell: RLIMIT_FSIZE makes a write past
   `bytes` fail with EFBIG (SIGXFSZ ignored). */
static struct rlimit g_old_fsize;
static void disk_full(rlim_t bytes) {
    struct rlimit r;
    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &g_old_fsize);
    r = g_old_fsize;
    r.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &r);
}
static void disk_ok(void) { setrlimit(RLIMIT_FSIZE, &g_old_fsize); }
static int same_file(const char *p, const char *data, size_t n) {
    char *d = NULL;
    size_t len = 0;
    int ok = tj_read_file(p, &d, &len, NULL, 0) == TJ_OK && len == n && memcmp(d, data, n) == 0;
    tj_free(d);
    return ok;
}
static void test_files(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *t = tj_tree_new(c), *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p;
    char err[256], *old = NULL;
    size_t oldn = 0;
    const char *f = path_in("ck.safetensors"), *tr = path_in("trace.json");
    int64_t shape[1] = {100000};
    tj_st_entry e;
    tjt_current = "file writers";
    tj_tree_set_array(t, "w", tj_zeros(c, TJ_F32, "a=100000"));
    tj_tree_set_int(t, "step", 7);
    /* paths that cannot be written */
    BAD_NL(c, tj_tree_save(t, "/nonexistent-dir/x.safetensors") != TJ_OK, "/nonexistent-dir/x.safetensors");
    BAD_NL(c, tj_tree_save(t, "/dev/full/x.safetensors") != TJ_OK, "/dev/full/x.safetensors");
    BAD_NL(c, tj_tree_save(t, "") != TJ_OK, "empty file name");
    BAD_NL(c, tj_tree_save(t, g_dir) != TJ_OK, g_dir);
    TJT_CHECK(tj_write_file_atomic("/dev/full/x", "a", 1, err, sizeof err) == TJ_ERR_IO && strstr(err, "/dev/full/x"), "write_file_atomic: %s", err);
    TJT_CHECK(tj_write_file_atomic(path_in("n"), NULL, 5, err, sizeof err) != TJ_OK, "NULL data with a length");
    /* a full disk: the error says so, the old file stays, no temp file is left */
    WORKS(c, tj_tree_save(t, f) == TJ_OK);
    TJT_CHECK(tj_read_file(f, &old, &oldn, err, sizeof err) == TJ_OK, "read back: %s", err);
    tj_tree_set_int(t, "step", 8);
    disk_full(4096);
    BAD_NL(c, tj_tree_save(t, f) != TJ_OK, "ck.safetensors", "File too large");
    e.name = "w"; e.dtype = TJ_ST_F32; e.rank = 1; e.shape = shape; e.data = NULL;
    {
        float *z = (float *)calloc(100000, sizeof(float));
        e.data = z;
        BAD_NL(c, tj_st_save(c, f, &e, 1, NULL, 0) != TJ_OK, "ck.safetensors", "File too large");
        TJT_CHECK(tj_write_file_atomic(f, z, 100000 * sizeof(float), err, sizeof err) == TJ_ERR_IO && strstr(err, "File too large"),
                  "write_file_atomic on a full disk: %s", err);
        free(z);
    }
    disk_ok();
    TJT_CHECK(same_file(f, old, oldn), "the old checkpoint is intact after the failed writes");
    TJT_CHECK(count_tmp_files() == 0, "no temp file left: %d", count_tmp_files());
    tj_free(old);
    /* a trace */
    tj_set_profile(c, 1);
    tj_tree_set_array(in, "x", tj_zeros(c, TJ_F32, "a=2"));
    p = tj_jit(c, "id", id_fn, NULL, in, NULL);
    WORKS(c, p && tj_run(p, in, out) == TJ_OK);
    BAD_NL(c, tj_prog_write_trace(p, "/nonexistent-dir/t.json") != TJ_OK, "/nonexistent-dir/t.json");
    WORKS(c, tj_prog_write_trace(p, tr) == TJ_OK);
    old = NULL;
    TJT_CHECK(tj_read_file(tr, &old, &oldn, err, sizeof err) == TJ_OK, "read the trace: %s", err);
    disk_full(16);
    BAD_NL(c, tj_prog_write_trace(p, tr) != TJ_OK, "trace.json", "File too large");
    disk_ok();
    TJT_CHECK(old && same_file(tr, old, oldn) && count_tmp_files() == 0, "the old trace is intact, no temp file");
    tj_free(old);
    tj_prog_free(p);
    /* loading a mismatched tree leaves it as it was */
    tj_tree_set_array(out, "w", tj_zeros(c, TJ_F32, "a=3"));
    BAD_NL(c, tj_tree_load(out, f) != TJ_OK, "'w'", "a=3");
    TJT_CHECK(tj_array_dim(tj_tree_array(out, "w"), "a") == 3, "the tree is unchanged");
    tj_tree_set_array(out, "w", tj_zeros(c, TJ_F32, "q=100000"));
    BAD_NL(c, tj_tree_load(out, f) != TJ_OK, "'w'", "q=100000");
    tj_tree_set_array(out, "w", tj_zeros(c, TJ_I32, "a=100000"));
    BAD_NL(c, tj_tree_load(out, f) != TJ_OK, "'w'", "i32");
    BAD_NL(c, tj_tree_load(out, "/nonexistent-dir/x") != TJ_OK, "/nonexistent-dir/x");
    tj_clear_error(c);
    /* saving what has no data */
    tj_tree_set_array(t, "abs", tj_array_abstract(c, TJ_F32, "a=2", NULL));
    BAD_NL(c, tj_tree_save(t, f) != TJ_OK, "abstract");
    tj_tree_free(t);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(c);
}

/* ---- the safetensors writer's arguments ---- */
static void test_st_writer(void) {
    tj_ctx *c = tj_ctx_new();
    tj_st_entry e[2];
    int64_t shape[3] = {2, 3, -1};
    float d[6] = {0};
    const char *meta[2] = {"k", NULL};
    const char *f = path_in("w.safetensors");
    tjt_current = "safetensors writer";
    memset(e, 0, sizeof e);
    e[0].name = "w"; e[0].dtype = TJ_ST_F32; e[0].rank = 2; e[0].shape = shape; e[0].data = d;
    e[1] = e[0];
    BAD_NL(c, tj_st_save(c, f, e, 2, NULL, 0) != TJ_OK, "duplicate tensor name 'w'");
    e[1].name = "v"; e[1].rank = 3;
    BAD_NL(c, tj_st_save(c, f, e, 2, NULL, 0) != TJ_OK, "'v'", "-1");
    e[1].rank = -1;
    BAD_NL(c, tj_st_save(c, f, e, 2, NULL, 0) != TJ_OK, "'v'", "-1");
    e[1].rank = 9;
    BAD_NL(c, tj_st_save(c, f, e, 2, NULL, 0) != TJ_OK, "'v'", "9");
    e[1].rank = 2; e[1].dtype = (tj_st_dtype)40;
    BAD_NL(c, tj_st_save(c, f, e, 2, NULL, 0) != TJ_OK, "'v'", "dtype");
    e[1].dtype = TJ_ST_F32; e[1].data = NULL;
    BAD_NL(c, tj_st_save(c, f, e, 2, NULL, 0) != TJ_OK, "'v'", "NULL");
    e[1].data = d; e[1].name = NULL;
    BAD_NL(c, tj_st_save(c, f, e, 2, NULL, 0) != TJ_OK, "NULL");
    e[1].name = "";
    BAD_NL(c, tj_st_save(c, f, e, 2, NULL, 0) != TJ_OK, "empty");
    e[1].name = "__metadata__";
    BAD_NL(c, tj_st_save(c, f, e, 2, NULL, 0) != TJ_OK, "__metadata__");
    BAD_NL(c, tj_st_save(c, f, e, -1, NULL, 0) != TJ_OK, "-1");
    BAD_NL(c, tj_st_save(c, f, e, 1, meta, 1) != TJ_OK, "metadata entry 0", "NULL");
    BAD_NL(c, tj_st_save(c, f, e, 1, meta, -2) != TJ_OK, "-2");
    TJT_CHECK(!file_exists(f), "nothing was written");
    tj_ctx_free(c);
}

/* ---- the appendix's helpers: a string buffer, safetensors expectations ---- */
static void test_helpers(void) {
    tj_ctx *c = tj_ctx_new();
    tj_strbuf b = {NULL, 0, 0, 0};
    tj_safetensors *st;
    tj_st_entry e;
    int64_t shape[1] = {2};
    float d[2] = {1, 2};
    tjt_current = "appendix helpers";
    tj_strbuf_puts(&b, "ab");
    tj_strbuf_put(&b, NULL, 3); /* this crashed */
    TJT_CHECK(b.n == 2 && !b.oom && !strcmp(b.p, "ab"), "appending NULL appends nothing: %zu \"%s\"", b.n, b.p ? b.p : "");
    tj_strbuf_put(&b, "x", SIZE_MAX - 1); /* the capacity would overflow */
    TJT_CHECK(b.oom && b.n == 2, "an absurd length is out of memory, not a crash");
    tj_strbuf_free(&b);
    memset(&e, 0, sizeof e);
    e.name = "w"; e.dtype = TJ_ST_F32; e.rank = 1; e.shape = shape; e.data = d;
    WORKS(c, tj_st_save(c, path_in("h.safetensors"), &e, 1, NULL, 0) == TJ_OK);
    st = tj_st_load(c, path_in("h.safetensors"));
    WORKS(c, st != NULL);
    BAD_NL(c, tj_st_expect(st, "w", (tj_st_dtype)99, 1, NULL) == NULL, "tj_st_expect", "'w'", "dtype 99"); /* said "want ?" */
    BAD_NL(c, tj_st_expect(st, "w", TJ_ST_F32, -1, NULL) == NULL, "tj_st_expect", "rank -1");
    BAD_NL(c, tj_st_expect(st, "w", TJ_ST_F32, 9, NULL) == NULL, "tj_st_expect", "rank 9");
    BAD_NL(c, tj_st_array(st, "w", TJ_F32, "a b") == NULL, "'w'", "a b");
    BAD_NL(c, tj_st_array(st, "w", (tj_dtype)7, "a") == NULL, "tj_st_array", "dtype 7");
    tj_st_free(st);
    tj_ctx_free(c);
}

/* ---------------------------------------------------- distributed init */
/* a transport that says "process 0 of 2" and is never called: the cases
   fail before any collective */
static void fake_free(tj_transport *t) { (void)t; }
static void test_distributed(void) {
    tj_ctx *c = tj_ctx_new();
    tj_distributed_opts o;
    tj_transport fake;
    tjt_current = "tj_distributed_init";
    memset(&o, 0, sizeof o);
    memset(&fake, 0, sizeof fake);
    fake.name = "fake";
    fake.nprocs = 2;
    fake.free = fake_free;
    o.nprocs = 2; o.rank = 2;
    BAD_NL(c, tj_distributed_init(c, &o) != TJ_OK, "tj_distributed_init", "process 2 of 2");
    o.nprocs = -2; o.rank = 0;
    BAD_NL(c, tj_distributed_init(c, &o) != TJ_OK, "tj_distributed_init", "process 0 of -2");
    o.nprocs = 0; o.rank = 1;
    BAD_NL(c, tj_distributed_init(c, &o) != TJ_OK, "tj_distributed_init", "process 1 of 0");
    o.nprocs = 2; o.rank = -1;
    BAD_NL(c, tj_distributed_init(c, &o) != TJ_OK, "tj_distributed_init", "process -1 of 2");
    o.nprocs = 2; o.rank = 0; o.timeout_s = -1;
    BAD_NL(c, tj_distributed_init(c, &o) != TJ_OK, "tj_distributed_init", "timeout -1");
    o.timeout_s = NAN;
    BAD_NL(c, tj_distributed_init(c, &o) != TJ_OK, "tj_distributed_init", "timeout nan");
    o.timeout_s = 0;
    BAD_NL(c, tj_distributed_init(c, &o) != TJ_OK, "tj_distributed_init", "without MPI", "transport");
    o.transport = &fake;
    o.nprocs = 4;
    BAD_NL(c, tj_distributed_init(c, &o) != TJ_OK, "tj_distributed_init", "opts say process 0 of 4", "'fake' says 0 of 2");
    o.nprocs = 0;
    tj_set_devices(c, 3);
    BAD_NL(c, tj_distributed_init(c, &o) != TJ_OK, "tj_distributed_init", "3 devices", "2 processes");
    TJT_CHECK(tj_process_count(c) == 1 && tj_local_devices(c, NULL) == 3, "a refused init leaves the context as it was: %d processes, %d devices",
              tj_process_count(c), tj_local_devices(c, NULL));
    setenv("TJ_TIMEOUT", "5x", 1);
    BAD_NL(c, tj_distributed_init(c, NULL) != TJ_OK, "tj_distributed_init", "TJ_TIMEOUT", "5x");
    unsetenv("TJ_TIMEOUT");
    /* one process: nothing to do, and a context that works after */
    memset(&o, 0, sizeof o);
    o.nprocs = 1;
    WORKS(c, tj_distributed_init(c, &o) == TJ_OK && tj_process_count(c) == 1);
    tj_ctx_free(c);
}

/* ------------------------------------------------------------- main */
int main(void) {
    char errpath[128];
    int saved = dup(2), fd;
    FILE *f;
    char line[2048];
    int stray = 0;
    if (make_dir("tj_misuse")) return 1;
    /* everything the library prints goes to a file, checked at the end */
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", g_dir);
    fflush(stderr);
    fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    test_context();
    test_sticky();
    test_arrays();
    test_specs();
    test_trees();
    trace_cases("ops while tracing", ops_fn, 1);
    trace_cases("autodiff and control flow", ad_fn, 1);
    trace_cases("specs while tracing", mesh_fn, 4);
    trace_cases("shard_map collectives", smap_ops_fn, 4);
    trace_cases("attention", attn_fn, 1);
    trace_cases("attention on a mesh", attn_mesh_fn, 4);
    test_jit_run();
    test_finished_trace();
    test_static_leaves();
    test_bad_data();
    test_prog_queries();
    test_changed_context();
    test_custom_ops();
    test_policies();
    test_files();
    test_st_writer();
    test_helpers();
    test_distributed();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    /* our own FAIL lines and documented warnings may be there; nothing else
       (but AddressSanitizer's note, once per process, that it supports
       swapcontext only partly: the fibers of simulated devices tell it of
       each switch, [11]) */
    if ((f = fopen(errpath, "r")) != NULL) {
        while (fgets(line, sizeof line, f)) {
            fputs(line, stderr);
            if (strncmp(line, "FAIL ", 5) && strncmp(line, "tinyjax: warning: ", 18) && !strstr(line, "ASan doesn't fully support makecontext/swapcontext"))
                stray++;
        }
        fclose(f);
    }
    TJT_CHECK(stray == 0, "%d lines on stderr that are neither a test failure nor a documented warning (above)", stray);
    printf("%d misuse cases\n", misuse_cases);
    remove_dir();
    return tjt_finish();
}
