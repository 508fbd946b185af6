"""eval_ref.py: the reference side of tests/test_eval.sh.

  eval_ref.py write OUT VOCAB SEED [COUNT]   a synthetic eval file in llm.c's format (random tokens,
                                             2-4 completions, one row longer than the tests' --seq-len;
                                             37 examples, or the first COUNT)
  eval_ref.py score MODEL EVAL T             PyTorch (float64) scores of the eval file with llm.c weights:
                                             prints "acc ACC acc_norm ACC_NORM loss LOSS examples N"
  eval_ref.py corrupt IN OUT KIND            a malformed copy: magic, truncated, label, token
Rows longer than T + 1 keep their last T + 1 tokens, as train_gpt does.
"""
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "dev"))
import reference  # noqa: E402  (dev/reference.py: the GPT-2 forward)


def write(path, examples):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240522, 1, len(examples)]
    stream = []
    for i, (label, ctx, comps) in enumerate(examples):
        s = [65535, 0, i, label, len(comps), len(ctx)] + list(ctx)
        for c in comps:
            s += [len(c)] + list(c)
        s[1] = 2 * len(s)
        header[3] = max(header[3], s[1])
        stream += s
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(stream, dtype=np.uint16).tobytes())


def read(path):
    data = open(path, "rb").read()
    h = np.frombuffer(data[:1024], dtype=np.int32)
    s = np.frombuffer(data[1024:], dtype=np.uint16)
    examples, pos = [], 0
    for _ in range(h[2]):
        n = s[pos + 1] // 2
        e = s[pos:pos + n]
        label, nc, ctx_len = int(e[3]), int(e[4]), int(e[5])
        ctx = [int(t) for t in e[6:6 + ctx_len]]
        at, comps = 6 + ctx_len, []
        for _ in range(nc):
            L = int(e[at])
            comps.append([int(t) for t in e[at + 1:at + 1 + L]])
            at += 1 + L
        examples.append((label, ctx, comps))
        pos += n
    return examples


def score(model, eval_path, T):
    cfg, p = reference.load_model(model, torch.float64)
    right = right_norm = 0
    loss_sum = 0.0
    examples = read(eval_path)
    with torch.no_grad():
        for label, ctx, comps in examples:
            sums, means = [], []
            for c in comps:
                seq = (ctx + c)[-(T + 1):]
                x = torch.tensor([seq[:-1]])
                y = torch.tensor(seq[1:])
                logits = reference.forward(cfg, p, x)[0, :, :cfg["V"]]
                losses = F.cross_entropy(logits, y, reduction="none")[-len(c):]
                sums.append(float(losses.sum()))
                means.append(float(losses.mean()))
            right += int(np.argmin(sums)) == label
            right_norm += int(np.argmin(means)) == label
            loss_sum += means[label]
    n = len(examples)
    print("acc %.6f acc_norm %.6f loss %.6f examples %d" % (right / n, right_norm / n, loss_sum / n, n))


def main():
    cmd = sys.argv[1]
    if cmd == "write":
        out, vocab, seed = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        count = int(sys.argv[5]) if len(sys.argv) > 5 else 37  # the first COUNT of the 37
        rng = np.random.default_rng(seed)
        examples = []
        for i in range(37):
            nc = int(rng.integers(2, 5))
            ctx_len = 60 if i == 5 else int(rng.integers(1, 25))  # example 5: longer than T + 1
            ctx = rng.integers(0, vocab, ctx_len).tolist()
            comps = [rng.integers(0, vocab, int(rng.integers(1, 9))).tolist() for _ in range(nc)]
            examples.append((int(rng.integers(0, nc)), ctx, comps))
        write(out, examples[:count])
    elif cmd == "score":
        score(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "corrupt":
        src, out, kind = sys.argv[2:5]
        data = bytearray(open(src, "rb").read())
        if kind == "magic":
            data[0:4] = struct.pack("<i", 20240520)
        elif kind == "truncated":
            data = data[:-7]
        elif kind in ("label", "token"):
            ex = read(src)
            label, ctx, comps = ex[2]
            if kind == "label":
                ex[2] = (len(comps), ctx, comps)
            else:
                ex[2] = (label, ctx[:-1] + [60000], comps)
            write(out, ex)
            return
        open(out, "wb").write(bytes(data))
    else:
        sys.exit("eval_ref.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
