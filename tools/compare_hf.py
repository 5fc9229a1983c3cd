#!/usr/bin/env python3
"""Compare tinyjax's GPT-2 with the Hugging Face ecosystem, both ways.

Optional: needs torch, transformers, tokenizers, tiktoken and regex
(pip install torch transformers tokenizers tiktoken regex); the C test suite
does not. Builds build/gpt2_train_cpu and build/hf_check (tools/hf_check.c), then:

  1. models made by transformers (random weights; 4 heads of 16 channels,
     vocab 1000 padded to 1024 in tinyjax; eps 1e-5 gelu_new, and eps 1e-3
     relu) load with --init-from: logits and loss against transformers';
  2. tinyjax -> --export-hf -> GPT2LMHeadModel.from_pretrained: the weights
     round-trip bit for bit, and a model trained by gpt2_train and exported
     gives transformers the logits tinyjax computes;
  2b. training against PyTorch: the same model and batches, 8 steps of
     AdamW (betas 0.9, 0.95, eps 1e-8, weight decay 0.1 on the matrices and
     embeddings, global-norm clip 1.0, a warmup of the learning rate) in
     tinyjax (on one device and on meshes, with gradient accumulation and
     several remat policies) and in PyTorch
     (torch.optim.AdamW, autograd through GPT2LMHeadModel) in float32 and
     float64: each step's loss and gradient norm, and the trained weights;
     tinyjax's distance to the float64 run must be of the size of PyTorch's
     own float32 distance to it; tinyjax --bf16 against torch.autocast
     (bfloat16): the losses and gradient norms;
  2c. greedy decoding: hf_check greedy (the demo's sampling at temperature
     0) against argmax decoding in transformers, 24 tokens from an 8-token
     prompt: the same tokens, or a first difference where the top two
     logits are within rounding of each other;
  3. a byte-level BPE trained with tokenizers (tokenizer.json with
     <|endoftext|>): tinyjax's ids against tokenizers' on mixed text, special
     tokens allowed (split out) and not (encoded as text);
  4. the pre-tokenizer on every code point (each in several contexts)
     against tiktoken's regex and tokenizers' ByteLevel pre-tokenizer (whose
     Unicode 16.0 classes the table has); the code points where Python's
     regex (GPT-2's encoder.py) differs are listed;
  5. GPT-2's own vocabulary (50257 tokens), when its ranks are at hand:
     --gpt2-ranks FILE (tiktoken's gpt2 file: base64 token, rank per line;
     openai-whisper's pip package ships it as whisper/assets/gpt2.tiktoken),
     else tiktoken.get_encoding("gpt2") (its cache or a download): the
     vocab.json and merges.txt OpenAI published are rebuilt from the ranks,
     loaded with --tokenizer, and thousands of random texts (many scripts,
     combining marks, emoji, every Unicode space, contractions, special
     tokens, long runs) are encoded by tinyjax and by tiktoken. Skipped, with
     the reason printed, when neither is available.

    python3 tools/compare_hf.py [--quick] [--gpt2-ranks FILE]
                                              (--quick: every 97th code point in 4.)
Prints one line per check and exits non-zero if a check fails.
"""
import json, os, struct, subprocess, sys, tempfile

try:
    import numpy as np
    import regex
    import torch
    import transformers
    import tokenizers
    import tiktoken
except ImportError as e:
    sys.exit("compare_hf.py needs numpy, regex, torch, transformers, tokenizers and tiktoken (pip install ...): %s" % e)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures += 1


def build():
    os.makedirs(BUILD, exist_ok=True)
    # the CPU driver under its own name: build/gpt2_train may be the CUDA build
    for src, out in (("demos/gpt2_train.c", "gpt2_train_cpu"), ("tools/hf_check.c", "hf_check")):
        subprocess.run(["gcc", "-std=c99", "-O2", "-Wno-unused-function", "-I.", "-o", os.path.join(BUILD, out), src, "-lm", "-pthread"],
                       cwd=ROOT, check=True)


