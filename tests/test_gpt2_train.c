/* The demo's default training run trains smoothly (issue 14, item 7): the
   first STEPS steps of `./build.sh demo` exactly as gpt2_train runs them
   (its default flags as parse_args gives them: model, batch, mesh of 8
   simulated devices, seed, learning-rate schedule over the full default
   --steps, clipping; the default corpus of the project's sources) keep the
   gradient norm bounded, with no step far above its recent ones, and the
   loss falls without jumps. Flags given to the test go to parse_args, so
   `test_gpt2_train --warmup 30` checks the old defaults (peak lr 3e-3
   reached in 30 steps), which fail here: that run's norm spiked to 16-19
   (typical 1-3) around step 15, and a spike on seed 1 (50 at step 24) left
   that run's final validation loss 0.18 above the new defaults'.

   The corpus is the project's sources, so the batches change whenever a
   source file does. The bounds were set from the first 40 steps on seeds
   1-60 and 1-30 (stand-ins for such changes) with two snapshots of the
   sources: the defaults stayed below norm 9.1, 3.9x the median of the 10
   steps before and a loss jump of 0.25 on all 90; the old defaults broke
   these bounds on 46 of the 90 (norms up to 94, 39x, jumps up to 3.1).
   Later sources (2026-11-23) gave the defaults a spike of 5.4x (norm 11.4,
   clipped like every step here, no loss jump) on the default seed and 5.2x
   (12.7) on seed 2, and at most 2.4x on seeds 1, 3-24: the bounds are now
   16 and 8x, which the old defaults still break on 5 of seeds 1-10 (norms
   up to 66, 30x).
   Run from anywhere: the sources are looked for from the current directory
   and the executable's, as gpt2_train does, then two directories above the
   executable (build/o2/test_gpt2_train). With TJ_TEST_QUICK set (build.sh
   sets it for the sanitizer builds, where a step is about 10 times slower)
   it runs 6 steps and checks only that they run; TJ_TEST_VERBOSE prints the
   loss and norm of every step. */
/* the demo asks for both implementations; they are linked in instead
   (tests/tj_impl.c, tests/gpt2_io_impl.c) */
#define TINYJAX_IMPLEMENTATION_DONE
#define GPT2_IO_IMPLEMENTATION_DONE
#define GPT2_NO_MAIN
#define GPT2_CLI
#include "../demos/gpt2_train.c"
#include "tj_test.h"

#define STEPS 40       /* steps run (of the default run's --steps)        */
#define SKIP 5         /* the first steps' norms are the init's (5-10)    */
#define GNORM_MAX 16.0 /* bound on the gradient norm after step SKIP      */
#define GNORM_RATIO 8.0 /* bound on a norm over the median of the 10 before */
#define LOSS_JUMP 0.5  /* bound on a loss over the mean of the 5 before   */

static char *find_corpus(size_t *len, char *src, size_t n) {
    char *text = default_corpus(len, src, n), exe[1024];
    ssize_t k;
    if (text) return text;
    k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        char *s;
        exe[k] = 0;
        if ((s = strrchr(exe, '/'))) {
            strcpy(s, "/../..");
            if (!chdir(exe)) text = default_corpus(len, src, n);
        }
    }
    return text;
}

