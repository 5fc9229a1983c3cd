/* test_jax_golden.c — tinyjax against JAX's stored numbers.
 *
 * The files in tests/jax_golden/ hold programs that tools/jax_diff.py made
 * (random ones per mode and dtype, and edge.json: the mismatches it found,
 * each a regression test) with JAX 0.10.2's outputs, loss and gradients
 * and a tolerance per element (the rule is in tools/jax_diff.py's header:
 * JAX's own distance from float64, the spread when every input and op
 * result moves by one rounding, a few ulps of the tensor's largest). Each
 * program runs through tools/jax_diff_run.c's code, included below, and
 * its results are matched to JAX's by axis name. A case with
 * "expect_error" must fail with a message containing that text (JAX
 * refused it too, or tinyjax documents that it refuses it).
 *
 * Regenerate (needs JAX; rewrites the folder):
 *     python3 tools/jax_diff.py --golden tests/jax_golden
 * (about 10 minutes; --only attention,edge for those files). All 330
 * programs take about a second, sanitized. attention.json: programs with a
 * tj_attention each, in every mode. */
#define JDR_NO_MAIN
#include "tools/jax_diff_run.c"
#include "tj_test.h"

static const char *const golden_files[] = {"edge.json", "jit_f32.json", "jit_bf16.json", "sharded.json", "scan.json", "checkpoint.json", "shard_map.json",
                                            "attention.json"};

/* the element of got (axes gaxes, dims from the expectation) at JAX's
   row-major index i over eaxes */
static int64_t gold_index(const jdr_j *gaxes, const jdr_j *eaxes, const jdr_j *edims, int64_t i) {
    int64_t coord[TJ_MAXDIM], off = 0;
    int k, r = eaxes->n;
    for (k = r - 1; k >= 0; k--) {
        int64_t d = (int64_t)edims->kid[k]->num;
        coord[k] = i % d;
        i /= d;
    }
    for (k = 0; k < gaxes->n; k++) {
        int e;
        for (e = 0; e < r && strcmp(eaxes->kid[e]->str, gaxes->kid[k]->str) != 0; e++) {}
        if (e == r) return -1;
        off = off * (int64_t)edims->kid[e]->num + coord[e];
    }
    return off;
}
/* 0 if every expected result is in got within its tolerance; else prints
   the first difference */
static int gold_compare(const char *label, const jdr_j *expect, const jdr_j *got) {
    const jdr_j *res = jdr_get(got, "results");
    int i, bad = 0;
    if (!res) {
        fprintf(stderr, "  %s: tinyjax: %s\n", label, jdr_str(got, "error", "no results"));
        return 1;
    }
    for (i = 0; i < expect->n; i++) {
        const jdr_j *e = expect->kid[i], *g = jdr_get(res, e->key);
        const jdr_j *eaxes = jdr_get(e, "axes"), *edims = jdr_get(e, "dims"), *edata = jdr_get(e, "data"), *tol = jdr_get(e, "tol");
        int64_t n, k;
        if (!g) { fprintf(stderr, "  %s: result %s missing\n", label, e->key); bad = 1; continue; }
        if (strcmp(jdr_str(g, "dtype", ""), jdr_str(e, "dtype", "")) != 0) {
            fprintf(stderr, "  %s: %s has dtype %s, JAX %s\n", label, e->key, jdr_str(g, "dtype", ""), jdr_str(e, "dtype", ""));
            bad = 1;
        }
        n = edata->n;
        if (jdr_get(g, "axes")->n != eaxes->n || jdr_get(g, "data")->n != n) {
            fprintf(stderr, "  %s: %s has another shape than JAX's\n", label, e->key);
            bad = 1;
            continue;
        }
        for (k = 0; k < n; k++) {
            int64_t at = gold_index(jdr_get(g, "axes"), eaxes, edims, k);
            double want = jdr_value(edata->kid[k]), have, t = tol->kid[k]->num;
            if (at < 0) { fprintf(stderr, "  %s: %s has other axes than JAX's\n", label, e->key); bad = 1; break; }
            have = jdr_value(jdr_get(g, "data")->kid[at]);
            if (have == want || (have != have && want != want) || fabs(have - want) <= t) continue;
            fprintf(stderr, "  %s: %s element %lld: tinyjax %.9g, JAX %.9g (tolerance %.3g)\n", label, e->key, (long long)k, have, want, t);
            bad = 1;
            break;
        }
    }
    return bad;
}
static void gold_file(const char *dir, const char *name) {
    char path[512], err[512], label[600];
    char *text = NULL;
    size_t len;
    jdr_j *cases;
    int i, ran = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (tj_read_file(path, &text, &len, err, sizeof err) != TJ_OK) {
        TJT_CHECK(0, "%s", err);
        return;
    }
    cases = jdr_parse_text(text, len, path, err, sizeof err);
    tj_free(text);
    TJT_CHECK(cases && cases->kind == JDR_ARR && cases->n > 0, "%s: %s", path, cases ? "want a non-empty array of cases" : err);
    if (!cases || cases->kind != JDR_ARR) { jdr_free(cases); return; }
    for (i = 0; i < cases->n; i++) {
        const jdr_j *c = cases->kid[i];
        tj_strbuf b;
        jdr_j *got;
        memset(&b, 0, sizeof b);
        snprintf(label, sizeof label, "%s case %d (seed %lld, %s)", name, i, (long long)jdr_num(c, "seed", -1), jdr_str(jdr_get(c, "spec"), "mode", "?"));
        jdr_run_spec(jdr_get(c, "spec"), &b);
        got = jdr_parse_text(b.p, b.n, label, err, sizeof err);
        TJT_CHECK(got != NULL, "%s: the runner wrote bad JSON: %s", label, err);
        if (got && jdr_get(c, "expect_error")) {
            const char *msg = jdr_str(got, "error", NULL), *want = jdr_str(c, "expect_error", "");
            TJT_CHECK(msg && strstr(msg, want), "%s: want an error containing \"%s\", got %s", label, want, msg ? msg : "a result");
        } else if (got) {
            int bad = gold_compare(label, jdr_get(c, "expect"), got);
            TJT_CHECK(!bad, "%s differs from JAX (its spec is in %s)", label, path);
        }
        ran++;
        jdr_free(got);
        tj_strbuf_free(&b);
    }
    printf("%s: %d programs\n", name, ran);
    jdr_free(cases);
}
int main(void) {
    const char *dir = getenv("TJ_GOLDEN_DIR") ? getenv("TJ_GOLDEN_DIR") : "tests/jax_golden";
    size_t i;
    for (i = 0; i < sizeof golden_files / sizeof *golden_files; i++) {
        tjt_current = golden_files[i];
        gold_file(dir, golden_files[i]);
    }
    return tjt_finish();
}
