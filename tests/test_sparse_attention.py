"""Blocked local+global attention equals the dense reference (SPEC §4)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from best_jax.models import sparse_attention as sa

TOL = 1e-5
_sparse = jax.jit(sa.sparse_attention, static_argnames=(
    "window", "max_global", "block_size", "dropout_rate"))
_dense = jax.jit(sa.dense_attention, static_argnames=("window",))


def _inputs(seed, batch, length, heads, head_dim, *, lengths=None,
            global_rate=0.1):
  rng = np.random.default_rng(seed)
  q, k, v, cotangent = (
      jnp.asarray(rng.normal(size=(batch, length, heads, head_dim)),
                  jnp.float32) for _ in range(4))
  if lengths is None:
    lengths = rng.integers(1, length + 1, size=batch)
  mask = jnp.arange(length)[None] < jnp.asarray(lengths)[:, None]
  global_bl = jnp.asarray(rng.random((batch, length)) < global_rate) & mask
  return q, k, v, cotangent, mask, global_bl


def _numpy_reference(q, k, v, mask, global_bl, window):
  """Row-by-row softmax over the allowed keys, straight from the definition."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  mask, global_bl = np.asarray(mask), np.asarray(global_bl)
  batch, length, heads, head_dim = q.shape
  out = np.zeros_like(q)
  for b in range(batch):
    for i in range(length):
      if not mask[b, i]:
        continue
      keys = [j for j in range(length) if mask[b, j] and (
          abs(i - j) <= window or global_bl[b, i] or global_bl[b, j])]
      for h in range(heads):
        logits = np.array([q[b, i, h] @ k[b, j, h] for j in keys])
        logits /= np.sqrt(head_dim)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        out[b, i, h] = p @ v[b, keys, h]
  return out


def _max_diffs(q, k, v, cotangent, mask, global_bl, **kwargs):
  window = kwargs["window"]

  @jax.jit
  def out_and_grads(q, k, v, cotangent, mask, global_bl):
    # Both implementations in one compiled function: output and the
    # gradients of <output, cotangent> with respect to q, k and v. Masks are
    # arguments (not constants, which XLA would spend time folding).
    sparse = lambda q, k, v: sa.sparse_attention(  # noqa: E731
        q, k, v, mask, global_bl, **kwargs)
    dense = lambda q, k, v: sa.dense_attention(  # noqa: E731
        q, k, v, mask, global_bl, window=window)
    results = []
    for fn in (sparse, dense):
      out, vjp = jax.vjp(fn, q, k, v)
      results.append((out, vjp(cotangent)))
    return results

  (out_s, grads_s), (out_d, grads_d) = out_and_grads(q, k, v, cotangent, mask,
                                                     global_bl)
  out_diff = jnp.max(jnp.abs(out_s - out_d))
  grad_diff = max(float(jnp.max(jnp.abs(a - b)))
                  for a, b in zip(grads_s, grads_d))
  return float(out_diff), grad_diff


def test_dense_reference_matches_definition():
  q, k, v, _, mask, global_bl = _inputs(0, 2, 11, 2, 4, lengths=[11, 7])
  global_bl = global_bl.at[0, 3].set(True).at[1, 9].set(True)  # 9: padding.
  expected = _numpy_reference(q, k, v, mask, global_bl & mask, 2)
  got = _dense(q, k, v, mask, global_bl, window=2)
  np.testing.assert_allclose(got, expected, atol=1e-6)


def test_pattern_mask_by_hand():
  mask = jnp.array([[True, True, True, True, True, False]])
  global_bl = jnp.array([[False, False, False, False, True, False]])
  allowed = np.asarray(sa.pattern_mask(mask, global_bl, window=1))[0]
  expected = np.array([
      [1, 1, 0, 0, 1, 0],
      [1, 1, 1, 0, 1, 0],
      [0, 1, 1, 1, 1, 0],
      [0, 0, 1, 1, 1, 0],
      [1, 1, 1, 1, 1, 0],
      [0, 0, 0, 0, 1, 0],  # A padded query; its output is zeroed anyway.
  ], dtype=bool)
  np.testing.assert_array_equal(allowed, expected)


