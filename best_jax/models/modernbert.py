"""ModernBERT in Flax NNX, numerically equal to transformers' `ModernBertModel`
and `ModernBertForSequenceClassification` (the gte-reranker-modernbert family).

Token embeddings → LayerNorm (no position embeddings); N pre-norm layers
(layer 0 without attention norm) of fused-QKV attention with rotary
positions, global (rope θ `global_rope_theta`) or local (θ
`local_rope_theta`, keys within `local_attention // 2` positions), and a
GeGLU feed-forward (`act(input) · gate`); a final LayerNorm. The
classification head pools `[CLS]` or the mean over the mask, then dense →
act → LayerNorm → classifier (transformers drops before the classifier in
training; best_jax's heads have no dropout). Biases and norm biases exist only
where the config asks for them (none, by default).

Rows run padded `[batch, length]` or unpadded (`models.unpadding`: the real
tokens as one stream, attention on length groups of rows, each token at its
padded position), through one layer code: `_Rows` says where positions,
dropout draws and attention come from. Local layers attend in bands
(`banded_attention`). Dropout is active iff `rngs` is given. Parameters
carry the logical axes of `bert.py` (vocab, embed, mlp, heads, kv).

Its config is `modernbert_config`; its `models.families` entry, with the
plain tensor maps to and from transformers' names, `modernbert_family`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from best_jax.errors import InputError
from best_jax.models.attention import (attention, attention_plan,
                                       blocked_attention)
from best_jax.models.dropout import dropout
from best_jax.models.modernbert_config import (ACTIVATIONS, LOCAL,
                                               ModernBertConfig)
from best_jax.models.unpadding import Unpadding

# An empty row's mean pools to 0, not NaN (transformers divides by 0).
_MIN_TOKENS = 1e-9


# --- Modules -----------------------------------------------------------------

Axes = tuple[str | None, ...]


def _meta(axes: Axes) -> dict[str, Any]:
  return {"out_sharding": axes, "eager_sharding": False}


def _linear(in_features, out_features, kernel_axes: Axes, use_bias: bool,
            config: ModernBertConfig, rngs: nnx.Rngs, *, axis=-1,
            dtype=None) -> nnx.LinearGeneral:
  return nnx.LinearGeneral(
      in_features, out_features, axis=axis, use_bias=use_bias,
      dtype=dtype or config.dtype, param_dtype=config.param_dtype,
      kernel_init=nnx.initializers.truncated_normal(0.02),
      kernel_metadata=_meta(kernel_axes),
      bias_metadata=_meta(kernel_axes[len(np.atleast_1d(in_features)):]),
      rngs=rngs)


def _norm(config: ModernBertConfig, rngs: nnx.Rngs,
          dtype=None) -> nnx.LayerNorm:
  return nnx.LayerNorm(
      config.hidden_size, epsilon=config.norm_eps, use_bias=config.norm_bias,
      dtype=dtype or config.dtype, param_dtype=config.param_dtype,
      use_fast_variance=False, scale_metadata=_meta(("embed",)),
      bias_metadata=_meta(("embed",)), rngs=rngs)


def rotary(x_xthk: jax.Array, positions_xt: jax.Array,
           theta: float) -> jax.Array:
  """Rotary position embedding of `[..., t, heads, head_dim]` at integer
  positions `[..., t]`, in float32 (transformers' `apply_rotary_pos_emb`)."""
  dim = x_xthk.shape[-1]
  inv_freq = 1.0 / (np.float32(theta) ** (
      np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
  freqs_xtf = positions_xt.astype(jnp.float32)[..., None] * inv_freq
  angles_xt1k = jnp.concatenate([freqs_xtf, freqs_xtf], axis=-1)[..., None, :]
  x = x_xthk.astype(jnp.float32)
  half = dim // 2
  rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  return (x * jnp.cos(angles_xt1k)
          + rotated * jnp.sin(angles_xt1k)).astype(x_xthk.dtype)


def banded_attention(q_bhlk, k_bhlk, v_bhlk, mask_bl,
                     window: int) -> jax.Array:
  """Local attention (`|query - key| <= window`) without dropout, on chunks
  of `window` queries against the keys of their chunk and the two beside
  it: `[length, 3 · window]` scores instead of `[length, length]`."""
  batch, heads, length, dim = q_bhlk.shape
  chunks = -(-length // window)
  tail = chunks * window - length

  def windows(x, axis):  # [..., L, ...] → [..., chunks, 3 · window, ...]
    pad = [(0, 0)] * x.ndim
    pad[axis] = (window, tail + window)
    x = jnp.pad(x, pad)
    x = x.reshape(x.shape[:axis] + (chunks + 2, window) + x.shape[axis + 1:])
    return jnp.concatenate([jax.lax.slice_in_dim(x, i, i + chunks, axis=axis)
                            for i in range(3)], axis=axis + 1)

  q_bhcwd = jnp.pad(q_bhlk, [(0, 0), (0, 0), (0, tail), (0, 0)]).reshape(
      batch, heads, chunks, window, dim)
  offset_ws = (jnp.arange(window)[:, None] + window
               - jnp.arange(3 * window)[None])
  mask_b1cws = (windows(mask_bl, 1)[:, None, :, None, :]
                & (jnp.abs(offset_ws) <= window))
  logits = jnp.einsum("bhcqd,bhcsd->bhcqs", q_bhcwd, windows(k_bhlk, 2),
                      preferred_element_type=jnp.float32)
  logits = jnp.where(mask_b1cws, logits, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(logits, axis=-1).astype(v_bhlk.dtype)
  context = jnp.einsum("bhcqs,bhcsd->bhcqd", probs, windows(v_bhlk, 2))
  return context.reshape(batch, heads, chunks * window, dim)[:, :, :length]


def _attend(q_bhqk, k_bhlk, v_bhlk, mask_bl, window: int | None, rate: float,
            key, *, block: int | None = None, rows=None,
            padded=None) -> jax.Array:
  """Softmax attention of rows; local (`|query - key| <= window`) when
  `window` is set (banded for rows longer than 3 windows, without
  dropout), else global, blocked per `block` (`attention_block`)."""
  length = k_bhlk.shape[2]
  if window is not None and not rate and length > 3 * window:
    return banded_attention(q_bhqk, k_bhlk, v_bhlk, mask_bl, window)
  if window is None:
    block = attention_plan(*q_bhqk.shape[:3]) if block is None else block
    if block and length > 1:
      return blocked_attention(q_bhqk, k_bhlk, v_bhlk, mask_bl, block, rate,
                               key, rows=rows, padded=padded)
    mask = mask_bl[:, None, None, :]
  else:
    position = jnp.arange(length)
    near_qk = jnp.abs(position[:, None] - position[None, :]) <= window
    mask = mask_bl[:, None, None, :] & near_qk
  return attention(q_bhqk, k_bhlk, v_bhlk, mask, rate, key, rows=rows,
                   padded=padded)


@dataclasses.dataclass(frozen=True)
class _Rows:
  """Where a layer's tokens `[X, T, ...]` sit: padded rows (`mask_bl`) or
  an unpadded stream (`unpadding`)."""
  mask_bl: jax.Array | None = None
  unpadding: Unpadding | None = None

  @property
  def positions(self) -> jax.Array:
    if self.unpadding is not None:
      return self.unpadding.positions_ut
    return jnp.arange(self.mask_bl.shape[1])[None]

  @property
  def sites(self):
    return None if self.unpadding is None else self.unpadding.sites()

  def attend(self, q_xthk, k_xthk, v_xthk, window, rate, key,
             block) -> jax.Array:
    """Context `[X, T, heads, head_dim]` of the (scaled) queries."""
    swap = functools.partial(jnp.swapaxes, axis1=1, axis2=2)
    if self.unpadding is None:
      return swap(_attend(swap(q_xthk), swap(k_xthk), swap(v_xthk),
                          self.mask_bl, window, rate, key, block=block))
    unpadding, parts = self.unpadding, []
    for group in unpadding.groups:
      rows = lambda x, group=group: swap(group.pad(x))  # pylint: disable=unnecessary-lambda-assignment
      parts.append(swap(_attend(
          rows(q_xthk), rows(k_xthk), rows(v_xthk), group.mask_bl, window,
          rate, key, block=block, rows=group.rows_b,
          padded=(unpadding.length, unpadding.length))))
    return unpadding.from_groups(parts)


class Attention(nnx.Module):
  """Fused-QKV self-attention with rotary positions, global or local."""

  def __init__(self, config: ModernBertConfig, layer: int, *,
               rngs: nnx.Rngs):
    self.config = config
    heads = (config.num_heads, config.head_dim)
    self.qkv = _linear(config.hidden_size, (3,) + heads,
                       ("embed", None, "heads", "kv"), config.attention_bias,
                       config, rngs)
    self.out = _linear(heads, config.hidden_size, ("heads", "kv", "embed"),
                       config.attention_bias, config, rngs, axis=(-2, -1))
    is_local = config.layer_types[layer] == LOCAL
    self.window = config.local_attention // 2 if is_local else None
    self.theta = (config.local_rope_theta if is_local
                  else config.global_rope_theta)

  def __call__(self, x_xtd, rows: _Rows, rngs=None) -> jax.Array:
    qkv_xt3hk = self.qkv(x_xtd)
    q, k, v = (qkv_xt3hk[..., i, :, :] for i in range(3))
    positions = rows.positions
    q = rotary(q, positions, self.theta) * self.config.head_dim ** -0.5
    k = rotary(k, positions, self.theta)
    rate = self.config.attention_dropout if rngs is not None else 0.0
    key = rngs.dropout() if rate else None
    context_xthk = rows.attend(q, k, v, self.window, rate, key,
                               self.config.attention_block)
    return dropout(self.out(context_xthk), rate, rngs, rows.sites)


class Mlp(nnx.Module):
  """GeGLU feed-forward: Wo(act(input) · gate), `Wi` = [input | gate]."""

  def __init__(self, config: ModernBertConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.wi = _linear(config.hidden_size, (2, config.intermediate_size),
                      ("embed", None, "mlp"), config.mlp_bias, config, rngs)
    self.wo = _linear(config.intermediate_size, config.hidden_size,
                      ("mlp", "embed"), config.mlp_bias, config, rngs)

  def __call__(self, x_xtd, rows: _Rows, rngs=None) -> jax.Array:
    inner_xt2m = self.wi(x_xtd)
    act = ACTIVATIONS[self.config.hidden_activation]
    inner_xtm = act(inner_xt2m[..., 0, :]) * inner_xt2m[..., 1, :]
    return self.wo(dropout(inner_xtm, self.config.mlp_dropout, rngs,
                           rows.sites))


class Layer(nnx.Module):
  """Pre-norm layer: x + attn(attn_norm(x)), then x + mlp(mlp_norm(x))."""

  def __init__(self, config: ModernBertConfig, layer: int, *,
               rngs: nnx.Rngs):
    self.attn_norm = _norm(config, rngs) if layer else None
    self.attn = Attention(config, layer, rngs=rngs)
    self.mlp_norm = _norm(config, rngs)
    self.mlp = Mlp(config, rngs=rngs)

  def __call__(self, x_xtd, rows: _Rows, rngs=None) -> jax.Array:
    normed = x_xtd if self.attn_norm is None else self.attn_norm(x_xtd)
    x_xtd = x_xtd + self.attn(normed, rows, rngs)
    return x_xtd + self.mlp(self.mlp_norm(x_xtd), rows, rngs)


def _pool_padded(hidden_bld, mask_bl, pooling: str) -> jax.Array:
  """`[CLS]` or the float32 mean over the mask, `[batch, d]` (an empty
  row's mean is 0)."""
  if pooling == "cls":
    return hidden_bld[:, 0].astype(jnp.float32)
  mask_bl1 = mask_bl.astype(jnp.float32)[..., None]
  total = jnp.sum(hidden_bld.astype(jnp.float32) * mask_bl1, axis=1)
  return total / jnp.maximum(jnp.sum(mask_bl1, axis=1), _MIN_TOKENS)


def _pool_stream(x_utd, unpadding: Unpadding, mask_unl,
                 pooling: str) -> jax.Array:
  """`_pool_padded` of the rows `[U, n, L]` from their stream: `[U, n, d]`."""
  if pooling == "cls":
    return unpadding.take(x_utd, unpadding.first_un).astype(jnp.float32)
  rows = unpadding.rows
  row_ut = jnp.minimum(unpadding.stream_ut // unpadding.length, rows)
  total = jax.vmap(lambda x, r: jax.ops.segment_sum(
      x.astype(jnp.float32), r, num_segments=rows + 1))(x_utd, row_ut)
  count_un1 = jnp.sum(mask_unl.astype(jnp.float32), axis=-1)[..., None]
  return total[:, :rows] / jnp.maximum(count_un1, _MIN_TOKENS)


class Embeddings(nnx.Module):
  """Token embeddings, LayerNorm, dropout (paths as `bert.Embeddings`':
  `word`, `norm`)."""

  def __init__(self, config: ModernBertConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.word = nnx.Embed(
        config.vocab_size, config.hidden_size, dtype=config.dtype,
        param_dtype=config.param_dtype,
        embedding_init=nnx.initializers.truncated_normal(0.02),
        embedding_metadata=_meta(("vocab", "embed")), rngs=rngs)
    self.norm = _norm(config, rngs)

  def __call__(self, ids_xt, rows: _Rows, rngs=None) -> jax.Array:
    words_xtd = jnp.take(self.word.embedding.get_value(), ids_xt, axis=0)
    return dropout(self.norm(words_xtd.astype(self.config.dtype)),
                   self.config.embedding_dropout, rngs, rows.sites)


class ModernBertEncoder(nnx.Module):
  """`ModernBertModel`: token ids → final-normed hidden states."""

  def __init__(self, config: ModernBertConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.embeddings = Embeddings(config, rngs=rngs)
    self.layers = nnx.List([Layer(config, i, rngs=rngs)
                            for i in range(config.num_layers)])
    self.final_norm = _norm(config, rngs)

  def _encode(self, ids_xt, rows: _Rows, length: int, rngs) -> jax.Array:
    if length > self.config.max_position_embeddings:
      raise InputError(f"sequence length {length} exceeds the model's "
                       f"{self.config.max_position_embeddings} positions")
    x_xtd = self.embeddings(ids_xt, rows, rngs)
    for layer in self.layers:
      x_xtd = layer(x_xtd, rows, rngs)
    return self.final_norm(x_xtd)

  def __call__(self, input_ids: jax.Array, attention_mask: jax.Array,
               token_type_ids: jax.Array | None = None, *,
               rngs: nnx.Rngs | None = None,
               first_only: bool = False) -> jax.Array:
    """Hidden states `[batch, length, d]` of padded rows; with `first_only`,
    the float32 vector the head reads, `[batch, d]`: the first token's, or
    the mean over the mask (`classifier_pooling`; an empty row's mean is
    0). Token types are ignored (ModernBERT has none)."""
    del token_type_ids
    mask_bl = attention_mask.astype(bool)
    hidden_bld = self._encode(input_ids, _Rows(mask_bl=mask_bl),
                              input_ids.shape[-1], rngs)
    if not first_only:
      return hidden_bld
    return _pool_padded(hidden_bld, mask_bl, self.config.classifier_pooling)

  def first_unpadded(self, input_ids: jax.Array, attention_mask: jax.Array,
                     token_type_ids: jax.Array | None = None, *,
                     tokens: int, rows: tuple[int, ...] = (),
                     rngs: nnx.Rngs | None = None) -> jax.Array:
    """`__call__(first_only=True)` of rows `[U, n, L]` encoded unpadded
    (`models.unpadding`: a stream of `tokens` per unit, attention on the
    length groups of `rows`): `[U·n, d]`, NaN for the rows of a unit that
    does not fit."""
    del token_type_ids
    units, num_rows, length = input_ids.shape
    unpadding = Unpadding.of(attention_mask, tokens, rows)
    ids_ut = unpadding.unpad(input_ids.reshape(units, num_rows * length))
    x_utd = self._encode(ids_ut, _Rows(unpadding=unpadding), length, rngs)
    pooled_und = _pool_stream(x_utd, unpadding, attention_mask,
                              self.config.classifier_pooling)
    fits_u11 = ((jnp.sum(attention_mask.astype(jnp.int32), axis=(1, 2))
                 <= tokens) & unpadding.fits_u)[:, None, None]
    return jnp.where(fits_u11, pooled_und, jnp.nan).reshape(
        units * num_rows, -1)


class ClassificationHead(nnx.Module):
  """transformers' head on the pooled vector, in float32:
  classifier(norm(act(dense(pooled)))). transformers drops the normed
  vector at `classifier_dropout` in training; here the ranker calls every
  head without `rngs`, so the head runs without dropout (`models.ranker`).
  """

  def __init__(self, config: ModernBertConfig, *, rngs: nnx.Rngs):
    self.config = config
    f32 = jnp.float32
    self.dense = _linear(config.hidden_size, config.hidden_size,
                         ("embed", None), config.classifier_bias, config,
                         rngs, dtype=f32)
    self.norm = _norm(config, rngs, dtype=f32)
    self.classifier = _linear(config.hidden_size, 1, ("embed", None), True,
                              config, rngs, dtype=f32)

  def __call__(self, pooled_nd: jax.Array) -> jax.Array:
    """Scores `[n, 1]`."""
    act = ACTIVATIONS[self.config.classifier_activation]
    return self.classifier(self.norm(act(self.dense(
        pooled_nd.astype(jnp.float32)))))
