"""kjv_eval_check.py: tests/test_kjv_eval.sh's checker of data/kjv/kjv_eval.bin.

  kjv_eval_check.py CORPUS.txt.zst DIR     DIR as prepare_data --corpus CORPUS --out-dir DIR wrote it

Checks, from the text and not from prepare_data's code, that the eval is built as
data/README.md says: 400 examples of 4 completions; each context is one verse of
a validation chapter (every 20th) and its newline; the right completion is the
verse after it in that chapter, with exactly the tokens the validation shard holds
for the two (so the eval's token boundaries are training's); the three others are
distinct verses of validation chapters of other books with as many tokens as the
right one; no completion has over 48 tokens; the right one's place is spread over
0-3. Prints one line per problem (up to 10) and exits 1 if there is any.
"""
import re
import subprocess
import sys
from collections import Counter, defaultdict

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import eval_ref  # noqa: E402  (the eval file's reader)

VAL_EVERY, CHOICES, EXAMPLES, MAX_COMPLETION = 20, 4, 400, 48


def tokenizer_bytes(path):
    data = open(path, "rb").read()
    h = np.frombuffer(data[:1024], dtype=np.uint32)
    vocab, pos, out = int(h[2]), 1024, []
    for _ in range(vocab):
        n = data[pos]
        out.append(data[pos + 1:pos + 1 + n])
        pos += 1 + n
    return out


def main():
    corpus, d = sys.argv[1], sys.argv[2]
    text = subprocess.run(["zstd", "-dcq", corpus], check=True, capture_output=True).stdout.decode("utf-8")
    chapters = text.split("\n\n")
    val = [(i, c.split("\n")) for i, c in enumerate(chapters) if i % VAL_EVERY == VAL_EVERY - 1]
    where = defaultdict(list)  # verse text -> [(chapter, line)] in the validation chapters
    for i, lines in val:
        if not re.fullmatch(r"[1-3A-Z][A-Za-z ]* \d+", lines[0]):
            sys.exit("kjv_eval_check: chapter %d starts with %r, not a heading" % (i, lines[0]))
        for k, line in enumerate(lines[1:], 1):
            where[line].append((i, k))
    book = {i: lines[0].rsplit(" ", 1)[0] for i, lines in val}
    lines_of = dict(val)
    vocab = tokenizer_bytes(d + "/tokenizer.bin")
    decode = lambda ids: b"".join(vocab[t] for t in ids).decode("utf-8")
    shard = np.fromfile(d + "/kjv_val_000.bin", dtype=np.uint16, offset=1024).tobytes()

    problems = []
    examples = eval_ref.read(d + "/kjv_eval.bin")
    if len(examples) != EXAMPLES:
        problems.append("%d examples, not %d" % (len(examples), EXAMPLES))
    for n, (label, ctx, comps) in enumerate(examples):
        bad = lambda why: problems.append("example %d: %s" % (n, why))
        if len(comps) != CHOICES:
            bad("%d completions" % len(comps))
            continue
        ctx_text = decode(ctx)
        if not ctx_text.endswith("\n") or "\n" in ctx_text[:-1]:
            bad("context %r is not one line and its newline" % ctx_text)
            continue
        right = decode(comps[label])
        # Some validation chapter has the context as line k and the right completion as line k + 1.
        homes = [(i, k) for i, k in where.get(ctx_text[:-1], []) if k + 1 < len(lines_of[i]) and lines_of[i][k + 1] == right]
        if not homes:
            bad("%r is not the verse after %r in a validation chapter" % (right, ctx_text[:-1]))
            continue
        seq = np.asarray(ctx + comps[label] + [ctx[-1]], dtype=np.uint16).tobytes()
        at = shard.find(seq)
        while at % 2:
            at = shard.find(seq, at + 1)
        if at < 0:
            bad("its context and right completion are not tokens of the validation shard")
        books = {book[i] for i, _ in homes}
        others = [decode(c) for j, c in enumerate(comps) if j != label]
        if len(set(others)) != CHOICES - 1 or right in others:
            bad("completions repeat: %r" % others)
        for j, c in enumerate(comps):
            if len(c) != len(comps[label]) or len(c) > MAX_COMPLETION:
                bad("completion %d has %d tokens, the right one %d (at most %d)" % (j, len(c), len(comps[label]), MAX_COMPLETION))
            if j == label:
                continue
            t = decode(c)
            from_books = {book[i] for i, _ in where.get(t, [])}
            if not from_books:
                bad("completion %d %r is no verse of a validation chapter" % (j, t))
            elif from_books <= books:
                bad("completion %d %r comes from the context's book %s" % (j, t, sorted(books)))
    places = Counter(label for label, _, _ in examples)
    if examples and any(not 0.15 <= places[j] / len(examples) <= 0.35 for j in range(CHOICES)):
        problems.append("the right completion's places are not spread over 0-3: %s" % dict(places))
    for p in problems[:10]:
        print(p)
    if problems:
        print("%d problems" % len(problems))
        sys.exit(1)
    print("kjv_eval_check: %d examples as documented; places %s" % (len(examples), dict(sorted(places.items()))))


if __name__ == "__main__":
    main()
