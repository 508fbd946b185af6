#!/usr/bin/env bash
# test_metrics.sh: what a run reports, end to end on the bundled corpus: the
# JSONL log (every field on every line, strict JSON), the step line against
# the regular expressions documented in llm/report/README.md, NVML telemetry through a
# fake library and its one notice without one, the NaN guard (skip with
# bit-identical weights, stop after repeated NaNs), loss spikes, flag
# errors, and scripts/plot.py.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
FAKE_NVML=${BUILD:-build}/tests/libfake_nvml.so
small=(--device cpu --depth 2 --seq-len 64 --micro-batch 4 --sample-every 0)

# 1. A run with everything on: validation, telemetry (fake NVML), progress
# lines, and one poisoned step.
TRAIN_GPT_NVML_LIB=$FAKE_NVML FAKE_NVML_REASONS=0x4 TRAIN_GPT_INJECT_NAN=7 \
  "$TG" "${small[@]}" --steps 30 --val-every 10 --telemetry-every 10 --progress-every 0.000001 \
  --log-dir "$T/run_a" >"$T/a.out" 2>"$T/a.err"
rc=$?
if [ $rc -eq 0 ] && [ -s "$T/run_a/metrics.jsonl" ]; then
  ok run_with_log_dir
else
  fail run_with_log_dir "exit $rc: $(tail -n 2 "$T/a.err")"
fi

# The log: strict JSON on every line, config first, summary last, the
# documented fields on every record of each type, values consistent.
"$PY" - "$T/run_a/metrics.jsonl" >"$T/jsonl.txt" 2>&1 <<'EOF'
import json, math, sys

def strict(s):
    raise ValueError("non-standard JSON constant " + s)

lines = open(sys.argv[1]).read().splitlines()
recs = [json.loads(l, parse_constant=strict) for l in lines]
assert recs[0]["type"] == "config", "first line is not the config"
assert recs[-1]["type"] == "summary", "last line is not the summary"
STEP = {"type", "step", "steps", "loss", "grad_norm", "lr", "step_time_s", "tokens_per_second",
        "tokens_per_second_per_rank", "model_flops_per_second", "mfu", "memory_bytes", "peak_memory_bytes",
        "tokens", "elapsed_s", "eta_s", "skipped", "skip_reason", "loss_spike", "loss_z", "skipped_total", "rollbacks"}
SUMMARY = {"type", "status", "error", "steps_done", "last_step", "skipped_steps", "nonfinite_steps", "loss_spikes", "rollbacks", "tokens",
           "elapsed_s", "tokens_per_second", "mfu", "peak_memory_bytes", "final_loss", "final_val_loss"}
CONFIG = {"type", "time", "version", "flags", "backend", "precision", "world", "zero_stage", "params", "layers", "channels",
          "heads", "vocab_size", "seq_len", "micro_batch", "accumulation", "tokens_per_step", "flops_per_token",
          "peak_flops_per_device", "peak_source"}
cfg = recs[0]
assert set(cfg) == CONFIG, "config keys: %s" % sorted(set(cfg) ^ CONFIG)
assert cfg["flags"]["steps"] == 30 and cfg["flags"]["log-dir"].endswith("run_a"), "flags"
assert cfg["flops_per_token"] == 5723136, cfg["flops_per_token"]  # 6*(929280-64*128) + 12*2*128*64
steps = [r for r in recs if r["type"] == "step"]
assert [r["step"] for r in steps] == list(range(1, 31)), "step numbers"
for r in steps:
    assert set(r) == STEP, "step %d keys: %s" % (r["step"], sorted(set(r) ^ STEP))
    assert r["tokens"] == 256 * r["step"], "tokens"
    assert r["steps"] == 30
    if r["mfu"] is not None:
        want = r["tokens_per_second"] * cfg["flops_per_token"] / cfg["peak_flops_per_device"]
        assert abs(r["mfu"] - want) <= 1e-6 * want, "mfu %g vs %g" % (r["mfu"], want)
    assert r["peak_memory_bytes"] >= r["memory_bytes"] > 0, "memory"
