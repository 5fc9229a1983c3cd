/* tj_tree_load reads a checkpoint one tensor at a time: the header in
   memory, each tensor read from the file when its array is made, the
   checksum streamed over the whole file. So a load holds the arrays it
   makes and about one tensor's bytes, not a copy of the whole file (in
   process mode every process loads the file). Checked here with the
   library's allocation hooks (TJ_MALLOC, set by main with tjt_set_alloc
   of tests/tj_internal.h): the peak of host memory during
   a load, the values bit for bit, corruption and truncation in a file
   of several read chunks, and every allocation of a load failing in
   turn (an error, the tree unchanged, the context usable). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static long long mem_now, mem_peak;
static long mem_calls, mem_fail_at = -1;
/* every block carries its size in front (16 bytes, keeping malloc's alignment) */
static void *mem_malloc(size_t n) {
    char *p = NULL;
    pthread_mutex_lock(&mem_mu);
    if (mem_calls++ != mem_fail_at && (p = (char *)malloc(n + 16)) != NULL) {
        *(size_t *)p = n;
        mem_now += (long long)n;
        if (mem_now > mem_peak) mem_peak = mem_now;
        p += 16;
    }
    pthread_mutex_unlock(&mem_mu);
    return p;
}
static void mem_free(void *q) {
    char *p = (char *)q;
    if (!p) return;
    p -= 16;
    pthread_mutex_lock(&mem_mu);
    mem_now -= (long long)*(size_t *)p;
    pthread_mutex_unlock(&mem_mu);
    free(p);
}
static void *mem_realloc(void *q, size_t n) {
    char *p;
    size_t old;
    if (!q) return mem_malloc(n);
    old = *(size_t *)((char *)q - 16);
    if (!(p = (char *)mem_malloc(n))) return NULL;
    memcpy(p, q, old < n ? old : n);
    mem_free(q);
    return p;
}
#include "../tinyjax.h"
#define TJT_FILES
#include "tj_test.h"

#include <unistd.h>

#define NLEAF 6
#define LEAF_N (512 * 1024) /* 2 MiB of f32 per leaf: the file spans several 1 MiB read chunks */

static long long mem_reset_peak(void) {
    long long now;
    pthread_mutex_lock(&mem_mu);
    mem_peak = mem_now;
    now = mem_now;
    pthread_mutex_unlock(&mem_mu);
    return now;
}
static long long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    long n;
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fclose(f);
    return n;
}
static float leaf_value(int leaf, int64_t k) { return (float)((k * 2654435761u + (uint64_t)leaf * 97u) % 100003u) / 1000.0f - 50.0f; }

/* a tree of NLEAF f32 leaves, a bf16 leaf and an int */
static tj_tree *make_tree(tj_ctx *c) {
    tj_tree *t = tj_tree_new(c);
    float *v = (float *)malloc(sizeof(float) * LEAF_N);
    uint16_t hb[1000];
    char name[32];
    int i, k;
    for (i = 0; i < NLEAF; i++) {
        for (k = 0; k < LEAF_N; k++) v[k] = leaf_value(i, k);
        snprintf(name, sizeof name, "layer%d.w", i);
        tj_tree_set_array(t, name, tj_array_new(c, TJ_F32, "in=512 out=1024", v));
    }
    for (k = 0; k < 1000; k++) hb[k] = (uint16_t)(0x3f80 + k);
    tj_tree_set_array(t, "scale", tj_array_new(c, TJ_BF16, "out=1000", hb));
    tj_tree_set_int(t, "step", 42);
    free(v);
    return t;
}
/* 0 if t holds make_tree's values bit for bit */
static long long tree_differs(tj_tree *t) {
    float *got = (float *)malloc(sizeof(float) * LEAF_N);
    uint16_t hb[1000];
    char name[32];
    long long bad = 0;
    int i, k;
    for (i = 0; i < NLEAF; i++) {
        tj_array *a;
        snprintf(name, sizeof name, "layer%d.w", i);
        if (!(a = tj_tree_array(t, name)) || tj_array_numel(a) != LEAF_N || tj_array_read(a, TJ_F32, got) != TJ_OK) {
            bad += LEAF_N;
            continue;
        }
        for (k = 0; k < LEAF_N; k++) bad += memcmp(&got[k], &(float){leaf_value(i, k)}, 4) != 0;
    }
    if (!tj_tree_array(t, "scale") || tj_array_read(tj_tree_array(t, "scale"), TJ_BF16, hb) != TJ_OK) bad += 1000;
    else
        for (k = 0; k < 1000; k++) bad += hb[k] != (uint16_t)(0x3f80 + k);
    bad += tj_tree_int(t, "step") != 42;
    free(got);
    return bad;
}

