/* jax_diff_run.c — run one program spec through tinyjax's public builders
 * and write its outputs, loss and gradients as JSON, for comparison with
 * JAX (tools/jax_diff.py makes the specs and runs JAX on them;
 * tests/test_jax_golden.c runs this file's code on stored specs).
 *
 *   build/jax_diff_run SPEC.json [OUT.json]     (OUT default: stdout)
 *
 * A spec (JSON):
 *   {"mode": "jit" | "sharded" | "scan" | "checkpoint" | "shard_map",
 *    "inputs": [{"name": "x0", "dtype": "f32", "shape": "a=2 b=3",
 *                "data": [...row-major; "nan" "inf" "-inf" allowed],
 *                "spec": "a:data" (sharded mode), "grad": true}],
 *    "ops": [{"op": "add", "in": ["x0", "x1"], "out": "v0", ...attributes}],
 *    "outputs": ["v0", ...],
 *    "weights": {"v0": {"shape": "b=3 a=2", "data": [...]}},
 *    "devices": 4, "mesh": "data=2 model=2",   (sharded, shard_map; scan and
 *                                   checkpoint too: inputs placed by "spec")
 *    "policy": "nothing_saveable" | "save_only_these_names:n0 n1" | ...,
 *    "scan": {"axis": "layer", "carry": ["x0"], "carry_out": ["v3"],
 *             "xs": ["x1"], "reverse": 1},          (scan: body = the ops)
 *    "in_specs": [...], "out_specs": [...], "check": 1,   (shard_map)
 *    "second": {"x0": [...row-major, x0's shape], ...},   (optional)
 *    "vjp": 1}   (optional: the gradients by tj_vjp, the weights the cotangents)
 * The loss is the sum over outputs o of sum(f32(o) * weights[o]) (i32
 * outputs have no weights); the result has every output, the loss and
 * d loss / d x for each float input with "grad" (default true). In scan
 * mode the outputs are the ys (stacked along the scan axis, leading) and
 * "carry:NAME" the final carries. With "second", also the second-order
 * "grad2:x" = d L2 / d x for each of those inputs, where L2 = sum over them
 * of sum(f32(d loss / d x) * u_x), u_x from "second" (f32, x's shape; a
 * Hessian-vector product: tinyjax differentiates its own backward ops).
 * An error becomes {"error": "..."}.
 *
 * The attributes an op reads are named in jdr_apply's table below;
 * "custom_vjp" (tj_custom_vjp, fwd and bwd given as op lists) at
 * jdr_custom_vjp. */
#define _POSIX_C_SOURCE 200809L
#include "tinyjax.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a small JSON tree over the header's streaming reader ---- */
typedef enum { JDR_NUM, JDR_STR, JDR_ARR, JDR_OBJ, JDR_LIT } jdr_kind;
typedef struct jdr_j {
    jdr_kind kind;
    double num;          /* JDR_NUM; JDR_LIT: 1 true, 0 false, -1 null    */
    char *str;           /* JDR_STR                                       */
    char *key;           /* member name inside an object                  */
    int n;               /* JDR_ARR / JDR_OBJ: children                   */
    struct jdr_j **kid;
} jdr_j;

static void jdr_free(jdr_j *v) {
    int i;
    if (!v) return;
    for (i = 0; i < v->n; i++) jdr_free(v->kid[i]);
    free(v->kid);
    tj_free(v->str);
    tj_free(v->key);
    free(v);
}
static jdr_j *jdr_parse_value(tj_json *j);
static int jdr_push(jdr_j *p, jdr_j *c) {
    jdr_j **k = (jdr_j **)realloc(p->kid, sizeof *k * (size_t)(p->n + 1));
    if (!k) return -1;
    p->kid = k;
    p->kid[p->n++] = c;
    return 0;
}
static jdr_j *jdr_parse_value(tj_json *j) {
    jdr_j *v = (jdr_j *)calloc(1, sizeof *v);
    int c = tj_json_peek(j), first = 1, r, lit;
    char *key;
    if (!v) return NULL;
    if (c == '{') {
        v->kind = JDR_OBJ;
        if (tj_json_expect(j, '{')) goto fail;
        while ((r = tj_json_object_next(j, &first, &key)) == 1) {
            jdr_j *k = jdr_parse_value(j);
            if (!k) { tj_free(key); goto fail; }
            k->key = key;
            if (jdr_push(v, k)) { jdr_free(k); goto fail; }
        }
        if (r < 0) goto fail;
    } else if (c == '[') {
        v->kind = JDR_ARR;
        if (tj_json_expect(j, '[')) goto fail;
        while ((r = tj_json_array_next(j, &first)) == 1) {
            jdr_j *k = jdr_parse_value(j);
            if (!k || jdr_push(v, k)) { jdr_free(k); goto fail; }
        }
        if (r < 0) goto fail;
    } else if (c == '"') {
        v->kind = JDR_STR;
        if (tj_json_cstring(j, &v->str)) goto fail;
    } else if (c == 't' || c == 'f' || c == 'n') {
        v->kind = JDR_LIT;
        if (tj_json_literal(j, &lit)) goto fail;
        v->num = lit;
    } else {
        v->kind = JDR_NUM;
        if (tj_json_number(j, &v->num)) goto fail;
    }
    return v;
fail:
    jdr_free(v);
    return NULL;
}
static jdr_j *jdr_get(const jdr_j *o, const char *key) {
    int i;
    if (!o || o->kind != JDR_OBJ) return NULL;
    for (i = 0; i < o->n; i++)
        if (strcmp(o->kid[i]->key, key) == 0) return o->kid[i];
    return NULL;
}
static const char *jdr_str(const jdr_j *o, const char *key, const char *dflt) {
    jdr_j *v = jdr_get(o, key);
    return v && v->kind == JDR_STR ? v->str : dflt;
}
/* a number, or one of the strings "nan", "inf", "-inf" (JSON has none) */
static double jdr_value(const jdr_j *v) {
    if (v->kind == JDR_STR) return strcmp(v->str, "nan") == 0 ? NAN : strcmp(v->str, "-inf") == 0 ? -INFINITY : INFINITY;
    return v->num;
}
static double jdr_num(const jdr_j *o, const char *key, double dflt) {
    jdr_j *v = jdr_get(o, key);
    return v && v->kind != JDR_ARR && v->kind != JDR_OBJ ? jdr_value(v) : dflt;
}

