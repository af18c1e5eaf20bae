# The peer side of bench/peer_torch.sh: training steps of Hugging Face LlamaForCausalLM with SDPA
# attention, built from the same config.json fpdt reads, on random token ids — forward with the shifted
# cross-entropy, backward, gradient clipping at 1 and one AdamW step, as `fpdt train` does. --precision
# fp32 runs everything in fp32; bf16 is what a torch user trains with: torch.autocast("cpu", bfloat16)
# over the forward and the loss (GEMMs and attention on bf16 inputs, oneDNN's bf16 kernels; fp32 master
# weights, gradients and AdamW — the standard mixed-precision recipe fpdt's bf16 follows).
# Prints one JSON line: the last step's seconds (wall and the process's CPU time), tokens/s, the process's
# peak RSS and the load average.
#   usage: peer_torch.py --config FILE --batch B --seq T --threads N [--steps K] [--checkpointing]
#                        [--precision fp32|bf16]
import contextlib
import argparse
import json
import os
import resource
import time

import torch
import transformers


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2, help="steps run; the last one is reported")
    parser.add_argument("--checkpointing", action="store_true", help="gradient checkpointing of every layer")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="bf16: torch.autocast(cpu, bfloat16) over the forward and the loss")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    config = transformers.LlamaConfig.from_json_file(args.config)
    config._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(config).float()
    if args.checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    # T + 1 ids per sequence: the model sees T, the loss predicts the next T (labels shifted inside).
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq + 1))
    inputs, targets = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def autocast():
        if args.precision == "bf16":
            return torch.autocast(device_type="cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    seconds, cpu_seconds = [], []
    loss = None
    for _ in range(args.steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            logits = model(input_ids=inputs).logits  # (B, T, V); bf16 under autocast
            # the loss in fp32 in both precisions (as transformers' own loss upcasts)
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, config.vocab_size), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        seconds.append(time.perf_counter() - start)
        cpu_seconds.append(time.process_time() - cpu_start)
        del logits

    tokens = args.batch * args.seq
    print(json.dumps({
        "tool": "torch" if args.precision == "fp32" else "torch-bf16", "precision": args.precision,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "attention": model.config._attn_implementation, "checkpointing": args.checkpointing,
        "batch": args.batch, "seq": args.seq, "threads": torch.get_num_threads(),
        "step_seconds": seconds[-1], "steps_seconds": seconds, "tokens_per_second": tokens / seconds[-1],
        "cpu_seconds": cpu_seconds[-1],
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "loss": float(loss.detach()), "load_average": os.getloadavg()[0],
    }))


if __name__ == "__main__":
    main()
