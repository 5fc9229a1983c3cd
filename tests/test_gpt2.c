/* GPT-2 demo model: a 2-layer, 32-channel GPT-2 learns, and gives the same
   initial parameters and the same losses on one device and on meshes (data
   parallel, data x tensor, FSDP, data x tensor with sequence parallelism);
   a checkpoint round trip resumes exactly; gradient accumulation over K
   micro-batches of B equals one batch of K*B; Hugging Face GPT-2
   safetensors load (--init-from) to the same logits; --bf16 training
   follows the f32 loss curve on both bf16 matmul paths; dropout (--dropout)
   acts, draws a fresh mask every step and micro-batch, the same under every
   remat policy, on meshes, after a resume and in bf16, and leaves the
   evaluation alone. */
/* the demo asks for both implementations; they are linked in instead
   (tests/tj_impl.c, tests/gpt2_io_impl.c) */
#define TINYJAX_IMPLEMENTATION_DONE
#define GPT2_IO_IMPLEMENTATION_DONE
#define GPT2_NO_MAIN
#include "../demos/gpt2_train.c"
#include "tj_test.h"
#include <dirent.h>

#define TB 8
#define TT 16

static void tiny_config(gpt2_config *c) {
    gpt2_default_config(c);
    c->L = 2; c->C = 32; c->H = 2; c->M = 128;
    c->T = c->block = TT; c->B = TB;
    c->V = c->V_real = 256;
    c->param_rules = GPT2_PARAM_RULES;
    c->compute_rules = GPT2_COMPUTE_RULES;
}
/* a small corpus with structure (a repeated sentence with a counter) */
static int32_t *corpus(size_t *n) {
    const char *s = "the quick brown fox jumps over the lazy dog; ";
    size_t len = strlen(s), i, k = 0, cap = 4096;
    int32_t *d = (int32_t *)malloc(sizeof(int32_t) * cap);
    for (i = 0; k < cap; i++) {
        size_t j;
        for (j = 0; j < len && k < cap; j++) d[k++] = (unsigned char)s[j];
        if (k < cap) d[k++] = '0' + (int32_t)(i % 10);
    }
    *n = cap;
    return d;
}
/* Files the tests write go to a fresh directory (mkdtemp under $TMPDIR or
   /tmp) that main removes at the end, so the test runs from any directory */
static char tdir[512];
static const char *tpath(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tdir, name);
    return buf;
}
static int make_tdir(void) {
    const char *base = getenv("TMPDIR");
    snprintf(tdir, sizeof tdir, "%s/test_gpt2.XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(tdir) ? 0 : -1;
}
/* remove a directory and what is in it (the tests make one level of subdirectories) */
static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[1024];
    struct stat st;
    if (!d) return;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (!lstat(p, &st) && S_ISDIR(st.st_mode)) remove_tree(p);
        else remove(p);
    }
    closedir(d);
    rmdir(dir);
}
static float *read_leaf(gpt2_trainer *tr, const char *name, int64_t *n) {
    tj_array *a = tj_tree_array(tr->state, name);
    float *v;
    *n = tj_array_numel(a);
    v = (float *)malloc(sizeof(float) * (size_t)(*n + 1));
    if (!a || tj_array_read(a, TJ_F32, v)) { free(v); return NULL; }
    return v;
}

/* ---- Hugging Face GPT-2 files (written here with HF's names and Conv1D
   layouts) load to the same parameters and logits as the same numbers put
   into the demo's tree by hand */
#define HL 2
#define HC 32
#define HH 2
#define HD (HC / HH)
#define HM (4 * HC)
#define HV 256
#define HP 16
typedef struct { char name[64]; int rank; int64_t shape[2]; float *data; } hf_ten;
typedef struct { hf_ten t[16 * HL + 8]; int n; } hf_set;
static float hf_rand(uint64_t *s, float lo, float hi) { /* bf16-exact values, so F32 and BF16 files hold the same numbers */
    float f;
    uint32_t u;
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    f = lo + (hi - lo) * (float)((*s >> 40) / 16777216.0);
    memcpy(&u, &f, 4);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}