/* ---- the program ---- */
#define JDR_MAXV 512
typedef struct {
    const jdr_j *spec;
    char err[1024];      /* first failure of the runner's own (not tinyjax's) */
    int nv;              /* the value table: name -> traced value          */
    const char *vname[JDR_MAXV];
    tj_v v[JDR_MAXV];
    tj_policy pol, pol2[2];
    struct jdr_cvu { void *p; const jdr_j *op; } cvu[64]; /* custom_vjp ops: user data of their fwd and bwd */
    int ncvu;
    char save[256], off[256]; /* the policy's names (valid until tj_jit returns) */
} jdr_prog;

static void jdr_bind(jdr_prog *p, const char *name, tj_v v) {
    int i;
    for (i = 0; i < p->nv; i++)
        if (strcmp(p->vname[i], name) == 0) { p->v[i] = v; return; }
    if (p->nv == JDR_MAXV) { snprintf(p->err, sizeof p->err, "more than %d values", JDR_MAXV); return; }
    p->vname[p->nv] = name;
    p->v[p->nv++] = v;
}
static tj_v jdr_lookup(jdr_prog *p, const char *name) {
    int i;
    for (i = p->nv - 1; i >= 0; i--)
        if (strcmp(p->vname[i], name) == 0) return p->v[i];
    if (!p->err[0]) snprintf(p->err, sizeof p->err, "value '%s' is used before it is made", name);
    return NULL;
}
static int jdr_dtype(const char *s, tj_dtype *dt) {
    int i;
    for (i = 0; i < TJ_NDTYPE; i++)
        if (strcmp(s, tj_dtype_name((tj_dtype)i)) == 0) { *dt = (tj_dtype)i; return 0; }
    return -1;
}

/* Apply one op of the spec. Each row: the op's name in specs and its call
   on the inputs a, b, c (in[0..2]) and the attributes it reads. */
