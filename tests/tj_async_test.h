/* tj_async_test.h — checks of a backend's asynchronous copies and device
 * time stamps, shared by tests/test_devsim.c (devsim, on every test run)
 * and tests/test_cuda.cu (the CUDA backend, on a GPU).
 *
 * The program is demos/offload_scan.c's model, small: a stack of residual
 * MLP blocks scanned over "layer", then one more block in a checkpoint,
 * loss + gradients under a remat/offload policy. Offloading copies a value
 * to host memory on the copy stream each forward iteration (and the next
 * iteration overwrites the copy's source); the backward scan stages each
 * offloaded slice back one iteration ahead; the checkpoint fetches its
 * residual back (to_device) before the region's backward reads it. On
 * devsim each copy lags TJ_DEVSIM_COPY_DELAY_US behind, so a wait the
 * runner forgets gives other numbers than the CPU (or a report of ASan).
 *
 *   tjt_offload_policies(be, tol): the six policies of offload_scan.c on
 *       `be` against the CPU backend (relative tolerance tol; 0: the same
 *       bits), three runs each on the same arenas, and the bytes `be`
 *       holds in device and host space equal to the memory plan;
 *   tjt_trace_streams(be, min_copy_us): a profiled run on `be` has events
 *       on both streams, each stream's in order and never overlapping, the
 *       copy stream holding only offload, fetch and prefetch copies of at
 *       least min_copy_us each (device times: the host only queued them).
 * Include after tinyjax.h and tj_test.h; C99 and C++. */
#ifndef TJ_ASYNC_TEST_H
#define TJ_ASYNC_TEST_H

enum { TJT_AL = 24, TJT_AB = 2, TJT_AP = 4, TJT_AE = 16, TJT_AH = 32 };
static tj_v tjt_ablock(tj_v x, tj_v w1, tj_v w2) {
    tj_v h = tj_checkpoint_name(tj_dot(x, w1, "embed"), "hidden");
    return tj_checkpoint_name(tj_add(x, tj_dot(tj_relu(h), w2, "hidden")), "residual");
}
static void tjt_abody(tj_graph *g, const tj_v *carry, const tj_v *xs, tj_v *carry_out, tj_v *ys, void *u) {
    (void)g;
    (void)ys;
    (void)u;
    carry_out[0] = tjt_ablock(carry[0], xs[0], xs[1]);
}
static void tjt_aregion(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g;
    (void)u;
    out[0] = tj_tanh(tjt_ablock(in[0], in[1], in[2]));
}
static void tjt_astack(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    const tj_policy *pol = (const tj_policy *)u;
    tj_v x = tj_tree_v(in, "x"), xs[2], h, r[3], loss, wrt[4], gr[4];
    (void)g;
    xs[0] = tj_tree_v(in, "w1");
    xs[1] = tj_tree_v(in, "w2");
    if (tj_scan(tjt_abody, NULL, "layer", 1, &x, 2, xs, 0, &h, NULL, pol) != TJ_OK) return;
    r[0] = h;
    r[1] = tj_tree_v(in, "v1");
    r[2] = tj_tree_v(in, "v2");
    if (tj_checkpoint(tjt_aregion, NULL, 3, r, 1, &h, pol) != TJ_OK) return;
    loss = tj_mean(tj_dot(h, tj_tree_v(in, "wout"), "embed"), "batch pos");
    wrt[0] = xs[0], wrt[1] = xs[1], wrt[2] = r[1], wrt[3] = x;
    if (tj_grad(loss, 4, wrt, gr) != TJ_OK) return;
    tj_tree_set_v(out, "loss", loss);
    tj_tree_set_v(out, "g_w1", gr[0]);
    tj_tree_set_v(out, "g_w2", gr[1]);
    tj_tree_set_v(out, "g_v1", gr[2]);
    tj_tree_set_v(out, "g_x", gr[3]);
}
/* an f32 array of `shape`, uniform in [lo, hi) from seed (public API only:
   test_cuda.cu links no test internals) */
