/* test_harness.c — every op of the op table, in every context, on every mesh
   (issue #15: "the test that catches the next one"; in the spirit of ggml's
   test-backend-ops).

   One ROW per op of the op table (enum TJ__OP_*, names from tjt_opname): how
   to build it from the public API with small named-axis inputs, which inputs
   are differentiable, their value ranges, whether it is twice
   differentiable, and along which axes it is independent (so tj_shard_map
   may split them). Ops that cannot be called directly (param, out, scan,
   gelu_grad, softmax_grad, scatter_add, offload, ...) are claimed by the row
   of the public call that produces them; the harness FAILS if an op of the
   table is claimed by no row, or never shows up in any compiled program.

   Each row runs in every CONTEXT:
     top           y = op(x)
     scan_xs       the inputs are the xs of a 2-step tj_scan (scaled per step)
     scan_cap      a tj_scan body uses the inputs it captures (not passed as xs)
     scan_ys       the op's result is the scan's per-iteration output y
     ckpt_*        inside tj_checkpoint under each policy: everything saveable,
                   nothing saveable, dots saveable, save only "y", offload "y"
     smap_on/off   inside tj_shard_map (check on / off), split along the
                   axes the op is independent of
     nested        a scan inside a scan (2 x 2 steps)
   on each MESH: 1 device ("data=1"), data=2, data=2 model=2, data=4 model=2,
   with the inputs sharded along each of their axes, over each mesh axis and
   pairs of them (device_put outside the program, or tj_shard_by_rules inside
   it: alternately, and both ways in the top context).

   Loss: L(y) = sum(w1 y) + 0.5 sum(w2 y^2) with fixed random weights; the
   scans carry c' = c * R(y) + L(y) so iterations interact (R(y) = mean(w3 y)).
   Checked, for each (row, context, mesh, sharding): y, the loss, its
   gradient with respect to every differentiable input, and (twice-
   differentiable rows) the gradient of sum(w4 grad) — a tj_vjp of a tj_vjp —
   against the SAME computation written without the context (scans
   unrolled, regions and shard_map removed) at top level on one device, no
   mesh (f32, relative 1e-5 of the largest reference element). That
   reference itself is checked against central finite differences in f64,
   first and second order. Explicit collectives (psum, all_gather, ...)
   only exist inside tj_shard_map: their rows build their own shard_map and
   their reference is the same function written with plain ops; calling them
   outside shard_map must be a clear error, as must a sharding constraint
   inside shard_map.

   The scans run under policies too: scan_xs offloads its carry (named
   "c"), scan_cap keeps dots, the inner scan of nested saves nothing.
   Remat-policy checks: offloading uses host memory, and tj_prog_lint has
   nothing to say about a policy whose names the region does carry. On the
   8-device mesh, programs run twice and must give the same bits.

   Memory rules of issue #15, per mesh and sharding: a tj_checkpoint saving
   everything needs no more device temp than the same program without it,
   and a policy that saves less (nothing, dots, only "y", offload "y")
   needs no more than everything_saveable.

   Failures are counted in four kinds: first order (y, loss, gradients,
   a program that does not build, a missing error), grad of grad, remat
   policy, memory rules; the summary at the end is a table of rows x
   contexts.

   Usage: test_harness [row|all] [context|all] [mesh index 0..3]
   TJ_TEST_QUICK=1: meshes 0, 2 and 3, and on 2 and 3 one sharding per
   row, a different one from row to row (every row, every context; over the
   rows, every kind of sharding and both ways of placing the inputs on each
   mesh and context).
   HX_VERBOSE=1: print each program's outcome; HX_BRIEF=1: print only the
   first 3 failures of each row, context and kind; HX_NOGG=1: first-order
   programs only (no grad of grad), to tell the two apart. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "../tinyjax.h" /* its implementation is linked in: tests/tj_impl.c */
#include "tj_test.h"
#include <time.h>

#define HX_MAXIN 3
#define HX_L 2 /* scan length */

typedef struct hx_row hx_row;
typedef struct hx_cfg hx_cfg;
typedef tj_v (*hx_build)(tj_graph *g, const tj_v *x, const hx_cfg *c);

struct hx_row {
    const char *name;
    const char *ops;    /* op-table names this row covers (tjt_opname)              */
    const char *via;    /* for ops made by other calls: which public call makes them */
    hx_build build;
    int nin;
    const char *shape[HX_MAXIN];
    const char *kind;   /* per input: 'f' float (the run's dtype), 'i' i32 */
    double lo, hi;      /* float range (default [-1, 1)); ints are in [0, ihi) */
    double lo1, hi1;    /* range of input 1 when it differs (hi1 > lo1)       */
    int ihi;
    unsigned diff;      /* bit i: input i is differentiable                  */
    int twice;          /* twice differentiable: check grad of grad         */
    const char *smap;   /* axes the op is independent along (shard_map may split them) */
    const char *smap_err; /* inside tj_shard_map this is an error by design: its message */
    int coll;           /* explicit collective: builds its own shard_map     */
    int nofd;           /* no finite-difference check (stop_gradient)        */
    int cpu_only;       /* its ops are made for the CPU backend alone: under
                           TJ_BACKEND=devsim they never appear               */
    double fd_h, fd_tol;
};

enum { C_TOP, C_XS, C_CAP, C_YS, C_CK_ALL, C_CK_NONE, C_CK_DOTS, C_CK_NAMES, C_CK_OFFLOAD, C_SM_ON, C_SM_OFF, C_NEST, NCTX };
static const char *ctx_names[NCTX] = {"top",       "scan_xs",   "scan_cap",     "scan_ys", "ckpt_all", "ckpt_none",
                                      "ckpt_dots", "ckpt_names", "ckpt_offload", "smap_on", "smap_off", "nested"};
/* the reference each context is compared with (an unrolled top-level program) */
enum { R_TOP, R_XS, R_CAP, R_YS, R_NEST, NREF };
static int ref_kind(int cx) {
    switch (cx) {
    case C_XS: return R_XS;
    case C_CAP: return R_CAP;
    case C_YS: return R_YS;
    case C_NEST: return R_NEST;
    default: return R_TOP;
    }
}

struct hx_cfg {
    const hx_row *r;
    int cx;          /* context */
    int ref;         /* 1: the reference form (unrolled, top level) */
    int D;           /* size of mesh axis "data" (explicit collectives) */
    int check;       /* shard_map check flag */
    int mode;        /* 0: everything; 1: loss only; 2: the second-order loss only */
    int nogg;        /* mode 0 without the grad of grad (the fallback when it fails) */
    tj_dtype dt;
    const char *rules; /* placement applied inside the program (shard_by_rules), or NULL */
    char is[HX_MAXIN][128], os[128]; /* shard_map specs (smap contexts) */
    tj_v cap[HX_MAXIN];              /* values a scan body captures */
};

/* ------------------------------------------------------------ helpers --- */
static const char *shape_str(tj_v v, char *buf, size_t n) {
    size_t k = 0;
    int i;
    buf[0] = 0;
    for (i = 0; v && i < tj_v_rank(v); i++) {
        snprintf(buf + k, n - k, "%s%s=%lld", i ? " " : "", tj_v_axis(v, i), (long long)tj_v_dim(v, tj_v_axis(v, i)));
        k = strlen(buf);
    }
    return buf;
}
static const char *axes_str(tj_v v, char *buf, size_t n) {
    size_t k = 0;
    int i;
    buf[0] = 0;
    for (i = 0; v && i < tj_v_rank(v); i++) {
        snprintf(buf + k, n - k, "%s%s", i ? " " : "", tj_v_axis(v, i));
        k = strlen(buf);
    }
    return buf;
}
static double numel_v(tj_v v) {
    double n = 1;
    int i;
    for (i = 0; v && i < tj_v_rank(v); i++) n *= (double)tj_v_dim(v, tj_v_axis(v, i));
    return n;
}
static tj_v sum_all(tj_v y) {
    char ax[256];
    if (!y || tj_v_rank(y) == 0) return y;
    return tj_sum(y, axes_str(y, ax, sizeof ax));
}
/* fixed weights in [0.25, 1.25) of y's shape: every element of y reaches
   the loss with its own weight (a plain sum hides bugs) */
static tj_v weights(tj_v y, uint64_t key) {
    char sh[256];
    if (!y) return NULL;
    return tj_adds(tj_uniform(tj_graph_of(y), key, tj_v_dtype(y), shape_str(y, sh, sizeof sh)), 0.25);
}
static tj_v wsum(tj_v y, uint64_t key) { return y ? sum_all(tj_mul(y, weights(y, key))) : NULL; }
enum { K1 = 101, K2 = 202, K3 = 303, K4 = 404 };
/* L(y) = sum(w1 y) + 0.5 sum(w2 y^2): its gradient depends on y, so even
   linear ops have a second derivative */
static tj_v loss_of(tj_v y) { return y ? tj_add(wsum(y, K1), tj_muls(wsum(tj_mul(y, y), K2), 0.5)) : NULL; }
static tj_v rate_of(tj_v y) { return y ? tj_muls(wsum(y, K3), 1.0 / numel_v(y)) : NULL; }
/* one scan step: c' = c R(y) + L(y) */
static tj_v step_of(tj_v carry, tj_v y) { return y ? tj_add(tj_mul(carry, rate_of(y)), loss_of(y)) : NULL; }
/* [a, b] along axis "ax=2" */
static tj_v vec2(tj_graph *g, tj_dtype dt, const char *ax, double a, double b) {
    char sh[32];
    snprintf(sh, sizeof sh, "%s=2", ax);
    return tj_adds(tj_muls(tj_arange(g, dt, sh, ax), b - a), a);
}
static const double SC_C[2] = {1.0, 0.75}; /* inner scan: input scale per step */
static const double SC_D[2] = {1.0, 0.5};  /* scan_cap / scan_ys: loss weight per step */
static const double SC_E[2] = {1.0, 0.5};  /* nested: outer scale per step */
/* xs along `ax` (leading): float inputs scaled by [a, b], ints repeated */
static void make_xs(tj_graph *g, const hx_cfg *c, const tj_v *x, const char *ax, const double *s, tj_v *xs) {
    int i;
    for (i = 0; i < c->r->nin; i++) {
        if (c->r->kind[i] == 'f') xs[i] = tj_mul(vec2(g, c->dt, ax, s[0], s[1]), x[i]);
        else {
            char sh[256], sh2[300];
            snprintf(sh2, sizeof sh2, "%s=2 %s", ax, shape_str(x[i], sh, sizeof sh));
            xs[i] = tj_broadcast(x[i], sh2);
        }
    }
}
/* the reference's step-l inputs: float inputs times s */
static void scale_in(const hx_cfg *c, const tj_v *x, double s, tj_v *o) {
    int i;
    for (i = 0; i < c->r->nin; i++) o[i] = c->r->kind[i] == 'f' ? tj_muls(x[i], s) : x[i];
}
static tj_v B(tj_graph *g, const tj_v *x, const hx_cfg *c) { return c->r->build(g, x, c); }

