#!/usr/bin/env python3
"""Write the GGUF golden files the C++ tests compare against (issue 27), with the `gguf` package
(llama.cpp's gguf-py) and transformers' own GGUF loader.

Run with the reference environment (gguf, torch and transformers pinned by tools/reference_env.sh;
CI and `make test` never need it):

    PY=$(tools/reference_env.sh) && $PY tools/make_gguf_golden.py

tests/golden/gguf/
    multilingual.txt        the text the tokenizers are checked on (13 scripts, digits, code,
                            whitespace runs, special and user-defined tokens)
    <set>.gguf              a random model written by gguf.GGUFWriter, its tensors in every type fpdt
                            reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1 quantized by gguf-py; Q4_K, Q5_K,
                            Q6_K as random blocks, which gguf-py cannot quantize), with a byte-level BPE
                            tokenizer trained here by `tokenizers` on the text
    <set>.golden.safetensors
        tensor.<hf name>    F32: the weight as transformers loads it (AutoModelForCausalLM.from_pretrained
                            (dir, gguf_file=...), float32: gguf-py's dequantization, q/k un-permuted)
        golden.input_ids, golden.targets (1, T) I32, golden.loss (1,) F32: transformers' float32
                            forward on the first T + 1 tokens of the text, mean cross-entropy
        golden.text_ids (N,) I32: transformers' converted tokenizer (AutoTokenizer with gguf_file) on the
                            whole text, add_special_tokens=False
      metadata "config": the config fields transformers derived from the file (JSON)
Sets (hidden 32, 4 heads of 8, 2 kv heads, 2 layers, vocabulary 400, ffn 256 so the K-quants' 256-element blocks fit ffn_down):
    llama   untied, q/k rows permuted as llama.cpp's converter writes them, pre-tokenizer llama-bpe
    qwen2   tied, q/k/v biases, pre-tokenizer qwen2
    gpt2    hidden 32, 2 heads, ffn 128, 1024 learned positions, biases, untied (as llama.cpp writes GPT-2),
            pre-tokenizer gpt-2 (GPT-2's ByteLevel regex); no K-quants (rows of 32 and 128)
Deterministic (fixed seeds); checks that the folder stays under 2 MB.
"""

import json
import os

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf.quants import quantize
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "golden", "gguf")
MAX_BYTES = 2 << 20
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED = "<think>"
H, HEADS, KV_HEADS, FFN, LAYERS, CONTEXT = 32, 4, 2, 256, 2, 256
T = 48  # tokens of the loss batch

TEXT = """The quick brown fox jumps over the lazy dog. It's 12:45 — we'll see; they're "fine", aren't they?
Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. Größe, Übermaß, daß.
Portez ce vieux whisky au juge blond qui fume : « déjà vu », naïveté, cœur, façade.
Съешь же ещё этих мягких французских булок, да выпей чаю. Ёлка, щука, объём.
Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε!
我能吞下玻璃而不伤身体。中文分词测试：人工智能、机器学习。
いろはにほへと ちりぬるを。カタカナとひらがな、漢字の混在テキスト。
صِف خَلقَ خَودِ كَمِثلِ الشَمسِ إِذ بَزَغَت يَحظى الضَجيعُ بِها نَجلاءَ مِعطارِ
ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम
한국어 문장도 넣어 봅니다: 다람쥐 헌 쳇바퀴에 타고파.
Emoji 🙂🚀👩‍💻 and symbols ∑∫√∞ ≠ ≤ ≥ ™ © ®; numbers 3.14159 2718281828 1,000,000 0x1F.
def main(argv):\n    return {"key": [1, 2, 3], 'x': argv[0]}  # code   with    runs\t\ttabs
<|im_start|>user
Hello<|im_end|> <think> plain text after
  leading spaces, trailing spaces   
\r\nwindows line\r\n\n\n"""

