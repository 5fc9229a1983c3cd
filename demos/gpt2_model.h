/* gpt2_model.h - the GPT-2 of the tinyjax demo, to read top to bottom: its
 * config, its parameters, one transformer block, the forward pass, the loss,
 * and the jitted programs (init, the training step with AdamW, eval,
 * logits). Everything else (the CLI, data, checkpoints, Hugging Face
 * weights, sampling, the benchmark) is the driver, demos/gpt2_train.c.
 *
 * Axes (named, so no code below counts dimensions; sizes from the config):
 *   vocab  V  token ids (padded so it divides the mesh)   embed     C  model width
 *   batch  B  sequences of one micro-batch                heads     H  attention heads
 *   pos    T  positions of a sequence (kpos: the keys')   head_dim  D = C / H
 *   micro  K  micro-batches of one optimizer step         mlp       M  MLP width (4 C)
 *   layer  L  blocks (params stacked on it, scanned)      qkv 3, lnp 4: q k v packed,
 *                                                         LN gains and biases packed
 * The model:
 *   x   = wte[tokens] + wpe[pos]                             (batch, pos, embed)
 *   per layer (tj_scan over the `layer` axis of the stacked block params):
 *     h = LN(x) g1 + b1
 *     q, k, v = h . wqkv + bqkv                              (batch, pos, heads, head_dim) each
 *     o = softmax_kpos(causal(q . k[pos->kpos] / sqrt(D))) . v   (batch, heads, pos, head_dim):
 *         tj_attention, one fused op that never makes the (pos, kpos) scores
 *     x = x + o . wo + bo                                    contract heads head_dim
 *     x = x + gelu(LN(x) g2 + b2) . wfc + bfc) . wproj + bproj
 *     x is named "block_out" (what the default remat policy saves)
 *   logits = LN(x) gf + bf . wte                             (batch, pos, vocab), tied LM head
 *   loss   = mean cross-entropy(logits, targets) over batch, pos and the real
 *            vocabulary (the padded columns take no part): training and
 *            evaluation use the same one (gpt2_xent); sampling sets the
 *            padded columns' logits to -1e30
 *   dropout (training only, rate c->dropout > 0; GPT-2's embd_pdrop and
 *            resid_pdrop, nanoGPT's `dropout`): on x after the embedding sum,
 *            on o . wo + bo and on the MLP's output before each residual add,
 *            and (attn_pdrop) on the attention probabilities with
 *            attn_composed only: the fused tj_attention never makes them.
 *            Each mask is tj_dropout_fold with one fixed key (from the seed)
 *            folded with ((step * K + micro) * L + layer) * 4 + site, an i32
 *            (wrapping), so every step, micro-batch, layer and site draws its
 *            own mask, and a recompute (remat) the same one.
 *
 * The training step is one jitted program: forward, backward, global-norm
 * clipping, AdamW with bias correction (lr and the step count are rank-0
 * array inputs, so one program serves every step), and the new params, m, v
 * as outputs that reuse the donated buffers of the old ones. With --accum K
 * its tokens are (micro=K, batch, pos) and forward + backward run in a
 * tj_scan over `micro` whose carry is the gradient sum (or, unrolled, K
 * times in a row).
 */
#ifndef GPT2_MODEL_H
#define GPT2_MODEL_H

#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../tinyjax.h"

#if defined(__GNUC__)
#define GPT2_UNUSED __attribute__((unused)) /* helpers the driver uses and tests may not */
#else
#define GPT2_UNUSED
#endif

/* ---------------------------------------------------------------- config */

/* REMAT_AUTO is the driver's choice before tracing: everything (regather
   on simulated devices) when the step fits memory_budget, else block_out
   (gpt2_train.c). REMAT_REGATHER saves everything but the all-gathered
   weights, which the backward pass gathers again: on simulated devices
   each dot then reads the shards in place (tj_set_collective_matmul), so
   the gathered copies kept for the backward pass would be pure cost. */
enum { REMAT_BLOCK_OUT = 0, REMAT_NOTHING, REMAT_DOTS, REMAT_EVERYTHING, REMAT_OFFLOAD, REMAT_REGATHER, REMAT_AUTO, NREMAT };
GPT2_UNUSED static const char *remat_names[] = {"block_out", "nothing", "dots", "everything", "offload", "regather", "auto"};

