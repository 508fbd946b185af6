#!/usr/bin/env python3
"""check_readme_split.py: after README.md's long sections moved next to the code
they describe, check that every paragraph of the old README exists in exactly
one README.md of the tree (nothing lost, nothing duplicated), and that no
paragraph of the new READMEs appears twice.

    dev/check_readme_split.py REV        # REV: a commit whose README.md is the old one

A unit is a paragraph (text between blank lines; a fenced code block is one
unit), a list item or a table row. Units are compared after collapsing
whitespace, dropping heading marks (a section may change level when it moves)
and link targets (a link to "#x" becomes one to "llm/report/README.md#x").
The few sentences that had to change with the move (a "below" that is now in
another file) are listed in REWRITES, and paragraphs deliberately rewritten in
REWRITTEN, each with the reason; anything else that differs is reported.
Exit status 0 when every old unit is found exactly once.
"""
import re
import subprocess
import sys

# (old text, new text): edits the move made inside a moved paragraph.
REWRITES = [
    ("which `launch.py` reads from this README so", "which `launch.py` reads from that file so"),
    ("each bad input above", "each bad input of [Errors]"),
    ("the table above against", "the planner's table ([llm/plan/README.md]) against"),
    ("its metric definitions (README's)", "its metric definitions (llm/report/README.md's)"),
    ('(see "CUDA kernels on the CPU" below)', "(see [CUDA kernels on the CPU])"),
    ("(`bench_gpu` below)", "(`bench_gpu`: [the CUDA backend's performance])"),
    ("vocabulary) to about 4.6, and", "vocabulary) to about 4.3, and"),  # measured again: scripts/baselines/demo.sh
    ("- `config` (first line): every flag", "- `config` (first line): `version` (the build's `git describe`), every flag"),
]
# Old paragraphs replaced by new text, by their first words: why, and where the content is now.
REWRITTEN = {
    "```\ntrain.cu main(): config -> backend": "the file tree of the flat llm/: README.md's tree now lists the "
    "folders, and each folder's README.md lists its files",
}


def units(text):
    out, para, fence = [], [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        if not fence and not line.strip() and not line.startswith("```"):
            if para:
                out.extend(split_para(para))
            para = []
        else:
            para.append(line)
    if para:
        out.extend(split_para(para))
    return [u for u in (normalize(u) for u in out) if u]


def split_para(lines):
    if lines[0].startswith("```"):
        return ["\n".join(lines)]
    items, cur = [], []
    for line in lines:
        if re.match(r"^(- |\d+\. |\|)", line) and cur:
            items.append("\n".join(cur))
            cur = []
        cur.append(line)
    items.append("\n".join(cur))
    return items


def normalize(u):
    if u.startswith("```"):
        return "\n".join(re.sub(r"\s+", " ", l).strip() for l in u.split("\n"))
    u = re.sub(r"^#+ ", "", u)
    u = re.sub(r"\]\([^)]*\)", "]", u)
    return re.sub(r"\s+", " ", u).strip()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    old = subprocess.run(["git", "show", sys.argv[1] + ":README.md"], capture_output=True, text=True, check=True).stdout
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "README.md", "*/README.md"],
                           capture_output=True, text=True, check=True).stdout.split()
    where = {}
    for f in files:
        for u in units(open(f).read()):
            where.setdefault(u, []).append(f)
    bad = 0
    for u in units(old):
        if re.fullmatch(r"[|: -]+", u):
            continue  # a table's separator row
        want = u
        for a, b in REWRITES:
            want = want.replace(normalize(a), normalize(b))
        found = where.get(want, [])
        reason = next((r for k, r in REWRITTEN.items() if u.startswith(normalize(k))), None)
        if reason and not found:
            print(f"rewritten: {u[:70]!r}: {reason}")
        elif len(found) != 1:
            bad += 1
            print(f"{'missing' if not found else 'in ' + ', '.join(found)}: {u[:100]!r}")
    for u, fs in where.items():
        if len(fs) > 1 and len(u) > 40 and not re.fullmatch(r"[|: -]+", u):
            bad += 1
            print(f"duplicated in {', '.join(fs)}: {u[:100]!r}")
    print(f"{len(units(old))} units of the old README checked in {len(files)} files: "
          f"{'ok' if bad == 0 else str(bad) + ' problems'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
