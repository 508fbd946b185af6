"""ml_dtypes for the Python tests that check our FP8/FP4 formats against it
(test_fp8_block.py, test_fp4_block.py): from PyPI into build/mlvenv, once,
shared by both.

ensure_ml_dtypes(setup) returns when ml_dtypes and NumPy import; else it
installs them into the venv (first time only) and re-runs the calling script
with the venv's Python. A failure prints "FAIL <setup>: why" and exits 1."""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
VENV = os.path.join(ROOT, "build", "mlvenv")


def ensure_ml_dtypes(setup):
    try:
        import ml_dtypes  # noqa: F401
        import numpy  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    if os.environ.get("ML_DTYPES_IN_VENV"):  # re-run in the venv and still missing
        print(f"FAIL {setup}: ml_dtypes is not importable in", VENV, flush=True)
        sys.exit(1)
    ready = os.path.exists(py) and subprocess.run([py, "-c", "import ml_dtypes, numpy"],
                                                  capture_output=True).returncode == 0
    if not ready:
        print(f"# installing ml_dtypes 0.5.4 into {VENV} (once)", flush=True)
        r = subprocess.run(f"rm -rf '{VENV}' && /usr/bin/python3 -m venv '{VENV}' && "
                           f"'{VENV}/bin/pip' install -q 'ml_dtypes==0.5.4'", shell=True,
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL {setup}: cannot install ml_dtypes:", (r.stderr or r.stdout).strip()[-300:], flush=True)
            sys.exit(1)
    os.environ["ML_DTYPES_IN_VENV"] = "1"
    os.execv(py, [py] + sys.argv)
