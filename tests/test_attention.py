"""Dropout masks and the attention forms that `attention_plan` chooses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from best_jax.models import attention as attention_lib
from best_jax.models.bert import BertEncoder
from best_jax.models.bert_config import BertConfig
from best_jax.models import dropout as dropout_lib
from best_jax.models.dropout import dropout
from flax import nnx


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.03])
def test_keep_mask_drops_at_the_rate(rate):
  keep = np.asarray(dropout_lib.keep_mask(jax.random.key(0), (64, 4096),
                                            rate))
  n = keep.size
  dropped = 1.0 - keep.mean()
  rounded = round(rate * 65536) / 65536
  assert abs(dropped - rounded) < 5 * np.sqrt(rate * (1 - rate) / n)
  # Every row and column position is dropped at the rate, not just on average.
  assert abs((1 - keep.mean(axis=1)).mean() - rounded) < 1e-2
  assert np.ptp(1 - keep.reshape(64, -1, 4).mean(axis=(0, 1))) < 0.02


def test_keep_mask_draws_are_independent():
  keep = np.asarray(dropout_lib.keep_mask(jax.random.key(1), (32, 8192),
                                            0.5)).astype(float)
  # The four draws of one threefry block, neighbours and rows uncorrelated.
  for a, b in ((keep[:, 0::4], keep[:, 1::4]), (keep[:, 1::4], keep[:, 2::4]),
               (keep[:, 0::4], keep[:, 3::4]), (keep[0::2], keep[1::2])):
    assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 0.02


def test_keep_mask_is_a_function_of_the_key():
  same = [np.asarray(dropout_lib.keep_mask(jax.random.key(3), (4, 10), 0.3))
          for _ in range(2)]
  other = np.asarray(dropout_lib.keep_mask(jax.random.key(4), (4, 10), 0.3))
  np.testing.assert_array_equal(same[0], same[1])
  assert (same[0] != other).any()
  # A length that is not a multiple of 4 and a 1-D shape work too.
  assert dropout_lib.keep_mask(jax.random.key(0), (7,), 0.5).shape == (7,)
  rbg = jax.random.key(0, impl="unsafe_rbg")
  assert dropout_lib.keep_mask(rbg, (3, 9), 0.5).shape == (3, 9)


def test_pair_blocks_draw_the_batched_mask():
  key = jax.random.key(7)
  full = np.asarray(dropout_lib.keep_mask(key, (3, 4, 6, 10), 0.4))
  rows = full.reshape(12, 6, 10)
  for first, size in ((0, 2), (4, 4), (10, 2)):
    block = dropout_lib.keep_mask(key, (size, 6, 10), 0.4,
                                    pairs=(jnp.uint32(first), 4))
    np.testing.assert_array_equal(np.asarray(block), rows[first:first + size])


def test_dropout_scales_kept_values_and_is_off_without_rngs():
  x = jnp.ones((16, 1000))
  out = np.asarray(dropout(x, 0.25, nnx.Rngs(dropout=0)))
  np.testing.assert_allclose(np.unique(out), [0.0, 1 / 0.75], rtol=1e-6)
  assert abs(out.mean() - 1.0) < 0.02
  np.testing.assert_array_equal(np.asarray(dropout(x, 0.25, None)), x)


def _qkv(batch=3, heads=4, length=24, dim=8, seed=0):
  rng = np.random.default_rng(seed)
  q, k, v = (jnp.asarray(rng.normal(size=(batch, heads, length, dim)),
                         jnp.float32) for _ in range(3))
  mask = np.arange(length)[None] < np.array([length, 10, 1])[:batch, None]
  return q, k, v, jnp.asarray(mask)


@pytest.mark.parametrize("rate", [0.0, 0.3])
def test_blocked_attention_equals_batched_with_gradients(rate):
  q, k, v, mask = _qkv()
  key = jax.random.key(2)

  def loss(fn):
    return lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v)))

  batched = lambda q, k, v: attention_lib.attention(
      q, k, v, mask[:, None, None, :], rate, key)
  for block in (1, 4, 12):
    blocked = lambda q, k, v, block=block: attention_lib.blocked_attention(
        q, k, v, mask, block, rate, key)
    np.testing.assert_allclose(np.asarray(blocked(q, k, v)),
                               np.asarray(batched(q, k, v)), atol=1e-6)
    got = jax.grad(loss(blocked), argnums=(0, 1, 2))(q, k, v)
    want = jax.grad(loss(batched), argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(got, want):
      np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5)


def test_encoder_is_the_same_in_every_attention_form():
  ids = jnp.asarray(np.random.default_rng(0).integers(1, 128, (2, 16)))
  mask = jnp.asarray(np.arange(16)[None] < np.array([[16], [9]]))
  types = jnp.zeros_like(ids)
  outputs = []
  for block in (None, 0, 3):
    encoder = BertEncoder(BertConfig.tiny(attention_block=block),
                          rngs=nnx.Rngs(0))
    outputs.append(np.asarray(encoder(ids, mask, types,
                                      rngs=nnx.Rngs(dropout=5))))
  np.testing.assert_allclose(outputs[1], outputs[0], atol=1e-5)
  np.testing.assert_allclose(outputs[2], outputs[0], atol=1e-5)


def test_attention_plan_blocks_only_on_one_cpu_device():
  if jax.default_backend() != "cpu":
    pytest.skip("the plan for CPUs")
  assert attention_lib.attention_plan(32, 12, 256) == 2
  assert attention_lib.attention_plan(32, 12, 512) == 2
  devices = jax.devices()
  one = jax.make_mesh((1,), ("data",), devices=devices[:1],
                      axis_types=(jax.sharding.AxisType.Auto,))
  many = jax.make_mesh((len(devices),), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))
  with jax.set_mesh(one):
    assert attention_lib.attention_plan(32, 12, 128) == 4
  with jax.set_mesh(many):
    assert attention_lib.attention_plan(32, 12, 128) == 0


def test_first_only_encoding_equals_the_full_encoding_at_cls():
  """The ranker runs its last layer for [CLS] alone: same scores, and (without
  dropout) the same gradients as reading [CLS] from every position's output."""
  from best_jax.models import CrossEncoderRanker  # pylint: disable=import-outside-toplevel
  config = BertConfig.tiny(hidden_dropout=0.0, attention_dropout=0.0)
  ranker = CrossEncoderRanker(config, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(ranker, nnx.Param)
  ids = jnp.asarray(np.random.default_rng(1).integers(1, 128, (3, 16)))
  mask = jnp.asarray(np.arange(16)[None] < np.array([[16], [9], [1]]))
  types = (jnp.arange(16)[None] > 4).astype(jnp.int32) * mask

  def scores(params, first_only):
    model = nnx.merge(graphdef, params)
    if first_only:
      return model(ids, mask, types)
    cls = model.encoder(ids, mask, types)[:, 0].astype(jnp.float32)
    return model.head(cls)[:, 0]

  np.testing.assert_allclose(np.asarray(scores(params, True)),
                             np.asarray(scores(params, False)), atol=1e-6)
  grads = [jax.grad(lambda p, f=f: jnp.sum(jnp.tanh(scores(p, f))))(params)
           for f in (True, False)]
  for got, want in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6)
