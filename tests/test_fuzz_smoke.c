/* A short, deterministic fuzz run of every target in tests/fuzz/ (the
   safetensors parser, tree load, the BPE files and encoder, the llm.c token
   reader, the shape/mesh/spec/rule parsers), so ./build.sh test runs them
   under -fsanitize=address,undefined with gcc alone. Each target starts from
   valid seed inputs and mutates them (bit flips, byte changes, insertions,
   deletions, splices, interesting numbers) with a fixed seed, for about
   TJ_FUZZ_SECONDS seconds (default 1; 0.5 with TJ_TEST_QUICK) or
   TJ_FUZZ_RUNS inputs per target. A crash, a sanitizer report or a broken
   property (TJF_ASSERT) fails the test. Longer runs: libFuzzer with clang,
   see tests/fuzz/README.md. */
/* the implementations the targets ask for (tests/fuzz/tjf_common.h) are
   linked instead: the library and tj_internal.h's wrappers from
   tests/tj_impl.c, gpt2_io.h's from tests/gpt2_io_impl.c */
#define TINYJAX_IMPLEMENTATION_DONE
#define GPT2_IO_IMPLEMENTATION_DONE
#define TJT_INTERNAL_IMPLEMENTATION_DONE
#define TJF_NO_ENTRY
#include "fuzz/fuzz_safetensors.c"
#include "fuzz/fuzz_tree_load.c"
#include "fuzz/fuzz_bpe.c"
#include "fuzz/fuzz_tokens.c"
#include "fuzz/fuzz_parsers.c"
#include "tj_test.h"

#include <time.h>

static uint64_t g_rng = 0x853C49E6748FEA9Bull;
static uint32_t rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 33);
}
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    unsigned char *p;
    size_t n;
} blob;
static blob blob_of(const void *d, size_t n) {
    blob b;
    b.p = (unsigned char *)malloc(n + 1);
    b.n = n;
    if (n) memcpy(b.p, d, n);
    return b;
}
static blob blob_file(const char *path) {
    blob b = {NULL, 0};
    FILE *f = fopen(path, "rb");
    long n;
    if (!f) return b;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    b.p = (unsigned char *)malloc((size_t)n + 1);
    b.n = b.p && fread(b.p, 1, (size_t)n, f) == (size_t)n ? (size_t)n : 0;
    fclose(f);
    return b;
}

/* one mutation of src into a new buffer (*out, *on), up to max bytes */
static void mutate(const blob *seeds, int nseeds, unsigned char **out, size_t *on, size_t max) {
    static const int64_t interesting[] = {0, 1, -1, 2, 7, 8, 16, 63, 64, 65, 127, 128, 255, 256, 32767, 65535, 65536, 2147483647LL, -2147483648LL, 4294967295LL,
                                          1099511627776LL, 1099511627777LL, INT64_MAX, INT64_MIN};
    const blob *s = &seeds[rnd() % (unsigned)nseeds];
    size_t n = s->n, cap = s->n + 64, i;
    unsigned char *b = (unsigned char *)malloc(cap > max ? cap : max + 64);
    int k, rounds = 1 + (int)(rnd() % 4);
    if (n) memcpy(b, s->p, n);
    for (k = 0; k < rounds; k++) {
        unsigned op = rnd() % 9;
        size_t at = n ? rnd() % n : 0;
        switch (op) {
        case 0: if (n) b[at] ^= (unsigned char)(1u << (rnd() % 8)); break;
        case 1: if (n) b[at] = (unsigned char)rnd(); break;
        case 2: /* insert a few bytes */
            if (n + 8 < max) {
                size_t m = 1 + rnd() % 8;
                memmove(b + at + m, b + at, n - at);
                for (i = 0; i < m; i++) b[at + i] = rnd() % 4 ? (unsigned char)"0123456789{}[]\":,=ab\n \\u-+.eE"[rnd() % 29] : (unsigned char)rnd();
                n += m;
            }
            break;
        case 3: /* delete a span */
            if (n) {
                size_t m = 1 + rnd() % (n - at < 16 ? n - at : 16);
                memmove(b + at, b + at + m, n - at - m);
                n -= m;
            }
            break;
        case 4: /* an interesting number as decimal text */
            if (n + 24 < max) {
                char num[32];
                size_t m;
                snprintf(num, sizeof num, "%lld", (long long)interesting[rnd() % (sizeof interesting / sizeof interesting[0])]);
                m = strlen(num);
                memmove(b + at + m, b + at, n - at);
                memcpy(b + at, num, m);
                n += m;
            }
            break;
        case 5: /* an interesting number as little-endian binary */
            if (n >= 8) {
                int64_t v = interesting[rnd() % (sizeof interesting / sizeof interesting[0])];
                size_t w = (size_t)1 << (rnd() % 4), j;
                at = rnd() % (n - w + 1);
                for (j = 0; j < w; j++) b[at + j] = (unsigned char)((uint64_t)v >> (8 * j));
            }
            break;
        case 6: /* splice: a span of another seed */
        {
            const blob *o = &seeds[rnd() % (unsigned)nseeds];
            if (o->n && n + 32 < max) {
                size_t from = rnd() % o->n, m = 1 + rnd() % (o->n - from < 32 ? o->n - from : 32);
                memmove(b + at + m, b + at, n - at);
                memcpy(b + at, o->p + from, m);
                n += m;
            }
            break;
        }
        case 7: /* duplicate a span */
            if (n && n + 32 < max) {
                size_t m = 1 + rnd() % (n - at < 32 ? n - at : 32);
                memmove(b + at + m, b + at, n - at);
                n += m;
            }
            break;
        default: /* truncate */
            n = at;
            break;
        }
    }
    *out = b;
    *on = n;
}

