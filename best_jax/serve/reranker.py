"""`Reranker`: a trained model on this machine's devices, for scoring pairs
and reranking documents from Python (and the `score` and `rerank` commands).

  reranker = Reranker.load("exported/")       # or .load("W", model="maxp")
  reranker.score("who wrote hamlet", "Hamlet is a tragedy by Shakespeare.")
  for hit in reranker.rerank(query, [text, (title, text), ...]):
    print(hit.index, hit.score, text[hit.span[0]:hit.span[1]])

Documents are cut into segments exactly as in training (the same
`Segmenter` settings, `training=False`), every segment is scored by the
product's scorers (`SegmentScorer`, or `EmbeddingScorer` for a bi-encoder)
over a mesh of the local devices, in chunks, parameters on the devices; a
document's score aggregates its segments' (`first`, `max`, `sum`, `mean`),
and the best segment is its evidence. `score` scores one whole pair as
transformers packs it (no segmenting): the exported model's logit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from tqdm.auto import tqdm

from best_jax.experiment.inputs import QueryStore, SegmentCache
from best_jax.experiment.models import (EVAL_CACHE_ROWS, rows_per_call,
                                       trainer_config)
from best_jax.experiment.rows import BiRows, CrossRows
from best_jax.rerank.aggregate import AGGREGATIONS, aggregate, best_segment
from best_jax.segments.segmenter import Segmenter
from best_jax.select.embedding import EmbeddingScorer
from best_jax.select.selection import (SegmentScorer, default_buckets,
                                       segment_buckets)
from best_jax.serve import hf
from best_jax.serve.rows import PairRows, TextRows
from best_jax.serve.trained import TrainedModel, from_workdir
from best_jax.train import sharding as sharding_lib
from best_jax.train.trainer import build_trainer

Document = str | tuple[str, str]  # a text, or (title, text)
# Segmented documents kept between the query groups of one `rerank_run`.
RUN_CACHE_DOCUMENTS = 4096


@dataclasses.dataclass(frozen=True)
class Scored:
  """A document's score and the segments it came from.

  Attributes:
    index: the document's position among the query's candidates.
    score: the model's score (its segments' scores aggregated).
    segment_scores: every scored segment's score, in document order.
    spans: each segment's `[start, end)` characters in the document's text.
  """
  index: int
  score: float
  segment_scores: tuple[float, ...]
  spans: tuple[tuple[int, int], ...]

  @property
  def segment(self) -> int:
    """The evidence: the best-scoring segment (the earliest on ties)."""
    return best_segment(self.segment_scores)

  @property
  def span(self) -> tuple[int, int]:
    """The evidence segment's characters in the document's text."""
    return self.spans[self.segment]

  @property
  def evidence_score(self) -> float:
    return self.segment_scores[self.segment]


def local_mesh(config) -> jax.sharding.Mesh:
  """The local devices on the config's mesh axes, all on the batch axis."""
  rules = tuple(tuple(rule) for rule in config.logical_axis_rules)
  batch = sharding_lib.mesh_axis(rules, sharding_lib.BATCH_AXIS)
  names = tuple(config.mesh.axis_names)
  return sharding_lib.make_mesh([-1 if n == batch else 1 for n in names],
                                names, jax.local_devices())


class _Current:
  """The rows of the current call, so that one scorer (compiled once)
  serves every call."""

  def __init__(self):
    self.rows = None

  def __getattr__(self, name):
    if name == "rows":
      raise AttributeError(name)
    return getattr(self.rows, name)