static void hf_add(hf_set *h, const char *name, int64_t d0, int64_t d1, uint64_t *s, float lo, float hi) {
    hf_ten *t = &h->t[h->n++];
    int64_t k, n = d0 * (d1 ? d1 : 1);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rank = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->data = (float *)malloc(sizeof(float) * (size_t)n);
    for (k = 0; k < n; k++) t->data[k] = hf_rand(s, lo, hi);
}
static void hf_make(hf_set *h) {
    uint64_t s = 12345;
    char nm[64];
    int l;
    h->n = 0;
    hf_add(h, "wte.weight", HV, HC, &s, -0.5f, 0.5f);
    hf_add(h, "wpe.weight", HP, HC, &s, -0.5f, 0.5f);
    for (l = 0; l < HL; l++) {
#define A(suf, d0, d1, lo, hi) (snprintf(nm, sizeof nm, "h.%d.%s", l, suf), hf_add(h, nm, d0, d1, &s, lo, hi))
        A("ln_1.weight", HC, 0, 0.5f, 1.5f);
        A("ln_1.bias", HC, 0, -0.2f, 0.2f);
        A("attn.c_attn.weight", HC, 3 * HC, -0.3f, 0.3f);
        A("attn.c_attn.bias", 3 * HC, 0, -0.2f, 0.2f);
        A("attn.c_proj.weight", HC, HC, -0.3f, 0.3f);
        A("attn.c_proj.bias", HC, 0, -0.2f, 0.2f);
        A("ln_2.weight", HC, 0, 0.5f, 1.5f);
        A("ln_2.bias", HC, 0, -0.2f, 0.2f);
        A("mlp.c_fc.weight", HC, HM, -0.3f, 0.3f);
        A("mlp.c_fc.bias", HM, 0, -0.2f, 0.2f);
        A("mlp.c_proj.weight", HM, HC, -0.2f, 0.2f);
        A("mlp.c_proj.bias", HC, 0, -0.2f, 0.2f);
#undef A
    }
    hf_add(h, "ln_f.weight", HC, 0, &s, 0.5f, 1.5f);
    hf_add(h, "ln_f.bias", HC, 0, &s, -0.2f, 0.2f);
}
static const float *hf_get(const hf_set *h, const char *fmt, int l) {
    char nm[64];
    int i;
    snprintf(nm, sizeof nm, fmt, l);
    for (i = 0; i < h->n; i++) if (!strcmp(h->t[i].name, nm)) return h->t[i].data;
    return NULL;
}
/* write the set with names under `prefix`, as F32 or BF16, leaving out `skip` */
static int hf_write(const hf_set *h, const char *path, const char *prefix, int bf16, const char *skip) {
    tj_ctx *ctx = tj_ctx_new();
    tj_st_entry e[16 * HL + 8];
    char names[16 * HL + 8][80];
    uint16_t *bf[16 * HL + 8];
    int i, n = 0, st;
    for (i = 0; i < h->n; i++) {
        const hf_ten *t = &h->t[i];
        int64_t k, numel = t->shape[0] * (t->rank == 2 ? t->shape[1] : 1);
        bf[i] = NULL;
        if (skip && !strcmp(t->name, skip)) continue;
        snprintf(names[n], sizeof names[n], "%s%s", prefix, t->name);
        e[n].name = names[n];
        e[n].rank = t->rank;
        e[n].shape = t->shape;
        e[n].dtype = bf16 ? TJ_ST_BF16 : TJ_ST_F32;
        e[n].data = t->data;
        if (bf16) {
            bf[i] = (uint16_t *)malloc(2 * (size_t)numel);
            for (k = 0; k < numel; k++) {
                uint32_t u;
                memcpy(&u, &t->data[k], 4);
                bf[i][k] = (uint16_t)(u >> 16);
            }
            e[n].data = bf[i];
        }
        n++;
    }
    st = tj_st_save(ctx, path, e, n, NULL, 0);
    if (st) fprintf(stderr, "hf_write: %s\n", tj_error(ctx));
    for (i = 0; i < h->n; i++) free(bf[i]);
    tj_ctx_free(ctx);
    return st;
}
/* the demo tree, built from the HF arrays by explicit index mapping */
static int hf_set_by_hand(gpt2_trainer *tr, const hf_set *h) {
    const gpt2_config *c = &tr->cfg;
    int i, l, e, q, hh, d, m, v;
    for (i = 0; i < NPARAMS; i++) {
        int64_t numel = param_numel(c, i);
        float *b = (float *)calloc((size_t)numel, sizeof(float));
        char shape[256], pn[128];
        const char *nm = gpt2_params[i].name;
        for (l = 0; l < HL; l++) {
            if (!strcmp(nm, "h.ln"))
                for (e = 0; e < HC; e++) {
                    b[(l * 4 + 0) * HC + e] = hf_get(h, "h.%d.ln_1.weight", l)[e];
                    b[(l * 4 + 1) * HC + e] = hf_get(h, "h.%d.ln_1.bias", l)[e];
                    b[(l * 4 + 2) * HC + e] = hf_get(h, "h.%d.ln_2.weight", l)[e];
                    b[(l * 4 + 3) * HC + e] = hf_get(h, "h.%d.ln_2.bias", l)[e];
                }
            if (!strcmp(nm, "h.wqkv")) /* (layer, embed, qkv, heads, head_dim) <- c_attn (in=embed, out=3*embed) */
                for (e = 0; e < HC; e++)
                    for (q = 0; q < 3; q++)
                        for (hh = 0; hh < HH; hh++)
                            for (d = 0; d < HD; d++)
                                b[(((l * HC + e) * 3 + q) * HH + hh) * HD + d] = hf_get(h, "h.%d.attn.c_attn.weight", l)[e * 3 * HC + q * HC + hh * HD + d];
            if (!strcmp(nm, "h.bqkv"))
                for (q = 0; q < 3; q++)
                    for (hh = 0; hh < HH; hh++)
                        for (d = 0; d < HD; d++) b[((l * 3 + q) * HH + hh) * HD + d] = hf_get(h, "h.%d.attn.c_attn.bias", l)[q * HC + hh * HD + d];
            if (!strcmp(nm, "h.wo")) /* (layer, heads, head_dim, embed) <- c_proj (in, out) */
                for (hh = 0; hh < HH; hh++)
                    for (d = 0; d < HD; d++)
                        for (e = 0; e < HC; e++) b[((l * HH + hh) * HD + d) * HC + e] = hf_get(h, "h.%d.attn.c_proj.weight", l)[(hh * HD + d) * HC + e];
            if (!strcmp(nm, "h.bo")) for (e = 0; e < HC; e++) b[l * HC + e] = hf_get(h, "h.%d.attn.c_proj.bias", l)[e];
            if (!strcmp(nm, "h.wfc"))
                for (e = 0; e < HC; e++)
                    for (m = 0; m < HM; m++) b[(l * HC + e) * HM + m] = hf_get(h, "h.%d.mlp.c_fc.weight", l)[e * HM + m];
            if (!strcmp(nm, "h.bfc")) for (m = 0; m < HM; m++) b[l * HM + m] = hf_get(h, "h.%d.mlp.c_fc.bias", l)[m];
            if (!strcmp(nm, "h.wproj"))
                for (m = 0; m < HM; m++)
                    for (e = 0; e < HC; e++) b[(l * HM + m) * HC + e] = hf_get(h, "h.%d.mlp.c_proj.weight", l)[m * HC + e];
            if (!strcmp(nm, "h.bproj")) for (e = 0; e < HC; e++) b[l * HC + e] = hf_get(h, "h.%d.mlp.c_proj.bias", l)[e];
        }
        if (!strcmp(nm, "wte")) for (v = 0; v < HV * HC; v++) b[v] = hf_get(h, "wte.weight", 0)[v];
        if (!strcmp(nm, "wpe")) for (v = 0; v < HP * HC; v++) b[v] = hf_get(h, "wpe.weight", 0)[v];
        if (!strcmp(nm, "lnf_g")) for (e = 0; e < HC; e++) b[e] = hf_get(h, "ln_f.weight", 0)[e];
        if (!strcmp(nm, "lnf_b")) for (e = 0; e < HC; e++) b[e] = hf_get(h, "ln_f.bias", 0)[e];
        snprintf(pn, sizeof pn, "params.%s", nm);
        if (tj_tree_set_array(tr->state, pn, tj_array_new(tr->ctx, TJ_F32, param_shape(c, i, shape, sizeof shape), b))) { free(b); return 1; }
        free(b);
    }
    return 0;
}
/* logits (1, T, V) of the sampling program */
static int hf_logits(gpt2_trainer *tr, const int32_t *tok, float *out) {
    tj_tree *in, *o;
    int st;
    if (gpt2_ensure_logits(tr)) return 1;
    in = gpt2_param_refs(tr);
    o = tj_tree_new(tr->ctx);
    st = gpt2_set_tokens(tr, in, "tokens", tok, 1, 1, tr->cfg.T) || tj_run(tr->logits, in, o) || tj_array_read(tj_tree_array(o, "logits"), TJ_F32, out);
    tj_tree_free(in);
    tj_tree_free(o);
    return st;
}
static double max_rel(const float *a, const float *b, int64_t n) {
    double worst = 0, scale = 0;
    int64_t k;
    for (k = 0; k < n; k++) if (fabs(b[k]) > scale) scale = fabs(b[k]);
    for (k = 0; k < n; k++) {
        double r = fabs((double)a[k] - b[k]) / (scale > 0 ? scale : 1);
        if (!(r <= worst)) worst = r;
    }
    return worst;
}
static void test_hf(void) {
    hf_set h;
    gpt2_config base, c;
    gpt2_trainer ref, tr;
    gpt2_hf hf;
    char err[1024], pbuf[600], missing[600];
    const char *path = tpath(pbuf, sizeof pbuf, "test_gpt2_hf.safetensors");
    int32_t tok[HP];
    float *want = (float *)malloc(sizeof(float) * HP * HV), *got = (float *)malloc(sizeof(float) * HP * HV);
    int i, v;
    tjt_current = "hf init-from";
    hf_make(&h);
    for (i = 0; i < HP; i++) tok[i] = (i * 37 + 11) % HV;
    gpt2_default_config(&base);
    base.B = 2; base.T = 64; /* clipped to the file's 16 positions */
    /* the reference: the same numbers put into the demo's tree by hand */
    c = base;
    c.L = HL; c.C = HC; c.H = HH; c.M = HM; c.V = c.V_real = HV; c.T = c.block = HP;
    if (gpt2_trainer_init(&ref, &c, 1, NULL, 2) || hf_set_by_hand(&ref, &h) || hf_logits(&ref, tok, want)) {
        TJT_CHECK(0, "reference model: %s", ref.ctx ? tj_error(ref.ctx) : "init");
        free(want); free(got);
        return;
    }
    for (v = 0; v < 4; v++) {
        /* v: 0 "transformer." F32, 1 no prefix BF16, 2 no prefix F32 on a
           data=2 x model=2 mesh, 3 prefix BF16 on data=2 (FSDP) */
        const char *prefix = v == 0 || v == 3 ? "transformer." : "";
        int ndev = v == 2 ? 4 : v == 3 ? 2 : 1;
        const char *mesh = v == 2 ? "data=2 model=2" : v == 3 ? "data=2" : NULL;
        TJT_CHECK(hf_write(&h, path, prefix, v & 1, NULL) == 0, "write %s", path);
        if (gpt2_hf_open(&hf, path, err, sizeof err)) { TJT_CHECK(0, "open: %s", err); continue; }
        c = base;
        c.param_rules = v == 3 ? "embed:data vocab:data mlp:data" : "embed:data mlp:model heads:model vocab:model";
        c.compute_rules = "batch:data mlp:model heads:model";
        TJT_CHECK(!strcmp(hf.prefix, prefix), "variant %d: prefix '%s', want '%s'", v, hf.prefix, prefix);
        TJT_CHECK(gpt2_hf_config(&hf, &c, HH, err, sizeof err) == 0, "config: %s", err);
        TJT_CHECK(c.L == HL && c.C == HC && c.H == HH && c.M == HM && c.V == HV && c.V_real == HV && c.block == HP && c.T == HP,
                  "variant %d: inferred L=%d C=%d H=%d M=%d V=%d/%d block=%d T=%d", v, c.L, c.C, c.H, c.M, c.V, c.V_real, c.block, c.T);
        if (gpt2_trainer_init(&tr, &c, ndev, mesh, 1)) { TJT_CHECK(0, "variant %d: trainer init", v); gpt2_hf_close(&hf); continue; }
        TJT_CHECK(gpt2_hf_load(&tr, &hf, err, sizeof err) == 0, "variant %d: load: %s", v, err);
        gpt2_hf_close(&hf);
        if (v < 2) { /* the very same parameter values */
            int p, same = 1;
            for (p = 0; p < NPARAMS; p++) {
                char pn[128];
                int64_t n1, n2;
                float *a, *b;
                snprintf(pn, sizeof pn, "params.%s", gpt2_params[p].name);
                a = read_leaf(&tr, pn, &n1);
                b = read_leaf(&ref, pn, &n2);
                if (!a || !b || n1 != n2 || memcmp(a, b, sizeof(float) * (size_t)n1)) { same = 0; fprintf(stderr, "  %s differs\n", pn); }
                free(a);
                free(b);
            }
            TJT_CHECK(same, "variant %d: loaded parameters differ from the hand-built ones", v);
        }
        if (hf_logits(&tr, tok, got)) TJT_CHECK(0, "variant %d: logits: %s", v, tj_error(tr.ctx));
        else {
            double r = max_rel(got, want, (int64_t)HP * HV);
            TJT_CHECK(r <= (ndev > 1 ? 1e-5 : 1e-6), "variant %d (%s, %s, %d devices): logits differ, max rel %.3g", v, *prefix ? "prefix" : "no prefix",
                      v & 1 ? "BF16" : "F32", ndev, r);
        }
        gpt2_trainer_free(&tr);
    }

    tjt_current = "hf errors";
    {
        float *before = NULL, *after = NULL;
        int64_t n1 = 0, n2 = 0;
        c = base;
        c.L = HL; c.C = HC; c.H = HH; c.M = HM; c.V = c.V_real = HV; c.T = c.block = HP;
        c.param_rules = c.compute_rules = NULL;
        if (!gpt2_trainer_init(&tr, &c, 1, NULL, 1)) {
            before = read_leaf(&tr, "params.h.wfc", &n1);
            /* a file missing one tensor: the error names it and the file; nothing loaded */
            hf_write(&h, path, "transformer.", 0, "h.1.mlp.c_fc.bias");
            err[0] = 0;
            TJT_CHECK(gpt2_init_from(&tr, path, err, sizeof err) != 0, "a file without h.1.mlp.c_fc.bias loaded");
            TJT_CHECK(strstr(err, "transformer.h.1.mlp.c_fc.bias") && strstr(err, path) && strstr(err, "missing"), "missing tensor: message \"%s\"", err);
            after = read_leaf(&tr, "params.h.wfc", &n2);
            TJT_CHECK(before && after && n1 == n2 && !memcmp(before, after, sizeof(float) * (size_t)n1), "a failed load changed the parameters (half-loaded)");
            free(after);
            /* a truncated file */
            hf_write(&h, path, "", 0, NULL);
            {
                FILE *f = fopen(path, "rb");
                long len;
                char *buf;
                fseek(f, 0, SEEK_END);
                len = ftell(f);
                fseek(f, 0, SEEK_SET);
                buf = (char *)malloc((size_t)len);
                TJT_CHECK(fread(buf, 1, (size_t)len, f) == (size_t)len, "read back");
                fclose(f);
                f = fopen(path, "wb");
                fwrite(buf, 1, (size_t)len / 2, f);
                fclose(f);
                free(buf);
            }
            err[0] = 0;
            TJT_CHECK(gpt2_init_from(&tr, path, err, sizeof err) != 0, "a truncated file loaded");
            TJT_CHECK(strstr(err, path) != NULL && strlen(err) > strlen(path) + 10, "truncated file: message \"%s\"", err);
            printf("  truncated file: %s\n", err);
            /* a wrong shape */
            {
                hf_set h2 = h;
                h2.t[1].shape[1] = HC / 2; /* wpe (16, 16): only the first half of the data is written */
                hf_write(&h2, path, "", 0, NULL);
                err[0] = 0;
                TJT_CHECK(gpt2_init_from(&tr, path, err, sizeof err) != 0, "a file with a wrong wpe shape loaded");
                TJT_CHECK(strstr(err, "wpe.weight") && strstr(err, path), "wrong shape: message \"%s\"", err);
            }
            /* not a file at all */
            err[0] = 0;
            TJT_CHECK(gpt2_init_from(&tr, tpath(missing, sizeof missing, "no_such_file.safetensors"), err, sizeof err) != 0 && strstr(err, "no_such_file"), "missing file: \"%s\"", err);
            after = read_leaf(&tr, "params.h.wfc", &n2);
            TJT_CHECK(before && after && n1 == n2 && !memcmp(before, after, sizeof(float) * (size_t)n1), "failed loads changed the parameters");
            free(after);
            free(before);
            gpt2_trainer_free(&tr);
        } else TJT_CHECK(0, "trainer init");
    }
    remove(path);
    for (i = 0; i < h.n; i++) free(h.t[i].data);
    gpt2_trainer_free(&ref);
    free(want);
    free(got);
}

/* ---- config.json beside the weights (or --init-from DIR): heads, layer
   norm epsilon and activation come from it; a disagreement with the
   tensors or with --heads is an error naming both */