static tj_v jdr_apply(jdr_prog *p, tj_graph *g, const jdr_j *op) {
    const char *nm = jdr_str(op, "op", "");
    const jdr_j *ins = jdr_get(op, "in");
    tj_v in[16] = {0}, a, b, c;
    int nin = 0, i;
    tj_dtype dt = TJ_F32;
    const char *ax = jdr_str(op, "axes", jdr_str(op, "axis", ""));
    if (ins && ins->kind == JDR_ARR)
        for (i = 0; i < ins->n && i < 16; i++) {
            if (ins->kid[i]->kind != JDR_STR) return NULL;
            in[nin++] = jdr_lookup(p, ins->kid[i]->str);
        }
    a = in[0], b = in[1], c = in[2];
    if (jdr_get(op, "dtype") && jdr_dtype(jdr_str(op, "dtype", ""), &dt)) {
        snprintf(p->err, sizeof p->err, "op %s: unknown dtype", nm);
        return NULL;
    }
#define U(name, call) if (strcmp(nm, name) == 0) return call;
    U("neg", tj_neg(a)) U("exp", tj_exp(a)) U("log", tj_log(a)) U("tanh", tj_tanh(a)) U("sqrt", tj_sqrt(a)) U("rsqrt", tj_rsqrt(a))
    U("relu", tj_relu(a)) U("gelu", tj_gelu(a)) U("pows", tj_pows(a, jdr_num(op, "s", 1))) U("cast", tj_cast(a, dt))
    U("sin", tj_sin(a)) U("cos", tj_cos(a)) U("abs", tj_abs(a)) U("sign", tj_sign(a)) U("log1p", tj_log1p(a)) U("expm1", tj_expm1(a))
    U("erf", tj_erf(a)) U("softplus", tj_softplus(a)) U("clip", tj_clip(a, jdr_num(op, "lo", 0), jdr_num(op, "hi", 0)))
    U("sigmoid", tj_sigmoid(a)) U("argmax", tj_argmax(a, ax)) U("argmin", tj_argmin(a, ax)) U("stack", tj_stack(nin, in, ax))
    U("add", tj_add(a, b)) U("sub", tj_sub(a, b)) U("mul", tj_mul(a, b)) U("div", tj_div(a, b)) U("max2", tj_max2(a, b))
    U("min2", tj_min2(a, b)) U("lt", tj_lt(a, b)) U("le", tj_le(a, b)) U("gt", tj_gt(a, b)) U("ge", tj_ge(a, b)) U("eq", tj_eq(a, b))
    U("ne", tj_ne(a, b)) U("adds", tj_adds(a, jdr_num(op, "s", 0))) U("muls", tj_muls(a, jdr_num(op, "s", 1))) U("select", tj_select(a, b, c))
    U("sum", tj_sum(a, ax)) U("max", tj_max(a, ax)) U("min", tj_min(a, ax)) U("mean", tj_mean(a, ax)) U("sum_all", tj_sum_all(a))
    U("dot", tj_dot(a, b, jdr_str(op, "contract", "")))
    U("rename", tj_rename(a, jdr_str(op, "from", ""), jdr_str(op, "to", ""))) U("transpose", tj_transpose(a, jdr_str(op, "order", "")))
    U("split", tj_split(a, ax, jdr_str(op, "into", ""))) U("merge", tj_merge(a, ax, jdr_str(op, "into", "")))
    U("slice", tj_slice(a, ax, (int64_t)jdr_num(op, "start", 0), (int64_t)jdr_num(op, "stop", 0)))
    U("index", tj_index(a, ax, (int64_t)jdr_num(op, "i", 0))) U("concat", tj_concat(nin, in, ax))
    U("pad", tj_pad(a, ax, (int64_t)jdr_num(op, "lo", 0), (int64_t)jdr_num(op, "hi", 0), jdr_num(op, "value", 0)))
    U("broadcast", tj_broadcast(a, jdr_str(op, "shape", ""))) U("take", tj_take(a, ax, b)) U("one_hot", tj_one_hot(a, jdr_str(op, "shape", ""), dt))
    U("causal_mask", tj_causal_mask(a, jdr_str(op, "q", ""), jdr_str(op, "k", ""), jdr_num(op, "fill", 0)))
    if (strcmp(nm, "attention") == 0 && jdr_get(op, "order")) { /* (the generator's order of its result: a transpose after) */
        tj_v r = nin == 4 ? tj_attention_masked(a, b, c, in[3], jdr_str(op, "qpos", ""), jdr_str(op, "kpos", ""), jdr_str(op, "dim", ""),
                                                jdr_num(op, "scale", 0), (int)jdr_num(op, "causal", 0))
                          : tj_attention(a, b, c, jdr_str(op, "qpos", ""), jdr_str(op, "kpos", ""), jdr_str(op, "dim", ""), jdr_num(op, "scale", 0),
                                         (int)jdr_num(op, "causal", 0));
        return r ? tj_transpose(r, jdr_str(op, "order", "")) : NULL;
    }
    U("attention", nin == 4 ? tj_attention_masked(a, b, c, in[3], jdr_str(op, "qpos", ""), jdr_str(op, "kpos", ""), jdr_str(op, "dim", ""),
                                                  jdr_num(op, "scale", 0), (int)jdr_num(op, "causal", 0))
                            : tj_attention(a, b, c, jdr_str(op, "qpos", ""), jdr_str(op, "kpos", ""), jdr_str(op, "dim", ""), jdr_num(op, "scale", 0),
                                           (int)jdr_num(op, "causal", 0)))
    U("softmax", tj_softmax(a, ax)) U("log_softmax", tj_log_softmax(a, ax)) U("layer_norm", tj_layer_norm(a, ax, jdr_num(op, "eps", 1e-5)))
    U("cross_entropy", tj_cross_entropy(a, b, ax, jdr_get(op, "mean_axes") ? jdr_str(op, "mean_axes", "") : NULL))
    U("cross_entropy_padded", tj_cross_entropy_padded(a, b, ax, jdr_get(op, "mean_axes") ? jdr_str(op, "mean_axes", "") : NULL, (int64_t)jdr_num(op, "classes", 1)))
    U("cross_entropy_ignore", tj_cross_entropy_ignore(a, b, ax, jdr_get(op, "mean_axes") ? jdr_str(op, "mean_axes", "") : NULL,
                                                      (int)jdr_num(op, "ignore", TJ_IGNORE_INDEX)))
    U("wsc", tj_with_sharding_constraint(a, jdr_str(op, "spec", "")))
    U("checkpoint_name", tj_checkpoint_name(a, jdr_str(op, "name", ""))) U("stop_gradient", tj_stop_gradient(a))
    U("psum", tj_psum(a, jdr_str(op, "mesh_axes", ""))) U("pmax", tj_pmax(a, jdr_str(op, "mesh_axes", "")))
    U("pvary", tj_pvary(a, jdr_str(op, "mesh_axes", ""))) U("all_gather", tj_all_gather(a, jdr_str(op, "mesh_axes", ""), ax))
    U("psum_scatter", tj_psum_scatter(a, jdr_str(op, "mesh_axes", ""), ax))
    U("all_to_all", tj_all_to_all(a, jdr_str(op, "mesh_axes", ""), jdr_str(op, "split_axis", ""), jdr_str(op, "concat_axis", "")))
    U("axis_index", tj_axis_index(g, jdr_str(op, "mesh_axes", ""))) U("arange", tj_arange(g, dt, jdr_str(op, "shape", ""), ax))
#undef U
    if (strcmp(nm, "ppermute") == 0) {
        const jdr_j *pr = jdr_get(op, "pairs");
        int pairs[2 * TJ_MAXDEV], np = 0;
        for (i = 0; pr && pr->kind == JDR_ARR && i < pr->n && i < 2 * TJ_MAXDEV; i++) pairs[np++] = (int)pr->kid[i]->num;
        return tj_ppermute(a, jdr_str(op, "mesh_axes", ""), np / 2, pairs);
    }
    snprintf(p->err, sizeof p->err, "unknown op '%s'", nm);
    return NULL;
}
static int jdr_custom_vjp(jdr_prog *p, const jdr_j *op);
static int jdr_strings(const jdr_j *a, int n, int optional);
/* the ops of a list, in order; 0, or -1 at the first that fails */
static int jdr_ops_in(jdr_prog *p, tj_graph *g, const jdr_j *ops) {
    int i;
    for (i = 0; ops && ops->kind == JDR_ARR && i < ops->n; i++) {
        tj_v r;
        if (strcmp(jdr_str(ops->kid[i], "op", ""), "custom_vjp") == 0) {
            if (jdr_custom_vjp(p, ops->kid[i])) return -1;
            continue;
        }
        if (!(r = jdr_apply(p, g, ops->kid[i]))) { /* tinyjax's own error, not a later lookup's */
            if (!p->err[0]) snprintf(p->err, sizeof p->err, "%s", tj_error(tj_graph_ctx(g)));
            return -1;
        }
        jdr_bind(p, jdr_str(ops->kid[i], "out", ""), r);
    }
    return 0;
}
/* every op of the spec */
static int jdr_ops(jdr_prog *p, tj_graph *g) { return jdr_ops_in(p, g, jdr_get(p->spec, "ops")); }

