#!/usr/bin/env python3
"""Write tests/golden/<set>/generation.safetensors: transformers' greedy generation (issue 43) on the small
HF test models of tests/golden, the tokens fpdt's generation must reproduce token for token.

Run with the reference environment (CI and `make test` never need it):

    PY=$(tools/reference_env.sh) && $PY tools/make_generation_golden.py [SET ...]

(after tools/make_hf_golden.py, which rewrites the set folders and so deletes these files; SET: only those).

For every folder of tests/golden with a config.json and weights (the sets of tools/make_hf_golden.py,
grad_* included), and for prompts of PROMPT_LENGTHS tokens (capped so that prompt + generation fits a
learned position table: gpt2's 64), a prompt of ids drawn uniformly from [0, V) with a fixed seed goes
through `model.generate` in float32 with eager attention: greedy (do_sample=False, one beam), exactly
MAX_NEW_TOKENS new tokens (no end-of-sequence id, no logits processor: checked, see below).

generation.safetensors holds, for prompt i (i = 0, 1, ...):
    prompt_<i>        (P,) I32  the prompt's ids
    tokens_<i>        (N,) I32  the generated ids, N = MAX_NEW_TOKENS
    margins_<i>       (N,) F32  at each generated step, the top-1 logit minus the top-2 logit
    scales_<i>        (N,) F32  at each generated step, the logits' root-mean-square ‖l‖₂/√V
    first_logits_<i>  (V,) F32  the full logits of step 0 (the last prompt position)
metadata: format, version, set, prompts (their count), max_new_tokens, margin_threshold, draws (JSON: per
prompt its length, the seed that made it and the seeds refused for a small margin), transformers and torch
versions, command.

Checks before writing: the processed scores equal the raw logits bitwise at every step (greedy is plain
argmax: no repetition penalty, no min-length or eos masking, nothing from a generation_config.json); every
generated token is the argmax of its step's logits; the same tokens come out of a whole-window forward
without the KV cache (argmax of the last position over prompt + tokens so far); in a set with a sliding
window, the same weights without it generate other tokens for some prompt (metadata
"tokens_changed_without_window": per prompt, how many); every margin is at least
MARGIN_THRESHOLD × the step's logit scale, else the prompt is redrawn with the next seed (recorded); each
file is under 100 KB. Deterministic to the byte (fixed seeds, the header's keys sorted).
"""

import json
import os
import shlex
import struct
import sys

import torch
import transformers
from safetensors.torch import save
from transformers import AutoModelForCausalLM, GenerationConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN_DIR = os.path.join(ROOT, "tests", "golden")
FILE_NAME = "generation.safetensors"
SIZE_LIMIT_BYTES = 100 << 10

MAX_NEW_TOKENS = 12
# 1: a prompt of one token; 7: decoding crosses the sliding windows (8, 16) of the windowed sets; 40 and 150:
# prompts longer than every window (and than the RoPE sets' max_position_embeddings, 64, which transformers
# and fpdt both extrapolate past: only gpt2's learned table is a hard limit).
PROMPT_LENGTHS = (1, 7, 40, 150)
SEED = 43000            # prompt i's first seed is SEED + SEEDS_PER_PROMPT · i, its redraws the next ones
SEEDS_PER_PROMPT = 100  # redraws allowed per prompt

# A greedy token is only a fair test when no fp32 rounding can change the argmax. The C++ tests hold fpdt's
# logits to transformers' within tests/tolerances.h's fp32_bound, norm-wise: ‖e‖₂ ≤ b·‖l‖₂ with, for these
# models (longest sum ≤ 288 terms, ≤ 2 layers: 21 sums in a row, both sides fp32), b = 6·2⁻²⁴·√(2·288·21/3)
# ≈ 2.3e-5. The top-1/top-2 margin moves by at most 2‖e‖∞ ≤ 2‖e‖₂ ≤ 2b·√V·rms(l), with V ≤ 257 and
# rms(l) = ‖l‖₂/√V: ≤ 7.4e-4·rms(l), even if all of the allowed error fell on those two logits (typically it
# is b·rms(l) ≈ 2e-5·rms(l)). A margin of at least 1e-3·rms(l) therefore cannot flip under any error the
# logits tests accept; smaller ones are redrawn.
MARGIN_THRESHOLD = 1e-3


