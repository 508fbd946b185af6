#!/usr/bin/env bash
# test_context_parallel.sh: --context-parallel N on the CPU backend under
# Open MPI (llm/model/context.c). 4 ranks as CP 2 x DP 2 and as CP 4 x DP 1
# train the global batch one rank trains, at a sequence length (30) that 2N
# chunks do not divide (padded at the end to 32), and must match it within
# 1e-6 in every step's loss and gradient norm, the validation loss and the
# final weights: GPT-2 at ZeRO 0 (CP 2 x DP 2) and 3 (CP 4, full recompute);
# a Llama with grouped-query attention (4 query heads, 2 kv heads, untied
# head) at ZeRO 0 (CP 4) and 3 (CP 2 x DP 2); make test-long adds GPT-2 at
# ZeRO 1 and 2 and a Llama with selective recompute. Checkpoints: the CP 2 x
# DP 2 Llama run's step-2 checkpoint resumes on CP 4 and on one rank,
# matching the uninterrupted run. Memory: a longer sequence (T = 2048; 16384
# in make test-long) on one rank and on CP 2 and 4: the run's own memory
# report (peak bytes, the maximum over ranks) must fall with N, with the same
# loss. Errors: N not dividing the ranks, the CUDA backend, --eval-data,
# --sample-every, --generate.
#
# Why 1e-6 and not bits: a rank's attention sums its chunk's keys in its own
# blocks, the encoder's and wpe's gradients are added chunk by chunk, and the
# gradients of DP x CP ranks are summed in another order than one rank's
# accumulation (test_zero.sh: ~1e-7). No clipping (--grad-clip 0), whose
# global norm is summed in an order that follows the rank count. AdamW's eps
# is 1e-6, not 1e-8: in the first steps AdamW moves a weight by about lr x
# sign(g) however small g is, so a gradient of ~1e-9 whose last bits differ
# can move its weight by 1e-6 on its own (GPT-2 on CP 4 at eps 1e-8: one
# weight 1.9e-6 off, the rest under 1e-6; at 1e-6: 3e-8); a larger eps keeps
# the weights a smooth function of the gradients, which is what is compared.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
# 8 sequences of 30 tokens a step: 1 rank x 4 micro-steps of 2; CP 2 x DP 2: 2
# micro-steps per DP group; CP 4: 4 micro-steps.
common=(--device cpu --seq-len 30 --micro-batch 2 --batch-tokens 480 --steps 4 --val-every 4 --val-batches 2
        --sample-every 0 --threads 1 --grad-clip 0 --eps 1e-6 --keep-last 0)
gpt2=(--depth 2)
llama=(--arch llama --layers 2 --channels 64 --heads 4 --kv-heads 2 --mlp-hidden 96)

