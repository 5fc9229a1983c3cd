#!/usr/bin/env python3
"""Generate gio__utab in demos/gpt2_io.h: the class of every code point as the
GPT-2 split regex sees it (\\p{L} letter, \\p{N} number, \\s space, else other).

The classes are those of tiktoken's regex (Rust regex-syntax data: Unicode 16.0
in tiktoken 0.14), which Hugging Face tokenizers 0.23 shares: each code point c
is probed by encoding "a"+c, "1"+c and "!"+c with a vocabulary holding those
strings, so a single token means c continued the letter, number or
punctuation run. Unassigned code points (and, for tiktoken, everything Unicode
assigned after its version) are "other": neither letter, number nor space.
--source regex takes the classes from Python's `regex` module instead (the
library GPT-2's encoder.py used; regex 2026.5.9 has Unicode 17.0, which
differs on the 4,657 code points Unicode 17.0 assigned).

    pip install tiktoken==0.14.0 regex && python3 tools/gen_unicode_table.py > /tmp/utab.txt

Prints the C table (entries (first code point << 2) | class, a range running
up to the next entry) after a comment line with the counts; checks the
hand-written rules of gio__uclass for code points below U+0100 too.
"""
import sys
import regex

O, L, N, S = 0, 1, 2, 3
PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def classes_regex():
    rl, rn, rs = regex.compile(r"\p{L}"), regex.compile(r"\p{N}"), regex.compile(r"\s")
    out = [O] * 0x110000
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        out[cp] = L if rl.match(ch) else N if rn.match(ch) else S if rs.match(ch) else O
    return out


def classes_tiktoken():
    import tiktoken
    out = [O] * 0x110000
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for lo in range(0, len(cps), 40000):
        chunk = cps[lo:lo + 40000]
        ranks = {bytes([b]): b for b in range(256)}
        for c in chunk:
            for p in ("a", "1", "!"):
                ranks.setdefault((p + chr(c)).encode(), len(ranks))
        enc = tiktoken.Encoding("probe", pat_str=PAT, mergeable_ranks=ranks, special_tokens={})
        for c in chunk:
            k = S
            for p, cl in (("a", L), ("1", N), ("!", O)):
                if len(enc.encode_ordinary(p + chr(c))) == 1:
                    k = cl
                    break
            out[c] = k
    # "!" + c is one piece also when c is ! itself etc.; whitespace never joins "a", "1" or "!"
    return out


def low_rule(c):  # gio__uclass's rules below U+0100, transcribed
    if c < 0x80:
        if ord("a") <= c <= ord("z") or ord("A") <= c <= ord("Z"):
            return L
        if ord("0") <= c <= ord("9"):
            return N
        if c == 32 or 9 <= c <= 13:
            return S
        return O
    if c in (0x85, 0xA0):
        return S
    if c in (0xAA, 0xB5, 0xBA) or (c >= 0xC0 and c not in (0xD7, 0xF7)):
        return L
    if c in (0xB2, 0xB3, 0xB9) or 0xBC <= c <= 0xBE:
        return N
    return O


def main():
    src = "regex" if "--source" in sys.argv and sys.argv[sys.argv.index("--source") + 1] == "regex" else "tiktoken"
    cls = classes_regex() if src == "regex" else classes_tiktoken()
    bad = [c for c in range(0x100) if cls[c] != low_rule(c)]
    if bad:
        sys.exit("gio__uclass's rules below U+0100 disagree at %s" % ", ".join("U+%04X" % c for c in bad))
    entries, prev, counts = [], None, [0, 0, 0, 0]
    for cp in range(0x100, 0x110000):
        c = cls[cp]
        counts[c] += 1
        if c != prev:
            entries.append((cp << 2) | c)
            prev = c
    print("    /* from %s: %d entries; code points >= U+0100: %d other, %d letters, %d numbers, %d spaces */" % (
        src, len(entries), counts[O], counts[L], counts[N], counts[S]))
    line = "   "
    for e in entries:
        item = " 0x%x," % e
        if len(line) + len(item) > 100:
            print(line)
            line = "   "
        line += item
    print(line)


main()
