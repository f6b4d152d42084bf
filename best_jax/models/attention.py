"""Attention and dropout kernels of the BERT encoder, chosen for speed.

`keep_mask` draws dropout masks at a quarter of `jax.random.bernoulli`'s
threefry cost; `attention` is softmax attention on [..., length, head_dim]
blocks; `blocked_attention` loops over blocks of (sequence, head) pairs so
that each block's scores stay in a CPU cache; `attention_plan` picks between
the two per backend and shape at trace time.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.extend.random import threefry2x32_p

# Dropout draws 16-bit uniforms: a keep probability is rounded to a multiple
# of 1/65536 (0.9 → 0.899994), and one threefry block gives four draws.
_DROPOUT_BITS = 16


def keep_mask(key: jax.Array, shape: tuple[int, ...], rate: float, *,
              pairs: tuple[jax.Array, int] | None = None) -> jax.Array:
  """Bernoulli(1 - `rate`) booleans of `shape`, a pure function of `key`.

  `jax.random.bernoulli` spends one threefry block (two 32-bit words) per
  draw; this spends one per four 16-bit draws, the cost that dominated a
  CPU train step. Counters are element positions: the leading index and the
  flat position within it, so the values do not depend on sharding.

  `pairs=(first, heads)` says that axis 0 of `shape` enumerates (sequence,
  head) pairs from pair `first` on, `heads` per sequence: the mask then
  equals the rows of `keep_mask(key, (batch, heads, *shape[1:]), rate)`
  for those pairs, so blocked and batched attention drop the same scores.
  """
  shape = tuple(shape)
  threshold = round(rate * 2 ** _DROPOUT_BITS)
  if not shape or threshold == 0:
    return jnp.ones(shape, bool)
  *lead, last = shape
  blocks_shape = (*lead, -(-last // 4))  # One block → two words → 4 draws.
  per_pair = math.prod(blocks_shape[1:])
  heads = 1 if pairs is None else pairs[1]
  if per_pair * heads >= 2 ** 32:
    raise ValueError(f"dropout on {shape} needs more than 2**32 counters "
                     "per leading index")
  iota = lambda axis: jax.lax.broadcasted_iota(jnp.uint32, blocks_shape, axis)
  inner = jnp.zeros(blocks_shape, jnp.uint32)
  stride = 1
  for axis in range(len(blocks_shape) - 1, 0, -1):
    inner += iota(axis) * jnp.uint32(stride)
    stride *= blocks_shape[axis]
  if pairs is None:
    outer = iota(0) if len(blocks_shape) > 1 else jnp.zeros_like(inner)
  else:
    pair = iota(0) + jnp.asarray(pairs[0], jnp.uint32)
    outer = pair // jnp.uint32(heads)
    inner += (pair % jnp.uint32(heads)) * jnp.uint32(per_pair)
  return _draws(key, inner, outer, last) >= jnp.uint16(threshold)


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


# Blocked attention: pairs per block, from the scores' size (float32), kept to
# 2-4. Measured on a 2-core x86 (avx512) machine, MiniLM-L6 shapes, among 1-12
# pairs: 4 was best at L = 128, 2 at L = 256 and 512 for scoring; training at
# L = 256 was within noise for 2-8. One pair per block (L = 512) was slower.
_BLOCK_BYTES = 2 ** 19
_BLOCK_PAIRS = (2, 4)


def attention_plan(batch: int, heads: int, length: int) -> int:
  """`attention_block` for `attention_block=None`: the number of (sequence,
  head) pairs per block of the sequential loop, or 0 for one batched einsum.

  Blocked on XLA CPU when the computation is not spread over several devices
  (a sharded batch would be gathered by the loop); batched on accelerators
  and on multi-device meshes. Decided at trace time from the current mesh
  (`jax.set_mesh`, which the trainer and AOT use) or, without one, the
  default backend.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    platform, devices = jax.default_backend(), 1
  else:
    device = mesh.abstract_device
    platform = device.platform if device is not None else jax.default_backend()
    devices = mesh.size
  if platform != "cpu" or devices > 1:
    return 0
  low, high = _BLOCK_PAIRS
  return max(low, min(high, _BLOCK_BYTES // (4 * length * length)))


def attention(q_bhqd, k_bhkd, v_bhkd, mask_bh1k, rate: float = 0.0,
              key: jax.Array | None = None,
              pairs: tuple[jax.Array, int] | None = None) -> jax.Array:
  """Softmax attention (float32 softmax), dropout on the probabilities.

  Works on `[batch, heads, q, d]`, or on `[pairs, q, d]` blocks with
  `pairs=(first pair, heads)` (see `keep_mask`); `q` is already scaled.
  """
  logits_bhqk = jnp.einsum("...qd,...kd->...qk", q_bhqd, k_bhkd,
                           preferred_element_type=jnp.float32)
  logits_bhqk = jnp.where(mask_bh1k, logits_bhqk, jnp.finfo(jnp.float32).min)
  probs_bhqk = jax.nn.softmax(logits_bhqk, axis=-1)
  if rate:
    keep_bhqk = keep_mask(key, probs_bhqk.shape, rate, pairs=pairs)
    probs_bhqk = jnp.where(keep_bhqk, probs_bhqk * (1.0 / (1.0 - rate)), 0.0)
  return jnp.einsum("...qk,...kd->...qd", probs_bhqk.astype(v_bhkd.dtype),
                    v_bhkd)


def blocked_attention(q_bhld, k_bhld, v_bhld, mask_bl, block: int,
                       rate: float = 0.0,
                       key: jax.Array | None = None) -> jax.Array:
  """`attention` in a sequential loop over blocks of (sequence, head) pairs.

  Each block's scores stay in cache. Under differentiation each block is
  recomputed in the backward pass (`jax.checkpoint`), so the loop saves only
  its inputs instead of stacking every block's [length, length] scores.
  """
  batch, heads, length, head_dim = q_bhld.shape
  pairs = batch * heads
  block = math.gcd(pairs, block)
  blocks = pairs // block

  def to_blocks(x_bhld):  # → [blocks, block, length, head_dim]
    return x_bhld.reshape(blocks, block, length, head_dim)

  mask_nc1k = jnp.broadcast_to(mask_bl[:, None, None, :],
                               (batch, heads, 1, length)
                               ).reshape(blocks, block, 1, length)

  @functools.partial(jax.checkpoint, prevent_cse=False)
  def attend(args):
    q_cqd, k_ckd, v_ckd, mask_c1k, index = args
    return attention(q_cqd, k_ckd, v_ckd, mask_c1k, rate, key,
                     pairs=(index * block, heads))

  context_ncqd = jax.lax.map(
      attend, (to_blocks(q_bhld), to_blocks(k_bhld), to_blocks(v_bhld),
               mask_nc1k, jnp.arange(blocks, dtype=jnp.uint32)))
  return context_ncqd.reshape(batch, heads, length, head_dim)
