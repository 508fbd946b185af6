#!/usr/bin/python3
"""test_sagemaker_launch.py: scripts/sagemaker/launch.py --dry-run for each
instance type train_gpt is tuned for: the printed job parses as JSON and
holds the instance type, count, mpi distribution, spot and checkpoint
settings; every metric regex matches the lines train_gpt really prints and
captures the value printed there; bad launches are refused. Runs without the
SageMaker SDK (which the dry run must not need)."""
import json
import os
import re
import subprocess
import sys

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LAUNCH = "scripts/sagemaker/launch.py"
TG = os.environ.get("TG", "./train_gpt")
from pycheck import fail, finish, ok  # noqa: E402


def launch(*args):
    return subprocess.run([sys.executable, LAUNCH, *args], capture_output=True, text=True)


BASE = ["--dry-run", "--image-uri", "123456789012.dkr.ecr.us-west-2.amazonaws.com/train-gpt:1",
        "--role", "arn:aws:iam::123456789012:role/SageMakerTraining"]

# 1. Each instance type, two hosts, spot, all three channels.
for itype in ["ml.p5.48xlarge", "ml.p5en.48xlarge", "ml.p6-b200.48xlarge"]:
    name = "dry_run_" + itype.replace("ml.", "").replace(".48xlarge", "").replace("-", "_")
    r = launch(*BASE, "--instance-type", itype, "--instance-count", "2", "--spot", "--max-run", "7200",
               "--checkpoint-s3-uri", "s3://bucket/run-1/checkpoints", "--train", "s3://bucket/data/train/",
               "--val", "s3://bucket/data/val/", "--tokenizer", "s3://bucket/data/tok/", "--input-mode", "FastFile",
               "--hp", "model=gpt2-1558M", "--hp", "steps=32000", "--hp", "lr=6e-4", "--env", "NCCL_DEBUG=INFO")
    try:
        job = json.loads(r.stdout)
        est = job["estimator"]
        hp = est["hyperparameters"]
        checks = [
            (r.returncode == 0, f"exit {r.returncode}: {r.stderr}"),
            (est["instance_type"] == itype and est["instance_count"] == 2, "instance type or count"),
            (job["distribution"] == {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": ""}},
             f"distribution {job['distribution']}"),
            (hp["sagemaker_mpi_enabled"] == "true" and hp["sagemaker_mpi_num_of_processes_per_host"] == "8",
             "mpi hyperparameters"),
            (all(isinstance(v, str) for v in hp.values()), f"non-string hyperparameters {hp}"),
            (hp["model"] == "gpt2-1558M" and hp["steps"] == "32000" and hp["lr"] == "6e-4", f"hyperparameters {hp}"),
            (est["use_spot_instances"] is True and est["max_wait"] >= est["max_run"] == 7200, "spot times"),
            (est["checkpoint_s3_uri"] == "s3://bucket/run-1/checkpoints"
             and est["checkpoint_local_path"] == "/opt/ml/checkpoints", "checkpoint paths"),
            (sorted(job["inputs"]) == ["tokenizer", "train", "val"]
             and all(c["input_mode"] == "FastFile" and c["distribution"] == "FullyReplicated"
                     for c in job["inputs"].values()), f"inputs {job['inputs']}"),
            (est["environment"] == {"NCCL_DEBUG": "INFO"}, "environment"),
            (job["ranks"] == 16 and job["job_name"].startswith("train-gpt-"), "ranks or job name"),
            (est["volume_size"] > 0 and est["image_uri"].endswith("train-gpt:1"), "volume or image"),
            ({"train:loss", "val:loss"} <= {m["Name"] for m in est["metric_definitions"]}
             and est["enable_sagemaker_metrics"] is True, "metric definitions"),
        ]
        bad = [why for good, why in checks if not good]
        ok(name) if not bad else fail(name, "; ".join(bad))
    except (ValueError, KeyError) as e:
        fail(name, f"{type(e).__name__} {e}; stdout {r.stdout[:300]!r}; stderr {r.stderr[-300:]!r}")

# 2. The metric definitions the job gets are llm/report/README.md's list (the one place
# they live; tests/test_metrics.sh checks each against a run's JSON log), and
# against what train_gpt prints here: every train:* regex matches every step
# line and no validation line, val:* the reverse, each capturing the value
# printed in its field.
run = subprocess.run([TG, "--device", "cpu", "--depth", "1", "--seq-len", "16", "--micro-batch", "2", "--steps", "3",
                      "--val-every", "2", "--val-batches", "1", "--sample-every", "0", "--checkpoint-dir", ""],
                     capture_output=True, text=True)
steps = [l for l in run.stdout.splitlines() if l.startswith("step ")]
vals = [l for l in run.stdout.splitlines() if l.startswith("val ")]
job = json.loads(launch(*BASE).stdout)
metrics = job["estimator"]["metric_definitions"]
readme = open("llm/report/README.md").read()
documented = json.loads(readme.split("<!-- sagemaker-metric-definitions -->", 1)[1].split("```", 2)[1].split("\n", 1)[1])


def printed(line, metric):
    """The value a metric should capture, read off the line by its own grammar: "| name value |" or "| value unit |"."""
    if metric == "val:loss":
        return float(line.split("val loss")[1].split("|")[0])
    fields = [f.strip().split() for f in line.split("|")[1:]]
    by_name = {f[0]: f[1] for f in fields if len(f) >= 2 and not f[0][0].isdigit()}
    by_unit = {f[1]: f[0] for f in fields if len(f) == 2 and f[0][0].isdigit()}
    text = {"train:loss": by_name.get("loss"), "train:grad_norm": by_name.get("norm"), "train:lr": by_name.get("lr"),
            "train:step_ms": by_unit.get("ms"), "train:tokens_per_s": by_unit.get("tok/s"),
            "train:mfu_percent": (by_name.get("mfu") or "").rstrip("%"),
            "train:mem_mib": (by_name.get("mem") or "").split("/")[0],
            "train:peak_mem_mib": (by_name.get("mem") or "/").split("/")[1]}.get(metric)
    return float(text) if text else None


if run.returncode != 0 or len(steps) != 3 or len(vals) != 2:
    fail("metric_regexes_match_train_gpt", f"train_gpt printed {len(steps)} steps, {len(vals)} vals: {run.stderr[-300:]}")
else:
    bad = [] if metrics == documented else ["the job's metric definitions differ from llm/report/README.md's"]
    names = {m["Name"] for m in metrics}
    for need in ["train:loss", "train:grad_norm", "train:lr", "train:tokens_per_s", "val:loss"]:
        if need not in names:
            bad.append(f"no metric {need}")
    for m in metrics:
        if len(m["Regex"]) > 500:
            bad.append(f"{m['Name']}: regex longer than SageMaker's 500 characters")
        kind = m["Name"].split(":")[0]
        if kind not in ("train", "val"):
            continue  # gpu:* read the telemetry line, which needs NVML (tests/test_metrics.sh fakes it)
        mine, other = (steps, vals) if kind == "train" else (vals, steps)
        for line in mine:
            found = re.search(m["Regex"], line)
            want = printed(line, m["Name"])
            if not found:
                bad.append(f"{m['Name']} does not match {line!r}")
            elif want is not None and float(found.group(1)) != want:
                bad.append(f"{m['Name']} captured {found.group(1)} from {line!r}")
        bad += [f"{m['Name']} also matches {line!r}" for line in other if re.search(m["Regex"], line)]
    ok("metric_regexes_match_train_gpt") if not bad else fail("metric_regexes_match_train_gpt", "; ".join(bad[:4]))

# 2b. ... and agree with the step line's grammar as llm/report/README.md states it (its
# regular expression under <!-- step-line-regex -->): on every step line that
# expression matches, and each train:* metric captures the very field the
# expression's group names.
step_re = readme.split("<!-- step-line-regex -->", 1)[1].split("```", 2)[1].strip()
group_of = {"train:loss": 3, "train:grad_norm": 4, "train:lr": 5, "train:step_ms": 6, "train:tokens_per_s": 7,
            "train:mfu_percent": 8, "train:mem_mib": 9, "train:peak_mem_mib": 10}
bad = []
if not steps:
    bad.append("no step lines")
for line in steps:
    whole = re.match(step_re, line)
    if not whole:
        bad.append(f"README's step-line regex does not match {line!r}")
        continue
    for m in metrics:
        if m["Name"] in group_of:
            found = re.search(m["Regex"], line)
            want = whole.group(group_of[m["Name"]]).rstrip("%")
            if not found or found.group(1) != want:
                bad.append(f"{m['Name']} captures {found.group(1) if found else None!r}, the step line's field is {want!r}")
missing = sorted(set(group_of) - {m["Name"] for m in metrics})
bad += [f"no metric {name}" for name in missing]
ok("metrics_agree_with_step_line_regex") if not bad else fail("metrics_agree_with_step_line_regex", "; ".join(bad[:4]))

# 3. Launches that would go wrong are refused before any AWS call.
refusals = {
    "spot_needs_checkpoints": (["--spot"], "--spot needs --checkpoint-s3-uri"),
    "max_wait_below_max_run": (["--spot", "--checkpoint-s3-uri", "s3://b/c", "--max-run", "100", "--max-wait", "50"],
                               "--max-wait 50 must be at least --max-run 100"),
    "unknown_instance_type": (["--instance-type", "ml.g5.48xlarge"], "give --gpus-per-host"),
    "hp_not_key_value": (["--hp", "steps"], "'steps' is not KEY=VALUE"),
    "hp_reserved": (["--hp", "sagemaker_mpi_enabled=false"], "sagemaker_* hyperparameters are set by this launcher"),
    "hp_twice": (["--hp", "steps=1", "--hp", "steps=2"], "--hp steps is given twice"),
    "not_s3": (["--train", "/local/data"], "is not an s3:// URI"),
}
for name, (extra, message) in refusals.items():
    r = launch(*BASE, *extra)
    if r.returncode == 2 and message in r.stderr and not r.stdout:
        ok(name)
    else:
        fail(name, f"exit {r.returncode}, stderr {r.stderr.strip().splitlines()[-1:]}")
r = launch(*BASE, "--instance-type", "ml.g5.48xlarge", "--gpus-per-host", "8")
if r.returncode == 0 and json.loads(r.stdout)["distribution"]["mpi"]["processes_per_host"] == 8:
    ok("other_instance_type_with_gpus")
else:
    fail("other_instance_type_with_gpus", r.stderr)

finish()