static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) { fputs(text, f); fclose(f); }
}
/* a config.json as transformers writes it, with `extra` spliced in */
static void write_config(const char *path, int heads, const char *extra) {
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"attn_pdrop\": 0.1,\n"
             "  \"bos_token_id\": 50256,\n  \"embd_pdrop\": 0.1,\n  \"eos_token_id\": 50256,\n  \"initializer_range\": 0.02,\n"
             "  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n  \"n_head\": %d,\n"
             "  \"n_inner\": null,\n  \"n_layer\": %d,\n  \"n_positions\": %d,\n  \"reorder_and_upcast_attn\": false,\n  \"resid_pdrop\": 0.1,\n"
             "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"scale_attn_weights\": true,\n  \"summary_activation\": null,\n"
             "  \"task_specific_params\": {\"text-generation\": {\"do_sample\": true, \"max_length\": 50}},\n"
             "  \"torch_dtype\": \"float32\",\n  \"transformers_version\": \"4.46.0\",\n  \"use_cache\": true,%s\n  \"vocab_size\": %d\n}\n",
             HP, HC, heads, HL, HP, extra ? extra : "", HV);
    write_text(path, buf);
}
/* logits of the file's model loaded through gpt2_hf_open / config / load */
static int load_logits(const char *path, int heads_flag, const int32_t *tok, float *out, gpt2_config *got, char *err, size_t n) {
    gpt2_hf hf;
    gpt2_config c;
    gpt2_trainer tr;
    int st;
    gpt2_default_config(&c);
    c.B = 2; c.T = HP;
    c.param_rules = c.compute_rules = NULL;
    if (gpt2_hf_open(&hf, path, err, n)) return 1;
    if (gpt2_hf_config(&hf, &c, heads_flag, err, n)) { gpt2_hf_close(&hf); return 1; }
    if (gpt2_trainer_init(&tr, &c, 1, NULL, 1)) { gpt2_hf_close(&hf); snprintf(err, n, "trainer init"); return 1; }
    st = gpt2_hf_load(&tr, &hf, err, n) || hf_logits(&tr, tok, out);
    if (got) *got = tr.cfg;
    gpt2_hf_close(&hf);
    gpt2_trainer_free(&tr);
    return st;
}
/* the reference: the same numbers put in by hand into a model of config c */
static int ref_logits(const hf_set *h, gpt2_config c, const int32_t *tok, float *out) {
    gpt2_trainer tr;
    int st;
    c.L = HL; c.C = HC; c.M = HM; c.V = c.V_real = HV; c.T = c.block = HP; c.B = 2;
    c.param_rules = c.compute_rules = NULL;
    if (gpt2_trainer_init(&tr, &c, 1, NULL, 1)) return 1;
    st = hf_set_by_hand(&tr, h) || hf_logits(&tr, tok, out);
    gpt2_trainer_free(&tr);
    return st;
}
static void test_hf_config(void) {
    hf_set h;
    char err[1024], dbuf[600], wbuf[600], cbuf[600];
    const char *dir = tpath(dbuf, sizeof dbuf, "hf_cfg"), *wpath = tpath(wbuf, sizeof wbuf, "hf_cfg/model.safetensors"),
               *cpath = tpath(cbuf, sizeof cbuf, "hf_cfg/config.json");
    int32_t tok[HP];
    float *want = (float *)malloc(sizeof(float) * HP * HV), *got = (float *)malloc(sizeof(float) * HP * HV), *two = (float *)malloc(sizeof(float) * HP * HV);
    gpt2_config c, lc;
    int i;
    tjt_current = "hf config.json";
    hf_make(&h);
    for (i = 0; i < HP; i++) tok[i] = (i * 37 + 11) % HV;
    mkdir(dir, 0755);
    TJT_CHECK(hf_write(&h, wpath, "", 0, NULL) == 0, "write %s", wpath);
    gpt2_default_config(&c);
    /* without config.json: heads from the flag */
    remove(cpath);
    TJT_CHECK(load_logits(wpath, 2, tok, two, &lc, err, sizeof err) == 0 && lc.H == 2, "no config.json, --heads 2: %s (H=%d)", err, lc.H);
    err[0] = 0;
    TJT_CHECK(load_logits(wpath, 0, tok, got, NULL, err, sizeof err) != 0 && strstr(err, "--heads"), "no config.json, no --heads, embed 32: \"%s\"", err);
    /* 4 heads from config.json, by file path and by directory: the logits of a 4-head model */
    c.H = 4;
    TJT_CHECK(ref_logits(&h, c, tok, want) == 0, "4-head reference");
    write_config(cpath, 4, NULL);
    err[0] = 0;
    TJT_CHECK(load_logits(wpath, 0, tok, got, &lc, err, sizeof err) == 0 && lc.H == 4, "config n_head 4: %s (H=%d)", err, lc.H);
    TJT_CHECK(max_rel(got, want, (int64_t)HP * HV) <= 1e-6, "config n_head 4: logits differ from a 4-head model's, max rel %.3g", max_rel(got, want, (int64_t)HP * HV));
    TJT_CHECK(max_rel(two, want, (int64_t)HP * HV) > 1e-3, "2 and 4 heads give the same logits: the test cannot tell them apart");
    err[0] = 0;
    TJT_CHECK(load_logits(dir, 4, tok, got, &lc, err, sizeof err) == 0 && lc.H == 4 && max_rel(got, want, (int64_t)HP * HV) <= 1e-6,
              "--init-from DIR with --heads 4 agreeing: %s", err);
    err[0] = 0;
    TJT_CHECK(load_logits(dir, 2, tok, got, NULL, err, sizeof err) != 0 && strstr(err, "n_head is 4, --heads says 2") && strstr(err, "config.json"),
              "--heads 2 against n_head 4: \"%s\"", err);
    /* layer norm epsilon and relu */
    write_config(cpath, 4, "\n  \"layer_norm_epsilon\": 0.25,\n  \"activation_function\": \"relu\",");
    c.ln_eps = 0.25;
    c.act = ACT_RELU;
    TJT_CHECK(ref_logits(&h, c, tok, want) == 0, "eps 0.25 relu reference");
    err[0] = 0;
    TJT_CHECK(load_logits(wpath, 0, tok, got, &lc, err, sizeof err) == 0 && lc.ln_eps == 0.25 && lc.act == ACT_RELU, "eps 0.25, relu: %s", err);
    TJT_CHECK(max_rel(got, want, (int64_t)HP * HV) <= 1e-6, "eps 0.25, relu: logits differ, max rel %.3g", max_rel(got, want, (int64_t)HP * HV));
    /* errors name the file and what is wrong */
    {
        static const struct { const char *extra, *want1, *want2; } bad[] = {
            {"\n  \"n_layer\": 3,", "n_layer is 3", "has 2 layers"},
            {"\n  \"n_positions\": 1024,", "n_positions is 1024", "has 16 positions"},
            {"\n  \"n_inner\": 64,", "n_inner is 64", "128 MLP channels"},
            {"\n  \"activation_function\": \"gelu\",", "activation_function \"gelu\" is not supported", "gelu_new"},
            {"\n  \"model_type\": \"llama\",", "model_type \"llama\"", "gpt2"},
            {"\n  \"n_head\": 3,", "n_head 3 does not divide n_embd 32", "config.json"},
            {"\n  \"scale_attn_by_inverse_layer_idx\": true,", "scale_attn_by_inverse_layer_idx", "not supported"},
            {"\n  \"n_embd\": \"32\",", "\"n_embd\" must be a non-negative integer", "config.json"},
            {"\n  \"oops\": [1, 2,", "bad JSON", "config.json"},
        };
        size_t k;
        for (k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            write_config(cpath, 4, bad[k].extra);
            err[0] = 0;
            TJT_CHECK(load_logits(wpath, 0, tok, got, NULL, err, sizeof err) != 0 && strstr(err, bad[k].want1) && strstr(err, bad[k].want2),
                      "config error %zu: message \"%s\" lacks \"%s\" or \"%s\"", k, err, bad[k].want1, bad[k].want2);
        }
    }
    /* lm_head.weight: wte saved twice loads; an untied head is refused, not ignored */
    write_config(cpath, 4, NULL);
    {
        hf_set *h2 = (hf_set *)malloc(sizeof *h2);
        float *other = (float *)malloc(sizeof(float) * HV * HC);
        *h2 = h;
        h2->t[h2->n] = h.t[0]; /* wte's data */
        snprintf(h2->t[h2->n].name, sizeof h2->t[h2->n].name, "lm_head.weight");
        h2->n++;
        TJT_CHECK(hf_write(h2, wpath, "", 0, NULL) == 0, "write with lm_head");
        err[0] = 0;
        TJT_CHECK(load_logits(wpath, 0, tok, got, NULL, err, sizeof err) == 0, "lm_head.weight equal to wte: %s", err);
        memcpy(other, h.t[0].data, sizeof(float) * HV * HC);
        other[5] += 1.0f;
        h2->t[h2->n - 1].data = other;
        TJT_CHECK(hf_write(h2, wpath, "", 0, NULL) == 0, "write with an untied lm_head");
        err[0] = 0;
        TJT_CHECK(load_logits(wpath, 0, tok, got, NULL, err, sizeof err) != 0 && strstr(err, "lm_head.weight differs") && strstr(err, "untied"),
                  "untied lm_head.weight: \"%s\"", err);
        free(other);
        free(h2);
        TJT_CHECK(hf_write(&h, wpath, "", 0, NULL) == 0, "rewrite");
        write_config(cpath, 4, "\n  \"tie_word_embeddings\": false,");
        err[0] = 0;
        TJT_CHECK(load_logits(wpath, 0, tok, got, NULL, err, sizeof err) != 0 && strstr(err, "tie_word_embeddings false"), "untied config: \"%s\"", err);
    }
    remove(cpath);
    remove(wpath);
    rmdir(dir);
    for (i = 0; i < h.n; i++) free(h.t[i].data);
    free(want);
    free(got);
    free(two);
}

/* ---- --export-hf: a trained tinyjax model (sharded over data=2 x model=2,
   4 heads of 8 channels, vocab 200 padded to 256, relu, eps 1e-3) exported
   as a Hugging Face directory loads back with --init-from DIR bit for bit:
   config.json brings heads, eps and activation back */
