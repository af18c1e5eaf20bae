"""Writes src/fpdt/data/text/unicode_tables.inc (the general categories behind the tokenizer's white space) and
normalization_tables.inc (of its NFC normalizer), and checks both against the `tokenizers` library.

The `tokenizers` library (0.23) matches pre-tokenizer regexes with Oniguruma, whose tables are Unicode
16.0 (probed: letters added in 16.0 match \\p{L}, those added in 17.0 do not). Python's own unicodedata
is older (14.0 in Python 3.11), so the tables come from `unicodedata2==16.0.0` (pinned in
tools/reference_env.sh). The script then checks, for every code point, that the library's regex
classes agree with the tables: \\p{X} for each general category group, \\s, \\d, and the case-insensitive
matches of every ASCII letter.

The library's NFC normalizer (the unicode-normalization-alignments crate) has Unicode 9.0 data: marks
added in 10.0 or later have no combining class there (probed). Normalization data of assigned code
points never changes (Unicode's stability policy), so its tables are Unicode 16.0's restricted to the
code points assigned by 9.0, per DerivedAge.txt of Debian's unicode-data package. They are checked
against the library's NFC on every code point, every canonical pair, every combining mark next to
marks of other classes, and random mark sequences. Run with the reference venv:

    PY=$(tools/reference_env.sh); $PY tools/make_unicode_tables.py
"""
import os
import random
import subprocess
import sys

import unicodedata2 as ud
from tokenizers import Regex, normalizers, pre_tokenizers

TEXT = os.path.join(os.path.dirname(__file__), "..", "src", "fpdt", "data", "text")
OUT = os.path.join(TEXT, "unicode_tables.inc")
NORMALIZATION_OUT = os.path.join(TEXT, "normalization_tables.inc")
DERIVED_AGE = "/usr/share/unicode/DerivedAge.txt"
NFC_VERSION = (9, 0)
CATEGORIES = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi",
              "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"]
# Code points outside ASCII that Oniguruma's case-insensitive matching folds onto an ASCII letter
# (CaseFolding.txt, simple folds): U+017F LATIN SMALL LETTER LONG S → s, U+212A KELVIN SIGN → k.
ASCII_FOLDS = {0x017F: "s", 0x212A: "k"}

CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def category(c):
    return ud.category(chr(c))


def is_space(c):  # Oniguruma's \s for Unicode: White_Space = Zs, Zl, Zp and U+0009..U+000D, U+0085
    return category(c) in ("Zs", "Zl", "Zp") or 0x09 <= c <= 0x0D or c == 0x85


def library_matches(pattern):
    """The set of code points the library's regex `pattern` matches (as one-character matches)."""
    text = "".join(chr(c) for c in CODE_POINTS)
    split = pre_tokenizers.Split(Regex(pattern), "removed")  # keeps only what does not match
    kept = bytearray(len(CODE_POINTS))
    for _, (begin, end) in split.pre_tokenize_str(text):
        kept[begin:end] = b"\x01" * (end - begin)
    return {CODE_POINTS[i] for i, k in enumerate(kept) if not k}


def check_against_library():
    checks = {r"\s": is_space, r"\d": lambda c: category(c) == "Nd"}
    for group in "LMNPSZC":
        checks[r"\p{%s}" % group] = lambda c, g=group: category(c)[0] == g and category(c) != "Cs"
    for name in ("Lu", "Ll", "Lo", "Nd", "No", "Po", "Zs"):
        checks[r"\p{%s}" % name] = lambda c, n=name: category(c) == n
    for letter in "abcdefghijklmnopqrstuvwxyz":
        folds = {ord(letter), ord(letter.upper())} | {c for c, f in ASCII_FOLDS.items() if f == letter}
        checks["(?i:%s)" % letter] = lambda c, s=frozenset(folds): c in s
    bad = 0
    for pattern, want in checks.items():
        got = library_matches(pattern)
        expected = {c for c in CODE_POINTS if want(c)}
        if got != expected:
            bad += 1
            print("MISMATCH %s: library only %s, tables only %s" % (
                pattern, sorted(hex(c) for c in got - expected)[:8], sorted(hex(c) for c in expected - got)[:8]))
    return bad


