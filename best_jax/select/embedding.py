"""Bi-encoder scoring: each segment and each query is embedded once per
model, and every (query, document) pair is scored on the devices.

A bi-encoder scores `f(q, s) = sim(E(q), E(s))` (`models.bi_encoder`), so a
document's segments need no query: `EmbeddingScorer` embeds the segments of
the pairs' documents and the pairs' queries into device arrays (each process
builds the rows of the documents and queries it owns, in length buckets,
through the same chunked feed as `selection.SegmentScorer`), then one jitted
gather-and-score fills the `[pairs, segments]` array of a `PairScores`
(−inf where a pair has no such segment). Parameters and embeddings never
leave the devices; selection is `PairScores.select()`, as for the
cross-encoder. With `cache_rows`, the segment embeddings of the most
recently used parameters stay on the devices, so a model's dev evaluation
and its test scoring embed a document once (again in full when more of its
segments are needed than were embedded, e.g. all after the first only).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from best_jax.data.pipeline import Feature
from best_jax.select.selection import (BufferStep, Pair, PairScores, feed,
                                       gather, padded_count, padded_tokens)
from best_jax.train.state import params_digest


class TextRows(Protocol):
  """Bi-encoder rows `[CLS] text [SEP]` of segments and queries."""
  width: int | None

  def prepare(self, docids: Sequence[str]) -> None: ...

  def num_segments(self, docid: str) -> int: ...

  def segment_length(self, docid: str, segment: int) -> int: ...

  def segment_row(self, docid: str, segment: int, length: int
                  ) -> dict[str, np.ndarray]: ...

  def query_length(self, qid: str) -> int: ...

  def query_row(self, qid: str, length: int) -> dict[str, np.ndarray]: ...

  def features(self, length: int) -> dict[str, Feature]: ...


class _Embedded:
  """One model's segment embeddings on the devices: buffers `[n, H]`
  (replicated) and each document's (first row, rows) in their
  concatenation."""

  def __init__(self, mesh: jax.sharding.Mesh):
    self.rows: dict[str, tuple[int, int]] = {}
    self.size = 0
    self._mesh = mesh
    self._buffers: list[jax.Array] = []

  def append(self, buffer_nh: jax.Array,
             rows: dict[str, tuple[int, int]]) -> None:
    """Adds a buffer; `rows` are (first row in it, rows) per document."""
    self.rows.update({d: (self.size + first, n)
                      for d, (first, n) in rows.items()})
    self.size += buffer_nh.shape[0]
    self._buffers.append(buffer_nh)

  def buffer(self) -> jax.Array:
    """All rows, in one array."""
    if len(self._buffers) > 1:
      with jax.set_mesh(self._mesh):
        self._buffers = [jnp.concatenate(self._buffers)]
    return self._buffers[0]


def _row(build, index: int, *args) -> dict[str, np.ndarray]:
  """`build(*args)` (the last argument: the bucket's length) with its row
  of the embedding buffer."""
  return dict(build(*args), index=np.int32(index))


def build_embed_into(trainer) -> BufferStep:
  """The bi-encoder's embedding step: each real row's embedding at its
  `index` of an `[n, hidden]` buffer."""
  return BufferStep(
      trainer, lambda model, batch: model.embed(
          batch["input_ids"], batch["attention_mask"],
          batch["token_type_ids"]), index=("index",))


class EmbeddingScorer:
  """Scores pairs with a trainer's bi-encoder (see the module docstring).

  Args:
    trainer: gives the model graph, mesh and shardings (`train.trainer`).
    source: the rows (`TextRows`).
    rows_per_call: rows per model call over all processes.
    buckets: row lengths compiled for (ascending; the last fits every row).
    cache_rows: segment embeddings kept on the devices (rows, over the
      most recently used parameters) for later calls with the same
      parameters; 0 (default): none. Only for a source whose docids always
      name the same segments (an experiment's corpus, not a reranker's
      per-call documents).
    embed_into: the device step (`build_embed_into(trainer)` when None);
      scorers of one trainer share one, so each shape compiles once.
  """

  def __init__(self, trainer, source: TextRows, *, rows_per_call: int,
               buckets: Sequence[int], cache_rows: int = 0,
               embed_into: BufferStep | None = None):
    self.source = source
    self.rows_per_call = rows_per_call
    self.cache_rows = cache_rows
    self._cache: collections.OrderedDict[tuple, _Embedded] = (
        collections.OrderedDict())
    self.buckets = tuple(sorted(buckets))
    self.built = (0, 0)
    self._mesh = trainer.mesh
    self._batch_sharding = trainer.batch_sharding
    self._replicated = jax.NamedSharding(trainer.mesh, jax.P())
    graphdef = trainer.graphdef
    self._embed_into = embed_into or build_embed_into(trainer)

    def pair_scores(params, segments_nh, queries_qh, query_p, segment_ps):
      model = nnx.merge(graphdef, params)
      valid_ps = segment_ps >= 0
      seg_psh = segments_nh[jnp.maximum(segment_ps, 0)]
      scores_ps = model.score(queries_qh[query_p], seg_psh)
      return jnp.where(valid_ps, scores_ps, -jnp.inf)

    with jax.set_mesh(trainer.mesh):
      self._pair_scores = jax.jit(
          pair_scores, in_shardings=(trainer.param_shardings,) + (
              self._replicated,) * 4, out_shardings=self._replicated)
    self._hidden = trainer.abstract_params()["encoder"]["embeddings"][
        "word"]["embedding"].shape[-1]

  def _embed(self, params, rows_by_bucket, count: int, desc: str) -> Any:
    with jax.set_mesh(self._mesh):
      buffer = _zeros(padded_count(count), self._hidden, self._replicated)()
    state = {"buffer": buffer}

    def consume(batch):
      state["buffer"] = self._embed_into(params, state["buffer"], batch)
    built = feed(rows_by_bucket, lambda length: dict(
        self.source.features(length), index=Feature((), np.int32)),
                 rows_per_call=self.rows_per_call,
                 sharding=self._batch_sharding, consume=consume, desc=desc)
    return state["buffer"], built

  def score(self, params: Any, pairs: Sequence[Pair], *,
            max_segments: int | None = None, desc: str = "score"
            ) -> PairScores:
    """Scores every valid segment (the first `max_segments`) of `pairs`;
    segments these parameters embedded before are not embedded again."""
    pairs = list(pairs)
    docids = list(dict.fromkeys(d for _, d in pairs))
    qids = list(dict.fromkeys(q for q, _ in pairs))
    counts_d = self._counts(docids, max_segments)
    embedded = self._embedded(params)
    built_s = self._embed_missing(params, embedded, docids, counts_d, desc)
    segment_nh = (embedded.buffer() if embedded.size else
                  _zeros(padded_count(0), self._hidden, self._replicated)())
    count, me = jax.process_count(), jax.process_index()
    queries: dict[int, list] = {b: [] for b in self.buckets}
    for i, qid in enumerate(qids):
      if i % count == me:
        bucket = next(b for b in self.buckets
                      if b >= self.source.query_length(qid))
        queries[bucket].append(functools.partial(
            _row, self.source.query_row, i, qid))
    query_qh, built_q = self._embed(params, queries, len(qids),
                                    f"{desc} (queries)")
    width = self.source.width or int(counts_d.max(initial=1))
    if max_segments is not None:
      width = min(width, max_segments)
    width = max(width, 1)
    rows = padded_count(len(pairs))
    query_p = np.zeros(rows, np.int32)
    segment_ps = np.full((rows, width), -1, np.int32)
    position_d = {d: i for i, d in enumerate(docids)}
    position_q = {q: i for i, q in enumerate(qids)}
    for p, (qid, docid) in enumerate(pairs):
      n = min(int(counts_d[position_d[docid]]), width)
      query_p[p] = position_q[qid]
      if n:
        segment_ps[p, :n] = embedded.rows[docid][0] + np.arange(n)
    index = jax.device_put((query_p, segment_ps), self._replicated)
    scores_ps = self._pair_scores(params, segment_nh, query_qh, *index)
    self.built = (built_s[0] + built_q[0], built_s[1] + built_q[1])
    self._evict()
    return PairScores(pairs, scores_ps)

  def _counts(self, docids: list[str], max_segments: int | None
              ) -> np.ndarray:
    """Segments to score per document (each process segments the
    documents it owns; every process gets all counts)."""
    count, me = jax.process_count(), jax.process_index()
    mine = [d for i, d in enumerate(docids) if i % count == me]
    self.source.prepare(mine)
    counts_d = np.zeros(len(docids), np.int64)
    for i, docid in enumerate(docids):
      if i % count == me:
        counts_d[i] = self.source.num_segments(docid)
    if max_segments is not None:
      counts_d = np.minimum(counts_d, max_segments)
    return gather(counts_d).sum(0)  # each document has one owner

  def _embedded(self, params: Any) -> _Embedded:
    """The segment embeddings kept for these parameters (most recent);
    without a cache, a fresh set (no digest computed)."""
    if not self.cache_rows:
      return _Embedded(self._mesh)
    digest = tuple(params_digest(params))
    embedded = self._cache.pop(digest, None) or _Embedded(self._mesh)
    self._cache[digest] = embedded
    return embedded

  def _embed_missing(self, params: Any, embedded: _Embedded,
                     docids: list[str], counts_d: np.ndarray, desc: str
                     ) -> tuple[int, int]:
    """Embeds the documents `embedded` lacks, or holds fewer segments of
    than `counts_d` (all their segments again; each process the rows of
    the documents it owns), appended as one more buffer."""
    missing = [i for i, d in enumerate(docids)
               if embedded.rows.get(d, (0, 0))[1] < counts_d[i]]
    if not missing:
      return 0, 0
    count, me = jax.process_count(), jax.process_index()
    new_counts = counts_d[missing]
    offsets = np.concatenate([[0], np.cumsum(new_counts)[:-1]])
    segments: dict[int, list] = {b: [] for b in self.buckets}
    for i, offset in zip(missing, offsets):
      if i % count != me:
        continue
      for s in range(int(counts_d[i])):
        length = self.source.segment_length(docids[i], s)
        bucket = next(b for b in self.buckets if b >= length)
        segments[bucket].append(functools.partial(
            _row, self.source.segment_row, int(offset + s), docids[i], s))
    buffer, built = self._embed(params, segments, int(new_counts.sum()),
                                f"{desc} (segments)")
    embedded.append(buffer, {docids[i]: (int(o), int(c)) for i, o, c in
                             zip(missing, offsets, new_counts)})
    return built

  def clear(self) -> None:
    """Forgets every kept embedding (e.g. when docids are reused for
    other texts)."""
    self._cache.clear()

  def _evict(self) -> None:
    """Drops the least recently used parameters' embeddings while more
    than `cache_rows` rows are kept."""
    while sum(e.size for e in self._cache.values()) > self.cache_rows:
      self._cache.popitem(last=False)

  def padding(self, pairs: Sequence[Pair], max_segments: int | None = None
              ) -> float:
    """Fraction of the encoder's row tokens spent on padding, as `score`
    would lay out the segment rows and the query rows (each text embedded
    once) on one process."""
    docids = list(dict.fromkeys(d for _, d in pairs))
    self.source.prepare(docids)
    segments = []
    for docid in docids:
      count = self.source.num_segments(docid)
      if max_segments is not None:
        count = min(count, max_segments)
      segments += [self.source.segment_length(docid, s) for s in range(count)]
    queries = [self.source.query_length(q)
               for q in dict.fromkeys(q for q, _ in pairs)]
    real, total = np.sum([padded_tokens(rows, self.buckets,
                                        self.rows_per_call)
                          for rows in (segments, queries)], axis=0)
    return 1.0 - int(real) / max(int(total), 1)


@functools.lru_cache(maxsize=None)
def _zeros(rows: int, hidden: int, sharding: jax.NamedSharding):
  return jax.jit(lambda: jnp.zeros((rows, hidden), jnp.float32),
                 out_shardings=sharding)