# run NP NAME ARGS...: NP ranks; log $T/NAME.log, metrics $T/NAME/, the final
# weights in $T/NAME.ck/step_00000004/model.bin (llm.c's FP32 layout, any arch).
run() {
  local np=$1 name=$2
  shift 2
  "${MPI[@]}" -np "$np" "$TG" "${common[@]}" --checkpoint-dir "$T/$name.ck" --checkpoint-every 2 \
    --log-dir "$T/$name" "$@" >"$T/$name.log" 2>&1
}
weights() { echo "$T/$1.ck/step_00000004/model.bin"; }
# metrics_diff A B [AFTER]: the largest difference between the two runs' step
# losses, gradient norms and validation losses after step AFTER (0), at full
# logged precision ("x" when the runs logged different records).
metrics_diff() {
  "$PY" - "$T/$1/metrics.jsonl" "$T/$2/metrics.jsonl" "${3:-0}" <<'EOF'
import json, sys
def recs(p):
    out = []
    try:
        for line in open(p):
            r = json.loads(line)
            if r.get("step", 0) <= int(sys.argv[3]): continue
            if r["type"] == "step": out += [("s", r["step"], r["loss"]), ("g", r["step"], r["grad_norm"])]
            elif r["type"] == "val": out.append(("v", r["step"], r["val_loss"]))
    except OSError:
        pass
    return out
a, b = recs(sys.argv[1]), recs(sys.argv[2])
if not a or [x[:2] for x in a] != [x[:2] for x in b] or None in [x[2] for x in a + b]:
    print("x")
else:
    print("%.3g" % max(abs(x[2] - y[2]) for x, y in zip(a, b)))
EOF
}
# agree NAME A B WHAT [AFTER]: losses, norms (after step AFTER) and weights of
# runs A and B within 1e-6.
agree() {
  local name=$1 a=$2 b=$3 what=$4 dw dm
  dm=$(metrics_diff "$a" "$b" "${5:-0}")
  dw=$(maxdiff "$(weights "$a")" "$(weights "$b")" 2>/dev/null)
  echo "# $what: max |loss/norm diff| $dm, max |weight diff| $dw"
  if within "$dm" 1e-6 && within "$dw" 1e-6; then ok "$name"
  else fail "$name" "loss/norm diff '$dm', weight diff '$dw': $(tail -n 2 "$T/$b.log")"; fi
}

# 1. GPT-2: one rank against CP 2 x DP 2 and CP 4 at ZeRO 0-3.
run 1 g1 "${gpt2[@]}" --zero 0
if [ -s "$(weights g1)" ]; then ok cp_gpt2_reference
else fail cp_gpt2_reference "$(tail -n 2 "$T/g1.log")"; fi
run 4 g_cp2z0 "${gpt2[@]}" --context-parallel 2 --zero 0
if grep -q 'data-parallel ranks 2 .*each sequence over 2 ranks, 16 rows each (2 chunks of 8; padded to 32)' \
  "$T/g_cp2z0.log"; then ok cp_batch_line
else fail cp_batch_line "$(grep '^batch' "$T/g_cp2z0.log")"; fi
agree cp2_dp2_gpt2_zero0 g1 g_cp2z0 "GPT-2 CP 2 x DP 2, ZeRO 0"
run 4 g_cp4z3r "${gpt2[@]}" --context-parallel 4 --zero 3 --recompute full
agree cp4_gpt2_zero3_recompute_full g1 g_cp4z3r "GPT-2 CP 4, ZeRO 3, full recompute"
if [ "${TRAIN_GPT_TEST_LONG:-0}" = 1 ]; then
  run 4 g_cp2z1 "${gpt2[@]}" --context-parallel 2 --zero 1
  agree cp2_dp2_gpt2_zero1 g1 g_cp2z1 "GPT-2 CP 2 x DP 2, ZeRO 1"
  run 4 g_cp4z2 "${gpt2[@]}" --context-parallel 4 --zero 2
  agree cp4_gpt2_zero2 g1 g_cp4z2 "GPT-2 CP 4, ZeRO 2"
fi

# 2. Llama with grouped-query attention.
run 1 l1 "${llama[@]}" --zero 0
if [ -s "$(weights l1)" ] && grep -q '^llama     | kv heads 2 | MLP 96' "$T/l1.log"; then ok cp_llama_reference
else fail cp_llama_reference "$(tail -n 2 "$T/l1.log")"; fi
run 4 l_cp4z0 "${llama[@]}" --context-parallel 4 --zero 0
agree cp4_llama_zero0 l1 l_cp4z0 "Llama GQA CP 4, ZeRO 0"
run 4 l_cp2z3 "${llama[@]}" --context-parallel 2 --zero 3
agree cp2_dp2_llama_zero3 l1 l_cp2z3 "Llama GQA CP 2 x DP 2, ZeRO 3"
if [ "${TRAIN_GPT_TEST_LONG:-0}" = 1 ]; then
  run 4 l_cp4z2s "${llama[@]}" --context-parallel 4 --zero 2 --recompute selective
  agree cp4_llama_zero2_recompute_selective l1 l_cp4z2s "Llama GQA CP 4, ZeRO 2, selective recompute"
