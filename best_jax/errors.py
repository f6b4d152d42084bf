"""The one error type for bad user input: it names the file and line."""

from __future__ import annotations

import os


class InputError(ValueError):
  """Bad input from a user file or argument, reported as `path:line: message`.

  The command line prints it as one line and exits with status 2; it never
  shows a traceback for it.
  """

  def __init__(self, message: str, path: str | os.PathLike | None = None,
               line: int | None = None):
    self.message = message
    self.path = None if path is None else os.fspath(path)
    self.line = line
    where = ""
    if self.path is not None:
      where = self.path + (f":{line}" if line is not None else "") + ": "
    super().__init__(where + message)


class TrainingStopped(RuntimeError):
  """Training stopped on purpose (e.g. a non-finite loss); the message says
  at which step and which checkpoint is intact. The command line prints it as
  one line and exits with status 1."""
