#!/usr/bin/python3
"""Write the PyTorch golden files that the C++ engine's parity tests compare against.

Re-run (Debian's system interpreter, which has torch and numpy; no other packages needed):

    /usr/bin/python3 tools/make_golden.py

What it writes, for each model NAME in {llama_gqa, llama_tied_partial, gpt2}:

    tests/golden/NAME/config.json          a Hugging Face config.json
    tests/golden/NAME/golden.safetensors   weights, one batch, logits, loss, gradients and
                                           a 5-step AdamW loss trajectory

The models are written here in plain torch with Hugging Face semantics (LlamaForCausalLM,
GPT2LMHeadModel); `transformers` and `safetensors` are not used: the safetensors file is
written by hand (u64 LE header length N, N bytes of JSON header padded with spaces to a
multiple of 8, then the raw little-endian tensor data in header order).

Tensors in golden.safetensors (all F32 except the ids and targets, which are I32):
    <hf name>                       every weight under its Hugging Face name and layout
    golden.input_ids    (B, T)      I32, uniform in [0, V)
    golden.targets      (B, T)      I32, next-token ids given explicitly (NOT shifted inside
                                    the model); about 20 % are -100 (ignored), including a
                                    whole run at the end of the second sequence
    golden.logits       (B, T, V)
    golden.loss         (1,)        mean cross-entropy over positions with target != -100
    golden.adamw_losses (5,)        loss before AdamW step 1, 2, ..., 5 on the same batch,
                                    starting from the saved weights (hyper-parameters in the
                                    "adamw" metadata entry)
    grad.<hf name>                  d loss / d weight, same layout as the weight
Metadata: format, version, model, adamw (JSON string), loss, torch.

Everything is computed in float64 from weights that are first rounded to float32, so the
saved F32 weights are exactly the weights the float64 results belong to. Seeds are fixed, so
re-running reproduces the files bit for bit (with the same torch build).

Before writing, the script asserts for each model: the torch model's logits and loss agree
with an independent naive numpy formulation (explicit loops over batch, head, query and
causal key range; explicit pairwise RoPE; its own norms and activations) to 1e-12; the
autograd gradients agree with float64 finite differences on random weight entries (and along
one random direction through all weights) to 1e-6 relative; a hand-written AdamW reproduces
torch.optim.AdamW's loss trajectory. After writing, it re-opens each file, parses the header
and checks that names, dtypes, shapes, offsets and bytes round-trip, and that the file is
under SIZE_LIMIT_BYTES.
"""

import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "golden")

B, T = 2, 24
IGNORE_INDEX = -100
IGNORE_TAIL = 5          # whole run of ignored targets at the end of sequence 1
IGNORE_FRACTION = 0.2
ADAMW = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "steps": 5}
# The brief asked for < 600 KB, but the prescribed shapes alone need more: llama_gqa has
# 105,408 weights and gpt2 114,880, i.e. ~422 KB / ~460 KB of F32 weights plus as much
# again for the gradients. 1 MiB is the bound actually enforced.
SIZE_LIMIT_BYTES = 1 << 20

LLAMA_GQA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 101, "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 256,
    "tie_word_embeddings": False, "hidden_act": "silu",
}
LLAMA_TIED_PARTIAL = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 97, "hidden_size": 48, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
    "head_dim": 12, "partial_rotary_factor": 0.5,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 256,
    "tie_word_embeddings": True, "hidden_act": "silu",
}
GPT2 = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
    "vocab_size": 103, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128,
    "n_inner": None, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
    "tie_word_embeddings": True,
}


# ----------------------------------------------------------------------------------------
# Parameter shapes (HF names, HF module order) and initialisation
# ----------------------------------------------------------------------------------------

def llama_dims(cfg):
    h, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim", h // H)
    rot = int(D * cfg.get("partial_rotary_factor", 1.0))
    return h, H, Hkv, D, rot


