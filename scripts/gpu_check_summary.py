#!/usr/bin/env python3
"""gpu_check_summary.py WORK GPU PHASE SECONDS [--partial]: the table of scripts/gpu_check.sh.

Reads WORK/steps.tsv (name, ok|FAIL|TIMEOUT|SKIP|dry-run, seconds, exit status or
why skipped), the step logs in WORK/logs/, the runs' WORK/<run>/metrics.jsonl and
the register report WORK/ptxas.tsv, and prints one table of checks (each
ok/FAIL/SKIP with what it measured) and one of figures, each beside the same
figure from PyTorch on the same GPU and their ratio. --partial: written after a
step while the check goes on (gpu_check.sh re-writes $OUT/summary.txt after
every step). Standard library only (the GPU image's Python); a missing figure
prints "n/a".
"""
import json
import math
import os
import re
import sys


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def steps_of(work):
    rows = []
    for line in read(os.path.join(work, "steps.tsv")).splitlines():
        parts = line.split("\t")
        if len(parts) >= 3:
            rows.append((parts[0], parts[1], parts[2], parts[3] if len(parts) > 3 else ""))
    return rows


def losses(work, run):
    """(step, loss, grad_norm) of each step record of WORK/run/metrics.jsonl."""
    out = []
    for line in read(os.path.join(work, run, "metrics.jsonl")).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("type") == "step":
            out.append((rec["step"], rec["loss"], rec["grad_norm"]))
    return out