static void test_peak(tj_ctx *c) {
    const char *path = path_in("big.safetensors");
    tj_tree *src = make_tree(c), *t;
    long long before, peak, arrays = (long long)NLEAF * LEAF_N * 4 + 2000, fsz, bound;
    tjt_current = "peak";
    TJT_CHECK(tj_tree_save(src, path) == TJ_OK, "save: %s", tj_error(c));
    tj_tree_free(src);
    fsz = file_size(path);
    /* a first load, not measured: a backend's one-time set-up (devsim's
       streams) is not the load's */
    t = tj_tree_new(c);
    TJT_CHECK(tj_tree_load(t, path) == TJ_OK, "load: %s", tj_error(c));
    tj_tree_free(t);
    t = tj_tree_new(c);
    before = mem_reset_peak();
    TJT_CHECK(tj_tree_load(t, path) == TJ_OK, "load: %s", tj_error(c));
    peak = mem_peak - before;
    /* the arrays it made, one leaf's bytes (read straight into the upload
       buffer), with a backend (devsim) the upload's staging copy of a
       device's block (tj__array_upload), the 1 MiB checksum chunk (freed
       before the leaves), and the header and bookkeeping: at most two
       leaves and 2 MiB besides the arrays. Reading the whole file first
       added its 12.6 MB. */
    bound = arrays + 2LL * LEAF_N * 4 + (2 << 20);
    TJT_CHECK(peak <= bound, "a load of a %lld-byte file peaked at %lld bytes of host memory; its arrays are %lld bytes (bound %lld)", fsz, peak, arrays, bound);
    /* (the arrays are host memory, through the hooks, on the CPU backend and
       devsim; the CUDA backend and its emulator allocate their own) */
    if (tjt_cpu_kernels(c)) TJT_CHECK(peak >= arrays, "the peak %lld is below the arrays' %lld bytes: the hooks miss the arrays", peak, arrays);
    TJT_CHECK(tree_differs(t) == 0, "%lld values differ after the load", tree_differs(t));
    printf("  load of a %.1f MB file: host peak %.1f MB above the start, arrays %.1f MB\n", fsz / 1e6, peak / 1e6, arrays / 1e6);
    tj_tree_free(t);
}

/* a flipped byte deep in the data section (past the first read chunks)
   and a truncated copy: errors, the tree unchanged */
static void test_corrupt(tj_ctx *c) {
    const char *path = path_in("big.safetensors");
    char bad[512];
    long long n = file_size(path), k;
    FILE *f = fopen(path, "rb");
    unsigned char *b = (unsigned char *)malloc((size_t)n);
    tj_tree *t;
    tjt_current = "corrupt";
    TJT_CHECK(f && fread(b, 1, (size_t)n, f) == (size_t)n, "read back %s", path);
    if (f) fclose(f);
    snprintf(bad, sizeof bad, "%s", path_in("flip.safetensors"));
    for (k = 0; k < 3; k++) {
        long long at = k == 0 ? n - 1 : k == 1 ? n / 2 : 5 * 1024 * 1024 + 3;
        FILE *o = fopen(bad, "wb");
        b[at] ^= 0x10;
        fwrite(b, 1, (size_t)n, o);
        fclose(o);
        b[at] ^= 0x10;
        t = make_tree(c);
        TJT_CHECK(tj_tree_load(t, bad) == TJ_ERR_IO, "a flip at byte %lld of %lld loaded", at, n);
        TJT_ERROR_HAS(c, "flip.safetensors: corrupt file: checksum");
        tj_clear_error(c);
        TJT_CHECK(tree_differs(t) == 0, "the tree changed after a failed load (flip at %lld)", at);
        tj_tree_free(t);
    }
    {
        FILE *o = fopen(bad, "wb");
        fwrite(b, 1, (size_t)(n - 4096), o);
        fclose(o);
        t = make_tree(c);
        TJT_CHECK(tj_tree_load(t, bad) == TJ_ERR_IO, "a truncated file loaded");
        TJT_ERROR_HAS(c, "flip.safetensors", "truncated");
        tj_clear_error(c);
        TJT_CHECK(tree_differs(t) == 0, "the tree changed after a failed load (truncated)");
        tj_tree_free(t);
    }
    free(b);
}

