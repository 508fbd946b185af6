# baseline_isa.awk OURS -: reads `objdump -d --no-show-raw-insn` output on
# stdin and prints the functions named in the file OURS (one name a line: our
# own code, not the static libraries' runtime-dispatched kernels) that hold
# an instruction beyond baseline x86-64 (SSE2): any VEX or EVEX instruction
# (AVX, AVX2, FMA, AVX-512: a "v" mnemonic, or ymm/zmm/mask registers), BMI,
# LZCNT, POPCNT, MOVBE, CRC32, or SSE3/SSSE3/SSE4. Exits 1 if it found one.
# Used by tests/test_gpu_kit.sh on the GPU kit, built for any x86-64.
FNR == NR { ours[$1] = 1; next }
/^[0-9a-f]+ <.*>:$/ { fn = $2; sub(/^</, "", fn); sub(/>:$/, "", fn); mine = (fn in ours); next }
mine && /^ *[0-9a-f]+:\t/ {
  split($0, p, "\t"); ins = p[2]; split(ins, w, " "); m = w[1]
  bad = ins ~ /%[yz]mm|%k[0-7]/ || (m ~ /^v/ && m !~ /^ver[rw]$/) ||
        m ~ /^(andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|tzcnt|lzcnt|popcnt|movbe|crc32)[bwlq]?$/ ||
        m ~ /^(pshufb|palignr|phadd|phsub|pmaddubsw|pmulhrsw|psign|pabs|ptest|pblendvb|blendv|blendp|round[sp][sd]|pmins[bd]|pmaxs[bd]|pminu[wd]|pmaxu[wd]|pmulld|pmuldq|pinsr[bdq]|pextr[bdq]|insertps|extractps|dpp[sd]|hadd|hsub|movddup|movs[hl]dup|lddqu|addsubp|pcmpeqq|pcmpgtq|packusdw|pmovzx|pmovsx|phminposuw|mpsadbw|pcmp[ei]str)/
  if (bad && !(fn in seen)) { seen[fn] = 1; n++; if (n <= 5) printf "%s: %s\n", fn, ins }
}
END { if (n > 5) printf "... and %d more functions\n", n - 5; exit n > 0 }
