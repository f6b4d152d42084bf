"""Strict reading and atomic writing of text files.

Reading: the whole file must be valid UTF-8 and non-empty; CRLF line endings
(as in several official TREC and Cranfield files) are accepted and stripped.
Writing: the content goes to a temporary file in the target directory that is
renamed over the target only when complete, so no reader ever sees half a file.
Paths may be local or URIs that `etils.epath` understands (`gs://bucket/run`).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
import uuid
from collections.abc import Iterator

from etils import epath

from best_jax.errors import InputError

_UMASK = os.umask(0)
os.umask(_UMASK)


def read_text(path: str | os.PathLike) -> str:
  """Returns the decoded text of `path` (gzip-aware), or raises InputError."""
  path = os.fspath(path)
  try:
    if is_remote(path):
      data = epath.Path(path).read_bytes()
      data = gzip.decompress(data) if path.endswith(".gz") else data
    else:
      opener = gzip.open if path.endswith(".gz") else open
      with opener(path, "rb") as f:
        data = f.read()
  except FileNotFoundError:
    raise InputError("file not found", path) from None
  except IsADirectoryError:
    raise InputError("is a directory, expected a file", path) from None
  except (OSError, EOFError) as e:
    raise InputError(f"cannot read: {e}", path) from None
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b"\n") + 1
    raise InputError(
        f"invalid UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start})",
        path, line) from None
  if not text.strip():
    raise InputError("file is empty", path)
  return text.lstrip("\ufeff")


def read_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
  """Yields `(line_number, line)` with line endings (LF or CRLF) removed."""
  for number, line in enumerate(read_text(path).split("\n"), start=1):
    yield number, line.removesuffix("\r")


def is_remote(path: str | os.PathLike) -> bool:
  """True for URIs such as `gs://bucket/dir` (not local files)."""
  return "://" in os.fspath(path)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w") -> Iterator:
  """Opens a temporary file that replaces `path` only if the block succeeds."""
  path = os.fspath(path)
  if is_remote(path):
    with _atomic_write_remote(epath.Path(path), mode) as f:
      yield f
    return
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory,
                             prefix=f".{os.path.basename(path)}.", suffix=".tmp")
  try:
    encoding = None if "b" in mode else "utf-8"
    with os.fdopen(fd, mode, encoding=encoding) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; use the usual mode.
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(FileNotFoundError):
      os.remove(tmp)
    raise


@contextlib.contextmanager
def _atomic_write_remote(path: epath.Path, mode: str) -> Iterator:
  """`atomic_write` for object stores: a temporary object renamed at the end."""
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
  try:
    with tmp.open(mode) as f:
      yield f
    tmp.replace(path)
  except BaseException:
    with contextlib.suppress(Exception):
      tmp.unlink()
    raise
