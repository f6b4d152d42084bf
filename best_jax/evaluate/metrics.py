"""Masked ranking metrics in jax.numpy, usable inside `jax.jit`.

Every metric takes `[..., list_size]` arrays in rax's style,
`fn(scores, labels, *, where=None, k=None)`, and returns one value per list
(shape `[...]`); `mean_over_lists` reduces them, skipping fully masked lists.

Conventions (the ones trec_eval uses, so the host evaluator and these agree):
- An item is relevant when its label (grade) is >= `relevance_level` (1).
- Ranks follow scores descending; ties keep list order (earlier item first), so
  lists given in trec_eval order (`best_jax.data.trec.ranked`) rank as there,
  even where float32 merges close float64 scores into ties.
- An item with `where=True` and score `-inf` is a judged document the ranking
  did not retrieve (rax's convention): it counts towards the number of
  relevant documents (recall, AP) and the ideal DCG, but is never ranked.
- NDCG gains are the grades with negative grades as 0, discount
  `1 / log2(rank + 1)` (trec_eval 9's `ndcg`/`ndcg_cut_k`; rax's default gain
  `2^y - 1` is not used).
- P@k divides by k even when fewer than k items were retrieved (trec_eval;
  rax divides by the number retrieved).
- A list with nothing relevant (or fully masked) scores 0, never NaN.
- `k` is an int, None (no cut-off), or an integer array broadcastable to the
  list shape `[...]` (one cut-off per list).

Ranked-list truncation (SPEC §5) has its own metrics over lists already in
rank order: `truncation_dcg`/`truncation_f1` at a cut-off k per list, and the
`*_curve` forms giving the value for every k = 1..N (RAML targets).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array
Cutoff = int | Array | None


# ------------------------------------------------------------ rank helpers

def _float(x) -> Array:
  """Casts to JAX's default float dtype (float32, float64 under x64)."""
  return jnp.asarray(x, dtype=float)


def _rank_order(scores: Array, where: Array | None) -> tuple[Array, Array]:
  """Returns (ranked-position order, retrieved mask) along the last axis.

  Retrieved = valid and score > -inf; unretrieved items sort after all others.
  The sort is stable so ties keep list order.
  """
  retrieved = ~jnp.isneginf(scores)
  if where is not None:
    retrieved &= where
  key = jnp.where(retrieved, -_float(scores), jnp.inf)
  order = jnp.argsort(key, axis=-1, stable=True)
  return order, retrieved


def _positions(list_size: int) -> Array:
  """1-based ranks 1..list_size as floats."""
  return jnp.arange(1, list_size + 1, dtype=_float(0).dtype)


def _within(list_size: int, k: Cutoff, batch_shape) -> Array:
  """Boolean `[..., list_size]`: rank <= k (all True when k is None)."""
  ranks = jnp.arange(1, list_size + 1)
  if k is None:
    return jnp.broadcast_to(ranks > 0, (*batch_shape, list_size))
  k = jnp.broadcast_to(jnp.asarray(k), batch_shape)
  return ranks <= k[..., None]


def _ranked_relevance(scores, labels, where, k, relevance_level):
  """Relevance in rank order (0 past the retrieved items) and the top-k mask."""
  order, retrieved = _rank_order(scores, where)
  relevant = (labels >= relevance_level) & retrieved
  ranked = jnp.take_along_axis(_float(relevant), order, axis=-1)
  top_k = _within(scores.shape[-1], k, scores.shape[:-1])
  return ranked, top_k


def _num_relevant(labels, where, relevance_level) -> Array:
  relevant = labels >= relevance_level
  if where is not None:
    relevant &= where
  return jnp.sum(_float(relevant), axis=-1)


def _safe_divide(numerator: Array, denominator: Array) -> Array:
  """numerator / denominator, 0 where the denominator is 0."""
  safe = jnp.where(denominator == 0, 1.0, denominator)
  return jnp.where(denominator == 0, 0.0, numerator / safe)


# ---------------------------------------------------------- ranking metrics

