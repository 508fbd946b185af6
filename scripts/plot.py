#!/usr/bin/python3
"""plot.py: turns train_gpt's metrics.jsonl logs into PNG plots.

    scripts/plot.py RUN/metrics.jsonl -o OUT/                  # one run
    scripts/plot.py RUN1/metrics.jsonl RUN2/metrics.jsonl -o OUT/   # runs compared, one plot each

Writes OUT/loss.png (training loss per step and validation loss), tokens_per_second.png,
mfu.png, grad_norm.png, lr.png, memory.png, and gpu.png when the log has NVML telemetry.
With several logs, every plot shows every run, labelled by its directory. Skipped steps
(non-finite or spiking losses) are marked on the loss plot.

Needs matplotlib (Debian: python3-matplotlib, installed by scripts/install_deps.sh).
"""
import argparse
import json
import math
import os
import sys


def fail(message):
    print(f"plot.py: error: {message}", file=sys.stderr)
    sys.exit(1)


def num(v):
    """A JSON number, or NaN for null (non-finite values are logged as null)."""
    return float("nan") if v is None else float(v)


def load(path):
    """The records of one metrics.jsonl, grouped by type."""
    runs = {"config": None, "step": [], "val": [], "telemetry": [], "summary": None}
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        fail(f"cannot open '{path}': {e.strerror}")
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{path}:{lineno}: not JSON ({e.msg})")
            kind = rec.get("type") if isinstance(rec, dict) else None
            if kind in ("config", "summary"):
                runs[kind] = rec
            elif kind in ("step", "val", "telemetry"):
                runs[kind].append(rec)
    if not runs["step"]:
        fail(f"'{path}' has no step records (is it a train_gpt metrics.jsonl?)")
    return runs


def labels_for(paths):
    """Each run's directory name; the whole path where two directories share a name."""
    names = [os.path.basename(os.path.dirname(os.path.abspath(p))) or p for p in paths]
    if len(set(names)) < len(names):
        names = list(paths)
    return names


def series(records, key):
    return [r["step"] for r in records], [num(r.get(key)) for r in records]


def new_axes(plt, title, ylabel):
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def save(fig, ax, out_dir, name, written):
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    path = os.path.join(out_dir, name)
    fig.savefig(path)
    written.append(path)


def main():
    parser = argparse.ArgumentParser(description="Plot train_gpt metrics.jsonl logs (one run, or several compared).")
    parser.add_argument("logs", nargs="+", help="metrics.jsonl files")
    parser.add_argument("-o", "--out", required=True, help="output directory for the PNG files")
    args = parser.parse_args()

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is missing (Debian: apt-get install python3-matplotlib, or scripts/install_deps.sh)")

    runs = [load(p) for p in args.logs]
    names = labels_for(args.logs)
    os.makedirs(args.out, exist_ok=True)
    written = []

    # Loss: training per step, validation as markers, skipped steps as crosses.
    fig, ax = new_axes(plt, "loss", "cross-entropy (nats/token)")
    for run, name in zip(runs, names):
        x, y = series(run["step"], "loss")
        (line,) = ax.plot(x, y, linewidth=1, label=f"{name} train")
        if run["val"]:
            vx, vy = series(run["val"], "val_loss")
            ax.plot(vx, vy, "o-", color=line.get_color(), markersize=4, linewidth=1.5, label=f"{name} val")
        skipped = [r for r in run["step"] if r.get("skipped")]
        if skipped:
            # At the step's loss; a non-finite loss sits on the lowest loss of the run.
            finite = [v for v in y if not math.isnan(v)]
            floor = min(finite) if finite else 0.0
            sy = [num(r.get("loss")) for r in skipped]
            ax.plot([r["step"] for r in skipped], [floor if math.isnan(v) else v for v in sy], "x", color="red",
                    markersize=8, label=f"{name} skipped steps ({len(skipped)})")
    save(fig, ax, args.out, "loss.png", written)

    simple = [
        ("tokens_per_second.png", "throughput (all ranks)", "tokens/s", "tokens_per_second", 1.0),
        ("mfu.png", "model FLOPs utilisation", "MFU (%)", "mfu", 100.0),
        ("grad_norm.png", "gradient norm (before clipping)", "global L2 norm", "grad_norm", 1.0),
        ("lr.png", "learning rate", "lr", "lr", 1.0),
    ]
    for filename, title, ylabel, key, scale in simple:
        fig, ax = new_axes(plt, title, ylabel)
        for run, name in zip(runs, names):
            x, y = series(run["step"], key)
            ax.plot(x, [v * scale for v in y], linewidth=1, label=name)
        save(fig, ax, args.out, filename, written)

    # Memory: current (dashed) and peak bytes of the fullest rank.
    fig, ax = new_axes(plt, "memory through the backend's allocator (fullest rank)", "MiB")
    for run, name in zip(runs, names):
        x, peak = series(run["step"], "peak_memory_bytes")
        _, now = series(run["step"], "memory_bytes")
        (line,) = ax.plot(x, [v / 2**20 for v in peak], linewidth=1, label=f"{name} peak")
        ax.plot(x, [v / 2**20 for v in now], linewidth=1, linestyle="--", color=line.get_color(), label=f"{name} current")
    save(fig, ax, args.out, "memory.png", written)

    # GPU telemetry: power, temperature and SM utilisation, min..max over ranks as a band.
    if any(run["telemetry"] for run in runs):
        fig, axes = plt.subplots(3, 1, figsize=(8, 9), dpi=100, sharex=True)
        for ax, (key, title) in zip(axes, [("power_w", "power (W)"), ("temp_c", "temperature (C)"),
                                            ("sm_util", "SM utilisation (%)")]):
            ax.set_ylabel(title)
            ax.grid(True, alpha=0.3)
            for run, name in zip(runs, names):
                if not run["telemetry"]:
                    continue
                x, lo = series(run["telemetry"], key + "_min")
                _, hi = series(run["telemetry"], key + "_max")
                (line,) = ax.plot(x, hi, linewidth=1, label=f"{name} (line: max, band: min..max over ranks)")
                ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.25)
            if ax.get_legend_handles_labels()[0]:
                ax.legend()
        axes[-1].set_xlabel("step")
        fig.tight_layout()
        path = os.path.join(args.out, "gpu.png")
        fig.savefig(path)
        written.append(path)

    for path in written:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