def save_sorted(tensors, path, metadata):
    """safetensors' save_file, but byte for byte the same on every run: the library writes the metadata in
    its hash map's (random) order; here the header is rewritten with its keys sorted (data unchanged)."""
    data = save(tensors, metadata=metadata)
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data stays 8-byte aligned, as the library pads it
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + data[8 + size:])


def model_folders():
    """The top-level folders of tests/golden holding a transformers model: config.json and weights."""
    for name in sorted(os.listdir(GOLDEN_DIR)):
        path = os.path.join(GOLDEN_DIR, name)
        if not os.path.isfile(os.path.join(path, "config.json")):
            continue
        if any(os.path.isfile(os.path.join(path, f)) for f in ("model.safetensors", "model.safetensors.index.json")):
            yield name, path


def load(path):
    model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    missing = [k for k in info["missing_keys"] if not k.endswith("lm_head.weight") or not model.config.tie_word_embeddings]
    assert not missing and not info["unexpected_keys"] and not info["mismatched_keys"], f"{path}: {info}"
    # generate() fills every field the caller left None (eos_token_id among them) from the model's own
    # generation config, which from_pretrained builds from config.json (eos 2) when the folder has no
    # generation_config.json: an empty one leaves only transformers' global defaults (no eos).
    model.generation_config = GenerationConfig()
    return model.eval()


def greedy_config():
    """Plain greedy decoding: no sampling, one beam, no end-of-sequence id (never stops early), no processors.
    pad_token_id only quiets generate's warning (one unpadded prompt: it is never used). min_new_tokens only
    matters if an eos id crept in: its processor would then mask that id, which generate()'s check sees."""
    return GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=MAX_NEW_TOKENS,
                            eos_token_id=None, bos_token_id=None, pad_token_id=0, repetition_penalty=1.0,
                            no_repeat_ngram_size=0, output_scores=True, output_logits=True,
                            return_dict_in_generate=True, use_cache=True)


def max_prompt_length(model):
    config = model.config
    if config.model_type == "gpt2":  # learned positions: prompt + generation must fit the table
        return config.n_positions - MAX_NEW_TOKENS
    return None


def generate(model, prompt):
    with torch.no_grad():
        # The attention mask given: generate() would otherwise mask the prompt's tokens equal to pad_token_id.
        out = model.generate(prompt.unsqueeze(0), attention_mask=torch.ones(1, prompt.numel(), dtype=torch.long),
                             generation_config=greedy_config())
    tokens = out.sequences[0, prompt.numel():]
    assert tokens.numel() == MAX_NEW_TOKENS, f"{tokens.numel()} tokens"
    logits = torch.stack([step[0] for step in out.logits])  # (N, V): raw
    scores = torch.stack([step[0] for step in out.scores])  # (N, V): after the logits processors
    assert torch.equal(logits, scores), "a logits processor changed the scores: not plain greedy"
    assert torch.equal(tokens, logits.argmax(-1)), "a generated token is not its step's argmax"
    top2 = logits.topk(2, dim=-1).values
    margins = top2[:, 0] - top2[:, 1]
    scales = logits.norm(dim=-1) / logits.shape[-1] ** 0.5
    return tokens, logits, margins, scales


def check_without_cache(model, prompt, tokens):
    """The same tokens from whole-window forwards without the KV cache: argmax of the last position."""
    sequence = prompt.clone()
    with torch.no_grad():
        for step in range(MAX_NEW_TOKENS):
            last = model(input_ids=sequence.unsqueeze(0), use_cache=False).logits[0, -1]
            assert int(last.argmax()) == int(tokens[step]), \
                f"step {step}: the whole-window forward gives {int(last.argmax())}, not {int(tokens[step])}"
            sequence = torch.cat([sequence, tokens[step:step + 1]])