bad = [r for r in steps if r["skipped"]]
assert [r["step"] for r in bad] == [7], "skipped steps %s" % [r["step"] for r in bad]
assert bad[0]["skip_reason"] == "nonfinite" and bad[0]["grad_norm"] is None, "step 7 record"
assert all(r["skip_reason"] is None and r["grad_norm"] is not None for r in steps if r["step"] != 7)
assert steps[-1]["skipped_total"] == 1 and steps[-1]["eta_s"] == 0 and steps[-1]["rollbacks"] == 0
vals = [r for r in recs if r["type"] == "val"]
assert [r["step"] for r in vals] == [10, 20, 30] and all(r["val_loss"] > 0 for r in vals), "val records"
tel = [r for r in recs if r["type"] == "telemetry"]
assert [r["step"] for r in tel] == [10, 20, 30], "telemetry steps"
for r in tel:
    assert r["power_w_min"] == r["power_w_max"] == 350 and r["temp_c_max"] == 60 and r["sm_util_min"] == 90, r
    assert r["mem_used_bytes_max"] == 10 * 2**30 and r["throttle_power_max"] == 1 and r["throttle_thermal_max"] == 0
s = recs[-1]
assert set(s) == SUMMARY, "summary keys: %s" % sorted(set(s) ^ SUMMARY)
assert s["status"] == "ok" and s["error"] is None and s["steps_done"] == s["last_step"] == 30 and s["tokens"] == 30 * 256
assert s["skipped_steps"] == 1 and s["nonfinite_steps"] == 1 and s["loss_spikes"] == 0 and s["rollbacks"] == 0
assert s["final_val_loss"] == vals[-1]["val_loss"] and s["final_loss"] == steps[-1]["loss"]
print("ok")
EOF
if [ "$(tail -n 1 "$T/jsonl.txt")" = ok ]; then ok jsonl_fields_every_line; else fail jsonl_fields_every_line "$(tail -n 3 "$T/jsonl.txt")"; fi

# The stdout lines against llm/report/README.md's regular expressions: the whole-line
# one on every step line, and each SageMaker metric definition on exactly
# the lines it is meant for, giving the values the JSON log has.
"$PY" - llm/report/README.md "$T/a.out" "$T/run_a/metrics.jsonl" >"$T/regex.txt" 2>&1 <<'EOF'
import json, re, sys

readme, out, log = (open(p).read() for p in sys.argv[1:4])
def block_after(marker):
    rest = readme.split(marker, 1)[1]
    return rest.split("```", 2)[1].split("\n", 1)[1]
line_re = re.compile(block_after("<!-- step-line-regex -->").strip())
defs = json.loads(block_after("<!-- sagemaker-metric-definitions -->"))
lines = out.splitlines()
recs = [json.loads(l) for l in log.splitlines()]
steps = {r["step"]: r for r in recs if r["type"] == "step"}
step_lines = [l for l in lines if l.startswith("step ")]
assert len(step_lines) == 30, "%d step lines" % len(step_lines)
for l in step_lines:
    m = line_re.match(l)
    assert m, "step line does not match the documented regex: " + l
    r = steps[int(m.group(1))]
    assert int(m.group(2)) == 30
    assert m.group(3) == "%.4f" % r["loss"], (m.group(3), r["loss"])
assert any(l.endswith("| skipped: non-finite loss or grad norm (1 in a row)") for l in step_lines)

# Which lines each metric must match, and the JSON value it must give.
def step_values(key, scale=1.0):
    return [(l, steps[int(line_re.match(l).group(1))][key]) for l in step_lines
            if steps[int(line_re.match(l).group(1))][key] is not None]