typedef struct {
    int V;          /* vocab (padded)                                 */
    int V_real;     /* vocab actually used by the tokenizer           */
    int T;          /* context length of a training sequence          */
    int block;      /* rows of the position table (>= T)              */
    int C, L, H, M; /* embed, layers, heads, mlp                      */
    int B;          /* batch (of one micro-batch)                     */
    int accum;      /* micro-batches per optimizer step (K)           */
    int accum_unroll; /* trace them one after another, not as a scan  */
    int bf16;       /* compute in bf16 (params and loss stay f32)     */
    int remat;      /* REMAT_*                                        */
    double memory_budget; /* REMAT_AUTO: bytes per device (0: the driver's default) */
    uint64_t seed;
    /* AdamW */
    double beta1, beta2, eps, wd, clip;
    /* sharding: logical axis rules; NULL on one device */
    const char *param_rules, *compute_rules;
    int seq_parallel; /* residual stream split along pos over mesh axis model */
    double ln_eps;    /* layer norm epsilon (1e-5; 0 means 1e-5)         */
    int act;          /* ACT_GELU (tanh approximation) or ACT_RELU       */
    int attn_composed; /* attention from dot, causal_mask and softmax (the
                          (pos, kpos) scores as values) instead of the fused
                          tj_attention; the same results within rounding */
    int distributed;  /* process mode: one of several processes (mpirun)  */
    double dropout;   /* training dropout rate in [0, 1) (0: none, and the
                         step takes no step-number input)                 */
} gpt2_config;
enum { ACT_GELU = 0, ACT_RELU = 1 };
/* the demo's sharding on a mesh "data=.. model=..": FSDP over data, tensor
   parallel over model (gpt2_train's --param-rules / --compute-rules) */
#define GPT2_PARAM_RULES "embed:data mlp:model heads:model vocab:model"
#define GPT2_COMPUTE_RULES "batch:data mlp:model heads:model vocab:model"

static void gpt2_default_config(gpt2_config *c) {
    memset(c, 0, sizeof *c);
    c->V = 256; c->V_real = 256;
    c->T = 64; c->block = 64;
    c->C = 128; c->L = 4; c->H = 4; c->M = 4 * 128;
    c->B = 8;
    c->accum = 1;
    c->remat = REMAT_BLOCK_OUT;
    c->seed = 1337;
    c->beta1 = 0.9; c->beta2 = 0.95; c->eps = 1e-8; c->wd = 0.1; c->clip = 1.0;
    c->ln_eps = 1e-5;
}

/* ------------------------------------------------------------ parameters */

/* init kinds */
enum { INIT_NORMAL, INIT_PROJ, INIT_POS, INIT_ONES, INIT_ZEROS, INIT_LN };
typedef struct {
    const char *name;   /* leaf name under "params."                    */
    const char *shape;  /* axes; sizes filled in by param_shape()       */
    int init;
} gpt2_pspec;
/* Block parameters (stacked on `layer`) first, in scan xs order. The four
   layer-norm vectors share one leaf (axis lnp: g1 b1 g2 b2) and q, k, v one
   matrix (axis qkv, as GPT-2's c_attn: one dot instead of three), which also
   keeps the scan's operand count small. */
enum { P_LN, P_WQKV, P_BQKV, P_WO, P_BO, P_WFC, P_BFC, P_WPROJ, P_BPROJ, NBLOCKP };
static const gpt2_pspec gpt2_params[] = {
    {"h.ln", "layer lnp embed", INIT_LN},
    {"h.wqkv", "layer embed qkv heads head_dim", INIT_NORMAL},
    {"h.bqkv", "layer qkv heads head_dim", INIT_ZEROS},
    {"h.wo", "layer heads head_dim embed", INIT_PROJ},
    {"h.bo", "layer embed", INIT_ZEROS},
    {"h.wfc", "layer embed mlp", INIT_NORMAL},
    {"h.bfc", "layer mlp", INIT_ZEROS},
    {"h.wproj", "layer mlp embed", INIT_PROJ},
    {"h.bproj", "layer embed", INIT_ZEROS},
    {"wte", "vocab embed", INIT_NORMAL},
    {"wpe", "pos embed", INIT_POS},
    {"lnf_g", "embed", INIT_ONES},
    {"lnf_b", "embed", INIT_ZEROS},
};
#define NPARAMS ((int)(sizeof gpt2_params / sizeof gpt2_params[0]))

/* AdamW's weight decay applies to matrices: the leaves whose last name
   component starts with 'w' (wte, wpe, wq, wk, wv, wo, wfc, wproj), not to
   gains and biases (which have rank >= 2 too, once stacked on `layer`). */
static int gpt2_decayed(const char *name) {
    const char *s = strrchr(name, '.');
    return (s ? s[1] : name[0]) == 'w';
}

