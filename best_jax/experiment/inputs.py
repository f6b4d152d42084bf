"""An experiment's inputs: data, tokenized queries, the seeded schedule of
training groups, dev/test candidates, and documents segmented on demand.

Segmentation is lazy and per document (`SegmentCache`): a process segments
only the documents of the rows it builds (its share of each training batch
and of each scoring chunk). A document's training segments are seeded by the
run's seed and its docid, so they are the same whichever process segments it
and in whatever order.
"""

from __future__ import annotations

import collections
import dataclasses
import zlib
from collections.abc import Mapping, Sequence

import ml_collections
import numpy as np
from tqdm.auto import tqdm

from best_jax.models import pretrained
from best_jax.segments.config import SegmenterConfig
from best_jax.segments.segmenter import Segmenter
from best_jax.experiment import datasets
from best_jax.experiment import regimes
from best_jax.experiment.regimes import Group
from best_jax.experiment.workdir import Workdir

Pair = tuple[str, str]


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

  def length(self, qid: str) -> int:
    return int(self.mask_nq[self.index[qid]].sum())


@dataclasses.dataclass(frozen=True)
class DocumentSegments:
  """One document's segments (valid ones only): content tokens `[S, Lc]`,
  their masks, and `[S, 2]` character spans in the document's text."""
  tokens_sl: np.ndarray
  mask_sl: np.ndarray
  spans_s2: np.ndarray

  @property
  def count(self) -> int:
    return len(self.tokens_sl)

  @property
  def lengths_s(self) -> np.ndarray:
    return self.mask_sl.sum(-1)


class SegmentCache:
  """Documents segmented when first needed, one way (`training` as in
  `Segmenter.segment_tokenized`), each document seeded by its docid.
  With `capacity`, at most that many documents are kept (the least
  recently used go first, never those of the current `prepare`)."""

  def __init__(self, segmenter: Segmenter,
               documents: Mapping[str, tuple[str, str]], *, training: bool,
               seed: int = 0, name: str = "segment",
               capacity: int | None = None):
    self.segmenter = segmenter
    self._documents = documents
    self._training = training
    self._seed = seed
    self._name = name
    self._capacity = capacity
    self._cache: collections.OrderedDict[str, DocumentSegments] = (
        collections.OrderedDict())

  @property
  def width(self) -> int | None:
    """The fixed segment axis of this segmentation (None: unbounded)."""
    if self._training:
      return None
    return self.segmenter.config.max_segments

  def doc_seed(self, docid: str) -> list[int]:
    return [self._seed, zlib.crc32(docid.encode())]

  def prepare(self, docids: Sequence[str], *, chunk: int = 32) -> None:
    """Segments every docid not segmented yet, with a progress bar."""
    wanted = list(dict.fromkeys(docids))
    for docid in wanted:
      if docid in self._cache:
        self._cache.move_to_end(docid)
    missing = [d for d in wanted if d not in self._cache]
    if not missing:
      return
    with tqdm(total=len(missing), desc=self._name, unit="doc",
              disable=len(missing) < 2 * chunk, leave=False) as bar:
      for start in range(0, len(missing), chunk):
        part = missing[start:start + chunk]
        batch = self.segmenter.segment(
            [self._documents[d] for d in part], training=self._training,
            seeds=[self.doc_seed(d) for d in part])
        for i, docid in enumerate(part):
          count = int(batch.num_segments_d[i])
          # Copies: a view would keep the whole chunk, padded to its
          # longest document, alive.
          self._cache[docid] = DocumentSegments(
              batch.tokens_dsl[i, :count].copy(),
              batch.mask_dsl[i, :count].copy(),
              batch.spans_ds2[i, :count].copy())
        bar.update(len(part))
    while self._capacity and len(self._cache) > max(self._capacity,
                                                    len(wanted)):
      self._cache.popitem(last=False)

  def __getitem__(self, docid: str) -> DocumentSegments:
    if docid not in self._cache:
      self.prepare([docid])
    return self._cache[docid]

  def __len__(self) -> int:
    """Documents segmented so far (by this process)."""
    return len(self._cache)

  def counts(self) -> dict[str, int]:
    """Segments of each document segmented so far (by this process)."""
    return {docid: doc.count for docid, doc in self._cache.items()}


@dataclasses.dataclass
class Inputs:
  """What the stages of an experiment read."""
  data: datasets.ExperimentData
  segmenter: Segmenter
  queries: QueryStore
  schedule: list[list[Group]]
  candidates: dict[str, dict[str, list[str]]]  # split -> qid -> docids
  pairs: dict[str, list[Pair]]  # dev/test: candidates, then gold pairs
  train_segments: SegmentCache  # random lengths, the inference span
  eval_segments: SegmentCache   # inference windows (`max_segments`)

  @property
  def documents(self) -> dict[str, tuple[str, str]]:
    return self.data.documents


def build_inputs(config: ml_collections.ConfigDict, workdir: Workdir
                 ) -> Inputs:
  """Loads the data of `config.data` and draws the training schedule."""
  data = datasets.load(config, str(workdir.root))
  checkpoint = config.ranker.get("checkpoint") or pretrained.MINILM
  segmenter = Segmenter(SegmenterConfig(**config.segments.to_dict()),
                        tokenizer=pretrained.load_tokenizer(checkpoint))
  topics = {q: t for part in data.splits.values()
            for q, t in part.topics.items()}
  train = data.splits["train"]
  t = config.train
  # Positives need a text to be trained on (qrels stay whole for metrics).
  with_text = {q: {d: g for d, g in j.items() if d in data.documents}
               for q, j in train.qrels.items()}
  schedule = regimes.schedule(
      with_text, train.run, list(train.topics),
      num_negatives=t.group_size - 1, depth=t.negatives_depth,
      batch_size=t.batch_size, num_steps=t.num_steps, seed=config.seed)
  candidates, pairs = {}, {}
  for split in ("dev", "test"):
    part = data.splits[split]
    candidates[split] = datasets.candidates(part, config.eval.depth)
    ranked = [(q, d) for q, ds in candidates[split].items() for d in ds]
    pairs[split] = list(dict.fromkeys(ranked + list(part.gold)))
  documents = data.documents
  return Inputs(
      data=data, segmenter=segmenter,
      queries=QueryStore.build(segmenter, topics), schedule=schedule,
      candidates=candidates, pairs=pairs,
      train_segments=SegmentCache(segmenter, documents, training=True,
                                  seed=config.seed, name="segment (train)"),
      eval_segments=SegmentCache(segmenter, documents, training=False,
                                 name="segment (eval)"))
