"""Dropout for the BERT encoder, drawn at a quarter of `jax.random`'s cost.

`keep_mask` draws a Bernoulli mask from threefry counters that are element
positions (so the values do not depend on sharding, and blocked attention
drops what batched attention would); `keep_mask_at` draws the same values at
given (row, position) sites, which is how an unpadded stream
(`models.unpadding`) drops exactly what its padded rows would; `dropout`
applies either.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx
from jax.extend.random import threefry2x32_p

# Dropout draws 16-bit uniforms: a keep probability is rounded to a multiple
# of 1/65536 (0.9 → 0.899994), and one threefry block gives four draws.
_DROPOUT_BITS = 16


def keep_mask(key: jax.Array, shape: tuple[int, ...], rate: float, *,
              pairs: tuple[jax.Array, int] | None = None,
              rows: jax.Array | None = None,
              padded: tuple[int, int] | None = None) -> jax.Array:
  """Bernoulli(1 - `rate`) booleans of `shape`, a pure function of `key`.

  `jax.random.bernoulli` spends one threefry block (two 32-bit words) per
  draw; this spends one per four 16-bit draws, the cost that dominated a
  CPU train step. Counters are element positions: the leading index and the
  flat position within it, so the values do not depend on sharding.

  `pairs=(first, heads)` says that axis 0 of `shape` enumerates (sequence,
  head) pairs from pair `first` on, `heads` per sequence: the mask then
  equals the rows of `keep_mask(key, (batch, heads, *shape[1:]), rate)`
  for those pairs, so blocked and batched attention drop the same scores.

  `rows` (the row of each sequence of axis 0, or of each pair's sequence)
  and `padded` (the last two axes' sizes in those rows, e.g. the attention
  scores' (queries, keys)) draw the leading part of the padded rows' mask:
  attention on a length group of rows (`models.unpadding`) drops what it
  would on the padded rows.
  """
  shape = tuple(shape)
  threshold = round(rate * 2 ** _DROPOUT_BITS)
  if not shape or threshold == 0:
    return jnp.ones(shape, bool)
  *lead, last = shape
  blocks_shape = (*lead, -(-last // 4))  # One block → two words → 4 draws.
  counters = blocks_shape  # The shape whose element positions count.
  if padded is not None:
    counters = (*blocks_shape[:-2], padded[0], -(-padded[1] // 4))
  per_pair = math.prod(counters[1:])
  heads = 1 if pairs is None else pairs[1]
  if per_pair * heads >= 2 ** 32:
    raise ValueError(f"dropout on {shape} needs more than 2**32 counters "
                     "per leading index")
  iota = lambda axis: jax.lax.broadcasted_iota(jnp.uint32, blocks_shape, axis)
  inner = jnp.zeros(blocks_shape, jnp.uint32)
  stride = 1
  for axis in range(len(blocks_shape) - 1, 0, -1):
    inner += iota(axis) * jnp.uint32(stride)
    stride *= counters[axis]
  if len(blocks_shape) == 1:
    return _draws(key, inner, jnp.zeros_like(inner), last) >= jnp.uint16(
        threshold)
  index = jnp.arange(blocks_shape[0], dtype=jnp.uint32)  # Along axis 0.
  if pairs is not None:
    pair = index + jnp.asarray(pairs[0], jnp.uint32)
    index = pair // jnp.uint32(heads)
    inner += _along_axis_0(pair % jnp.uint32(heads) * jnp.uint32(per_pair),
                           blocks_shape)
  if rows is not None:
    index = jnp.asarray(rows, jnp.uint32)[index]
  outer = _along_axis_0(index, blocks_shape)
  return _draws(key, inner, outer, last) >= jnp.uint16(threshold)


def _along_axis_0(values: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """`values` `[shape[0]]` broadcast to `shape` along its first axis."""
  return jnp.broadcast_to(values.reshape((-1,) + (1,) * (len(shape) - 1)),
                          shape)


def keep_mask_at(key: jax.Array, rows: jax.Array, positions: jax.Array,
                 features: int, rate: float) -> jax.Array:
  """`keep_mask(key, (R, L, features), rate)[rows, positions]`, drawn for
  those (row, position) pairs alone: `[*rows.shape, features]`. An unpadded
  stream's tokens (`models.unpadding`) drop what the padded rows would."""
  threshold = round(rate * 2 ** _DROPOUT_BITS)
  if threshold == 0:
    return jnp.ones((*rows.shape, features), bool)
  blocks = -(-features // 4)
  inner = (positions.astype(jnp.uint32)[..., None] * jnp.uint32(blocks)
           + jnp.arange(blocks, dtype=jnp.uint32))
  outer = jnp.broadcast_to(rows.astype(jnp.uint32)[..., None], inner.shape)
  return _draws(key, inner, outer, features) >= jnp.uint16(threshold)


def _draws(key: jax.Array, inner: jax.Array, outer: jax.Array,
           last: int) -> jax.Array:
  """16-bit uniforms from threefry counters `[..., blocks]`, four per block,
  the last axis cut to `last`."""
  if str(jax.random.key_impl(key)) == "threefry2x32":
    k1, k2 = jax.random.key_data(key)
  else:  # Another implementation seeds a threefry key.
    k1, k2 = jax.random.bits(key, (2,), jnp.uint32)
  words = jnp.stack(threefry2x32_p.bind(k1, k2, inner, outer), axis=-1)
  draws = jax.lax.bitcast_convert_type(words, jnp.uint16)  # [..., n, 2, 2]
  return draws.reshape(*inner.shape[:-1], -1)[..., :last]


def dropout(x: jax.Array, rate: float, rngs: nnx.Rngs | None,
            sites: tuple[jax.Array, jax.Array] | None = None) -> jax.Array:
  """Inverted dropout, active only when `rngs` is given. `x` is `[R, L, d]`
  rows, or with `sites` (each token's row and position in such rows) an
  unpadded stream, dropped as those rows would be."""
  if rngs is None or rate == 0.0:
    return x
  if sites is None:
    keep = keep_mask(rngs.dropout(), x.shape, rate)
  else:
    keep = keep_mask_at(rngs.dropout(), *sites, x.shape[-1], rate)
  return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)
