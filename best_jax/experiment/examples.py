"""Training examples: one per group of the schedule, built on demand.

A group (a query, its positive document, then negatives) becomes model
inputs according to the regime (SPEC §1-2, `train.regimes`):

- one segment per document, `[G, L]` (`SegmentExamples`): FirstP (segment 0),
  MaxP-all (a random segment), GoldP (the positive's segment holding the
  answer start, length-matched negative segments) and BeST iterations on selected
  segments (the segment the frozen previous model, or the pretrained
  bi-encoder, selected);
- the leading `k_train` training segments, `[G, k_train, L]` with a segment
  mask (`AllSegmentExamples`): BeST's joint iteration-1 step.

Both scorer families read the same segments: a cross-encoder example holds
`[CLS] query [SEP] segment [SEP]` rows, a bi-encoder's (`family="bi"`) holds
the query `[CLS] query [SEP]` apart from the `[CLS] segment [SEP]` rows
(`query_ids`, `query_mask`) and each document's id (`doc_ids`, for in-batch
negatives), as `train.steps` expects.

Segments come from one segmentation with random lengths over the inference
span (`inputs.train_segments`), so every regime, the selection and inference
see the same part of the document, and no regime can learn the segment
length. `GroupExamples` is the random-access source of the input pipeline:
example i of the flat schedule is built only by the process whose rows hold
it, deterministically in (seed, i), so batches do not depend on the number of
processes.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from best_jax.data.pipeline import Feature
from best_jax.models.bi_encoder import text_inputs
from best_jax.segments.packing import pack_inputs
from best_jax.experiment import regimes
from best_jax.experiment.inputs import Inputs, SegmentCache
from best_jax.experiment.regimes import Group

Example = dict[str, np.ndarray]


def _labels(num_docs: int) -> np.ndarray:
  labels_g = np.zeros(num_docs, np.float32)
  labels_g[0] = 1.0
  return labels_g


FAMILIES = ("cross", "bi")


def _pack(inputs: Inputs, family: str, qid: str, docids: Sequence[str],
          tokens: np.ndarray, mask: np.ndarray) -> Example:
  """Model rows of one query and its documents' contents `[G, ..., Lc]`
  (see the docstring)."""
  config, special = inputs.segmenter.config, inputs.segmenter.special
  ids_q, qmask_q = inputs.queries.rows([qid])
  if family == "bi":
    query = text_inputs(ids_q[0], qmask_q[0],
                        max_len=config.max_query_len + 2, special=special)
    return dict(text_inputs(tokens, mask, max_len=config.text_row_len,
                            special=special),
                query_ids=query["input_ids"],
                query_mask=query["attention_mask"], doc_ids=doc_ids(docids))
  shape = (1,) * (tokens.ndim - 1) + ids_q.shape[-1:]
  return pack_inputs(ids_q.reshape(shape), qmask_q.reshape(shape), tokens,
                     mask, config=config, special=special)


def model_features(family: str, num_docs: int, config,
                   num_segments: int | None = None) -> dict[str, Feature]:
  """Fixed shapes of a training example of `family` (`config`: the
  segmenter's), `[G, (S,) L]`."""
  lead = (num_docs,) if num_segments is None else (num_docs, num_segments)
  length = config.text_row_len if family == "bi" else config.max_len
  features = {"input_ids": Feature(lead + (length,), np.int32),
              "attention_mask": Feature(lead + (length,), bool),
              "token_type_ids": Feature(lead + (length,), np.int32),
              "labels": Feature((num_docs,), np.float32),
              "mask": Feature(lead, bool)}
  if family == "bi":
    features["query_ids"] = Feature((config.max_query_len + 2,), np.int32)
    features["query_mask"] = Feature((config.max_query_len + 2,), bool)
    features["doc_ids"] = Feature((num_docs,), np.int32)
  return features


def doc_ids(docids: Sequence[str]) -> np.ndarray:
  """Document ids as int32 (crc32) for `train.steps`' in-batch negatives."""
  return np.asarray([zlib.crc32(d.encode()) & 0x7FFFFFFF for d in docids],
                    np.int32)


@dataclasses.dataclass
class SegmentExamples:
  """One chosen segment per document: a `steps.train_step` example."""
  inputs: Inputs
  regime: str
  seed: int
  selected: Mapping[tuple[str, str], int] | None = None
  family: str = "cross"

  def features(self, group_size: int) -> dict[str, Feature]:
    return model_features(self.family, group_size,
                          self.inputs.segmenter.config)

  def __call__(self, index: int, group: Group) -> Example:
    store: SegmentCache = self.inputs.train_segments
    docs = [store[d] for d in group.docids]
    rng = np.random.default_rng([self.seed, index, 7])
    choice = regimes.choose_segments(
        self.regime, group, [doc.spans_s2 for doc in docs], rng=rng,
        selected=self.selected, gold_start=self._gold_start(group))
    tokens = np.stack([doc.tokens_sl[s] for doc, s in zip(docs, choice)])
    mask = np.stack([doc.mask_sl[s] for doc, s in zip(docs, choice)])
    return dict(_pack(self.inputs, self.family, group.qid, group.docids,
                      tokens, mask),
                labels=_labels(len(group.docids)),
                mask=np.ones(len(group.docids), bool))

  def _gold_start(self, group: Group) -> int | None:
    """Where the positive's first answer starts (its gold passage's start
    without answers; None without gold)."""
    gold = self.inputs.data.splits["train"].gold.get(
        (group.qid, group.docids[0]))
    if gold is None:
      return None
    return gold.answers[0][0] if gold.answers else gold.passage[0]


@dataclasses.dataclass
class AllSegmentExamples:
  """The leading `k_train` training segments of every document: BeST's
  joint-step example (Eq.3)."""
  inputs: Inputs
  family: str = "cross"

  @property
  def width(self) -> int:
    return self.inputs.segmenter.config.k_train

  def features(self, group_size: int) -> dict[str, Feature]:
    return model_features(self.family, group_size,
                          self.inputs.segmenter.config, self.width)

  def __call__(self, index: int, group: Group) -> Example:
    del index
    content_len = self.inputs.segmenter.config.content_len
    shape = (len(group.docids), self.width)
    tokens = np.zeros(shape + (content_len,), np.int32)
    mask = np.zeros(shape + (content_len,), bool)
    valid = np.zeros(shape, bool)
    for g, docid in enumerate(group.docids):
      doc = self.inputs.train_segments[docid]
      count = min(doc.count, self.width)
      tokens[g, :count] = doc.tokens_sl[:count]
      mask[g, :count] = doc.mask_sl[:count]
      valid[g, :count] = True
    rows = _pack(self.inputs, self.family, group.qid, group.docids, tokens,
                 mask)
    if self.family == "cross":
      # A missing segment's row holds no token at all (not even the
      # query's), so an unpadded step spends nothing on it.
      rows["attention_mask"] = rows["attention_mask"] & valid[..., None]
    return dict(rows, labels=_labels(len(group.docids)), mask=valid)


class GroupExamples:
  """The flat schedule as a random-access source: example i is
  `build(i, groups[i])`. Counts the examples this process built."""

  def __init__(self, schedule: Sequence[Sequence[Group]],
               build: Callable[[int, Group], Example]):
    self._groups = [g for batch in schedule for g in batch]
    self._build = build
    self.built = 0

  def __len__(self) -> int:
    return len(self._groups)

  def __getitem__(self, index: int) -> Example:
    self.built += 1
    return self._build(index, self._groups[index])

  def batches(self, indices: Iterable[int], batch_size: int
              ) -> Iterator[list[Example]]:
    """The global batches `indices` of the schedule (batch b: examples
    b · `batch_size` onwards; the last may be short), each built whole (and
    not counted) when it is reached: the same on every process."""
    for b in indices:
      stop = min((b + 1) * batch_size, len(self._groups))
      yield [self._build(i, self._groups[i])
             for i in range(b * batch_size, stop)]
