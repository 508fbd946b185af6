#!/usr/bin/env bash
# Installs the Debian packages train_gpt's build, tests and demo need, when any is missing.
# Safe to run repeatedly: it asks dpkg first and calls apt-get only for what is absent.
set -euo pipefail

packages=(
  build-essential         # gcc, g++, make
  libopenblas-dev         # sgemm for the CPU backend
  libzstd-dev zstd        # .bin.zst shards
  libopenmpi-dev openmpi-bin  # multi-rank runs
  libxxhash-dev           # checkpoint checksums
  libpcre2-dev            # data/bpe.c: tiktoken's split patterns (PCRE2 with JIT)
  awscli                  # scripts/s3_sync.sh (and its test, against a local S3 server)
  python3-venv            # tests/test_s3_sync.sh installs moto's S3 server into build/s3venv
  python3-numpy python3-torch  # dev/reference.py parity checks
  python3-matplotlib      # scripts/plot.py
  python3-xxhash          # tests that edit a checkpoint manifest on purpose seal it again (tests/lib.sh)
  bible-kjv-text          # the bundled public-domain corpus
  shellcheck              # lints scripts/
  jq                      # the SageMaker entrypoint reads resourceconfig.json (its tests run here)
  clang libclang-rt-dev libomp-dev  # fuzz/: libFuzzer targets and the ASan/UBSan train_gpt
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_deps: done"
