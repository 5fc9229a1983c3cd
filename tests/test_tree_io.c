/* Tree save/load through safetensors: round trips of every dtype and leaf
   kind, loads into existing trees, mismatch errors, corrupt and truncated
   files (errors, tree unchanged), atomic writes (also under kill -9), and
   Hugging Face GPT-2 style names; the file and JSON helpers of [A]. Files go to a fresh mkdtemp directory. */
#define _POSIX_C_SOURCE 200809L
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#define TJT_FILES
#include "tj_test.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    unsigned char *b;
    long n;
    *len = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    b = (unsigned char *)malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}
static int write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    size_t w;
    if (!f) return 1;
    w = fwrite(p, 1, n, f);
    return (fclose(f) != 0) | (w != n);
}

/* An array of random bytes (any bit pattern: NaNs, infinities, subnormals). */
static tj_array *rand_bytes_array(tj_ctx *ctx, tj_dtype dt, const char *shape) {
    tj_array *a = tj_zeros(ctx, dt, shape);
    size_t nb, i;
    unsigned char *b;
    if (!a) return NULL;
    nb = (size_t)tj_array_numel(a) * tj_dtype_size(dt);
    b = (unsigned char *)malloc(nb);
    for (i = 0; i < nb; i++) b[i] = (unsigned char)rnd();
    tj_array_free(a);
    a = tj_array_new(ctx, dt, shape, b);
    free(b);
    return a;
}

/* Everything about a tree as text: names, order, kinds, types with axis
   names, exact bytes, exact float bits. with_ptr adds array identities. */
typedef struct {
    char *p;
    size_t n, cap;
} sbuf;
static void sb_add(sbuf *s, const char *fmt, ...) {
    va_list ap;
    int k;
    for (;;) {
        va_start(ap, fmt);
        k = vsnprintf(s->p ? s->p + s->n : NULL, s->p ? s->cap - s->n : 0, fmt, ap);
        va_end(ap);
        if (s->p && s->n + (size_t)k < s->cap) break;
        s->cap = (s->cap + (size_t)k + 1) * 2;
        s->p = (char *)realloc(s->p, s->cap);
    }
    s->n += (size_t)k;
}
static char *tree_text(const tj_tree *t, int with_ptr) {
    sbuf s = {NULL, 0, 0};
    int i;
    sb_add(&s, "%d leaves\n", tj_tree_size(t));
    for (i = 0; i < tj_tree_size(t); i++) {
        const char *nm = tj_tree_name(t, i);
        switch (tj_tree_kind(t, i)) {
        case TJ_LEAF_ARRAY: {
            tj_array *a = tj_tree_array_at(t, i);
            char d[256];
            size_t nb = (size_t)tj_array_numel(a) * tj_dtype_size(tj_array_dtype(a)), k;
            unsigned char *b = (unsigned char *)malloc(nb);
            tj_array_read(a, tj_array_dtype(a), b);
            sb_add(&s, "[%s] array %s ", nm, tj_array_describe(a, d, sizeof d));
            for (k = 0; k < nb; k++) sb_add(&s, "%02x", b[k]);
            if (with_ptr) sb_add(&s, " @%p", (void *)a);
            sb_add(&s, "\n");
            free(b);
            break;
        }
        case TJ_LEAF_INT: sb_add(&s, "[%s] int %lld\n", nm, (long long)tj_tree_int(t, nm)); break;
        case TJ_LEAF_FLOAT: {
            double f = tj_tree_float(t, nm);
            uint64_t u;
            memcpy(&u, &f, 8);
            sb_add(&s, "[%s] float %016llx\n", nm, (unsigned long long)u);
            break;
        }
        case TJ_LEAF_STRING: sb_add(&s, "[%s] string \"%s\"\n", nm, tj_tree_string(t, nm)); break;
        default: sb_add(&s, "[%s] value\n", nm); break;
        }
    }
    return s.p;
}
static int same_text(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }
/* "f32[a=2,b=3]" -> "a=2 b=3" */
static const char *shape_of(const tj_array *a, char *sh) {
    char d[256], *s = sh;
    const char *q = strchr(tj_array_describe(a, d, sizeof d), '[') + 1;
    for (; *q && *q != ']'; q++) *s++ = *q == ',' ? ' ' : *q;
    *s = 0;
    return sh;
}

/* A tree with every dtype at ranks 0..4, ints, floats and strings, in
   interleaved order. */
static tj_tree *big_tree(tj_ctx *ctx) {
    static const char *axn[] = {"batch", "seq", "embed", "head", "x.y_z"};
    tj_tree *t = tj_tree_new(ctx);
    int dt, r, k;
    char shape[128], name[64];
    double nz = -0.0, inf = HUGE_VAL;
    for (dt = 0; dt < TJ_NDTYPE; dt++)
        for (r = 0; r <= 4; r++) {
            shape[0] = 0;
            for (k = 0; k < r; k++) snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%s=%d", k ? " " : "", axn[(k + dt) % 5], 1 + (dt + r + k) % 3);
            snprintf(name, sizeof name, "blocks.%d.%s.r%d", r, tj_dtype_name((tj_dtype)dt), r);
            tj_tree_set_array(t, name, rand_bytes_array(ctx, (tj_dtype)dt, shape));
            if (r == 2) {
                snprintf(name, sizeof name, "step.%d", dt);
                tj_tree_set_int(t, name, dt == 0 ? INT64_MIN : dt == 1 ? INT64_MAX : -dt);
            }
        }
    tj_tree_set_float(t, "lr", 0.1);
    tj_tree_set_float(t, "negzero", nz);
    tj_tree_set_float(t, "inf", inf);
    tj_tree_set_float(t, "ninf", -inf);
    tj_tree_set_float(t, "tiny", 4.9406564584124654e-324);
    tj_tree_set_float(t, "nan", nan(""));
    tj_tree_set_string(t, "empty", "");
    tj_tree_set_string(t, "note", "tab\there \"quoted\" back\\slash\nnewline h\xc3\xa9llo \xe2\x9c\x93 \x01");
    tj_tree_set_array(t, "w\"eird\\name/\xc3\xbc", tj_full(ctx, TJ_F32, "a=2", 1.5));
    tj_tree_set_int(t, "zero", 0);
    return t;
}