/* ----------------------------------------------------------- contexts --- */
static const tj_policy *nothing_policy(void) {
    static tj_policy p;
    p = tj_nothing_saveable();
    return &p;
}
static void xs_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    tj_v c = step_of(carry[0], B(g, x, (const hx_cfg *)u));
    (void)y;
    co[0] = c ? tj_checkpoint_name(c, "c") : NULL; /* the carry's name: scan_xs offloads it */
}
static void cap_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    const hx_cfg *c = (const hx_cfg *)u;
    tj_v yy = B(g, c->cap, c); /* the op works on values the body captures */
    (void)y;
    co[0] = yy ? tj_add(tj_mul(carry[0], rate_of(yy)), tj_mul(loss_of(yy), x[0])) : NULL;
}
static void ys_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)carry; (void)co;
    y[0] = B(g, x, (const hx_cfg *)u);
}
static void nest_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    const hx_cfg *c = (const hx_cfg *)u;
    tj_v ixs[HX_MAXIN];
    (void)y;
    make_xs(g, c, x, "L", SC_C, ixs);
    tj_scan(xs_body, u, "L", 1, carry, c->r->nin, ixs, 0, co, NULL, nothing_policy());
}
static void region_fn(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    tj_v y = B(g, in, (const hx_cfg *)u);
    out[0] = y ? tj_checkpoint_name(y, "y") : NULL;
    out[1] = loss_of(out[0]);
}
static void smap_fn(tj_graph *g, const tj_v *in, tj_v *out, void *u) { out[0] = B(g, in, (const hx_cfg *)u); }

static tj_policy policy_of(int cx) {
    switch (cx) {
    case C_CK_NONE: return tj_nothing_saveable();
    case C_CK_DOTS: return tj_dots_saveable();
    case C_CK_NAMES: return tj_save_only_these_names("y");
    case C_CK_OFFLOAD: return tj_save_and_offload_only_these_names("", "y");
    default: return tj_everything_saveable();
    }
}

/* The traced program: inputs x0.., outputs "y" (where the context has one),
   "loss", "g<i>" and "gg<i>" (mode 0), or only "loss" (modes 1, 2). */
static void prog_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    hx_cfg *c = (hx_cfg *)u;
    const hx_row *r = c->r;
    tj_v p[HX_MAXIN], x[HX_MAXIN], y = NULL, loss = NULL, wrt[HX_MAXIN], gr[HX_MAXIN], gg[HX_MAXIN];
    tj_v yl[HX_L] = {NULL, NULL};
    int i, nw = 0, l, m, cx = c->cx;
    char nm[16];
    for (i = 0; i < r->nin; i++) {
        snprintf(nm, sizeof nm, "x%d", i);
        p[i] = tj_tree_v(in, nm);
        x[i] = c->rules && *c->rules ? tj_shard_by_rules(p[i], c->rules) : p[i];
    }
    if (c->ref) { /* the same computation, unrolled, at top level */
        tj_v xl[HX_MAXIN], xm[HX_MAXIN], carry = tj_scalar(g, c->dt, 0.0);
        switch (ref_kind(cx)) {
        case R_TOP: y = B(g, x, c); loss = loss_of(y); break;
        case R_XS:
            for (l = 0; l < HX_L; l++) {
                scale_in(c, x, SC_C[l], xl);
                carry = step_of(carry, B(g, xl, c));
            }
            loss = carry;
            break;
        case R_CAP:
            for (l = 0; l < HX_L; l++) {
                tj_v yy = B(g, x, c);
                carry = yy ? tj_add(tj_mul(carry, rate_of(yy)), tj_muls(loss_of(yy), SC_D[l])) : NULL;
            }
            loss = carry;
            break;
        case R_YS:
            for (l = 0; l < HX_L; l++) {
                scale_in(c, x, SC_C[l], xl);
                yl[l] = B(g, xl, c);
                loss = l ? tj_add(loss, tj_muls(loss_of(yl[l]), SC_D[l])) : tj_muls(loss_of(yl[l]), SC_D[l]);
            }
            break;
        case R_NEST:
            for (m = 0; m < HX_L; m++) {
                scale_in(c, x, SC_E[m], xm);
                for (l = 0; l < HX_L; l++) {
                    scale_in(c, xm, SC_C[l], xl);
                    carry = step_of(carry, B(g, xl, c));
                }
            }
            loss = carry;
            break;
        }
    } else {
        tj_v xs[HX_MAXIN], carry = tj_scalar(g, c->dt, 0.0), fin = NULL, ys = NULL, ro[2] = {NULL, NULL};
        tj_policy pol;
        switch (cx) {
        case C_TOP: y = B(g, x, c); loss = loss_of(y); break;
        case C_XS:
            make_xs(g, c, x, "L", SC_C, xs);
            pol = tj_save_and_offload_only_these_names("", "c"); /* the carry lives in host memory */
            tj_scan(xs_body, c, "L", 1, &carry, r->nin, xs, 0, &fin, NULL, &pol);
            loss = fin;
            break;
        case C_CAP: {
            tj_v d = vec2(g, c->dt, "L", SC_D[0], SC_D[1]);
            for (i = 0; i < r->nin; i++) c->cap[i] = x[i];
            pol = tj_dots_saveable();
            tj_scan(cap_body, c, "L", 1, &carry, 1, &d, 0, &fin, NULL, &pol);
            loss = fin;
            break;
        }
        case C_YS: {
            char sh[256], *q;
            make_xs(g, c, x, "L", SC_C, xs);
            tj_scan(ys_body, c, "L", 0, NULL, r->nin, xs, 1, NULL, &ys, NULL);
            y = ys;
            if (ys) { /* sum_l d_l L(y_l), on the stacked ys */
                tj_v d = vec2(g, c->dt, "L", SC_D[0], SC_D[1]), w1, w2;
                shape_str(ys, sh, sizeof sh);
                q = strchr(sh, ' '); /* drop the leading "L=2" */
                w1 = tj_adds(tj_uniform(g, K1, c->dt, q ? q + 1 : ""), 0.25);
                w2 = tj_adds(tj_uniform(g, K2, c->dt, q ? q + 1 : ""), 0.25);
                loss = tj_add(sum_all(tj_mul(tj_mul(ys, w1), d)), tj_muls(sum_all(tj_mul(tj_mul(tj_mul(ys, ys), w2), d)), 0.5));
            }
            break;
        }
        case C_CK_ALL: case C_CK_NONE: case C_CK_DOTS: case C_CK_NAMES: case C_CK_OFFLOAD:
            pol = policy_of(cx);
            tj_checkpoint(region_fn, c, r->nin, x, 2, ro, &pol);
            y = ro[0];
            loss = ro[1];
            break;
        case C_SM_ON: case C_SM_OFF:
            if (r->coll) y = B(g, x, c); /* the row's own shard_map, checked or not */
            else {
                const char *is[HX_MAXIN], *os[1];
                for (i = 0; i < r->nin; i++) is[i] = c->is[i];
                os[0] = c->os;
                tj_shard_map(smap_fn, c, r->nin, x, is, 1, &y, os, cx == C_SM_ON);
            }
            loss = loss_of(y);
            break;
        case C_NEST: {
            make_xs(g, c, x, "M", SC_E, xs);
            tj_scan(nest_body, c, "M", 1, &carry, r->nin, xs, 0, &fin, NULL, NULL);
            loss = fin;
            break;
        }
        }
    }
    for (i = 0; i < r->nin; i++)
        if (r->diff >> i & 1) wrt[nw++] = p[i];
    if (c->mode == 1) {
        tj_tree_set_v(out, "loss", loss);
        return;
    }
    if (!loss) return;
    if (nw && tj_grad(loss, nw, wrt, gr) != TJ_OK) return;
    if (c->mode == 2 || (c->mode == 0 && r->twice && !c->nogg && nw)) {
        tj_v l2 = NULL;
        for (i = 0; i < nw; i++) {
            tj_v t = wsum(gr[i], K4 + (uint64_t)i);
            l2 = i ? tj_add(l2, t) : t;
        }
        if (c->mode == 2) {
            tj_tree_set_v(out, "loss", l2);
            return;
        }
        if (tj_grad(l2, nw, wrt, gg) != TJ_OK) return;
    }
    if (c->ref && ref_kind(cx) == R_YS) {
        for (l = 0; l < HX_L; l++) {
            snprintf(nm, sizeof nm, "y%d", l);
            tj_tree_set_v(out, nm, yl[l]);
        }
    } else if (y) tj_tree_set_v(out, "y", y);
    tj_tree_set_v(out, "loss", loss);
    for (i = 0; i < nw; i++) {
        snprintf(nm, sizeof nm, "g%d", i);
        tj_tree_set_v(out, nm, gr[i]);
        if (r->twice && !c->nogg) {
            snprintf(nm, sizeof nm, "gg%d", i);
            tj_tree_set_v(out, nm, gg[i]);
        }
    }
}

/* ---------------------------------------------------------- the rows --- */
#define BUILD(nm, expr)                                                  \
    static tj_v b_##nm(tj_graph *g, const tj_v *x, const hx_cfg *c) {    \
        (void)g; (void)c;                                                \
        return (expr);                                                   \
    }