def precision(scores: Array, labels: Array, *, where: Array | None = None,
              k: int | Array, relevance_level: float = 1) -> Array:
  """P@k: relevant items in the top k, divided by k (trec_eval `P_k`)."""
  ranked, top_k = _ranked_relevance(scores, labels, where, k, relevance_level)
  hits = jnp.sum(ranked * top_k, axis=-1)
  return hits / jnp.broadcast_to(_float(k), hits.shape)


def recall(scores: Array, labels: Array, *, where: Array | None = None,
           k: Cutoff = None, relevance_level: float = 1) -> Array:
  """R@k: relevant items in the top k over all relevant (`recall_k`)."""
  ranked, top_k = _ranked_relevance(scores, labels, where, k, relevance_level)
  hits = jnp.sum(ranked * top_k, axis=-1)
  return _safe_divide(hits, _num_relevant(labels, where, relevance_level))


def f1(scores: Array, labels: Array, *, where: Array | None = None,
       k: int | Array, relevance_level: float = 1) -> Array:
  """F1@k = 2·P@k·R@k / (P@k + R@k), 0 when both are 0."""
  p = precision(scores, labels, where=where, k=k,
                relevance_level=relevance_level)
  r = recall(scores, labels, where=where, k=k, relevance_level=relevance_level)
  return _safe_divide(2 * p * r, p + r)


def average_precision(scores: Array, labels: Array, *,
                      where: Array | None = None, k: Cutoff = None,
                      relevance_level: float = 1) -> Array:
  """AP@k: Σ P@rank at relevant ranks <= k over all relevant (`map_cut_k`)."""
  ranked, top_k = _ranked_relevance(scores, labels, where, k, relevance_level)
  precision_at_rank = jnp.cumsum(ranked, axis=-1) / _positions(ranked.shape[-1])
  total = jnp.sum(precision_at_rank * ranked * top_k, axis=-1)
  return _safe_divide(total, _num_relevant(labels, where, relevance_level))


def reciprocal_rank(scores: Array, labels: Array, *,
                    where: Array | None = None, k: Cutoff = None,
                    relevance_level: float = 1) -> Array:
  """1 / rank of the first relevant item within the top k, else 0."""
  ranked, top_k = _ranked_relevance(scores, labels, where, k, relevance_level)
  return jnp.max(ranked * top_k / _positions(ranked.shape[-1]), axis=-1)


def r_precision(scores: Array, labels: Array, *, where: Array | None = None,
                relevance_level: float = 1) -> Array:
  """P@R with R = the number of relevant items (trec_eval `Rprec`)."""
  num_relevant = _num_relevant(labels, where, relevance_level)
  ranked, top_r = _ranked_relevance(scores, labels, where,
                                    num_relevant.astype(jnp.int32),
                                    relevance_level)
  return _safe_divide(jnp.sum(ranked * top_r, axis=-1), num_relevant)


def dcg(scores: Array, labels: Array, *, where: Array | None = None,
        k: Cutoff = None) -> Array:
  """DCG@k with gain max(grade, 0) and discount 1 / log2(rank + 1)."""
  order, retrieved = _rank_order(scores, where)
  gains = jnp.where(retrieved, jnp.maximum(_float(labels), 0.0), 0.0)
  return _discounted_sum(jnp.take_along_axis(gains, order, axis=-1), k)


def ndcg(scores: Array, labels: Array, *, where: Array | None = None,
         k: Cutoff = None) -> Array:
  """NDCG@k = DCG@k / ideal DCG@k (trec_eval `ndcg_cut_k`, `ndcg` for k=None).

  The ideal ranking sorts every valid item, retrieved or not, by gain.
  """
  gains = jnp.maximum(_float(labels), 0.0)
  if where is not None:
    gains = jnp.where(where, gains, 0.0)
  ideal = -jnp.sort(-gains, axis=-1)
  return _safe_divide(dcg(scores, labels, where=where, k=k),
                      _discounted_sum(ideal, k))


def _discounted_sum(gains_in_rank_order: Array, k: Cutoff) -> Array:
  list_size = gains_in_rank_order.shape[-1]
  discounts = 1.0 / jnp.log2(_positions(list_size) + 1.0)
  top_k = _within(list_size, k, gains_in_rank_order.shape[:-1])
  return jnp.sum(gains_in_rank_order * discounts * top_k, axis=-1)


# ------------------------------------------------------ truncation metrics