static void test_roundtrip(tj_ctx *ctx) {
    tj_tree *t = big_tree(ctx), *u = tj_tree_new(ctx), *v;
    char *a, *b;
    tj_safetensors *st;
    tjt_current = "roundtrip";
    TJT_CHECK(tj_status_of(ctx) == TJ_OK, "building: %s", tj_error(ctx));
    TJT_CHECK(tj_tree_save(t, path_in("t.safetensors")) == TJ_OK, "save: %s", tj_error(ctx));
    TJT_CHECK(count_tmp_files() == 0, "temp files left behind");
    TJT_CHECK(tj_tree_load(u, path_in("t.safetensors")) == TJ_OK, "load: %s", tj_error(ctx));
    a = tree_text(t, 0);
    b = tree_text(u, 0);
    TJT_CHECK(same_text(a, b), "round trip differs:\n%s\nvs\n%s", a, b);
    free(b);

    /* The file is plain safetensors: arrays are tensors named by leaf path. */
    st = tj_st_load(ctx, path_in("t.safetensors"));
    TJT_CHECK(st != NULL, "tj_st_load: %s", tj_error(ctx));
    if (st) {
        const tj_st_tensor *x = tj_st_find(st, "blocks.3.bf16.r3");
        int i, aligned = 1;
        TJT_CHECK(tj_st_count(st) == 4 * 5 + 1, "%d tensors", tj_st_count(st));
        TJT_CHECK(x && x->dtype == TJ_ST_BF16 && x->rank == 3, "bf16 rank-3 tensor");
        TJT_CHECK(tj_st_find(st, "blocks.0.f64.r0") && tj_st_find(st, "blocks.0.f64.r0")->rank == 0 && tj_st_find(st, "blocks.0.f64.r0")->nbytes == 8, "scalar tensor");
        TJT_CHECK(tj_st_find(st, "blocks.2.i32.r2") && tj_st_find(st, "blocks.2.i32.r2")->dtype == TJ_ST_I32, "i32 tensor");
        TJT_CHECK(tj_st_meta(st, "format") && strcmp(tj_st_meta(st, "format"), "pt") == 0, "format pt");
        TJT_CHECK(tj_st_meta(st, "tinyjax.int.step.0") && strcmp(tj_st_meta(st, "tinyjax.int.step.0"), "-9223372036854775808") == 0, "int meta");
        TJT_CHECK(tj_st_meta(st, "tinyjax.axes.blocks.2.f32.r2") && strcmp(tj_st_meta(st, "tinyjax.axes.blocks.2.f32.r2"), "batch,seq") == 0, "axes meta %s",
                  tj_st_meta(st, "tinyjax.axes.blocks.2.f32.r2"));
        TJT_CHECK(tj_st_meta(st, "tinyjax.axes.blocks.0.f32.r0") && !*tj_st_meta(st, "tinyjax.axes.blocks.0.f32.r0"), "scalar axes meta");
        for (i = 0; i < tj_st_count(st); i++) {
            const tj_st_tensor *y = tj_st_at(st, i);
            aligned &= (uintptr_t)y->data % tj_st_dtype_size(y->dtype) == 0;
        }
        TJT_CHECK(aligned, "every tensor naturally aligned");
        tj_st_free(st);
    }

    /* Loading into a tree that has the leaves replaces them in place and keeps
       other leaves; the result equals the saved tree plus the extra leaf. */
    v = tj_tree_new(ctx);
    tj_tree_set_int(v, "extra.before", 7);
    {
        char sh[256];
        tj_tree_set_array(v, "blocks.2.f32.r2", tj_zeros(ctx, TJ_F32, shape_of(tj_tree_array(t, "blocks.2.f32.r2"), sh)));
    }
    tj_tree_set_string(v, "lr", "was a string");
    tj_tree_set_array_ref(v, "blocks.0.i32.r0", tj_tree_array(u, "blocks.0.i32.r0")); /* borrowed: must not be freed */
    TJT_CHECK(tj_tree_load(v, path_in("t.safetensors")) == TJ_OK, "load into existing: %s", tj_error(ctx));
    TJT_CHECK(tj_tree_size(v) == tj_tree_size(t) + 1, "size %d", tj_tree_size(v));
    TJT_CHECK(strcmp(tj_tree_name(v, 0), "extra.before") == 0 && strcmp(tj_tree_name(v, 1), "blocks.2.f32.r2") == 0 && strcmp(tj_tree_name(v, 2), "lr") == 0,
              "existing leaves keep their places");
    TJT_CHECK(tj_tree_kind(v, 2) == TJ_LEAF_FLOAT && tj_tree_float(v, "lr") == 0.1, "non-array leaf replaced");
    TJT_CHECK(tj_tree_take(v, "extra.before") == NULL, "take of an int leaf fails");
    tj_clear_error(ctx);
    {
        tj_tree *w = tj_tree_new(ctx);
        char *c;
        int i;
        for (i = 0; i < tj_tree_size(t); i++) { /* v in t's order */
            const char *nm = tj_tree_name(t, i);
            int k = tj_tree_find(v, nm);
            if (k < 0) continue;
            switch (tj_tree_kind(v, k)) {
            case TJ_LEAF_ARRAY: tj_tree_set_array_ref(w, nm, tj_tree_array_at(v, k)); break;
            case TJ_LEAF_INT: tj_tree_set_int(w, nm, tj_tree_int(v, nm)); break;
            case TJ_LEAF_FLOAT: tj_tree_set_float(w, nm, tj_tree_float(v, nm)); break;
            default: tj_tree_set_string(w, nm, tj_tree_string(v, nm)); break;
            }
        }
        c = tree_text(w, 0);
        TJT_CHECK(same_text(a, c), "load into existing tree differs");
        free(c);
        tj_tree_free(w);
    }
    free(a);
    tj_tree_free(v);
    tj_tree_free(u);

    /* empty tree */
    u = tj_tree_new(ctx);
    TJT_CHECK(tj_tree_save(u, path_in("empty.safetensors")) == TJ_OK, "save empty: %s", tj_error(ctx));
    tj_tree_set_int(u, "kept", 3);
    TJT_CHECK(tj_tree_load(u, path_in("empty.safetensors")) == TJ_OK && tj_tree_size(u) == 1, "load empty: %s", tj_error(ctx));
    tj_tree_free(u);
    tj_tree_free(t);
}