static int dir_has_tmp(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL) if (strstr(e->d_name, ".tmp.")) found = 1;
    closedir(d);
    return found;
}
static void test_hf_export(const int32_t *data, size_t n) {
    gpt2_config c, lc;
    gpt2_trainer a, b;
    gpt2_hf hf;
    char err[1024], p1[700], dbuf[600], mbuf[600];
    const char *dir = tpath(dbuf, sizeof dbuf, "export"), *missing = tpath(mbuf, sizeof mbuf, "no_such_dir/sub");
    int32_t x[TB * TT], y[TB * TT];
    int s, i;
    tjt_current = "hf export";
    tiny_config(&c);
    c.H = 4;
    c.V = 256;
    c.V_real = 200;
    c.act = ACT_RELU;
    c.ln_eps = 1e-3;
    if (gpt2_trainer_init(&a, &c, 4, "data=2 model=2", 1)) { TJT_CHECK(0, "init"); return; }
    for (s = 0; s < 2; s++) {
        get_batch(data, n, TB, TT, 13, 1, (uint64_t)s, x, y);
        gpt2_train_step(&a, x, y, 1e-2);
    }
    err[0] = 0;
    TJT_CHECK(gpt2_export_hf(&a, dir, 199, err, sizeof err) == 0, "export: %s", err);
    TJT_CHECK(!dir_has_tmp(dir), "temporary files left in %s", dir);
    err[0] = 0;
    if (gpt2_hf_open(&hf, dir, err, sizeof err)) { TJT_CHECK(0, "open the export: %s", err); gpt2_trainer_free(&a); return; }
    TJT_CHECK(tj_st_find(hf.st, "h.1.attn.c_attn.weight") && tj_st_find(hf.st, "wte.weight")->shape[0] == 200 && !tj_st_find(hf.st, "lm_head.weight") &&
                  tj_st_meta(hf.st, "format") && !strcmp(tj_st_meta(hf.st, "format"), "pt"),
              "the export lacks Hugging Face names, a 200-row wte or format pt");
    gpt2_default_config(&lc);
    lc.T = TT; lc.B = TB;
    lc.param_rules = lc.compute_rules = NULL;
    TJT_CHECK(gpt2_hf_config(&hf, &lc, 0, err, sizeof err) == 0, "config: %s", err);
    TJT_CHECK(lc.L == 2 && lc.C == 32 && lc.H == 4 && lc.M == 128 && lc.V_real == 200 && lc.V == 256 && lc.block == TT && lc.act == ACT_RELU && lc.ln_eps == 1e-3,
              "exported config read back as L=%d C=%d H=%d M=%d V=%d/%d block=%d act=%d eps=%g", lc.L, lc.C, lc.H, lc.M, lc.V_real, lc.V, lc.block, lc.act,
              lc.ln_eps);
    if (!gpt2_trainer_init(&b, &lc, 1, NULL, 1)) {
        TJT_CHECK(gpt2_hf_load(&b, &hf, err, sizeof err) == 0, "load the export: %s", err);
        for (i = 0; i < NPARAMS; i++) {
            int64_t n1, n2, cmp;
            float *pa, *pb;
            snprintf(p1, sizeof p1, "params.%s", gpt2_params[i].name);
            pa = read_leaf(&a, p1, &n1);
            pb = read_leaf(&b, p1, &n2);
            cmp = strcmp(gpt2_params[i].name, "wte") ? n1 : 200 * 32; /* wte: the real rows */
            TJT_CHECK(pa && pb && n1 == n2 && !memcmp(pa, pb, sizeof(float) * (size_t)cmp), "%s differs after export and --init-from", p1);
            free(pa);
            free(pb);
        }
        get_batch(data, n, TB, TT, 13, 2, 0, x, y);
        {
            float la = gpt2_eval_loss(&a, x, y), lb = gpt2_eval_loss(&b, x, y);
            TJT_CHECK(fabs(la - lb) <= 1e-5 * la, "eval loss %.7f exported and reloaded, %.7f before", lb, la);
        }
        gpt2_trainer_free(&b);
    } else TJT_CHECK(0, "init for the reload");
    gpt2_hf_close(&hf);
    {   /* config.json's token ids and inner size */
        gio_gpt2_config cf;
        snprintf(p1, sizeof p1, "%s/config.json", dir);
        TJT_CHECK(gio_gpt2_config_read(p1, &cf, err, sizeof err) == 0 && cf.eos_token_id == 199 && cf.bos_token_id == 199 && cf.n_inner == -2 &&
                      cf.tie_word_embeddings == 1 && !strcmp(cf.activation_function, "relu") && !strcmp(cf.model_type, "gpt2"),
                  "config.json: %s", err);
    }
    {   /* the dropout it was trained with (none), not transformers' default 0.1 */
        char *txt = NULL;
        size_t len = 0;
        snprintf(p1, sizeof p1, "%s/config.json", dir);
        TJT_CHECK(tj_read_file(p1, &txt, &len, err, sizeof err) == TJ_OK && strstr(txt, "\"resid_pdrop\": 0,") && strstr(txt, "\"embd_pdrop\": 0,") &&
                      strstr(txt, "\"attn_pdrop\": 0,"),
                  "config.json lacks the dropout rates: %s", txt ? txt : err);
        tj_free(txt);
    }
    /* failures: a file where the directory should be, a missing parent */
    err[0] = 0;
    snprintf(p1, sizeof p1, "%s/config.json", dir);
    TJT_CHECK(gpt2_export_hf(&a, p1, -1, err, sizeof err) != 0 && strstr(err, "not a directory"), "export onto a file: \"%s\"", err);
    err[0] = 0;
    TJT_CHECK(gpt2_export_hf(&a, missing, -1, err, sizeof err) != 0 && strstr(err, "no_such_dir/sub") && strstr(err, "cannot create"),
              "export under a missing directory: \"%s\"", err);
    snprintf(p1, sizeof p1, "%s/model.safetensors", dir);
    remove(p1);
    snprintf(p1, sizeof p1, "%s/config.json", dir);
    remove(p1);
    rmdir(dir);
    gpt2_trainer_free(&a);
}

/* ---- padded vocabulary (issue 15, item 5): V_real 200 padded to 256. The
   loss is the cross-entropy over the 200 real columns only (as transformers
   computes it), in training, evaluation and the vocab-parallel shard_map
   loss alike, and no gradient reaches the padded columns: after a step
   with weight decay 0 the padded rows of the tied wte are unchanged. */
static double ref_xent_real(gpt2_trainer *tr, const int32_t *x, const int32_t *y, int Vr) {
    float *lg = (float *)malloc(sizeof(float) * TT * 256);
    double sum = 0;
    int b, t, v;
    for (b = 0; b < TB; b++) {
        if (hf_logits(tr, x + b * TT, lg)) { free(lg); return NAN; }
        for (t = 0; t < TT; t++) {
            const float *r = lg + (size_t)t * 256;
            double mx = -1e300, se = 0;
            for (v = 0; v < Vr; v++) if (r[v] > mx) mx = r[v];
            for (v = 0; v < Vr; v++) se += exp(r[v] - mx);
            sum += mx + log(se) - r[y[b * TT + t]];
        }
    }
    free(lg);
    return sum / (TB * TT);
}
/* resume on a mesh: the state's arrays are the load's targets, so each
   leaf comes back with its sharding and no device ever holds a replicated
   copy (until 2026-11-24 the checkpoint loaded replicated and was then
   resharded: device 0 held the whole state for a moment) */
static void test_resume_sharded(const int32_t *data, size_t n) {
    gpt2_config c;
    gpt2_trainer a, b;
    char pbuf[600], s1[256], s2[256];
    const char *path = tpath(pbuf, sizeof pbuf, "resume_sharded.safetensors");
    int32_t x[TB * TT], y[TB * TT];
    int s, k;
    tjt_current = "resume on a mesh";
    tiny_config(&c);
    if (gpt2_trainer_init(&a, &c, 4, "data=2 model=2", 1)) { TJT_CHECK(0, "init"); return; }
    for (s = 0; s < 2; s++) {
        get_batch(data, n, TB, TT, 17, 1, (uint64_t)s, x, y);
        gpt2_train_step(&a, x, y, 1e-2);
    }
    TJT_CHECK(gpt2_save(&a, path) == 0, "save: %s", tj_error(a.ctx));
    if (!gpt2_trainer_init(&b, &c, 4, "data=2 model=2", 1)) {
        tj_alloc_stats st0 = tj_get_alloc_stats(b.ctx), st1;
        int64_t held = st0.device_bytes[0], grew;
        tj_reset_alloc_peaks(b.ctx);
        TJT_CHECK(gpt2_resume(&b, path) == 0, "resume: %s", tj_error(b.ctx));
        st1 = tj_get_alloc_stats(b.ctx);
        grew = st1.device_peak_bytes[0] - held;
        /* the new leaves exist beside the old ones for a moment: at most
           one more copy of device 0's share */
        TJT_CHECK(grew <= held + held / 50, "device 0 held %lld bytes and grew by %lld while resuming (a replicated copy?)", (long long)held, (long long)grew);
        TJT_CHECK(st1.device_bytes[0] == held, "device 0 holds %lld bytes after resuming, %lld before", (long long)st1.device_bytes[0], (long long)held);
        for (k = 0; k < tj_tree_size(a.state); k++) {
            const char *nm = tj_tree_name(a.state, k);
            if (!is_state_leaf(nm)) continue;
            tj_array_sharding(tj_tree_array(a.state, nm), s1, sizeof s1);
            tj_array_sharding(tj_tree_array(b.state, nm), s2, sizeof s2);
            TJT_CHECK(!strcmp(s1, s2), "%s resumed as %s, saved as %s", nm, s2, s1);
        }
        get_batch(data, n, TB, TT, 17, 1, 2, x, y);
        {
            float la = gpt2_train_step(&a, x, y, 1e-2), lb = gpt2_train_step(&b, x, y, 1e-2);
            TJT_CHECK(la == lb, "the step after resuming: loss %.9g, uninterrupted %.9g", lb, la);
        }
        gpt2_trainer_free(&b);
    } else TJT_CHECK(0, "init for the resume");
    gpt2_trainer_free(&a);
    remove(path);
}

static void test_padded_vocab(const int32_t *data, size_t n) {
    struct { int ndev; const char *mesh; const char *name; } ms[] = {
        {1, NULL, "one device"},
        {4, "data=2 model=2", "data=2 x model=2, vocab-parallel loss"},
    };
    int32_t x[TB * TT], y[TB * TT];
    int m;
    tjt_current = "padded vocab";
    for (m = 0; m < 2; m++) {
        gpt2_config c;
        gpt2_trainer tr;
        float *w0, *w1, le, lt;
        int64_t n0, n1;
        double want;
        tiny_config(&c);
        c.V = 256;
        c.V_real = 200;
        c.wd = 0;
        if (gpt2_trainer_init(&tr, &c, ms[m].ndev, ms[m].mesh, 1)) { TJT_CHECK(0, "%s: init", ms[m].name); continue; }
        get_batch(data, n, TB, TT, 9, 1, 0, x, y);
        want = ref_xent_real(&tr, x, y, 200);
        le = gpt2_eval_loss(&tr, x, y);
        TJT_CHECK(fabs(le - want) <= 1e-5 * want, "%s: eval loss %.7f, cross-entropy over the 200 real columns %.7f", ms[m].name, le, want);
        w0 = read_leaf(&tr, "params.wte", &n0);
        lt = gpt2_train_step(&tr, x, y, 1e-2);
        TJT_CHECK(fabs(lt - want) <= 1e-5 * want, "%s: training loss %.7f, cross-entropy over the 200 real columns %.7f", ms[m].name, lt, want);
        w1 = read_leaf(&tr, "params.wte", &n1);
        TJT_CHECK(w0 && w1 && n0 == 256 * 32 && n1 == n0 && !memcmp(w0 + 200 * 32, w1 + 200 * 32, sizeof(float) * 56 * 32),
                  "%s: a training step changed the padded rows of wte (gradient flowed into padded columns)", ms[m].name);
        TJT_CHECK(w0 && w1 && memcmp(w0, w1, sizeof(float) * 200 * 32), "%s: the real rows of wte did not train", ms[m].name);
        {
            float row[256];
            int32_t w[3] = {'t', 'h', 'e'}, v, bad = 0;
            TJT_CHECK(gpt2_next_logits(&tr, w, 3, row) == 0, "%s: logits", ms[m].name);
            for (v = 200; v < 256; v++) bad += !(row[v] <= -1e29f);
            TJT_CHECK(!bad, "%s: %d padded columns have a logit above -1e29", ms[m].name, bad);
        }
        free(w0);
        free(w1);
        gpt2_trainer_free(&tr);
    }
}

/* ---- gradient accumulation: --accum 2 --batch TB/2 reads the windows
   --batch TB reads, and its mean gradient is the same sum in another order,
   so gradients, losses and parameters agree up to float rounding. */

/* Leaves `prefix`<param> of two trainers agree to within tol of each leaf's
   largest value. The parameters h.bqkv get a looser 5e-4: the key bias
   (a third of the leaf) has an exactly zero gradient (softmax over kpos
   ignores a shift), so Adam, which divides by sqrt(v), turns the rounding
   noise left in it into steps of up to lr whose signs follow the order of
   summation (measured: 1.1e-4 of the leaf's largest value after 4 steps). */
