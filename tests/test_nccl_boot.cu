/* test_nccl_boot.cu — the NCCL transport's bootstrap, which needs no GPU.
 *
 * tinyjax_cuda.cu's NCCL section shares the NCCL unique id (128 opaque bytes)
 * from process 0 with the others by MPI, or through TJ_COORD: "host:port" (a
 * TCP rendezvous) or a path (a shared file). Here forked processes exchange a
 * random blob both ways, in both start orders, and the failures are checked:
 * timeouts on either side with a message naming TJ_COORD and what is missing,
 * a stale id file, a process count or id size that differs, a rank that comes
 * twice, a port in use, bad TJ_COORD values, no TJ_COORD at all. Also: the
 * local rank (TJ_LOCAL_RANK, the launcher's variable) and the GPU it picks.
 * No CUDA call is made, so it runs on any machine with the libraries.
 * Built with -DTJ_MPI (against tinyjax_cuda.cu built with -DTJ_NCCL -DTJ_MPI)
 * and run under mpirun, it checks the MPI path instead: the id by MPI_Bcast
 * (TJ_COORD unset) and the local rank by an MPI_COMM_TYPE_SHARED split.
 *
 *   nvcc -std=c++17 -Werror all-warnings -I. tests/test_nccl_boot.cu tinyjax_cuda.o -lcublas -lnccl -o build/test_nccl_boot
 */
#include "tinyjax.h"
#include "tj_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" int tj_nccl_local_rank(int *local_rank, char *err, size_t errlen);
extern "C" int tj_nccl_device_for(int local_rank, int per_process, int ndevices, char *err, size_t errlen);
extern "C" int tj_nccl_share_id(const char *coord, int rank, int nprocs, void *blob, size_t bytes, double timeout_s, char *err, size_t errlen);

#define CHECK TJT_CHECK /* tj_test.h */

#define ID 128
typedef struct {
    int rc;
    unsigned char blob[ID];
    char err[1024];
} result;
typedef struct {
    int rank, nprocs;   /* what the process is told                    */
    size_t bytes;       /* id size it expects                          */
    double delay_s;     /* starts this late                            */
    double timeout_s;
} proc;

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}
static void fill(unsigned char *b, unsigned seed) {
    int i;
    for (i = 0; i < ID; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (unsigned char)(seed >> 16);
    }
}
/* run n processes at once (fork), each sharing the id through coord; res[i]
   gets process i's result */
static void run(const char *coord, int n, const proc *p, result *res, unsigned seed) {
    int fd[16][2], i;
    pid_t pid[16];
    unsigned char want[ID];
    fill(want, seed);
    fflush(stdout);
    fflush(stderr);
    for (i = 0; i < n; i++) {
        if (pipe(fd[i])) {
            perror("pipe");
            exit(2);
        }
        pid[i] = fork();
        if (pid[i] == 0) {
            result r;
            memset(&r, 0, sizeof r);
            if (p[i].delay_s > 0) usleep((useconds_t)(p[i].delay_s * 1e6));
            if (p[i].rank == 0) memcpy(r.blob, want, ID);
            r.rc = tj_nccl_share_id(coord, p[i].rank, p[i].nprocs, r.blob, p[i].bytes, p[i].timeout_s, r.err, sizeof r.err);
            if (write(fd[i][1], &r, sizeof r) != (ssize_t)sizeof r) _exit(3);
            _exit(0);
        }
        close(fd[i][1]);
    }
    for (i = 0; i < n; i++) {
        size_t got = 0;
        ssize_t k;
        memset(&res[i], 0, sizeof res[i]);
        while (got < sizeof res[i] && (k = read(fd[i][0], (char *)&res[i] + got, sizeof res[i] - got)) > 0) got += (size_t)k;
        if (got != sizeof res[i]) {
            res[i].rc = -1;
            snprintf(res[i].err, sizeof res[i].err, "process %d died", i);
        }
        close(fd[i][0]);
        waitpid(pid[i], NULL, 0);
    }
}
static int has(const char *s, const char *a, const char *b = NULL, const char *c = NULL) {
    return strstr(s, a) && (!b || strstr(s, b)) && (!c || strstr(s, c));
}
/* a port nobody listens on now */
static int free_port(void) {
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &l)) {
        perror("free_port");
        exit(2);
    }
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* n processes exchange the id; every one must end with rank 0's bytes */
static void exchange_ok(const char *what, const char *coord, int n, int root_late, unsigned seed) {
    proc p[16];
    result r[16];
    unsigned char want[ID];
    int i, same = 1, ok = 1;
    double t0 = now_s();
    for (i = 0; i < n; i++) {
        p[i].rank = i;
        p[i].nprocs = n;
        p[i].bytes = ID;
        p[i].timeout_s = 20;
        p[i].delay_s = root_late ? (i == 0 ? 0.3 : 0) : (i == 0 ? 0 : 0.05 * i);
    }
    fill(want, seed);
    run(coord, n, p, r, seed);
    for (i = 0; i < n; i++) {
        ok &= r[i].rc == 0;
        same &= !memcmp(r[i].blob, want, ID);
        if (r[i].rc) fprintf(stderr, "  process %d: %s\n", i, r[i].err);
    }
    CHECK(ok, "%s: every process returns 0", what);
    CHECK(same, "%s: every process has process 0's id", what);
    CHECK(now_s() - t0 < 10, "%s: took %.1f s", what, now_s() - t0);
}