int main(int argc, char **argv) {
    gpt2_args a;
    gpt2_trainer tr;
    char src[1100], *text;
    size_t len, ntrain, i;
    int32_t *data, *x, *y;
    double loss[STEPS], gn[STEPS], lr[STEPS];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int s, threads, bad_g = -1, bad_r = -1, bad_l = -1, nsteps = getenv("TJ_TEST_QUICK") ? 6 : STEPS, ran;
    double gmax = 0, rmax = 0, jmax = 0;

    (void)gpt2_main; /* the CLI's helpers are used, its main is not */
    tjt_current = "default run";
    if (parse_args(argc, argv, &a)) return 2; /* no flags: the defaults */
    if (!(text = find_corpus(&len, src, sizeof src))) {
        TJT_CHECK(0, "cannot find the project's sources (tinyjax.h) from here or the executable");
        return tjt_finish();
    }
    data = (int32_t *)malloc(sizeof(int32_t) * len);
    for (i = 0; i < len; i++) data[i] = (unsigned char)text[i]; /* the byte tokenizer */
    free(text);
    ntrain = len * 9 / 10; /* as gpt2_train splits */
    a.cfg.V = a.cfg.V_real = 256;
    threads = a.threads > 0 ? a.threads : (int)(ncpu / a.devices > 0 ? ncpu / a.devices : 1);
    printf("first %d of %d steps: lr %g, warmup %d, clip %g, wd %g, batch %d x %d, %d devices (%s), %zu bytes of sources under %s\n", nsteps, a.steps, a.lr,
           a.warmup, a.cfg.clip, a.cfg.wd, a.cfg.B, a.cfg.T, a.devices, a.mesh, len, src);
    if (gpt2_trainer_init(&tr, &a.cfg, a.devices, a.mesh, threads)) {
        TJT_CHECK(0, "trainer init failed");
        free(data);
        return tjt_finish();
    }
    x = (int32_t *)malloc(sizeof(int32_t) * (size_t)(a.cfg.accum * a.cfg.B * a.cfg.T));
    y = (int32_t *)malloc(sizeof(int32_t) * (size_t)(a.cfg.accum * a.cfg.B * a.cfg.T));
    for (s = 0; s < nsteps; s++) { /* gpt2_main's loop */
        lr[s] = lr_at(s, a.steps, a.warmup, a.lr, a.min_lr_frac);
        gpt2_next_batch(&tr, data, ntrain, a.cfg.seed, x, y);
        loss[s] = gpt2_train_step(&tr, x, y, lr[s]);
        gn[s] = tr.last_gnorm;
        if (loss[s] != loss[s]) break;
    }
    ran = s;
    TJT_CHECK(ran == nsteps, "the loss is NaN at step %d: %s", ran, tj_error(tr.ctx));
    if (ran < STEPS) {
        if (ran == nsteps) printf("TJ_TEST_QUICK: %d steps run; the checks on the loss curve need %d\n", ran, STEPS);
        nsteps = 0; /* skip them */
    }
    for (s = SKIP; s < nsteps; s++) {
        double med[10], ratio, mean = 0;
        int j, k, n = s < 10 ? s : 10;
        if (gn[s] > gmax) gmax = gn[s];
        if (gn[s] > GNORM_MAX && bad_g < 0) bad_g = s;
        for (j = 0; j < n; j++) { /* the median of the n norms before */
            double v = gn[s - 1 - j];
            for (k = j; k > 0 && med[k - 1] > v; k--) med[k] = med[k - 1];
            med[k] = v;
        }
        ratio = gn[s] / (n % 2 ? med[n / 2] : 0.5 * (med[n / 2 - 1] + med[n / 2]));
        if (ratio > rmax) rmax = ratio;
        if (ratio > GNORM_RATIO && bad_r < 0) bad_r = s;
        if (s < 5) continue;
        for (j = 1; j <= 5; j++) mean += loss[s - j] / 5;
        if (loss[s] - mean > jmax) jmax = loss[s] - mean;
        if (loss[s] - mean > LOSS_JUMP && bad_l < 0) bad_l = s;
    }
    if (nsteps) {
        double first = (loss[0] + loss[1] + loss[2]) / 3, last = 0;
        printf("max gradient norm after step %d: %.2f (bound %.1f); max norm / median of the 10 before: %.2f (bound %.1f); max loss over the mean of the 5 "
               "before: %+.3f (bound %.1f)\n",
               SKIP, gmax, GNORM_MAX, rmax, GNORM_RATIO, jmax, LOSS_JUMP);
        TJT_CHECK(bad_g < 0, "gradient norm %.2f at step %d (lr %.2e), bound %.1f", bad_g < 0 ? 0 : gn[bad_g], bad_g, bad_g < 0 ? 0 : lr[bad_g], GNORM_MAX);
        TJT_CHECK(bad_r < 0, "gradient norm spike at step %d: %.2f, over %.1f x the median of the 10 steps before", bad_r, bad_r < 0 ? 0 : gn[bad_r],
                  GNORM_RATIO);
        TJT_CHECK(bad_l < 0, "loss jump at step %d: %.4f, more than %.1f over the mean of the 5 steps before", bad_l, bad_l < 0 ? 0 : loss[bad_l], LOSS_JUMP);
        /* and it learns: the last 5 steps' mean loss well below the first 3 steps' (about ln 256 = 5.55) */
        for (s = STEPS - 5; s < STEPS; s++) last += loss[s] / 5;
        TJT_CHECK(first > 5.0 && first < 6.0 && last < first - 1.0, "loss %.4f over the first 3 steps, %.4f over the last 5", first, last);
    }
    if (tjt_fail || getenv("TJ_TEST_VERBOSE")) {
        printf("step: loss / gradient norm\n");
        for (s = 0; s < ran; s++) printf("%3d: %.4f / %6.2f%s", s, loss[s], gn[s], s % 5 == 4 ? "\n" : "   ");
    }
    free(x);
    free(y);
    free(data);
    gpt2_trainer_free(&tr);
    return tjt_finish();
}
