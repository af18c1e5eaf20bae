"""Writes the tokenizer fixtures and golden ids under tests/data/fixtures/tokenizers/ with the
`tokenizers` library itself, so that tests/data/tokenizer_test.cpp can check fpdt's C++ encoder and
decoder against the library without Python:

  <name>/tokenizer.json    small byte-level BPE tokenizers trained here (vocab 500), one per
                           pre-tokenizer style: gpt2 (ByteLevel with its regex), gpt2_prefix
                           (add_prefix_space; added tokens with lstrip/rstrip), llama3 (Split by Llama 3's regex, ignore_merges),
                           qwen2 (Split by Qwen2's regex), qwen2_nfc (the same with Qwen2's NFC
                           normalizer and a normalized added token), splits (Split by a literal and by a regex with
                           every SplitDelimiterBehavior), plus bytes/ (fpdt's byte tokenizer, written by
                           `fpdt tokenize`; not regenerated here, only its golden ids)
  wordpiece/, unigram/     tokenizer.json of model types fpdt refuses
  golden.json              the test texts, and per tokenizer the library's encode(text,
                           add_special_tokens=False).ids of each and decode(ids, skip_special_tokens=False)
                           of id sequences that cut UTF-8 characters and hold special tokens

Deterministic (seeded). Run with the reference venv:  PY=$(tools/reference_env.sh); $PY tools/make_tokenizer_fixtures.py
"""
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "data", "fixtures", "tokenizers")
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

SENTENCES = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "I'm sure they'll say it's fine, but we've DONE it: HE'LL see, I'D bet, THEY'RE right.",
    "Prices rose 12345678 percent in 2024; 3.14159 and 1,000,000 are numbers too.",
    "Le cœur a ses raisons que la raison ne connaît point. Ça va? Größe, Straße, naïve café.",
    "Въ началѣ сотвори Богъ небо и землю. Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν.",
    "בְּרֵאשִׁית בָּרָא אֱלֹהִים אֵת הַשָּׁמַיִם וְאֵת הָאָרֶץ",
    "في البدء خلق الله السماوات والأرض. مرحبا بالعالم ١٢٣٤٥",
    "सभी मनुष्यों को गौरव और अधिकारों के मामले में जन्मजात स्वतन्त्रता प्राप्त है। ०१२३",
    "人人生而自由，在尊严和权利上一律平等。他们赋有理性和良心。太初有道。",
    "すべての人間は、生まれながらにして自由であり、かつ、尊厳と権利とについて平等である。",
    "모든 인간은 태어날 때부터 자유로우며 그 존엄과 권리에 있어 동등하다.",
    "ทุกคนเกิดมามีอิสระและเสมอภาคกันในเกียรติศักด์และสิทธิ",
    "Emoji 😀👍🏽 and flags 🇩🇪 and ZWJ 👩‍👩‍👧 sequences; math ∑∫√∞ ≠ ≤; arrows → ⇒.",
    "tabs\tand\ttabs, spaces    and\u00a0nbsp, ideographic\u3000space, line\u2028sep, nel\u0085end",
    "code:\n    def f(x):\n        return x ** 2  # square\n\n\n\r\n\tend  \n",
]

# Characters the random texts draw from: every class the regexes tell apart, multi-byte forms, and
# the edge cases (Kelvin sign and long s fold onto ASCII under (?i), Unicode 16 letters, unassigned
# and private-use code points, combining marks, controls).
POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") + list("''''''sStTdDmMlLrReEvV") +
        list("       \t\n\n\r.,;:!?-_()[]{}<>|/\\\"#$%&*+=@^`~") +
        ["\u00a0", "\u3000", "\u2028", "\u0085", "\u000b", "\u000c", "\u200b", "\u200d", "\ufeff", "\u017f", "\u212a",
         "é", "ß", "ñ", "œ", "ж", "Ж", "λ", "ש", "ع", "ह", "्", "ा", "中", "文", "あ", "한", "ไ", "๓", "٣", "½", "²", "Ⅻ",
         "😀", "🏽", "🇩", "𝔘", "\U00010d4a", "\U00011f04", "\u0378", "\ue000", "\U0010fffd", "\u0301", "\u20ac", "\x00", "\x7f",
         "\u0316", "\u0345", "\u1df6", "\u1100", "\u1161", "\u11a8", "\u212b", "\u0308"])
SPECIALS_IN_TEXT = ["<|endoftext|>", "<|end_of_text|>", "<|begin_of_text|>", "<|user|>", "<|endoftext", "<|eod|>",
                    "cafe\u0301!", "caf\u00e9!", " <mask> ", "\t<sep>\u3000 ", "  <both>\n<both>  ", "<mask><sep>  <mask>"]


def random_texts(rng, count):
    texts = []
    for _ in range(count):
        length = rng.choice([0, 1, 2, 5, 20, 60, 200])
        text = "".join(rng.choice(POOL) for _ in range(length))
        if rng.random() < 0.3:
            cut = rng.randint(0, len(text))
            text = text[:cut] + rng.choice(SPECIALS_IN_TEXT) + text[cut:]
        texts.append(text)
    return texts