static void test_mismatch(tj_ctx *ctx) {
    tj_tree *t = tj_tree_new(ctx), *u = tj_tree_new(ctx);
    char *before;
    const char *p = path_in("mm.safetensors");
    tjt_current = "mismatch";
    tj_tree_set_array(t, "w", tj_full(ctx, TJ_F32, "a=2 b=3", 1));
    tj_tree_set_array(t, "v", tj_full(ctx, TJ_BF16, "a=2", 1));
    tj_tree_set_int(t, "n", 5);
    TJT_CHECK(tj_tree_save(t, p) == TJ_OK, "save: %s", tj_error(ctx));

    tj_tree_set_array(u, "w", tj_full(ctx, TJ_F32, "a=2 b=4", 2));
    tj_tree_set_array(u, "v", tj_full(ctx, TJ_BF16, "a=2", 2));
    before = tree_text(u, 1);
    TJT_CHECK(tj_tree_load(u, p) == TJ_ERR_SHAPE, "shape mismatch must fail");
    TJT_ERROR_HAS(ctx, "leaf 'w'", "f32[a=2,b=4] in the tree", "f32[a=2,b=3] in the file", "mm.safetensors");
    {
        char *after = tree_text(u, 1);
        TJT_CHECK(same_text(before, after), "tree changed by a failed load");
        free(after);
    }
    free(before);

    tj_tree_set_array(u, "w", tj_full(ctx, TJ_F32, "a=2 c=3", 2)); /* other axis name */
    TJT_CHECK(tj_tree_load(u, p) == TJ_ERR_SHAPE, "axis name mismatch must fail");
    TJT_ERROR_HAS(ctx, "leaf 'w'", "f32[a=2,c=3] in the tree");
    tj_tree_set_array(u, "w", tj_full(ctx, TJ_F64, "a=2 b=3", 2)); /* other dtype */
    TJT_CHECK(tj_tree_load(u, p) == TJ_ERR_DTYPE, "dtype mismatch must fail");
    TJT_ERROR_HAS(ctx, "leaf 'w'", "f64 in the tree but f32 in the file");
    tj_tree_set_array(u, "w", tj_full(ctx, TJ_F32, "a=2 b=3", 2));
    tj_tree_set_array(u, "n", tj_full(ctx, TJ_F32, "a=2", 2)); /* array in tree, int in file */
    TJT_CHECK(tj_tree_load(u, p) == TJ_ERR_ARG, "kind mismatch must fail");
    TJT_ERROR_HAS(ctx, "leaf 'n'", "array in the tree but an int in the file");
    tj_tree_set_int(u, "n", 0);
    TJT_CHECK(tj_tree_load(u, p) == TJ_OK, "matching load: %s", tj_error(ctx));
    TJT_CHECK(tj_tree_int(u, "n") == 5 && tj_tree_size(u) == 3, "loaded");

    /* save errors */
    {
        int dummy;
        tj_tree *bad = tj_tree_new(ctx);
        tj_tree_set_v(bad, "traced", (tj_v)(void *)&dummy);
        TJT_CHECK(tj_tree_save(bad, path_in("bad.safetensors")) == TJ_ERR_ARG, "traced value");
        TJT_ERROR_HAS(ctx, "leaf 'traced' is a traced value");
        tj_tree_clear(bad);
        tj_tree_set_int(bad, "new\nline", 1);
        TJT_CHECK(tj_tree_save(bad, path_in("bad.safetensors")) == TJ_ERR_ARG, "newline in name");
        TJT_ERROR_HAS(ctx, "newline");
        tj_tree_clear(bad);
        tj_tree_set_string(bad, "s", "\xff\xfe");
        TJT_CHECK(tj_tree_save(bad, path_in("bad.safetensors")) != TJ_OK, "non-UTF-8 string");
        TJT_ERROR_HAS(ctx, "string leaf 's' is not UTF-8");
        TJT_CHECK(access(path_in("bad.safetensors"), F_OK) != 0 && count_tmp_files() == 0, "nothing written");
        tj_tree_free(bad);
    }
    TJT_CHECK(tj_tree_load(u, path_in("missing.safetensors")) == TJ_ERR_IO, "missing file");
    TJT_ERROR_HAS(ctx, "missing.safetensors: cannot open");
    TJT_CHECK(tj_tree_save(t, path_in("no/such/dir.safetensors")) == TJ_ERR_IO, "bad dir");
    TJT_ERROR_HAS(ctx, "no/such/dir.safetensors", "cannot create");
    tj_tree_free(t);
    tj_tree_free(u);
}