def truncation_dcg_curve(labels: Array, *, where: Array | None = None) -> Array:
  """DCG@k for every k = 1..N of lists in rank order (SPEC §5).

  `DCG@k = Σ_{n<=k} y_n / log2(n + 1)` with y = +1 for a relevant item
  (label >= 1) and -1 otherwise. `where` marks the real ranks, a prefix of
  each list; padded positions carry the full list's value. Returns `[..., N]`.
  """
  signs = jnp.where(labels >= 1, 1.0, -1.0)
  if where is not None:
    signs = jnp.where(where, signs, 0.0)
  discounts = 1.0 / jnp.log2(_positions(labels.shape[-1]) + 1.0)
  return jnp.cumsum(signs * discounts, axis=-1)


def truncation_f1_curve(labels: Array, *, where: Array | None = None) -> Array:
  """F1@k for every k = 1..N of lists in rank order (SPEC §5).

  `F1@k = 2·P@k·R@k / (P@k + R@k) = 2·hits@k / (k + R_list)`: recall counts
  only the relevant items in the list (label >= 1). Lists with nothing
  relevant give 0. `where` marks the real ranks, a prefix of each list; padded
  positions carry the full list's value. Returns `[..., N]`.
  """
  relevant = labels >= 1
  k = jnp.broadcast_to(_positions(labels.shape[-1]), labels.shape)
  if where is not None:
    relevant &= where
    k = jnp.minimum(k, jnp.sum(where, axis=-1, keepdims=True))
  hits = jnp.cumsum(_float(relevant), axis=-1)
  return _safe_divide(2.0 * hits, k + hits[..., -1:])


def truncation_dcg(labels: Array, k: Array | int, *,
                   where: Array | None = None) -> Array:
  """DCG of each list cut after rank k (k = 0 gives 0). Returns `[...]`."""
  return _at_cutoff(truncation_dcg_curve(labels, where=where), k)


def truncation_f1(labels: Array, k: Array | int, *,
                  where: Array | None = None) -> Array:
  """F1 of each list cut after rank k (k = 0 gives 0). Returns `[...]`."""
  return _at_cutoff(truncation_f1_curve(labels, where=where), k)


def _at_cutoff(curve: Array, k: Array | int) -> Array:
  """curve[..., k - 1], 0 for k = 0; k beyond N takes the whole list."""
  padded = jnp.concatenate([jnp.zeros_like(curve[..., :1]), curve], axis=-1)
  k = jnp.clip(jnp.broadcast_to(jnp.asarray(k), curve.shape[:-1]), 0,
               curve.shape[-1])
  return jnp.take_along_axis(padded, k[..., None].astype(jnp.int32),
                             axis=-1)[..., 0]


# ------------------------------------------------------ segment selection

def segment_precision_at_1(scores_ds: Array, gold_ds: Array, *,
                           where: Array | None = None) -> Array:
  """1.0 per document when its best valid segment contains the gold passage.

  Args:
    scores_ds: segment scores `[..., docs, segments]`.
    gold_ds: boolean, True where a segment contains the gold passage.
    where: boolean mask of valid (non-padded) segments.

  Returns:
    `[..., docs]` values in {0, 1}; a document with no valid segment gives 0
    (exclude it with `mean_over_lists(values, where.any(-1))`). Ties go to the
    earlier segment.
  """
  if where is None:
    where = jnp.ones(scores_ds.shape, dtype=bool)
  masked = jnp.where(where, _float(scores_ds), -jnp.inf)
  best = jnp.argmax(masked, axis=-1)
  hit = jnp.take_along_axis(gold_ds & where, best[..., None], axis=-1)[..., 0]
  return _float(hit & jnp.any(where, axis=-1))


# ---------------------------------------------------------------- reduction

def mean_over_lists(values: Array, where: Array | None = None) -> Array:
  """Mean of per-list values over the lists where `where` is True (0 if none).

  `where` is `[...]` (one flag per list), e.g. `mask_ql.any(-1)`.
  """
  values = _float(values)
  if where is None:
    return jnp.mean(values)
  count = jnp.sum(where)
  return _safe_divide(jnp.sum(jnp.where(where, values, 0.0)), _float(count))
