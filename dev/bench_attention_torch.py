#!/usr/bin/env python3
"""bench_attention_torch.py: PyTorch's causal F.scaled_dot_product_attention
(BF16) at the shapes of dev/bench_gpu.c's attention grid, printed in the same
line format with path "torch", so the GPU check can divide the two:

  attention fwd|bwd torch  T=.. HS=.. B=.. NH=.. <ms> ms <TFLOP/s> TFLOP/s  (<backend>)

Each row is PyTorch's fastest SDPA backend for that shape (flash, cuDNN,
memory-efficient; each tried, the best kept and named). FLOPs as bench_gpu
counts them: forward 4*B*NH*(T*T/2)*HS, backward 2.5 times that.

  bench_attention_torch.py [--quick | --headline] [--compare BENCH_GPU_LOG]

--headline: only T = 1K, 4K and 8K (the GPU check's first rows).

--compare: also print, for every row of the bench_gpu log, its TFLOP/s as a
ratio to PyTorch's on this GPU (same run of the check, same GPU).
"""
import argparse
import re
import sys

LINE = re.compile(r"^attention (fwd|bwd) (\S+)\s+T=(\d+) HS=(\d+) B=(\d+) NH=(\d+)\s+(?:([\d.]+) ms\s+([\d.]+) TFLOP/s|n/a)")


def timed(fn, reps):
    """Mean seconds per call after two warm-up calls, by CUDA events."""
    import torch
    fn()
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def backends():
    from torch.nn.attention import SDPBackend
    names = [("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION")]
    return [(n, getattr(SDPBackend, a)) for n, a in names if hasattr(SDPBackend, a)]


def measure(B, NH, T, HS, reps):
    """{direction: (seconds, backend name)}: the fastest backend per direction."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    q, k, v = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
    best = {}
    for name, backend in backends():
        try:
            with sdpa_kernel([backend]):
                tf = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps)
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                tb = timed(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), reps)
        except RuntimeError:  # this backend does not take the shape (or memory ran out)
            torch.cuda.empty_cache()
            continue
        for d, t in (("fwd", tf), ("bwd", tb)):
            if d not in best or t < best[d][0]:
                best[d] = (t, name)
    return best


def line(d, T, HS, B, NH, sec, flops, note=""):
    head = f"attention {d} {'torch':<6} T={T} HS={HS} B={B} NH={NH}"
    if sec is None:
        return f"{head:<52} n/a"
    return f"{head:<52} {sec * 1e3:9.3f} ms {flops / sec / 1e12:7.1f} TFLOP/s  ({note})"


def ratios(lines, torch_tf):
    """For each cudnn/native row of bench_gpu's output: 'attention DIR PATH T=.. HS=..: R.RRx' (or n/a),
    R = its TFLOP/s over PyTorch's (torch_tf: {(dir, T, HS): TFLOP/s})."""
    out = []
    for text in lines:
        m = LINE.match(text)
        if not m or m.group(2) == "torch":
            continue
        d, path, T, HS = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
        ref = torch_tf.get((d, T, HS))
        ratio = f"{float(m.group(8)) / ref:.2f}x" if m.group(8) and ref else "n/a"
        out.append(f"attention {d} {path:<6} T={T} HS={HS}: {ratio}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--headline", action="store_true", help="only T = 1K, 4K and 8K (bench_gpu --headline's rows)")
    ap.add_argument("--compare", metavar="BENCH_GPU_LOG")
    args = ap.parse_args()
    import torch  # here, so that ratios() can be used (and tested) without it
    if not torch.cuda.is_available():
        print("bench_attention_torch: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 1
    torch_tf = {}
    for HS in (64, 128):
        for T in (1024, 2048, 4096, 8192, 16384, 32768):
            if (args.quick and T > 8192) or (args.headline and T not in (1024, 4096, 8192)):
                continue
            B, NH = 32768 // T, 2048 // HS
            fwd = 4.0 * B * NH * (T * T / 2) * HS
            best = measure(B, NH, T, HS, max(2, 20 * 1024 // T))
            for d, flops in (("fwd", fwd), ("bwd", 2.5 * fwd)):
                sec, name = best.get(d, (None, ""))
                print(line(d, T, HS, B, NH, sec, flops, name), flush=True)
                if sec:
                    torch_tf[(d, T, HS)] = flops / sec / 1e12
    if args.compare:
        print("---- attention: TFLOP/s as a ratio to PyTorch's fastest SDPA backend (same GPU) ----")
        with open(args.compare) as f:
            for text in ratios(f, torch_tf):
                print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
