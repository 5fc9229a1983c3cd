/* Tests for demos/gpt2_io.h and the safetensors files it relies on (which
 * tinyjax.h implements).  Writes every file it needs into a fresh mkdtemp
 * directory and removes it afterwards.
 *   gcc -std=c99 -O2 -Wall -Wextra -Werror -I. -o /tmp/tgio tests/test_gpt2_io.c tests/tj_impl.c -lm -pthread && /tmp/tgio
 * The last line printed is "N passed, M failed"; exit status is nonzero on failure. */
#define _POSIX_C_SOURCE 200809L
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#define GPT2_IO_IMPLEMENTATION /* here: the tests reach its statics (gio__*) */
#include "../demos/gpt2_io.h"
#define TJT_FILES
#include "tj_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

/* CHECK(c) is one check; CHECKE(c, msg) also prints msg (an error message,
   evaluated after c) when it fails */
#define CHECK(c) TJT_CHECK((c) != 0, "check failed: %s", #c)
#define CHECKE(c, msg)                                                \
    do {                                                              \
        int ok_ = (c) != 0;                                           \
        const char *msg_ = (msg);                                     \
        TJT_CHECK(ok_, "check failed: %s  -- %s", #c, msg_ ? msg_ : ""); \
    } while (0)

static int dir_has_tmp_files(void) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    int found = 0;
    if (!d) return 1;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp.")) found = 1;
    closedir(d);
    return found;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

static int write_raw(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    size_t w;
    if (!f) return 1;
    w = fwrite(p, 1, n, f);
    fclose(f);
    return w != n;
}

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* ------------------------------------------------------------------ */
/* Safetensors is tinyjax's (tj_st_*); these are gio's original format tests,
   kept against the one implementation the demo uses. */

static tj_ctx *g_ctx;
/* the context's error message, then clear it (for CHECKE) */
static const char *tjerr(void) {
    static char m[1100];
    snprintf(m, sizeof m, "%s", tj_error(g_ctx));
    tj_clear_error(g_ctx);
    return m;
}

static void test_dtypes(void) {
    CHECK(tj_st_dtype_size(TJ_ST_F32) == 4 && tj_st_dtype_size(TJ_ST_BF16) == 2 && tj_st_dtype_size(TJ_ST_F16) == 2);
    CHECK(tj_st_dtype_size(TJ_ST_I64) == 8 && tj_st_dtype_size(TJ_ST_U8) == 1 && tj_st_dtype_size(TJ_ST_F64) == 8);
    CHECK(tj_st_dtype_size((tj_st_dtype)99) == 0);
    CHECK(tj_st_dtype_from_name("BF16") == TJ_ST_BF16);
    CHECK(tj_st_dtype_from_name("U16") == TJ_ST_U16);
    CHECK(tj_st_dtype_from_name("f32") == TJ_ST_NDTYPE);
    CHECK(strcmp(tj_st_dtype_name(TJ_ST_I32), "I32") == 0);
    CHECK(tj_st_dtype_of(TJ_BF16) == TJ_ST_BF16 && tj_st_dtype_of(TJ_F64) == TJ_ST_F64);
}

/* Round trip of every dtype at ranks 0..4 plus odd names and metadata. */
static void test_st_roundtrip(void) {
    enum { NT = TJ_ST_NDTYPE * 5 + 2 };
    tj_st_entry e[NT];
    int64_t shapes[NT][4];
    unsigned char *data[NT];
    char names[NT][64];
    const char *meta[] = {"format", "pt", "quote\"back\\slash", "tab\there\nnewline", "unicode", "h\xc3\xa9llo \xe2\x9c\x93"};
    tj_safetensors *st;
    int i, k, n = 0;
    unsigned char hdr8[8];
    FILE *f;

    for (i = 0; i < TJ_ST_NDTYPE * 5; i++) {
        tj_st_dtype dt = (tj_st_dtype)(i / 5);
        int rank = i % 5;
        size_t numel = 1, nb, b;
        for (k = 0; k < rank; k++) { shapes[n][k] = 1 + (i + k) % 3; numel *= (size_t)shapes[n][k]; }
        nb = numel * tj_st_dtype_size(dt);
        data[n] = (unsigned char *)malloc(nb);
        for (b = 0; b < nb; b++) data[n][b] = (unsigned char)(rnd() & 0xFF);
        snprintf(names[n], sizeof names[n], "t.%s.rank%d", tj_st_dtype_name(dt), rank);
        e[n].name = names[n];
        e[n].dtype = dt;
        e[n].rank = rank;
        e[n].shape = rank ? shapes[n] : NULL;
        e[n].data = data[n];
        n++;
    }
    /* zero-sized tensor and a name needing JSON escapes */
    shapes[n][0] = 0; shapes[n][1] = 3;
    data[n] = NULL;
    snprintf(names[n], sizeof names[n], "empty");
    e[n].name = names[n]; e[n].dtype = TJ_ST_F32; e[n].rank = 2; e[n].shape = shapes[n]; e[n].data = NULL;
    n++;
    shapes[n][0] = 2;
    data[n] = (unsigned char *)malloc(2);
    data[n][0] = 7; data[n][1] = 9;
    snprintf(names[n], sizeof names[n], "we\"ird\\name/\xc3\xbc\x01");
    e[n].name = names[n]; e[n].dtype = TJ_ST_U8; e[n].rank = 1; e[n].shape = shapes[n]; e[n].data = data[n];
    n++;

    CHECKE(tj_st_save(g_ctx, path_in("rt.safetensors"), e, n, meta, 3) == TJ_OK, tjerr());
    CHECK(!dir_has_tmp_files());
    f = fopen(path_in("rt.safetensors"), "rb");
    CHECK(f && fread(hdr8, 1, 8, f) == 8);
    if (f) fclose(f);
    {
        uint64_t hl = 0;
        for (k = 7; k >= 0; k--) hl = (hl << 8) | hdr8[k];
        CHECK((8 + hl) % 8 == 0);
    }

    st = tj_st_load(g_ctx, path_in("rt.safetensors"));
    CHECKE(st != NULL, tjerr());
    if (st) {
        CHECK(tj_st_count(st) == n);
        for (i = 0; i < n; i++) {
            const tj_st_tensor *t = tj_st_find(st, names[i]);
            int good = t != NULL;
            if (!good) { printf("missing tensor %s\n", names[i]); CHECK(t != NULL); continue; }
            good = good && t->dtype == e[i].dtype && t->rank == e[i].rank;
            for (k = 0; good && k < e[i].rank; k++) good = t->shape[k] == e[i].shape[k];
            good = good && (t->nbytes == 0 || memcmp(t->data, e[i].data, t->nbytes) == 0);
            /* writer promises natural alignment */
            good = good && ((uintptr_t)t->data % tj_st_dtype_size(t->dtype)) == 0;
            if (!good) printf("tensor %s mismatch\n", names[i]);
            CHECK(good);
        }
        CHECK(strcmp(tj_st_at(st, 0)->name, names[0]) == 0);   /* header order kept */
        CHECK(tj_st_at(st, n) == NULL && tj_st_at(st, -1) == NULL);
        CHECK(tj_st_find(st, "nope") == NULL);
        CHECK(tj_st_find(st, "empty") && tj_st_find(st, "empty")->nbytes == 0);
        CHECK(tj_st_meta_count(st) == 3 && strcmp(tj_st_meta_key(st, 1), "quote\"back\\slash") == 0);
        CHECK(tj_st_meta(st, "format") && strcmp(tj_st_meta(st, "format"), "pt") == 0);
        CHECK(tj_st_meta(st, "quote\"back\\slash") &&
              strcmp(tj_st_meta(st, "quote\"back\\slash"), "tab\there\nnewline") == 0);
        CHECK(tj_st_meta(st, "unicode") && strcmp(tj_st_meta(st, "unicode"), "h\xc3\xa9llo \xe2\x9c\x93") == 0);
        CHECK(tj_st_meta(st, "missing") == NULL);
        CHECK(tj_status_of(g_ctx) == TJ_OK);
        {
            int64_t want[2] = {0, 3}, bad[2] = {0, 4};
            CHECKE(tj_st_expect(st, "empty", TJ_ST_F32, 2, want) != NULL, tjerr());
            CHECK(tj_st_expect(st, "empty", TJ_ST_F32, 2, bad) == NULL &&
                  contains(tj_error(g_ctx), "'empty' has shape [0,3], want [0,4]") && contains(tj_error(g_ctx), "rt.safetensors"));
            tj_clear_error(g_ctx);
            CHECK(tj_st_expect(st, "empty", TJ_ST_F16, 2, want) == NULL && contains(tj_error(g_ctx), "dtype F32, want F16"));
            tj_clear_error(g_ctx);
            CHECK(tj_st_expect(st, "empty", TJ_ST_F32, 1, NULL) == NULL && contains(tj_error(g_ctx), "rank 1"));
            tj_clear_error(g_ctx);
            CHECK(tj_st_expect(st, "absent", TJ_ST_F32, 1, NULL) == NULL && contains(tj_error(g_ctx), "no tensor named 'absent'"));
            tj_clear_error(g_ctx);
        }
        tj_st_free(st);
    }
    /* Overwrite must replace atomically and leave no temp files behind. */
    CHECKE(tj_st_save(g_ctx, path_in("rt.safetensors"), e, 1, NULL, 0) == TJ_OK, tjerr());
    st = tj_st_load(g_ctx, path_in("rt.safetensors"));
    CHECKE(st && tj_st_count(st) == 1 && tj_st_meta_count(st) == 0, tjerr());
    tj_st_free(st);
    CHECK(!dir_has_tmp_files());

    /* writer input validation */
    {
        tj_st_entry dup[2];
        int64_t neg = -1;
        dup[0] = e[0];
        dup[1] = e[0];
        CHECK(tj_st_save(g_ctx, path_in("bad.safetensors"), dup, 2, NULL, 0) != TJ_OK && contains(tjerr(), "duplicate tensor name"));
        dup[0].name = "__metadata__";
        CHECK(tj_st_save(g_ctx, path_in("bad.safetensors"), dup, 1, NULL, 0) != TJ_OK && contains(tjerr(), "invalid name"));
        dup[0] = e[n - 1];
        dup[0].shape = &neg;
        CHECK(tj_st_save(g_ctx, path_in("bad.safetensors"), dup, 1, NULL, 0) != TJ_OK && contains(tjerr(), "negative"));
        dup[0] = e[n - 1];
        dup[0].data = NULL;
        CHECK(tj_st_save(g_ctx, path_in("bad.safetensors"), dup, 1, NULL, 0) != TJ_OK && contains(tjerr(), "NULL data"));
        CHECK(tj_st_save(g_ctx, path_in("no/such/dir/x.safetensors"), e, 1, NULL, 0) == TJ_ERR_IO && contains(tjerr(), "cannot create"));
        CHECK(access(path_in("bad.safetensors"), F_OK) != 0);
    }
    for (i = 0; i < n; i++) free(data[i]);
}

static void test_to_f32(void) {
    tj_st_tensor t;
    float out[5];
    unsigned char f16[10] = {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00, 0x00, 0x7C, 0x00, 0x00};
    unsigned char bf16[4] = {0x80, 0x3F, 0x40, 0xC0};
    unsigned char i8[2] = {0xFF, 0x05};
    double d = -3.25;
    memset(&t, 0, sizeof t);
    t.dtype = TJ_ST_F16; t.numel = 5; t.data = f16;
    CHECK(tj_st_to_f32(&t, out) == TJ_OK);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] > 5.9e-8f && out[2] < 6.0e-8f && out[3] > 1e38f && out[4] == 0.0f);
    t.dtype = TJ_ST_BF16; t.numel = 2; t.data = bf16;
    CHECK(tj_st_to_f32(&t, out) == TJ_OK && out[0] == 1.0f && out[1] == -3.0f);
    t.dtype = TJ_ST_I8; t.numel = 2; t.data = i8;
    CHECK(tj_st_to_f32(&t, out) == TJ_OK && out[0] == -1.0f && out[1] == 5.0f);
    t.dtype = TJ_ST_F64; t.numel = 1; t.data = &d;
    CHECK(tj_st_to_f32(&t, out) == TJ_OK && out[0] == -3.25f);
}

