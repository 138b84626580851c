"""Atomic writes: an interrupted writer leaves the old file or directory, never half of a new one."""

from __future__ import annotations

import os
import stat

import pytest

from grpo_rewards.fileio import atomic_directory, atomic_file, atomic_path, write_atomic


def _names(directory):
    return sorted(p.name for p in directory.iterdir())


def test_atomic_file_replaces_only_when_complete(tmp_path):
    target = tmp_path / "out.jsonl"
    target.write_text("old\n")
    with pytest.raises(KeyboardInterrupt), atomic_file(target) as fh:
        fh.write("half")
        raise KeyboardInterrupt
    assert target.read_text() == "old\n"
    assert _names(tmp_path) == ["out.jsonl"]  # the temporary file is gone too
    with atomic_file(target) as fh:
        fh.write("new ünïcode\n")
    assert target.read_text(encoding="utf-8") == "new ünïcode\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # not mkstemp's private 0600


def test_write_atomic_text_and_bytes_and_missing_parent(tmp_path):
    assert write_atomic(tmp_path / "a" / "b.txt", "text").read_text() == "text"
    assert write_atomic(tmp_path / "c.bin", b"\x00\x01").read_bytes() == b"\x00\x01"
    with pytest.raises(ValueError, match="mode"):
        with atomic_file(tmp_path / "d", "a"):
            pass


def test_atomic_path_keeps_the_suffix_for_writers_that_read_it(tmp_path):
    target = tmp_path / "plot.png"
    with atomic_path(target) as tmp:
        assert tmp.suffix == ".png" and tmp.parent == tmp_path
        tmp.write_bytes(b"png")
    assert target.read_bytes() == b"png"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError
    assert target.read_bytes() == b"png" and _names(tmp_path) == ["plot.png"]


def test_atomic_directory_keeps_the_old_copy_on_failure(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "weights").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as tmp:
            (tmp / "weights").write_text("half")
            raise RuntimeError("crash while writing")
    assert (target / "weights").read_text() == "old"
    with atomic_directory(target) as tmp:
        (tmp / "weights").write_text("new")
    assert (target / "weights").read_text() == "new"
    assert _names(tmp_path) == ["model"]  # no temporary or old copies left
