"""The training input pipeline: per-host reads, seeded shuffles, fixed shapes.

The examples of a random-access source (`best_jax.data.records.ArrayRecordSource`,
a `tfds.data_source`, or a list) form one endless *stream*: epoch e is the
permutation `default_rng([seed, e]).permutation(n)` of the n examples (the
identity when not shuffling), and the epochs follow each other. Global batch t
is stream positions `[t*B, (t+1)*B)`; a batch may span two epochs, so no
example is ever dropped and every epoch shows each example exactly once.

Each process reads only its own rows of every global batch: the rows that its
devices hold under the batch sharding (contiguous blocks `[p*b, (p+1)*b)` when
no sharding is given), so the global batch at step t is the same whatever the
number of processes. Examples are padded to fixed per-feature shapes and
stacked; a background thread reads, packs and (with a sharding) transfers
`prefetch` batches ahead, forming global arrays with
`jax.make_array_from_process_local_data`.

The position is checkpointable: `get_state()` is `{"epoch", "position"}` after
the last batch handed out (not the prefetched ones), the same on every
process; `best_jax.train.loop.fit` saves it with the model and `set_state`
continues exactly there, so a resumed run neither skips nor repeats an example.

Every batch carries a boolean `example_mask` [batch]: all true while
repeating (training); with `repeat=False` (evaluation) the stream is one epoch
and the last batch's rows past its end are padding, marked false.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import jax
import numpy as np

from best_jax.errors import InputError

Batch = dict[str, Any]
# Marks real examples; padding rows (end of a single pass) are False. Same
# name as in `best_jax.train.steps` batches.
EXAMPLE_MASK = "example_mask"


class Source(Protocol):
  """Random access to examples `{name: array}` (`__getitems__` optional)."""

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
    source: random-access examples.
    features: the fixed shape, dtype and padding of every batch feature.
    global_batch_size: examples per step over all processes.
    seed: shuffle seed (epoch e uses `[seed, e]`).
    shuffle: permute each epoch; otherwise source order.
    repeat: endless epochs (training); else one pass, the last batch padded.
    sharding: a `jax.NamedSharding` whose spec's first entry shards the batch
      axis (e.g. `trainer.batch_sharding`): each process reads the rows its
      devices hold. Without it, process p reads the p-th contiguous block.
    device_put: with `sharding`, hand out global `jax.Array`s (transferred on
      the background thread); False hands out this process's rows as numpy
      (for `fit`, whose `trainer.put` makes the global arrays).
    process_index, process_count: this process's block when `sharding` is None
      (default: the JAX process index and count).
    prefetch: batches prepared ahead on a background thread (0: none).
  """

  def __init__(self, source: Source, features: Mapping[str, Feature], *,
               global_batch_size: int, seed: int = 0, shuffle: bool = True,
               repeat: bool = True, sharding: Any = None,
               device_put: bool = True, process_index: int | None = None,
               process_count: int | None = None, prefetch: int = 2):
    self._source = source
    self._features = dict(features)
    self._size = len(source)
    if self._size == 0:
      raise InputError("the dataset has no examples")
    if global_batch_size < 1:
      raise InputError(f"global batch size {global_batch_size} must be >= 1")
    if EXAMPLE_MASK in self._features:
      raise InputError(f"feature name {EXAMPLE_MASK!r} is reserved")
    self.global_batch_size = global_batch_size
    self._seed = seed
    self._shuffle = shuffle
    self._repeat = repeat
    self._sharding = sharding
    self._device_put = device_put and sharding is not None
    self._prefetch = prefetch
    self._rows = self._process_rows(sharding, process_index, process_count)
    self._orders: dict[int, np.ndarray] = {}
    self._consumed = 0  # stream positions handed out so far
    self._thread: threading.Thread | None = None
    self._queue: queue.Queue | None = None
    self._stop = threading.Event()

  # ---------------------------------------------------------------- layout --

  def _process_rows(self, sharding, process_index, process_count
                    ) -> np.ndarray:
    if sharding is not None:
      return process_rows(sharding, self.global_batch_size)
    if process_index is None or process_count is None:
      process_index = jax.process_index()
      process_count = jax.process_count()
    size = self.global_batch_size
    if size % process_count:
      raise InputError(f"global batch size {size} is not a multiple of the "
                       f"process count {process_count}")
    local = size // process_count
    return np.arange(process_index * local, (process_index + 1) * local)

  @property
  def num_examples(self) -> int:
    return self._size

  @property
  def steps_per_epoch(self) -> float:
    """Global batches per epoch (fractional when batches span epochs)."""
    return self._size / self.global_batch_size

  @property
  def local_rows(self) -> np.ndarray:
    """Rows of each global batch that this process reads."""
    return self._rows.copy()

  def _order(self, epoch: int) -> np.ndarray:
    """The example order of `epoch` (the last two are cached)."""
    if epoch not in self._orders:
      if self._shuffle:
        order = np.random.default_rng([self._seed, epoch]).permutation(
            self._size)
      else:
        order = np.arange(self._size)
      self._orders = {e: o for e, o in self._orders.items() if e == epoch - 1}
      self._orders[epoch] = order
    return self._orders[epoch]

  # ----------------------------------------------------------------- state --

  def get_state(self) -> dict[str, int]:
    """Position after the last batch returned: `{"epoch", "position"}`."""
    consumed = (self._consumed if self._repeat
                else min(self._consumed, self._size))
    epoch, position = divmod(consumed, self._size)
    return {"epoch": int(epoch), "position": int(position)}

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Continues from a `get_state()`; the next batch starts exactly there."""
    try:
      epoch, position = int(state["epoch"]), int(state["position"])
    except (KeyError, TypeError, ValueError):
      raise InputError(f"invalid pipeline state {state!r}") from None
    if epoch < 0 or not 0 <= position < self._size:
      raise InputError(f"pipeline state {state!r} is out of range for "
                       f"{self._size} examples")
    self._stop_thread()
    self._consumed = epoch * self._size + position

  # ---------------------------------------------------------------- batches --

  def _make_batch(self, start: int) -> Batch | None:
    """The local part of the global batch at stream position `start`."""
    positions = start + self._rows
    end = self._size if not self._repeat else None
    if end is not None and start >= end:
      return None
    valid = (np.ones(len(positions), bool) if end is None
             else positions < end)
    indices = []
    for position in positions[valid]:
      epoch, offset = divmod(int(position), self._size)
      indices.append(int(self._order(epoch)[offset]))
    if hasattr(self._source, "__getitems__"):
      examples = list(self._source.__getitems__(indices))
    else:
      examples = [self._source[i] for i in indices]
    batch = pack(examples, self._features)
    if not valid.all():  # the end of a single pass: pad with blank rows
      for name, feature in self._features.items():
        full = np.full((len(positions),) + feature.shape, feature.pad_value,
                       dtype=feature.dtype)
        full[valid] = batch[name]
        batch[name] = full
    batch[EXAMPLE_MASK] = valid
    return self._to_device(batch)

  def _to_device(self, batch: dict[str, np.ndarray]) -> Batch:
    if not self._device_put:
      return batch
    mesh, axes = self._sharding.mesh, self._sharding.spec[0]
    out = {}
    for name, value in batch.items():
      sharding = jax.NamedSharding(mesh, jax.P(axes))
      global_shape = (self.global_batch_size,) + value.shape[1:]
      out[name] = jax.make_array_from_process_local_data(
          sharding, value, global_shape)
    return out

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

  def close(self) -> None:
    """Stops the background thread (the state is kept)."""
    self._stop_thread()

  def __enter__(self) -> InputPipeline:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
