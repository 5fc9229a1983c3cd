#!/usr/bin/env python3
"""jax_diff.py -- tinyjax against JAX on seeded random programs.

Each seed makes one program (inputs, a list of op applications through
tinyjax's public builders, outputs, a scalar loss = sum of outputs times
fixed random weights) in one execution mode: plain jit, sharded on a
simulated mesh, inside scan over a stacked axis with a carry, inside
checkpoint with each remat policy, or a shard_map body with collectives.
The same program runs in JAX (jax 0.10.2, CPU) and through
build/jax_diff_run (tools/jax_diff_run.c); outputs, loss and the
gradient of every float input are compared by axis name.

    python3 tools/jax_diff.py --seeds 500        # the long run
    python3 tools/jax_diff.py --seed 17 --show   # one program
    python3 tools/jax_diff.py --golden tests/jax_golden   # regenerate CI goldens

Tolerance, per element, for a result r of dtype dt compared with JAX's j:
    |r - j| <= 2 |j - x| + 8 s + k ulp(dt) max|x|
x is the same program evaluated by JAX in float64 (inputs and explicit
casts rounded exactly as in the program): 2|j - x| is JAX's own rounding
error there. s (the spread) is how far x moves when the inputs, the loss
weights and every op's result (also a fused op's inner sums and the
result a derivative is computed from, as tanh's 1 - y^2) are moved by
one rounding u of the program's narrowest dtype (2^-24 f32, 2^-8 bf16)
with random signs, 3 patterns: it scales with the magnitude of the terms
that cancel into the element, not with the element itself; 8 allows for
fused kernels rounding several times inside one op (64 for f64 results,
which have no more exact reference, so no first term). The last term is a
few ulps of the tensor's largest element: k = 8 for f32 (ulp 2^-23), 2 for
bf16 (ulp 2^-7). The tolerances are stored with the goldens, and
tests/test_jax_golden.c applies them as they are. A pattern whose run
reached NaN or inf at an element measures nothing there; the spread is the
largest finite move of the others (all three non-finite: no spread term).

The model takes every op, and every op autodiff makes, to round once, as
written (tinyjax does: C99, no contraction). XLA's CPU compiler contracts
a * b + c into one fused multiply-add where the machine has FMA, which
rounds once fewer: where the sum cancels, the result is the product's
rounding error, of the terms' size and unmodeled, in JAX's result and in
the float64 reference alike (seed 2116: a second derivative through
one-hot attention probabilities, terms of 1e20 that cancel to 0 op by op
gave 49032 under jit, -0.077 op by op, as tinyjax and finite
differences). So XLA_FLAGS here adds --xla_cpu_max_isa=AVX (no FMA; the
flag is per process, not per jit): JAX's results are its ops' roundings,
as jax.disable_jit gives them.

tj_attention (fused: f32 inside for f32 and bf16, one rounding at the
end) is compared with jax.nn.dot_product_attention where that applies
(finite inputs, f32 or bf16, dim' == dim); else, and as the float64
reference, with the composed form softmax(scale q.k, -inf mask) . v. Its
spread moves the scores, the probabilities, the output and the per-query
log-sum-exp by one rounding each, and in that run its backward is
tinyjax's (P recomputed from the stored log-sum-exp, D_i = d_out_i . out_i
from the stored output), since autodiff of the composed form has no D:
the cancellation in d_out_i . v_j - D_i is what rounds in tinyjax's
gradient (false mismatches before). layer_norm's spread likewise runs its
backward from a recomputed y = (x - mean) r moved by one rounding: on a
row of 2, y is +-1 whatever x, and the gradient is all cancellation.
An attention on new inputs may (stream r5 alone, so the rest of each
seed's program is as before) index k and v along some batch axes
(grouped-query: k, v shared over those) and take a mask, a new i32 input
over some of the batch axes and positions with some rows all 0
(tj_attention_masked; JAX's mask=, its -0.7 f32-max fill making a fully
masked row the mean of v); a masked one's reference is the dense
where/softmax form, in perturb mode unperturbed (its spread comes from
the other ops).

Second derivatives (--second: every program; else seeds that are
multiples of 4, --no-second: none): the spec's "second" holds a fixed
random u_x (f32) for each float input with a gradient, and both sides also
give grad2:x = d L2 / d x with L2 = sum over those x of sum(f32(dL/dx) u_x),
a Hessian-vector product: JAX's jax.grad of an L2 built with jax.grad,
tinyjax's tj_grad of its own backward ops (jax_diff_run.c). Same tolerance
model (the spread moves the forward's values; the first derivative is
computed from them). Where tinyjax refuses a second derivative with an
error (none does now; tj_attention did) the refusal is counted and printed
at the end, and the program is compared without "second"; where JAX has
none (pmax), the program is first order only. A program with tj_attention
and a NaN or inf among its inputs has no second-order check (add_second).

    python3 tools/jax_diff.py --second --seeds 150 --start 20000

tj_custom_vjp (jax.custom_vjp): 3 programs in 10 end with one (after every
other draw, so each seed's other ops, outputs and weights stay as they
were; --no-custom-vjp: none), --custom-vjp puts them among the other ops
too. fwd and bwd are op lists in the spec; bwd is the chain rule or a
deliberately wrong one (Gen.custom_vjp_op). Both sides differentiate bwd's
ops and fwd's in a second derivative; L2 is built from the gradients
alone, so README's one difference from JAX there (a cotangent through
forward values alone goes to bwd in tinyjax) never arises.

--odd-meshes: 9 meshes in 10 are one of 3, 5, 6 or 7 devices (x=3, x=5,
x=7, x=6, data=3 model=2, data=2 model=3; the first N of the 8 host
devices), scan and checkpoint run on one in more programs, and 7 in 10
of the input axes (and some attention batch axes) take a size its axes,
their product or twice one divide, so the random shardings split them
(stream r7 alone: without the flag each seed's program is as before).
XLA's f32 tanh stops at 0.99999982 from |x| ~ 9 to 20 where the rounded
tanh is 1: its derivative 1 - y^2 is 3.6e-7 in JAX, 0 in tinyjax, so an
infinite cotangent through it gives inf in JAX and NaN here (seed 900016
of --odd-meshes --mode scan, a carry through tanh(11.6) meeting an
overflowed expm1: no mesh involved). XLA's f64 tanh is an ulp off
too: tanh(11.949142544760) is 0.9999999999164135 in JAX, ...4134 in
tinyjax (libm; a long-double tanh rounds to it), and the derivative
(1 + y)(1 - y) of the rounded y is then 1.6717294e-10 in JAX,
1.6717316e-10 here (1.6717320e-10 exactly), 1.5e-6 apart relative; f64
results have no JAX term, and the spread's y moved up past 1 keeps
f'(x) s (only a pattern moving y down models 1 - y's rounding; that the
three patterns all moved it up there is likely, not checked): seed 982808 of --more-ops --odd-meshes
--second --mode scan (f64 carry through tanh(9 x + 12)), grad and grad2
of the carry 1.5e-6 off relative, tinyjax the closer. A masked attention is unperturbed in
the spread, so in f64 (no JAX term) its own roundings have no tolerance:
seed 901114 of --odd-meshes --mode sharded --dtype f64 (again on one
device too) has dq 3e-14 off JAX where the terms are ~1e2 (JAX 8e-15 off
a long-double reference, tinyjax 3e-14): a limit of the model. The same
limit in f32 and bf16, where a masked query's probabilities are nearly
one-hot: dq_i = scale sum_j P_ij (dout_i . v_j - D_i) k_j cancels, and
tinyjax's D_i = dout_i . out_i (FlashAttention's, from the stored output,
rounded to the output's dtype) carries that output's rounding and a sum of
dim terms of |dout||out| into it, where JAX's softmax VJP subtracts
sum_j P_ij dP_ij: seed 982207 of --more-ops --second --mode jit (bf16
attention, mask (1, 1) on a query with scores 43.6 and 55.8, scale -0.7):
dq 1.62e-4 here, 2.8e-5 in JAX, 2.75e-5 in float64; float64 with out
rounded to bf16 in D alone gives 1.622e-4 (tinyjax 1.621e-4), and the
program in f32 agrees (3.01e-5 both; its second derivatives, where a
cross entropy of the output adds cotangents of 90, are 4e-6 off in f32
the same way). Also known and left as it is (README, tj_attention_masked):
a row whose visible scores are all -inf while others are masked is the
mean of all of v in tinyjax, of the masked keys' v in JAX (seed 983111 of
--mode sharded: a q holding +inf, scale -0.7, mask (0, 1, 0)).

--more-ops (stream r8 alone, after every other draw: without the flag
each seed's program is as before): 1-3 more results at the end, each an
output: tj_cross_entropy_ignore (not in shard_map; a new i32 labels input
with none, some or all rows ignored, ignore_index -100, -1 or one of the
classes; JAX's form is the documented one: an ignored row's logits and
label replaced by 0 before log_softmax, where(keep, per-row loss, 0), the
mean over the rows kept in f32 for bf16, so 0 / 0 = NaN with every row
of a mean ignored), and on a mesh outside shard_map
tj_with_sharding_constraint (jax.lax.with_sharding_constraint with a
random spec of mesh axes dividing the value's axes; no rounding in the
spread), maybe followed by a reduction, product, softmax or dot whose
sharding rule reads the new layout. In checkpoint and scan with a remat
policy, 3 in 10 take tj_offload_dot_with_no_batch_dims (JAX's
offload_dot_with_no_batch_dims; CPU JAX has no host memory, and where a
residual lives changes no value: dots_with_no_batch_dims_saveable).

--vjp: the same programs, but the runner takes the first gradients with
tj_vjp, each weighted float output's loss weight (cast to its dtype, in
JAX's axis order, replicated) its cotangent, instead of tj_grad of the
loss: the cotangents reach the outputs as a caller's would, in another
axis order and layout than the outputs' (jax.vjp). Second derivatives
differentiate those gradients as before.

On a mismatch it prints a minimal reproduction: ops are dropped (their
result replaced by their first operand) while the mismatch persists.
"""
import argparse, json, os, subprocess, sys, tempfile, random, copy
import numpy as np

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_allow_excess_precision=false --xla_cpu_max_isa=AVX")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
try:
    import jax, jax.numpy as jnp
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from jax.ad_checkpoint import checkpoint_name
except ImportError as e:  # the tool needs JAX: name it instead of a traceback
    sys.exit("jax_diff.py: needs jax (pip install jax): %s" % e)