/* Builds an in-memory safetensors file from a literal header and zeroed data. */
static unsigned char *make_st(const char *header, size_t data_len, size_t *len) {
    size_t hl = strlen(header), k;
    unsigned char *b = (unsigned char *)calloc(1, 8 + hl + data_len + 1);
    for (k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)hl >> (8 * k));
    memcpy(b + 8, header, hl);
    *len = 8 + hl + data_len;
    return b;
}

static int parse_err(const char *header, size_t data_len, const char *want, char *err, size_t errlen) {
    tj_safetensors *st;
    size_t len;
    unsigned char *b = make_st(header, data_len, &len);
    st = tj_st_parse(g_ctx, b, len, "x.safetensors");
    free(b);
    snprintf(err, errlen, "%s", tj_error(g_ctx));
    tj_clear_error(g_ctx);
    if (st) { tj_st_free(st); snprintf(err, errlen, "unexpectedly parsed"); return 0; }
    if (!contains(err, want) || !contains(err, "x.safetensors")) return 0;
    return 1;
}

static void test_st_bad(void) {
    char err[1100];
    tj_safetensors *st;
    unsigned char hdr[16] = {0x7F, 0x96, 0x98, 0, 0, 0, 0, 0, '{', '}'};  /* 9999999 */
    size_t len;
    unsigned char *b;
    char deep[1200];
    int i;

    CHECK(tj_st_parse(g_ctx, hdr, 16, "model.safetensors") == NULL &&
          contains(tjerr(), "model.safetensors: header length 9999999 exceeds file size 16"));
    CHECK(tj_st_parse(g_ctx, hdr, 5, "model.safetensors") == NULL && contains(tjerr(), "too short"));
    CHECK(tj_st_load(g_ctx, path_in("does_not_exist.safetensors")) == NULL &&
          contains(tjerr(), "does_not_exist.safetensors: cannot open"));

    b = make_st("{}", 0, &len);
    st = tj_st_parse(g_ctx, b, len, "empty");
    CHECKE(st && tj_st_count(st) == 0, tjerr());
    tj_st_free(st);
    free(b);
    b = make_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}    ", 8, &len);
    st = tj_st_parse(g_ctx, b, len, "ok");
    CHECKE(st && tj_st_count(st) == 1, tjerr());
    tj_st_free(st);
    free(b);

    CHECKE(parse_err("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unsupported dtype \"Q4\"", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "span 8 bytes, but F32 shape needs 12", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "outside the data section", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "4 trailing bytes", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "hole", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlaps", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                     "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, "duplicate tensor name 'a'", err, sizeof err), err);
    CHECKE(parse_err(" {}", 0, "must start with '{'", err, sizeof err), err);
    CHECKE(parse_err("{\"__metadata__\":{\"k\":1}}", 0, "not a string", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "missing data_offsets", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1, "2 entries", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, "non-negative integer", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 1, "fraction", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "rank exceeds", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,1]}}", 1, "overflows", err, sizeof err), err);
    CHECKE(parse_err("{\"a\\q\":{}}", 0, "bad escape", err, sizeof err), err);
    CHECKE(parse_err("{\"\\ud800\":{}}", 0, "unpaired surrogate", err, sizeof err), err);
    CHECKE(parse_err("{\"a\\u0000b\":{}}", 0, "\\u0000", err, sizeof err), err);
    CHECKE(parse_err("{\"\xff\":{}}", 0, "invalid UTF-8", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}} x", 1, "trailing garbage", err, sizeof err), err);
    CHECKE(parse_err("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},}", 1, "expected string", err, sizeof err), err);
    /* tinyjax's checksum must be first in __metadata__, and match */
    CHECKE(parse_err("{\"__metadata__\":{\"a\":\"b\",\"tinyjax.checksum\":\"0000000000000000\"}}", 0, "not where tinyjax writes it", err, sizeof err), err);
    CHECKE(parse_err("{\"__metadata__\":{\"tinyjax.checksum\":\"0000000000000000\"}}", 0, "checksum 0000000000000000 does not match", err, sizeof err), err);
    /* Unknown fields are skipped, but nesting is bounded. */
    strcpy(deep, "{\"a\":{\"x\":");
    for (i = 0; i < 1000; i++) strcat(deep, "[");
    CHECKE(parse_err(deep, 0, "nesting too deep", err, sizeof err), err);
    b = make_st("{\"a\":{\"x\":[1,-2.5e+3,true,null,{\"y\":\"z\"}],\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1, &len);
    st = tj_st_parse(g_ctx, b, len, "ok");
    CHECKE(st && tj_st_at(st, 0)->rank == 0, tjerr());
    tj_st_free(st);
    free(b);
}