# The tensor types of each set, by GGUF tensor name suffix and layer (every type fpdt reads, both sets
# together; each K-quant on an ffn_down, whose rows are FFN = 256 long).
TYPES = {
    "llama": {
        "token_embd": Q.Q8_0, "output": Q.BF16,
        0: {"attn_q": Q.F16, "attn_k": Q.BF16, "attn_v": Q.Q4_0, "attn_output": Q.Q4_1,
            "ffn_gate": Q.Q8_0, "ffn_up": Q.F32, "ffn_down": Q.Q4_K},
        1: {"attn_q": Q.Q4_1, "attn_k": Q.Q8_0, "attn_v": Q.F16, "attn_output": Q.Q4_0,
            "ffn_gate": Q.BF16, "ffn_up": Q.Q4_1, "ffn_down": Q.Q5_K},
    },
    "qwen2": {
        "token_embd": Q.F16,
        0: {"attn_q": Q.Q8_0, "attn_k": Q.Q4_0, "attn_v": Q.Q4_1, "attn_output": Q.BF16,
            "ffn_gate": Q.F16, "ffn_up": Q.Q8_0, "ffn_down": Q.Q6_K},
        1: {"attn_q": Q.BF16, "attn_k": Q.F16, "attn_v": Q.Q8_0, "attn_output": Q.Q4_1,
            "ffn_gate": Q.Q4_0, "ffn_up": Q.BF16, "ffn_down": Q.Q4_K},
    },
}
# GPT-2 (hidden 32, 2 heads, ffn 4·32 = 128, learned positions, biases): no K-quant fits rows of 32 or 128.
GPT2_TYPES = {
    "token_embd": Q.Q8_0, "position_embd": Q.F16, "output": Q.F32,
    0: {"attn_qkv": Q.Q4_1, "attn_output": Q.Q8_0, "ffn_up": Q.BF16, "ffn_down": Q.Q4_0},
    1: {"attn_qkv": Q.F16, "attn_output": Q.Q4_0, "ffn_up": Q.Q8_0, "ffn_down": Q.BF16},
}
# transformers maps gpt2.context_length to no GPT2Config field (n_positions stays 1024), so only a
# 1024-position table loads there.
GPT2_HEADS, GPT2_CONTEXT = 2, 1024
K_BLOCK_BYTES = {Q.Q4_K: 144, Q.Q5_K: 176, Q.Q6_K: 210}