#define X0 x[0]
#define X1 x[1]
#define DT (c->dt)
/* sign's gradient is zero (nothing to save, nothing to check): its row
   multiplies it by its input, as the comparison rows do with their masks */
static tj_v hx_u(const char *nm, tj_v y, tj_v x) { return strcmp(nm, "sign") ? y : tj_mul(y, x); }
/* the unary ops with a public builder: one row each, from the header's
   table (TJ__UNARY_OPS: name, formula, derivative, input range) */
#define HX_UBUILD(op, nm, fwd, kind, deriv, lo, hi) HX_UBUILD_##kind(nm)
#define HX_UBUILD_PUB(nm) BUILD(nm, hx_u(#nm, tj_##nm(X0), X0))
#define HX_UBUILD_OWN(nm)
#define HX_UBUILD_GRAD(nm)
TJ__UNARY_OPS(HX_UBUILD)
BUILD(pows3, tj_pows(X0, 3.0))
BUILD(pows15, tj_pows(X0, 1.5))
BUILD(cast, tj_cast(tj_cast(X0, DT == TJ_F64 ? TJ_F32 : TJ_F64), DT))
BUILD(add, tj_add(X0, X1))
BUILD(sub, tj_sub(X0, X1))
BUILD(mul, tj_mul(X0, X1))
BUILD(div, tj_div(X0, X1))
BUILD(max2, tj_max2(X0, X1))
BUILD(min2, tj_min2(X0, X1))
BUILD(lt, tj_mul(tj_cast(tj_lt(X0, X1), DT), X0))
BUILD(le, tj_mul(tj_cast(tj_le(X0, X1), DT), X0))
BUILD(gt, tj_mul(tj_cast(tj_gt(X0, X1), DT), X0))
BUILD(ge, tj_mul(tj_cast(tj_ge(X0, X1), DT), X0))
BUILD(eq, tj_mul(tj_cast(tj_eq(tj_max2(X0, X1), X0), DT), X0))
BUILD(ne, tj_mul(tj_cast(tj_ne(tj_max2(X0, X1), X0), DT), X0))
BUILD(select, tj_select(tj_gt(X0, X1), tj_mul(X0, X0), X1))
BUILD(fill, tj_add(tj_mul(X0, tj_scalar(g, DT, 1.5)), tj_fill(g, DT, "p=4 q=8", 0.5)))
BUILD(arange, tj_mul(X0, tj_arange(g, DT, "p=4 q=8", "q")))
BUILD(uniform, tj_mul(X0, tj_uniform(g, 11, DT, "p=4 q=8")))
BUILD(normal, tj_mul(X0, tj_normal(g, 12, DT, "p=4 q=8")))
BUILD(dropout, tj_dropout(X0, 13, 0.5))
BUILD(sum_p, tj_sum(X0, "p"))
BUILD(sum_pq, tj_sum(X0, "p q"))
BUILD(mean_q, tj_mean(X0, "q"))
/* reductions: over each axis, one pair per row of TJ__REDUCE_OPS (sum's
   rows below also check the psum a sharded axis needs) */
#define HX_RBUILD(op, nm, ...) BUILD(red_##nm##_q, tj_##nm(X0, "q")) BUILD(red_##nm##_p, tj_##nm(X0, "p"))
TJ__REDUCE_OPS(HX_RBUILD)
#undef HX_RBUILD
BUILD(dot, tj_dot(X0, X1, "k"))
BUILD(dot_batch, tj_dot(X0, X1, "k"))
/* FSDP's pair: b split along the contracted k where a is split along p on
   the same mesh axis, so the dot gathers b, and b's gradient (a sum over
   p) is reduce-scattered back along k: on simulated devices, one
   all_gather_dot and one dot_scatter (tj_set_collective_matmul) */
BUILD(dot_fsdp, tj_dot(tj_shard_by_rules(X0, "p:data"), tj_shard_by_rules(X1, "k:data"), "k"))
BUILD(transpose, tj_transpose(X0, "q p"))
static tj_v b_broadcast(tj_graph *g, const tj_v *x, const hx_cfg *c) {
    char sh[256], sh2[300];
    (void)g; (void)c;
    snprintf(sh2, sizeof sh2, "%s r=4", shape_str(X0, sh, sizeof sh)); /* local shapes inside shard_map */
    return tj_broadcast(X0, sh2);
}
BUILD(rename, tj_rename(X0, "q", "s"))
BUILD(split, tj_split(X0, "q", "h=2 d=0"))
BUILD(merge, tj_merge(X0, "p q", "pq"))
BUILD(slice, tj_slice(X0, "q", 2, 6))
BUILD(pad, tj_pad(X0, "q", 1, 3, 0.5))
BUILD(take, tj_take(X0, "v", X1))
BUILD(one_hot, tj_mul(tj_one_hot(X0, "v=8", DT), X1))
/* an integer result times the input: a gradient (the index) to check */
BUILD(argmax, tj_mul(tj_cast(tj_argmax(X0, "q"), DT), X0))
BUILD(argmin, tj_mul(tj_cast(tj_argmin(X0, "p"), DT), X0))
BUILD(clip, tj_clip(X0, -0.5, 0.75))
BUILD(stack, tj_stack(2, x, "s"))
BUILD(causal, tj_causal_mask(X0, "qp", "kp", -2.0))
BUILD(attention, tj_attention(X0, X1, x[2], "qp", "kp", "d", 0, 1))
BUILD(softmax, tj_softmax(X0, "q"))
BUILD(log_softmax, tj_log_softmax(X0, "q"))
BUILD(layer_norm, tj_layer_norm(X0, "q", 1e-5))
BUILD(cross_entropy, tj_cross_entropy(X0, X1, "v", "p"))
BUILD(stop_gradient, tj_mul(X0, tj_stop_gradient(X0)))
BUILD(name, tj_checkpoint_name(X0, "nm"))
BUILD(param, X0)
BUILD(offload, tj_exp(X0))
/* the implicit collectives: move a mesh axis around with constraints */
BUILD(reshard, tj_shard_by_rules(tj_shard_by_rules(tj_shard_by_rules(tj_tanh(X0), "p:data"), "q:data"), "q:none"))
static tj_v b_concat(tj_graph *g, const tj_v *x, const hx_cfg *c) {
    tj_v two[2];
    (void)g; (void)c;
    two[0] = X0;
    two[1] = X1;
    return tj_concat(2, two, "q");
}
/* a scan inside the op */
static void inner_scan_body(tj_graph *g, const tj_v *carry, const tj_v *x, tj_v *co, tj_v *y, void *u) {
    (void)g; (void)x; (void)y; (void)u;
    co[0] = tj_add(tj_muls(tj_tanh(carry[0]), 0.9), tj_muls(carry[0], 0.2));
}
static tj_v b_scan(tj_graph *g, const tj_v *x, const hx_cfg *c) {
    tj_v out = NULL;
    (void)g; (void)c;
    tj_scan(inner_scan_body, NULL, "n=2", 1, x, 0, NULL, 0, &out, NULL, NULL);
    return out;
}
/* a remat region inside the op */
static void inner_region(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    (void)g; (void)u;
    out[0] = tj_mul(tj_tanh(in[0]), in[0]);
}
static tj_v b_checkpoint(tj_graph *g, const tj_v *x, const hx_cfg *c) {
    tj_v out = NULL;
    (void)g; (void)c;
    tj_checkpoint(inner_region, NULL, 1, x, 1, &out, nothing_policy());
    return out;
}
/* a custom op with its own VJP rule: y = x^2 */
static void sq_cpu(const tj_buf *in, int nin, tj_buf *out, int nout, void *u) {
    int64_t n = 1, i;
    int k;
    (void)nin; (void)nout; (void)u;
    for (k = 0; k < in[0].rank; k++) n *= in[0].dim[k];
    if (in[0].dtype == TJ_F64)
        for (i = 0; i < n; i++) ((double *)out[0].data)[i] = ((const double *)in[0].data)[i] * ((const double *)in[0].data)[i];
    else
        for (i = 0; i < n; i++) ((float *)out[0].data)[i] = ((const float *)in[0].data)[i] * ((const float *)in[0].data)[i];
}
static tj_status sq_vjp(tj_graph *g, int nin, const tj_v *in, int nout, const tj_v *out, const tj_v *ct, tj_v *gin, void *u) {
    (void)g; (void)nin; (void)nout; (void)out; (void)u;
    gin[0] = tj_mul(tj_muls(in[0], 2.0), ct[0]);
    return TJ_OK;
}
static tj_v b_custom(tj_graph *g, const tj_v *x, const hx_cfg *c) {
    tj_v y = NULL;
    (void)g; (void)c;
    tj_custom("hx_sq", 1, x, &y);
    return y;
}
/* custom_vjp: tanh with a hand-written backward */
static void cv_fwd(tj_graph *g, const tj_v *in, tj_v *out, tj_v *res, void *u) {
    (void)g; (void)u;
    out[0] = tj_tanh(in[0]);
    res[0] = out[0];
}
static void cv_bwd(tj_graph *g, const tj_v *res, const tj_v *ct, tj_v *gin, void *u) {
    (void)g; (void)u;
    gin[0] = tj_mul(ct[0], tj_adds(tj_neg(tj_mul(res[0], res[0])), 1.0));
}
static tj_v b_custom_vjp(tj_graph *g, const tj_v *x, const hx_cfg *c) {
    tj_v y = NULL;
    (void)g; (void)c;
    tj_custom_vjp(cv_fwd, cv_bwd, NULL, 1, x, 1, &y, 1);
    return y;
}

/* ---- explicit collectives: x "p=8 q=4", a shard_map over mesh axis "data"
   of D devices; the reference writes the same function with plain ops ---- */
