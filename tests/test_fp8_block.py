#!/usr/bin/python3
"""test_fp8_block.py: the CPU backend's block-scaled FP8 (recipes blockwise and
mxfp8, kernels/fp8_block.h) element by element against an independent
reference built on ml_dtypes' casts (float8_e4m3fn, float8_e8m0fnu) in NumPy.

- Quantisation: every E4M3 code and every block scale of op(x), row-wise and
  column-wise (the column-wise copy quantised from the source), for 1x128 and
  128x128 blocks with FP32 scales and 1x32 blocks with E8M0 scales, on random
  data with outliers, an all-zero block, float subnormals, NaN and Inf inside
  blocks, blocks whose scale clamps at 2^-127 and 2^127, and shapes that are
  not multiples of the block.
- The GEMM: the product of the dequantised operands against float64 (FP32
  accumulation's tolerance), and within the recipe's quantisation error of
  the unquantised product.

ml_dtypes comes from PyPI into build/mlvenv (once, about 10 s).
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlvenv import ensure_ml_dtypes  # noqa: E402

ensure_ml_dtypes("fp8_block_setup")
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from pycheck import check, finish  # noqa: E402

DUMP = os.environ.get("FP8_BLOCK_DUMP", os.path.join(ROOT, "build", "tests", "fp8_block_dump"))
F32 = np.float32
FORMATS = {"act128": ("fp32", 1, 128), "w128": ("fp32", 128, 128), "mx32": ("e8m0", 1, 32)}


def e4m3_codes(v):
    """float32 -> E4M3 codes as the recipe's casts do: round to nearest even, saturating at +-448."""
    v = np.where(np.isnan(v), v, np.clip(v, F32(-448), F32(448))).astype(F32)
    return v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def block_scale(amax, kind):
    """(multiplier applied before the cast, stored scale bytes, dequantisation multiplier) of one block."""
    amax = F32(amax)
    if kind == "fp32":
        # DeepSeek-V3's FP32 scale: 448 / amax, 1 for a zero or non-finite amax; the GEMM gets 1 / that.
        s = F32(448) / amax if (amax > 0 and np.isfinite(amax)) else F32(1)
        s = F32(np.finfo(F32).max) if np.isinf(s) else s
        inv = F32(1) / s
        return s, np.array([inv], F32).tobytes(), inv
    # MXFP8: amax * (1/448) rounded up to a power of two, clamped to 2^-127 .. 2^127.
    v = amax * (F32(1) / F32(448))
    if v == 0:
        e = -127
    elif np.isinf(v):
        e = 127
    else:
        m, ex = np.frexp(np.float64(v))  # v = m * 2^ex, m in [0.5, 1): exact
        e = int(ex) - 1 if m == 0.5 else int(ex)
        e = min(max(e, -127), 127)
    scale = F32(np.ldexp(1.0, e))
    code = np.array([scale], F32).astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    assert code.view(ml_dtypes.float8_e8m0fnu).astype(F32)[0] == scale
    return F32(np.ldexp(1.0, -e)), code.tobytes(), scale


def reference(x_op, fmt):
    """codes (M, K), scale bytes and the dequantised float32 matrix of op(x) (M, K)."""
    kind, br, bc = FORMATS[fmt]
    M, K = x_op.shape
    codes = np.zeros((M, K), np.uint8)
    deq = np.zeros((M, K), F32)
    scales = []
    for r0 in range(0, M, br):
        for c0 in range(0, K, bc):
            blk = x_op[r0:r0 + br, c0:c0 + bc]
            finite_or_inf = np.abs(blk[~np.isnan(blk)])
            amax = finite_or_inf.max() if finite_or_inf.size else F32(0)
            mult, stored, dq = block_scale(amax, kind)
            scales.append(stored)
            c = e4m3_codes((blk * mult).astype(F32))
            codes[r0:r0 + br, c0:c0 + bc] = c
            with np.errstate(over="ignore"):  # an infinite element saturated: 448 * 2^127
                deq[r0:r0 + br, c0:c0 + bc] = c.view(ml_dtypes.float8_e4m3fn).astype(F32) * dq
    return codes, b"".join(scales), deq


def test_data(rng, M, K):
    """Normal data with an outlier per row, an all-zero block, subnormals, NaN and Inf, tiny and huge blocks."""
    x = rng.standard_normal((M, K)).astype(F32)
    x[np.arange(M), rng.integers(0, K, M)] *= F32(300)  # outliers
    x[0, :40] = 0                                  # an all-zero 1x32 block (and zeros elsewhere)
    x[1, 5] = F32(3e-39)                           # float32 subnormals
    x[1, 6] = -F32(1e-45)
    x[2, 0:32] = rng.standard_normal(32).astype(F32) * F32(1e-38)  # amax / 448 below 2^-127: the low clamp
    x[3, 0:32] = F32(3e38)                         # amax / 448 far above 2^119: near the high clamp
    x[3, 40] = np.inf
    x[4, 70] = np.nan
    x[4, 71] = -np.inf
    x[5, 3] = -F32(0.0)
    x[6, 0:32] = F32(448) * F32(2.0 ** -20) * rng.random(32).astype(F32)  # E4M3 subnormals after scaling
    return x