static void check_leaves(gpt2_trainer *a, gpt2_trainer *b, const char *prefix, double tol, const char *what) {
    int i;
    for (i = 0; i < NPARAMS; i++) {
        char pn[128];
        int64_t n1, n2;
        float *pa, *pb;
        double r = 1, t = tol;
        snprintf(pn, sizeof pn, "%s%s", prefix, gpt2_params[i].name);
        pa = read_leaf(a, pn, &n1);
        pb = read_leaf(b, pn, &n2);
        if (pa && pb && n1 == n2) r = max_rel(pa, pb, n1);
        if (i == P_BQKV && !strcmp(prefix, "params.")) t = 5e-4;
        TJT_CHECK(r <= t, "%s: %s differs by %.3g of its largest value (tolerance %.0e)", what, pn, r, t);
        free(pa);
        free(pb);
    }
}
static void test_accum(const int32_t *data, size_t n) {
    struct { int ndev; const char *mesh; int seq_parallel, remat, unroll; const char *name; } vs[] = {
        {1, NULL, 0, REMAT_BLOCK_OUT, 0, "one device, scan"},
        {2, "data=2", 0, REMAT_BLOCK_OUT, 0, "data=2, scan"},
        {4, "data=2 model=2", 1, REMAT_NOTHING, 0, "data=2 x model=2, sequence parallel, remat nothing, scan"},
        {1, NULL, 0, REMAT_BLOCK_OUT, 1, "one device, unrolled"},
        {4, "data=2 model=2", 0, REMAT_OFFLOAD, 0, "data=2 x model=2, remat offload inside the accumulation scan"},
        {2, "data=2", 0, REMAT_OFFLOAD, 1, "data=2, remat offload, unrolled"},
    };
    char pbuf[600];
    const char *path = tpath(pbuf, sizeof pbuf, "test_gpt2_accum.safetensors");
    int32_t x1[TB * TT], y1[TB * TT], x2[TB * TT], y2[TB * TT];
    int v, s;
    tjt_current = "accum";
    for (v = 0; v < (int)(sizeof vs / sizeof vs[0]); v++) {
        gpt2_config c1, c2;
        gpt2_trainer one, two;
        float l1 = 0, l2 = 0;
        char what[160];
        tiny_config(&c1);
        c1.seq_parallel = vs[v].seq_parallel;
        c1.remat = vs[v].remat;
        c2 = c1;
        c2.B = TB / 2;
        c2.accum = 2;
        c2.accum_unroll = vs[v].unroll;
        if (gpt2_trainer_init(&one, &c1, vs[v].ndev, vs[v].mesh, 1)) { TJT_CHECK(0, "%s: init batch %d", vs[v].name, TB); continue; }
        if (gpt2_trainer_init(&two, &c2, vs[v].ndev, vs[v].mesh, 1)) {
            TJT_CHECK(0, "%s: init 2 x %d", vs[v].name, TB / 2);
            gpt2_trainer_free(&one);
            continue;
        }
        /* the mean gradient: its norm every step, and its direction from
           step 0 at lr 0, which leaves m = (1 - beta1) * gradient / norm
           (clipped: Adam and clipping do not see the gradient's scale) */
        for (s = 0; s < 5; s++) {
            gpt2_next_batch(&one, data, n, 5, x1, y1);
            gpt2_next_batch(&two, data, n, 5, x2, y2);
            TJT_CHECK(!memcmp(x1, x2, sizeof x1) && !memcmp(y1, y2, sizeof y1), "%s: step %d: 2 micro-batches of %d are not the batch of %d", vs[v].name, s,
                      TB / 2, TB);
            l1 = gpt2_train_step(&one, x1, y1, s ? 3e-3 : 0.0);
            l2 = gpt2_train_step(&two, x2, y2, s ? 3e-3 : 0.0);
            TJT_CHECK(fabs(l1 - l2) <= 1e-5 * fabs(l1), "%s: step %d loss %.9g with accum 2 vs %.9g with batch %d (rel %.2g)", vs[v].name, s, l2, l1, TB,
                      fabs(l1 - l2) / fabs(l1));
            TJT_CHECK(fabs(one.last_gnorm - two.last_gnorm) <= 1e-5 * one.last_gnorm, "%s: step %d gradient norm %.9g with accum 2 vs %.9g", vs[v].name, s,
                      two.last_gnorm, one.last_gnorm);
            if (s == 0) {
                snprintf(what, sizeof what, "%s, gradient of step 0", vs[v].name);
                check_leaves(&one, &two, "m.", 1e-5, what);
            }
        }
        snprintf(what, sizeof what, "%s, after 5 steps", vs[v].name);
        check_leaves(&one, &two, "params.", 1e-5, what);
        TJT_CHECK(one.data_pos == 5 && two.data_pos == 10, "%s: data positions %lld and %lld micro-batches, want 5 and 10", vs[v].name,
                  (long long)one.data_pos, (long long)two.data_pos);
        if (v == 0) { /* resume: the data position comes back, the next step is the same */
            gpt2_trainer three;
            TJT_CHECK(gpt2_save(&two, path) == 0, "save: %s", tj_error(two.ctx));
            if (!gpt2_trainer_init(&three, &c2, 1, NULL, 1)) {
                TJT_CHECK(gpt2_resume(&three, path) == 0, "resume: %s", tj_error(three.ctx));
                TJT_CHECK(three.step_no == 5 && three.data_pos == 10, "resumed at step %lld, data position %lld; want 5, 10", (long long)three.step_no,
                          (long long)three.data_pos);
                gpt2_next_batch(&two, data, n, 5, x1, y1);
                gpt2_next_batch(&three, data, n, 5, x2, y2);
                l1 = gpt2_train_step(&two, x1, y1, 3e-3);
                l2 = gpt2_train_step(&three, x2, y2, 3e-3);
                TJT_CHECK(l1 == l2, "resumed accum step loss %.9g vs uninterrupted %.9g", l2, l1);
                gpt2_trainer_free(&three);
            } else TJT_CHECK(0, "init for resume");
            remove(path);
        }
        gpt2_trainer_free(&one);
        gpt2_trainer_free(&two);
    }
    /* memory: the step's temp does not grow with K (one micro-batch's
       activations and a gradient sum, whatever the number of micro-batches;
       unrolled, from K = 2 to 4 the arena's layout still changes a little) */
    for (v = 0; v < 2; v++) {
        gpt2_config c;
        gpt2_trainer k4, k8;
        tiny_config(&c);
        c.B = TB / 2;
        c.accum_unroll = v;
        c.accum = 4;
        if (gpt2_trainer_init(&k4, &c, 1, NULL, 1)) { TJT_CHECK(0, "init accum 4"); continue; }
        c.accum = 8;
        if (!gpt2_trainer_init(&k8, &c, 1, NULL, 1)) {
            int64_t t4 = tj_prog_memory(k4.step).temp_bytes, t8 = tj_prog_memory(k8.step).temp_bytes;
            /* unrolled, first-fit placement of the per-micro-batch scalars
               shifts the layout by a few hundred bytes */
            TJT_CHECK(v ? t8 <= t4 + t4 / 100 : t4 == t8, "%s: temp %lld B with accum 4, %lld B with accum 8", v ? "unrolled" : "scan", (long long)t4,
                      (long long)t8);
            gpt2_trainer_free(&k8);
        } else TJT_CHECK(0, "init accum 8");
        gpt2_trainer_free(&k4);
    }
}

/* Forward-pass collectives over mesh axis model that the compute rules'
   shard_by_rules calls caused (the ones sequence parallelism changes). */
static void model_collectives(gpt2_trainer *tr, int *all_gather, int *reduce_scatter, int *psum) {
    tj_collective cols[512];
    int n = tj_prog_collectives(tr->step, cols, 512), k;
    *all_gather = *reduce_scatter = *psum = 0;
    for (k = 0; k < n && k < 512; k++) {
        if (cols[k].backward || strcmp(cols[k].axes, "model") || strcmp(cols[k].cause, "shard_by_rules")) continue;
        *all_gather += !strcmp(cols[k].kind, "all_gather");
        *reduce_scatter += !strcmp(cols[k].kind, "reduce_scatter");
        *psum += !strcmp(cols[k].kind, "psum");
    }
}
/* The sequence-parallel program (data=2 x model=2) against the same mesh
   without it. Collectives in the layer scan's body are listed once. */
static void check_seq_parallel(gpt2_trainer *sp, int tp_gather, int tp_scatter, int tp_psum) {
    tj_residual res[64];
    int ag, rs, ps, k, nr = tj_prog_residuals(sp->step, res, 64), split = 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tjt_current = "seq-parallel";
    model_collectives(sp, &ag, &rs, &ps);
    /* tensor parallel alone: a psum after each row-parallel dot (attention's
       wo, the MLP's wproj); the logits stay split over the vocabulary (the
       loss is vocab-parallel), so no gather for the LM head */
    TJT_CHECK(tp_gather == 0 && tp_scatter == 0 && tp_psum == 2, "tensor parallel: %d all-gathers, %d reduce-scatters, %d psums over model, want 0, 0, 2",
              tp_gather, tp_scatter, tp_psum);
    /* sequence parallel: also a gather before attention, the MLP and the
       head (layer-norm outputs), and the two psums became reduce-scatters */
    TJT_CHECK(ag == 3 && rs == 2 && ps == 0, "sequence parallel: %d all-gathers, %d reduce-scatters, %d psums over model, want 3, 2, 0", ag, rs, ps);
    { /* the vocab-parallel loss: one all-gather over model of three floats per
         position and vocabulary block (tj_cross_entropy's statistics), forward */
        tj_collective cols[512];
        int n = tj_prog_collectives(sp->step, cols, 512), stats = 0, small = 1;
        for (k = 0; k < n && k < 512; k++)
            if (!cols[k].backward && !strcmp(cols[k].kind, "all_gather") && !strcmp(cols[k].axes, "model") && !strcmp(cols[k].cause, "cross_entropy")) {
                stats++;
                small &= cols[k].bytes <= (int64_t)sp->cfg.B * sp->cfg.T * 2 * 3 * 4;
            }
        TJT_CHECK(stats == 1 && small, "vocab-parallel loss: %d all-gathers of the statistics over model (want 1)%s", stats, small ? "" : ", larger than them");
    }
    /* along pos: the program text of the top level (the final layer norm's gather) */
    if (f) {
        tj_prog_print(sp->step, f);
        fclose(f);
    }
    TJT_CHECK(text && strstr(text, "all_gather   (") && strstr(text, "over model along pos"), "no all_gather over model along pos in the program text");
    free(text);
    /* the block outputs the backward pass keeps are split along pos */
    for (k = 0; k < nr && k < 64; k++) split |= !strcmp(res[k].name, "block_out") && res[k].decision == TJ_SAVE && strstr(res[k].shape, "pos=16@model");
    TJT_CHECK(split, "the saved block_out is not split along pos over model");
    tjt_current = "meshes";
}

/* ---- the library functions the model uses instead of improvising them:
   tj_sum_all, tj_index (element i of an axis, the axis dropped) and
   tj_v_axis_sharding (one axis's mesh axes, instead of parsing the printed
   spec) */