/* Every prefix of a valid file must be rejected, and random byte flips must
   never crash (ASan/UBSan builds catch out-of-bounds reads). */
static void test_st_fuzz(void) {
    const char *path = path_in("fuzz.safetensors");
    tj_st_entry e[3];
    int64_t s0[2] = {2, 3}, s1[1] = {5};
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[5] = {1, 2, 3, 4, 5};
    const char *meta[] = {"k\\u", "v\"x"};
    char *file, err[512];
    size_t len, cut;
    int bad_trunc = 0, bad_msg = 0, it, parsed_ok = 0;
    tj_safetensors *st;

    e[0].name = "h.0.attn.c_attn.weight"; e[0].dtype = TJ_ST_F32; e[0].rank = 2; e[0].shape = s0; e[0].data = a;
    e[1].name = "b\xc3\xa9"; e[1].dtype = TJ_ST_BF16; e[1].rank = 1; e[1].shape = s1; e[1].data = h;
    e[2].name = "scalar"; e[2].dtype = TJ_ST_U8; e[2].rank = 0; e[2].shape = NULL; e[2].data = "z";
    CHECKE(tj_st_save(g_ctx, path, e, 3, meta, 1) == TJ_OK, tjerr());
    CHECKE(tj_read_file(path, &file, &len, err, sizeof err) == 0, err);
    if (!file) return;
    st = tj_st_parse(g_ctx, file, len, "fuzz");
    CHECKE(st != NULL, tjerr());
    tj_st_free(st);

    for (cut = 0; cut < len; cut++) {
        /* Copy to an exact-size block so ASan sees any read past the cut. */
        char *p = (char *)malloc(cut ? cut : 1);
        memcpy(p, file, cut);
        if ((st = tj_st_parse(g_ctx, p, cut, "fuzz")) != NULL) { bad_trunc++; tj_st_free(st); }
        else if (!contains(tj_error(g_ctx), "fuzz: ")) bad_msg++;
        tj_clear_error(g_ctx);
        free(p);
    }
    CHECK(bad_trunc == 0);
    CHECK(bad_msg == 0);

    for (it = 0; it < 4000; it++) {
        char *p = (char *)malloc(len);
        int flips = 1 + (int)(rnd() % 4), f;
        memcpy(p, file, len);
        for (f = 0; f < flips; f++) {
            size_t at = (it & 1) ? 8 + rnd() % 120 : rnd() % len;   /* bias towards the header */
            if (at >= len) at = rnd() % len;
            p[at] = (char)(rnd() & 0xFF);
        }
        if ((st = tj_st_parse(g_ctx, p, len, "fuzz")) != NULL) {
            int k;
            parsed_ok++;
            /* Whatever parsed must be internally consistent. */
            for (k = 0; k < tj_st_count(st); k++) {
                const tj_st_tensor *t = tj_st_at(st, k);
                const unsigned char *d = (const unsigned char *)t->data, *begin, *end;
                tjt_st_data_section(st, &begin, &end);
                if (d < begin || d + t->nbytes > end) bad_trunc++;
                if (tj_st_find(st, t->name) != t) bad_trunc++;
            }
            tj_st_free(st);
        } else if (!contains(tj_error(g_ctx), "fuzz: ")) {
            bad_msg++;
        }
        tj_clear_error(g_ctx);
        free(p);
    }
    CHECK(bad_trunc == 0);
    CHECK(bad_msg == 0);
    CHECK(parsed_ok > 0);   /* flips in the data section are legal */
    free(file);
}

/* Tensor names and layout as in Hugging Face's gpt2 model.safetensors, with
   and without the "transformer." prefix. */
static void test_st_gpt2_names(void) {
    static const char *per_layer[] = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
        "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
        "mlp.c_proj.weight", "mlp.c_proj.bias"};
    enum { L = 12, C = 4, V = 10, T = 6, N = 4 + L * 12 };
    int pass;
    for (pass = 0; pass < 2; pass++) {
        const char *prefix = pass ? "transformer." : "";
        char names[N][64];
        int64_t shapes[N][2];
        tj_st_entry e[N];
        float *data[N];
        int n = 0, l, k, good = 1;
        const char *meta[] = {"format", "pt"};
        tj_safetensors *st;
        const char *path = path_in(pass ? "gpt2_prefixed.safetensors" : "gpt2.safetensors");

#define ADD(nm, r, d0, d1)                                                    \
    do {                                                                      \
        size_t ne_ = (size_t)(d0) * (size_t)((r) == 2 ? (d1) : 1), q_;        \
        snprintf(names[n], 64, "%s%s", prefix, nm);                           \
        shapes[n][0] = d0; shapes[n][1] = d1;                                 \
        data[n] = (float *)malloc(sizeof(float) * ne_);                       \
        for (q_ = 0; q_ < ne_; q_++) data[n][q_] = (float)n + 0.001f * (float)q_; \
        e[n].name = names[n]; e[n].dtype = TJ_ST_F32; e[n].rank = r;          \
        e[n].shape = shapes[n]; e[n].data = data[n]; n++;                     \
    } while (0)
        ADD("wte.weight", 2, V, C);
        ADD("wpe.weight", 2, T, C);
        for (l = 0; l < L; l++)
            for (k = 0; k < 12; k++) {
                char nm[48];
                const char *p = per_layer[k];
                int r = contains(p, "weight") && !contains(p, "ln_") ? 2 : 1;
                int d0 = contains(p, "mlp.c_proj.weight") ? 4 * C : C;
                int d1 = contains(p, "c_attn") ? 3 * C : contains(p, "c_fc") ? 4 * C : C;
                if (r == 1) d0 = contains(p, "c_attn") ? 3 * C : contains(p, "c_fc") ? 4 * C : C;
                snprintf(nm, sizeof nm, "h.%d.%s", l, p);
                ADD(nm, r, d0, d1);
            }
        ADD("ln_f.weight", 1, C, 0);
        ADD("ln_f.bias", 1, C, 0);
#undef ADD
        CHECKE(tj_st_save(g_ctx, path, e, n, meta, 1) == TJ_OK, tjerr());
        st = tj_st_load(g_ctx, path);
        CHECKE(st != NULL, tjerr());
        if (st) {
            CHECK(tj_st_count(st) == N);
            for (k = 0; k < n; k++) {
                const tj_st_tensor *t = tj_st_expect(st, names[k], TJ_ST_F32, e[k].rank, shapes[k]);
                if (!t || memcmp(t->data, data[k], t->nbytes) != 0) {
                    printf("%s\n", tjerr());
                    good = 0;
                }
            }
            CHECK(good);
            CHECK(tj_st_find(st, pass ? "h.0.attn.c_attn.weight" : "transformer.h.0.attn.c_attn.weight") == NULL);
            {
                char nm[64];
                int64_t want[2] = {C, 3 * C};
                snprintf(nm, sizeof nm, "%sh.11.attn.c_attn.weight", prefix);
                CHECKE(tj_st_expect(st, nm, TJ_ST_F32, 2, want) != NULL, tjerr());
            }
            CHECK(tj_st_meta(st, "format") && strcmp(tj_st_meta(st, "format"), "pt") == 0);
            tj_st_free(st);
        }
        for (k = 0; k < n; k++) free(data[k]);
    }
}
/* ------------------------------------------------------------------ */