static tj_array *tjt_af32(tj_ctx *c, const char *shape, unsigned seed, double lo, double hi) {
    tj_array *z = tj_zeros(c, TJ_F32, shape), *a;
    uint64_t st = seed * 6364136223846793005ull + 1442695040888963407ull;
    int64_t n = z ? tj_array_numel(z) : 0, i;
    float *f = (float *)malloc(sizeof(float) * (size_t)(n + 1));
    tj_array_free(z);
    if (!f) return NULL;
    for (i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        f[i] = (float)(lo + (hi - lo) * (double)(st >> 11) / 9007199254740992.0);
    }
    a = tj_array_new(c, TJ_F32, shape, f);
    free(f);
    return a;
}
static tj_tree *tjt_astack_in(tj_ctx *c) {
    tj_tree *in = tj_tree_new(c);
    char sh[96];
    snprintf(sh, sizeof sh, "batch=%d pos=%d embed=%d", TJT_AB, TJT_AP, TJT_AE);
    tj_tree_set_array(in, "x", tjt_af32(c, sh, 11, -1, 1));
    snprintf(sh, sizeof sh, "layer=%d embed=%d hidden=%d", TJT_AL, TJT_AE, TJT_AH);
    tj_tree_set_array(in, "w1", tjt_af32(c, sh, 12, -0.25, 0.25));
    snprintf(sh, sizeof sh, "layer=%d hidden=%d embed=%d", TJT_AL, TJT_AH, TJT_AE);
    tj_tree_set_array(in, "w2", tjt_af32(c, sh, 13, -0.18, 0.18));
    snprintf(sh, sizeof sh, "embed=%d hidden=%d", TJT_AE, TJT_AH);
    tj_tree_set_array(in, "v1", tjt_af32(c, sh, 14, -0.25, 0.25));
    snprintf(sh, sizeof sh, "hidden=%d embed=%d", TJT_AH, TJT_AE);
    tj_tree_set_array(in, "v2", tjt_af32(c, sh, 15, -0.18, 0.18));
    snprintf(sh, sizeof sh, "embed=%d", TJT_AE);
    tj_tree_set_array(in, "wout", tjt_af32(c, sh, 16, -0.25, 0.25));
    return in;
}

/* ---- a backend that counts the bytes it holds in each memory space ----
   It passes every call on to the backend it wraps; the offload check
   compares its device and host bytes with the memory plan. */
#define TJT_NBLK 4096
typedef struct {
    tj_backend b;
    tj_backend *in;
    void *blk[TJT_NBLK];
    size_t blkn[TJT_NBLK];
    int blks[TJT_NBLK];
    int64_t live[2]; /* TJ_SPACE_DEVICE, TJ_SPACE_HOST */
} tjt_counting;
static tj_backend *tjt_inner(tj_backend *b) { return ((tjt_counting *)b->state)->in; }
static void *tjt_cnt_alloc(tj_backend *b, int dev, int space, size_t n) {
    tjt_counting *c = (tjt_counting *)b->state;
    void *p = c->in->alloc(c->in, dev, space, n);
    int i;
    if (p && (space == TJ_SPACE_DEVICE || space == TJ_SPACE_HOST)) {
        for (i = 0; i < TJT_NBLK && c->blk[i]; i++) {}
        if (i == TJT_NBLK) TJT_CHECK(0, "the counting backend holds more than %d blocks", TJT_NBLK);
        if (i < TJT_NBLK) {
            c->blk[i] = p;
            c->blkn[i] = n;
            c->blks[i] = space;
            c->live[space] += (int64_t)n;
        }
    }
    return p;
}
static void tjt_cnt_free(tj_backend *b, int dev, int space, void *p) {
    tjt_counting *c = (tjt_counting *)b->state;
    int i;
    for (i = 0; p && i < TJT_NBLK; i++)
        if (c->blk[i] == p) {
            c->live[c->blks[i]] -= (int64_t)c->blkn[i];
            c->blk[i] = NULL;
            break;
        }
    c->in->free(c->in, dev, space, p);
}
static int tjt_cnt_copy(tj_backend *b, int dev, void *d, int ds, const void *s, int ss, size_t n) { return tjt_inner(b)->copy(tjt_inner(b), dev, d, ds, s, ss, n); }
static int tjt_cnt_run(tj_backend *b, struct tj__kern *k) { return tjt_inner(b)->run(tjt_inner(b), k); }
static int tjt_cnt_sync(tj_backend *b, int dev, char *e, size_t en) { return tjt_inner(b)->sync(tjt_inner(b), dev, e, en); }
static uint64_t tjt_cnt_copy_async(tj_backend *b, int dev, void *d, int ds, const void *s, int ss, size_t n) {
    return tjt_inner(b)->copy_async(tjt_inner(b), dev, d, ds, s, ss, n);
}
static int tjt_cnt_wait(tj_backend *b, int dev, uint64_t t, char *e, size_t en) { return tjt_inner(b)->wait(tjt_inner(b), dev, t, e, en); }
static int tjt_cnt_mark(tj_backend *b, int dev, int w) { return tjt_inner(b)->mark(tjt_inner(b), dev, w); }
static int tjt_cnt_mark_times(tj_backend *b, int dev, double *us, int n) { return tjt_inner(b)->mark_times(tjt_inner(b), dev, us, n); }
/* c wraps in (the optional calls only where in has them) */
static void tjt_counting_init(tjt_counting *c, tj_backend *in) {
    memset(c, 0, sizeof *c);
    c->in = in;
    c->b = *in;
    c->b.state = c;
    c->b.alloc = tjt_cnt_alloc;
    c->b.free = tjt_cnt_free;
    c->b.copy = tjt_cnt_copy;
    c->b.run = tjt_cnt_run;
    c->b.sync = tjt_cnt_sync;
    c->b.copy_async = in->copy_async ? tjt_cnt_copy_async : NULL;
    c->b.wait = in->wait ? tjt_cnt_wait : NULL;
    c->b.mark = in->mark ? tjt_cnt_mark : NULL;
    c->b.mark_times = in->mark_times ? tjt_cnt_mark_times : NULL;
}

