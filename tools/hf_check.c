/* hf_check.c - the C side of tools/compare_hf.py (tinyjax vs transformers,
 * tokenizers, tiktoken and Python's regex). Not part of the test suite.
 *
 *   hf_check pretok RECORDS            piece lengths (bytes) of each record, one line each
 *   hf_check encode TOKENIZER RECORDS ALLOW
 *                                      ids of each record; TOKENIZER is a tokenizer.json,
 *                                      or VOCAB.json,MERGES.txt; ALLOW 0/1 (special tokens)
 *   hf_check model DIR IDS OUT         --init-from DIR; IDS: text file, tokens on line 1,
 *                                      targets on line 2; OUT: float32 logits (T x vocab)
 *                                      then the evaluation loss (one float32)
 *   hf_check export DIR_IN DIR_OUT     --init-from DIR_IN, then --export-hf DIR_OUT
 *   hf_check greedy DIR IDS N          --init-from DIR; IDS: text file, the prompt's tokens on
 *                                      line 1; prints N tokens of greedy decoding (the demo's
 *                                      sampling at temperature 0, a window of T = prompt + N
 *                                      positions) and the top two logits of each step
 *   hf_check train DIR BATCHES DIR_OUT MESH [K [REMAT [DTYPE]]]
 *                                      --init-from DIR, then the training steps of BATCHES
 *                                      (a text file: "steps B T" on line 1, then per step a
 *                                      line of B*T tokens, one of B*T targets and one with
 *                                      the learning rate), AdamW and clipping as gpt2_train's
 *                                      defaults; prints "step I loss L gnorm G" per step and
 *                                      writes the trained model as --export-hf DIR_OUT. MESH:
 *                                      "" one device, or a mesh ("data=2 model=2") with
 *                                      gpt2_train's default sharding rules; K micro-batches
 *                                      of B/K sequences each (--accum K), REMAT as --remat,
 *                                      DTYPE f32 or bf16 (--bf16)
 *
 * RECORDS: a binary file of (uint32 little-endian length, bytes) records.
 */
#define GPT2_NO_MAIN
#include "../demos/gpt2_train.c"

