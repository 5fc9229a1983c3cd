"""Time one GPT-2 124M training step on the CPU in tinyjax and its peers,
side by side on the same machine: the step of `gpt2_train --bench` (12
layers, 12 heads, 768 channels, vocabulary 50304, tied head, gelu tanh;
B=4, T=64, f32; forward, backward, global-norm clip to 1.0, AdamW) in

  tinyjax         build/gpt2_train_cpu --bench (./build.sh bench builds it;
                  or pass --tinyjax PATH)
  JAX             jax.jit of the same step, written here in plain jax.numpy
                  (no flax, no optax)
  PyTorch eager   tools/bench_torch_gpt2.py's model, torch.optim.AdamW
  torch.compile   the same, the model compiled

Each is timed where it is installed; the others are named as missing
(`pip install jax torch` for the CPU wheels). Runs are interleaved (every
peer once per round, --rounds rounds) so a noisy neighbour hurts all alike;
prints each one's median ms/step over all rounds with the best and worst,
and its ratio to tinyjax.

  python3 tools/compare_peers.py [--rounds 3] [--steps 5] [--tinyjax build/gpt2_train_cpu]
"""
import argparse, os, re, statistics, subprocess, sys, time

L, H, C, V, P, B, T = 12, 12, 768, 50304, 1024, 4, 64
LR, B1, B2, EPS, WD, CLIP = 1e-4, 0.9, 0.95, 1e-8, 0.1, 1.0


def tinyjax_peer(path):
    if not os.access(path, os.X_OK):
        return None, f"{path} not found (./build.sh bench builds it)"

    def run(steps):
        out = subprocess.run([path, "--bench", "--bench-steps", str(steps)], capture_output=True, text=True).stdout
        return [float(m) for m in re.findall(r"^bench step +\d+: loss \S+ +([0-9.]+) ms", out, re.M)]
    return run, None