static char g_axsh[3][64];
static const char *g_axsh_ret[3];
static void lib_helpers_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    tj_v x = tj_with_sharding_constraint(tj_tree_v(in, "x"), "a:data b:model");
    (void)g; (void)u;
    tj_tree_set_v(out, "all", tj_sum_all(x));
    tj_tree_set_v(out, "row", tj_index(x, "a", 1));
    tj_tree_set_v(out, "col", tj_index(x, "b", 2));
    g_axsh_ret[0] = tj_v_axis_sharding(x, "a", g_axsh[0], sizeof g_axsh[0]);
    g_axsh_ret[1] = tj_v_axis_sharding(tj_sum(x, "b"), "a", g_axsh[1], sizeof g_axsh[1]);
    g_axsh_ret[2] = tj_v_axis_sharding(x, "nope", g_axsh[2], sizeof g_axsh[2]);
    tj_v_axis_sharding(x, "b", g_axsh[1] + 32, 32); /* "model" into the back half */
}
static void bad_index_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)g; (void)u;
    tj_tree_set_v(out, "y", tj_index(tj_tree_v(in, "x"), "b", 4));
}
static void test_lib_helpers(void) {
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    float x[8], all = 0, row[4], col[2];
    tj_prog *p;
    int i;
    tjt_current = "library helpers";
    for (i = 0; i < 8; i++) x[i] = (float)(i * i) - 3.5f; /* a=2 b=4, row-major */
    if (tj_set_devices(ctx, 4) || tj_set_mesh(ctx, "data=2 model=2")) { TJT_CHECK(0, "mesh: %s", tj_error(ctx)); return; }
    tj_tree_set_array(in, "x", tj_array_new(ctx, TJ_F32, "a=2 b=4", x));
    p = tj_jit(ctx, "lib_helpers", lib_helpers_fn, NULL, in, NULL);
    TJT_CHECK(p && !tj_run(p, in, out), "jit/run: %s", tj_error(ctx));
    if (p && tj_tree_size(out) == 3) {
        TJT_CHECK(tj_array_rank(tj_tree_array(out, "all")) == 0 && tj_array_rank(tj_tree_array(out, "row")) == 1 &&
                      tj_array_dim(tj_tree_array(out, "row"), "b") == 4 && tj_array_dim(tj_tree_array(out, "col"), "a") == 2,
                  "shapes: sum_all rank 0, index drops its axis");
        tj_array_read_all(tj_tree_array(out, "all"), TJ_F32, &all);
        tj_array_read_all(tj_tree_array(out, "row"), TJ_F32, row);
        tj_array_read_all(tj_tree_array(out, "col"), TJ_F32, col);
        TJT_CHECK(all == 140.0f - 28.0f, "tj_sum_all %g, want %g", all, 140.0 - 28.0);
        for (i = 0; i < 4; i++) TJT_CHECK(row[i] == x[4 + i], "tj_index(x, a, 1)[%d] = %g, want %g", i, row[i], x[4 + i]);
        for (i = 0; i < 2; i++) TJT_CHECK(col[i] == x[4 * i + 2], "tj_index(x, b, 2)[%d] = %g, want %g", i, col[i], x[4 * i + 2]);
    }
    TJT_CHECK(g_axsh_ret[0] && !strcmp(g_axsh[0], "data"), "axis a of x: '%s', want 'data'", g_axsh[0]);
    TJT_CHECK(!strcmp(g_axsh[1] + 32, "model"), "axis b of x: '%s', want 'model'", g_axsh[1] + 32);
    TJT_CHECK(g_axsh_ret[1] != NULL, "axis a of sum(x, b) exists");
    TJT_CHECK(g_axsh_ret[2] == NULL && g_axsh[2][0] == 0, "a missing axis: NULL and \"\"");
    tj_prog_free(p);
    tj_tree_clear(out);
    p = tj_jit(ctx, "bad_index", bad_index_fn, NULL, in, NULL);
    TJT_CHECK(p == NULL, "tj_index past the end compiled");
    TJT_ERROR_HAS(ctx, "index: 4 is not an element of axis 'b' (size 4)", "test_gpt2.c:");
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
}

/* ---- bf16 follows f32: the same init and batches, trained in f32 and with
   --bf16 (on the CPU's bf16 matmul path, vdpbf16ps where it exists, and
   forced to the widened f32 path), give losses within bf16 tolerance of
   each other at every step. The model is wide enough (C=64, M=256, 128
   tokens) that its dots take the packed kernels, not the small-product
   loop; the learning rate (peak 3e-3) keeps the curve smooth, so rounding
   is not amplified by a spike. Measured here: f32 vs bf16 at most 0.0033
   over 10 steps (loss 5.49 falling to 3.79), the two bf16 paths at most
   0.001 apart; the bound 0.02 is 0.5% of the loss, about one bf16 ulp. */
static float bf16_curve(const int32_t *data, size_t n, int bf16, int force_f32, float *loss, int steps) {
    gpt2_config c;
    gpt2_trainer tr;
    int32_t x[TB * TT], y[TB * TT];
    int s;
    tiny_config(&c);
    c.C = 64; c.M = 256; c.H = 2;
    c.bf16 = bf16;
    tjt_bgemm_force_f32(force_f32);
    if (gpt2_trainer_init(&tr, &c, 1, NULL, 2)) { tjt_bgemm_force_f32(0); return -1; }
    for (s = 0; s < steps; s++) {
        get_batch(data, n, TB, TT, 11, 1, (uint64_t)s, x, y);
        loss[s] = gpt2_train_step(&tr, x, y, lr_at(s, steps, 2, 3e-3, 0.1));
    }
    gpt2_trainer_free(&tr);
    tjt_bgemm_force_f32(0);
    return 0;
}
static void test_bf16_curve(const int32_t *data, size_t n) {
    enum { STEPS = 10 };
    float lf[STEPS], lb[STEPS], lw[STEPS];
    double d_native = 0, d_widened = 0, d_paths = 0;
    int s;
    tjt_current = "bf16 loss curve";
    if (bf16_curve(data, n, 0, 0, lf, STEPS) || bf16_curve(data, n, 1, 0, lb, STEPS) || bf16_curve(data, n, 1, 1, lw, STEPS)) {
        TJT_CHECK(0, "bf16 curve: trainer init failed");
        return;
    }
    for (s = 0; s < STEPS; s++) {
        d_native = fmax(d_native, fabs((double)lb[s] - lf[s]));
        d_widened = fmax(d_widened, fabs((double)lw[s] - lf[s]));
        d_paths = fmax(d_paths, fabs((double)lb[s] - lw[s]));
        if (getenv("TJ_TEST_VERBOSE")) printf("step %d: f32 %.5f bf16 %.5f bf16 widened %.5f\n", s, lf[s], lb[s], lw[s]);
    }
    TJT_CHECK(d_native <= 0.02, "bf16 (%s) loss differs from f32 by up to %.4f over %d steps", tjt_bgemm_path(), d_native, STEPS);
    TJT_CHECK(d_widened <= 0.02, "bf16 (widened f32 path) loss differs from f32 by up to %.4f", d_widened);
    TJT_CHECK(d_paths <= 0.02, "the two bf16 matmul paths' losses differ by up to %.4f", d_paths);
    TJT_CHECK(lf[STEPS - 1] < lf[0] - 1.0 && lb[STEPS - 1] < lb[0] - 1.0, "losses fall: f32 %.3f -> %.3f, bf16 %.3f -> %.3f",
              lf[0], lf[STEPS - 1], lb[0], lb[STEPS - 1]);
}

/* ---- dropout (--dropout): GPT-2's embd_pdrop and resid_pdrop (and
   attn_pdrop with attn_composed), each mask tj_dropout_fold with the seed's
   key folded with ((step * K + micro) * L + layer) * 4 + site */

/* `steps` training steps of a fresh trainer (batches from gpt2_next_batch,
   seed 5, at learning rate lr; `same`: the first batch every step), losses
   into loss[]; 0 on success */
