"""The experiment's work directory: paths, process-0 writes, shared reads.

Local directories and object-store URIs (`gs://bucket/run`) alike, through
`etils.epath`. Process 0 writes every file, atomically; orbax checkpoints are
written by all processes, as orbax requires. Files that decide how a rerun
resumes are read by process 0 and broadcast (`read_json`), so every process
makes the same decision without reading a file it did not write.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import jax
from etils import epath

from best_jax.data.files import atomic_write, is_remote, read_text
from best_jax.train import distributed

LOG = "log.txt"


class Workdir:
  """One experiment's directory (`root`), shared by all processes."""

  def __init__(self, root: str | os.PathLike):
    root = os.fspath(root)
    self.root = epath.Path(root if is_remote(root) else os.path.abspath(root))
    self.writes = jax.process_index() == 0
    self._log_lines: list[str] = []
    if self.writes:
      self.root.mkdir(parents=True, exist_ok=True)
      if is_remote(root) and (self.root / LOG).exists():
        self._log_lines = (self.root / LOG).read_text().splitlines()

  def path(self, *parts: str) -> epath.Path:
    return self.root.joinpath(*parts)

  @contextlib.contextmanager
  def output(self, *parts: str, mode: str = "w") -> Iterator:
    """Writes `parts` atomically on process 0; elsewhere into a discarded
    buffer (every process runs the same code)."""
    if not self.writes:
      yield io.BytesIO() if "b" in mode else io.StringIO()
      return
    with atomic_write(self.path(*parts), mode) as f:
      yield f

  def write_json(self, value: Any, *parts: str, indent: int | None = None
                 ) -> None:
    with self.output(*parts) as f:
      json.dump(value, f, indent=indent, default=float)
      f.write("\n")

  @staticmethod
  def read_local_json(path: epath.Path) -> Any:
    """A JSON file as this process reads it (None when missing)."""
    return json.loads(read_text(path)) if path.exists() else None

  @staticmethod
  def broadcast(value: Any) -> Any:
    """Process 0's `value` on every process (`distributed.broadcast_json`)."""
    return distributed.broadcast_json(value)

  def read_json(self, *parts: str) -> Any:
    """Process 0's reading of a JSON file (None when missing), on every
    process."""
    value = self.read_local_json(self.path(*parts)) if self.writes else None
    return self.broadcast(value)

  def log(self, message: str) -> None:
    """A time-stamped line on stdout and in `log.txt` (process 0)."""
    if not self.writes:
      return
    line = f"[{time.strftime('%H:%M:%S')}] {message}"
    print(line, flush=True)
    if is_remote(self.root):  # Object stores cannot append: rewrite.
      self._log_lines.append(line)
      with atomic_write(self.path(LOG)) as f:
        f.write("\n".join(self._log_lines) + "\n")
    else:
      with open(self.path(LOG), "a", encoding="utf-8") as f:
        f.write(line + "\n")

  @staticmethod
  def log_process(message: str) -> None:
    """A line on this process's stdout, prefixed with the process index
    (every process: e.g. which rows each host built)."""
    print(f"[process {jax.process_index()}/{jax.process_count()}] {message}",
          flush=True)
