"""Training examples stored as array_record files, read by random access.

An example is a flat `{name: numpy array}` dict. `write_array_record` stores
examples (msgpack-encoded, one record each, group size 1 for cheap random
reads); `ArrayRecordSource` reads them back by global index over one or more
files. Any object with `__len__` and `__getitem__` returning such dicts (e.g.
`tfds.data_source(...)` of an array_record TFDS dataset, or a list) can stand
in for `ArrayRecordSource` in `best_jax.data.pipeline`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
from flax import serialization

from best_jax.errors import InputError

Example = dict[str, np.ndarray]


def encode_example(example: Mapping[str, np.ndarray]) -> bytes:
  """Serializes a `{name: array}` example with msgpack."""
  return serialization.msgpack_serialize(
      {name: np.asarray(value) for name, value in example.items()})


def decode_example(record: bytes) -> Example:
  """Inverse of `encode_example`."""
  return dict(serialization.msgpack_restore(record))


def write_array_record(path: str | os.PathLike,
                       examples: Iterable[Mapping[str, np.ndarray]],
                       encode: Callable[[Mapping], bytes] = encode_example
                       ) -> int:
  """Writes examples to one array_record file (atomically); returns the count."""
  from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
  path = os.fspath(path)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f"{path}.tmp{os.getpid()}"
  writer = array_record_module.ArrayRecordWriter(tmp, "group_size:1")
  count = 0
  try:
    for example in examples:
      writer.write(encode(example))
      count += 1
    writer.close()
    os.replace(tmp, path)
  except BaseException:
    if writer.is_open():
      writer.close()
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
  return count


class ArrayRecordSource:
  """Random access to the examples of array_record files, in file order.

  One reader per file, opened for random access (no read-ahead); a batch of
  indices is read with one batched call per file, without Python threads.
  """

  def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike],
               decode: Callable[[bytes], Example] = decode_example):
    from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
    if isinstance(paths, (str, os.PathLike)):
      paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if not paths:
      raise InputError("no array_record files given")
    self._readers = []
    for path in paths:
      if not os.path.isfile(path):
        raise InputError("array_record file not found", path)
      try:
        reader = array_record_module.ArrayRecordReader(
            path, "readahead_buffer_size:0")
      except (RuntimeError, ValueError) as e:
        raise InputError(f"not an array_record file: {e}", path) from None
      if not reader.ok():
        raise InputError("not an array_record file (or a damaged one)", path)
      self._readers.append(reader)
    self.paths = paths
    self._decode = decode
    # Global index of each file's first record, and the total at the end.
    self._starts = np.cumsum([0] + [r.num_records() for r in self._readers])

  def __len__(self) -> int:
    return int(self._starts[-1])

  def __getitem__(self, index: int) -> Example:
    return self.__getitems__([index])[0]

  def __getitems__(self, indices: Sequence[int]) -> list[Example]:
    indices_n = np.asarray(indices, dtype=np.int64)
    if indices_n.size and (indices_n.min() < 0 or
                           indices_n.max() >= len(self)):
      raise IndexError(f"record index out of range [0, {len(self)})")
    files_n = np.searchsorted(self._starts, indices_n, side="right") - 1
    out: list[Example | None] = [None] * len(indices_n)
    for file in np.unique(files_n):
      (rows,) = np.nonzero(files_n == file)
      positions = (indices_n[rows] - self._starts[file]).tolist()
      for row, record in zip(rows, self._readers[file].read(positions)):
        out[row] = self._decode(record)
    return out