static int coll_id(const hx_row *r);
static void coll_body(tj_graph *g, const tj_v *in, tj_v *out, void *u) {
    const hx_cfg *c = (const hx_cfg *)u;
    tj_v t = tj_tanh(in[0]);
    int pairs[2 * 8], r;
    for (r = 0; r < c->D; r++) {
        pairs[2 * r] = r;
        pairs[2 * r + 1] = (r + 1) % c->D;
    }
    switch (coll_id(c->r)) {
    case 0: out[0] = tj_psum(t, "data"); break;
    case 1: out[0] = tj_pmax(t, "data"); break;
    case 2: out[0] = tj_all_gather(t, "data", "p"); break;
    case 3: out[0] = tj_psum_scatter(t, "data", "p"); break;
    case 4: out[0] = tj_all_to_all(t, "data", "q", "p"); break;
    case 5: out[0] = tj_ppermute(t, "data", c->D, pairs); break;
    case 6: out[0] = tj_mul(tj_pvary(t, "data"), tj_cast(tj_adds(tj_axis_index(g, "data"), 1), c->dt)); break;
    case 7: out[0] = tj_mul(t, tj_cast(tj_adds(tj_axis_index(g, "data"), 1), c->dt)); break;
    }
}
static const char *coll_in[8] = {"p:data", "p:data", "p:data", "q:data", "p:data", "p:data", "", "p:data"};
static const char *coll_out[8] = {"", "", "p:data", "p:data", "q:data", "p:data", "p:data", "p:data"};
static tj_v coll_ref(tj_graph *g, tj_v x, const hx_cfg *c) {
    tj_v t = tj_tanh(x), r = NULL;
    int D = c->D;
    char dd[64], bsh[64];
    snprintf(dd, sizeof dd, "dd=%d p=0", D);
    snprintf(bsh, sizeof bsh, "dd=%d p=8 q=4", D);
    switch (coll_id(c->r)) {
    case 0: return tj_sum(tj_split(t, "p", dd), "dd");
    case 1: return tj_max(tj_split(t, "p", dd), "dd");
    case 2: return tj_rename(tj_merge(tj_broadcast(t, bsh), "dd p", "pp"), "pp", "p");
    case 3: snprintf(dd, sizeof dd, "dd=%d q=0", D); return tj_sum(tj_split(t, "q", dd), "dd");
    case 4: return t;
    case 5: {
        tj_v two[2];
        int64_t b = 8 / D;
        if (D == 1) return t;
        two[0] = tj_slice(t, "p", (D - 1) * b, 8);
        two[1] = tj_slice(t, "p", 0, (D - 1) * b);
        return tj_concat(2, two, "p");
    }
    case 6: {
        char da[32];
        snprintf(da, sizeof da, "dd=%d", D);
        r = tj_mul(tj_broadcast(t, bsh), tj_adds(tj_arange(g, c->dt, da, "dd"), 1.0));
        return tj_rename(tj_merge(r, "dd p", "pp"), "pp", "p");
    }
    case 7: {
        char da[32];
        snprintf(da, sizeof da, "dd=%d", D);
        r = tj_mul(tj_split(t, "p", dd), tj_adds(tj_arange(g, c->dt, da, "dd"), 1.0));
        return tj_rename(tj_merge(r, "dd p", "pp"), "pp", "p");
    }
    }
    return NULL;
}
static tj_v b_coll(tj_graph *g, const tj_v *x, const hx_cfg *c) {
    const char *is[1], *os[1];
    tj_v y = NULL;
    int id = coll_id(c->r);
    if (c->ref) return coll_ref(g, X0, c);
    is[0] = coll_in[id];
    os[0] = coll_out[id];
    tj_shard_map(coll_body, (void *)c, 1, x, is, 1, &y, os, c->check);
    return y;
}
/* the same collective called outside shard_map: an error by design */
static tj_v coll_raw(tj_graph *g, tj_v x, int id) {
    static const int pairs[2] = {0, 1};
    switch (id) {
    case 0: return tj_psum(x, "data");
    case 1: return tj_pmax(x, "data");
    case 2: return tj_all_gather(x, "data", "p");
    case 3: return tj_psum_scatter(x, "data", "p");
    case 4: return tj_all_to_all(x, "data", "q", "p");
    case 5: return tj_ppermute(x, "data", 1, pairs);
    case 6: return tj_pvary(x, "data");
    default: return tj_axis_index(g, "data");
    }
}

#define A "p=4 q=8"
#define AB "q=8 r=4"
#define PQ "p q"
/* unary (x0 "p=4 q=8"), binary (x0 "p=4 q=8", x1 "q=8 r=4"), collectives (x0 "p=8 q=4") */
#define UN(nm, ops_, sm, ...) {.name = #nm, .ops = ops_, .build = b_##nm, .nin = 1, .shape = {A}, .kind = "f", .diff = 1, .twice = 1, .smap = sm, __VA_ARGS__}
#define BIN(nm, ops_, ...) {.name = #nm, .ops = ops_, .build = b_##nm, .nin = 2, .shape = {A, AB}, .kind = "ff", .diff = 3, .twice = 1, .smap = "p q r", __VA_ARGS__}
#define COLL(nm, ops_) {.name = #nm, .ops = ops_, .via = "tj_shard_map with the explicit collective", .build = b_coll, .nin = 1, .shape = {"p=8 q=4"}, .kind = "f", .diff = 1, .twice = 1, .coll = 1}
#define ROW(nm, ops_, bld, n, sh0, sh1, kd, df, sm, ...) {.name = nm, .ops = ops_, .build = bld, .nin = n, .shape = {sh0, sh1}, .kind = kd, .diff = df, .twice = 1, .smap = sm, __VA_ARGS__}
static const hx_row rows[] = {
#define HX_UROW(op, nm, fwd, kind, deriv, lo_, hi_) HX_UROW_##kind(nm, lo_, hi_)
#define HX_UROW_PUB(nm, lo_, hi_) UN(nm, #nm, PQ, .lo = lo_, .hi = hi_),
#define HX_UROW_OWN(nm, lo_, hi_)
#define HX_UROW_GRAD(nm, lo_, hi_)
    TJ__UNARY_OPS(HX_UROW)
    UN(pows3, "pows", PQ),
    UN(pows15, "pows", PQ, .lo = 0.5, .hi = 2),
    UN(cast, "cast", PQ, .fd_h = 1e-2, .fd_tol = 1e-4),
    BIN(add, "add"),
    BIN(sub, "sub"),
    BIN(mul, "mul"),
    BIN(div, "div", .lo1 = 0.5, .hi1 = 2),
    BIN(max2, "max"),
    BIN(min2, "min"),
    BIN(lt, "lt"),
    BIN(le, "le"),
    BIN(gt, "gt"),
    BIN(ge, "ge"),
    BIN(eq, "eq"),
    BIN(ne, "ne"),
    BIN(select, "select"),
    UN(fill, "fill", ""),
    UN(arange, "arange", ""),
    UN(uniform, "uniform", ""),
    UN(normal, "normal", ""),
    UN(dropout, "", "", .via = "tj_dropout: uniform, compare, select"),
    UN(sum_p, "sum psum", "q", .via = "psum: inserted by a sum over a sharded axis"),
    UN(sum_pq, "sum", ""),
    UN(mean_q, "sum", "p", .via = "tj_mean: a sum and a scale"),
#define HX_RROW(op, nm, name, ...) UN(red_##nm##_q, name, "p"), UN(red_##nm##_p, name, "q"),
    TJ__REDUCE_OPS(HX_RROW)
#undef HX_RROW
    ROW("dot", "dot", b_dot, 2, "p=4 k=8", "k=8 q=4", "ff", 3, "p q"),
    ROW("dot_batch", "dot", b_dot_batch, 2, "p=4 k=8", "p=4 k=8 r=4", "ff", 3, "p r"),
    ROW("dot_fsdp", "all_gather_dot dot_scatter", b_dot_fsdp, 2, "p=4 k=8", "k=8 q=4", "ff", 3, "p q",
        .via = "a dot of an all_gather, a reduce_scatter of a dot: f32 on simulated devices (the collective matmul)", .smap_err = "not inside tj_shard_map",
        .cpu_only = 1),
    UN(transpose, "relayout", PQ),
    UN(broadcast, "relayout", PQ),
    UN(rename, "reshape", "p"),
    UN(split, "reshape", "p"),
    UN(merge, "reshape", ""),
    UN(slice, "slice", "p"),
    ROW("concat", "concat", b_concat, 2, A, A, "ff", 3, "p"),
    UN(pad, "pad", "p"),
    ROW("take", "take scatter_add", b_take, 2, "v=8 e=4", "r=4 s=2", "fi", 1, "e r s", .ihi = 8, .via = "scatter_add: tj_take's VJP"),
    ROW("take1", "take scatter_add", b_take, 2, "v=8 e=4", "s=4", "fi", 1, "e s", .ihi = 8, .via = "scatter_add: tj_take's VJP"),
    ROW("one_hot", "one_hot", b_one_hot, 2, "s=4", "s=4 v=8", "if", 2, "s", .ihi = 8),
    UN(argmax, "argmax argmax_part", "p", .via = "argmax_part: tj_argmax over a split axis"),
    UN(argmin, "argmin argmin_part", "q", .via = "argmin_part: tj_argmin over a split axis"),
    UN(clip, "", PQ, .via = "tj_clip: max and min with constants"),
    ROW("stack", "", b_stack, 2, A, A, "ff", 3, PQ, .via = "tj_stack: reshape and concat"),
    ROW("causal_mask", "causal_mask", b_causal, 1, "b=4 qp=4 kp=4", NULL, "f", 1, "b"),
    {.name = "attention", .ops = "attention attention_grad out", .via = "attention_grad: tj_attention's VJP", .build = b_attention, .nin = 3,
     .shape = {"b=2 h=2 qp=5 d=4", "kp=3 h=2 b=2 d=4", "b=2 h=2 kp=3 d=4"}, .kind = "fff", .diff = 7, .twice = 1, .smap = "b h", .lo = -2, .hi = 2},
    UN(softmax, "softmax softmax_grad", "p", .via = "softmax_grad: tj_softmax's VJP"),
    UN(log_softmax, "log_softmax", "p"),
    UN(layer_norm, "layer_norm layer_norm_grad copy", "p", .via = "layer_norm_grad: tj_layer_norm's VJP; copy: the VJP of a row gradient"),
    ROW("cross_entropy", "cross_entropy cross_entropy_grad cross_entropy_part cross_entropy_part_grad", b_cross_entropy, 2, "p=4 v=8", "p=4", "fi", 1, "", .ihi = 8,
        .via = "cross_entropy_grad: tj_cross_entropy's VJP; cross_entropy_part(_grad): the vocab-parallel form, class axis split (v sharded)"),
    UN(stop_gradient, "stop_gradient", PQ, .nofd = 1),
    UN(name, "name", PQ),
    UN(param, "param copy", PQ, .via = "param: traced inputs, scan carries/xs/captures; copy: tj_jit returning an input"),
    UN(offload, "offload fetch", PQ, .via = "tj_save_and_offload_only_these_names (contexts ckpt_offload, scan_xs)"),
    UN(scan, "scan out", PQ, .via = "tj_scan (out: its outputs); also tj_checkpoint, tj_shard_map"),
    UN(checkpoint, "scan out", PQ, .via = "tj_checkpoint: a scan of length one"),
    UN(custom, "custom", PQ, .via = "tj_register_op + tj_custom"),
    UN(custom_vjp, "custom_vjp", PQ, .via = "tj_custom_vjp"),
    UN(reshard, "shard_slice all_to_all all_gather reduce_scatter", "", .via = "tj_shard_by_rules (sharding rules insert them; their VJPs)",
       .smap_err = "not inside tj_shard_map"),
    COLL(psum, "psum"),
    COLL(pmax, "pmax"),
    COLL(all_gather, "all_gather"),
    COLL(psum_scatter, "reduce_scatter"),
    COLL(all_to_all, "all_to_all"),
    COLL(ppermute, "ppermute"),
    COLL(pvary, "pvary axis_index"),
    COLL(axis_index, "axis_index"),
};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))
static int coll_id(const hx_row *r) {
    static const char *names[8] = {"psum", "pmax", "all_gather", "psum_scatter", "all_to_all", "ppermute", "pvary", "axis_index"};
    int i;
    for (i = 0; i < 8; i++)
        if (!strcmp(r->name, names[i])) return i;
    return -1;
}

