#!/usr/bin/python3
"""test_bench_llama.py: the Llama-3-8B-shaped benchmark without a GPU.

- dev/reference.py --cuda-bench --llama8b --device cpu runs PyTorch's benchmark
  step (the code the GPU runs at 4 x 4096, T=8192) at a tiny shape: its line
  parses with the GPU check's pattern, its first loss is ln V (a fresh model),
  and its parameter count is train_gpt's planner's for the same shape.
- The 8B shape: reference.py's constants equal dev/bench_gpu.c's, and its
  parameters and FLOPs per token (what MFU divides by) equal the planner's
  (llm/plan/mfu.c's flops_per_token) for 4 layers at T=8192.
- scripts/gpu_check_summary.py on canned lines in bench_gpu.c's printf format
  (checked in the C source): ours over PyTorch's BF16 step of the same run,
  FP8 included; MFU "n/a" passed through; the published 8B figures shown, never divided.
"""
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "dev"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gpu_check_summary as summary  # noqa: E402
import reference  # noqa: E402

from pycheck import check, finish  # noqa: E402
TG = os.environ.get("TG", os.path.join(ROOT, "train_gpt"))


def plan(shape, T):
    """train_gpt --plan's parameter count and GFLOP/token for an untied Llama of this shape."""
    args = [TG, "--arch", "llama", "--layers", str(shape["L"]), "--channels", str(shape["C"]), "--heads",
            str(shape["NH"]), "--kv-heads", str(shape["NKV"]), "--mlp-hidden", str(shape["H"]), "--vocab-size",
            str(shape["V"]), "--tie-embeddings", "0", "--seq-len", str(T), "--micro-batch", str(shape["B"]),
            "--plan", "--gpu", "h200", "--precision", "bf16"]
    out = subprocess.run(args, capture_output=True, text=True).stdout
    params = re.search(r"params=([\d.e+]+)", out)
    gflop = re.search(r"= ([\d.]+) GFLOP/token", out)
    return (float(params.group(1)) if params else None), (float(gflop.group(1)) if gflop else None), out


# ---- PyTorch's step at the tiny shape, on the CPU ----
run = subprocess.run([sys.executable, os.path.join(ROOT, "dev", "reference.py"), "--cuda-bench", "--llama8b",
                      "--device", "cpu"], capture_output=True, text=True)
tiny_line = re.compile(summary.TORCH_LLAMA.pattern.replace("llama8b", "llama-tiny"))
lines = [m for m in map(tiny_line.match, run.stdout.splitlines()) if m]
check("reference_llama_bench_runs_on_cpu", run.returncode == 0 and len(lines) == 1,
      f"exit {run.returncode}: {run.stdout[-300:]} {run.stderr[-300:]}")
t = reference.LLAMA_TINY
loss = re.search(r"\(loss ([\d.]+), (\d+) params", run.stdout)
check("reference_llama_bench_first_loss_is_ln_vocab", loss and abs(float(loss.group(1)) - math.log(t["V"])) < 0.1,
      f"want about ln {t['V']} = {math.log(t['V']):.4f}: {run.stdout.strip()}")
want_params, _, out = plan(t, t["T"])
check("reference_llama_bench_params_equal_planner", loss and want_params and
      abs(int(loss.group(2)) - want_params) <= 0.0005 * want_params,
      f"reference {loss.group(2) if loss else None} vs planner {want_params}: {out[-200:]}")

# ---- the 8B shape: the same in both benchmarks, and the planner's FLOPs ----
src = open(os.path.join(ROOT, "dev", "bench_gpu.c")).read()
s = reference.LLAMA8B
c_fields = [f".channels = {s['C']},", f".num_heads = {s['NH']},", f".num_kv_heads = {s['NKV']},",
            f".mlp_hidden = {s['H']},", f".vocab_size = {s['V']},", ".tie_embeddings = 0,",
            ".rope_theta = 500000.0f}", f"llama8b_shape({s['L']})", f"const int B = {s['B']}, T = {s['T']};"]
