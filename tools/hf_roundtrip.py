#!/usr/bin/env python3
"""fpdt checkpoints in transformers: train with `fpdt train --init-from` a golden model, then load
the step folder with transformers' from_pretrained and check it gives the validation loss fpdt
recorded (metrics.jsonl, full precision) on the same tokens, within 1e-6 relative, and generates with
the folder's token ids: the bos/eos ids transformers reads from the checkpoint (config.json and the
model's generation config) are the folder's, or the byte tokenizer's where the folder states none.

    PY=$(tools/reference_env.sh) && $PY tools/hf_roundtrip.py [--fpdt build/fpdt] [--steps 20]

Cases: the golden sets of tools/make_hf_golden.py (vocabulary 257, the byte tokenizer's), each
trained on this repository's documentation and sources tokenized by `fpdt tokenize`; one also extends
its context with --rope-theta and --rope-scaling, which must reach transformers through the saved
config.json. Two copies of llama3 change its token ids: one states Llama 3.1's kind (one bos id, a list
of eos ids) and has a generation_config.json, one states none (as fpdt's presets).
Needs the reference environment (tools/reference_env.sh); `make test` does not run it.
"""

import argparse
import json
import os
import glob
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # the golden configs' token ids are placeholders
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 257  # the golden models' and the byte tokenizer's
B, S, EVAL_BATCHES = 2, 64, 4
TOLERANCE = 1e-6

EOD = 256  # the byte tokenizer's end-of-document token, <|eod|>
# A case: its name, the golden set it copies, extra train options, and the token ids its config.json
# states instead of the golden set's (None: the golden set's; {}: none at all) with, then, a
# generation_config.json of the same ids.
LLAMA31_IDS = {"bos_token_id": 200, "eos_token_id": [201, 202, EOD], "pad_token_id": None}
CASES = [
    ("llama_tied", "llama_tied", [], None),
    ("llama", "llama", ["--rope-theta", "20000",
                        "--rope-scaling", '{"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 32}'],
     None),
    ("qwen2", "qwen2", [], None),
    ("mistral", "mistral", [], None),
    ("llama3", "llama3", [], None),
    ("gpt2", "gpt2", [], None),
    ("llama3_ids", "llama3", [], LLAMA31_IDS),
    ("llama3_noids", "llama3", [], {}),
]
TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def read_shard(path):
    """The tokens of an fpdt token shard (src/fpdt/data/shard.h: a 48-byte header, then uint16 tokens)."""
    data = open(path, "rb").read()
    assert data[:8] == b"FPDTSHRD", path
    return np.frombuffer(data[48:], dtype="<u2").astype(np.int64)


def transformers_loss(folder, val_tokens):
    """Mean cross-entropy of the first EVAL_BATCHES * B sequential windows (fpdt's validation rows)."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    rows = EVAL_BATCHES * B
    inputs = torch.tensor(np.stack([val_tokens[r * S: r * S + S] for r in range(rows)]).astype(np.int64))
    targets = torch.tensor(np.stack([val_tokens[r * S + 1: r * S + S + 1] for r in range(rows)]).astype(np.int64))
    with torch.no_grad():
        logits = model(input_ids=inputs).logits
    return float(F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1)))


def tokenize(fpdt, work):
    """Shards of this repository's docs and sources (bytes): text that a few steps can learn from."""
    files = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")) + glob.glob(os.path.join(ROOT, "src", "fpdt", "*", "*.h")))
    data = os.path.join(work, "data")
    subprocess.run([fpdt, "tokenize", "--out", data, "--val-fraction", "0.1", *files], check=True, capture_output=True)
    return data, read_shard(os.path.join(data, "val.bin"))


