#!/usr/bin/env python3
"""Set up a local virtual environment (once) and run the demo or the test suite.

    python3 quickstart.py demo [autodeuq run options...]   # search + ensemble on the toy data set
    python3 quickstart.py test [pytest options...]         # the whole test suite

Only the standard library is used here, so this runs on a fresh machine with python3 alone.
The environment lives in .venv/ and is reinstalled only when setup.cfg changes.
"""
import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".autodeuq-installed"
DEMO_ARGS = ["--dataset", "toy-sine", "--space", "toy", "--max-evals", "100", "--run-dir", "runs/demo"]


def ensure_env() -> None:
    wanted = hashlib.sha256((ROOT / "setup.cfg").read_bytes() + (ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and PYTHON.exists():
        return
    if not PYTHON.exists():
        print("creating .venv ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("installing autodeuq and its dependencies into .venv (first run only) ...", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    # setuptools and wheel in the environment itself: the packaging test builds with --no-build-isolation
    # (Python 3.12's venv has no setuptools).
    subprocess.run(pip + ["--upgrade", "pip", "setuptools>=68", "wheel"], check=True)
    # docs: .ci/run builds the documentation after the tests.
    subprocess.run(pip + ["-e", f"{ROOT}[test,benchmarks,docs]"], check=True)
    STAMP.write_text(wanted)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("demo", "test"):
        print(__doc__.strip())
        return 2
    ensure_env()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if argv[0] == "demo":
        cmd = [str(PYTHON), "-m", "autodeuq", "run", *DEMO_ARGS, *argv[1:]]
    else:
        cmd = [str(PYTHON), "-m", "pytest", "-q", *argv[1:]]
    code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    if argv[0] == "test" and code == 5:
        print("pytest collected no tests: counting that as a failure")
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