/* Every truncation and random byte flips must fail and leave the tree as it was. */
static void test_corrupt(tj_ctx *ctx) {
    tj_tree *t = tj_tree_new(ctx), *u = tj_tree_new(ctx);
    const char *p = path_in("c.safetensors"), *q = path_in("c2.safetensors");
    unsigned char *file;
    size_t len, cut;
    char *before, *after;
    int bad_ok = 0, bad_changed = 0, bad_msg = 0, it;
    tjt_current = "corrupt";
    tj_tree_set_array(t, "wte.weight", rand_bytes_array(ctx, TJ_F32, "vocab=5 embed=4"));
    tj_tree_set_array(t, "h.0.b", rand_bytes_array(ctx, TJ_BF16, "embed=3"));
    tj_tree_set_array(t, "ids", rand_bytes_array(ctx, TJ_I32, "n=3"));
    tj_tree_set_array(t, "s", rand_bytes_array(ctx, TJ_F64, ""));
    tj_tree_set_int(t, "step", 12345);
    tj_tree_set_float(t, "lr", 3e-4);
    tj_tree_set_string(t, "name", "gpt2");
    TJT_CHECK(tj_tree_save(t, p) == TJ_OK, "save: %s", tj_error(ctx));
    file = read_all(p, &len);
    TJT_CHECK(file && len > 100, "read back");
    if (!file) return;
    /* u holds the same leaves with other values, and one more */
    tj_tree_set_array(u, "wte.weight", tj_zeros(ctx, TJ_F32, "vocab=5 embed=4"));
    tj_tree_set_array(u, "s", tj_zeros(ctx, TJ_F64, ""));
    tj_tree_set_int(u, "step", 1);
    tj_tree_set_string(u, "other", "x");
    before = tree_text(u, 1);

    for (cut = 0; cut < len; cut++) {
        tj_safetensors *st;
        unsigned char *exact = (unsigned char *)malloc(cut ? cut : 1); /* ASan sees reads past the cut */
        memcpy(exact, file, cut);
        st = tj_st_parse(ctx, exact, cut, "cut.safetensors");
        if (st) bad_ok++, tj_st_free(st);
        else if (!strstr(tj_error(ctx), "cut.safetensors: ")) bad_msg++;
        tj_clear_error(ctx);
        free(exact);
        write_all(q, file, cut);
        if (tj_tree_load(u, q) == TJ_OK) bad_ok++;
        else if (!strstr(tj_error(ctx), "c2.safetensors")) bad_msg++;
        tj_clear_error(ctx);
        after = tree_text(u, 1);
        bad_changed += !same_text(before, after);
        free(after);
    }
    TJT_CHECK(bad_ok == 0, "%d truncated files loaded", bad_ok);
    TJT_CHECK(bad_msg == 0, "%d errors without the file name", bad_msg);
    TJT_CHECK(bad_changed == 0, "%d failed loads changed the tree", bad_changed);

    bad_ok = bad_changed = bad_msg = 0;
    for (it = 0; it < 1500; it++) {
        unsigned char *m = (unsigned char *)malloc(len);
        int flips = 1 + (int)(rnd() % 4), f;
        tj_safetensors *st;
        memcpy(m, file, len);
        for (f = 0; f < flips; f++) {
            size_t at = (it & 1) ? rnd() % (len < 400 ? len : 400) : rnd() % len; /* bias towards the header */
            m[at] ^= (unsigned char)(1 + rnd() % 255);
        }
        if (memcmp(m, file, len) == 0) { /* flips cancelled out */
            free(m);
            continue;
        }
        st = tj_st_parse(ctx, m, len, "flip.safetensors"); /* must not crash; the checksum catches the rest */
        if (st) {
            if (tj_st_meta(st, "tinyjax.checksum")) bad_ok++, fprintf(stderr, "st_parse ok with checksum\n"); /* else the key itself was hit */
            tj_st_free(st);
        }
        tj_clear_error(ctx);
        write_all(q, m, len);
        if (tj_tree_load(u, q) == TJ_OK) {
            bad_ok++;
            fprintf(stderr, "tree load ok: %.200s\n", m + 8);
        } else if (!strstr(tj_error(ctx), "c2.safetensors")) bad_msg++;
        tj_clear_error(ctx);
        after = tree_text(u, 1);
        bad_changed += !same_text(before, after);
        free(after);
        free(m);
    }
    TJT_CHECK(bad_ok == 0, "%d corrupted files loaded", bad_ok);
    TJT_CHECK(bad_msg == 0, "%d errors without the file name", bad_msg);
    TJT_CHECK(bad_changed == 0, "%d failed loads changed the tree", bad_changed);

    /* a specific flip in a float leaf's text: caught by the checksum */
    {
        unsigned char *m = (unsigned char *)malloc(len), *hit;
        memcpy(m, file, len);
        hit = (unsigned char *)strstr((char *)m + 8, "\"0.00029");
        TJT_CHECK(hit != NULL, "float text present");
        if (hit) hit[1] = '1';
        write_all(q, m, len);
        TJT_CHECK(tj_tree_load(u, q) == TJ_ERR_IO, "flipped float text loaded");
        TJT_ERROR_HAS(ctx, "c2.safetensors: corrupt file: checksum");
        free(m);
    }
    after = tree_text(u, 1);
    TJT_CHECK(same_text(before, after), "tree unchanged");
    free(after);
    TJT_CHECK(tj_tree_load(u, p) == TJ_OK, "the good file still loads: %s", tj_error(ctx));
    free(before);
    free(file);
    tj_tree_free(t);
    tj_tree_free(u);
}

static void test_atomic(tj_ctx *ctx) {
    tj_tree *a = tj_tree_new(ctx), *b = tj_tree_new(ctx), *u;
    const char *p = path_in("at.safetensors");
    char stale[600], *ta, *tb, *tu;
    int round, bad = 0, loaded = 0, killed_mid_write = 0;
    tjt_current = "atomic";
    tj_tree_set_array(a, "w", tj_full(ctx, TJ_F32, "n=65536", 1));
    tj_tree_set_int(a, "which", 1);
    tj_tree_set_array(b, "w", tj_full(ctx, TJ_F32, "n=65536", 2));
    tj_tree_set_int(b, "which", 2);
    ta = tree_text(a, 0);
    tb = tree_text(b, 0);
    TJT_CHECK(tj_tree_save(a, p) == TJ_OK, "save a: %s", tj_error(ctx));

    /* a crashed writer's temp file (even with our pid) is never used */
    snprintf(stale, sizeof stale, "%s.tmp.%ld.0", p, (long)getpid());
    write_all(stale, "garbage", 7);
    TJT_CHECK(tj_tree_save(b, p) == TJ_OK, "save b over a: %s", tj_error(ctx));
    u = tj_tree_new(ctx);
    TJT_CHECK(tj_tree_load(u, p) == TJ_OK, "load: %s", tj_error(ctx));
    tu = tree_text(u, 0);
    TJT_CHECK(same_text(tu, tb), "target is the new tree");
    free(tu);
    {
        size_t n;
        unsigned char *s = read_all(stale, &n);
        TJT_CHECK(s && n == 7 && memcmp(s, "garbage", 7) == 0, "stale temp file untouched");
        free(s);
    }
    unlink(stale);
    TJT_CHECK(count_tmp_files() == 0, "no temp files");

    /* a failed save leaves the old file */
    tj_tree_set_int(u, "bad\nname", 1);
    TJT_CHECK(tj_tree_save(u, p) != TJ_OK, "bad save");
    tj_clear_error(ctx);
    tj_tree_clear(u);
    TJT_CHECK(tj_tree_load(u, p) == TJ_OK, "load after failed save: %s", tj_error(ctx));
    tu = tree_text(u, 0);
    TJT_CHECK(same_text(tu, tb), "target still the old tree");
    free(tu);

    /* kill -9 a writer at random moments: the target is always a whole old or new tree */
    for (round = 0; round < 12; round++) {
        pid_t pid;
        fflush(NULL);
        pid = fork();
        if (pid == 0) {
            int k;
            for (k = 0;; k++)
                if (tj_tree_save(k & 1 ? a : b, p) != TJ_OK) _exit(3);
        }
        if (pid < 0) break;
        {
            struct timespec ts;
            ts.tv_sec = 0;
            ts.tv_nsec = 1000000L + (long)(rnd() % 20) * 1000000L;
            nanosleep(&ts, NULL);
        }
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        tj_tree_clear(u);
        if (tj_tree_load(u, p) != TJ_OK) {
            bad++;
            fprintf(stderr, "round %d: %s\n", round, tj_error(ctx));
            tj_clear_error(ctx);
            continue;
        }
        tu = tree_text(u, 0);
        if (same_text(tu, ta) || same_text(tu, tb)) loaded++;
        else bad++;
        free(tu);
    }
    TJT_CHECK(bad == 0 && loaded == 12, "%d of 12 kills left a bad target", bad);
    {
        DIR *d = opendir(g_dir);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL)
            if (strstr(e->d_name, "at.safetensors.tmp.")) unlink(path_in(e->d_name)), killed_mid_write++;
        if (d) closedir(d);
    }
    if (getenv("TJT_VERBOSE")) fprintf(stderr, "atomic: %d of 12 kills hit a write in progress\n", killed_mid_write);
    free(ta);
    free(tb);
    tj_tree_free(u);
    tj_tree_free(a);
    tj_tree_free(b);
}