static int64_t axis_size(const gpt2_config *c, const char *ax, size_t n) {
#define IS(s) (n == strlen(s) && !strncmp(ax, s, n))
    if (IS("layer")) return c->L;
    if (IS("embed")) return c->C;
    if (IS("heads")) return c->H;
    if (IS("head_dim")) return c->C / c->H;
    if (IS("mlp")) return c->M;
    if (IS("vocab")) return c->V;
    if (IS("pos")) return c->block;
    if (IS("lnp")) return 4;
    if (IS("qkv")) return 3;
#undef IS
    return -1;
}
/* "layer=4 embed=128" for parameter i */
static const char *param_shape(const gpt2_config *c, int i, char *buf, size_t n) {
    const char *s = gpt2_params[i].shape;
    size_t k = 0;
    buf[0] = 0;
    while (*s) {
        size_t len = strcspn(s, " ");
        snprintf(buf + k, n - k, "%s%.*s=%lld", k ? " " : "", (int)len, s, (long long)axis_size(c, s, len));
        k = strlen(buf);
        s += len;
        while (*s == ' ') s++;
    }
    return buf;
}
/* elements of parameter i, and of all of them */
static int64_t param_numel(const gpt2_config *c, int i) {
    const char *s = gpt2_params[i].shape;
    int64_t p = 1;
    while (*s) {
        size_t len = strcspn(s, " ");
        p *= axis_size(c, s, len);
        s += len;
        while (*s == ' ') s++;
    }
    return p;
}
GPT2_UNUSED static int64_t gpt2_num_params(const gpt2_config *c) {
    int64_t total = 0;
    int i;
    for (i = 0; i < NPARAMS; i++) total += param_numel(c, i);
    return total;
}

/* ------------------------------------------------------------------ model */

static tj_v shard(const gpt2_config *c, tj_v x) { return c->compute_rules ? tj_shard_by_rules(x, c->compute_rules) : x; }
/* The residual stream (embeddings, block inputs and outputs, what layer norm
   reads). Sequence parallelism (Megatron-LM's) also splits it along pos over
   the tensor-parallel mesh axis: layer norms and residual adds then work on
   a slice of the positions, and the block outputs the backward pass keeps
   shrink by the same factor. The compute rules come first, so an axis they
   give `model` to keeps it; shard(c, LN(x)) all-gathers pos back before the
   column-parallel dots, and shard_resid of a row-parallel dot's partial sum
   is a reduce-scatter along pos instead of a psum. */
static tj_v shard_resid(const gpt2_config *c, tj_v x) {
    char rules[600];
    if (!c->seq_parallel || !c->compute_rules) return shard(c, x);
    snprintf(rules, sizeof rules, "%s pos:model", c->compute_rules);
    return tj_shard_by_rules(x, rules);
}

/* layer norm with the config's epsilon (GPT-2's 1e-5 unless config.json says otherwise) */
static tj_v affine_ln(const gpt2_config *c, tj_v x, tj_v g, tj_v b) {
    return tj_add(tj_mul(tj_layer_norm(x, "embed", c->ln_eps > 0 ? c->ln_eps : 1e-5), g), b);
}
/* the MLP's activation: GPT-2's gelu (tanh approximation, HF "gelu_new"), or relu */
static tj_v gpt2_act(const gpt2_config *c, tj_v x) { return c->act == ACT_RELU ? tj_relu(x) : tj_gelu(x); }

/* Dropout. Sites of one layer; DROP_EMBD is drawn once, before the layers,
   with the fold of layer 0. The fold is ((step * K + micro) * L + layer) *
   NDROP + site (i32, wrapping): `lb` below is the part before the site,
   (step * K + micro) * L + layer, a traced i32 scalar, or NULL: no dropout
   (evaluation, sampling, rate 0). */
enum { DROP_EMBD = 0, DROP_ATTN, DROP_ATTN_OUT, DROP_MLP_OUT, NDROP };
static uint64_t gpt2_drop_key(const gpt2_config *c) { return tj_key_fold(c->seed, 0x64726f70ull); /* "drop": apart from the init's 1..NPARAMS */ }
static tj_v gpt2_dropout(const gpt2_config *c, tj_v x, tj_v lb, int site) {
    tj_graph *g;
    tj_v fold;
    if (!lb || !x || !(c->dropout > 0)) return x;
    g = tj_graph_of(x);
    fold = tj_add(tj_mul(lb, tj_scalar(g, TJ_I32, NDROP)), tj_scalar(g, TJ_I32, site));
    return tj_dropout_fold(x, gpt2_drop_key(c), fold, c->dropout);
}
/* the fold's base of one micro-batch, (step * K + micro) * L, from the step
   (an i32 scalar input; NULL: no dropout) and the micro-batch index (an i32
   scalar, or NULL for 0) */
