/* gpt2_train.c - train a GPT-2 with tinyjax: named axes, autodiff, scan over
 * layers with a remat policy, AdamW as traced ops, FSDP + tensor (+ sequence)
 * parallelism on a simulated device mesh, gradient accumulation, optional
 * bf16 compute.
 *
 *   ./build.sh demo                      default: 8 devices, mesh data=4 model=2,
 *                                        trains on the project's own sources
 *   ./build/gpt2_train --help            every flag
 *   ./build/gpt2_train --bench           GPT-2 124M shape, one device, ms/step
 *
 * The model (config, parameters, block, forward, loss, the training step)
 * is demos/gpt2_model.h, a file to read top to bottom; this file is the
 * driver around it: a trainer that owns the context, the compiled programs
 * and the state, checkpoints, Hugging Face weights, data, sampling, the
 * benchmark and the command line.
 *
 * Structure: everything but main() is usable from tests: define GPT2_NO_MAIN
 * and #include "demos/gpt2_train.c" (tests/test_gpt2.c does).
 */
#define _POSIX_C_SOURCE 200809L
#define TINYJAX_IMPLEMENTATION
#include "tinyjax.h"
#define GPT2_IO_IMPLEMENTATION
#include "gpt2_io.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt2_model.h"

/* ------------------------------------------------------------ GPUs (--cuda)
   build.sh builds this file with -DGPT2_CUDA when nvcc is present and links
   it with tinyjax_cuda.o (the library with its CUDA backend) and cuBLAS;
   the context is then the same, only its backend differs. With libnccl
   present it adds -DTJ_NCCL (tinyjax_cuda.cu's NCCL transport: --cuda in
   several processes, one GPU each) and, with MPI, -DTJ_MPI. Without
   GPT2_CUDA, --cuda is a clear error. */
#ifdef GPT2_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef GPT2_CUDA
static int gpt2_cuda_dev; /* --cuda: the CUDA device this process runs on */
#endif
/* The card's dense peak in TFLOP/s for the compute dtype (bf16, TF32 when
   TJ_CUDA_TF32=1 lets cuBLAS use it for f32 dots, else plain f32), from its
   name (cudaGetDeviceProperties; --cost takes the names too), and its
   memory bandwidth in GB/s into *gbs (may be NULL); 0 when not in this
   table. GPT2_PEAK_TFLOPS=X overrides the peak. */
GPT2_UNUSED static double gpt2_peak_tflops(const char *name, int bf16, int tf32, double *gbs) {
    static const struct { const char *has, *has2; double bf16, tf32, f32, gbs; } cards[] = {
        {"H100", "PCIe", 756, 378, 51, 2000},  /* H100 PCIe                       */
        {"H100", "", 989, 494, 67, 3350},      /* H100 SXM (80GB HBM3)            */
        {"H200", "", 989, 494, 67, 4800},      /* H200, GH200                     */
        {"A100", "", 312, 156, 19.5, 2039},    /* A100 SXM and PCIe (80GB)        */
    };
    const char *env = getenv("GPT2_PEAK_TFLOPS");
    double given = env && atof(env) > 0 ? atof(env) : 0;
    size_t i;
    if (gbs) *gbs = 0;
    for (i = 0; i < sizeof cards / sizeof cards[0]; i++)
        if (strstr(name, cards[i].has) && strstr(name, cards[i].has2)) {
            if (gbs) *gbs = cards[i].gbs;
            return given > 0 ? given : bf16 ? cards[i].bf16 : tf32 ? cards[i].tf32 : cards[i].f32;
        }
    return given;
}
/* TJ_CUDA_TF32=1: f32 dots may use TF32 tensor cores (tinyjax_cuda.cu) */
GPT2_UNUSED static int gpt2_tf32_on(void) {
    const char *e = getenv("TJ_CUDA_TF32");
    return e && *e && strcmp(e, "0") != 0;
}
/* The backend of CUDA device `device` and the card's name, or NULL after a
   message (no GPU, or a build without CUDA). */
GPT2_UNUSED static tj_backend *gpt2_gpu_open_at(int device, char *name, size_t nn) {
#ifdef GPT2_CUDA
    char err[256];
    struct cudaDeviceProp pr;
    tj_backend *b = tj_cuda_backend(device, err, sizeof err);
    if (!b) {
        fprintf(stderr, "gpt2_train: --cuda: GPU %d: %s\n", device, err);
        return NULL;
    }
    gpt2_cuda_dev = device;
    if (cudaGetDeviceProperties(&pr, device) == cudaSuccess)
        snprintf(name, nn, "%s (sm_%d%d, %.0f GB)", pr.name, pr.major, pr.minor, (double)pr.totalGlobalMem / 1e9);
    else snprintf(name, nn, "CUDA device %d", device);
    return b;
#else
    (void)device;
    (void)name;
    (void)nn;
    fprintf(stderr, "gpt2_train: --cuda: this gpt2_train was built without the CUDA backend (build.sh builds it with nvcc, linking "
                    "tinyjax_cuda.cu and cuBLAS, when nvcc is on PATH)\n");
    return NULL;
#endif
}
GPT2_UNUSED static tj_backend *gpt2_gpu_open(char *name, size_t nn) { return gpt2_gpu_open_at(0, name, nn); }
GPT2_UNUSED static void gpt2_gpu_close(tj_backend *b) {
#ifdef GPT2_CUDA
    tj_cuda_backend_free(b);
#else
    (void)b;
#endif
}

/* --------------------------------------------------------------- trainer */

typedef struct {
    gpt2_config cfg;
    char param_rules[512], compute_rules[512];
    tj_ctx *ctx;
    tj_tree *state;     /* params.*, m.*, v.* (and the step's other inputs) */
    tj_prog *init, *step, *eval, *logits;
    int64_t step_no;    /* steps taken                                   */
    int64_t data_pos;   /* micro-batches consumed (the data position)    */
    float last_gnorm;
    const char *auto_note; /* --remat auto: what it chose and why        */
    double auto_budget;    /* --remat auto: the budget, bytes per device */
    double auto_peak;      /* --remat auto: its first choice's planned peak */
    double init_ms, compile_ms; /* start-up: the init program (compile + run), the step and eval compiles */
} gpt2_trainer;

/* --remat auto's budget when --memory-budget is not given, bytes per
   device: on a GPU 80% of its memory; on the CPU half of this machine's
   memory, shared by the devices of this process */
static double gpt2_default_budget(tj_backend *backend, int devices) {
#ifdef GPT2_CUDA
    if (backend) {
        struct cudaDeviceProp pr;
        if (cudaGetDeviceProperties(&pr, gpt2_cuda_dev) == cudaSuccess) return 0.8 * (double)pr.totalGlobalMem / (devices > 0 ? devices : 1);
    }
#else
    (void)backend;
#endif
    {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        double mem = pages > 0 && psz > 0 ? (double)pages * (double)psz : 4e9;
        return 0.5 * mem / (devices > 0 ? devices : 1);
    }
}

static int gpt2_fail(gpt2_trainer *tr, const char *what) {
    fprintf(stderr, "gpt2: %s: %s\n", what, tj_error(tr->ctx));
    return 1;
}

/* place a (batch, pos) token array, or (micro, batch, pos) when K > 1, by
   the compute rules' batch/pos entries */
static int gpt2_set_tokens(gpt2_trainer *tr, tj_tree *t, const char *name, const int32_t *tok, int K, int B, int T) {
    tj_tree *tmp = tj_tree_new(tr->ctx);
    char shape[64];
    tj_array *a;
    if (K > 1) snprintf(shape, sizeof shape, "micro=%d batch=%d pos=%d", K, B, T);
    else snprintf(shape, sizeof shape, "batch=%d pos=%d", B, T);
    a = tj_array_new(tr->ctx, TJ_I32, shape, tok);
    if (!a) { tj_tree_free(tmp); return 1; }
    tj_tree_set_array(tmp, name, a);
    if (tr->cfg.compute_rules && tj_filter_shard(tmp, tr->cfg.compute_rules)) { tj_tree_free(tmp); return 1; }
    tj_tree_set_array(t, name, tj_tree_take(tmp, name));
    tj_tree_free(tmp);
    return 0;
}
static int gpt2_set_scalar(gpt2_trainer *tr, tj_tree *t, const char *name, double v) {
    float f = (float)v;
    tj_array *a = tj_array_new(tr->ctx, TJ_F32, "", &f);
    return !a || tj_tree_set_array(t, name, a);
}
/* the step number, an i32 scalar (wrapping past 2^31 - 1: the dropout
   fold's arithmetic wraps anyway) */
static int gpt2_set_step(gpt2_trainer *tr, tj_tree *t, int64_t step) {
    int32_t v = (int32_t)(uint32_t)(uint64_t)step;
    tj_array *a = tj_array_new(tr->ctx, TJ_I32, "", &v);
    return !a || tj_tree_set_array(t, "step", a);
}
/* a tree referring to the current params (for eval / sampling) */
static tj_tree *gpt2_param_refs(gpt2_trainer *tr) {
    tj_tree *t = tj_tree_new(tr->ctx);
    int i;
    for (i = 0; i < tj_tree_size(tr->state); i++) {
        const char *n = tj_tree_name(tr->state, i);
        if (!strncmp(n, "params.", 7)) tj_tree_set_array_ref(t, n, tj_tree_array_at(tr->state, i));
    }
    return t;
}

static double now_ms(void); /* below, with the timers */

/* Make the context, mesh, programs and the initial state. mesh NULL or ""
   for one device. backend NULL: the CPU (or TJ_BACKEND); else every array
   and run of the trainer lives there (tj_cuda_backend: --cuda), and the
   backend must outlive the trainer. With cfg->distributed, the context is
   one of several processes: through `transport` (the NCCL transport of
   --cuda in several processes; it too must outlive the trainer), or MPI
   when it is NULL. Returns 0 on success. */
static int gpt2_trainer_init_at(gpt2_trainer *tr, const gpt2_config *cfg, int devices, const char *mesh, int threads, tj_backend *backend,
                                tj_transport *transport) {
    tj_tree *empty, *out;
    tj_jit_opts donate;
    tj_distributed_opts dopts;
    int32_t *zeros;
    memset(tr, 0, sizeof *tr);
    memset(&dopts, 0, sizeof dopts);
    dopts.transport = transport;
    tr->cfg = *cfg;
    tr->ctx = tj_ctx_new();
    if (!tr->ctx) return 1;
    if (tj_status_of(tr->ctx)) return gpt2_fail(tr, "context"); /* e.g. a bad TJ_DEVICES */
    if (backend) tj_set_backend(tr->ctx, backend); /* before any array is made */
    if (cfg->distributed && tj_distributed_init(tr->ctx, &dopts)) return gpt2_fail(tr, "distributed init");
    if (tj_set_devices(tr->ctx, devices)) return gpt2_fail(tr, "devices");
    if (threads > 0) { /* per device; the library's count is the process's (its default: the cores) */
        int lo;
        tj_set_threads(tr->ctx, threads * tj_local_devices(tr->ctx, &lo));
    }
    if (devices > 1 && mesh && *mesh) {
        if (tj_set_mesh(tr->ctx, mesh)) return gpt2_fail(tr, "mesh");
        /* the library's logical rules skip mesh axes this mesh lacks, so
           one rule string serves every mesh */
        snprintf(tr->param_rules, sizeof tr->param_rules, "%s", cfg->param_rules ? cfg->param_rules : "");
        snprintf(tr->compute_rules, sizeof tr->compute_rules, "%s", cfg->compute_rules ? cfg->compute_rules : "");
        tr->cfg.param_rules = *tr->param_rules ? tr->param_rules : NULL;
        tr->cfg.compute_rules = *tr->compute_rules ? tr->compute_rules : NULL;
    } else {
        tr->cfg.param_rules = tr->cfg.compute_rules = NULL;
    }
    if (tr->cfg.C % tr->cfg.H) {
        fprintf(stderr, "gpt2: embed %d is not divisible by heads %d\n", tr->cfg.C, tr->cfg.H);
        return 1;
    }
    /* init */
    tr->init_ms = now_ms();
    empty = tj_tree_new(tr->ctx);
    tr->state = tj_tree_new(tr->ctx);
    tr->init = tj_jit(tr->ctx, "gpt2_init", gpt2_init_fn, &tr->cfg, empty, NULL);
    if (!tr->init || tj_run(tr->init, empty, tr->state)) { tj_tree_free(empty); return gpt2_fail(tr, "init"); }
    tj_tree_free(empty);
    /* run once: its temp arena (the size of the largest parameter) would
       otherwise stay allocated beside the step's, outside the step's plan */
    tj_prog_free(tr->init);
    tr->init = NULL;
    tr->init_ms = now_ms() - tr->init_ms;
    tr->compile_ms = now_ms();
    /* example inputs for the step */
    zeros = (int32_t *)calloc((size_t)tr->cfg.accum * (size_t)tr->cfg.B * (size_t)tr->cfg.T, sizeof(int32_t));
    if (!zeros) return 1;
    if (gpt2_set_tokens(tr, tr->state, "tokens", zeros, tr->cfg.accum, tr->cfg.B, tr->cfg.T) ||
        gpt2_set_tokens(tr, tr->state, "targets", zeros, tr->cfg.accum, tr->cfg.B, tr->cfg.T) ||
        gpt2_set_scalar(tr, tr->state, "lr", 0.0) || gpt2_set_scalar(tr, tr->state, "t", 1.0) ||
        (tr->cfg.dropout > 0 && gpt2_set_step(tr, tr->state, 0))) { /* the masks' step: an input only with dropout */
        free(zeros);
        return gpt2_fail(tr, "inputs");
    }
    donate.donate = "params. m. v.";
    if (tr->cfg.remat == REMAT_AUTO) { /* keep everything when the step fits the budget: no recompute */
        /* a GPU holds this process's devices; the CPU's memory is the machine's */
        int here = backend ? devices / tj_process_count(tr->ctx) : devices;
        double budget = tr->cfg.memory_budget > 0 ? tr->cfg.memory_budget : gpt2_default_budget(backend, here);
        /* with the collective matmul (simulated devices on the CPU) gathering
           again costs no copy, keeping the gathered weights does */
        int regather = tj_get_collective_matmul(tr->ctx);
        tr->cfg.remat = regather ? REMAT_REGATHER : REMAT_EVERYTHING;
        tr->step = tj_jit(tr->ctx, "gpt2_train_step", gpt2_step_fn, &tr->cfg, tr->state, &donate);
        if (tr->step) tr->auto_peak = (double)tj_prog_memory(tr->step).peak_bytes;
        if (tr->step && tr->auto_peak > budget) {
            tr->auto_note = regather ? "block_out: saving everything but the gathered weights needs more than the budget" : "block_out: saving everything needs more than the budget";
            tj_prog_free(tr->step);
            tr->cfg.remat = REMAT_BLOCK_OUT;
            tr->step = tj_jit(tr->ctx, "gpt2_train_step", gpt2_step_fn, &tr->cfg, tr->state, &donate);
        } else
            tr->auto_note = regather ? "regather: the step fits the budget; everything but the all-gathered weights, which the backward pass's dots read "
                                       "in place again (simulated devices)"
                                     : "everything: the step fits the budget";
        tr->auto_budget = budget;
    } else tr->step = tj_jit(tr->ctx, "gpt2_train_step", gpt2_step_fn, &tr->cfg, tr->state, &donate);
    if (!tr->step) { free(zeros); return gpt2_fail(tr, "jit train step"); }
    out = gpt2_param_refs(tr);
    gpt2_set_tokens(tr, out, "tokens", zeros, 1, tr->cfg.B, tr->cfg.T);
    gpt2_set_tokens(tr, out, "targets", zeros, 1, tr->cfg.B, tr->cfg.T);
    tr->eval = tj_jit(tr->ctx, "gpt2_eval", gpt2_eval_fn, &tr->cfg, out, NULL);
    tj_tree_free(out);
    free(zeros);
    if (!tr->eval) return gpt2_fail(tr, "jit eval");
    tr->compile_ms = now_ms() - tr->compile_ms;
    return 0;
}
static int gpt2_trainer_init_on(gpt2_trainer *tr, const gpt2_config *cfg, int devices, const char *mesh, int threads, tj_backend *backend) {
    return gpt2_trainer_init_at(tr, cfg, devices, mesh, threads, backend, NULL);
}
GPT2_UNUSED static int gpt2_trainer_init(gpt2_trainer *tr, const gpt2_config *cfg, int devices, const char *mesh, int threads) {
    return gpt2_trainer_init_on(tr, cfg, devices, mesh, threads, NULL);
}
/* the sampling program (batch 1), compiled on first use */
static int gpt2_ensure_logits(gpt2_trainer *tr) {
    tj_tree *ex;
    int32_t *z;
    if (tr->logits) return 0;
    ex = gpt2_param_refs(tr);
    z = (int32_t *)calloc((size_t)tr->cfg.T, sizeof(int32_t));
    gpt2_set_tokens(tr, ex, "tokens", z, 1, 1, tr->cfg.T);
    tr->logits = tj_jit(tr->ctx, "gpt2_logits", gpt2_logits_fn, &tr->cfg, ex, NULL);
    free(z);
    tj_tree_free(ex);
    return tr->logits ? 0 : gpt2_fail(tr, "jit logits");
}
static void gpt2_trainer_free(gpt2_trainer *tr) {
    tj_prog_free(tr->init);
    tj_prog_free(tr->step);
    tj_prog_free(tr->eval);
    tj_prog_free(tr->logits);
    tj_tree_free(tr->state);
    tj_ctx_free(tr->ctx);
    memset(tr, 0, sizeof *tr);
}

/* One step on a host batch: inputs and targets of K = accum micro-batches
   (K*B*T each, micro-batch-major). Returns the mean loss, or NAN on error. */
