"""prepare_data_check.py OUT_DIR RANKS PATTERN FIELD INPUT...: checks dev/prepare_data's output
against tiktoken (tests/test_prepare_data.sh). The inputs are expanded as prepare_data does (files,
folders sorted by path); every document must appear, in order, in exactly one split, as eot
followed by tiktoken's encode_ordinary tokens; shard headers, sizes, versions and the manifest's
counts must agree. Prints "ok" or the first problem (exit 1)."""
import array
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from tiktoken_ref import encoding  # noqa: E402


def corpus_files(inputs):
    out = []
    for p in inputs:
        if os.path.isdir(p):
            found = []
            for root, dirs, files in os.walk(p):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                for f in files:
                    if not f.startswith(".") and f.endswith((".txt", ".txt.zst", ".jsonl", ".jsonl.zst")):
                        found.append(os.path.join(root, f))
            out += sorted(found, key=lambda s: s.encode())
        else:
            out.append(p)
    return out


def documents(path, field):
    raw = open(path, "rb").read()
    if path.endswith(".zst"):
        import subprocess
        raw = subprocess.run(["zstd", "-dcq", path], stdout=subprocess.PIPE, check=True).stdout
    if ".jsonl" not in path:
        return [raw.decode("utf-8", "replace")] if raw else []
    return [json.loads(line)[field] for line in raw.split(b"\n") if line.strip(b" \t\r")]


def read_shard(path):
    data = open(path, "rb").read()
    h = array.array("i", data[:1024])
    if h[0] != 20240520:
        raise SystemExit("%s: bad magic" % path)
    count = h[2] if h[2] >= 0 else h[3] | (h[4] << 32)
    toks = array.array("H" if h[1] == 1 else "I", data[1024:])
    if len(toks) != count:
        raise SystemExit("%s: header says %d tokens, body has %d" % (path, count, len(toks)))
    return h[1], list(toks)


def split_docs(tokens, eot):
    docs, cur = [], None
    for t in tokens:
        if t == eot:
            if cur is not None:
                docs.append(cur)
            cur = []
        elif cur is None:
            raise SystemExit("the tokens do not start with eot")
        else:
            cur.append(t)
    if cur is not None:
        docs.append(cur)
    return docs


def main():
    out, ranks, pattern, field = sys.argv[1:5]
    enc = encoding(ranks, pattern)
    m = json.load(open(os.path.join(out, "manifest.json")))
    expected = [enc.encode_ordinary(d) for f in corpus_files(sys.argv[5:]) for d in documents(f, field)]
    want_version = 1 if enc.n_vocab <= 65536 else 2
    if m["shard_version"] != want_version:
        raise SystemExit("manifest shard_version %d, expected %d" % (m["shard_version"], want_version))
    got = {}
    for split in ("train", "val"):
        shards = [s for s in m["shards"] if s["split"] == split]
        tokens = []
        for i, s in enumerate(shards):
            version, t = read_shard(os.path.join(out, s["file"]))
            if version != want_version or len(t) != s["tokens"]:
                raise SystemExit("%s: version %d, %d tokens (manifest: %d)" % (s["file"], version, len(t), s["tokens"]))
            if i + 1 < len(shards) and len(t) != m["shard_tokens"]:
                raise SystemExit("%s is not full (%d tokens)" % (s["file"], len(t)))
            tokens += t
        if len(tokens) != m["splits"][split]["tokens"]:
            raise SystemExit("%s: %d tokens, manifest says %d" % (split, len(tokens), m["splits"][split]["tokens"]))
        got[split] = split_docs(tokens, enc.eot_token)
        if len(got[split]) != m["splits"][split]["documents"]:
            raise SystemExit("%s: %d documents, manifest says %d" % (split, len(got[split]), m["splits"][split]["documents"]))
    # Merge the splits back in input order: each expected document is the next of one of them.
    i = {"train": 0, "val": 0}
    for k, e in enumerate(expected):
        for split in ("train", "val"):
            if i[split] < len(got[split]) and got[split][i[split]] == e:
                i[split] += 1
                break
        else:
            raise SystemExit("document %d (%d tokens) is in neither split where it should be" % (k, len(e)))
    if i["train"] != len(got["train"]) or i["val"] != len(got["val"]):
        raise SystemExit("the shards hold documents the inputs do not have")
    if sum(x["documents"] for x in m["inputs"]) != len(expected):
        raise SystemExit("manifest inputs count %d documents, expected %d" % (sum(x["documents"] for x in m["inputs"]), len(expected)))
    print("ok %d documents (train %d, val %d)" % (len(expected), len(got["train"]), len(got["val"])))


if __name__ == "__main__":
    main()