fi

# 3. Checkpoints: the model state does not depend on N and the data position
# is global, so CP 2 x DP 2's step-2 checkpoint resumes on CP 4 and on one rank.
for to in cp4 one; do
  mkdir -p "$T/l_res_$to.ck"
  cp -r "$T/l_cp2z3.ck/step_00000002" "$T/l_res_$to.ck/"
done
run 4 l_res_cp4 "${llama[@]}" --context-parallel 4 --zero 1
run 1 l_res_one "${llama[@]}" --zero 0
for to in cp4 one; do
  if [ "$(resumed_from "$T/l_res_$to.log")" = 2 ]; then agree "cp_resume_cp2_on_$to" l1 "l_res_$to" "resumed on $to" 2
  else fail "cp_resume_cp2_on_$to" "did not resume from step 2: $(grep -E '^resume|error' "$T/l_res_$to.log" | head -n 2)"; fi
done

# 4. Memory per rank falls with N at a long sequence, with the same loss.
long_T=2048
[ "${TRAIN_GPT_TEST_LONG:-0}" = 1 ] && long_T=16384
mem=(--device cpu --arch llama --layers 1 --channels 32 --heads 2 --kv-heads 1 --mlp-hidden 64 --seq-len "$long_T"
     --micro-batch 1 --steps 1 --val-every 0 --sample-every 0 --threads 1 --grad-clip 0 --keep-last 0)
peaks=()
for n in 1 2 4; do
  "${MPI[@]}" -np "$n" "$TG" "${mem[@]}" --batch-tokens "$long_T" --context-parallel "$n" \
    --log-dir "$T/mem$n" >"$T/mem$n.log" 2>&1
  peaks+=("$("$PY" -c "import json,sys; print(max(json.loads(l).get('peak_memory_bytes', 0) for l in open(sys.argv[1])))" \
    "$T/mem$n/metrics.jsonl" 2>/dev/null)")
done
echo "# T=$long_T peak memory per rank (bytes, max over ranks): CP 1 ${peaks[0]}, CP 2 ${peaks[1]}, CP 4 ${peaks[2]}"
for n in 2 4; do
  d=$(metrics_diff mem1 "mem$n")
  echo "# T=$long_T CP $n: max |loss/norm diff| against one rank $d"
  if within "$d" 1e-6; then ok "cp${n}_long_sequence_loss_equals_one_rank"
  else fail "cp${n}_long_sequence_loss_equals_one_rank" "diff '$d': $(tail -n 2 "$T/mem$n.log")"; fi
done
if [ -n "${peaks[2]}" ] && awk -v a="${peaks[0]}" -v b="${peaks[1]}" -v c="${peaks[2]}" 'BEGIN { exit !(a > b && b > c && c > 0) }'; then
  ok cp_peak_memory_falls_with_n
else fail cp_peak_memory_falls_with_n "peaks ${peaks[*]}"; fi

# 5. Errors.
expect_error cp_not_dividing_ranks 'context-parallel 2 does not divide the 3 ranks' \
  "${MPI[@]}" -np 3 "$TG" "${common[@]}" --context-parallel 2
expect_error cp_cuda_refused 'context-parallel 2: the CUDA backend runs only --context-parallel 1' \
  "$TG" --device cuda --context-parallel 2
expect_error cp_eval_data_refused 'eval-data .* does not run with --context-parallel 2' \
  "$TG" "${common[@]}" --context-parallel 2 --eval-data data/kjv/kjv_eval.bin
expect_error cp_sample_every_refused 'sample-every 5: samples need whole sequences' \
  "$TG" "${common[@]}" --context-parallel 2 --sample-every 5
expect_error cp_generate_refused 'generate needs whole sequences' \
  "$TG" "${common[@]}" --context-parallel 2 --generate 1
finish
