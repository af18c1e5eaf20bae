#!/usr/bin/env python3
"""Transformers' greedy answers to a file of prompts (token ids): the reference fpdt's RULER answers are held
against (issue 43), e.g. SmolLM2-135M-Instruct's on a 4K RULER prompt set written by fpdt.

    PY=$(tools/reference_env.sh) && $PY tools/ruler_reference_answers.py --model DIR --prompts P.json --out A.json

DIR: a Hugging Face model folder (config.json, weights; its tokenizer for the answers' text, or --tokenizer).
P.json: a list of samples (or {"samples": [...]}), each {"id": ..., "prompt_ids": [int, ...],
"max_new_tokens": int, ...}; "id" defaults to the sample's index, other fields are copied to the answer.
Each sample runs alone (no padding) through model.generate in float32: greedy (do_sample=False, one beam,
nothing else: the folder's generation_config.json gives only the stop ids, its sampling and penalties are
not used), stopping at max_new_tokens or at a stop id: the folder's generation_config.json eos_token_id
(else config.json's; --eos-ids overrides). Checked at every step: the processed scores equal the raw logits
and the token is their argmax (plain greedy).

A.json: {"format": "fpdt-ruler-reference", "model", "tokenizer", "eos_token_ids", "dtype",
"attn_implementation", "device", "transformers", "torch", "command", "samples": [{"id", <copied fields>,
"prompt_tokens", "generated_ids" (as generate returns them: the stop id included when it stopped on one),
"finish" ("eos" or "length"), "text" (the generated ids without the stop id, decoded with special tokens
kept; null without a tokenizer), "seconds"}]}, rewritten after every sample (a long run can be watched).
"""

import argparse
import json
import os
import shlex
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    parser.add_argument("--prompts", required=True, help="JSON file of samples (prompt_ids, max_new_tokens, id)")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--tokenizer", help="folder of the tokenizer that decodes the answers (default: --model)")
    parser.add_argument("--eos-ids", type=int, nargs="+", help="stop ids (default: the folder's eos_token_id)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"],
                        help="attention implementation (default sdpa: eager holds T x T scores per head, "
                             "~10 GB per layer at 16K tokens)")
    parser.add_argument("--limit", type=int, help="only the first LIMIT samples")
    return parser.parse_args()


def stop_ids(model_dir, model):
    """The folder's stop ids as transformers' generate would use them: generation_config.json, else config.json."""
    if os.path.isfile(os.path.join(model_dir, "generation_config.json")):
        eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    else:
        eos = model.config.eos_token_id
    if eos is None:
        return []
    return list(eos) if isinstance(eos, (list, tuple)) else [eos]


def load_samples(path, limit):
    with open(path) as f:
        data = json.load(f)
    samples = data["samples"] if isinstance(data, dict) else data
    if limit is not None:
        samples = samples[:limit]
    for i, sample in enumerate(samples):
        if "prompt_ids" not in sample or "max_new_tokens" not in sample:
            sys.exit(f"{path}: sample {i} lacks prompt_ids or max_new_tokens")
        sample.setdefault("id", i)
    return samples


def load_tokenizer(folder):
    try:
        return AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, TypeError) as e:  # no tokenizer files: answers without text
        print(f"no tokenizer in {folder} ({type(e).__name__}): answers without text", file=sys.stderr)
        return None


def greedy(model, prompt_ids, max_new_tokens, eos, device):
    prompt = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=max_new_tokens, eos_token_id=eos or None,
                              pad_token_id=eos[0] if eos else 0, repetition_penalty=1.0, output_scores=True,
                              output_logits=True, return_dict_in_generate=True, use_cache=True)
    with torch.no_grad():
        # The attention mask given: generate() would otherwise mask the prompt's tokens equal to the pad id.
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
    generated = out.sequences[0, prompt.shape[1]:].tolist()
    for step, (logits, scores) in enumerate(zip(out.logits, out.scores)):
        assert torch.equal(logits, scores), f"step {step}: a logits processor changed the scores (not plain greedy)"
        assert int(logits[0].argmax()) == generated[step], f"step {step}: the token is not the logits' argmax"
    assert len(generated) == len(out.logits)
    finish = "eos" if generated and generated[-1] in eos else "length"
    return generated, finish


def write(path, header, answers):
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        json.dump({**header, "samples": answers}, f, indent=1)
        f.write("\n")
    os.replace(temporary, path)


def main():
    args = parse_args()
    torch.use_deterministic_algorithms(True, warn_only=True)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation=args.attn)
    model = model.to(args.device).eval()
    eos = args.eos_ids if args.eos_ids is not None else stop_ids(args.model, model)
    # generate() fills every field left None from the model's generation config (its sampling settings,
    # penalties, min lengths, suppressed tokens): an empty one leaves transformers' global defaults only.
    model.generation_config = GenerationConfig()
    tokenizer = load_tokenizer(args.tokenizer or args.model)
    samples = load_samples(args.prompts, args.limit)
    V = model.config.get_text_config().vocab_size
    header = {"format": "fpdt-ruler-reference", "model": os.path.abspath(args.model),
              "tokenizer": os.path.abspath(args.tokenizer or args.model) if tokenizer else None,
              "eos_token_ids": eos, "dtype": "float32", "attn_implementation": args.attn, "device": args.device,
              "transformers": transformers.__version__, "torch": torch.__version__,
              "command": " ".join(shlex.quote(a) for a in [os.path.basename(sys.executable)] + sys.argv)}
    answers, started = [], time.time()
    for i, sample in enumerate(samples):
        ids = sample["prompt_ids"]
        bad = [t for t in ids if not 0 <= t < V]
        if bad:
            sys.exit(f"sample {sample['id']}: prompt id {bad[0]} outside the vocabulary of {V}")
        begin = time.time()
        generated, finish = greedy(model, ids, int(sample["max_new_tokens"]), eos, args.device)
        seconds = time.time() - begin
        answer_ids = generated[:-1] if finish == "eos" else generated
        text = tokenizer.decode(answer_ids, skip_special_tokens=False) if tokenizer else None
        answer = {k: v for k, v in sample.items() if k != "prompt_ids"}
        answer.update({"prompt_tokens": len(ids), "generated_ids": generated, "finish": finish, "text": text,
                       "seconds": round(seconds, 3)})
        answers.append(answer)
        write(args.out, header, answers)
        eta = (time.time() - started) / (i + 1) * (len(samples) - i - 1)
        print(f"[{i + 1}/{len(samples)}] {sample['id']}: {len(ids)} prompt tokens, {len(generated)} generated "
              f"({finish}) in {seconds:.1f} s, ETA {eta:.0f} s" + (f": {text!r}" if text is not None else ""),
              file=sys.stderr)
    print(f"{len(answers)} answers in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
