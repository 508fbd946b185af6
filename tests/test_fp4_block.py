#!/usr/bin/python3
"""test_fp4_block.py: the CPU backend's NVFP4 (recipe nvfp4, kernels/fp4_block.h)
element by element against an independent reference built on ml_dtypes'
casts (float4_e2m1fn, float8_e4m3fn) in NumPy.

- Quantisation: every E2M1 code, every E4M3 block scale and the FP32 tensor
  scale of op(x), row-wise and column-wise, 1x16 and 16x16 blocks, on random
  data with outliers, an all-zero block, float subnormals, NaN and Inf inside
  blocks, and shapes that are not multiples of 16; also with the Hadamard
  transform and with stochastic rounding (the random bits recomputed here
  from the documented hash).
- The Hadamard transform: the matrix is orthogonal (H^T H = I in float64),
  and an NVFP4 GEMM with both operands transformed along K equals the
  float64 product of the untransformed operands within the quantisation error.
- Stochastic rounding: unbiased (the mean of many draws of one value is that
  value; nearest rounding is biased on the same data) and reproducible (same
  key, same codes; another key, other codes).
- The GEMM: the product of the dequantised operands against float64 (FP32
  accumulation's tolerance).

ml_dtypes comes from PyPI into build/mlvenv (test_fp8_block.py's, once).
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlvenv import ensure_ml_dtypes  # noqa: E402

ensure_ml_dtypes("fp4_block_setup")
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from pycheck import check, finish  # noqa: E402

DUMP = os.environ.get("FP4_BLOCK_DUMP", os.path.join(ROOT, "build", "tests", "fp4_block_dump"))
F32 = np.float32
U64 = np.uint64
FLT_MAX = np.finfo(F32).max
BLOCKS = {"a16": (1, 16), "w16": (16, 16)}
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float64)


# ---- the reference -------------------------------------------------------------------------------------------

def mix64(z):
    """SplitMix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (np.asarray(z, U64) + U64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
        return z ^ (z >> U64(31))


def rht_matrix():
    """D H / 4 (16 x 16) as float32: H Sylvester's Hadamard matrix, D the fixed signs."""
    signs = int(mix64(U64(0x4E564650345248)))
    h = np.zeros((16, 16), F32)
    for k in range(16):
        for j in range(16):
            neg = (bin(k & j).count("1") & 1) ^ ((signs >> k) & 1)
            h[k, j] = -0.25 if neg else 0.25
    return h


def rht_rows(y):
    """Each row's whole 16-groups times D H / 4, summed in k order in float32 (the C loop)."""
    y = y.copy()
    h = rht_matrix()
    M, K = y.shape
    for c0 in range(0, K - K % 16, 16):
        blk = y[:, c0:c0 + 16].copy()
        acc = np.zeros((M, 16), F32)
        for k in range(16):
            acc = (acc + blk[:, k:k + 1] * h[k][None, :]).astype(F32)
        y[:, c0:c0 + 16] = acc
    return y


def e2m1_rne(v):
    """E2M1 codes of float32 v as ml_dtypes casts them (nearest even, saturating); NaN gives 0."""
    nan = np.isnan(v)
    c = np.clip(np.where(nan, F32(0), v), F32(-6), F32(6)).astype(F32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    return np.where(nan, np.uint8(0), c & np.uint8(0xF))


def e2m1_sr(v, bits):
    """Stochastic rounding: up with probability (|v| - lo) / (hi - lo), u = top 24 bits x 2^-24; saturating."""
    a = np.abs(np.where(np.isnan(v), F32(0), v)).astype(np.float64)
    lo_idx = np.searchsorted(E2M1, a, side="right") - 1
    lo_idx = np.minimum(lo_idx, 7)
    lo = E2M1[lo_idx]
    hi = E2M1[np.minimum(lo_idx + 1, 7)]
    frac = np.where(hi > lo, (a - lo) / np.where(hi > lo, hi - lo, 1), 0)
    u = (bits >> np.uint32(8)).astype(np.float64) * 2.0 ** -24
    code = np.where((u < frac) & (lo_idx < 7), lo_idx + 1, lo_idx).astype(np.uint8)
    sign = (np.signbit(v) & ~np.isnan(v)).astype(np.uint8) << 3
    return code | sign


def e4m3_code(v):
    v = np.clip(np.asarray(v, F32), F32(-448), F32(448)).astype(F32)
    return v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def e4m3_value(c):
    return np.asarray(c, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(F32)


def reference(x_op, fmt, hadamard=0, stochastic=0, key=0):
    """codes (M, K), scale bytes, s_dec and the dequantised float64 matrix of op(x) (M, K)."""
    br, bc = BLOCKS[fmt]
    y = rht_rows(x_op) if hadamard else x_op.astype(F32)
    M, K = y.shape
    finite_or_inf = np.abs(y[~np.isnan(y)])
    amax = F32(finite_or_inf.max()) if finite_or_inf.size else F32(0)
    with np.errstate(divide="ignore", over="ignore"):
        s_enc = F32(F32(2688) / amax)
    s_enc = min(s_enc, FLT_MAX)
    if amax == 0 or s_enc == 0:
        s_enc = F32(1)
    s_dec = F32(F32(1) / s_enc)
    codes = np.zeros((M, K), np.uint8)
    deq = np.zeros((M, K))
    scales = []
    idx = np.arange(M * K, dtype=U64).reshape(M, K)
    bits_all = (mix64(U64(key) ^ idx) >> U64(32)).astype(np.uint32)
    for r0 in range(0, M, br):
        for c0 in range(0, K, bc):
            blk = y[r0:r0 + br, c0:c0 + bc]
            finite_or_inf = np.abs(blk[~np.isnan(blk)])
            bamax = F32(finite_or_inf.max()) if finite_or_inf.size else F32(0)
            with np.errstate(over="ignore"):
                v = F32(F32(bamax / F32(6)) * s_enc)
            sc = e4m3_code(min(v, FLT_MAX))[()]
            with np.errstate(divide="ignore"):
                mult = F32(s_enc / e4m3_value(sc))
            mult = min(mult, FLT_MAX)
            with np.errstate(over="ignore", invalid="ignore"):
                scaled = (blk * mult).astype(F32)
            if stochastic:
                c = e2m1_sr(scaled, bits_all[r0:r0 + br, c0:c0 + bc])
            else:
                c = e2m1_rne(scaled)
            stored = np.uint8(0x7F) if np.isnan(blk).any() else sc
            scales.append(stored)
            codes[r0:r0 + br, c0:c0 + bc] = c
            mag = E2M1[c & 7] * np.where(c & 8, -1, 1)
            with np.errstate(over="ignore", invalid="ignore"):
                deq[r0:r0 + br, c0:c0 + bc] = mag * float(e4m3_value(stored)) * float(s_dec)
    return codes, bytes(np.array(scales, np.uint8)), s_dec, deq


# ---- the program under test -----------------------------------------------------------------------------------

def run(args):
    r = subprocess.run([DUMP] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"fp4_block_dump {' '.join(map(str, args))}: {r.stderr.strip()}")


def quantize(tmp, x_op, fmt, trans, hadamard=0, stochastic=0, key=0):
    M, K = x_op.shape
    (np.ascontiguousarray(x_op.T) if trans else x_op).astype(F32).tofile(f"{tmp}/x")
    run(["quant", fmt, int(trans), hadamard, stochastic, key, M, K, f"{tmp}/x", f"{tmp}/codes", f"{tmp}/scales",
         f"{tmp}/sdec"])
    codes = np.fromfile(f"{tmp}/codes", np.uint8).reshape(M, K)
    return codes, open(f"{tmp}/scales", "rb").read(), np.fromfile(f"{tmp}/sdec", F32)[0]


def test_data(rng, M, K):
    """Normal data with an outlier per row, an all-zero block, subnormals, NaN and Inf, ties of the E2M1 grid."""
    x = rng.standard_normal((M, K)).astype(F32)
    x[np.arange(M), rng.integers(0, K, M)] *= F32(300)  # outliers
    x[0, :20] = 0                                  # an all-zero 1x16 block
    x[1, 5] = F32(3e-39)                           # float32 subnormals
    x[1, 6] = -F32(1e-45)
    x[2, 0:16] = rng.standard_normal(16).astype(F32) * F32(1e-6)  # a block whose E4M3 scale underflows
    x[4, 20] = np.nan
    x[5, 3] = -F32(0.0)
    return x


def with_inf(x):
    x = x.copy()
    x[3, 17] = np.inf                              # the tensor scale becomes 1
    x[4, 33] = -np.inf
    return x


def ties_data(rng, M, K):
    """Every block's amax is 6 and so is the tensor's: the scales are 448 and the multiplier exactly 1, so
    the elements are rounded as they are: the E2M1 grid's ties (0.25, 0.75, ..., 5), its points, and
    values just beside them, of both signs."""
    ties = F32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 3.0, 6.0, 7.0])
    near = np.concatenate([np.nextafter(ties, F32(0)), np.nextafter(ties, F32(10))]).astype(F32)
    pool = np.concatenate([ties, near])
    x = rng.choice(pool, (M, K)).astype(F32) * rng.choice(F32([-1, 1]), (M, K)).astype(F32)
    x = np.clip(x, F32(-6), F32(6))
    x[:, ::16] = F32(6)
    return x


def quant_case(tmp, rng, fmt, trans, M, K, hadamard=0, stochastic=0, key=0, inf=False, ties=False):
    name = (f"quant_{fmt}_{'colwise' if trans else 'rowwise'}_{M}x{K}" + ("_hadamard" if hadamard else "") +
            ("_stochastic" if stochastic else "") + ("_inf" if inf else "") + ("_ties" if ties else ""))
    x_op = ties_data(rng, M, K) if ties else test_data(rng, M, K)
    if inf:
        x_op = with_inf(x_op)
    codes, scales, s_dec = quantize(tmp, x_op, fmt, trans, hadamard, stochastic, key)
    want_codes, want_scales, want_sdec, _ = reference(x_op, fmt, hadamard, stochastic, key)
    why = ""
    bad = np.argwhere(codes != want_codes)
    if len(bad):
        i, k = bad[0]
        why = f"{len(bad)} codes differ, first at ({i},{k}): x={x_op[i, k]!r} ours 0x{codes[i, k]:02x} want 0x{want_codes[i, k]:02x}"
    if scales != want_scales:
        n = sum(a != b for a, b in zip(scales, want_scales))
        why += f" {n} block scales differ (of {len(want_scales)}; {len(scales)} bytes)"
    if np.float32(s_dec).tobytes() != np.float32(want_sdec).tobytes():
        why += f" tensor scale {s_dec!r}, want {want_sdec!r}"
    check(name, not why, why)


def ml_dtypes_agree():
    """The reference's nearest rounding is ml_dtypes' own cast: ties, saturation, signed zeros."""
    v = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 7, -0.25, -5.0001, np.inf, -np.inf, 2.9999, 1e-45], F32)
    want = [0, 2, 2, 4, 4, 6, 6, 7, 8, 15, 7, 15, 5, 0]
    check("e2m1_ties_and_saturation", list(e2m1_rne(v)) == want, f"{list(e2m1_rne(v))} vs {want}")


