"""Durable, atomic file replacement that never writes through a symbolic link.

Every file autodeuq writes (catalog files, ``ensemble.json``, ``metrics.json``, figures,
predictions, exported members) goes through :func:`atomic_write`: the bytes go to a new
temporary file in the destination's folder, created exclusively and without following links
(``O_EXCL | O_NOFOLLOW``), which is fsynced, renamed over the destination, and the folder is
fsynced. A crash at any instant leaves either the old file or the new one, never a mix, and a
link planted at either name is replaced, never written through (the POSIX rename and fsync
rules; Pillai et al., "All File Systems Are Not Created Equal", OSDI 2014).

This module depends on the standard library and :mod:`autodeuq.core.errors` only, so every layer may
use it.
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from autodeuq.core.errors import AutoDEUQError

__all__ = ["atomic_write", "refuse_linked_folders", "WriteError", "TEMP_SUFFIX"]

#: Temporary files are dot-names ending in this suffix: a reader never takes them for data, and
#: a writer reopening a folder knows them for leftovers of a crash.
TEMP_SUFFIX = ".tmp"

O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class WriteError(AutoDEUQError, RuntimeError):
    """A file cannot be written: the message names it and says why."""


def refuse_linked_folders(root: str | Path, folder: str | Path, root_name: str = "the run directory") -> None:
    """Refuse a symbolic link among the folders between ``root`` and ``folder``, when ``folder``
    lies inside ``root``.

    :func:`atomic_write` replaces a link at a file's own name, but a linked folder on the way
    would still take every file written below it elsewhere. Inside a run directory every path
    component is treated alike: one that is a link is refused, whatever its name. The paths
    are compared as written (made absolute, not resolved), so a ``root`` reached through a
    link of the user's own is accepted; ``root`` itself is not checked.

    Raises
    ------
    WriteError
        Naming the linked folder.
    """
    root, folder = Path(os.path.abspath(root)), Path(os.path.abspath(folder))
    if folder == root or not folder.is_relative_to(root):
        return
    current = root
    for part in folder.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            raise WriteError(f"{current}: is a symbolic link inside {root_name} {root}; refusing to write through "
                             f"it (remove it, or give an output path outside the run directory)")


def os_reason(exc: OSError) -> str:
    """The operating system's words for ``exc`` ("No space left on device", ...)."""
    return exc.strerror or str(exc) or type(exc).__name__


def _temp_path(path: Path) -> Path:
    # Random, so a name cannot be planted in advance; a dot-name ending in TEMP_SUFFIX, so a
    # writer reopening the folder knows it for a leftover.
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; elsewhere the OS gives no handle to sync)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def refuse_special(path: str | Path) -> None:
    """Raise ``OSError`` (naming ``path``) when ``path`` exists and is neither a regular file nor a
    symbolic link: a device, a FIFO, a socket or a folder is never replaced by a file (a rename
    over ``/dev/full`` run as root would replace the device; over a FIFO, its reader would get
    nothing)."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # nothing there to replace
        return
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    kind = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO",
            stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(mode), "not a regular file")
    raise OSError(errno.EEXIST, f"exists and is {kind}, not a regular file; refusing to replace it "
                                f"(give the path of a regular file)", str(path))


def probe_folder(folder: str | Path) -> None:
    """Create, then remove, a temporary file in ``folder``: raises the ``OSError`` of a folder where
    no file can be made (read-only, ``/proc``, no permission), so that a command finds it before
    its work rather than after."""
    _write_temp(Path(folder) / ".autodeuq-probe", b"").unlink()


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same absolute path, or the same file through a
    link (symbolic or hard)."""
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_temp(path: Path, data: bytes) -> Path:
    """Write ``data`` to a new temporary file next to ``path`` and fsync it.

    The name is created exclusively and without following links: a file or link already there
    (planted, say) is never opened, another random name is tried instead.
    """
    for _ in range(16):
        tmp = _temp_path(path)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def _publish(tmp: Path, path: Path) -> None:
    """Atomically give the complete temporary file its final name (durable once its folder is
    fsynced). A rename replaces a link at ``path`` itself, never the file it points to."""
    os.replace(tmp, path)


def replace_file(path: Path, data: bytes) -> None:
    """:func:`atomic_write` that lets the ``OSError`` through (for callers with their own error)."""
    replace_files([(path, data)])


def replace_files(files) -> None:
    """:func:`replace_file` for several ``(path, data)`` at once: each file written and fsynced,
    renamed, then each folder fsynced once (not once per file). Each file is replaced atomically;
    when one fails, the ones before it may already be replaced."""
    files = list(files)
    for path, _ in files:
        refuse_special(path)
    temps = []
    path = None
    try:
        for path, data in files:
            temps.append((_write_temp(path, data), path))
        for tmp, path in temps:
            _publish(tmp, path)
        for folder in dict.fromkeys(path.parent for _, path in temps):
            path = folder
            _fsync_dir(folder)
    except BaseException as exc:
        for tmp, _ in temps:
            with contextlib.suppress(OSError):  # gone already when its rename succeeded
                tmp.unlink()
        if isinstance(exc, OSError) and exc.filename is None and path is not None:
            # os.write and os.fsync name no file: "No space left on device" alone does not say where
            raise OSError(exc.errno, os_reason(exc), str(path)) from None
        raise


def atomic_write(path: str | Path, data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically and durably, never writing through a link.

    The bytes go to a new temporary file in the same folder (created with ``O_EXCL |
    O_NOFOLLOW``), which is fsynced and renamed over ``path``, and the folder is fsynced; on any
    failure the temporary file is removed and ``path`` is left as it was.

    Parameters
    ----------
    path : str or Path
    data : bytes

    Returns
    -------
    Path

    Raises
    ------
    WriteError
        The file cannot be written (disk full, read-only folder, ``path`` is a folder, ...);
        the message names it and says why.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     written = atomic_write(Path(folder) / "a.json", b"{}")
    ...     print(written.read_bytes(), [p.name for p in Path(folder).iterdir()])
    b'{}' ['a.json']
    """
    path = Path(path)
    try:
        replace_file(path, bytes(data))
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {os_reason(exc)}") from None
    return path