static void put_le32(unsigned char *p, uint32_t v) {
    int k;
    for (k = 0; k < 4; k++) p[k] = (unsigned char)(v >> (8 * k));
}

/* version 2 (uint32 tokens, vocabularies over 65,535) and llm.c's Llama 3
   files (magic 20240801, version 7, uint32) */
static void test_tokens_v2(int32_t big) {
    int32_t toks[5], *got = NULL;
    size_t n = 0, len;
    char err[512], *file;
    unsigned char raw[1024 + 8];
    toks[0] = big;
    toks[1] = 0;
    toks[2] = 65535;
    toks[3] = 128255;
    toks[4] = 0x7fffffff;
    CHECKE(gio_tokens_write(path_in("v2.bin"), toks, 5, err, sizeof err) == 0, err);
    CHECK(tj_read_file(path_in("v2.bin"), &file, &len, err, sizeof err) == 0 && len == 1024 + 4 * 5 && file[4] == 2);
    free(file);
    CHECKE(gio_tokens_read(path_in("v2.bin"), &got, &n, err, sizeof err) == 0, err);
    CHECK(n == 5 && got && got[0] == big && got[1] == 0 && got[2] == 65535 && got[3] == 128255 && got[4] == 0x7fffffff);
    free(got);
    memset(raw, 0, sizeof raw);
    put_le32(raw, 20240801);
    put_le32(raw + 4, 7);
    put_le32(raw + 8, 2);
    put_le32(raw + 1024, 128000);
    put_le32(raw + 1028, 17);
    write_raw(path_in("llama3.bin"), raw, sizeof raw);
    CHECKE(gio_tokens_read(path_in("llama3.bin"), &got, &n, err, sizeof err) == 0, err);
    CHECK(n == 2 && got && got[0] == 128000 && got[1] == 17);
    free(got);
    put_le32(raw + 4, 1);
    write_raw(path_in("llama3v1.bin"), raw, sizeof raw);
    CHECK(gio_tokens_read(path_in("llama3v1.bin"), &got, &n, err, sizeof err) != 0 && contains(err, "version 1") && got == NULL);
    put_le32(raw, 20240520);
    put_le32(raw + 4, 2);
    put_le32(raw + 1028, 0x80000000u);
    write_raw(path_in("v2big.bin"), raw, sizeof raw);
    CHECK(gio_tokens_read(path_in("v2big.bin"), &got, &n, err, sizeof err) != 0 && contains(err, "token 1 = 2147483648") && got == NULL);
    write_raw(path_in("v2trunc.bin"), raw, sizeof raw - 2);
    CHECK(gio_tokens_read(path_in("v2trunc.bin"), &got, &n, err, sizeof err) != 0 && contains(err, "truncated"));
    /* a version 1 header on uint32 data is a size mismatch, not garbage */
    put_le32(raw + 4, 1);
    write_raw(path_in("v1of4.bin"), raw, sizeof raw);
    CHECK(gio_tokens_read(path_in("v1of4.bin"), &got, &n, err, sizeof err) != 0 && contains(err, "count mismatch"));
}

static void test_tokens(void) {
    enum { NTOK = 1000 };
    int32_t toks[NTOK], *got = NULL, bad = 70000;
    size_t n = 0, len, i;
    char err[512], *file;
    const char *p = path_in("tokens.bin");
    int same = 1;
    for (i = 0; i < NTOK; i++) toks[i] = (int32_t)((i * 7919u) % 65536u);
    toks[0] = 65535;
    toks[1] = 0;
    CHECKE(gio_tokens_write(p, toks, NTOK, err, sizeof err) == 0, err);
    CHECKE(gio_tokens_read(p, &got, &n, err, sizeof err) == 0, err);
    CHECK(n == NTOK);
    for (i = 0; got && i < n && i < NTOK; i++) same &= got[i] == toks[i];
    CHECK(got && same);
    free(got);

    CHECK(tj_read_file(p, &file, &len, err, sizeof err) == 0 && len == 1024 + 2 * NTOK);
    CHECK((unsigned char)file[0] == (20240520 & 0xFF) && file[4] == 1);

    put_le32((unsigned char *)file, 12345);
    write_raw(path_in("badmagic.bin"), file, len);
    CHECK(gio_tokens_read(path_in("badmagic.bin"), &got, &n, err, sizeof err) != 0 &&
          contains(err, "badmagic.bin: bad magic 12345 (want 20240520") && got == NULL && n == 0);
    put_le32((unsigned char *)file, 20240520);
    put_le32((unsigned char *)file + 4, 3);
    write_raw(path_in("badver.bin"), file, len);
    CHECK(gio_tokens_read(path_in("badver.bin"), &got, &n, err, sizeof err) != 0 && contains(err, "version 3"));
    put_le32((unsigned char *)file + 4, 1);
    write_raw(path_in("trunc.bin"), file, len - 1);
    CHECK(gio_tokens_read(path_in("trunc.bin"), &got, &n, err, sizeof err) != 0 && contains(err, "trunc.bin: truncated"));
    write_raw(path_in("trunchdr.bin"), file, 100);
    CHECK(gio_tokens_read(path_in("trunchdr.bin"), &got, &n, err, sizeof err) != 0 && contains(err, "truncated"));
    put_le32((unsigned char *)file + 8, NTOK - 10);
    write_raw(path_in("count.bin"), file, len);
    CHECK(gio_tokens_read(path_in("count.bin"), &got, &n, err, sizeof err) != 0 && contains(err, "count mismatch"));
    put_le32((unsigned char *)file + 8, 0x80000000u);
    write_raw(path_in("neg.bin"), file, len);
    CHECK(gio_tokens_read(path_in("neg.bin"), &got, &n, err, sizeof err) != 0 && contains(err, "negative"));
    free(file);
    CHECK(gio_tokens_read(path_in("missing.bin"), &got, &n, err, sizeof err) != 0 && contains(err, "cannot open"));
    {
        int32_t neg = -1;
        CHECK(gio_tokens_write(path_in("x.bin"), &neg, 1, err, sizeof err) != 0 && contains(err, "negative"));
    }
    test_tokens_v2(bad);
    CHECKE(gio_tokens_write(path_in("empty.bin"), toks, 0, err, sizeof err) == 0, err);
    CHECKE(gio_tokens_read(path_in("empty.bin"), &got, &n, err, sizeof err) == 0 && n == 0, err);
    free(got);
}

/* ------------------------------------------------------------------ */

/* Reference bytes_to_unicode, transcribed from GPT-2's encoder.py. */
static void ref_bytes_to_unicode(uint32_t cs[256]) {
    int bs[256], n = 0, in[256], b, extra = 0;
    memset(in, 0, sizeof in);
    for (b = '!'; b <= '~'; b++) bs[n++] = b;
    for (b = 0xA1; b <= 0xAC; b++) bs[n++] = b;
    for (b = 0xAE; b <= 0xFF; b++) bs[n++] = b;
    for (b = 0; b < n; b++) { in[bs[b]] = 1; cs[bs[b]] = (uint32_t)bs[b]; }
    for (b = 0; b < 256; b++)
        if (!in[b]) cs[b] = 256 + (uint32_t)extra++;
}

/* GPT-2 vocab order: the 256 byte tokens in bytes_to_unicode order. */
static int byte_order_id(unsigned char byte) {
    int b, id = 0;
    uint32_t cs[256];
    ref_bytes_to_unicode(cs);
    for (b = 0; b < 256; b++) {
        int printable = cs[b] == (uint32_t)b;
        if (printable) { if (b == byte) return id; id++; }
    }
    for (b = 0; b < 256; b++)
        if (cs[b] != (uint32_t)b) { if (b == byte) return id; id++; }
    return -1;
}