def hadamard_orthogonal(tmp):
    run(["rht", f"{tmp}/h"])
    h = np.fromfile(f"{tmp}/h", F32).reshape(16, 16).astype(np.float64)
    err = np.abs(h.T @ h - np.eye(16)).max()
    check("hadamard_orthogonal", err == 0 and np.array_equal(h.astype(F32), rht_matrix()) and
          not np.all(np.abs(h - h[0:1, :] * np.sign(h[:, 0:1])) == 0),
          f"max |H^T H - I| = {err:g}, or the matrix is not the documented D H / 4")


def gemm(tmp, a, ta, fa, ha, b, tb, fb, hb):
    M, K = a.shape
    N = b.shape[0]
    (np.ascontiguousarray(a.T) if ta else a).tofile(f"{tmp}/a")
    (np.ascontiguousarray(b.T) if tb else b).tofile(f"{tmp}/b")
    run(["gemm", fa, int(ta), ha, fb, int(tb), hb, M, N, K, f"{tmp}/a", f"{tmp}/b", f"{tmp}/out"])
    return np.fromfile(f"{tmp}/out", F32).reshape(M, N).astype(np.float64)


def gemm_case(tmp, rng, fa, ta, fb, tb, M, N, K, had):
    name = f"gemm_{fa}{'T' if ta else ''}_{fb}{'T' if tb else ''}_{M}x{N}x{K}" + ("_hadamard" if had else "")
    a = (rng.standard_normal((M, K)) * np.exp(rng.standard_normal((M, 1)))).astype(F32)
    b = rng.standard_normal((N, K)).astype(F32)
    if had:
        a[:, 7] *= 40  # an outlier channel: the transform spreads it over its 16-group
    out = gemm(tmp, a, ta, fa, had, b, tb, fb, had)
    _, _, _, da = reference(a, fa, had)
    _, _, _, db = reference(b, fb, had)
    want = da @ db.T
    mag = np.abs(da) @ np.abs(db).T
    err = np.abs(out - want) / mag
    exact = a.astype(np.float64) @ b.astype(np.float64).T
    # The untransformed float64 product: within NVFP4's rounding (E2M1 keeps a
    # quarter of a block's largest element at worst; summed over K it
    # averages down), measured relative to the product's overall magnitude.
    qerr = np.linalg.norm(out - exact) / np.linalg.norm(exact)
    print(f"# {name}: relative L2 error {qerr:.4f} against the exact float64 product", flush=True)
    check(name, np.all(np.isfinite(out)) and err.max() < K * 2.0 ** -24 and qerr < 0.2,
          f"max error {err.max():.3g} of the magnitudes against float64 of the dequantised operands "
          f"(allowed {K * 2.0 ** -24:.3g}); relative L2 error {qerr:.3g} against the exact product")
    return qerr


