/* The gpt2_train command line as a user meets it (issue 13): every flag is
   validated (ranges, unknown flags, garbage numbers) with a message naming
   the flag and the value, exit 2; a failed write (trace, checkpoint,
   periodic checkpoint) is exit 1 with a message, an optional output failing
   does not stop training, and its error does not poison the next step;
   --save-every K keeps the newest --keep N checkpoints, --resume picks the
   newest valid one; and kill -9 at random moments of a run with
   --save-every loses at most K steps, with the losses after resuming equal
   to an uninterrupted run's; --dropout 0 is the run without the flag, and
   --dropout 0.1 resumed halfway ends with the uninterrupted run's losses and
   checkpoint. Each case runs gpt2_main in a forked child
   (its output through a pipe). Files go to a fresh mkdtemp directory. */
/* the demo asks for both implementations; they are linked in instead
   (tests/tj_impl.c, tests/gpt2_io_impl.c) */
#define TINYJAX_IMPLEMENTATION_DONE
#define GPT2_IO_IMPLEMENTATION_DONE
#define GPT2_NO_MAIN
#define GPT2_CLI
#include "../demos/gpt2_train.c"
#define TJT_FILES
#include "tj_test.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- running gpt2_main in a child */
typedef struct {
    int rc;          /* exit status, or 128 + signal */
    char *out;       /* stdout and stderr, merged */
    size_t len;
    double seconds;
} run_result;
typedef struct {
    const char *env_devices; /* TJ_DEVICES for the child, or NULL */
    long fsize_limit;        /* RLIMIT_FSIZE in bytes (SIGXFSZ ignored), or 0 */
    double kill_after;       /* seconds, or 0: SIGKILL the child then */
} run_opts;
static void run_free(run_result *r) { free(r->out); memset(r, 0, sizeof *r); }
/* args: one string, split at spaces ('~' stands for an empty argument) */
static run_result run_gpt2(const char *args, const run_opts *o) {
    run_result r;
    char *copy = strdup(args), *argv[64], *tok, *save = NULL;
    int argc = 0, pfd[2], status = 0;
    pid_t pid;
    double t0 = now_s();
    memset(&r, 0, sizeof r);
    argv[argc++] = (char *)"gpt2_train";
    for (tok = strtok_r(copy, " ", &save); tok && argc < 63; tok = strtok_r(NULL, " ", &save)) argv[argc++] = strcmp(tok, "~") ? tok : (char *)"";
    argv[argc] = NULL;
    if (pipe(pfd)) {
        r.rc = -1;
        free(copy);
        return r;
    }
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        int rc;
        close(pfd[0]);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        close(pfd[1]);
        if (o && o->env_devices) setenv("TJ_DEVICES", o->env_devices, 1);
        else unsetenv("TJ_DEVICES");
        if (o && o->fsize_limit) {
            struct rlimit rl;
            signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG instead */
            rl.rlim_cur = rl.rlim_max = (rlim_t)o->fsize_limit;
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        alarm(300);
        rc = gpt2_main(argc, argv);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    close(pfd[1]);
    {
        size_t cap = 4096;
        int killed = 0;
        r.out = (char *)malloc(cap);
        if (o && o->kill_after > 0) fcntl(pfd[0], F_SETFL, O_NONBLOCK);
        for (;;) {
            ssize_t k;
            if (r.len + 1024 > cap) r.out = (char *)realloc(r.out, cap *= 2);
            k = read(pfd[0], r.out + r.len, cap - r.len - 1);
            if (k > 0) r.len += (size_t)k;
            else if (k == 0) break;
            else if (errno == EAGAIN) {
                struct timespec ts = {0, 200000};
                if (!killed && now_s() - t0 >= o->kill_after) {
                    kill(pid, SIGKILL);
                    killed = 1;
                }
                nanosleep(&ts, NULL);
            } else if (errno != EINTR) break;
        }
        r.out[r.len] = 0;
    }
    close(pfd[0]);
    waitpid(pid, &status, 0);
    r.seconds = now_s() - t0;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    free(copy);
    return r;
}
static int has(const run_result *r, const char *s) { return r->out && strstr(r->out, s) != NULL; }
/* the loss printed for step s ("step     s | loss X.XXXX"), into buf; 0 if none */
static int loss_of(const run_result *r, long s, char *buf, size_t n) {
    char pat[64];
    const char *p;
    snprintf(pat, sizeof pat, "step %5ld | loss ", s);
    if (!r->out || !(p = strstr(r->out, pat))) return 0;
    p += strlen(pat);
    snprintf(buf, n, "%.*s", (int)strcspn(p, " \n"), p);
    return 1;
}
/* the last step with a printed loss, or -1 */
static long last_step(const run_result *r) {
    long best = -1, s;
    const char *p = r->out;
    while (p && (p = strstr(p, "step ")) != NULL) {
        char *e;
        s = strtol(p + 5, &e, 10);
        if (e != p + 5 && strncmp(e, " | loss ", 8) == 0 && s > best) best = s;
        p += 5;
    }
    return best;
}
static int count_files(const char *prefix) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/* finished checkpoints of FILE: "FILE" itself and "FILE.stepNNNNNNNN" (8
   digits), not the temp files "FILE[.stepN].tmp.<pid>.<k>" of a save that a
   kill interrupted: what a restart script would look for */
static int count_checkpoints(const char *file) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    size_t fl = strlen(file);
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) {
        const char *p = e->d_name + fl;
        if (strncmp(e->d_name, file, fl)) continue;
        n += !*p || (!strncmp(p, ".step", 5) && strlen(p + 5) == 8 && strspn(p + 5, "0123456789") == 8);
    }
    closedir(d);
    return n;
}

