#!/usr/bin/env bash
# test_s3_sync.sh: scripts/s3_sync.sh against a local S3-compatible server
# (moto, on loopback, started and stopped here): only complete checkpoints
# go up, manifest last; restore fetches the newest complete ones and
# train_gpt resumes from them; pruning is mirrored; a multi-node checkpoint's
# manifest waits for the other nodes' files; watch mode uploads on SIGTERM.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
SYNC=scripts/s3_sync.sh

# The AWS CLI (Debian's, from scripts/install_deps.sh, or any on PATH).
AWS_BIN=$(command -v /usr/bin/aws || command -v aws || true)
# A Python with moto's server: one that has it already, else a venv under build/.
MOTO_PY=""
for py in /usr/bin/python3 python3 build/s3venv/bin/python; do
  if command -v "$py" >/dev/null && "$py" -c 'import moto.server, flask, flask_cors' 2>/dev/null; then MOTO_PY=$py; break; fi
done
if [ -z "$MOTO_PY" ]; then
  echo "# installing moto into build/s3venv (once)"
  if /usr/bin/python3 -m venv build/s3venv >"$T/venv.log" 2>&1 &&
     build/s3venv/bin/pip install -q 'moto[s3]' flask flask-cors >>"$T/venv.log" 2>&1; then
    MOTO_PY=build/s3venv/bin/python
  fi
fi
if [ -z "$AWS_BIN" ] || [ -z "$MOTO_PY" ]; then
  fail s3_sync_setup "needs the AWS CLI (${AWS_BIN:-missing}) and moto (${MOTO_PY:-missing}: $(tail -n 2 "$T/venv.log" 2>/dev/null)); run scripts/install_deps.sh"
  finish
fi

mkdir -p "$T/bin"
ln -s "$AWS_BIN" "$T/bin/aws"
export PATH="$T/bin:$PATH"
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1
export AWS_CONFIG_FILE="$T/no_config" AWS_SHARED_CREDENTIALS_FILE="$T/no_credentials" AWS_PAGER=""
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export S3_ENDPOINT_URL="http://127.0.0.1:$PORT"
"$MOTO_PY" -m moto.server -H 127.0.0.1 -p "$PORT" >"$T/moto.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$TEST_TMP"' EXIT
# The test's own look at the bucket goes through boto3 (moto's dependency):
# the CLI takes about a second per call.
s3py() {  # s3py mb | tree PREFIX | rm KEY
  "$MOTO_PY" - "$@" <<'EOF'
import os, sys, time, boto3
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT_URL"])
op = sys.argv[1]
if op == "mb":
    for _ in range(100):
        try:
            s3.create_bucket(Bucket="ckpt")
            break
        except Exception:
            time.sleep(0.1)
elif op == "tree":
    prefix = sys.argv[2] + "/"
    keys = [o["Key"][len(prefix):] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="ckpt", Prefix=prefix)
            for o in page.get("Contents", [])]
    print(" ".join(sorted(keys)) + " " if keys else "", end="")
elif op == "rm":
    s3.delete_object(Bucket="ckpt", Key=sys.argv[2])
EOF
}
s3py mb
s3_tree() { s3py tree "$1"; }

d1=(--device cpu --depth 1 --seq-len 32 --micro-batch 2 --val-every 0 --sample-every 0 --threads 1 --peak-tflops 1)

# 1. Upload: complete checkpoints only, no temporary files, no interrupted save.
"$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/L1" --checkpoint-every 10 --keep-last 0 >/dev/null 2>&1
mkdir -p "$T/L1/step_00000030"
cp "$T/L1/step_00000020/model.bin" "$T/L1/step_00000020/shard_00000_of_00001.bin" "$T/L1/step_00000030/"
echo partial >"$T/L1/step_00000020/shard_00000_of_00001.bin.tmp.999"
"$SYNC" upload "$T/L1" s3://ckpt/run >"$T/up1.log" 2>&1
tree=$(s3_tree run)
want="step_00000010/manifest.json step_00000010/model.bin step_00000010/shard_00000_of_00001.bin step_00000020/manifest.json step_00000020/model.bin step_00000020/shard_00000_of_00001.bin "
if [ "$tree" = "$want" ]; then ok s3_upload_complete_only; else fail s3_upload_complete_only "S3 holds: $tree $(tail -n 2 "$T/up1.log")"; fi

# 2. Restore skips a checkpoint whose manifest lists a file missing in S3,
# and fetches the newest complete one; an upload pass repairs S3.
s3py rm run/step_00000020/shard_00000_of_00001.bin
"$SYNC" restore "$T/L3" s3://ckpt/run 1 >"$T/re3.log" 2>&1
if [ "$(cd "$T/L3" && echo step_*)" = "step_00000010" ] && grep -q 'step_00000020: its manifest lists files missing' "$T/re3.log" &&
   cmp -s "$T/L3/step_00000010/shard_00000_of_00001.bin" "$T/L1/step_00000010/shard_00000_of_00001.bin"; then
  ok s3_restore_skips_incomplete
else
  fail s3_restore_skips_incomplete "$(cat "$T/re3.log")"
fi
"$SYNC" upload "$T/L1" s3://ckpt/run >/dev/null 2>&1

