"""Segment selection: score the valid segments of (query, document) pairs on
the devices, and take each pair's best segment.

BeST's `i_{q,d} = argmax_j f_θ(q, d_j)` over the *valid* segments only
(SPEC §1 Eq.4/5; the jittable `train.best.masked_argmax`, which the joint
step uses too). `SegmentScorer` scores many pairs:

- the parameters stay on the devices, sharded, from training to scoring;
- each process builds only the rows of the documents it owns (the i-th
  distinct document goes to process i mod P) and segments only those;
- rows go into length buckets (one compiled shape each) and through the
  input pipeline in fixed-size chunks: a background thread builds and
  transfers the next chunk while the devices score the current one;
- each chunk's scores are scattered, on the devices, into a `[pairs,
  segments]` array (−inf where a pair has no such segment): nothing comes
  back to the host per chunk; the model's forward pass compiles once per
  bucket, and only the cheap scatter once per array shape (`BufferStep`,
  shared by the scorers of one model);
- `PairScores.select()` is a jitted vmap of the masked argmax over the
  pairs; only the chosen indices come back.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from tqdm.auto import tqdm

from best_jax.data.pipeline import Feature, InputPipeline, process_rows
from best_jax.train.best import masked_argmax

Pair = tuple[str, str]


def _valid(scores: jax.Array | np.ndarray):
  """Scored entries of a `PairScores` array (NaN scores count as scored)."""
  return ~(scores == -np.inf)


@jax.jit
def _select_p(scores_ps: jax.Array) -> jax.Array:
  """Each pair's best segment, a vmap over pairs of `masked_argmax`."""
  best = jax.vmap(lambda s: masked_argmax(s, _valid(s))[0])
  return best(scores_ps)


@dataclasses.dataclass(frozen=True)
class PairScores:
  """Segment scores of `pairs`: `scores_ps[i, j]` is segment j of pair i,
  −inf past the pair's last scored segment (device array, replicated; rows
  past the last pair are padding)."""
  pairs: list[Pair]
  scores_ps: jax.Array

  def host(self) -> dict[Pair, np.ndarray]:
    """`{pair: float64 scores of its scored segments, in order}`."""
    scores = np.asarray(jax.device_get(self.scores_ps), np.float64)
    return {pair: scores[i][_valid(scores[i])]
            for i, pair in enumerate(self.pairs)}

  def select(self) -> dict[Pair, int]:
    """Each pair's argmax segment (earliest on ties), from the devices."""
    index = np.asarray(jax.device_get(_select_p(self.scores_ps)))
    return {pair: int(index[i]) for i, pair in enumerate(self.pairs)}


class RowSource(Protocol):
  """Model rows of (query, document segment) pairs."""
  # Fixed segment axis (e.g. `max_segments`), or None: the most any pair has.
  width: int | None

  def prepare(self, docids: Sequence[str]) -> None:
    """Segments (tokenizes) these documents, with a progress bar."""

  def num_segments(self, docid: str) -> int: ...

  def row_length(self, qid: str, docid: str, segment: int) -> int:
    """Tokens of the row, special tokens included."""

  def row(self, qid: str, docid: str, segment: int, length: int
          ) -> dict[str, np.ndarray]:
    """The model inputs of one row, `length` tokens each."""

  def features(self, length: int) -> dict[str, Feature]: ...


# A row of a chunk: `build(length) -> {name: array}` at a bucket's length.
RowBuilder = Callable[[int], dict[str, np.ndarray]]