static void json_token(tj_strbuf *sb, const char *raw) {
    /* Write the mapped string, escaping all non-ASCII as \uXXXX as Python's
       json.dump does, so the loader's escape handling is exercised. */
    uint32_t cs[256];
    const unsigned char *p = (const unsigned char *)raw;
    ref_bytes_to_unicode(cs);
    tj_strbuf_puts(sb, "\"");
    for (; *p; p++) {
        uint32_t c = cs[*p];
        if (c == '"' || c == '\\') tj_strbuf_printf(sb, "\\%c", (char)c);
        else if (c < 0x80) tj_strbuf_printf(sb, "%c", (char)c);
        else tj_strbuf_printf(sb, "\\u%04x", (unsigned)c);
    }
    tj_strbuf_puts(sb, "\"");
}

/* tokenizer.json (Hugging Face tokenizers) with the vocabulary and merges of
   test_bpe's vocab.json / merges.txt: the same ids; added tokens, special
   ones only when allowed; lstrip / rstrip / single_word; errors */
static void put_tok_json(tj_strbuf *b, const char *vocab_json, size_t vlen, const char *merges, int merges_as_pairs, const char *added, const char *pre,
                         const char *model_extra) {
    size_t i = 0;
    int first = 1;
    tj_strbuf_puts(b, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [");
    tj_strbuf_puts(b, added);
    tj_strbuf_puts(b, "], \"normalizer\": null, \"pre_tokenizer\": ");
    tj_strbuf_puts(b, pre);
    tj_strbuf_puts(b, ", \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true},"
                    " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},"
                    " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\","
                    " \"fuse_unk\": false, \"byte_fallback\": false, ");
    tj_strbuf_puts(b, model_extra);
    tj_strbuf_puts(b, "\"vocab\": ");
    tj_strbuf_put(b, vocab_json, vlen);
    tj_strbuf_puts(b, ", \"merges\": [");
    /* merges.txt lines (mapped alphabet, UTF-8) -> JSON strings or pairs */
    while (merges[i]) {
        size_t e = i, sp;
        while (merges[e] && merges[e] != '\n') e++;
        if (e > i && merges[e - 1] == '\r') e--;
        if (e > i && merges[i] != '#') {
            for (sp = i; sp < e && merges[sp] != ' '; sp++) {}
            if (!first) tj_strbuf_puts(b, ", ");
            first = 0;
            if (merges_as_pairs) {
                tj_strbuf_puts(b, "[\"");
                tj_strbuf_put(b, merges + i, sp - i);
                tj_strbuf_puts(b, "\", \"");
                tj_strbuf_put(b, merges + sp + 1, e - sp - 1);
                tj_strbuf_puts(b, "\"]");
            } else {
                tj_strbuf_puts(b, "\"");
                tj_strbuf_put(b, merges + i, e - i);
                tj_strbuf_puts(b, "\"");
            }
        }
        while (merges[e] && merges[e] != '\n') e++;
        i = merges[e] ? e + 1 : e;
    }
    tj_strbuf_puts(b, "]}}\n");
}
static int ids_are(const int32_t *ids, size_t n, const int32_t *want, size_t wn) {
    size_t k;
    if (n != wn) return 0;
    for (k = 0; k < n; k++) if (ids[k] != want[k]) return 0;
    return 1;
}
static void test_tokenizer_json(const tj_strbuf *vj, const tj_strbuf *mt) {
    static const char *pre = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}";
    static const char *added =
        "{\"id\": 269, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": true, \"special\": true},"
        "{\"id\": 270, \"content\": \"<pad>\", \"single_word\": false, \"lstrip\": true, \"rstrip\": true, \"normalized\": false, \"special\": true},"
        "{\"id\": 271, \"content\": \"[X]\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": false},"
        "{\"id\": 272, \"content\": \"ab\", \"single_word\": true, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": false},"
        "{\"id\": 273, \"content\": \"<|endoftext|>x\", \"special\": true}";
    static const char *texts[] = {"hello world", "hello, world!\n", "numbers 12345 and 1.5e-3", "don't you'll", "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80",
                                  "  leading and trailing   ", ""};
    gio_tokenizer ref, tj, tp;
    tj_strbuf b;
    char err[512];
    int32_t *ids, *ids2;
    size_t n, n2, k;
    int v;
    memset(&b, 0, sizeof b);
    CHECKE(gio_tok_load_gpt2(&ref, path_in("vocab.json"), path_in("merges.txt"), err, sizeof err) == 0, err);
    for (v = 0; v < 2; v++) { /* merges as "a b" strings, and as ["a", "b"] pairs (tokenizers >= 0.20) */
        gio_tokenizer *t = v ? &tp : &tj;
        b.n = 0;
        put_tok_json(&b, vj->p, vj->n, mt->p, v, added, pre, "\"ignore_merges\": false, ");
        write_raw(path_in("tokenizer.json"), b.p, b.n);
        CHECKE(gio_tok_load_hf(t, path_in("tokenizer.json"), err, sizeof err) == 0, err);
        CHECK(t->vocab_size == 274 && gio_tok_special_count(t) == 3 && gio_tok_special_id(t, 0) == 269);
        for (k = 0; k < sizeof texts / sizeof texts[0]; k++) {
            int ok = gio_tok_encode(t, texts[k], strlen(texts[k]), &ids, &n, err, sizeof err) == 0 &&
                     gio_tok_encode(&ref, texts[k], strlen(texts[k]), &ids2, &n2, err, sizeof err) == 0;
            CHECKE(ok && ids_are(ids, n, ids2, n2), texts[k]);
            if (ok) { free(ids); free(ids2); }
        }
    }
    {   /* special tokens: text unless allowed; the longest match wins */
        const char *s = "hello<|endoftext|>world";
        int32_t want_allowed[] = {259, 269, 262, 5, 263};   /* hello <|endoftext|> wor l d (no leading space) */
        CHECK(gio_tok_encode(&tj, s, strlen(s), &ids, &n, err, sizeof err) == 0 && n > 5 && ids[0] == 259 && ids[1] == 27);
        free(ids);
        CHECK(gio_tok_encode_special(&tj, s, strlen(s), 1, &ids, &n, err, sizeof err) == 0 && n >= 3 && ids[0] == 259 && ids[1] == 269);
        if (n >= 3) {
            CHECK(gio_tok_encode(&tj, "world", 5, &ids2, &n2, err, sizeof err) == 0 && n == n2 + 2 && !memcmp(ids + 2, ids2, n2 * sizeof *ids));
            free(ids2);
        }
        (void)want_allowed;
        free(ids);
        CHECK(gio_tok_encode_special(&tj, "<|endoftext|>x", 14, 1, &ids, &n, err, sizeof err) == 0 && n == 1 && ids[0] == 273);
        free(ids);
        /* the vocab.json tokenizer: <|endoftext|> is its special token */
        CHECK(gio_tok_special_count(&ref) == 1 && gio_tok_special_id(&ref, 0) == 269);
        CHECK(gio_tok_encode_special(&ref, s, strlen(s), 1, &ids, &n, err, sizeof err) == 0 && n >= 3 && ids[0] == 259 && ids[1] == 269);
        free(ids);
        /* a non-special added token is always matched; lstrip/rstrip eat the spaces around <pad> */
        CHECK(gio_tok_encode(&tj, "a[X]b", 5, &ids, &n, err, sizeof err) == 0 && n == 3 && ids[0] == 'a' - 33 && ids[1] == 271 && ids[2] == 'b' - 33);
        free(ids);
        CHECK(gio_tok_encode_special(&tj, "a  <pad>  b", 11, 1, &ids, &n, err, sizeof err) == 0 && n == 3 && ids[1] == 270 && ids[0] == 'a' - 33 &&
              ids[2] == 'b' - 33);
        free(ids);
        /* single_word: "ab" alone is the added token, inside "cabd" it is not */
        CHECK(gio_tok_encode(&tj, "x ab y", 6, &ids, &n, err, sizeof err) == 0 && n >= 3 && ids[2] == 272);
        free(ids);
        CHECK(gio_tok_encode(&tj, "cabd", 4, &ids, &n, err, sizeof err) == 0 && n == 4 && ids[1] == 'a' - 33);
        free(ids);
        /* decoding gives the content back */
        {
            int32_t d[3] = {259, 269, 271};
            char *txt;
            size_t tl;
            CHECK(gio_tok_decode(&tj, d, 3, &txt, &tl, err, sizeof err) == 0 && tl == 21 && !memcmp(txt, "hello<|endoftext|>[X]", 21));
            free(txt);
        }
    }
    {   /* add_prefix_space: each segment gets a space in front ("hello" -> " hello" = " " "hello") */
        gio_tokenizer ta;
        b.n = 0;
        put_tok_json(&b, vj->p, vj->n, mt->p, 0, added, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", "");
        write_raw(path_in("tok_aps.json"), b.p, b.n);
        CHECKE(gio_tok_load_hf(&ta, path_in("tok_aps.json"), err, sizeof err) == 0, err);
        CHECK(gio_tok_encode(&ta, "world", 5, &ids, &n, err, sizeof err) == 0 && n == 1 && ids[0] == 264);
        free(ids);
        gio_tok_free(&ta);
    }
    {   /* errors name the file and the setting */
        static const struct { const char *pre, *extra, *added, *want; } bad[] = {
            {"{\"type\": \"Metaspace\"}", "", "", "pre_tokenizer \"Metaspace\" is not supported"},
            {"{\"type\": \"ByteLevel\", \"use_regex\": false}", "", "", "use_regex false"},
            {NULL, "\"byte_fallback\": true, ", "", "byte_fallback"},
            {NULL, "\"dropout\": 0.1, ", "", "dropout"},
            {NULL, "", "{\"id\": 5, \"content\": \"zz\", \"special\": true}", "which the vocabulary gives to"},
            {NULL, "", "{\"content\": \"zz\"}", "without id or content"},
        };
        gio_tokenizer tb;
        for (k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            b.n = 0;
            put_tok_json(&b, vj->p, vj->n, mt->p, 0, bad[k].added, bad[k].pre ? bad[k].pre : pre, bad[k].extra);
            write_raw(path_in("tok_bad.json"), b.p, b.n);
            err[0] = 0;
            CHECKE(gio_tok_load_hf(&tb, path_in("tok_bad.json"), err, sizeof err) != 0 && contains(err, bad[k].want) && contains(err, "tok_bad.json"), err);
        }
        write_raw(path_in("tok_wp.json"), "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", 45);
        CHECK(gio_tok_load_hf(&tb, path_in("tok_wp.json"), err, sizeof err) != 0 && contains(err, "model type \"WordPiece\""));
        write_raw(path_in("tok_norm.json"), "{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {}}", 44);
        CHECK(gio_tok_load_hf(&tb, path_in("tok_norm.json"), err, sizeof err) != 0 && contains(err, "normalizer \"NFC\""));
        write_raw(path_in("tok_trunc.json"), b.p, b.n / 2);
        CHECK(gio_tok_load_hf(&tb, path_in("tok_trunc.json"), err, sizeof err) != 0 && contains(err, "tok_trunc.json: bad JSON"));
        write_raw(path_in("tok_nomodel.json"), "{\"version\": \"1.0\"}", 18);
        CHECK(gio_tok_load_hf(&tb, path_in("tok_nomodel.json"), err, sizeof err) != 0 && contains(err, "no \"model\""));
        /* a merge naming a token the vocabulary lacks */
        b.n = 0;
        put_tok_json(&b, vj->p, vj->n, "q zz\n", 0, "", pre, "");
        write_raw(path_in("tok_merge.json"), b.p, b.n);
        CHECK(gio_tok_load_hf(&tb, path_in("tok_merge.json"), err, sizeof err) != 0 && contains(err, "model.merges[0]") && contains(err, "not in"));
    }
    gio_tok_free(&tj);
    gio_tok_free(&tp);
    gio_tok_free(&ref);
    free(b.p);
}