static float gpt2_train_step(gpt2_trainer *tr, const int32_t *x, const int32_t *y, double lr) {
    tj_tree *out = tj_tree_new(tr->ctx);
    float loss = NAN, gn = NAN;
    int i, K = tr->cfg.accum;
    if (gpt2_set_tokens(tr, tr->state, "tokens", x, K, tr->cfg.B, tr->cfg.T) || gpt2_set_tokens(tr, tr->state, "targets", y, K, tr->cfg.B, tr->cfg.T) ||
        gpt2_set_scalar(tr, tr->state, "lr", lr) || gpt2_set_scalar(tr, tr->state, "t", (double)(tr->step_no + 1)) ||
        (tr->cfg.dropout > 0 && gpt2_set_step(tr, tr->state, tr->step_no)) || tj_run(tr->step, tr->state, out)) {
        gpt2_fail(tr, "train step");
        tj_tree_free(out);
        return NAN;
    }
    tj_array_read(tj_tree_array(out, "loss"), TJ_F32, &loss);
    tj_array_read(tj_tree_array(out, "gnorm"), TJ_F32, &gn);
    tr->last_gnorm = gn;
    /* the new params, m, v replace the donated (now deleted) old ones */
    for (i = tj_tree_size(out) - 1; i >= 0; i--) {
        char n[128];
        snprintf(n, sizeof n, "%s", tj_tree_name(out, i));
        if (!strncmp(n, "params.", 7) || !strncmp(n, "m.", 2) || !strncmp(n, "v.", 2)) tj_tree_set_array(tr->state, n, tj_tree_take(out, n));
    }
    tj_tree_free(out);
    tr->step_no++;
    tr->data_pos += K;
    return loss;
}
static float gpt2_eval_loss(gpt2_trainer *tr, const int32_t *x, const int32_t *y) {
    tj_tree *in = gpt2_param_refs(tr), *out = tj_tree_new(tr->ctx);
    float loss = NAN;
    if (gpt2_set_tokens(tr, in, "tokens", x, 1, tr->cfg.B, tr->cfg.T) || gpt2_set_tokens(tr, in, "targets", y, 1, tr->cfg.B, tr->cfg.T) ||
        tj_run(tr->eval, in, out))
        gpt2_fail(tr, "eval");
    else tj_array_read(tj_tree_array(out, "loss"), TJ_F32, &loss);
    tj_tree_free(in);
    tj_tree_free(out);
    return loss;
}
/* logits of the last real position of a window of n <= T tokens */
static int gpt2_next_logits(gpt2_trainer *tr, const int32_t *window, int n, float *logits_row) {
    tj_tree *in, *out;
    int32_t *tok;
    float *all;
    int st = 1;
    if (gpt2_ensure_logits(tr)) return 1;
    tok = (int32_t *)calloc((size_t)tr->cfg.T, sizeof(int32_t));
    all = (float *)malloc(sizeof(float) * (size_t)tr->cfg.T * (size_t)tr->cfg.V);
    in = gpt2_param_refs(tr);
    out = tj_tree_new(tr->ctx);
    memcpy(tok, window, sizeof(int32_t) * (size_t)n);
    if (!gpt2_set_tokens(tr, in, "tokens", tok, 1, 1, tr->cfg.T) && !tj_run(tr->logits, in, out) &&
        !tj_array_read_all(tj_tree_array(out, "logits"), TJ_F32, all)) {
        memcpy(logits_row, all + (size_t)(n - 1) * (size_t)tr->cfg.V, sizeof(float) * (size_t)tr->cfg.V);
        st = 0;
    } else gpt2_fail(tr, "sample");
    free(tok);
    free(all);
    tj_tree_free(in);
    tj_tree_free(out);
    return st;
}


static int is_state_leaf(const char *n) { return !strncmp(n, "params.", 7) || !strncmp(n, "m.", 2) || !strncmp(n, "v.", 2); }

/* Checkpoint: params, m, v, the step and the data position (micro-batches
   are counter-based on it), via tj_tree_save (safetensors, written
   atomically). Returns the status; TJ_ERR_UNSUPPORTED when the
   library has no safetensors support. */
static tj_status gpt2_save(gpt2_trainer *tr, const char *path) {
    tj_tree *ck = tj_tree_new(tr->ctx);
    tj_status st;
    int k;
    for (k = 0; k < tj_tree_size(tr->state); k++) {
        const char *n = tj_tree_name(tr->state, k);
        if (is_state_leaf(n)) tj_tree_set_array_ref(ck, n, tj_tree_array_at(tr->state, k));
    }
    tj_tree_set_int(ck, "step", tr->step_no);
    tj_tree_set_int(ck, "data_pos", tr->data_pos);
    st = tj_tree_save(ck, path);
    tj_tree_free(ck);
    return st;
}
/* Load a checkpoint into the trainer's state. The state's arrays are the
   load's targets: each leaf comes back with its leaf's sharding, every
   device reading only its block (never a replicated copy first), on any
   mesh and process count. Every leaf must be present with the same shape;
   on any error nothing changes. */
static tj_status gpt2_resume(gpt2_trainer *tr, const char *path) {
    tj_tree *ck = tj_tree_new(tr->ctx);
    tj_status st = TJ_OK;
    int k;
    for (k = 0; !st && k < tj_tree_size(tr->state); k++)
        if (is_state_leaf(tj_tree_name(tr->state, k))) st = tj_tree_set_array_ref(ck, tj_tree_name(tr->state, k), tj_tree_array_at(tr->state, k));
    if (!st) st = tj_tree_load(ck, path);
    for (k = 0; !st && k < tj_tree_size(tr->state); k++) {
        const char *n = tj_tree_name(tr->state, k);
        tj_array *old = tj_tree_array_at(tr->state, k), *nw;
        char b1[256], b2[256];
        if (!is_state_leaf(n)) continue;
        nw = tj_tree_array(ck, n);
        if (nw == old) nw = NULL; /* the target itself: the file lacks it */
        tj_array_describe(old, b1, sizeof b1); /* both described before use: "want %s" below */
        tj_array_describe(nw, b2, sizeof b2);
        if (!nw || strcmp(b1, b2)) {
            tj_clear_error(tr->ctx);
            fprintf(stderr, "gpt2: resume: %s: leaf %s is %s, want %s\n", path, n, nw ? b2 : "missing", b1);
            st = TJ_ERR_IO;
        }
    }
    if (!st && tj_tree_find(ck, "step") < 0) {
        fprintf(stderr, "gpt2: resume: %s has no step\n", path);
        st = TJ_ERR_IO;
    }
    if (!st) {
        for (k = 0; k < tj_tree_size(tr->state); k++) {
            char n[128];
            snprintf(n, sizeof n, "%s", tj_tree_name(tr->state, k));
            if (is_state_leaf(n)) tj_tree_set_array(tr->state, n, tj_tree_take(ck, n));
        }
        tr->step_no = tj_tree_int(ck, "step");
        /* checkpoints from before --accum took one micro-batch per step */
        tr->data_pos = tj_tree_find(ck, "data_pos") >= 0 ? tj_tree_int(ck, "data_pos") : tr->step_no;
    }
    tj_tree_free(ck);
    return st;
}

/* ------------------------------------------- Hugging Face GPT-2 weights */

/* A Hugging Face GPT-2 safetensors file (model.safetensors of "gpt2",
   "gpt2-medium", ..): tensors wte.weight (vocab, embed), wpe.weight (pos,
   embed), h.{i}.ln_1.{weight,bias}, h.{i}.attn.c_attn.{weight,bias},
   h.{i}.attn.c_proj.{weight,bias}, h.{i}.ln_2.{weight,bias},
   h.{i}.mlp.c_fc.{weight,bias}, h.{i}.mlp.c_proj.{weight,bias},
   ln_f.{weight,bias}, all optionally under "transformer.". The linear
   layers are Conv1D: weight (in, out), y = x . W + b. Stored F32, F16, BF16
   or F64; converted to f32. lm_head.weight, when present, must equal wte
   (the head is tied; an untied head is an error, not silently replaced);
   the h.{i}.attn.bias / masked_bias buffers of older files are ignored.

   The sizes come from the tensors. config.json beside the file (or in the
   directory given instead of the file, which then holds model.safetensors)
   gives the heads, the layer norm epsilon and the activation, and must
   agree with the tensors; without it the heads come from the caller
   (--heads) or embed / 64. */
typedef struct {
    tj_ctx *ctx;        /* for the parse (its errors)                     */
    tj_safetensors *st;
    char path[512];
    const char *prefix; /* "" or "transformer."                           */
    int L, C, V, P, M;  /* layers, embed, vocab, positions, mlp           */
    char config[600];   /* config.json read ("" if there was none)        */
    int H;              /* heads from config.json; 0 without one          */
    double ln_eps;      /* layer norm epsilon (1e-5 without config.json)  */
    int act;            /* ACT_*                                          */
} gpt2_hf;

static int hf_fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && n) vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return 1;
}
static void gpt2_hf_close(gpt2_hf *hf) {
    if (hf->st) tj_st_free(hf->st);
    if (hf->ctx) tj_ctx_free(hf->ctx);
    memset(hf, 0, sizeof *hf);
}
static int hf_is_float(tj_st_dtype d) { return d == TJ_ST_F32 || d == TJ_ST_F16 || d == TJ_ST_BF16 || d == TJ_ST_F64; }
/* tensor prefix+name as f32 into out, after checking its dtype and shape
   (rank 1: d0; rank 2: d0 x d1) */
static int hf_tensor(const gpt2_hf *hf, const char *name, int rank, int64_t d0, int64_t d1, float *out, char *err, size_t n) {
    char full[160], have[64], want[64];
    const tj_st_tensor *t;
    int k;
    snprintf(full, sizeof full, "%s%s", hf->prefix, name);
    if (!(t = tj_st_find(hf->st, full))) return hf_fail(err, n, "%s: tensor '%s' is missing (not a complete Hugging Face GPT-2 file?)", hf->path, full);
    if (!hf_is_float(t->dtype)) return hf_fail(err, n, "%s: tensor '%s' has dtype %s, want F32, F16, BF16 or F64", hf->path, full, tj_st_dtype_name(t->dtype));
    have[0] = 0;
    for (k = 0; k < t->rank && k < 4; k++) snprintf(have + strlen(have), sizeof have - strlen(have), k ? ",%lld" : "%lld", (long long)t->shape[k]);
    if (rank == 1) snprintf(want, sizeof want, "%lld", (long long)d0);
    else snprintf(want, sizeof want, "%lld,%lld", (long long)d0, (long long)d1);
    if (t->rank != rank || t->shape[0] != d0 || (rank == 2 && t->shape[1] != d1))
        return hf_fail(err, n, "%s: tensor '%s' has shape [%s], want [%s]", hf->path, full, have, want);
    if (out && tj_st_to_f32(t, out)) return hf_fail(err, n, "%s: tensor '%s': cannot convert to f32", hf->path, full);
    return 0;
}
static int gpt2_hf_read_config(gpt2_hf *hf, char *err, size_t n);
static int gpt2_hf_check_head(const gpt2_hf *hf, char *err, size_t n);
static int is_dir(const char *p) {
    struct stat sb;
    return p && stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}
/* Parse the file (or DIR/model.safetensors), infer the sizes, read
   config.json beside it when there is one. Returns 0, or 1 and a message
   naming the file in err. */
static int gpt2_hf_open(gpt2_hf *hf, const char *path, char *err, size_t n) {
    const tj_st_tensor *wte, *wpe;
    int i, maxl = -1;
    memset(hf, 0, sizeof *hf);
    hf->ln_eps = 1e-5;
    if (is_dir(path)) {
        size_t pl = strlen(path);
        snprintf(hf->path, sizeof hf->path, "%.480s%smodel.safetensors", path, pl && path[pl - 1] == '/' ? "" : "/");
        path = hf->path;
    } else snprintf(hf->path, sizeof hf->path, "%s", path ? path : "(null)");
    if (!(hf->ctx = tj_ctx_new())) return hf_fail(err, n, "%s: out of memory", hf->path);
    if (!(hf->st = tj_st_load(hf->ctx, path))) {
        hf_fail(err, n, "cannot read Hugging Face GPT-2 weights from %s: %s", hf->path, tj_error(hf->ctx));
        gpt2_hf_close(hf);
        return 1;
    }
    hf->prefix = tj_st_find(hf->st, "transformer.wte.weight") ? "transformer." : "";
    if (!(wte = tj_st_find(hf->st, *hf->prefix ? "transformer.wte.weight" : "wte.weight"))) {
        hf_fail(err, n, "%s: no tensor 'wte.weight' or 'transformer.wte.weight': not a Hugging Face GPT-2 file", hf->path);
        gpt2_hf_close(hf);
        return 1;
    }
    if (wte->rank != 2 || wte->shape[0] < 1 || wte->shape[1] < 1 || wte->shape[0] > (1 << 24) || wte->shape[1] > (1 << 16)) {
        hf_fail(err, n, "%s: tensor '%swte.weight' has rank %d / bad sizes, want (vocab, embed)", hf->path, hf->prefix, wte->rank);
        gpt2_hf_close(hf);
        return 1;
    }
    hf->V = (int)wte->shape[0];
    hf->C = (int)wte->shape[1];
    {
        char nm[64];
        snprintf(nm, sizeof nm, "%swpe.weight", hf->prefix);
        wpe = tj_st_find(hf->st, nm);
        if (!wpe || wpe->rank != 2 || wpe->shape[1] != hf->C || wpe->shape[0] < 2 || wpe->shape[0] > (1 << 20)) {
            hf_fail(err, n, "%s: tensor '%s' is %s, want (positions, %d)", hf->path, nm, wpe ? "of another shape" : "missing", hf->C);
            gpt2_hf_close(hf);
            return 1;
        }
        hf->P = (int)wpe->shape[0];
    }
    /* layers: the largest i of any "h.{i}." tensor, plus one (a gap is a
       missing-tensor error when loading) */
    for (i = 0; i < tj_st_count(hf->st); i++) {
        const char *s = tj_st_at(hf->st, i)->name;
        size_t pl = strlen(hf->prefix);
        if (!strncmp(s, hf->prefix, pl) && !strncmp(s + pl, "h.", 2) && s[pl + 2] >= '0' && s[pl + 2] <= '9') {
            long v = strtol(s + pl + 2, NULL, 10);
            if (v > 4096) {
                hf_fail(err, n, "%s: tensor '%s': layer index %ld is too large", hf->path, s, v);
                gpt2_hf_close(hf);
                return 1;
            }
            if (v > maxl) maxl = (int)v;
        }
    }
    hf->L = maxl + 1;
    if (hf->L < 1) {
        hf_fail(err, n, "%s: no transformer blocks (no tensor '%sh.0.ln_1.weight')", hf->path, hf->prefix);
        gpt2_hf_close(hf);
        return 1;
    }
    {
        char nm[96];
        const tj_st_tensor *fc;
        snprintf(nm, sizeof nm, "%sh.0.mlp.c_fc.weight", hf->prefix);
        fc = tj_st_find(hf->st, nm);
        if (!fc || fc->rank != 2 || fc->shape[0] != hf->C || fc->shape[1] < 1 || fc->shape[1] > (1 << 20)) {
            hf_fail(err, n, "%s: tensor '%s' is %s, want (%d, mlp)", hf->path, nm, fc ? "of another shape" : "missing", hf->C);
            gpt2_hf_close(hf);
            return 1;
        }
        hf->M = (int)fc->shape[1];
    }
    if (gpt2_hf_read_config(hf, err, n) || gpt2_hf_check_head(hf, err, n)) {
        gpt2_hf_close(hf);
        return 1;
    }
    return 0;
}
/* config.json beside hf->path: absent is fine; present, it must describe
   a GPT-2 this demo computes exactly and agree with the tensors */
static int gpt2_hf_read_config(gpt2_hf *hf, char *err, size_t n) {
    gio_gpt2_config cf;
    const char *slash = strrchr(hf->path, '/'), *act;
    char cpath[600];
    FILE *f;
    int inner;
    if (slash) snprintf(cpath, sizeof cpath, "%.*s/config.json", (int)(slash - hf->path), hf->path);
    else snprintf(cpath, sizeof cpath, "config.json");
    if (!(f = fopen(cpath, "rb"))) return 0;
    fclose(f);
    if (gio_gpt2_config_read(cpath, &cf, err, n)) return 1;
    snprintf(hf->config, sizeof hf->config, "%s", cpath);
#define DISAGREE(what, cv, tv, unit, src) \
    if ((cv) >= 0 && (cv) != (tv)) return hf_fail(err, n, "%s: %s is %d, but %s has %d %s (%s)", cpath, what, (int)(cv), hf->path, (int)(tv), unit, src)
    DISAGREE("n_layer", cf.n_layer, hf->L, "layers", "h.N.* tensors");
    DISAGREE("n_embd", cf.n_embd, hf->C, "channels", "wte.weight columns");
    DISAGREE("vocab_size", cf.vocab_size, hf->V, "tokens", "wte.weight rows");
    DISAGREE("n_positions", cf.n_positions, hf->P, "positions", "wpe.weight rows");
    inner = cf.n_inner >= 0 ? cf.n_inner : 4 * hf->C;
    DISAGREE(cf.n_inner >= 0 ? "n_inner" : "4 * n_embd (n_inner null)", inner, hf->M, "MLP channels", "h.0.mlp.c_fc.weight columns");
#undef DISAGREE
    if (cf.model_type[0] && strcmp(cf.model_type, "gpt2"))
        return hf_fail(err, n, "%s: model_type \"%s\" is not \"gpt2\"", cpath, cf.model_type);
    if (cf.n_head == 0 || (cf.n_head > 0 && hf->C % cf.n_head))
        return hf_fail(err, n, "%s: n_head %d does not divide n_embd %d", cpath, cf.n_head, hf->C);
    hf->H = cf.n_head > 0 ? cf.n_head : 0;
    if (cf.layer_norm_epsilon >= 0) {
        if (!(cf.layer_norm_epsilon > 0)) return hf_fail(err, n, "%s: layer_norm_epsilon 0 is not supported (want > 0)", cpath);
        hf->ln_eps = cf.layer_norm_epsilon;
    }
    act = cf.activation_function[0] ? cf.activation_function : "gelu_new";
    if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_fast")) hf->act = ACT_GELU;
    else if (!strcmp(act, "relu")) hf->act = ACT_RELU;
    else
        return hf_fail(err, n, "%s: activation_function \"%s\" is not supported (tinyjax's GPT-2 has gelu_new, gelu_pytorch_tanh and gelu_fast, "
                               "all the tanh approximation, and relu)", cpath, act);
    if (cf.scale_attn_weights == 0) return hf_fail(err, n, "%s: scale_attn_weights false is not supported (attention scores are scaled by 1/sqrt(head_dim))", cpath);
    if (cf.scale_attn_by_inverse_layer_idx == 1) return hf_fail(err, n, "%s: scale_attn_by_inverse_layer_idx true is not supported", cpath);
    if (cf.add_cross_attention == 1) return hf_fail(err, n, "%s: add_cross_attention true is not supported (a decoder-only GPT-2 has none)", cpath);
    if (cf.tie_word_embeddings == 0)
        return hf_fail(err, n, "%s: tie_word_embeddings false (an untied lm_head) is not supported: tinyjax's GPT-2 ties the head to wte", cpath);
    return 0;
}
/* lm_head.weight, when the file has one, must be wte itself (saved twice):
   an untied head is refused, never silently replaced by wte */