def test_texts():
    rng = random.Random(1234)
    fixed = SENTENCES + [
        "", " ", "  ", "\n", "a", "'s", "'S", "'ſ", "'K", "x'll've'd", " 'tis", "hello world", " hello  world  ",
        "a\n\nb", "a  \nb", "trailing   ", "\n\n\n", "  \n  \n", "12 345 6789 0", "<|endoftext|>",
        "a<|endoftext|>b", "<|endoftext|><|endoftext|>", "<|endoftext", "x<|begin_of_text|>y<|end_of_text|>",
        "<|user|> hi <|user|>", "a <mask> b <sep>  c\u2000<both>\u2000d", "<sep> <mask>", "x  <both>  <both>  y", "ÀÁÂ ĀĂĄ Ġ Ċ ĉ", "\U00010d4a\U00010d4b letters of Unicode 16",
        # Normalization: decomposed and composed forms, marks out of canonical order, Hangul jamo,
        # singletons (Angstrom, Ohm), a mark the library's Unicode 9.0 tables do not know (U+1DF6).
        "e\u0301 \u00e9 a\u0316\u0301 a\u0301\u0316 \u1100\u1161\u11a8 \uac01 \u212b \u2126 a\u0345\u1df6 \u0958 \ufb2a",
        "Cafe\u0301 na\u0308ive \u1e9b\u0323 \u0f73 \u0344 q\u0307\u0323 \u03d3 \u2000\u2001",
    ]
    return fixed + random_texts(rng, 300)


def training_corpus():
    rng = random.Random(99)
    return SENTENCES * 20 + random_texts(rng, 400)


def train(pre_tokenizer, special_tokens, vocab_size=500, ignore_merges=False, normalizer=None):
    tokenizer = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tokenizer.normalizer = normalizers.Sequence([normalizer])
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special_tokens, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(training_corpus(), trainer)
    return tokenizer


def build():
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    built = {
        "gpt2": train(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"]),
        "gpt2_prefix": train(pre_tokenizers.ByteLevel(add_prefix_space=True), ["<|endoftext|>"]),
        "llama3": train(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), "isolated"), byte_level]),
                        ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>"], ignore_merges=True),
        "qwen2": train(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2), "isolated"), byte_level]),
                       ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]),
        "qwen2_nfc": train(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2), "isolated"), byte_level]),
                           ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], normalizer=normalizers.NFC()),
        "splits": train(pre_tokenizers.Sequence([
            pre_tokenizers.Split(" ", "merged_with_next"),
            pre_tokenizers.Split(Regex(r"\p{N}"), "contiguous"),
            pre_tokenizers.Split(Regex(r"[.,;]"), "merged_with_previous"),
            pre_tokenizers.Split(Regex(r"\t"), "removed"),
            pre_tokenizers.Split(Regex(r"\p{Lu}+"), "isolated", invert=True),
            byte_level]), ["<|endoftext|>"]),
    }
    # A normal (not special) added token, matched in text too; on qwen2_nfc a normalized one, matched
    # after NFC (its text has a composed character, the test text the decomposed form).
    built["llama3"].add_tokens(["<|user|>"])
    built["qwen2_nfc"].add_tokens([AddedToken("caf\u00e9!", normalized=True)])
    # Added tokens that take the white space around them (lstrip/rstrip), on the GPT-2 style.
    built["gpt2_prefix"].add_tokens([AddedToken("<mask>", lstrip=True), AddedToken("<sep>", rstrip=True),
                                     AddedToken("<both>", lstrip=True, rstrip=True, special=True)])
    for name, tokenizer in built.items():
        os.makedirs(os.path.join(OUT, name), exist_ok=True)
        tokenizer.save(os.path.join(OUT, name, "tokenizer.json"))
    with open(os.path.join(OUT, "llama3", "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                   "eos_token": "<|end_of_text|>"}, f, indent=2)
    # Model types fpdt refuses.
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.pre_tokenizer = pre_tokenizers.Whitespace()
    wordpiece.train_from_iterator(SENTENCES, trainers.WordPieceTrainer(vocab_size=60, special_tokens=["[UNK]"], show_progress=False))
    unigram = Tokenizer(models.Unigram())
    unigram.train_from_iterator(SENTENCES[:2], trainers.UnigramTrainer(vocab_size=60, show_progress=False))
    for name, tokenizer in (("wordpiece", wordpiece), ("unigram", unigram)):
        os.makedirs(os.path.join(OUT, name), exist_ok=True)
        tokenizer.save(os.path.join(OUT, name, "tokenizer.json"))


def golden():
    texts = test_texts()
    rng = random.Random(7)
    result = {"texts": texts, "tokenizers": {}}
    for name in ("gpt2", "gpt2_prefix", "llama3", "qwen2", "qwen2_nfc", "splits", "bytes"):
        tokenizer = Tokenizer.from_file(os.path.join(OUT, name, "tokenizer.json"))
        ids = [tokenizer.encode(text, add_special_tokens=False).ids for text in texts]
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        decodes = []
        for _ in range(60):  # random id sequences: cut characters, special tokens, everything
            sequence = [rng.randrange(size) for _ in range(rng.choice([1, 3, 10, 40]))]
            decodes.append({"ids": sequence, "text": tokenizer.decode(sequence, skip_special_tokens=False)})
        for sequence in ids[:40]:
            decodes.append({"ids": sequence, "text": tokenizer.decode(sequence, skip_special_tokens=False)})
        result["tokenizers"][name] = {"vocab_size": size, "ids": ids, "decode": decodes}
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(result, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("wrote %s: %d texts x %d tokenizers" % (os.path.normpath(os.path.join(OUT, "golden.json")), len(texts),
                                                 len(result["tokenizers"])))


if __name__ == "__main__":
    if not os.path.exists(os.path.join(OUT, "bytes", "tokenizer.json")):
        sys.exit("missing %s/bytes/tokenizer.json: write it with `fpdt tokenize --out DIR FILE` (DIR/tokenizer.json)" % OUT)
    build()
    golden()