#if defined(TJ_MPI)
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>
/* under mpirun: the id from process 0 by MPI_Bcast, the local rank by a shared-memory split */
static int mpi_main(void) {
    int prov = 0, rank = 0, size = 0, lr = -2, counts[2], sums[2] = {0, 0};
    unsigned char want[ID], blob[ID];
    char err[1024];
    const char *ol = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &prov);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsetenv("TJ_COORD");
    unsetenv("TJ_LOCAL_RANK");
    fill(want, 77);
    memset(blob, 0, sizeof blob);
    if (rank == 0) memcpy(blob, want, ID);
    err[0] = 0;
    CHECK(tj_nccl_share_id(NULL, rank, size, blob, ID, 10, err, sizeof err) == 0, "process %d: MPI_Bcast of the id: %s", rank, err);
    CHECK(!memcmp(blob, want, ID), "process %d: has process 0's id (MPI)", rank);
    CHECK(tj_nccl_local_rank(&lr, err, sizeof err) == 0 && lr >= 0 && lr < size, "process %d: local rank %d from the shared-memory split", rank, lr);
    if (ol) CHECK(lr == atoi(ol), "process %d: local rank %d, OMPI_COMM_WORLD_LOCAL_RANK %s", rank, lr, ol);
    counts[0] = tjt_pass;
    counts[1] = tjt_fail;
    MPI_Reduce(counts, sums, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("%d passed, %d failed\n", sums[0], sums[1] + (size < 2)); /* one process would test nothing */
    MPI_Finalize();
    return rank == 0 && (sums[1] || size < 2) ? 1 : 0;
}
#endif

