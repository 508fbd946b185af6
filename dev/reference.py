#!/usr/bin/env python3
"""PyTorch reference for train_gpt's GPT-2 and Llama: the same models, written plainly.

Given weights in llm.c's model format (version 3, float32) and a batch, it
writes what train_gpt must reproduce: the logits and loss of one forward, the
gradient of every parameter, and the loss, gradient norm and parameters
through N AdamW steps on that batch with gradient clipping and train_gpt's
learning-rate schedule (linear warmup, cosine decay to a floor).

Input batch file: int32 B, int32 T, then B*T input ids and B*T target ids (int32).

Output file (little-endian):
  int32 header[256]: [0] 20241130 magic, [1] 1 version, [2] B, [3] T, [4] V,
                     [5] Vp, [6] P (parameter count in llm.c's order), [7] steps
  float32 logits[B*T*V]       real vocabulary columns only
  float32 loss
  float32 grads[P]            llm.c order (padded vocabulary rows included)
  float32 losses[steps]       loss of the forward before each update
  float32 norms[steps]        gradient norm before clipping, each step
  float32 params[P]           after the last update

Computation is in float64 by default (--dtype float32 to compare like with like).

--cuda-bench: same-machine baselines for scripts/gpu_check.sh instead (no files):
on the GPU in BF16, torch.matmul at the GEMM shapes of dev/bench_gpu.c,
F.scaled_dot_product_attention (causal) at its attention shapes, and a GPT-2
124M training step (B=16, T=1024: forward, backward, fused AdamW) eager and
under torch.compile. Each line reads like bench_gpu's, prefixed "torch ", so
the two can be joined by op and shape:
  torch matmul fwd qkv       16384 x 768 -> 2304      0.123 ms  500.0 TFLOP/s
  torch model gpt2-124M eager L=12 C=768 B=16 T=1024  80.0 ms/step 204800 tok/s

--cuda-bench --headline [--quick]: only the GPT-2 124M step, eager (the GPU
check's first rows, beside bench_gpu --headline).

--cuda-bench --llama8b [--quick]: only a Llama-3-8B-shaped training step (4 of
its layers, B=1, T=8192, FP32 master weights under BF16 autocast, SDPA, fused
AdamW; 1.92B parameters, an estimated 55 GiB, its peak printed), eager and compiled, beside
bench_gpu --llama8b. --device cpu runs the same code at a tiny shape (tests).

With --train-data GLOB it trains instead on llm.c's batches, in llm.c's order
and with llm.c's cosine schedule (what train_gpt --llmc-compat 1 must
reproduce; one rank): --micro-batch B rows of --seq-len T per micro-step,
--accum micro-steps per step, and writes one loss per step, as text, to --out.

--arch llama: the weights are raw float32 in train_gpt's kind-major order
(LLAMA_ORDER below, each tensor stacked over layers, wte and lm_head with Vp
rows), with the shape from --layers, --channels, --heads, --kv-heads,
--mlp-hidden, --vocab, --rope-theta and --tied. The block: RMSNorm (eps 1e-5),
RoPE on q and k (Hugging Face's rotate_half pairs (i, i + HS/2)), grouped-query
attention, SwiGLU MLP with gate and up stacked in fcw, no biases.
"""
import argparse
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

MODEL_MAGIC = 20240326
OUT_MAGIC = 20241130
# llm.c's tensor order and whether each tensor is per layer / decayed.
ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
GLOBAL = {"wte", "wpe", "lnfw", "lnfb"}
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


LLAMA_ORDER = ["wte", "ln1w", "qkvw", "attprojw", "ln2w", "fcw", "fcprojw", "lnfw", "lm_head"]
LLAMA_DECAYED = {"wte", "qkvw", "attprojw", "fcw", "fcprojw", "lm_head"}