def without_window(model):
    """The same weights with the sliding window switched off (None when the model has none)."""
    config = model.config
    if not getattr(config, "sliding_window", None) or getattr(config, "use_sliding_window", True) is False:
        return None
    settings = config.to_dict()
    settings["sliding_window"] = None
    if "use_sliding_window" in settings:  # qwen2: the window's switch and the per-layer types made from it
        settings.update({"use_sliding_window": False, "layer_types": None})
    other_config = type(config).from_dict(settings)
    other_config._attn_implementation = "eager"
    other = type(model)(other_config).eval()
    other.load_state_dict(model.state_dict())
    other.generation_config = GenerationConfig()
    return other


def write_set(name, path, command):
    torch.manual_seed(0)
    model = load(path)
    V = model.config.vocab_size
    cap = max_prompt_length(model)
    lengths = sorted({min(length, cap) if cap else length for length in PROMPT_LENGTHS})
    tensors, draws = {}, []
    for i, length in enumerate(lengths):
        refused = []
        for attempt in range(SEEDS_PER_PROMPT):
            seed = SEED + SEEDS_PER_PROMPT * i + attempt
            prompt = torch.randint(0, V, (length,), generator=torch.Generator().manual_seed(seed))
            tokens, logits, margins, scales = generate(model, prompt)
            smallest = float((margins / scales).min())
            if smallest >= MARGIN_THRESHOLD:
                check_without_cache(model, prompt, tokens)  # only where no rounding can flip a token
                break
            refused.append({"seed": seed, "relative_margin": smallest})
        else:
            raise RuntimeError(f"{name}: no prompt of {length} tokens with margins >= {MARGIN_THRESHOLD}")
        draws.append({"length": length, "seed": seed, "refused": refused,
                      "smallest_relative_margin": smallest})
        tensors[f"prompt_{i}"] = prompt.to(torch.int32).contiguous()
        tensors[f"tokens_{i}"] = tokens.to(torch.int32).contiguous()
        tensors[f"margins_{i}"] = margins.to(torch.float32).contiguous()
        tensors[f"scales_{i}"] = scales.to(torch.float32).contiguous()
        tensors[f"first_logits_{i}"] = logits[0].to(torch.float32).contiguous()
    extra = {}
    unwindowed = without_window(model)
    if unwindowed is not None:  # the window must decide tokens, or a cache keeping too much would pass
        changes = [int((generate(unwindowed, tensors[f"prompt_{i}"].long())[0] != tensors[f"tokens_{i}"]).sum())
                   for i in range(len(lengths))]
        assert sum(changes) > 0, f"{name}: the sliding window changes no generated token"
        extra["tokens_changed_without_window"] = json.dumps(changes)
    file = os.path.join(path, FILE_NAME)
    save_sorted(tensors, file, metadata={
        "format": "fpdt-generation-golden", "version": "1", "set": name, "prompts": str(len(lengths)),
        "max_new_tokens": str(MAX_NEW_TOKENS), "margin_threshold": repr(MARGIN_THRESHOLD),
        "draws": json.dumps(draws), "transformers": transformers.__version__, "torch": torch.__version__,
        "command": command, **extra})
    size = os.path.getsize(file)
    assert size < SIZE_LIMIT_BYTES, f"{name}: {size} bytes"
    print(f"{name:12s} {size:6d} bytes  prompts " +
          ", ".join(f"{d['length']} (seed {d['seed']}, margin >= {d['smallest_relative_margin']:.1e} rms"
                    + (f", {len(d['refused'])} redrawn" if d["refused"] else "") + ")" for d in draws) +
          (f"; without the window {extra['tokens_changed_without_window']} tokens differ" if extra else ""))


def main():
    torch.use_deterministic_algorithms(True)
    command = "PY=$(tools/reference_env.sh) && $PY " + " ".join(
        shlex.quote(a) for a in [os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:])
    only = set(sys.argv[1:])  # optional: set names to write (default: every model folder)
    for name, path in model_folders():
        if not only or name in only:
            write_set(name, path, command)


if __name__ == "__main__":
    main()
