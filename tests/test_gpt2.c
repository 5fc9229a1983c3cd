/* GPT-2 demo model: a 2-layer, 32-channel GPT-2 learns, and gives the same
   initial parameters and the same losses on one device and on meshes (data
   parallel, data x tensor, FSDP); a checkpoint round trip resumes exactly. */
#define GPT2_NO_MAIN
#include "../demos/gpt2_train.c"
#include "tj_test.h"

#define TB 8
#define TT 16

static void tiny_config(gpt2_config *c) {
    gpt2_default_config(c);
    c->L = 2; c->C = 32; c->H = 2; c->M = 128;
    c->T = c->block = TT; c->B = TB;
    c->V = c->V_real = 256;
    c->param_rules = "embed:data mlp:model heads:model vocab:model";
    c->compute_rules = "batch:data mlp:model heads:model";
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
static float *read_leaf(gpt2_trainer *tr, const char *name, int64_t *n) {
    tj_array *a = tj_tree_array(tr->state, name);
    float *v;
    *n = tj_array_numel(a);
    v = (float *)malloc(sizeof(float) * (size_t)(*n + 1));
    if (!a || tj_array_read(a, TJ_F32, v)) { free(v); return NULL; }
    return v;
}

int main(void) {
    gpt2_config c;
    gpt2_trainer tr;
    size_t n;
    int32_t *data = corpus(&n), x[TB * TT], y[TB * TT];
    int s, m;

    tiny_config(&c);

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

    tjt_current = "meshes";
    {
        struct { int ndev; const char *mesh, *prules, *crules, *name; } ms[] = {
            {1, NULL, NULL, NULL, "one device"},
            {2, "data=2", "embed:data", "batch:data", "data=2"},
            {4, "data=2 model=2", NULL, NULL, "data=2 x model=2"},
            {8, "data=8", "embed:data vocab:data mlp:data", "batch:data", "data=8 FSDP"},
        };
        float ref[5] = {0, 0, 0, 0, 0};
        float *ref_wte = NULL, *ref_wqkv = NULL;
        int64_t nw = 0, nq = 0;
        for (m = 0; m < 4; m++) {
            gpt2_config cm = c;
            if (ms[m].prules) cm.param_rules = ms[m].prules;
            if (ms[m].crules) cm.compute_rules = ms[m].crules;
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
            gpt2_trainer_free(&tr);
        }
        free(ref_wte);
        free(ref_wqkv);
    }

    tjt_current = "checkpoint";
    {
        gpt2_trainer a, b;
        float la[4], lb = NAN;
        const char *path = "build/test_gpt2_ckpt.safetensors";
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
    free(data);
    return tjt_finish();
}
