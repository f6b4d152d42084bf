"""Evaluating an experiment's models: dev MRR@10 for model selection, test
runs that carry the models' scores, and segment P@1 (the paper's Table 2)
by the criteria of `evaluate.evidence`.

Runs: a model reranks each test query's first-stage top `eval.depth`; those
documents carry the model's (aggregated) scores, and the rest of the
first-stage list follows in its own order, scored below them, so the run can
be fused, thresholded or truncated by score.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from best_jax.data import trec
from best_jax.evaluate import evidence
from best_jax.evaluate import trec_eval
from best_jax.experiment.inputs import Inputs, Pair
from best_jax.experiment.workdir import Workdir
from best_jax.rerank.aggregate import aggregate
from best_jax.select.bm25_segments import bm25_best_segments
from best_jax.select.selection import SegmentScorer
from best_jax.train.loop import Evaluate
from best_jax.train.state import params_digest

DEV_METRIC = "recip_rank_cut_10"
TEST_METRICS = ("ndcg_cut_10", "recip_rank_cut_10", "map", "ndcg_cut_20",
                "P_20", "recip_rank")
CEILING = "Ceiling (evidence among the scored segments)"
# Segment P@1 criteria (`evaluate.evidence`): the segment holds an answer
# span; it is mostly the gold passage.
P_AT_1_CRITERIA = ("answer", "majority")
SEGMENTS = "segments"  # WORKDIR/segments/NAME.json: test segment scores


def reranked(scores: Mapping[Pair, np.ndarray],
             candidates: Mapping[str, Sequence[str]], method: str
             ) -> trec.Run:
  """`{qid: {docid: aggregated score}}` of the candidates."""
  return {q: {d: aggregate(scores[(q, d)], method) for d in ds}
          for q, ds in candidates.items()}


def full_run(top: trec.Run, first_stage: trec.Run) -> trec.Run:
  """The reranked documents with their scores, then the rest of the first
  stage's list in its order, scored below them."""
  out = {}
  for qid, first in first_stage.items():
    scores = dict(top.get(qid, {}))
    floor = min(scores.values(), default=0.0)
    rest = [d for d, _ in trec.ranked(first) if d not in scores]
    for i, docid in enumerate(rest):
      scores[docid] = floor - 1.0 - i
    out[qid] = scores
  return out


class DevScores:
  """Models' scores of the dev candidates, computed once: model selection
  during training and the interpolation's dev runs read the same scores
  (keyed by the scorer and `params_digest`; the `keep` most recent)."""

  def __init__(self, inputs: Inputs, keep: int = 8):
    self.candidates = inputs.candidates["dev"]
    self.pairs = [(q, d) for q, ds in self.candidates.items() for d in ds]
    self.qrels = inputs.data.splits["dev"].qrels
    self._keep = keep
    self._cache: collections.OrderedDict[tuple, dict[Pair, np.ndarray]] = (
        collections.OrderedDict())

  def scores(self, scorer: SegmentScorer, params, *, first_only: bool
             ) -> dict[Pair, np.ndarray]:
    """Segment scores of every dev pair (only the first with `first_only`,
    which all segments' scores also answer)."""
    digest = tuple(params_digest(params))
    for only in ((True, False) if first_only else (False,)):
      if (id(scorer), digest, only) in self._cache:
        self._cache.move_to_end((id(scorer), digest, only))
        return self._cache[(id(scorer), digest, only)]
    scores = scorer.score(params, self.pairs, desc="dev",
                          max_segments=1 if first_only else None).host()
    self._cache[(id(scorer), digest, first_only)] = scores
    while len(self._cache) > self._keep:
      self._cache.popitem(last=False)
    return scores

  def run(self, scorer: SegmentScorer, params, aggregation: str
          ) -> trec.Run:
    """A model's reranked dev candidates (for choosing an interpolation)."""
    scores = self.scores(scorer, params, first_only=aggregation == "first")
    return reranked(scores, self.candidates, aggregation)

  def evaluator(self, scorer: SegmentScorer, aggregations: Sequence[str]
                ) -> Evaluate:
    """`device params -> {aggregation: dev MRR@10}` over the dev candidates
    (only first segments are scored when `first` is the only aggregation)."""
    first_only = tuple(aggregations) == ("first",)

    def evaluate(params) -> dict[str, float]:
      scores = self.scores(scorer, params, first_only=first_only)
      return {agg: trec_eval.evaluate(
          reranked(scores, self.candidates, agg), self.qrels,
          [DEV_METRIC])[0][DEV_METRIC] for agg in aggregations}
    return evaluate