static tj_v gpt2_drop_base(const gpt2_config *c, tj_v step, tj_v micro) {
    tj_graph *g;
    tj_v b;
    if (!step || !(c->dropout > 0)) return NULL;
    g = tj_graph_of(step);
    b = c->accum > 1 ? tj_mul(step, tj_scalar(g, TJ_I32, c->accum)) : step;
    if (micro) b = tj_add(b, micro);
    return tj_mul(b, tj_scalar(g, TJ_I32, c->L));
}

/* one transformer block, x (batch, pos, embed) in and out; p[] are this
   layer's slices of the stacked params (the `layer` axis gone); lb the
   dropout fold's base of this layer (NULL: none) */
static tj_v gpt2_block(const gpt2_config *c, tj_v x, const tj_v *p, tj_v lb) {
    double scale = 1.0 / sqrt((double)(c->C / c->H));
    tj_v h, qkv, q, k, v, s, a, o, m;
    h = shard(c, affine_ln(c, x, tj_index(p[P_LN], "lnp", 0), tj_index(p[P_LN], "lnp", 1))); /* (batch, pos, embed) */
    qkv = shard(c, tj_add(tj_dot(h, p[P_WQKV], "embed"), p[P_BQKV])); /* (batch, pos, qkv, heads, head_dim) */
    q = tj_index(qkv, "qkv", 0);
    k = tj_rename(tj_index(qkv, "qkv", 1), "pos", "kpos");
    v = tj_rename(tj_index(qkv, "qkv", 2), "pos", "kpos");
    if (c->attn_composed) { /* the same attention, step by step */
        s = tj_dot(tj_muls(q, scale), k, "head_dim");              /* (batch, heads, pos, kpos) */
        s = tj_causal_mask(shard(c, s), "pos", "kpos", -1e9);
        a = gpt2_dropout(c, tj_softmax(s, "kpos"), lb, DROP_ATTN); /* attn_pdrop */
        o = shard(c, tj_dot(a, v, "kpos"));                        /* (batch, heads, pos, head_dim) */
    } else
        o = shard(c, tj_attention(q, k, v, "pos", "kpos", "head_dim", scale, 1));
    x = shard_resid(c, tj_add(x, gpt2_dropout(c, tj_add(shard_resid(c, tj_dot(o, p[P_WO], "heads head_dim")), p[P_BO]), lb, DROP_ATTN_OUT)));
    h = shard(c, affine_ln(c, x, tj_index(p[P_LN], "lnp", 2), tj_index(p[P_LN], "lnp", 3)));
    m = shard(c, gpt2_act(c, tj_add(tj_dot(h, p[P_WFC], "embed"), p[P_BFC]))); /* (batch, pos, mlp) */
    x = tj_add(x, gpt2_dropout(c, tj_add(shard_resid(c, tj_dot(m, p[P_WPROJ], "mlp")), p[P_BPROJ]), lb, DROP_MLP_OUT));
    return tj_checkpoint_name(shard_resid(c, x), "block_out");
}
/* the layer scan's body; with dropout xs[NBLOCKP] is the layer index (an
   arange over `layer`) and base the micro-batch's fold base, captured */
typedef struct {
    const gpt2_config *c;
    tj_v base;
} gpt2_layers;
static void gpt2_scan_body(tj_graph *g, const tj_v *carry, const tj_v *xs, tj_v *carry_out, tj_v *y, void *user) {
    const gpt2_layers *u = (const gpt2_layers *)user;
    (void)g; (void)y;
    carry_out[0] = gpt2_block(u->c, carry[0], xs, u->base ? tj_add(u->base, xs[NBLOCKP]) : NULL);
}

/* The vocabulary is padded (50257 -> 50304, 1000 -> 1024) so the vocab axis
   divides the mesh; the padded columns are no tokens. The loss
   (gpt2_xent: training, evaluation, the vocab-parallel one) is
   tj_cross_entropy_padded over the real vocabulary, the softmax of
   transformers, and gives the padded columns (and the padded rows of the
   tied wte) a gradient of exactly zero, with no pass over the logits to
   mask them. Sampling reads the logits themselves: there the padded
   columns become GPT2_PAD_LOGIT, by a mask built from an arange
   constrained right at its source, so each device makes only its slice. */
#define GPT2_PAD_LOGIT (-1e30)
static tj_v gpt2_mask_padded(const gpt2_config *c, tj_v logits) {
    tj_graph *g;
    char shape[64];
    tj_v col;
    if (!logits || c->V_real <= 0 || c->V_real >= c->V) return logits;
    g = tj_graph_of(logits);
    snprintf(shape, sizeof shape, "vocab=%d", c->V);
    col = shard(c, tj_arange(g, TJ_I32, shape, "vocab"));
    return tj_select(tj_lt(col, tj_scalar(g, TJ_I32, c->V_real)), logits, tj_scalar(g, tj_v_dtype(logits), GPT2_PAD_LOGIT));
}