/* the six policies of offload_scan.c on be against the CPU (see the top) */
static void tjt_offload_policies(tj_backend *be, double tol) {
    const char *label[6] = {"everything_saveable", "nothing_saveable", "save hidden", "offload hidden", "offload residual", "offload hidden residual"};
    tj_policy pol[6];
    tjt_counting cb;
    int v, r;
    pol[0] = tj_everything_saveable();
    pol[1] = tj_nothing_saveable();
    pol[2] = tj_save_only_these_names("hidden");
    pol[3] = tj_save_and_offload_only_these_names("", "hidden");
    pol[4] = tj_save_and_offload_only_these_names("", "residual");
    pol[5] = tj_save_and_offload_only_these_names("", "hidden residual");
    tjt_counting_init(&cb, be);
    for (v = 0; v < 6; v++) {
        tj_ctx *c[2];
        tjt_outs o[2];
        tj_memory_analysis mem;
        memset(o, 0, sizeof o);
        c[0] = tj_ctx_new();
        c[1] = tj_ctx_new();
        tj_set_backend(c[0], NULL); /* the CPU, also under TJ_BACKEND=devsim */
        tj_set_backend(c[1], &cb.b);
        for (r = 0; r < 2; r++) {
            tj_tree *in = tjt_astack_in(c[r]), *out = tj_tree_new(c[r]);
            tj_prog *p = tj_jit(c[r], "astack", tjt_astack, &pol[v], in, NULL);
            int run;
            TJT_CHECK(p != NULL, "%s: jit: %s", label[v], tj_error(c[r]));
            for (run = 0; p && run < (r ? 3 : 1); run++) { /* the backend: again on the same arenas */
                tj_tree_free(out);
                out = tj_tree_new(c[r]);
                TJT_CHECK(tj_run(p, in, out) == TJ_OK, "%s: run %d: %s", label[v], run, tj_error(c[r]));
                if (r && run) {
                    tjt_outs again;
                    char what[96];
                    memset(&again, 0, sizeof again);
                    tjt_outs_read(&again, out);
                    snprintf(what, sizeof what, "%s: %s run %d vs run 0", label[v], be->name, run);
                    tjt_outs_compare(what, &o[1], &again, 0); /* the same bits every run */
                    tjt_outs_free(&again);
                } else tjt_outs_read(&o[r], out);
            }
            if (p && r) {
                mem = tj_prog_memory(p);
                TJT_CHECK(cb.live[TJ_SPACE_HOST] == mem.host_temp_bytes, "%s: %s holds %lld B of host space, the plan says %lld B", label[v], be->name,
                          (long long)cb.live[TJ_SPACE_HOST], (long long)mem.host_temp_bytes);
                TJT_CHECK(tj_get_alloc_stats(c[1]).arena_bytes - cb.live[TJ_SPACE_HOST] == mem.temp_bytes,
                          "%s: %s holds %lld B of device arena, the plan says %lld B", label[v], be->name,
                          (long long)(tj_get_alloc_stats(c[1]).arena_bytes - cb.live[TJ_SPACE_HOST]), (long long)mem.temp_bytes);
                TJT_CHECK((mem.host_temp_bytes > 0) == (v >= 3), "%s: %lld B planned in host space", label[v], (long long)mem.host_temp_bytes);
            }
            tj_prog_free(p);
            tj_tree_free(in);
            tj_tree_free(out);
        }
        {
            char what[96];
            snprintf(what, sizeof what, "%s: %s vs CPU", label[v], be->name);
            tjt_outs_compare(what, &o[0], &o[1], tol);
        }
        tjt_outs_free(&o[0]);
        tjt_outs_free(&o[1]);
        tj_ctx_free(c[0]);
        tj_ctx_free(c[1]);
    }
    TJT_CHECK(cb.live[TJ_SPACE_DEVICE] == 0 && cb.live[TJ_SPACE_HOST] == 0, "after the programs and arrays are freed %s still holds %lld + %lld B", be->name,
              (long long)cb.live[TJ_SPACE_DEVICE], (long long)cb.live[TJ_SPACE_HOST]);
}

