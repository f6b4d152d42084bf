"""Model batches for the training regimes, from segmented documents.

Documents are segmented once into a `SegmentStore` (a `SegmentBatch` plus a
docid index); queries are tokenized once into a `QueryStore`. A step's groups
and chosen segment indices then become fixed-shape arrays for the steps of
`best_jax.train.steps` (`[batch, group, length]`) or for BeST's joint
iteration-1 step (`[batch, group, segment, length]`), packed as
`[CLS] query [SEP] title segment [SEP]` by `best_jax.segments.packing`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from best_jax.segments.packing import pack_inputs
from best_jax.segments.segmenter import SegmentBatch, Segmenter
from best_jax.train.regimes import Group


@dataclasses.dataclass(frozen=True)
class QueryStore:
  """Tokenized queries: `ids_nq`, `mask_nq` and qid -> row."""
  index: dict[str, int]
  ids_nq: np.ndarray
  mask_nq: np.ndarray

  @classmethod
  def build(cls, segmenter: Segmenter, topics: Mapping[str, str]
            ) -> QueryStore:
    qids = list(topics)
    ids_nq, mask_nq = segmenter.tokenize_queries([topics[q] for q in qids])
    return cls({q: i for i, q in enumerate(qids)}, ids_nq, mask_nq)

  def rows(self, qids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    rows = [self.index[q] for q in qids]
    return self.ids_nq[rows], self.mask_nq[rows]


@dataclasses.dataclass(frozen=True)
class SegmentStore:
  """Segmented documents: a `SegmentBatch` and docid -> row."""
  index: dict[str, int]
  segments: SegmentBatch

  @classmethod
  def build(cls, segmenter: Segmenter,
            documents: Mapping[str, tuple[str, str]], docids: Sequence[str],
            *, training: bool, seed: int = 0,
            num_segments: int | None = None,
            keep_all: bool = False) -> SegmentStore:
    """Segments `documents[docid] = (title, text)` for every docid (see
    `Segmenter.segment_tokenized` for the arguments)."""
    docids = list(dict.fromkeys(docids))
    segments = segmenter.segment([documents[d] for d in docids],
                                 training=training, seed=seed,
                                 num_segments=num_segments, keep_all=keep_all)
    return cls({d: i for i, d in enumerate(docids)}, segments)

  def num_segments(self, docid: str) -> int:
    return int(self.segments.num_segments_d[self.index[docid]])

  def segment(self, docid: str, index: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens_l, mask_l) of one segment."""
    row = self.index[docid]
    return (self.segments.tokens_dsl[row, index],
            self.segments.mask_dsl[row, index])

  def spans(self, docid: str) -> np.ndarray:
    """`[num_segments, 2]` character spans of the document's segments."""
    row = self.index[docid]
    return self.segments.spans_ds2[row, :self.num_segments(docid)]


@dataclasses.dataclass(frozen=True)
class SegmentRows:
  """Model rows of (query, document segment) pairs for a `SegmentScorer`:
  `[CLS] query [SEP] title segment [SEP]`, one row per segment."""
  store: SegmentStore
  queries: QueryStore
  segmenter: Segmenter

  def num_segments(self, docid: str) -> int:
    return self.store.num_segments(docid)

  def inputs(self, rows: Sequence[tuple[tuple[str, str], int]]
             ) -> dict[str, np.ndarray]:
    """`[N, L]` model inputs of N `((qid, docid), segment)` rows."""
    length = self.store.segments.tokens_dsl.shape[-1]
    tokens = np.zeros((len(rows), length), np.int32)
    mask = np.zeros((len(rows), length), bool)
    for i, ((_, docid), index) in enumerate(rows):
      tokens[i], mask[i] = self.store.segment(docid, index)
    return _pack(self.queries, [qid for (qid, _), _ in rows], tokens, mask,
                 self.segmenter)


def gold_segment(spans_s2: np.ndarray, gold: tuple[int, int]) -> int:
  """The segment that overlaps the gold span `[start, end)` the most.

  Ties go to the earlier segment; with no overlap at all, the last segment
  starting at or before the gold start.
  """
  start, end = gold
  overlap = (np.minimum(spans_s2[:, 1], end)
             - np.maximum(spans_s2[:, 0], start)).clip(min=0)
  if overlap.max(initial=0) > 0:
    return int(np.argmax(overlap))
  before = np.nonzero(spans_s2[:, 0] <= start)[0]
  return int(before[-1]) if len(before) else 0


def _pack(queries: QueryStore, qids: Sequence[str], tokens: np.ndarray,
          mask: np.ndarray, segmenter: Segmenter) -> dict[str, np.ndarray]:
  """Packs contents `[B, ..., Lc]` with the B queries (broadcast)."""
  ids_bq, qmask_bq = queries.rows(qids)
  extra = tokens.ndim - 2
  shape = (len(qids),) + (1,) * extra + ids_bq.shape[-1:]
  return pack_inputs(ids_bq.reshape(shape), qmask_bq.reshape(shape), tokens,
                     mask, config=segmenter.config, special=segmenter.special)


def _labels(batch: Sequence[Group]) -> np.ndarray:
  labels_bg = np.zeros((len(batch), len(batch[0].docids)), np.float32)
  labels_bg[:, 0] = 1.0
  return labels_bg


def group_batch(batch: Sequence[Group], choice_bg: np.ndarray, *,
                segmenter: Segmenter, queries: QueryStore,
                train_store: SegmentStore,
                gold_store: SegmentStore | None = None,
                gold: Mapping[tuple[str, str], tuple[int, int]] | None = None
                ) -> dict[str, np.ndarray]:
  """One segment per document: a `steps.train_step` batch `[B, G, L]`.

  `choice_bg[b, g] = -1` takes the gold segment of that document from
  `gold_store` (GoldP positives); other indices come from `train_store`.
  """
  length = segmenter.config.content_len
  num_b, num_g = choice_bg.shape
  tokens = np.zeros((num_b, num_g, length), np.int32)
  mask = np.zeros((num_b, num_g, length), bool)
  for b, group in enumerate(batch):
    for g, docid in enumerate(group.docids):
      index = int(choice_bg[b, g])
      if index < 0:
        if gold_store is None or gold is None:
          raise ValueError("gold segments need gold_store and gold spans")
        span = gold.get((group.qid, docid))
        # A positive without a gold passage falls back to its first segment.
        index = 0 if span is None else gold_segment(gold_store.spans(docid),
                                                    span)
        tokens[b, g], mask[b, g] = gold_store.segment(docid, index)
      else:
        tokens[b, g], mask[b, g] = train_store.segment(docid, index)
  inputs = _pack(queries, [g.qid for g in batch], tokens, mask, segmenter)
  return dict(inputs, labels=_labels(batch),
              mask=np.ones((num_b, num_g), bool),
              example_mask=np.ones(num_b, bool))


def segments_batch(batch: Sequence[Group], *, segmenter: Segmenter,
                   queries: QueryStore, train_store: SegmentStore
                   ) -> dict[str, np.ndarray]:
  """All training segments: BeST's joint-step batch `[B, G, S, L]`.

  `mask` is `[B, G, S]`, true on real segments.
  """
  seg = train_store.segments
  rows = np.array([[train_store.index[d] for d in g.docids] for g in batch])
  tokens = seg.tokens_dsl[rows]
  inputs = _pack(queries, [g.qid for g in batch], tokens, seg.mask_dsl[rows],
                 segmenter)
  return dict(inputs, labels=_labels(batch), mask=seg.segment_mask_ds[rows],
              example_mask=np.ones(len(batch), bool))
