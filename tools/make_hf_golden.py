#!/usr/bin/env python3
"""Write the Hugging Face golden files the C++ tests compare against, with transformers itself.

Run with the reference environment (torch + transformers pinned by tools/reference_env.sh; CI and
`make test` never need it):

    PY=$(tools/reference_env.sh) && $PY tools/make_hf_golden.py

Every model is a random transformers model saved with save_pretrained, so the files are exactly
what a user downloads; the numbers are transformers' own forward (eager attention).

tests/golden/<set>/ for the sets of issue 13 (odd sizes: hidden 288, 6 heads, 2 kv heads, head_dim
48; V = 257, the byte tokenizer's, so fpdt can train them on `fpdt tokenize` shards; one batch
B = 2, T = 64):
    llama        untied, saved sharded (model.safetensors.index.json + shards), BF16
    llama_tied   tied, model.safetensors BF16; variant/ holds the same model as transformers writes
                 its base model (no "model." prefix) in F16, sharded
    qwen2        q/k/v biases, use_sliding_window with window 16 on layer 1 (max_window_layers 1)
    mistral      sliding window 16 (S = 64 > W), saved in F16
    llama3       rope_type llama3 (θ 500000, factor 8, original 32, low 1, high 4)
    yarn         rope_type yarn (factor 4, original 16): frequencies and attention scaling
    gpt2         scale_attn_weights false, scale_attn_by_inverse_layer_idx true, saved as the Hub's
                 gpt2 is (base model: no "transformer." prefix)
  golden.safetensors: golden.input_ids (B, T) I32, golden.targets (B, T) I32 (next tokens given
  explicitly, ~20 % and a tail of sequence 1 set to -100), golden.logits (B, T, V) F32 and
  golden.loss (1,) F32 — transformers' float32 forward, mean cross-entropy over counted targets.
  Weights are rounded to values that BF16 and F16 both hold exactly (|w| < 2^-14 flushed to 0), so
  every stored copy is the very model the logits belong to.

tests/golden/grad_<set>/ (small: F32 weights; float64 forward/backward of the transformers model on
those weights; B = 2, T = 24): llama (GQA, untied), qwen2 (biases, GQA 4:1, tied, window 8 on
layer 1), gpt2 (both attention-scaling flags on). golden.safetensors adds grad.<name> (F32) for
every parameter and golden.adamw_losses (5,): the loss before each of 5 torch.optim.AdamW steps
(lr 1e-2, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on tensors of rank >= 2).

tests/golden/rope_tables.safetensors: transformers' inverse-frequency table (F32) and attention
scaling of each RoPE configuration in ROPE_CASES (metadata "cases": their rope_parameters).

Checks before writing: each feature a set exists for changes its logits by far more than the tests'
1e-5 (the feature switched off: RoPE scaling, window, biases, scaling flags, θ), recorded in the
metadata "sensitivity"; each set folder is under 2 MB. Deterministic (fixed seeds).
"""

import copy
import json
import math
import os
import shutil

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "golden")
SIZE_LIMIT_BYTES = 2 << 20
IGNORE_INDEX = -100
SENSITIVITY_MIN = 1e-3  # each feature moves the logits by at least this (relative); the tests' bar is 1e-5

ODD = dict(hidden_size=288, num_attention_heads=6, num_key_value_heads=2, head_dim=48, intermediate_size=96,
           vocab_size=257, num_hidden_layers=1, max_position_embeddings=64, rms_norm_eps=1e-5)


def odd(**changes):
    shape = dict(ODD)
    shape.update(changes)
    return shape


# ---- weights, batches, numbers ---------------------------------------------------------------------

