"""Birch (Yang, Zhang & Lin 2019): sentence scores interpolated with BM25.

`score(d) = α·S_doc(d) + (1−α)·Σ_{i=1..k} w_i·S_i(d)` with `S_i` the i-th best
sentence score of `d`, `w = [1, β, γ][:k]` and `S_doc` the unnormalised
first-stage score (SPEC §3). A document with fewer than k sentences contributes
only the sentences it has. α, β, γ are grid-searched over {0.0, 0.1, …, 0.9}
to maximise MAP (trec_eval's) on given queries (`fit`: an experiment fits
them on its dev queries) or, the paper's protocol, on the training folds and
applied to the held-out fold (`cross_validate`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence

import numpy as np

from best_jax.data.trec import Qrels, Run

GRID = tuple(round(0.1 * i, 1) for i in range(10))


@dataclasses.dataclass(frozen=True)
class Weights:
  """Interpolation weights: α for the first stage, β and γ for S_2 and S_3."""
  alpha: float
  beta: float = 0.0
  gamma: float = 0.0

  def vector(self, k: int) -> np.ndarray:
    """`[α, (1−α)·1, (1−α)·β, (1−α)·γ][:1 + k]`, applied to [S_doc, S_1..S_k]."""
    w = np.array([1.0, self.beta, self.gamma])[:k]
    return np.concatenate([[self.alpha], (1.0 - self.alpha) * w])


@dataclasses.dataclass(frozen=True)
class QueryFeatures:
  """Per query: candidate docids and `[S_doc, S_1..S_k]` per document."""
  docids: tuple[str, ...]
  features_dk: np.ndarray  # [docs, 1 + k], missing sentences as 0.


def features(first_stage: Run,
             sentence_scores: Mapping[str, Mapping[str, Sequence[float]]],
             k: int = 3) -> dict[str, QueryFeatures]:
  """Builds Birch features for every (query, document) of the first stage.

  Raises:
    ValueError: a first-stage document has no sentence scores.
  """
  if not 1 <= k <= 3:
    raise ValueError(f"Birch uses the top 1 to 3 sentences, not {k}")
  result = {}
  for qid, docs in first_stage.items():
    docids = tuple(docs)
    features_dk = np.zeros((len(docids), 1 + k))
    for i, docid in enumerate(docids):
      sentences = sentence_scores.get(qid, {}).get(docid)
      if sentences is None or len(sentences) == 0:
        raise ValueError(f"no sentence scores for ({qid}, {docid})")
      top = np.sort(np.asarray(sentences, dtype=np.float64))[::-1][:k]
      features_dk[i, 0] = docs[docid]
      features_dk[i, 1:1 + len(top)] = top
    result[qid] = QueryFeatures(docids, features_dk)
  return result


def _combine(weights_cw: np.ndarray, features_dk: np.ndarray) -> np.ndarray:
  """`[C, D]` weighted sums, added term by term in a fixed order.

  (A matrix product may sum in a shape-dependent order, which would break
  exact ties differently in `score` and in the grid search.)
  """
  total_cd = np.zeros((weights_cw.shape[0], features_dk.shape[0]))
  for j in range(features_dk.shape[1]):
    total_cd = total_cd + weights_cw[:, j, None] * features_dk[None, :, j]
  return total_cd


def score(query_features: Mapping[str, QueryFeatures], weights: Weights
          ) -> Run:
  """The interpolated run for one setting of the weights."""
  run = {}
  for qid, f in query_features.items():
    k = f.features_dk.shape[1] - 1
    scores = _combine(weights.vector(k)[None], f.features_dk)[0]
    run[qid] = {d: float(s) for d, s in zip(f.docids, scores)}
  return run


def candidate_weights(k: int = 3, grid: Sequence[float] = GRID
                      ) -> list[Weights]:
  """Every (α, β, γ) of the grid that matters for k (β only if k ≥ 2, …)."""
  betas = grid if k >= 2 else (0.0,)
  gammas = grid if k >= 3 else (0.0,)
  return [Weights(a, b, g) for a, b, g in itertools.product(grid, betas, gammas)]


def _average_precision_c(scores_cd: np.ndarray, relevant_d: np.ndarray,
                         num_relevant: int) -> np.ndarray:
  """trec_eval AP for each row of scores; documents pre-sorted by docid desc."""
  if num_relevant == 0:
    return np.zeros(scores_cd.shape[0])
  order_cd = np.argsort(-scores_cd, axis=1, kind="stable")
  hits_cd = relevant_d[order_cd].astype(np.float64)
  ranks_d = np.arange(1, scores_cd.shape[1] + 1)
  precision_cd = np.cumsum(hits_cd, axis=1) / ranks_d
  return (precision_cd * hits_cd).sum(axis=1) / num_relevant


def mean_average_precision(query_features: Mapping[str, QueryFeatures],
                           qrels: Qrels, candidates: Sequence[Weights],
                           qids: Sequence[str] | None = None) -> np.ndarray:
  """MAP of every candidate weighting over `qids` (judged ones), `[C]`.

  Equal to trec_eval's `map` over the queries in both the run and the qrels,
  ties broken by docid descending.
  """
  qids = [q for q in (query_features if qids is None else qids)
          if q in query_features and q in qrels]
  if not qids:
    raise ValueError("no judged query to fit Birch's weights on")
  k = next(iter(query_features.values())).features_dk.shape[1] - 1
  weights_cw = np.stack([w.vector(k) for w in candidates])
  total_c = np.zeros(len(candidates))
  for qid in qids:
    f = query_features[qid]
    by_docid = sorted(range(len(f.docids)), key=lambda i: f.docids[i],
                      reverse=True)
    judged = qrels[qid]
    relevant_d = np.array([judged.get(f.docids[i], 0) >= 1 for i in by_docid])
    num_relevant = sum(1 for g in judged.values() if g >= 1)
    scores_cd = _combine(weights_cw, f.features_dk[by_docid])
    total_c += _average_precision_c(scores_cd, relevant_d, num_relevant)
  return total_c / len(qids)


def fit(query_features: Mapping[str, QueryFeatures], qrels: Qrels,
        qids: Sequence[str] | None = None, grid: Sequence[float] = GRID
        ) -> tuple[Weights, float]:
  """The grid point with the highest MAP on `qids` (first one on ties)."""
  k = next(iter(query_features.values())).features_dk.shape[1] - 1
  candidates = candidate_weights(k, grid)
  map_c = mean_average_precision(query_features, qrels, candidates, qids)
  best = int(np.argmax(map_c))
  return candidates[best], float(map_c[best])


def cross_validate(query_features: Mapping[str, QueryFeatures], qrels: Qrels,
                   folds: Mapping[str, Sequence[str]],
                   grid: Sequence[float] = GRID
                   ) -> tuple[Run, dict[str, dict[str, float]]]:
  """Fits the weights on all folds but one and scores the held-out fold.

  Args:
    query_features: Birch features of every query.
    qrels: judgments (used for the training folds only).
    folds: `{fold name: test qids}`; the training queries of a fold are the
      queries of the other folds.
    grid: the values of α, β and γ.

  Returns:
    (run, fitted): the held-out run over all folds' queries, and per fold
    `{alpha, beta, gamma, train_map}`.
  """
  run, fitted = {}, {}
  for name, test_qids in folds.items():
    held_out = set(test_qids)
    train_qids = [q for other, qs in folds.items() if other != name
                  for q in qs if q not in held_out]
    weights, train_map = fit(query_features, qrels, train_qids, grid)
    fitted[name] = dict(dataclasses.asdict(weights), train_map=train_map)
    test = {q: query_features[q] for q in test_qids if q in query_features}
    run.update(score(test, weights))
  return run, fitted
