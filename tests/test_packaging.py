"""Packaging: a plain (non-editable) install carries the shipped search spaces."""
import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOT_SOURCES = ("*.egg-info", "build", "dist", ".venv", ".git", "runs", "__pycache__", ".pytest_cache")


def test_setup_cfg_lists_every_package():
    # setup.cfg lists its packages (the spaces' folder is mapped in by package_dir), so a new
    # subpackage must be added there by hand; this catches one that was forgotten.
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    listed = set(config["options"]["packages"].split())
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "autodeuq").rglob("__init__.py")}
    assert listed == found | {"autodeuq.search_spaces"}
    assert "autodeuq.search_spaces = search_spaces" in config["options"]["package_dir"]


def test_non_editable_install_finds_the_shipped_spaces(tmp_path):
    pytest.importorskip("setuptools", reason="building the package needs setuptools in this environment")
    source, target, elsewhere = tmp_path / "src", tmp_path / "site", tmp_path / "elsewhere"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    elsewhere.mkdir()
    # --no-build-isolation: build with this environment's setuptools, no download needed.
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--quiet",
                    "--disable-pip-version-check", "--target", str(target), str(source)], check=True)
    shutil.rmtree(source)  # nothing may be read from the sources after the install
    code = ("import autodeuq, autodeuq.space as s; "
            "print(autodeuq.__file__); print(s.load_space('tabular').name, sorted(s.shipped_spaces()))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env={**env, "PYTHONPATH": str(target)},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    where, loaded = out.stdout.splitlines()
    assert Path(where).is_relative_to(target)
    assert loaded == "tabular ['tabular', 'toy']"
