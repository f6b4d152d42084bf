"""The input pipeline: per-host reads, fixed shapes, prefetch, resumable.

A random-access source (anything with `__len__` and `__getitem__` returning
`{name: array}` examples) is read once, in order: global batch t is examples
`[t*B, (t+1)*B)`, and the last batch is padded with blank rows marked false
in `example_mask`. The order is the caller's (the experiment draws its whole
training schedule up front; the scorer lays out its rows), so batches are a
pure function of the step.

Each process reads only its own rows of every global batch: the rows its
devices hold under the batch sharding (`process_rows`), or the p-th
contiguous block without a sharding. So the global batch at step t is the
same whatever the number of processes. Examples are padded to fixed
per-feature shapes and stacked; a background thread reads, packs and (with a
sharding) transfers `prefetch` batches ahead, forming global arrays with
`jax.make_array_from_process_local_data`, while the devices work.

An `arrange` function may reorder each process-local batch before it is
transferred (`best_jax train` balances gradient-accumulation micro-batches
within each data shard's block this way), still a pure function of the
step.

`get_state()` is the number of examples of the batches handed out (not the
prefetched ones), the same on every process; `set_state` continues exactly
there, so a resumed run neither skips nor repeats an example.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import jax
import numpy as np

from best_jax.errors import InputError

Batch = dict[str, Any]
# Marks real examples; padding rows of the last batch are False. Same name as
# in `best_jax.train.steps` batches.
EXAMPLE_MASK = "example_mask"


class Source(Protocol):
  """Random access to examples `{name: array}`."""

  def __len__(self) -> int:
    ...

  def __getitem__(self, index: int) -> Mapping[str, Any]:
    ...


@dataclasses.dataclass(frozen=True)
class Feature:
  """Fixed per-example shape of one feature; shorter arrays are padded."""
  shape: tuple[int, ...]
  dtype: Any = np.int32
  pad_value: Any = 0


def pack(examples: Sequence[Mapping[str, Any]],
         features: Mapping[str, Feature]) -> dict[str, np.ndarray]:
  """Stacks examples into `[len(examples), *shape]` arrays, padding each."""
  batch = {}
  for name, feature in features.items():
    out = np.full((len(examples),) + feature.shape, feature.pad_value,
                  dtype=feature.dtype)
    for row, example in enumerate(examples):
      if name not in example:
        raise InputError(f"example lacks feature {name!r} (has "
                         f"{sorted(example)})")
      value = np.asarray(example[name])
      if value.ndim != len(feature.shape) or any(
          v > f for v, f in zip(value.shape, feature.shape)):
        raise InputError(f"feature {name!r} has shape {value.shape}, which "
                         f"does not fit the fixed shape {feature.shape}")
      out[(row,) + tuple(slice(0, d) for d in value.shape)] = value
    batch[name] = out
  return batch


def process_rows(sharding: jax.NamedSharding, size: int) -> np.ndarray:
  """Rows of a global batch of `size` that this process's devices hold under
  `sharding` (the batch axis is its spec's first entry), in local order."""
  batch_sharding = jax.NamedSharding(sharding.mesh, jax.P(sharding.spec[0]))
  starts = set()
  for index in batch_sharding.addressable_devices_indices_map(
      (size,)).values():
    starts.add((index[0].start or 0, index[0].stop or size))
  return np.concatenate([np.arange(a, b) for a, b in sorted(starts)])


class InputPipeline:
  """Iterator of fixed-shape batches of this process's rows; checkpointable.

  Args:
    source: random-access examples, read in order, once.
    features: the fixed shape, dtype and padding of every batch feature.
    global_batch_size: examples per step over all processes.
    sharding: a `jax.NamedSharding` whose spec's first entry shards the batch
      axis (e.g. `trainer.batch_sharding`): each process reads the rows its
      devices hold, and batches are global `jax.Array`s. Without it, process
      p reads the p-th contiguous block and gets numpy arrays.
    process_index, process_count: this process's block when `sharding` is
      None (default: the JAX process index and count).
    prefetch: batches prepared ahead on a background thread (0: none).
    arrange: applied to each process-local batch of numpy arrays (whole
      data-shard blocks, `example_mask` included) before it is transferred,
      e.g. `train.token_budget.balance_micro_batches`.
  """

  def __init__(self, source: Source, features: Mapping[str, Feature], *,
               global_batch_size: int, sharding: Any = None,
               process_index: int | None = None,
               process_count: int | None = None, prefetch: int = 2,
               arrange: Callable[[Batch], Batch] | None = None):
    self._source = source
    self._arrange = arrange
    self._features = dict(features)
    self._size = len(source)
    if global_batch_size < 1:
      raise InputError(f"global batch size {global_batch_size} must be >= 1")
    if EXAMPLE_MASK in self._features:
      raise InputError(f"feature name {EXAMPLE_MASK!r} is reserved")
    self.global_batch_size = global_batch_size
    self._sharding = sharding
    self._prefetch = prefetch
    if sharding is not None:
      self._rows = process_rows(sharding, global_batch_size)
    else:
      index = jax.process_index() if process_index is None else process_index
      count = jax.process_count() if process_count is None else process_count
      if global_batch_size % count:
        raise InputError(f"global batch size {global_batch_size} is not a "
                         f"multiple of the process count {count}")
      local = global_batch_size // count
      self._rows = np.arange(index * local, (index + 1) * local)
    self._consumed = 0  # examples handed out so far
    self._thread: threading.Thread | None = None
    self._queue: queue.Queue | None = None
    self._stop = threading.Event()

  @property
  def local_rows(self) -> np.ndarray:
    """Rows of each global batch that this process reads."""
    return self._rows.copy()

  def get_state(self) -> int:
    """Examples of the batches returned so far."""
    return min(self._consumed, self._size)

  def set_state(self, state: int) -> None:
    """Continues from a `get_state()`; the next batch starts exactly there."""
    try:
      position = int(state)
    except (TypeError, ValueError):
      raise InputError(f"invalid pipeline state {state!r}") from None
    if not 0 <= position <= self._size or position % self.global_batch_size:
      raise InputError(f"pipeline state {state!r} is not a batch boundary of "
                       f"{self._size} examples")
    self._stop_thread()
    self._consumed = position

  def _make_batch(self, start: int) -> Batch | None:
    """The local part of the global batch at position `start`."""
    if start >= self._size:
      return None
    positions = start + self._rows
    valid = positions < self._size
    batch = pack([self._source[int(i)] for i in positions[valid]],
                 self._features)
    if not valid.all():  # The last batch: pad with blank rows.
      for name, feature in self._features.items():
        full = np.full((len(positions),) + feature.shape, feature.pad_value,
                       dtype=feature.dtype)
        full[valid] = batch[name]
        batch[name] = full
    batch[EXAMPLE_MASK] = valid
    if self._arrange is not None:
      batch = self._arrange(batch)
    if self._sharding is None:
      return batch
    sharding = jax.NamedSharding(self._sharding.mesh,
                                 jax.P(self._sharding.spec[0]))
    return {name: jax.make_array_from_process_local_data(
        sharding, value, (self.global_batch_size,) + value.shape[1:])
            for name, value in batch.items()}

  def _put(self, out: queue.Queue, item) -> bool:
    """Puts `item` unless asked to stop first; returns whether it did."""
    while not self._stop.is_set():
      try:
        out.put(item, timeout=0.1)
        return True
      except queue.Full:
        pass
    return False

  def _produce(self, start: int, out: queue.Queue) -> None:
    """Background thread: batches from `start` on, then None at the end."""
    try:
      while not self._stop.is_set():
        batch = self._make_batch(start)
        start += self.global_batch_size
        if not self._put(out, (batch, start)) or batch is None:
          return
    except BaseException as e:  # pylint: disable=broad-except
      self._put(out, (e, start))  # raised again by the consumer

  def _stop_thread(self) -> None:
    if self._thread is not None:
      self._stop.set()
      self._thread.join()
      self._thread = None
      self._queue = None
      self._stop.clear()

  def close(self) -> None:
    self._stop_thread()

  def __enter__(self) -> InputPipeline:
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def __iter__(self) -> Iterator[Batch]:
    return self

  def __next__(self) -> Batch:
    if self._prefetch <= 0:
      batch = self._make_batch(self._consumed)
      if batch is None:
        raise StopIteration
      self._consumed += self.global_batch_size
      return batch
    if self._thread is None:
      self._queue = queue.Queue(maxsize=self._prefetch)
      self._thread = threading.Thread(
          target=self._produce, args=(self._consumed, self._queue),
          name="best_jax-input", daemon=True)
      self._thread.start()
    batch, end = self._queue.get()
    if isinstance(batch, BaseException):
      self._stop_thread()
      raise batch
    if batch is None:
      self._stop_thread()
      raise StopIteration
    self._consumed = end
    return batch
