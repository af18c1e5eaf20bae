#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the GPU, on the shapes bench_cuda times fpdt's attention blocks on
(issue 47): one fully visible (q chunk, kv chunk) pair of C tokens, H heads of dimension D, batch 1, bf16 (and
fp32), no mask. FLOPs are counted as bench_cuda counts them — 4·H·C²·D forward, 2.5× that backward (the
FlashAttention convention) — so the two sets of JSON lines divide into each other. Times: CUDA events around
`iters` calls after two warm-up calls; the backward is timed on its own (autograd.grad of a retained graph).
The kernel torch chose is reported as the backends it had enabled (flash, cuDNN, memory-efficient, math).
  python3 bench/attention_torch_sdpa.py [--chunk C] [--heads H] [--head-dim D] [--iters K]
"""
import argparse
import json
import sys


def seconds_per_call(torch, call, iters):
    for _ in range(2):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as error:
        print(json.dumps({"bench": "torch_sdpa", "error": f"no PyTorch here: {error}"}))
        return 1
    if not torch.cuda.is_available():
        print(json.dumps({"bench": "torch_sdpa", "error": "PyTorch sees no CUDA device"}))
        return 1
    C, H, D = args.chunk, args.heads, args.head_dim
    fwd_flops = 4.0 * H * C * C * D
    enabled = [name for name, on in (("flash", torch.backends.cuda.flash_sdp_enabled()),
                                     ("cudnn", torch.backends.cuda.cudnn_sdp_enabled()),
                                     ("efficient", torch.backends.cuda.mem_efficient_sdp_enabled()),
                                     ("math", torch.backends.cuda.math_sdp_enabled())) if on]
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        # (B, H, C, D): torch's layout; the values do not matter for speed.
        q, k, v = (torch.randn(1, H, C, D, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
        dout = torch.randn(1, H, C, D, device="cuda", dtype=dtype)
        fwd_s = seconds_per_call(torch, lambda: F.scaled_dot_product_attention(q, k, v), args.iters)
        out = F.scaled_dot_product_attention(q, k, v)
        bwd_s = seconds_per_call(
            torch, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), args.iters)
        common = {"dtype": name, "kernel": "torch " + torch.__version__ + " (" + "/".join(enabled) + ")",
                  "chunk": C, "heads": H, "head_dim": D}
        print(json.dumps({"bench": "torch_sdpa_fwd", **common, "ms": round(fwd_s * 1e3, 3),
                          "tflops": round(fwd_flops / fwd_s / 1e12, 2)}), flush=True)
        print(json.dumps({"bench": "torch_sdpa_bwd", **common, "ms": round(bwd_s * 1e3, 3),
                          "tflops": round(2.5 * fwd_flops / bwd_s / 1e12, 2)}), flush=True)
        del q, k, v, dout, out
    return 0


if __name__ == "__main__":
    sys.exit(main())
