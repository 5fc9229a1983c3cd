#!/usr/bin/env python3
"""Generate gio__utab in demos/gpt2_io.h: the class of every code point as the
GPT-2 split regex sees it (\\p{L} letter, \\p{N} number, \\s space, else other),
from Python's `regex` module, the library GPT-2's encoder.py uses.

Unassigned code points (general category Cn) and surrogates are "other", as
the regex classifies them: neither letter, number nor space.

    pip install regex && python3 tools/gen_unicode_table.py > /tmp/utab.txt

Prints the C table (entries (first code point << 2) | class, a range running
up to the next entry) and a comment line with the counts; checks the
hand-written rules of gio__uclass for code points below U+0100 too.
"""
import sys
import regex

O, L, N, S = 0, 1, 2, 3
rl, rn, rs = regex.compile(r"\p{L}"), regex.compile(r"\p{N}"), regex.compile(r"\s")


def cls(cp):
    if 0xD800 <= cp <= 0xDFFF:
        return O
    ch = chr(cp)
    if rl.match(ch):
        return L
    if rn.match(ch):
        return N
    if rs.match(ch):
        return S
    return O


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


bad = [c for c in range(0x100) if cls(c) != low_rule(c)]
if bad:
    sys.exit("gio__uclass's rules below U+0100 disagree with regex at %s" % ", ".join("U+%04X" % c for c in bad))

entries, prev = [], None
counts = [0, 0, 0, 0]
unassigned_other = 0
cn = regex.compile(r"\p{Cn}")
for cp in range(0x100, 0x110000):
    c = cls(cp)
    counts[c] += 1
    if c != prev:
        entries.append((cp << 2) | c)
        prev = c
for cp in range(0x110000):
    if cn.match(chr(cp)):
        unassigned_other += 1

print("    /* %d entries; code points >= U+0100: %d other, %d letters, %d numbers, %d spaces;"
      " %d unassigned code points (all other) */" % (len(entries), counts[O], counts[L], counts[N], counts[S], unassigned_other))
line = "   "
for e in entries:
    item = " 0x%x," % e
    if len(line) + len(item) > 100:
        print(line)
        line = "   "
    line += item
print(line)