tel = [r for r in recs if r["type"] == "telemetry"]
gpu_lines = [l for l in lines if l.startswith("gpu ")]
vals = [r for r in recs if r["type"] == "val"]
val_lines = [l for l in lines if l.startswith("val ")]
MiB = 2.0 ** 20
expect = {
    "train:loss": (step_values("loss"), 1, 5e-5),
    "train:grad_norm": (step_values("grad_norm"), 1, 5e-5),
    "train:lr": (step_values("lr"), 1, "rel"),
    "train:step_ms": (step_values("step_time_s"), 1e3, 0.05),
    "train:tokens_per_s": (step_values("tokens_per_second"), 1, 0.5),
    "train:mfu_percent": (step_values("mfu"), 100, 0.05),
    "train:mem_mib": (step_values("memory_bytes"), 1 / MiB, 0.5),
    "train:peak_mem_mib": (step_values("peak_memory_bytes"), 1 / MiB, 0.5),
    "val:loss": (list(zip(val_lines, [r["val_loss"] for r in vals])), 1, 5e-5),
    "gpu:sm_util_min": (list(zip(gpu_lines, [r["sm_util_min"] for r in tel])), 1, 0.5),
    "gpu:power_w_min": (list(zip(gpu_lines, [r["power_w_min"] for r in tel])), 1, 0.5),
    "gpu:temp_c_max": (list(zip(gpu_lines, [r["temp_c_max"] for r in tel])), 1, 0.5),
}
assert sorted(expect) == sorted(d["Name"] for d in defs), "metric names differ from the test's list"
for d in defs:
    rx = re.compile(d["Regex"])
    want, scale, tol = expect[d["Name"]]
    matched = [(l, rx.search(l)) for l in lines if rx.search(l)]
    assert [l for l, _ in matched] == [l for l, _ in want], "%s matches %d lines, want %d: %s" % (
        d["Name"], len(matched), len(want), [l for l, _ in matched][:3])
    for (l, m), (_, v) in zip(matched, want):
        got, v = float(m.group(1)), v * scale
        # Printed values are rounded: allow half a unit of the last digit (and a hair for binary fractions).
        ok = abs(got - v) <= 0.006 * abs(v) if tol == "rel" else abs(got - v) <= tol * 1.001
        assert ok, "%s: %g from '%s', log has %g" % (d["Name"], got, l, v)
print("ok")
EOF
if [ "$(tail -n 1 "$T/regex.txt")" = ok ]; then ok step_line_regexes; else fail step_line_regexes "$(tail -n 3 "$T/regex.txt")"; fi

progress=$(grep -c '^progress  | [0-9]*/30 steps (.*) | elapsed .* | eta ' "$T/a.out")
if [ "$progress" -ge 1 ]; then ok progress_lines; else fail progress_lines "no progress line with --progress-every 1e-6"; fi

# 2. Without NVML: exactly one notice, no telemetry, the run trains. The
# variable points at a file that does not exist, so this holds on GPU hosts too.
TRAIN_GPT_NVML_LIB=/nonexistent/libnvidia-ml.so.1 "$TG" "${small[@]}" --steps 12 --val-every 0 --telemetry-every 2 \
  --seed 5 --log-dir "$T/run_b" >"$T/b.out" 2>&1
rc=$?
notices=$(grep -c 'NVML' "$T/b.out")
if [ $rc -eq 0 ] && [ "$notices" -eq 1 ] && grep -q '^telemetry | off: NVML not available (/nonexistent/libnvidia-ml.so.1' "$T/b.out" &&
   ! grep -q '^gpu ' "$T/b.out" && ! grep -q '"type":"telemetry"' "$T/run_b/metrics.jsonl" &&
   [ "$(grep -c '^step ' "$T/b.out")" -eq 12 ]; then
  ok no_nvml_one_notice
else
  fail no_nvml_one_notice "exit $rc, $notices NVML lines: $(grep NVML "$T/b.out" | head -n 3)"
fi

# A call that starts failing during the run: one notice naming it, then no telemetry.
TRAIN_GPT_NVML_LIB=$FAKE_NVML FAKE_NVML_FAIL=nvmlDeviceGetTemperature FAKE_NVML_FAIL_AFTER=1 \
  "$TG" "${small[@]}" --steps 8 --val-every 0 --telemetry-every 2 >"$T/c.out" 2>&1