def hadamard_cancels(tmp, rng):
    """The transform cancels in the product: with it the GEMM still equals the exact product within
    NVFP4's rounding, and with rounding out of the way (a tensor of E2M1 values, exactly representable,
    still changes under the transform) the transformed product is the plain one to FP32 rounding."""
    M, N, K = 24, 20, 64
    a = rng.standard_normal((M, K)).astype(F32)
    b = rng.standard_normal((N, K)).astype(F32)
    ya, yb = rht_rows(a).astype(np.float64), rht_rows(b).astype(np.float64)
    exact = a.astype(np.float64) @ b.astype(np.float64).T
    err = np.abs(ya @ yb.T - exact).max() / np.abs(exact).max()
    check("hadamard_cancels_in_the_product", err < 1e-6 and np.abs(ya - a).max() > 0.1,
          f"transformed product differs by {err:.3g} (relative)")


def stochastic_unbiased_and_reproducible(tmp, rng):
    # 64 x 1024 copies of values between grid points (scaled so the block
    # amax is 6 exactly: each block holds one 6). Means over the 65536 draws.
    M, K = 64, 1024
    vals = F32([0.3, 1.1, 2.6, 3.3, 4.9, 5.5])
    x = np.repeat(vals, (M * K) // len(vals) + 1)[:M * K].reshape(M, K).astype(F32)
    x[:, ::16] = 6.0  # one element of every block at 6: scale 1 after the tensor and block scales
    codes, scales, s_dec = quantize(tmp, x, "a16", 0, 0, 1, 12345)
    _, _, _, deq = reference(x, "a16", 0, 1, 12345)
    ok, worst = True, ""
    dec = E2M1[codes & 7] * np.where(codes & 8, -1, 1) * float(e4m3_value(np.frombuffer(scales, np.uint8))[0]) * float(s_dec)
    for v in vals:
        sel = (x == v)
        mean = dec[sel].mean()
        n = sel.sum()
        spread = 2.0 / np.sqrt(n)  # the gap between grid points is at most 2: 4 standard errors below this
        if abs(mean - v) > spread:
            ok, worst = False, f"value {v}: mean {mean:.4f} over {n} draws"
    # Nearest rounding of the same data is biased (it always rounds 1.1 to 1): the test can tell.
    rne, _, _ = quantize(tmp, x, "a16", 0, 0, 0, 0)
    biased = abs(E2M1[rne[x == F32(1.1)] & 7].mean() - 1.1) > 0.05
    check("stochastic_rounding_unbiased", ok and biased and np.array_equal(deq, dec), worst or
          ("nearest rounding is not biased on this data: the test cannot tell" if not biased else
           "codes differ from the reference's"))
    again, _, _ = quantize(tmp, x, "a16", 0, 0, 1, 12345)
    other, _, _ = quantize(tmp, x, "a16", 0, 0, 1, 12346)
    frac_diff = np.mean(other != codes)
    check("stochastic_rounding_reproducible", np.array_equal(again, codes) and frac_diff > 0.2,
          f"same key gives the same codes: {np.array_equal(again, codes)}; another key changes {frac_diff:.2%}")


def main():
    if not os.access(DUMP, os.X_OK):
        check("fp4_block_dump_built", False, f"{DUMP} is not built (make tests)")
        finish()
    rng = np.random.default_rng(2509)
    ml_dtypes_agree()
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, M, K in [("a16", 37, 77), ("w16", 45, 61)]:
            for trans in (0, 1):
                quant_case(tmp, rng, fmt, trans, M, K)
        quant_case(tmp, rng, "a16", 0, 19, 77, ties=True)
        quant_case(tmp, rng, "a16", 0, 37, 77, inf=True)
        quant_case(tmp, rng, "w16", 1, 45, 61, inf=True)
        quant_case(tmp, rng, "a16", 1, 29, 80, hadamard=1)
        quant_case(tmp, rng, "a16", 0, 37, 77, stochastic=1, key=0xDEADBEEF12345)
        quant_case(tmp, rng, "a16", 1, 29, 80, hadamard=1, stochastic=1, key=7)
        hadamard_orthogonal(tmp)
        hadamard_cancels(tmp, rng)
        stochastic_unbiased_and_reproducible(tmp, rng)
        # forward (activations x weights), dgrad (weights column-wise), wgrad (both column-wise, transformed)
        for fa, ta, fb, tb, had in [("a16", 0, "w16", 0, 0), ("a16", 0, "w16", 1, 0), ("a16", 1, "a16", 1, 0),
                                    ("a16", 1, "a16", 1, 1)]:
            gemm_case(tmp, rng, fa, ta, fb, tb, 33, 45, 259 if not had else 272, had)
    finish()


main()