/* -------------------------------------------------------------- meshes --- */
typedef struct {
    int ndev;
    const char *mesh;
    int D;
} hx_mesh;
static const hx_mesh meshes[4] = {{1, "data=1", 1}, {2, "data=2", 2}, {4, "data=2 model=2", 2}, {8, "data=4 model=2", 4}};
#define NMESH 4

static int quick, verbose, nfail_printed;
static int *seen; /* by op: it appeared in a compiled program (tjt_nops() of them) */
/* failures by row, context and kind: 0 first order (y, loss, gradients,
   errors), 1 second order (grad of grad), 2 remat policy (offload, lint),
   3 memory rules */
#define NKIND 4
static int fails[NROWS][NCTX][NKIND];
static int runs[NROWS][NCTX];
static char first_fail[NROWS][NCTX][NKIND][240];

static void hx_register(tj_ctx *ctx) {
    tj_op_def d;
    memset(&d, 0, sizeof d);
    d.name = "hx_sq";
    d.nout = 1;
    d.cpu = sq_cpu;
    d.vjp = sq_vjp;
    d.replication = tj_rep_same;
    tj_register_op(ctx, &d);
}
static tj_ctx *hx_ctx(int ndev, const char *mesh) {
    tj_ctx *ctx = tj_ctx_new();
    tj_set_threads(ctx, 1);
    tj_set_devices(ctx, ndev);
    if (mesh) tj_set_mesh(ctx, mesh);
    hx_register(ctx);
    return ctx;
}

/* input data: the same values on every mesh */
static double *host_input(const hx_row *r, int ri, int i, int64_t *n) {
    tj_ctx *tmp = tj_ctx_new();
    double *v;
    int64_t k;
    uint64_t s = (uint64_t)(ri * 31 + i + 7) * 6364136223846793005ull + 1442695040888963407ull;
    double lo = r->lo < r->hi ? r->lo : -1, hi = r->lo < r->hi ? r->hi : 1;
    if (i == 1 && r->lo1 < r->hi1) lo = r->lo1, hi = r->hi1;
    *n = tjt_shape_numel(tmp, r->shape[i]);
    tj_ctx_free(tmp);
    v = (double *)malloc(sizeof(double) * (size_t)(*n + 1));
    for (k = 0; k < *n; k++) {
        double u;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        u = (double)(s >> 11) / 9007199254740992.0;
        v[k] = r->kind[i] == 'i' ? floor(u * r->ihi) : lo + (hi - lo) * u;
    }
    return v;
}
static tj_tree *make_inputs(tj_ctx *ctx, const hx_row *r, int ri, tj_dtype dt) {
    tj_tree *in = tj_tree_new(ctx);
    int i;
    for (i = 0; i < r->nin; i++) {
        int64_t n, k;
        double *v = host_input(r, ri, i, &n);
        tj_dtype d = r->kind[i] == 'i' ? TJ_I32 : dt;
        void *buf = malloc(8 * (size_t)(n + 1));
        char nm[16];
        for (k = 0; k < n; k++) tjt_st(buf, d, k, v[k]);
        snprintf(nm, sizeof nm, "x%d", i);
        tj_tree_set_array(in, nm, tj_array_new(ctx, d, r->shape[i], buf));
        free(buf);
        free(v);
    }
    return in;
}

/* ---- program outputs, read back ---- */
typedef struct {
    int n;
    char name[12][8];
    double *v[12];
    int64_t len[12];
} hx_outs;
static void outs_read(hx_outs *o, tj_tree *out) {
    int i;
    memset(o, 0, sizeof *o);
    for (i = 0; i < tj_tree_size(out) && o->n < 12; i++) {
        tj_array *a = tj_tree_array_at(out, i);
        if (!a) continue;
        snprintf(o->name[o->n], 8, "%s", tj_tree_name(out, i));
        o->len[o->n] = tj_array_numel(a);
        o->v[o->n] = (double *)malloc(sizeof(double) * (size_t)(o->len[o->n] + 1));
        tj_array_read(a, TJ_F64, o->v[o->n]);
        o->n++;
    }
}
static void outs_free(hx_outs *o) {
    int i;
    for (i = 0; i < o->n; i++) free(o->v[i]);
    memset(o, 0, sizeof *o);
}
static const double *outs_get(const hx_outs *o, const char *nm, int64_t *len) {
    int i;
    for (i = 0; i < o->n; i++)
        if (!strcmp(o->name[i], nm)) {
            *len = o->len[i];
            return o->v[i];
        }
    *len = 0;
    return NULL;
}

static char (*seen_where)[128]; /* by op: the first program it appeared in */
static char cur_where[128];
static void walk_seen(tj_graph *g) {
    int i;
    if (!g) return;
    for (i = 0; i < tjt_graph_size(g); i++) {
        int op = tjt_graph_op(g, i);
        if (!seen[op]) snprintf(seen_where[op], sizeof seen_where[0], "%s", cur_where);
        seen[op] = 1;
        if (tjt_graph_sub(g, i)) walk_seen(tjt_graph_sub(g, i));
    }
}

/* what a compiled program says about its remat policy */
typedef struct {
    int rerun;         /* in: run the program twice and compare the bits */
    int same;          /* out: the two runs gave the same bits */
    int64_t host_temp; /* host bytes (offload) */
    int64_t temp;      /* device temp bytes per device */
    int nlint;         /* policy lint warnings */
    char lint[512];
} hx_polinfo;
/* jit + run; 0 and the error in err on failure */
static int run_prog_pi(tj_ctx *ctx, hx_cfg *c, tj_tree *in, hx_outs *o, char *err, size_t nerr, hx_polinfo *pi) {
    tj_prog *p = tj_jit(ctx, "harness", prog_fn, c, in, NULL);
    tj_tree *out = tj_tree_new(ctx);
    int ok = 0;
    int rerun = pi && pi->rerun;
    memset(o, 0, sizeof *o);
    if (pi) {
        memset(pi, 0, sizeof *pi);
        pi->rerun = rerun;
        pi->same = 1;
    }
    if (p && pi) {
        pi->host_temp = tj_prog_memory(p).host_temp_bytes;
        pi->temp = tj_prog_memory(p).temp_bytes;
        char *q;
        pi->nlint = tj_prog_lint(p, pi->lint, sizeof pi->lint);
        for (q = pi->lint; *q; q++)
            if (*q == '\n') *q = q[1] ? ';' : 0;
    }
    if (p && tj_run(p, in, out) == TJ_OK) {
        outs_read(o, out);
        walk_seen(tjt_prog_graph(p));
        ok = 1;
        if (rerun) { /* deterministic: the same program on the same inputs gives the same bits */
            tj_tree *out2 = tj_tree_new(ctx);
            hx_outs o2;
            int i;
            if (tj_run(p, in, out2) == TJ_OK) {
                outs_read(&o2, out2);
                for (i = 0; i < o->n; i++)
                    if (i >= o2.n || o2.len[i] != o->len[i] || memcmp(o2.v[i], o->v[i], sizeof(double) * (size_t)o->len[i])) pi->same = 0;
                outs_free(&o2);
            } else pi->same = 0;
            tj_tree_free(out2);
        }
    } else snprintf(err, nerr, "%s", tj_status_of(ctx) ? tj_error(ctx) : "failed with no message");
    tj_clear_error(ctx);
    tj_prog_free(p);
    tj_tree_free(out);
    return ok;
}
static int run_prog(tj_ctx *ctx, hx_cfg *c, tj_tree *in, hx_outs *o, char *err, size_t nerr) { return run_prog_pi(ctx, c, in, o, err, nerr, NULL); }

/* every failure is counted and printed ("FAIL [op ...] row [context]
   mesh, sharding: what differed"; HX_BRIEF=1: only the first 3 of each
   row, context and kind), and summarised at the end */
static int brief;
/* Known bugs, found by this harness and not fixed yet (see the issue notes),
   are listed in known_bug by row, context, kind of check and message:
   printed as KNOWN and counted apart; every other failure fails the run.
   None at present (the last: attention's recomputing policies needed more
   than everything_saveable because they recomputed the region's own
   output; before it, issue #15's memory rules in grads of grads, a check
   without a premise: see memory_rules). */
