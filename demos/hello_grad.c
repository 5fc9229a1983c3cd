/* hello_grad: trace a small MLP, differentiate it, print the program and
   train it for a few steps of gradient descent.
     ./build.sh build && ./build/hello_grad
   B = batch, I = inputs, H = hidden units, O = classes. */
#define TINYJAX_IMPLEMENTATION
#include "tinyjax.h"

#include <math.h>

/* loss and gradients of a 2-layer MLP; returns the updated parameters too */
static void train_step(tj_graph *g, const tj_tree *in, tj_tree *out, void *user) {
    tj_v x = tj_tree_v(in, "x");           /* (batch, in)  */
    tj_v y = tj_tree_v(in, "labels");      /* (batch) i32  */
    tj_v w1 = tj_tree_v(in, "w1");         /* (in, hidden) */
    tj_v w2 = tj_tree_v(in, "w2");         /* (hidden, cls) */
    double lr = tj_tree_float(in, "lr");
    tj_v h = tj_relu(tj_dot(x, w1, "in"));
    tj_v logits = tj_dot(h, w2, "hidden");
    tj_v loss = tj_cross_entropy(logits, y, "cls", "batch");
    tj_v w[2], gw[2];
    (void)g; (void)user;
    w[0] = w1; w[1] = w2;
    tj_grad(loss, 2, w, gw);
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "w1", tj_sub(w1, tj_muls(gw[0], lr)));
    tj_tree_set_v(out, "w2", tj_sub(w2, tj_muls(gw[1], lr)));
    tj_tree_set_v(out, "gnorm1", tj_sqrt(tj_sum(tj_mul(gw[0], gw[0]), "in hidden")));
    tj_tree_set_v(out, "gnorm2", tj_sqrt(tj_sum(tj_mul(gw[1], gw[1]), "hidden cls")));
}

int main(void) {
    enum { B = 64, I = 8, H = 32, O = 4 };
    static float x[B * I], w1[I * H], w2[H * O];
    static int32_t labels[B];
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *params = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    tj_jit_opts opts = {"w1 w2"}; /* the step consumes the old parameters */
    tj_prog *step;
    uint64_t s = 42;
    int i, j, it;
    /* a toy task: the label is the index of the largest of the first 4 inputs */
    for (i = 0; i < B; i++) {
        int best = 0;
        for (j = 0; j < I; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i * I + j] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
        }
        for (j = 1; j < 4; j++) if (x[i * I + j] > x[i * I + best]) best = j;
        labels[i] = best;
    }
    for (i = 0; i < I * H; i++) w1[i] = (float)(0.5 * sin(1.7 * i));
    for (i = 0; i < H * O; i++) w2[i] = (float)(0.5 * cos(0.9 * i));
    tj_tree_set_array(params, "x", tj_array_new(ctx, TJ_F32, "batch=64 in=8", x));
    tj_tree_set_array(params, "labels", tj_array_new(ctx, TJ_I32, "batch=64", labels));
    tj_tree_set_array(params, "w1", tj_array_new(ctx, TJ_F32, "in=8 hidden=32", w1));
    tj_tree_set_array(params, "w2", tj_array_new(ctx, TJ_F32, "hidden=32 cls=4", w2));
    tj_tree_set_float(params, "lr", 0.5);

    step = tj_jit(ctx, "train_step", train_step, NULL, params, &opts);
    if (!step) { fprintf(stderr, "error: %s\n", tj_error(ctx)); return 1; }
    tj_prog_print(step, stdout);
    tj_memory_print(step, stdout);
    for (it = 0; it < 200; it++) {
        float loss, g1, g2;
        if (tj_run(step, params, out)) { fprintf(stderr, "error: %s\n", tj_error(ctx)); return 1; }
        tj_array_read(tj_tree_array(out, "loss"), TJ_F32, &loss);
        tj_array_read(tj_tree_array(out, "gnorm1"), TJ_F32, &g1);
        tj_array_read(tj_tree_array(out, "gnorm2"), TJ_F32, &g2);
        if (it % 20 == 0 || it == 199) printf("step %3d  loss %.4f  |dw1| %.4f  |dw2| %.4f\n", it, loss, g1, g2);
        /* the new parameters replace the donated old ones */
        tj_tree_set_array(params, "w1", tj_tree_take(out, "w1"));
        tj_tree_set_array(params, "w2", tj_tree_take(out, "w2"));
        tj_tree_clear(out);
    }
    tj_prog_free(step);
    tj_tree_free(out);
    tj_tree_free(params);
    tj_ctx_free(ctx);
    return 0;
}
