"""Keep TensorFlow's start-up lines off the console.

``TF_CPP_MIN_LOG_LEVEL`` (set by ``autodeuq/__init__.py`` unless the user set it) hides
TensorFlow's C++ log, but not the lines its native libraries write while ``import tensorflow``
runs, before the logging library is initialized: ``WARNING: All log messages before
absl::InitializeLog() is called are written to STDERR`` and INFO lines such as ``Could not find
cuda drivers on your machine``. No environment variable reaches those, so the first import of
TensorFlow in a process runs with the native stderr (file descriptor 2) held in a temporary
file, and afterwards everything in it except those lines is written back: warnings, errors and
Python tracebacks still show.

:func:`install` puts a finder at the front of ``sys.meta_path`` that does this for the first
``import tensorflow`` of the process, whichever module asks for it (Keras, TFP, autodeuq).
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile

#: Lines dropped from what the native libraries write while TensorFlow is imported: absl's
#: notice that it is not initialized yet, and INFO-level lines (``I<mmdd> <time> <thread> <file>] ...``).
NOISE = (
    re.compile(rb"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR\s*$"),
    re.compile(rb"^I\d{4} [\d:.]+\s+\d+ [\w./-]+:\d+\] "),
)


def is_noise(line: bytes) -> bool:
    return any(pattern.match(line) for pattern in NOISE)


@contextlib.contextmanager
def filtered_native_stderr():
    """Hold what is written to file descriptor 2 in this block; write it back without :data:`NOISE`."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = b"".join(line for line in held.read().splitlines(keepends=True) if not is_noise(line))
            if kept:
                with contextlib.suppress(OSError):
                    os.write(2, kept)


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` the usual way and runs its import under :func:`filtered_native_stderr`."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)  # once per process: the native libraries load once
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            with filtered_native_stderr():
                run(module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Quiet the first ``import tensorflow`` of this process (no-op once TensorFlow is imported)."""
    if "tensorflow" in sys.modules or any(isinstance(f, _QuietTensorFlowImport) for f in sys.meta_path):
        return
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3") in ("0", "1"):
        return  # the user asked for TensorFlow's INFO/WARNING lines
    sys.meta_path.insert(0, _QuietTensorFlowImport())