static void fmt_shape(char *b, size_t n, const char *ax, int d0, int d1) {
    if (d1) snprintf(b, n, ax, d0, d1);
    else snprintf(b, n, ax, d0);
}

/* Hugging Face GPT-2 names: a tinyjax tree saves under exactly these tensor
   names, and a foreign file (no tinyjax metadata) loads by name. */
static void test_gpt2_names(tj_ctx *ctx) {
    static const char *per_layer[] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                      "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    enum { L = 2, C = 4, V = 10, T = 6, N = 4 + L * 12 };
    tj_tree *t = tj_tree_new(ctx), *u;
    tj_safetensors *st;
    tj_st_entry e[N];
    int64_t shapes[N][2];
    float *data[N];
    char names[N][64], *ta, *tu;
    const char *meta[] = {"format", "pt"};
    int n = 0, l, k, good = 1;
    tjt_current = "gpt2 names";
#define ADD(nm, ax, d0, d1)                                                                           \
    do {                                                                                              \
        char sh_[64];                                                                                 \
        int r_ = (d1) ? 2 : 1;                                                                        \
        size_t q_, ne_ = (size_t)(d0) * (size_t)((d1) ? (d1) : 1);                                    \
        snprintf(names[n], 64, "%s", nm);                                                             \
        fmt_shape(sh_, sizeof sh_, ax, d0, d1);                                                       \
        shapes[n][0] = d0;                                                                            \
        shapes[n][1] = d1;                                                                            \
        data[n] = (float *)malloc(sizeof(float) * ne_);                                               \
        for (q_ = 0; q_ < ne_; q_++) data[n][q_] = (float)n + 0.001f * (float)q_;                     \
        e[n].name = names[n];                                                                         \
        e[n].dtype = TJ_ST_F32;                                                                       \
        e[n].rank = r_;                                                                               \
        e[n].shape = shapes[n];                                                                       \
        e[n].data = data[n];                                                                          \
        tj_tree_set_array(t, names[n], tj_array_new(ctx, TJ_F32, sh_, data[n]));                       \
        n++;                                                                                          \
    } while (0)
    ADD("wte.weight", "vocab=%d embed=%d", V, C);
    ADD("wpe.weight", "pos=%d embed=%d", T, C);
    for (l = 0; l < L; l++)
        for (k = 0; k < 12; k++) {
            char nm[48];
            const char *p = per_layer[k];
            int w = strstr(p, "weight") && !strstr(p, "ln_");
            int out = strstr(p, "c_attn") ? 3 * C : strstr(p, "c_fc") ? 4 * C : C;
            snprintf(nm, sizeof nm, "h.%d.%s", l, p);
            if (w) {
                if (strstr(p, "mlp.c_proj")) ADD(nm, "hidden=%d embed=%d", 4 * C, C);
                else ADD(nm, strstr(p, "c_fc") ? "embed=%d hidden=%d" : strstr(p, "c_attn") ? "embed=%d qkv=%d" : "embed=%d embed2=%d", C, out);
            } else ADD(nm, strstr(p, "c_fc") ? "hidden=%d" : strstr(p, "c_attn") ? "qkv=%d" : "embed=%d", out, 0);
        }
    ADD("ln_f.weight", "embed=%d", C, 0);
    ADD("ln_f.bias", "embed=%d", C, 0);
#undef ADD
    TJT_CHECK(tj_status_of(ctx) == TJ_OK, "building: %s", tj_error(ctx));
    TJT_CHECK(tj_tree_save(t, path_in("gpt2_tj.safetensors")) == TJ_OK, "save: %s", tj_error(ctx));
    st = tj_st_load(ctx, path_in("gpt2_tj.safetensors"));
    TJT_CHECK(st && tj_st_count(st) == N, "tensors: %s", tj_error(ctx));
    for (k = 0; st && k < n; k++) {
        const tj_st_tensor *x = tj_st_expect(st, names[k], TJ_ST_F32, e[k].rank, shapes[k]);
        if (!x || memcmp(x->data, data[k], x->nbytes) != 0) {
            fprintf(stderr, "%s: %s\n", names[k], tj_error(ctx));
            tj_clear_error(ctx);
            good = 0;
        }
    }
    TJT_CHECK(good, "every leaf is the HF-named tensor");
    tj_st_free(st);

    /* a foreign file with the same names, written with tj_st_save */
    TJT_CHECK(tj_st_save(ctx, path_in("gpt2_hf.safetensors"), e, n, meta, 1) == TJ_OK, "tj_st_save: %s", tj_error(ctx));
    u = tj_tree_new(ctx);
    TJT_CHECK(tj_tree_load(u, path_in("gpt2_hf.safetensors")) == TJ_OK, "foreign into empty: %s", tj_error(ctx));
    TJT_CHECK(tj_tree_size(u) == N && strcmp(tj_tree_name(u, 0), "wte.weight") == 0 && strcmp(tj_tree_name(u, N - 1), "ln_f.bias") == 0, "header order");
    TJT_CHECK(tj_array_dim(tj_tree_array(u, "wte.weight"), "d0") == V && tj_array_dim(tj_tree_array(u, "wte.weight"), "d1") == C, "default axis names");
    tj_tree_free(u);
    /* into a template: axis names from the tree, data from the file */
    u = tj_tree_new(ctx);
    for (k = 0; k < n; k++) {
        char sh[256];
        tj_tree_set_array(u, names[k], tj_zeros(ctx, TJ_F32, shape_of(tj_tree_array(t, names[k]), sh)));
    }
    TJT_CHECK(tj_tree_load(u, path_in("gpt2_hf.safetensors")) == TJ_OK, "foreign into template: %s", tj_error(ctx));
    ta = tree_text(t, 0);
    tu = tree_text(u, 0);
    TJT_CHECK(same_text(ta, tu), "template load equals the tree");
    free(tu);
    /* a template of another size is an error, and the tree is unchanged */
    tj_tree_set_array(u, "h.1.mlp.c_fc.bias", tj_zeros(ctx, TJ_F32, "hidden=17"));
    tu = tree_text(u, 1);
    TJT_CHECK(tj_tree_load(u, path_in("gpt2_hf.safetensors")) == TJ_ERR_SHAPE, "wrong template");
    TJT_ERROR_HAS(ctx, "leaf 'h.1.mlp.c_fc.bias'", "f32[hidden=17] in the tree", "f32[hidden=16] in the file", "gpt2_hf.safetensors");
    {
        char *after = tree_text(u, 1);
        TJT_CHECK(same_text(tu, after), "unchanged");
        free(after);
    }
    free(tu);
    free(ta);
    tj_tree_free(u);

    /* tj_st_array converts between dtypes; F16 cannot load into a tree as is */
    {
        uint16_t h16[3] = {0x3C00, 0xC000, 0x3800};
        int64_t s3 = 3;
        tj_st_entry f;
        tj_array *a;
        double got[3] = {0, 0, 0};
        f.name = "half";
        f.dtype = TJ_ST_F16;
        f.rank = 1;
        f.shape = &s3;
        f.data = h16;
        TJT_CHECK(tj_st_save(ctx, path_in("f16.safetensors"), &f, 1, NULL, 0) == TJ_OK, "save f16: %s", tj_error(ctx));
        st = tj_st_load(ctx, path_in("f16.safetensors"));
        a = tj_st_array(st, "half", TJ_F64, "k");
        TJT_CHECK(a && tj_array_read(a, TJ_F64, got) == TJ_OK && got[0] == 1 && got[1] == -2 && got[2] == 0.5, "f16 -> f64 %g %g %g", got[0], got[1], got[2]);
        tj_array_free(a);
        TJT_CHECK(tj_st_array(st, "half", TJ_F32, "k j") == NULL, "axis count");
        TJT_ERROR_HAS(ctx, "f16.safetensors", "2 axis names");
        TJT_CHECK(tj_st_array(st, "nope", TJ_F32, "k") == NULL, "missing tensor");
        TJT_ERROR_HAS(ctx, "no tensor named 'nope'");
        tj_st_free(st);
        u = tj_tree_new(ctx);
        TJT_CHECK(tj_tree_load(u, path_in("f16.safetensors")) == TJ_ERR_DTYPE && tj_tree_size(u) == 0, "f16 into tree");
        TJT_ERROR_HAS(ctx, "leaf 'half' has dtype F16");
        tj_tree_free(u);
        TJT_CHECK(tj_st_save(ctx, path_in("r.safetensors"), &f, 1, (const char *const[]){"tinyjax.checksum", "0"}, 1) == TJ_ERR_ARG, "reserved key");
        TJT_ERROR_HAS(ctx, "reserved");
    }
    for (k = 0; k < n; k++) free(data[k]);
    tj_tree_free(t);
}