def run(args):
    r = subprocess.run([DUMP] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"fp8_block_dump {' '.join(map(str, args))}: {r.stderr.strip()}")


def quant_case(tmp, rng, fmt, trans, M, K):
    name = f"quant_{fmt}_{'colwise' if trans else 'rowwise'}_{M}x{K}"
    x_op = test_data(rng, M, K)
    stored = np.ascontiguousarray(x_op.T) if trans else x_op
    stored.tofile(f"{tmp}/x")
    run(["quant", fmt, int(trans), M, K, f"{tmp}/x", f"{tmp}/codes", f"{tmp}/scales"])
    codes = np.fromfile(f"{tmp}/codes", np.uint8).reshape(M, K)
    scales = open(f"{tmp}/scales", "rb").read()
    want_codes, want_scales, _ = reference(x_op, fmt)
    bad = np.argwhere(codes != want_codes)
    nscale = 4 if FORMATS[fmt][0] == "fp32" else 1
    sbad = [i for i in range(len(want_scales) // nscale)
            if scales[i * nscale:(i + 1) * nscale] != want_scales[i * nscale:(i + 1) * nscale]]
    why = ""
    if len(bad):
        i, k = bad[0]
        why = f"{len(bad)} codes differ, first at ({i},{k}): x={x_op[i, k]!r} ours 0x{codes[i, k]:02x} ml_dtypes 0x{want_codes[i, k]:02x}"
    if len(scales) != len(want_scales):
        why += f" {len(scales)} scale bytes, expected {len(want_scales)}"
    elif sbad:
        why += f" {len(sbad)} block scales differ, first block {sbad[0]}"
    check(name, not why, why)


def gemm_case(tmp, rng, fa, ta, fb, tb, M, N, K):
    name = f"gemm_{fa}{'T' if ta else ''}_{fb}{'T' if tb else ''}_{M}x{N}x{K}"
    a = (rng.standard_normal((M, K)) * np.exp(rng.standard_normal((M, 1)))).astype(F32)  # rows of varied magnitude
    b = rng.standard_normal((N, K)).astype(F32)
    (np.ascontiguousarray(a.T) if ta else a).tofile(f"{tmp}/a")
    (np.ascontiguousarray(b.T) if tb else b).tofile(f"{tmp}/b")
    run(["gemm", fa, int(ta), fb, int(tb), M, N, K, f"{tmp}/a", f"{tmp}/b", f"{tmp}/out"])
    out = np.fromfile(f"{tmp}/out", F32).reshape(M, N).astype(np.float64)
    _, _, da = reference(a, fa)
    _, _, db = reference(b, fb)
    want = da.astype(np.float64) @ db.astype(np.float64).T
    mag = np.abs(da).astype(np.float64) @ np.abs(db).astype(np.float64).T
    err = np.abs(out - want) / mag
    exact = np.abs(a.astype(np.float64) @ b.astype(np.float64).T - want) / mag
    # FP32 accumulation over K: well under K * 2^-24 of the magnitudes; the
    # quantisation itself: E4M3's 2^-4 relative rounding, averaged over K.
    check(name, np.all(np.isfinite(out)) and err.max() < K * 2.0 ** -24 and exact.max() < 2.0 ** -4,
          f"max error {err.max():.3g} of the magnitudes against float64 of the dequantised operands "
          f"(allowed {K * 2.0 ** -24:.3g}); quantisation error {exact.max():.3g}")


def main():
    if not os.access(DUMP, os.X_OK):
        check("fp8_block_dump_built", False, f"{DUMP} is not built (make tests)")
        finish()
    rng = np.random.default_rng(27)
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, M, K in [("act128", 37, 300), ("w128", 200, 300), ("mx32", 37, 77), ("mx32", 64, 96)]:
            for trans in (0, 1):
                quant_case(tmp, rng, fmt, trans, M, K)
        # forward (activations x weights), dgrad (weights column-wise) and wgrad (both column-wise)
        for fa, ta, fb, tb in [("act128", 0, "w128", 0), ("act128", 0, "w128", 1), ("act128", 1, "act128", 1),
                               ("mx32", 0, "mx32", 0), ("mx32", 0, "mx32", 1), ("mx32", 1, "mx32", 1)]:
            gemm_case(tmp, rng, fa, ta, fb, tb, 33, 45, 259)
    finish()


main()