def hf_check(*args):
    r = subprocess.run([os.path.join(BUILD, "hf_check")] + [str(a) for a in args], capture_output=True, cwd=ROOT)
    if r.returncode:
        raise RuntimeError("hf_check %s: %s" % (" ".join(map(str, args)), r.stderr.decode()))
    return r.stdout.decode()


def write_records(path, texts):
    with open(path, "wb") as f:
        for t in texts:
            b = t if isinstance(t, bytes) else t.encode("utf-8", "surrogatepass")
            f.write(struct.pack("<I", len(b)) + b)


def c_model(d, tok, tgt, tmp):
    ids = os.path.join(tmp, "ids.txt")
    with open(ids, "w") as f:
        f.write(" ".join(map(str, tok)) + "\n" + " ".join(map(str, tgt)) + "\n")
    out = os.path.join(tmp, "logits.bin")
    hf_check("model", d, ids, out)
    a = np.fromfile(out, dtype=np.float32)
    return a[:-1].reshape(len(tok), -1), float(a[-1])


def hf_model(d, tok, tgt):
    m = transformers.GPT2LMHeadModel.from_pretrained(d)
    m.eval()
    with torch.no_grad():
        out = m(torch.tensor([tok]), labels=None)
        logits = out.logits[0].double()
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(tgt)).item()
    return logits.numpy(), loss


def models(tmp):
    print("== models (transformers %s, torch %s)" % (transformers.__version__, torch.__version__))
    rng = np.random.default_rng(0)
    T = 24
    tok = [int(x) for x in rng.integers(0, 1000, T)]
    tgt = [int(x) for x in rng.integers(0, 1000, T)]
    for name, extra in (("4 heads, eps 1e-5, gelu_new", {}), ("4 heads, eps 1e-3, relu", {"layer_norm_epsilon": 1e-3, "activation_function": "relu"})):
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=32, vocab_size=1000, **extra)
        m = transformers.GPT2LMHeadModel(cfg)
        with torch.no_grad():  # larger weights than the default init, so the logits are far from uniform
            for p in m.parameters():
                p.mul_(4.0)
        d = os.path.join(tmp, "hf_" + str(len(name)))
        m.save_pretrained(d, safe_serialization=True)
        lc, loss_c = c_model(d, tok, tgt, tmp)
        lh, loss_h = hf_model(d, tok, tgt)
        err = np.abs(lc - lh).max() / np.abs(lh).max()
        check(err < 1e-5, "%s: logits max rel. difference %.2e (vocab 1000, padded to 1024 in tinyjax)" % (name, err))
        check(abs(loss_c - loss_h) < 1e-5 * loss_h, "%s: loss tinyjax %.6f, transformers %.6f" % (name, loss_c, loss_h))
        # tinyjax -> --export-hf -> transformers: the same tensors
        e = os.path.join(tmp, "exp_" + str(len(name)))
        hf_check("export", d, e)
        m2 = transformers.GPT2LMHeadModel.from_pretrained(e)
        same = all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), m2.state_dict().values()))
        check(same and m2.config.n_head == 4 and m2.config.activation_function == m.config.activation_function,
              "%s: --init-from then --export-hf gives transformers the same %d tensors bit for bit" % (name, len(m.state_dict())))
    # a model trained by tinyjax, exported
    e = os.path.join(tmp, "trained")
    r = subprocess.run([os.path.join(BUILD, "gpt2_train_cpu"), "--devices", "2", "--mesh", "data=2", "--layers", "2", "--embed", "64", "--heads", "2",
                        "--context", "32", "--batch", "4", "--steps", "20", "--sample", "0", "--svg", os.path.join(tmp, "l.svg"), "--export-hf", e],
                       cwd=ROOT, capture_output=True)
    check(r.returncode == 0, "gpt2_train --export-hf: exit %d %s" % (r.returncode, r.stderr.decode()[-300:]))
    text = b"/* tinyjax: trace a C function */"
    tok = list(text[:-1])
    tgt = list(text[1:])
    lc, loss_c = c_model(e, tok, tgt, tmp)
    lh, loss_h = hf_model(e, tok, tgt)
    err = np.abs(lc - lh).max() / np.abs(lh).max()
    check(err < 1e-5, "trained by tinyjax (20 steps, byte vocab), exported: logits max rel. difference %.2e vs transformers" % err)
    check(abs(loss_c - loss_h) < 1e-5 * loss_h, "trained by tinyjax: loss tinyjax %.6f, transformers %.6f" % (loss_c, loss_h))


