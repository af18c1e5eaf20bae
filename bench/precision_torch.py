# The PyTorch control for fpdt's bf16-beside-fp32 loss comparison (bench/precision_seeds.sh, issue 28):
# the same training run as `fpdt train --model llama-demo --batch 8 --seq 256 --data data/kjv --steps 200
# --lr 3e-3 --min-lr 3e-4 --warmup 20` in Hugging Face LlamaForCausalLM, in fp32 or under
# torch.autocast("cpu", bfloat16) — the standard mixed-precision recipe (bf16 GEMMs and attention, fp32
# residual stream, norms, loss, master weights and AdamW). It answers: how far apart are a bf16 and an fp32
# run of the tool users already have, at this shape, this learning rate and this many steps?
#
# What it shares with fpdt's run: the data (the byte-level shards fpdt tokenize writes: a 48- or 32-byte
# header, then uint16 tokens), rows of S + 1 tokens at uniform random offsets for training and fixed
# consecutive windows of val.bin for validation, the initialisation's scales (normal 0.02, the residual
# outputs 0.02 / sqrt(2 L), norms 1), the schedule (linear warmup from 0, cosine to min-lr at the last step),
# AdamW (0.9, 0.95, eps 1e-8, weight decay on every tensor) and clipping at 1. Its random streams are torch's,
# so a seed's run is not fpdt's run of that seed: compare the statistics over seeds, not single pairs.
# --precision bf16-residual is autocast with the residual stream rounded to bf16 as fpdt's bf16 rounds it
# (model/layer.h; Megatron's and DeepSpeed's bf16 modules keep it in bf16 too): the embedding's output and
# each sublayer's sum x + f(norm(x)), and through the casts' backward the residual gradient.
# --precision bf16-residual-sr rounds the same values stochastically (up with the probability of the
# discarded low bits; unbiased), the gradient still to nearest: does an unbiased rounding of the residual
# stream recover what nearest rounding loses?
# Prints one JSON line: the validation loss before and after training, and every step's training loss.
#   usage: precision_torch.py --config FILE --data DIR --seed S --precision fp32|bf16 [--steps 200] ...
import argparse
import contextlib
import json
import math
import os
import types

import numpy as np
import torch
import transformers


def read_shard(path):
    raw = open(path, "rb").read()
    if raw[:8] != b"FPDTSHRD":
        raise SystemExit(f"{path}: not an fpdt token shard (magic {raw[:8]!r}); hint: run fpdt tokenize")
    version = int.from_bytes(raw[8:12], "little")
    width = int.from_bytes(raw[12:16], "little")
    count = int.from_bytes(raw[16:24], "little")
    header = {1: 32, 2: 48}.get(version)
    if header is None or width != 2:
        raise SystemExit(f"{path}: shard version {version}, token width {width}; this tool reads uint16 shards")
    return torch.from_numpy(np.frombuffer(raw, dtype="<u2", count=count, offset=header).astype(np.int64))


def learning_rate(step, lr, min_lr, warmup, steps):
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    progress = (step - warmup) / (steps - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def round_bf16(x):  # nearest-even bf16 values in x's dtype; the backward rounds the gradient the same way
    return x.to(torch.bfloat16).to(x.dtype)


class StochasticRoundBf16(torch.autograd.Function):
    """fp32 → bf16 values (in fp32), rounding the magnitude up with the probability of the 16 bits cut off;
    the backward rounds the gradient to nearest, as a cast's backward does."""

    @staticmethod
    def forward(ctx, x):
        noise = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32)
        return ((x.contiguous().view(torch.int32) + noise) & ~0xFFFF).view(torch.float32)

    @staticmethod
    def backward(ctx, grad):
        return round_bf16(grad)


def round_residual_stream(model, stochastic):
    rounding = StochasticRoundBf16.apply if stochastic else round_bf16

    def layer_forward(layer, hidden_states, **kwargs):  # x (B, S, h) → r(x_mid + mlp(norm(x_mid))), x_mid = r(x + attn)
        attention, _ = layer.self_attn(hidden_states=layer.input_layernorm(hidden_states), **kwargs)
        x_mid = rounding(hidden_states + attention)
        return rounding(x_mid + layer.mlp(layer.post_attention_layernorm(x_mid)))

    model.model.embed_tokens.register_forward_hook(lambda module, inputs, output: rounding(output.float()))
    for layer in model.model.layers:
        layer.forward = types.MethodType(layer_forward, layer)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--data", required=True, help="folder with train.bin and val.bin")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--precision", choices=("fp32", "bf16", "bf16-residual", "bf16-residual-sr"), required=True)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--min-lr", type=float, default=3e-4)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--eval-batches", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    config = transformers.LlamaConfig.from_json_file(args.config)
    config._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(config).float()
    residual_std = 0.02 / math.sqrt(2.0 * config.num_hidden_layers)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if "norm" in name:
                tensor.fill_(1.0)
            else:
                tensor.normal_(0.0, residual_std if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02)
    if args.precision.startswith("bf16-residual"):
        round_residual_stream(model, stochastic=args.precision.endswith("-sr"))
    train, val = read_shard(os.path.join(args.data, "train.bin")), read_shard(os.path.join(args.data, "val.bin"))
    rows = args.batch * args.eval_batches
    if val.numel() < rows * args.seq + 1:
        raise SystemExit(f"{args.data}/val.bin: {val.numel()} tokens, fewer than {args.eval_batches} batches need")
    # (eval_batches · B, S + 1): consecutive windows from val.bin's start, the same every evaluation
    val_rows = torch.stack([val[r * args.seq: r * args.seq + args.seq + 1] for r in range(rows)])

    def autocast():
        if args.precision != "fp32":
            return torch.autocast(device_type="cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def loss_of(ids):  # ids (B, S + 1); the loss in fp32 in both precisions
        with autocast():
            logits = model(input_ids=ids[:, :-1]).logits  # (B, S, V)
            return torch.nn.functional.cross_entropy(logits.float().reshape(-1, config.vocab_size),
                                                     ids[:, 1:].reshape(-1))

    def validation_loss():
        model.eval()
        with torch.no_grad():
            losses = [float(loss_of(val_rows[b * args.batch:(b + 1) * args.batch])) for b in range(args.eval_batches)]
        model.train()
        return sum(losses) / len(losses)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    generator = torch.Generator().manual_seed(args.seed + 1)
    before = validation_loss()
    losses = []
    for step in range(1, args.steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.lr, args.min_lr, args.warmup, args.steps)
        starts = torch.randint(0, train.numel() - args.seq - 1, (args.batch,), generator=generator)
        ids = torch.stack([train[s: s + args.seq + 1] for s in starts.tolist()])  # (B, S + 1)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(ids)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    print(json.dumps({"tool": "torch", "torch": torch.__version__, "precision": args.precision, "seed": args.seed,
                      "steps": args.steps, "val_loss_before": before, "val_loss": validation_loss(),
                      "losses": losses}))


if __name__ == "__main__":
    main()
