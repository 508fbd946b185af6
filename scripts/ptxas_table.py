#!/usr/bin/env python3
"""ptxas_table.py FILE.ptxas...: the register report of the CUDA kernels, from
the `nvcc -Xptxas -v` output the build keeps beside each object (the Makefile's
OBJ.o.ptxas), as one tab-separated table on stdout:

  source  arch  kernel  registers  barriers  static_smem  stack  spill_stores  spill_loads

one row per kernel and architecture (kernel names demangled with c++filt where
it exists). `make gpu-kit` ships it as ptxas.tsv, so that the GPU check reads
registers, shared memory and spills of the kit's own objects without compiling
anything on the GPU machine. Standard library only.
"""
import os
import re
import shutil
import subprocess
import sys

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")
COLUMNS = ["source", "arch", "kernel", "registers", "barriers", "static_smem", "stack", "spill_stores", "spill_loads"]


def parse(path):
    """Rows of one report: an entry line opens a kernel, the frame and Used lines fill it."""
    rows, cur = [], None
    source = os.path.basename(path).replace(".o.ptxas", ".cu")
    with open(path, errors="replace") as f:
        for line in f:
            m = ENTRY.search(line)
            if m:
                cur = {"source": source, "arch": m.group(2), "kernel": m.group(1), "registers": 0, "barriers": 0,
                       "static_smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0}
                rows.append(cur)
                continue
            if cur is None:
                continue
            m = FRAME.search(line)
            if m:
                cur["stack"], cur["spill_stores"], cur["spill_loads"] = (int(g) for g in m.groups())
            m = USED.search(line)
            if m:
                cur["registers"] = int(m.group(1))
                cur["barriers"] = int(m.group(2) or 0)
                cur["static_smem"] = int(m.group(3) or 0)
    return rows


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return names
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return out if len(out) == len(names) else names


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: ptxas_table.py FILE.ptxas...")
    rows = [r for path in sorted(sys.argv[1:]) for r in parse(path)]
    if not rows:
        sys.exit("ptxas_table.py: no kernel in " + " ".join(sys.argv[1:]) + " (built without -Xptxas -v?)")
    for r, name in zip(rows, demangle([r["kernel"] for r in rows])):
        r["kernel"] = name
    print("\t".join(COLUMNS))
    for r in rows:
        print("\t".join(str(r[c]) for c in COLUMNS))


if __name__ == "__main__":
    main()