/* {"op": "custom_vjp", "in": [x, y], "out": "v7", "more_out": ["v8"],
    "fwd": {"in": [local names of x, y], "ops": [...], "out": [names],
            "res": [names]},
    "bwd": {"res": [names], "ct": [names], "ops": [...], "out": [a name or
            null per input]}}
   tj_custom_vjp with fwd and bwd made of spec ops (their names are local:
   the generator prefixes them with the op's out name) */
static void jdr_cv_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    struct jdr_cvu *c = (struct jdr_cvu *)u;
    jdr_prog *p = (jdr_prog *)c->p;
    const jdr_j *fw = jdr_get(c->op, "fwd"), *fi = jdr_get(fw, "in"), *fo = jdr_get(fw, "out"), *fr = jdr_get(fw, "res");
    int i;
    for (i = 0; i < fi->n; i++) jdr_bind(p, fi->kid[i]->str, in[i]);
    if (jdr_ops_in(p, g, jdr_get(fw, "ops"))) return; /* (out stays NULL: tj_custom_vjp says so) */
    for (i = 0; i < fo->n; i++) out[i] = jdr_lookup(p, fo->kid[i]->str);
    for (i = 0; fr && i < fr->n; i++) res[i] = jdr_lookup(p, fr->kid[i]->str);
}
static void jdr_cv_bwd(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *u) {
    struct jdr_cvu *c = (struct jdr_cvu *)u;
    jdr_prog *p = (jdr_prog *)c->p;
    const jdr_j *bw = jdr_get(c->op, "bwd"), *br = jdr_get(bw, "res"), *bc = jdr_get(bw, "ct"), *bo = jdr_get(bw, "out");
    int i;
    for (i = 0; br && i < br->n; i++) jdr_bind(p, br->kid[i]->str, res[i]);
    for (i = 0; i < bc->n; i++) jdr_bind(p, bc->kid[i]->str, ct[i]);
    if (jdr_ops_in(p, g, jdr_get(bw, "ops"))) return;
    for (i = 0; i < bo->n; i++) gin[i] = bo->kid[i]->kind == JDR_STR ? jdr_lookup(p, bo->kid[i]->str) : NULL; /* null: no gradient */
}
static int jdr_custom_vjp(jdr_prog *p, const jdr_j *op) {
    const jdr_j *ins = jdr_get(op, "in"), *fw = jdr_get(op, "fwd"), *bw = jdr_get(op, "bwd"), *fo = jdr_get(fw, "out"), *fr = jdr_get(fw, "res"), *more = jdr_get(op, "more_out");
    tj_v in[16], out[16];
    int i, k, nres = fr && fr->kind == JDR_ARR ? fr->n : 0;
    if (!jdr_strings(ins, -1, 0) || ins->n > 16 || !jdr_strings(jdr_get(fw, "in"), ins->n, 0) || !jdr_strings(fo, -1, 0) || fo->n > 16 ||
        !jdr_strings(fr, -1, 1) || !jdr_strings(jdr_get(bw, "res"), nres, 0) || !jdr_strings(jdr_get(bw, "ct"), fo->n, 0) ||
        !jdr_get(bw, "out") || jdr_get(bw, "out")->kind != JDR_ARR || jdr_get(bw, "out")->n != ins->n || !jdr_strings(more, fo->n - 1, fo->n == 1)) {
        snprintf(p->err, sizeof p->err, "custom_vjp: want in, fwd {in, ops, out, res}, bwd {res, ct, ops, out} and more_out, the counts matching");
        return -1;
    }
    for (k = 0; k < p->ncvu && p->cvu[k].op != op; k++) {} /* (a scan body may be traced more than once) */
    if (k == p->ncvu) {
        if (k == 64) { snprintf(p->err, sizeof p->err, "more than 64 custom_vjp ops"); return -1; }
        p->cvu[p->ncvu].p = p;
        p->cvu[p->ncvu++].op = op;
    }
    for (i = 0; i < ins->n; i++) in[i] = jdr_lookup(p, ins->kid[i]->str);
    if (tj_custom_vjp(jdr_cv_fwd, jdr_cv_bwd, &p->cvu[k], ins->n, in, fo->n, out, nres)) return -1;
    jdr_bind(p, jdr_str(op, "out", ""), out[0]);
    for (i = 1; i < fo->n; i++) jdr_bind(p, more->kid[i - 1]->str, out[i]);
    return 0;
}
static int jdr_is_float(tj_v v) { return v && (tj_v_dtype(v) == TJ_F32 || tj_v_dtype(v) == TJ_BF16 || tj_v_dtype(v) == TJ_F64); }