static int gpt2_hf_check_head(const gpt2_hf *hf, char *err, size_t n) {
    const tj_st_tensor *h = tj_st_find(hf->st, "lm_head.weight"), *w;
    char wn[64];
    float *a, *b;
    int same;
    if (!h) return 0;
    snprintf(wn, sizeof wn, "%swte.weight", hf->prefix);
    w = tj_st_find(hf->st, wn);
    if (!w || h->rank != 2 || h->shape[0] != w->shape[0] || h->shape[1] != w->shape[1])
        return hf_fail(err, n, "%s: lm_head.weight has another shape than %s: an untied head is not supported (tinyjax's GPT-2 ties the head to wte)", hf->path,
                       wn);
    if (!hf_is_float(h->dtype)) return hf_fail(err, n, "%s: tensor 'lm_head.weight' has dtype %s", hf->path, tj_st_dtype_name(h->dtype));
    a = (float *)malloc(sizeof(float) * (size_t)h->numel);
    b = (float *)malloc(sizeof(float) * (size_t)w->numel);
    same = a && b && !tj_st_to_f32(h, a) && !tj_st_to_f32(w, b) && !memcmp(a, b, sizeof(float) * (size_t)h->numel);
    free(a);
    free(b);
    if (!same)
        return hf_fail(err, n, "%s: lm_head.weight differs from %s: an untied head is not supported (tinyjax's GPT-2 ties the head to wte)", hf->path, wn);
    return 0;
}
/* The model config of the file: layers, embed, mlp, vocab (padded as the
   demo pads: 256, else a multiple of 64), position table; heads as given,
   or embed / 64 (GPT-2's head size: 12 heads for 768 channels) when 0.
   The training context T is clipped to the position table. */
static int gpt2_hf_config(const gpt2_hf *hf, gpt2_config *c, int heads, char *err, size_t n) {
    if (hf->H > 0) {
        if (heads > 0 && heads != hf->H) return hf_fail(err, n, "%s: n_head is %d, --heads says %d", hf->config, hf->H, heads);
        heads = hf->H;
    }
    if (heads <= 0) {
        if (hf->C % 64) return hf_fail(err, n, "%s: embed %d is not a multiple of 64: give the number of heads (--heads)", hf->path, hf->C);
        heads = hf->C / 64;
    }
    if (hf->C % heads) return hf_fail(err, n, "%s: embed %d is not divisible by %d heads", hf->path, hf->C, heads);
    c->L = hf->L; c->C = hf->C; c->H = heads; c->M = hf->M;
    c->V_real = hf->V;
    c->V = hf->V <= 256 ? 256 : (hf->V + 63) / 64 * 64;
    c->block = hf->P;
    if (c->T > hf->P) c->T = hf->P;
    c->ln_eps = hf->ln_eps;
    c->act = hf->act;
    return 0;
}
/* Replace the trainer's parameters by the file's, placed by the param rules.
   The trainer's config must be the file's (gpt2_hf_config). Everything or
   nothing: on an error the parameters are unchanged. Optimizer state and
   step are left as they are (zero for a fresh trainer). */
static int gpt2_hf_load(gpt2_trainer *tr, const gpt2_hf *hf, char *err, size_t n) {
    const gpt2_config *c = &tr->cfg;
    tj_tree *nt;
    int i, l, k, C = c->C, M = c->M, bad = 0;
    char nm[96], shape[256], pn[128];
    if (c->L != hf->L || c->C != hf->C || c->M != hf->M || c->V < hf->V || c->block != hf->P || c->H < 1 || C % c->H ||
        (hf->H > 0 && c->H != hf->H) || c->act != hf->act || (c->ln_eps > 0 ? c->ln_eps : 1e-5) != hf->ln_eps)
        return hf_fail(err, n, "%s: the file's GPT-2 (layers %d, embed %d, mlp %d, vocab %d, positions %d) does not fit the model (layers %d, embed %d, mlp %d, vocab %d, positions %d)",
                       hf->path, hf->L, hf->C, hf->M, hf->V, hf->P, c->L, c->C, c->M, c->V, c->block);
    nt = tj_tree_new(tr->ctx);
    if (!nt) return hf_fail(err, n, "out of memory");
    for (i = 0; i < NPARAMS && !bad; i++) {
        int64_t numel = param_numel(c, i);
        float *b = (float *)calloc((size_t)numel, sizeof(float));
        tj_array *a;
        if (!b) { bad = hf_fail(err, n, "%s: out of memory for %s", hf->path, gpt2_params[i].name); break; }
        /* Conv1D weights (in, out) are already (embed, qkv heads head_dim),
           (heads head_dim, embed), (embed, mlp), (mlp, embed) row-major: the
           c_attn output index is qkv * C + head * D + d, as GPT-2 splits it */
        for (l = 0; l < (i < NBLOCKP ? c->L : 1) && !bad; l++) {
#define HF(suffix, rank, d0, d1, dst) (snprintf(nm, sizeof nm, "h.%d.%s", l, suffix), hf_tensor(hf, nm, rank, d0, d1, dst, err, n))
            switch (i) {
            case P_LN:
                bad = HF("ln_1.weight", 1, C, 0, b + ((size_t)l * 4 + 0) * C) || HF("ln_1.bias", 1, C, 0, b + ((size_t)l * 4 + 1) * C) ||
                      HF("ln_2.weight", 1, C, 0, b + ((size_t)l * 4 + 2) * C) || HF("ln_2.bias", 1, C, 0, b + ((size_t)l * 4 + 3) * C);
                break;
            case P_WQKV: bad = HF("attn.c_attn.weight", 2, C, 3 * C, b + (size_t)l * C * 3 * C); break;
            case P_BQKV: bad = HF("attn.c_attn.bias", 1, 3 * C, 0, b + (size_t)l * 3 * C); break;
            case P_WO: bad = HF("attn.c_proj.weight", 2, C, C, b + (size_t)l * C * C); break;
            case P_BO: bad = HF("attn.c_proj.bias", 1, C, 0, b + (size_t)l * C); break;
            case P_WFC: bad = HF("mlp.c_fc.weight", 2, C, M, b + (size_t)l * C * M); break;
            case P_BFC: bad = HF("mlp.c_fc.bias", 1, M, 0, b + (size_t)l * M); break;
            case P_WPROJ: bad = HF("mlp.c_proj.weight", 2, M, C, b + (size_t)l * M * C); break;
            case P_BPROJ: bad = HF("mlp.c_proj.bias", 1, C, 0, b + (size_t)l * C); break;
            default: {
                const char *s = gpt2_params[i].name;
                /* wte: the padded rows stay zero (the demo samples only real tokens) */
                if (!strcmp(s, "wte")) bad = hf_tensor(hf, "wte.weight", 2, hf->V, C, b, err, n);
                else if (!strcmp(s, "wpe")) bad = hf_tensor(hf, "wpe.weight", 2, hf->P, C, b, err, n);
                else if (!strcmp(s, "lnf_g")) bad = hf_tensor(hf, "ln_f.weight", 1, C, 0, b, err, n);
                else if (!strcmp(s, "lnf_b")) bad = hf_tensor(hf, "ln_f.bias", 1, C, 0, b, err, n);
                else bad = hf_fail(err, n, "internal: no Hugging Face tensor for parameter %s", s);
            }
            }
#undef HF
        }
        for (k = 0; !bad && k < numel; k++)
            if (!isfinite(b[k])) bad = hf_fail(err, n, "%s: parameter %s has a non-finite value (element %lld)", hf->path, gpt2_params[i].name, (long long)k);
        if (!bad) {
            snprintf(pn, sizeof pn, "params.%s", gpt2_params[i].name);
            a = tj_array_new(tr->ctx, TJ_F32, param_shape(c, i, shape, sizeof shape), b);
            if (!a || tj_tree_set_array(nt, pn, a)) bad = hf_fail(err, n, "%s: %s: %s", hf->path, gpt2_params[i].name, tj_error(tr->ctx));
        }
        free(b);
    }
    if (!bad && c->param_rules && tj_filter_shard(nt, c->param_rules)) bad = hf_fail(err, n, "%s: placing the parameters: %s", hf->path, tj_error(tr->ctx));
    for (i = 0; i < NPARAMS && !bad; i++) { /* same shapes and placement as the trainer's own */
        char b1[256], b2[256];
        tj_array *old, *nw;
        snprintf(pn, sizeof pn, "params.%s", gpt2_params[i].name);
        old = tj_tree_array(tr->state, pn);
        nw = tj_tree_array(nt, pn);
        if (!old || !nw || strcmp(tj_array_describe(old, b1, sizeof b1), tj_array_describe(nw, b2, sizeof b2)))
            bad = hf_fail(err, n, "%s: internal: parameter %s is %s, want %s", hf->path, pn, nw ? b2 : "missing", old ? b1 : "missing");
    }
    if (!bad)
        for (i = 0; i < NPARAMS; i++) {
            snprintf(pn, sizeof pn, "params.%s", gpt2_params[i].name);
            tj_tree_set_array(tr->state, pn, tj_tree_take(nt, pn));
        }
    tj_tree_free(nt);
    if (bad) tj_clear_error(tr->ctx);
    return bad;
}
/* open + load + close; the trainer's config must already be the file's */
GPT2_UNUSED static int gpt2_init_from(gpt2_trainer *tr, const char *path, char *err, size_t n) {
    gpt2_hf hf;
    int st;
    if (gpt2_hf_open(&hf, path, err, n)) return 1;
    st = gpt2_hf_load(tr, &hf, err, n);
    gpt2_hf_close(&hf);
    return st;
}

/* Export the trainer's parameters as a Hugging Face GPT-2 directory: dir/
   model.safetensors (names wte.weight, wpe.weight, h.{i}.ln_1.weight, ..,
   ln_f.bias; Conv1D (in, out) weights; the tied head is wte, so no
   lm_head.weight; F32; wte cut to the real vocabulary) and dir/config.json,
   what transformers.GPT2LMHeadModel.from_pretrained(dir) loads. eos_id is
   the tokenizer's <|endoftext|> (written as bos and eos), or -1 for none.
   The directory is made if missing; each file is written atomically
   (temporary file, fsync, rename). Returns 0, or 1 and a message. */
static int param_index(const char *name) {
    int i;
    for (i = 0; i < NPARAMS; i++) if (!strcmp(gpt2_params[i].name, name)) return i;
    return -1;
}
GPT2_UNUSED static int gpt2_export_hf(gpt2_trainer *tr, const char *dir, int eos_id, char *err, size_t n) {
    const gpt2_config *c = &tr->cfg;
    float *host[NPARAMS];
    tj_st_entry *e = NULL;
    int64_t *shapes = NULL;
    char (*names)[64] = NULL, path[1100];
    int i, l, k = 0, ne = 16 * c->L + 8, bad = 0, C = c->C, M = c->M;
    gio_gpt2_config hc;
    const char *meta[2] = {"format", "pt"};
    struct stat sb;
    memset(host, 0, sizeof host);
    if (!dir || !*dir) return hf_fail(err, n, "--export-hf: empty directory name");
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) return hf_fail(err, n, "--export-hf %s: exists and is not a directory", dir);
    } else if (mkdir(dir, 0755) != 0) return hf_fail(err, n, "--export-hf %s: cannot create the directory: %s", dir, strerror(errno));
    for (i = 0; i < NPARAMS && !bad; i++) {
        char pn[128];
        tj_array *a;
        snprintf(pn, sizeof pn, "params.%s", gpt2_params[i].name);
        a = tj_tree_array(tr->state, pn);
        host[i] = (float *)malloc(sizeof(float) * (size_t)param_numel(c, i));
        if (!a || !host[i] || tj_array_read(a, TJ_F32, host[i])) bad = hf_fail(err, n, "--export-hf: reading %s: %s", pn, a ? tj_error(tr->ctx) : "missing");
    }
    e = (tj_st_entry *)calloc((size_t)ne, sizeof *e);
    shapes = (int64_t *)calloc((size_t)ne * 2, sizeof *shapes);
    names = (char (*)[64])calloc((size_t)ne, sizeof *names);
    if (!bad && (!e || !shapes || !names)) bad = hf_fail(err, n, "--export-hf: out of memory");
#define ADD(nm_fmt, layer, src, rank_, d0, d1) do {                                     \
        snprintf(names[k], sizeof names[k], nm_fmt, layer);                              \
        e[k].name = names[k]; e[k].dtype = TJ_ST_F32; e[k].rank = (rank_);                \
        shapes[2 * k] = (d0); shapes[2 * k + 1] = (d1); e[k].shape = shapes + 2 * k;      \
        e[k].data = (src); k++;                                                          \
    } while (0)
    if (!bad) {
        ADD("%s", "wte.weight", host[param_index("wte")], 2, (int64_t)c->V_real, (int64_t)C); /* the first V_real rows */
        ADD("%s", "wpe.weight", host[param_index("wpe")], 2, (int64_t)c->block, (int64_t)C);
        for (l = 0; l < c->L; l++) {
            size_t L_ = (size_t)l;
            ADD("h.%d.ln_1.weight", l, host[P_LN] + (L_ * 4 + 0) * C, 1, C, 0);
            ADD("h.%d.ln_1.bias", l, host[P_LN] + (L_ * 4 + 1) * C, 1, C, 0);
            ADD("h.%d.attn.c_attn.weight", l, host[P_WQKV] + L_ * C * 3 * C, 2, C, 3 * C);
            ADD("h.%d.attn.c_attn.bias", l, host[P_BQKV] + L_ * 3 * C, 1, 3 * C, 0);
            ADD("h.%d.attn.c_proj.weight", l, host[P_WO] + L_ * C * C, 2, C, C);
            ADD("h.%d.attn.c_proj.bias", l, host[P_BO] + L_ * C, 1, C, 0);
            ADD("h.%d.ln_2.weight", l, host[P_LN] + (L_ * 4 + 2) * C, 1, C, 0);
            ADD("h.%d.ln_2.bias", l, host[P_LN] + (L_ * 4 + 3) * C, 1, C, 0);
            ADD("h.%d.mlp.c_fc.weight", l, host[P_WFC] + L_ * C * M, 2, C, M);
            ADD("h.%d.mlp.c_fc.bias", l, host[P_BFC] + L_ * M, 1, M, 0);
            ADD("h.%d.mlp.c_proj.weight", l, host[P_WPROJ] + L_ * M * C, 2, M, C);
            ADD("h.%d.mlp.c_proj.bias", l, host[P_BPROJ] + L_ * C, 1, C, 0);
        }
        ADD("%s", "ln_f.weight", host[param_index("lnf_g")], 1, C, 0);
        ADD("%s", "ln_f.bias", host[param_index("lnf_b")], 1, C, 0);
    }
#undef ADD
    if (!bad) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (tj_st_save(tr->ctx, path, e, k, meta, 1)) {
            bad = hf_fail(err, n, "--export-hf: %s", tj_error(tr->ctx));
            tj_clear_error(tr->ctx);
        }
    }
    if (!bad) {
        gio_gpt2_config_init(&hc);
        hc.n_layer = c->L; hc.n_head = c->H; hc.n_embd = C; hc.n_positions = c->block; hc.vocab_size = c->V_real;
        hc.n_inner = M == 4 * C ? -2 : M;
        hc.layer_norm_epsilon = c->ln_eps > 0 ? c->ln_eps : 1e-5;
        hc.resid_pdrop = hc.embd_pdrop = c->dropout; /* (--dropout; the fused attention drops no probabilities) */
        hc.attn_pdrop = c->attn_composed ? c->dropout : 0;
        snprintf(hc.activation_function, sizeof hc.activation_function, "%s", c->act == ACT_RELU ? "relu" : "gelu_new");
        hc.tie_word_embeddings = 1;
        hc.bos_token_id = hc.eos_token_id = eos_id >= 0 && eos_id < c->V_real ? eos_id : -2;
        snprintf(path, sizeof path, "%s/config.json", dir);
        bad = gio_gpt2_config_write(path, &hc, err, n);
    }
    for (i = 0; i < NPARAMS; i++) free(host[i]);
    free(e);
    free(shapes);
    free(names);
    return bad;
}

/* ------------------------------------------------------------ utilities */

GPT2_UNUSED static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
/* batch number `k` of a stream: B windows of T+1 tokens at counter-based
   random offsets (same batch for the same seed, stream and k) */
static void get_batch(const int32_t *data, size_t n, int B, int T, uint64_t seed, uint64_t stream, uint64_t k, int32_t *x, int32_t *y) {
    int b;
    for (b = 0; b < B; b++) {
        uint64_t r = mix64(seed ^ mix64(stream * 0x100000001b3ull ^ mix64(k * (uint64_t)B + (uint64_t)b)));
        size_t off = (size_t)(r % (uint64_t)(n - (size_t)T - 1));
        int t;
        for (t = 0; t < T; t++) {
            x[b * T + t] = data[off + (size_t)t];
            y[b * T + t] = data[off + (size_t)t + 1];
        }
    }
}
/* The inputs and targets of the trainer's next step: its accum micro-batches
   (batch numbers data_pos, data_pos + 1, .. of B sequences), micro-batch-
   major. They are the same windows as batch number data_pos / K of K*B
   sequences, so --accum K --batch B sees the data --batch K*B sees. */
