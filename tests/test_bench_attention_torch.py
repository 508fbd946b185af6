#!/usr/bin/python3
"""test_bench_attention_torch.py: dev/bench_attention_torch.py reads the
attention rows dev/bench_gpu.c prints (its printf formats, checked in the C
source so the two cannot drift apart) and divides them by PyTorch's TFLOP/s:
measured rows get the ratio, n/a rows and rows without a PyTorch figure get
n/a. Needs no GPU (only the parsing runs)."""
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "dev"))
import bench_attention_torch as bat  # noqa: E402

from pycheck import check, finish  # noqa: E402


src = open(os.path.join(ROOT, "dev", "bench_gpu.c")).read()
head_fmt = '"attention %s %-6s T=%d HS=%d B=%d NH=%d"'
row_fmt = '"%-52s %9.3f ms %7.1f TFLOP/s\\n"'
na_fmt = '"%-52s n/a\\n"'
check("bench_gpu_formats_unchanged", all(f in src for f in (head_fmt, row_fmt, na_fmt)),
      "dev/bench_gpu.c's attention line formats changed; update LINE in dev/bench_attention_torch.py")


def c_row(d, path, T, HS, B, NH, ms=None, tf=None):  # the C program's printf, in Python
    head = "attention %s %-6s T=%d HS=%d B=%d NH=%d" % (d, path, T, HS, B, NH)
    return "%-52s n/a\n" % head if ms is None else "%-52s %9.3f ms %7.1f TFLOP/s\n" % (head, ms, tf)


lines = [
    "---- attention: cuDNN and native ----\n",
    c_row("fwd", "cudnn", 8192, 128, 4, 16, 3.25, 450.0),
    c_row("bwd", "cudnn", 8192, 128, 4, 16, None),
    c_row("fwd", "native", 8192, 128, 4, 16, 12.5, 120.0),
    c_row("fwd", "native", 1024, 64, 32, 32, 0.5, 80.0),
    "attention fwd torch  T=8192 HS=128 B=4 NH=16  1.000 ms 500.0 TFLOP/s  (flash)\n",
]
got = bat.ratios(lines, {("fwd", 8192, 128): 500.0, ("bwd", 8192, 128): 400.0})
want = [
    "attention fwd cudnn  T=8192 HS=128: 0.90x",
    "attention bwd cudnn  T=8192 HS=128: n/a",
    "attention fwd native T=8192 HS=128: 0.24x",
    "attention fwd native T=1024 HS=64: n/a",
]
check("ratios_of_bench_gpu_rows", got == want, f"got {got}")
finish()