def ranges():
    out, begin, current = [], 0, category(0)
    for c in range(1, 0x110000):
        gc = category(c)
        if gc != current:
            out.append((begin, c - 1, current))
            begin, current = c, gc
    out.append((begin, 0x10FFFF, current))
    return [r for r in out if r[2] != "Cn"]


def assigned_by(version):
    """Code points assigned in Unicode `version` or before, from DerivedAge.txt."""
    if not os.path.exists(DERIVED_AGE):
        subprocess.run(["bash", os.path.join(os.path.dirname(__file__), "..", "scripts", "install_deps.sh"), "unicode-data"],
                       check=True)
    assigned = set()
    with open(DERIVED_AGE) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if not line:
                continue
            points, age = (part.strip() for part in line.split(";"))
            if tuple(int(x) for x in age.split(".")) > version:
                continue
            first, _, last = points.partition("..")
            assigned.update(range(int(first, 16), int(last or first, 16) + 1))
    return assigned


def normalization_tables():
    assigned = assigned_by(NFC_VERSION)
    classes, decompositions = [], []
    for c in sorted(assigned):
        if 0xD800 <= c <= 0xDFFF:
            continue
        ccc = ud.combining(chr(c))
        if ccc:
            if classes and classes[-1][1] == c - 1 and classes[-1][2] == ccc:
                classes[-1][1] = c
            else:
                classes.append([c, c, ccc])
        mapping = ud.decomposition(chr(c))
        if mapping and not mapping.startswith("<") and not 0xAC00 <= c <= 0xD7A3:
            parts = [int(x, 16) for x in mapping.split()]
            composes = len(parts) == 2 and ud.normalize("NFC", chr(c)) == chr(c)
            decompositions.append((c, parts[0], parts[1] if len(parts) == 2 else 0, composes))
    return classes, decompositions


def nfc_tables(classes, decompositions):
    ccc = {c: value for first, last, value in classes for c in range(first, last + 1)}
    mapping = {c: (a, b) for c, a, b, _ in decompositions}
    compose = {(a, b): c for c, a, b, ok in decompositions if ok}
    return ccc, mapping, compose