static int drop_run(const gpt2_config *c, int ndev, const char *mesh, const int32_t *data, size_t n, int steps, double lr, int same, float *loss) {
    gpt2_trainer tr;
    size_t kbt = (size_t)c->accum * (size_t)c->B * (size_t)c->T;
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * kbt), *y = (int32_t *)malloc(sizeof(int32_t) * kbt);
    int s, rc = 0;
    if (gpt2_trainer_init(&tr, c, ndev, mesh, 1)) rc = 1;
    for (s = 0; !rc && s < steps; s++) {
        if (!same || s == 0) gpt2_next_batch(&tr, data, n, 5, x, y);
        loss[s] = gpt2_train_step(&tr, x, y, lr);
        if (loss[s] != loss[s]) rc = 1;
    }
    gpt2_trainer_free(&tr); /* (also a half-made one) */
    free(x);
    free(y);
    return rc;
}
/* the largest relative difference of two loss curves */
static double curve_rel(const float *a, const float *b, int steps) {
    double m = 0;
    int s;
    for (s = 0; s < steps; s++) m = fmax(m, fabs((double)a[s] - b[s]) / fabs((double)b[s]));
    return m;
}
static int prog_has(tj_prog *p, const char *what) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int has = 0;
    if (f) {
        tj_prog_print(p, f);
        fclose(f);
        has = text && strstr(text, what) != NULL;
    }
    free(text);
    return has;
}
static void test_dropout(const int32_t *data, size_t n) {
    enum { S = 4 };
    gpt2_config c0, c1;
    float l0[S], l1[S], lr0[S], lr1[S], lx[S];
    int s, r;
    tjt_current = "dropout";
    tiny_config(&c0);
    c1 = c0;
    c1.dropout = 0.1;
    { /* rate 0: no step input, no random numbers in the step; with a rate: both */
        gpt2_trainer a, b;
        if (!gpt2_trainer_init(&a, &c0, 1, NULL, 1)) {
            TJT_CHECK(tj_tree_find(a.state, "step") < 0 && !prog_has(a.step, "uniform"), "--dropout 0: the step has a step input or draws random numbers");
            if (!gpt2_trainer_init(&b, &c1, 1, NULL, 1)) {
                TJT_CHECK(tj_tree_find(b.state, "step") >= 0 && prog_has(b.step, "uniform"), "--dropout 0.1: the step has no step input or draws no random numbers");
                TJT_CHECK(!prog_has(b.eval, "uniform"), "--dropout 0.1: evaluation draws random numbers");
                gpt2_trainer_free(&b);
            } else TJT_CHECK(0, "init with dropout");
            gpt2_trainer_free(&a);
        } else TJT_CHECK(0, "init without dropout");
    }
    /* the masks act: the training loss with dropout is not the loss without */
    if (drop_run(&c0, 1, NULL, data, n, S, 3e-3, 0, l0) || drop_run(&c1, 1, NULL, data, n, S, 3e-3, 0, l1)) { TJT_CHECK(0, "dropout: runs failed"); return; }
    for (s = 0; s < S; s += S - 1) /* (at the init the loss is about ln 256 either way: 7e-4 apart) */
        TJT_CHECK(fabs(l0[s] - l1[s]) > 1e-4, "step %d: loss %.7f with dropout 0.1, %.7f without: the masks do not act", s, l1[s], l0[s]);
    if (getenv("TJ_TEST_VERBOSE")) printf("dropout: losses without %.5f .. %.5f, with 0.1 %.5f .. %.5f\n", l0[0], l0[S - 1], l1[0], l1[S - 1]);
    /* a fresh mask every step: the same batch at lr 0 (params unchanged) gives
       the same loss every step without dropout, a new one with it */
    if (drop_run(&c0, 1, NULL, data, n, S, 0.0, 1, lr0) || drop_run(&c1, 1, NULL, data, n, S, 0.0, 1, lr1)) { TJT_CHECK(0, "dropout: lr 0 runs failed"); return; }
    for (s = 1; s < S; s++) {
        TJT_CHECK(lr0[s] == lr0[0], "no dropout, the same batch and params: step %d loss %.9g, step 0 %.9g", s, lr0[s], lr0[0]);
        TJT_CHECK(lr1[s] != lr1[s - 1], "dropout 0.1, the same batch and params: step %d drew the mask of step %d (loss %.9g both)", s, s - 1, lr1[s]);
    }
    TJT_CHECK(l1[0] == lr1[0], "dropout: step 0 loss %.9g, and %.9g in another run (the masks are not deterministic)", lr1[0], l1[0]);
    if (getenv("TJ_TEST_VERBOSE"))
        printf("dropout: losses at lr 0 on one batch: without %.5f %.5f %.5f %.5f, with 0.1 %.5f %.5f %.5f %.5f\n", lr0[0], lr0[1], lr0[2], lr0[3], lr1[0], lr1[1],
               lr1[2], lr1[3]);
    /* every remat policy draws the same masks in its recompute */
    for (r = 0; r < NREMAT; r++) {
        gpt2_config cr = c1;
        if (r == REMAT_AUTO) continue;
        cr.remat = r;
        if (drop_run(&cr, 1, NULL, data, n, S, 3e-3, 0, lx)) { TJT_CHECK(0, "dropout, remat %s: run failed", remat_names[r]); continue; }
        TJT_CHECK(curve_rel(lx, l1, S) <= 1e-5, "dropout, remat %s: losses differ from remat block_out's by %.3g (rel)", remat_names[r], curve_rel(lx, l1, S));
        if (getenv("TJ_TEST_VERBOSE")) printf("dropout, remat %s: losses within %.3g (rel) of block_out's\n", remat_names[r], curve_rel(lx, l1, S));
    }
    { /* meshes: the same masks, each device drawing its slice */
        struct { int ndev; const char *mesh; int seq_parallel, remat; } ms[] = {
            {8, "data=4 model=2", 0, REMAT_BLOCK_OUT},
            {4, "data=2 model=2", 1, REMAT_NOTHING},
            {2, "data=2", 0, REMAT_OFFLOAD},
        };
        int m;
        for (m = 0; m < 3; m++) {
            gpt2_config cm = c1;
            cm.seq_parallel = ms[m].seq_parallel;
            cm.remat = ms[m].remat;
            if (drop_run(&cm, ms[m].ndev, ms[m].mesh, data, n, S, 3e-3, 0, lx)) { TJT_CHECK(0, "dropout on %s: run failed", ms[m].mesh); continue; }
            TJT_CHECK(curve_rel(lx, l1, S) <= 1e-5, "dropout on %s%s, remat %s: losses differ from one device's by %.3g (rel)", ms[m].mesh,
                      ms[m].seq_parallel ? " (sequence parallel)" : "", remat_names[ms[m].remat], curve_rel(lx, l1, S));
            if (getenv("TJ_TEST_VERBOSE")) printf("dropout on %s: losses within %.3g (rel) of one device's\n", ms[m].mesh, curve_rel(lx, l1, S));
        }
    }
    { /* accumulation: micro-batch j of step s draws the masks of step s * K + j
         without it, so K = 2 on the same batch twice, at lr 0, is the mean of
         the K = 1 losses of steps 2s and 2s + 1 on it; scanned, unrolled, and
         scanned with the layer scan nested under remat nothing, on a mesh */
        struct { int unroll, remat, ndev; const char *mesh; const char *name; } vs[] = {
            {0, REMAT_BLOCK_OUT, 1, NULL, "scan"},
            {1, REMAT_BLOCK_OUT, 1, NULL, "unrolled"},
            {0, REMAT_NOTHING, 4, "data=2 model=2", "scan, remat nothing, data=2 x model=2"},
        };
        gpt2_config ck = c1;
        gpt2_trainer tr;
        int v;
        int32_t x[2 * TB * TT], y[2 * TB * TT];
        ck.accum = 2;
        for (v = 0; v < 3; v++) {
            ck.accum_unroll = vs[v].unroll;
            ck.remat = vs[v].remat;
            if (gpt2_trainer_init(&tr, &ck, vs[v].ndev, vs[v].mesh, 1)) { TJT_CHECK(0, "dropout, accum 2 %s: init", vs[v].name); continue; }
            get_batch(data, n, TB, TT, 5, 1, 0, x, y); /* the batch of lr1's runs, twice */
            memcpy(x + TB * TT, x, sizeof(int32_t) * TB * TT);
            memcpy(y + TB * TT, y, sizeof(int32_t) * TB * TT);
            for (s = 0; s < 2; s++) {
                float l = gpt2_train_step(&tr, x, y, 0.0), want = (float)(0.5 * ((double)lr1[2 * s] + lr1[2 * s + 1]));
                /* 1e-6: the mean of two different masks' losses is 6e-6 from one mask's here */
                TJT_CHECK(fabs(l - want) <= 1e-6 * want, "dropout, accum 2 %s: step %d loss %.7f, the mean of steps %d and %d without accumulation %.7f", vs[v].name,
                          s, l, 2 * s, 2 * s + 1, want);
                if (getenv("TJ_TEST_VERBOSE")) printf("dropout, accum 2 %s: step %d loss %.7f, want %.7f\n", vs[v].name, s, l, want);
            }
            gpt2_trainer_free(&tr);
        }
    }
    { /* attn_pdrop with attn_composed: the probabilities are dropped too,
         and the recompute draws the same masks */
        gpt2_config cc = c1;
        float lc[S];
        cc.attn_composed = 1;
        if (!drop_run(&cc, 1, NULL, data, n, S, 3e-3, 0, lc)) {
            TJT_CHECK(fabs(lc[0] - l1[0]) > 1e-4, "dropout with composed attention: step 0 loss %.7f, fused %.7f: the probabilities are not dropped", lc[0], l1[0]);
            cc.remat = REMAT_EVERYTHING;
            if (!drop_run(&cc, 1, NULL, data, n, S, 3e-3, 0, lx))
                TJT_CHECK(curve_rel(lx, lc, S) <= 1e-5, "dropout with composed attention: remat everything vs block_out differ by %.3g", curve_rel(lx, lc, S));
            else TJT_CHECK(0, "composed attention, remat everything: run failed");
        } else TJT_CHECK(0, "composed attention with dropout: run failed");
    }
    { /* bf16: the f32 masks (tj_dropout draws f32 uniforms for bf16), losses
         within bf16 rounding of f32's */
        gpt2_config cb = c1;
        cb.bf16 = 1;
        if (!drop_run(&cb, 1, NULL, data, n, S, 3e-3, 0, lx)) {
            double d = 0;
            for (s = 0; s < S; s++) d = fmax(d, fabs((double)lx[s] - l1[s]));
            TJT_CHECK(d <= 0.02, "dropout in bf16: losses differ from f32's by up to %.4f", d);
            if (getenv("TJ_TEST_VERBOSE")) printf("dropout in bf16: losses within %.4f of f32's\n", d);
        } else TJT_CHECK(0, "dropout in bf16: run failed");
    }
    { /* resume: 6 steps straight, or 3, save, resume in a new trainer, 3: the
         same losses bit for bit (the masks follow the step number); and the
         evaluation of the same params does not depend on --dropout */
        gpt2_trainer a, b;
        char pbuf[600];
        const char *path = tpath(pbuf, sizeof pbuf, "dropout.safetensors");
        float la[6];
        int32_t x[TB * TT], y[TB * TT];
        if (gpt2_trainer_init(&a, &c1, 1, NULL, 1)) { TJT_CHECK(0, "dropout resume: init"); return; }
        for (s = 0; s < 6; s++) {
            gpt2_next_batch(&a, data, n, 5, x, y);
            la[s] = gpt2_train_step(&a, x, y, 3e-3);
            if (s == 2) TJT_CHECK(gpt2_save(&a, path) == 0, "dropout: save: %s", tj_error(a.ctx));
        }
        if (!gpt2_trainer_init(&b, &c1, 4, "data=2 model=2", 1)) {
            TJT_CHECK(gpt2_resume(&b, path) == 0 && b.step_no == 3, "dropout: resume: %s", tj_error(b.ctx));
            for (s = 3; s < 6; s++) {
                float l;
                gpt2_next_batch(&b, data, n, 5, x, y);
                l = gpt2_train_step(&b, x, y, 3e-3);
                TJT_CHECK(fabs(l - la[s]) <= 1e-5 * la[s], "dropout: resumed on data=2 x model=2, step %d loss %.9g, uninterrupted %.9g", s, l, la[s]);
            }
            gpt2_trainer_free(&b);
        } else TJT_CHECK(0, "dropout: init on a mesh for the resume");
        if (!gpt2_trainer_init(&b, &c1, 1, NULL, 1)) {
            TJT_CHECK(gpt2_resume(&b, path) == 0 && b.step_no == 3, "dropout: resume: %s", tj_error(b.ctx));
            for (s = 3; s < 6; s++) {
                float l;
                gpt2_next_batch(&b, data, n, 5, x, y);
                l = gpt2_train_step(&b, x, y, 3e-3);
                TJT_CHECK(l == la[s], "dropout: resumed step %d loss %.9g, uninterrupted %.9g (want the same bits)", s, l, la[s]);
            }
            gpt2_trainer_free(&b);
        } else TJT_CHECK(0, "dropout: init for the resume");
        if (!gpt2_trainer_init(&b, &c0, 1, NULL, 1)) { /* the same params without dropout */
            TJT_CHECK(gpt2_resume(&b, path) == 0, "resume without dropout: %s", tj_error(b.ctx));
            if (gpt2_resume(&a, path) == 0) {
                for (s = 0; s < 2; s++) {
                    float ea, eb;
                    get_batch(data, n, TB, TT, 5, 2, (uint64_t)s, x, y);
                    ea = gpt2_eval_loss(&a, x, y);
                    eb = gpt2_eval_loss(&b, x, y);
                    TJT_CHECK(ea == eb && ea == ea, "eval loss of the same params: %.9g with --dropout 0.1, %.9g without", ea, eb);
                }
            } else TJT_CHECK(0, "dropout: resume into the first trainer: %s", tj_error(a.ctx));
            gpt2_trainer_free(&b);
        } else TJT_CHECK(0, "init without dropout for the evaluation");
        gpt2_trainer_free(&a);
        remove(path);
    }
}

