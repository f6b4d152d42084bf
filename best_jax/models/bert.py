"""A BERT encoder in Flax NNX, numerically equal to Hugging Face `BertModel`.

Post-LayerNorm BERT (embeddings → LayerNorm → N × [self-attention, add &
LayerNorm, GELU feed-forward, add & LayerNorm]); the pooler is left out (the
rankers' heads read the `[CLS]` hidden state, `models.ranker`). The same
encoder is ELECTRA's (embeddings projected to the hidden size) and
RoBERTa's / XLM-R's (positions from padding_idx + 1, one token type):
`BertConfig` says which (`models.families`).

Dropout is active if and only if `rngs` is passed to `__call__`, so scoring and
segment selection are deterministic by construction; a train step passes
`nnx.Rngs(dropout=jax.random.fold_in(key, step))`.

Every parameter carries logical axis names (metadata `out_sharding`, read with
`nnx.get_partition_spec`), which a training configuration maps to mesh axes:

  vocab  the vocabulary axis of the word embedding table
  embed  the hidden (model) dimension
  mlp    the feed-forward inner dimension
  heads  the attention-head axis of the query/key/value/output kernels
  kv     the per-head dimension (`hidden_size // num_heads`)

Position and token-type tables use `None` for their row axis. Parameters are
created without eager sharding, so a model can be built anywhere (also inside
`jax.eval_shape`) and placed by the caller.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from best_jax.errors import InputError
from best_jax.models.attention import (attention, attention_plan,
                                       blocked_attention)
from best_jax.models.bert_config import BertConfig
from best_jax.models.dropout import dropout
from best_jax.models.unpadding import Unpadding

Axes = tuple[str | None, ...]


def _meta(axes: Axes) -> dict[str, Any]:
  """Parameter metadata: logical axis names, no eager sharding."""
  return {"out_sharding": axes, "eager_sharding": False}


def _linear(in_features, out_features, kernel_axes: Axes, bias_axes: Axes,
            config: BertConfig, rngs: nnx.Rngs, axis=-1) -> nnx.LinearGeneral:
  return nnx.LinearGeneral(
      in_features, out_features, axis=axis, dtype=config.dtype,
      param_dtype=config.param_dtype,
      kernel_init=nnx.initializers.truncated_normal(0.02),
      kernel_metadata=_meta(kernel_axes), bias_metadata=_meta(bias_axes),
      rngs=rngs)


def _layer_norm(config: BertConfig, rngs: nnx.Rngs,
                width: int | None = None) -> nnx.LayerNorm:
  return nnx.LayerNorm(
      width or config.hidden_size, epsilon=config.layer_norm_eps, dtype=config.dtype,
      param_dtype=config.param_dtype, use_fast_variance=False,
      scale_metadata=_meta(("embed",)), bias_metadata=_meta(("embed",)),
      rngs=rngs)


def _batch_sharded(x: jax.Array, features: int,
                   leading: int = 2) -> jax.NamedSharding | None:
  """Under an explicit mesh: `x`'s sharding on its `leading` axes (batch, or
  batch and length) and `features` unsharded trailing axes. None otherwise.

  Contractions over a sharded axis (e.g. heads or mlp) need their output
  sharding spelled out under an explicit mesh; this keeps the activations
  batch-sharded without naming any mesh axis in model code.
  """
  sharding = jax.typeof(x).sharding
  if jax.sharding.AxisType.Explicit not in sharding.mesh.axis_types:
    return None
  spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
  return jax.NamedSharding(sharding.mesh,
                           jax.P(*spec[:leading], *[None] * features))


def _lookup(table: nnx.Param, ids_bl: jax.Array) -> jax.Array:
  """Rows of `table` for `ids_bl`, sharded like the ids (explicit mesh)."""
  out_sharding = _batch_sharded(ids_bl, 1)
  if out_sharding is not None:
    return table.get_value().at[ids_bl].get(out_sharding=out_sharding)
  return jnp.take(table.get_value(), ids_bl, axis=0)


class Embeddings(nnx.Module):
  """Word + position + token-type embeddings, LayerNorm, dropout; projected
  to `hidden_size` when `embedding_size` differs (ELECTRA).

  Positions start at `position_offset` (RoBERTa's padding_idx + 1); with one
  token type (RoBERTa, XLM-R) every token has type 0.
  """

  def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
    self.config = config
    init = nnx.initializers.truncated_normal(0.02)
    width = config.embedding_width

    def table(rows: int, axes: Axes) -> nnx.Embed:
      return nnx.Embed(rows, width, dtype=config.dtype,
                       param_dtype=config.param_dtype, embedding_init=init,
                       embedding_metadata=_meta(axes), rngs=rngs)

    self.word = table(config.vocab_size, ("vocab", "embed"))
    self.position = table(config.max_position_embeddings, (None, "embed"))
    self.token_type = table(config.type_vocab_size, (None, "embed"))
    self.norm = _layer_norm(config, rngs, width)
    self.project = (_linear(width, config.hidden_size, (None, "embed"),
                            ("embed",), config, rngs)
                    if width != config.hidden_size else None)

  def __call__(self, input_ids_bl, token_type_ids_bl, rngs=None, *,
               sites=None, length=None) -> jax.Array:
    """Embeds `[..., length]` ids at positions 0, 1, …, or an unpadded
    stream's ids from rows of `length`, each at its `sites` (row,
    position)."""
    config = self.config
    length = input_ids_bl.shape[-1] if length is None else length
    if length > config.positions:
      raise InputError(f"sequence length {length} exceeds the model's "
                       f"{config.positions} positions")
    dtype = config.dtype
    if config.type_vocab_size == 1:
      token_type_ids_bl = jnp.zeros_like(token_type_ids_bl)
    words_bld = _lookup(self.word.embedding, input_ids_bl)
    types_bld = _lookup(self.token_type.embedding, token_type_ids_bl)
    offset = config.position_offset
    positions_bld = (self.position.embedding[offset:offset + length]
                     if sites is None
                     else _lookup(self.position.embedding, sites[1] + offset))
    x_bld = (words_bld.astype(dtype) + types_bld.astype(dtype)
             + positions_bld.astype(dtype))
    x_bld = dropout(self.norm(x_bld), config.hidden_dropout, rngs, sites)
    if self.project is None:
      return x_bld
    return self.project(x_bld, out_sharding=_batch_sharded(x_bld, 1))


class SelfAttention(nnx.Module):
  """Multi-head self-attention, computed in [batch, heads, length, head_dim].

  The projections write that layout directly (one dot each, no transposes of
  activations). How the [length, length] scores are formed follows
  `attention_block` (see `BertConfig`; `attention_plan` decides for None).
  """

  def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
    self.config = config
    heads = (config.num_heads, config.head_dim)

    def projection() -> nnx.LinearGeneral:
      return _linear(config.hidden_size, heads, ("embed", "heads", "kv"),
                     ("heads", "kv"), config, rngs)

    self.query = projection()
    self.key = projection()
    self.value = projection()
    self.output = _linear(heads, config.hidden_size, ("heads", "kv", "embed"),
                          ("embed",), config, rngs, axis=(-2, -1))

  def _heads(self, layer: nnx.LinearGeneral, x_bld: jax.Array,
             scale: float = 1.0) -> jax.Array:
    """x [batch, length, d] → [batch, heads, length, head_dim]."""
    dtype = self.config.dtype
    kernel_dhk = layer.kernel.get_value().astype(dtype)
    bias_hk = layer.bias.get_value().astype(dtype)
    if scale != 1.0:
      kernel_dhk, bias_hk = kernel_dhk * scale, bias_hk * scale
    y_bhlk = jnp.einsum("bld,dhk->bhlk", x_bld.astype(dtype), kernel_dhk,
                        out_sharding=_batch_sharded(x_bld, 3, leading=1))
    return y_bhlk + bias_hk[None, :, None, :]

  def __call__(self, x_bld, mask_bl, rngs=None, *,
               first_only: bool = False) -> jax.Array:
    """[batch, length, d] → [batch, length, d]; with `first_only`, only the
    first position's output [batch, 1, d] (its query against every key)."""
    config = self.config
    query_bld = x_bld[:, :1] if first_only else x_bld
    q_bhld = self._heads(self.query, query_bld, config.head_dim ** -0.5)
    k_bhld = self._heads(self.key, x_bld)
    v_bhld = self._heads(self.value, x_bld)
    context_bhld = self._context(q_bhld, k_bhld, v_bhld, mask_bl,
                                 *self._dropout(rngs))
    kernel_hkd = self.output.kernel.get_value().astype(config.dtype)
    out_bld = jnp.einsum("bhlk,hkd->bld", context_bhld, kernel_hkd,
                         out_sharding=_batch_sharded(x_bld, 2, leading=1))
    return out_bld + self.output.bias.get_value().astype(config.dtype)

  def _dropout(self, rngs) -> tuple[float, jax.Array | None]:
    """(rate, key) of the attention probabilities' dropout: one key per
    layer, however many calls of `_context` share it."""
    rate = self.config.attention_dropout if rngs is not None else 0.0
    return rate, (rngs.dropout() if rate else None)

  def _context(self, q_bhqk, k_bhlk, v_bhlk, mask_bl, rate, key, *,
               rows=None, padded=None) -> jax.Array:
    """Softmax attention of queries `[b, h, q, k]` (q = length, or 1: the
    first position) over the keys, blocked or batched per
    `attention_block`; `rows`, `padded` as in `dropout.keep_mask` (a
    length group of padded rows)."""
    config = self.config
    block = (attention_plan(*q_bhqk.shape[:3]) if config.attention_block is None
             else config.attention_block)
    if block and q_bhqk.shape[2] == k_bhlk.shape[2] > 1:
      return blocked_attention(q_bhqk, k_bhlk, v_bhlk, mask_bl, block, rate,
                               key, rows=rows, padded=padded)
    return attention(q_bhqk, k_bhlk, v_bhlk, mask_bl[:, None, None], rate,
                     key, rows=rows, padded=padded)

  def unpadded(self, x_utd, unpadding: Unpadding, rngs=None, *,
               first: bool = False) -> jax.Array:
    """`__call__` on an unpadded stream `[U, T, d]` (`models.unpadding`):
    projections on the stream, attention on each length group of rows.
    With `first`, only each row's first token's output `[U, n, d]`."""
    dtype = self.config.dtype

    def heads(layer, x, scale=1.0):  # [U, t, d] → [U, t, heads, head_dim]
      kernel = layer.kernel.get_value().astype(dtype) * scale
      return (jnp.einsum("utd,dhk->uthk", x.astype(dtype), kernel)
              + layer.bias.get_value().astype(dtype) * scale)

    scale = self.config.head_dim ** -0.5
    k_uthk, v_uthk = heads(self.key, x_utd), heads(self.value, x_utd)
    if first:
      q_unhk = heads(self.query, unpadding.take(x_utd, unpadding.first_un),
                     scale)
    else:
      q_uthk = heads(self.query, x_utd, scale)
    def rows(group, x_uthk):  # → the group's [U·c, heads, length, head_dim]
      return jnp.swapaxes(group.pad(x_uthk), 1, 2)

    rate, key = self._dropout(rngs)
    contexts = []
    for group in unpadding.groups:
      q_bhqk = (group.take_rows(q_unhk)[:, :, None] if first
                else rows(group, q_uthk))
      context_bhqk = self._context(
          q_bhqk, rows(group, k_uthk), rows(group, v_uthk), group.mask_bl,
          rate, key, rows=group.rows_b,
          padded=(1 if first else unpadding.length, unpadding.length))
      contexts.append(context_bhqk[:, :, 0] if first
                      else jnp.swapaxes(context_bhqk, 1, 2))
    context_uthk = unpadding.from_groups(contexts, first=first)
    kernel_hkd = self.output.kernel.get_value().astype(dtype)
    return (jnp.einsum("uthk,hkd->utd", context_uthk, kernel_hkd)
            + self.output.bias.get_value().astype(dtype))


