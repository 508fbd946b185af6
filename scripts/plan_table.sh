#!/usr/bin/env bash
# plan_table.sh: the planner's recommendations as the Markdown table in
# llm/plan/README.md, generated from the binary so that the README stays true.
#
#   scripts/plan_table.sh              print the table
#   scripts/plan_table.sh --update     rewrite the table between the markers in llm/plan/README.md
#
# Rows: gpt-1B .. gpt-64B at 4K, 32K and 128K tokens on one 8 x B200 node,
# and gpt-7B at 4K on one 8 x H100 node; GPT-2's vocabulary (50,257).
set -euo pipefail
cd "$(dirname "$0")/.."
TG=${TG:-./train_gpt}

table() {
  echo "| model | parameters | sequence | GPUs | precision | ZeRO | recompute | micro-batch | GiB per GPU | tok/s per GPU | hours per 1B tokens | GPU-hours per 1B tokens |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  row() {  # model seq gpu
    local line
    # --plan exits 2 when nothing fits; its summary line is there all the same.
    line=$("$TG" --plan --model "$1" --seq-len "$2" --gpu "$3" --world-size 8 --ranks-per-node 8 \
      --vocab-size 50257 --tokenizer '' | grep '^summary') || true
    [ -n "$line" ] || { echo "plan_table.sh: --plan failed for $1 at $2" >&2; exit 1; }
    # key=value fields of the summary line into shell variables
    # shellcheck disable=SC2034  # every field is set by the eval; some go unused
    local fits params world precision zero hybrid recompute full_layers micro_batch planned_gib memory_gib \
      tok_s_gpu hours_per_btok gpu_hours_per_btok fits_with_world fits_with_seq
    eval "$(printf '%s\n' "$line" | tr ' ' '\n' | grep -E '^[a-z_]+=' | grep -vE '^(model|device|seq)=')"
    local seq_k=$(($2 / 1024))K gpus
    gpus="8 x $(echo "$3" | tr '[:lower:]' '[:upper:]')"
    local p; p=$(awk -v n="$params" 'BEGIN { printf "%.2fB", n / 1e9 }')
    if [ "$fits" = 1 ]; then
      local rec=$recompute
      [ "$recompute" != full ] && [ "$full_layers" -gt 0 ] && rec="$recompute + full x $full_layers"
      local z="$zero"; [ "$hybrid" = 1 ] && z="$zero (hybrid)"
      printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s of %s | %s | %s | %s |\n' "$1" "$p" "$seq_k" "$gpus" \
        "$precision" "$z" "$rec" "$micro_batch" "$planned_gib" "$memory_gib" \
        "$(printf '%.0f' "$tok_s_gpu")" "$(printf '%.2f' "$hours_per_btok")" "$(printf '%.1f' "$gpu_hours_per_btok")"
    else
      local what="does not fit: needs $planned_gib GiB"
      [ "$fits_with_world" -gt 0 ] && what="$what; fits on $fits_with_world GPUs"
      [ "$fits_with_seq" -gt 0 ] && what="$what; or at $((fits_with_seq / 1024))K tokens"
      printf '| %s | %s | %s | %s | %s | | %s | | | | | |\n' "$1" "$p" "$seq_k" "$gpus" "$precision" "$what"
    fi
  }
  for m in gpt-1B gpt-7B gpt-13B gpt-30B gpt-64B; do
    for s in 4096 32768 131072; do row "$m" "$s" b200; done
  done
  row gpt-7B 4096 h100
}

if [ "${1:-}" = "--update" ]; then
  t=$(table)
  /usr/bin/python3 - "$t" <<'EOF'
import re, sys
table = sys.argv[1]
text = open("llm/plan/README.md").read()
begin, end = "<!-- plan-table:begin -->", "<!-- plan-table:end -->"
if begin not in text or end not in text:
    sys.exit("llm/plan/README.md: the plan-table markers are missing")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open("llm/plan/README.md", "w").write(head + begin + "\n" + table + "\n" + end + tail)
EOF
else
  table
fi