int main(void) {
    gpt2_config c;
    gpt2_trainer tr;
    size_t n;
    int32_t *data = corpus(&n), x[TB * TT], y[TB * TT];
    int s, m;

    tiny_config(&c);
    if (make_tdir()) {
        printf("FAIL: cannot create a temporary directory %s: %s\n0 passed, 1 failed\n", tdir, strerror(errno));
        return 1;
    }

    tjt_current = "learns";
    if (!gpt2_trainer_init(&tr, &c, 1, NULL, 2)) {
        float first = 0, last = 0, l;
        int steps = 50;
        for (s = 0; s < steps; s++) {
            get_batch(data, n, TB, TT, 7, 1, (uint64_t)s, x, y);
            l = gpt2_train_step(&tr, x, y, lr_at(s, steps, 5, 1e-2, 0.1));
            if (s < 3) first += l / 3;
            if (s >= steps - 3) last += l / 3;
        }
        TJT_CHECK(first > 5.0 && first < 6.0, "initial loss %.4f, want about ln 256 = 5.55", first);
        TJT_CHECK(last < first - 2.0, "loss did not decrease over 50 steps: %.4f -> %.4f", first, last);
        get_batch(data, n, TB, TT, 7, 2, 0, x, y);
        l = gpt2_eval_loss(&tr, x, y);
        TJT_CHECK(l == l && l < first - 2.0, "eval loss %.4f after training (first train loss %.4f)", l, first);
        {
            float row[256];
            int32_t w[4] = {'t', 'h', 'e', ' '};
            TJT_CHECK(gpt2_next_logits(&tr, w, 4, row) == 0, "sampling program: %s", tj_error(tr.ctx));
        }
        gpt2_trainer_free(&tr);
    } else TJT_CHECK(0, "init on one device failed");

    test_lib_helpers();
    test_bf16_curve(data, n);

    tjt_current = "gradients";
    /* autodiff through scan, attention, layer norm, tied head vs finite differences, in f64
       (not bqkv: the key bias has an exactly-zero gradient, softmax is shift-invariant,
       and the helper's relative error of 2e-10 FD noise against 0 is 2e-4) */
    {
        gpt2_config g = c;
        tj_ctx *ctx = tj_ctx_new();
        tj_tree *in = tj_tree_new(ctx);
        char shape[256], name[128];
        int32_t tok[2 * 4], tgt[2 * 4];
        int i;
        g.L = 2; g.C = 8; g.H = 2; g.M = 16; g.V = g.V_real = 16; g.T = g.block = 4; g.B = 2;
        g.param_rules = g.compute_rules = NULL;
        g.remat = REMAT_NOTHING; /* the backward pass recomputes each block */
        for (i = 0; i < NPARAMS; i++) {
            param_shape(&g, i, shape, sizeof shape);
            snprintf(name, sizeof name, "params.%s", gpt2_params[i].name);
            tj_tree_set_array(in, name, gpt2_params[i].init == INIT_LN || gpt2_params[i].init == INIT_ONES ? tjt_rand(ctx, TJ_F64, shape, 100 + i, 0.5, 1.5)
                                                                                                           : tjt_rand(ctx, TJ_F64, shape, 100 + i, -0.5, 0.5));
        }
        for (i = 0; i < 8; i++) { tok[i] = (i * 5 + 1) % 16; tgt[i] = (i * 3 + 2) % 16; }
        tj_tree_set_array(in, "tokens", tj_array_new(ctx, TJ_I32, "batch=2 pos=4", tok));
        tj_tree_set_array(in, "targets", tj_array_new(ctx, TJ_I32, "batch=2 pos=4", tgt));
        tjt_gradcheck(__FILE__, __LINE__, ctx, "gpt2 loss", gpt2_eval_fn, &g, in, "params.h.ln params.h.wqkv params.h.wo params.h.wfc params.h.wproj params.wte params.wpe params.lnf_g", 1e-5);
        tj_tree_free(in);
        tj_ctx_free(ctx);
    }

    tjt_current = "fused attention";
    { /* tj_attention against dot + causal_mask + softmax: 3 steps, the same losses and params */
        static const int remats[3] = {REMAT_BLOCK_OUT, REMAT_NOTHING, REMAT_OFFLOAD};
        int r, st;
        for (r = 0; r < 3; r++) {
            gpt2_config f = c, cc;
            gpt2_trainer tf, tc;
            int32_t xb[TB * TT], yb[TB * TT];
            f.remat = remats[r];
            cc = f;
            cc.attn_composed = 1;
            if (gpt2_trainer_init(&tf, &f, r == 2 ? 2 : 1, r == 2 ? "data=2" : NULL, 1)) { TJT_CHECK(0, "fused attention: init"); continue; }
            if (gpt2_trainer_init(&tc, &cc, r == 2 ? 2 : 1, r == 2 ? "data=2" : NULL, 1)) {
                TJT_CHECK(0, "composed attention: init");
                gpt2_trainer_free(&tf);
                continue;
            }
            for (st = 0; st < 3; st++) {
                float lf, lc;
                gpt2_next_batch(&tf, data, n, 5, xb, yb);
                lf = gpt2_train_step(&tf, xb, yb, 3e-3);
                gpt2_next_batch(&tc, data, n, 5, xb, yb);
                lc = gpt2_train_step(&tc, xb, yb, 3e-3);
                TJT_CHECK(fabs(lf - lc) <= 1e-5 * fabs(lc), "remat %s step %d: loss %.9g with tj_attention, %.9g composed", remat_names[remats[r]], st, lf, lc);
            }
            check_leaves(&tf, &tc, "params.", 1e-4, remat_names[remats[r]]);
            { /* the policy decides for attention's outputs as for any value: block_out and nothing recompute them */
                static tj_residual rows[512];
                int nr = tj_prog_residuals(tf.step, rows, 512), i, saved = 0, seen = 0;
                for (i = 0; i < nr && i < 512; i++)
                    if (!strcmp(rows[i].op, "out") && strstr(rows[i].shape, "head_dim")) seen++, saved += rows[i].decision != TJ_RECOMPUTE;
                TJT_CHECK(seen > 0 && (r == 2 || saved == 0), "remat %s: %d of attention's %d outputs saved or offloaded, want all recomputed",
                          remat_names[remats[r]], saved, seen);
            }
            gpt2_trainer_free(&tf);
            gpt2_trainer_free(&tc);
        }
    }

    tjt_current = "meshes";
    {
        struct { int ndev; const char *mesh, *prules, *crules; int seq_parallel; const char *name; } ms[] = {
            {1, NULL, NULL, NULL, 0, "one device"},
            {2, "data=2", "embed:data", "batch:data", 0, "data=2"},
            {4, "data=2 model=2", NULL, NULL, 0, "data=2 x model=2"},
            {8, "data=8", "embed:data vocab:data mlp:data", "batch:data", 0, "data=8 FSDP"},
            {4, "data=2 model=2", NULL, NULL, 1, "data=2 x model=2, sequence parallel"},
        };
        float ref[5] = {0, 0, 0, 0, 0};
        float *ref_wte = NULL, *ref_wqkv = NULL;
        int64_t nw = 0, nq = 0;
        int tp_gather = 0, tp_scatter = 0, tp_psum = 0;
        for (m = 0; m < (int)(sizeof ms / sizeof ms[0]); m++) {
            gpt2_config cm = c;
            if (ms[m].prules) cm.param_rules = ms[m].prules;
            if (ms[m].crules) cm.compute_rules = ms[m].crules;
            cm.seq_parallel = ms[m].seq_parallel;
            if (gpt2_trainer_init(&tr, &cm, ms[m].ndev, ms[m].mesh, 1)) {
                TJT_CHECK(0, "%s: init failed", ms[m].name);
                continue;
            }
            { /* the same initial parameters whatever the mesh */
                int64_t k1, k2;
                float *w = read_leaf(&tr, "params.wte", &k1), *q = read_leaf(&tr, "params.h.wqkv", &k2);
                if (m == 0) { ref_wte = w; ref_wqkv = q; nw = k1; nq = k2; }
                else {
                    TJT_CHECK(w && q && k1 == nw && k2 == nq && !memcmp(w, ref_wte, sizeof(float) * (size_t)nw) && !memcmp(q, ref_wqkv, sizeof(float) * (size_t)nq),
                              "%s: initial parameters differ from one device's", ms[m].name);
                    free(w);
                    free(q);
                }
            }
            for (s = 0; s < 5; s++) {
                float l;
                get_batch(data, n, TB, TT, 11, 1, (uint64_t)s, x, y);
                l = gpt2_train_step(&tr, x, y, 3e-3);
                if (m == 0) ref[s] = l;
                else TJT_CHECK(fabs(l - ref[s]) <= 1e-5 * fabs(ref[s]), "%s: step %d loss %.9g vs one device %.9g (rel %.2g)", ms[m].name, s, l, ref[s],
                               fabs(l - ref[s]) / fabs(ref[s]));
            }
            if (m > 0) { /* sharded init: each device generates only its slice */
                tj_collective cols[4];
                TJT_CHECK(tj_prog_collectives(tr.init, cols, 4) == 0, "%s: the init program has %d collectives (a full tensor made and sliced?)", ms[m].name,
                          tj_prog_collectives(tr.init, cols, 4));
            }
            if (m == 3) { /* FSDP: every parameter leaf is split over the 8 devices */
                char b[128];
                tj_array_sharding(tj_tree_array(tr.state, "params.wte"), b, sizeof b);
                TJT_CHECK(strstr(b, "data") != NULL, "FSDP: wte is %s, want it sharded on data", b);
            }
            if (m == 2) model_collectives(&tr, &tp_gather, &tp_scatter, &tp_psum);
            if (ms[m].seq_parallel) check_seq_parallel(&tr, tp_gather, tp_scatter, tp_psum);
            gpt2_trainer_free(&tr);
        }
        free(ref_wte);
        free(ref_wqkv);
    }

    tjt_current = "checkpoint";
    {
        gpt2_trainer a, b;
        float la[4], lb = NAN;
        char pbuf[600];
        const char *path = tpath(pbuf, sizeof pbuf, "test_gpt2_ckpt.safetensors");
        int ok = !gpt2_trainer_init(&a, &c, 1, NULL, 2);
        for (s = 0; ok && s < 4; s++) {
            get_batch(data, n, TB, TT, 3, 1, (uint64_t)s, x, y);
            la[s] = gpt2_train_step(&a, x, y, 3e-3);
            if (s == 2) {
                if (gpt2_save(&a, path)) {
                    if (tj_status_of(a.ctx) == TJ_ERR_UNSUPPORTED) { printf("checkpoints not available in this build\n"); ok = 0; }
                    else TJT_CHECK(0, "save: %s", tj_error(a.ctx));
                    tj_clear_error(a.ctx);
                }
            }
        }
        if (ok) {
            TJT_CHECK(!gpt2_trainer_init(&b, &c, 1, NULL, 2), "second trainer");
            TJT_CHECK(gpt2_resume(&b, path) == 0, "resume: %s", tj_error(b.ctx));
            TJT_CHECK(b.step_no == 3, "resumed at step %lld, want 3", (long long)b.step_no);
            get_batch(data, n, TB, TT, 3, 1, 3, x, y);
            lb = gpt2_train_step(&b, x, y, 3e-3);
            TJT_CHECK(lb == la[3], "resumed step 3 loss %.9g vs uninterrupted %.9g", lb, la[3]);
            gpt2_trainer_free(&b);
            remove(path);
        }
        gpt2_trainer_free(&a);
    }
    test_accum(data, n);
    test_hf();
    test_hf_config();
    test_hf_export(data, n);
    test_resume_sharded(data, n);
    test_padded_vocab(data, n);
    test_dropout(data, n);
    free(data);
    remove_tree(tdir);
    return tjt_finish();
}