static void test_bpe(void) {
    /* merges in rank order; raw bytes (space = ' ') */
    static const char *merges[][2] = {
        {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"o", "r"},
        {" w", "or"}, {"l", "d"}, {" wor", "ld"}, {" ", " "}, {"1", "2"}, {" ", "t"}, {"\n", "\n"}};
    enum { NM = sizeof merges / sizeof merges[0] };
    uint32_t cs[256];
    tj_strbuf vj, mt;
    gio_tokenizer tok, bt;
    char err[512];
    int b, m, same = 1;
    memset(&vj, 0, sizeof vj);
    memset(&mt, 0, sizeof mt);

    ref_bytes_to_unicode(cs);
    for (b = 0; b < 256; b++) same &= gio_gpt2_byte_to_unicode((unsigned char)b) == cs[b];
    CHECK(same);
    CHECK(byte_order_id('!') == 0 && byte_order_id('h') == 71 && byte_order_id(' ') == 220 && byte_order_id('\n') == 198);

    tj_strbuf_puts(&vj, "{\n");
    for (b = 0; b < 256; b++) {
        char raw[2];
        raw[0] = (char)b;
        raw[1] = 0;
        if (b == 0) {   /* NUL can't go through a C string; write Ā directly */
            tj_strbuf_puts(&vj, "  \"\\u0100\"");
        } else {
            tj_strbuf_puts(&vj, "  ");
            json_token(&vj, raw);
        }
        tj_strbuf_printf(&vj, ": %d,\n", byte_order_id((unsigned char)b));
    }
    tj_strbuf_puts(&mt, "#version: 0.2\n");
    for (m = 0; m < NM; m++) {
        char cat[32];
        snprintf(cat, sizeof cat, "%s%s", merges[m][0], merges[m][1]);
        tj_strbuf_puts(&vj, "  ");
        json_token(&vj, cat);
        tj_strbuf_printf(&vj, ": %d,\n", 256 + m);
        {
            /* merges.txt uses the mapped alphabet too, unescaped UTF-8 */
            const char *parts[2];
            int q;
            parts[0] = merges[m][0];
            parts[1] = merges[m][1];
            for (q = 0; q < 2; q++) {
                const unsigned char *p = (const unsigned char *)parts[q];
                if (q) tj_strbuf_puts(&mt, " ");
                for (; *p; p++) {
                    char u[4];
                    size_t ul = tj_utf8_encode(cs[*p], u);
                    tj_strbuf_put(&mt, u, ul);
                }
            }
            tj_strbuf_puts(&mt, m == NM - 1 ? "\r\n" : "\n");   /* tolerate CRLF */
        }
    }
    tj_strbuf_printf(&vj, "  \"<|endoftext|>\": %d\n}\n", 256 + NM);
    CHECK(write_raw(path_in("vocab.json"), vj.p, vj.n) == 0);
    CHECK(write_raw(path_in("merges.txt"), mt.p, mt.n) == 0);

    CHECKE(gio_tok_load_gpt2(&tok, path_in("vocab.json"), path_in("merges.txt"), err, sizeof err) == 0, err);
    if (tok.kind == GIO_TOK_GPT2) {
        static const struct { const char *s; size_t n; } texts[] = {
            {"hello world", 0},
            {"hello, world!\n", 0},
            {"  leading and trailing   ", 0},
            {"tabs\tand\nnewlines\n\n\n  indented\r\n", 0},
            {"numbers 12345 and 1.5e-3, 121212", 0},
            {"punct!!! ?? ... (a) [b] {c} #$%^&*", 0},
            {"don't you'll we're I'd they've I'm it's DON'T", 0},
            {"h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80!", 0},
            {"\xff\xfe\x00\x01 raw \x80 bytes\x00", 17},
            {"", 0}};
        size_t t;
        int32_t *ids;
        size_t n;
        char *back;
        size_t blen;
        for (t = 0; t < sizeof texts / sizeof texts[0]; t++) {
            size_t len = texts[t].n ? texts[t].n : strlen(texts[t].s);
            int ok = gio_tok_encode(&tok, texts[t].s, len, &ids, &n, err, sizeof err) == 0;
            CHECKE(ok, err);
            if (!ok) continue;
            ok = gio_tok_decode(&tok, ids, n, &back, &blen, err, sizeof err) == 0;
            CHECKE(ok, err);
            if (ok) {
                if (!(blen == len && memcmp(back, texts[t].s, len) == 0)) printf("round trip failed for text %zu\n", t);
                CHECK(blen == len && memcmp(back, texts[t].s, len) == 0);
                free(back);
            }
            free(ids);
        }
        /* exact ids */
        CHECK(gio_tok_encode(&tok, "hello world", 11, &ids, &n, err, sizeof err) == 0);
        CHECK(n == 2 && ids[0] == 259 && ids[1] == 264);
        free(ids);
        CHECK(gio_tok_encode(&tok, "hello, world!\n", 14, &ids, &n, err, sizeof err) == 0);
        CHECK(n == 5 && ids[0] == 259 && ids[1] == 11 && ids[2] == 264 && ids[3] == 0 && ids[4] == 198);
        free(ids);
        /* pieces "12" " 121" " \n\n" "\n" "hello" (see test_pretok) */
        CHECK(gio_tok_encode(&tok, "12 121 \n\n\nhello", 15, &ids, &n, err, sizeof err) == 0);
        {
            int32_t want[] = {266, 220, 266, 16, 220, 268, 198, 259};
            size_t q;
            int eq = n == sizeof want / sizeof want[0];
            for (q = 0; eq && q < n; q++) eq = ids[q] == want[q];
            CHECK(eq);
        }
        free(ids);
        CHECK(gio_tok_lookup(&tok, "<|endoftext|>", 13) == 256 + NM);
        CHECK(gio_tok_lookup(&tok, " world", 6) == 264);
        CHECK(gio_tok_lookup(&tok, "zzz", 3) == -1);
        {
            size_t pl;
            const char *pc = gio_tok_piece(&tok, 264, &pl);
            CHECK(pc && pl == 6 && memcmp(pc, " world", 6) == 0);
            CHECK(gio_tok_piece(&tok, 99999, &pl) == NULL);
        }
        {
            int32_t badid[2] = {5, 9999};
            CHECK(gio_tok_decode(&tok, badid, 2, &back, &blen, err, sizeof err) != 0 && contains(err, "9999"));
        }
        CHECK(tok.vocab_size == 256 + NM + 1);
        gio_tok_free(&tok);
    }

    /* byte tokenizer */
    gio_tok_init_bytes(&bt);
    {
        const char text[] = "abc\x00\xff\n";
        int32_t *ids;
        size_t n, blen;
        char *back;
        CHECK(bt.vocab_size == 256);
        CHECK(gio_tok_encode(&bt, text, 6, &ids, &n, err, sizeof err) == 0 && n == 6 && ids[4] == 255 && ids[3] == 0);
        CHECK(gio_tok_decode(&bt, ids, n, &back, &blen, err, sizeof err) == 0 && blen == 6 && memcmp(back, text, 6) == 0);
        free(ids);
        free(back);
        CHECK(gio_tok_lookup(&bt, "A", 1) == 65);
        {
            int32_t badid = 256;
            CHECK(gio_tok_decode(&bt, &badid, 1, &back, &blen, err, sizeof err) != 0);
        }
        gio_tok_free(&bt);
    }

    /* load errors name the file and line */
    {
        gio_tokenizer t2;
        write_raw(path_in("bad_merges.txt"), "#version: 0.2\nh e\nq zz\n", 23);
        CHECK(gio_tok_load_gpt2(&t2, path_in("vocab.json"), path_in("bad_merges.txt"), err, sizeof err) != 0 &&
              contains(err, "bad_merges.txt:3:") && contains(err, "not in"));
        write_raw(path_in("bad_merges2.txt"), "h e x\n", 6);
        CHECK(gio_tok_load_gpt2(&t2, path_in("vocab.json"), path_in("bad_merges2.txt"), err, sizeof err) != 0 &&
              contains(err, "bad_merges2.txt:1:"));
        write_raw(path_in("bad_vocab.json"), "{\"a\": 1, \"b\": }", 15);
        CHECK(gio_tok_load_gpt2(&t2, path_in("bad_vocab.json"), path_in("merges.txt"), err, sizeof err) != 0 &&
              contains(err, "bad_vocab.json: bad JSON at byte 14"));
        write_raw(path_in("small_vocab.json"), "{\"a\": 0}", 8);
        CHECK(gio_tok_load_gpt2(&t2, path_in("small_vocab.json"), path_in("merges.txt"), err, sizeof err) != 0 &&
              contains(err, "no token for byte"));
        CHECK(gio_tok_load_gpt2(&t2, path_in("nonexistent.json"), path_in("merges.txt"), err, sizeof err) != 0 &&
              contains(err, "nonexistent.json: cannot open"));
    }
    test_tokenizer_json(&vj, &mt);
    free(vj.p);
    free(mt.p);
}