static int nknown;
static int known_bug(int ri, int cx, int second, const char *msg) {
    (void)ri, (void)cx, (void)second, (void)msg;
    return 0;
}
static void record_fail2(int ri, int cx, int second, const char *fmt, ...) {
    va_list ap;
    char msg[1024];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (known_bug(ri, cx, second, msg)) {
        if (!fails[ri][cx][second]) snprintf(first_fail[ri][cx][second], sizeof first_fail[ri][cx][second], "%.239s", msg);
        if (!fails[ri][cx][second]++) fprintf(stderr, "KNOWN [op %s] %s\n", *rows[ri].ops ? rows[ri].ops : "(composite)", msg);
        nknown++;
        return;
    }
    tjt_fail++;
    if (!fails[ri][cx][second]) snprintf(first_fail[ri][cx][second], sizeof first_fail[ri][cx][second], "%.239s", msg);
    if (!brief || fails[ri][cx][second] < 3) fprintf(stderr, "FAIL [op %s] %s\n", *rows[ri].ops ? rows[ri].ops : "(composite)", msg);
    fails[ri][cx][second]++;
    nfail_printed++;
}
#define record_fail(ri, cx, ...) record_fail2(ri, cx, 0, __VA_ARGS__)

/* compare every reference output with the run's ("y0", "y1" of the scan_ys
   reference are the blocks of the stacked "y") */
static void compare(int ri, int cx, const char *where, const hx_outs *got, const hx_outs *ref, double tol, int nogg) {
    int i;
    for (i = 0; i < ref->n; i++) {
        if (nogg && ref->name[i][0] == 'g' && ref->name[i][1] == 'g') continue; /* not computed (reported already) */
        const double *gv, *rv = ref->v[i];
        int64_t glen, rlen = ref->len[i], j, off = 0, worst_j = 0;
        double scale = rlen == 1 ? 1.0 : 1e-2, worst = 0; /* floors: a loss near 0 by cancellation is not compared with its own size */
        const char *nm = ref->name[i];
        char gname[8];
        snprintf(gname, sizeof gname, "%s", nm);
        if (nm[0] == 'y' && nm[1] >= '0' && nm[1] <= '9') {
            snprintf(gname, sizeof gname, "y");
            off = (nm[1] - '0') * rlen;
        }
        gv = outs_get(got, gname, &glen);
        if (!gv || glen != (strcmp(gname, nm) ? HX_L * rlen : rlen)) {
            record_fail(ri, cx, "%s [%s] %s: output '%s' %s", rows[ri].name, ctx_names[cx], where, nm, gv ? "has the wrong size" : "is missing");
            continue;
        }
        for (j = 0; j < rlen; j++)
            if (fabs(rv[j]) > scale) scale = fabs(rv[j]);
        for (j = 0; j < rlen; j++) {
            double d = fabs(gv[off + j] - rv[j]) / scale;
            if (!(d <= worst)) {
                worst = d;
                worst_j = j;
            }
        }
        if (worst <= tol) tjt_pass++;
        else
            record_fail2(ri, cx, nm[0] == 'g' && nm[1] == 'g', "%s [%s] %s: '%s' differs by %.3g (relative to max %.3g): [%lld] = %.9g, want %.9g", rows[ri].name, ctx_names[cx], where, nm,
                        worst, scale, (long long)worst_j, gv[off + worst_j], rv[worst_j]);
    }
}

/* ---- the reference: unrolled, top level, one device, no mesh, f32 ---- */
typedef struct {
    int done, ok;
    hx_outs o;
} hx_ref;
static hx_ref refs[NROWS][NREF][3]; /* by D = 1, 2, 4 */
static int didx(int D) { return D == 1 ? 0 : D == 2 ? 1 : 2; }
static tj_ctx *ref_ctx;
static const hx_outs *get_ref(int ri, int rk, int D) {
    hx_ref *R = &refs[ri][rk][didx(D)];
    if (!R->done) {
        hx_cfg c;
        tj_tree *in;
        char err[1024];
        static const int ctx_of[NREF] = {C_TOP, C_XS, C_CAP, C_YS, C_NEST};
        memset(&c, 0, sizeof c);
        c.r = &rows[ri];
        c.cx = ctx_of[rk];
        c.ref = 1;
        c.D = D;
        c.check = 1;
        c.dt = TJ_F32;
        in = make_inputs(ref_ctx, &rows[ri], ri, TJ_F32);
        snprintf(cur_where, sizeof cur_where, "%s [reference for %s] D=%d", rows[ri].name, ctx_names[c.cx], D);
        R->done = 1;
        R->ok = run_prog(ref_ctx, &c, in, &R->o, err, sizeof err);
        if (!R->ok) record_fail(ri, c.cx, "%s: the one-device reference (%s, D=%d) failed: %s", rows[ri].name, ctx_names[c.cx], D, err);
        tj_tree_free(in);
    }
    return R->ok ? &R->o : NULL;
}

/* ---- placements: the inputs sharded along each of their axes ---- */
typedef struct {
    char spec[128];
    int put; /* 1: device_put outside the program; 0: shard_by_rules inside */
} hx_place;
static int row_axes(const hx_row *r, char names[][16], int *sizes) {
    int n = 0, i;
    for (i = 0; i < r->nin; i++) {
        const char *s = r->shape[i];
        while (*s) {
            char nm[16];
            int k = 0, j, found = 0;
            long sz;
            while (*s == ' ') s++;
            if (!*s) break;
            while (*s && *s != '=' && k < 15) nm[k++] = *s++;
            nm[k] = 0;
            sz = strtol(s + 1, (char **)&s, 10);
            for (j = 0; j < n; j++) found |= !strcmp(names[j], nm);
            if (!found && n < 8) {
                snprintf(names[n], 16, "%s", nm);
                sizes[n++] = (int)sz;
            }
        }
    }
    return n;
}
static int placements(const hx_row *r, int mi, hx_place *pl) {
    char ax[8][16];
    int sz[8], na = row_axes(r, ax, sz), n = 0, i, j;
#define ADD(...) do { snprintf(pl[n].spec, sizeof pl[n].spec, __VA_ARGS__); pl[n].put = !(n & 1); n++; } while (0)
    switch (mi) {
    case 0: ADD("%s", ""); break;
    case 1:
        for (i = 0; i < na; i++) if (sz[i] % 2 == 0) ADD("%.15s:data", ax[i]);
        break;
    case 2:
        for (i = 0; i < na; i++)
            for (j = 0; j < na; j++)
                if (i != j && sz[i] % 2 == 0 && sz[j] % 2 == 0 && n < 6) ADD("%.15s:data %.15s:model", ax[i], ax[j]);
        for (i = 0; i < na; i++) if (sz[i] % 4 == 0) ADD("%.15s:data+model", ax[i]);
        break;
    case 3:
        for (i = 0; i < na; i++) if (sz[i] % 4 == 0) ADD("%.15s:data", ax[i]);
        for (i = 0; i < na; i++) if (sz[i] % 8 == 0) ADD("%.15s:data+model", ax[i]);
        for (i = 0; i + 1 < na; i++) if (sz[i] % 4 == 0 && sz[i + 1] % 2 == 0) { ADD("%.15s:data %.15s:model", ax[i], ax[i + 1]); break; }
        ADD("%s", "");
        break;
    }
#undef ADD
    return n;
}
/* shard_map specs: the placement, restricted to the axes the op is
   independent along (and to each input's own axes) */
static int has_axis(const char *shape, const char *ax) {
    size_t n = strlen(ax);
    const char *s = shape;
    while ((s = strstr(s, ax)) != NULL) {
        if ((s == shape || s[-1] == ' ') && (s[n] == '=' || s[n] == ' ' || s[n] == 0 || s[n] == ':')) return 1;
        s += n;
    }
    return 0;
}
static void smap_specs(hx_cfg *c, const char *place) {
    const hx_row *r = c->r;
    const char *s = place;
    int i;
    for (i = 0; i < HX_MAXIN; i++) c->is[i][0] = 0;
    c->os[0] = 0;
    while (*s) {
        char tok[64], ax[32];
        int k = 0;
        while (*s == ' ') s++;
        if (!*s) break;
        while (*s && *s != ' ' && k < 63) tok[k++] = *s++;
        tok[k] = 0;
        snprintf(ax, sizeof ax, "%.*s", (int)(strchr(tok, ':') ? strchr(tok, ':') - tok : 0), tok);
        if (!r->smap || !has_axis(r->smap, ax)) continue;
        for (i = 0; i < r->nin; i++)
            if (has_axis(r->shape[i], ax)) {
                size_t m = strlen(c->is[i]);
                snprintf(c->is[i] + m, sizeof c->is[i] - m, "%s%s", m ? " " : "", tok);
            }
        {
            size_t m = strlen(c->os);
            snprintf(c->os + m, sizeof c->os - m, "%s%s", m ? " " : "", tok);
        }
    }
}

/* ---- one (row, context, mesh, placement) ---- */
/* device temp bytes of each program of the current row, by context, mesh
   and placement (-1: none), for the memory rules of issue #15 */