/* The public file and text helpers of [A] that the safetensors code is
   built from (and demos/gpt2_io.h uses): whole-file read, atomic write,
   the string buffer, UTF-8, the JSON cursor. */
static void test_helpers(void) {
    char err[512], *data = NULL, *key = NULL, *str = NULL, u[4];
    size_t len = 0;
    tj_strbuf b = {NULL, 0, 0, 0};
    tj_json j;
    uint64_t u64 = 0;
    double d = 0;
    int first = 1, lit = 7, r, n = 0;
    uint32_t cp = 0;
    tjt_current = "helpers";
    /* files */
    TJT_CHECK(tj_write_file_atomic(path_in("h.txt"), "one\ntwo", 7, err, sizeof err) == TJ_OK, "write: %s", err);
    TJT_CHECK(tj_read_file(path_in("h.txt"), &data, &len, err, sizeof err) == TJ_OK && len == 7 && !memcmp(data, "one\ntwo", 8), "read back (NUL after)");
    tj_free(data);
    TJT_CHECK(tj_write_file_atomic(path_in("h.txt"), "", 0, err, sizeof err) == TJ_OK, "an empty write: %s", err);
    TJT_CHECK(tj_read_file(path_in("h.txt"), &data, &len, err, sizeof err) == TJ_OK && len == 0 && data && data[0] == 0, "an empty file");
    tj_free(data);
    TJT_CHECK(tj_read_file(path_in("absent"), &data, &len, err, sizeof err) == TJ_ERR_IO && !data && strstr(err, "absent") && strstr(err, "cannot open"),
              "a missing file: \"%s\"", err);
    TJT_CHECK(tj_read_file(g_dir, &data, &len, err, sizeof err) == TJ_ERR_IO && strstr(err, "is a directory"), "a directory: \"%s\"", err);
    TJT_CHECK(tj_write_file_atomic(path_in("no/such/dir/f"), "x", 1, err, sizeof err) == TJ_ERR_IO && strstr(err, "no/such/dir/f"),
              "a write into a missing directory: \"%s\"", err);
    TJT_CHECK(tj_write_file_atomic(g_dir, "x", 1, err, sizeof err) == TJ_ERR_IO && strstr(err, "is a directory"), "a write over a directory: \"%s\"", err);
    TJT_CHECK(tj_read_file(NULL, &data, &len, err, sizeof err) == TJ_ERR_ARG && strstr(err, "path"), "NULL path");
    TJT_CHECK(count_tmp_files() == 0, "temp files left: %d", count_tmp_files());
    /* string buffer and JSON escaping, read back by the JSON reader */
    tj_strbuf_puts(&b, "{\"k\": ");
    tj_strbuf_json(&b, "q\"b\\n\nt\t\x01 \xc3\xa9");
    tj_strbuf_printf(&b, ", \"n\": [%d, %.2f, %s]}", 42, -1.5, "null");
    TJT_CHECK(!b.oom && b.n == strlen(b.p), "strbuf");
    tj_json_init(&j, b.p, b.n, "buf", err, sizeof err);
    TJT_CHECK(tj_json_expect(&j, '{') == TJ_OK && tj_json_object_next(&j, &first, &key) == 1 && !strcmp(key, "k"), "first key");
    tj_free(key);
    TJT_CHECK(tj_json_cstring(&j, &str) == TJ_OK && !strcmp(str, "q\"b\\n\nt\t\x01 \xc3\xa9"), "escaped string round trip: %s", str ? str : err);
    tj_free(str);
    TJT_CHECK(tj_json_object_next(&j, &first, &key) == 1 && !strcmp(key, "n") && tj_json_expect(&j, '[') == TJ_OK, "second key");
    tj_free(key);
    first = 1;
    while ((r = tj_json_array_next(&j, &first)) == 1) {
        if (n == 0) TJT_CHECK(tj_json_u64(&j, &u64) == TJ_OK && u64 == 42, "u64");
        if (n == 1) TJT_CHECK(tj_json_number(&j, &d) == TJ_OK && d == -1.5, "number");
        if (n == 2) TJT_CHECK(tj_json_literal(&j, &lit) == TJ_OK && lit == -1, "null");
        n++;
    }
    TJT_CHECK(r == 0 && n == 3 && tj_json_object_next(&j, &first, &key) == 0 && tj_json_peek(&j) == -1, "the end");
    tj_strbuf_free(&b);
    TJT_CHECK(b.p == NULL && b.n == 0, "strbuf_free");
    /* errors name the label, the byte and the problem */
    tj_json_init(&j, "[1, 2,]", 7, "t.json", err, sizeof err);
    TJT_CHECK(tj_json_skip(&j) == TJ_ERR_IO && !strcmp(err, "t.json: bad JSON at byte 6: unexpected character"), "\"%s\"", err);
    tj_json_init(&j, "{\"a\": 01}", 9, "t.json", err, sizeof err);
    first = 1;
    TJT_CHECK(tj_json_expect(&j, '{') == TJ_OK && tj_json_object_next(&j, &first, &key) == 1 && tj_json_u64(&j, &u64) == TJ_ERR_IO &&
                  strstr(err, "leading zero"), "\"%s\"", err);
    tj_free(key);
    tj_json_init(&j, "\"\\ud800\"", 8, "t.json", err, sizeof err);
    TJT_CHECK(tj_json_string(&j, NULL, NULL) == TJ_ERR_IO && strstr(err, "unpaired surrogate"), "\"%s\"", err);
    tj_json_init(&j, "{}", 2, "t.json", err, sizeof err);
    TJT_CHECK(tj_json_fail(&j, "field %s: expected %d", "x", 3) == TJ_ERR_IO && !strcmp(err, "t.json: bad JSON at byte 0: field x: expected 3"), "\"%s\"", err);
    TJT_CHECK(tj_json_peek(NULL) == -1 && tj_json_skip(NULL) == TJ_ERR_ARG && tj_json_expect(NULL, '{') == TJ_ERR_ARG, "a NULL cursor");
    TJT_CHECK(tj_json_u64(&j, NULL) == TJ_ERR_ARG && !strcmp(err, "tj_json_u64: argument v is NULL"), "\"%s\"", err);
    TJT_CHECK(tj_json_object_next(&j, &first, NULL) == -1 && strstr(err, "argument key"), "\"%s\"", err);
    /* UTF-8 */
    TJT_CHECK(tj_utf8_encode(0x1F600, u) == 4 && tj_utf8_decode((const unsigned char *)u, 4, &cp) == 4 && cp == 0x1F600, "U+1F600 round trip");
    TJT_CHECK(tj_utf8_decode((const unsigned char *)"\xc0\xaf", 2, &cp) == 0 && tj_utf8_decode((const unsigned char *)"\xed\xa0\x80", 3, &cp) == 0 &&
                  tj_utf8_decode((const unsigned char *)"\xe2\x82", 2, &cp) == 0, "overlong, surrogate, truncated");
}