def train_tokenizer():
    """A small byte-level BPE (GPT-2 style) trained on the text, specials first."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS + [USER_DEFINED],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([TEXT] * 4, trainer)
    model = json.loads(tokenizer.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda item: item[1])
    assert [i for _, i in vocab] == list(range(len(vocab)))
    tokens = [token for token, _ in vocab]
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    types = [3 if t in SPECIALS else 4 if t == USER_DEFINED else 1 for t in tokens]
    return tokens, merges, types


def k_quant_blocks(qtype, rows, columns, rng):
    """Random K-quant blocks: random scales and quants, f16 super-block scales of a size that keeps the
    weights ~0.05, so the model's loss stays finite and every bit pattern of the packing is exercised."""
    nblocks = rows * columns // 256
    raw = rng.integers(0, 256, size=(nblocks, K_BLOCK_BYTES[qtype]), dtype=np.uint8)
    def put_half(offset, low, high):
        raw[:, offset:offset + 2] = rng.uniform(low, high, size=nblocks).astype(np.float16).view(np.uint8).reshape(nblocks, 2)
    if qtype in (Q.Q4_K, Q.Q5_K):
        step = 1.0 / (63 * (15 if qtype == Q.Q4_K else 31))
        put_half(0, 0.02 * step, 0.1 * step)   # d
        put_half(2, 0.02 / 63, 0.05 / 63)      # dmin
    else:
        put_half(208, 0.02 / (127 * 32), 0.1 / (127 * 32))  # d (last 2 bytes)
    return raw.reshape(rows, columns // 256 * K_BLOCK_BYTES[qtype])


def add_weight(writer, name, qtype, shape, rng, scale=0.05):
    """A (rows, columns) or (n,) tensor of `qtype` from N(0, scale) (quantized by gguf-py) or random blocks."""
    if qtype in K_BLOCK_BYTES:
        writer.add_tensor(name, k_quant_blocks(qtype, shape[0], shape[1], rng), raw_dtype=qtype)
        return
    values = (rng.standard_normal(shape) * scale).astype(np.float32)
    if qtype == Q.F32:
        writer.add_tensor(name, values)
    elif qtype == Q.F16:
        writer.add_tensor(name, values.astype(np.float16))
    else:
        writer.add_tensor(name, quantize(values, qtype), raw_dtype=qtype)


def finish(writer):
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_gguf(path, arch, tokens, merges, types, seed):
    rng = np.random.default_rng(seed)
    spec = TYPES[arch]
    vocab = len(tokens)
    writer = GGUFWriter(path, arch)
    writer.add_name(f"fpdt golden {arch}")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(H)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-6 if arch == "llama" else 1e-5)
    writer.add_rope_freq_base(50000.0 if arch == "llama" else 1000000.0)
    writer.add_rope_dimension_count(H // HEADS)
    writer.add_vocab_size(vocab)
    add_tokenizer(writer, tokens, merges, types, "llama-bpe" if arch == "llama" else "qwen2")

    D = H // HEADS
    add_weight(writer, "token_embd.weight", spec["token_embd"], (vocab, H), rng, 0.5)
    for layer in range(LAYERS):
        p = f"blk.{layer}."
        t = spec[layer]
        writer.add_tensor(p + "attn_norm.weight", (1 + 0.1 * rng.standard_normal(H)).astype(np.float32))
        add_weight(writer, p + "attn_q.weight", t["attn_q"], (HEADS * D, H), rng, 0.3)
        add_weight(writer, p + "attn_k.weight", t["attn_k"], (KV_HEADS * D, H), rng, 0.3)
        add_weight(writer, p + "attn_v.weight", t["attn_v"], (KV_HEADS * D, H), rng)
        if arch == "qwen2":
            for part, rows in (("q", HEADS * D), ("k", KV_HEADS * D), ("v", KV_HEADS * D)):
                writer.add_tensor(p + f"attn_{part}.bias", (0.1 * rng.standard_normal(rows)).astype(np.float32))
        add_weight(writer, p + "attn_output.weight", t["attn_output"], (H, HEADS * D), rng)
        writer.add_tensor(p + "ffn_norm.weight", (1 + 0.1 * rng.standard_normal(H)).astype(np.float32))
        add_weight(writer, p + "ffn_gate.weight", t["ffn_gate"], (FFN, H), rng, 0.2)
        add_weight(writer, p + "ffn_up.weight", t["ffn_up"], (FFN, H), rng, 0.2)
        add_weight(writer, p + "ffn_down.weight", t["ffn_down"], (H, FFN), rng)
    writer.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(H)).astype(np.float32))
    if "output" in spec:
        add_weight(writer, "output.weight", spec["output"], (vocab, H), rng, 0.3)
    finish(writer)


def write_gpt2_gguf(path, tokens, merges, types, seed):
    rng = np.random.default_rng(seed)
    vocab, ffn = len(tokens), 4 * H
    writer = GGUFWriter(path, "gpt2")
    writer.add_name("fpdt golden gpt2")
    writer.add_context_length(GPT2_CONTEXT)
    writer.add_embedding_length(H)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(GPT2_HEADS)
    writer.add_layer_norm_eps(1e-5)
    add_tokenizer(writer, tokens, merges, types, "gpt-2")
    def norm(name):
        writer.add_tensor(name + ".weight", (1 + 0.1 * rng.standard_normal(H)).astype(np.float32))
        writer.add_tensor(name + ".bias", (0.1 * rng.standard_normal(H)).astype(np.float32))
    def bias(name, n):
        writer.add_tensor(name + ".bias", (0.1 * rng.standard_normal(n)).astype(np.float32))
    add_weight(writer, "token_embd.weight", GPT2_TYPES["token_embd"], (vocab, H), rng, 0.5)
    add_weight(writer, "position_embd.weight", GPT2_TYPES["position_embd"], (GPT2_CONTEXT, H), rng, 0.1)
    for layer in range(LAYERS):
        p, t = f"blk.{layer}.", GPT2_TYPES[layer]
        norm(p + "attn_norm")
        add_weight(writer, p + "attn_qkv.weight", t["attn_qkv"], (3 * H, H), rng, 0.3)  # (out, in): transposed Conv1D
        bias(p + "attn_qkv", 3 * H)
        add_weight(writer, p + "attn_output.weight", t["attn_output"], (H, H), rng)
        bias(p + "attn_output", H)
        norm(p + "ffn_norm")
        add_weight(writer, p + "ffn_up.weight", t["ffn_up"], (ffn, H), rng, 0.2)
        bias(p + "ffn_up", ffn)
        add_weight(writer, p + "ffn_down.weight", t["ffn_down"], (H, ffn), rng)
        bias(p + "ffn_down", H)
    norm("output_norm")
    add_weight(writer, "output.weight", GPT2_TYPES["output"], (vocab, H), rng, 0.3)
    finish(writer)