/* temp files of saves to prefix*: names that start with prefix and contain ".tmp." */
static int count_tmp(const char *prefix) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) n += !strncmp(e->d_name, prefix, strlen(prefix)) && strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    unsigned char *b;
    long n;
    *len = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    b = (unsigned char *)malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) == (size_t)n) *len = (size_t)n;
    fclose(f);
    return b;
}

static char g_model[1024]; /* the flags of a tiny model on the test's data */

static void test_validation(void) {
    static const struct {
        const char *args, *want1, *want2;
    } bad[] = {
        {"--steps ten", "--steps", "\"ten\""},
        {"--lr fast", "--lr", "\"fast\""},
        {"--lr nan", "--lr", "\"nan\""},
        {"--lr inf", "--lr", "\"inf\""},
        {"--lr 1e400", "--lr", "1e400"},
        {"--temperature -1", "--temperature", "\"-1\""},
        {"--steps -5", "--steps", "\"-5\""},
        {"--steps 3x", "--steps", "\"3x\""},
        {"--steps 1e3", "--steps", "\"1e3\""},
        {"--steps ~", "--steps", "\"\""},
        {"--steps 99999999999999999999", "--steps", "99999999999999999999"},
        {"--layers 0", "--layers", "\"0\""},
        {"--heads 0", "--heads", "\"0\""},
        {"--embed -3", "--embed", "\"-3\""},
        {"--devices 65", "--devices", "\"65\""},
        {"--devices 0", "--devices", "\"0\""},
        {"--context 1", "--context", "\"1\""},
        {"--accum 0", "--accum", "\"0\""},
        {"--batch two", "--batch", "\"two\""},
        {"--warmup -1", "--warmup", "\"-1\""},
        {"--min-lr-frac 2", "--min-lr-frac", "\"2\""},
        {"--wd -0.1", "--wd", "\"-0.1\""},
        {"--clip x", "--clip", "\"x\""},
        {"--seed abc", "--seed", "\"abc\""},
        {"--seed -1", "--seed", "\"-1\""},
        {"--dropout 1", "--dropout", "\"1\""},
        {"--dropout -0.1", "--dropout", "\"-0.1\""},
        {"--dropout some", "--dropout", "\"some\""},
        {"--eval-every 0", "--eval-every", "\"0\""},
        {"--eval-batches 0", "--eval-batches", "\"0\""},
        {"--threads -1", "--threads", "\"-1\""},
        {"--sample -1", "--sample", "\"-1\""},
        {"--top-k -1", "--top-k", "\"-1\""},
        {"--bench-steps 0", "--bench-steps", "\"0\""},
        {"--bench --cost H800", "--cost H800", "not a machine"},
        {"--bench --cost 989:", "--cost 989:", "not a machine"},
        {"--bench --cost 0:3350", "--cost 0:3350", "not a machine"},
        {"--cost H100", "--cost", "needs --bench"},
        {"--bench --cost card", "--cost card", "needs --cuda"},
        {"--save-every 0 --save x", "--save-every", "\"0\""},
        {"--keep 0", "--keep", "\"0\""},
        {"--remat most", "--remat", "\"most\""},
        {"--frobnicate 3", "unknown flag", "--frobnicate"},
        {"--bf16 extra", "unexpected argument", "extra"},
        {"--steps", "--steps", "needs a value"},
        {"--tokenizer only_one", "--tokenizer", "two files"},
        {"--embed 100 --heads 3", "--embed 100", "--heads 3"},
        {"--save-every 5", "--save-every", "--save FILE"},
        /* a mesh is checked on one device too (it was ignored there; "data=abc" divided by zero) */
        {"--mesh data=abc", "--mesh \"data=abc\"", "tj_set_mesh"},
        {"--devices 1 --mesh data=3", "--mesh \"data=3\" and --devices", "there are 1"},
        {"--mesh data=65536,model=65536", "--mesh \"data=65536,model=65536\"", "tj_set_mesh"},
        /* rules strings are parsed with the command line (a bad one failed at the first tj_jit, exit 1) */
        {"--param-rules embed", "--param-rules \"embed\"", "bad partition spec near \"embed\""},
        {"--compute-rules batch:data+", "--compute-rules \"batch:data+\"", "bad mesh axis"},
        {"--mesh data=4 --param-rules vocab:data,embed", "--param-rules", "near \"embed\""},
    };
    size_t i;
    tjt_current = "CLI validation";
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_result r = run_gpt2(bad[i].args, NULL);
        TJT_CHECK(r.rc == 2 && has(&r, bad[i].want1) && has(&r, bad[i].want2), "'%s': exit %d, want 2 with a message naming %s and %s; got: %s", bad[i].args,
                  r.rc, bad[i].want1, bad[i].want2, r.out);
        run_free(&r);
    }
    /* files: directories, missing files and directories */
    {
        char args[1200];
        const char *cases[][3] = {
            {"--data %s", "", "is a directory"},
            {"--resume %s", "", "is a directory"},
            {"--save %s", "", "is a directory"},
            {"--trace %s", "", "is a directory"},
            {"--svg %s", "", "is a directory"},
            {"--init-from %s", "", "is a directory"},
            {"--tokens %s", "", "is a directory"},
            {"--save %s/nodir/ck", "", "does not exist"},
            {"--data %s/missing.txt", "", "No such file"},
            {"--resume %s/nock", "", "no checkpoint"},
        };
        size_t k;
        for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            run_result r;
            snprintf(args, sizeof args, cases[k][0], g_dir);
            r = run_gpt2(args, NULL);
            TJT_CHECK(r.rc == 2 && has(&r, cases[k][2]), "'%s': exit %d, want 2 and \"%s\"; got: %s", args, r.rc, cases[k][2], r.out);
            run_free(&r);
        }
    }
}