def torch_train(d, batches, dtype, autocast=False):
    """PyTorch's run of the steps hf_check train makes: losses, grad norms, the
    trained state dict. Clipping as tinyjax and optax: g * clip / max(norm, clip)
    (torch.nn.utils.clip_grad_norm_ divides by norm + 1e-6)."""
    m = transformers.GPT2LMHeadModel.from_pretrained(d).to(dtype)
    m.eval()  # no dropout; autograd as in training
    decay = lambda n: n.endswith(".weight") and ".ln_" not in n and not n.endswith("ln_f.weight")
    named = list(m.named_parameters())
    groups = [{"params": [p for n, p in named if decay(n)], "weight_decay": 0.1},
              {"params": [p for n, p in named if not decay(n)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1.0, betas=(0.9, 0.95), eps=1e-8)
    losses, norms = [], []
    for x, y, lr in batches:
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = m(torch.tensor(x)).logits
        logits = logits.float() if autocast else logits  # the loss in float32 (float64 in the float64 run)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(y).reshape(-1))
        loss.backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for _, p in named))
        with torch.no_grad():
            for _, p in named:
                p.grad.mul_(float(1.0 / max(norm.item(), 1.0)))
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    return losses, norms, {k: v.detach().double() for k, v in m.state_dict().items()}