def add_tokenizer(writer, tokens, merges, types, pre):
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)


def golden_set(arch, tokens, merges, types, seed):
    name = f"{arch}.gguf"
    path = os.path.join(OUT_DIR, name)
    if arch == "gpt2":
        write_gpt2_gguf(path, tokens, merges, types, seed)
    else:
        write_gguf(path, arch, tokens, merges, types, seed)
    tokenizer = AutoTokenizer.from_pretrained(OUT_DIR, gguf_file=name)
    text_ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(OUT_DIR, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    seq = torch.tensor([text_ids[:T + 1]], dtype=torch.long)
    input_ids, targets = seq[:, :-1], seq[:, 1:]
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits.float()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    config = model.config
    if arch == "gpt2":
        expected_config = {"model_type": config.model_type, "vocab_size": config.vocab_size, "hidden_size": config.n_embd,
                           "intermediate_size": config.n_inner or 4 * config.n_embd, "num_hidden_layers": config.n_layer,
                           "num_attention_heads": config.n_head, "num_key_value_heads": config.n_head,
                           "head_dim": config.n_embd // config.n_head, "layer_norm_epsilon": config.layer_norm_epsilon,
                           "max_position_embeddings": config.n_positions}
    else:
        expected_config = {k: getattr(config, k) for k in (
            "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "rms_norm_eps", "max_position_embeddings")}
        # Qwen2Config has no head_dim: its attention takes hidden_size // num_attention_heads.
        expected_config["head_dim"] = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        expected_config["rope_theta"] = config.rope_parameters["rope_theta"]
        expected_config["rope_type"] = config.rope_parameters["rope_type"]
    for key in ("tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id"):
        expected_config[key] = getattr(config, key)
    tensors = {"tensor." + k: v.detach().float().contiguous() for k, v in model.state_dict().items()
               if not (config.tie_word_embeddings and k == "lm_head.weight")}
    tensors.update({
        "golden.input_ids": input_ids.to(torch.int32).contiguous(),
        "golden.targets": targets.to(torch.int32).contiguous(),
        "golden.loss": loss.reshape(1).float(),
        "golden.text_ids": torch.tensor(text_ids, dtype=torch.int32),
    })
    save_file(tensors, os.path.join(OUT_DIR, f"{arch}.golden.safetensors"),
              metadata={"config": json.dumps(expected_config), "transformers": __import__("transformers").__version__})
    os.chmod(os.path.join(OUT_DIR, f"{arch}.golden.safetensors"), 0o644)
    spec = GPT2_TYPES if arch == "gpt2" else TYPES[arch]
    used = {spec[k].name for k in spec if not isinstance(k, int)}
    used |= {qtype.name for layer in range(LAYERS) for qtype in spec[layer].values()}
    print(f"{arch}: {len(tokens)} tokens, {len(text_ids)} text ids, loss {loss.item():.6f}, "
          f"{len(tensors)} tensors, types {sorted(used)} and F32 norms")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "multilingual.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(TEXT)
    tokens, merges, types = train_tokenizer()
    golden_set("llama", tokens, merges, types, seed=27)
    golden_set("qwen2", tokens, merges, types, seed=28)
    golden_set("gpt2", tokens, merges, types, seed=29)
    total = sum(os.path.getsize(os.path.join(OUT_DIR, f)) for f in os.listdir(OUT_DIR))
    print(f"{OUT_DIR}: {total} bytes")
    assert total < MAX_BYTES, f"golden files take {total} bytes, over {MAX_BYTES}"


if __name__ == "__main__":
    main()