static void test_runs(void) {
    char args[2048];
    run_result r;
    run_opts o;
    tjt_current = "CLI runs";
    /* a good run */
    snprintf(args, sizeof args, "%s --steps 6", g_model);
    r = run_gpt2(args, NULL);
    TJT_CHECK(r.rc == 0 && has(&r, "trained 6 steps"), "a good run: exit %d: %s", r.rc, r.out);
    run_free(&r);
    /* --bench --cost: the cost analysis of the benchmark's step (a small one here), and no step runs */
    r = run_gpt2("--bench --cost H100 --batch 1 --context 16 --threads 1", NULL);
    TJT_CHECK(r.rc == 0 && has(&r, "cost 'gpt2_train_step' per device:") && has(&r, "\n  dot ") && has(&r, "--cost H100: the step at least") &&
                  !has(&r, "bench step"),
              "--bench --cost H100: exit %d: %s", r.rc, r.out);
    run_free(&r);
    /* --bench's profile: each op's time, and the bandwidth it reached on the bytes it must move (tj_prog_cost_ops) */
    r = run_gpt2("--bench --batch 1 --context 16 --threads 1 --bench-steps 1", NULL);
    TJT_CHECK(r.rc == 0 && has(&r, "profile: ") && has(&r, "x  dot  (") && has(&r, " GB/s, ") && has(&r, "bench: the step moves "),
              "--bench's bytes and profile with bandwidths: exit %d: %s", r.rc, r.out);
    run_free(&r);
    /* a bad TJ_DEVICES is an error, not silently ignored */
    memset(&o, 0, sizeof o);
    o.env_devices = "abc";
    r = run_gpt2(args, &o);
    TJT_CHECK(r.rc == 1 && has(&r, "TJ_DEVICES") && has(&r, "abc"), "TJ_DEVICES=abc: exit %d: %s", r.rc, r.out);
    run_free(&r);
    /* the trace cannot be written: training goes on (all steps, errors
       cleared), the exit status is 1 */
    memset(&o, 0, sizeof o);
    o.fsize_limit = 2048;
    snprintf(args, sizeof args, "%s --steps 6 --trace %s", g_model, path_in("t.json"));
    r = run_gpt2(args, &o);
    TJT_CHECK(r.rc == 1 && has(&r, "--trace") && has(&r, "File too large") && has(&r, "trained 6 steps") && last_step(&r) == 5,
              "a failed trace write: exit %d, last step %ld: %s", r.rc, last_step(&r), r.out);
    TJT_CHECK(!file_exists(path_in("t.json")), "no partial trace");
    run_free(&r);
    /* the final checkpoint cannot be written */
    snprintf(args, sizeof args, "%s --steps 4 --save %s", g_model, path_in("ck_full"));
    r = run_gpt2(args, &o);
    TJT_CHECK(r.rc == 1 && has(&r, "--save") && has(&r, "ck_full") && has(&r, "File too large"), "a failed --save: exit %d: %s", r.rc, r.out);
    TJT_CHECK(!file_exists(path_in("ck_full")) && count_files("ck_full.tmp") == 0, "no partial checkpoint, no temp file");
    run_free(&r);
    /* a periodic checkpoint cannot be written: the run stops there */
    snprintf(args, sizeof args, "%s --steps 8 --save %s --save-every 2", g_model, path_in("ck_full"));
    r = run_gpt2(args, &o);
    TJT_CHECK(r.rc == 1 && has(&r, "checkpoint at step 2") && has(&r, "File too large") && last_step(&r) == 1, "a failed periodic checkpoint: exit %d: %s",
              r.rc, r.out);
    run_free(&r);
    /* the other files a run writes: a failed one is exit 1 with the reason, and no partial file */
    snprintf(args, sizeof args, "%s --steps 2 --export-hf %s", g_model, path_in("hf"));
    r = run_gpt2(args, &o);
    TJT_CHECK(r.rc == 1 && has(&r, "--export-hf") && has(&r, "File too large"), "a failed --export-hf: exit %d: %s", r.rc, r.out);
    TJT_CHECK(!file_exists(path_in("hf/model.safetensors")) && !file_exists(path_in("hf/config.json")), "no partial export");
    run_free(&r);
    o.fsize_limit = 64;
    snprintf(args, sizeof args, "%s --steps 2 --svg %s", g_model, path_in("loss.svg"));
    r = run_gpt2(args, &o);
    TJT_CHECK(r.rc == 1 && has(&r, "--svg") && has(&r, "File too large") && has(&r, "trained 2 steps"), "a failed --svg: exit %d: %s", r.rc, r.out);
    TJT_CHECK(!file_exists(path_in("loss.svg")), "no partial svg");
    run_free(&r);
    o.fsize_limit = 2048;
    /* --save-every 3 --keep 2 over 10 steps: step 6 and 9 kept, 3 pruned, and the final one */
    snprintf(args, sizeof args, "%s --steps 10 --save %s --save-every 3 --keep 2", g_model, path_in("ck"));
    r = run_gpt2(args, NULL);
    TJT_CHECK(r.rc == 0 && file_exists(path_in("ck")) && file_exists(path_in("ck.step00000006")) && file_exists(path_in("ck.step00000009")) &&
                  !file_exists(path_in("ck.step00000003")) && count_files("ck.tmp") == 0,
              "periodic checkpoints: exit %d: %s", r.rc, r.out);
    run_free(&r);
    /* temp files of killed periodic saves are removed by the next periodic save */
    {
        char nm[600];
        pid_t dead = fork();
        FILE *f;
        if (dead == 0) _exit(0);
        waitpid(dead, NULL, 0);
        snprintf(nm, sizeof nm, "%s.step00000004.tmp.%ld.0", path_in("ct"), (long)dead);
        if ((f = fopen(nm, "wb"))) {
            fputs("half a checkpoint", f);
            fclose(f);
        }
        snprintf(args, sizeof args, "%s --steps 4 --save %s --save-every 2", g_model, path_in("ct"));
        r = run_gpt2(args, NULL);
        TJT_CHECK(r.rc == 0 && !file_exists(nm) && count_tmp("ct") == 0, "a killed periodic save's temp file is removed: exit %d, %d temp files", r.rc,
                  count_tmp("ct"));
        run_free(&r);
    }
    /* resume: the newest valid one; a corrupt newest is skipped with a warning */
    {
        char want10[32], got10[32];
        run_result base;
        snprintf(args, sizeof args, "%s --steps 12", g_model);
        base = run_gpt2(args, NULL);
        snprintf(args, sizeof args, "%s --steps 12 --resume %s", g_model, path_in("ck"));
        r = run_gpt2(args, NULL);
        TJT_CHECK(r.rc == 0 && has(&r, "resumed from") && has(&r, "at step 10") && last_step(&r) == 11 && !loss_of(&r, 9, got10, sizeof got10),
                  "resume from the final checkpoint: exit %d: %s", r.rc, r.out);
        TJT_CHECK(loss_of(&base, 10, want10, sizeof want10) && loss_of(&r, 10, got10, sizeof got10) && !strcmp(want10, got10),
                  "resumed loss at step 10 %s, uninterrupted %s", got10, want10);
        run_free(&r);
        unlink(path_in("ck"));
        {
            FILE *f = fopen(path_in("ck.step00000009"), "r+b");
            if (f) {
                fseek(f, 300, SEEK_SET);
                fputc('#', f);
                fclose(f);
            }
        }
        r = run_gpt2(args, NULL);
        TJT_CHECK(r.rc == 0 && has(&r, "skipping") && has(&r, "ck.step00000009") && has(&r, "resumed from") && has(&r, "ck.step00000006") &&
                      has(&r, "at step 6"),
                  "resume skips a corrupt newest checkpoint: exit %d: %s", r.rc, r.out);
        TJT_CHECK(loss_of(&base, 10, want10, sizeof want10) && loss_of(&r, 10, got10, sizeof got10) && !strcmp(want10, got10),
                  "resumed loss at step 10 %s, uninterrupted %s", got10, want10);
        run_free(&r);
        run_free(&base);
    }
}