/* every allocation of a load fails in turn */
static void test_oom(tj_ctx *c) {
    const char *path = path_in("small.safetensors");
    tj_tree *src = tj_tree_new(c), *t;
    float v[300];
    long calls = 0, k, ok = 0, bad_msg = 0, changed = 0;
    int i;
    tjt_current = "oom";
    for (i = 0; i < 300; i++) v[i] = (float)i;
    tj_tree_set_array(src, "a", tj_array_new(c, TJ_F32, "x=300", v));
    tj_tree_set_array(src, "b", tj_array_new(c, TJ_F32, "y=10 x=30", v));
    tj_tree_set_float(src, "lr", 0.5);
    TJT_CHECK(tj_tree_save(src, path) == TJ_OK, "save: %s", tj_error(c));
    /* k = -1: count the allocations of a load that succeeds; then fail
       each in turn, into the same starting tree (leaf "a" of -1s) */
    for (k = -1; k < calls; k++) {
        tj_status st;
        for (i = 0; i < 300; i++) v[i] = -1;
        t = tj_tree_new(c);
        tj_tree_set_array(t, "a", tj_array_new(c, TJ_F32, "x=300", v));
        pthread_mutex_lock(&mem_mu);
        mem_calls = 0;
        mem_fail_at = k;
        pthread_mutex_unlock(&mem_mu);
        st = tj_tree_load(t, path);
        mem_fail_at = -1;
        if (k < 0) {
            calls = mem_calls;
            TJT_CHECK(st == TJ_OK, "load: %s", tj_error(c));
        } else if (st == TJ_OK) ok++;
        else {
            float got[300];
            bad_msg += strstr(tj_error(c), "out of memory") == NULL;
            tj_clear_error(c);
            changed += tj_tree_size(t) != 1 || tj_array_read(tj_tree_array(t, "a"), TJ_F32, got) != TJ_OK || got[7] != -1;
        }
        tj_tree_free(t);
    }
    TJT_CHECK(calls > 5, "a load made %ld allocations", calls);
    TJT_CHECK(ok == 0, "%ld of %ld loads succeeded with an allocation failing", ok, calls);
    TJT_CHECK(bad_msg == 0, "%ld failed loads did not say \"out of memory\"", bad_msg);
    TJT_CHECK(changed == 0, "%ld failed loads changed the tree", changed);
    t = tj_tree_new(c);
    TJT_CHECK(tj_tree_load(t, path) == TJ_OK && tj_tree_float(t, "lr") == 0.5, "the context is unusable after the failures: %s", tj_error(c));
    tj_tree_free(t);
    tj_tree_free(src);
}

int main(void) {
    tj_ctx *c;
    /* the library's hooks (TJ_MALLOC...), before its first allocation: every
       block it frees must carry the size mem_malloc put in front */
    tjt_set_alloc(mem_malloc, mem_realloc, mem_free);
    c = tj_ctx_new();
    if (make_dir("test_tree_stream")) return 1;
    test_peak(c);
    test_corrupt(c);
    test_oom(c);
    remove_dir();
    tj_ctx_free(c);
    return tjt_finish();
}
