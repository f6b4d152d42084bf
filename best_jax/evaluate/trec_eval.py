"""A host (numpy) evaluator that reproduces trec_eval 9's measures.

Conventions, checked against pytrec_eval (trec_eval 9.0.x) in the tests:
- Queries evaluated = queries in both the run and the qrels (trec_eval without
  `-c`); a judged query with no relevant document is evaluated and scores 0.
- Ranking: score descending, ties by docid descending (`trec.ranked`).
- Binary measures count a document relevant when its grade >= the relevance
  level (1; trec_eval `-l`). Unjudged documents are non-relevant.
- `ndcg`/`ndcg_cut_k` use the grades themselves as gains (negative grades as 0,
  regardless of the relevance level), discount 1 / log2(rank + 1), and the
  ideal ranking of all judged documents of the query.
- Means are plain averages over the evaluated queries.

Supported names (k a positive integer): map, map_cut_k, ndcg, ndcg_cut_k,
recip_rank, P_k, recall_k, success_k, Rprec, and `recip_rank_cut_k`, which is
not in trec_eval: the reciprocal rank of the first relevant document within the
top k, 0 otherwise (MRR@k, as MS MARCO reports it).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

import numpy as np

from best_jax.data.trec import Qrels, Run, ranked
from best_jax.errors import InputError

DEFAULT_METRICS = ("ndcg_cut_10", "ndcg_cut_20", "map", "recip_rank", "P_20",
                   "recall_100")
FAMILIES_WITHOUT_CUTOFF = ("map", "ndcg", "recip_rank", "Rprec")
FAMILIES_WITH_CUTOFF = ("map_cut", "ndcg_cut", "P", "recall", "success",
                        "recip_rank_cut")
SUPPORTED = (*FAMILIES_WITHOUT_CUTOFF,
             *(family + "_k" for family in FAMILIES_WITH_CUTOFF))

_NAME = re.compile(r"^(?P<family>[A-Za-z_]+?)(?:_(?P<k>[0-9]+))?$")

PerQuery = dict[str, dict[str, float]]


@dataclasses.dataclass(frozen=True)
class Measure:
  """One parsed measure name: `family` and its cut-off `k` (None if none)."""
  name: str
  family: str
  k: int | None


def parse_measure(name: str) -> Measure:
  """Parses a trec_eval measure name, or raises InputError listing the names."""
  match = _NAME.match(name.strip())
  if match:
    family, k = match["family"], match["k"]
    if k is None and family in FAMILIES_WITHOUT_CUTOFF:
      return Measure(name.strip(), family, None)
    if k is not None and int(k) > 0 and family in FAMILIES_WITH_CUTOFF:
      return Measure(name.strip(), family, int(k))
  raise InputError(f"unknown metric {name!r}; supported: {', '.join(SUPPORTED)}"
                   " (k a positive integer, e.g. ndcg_cut_10, P_20)")


def parse_measures(names: Iterable[str]) -> list[Measure]:
  """Parses names (duplicates dropped, order kept); InputError if none."""
  measures = {}
  for name in names:
    if name.strip():
      measure = parse_measure(name)
      measures.setdefault(measure.name, measure)
  if not measures:
    raise InputError("no metrics given")
  return list(measures.values())


def evaluate(run: Run, qrels: Qrels,
             metrics: Sequence[str] = DEFAULT_METRICS, *,
             relevance_level: int = 1) -> tuple[dict[str, float], PerQuery]:
  """Evaluates `run` against `qrels` as trec_eval does.

  Returns:
    (means, per_query): `{name: mean}` and `{qid: {name: value}}` over the
    queries in both run and qrels (in the run's query order).

  Raises:
    InputError: an unknown metric name, or no query shared by run and qrels.
  """
  measures = parse_measures(metrics)
  qids = [qid for qid in run if qid in qrels]
  if not qids:
    raise InputError("the run and the qrels have no query in common")
  per_query = {qid: _evaluate_query(run[qid], qrels[qid], measures,
                                    relevance_level) for qid in qids}
  means = {m.name: float(np.mean([per_query[q][m.name] for q in qids]))
           for m in measures}
  return means, per_query


def _evaluate_query(scores: dict[str, float], judged: dict[str, int],
                    measures: list[Measure],
                    relevance_level: int) -> dict[str, float]:
  docids = [docid for docid, _ in ranked(scores)]
  grades = np.array([judged.get(docid, 0) for docid in docids], dtype=np.int64)
  relevant = (grades >= relevance_level).astype(np.float64)
  num_relevant = sum(1 for g in judged.values() if g >= relevance_level)
  ranks = np.arange(1, len(docids) + 1, dtype=np.float64)
  hits = np.cumsum(relevant)
  discounts = 1.0 / np.log2(ranks + 1.0)
  gains = np.maximum(grades, 0).astype(np.float64)
  ideal = np.sort(np.maximum(np.array(list(judged.values()), np.float64), 0))
  ideal = ideal[::-1]
  ideal_discounts = 1.0 / np.log2(np.arange(2, len(ideal) + 2,
                                            dtype=np.float64))

  def hits_at(k: int) -> float:
    return float(hits[min(k, len(hits)) - 1]) if len(hits) else 0.0

  def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0

  def first_relevant_rank(k: int | None) -> float:
    found = np.flatnonzero(relevant[:k])
    return 1.0 / (found[0] + 1) if len(found) else 0.0

  values = {}
  for m in measures:
    k = m.k
    if m.family in ("map", "map_cut"):
      precision_at_hits = (hits / ranks * relevant)[:k]
      value = ratio(float(precision_at_hits.sum()), num_relevant)
    elif m.family in ("ndcg", "ndcg_cut"):
      dcg = float((gains * discounts)[:k].sum())
      value = ratio(dcg, float((ideal * ideal_discounts)[:k].sum()))
    elif m.family in ("recip_rank", "recip_rank_cut"):
      value = first_relevant_rank(k)
    elif m.family == "P":
      value = hits_at(k) / k
    elif m.family == "recall":
      value = ratio(hits_at(k), num_relevant)
    elif m.family == "success":
      value = float(hits_at(k) > 0)
    elif m.family == "Rprec":
      value = ratio(hits_at(num_relevant) if num_relevant else 0.0,
                    num_relevant)
    else:  # parse_measure admits only the families above
      raise AssertionError(m.family)
    values[m.name] = value
  return values