/* ---- the modes: each binds the outputs' names to traced values ---- */
static void jdr_scan_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *carry_out, tj_v *y, void *u) {
    jdr_prog *p = (jdr_prog *)u;
    const jdr_j *sc = jdr_get(p->spec, "scan"), *cs = jdr_get(sc, "carry"), *xs = jdr_get(sc, "xs"), *co = jdr_get(sc, "carry_out");
    const jdr_j *outs = jdr_get(p->spec, "outputs");
    int i;
    for (i = 0; i < cs->n; i++) jdr_bind(p, cs->kid[i]->str, carry[i]);
    for (i = 0; xs && i < xs->n; i++) jdr_bind(p, xs->kid[i]->str, x[i]);
    jdr_ops(p, g);
    for (i = 0; i < co->n; i++) carry_out[i] = jdr_lookup(p, co->kid[i]->str);
    for (i = 0; outs && i < outs->n; i++) y[i] = jdr_lookup(p, outs->kid[i]->str);
}
static void jdr_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    jdr_prog *p = (jdr_prog *)u;
    const jdr_j *ins = jdr_get(p->spec, "inputs"), *outs = jdr_get(p->spec, "outputs");
    int i;
    for (i = 0; i < ins->n; i++) jdr_bind(p, jdr_str(ins->kid[i], "name", ""), in[i]);
    jdr_ops(p, g);
    for (i = 0; i < outs->n; i++) out[i] = jdr_lookup(p, outs->kid[i]->str);
}
/* "nothing_saveable", "save_only_these_names:a b", "save_and_offload_only_
   these_names:a|b", "save_from_both:names", "dots_saveable", ... */
