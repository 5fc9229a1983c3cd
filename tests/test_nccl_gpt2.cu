/* test_nccl_gpt2.cu — the GPT-2 demo across GPUs: N processes, one GPU each.
 *
 * Where a machine has N >= 2 GPUs (N = the GPUs, at most 8, an even count):
 *  1. every collective kind with N ranks = N GPUs: tests/test_nccl.cu run as
 *     N processes of the plain launcher (TJ_NPROCS, TJ_RANK, TJ_COORD over
 *     TCP), each of which must end "K passed, 0 failed";
 *  2. the demo's sharded training step: `gpt2_train --cuda --mesh M` as N
 *     processes with TJ_NCCL_DETERMINISTIC=1 (FSDP + tensor parallel,
 *     M = "data=N/2 model=2"; and pure FSDP, M = "data=N"), against the same
 *     mesh simulated in one process on one GPU: every step's loss and the
 *     final state (the --save checkpoint, every array) bit for bit; and
 *     against one device without a mesh: every loss within 2e-3 (another
 *     order of sums, so not the same bits).
 * The plain launcher is used (fork/exec with TJ_NPROCS/TJ_RANK/TJ_COORD, as
 * on two nodes); TJ_NCCL_TEST_MPIRUN=1 launches gpt2_train with mpirun
 * instead (it must then be a -DTJ_MPI build; part 1 is left out: test_nccl
 * is not one).
 * With fewer than 2 GPUs it says why, prints "0 passed, 0 failed, 1 skipped"
 * and exits 0: this part has not run yet (no machine with 2+ GPUs so far).
 * TJ_NCCL_TEST_CPU=1 runs part 2 on the CPU instead, N = 4 processes under
 * mpirun without --cuda (an MPI build of gpt2_train), against 4 simulated
 * devices in one process: the same comparisons, which checks this test's
 * plumbing (launching, parsing, checkpoint comparison) without a GPU.
 *
 *   ./build/test_nccl_gpt2 build/gpt2_train_nccl [build/test_nccl]
 *   TJ_NCCL_TEST_CPU=1 ./build/test_nccl_gpt2 build/mpi/gpt2_train_nccl
 * Run from the repository root. Built by build.sh test:
 *   nvcc -std=c++17 -I. tests/test_nccl_gpt2.cu build/tinyjax_cuda_nccl.o -lcublas -lnccl -o build/test_nccl_gpt2
 */
#include "tinyjax.h"
#include "tj_test.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK TJT_CHECK
#define MAXP 8

static char dir[64];                  /* the scratch folder */
static int cpu_mode, use_mpirun, port; /* TJ_NCCL_TEST_CPU, TJ_NCCL_TEST_MPIRUN, the next TCP port */

/* Start argv as n processes (n = 1: one plain process) and wait for them;
   output of process r (stdout and stderr) in DIR/tag.r; under mpirun one
   file, DIR/tag.0, with everything (gpt2_train's processes > 0 print only
   errors). extra: more environment, "NAME=VALUE" entries ending in NULL.
   0 when every process exited 0. */