def training(tmp):
    """tinyjax's training steps against PyTorch's (float32 and float64)"""
    print("== training against PyTorch (AdamW, clip, 8 steps)")
    rng = np.random.default_rng(1)
    steps, B, T = 8, 4, 32
    torch.manual_seed(1)
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=T, vocab_size=1000)
    m = transformers.GPT2LMHeadModel(cfg)
    d = os.path.join(tmp, "hf_train")
    m.save_pretrained(d, safe_serialization=True)
    # a learnable task (each target is a fixed function of its token), so the loss falls
    perm = rng.permutation(1000)
    batches = []
    for s in range(steps):
        x = rng.integers(0, 1000, (B, T))
        batches.append((x.tolist(), perm[x].tolist(), 3e-3 * min(1.0, (s + 1) / 4)))
    path = os.path.join(tmp, "batches.txt")
    with open(path, "w") as f:
        f.write("%d %d %d\n" % (steps, B, T))
        for x, y, lr in batches:
            f.write(" ".join(str(v) for r in x for v in r) + "\n" + " ".join(str(v) for r in y for v in r) + "\n%.17g\n" % lr)
    l64, n64, w64 = torch_train(d, batches, torch.float64)
    l32, n32, w32 = torch_train(d, batches, torch.float32)
    moved = max((w64[k] - v.double()).abs().max().item() for k, v in m.state_dict().items())
    check(l64[-1] < l64[0] - 0.1, "PyTorch float64: loss %.4f -> %.4f in %d steps; the weights moved up to %.2e" % (l64[0], l64[-1], steps, moved))

    def dist(w):  # largest difference to the float64 weights, over all tensors
        return max((w[k] - w64[k]).abs().max().item() for k in w64)

    def rel(xs, ref):  # largest relative difference of a run's losses or norms to float64's
        return max(abs(a - b) / b for a, b in zip(xs, ref))

    def c_train(name, *flags):  # hf_check train: losses, grad norms and the trained weights
        out = os.path.join(tmp, name)
        rows = [l.split() for l in hf_check("train", d, path, out, *flags).split("\n") if l.startswith("step ")]
        w = {k: v.double() for k, v in transformers.GPT2LMHeadModel.from_pretrained(out).state_dict().items()}
        return [float(r[3]) for r in rows], [float(r[5]) for r in rows], w

    t_loss, t_norm, t_w = rel(l32, l64), rel(n32, n64), dist(w32)
    print("     PyTorch float32 vs float64: loss %.2e, grad norm %.2e relative; weights %.2e" % (t_loss, t_norm, t_w))
    for mesh, k, remat in (("", 1, "block_out"), ("data=2 model=2", 1, "block_out"), ("", 2, "nothing"), ("data=2", 2, "offload")):
        lc, nc, wc = c_train("trained_%d_%d_%s" % (len(mesh), k, remat), mesh, k, remat)
        c_loss, c_norm, c_w = rel(lc, l64), rel(nc, n64), dist(wc)
        where = ("mesh " + mesh if mesh else "one device") + ", remat " + remat + (", %d micro-batches" % k if k > 1 else "")
        check(len(lc) == steps and c_loss <= 4 * t_loss + 1e-6, "tinyjax (%s): loss %.2e relative to float64's (PyTorch float32: %.2e)" % (where, c_loss, t_loss))
        check(len(nc) == steps and c_norm <= 4 * t_norm + 1e-6, "tinyjax (%s): grad norm %.2e relative (PyTorch float32: %.2e)" % (where, c_norm, t_norm))
        check(c_w <= 4 * t_w + 1e-7, "tinyjax (%s): trained weights %.2e from float64's (PyTorch float32: %.2e)" % (where, c_w, t_w))
    # bf16 compute (f32 params and optimizer state): tinyjax --bf16 against torch.autocast(bfloat16)
    lb, nb, wb = torch_train(d, batches, torch.float32, autocast=True)
    b_loss, b_norm = rel(lb, l64), rel(nb, n64)
    print("     PyTorch autocast bfloat16 vs float64: loss %.2e, grad norm %.2e relative; weights %.2e" % (b_loss, b_norm, dist(wb)))
    lc, nc, wc = c_train("trained_bf16", "", 1, "block_out", "bf16")
    c_loss, c_norm = rel(lc, l64), rel(nc, n64)
    # Adam turns a gradient element's bf16 noise into a sign: the weights differ by up to 2 lr in
    # both runs, so only the losses and norms are compared
    check(len(lc) == steps and c_loss <= 2 * b_loss + 1e-4, "tinyjax --bf16: loss %.2e relative to float64's (PyTorch autocast bfloat16: %.2e); weights %.2e (%.2e)"
          % (c_loss, b_loss, dist(wc), dist(wb)))
    check(len(nc) == steps and c_norm <= 2 * b_norm + 1e-3, "tinyjax --bf16: grad norm %.2e relative (PyTorch autocast bfloat16: %.2e)" % (c_norm, b_norm))


def greedy(tmp):
    """the demo's greedy sampling against transformers' argmax decoding"""
    print("== greedy decoding against transformers")
    torch.manual_seed(2)
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=32, vocab_size=1000)
    m = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():  # sharper distributions than the default init, so the argmax is clear
        for p in m.parameters():
            p.mul_(3.0)
    d = os.path.join(tmp, "hf_greedy")
    m.save_pretrained(d, safe_serialization=True)
    m.eval()
    prompt, N = [int(x) for x in np.random.default_rng(2).integers(0, 1000, 8)], 24
    ids = os.path.join(tmp, "prompt.txt")
    with open(ids, "w") as f:
        f.write(" ".join(map(str, prompt)) + "\n")
    rows = [l.split() for l in hf_check("greedy", d, ids, N).split("\n") if l.strip()]
    got = [int(r[0]) for r in rows]
    seq = list(prompt)
    with torch.no_grad():
        for k in range(N):
            logits = m(torch.tensor([seq])).logits[0, -1]
            seq.append(int(torch.argmax(logits)))
    want = seq[len(prompt):]
    first = next((k for k in range(N) if got[k] != want[k]), None)
    if first is None:
        check(len(got) == N, "greedy: the same %d tokens as transformers (smallest gap between the top two logits %.2e)"
              % (N, min(float(r[1]) - float(r[2]) for r in rows)))
    else:
        gap = float(rows[first][1]) - float(rows[first][2])
        check(gap < 1e-5 * abs(float(rows[first][1])) + 1e-6,
              "greedy: first difference at token %d (tinyjax %d, transformers %d), top-two logit gap %.2e" % (first, got[first], want[first], gap))