static void gpt2_next_batch(const gpt2_trainer *tr, const int32_t *data, size_t n, uint64_t seed, int32_t *x, int32_t *y) {
    int j, BT = tr->cfg.B * tr->cfg.T;
    for (j = 0; j < tr->cfg.accum; j++)
        get_batch(data, n, tr->cfg.B, tr->cfg.T, seed, 1, (uint64_t)(tr->data_pos + j), x + (size_t)j * BT, y + (size_t)j * BT);
}
/* learning rate: linear warmup, then cosine decay to lr * min_frac */
static double lr_at(int64_t step, int64_t total, int64_t warmup, double lr, double min_frac) {
    double p;
    if (step < warmup) return lr * (double)(step + 1) / (double)warmup;
    if (total <= warmup) return lr;
    p = (double)(step - warmup) / (double)(total - warmup);
    if (p > 1) p = 1;
    return lr * (min_frac + (1 - min_frac) * 0.5 * (1 + cos(3.14159265358979323846 * p)));
}
GPT2_UNUSED static double unigram_entropy(const int32_t *d, size_t n, int V) {
    double *cnt = (double *)calloc((size_t)V, sizeof(double)), h = 0;
    size_t i;
    int v;
    if (!cnt || !n) { free(cnt); return 0; }
    for (i = 0; i < n; i++) if (d[i] >= 0 && d[i] < V) cnt[d[i]] += 1;
    for (v = 0; v < V; v++) if (cnt[v] > 0) h -= cnt[v] / (double)n * log(cnt[v] / (double)n);
    free(cnt);
    return h;
}

/* the devices of a mesh "data=4 model=2": the product of its sizes (0 for
   a size that is not a whole number from 1 to TJ_MAXDEV, or a product over
   TJ_MAXDEV: tj_set_mesh then says what is wrong) */
GPT2_UNUSED static int mesh_size(const char *m) {
    long n = 1;
    while ((m = strchr(m, '='))) {
        char *e;
        long k = strtol(++m, &e, 10);
        if (e == m || k < 1 || k > TJ_MAXDEV || n * k > TJ_MAXDEV) return 0;
        n *= k;
    }
    return (int)n;
}

#if !defined(GPT2_NO_MAIN) || defined(GPT2_CLI)
/* ----------------------------------------------------------------- main
   (gpt2_main; tests reach it with GPT2_NO_MAIN and GPT2_CLI defined) */

typedef struct {
    gpt2_config cfg;
    int steps, warmup, eval_every, eval_batches, sample_len, top_k, devices, threads, bench, bench_steps, print_program;
    const char *cost; /* --cost: the machine whose roofline the step's cost analysis is set against */
    int heads_set, layers_set, embed_set, context_set, devices_set, batch_set, mesh_set; /* given by flag */
    int cuda; /* --cuda: every array and run on a GPU (GPU 0; one per process under a launcher) */
    int dry_run; /* --dry-run: check the launch, then stop */
    int save_every, keep; /* periodic checkpoints: every K steps, the newest N kept */
    double lr, min_lr_frac, temperature;
    const char *mesh, *data, *tokens, *vocab_json, *merges_txt, *svg, *save, *resume, *prompt, *trace, *init_from;
    const char *export_hf, *tokenizer_json;
    int allow_special;
} gpt2_args;

static void usage(void) {
    printf(
        "usage: gpt2_train [flags]   (./build.sh demo runs it with none)\n"
        "Trains a GPT-2 with tinyjax. Default: 4 layers, 4 heads, 128 channels, context 64,\n"
        "batch 8, 300 steps on 8 simulated devices (mesh data=4 model=2, FSDP + tensor parallel),\n"
        "on the project's own source files as bytes (vocab 256).\n"
        "\n"
        "model\n"
        "  --layers N          transformer blocks (4)\n"
        "  --heads N           attention heads (4)\n"
        "  --embed N           channels (128); head_dim = embed / heads, mlp = 4 * embed\n"
        "  --context N         tokens per sequence (64)\n"
        "  --batch N           sequences per micro-batch (8)\n"
        "  --accum K           gradient accumulation: K micro-batches per optimizer step (1),\n"
        "                      the mean of their gradients; a scan over them inside the\n"
        "                      compiled step, so activations take the memory of one\n"
        "                      micro-batch, plus 3 parameter-sized buffers for the sum\n"
        "  --accum-unroll      trace the K micro-batches one after another instead: about\n"
        "                      one parameter-sized buffer, but a program K times as long\n"
        "  --bf16              compute in bf16 (params, optimizer state and loss stay f32)\n"
        "  --remat P           what the backward pass keeps of each block: auto (default:\n"
        "                      everything when the step fits --memory-budget, else block_out;\n"
        "                      regather instead of everything on simulated devices),\n"
        "                      block_out (only block outputs, the rest recomputed), nothing,\n"
        "                      dots, everything, offload (block outputs offloaded to host memory),\n"
        "                      regather (everything but the all-gathered weights: the backward\n"
        "                      pass gathers them again)\n"
        "  --memory-budget MB  --remat auto's limit on the step's planned peak per device\n"
        "                      (default: half this machine's memory shared by the devices;\n"
        "                      with --cuda 80%% of the GPU's)\n"
        "training\n"
        "  --steps N           optimizer steps (300)\n"
        "  --lr X              peak learning rate (3e-3)\n"
        "  --warmup N          linear warmup steps (150), then cosine decay; with 30 the default\n"
        "                      run's gradient norm spiked 5-40x at steps 15-25 on most seeds\n"
        "  --min-lr-frac X     final lr as a fraction of the peak (0.1)\n"
        "  --wd X              AdamW weight decay on matrices (0.1); betas 0.9, 0.95; eps 1e-8\n"
        "  --clip X            global gradient-norm clip (1.0)\n"
        "  --seed N            init, batch-sampling and dropout seed (1337)\n"
        "  --dropout P         dropout rate in training, 0 <= P < 1 (0: none; the step is then\n"
        "                      the one without the flag), where GPT-2 has it (embd_pdrop,\n"
        "                      resid_pdrop): on the embedding sum, and on attention's and the\n"
        "                      MLP's output projections (bias included) before each residual\n"
        "                      add. A fresh mask every step, micro-batch, layer and site: one\n"
        "                      key from --seed folded with them, so --resume draws the masks\n"
        "                      the uninterrupted run would have. attn_pdrop (on the attention\n"
        "                      probabilities) only with --attn-composed: the fused\n"
        "                      tj_attention never makes them. Evaluation and sampling run\n"
        "                      without dropout\n"
        "  --eval-every K      validation loss every K steps (50) and at the end\n"
        "  --eval-batches N    validation batches per evaluation (8)\n"
        "data\n"
        "  --data FILE         train on a text file (bytes; or GPT-2 BPE with --tokenizer)\n"
        "  --tokens FILE.bin   pre-tokenized llm.c token file (version 1: uint16 GPT-2 tokens;\n"
        "                      version 2, or llm.c's Llama 3 files: uint32 tokens)\n"
        "  --tokenizer V M     GPT-2 BPE from vocab.json and merges.txt (encodes --data,\n"
        "                      decodes samples)\n"
        "                      default data: tinyjax.h, README.md, demos/*.c, demos/*.h,\n"
        "                      tests/*.c found from the current directory or the executable's\n"
        "  --tokenizer-json F  byte-level BPE from a Hugging Face tokenizer.json (GPT-2 style:\n"
        "                      ByteLevel pre-tokenizer, no normalizer); with --init-from and no\n"
        "                      tokenizer flag, tokenizer.json or vocab.json + merges.txt beside\n"
        "                      the weights are used\n"
        "  --allow-special     special tokens in --data and --prompt (<|endoftext|>, tokenizer.json's\n"
        "                      special added tokens) become their ids; otherwise they are\n"
        "                      encoded as ordinary text\n"
        "parallelism\n"
        "  --devices N         simulated devices (8; with --mesh alone: the mesh's size); under\n"
        "                      mpirun: all processes' devices, devices / processes each\n"
        "  --mesh S            device mesh, e.g. \"data=4 model=2\" (default); product = devices\n"
        "  --param-rules S     logical rules for parameters and optimizer state\n"
        "                      (\"embed:data mlp:model heads:model vocab:model\": FSDP + tensor)\n"
        "  --compute-rules S   logical rules for activations (\"batch:data mlp:model heads:model vocab:model\";\n"
        "                      with vocab split, tj_cross_entropy is the vocab-parallel loss)\n"
        "  --seq-parallel      sequence parallelism (Megatron-LM style): the residual stream is\n"
        "                      also split along pos over mesh axis model, all-gathered before\n"
        "                      attention and the MLP, reduce-scattered after them\n"
        "  --attn-composed     attention from dot, causal_mask and softmax (makes the (pos, kpos)\n"
        "                      scores) instead of the fused tj_attention (the default)\n"
        "  --threads N         kernel threads per device (default: the cores split among the\n"
        "                      devices; with more devices than cores, the devices run as\n"
        "                      fibers on one thread per core)\n"
        "  --cuda              run on GPU 0 (tinyjax_cuda.cu; build.sh links it when nvcc is\n"
        "                      present): training, evaluation, sampling and checkpoints; one\n"
        "                      device unless --devices / --mesh are given (simulated devices\n"
        "                      sharing the GPU). TJ_CUDA_TF32=1 lets f32 dots use TF32.\n"
        "                      In N processes (mpirun -np N, or TJ_NPROCS=N TJ_RANK=r with\n"
        "                      TJ_COORD=host:port or a shared file's path): one device per\n"
        "                      process, each on its own GPU (the node's local rank picks it;\n"
        "                      TJ_LOCAL_RANK overrides), collectives through NCCL (a build\n"
        "                      with libnccl); --mesh must have N devices\n"
        "  --dry-run           check the command line and the launch (processes, each one's\n"
        "                      GPU, the NCCL communicators), print them and stop before any\n"
        "                      data, model or kernel\n"
        "output\n"
        "  --sample N          bytes/tokens to sample at the end (200; 0: none)\n"
        "  --prompt S          sampling prompt (\"/* \")\n"
        "  --temperature X     sampling temperature (0.8; 0 = greedy)\n"
        "  --top-k N           sample from the k most likely tokens (40; 0 = all)\n"
        "  --svg FILE          loss curve (gpt2_loss.svg; \"\": none)\n"
        "  --trace FILE        Chrome trace (Perfetto) JSON of one training step: a track per\n"
        "                      device and stream with every kernel, fused loop, collective and\n"
        "                      offload copy; host-side phases of all steps go to FILE.steps.json\n"
        "  --print-program     print the compiled training step and its memory plan\n"
        "checkpoints (safetensors via tj_tree_save: written atomically, a kill never\n"
        "leaves a broken one)\n"
        "  --save FILE         checkpoint at the end of training\n"
        "  --save-every K      also every K steps, to FILE.stepNNNNNNNN, so a kill loses at\n"
        "                      most K steps\n"
        "  --keep N            periodic checkpoints kept, the newest N (3)\n"
        "  --resume FILE       resume params, optimizer state, step and data position from\n"
        "                      the newest valid checkpoint among FILE and FILE.step*\n"
        "                      (newest written first; a corrupt one is skipped with a\n"
        "                      warning); an error if there is none\n"
        "  --export-hf DIR     at the end, write DIR/model.safetensors (Hugging Face GPT-2 names and\n"
        "                      layouts, tied head, real vocabulary) and DIR/config.json, which\n"
        "                      transformers' GPT2LMHeadModel.from_pretrained(DIR) and --init-from\n"
        "                      DIR load; the tokenizer files given are copied beside them\n"
        "  --init-from F|DIR   start from Hugging Face GPT-2 weights (model.safetensors, names\n"
        "                      h.0.attn.c_attn.weight .., with or without \"transformer.\"; or a\n"
        "                      directory holding it): layers, embed, vocab and positions come\n"
        "                      from the tensors; heads, layer norm epsilon and activation from\n"
        "                      config.json beside them (without one: --heads or embed / 64);\n"
        "                      a flag that disagrees is an error; with --steps 0 it only samples\n"
        "benchmark\n"
        "  --bench             GPT-2 124M shape (12 layers, 12 heads, 768 channels, vocab 50304,\n"
        "                      B=4, T=64, f32, one device unless --devices / --mesh, all\n"
        "                      cores): init and compile time, median ms/step, %% of the\n"
        "                      measured FP32 peak, top 10 ops, memory plan vs allocated\n"
        "                      --bench --cuda: on GPU 0 at B=16, T=1024 (--batch, --context,\n"
        "                      --bf16, --remat apply): ms/step, tokens/s and MFU against the\n"
        "                      card's dense peak (GPT2_PEAK_TFLOPS=X for a card not known)\n"
        "  --bench-steps N     timed steps (10)\n"
        "                      with --trace FILE: one more step profiled, written to FILE, and\n"
        "                      the ops that took longest printed (on a GPU: the kernels' own\n"
        "                      times, from CUDA events, a trace track per stream)\n"
        "  --cost M            with --bench: the step program's cost analysis (tj_cost_print: FLOPs,\n"
        "                      bytes moved and kernels per op) against machine M's roofline (H100,\n"
        "                      H100-PCIe, H200, A100, card: with --cuda the GPU's own, or\n"
        "                      TFLOPS:GBPS), a lower bound on its step\n"
        "                      time and so an upper bound on MFU, then stop; needs no GPU (without\n"
        "                      --cuda the program is the CPU's: the same but for sums of squares,\n"
        "                      which the CPU's fused loops also take)\n"
        "  --help              this text\n"
        "Numbers must be whole and in range (every flag says its range when it is not).\n"
        "Exit status: 0 success; 2 a bad command line; 1 anything else: bad input files,\n"
        "a failed step or NaN loss, and every failed write (checkpoint, trace, loss curve),\n"
        "with a message. A failed checkpoint ends the run at once; a failed trace or loss\n"
        "curve does not stop training, but the exit status is 1.\n");
}

static int read_append(const char *path, char **buf, size_t *len) {
    char *d = NULL, err[256];
    size_t n = 0;
    char *nb;
    if (tj_read_file(path, &d, &n, err, sizeof err)) return 1;
    nb = (char *)realloc(*buf, *len + n + 1);
    if (!nb) { free(d); return 1; }
    memcpy(nb + *len, d, n);
    *len += n;
    nb[*len] = 0;
    *buf = nb;
    free(d);
    return 0;
}
static int has_suffix(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }
/* files of dir ending in suf, sorted, appended */
static int read_dir(const char *root, const char *dir, const char *suf, char **buf, size_t *len) {
    char path[1024], *names[256];
    int n = 0, i, got = 0;
    DIR *d;
    struct dirent *e;
    snprintf(path, sizeof path, "%s%s", root, dir);
    if (!(d = opendir(path))) return 0;
    while ((e = readdir(d)) && n < 256)
        if (has_suffix(e->d_name, suf)) {
            names[n] = (char *)malloc(strlen(e->d_name) + 1);
            if (names[n]) strcpy(names[n++], e->d_name);
        }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    for (i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s%s/%s", root, dir, names[i]);
        got += !read_append(path, buf, len);
        free(names[i]);
    }
    return got;
}
/* the project's own sources: from ".", "..", or the executable's repo
   (the executable in build/ or build/mpi/) */
static char *default_corpus(size_t *len, char *from, size_t fromlen) {
    char exe[1024], roots[5][1100];
    int nroots = 0, r;
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    strcpy(roots[nroots++], "");
    strcpy(roots[nroots++], "../");
    if (k > 0) {
        char *s;
        exe[k] = 0;
        if ((s = strrchr(exe, '/'))) {
            *s = 0;
            snprintf(roots[nroots++], sizeof roots[0], "%s/", exe);
            snprintf(roots[nroots++], sizeof roots[0], "%s/../", exe);
            snprintf(roots[nroots++], sizeof roots[0], "%s/../../", exe); /* build/mpi/gpt2_train */
        }
    }
    for (r = 0; r < nroots; r++) {
        char path[1200], *buf = NULL;
        snprintf(path, sizeof path, "%.1099stinyjax.h", roots[r]);
        *len = 0;
        if (read_append(path, &buf, len)) continue;
        snprintf(path, sizeof path, "%.1099sREADME.md", roots[r]);
        read_append(path, &buf, len);
        read_dir(roots[r], "demos", ".c", &buf, len);
        read_dir(roots[r], "demos", ".h", &buf, len);
        read_dir(roots[r], "tests", ".c", &buf, len);
        snprintf(from, fromlen, "%.1099s", *roots[r] ? roots[r] : "./");
        return buf;
    }
    return NULL;
}

/* Strict flag values: the whole string must be a number within [lo, hi]
   (no "ten", no "3x", no NaN); else a message naming the flag, the value
   and the range, and 1. */
static int arg_ll(const char *flag, const char *v, long long lo, long long hi, long long *out) {
    char *e;
    long long x;
    errno = 0;
    x = strtoll(v, &e, 10);
    if (e == v || *e || errno == ERANGE || x < lo || x > hi) {
        fprintf(stderr, "gpt2_train: %s: \"%s\" is not a whole number from %lld to %lld\n", flag, v, lo, hi);
        return 1;
    }
    *out = x;
    return 0;
}
/* --cost's machine: a card of gpt2_peak_tflops's table by name (its peak
   for the compute dtype) or "TFLOPS:GBPS"; 1 when it is one */
static int cost_machine(const char *v, int bf16, double *tflops, double *gbs) {
    char *end;
    *tflops = strtod(v, &end);
    if (end != v && *end == ':') {
        const char *g = end + 1;
        *gbs = strtod(g, &end);
        return *end == 0 && end != g && *tflops > 0 && *gbs > 0 && *tflops < 1e9 && *gbs < 1e12;
    }
    *tflops = gpt2_peak_tflops(v, bf16, gpt2_tf32_on(), gbs);
    return *tflops > 0 && *gbs > 0;
}
static int arg_int(const char *flag, const char *v, int lo, int hi, int *out) {
    long long x;
    if (arg_ll(flag, v, lo, hi, &x)) return 1;
    *out = (int)x;
    return 0;
}
static int arg_dbl(const char *flag, const char *v, double lo, double hi, double *out) {
    char *e;
    double x;
    errno = 0;
    x = strtod(v, &e);
    if (e == v || *e || errno == ERANGE || !(x >= lo && x <= hi)) { /* !(..) also rejects NaN */
        fprintf(stderr, "gpt2_train: %s: \"%s\" is not a number from %g to %g\n", flag, v, lo, hi);
        return 1;
    }
    *out = x;
    return 0;
}
/* a file to read: it must exist and not be a directory */
static int arg_in_file(const char *flag, const char *path) {
    struct stat sb;
    if (!*path) { fprintf(stderr, "gpt2_train: %s: empty file name\n", flag); return 1; }
    if (stat(path, &sb)) { fprintf(stderr, "gpt2_train: %s %s: %s\n", flag, path, strerror(errno)); return 1; }
    if (S_ISDIR(sb.st_mode)) { fprintf(stderr, "gpt2_train: %s %s: is a directory, not a file\n", flag, path); return 1; }
    return 0;
}
/* a file to write: not a directory, in a directory that exists */
static int arg_out_file(const char *flag, const char *path) {
    struct stat sb;
    char dir[1024];
    const char *slash = strrchr(path, '/');
    if (!*path) { fprintf(stderr, "gpt2_train: %s: empty file name\n", flag); return 1; }
    if (path[strlen(path) - 1] == '/' || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))) {
        fprintf(stderr, "gpt2_train: %s %s: is a directory; give a file name\n", flag, path);
        return 1;
    }
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "gpt2_train: %s %s: directory %s does not exist\n", flag, path, dir);
        return 1;
    }
    if (access(dir, W_OK)) {
        fprintf(stderr, "gpt2_train: %s %s: directory %s is not writable: %s\n", flag, path, dir, strerror(errno));
        return 1;
    }
    return 0;
}