/* --dropout: 0 is the run without the flag; with 0.1 the losses change, and
   a run resumed halfway draws the masks the uninterrupted run drew: the same
   losses and, at the end, the same checkpoint byte for byte */
static void test_dropout(void) {
    char args[2048], a[32], b[32];
    run_result plain, zero, drop, resumed;
    long s;
    int same0 = 1, differ = 0, same = 1;
    tjt_current = "CLI --dropout";
    snprintf(args, sizeof args, "%s --steps 8 --eval-every 4", g_model);
    plain = run_gpt2(args, NULL);
    snprintf(args, sizeof args, "%s --steps 8 --eval-every 4 --dropout 0", g_model);
    zero = run_gpt2(args, NULL);
    snprintf(args, sizeof args, "%s --steps 8 --eval-every 4 --dropout 0.1 --save %s --save-every 4", g_model, path_in("dk"));
    drop = run_gpt2(args, NULL);
    TJT_CHECK(plain.rc == 0 && zero.rc == 0 && drop.rc == 0 && last_step(&drop) == 7 && has(&drop, "dropout: 0.1"), "runs: exit %d, %d, %d: %s", plain.rc,
              zero.rc, drop.rc, drop.out);
    TJT_CHECK(!has(&zero, "dropout:"), "--dropout 0 says it drops: %s", zero.out);
    for (s = 0; s < 8; s++) {
        if (!loss_of(&plain, s, a, sizeof a) || !loss_of(&zero, s, b, sizeof b) || strcmp(a, b)) same0 = 0;
        if (loss_of(&drop, s, b, sizeof b) && strcmp(a, b)) differ++;
    }
    TJT_CHECK(same0, "--dropout 0 changed the losses of the run without the flag");
    TJT_CHECK(differ >= 4, "--dropout 0.1 changed only %d of 8 printed losses", differ);
    { /* the validation losses (no dropout) of the same params: step 0's */
        const char *p = strstr(plain.out ? plain.out : "", "step     0 | val loss "), *q = strstr(drop.out ? drop.out : "", "step     0 | val loss ");
        TJT_CHECK(p && q && !strncmp(p, q, 32), "the validation loss at step 0 depends on --dropout");
    }
    /* resume from step 4: the final checkpoint and the periodic one of step 8 set aside */
    if (rename(path_in("dk"), path_in("dk_full"))) TJT_CHECK(0, "no final checkpoint dk");
    unlink(path_in("dk.step00000008"));
    snprintf(args, sizeof args, "%s --steps 8 --eval-every 4 --dropout 0.1 --save %s --save-every 4 --resume %s", g_model, path_in("dk"), path_in("dk"));
    resumed = run_gpt2(args, NULL);
    TJT_CHECK(resumed.rc == 0 && has(&resumed, "at step 4") && last_step(&resumed) == 7, "resume: exit %d: %s", resumed.rc, resumed.out);
    for (s = 4; s < 8; s++)
        if (!loss_of(&resumed, s, a, sizeof a) || !loss_of(&drop, s, b, sizeof b) || strcmp(a, b)) same = 0;
    TJT_CHECK(same, "--dropout 0.1: the losses after resuming at step 4 differ from the uninterrupted run's");
    {
        size_t l1 = 0, l2 = 0;
        unsigned char *c1 = read_all(path_in("dk_full"), &l1), *c2 = read_all(path_in("dk"), &l2);
        TJT_CHECK(c1 && c2 && l1 == l2 && !memcmp(c1, c2, l1), "--dropout 0.1: the resumed run's final checkpoint differs from the uninterrupted run's");
        free(c1);
        free(c2);
    }
    run_free(&plain);
    run_free(&zero);
    run_free(&drop);
    run_free(&resumed);
}

