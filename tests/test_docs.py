#!/usr/bin/python3
"""test_docs.py: the documentation's shape holds. README.md is a front door of
at most 350 lines; every folder has a README.md saying what it owns and what
it must never include; every README.md is reachable by links from README.md;
every relative link in a README.md names a file that exists and, with
#anchor, a heading that exists there; and the layering the READMEs state
holds in the code: kernels/ and data/ include nothing from llm/ but llm/util/."""
import os
import re
import subprocess
import sys

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pycheck import fail, finish, ok  # noqa: E402
FOLDERS = ["llm", "llm/model", "llm/arch", "llm/hf", "llm/parallel", "llm/checkpoint", "llm/fp8", "llm/plan", "llm/report", "llm/platform",
           "llm/util", "kernels", "kernels/cpu", "kernels/cuda", "data", "dev", "tests", "tests/cuda_sim",
           "scripts", "scripts/sagemaker", "scripts/baselines"]


def check(name, problems):
    ok(name) if not problems else fail(name, "; ".join(problems[:5]) + (" ..." if len(problems) > 5 else ""))


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(path):
    out, fence = set(), False
    for line in open(path):
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"^#+ ", line):
            out.add(slug(re.sub(r"^#+ ", "", line)))
    return out


def links(path):
    text = re.sub(r"```.*?```", "", open(path).read(), flags=re.S)
    return [m for m in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+://|mailto:", m)]


def all_readmes():
    """Every README.md of the tree (git's list; outside git, a walk that skips build outputs)."""
    r = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "README.md", "*/README.md"],
                       capture_output=True, text=True)
    if r.returncode == 0 and r.stdout.strip():
        return r.stdout.split()
    return sorted(os.path.relpath(os.path.join(root, "README.md")) for root, dirs, files in os.walk(".")
                  if "README.md" in files and not re.search(r"(^|/)(\.git|build|data/kjv)(/|$)", root))


readmes = all_readmes()

# 1. The front door stays a front door.
n = sum(1 for _ in open("README.md"))
check("readme_at_most_350_lines", [] if n <= 350 else [f"README.md has {n} lines"])

# 2. Every folder says what it owns and what it must never include.
problems = []
for d in FOLDERS:
    p = os.path.join(d, "README.md")
    if not os.path.exists(p):
        problems.append(f"{p} is missing")
    elif not re.search(r"\b(owns|Owns)\b", open(p).read()) or not re.search(r"\b(never|Never|nothing|Nothing)\b",
                                                                             open(p).read()):
        problems.append(f"{p} does not say what it owns and what it never includes")
check("every_folder_has_a_readme", problems)

# 3. Links resolve: the file, and the heading an #anchor names.
problems = []
graph = {}
for p in readmes:
    graph[p] = []
    for link in links(p):
        target, _, anchor = link.partition("#")
        path = os.path.normpath(os.path.join(os.path.dirname(p), target)) if target else p
        if not os.path.exists(path):
            problems.append(f"{p}: {link}: no such file")
            continue
        if anchor and (not path.endswith(".md") or anchor not in headings(path)):
            problems.append(f"{p}: {link}: no heading #{anchor} in {path}")
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "README.md")):
            path = os.path.join(path, "README.md")
        graph[p].append(path)
check("readme_links_resolve", problems)

# 4. Every README.md can be reached from the front door.
seen, todo = {"README.md"}, ["README.md"]
while todo:
    for q in graph.get(todo.pop(), []):
        if q.endswith("README.md") and q not in seen:
            seen.add(q)
            todo.append(q)
check("every_readme_reachable_from_the_front_door", [f"{p} is not linked from README.md (directly or not)"
                                                      for p in readmes if p not in seen])

# 5. Lower layers never include higher ones.
problems = []
for d in ["kernels", "data"]:
    for root, _, files in os.walk(d):
        for f in files:
            if re.search(r"\.(c|h|cu|cuh)$", f):
                path = os.path.join(root, f)
                for i, line in enumerate(open(path, errors="replace"), 1):
                    m = re.match(r'\s*#\s*include\s+"(llm/[^"]+)"', line)
                    if m and not m.group(1).startswith("llm/util/"):
                        problems.append(f"{path}:{i} includes {m.group(1)}")
check("kernels_and_data_include_only_llm_util", problems)

# 6. The model's layers (llm/README.md): llm/fp8/ knows no model, the core
# (llm/model/) knows no architecture, an architecture sees the core only
# through block.h. No circle between the three.
ALLOWED = {
    "llm/fp8": lambda inc: not inc.startswith(("llm/model/", "llm/arch/")),
    "llm/model": lambda inc: not inc.startswith("llm/arch/"),
    "llm/arch": lambda inc: inc in ("llm/model/block.h", "llm/model/config.h", "llm/arch/arch.h")
                            or not inc.startswith("llm/"),
}
problems = []
for d, allowed in ALLOWED.items():
    for f in sorted(os.listdir(d)):
        if re.search(r"\.(c|h|cu|cuh)$", f):
            path = os.path.join(d, f)
            for i, line in enumerate(open(path, errors="replace"), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if m and not allowed(m.group(1)):
                    problems.append(f"{path}:{i} includes {m.group(1)}")
check("model_core_fp8_and_architectures_layered", problems)

finish()