def randomize(model, seed, exact_halves):
    """Random weights that make every part of the model matter: attention neither uniform nor one-hot,
    norm weights and biases away from 1 and 0. exact_halves: round to values BF16 and F16 both hold."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                value = 0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            elif p.dim() == 1:  # norm weights
                value = 1.0 + 0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            elif "embed_tokens" in name or "wte" in name or "wpe" in name:  # (V, h): also a tied head
                value = 2.0 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            else:  # (out, in) Linear or (in, out) Conv1D: unit-variance outputs, q and k a bit sharper
                fan_in = p.shape[0] if "c_attn" in name or "c_fc" in name or "c_proj" in name else p.shape[1]
                gain = 1.5 if ("q_proj" in name or "k_proj" in name or "c_attn" in name) else 1.0
                value = gain / math.sqrt(fan_in) * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            value = value.to(torch.float32)
            if exact_halves:
                value = value.to(torch.bfloat16).to(torch.float32)
                value[value.abs() < 2.0 ** -14] = 0.0  # below F16's normals: F16 could not hold it exactly
                assert torch.equal(value.to(torch.float16).to(torch.float32), value)
            p.copy_(value.to(p.dtype))


def make_batch(V, B, T, seed):
    gen = torch.Generator().manual_seed(seed)
    seq = torch.randint(0, V, (B, T + 1), generator=gen)
    input_ids, targets = seq[:, :-1].clone(), seq[:, 1:].clone()
    targets[1, T - 5:] = IGNORE_INDEX  # a whole run of ignored targets at the end of sequence 1
    free = (targets != IGNORE_INDEX).flatten().nonzero().flatten()
    pick = free[torch.randperm(len(free), generator=gen)[: int(0.2 * targets.numel())]]
    targets.view(-1)[pick] = IGNORE_INDEX
    return input_ids, targets


def logits_and_loss(model, input_ids, targets):
    logits = model(input_ids=input_ids).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX)
    return logits, loss


def relative(a, b):
    return float((a - b).norm() / b.norm())


def build(config_class, model_class, settings):
    config = config_class(**settings)
    config._attn_implementation = "eager"
    return model_class(config).eval()


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def save_model(model, path, **kwargs):
    model.save_pretrained(path, **kwargs)
    extra = os.path.join(path, "generation_config.json")  # generation defaults: not ours
    if os.path.exists(extra):
        os.remove(extra)


# ---- the issue's sets: transformers' float32 logits and loss ----------------------------------------

def sensitivity(name, model, batch, logits, switched_off):
    """Logits of the same weights with one feature switched off must differ by > SENSITIVITY_MIN."""
    other = switched_off(model)
    with torch.no_grad():
        change = relative(logits_and_loss(other.eval(), *batch)[0], logits)
    assert change > SENSITIVITY_MIN, f"{name}: the feature moves the logits by only {change:.2e}"
    return change


def write_logits_set(name, model, save, checks, seed, T=64):
    """Saves `model` via save(model, folder), its batch and transformers' float32 logits and loss."""
    path = os.path.join(OUT_DIR, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    V = model.config.vocab_size
    batch = make_batch(V, 2, T, seed + 1)
    with torch.no_grad():
        logits, loss = logits_and_loss(model, *batch)
    changes = {feature: sensitivity(f"{name} {feature}", model, batch, logits, off) for feature, off in checks.items()}
    save(model, path)
    tensors = {"golden.input_ids": batch[0].to(torch.int32).contiguous(),
               "golden.targets": batch[1].to(torch.int32).contiguous(),
               "golden.logits": logits.to(torch.float32).contiguous(),
               "golden.loss": loss.reshape(1).to(torch.float32)}
    save_file(tensors, os.path.join(path, "golden.safetensors"),
              metadata={"format": "fpdt-hf-golden", "version": "1", "set": name,
                        "transformers": transformers.__version__, "torch": torch.__version__,
                        "loss": repr(float(loss)), "sensitivity": json.dumps(changes)})
    size = folder_bytes(path)
    assert size < SIZE_LIMIT_BYTES, f"{name}: {size} bytes"
    print(f"{name:12s} loss {float(loss):.6f}  {size / 1e6:.2f} MB  feature changes " +
          ", ".join(f"{k} {v:.1e}" for k, v in changes.items()))


def switched(config_changes):
    """A function making the same model (same weights) with some config fields changed."""
    def make(model):
        settings = model.config.to_dict()
        settings.update(config_changes)
        config = type(model.config).from_dict(settings)
        config._attn_implementation = "eager"
        other = type(model)(config).eval()
        other.load_state_dict(model.state_dict())
        return other
    return make


def llama_sets():
    def llama(**changes):
        return build(LlamaConfig, LlamaForCausalLM, odd(**changes))

    model = llama(tie_word_embeddings=False, rope_theta=10000.0)
    randomize(model, 11, exact_halves=True)
    write_logits_set("llama", model.to(torch.float32),
                     lambda m, p: save_model(m.to(torch.bfloat16), p, max_shard_size="250KB"),
                     {"rope_theta": switched({"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})},
                     seed=11)

    model = llama(tie_word_embeddings=True, rope_theta=10000.0)
    randomize(model, 12, exact_halves=True)

    def save_tied(m, path):
        variant = copy.deepcopy(m)
        save_model(m.to(torch.bfloat16), path)
        # transformers' base model (no "model." prefix), F16, sharded: the variants the loader reads.
        save_model(variant.model.to(torch.float16), os.path.join(path, "variant"), max_shard_size="250KB")
    write_logits_set("llama_tied", model, save_tied,
                     {"rope_theta": switched({"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})},
                     seed=12)

    model = llama(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 32})
    randomize(model, 13, exact_halves=True)
    write_logits_set("llama3", model, lambda m, p: save_model(m.to(torch.bfloat16), p),
                     {"llama3_scaling": switched({"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})},
                     seed=13)

    model = llama(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                   "original_max_position_embeddings": 16})
    randomize(model, 14, exact_halves=True)
    write_logits_set("yarn", model, lambda m, p: save_model(m.to(torch.bfloat16), p),
                     {"yarn_scaling": switched({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
                      "yarn_attention_factor": switched({"rope_parameters": {
                          "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                          "original_max_position_embeddings": 16, "attention_factor": 1.0}})},
                     seed=14)


def qwen2_mistral_sets():
    model = build(Qwen2Config, Qwen2ForCausalLM,
                  odd(num_hidden_layers=2, use_sliding_window=True, sliding_window=16, max_window_layers=1))
    randomize(model, 21, exact_halves=True)

    def without_biases(m):
        other = switched({})(m)
        with torch.no_grad():
            for name, p in other.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
        return other
    write_logits_set("qwen2", model, lambda m, p: save_model(m.to(torch.bfloat16), p),
                     {"biases": without_biases,
                      "sliding_window": switched({"use_sliding_window": False, "layer_types": None})},
                     seed=21)

    model = build(MistralConfig, MistralForCausalLM, odd(sliding_window=16))
    randomize(model, 22, exact_halves=True)
    write_logits_set("mistral", model, lambda m, p: save_model(m.to(torch.float16), p),
                     {"sliding_window": switched({"sliding_window": None})}, seed=22)


def gpt2_set():
    settings = dict(vocab_size=257, n_embd=288, n_head=6, n_layer=2, n_inner=96, n_positions=64,
                    layer_norm_epsilon=1e-5, scale_attn_weights=False, scale_attn_by_inverse_layer_idx=True,
                    bos_token_id=0, eos_token_id=0)
    model = build(GPT2Config, GPT2LMHeadModel, settings)
    randomize(model, 31, exact_halves=True)
    # The Hub's gpt2 stores the base model: names without "transformer.".
    write_logits_set("gpt2", model, lambda m, p: save_model(m.transformer.to(torch.bfloat16), p),
                     {"scale_attn_weights": switched({"scale_attn_weights": True}),
                      "scale_attn_by_inverse_layer_idx": switched({"scale_attn_by_inverse_layer_idx": False})},
                     seed=31)


# ---- small sets with gradients and AdamW, in float64 ------------------------------------------------

ADAMW = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "steps": 5}


def write_grad_set(name, model, seed):
    path = os.path.join(OUT_DIR, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    randomize(model, seed, exact_halves=False)
    save_model(model.to(torch.float32), path)
    model = model.to(torch.float64)
    input_ids, targets = make_batch(model.config.vocab_size, 2, 24, seed + 1)
    logits, loss = logits_and_loss(model, input_ids, targets)
    loss.backward()
    tensors = {"golden.input_ids": input_ids.to(torch.int32).contiguous(),
               "golden.targets": targets.to(torch.int32).contiguous(),
               "golden.logits": logits.detach().to(torch.float32).contiguous(),
               "golden.loss": loss.detach().reshape(1).to(torch.float32)}
    for pname, p in model.named_parameters():
        tensors["grad." + pname] = p.grad.to(torch.float32).contiguous()
    # AdamW from the saved weights: decay on matrices and embeddings (rank >= 2) only.
    model.zero_grad()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": ADAMW["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"])
    losses = []
    for _ in range(ADAMW["steps"]):
        optimizer.zero_grad()
        step_loss = logits_and_loss(model, input_ids, targets)[1]
        losses.append(step_loss.item())
        step_loss.backward()
        optimizer.step()
    tensors["golden.adamw_losses"] = torch.tensor(losses, dtype=torch.float32)
    save_file(tensors, os.path.join(path, "golden.safetensors"),
              metadata={"format": "fpdt-hf-golden", "version": "1", "set": name, "adamw": json.dumps(ADAMW),
                        "transformers": transformers.__version__, "torch": torch.__version__,
                        "loss": repr(loss.item())})
    size = folder_bytes(path)
    assert size < SIZE_LIMIT_BYTES, f"{name}: {size} bytes"
    print(f"{name:12s} loss {loss.item():.6f}  {size / 1e6:.2f} MB  AdamW " + " ".join(f"{x:.4f}" for x in losses))


def grad_sets():
    write_grad_set("grad_llama", build(LlamaConfig, LlamaForCausalLM, dict(
        vocab_size=101, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=256,
        tie_word_embeddings=False)), seed=41)
    write_grad_set("grad_qwen2", build(Qwen2Config, Qwen2ForCausalLM, dict(
        vocab_size=97, hidden_size=48, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=12, rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=256,
        tie_word_embeddings=True, use_sliding_window=True, sliding_window=8, max_window_layers=1)), seed=42)
    write_grad_set("grad_gpt2", build(GPT2Config, GPT2LMHeadModel, dict(
        vocab_size=103, n_embd=64, n_layer=2, n_head=4, n_positions=128, layer_norm_epsilon=1e-5,
        scale_attn_by_inverse_layer_idx=True, bos_token_id=0, eos_token_id=0)), seed=43)


# ---- RoPE tables ---------------------------------------------------------------------------------

ROPE_CASES = {
    "default_small": ({"rope_type": "default", "rope_theta": 10000.0}, 48, 2048),
    "default_llama3": ({"rope_type": "default", "rope_theta": 500000.0}, 128, 8192),
    "linear": ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, 64, 4096),
    "llama3_1": ({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 128, 131072),
    "llama3_golden": ({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 32}, 48, 64),
    "yarn": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
              "original_max_position_embeddings": 2048}, 64, 8192),
    "yarn_no_truncate": ({"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "truncate": False,
                          "original_max_position_embeddings": 32768}, 128, 131072),
    "yarn_betas": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "beta_fast": 16, "beta_slow": 2,
                    "original_max_position_embeddings": 4096}, 96, 32768),
    "yarn_attention_factor": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0, "attention_factor": 0.8,
                               "original_max_position_embeddings": 1024}, 64, 2048),
    "yarn_mscale": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 1.0,
                     "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096}, 64, 163840),
    "yarn_factor_from_lengths": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": None,
                                  "original_max_position_embeddings": 1024}, 64, 8192),
}


def rope_tables():
    tensors, cases = {}, {}
    for name, (rope, head_dim, max_positions) in ROPE_CASES.items():
        config = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                             max_position_embeddings=max_positions, rope_parameters=copy.deepcopy(rope))
        if rope["rope_type"] == "default":
            inv_freq, scaling = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
        else:
            inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope["rope_type"]](config)
        tensors[name + ".inv_freq"] = inv_freq.to(torch.float32).contiguous()
        cases[name] = {"rope_parameters": rope, "head_dim": head_dim, "max_position_embeddings": max_positions,
                       "attention_scaling": float(scaling)}
    path = os.path.join(OUT_DIR, "rope_tables.safetensors")
    save_file(tensors, path, metadata={"format": "fpdt-rope-tables", "version": "1", "cases": json.dumps(cases),
                                       "transformers": transformers.__version__})
    print(f"rope tables: {len(cases)} cases, {os.path.getsize(path)} bytes")


def main():
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    llama_sets()
    qwen2_mistral_sets()
    gpt2_set()
    grad_sets()
    rope_tables()


if __name__ == "__main__":
    main()
