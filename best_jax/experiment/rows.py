"""Scoring rows of both scorer families, from the experiment's segments.

- `CrossRows`: `[CLS] query [SEP] title segment [SEP]`, one row per (query,
  document segment), for `select.selection.SegmentScorer`. Rows are packed
  tight (the segment right after the query), so a row's length is `3 +
  query tokens + title and segment tokens`: the scorer buckets by it.
- `BiRows`: `[CLS] title segment [SEP]` and `[CLS] query [SEP]` apart, for
  `select.embedding.EmbeddingScorer` (each embedded once).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from best_jax.data.pipeline import Feature
from best_jax.experiment.inputs import QueryStore, SegmentCache
from best_jax.models.bi_encoder import text_inputs
from best_jax.segments.packing import pack_inputs
from best_jax.segments.segmenter import Segmenter


def row_features(length: int) -> dict[str, Feature]:
  """Fixed shapes of one model row of `length` tokens."""
  return {"input_ids": Feature((length,), np.int32),
          "attention_mask": Feature((length,), bool),
          "token_type_ids": Feature((length,), np.int32)}


class _Rows:
  """A `SegmentCache`'s segments and the queries they are scored for."""

  def __init__(self, segments: SegmentCache, queries: QueryStore,
               segmenter: Segmenter):
    self.segments = segments
    self.queries = queries
    self.segmenter = segmenter
    self.width = segments.width

  def prepare(self, docids: Sequence[str]) -> None:
    self.segments.prepare(docids)

  def num_segments(self, docid: str) -> int:
    return self.segments[docid].count

  def features(self, length: int) -> dict[str, Feature]:
    return row_features(length)


class CrossRows(_Rows):
  """Rows of a `SegmentCache`'s segments with their queries."""

  def row_length(self, qid: str, docid: str, segment: int) -> int:
    config = self.segmenter.config
    query = min(self.queries.length(qid), config.max_query_len)
    return 3 + query + int(self.segments[docid].lengths_s[segment])

  def row(self, qid: str, docid: str, segment: int, length: int
          ) -> dict[str, np.ndarray]:
    doc = self.segments[docid]
    ids_q, mask_q = self.queries.rows([qid])
    packed = pack_inputs(ids_q, mask_q, doc.tokens_sl[segment][None],
                         doc.mask_sl[segment][None],
                         config=self.segmenter.config,
                         special=self.segmenter.special)
    return {name: value[0, :length] for name, value in packed.items()}


class BiRows(_Rows):
  """Bi-encoder rows (`select.embedding.TextRows`): `[CLS] title segment
  [SEP]` of a `SegmentCache`'s segments and `[CLS] query [SEP]`, apart."""

  def segment_length(self, docid: str, segment: int) -> int:
    return 2 + int(self.segments[docid].lengths_s[segment])

  def segment_row(self, docid: str, segment: int, length: int
                  ) -> dict[str, np.ndarray]:
    doc = self.segments[docid]
    return text_inputs(doc.tokens_sl[segment], doc.mask_sl[segment],
                       max_len=length, special=self.segmenter.special)

  def query_length(self, qid: str) -> int:
    return 2 + min(self.queries.length(qid),
                   self.segmenter.config.max_query_len)

  def query_row(self, qid: str, length: int) -> dict[str, np.ndarray]:
    ids_q, mask_q = self.queries.rows([qid])
    return text_inputs(ids_q[0], mask_q[0], max_len=length,
                       special=self.segmenter.special)