/* kill -9 at random moments of a run with --save-every K; resume (or start
   over if no checkpoint was written yet) and compare with a run that was
   never interrupted */
static void test_kill(void) {
    char args[2048], rargs[2600];
    run_result base;
    int trial, ntrials = getenv("TJ_TEST_QUICK") ? 3 : 5, K = 4, steps = 60, nkilled = 0;
    double span; /* how long a run takes: the kill times are drawn within it */
    unsigned char *base_ck;
    size_t base_len = 0;
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    tjt_current = "kill -9 during --save-every";
    snprintf(args, sizeof args, "%s --steps %d --save %s --save-every %d --keep 2", g_model, steps, path_in("kk"), K);
    base = run_gpt2(args, NULL);
    TJT_CHECK(base.rc == 0 && last_step(&base) == steps - 1, "the uninterrupted run: exit %d: %s", base.rc, base.out);
    span = base.seconds;
    base_ck = read_all(path_in("kk"), &base_len);
    TJT_CHECK(base_ck && base_len > 0, "the uninterrupted run's final checkpoint");
    for (trial = 0; trial < ntrials; trial++) {
        run_opts o;
        run_result killed, resumed;
        long done, first = -1, s, start;
        int same = 1, ck_exists;
        char a[32], b[32];
        DIR *d = opendir(g_dir);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) /* a fresh start for every trial */
            if (!strncmp(e->d_name, "kk", 2)) unlink(path_in(e->d_name));
        if (d) closedir(d);
        memset(&o, 0, sizeof o);
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        o.kill_after = (0.05 + 0.75 * (double)(rng >> 11) / 9007199254740992.0) * span;
        killed = run_gpt2(args, &o);
        done = last_step(&killed); /* the last step the killed run finished */
        /* a kill during the first periodic save leaves only its temp file:
           no checkpoint to resume from (--resume would rightly refuse) */
        ck_exists = count_checkpoints("kk") > 0;
        if (killed.rc == 0) { /* finished before the kill: nothing to test this time; the
                                 next kills are drawn within this faster run's time */
            span = killed.seconds;
            run_free(&killed);
            continue;
        }
        nkilled++;
        TJT_CHECK(killed.rc == 128 + SIGKILL, "trial %d: the run was killed (status %d)", trial, killed.rc);
        /* resume like a restart script would: from the checkpoints if any */
        snprintf(rargs, sizeof rargs, "%s%s%s", args, ck_exists ? " --resume " : "", ck_exists ? path_in("kk") : "");
        resumed = run_gpt2(rargs, NULL);
        for (s = 0; s < steps; s++)
            if (loss_of(&resumed, s, a, sizeof a)) {
                if (first < 0) first = s;
                if (!loss_of(&base, s, b, sizeof b) || strcmp(a, b)) same = 0;
            }
        {   /* where it resumed: "at step N" of the resume line, 0 without a checkpoint */
            const char *at = strstr(resumed.out ? resumed.out : "", "resumed from ");
            at = at ? strstr(at, " at step ") : NULL;
            start = at ? strtol(at + 9, NULL, 10) : 0;
        }
        TJT_CHECK(resumed.rc == 0 && (last_step(&resumed) == steps - 1 || (start == steps && first < 0)), "trial %d: the resumed run finishes: exit %d: %s", trial,
                  resumed.rc, resumed.out);
        TJT_CHECK(first < 0 || first == start, "trial %d: resumed at step %ld, first loss at step %ld", trial, start, first);
        TJT_CHECK(same, "trial %d: losses after resuming at step %ld equal the uninterrupted run's", trial, start);
        {   /* bit for bit: the final checkpoints (params, m, v, step, data position) are the same file */
            size_t len = 0;
            unsigned char *ck = read_all(path_in("kk"), &len);
            TJT_CHECK(ck && base_ck && len == base_len && !memcmp(ck, base_ck, len), "trial %d: the final checkpoint equals the uninterrupted run's, byte for byte",
                      trial);
            free(ck);
        }
        TJT_CHECK(start >= done + 1 - K, "trial %d: killed after step %ld, resumed at step %ld: lost %ld steps, at most %d allowed", trial, done, start,
                  done + 1 - start, K);
        TJT_CHECK(count_tmp("kk") == 0, "trial %d: no temp file (kk.tmp.*, kk.step*.tmp.*) left after the resumed run's saves", trial);
        if (getenv("TJ_TEST_VERBOSE"))
            printf("  trial %d: killed at %.3f s after step %ld, resumed at step %ld\n", trial, o.kill_after, done, start);
        run_free(&killed);
        run_free(&resumed);
    }
    TJT_CHECK(nkilled > 0, "no trial was killed before it finished");
    free(base_ck);
    run_free(&base);
}

int main(void) {
    FILE *f;
    int i;
    unsetenv("TJ_DEVICES");
    if (make_dir("tj_cli")) return 1;
    /* data: 40 KB of text-like bytes */
    f = fopen(path_in("data.txt"), "wb");
    for (i = 0; f && i < 4000; i++) fprintf(f, "line %d: x = tj_add(x, y%d);\n", i, i % 7);
    if (f) fclose(f);
    snprintf(g_model, sizeof g_model,
             "--layers 1 --heads 2 --embed 16 --context 16 --batch 2 --devices 1 --threads 1 --eval-every 1000 --eval-batches 1 --sample 0 --svg ~ --data %s",
             path_in("data.txt"));
    test_validation();
    test_runs();
    test_dropout();
    test_kill();
    remove_dir();
    return tjt_finish();
}