class Layer(nnx.Module):
  """One post-LayerNorm transformer layer."""

  def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.attention = SelfAttention(config, rngs=rngs)
    self.attention_norm = _layer_norm(config, rngs)
    self.intermediate = _linear(config.hidden_size, config.intermediate_size,
                                ("embed", "mlp"), ("mlp",), config, rngs)
    self.output = _linear(config.intermediate_size, config.hidden_size,
                          ("mlp", "embed"), ("embed",), config, rngs)
    self.output_norm = _layer_norm(config, rngs)

  def __call__(self, x_bld, mask_bl, rngs=None, *,
               first_only: bool = False) -> jax.Array:
    """One layer; with `first_only`, just the first position's output
    [batch, 1, d] (what a [CLS] head reads from the last layer)."""
    rate = self.config.hidden_dropout
    attended_bld = dropout(
        self.attention(x_bld, mask_bl, rngs, first_only=first_only), rate,
        rngs)
    if first_only:
      x_bld = x_bld[:, :1]
    return self._feed_forward(self.attention_norm(x_bld + attended_bld), rngs)

  def _feed_forward(self, x_bld, rngs, sites=None) -> jax.Array:
    rate = self.config.hidden_dropout
    inner_blm = jax.nn.gelu(self.intermediate(x_bld), approximate=False)
    out_bld = self.output(inner_blm, out_sharding=_batch_sharded(inner_blm, 1))
    out_bld = dropout(out_bld, rate, rngs, sites)
    return self.output_norm(x_bld + out_bld)

  def unpadded(self, x_utd, unpadding: Unpadding, rngs=None, *,
               first: bool = False) -> jax.Array:
    """`__call__` on an unpadded stream `[U, T, d]`; with `first`, only
    each row's first token `[U, n, d]` (see `SelfAttention.unpadded`)."""
    sites = unpadding.sites(first=first)
    attended = dropout(self.attention.unpadded(x_utd, unpadding, rngs,
                                               first=first),
                       self.config.hidden_dropout, rngs, sites)
    if first:
      x_utd = unpadding.take(x_utd, unpadding.first_un)
    return self._feed_forward(self.attention_norm(x_utd + attended), rngs,
                              sites)