static int jdr_policy(jdr_prog *p, const char *s) {
    const char *arg = strchr(s, ':');
    size_t n = arg ? (size_t)(arg - s) : strlen(s);
    char *save = p->save, *off = p->off;
    arg = arg ? arg + 1 : "";
#define P(name) (n == strlen(name) && strncmp(s, name, n) == 0)
    if (P("everything_saveable")) p->pol = tj_everything_saveable();
    else if (P("nothing_saveable")) p->pol = tj_nothing_saveable();
    else if (P("dots_saveable")) p->pol = tj_dots_saveable();
    else if (P("dots_with_no_batch_dims_saveable")) p->pol = tj_dots_with_no_batch_dims_saveable();
    else if (P("offload_dot_with_no_batch_dims")) p->pol = tj_offload_dot_with_no_batch_dims();
    else if (P("save_only_these_names")) p->pol = tj_save_only_these_names(arg);
    else if (P("save_any_names_but_these")) p->pol = tj_save_any_names_but_these(arg);
    else if (P("save_and_offload_only_these_names")) {
        const char *bar = strchr(arg, '|');
        snprintf(save, sizeof p->save, "%.*s", bar ? (int)(bar - arg) : (int)strlen(arg), arg);
        snprintf(off, sizeof p->off, "%s", bar ? bar + 1 : "");
        p->pol = tj_save_and_offload_only_these_names(save, off);
    } else if (P("save_from_both")) { /* dots_saveable or the names */
        p->pol2[0] = tj_dots_saveable();
        p->pol2[1] = tj_save_only_these_names(arg);
        p->pol = tj_save_from_both(&p->pol2[0], &p->pol2[1]);
    } else return -1;
#undef P
    return 0;
}
/* the loss weight of output NAME is the input "w:NAME" */
static const char *wname_of(const char *name, char *buf, size_t n) {
    snprintf(buf, n, "w:%s", name);
    return buf;
}
static void jdr_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    jdr_prog *p = (jdr_prog *)u;
    const jdr_j *spec = p->spec, *ins = jdr_get(spec, "inputs"), *outs = jdr_get(spec, "outputs"), *wts = jdr_get(spec, "weights");
    const char *mode = jdr_str(spec, "mode", "jit");
    tj_v xin[64], res[96], wrt[64], grads[64], loss = NULL; /* (64 outputs + 16 carries) */
    const char *oname[96], *wname[64];
    char *names = NULL, wn[300];
    int i, nin = ins->n, nout = 0, nwrt = 0;
    p->nv = 0;
    for (i = 0; i < nin; i++) {
        xin[i] = tj_tree_v(in, jdr_str(ins->kid[i], "name", ""));
        jdr_bind(p, jdr_str(ins->kid[i], "name", ""), xin[i]);
    }
    if (strcmp(mode, "jit") == 0 || strcmp(mode, "sharded") == 0) {
        if (jdr_ops(p, g)) return;
        for (i = 0; i < outs->n; i++) oname[nout] = outs->kid[i]->str, res[nout++] = jdr_lookup(p, outs->kid[i]->str);
    } else if (strcmp(mode, "checkpoint") == 0 || strcmp(mode, "shard_map") == 0) {
        if (strcmp(mode, "checkpoint") == 0) {
            if (jdr_policy(p, jdr_str(spec, "policy", "nothing_saveable"))) { snprintf(p->err, sizeof p->err, "unknown policy"); return; }
            if (tj_checkpoint(jdr_region, p, nin, xin, outs->n, res, &p->pol)) return;
        } else {
            const char *is[64], *os[64];
            const jdr_j *isj = jdr_get(spec, "in_specs"), *osj = jdr_get(spec, "out_specs");
            for (i = 0; i < nin; i++) is[i] = isj->kid[i]->str;
            for (i = 0; i < outs->n; i++) os[i] = osj->kid[i]->str;
            if (tj_shard_map(jdr_region, p, nin, xin, is, outs->n, res, os, (int)jdr_num(spec, "check", 1))) return;
        }
        for (i = 0; i < outs->n; i++) oname[nout++] = outs->kid[i]->str;
    } else if (strcmp(mode, "scan") == 0) {
        const jdr_j *sc = jdr_get(spec, "scan"), *cs = jdr_get(sc, "carry"), *xs = jdr_get(sc, "xs");
        tj_v init[16], xv[16], fin[16];
        int nx = xs ? xs->n : 0, rev = (int)jdr_num(sc, "reverse", 0);
        const jdr_j *pj = jdr_get(spec, "policy");
        char ax[64];
        snprintf(ax, sizeof ax, "%s", jdr_str(sc, "axis", "layer"));
        for (i = 0; i < cs->n; i++) init[i] = jdr_lookup(p, cs->kid[i]->str);
        for (i = 0; i < nx; i++) xv[i] = jdr_lookup(p, xs->kid[i]->str);
        if (pj && jdr_policy(p, pj->str)) { snprintf(p->err, sizeof p->err, "unknown policy"); return; }
        /* lax.scan(reverse=True): tinyjax's reverse scan (tj_scan_dir) */
        if (tj_scan_dir(jdr_scan_body, p, ax, cs->n, init, nx, xv, outs->n, fin, res, pj ? &p->pol : NULL, rev)) return;
        for (i = 0; i < outs->n; i++) oname[nout++] = outs->kid[i]->str;
        names = (char *)calloc((size_t)cs->n, 300);
        for (i = 0; i < cs->n; i++) {
            snprintf(names + 300 * i, 300, "carry:%s", cs->kid[i]->str);
            oname[nout] = names + 300 * i;
            res[nout++] = fin[i];
        }
    } else {
        snprintf(p->err, sizeof p->err, "unknown mode '%s'", mode);
        return;
    }
    /* loss = sum over float outputs of sum(f32(out) * weight) */
    for (i = 0; i < nout; i++) {
        tj_v t;
        if (!res[i]) break;
        tj_tree_set_v(out, oname[i], res[i]);
        if (!jdr_is_float(res[i]) || !jdr_get(wts, oname[i])) continue;
        t = tj_sum_all(tj_mul(tj_cast(res[i], TJ_F32), tj_tree_v(in, wname_of(oname[i], wn, sizeof wn))));
        loss = loss ? tj_add(loss, t) : t;
    }
    if (loss) tj_tree_set_v(out, "loss", loss);
    for (i = 0; loss && i < nin; i++)
        if (jdr_is_float(xin[i]) && jdr_num(ins->kid[i], "grad", 1) != 0) wname[nwrt] = jdr_str(ins->kid[i], "name", ""), wrt[nwrt++] = xin[i];
    if (loss && nwrt && jdr_num(spec, "vjp", 0) != 0) { /* "vjp": 1: tj_vjp with the weights as the outputs' cotangents (the same
                                                           gradient: the weight is d loss / d out, cast to out's dtype; its axes in
                                                           JAX's order, replicated: tj_vjp fits it to the output's order and layout) */
        tj_v vo[96], vc[96];
        int nvo = 0;
        for (i = 0; i < nout; i++)
            if (res[i] && jdr_is_float(res[i]) && jdr_get(wts, oname[i]))
                vo[nvo] = res[i], vc[nvo++] = tj_cast(tj_tree_v(in, wname_of(oname[i], wn, sizeof wn)), tj_v_dtype(res[i]));
        if (tj_vjp(nvo, vo, vc, nwrt, wrt, grads) != TJ_OK) return;
    } else if (loss && nwrt && tj_grad(loss, nwrt, wrt, grads) != TJ_OK) return;
    if (loss && nwrt) {
        char gn[300];
        for (i = 0; i < nwrt; i++) {
            snprintf(gn, sizeof gn, "grad:%s", wname[i]);
            tj_tree_set_v(out, gn, grads[i]);
        }
        if (jdr_get(spec, "second")) { /* grad of L2 = sum over x of sum(f32(dL/dx) * u:x): a Hessian-vector product */
            tj_v l2 = NULL, g2[64];
            for (i = 0; i < nwrt; i++) {
                tj_v t;
                snprintf(gn, sizeof gn, "u:%s", wname[i]);
                t = tj_sum_all(tj_mul(tj_cast(grads[i], TJ_F32), tj_tree_v(in, gn)));
                l2 = l2 ? tj_add(l2, t) : t;
            }
            if (tj_grad(l2, nwrt, wrt, g2) == TJ_OK)
                for (i = 0; i < nwrt; i++) {
                    snprintf(gn, sizeof gn, "grad2:%s", wname[i]);
                    tj_tree_set_v(out, gn, g2[i]);
                }
        }
    }
    free(names); /* (tree names are copied) */
}