/* tj_prog_write_trace (built on tj_strbuf and the atomic writer): the file
   is valid JSON, with a track per device and one event per kernel */
static void trace_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    tj_tree_set_v(out, "y", tj_tanh(tj_mul(tj_tree_v(in, "x"), tj_tree_v(in, "x"))));
}
static void test_trace_file(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in = tj_tree_new(c), *out = tj_tree_new(c);
    tj_prog *p;
    char err[512], *data = NULL;
    size_t len = 0;
    tj_json j;
    tjt_current = "trace file";
    tj_set_profile(c, 1);
    tj_tree_set_array(in, "x", tj_full(c, TJ_F32, "i=4 k=2", 0.5));
    p = tj_jit(c, "trace", trace_fn, NULL, in, NULL);
    TJT_CHECK(p && !tj_run(p, in, out) && tj_prog_events(p, NULL, 0) > 0, "a profiled run: %s", tj_error(c));
    if (p) {
        TJT_CHECK(tj_prog_write_trace(p, path_in("trace.json")) == TJ_OK, "write: %s", tj_error(c));
        TJT_CHECK(tj_read_file(path_in("trace.json"), &data, &len, err, sizeof err) == TJ_OK, "read: %s", err);
        if (data) {
            tj_json_init(&j, data, len, "trace.json", err, sizeof err);
            TJT_CHECK(tj_json_skip(&j) == TJ_OK && tj_json_peek(&j) == -1, "not one JSON value: %s", err);
            TJT_CHECK(strstr(data, "{\"traceEvents\": [") == data && strstr(data, "\"thread_name\"") && strstr(data, "\"ph\": \"X\"") &&
                          strstr(data, "test_tree_io.c:"), "contents");
        }
        tj_free(data);
        TJT_CHECK(tj_prog_write_trace(p, g_dir) != TJ_OK, "a trace over a directory was written");
        TJT_ERROR_HAS(c, "is a directory");
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(c);
}

/* A load into a tree whose array leaves are sharded keeps their sharding
   (Orbax's restore with target shardings): each device gets its block, not
   the whole array, abstract targets included; mismatches name the leaf. */
static const struct {
    const char *name, *shape, *spec;
    int64_t shard_elems; /* each device's block on data=2 model=2 */
} g_sh_leaves[] = {
    {"w", "embed=8 mlp=4", "embed:data mlp:model", 8},
    {"b", "mlp=4", "mlp:model", 2},
    {"tok", "batch=8 pos=3", "batch:model+data", 6}, /* a tuple out of mesh order */
    {"s", "k=5", "", 5},                             /* replicated stays replicated */
};
#define NSH ((int)(sizeof g_sh_leaves / sizeof g_sh_leaves[0]))
static tj_tree *sharded_target(tj_ctx *c, int abstract) {
    tj_tree *t = tj_tree_new(c);
    int i;
    for (i = 0; i < NSH; i++) {
        tj_dtype dt = i == 2 ? TJ_I32 : TJ_F32;
        tj_array *z = abstract ? tj_array_abstract(c, dt, g_sh_leaves[i].shape, g_sh_leaves[i].spec) : tj_zeros(c, dt, g_sh_leaves[i].shape), *p;
        if (abstract) p = z;
        else {
            p = tj_device_put(z, g_sh_leaves[i].spec);
            tj_array_free(z);
        }
        tj_tree_set_array(t, g_sh_leaves[i].name, p);
    }
    return t;
}
static void test_sharded_load(void) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *src, *t;
    float *want[NSH], *got;
    char b1[128], b2[128];
    int i, d, abstract;
    tjt_current = "sharded load";
    TJT_CHECK(tj_set_devices(c, 4) == TJ_OK && tj_set_mesh(c, "data=2 model=2") == TJ_OK, "mesh: %s", tj_error(c));
    /* the saved state: random values, sharded */
    src = sharded_target(c, 0);
    for (i = 0; i < NSH; i++) {
        tj_array *a = tj_tree_array(src, g_sh_leaves[i].name), *r, *p;
        int64_t n = tj_array_numel(a), k;
        want[i] = (float *)malloc(sizeof(float) * (size_t)n);
        for (k = 0; k < n; k++) want[i][k] = i == 2 ? (float)(int)(rnd() % 1000) - 500 : (float)(rnd() % 100000) / 1000.0f - 50;
        if (i == 2) {
            int32_t *iv = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
            for (k = 0; k < n; k++) iv[k] = (int32_t)want[i][k];
            r = tj_array_new(c, TJ_I32, g_sh_leaves[i].shape, iv);
            free(iv);
        } else r = tj_array_new(c, TJ_F32, g_sh_leaves[i].shape, want[i]);
        p = tj_device_put(r, g_sh_leaves[i].spec);
        tj_array_free(r);
        tj_tree_set_array(src, g_sh_leaves[i].name, p);
    }
    tj_tree_set_int(src, "step", 7);
    TJT_CHECK(tj_tree_save(src, path_in("sharded.safetensors")) == TJ_OK, "save: %s", tj_error(c));
    tj_tree_free(src);
    for (abstract = 0; abstract < 2; abstract++) {
        tj_alloc_stats s0, s1;
        t = sharded_target(c, abstract);
        s0 = tj_get_alloc_stats(c);
        tj_reset_alloc_peaks(c);
        TJT_CHECK(tj_tree_load(t, path_in("sharded.safetensors")) == TJ_OK && tj_tree_int(t, "step") == 7, "load (abstract %d): %s", abstract, tj_error(c));
        s1 = tj_get_alloc_stats(c);
        for (d = 0; d < 4; d++) {
            int64_t shard = 0;
            for (i = 0; i < NSH; i++) shard += g_sh_leaves[i].shard_elems * 4;
            /* each device holds its blocks only: the whole state would be 32+4+24+5 elements */
            TJT_CHECK(s1.device_bytes[d] == shard, "abstract %d: device %d holds %lld bytes, its blocks are %lld", abstract, d, (long long)s1.device_bytes[d],
                      (long long)shard);
            TJT_CHECK(s1.device_peak_bytes[d] <= s0.device_bytes[d] + shard, "abstract %d: device %d peaked at %lld bytes while loading (had %lld, blocks %lld)",
                      abstract, d, (long long)s1.device_peak_bytes[d], (long long)s0.device_bytes[d], (long long)shard);
        }
        for (i = 0; i < NSH; i++) {
            tj_array *a = tj_tree_array(t, g_sh_leaves[i].name);
            int64_t n = tj_array_numel(a), k, bad = 0;
            const char *spec = g_sh_leaves[i].spec;
            got = (float *)malloc(sizeof(float) * (size_t)n);
            tj_array_sharding(a, b1, sizeof b1);
            /* what tj_device_put writes for the spec */
            {
                tj_array *z = tj_zeros(c, TJ_F32, g_sh_leaves[i].shape), *p = tj_device_put(z, spec);
                tj_array_sharding(p, b2, sizeof b2);
                tj_array_free(z);
                tj_array_free(p);
            }
            TJT_CHECK(!strcmp(b1, b2) && !tj_array_is_abstract(a), "abstract %d: leaf %s is sharded \"%s\", the target \"%s\"", abstract, g_sh_leaves[i].name, b1, b2);
            TJT_CHECK(tj_array_read(a, TJ_F32, got) == TJ_OK, "read %s: %s", g_sh_leaves[i].name, tj_error(c));
            for (k = 0; k < n; k++) bad += got[k] != want[i][k];
            TJT_CHECK(bad == 0, "abstract %d: leaf %s: %lld values differ from the saved ones", abstract, g_sh_leaves[i].name, (long long)bad);
            free(got);
        }
        tj_tree_free(t);
    }
    /* mismatches on a sharded target name the leaf; the tree is unchanged */
    t = sharded_target(c, 0);
    {
        tj_array *w = tj_zeros(c, TJ_F64, "embed=8 mlp=4"), *p = tj_device_put(w, "embed:data mlp:model");
        tj_array *old;
        tj_array_free(w);
        tj_tree_set_array(t, "w", p);
        old = tj_tree_array(t, "w");
        TJT_CHECK(tj_tree_load(t, path_in("sharded.safetensors")) == TJ_ERR_DTYPE && tj_tree_array(t, "w") == old && tj_tree_find(t, "step") < 0, "dtype mismatch");
        TJT_ERROR_HAS(c, "leaf 'w'", "f64 in the tree but f32 in the file");
        w = tj_zeros(c, TJ_F32, "embed=8 mlp=2");
        p = tj_device_put(w, "embed:data mlp:model");
        tj_array_free(w);
        tj_tree_set_array(t, "w", p);
        TJT_CHECK(tj_tree_load(t, path_in("sharded.safetensors")) == TJ_ERR_SHAPE && tj_tree_array(t, "w") == p, "shape mismatch");
        TJT_ERROR_HAS(c, "leaf 'w'", "mlp=2", "mlp=4");
        tj_clear_error(c);
    }
    tj_tree_free(t);
    /* a target sharded under an earlier mesh: its sharding means nothing now */
    t = sharded_target(c, 0);
    TJT_CHECK(tj_set_mesh(c, "data=4") == TJ_OK, "mesh data=4: %s", tj_error(c));
    TJT_CHECK(tj_tree_load(t, path_in("sharded.safetensors")) == TJ_ERR_STATE, "a stale sharding was loaded into");
    TJT_ERROR_HAS(c, "leaf 'w'", "earlier mesh");
    tj_clear_error(c);
    tj_tree_free(t);
    for (i = 0; i < NSH; i++) free(want[i]);
    TJT_CHECK(tj_get_alloc_stats(c).array_bytes == 0, "array bytes leaked: %lld", (long long)tj_get_alloc_stats(c).array_bytes);
    tj_ctx_free(c);
}

int main(void) {
    tj_ctx *ctx = tj_ctx_new();
    if (make_dir("test_tree_io")) return 1;
    test_roundtrip(ctx);
    test_mismatch(ctx);
    test_corrupt(ctx);
    test_atomic(ctx);
    test_gpt2_names(ctx);
    test_sharded_load();
    test_helpers();
    test_trace_file();
    tjt_current = "end";
    TJT_CHECK(tj_get_alloc_stats(ctx).array_bytes == 0, "array bytes leaked: %lld", (long long)tj_get_alloc_stats(ctx).array_bytes);
    remove_dir();
    tj_ctx_free(ctx);
    return tjt_finish();
}
