"""Segment selection: score segments of (query, document) pairs, take argmax.

BeST's `i_{q,d} = argmax_j f_θ(q, d_j)` over the *valid* segments only
(SPEC §1 Eq.4/5). `masked_argmax` is the jittable form used inside the joint
step; `SegmentScorer` scores the valid segments of many pairs on the host side
in fixed-size chunks (no padded segment is ever run through the model, and no
chunk shape changes, so nothing recompiles), without dropout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

Pair = tuple[str, str]


def masked_argmax(scores_xs: jax.Array, mask_xs: jax.Array
                  ) -> tuple[jax.Array, jax.Array]:
  """Best valid segment per row: `(index_x, valid_x)`.

  Ties go to the earlier segment. A row without any valid segment gets index
  0 and `valid = False` (never NaN, never an index that points at padding of
  a row that has real segments).
  """
  masked = jnp.where(mask_xs, scores_xs.astype(jnp.float32), -jnp.inf)
  valid_x = jnp.any(mask_xs, axis=-1)
  index_x = jnp.where(valid_x, jnp.argmax(masked, axis=-1), 0)
  return index_x.astype(jnp.int32), valid_x


def select(scores: dict[Pair, np.ndarray]) -> dict[Pair, int]:
  """The argmax segment of every scored pair (earliest on ties)."""
  return {pair: int(np.argmax(s)) for pair, s in scores.items() if len(s)}


class SegmentScorer:
  """Scores the valid segments of (qid, docid) pairs in fixed-size chunks.

  Args:
    score_rows: `(params, inputs [rows, L]) -> scores [rows]` for exactly
      `rows_per_call` rows (e.g. `functools.partial(trainer.score,
      size=rows_per_call)`), so that every call has one shape and nothing
      recompiles; the last chunk is padded by `score_rows`, never dropped.
    source: where rows come from: `num_segments(docid) -> int` (valid
      segments only; padding is never scored) and `inputs([((qid, docid),
      segment), ...]) -> model inputs [n, L]` (e.g. `batches.SegmentRows`;
      a QDS document is one "segment").
    rows_per_call: rows per model call (a multiple of the batch sharding).
  """

  def __init__(self, score_rows: Callable, source, rows_per_call: int):
    self._score_rows = score_rows
    self.source = source
    self.rows_per_call = rows_per_call

  def score(self, params, pairs: Sequence[Pair], *,
            max_segments: int | None = None, desc: str = "score"
            ) -> dict[Pair, np.ndarray]:
    """`{pair: scores of its valid segments, in order}`.

    `max_segments` keeps only the leading segments (1: FirstP).
    """
    rows = []
    for pair in pairs:
      count = self.source.num_segments(pair[1])
      if max_segments is not None:
        count = min(count, max_segments)
      rows.extend((pair, s) for s in range(count))
    out = {pair: [] for pair in pairs}
    chunk = self.rows_per_call
    for start in tqdm(range(0, len(rows), chunk), desc=desc, unit="batch",
                      leave=False, mininterval=2.0):
      part = rows[start:start + chunk]
      scores = self._score_rows(params, self.source.inputs(part))
      for ((pair, _), value) in zip(part, scores):
        out[pair].append(float(value))
    return {pair: np.asarray(v, np.float64) for pair, v in out.items()}