def step_ms(work, run):
    """The median step time in ms of WORK/run/metrics.jsonl after the first three steps (warm-up,
    and with --cuda-graphs on the capture); None without enough steps."""
    times = []
    for line in read(os.path.join(work, run, "metrics.jsonl")).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("type") == "step" and rec.get("step", 0) > 3:
            times.append(1e3 * rec["step_time_s"])
    times.sort()
    return times[len(times) // 2] if times else None


def detail_of(work, name):
    """What a step's log says in one line: test counts, sanitizer errors."""
    log = read(os.path.join(work, "logs", name + ".log"))
    if name.startswith("test_gpu"):
        ok, bad = len(re.findall(r"^ok ", log, re.M)), len(re.findall(r"^FAIL ", log, re.M))
        return f"{ok} passed, {bad} failed" if ok + bad else ""
    if name.startswith("sanitizer"):
        m = re.search(r"ERROR SUMMARY: (\d+) error", log)
        return f"{m.group(1)} errors" if m else ""
    return ""


def derived_checks(work):
    """Checks computed from several steps' outputs: (name, result, detail)."""
    rows = []
    cpu, gpu = losses(work, "train-cpu"), losses(work, "train-bf16")
    if cpu and gpu and len(cpu) == len(gpu):
        a = sum(l for _, l, _ in cpu[-20:]) / len(cpu[-20:])
        b = sum(l for _, l, _ in gpu[-20:]) / len(gpu[-20:])
        gap = max(abs(x[1] - y[1]) for x, y in zip(cpu, gpu))
        good = abs(a - b) <= 0.03 * a and gap <= 0.25 and all(math.isfinite(l) for _, l, _ in gpu)
        rows.append(("bf16 follows the cpu (200 steps)", "ok" if good else "FAIL",
                     f"last-20 mean {b:.4f} vs cpu {a:.4f} ({100 * (b - a) / a:+.2f}%), largest gap {gap:.3f}"))
    elif cpu or gpu:
        rows.append(("bf16 follows the cpu (200 steps)", "FAIL", f"{len(gpu)} gpu vs {len(cpu)} cpu steps"))
    fp8 = losses(work, "train-fp8")
    if fp8:
        good = all(math.isfinite(l) for _, l, _ in fp8) and fp8[-1][1] < fp8[0][1]
        rows.append(("fp8 trains (20 steps)", "ok" if good else "FAIL", f"loss {fp8[0][1]:.4f} -> {fp8[-1][1]:.4f}"))
    block = losses(work, "train-fp8-block")  # the block-scaled recipe this GPU runs (blockwise or mxfp8)
    if block:
        good = all(math.isfinite(l) for _, l, _ in block) and block[-1][1] < block[0][1]
        near = not fp8 or abs(block[-1][1] - fp8[-1][1]) <= 0.1
        rows.append(("fp8 block recipe trains (20 steps)", "ok" if good and near else "FAIL",
                     f"loss {block[0][1]:.4f} -> {block[-1][1]:.4f}" + (f" (per-tensor {fp8[-1][1]:.4f})" if fp8 else "")))
    plain, graphs = losses(work, "train-bf16"), losses(work, "train-graphs")
    if graphs:
        same = plain == graphs
        rows.append(("--cuda-graphs on: the same losses bit for bit", "ok" if same else "FAIL",
                     f"{len(graphs)} steps vs {len(plain)} without graphs, " + ("identical" if same else "differ")))
    for shape in ("small", "124m"):
        off, on = step_ms(work, f"graphs-off-{shape}"), step_ms(work, f"graphs-on-{shape}")
        if off and on:
            rows.append((f"cuda graphs step time ({shape})", "info",
                         f"off {off:.2f} ms, on {on:.2f} ms ({100 * (on - off) / off:+.1f}%), median of steps 4-12"))
    first, resumed = losses(work, "train-ckpt"), losses(work, "train-resume")
    if first and resumed:
        want = [r for r in first if r[0] > 10]
        same = want == resumed
        rows.append(("resume continues bit for bit", "ok" if same else "FAIL",
                     f"steps 11-20: {len(resumed)} resumed vs {len(want)}, "
                     + ("identical" if same else "differ")))
    # The >2.1M-row attention backward: on our kernels (TRAIN_GPT_ATTENTION=native), else the plain run.
    for log_name, label in (("test_gpu_grid-native", "native kernels"), ("test_gpu_grid", "as the test ran")):
        grid = read(os.path.join(work, "logs", log_name + ".log"))
        if grid:
            rows_line = re.search(r"attention backward over (\d+) rows", grid)
            good = re.search(r"^ok test_attention_backward_rows_bf16", grid, re.M) and \
                re.search(r"^ok test_attention_backward_rows_fp32", grid, re.M)
            rows.append((f"attention backward above 2.1M rows ({label})", "ok" if good else "FAIL",
                         (rows_line.group(1) + " rows vs two half calls") if rows_line else ""))
            break
    rows += user_checks(work)
    rows += register_report(work)
    return rows


def user_checks(work):
    """train_gpt as users run it (the train-user step): the run ends, samples and evaluates, prints
    its attention choice once, and --generate from its checkpoint prints text."""
    log = read(os.path.join(work, "logs", "train-user.log"))
    if not log:
        return []
    run, _, gen = log.partition("---- generate")
    choice = re.findall(r"^attention: .*$", run, re.M)
    samples = len(re.findall(r"^---- sample at step", run, re.M))
    evals = re.findall(r"^eval .*\| (\d+) examples$", run, re.M)
    steps = [r for r in losses(work, "user")]
    m = re.search(r"^generate +\|.*\n(.*)", gen, re.M)  # the prompt and its continuation follow the header
    generated = m.group(1).strip() if m else ""
    once = bool(choice) and len(choice) == len(set(choice))  # each line of the choice printed once, not per call
    good = len(steps) == 40 and samples >= 2 and len(evals) >= 2 and once and generated and "error:" not in log
    detail = (f"{len(steps)} steps, {samples} samples, {len(evals)} evals, generated {len(generated)} chars; "
              + (" / ".join(c[len("attention: "):][:70] for c in choice) if once else
                 f"{len(choice)} attention lines, {len(set(choice))} distinct"))
    return [("train_gpt as users run it (sample, eval, generate)", "ok" if good else "FAIL", detail)]


def register_report(work, arch="sm_90"):
    """Registers, static shared memory and spills of the kit's kernels (ptxas -v at build time)."""
    text = read(os.path.join(work, "ptxas.tsv")).splitlines()
    rows = [dict(zip(text[0].split("\t"), line.split("\t"))) for line in text[1:]] if text else []
    rows = [r for r in rows if r.get("arch") == arch]
    if not rows:
        return []
    top = max(rows, key=lambda r: int(r["registers"]))
    spills = [r for r in rows if int(r["spill_stores"]) or int(r["spill_loads"])]
    smem = max(int(r["static_smem"]) for r in rows)
    names = ", ".join(sorted({r["kernel"].split("(")[0].replace("void ", "") for r in spills}))[:120]
    return [(f"register report ({arch}, ptxas -v at build)", "info",
             f"{len(rows)} kernels, at most {top['registers']} registers "
             f"({top['kernel'].split('(')[0].replace('void ', '')[:50]}), static smem at most {smem} bytes, "
             f"{len(spills)} spill" + (f": {names}" if spills else "s"))]


# bench_gpu's op lines: "%-26s %-34s %9.3f ms %8.1f TFLOP/s" (reference.py's too, after "torch ").
OP_LINE = re.compile(r"^(?P<op>(matmul (fwd|bwd) .+?|attention (fwd\+bwd|fwd|bwd)))\s+(?P<shape>(\d+ x \d+ -> \d+"
                     r"( \+gelu)?|B=\d+ T=\d+ NH=\d+ HS=\d+))\s+(?P<ms>[\d.]+) ms\s+(?P<tf>[\d.]+) TFLOP/s")
MODEL_LINE = re.compile(r"^model (?P<name>\S+(?: max batch)?)\s+L=(?P<L>\d+) C=(?P<C>\d+) B=(?P<B>\d+) T=(?P<T>\d+)"
                        r"\s+(?P<ms>[\d.]+) ms/step\s+(?P<tok>\d+) tok/s\s+MFU\s+(?P<mfu>[\d.]+)%")
TORCH_MODEL = re.compile(r"^torch model (?P<name>\S+) (?P<mode>eager|compile)\s+.*?(?P<tok>\d+) tok/s")


def key(op, shape):
    return op, tuple(re.findall(r"\d+", shape))


# The attention grid's lines, bench_gpu's (cudnn, native) and bench_attention_torch.py's (torch):
#   attention fwd|bwd PATH T=.. HS=.. B=.. NH=..  <ms> ms <TFLOP/s> TFLOP/s   (or n/a)
GRID_LINE = re.compile(r"^attention (?P<dir>fwd|bwd) (?P<path>cudnn|native|torch)\s+T=(?P<T>\d+) HS=(?P<HS>\d+) "
                       r"B=\d+ NH=\d+\s+(?:[\d.]+ ms\s+(?P<tf>[\d.]+) TFLOP/s|n/a)")


def logs(work, *names):
    """The lines of several step logs, in order (headline first, then the long runs)."""
    return [line for n in names for line in read(os.path.join(work, "logs", n + ".log")).splitlines()]


def grid_figures(work):
    torch = {}
    for m in map(GRID_LINE.match, logs(work, "bench-torch-attention-headline", "bench-torch-attention")):
        if m and m["tf"]:
            torch.setdefault((m["dir"], m["T"], m["HS"]), float(m["tf"]))
    rows, seen = [], set()
    for m in map(GRID_LINE.match, logs(work, "bench-headline", "bench-gpu")):
        if not m or m["path"] == "torch" or (m["dir"], m["path"], m["T"], m["HS"]) in seen:
            continue
        seen.add((m["dir"], m["path"], m["T"], m["HS"]))
        t = torch.get((m["dir"], m["T"], m["HS"]))
        ours = f"{float(m['tf']):.1f} TFLOP/s" if m["tf"] else "n/a"
        rows.append((f"attention {m['dir']} {m['path']} T={m['T']} HS={m['HS']}", ours,
                     f"{t:.1f} TFLOP/s" if t else "n/a", f"{float(m['tf']) / t:.2f}x" if t and m["tf"] else "n/a"))
    return rows


def figures(work):
    ours = logs(work, "bench-headline", "bench-gpu")
    torch = logs(work, "bench-torch-headline", "bench-torch")
    theirs = {}
    for line in torch:
        m = OP_LINE.match(line[len("torch "):]) if line.startswith("torch ") else None
        if m:
            theirs[key(m["op"], m["shape"])] = float(m["tf"])
    torch_models = {(m["name"], m["mode"]): float(m["tok"]) for m in map(TORCH_MODEL.match, torch) if m}
    rows, seen = [], set()
    for line in ours:
        m = OP_LINE.match(line)
        if m and key(m["op"], m["shape"]) not in seen:
            seen.add(key(m["op"], m["shape"]))
            t = theirs.get(key(m["op"], m["shape"]))
            rows.append((f"{m['op']} {m['shape']}", f"{float(m['tf']):.1f} TFLOP/s",
                         f"{t:.1f} TFLOP/s" if t else "n/a", f"{float(m['tf']) / t:.2f}x" if t else "n/a"))
        m = MODEL_LINE.match(line)
        if m and ("model", m["name"]) not in seen:
            seen.add(("model", m["name"]))
            tok = float(m["tok"])
            label = f"{m['name']} L={m['L']} C={m['C']} B={m['B']} T={m['T']}"
            rows.append((f"step {label}", f"{tok:.0f} tok/s", "", ""))
            rows.append((f"MFU {m['name']}", f"{float(m['mfu']):.1f}%", "", ""))
            for mode in ("eager", "compile"):
                t = torch_models.get((m["name"], mode)) if m["name"] == "gpt2-124M" and m["B"] == "16" else None
                if t:
                    rows.append((f"  vs PyTorch {mode}", f"{tok:.0f} tok/s", f"{t:.0f} tok/s", f"{tok / t:.2f}x"))
    for line in ours:
        if line.startswith(("fp8/bf16", "blockwise/bf16", "mxfp8/bf16")):  # per-tensor and block-scaled FP8 rows
            rows.append((line.strip(), "", "", ""))
    return rows + grid_figures(work) + llama_figures(work)


# bench_gpu --llama8b's lines and reference.py --cuda-bench --llama8b's (the Llama-3-8B-shaped step).
LLAMA_LINE = re.compile(r"^llama8b (?P<prec>bf16|fp8)\s+L=(?P<L>\d+) C=\d+ B=\d+ T=(?P<T>\d+)\s+[\d.]+ ms/step\s+"
                        r"(?P<tok>\d+) tok/s\s+(?P<tf>[\d.]+) TFLOP/s MFU (?P<mfu>[\d.]+%|n/a)\s+"
                        r"\(32 layers at this FLOP/s: (?P<tok32>\d+) tok/s")
TORCH_LLAMA = re.compile(r"^torch model llama8b bf16 (?P<mode>eager|compile)\s+L=\d+ C=\d+ B=\d+ T=\d+\s+"
                         r"[\d.]+ ms/step\s+(?P<tok>\d+) tok/s\s+(?P<tf>[\d.]+) TFLOP/s")


def llama_figures(work):
    """The Llama-3-8B-shaped rows: ours (BF16, FP8) against PyTorch's BF16 step of the same run
    (FP8 too: the PyTorch step has no FP8 of its own), MFU, and beside the published 8B figures
    (other machines: shown, never divided)."""
    ours = {m["prec"]: m for m in map(LLAMA_LINE.match, read(os.path.join(work, "logs", "bench-llama8b.log"))
                                      .splitlines()) if m}
    torch = {m["mode"]: float(m["tok"]) for m in map(TORCH_LLAMA.match,
             read(os.path.join(work, "logs", "bench-torch-llama8b.log")).splitlines()) if m}
    rows = []
    for prec, m in sorted(ours.items()):  # bf16, fp8
        tok = float(m["tok"])
        rows.append((f"step llama8b {prec} L={m['L']} T={m['T']}", f"{tok:.0f} tok/s", "", ""))
        for mode in ("eager", "compile"):
            t = torch.get(mode)
            rows.append((f"  vs PyTorch bf16 {mode}", f"{tok:.0f} tok/s", f"{t:.0f} tok/s" if t else "n/a",
                         f"{tok / t:.2f}x" if t else "n/a"))
        rows.append((f"MFU llama8b {prec} (of the dense BF16 peak)", m["mfu"], "", ""))
    if "fp8" in ours:
        m = ours["fp8"]
        rows.append(("llama8b fp8 TFLOP/s (Megatron 8B FP8: 744, 8xH100)", f"{float(m['tf']):.1f} TFLOP/s", "", ""))
        rows.append(("llama8b fp8 at 32 layers, est. (torchtitan: 8532)", f"{float(m['tok32']):.0f} tok/s", "", ""))
    return rows


def op_shares(work, top=10):
    rows = []
    for line in read(os.path.join(work, "logs", "op-profile.log")).splitlines():
        m = re.match(r"^op profile \| (\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)%$", line)
        if m:
            rows.append((m.group(1), int(m.group(2)), float(m.group(3)), float(m.group(4))))
    rows.sort(key=lambda r: -r[3])
    return rows[:top]


def step_bytes(work):
    """bench_gpu's table of a step's memory-bound ops (planned bytes beside measured ms): its lines, as printed."""
    lines, on = [], False
    for line in logs(work, "bench-headline", "bench-gpu"):
        if line.startswith("memory-bound ops of a "):
            if lines:
                break  # the headline's table; the long run's repeats it
            on = True
            lines.append(line)
        elif on and line.startswith("  "):
            lines.append(line)
        elif on:
            on = False
    return lines


def main():
    args = [a for a in sys.argv[1:] if a != "--partial"]
    if len(args) != 4:
        sys.exit("usage: gpu_check_summary.py WORK GPU PHASE SECONDS [--partial]")
    work, gpu, phase, seconds = args
    steps = steps_of(work)
    print(f"==== gpu_check summary | {gpu} | phase {phase} | {seconds} s ====")
    if "--partial" in sys.argv[1:]:
        print(f"(in progress: {len(steps)} steps so far; a stopped call ends here)")
    print(f"{'check':<52} {'result':<8} {'time':>6}  detail")
    for name, status, sec, rc in steps:
        if status == "SKIP":
            detail = "skipped: " + rc
        else:
            detail = detail_of(work, name) or (f"exit {rc}" if status not in ("ok", "dry-run") and rc else "")
        print(f"{name:<52} {status:<8} {sec + 's':>6}  {detail}")
    for name, status, detail in derived_checks(work):
        print(f"{name:<52} {status:<8} {'':>6}  {detail}")
    figs = figures(work)
    if figs:
        print(f"\n{'figure':<56} {'ours':>16} {'PyTorch':>16} {'ours/PyTorch':>13}")
        for name, a, b, r in figs:
            print(f"{name:<56} {a:>16} {b:>16} {r:>13}")
    shares = op_shares(work)
    if shares:
        print("\nop shares of GPT-2 124M BF16 steps (B=16, T=1024; TRAIN_GPT_OP_PROFILE=1):")
        for name, calls, ms, share in shares:
            print(f"  {name:<28} {share:5.1f}%  ({calls} calls, {ms:.1f} ms)")
    table = step_bytes(work)
    if table:
        print()
        for line in table:
            print(line)
    bad = [s for s in steps if s[1] in ("FAIL", "TIMEOUT")]
    bad += [d for d in derived_checks(work) if d[1] == "FAIL"]
    print(f"\n{len(bad)} failed" + (": " + ", ".join(b[0] for b in bad) if bad else ""))


if __name__ == "__main__":
    main()