/* REMAT_REGATHER's policy: save every residual but an all_gather's output */
static tj_decision gpt2_regather(const char *op, const char *name, const char *shape, void *u) {
    (void)name; (void)shape; (void)u;
    return strcmp(op, "all_gather") ? TJ_SAVE : TJ_RECOMPUTE;
}
/* logits (batch, pos, vocab) in f32, the padded columns too, from a tree
   of parameter values named as in gpt2_params (already in the compute
   dtype) and tokens (batch, pos);
   base: the dropout fold's base of this micro-batch (gpt2_drop_base), or
   NULL (no dropout: evaluation, sampling, rate 0) */
static tj_v gpt2_forward(const gpt2_config *c, const tj_tree *P, tj_v tokens, tj_v base) {
    tj_v x, wte = tj_tree_v(P, "wte"), wpe = tj_tree_v(P, "wpe"), xs[NBLOCKP + 1], out = NULL, logits;
    gpt2_layers u;
    /* static: tj_scan keeps a pointer to the policy until tj_jit returns */
    static tj_policy pol;
    int i, T = (int)tj_v_dim(tokens, "pos");
    switch (c->remat) {
    case REMAT_NOTHING: pol = tj_nothing_saveable(); break;
    case REMAT_DOTS: pol = tj_dots_saveable(); break;
    case REMAT_EVERYTHING: pol = tj_everything_saveable(); break;
    case REMAT_REGATHER: pol = tj_policy_from_fn(gpt2_regather, NULL); break;
    case REMAT_OFFLOAD: pol = tj_save_and_offload_only_these_names("", "block_out"); break;
    default: pol = tj_save_only_these_names("block_out"); break;
    }
    if (T < c->block) wpe = tj_slice(wpe, "pos", 0, T);
    x = shard_resid(c, tj_add(tj_take(wte, "vocab", tokens), wpe)); /* (batch, pos, embed) */
    x = gpt2_dropout(c, x, base, DROP_EMBD);                       /* embd_pdrop: layer 0's fold */
    for (i = 0; i < NBLOCKP; i++) xs[i] = tj_tree_v(P, gpt2_params[i].name);
    u.c = c;
    u.base = c->dropout > 0 ? base : NULL;
    if (u.base) { /* each layer's index, for its fold */
        char shape[32];
        snprintf(shape, sizeof shape, "layer=%d", c->L);
        xs[NBLOCKP] = tj_arange(tj_graph_of(tokens), TJ_I32, shape, "layer");
    }
    if (tj_scan(gpt2_scan_body, &u, "layer", 1, &x, NBLOCKP + (u.base != NULL), xs, 0, &out, NULL, &pol)) return NULL;
    x = shard(c, affine_ln(c, out, tj_tree_v(P, "lnf_g"), tj_tree_v(P, "lnf_b"))); /* pos whole again for the vocab-parallel head */
    logits = shard(c, tj_dot(x, wte, "embed")); /* (batch, pos, vocab) */
    /* in f32 (f64 stays f64: gradient checks); tj_cross_entropy reads bf16
       logits through this cast, so the loss makes no f32 copy of them */
    return tj_v_dtype(logits) == TJ_BF16 ? tj_cast(logits, TJ_F32) : logits;
}

/* the "params." leaves of `in` as a tree P named without the prefix */
static void gpt2_param_tree(const tj_tree *in, tj_tree *P) {
    char name[128];
    int i;
    for (i = 0; i < NPARAMS; i++) {
        snprintf(name, sizeof name, "params.%s", gpt2_params[i].name);
        tj_tree_set_v(P, gpt2_params[i].name, tj_tree_v(in, name));
    }
}
/* P's values in the compute dtype, into Pc */
static void gpt2_compute_params(const gpt2_config *c, const tj_tree *P, tj_tree *Pc) {
    int i;
    for (i = 0; i < NPARAMS; i++) {
        tj_v p = tj_tree_v(P, gpt2_params[i].name);
        tj_tree_set_v(Pc, gpt2_params[i].name, c->bf16 ? tj_cast(p, TJ_BF16) : p);
    }
}
/* mean cross-entropy over batch and pos of logits (batch, pos, vocab).
   With the vocabulary split over the mesh (vocab:model), tj_cross_entropy
   is Megatron's vocab-parallel loss: each device reduces its slice of the
   vocabulary to a max, a sum of exponentials and the target's logit per
   position, and only those move, not the logits (tinyjax.h [5]). The
   padded columns take no part (tj_cross_entropy_padded). */