def llama_shapes(L, C, NH, NKV, H, Vp):
    hs = C // NH
    return {
        "wte": (Vp, C), "ln1w": (L, C), "qkvw": (L, (NH + 2 * NKV) * hs, C), "attprojw": (L, C, NH * hs),
        "ln2w": (L, C), "fcw": (L, 2 * H, C), "fcprojw": (L, C, H), "lnfw": (C,), "lm_head": (Vp, C),
    }


def load_llama(args, dtype):
    L, C, NH, NKV, H, V = args.layers, args.channels, args.heads, args.kv_heads, args.mlp_hidden, args.vocab
    Vp = (V + 127) // 128 * 128
    order = [n for n in LLAMA_ORDER if n != "lm_head" or not args.tied]
    data = np.fromfile(args.model, dtype=np.float32)
    params, off = {}, 0
    for name in order:
        shape = llama_shapes(L, C, NH, NKV, H, Vp)[name]
        n = int(np.prod(shape))
        params[name] = torch.tensor(data[off:off + n].reshape(shape), dtype=dtype, requires_grad=True)
        off += n
    if off != data.size:
        sys.exit(f"{args.model}: {data.size} values, expected {off}")
    cfg = dict(arch="llama", V=V, L=L, NH=NH, NKV=NKV, C=C, H=H, Vp=Vp, theta=args.rope_theta, order=order,
               decayed=LLAMA_DECAYED)
    return cfg, params


def rms_norm(x, w):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + 1e-5) * w


def rope_table(T, hs, theta, device):
    """(cos, sin), each (T, hs) float64: pair (i, i + hs/2) turns by t * theta^(-2i/hs)."""
    inv = theta ** (-torch.arange(0, hs, 2, dtype=torch.float64, device=device) / hs)
    ang = torch.arange(T, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.cos()], dim=-1), torch.cat([ang.sin(), ang.sin()], dim=-1)