class BertEncoder(nnx.Module):
  """BERT without pooler: token ids → hidden states [batch, length, d]."""

  def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.embeddings = Embeddings(config, rngs=rngs)
    self.layers = nnx.List(
        [Layer(config, rngs=rngs) for _ in range(config.num_layers)])

  def __call__(self, input_ids: jax.Array, attention_mask: jax.Array,
               token_type_ids: jax.Array, *, rngs: nnx.Rngs | None = None,
               first_only: bool = False) -> jax.Array:
    """Encodes `[batch, length]` ids; dropout only if `rngs` is given.

    Args:
      input_ids: int [batch, length] token ids.
      attention_mask: [batch, length], true (or 1) on real tokens.
      token_type_ids: int [batch, length] segment ids (0 query, 1 document).
      rngs: an `nnx.Rngs` with a `dropout` stream, for training only.
      first_only: return only the first ([CLS]) position, [batch, hidden]:
        the last layer then runs its attention query, feed-forward and norms
        for that position alone (the same values, a layer's FLOPs less).

    Returns:
      Hidden states [batch, length, hidden_size] in `config.dtype`. Rows whose
      mask is all false give finite (meaningless) values, never NaN.
    """
    mask_bl = attention_mask.astype(bool)
    x_bld = self.embeddings(input_ids, token_type_ids, rngs)
    last = len(self.layers) - 1
    for i, layer in enumerate(self.layers):
      x_bld = layer(x_bld, mask_bl, rngs, first_only=first_only and i == last)
    return x_bld[:, 0] if first_only else x_bld

  def first_unpadded(self, input_ids: jax.Array, attention_mask: jax.Array,
                     token_type_ids: jax.Array, *, tokens: int,
                     rows: tuple[int, ...] = (),
                     rngs: nnx.Rngs | None = None) -> jax.Array:
    """`__call__(first_only=True)` of rows `[U, n, L]` (U units, e.g. data
    shards), computed unpadded (`models.unpadding`): every layer's dense
    parts run on a stream of `tokens` per unit, attention on the length
    groups of `rows` (() for every row at L), with the padded encoder's
    dropout draws. Returns `[U·n, hidden]`; the rows of a unit whose real
    tokens do not fit in `tokens`, or its rows in the groups, are NaN.
    """
    units, num_rows, length = input_ids.shape
    unpadding = Unpadding.of(attention_mask, tokens, rows)
    flat = lambda x: x.reshape(units, num_rows * length)  # pylint: disable=unnecessary-lambda-assignment
    x_utd = self.embeddings(unpadding.unpad(flat(input_ids)),
                            unpadding.unpad(flat(token_type_ids)), rngs,
                            sites=unpadding.sites(), length=length)
    last = len(self.layers) - 1
    for i, layer in enumerate(self.layers):
      x_utd = layer.unpadded(x_utd, unpadding, rngs, first=i == last)
    fits_u11 = ((jnp.sum(attention_mask.astype(jnp.int32), axis=(1, 2))
                 <= tokens) & unpadding.fits_u)[:, None, None]
    return jnp.where(fits_u11, x_utd, jnp.nan).reshape(units * num_rows, -1)
