/* tools/comm_report.c - what GPT-2 124M's training step sends between GPUs.
 *
 * For data parallel (DP), FSDP and FSDP + tensor parallel on N = 8 and 64
 * devices, it compiles the demo's training step (demos/gpt2_model.h) against
 * abstract arrays (tj_array_abstract, tj_prog_output_shapes: shapes and
 * shardings, no buffers, so N = 64 copies of 124M parameters cost nothing
 * here), reads the collectives the sharding rules inserted
 * (tj_prog_collectives: each one's buffer, its mesh axes and how many times
 * it runs per step), and prints per GPU and step:
 *   - the bytes each GPU puts on the wire, as NCCL's ring algorithms move
 *     them: all-gather and reduce-scatter (G-1)/G of the full buffer,
 *     all-reduce 2 (G-1)/G, all-to-all (G-1)/G, for a group of G GPUs;
 *   - split into NVLink (groups inside one node of 8 GPUs) and InfiniBand
 *     (groups that span nodes: every GPU's share goes through its own NIC);
 *   - the time those bytes take at nominal bandwidths (NVLink 4: 450 GB/s
 *     per direction per GPU; one 400 Gb/s NDR NIC per GPU: 50 GB/s), with
 *     nothing overlapped, next to the compute time of the step's FLOPs at
 *     40% of an H100's dense bf16 peak (989 TFLOP/s).
 * Every GPU processes 8 sequences of 1024 tokens per step (global batch
 * 8 N), so the compute per GPU is the same in every row.
 *
 *   ./build.sh build && ./build/comm_report [--bf16] [--seqs 8] [--mfu 0.4] [--detail]
 *
 * The figures are a model, not a measurement: real NCCL reaches 70-90% of
 * these bandwidths, overlaps collectives with compute where the schedule
 * lets it, and uses trees across nodes for large groups. */
#define TINYJAX_IMPLEMENTATION
#include "../tinyjax.h"
#include "../demos/gpt2_model.h"
#include <stdlib.h>

#define NVLINK_GBS 450.0 /* per GPU, per direction (H100 SXM, NVLink 4)  */
#define IB_GBS 50.0      /* per GPU: one 400 Gb/s NDR NIC                */
#define PEAK_TFLOPS 989.0
#define GPUS_PER_NODE 8

typedef struct {
    const char *name, *param_rules, *compute_rules;
    int tp; /* size of the `model` axis (1: none) */
} layout;

/* the size of the group a collective over `axes` ("data", "model",
   "data+model") runs in, and whether it spans nodes. The mesh is
   "data=D model=M", row-major: a `model` group is M neighbours (inside a
   node, M <= 8); a group along `data` (D > 1) has members M apart, which
   for N > 8 devices lie on different nodes. */
static int group_of(const char *axes, int D, int M, int *spans) {
    int G = 1, along_data = strstr(axes, "data") && D > 1;
    if (strstr(axes, "data")) G *= D;
    if (strstr(axes, "model")) G *= M;
    *spans = along_data ? D * M > GPUS_PER_NODE : G > GPUS_PER_NODE;
    return G;
}

static double wire_factor(const char *kind, int G) {
    double f = G > 1 ? (double)(G - 1) / G : 0.0;
    if (!strcmp(kind, "psum") || !strcmp(kind, "pmax")) return 2 * f;
    if (!strcmp(kind, "all_gather") || !strcmp(kind, "reduce_scatter") || !strcmp(kind, "all_to_all")) return f;
    if (!strcmp(kind, "ppermute")) return G > 1 ? 1.0 : 0.0;
    return 0.0; /* shard_slice: no data moves */
}