int main(void) {
    char tcp[64], file[256], dir[] = "/tmp/tj_nccl_boot_XXXXXX", err[1024];
    proc p[4];
    result r[4];
    int i, lr = -1;
    unsigned char blob[ID];
#if defined(TJ_MPI)
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE")) return mpi_main();
#endif
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    snprintf(file, sizeof file, "%s/id", dir);

    /* ---- exchanges that work ---- */
    snprintf(tcp, sizeof tcp, "127.0.0.1:%d", free_port());
    exchange_ok("tcp, 4 processes, process 0 first", tcp, 4, 0, 11);
    exchange_ok("tcp, 4 processes, process 0 last (the others retry)", tcp, 4, 1, 12); /* the same port again */
    snprintf(tcp, sizeof tcp, "localhost:%d", free_port());
    exchange_ok("tcp by host name, 2 processes", tcp, 2, 0, 13);
    exchange_ok("file, 4 processes, process 0 first", file, 4, 0, 21);
    exchange_ok("file, 4 processes, process 0 last", file, 4, 1, 22);
    {
        struct stat st;
        char ack[300];
        snprintf(ack, sizeof ack, "%s.ack.1", file);
        CHECK(stat(file, &st) != 0 && stat(ack, &st) != 0, "file: the id file and acknowledgements are removed after the exchange");
    }
    fill(blob, 5);
    CHECK(tj_nccl_share_id("bad", 0, 1, blob, ID, 1, err, sizeof err) == 0, "one process: nothing to share, TJ_COORD not read");

    /* ---- timeouts ---- */
    snprintf(tcp, sizeof tcp, "127.0.0.1:%d", free_port());
    p[0] = (proc){1, 2, ID, 0, 0.5};
    run(tcp, 1, p, r, 1);
    CHECK(r[0].rc && has(r[0].err, "timed out after 0.5 s connecting to process 0", tcp, "process 1"), "tcp: a process without process 0: %s", r[0].err);
    p[0] = (proc){0, 3, ID, 0, 0.5};
    run(tcp, 1, p, r, 1);
    CHECK(r[0].rc && has(r[0].err, "process 0 timed out after 0.5 s", "0 of 2 other processes connected", "missing: 1, 2"), "tcp: process 0 alone: %s", r[0].err);
    p[0] = (proc){0, 3, ID, 0, 1.0};
    p[1] = (proc){1, 3, ID, 0, 1.0};
    run(tcp, 2, p, r, 1);
    CHECK(r[1].rc == 0 && r[0].rc && has(r[0].err, "1 of 2 other processes connected", "missing: 2"), "tcp: one process missing: %s / %s", r[0].err, r[1].err);
    p[0] = (proc){1, 2, ID, 0, 0.5};
    run(file, 1, p, r, 1);
    CHECK(r[0].rc && has(r[0].err, "process 1 timed out after 0.5 s waiting for process 0 to write the id file", file), "file: no process 0: %s", r[0].err);
    p[0] = (proc){0, 3, ID, 0, 0.5};
    p[1] = (proc){1, 3, ID, 0, 2};
    run(file, 2, p, r, 1);
    CHECK(r[0].rc && has(r[0].err, "process 0 timed out after 0.5 s", "1 of 2 other processes read the id file", "missing: 2"), "file: process 0, one missing: %s",
          r[0].err);
    {
        struct stat st;
        CHECK(stat(file, &st) != 0, "file: process 0 removes the id file when it times out");
    }
    { /* a stale file: process 0 killed after writing it, before anyone read it */
        pid_t k = fork();
        if (k == 0) {
            char e[600];
            fill(blob, 9);
            tj_nccl_share_id(file, 0, 2, blob, ID, 60, e, sizeof e);
            _exit(0);
        }
        usleep(300000);
        kill(k, SIGKILL);
        waitpid(k, NULL, 0);
        sleep(2);
        p[0] = (proc){1, 2, ID, 0, 0.5};
        run(file, 1, p, r, 1);
        CHECK(r[0].rc && has(r[0].err, "timed out", "a stale file", "was ignored"), "file: a stale id file is ignored: %s", r[0].err);
        remove(file);
    }

    /* ---- disagreements ---- */
    snprintf(tcp, sizeof tcp, "127.0.0.1:%d", free_port());
    p[0] = (proc){0, 2, ID, 0, 5};
    p[1] = (proc){1, 3, ID, 0, 5};
    run(tcp, 2, p, r, 1);
    CHECK(r[0].rc && has(r[0].err, "process 1 says 3 processes, process 0 was told 2"), "tcp: process counts differ (process 0): %s", r[0].err);
    CHECK(r[1].rc && has(r[1].err, "process 1 was told 3 processes, process 0 says 2"), "tcp: process counts differ (process 1): %s", r[1].err);
    p[0] = (proc){0, 2, ID, 0, 5};
    p[1] = (proc){1, 2, 64, 0, 5};
    run(tcp, 2, p, r, 1);
    CHECK(r[0].rc && r[1].rc && has(r[1].err, "expects a 64-byte id, process 0 has 128 bytes"), "tcp: id sizes differ: %s", r[1].err);
    p[0] = (proc){0, 3, ID, 0, 5};
    p[1] = (proc){1, 3, ID, 0, 5};
    p[2] = (proc){1, 3, ID, 0.3, 5};
    run(tcp, 3, p, r, 1);
    CHECK(r[0].rc && has(r[0].err, "rank 1 connected", "twice"), "tcp: a rank twice (process 0): %s", r[0].err);
    CHECK(r[2].rc && has(r[2].err, "refused rank 1"), "tcp: a rank twice (the second): %s", r[2].err);
    p[0] = (proc){0, 2, ID, 0, 5};
    p[1] = (proc){1, 3, ID, 0.2, 5};
    run(file, 2, p, r, 1);
    CHECK(r[1].rc && has(r[1].err, "process 1 was told 3 processes, process 0 says 2"), "file: process counts differ: %s", r[1].err);
    remove(file);
    { /* the port is taken */
        struct sockaddr_in a;
        socklen_t l = sizeof a;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) && !listen(fd, 1) && !getsockname(fd, (struct sockaddr *)&a, &l)) {
            snprintf(tcp, sizeof tcp, "127.0.0.1:%d", ntohs(a.sin_port));
            CHECK(tj_nccl_share_id(tcp, 0, 2, blob, ID, 1, err, sizeof err) && has(err, "process 0 cannot listen on port", "choose a free port"),
                  "tcp: port in use: %s", err);
        }
        if (fd >= 0) close(fd);
    }

    /* ---- bad TJ_COORD ---- */
    {
        static const char *bad[] = {"nohost", "host:", ":1234", "host:0", "host:70000", "host:12ab", "host:-5"};
        for (i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
            err[0] = 0;
            CHECK(tj_nccl_share_id(bad[i], 1, 2, blob, ID, 1, err, sizeof err) && has(err, "TJ_COORD='", bad[i], "is neither host:port"), "TJ_COORD=%s: %s",
                  bad[i], err);
        }
        /* a resolver that answers "no such host" fails at once; one that
           cannot be reached (EAI_AGAIN: a machine without DNS) is retried
           until the timeout, and the message says what the last try met */
        CHECK(tj_nccl_share_id("no-such-host.invalid:4000", 1, 2, blob, ID, 2, err, sizeof err) &&
                  (has(err, "cannot resolve host 'no-such-host.invalid'") || has(err, "timed out", "resolving 'no-such-host.invalid'")),
              "an unknown host: %s", err);
        unsetenv("TJ_COORD");
        CHECK(tj_nccl_share_id(NULL, 1, 2, blob, ID, 1, err, sizeof err) && has(err, "no way to share the NCCL id between 2 processes", "TJ_COORD=host:port"),
              "no TJ_COORD: %s", err);
        setenv("TJ_COORD", "nohost", 1);
        CHECK(tj_nccl_share_id(NULL, 1, 2, blob, ID, 1, err, sizeof err) && has(err, "TJ_COORD='nohost'"), "TJ_COORD from the environment: %s", err);
        unsetenv("TJ_COORD");
        CHECK(tj_nccl_share_id("/nonexistent-dir-tj/id", 0, 2, blob, ID, 1, err, sizeof err) && has(err, "process 0 cannot write the id file"),
              "file in a missing directory: %s", err);
    }

    /* ---- local rank and GPU ---- */
    {
        static const char *launch[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
        for (i = 0; i < 4; i++) unsetenv(launch[i]);
        unsetenv("TJ_LOCAL_RANK");
        CHECK(tj_nccl_local_rank(&lr, err, sizeof err) == 0 && lr == -1, "no launcher: -1, the transport decides (got %d)", lr);
        setenv("SLURM_LOCALID", "2", 1);
        CHECK(tj_nccl_local_rank(&lr, err, sizeof err) == 0 && lr == 2, "SLURM_LOCALID=2 (got %d)", lr);
        setenv("TJ_LOCAL_RANK", "3", 1);
        CHECK(tj_nccl_local_rank(&lr, err, sizeof err) == 0 && lr == 3, "TJ_LOCAL_RANK wins (got %d)", lr);
        setenv("TJ_LOCAL_RANK", "x1", 1);
        CHECK(tj_nccl_local_rank(&lr, err, sizeof err) && has(err, "TJ_LOCAL_RANK='x1' is not a local rank"), "TJ_LOCAL_RANK=x1: %s", err);
        unsetenv("TJ_LOCAL_RANK");
        setenv("SLURM_LOCALID", "-1", 1);
        CHECK(tj_nccl_local_rank(&lr, err, sizeof err) && has(err, "SLURM_LOCALID='-1'", "TJ_LOCAL_RANK"), "SLURM_LOCALID=-1: %s", err);
        unsetenv("SLURM_LOCALID");
        CHECK(tj_nccl_device_for(0, 1, 1, err, sizeof err) == 0, "local rank 0, 1 GPU each, 1 GPU: GPU 0");
        CHECK(tj_nccl_device_for(3, 1, 8, err, sizeof err) == 3, "local rank 3, 1 GPU each: GPU 3");
        CHECK(tj_nccl_device_for(1, 2, 4, err, sizeof err) == 2, "local rank 1, 2 GPUs each: GPUs 2..3");
        CHECK(tj_nccl_device_for(2, 2, 4, err, sizeof err) == -1 && has(err, "needs GPUs 4..5, but this node has 4"), "too many processes: %s", err);
        CHECK(tj_nccl_device_for(0, 1, 0, err, sizeof err) == -1 && has(err, "this node has 0"), "no GPU: %s", err);
    }
    rmdir(dir);
    return tjt_finish();
}