jax.config.update("jax_enable_x64", True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.environ.get("JAX_DIFF_RUNNER", os.path.join(ROOT, "build", "jax_diff_run"))
ULPS = {"f32": (8, 2.0 ** -23), "bf16": (2, 2.0 ** -7), "f64": (8, 2.0 ** -52), "i32": (0, 0.0)}

# ---------------------------------------------------------------- numbers --
def bf16_round(a):
    """float64 -> the nearest bf16 value (round to nearest even), as float64"""
    f = np.asarray(a, np.float32)
    b = f.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    out = r.astype(np.uint32).view(np.float32).astype(np.float64)
    return np.where(np.isnan(f), np.nan, out)

def round_to(a, dt):
    a = np.asarray(a, np.float64)
    if dt == "f32": return a.astype(np.float32).astype(np.float64)
    if dt == "bf16": return bf16_round(a)
    return a

JDT = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f64": jnp.float64, "i32": jnp.int32}

# ------------------------------------------------ the program, evaluated in JAX --
class NV:
    """a named value: a jax array and its axis names, in tinyjax's order"""
    def __init__(self, a, axes): self.a, self.axes = a, list(axes)

def parse_shape(s):
    out = []
    for tok in s.replace(",", " ").split():
        n, v = tok.split("=")
        out.append((n, int(v)))
    return out

def align(x, axes):
    """x's array laid out on `axes` (a superset of x.axes), size-1 where absent"""
    a = x.a
    perm = [x.axes.index(n) for n in axes if n in x.axes]
    a = jnp.transpose(a, perm) if perm != list(range(len(perm))) else a
    shape, k = [], 0
    for n in axes:
        if n in x.axes: shape.append(a.shape[k]); k += 1
        else: shape.append(1)
    return jnp.reshape(a, shape)

def bcast_axes(a, b): return a.axes + [n for n in b.axes if n not in a.axes]

# unary ops whose derivative JAX computes from the result y: (f, its
# inverse on the result). Perturb mode moves y by one rounding as f at a
# moved input: y = f(x + c), c = f^-1(s f(x)) - x held constant. Every
# derivative is then f's own at the moved point, so the derivative sees the
# rounded y at any order (tanh's 1 - y^2 near saturation, and its
# derivative -2 y (1 - y^2) in a second derivative: seed 195000
# --attention). (A custom_jvp computing d(x, y) from y = f(x) s does this
# only to first order inside lax.scan: JAX's second derivative of a scan
# body differentiates the rule's y as f(x), unmoved.)
D = {"tanh": (jnp.tanh, lambda y: jnp.arctanh(jnp.clip(y, -1.0, 1.0))), "exp": (jnp.exp, jnp.log), "expm1": (jnp.expm1, jnp.log1p),
     "sqrt": (jnp.sqrt, lambda y: y * y), "rsqrt": (lax.rsqrt, lambda y: 1.0 / (y * y)),
     "sigmoid": (jax.nn.sigmoid, lambda y: jnp.log(y) - jnp.log1p(-y))}

def _rounded(f, finv):
    # where f(x) s is beyond f's range (tanh's y = 1 - 5e-11 moved up: an f32
    # tanh there rounds to 1.0 exactly), no moved input gives it: y is f(x) s
    # itself, its derivative f'(x) s (seed 800021, scan f32: tinyjax's f32
    # tanh(12.15) = 1 exactly, XLA's 0.99999994; 3 y cast to i32 is 3 or 2)
    def g(x, s):
        c = lax.stop_gradient(finv(f(x) * s) - x)
        ok = jnp.isfinite(c)
        return jnp.where(ok, f(x + jnp.where(ok, c, jnp.zeros_like(c))), f(x) * s)
    return g
ROUNDED = {nm: _rounded(f, finv) for nm, (f, finv) in D.items()}

class Evaluator:
    """Runs spec ops on NVs. exact=True: every float is float64 and casts round
    to their dtype's values (the reference for the tolerance)."""
    def __init__(self, exact, mesh=None, perturb=None, special=False):
        self.exact, self.mesh, self.perturb, self.special = exact, mesh, perturb, special

    def pz(self, a):
        """a fused op's intermediate, perturbed like an op's result (see run_ops)"""
        if not self.perturb: return a
        u, rnd = self.perturb
        return a * jnp.asarray(1 + u * rnd.choice([-1.0, 1.0], size=a.shape), a.dtype)

    def rounded_unary(self, nm, x):
        """perturb mode: op nm whose derivative, like JAX's rule, is computed
        from its result y; the y the derivative sees is moved by one rounding
        too (a saved residual is rounded), so the spread sees cancellations
        inside the derivative (1 - tanh^2 near saturation)"""
        u, rnd = self.perturb
        s = jnp.asarray(1 + u * rnd.choice([-1.0, 1.0], size=x.shape), x.dtype)
        return ROUNDED[nm](x, s)

    def dt(self, name):
        return jnp.float64 if self.exact and name in ("f32", "bf16", "f64") else JDT[name]

    def const(self, like, s):
        return jnp.asarray(float(s), dtype=like.dtype)

    def binary(self, f, a, b, cmp=False):
        axes = bcast_axes(a, b)
        r = f(align(a, axes), align(b, axes))
        return NV(r.astype(jnp.int32) if cmp else r, axes)

    def apply(self, op, env):
        nm = op["op"]; ins = [env[n] for n in op.get("in", [])]
        a = ins[0] if ins else None
        ax = op.get("axes", op.get("axis", ""))
        U = {"neg": lambda x: -x, "exp": jnp.exp, "log": jnp.log, "tanh": jnp.tanh, "sqrt": jnp.sqrt,
             "rsqrt": lax.rsqrt, "relu": jax.nn.relu, "gelu": lambda x: jax.nn.gelu(x, approximate=True),
             "sin": jnp.sin, "cos": jnp.cos, "abs": jnp.abs, "sign": jnp.sign, "log1p": jnp.log1p, "expm1": jnp.expm1,
             "erf": jax.scipy.special.erf, "softplus": jax.nn.softplus, "sigmoid": jax.nn.sigmoid}
        if nm in D and self.perturb: return NV(self.rounded_unary(nm, a.a), a.axes)
        if nm in U: return NV(U[nm](a.a), a.axes)
        if nm == "pows": return NV(a.a ** self.const(a.a, op["s"]), a.axes)
        if nm == "clip": return NV(jnp.clip(a.a, self.const(a.a, op["lo"]), self.const(a.a, op["hi"])), a.axes)
        if nm == "cast":
            if self.exact and op["dtype"] in ("f32", "bf16"):
                return NV(self.round(a.a.astype(jnp.float64), op["dtype"]), a.axes)
            return NV(a.a.astype(self.dt(op["dtype"])), a.axes)
        B = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": jnp.divide, "max2": jnp.maximum, "min2": jnp.minimum}
        if nm == "div" and a.a.dtype == jnp.int32: return self.binary(lax.div, a, ins[1])  # i32: lax.div (truncation, x / 0 = -1)
        if nm in B: return self.binary(B[nm], a, ins[1])
        C = {"lt": jnp.less, "le": jnp.less_equal, "gt": jnp.greater, "ge": jnp.greater_equal, "eq": jnp.equal, "ne": jnp.not_equal}
        if nm in C: return self.binary(C[nm], a, ins[1], cmp=True)
        if nm == "adds": return NV(a.a + self.const(a.a, op["s"]), a.axes)
        if nm == "muls": return NV(a.a * self.const(a.a, op["s"]), a.axes)
        if nm == "select":
            m, x, y = ins
            axes = bcast_axes(NV(None, bcast_axes(x, y)), m)
            return NV(jnp.where(align(m, axes) != 0, align(x, axes), align(y, axes)), axes)
        R = {"sum": jnp.sum, "max": jnp.max, "min": jnp.min, "mean": jnp.mean}
        if nm in R:
            names = ax.split()
            idx = tuple(a.axes.index(n) for n in names)
            if a.a.dtype == jnp.int32:  # an i32 sum stays i32 and wraps (jnp.sum would widen to int64 under x64)
                return NV(R[nm](a.a, axis=idx, dtype=jnp.int32) if nm == "sum" else R[nm](a.a, axis=idx), [n for n in a.axes if n not in names])
            return NV(R[nm](a.a, axis=idx), [n for n in a.axes if n not in names])
        if nm == "sum_all": return NV(jnp.sum(a.a), [])
        if nm in ("argmax", "argmin"):  # first index on ties, the first NaN wins; i32
            k = a.axes.index(ax)
            return NV((jnp.argmax if nm == "argmax" else jnp.argmin)(a.a, axis=k).astype(jnp.int32), a.axes[:k] + a.axes[k + 1:])
        if nm == "stack": return NV(jnp.stack([align(x, a.axes) for x in ins], axis=0), [ax] + a.axes)
        if nm == "dot":
            b = ins[1]; k = op["contract"].split()
            letters = {n: chr(97 + i) for i, n in enumerate(dict.fromkeys(a.axes + b.axes))}
            batch = [n for n in a.axes if n in b.axes and n not in k]
            out = batch + [n for n in a.axes if n not in b.axes] + [n for n in b.axes if n not in a.axes]
            sa = "".join(letters[n] for n in a.axes); sb = "".join(letters[n] for n in b.axes); so = "".join(letters[n] for n in out)
            prec = lax.Precision.HIGHEST
            if a.a.dtype == jnp.bfloat16:  # tinyjax: f32 accumulation, one rounding (bf16 -> f32 is exact)
                r = jnp.einsum(sa + "," + sb + "->" + so, a.a.astype(jnp.float32), b.a.astype(jnp.float32), precision=prec).astype(jnp.bfloat16)
            else:
                r = jnp.einsum(sa + "," + sb + "->" + so, a.a, b.a, precision=prec)
            return NV(r, out)
        if nm == "rename": return NV(a.a, [op["to"] if n == op["from"] else n for n in a.axes])
        if nm == "transpose":
            order = op["order"].split()
            return NV(jnp.transpose(a.a, [a.axes.index(n) for n in order]), order)
        if nm == "split":
            k = a.axes.index(ax); into = parse_shape(op["into"])
            known = int(np.prod([d for _, d in into if d]))
            into = [(n, d if d else a.a.shape[k] // known) for n, d in into]
            return NV(jnp.reshape(a.a, a.a.shape[:k] + tuple(s for _, s in into) + a.a.shape[k + 1:]), a.axes[:k] + [n for n, _ in into] + a.axes[k + 1:])
        if nm == "merge":
            names = ax.split(); k = a.axes.index(names[0])
            return NV(jnp.reshape(a.a, a.a.shape[:k] + (-1,) + a.a.shape[k + len(names):]), a.axes[:k] + [op["into"]] + a.axes[k + len(names):])
        if nm == "slice":
            k = a.axes.index(ax)
            return NV(lax.slice_in_dim(a.a, op["start"], op["stop"], axis=k), a.axes)
        if nm == "index":
            k = a.axes.index(ax)
            return NV(lax.index_in_dim(a.a, op["i"], axis=k, keepdims=False), a.axes[:k] + a.axes[k + 1:])
        if nm == "concat":
            k = a.axes.index(ax)
            return NV(jnp.concatenate([align(x, a.axes) for x in ins], axis=k), a.axes)
        if nm == "pad":
            k = a.axes.index(ax); cfg = [(0, 0, 0)] * len(a.axes); cfg[k] = (op["lo"], op["hi"], 0)
            return NV(lax.pad(a.a, self.const(a.a, op.get("value", 0)), cfg), a.axes)
        if nm == "broadcast":
            sh = parse_shape(op["shape"])
            return NV(jnp.broadcast_to(align(a, [n for n, _ in sh]), tuple(s for _, s in sh)), [n for n, _ in sh])
        if nm == "take":
            k = a.axes.index(ax); idx = ins[1]
            return NV(jnp.take(a.a, idx.a, axis=k), a.axes[:k] + idx.axes + a.axes[k + 1:])
        if nm == "arange":
            sh = parse_shape(op["shape"]); names = [n for n, _ in sh]
            return NV(lax.broadcasted_iota(self.dt(op["dtype"]), tuple(d for _, d in sh), names.index(op["axis"])), names)
        if nm == "one_hot":
            (n, size), = parse_shape(op["shape"])
            return NV(jax.nn.one_hot(a.a, size, dtype=self.dt(op["dtype"])), a.axes + [n])
        if nm == "causal_mask":
            q, k = op["q"], op["k"]
            qi = lax.broadcasted_iota(jnp.int32, a.a.shape, a.axes.index(q)); ki = lax.broadcasted_iota(jnp.int32, a.a.shape, a.axes.index(k))
            return NV(jnp.where(ki > qi, self.const(a.a, op["fill"]), a.a), a.axes)
        if nm in ("softmax", "log_softmax", "layer_norm"):
            # fused row ops: tinyjax computes a row in f32 (f64 for f64) and rounds once
            k = a.axes.index(ax); x = a.a
            up = x.astype(jnp.float32) if x.dtype == jnp.bfloat16 else x
            if nm == "softmax": r = jax.nn.softmax(up, axis=k)
            elif nm == "log_softmax": r = jax.nn.log_softmax(up, axis=k)
            elif self.perturb:
                u, rnd = self.perturb
                one = lambda shape: (1 + u * rnd.choice([-1.0, 1.0], size=shape)).astype(up.dtype)
                rs = up.shape[:k] + (1,) + up.shape[k + 1:]
                r = layer_norm_rounded(up, k, op.get("eps", 1e-5), (one(up.shape), one(rs), one(up.shape)))
            else:
                mu = jnp.mean(up, axis=k, keepdims=True); xc = up - mu
                r = xc * lax.rsqrt(jnp.mean(xc * xc, axis=k, keepdims=True) + jnp.asarray(op.get("eps", 1e-5), up.dtype))
            return NV(r.astype(x.dtype), a.axes)
        if nm in ("cross_entropy", "cross_entropy_padded"):  # (padded: over the first `classes`, the logits sliced)
            lab = ins[1]; k = a.axes.index(ax); x = a.a
            up = x.astype(jnp.float32) if x.dtype == jnp.bfloat16 else x
            if nm == "cross_entropy_padded": up = lax.slice_in_dim(up, 0, int(op["classes"]), axis=k)
            rest = [n for n in a.axes if n != ax]
            ls = jax.nn.log_softmax(up, axis=k)
            ls = jnp.moveaxis(ls, k, -1)
            l = align(lab, rest)
            per = -jnp.take_along_axis(ls, l[..., None], axis=-1)[..., 0]
            r = NV(per.astype(x.dtype), rest)
            if op.get("mean_axes"):
                names = op["mean_axes"].split()
                r = NV(jnp.mean(r.a, axis=tuple(rest.index(n) for n in names)), [n for n in rest if n not in names])
            return r
        if nm == "cross_entropy_ignore":
            # tj_cross_entropy_ignore as its documented form: an ignored
            # row's logits and label are replaced before the fused row op
            # (so its loss and logits' gradient are exactly 0 whatever its
            # logits), then the mean over the rows kept, in f32 for bf16
            lab = ins[1]; k = a.axes.index(ax); x = a.a
            up = x.astype(jnp.float32) if x.dtype == jnp.bfloat16 else x
            rest = [n for n in a.axes if n != ax]
            l = align(lab, rest)
            keep = l != op["ignore"]
            zs = jnp.where(jnp.expand_dims(keep, k), up, jnp.zeros((), up.dtype))
            ls = jnp.moveaxis(jax.nn.log_softmax(zs, axis=k), k, -1)
            per = -jnp.take_along_axis(ls, jnp.where(keep, l, 0)[..., None], axis=-1)[..., 0]
            per = jnp.where(keep, self.pz(per.astype(x.dtype)), jnp.zeros((), x.dtype))
            if not op.get("mean_axes"): return NV(per, rest)
            names = op["mean_axes"].split(); idx = tuple(rest.index(n) for n in names)
            w = jnp.float32 if x.dtype == jnp.bfloat16 else x.dtype
            s = self.pz(jnp.sum(per.astype(w), axis=idx)) / jnp.sum(keep, axis=idx).astype(w)
            return NV(s.astype(x.dtype), [n for n in rest if n not in names])
        if nm == "wsc":  # jax.lax.with_sharding_constraint (a value: no rounding)
            if self.mesh is None: return a
            return NV(jax.lax.with_sharding_constraint(a.a, NamedSharding(self.mesh, spec_to_P(op["spec"], a.axes))), a.axes)
        if nm == "attention": return self.attention(op, *ins)
        if nm == "checkpoint_name": return NV(checkpoint_name(a.a, op["name"]), a.axes)
        if nm == "stop_gradient": return NV(lax.stop_gradient(a.a), a.axes)
        ma = tuple(op.get("mesh_axes", "").replace("+", " ").split())
        ma1 = ma[0] if len(ma) == 1 else ma
        if nm == "psum": return NV(lax.psum(a.a, ma1), a.axes)
        if nm == "pmax":  # NaN-propagating as jnp.max (and tinyjax); XLA's CPU all-reduce max skips NaN
            anynan = lax.psum(jnp.isnan(a.a).astype(jnp.int32), ma1) > 0
            return NV(jnp.where(anynan, jnp.asarray(jnp.nan, a.a.dtype), lax.pmax(a.a, ma1)), a.axes)
        if nm == "pvary": return NV(jax.lax.pcast(a.a, ma, to="varying"), a.axes)
        if nm == "all_gather": return NV(lax.all_gather(a.a, ma1, axis=a.axes.index(ax), tiled=True), a.axes)
        if nm == "psum_scatter": return NV(lax.psum_scatter(a.a, ma1, scatter_dimension=a.axes.index(ax), tiled=True), a.axes)
        if nm == "ppermute":
            pr = op["pairs"]
            return NV(lax.ppermute(a.a, ma1, perm=[(pr[i], pr[i + 1]) for i in range(0, len(pr), 2)]), a.axes)
        if nm == "all_to_all":
            return NV(lax.all_to_all(a.a, ma1, a.axes.index(op["split_axis"]), a.axes.index(op["concat_axis"]), tiled=True), a.axes)
        if nm == "axis_index": return NV(lax.axis_index(ma1).astype(jnp.int32), [])
        raise ValueError("unknown op " + nm)

    def attention(self, op, q, k, v, mask=None):
        """tj_attention: softmax(scale q.k, causal mask) . v per batch row,
        computed in f32 for bf16 (one rounding at the end, as tinyjax), out
        [batch axes in q's order, qpos, dim]. JAX's result is
        jax.nn.dot_product_attention (implementation='xla') where it applies:
        finite inputs, f32 compute and dim' == dim (it wants v shaped as k).
        Else, and for the float64 reference, the composed form (causal:
        attention_pairs, where a masked pair's factors never meet, so a NaN
        or infinity there reaches no result: README's Against JAX lists
        this); in perturb mode attention_rounded."""
        qp, kp, dm = op["qpos"], op["kpos"], op["dim"]
        qb = [n for n in q.axes if n not in (qp, dm)]
        batch = [n for n in qb if n in k.axes] + [n for n in qb if n not in k.axes]  # (tinyjax's out order)
        size = dict(zip(q.axes, q.a.shape)); size[kp] = k.a.shape[k.axes.index(kp)]
        def lay(x, names):  # x laid out as batch + names, broadcast over the batch axes it lacks (grouped k, v; the mask)
            have = [n for n in batch + names if n in x.axes]
            a = jnp.transpose(x.a, [x.axes.index(n) for n in have])
            for i, n in enumerate(batch + names):
                if n not in x.axes: a = jnp.expand_dims(a, i)
            return jnp.broadcast_to(a, tuple(x.a.shape[x.axes.index(n)] if n in x.axes else size[n] for n in batch + names))
        qa, ka, va = lay(q, [qp, dm]), lay(k, [kp, dm]), lay(v, [kp, dm])
        dt = qa.dtype
        up = jnp.float32 if dt == jnp.bfloat16 else dt
        qa, ka, va = qa.astype(up), ka.astype(up), va.astype(up)
        (tq, d), tk, dv = qa.shape[-2:], ka.shape[-2], va.shape[-1]
        scale = op.get("scale", 0.0) or 1.0 / np.sqrt(d)
        causal = bool(op.get("causal", 0))
        if mask is not None:
            # jax.nn.dot_product_attention's semantics: a masked score is
            # -0.7 f32 max, so a row with every key masked is the mean of v
            mf = lay(NV(mask.a != 0, mask.axes), [qp, kp]) if qp != kp else lay(NV(mask.a != 0, mask.axes), [])[..., None, None]
            mf = jnp.broadcast_to(mf, qa.shape[:-2] + (tq, tk))
            if not self.exact and not self.special and up == jnp.float32 and dv == d:
                B = int(np.prod(qa.shape[:-2]))
                r = jax.nn.dot_product_attention(qa.reshape(B, tq, 1, d), ka.reshape(B, tk, 1, d), va.reshape(B, tk, 1, d), mask=mf.reshape(B, 1, tq, tk),
                                                 scale=float(scale), is_causal=causal, implementation="xla")
                return NV(r.reshape(qa.shape[:-1] + (dv,)).astype(dt), batch + [qp, dm])
            hp = lax.Precision.HIGHEST
            fill = jnp.asarray(-0.7 * np.finfo(np.float32).max, up)
            if causal:
                # README's Against JAX: causal pairs a query cannot see are
                # skipped, not multiplied by 0 (a NaN or inf in such a key
                # reaches neither the output nor dq; seed 505039 --second,
                # f64, every row masked: JAX NaN in all of dq). Their
                # factors are zeroed before they meet, as attention_pairs
                # does; a row with every key masked (by the mask and causal
                # together) still averages v over ALL keys, as JAX.
                seen = np.tril(np.ones((tq, tk), bool))
                mf = mf & seen
                full = ~jnp.any(mf, axis=-1)  # [..., tq]
                z = jnp.zeros((), up)
                kz = jnp.where(seen[:, :, None], ka[..., None, :, :], z)
                vz = jnp.where(seen[:, :, None] | full[..., :, None, None], va[..., None, :, :], z)
                s = jnp.einsum("...td,...tsd->...ts", qa, kz, precision=hp) * jnp.asarray(scale, up)
                s = jnp.where(mf, s, fill)
                o = jnp.einsum("...ts,...tsd->...td", jax.nn.softmax(s, axis=-1), vz, precision=hp)
                return NV(o.astype(dt), batch + [qp, dm])
            s = jnp.einsum("...td,...sd->...ts", qa, ka, precision=hp) * jnp.asarray(scale, up)
            s = jnp.where(mf, s, fill)
            o = jnp.einsum("...ts,...sd->...td", jax.nn.softmax(s, axis=-1), va, precision=hp)
            return NV(o.astype(dt), batch + [qp, dm])
        if not self.exact and not self.special and up == jnp.float32 and dv == d:
            B = int(np.prod(qa.shape[:-2]))
            r = jax.nn.dot_product_attention(qa.reshape(B, tq, 1, d), ka.reshape(B, tk, 1, d), va.reshape(B, tk, 1, d),
                                             scale=float(scale), is_causal=causal, implementation="xla")
            return NV(r.reshape(qa.shape).astype(dt), batch + [qp, dm])
        seen = np.tril(np.ones((tq, tk), bool)) if causal else np.ones((tq, tk), bool)  # query i sees key j (a constant, no tracer)
        if self.perturb:
            u, rnd = self.perturb
            one = lambda shape: (1 + u * rnd.choice([-1.0, 1.0], size=shape)).astype(up)
            sh = qa.shape[:-2] + (tq, tk)
            o = attention_rounded(qa, ka, va, scale, seen, (one(sh), one(sh), one(qa.shape[:-1] + (dv,)), one(qa.shape[:-1])))
        elif causal: o = attention_pairs(qa, ka, va, scale, seen)[0]
        else:
            s = jnp.einsum("...td,...sd->...ts", qa, ka, precision=lax.Precision.HIGHEST) * jnp.asarray(scale, up)
            o = jnp.einsum("...ts,...sd->...td", jax.nn.softmax(s, axis=-1), va, precision=lax.Precision.HIGHEST)
        return NV(o.astype(dt), batch + [qp, dm])

    def round(self, v, d):
        """exact mode: round float64 v to dtype d's values (inside jit)"""
        if d == "f32": return v.astype(jnp.float32).astype(jnp.float64)
        b = lax.bitcast_convert_type(v.astype(jnp.float32), jnp.uint32)
        r = ((b + jnp.uint32(0x7FFF) + ((b >> 16) & 1)) >> 16) << 16
        out = lax.bitcast_convert_type(r.astype(jnp.uint32), jnp.float32).astype(jnp.float64)
        return jnp.where(jnp.isnan(v), v, out)

# The composed attention over (query, key) pairs, [..., tq, tk, d]: the
# factors of a pair a query cannot see are zeroed by a select before they
# meet, so no 0 * inf is formed there (tinyjax never visits those pairs).
def attention_pairs(q, k, v, scale, seen, rs=1, rp=1):
    """out and the log-sum-exp of each query's scores: softmax(scale q.k
    (masked: -inf)) . v, the scores times rs and the probabilities times rp"""
    hp, z = lax.Precision.HIGHEST, jnp.zeros((), q.dtype)
    kz = jnp.where(seen[:, :, None], k[..., None, :, :], z)
    s = jnp.where(seen, jnp.einsum("...td,...tsd->...ts", q, kz, precision=hp) * jnp.asarray(scale, q.dtype) * rs, jnp.asarray(-np.inf, q.dtype))
    # p = exp(s - max) / sum, as jax.nn.softmax: exp(s - lse) would round
    # s - lse at the size of lse, far off for large scores in f64 (seed 11094)
    m = lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
    e = jnp.exp(jnp.where(seen, s - m, jnp.asarray(-np.inf, q.dtype)))  # (masked: 0, also in a row of NaN)
    den = jnp.sum(e, axis=-1, keepdims=True)
    p = e / den * rp
    # a visible +inf score: inf - inf, a row of NaN, as jax.nn.softmax's (and tinyjax's)
    lse = (m + jnp.log(den))[..., 0]
    vz = jnp.where(seen[:, :, None], v[..., None, :, :], z)
    return jnp.einsum("...ts,...tsd->...td", p, vz, precision=hp), lse

def attention_rounded(q, k, v, scale, seen, r):
    """perturb mode: attention_pairs with its scores, probabilities, output
    and log-sum-exp each moved by one rounding (r: the four factors 1 +- u),
    and tinyjax's backward: P from the stored log-sum-exp and
    D_i = d_out_i . out_i from the stored output, both moved (tinyjax keeps
    them in out's dtype and f32), so the spread sees the cancellation in
    d_out_i . v_j - D_i"""
    rs, rp, ro, rl = r  # (numpy: the closures below must hold no tracer of the caller's trace)
    @jax.custom_vjp
    def f(q, k, v): return attention_pairs(q, k, v, scale, seen, rs, rp)[0]
    def f_fwd(q, k, v):
        o, lse = attention_pairs(q, k, v, scale, seen, rs, rp)
        return o, (q, k, v, o * ro, lse * rl)
    def f_bwd(res, g):
        q, k, v, o, lse = res
        hp, z = lax.Precision.HIGHEST, jnp.zeros((), q.dtype)
        kz, vz = jnp.where(seen[:, :, None], k[..., None, :, :], z), jnp.where(seen[:, :, None], v[..., None, :, :], z)
        qz, gz = jnp.where(seen[:, :, None], q[..., :, None, :], z), jnp.where(seen[:, :, None], g[..., :, None, :], z)
        s = jnp.where(seen, jnp.einsum("...td,...tsd->...ts", q, kz, precision=hp) * jnp.asarray(scale, q.dtype) * rs, jnp.asarray(-np.inf, q.dtype))
        p = jnp.where(seen, jnp.exp(s - lse[..., None]), z) * rp
        ds = jnp.where(seen, p * (jnp.einsum("...td,...tsd->...ts", g, vz, precision=hp) - jnp.sum(g * o, axis=-1)[..., None]), z)
        sc = jnp.asarray(scale, q.dtype)
        return (sc * jnp.einsum("...ts,...tsd->...td", ds, kz, precision=hp), sc * jnp.einsum("...ts,...tsd->...sd", ds, qz, precision=hp),
                jnp.einsum("...ts,...tsd->...sd", p, gz, precision=hp))
    f.defvjp(f_fwd, f_bwd)
    return f(q, k, v)

def layer_norm_rounded(x, k, eps, r):
    """perturb mode: layer_norm along axis k with x - mean and the variance
    moved by one rounding (r: factors 1 +- u), and tinyjax's backward,
    dx = rs (g - mean(g) - y mean(g y)) from a recomputed y moved by one
    rounding too: on a row of 2, y is +-1 whatever x, so the gradient is all
    cancellation, which autodiff of the forward does not show"""
    rx, rv, ry = r  # (numpy: no tracer of the caller's trace in the closures)
    def norm(x):
        xc = (x - jnp.mean(x, axis=k, keepdims=True)) * rx
        rs = lax.rsqrt(jnp.mean(xc * xc, axis=k, keepdims=True) * rv + jnp.asarray(eps, x.dtype))
        return xc * rs, rs
    @jax.custom_vjp
    def f(x): return norm(x)[0]
    def f_bwd(x, g):
        y, rs = norm(x)
        y = y * ry
        return (rs * (g - jnp.mean(g, axis=k, keepdims=True) - y * jnp.mean(g * y, axis=k, keepdims=True)),)
    f.defvjp(lambda x: (norm(x)[0], x), f_bwd)
    return f(x)

def run_ops(ev, spec, env):
    for op in spec["ops"]:
        if op["op"] == "custom_vjp":  # (its outputs are fwd's, rounded there: no rounding of its own)
            for n, r in zip([op["out"]] + op.get("more_out", []), custom_vjp(ev, op, [env[n] for n in op["in"]])): env[n] = r
            continue
        r = ev.apply(op, env)
        if ev.perturb and jnp.issubdtype(r.a.dtype, jnp.floating) and op["op"] != "wsc":  # one rounding's worth, random signs
            u, rnd = ev.perturb
            r = NV(r.a * jnp.asarray(1 + u * rnd.choice([-1.0, 1.0], size=r.a.shape), r.a.dtype), r.axes)
        env[op["out"]] = r
    return env

def custom_vjp(ev, op, ins):
    """tj_custom_vjp as jax.custom_vjp: op["fwd"] (ops from its "in" names
    to "out" and residuals "res") and op["bwd"] (ops from its "res" and "ct"
    names to "out", one gradient per input: the input's axes in any order,
    or null for none) run through ev, so in perturb mode each of their ops
    rounds once, as in every other op"""
    fw, bw = op["fwd"], op["bwd"]
    in_axes = [x.axes for x in ins]
    in_sd = [(x.a.shape, x.a.dtype) for x in ins]  # (no tracer of the caller's trace in the closures)
    info = {}
    def fwd(*xs):
        env = run_ops(ev, {"ops": fw["ops"]}, {n: NV(a, ax) for n, a, ax in zip(fw["in"], xs, in_axes)})
        o, r = [env[n] for n in fw["out"]], [env[n] for n in fw["res"]]
        info["out"], info["res"] = [v.axes for v in o], [v.axes for v in r]
        return tuple(v.a for v in o), tuple(v.a for v in r)
    @jax.custom_vjp
    def f(*xs): return fwd(*xs)[0]
    def f_bwd(res, cts):
        env = {n: NV(a, ax) for n, a, ax in zip(bw["res"], res, info["res"])}
        env.update({n: NV(a, ax) for n, a, ax in zip(bw["ct"], cts, info["out"])})
        env = run_ops(ev, {"ops": bw["ops"]}, env)
        # (None: JAX's symbolic zero, as tinyjax's NULL: no gradient flows on,
        # so a 0 does not meet an inf in the ops before: seed 673 --custom-vjp)
        return tuple(None if n is None else align(env[n], ax).astype(d) for n, ax, (sh, d) in zip(bw["out"], in_axes, in_sd))
    f.defvjp(fwd, f_bwd)
    outs = f(*[x.a for x in ins])
    return [NV(a, ax) for a, ax in zip(outs, info["out"])]

POLICIES = {
    "everything_saveable": lambda a: jax.checkpoint_policies.everything_saveable,
    "nothing_saveable": lambda a: jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": lambda a: jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": lambda a: jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "save_only_these_names": lambda a: jax.checkpoint_policies.save_only_these_names(*a.split()),
    "save_any_names_but_these": lambda a: jax.checkpoint_policies.save_any_names_but_these(*a.split()),
    # values do not depend on where residuals live; CPU JAX has no host offload
    "save_and_offload_only_these_names": lambda a: jax.checkpoint_policies.save_only_these_names(*(a.split("|")[0].split() + a.split("|")[1].split())),
    # --more-ops: tj_offload_dot_with_no_batch_dims (JAX's
    # offload_dot_with_no_batch_dims: where residuals live changes no value)
    "offload_dot_with_no_batch_dims": lambda a: jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "save_from_both": lambda a: jax.checkpoint_policies.save_from_both_policies(jax.checkpoint_policies.dots_saveable,
                                                                                 jax.checkpoint_policies.save_only_these_names(*a.split())),
}
def jax_policy(s):
    name, _, arg = s.partition(":")
    return POLICIES[name](arg)

def spec_to_P(spec_str, axes):
    m = {}
    for tok in spec_str.split():
        n, _, v = tok.partition(":")
        m[n] = None if v in ("", "-", "none") else (tuple(v.split("+")) if "+" in v else v)
    return P(*[m.get(n) for n in axes])

def special_values(spec):
    """NaN or an infinity among the inputs or op constants"""
    return any(isinstance(v, str) for x in spec["inputs"] for v in x["data"]) or any(isinstance(o.get("fill"), str) for o in spec["ops"])

def eval_jax(spec, exact, perturb=None):
    """{name: (array float64/int, axes)} for outputs, "loss" and "grad:x".
    perturb (u, numpy Generator): multiply every op's result by 1 +- u."""
    mode = spec["mode"]
    ins = spec["inputs"]
    mesh = None
    if "mesh" in spec:
        shape = [int(t.split("=")[1]) for t in spec["mesh"].split()]
        names = [t.split("=")[0] for t in spec["mesh"].split()]
        mesh = Mesh(np.array(jax.devices()[:spec["devices"]]).reshape(shape), tuple(names))
    ev = Evaluator(exact, mesh, perturb, special_values(spec))
    arrays, axes_of = {}, {}
    for x in ins:
        sh = parse_shape(x["shape"]); axes_of[x["name"]] = [n for n, _ in sh]
        data = np.array([float(v) for v in x["data"]], np.float64).reshape(tuple(s for _, s in sh))
        arrays[x["name"]] = jnp.asarray(data, ev.dt(x["dtype"]))
    weights = {k: (jnp.asarray(np.array(v["data"], np.float64).reshape(tuple(s for _, s in parse_shape(v["shape"]))), ev.dt("f32")),
                   [n for n, _ in parse_shape(v["shape"])]) for k, v in spec.get("weights", {}).items()}
    outs = spec["outputs"]

    def body_env(vals):
        return {x["name"]: NV(vals[x["name"]], axes_of[x["name"]]) for x in ins}

    def forward(vals):
        res = {}
        if mode in ("jit", "sharded"):
            env = run_ops(ev, spec, body_env(vals))
            for o in outs: res[o] = env[o]
        elif mode == "checkpoint":
            out_axes = {}
            def region(v):
                env = run_ops(ev, spec, body_env(v))
                for o in outs: out_axes[o] = env[o].axes
                return [env[o].a for o in outs]
            r = jax.checkpoint(region, policy=jax_policy(spec.get("policy", "nothing_saveable")))(vals)
            for o, a in zip(outs, r): res[o] = NV(a, out_axes[o])
        elif mode == "scan":
            sc = spec["scan"]; L = sc["axis"].split("=")[0]; carry, xs = sc["carry"], sc.get("xs", [])
            length = int(sc["axis"].split("=")[1]) if "=" in sc["axis"] else None
            out_axes = {}
            def step(c, x):
                v = dict(vals); v.update(dict(zip(carry, c))); v.update(dict(zip(xs, x)))
                env = body_env(v)
                for n in xs: env[n] = NV(x[xs.index(n)], axes_of[n][1:])
                env = run_ops(ev, spec, env)
                for o in outs: out_axes[o] = env[o].axes
                newc = [align(env[co], axes_of[cn]).astype(vals[cn].dtype) for co, cn in zip(sc["carry_out"], carry)]
                return newc, [env[o].a for o in outs]
            f = step
            if spec.get("policy"): f = jax.checkpoint(step, policy=jax_policy(spec["policy"]))
            fin, ys = lax.scan(f, [vals[c] for c in carry], [vals[x] for x in xs], length=length, reverse=bool(sc.get("reverse", 0)))
            for o, a in zip(outs, ys): res[o] = NV(a, [L] + out_axes[o])
            for c, a in zip(carry, fin): res["carry:" + c] = NV(a, axes_of[c])
        elif mode == "shard_map":
            out_axes = {}
            def body(*v):
                env = run_ops(ev, spec, body_env(dict(zip([x["name"] for x in ins], v))))
                for o in outs: out_axes[o] = env[o].axes
                return tuple(env[o].a for o in outs)
            # out axes are needed for out_specs before tracing: the spec carries them
            in_specs = tuple(spec_to_P(s, axes_of[x["name"]]) for s, x in zip(spec["in_specs"], ins))
            out_specs = tuple(spec_to_P(s, spec["out_axes"][o]) for s, o in zip(spec["out_specs"], outs))
            r = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=bool(spec.get("check", 1)))(*[vals[x["name"]] for x in ins])
            for o, a in zip(outs, r): res[o] = NV(a, spec["out_axes"][o])
        return res

    def loss_fn(gvals, rest):
        vals = dict(rest); vals.update(gvals)
        res = forward(vals)
        loss = jnp.zeros((), ev.dt("f32"))
        for k, nv in res.items():
            if k in weights and jnp.issubdtype(nv.a.dtype, jnp.floating):
                w, wa = weights[k]
                loss = loss + jnp.sum(align(NV(nv.a.astype(ev.dt("f32")), nv.axes), wa) * w)
        for k, v in res.items(): res_axes[k] = v.axes
        return loss, {k: v.a for k, v in res.items()}

    res_axes = {}
    gnames = [x["name"] for x in ins if x["dtype"] != "i32" and x.get("grad", True)]
    gvals = {n: arrays[n] for n in gnames}
    rest = {n: a for n, a in arrays.items() if n not in gvals}
    # With NaN or infinities among the inputs the reference is JAX on one
    # device: XLA's sharded min and max combine the devices' partial results
    # without NaN (jit or eager, a sharded min over rows holding NaN gives
    # inf where one device gives NaN: seed 77011), and a sharded program
    # must equal the same program on one device. The placement is still
    # made (a spec that cannot be placed is an error on both sides).
    if mesh and mode != "shard_map":
        for x in ins:
            s = NamedSharding(mesh, spec_to_P(x.get("spec", ""), axes_of[x["name"]]))
            placed = jax.device_put(gvals.get(x["name"], rest.get(x["name"])), s)
            if special_values(spec): continue
            if x["name"] in gvals: gvals[x["name"]] = placed
            else: rest[x["name"]] = placed
    vg = jax.value_and_grad(loss_fn, has_aux=True)
    sec = spec.get("second") if gnames else None
    if sec:  # L2 = sum over x of sum(f32(d loss / d x) * u_x); its gradient is H u
        uarr = {n: jnp.asarray(np.array([float(v) for v in sec[n]], np.float64).reshape(arrays[n].shape), ev.dt("f32")) for n in gnames}
        def l2_fn(gv, rest):
            g = jax.grad(lambda gv: loss_fn(gv, rest)[0])(gv)
            return sum(jnp.sum(g[n].astype(ev.dt("f32")) * uarr[n]) for n in gnames)
        vg1 = vg
        def vg(gv, rest): return vg1(gv, rest), jax.grad(l2_fn)(gv, rest)
    else: vg = (lambda f: lambda gv, rest: (f(gv, rest), None))(vg)
    if special_values(spec):
        # JAX's rules, op by op: under jit XLA rewrites some (a multiply by a
        # 0/1 mask becomes a select), which changes where NaN comes out
        with jax.disable_jit(): ((loss, res), grads), grads2 = vg(gvals, rest)
    else: ((loss, res), grads), grads2 = jax.jit(vg)(gvals, rest)
    out = {k: (np.asarray(a.astype(jnp.float64) if a.dtype != jnp.int32 else a), res_axes[k]) for k, a in res.items()}
    out["loss"] = (np.asarray(loss, np.float64), [])
    for n in gnames: out["grad:" + n] = (np.asarray(grads[n].astype(jnp.float64)), axes_of[n])
    for n in gnames if grads2 else []: out["grad2:" + n] = (np.asarray(grads2[n].astype(jnp.float64)), axes_of[n])
    return out

# ----------------------------------------------------------- the comparison --
def perturbed(spec, u, seed):
    """spec with every non-tie input value and loss weight times (1 +- u)"""
    r = random.Random(seed)
    p = copy.deepcopy(spec)
    def pert(v):
        if isinstance(v, str) or v * 2 == int(v * 2): return v  # ties (multiples of 1/2) stay ties
        return v * (1 + u * r.choice([-1, 1]))
    for x in p["inputs"]:
        if x["dtype"] != "i32": x["data"] = [pert(v) for v in x["data"]]
    for w in p.get("weights", {}).values(): w["data"] = [pert(v) for v in w["data"]]
    for n in p.get("second", {}): p["second"][n] = [pert(v) for v in p["second"][n]]
    return p

def loss_terms(spec, res):
    """sum over the loss's terms of |f32(o) w| (res: eval_jax's results)"""
    t = 0.0
    for o, w in spec.get("weights", {}).items():
        if o not in res: continue
        a, axes = res[o]
        a = np.transpose(round_to(a, "f32"), [axes.index(n) for n, _ in parse_shape(w["shape"])])
        t += float(np.nansum(np.abs(a.reshape(-1) * np.array(w["data"], np.float64))))
    return t

def expected(spec):
    """JAX's results with per-element tolerances: {name: dict(axes, data, tol, dtype)}.
    tol = 2 |jax - exact| + 8 spread + k ulp max|exact|: `exact` is the program
    in float64, `spread` how far the float64 result moves when inputs and loss
    weights move by one rounding u of the program's narrowest float dtype
    (two random sign patterns): the size of the terms that cancel into an
    element, which one rounding of each scales."""
    lo = eval_jax(spec, exact=False)
    hi = eval_jax(spec, exact=True)
    dts = spec["_dtypes"]
    narrow = any(x["dtype"] == "bf16" for x in spec["inputs"]) or any(o.get("dtype") == "bf16" for o in spec["ops"])
    f32 = any(x["dtype"] == "f32" for x in spec["inputs"]) or any(o.get("dtype") == "f32" for o in spec["ops"])
    u = 2.0 ** -8 if narrow else 2.0 ** -24 if f32 else 2.0 ** -53
    # (f64 programs: a float64 run cannot resolve a move of 2^-53, so it is
    # moved by 2^-30 and the spread scaled back: the response is linear)
    ue = max(u, 2.0 ** -30)
    pert = [eval_jax(perturbed(spec, ue, i), exact=True, perturb=(ue, np.random.default_rng(i))) for i in range(3)]
    exp = {}
    for k, (a, axes) in lo.items():
        dt = dts[k]
        x = hi[k][0]
        # a result is as coarse as the narrowest dtype the program computes in
        kk, ulp = ULPS[dt] if dt == "i32" or ULPS[dt][1] >= 2 * u else ULPS[{2.0 ** -8: "bf16", 2.0 ** -24: "f32"}[u]]
        finite = np.isfinite(x)
        scale = np.max(np.abs(x[finite])) if finite.any() else 0.0
        with np.errstate(invalid="ignore"):
            # the largest finite move over the patterns: a pattern that
            # reached NaN or inf there (a perturbed run's exp(s - lse) at
            # scores of 1e17) measured nothing, the others still measure
            # (dropping the whole spread for it made the most sensitive
            # elements the least tolerated: seed 2139)
            devs = np.array([np.abs(pp[k][0] - x) for pp in pert])
            spread = np.fmax.reduce(np.where(np.isfinite(devs), devs, np.nan), axis=0) * (u / ue)
            # (an f64 result has no more exact reference, so no JAX error
            # term: 64 spreads stand in for it)
            tol = 2 * np.abs(a - x) + (64 if u == 2.0 ** -53 else 8) * spread + kk * ulp * scale
        if k == "loss" and u == 2.0 ** -53:
            # the loss sums f32 terms f32(o) w in f32 (sharded: in partial
            # sums per device), which a float64 spread does not see: 8 f32
            # roundings of the terms' absolute sum (seed 30019, f64 data=2
            # model=2: a sum of 48 terms up to 680 for a loss of 22)
            tol = tol + 8 * 2.0 ** -24 * loss_terms(spec, hi)
        # a special value (x NaN or infinite) must come out exactly; a finite
        # one whose spread is not (every perturbed run reached inf, or
        # inf - inf: seed 73026, bf16 attention with scale 0) keeps the other
        # two terms
        with np.errstate(invalid="ignore"):
            rest = 2 * np.abs(a - x) + kk * ulp * scale
        tol = np.where(np.isfinite(tol), tol, np.where(np.isfinite(x) & np.isfinite(rest), rest, 0.0))
        exp[k] = {"dtype": dt, "axes": axes, "data": a.reshape(-1).tolist(), "tol": tol.reshape(-1).tolist(), "dims": list(a.shape)}
    return exp

def run_tinyjax(spec):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "spec.json")
        s = {k: v for k, v in spec.items() if not k.startswith("_")}
        json.dump(s, open(p, "w"))
        r = subprocess.run([RUNNER, p], capture_output=True, text=True, timeout=120)
        if r.returncode not in (0, 1):
            return {"error": "runner crashed (exit %d): %s" % (r.returncode, r.stderr[-2000:])}
        return json.loads(r.stdout)

def to_num(v): return float(v)  # (also "nan", "inf", "-inf")

def compare(exp, got):
    """list of mismatch lines ([] = agree)"""
    bad = []
    if "error" in got:
        return ["tinyjax error: " + got["error"]]
    res = got["results"]
    for k, e in exp.items():
        if k not in res: bad.append("%s: missing from tinyjax's results" % k); continue
        g = res[k]
        if sorted(g["axes"]) != sorted(e["axes"]): bad.append("%s: axes %s vs JAX %s" % (k, g["axes"], e["axes"])); continue
        if g["dtype"] != e["dtype"]: bad.append("%s: dtype %s vs JAX %s" % (k, g["dtype"], e["dtype"]))
        dims = [e["dims"][e["axes"].index(n)] for n in g["axes"]]
        ga = np.array([to_num(v) for v in g["data"]], np.float64).reshape(dims)
        ga = np.transpose(ga, [g["axes"].index(n) for n in e["axes"]]) if e["axes"] else ga
        ea = np.array([to_num(v) for v in e["data"]], np.float64).reshape(e["dims"])
        tol = np.array(e["tol"], np.float64).reshape(e["dims"])
        same_nan = np.isnan(ga) == np.isnan(ea)
        with np.errstate(invalid="ignore"):
            close = (ga == ea) | (np.abs(ga - ea) <= tol) | (np.isnan(ga) & np.isnan(ea))
        ok = same_nan & close
        if not ok.all():
            i = np.argwhere(~ok)[0]
            bad.append("%s %s: %d of %d elements differ; at %s tinyjax %r, JAX %r (tol %.3g)" %
                       (k, e["axes"], int((~ok).sum()), ok.size, dict(zip(e["axes"], i.tolist())), float(ga[tuple(i)]), float(ea[tuple(i)]), float(tol[tuple(i)])))
    return bad

# -------------------------------------------------------------- generation --
MESHES = [("data=2 model=2", 4), ("data=8", 8), ("data=2 model=4", 8), ("x=4", 4)]
# --odd-meshes: meshes of 3, 5, 6 and 7 devices (the first N of the 8 host
# devices), drawn from r7 alone after r's draw of a mesh, so each seed's
# program without the flag stays as it was
ODD_MESHES = [("x=3", 3), ("x=5", 5), ("x=7", 7), ("x=6", 6), ("data=3 model=2", 6), ("data=2 model=3", 6)]

class Gen:
    def __init__(self, seed, mode=None, dtype=None, big=False, attn=False, cvjp=0, odd=False, more=False, xpad=False):
        self.r = random.Random(seed)
        # choices added later draw from r2, so r's stream (each seed's program) stays as it was
        self.r2 = random.Random(seed * 7919 + 17)
        # tj_custom_vjp ops draw from r3 alone: a draw from r2 would move the
        # r2 draws after it (arange, int_ops, the shard_map shuffles)
        self.r3 = random.Random(seed * 104723 + 29)
        # the unary ops added later (sin .. softplus, clip) draw from r4 alone,
        # after a step (new_unary_op): each seed's program before it stays
        self.r4 = random.Random(seed * 15485863 + 41)
        # tj_attention's grouped k/v and mask draw from r5 alone (after the
        # draws of r the op made before they existed)
        self.r5 = random.Random(seed * 15485863 + 31)
        # tj_argmax, tj_argmin, tj_stack and tj_sigmoid draw from r6 alone,
        # after the whole program (more_ops_tail): each seed's program, its
        # names, outputs and loss weights stay, these ops and outputs follow
        self.r6 = random.Random(seed * 49979687 + 67)
        # --odd-meshes draws from r7 alone: the odd mesh, and sizes of the
        # input axes that its axes (and their products) divide
        self.r7 = random.Random(seed * 67867967 + 89)
        # --more-ops draws from r8 alone, after the whole program (more2_tail)
        self.r8 = random.Random(seed * 86028121 + 97)
        # --xent-padded draws from r9 alone, after everything (xpad_tail)
        self.r9 = random.Random(seed * 93281587 + 101)
        self.odd, self.more, self.xpad = odd, more, xpad
        self.seed = seed
        self.mode = mode or self.r.choice(["jit", "jit", "sharded", "scan", "checkpoint", "shard_map"])
        self.dtype = dtype or self.r.choice(["f32", "f32", "f32", "bf16", "bf16", "f64"])
        self.vals = {}    # name -> (dtype, [(axis, size)]) in tinyjax's order
        self.vary = {}    # shard_map: name -> set of mesh axes
        self.inputs, self.ops = [], []
        self.nv = self.nin = self.naxis = 0
        self.names = []   # checkpoint names used
        self.manual = False
        self.big, self.attn, self.cvjp = big, attn, cvjp
        self.check = 1

    def fresh_axis(self):
        self.naxis += 1
        return "n%d" % self.naxis

    def data(self, dt, n, kind=None):
        r = self.r
        kind = kind or r.choice(["normal", "normal", "normal", "ties", "wide", "special"])
        if kind == "ties": v = [float(r.choice([-1, 0, 0.5, 1, 2])) for _ in range(n)]
        elif kind == "special":  # NaN and infinities among ordinary values
            v = [r.choice([r.gauss(0, 1), r.gauss(0, 1), float("nan"), float("inf"), float("-inf"), 0.0, -0.0]) for _ in range(n)]
        elif kind == "wide": v = [r.gauss(0, 1) * 10 ** r.uniform(-3, 3) for _ in range(n)]
        else: v = [r.gauss(0, 1) for _ in range(n)]
        return [num(x) for x in round_to(np.array(v), dt).tolist()]

    def add_input(self, dt, shape, data=None, grad=True, spec=None):
        name = "x%d" % self.nin; self.nin += 1
        n = int(np.prod([s for _, s in shape])) if shape else 1
        x = {"name": name, "dtype": dt, "shape": " ".join("%s=%d" % a for a in shape),
             "data": data if data is not None else self.data(dt, n)}
        if not grad: x["grad"] = False
        if spec is not None: x["spec"] = spec
        self.inputs.append(x)
        self.vals[name] = (dt, list(shape))
        return name

    def emit(self, op, ins, dt_, sh_, **attrs):
        name = "v%d" % self.nv; self.nv += 1
        d = {"op": op, "in": list(ins), "out": name}; d.update(attrs)
        self.ops.append(d)
        self.vals[name] = (dt_, list(sh_))
        if self.manual:
            vs = set()
            for i in ins: vs |= self.vary.get(i, set())
            self.vary[name] = vs
        return name

    def floats(self, dt=None):
        return [n for n, (d, _) in self.vals.items() if d in ("f32", "bf16", "f64") and (dt is None or d == dt)]

    def compat(self, a, b):
        sa, sb = dict(self.vals[a][1]), dict(self.vals[b][1])
        return all(sa[n] == sb[n] for n in sa if n in sb) and len(set(sa) | set(sb)) <= 6

    def arange_op(self, x):
        """x times (or plus) tj_arange along one of its axes, in x's dtype or
        as i32 cast to it (drawn from r2)"""
        r2 = self.r2
        dt, sh = self.vals[x]
        if dt == "i32" or not sh: return x
        a = r2.choice([n for n, _ in sh])
        shape = " ".join("%s=%d" % t for t in sh)
        if r2.random() < 0.3:
            i = self.emit("arange", [], "i32", sh, shape=shape, axis=a, dtype="i32")
            ar = self.emit("cast", [i], dt, sh, dtype=dt)
        else:
            ar = self.emit("arange", [], dt, sh, shape=shape, axis=a, dtype=dt)
        return self.emit(r2.choice(["mul", "add"]), [x, ar], dt, sh)

    def new_unary_op(self, x):
        """sin, cos, abs, sign, log1p, expm1, erf, softplus or clip of x
        (drawn from r4); log1p mostly on values > -1, expm1 on tanh(x)"""
        r4 = self.r4
        dt, sh = self.vals[x]
        if dt == "i32": return x
        u = r4.choice(["sin", "cos", "abs", "sign", "log1p", "expm1", "erf", "softplus", "clip"])
        if u == "log1p" and r4.random() < 0.8: x = self.positive(x)
        if u == "expm1" and r4.random() < 0.8: x = self.emit("tanh", [x], dt, sh)
        if u == "clip":
            lo, hi = r4.choice([(-1.0, 1.0), (0.0, 2.0), (-0.5, 0.25), (1.0, -1.0), (0.0, 1e30)])
            return self.emit("clip", [x], dt, sh, lo=lo, hi=hi)
        return self.emit(u, [x], dt, sh)

    def custom_vjp_op(self, x):
        """tj_custom_vjp (jax.custom_vjp) on x and maybe a second value y of
        x's dtype (in shard_map: one varying over the same mesh axes, so that
        bwd's gradient varies as its input does). Every draw from r3.
        fwd: t = x (or x op y), a chain of 1..3 elementwise ops to the
        output, maybe a second output of t; residuals: the inputs and a
        random part of fwd's values (outputs too: a residual that is y), bwd
        recomputing the rest. bwd: the chain rule over the residuals and
        cotangents, or (4 in 10) a wrong one: a factor dropped, a gradient
        scaled, made zero (null) or times tanh of its input, or the second
        output's cotangent ignored; each then shows in the gradients, and the
        second derivatives differentiate bwd's ops and fwd's.
        The second-order check (add_second) builds L2 from the gradients
        alone, so every cotangent of its pass reaches a custom_vjp's outputs
        through the first gradient's backward nodes, where tinyjax goes
        through fwd's ops as JAX's grad(grad(f)) does: README's "Differences
        from JAX" (a cotangent through forward values alone, as
        value_and_grad's value reused, goes to bwd in tinyjax, to fwd's ops
        in JAX) has no case here. The op's local names carry its output's
        name as a prefix."""
        r3 = self.r3
        dt, sh = self.vals[x]
        if dt == "i32": return None
        vx = self.vary.get(x, set())
        cands = [y for y in self.floats(dt) if y != x and self.compat(x, y) and (not self.manual or self.vary.get(y, set()) == vx)]
        ins = [x] + ([r3.choice(cands)] if cands and r3.random() < 0.5 else [])
        name = "v%d" % self.nv; self.nv += 1
        P = name + "."
        loc = [P + "i%d" % i for i in range(len(ins))]
        axes_of = {l: [a for a, _ in self.vals[i][1]] for l, i in zip(loc, ins)}
        tsh = list(sh) + ([a for a in self.vals[ins[1]][1] if a[0] not in dict(sh)] if len(ins) == 2 else [])
        fops, bops = [], []
        def mk(ops, pre, op, i, **kw):
            n = "%s%s%d" % (P, pre, len(ops)); d = {"op": op, "in": list(i), "out": n}; d.update(kw); ops.append(d); return n
        F = lambda op, i, **kw: mk(fops, "f", op, i, **kw)
        B = lambda op, i, **kw: mk(bops, "b", op, i, **kw)
        comb = r3.choice(["mul", "add", "sub"]) if len(ins) == 2 else None
        t = F(comb, loc) if comb else loc[0]
        chain, cur = [], t
        for _ in range(r3.randint(1, 3)):
            kind = r3.choice(["tanh", "exp", "muls", "adds", "sq", "neg"])
            if kind == "exp":  # on tanh: bounded
                b = F("tanh", [cur]); chain.append(("tanh", cur, b, None)); cur = b
            s_ = r3.choice([0.5, -2.0, 1.7])
            b = (F("pows", [cur], s=2.0) if kind == "sq" else F(kind, [cur], s=s_) if kind in ("muls", "adds") else F(kind, [cur]))
            chain.append((kind, cur, b, s_)); cur = b
        outs, y1 = [cur], None
        if r3.random() < 0.4:
            y1k = r3.choice(["tanh", "sq"])
            y1 = F("tanh", [t]) if y1k == "tanh" else F("mul", [t, t])
            outs.append(y1)
        vals = loc + [o["out"] for o in fops]
        saved = list(loc) + [v for v in vals[len(loc):] if r3.random() < 0.4]
        M = {v: P + "r%d" % i for i, v in enumerate(saved)}
        for o in fops:  # bwd recomputes what was not saved
            if o["out"] not in M: M[o["out"]] = B(o["op"], [M[i] for i in o["in"]], **{k: v for k, v in o.items() if k not in ("op", "in", "out")})
        wrong = r3.choice(["drop", "scale", "zero", "nonlin", "ignore"]) if r3.random() < 0.4 else None
        if wrong == "ignore" and y1 is None: wrong = "scale"
        drop = r3.randrange(len(chain)) if wrong == "drop" else -1
        g = P + "g0"
        for idx in range(len(chain) - 1, -1, -1):
            kind, a, b, s_ = chain[idx]
            if idx == drop: continue
            if kind == "tanh": g = B("mul", [g, B("adds", [B("neg", [B("mul", [M[b], M[b]])])], s=1.0)])
            elif kind == "exp": g = B("mul", [g, M[b]])
            elif kind == "muls": g = B("muls", [g], s=s_)
            elif kind == "sq": g = B("mul", [g, B("muls", [M[a]], s=2.0)])
            elif kind == "neg": g = B("neg", [g])
        if y1 is not None and wrong != "ignore":
            d = B("adds", [B("neg", [B("mul", [M[y1], M[y1]])])], s=1.0) if y1k == "tanh" else B("muls", [M[t]], s=2.0)
            g = B("add", [g, B("mul", [P + "g1", d])])
        taxes = [a for a, _ in tsh]
        def red(v, i):
            extra = [a for a in taxes if a not in axes_of[loc[i]]]
            return B("sum", [v], axes=" ".join(extra)) if extra else v
        if comb is None: gins = [g]
        elif comb == "add": gins = [red(g, 0), red(g, 1)]
        elif comb == "sub": gins = [red(g, 0), red(B("neg", [g]), 1)]
        else: gins = [red(B("mul", [g, M[loc[1]]]), 0), red(B("mul", [g, M[loc[0]]]), 1)]
        j = r3.randrange(len(gins))
        if wrong == "scale": gins[j] = B("muls", [gins[j]], s=r3.choice([0.5, -1.5]))
        elif wrong == "zero": gins[j] = None
        elif wrong == "nonlin": gins[j] = B("mul", [gins[j], B("tanh", [M[loc[j]]])])
        d = {"op": "custom_vjp", "in": ins, "out": name,
             "fwd": {"in": loc, "ops": fops, "out": outs, "res": saved},
             "bwd": {"res": [M[v] for v in saved], "ct": [P + "g%d" % i for i in range(len(outs))], "ops": bops, "out": gins}}
        names = [name]
        if y1 is not None:
            names.append("v%d" % self.nv); self.nv += 1
            d["more_out"] = names[1:]
        self.ops.append(d)
        for n in names:
            self.vals[n] = (dt, list(tsh))
            if self.manual: self.vary[n] = set(vx)
        return name

    def custom_vjp_tail(self, outs, spec):
        """after the program (every draw of r and r2 made, so its ops, names,
        outputs and their loss weights are the ones the seed made before
        custom_vjp ops existed): a custom_vjp op on one of its values, maybe
        an op reading its output (tanh, or a product, whose rule reads the
        output: the path a second derivative takes through fwd's ops), one
        output more. Draws from r3 alone."""
        r3 = self.r3
        fl = self.floats()
        if not fl: return
        c = self.custom_vjp_op(r3.choice(fl))
        if c is None: return
        dt, sh = self.vals[c]
        k = r3.choice(["tanh", "mul", "mul_other", "none"])
        if k == "tanh": c = self.emit("tanh", [c], dt, sh)
        elif k == "mul": c = self.emit("mul", [c, c], dt, sh)
        elif k == "mul_other":
            cands = [y for y in self.floats(dt) if self.compat(c, y) and (not self.manual or self.vary.get(y, set()) <= self.vary[c])]
            y = r3.choice(cands)
            c = self.emit("mul", [c, y], dt, sh + [a for a in self.vals[y][1] if a[0] not in dict(sh)])
        if c in outs: return
        if self.mode == "shard_map":  # its out_spec as make() gives one (without r's draws)
            dt, sh = self.vals[c]
            vs = [m for m in self.mesh_axes if m in self.vary[c]]
            if vs and not sh: c = self.emit("psum", [c], dt, sh, mesh_axes=" ".join(vs)); vs = []
            spec["out_specs"].append("%s:%s" % (sh[0][0], "+".join(vs)) if vs else "")
            spec["out_axes"][c] = [n for n, _ in sh]
        outs.append(c)
        spec["_tail"] = [c]

    def more_ops_tail(self, outs, spec):
        """after the program and custom_vjp_tail (every draw of r, r2, r3, r4
        and r5 made, so its inputs, ops, names, outputs and their loss
        weights are the ones the seed made before these ops existed): 1-3 of
        tj_argmax / tj_argmin (of an input, often a new one of ties, +-0,
        NaN and infinities, or of a computed value; the i32 result an output,
        or cast to a float and multiplied by a value, so the gradient
        crosses it: zero), tj_stack (x with other values of its type, maybe
        argmax'd along the new axis) and tj_sigmoid (maybe of 20 x:
        saturated; silu x sigmoid(x)); each result an output more (their
        weights drawn last). Draws from r6 alone."""
        r6 = self.r6
        new = []
        for _ in range(r6.randint(1, 3)):
            fl = self.floats()
            if not fl: break
            x = r6.choice(fl); dt, sh = self.vals[x]
            k = r6.choice(["argmax", "argmin", "argmax", "stack", "stack", "sigmoid", "sigmoid", "silu"])
            if k in ("argmax", "argmin"): y = self.arg_op(k, x)
            elif k == "stack": y = self.stack_op(x)
            else:
                if r6.random() < 0.3: x = self.emit("muls", [x], dt, sh, s=r6.choice([20.0, -30.0]))
                y = self.emit("sigmoid", [x], dt, sh)
                if k == "silu": y = self.emit("mul", [x, y], dt, sh)
            if y and y not in outs and y not in new: new.append(y)
        for c in new:
            if self.mode == "shard_map":  # its out_spec as make() gives one (without r's draws)
                dt, sh = self.vals[c]
                vs = [m for m in self.mesh_axes if m in self.vary[c]]
                if vs and not sh: c = self.emit("psum", [c], dt, sh, mesh_axes=" ".join(vs)); vs = []; self.vary[c] = set()
                spec["out_specs"].append("%s:%s" % (sh[0][0], "+".join(vs)) if vs else "")
                spec["out_axes"][c] = [n for n, _ in sh]
            outs.append(c)
            spec.setdefault("_tail", []).append(c)

    def more2_tail(self, outs, spec):
        """--more-ops, after everything else (draws from r8 alone): 1-3 of
        tj_cross_entropy_ignore (not in shard_map: new labels input, some
        or all rows ignored, ignore_index -100, -1 or a class), and on a
        mesh outside shard_map tj_with_sharding_constraint of a value
        (jax.lax.with_sharding_constraint, a random spec of mesh axes that
        divide its axes) maybe followed by an op whose sharding rule reads
        the new layout (a reduction, a product, softmax, a dot); in
        checkpoint or scan with a policy, 3 in 10 take
        tj_offload_dot_with_no_batch_dims. Each result an output more."""
        r8 = self.r8
        if spec.get("policy") and r8.random() < 0.3: spec["policy"] = "offload_dot_with_no_batch_dims"
        new = []
        for _ in range(r8.randint(1, 3)):
            fl = [x for x in self.floats() if self.vals[x][1]]
            if not fl: break
            x = r8.choice(fl); dt, sh = self.vals[x]
            k = r8.choice(["xent", "xent", "wsc", "wsc"])
            if k == "xent" and not self.manual:
                i = r8.randrange(len(sh)); a, c = sh[i]
                rest = sh[:i] + sh[i + 1:]
                ign = r8.choice([-100, -100, -1, r8.randrange(c)])
                n = int(np.prod([d for _, d in rest])) if rest else 1
                pi = r8.choice([0.0, 0.3, 0.6, 1.0])
                lab = [float(ign) if r8.random() < pi else float(r8.randrange(c)) for _ in range(n)]
                li = self.add_input("i32", rest, data=lab, grad=False)
                ma = r8.sample([m for m, _ in rest], r8.randint(0, len(rest))) if rest else []
                kw = {"axis": a, "ignore": ign}
                if ma or r8.random() < 0.5: kw["mean_axes"] = " ".join(ma)
                y = self.emit("cross_entropy_ignore", [x, li], dt, [t for t in rest if t[0] not in ma], **kw)
            elif k == "wsc" and getattr(self, "mesh_axes", None) and not self.manual:
                parts = {}
                for ax_, d in sh:
                    free = [m for m in self.mesh_axes if m not in parts.values() and d % self.mesh_size[m] == 0]
                    if free and r8.random() < 0.6: parts[ax_] = r8.choice(free)
                y = self.emit("wsc", [x], dt, sh, spec=" ".join("%s:%s" % t for t in parts.items()))
                f = r8.choice(["none", "sum", "mul", "softmax", "dot"])
                cands = [z for z in self.floats(dt) if z != x and self.compat(x, z)]
                if f == "sum": y = self.emit("sum", [y], dt, [t for t in sh if t[0] != sh[0][0]], axes=sh[0][0]) if r8.random() < 0.5 else \
                    self.emit("sum", [y], dt, [t for t in sh if t[0] != sh[-1][0]], axes=sh[-1][0])
                elif f == "mul" and cands:
                    z = r8.choice(cands)
                    y = self.emit("mul", [y, z], dt, sh + [t for t in self.vals[z][1] if t[0] not in dict(sh)])
                elif f == "softmax": y = self.emit("softmax", [y], dt, sh, axis=r8.choice(sh)[0])
                elif f == "dot":
                    cd = [z for z in cands if set(dict(sh)) & set(dict(self.vals[z][1]))]
                    if cd:
                        z = r8.choice(cd); zs = self.vals[z][1]
                        shared = [m for m, _ in sh if m in dict(zs)]
                        con = r8.sample(shared, r8.randint(1, len(shared)))
                        out = [t for t in sh if t[0] in shared and t[0] not in con] + [t for t in sh if t[0] not in shared] + [t for t in zs if t[0] not in dict(sh)]
                        if len(out) <= 6: y = self.emit("dot", [y, z], dt, out, contract=" ".join(con))
            else: continue
            if y and y not in outs and y not in new: new.append(y)
        for c in new:
            outs.append(c)
            spec.setdefault("_tail", []).append(c)

    def xpad_tail(self, outs, spec):
        """--xent-padded, after everything else (draws from r9 alone): 1-2
        tj_cross_entropy_padded (not in shard_map: a new labels input) over
        the first `classes` of a class axis of 2 or more (some padding
        always), labels below classes; bf16 logits widened to f32 first in
        6 of 10 (the op then reads the bf16 logits through the cast, and
        its loss is f32). JAX: the cross-entropy of the logits sliced to
        classes. Each result an output more."""
        r9 = self.r9
        new = []
        for _ in range(r9.randint(1, 2)):
            fl = [x for x in self.floats() if any(d >= 2 for _, d in self.vals[x][1])]
            if not fl or self.manual: break
            x = r9.choice(fl); dt, sh = self.vals[x]
            i = r9.choice([j for j, (_, d) in enumerate(sh) if d >= 2]); a, c = sh[i]
            rest = sh[:i] + sh[i + 1:]
            classes = r9.randint(1, c - 1)
            n = int(np.prod([d for _, d in rest])) if rest else 1
            li = self.add_input("i32", rest, data=[float(r9.randrange(classes)) for _ in range(n)], grad=False)
            if dt == "bf16" and r9.random() < 0.6:
                x = self.emit("cast", [x], "f32", sh, dtype="f32"); dt = "f32"
            ma = r9.sample([m for m, _ in rest], r9.randint(0, len(rest))) if rest else []
            kw = {"axis": a, "classes": classes}
            if ma or r9.random() < 0.5: kw["mean_axes"] = " ".join(ma)
            y = self.emit("cross_entropy_padded", [x, li], dt, [t for t in rest if t[0] not in ma], **kw)
            if y not in outs and y not in new: new.append(y)
        for c in new:
            outs.append(c)
            spec.setdefault("_tail", []).append(c)

    def arg_op(self, k, x):
        """tj_argmax or tj_argmin (k) along one axis of: a new input of x's
        type (not in shard_map: its inputs are fixed) whose data has ties,
        -0 next to +0, NaN and infinities; an input; or x itself (a
        computed value: where it nearly ties, the tool's rounding model
        widens the index's tolerance). Draws from r6."""
        r6 = self.r6
        dt, sh = self.vals[x]
        src = r6.random()
        if not self.manual and src < 0.5:
            if not sh or r6.random() < 0.3: sh = [(self.fresh_axis(), r6.randint(1, 6))] + ([(self.fresh_axis(), r6.randint(1, 3))] if r6.random() < 0.5 else [])
            n = int(np.prod([d for _, d in sh]))
            kind = r6.choice(["ties", "ties", "special", "normal"])
            if kind == "ties": v = [r6.choice([-1.0, 0.0, -0.0, 0.5, 1.0, 2.0]) for _ in range(n)]
            elif kind == "special": v = [r6.choice([r6.gauss(0, 1), 1.0, -0.0, 0.0, float("nan"), float("inf"), float("-inf")]) for _ in range(n)]
            else: v = [r6.gauss(0, 1) for _ in range(n)]
            z = self.add_input(dt, sh, data=[num(t) for t in round_to(np.array(v), dt).tolist()])
        elif src < 0.8:
            ins = [i["name"] for i in self.inputs if self.vals[i["name"]][0] in ("f32", "bf16", "f64") and self.vals[i["name"]][1]]
            z = r6.choice(ins) if ins else x
        else: z = x
        dt, sh = self.vals[z]
        if not sh: return None
        ax = r6.choice([n for n, _ in sh])
        ish = [t for t in sh if t[0] != ax]
        i = self.emit(k, [z], "i32", ish, axis=ax)
        if self.manual or r6.random() < 0.4:
            i = self.emit("cast", [i], dt, ish, dtype=dt)
            cands = [y for y in self.floats(dt) if y != i and self.compat(i, y) and (not self.manual or self.vary.get(y, set()) <= self.vary[i])]
            if cands and r6.random() < 0.7:
                y = r6.choice(cands)
                i = self.emit("mul", [i, y], dt, ish + [a for a in self.vals[y][1] if a[0] not in dict(ish)])
        return i

    def stack_op(self, x):
        """tj_stack of x with 0-2 more values of its type (other values with
        its axes, transposed to its order; sigmoid(x); a multiple of x;
        x again) along a new axis, maybe argmax'd or summed along it (ties
        where x is stacked with itself). Draws from r6."""
        r6 = self.r6
        dt, sh = self.vals[x]
        same = lambda y: sorted(self.vals[y][1]) == sorted(sh) and (not self.manual or self.vary.get(y, set()) == self.vary.get(x, set()))
        cands = [y for y in self.floats(dt) if y != x and same(y)]
        parts = [x]
        for _ in range(r6.randint(0, 2)):
            h = r6.choice(["other", "other", "sigmoid", "muls", "same"])
            if h == "other" and cands:
                y = r6.choice(cands)
                if self.vals[y][1] != sh: y = self.emit("transpose", [y], dt, sh, order=" ".join(n for n, _ in sh))
            elif h == "sigmoid": y = self.emit("sigmoid", [x], dt, sh)
            elif h == "muls": y = self.emit("muls", [x], dt, sh, s=r6.choice([-1.0, 0.5, 3.0]))
            else: y = x
            parts.append(y)
        ax = self.fresh_axis()
        y = self.emit("stack", parts, dt, [(ax, len(parts))] + sh, axis=ax)
        w = r6.random()
        if w < 0.25: y = self.emit(r6.choice(["argmax", "argmin"]), [y], "i32", sh, axis=ax)
        elif w < 0.4: y = self.emit("sum", [y], dt, sh, axes=ax)
        if self.manual and self.vals[y][0] == "i32": y = self.emit("cast", [y], dt, sh, dtype=dt)
        return y

    def positive(self, x):
        dt, sh = self.vals[x]
        return self.emit("adds", [self.emit("pows", [x], dt, sh, s=2.0)], dt, sh, s=0.5)

    def step(self):
        """one random op on the values so far; returns its name or None"""
        r = self.r
        fl = self.floats()
        if not fl: return None
        x = r.choice(fl); dt, sh = self.vals[x]
        axes = [n for n, _ in sh]
        kinds = ["unary", "unary", "binary", "binary", "compare_select", "reduce", "dot", "dot", "shape", "shape",
                 "rowop", "take", "one_hot", "causal", "xent", "cast", "name", "attention"]
        if self.manual: kinds += ["coll", "coll", "coll"]
        k = r.choice(kinds)
        if k == "unary":
            u = r.choice(["neg", "exp", "log", "tanh", "sqrt", "rsqrt", "relu", "gelu", "pows", "adds", "muls", "stop_gradient"])
            if u in ("log", "sqrt", "rsqrt"):  # mostly on positive values; else NaN and infinities
                return self.emit(u, [self.positive(x) if r.random() < 0.8 else x], dt, sh)
            if u == "exp": x = self.emit("tanh", [x], dt, sh)  # bounded, so exp stays finite
            if u == "pows":
                s = r.choice([2.0, 3.0, -1.0, 0.5])
                if s in (-1.0, 0.5): x = self.positive(x)
                return self.emit("pows", [x], dt, sh, s=s)
            if u in ("adds", "muls"): return self.emit(u, [x], dt, sh, s=r.choice([0.5, -2.0, 1.7, 3.0]))
            return self.emit(u, [x], dt, sh)
        if k == "binary":
            cands = [y for y in self.floats(dt) if self.compat(x, y)]
            y = r.choice(cands)
            b = r.choice(["add", "sub", "mul", "div", "max2", "min2"])
            if b == "div": y = self.positive(y)
            out = sh + [a for a in self.vals[y][1] if a[0] not in axes]
            return self.emit(b, [x, y], dt, out)
        if k == "compare_select":
            cands = [y for y in self.floats(dt) if self.compat(x, y)]
            y = r.choice(cands)
            c = r.choice(["lt", "le", "gt", "ge", "eq", "ne"])
            m_sh = sh + [a for a in self.vals[y][1] if a[0] not in axes]
            m = self.emit(c, [x, y], "i32", m_sh)
            z = r.choice([z for z in cands if self.compat(z, m)])
            t = sh + [a for a in self.vals[z][1] if a[0] not in axes]
            t = t + [a for a in m_sh if a[0] not in [n for n, _ in t]]
            return self.emit("select", [m, x, z], dt, t)
        if k == "reduce" and r.random() < 0.15: return self.emit("sum_all", [x], dt, [])
        if k == "reduce" and sh:
            red = r.sample(axes, r.randint(1, len(axes)))
            op = r.choice(["sum", "max", "min", "mean"])
            if self.manual and op in ("max", "min") and False: pass
            return self.emit(op, [x], dt, [a for a in sh if a[0] not in red], axes=" ".join(red))
        if k == "dot" and self.big and r.random() < 0.5 and not self.manual:
            # large enough for the CPU's packed, threaded matmul kernel
            m, kk, n = (self.fresh_axis(), r.choice([3, 70, 130])), (self.fresh_axis(), r.choice([65, 129])), (self.fresh_axis(), r.choice([5, 67, 100]))
            a = self.add_input(dt, r.choice([[m, kk], [kk, m]]), data=self.data(dt, m[1] * kk[1], "normal"))
            b = self.add_input(dt, r.choice([[kk, n], [n, kk]]), data=self.data(dt, n[1] * kk[1], "normal"))
            return self.emit("dot", [a, b], dt, [m, n], contract=kk[0])
        if k == "dot":
            cands = [y for y in self.floats(dt) if y != x and self.compat(x, y) and set(axes) & set(n for n, _ in self.vals[y][1])]
            if not cands:  # make a weight sharing one axis of x
                if not sh: return None
                a = r.choice(sh)
                if self.manual: return None
                y = self.add_input(dt, [a, (self.fresh_axis(), r.randint(1, 4))])
            else: y = r.choice(cands)
            ysh = self.vals[y][1]
            shared = [n for n in axes if n in [m for m, _ in ysh]]
            con = r.sample(shared, r.randint(1, len(shared)))
            batch = [a for a in sh if a[0] in shared and a[0] not in con]
            out = batch + [a for a in sh if a[0] not in shared] + [a for a in ysh if a[0] not in axes]
            if len(out) > 6: return None
            return self.emit("dot", [x, y], dt, out, contract=" ".join(con))
        if k == "shape":
            s = r.choice(["rename", "transpose", "split", "merge", "slice", "index", "concat", "pad", "broadcast"])
            if self.manual and s in ("split", "merge"): s = "transpose"  # (local shapes; keeps out_specs simple)
            if not sh and s != "broadcast": s = "broadcast"
            if s == "rename":
                a = r.choice(axes); n = self.fresh_axis()
                return self.emit("rename", [x], dt, [(n, d) if m == a else (m, d) for m, d in sh], **{"from": a, "to": n})
            if s == "transpose":
                o = axes[:]; r.shuffle(o)
                return self.emit("transpose", [x], dt, [(n, dict(sh)[n]) for n in o], order=" ".join(o))
            if s == "split":
                i = r.randrange(len(sh)); a, d = sh[i]
                n1, n2 = self.fresh_axis(), self.fresh_axis()
                d1 = 2 if d % 2 == 0 and d > 1 else d
                into = [(n1, d1), (n2, d // d1)]
                into_s = "%s=%d %s=%d" % (n1, d1, n2, 0 if r.random() < 0.5 else d // d1)
                return self.emit("split", [x], dt, sh[:i] + into + sh[i + 1:], axis=a, into=into_s)
            if s == "merge" and len(sh) >= 2:
                i = r.randrange(len(sh) - 1); n = self.fresh_axis()
                return self.emit("merge", [x], dt, sh[:i] + [(n, sh[i][1] * sh[i + 1][1])] + sh[i + 2:], axes="%s %s" % (sh[i][0], sh[i + 1][0]), into=n)
            if not sh: return None
            i = r.randrange(len(sh)); a, d = sh[i]
            if d == 0 and s in ("slice", "index"): return None  # (a shard_map block of an odd split can be empty: nothing to slice or index)
            if s == "slice":
                st = r.randrange(d); sp = r.randint(st + 1, d)
                return self.emit("slice", [x], dt, sh[:i] + [(a, sp - st)] + sh[i + 1:], axis=a, start=st, stop=sp)
            if s == "index":
                return self.emit("index", [x], dt, sh[:i] + sh[i + 1:], axis=a, i=r.randrange(d))
            if s == "concat":
                y = self.emit("muls", [x], dt, sh, s=-0.5)
                if d > 1 and r.random() < 0.5:  # three parts of other sizes
                    z = self.emit("slice", [x], dt, sh[:i] + [(a, d - 1)] + sh[i + 1:], axis=a, start=1, stop=d)
                    return self.emit("concat", [z, x, y], dt, sh[:i] + [(a, 3 * d - 1)] + sh[i + 1:], axis=a)
                return self.emit("concat", [x, y], dt, sh[:i] + [(a, 2 * d)] + sh[i + 1:], axis=a)
            if s == "pad":
                lo, hi = r.randint(-d + 1 if d > 1 else 0, 2), r.randint(0, 2)
                if r.random() < 0.5: lo, hi = hi, lo
                if d + lo + hi < 1: return None
                return self.emit("pad", [x], dt, sh[:i] + [(a, d + lo + hi)] + sh[i + 1:], axis=a, lo=lo, hi=hi, value=r.choice([0.0, -1.5]))
            if s == "broadcast" and len(sh) < 5:
                n = (self.fresh_axis(), r.randint(1, 3))
                o = sh + [n]; r.shuffle(o)
                return self.emit("broadcast", [x], dt, o, shape=" ".join("%s=%d" % t for t in o))
            return None
        if k == "rowop" and sh:
            op = r.choice(["softmax", "log_softmax", "layer_norm"])
            a = r.choice(axes)
            kw = {"axis": a}
            if op == "layer_norm": kw["eps"] = r.choice([1e-5, 0.1])
            return self.emit(op, [x], dt, sh, **kw)
        if k == "take" and sh and not self.manual:
            i = r.randrange(len(sh)); a, d = sh[i]
            ish = [(self.fresh_axis(), r.randint(1, 3))]
            idx = self.add_input("i32", ish, data=[float(r.randrange(d)) for _ in range(ish[0][1])], grad=False)
            return self.emit("take", [x, idx], dt, sh[:i] + ish + sh[i + 1:], axis=a)
        if k == "one_hot" and not self.manual:
            n, c = self.fresh_axis(), r.randint(1, 4)
            ish = [(self.fresh_axis(), r.randint(1, 3))]
            idx = self.add_input("i32", ish, data=[float(r.randint(-1, c)) for _ in range(ish[0][1])], grad=False)
            oh = self.emit("one_hot", [idx], dt, ish + [(n, c)], shape="%s=%d" % (n, c), dtype=dt)
            return self.emit("mul", [x, oh], dt, sh + [a for a in ish + [(n, c)] if a[0] not in axes]) if self.compat(x, oh) else oh
        if k == "causal" and len(sh) >= 2:
            q, kk = r.sample(axes, 2)
            fill = r.choice([-1e9, 0.0, "-inf"])
            y = self.emit("causal_mask", [x], dt, sh, q=q, k=kk, fill=fill)
            if fill == "-inf": y = self.emit("softmax", [y], dt, sh, axis=kk)
            return y
        if k == "xent" and sh and not self.manual:
            i = r.randrange(len(sh)); a, c = sh[i]
            rest = sh[:i] + sh[i + 1:]
            lab = self.add_input("i32", rest, data=[float(r.randrange(c)) for _ in range(int(np.prod([d for _, d in rest])) if rest else 1)], grad=False)
            ma = r.sample([n for n, _ in rest], r.randint(0, len(rest))) if rest else []
            kw = {"axis": a}
            if ma or r.random() < 0.5: kw["mean_axes"] = " ".join(ma)
            return self.emit("cross_entropy", [x, lab], dt, [t for t in rest if t[0] not in ma], **kw)
        if k == "cast" and r.random() < 0.3:  # through i32: truncation toward zero, no gradient
            i = self.emit("cast", [self.emit("muls", [x], dt, sh, s=3.0)], "i32", sh, dtype="i32")
            if not self.manual and self.r2.random() < 0.5: i = self.int_ops(i)  # (r2: each seed's program before it stays)
            return self.emit("mul", [x, self.emit("cast", [i], dt, self.vals[i][1], dtype=dt)], dt, sh)
        if k == "cast":
            nd = r.choice(["bf16", "f64"]) if dt == "f32" else "f32"
            y = self.emit("cast", [x], nd, sh, dtype=nd)
            return self.emit("cast", [self.emit("tanh", [y], nd, sh)], dt, sh, dtype=dt) if r.random() < 0.5 else y
        if k == "attention": return self.attention(x)
        if k == "name":
            nm = "n%d" % len(self.names); self.names.append(nm)
            return self.emit("checkpoint_name", [x], dt, sh, name=nm)
        if k == "coll":
            return self.collective(x)
        return None

    def attention(self, x):
        """tj_attention on new inputs q, k, v (0-2 batch axes, each input's
        axes in its own random order; not in shard_map, whose inputs are
        fixed) or with x as q: two of its axes are the query positions and
        dim, the rest batch axes, and k and v are made from x (a renamed
        position axis, sliced, concatenated or transposed; v sliced or
        padded along dim, so dim' may differ)"""
        r = self.r
        dt, sh = self.vals[x]
        kw = {"scale": r.choice([0.0, 0.0, 0.0, 0.125, 1.0, -0.7, 2.5]), "causal": int(r.random() < 0.5)}
        if not self.manual and (len(sh) < 2 or r.random() < 0.6):
            bs = [1, 2, 3, 4, 8] if not self.big else [1, 2, 3]
            batch = [(self.fresh_axis(), r.choice(bs)) for _ in range(r.choice([0, 1, 1, 2, 2]))]
            if self.odd: batch = [(n, self.odd_size(d)) for n, d in batch]  # (r7 alone)
            big = self.big and r.random() < 0.5  # several threads' rows, long dots
            tq = r.choice([1, 2, 3, 5, 8]) if not big else r.randint(20, 70)
            tk = r.choice([tq, tq, 1, r.randint(1, 9)]) if not big else r.choice([tq, r.randint(20, 90)])
            d = r.choice([1, 2, 3, 4, 8, 16]) if not big else r.choice([9, 32, 64])
            dv = r.choice([d, d, r.randint(1, 10)])
            qp, dm = self.fresh_axis(), self.fresh_axis()
            kp = qp if r.random() < 0.2 else self.fresh_axis()  # (k's positions may share q's name)
            def inp(shape):
                r.shuffle(shape)
                n = self.add_input(dt, shape)
                if hasattr(self, "mesh_axes"):  # on a mesh: placed by a random spec, batch axes among them
                    self.inputs[-1]["spec"] = self.random_spec(self.inputs[-1], 0.02)[0]
                return n
            q = inp(batch + [(qp, tq), (dm, d)])
            k = inp(batch + [(kp, tk), (dm, d)])
            v = inp(batch + [(kp, tk), (dm, dv)])
            return self.attention_gqa_mask(q, k, v, dt, batch, qp, kp, dm, tq, tk, dv, kw)
        if len(sh) < 2: return None
        qp, dm = r.sample([n for n, _ in sh], 2)
        batch = [a for a in sh if a[0] not in (qp, dm)]
        tq, d = dict(sh)[qp], dict(sh)[dm]
        kp = qp if r.random() < 0.3 else self.fresh_axis()
        k = x if kp == qp else self.emit("rename", [x], dt, [(kp, n) if m == qp else (m, n) for m, n in sh], **{"from": qp, "to": kp})
        ksh = self.vals[k][1]
        i = [n for n, _ in ksh].index(kp)
        how = r.choice(["same", "slice", "concat", "tanh"])
        if how == "slice" and tq > 1:
            st = r.randrange(tq)
            k = self.emit("slice", [k], dt, ksh[:i] + [(kp, tq - st)] + ksh[i + 1:], axis=kp, start=st, stop=tq)
        elif how == "concat":
            k = self.emit("concat", [k, self.emit("muls", [k], dt, ksh, s=-0.5)], dt, ksh[:i] + [(kp, 2 * tq)] + ksh[i + 1:], axis=kp)
        elif how == "tanh": k = self.emit("tanh", [k], dt, ksh)
        ksh = self.vals[k][1]
        v = self.emit("muls", [k], dt, ksh, s=r.choice([0.5, -2.0, 1.7]))
        j = [n for n, _ in ksh].index(dm)
        if r.random() < 0.3 and d > 1:
            v = self.emit("slice", [v], dt, ksh[:j] + [(dm, d - 1)] + ksh[j + 1:], axis=dm, start=1, stop=d)
        elif r.random() < 0.2:
            v = self.emit("pad", [v], dt, ksh[:j] + [(dm, d + 2)] + ksh[j + 1:], axis=dm, lo=1, hi=1, value=0.0)
        if r.random() < 0.5: k = self.shuffled(k)
        if r.random() < 0.5: v = self.shuffled(v)
        dv = dict(self.vals[v][1])[dm]
        return self.emit("attention", [x, k, v], dt, batch + [(qp, tq), (dm, dv)], qpos=qp, kpos=kp, dim=dm, **kw)

    def attention_gqa_mask(self, q, k, v, dt, batch, qp, kp, dm, tq, tk, dv, kw):
        """the attention op on new inputs q, k, v, maybe (r5 alone) with k
        and v indexed along some of the batch axes (grouped-query: shared
        over those) and with a mask: a new i32 input (nonzero: attend) over
        some of the batch axes, qpos and kpos, some of its rows all 0"""
        r5 = self.r5
        kb = [a for a in batch]
        if batch and r5.random() < 0.4:
            drop = r5.sample(batch, r5.randint(1, len(batch)))
            for n, sz in drop:
                i = r5.randrange(sz)
                for j in (0, 1):
                    x = k if j == 0 else v
                    sh = self.vals[x][1]
                    x = self.emit("index", [x], dt, [a for a in sh if a[0] != n], axis=n, i=i)
                    if j == 0: k = x
                    else: v = x
            kb = [a for a in batch if a not in drop]
        ins = [q, k, v]
        if r5.random() < 0.5:
            msh = [a for a in batch if r5.random() < 0.5]
            if qp != kp:
                if r5.random() < 0.6: msh.append((qp, tq))
                if r5.random() < 0.8: msh.append((kp, tk))
            r5.shuffle(msh)
            n = int(np.prod([sz for _, sz in msh])) if msh else 1
            data = [1 if r5.random() < 0.75 else 0 for _ in range(n)]
            if msh and r5.random() < 0.5:  # a row of the last axis all masked
                last = msh[-1][1]
                row = r5.randrange(n // last)
                data[row * last:(row + 1) * last] = [0] * last
            ins.append(self.add_input("i32", msh, data=data, grad=False))
        out = kb + [a for a in batch if a not in kb] + [(qp, tq), (dm, dv)]  # (k's batch axes first)
        # tinyjax lays its out as q's batch axes that k has, in q's order,
        # then the others, then qpos, dim; q's axes were shuffled, so that
        # may not be the order recorded above, which later draws read (a
        # stack of it with a value in the recorded order, tinyjax's one-type
        # stack, failed: seed 980905 --attention --mode checkpoint). Keeping
        # each seed's draws, the op then transposes to the recorded order.
        qb = [n for n, _ in self.vals[q][1] if n in dict(batch)]
        true = [n for n in qb if n in dict(kb)] + [n for n in qb if n not in dict(kb)] + [qp, dm]
        if true != [n for n, _ in out]: kw = dict(kw, order=" ".join(n for n, _ in out))
        return self.emit("attention", ins, dt, out, qpos=qp, kpos=kp, dim=dm, **kw)

    def int_ops(self, i):
        """i32 arithmetic on i and a new i32 input of edge values (every draw
        from r2): XLA's s32 ops wrap around, lax.div truncates and gives -1
        for x / 0 and INT32_MIN for INT32_MIN / -1, an i32 sum wraps (tinyjax
        saturated all of these until 2026-11-24)"""
        r2 = self.r2
        sh = self.vals[i][1]
        n = int(np.prod([d for _, d in sh])) if sh else 1
        edge = [0, 1, -1, 2, -3, 7, 46341, -65536, 2 ** 30, 2 ** 31 - 1, -2 ** 31, 1000000007]
        big = self.add_input("i32", sh, data=[r2.choice(edge) for _ in range(n)], grad=False)
        for _ in range(r2.randint(1, 3)):
            op = r2.choice(["add", "sub", "mul", "div", "neg", "max2", "min2"])
            a, b = (i, big) if r2.random() < 0.5 else (big, i)
            i = self.emit("neg", [a], "i32", sh) if op == "neg" else self.emit(op, [a, b], "i32", sh)
        if sh and r2.random() < 0.5:
            ax = r2.choice([nm for nm, _ in sh])
            i = self.emit("sum", [i], "i32", [t for t in sh if t[0] != ax], axes=ax)
        return i

    def shuffled(self, x):
        """x transposed to a random order"""
        dt, sh = self.vals[x]
        o = sh[:]; self.r.shuffle(o)
        return self.emit("transpose", [x], dt, o, order=" ".join(n for n, _ in o))

    def collective(self, x):
        r = self.r
        dt, sh = self.vals[x]
        mesh = self.mesh_axes
        c = r.choice(["psum", "pmax", "all_gather", "psum_scatter", "ppermute", "axis_index", "all_to_all", "pvary"])
        sub = [a for a in mesh if r.random() < 0.6] or [r.choice(mesh)]
        if len(sub) > 1 and self.r2.random() < 0.5:
            # out of mesh order ("model data"): JAX numbers the group, and orders
            # gathered or scattered blocks, in the order given (tinyjax used mesh order)
            self.r2.shuffle(sub)
        n = int(np.prod([self.mesh_size[a] for a in sub]))
        ms = " ".join(sub)
        if c in ("psum", "pmax"):
            if c == "pmax":  # JAX has no derivative of pmax: differentiate around it
                x = self.emit("stop_gradient", [x], dt, sh)
            part = [a for a in sub if a not in self.vary[x]]
            if self.check and 0 < len(part) < len(sub):
                # tinyjax makes x vary over all of them first; JAX 0.10 refuses a mix: say it
                x = self.emit("pvary", [x], dt, sh, mesh_axes=" ".join(part))
                self.vary[x] = self.vary[x] | set(part)
            y = self.emit(c, [x], dt, sh, mesh_axes=ms)
            self.vary[y] = self.vary[x] - set(sub)
            return y
        if c == "all_gather" and sh:
            i = r.randrange(len(sh)); a, d = sh[i]
            y = self.emit("all_gather", [x], dt, sh[:i] + [(a, d * n)] + sh[i + 1:], mesh_axes=ms, axis=a)
            self.vary[y] = self.vary[x] | set(sub)
            return y
        if c == "psum_scatter" and sh:
            ok = [i for i, (a, d) in enumerate(sh) if d % n == 0]
            if not ok: return None
            i = r.choice(ok); a, d = sh[i]
            part = [m for m in sub if m not in self.vary[x]]
            if self.check and 0 < len(part) < len(sub):
                # as psum: tinyjax makes x vary over all of them first; JAX 0.10 refuses a mix (seed 400222)
                x = self.emit("pvary", [x], dt, sh, mesh_axes=" ".join(part))
                self.vary[x] = self.vary[x] | set(part)
            y = self.emit("psum_scatter", [x], dt, sh[:i] + [(a, d // n)] + sh[i + 1:], mesh_axes=ms, axis=a)
            self.vary[y] = self.vary[x] | set(sub)
            return y
        if c == "ppermute":
            a1 = r.choice(mesh); m = self.mesh_size[a1]
            perm = list(range(m)); r.shuffle(perm)
            pairs = []
            for i in range(m):
                if r.random() < 0.8: pairs += [i, perm[i]]
            if not pairs: pairs = [0, perm[0]]
            y = self.emit("ppermute", [x], dt, sh, mesh_axes=a1, pairs=pairs)
            self.vary[y] = self.vary[x] | {a1}
            return y
        if c == "pvary":
            nv = [a for a in sub if a not in self.vary[x]]
            if not nv: return None
            y = self.emit("pvary", [x], dt, sh, mesh_axes=" ".join(nv))
            self.vary[y] = self.vary[x] | set(nv)
            return y
        if c == "all_to_all" and len(sh) >= 2:
            i, j = r.sample(range(len(sh)), 2)
            if sh[i][1] % n: return None
            out = list(sh); out[i] = (sh[i][0], sh[i][1] // n); out[j] = (sh[j][0], sh[j][1] * n)
            y = self.emit("all_to_all", [x], dt, out, mesh_axes=ms, split_axis=sh[i][0], concat_axis=sh[j][0])
            self.vary[y] = self.vary[x] | set(sub)
            return y
        if c == "axis_index":
            i = self.emit("axis_index", [], "i32", [], mesh_axes=ms)
            self.vary[i] = set(sub)
            f = self.emit("cast", [i], dt, [], dtype=dt)
            return self.emit("add", [x, f], dt, sh)
        return None

    def random_spec(self, x, odd):
        """a random sharding of input x: each axis over an unused mesh axis
        that divides it (or, with probability odd, one that does not)"""
        r, parts = self.r, {}
        for a, d in parse_shape(x["shape"]):
            free = [m for m in self.mesh_axes if m not in parts.values() and (d % self.mesh_size[m] == 0 or r.random() < odd)]
            if free and r.random() < 0.6: parts[a] = r.choice(free)
        if self.manual and len(self.mesh_axes) > 1 and not parts and self.r2.random() < 0.4:
            # a shard_map spec splitting one axis over a tuple, in either order
            # ("batch:model+data"): its blocks follow the order given, as in JAX
            tup = list(self.mesh_axes); self.r2.shuffle(tup)
            n = int(np.prod([self.mesh_size[m] for m in tup]))
            ok = [a for a, d in parse_shape(x["shape"]) if d % n == 0]
            if ok:
                a = self.r2.choice(ok)
                spec = "%s:%s" % (a, "+".join(tup))
                return spec, {a: "+".join(tup)}
        return " ".join("%s:%s" % t for t in parts.items()), parts

    def odd_size(self, d):
        """--odd-meshes, an attention's batch axis: d, or (r7) a size the
        mesh's axes divide"""
        if self.r7.random() >= 0.6: return d
        sz = list(getattr(self, "mesh_size", {}).values()) or [3, 5, 6, 7]
        return self.r7.choice(sz + ([int(np.prod(sz))] if len(sz) > 1 else []))

    def odd_pool(self, pool, spec):
        """--odd-meshes (r7 alone): some of the input axes' sizes become a
        mesh axis's size, a product of them, or twice one (3, 5, 6, 7, 14 ..),
        so the random shardings can split them; without a mesh, 3, 5, 6 or 7"""
        r7 = self.r7
        if "mesh" in spec:
            sz = list(self.mesh_size.values())
            cands = sz + ([int(np.prod(sz))] if len(sz) > 1 else [])
        else: cands = [3, 5, 6, 7]
        out = []
        for a, d in pool:
            if r7.random() < 0.7:
                d = r7.choice(cands) * r7.choice([1, 1, 1, 2])
            out.append((a, d))
        return out

    def make(self):
        r = self.r
        dt = self.dtype
        pool = [("a", r.randint(1, 4)), ("b", r.choice([2, 4])), ("c", r.randint(1, 3)), ("d", r.choice([2, 4, 8]))]
        mode = self.mode
        spec = {"mode": mode}
        on = mode in ("sharded", "shard_map") or (mode in ("scan", "checkpoint") and r.random() < 0.3)
        mesh = r.choice(MESHES) if on else None
        # --odd-meshes (r7 alone): 9 in 10 meshes odd, and scan and checkpoint on one more often
        if self.odd and (on or mode in ("scan", "checkpoint") and self.r7.random() < 0.5) and (not on or self.r7.random() < 0.9):
            mesh = self.r7.choice(ODD_MESHES)
        if mesh:
            mesh, ndev = mesh
            spec["mesh"], spec["devices"] = mesh, ndev
            self.mesh_axes = [t.split("=")[0] for t in mesh.split()]
            self.mesh_size = {t.split("=")[0]: int(t.split("=")[1]) for t in mesh.split()}
        if self.odd: pool = self.odd_pool(pool, spec)
        nin = r.randint(1, 3)
        for _ in range(nin):
            sh = r.sample(pool, r.randint(0, 3))
            self.add_input(dt, sh)
        if mode == "scan":
            T = r.randint(1, 3)
            carry = self.inputs[0]["name"]
            xs = []
            for x in self.inputs[1:]:  # stacked over "L": the body sees one slice
                sh = [("L", T)] + parse_shape(x["shape"])
                x["shape"] = " ".join("%s=%d" % a for a in sh)
                x["data"] = self.data(dt, int(np.prod([s for _, s in sh])))
                xs.append(x["name"])
            spec["scan"] = {"axis": "L" if xs else "L=%d" % T, "carry": [carry], "xs": xs}
            if r.random() < 0.4: spec["scan"]["reverse"] = 1
        if mode == "shard_map":
            self.manual = True
            specs = []
            for x in self.inputs:
                sp, parts = self.random_spec(x, 0.03)
                specs.append(sp)
                self.vary[x["name"]] = set(m for v in parts.values() for m in v.split("+"))
                # the body sees local blocks
                self.vals[x["name"]] = (x["dtype"], [(a, d // int(np.prod([self.mesh_size[m] for m in parts[a].split("+")])) if a in parts else d) for a, d in parse_shape(x["shape"])])
            spec["in_specs"] = specs
            spec["check"] = self.check = 1 if r.random() < 0.75 else 0
        if "mesh" in spec and mode != "shard_map":
            for x in self.inputs:
                x["spec"] = self.random_spec(x, 0.05)[0]
        nops = r.randint(3, 10)
        tries = 0
        while self.attn and tries < 10 and not any(o["op"] == "attention" for o in self.ops):  # --attention: one first
            tries += 1
            self.attention(r.choice(self.floats()))
        while len([o for o in self.ops]) < nops and tries < 40:
            tries += 1
            y = self.step()
            if y and not self.manual and self.r2.random() < 0.15: self.arange_op(y)  # (r2: each seed's program before it stays)
            if y and self.r4.random() < 0.25: self.new_unary_op(y)  # (r4: each seed's program before it stays)
            if y and self.cvjp == 1 and (self.r3.random() < 0.2 or not any(o["op"] == "custom_vjp" for o in self.ops)):
                self.custom_vjp_op(y)  # (--custom-vjp: also inside the program, its outputs used by the ops after it)
        made = [o["out"] for o in self.ops if self.vals[o["out"]][0] != "i32" or r.random() < 0.3]
        if not made: return None
        outs = [made[-1]] + [m for m in r.sample(made, min(len(made), r.randint(0, 2))) if m != made[-1]]
        if mode == "shard_map":
            outs = [o for o in outs if self.vals[o][0] != "i32"] or [made[-1]]
            ospecs, oaxes = [], {}
            for i, o in enumerate(outs):
                dt_o, sh = self.vals[o]
                vs = [m for m in self.mesh_axes if m in self.vary[o]]
                if len(vs) > 1 and self.r2.random() < 0.3: self.r2.shuffle(vs)  # an out_spec tuple out of mesh order
                if vs and not sh:  # (unchecked too: replicating a varying value is the caller's error, unspecified in both)
                    o = outs[i] = self.emit("psum", [o], dt_o, sh, mesh_axes=" ".join(vs)); vs = []; self.vary[o] = set()  # (invariant now: custom_vjp_tail reads it)
                if vs and sh: ospecs.append("%s:%s" % (sh[0][0], "+".join(vs)))
                elif not spec["check"] and sh and r.random() < 0.3: ospecs.append("%s:%s" % (sh[0][0], "+".join(self.mesh_axes)))
                else: ospecs.append("")
                oaxes[o] = [n for n, _ in sh]
            spec["out_specs"], spec["out_axes"] = ospecs, oaxes
        if mode == "scan":
            c = spec["scan"]["carry"][0]; cdt, csh = self.vals[c]
            src = outs[0]; sdt, ssh = self.vals[src]
            if sdt == "i32": src = c; sdt, ssh = cdt, csh
            extra = [n for n, _ in ssh if n not in dict(csh) or dict(csh)[n] != dict(ssh)[n]]
            v = self.emit("sum", [src], sdt, [t for t in ssh if t[0] not in extra], axes=" ".join(extra)) if extra else src
            if sdt != cdt: v = self.emit("cast", [v], cdt, self.vals[v][1], dtype=cdt)
            v = self.emit("add", [c, v], cdt, csh)
            v = self.emit("tanh", [v], cdt, csh)
            spec["scan"]["carry_out"] = [v]
        if mode in ("checkpoint", "scan") and (mode == "checkpoint" or r.random() < 0.7):
            pol = r.choice(list(POLICIES))
            nm = " ".join(r.sample(self.names, r.randint(0, len(self.names)))) if self.names else ""
            if pol == "save_and_offload_only_these_names":
                half = nm.split(); k = len(half) // 2
                nm = " ".join(half[:k]) + "|" + " ".join(half[k:])
            spec["policy"] = pol + (":" + nm if pol in ("save_only_these_names", "save_any_names_but_these", "save_and_offload_only_these_names", "save_from_both") else "")
        if self.cvjp >= 0 and self.r3.random() < (1.0 if self.cvjp else 0.3): self.custom_vjp_tail(outs, spec)
        if self.r6.random() < 0.5: self.more_ops_tail(outs, spec)  # (r6: each seed's program before it stays)
        if self.more: self.more2_tail(outs, spec)  # (--more-ops, r8 alone: each seed's program without the flag stays)
        if self.xpad: self.xpad_tail(outs, spec)  # (--xent-padded, r9 alone)
        spec["inputs"], spec["ops"], spec["outputs"] = self.inputs, self.ops, outs
        return spec

def finish(spec, rnd):
    """spec with the dtype of each result and a loss weight for each float
    output (random normal values; JAX's forward run gives the shapes)"""
    spec["weights"] = {}
    lo = eval_jax(spec, exact=False)
    spec["_dtypes"] = {k: result_dtype(spec, k) for k in lo}
    tail = spec.get("_tail", [])  # (custom_vjp_tail's output draws last: the others' weights stay the seed's)
    for k, (a, axes) in [kv for kv in lo.items() if kv[0] not in tail] + [kv for kv in lo.items() if kv[0] in tail]:
        if k == "loss" or k.startswith("grad:") or k.startswith("grad2:") or spec["_dtypes"][k] == "i32": continue
        shape = " ".join("%s=%d" % (n, s) for n, s in zip(axes, a.shape))
        spec["weights"][k] = {"shape": shape, "data": round_to(np.array([rnd.gauss(0, 1) for _ in range(a.size)]), "f32").tolist()}
    return spec

def result_dtype(spec, k):
    if k == "loss": return "f32"
    if k.startswith("grad:") or k.startswith("grad2:"):
        n = k.split(":", 1)[1]
        return [x["dtype"] for x in spec["inputs"] if x["name"] == n][0]
    if k.startswith("carry:"):
        n = k[6:]
        return [x["dtype"] for x in spec["inputs"] if x["name"] == n][0]
    dt = {x["name"]: x["dtype"] for x in spec["inputs"]}
    for op in spec["ops"]:
        if op["op"] in ("lt", "le", "gt", "ge", "eq", "ne", "axis_index", "argmax", "argmin"): dt[op["out"]] = "i32"
        elif op["op"] in ("cast", "one_hot", "arange"): dt[op["out"]] = op["dtype"]
        else: dt[op["out"]] = dt[op["in"][0]] if op["op"] != "select" else dt[op["in"][1]]
        for n in op.get("more_out", []): dt[n] = dt[op["out"]]  # (custom_vjp: each output in its first input's dtype)
    return dt[k]

def add_second(spec, seed):
    """the second-order check: u_x for each float input with a gradient
    (random normal, f32; their own stream, so the program is the one the
    seed makes without it)"""
    r = random.Random(seed + 7919)
    special = any(isinstance(v, str) for x in spec["inputs"] for v in x["data"])
    if special and any(op["op"] == "attention" for op in spec["ops"]):
        # tj_attention's second derivative is its composed form's (dense,
        # as JAX's): a NaN or inf in a key or value a query cannot see meets
        # a 0 there, where the reference skips the pair (first order: both skip)
        return spec
    spec["second"] = {x["name"]: round_to(np.array([r.gauss(0, 1) for _ in x["data"]]), "f32").tolist()
                      for x in spec["inputs"] if x["dtype"] != "i32" and x.get("grad", True)}
    return spec

def make_spec(seed, mode=None, dtype=None, big=False, attn=False, second=False, cvjp=0, odd=False, more=False, xpad=False):
    """seed's program with its loss weights; a program JAX refuses comes back
    with expect_error (tinyjax must refuse it too). second: with the
    second-order check (grad2:x, see add_second and eval_jax). cvjp: 0, 3 in
    10 programs end with a custom_vjp op (Gen.custom_vjp_tail); 1, also
    custom_vjp ops among the others; -1, none"""
    for attempt in range(20):
        g = Gen(seed * 1000 + attempt, mode, dtype, big, attn, cvjp, odd, more, xpad)
        spec = g.make()
        if spec is None: continue
        if second: add_second(spec, seed)
        try:
            return finish(spec, random.Random(seed))
        except Exception as e:
            msg = str(e).split("\n")[0][:300]
            if os.environ.get("JAX_DIFF_DEBUG"): print("seed %d attempt %d: JAX: %s" % (seed, attempt, msg))
            if "second" in spec:  # JAX has no second derivative of an op (pmax): the first-order check only
                del spec["second"]
                try:
                    spec = finish(spec, random.Random(seed))
                    spec["_second_jax_error"] = msg
                    return spec
                except Exception as e2:
                    msg = str(e2).split("\n")[0][:300]
            if "Differentiation rule" in msg or "not implemented" in msg:
                # JAX cannot differentiate an op of it (pmax): compare the
                # forward values and the loss only (tinyjax's gradients of
                # those ops have finite-difference checks in tests/)
                for x in spec["inputs"]: x["grad"] = False
                try:
                    return finish(spec, random.Random(seed))
                except Exception as e2:
                    msg = str(e2).split("\n")[0][:300]
                    if "Differentiation rule" in msg or "not implemented" in msg: continue  # not even forward: another program
            spec["_jax_error"] = msg
            spec["expect_error"] = "not divisible" if "divisible" in msg or "evenly divide" in msg else ""
            spec["_dtypes"] = {}
            return spec
    return None

REFUSED = {}  # tinyjax's refusals of the second-order check: message -> seeds

def check(spec):
    """[] when tinyjax agrees with JAX on spec, else the mismatch lines"""
    got = run_tinyjax(spec)
    if "second" in spec and "error" in got and "expect_error" not in spec:
        # tinyjax refuses a second derivative: recorded; the rest is
        # compared without the second-order results
        first = {k: v for k, v in spec.items() if k != "second"}
        g1 = run_tinyjax(first)
        if "error" not in g1:
            REFUSED.setdefault(got["error"][:160], []).append(spec.get("_seed"))
            spec, got = first, g1
    if "expect_error" in spec:
        if "error" in got and spec["expect_error"] in got["error"] and "runner crashed" not in got["error"]: return []
        return ["JAX refused (%s); tinyjax: %s" % (spec.get("_jax_error", "")[:200], got.get("error", "ran"))]
    try:
        exp = expected(spec)
    except Exception:
        # in long runs JAX sometimes fails on a mesh the program does not use
        # (state kept from an earlier program; the same seed agrees in a fresh
        # process): once more with its caches cleared
        jax.clear_caches()
        try:
            exp = expected(spec)
        except Exception as e:
            return ["JAX failed: %s" % str(e)[:300]]
    return compare(exp, got)

def shrink(spec, bad):
    """drop ops (their result becomes their first operand) while it still fails"""
    cur = copy.deepcopy(spec)
    used = set(cur["outputs"]) | set(cur.get("scan", {}).get("carry_out", []))
    outs_of = lambda op: [op["out"]] + op.get("more_out", [])
    for op in reversed(cur["ops"]):  # dead code first
        if used & set(outs_of(op)): used |= set(op.get("in", []))
    cur["ops"] = [op for op in cur["ops"] if used & set(outs_of(op))]
    changed = True
    while changed:
        changed = False
        for i in range(len(cur["ops"]) - 1, -1, -1):
            op = cur["ops"][i]
            if not op.get("in"): continue
            if any(n in o.get("in", []) or n in cur["outputs"] for n in op.get("more_out", []) for o in cur["ops"]): continue  # (a second output in use)
            trial = copy.deepcopy(cur)
            del trial["ops"][i]
            sub = op["in"][0]
            if result_dtype(cur, sub) != result_dtype(cur, op["out"]): continue
            for o in trial["ops"]:
                o["in"] = [sub if n == op["out"] else n for n in o.get("in", [])]
            trial["outputs"] = [sub if n == op["out"] else n for n in trial["outputs"]]
            if "scan" in trial: trial["scan"]["carry_out"] = [sub if n == op["out"] else n for n in trial["scan"]["carry_out"]]
            if "out_axes" in trial and op["out"] in trial["outputs"]: continue
            if len(set(trial["outputs"])) != len(trial["outputs"]) or sub in [x["name"] for x in trial["inputs"]] and sub in trial["outputs"]: continue
            try:
                trial = finish(trial, random.Random(0))
                b = check(trial)
            except Exception:
                continue
            if b and not any("JAX failed" in x for x in b) and (("tinyjax error" in b[0]) == ("tinyjax error" in bad[0])):
                cur, changed = trial, True
                break
    return cur

def show(spec):
    s = {k: v for k, v in spec.items() if not k.startswith("_")}
    lines = []
    for k, v in s.items():
        if isinstance(v, list) and v and isinstance(v[0], dict): lines.append(' "%s": [\n  %s]' % (k, ",\n  ".join(json.dumps(x) for x in v)))
        else: lines.append(' "%s": %s' % (k, json.dumps(v)))
    return "{\n" + ",\n".join(lines) + "}"

SECOND_SHARE = 4  # without --second, seeds that are multiples of this have the second-order check

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--mode")
    ap.add_argument("--dtype")
    ap.add_argument("--show", action="store_true")
    ap.add_argument("--big", action="store_true", help="also dots of 65..130 (the packed matmul kernel)")
    ap.add_argument("--attention", action="store_true", help="every program has a tj_attention (its first op when it can)")
    ap.add_argument("--custom-vjp", action="store_true", help="every program has tj_custom_vjp (jax.custom_vjp) ops, also inside it (else 3 in 10 programs have one after the rest)")
    ap.add_argument("--no-custom-vjp", action="store_true", help="no custom_vjp: each seed's program as before custom_vjp ops existed")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--second", action="store_true", help="every program also compares second derivatives: d L2 / d x, L2 = sum_x sum(u_x dL/dx)")
    ap.add_argument("--no-second", action="store_true", help="no second-order check (else 1 seed in %d has it)" % SECOND_SHARE)
    ap.add_argument("--odd-meshes", action="store_true", help="meshes of 3, 5, 6 and 7 devices (x=3, x=5, x=7, x=6, data=3 model=2, data=2 model=3) and input axes their sizes divide")
    ap.add_argument("--more-ops", action="store_true", help="also tj_cross_entropy_ignore, tj_with_sharding_constraint and the offload_dot_with_no_batch_dims policy, after the rest (stream r8: without the flag each seed's program is as before)")
    ap.add_argument("--xent-padded", action="store_true", help="also 1-2 tj_cross_entropy_padded ops after the rest (bf16 logits widened to f32 in 6 of 10), against the cross-entropy of the logits sliced to their classes (stream r9)")
    ap.add_argument("--vjp", action="store_true", help="tinyjax's gradients by tj_vjp with the loss weights as the outputs' cotangents (as given: JAX's axis order, replicated), not tj_grad of the loss; the programs are the same")
    ap.add_argument("--golden", help="write the CI goldens into this folder")
    ap.add_argument("--only", help="with --golden: these files only (edge,jit_f32,jit_bf16,sharded,scan,checkpoint,shard_map,attention)")
    a = ap.parse_args()
    if a.golden: return write_golden(a.golden, a.only.split(",") if a.only else None)
    if not os.path.exists(RUNNER): sys.exit("jax_diff.py: build the runner first: ./build.sh build (makes %s)" % RUNNER)
    # a runner older than the library it was built from tests old code (./build.sh test does not rebuild it)
    srcs = [os.path.join(ROOT, f) for f in ("tinyjax.h", os.path.join("tools", "jax_diff_run.c"))]
    if "JAX_DIFF_RUNNER" not in os.environ and any(os.path.getmtime(f) > os.path.getmtime(RUNNER) for f in srcs if os.path.exists(f)):
        sys.exit("jax_diff.py: %s is older than tinyjax.h or tools/jax_diff_run.c: rebuild it (./build.sh build)" % RUNNER)
    seeds = [a.seed] if a.seed is not None else range(a.start, a.start + a.seeds)
    nbad = nrun = 0
    for s in seeds:
        spec = make_spec(s, a.mode, a.dtype, a.big, a.attention, a.second or (s % SECOND_SHARE == 0 and not a.no_second),
                         1 if a.custom_vjp else -1 if a.no_custom_vjp else 0, a.odd_meshes, a.more_ops, a.xent_padded)
        if spec is None: continue
        if a.vjp: spec["vjp"] = 1
        spec["_seed"] = s
        if spec.get("_second_jax_error"): print("seed %d: JAX has no second derivative here (%s): first order only" % (s, spec["_second_jax_error"][:160]))
        nrun += 1
        if a.show: print(show(spec))
        bad = check(spec)
        if bad:
            nbad += 1
            print("seed %d (%s, %s): MISMATCH\n  %s" % (s, spec["mode"], spec["inputs"][0]["dtype"], "\n  ".join(bad)))
            if not a.no_shrink:
                m = shrink(spec, bad)
                print("  minimal reproduction (%d ops):\n%s\n  %s" % (len(m["ops"]), show(m), "\n  ".join(check(m))))
        elif a.show or a.seed is not None: print("seed %d (%s): agree" % (s, spec["mode"]))
    for m, ss in REFUSED.items(): print("tinyjax refused the second derivative (%d programs, seeds %s): %s" % (len(ss), ss[:10], m))
    print("%d programs, %d mismatches" % (nrun, nbad))
    return 1 if nbad else 0

# ---------------------------------------------------------------- goldens --
GOLDEN_SETS = [("jit", "f32", 60), ("jit", "bf16", 40), ("sharded", None, 40), ("scan", None, 40), ("checkpoint", None, 50), ("shard_map", None, 40),
               ("attention", None, 40)]  # (attention: any mode, a tj_attention in each)
GOLDEN_MAX_INPUT = 160  # attention.json: programs with at most this many input elements (the file stays small)

def X(name, dt, shape, data, **kw):
    d = {"name": name, "dtype": dt, "shape": shape, "data": data}
    d.update(kw)
    return d

def O(op, ins, out, **kw):
    d = {"op": op, "in": ins, "out": out}
    d.update(kw)
    return d

# The mismatches jax_diff found, each kept as a regression test (edge.json),
# and the edges the random programs reach rarely. expect_error: tinyjax
# refuses where JAX gives a value; each such difference is documented in
# tinyjax.h at the op and in README's list of differences from JAX.
NAN, INF = "nan", "inf"
EDGE = [
    # max2/min2 returned the other operand for a NaN one (JAX: NaN)
    {"mode": "jit", "inputs": [X("x0", "f32", "a=4", [NAN, 1.0, -2.0, NAN]), X("x1", "f32", "a=4", [0.5, NAN, 3.0, NAN])],
     "ops": [O("max2", ["x0", "x1"], "v0"), O("min2", ["x0", "x1"], "v1")], "outputs": ["v0", "v1"]},
    {"mode": "jit", "inputs": [X("x0", "bf16", "a=3", [NAN, 1.0, -2.0]), X("x1", "bf16", "", [0.5])],
     "ops": [O("max2", ["x0", "x1"], "v0"), O("min2", ["x1", "x0"], "v1")], "outputs": ["v0", "v1"]},
    # relu(NaN) was 0 (JAX: NaN)
    {"mode": "jit", "inputs": [X("x0", "f32", "a=4", [NAN, -1.0, 0.0, 2.0])], "ops": [O("relu", ["x0"], "v0")], "outputs": ["v0"]},
    # reduce max/min's gradient multiplies the cotangent by the 0/1 mask, as
    # JAX's rule does: 0 * inf = NaN at the other elements (XLA's jit may
    # rewrite JAX's multiply into a select; specials are compared op by op)
    {"mode": "jit", "inputs": [X("x0", "f32", "d=4 c=2", [-1.04558492, -0.0, INF, "-inf", 0.0, 0.0, 0.0, "-inf"])],
     "ops": [O("max", ["x0"], "v0", axes="c"), O("dot", ["v0", "x0"], "v2", contract="d")], "outputs": ["v2"]},
    {"mode": "jit", "inputs": [X("x0", "f32", "d=3 c=2", [1.0, INF, 2.0, 2.0, "-inf", -3.0])],
     "ops": [O("min", ["x0"], "v0", axes="c"), O("mul", ["v0", "x0"], "v1")], "outputs": ["v1"]},
    # negative padding crops (lax.pad); tinyjax refused it
    {"mode": "jit", "inputs": [X("x0", "f32", "a=4 b=2", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])],
     "ops": [O("pad", ["x0"], "v0", axis="a", lo=-1, hi=2, value=-1.5), O("pad", ["x0"], "v1", axis="a", lo=1, hi=-3, value=0.0),
             O("pad", ["x0"], "v2", axis="b", lo=-1, hi=0, value=0.0)], "outputs": ["v0", "v1", "v2"]},
    # ... and cropping every element is an error (JAX: an empty axis, which tinyjax has not)
    {"mode": "jit", "inputs": [X("x0", "f32", "a=4", [0.1, 0.2, 0.3, 0.4])], "ops": [O("pad", ["x0"], "v0", axis="a", lo=-2, hi=-2, value=0.0)],
     "outputs": ["v0"], "expect_error": "leaves no element"},
    # cross_entropy over a sharded class axis gave the labels the class axis's mesh split
    {"mode": "sharded", "mesh": "data=2 model=2", "devices": 4,
     "inputs": [X("x1", "f32", "b=2 c=3 a=4", [0.35, 0.18, -0.62, 0.16, 0.34, -0.03, -0.63, -0.93, 0.17, 0.96, 1.06, 0.24,
                                                  1.06, -0.54, -0.58, -0.25, -1.35, 0.39, 0.78, 0.74, -0.34, -1.45, 0.81, -0.13], spec="b:data a:model"),
                X("x2", "i32", "c=3 a=4", [1, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1], grad=False)],
     "ops": [O("cross_entropy", ["x1", "x2"], "v0", axis="b", mean_axes="a c")], "outputs": ["v0"]},
    # the vocab-parallel cross_entropy (class axis split: per-block
    # statistics, gathered and combined): a block of -inf, labels at the
    # blocks' edges, second derivatives; and a 4-way split
    {"mode": "sharded", "mesh": "model=2", "devices": 2,
     "inputs": [X("x1", "f32", "a=3 c=8", [0.5, -1.2, 2.0, 0.1, -0.3, 0.8, 1.1, -2.0,
                                           1.5, 0.25, -0.75, 3.0, "-inf", "-inf", "-inf", "-inf",
                                           -40.0, 12.0, 0.0, -3.5, 7.25, 30.0, -8.0, 1.0], spec="c:model"),
                X("x2", "i32", "a=3", [3, 0, 4], grad=False)],
     "ops": [O("cross_entropy", ["x1", "x2"], "v0", axis="c", mean_axes="")], "outputs": ["v0"],
     "second": {"x1": [0.3, -1.1, 0.7, 0.2, -0.5, 1.3, -0.9, 0.4, 1.0, -0.2, 0.6, -1.4, 0.8, 0.1, -0.7, 0.5,
                       -0.3, 0.9, -1.2, 0.25, 0.45, -0.65, 1.1, -0.15]}},
    {"mode": "sharded", "mesh": "data=2 model=2", "devices": 4,
     "inputs": [X("x1", "f32", "b=2 c=8", [0.35, 0.18, -0.62, 0.16, 0.34, -0.03, -0.63, -0.93,
                                           0.17, 0.96, 1.06, 0.24, 1.06, -0.54, -0.58, -0.25], spec="c:data+model"),
                X("x2", "i32", "b=2", [1, 6], grad=False)],
     "ops": [O("cross_entropy", ["x1", "x2"], "v0", axis="c", mean_axes="b")], "outputs": ["v0"]},
    # cross_entropy's gradient recovered the row's lse as loss + z[label]:
    # inf + -inf = NaN for a label whose logit is -inf (JAX: softmax - onehot)
    {"mode": "checkpoint", "policy": "dots_saveable",
     "inputs": [X("x1", "f32", "a=2 c=3", ["-inf", 0.65, 0.25, 0.71, 0.0, -1.5]), X("x3", "i32", "a=2", [0, 2], grad=False)],
     "ops": [O("cross_entropy", ["x1", "x3"], "v0", axis="c", mean_axes="")], "outputs": ["v0"]},
    {"mode": "jit", "inputs": [X("x1", "f32", "a=2 c=3", ["-inf", 0.65, 0.25, 0.71, "-inf", -1.5]), X("x3", "i32", "a=2", [0, 1], grad=False)],
     "ops": [O("cross_entropy", ["x1", "x3"], "v0", axis="c")], "outputs": ["v0"]},
    # ... and the loss, stored in f32, carries |loss| ulps into every
    # probability: a label logit far below the row's max (loss 1177) gave
    # 2e-5 relative error (seed 70010; now such rows recompute max and sum)
    {"mode": "jit", "inputs": [X("x1", "f32", "a=2 c=8", [-0.0116, 1.1926, -1157.45, 19.449, -6.9716, 9.1641, 16.157, -0.0893,
                                                           0.3, -0.2, 1.5, 0.7, -1.1, 0.05, 2.0, -0.4]),
                               X("x3", "i32", "a=2", [2, 6], grad=False)],
     "ops": [O("cross_entropy", ["x1", "x3"], "v0", axis="c")], "outputs": ["v0"]},
    # softmax and log_softmax of rows with -inf, a fully masked row (NaN in both)
    {"mode": "jit", "inputs": [X("x0", "f32", "q=3 k=3", ["-inf", 1.0, "-inf", "-inf", "-inf", "-inf", 0.5, 0.5, 2.0])],
     "ops": [O("softmax", ["x0"], "v0", axis="k"), O("log_softmax", ["x0"], "v1", axis="k")], "outputs": ["v0", "v1"]},
    # causal mask with -inf, then softmax (attention)
    {"mode": "jit", "inputs": [X("x0", "f32", "q=3 k=3", [0.1, -0.2, 0.3, 1.0, 2.0, -1.0, 0.0, 0.5, 0.25])],
     "ops": [O("causal_mask", ["x0"], "v0", q="q", k="k", fill="-inf"), O("softmax", ["v0"], "v1", axis="k")], "outputs": ["v1"]},
    # layer_norm of a constant row (variance 0: eps alone), sizes 1
    {"mode": "jit", "inputs": [X("x0", "f32", "a=2 e=3", [2.0, 2.0, 2.0, 1.0, -1.0, 0.5]), X("x1", "f32", "e=1 a=2", [0.3, -0.7])],
     "ops": [O("layer_norm", ["x0"], "v0", axis="e", eps=0.1), O("layer_norm", ["x1"], "v1", axis="e", eps=1e-5),
             O("sum", ["x1"], "v2", axes="e"), O("dot", ["x1", "x1"], "v3", contract="e")], "outputs": ["v0", "v1", "v2", "v3"]},
    # one_hot of out-of-range indices: a zero row (as jax.nn.one_hot)
    {"mode": "jit", "inputs": [X("x0", "i32", "n=4", [-1, 0, 2, 3], grad=False), X("x1", "f32", "c=3", [1.0, 2.0, 3.0])],
     "ops": [O("one_hot", ["x0"], "v0", shape="c=3", dtype="f32"), O("mul", ["v0", "x1"], "v1")], "outputs": ["v1"]},
    # take: an index out of range is a run-time error (JAX clamps or fills)
    {"mode": "jit", "inputs": [X("x0", "f32", "v=3", [1.0, 2.0, 3.0]), X("x1", "i32", "n=2", [0, 3], grad=False)],
     "ops": [O("take", ["x0", "x1"], "v0", axis="v")], "outputs": ["v0"], "expect_error": "out of range"},
    # pows at 0 and of negatives with integer powers; gelu (tanh form) and its gradient
    {"mode": "jit", "inputs": [X("x0", "f32", "a=5", [0.0, -2.0, 1.5, -0.5, 3.0])],
     "ops": [O("pows", ["x0"], "v0", s=3.0), O("pows", ["x0"], "v1", s=2.0), O("gelu", ["x0"], "v2")], "outputs": ["v0", "v1", "v2"]},
    # tanh's gradient near saturation: 1 - y*y (tinyjax) and (1 + y)(1 - y)
    # (JAX) both round at the scale of 1, 3e-11 apart relative in f64 at
    # tanh = 1 - 4e-6; the tolerance's spread sees it since the derivative's
    # y is moved by a rounding too (this was a false mismatch before that)
    {"mode": "jit", "inputs": [X("x0", "f64", "a=4", [7.7, -6.5, 3.0, 0.25]), X("x1", "f32", "a=3", [5.0, -4.5, 8.0])],
     "ops": [O("tanh", ["x0"], "v0"), O("tanh", ["x1"], "v1")], "outputs": ["v0", "v1"]},
    # max2's gradient was g*winner + (g*tie)/2: an infinite g gave inf + 0*inf =
    # NaN at the winner (JAX: g times one weight 1, 1/2 or 0)
    {"mode": "jit", "inputs": [X("x0", "f32", "", [2.0]), X("x1", "f32", "a=2", ["-inf", -0.0])],
     "ops": [O("max2", ["x1", "x0"], "v0"), O("div", ["x1", "v0"], "v1")], "outputs": ["v1", "v0"]},
    {"mode": "jit", "inputs": [X("x0", "f32", "", [-2.0]), X("x1", "f32", "a=2", [INF, 1.0])],
     "ops": [O("min2", ["x1", "x0"], "v0"), O("div", ["x1", "v0"], "v1")], "outputs": ["v1", "v0"]},
    # max/min reductions and max2 at ties: shared equally / halves
    {"mode": "jit", "inputs": [X("x0", "f32", "a=2 b=3", [1.0, 1.0, 0.5, 2.0, -1.0, 2.0]), X("x1", "f32", "b=3", [1.0, 0.0, 2.0])],
     "ops": [O("max", ["x0"], "v0", axes="b"), O("min", ["x0"], "v1", axes="a"), O("max2", ["x0", "x1"], "v2")], "outputs": ["v0", "v1", "v2"]},
    # tj_attention, causal: a NaN key and an infinite value that the first
    # two queries cannot see reach neither their outputs nor dq (JAX's
    # einsums multiply the masked pairs by 0: NaN); rows that see them: NaN
    {"mode": "jit", "inputs": [X("x0", "f32", "t=3 h=2", [0.5, -1.0, 0.25, 2.0, -0.75, 1.5]),
                               X("x1", "f32", "s=3 h=2", [1.0, 0.5, -0.5, 2.0, NAN, 1.0]),
                               X("x2", "f32", "s=3 h=2", [0.3, -0.2, 1.0, 1.0, INF, "-inf"])],
     "ops": [O("attention", ["x0", "x1", "x2"], "v0", qpos="t", kpos="s", dim="h", scale=0.0, causal=1),
             O("slice", ["v0"], "v1", axis="t", start=0, stop=2)], "outputs": ["v1"]},
    # ... and a causal row whose visible scores are all -inf is NaN, as the
    # -inf-masked softmax gives (jax.nn.dot_product_attention masks with a
    # finite -0.7 * max float: that row becomes the mean of the masked values)
    {"mode": "jit", "inputs": [X("x0", "f32", "t=2 h=2", [INF, 0.0, 0.25, 2.0]), X("x1", "f32", "s=2 h=2", [-1.0, 0.5, 1.0, 2.0]),
                               X("x2", "f32", "s=2 h=2", [0.3, -0.2, 1.0, 1.5])],
     "ops": [O("attention", ["x0", "x1", "x2"], "v0", qpos="t", kpos="s", dim="h", scale=0.0, causal=1)], "outputs": ["v0"]},
    # causal with more queries than keys (the last ones see every key) and
    # fewer; batch axes in three orders, a size-1 one, dim' != dim, scales
    {"mode": "jit", "inputs": [X("x0", "bf16", "b=2 t=4 h=3 u=1", [0.5, -1.0, 0.25, 2.0, -0.75, 1.5, 1.0, 0.125, -2.0, 0.5, 0.5, -1.5,
                                                                  -0.25, 1.0, 0.75, 3.0, -1.0, 0.0, 0.5, 0.25, -0.5, 1.25, -1.75, 2.0]),
                               X("x1", "bf16", "h=3 s=2 u=1 b=2", [1.0, 0.5, -0.5, 2.0, 0.25, 1.0, -1.0, 0.75, 0.5, -0.25, 1.5, 0.0]),
                               X("x2", "bf16", "u=1 s=2 b=2 h=1", [0.3125, -0.25, 1.0, 2.5])],
     "ops": [O("attention", ["x0", "x1", "x2"], "v0", qpos="t", kpos="s", dim="h", scale=-0.7, causal=1),
             O("rename", ["x0"], "v1", **{"from": "t", "to": "s"}),
             O("attention", ["x1", "v1", "v1"], "v2", qpos="s", kpos="s", dim="h", scale=2.5, causal=1)], "outputs": ["v0", "v2"]},
    # tj_attention's forward skipped a key whose score is -inf, so 0 * inf
    # (an infinite value there) was not NaN as in JAX (its backward was)
    {"mode": "jit", "inputs": [X("x0", "f32", "t=2 h=1", [1.0, 2.0]), X("x1", "f32", "s=2 h=1", [1.0, "-inf"]),
                               X("x2", "f32", "s=2 e=2", [0.5, 0.25, INF, 1.0])],
     "ops": [O("rename", ["x2"], "v1", **{"from": "e", "to": "h"}),
             O("attention", ["x0", "x1", "v1"], "v0", qpos="t", kpos="s", dim="h", scale=1.0, causal=0)], "outputs": ["v0"]},
    # relu's gradient multiplied (g * (x > 0)): a NaN cotangent where x <= 0
    # gave NaN (jax.nn.relu's JVP selects: 0); found by seed 5044
    {"mode": "jit", "inputs": [X("x0", "f32", "a=4", [-1.0, 0.0, 2.0, NAN]), X("x1", "f32", "a=4", [NAN, INF, 1.5, 2.0])],
     "ops": [O("relu", ["x0"], "v0"), O("mul", ["v0", "x1"], "v1")], "outputs": ["v1"]},
    # tj_attention, causal, more keys than queries: a key no query sees got
    # 0 * NaN in dk and dv from the NaN cotangent of a query in its tile
    # (JAX: 0); found by seed 5025
    {"mode": "jit", "inputs": [X("x0", "f32", "t=2 h=2", [0.5, -1.0, 0.25, 2.0]), X("x1", "f32", "s=4 h=2", [1.0, 0.5, -0.5, 2.0, 0.75, 1.0, -1.0, 0.25]),
                               X("x2", "f32", "s=4 h=2", [0.3, -0.2, 1.0, 1.5, -0.5, 0.5, 2.0, -1.0]), X("x3", "f32", "t=2 h=2", [1.0, 0.5, NAN, -1.0])],
     "ops": [O("attention", ["x0", "x1", "x2"], "v0", qpos="t", kpos="s", dim="h", scale=0.0, causal=1),
             O("mul", ["v0", "x3"], "v1")], "outputs": ["v1"]},
    # tj_attention, causal: a query whose visible scores hold +inf (-inf
    # keys times negative q) has NaN probabilities at every pair it sees, as
    # jax.nn.softmax's row (exp(inf - inf) in its sum), so dv of those keys
    # is NaN; this tool's causal reference took logsumexp's +inf there and
    # gave 0 at the finite scores (seeds 7023, 7129: false mismatches)
    {"mode": "jit", "inputs": [X("x0", "f32", "t=2 h=2", [0.5, -1.0, -0.25, -0.5]), X("x1", "f32", "s=3 h=2", [0.5, 0.25, "-inf", "-inf", 1.0, 2.0]),
                               X("x2", "f32", "s=3 h=2", [0.3, -0.2, 1.0, 1.5, -0.5, 0.5])],
     "ops": [O("attention", ["x0", "x1", "x2"], "v0", qpos="t", kpos="s", dim="h", scale=1.0, causal=1)], "outputs": ["v0"]},
    # a second derivative through a shard_map (or scan) whose backward body
    # gives a zero by construction: tinyjax carried that zero through the
    # forward body's VJP, where min's rule divides it by the count of
    # minima, 0 on a device whose block holds a NaN: NaN (JAX: symbolic
    # zero, 0; seed 72000). Now such a gradient is no gradient.
    {"mode": "shard_map", "mesh": "x=4", "devices": 4, "in_specs": ["d:x"], "check": 1, "out_specs": [""], "out_axes": {"v1": []},
     "inputs": [X("x0", "f32", "a=2 d=4", [NAN, 1.0, 2.0, 3.0, -1.0, 5.0, INF, 7.0])],
     "ops": [O("min", ["x0"], "v0", axes="a d"), O("psum", ["v0"], "v1", mesh_axes="x")], "outputs": ["v1"],
     "second": {"x0": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]}},
    # second derivatives ("second": grad2:x = d/dx sum_x sum(u_x dL/dx)) of
    # the ops whose first derivative is a fused kernel: layer_norm_grad (a
    # row of 2 too), softmax_grad, cross_entropy_grad, gelu_grad; and of
    # log_softmax, tanh, rsqrt, max2 at a tie; f32 and f64
    {"mode": "jit", "inputs": [X("x0", "f32", "a=3 c=4", [0.5, -1.25, 0.75, 2.0, -0.5, 1.5, 0.25, -2.0, 1.0, 0.125, -0.75, 0.5]),
                               X("x1", "f32", "c=4 e=2", [0.3, -0.2, 1.0, 1.5, -0.5, 0.5, 2.0, -1.0]), X("x2", "i32", "a=3", [0, 3, 1], grad=False)],
     "ops": [O("layer_norm", ["x0"], "v0", axis="c", eps=1e-5), O("mul", ["v0", "x0"], "v1"), O("softmax", ["v1"], "v2", axis="a"),
             O("dot", ["v2", "x1"], "v3", contract="c"), O("gelu", ["v3"], "v4"), O("cross_entropy", ["x0", "x2"], "v5", axis="c", mean_axes="a"),
             O("slice", ["x1"], "v6", axis="c", start=0, stop=2), O("layer_norm", ["v6"], "v7", axis="c", eps=0.1), O("mul", ["v7", "v6"], "v8")],
     "outputs": ["v4", "v5", "v8"], "second": {"x0": [1.0, -0.5, 0.25, 2.0, -1.5, 0.75, 0.5, -1.0, 0.125, 1.25, -0.25, 0.5],
                                               "x1": [-0.75, 0.5, 1.0, -1.25, 0.25, 2.0, -0.5, 1.5]}},
    {"mode": "jit", "inputs": [X("x0", "f64", "a=2 c=3", [0.3, -1.1, 0.7, 2.2, -0.4, 1.3]), X("x1", "f64", "c=3", [0.5, -0.25, 1.5])],
     "ops": [O("log_softmax", ["x0"], "v0", axis="c"), O("mul", ["v0", "x1"], "v1"), O("tanh", ["v1"], "v2"), O("pows", ["x1"], "v3", s=2.0),
             O("adds", ["v3"], "v4", s=0.5), O("rsqrt", ["v4"], "v5"), O("max2", ["v2", "v5"], "v6"), O("max2", ["x1", "x1"], "v7"),
             O("mul", ["v7", "v7"], "v8")],
     "outputs": ["v6", "v8"], "second": {"x0": [0.5, -1.0, 2.0, 0.25, 1.5, -0.75], "x1": [1.0, -2.0, 0.5]}},
    # ... inside scan (a carry through layer_norm) and a remat region
    {"mode": "scan", "scan": {"axis": "L", "carry": ["x0"], "xs": ["x1"], "carry_out": ["v3"]},
     "inputs": [X("x0", "f32", "c=3", [0.5, -1.0, 0.25]), X("x1", "f32", "L=2 c=3", [1.0, 0.5, -0.5, -0.25, 2.0, 0.75])],
     "ops": [O("mul", ["x0", "x1"], "v0"), O("layer_norm", ["v0"], "v1", axis="c", eps=0.1), O("softmax", ["v1"], "v2", axis="c"),
             O("add", ["x0", "v2"], "v4"), O("tanh", ["v4"], "v3")],
     "outputs": ["v2"], "second": {"x0": [0.5, 1.0, -1.5], "x1": [1.0, -0.5, 0.25, 2.0, -1.0, 0.75]}},
    {"mode": "checkpoint", "policy": "nothing_saveable",
     "inputs": [X("x0", "f32", "a=2 c=3", [0.3, -1.1, 0.7, 2.2, -0.4, 1.3]), X("x1", "i32", "a=2", [2, 0], grad=False)],
     "ops": [O("gelu", ["x0"], "v0"), O("layer_norm", ["v0"], "v1", axis="c", eps=1e-5), O("cross_entropy", ["v1", "x1"], "v2", axis="c")],
     "outputs": ["v2"], "second": {"x0": [0.5, -1.0, 2.0, 0.25, 1.5, -0.75]}},
    # tj_attention's second derivative (the VJP of its fused backward is
    # its composed form's): plain, and causal with more queries than keys,
    # the queries' and keys' axis one name, in a remat region
    {"mode": "jit", "inputs": [X("x0", "f32", "t=2 h=2", [0.5, -1.0, 0.25, 2.0]), X("x1", "f32", "s=2 h=2", [1.0, 0.5, -0.5, 2.0]),
                               X("x2", "f32", "s=2 h=2", [0.3, -0.2, 1.0, 1.5])],
     "ops": [O("attention", ["x0", "x1", "x2"], "v0", qpos="t", kpos="s", dim="h", scale=0.0, causal=0)], "outputs": ["v0"],
     "second": {"x0": [1.0, -1.0, 0.5, 0.5], "x1": [0.25, 1.0, -2.0, 0.5], "x2": [1.0, 1.0, -1.0, 0.0]},
     "weights": {"v0": {"shape": "t=2 h=2", "data": [0.5, -1.0, 1.5, 0.25]}}},
    {"mode": "checkpoint", "policy": "nothing_saveable",
     "inputs": [X("x0", "f64", "b=2 t=3 h=2", [0.5, -1.0, 0.25, 2.0, 1.5, -0.5, 0.75, 0.1, -2.0, 0.3, 1.2, -0.7]),
                X("x1", "f64", "b=2 t=2 h=2", [1.0, 0.5, -0.5, 2.0, 0.2, -1.3, 0.9, 0.4]),
                X("x2", "f64", "b=2 t=2 h=2", [0.3, -0.2, 1.0, 1.5, -0.6, 0.8, 0.05, -1.1])],
     "ops": [O("attention", ["x0", "x1", "x2"], "v0", qpos="t", kpos="t", dim="h", scale=0.7, causal=1)], "outputs": ["v0"],
     "second": {"x0": [1.0, -1.0, 0.5, 0.5, 0.25, -2.0, 1.5, 0.75, -0.5, 1.0, 0.125, -1.25],
                "x1": [0.25, 1.0, -2.0, 0.5, 1.0, 0.5, -0.75, 0.3], "x2": [1.0, 1.0, -1.0, 0.0, 0.5, -0.25, 2.0, 1.0]}},
]

# i32 add, sub, mul, div, neg and sum saturated (INT32_MAX + 1 gave
# INT32_MAX, 5 / 0 INT32_MAX): XLA's s32 ops wrap, lax.div truncates,
# x / 0 = -1, INT32_MIN / -1 = INT32_MIN; on a mesh too
EDGE += [
    {"mode": "jit", "inputs": [X("x0", "i32", "a=6", [2147483647, -2147483648, -2147483648, 65536, 5, 0], grad=False),
                               X("x1", "i32", "a=6", [1, -1, 1, 65536, 0, 0], grad=False), X("x2", "f32", "a=6", [0.5, -1.0, 2.0, 0.25, 1.5, -0.75])],
     "ops": [O("add", ["x0", "x1"], "v0"), O("sub", ["x1", "x0"], "v1"), O("mul", ["x0", "x1"], "v2"), O("div", ["x0", "x1"], "v3"),
             O("neg", ["x0"], "v4"), O("sum", ["v2"], "v5", axes="a"), O("cast", ["v3"], "v6", dtype="f32"), O("mul", ["x2", "v6"], "v7")],
     "outputs": ["v0", "v1", "v2", "v3", "v4", "v5", "v7"]},
    {"mode": "sharded", "mesh": "data=2", "devices": 2,
     "inputs": [X("x0", "i32", "a=4 b=2", [1073741824, 7, 1073741824, -3, 1073741824, 46341, 1073741824, 46341], grad=False, spec="a:data"),
                X("x1", "f32", "b=2", [0.5, -0.25])],
     "ops": [O("sum", ["x0"], "v0", axes="a"), O("mul", ["x0", "x0"], "v1"), O("sum", ["v1"], "v2", axes="a b"),
             O("cast", ["v0"], "v3", dtype="f32"), O("mul", ["x1", "v3"], "v4")], "outputs": ["v0", "v2", "v4"]},
]

def write_golden(folder, only=None):
    """Programs with JAX's results for tests/test_jax_golden.c (only: the
    names of the files to write, e.g. ["edge"])"""
    os.makedirs(folder, exist_ok=True)
    def dump(name, cases):
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            f.write("[\n" + ",\n".join(json.dumps(c, separators=(",", ":")) for c in cases) + "\n]\n")
        print("%s: %d programs, %d bytes" % (path, len(cases), os.path.getsize(path)))
    want = lambda name: only is None or name in only
    cases = []
    for i, spec in enumerate(EDGE if want("edge") else []):
        spec = copy.deepcopy(spec)
        case = {"seed": -1 - i}
        if "expect_error" in spec:
            case["expect_error"] = spec.pop("expect_error")
        else:
            spec = finish(spec, random.Random(i))
            case["expect"] = compact(expected(spec))
        case["spec"] = {k: v for k, v in spec.items() if not k.startswith("_")}
        cases.append(case)
    if want("edge"): dump("edge.json", cases)
    for i, (mode, dt, n) in enumerate(GOLDEN_SETS):
        cases, seed = [], 100000 + 1000 * i  # each set its own seeds
        if not want(mode + ("_" + dt if dt else "")): continue
        while len(cases) < n:
            seed += 1
            attn = mode == "attention"
            spec = make_spec(seed, None if attn else mode, dt, attn=attn)
            if spec is None or attn and sum(len(x["data"]) for x in spec["inputs"]) > GOLDEN_MAX_INPUT: continue
            case = {"seed": seed, "spec": {k: v for k, v in spec.items() if not k.startswith("_")}}
            if "expect_error" in spec:
                case["expect_error"] = spec["expect_error"]
                if os.path.exists(RUNNER) and "error" not in run_tinyjax(spec):
                    print("  seed %d (%s): JAX refused (%s), tinyjax ran" % (seed, mode, spec["_jax_error"][:200]))
            else:
                exp = expected(spec)
                case["expect"] = compact(exp)
                if os.path.exists(RUNNER):  # say now which ones tinyjax fails
                    bad = compare(exp, run_tinyjax(spec))
                    if bad: print("  seed %d (%s): tinyjax differs: %s" % (seed, mode, bad[0]))
            cases.append(case)
        dump("%s%s.json" % (mode, "_" + dt if dt else ""), cases)

def num(v, digits=9):
    """v for JSON: 9 significant digits hold any f32 (and bf16) exactly"""
    if v != v: return "nan"
    if v in (float("inf"), float("-inf")): return "inf" if v > 0 else "-inf"
    return float("%.*g" % (digits, v))

def compact(exp):
    return {k: {"dtype": e["dtype"], "axes": e["axes"], "dims": e["dims"], "data": [int(v) if e["dtype"] == "i32" else num(v, 17 if e["dtype"] == "f64" else 9) for v in e["data"]],
                "tol": [float("%.3g" % v) for v in e["tol"]]} for k, e in exp.items()}

if __name__ == "__main__":
    sys.exit(main())