static int64_t temps[NCTX][NMESH][32];
static void run_case(tj_ctx *ctx, int ri, int cx, int mi, const hx_place *pl, int rerun, int pl_index) {
    const hx_row *r = &rows[ri];
    hx_cfg c;
    tj_tree *in;
    hx_outs o;
    char err[1024], where[512];
    const hx_outs *ref;
    hx_polinfo pi;
    int ok, nogg = 0, fallback = 0, expect_err = (cx == C_SM_ON || cx == C_SM_OFF) && r->smap_err;
    memset(&c, 0, sizeof c);
    c.r = r;
    c.cx = cx;
    c.D = meshes[mi].D;
    c.check = cx != C_SM_OFF;
    c.dt = TJ_F32;
    c.rules = pl->put ? NULL : pl->spec;
    c.nogg = nogg = getenv("HX_NOGG") != NULL;
    if (cx == C_SM_ON || cx == C_SM_OFF) smap_specs(&c, pl->spec);
    snprintf(where, sizeof where, "mesh [%s] sharding \"%.127s\" (%s)", meshes[mi].mesh, pl->spec, pl->put ? "device_put" : "shard_by_rules in the program");
    snprintf(cur_where, sizeof cur_where, "%s [%s] mesh [%s] \"%.40s\"", r->name, ctx_names[cx], meshes[mi].mesh, pl->spec);
    ref = expect_err ? NULL : get_ref(ri, ref_kind(cx), r->coll ? c.D : 1);
    if (!expect_err && !ref) return;
    in = make_inputs(ctx, r, ri, TJ_F32);
    if (pl->put && *pl->spec && tj_filter_shard(in, pl->spec) != TJ_OK) {
        record_fail(ri, cx, "%s [%s] %s: placing the inputs failed: %s", r->name, ctx_names[cx], where, tj_error(ctx));
        tj_clear_error(ctx);
        tj_tree_free(in);
        return;
    }
    runs[ri][cx]++;
    pi.rerun = rerun;
    pi.temp = -1;
    snprintf(cur_where, sizeof cur_where, "%s [%s] mesh [%s] \"%.40s\"", r->name, ctx_names[cx], meshes[mi].mesh, pl->spec);
    ok = run_prog_pi(ctx, &c, in, &o, err, sizeof err, &pi);
    if (!ok && !expect_err && r->twice) { /* does it work without the grad of grad? */
        hx_cfg c1 = c;
        char err1[1024];
        c1.nogg = 1;
        pi.rerun = 0;
        if (run_prog_pi(ctx, &c1, in, &o, err1, sizeof err1, &pi)) {
            record_fail2(ri, cx, 1, "%s [%s] %s: the grad of grad could not build/run (first order is fine): %s", r->name, ctx_names[cx], where, err);
            ok = nogg = fallback = 1;
        }
    }
    if (ok && !fallback && pl_index >= 0) { /* the memory rules compare first-order programs (see memory_rules) */
        if (c.nogg || !r->twice) temps[cx][mi][pl_index] = pi.temp;
        else if (cx == C_TOP || (cx >= C_CK_ALL && cx <= C_CK_OFFLOAD)) {
            hx_cfg c1 = c;
            tj_prog *p1;
            c1.nogg = 1;
            p1 = tj_jit(ctx, "harness first order", prog_fn, &c1, in, NULL);
            temps[cx][mi][pl_index] = p1 ? tj_prog_memory(p1).temp_bytes : -1;
            if (!p1) tj_clear_error(ctx);
            tj_prog_free(p1);
        }
    }
    if (ok && pi.rerun) {
        if (pi.same) tjt_pass++;
        else record_fail(ri, cx, "%s [%s] %s: two runs of the same program give different bits", r->name, ctx_names[cx], where);
    }
    if (ok && cx == C_XS) { /* the named carry is offloaded */
        if (pi.host_temp > 0) tjt_pass++;
        else record_fail2(ri, cx, 2, "%s [%s] %s: offloading the carry 'c' uses no host memory", r->name, ctx_names[cx], where);
    }
    if (ok && (cx == C_CK_NAMES || cx == C_CK_OFFLOAD)) { /* the policy names 'y', which the region has, as a residual */
        if (pi.nlint) record_fail2(ri, cx, 2, "%s [%s] %s: the policy lint warns although the region names 'y'%s: %.200s", r->name, ctx_names[cx], where,
                                   c.nogg || !r->twice ? "" : " (program with grad of grad)", pi.lint);
        else tjt_pass++;
        if (cx == C_CK_OFFLOAD) {
            if (pi.host_temp > 0) tjt_pass++;
            else record_fail2(ri, cx, 2, "%s [%s] %s: offloading 'y' uses no host memory", r->name, ctx_names[cx], where);
        }
    }
    if (expect_err) { /* an error by design: it must say so clearly */
        if (!ok && strstr(err, r->smap_err)) tjt_pass++;
        else record_fail(ri, cx, "%s [%s] %s: want the error \"%s\", got %s", r->name, ctx_names[cx], where, r->smap_err, ok ? "a result" : err);
    } else if (!ok)
        record_fail(ri, cx, "%s [%s] %s: could not build/run: %s", r->name, ctx_names[cx], where, err);
    else
        compare(ri, cx, where, &o, ref, 1e-5, nogg);
    if (verbose) printf("  %-14s %-12s %s: %s\n", r->name, ctx_names[cx], where, ok ? "ran" : err);
    outs_free(&o);
    tj_tree_free(in);
}