static void run_target(const char *name, int (*fn)(const uint8_t *, size_t), const blob *seeds, int nseeds, double seconds, long runs) {
    double t0 = now_s();
    long k;
    int i;
    tjt_current = name;
    for (i = 0; i < nseeds; i++) fn(seeds[i].p, seeds[i].n); /* the seeds themselves */
    for (k = 0; k < runs && now_s() - t0 < seconds; k++) {
        unsigned char *b;
        size_t n;
        mutate(seeds, nseeds, &b, &n, 1 << 16);
        fn(b, n);
        free(b);
    }
    TJT_CHECK(k > 0, "%s: no input ran", name);
    printf("  fuzz %-12s %6ld inputs in %.2f s, no crash, every property held\n", name, k, now_s() - t0);
}

int main(void) {
    double secs = getenv("TJ_TEST_QUICK") ? 0.5 : 1.0;
    long runs = 1L << 30;
    tj_ctx *c = tj_ctx_new();
    blob st[3], tr[2], bpe[2], tok[2], par[3];
    if (getenv("TJ_FUZZ_SECONDS")) secs = atof(getenv("TJ_FUZZ_SECONDS"));
    if (getenv("TJ_FUZZ_RUNS")) runs = atol(getenv("TJ_FUZZ_RUNS"));
    /* seeds: files the writers make */
    {
        float f[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
        uint16_t h[4] = {0x3f80, 0x4000, 0xbf80, 0x7fc0};
        int64_t s1[2] = {2, 3}, s2[1] = {4};
        tj_st_entry e[2];
        const char *meta[2] = {"format", "pt"};
        tj_tree *t = tj_tree_new(c);
        e[0].name = "w";
        e[0].dtype = TJ_ST_F32;
        e[0].rank = 2;
        e[0].shape = s1;
        e[0].data = f;
        e[1].name = "h.0.b";
        e[1].dtype = TJ_ST_BF16;
        e[1].rank = 1;
        e[1].shape = s2;
        e[1].data = h;
        tj_st_save(c, tjf_path(10), e, 2, meta, 1);
        st[0] = blob_file(tjf_path(10));
        tj_tree_set_array(t, "params.w", tj_array_new(c, TJ_F32, "embed=2 mlp=3", f));
        tj_tree_set_array(t, "params.i", tj_iota(c, TJ_I32, "pos=4", "pos"));
        tj_tree_set_int(t, "step", 12);
        tj_tree_set_float(t, "lr", 3e-4);
        tj_tree_set_string(t, "note", "h\xc3\xa9llo \"x\"\n");
        tj_tree_save(t, tjf_path(11));
        st[1] = blob_file(tjf_path(11));
        tr[0] = blob_file(tjf_path(11));
        tr[1] = blob_file(tjf_path(10));
        st[2] = blob_of("\x02\x00\x00\x00\x00\x00\x00\x00{}", 10);
        tj_tree_free(t);
        unlink(tjf_path(10));
        unlink(tjf_path(11));
    }
    {   /* a small GPT-2 style vocabulary: the 256 byte tokens and two merges */
        char *v = (char *)malloc(1 << 14), m[128], *in;
        size_t vn = 0, mn, tn;
        int b;
        const char *text = "the theme, then: \xc3\xa9t\xc3\xa9 42!\n";
        vn += (size_t)sprintf(v + vn, "{");
        for (b = 0; b < 256; b++) {
            uint32_t cp = gio_gpt2_byte_to_unicode((unsigned char)b);
            vn += (size_t)sprintf(v + vn, "\"\\u%04x\": %d, ", (unsigned)cp, b);
        }
        vn += (size_t)sprintf(v + vn, "\"th\": 256, \"the\": 257, \"<|endoftext|>\": 258}");
        mn = (size_t)sprintf(m, "#version: 0.2\nt h\nth e\n");
        tn = strlen(text);
        in = (char *)malloc(2 + vn + mn + 1 + tn);
        in[0] = (char)(vn & 255);
        in[1] = (char)(vn >> 8);
        memcpy(in + 2, v, vn);
        memcpy(in + 2 + vn, m, mn);
        in[2 + vn + mn] = 0;
        memcpy(in + 3 + vn + mn, text, tn);
        bpe[0] = blob_of(in, 3 + vn + mn + tn);
        bpe[1] = blob_of(text, tn);
        free(v);
        free(in);
    }
    {
        int32_t t5[5] = {1, 50256, 0, 42, 65535};
        char err[128];
        gio_tokens_write(tjf_path(12), t5, 5, err, sizeof err);
        tok[0] = blob_file(tjf_path(12));
        tok[1] = blob_of(tok[0].p, tok[0].n > 1024 ? 1024 : tok[0].n);
        unlink(tjf_path(12));
    }
    par[0] = blob_of("batch=4 embed=128\0data=4 model=2\0batch:data embed:model\0batch:data mlp:model vocab:model", 87);
    par[1] = blob_of("a=1099511627776 b=1099511627776\0data=8\0pos:data+model\0embed:none", 63);
    par[2] = blob_of("x=2,y=3\tz=0\0model=8\0vocab:-\0heads:model batch:data,pos:data", 58);
    if (getenv("TJ_FUZZ_WRITE_SEEDS")) { /* seed corpora for libFuzzer: DIR/<target>/seedN */
        const char *dir = getenv("TJ_FUZZ_WRITE_SEEDS");
        const char *names[5] = {"safetensors", "tree_load", "bpe", "tokens", "parsers"};
        const blob *sets[5] = {st, tr, bpe, tok, par};
        int counts[5] = {3, 2, 2, 2, 3}, i, j;
        char path[1024];
        for (i = 0; i < 5; i++)
            for (j = 0; j < counts[i]; j++) {
                FILE *f;
                snprintf(path, sizeof path, "%s/%s/seed%d", dir, names[i], j);
                if ((f = fopen(path, "wb"))) {
                    fwrite(sets[i][j].p, 1, sets[i][j].n, f);
                    fclose(f);
                } else fprintf(stderr, "cannot write %s (make the directories first)\n", path);
            }
        return 0;
    }
    /* the seeds are valid inputs, so mutations start deep in each parser */
    tjt_current = "seeds";
    {
        tj_safetensors *x = tj_st_parse(c, st[0].p, st[0].n, "seed"), *y = tj_st_parse(c, st[1].p, st[1].n, "seed");
        tj_tree *t = tj_tree_new(c);
        gio_tokenizer gt;
        int32_t *ids = NULL;
        size_t nid = 0, lv = (size_t)bpe[0].p[0] | (size_t)bpe[0].p[1] << 8;
        const unsigned char *mz = (const unsigned char *)memchr(bpe[0].p + 2 + lv, 0, bpe[0].n - 2 - lv);
        char err[256];
        int rank;
        int64_t dims[TJ_MAXDIM];
        TJT_CHECK(x && y, "safetensors seeds parse: %s", tj_error(c));
        TJT_CHECK(!tj_tree_load(t, tjf_file(13, tr[0].p, tr[0].n)) && tj_tree_size(t) == 5, "tree seed loads: %s", tj_error(c));
        TJT_CHECK(mz && !gio_tok_load_gpt2(&gt, tjf_file(14, bpe[0].p + 2, lv), tjf_file(15, bpe[0].p + 2 + lv, (size_t)(mz - (bpe[0].p + 2 + lv))), err, sizeof err),
                  "bpe seed loads: %s", err);
        if (mz) {
            TJT_CHECK(!gio_tok_encode(&gt, (const char *)bpe[1].p, bpe[1].n, &ids, &nid, err, sizeof err) && nid > 0 && nid < bpe[1].n, "bpe seed encodes with merges");
            gio_tok_free(&gt);
        }
        free(ids);
        TJT_CHECK(!gio_tokens_read(tjf_file(16, tok[0].p, tok[0].n), &ids, &nid, err, sizeof err) && nid == 5, "token seed reads: %s", err);
        free(ids);
        TJT_CHECK(!tjt_parse_shape(c, (const char *)par[0].p, TJ_F32, &rank, dims, "seed"), "parser seed: %s", tj_error(c));
        tj_clear_error(c);
        tj_st_free(x);
        tj_st_free(y);
        tj_tree_free(t);
        unlink(tjf_path(13));
        unlink(tjf_path(14));
        unlink(tjf_path(15));
        unlink(tjf_path(16));
    }
    run_target("safetensors", tjf_safetensors, st, 3, secs, runs);
    run_target("tree_load", tjf_tree_load, tr, 2, secs, runs);
    run_target("bpe", tjf_bpe, bpe, 2, secs, runs);
    run_target("tokens", tjf_tokens, tok, 2, secs, runs);
    run_target("parsers", tjf_parsers, par, 3, secs, runs);
    {
        int i;
        for (i = 0; i < 3; i++) free(st[i].p), free(par[i].p);
        for (i = 0; i < 2; i++) free(tr[i].p), free(bpe[i].p), free(tok[i].p);
    }
    tj_ctx_free(c);
    return tjt_finish();
}
