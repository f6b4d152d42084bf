"""Query-directed sparse attention: a ±w local band plus a few global tokens.

The pattern of the QDS-Transformer (SPEC §4): query token i may attend to key
token j when both are real tokens and

  |i - j| <= window  or  i is global  or  j is global.

`sparse_attention` is the fast path: the sequence is cut into blocks of
`block_size` tokens and each query block scores only its own and the
`ceil(window / block_size)` neighbouring blocks on either side, plus the
(at most `max_global`) global keys gathered into a fixed-size, masked slot
array; the global queries score every key in a separate `[G, L]` product.
Time and memory are O(L · (window + G)) — no `[L, L]` array is ever built.
`dense_attention` builds the same pattern as a dense boolean mask; it is the
reference for the equivalence tests.

Both take `[batch, length, heads, head_dim]` arrays (the layout of the BERT
projections and of `jax.nn.dot_product_attention`), compute logits and the
softmax in float32, and return zeros at padded query positions (so fully
padded rows are finite, and the two implementations agree everywhere).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Global-attention patterns: the QDS-Transformer and the ablations of its code.
PATTERNS = ("qds", "local", "longformer_qa", "query", "sentence")

_MASKED = float(jnp.finfo(jnp.float32).min)


def global_positions(pattern: str, *, mask_bl: jax.Array,
                     query_bl: jax.Array, sentence_start_bl: jax.Array,
                     first_tokens: int = 0) -> jax.Array:
  """Boolean `[batch, length]` marks of the tokens with global attention.

  Args:
    pattern: one of `PATTERNS`: "qds" (query and sentence-start tokens),
      "local" (none), "longformer_qa" (the first `first_tokens` tokens),
      "query" (query tokens only), "sentence" (sentence-start tokens only).
    mask_bl: true on real tokens.
    query_bl: true on the `<s>`/`[CLS]` token and the query's tokens.
    sentence_start_bl: true on the sentence-start tokens.
    first_tokens: how many leading tokens "longformer_qa" makes global.
  """
  if pattern == "qds":
    global_bl = query_bl | sentence_start_bl
  elif pattern == "local":
    global_bl = jnp.zeros_like(mask_bl, dtype=bool)
  elif pattern == "longformer_qa":
    global_bl = jnp.broadcast_to(
        jnp.arange(mask_bl.shape[-1]) < first_tokens, mask_bl.shape)
  elif pattern == "query":
    global_bl = query_bl
  elif pattern == "sentence":
    global_bl = sentence_start_bl
  else:
    raise ValueError(f"unknown attention pattern {pattern!r}; choose one of "
                     f"{', '.join(PATTERNS)}")
  return jnp.asarray(global_bl, bool) & mask_bl


def limit_global(global_bl: jax.Array, max_global: int) -> jax.Array:
  """Keeps the first `max_global` global tokens of each row (later: local)."""
  return global_bl & (jnp.cumsum(global_bl, axis=-1) <= max_global)


def pattern_mask(mask_bl: jax.Array, global_bl: jax.Array, *,
                 window: int) -> jax.Array:
  """The dense `[batch, query, key]` boolean pattern (reference and tests)."""
  pos_l = jnp.arange(mask_bl.shape[-1])
  local_qk = jnp.abs(pos_l[:, None] - pos_l[None, :]) <= window
  allowed_bqk = (local_qk[None] | global_bl[:, :, None]
                 | global_bl[:, None, :])
  return allowed_bqk & mask_bl[:, None, :]


def dense_attention(q_blhd: jax.Array, k_blhd: jax.Array, v_blhd: jax.Array,
                    mask_bl: jax.Array, global_bl: jax.Array, *,
                    window: int) -> jax.Array:
  """Reference: the QDS pattern as a dense masked `[L, L]` softmax."""
  global_bl = global_bl & mask_bl
  scale = q_blhd.shape[-1] ** -0.5
  logits_bhqk = jnp.einsum("bqhd,bkhd->bhqk", q_blhd * scale, k_blhd,
                           preferred_element_type=jnp.float32)
  allowed_bqk = pattern_mask(mask_bl, global_bl, window=window)
  logits_bhqk = jnp.where(allowed_bqk[:, None], logits_bhqk, _MASKED)
  probs_bhqk = jax.nn.softmax(logits_bhqk, axis=-1).astype(v_blhd.dtype)
  out_blhd = jnp.einsum("bhqk,bkhd->bqhd", probs_bhqk, v_blhd)
  return jnp.where(mask_bl[:, :, None, None], out_blhd, 0)


def sparse_attention(q_blhd: jax.Array, k_blhd: jax.Array, v_blhd: jax.Array,
                     mask_bl: jax.Array, global_bl: jax.Array, *,
                     window: int, max_global: int,
                     block_size: int | None = None,
                     dropout_rate: float = 0.0,
                     dropout_rng: jax.Array | None = None) -> jax.Array:
  """Blocked local + global attention, equal to `dense_attention`.

  Args:
    q_blhd: queries `[batch, length, heads, head_dim]`.
    k_blhd: keys, same shape.
    v_blhd: values, same shape.
    mask_bl: bool, true on real tokens.
    global_bl: bool, true on global tokens; only the first `max_global` of a
      row are global (see `limit_global`), the rest attend locally.
    window: the one-sided local window w (|i - j| <= w).
    max_global: G, the fixed number of global slots per row (0: local only).
    block_size: tokens per block; default `window` (at least 1).
    dropout_rate: dropout on the attention probabilities, applied only when
      `dropout_rng` is given.
    dropout_rng: a PRNG key for that dropout.

  Returns:
    `[batch, length, heads, head_dim]` in `v_blhd.dtype`; zeros at padding.
  """
  batch, length, heads, head_dim = q_blhd.shape
  block = max(1, block_size or window)
  reach = -(-window // block)  # Neighbour blocks on either side.
  num_blocks = -(-length // block)
  padded = num_blocks * block
  span = (2 * reach + 1) * block  # Keys scored per query block.
  use_dropout = dropout_rng is not None and dropout_rate > 0.0
  global_rng, local_rng = (jax.random.split(dropout_rng) if use_dropout
                           else (None, None))

  mask_bl = mask_bl.astype(bool)
  global_bl = limit_global(global_bl.astype(bool) & mask_bl, max_global)
  scale = head_dim ** -0.5
  q_bhld = jnp.swapaxes(q_blhd * scale, 1, 2)
  k_bhld = jnp.swapaxes(k_blhd, 1, 2)
  v_bhld = jnp.swapaxes(v_blhd, 1, 2)

  # Local band: query block n against key blocks n - reach ... n + reach.
  # Global keys are left out here; they enter through the global slots.
  def key_windows(x, tail_shape, fill):
    pad = [(0, 0)] * x.ndim
    axis = x.ndim - 1 - len(tail_shape)
    pad[axis] = (reach * block, padded - length + reach * block)
    x = jnp.pad(x, pad, constant_values=fill)
    x = x.reshape(x.shape[:axis] + (num_blocks + 2 * reach, block) + tail_shape)
    return jnp.concatenate(
        [jax.lax.slice_in_dim(x, o, o + num_blocks, axis=axis)
         for o in range(2 * reach + 1)], axis=axis + 1)

  q_bhnqd = jnp.pad(q_bhld, ((0, 0), (0, 0), (0, padded - length), (0, 0)))
  q_bhnqd = q_bhnqd.reshape(batch, heads, num_blocks, block, head_dim)
  k_bhnkd = key_windows(k_bhld, (head_dim,), 0)
  v_bhnkd = key_windows(v_bhld, (head_dim,), 0)
  local_key_bnk = key_windows(mask_bl & ~global_bl, (), False)
  q_pos_nq = jnp.arange(padded).reshape(num_blocks, block)
  k_pos_nk = ((jnp.arange(num_blocks)[:, None] - reach) * block
              + jnp.arange(span)[None, :])
  near_nqk = jnp.abs(q_pos_nq[:, :, None] - k_pos_nk[:, None, :]) <= window
  allowed_bnqk = near_nqk[None] & local_key_bnk[:, :, None, :]
  logits_bhnqk = jnp.einsum("bhnqd,bhnkd->bhnqk", q_bhnqd, k_bhnkd,
                            preferred_element_type=jnp.float32)
  logits_bhnqk = jnp.where(allowed_bnqk[:, None], logits_bhnqk, _MASKED)

  if max_global > 0:
    # Fixed-size slots: index of each global token, padded with position 0.
    index_bg = jax.vmap(
        lambda g: jnp.nonzero(g, size=max_global, fill_value=0)[0])(global_bl)
    slot_ok_bg = jnp.arange(max_global)[None] < jnp.sum(global_bl, -1)[:, None]
    gather = lambda x: jnp.take_along_axis(x, index_bg[:, None, :, None], 2)
    k_bhgd, v_bhgd = gather(k_bhld), gather(v_bhld)
    # Every query against the global keys, joined to its band's softmax.
    global_logits_bhnqg = jnp.einsum("bhnqd,bhgd->bhnqg", q_bhnqd, k_bhgd,
                                     preferred_element_type=jnp.float32)
    global_logits_bhnqg = jnp.where(slot_ok_bg[:, None, None, None],
                                    global_logits_bhnqg, _MASKED)
    logits_bhnqk = jnp.concatenate([logits_bhnqk, global_logits_bhnqg], -1)
  probs_bhnqk = jax.nn.softmax(logits_bhnqk, axis=-1)
  if use_dropout:
    probs_bhnqk = _dropout(probs_bhnqk, dropout_rate, local_rng)
  probs_bhnqk = probs_bhnqk.astype(v_blhd.dtype)
  out_bhnqd = jnp.einsum("bhnqk,bhnkd->bhnqd", probs_bhnqk[..., :span],
                         v_bhnkd)
  if max_global > 0:
    out_bhnqd += jnp.einsum("bhnqg,bhgd->bhnqd", probs_bhnqk[..., span:],
                            v_bhgd)
  out_bhld = out_bhnqd.reshape(batch, heads, padded, head_dim)[:, :, :length]

  if max_global > 0:
    # Global queries attend to every real key.
    logits_bhgk = jnp.einsum("bhgd,bhkd->bhgk", gather(q_bhld), k_bhld,
                             preferred_element_type=jnp.float32)
    logits_bhgk = jnp.where(mask_bl[:, None, None, :], logits_bhgk, _MASKED)
    probs_bhgk = jax.nn.softmax(logits_bhgk, axis=-1)
    if use_dropout:
      probs_bhgk = _dropout(probs_bhgk, dropout_rate, global_rng)
    global_out_bhgd = jnp.einsum("bhgk,bhkd->bhgd",
                                 probs_bhgk.astype(v_blhd.dtype), v_bhld)
    slot_bl = jnp.clip(jnp.cumsum(global_bl, axis=-1) - 1, 0, max_global - 1)
    global_out_bhld = jnp.take_along_axis(global_out_bhgd,
                                          slot_bl[:, None, :, None], 2)
    out_bhld = jnp.where(global_bl[:, None, :, None], global_out_bhld,
                         out_bhld)
  out_blhd = jnp.swapaxes(out_bhld, 1, 2)
  return jnp.where(mask_bl[:, :, None, None], out_blhd, 0)


def _dropout(probs: jax.Array, rate: float, rng: jax.Array) -> jax.Array:
  keep = jax.random.bernoulli(rng, 1.0 - rate, probs.shape)
  return jnp.where(keep, probs / (1.0 - rate), 0)