@pytest.mark.parametrize("length,window,block,max_global", [
    (37, 4, None, 6),    # Length not a multiple of the block.
    (37, 5, 3, 6),       # Window reaching two blocks each side.
    (64, 8, 8, 8),       # Exact multiple.
    (5, 64, None, 4),    # Shorter than one block.
    (70, 3, 16, 1),      # Block larger than the window.
    (50, 0, None, 5),    # Window 0: only itself and the globals.
])
def test_sparse_equals_dense(length, window, block, max_global):
  q, k, v, cotangent, mask, global_bl = _inputs(
      length, 3, length, 2, 8, lengths=[length, length // 2 + 1, 1])
  global_bl = sa.limit_global(global_bl, max_global)
  out_diff, grad_diff = _max_diffs(
      q, k, v, cotangent, mask, global_bl, window=window,
      max_global=max_global, block_size=block)
  assert out_diff < TOL and grad_diff < TOL, (out_diff, grad_diff)


@pytest.mark.parametrize("pattern", sa.PATTERNS)
def test_ablation_patterns_equal_dense(pattern):
  batch, length = 2, 150
  q, k, v, cotangent, mask, _ = _inputs(7, batch, length, 2, 8,
                                        lengths=[150, 97])
  pos = jnp.arange(length)
  query_bl = jnp.broadcast_to(pos < 9, (batch, length))
  sentence_start_bl = jnp.broadcast_to((pos >= 9) & (pos % 13 == 9),
                                       (batch, length))
  global_bl = sa.global_positions(pattern, mask_bl=mask, query_bl=query_bl,
                                  sentence_start_bl=sentence_start_bl,
                                  first_tokens=16)
  counts = {"qds": 20, "local": 0, "longformer_qa": 16, "query": 9,
            "sentence": 11}
  assert int(jnp.sum(global_bl[0])) == counts[pattern]
  out_diff, grad_diff = _max_diffs(q, k, v, cotangent, mask, global_bl,
                                   window=6, max_global=24)
  assert out_diff < TOL and grad_diff < TOL, (out_diff, grad_diff)


def test_global_positions_by_hand():
  mask = jnp.array([[True] * 6 + [False] * 2])
  query = jnp.array([[1, 1, 1, 0, 0, 0, 0, 0]], bool)
  starts = jnp.array([[0, 0, 0, 1, 0, 1, 0, 1]], bool)  # 7 is padding.
  def marks(pattern):
    return np.asarray(sa.global_positions(
        pattern, mask_bl=mask, query_bl=query, sentence_start_bl=starts,
        first_tokens=2)).astype(int).tolist()[0]
  assert marks("qds") == [1, 1, 1, 1, 0, 1, 0, 0]
  assert marks("local") == [0] * 8
  assert marks("longformer_qa") == [1, 1, 0, 0, 0, 0, 0, 0]
  assert marks("query") == [1, 1, 1, 0, 0, 0, 0, 0]
  assert marks("sentence") == [0, 0, 0, 1, 0, 1, 0, 0]
  with pytest.raises(ValueError, match="unknown attention pattern"):
    marks("bigbird")


def test_globals_beyond_max_global_attend_locally():
  q, k, v, cotangent, mask, _ = _inputs(3, 1, 40, 1, 4, lengths=[40])
  global_bl = jnp.zeros((1, 40), bool).at[0, jnp.array([2, 10, 30])].set(True)
  kept = sa.limit_global(global_bl, 2)
  assert np.asarray(kept)[0].nonzero()[0].tolist() == [2, 10]
  sparse = _sparse(q, k, v, mask, global_bl, window=3,
                               max_global=2)
  dense = _dense(q, k, v, mask, kept, window=3)
  np.testing.assert_allclose(sparse, dense, atol=TOL)
  # And they really differ from giving token 30 global attention.
  full = _dense(q, k, v, mask, global_bl, window=3)
  assert float(jnp.max(jnp.abs(full - dense))) > 1e-3


def test_padding_rows_are_zero_and_finite():
  q, k, v, cotangent, _, _ = _inputs(5, 2, 20, 2, 4)
  mask = jnp.zeros((2, 20), bool).at[0, :4].set(True)  # Row 1 all padding.
  global_bl = jnp.zeros((2, 20), bool).at[:, 0].set(True)
  out = _sparse(q, k, v, mask, global_bl, window=2, max_global=3)
  assert np.all(np.asarray(out)[0, 4:] == 0) and np.all(
      np.asarray(out)[1] == 0)
  grads = jax.jit(jax.grad(lambda q, k, v, mask, global_bl: jnp.sum(
      sa.sparse_attention(q, k, v, mask, global_bl, window=2, max_global=3)
      * cotangent), (0, 1, 2)))(q, k, v, mask, global_bl)
  assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
  # Padded keys get no gradient.
  assert float(jnp.max(jnp.abs(grads[1][0, 4:]))) == 0.0


def test_bfloat16_close_to_float32():
  q, k, v, _, mask, global_bl = _inputs(9, 2, 45, 2, 8)
  kwargs = dict(window=4, max_global=8)
  out32 = _sparse(q, k, v, mask, global_bl, **kwargs)
  out16 = _sparse(*(x.astype(jnp.bfloat16) for x in (q, k, v)),
                              mask, global_bl, **kwargs)
  assert out16.dtype == jnp.bfloat16
  assert float(jnp.max(jnp.abs(out16.astype(jnp.float32) - out32))) < 0.05


def test_dropout_only_with_rng():
  q, k, v, _, mask, global_bl = _inputs(4, 1, 30, 2, 4, lengths=[30])
  kwargs = dict(window=3, max_global=4, dropout_rate=0.5)
  plain = _sparse(q, k, v, mask, global_bl, **kwargs)
  reference = _dense(q, k, v, mask, global_bl, window=3)
  np.testing.assert_allclose(plain, reference, atol=TOL)
  dropped = _sparse(q, k, v, mask, global_bl,
                                dropout_rng=jax.random.key(0), **kwargs)
  assert float(jnp.max(jnp.abs(dropped - plain))) > 0.1


def _largest_intermediate(attention, length):
  """Size of the largest array in the jaxpr of attention's gradient."""
  spec = jax.ShapeDtypeStruct((1, length, 1, 4), jnp.float32)
  flags = jax.ShapeDtypeStruct((1, length), bool)
  loss = lambda *args: jnp.sum(attention(*args))
  jaxpr = jax.make_jaxpr(jax.grad(loss, (0, 1, 2)))(spec, spec, spec, flags,
                                                     flags)
  sizes = []

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      sizes.extend(int(np.prod(var.aval.shape)) for var in eqn.outvars
                   if hasattr(var.aval, "shape"))
      for param in eqn.params.values():
        if hasattr(param, "jaxpr"):  # Nested (jitted) computations.
          walk(param.jaxpr)
  walk(jaxpr.jaxpr)
  return max(sizes)


def test_no_quadratic_intermediate():
  """The fast path never materialises anything of size length²."""
  length = 2048
  sparse = _largest_intermediate(
      lambda *a: _sparse(*a, window=16, max_global=32), length)
  dense = _largest_intermediate(lambda *a: _dense(*a, window=16), length)
  # Largest legitimate array: the [L, 3w + G] scores.
  assert sparse == length * (3 * 16 + 32)
  assert dense == length * length  # The check sees an [L, L] array.


def test_batch_sharded_over_devices_equals_unsharded():
  devices = jax.devices()
  q, k, v, _, mask, global_bl = _inputs(11, len(devices), 33, 2, 4)
  mesh = jax.make_mesh((len(devices),), ("data",),
                       axis_types=(jax.sharding.AxisType.Explicit,))
  by_batch = lambda x: jax.device_put(  # noqa: E731
      x, jax.NamedSharding(mesh, jax.P("data")))
  kwargs = dict(window=3, max_global=5)
  expected = _sparse(q, k, v, mask, global_bl, **kwargs)
  with jax.set_mesh(mesh):
    got = _sparse(*map(by_batch, (q, k, v, mask, global_bl)), **kwargs)
  assert got.sharding.spec[0] == "data"
  np.testing.assert_allclose(got, expected, atol=1e-6)
