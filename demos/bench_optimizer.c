/* bench_optimizer: the GPT-2 demo's optimizer step alone (global-norm clip
   + AdamW, gpt2_adamw in demos/gpt2_model.h) at the 124M shape, on
   deterministic pseudo-random params, grads and moments. Prints ms per step
   (median, min, max of wall and of process CPU time), the GB/s that implies
   for the bytes the step must move (grads read twice: once for the norm,
   once for the update; params, m, v read and written), the per-op profile of
   one step, and a hash of the outputs after the first step, so two builds
   can be checked for identical bits.
   build: gcc -O3 -std=c99 -pthread -I. demos/bench_optimizer.c -o build/bench_optimizer -lm
   Optional arguments: timed steps (default 10), threads (default: all cores),
   "print" (print the compiled program and its memory plan). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#define TINYJAX_IMPLEMENTATION
#include "gpt2_model.h"

static double now_s(int cpu) {
    struct timespec ts;
    clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
/* n floats in [lo, hi) from seed */
static float *fill(int64_t n, uint64_t seed, double lo, double hi) {
    float *f = (float *)malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    int64_t i;
    if (!f) return NULL;
    for (i = 0; i < n; i++) f[i] = (float)(lo + (hi - lo) * (double)(mix64(seed * 0x9e3779b97f4a7c15ull + (uint64_t)i) >> 11) * 0x1p-53);
    return f;
}
static int set_leaf(tj_ctx *ctx, tj_tree *t, const char *prefix, const gpt2_config *c, int i, uint64_t seed, double lo, double hi) {
    char name[128], shape[256];
    float *f = fill(param_numel(c, i), seed, lo, hi);
    tj_array *a;
    if (!f) return 1;
    a = tj_array_new(ctx, TJ_F32, param_shape(c, i, shape, sizeof shape), f);
    free(f);
    snprintf(name, sizeof name, "%s%s", prefix, gpt2_params[i].name);
    return !a || tj_tree_set_array(t, name, a);
}
static int set_scalar(tj_ctx *ctx, tj_tree *t, const char *name, double v) {
    float f = (float)v;
    tj_array *a = tj_array_new(ctx, TJ_F32, "", &f);
    return !a || tj_tree_set_array(t, name, a);
}

static void opt_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) {
    const gpt2_config *c = (const gpt2_config *)user;
    tj_tree *P = tj_tree_new(tj_graph_ctx(g)), *G = tj_tree_new(tj_graph_ctx(g));
    char name[128];
    int i;
    gpt2_param_tree(in, P);
    for (i = 0; i < NPARAMS; i++) {
        snprintf(name, sizeof name, "grads.%s", gpt2_params[i].name);
        tj_tree_set_v(G, gpt2_params[i].name, tj_tree_v(in, name));
    }
    tj_tree_set_v(out, "gnorm", gpt2_adamw(c, g, in, P, G, out));
    tj_tree_free(P);
    tj_tree_free(G);
}

/* FNV-1a over every output leaf's f32 bits */
static uint64_t hash_tree(tj_tree *t) {
    uint64_t h = 1469598103934665603ull;
    int i;
    for (i = 0; i < tj_tree_size(t); i++) {
        tj_array *a = tj_tree_array_at(t, i);
        int64_t n = tj_array_numel(a), k;
        uint32_t *u = (uint32_t *)malloc(sizeof(uint32_t) * (size_t)(n > 0 ? n : 1));
        if (!u || tj_array_read(a, TJ_F32, u)) { free(u); return 0; }
        for (k = 0; k < n; k++) h = (h ^ u[k]) * 1099511628211ull;
        free(u);
    }
    return h;
}