/* ---- checkpoint files: FILE (the final one) and FILE.stepNNNNNNNN (periodic) */
static void ckpt_step_name(char *buf, size_t n, const char *base, int64_t step) { snprintf(buf, n, "%s.step%08lld", base, (long long)step); }
/* the step of name if it is "<base of FILE>.step<digits>", else -1 */
static int64_t ckpt_step_of(const char *name, const char *fbase) {
    size_t bl = strlen(fbase);
    const char *p;
    int64_t v = 0;
    if (strncmp(name, fbase, bl) || strncmp(name + bl, ".step", 5)) return -1;
    p = name + bl + 5;
    if (!*p) return -1;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || v > INT64_MAX / 10 - 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}
typedef struct {
    char path[1400];
    int64_t step;   /* -1: FILE itself */
    double mtime;
} ckpt_file;
static int ckpt_cmp_newest(const void *a, const void *b) {
    const ckpt_file *x = (const ckpt_file *)a, *y = (const ckpt_file *)b;
    int64_t sx = x->step < 0 ? INT64_MAX : x->step, sy = y->step < 0 ? INT64_MAX : y->step;
    if (x->mtime != y->mtime) return x->mtime < y->mtime ? 1 : -1;
    return sx < sy ? 1 : sx > sy ? -1 : 0;
}
/* FILE and the FILE.step* files beside it, newest written first (ties: the
   higher step first). Returns the count (at most max), or -1 on error. */
static int ckpt_list(const char *file, ckpt_file *out, int max) {
    const char *slash = strrchr(file, '/'), *fbase = slash ? slash + 1 : file;
    char dir[1024];
    DIR *d;
    struct dirent *e;
    struct stat sb;
    int n = 0;
    if (slash) snprintf(dir, sizeof dir, "%.*s", slash == file ? 1 : (int)(slash - file), file);
    else snprintf(dir, sizeof dir, ".");
    if (stat(file, &sb) == 0 && S_ISREG(sb.st_mode) && n < max) {
        snprintf(out[n].path, sizeof out[n].path, "%s", file);
        out[n].step = -1;
        out[n].mtime = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
        n++;
    }
    if (!(d = opendir(dir))) return n;
    while ((e = readdir(d)) != NULL && n < max) {
        int64_t st = ckpt_step_of(e->d_name, fbase);
        if (st < 0) continue;
        snprintf(out[n].path, sizeof out[n].path, "%s%s%s", slash ? dir : "", slash && strcmp(dir, "/") ? "/" : "", e->d_name);
        if (stat(out[n].path, &sb) || !S_ISREG(sb.st_mode)) continue;
        out[n].step = st;
        out[n].mtime = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
        n++;
    }
    closedir(d);
    qsort(out, (size_t)n, sizeof *out, ckpt_cmp_newest);
    return n;
}
/* Remove the temp files "<FILE>.step<N>.tmp.<pid>.<k>" of periodic saves
   that a kill interrupted (the library cleans "<path>.tmp.*" only when it
   writes that same path again, and every periodic checkpoint has a new
   path). A writer holds a lock on its temp file while it writes (see
   tinyjax.h, safetensors), so one we can lock, with data in it or older
   than a minute, is stale; this process's own are never touched. */
static void ckpt_clean_temps(const char *file) {
    const char *slash = strrchr(file, '/'), *fbase = slash ? slash + 1 : file;
    char dir[1024], path[1400];
    size_t bl = strlen(fbase);
    DIR *d;
    struct dirent *e;
    if (slash) snprintf(dir, sizeof dir, "%.*s", slash == file ? 1 : (int)(slash - file), file);
    else snprintf(dir, sizeof dir, ".");
    if (!(d = opendir(dir))) return;
    while ((e = readdir(d)) != NULL) {
        const char *p = e->d_name + bl, *t;
        long pid;
        struct stat sb;
        struct flock l;
        int fd;
        if (strncmp(e->d_name, fbase, bl) || strncmp(p, ".step", 5) || !(t = strstr(p, ".tmp.")) || t == p + 5) continue;
        for (p += 5; p < t; p++) if (*p < '0' || *p > '9') break;
        if (p != t || (pid = strtol(t + 5, NULL, 10)) <= 0 || pid == (long)getpid()) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if ((fd = open(path, O_RDWR)) < 0) continue;
        memset(&l, 0, sizeof l);
        l.l_type = F_WRLCK;
        l.l_whence = SEEK_SET;
        if (fcntl(fd, F_SETLK, &l) == 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_size > 0 || time(NULL) - sb.st_mtime > 60)) unlink(path);
        close(fd);
    }
    closedir(d);
}
/* delete the periodic checkpoints of FILE beyond the `keep` of highest step,
   and temp files of periodic saves that were killed */
static void ckpt_prune(const char *file, int keep) {
    ckpt_file *f = (ckpt_file *)malloc(sizeof(ckpt_file) * 4096);
    int n, i, k, kept = 0;
    ckpt_clean_temps(file);
    if (!f) return;
    n = ckpt_list(file, f, 4096);
    for (i = 0; i < n; i++) { /* by step, highest first */
        int best = -1;
        for (k = 0; k < n; k++)
            if (f[k].step >= 0 && (best < 0 || f[k].step > f[best].step)) best = k;
        if (best < 0) break;
        if (kept++ >= keep) unlink(f[best].path);
        f[best].step = -2;
    }
    free(f);
}

static int parse_args(int argc, char **argv, gpt2_args *a) {
    int i;
    memset(a, 0, sizeof *a);
    gpt2_default_config(&a->cfg);
    a->steps = 300; a->warmup = 150; a->eval_every = 50; a->eval_batches = 8; a->sample_len = 200; a->top_k = 40;
    a->devices = 8; a->threads = 0; a->bench_steps = 10; a->keep = 3;
    a->cfg.remat = REMAT_AUTO;
    a->lr = 3e-3; a->min_lr_frac = 0.1; a->temperature = 0.8;
    a->mesh = "data=4 model=2";
    a->cfg.param_rules = GPT2_PARAM_RULES;
    a->cfg.compute_rules = GPT2_COMPUTE_RULES;
    a->svg = "gpt2_loss.svg";
    a->prompt = "/* ";
    for (i = 1; i < argc; i++) {
        const char *f = argv[i], *v;
        int bad = 0;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(); exit(0); }
        else if (!strcmp(f, "--bf16")) { a->cfg.bf16 = 1; continue; }
        else if (!strcmp(f, "--seq-parallel")) { a->cfg.seq_parallel = 1; continue; }
        else if (!strcmp(f, "--attn-composed")) { a->cfg.attn_composed = 1; continue; }
        else if (!strcmp(f, "--accum-unroll")) { a->cfg.accum_unroll = 1; continue; }
        else if (!strcmp(f, "--bench")) { a->bench = 1; continue; }
        else if (!strcmp(f, "--cuda")) { a->cuda = 1; continue; }
        else if (!strcmp(f, "--dry-run")) { a->dry_run = 1; continue; }
        else if (!strcmp(f, "--print-program")) { a->print_program = 1; continue; }
        else if (!strcmp(f, "--allow-special")) { a->allow_special = 1; continue; }
        if (strncmp(f, "--", 2) || !f[2]) {
            fprintf(stderr, "gpt2_train: unexpected argument \"%s\" (flags start with --; see --help)\n", f);
            return 1;
        }
        if (i + 1 >= argc) {
            static const char *valued[] = {"--layers", "--heads", "--embed", "--context", "--batch", "--accum", "--remat", "--steps", "--lr", "--warmup",
                                           "--min-lr-frac", "--wd", "--clip", "--seed", "--dropout", "--eval-every", "--eval-batches", "--data", "--tokens",
                                           "--tokenizer", "--devices", "--mesh", "--param-rules", "--compute-rules", "--threads", "--sample", "--prompt",
                                           "--temperature", "--top-k", "--svg", "--trace", "--save", "--save-every", "--keep", "--resume",
                                           "--init-from", "--bench-steps", "--tokenizer-json", "--export-hf", "--memory-budget", "--cost"};
            size_t k;
            for (k = 0; k < sizeof valued / sizeof valued[0]; k++)
                if (!strcmp(f, valued[k])) {
                    fprintf(stderr, "gpt2_train: %s needs a value (see --help)\n", f);
                    return 1;
                }
            fprintf(stderr, "gpt2_train: unknown flag %s (see --help)\n", f);
            return 1;
        }
        v = argv[i + 1];
        if (!strcmp(f, "--layers")) { bad = arg_int(f, v, 1, 1024, &a->cfg.L); a->layers_set = 1; }
        else if (!strcmp(f, "--heads")) { bad = arg_int(f, v, 1, 4096, &a->cfg.H); a->heads_set = 1; }
        else if (!strcmp(f, "--embed")) { bad = arg_int(f, v, 1, 1 << 16, &a->cfg.C); a->cfg.M = 4 * a->cfg.C; a->embed_set = 1; }
        else if (!strcmp(f, "--context")) { bad = arg_int(f, v, 2, 1 << 16, &a->cfg.T); a->cfg.block = a->cfg.T; a->context_set = 1; }
        else if (!strcmp(f, "--batch")) { bad = arg_int(f, v, 1, 1 << 16, &a->cfg.B); a->batch_set = 1; }
        else if (!strcmp(f, "--accum")) bad = arg_int(f, v, 1, 1 << 16, &a->cfg.accum);
        else if (!strcmp(f, "--remat")) {
            int k, found = -1;
            for (k = 0; k < NREMAT; k++) if (!strcmp(v, remat_names[k])) found = k;
            if (found < 0) { fprintf(stderr, "gpt2_train: --remat: \"%s\" is not one of auto, block_out, nothing, dots, everything, offload, regather\n", v); return 1; }
            a->cfg.remat = found;
        }
        else if (!strcmp(f, "--memory-budget")) {
            bad = arg_dbl(f, v, 1, 1e9, &a->cfg.memory_budget);
            a->cfg.memory_budget *= 1e6;
        }
        else if (!strcmp(f, "--steps")) bad = arg_int(f, v, 0, 100000000, &a->steps);
        else if (!strcmp(f, "--lr")) bad = arg_dbl(f, v, 0, 10, &a->lr);
        else if (!strcmp(f, "--warmup")) bad = arg_int(f, v, 0, 100000000, &a->warmup);
        else if (!strcmp(f, "--min-lr-frac")) bad = arg_dbl(f, v, 0, 1, &a->min_lr_frac);
        else if (!strcmp(f, "--wd")) bad = arg_dbl(f, v, 0, 10, &a->cfg.wd);
        else if (!strcmp(f, "--clip")) bad = arg_dbl(f, v, 0, 1e9, &a->cfg.clip);
        else if (!strcmp(f, "--dropout")) {
            bad = arg_dbl(f, v, 0, 1, &a->cfg.dropout);
            if (!bad && a->cfg.dropout >= 1) {
                fprintf(stderr, "gpt2_train: --dropout: \"%s\" would drop everything (the rate must be below 1)\n", v);
                bad = 1;
            }
        }
        else if (!strcmp(f, "--seed")) {
            char *e;
            errno = 0;
            a->cfg.seed = (uint64_t)strtoull(v, &e, 10);
            if (e == v || *e || errno == ERANGE || *v == '-' || *v == '+' || *v == ' ') {
                fprintf(stderr, "gpt2_train: --seed: \"%s\" is not a whole number from 0 to 18446744073709551615\n", v);
                return 1;
            }
        }
        else if (!strcmp(f, "--eval-every")) bad = arg_int(f, v, 1, 100000000, &a->eval_every);
        else if (!strcmp(f, "--eval-batches")) bad = arg_int(f, v, 1, 1000000, &a->eval_batches);
        else if (!strcmp(f, "--data")) { a->data = v; bad = arg_in_file(f, v); }
        else if (!strcmp(f, "--tokens")) { a->tokens = v; bad = arg_in_file(f, v); }
        else if (!strcmp(f, "--tokenizer")) {
            if (i + 2 >= argc) { fprintf(stderr, "gpt2_train: --tokenizer needs two files: vocab.json merges.txt\n"); return 1; }
            a->vocab_json = v;
            a->merges_txt = argv[i + 2];
            bad = arg_in_file(f, a->vocab_json) || arg_in_file(f, a->merges_txt);
            i++;
        }
        else if (!strcmp(f, "--devices")) { bad = arg_int(f, v, 1, TJ_MAXDEV, &a->devices); a->devices_set = 1; }
        else if (!strcmp(f, "--mesh")) { a->mesh = v; a->mesh_set = 1; }
        else if (!strcmp(f, "--param-rules")) a->cfg.param_rules = v;
        else if (!strcmp(f, "--compute-rules")) a->cfg.compute_rules = v;
        else if (!strcmp(f, "--threads")) bad = arg_int(f, v, 0, 4096, &a->threads);
        else if (!strcmp(f, "--sample")) bad = arg_int(f, v, 0, 1000000, &a->sample_len);
        else if (!strcmp(f, "--prompt")) a->prompt = v;
        else if (!strcmp(f, "--temperature")) bad = arg_dbl(f, v, 0, 100, &a->temperature);
        else if (!strcmp(f, "--top-k")) bad = arg_int(f, v, 0, 1 << 30, &a->top_k);
        else if (!strcmp(f, "--svg")) { a->svg = v; bad = *v && arg_out_file(f, v); }
        else if (!strcmp(f, "--trace")) { a->trace = v; bad = arg_out_file(f, v); }
        else if (!strcmp(f, "--save")) { a->save = v; bad = arg_out_file(f, v); }
        else if (!strcmp(f, "--save-every")) bad = arg_int(f, v, 1, 100000000, &a->save_every);
        else if (!strcmp(f, "--keep")) bad = arg_int(f, v, 1, 1000, &a->keep);
        else if (!strcmp(f, "--resume")) {
            struct stat sb;
            a->resume = v;
            if (!*v) { fprintf(stderr, "gpt2_train: --resume: empty file name\n"); return 1; }
            if (stat(v, &sb) == 0 && S_ISDIR(sb.st_mode)) { fprintf(stderr, "gpt2_train: --resume %s: is a directory, not a checkpoint file\n", v); return 1; }
        }
        else if (!strcmp(f, "--init-from")) { /* model.safetensors, or a directory holding it */
            struct stat sb;
            a->init_from = v;
            if (!*v || stat(v, &sb)) { fprintf(stderr, "gpt2_train: --init-from %s: %s\n", v, *v ? strerror(errno) : "empty name"); return 1; }
            if (S_ISDIR(sb.st_mode)) {
                char st[1100];
                snprintf(st, sizeof st, "%s/model.safetensors", v);
                if (access(st, R_OK)) { fprintf(stderr, "gpt2_train: --init-from %s: is a directory without a readable model.safetensors\n", v); return 1; }
            }
        }
        else if (!strcmp(f, "--tokenizer-json")) { a->tokenizer_json = v; bad = arg_in_file(f, v); }
        else if (!strcmp(f, "--export-hf")) {
            a->export_hf = v;
            if (!*v) { fprintf(stderr, "gpt2_train: --export-hf: empty directory name\n"); return 1; }
        }
        else if (!strcmp(f, "--bench-steps")) bad = arg_int(f, v, 1, 1000000, &a->bench_steps);
        else if (!strcmp(f, "--cost")) {
            double tf, gbs;
            a->cost = v;
            if (strcmp(v, "card") && !cost_machine(v, 1, &tf, &gbs)) {
                fprintf(stderr, "gpt2_train: --cost %s: not a machine (H100, H100-PCIe, H200, A100, card (with --cuda: the GPU's own), or TFLOPS:GBPS, both > 0, e.g. 989:3350)\n", v);
                return 1;
            }
        }
        else {
            fprintf(stderr, "gpt2_train: unknown flag %s (see --help)\n", f);
            return 1;
        }
        if (bad) return 1;
        i++;
    }
    if (a->cuda && !a->devices_set && !a->mesh_set) { /* one GPU: one device, not the simulated mesh */
        a->devices = 1;
        a->mesh = "";
    }
    if (!a->devices_set && a->mesh && strchr(a->mesh, '=')) a->devices = mesh_size(a->mesh); /* --mesh alone: as many devices as it has */
    if (a->mesh_set && *a->mesh) { /* a mesh given is checked on the devices, also one device (it was ignored there, and "data=abc" divided by 0) */
        tj_ctx *c = tj_ctx_new();
        int bad = !c || tj_set_devices(c, a->devices > 0 ? a->devices : 1) || tj_set_mesh(c, a->mesh);
        if (bad) fprintf(stderr, "gpt2_train: --mesh \"%s\"%s: %s\n", a->mesh, a->devices_set ? " and --devices" : "", c ? tj_error(c) : "out of memory");
        tj_ctx_free(c);
        if (bad) return 1;
    }
    { /* the rules strings: their syntax now, not at the first tj_jit (mesh axes the mesh lacks are skipped there too) */
        const char *rn[2] = {"--param-rules", "--compute-rules"}, *rv[2];
        tj_ctx *c = tj_ctx_new();
        int k, bad = !c;
        rv[0] = a->cfg.param_rules;
        rv[1] = a->cfg.compute_rules;
        if (c && a->mesh && *a->mesh && (tj_set_devices(c, a->devices > 0 ? a->devices : 1) || tj_set_mesh(c, a->mesh))) tj_clear_error(c); /* (then no mesh) */
        for (k = 0; k < 2 && !bad; k++)
            if (rv[k] && tj_check_rules(c, rv[k]) != TJ_OK) {
                fprintf(stderr, "gpt2_train: %s \"%s\": %s\n", rn[k], rv[k], tj_error(c));
                bad = 1;
            }
        if (!c) fprintf(stderr, "gpt2_train: out of memory\n");
        tj_ctx_free(c);
        if (bad) return 1;
    }
    if (!a->init_from && a->cfg.C % a->cfg.H) {
        fprintf(stderr, "gpt2_train: --embed %d is not divisible by --heads %d\n", a->cfg.C, a->cfg.H);
        return 1;
    }
    if (a->save_every && !a->save) {
        fprintf(stderr, "gpt2_train: --save-every %d needs --save FILE (the periodic checkpoints are FILE.stepNNNNNNNN)\n", a->save_every);
        return 1;
    }
    if (a->mesh && a->devices > 1 && !*a->mesh) {
        fprintf(stderr, "gpt2_train: --mesh is empty, but there are %d devices\n", a->devices);
        return 1;
    }
    if (a->resume) {
        ckpt_file f[1];
        if (ckpt_list(a->resume, f, 1) < 1) {
            fprintf(stderr, "gpt2_train: --resume %s: no checkpoint %s or %s.step* found\n", a->resume, a->resume, a->resume);
            return 1;
        }
    }
    if (a->cfg.seq_parallel && (a->devices < 2 || !strstr(a->mesh, "model="))) {
        fprintf(stderr, "gpt2_train: --seq-parallel splits pos over the mesh axis model, and mesh \"%s\" on %d devices has none\n", a->mesh, a->devices);
        return 1;
    }
    if (a->warmup < 1) a->warmup = 1;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* --bench --trace: the profiled step's time by op and by op + source line,
   the largest first (scan bodies record every iteration, so a line of the
   block sums over layers) */