static char **read_records(const char *path, size_t **lens, size_t *n) {
    char *buf, err[512], **out = NULL;
    size_t len, p = 0, cap = 0;
    *n = 0;
    if (tj_read_file(path, &buf, &len, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
    *lens = NULL;
    while (p + 4 <= len) {
        size_t l = (size_t)gio__le((const unsigned char *)buf + p, 4);
        if (p + 4 + l > len) { fprintf(stderr, "%s: truncated record\n", path); exit(1); }
        if (*n == cap) {
            cap = cap ? 2 * cap : 1024;
            out = (char **)realloc(out, sizeof *out * cap);
            *lens = (size_t *)realloc(*lens, sizeof **lens * cap);
        }
        out[*n] = buf + p + 4;
        (*lens)[*n] = l;
        (*n)++;
        p += 4 + l;
    }
    return out;
}

/* --init-from dir for batches of B sequences of T tokens, on one device
   (mesh NULL or "") or on the devices of a mesh with gpt2_train's rules */
static int load_model_on(gpt2_trainer *tr, const char *dir, int B, int T, const char *mesh, int K, int remat, int bf16) {
    gpt2_hf hf;
    gpt2_config c;
    char err[1024];
    int devices = mesh && *mesh ? mesh_size(mesh) : 1;
    gpt2_default_config(&c);
    c.B = B;
    c.T = T;
    c.accum = K;
    c.remat = remat;
    c.bf16 = bf16;
    c.param_rules = c.compute_rules = NULL;
    if (devices > 1) {
        c.param_rules = GPT2_PARAM_RULES;
        c.compute_rules = GPT2_COMPUTE_RULES;
    }
    if (gpt2_hf_open(&hf, dir, err, sizeof err) || gpt2_hf_config(&hf, &c, 0, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    if (c.T != T) { fprintf(stderr, "%d tokens do not fit the model's %d positions\n", T, c.block); return 1; }
    if (gpt2_trainer_init(tr, &c, devices, devices > 1 ? mesh : NULL, 0) || gpt2_hf_load(tr, &hf, err, sizeof err)) {
        fprintf(stderr, "load: %s\n", err);
        return 1;
    }
    gpt2_hf_close(&hf);
    return 0;
}
static int load_model(gpt2_trainer *tr, const char *dir, int T) { return load_model_on(tr, dir, 1, T, NULL, 1, REMAT_BLOCK_OUT, 0); }

/* hf_check train: the steps of a batch file, each printed, then the export */
static int train(const char *dir, const char *batches, const char *out, const char *mesh, int K, const char *remat, const char *dtype) {
    FILE *f = fopen(batches, "r");
    int steps, B, T, s, i, bad = 0;
    int32_t *x, *y;
    char err[1024];
    gpt2_trainer tr;
    int r = -1;
    for (i = 0; i < NREMAT; i++)
        if (!strcmp(remat, remat_names[i])) r = i;
    if (r < 0 || K < 1 || (strcmp(dtype, "f32") && strcmp(dtype, "bf16"))) {
        fprintf(stderr, "train: K %d, remat \"%s\", dtype \"%s\": want K >= 1, a --remat policy and f32 or bf16\n", K, remat, dtype);
        return 1;
    }
    if (!f) { perror(batches); return 1; }
    if (fscanf(f, "%d %d %d", &steps, &B, &T) != 3 || steps < 1 || B < 1 || T < 1 || B * T > (1 << 20) || B % K) {
        fprintf(stderr, "%s: want \"steps B T\" on line 1, B a multiple of K = %d\n", batches, K);
        fclose(f);
        return 1;
    }
    x = (int32_t *)malloc(sizeof *x * (size_t)B * (size_t)T);
    y = (int32_t *)malloc(sizeof *y * (size_t)B * (size_t)T);
    if (!x || !y || load_model_on(&tr, dir, B / K, T, mesh, K, r, !strcmp(dtype, "bf16"))) { fclose(f); return 1; }
    for (s = 0; s < steps && !bad; s++) {
        double lr;
        float loss;
        for (i = 0; i < B * T && !bad; i++) bad = fscanf(f, "%d", &x[i]) != 1;
        for (i = 0; i < B * T && !bad; i++) bad = fscanf(f, "%d", &y[i]) != 1;
        if (bad || fscanf(f, "%lf", &lr) != 1) { fprintf(stderr, "%s: step %d is not B*T tokens, B*T targets and a learning rate\n", batches, s); bad = 1; break; }
        loss = gpt2_train_step(&tr, x, y, lr);
        if (loss != loss) { fprintf(stderr, "step %d: %s\n", s, tj_error(tr.ctx)); bad = 1; break; }
        printf("step %d loss %.9g gnorm %.9g\n", s, loss, tr.last_gnorm);
    }
    fclose(f);
    if (!bad && gpt2_export_hf(&tr, out, -1, err, sizeof err)) { fprintf(stderr, "%s\n", err); bad = 1; }
    gpt2_trainer_free(&tr);
    free(x);
    free(y);
    return bad;
}

int main(int argc, char **argv) {
    size_t n, *lens, i;
    char err[1024];
    if (argc == 3 && !strcmp(argv[1], "pretok")) {
        char **r = read_records(argv[2], &lens, &n);
        for (i = 0; i < n; i++) {
            size_t pos = 0;
            while (pos < lens[i]) {
                size_t l = gio_gpt2_pretok_next(r[i], lens[i], pos);
                printf(pos ? " %zu" : "%zu", l);
                pos += l;
            }
            printf("\n");
        }
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "encode")) {
        gio_tokenizer t;
        char **r = read_records(argv[3], &lens, &n), *comma = strchr(argv[2], ',');
        int st;
        if (comma) {
            *comma = 0;
            st = gio_tok_load_gpt2(&t, argv[2], comma + 1, err, sizeof err);
        } else st = gio_tok_load_hf(&t, argv[2], err, sizeof err);
        if (st) { fprintf(stderr, "%s\n", err); return 1; }
        for (i = 0; i < n; i++) {
            int32_t *ids;
            size_t m, k;
            if (gio_tok_encode_special(&t, r[i], lens[i], atoi(argv[4]), &ids, &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
            for (k = 0; k < m; k++) printf(k ? " %d" : "%d", ids[k]);
            printf("\n");
            free(ids);
        }
        gio_tok_free(&t);
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "model")) {
        FILE *f = fopen(argv[3], "r");
        int32_t tok[4096], tgt[4096];
        int T = 0, U = 0, c;
        gpt2_trainer tr;
        float *logits, loss;
        long v;
        if (!f) { perror(argv[3]); return 1; }
        while (T < 4096 && fscanf(f, "%ld", &v) == 1) {
            tok[T++] = (int32_t)v;
            while ((c = fgetc(f)) == ' ') {}
            if (c == '\n' || c == EOF) break;
            ungetc(c, f);
        }
        while (U < T && fscanf(f, "%ld", &v) == 1) tgt[U++] = (int32_t)v;
        fclose(f);
        if (U != T) { fprintf(stderr, "%s: %d tokens but %d targets\n", argv[3], T, U); return 1; }
        if (load_model(&tr, argv[2], T)) return 1;
        logits = (float *)malloc(sizeof(float) * (size_t)T * (size_t)tr.cfg.V);
        if (gpt2_ensure_logits(&tr)) return 1;
        {
            tj_tree *in = gpt2_param_refs(&tr), *out = tj_tree_new(tr.ctx);
            if (gpt2_set_tokens(&tr, in, "tokens", tok, 1, 1, T) || tj_run(tr.logits, in, out) ||
                tj_array_read(tj_tree_array(out, "logits"), TJ_F32, logits)) { fprintf(stderr, "logits: %s\n", tj_error(tr.ctx)); return 1; }
            tj_tree_free(in);
            tj_tree_free(out);
        }
        loss = gpt2_eval_loss(&tr, tok, tgt);
        { /* the real vocabulary's logits, row by row, then the loss: written atomically */
            size_t row = (size_t)tr.cfg.V_real * sizeof(float), nb = (size_t)T * row + sizeof loss;
            char *buf = (char *)malloc(nb), err[512];
            if (!buf) { fprintf(stderr, "%s: out of memory\n", argv[4]); return 1; }
            for (i = 0; i < (size_t)T; i++) memcpy(buf + i * row, logits + i * (size_t)tr.cfg.V, row);
            memcpy(buf + (size_t)T * row, &loss, sizeof loss);
            if (tj_write_file_atomic(argv[4], buf, nb, err, sizeof err) != TJ_OK) { fprintf(stderr, "%s\n", err); free(buf); return 1; }
            free(buf);
        }
        printf("C: %d tokens, vocab %d (padded to %d), heads %d, loss %.7f\n", T, tr.cfg.V_real, tr.cfg.V, tr.cfg.H, loss);
        free(logits);
        gpt2_trainer_free(&tr);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "export")) {
        gpt2_trainer tr;
        gpt2_hf hf;
        int P;
        if (gpt2_hf_open(&hf, argv[2], err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        P = hf.P;
        gpt2_hf_close(&hf);
        if (load_model(&tr, argv[2], P)) return 1;
        if (gpt2_export_hf(&tr, argv[3], -1, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        gpt2_trainer_free(&tr);
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "greedy")) { /* the demo's sample() at temperature 0, with the logit gaps */
        FILE *f = fopen(argv[3], "r");
        int32_t tok[4096];
        int T = 0, N = atoi(argv[4]), k, j;
        long v;
        gpt2_trainer tr;
        float *row;
        if (!f) { perror(argv[3]); return 1; }
        while (T < 2048 && fscanf(f, "%ld", &v) == 1) tok[T++] = (int32_t)v;
        fclose(f);
        if (T < 1 || N < 1 || T + N > 4096) { fprintf(stderr, "greedy: %d prompt tokens, N %d\n", T, N); return 1; }
        if (load_model(&tr, argv[2], T + N)) return 1;
        row = (float *)malloc(sizeof(float) * (size_t)tr.cfg.V);
        for (k = 0; k < N; k++) {
            int best = 0, second = -1;
            if (gpt2_next_logits(&tr, tok, T + k, row)) { fprintf(stderr, "greedy: %s\n", tj_error(tr.ctx)); return 1; }
            for (j = 1; j < tr.cfg.V_real; j++)
                if (row[j] > row[best]) second = best, best = j;
                else if (second < 0 || row[j] > row[second]) second = j;
            tok[T + k] = best;
            printf("%d %.9g %.9g\n", best, row[best], row[second]);
        }
        free(row);
        gpt2_trainer_free(&tr);
        return 0;
    }
    if (argc >= 6 && argc <= 9 && !strcmp(argv[1], "train"))
        return train(argv[2], argv[3], argv[4], argv[5], argc > 6 ? atoi(argv[6]) : 1, argc > 7 ? argv[7] : "block_out", argc > 8 ? argv[8] : "f32");
    fprintf(stderr, "usage: see the comment at the top of tools/hf_check.c\n");
    return 2;
}