/* ---- finite differences of the reference (f64), first and second order ---- */
static void fd_check(int ri) {
    const hx_row *r = &rows[ri];
    tj_ctx *ctx = r->coll ? hx_ctx(2, "data=2") : hx_ctx(1, NULL);
    hx_cfg c;
    tj_tree *in = make_inputs(ctx, r, ri, TJ_F64);
    hx_outs full;
    char err[1024];
    tj_prog *pl[3] = {NULL, NULL, NULL};
    int i, mode, nw = 0;
    double tol = r->fd_tol > 0 ? r->fd_tol : 1e-6;
    memset(&c, 0, sizeof c);
    c.r = r;
    c.cx = C_TOP;
    c.D = r->coll ? 2 : 1;
    c.check = 1;
    c.dt = TJ_F64;
    snprintf(cur_where, sizeof cur_where, "%s [finite differences]", r->name);
    if (!run_prog(ctx, &c, in, &full, err, sizeof err)) {
        record_fail(ri, C_TOP, "%s [finite differences]: the f64 program failed: %s", r->name, err);
        goto done;
    }
    for (mode = 1; mode <= 2; mode++) {
        hx_cfg cm = c;
        cm.mode = mode;
        if (mode == 2 && !r->twice) break;
        if (!(pl[mode] = tj_jit(ctx, "fd", prog_fn, &cm, in, NULL))) {
            record_fail(ri, C_TOP, "%s [finite differences]: mode %d does not compile: %s", r->name, mode, tj_error(ctx));
            tj_clear_error(ctx);
            goto done;
        }
    }
    for (i = 0; i < r->nin; i++) {
        char nm[16], gname[16];
        tj_array *a;
        int64_t n, k, step, glen;
        if (!(r->diff >> i & 1)) continue;
        snprintf(nm, sizeof nm, "x%d", i);
        a = tj_tree_array(in, nm);
        n = tj_array_numel(a);
        step = n > 24 ? n / 24 : 1;
        for (mode = 1; mode <= 2 && pl[mode]; mode++) {
            const double *an;
            double scale = 1e-6, worst = 0, wfd = 0, wan = 0;
            int64_t wk = 0;
            snprintf(gname, sizeof gname, "%s%d", mode == 1 ? "g" : "gg", nw);
            an = outs_get(&full, gname, &glen);
            if (!an || glen != n) {
                record_fail(ri, C_TOP, "%s [finite differences]: no output %s", r->name, gname);
                continue;
            }
            for (k = 0; k < n; k++) if (fabs(an[k]) > scale) scale = fabs(an[k]);
            for (k = 0; k < n; k += step) {
                double x0 = tjt_array_get(a, 0, k), h = (r->fd_h > 0 ? r->fd_h : 1e-6) * (fabs(x0) > 1 ? fabs(x0) : 1.0), lp, lm, fd, e;
                tjt__set_all(a, k, x0 + h);
                lp = tjt__run_loss(pl[mode], in);
                tjt__set_all(a, k, x0 - h);
                lm = tjt__run_loss(pl[mode], in);
                tjt__set_all(a, k, x0);
                fd = (lp - lm) / (2 * h);
                e = fabs(fd - an[k]) / scale;
                if (!(e <= worst)) {
                    worst = e;
                    wk = k;
                    wfd = fd;
                    wan = an[k];
                }
            }
            if (worst <= tol) tjt_pass++;
            else
                record_fail2(ri, C_TOP, mode == 2, "%s [finite differences%s] d/d x%d[%lld]: autodiff %.9g, finite difference %.9g (error %.3g of max %.3g)", r->name,
                            mode == 1 ? "" : ", grad of grad", i, (long long)wk, wan, wfd, worst, scale);
        }
        nw++;
    }
done:
    outs_free(&full);
    tj_prog_free(pl[1]);
    tj_prog_free(pl[2]);
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* f64 against f32 (the reference's kernels in both precisions) */
static void f64_check(int ri) {
    const hx_row *r = &rows[ri];
    tj_ctx *ctx = hx_ctx(1, NULL);
    hx_cfg c;
    tj_tree *in = make_inputs(ctx, r, ri, TJ_F64);
    hx_outs o;
    char err[1024];
    const hx_outs *ref = get_ref(ri, R_TOP, 1);
    if (r->coll) { /* the reference of a collective row at D = 1 */
        tj_tree_free(in);
        tj_ctx_free(ctx);
        return;
    }
    memset(&c, 0, sizeof c);
    c.r = r;
    c.cx = C_TOP;
    c.ref = 1;
    c.D = 1;
    c.check = 1;
    c.dt = TJ_F64;
    snprintf(cur_where, sizeof cur_where, "%s [f64 reference]", r->name);
    if (ref && run_prog(ctx, &c, in, &o, err, sizeof err)) {
        compare(ri, C_TOP, "f64 vs f32, one device", ref, &o, 2e-4, 0);
        outs_free(&o);
    } else if (ref)
        record_fail(ri, C_TOP, "%s [top] f64: could not build/run: %s", r->name, err);
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* errors by design: explicit collectives outside shard_map */
static int raw_id;
static void raw_fn(tj_graph *g, const tj_tree *in, tj_tree *out, void *u) {
    (void)u;
    tj_tree_set_v(out, "y", coll_raw(g, tj_tree_v(in, "x0"), raw_id));
}
static void raw_check(int ri) {
    tj_ctx *ctx = hx_ctx(2, "data=2");
    tj_tree *in = make_inputs(ctx, &rows[ri], ri, TJ_F32);
    tj_prog *p;
    raw_id = coll_id(&rows[ri]);
    p = tj_jit(ctx, "raw", raw_fn, NULL, in, NULL);
    if (!p && strstr(tj_error(ctx), "only inside tj_shard_map")) tjt_pass++;
    else
        record_fail(ri, C_TOP, "%s [outside shard_map]: want the error \"only inside tj_shard_map\", got %s", rows[ri].name,
                    p ? "a program" : tj_error(ctx));
    tj_prog_free(p);
    tj_tree_free(in);
    tj_ctx_free(ctx);
}

/* Issue #15's memory rules, per (mesh, sharding): a region with
   everything_saveable costs no more device temp than no region, and a
   policy that saves less never raises it. They are checked on the
   first-order program (loss and gradients): in a grad of grad the second
   backward pass also differentiates the recomputation a policy put into
   the first, and must keep that recomputation's own residuals, so there a
   policy does not "save less" and the rule has no premise. */
static void memory_rules(int ri) {
    static const int pol[4] = {C_CK_NONE, C_CK_DOTS, C_CK_NAMES, C_CK_OFFLOAD};
    int mi, j, k;
    for (mi = 0; mi < NMESH; mi++) {
        hx_place pl[32];
        int np = placements(&rows[ri], mi, pl);
        for (j = 0; j < np && j < 32; j++) {
            int64_t top = temps[C_TOP][mi][j], all = temps[C_CK_ALL][mi][j];
            char where[256];
            snprintf(where, sizeof where, "mesh [%s] sharding \"%.127s\"", meshes[mi].mesh, pl[j].spec);
            /* (not for an op that is itself a region with a policy: as in
               JAX, the enclosing everything_saveable judges the values
               inside it and keeps what its own nothing_saveable would
               recompute, so the enclosing region holds more than none) */
            if (top >= 0 && all >= 0 && strcmp(rows[ri].name, "checkpoint") != 0) {
                if (all <= top) tjt_pass++;
                else record_fail2(ri, C_CK_ALL, 3, "%s [ckpt_all] %s: memory: the region saving everything needs %lld B device temp, the same program without it %lld B",
                                  rows[ri].name, where, (long long)all, (long long)top);
            }
            for (k = 0; k < 4; k++) {
                int64_t t = temps[pol[k]][mi][j];
                if (all < 0 || t < 0) continue;
                if (t <= all) tjt_pass++;
                else record_fail2(ri, pol[k], 3, "%s [%s] %s: memory: this policy saves less but needs %lld B device temp, everything_saveable %lld B", rows[ri].name,
                                  ctx_names[pol[k]], where, (long long)t, (long long)all);
            }
        }
    }
}

/* every op of the table has a row */
static const struct {
    const char *name, *kind;
} hx_unary[] = {
#define HX_UNARY(op, nm, fwd, kind, deriv, lo, hi) {#nm, #kind},
    TJ__UNARY_OPS(HX_UNARY)
#undef HX_UNARY
};
static int row_claims(const hx_row *r, const char *op) {
    const char *s = r->ops;
    size_t n = strlen(op);
    while (s && *s) {
        while (*s == ' ') s++;
        if (!strncmp(s, op, n) && (s[n] == ' ' || s[n] == 0)) return 1;
        while (*s && *s != ' ') s++;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *only_row = argc > 1 && strcmp(argv[1], "all") ? argv[1] : NULL;
    const char *only_ctx = argc > 2 && strcmp(argv[2], "all") ? argv[2] : NULL;
    int only_mesh = argc > 3 ? atoi(argv[3]) : -1;
    int ri, cx, mi, op, k, filtered = only_row || only_ctx || only_mesh >= 0;
    int nprog = 0;
    tj_ctx *mctx[NMESH];
    struct timespec t0, t1;
    const char *q = getenv("TJ_TEST_QUICK");
    quick = q && *q && strcmp(q, "0");
    verbose = getenv("HX_VERBOSE") != NULL;
    brief = getenv("HX_BRIEF") != NULL;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    seen = (int *)calloc((size_t)tjt_nops(), sizeof *seen);
    seen_where = (char (*)[128])calloc((size_t)tjt_nops(), sizeof *seen_where);
    tjt_current = "op table";
    for (op = 0; op < tjt_nops(); op++) {
        int claimed = 0, u;
        const char *nm = tjt_opname(op);
        /* a GRAD row of TJ__UNARY_OPS (gelu_grad) is made by the VJP of the
           row above it: that row's test claims it (grad of grad reaches it) */
        for (u = 1; u < (int)(sizeof hx_unary / sizeof hx_unary[0]); u++)
            if (!strcmp(hx_unary[u].name, nm) && !strcmp(hx_unary[u].kind, "GRAD")) nm = hx_unary[u - 1].name;
        for (ri = 0; ri < NROWS; ri++) claimed |= row_claims(&rows[ri], nm);
        TJT_CHECK(claimed, "op '%s' of the op table has no row in the harness", tjt_opname(op));
    }

    ref_ctx = hx_ctx(1, NULL);
    for (mi = 0; mi < NMESH; mi++) mctx[mi] = hx_ctx(meshes[mi].ndev, meshes[mi].mesh);
    tjt_current = "harness";
    for (ri = 0; ri < NROWS; ri++) {
        if (only_row && strcmp(rows[ri].name, only_row)) continue;
        if (!only_ctx || !strcmp(only_ctx, "top")) {
            if (!rows[ri].nofd) fd_check(ri);
            f64_check(ri);
            if (rows[ri].coll) raw_check(ri);
        }
        for (cx = 0; cx < NCTX; cx++)
            for (mi = 0; mi < NMESH; mi++)
                for (k = 0; k < 32; k++) temps[cx][mi][k] = -1;
        for (cx = 0; cx < NCTX; cx++) {
            if (only_ctx && strcmp(ctx_names[cx], only_ctx)) continue;
            for (mi = 0; mi < NMESH; mi++) {
                hx_place pl[32];
                int np, j, j0 = 0;
                if (only_mesh >= 0 && mi != only_mesh) continue;
                if (quick && mi == 1) continue;
                np = placements(&rows[ri], mi, pl);
                /* quick: one sharding per row in every context, a different
                   one from row to row and mesh to mesh (so every kind over
                   the rows) */
                if (quick && mi >= 2 && np > 1) {
                    j0 = (ri + mi) % np;
                    np = j0 + 1;
                }
                for (j = j0; j < np; j++) {
                    run_case(mctx[mi], ri, cx, mi, &pl[j], mi == 3 && (j < 2 || quick), j); /* 8 devices: run twice, same bits */
                    nprog++;
                    if (cx == C_TOP && *pl[j].spec) { /* top level: both ways of placing the inputs */
                        hx_place other = pl[j];
                        other.put = !other.put;
                        run_case(mctx[mi], ri, cx, mi, &other, 0, -1);
                        nprog++;
                    }
                }
            }
        }
        memory_rules(ri);
    }

    if (!filtered) {
        tjt_current = "coverage";
        int backend = getenv("TJ_BACKEND") && strcmp(getenv("TJ_BACKEND"), "cpu");
        for (op = 0; op < tjt_nops(); op++) {
            const char *via = "";
            int cpu_only = 0;
            for (ri = 0; ri < NROWS; ri++)
                if (row_claims(&rows[ri], tjt_opname(op))) {
                    if (rows[ri].via && *rows[ri].via) via = rows[ri].via;
                    cpu_only |= rows[ri].cpu_only;
                }
            if (backend && cpu_only) TJT_CHECK(!seen[op], "op '%s' appeared in a program for a backend (its row says: %s)", tjt_opname(op), via);
            else TJT_CHECK(seen[op], "op '%s' never appeared in a compiled program (its row says: %s)", tjt_opname(op), via);
            if (verbose && seen[op]) printf("  op %-18s first seen in %s\n", tjt_opname(op), seen_where[op]);
        }
    }

    /* summary: failures by row and context */
    {
        int any = 0, o;
        for (ri = 0; ri < NROWS; ri++)
            for (cx = 0; cx < NCTX; cx++)
                for (o = 0; o < NKIND; o++) any |= fails[ri][cx][o] != 0;
        if (any) {
            fprintf(stderr, "\nfailures by row and context: first-order (y, loss, gradients, errors) + grad-of-grad + remat-policy + memory-rule checks / programs run\n%-14s", "");
            for (cx = 0; cx < NCTX; cx++) fprintf(stderr, " %12.12s", ctx_names[cx]);
            fprintf(stderr, "\n");
            for (ri = 0; ri < NROWS; ri++) {
                int rowany = 0;
                for (cx = 0; cx < NCTX; cx++)
                    for (o = 0; o < NKIND; o++) rowany |= fails[ri][cx][o] != 0;
                if (!rowany) continue;
                fprintf(stderr, "%-14s", rows[ri].name);
                for (cx = 0; cx < NCTX; cx++) {
                    char cell[32];
                    if (fails[ri][cx][0] || fails[ri][cx][1] || fails[ri][cx][2] || fails[ri][cx][3])
                        snprintf(cell, sizeof cell, "%d+%d+%d+%d/%d", fails[ri][cx][0], fails[ri][cx][1], fails[ri][cx][2], fails[ri][cx][3], runs[ri][cx]);
                    else snprintf(cell, sizeof cell, ".");
                    fprintf(stderr, " %12s", cell);
                }
                fprintf(stderr, "\n");
            }
            for (o = 0; o < NKIND; o++) {
                static const char *kn[NKIND] = {"first-order", "grad-of-grad", "remat-policy", "memory-rule"};
                fprintf(stderr, "\nfirst %s failure of each (row, context):\n", kn[o]);
                for (ri = 0; ri < NROWS; ri++)
                    for (cx = 0; cx < NCTX; cx++)
                        if (fails[ri][cx][o]) fprintf(stderr, "  %s%s\n", known_bug(ri, cx, o, first_fail[ri][cx][o]) ? "KNOWN " : "", first_fail[ri][cx][o]);
            }
        }
    }
    for (ri = 0; ri < NROWS; ri++)
        for (k = 0; k < NREF; k++)
            for (mi = 0; mi < 3; mi++) outs_free(&refs[ri][k][mi].o);
    for (mi = 0; mi < NMESH; mi++) tj_ctx_free(mctx[mi]);
    tj_ctx_free(ref_ctx);
    free(seen);
    free(seen_where);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("harness: %d rows x %d contexts x %d meshes (%s): %d programs, %.1f s\n", NROWS, NCTX, quick ? 3 : NMESH, quick ? "quick" : "full", nprog,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    if (nknown) fprintf(stderr, "harness: %d failures of known bugs (KNOWN lines above), not counted as failures\n", nknown);
    return tjt_finish();
}
