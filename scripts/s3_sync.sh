#!/usr/bin/env bash
# s3_sync.sh: keeps train_gpt's checkpoints in S3 on clusters without
# SageMaker's checkpoint sync, with the same rule train_gpt uses locally: a
# checkpoint is complete when its manifest.json is present, so the manifest
# goes up last, and only once every file it lists is in S3 with its size.
#
#   s3_sync.sh restore LOCAL_DIR S3_URI [COUNT]   before a run: download the COUNT (default 2)
#                                                 newest checkpoints complete in S3 into LOCAL_DIR
#   s3_sync.sh upload  LOCAL_DIR S3_URI           one pass: upload what is new, delete from S3 the
#                                                 checkpoints pruned locally
#   s3_sync.sh watch   LOCAL_DIR S3_URI [SECONDS] upload every SECONDS (default 60); on SIGTERM or
#                                                 SIGINT one last pass, then exit
#
# Run one uploader per node, on that node's LOCAL_DIR (train_gpt's
# --checkpoint-dir), all with the same S3_URI (s3://bucket/prefix, one
# prefix per training lineage). What each pass uploads from a step_N/ directory:
#   - with a manifest: every file, then the manifest once all listed files are in S3;
#   - without a manifest, holding model.bin or shard 0 (rank 0 writes there): nothing
#     yet: the save is in progress or was interrupted;
#   - without a manifest and without rank 0's files (a node of other ranks): its
#     files, as they appear; rank 0's node uploads the manifest after them.
# Temporary files (NAME.tmp.PID) are never uploaded. Deleting: a step
# directory in S3 older than the newest complete local checkpoint and absent
# locally was pruned by train_gpt: its manifest is deleted first, then the rest.
#
# Needs the AWS CLI (`aws`); S3_ENDPOINT_URL, if set, is passed as
# --endpoint-url (an S3-compatible store, or the tests' local server).
set -euo pipefail

die() { echo "s3_sync: $*" >&2; exit 1; }
log() { echo "s3_sync: $*"; }

aws_s3() {
  if [ -n "${S3_ENDPOINT_URL:-}" ]; then aws --endpoint-url "$S3_ENDPOINT_URL" s3 "$@"; else aws s3 "$@"; fi
}

