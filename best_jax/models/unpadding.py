"""Unpadded encoding: the real tokens of padded rows as one flat stream.

A BERT's dense layers (projections, feed-forward, LayerNorms: most of its
FLOPs) cost the same per token, padding included. `Unpadding` maps the real
tokens of each unit's rows `[U, n, L]` to a stream `[U, T]` of a fixed size
T (`tokens`, static) and back, so those layers run on T tokens instead of
n·L (MosaicBERT's unpadding). A unit is the rows one data shard holds, so
nothing moves between devices.

Attention needs rows, and costs L² per row: it runs on length groups
(`AttentionGroup`). A unit's rows, longest first, fill groups of fixed
sizes (`rows`, static: how many rows attention takes at each length
⌈L·(g+1)/G⌉, g < G), so a short row is attended at its group's length, an
empty row not at all. Without `rows`, every row is attended at L.

A stream slot past a unit's last real token is empty (zeros), and a row's
padding comes back as zeros. Each token draws its dropout, and each
attention score its dropout, as in its padded row (`sites`,
`AttentionGroup.rows_b`), so the encoding equals the padded one up to float
rounding. Every unit's real tokens must fit in T and its rows in the groups
(`train.token_budget.UnpaddedSteps` checks each batch on the host); the
encoder gives NaN for a unit that does not fit (`fits_u`), never a silently
truncated row.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


def _take(x_u, index_u):
  """Per unit, `x[index]` along axis 1 (zeros where out of range)."""
  return jax.vmap(lambda x, i: jnp.take(x, i, axis=0, mode="fill",
                                        fill_value=0))(x_u, index_u)


def group_lengths(length: int, groups: int) -> tuple[int, ...]:
  """The lengths of `groups` attention groups of rows of `length`,
  ascending: ⌈length·(g + 1) / groups⌉."""
  return tuple(-(-length * (g + 1) // groups) for g in range(groups))


@dataclasses.dataclass(frozen=True)
class AttentionGroup:
  """Rows attention runs on at one `length`: `rows_uc`, each unit's c rows
  (their index among the unit's n), and `slot_ucl`, the stream slot of
  each of their first `length` positions (T, `tokens`, on padding)."""
  rows_uc: jax.Array
  slot_ucl: jax.Array
  length: int
  tokens: int
  rows_per_unit: int

  @property
  def rows_b(self) -> jax.Array:
    """The group's rows `[U·c]` as rows of the padded `[U·n, L]`."""
    first_u1 = jnp.arange(self.rows_uc.shape[0], dtype=jnp.int32)[:, None]
    return (self.rows_uc + self.rows_per_unit * first_u1).reshape(-1)

  @property
  def mask_bl(self) -> jax.Array:
    """`[U·c, length]`, true on real tokens."""
    return (self.slot_ucl < self.tokens).reshape(-1, self.length)

  def pad(self, x_ut: jax.Array) -> jax.Array:
    """Stream `[U, T, ...]` → the group's rows `[U·c, length, ...]`."""
    units = x_ut.shape[0]
    x_um = _take(x_ut, self.slot_ucl.reshape(units, -1))
    return x_um.reshape((-1, self.length) + x_ut.shape[2:])

  def take_rows(self, x_un: jax.Array) -> jax.Array:
    """Per-row values `[U, n, ...]` → the group's rows' `[U·c, ...]`."""
    x_uc = _take(x_un, self.rows_uc)
    return x_uc.reshape((-1,) + x_un.shape[2:])


@dataclasses.dataclass(frozen=True)
class Unpadding:
  """Where the real tokens of rows `[U, n, L]` sit in the stream `[U, T]`.

  `stream_ut`: the row slot (row · L + position) of stream slot t, n·L when
  t is empty. `slot_um`: the stream slot of row slot m, T for padding.
  `groups`: the attention groups, longest first; `rank_un`: each row's
  place in them (rows sorted longest first); `group_index_ut`: each stream
  token's place in the groups' rows laid end to end; `fits_u`: whether
  every row of the unit fits its group.
  """
  stream_ut: jax.Array
  slot_um: jax.Array
  rows: int
  length: int
  groups: tuple[AttentionGroup, ...]
  rank_un: jax.Array
  group_index_ut: jax.Array
  fits_u: jax.Array

  @classmethod
  def of(cls, mask_unl: jax.Array, tokens: int,
         group_rows: tuple[int, ...] = ()) -> Unpadding:
    """`group_rows[g]`: how many rows attention takes at the g-th of
    `group_lengths(L, len(group_rows))`; () for all n rows at L."""
    units, rows, length = mask_unl.shape
    mask_um = mask_unl.reshape(units, rows * length).astype(bool)
    stream_ut = jax.vmap(lambda m: jnp.nonzero(
        m, size=tokens, fill_value=rows * length)[0])(mask_um)
    stream_ut = stream_ut.astype(jnp.int32)
    slot_um = jnp.where(mask_um, jnp.cumsum(mask_um, axis=1) - 1,
                        tokens).astype(jnp.int32)
    # A row's length: its last real position + 1 (a gap stays in its row).
    lengths_un = jnp.max(jnp.where(mask_unl.astype(bool), jnp.arange(
        1, length + 1, dtype=jnp.int32), 0), axis=-1)
    order_un = jnp.argsort(-lengths_un, axis=1, stable=True).astype(jnp.int32)
    rank_un = jnp.argsort(order_un, axis=1).astype(jnp.int32)
    slot_unl = slot_um.reshape(units, rows, length)
    group_rows = tuple(group_rows) or (rows,)
    # Per rank (rows longest first; one more for empty stream slots): its
    # group's length, and where its row starts in the groups end to end.
    rank_length = np.zeros(rows + 1, np.int32)
    rank_start = np.zeros(rows + 1, np.int32)
    groups, start, offset = [], 0, 0
    for count, group_length in reversed(list(zip(
        group_rows, group_lengths(length, len(group_rows))))):
      count = min(count, rows - start)
      if count <= 0:
        continue
      rows_uc = order_un[:, start:start + count]
      slot_ucl = jnp.take_along_axis(slot_unl, rows_uc[..., None],
                                     axis=1)[..., :group_length]
      groups.append(AttentionGroup(rows_uc, slot_ucl, group_length, tokens,
                                   rows))
      rank_length[start:start + count] = group_length
      rank_start[start:start + count] = offset + group_length * np.arange(
          count)
      start, offset = start + count, offset + count * group_length
    rank_start[start:] = offset  # Past the groups: read as zeros.
    row_ut = jnp.minimum(stream_ut // length, rows)
    rank_ut = jnp.where(row_ut < rows, jnp.take_along_axis(
        rank_un, jnp.minimum(row_ut, rows - 1), axis=1), rows)
    group_index_ut = jnp.asarray(rank_start)[rank_ut] + stream_ut % length
    fits_u = jnp.all(lengths_un <= jnp.asarray(rank_length)[rank_un], axis=1)
    return cls(stream_ut, slot_um, rows, length, tuple(groups), rank_un,
               group_index_ut, fits_u)

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

  def from_groups(self, parts: list[jax.Array], first: bool = False
                  ) -> jax.Array:
    """The groups' outputs `[U·c, length, ...]` (with `first`, `[U·c, ...]`
    of each row's first token), in `groups` order → the stream `[U, T,
    ...]` (with `first`, the rows `[U, n, ...]`)."""
    units = self.stream_ut.shape[0]
    flat = jnp.concatenate(
        [p.reshape((units, -1) + p.shape[(1 if first else 2):])
         for p in parts], axis=1)
    return _take(flat, self.rank_un if first else self.group_index_ut)

  def take(self, x_ut: jax.Array, index_uk: jax.Array) -> jax.Array:
    """Stream tokens `index_uk` of each unit: `[U, k, ...]`."""
    return _take(x_ut, index_uk)


@dataclasses.dataclass(frozen=True)
class TokenBudget:
  """How a batch's rows are encoded unpadded: `tokens` stream slots per
  unit, `rows` per attention group (`Unpadding.of`), `units` units (the
  data shards), every unit fitting."""
  tokens: int
  rows: tuple[int, ...] = ()
  units: int = 1