def source_folder(work, name, golden, ids):
    """The golden folder, or a copy whose config.json states `ids` instead of its own token ids."""
    folder = os.path.join(ROOT, "tests", "golden", golden)
    if ids is None:
        return folder
    copy = os.path.join(work, "src_" + name)
    shutil.copytree(folder, copy)
    config = json.load(open(os.path.join(copy, "config.json")))
    for key in TOKEN_KEYS:
        config.pop(key, None)
    config.update(ids)
    json.dump(config, open(os.path.join(copy, "config.json"), "w"), indent=2)
    if ids:
        json.dump({"bos_token_id": ids["bos_token_id"], "eos_token_id": ids["eos_token_id"], "temperature": 0.6},
                  open(os.path.join(copy, "generation_config.json"), "w"), indent=2)
    return copy


def token_ids_problems(source, step):
    """What transformers reads as generation token ids from the checkpoint and not from the source (or,
    where the source states none, not the byte tokenizer's: no bos, eos <|eod|>); [] when all agree."""
    stated = json.load(open(os.path.join(source, "config.json")))
    theirs = AutoConfig.from_pretrained(source)
    want = {key: getattr(theirs, key) if key in stated else (EOD if key == "eos_token_id" else None)
            for key in TOKEN_KEYS}
    got_config = AutoConfig.from_pretrained(step)
    model = AutoModelForCausalLM.from_pretrained(step, dtype=torch.float32)
    problems = [f"config.json {key} {getattr(got_config, key)!r}, want {want[key]!r}" for key in TOKEN_KEYS
                if getattr(got_config, key) != want[key]]
    source_generation = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).generation_config
    for key in ("bos_token_id", "eos_token_id"):  # what generate() starts and stops on
        expected = getattr(source_generation, key) if key in stated else want[key]
        if getattr(model.generation_config, key) != expected:
            problems.append(f"generation {key} {getattr(model.generation_config, key)!r}, want {expected!r}")
    def generation_file(folder):
        path = os.path.join(folder, "generation_config.json")
        return open(path, "rb").read() if os.path.exists(path) else None
    if generation_file(source) is not None and generation_file(step) != generation_file(source):
        problems.append("generation_config.json is not the source's, byte for byte")
    if "eos_token_id" not in stated and AutoTokenizer.from_pretrained(step).eos_token_id != got_config.eos_token_id:
        problems.append("config.json's eos_token_id is not the checkpoint tokenizer's eos_token")
    return problems


def run_case(fpdt, work, data, val, name, golden, extra, ids, steps):
    out = os.path.join(work, name)
    source = source_folder(work, name, golden, ids)
    command = [fpdt, "train", "--init-from", source, "--data", data, "--out", out,
               "--steps", str(steps), "--batch", str(B), "--seq", str(S), "--lr", "3e-3", "--warmup", "2",
               "--eval-every", "0", "--eval-batches", str(EVAL_BATCHES), "--save-every", "0", "--peak-gflops", "100",
               *extra]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout + result.stderr)
        raise SystemExit(f"{name}: fpdt train failed")
    metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    first_val = next(float(line.split()[-1]) for line in result.stdout.splitlines()
                     if "validation loss before training" in line)
    ours = metrics[-1]["val_loss"]
    step = os.path.join(out, f"step_{steps}")
    theirs = transformers_loss(step, val)
    error = abs(ours - theirs) / theirs
    problems = token_ids_problems(source, step)
    ok = error <= TOLERANCE and not problems
    saved = json.load(open(os.path.join(step, "config.json")))
    ids = "bos {} eos {}".format(*(json.dumps(saved.get(key, "absent")) for key in TOKEN_KEYS[:2]))
    print(f"{name:12s} {' '.join(extra[::2]) or '-':28s} val loss {first_val:.4f} -> fpdt {ours:.8f}, "
          f"transformers {theirs:.8f}: relative {error:.1e}; {ids} {'ok' if ok else 'FAIL'}")
    for problem in problems:
        print(f"  {problem}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fpdt", default=os.path.join(ROOT, "build", "fpdt"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cases", nargs="*", default=[case[0] for case in CASES])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fpdt_roundtrip_") as work:
        data, val = tokenize(args.fpdt, work)
        results = [run_case(args.fpdt, work, data, val, name, golden, extra, ids, args.steps)
                   for name, golden, extra, ids in CASES if name in args.cases]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