/* ---- arrays in and out ---- */
static tj_array *jdr_array(tj_ctx *ctx, const char *dts, const char *shape, const jdr_j *data, char *err, size_t errlen) {
    tj_dtype dt;
    tj_array *a;
    void *raw;
    int64_t n, k;
    if (jdr_dtype(dts, &dt)) { snprintf(err, errlen, "unknown dtype '%s'", dts); return NULL; }
    if (!(a = tj_full(ctx, TJ_I32, shape, 0))) { snprintf(err, errlen, "%s", tj_error(ctx)); return NULL; }
    n = tj_array_numel(a); /* (the shape's element count) */
    tj_array_free(a);
    if (!data || data->kind != JDR_ARR || data->n != n) { snprintf(err, errlen, "shape \"%s\": want %lld values", shape, (long long)n); return NULL; }
    /* the generator writes values its dtype holds exactly */
    raw = malloc(tj_dtype_size(dt) * (size_t)(n ? n : 1));
    for (k = 0; k < n; k++) {
        double d = jdr_value(data->kid[k]);
        if (dt == TJ_F32) ((float *)raw)[k] = (float)d;
        else if (dt == TJ_BF16) ((uint16_t *)raw)[k] = tj_f32_to_bf16((float)d);
        else if (dt == TJ_F64) ((double *)raw)[k] = d;
        else ((int32_t *)raw)[k] = (int32_t)d;
    }
    a = tj_array_new(ctx, dt, shape, raw);
    if (!a) snprintf(err, errlen, "%s", tj_error(ctx));
    free(raw);
    return a;
}
static void jdr_put_num(tj_strbuf *b, double v) {
    if (v != v) tj_strbuf_puts(b, "\"nan\"");
    else if (isinf(v)) tj_strbuf_puts(b, v > 0 ? "\"inf\"" : "\"-inf\"");
    else tj_strbuf_printf(b, "%.17g", v);
}
/* {"dtype": "f32", "axes": ["a", "b"], "dims": [2, 3], "data": [...]} */
static void jdr_put_array(tj_strbuf *b, tj_array *a) {
    char desc[512], *s, *e;
    int64_t n = tj_array_numel(a), i;
    double *d = (double *)malloc(sizeof(double) * (size_t)(n ? n : 1));
    int first = 1;
    tj_array_describe(a, desc, sizeof desc); /* "f32[a=2,b=3]" */
    tj_strbuf_printf(b, "{\"dtype\": \"%s\", \"axes\": [", tj_dtype_name(tj_array_dtype(a)));
    for (s = strchr(desc, '[') + 1; *s && *s != ']'; s = *e == ',' ? e + 1 : e) {
        e = strchr(s, '=');
        if (!e) break;
        tj_strbuf_printf(b, "%s\"%.*s\"", first ? "" : ", ", (int)(e - s), s);
        first = 0;
        for (e++; *e && *e != ',' && *e != ']'; e++) {}
    }
    tj_strbuf_puts(b, "], \"data\": [");
    tj_array_read(a, TJ_F64, d);
    for (i = 0; i < n; i++) {
        if (i) tj_strbuf_puts(b, ", ");
        jdr_put_num(b, d[i]);
    }
    tj_strbuf_puts(b, "]}");
    free(d);
}

/* 1 if a is an array of n strings (n < 0: any count up to 64), or absent
   and optional */
static int jdr_strings(const jdr_j *a, int n, int optional) {
    int i;
    if (!a) return optional;
    if (a->kind != JDR_ARR || (n >= 0 ? a->n != n : a->n > 64)) return 0;
    for (i = 0; i < a->n; i++)
        if (a->kid[i]->kind != JDR_STR) return 0;
    return 1;
}
/* the fields the modes read, with their types (tinyjax checks the rest) */
static int jdr_check(const jdr_j *spec, char *err, size_t n) {
    const jdr_j *ins = jdr_get(spec, "inputs"), *outs = jdr_get(spec, "outputs"), *ops = jdr_get(spec, "ops"), *sc = jdr_get(spec, "scan");
    const char *mode = jdr_str(spec, "mode", "jit"), *bad = NULL;
    int i;
    if (!spec || spec->kind != JDR_OBJ) bad = "a spec is a JSON object";
    else if (!ins || ins->kind != JDR_ARR || ins->n < 1 || ins->n > 64) bad = "inputs: want an array of 1..64 objects";
    else if (!jdr_strings(outs, -1, 0) || outs->n < 1) bad = "outputs: want an array of 1..64 names";
    else if (ops && ops->kind != JDR_ARR) bad = "ops: want an array";
    else if (strcmp(mode, "scan") == 0 && (!sc || !jdr_strings(jdr_get(sc, "carry"), -1, 0) || !jdr_strings(jdr_get(sc, "xs"), -1, 1) ||
                                           !jdr_strings(jdr_get(sc, "carry_out"), jdr_get(sc, "carry") ? jdr_get(sc, "carry")->n : 0, 0) ||
                                           jdr_get(sc, "carry")->n > 16 || (jdr_get(sc, "xs") && jdr_get(sc, "xs")->n > 16)))
        bad = "scan: want carry (1..16 names), carry_out (as many) and xs (0..16)";
    else if (strcmp(mode, "shard_map") == 0 && (!jdr_strings(jdr_get(spec, "in_specs"), ins->n, 0) || !jdr_strings(jdr_get(spec, "out_specs"), outs->n, 0)))
        bad = "shard_map: want in_specs and out_specs, one string per input and output";
    for (i = 0; !bad && i < ins->n; i++)
        if (ins->kid[i]->kind != JDR_OBJ || !jdr_str(ins->kid[i], "name", NULL)) bad = "inputs: each wants a name";
    for (i = 0; !bad && ops && i < ops->n; i++)
        if (ops->kid[i]->kind != JDR_OBJ || !jdr_str(ops->kid[i], "out", NULL) || !jdr_strings(jdr_get(ops->kid[i], "in"), -1, 1))
            bad = "ops: each wants \"op\", \"out\" and \"in\" (names)";
    if (bad) snprintf(err, n, "spec: %s", bad);
    return bad != NULL;
}