static tj_v gpt2_xent(const gpt2_config *c, tj_v logits, tj_v targets) {
    if (c->V_real > 0 && c->V_real < c->V) return tj_cross_entropy_padded(logits, targets, "vocab", "batch pos", c->V_real);
    return tj_cross_entropy(logits, targets, "vocab", "batch pos");
}
/* mean loss of one batch (tokens, targets: (batch, pos)) from the params Pc
   in the compute dtype, times `scale`, and its gradients with respect to W's
   leaves (the values Pc was made from, or Pc itself) into G, same names;
   base: the dropout fold's base (gpt2_drop_base) or NULL */
static tj_v gpt2_loss_grads(const gpt2_config *c, const tj_tree *Pc, const tj_tree *W, tj_v tokens, tj_v targets, double scale, tj_tree *G, tj_v base) {
    tj_v loss = gpt2_xent(c, gpt2_forward(c, Pc, tokens, base), targets);
    if (scale != 1.0) loss = tj_muls(loss, scale);
    if (loss) tj_grad_tree(loss, W, G);
    return loss;
}

/* ------------------------------------------------------------- programs */

static tj_v init_shard(const gpt2_config *c, tj_v v) { return c->param_rules ? tj_shard_by_rules(v, c->param_rules) : v; }

/* init: every parameter drawn (or filled) directly with its sharding, so
   each device makes only its slice; same numbers on every mesh. m, v zero. */
static void gpt2_init_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) {
    const gpt2_config *c = (const gpt2_config *)user;
    char shape[256], name[128];
    int i, pass;
    (void)in;
    for (i = 0; i < NPARAMS; i++) {
        const gpt2_pspec *s = &gpt2_params[i];
        uint64_t key = tj_key_fold(c->seed, (uint64_t)i + 1);
        double std = s->init == INIT_PROJ ? 0.02 / sqrt(2.0 * c->L) : s->init == INIT_POS ? 0.01 : 0.02;
        tj_v v;
        param_shape(c, i, shape, sizeof shape);
        /* the sharding constraint goes right on the source op, so each device
           generates only its slice (no full tensor, no slicing) */
        if (s->init == INIT_ONES || s->init == INIT_ZEROS) v = init_shard(c, tj_fill(g, TJ_F32, shape, s->init == INIT_ONES ? 1.0 : 0.0));
        else if (s->init == INIT_LN) { /* gains 1, biases 0 */
            char one[128];
            tj_v parts[4];
            int k;
            snprintf(one, sizeof one, "layer=%d lnp=1 embed=%d", c->L, c->C);
            for (k = 0; k < 4; k++) parts[k] = init_shard(c, tj_fill(g, TJ_F32, one, k % 2 ? 0.0 : 1.0));
            v = init_shard(c, tj_concat(4, parts, "lnp"));
        } else v = tj_muls(init_shard(c, tj_normal(g, key, TJ_F32, shape)), std);
        snprintf(name, sizeof name, "params.%s", s->name);
        tj_tree_set_v(out, name, v);
        for (pass = 0; pass < 2; pass++) {
            tj_v z = init_shard(c, tj_fill(g, TJ_F32, shape, 0.0));
            snprintf(name, sizeof name, "%s.%s", pass ? "v" : "m", s->name);
            tj_tree_set_v(out, name, z);
        }
    }
}

/* Gradient accumulation over the micro axis of the tokens and targets
   (micro, batch, pos): K forward and backward passes of one micro-batch
   each, on the same params, whose gradients are summed. Each micro-batch's
   loss is scaled by 1/K first, so the sums are the means. Two ways:

   scan (default): a tj_scan over `micro` whose carry is the gradient sum
   (f32, sharded like the params) and the loss sum: one traced body, so the
   program's size does not grow with K. The body differentiates with
   respect to the params it closes over. A carry lives in three buffers
   (the zeros it starts from, one it alternates with, the result).

   unrolled (--accum-unroll): the K micro-batches traced one after another;
   the schedule keeps creation order, so micro-batch j's activations are
   freed before j + 1's forward pass. Fewer parameter-sized buffers, but a
   program K times as long.

   With dropout, micro-batch j of step s folds (s * K + j) * L + layer into
   its masks (the scan takes j from an arange over `micro`), so each draws
   its own, and both ways draw the same ones. */
