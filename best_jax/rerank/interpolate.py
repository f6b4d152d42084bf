"""BM25 interpolation of a reranker, as BENCHMARKS.md ("Peers to beat") and
Birch do it for whole documents.

For each query, over the documents the model reranked (the first stage's top
k), both score lists are min-max normalised per query and fused:

    fused(d) = α · norm(first_stage)(d) + (1 − α) · norm(model)(d)

A constant list (or a single document) normalises to 0, never NaN. α is
chosen on dev from a grid (0.0, 0.1, …, 1.0) by a trec_eval metric (MRR@10 by
default) of the complete run: the fused top k above the rest of the first
stage in its own order (`complete`). Ties in a fused list are broken as
trec_eval breaks them (docid descending), and between α values with the same
dev metric the smallest α wins (the most weight on the model).

Runs are `{qid: {docid: score}}` dicts; every function is pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from best_jax.data.trec import Qrels, Run, ranked
from best_jax.evaluate import trec_eval

GRID = tuple(round(0.1 * i, 1) for i in range(11))
DEFAULT_METRIC = "recip_rank_cut_10"


def min_max(scores: Mapping[str, float]) -> dict[str, float]:
  """`(s − min) / (max − min)` per document; 0 for all when constant.

  Raises:
    ValueError: a score is not finite.
  """
  values = list(scores.values())
  if any(not math.isfinite(v) for v in values):
    raise ValueError("cannot normalise non-finite scores")
  if not values:
    return {}
  low, high = min(values), max(values)
  span = high - low
  if span <= 0.0:
    return {docid: 0.0 for docid in scores}
  return {docid: (score - low) / span for docid, score in scores.items()}


def interpolate(first_stage: Run, model: Run, alpha: float) -> Run:
  """The fused scores of every document the model scored, per query.

  Both lists are normalised over the model's documents of the query (the
  reranked top k), whatever else the first stage ranked.

  Raises:
    ValueError: α outside [0, 1], or a document the model scored that the
      first stage did not rank for that query.
  """
  if not 0.0 <= alpha <= 1.0:
    raise ValueError(f"alpha must lie in [0, 1], not {alpha}")
  fused = {}
  for qid, docs in model.items():
    first = first_stage.get(qid, {})
    missing = [d for d in docs if d not in first]
    if missing:
      raise ValueError(f"query {qid!r}: the first stage did not rank "
                       f"{len(missing)} reranked documents, e.g. {missing[0]!r}")
    first_norm = min_max({d: first[d] for d in docs})
    model_norm = min_max(docs)
    fused[qid] = {d: alpha * first_norm[d] + (1.0 - alpha) * model_norm[d]
                  for d in docs}
  return fused


def complete(reranked: Run, first_stage: Run) -> Run:
  """The reranked documents above the rest of the first-stage list.

  Scores become descending ranks (n, n − 1, …, 1) so that trec_eval keeps the
  order: first the reranked documents in their own order, then every other
  first-stage document in the first stage's order. Queries without a
  reranked list keep the first-stage order.
  """
  out = {}
  for qid, first in first_stage.items():
    top = reranked.get(qid, {})
    ordered = ([d for d, _ in ranked(top)]
               + [d for d, _ in ranked(first) if d not in top])
    out[qid] = {d: float(len(ordered) - i) for i, d in enumerate(ordered)}
  return out


def sweep(first_stage: Run, model: Run, qrels: Qrels, *,
          qids: Iterable[str] | None = None, grid: Sequence[float] = GRID,
          metric: str = DEFAULT_METRIC) -> dict[float, float]:
  """`{α: mean metric}` of the complete fused run over `qids` (default: the
  model's queries), evaluated as trec_eval does (judged queries only)."""
  qids = list(model if qids is None else qids)
  model = {q: model[q] for q in qids if q in model}
  first = {q: first_stage[q] for q in model if q in first_stage}
  if not model:
    raise ValueError("no query to choose alpha on")
  table = {}
  for alpha in grid:
    run = complete(interpolate(first, model, alpha), first)
    means, _ = trec_eval.evaluate(run, qrels, (metric,))
    table[float(alpha)] = means[metric]
  return table


def choose_alpha(first_stage: Run, model: Run, qrels: Qrels, *,
                 qids: Iterable[str] | None = None,
                 grid: Sequence[float] = GRID, metric: str = DEFAULT_METRIC
                 ) -> tuple[float, dict[float, float]]:
  """(best α, the whole `sweep` table); the smallest α among equals."""
  table = sweep(first_stage, model, qrels, qids=qids, grid=grid,
                metric=metric)
  best = max(table.values())
  return min(a for a, value in table.items() if value == best), table