/* Run one spec (a parsed JSON object); the result JSON goes to *outb.
   Returns 0, or 1 when tinyjax or the runner reported an error (the
   result then is {"error": "..."}). */
static int jdr_run_spec(const jdr_j *spec, tj_strbuf *outb) {
    jdr_prog prog;
    tj_ctx *ctx = tj_ctx_new();
    tj_tree *in = tj_tree_new(ctx), *out = tj_tree_new(ctx);
    const jdr_j *ins = jdr_get(spec, "inputs"), *wts = jdr_get(spec, "weights");
    const char *mode = jdr_str(spec, "mode", "jit");
    tj_prog *pr = NULL;
    char err[1024] = "", wn[300];
    int i, rc = 1, sharded = jdr_get(spec, "mesh") != NULL;
    memset(&prog, 0, sizeof prog);
    prog.spec = spec;
    if (jdr_check(spec, err, sizeof err)) goto done;
    if (sharded) {
        if (tj_set_devices(ctx, (int)jdr_num(spec, "devices", 1)) || tj_set_mesh(ctx, jdr_str(spec, "mesh", ""))) goto done;
    }
    for (i = 0; i < ins->n; i++) {
        const jdr_j *x = ins->kid[i];
        tj_array *a = jdr_array(ctx, jdr_str(x, "dtype", "f32"), jdr_str(x, "shape", ""), jdr_get(x, "data"), err, sizeof err);
        if (a && sharded && strcmp(mode, "shard_map") != 0 && jdr_get(x, "spec")) {
            tj_array *s = tj_device_put(a, jdr_str(x, "spec", ""));
            tj_array_free(a);
            a = s;
        }
        if (!a) goto done;
        tj_tree_set_array(in, jdr_str(x, "name", ""), a);
    }
    for (i = 0; i < ins->n && jdr_get(spec, "second"); i++) { /* second: "u:x", input x's shape in f32 */
        const jdr_j *x = ins->kid[i], *u = jdr_get(jdr_get(spec, "second"), jdr_str(x, "name", ""));
        tj_array *a;
        if (!u) continue;
        if (!(a = jdr_array(ctx, "f32", jdr_str(x, "shape", ""), u, err, sizeof err))) goto done;
        snprintf(wn, sizeof wn, "u:%s", jdr_str(x, "name", ""));
        tj_tree_set_array(in, wn, a);
    }
    for (i = 0; wts && i < wts->n; i++) { /* loss weights: extra inputs named like their output */
        tj_array *a = jdr_array(ctx, "f32", jdr_str(wts->kid[i], "shape", ""), jdr_get(wts->kid[i], "data"), err, sizeof err);
        if (!a) goto done;
        tj_tree_set_array(in, wname_of(wts->kid[i]->key, wn, sizeof wn), a);
    }
    pr = tj_jit(ctx, "jax_diff", jdr_fn, &prog, in, NULL);
    if (prog.err[0]) { snprintf(err, sizeof err, "%s", prog.err); goto done; }
    if (!pr || tj_run(pr, in, out)) goto done;
    tj_strbuf_puts(outb, "{\"results\": {");
    for (i = 0; i < tj_tree_size(out); i++) {
        tj_strbuf_printf(outb, "%s\n  ", i ? "," : "");
        tj_strbuf_json(outb, tj_tree_name(out, i));
        tj_strbuf_puts(outb, ": ");
        jdr_put_array(outb, tj_tree_array_at(out, i));
    }
    tj_strbuf_puts(outb, "}}\n");
    rc = 0;
done:
    if (rc) {
        if (!err[0]) snprintf(err, sizeof err, "%s", tj_error(ctx));
        tj_strbuf_puts(outb, "{\"error\": ");
        tj_strbuf_json(outb, err);
        tj_strbuf_puts(outb, "}\n");
    }
    tj_prog_free(pr);
    tj_tree_free(in);
    tj_tree_free(out);
    tj_ctx_free(ctx);
    return rc;
}
static jdr_j *jdr_parse_text(const char *text, size_t len, const char *label, char *err, size_t errlen) {
    tj_json j;
    jdr_j *v;
    tj_json_init(&j, text, len, label, err, errlen);
    v = jdr_parse_value(&j);
    if (v && tj_json_peek(&j) != -1) {
        tj_json_fail(&j, "trailing text");
        jdr_free(v);
        return NULL;
    }
    return v;
}

#ifndef JDR_NO_MAIN
int main(int argc, char **argv) {
    char *text, err[512];
    size_t len;
    jdr_j *spec;
    tj_strbuf b;
    int rc;
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s SPEC.json [OUT.json]\n", argv[0]);
        return 2;
    }
    if (tj_read_file(argv[1], &text, &len, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 2; }
    spec = jdr_parse_text(text, len, argv[1], err, sizeof err);
    tj_free(text);
    if (!spec) { fprintf(stderr, "%s\n", err); return 2; }
    memset(&b, 0, sizeof b);
    rc = jdr_run_spec(spec, &b);
    if (argc == 3) {
        if (tj_write_file_atomic(argv[2], b.p, b.n, err, sizeof err)) { fprintf(stderr, "%s\n", err); rc = 2; }
    } else fwrite(b.p, 1, b.n, stdout);
    tj_strbuf_free(&b);
    jdr_free(spec);
    return rc;
}
#endif
