"""End-to-end check of fpdt's Hugging Face tokenizer support against the `tokenizers` library and
transformers (issue 14, items 1 and 2), on two corpora from Debian packages:

  kjv     the King James Bible (bible-kjv; scripts/get_corpus.sh writes data/kjv.txt), one document
  tutor   Vim's tutor in 32 languages (vim-runtime: /usr/share/vim/vim90/tutor/*.utf-8; Latin, Cyrillic,
          Greek, Japanese, Chinese, Korean, Vietnamese scripts), one document per file

For each: (1) the library trains a byte-level BPE tokenizer.json, vocab 8192 (kjv GPT-2 style, tutor
Llama-3 style); (2) `fpdt tokenize --tokenizer` writes shards, compared id for id with the library's
encode of each document joined by the end-of-document token; (3) `fpdt train` trains a small Llama 50
steps; (4) `fpdt sample --ids` is compared with the library's decode of the same ids; (5) transformers
loads the checkpoint folder with AutoTokenizer + AutoModelForCausalLM, re-tokenizes the corpus (must
give the shard's ids) and recomputes the final validation loss, compared with the one fpdt logged.
Not part of `make test` (it needs the reference venv, a built fpdt, and a few minutes):

    PY=$(tools/reference_env.sh); $PY tools/check_tokenizer_e2e.py [--fpdt build/fpdt] [--work DIR]
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
EOS = "<|endoftext|>"
STEPS, BATCH, SEQ, EVAL_BATCHES = 50, 4, 128, 4


def run(command):
    print("$ " + " ".join(command), flush=True)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("failed (%d):\n%s%s" % (result.returncode, result.stdout, result.stderr))
    return result.stdout


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, width, count, vocab, eos, fingerprint = struct.unpack_from("<8sIIQIIQ", data)
    assert magic == b"FPDTSHRD" and version == 2, (magic, version)
    tokens = np.frombuffer(data, dtype=np.uint16 if width == 2 else np.uint32, offset=48, count=count)
    return tokens.astype(np.int64), vocab, eos, fingerprint


def train_tokenizer(documents, style, out_dir):
    tokenizer = Tokenizer(models.BPE(ignore_merges=style == "llama3"))
    if style == "gpt2":
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(LLAMA3), "isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=8192, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(documents, trainer)
    os.makedirs(out_dir, exist_ok=True)
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    return tokenizer


def render(text):  # fpdt sample's rendering: terminal controls other than \n and \t become U+FFFD
    return "".join("\ufffd" if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0 else c for c in text)


def val_loss_with_transformers(step_dir, val_ids, dtype):
    model = AutoModelForCausalLM.from_pretrained(step_dir, dtype=dtype).eval()
    windows = []
    for w in range(BATCH * EVAL_BATCHES):
        window = val_ids[w * SEQ: w * SEQ + SEQ + 1]
        if len(window) < 2:
            break
        windows.append(window)
    loss_sum, count = 0.0, 0
    with torch.no_grad():
        for window in windows:
            inputs = torch.tensor(window[:-1], dtype=torch.long)[None]
            targets = torch.tensor(window[1:], dtype=torch.long)[None]
            logits = model(input_ids=inputs).logits.to(torch.float64)
            loss_sum += torch.nn.functional.cross_entropy(logits[0], targets[0], reduction="sum").item()
            count += targets.numel()
    return loss_sum / count


def check(name, documents, files, style, args):
    print("\n== %s: %d documents, %d characters" % (name, len(documents), sum(map(len, documents))), flush=True)
    work = os.path.join(args.work, name)
    tok_dir, data_dir, run_dir = (os.path.join(work, d) for d in ("tokenizer", "data", "run"))
    library = train_tokenizer(documents, style, tok_dir)
    eos = library.token_to_id(EOS)
    run([args.fpdt, "tokenize", "--tokenizer", tok_dir, "--out", data_dir, "--val-fraction", "0.05"] + files)

    # (2) ids: the shards against the library, document by document.
    want = []
    for i, document in enumerate(documents):
        if i > 0:
            want.append(eos)
        want.extend(library.encode(document, add_special_tokens=False).ids)
    train_ids, vocab, shard_eos, _ = read_shard(os.path.join(data_dir, "train.bin"))
    val_ids, _, _, _ = read_shard(os.path.join(data_dir, "val.bin"))
    got = np.concatenate([train_ids, val_ids])
    equal = len(got) == len(want) and bool(np.all(got == np.array(want)))
    first_diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    print("ids: fpdt %d, library %d, equal: %s%s; vocab %d, separator %d (library eos %d)" % (
        len(got), len(want), equal, "" if equal else " (first difference at %d)" % first_diff, vocab, shard_eos, eos))

    # (3) train 50 steps.
    config = os.path.join(work, "model.json")
    with open(config, "w") as f:
        json.dump({"model_type": "llama", "vocab_size": 8192, "hidden_size": 128, "intermediate_size": 352,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                   "tie_word_embeddings": False}, f)
    run([args.fpdt, "train", "--model", config, "--data", data_dir, "--out", run_dir, "--steps", str(STEPS),
         "--batch", str(BATCH), "--seq", str(SEQ), "--lr", "3e-3", "--warmup", "10", "--eval-every", "0",
         "--eval-batches", str(EVAL_BATCHES), "--save-every", "0", "--threads", "2", "--peak-gflops", "100"])
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        logged = [json.loads(line) for line in f if line.strip()][-1]
    step_dir = os.path.join(run_dir, "step_%d" % STEPS)

    # (4) sample: fpdt's text against the library's decode of the same ids.
    out = run([args.fpdt, "sample", "--checkpoint", run_dir, "--prompt", documents[-1][:40], "--tokens", "48",
               "--context", str(SEQ), "--ids"])
    text, ids_line = out.rstrip("\n").rsplit("\n", 1)
    ids = [int(t) for t in ids_line.split()[1:]]
    decoded = library.decode(ids, skip_special_tokens=False)
    print("sample: %d ids; fpdt's text equals the library's decode: %s (raw decode has controls: %s)" % (
        len(ids), text == render(decoded), decoded != render(decoded)))

    # (5) transformers: tokenizer and model from the step folder.
    auto = AutoTokenizer.from_pretrained(step_dir)
    reloaded = []
    for i, document in enumerate(documents):
        if i > 0:
            reloaded.append(auto.convert_tokens_to_ids(EOS))
        reloaded.extend(auto(document, add_special_tokens=False)["input_ids"])
    print("AutoTokenizer (%s) ids equal the shards': %s; eos_token %r" % (
        type(auto).__name__, reloaded == got.tolist(), auto.eos_token))
    val_from_auto = reloaded[len(train_ids):]
    for dtype in (torch.float32, torch.float64):
        loss = val_loss_with_transformers(step_dir, val_from_auto, dtype)
        print("validation loss after %d steps: fpdt %.9f, transformers (%s) %.9f, |difference| %.2e" % (
            STEPS, logged["val_loss"], str(dtype).replace("torch.", ""), loss, abs(loss - logged["val_loss"])))


def check_byte_run(args):
    """A byte-level run (the byte tokenizer, a GPT-2 model) also carries a tokenizer that loads."""
    print("\n== bytes: the byte tokenizer's checkpoint, GPT-2 model", flush=True)
    data_dir, run_dir = os.path.join(REPO, "data", "kjv"), os.path.join(args.work, "bytes", "run")
    run([args.fpdt, "train", "--model", "gpt-tiny", "--data", data_dir, "--out", run_dir, "--steps", "2", "--batch", "2",
         "--seq", "64", "--eval-batches", "1", "--save-every", "0", "--threads", "2", "--peak-gflops", "100"])
    auto = AutoTokenizer.from_pretrained(os.path.join(run_dir, "step_2"))
    with open(os.path.join(REPO, "data", "kjv.txt"), encoding="utf-8", newline="") as f:
        text = f.read(20000)
    shard, vocab, eos, _ = read_shard(os.path.join(data_dir, "train.bin"))
    ids = auto(text, add_special_tokens=False)["input_ids"]
    mixed = "Ünïcödé " + text[:100] + "<|eod|>" + text[100:200]
    mixed_ids = auto(mixed, add_special_tokens=False)["input_ids"]
    want_mixed = list(("Ünïcödé " + text[:100]).encode()) + [256] + list(text[100:200].encode())
    print("AutoTokenizer (%s, vocab %d, eos %r): ids of the first %d characters equal the byte shard's: %s; "
          "special token and UTF-8 bytes: %s; decode round trip: %s" % (
              type(auto).__name__, len(auto), auto.eos_token, len(text), ids == shard[:len(ids)].tolist(),
              mixed_ids == want_mixed, auto.decode(mixed_ids) == mixed))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fpdt", default=os.path.join(REPO, "build", "fpdt"))
    parser.add_argument("--work", default="/tmp/fpdt-tokenizer-e2e")
    args = parser.parse_args()
    kjv = os.path.join(REPO, "data", "kjv.txt")
    if not os.path.exists(kjv):
        run(["bash", os.path.join(REPO, "scripts", "get_corpus.sh"), args.fpdt, os.path.join(REPO, "data")])
    with open(kjv, encoding="utf-8", newline="") as f:
        check("kjv", [f.read()], [kjv], "gpt2", args)
    tutor_files = sorted(glob.glob("/usr/share/vim/vim90/tutor/*.utf-8"))
    if not tutor_files:
        run(["bash", os.path.join(REPO, "scripts", "install_deps.sh"), "vim-runtime"])
        tutor_files = sorted(glob.glob("/usr/share/vim/vim90/tutor/*.utf-8"))
    documents = []
    for path in tutor_files:
        with open(path, encoding="utf-8", newline="") as f:
            documents.append(f.read())
    check("tutor", documents, tutor_files, "llama3", args)
    check_byte_run(args)


if __name__ == "__main__":
    main()
