"""Attention kernels of the BERT encoder, chosen for speed.

`attention` is softmax attention on [..., length, head_dim] blocks (its
probabilities dropped with `models.dropout.keep_mask`); `blocked_attention` loops over blocks of (sequence, head) pairs so
that each block's scores stay in a CPU cache; `attention_plan` picks between
the two per backend and shape at trace time.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from best_jax.models.dropout import keep_mask

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
              pairs: tuple[jax.Array, int] | None = None,
              rows: jax.Array | None = None,
              padded: tuple[int, int] | None = None) -> jax.Array:
  """Softmax attention (float32 softmax), dropout on the probabilities.

  Works on `[batch, heads, q, d]`, or on `[pairs, q, d]` blocks with
  `pairs=(first pair, heads)`; `q` is already scaled. `rows` and `padded`
  (the padded rows of a length group and their scores' (q, k) sizes) draw
  the dropout of those padded rows (see `keep_mask`).
  """
  logits_bhqk = jnp.einsum("...qd,...kd->...qk", q_bhqd, k_bhkd,
                           preferred_element_type=jnp.float32)
  logits_bhqk = jnp.where(mask_bh1k, logits_bhqk, jnp.finfo(jnp.float32).min)
  probs_bhqk = jax.nn.softmax(logits_bhqk, axis=-1)
  if rate:
    keep_bhqk = keep_mask(key, probs_bhqk.shape, rate, pairs=pairs,
                          rows=rows, padded=padded)
    probs_bhqk = jnp.where(keep_bhqk, probs_bhqk * (1.0 / (1.0 - rate)), 0.0)
  return jnp.einsum("...qk,...kd->...qd", probs_bhqk.astype(v_bhkd.dtype),
                    v_bhkd)


def blocked_attention(q_bhld, k_bhld, v_bhld, mask_bl, block: int,
                       rate: float = 0.0,
                       key: jax.Array | None = None,
                       rows: jax.Array | None = None,
                       padded: tuple[int, int] | None = None) -> jax.Array:
  """`attention` in a sequential loop over blocks of (sequence, head) pairs
  (`rows`, `padded` as there).

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
                     pairs=(index * block, heads), rows=rows, padded=padded)

  context_ncqd = jax.lax.map(
      attend, (to_blocks(q_bhld), to_blocks(k_bhld), to_blocks(v_bhld),
               mask_nc1k, jnp.arange(blocks, dtype=jnp.uint32)))
  return context_ncqd.reshape(batch, heads, length, head_dim)
