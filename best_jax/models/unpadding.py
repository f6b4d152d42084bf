"""Unpadded encoding: the real tokens of padded rows as one flat stream.

A BERT's dense layers (projections, feed-forward, LayerNorms: most of its
FLOPs) cost the same per token, padding included. `Unpadding` maps the real
tokens of each unit's rows `[U, n, L]` to a stream `[U, T]` of a fixed size
T (`tokens`, static) and back, so those layers run on T tokens instead of
n·L; attention, which needs rows, runs on the padded rows (MosaicBERT's
unpadding). A unit is the rows one data shard holds, so nothing moves
between devices.

A stream slot past a unit's last real token is empty (zeros), and a row's
padding comes back as zeros. Each token draws its dropout as in its padded
row (`sites`), so the encoding equals the padded one up to float rounding.
Every unit's real tokens must fit in T (`train.token_budget.UnpaddedSteps`
checks each batch on the host; the encoder gives NaN for a unit that does
not fit, never a silently truncated row).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


def _take(x_u, index_u):
  """Per unit, `x[index]` along axis 1 (zeros where out of range)."""
  return jax.vmap(lambda x, i: jnp.take(x, i, axis=0, mode="fill",
                                        fill_value=0))(x_u, index_u)


@dataclasses.dataclass(frozen=True)
class Unpadding:
  """Where the real tokens of rows `[U, n, L]` sit in the stream `[U, T]`.

  `stream_ut`: the row slot (row · L + position) of stream slot t, n·L when
  t is empty. `slot_um`: the stream slot of row slot m, T for padding.
  """
  stream_ut: jax.Array
  slot_um: jax.Array
  rows: int
  length: int

  @classmethod
  def of(cls, mask_unl: jax.Array, tokens: int) -> Unpadding:
    units, rows, length = mask_unl.shape
    mask_um = mask_unl.reshape(units, rows * length).astype(bool)
    stream_ut = jax.vmap(lambda m: jnp.nonzero(
        m, size=tokens, fill_value=rows * length)[0])(mask_um)
    slot_um = jnp.where(mask_um, jnp.cumsum(mask_um, axis=1) - 1, tokens)
    return cls(stream_ut.astype(jnp.int32), slot_um.astype(jnp.int32), rows,
               length)

  @property
  def positions_ut(self) -> jax.Array:
    """Each stream token's position in its row (its position embedding)."""
    return self.stream_ut % self.length

  def sites(self, first: bool = False) -> tuple[jax.Array, jax.Array]:
    """(row, position) in the padded rows `[U·n, L]` of each stream token
    `[U, T]` (with `first`, of each row's first token `[U, n]`): where its
    dropout draws come from (`dropout.keep_mask_at`), so that a token is
    dropped exactly as in the padded encoder."""
    units = self.stream_ut.shape[0]
    first_row_u1 = jnp.arange(units, dtype=jnp.int32)[:, None] * self.rows
    if first:
      rows_un = first_row_u1 + jnp.arange(self.rows, dtype=jnp.int32)
      return rows_un, jnp.zeros_like(rows_un)
    return first_row_u1 + self.stream_ut // self.length, self.positions_ut

  @property
  def first_un(self) -> jax.Array:
    """The stream slot of each row's first token (T for an empty row)."""
    return self.slot_um[:, ::self.length]

  def unpad(self, x_um: jax.Array) -> jax.Array:
    """Row slots `[U, n·L, ...]` → stream `[U, T, ...]`."""
    return _take(x_um, self.stream_ut)

  def pad(self, x_ut: jax.Array) -> jax.Array:
    """Stream `[U, T, ...]` → rows `[U·n, L, ...]`, zeros on padding."""
    x_um = _take(x_ut, self.slot_um)
    return x_um.reshape((-1, self.length) + x_ut.shape[2:])

  def take(self, x_ut: jax.Array, index_uk: jax.Array) -> jax.Array:
    """Stream tokens `index_uk` of each unit: `[U, k, ...]`."""
    return _take(x_ut, index_uk)


@dataclasses.dataclass(frozen=True)
class TokenBudget:
  """How a batch's rows are encoded unpadded: `tokens` stream slots per
  unit, `units` units (the data shards), every unit's real tokens fitting."""
  tokens: int
  units: int
