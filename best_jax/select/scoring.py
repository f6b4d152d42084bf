"""Scoring only the valid segments of padded documents, in fixed-size chunks.

Documents arrive as `[docs, segments, length]` token arrays with a boolean
`segment_mask_ds`. Padded segments are never scored: the valid ones are gathered
into chunks of `chunk_size` rows (the last chunk padded and masked, never
dropped), each chunk is placed sharded over the mesh's data axis and scored by
one jitted function — every chunk has the same shape, so nothing recompiles
after the first — and the scores are scattered back into `scores_ds`, with
`-inf` on padded segments. `best_segments` takes the masked max/argmax per
document.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from best_jax.errors import InputError

# Index of the best segment of a document that has no valid segment.
NO_SEGMENT = -1


class SegmentScorer:
  """Scores the valid segments of `[docs, segments, length]` batches.

  The ranker is split once; its parameters are replicated over the mesh when
  they are not already placed on it (a model sharded by the training rules on
  the same mesh is used as it is). Scoring runs without dropout.
  """

  def __init__(self, ranker: nnx.Module, *, chunk_size: int,
               mesh: jax.sharding.Mesh | None = None,
               data_axis: str = "data", length_bucket: int | None = None):
    """Builds the scorer.

    Args:
      ranker: a module called as `ranker(ids_nl, mask_nl, types_nl) ->
        scores_n` (e.g. `CrossEncoderRanker`).
      chunk_size: rows per scoring call; a multiple of the data axis size.
      mesh: the device mesh; default: all devices on one axis `data_axis`.
      data_axis: the mesh axis (or axes) that chunks are split over.
      length_bucket: if given, rows are sorted by real length and each chunk
        is cut to its longest row rounded up to a multiple of this (less
        padding; at most `length / length_bucket` compiled shapes). Cutting
        trailing padding does not change a row's score.
    """
    if mesh is None:
      mesh = jax.make_mesh((jax.device_count(),), (data_axis,),
                           axis_types=(jax.sharding.AxisType.Auto,))
    shards = int(np.prod([mesh.shape[a] for a in np.atleast_1d(data_axis)]))
    if chunk_size <= 0 or chunk_size % shards:
      raise InputError(f"chunk_size {chunk_size} must be a positive multiple "
                       f"of the {shards} devices on mesh axis {data_axis!r}")
    if length_bucket is not None and length_bucket <= 0:
      raise InputError(f"length_bucket {length_bucket} must be positive")
    self.chunk_size = chunk_size
    self.length_bucket = length_bucket
    self.mesh = mesh
    self.rows = jax.NamedSharding(mesh, jax.P(data_axis, None))
    graphdef, state = nnx.split(ranker)
    replicated = jax.NamedSharding(mesh, jax.P())
    self._state = jax.tree.map(
        lambda x: x if _on_mesh(x, mesh) else jax.device_put(x, replicated),
        state)
    self._score = jax.jit(_make_score_fn(graphdef))

  @property
  def compiled_variants(self) -> int:
    """How many shapes the jitted scoring function was compiled for."""
    return self._score._cache_size()  # pylint: disable=protected-access

  def __call__(self, input_ids_dsl, attention_mask_dsl, token_type_ids_dsl,
               segment_mask_ds) -> np.ndarray:
    """Returns float32 `scores_ds`, `-inf` where `segment_mask_ds` is false."""
    segment_mask_ds = np.asarray(segment_mask_ds, bool)
    arrays = [np.asarray(a) for a in (input_ids_dsl, attention_mask_dsl,
                                      token_type_ids_dsl)]
    if any(a.shape[:2] != segment_mask_ds.shape or a.ndim != 3
           for a in arrays):
      raise InputError(
          f"token arrays {[a.shape for a in arrays]} do not match "
          f"segment_mask_ds {segment_mask_ds.shape} as [docs, segments, len]")
    docs, segments = np.nonzero(segment_mask_ds)
    mask_nl = arrays[1][docs, segments].astype(bool)
    length = mask_nl.shape[-1]
    if self.length_bucket:
      # Longest first; a row's real length is one past its last true mask.
      real_n = length - np.argmax(mask_nl[:, ::-1], axis=-1) * mask_nl.any(-1)
      order = np.argsort(-real_n, kind="stable")
      docs, segments, mask_nl, real_n = (docs[order], segments[order],
                                         mask_nl[order], real_n[order])
    ids_nl, types_nl = (a[docs, segments] for a in (arrays[0], arrays[2]))
    pending = []  # Dispatch every chunk before waiting for any result.
    for start in range(0, len(docs), self.chunk_size):
      width = length
      if self.length_bucket:
        width = min(length, -(-int(real_n[start]) // self.length_bucket)
                    * self.length_bucket)
      chunk = [_pad_rows(a[start:start + self.chunk_size, :width],
                         self.chunk_size)
               for a in (ids_nl, mask_nl, types_nl)]
      placed = jax.device_put(chunk, self.rows)
      pending.append(self._score(self._state, *placed))
    scores_n = np.concatenate(
        [np.asarray(s) for s in pending] + [np.zeros(0, np.float32)])
    scores_ds = np.full(segment_mask_ds.shape, -np.inf, np.float32)
    scores_ds[docs, segments] = scores_n[:len(docs)]
    return scores_ds


def best_segments(scores_ds: jax.Array,
                  segment_mask_ds: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Masked max and argmax over segments, per document.

  Returns:
    `(best_index_d, best_score_d)`: the index of the highest-scoring valid
    segment (first on ties) and its score; a document without any valid
    segment gets index `NO_SEGMENT` (-1) and score `-inf`, never NaN.
  """
  segment_mask_ds = jnp.asarray(segment_mask_ds, bool)
  masked_ds = jnp.where(segment_mask_ds, jnp.asarray(scores_ds, jnp.float32),
                        -jnp.inf)
  any_d = segment_mask_ds.any(axis=-1)
  # argmax over a row that is all -inf would be 0; replace it explicitly.
  index_d = jnp.where(any_d, jnp.argmax(masked_ds, axis=-1), NO_SEGMENT)
  return index_d, masked_ds.max(axis=-1, initial=-jnp.inf)


def _make_score_fn(graphdef: nnx.GraphDef) -> Callable:
  def score(state, ids_nl, mask_nl, types_nl):
    return nnx.merge(graphdef, state)(ids_nl, mask_nl, types_nl)
  return score


def _on_mesh(x, mesh: jax.sharding.Mesh) -> bool:
  sharding = getattr(x, "sharding", None)
  return (isinstance(sharding, jax.NamedSharding)
          and sharding.mesh.devices.tolist() == mesh.devices.tolist()
          and sharding.mesh.axis_names == mesh.axis_names)


def _pad_rows(rows: np.ndarray, size: int) -> np.ndarray:
  """Pads `rows` with zero rows up to `size` (a padded row is all-masked)."""
  return np.pad(rows, [(0, size - len(rows))] + [(0, 0)] * (rows.ndim - 1))