def jax_peer():
    try:
        import jax, jax.numpy as jnp
    except ImportError:
        return None, "jax is not installed (pip install jax)"
    jax.config.update("jax_platforms", "cpu")
    k = iter(jax.random.split(jax.random.PRNGKey(0), 16))
    n = lambda *s: 0.02 * jax.random.normal(next(k), s, jnp.float32)
    z = lambda *s: jnp.zeros(s, jnp.float32)
    o = lambda *s: jnp.ones(s, jnp.float32)
    params = dict(wte=n(V, C), wpe=n(P, C), lnf_g=o(C), lnf_b=z(C),
                  ln1_g=o(L, C), ln1_b=z(L, C), ln2_g=o(L, C), ln2_b=z(L, C),
                  qkv_w=n(L, C, 3 * C), qkv_b=z(L, 3 * C), proj_w=n(L, C, C), proj_b=z(L, C),
                  fc_w=n(L, C, 4 * C), fc_b=z(L, 4 * C), fc2_w=n(L, 4 * C, C), fc2_b=z(L, C))

    def ln(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5) * g + b

    def loss_fn(p, x, y):
        h = p["wte"][x] + p["wpe"][:T]
        mask = jnp.tril(jnp.ones((T, T), bool))
        for l in range(L):
            q, kk, v = jnp.split(ln(h, p["ln1_g"][l], p["ln1_b"][l]) @ p["qkv_w"][l] + p["qkv_b"][l], 3, -1)
            q, kk, v = (t.reshape(B, T, H, C // H).transpose(0, 2, 1, 3) for t in (q, kk, v))
            a = jnp.where(mask, q @ kk.transpose(0, 1, 3, 2) / jnp.sqrt(C / H), -1e9)
            y_ = (jax.nn.softmax(a, -1) @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
            h = h + y_ @ p["proj_w"][l] + p["proj_b"][l]
            f = jax.nn.gelu(ln(h, p["ln2_g"][l], p["ln2_b"][l]) @ p["fc_w"][l] + p["fc_b"][l], approximate=True)
            h = h + f @ p["fc2_w"][l] + p["fc2_b"][l]
        logits = ln(h, p["lnf_g"], p["lnf_b"]) @ p["wte"].T
        return -jnp.take_along_axis(jax.nn.log_softmax(logits, -1), y[..., None], -1).mean()

    @jax.jit
    def step(p, m, v, t, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        norm = jnp.sqrt(sum(jnp.sum(gi * gi) for gi in jax.tree_util.tree_leaves(g)))
        s = jnp.minimum(1.0, CLIP / (norm + 1e-6))
        g = jax.tree_util.tree_map(lambda gi: gi * s, g)
        m = jax.tree_util.tree_map(lambda mi, gi: B1 * mi + (1 - B1) * gi, m, g)
        v = jax.tree_util.tree_map(lambda vi, gi: B2 * vi + (1 - B2) * gi * gi, v, g)
        p = jax.tree_util.tree_map(lambda pi, mi, vi: pi - LR * ((mi / (1 - B1 ** t)) / (jnp.sqrt(vi / (1 - B2 ** t)) + EPS) + WD * pi), p, m, v)
        return p, m, v, loss

    st = [params, jax.tree_util.tree_map(jnp.zeros_like, params), jax.tree_util.tree_map(jnp.zeros_like, params), 0]
    rng = __import__("numpy").random.default_rng(0)

    def run(steps):
        ms = []
        for _ in range(steps):
            x = jnp.asarray(rng.integers(0, 50257, (B, T)), jnp.int32)
            y = jnp.asarray(rng.integers(0, 50257, (B, T)), jnp.int32)
            st[3] += 1
            s = time.perf_counter()
            st[0], st[1], st[2], loss = step(st[0], st[1], st[2], float(st[3]), x, y)
            float(loss)  # waits for the step, as the demo reads its loss
            ms.append((time.perf_counter() - s) * 1e3)
        return ms
    run(2)  # compile and warm up
    return run, None


def torch_peer(compiled):
    try:
        import torch
    except ImportError:
        return None, "torch is not installed (pip install torch)"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_torch_gpt2 import GPT
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    m = GPT(attn="manual")
    opt = torch.optim.AdamW(m.parameters(), lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)
    fwd = torch.compile(m) if compiled else m

    def run(steps):
        ms = []
        for _ in range(steps):
            x = torch.randint(0, 50257, (B, T))
            y = torch.randint(0, 50257, (B, T))
            s = time.perf_counter()
            loss = fwd(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP)
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
            ms.append((time.perf_counter() - s) * 1e3)
        return ms
    run(2)  # compile and warm up
    return run, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per peer per round")
    ap.add_argument("--tinyjax", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "gpt2_train_cpu"))
    a = ap.parse_args()
    peers, missing = [], []
    for name, make in [("tinyjax", lambda: tinyjax_peer(a.tinyjax)), ("JAX (jit, CPU)", jax_peer),
                       ("PyTorch eager", lambda: torch_peer(False)), ("torch.compile", lambda: torch_peer(True))]:
        run, why = make()
        (peers.append((name, run)) if run else missing.append((name, why)))
    for name, why in missing:
        print(f"missing: {name}: {why}")
    if not peers:
        return 1
    print(f"GPT-2 124M step, B={B} T={T} f32, AdamW + clip, {os.cpu_count()} cores; {a.rounds} rounds of {a.steps} steps each, interleaved")
    ms = {name: [] for name, _ in peers}
    for r in range(a.rounds):
        for name, run in peers:
            got = run(a.steps)
            ms[name] += got
            print(f"  round {r + 1}: {name}: " + (f"median {statistics.median(got):.0f} ms" if got else "no steps timed (failed)"), flush=True)
    base = statistics.median(ms["tinyjax"]) if ms.get("tinyjax") else None
    print(f"{'peer':<16} {'median ms/step':>15} {'best':>8} {'worst':>8}  vs tinyjax")
    for name, _ in peers:
        v = sorted(ms[name])
        if not v:
            print(f"{name:<16} {'failed':>15}")
            continue
        med = statistics.median(v)
        print(f"{name:<16} {med:>15.1f} {v[0]:>8.1f} {v[-1]:>8.1f}  " + (f"{med / base:.2f}x" if base else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