def test_scores(workdir: Workdir, inputs: Inputs, scorer: SegmentScorer,
                params, name: str, *, max_segments: int | None = None,
                whole_documents: bool = False) -> dict[Pair, np.ndarray]:
  """Scores of every segment of the test pairs, saved in segments/NAME.json
  with their character spans (`best_jax explain` shows them); reused by a
  rerun while the test pairs are the same. `whole_documents`: a "segment" is
  the document (QDS)."""
  pairs = inputs.pairs["test"]
  digest = params_digest(params)
  saved = workdir.read_json(SEGMENTS, f"{name}.json")
  if saved is not None:
    scores = {(r["qid"], r["docid"]): np.asarray(r["scores"]) for r in saved}
    if (saved and set(scores) == set(pairs)
        and saved[0].get("params") == digest):
      return scores
    workdir.log(f"{name}: the saved test scores are for other pairs or "
                "another model; rescoring")
  scores = scorer.score(params, pairs, max_segments=max_segments,
                        desc=f"test ({name})").host()
  workdir.log_process(f"test ({name}): built {scorer.built[0]} of "
                      f"{scorer.built[1]} rows")
  if workdir.writes:
    if not whole_documents:  # Spans of every test document, in batches.
      inputs.eval_segments.prepare([docid for _, docid in scores])
    records = []
    for (qid, docid), values in scores.items():
      spans = ([[0, len(inputs.documents[docid][1])]] if whole_documents
               else inputs.eval_segments[docid].spans_s2[:len(values)].tolist())
      records.append({"qid": qid, "docid": docid,
                      "scores": [float(v) for v in values], "spans": spans})
    if records:
      records[0]["params"] = digest
    workdir.write_json(records, SEGMENTS, f"{name}.json")
  return scores


def selection_p_at_1(inputs: Inputs, scores: Mapping[str, Mapping]
                     ) -> dict[str, dict[str, float]]:
  """Table 2: `{selector: {criterion: P@1}}` on the test (query, relevant
  document) pairs, for the criteria of `evaluate.evidence` (the segment
  holds an answer; it is mostly the gold passage): the ceiling, random, the
  first segment, the BM25-best segment, and each model's argmax (`scores`:
  name -> test segment scores)."""
  gold = inputs.data.splits["test"].gold
  if not gold:
    return {}
  spans = {p: inputs.eval_segments[p[1]].spans_s2.tolist() for p in gold}
  texts = {p: [inputs.documents[p[1]][1][a:b] for a, b in spans[p]]
           for p in gold}
  choices = {"BM25-best segment": bm25_best_segments(
      inputs.data.splits["test"].topics, texts)}
  for name, by_pair in scores.items():
    choices[name] = {p: int(np.argmax(by_pair[p])) for p in gold
                     if p in by_pair}
  out: dict[str, dict[str, float]] = {}
  for criterion in P_AT_1_CRITERIA:
    base = evidence.baselines(spans, gold, criterion)
    for label, key in ((CEILING, "ceiling"), ("Random", "random"),
                       ("First segment", "first")):
      out.setdefault(label, {})[criterion] = base[key]
    for name, chosen in choices.items():
      out.setdefault(name, {})[criterion] = evidence.p_at_1(
          chosen, spans, gold, criterion)
  return out