/* Checks the hand-written GPT-2 split against outputs of the real regex
   (computed with Python's `regex` module). */
static void test_pretok(void) {
    static const struct { const char *text; const char *pieces[16]; } cases[] = {
        {"Hello world's  test\n\n 123!!  x", {"Hello", " world", "'s", " ", " test", "\n\n", " 123", "!!", " ", " x"}},
        {"I'm   here.\n", {"I", "'m", "  ", " here", ".", "\n"}},
        {"don't 'tis 'S", {"don", "'t", " '", "tis", " '", "S"}},
        {"a1b2 3.14", {"a", "1", "b", "2", " 3", ".", "14"}},
        {"  ", {"  "}},
        {"x \n y", {"x", " \n", " y"}},
        {"caf\xc3\xa9 na\xc3\xafve \xc2\xbd", {"caf\xc3\xa9", " na\xc3\xafve", " \xc2\xbd"}},
        {"emoji \xf0\x9f\x98\x80\xf0\x9f\x98\x80!", {"emoji", " \xf0\x9f\x98\x80\xf0\x9f\x98\x80!"}},
        {"tab\tx", {"tab", "\t", "x"}},
        {"''ll 'll", {"''", "ll", " '", "ll"}},
        {"12 121 \n\n\nhello", {"12", " 121", " \n\n", "\n", "hello"}},
        /* unassigned code points are neither letters nor numbers: they join
           punctuation (U+0383, U+0378, U+0530, U+E0080, U+10FFFF, U+3FFFE, U+2EBF) */
        {"\xce\x83't", {"\xce\x83'", "t"}},
        {"ab\xcd\xb8" "cd", {"ab", "\xcd\xb8", "cd"}},
        {" \xf3\xa0\x82\x80x", {" \xf3\xa0\x82\x80", "x"}},
        {"x\xf4\x8f\xbf\xbf\xf0\xbf\xbf\xbe!", {"x", "\xf4\x8f\xbf\xbf\xf0\xbf\xbf\xbe!"}},
        {"a\xd4\xb0" "b 1\xcd\xb7\xcd\xb8", {"a", "\xd4\xb0", "b", " 1", "\xcd\xb7", "\xcd\xb8"}},
        /* letters assigned in Unicode 15.0 (U+1E030) and 16.0 (U+10D4A); U+323B0
           (CJK Ext. J, Unicode 17.0) is unassigned for tiktoken's Unicode 16.0 */
        {"\xf0\x9e\x80\xb0" "a \xf0\xb2\x8e\xb0\xf0\xb2\x8e\xb1 \xe2\xba\xbf" "0",
         {"\xf0\x9e\x80\xb0" "a", " \xf0\xb2\x8e\xb0\xf0\xb2\x8e\xb1", " \xe2\xba\xbf", "0"}},
        {"a\xf0\xb2\x8e\xb0" "b \xf0\x90\xb5\x8a" "x", {"a", "\xf0\xb2\x8e\xb0", "b", " \xf0\x90\xb5\x8a" "x"}},
    };
    size_t c;
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *s = cases[c].text;
        size_t n = strlen(s), pos = 0, k = 0;
        int good = 1;
        while (pos < n) {
            size_t l = gio_gpt2_pretok_next(s, n, pos);
            const char *want = cases[c].pieces[k];
            if (l == 0 || !want || strlen(want) != l || memcmp(want, s + pos, l) != 0) {
                printf("pretok case %zu piece %zu: got \"%.*s\", want \"%s\"\n", c, k, (int)l, s + pos, want ? want : "(end)");
                good = 0;
                break;
            }
            pos += l;
            k++;
        }
        if (good && cases[c].pieces[k]) { printf("pretok case %zu: missing piece \"%s\"\n", c, cases[c].pieces[k]); good = 0; }
        CHECK(good);
    }
    CHECK(gio_gpt2_pretok_next("abc", 3, 3) == 0);
    {   /* the whole table against the counts tools/gen_unicode_table.py
           printed from tiktoken 0.14 (Unicode 16.0) */
        long cnt[4] = {0, 0, 0, 0};
        uint32_t cp;
        for (cp = 0x100; cp <= 0x10FFFF; cp++) cnt[gio__uclass(cp)]++;
        CHECK(cnt[GIO__CO] == 971033 && cnt[GIO__CL] == 140911 && cnt[GIO__CN] == 1895 && cnt[GIO__CS] == 17);
        if (cnt[GIO__CL] != 140911) printf("classes >= U+0100: %ld other, %ld letters, %ld numbers, %ld spaces\n", cnt[0], cnt[1], cnt[2], cnt[3]);
    }
}

