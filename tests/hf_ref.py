"""hf_ref.py: transformers' side of tests/test_hf.sh (a helper, not a test).

  hf_ref.py logits DIR TOKENS OURS        load DIR with GPT2LMHeadModel or
      LlamaForCausalLM (FP32), run it over TOKENS (int32 x[0..T]) and print
      "maxdiff D scale S loss L" against OURS (hf_logits' output: T x V float32
      logits, then the mean loss)
  hf_ref.py diff OURS_A OURS_B V          print the largest difference of two
      hf_logits outputs of vocabulary V
  hf_ref.py save DIR ARCH SHARD           a random tiny model (odd shapes, GQA for
      Llama) written by save_pretrained; SHARD "none" or a max_shard_size
  hf_ref.py greedy DIR "IDS" N            transformers' greedy continuation
  hf_ref.py hub SRC DST                   GPT-2 folder SRC as the Hub's gpt2 stores it
  hf_ref.py tokens PATH T V SEED          T + 1 random int32 ids below V
  hf_ref.py shard PATH TOKENS             the same ids as an llm.c token shard
"""
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

# torch and transformers take seconds to import: only the commands that need them do.
if sys.argv[1:2] != ["diff"]:
    import torch
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


def load(d):
    mt = json.load(open(os.path.join(d, "config.json")))["model_type"]
    cls = GPT2LMHeadModel if mt == "gpt2" else LlamaForCausalLM
    return cls.from_pretrained(d, torch_dtype=torch.float32).eval()


def read_ours(path, V):
    a = np.fromfile(path, dtype=np.float32)
    return a[:-1].reshape(-1, V), float(a[-1])


def main():
    cmd = sys.argv[1]
    if cmd == "logits":
        d, tok_path, ours_path = sys.argv[2:5]
        x = torch.from_numpy(np.fromfile(tok_path, dtype=np.int32).astype(np.int64))
        m = load(d)
        with torch.no_grad():
            logits = m(x[None, :-1]).logits[0].double()
        loss = torch.nn.functional.cross_entropy(logits, x[1:]).item()
        ours, our_loss = read_ours(ours_path, logits.shape[1])
        diff = (torch.from_numpy(ours).double() - logits).abs().max().item()
        print("maxdiff %.3e scale %.3f loss %.6f ours %.6f" % (diff, logits.abs().max().item(), loss, our_loss))
    elif cmd == "diff":
        V = int(sys.argv[4])
        a, _ = read_ours(sys.argv[2], V)
        b, _ = read_ours(sys.argv[3], V)
        print("maxdiff %.3e scale %.3f" % (np.abs(a.astype(np.float64) - b).max(), np.abs(b).max()))
    elif cmd == "save":
        d, arch, shard = sys.argv[2:5]
        torch.manual_seed(7)
        if arch == "gpt2":
            cfg = GPT2Config(n_embd=96, n_head=3, n_layer=2, n_positions=64, vocab_size=300,
                             initializer_range=0.2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
            m = GPT2LMHeadModel(cfg)
        else:
            cfg = LlamaConfig(hidden_size=96, intermediate_size=200, num_attention_heads=6, num_key_value_heads=2,
                              num_hidden_layers=2, vocab_size=300, max_position_embeddings=64, rope_theta=10000.0,
                              tie_word_embeddings=(arch == "llama_tied"), initializer_range=0.2,
                              rms_norm_eps=1e-5 if arch == "llama_tied" else 1e-6)
            m = LlamaForCausalLM(cfg)
            with torch.no_grad():  # norms away from 1, so a swapped norm would show
                for n, p in m.named_parameters():
                    if "norm" in n:
                        p.uniform_(0.5, 1.5)
        # Stored in each dtype the reader takes: GPT-2 in F16, the sharded tied Llama in BF16.
        if arch == "gpt2":
            m = m.half()
        elif arch == "llama_tied":
            m = m.to(torch.bfloat16)
        kw = {} if shard == "none" else {"max_shard_size": shard}
        m.save_pretrained(d, safe_serialization=True, **kw)
        print("saved %s (%d files)" % (d, len(os.listdir(d))))
    elif cmd == "greedy":  # greedy continuation of the ids in argv[3] by argv[4] tokens
        d, prompt, n = sys.argv[2], [int(t) for t in sys.argv[3].split()], int(sys.argv[4])
        out = load(d).generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, pad_token_id=0)
        print(" ".join(str(t) for t in out[0].tolist()))
    elif cmd == "hub":  # GPT-2 as the Hub's gpt2 stores it: no "transformer." prefix, attn.bias masks
        from safetensors.torch import load_file, save_file
        src, dst = sys.argv[2], sys.argv[3]
        w = {k.replace("transformer.", "", 1): v for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
        n = json.load(open(os.path.join(src, "config.json")))["n_positions"]
        for k in [k for k in w if k.endswith("attn.c_attn.weight")]:
            w[k.replace("c_attn.weight", "bias")] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        os.makedirs(dst, exist_ok=True)
        save_file(w, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
        shutil.copy(os.path.join(src, "config.json"), dst)
    elif cmd == "tokens":
        path, T, V, seed = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        np.random.default_rng(seed).integers(0, V, T + 1).astype(np.int32).tofile(path)
    elif cmd == "shard":
        path, tok_path = sys.argv[2:4]
        toks = np.fromfile(tok_path, dtype=np.int32)
        h = np.zeros(256, dtype=np.int32)
        h[0], h[1], h[2] = 20240520, 1, len(toks)
        with open(path, "wb") as f:
            f.write(h.tobytes())
            f.write(toks.astype(np.uint16).tobytes())
    else:
        sys.exit("hf_ref.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