typedef struct {
    char key[96];
    double us;
    int n;
} prof_row;
static int cmp_prof(const void *a, const void *b) {
    double x = ((const prof_row *)a)->us, y = ((const prof_row *)b)->us;
    return x < y ? 1 : x > y ? -1 : 0;
}
/* cops (ncops of them, or NULL): the program's cost by op (tj_prog_cost_ops),
   for the bandwidth each op reached (by op, one device) */
static void print_profile(const tj_event *ev, int n, int by_line, int top, const tj_cost_op *cops, int ncops) {
    prof_row *r = (prof_row *)calloc((size_t)n + 1, sizeof *r);
    double total = 0;
    int i, j, nr = 0;
    if (!r) return;
    for (i = 0; i < n; i++) {
        char key[96];
        const char *f = ev[i].file ? strrchr(ev[i].file, '/') : NULL;
        if (by_line) snprintf(key, sizeof key, "%s at %s:%d%s", ev[i].op, f ? f + 1 : ev[i].file ? ev[i].file : "?", ev[i].line, ev[i].stream ? " (copy stream)" : "");
        else snprintf(key, sizeof key, "%s%s", ev[i].op, ev[i].stream ? " (copy stream)" : "");
        for (j = 0; j < nr && strcmp(r[j].key, key); j++) {}
        if (j == nr) snprintf(r[nr++].key, sizeof r[0].key, "%s", key);
        r[j].us += ev[i].dur_us;
        r[j].n++;
        if (!ev[i].stream) total += ev[i].dur_us; /* the copy stream runs beside it */
    }
    qsort(r, (size_t)nr, sizeof *r, cmp_prof);
    printf("profile: %d events, %.2f ms on the compute streams; by %s, the largest first (%% of that):\n", n, total * 1e-3,
           by_line ? "op and source line" : "op");
    for (i = 0; i < nr && i < top; i++) {
        printf("  %8.3f ms %5.1f%%  %5d x  %s", r[i].us * 1e-3, total > 0 ? 100 * r[i].us / total : 0.0, r[i].n, r[i].key);
        for (j = 0; !by_line && j < ncops && strcmp(cops[j].op, r[i].key); j++) {}
        if (!by_line && j < ncops && r[i].us > 0) /* the bytes it must move, over its time */
            printf("  (%.3g GB: %.0f GB/s, %.0f GFLOP/s)", cops[j].bytes * 1e-9, cops[j].bytes / (r[i].us * 1e-6) * 1e-9, cops[j].flops / (r[i].us * 1e-6) * 1e-9);
        printf("\n");
    }
    free(r);
}

/* --bench: GPT-2 124M steps on random tokens; the CPU at B=4 T=64, --cuda
   on GPU 0 at B=16 T=1024 (--batch, --context override); one device unless
   --devices / --mesh are given (simulated devices share the cores). Prints
   start-up (init and compile apart), ms/step (median, best, worst), CPU
   time per step (user, system: thread synchronisation shows as system
   time), tokens/s, GFLOP/s by the cost model against this machine's
   measured FP32 FMA peak (CPU) or MFU against the card's dense peak
   (--cuda: model FLOPs per token 6 N + 12 L C T, N the parameters without
   the position table; PaLM's count, as nanoGPT and llm.c report it: no
   recompute), the ops of one profiled step (top 10; --trace FILE: also by
   source line, and the trace), and each device's memory plan next to what
   it really allocated. Lines starting "figure:" are for ./build.sh bench's
   table: name; value; target; unit. */
#include <sys/resource.h>
#include "bench_peak.h"
static double bench_cpu_s(int sys) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
    return sys ? ru.ru_stime.tv_sec + 1e-6 * ru.ru_stime.tv_usec : ru.ru_utime.tv_sec + 1e-6 * ru.ru_utime.tv_usec;
}
/* resident set size now and at most (VmRSS, VmHWM of /proc/self/status), bytes; 0 where unknown */
static void bench_rss(double *now, double *hwm) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    *now = *hwm = 0;
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "VmRSS:", 6)) *now = atof(line + 6) * 1024;
        if (!strncmp(line, "VmHWM:", 6)) *hwm = atof(line + 6) * 1024;
    }
    fclose(f);
}
static int run_bench(gpt2_args *a) {
    gpt2_config c = a->cfg;
    gpt2_trainer tr;
    int32_t *x, *y;
    double *ms, t0, peak = 0, cpu_peak = 0, u0 = 0, s0 = 0, u1 = 0, s1 = 0, rss0, hwm0, model;
    int i, d, n = a->bench_steps < 1 ? 10 : a->bench_steps, warm = 2, ntok, rc = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* one device unless --devices / --mesh are given; threads as training uses them */
    int ndev = a->devices_set || a->mesh_set ? a->devices : 1;
    long cores = ncpu > 16 ? 16 : ncpu; /* the library's default budget */
    int threads = a->threads > 0 ? a->threads : (int)(cores / ndev > 0 ? cores / ndev : 1); /* per device, as printed */
    tj_backend *gpu = NULL;
    tj_memory_analysis plan;
    tj_alloc_stats st;
    char card[300] = "";
    bench_rss(&rss0, &hwm0); /* before any array: the program and its shared libraries */
    c.L = 12; c.H = 12; c.C = 768; c.M = 3072; c.V = 50304; c.V_real = 50257; c.block = 1024;
    c.T = a->context_set ? a->cfg.T : a->cuda ? 1024 : 64;
    c.B = a->batch_set ? a->cfg.B : a->cuda ? 16 : 4;
    if (c.T > c.block) c.block = c.T;
    c.bf16 = a->cfg.bf16;
    ntok = c.accum * c.B * c.T;
    model = (6.0 * ((double)gpt2_num_params(&c) - (double)c.block * c.C) + 12.0 * c.L * c.C * c.T) * ntok; /* model FLOPs of one step (wpe aside) */
    if (a->cuda) {
        if (!(gpu = gpt2_gpu_open(card, sizeof card))) return 1;
        peak = gpt2_peak_tflops(card, c.bf16, gpt2_tf32_on(), NULL);
    }
    printf("bench: GPT-2 124M shape: %lld params, L=%d H=%d C=%d V=%d (50257 padded), B=%d T=%d, accum %d, %s, %d device%s%s%s, %s, remat %s\n",
           (long long)gpt2_num_params(&c), c.L, c.H, c.C, c.V, c.B, c.T, c.accum,
           c.bf16 ? "bf16 compute" : gpu && gpt2_tf32_on() ? "f32 (TF32 dots: TJ_CUDA_TF32=1)" : "f32", ndev, ndev > 1 ? "s (mesh " : "",
           ndev > 1 ? a->mesh : "", ndev > 1 ? ")" : "", gpu ? card : "CPU", remat_names[c.remat]);
    if (!gpu) {
        cpu_peak = bench_peak_gflops((int)ncpu);
        if (!a->threads && ndev > cores)
            printf("bench: %d devices as fibers on %ld threads, %ld cores; ", ndev, cores, ncpu);
        else printf("bench: %d thread%s per device, %ld cores; ", threads, threads > 1 ? "s" : "", ncpu);
        printf("FP32 peak %.1f GFLOP/s measured (independent FMA chains, %ld threads)\n", cpu_peak, ncpu);
    }
    if (gpt2_trainer_init_on(&tr, &c, ndev, ndev > 1 ? a->mesh : NULL, a->threads, gpu)) {
        gpt2_gpu_close(gpu);
        return 1;
    }
    plan = tj_prog_memory(tr.step);
    printf("bench: init %.0f ms (random init of the params, zero optimizer state: the init program's compile and run); compile %.0f ms "
           "(the training step and eval); step program: %.1f GFLOP/step (cost model), temp %.1f MB, peak %.1f MB per device\n",
           tr.init_ms, tr.compile_ms, tj_prog_flops(tr.step) * 1e-9, plan.temp_bytes / 1e6, plan.peak_bytes / 1e6);
    {
        tj_cost k = tj_prog_cost(tr.step);
        printf("bench: the step moves %.2f GB in %.0f kernels per device (tj_prog_cost: each kernel's inputs read once and outputs written; "
               "--cost M prints them by op against machine M)\n", k.bytes * 1e-9, k.kernels);
    }
    printf("figure: init; %.0f; 500; ms\nfigure: compile; %.0f; 200; ms\n", tr.init_ms, tr.compile_ms);
    if (tr.auto_note)
        printf("bench: remat auto: %s (planned peak %.0f MB per device; budget %.0f MB)\n", tr.auto_note, tr.auto_peak / 1e6,
               tr.auto_budget / 1e6);
    if (a->print_program) {
        tj_prog_print(tr.step, stdout);
        tj_memory_print(tr.step, stdout);
    }
    if (a->cost) { /* the step's cost analysis against a machine's roofline, then stop */
        double tf, gbs, ms;
        if (!cost_machine(strcmp(a->cost, "card") ? a->cost : card, c.bf16, &tf, &gbs)) { /* ("card": needs --cuda; a card not in the table) */
            fprintf(stderr, "gpt2_train: --cost card: no peak or bandwidth known for %s: give its figures as TFLOPS:GBPS\n", card);
            gpt2_trainer_free(&tr);
            gpt2_gpu_close(gpu);
            return 2;
        }
        ms = 1e3 * tj_cost_print(tr.step, tf * 1e12, gbs * 1e9, 2e-6, 20, stdout);
        printf("bench: --cost %s: the step at least %.1f ms there (2 us a launch), %.1f%% MFU at most (%.4g model TFLOP at %.4g TFLOP/s)\n", a->cost, ms,
               100 * model / (ms * 1e-3 * tf * 1e12), model * 1e-12, tf);
        gpt2_trainer_free(&tr);
        gpt2_gpu_close(gpu);
        return 0;
    }
    x = (int32_t *)malloc(sizeof(int32_t) * (size_t)ntok);
    y = (int32_t *)malloc(sizeof(int32_t) * (size_t)ntok);
    ms = (double *)malloc(sizeof(double) * (size_t)(n + warm));
    if (!x || !y || !ms) {
        fprintf(stderr, "gpt2_train: --bench: out of memory\n");
        rc = 1;
    }
    tj_reset_alloc_peaks(tr.ctx); /* the step's runs apart from init and compile */
    for (i = 0; !rc && i < n + warm + 1; i++) {
        int k, prof = i == n + warm; /* one more step, profiled, not timed */
        float loss;
        for (k = 0; k < ntok; k++) {
            x[k] = (int32_t)(mix64((uint64_t)(i * 100003 + k)) % 50257u);
            y[k] = (int32_t)(mix64((uint64_t)(i * 100003 + k) ^ 0xabcdefull) % 50257u);
        }
        if (i == warm) { u0 = bench_cpu_s(0); s0 = bench_cpu_s(1); }
        if (prof) {
            u1 = bench_cpu_s(0);
            s1 = bench_cpu_s(1);
            tj_set_profile(tr.ctx, 1);
        }
        t0 = now_ms();
        loss = gpt2_train_step(&tr, x, y, 1e-4);
        if (prof) {
            int ne = tj_prog_events(tr.step, NULL, 0);
            tj_event *ev = (tj_event *)malloc(sizeof(tj_event) * (size_t)(ne > 0 ? ne : 1));
            tj_set_profile(tr.ctx, 0);
            printf("bench: a profiled step (not timed above): %.1f ms%s\n", now_ms() - t0, gpu ? " (the times below are the GPU's, from CUDA events)" : "");
            if (ev) {
                int nc = ndev == 1 ? tj_prog_cost_ops(tr.step, NULL, 0) : 0; /* (the profile's times are every device's) */
                tj_cost_op *cops = nc > 0 ? (tj_cost_op *)malloc(sizeof(tj_cost_op) * (size_t)nc) : NULL;
                if (cops) nc = tj_prog_cost_ops(tr.step, cops, nc);
                ne = tj_prog_events(tr.step, ev, ne);
                print_profile(ev, ne, 0, 10, cops, cops ? nc : 0);
                if (a->trace) print_profile(ev, ne, 1, 25, NULL, 0);
                free(cops);
                free(ev);
            }
            if (a->trace && tj_prog_write_trace(tr.step, a->trace)) {
                fprintf(stderr, "gpt2_train: --trace: %s\n", tj_error(tr.ctx));
                rc = 1;
            } else if (a->trace) printf("trace: %s (open in ui.perfetto.dev)\n", a->trace);
            break;
        }
        ms[i] = now_ms() - t0;
        if (loss != loss) { rc = 1; break; }
        printf("bench step %2d%s: loss %.4f  %.1f ms\n", i, i < warm ? " (warmup)" : "", loss, ms[i]);
        fflush(stdout);
    }
    if (!rc) {
        double med, fl = tj_prog_flops(tr.step), sum = 0, rss, hwm, worst = 0;
        for (i = warm; i < warm + n; i++) sum += ms[i];
        qsort(ms + warm, (size_t)n, sizeof(double), cmp_double);
        med = n % 2 ? ms[warm + n / 2] : 0.5 * (ms[warm + n / 2 - 1] + ms[warm + n / 2]);
        printf("bench: median %.1f ms/step (best %.1f, worst %.1f) over %d steps, %.0f tokens/s, %.1f GFLOP/s by the cost model", med, ms[warm],
               ms[warm + n - 1], n, ntok / (med * 1e-3), fl * 1e-9 / (med * 1e-3));
        if (cpu_peak > 0) printf(" = %.1f%% of the measured FP32 peak", 100 * fl * 1e-9 / (med * 1e-3) / cpu_peak);
        printf("\n");
        printf("bench: CPU time per step: %.0f ms user, %.0f ms system (%.2f of %ld cores busy)\n", (u1 - u0) / n * 1e3, (s1 - s0) / n * 1e3,
               ((u1 - u0) + (s1 - s0)) / (sum * 1e-3), ncpu);
        if (ndev == 1) printf("figure: %s step; %.1f; %d; ms\n", c.bf16 ? "bf16" : "f32", med, c.bf16 ? 900 : 1300);
        else printf("figure: step on %d devices; %.1f; ; ms\n", ndev, med);
        if (gpu && peak > 0)
            printf("bench: MFU %.1f%% (%.1f TFLOP/s of model FLOPs, %.2f TFLOP/step = 6 N + 12 L C T per token) against %s's %.0f TFLOP/s dense %s; "
                   "%.1f%% by the cost model (%.2f TFLOP/step, recompute included)\n",
                   100 * model / (med * 1e-3) / (peak * 1e12), model / (med * 1e-3) * 1e-12, model * 1e-12, card, peak,
                   c.bf16 ? "bf16" : gpt2_tf32_on() ? "TF32" : "f32", 100 * fl / (med * 1e-3) / (peak * 1e12), fl * 1e-12);
        else if (gpu)
            printf("bench: %.1f TFLOP/s of model FLOPs (6 N + 12 L C T per token); no peak known for %s: set GPT2_PEAK_TFLOPS for an MFU\n",
                   model / (med * 1e-3) * 1e-12, card);
        /* memory: the plan (arguments + outputs + temp arena - donated, per
           device) next to the library's allocator counts over the steps
           above (arrays + arenas of each device, most at one time), and the
           process's resident set against the plan of all devices */
        st = tj_get_alloc_stats(tr.ctx);
        bench_rss(&rss, &hwm);
        printf("bench: memory per device: plan %.2f MB (arguments %.2f + outputs %.2f + temp %.2f - donated %.2f); allocated at most:\n", plan.peak_bytes / 1e6,
               plan.argument_bytes / 1e6, plan.output_bytes / 1e6, plan.temp_bytes / 1e6, plan.alias_bytes / 1e6);
        for (d = 0; d < ndev; d++) {
            double r = plan.peak_bytes > 0 ? (double)st.device_peak_bytes[d] / (double)plan.peak_bytes : 0;
            printf("  device %d: %.2f MB = %.4f x plan\n", d, st.device_peak_bytes[d] / 1e6, r);
            if (r > worst) worst = r;
        }
        printf("figure: measured peak / plan; %.4f; 1.00; x\n", worst);
        if (!gpu)
            printf("bench: resident set %.1f MB now, %.1f MB at most: %+.1f MB beside the %d devices' plans (%.1f MB), of which %.1f MB were "
                   "resident before the first array (the program and the shared libraries it loaded%s); the rest is the matmul pack buffers, "
                   "thread stacks, the staging buffers of small collectives and the allocator's own\n",
                   rss / 1e6, hwm / 1e6, (hwm - (double)plan.peak_bytes * ndev) / 1e6, ndev, (double)plan.peak_bytes * ndev / 1e6, rss0 / 1e6,
#ifdef GPT2_CUDA
                   ": this build links CUDA, cuBLAS and NCCL"
#else
                   ""
#endif
            );
    }
    free(x);
    free(y);
    free(ms);
    gpt2_trainer_free(&tr);
    gpt2_gpu_close(gpu);
    return rc;
}