/* ------------------------------------------------------------------ */

/* Validates a whole file as JSON with tinyjax's JSON reader (tj_json, the one
   the safetensors header parser uses, separately tested below), which is stricter than needed but catches
   escaping bugs. */
static int is_valid_json(const char *s, size_t n) {
    tj_json j;
    char err[256];
    tj_json_init(&j, s, n, "json", err, sizeof err);
    if (tj_json_skip(&j)) { printf("%s\n", err); return 0; }
    return tj_json_peek(&j) == -1;
}

static void test_svg_trace(void) {
    double ts[100], tl[100], vs[5], vl[5];
    char err[512], *file;
    size_t len;
    int i;
    gio_trace tr;
    for (i = 0; i < 100; i++) { ts[i] = i; tl[i] = 4.5 / (1 + 0.05 * i); }
    tl[50] = 0.0 / (tl[1] - tl[1]);  /* NaN must not wreck the plot */
    for (i = 0; i < 5; i++) { vs[i] = 20.0 * i; vl[i] = 4.6 / (1 + 0.04 * 20 * i); }
    CHECKE(gio_svg_loss_curve(path_in("loss.svg"), "GPT-2 <tiny> & loss", ts, tl, 100, vs, vl, 5, err, sizeof err) == 0, err);
    CHECK(tj_read_file(path_in("loss.svg"), &file, &len, err, sizeof err) == 0);
    if (file) {
        CHECK(strncmp(file, "<svg", 4) == 0);
        CHECK(contains(file, "</svg>") && contains(file, "train loss") && contains(file, "val loss"));
        CHECK(contains(file, "&lt;tiny&gt; &amp;") && !contains(file, "nan") && contains(file, "<polyline"));
        free(file);
    }
    CHECKE(gio_svg_loss_curve(path_in("empty.svg"), NULL, NULL, NULL, 0, NULL, NULL, 0, err, sizeof err) == 0, err);
    CHECK(gio_svg_loss_curve(path_in("nodir/x.svg"), NULL, ts, tl, 3, NULL, NULL, 0, err, sizeof err) != 0 &&
          contains(err, "nodir/x.svg"));

    gio_trace_init(&tr);
    CHECK(gio_trace_process_name(&tr, 1, "tinyjax") == 0);
    CHECK(gio_trace_track_name(&tr, 1, 0, "device 0 (cpu)") == 0);
    CHECK(gio_trace_track_name(&tr, 1, 1, "device \"1\"") == 0);
    for (i = 0; i < 200; i++)
        CHECK(gio_trace_event(&tr, i % 2 ? "matmul" : "add\n\"q\"", "op", 1, i % 2, 10.0 * i, 7.5,
                              i % 3 ? "shape=[2,3] \\ \"x\"" : NULL) == 0);
    CHECK(gio_trace_counter(&tr, "bytes", 1, 5.0, 1e9) == 0);
    CHECK(gio_trace_event(&tr, "nan", "op", 1, 0, 0.0 / (ts[0] - ts[0]), 1, NULL) == 0);
    CHECKE(gio_trace_write(&tr, path_in("trace.json")) == 0, tr.err);
    CHECK(tj_read_file(path_in("trace.json"), &file, &len, err, sizeof err) == 0);
    if (file) {
        CHECK(file[0] == '{' && contains(file, "\"traceEvents\""));
        CHECK(contains(file, "thread_name") && contains(file, "device 0 (cpu)"));
        CHECK(is_valid_json(file, len));
        free(file);
    }
    CHECK(gio_trace_write(&tr, path_in("nodir/trace.json")) != 0 && contains(tr.err, "nodir/trace.json"));
    gio_trace_free(&tr);
    CHECK(!dir_has_tmp_files());
}

static void test_json_parser(void) {
    static const char *good[] = {"{}", "[]", "\"\\u00e9\\ud83d\\ude00\"", "[1,-0,0.5,1e10,-2E-3,true,false,null]",
                                 " {\"a\" : [ {} , [ ] ] } "};
    static const char *bad[] = {"{", "[1,]", "01", "1.", "-", "\"abc", "\"\\u12\"", "tru", "{\"a\" 1}",
                                "[1 2]", "\"\\udc00\"", "\"\x01\"", "{1:2}", "", "1e"};
    size_t i;
    for (i = 0; i < sizeof good / sizeof good[0]; i++) {
        int ok = is_valid_json(good[i], strlen(good[i]));
        if (!ok) printf("json good case %zu rejected\n", i);
        CHECK(ok);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tj_json j;
        char err[256] = "";
        int skipped, ok;
        tj_json_init(&j, bad[i], strlen(bad[i]), "json", err, sizeof err);
        skipped = tj_json_skip(&j) == 0;
        ok = skipped && tj_json_peek(&j) == -1;
        if (!skipped) CHECK(strncmp(err, "json: bad JSON at byte ", 23) == 0);
        if (ok) printf("json bad case %zu accepted\n", i);
        CHECK(!ok);
    }
}

static void test_atomic(void) {
    char err[512], *file;
    size_t len;
    CHECKE(tj_write_file_atomic(path_in("a.txt"), "first", 5, err, sizeof err) == 0, err);
    CHECKE(tj_write_file_atomic(path_in("a.txt"), "second!", 7, err, sizeof err) == 0, err);
    CHECK(tj_read_file(path_in("a.txt"), &file, &len, err, sizeof err) == 0 && len == 7 && strcmp(file, "second!") == 0);
    free(file);
    CHECK(tj_write_file_atomic(path_in("missing/a.txt"), "x", 1, err, sizeof err) != 0 && contains(err, "missing/a.txt"));
    CHECK(!dir_has_tmp_files());
}

int main(void) {
    if (make_dir("test_gpt2_io")) return 1;
    g_ctx = tj_ctx_new();
    test_dtypes();
    test_st_roundtrip();
    test_to_f32();
    test_st_bad();
    test_st_fuzz();
    test_st_gpt2_names();
    test_tokens();
    test_bpe();
    test_pretok();
    test_json_parser();
    test_svg_trace();
    test_atomic();
    remove_dir();
    tj_ctx_free(g_ctx);
    return tjt_finish();
}