class _ChunkRows:
  """This process's rows of one bucket as a pipeline source: in chunk c,
  the rows this process's devices hold are its rows c·n … (c+1)·n − 1 (n per
  chunk); past its last row, `blank` rows."""

  def __init__(self, rows: list[RowBuilder], length: int, blank: dict,
               local_rows: np.ndarray, chunk: int, num_chunks: int):
    self._rows, self._length, self._blank = rows, length, blank
    self._chunk, self._num_chunks = chunk, num_chunks
    self._position = {int(r): i for i, r in enumerate(local_rows)}

  def __len__(self) -> int:
    return self._chunk * self._num_chunks

  def __getitem__(self, index: int) -> dict[str, np.ndarray]:
    c, r = divmod(index, self._chunk)
    k = c * len(self._position) + self._position[r]
    if k >= len(self._rows):
      return self._blank
    return self._rows[k](self._length)


def feed(rows_by_bucket: Mapping[int, list[RowBuilder]],
         features: Callable[[int], dict[str, Feature]], *,
         rows_per_call: int, sharding: jax.NamedSharding,
         consume: Callable[[dict[str, jax.Array]], None], desc: str
         ) -> tuple[int, int]:
  """Feeds this process's rows, bucket by bucket, in global chunks of
  `rows_per_call` to `consume` (a jitted device step), through the input
  pipeline (built and transferred ahead on a background thread).

  Every process makes the same calls with the same shapes: the chunk count
  of a bucket comes from the process with the most rows in it, the others
  pad with blank rows (an index field of -1; zeros elsewhere). Returns (rows
  this process built, rows of all processes).
  """
  buckets = sorted(rows_by_bucket)
  local = np.array([len(rows_by_bucket[b]) for b in buckets])
  counts = gather(local)  # [processes, buckets]
  local_rows = process_rows(sharding, rows_per_call)
  chunks = [math.ceil(int(counts[:, i].max()) / len(local_rows))
            for i in range(len(buckets))]
  with tqdm(total=sum(chunks), desc=desc, unit="chunk", leave=False,
            disable=jax.process_index() != 0, mininterval=2.0) as bar:
    for bucket, num_chunks in zip(buckets, chunks):
      if not num_chunks:
        continue
      spec = features(bucket)
      blank = {name: np.full(f.shape, -1 if not f.shape and f.dtype ==
                             np.int32 else 0, f.dtype)
               for name, f in spec.items()}
      rows = _ChunkRows(rows_by_bucket[bucket], bucket, blank, local_rows,
                        rows_per_call, num_chunks)
      for batch in InputPipeline(rows, spec, global_batch_size=rows_per_call,
                                 sharding=sharding):
        consume(batch)
        bar.update(1)
  return int(local.sum()), int(counts.sum())