missing = [f for f in c_fields if f not in src]
check("llama8b_shape_same_in_bench_gpu", not missing, f"dev/bench_gpu.c lacks {missing}")
n, fpt = reference.llama_flops_per_token(s, s["T"])
want_params, want_gflop, out = plan(s, s["T"])
check("llama8b_params_and_flops_equal_planner",
      want_params and abs(n - want_params) <= 0.0005 * want_params and want_gflop and
      abs(fpt / 1e9 - want_gflop) <= 0.05, f"reference {n} params, {fpt / 1e9:.3f} GFLOP/token; planner: {out[-400:]}")
alloc = re.search(r"= allocated .*?([\d.]+)\n", out)
print(f"# Llama-3-8B-shaped bench: {n / 1e9:.3f}B parameters, {fpt / 1e9:.2f} GFLOP/token; planned "
      f"{alloc.group(1) if alloc else '?'} GiB allocated in BF16 (PyTorch's FP32-master step: about 55 GiB)")

# ---- the summary on canned lines ----
fmt = ('"llama8b %-4s L=4 C=4096 B=%d T=%d %9.1f ms/step %9.0f tok/s %7.1f TFLOP/s MFU %s  "\n'
       '               "(32 layers at this FLOP/s: %.0f tok/s; peak memory %.1f GiB)\\n"')
check("bench_gpu_llama8b_format_unchanged", fmt in src,
      "dev/bench_gpu.c's llama8b line changed; update LLAMA_LINE in scripts/gpu_check_summary.py and this test")


def ours(prec, ms, tok, tf, mfu, tok32):  # bench_gpu.c's printf, in Python
    return ("llama8b %-4s L=4 C=4096 B=%d T=%d %9.1f ms/step %9.0f tok/s %7.1f TFLOP/s MFU %s  "
            "(32 layers at this FLOP/s: %.0f tok/s; peak memory %.1f GiB)\n") % (prec, 1, 8192, ms, tok, tf, mfu, tok32,
                                                                               38.0)


def theirs(mode, ms, tok, tf):  # reference.py's
    return (f"torch model llama8b bf16 {mode:<7} L=4 C=4096 B=1 T=8192 {ms:8.1f} ms/step {tok:10.0f} tok/s {tf:8.1f} "
            f"TFLOP/s (loss 11.7700, 1923125248 params, 9.99734e+09 FLOP/token)\n")


with tempfile.TemporaryDirectory() as work:
    os.makedirs(os.path.join(work, "logs"))
    with open(os.path.join(work, "logs", "bench-llama8b.log"), "w") as f:
        f.write("llama8b shape: ...\n" + ours("bf16", 200.0, 40960, 409.6, "41.4%", 6500)
                + ours("fp8", 150.0, 54613, 546.0, "n/a", 8700))
    with open(os.path.join(work, "logs", "bench-torch-llama8b.log"), "w") as f:
        f.write(theirs("eager", 400.0, 20480, 204.8) + theirs("compile", 250.0, 32768, 327.7))
    rows = {r[0]: r[1:] for r in summary.llama_figures(work)}
    want = {
        "step llama8b bf16 L=4 T=8192": ("40960 tok/s", "", ""),
        "MFU llama8b bf16 (of the dense BF16 peak)": ("41.4%", "", ""),
        "MFU llama8b fp8 (of the dense BF16 peak)": ("n/a", "", ""),
        "llama8b fp8 TFLOP/s (Megatron 8B FP8: 744, 8xH100)": ("546.0 TFLOP/s", "", ""),
        "llama8b fp8 at 32 layers, est. (torchtitan: 8532)": ("8700 tok/s", "", ""),
    }
    bad = {k: (rows.get(k), v) for k, v in want.items() if rows.get(k) != v}
    ordered = [r for r in summary.llama_figures(work) if r[0].startswith("  vs")]
    ratios = [r[3] for r in ordered]
    check("summary_llama8b_rows", not bad and ratios == ["2.00x", "1.25x", "2.67x", "1.67x"],
          f"{bad}; ratios {ratios}")
    with open(os.path.join(work, "logs", "bench-torch-llama8b.log"), "w") as f:
        f.write("torch model llama8b bf16 compile: n/a (RuntimeError: x)\n" + theirs("eager", 400.0, 20480, 204.8))
    ratios = [r[3] for r in summary.llama_figures(work) if r[0].startswith("  vs")]
    check("summary_llama8b_without_compile", ratios == ["2.00x", "n/a", "2.67x", "n/a"], f"ratios {ratios}")

finish()
