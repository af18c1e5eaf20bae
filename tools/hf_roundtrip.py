#!/usr/bin/env python3
"""fpdt checkpoints in transformers: train with `fpdt train --init-from` a golden model, then load
the step folder with transformers' from_pretrained and check it gives the validation loss fpdt
recorded (metrics.jsonl, full precision) on the same tokens, within 1e-6 relative.

    PY=$(tools/reference_env.sh) && $PY tools/hf_roundtrip.py [--fpdt build/fpdt] [--steps 20]

Cases: the golden sets of tools/make_hf_golden.py (vocabulary 257, the byte tokenizer's), each
trained on this repository's documentation and sources tokenized by `fpdt tokenize`; one also extends
its context with --rope-theta and --rope-scaling, which must reach transformers through the saved
config.json.
Needs the reference environment (tools/reference_env.sh); `make test` does not run it.
"""

import argparse
import json
import os
import glob
import subprocess
import sys
import tempfile

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # the golden configs' token ids are placeholders
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 257  # the golden models' and the byte tokenizer's
B, S, EVAL_BATCHES = 2, 64, 4
TOLERANCE = 1e-6

CASES = [
    ("llama_tied", []),
    ("llama", ["--rope-theta", "20000",
               "--rope-scaling", '{"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 32}']),
    ("qwen2", []),
    ("mistral", []),
    ("llama3", []),
    ("gpt2", []),
]


def read_shard(path):
    """The tokens of an fpdt token shard (src/fpdt/train/shard.h: a 48-byte header, then uint16 tokens)."""
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


def run_case(fpdt, work, data, val, name, extra, steps):
    out = os.path.join(work, name)
    command = [fpdt, "train", "--init-from", os.path.join(ROOT, "tests", "golden", name), "--data", data, "--out", out,
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
    theirs = transformers_loss(os.path.join(out, f"step_{steps}"), val)
    error = abs(ours - theirs) / theirs
    ok = error <= TOLERANCE
    print(f"{name:11s} {' '.join(extra[::2]) or '-':28s} val loss {first_val:.4f} -> fpdt {ours:.8f}, "
          f"transformers {theirs:.8f}: relative {error:.1e} {'ok' if ok else 'FAIL'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fpdt", default=os.path.join(ROOT, "build", "fpdt"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cases", nargs="*", default=[name for name, _ in CASES])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fpdt_roundtrip_") as work:
        data, val = tokenize(args.fpdt, work)
        results = [run_case(args.fpdt, work, data, val, name, extra, args.steps)
                   for name, extra in CASES if name in args.cases]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