# "size key" for every object under the prefix, keys relative to it
# (step_00000010/model.bin): one listing per pass, since every call of the
# CLI costs about a second.
s3_listing() {
  local uri=$1 base=${1#s3://*/}
  [ "$base" = "$1" ] && base=""  # a bare bucket
  aws_s3 ls --recursive "$uri/" 2>/dev/null | awk -v base="${base:+$base/}" \
    'NF >= 4 { key = $4; if (substr(key, 1, length(base)) == base) print $3, substr(key, length(base) + 1) }' || true
}
local_steps() { find "$1" -mindepth 1 -maxdepth 1 -type d -name 'step_*' -printf '%f\n' 2>/dev/null | grep -E '^step_[0-9]+$' | sort || true; }
# The step_N directories present in a listing.
listed_steps() { awk '{ split($2, p, "/"); if (p[1] ~ /^step_[0-9]+$/) print p[1] }' <<<"$1" | sort -u; }

# "bytes name" for every file a manifest lists (train_gpt writes one file per line).
manifest_files() {
  sed -nE 's/^ *\{"name": "([^"]+)"(, "shard": [0-9]+)?, "bytes": ([0-9]+), "xxh3": "[0-9a-f]{16}"\}.*/\3 \1/p' "$1"
}

# Whether every file the manifest lists is in the listing with its size.
all_listed_present() {
  local manifest=$1 step=$2 listing=$3 bytes name n=0
  while read -r bytes name; do
    grep -qxF "$bytes $step/$name" <<<"$listing" || return 1
    n=$((n + 1))
  done < <(manifest_files "$manifest")
  [ "$n" -gt 0 ]
}

# Whether rank 0 writes into this directory and its manifest is not there
# yet: the save is in progress or was interrupted.
rank0_incomplete() {
  [ ! -f "$1/manifest.json" ] && { [ -f "$1/model.bin" ] || compgen -G "$1/shard_00000_of_*.bin" >/dev/null; }
}

# One pass. The CLI costs about a second per call, so a pass makes at most
# five: a listing, one sync for the data files, one for the manifests, and
# two for deletions (manifests first).
upload() {
  local local_dir=$1 uri=$2 step newest="" listing f name size
  local data=() manifests=() ready="" pruned=()
  [ -d "$local_dir" ] || return 0
  listing=$(s3_listing "$uri")
  for step in $(local_steps "$local_dir"); do
    rank0_incomplete "$local_dir/$step" && continue
    for f in "$local_dir/$step"/*; do
      [ -f "$f" ] || continue
      name=${f##*/}
      case $name in manifest.json | *.tmp.*) continue ;; esac
      size=$(stat -c %s "$f")
      grep -qxF "$size $step/$name" <<<"$listing" && continue
      data+=(--include "$step/$name")
      ready+="$size $step/$name"$'\n'  # in S3 once the sync below succeeds
    done
  done
  if [ ${#data[@]} -gt 0 ]; then
    aws_s3 sync --only-show-errors --size-only --exclude '*' "${data[@]}" "$local_dir" "$uri"
    listing+=$'\n'"$ready"
  fi
  for step in $(local_steps "$local_dir"); do
    [ -f "$local_dir/$step/manifest.json" ] || continue
    newest=$step
    size=$(stat -c %s "$local_dir/$step/manifest.json")
    grep -qxF "$size $step/manifest.json" <<<"$listing" && continue
    if all_listed_present "$local_dir/$step/manifest.json" "$step" "$listing"; then
      manifests+=(--include "$step/manifest.json")
      log "uploading $step"
    else
      log "$step: waiting for other nodes' files before uploading its manifest"
    fi
  done
  if [ ${#manifests[@]} -gt 0 ]; then
    aws_s3 sync --only-show-errors --size-only --exclude '*' "${manifests[@]}" "$local_dir" "$uri"
  fi
  [ -n "$newest" ] || return 0
  # Pruned locally: older than the newest complete checkpoint and gone from the disk.
  for step in $(listed_steps "$listing"); do
    [[ "$step" < "$newest" ]] && [ ! -d "$local_dir/$step" ] && pruned+=("$step")
  done
  [ ${#pruned[@]} -gt 0 ] || return 0
  local rm_manifests=() rm_all=()
  for step in "${pruned[@]}"; do
    rm_manifests+=(--include "$step/manifest.json")
    rm_all+=(--include "$step/*")
  done
  aws_s3 rm --only-show-errors --recursive --exclude '*' "${rm_manifests[@]}" "$uri/"
  aws_s3 rm --only-show-errors --recursive --exclude '*' "${rm_all[@]}" "$uri/"
  log "deleted ${pruned[*]} from S3 (pruned locally)"
}

restore() {
  local local_dir=$1 uri=$2 count=$3 step listing tmp n=0 wanted=() chosen=()
  mkdir -p "$local_dir"
  tmp=$(mktemp -d)
  listing=$(s3_listing "$uri")
  # The manifests of the newest steps (one call), then the data (one call).
  for step in $(listed_steps "$listing" | sort -r); do
    grep -qE " $step/manifest\.json$" <<<"$listing" && wanted+=(--include "$step/manifest.json")
  done
  [ ${#wanted[@]} -gt 0 ] && aws_s3 cp --only-show-errors --recursive --exclude '*' "${wanted[@]}" "$uri/" "$tmp/"
  for step in $(listed_steps "$listing" | sort -r); do
    [ "$n" -lt "$count" ] || break
    [ -f "$tmp/$step/manifest.json" ] || continue
    if ! all_listed_present "$tmp/$step/manifest.json" "$step" "$listing"; then
      log "$step: its manifest lists files missing from S3; skipped"
      continue
    fi
    n=$((n + 1))
    if [ -f "$local_dir/$step/manifest.json" ] && cmp -s "$tmp/$step/manifest.json" "$local_dir/$step/manifest.json"; then
      log "$step is already here"
      continue
    fi
    rm -f "$local_dir/$step/manifest.json"
    chosen+=("$step")
  done
  local data=() bytes name
  for step in "${chosen[@]}"; do
    while read -r bytes name; do data+=(--include "$step/$name"); done < <(manifest_files "$tmp/$step/manifest.json")
  done
  # The data files first, the manifests last: an interrupted restore leaves
  # directories train_gpt treats as incomplete.
  [ ${#data[@]} -gt 0 ] && aws_s3 cp --only-show-errors --recursive --exclude '*' "${data[@]}" "$uri/" "$local_dir/"
  for step in "${chosen[@]}"; do
    cp "$tmp/$step/manifest.json" "$local_dir/$step/manifest.json.tmp.$$"
    mv "$local_dir/$step/manifest.json.tmp.$$" "$local_dir/$step/manifest.json"
    log "restored $step"
  done
  rm -rf "$tmp"
  [ "$n" -gt 0 ] || log "no complete checkpoint in $uri: the run starts fresh"
}

watch() {
  local local_dir=$1 uri=$2 seconds=$3 stop=0
  trap 'stop=1' TERM INT
  while [ "$stop" -eq 0 ]; do
    upload "$local_dir" "$uri" || log "upload pass failed; retrying in ${seconds}s"
    sleep "$seconds" & wait $! || true
  done
  upload "$local_dir" "$uri"
}

[ $# -ge 3 ] || die "usage: s3_sync.sh restore|upload|watch LOCAL_DIR S3_URI [COUNT|SECONDS]"
command -v aws >/dev/null || die "the AWS CLI (aws) is not installed (scripts/install_deps.sh installs it)"
mode=$1
local_dir=${2%/}
uri=${3%/}
[[ "$uri" == s3://?* ]] || die "'$3' is not an s3://bucket/prefix URI"
case $mode in
  restore) restore "$local_dir" "$uri" "${4:-2}" ;;
  upload) upload "$local_dir" "$uri" ;;
  watch) watch "$local_dir" "$uri" "${4:-60}" ;;
  *) die "unknown mode '$mode' (restore, upload or watch)" ;;
esac