class Reranker:
  """A trained model, placed on the local devices (see the module doc)."""

  def __init__(self, model: TrainedModel, *, rows_per_call: int | None = None):
    """`rows_per_call`: rows per device call (default the experiment's
    `eval.rows_per_call`), rounded to the devices."""
    self.model = model
    config = model.config
    self.trainer = build_trainer(model.make, trainer_config(config),
                                 mesh=local_mesh(config))
    self.params = self.trainer.put_params(model.params)
    self.tokenizer = model.tokenizer()
    self.segmenter = Segmenter(model.segments, tokenizer=self.tokenizer)
    per_call = _rows(rows_per_call or config.eval.rows_per_call, self.trainer)
    bi = model.kind == "bi"
    scorer = EmbeddingScorer if bi else SegmentScorer
    self._segments = _Current()
    # A bi-encoder embeds each document once per `rerank_run`, whatever
    # the number of query groups it appears in.
    self._segment_scorer = scorer(
        self.trainer, self._segments, rows_per_call=per_call,
        buckets=segment_buckets(model.segments, model.kind),
        **(dict(cache_rows=EVAL_CACHE_ROWS) if bi else {}))
    # Whole pairs: up to the model's positions (cross) or, as
    # sentence-transformers' max_seq_length, the training rows' length (bi).
    self.max_length = (model.segments.text_row_len if bi else min(
        model.bert.positions, self.tokenizer.model_max_length))
    self._pairs = (TextRows if bi else PairRows)(self.tokenizer,
                                                 self.max_length)
    self._pair_scorer = scorer(
        self.trainer, self._pairs, rows_per_call=_rows(1, self.trainer),
        buckets=default_buckets(self.max_length))

  @classmethod
  def load(cls, path: str, model: str | None = None, **kwargs) -> Reranker:
    """An exported directory (`best_jax export`), or with `model` a model of
    a `best_jax train` work directory (`maxp`, `best`, `best-2`, ...)."""
    trained = (hf.read_export(path) if model is None
               else from_workdir(path, model))
    return cls(trained, **kwargs)

  @property
  def aggregation(self) -> str:
    return self.model.aggregation

  # ------------------------------------------------------------ whole pairs

  def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    """float64 `[n]`: each (query, text) scored whole (see `score`)."""
    keys = [(str(i), str(i)) for i in range(len(pairs))]
    if self.model.kind == "bi":
      self._pairs.set({k[0]: q for k, (q, _) in zip(keys, pairs)},
                      {k[1]: t for k, (_, t) in zip(keys, pairs)})
    else:
      self._pairs.set(dict(zip(keys, pairs)))
    scores = self._pair_scorer.score(self.params, keys, desc="score").host()
    return np.array([scores[k][0] for k in keys], np.float64)

  def score(self, query: str, text: str) -> float:
    """The score of one (query, text) pair, tokenized as transformers does:
    a cross-encoder reads `[CLS] query [SEP] text [SEP]` (cut to the
    model's positions), so this is the exported model's logit; a
    bi-encoder compares the two embeddings (`scale` times the cosine that
    sentence-transformers computes, or the dot product)."""
    return float(self.score_pairs([(query, text)])[0])

  # ---------------------------------------------------------- segmented

  def rerank_run(self, topics: Mapping[str, str],
                 candidates: Mapping[str, Sequence[str]],
                 documents: Mapping[str, tuple[str, str]], *,
                 aggregation: str | None = None,
                 queries_per_call: int = 64) -> dict[str, dict[str, Scored]]:
    """Scores each query's candidates (docids of `documents`, whose values
    are (title, text)): `{qid: {docid: Scored}}`.

    Queries go `queries_per_call` at a time. Segmented documents (at most
    `RUN_CACHE_DOCUMENTS`, least recently used dropped) and a bi-encoder's
    segment embeddings (`EVAL_CACHE_ROWS`) are kept between the groups of
    one call, so memory stays bounded for any run and a document shared by
    many queries is segmented and embedded once.
    """
    aggregation = aggregation or self.aggregation
    if aggregation not in AGGREGATIONS:
      raise ValueError(f"unknown aggregation {aggregation!r}; one of "
                       f"{AGGREGATIONS}")
    qids = [q for q in candidates if candidates[q]]
    out: dict[str, dict[str, Scored]] = {}
    cache = SegmentCache(self.segmenter, documents, training=False,
                         capacity=RUN_CACHE_DOCUMENTS)
    try:
      with tqdm(total=len(qids), desc="rerank", unit="query",
                disable=len(qids) <= queries_per_call) as bar:
        for start in range(0, len(qids), queries_per_call):
          group = qids[start:start + queries_per_call]
          out.update(self._rerank_group(topics, {q: candidates[q]
                                                 for q in group},
                                        cache, aggregation))
          bar.update(len(group))
    finally:  # Docids name other texts in the next call (`rerank`).
      if isinstance(self._segment_scorer, EmbeddingScorer):
        self._segment_scorer.clear()
    return out

  def _rerank_group(self, topics, candidates, cache: SegmentCache,
                    aggregation) -> dict[str, dict[str, Scored]]:
    queries = QueryStore.build(self.segmenter,
                               {q: topics[q] for q in candidates})
    rows = BiRows if self.model.kind == "bi" else CrossRows
    self._segments.rows = rows(cache, queries, self.segmenter)
    pairs = [(q, d) for q, ds in candidates.items() for d in ds]
    scores = self._segment_scorer.score(
        self.params, pairs, desc="score",
        max_segments=1 if aggregation == "first" else None).host()
    out: dict[str, dict[str, Scored]] = {}
    for qid, docids in candidates.items():
      out[qid] = {}
      for index, docid in enumerate(docids):
        values = scores[(qid, docid)]
        spans = cache[docid].spans_s2[:len(values)]
        out[qid][docid] = Scored(
            index=index, score=aggregate(values, aggregation),
            segment_scores=tuple(float(v) for v in values),
            spans=tuple((int(a), int(b)) for a, b in spans))
    return out

  def rerank(self, query: str, documents: Sequence[Document], *,
             aggregation: str | None = None) -> list[Scored]:
    """The documents (texts, or (title, text) pairs) by descending score
    (ties: the earlier document first), each with its evidence segment."""
    docs = {str(i): (d if isinstance(d, tuple) else ("", d))
            for i, d in enumerate(documents)}
    scored = self.rerank_run({"q": query}, {"q": list(docs)}, docs,
                             aggregation=aggregation).get("q", {})
    return sorted(scored.values(), key=lambda s: (-s.score, s.index))


def _rows(wanted: int, trainer) -> int:
  return rows_per_call(max(wanted, 1), trainer)