rc=$?
gpu_steps=$(grep '^gpu ' "$T/c.out" | awk '{print $2}' | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$gpu_steps" = "2/8 " ] &&
   [ "$(grep -c '^telemetry | off from step 4: nvmlDeviceGetTemperature failed: Unknown Error$' "$T/c.out")" -eq 1 ] &&
   [ "$(grep -c '^telemetry' "$T/c.out")" -eq 2 ]; then
  ok nvml_failure_midrun_one_notice
else
  fail nvml_failure_midrun_one_notice "exit $rc, gpu lines at '$gpu_steps': $(grep '^telemetry' "$T/c.out")"
fi

# 3. NaN guard: the weights after a run that stops right before the poisoned
# step equal those of a run that ends with it (warmup longer than the runs,
# so the learning rates do not depend on --steps); without the poison they differ.
nan=("${small[@]}" --val-every 0 --warmup 100)
"$TG" "${nan[@]}" --steps 2 --export "$T/before.bin" >/dev/null 2>&1
TRAIN_GPT_INJECT_NAN=3 "$TG" "${nan[@]}" --steps 3 --export "$T/after.bin" >"$T/nan.out" 2>&1
"$TG" "${nan[@]}" --steps 3 --export "$T/clean.bin" >/dev/null 2>&1
if [ -s "$T/before.bin" ] && cmp -s "$T/before.bin" "$T/after.bin" && ! cmp -s "$T/before.bin" "$T/clean.bin" &&
   grep -q '^step     3/3 | loss [0-9.]* | norm nan | .* | skipped: non-finite loss or grad norm (1 in a row)$' "$T/nan.out"; then
  ok nan_step_skipped_weights_identical
else
  fail nan_step_skipped_weights_identical "weights or step line wrong: $(grep '^step     3' "$T/nan.out")"
fi

expect_error nan_repeated_stops 'step 4: 3 steps in a row skipped \(the last for a non-finite loss or gradient norm\), reaching --max-bad-steps 3' \
  env TRAIN_GPT_INJECT_NAN=2,3,4,5 "$TG" "${nan[@]}" --steps 8 --max-bad-steps 3 --log-dir "$T/run_nan"
if tail -n 1 "$T/run_nan/metrics.jsonl" | grep -q '^{"type":"summary","status":"error","error":"step 4: 3 steps in a row.*"last_step":4,' &&
   [ "$(grep -c '"type":"step"' "$T/run_nan/metrics.jsonl")" -eq 4 ]; then
  ok failed_run_log_ends_with_summary
else
  fail failed_run_log_ends_with_summary "$(tail -n 1 "$T/run_nan/metrics.jsonl")"
fi
if env TRAIN_GPT_INJECT_NAN=2,3,4,5 "$TG" "${nan[@]}" --steps 8 --max-bad-steps 0 >"$T/nostop.out" 2>&1 &&
   grep -q '^summary   | 8 steps in .* | 4 skipped (4 non-finite, 0 loss spikes)' "$T/nostop.out"; then
  ok max_bad_steps_zero_never_stops
else
  fail max_bad_steps_zero_never_stops "$(tail -n 2 "$T/nostop.out")"
fi

# 4. Loss spikes: a learning rate far too high makes step 6's loss jump
# (6.8 -> 12.1); reported by default, skipped with --skip-spikes.
spike=("${small[@]}" --val-every 0 --steps 8 --lr 0.05 --warmup 10 --spike-z 3 --spike-window 4)
"$TG" "${spike[@]}" >"$T/spike.out" 2>&1
if grep -q '^step     6/8 | loss 1[0-9.]* | .* | loss spike z [0-9.]*$' "$T/spike.out" &&
   grep -q '^summary   | 8 steps in .* | 0 skipped (0 non-finite, [1-9][0-9]* loss spikes)' "$T/spike.out"; then
  ok loss_spike_reported
else
  fail loss_spike_reported "$(grep -E 'spike|summary' "$T/spike.out" | head -n 3)"
fi
"$TG" "${spike[@]}" --skip-spikes 1 --max-bad-steps 0 --log-dir "$T/run_spike" >"$T/spike2.out" 2>&1
if grep -q '^step     6/8 | .* | skipped: loss spike z [0-9.]* (1 in a row)$' "$T/spike2.out" &&
   grep -q '"step":6,.*"skipped":true,"skip_reason":"spike","loss_spike":true' "$T/run_spike/metrics.jsonl"; then
  ok loss_spike_skipped
else
  fail loss_spike_skipped "$(grep -E 'spike' "$T/spike2.out" | head -n 3)"
fi

# 5. --peak-tflops replaces the measured peak.
"$TG" "${small[@]}" --val-every 0 --steps 3 --peak-tflops 0.001 --log-dir "$T/run_peak" >"$T/peak.out" 2>&1
if grep -q '"peak_flops_per_device":1000000000,"peak_source":"--peak-tflops 0.001"' "$T/run_peak/metrics.jsonl" &&
   grep -q '^mfu       | 5.723 MFLOP per token .* | peak 1 GFLOP/s per device: --peak-tflops 0.001$' "$T/peak.out"; then
  ok peak_tflops_flag
else
  fail peak_tflops_flag "$(grep '^mfu' "$T/peak.out")"
fi

# 5b. No impossible figure: a step faster than the peak proves the peak wrong,
# so MFU reads n/a from there on (with one line saying why), never above 100%;
# a run of no steps has no throughput or loss to print.
"$TG" "${small[@]}" --val-every 0 --steps 3 --peak-tflops 0.00001 --log-dir "$T/run_low_peak" >"$T/low_peak.out" 2>&1
if [ "$(grep -c '^mfu       | n/a from step 1 on: it reached .*FLOP/s per device, more than the peak of 10 MFLOP/s (--peak-tflops 1e-05)' "$T/low_peak.out")" = 1 ] &&
   [ "$(grep -c '^step .* | mfu n/a | ' "$T/low_peak.out")" = 3 ] && grep -q '^summary .* | mean mfu n/a | ' "$T/low_peak.out" &&
   ! grep -Eq 'mfu [0-9.]+%' "$T/low_peak.out" &&
   "$PY" -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert all(r["mfu"] is None for r in recs if r["type"] in ("step", "summary")), "mfu in the log"' "$T/run_low_peak/metrics.jsonl"; then
  ok mfu_never_above_100_percent
else
  fail mfu_never_above_100_percent "$(grep -E '^(mfu|step|summary)' "$T/low_peak.out" | head -n 5)"
fi
"$TG" "${small[@]}" --val-every 0 --steps 0 >"$T/zero_steps.out" 2>&1
if grep -q '^summary   | 0 steps in .* | mean n/a tokens/s | mean mfu n/a | .* | final loss n/a | final val loss n/a$' "$T/zero_steps.out" &&
   ! grep -qi 'nan' "$T/zero_steps.out"; then
  ok zero_steps_summary_says_na
else
  fail zero_steps_summary_says_na "$(grep '^summary' "$T/zero_steps.out")"
fi

# 6. Bad values.
touch "$T/a_file"
expect_error bad_telemetry_every 'telemetry-every must not be negative' "$TG" "${small[@]}" --telemetry-every -1
expect_error bad_progress_every 'progress-every must not be negative' "$TG" "${small[@]}" --progress-every -2
expect_error bad_peak_tflops 'peak-tflops must not be negative' "$TG" "${small[@]}" --peak-tflops -1
expect_error bad_max_bad_steps 'max-bad-steps must not be negative' "$TG" "${small[@]}" --max-bad-steps -1
expect_error bad_spike_z 'spike-z must not be negative' "$TG" "${small[@]}" --spike-z -1
expect_error bad_spike_window 'spike-window must be at least 2' "$TG" "${small[@]}" --spike-window 1
expect_error skip_spikes_needs_z 'skip-spikes needs spike detection' "$TG" "${small[@]}" --skip-spikes 1 --spike-z 0
expect_error bad_inject_nan "TRAIN_GPT_INJECT_NAN='3,x': 'x' is not a step number" env TRAIN_GPT_INJECT_NAN=3,x "$TG" "${small[@]}"
expect_error log_dir_under_file "--log-dir '.*a_file/run': cannot create '.*a_file/run': Not a directory" \
  "$TG" "${small[@]}" --steps 1 --log-dir "$T/a_file/run"

# 7. Plots of one run, and of two runs compared.
png_ok() {  # every named PNG exists, is not empty, and starts with the PNG signature
  local f
  for f in "$@"; do
    [ -s "$f" ] && [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || return 1
  done
}
plots=(loss.png tokens_per_second.png mfu.png grad_norm.png lr.png memory.png)
if scripts/plot.py "$T/run_a/metrics.jsonl" -o "$T/plots_a" >"$T/plot.out" 2>&1 &&
   png_ok "${plots[@]/#/$T/plots_a/}" && png_ok "$T/plots_a/gpu.png"; then
  ok plot_one_run
else
  fail plot_one_run "$(tail -n 3 "$T/plot.out")"
fi
if scripts/plot.py "$T/run_a/metrics.jsonl" "$T/run_b/metrics.jsonl" -o "$T/plots_ab" >"$T/plot2.out" 2>&1 &&
   png_ok "${plots[@]/#/$T/plots_ab/}" && [ "$(grep -c '^wrote ' "$T/plot2.out")" -eq 7 ]; then
  ok plot_two_runs
else
  fail plot_two_runs "$(tail -n 3 "$T/plot2.out")"
fi
echo '{"type":"step"' >"$T/broken.jsonl"
err=$(scripts/plot.py "$T/broken.jsonl" -o "$T/plots_x" 2>&1 >/dev/null)
rc=$?
if [ $rc -eq 1 ] && printf '%s' "$err" | grep -q "^plot.py: error: .*broken.jsonl:1: not JSON"; then
  ok plot_bad_log
else
  fail plot_bad_log "exit $rc: $err"
fi

finish