typedef struct {
    const gpt2_config *c;
    const tj_tree *Pc; /* the step's params in the compute dtype */
    tj_v step;         /* the step number (i32 scalar), or NULL: no dropout */
} gpt2_accum;
static void gpt2_accum_body(tj_graph *g, const tj_v *carry, const tj_v *xs, tj_v *carry_out, tj_v *y, void *user) {
    const gpt2_accum *a = (const gpt2_accum *)user;
    tj_tree *G = tj_tree_new(tj_graph_ctx(g));
    tj_v loss;
    int i;
    (void)y;
    loss = gpt2_loss_grads(a->c, a->Pc, a->Pc, xs[0], xs[1], 1.0 / a->c->accum, G, gpt2_drop_base(a->c, a->step, a->step ? xs[2] : NULL));
    for (i = 0; i < NPARAMS; i++) {
        tj_v gi = tj_tree_v(G, gpt2_params[i].name);
        carry_out[i] = tj_add(carry[i], tj_v_dtype(gi) == TJ_F32 ? gi : tj_cast(gi, TJ_F32));
    }
    carry_out[NPARAMS] = tj_add(carry[NPARAMS], loss);
    tj_tree_free(G);
}
/* mean loss, and mean f32 gradients into G, by a scan over micro-batches */
static tj_v gpt2_accum_scan(const gpt2_config *c, tj_graph *g, const tj_tree *Pc, tj_v tokens, tj_v targets, tj_tree *G, tj_v step) {
    gpt2_accum a;
    tj_v init[NPARAMS + 1], sum[NPARAMS + 1], xs[3];
    char shape[256];
    int i;
    a.c = c;
    a.Pc = Pc;
    a.step = c->dropout > 0 ? step : NULL;
    xs[0] = tokens;
    xs[1] = targets;
    if (a.step) { /* the micro-batch index, for the dropout fold */
        snprintf(shape, sizeof shape, "micro=%d", c->accum);
        xs[2] = tj_arange(g, TJ_I32, shape, "micro");
    }
    for (i = 0; i < NPARAMS; i++) init[i] = init_shard(c, tj_fill(g, TJ_F32, param_shape(c, i, shape, sizeof shape), 0.0));
    init[NPARAMS] = tj_scalar(g, TJ_F32, 0.0);
    if (tj_scan(gpt2_accum_body, &a, "micro", NPARAMS + 1, init, a.step ? 3 : 2, xs, 0, sum, NULL, NULL)) return NULL;
    for (i = 0; i < NPARAMS; i++) tj_tree_set_v(G, gpt2_params[i].name, sum[i]);
    return sum[NPARAMS];
}
/* the same, unrolled: gradients with respect to the f32 params P */
static tj_v gpt2_accum_unrolled(const gpt2_config *c, const tj_tree *Pc, const tj_tree *P, tj_v tokens, tj_v targets, tj_tree *G, tj_v step) {
    tj_v loss = NULL;
    int i, j;
    for (j = 0; j < c->accum; j++) {
        tj_tree *Gj = tj_tree_new(tj_graph_ctx(tj_graph_of(tokens)));
        tj_v base = step ? gpt2_drop_base(c, step, tj_scalar(tj_graph_of(step), TJ_I32, j)) : NULL;
        tj_v lj = gpt2_loss_grads(c, Pc, P, tj_index(tokens, "micro", j), tj_index(targets, "micro", j), 1.0 / c->accum, Gj, base);
        loss = j ? tj_add(loss, lj) : lj;
        for (i = 0; i < NPARAMS; i++) {
            const char *pn = gpt2_params[i].name;
            tj_tree_set_v(G, pn, j ? tj_add(tj_tree_v(G, pn), tj_tree_v(Gj, pn)) : tj_tree_v(Gj, pn));
        }
        tj_tree_free(Gj);
    }
    return loss;
}
static int accum_unrolled(const gpt2_config *c) { return c->accum_unroll; }

/* Global-norm clipping and AdamW with bias correction: from the params P,
   their grads G and in's "m.*", "v.*", "lr", "t", the new "params.*", "m.*",
   "v.*" into out. Returns the global gradient norm (before clipping). Per
   leaf, the squared norm is one sum over mul(g, g), and the update is one
   chain of elementwise ops that the CPU backend runs as one fused loop.
   demos/bench_optimizer.c times this alone at the 124M shape. */