def llama_shapes(cfg):
    V, f, L = cfg["vocab_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    h, H, Hkv, D, _ = llama_dims(cfg)
    shapes = [("model.embed_tokens.weight", (V, h))]
    for l in range(L):
        p = f"model.layers.{l}."
        shapes += [
            (p + "self_attn.q_proj.weight", (H * D, h)),
            (p + "self_attn.k_proj.weight", (Hkv * D, h)),
            (p + "self_attn.v_proj.weight", (Hkv * D, h)),
            (p + "self_attn.o_proj.weight", (h, H * D)),
            (p + "mlp.gate_proj.weight", (f, h)),
            (p + "mlp.up_proj.weight", (f, h)),
            (p + "mlp.down_proj.weight", (h, f)),
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
    shapes.append(("model.norm.weight", (h,)))
    if not cfg["tie_word_embeddings"]:
        shapes.append(("lm_head.weight", (V, h)))
    return shapes


def gpt2_shapes(cfg):
    V, h, L, Pn = cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"], cfg["n_positions"]
    f = cfg["n_inner"] or 4 * h
    shapes = [("transformer.wte.weight", (V, h)), ("transformer.wpe.weight", (Pn, h))]
    for l in range(L):
        p = f"transformer.h.{l}."
        shapes += [
            (p + "ln_1.weight", (h,)), (p + "ln_1.bias", (h,)),
            (p + "attn.c_attn.weight", (h, 3 * h)), (p + "attn.c_attn.bias", (3 * h,)),
            (p + "attn.c_proj.weight", (h, h)), (p + "attn.c_proj.bias", (h,)),
            (p + "ln_2.weight", (h,)), (p + "ln_2.bias", (h,)),
            (p + "mlp.c_fc.weight", (h, f)), (p + "mlp.c_fc.bias", (f,)),
            (p + "mlp.c_proj.weight", (f, h)), (p + "mlp.c_proj.bias", (h,)),
        ]
    shapes += [("transformer.ln_f.weight", (h,)), ("transformer.ln_f.bias", (h,))]
    return shapes


def is_norm_weight(name):
    return name.endswith("norm.weight") or (".ln_" in name and name.endswith(".weight"))


def init_params(shapes, gen):
    """Matrices/embeddings: N(0, (0.02*u)^2), u ~ U[1, 3] per tensor; norm weights:
    1 + 0.1*N(0,1); biases: 0.1*N(0,1). Rounded to float32, held as float64 leaves."""
    params = {}
    for name, shape in shapes:
        z = torch.randn(shape, generator=gen, dtype=torch.float64)
        if name.endswith(".bias"):
            w = 0.1 * z
        elif is_norm_weight(name):
            w = 1.0 + 0.1 * z
        else:
            assert len(shape) == 2, name
            factor = 1.0 + 2.0 * torch.rand((), generator=gen, dtype=torch.float64).item()
            w = 0.02 * factor * z
        params[name] = w.float().double().requires_grad_(True)
    return params


def make_batch(V, gen):
    seq = torch.randint(0, V, (B, T + 1), generator=gen)
    input_ids = seq[:, :T].clone()
    targets = seq[:, 1:].clone()
    targets[1, T - IGNORE_TAIL:] = IGNORE_INDEX
    n_more = round(IGNORE_FRACTION * B * T) - IGNORE_TAIL
    free = (targets != IGNORE_INDEX).flatten().nonzero().flatten()
    pick = free[torch.randperm(free.numel(), generator=gen)[:n_more]]
    targets.view(-1)[pick] = IGNORE_INDEX
    return input_ids, targets


# ----------------------------------------------------------------------------------------
# Torch models (vectorised; autograd gives the gradients)
# ----------------------------------------------------------------------------------------

def causal_attention(q, k, v):
    """q (B,H,T,D), k/v (B,H,T,D) -> (B,T,H*D); softmax(q k^T / sqrt(D) + causal) v."""
    Tq, D = q.shape[-2], q.shape[-1]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    mask = torch.ones(Tq, Tq, dtype=torch.bool).triu(1)
    p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
    o = p @ v
    return o.transpose(1, 2).reshape(q.shape[0], Tq, -1)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat([-x[..., d:], x[..., :d]], dim=-1)


def rope_cos_sin(Tn, rot, theta):
    inv_freq = theta ** (-torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    freqs = torch.outer(torch.arange(Tn, dtype=torch.float64), inv_freq)   # (T, rot/2)
    emb = torch.cat([freqs, freqs], dim=-1)                                # (T, rot)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin, rot):
    """x (B,H,T,D): rotate-half RoPE on the first rot dims, pass the rest through."""
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat([xr * cos + rotate_half(xr) * sin, xp], dim=-1)


def llama_logits(P, cfg, ids):
    L, eps = cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    h, H, Hkv, D, rot = llama_dims(cfg)
    Bn, Tn = ids.shape
    cos, sin = rope_cos_sin(Tn, rot, cfg["rope_theta"])
    x = P["model.embed_tokens.weight"][ids]
    for l in range(L):
        p = f"model.layers.{l}."
        a = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q = (a @ P[p + "self_attn.q_proj.weight"].T).view(Bn, Tn, H, D).transpose(1, 2)
        k = (a @ P[p + "self_attn.k_proj.weight"].T).view(Bn, Tn, Hkv, D).transpose(1, 2)
        v = (a @ P[p + "self_attn.v_proj.weight"].T).view(Bn, Tn, Hkv, D).transpose(1, 2)
        q, k = apply_rope(q, cos, sin, rot), apply_rope(k, cos, sin, rot)
        k = k.repeat_interleave(H // Hkv, dim=1)   # kv head j serves q heads j*g .. j*g+g-1
        v = v.repeat_interleave(H // Hkv, dim=1)
        x = x + causal_attention(q, k, v) @ P[p + "self_attn.o_proj.weight"].T
        m = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        gate = m @ P[p + "mlp.gate_proj.weight"].T
        up = m @ P[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ P[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else P["lm_head.weight"]
    return x @ head.T


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_logits(P, cfg, ids):
    h, L, H, eps = cfg["n_embd"], cfg["n_layer"], cfg["n_head"], cfg["layer_norm_epsilon"]
    D = h // H
    Bn, Tn = ids.shape

    def heads(t):
        return t.view(Bn, Tn, H, D).transpose(1, 2)

    x = P["transformer.wte.weight"][ids] + P["transformer.wpe.weight"][:Tn]
    for l in range(L):
        p = f"transformer.h.{l}."
        a = F.layer_norm(x, (h,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        qkv = a @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]   # Conv1D
        q, k, v = qkv.split(h, dim=-1)
        o = causal_attention(heads(q), heads(k), heads(v))
        x = x + o @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        m = F.layer_norm(x, (h,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        u = gelu_new(m @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])
        x = x + u @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (h,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps)
    return x @ P["transformer.wte.weight"].T


def mean_ce(logits, targets):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX, reduction="mean")


# ----------------------------------------------------------------------------------------
# Naive numpy reference (explicit loops; shares nothing with the torch code above)
# ----------------------------------------------------------------------------------------

def naive_attention_row(q_t, keys, values, D):
    """One query against keys[0..t] (the causal range), explicit softmax."""
    scores = np.array([float(np.dot(q_t, k_s)) / math.sqrt(D) for k_s in keys])
    e = np.exp(scores - scores.max())
    p = e / e.sum()
    out = np.zeros(D)
    for s in range(len(keys)):
        out += p[s] * values[s]
    return out


def naive_llama_logits(P, cfg, ids):
    L, eps, theta = cfg["num_hidden_layers"], cfg["rms_norm_eps"], cfg["rope_theta"]
    h, H, Hkv, D, rot = llama_dims(cfg)
    g, half = H // Hkv, rot // 2
    Bn, Tn = ids.shape

    def rms(vec, w):
        return vec / math.sqrt(float(np.sum(vec * vec)) / vec.size + eps) * w

    def rope(vec, pos):  # pairs (i, i + rot/2) inside the first rot dims
        out = vec.copy()
        for i in range(half):
            ang = pos / theta ** (2.0 * i / rot)
            c, s = math.cos(ang), math.sin(ang)
            out[i] = vec[i] * c - vec[i + half] * s
            out[i + half] = vec[i + half] * c + vec[i] * s
        return out

    x = np.zeros((Bn, Tn, h))
    for b in range(Bn):
        for t in range(Tn):
            x[b, t] = P["model.embed_tokens.weight"][ids[b, t]]
    for l in range(L):
        p = f"model.layers.{l}."
        Wq, Wk = P[p + "self_attn.q_proj.weight"], P[p + "self_attn.k_proj.weight"]
        Wv, Wo = P[p + "self_attn.v_proj.weight"], P[p + "self_attn.o_proj.weight"]
        for b in range(Bn):
            a = [rms(x[b, t], P[p + "input_layernorm.weight"]) for t in range(Tn)]
            q = [[rope(Wq[n * D:(n + 1) * D] @ a[t], t) for n in range(H)] for t in range(Tn)]
            k = [[rope(Wk[j * D:(j + 1) * D] @ a[t], t) for j in range(Hkv)] for t in range(Tn)]
            v = [[Wv[j * D:(j + 1) * D] @ a[t] for j in range(Hkv)] for t in range(Tn)]
            new = x[b].copy()
            for t in range(Tn):
                o = np.zeros(H * D)
                for n in range(H):
                    j = n // g
                    o[n * D:(n + 1) * D] = naive_attention_row(
                        q[t][n], [k[s][j] for s in range(t + 1)],
                        [v[s][j] for s in range(t + 1)], D)
                new[t] += Wo @ o
            x[b] = new
            for t in range(Tn):
                m = rms(x[b, t], P[p + "post_attention_layernorm.weight"])
                gate = P[p + "mlp.gate_proj.weight"] @ m
                up = P[p + "mlp.up_proj.weight"] @ m
                x[b, t] += P[p + "mlp.down_proj.weight"] @ (gate / (1.0 + np.exp(-gate)) * up)
    head = P["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else P["lm_head.weight"]
    logits = np.zeros((Bn, Tn, head.shape[0]))
    for b in range(Bn):
        for t in range(Tn):
            logits[b, t] = head @ rms(x[b, t], P["model.norm.weight"])
    return logits


def naive_gpt2_logits(P, cfg, ids):
    h, L, H, eps = cfg["n_embd"], cfg["n_layer"], cfg["n_head"], cfg["layer_norm_epsilon"]
    D = h // H
    Bn, Tn = ids.shape

    def ln(vec, w, bias):
        mu = float(np.sum(vec)) / vec.size
        var = float(np.sum((vec - mu) ** 2)) / vec.size
        return (vec - mu) / math.sqrt(var + eps) * w + bias

    def gelu(z):
        return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z * z * z)))

    x = np.zeros((Bn, Tn, h))
    for b in range(Bn):
        for t in range(Tn):
            x[b, t] = P["transformer.wte.weight"][ids[b, t]] + P["transformer.wpe.weight"][t]
    for l in range(L):
        p = f"transformer.h.{l}."
        for b in range(Bn):
            qkv = [ln(x[b, t], P[p + "ln_1.weight"], P[p + "ln_1.bias"]) @ P[p + "attn.c_attn.weight"]
                   + P[p + "attn.c_attn.bias"] for t in range(Tn)]
            new = x[b].copy()
            for t in range(Tn):
                o = np.zeros(h)
                for n in range(H):
                    q_t = qkv[t][n * D:(n + 1) * D]
                    keys = [qkv[s][h + n * D:h + (n + 1) * D] for s in range(t + 1)]
                    vals = [qkv[s][2 * h + n * D:2 * h + (n + 1) * D] for s in range(t + 1)]
                    o[n * D:(n + 1) * D] = naive_attention_row(q_t, keys, vals, D)
                new[t] += o @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
            x[b] = new
            for t in range(Tn):
                m = ln(x[b, t], P[p + "ln_2.weight"], P[p + "ln_2.bias"])
                u = gelu(m @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])
                x[b, t] += u @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
    wte = P["transformer.wte.weight"]
    logits = np.zeros((Bn, Tn, wte.shape[0]))
    for b in range(Bn):
        for t in range(Tn):
            logits[b, t] = wte @ ln(x[b, t], P["transformer.ln_f.weight"], P["transformer.ln_f.bias"])
    return logits


def naive_mean_ce(logits, targets):
    total, count = 0.0, 0
    for b in range(logits.shape[0]):
        for t in range(logits.shape[1]):
            y = int(targets[b, t])
            if y == IGNORE_INDEX:
                continue
            row = logits[b, t]
            mx = row.max()
            total += mx + math.log(float(np.sum(np.exp(row - mx)))) - row[y]
            count += 1
    return total / count


# ----------------------------------------------------------------------------------------
# Checks: finite differences, AdamW
# ----------------------------------------------------------------------------------------

def fd_derivative(f, h):
    """Fourth-order central difference of a scalar function f(eps) at eps = 0."""
    return (-f(2 * h) + 8 * f(h) - 8 * f(-h) + f(-2 * h)) / (12 * h)


def check_finite_differences(loss_fn, params, grads, gen, n_entries=12, h=1e-3, rtol=1e-6):
    """Random entries (tensor first, then entry, so norms and biases get picked too) until
    n_entries with a non-zero gradient were checked to rtol. Entries whose gradient is
    structurally zero (embedding rows of tokens absent from the batch, GPT-2's key bias,
    which softmax cancels) are checked for |fd| < 1e-10 and counted apart."""
    names = list(params)
    worst, n_checked, n_zero = 0.0, 0, 0
    with torch.no_grad():
        while n_checked < n_entries:
            name = names[torch.randint(len(names), (1,), generator=gen).item()]
            w = params[name]
            idx = torch.randint(w.numel(), (1,), generator=gen).item()
            orig = w.view(-1)[idx].item()

            def f(e):
                w.view(-1)[idx] = orig + e
                return loss_fn(params).item()

            fd = fd_derivative(f, h)
            w.view(-1)[idx] = orig
            g = grads[name].view(-1)[idx].item()
            if abs(g) < 1e-9:
                assert abs(fd) < 1e-10, (name, idx, fd, g)
                n_zero += 1
                continue
            rel = abs(fd - g) / abs(g)
            assert rel <= rtol, (name, idx, fd, g)
            worst = max(worst, rel)
            n_checked += 1
        # One random direction through every weight at once.
        direction = {n: torch.randn(p.shape, generator=gen, dtype=torch.float64) for n, p in params.items()}
        norm = math.sqrt(sum(float((d * d).sum()) for d in direction.values()))
        direction = {n: d / norm for n, d in direction.items()}   # unit length overall
        base = {n: p.clone() for n, p in params.items()}

        def fdir(e):
            for n in params:
                params[n].copy_(base[n] + e * direction[n])
            return loss_fn(params).item()

        fd = fd_derivative(fdir, h)
        for n in params:
            params[n].copy_(base[n])
        g = sum(float((grads[n] * direction[n]).sum()) for n in params)
        dir_err = abs(fd - g) / abs(g)
        assert dir_err <= rtol, (fd, g)
    return worst, n_checked, n_zero, dir_err


def adamw_param_groups(params):
    decay = [p for p in params.values() if p.ndim >= 2]
    no_decay = [p for p in params.values() if p.ndim < 2]
    return [{"params": decay, "weight_decay": ADAMW["weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0}]


def run_adamw(loss_fn, params):
    ps = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    opt = torch.optim.AdamW(adamw_param_groups(ps), lr=ADAMW["lr"], betas=ADAMW["betas"],
                            eps=ADAMW["eps"])
    losses = []
    for _ in range(ADAMW["steps"]):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ps)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return losses


def run_adamw_by_hand(loss_fn, params):
    """The same trajectory with the update written out (documents the exact rule)."""
    lr, (b1, b2), eps, wd = ADAMW["lr"], ADAMW["betas"], ADAMW["eps"], ADAMW["weight_decay"]
    ps = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    m = {n: torch.zeros_like(p) for n, p in ps.items()}
    v = {n: torch.zeros_like(p) for n, p in ps.items()}
    losses = []
    for step in range(1, ADAMW["steps"] + 1):
        loss = loss_fn(ps)
        losses.append(loss.item())
        grads = torch.autograd.grad(loss, list(ps.values()))
        with torch.no_grad():
            for (n, p), g in zip(ps.items(), grads):
                if p.ndim >= 2:
                    p.mul_(1.0 - lr * wd)
                m[n] = b1 * m[n] + (1.0 - b1) * g
                v[n] = b2 * v[n] + (1.0 - b2) * g * g
                denom = v[n].sqrt() / math.sqrt(1.0 - b2 ** step) + eps
                p.sub_((lr / (1.0 - b1 ** step)) * m[n] / denom)
    return losses


# ----------------------------------------------------------------------------------------
# safetensors writer and reader (by hand)
# ----------------------------------------------------------------------------------------

DTYPES = {np.dtype("<f4"): "F32", np.dtype("<i4"): "I32"}


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, numpy array of float32/int32); laid out in list order."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
        blob = arr.tobytes()
        header[name] = {"dtype": DTYPES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0 and 8 + n <= len(raw)
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {})
    out, expect = {}, 0
    for name, info in header.items():       # json keeps file order
        begin, end = info["data_offsets"]
        assert begin == expect, (name, begin, expect)
        dt = {"F32": "<f4", "I32": "<i4"}[info["dtype"]]
        arr = np.frombuffer(data[begin:end], dtype=dt)
        assert arr.size == math.prod(info["shape"]), name
        out[name] = (info, arr.reshape(info["shape"]))
        expect = end
    assert expect == len(data), (expect, len(data))
    return out, metadata


def check_roundtrip(path, tensors, metadata):
    read, meta = read_safetensors(path)
    assert list(read) == [n for n, _ in tensors], "tensor names/order differ"
    offset = 0
    for name, arr in tensors:
        info, back = read[name]
        nbytes = arr.size * 4
        assert info["shape"] == list(arr.shape), name
        assert info["dtype"] == DTYPES[arr.dtype.newbyteorder("<")], name
        assert info["data_offsets"] == [offset, offset + nbytes], name
        assert back.dtype == arr.dtype and np.array_equal(back, arr), name
        offset += nbytes
    assert meta == metadata


# ----------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------

def f32(t):
    return t.detach().to(torch.float32).numpy()


def make_model(name, cfg, seed):
    gen = torch.Generator().manual_seed(seed)
    if cfg["model_type"] == "llama":
        shapes, logits_fn, naive_fn = llama_shapes(cfg), llama_logits, naive_llama_logits
    else:
        shapes, logits_fn, naive_fn = gpt2_shapes(cfg), gpt2_logits, naive_gpt2_logits
    params = init_params(shapes, gen)
    input_ids, targets = make_batch(cfg["vocab_size"], gen)

    def loss_fn(P):
        return mean_ce(logits_fn(P, cfg, input_ids), targets)

    logits = logits_fn(params, cfg, input_ids)
    loss = mean_ce(logits, targets)
    grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))

    # 1. independent naive formulation
    np_params = {n: p.detach().numpy() for n, p in params.items()}
    naive_logits = naive_fn(np_params, cfg, input_ids.numpy())
    logit_err = float(np.abs(naive_logits - logits.detach().numpy()).max())
    loss_err = abs(naive_mean_ce(naive_logits, targets.numpy()) - loss.item())
    assert logit_err <= 1e-12 and loss_err <= 1e-12, (logit_err, loss_err)

    # 2. gradients vs finite differences
    check_gen = torch.Generator().manual_seed(seed + 1000)
    fd_worst, fd_n, fd_zero, dir_err = check_finite_differences(loss_fn, params, grads, check_gen)

    # 3. AdamW trajectory (torch, cross-checked by the update written out)
    adamw_losses = run_adamw(loss_fn, params)
    by_hand = run_adamw_by_hand(loss_fn, params)
    adamw_err = max(abs(a - b) for a, b in zip(adamw_losses, by_hand))
    assert adamw_err <= 1e-10, (adamw_losses, by_hand)
    assert abs(adamw_losses[0] - loss.item()) == 0.0

    tensors = [(n, f32(p)) for n, p in params.items()]
    tensors += [
        ("golden.input_ids", input_ids.to(torch.int32).numpy()),
        ("golden.targets", targets.to(torch.int32).numpy()),
        ("golden.logits", f32(logits)),
        ("golden.loss", np.array([loss.item()], dtype=np.float32)),
        ("golden.adamw_losses", np.array(adamw_losses, dtype=np.float32)),
    ]
    tensors += [("grad." + n, f32(g)) for n, g in grads.items()]

    adamw_meta = {
        "optimizer": "torch.optim.AdamW", "steps": ADAMW["steps"], "lr": ADAMW["lr"],
        "lr_schedule": "constant", "betas": list(ADAMW["betas"]), "eps": ADAMW["eps"],
        "weight_decay": ADAMW["weight_decay"],
        "weight_decay_rule": "decoupled, applied to parameters with ndim >= 2 only "
                             "(matrices, embeddings); 0 for norm weights and biases",
        "grad_clip": None,
        "update": "p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; "
                  "p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)",
        "tied_weights": "a tied embedding is one parameter; its gradient is the sum of both uses",
        "losses": "golden.adamw_losses[i] = loss before step i+1, same batch every step",
    }
    metadata = {
        "format": "fpdt-golden", "version": "1", "model": name,
        "adamw": json.dumps(adamw_meta), "loss": "mean over targets != -100",
        "torch": str(torch.__version__),
    }

    out_dir = os.path.join(OUT_DIR, name)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    path = os.path.join(out_dir, "golden.safetensors")
    write_safetensors(path, tensors, metadata)
    check_roundtrip(path, tensors, metadata)
    size = os.path.getsize(path)
    assert size < SIZE_LIMIT_BYTES, (path, size)

    n_ignored = int((targets == IGNORE_INDEX).sum())
    print(f"{name}: loss={loss.item():.6f} ignored={n_ignored}/{B * T} "
          f"naive|dlogits|={logit_err:.1e} |dloss|={loss_err:.1e} "
          f"fd_rel_max={fd_worst:.1e} ({fd_n} entries, {fd_zero} zero-grad) fd_dir_rel={dir_err:.1e} "
          f"adamw=[{', '.join(f'{x:.4f}' for x in adamw_losses)}] (by-hand diff {adamw_err:.1e}) "
          f"tensors={len(tensors)} size={size}B")


def main():
    make_model("llama_gqa", LLAMA_GQA, seed=1)
    make_model("llama_tied_partial", LLAMA_TIED_PARTIAL, seed=2)
    make_model("gpt2", GPT2, seed=3)


if __name__ == "__main__":
    main()