int main(int argc, char **argv) {
    gpt2_config c;
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *state, *out;
    tj_prog *prog;
    tj_jit_opts donate;
    int n = argc > 1 ? atoi(argv[1]) : 10, threads = argc > 2 ? atoi(argv[2]) : (int)sysconf(_SC_NPROCESSORS_ONLN), i, s, warm = 1;
    double *wall, *cpu, bytes;
    int64_t np;
    (void)gpt2_init_fn, (void)gpt2_step_fn, (void)gpt2_eval_fn, (void)gpt2_logits_fn; /* the model's other programs: not timed here */
    gpt2_default_config(&c);
    c.L = 12; c.H = 12; c.C = 768; c.M = 3072; c.V = 50304; c.V_real = 50257; c.T = 64; c.block = 1024; c.B = 4;
    np = gpt2_num_params(&c);
    if (n < 1 || threads < 1) { /* --help, or not a count */
        fprintf(stderr, "usage: bench_optimizer [timed steps (10)] [threads (all cores)] [print]\n");
        return 2;
    }
    if (!ctx) return 1;
    tj_set_threads(ctx, threads);
    state = tj_tree_new(ctx);
    for (i = 0; i < NPARAMS; i++)
        if (set_leaf(ctx, state, "params.", &c, i, 1 + (uint64_t)i, -0.1, 0.1) || set_leaf(ctx, state, "grads.", &c, i, 101 + (uint64_t)i, -1e-3, 1e-3) ||
            set_leaf(ctx, state, "m.", &c, i, 201 + (uint64_t)i, -1e-4, 1e-4) || set_leaf(ctx, state, "v.", &c, i, 301 + (uint64_t)i, 0, 1e-6)) {
            fprintf(stderr, "bench_optimizer: %s\n", tj_error(ctx));
            return 1;
        }
    if (set_scalar(ctx, state, "lr", 1e-4) || set_scalar(ctx, state, "t", 1.0)) return 1;
    memset(&donate, 0, sizeof donate);
    donate.donate = "params. m. v.";
    prog = tj_jit(ctx, "adamw", opt_fn, &c, state, &donate);
    if (!prog) {
        fprintf(stderr, "bench_optimizer: %s\n", tj_error(ctx));
        return 1;
    }
    if (argc > 3 && !strcmp(argv[3], "print")) tj_prog_print(prog, stdout);
    wall = (double *)malloc(sizeof(double) * (size_t)(n + warm));
    cpu = (double *)malloc(sizeof(double) * (size_t)(n + warm));
    printf("bench_optimizer: AdamW + global-norm clip, GPT-2 124M shape: %lld params, %d threads\n", (long long)np, threads);
    for (s = 0; s < n + warm; s++) {
        double w0, c0;
        out = tj_tree_new(ctx);
        tj_set_profile(ctx, s == warm);
        w0 = now_s(0), c0 = now_s(1);
        if (tj_run(prog, state, out)) {
            fprintf(stderr, "bench_optimizer: %s\n", tj_error(ctx));
            return 1;
        }
        wall[s] = 1e3 * (now_s(0) - w0), cpu[s] = 1e3 * (now_s(1) - c0);
        if (s == 0) printf("output hash after step 1: %016llx\n", (unsigned long long)hash_tree(out));
        if (s == warm) { /* the profile of one step: time per op kind */
            int ne = tj_prog_events(prog, NULL, 0), k, j, nk = 0;
            tj_event *ev = (tj_event *)malloc(sizeof(tj_event) * (size_t)(ne > 0 ? ne : 1));
            char kinds[32][24];
            double us[32] = {0};
            int cnt[32] = {0};
            ne = tj_prog_events(prog, ev, ne);
            for (k = 0; k < ne; k++) {
                for (j = 0; j < nk && strcmp(kinds[j], ev[k].op); j++) {}
                if (j == nk && nk < 32) snprintf(kinds[nk++], sizeof kinds[0], "%s", ev[k].op);
                if (j < nk) us[j] += ev[k].dur_us, cnt[j]++;
            }
            printf("profile of step %d (per op, ms):", s + 1);
            for (j = 0; j < nk; j++) printf("  %s x%d %.1f", kinds[j], cnt[j], us[j] * 1e-3);
            printf("\n");
            free(ev);
        }
        for (i = tj_tree_size(out) - 1; i >= 0; i--) { /* the new state replaces the donated one */
            const char *nm = tj_tree_name(out, i);
            char name[128];
            snprintf(name, sizeof name, "%s", nm);
            if (strcmp(name, "gnorm")) tj_tree_set_array(state, name, tj_tree_take(out, name));
        }
        tj_tree_free(out);
    }
    qsort(wall + warm, (size_t)n, sizeof(double), cmp_double);
    qsort(cpu + warm, (size_t)n, sizeof(double), cmp_double);
    bytes = (double)np * 4 * (2 + 3 + 3); /* grads twice; params, m, v read and written */
    printf("bench_optimizer: wall median %.1f ms (min %.1f, max %.1f), %.1f GB/s; CPU time median %.1f ms (min %.1f, max %.1f) over %d steps; target <= 120 ms\n",
           wall[warm + n / 2], wall[warm], wall[warm + n - 1], bytes / (wall[warm + n / 2] * 1e-3) * 1e-9, cpu[warm + n / 2], cpu[warm], cpu[warm + n - 1], n);
    printf("figure: AdamW + clip, 124M (wall); %.1f; 120; ms\n", wall[warm + n / 2]);
    free(wall);
    free(cpu);
    tj_prog_free(prog);
    tj_tree_free(state);
    tj_ctx_free(ctx);
    return 0;
}
