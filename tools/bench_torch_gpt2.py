"""PyTorch reference for `gpt2_train --bench --cuda`: the same GPT-2 124M
(12 layers, 12 heads, 768 channels, vocabulary 50304, tied head, gelu tanh,
AdamW with clipping) on random tokens, one training step = forward, backward,
clip, AdamW. Prints ms/step (median, best, worst), tokens/s and MFU with the
demo's count: 6 N + 12 L C T model FLOPs per token (N without the position
table), against GPT2_PEAK_TFLOPS or the table of demos/gpt2_train.c.

  python3 tools/bench_torch_gpt2.py --batch 16 --dtype bf16 [--compile] [--attn manual]

--dtype f32 turns TF32 off (exact f32 matmuls, as tinyjax by default);
--dtype tf32 allows it; bf16 is autocast (f32 master weights, as --bf16).
--attn sdpa (default) is PyTorch's fused attention (flash); manual is the
demo's: scores, causal mask, softmax, weighted sum, each a kernel.
"""
import argparse, math, os, statistics, sys, time
try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    sys.exit("bench_torch_gpt2.py needs PyTorch (pip install torch): %s" % e)

PEAKS = [("H100", "PCIe", 756, 378, 51), ("H100", "", 989, 494, 67), ("H200", "", 989, 494, 67), ("A100", "", 312, 156, 19.5)]


class Block(nn.Module):
    def __init__(s, C, H, attn):
        super().__init__()
        s.H, s.attn = H, attn
        s.ln1, s.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.qkv, s.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.fc, s.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.H, C // s.H).transpose(1, 2) for t in (q, k, v))
        if s.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = (q @ k.transpose(-2, -1)) / math.sqrt(C // s.H)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = a.masked_fill(mask, -1e9).softmax(-1) @ v
        x = x + s.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + s.fc2(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s, L=12, C=768, H=12, V=50304, P=1024, attn="sdpa"):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(P, C)
        s.blocks = nn.ModuleList(Block(C, H, attn) for _ in range(L))
        s.lnf = nn.LayerNorm(C)

    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.blocks:
            x = b(x)
        logits = s.lnf(x) @ s.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--dtype", choices=["f32", "tf32", "bf16"], default="bf16")
    ap.add_argument("--attn", choices=["sdpa", "manual"], default="sdpa")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = a.dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = a.dtype == "tf32"
    dev = "cuda"
    L, C, V, B, T = 12, 768, 50304, a.batch, a.context
    m = GPT(attn=a.attn).to(dev)
    nparam = sum(p.numel() for p in m.parameters()) - m.wpe.weight.numel()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_m = torch.compile(m) if a.compile else m

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = step_m(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()  # a host sync, as the demo reads its loss

    ms = []
    t0 = time.time()
    for i in range(a.steps + 2):
        x = torch.randint(0, 50257, (B, T), device=dev)
        y = torch.randint(0, 50257, (B, T), device=dev)
        torch.cuda.synchronize()
        s = time.perf_counter()
        loss = step(x, y)
        ms.append((time.perf_counter() - s) * 1e3)
        if i == 0:
            print(f"torch: first step (compile, warmup) {ms[0]:.0f} ms, {time.time() - t0:.1f} s so far")
    ms = sorted(ms[2:])
    med = statistics.median(ms)
    name = torch.cuda.get_device_name(0)
    peak = float(os.environ.get("GPT2_PEAK_TFLOPS", "0"))
    for has, has2, pb, pt, pf in PEAKS:
        if not peak and has in name and has2 in name:
            peak = pb if a.dtype == "bf16" else pt if a.dtype == "tf32" else pf
    model = (6 * nparam + 12 * L * C * T) * B * T
    print(f"torch {torch.__version__} on {name}: GPT-2 124M B={B} T={T} {a.dtype}{' compiled' if a.compile else ' eager'} attn={a.attn}: "
          f"median {med:.1f} ms/step (best {ms[0]:.1f}, worst {ms[-1]:.1f}), {B * T / med * 1e3:.0f} tokens/s, "
          f"{model / med * 1e-9:.1f} TFLOP/s model" + (f", MFU {100 * model / (med * 1e-3) / (peak * 1e12):.1f}% of {peak:.0f}" if peak else "")
          + f", loss {loss:.3f}, peak memory {torch.cuda.max_memory_allocated() / 1e9:.1f} GB")


if __name__ == "__main__":
    main()