def rope(x, table):
    # x (B, heads, T, hs): Hugging Face's rotate_half pairs (i, i + hs/2).
    hs = x.shape[3]
    cos, sin = (t.to(x.dtype) for t in table)
    x1, x2 = x[..., : hs // 2], x[..., hs // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def llama_forward(cfg, p, idx, sdpa=False):
    """The logits; sdpa: attention by F.scaled_dot_product_attention where this PyTorch has it."""
    B, T = idx.shape
    C, NH, NKV, L, H = cfg["C"], cfg["NH"], cfg["NKV"], cfg["L"], cfg["H"]
    hs = C // NH
    sdpa = sdpa and hasattr(F, "scaled_dot_product_attention")  # PyTorch >= 2.0
    x = p["wte"][idx]
    mask = None if sdpa else torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()
    table = rope_table(T, hs, cfg["theta"], idx.device)
    for l in range(L):
        h = rms_norm(x, p["ln1w"][l])
        qkv = h @ p["qkvw"][l].T
        q, k, v = qkv.split([NH * hs, NKV * hs, NKV * hs], dim=2)
        q = rope(q.view(B, T, NH, hs).transpose(1, 2), table)
        k = rope(k.view(B, T, NKV, hs).transpose(1, 2), table)
        v = v.view(B, T, NKV, hs).transpose(1, 2)
        k = k.repeat_interleave(NH // NKV, dim=1)  # query head h reads kv head h // (NH / NKV)
        v = v.repeat_interleave(NH // NKV, dim=1)
        if sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        y = y.transpose(1, 2).reshape(B, T, NH * hs)
        x = x + y @ p["attprojw"][l].T
        h = rms_norm(x, p["ln2w"][l])
        gate, up = (h @ p["fcw"][l].T).split(H, dim=2)
        x = x + (F.silu(gate) * up) @ p["fcprojw"][l].T
    x = rms_norm(x, p["lnfw"])
    return x @ p["lm_head" if "lm_head" in p else "wte"].T  # (B, T, Vp)


def shapes(L, C, maxT, Vp):
    return {
        "wte": (Vp, C), "wpe": (maxT, C),
        "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
        "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
        "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
        "lnfw": (C,), "lnfb": (C,),
    }


def load_model(path, dtype):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        if header[0] != MODEL_MAGIC or header[1] != 3:
            sys.exit(f"{path}: not an llm.c float32 model file (magic {header[0]}, version {header[1]})")
        maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
        data = np.frombuffer(f.read(), dtype=np.float32)
    params, off = {}, 0
    for name in ORDER:
        shape = shapes(L, C, maxT, Vp)[name]
        n = int(np.prod(shape))
        params[name] = torch.tensor(data[off:off + n].reshape(shape), dtype=dtype, requires_grad=True)
        off += n
    if off != data.size:
        sys.exit(f"{path}: {data.size} values, expected {off}")
    return dict(arch="gpt2", maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp, order=ORDER, decayed=DECAYED), params


def forward(cfg, p, idx, sdpa=False):
    """The logits; sdpa: attention by F.scaled_dot_product_attention (the fast path on GPUs)."""
    if cfg.get("arch") == "llama":
        return llama_forward(cfg, p, idx, sdpa)
    B, T = idx.shape
    C, NH, L = cfg["C"], cfg["NH"], cfg["L"]
    hs = C // NH
    x = p["wte"][idx] + p["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        if sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        h = F.gelu(h @ p["fcw"][l].T + p["fcb"][l], approximate="tanh")
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    return x @ p["wte"].T  # (B, T, Vp), tied LM head


def loss_of(cfg, logits, targets):
    V = cfg["V"]
    return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def lr_at(step, peak, warmup, total, final_frac):
    # Mirrors llm/schedule.h.
    if step < warmup:
        return peak * (step + 1) / warmup
    floor = peak * final_frac
    decay = total - warmup
    if decay <= 1:
        return peak
    progress = min(1.0, (step - warmup) / (decay - 1))
    return floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (peak - floor)


def lr_at_llmc(step, peak, warmup, total, final_frac):
    # llm.c's schedulers.h, "cosine", in float32 as llm.c computes it: the
    # decay ratio runs over total - warmup steps and never reaches 1.
    f = np.float32
    if step < warmup:
        return float(f(peak) * f(step + 1) / f(warmup))
    ratio = f(step - warmup) / f(total - warmup)
    coeff = f(0.5) * (f(1.0) + np.cos(f(math.pi * float(ratio)), dtype=np.float32))
    lo = f(peak) * f(final_frac)
    return float(lo + coeff * (f(peak) - lo))


def read_shard(path):
    """Tokens of an llm.c shard (magic 20240520; version 1: uint16, 2: uint32)."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        if header[0] != 20240520 or header[1] not in (1, 2):
            sys.exit(f"{path}: not an llm.c token shard")
        return np.frombuffer(f.read(), dtype=np.uint16 if header[1] == 1 else np.uint32)[:header[2]].astype(np.int64)


class LlmcLoader:
    """llm.c's training data loader, one rank of `world`: a batch is B*T+1
    tokens; a shard holds (n - 1) // (world*B*T) batches; with shuffling, one
    MT19937 seeded 42 + rank (numpy's RandomState is the same generator)
    permutes the shard order at every epoch, in place, then the batches of
    each shard as it is opened, by Fisher-Yates from the top."""

    def __init__(self, paths, B, T, world=1, rank=0, shuffle=True):
        self.shards = [read_shard(p) for p in sorted(paths)]
        self.B, self.T, self.world, self.rank, self.shuffle = B, T, world, rank, shuffle
        self.rng = np.random.RandomState(42 + rank)
        self.order = list(range(len(self.shards)))
        self.new_epoch()

    def permute(self, a):
        for i in range(len(a) - 1, 0, -1):
            j = int(self.rng.randint(0, 2 ** 32, dtype=np.uint64)) % (i + 1)
            a[i], a[j] = a[j], a[i]

    def new_epoch(self):
        if self.shuffle:
            self.permute(self.order)
        self.open(0)

    def open(self, pos):
        self.pos = pos
        self.tokens = self.shards[self.order[pos]]
        self.batches = list(range((len(self.tokens) - 1) // (self.world * self.B * self.T)))
        if self.shuffle:
            self.permute(self.batches)
        self.next = 0

    def next_batch(self):
        if self.next >= len(self.batches):
            if self.pos == len(self.shards) - 1:
                self.new_epoch()
            else:
                self.open(self.pos + 1)
        B, T = self.B, self.T
        start = self.batches[self.next] * self.world * B * T + self.rank * B * T
        self.next += 1
        buf = torch.tensor(self.tokens[start:start + B * T + 1])
        return buf[:-1].view(B, T), buf[1:].view(B, T)


def train_llmc(args, cfg, p):
    import glob
    loader = LlmcLoader(glob.glob(args.train_data), args.micro_batch, args.seq_len)
    decay = [p[n] for n in ORDER if n in DECAYED]
    no_decay = [p[n] for n in ORDER if n not in DECAYED]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps, foreach=False)
    all_params = [p[n] for n in ORDER]
    losses = []
    for step in range(args.steps):
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for _ in range(args.accum):
            inputs, targets = loader.next_batch()
            loss = loss_of(cfg, forward(cfg, p, inputs), targets) / args.accum
            loss.backward()
            total += float(loss)
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(all_params, args.grad_clip)
        for g in opt.param_groups:
            g["lr"] = lr_at_llmc(step, args.lr, args.warmup, args.steps, args.lr_final_frac)
        opt.step()
        losses.append(total)
    with open(args.out, "w") as f:
        f.write("".join(f"{x:.9g}\n" for x in losses))
    print(f"reference (llm.c order): {args.steps} steps, loss {losses[0]:.6f} -> {losses[-1]:.6f}")


def flat(p, getter, order):
    return np.concatenate([getter(p[name]).detach().cpu().numpy().astype(np.float32).ravel() for name in order])


# ---- --cuda-bench ---------------------------------------------------------------------------

def cuda_time(fn, reps):
    """Mean seconds per call of fn on the GPU, after two warm-up calls."""
    fn()
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def report(op, shape, sec, flops):
    print(f"torch {op:<26} {shape:<34} {sec * 1e3:9.3f} ms {flops / sec / 1e12:8.1f} TFLOP/s", flush=True)


def bench_matmul(name, N, C, OC, reps):
    x = torch.randn(N, C, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(OC, C, device="cuda", dtype=torch.bfloat16, requires_grad=True) * 0.05
    w = w.detach().requires_grad_(True)
    dy = torch.randn(N, OC, device="cuda", dtype=torch.bfloat16)
    y = torch.matmul(x, w.T)
    flops = 2.0 * N * C * OC
    report(f"matmul fwd {name}", f"{N} x {C} -> {OC}", cuda_time(lambda: torch.matmul(x, w.T), reps), flops)
    # Backward as ours: dinp = dy @ w and dweight = dy^T @ x.
    report(f"matmul bwd {name}", f"{N} x {C} -> {OC}",
           cuda_time(lambda: (torch.matmul(dy, w), torch.matmul(dy.T, x)), reps), 2 * flops)
    del y


def bench_sdpa(B, T, NH, HS, reps):
    q, k, v = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    fwd = 2.0 * 2.0 * B * NH * (T * T / 2) * HS  # causal: half the scores, two products (as bench_gpu)
    shape = f"B={B} T={T} NH={NH} HS={HS}"
    tf = cuda_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    dy = torch.randn_like(y)
    tb = cuda_time(lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dy),
                   reps) - tf
    report("attention fwd", shape, tf, fwd)
    report("attention bwd", shape, tb, 2.5 * fwd)
    report("attention fwd+bwd", shape, tf + tb, 3.5 * fwd)


def time_train_step(p, opt, loss_fn, idx, tgt, compiled, steps, timer):
    """Mean seconds (by timer) of one optimizer step of the parameters p: loss_fn(idx, tgt) (under
    torch.compile if compiled), backward, clipping at 1.0, opt.step(); and the first step's loss."""
    fn = torch.compile(loss_fn) if compiled else loss_fn
    first = []

    def step():
        opt.zero_grad(set_to_none=True)
        loss = fn(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        opt.step()
        if not first:
            first.append(float(loss))

    return timer(step, steps), first[0]


def bench_gpt2_step(compiled, steps):
    torch.manual_seed(0)
    cfg = dict(maxT=1024, V=50257, L=12, NH=12, C=768, Vp=50304)
    B, T = 16, 1024
    p = {}
    for name, shape in shapes(cfg["L"], cfg["C"], cfg["maxT"], cfg["Vp"]).items():
        t = torch.randn(shape, device="cuda", dtype=torch.float32) * 0.02
        p[name] = t.requires_grad_(True)
    opt = torch.optim.AdamW(list(p.values()), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    idx = torch.randint(0, cfg["V"], (B, T), device="cuda")

    def loss_fn(idx_, tgt_):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return loss_of(cfg, forward(cfg, p, idx_, sdpa=True), tgt_)

    sec, _ = time_train_step(p, opt, loss_fn, idx, idx, compiled, steps, cuda_time)
    n_params = sum(t.numel() for t in p.values()) - (cfg["Vp"] - cfg["V"]) * cfg["C"]
    flops_token = 6.0 * n_params + 12.0 * cfg["L"] * cfg["C"] * T
    mode = "compile" if compiled else "eager"
    print(f"torch model gpt2-124M {mode:<7} L=12 C=768 B={B} T={T} {sec * 1e3:8.1f} ms/step "
          f"{B * T / sec:10.0f} tok/s {B * T / sec * flops_token / 1e12:8.1f} TFLOP/s", flush=True)


# Llama 3 8B's layer at 4 layers (dev/bench_gpu.c's --llama8b rows): C 4096, 32 query heads on 8 kv heads,
# SwiGLU 14336, an untied 128,256-token head, RoPE theta 500000; one sequence of 8192 tokens per step.
LLAMA8B = dict(L=4, C=4096, NH=32, NKV=8, H=14336, V=128256, B=1, T=8192)
# The same code at a shape the CPU runs in a second (--device cpu: tests/test_bench_reference.py).
LLAMA_TINY = dict(L=2, C=96, NH=3, NKV=1, H=160, V=300, B=2, T=64)


def llama_flops_per_token(s, T):
    """llm/plan/mfu.c's flops_per_token for an untied Llama: 6 N (N without the embedding, a
    lookup) + 12 L h T, h = NH * HS. Returns (N with the embedding, FLOPs per token)."""
    hs = s["C"] // s["NH"]
    layer = (s["NH"] + 2 * s["NKV"]) * hs * s["C"] + s["C"] * s["NH"] * hs + 3 * s["H"] * s["C"] + 2 * s["C"]
    n = s["L"] * layer + 2 * s["V"] * s["C"] + s["C"]
    return n, 6.0 * (n - s["V"] * s["C"]) + 12.0 * s["L"] * s["NH"] * hs * T


def llama_bench_timer(device):
    if device == "cuda":
        return cuda_time

    def cpu_time(fn, reps):
        fn()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps
    return cpu_time


def bench_llama_step(s, compiled, steps, device="cuda", name="llama8b"):
    """One training step of a Llama of shape s as PyTorch users write it: FP32 master weights, BF16
    autocast, F.scaled_dot_product_attention (causal; k and v repeated to the query heads), fused
    AdamW on the GPU, clipping at 1.0. Prints ms/step, tok/s and model TFLOP/s (FLOPs per token as
    train_gpt counts them), and the first step's loss (about ln V at this initialisation)."""
    torch.manual_seed(0)
    L, C, NH, NKV, H, V, B, T = (s[k] for k in ("L", "C", "NH", "NKV", "H", "V", "B", "T"))
    Vp = (V + 127) // 128 * 128
    cfg = dict(arch="llama", V=V, L=L, NH=NH, NKV=NKV, C=C, H=H, Vp=Vp, theta=500000.0)
    p = {}
    for pname, shape in llama_shapes(L, C, NH, NKV, H, Vp).items():
        if pname in ("ln1w", "ln2w", "lnfw"):
            t = torch.ones(shape, device=device)
        else:
            t = torch.randn(shape, device=device) * 0.02
            if pname in ("wte", "lm_head"):
                t[V:] = 0  # padded vocabulary rows, as train_gpt's
        p[pname] = t.requires_grad_(True)
    opt = torch.optim.AdamW(list(p.values()), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **({"fused": True} if device == "cuda" else {}))
    idx = torch.randint(0, V, (B, T), device=device)
    tgt = torch.randint(0, V, (B, T), device=device)

    def loss_fn(idx_, tgt_):
        with torch.autocast(device, dtype=torch.bfloat16):
            return loss_of(cfg, llama_forward(cfg, p, idx_, sdpa=True), tgt_)

    sec, first_loss = time_train_step(p, opt, loss_fn, idx, tgt, compiled, steps, llama_bench_timer(device))
    n, fpt = llama_flops_per_token(s, T)
    mode = "compile" if compiled else "eager"
    print(f"torch model {name} bf16 {mode:<7} L={L} C={C} B={B} T={T} {sec * 1e3:8.1f} ms/step "
          f"{B * T / sec:10.0f} tok/s {B * T / sec * fpt / 1e12:8.1f} TFLOP/s (loss {first_loss:.4f}, "
          f"{n} params, {fpt:.6g} FLOP/token)", flush=True)
    if device == "cuda":
        print(f"torch model {name} bf16 {mode} peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB",
              flush=True)


def llama_bench(quick, device):
    """--cuda-bench --llama8b: the Llama-3-8B-shaped step, eager and compiled (--device cpu: the
    tiny shape, eager, for the tests). PyTorch here has no FP8 training of its own (torchao is not
    assumed), so bench_gpu's FP8 row is compared with this BF16 step."""
    if device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("reference.py --cuda-bench --llama8b: PyTorch sees no CUDA GPU (--device cpu: the tiny shape)")
        print(f"torch version {torch.__version__} cuda {torch.version.cuda} gpu {torch.cuda.get_device_name()}",
              flush=True)
        steps = 3 if quick else 10
        bench_llama_step(LLAMA8B, False, steps)
        if not quick:
            try:
                bench_llama_step(LLAMA8B, True, steps)
            except Exception as e:  # a compile failure costs its own line, not the eager figure above
                print(f"torch model llama8b bf16 compile: n/a ({type(e).__name__}: {str(e)[:200]})", flush=True)
    else:
        bench_llama_step(LLAMA_TINY, False, 2, device="cpu", name="llama-tiny")


def cuda_bench(quick):
    if "--llama8b" in sys.argv[1:]:
        return llama_bench(quick, "cpu" if "--device=cpu" in sys.argv[1:] or
                           ("--device" in sys.argv[1:] and sys.argv[sys.argv.index("--device") + 1] == "cpu")
                           else "cuda")
    if not torch.cuda.is_available():
        sys.exit("reference.py --cuda-bench: PyTorch sees no CUDA GPU")
    reps = 5 if quick else 20
    print(f"torch version {torch.__version__} cuda {torch.version.cuda} cudnn {torch.backends.cudnn.version()} "
          f"gpu {torch.cuda.get_device_name()}", flush=True)
    if "--headline" in sys.argv[1:]:  # the GPU check's first rows: the GPT-2 124M step, eager
        bench_gpt2_step(False, 3 if quick else 10)
        return
    N = 16 * 1024
    for name, C, OC in (("qkv", 768, 2304), ("fc", 768, 3072), ("fcproj", 3072, 768), ("lm head", 768, 50304)):
        bench_matmul(name, N, C, OC, reps)
    bench_matmul("fc 2048", 8192, 2048, 8192, reps)
    for B, T, NH, HS in ((16, 1024, 12, 64), (4, 4096, 16, 128), (1, 8192, 16, 128), (1, 16384, 16, 128)):
        bench_sdpa(B, T, NH, HS, reps)
    bench_gpt2_step(False, 3 if quick else 10)
    bench_gpt2_step(True, 3 if quick else 10)


def main():
    if "--cuda-bench" in sys.argv[1:]:
        return cuda_bench("--quick" in sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", help="the batch file (not with --train-data)")
    ap.add_argument("--train-data", help="llm.c shards: train on them in llm.c's order, with llm.c's schedule")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--accum", type=int, default=1, help="micro-steps per step (--train-data)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--lr-final-frac", type=float, default=1.0)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    for name in ["layers", "channels", "heads", "kv-heads", "mlp-hidden", "vocab"]:
        ap.add_argument("--" + name, type=int, default=0, help="--arch llama: the shape")
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    ap.add_argument("--tied", type=int, default=0, help="--arch llama: LM head tied to wte")
    args = ap.parse_args()
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    torch.manual_seed(0)

    cfg, p = load_llama(args, dtype) if args.arch == "llama" else load_model(args.model, dtype)
    if args.train_data:
        return train_llmc(args, cfg, p)
    if not args.batch:
        sys.exit("reference.py: --batch or --train-data is needed")
    order, decayed = cfg["order"], cfg["decayed"]
    with open(args.batch, "rb") as f:
        B, T = struct.unpack("<ii", f.read(8))
        ids = np.frombuffer(f.read(), dtype=np.int32)
    inputs = torch.tensor(ids[:B * T].reshape(B, T), dtype=torch.long)
    targets = torch.tensor(ids[B * T:2 * B * T].reshape(B, T), dtype=torch.long)

    logits = forward(cfg, p, inputs)
    loss = loss_of(cfg, logits, targets)
    loss.backward()
    first_logits = logits[..., :cfg["V"]].detach().cpu().numpy().astype(np.float32)
    first_loss = float(loss)
    first_grads = flat(p, lambda t: t.grad, order)

    decay = [p[n] for n in order if n in decayed]
    no_decay = [p[n] for n in order if n not in decayed]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps, foreach=False)
    losses, norms = [], []
    all_params = [p[n] for n in order]
    for step in range(args.steps):
        opt.zero_grad(set_to_none=False)
        loss = loss_of(cfg, forward(cfg, p, inputs), targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(all_params, args.grad_clip) if args.grad_clip > 0 else \
            torch.sqrt(sum((q.grad ** 2).sum() for q in all_params))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.lr, args.warmup, args.steps, args.lr_final_frac)
        opt.step()
        losses.append(float(loss))
        norms.append(float(norm))

    header = np.zeros(256, dtype=np.int32)
    header[:8] = [OUT_MAGIC, 1, B, T, cfg["V"], cfg["Vp"], first_grads.size, args.steps]
    with open(args.out, "wb") as f:
        f.write(header.tobytes())
        f.write(first_logits.tobytes())
        f.write(np.float32(first_loss).tobytes())
        f.write(first_grads.tobytes())
        f.write(np.asarray(losses, dtype=np.float32).tobytes())
        f.write(np.asarray(norms, dtype=np.float32).tobytes())
        f.write(flat(p, lambda t: t, order).tobytes())
    print(f"reference: B={B} T={T} V={cfg['V']} L={cfg['L']} C={cfg['C']} loss {first_loss:.6f} "
          f"-> {losses[-1] if losses else first_loss:.6f} after {args.steps} steps ({args.dtype})")


if __name__ == "__main__":
    main()
