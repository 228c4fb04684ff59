"""Atomic, durable file replacement: the one writer every module uses."""
import errno
import os

import pytest

from autodeuq import fileio


def test_atomic_write_replaces_the_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b"old")
    assert fileio.atomic_write(path, b"new") == path
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_atomic_write_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync folder" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync file")
        real_fsync(fd)

    def replace(src, dst):
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(fileio.os, "fsync", fsync)
    monkeypatch.setattr(fileio.os, "replace", replace)
    fileio.atomic_write(tmp_path / "m.json", b"{}")
    assert events == ["fsync file", "rename", "fsync folder"]


def test_files_replaced_together_fsync_each_folder_once_after_every_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(f"fsync {os.path.basename(os.readlink(f'/proc/self/fd/{fd}'))}"
                      if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync file")
        real_fsync(fd)

    def replace(src, dst):
        events.append("rename")
        real_replace(src, dst)

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.setattr(fileio.os, "fsync", fsync)
    monkeypatch.setattr(fileio.os, "replace", replace)
    fileio.replace_files([(tmp_path / "a" / "1", b"1"), (tmp_path / "b" / "1", b"2"), (tmp_path / "a" / "2", b"3")])
    assert events == ["fsync file"] * 3 + ["rename"] * 3 + ["fsync a", "fsync b"]
    assert [(tmp_path / p).read_bytes() for p in ("a/1", "b/1", "a/2")] == [b"1", b"2", b"3"]


def test_a_failed_write_is_one_error_naming_the_file_and_keeps_the_old_content(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    path.write_bytes(b"old")

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio, "_write_all", full)
    with pytest.raises(fileio.WriteError, match=f"cannot write {path}: No space left on device"):
        fileio.atomic_write(path, b"new")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_a_folder_in_the_way_is_a_write_error(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(fileio.WriteError, match="cannot write"):
        fileio.atomic_write(tmp_path / "out", b"x")