/* sample n tokens after the prompt; prints as it goes. 0, or 1 if a step failed */
static int sample(gpt2_trainer *tr, const gio_tokenizer *tok, const int32_t *prompt, size_t np, int n, double temp, int top_k, uint64_t seed) {
    int T = tr->cfg.T, V = tr->cfg.V, Vr = tr->cfg.V_real, i, j;
    int32_t *ctx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(np + (size_t)n + 1));
    float *row = (float *)malloc(sizeof(float) * (size_t)V);
    double *p = (double *)malloc(sizeof(double) * (size_t)V);
    size_t len = np;
    int failed = 0;
    if (!ctx || !row || !p) {
        free(ctx); free(row); free(p);
        fprintf(stderr, "gpt2_train: sample: out of memory\n");
        return 1;
    }
    memcpy(ctx, prompt, sizeof(int32_t) * np);
    for (i = 0; i < (int)np; i++) {
        size_t pl;
        const char *s = tok ? gio_tok_piece(tok, prompt[i], &pl) : NULL;
        if (s) fwrite(s, 1, pl, stdout);
    }
    for (i = 0; i < n; i++) {
        size_t start = len > (size_t)T ? len - (size_t)T : 0, pl;
        int best = 0, pick;
        double mx = -1e30, sum = 0, u;
        const char *s;
        if (gpt2_next_logits(tr, ctx + start, (int)(len - start), row)) { failed = 1; break; }
        for (j = 0; j < Vr; j++) if (row[j] > mx) { mx = row[j]; best = j; }
        if (temp <= 0) pick = best;
        else {
            float thresh = -1e30f;
            if (top_k > 0 && top_k < Vr) { /* k-th largest by partial selection */
                float *tmp = (float *)malloc(sizeof(float) * (size_t)Vr);
                int a, b;
                memcpy(tmp, row, sizeof(float) * (size_t)Vr);
                for (a = 0; a < top_k; a++) {
                    int m = a;
                    for (b = a + 1; b < Vr; b++) if (tmp[b] > tmp[m]) m = b;
                    { float t = tmp[a]; tmp[a] = tmp[m]; tmp[m] = t; }
                }
                thresh = tmp[top_k - 1];
                free(tmp);
            }
            for (j = 0; j < Vr; j++) { p[j] = row[j] >= thresh ? exp((row[j] - mx) / temp) : 0; sum += p[j]; }
            u = (double)(mix64(seed ^ mix64((uint64_t)i)) >> 11) / 9007199254740992.0 * sum;
            for (pick = 0; pick < Vr - 1 && u >= p[pick]; pick++) u -= p[pick];
        }
        ctx[len++] = pick;
        s = tok ? gio_tok_piece(tok, pick, &pl) : NULL;
        if (s) fwrite(s, 1, pl, stdout);
        else printf("<%d>", pick);
        fflush(stdout);
    }
    printf("\n");
    free(ctx);
    free(row);
    free(p);
    return failed;
}

/* copy a file into dir (atomically) */
static int copy_into(const char *src, const char *dir, const char *name, char *err, size_t n) {
    char *d, path[1100];
    size_t len;
    int st;
    if (tj_read_file(src, &d, &len, err, n)) return 1;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    st = tj_write_file_atomic(path, d, len, err, n);
    free(d);
    return st;
}
/* the tokenizer files the run used, beside the exported model */
static int export_tokenizer(const gpt2_args *a, char *err, size_t n) {
    if (a->vocab_json && (copy_into(a->vocab_json, a->export_hf, "vocab.json", err, n) || copy_into(a->merges_txt, a->export_hf, "merges.txt", err, n)))
        return 1;
    if (a->tokenizer_json && copy_into(a->tokenizer_json, a->export_hf, "tokenizer.json", err, n)) return 1;
    return 0;
}
/* --init-from without a tokenizer flag: the tokenizer that came with the
   weights (tokenizer.json, else vocab.json + merges.txt, beside them) */
static void find_tokenizer_beside(gpt2_args *a) {
    static char tj[1100], vj[1100], mt[1100];
    char dir[1024];
    const char *slash;
    if (is_dir(a->init_from)) snprintf(dir, sizeof dir, "%s", a->init_from);
    else if ((slash = strrchr(a->init_from, '/'))) snprintf(dir, sizeof dir, "%.*s", (int)(slash - a->init_from), a->init_from);
    else snprintf(dir, sizeof dir, ".");
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(vj, sizeof vj, "%s/vocab.json", dir);
    snprintf(mt, sizeof mt, "%s/merges.txt", dir);
    if (access(tj, R_OK) == 0) a->tokenizer_json = tj;
    else if (access(vj, R_OK) == 0 && access(mt, R_OK) == 0) { a->vocab_json = vj; a->merges_txt = mt; }
    else return;
    printf("tokenizer: %s, found beside the --init-from weights\n", a->tokenizer_json ? tj : vj);
}


/* Resume from the newest valid checkpoint among FILE and FILE.step*:
   0 on success, else 1 after a message. */
static int resume_newest(gpt2_trainer *tr, const char *file) {
    ckpt_file *f = (ckpt_file *)malloc(sizeof(ckpt_file) * 4096);
    int n, i;
    if (!f) { fprintf(stderr, "gpt2_train: resume: out of memory\n"); return 1; }
    n = ckpt_list(file, f, 4096);
    for (i = 0; i < n; i++) {
        tj_status st = gpt2_resume(tr, f[i].path);
        if (st == TJ_OK) {
            printf("resumed from %s at step %lld (the newest valid of %d checkpoint%s)\n", f[i].path, (long long)tr->step_no, n, n == 1 ? "" : "s");
            free(f);
            return 0;
        }
        fprintf(stderr, "gpt2_train: resume: skipping %s: %s\n", f[i].path, *tj_error(tr->ctx) ? tj_error(tr->ctx) : "not a checkpoint of this model");
        tj_clear_error(tr->ctx);
    }
    fprintf(stderr, "gpt2_train: resume: %s: no valid checkpoint among %d file%s\n", file, n, n == 1 ? "" : "s");
    free(f);
    return 1;
}

/* ------------------------------------------------------ processes and GPUs
   How gpt2_main starts, before any data or model. The launcher's process
   count and rank (mpirun's OMPI_COMM_WORLD_SIZE/RANK, PMI_SIZE/RANK, or
   TJ_NPROCS/TJ_RANK: what tj_distributed_init reads) and --cuda decide:
   - one process: the CPU, or GPU 0 with --cuda (the devices of a --mesh
     are simulated; with --cuda they share the GPU);
   - N processes on the CPU: the MPI transport (an mpicc -DTJ_MPI build);
   - N processes with --cuda: one device per process, each on its own GPU,
     collectives through the NCCL transport (a -DTJ_NCCL build). Its
     bootstrap (tinyjax_cuda.cu) picks the GPU from the node's local rank
     and sends the NCCL id by MPI_Bcast under mpirun (a TJ_MPI build),
     else through TJ_COORD (host:port, or a shared file's path).
   The checks that need no GPU come first, so an impossible setup fails in
   every process at once with the same message. --dry-run stops after the
   launch (the NCCL communicators made, no kernel run) and prints what each
   process got. */
typedef struct {
    int nprocs, rank;
    tj_transport *t;     /* --cuda in several processes: the NCCL transport  */
    int gpu;             /* --cuda: the CUDA device of this process; else -1  */
    int ngpu;            /* --cuda --dry-run: the GPUs this process sees      */
    tj_backend *backend; /* --cuda: its backend (not made by --dry-run)       */
    char card[300];
} gpt2_launch;

/* processes and rank as the launcher gives them; 1 after a message */
static int launcher_env(int *np, int *rank) {
    static const char *sz[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "TJ_NPROCS"}, *rk[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "TJ_RANK"};
    size_t i;
    *np = 1;
    *rank = 0;
    for (i = 0; i < 3; i++) {
        const char *n = getenv(sz[i]), *r = getenv(rk[i]);
        char *e1 = NULL, *e2 = NULL;
        long vn, vr;
        if (!n) continue;
        vn = strtol(n, &e1, 10);
        vr = r ? strtol(r, &e2, 10) : -1;
        if (!*n || *e1 || !r || !*r || *e2 || vn < 1 || vn > TJ_MAXDEV || vr < 0 || vr >= vn) {
            fprintf(stderr, "gpt2_train: %s='%s' and %s='%s' are not a process count (1..%d) and a rank below it\n", sz[i], n, rk[i], r ? r : "(unset)",
                    TJ_MAXDEV);
            return 1;
        }
        *np = (int)vn;
        *rank = (int)vr;
        return 0;
    }
    return 0;
}

/* after the trainer (whose context uses both) is freed */
static void gpt2_launch_close(gpt2_launch *L) {
    if (L->t) L->t->free(L->t);
    gpt2_gpu_close(L->backend);
    L->t = NULL;
    L->backend = NULL;
}
/* the launch for args a (see above); 0, or 1 after a message */
static int gpt2_launch_open(const gpt2_args *a, gpt2_launch *L) {
    memset(L, 0, sizeof *L);
    L->gpu = -1;
    if (launcher_env(&L->nprocs, &L->rank)) return 1;
    if (a->devices > 1) { /* a bad mesh fails here, before any process waits for another */
        tj_ctx *c = tj_ctx_new();
        int bad = !c || tj_set_devices(c, a->devices) || tj_set_mesh(c, a->mesh);
        if (bad) fprintf(stderr, "gpt2_train: --mesh \"%s\" on %d devices: %s\n", a->mesh, a->devices, c ? tj_error(c) : "out of memory");
        tj_ctx_free(c);
        if (bad) return 1;
    }
    if (a->cuda && L->nprocs > 1) {
#ifndef GPT2_CUDA
        fprintf(stderr, "gpt2_train: --cuda in %d processes: this gpt2_train was built without the CUDA backend (build.sh builds it with nvcc, "
                        "linking tinyjax_cuda.cu and cuBLAS, and NCCL when libnccl is present)\n", L->nprocs);
        return 1;
#elif !defined(TJ_NCCL)
        fprintf(stderr, "gpt2_train: --cuda in %d processes: collectives between GPUs go through NCCL, and this gpt2_train was built without it "
                        "(build.sh adds it, -DTJ_NCCL and -lnccl, when it finds nccl.h and libnccl); one process runs --cuda on GPU 0\n", L->nprocs);
        return 1;
#else
        char err[512];
        if (a->devices != L->nprocs) {
            fprintf(stderr, "gpt2_train: --cuda in %d processes runs one device per process, each on its own GPU, so the mesh needs %d devices; %s%s%s has %d "
                            "(give --mesh \"data=%d\", or one whose sizes multiply to %d; simulated devices sharing a GPU run in one process only)\n",
                    L->nprocs, L->nprocs, a->devices > 1 ? "--mesh \"" : "", a->devices > 1 ? a->mesh : "the default without --mesh", a->devices > 1 ? "\"" : "",
                    a->devices, L->nprocs, L->nprocs);
            return 1;
        }
        if (!(L->t = tj_nccl_transport_new(1, 0, -1, err, sizeof err))) {
            fprintf(stderr, "gpt2_train: --cuda in %d processes (process %d): %s\n", L->nprocs, L->rank, err);
            return 1;
        }
        L->nprocs = L->t->nprocs;
        L->rank = L->t->rank;
        L->gpu = tj_nccl_transport_gpu(L->t, 0);
#endif
    } else if (L->nprocs > 1) { /* the CPU: tj_distributed_init makes the MPI transport (or says why it cannot) */
        tj_ctx *c = tj_ctx_new();
        if (!c || tj_distributed_init(c, NULL)) {
            fprintf(stderr, "gpt2_train: %s\n", c ? tj_error(c) : "out of memory");
            tj_ctx_free(c);
            return 1;
        }
        L->nprocs = tj_process_count(c);
        L->rank = tj_process_index(c);
        tj_ctx_free(c);
    }
    if (a->cuda && L->gpu < 0) L->gpu = 0;
#ifdef GPT2_CUDA
    if (a->cuda && a->dry_run) { /* no backend made: check that the GPU is there */
        cudaError_t ce = cudaGetDeviceCount(&L->ngpu);
        if (ce != cudaSuccess || L->gpu >= L->ngpu) {
            fprintf(stderr, "gpt2_train: --cuda: GPU %d: %s\n", L->gpu, ce != cudaSuccess ? cudaGetErrorString(ce) : "this node has fewer GPUs");
            gpt2_launch_close(L);
            return 1;
        }
    }
#endif
    if (a->cuda && !a->dry_run && !(L->backend = gpt2_gpu_open_at(L->gpu, L->card, sizeof L->card))) {
        gpt2_launch_close(L);
        return 1;
    }
    return 0;
}
/* --dry-run: every process prints what it got */
static int gpt2_dry_run(const gpt2_args *a, gpt2_launch *L) {
    char where[200] = "the CPU";
    const char *coord = getenv("TJ_COORD");
    if (a->cuda) snprintf(where, sizeof where, "GPU %d of %d on this node", L->gpu, L->ngpu);
    if (L->t)
        printf("launch: process %d of %d, device %d of mesh \"%s\", %s, transport %s (NCCL id %s%s)\n", L->rank, L->nprocs, L->rank, a->mesh, where, L->t->name,
               coord && *coord ? "through TJ_COORD=" : "by MPI_Bcast", coord && *coord ? coord : "");
    else if (L->nprocs > 1)
        printf("launch: process %d of %d, devices %d..%d of mesh \"%s\", %s, transport mpi\n", L->rank, L->nprocs, L->rank * (a->devices / L->nprocs),
               (L->rank + 1) * (a->devices / L->nprocs) - 1, a->mesh, where);
    else printf("launch: one process, %d device%s%s%s%s, %s\n", a->devices, a->devices == 1 ? "" : "s", a->devices > 1 ? " (mesh \"" : "",
                a->devices > 1 ? a->mesh : "", a->devices > 1 ? "\")" : "", where);
    printf("dry run: stopped before data, model and kernels\n");
    gpt2_launch_close(L);
    return 0;
}