def reference_nfc(text, ccc, mapping, compose):
    """NFC from the generated tables (the algorithm the C++ implements), for the library check."""
    S, L, V, T, N = 0xAC00, 0x1100, 0x1161, 0x11A7, 588
    out = []

    def decompose(c):
        if S <= c < S + 11172:
            index = c - S
            out.extend([L + index // N, V + index % N // 28] + ([T + index % 28] if index % 28 else []))
        elif c in mapping:
            a, b = mapping[c]
            decompose(a)
            if b:
                decompose(b)
        else:
            out.append(c)
    for ch in text:
        decompose(ord(ch))
    i = 0
    while i < len(out):  # canonical ordering: stable sort of each run of non-starters
        j = i
        while j < len(out) and ccc.get(out[j], 0):
            j += 1
        if j > i:
            out[i:j] = sorted(out[i:j], key=lambda c: ccc[c])
        i = j + 1
    result, starter, last_class = [], None, -1
    for c in out:
        cls = ccc.get(c, 0)
        if starter is not None and (last_class < cls or (last_class == 0 and result and len(result) - 1 == starter)):
            a = result[starter]
            if L <= a < L + 19 and V <= c < V + 21:
                result[starter] = S + ((a - L) * 21 + c - V) * 28
                continue
            if S <= a < S + 11172 and (a - S) % 28 == 0 and T < c < T + 28:
                result[starter] = a + c - T
                continue
            if (a, c) in compose:
                result[starter] = compose[(a, c)]
                continue
        if cls == 0:
            starter, last_class = len(result), 0
        else:
            last_class = cls
        result.append(c)
    return "".join(map(chr, result))


def check_normalization(classes, decompositions):
    nfc = normalizers.NFC()
    texts = [chr(c) for c in CODE_POINTS]
    texts += ["".join(chr(x) for x in (a, b) if x) for _, a, b, _ in decompositions]
    marks = sorted({c for first, last, _ in classes for c in range(first, last + 1)} |
                   {c for c in CODE_POINTS if ud.combining(chr(c))})
    for m in marks:  # each mark next to low- and high-class marks, after a letter and after a Hangul jamo
        for other in ("\u0334", "\u0345", "\u0301", "\u0316"):
            texts += ["a" + other + chr(m), "a" + chr(m) + other, "\u1100\u1161" + chr(m) + other]
    rng = random.Random(5)
    pool = ["a", "e", "A", "o", "u", "\u0391", "\u0418", "\u1100", "\u1161", "\u11a8", "\uac00", "\u3131", "\u0627",
            "\u0915", "\u093c", "\u0f71", "\u0f72", "\u05b4", "\u0e38"] + [chr(m) for m in marks[:400]]
    for _ in range(20000):
        texts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
    tables = nfc_tables(classes, decompositions)
    bad = [t for t in texts if nfc.normalize_str(t) != reference_nfc(t, *tables)]
    print("NFC (Unicode %d.%d tables): %d texts, %d disagree with the library%s" % (
        NFC_VERSION + (len(texts), len(bad), "" if not bad else ": " + ", ".join(repr(t) for t in bad[:5]))))
    return len(bad)


def write_normalization(classes, decompositions):
    lines = [
        "// Generated by tools/make_unicode_tables.py — do not edit. NFC data of the `tokenizers` library:",
        "// Unicode %s restricted to the code points assigned by Unicode %d.%d. Hangul is algorithmic." % (
            ud.unidata_version, *NFC_VERSION),
        "// kCombiningClasses: {first, last, class} of every non-zero canonical combining class, sorted.",
        "// kDecompositions: {code point, first, second (0: a singleton), composes (primary composite)}, sorted.",
        "// clang-format off",
        "constexpr CombiningClassRange kCombiningClasses[] = {",
    ]
    for i in range(0, len(classes), 6):
        lines.append(" ".join("{0x%X, 0x%X, %d}," % tuple(r) for r in classes[i:i + 6]))
    lines.append("};")
    lines.append("constexpr Decomposition kDecompositions[] = {")
    for i in range(0, len(decompositions), 5):
        lines.append(" ".join("{0x%X, 0x%X, 0x%X, %s}," % (c, a, b, "true" if ok else "false")
                              for c, a, b, ok in decompositions[i:i + 5]))
    lines.append("};")
    lines.append("// clang-format on")
    with open(NORMALIZATION_OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s (%d class ranges, %d decompositions)" % (os.path.normpath(NORMALIZATION_OUT), len(classes),
                                                            len(decompositions)))


def main():
    assert ud.unidata_version == "16.0.0", ud.unidata_version
    classes, decompositions = normalization_tables()
    write_normalization(classes, decompositions)
    bad_nfc = check_normalization(classes, decompositions)
    table = ranges()
    lines = [
        "// Generated by tools/make_unicode_tables.py from Unicode %s (unicodedata2) — do not edit." % ud.unidata_version,
        "// General_Category of every assigned code point as ranges {first, last, category}, sorted;",
        "// code points in no range are Cn (unassigned). %d ranges. Included where `using enum GeneralCategory`" % len(table),
        "// is in force.",
        "// clang-format off",
    ]
    for i in range(0, len(table), 6):
        lines.append(" ".join("{0x%X, 0x%X, %s}," % r for r in table[i:i + 6]))
    lines.append("// clang-format on")
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s (%d ranges)" % (os.path.normpath(OUT), len(table)))
    bad = check_against_library()
    print("library agreement: %s" % ("all classes agree" if bad == 0 else "%d classes disagree" % bad))
    return 1 if bad or bad_nfc else 0


if __name__ == "__main__":
    sys.exit(main())
