"""Atomic writes: readers see the old file (or directory) or the new one, never half of one; and the
one JSONL reader.

Every output of the project (scored records, metrics, plots, checkpoints, saved models, docs
tables) goes through these, so one interrupted run never leaves a truncated file behind.
The temporary sibling lives in the target's directory, so the final `os.replace`/`os.rename`
is an atomic rename on one filesystem.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO

from grpo_rewards.errors import UserError

STDIO = Path("-")  # `--input -` reads standard input, `--output -` writes standard output


def _usual_mode(path: str | Path, directory: bool = False) -> None:
    # mkstemp/mkdtemp create private files; outputs are ordinary data, so give them the umask's mode.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if directory else 0o666) & ~umask)


@contextmanager
def atomic_file(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary sibling of `path` for writing (`"w"` text in UTF-8, or `"wb"`).

    On a clean exit the data is flushed to disk and renamed over `path`; after an error or a
    Ctrl-C the temporary file is removed and `path` is untouched. `OSError`s from creating the
    file propagate, so a caller can turn them into a user-facing message.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes with mode 'w' or 'wb', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        _usual_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8, or bytes) to `path` atomically; returns the path."""
    with atomic_file(path, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)
    return Path(path)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary sibling path for a writer that wants a file name (matplotlib, `torch.save`).

    The writer creates the file at the yielded path; on a clean exit it is renamed over `path`.
    The suffix is kept, because some writers choose the format from it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".part{path.suffix}")
    os.close(fd)
    try:
        yield Path(tmp)
        _usual_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_directory(target: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling directory of `target`; on success it replaces `target` in one rename.

    A crash leaves either the old directory or the new one, never a half-written one.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    _usual_mode(tmp, directory=True)
    try:
        yield tmp
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{os.getpid()}"
            os.rename(target, old)
        os.rename(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def jsonl_lines(source: str | Path | BinaryIO) -> Iterator[tuple[int, Any, str | None]]:
    """Each non-blank line of a JSONL file or binary stream: (line number, value, None), or
    (line number, None, what is wrong) where the line is not JSON in UTF-8. The caller decides
    whether one bad line stops it or all are reported."""
    with (open(source, "rb") if isinstance(source, (str, os.PathLike)) else _borrowed(source)) as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                yield lineno, json.loads(raw.decode("utf-8")), None
            except UnicodeDecodeError as exc:
                yield lineno, None, f"not valid UTF-8 (byte {exc.start + 1} of the line)"
            except json.JSONDecodeError as exc:
                yield lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})"


@contextmanager
def _borrowed(stream: BinaryIO) -> Iterator[BinaryIO]:
    yield stream  # a stream the caller opened (stdin) stays open


def _file_state(path: Path) -> tuple[int, int, int] | None:
    """What tells one version of a file from another: (inode, mtime, size); None when absent."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class OutputFile:
    """A command's output file (`--output`), checked before any work and able to say afterwards whether it was written.

    The output is replaced in one rename (`atomic_file`), so after a Ctrl-C it is either as it was or
    complete; comparing it with its state before the work says which, wherever the interrupt landed.
    """

    def __init__(self, path: str | Path, inputs: Iterable[str | Path] = (), flag: str = "--output") -> None:
        self.path = Path(path)
        if self.path == STDIO:
            self.before = None
            return
        if self.path.is_dir():
            raise UserError(f"{flag} {path}: is a directory; name a file to write")
        for source in inputs:
            source = Path(source)
            if source != STDIO and (self.path.resolve() == source.resolve()
                                    or (self.path.exists() and source.exists() and self.path.samefile(source))):
                raise UserError(f"{flag} {path}: is the input file; it would be overwritten with the results")
        self.before = _file_state(self.path)

    def outcome(self) -> str:
        """What an interrupt leaves: the truth about this output."""
        if self.path == STDIO:
            return "standard output holds whatever results were printed before it"
        if _file_state(self.path) == self.before:
            return f"no output written ({self.path} {'unchanged' if self.before else 'not created'})"
        return f"{self.path} was already written in full"