/* a profiled run on be: both streams' events, in order per stream */
static void tjt_trace_streams(tj_backend *be, double min_copy_us) {
    tj_ctx *c = tj_ctx_new();
    tj_tree *in, *out;
    tj_policy pol = tj_save_and_offload_only_these_names("", "hidden residual");
    tj_prog *p;
    tj_set_backend(c, be);
    tj_set_profile(c, 1);
    in = tjt_astack_in(c);
    out = tj_tree_new(c);
    p = tj_jit(c, "astack", tjt_astack, &pol, in, NULL);
    TJT_CHECK(p && tj_run(p, in, out) == TJ_OK, "profiled run: %s", tj_error(c));
    if (p) {
        int n = tj_prog_events(p, NULL, 0), i, w, cnt[2] = {0, 0}, copies = 0, slow = 0, names = 0, kinds[3] = {0, 0, 0};
        tj_event *ev = (tj_event *)calloc((size_t)n + 1, sizeof *ev);
        double end[2] = {-1e300, -1e300};
        n = ev ? tj_prog_events(p, ev, n) : 0;
        for (i = 0; i < n; i++) {
            w = ev[i].stream;
            TJT_CHECK(w == 0 || w == 1, "event %d (%s) on stream %d", i, ev[i].op, w);
            if (w != 0 && w != 1) continue;
            cnt[w]++;
            TJT_CHECK(ev[i].dur_us >= 0 && ev[i].start_us >= end[w] - 1e-6, "stream %d: event %d (%s) starts at %.3f us, before the last one ended (%.3f us)", w, i,
                      ev[i].op, ev[i].start_us, end[w]);
            end[w] = ev[i].start_us + ev[i].dur_us;
            if (w == 1) {
                copies += ev[i].kind == 2;
                slow += ev[i].dur_us >= min_copy_us;
                kinds[0] += !strcmp(ev[i].op, "offload");
                kinds[1] += !strcmp(ev[i].op, "fetch");
                kinds[2] += !strcmp(ev[i].op, "prefetch");
            }
        }
        TJT_CHECK(cnt[0] > 0 && cnt[1] > 0, "events on both streams: compute %d, copy %d", cnt[0], cnt[1]);
        names = kinds[0] + kinds[1] + kinds[2];
        TJT_CHECK(copies == cnt[1] && names == cnt[1], "the copy stream holds copies only (offload, fetch, prefetch): %d of %d", names, cnt[1]);
        TJT_CHECK(kinds[0] > 0 && kinds[1] > 0 && kinds[2] > 0, "the program copies all three ways: %d offload, %d fetch, %d prefetch", kinds[0], kinds[1],
                  kinds[2]);
        TJT_CHECK(slow == cnt[1], "device times: %d of %d copies took at least %g us", slow, cnt[1], min_copy_us);
        {
            char path[64], *buf = NULL;
            FILE *f;
            long got = 0;
            snprintf(path, sizeof path, "tjt_trace_%s.json", be->name);
            TJT_CHECK(tj_prog_write_trace(p, path) == TJ_OK, "write trace: %s", tj_error(c));
            if ((f = fopen(path, "rb")) != NULL) {
                if (!fseek(f, 0, SEEK_END) && (got = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) && (buf = (char *)malloc((size_t)got + 1)) != NULL)
                    buf[fread(buf, 1, (size_t)got, f)] = 0;
                fclose(f);
            }
            if (buf) {
                tj_json j;
                char err[256];
                tj_json_init(&j, buf, (size_t)got, path, err, sizeof err);
                TJT_CHECK(tj_json_skip(&j) == TJ_OK && tj_json_peek(&j) == -1, "the trace is not one JSON value: %s", err);
            }
            TJT_CHECK(buf && strstr(buf, "\"device 0 compute\"") && strstr(buf, "\"device 0 copies\""), "the trace names a track per stream");
            TJT_CHECK(buf && strstr(buf, "\"tid\": 1, \"ts\""), "the trace has events on the copy stream's track");
            free(buf);
            remove(path);
        }
        free(ev);
    }
    tj_prog_free(p);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(c);
}
#endif /* TJ_ASYNC_TEST_H */