def corpus():
    parts = []
    for p in ("README.md", "tinyjax.h", "demos/gpt2_io.h"):
        with open(os.path.join(ROOT, p), encoding="utf-8", errors="replace") as f:
            parts.append(f.read())
    return "\n".join(parts)


TEXTS = [
    "hello world", "Hello, world! 12345 and 1.5e-3", "don't you'll we're I'd they've I'm it's DON'T",
    "h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c\u8a9e \U0001F600!", "tabs\tand\nnewlines\n\n\n  indented\r\n", "  leading and trailing   ",
    "a<|endoftext|>b", "<|endoftext|>", "two <|endoftext|> <|endoftext|>\n<|endoftext|>x", "\u0383't \u0378x \U000E0080y",
    "static int gio__uclass(uint32_t c) { return c < 0x80; }", "<|endoftext", "<|endoftext|><|endoftext|>",
]


def tokenizer(tmp):
    print("== tokenizer.json (tokenizers %s, tiktoken %s)" % (tokenizers.__version__, tiktoken.__version__))
    tk = tokenizers.Tokenizer(tokenizers.models.BPE())
    tk.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = tokenizers.decoders.ByteLevel()
    tr = tokenizers.trainers.BpeTrainer(vocab_size=2000, special_tokens=["<|endoftext|>"],
                                        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator([corpus()], tr)
    path = os.path.join(tmp, "tokenizer.json")
    tk.save(path)
    rec = os.path.join(tmp, "texts.bin")
    texts = TEXTS + [corpus()[i:i + 3000] for i in range(0, 60000, 6000)]
    write_records(rec, texts)
    for allow in (1, 0):
        got = [list(map(int, l.split())) for l in hf_check("encode", path, rec, allow).splitlines()]
        tk.encode_special_tokens = not allow
        want = [tk.encode(t, add_special_tokens=False).ids for t in texts]
        bad = [i for i in range(len(texts)) if got[i] != want[i]]
        check(not bad, "tokenizer.json, special tokens %s: %d of %d texts give tokenizers' ids%s" % (
            "allowed (--allow-special)" if allow else "as text", len(texts) - len(bad), len(texts),
            "" if not bad else "; first difference: %r" % texts[bad[0]][:60]))
    # tiktoken on the same vocabulary (ranks = ids: the trainer numbers merges in order)
    vocab = json.load(open(path))["model"]["vocab"]
    b2u = bytes_to_unicode()
    u2b = {v: k for k, v in b2u.items()}
    ranks = {bytes(u2b[ch] for ch in tokstr): i for tokstr, i in vocab.items() if tokstr != "<|endoftext|>"}
    enc = tiktoken.Encoding("t", pat_str=GPT2_PAT, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": vocab["<|endoftext|>"]})
    for allow in (1, 0):
        got = [list(map(int, l.split())) for l in hf_check("encode", path, rec, allow).splitlines()]
        want = [enc.encode(t, allowed_special="all") if allow else enc.encode_ordinary(t) for t in texts]
        bad = [i for i in range(len(texts)) if got[i] != want[i]]
        check(not bad, "tiktoken on the same ranks, %s: %d of %d texts identical%s" % (
            "allowed_special='all'" if allow else "encode_ordinary", len(texts) - len(bad), len(texts),
            "" if not bad else "; first difference: %r" % texts[bad[0]][:60]))


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def pretok(tmp, step):
    print("== pre-tokenizer on every %scode point (regex %s)" % ("%dth " % step if step > 1 else "", regex.__version__))
    pat = regex.compile(GPT2_PAT)
    cps = [c for c in range(0x80, 0x110000, step) if not 0xD800 <= c <= 0xDFFF]
    lines = []
    for c in cps:
        ch = chr(c)
        lines.append("a%sb 1%s2 %s%s! '%s\t%s x%s" % (ch, ch, ch, ch, ch, ch, ch))
    rec = os.path.join(tmp, "pretok.bin")
    write_records(rec, lines)
    got = hf_check("pretok", rec).splitlines()
    ref = [[len(p.encode()) for p in pat.findall(l)] for l in lines]
    bad = [cps[i] for i in range(len(lines)) if list(map(int, got[i].split())) != ref[i]]
    # the table is tiktoken's (Unicode 16.0): Python's regex differs where later Unicode versions assigned code points
    print("     Python regex %s: %d of %d code points split as tinyjax%s" % (regex.__version__, len(cps) - len(bad), len(cps),
                                                                          "" if not bad else "; differ: %s" % summarize(bad)))
    got_l = [list(map(int, g.split())) for g in got]
    bl = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hfbad = []
    for i, l in enumerate(lines):
        pieces = [len(l[s:e].encode()) for _, (s, e) in bl.pre_tokenize_str(l)]
        if pieces != got_l[i]:
            hfbad.append(cps[i])
    check(not hfbad, "tokenizers' ByteLevel pre-tokenizer: %d of %d code points split as tinyjax%s" % (
        len(cps) - len(hfbad), len(cps), "" if not hfbad else "; differ: %s" % summarize(hfbad)))
    # tiktoken: every piece tinyjax made is a token, so tiktoken's split shows as the decoded tokens
    tbad = []
    for lo in range(0, len(lines), 20000):
        chunk = lines[lo:lo + 20000]
        ranks = {bytes([b]): b for b in range(256)}
        for i, l in enumerate(chunk):  # tinyjax's pieces become tokens
            b, at = l.encode(), 0
            for n in got_l[lo + i]:
                ranks.setdefault(b[at:at + n], len(ranks))
                at += n
        enc = tiktoken.Encoding("p", pat_str=GPT2_PAT, mergeable_ranks=ranks, special_tokens={})
        for i, l in enumerate(chunk):
            pieces = [len(enc.decode_single_token_bytes(t)) for t in enc.encode_ordinary(l)]
            if pieces != got_l[lo + i]:
                tbad.append(cps[lo + i])
    check(not tbad, "tiktoken's regex: %d of %d code points split as tinyjax%s" % (
        len(cps) - len(tbad), len(cps), "" if not tbad else "; differ: %s" % summarize(tbad)))


def summarize(cps):
    runs, s = [], None
    for c in cps:
        if s is not None and c == e + 1:
            e = c
            continue
        if s is not None:
            runs.append((s, e))
        s = e = c
    runs.append((s, e))
    txt = ", ".join("U+%04X" % a if a == b else "U+%04X..%04X" % (a, b) for a, b in runs[:8])
    return "%d code points in %d ranges (%s%s)" % (len(cps), len(runs), txt, ", .." if len(runs) > 8 else "")


def gpt2_ranks():
    """GPT-2's mergeable ranks {bytes: rank}, or (None, why)"""
    import base64
    if "--gpt2-ranks" in sys.argv:
        path = sys.argv[sys.argv.index("--gpt2-ranks") + 1]
        with open(path) as f:
            return {base64.b64decode(t): int(r) for t, r in (l.split() for l in f if l.strip())}, path
    try:
        return tiktoken.get_encoding("gpt2")._mergeable_ranks, "tiktoken.get_encoding('gpt2')"
    except Exception as e:  # no cache and no network
        return None, "tiktoken.get_encoding('gpt2') failed (%s) and no --gpt2-ranks FILE" % str(e).split("\n")[0][:80]


def gpt2_vocab(tmp):
    ranks, src = gpt2_ranks()
    print("== GPT-2's vocabulary against tiktoken")
    if ranks is None:
        print("skipped: %s" % src)
        return
    import random
    b2u = bytes_to_unicode()
    u = lambda b: "".join(b2u[x] for x in b)
    eot = len(ranks)
    vocab = {u(b): r for b, r in ranks.items()}
    vocab["<|endoftext|>"] = eot
    def parts(tok, below):  # the merge that made tok: BPE with the ranks before it
        p = [bytes([x]) for x in tok]
        while True:
            best = min(((ranks[p[i] + p[i + 1]], i) for i in range(len(p) - 1) if ranks.get(p[i] + p[i + 1], below) < below), default=None)
            if best is None:
                return p
            i = best[1]
            p[i:i + 2] = [p[i] + p[i + 1]]
    merges = []
    for b, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(b) > 1:
            p = parts(b, r)
            if len(p) != 2:
                check(False, "GPT-2 ranks from %s: token %d is not one merge of earlier tokens" % (src, r))
                return
            merges.append(u(p[0]) + " " + u(p[1]))
    vj, mt = os.path.join(tmp, "gpt2_vocab.json"), os.path.join(tmp, "gpt2_merges.txt")
    with open(vj, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(mt, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    enc = tiktoken.Encoding("gpt2", pat_str=GPT2_PAT, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": eot})
    R = random.Random(5)
    pools = ["abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
             " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2009\u200a\u2028\u2029\u202f\u205f\u3000\u200b\ufeff",
             "\u00e9\u00fc\u00df\u00f1\u00e7\u00f8\u00c6\u0152\u0153\u00ff\u0130\u0131\u0133\u01c5", "\u03b1\u03b2\u03a9\u03a3\u03c2\u03ac\u0390",
             "\u0430\u0431\u0416\u0429\u042f\u0451\u0457", "\u65e5\u672c\u8a9e\u4e2d\ud55c\uad6d\u3072\u3089\u30ab\u30bf",
             "\u0639\u0631\u0628\u064a\u0629", "\u0939\u093f\u0928\u094d\u0926\u0940", "\u0e01\u0e48\u0e02\u0e49\u0e33",
             "\u0301\u0308\u0327\u20dd\u0903", "\u0660\u0661\u06f4\u07c0\u0966\u09e8", "\u00b2\u00b3\u00bc\u00bd\u2160\u216b\u2460",
             "\U0001F600\U0001F44D\U0001F3FD\u200d\U0001F1EB\U0001F1F7\u2713\u2605", "\x00\x01\x07\x7f\u00ad\u200d\u200e\u2060",
             "\U0001D518\U0001D52B\U0001D7D8", "\U0010FFFD\uFFFD\uE000"]
    words = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "\u2019s", "<|endoftext|>", "<|endoftext", "|>", " ", "  ", "\n", " \n ", "\t"]
    def text():
        out = []
        for _ in range(R.choice([1, 2, 5, 20, 80, 300])):
            if R.random() < 0.3:
                out.append(R.choice(words))
            else:
                p = R.choice(pools)
                out.append("".join(R.choice(p) for _ in range(R.choice([1, 1, 2, 3, 7]))))
        return "".join(out)
    texts = [text() for _ in range(3000)] + [" " * 1000, "a" * 5000, "\n" * 300 + "x", "1" * 999, " 'll" * 50, "\u00e9" * 2000]
    texts += [corpus()[i:i + 3000] for i in range(0, 60000, 6000)]
    rec = os.path.join(tmp, "gpt2_texts.bin")
    write_records(rec, texts)
    for allow in (1, 0):
        got = [list(map(int, l.split())) for l in hf_check("encode", vj + "," + mt, rec, allow).splitlines()]
        want = [enc.encode(t, allowed_special="all") if allow else enc.encode_ordinary(t) for t in texts]
        bad = [i for i in range(len(texts)) if got[i] != want[i]]
        check(not bad, "GPT-2's vocab.json + merges.txt (from %s), %s: %d of %d texts give tiktoken's ids%s" % (
            src, "allowed_special='all'" if allow else "encode_ordinary", len(texts) - len(bad), len(texts),
            "" if not bad else "; first difference: %r" % texts[bad[0]][:60]))


def main():
    step = 97 if "--quick" in sys.argv else 1
    build()
    with tempfile.TemporaryDirectory() as tmp:
        models(tmp)
        training(tmp)
        greedy(tmp)
        tokenizer(tmp)
        gpt2_vocab(tmp)
        pretok(tmp, step)
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