/* compile the step for one layout on N devices and print its row */
static int detail;
static int report(const layout *lo, int N, int seqs, int bf16, double mfu) {
    gpt2_config c;
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *none = tj_tree_new(ctx), *state = tj_tree_new(ctx);
    tj_prog *init = NULL, *step = NULL;
    tj_jit_opts donate;
    tj_collective *cols = (tj_collective *)calloc(4096, sizeof *cols);
    char mesh[64];
    int D = N / lo->tp, M = lo->tp, nc, k, ncoll = 0, rc = 1;
    double nv = 0, ib = 0, flops, t_comp, t_nv, t_ib;
    int64_t runs = 0;
    gpt2_default_config(&c);
    c.L = 12; c.H = 12; c.C = 768; c.M = 3072;
    c.T = c.block = 1024;
    c.V = 50304; c.V_real = 50257;
    c.B = seqs * N;
    c.bf16 = bf16;
    c.param_rules = lo->param_rules;
    c.compute_rules = lo->compute_rules;
    if (M > 1) snprintf(mesh, sizeof mesh, "data=%d model=%d", D, M);
    else snprintf(mesh, sizeof mesh, "data=%d", D);
    if (!cols || tj_set_devices(ctx, N) || tj_set_mesh(ctx, mesh)) goto done;
    tj_set_collective_matmul(ctx, 0); /* GPUs run each collective apart: simulated devices' in-place dots are not theirs */
    /* the parameters and optimizer state as the init program would make
       them: shapes and shardings only */
    if (!(init = tj_jit(ctx, "gpt2_init", gpt2_init_fn, &c, none, NULL)) || tj_prog_output_shapes(init, state)) goto done;
    {
        char shape[64];
        float zero = 0;
        snprintf(shape, sizeof shape, "batch=%d pos=%d", c.B, c.T);
        tj_tree *tok = tj_tree_new(ctx); /* the batch split over `data`, as the driver places it */
        tj_tree_set_array(tok, "tokens", tj_array_abstract(ctx, TJ_I32, shape, ""));
        tj_tree_set_array(tok, "targets", tj_array_abstract(ctx, TJ_I32, shape, ""));
        if (tj_filter_shard(tok, c.compute_rules)) {
            tj_tree_free(tok);
            goto done;
        }
        tj_tree_set_array(state, "tokens", tj_tree_take(tok, "tokens"));
        tj_tree_set_array(state, "targets", tj_tree_take(tok, "targets"));
        tj_tree_free(tok);
        tj_tree_set_array(state, "lr", tj_array_new(ctx, TJ_F32, "", &zero));
        tj_tree_set_array(state, "t", tj_array_new(ctx, TJ_F32, "", &zero));
    }
    memset(&donate, 0, sizeof donate);
    donate.donate = "params. m. v.";
    if (!(step = tj_jit(ctx, "gpt2_train_step", gpt2_step_fn, &c, state, &donate))) goto done;
    nc = tj_prog_collectives(step, cols, 4096);
    for (k = 0; k < nc && k < 4096; k++) {
        int spans, G = group_of(cols[k].axes, D, M, &spans);
        double w = wire_factor(cols[k].kind, G) * (double)cols[k].bytes * (double)cols[k].calls;
        if (!strcmp(cols[k].kind, "shard_slice")) continue;
        ncoll++;
        runs += cols[k].calls;
        if (spans) ib += w;
        else nv += w;
        if (detail)
            printf("    %-14s over %-10s G=%-3d %10lld B x %-4lld %9.1f MB on the wire%s  %s (%s:%d)\n", cols[k].kind, cols[k].axes, G, (long long)cols[k].bytes,
                   (long long)cols[k].calls, w / 1e6, spans ? " (IB)" : "", cols[k].cause, cols[k].file ? cols[k].file : "?", cols[k].line);
    }
    flops = tj_prog_flops(step);
    t_comp = flops / N / (PEAK_TFLOPS * 1e12 * mfu) * 1e3;
    t_nv = nv / (NVLINK_GBS * 1e9) * 1e3;
    t_ib = ib / (IB_GBS * 1e9) * 1e3;
    printf("%-9s %3d  %-16s %5d %6lld %9.0f %9.0f %9.1f %9.1f %9.1f %8.2f\n", lo->name, N, mesh, ncoll, (long long)runs, nv / 1e6, ib / 1e6, t_nv, t_ib,
           t_comp, (t_nv + t_ib) / t_comp);
    rc = 0;
done:
    if (rc) fprintf(stderr, "comm_report: %s on %d devices: %s\n", lo->name, N, tj_error(ctx));
    free(cols);
    tj_prog_free(init);
    tj_prog_free(step);
    tj_tree_free(none);
    tj_tree_free(state);
    tj_ctx_free(ctx);
    return rc;
}

int main(int argc, char **argv) {
    static const layout los[] = {
        {"DP", NULL, "batch:data", 1},
        {"FSDP", "embed:data", "batch:data", 1},
        {"FSDP+TP", "embed:data mlp:model heads:model vocab:model", "batch:data mlp:model heads:model vocab:model", 4},
    };
    static const int Ns[] = {8, 64};
    int i, j, bf16 = 0, seqs = 8, rc = 0;
    double mfu = 0.4;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bf16")) bf16 = 1;
        else if (!strcmp(argv[i], "--detail")) detail = 1;
        else if (!strcmp(argv[i], "--seqs") && i + 1 < argc && atoi(argv[i + 1]) > 0) seqs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mfu") && i + 1 < argc && atof(argv[i + 1]) > 0 && atof(argv[i + 1]) <= 1) mfu = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: comm_report [--bf16] [--seqs N (8)] [--mfu F (0.4)] [--detail: every collective]\n");
            return 2;
        }
    }
    printf("GPT-2 124M training step (12 layers, 768 channels, vocab 50304, T=1024), %d sequences per GPU, %s compute, default remat\n", seqs,
           bf16 ? "bf16" : "f32");
    printf("per GPU per step: bytes on the wire (NCCL ring model), time at NVLink %.0f GB/s and IB %.0f GB/s (nothing overlapped),\n", NVLINK_GBS,
           IB_GBS);
    printf("compute at %.0f%% of %.0f TFLOP/s; %d GPUs per node; FSDP+TP: model axis of 4 (12 heads) inside a node\n\n", mfu * 100, PEAK_TFLOPS,
           GPUS_PER_NODE);
    printf("%-9s %3s  %-16s %5s %6s %9s %9s %9s %9s %9s %8s\n", "layout", "N", "mesh", "colls", "runs", "NVLink MB", "IB MB", "NVLink ms", "IB ms",
           "comp ms", "comm/comp");
    for (i = 0; i < (int)(sizeof los / sizeof los[0]); i++)
        for (j = 0; j < 2; j++) {
            layout lo = los[i];
            (void)Ns;
            rc |= report(&lo, Ns[j], seqs, bf16, mfu);
        }
    return rc;
}