# 3. Restore the newest complete checkpoint into an empty directory: the
# same bytes, and train_gpt resumes from it.
"$SYNC" restore "$T/L2" s3://ckpt/run 1 >"$T/re2.log" 2>&1
same=1
for f in manifest.json model.bin shard_00000_of_00001.bin; do
  cmp -s "$T/L1/step_00000020/$f" "$T/L2/step_00000020/$f" || same=0
done
"$TG" "${d1[@]}" --steps 30 --checkpoint-dir "$T/L2" --checkpoint-every 10 --keep-last 1 >"$T/resume.log" 2>&1
if [ "$same" -eq 1 ] && [ "$(cd "$T/L2" && echo step_*)" = "step_00000030" ] &&
   grep -qE '^resume +\| .*step_00000020: step 20 of 30' "$T/resume.log"; then
  ok s3_restore_then_resume
else
  fail s3_restore_then_resume "same=$same, local: $(cd "$T/L2" && echo step_*); $(grep -E '^resume|error' "$T/resume.log")"
fi

# 4. Upload after local pruning: S3 follows (the new checkpoint up, pruned ones gone).
"$SYNC" upload "$T/L2" s3://ckpt/run >"$T/up2.log" 2>&1
tree=$(s3_tree run)
if [ "$tree" = "step_00000030/manifest.json step_00000030/model.bin step_00000030/shard_00000_of_00001.bin " ]; then
  ok s3_upload_mirrors_pruning
else
  fail s3_upload_mirrors_pruning "S3 holds: $tree"
fi

# 5. Two nodes, node-local disks: node 0 has shard 0, model.bin and the
# manifest; node 1 has shard 1. The manifest goes up only after shard 1 is
# in S3, so a restore in between finds no complete checkpoint.
mkdir -p "$T/n0/step_00000005" "$T/n1/step_00000005"
head -c 5000 /dev/urandom >"$T/n0/step_00000005/shard_00000_of_00002.bin"
head -c 7000 /dev/urandom >"$T/n1/step_00000005/shard_00001_of_00002.bin"
head -c 3000 /dev/urandom >"$T/n0/step_00000005/model.bin"
cat >"$T/n0/step_00000005/manifest.json" <<'EOF'
{
  "format": "train_gpt checkpoint",
  "files": [
    {"name": "shard_00000_of_00002.bin", "shard": 0, "bytes": 5000, "xxh3": "0123456789abcdef"},
    {"name": "shard_00001_of_00002.bin", "shard": 1, "bytes": 7000, "xxh3": "0123456789abcdef"},
    {"name": "model.bin", "bytes": 3000, "xxh3": "0123456789abcdef"}
  ]
}
EOF
"$SYNC" upload "$T/n0" s3://ckpt/multi >"$T/n0a.log" 2>&1
"$SYNC" restore "$T/R" s3://ckpt/multi >"$T/ra.log" 2>&1
restored_early=$(ls "$T/R" 2>/dev/null | tr -d '\n')
"$SYNC" upload "$T/n1" s3://ckpt/multi >/dev/null 2>&1
"$SYNC" upload "$T/n0" s3://ckpt/multi >"$T/n0b.log" 2>&1
"$SYNC" restore "$T/R" s3://ckpt/multi >/dev/null 2>&1
if grep -q 'waiting for other nodes' "$T/n0a.log" && [ -z "$restored_early" ] &&
   [ "$(s3_tree multi)" = "step_00000005/manifest.json step_00000005/model.bin step_00000005/shard_00000_of_00002.bin step_00000005/shard_00001_of_00002.bin " ] &&
   cmp -s "$T/R/step_00000005/shard_00001_of_00002.bin" "$T/n1/step_00000005/shard_00001_of_00002.bin" &&
   cmp -s "$T/R/step_00000005/manifest.json" "$T/n0/step_00000005/manifest.json"; then
  ok s3_manifest_waits_for_all_nodes
else
  fail s3_manifest_waits_for_all_nodes "early restore: '$restored_early'; S3: $(s3_tree multi)"
fi

# 6. Watch mode next to a training run: SIGTERM makes a last pass.
"$SYNC" watch "$T/W" s3://ckpt/watch 30 >"$T/watch.log" 2>&1 &
watcher=$!
"$TG" "${d1[@]}" --steps 5 --checkpoint-dir "$T/W" >/dev/null 2>&1
kill -TERM "$watcher"
wait "$watcher"
rc=$?
if [ "$rc" -eq 0 ] && [ "$(s3_tree watch)" = "step_00000005/manifest.json step_00000005/model.bin step_00000005/shard_00000_of_00001.bin " ]; then
  ok s3_watch_final_pass
else
  fail s3_watch_final_pass "rc $rc, S3: $(s3_tree watch) $(tail -n 2 "$T/watch.log")"
fi

expect_error_sync() {  # the script's own errors: exit 1, one "s3_sync:" line
  local name=$1 pattern=$2 out rc
  shift 2
  out=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -eq 1 ] && printf '%s\n' "$out" | grep -Eq "^s3_sync: .*$pattern"; then ok "$name"; else fail "$name" "rc $rc: $out"; fi
}
expect_error_sync s3_sync_bad_uri "is not an s3://bucket/prefix URI" "$SYNC" upload "$T/L1" /tmp/nowhere
expect_error_sync s3_sync_bad_mode "unknown mode 'push'" "$SYNC" push "$T/L1" s3://ckpt/run

finish