static tj_v gpt2_adamw(const gpt2_config *c, tj_graph *g, const tj_tree *in, const tj_tree *P, const tj_tree *G, tj_tree *out) {
    tj_v lr = tj_tree_v(in, "lr"), t = tj_tree_v(in, "t");
    tj_v sq = NULL, gnorm, clipc, bc1, bc2;
    char name[128];
    int i;
    /* global gradient norm, clip coefficient min(1, clip / norm) */
    for (i = 0; i < NPARAMS; i++) {
        tj_v gi = tj_tree_v(G, gpt2_params[i].name), s = tj_sum_all(tj_mul(gi, gi));
        sq = sq ? tj_add(sq, s) : s;
    }
    gnorm = tj_sqrt(sq);
    clipc = tj_div(tj_scalar(g, TJ_F32, c->clip), tj_max2(gnorm, tj_scalar(g, TJ_F32, c->clip)));
    /* bias corrections 1 - beta^t, t a rank-0 f32 input */
    bc1 = tj_adds(tj_neg(tj_exp(tj_muls(t, log(c->beta1)))), 1.0);
    bc2 = tj_adds(tj_neg(tj_exp(tj_muls(t, log(c->beta2)))), 1.0);
    for (i = 0; i < NPARAMS; i++) {
        const char *pn = gpt2_params[i].name;
        tj_v p = tj_tree_v(P, pn), gr = tj_mul(tj_tree_v(G, pn), clipc), m, v, upd;
        snprintf(name, sizeof name, "m.%s", pn);
        m = tj_add(tj_muls(tj_tree_v(in, name), c->beta1), tj_muls(gr, 1.0 - c->beta1));
        snprintf(name, sizeof name, "v.%s", pn);
        v = tj_add(tj_muls(tj_tree_v(in, name), c->beta2), tj_muls(tj_mul(gr, gr), 1.0 - c->beta2));
        upd = tj_div(tj_div(m, bc1), tj_adds(tj_sqrt(tj_div(v, bc2)), c->eps));
        if (gpt2_decayed(pn) && c->wd > 0) upd = tj_add(upd, tj_muls(p, c->wd));
        p = tj_sub(p, tj_mul(upd, lr));
        snprintf(name, sizeof name, "params.%s", pn);
        tj_tree_set_v(out, name, p);
        snprintf(name, sizeof name, "m.%s", pn);
        tj_tree_set_v(out, name, m);
        snprintf(name, sizeof name, "v.%s", pn);
        tj_tree_set_v(out, name, v);
    }
    return gnorm;
}

/* one training step: loss, grads (accumulated over micro-batches when
   accum > 1), clip, AdamW; new params, m, v. With dropout, in's "step" (an
   i32 scalar: the steps taken before this one) seeds the masks; without,
   the step has no such input. */
static void gpt2_step_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) {
    const gpt2_config *c = (const gpt2_config *)user;
    tj_ctx *ctx = tj_graph_ctx(g);
    tj_tree *P = tj_tree_new(ctx), *Pc = tj_tree_new(ctx), *G = tj_tree_new(ctx);
    tj_v tokens = tj_tree_v(in, "tokens"), targets = tj_tree_v(in, "targets");
    tj_v step = c->dropout > 0 ? tj_tree_v(in, "step") : NULL;
    tj_v loss, gnorm;
    gpt2_param_tree(in, P);
    gpt2_compute_params(c, P, Pc);
    if (c->accum == 1) loss = gpt2_loss_grads(c, Pc, P, tokens, targets, 1.0, G, gpt2_drop_base(c, step, NULL));
    else if (accum_unrolled(c)) loss = gpt2_accum_unrolled(c, Pc, P, tokens, targets, G, step);
    else loss = gpt2_accum_scan(c, g, Pc, tokens, targets, G, step);
    gnorm = gpt2_adamw(c, g, in, P, G, out);
    /* the new state keeps the old one's sharding (so it can be donated and
       fed back to this same program) */
    if (c->param_rules) tj_filter_shard(out, c->param_rules);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "gnorm", gnorm);
    tj_tree_free(P);
    tj_tree_free(Pc);
    tj_tree_free(G);
}

/* the forward pass alone: the loss (validation: the training step's loss,
   gpt2_xent, on one batch), or the logits (sampling) */
static void gpt2_forward_only(tj_graph *g, const tj_tree *in, tj_tree *out, const gpt2_config *c, int loss) {
    tj_ctx *ctx = tj_graph_ctx(g);
    tj_tree *P = tj_tree_new(ctx), *Pc = tj_tree_new(ctx);
    tj_v logits;
    gpt2_param_tree(in, P);
    gpt2_compute_params(c, P, Pc);
    logits = gpt2_forward(c, Pc, tj_tree_v(in, "tokens"), NULL); /* no dropout (model.eval()) */
    if (loss) tj_tree_set_v(out, "loss", gpt2_xent(c, logits, tj_tree_v(in, "targets")));
    else tj_tree_set_v(out, "logits", gpt2_mask_padded(c, logits));
    tj_tree_free(P);
    tj_tree_free(Pc);
}
GPT2_UNUSED static void gpt2_eval_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) { gpt2_forward_only(g, in, out, (const gpt2_config *)user, 1); }
GPT2_UNUSED static void gpt2_logits_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) { gpt2_forward_only(g, in, out, (const gpt2_config *)user, 0); }

#endif /* GPT2_MODEL_H */