static int gpt2_main(int argc, char **argv) {
    gpt2_args a;
    gpt2_trainer tr;
    gio_tokenizer tok;
    int have_tok = 0;
    int32_t *data = NULL, *x, *y;
    size_t ndata = 0, ntrain, nval;
    double *tr_step, *tr_loss, *va_step, *va_loss, t_start, unigram, best_val = NAN;
    size_t n_tr = 0, n_va = 0;
    int32_t data_top = -1;
    int64_t s;
    char err[512], src[1100];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    gio_trace trace;
    gpt2_hf hf;
    int rc = 0;      /* the exit status: 1 once a write failed or training stopped on an error */
    int stopped = 0; /* training stopped on an error: no final checkpoint, no sample */
    int nprocs = 1, rank = 0;
    gpt2_launch L;          /* processes, transport, GPU */
    tj_backend *gpu = NULL; /* --cuda: L.backend */

    memset(&hf, 0, sizeof hf);
    if (parse_args(argc, argv, &a)) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (a.cost && !a.bench) {
        fprintf(stderr, "gpt2_train: --cost needs --bench (it analyses the benchmark's step program)\n");
        return 2;
    }
    if (a.cost && !strcmp(a.cost, "card") && !a.cuda) {
        fprintf(stderr, "gpt2_train: --cost card needs --cuda (the GPU's own peak and bandwidth)\n");
        return 2;
    }
    if (a.bench) return run_bench(&a);
    if (gpt2_launch_open(&a, &L)) return 1;
    if (a.dry_run) return gpt2_dry_run(&a, &L);
    gpu = L.backend;
    {   /* several processes: each runs devices / processes of the mesh;
           every process reads the same data, process 0 prints and writes
           the loss curve, traces and checkpoints */
        nprocs = L.nprocs;
        rank = L.rank;
        a.cfg.distributed = nprocs > 1;
        if (rank > 0) {
            if (!freopen("/dev/null", "w", stdout)) return 1;
            a.svg = NULL;
            a.trace = NULL;
        }
        if (a.cuda) printf("cuda: %s%s%s\n", L.t ? "one GPU per process, process 0 on " : "", L.card, gpt2_tf32_on() ? "; f32 dots may use TF32 (TJ_CUDA_TF32=1)" : "");
        if (nprocs > 1) { /* cores per device: this host's processes share them */
            const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
            int here = (ls && atoi(ls) > 0 ? atoi(ls) : nprocs) * (a.devices / nprocs > 0 ? a.devices / nprocs : 1);
            if (a.threads <= 0) a.threads = (int)(ncpu / here > 0 ? ncpu / here : 1);
        }
    }

    /* ---- data */
    if (a.vocab_json && a.tokenizer_json) { fprintf(stderr, "gpt2_train: give --tokenizer or --tokenizer-json, not both\n"); return 1; }
    if (a.init_from && !a.vocab_json && !a.tokenizer_json) find_tokenizer_beside(&a);
    if (a.tokenizer_json) {
        if (gio_tok_load_hf(&tok, a.tokenizer_json, err, sizeof err)) { fprintf(stderr, "gpt2_train: --tokenizer-json: %s\n", err); return 1; }
        have_tok = 1;
    } else if (a.vocab_json) {
        if (gio_tok_load_gpt2(&tok, a.vocab_json, a.merges_txt, err, sizeof err)) { fprintf(stderr, "gpt2_train: %s\n", err); return 1; }
        have_tok = 1;
    } else if (!a.tokens) {
        gio_tok_init_bytes(&tok);
        have_tok = 1;
    }
    if (a.tokens) {
        size_t k;
        int32_t top = -1;
        if (gio_tokens_read(a.tokens, &data, &ndata, err, sizeof err)) { fprintf(stderr, "gpt2_train: %s\n", err); return 1; }
        for (k = 0; k < ndata; k++) if (data[k] > top) top = data[k];
        /* GPT-2's vocabulary (or the tokenizer's), unless the file has larger ids */
        a.cfg.V_real = have_tok ? tok.vocab_size : 50257;
        if (top >= a.cfg.V_real) {
            if (top >= (1 << 24)) { fprintf(stderr, "gpt2_train: %s: token id %ld is too large for a vocabulary\n", a.tokens, (long)top); free(data); return 1; }
            if (have_tok) {
                fprintf(stderr, "gpt2_train: %s: token id %ld is outside the tokenizer's vocabulary of %d\n", a.tokens, (long)top, tok.vocab_size);
                free(data);
                return 1;
            }
            a.cfg.V_real = top + 1;
        }
        data_top = top;
        printf("data: %s, %zu tokens (largest id %ld; vocabulary %d)\n", a.tokens, ndata, (long)top, a.cfg.V_real);
    } else {
        char *text = NULL;
        size_t len = 0;
        if (a.data) {
            if (tj_read_file(a.data, &text, &len, err, sizeof err)) { fprintf(stderr, "gpt2_train: %s\n", err); return 1; }
            snprintf(src, sizeof src, "%s", a.data);
        } else if (!(text = default_corpus(&len, src, sizeof src))) {
            fprintf(stderr, "gpt2_train: cannot find the project's sources (tinyjax.h) from here or the executable; use --data FILE\n");
            return 1;
        }
        if (gio_tok_encode_special(&tok, text, len, a.allow_special, &data, &ndata, err, sizeof err)) { fprintf(stderr, "gpt2_train: %s\n", err); free(text); return 1; }
        a.cfg.V_real = tok.vocab_size;
        if (gio_tok_special_count(&tok)) {
            size_t pl;
            const char *p0 = gio_tok_piece(&tok, gio_tok_special_id(&tok, 0), &pl);
            printf("tokenizer: %d special token%s (%.*s = %ld%s); in the text they are encoded %s\n", gio_tok_special_count(&tok),
                   gio_tok_special_count(&tok) > 1 ? "s" : "", (int)pl, p0 ? p0 : "", (long)gio_tok_special_id(&tok, 0),
                   gio_tok_special_count(&tok) > 1 ? ", .." : "", a.allow_special ? "as their ids (--allow-special)" : "as ordinary text (see --allow-special)");
        }
        printf("data: %s%s, %zu bytes -> %zu tokens (%s tokenizer, vocab %d)\n", a.data ? "" : "project sources under ", src, len, ndata,
               tok.kind == GIO_TOK_GPT2 ? "GPT-2 BPE" : "byte", tok.vocab_size);
        free(text);
    }
    if (a.init_from) { /* the model's sizes are the file's */
        int data_vocab = a.tokens ? (int)data_top + 1 : a.cfg.V_real;
        if (gpt2_hf_open(&hf, a.init_from, err, sizeof err)) { fprintf(stderr, "gpt2_train: --init-from: %s\n", err); free(data); return 1; }
        if ((a.layers_set && a.cfg.L != hf.L) || (a.embed_set && a.cfg.C != hf.C) || (a.context_set && a.cfg.T > hf.P)) {
            fprintf(stderr, "gpt2_train: --init-from %s: the file has %d layers, %d channels, %d positions; --layers/--embed/--context disagree\n", a.init_from,
                    hf.L, hf.C, hf.P);
            return 1;
        }
        if (gpt2_hf_config(&hf, &a.cfg, a.heads_set ? a.cfg.H : 0, err, sizeof err)) { fprintf(stderr, "gpt2_train: --init-from: %s\n", err); return 1; }
        if (data_vocab > a.cfg.V_real) {
            fprintf(stderr, "gpt2_train: --init-from %s: the data has vocabulary %d, the model only %d tokens\n", a.init_from, data_vocab, a.cfg.V_real);
            return 1;
        }
    } else {
        a.cfg.V = (a.cfg.V_real + 63) / 64 * 64; /* padded: divisible by every mesh axis we use */
        if (a.cfg.V_real <= 256) a.cfg.V = 256;
    }
    ntrain = ndata * 9 / 10;
    nval = ndata - ntrain;
    if (nval < (size_t)a.cfg.T + 2 || ntrain < (size_t)a.cfg.T + 2) { fprintf(stderr, "gpt2_train: %zu tokens is too little data for context %d\n", ndata, a.cfg.T); return 1; }
    unigram = unigram_entropy(data, ntrain, a.cfg.V);
    printf("data: %zu train / %zu validation tokens; unigram entropy of the training tokens %.4f nats (the loss of a model without context)\n", ntrain, nval,
           unigram);

    /* ---- model, mesh, programs */
    /* a.threads 0: the library's default, all cores split among the devices
       (as fibers on the cores when they are more) */
    t_start = now_ms();
    if (gpt2_trainer_init_at(&tr, &a.cfg, a.devices, a.mesh, a.threads, gpu, L.t)) { gpt2_launch_close(&L); return 1; }
    {
        tj_memory_analysis m = tj_prog_memory(tr.step);
        char accum[96] = "";
        if (tr.cfg.accum > 1)
            snprintf(accum, sizeof accum, " = %d micro-batches of %d (gradients accumulated %s)", tr.cfg.accum, tr.cfg.B,
                     accum_unrolled(&tr.cfg) ? "unrolled" : "by a scan");
        printf("model: %lld params (L=%d H=%d C=%d T=%d V=%d), batch %d%s, %s compute, remat %s\n", (long long)gpt2_num_params(&tr.cfg), tr.cfg.L,
               tr.cfg.H, tr.cfg.C, tr.cfg.T, tr.cfg.V, tr.cfg.accum * tr.cfg.B, accum, tr.cfg.bf16 ? "bf16" : "f32", remat_names[tr.cfg.remat]);
        if (tr.auto_note)
            printf("remat auto: %s (planned peak %.2f MB per device; budget %.0f MB)\n", tr.auto_note, tr.auto_peak / 1e6,
                   tr.auto_budget / 1e6);
        if (tr.cfg.dropout > 0)
            printf("dropout: %g on the embeddings and on attention's and the MLP's outputs%s; a fresh mask every step, micro-batch and layer\n",
                   tr.cfg.dropout, tr.cfg.attn_composed ? " and the attention probabilities" : " (not the attention probabilities: fused attention)");
        if (nprocs > 1) printf("processes: %d (transport %s), %d devices each; process 0 prints and writes files\n", nprocs, tj_transport_name(tr.ctx), a.devices / nprocs);
        char thr[64];
        long cores = ncpu > 16 ? 16 : ncpu; /* the library's default */
        if (a.threads > 0 || a.devices <= cores || a.cuda || nprocs > 1)
            snprintf(thr, sizeof thr, "%d threads each", a.threads > 0 ? a.threads : (int)(cores / a.devices));
        else snprintf(thr, sizeof thr, "as fibers on %ld threads", cores);
        printf("mesh: %d devices%s%s, %s; params: %s; compute: %s%s\n", a.devices, a.devices > 1 ? ", " : "", a.devices > 1 ? a.mesh : "",
               thr, tr.cfg.param_rules ? tr.cfg.param_rules : "replicated", tr.cfg.compute_rules ? tr.cfg.compute_rules : "replicated",
               tr.cfg.seq_parallel && tr.cfg.compute_rules ? "; residual stream: + pos:model (sequence parallel)" : "");
        printf("train step: one program, %.2f GFLOP; per device: args %.2f MB, temp %.2f MB, host temp %.2f MB, peak %.2f MB; compiled in %.0f ms\n",
               tj_prog_flops(tr.step) * 1e-9, m.argument_bytes / 1e6, m.temp_bytes / 1e6, m.host_temp_bytes / 1e6, m.peak_bytes / 1e6, now_ms() - t_start);
        {
            tj_collective cols[512];
            int nc = tj_prog_collectives(tr.step, cols, 512), k, cnt[4] = {0, 0, 0, 0};
            int64_t bytes = 0;
            const char *kinds[4] = {"all_gather", "psum", "reduce_scatter", "shard_slice"};
            for (k = 0; k < nc && k < 512; k++) {
                int j;
                for (j = 0; j < 4; j++) if (!strcmp(cols[k].kind, kinds[j])) cnt[j]++;
                bytes += cols[k].bytes * cols[k].calls;
            }
            if (nc) printf("collectives: %d in the program (%d all-gather, %d psum, %d reduce-scatter, %d shard-slice), %.2f MB of buffers per device per step "
                           "(each run counted; tools/comm_report.c: bytes on the wire)\n", nc, cnt[0], cnt[1], cnt[2], cnt[3], bytes / 1e6);
        }
        if (a.print_program) {
            tj_prog_print(tr.step, stdout);
            tj_memory_print(tr.step, stdout);
            tj_prog_residuals_print(tr.step, stdout);
        }
    }
    if (a.init_from) {
        double t0 = now_ms();
        int bad = gpt2_hf_load(&tr, &hf, err, sizeof err);
        char how[700];
        if (hf.config[0]) snprintf(how, sizeof how, "config %s", hf.config);
        else snprintf(how, sizeof how, "no config.json: heads from %s", a.heads_set ? "--heads" : "embed / 64");
        gpt2_hf_close(&hf);
        if (bad) {
            fprintf(stderr, "gpt2_train: --init-from: %s\n", err);
            gpt2_trainer_free(&tr);
            gpt2_launch_close(&L);
            return 1;
        }
        printf("init: Hugging Face GPT-2 weights from %s (L=%d H=%d C=%d, vocab %d padded to %d, %d positions, layer norm eps %g, %s; %s) in %.0f ms\n",
               a.init_from, tr.cfg.L, tr.cfg.H, tr.cfg.C, tr.cfg.V_real, tr.cfg.V, tr.cfg.block, tr.cfg.ln_eps, tr.cfg.act == ACT_RELU ? "relu" : "gelu_new",
               how, now_ms() - t0);
    }
    if (a.resume && resume_newest(&tr, a.resume)) {
        gpt2_trainer_free(&tr);
        gpt2_launch_close(&L);
        free(data);
        if (have_tok) gio_tok_free(&tok);
        return 1;
    }

    /* ---- train */
    x = (int32_t *)malloc(sizeof(int32_t) * (size_t)(a.cfg.accum * a.cfg.B * a.cfg.T));
    y = (int32_t *)malloc(sizeof(int32_t) * (size_t)(a.cfg.accum * a.cfg.B * a.cfg.T));
    tr_step = (double *)malloc(sizeof(double) * (size_t)(a.steps + 1));
    tr_loss = (double *)malloc(sizeof(double) * (size_t)(a.steps + 1));
    va_step = (double *)malloc(sizeof(double) * (size_t)(a.steps / a.eval_every + 3));
    va_loss = (double *)malloc(sizeof(double) * (size_t)(a.steps / a.eval_every + 3));
    gio_trace_init(&trace);
    gio_trace_process_name(&trace, 1, "gpt2_train (host)");
    gio_trace_track_name(&trace, 1, 1, "steps");
    t_start = now_ms();
    for (s = tr.step_no; s <= a.steps; s++) {
        int last = s == a.steps;
        if (s % a.eval_every == 0 || last) {
            double sum = 0, t0 = now_ms();
            int k;
            for (k = 0; k < a.eval_batches; k++) {
                get_batch(data + ntrain, nval, a.cfg.B, a.cfg.T, a.cfg.seed, 2, (uint64_t)k, x, y);
                sum += gpt2_eval_loss(&tr, x, y);
            }
            sum /= a.eval_batches;
            va_step[n_va] = (double)s;
            va_loss[n_va++] = sum;
            if (!(sum >= best_val)) best_val = sum;
            gio_trace_event(&trace, "eval", "eval", 1, 1, (t0 - t_start) * 1e3, (now_ms() - t0) * 1e3, NULL);
            printf("step %5lld | val loss %.4f (unigram baseline %.4f) | %d batches in %.0f ms\n", (long long)s, sum, unigram, a.eval_batches, now_ms() - t0);
            if (sum != sum) {
                fprintf(stderr, "gpt2_train: the validation loss is NaN at step %lld (diverged, or the evaluation failed: see above)\n", (long long)s);
                rc = stopped = 1;
                break;
            }
        }
        if (last) break;
        {
            double lr = lr_at(s, a.steps, a.warmup, a.lr, a.min_lr_frac), t0 = now_ms(), dt;
            float loss;
            char args[96];
            tj_memory_analysis m = tj_prog_memory(tr.step);
            gpt2_next_batch(&tr, data, ntrain, a.cfg.seed, x, y);
            /* --trace: profile the second step (the first one also allocates) */
            if (a.trace && n_tr == 1) tj_set_profile(tr.ctx, 1);
            loss = gpt2_train_step(&tr, x, y, lr);
            dt = now_ms() - t0;
            if (a.trace && n_tr == 1) {
                tj_set_profile(tr.ctx, 0);
                if (tj_prog_write_trace(tr.step, a.trace)) { /* an optional output: training goes on, the exit status is 1 */
                    fprintf(stderr, "gpt2_train: --trace: %s\n", tj_error(tr.ctx));
                    tj_clear_error(tr.ctx); /* or the next step would fail on this error */
                    rc = 1;
                } else printf("trace: %s: one step, a track per device and stream: kernels, fused loops, collectives; offload copies (open in ui.perfetto.dev)\n",
                            a.trace);
            }
            snprintf(args, sizeof args, "loss %.4f", loss);
            gio_trace_event(&trace, "train_step", "step", 1, 1, (t0 - t_start) * 1e3, dt * 1e3, args);
            if (loss != loss) {
                fprintf(stderr, "gpt2_train: the loss is NaN at step %lld (diverged, or the step failed: see above)\n", (long long)s);
                rc = stopped = 1;
                break;
            }
            tr_step[n_tr] = (double)s;
            tr_loss[n_tr++] = loss;
            printf("step %5lld | loss %.4f | lr %.2e | gnorm %6.3f | %dx%d seqs | %7.0f tok/s | %6.1f ms | temp %.2f MB/device\n", (long long)s, loss, lr,
                   tr.last_gnorm, a.cfg.accum, a.cfg.B, a.cfg.accum * a.cfg.B * a.cfg.T / (dt * 1e-3), dt, m.temp_bytes / 1e6);
            if (a.save_every && tr.step_no % a.save_every == 0) { /* periodic checkpoint: a kill loses at most K steps */
                char ck[1400];
                ckpt_step_name(ck, sizeof ck, a.save, tr.step_no);
                if (gpt2_save(&tr, ck)) {
                    fprintf(stderr, "gpt2_train: checkpoint at step %lld to %s failed: %s\n", (long long)tr.step_no, ck, tj_error(tr.ctx));
                    tj_clear_error(tr.ctx);
                    rc = stopped = 1;
                    break;
                }
                if (rank == 0) ckpt_prune(a.save, a.keep); /* under mpirun process 0 owns the files */
                printf("checkpoint: %s (after %lld steps)\n", ck, (long long)tr.step_no);
            }
        }
    }
    printf("trained %zu steps in %.1f s; best val loss %.4f vs unigram %.4f (%s)\n", n_tr, (now_ms() - t_start) / 1e3, best_val, unigram,
           best_val < unigram - 0.1 ? "clearly below: the model uses context" : "not clearly below the unigram baseline");
    if (a.svg && *a.svg && n_tr && !gio_svg_loss_curve(a.svg, "tinyjax GPT-2: loss (nats)", tr_step, tr_loss, n_tr, va_step, va_loss, n_va, err, sizeof err))
        printf("loss curve: %s\n", a.svg);
    else if (a.svg && *a.svg && n_tr) {
        fprintf(stderr, "gpt2_train: --svg: %s\n", err);
        rc = 1;
    }
    if (a.save && !stopped) { /* not after a failed step: the state may be broken */
        tj_status st = gpt2_save(&tr, a.save);
        if (st) {
            fprintf(stderr, "gpt2_train: --save: checkpoint at step %lld failed: %s\n", (long long)tr.step_no, tj_error(tr.ctx));
            rc = 1;
        } else printf("checkpoint: %s (after %lld steps)\n", a.save, (long long)tr.step_no);
        tj_clear_error(tr.ctx);
    }
    if (a.export_hf) {
        int eos = have_tok && tok.kind == GIO_TOK_GPT2 ? gio_tok_lookup(&tok, "<|endoftext|>", 13) : -1;
        if (gpt2_export_hf(&tr, a.export_hf, eos, err, sizeof err) || export_tokenizer(&a, err, sizeof err)) {
            fprintf(stderr, "gpt2_train: %s\n", err);
            free(x); free(y); free(tr_step); free(tr_loss); free(va_step); free(va_loss);
            free(data);
            if (have_tok) gio_tok_free(&tok);
            gio_trace_free(&trace);
            gpt2_trainer_free(&tr);
            gpt2_launch_close(&L);
            return 1;
        }
        printf("export: %s/model.safetensors and config.json (Hugging Face GPT-2, L=%d H=%d C=%d, vocab %d)\n", a.export_hf, tr.cfg.L, tr.cfg.H, tr.cfg.C,
               tr.cfg.V_real);
    }
    if (!stopped && a.sample_len > 0 && (n_tr || a.init_from || a.resume)) {
        int32_t *pr = NULL;
        size_t np = 0;
        if (have_tok && a.prompt && *a.prompt && !gio_tok_encode_special(&tok, a.prompt, strlen(a.prompt), a.allow_special, &pr, &np, err, sizeof err) && np) {
            printf("--- sample (temperature %.2f, top-k %d) ---\n", a.temperature, a.top_k);
            if (sample(&tr, &tok, pr, np, a.sample_len, a.temperature, a.top_k, a.cfg.seed)) rc = 1;
        } else {
            int32_t start = 0;
            printf("--- sample (temperature %.2f, top-k %d) ---\n", a.temperature, a.top_k);
            if (sample(&tr, have_tok ? &tok : NULL, &start, 1, a.sample_len, a.temperature, a.top_k, a.cfg.seed)) rc = 1;
        }
        printf("---\n");
        free(pr);
    }
    if (a.trace) { /* the host's view of every step, beside the one-step device trace */
        char host[1024];
        snprintf(host, sizeof host, "%s.steps.json", a.trace);
        if (gio_trace_write(&trace, host)) {
            fprintf(stderr, "gpt2_train: --trace: %s\n", trace.err);
            rc = 1;
        } else printf("trace: %s: host-side phases of every step\n", host);
    }
    gio_trace_free(&trace);
    free(x); free(y); free(tr_step); free(tr_loss); free(va_step); free(va_loss);
    free(data);
    if (have_tok) gio_tok_free(&tok);
    gpt2_trainer_free(&tr);
    gpt2_launch_close(&L);
    return rc;
}
#endif /* !GPT2_NO_MAIN || GPT2_CLI */
#ifndef GPT2_NO_MAIN
int main(int argc, char **argv) { return gpt2_main(argc, argv); }
#endif