static int launch(const char *tag, int n, const char *const *argv, const char *const *extra) {
    pid_t pid[MAXP];
    int r, bad = 0, procs = use_mpirun && n > 1 ? 1 : n;
    char coord[64];
    if (cpu_mode || use_mpirun) snprintf(coord, sizeof coord, "%s", "");
    else snprintf(coord, sizeof coord, "127.0.0.1:%d", port++);
    for (r = 0; r < procs; r++) {
        if ((pid[r] = fork()) == 0) {
            char out[128], num[16];
            const char *v[64];
            int k = 0, i, fd;
            snprintf(out, sizeof out, "%s/%s.%d", dir, tag, r);
            if ((fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
            for (i = 0; extra && extra[i]; i++) putenv((char *)extra[i]);
            setenv("TJ_TIMEOUT", "120", 0); /* a hang fails the run instead of waiting 300 s */
            if (procs == 1 && n > 1) { /* mpirun -np n argv... */
                static const char *mpi[] = {"mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl_vader_single_copy_mechanism", "none", "-np"};
                for (i = 0; i < 7; i++) v[k++] = mpi[i];
                snprintf(num, sizeof num, "%d", n);
                v[k++] = num;
            } else if (n > 1) { /* the plain launcher */
                snprintf(num, sizeof num, "%d", n);
                setenv("TJ_NPROCS", num, 1);
                snprintf(num, sizeof num, "%d", r);
                setenv("TJ_RANK", num, 1);
                setenv("TJ_LOCAL_RANK", num, 1);
                setenv("TJ_COORD", coord, 1);
            }
            for (i = 0; argv[i] && k < 63; i++) v[k++] = argv[i];
            v[k] = NULL;
            execvp(v[0], (char *const *)v);
            fprintf(stderr, "test_nccl_gpt2: cannot run %s: %s\n", v[0], strerror(errno));
            _exit(127);
        }
        if (pid[r] < 0) bad = 1;
    }
    for (r = 0; r < procs; r++) {
        int st = 0;
        if (pid[r] > 0 && (waitpid(pid[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))) bad = 1;
    }
    return bad;
}

/* the file DIR/tag.r as a string (malloc'd; "" when missing) */
static char *output(const char *tag, int r) {
    char path[128], err[256];
    char *s = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s.%d", dir, tag, r);
    if (tj_read_file(path, &s, &len, err, sizeof err) || !s) {
        s = (char *)calloc(1, 1);
    }
    return s;
}
static void show(const char *tag, int r) { /* after a failure: what the process printed */
    char *s = output(tag, r);
    fprintf(stderr, "---- %s, process %d:\n%s----\n", tag, r, s);
    free(s);
}

/* The loss lines of gpt2_train's output ("step N | loss X" and "step N |
   val loss X"), up to the second '|': at most `max` of them into lines[]. */
static int losses(const char *out, char lines[][64], double *vals, int max) {
    int n = 0;
    const char *p = out;
    while (p && *p && n < max) {
        const char *e = strchr(p, '\n'), *bar1, *bar2;
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (!strncmp(p, "step ", 5) && (bar1 = (const char *)memchr(p, '|', len)) != NULL) {
            const char *l = bar1 + 1;
            while (*l == ' ') l++;
            if (!strncmp(l, "loss ", 5) || !strncmp(l, "val loss ", 9)) {
                bar2 = (const char *)memchr(l, '|', len - (size_t)(l - p));
                size_t k = bar2 ? (size_t)(bar2 - p) : len;
                if (k > 63) k = 63;
                memcpy(lines[n], p, k);
                lines[n][k] = 0;
                vals[n] = atof(strstr(lines[n], "loss ") + 5);
                n++;
            }
        }
        p = e ? e + 1 : NULL;
    }
    return n;
}

/* Every array of two checkpoints, bit for bit (the same names, dtypes and
   sizes). 1 when equal; else 0 after a message. */
static int same_state(const char *a, const char *b) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *ta = tj_tree_new(c), *tb = tj_tree_new(c);
    int ok = 1, k;
    if (tj_tree_load(ta, a) || tj_tree_load(tb, b)) {
        fprintf(stderr, "test_nccl_gpt2: loading the checkpoints: %s\n", tj_error(c));
        ok = 0;
    } else if (tj_tree_size(ta) != tj_tree_size(tb) || tj_tree_size(ta) < 2) {
        fprintf(stderr, "test_nccl_gpt2: %s has %d leaves, %s %d\n", a, tj_tree_size(ta), b, tj_tree_size(tb));
        ok = 0;
    }
    for (k = 0; ok && k < tj_tree_size(ta); k++) {
        tj_array *x = tj_tree_array_at(ta, k), *y = tj_tree_array_at(tb, k);
        size_t bytes;
        void *bx, *by;
        if (strcmp(tj_tree_name(ta, k), tj_tree_name(tb, k))) {
            fprintf(stderr, "test_nccl_gpt2: leaf %d is %s in one, %s in the other\n", k, tj_tree_name(ta, k), tj_tree_name(tb, k));
            ok = 0;
            break;
        }
        if (!x && !y) continue; /* an integer leaf (step, data_pos): in the loss lines */
        if (!x || !y || tj_array_numel(x) != tj_array_numel(y) || tj_array_dtype(x) != tj_array_dtype(y)) {
            fprintf(stderr, "test_nccl_gpt2: %s differs in kind, size or dtype\n", tj_tree_name(ta, k));
            ok = 0;
            break;
        }
        bytes = (size_t)tj_array_numel(x) * tj_dtype_size(tj_array_dtype(x));
        bx = malloc(bytes ? bytes : 1);
        by = malloc(bytes ? bytes : 1);
        if (!bx || !by || tj_array_read(x, tj_array_dtype(x), bx) || tj_array_read(y, tj_array_dtype(y), by) || memcmp(bx, by, bytes)) {
            fprintf(stderr, "test_nccl_gpt2: %s is not bit-identical\n", tj_tree_name(ta, k));
            ok = 0;
        }
        free(bx);
        free(by);
    }
    tj_tree_free(ta);
    tj_tree_free(tb);
    tj_ctx_free(c);
    return ok;
}

/* A small text, the same every run: the training data. */
static int write_data(const char *path) {
    static const char *words[] = {"the", "tensor", "is", "sharded", "over", "devices", "and", "each", "gpu", "holds", "one", "block", "of", "it,",
                                  "then", "gathers", "reduces", "scatters", "a", "model."};
    FILE *f = fopen(path, "w");
    unsigned s = 12345;
    int i;
    if (!f) return 1;
    for (i = 0; i < 6000; i++) {
        s = s * 1103515245u + 12345u;
        fprintf(f, "%s%s", words[(s >> 16) % 20], (s >> 8) % 11 == 0 ? "\n" : " ");
    }
    return fclose(f) != 0;
}

/* gpt2_train's arguments: the small model, steps, data, checkpoint `save`,
   --cuda unless cpu_mode, --mesh `mesh` unless NULL */
static void gpt2_args(const char **v, const char *bin, const char *mesh, const char *save, const char *data) {
    static const char *fixed[] = {"--layers", "2", "--heads", "4", "--embed", "64", "--context", "32", "--batch", "8", "--steps", "4",
                                  "--eval-every", "2", "--eval-batches", "2", "--sample", "0", "--svg", "", "--threads", "1"};
    int k = 0;
    size_t i;
    v[k++] = bin;
    for (i = 0; i < sizeof fixed / sizeof fixed[0]; i++) v[k++] = fixed[i];
    v[k++] = "--data";
    v[k++] = data;
    v[k++] = "--save";
    v[k++] = save;
    if (!cpu_mode) v[k++] = "--cuda";
    if (mesh) {
        v[k++] = "--mesh";
        v[k++] = mesh;
    }
    v[k] = NULL;
}

/* Part 2 for one mesh of n devices. */
static void gpt2_case(const char *bin, int n, const char *mesh, const char *data) {
    static const char *det[] = {"TJ_NCCL_DETERMINISTIC=1", NULL};
    const char *v[48];
    char ck_n[128], ck_sim[128], ck_one[128], tag[3][32], ln[3][16][64];
    double val[3][16];
    char *out[3];
    int rc[3], cnt[3], i, k;
    snprintf(ck_n, sizeof ck_n, "%s/n.safetensors", dir);
    snprintf(ck_sim, sizeof ck_sim, "%s/sim.safetensors", dir);
    snprintf(ck_one, sizeof ck_one, "%s/one.safetensors", dir);
    snprintf(tag[0], sizeof tag[0], "procs");
    snprintf(tag[1], sizeof tag[1], "simulated");
    snprintf(tag[2], sizeof tag[2], "one");
    gpt2_args(v, bin, mesh, ck_n, data);
    rc[0] = launch(tag[0], n, v, det);
    gpt2_args(v, bin, mesh, ck_sim, data);
    rc[1] = launch(tag[1], 1, v, NULL);
    gpt2_args(v, bin, NULL, ck_one, data);
    rc[2] = launch(tag[2], 1, v, NULL);
    for (i = 0; i < 3; i++) {
        out[i] = output(tag[i], 0);
        cnt[i] = losses(out[i], ln[i], val[i], 16);
    }
    tjt_current = mesh;
    CHECK(!rc[0] && !rc[1] && !rc[2], "%s: a run failed (exit statuses: %d processes %d, simulated %d, one device %d)", mesh, n, rc[0], rc[1], rc[2]);
    CHECK(cnt[0] == 7 && cnt[1] == 7 && cnt[2] == 7, "%s: %d, %d, %d loss lines, want 7 (4 steps, 3 evaluations)", mesh, cnt[0], cnt[1], cnt[2]);
    for (k = 0; k < cnt[0] && k < cnt[1]; k++) CHECK(!strcmp(ln[0][k], ln[1][k]), "%s: '%s' in %d processes, '%s' simulated", mesh, ln[0][k], n, ln[1][k]);
    for (k = 0; k < cnt[0] && k < cnt[2]; k++)
        CHECK(fabs(val[0][k] - val[2][k]) <= 2e-3, "%s: '%s' in %d processes, '%s' on one device", mesh, ln[0][k], n, ln[2][k]);
    CHECK(!rc[0] && !rc[1] && same_state(ck_n, ck_sim), "%s: the final state of %d processes differs from the simulated mesh's", mesh, n);
    if (tjt_fail)
        for (i = 0; i < 3; i++) show(tag[i], 0);
    else
        printf("gpt2 %-16s: %d processes%s: %d losses (%.4f .. %.4f) and the final state bit-identical to %d simulated devices in one process; "
               "losses within 2e-3 of one device\n",
               mesh, n, cpu_mode ? " (CPU, mpirun)" : " x 1 GPU (NCCL, deterministic)", cnt[0], cnt[0] ? val[0][0] : 0.0, cnt[0] ? val[0][cnt[0] - 1] : 0.0, n);
    for (i = 0; i < 3; i++) free(out[i]);
}

int main(int argc, char **argv) {
    const char *e;
    char data[128], m1[48], m2[48];
    int ndev = 0, n, r;
    cudaError_t ce;
    cpu_mode = (e = getenv("TJ_NCCL_TEST_CPU")) != NULL && atoi(e) > 0;
    use_mpirun = cpu_mode || ((e = getenv("TJ_NCCL_TEST_MPIRUN")) != NULL && atoi(e) > 0);
    /* bit for bit against simulated devices: on the CPU these would run a
       dot and its collective as one node (tj_set_collective_matmul), which
       sums in another order than the processes' separate collectives */
    if (cpu_mode) setenv("TJ_NO_COLL_MATMUL", "1", 1);
    port = 21000 + (int)(getpid() % 20000);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: %s GPT2_TRAIN [TEST_NCCL]  (see tests/test_nccl_gpt2.cu)\n", argv[0]);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    if (!cpu_mode) {
        if ((ce = cudaGetDeviceCount(&ndev)) != cudaSuccess) ndev = 0;
        if (ndev < 2) {
            printf("test_nccl_gpt2: skipped: %d GPU%s here%s%s%s; this test runs N processes on N >= 2 GPUs (TJ_NCCL_TEST_CPU=1 runs its GPT-2 part on the CPU)\n",
                   ndev, ndev == 1 ? "" : "s", ce != cudaSuccess ? " (cudaGetDeviceCount: " : "", ce != cudaSuccess ? cudaGetErrorString(ce) : "", ce != cudaSuccess ? ")" : "");
            printf("0 passed, 0 failed, 1 skipped\n");
            return 0;
        }
    }
    n = cpu_mode ? 4 : (ndev > MAXP ? MAXP : ndev) / 2 * 2;
    snprintf(dir, sizeof dir, "/tmp/tj_nccl_gpt2_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("test_nccl_gpt2: mkdtemp");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(data, sizeof data, "%s/data.txt", dir);
    CHECK(!write_data(data), "writing %s", data);

    if (!use_mpirun && argc > 2) { /* 1. every collective kind, N processes x 1 GPU */
        const char *v[] = {argv[2], NULL};
        int bad = launch("test_nccl", n, v, NULL);
        tjt_current = "test_nccl";
        for (r = 0; r < n; r++) {
            char *s = output("test_nccl", r), *last = strstr(s, " passed, ");
            while (last && strstr(last + 1, " passed, ")) last = strstr(last + 1, " passed, ");
            CHECK(!bad && last && !strncmp(last, " passed, 0 failed", 17), "test_nccl as process %d of %d did not pass", r, n);
            if (tjt_fail) show("test_nccl", r);
            free(s);
        }
        if (!tjt_fail) printf("test_nccl: every collective kind, %d processes x 1 GPU (TCP rendezvous): passed in every process\n", n);
    }
    /* 2. the sharded GPT-2 step: FSDP + tensor parallel, and pure FSDP */
    if (n >= 4) snprintf(m1, sizeof m1, "data=%d model=2", n / 2);
    else snprintf(m1, sizeof m1, "data=1 model=2");
    snprintf(m2, sizeof m2, "data=%d", n);
    gpt2_case(argv[1], n, m1, data);
    if (!cpu_mode) gpt2_case(argv[1], n, m2, data); /* the CPU mode checks the plumbing once */
    if (!tjt_fail) { /* keep the folder after a failure, to look at */
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd)) fprintf(stderr, "test_nccl_gpt2: could not remove %s\n", dir);
    } else fprintf(stderr, "test_nccl_gpt2: outputs kept in %s\n", dir);
    return tjt_finish();
}