def padded_count(count: int, multiple: int = 64) -> int:
  """`count` rounded up to a multiple (fewer array shapes to compile)."""
  return -(-max(count, 1) // multiple) * multiple


def _pair_row(source: RowSource, pair: int, qid: str, docid: str,
              segment: int, length: int) -> dict[str, np.ndarray]:
  return dict(source.row(qid, docid, segment, length), pair=np.int32(pair),
              segment=np.int32(segment))


@functools.lru_cache(maxsize=None)
def _blank_fn(num_pairs: int, width: int, sharding: jax.NamedSharding):
  """A jitted `[num_pairs, width]` array of −inf (compiled once per shape)."""
  return jax.jit(lambda: jnp.full((num_pairs, width), -jnp.inf),
                 out_shardings=sharding)


class BufferStep:
  """A scorer's device step, `(params, buffer, batch) -> buffer`: each real
  row's `forward(model, batch)` output written at the row's `index` fields
  of the replicated, donated buffer (a row is real when `example_mask` is
  set and its first index is >= 0). Two jitted parts, so that the model's
  forward pass compiles once per row bucket and only the cheap scatter once
  per buffer shape; `lower` lowers them as one computation (`best_jax
  aot`)."""

  def __init__(self, trainer, forward: Callable[[nnx.Module, Any], Any],
               index: Sequence[str]):
    graphdef, index = trainer.graphdef, tuple(index)
    self._mesh = trainer.mesh
    self._index = index
    replicated = jax.NamedSharding(trainer.mesh, jax.P())
    rows = jax.NamedSharding(trainer.mesh,
                             jax.P(trainer.batch_sharding.spec[0]))

    def model_forward(params, batch):
      return forward(nnx.merge(graphdef, params), batch)

    def scatter(buffer, values_r, example_r, *index_r):
      real_r = example_r & (index_r[0] >= 0)
      first_r = jnp.where(real_r, index_r[0], buffer.shape[0])
      return buffer.at[(first_r,) + index_r[1:]].set(
          values_r.astype(buffer.dtype), mode="drop")

    def step(params, buffer, batch):
      return scatter(buffer, model_forward(params, batch),
                     batch["example_mask"], *(batch[n] for n in index))

    with jax.set_mesh(trainer.mesh):
      self.forward = jax.jit(model_forward, in_shardings=(
          trainer.param_shardings, trainer.batch_sharding),
                             out_shardings=rows)
      self.scatter = jax.jit(scatter, out_shardings=replicated,
                             donate_argnums=0)
      self._step = jax.jit(step, in_shardings=(
          trainer.param_shardings, replicated, trainer.batch_sharding),
                           out_shardings=replicated, donate_argnums=1)

  def __call__(self, params, buffer, batch):
    with jax.set_mesh(self._mesh):
      values_r = self.forward(params, batch)
      return self.scatter(buffer, values_r, batch["example_mask"],
                          *(batch[n] for n in self._index))

  def lower(self, params, buffer, batch):
    with jax.set_mesh(self._mesh):
      return self._step.lower(params, buffer, batch)


def build_score_into(trainer, names: Sequence[str] = ("input_ids",
                                                     "attention_mask",
                                                     "token_type_ids")
                     ) -> BufferStep:
  """The cross-encoder scorer's step: each row's score (float32) at
  `[pair, segment]` of a `[pairs, segments]` buffer."""
  names = tuple(names)
  return BufferStep(
      trainer, lambda model, batch: model(*(batch[n] for n in names)),
      index=("pair", "segment"))


def default_buckets(max_len: int, count: int = 4, multiple: int = 8
                    ) -> tuple[int, ...]:
  """`count` row lengths up to `max_len`, evenly spaced, multiples of 8."""
  step = max_len / count
  lengths = {min(max_len, multiple * math.ceil(step * (i + 1) / multiple))
             for i in range(count)}
  return tuple(sorted(lengths | {max_len}))


def segment_buckets(segments, kind: str) -> tuple[int, ...]:
  """The row lengths a scorer of `kind` compiles for, from the segmenter's
  config: eight buckets, evenly spaced multiples of 8, up to a
  cross-encoder's `max_len`, or up to a bi-encoder's `text_row_len` plus
  its shorter query rows (`max_query_len + 2`). Padding of the test rows
  (bench/padding_waste.py): `:cpu` 8.7% of row tokens (12.2% with four
  buckets), `:cpu_bi` 8.4% (10.1% with four)."""
  if kind == "bi":
    return tuple(sorted(set(default_buckets(segments.text_row_len, count=8))
                        | {segments.max_query_len + 2}))
  return default_buckets(segments.max_len, count=8)


class SegmentScorer:
  """Scores the valid segments of pairs with a trainer's model, on device.

  Args:
    trainer: gives the model graph, mesh and shardings (`train.trainer`).
    source: the rows (`RowSource`).
    rows_per_call: rows per model call over all processes (a multiple of
      the data-parallel devices and of the process count).
    buckets: row lengths compiled for (ascending; the last fits every row).
    names: the model's input arrays, in call order.
    score_into: the device step (`build_score_into(trainer, names)` when
      None); scorers of one trainer share one, so each shape compiles once.
  """

  def __init__(self, trainer, source: RowSource, *, rows_per_call: int,
               buckets: Sequence[int],
               names: Sequence[str] = ("input_ids", "attention_mask",
                                       "token_type_ids"),
               score_into: BufferStep | None = None):
    self.source = source
    self.rows_per_call = rows_per_call
    self.buckets = tuple(sorted(buckets))
    self._batch_sharding = trainer.batch_sharding
    self._mesh = trainer.mesh
    self.built = (0, 0)  # (rows this process built, rows of all) last call
    self._score_into = score_into or build_score_into(trainer, names)
    self._replicated = jax.NamedSharding(trainer.mesh, jax.P())

  def _blank(self, num_pairs: int, width: int) -> jax.Array:
    with jax.set_mesh(self._mesh):
      return _blank_fn(num_pairs, width, self._replicated)()

  def score(self, params: Any, pairs: Sequence[Pair], *,
            max_segments: int | None = None, desc: str = "score"
            ) -> PairScores:
    """Scores every valid segment (the first `max_segments`) of `pairs`."""
    pairs = list(pairs)
    count, me = jax.process_count(), jax.process_index()
    docids = list(dict.fromkeys(d for _, d in pairs))
    mine = {d for i, d in enumerate(docids) if i % count == me}
    self.source.prepare([d for d in docids if d in mine])
    by_bucket: dict[int, list[RowBuilder]] = {b: [] for b in self.buckets}
    most = 1
    for i, (qid, docid) in enumerate(pairs):
      if docid not in mine:
        continue
      segments = self.source.num_segments(docid)
      if max_segments is not None:
        segments = min(segments, max_segments)
      most = max(most, segments)
      for s in range(segments):
        length = self.source.row_length(qid, docid, s)
        bucket = next(b for b in self.buckets if b >= length)
        by_bucket[bucket].append(functools.partial(
            _pair_row, self.source, i, qid, docid, s))
    width = self.source.width or int(gather(np.array([most])).max())
    if max_segments is not None:
      width = min(width, max_segments)
    state = {"buffer": self._blank(padded_count(len(pairs)), width)}

    def consume(batch):
      state["buffer"] = self._score_into(params, state["buffer"], batch)
    self.built = feed(
        by_bucket, lambda length: dict(
            self.source.features(length), pair=Feature((), np.int32),
            segment=Feature((), np.int32)),
        rows_per_call=self.rows_per_call, sharding=self._batch_sharding,
        consume=consume, desc=desc)
    return PairScores(pairs, state["buffer"])

  def padding(self, pairs: Sequence[Pair], max_segments: int | None = None
              ) -> float:
    """Fraction of the encoder's row tokens spent on padding (tokens of
    padded rows and past each row's end), as `score` would lay them out on
    one process."""
    self.source.prepare(list(dict.fromkeys(d for _, d in pairs)))
    lengths = []
    for qid, docid in pairs:
      segments = self.source.num_segments(docid)
      for s in range(segments if max_segments is None
                     else min(segments, max_segments)):
        lengths.append(self.source.row_length(qid, docid, s))
    real, total = padded_tokens(lengths, self.buckets, self.rows_per_call)
    return 1.0 - real / max(total, 1)


def padded_tokens(lengths: Sequence[int], buckets: Sequence[int],
                  rows_per_call: int) -> tuple[int, int]:
  """(real, encoded) tokens of rows of `lengths` as `feed` lays them out on
  one process: each row in the shortest bucket that fits it, each bucket in
  chunks of `rows_per_call` rows (the last chunk padded)."""
  by_bucket: dict[int, list[int]] = {b: [] for b in buckets}
  for length in lengths:
    by_bucket[next(b for b in sorted(buckets) if b >= length)].append(length)
  real = sum(map(sum, by_bucket.values()))
  total = sum(math.ceil(len(values) / rows_per_call) * rows_per_call * bucket
              for bucket, values in by_bucket.items())
  return real, total


def gather(values: np.ndarray) -> np.ndarray:
  """`[processes, ...]`: every process's `values` (ints), on every process."""
  if jax.process_count() == 1:
    return values[None]
  return np.asarray(multihost_utils.process_allgather(values))
