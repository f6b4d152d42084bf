"""Tests of the NNX BERT encoder and the cross-encoder ranker (tiny models)."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from best_jax.errors import InputError
from best_jax.train import token_budget
from best_jax.models import (BertConfig, BertEncoder, CrossEncoderRanker,
                             families, load_encoder, load_ranker)
import family_checkpoints as fc
from reference_bert import (TINY_HF_CONFIG, bert_forward, random_hf_tensors,
                            write_checkpoint)

LOGICAL_AXES = {"vocab", "embed", "mlp", "heads", "kv", None}


def _batch(batch=3, length=12, vocab=128, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(1, vocab, (batch, length))
  lengths = np.array([length, length - 5, 3, 1][:batch])
  mask = np.arange(length)[None] < lengths[:, None]
  types = (np.arange(length)[None] >= 4).astype(np.int32) * mask
  return jnp.asarray(ids * mask), jnp.asarray(mask), jnp.asarray(types)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
  tensors = random_hf_tensors(TINY_HF_CONFIG, seed=1)
  directory = str(tmp_path_factory.mktemp("tiny_bert"))
  return write_checkpoint(directory, TINY_HF_CONFIG, tensors), tensors


@pytest.mark.parametrize("attention_block", [0, 5])
def test_encoder_matches_numpy_reference(tiny_checkpoint, attention_block):
  directory, tensors = tiny_checkpoint
  encoder = load_encoder(directory, attention_block=attention_block)
  ids, mask, types = _batch()
  hidden = np.asarray(encoder(ids, mask, types))
  expected = bert_forward(tensors, TINY_HF_CONFIG, np.asarray(ids),
                          np.asarray(mask), np.asarray(types))
  valid = np.asarray(mask)
  assert hidden.shape == (3, 12, 32)
  np.testing.assert_allclose(hidden[valid], expected[valid], atol=2e-5)


def test_padding_does_not_change_valid_tokens(tiny_checkpoint):
  encoder = load_encoder(tiny_checkpoint[0])
  ids, mask, types = _batch()
  other_ids = jnp.where(mask, ids, 7)  # Different content under the padding.
  longer = [jnp.pad(a, ((0, 0), (0, 4))) for a in (ids, mask, types)]
  a = np.asarray(encoder(ids, mask, types))
  b = np.asarray(encoder(other_ids, mask, types))
  c = np.asarray(encoder(*longer))[:, :12]
  valid = np.asarray(mask)
  np.testing.assert_allclose(a[valid], b[valid], atol=1e-5)
  np.testing.assert_allclose(a[valid], c[valid], atol=1e-5)


@pytest.mark.parametrize("attention_block", [0, 2])
def test_fully_masked_row_is_finite(attention_block):
  encoder = BertEncoder(BertConfig.tiny(attention_block=attention_block),
                        rngs=nnx.Rngs(0))
  ids, mask, types = _batch()
  mask = mask.at[1].set(False)
  assert np.isfinite(np.asarray(encoder(ids, mask, types))).all()
  hidden = encoder(ids, mask, types, rngs=nnx.Rngs(dropout=0))
  assert np.isfinite(np.asarray(hidden)).all()


@pytest.mark.parametrize("attention_block", [0, 4])
def test_dropout_only_with_rngs(attention_block):
  encoder = BertEncoder(BertConfig.tiny(attention_block=attention_block),
                        rngs=nnx.Rngs(0))
  ids, mask, types = _batch()
  eval_1 = np.asarray(encoder(ids, mask, types))
  eval_2 = np.asarray(encoder(ids, mask, types))
  np.testing.assert_array_equal(eval_1, eval_2)
  train_a = np.asarray(encoder(ids, mask, types, rngs=nnx.Rngs(dropout=1)))
  train_a2 = np.asarray(encoder(ids, mask, types, rngs=nnx.Rngs(dropout=1)))
  train_b = np.asarray(encoder(ids, mask, types, rngs=nnx.Rngs(dropout=2)))
  np.testing.assert_array_equal(train_a, train_a2)
  assert np.abs(train_a - eval_1).max() > 1e-2
  assert np.abs(train_a - train_b).max() > 1e-2
  no_dropout = BertEncoder(
      BertConfig.tiny(hidden_dropout=0.0, attention_dropout=0.0),
      rngs=nnx.Rngs(0))
  np.testing.assert_allclose(
      np.asarray(no_dropout(ids, mask, types, rngs=nnx.Rngs(dropout=1))),
      np.asarray(no_dropout(ids, mask, types)), atol=1e-5)


@pytest.mark.parametrize("family", fc.TINY_OVERRIDES)
@pytest.mark.parametrize("dropout", [None, 3])
@pytest.mark.parametrize("rows", [(), (0, 0, 0, 1, 0, 1, 0, 2)])
def test_unpadded_encoding_equals_the_padded_one(dropout, rows, family):
  """`first_unpadded` of rows `[U, n, L]` (dense layers on a stream of each
  unit's real tokens; attention on every row at L, or on length groups:
  rows 12 and 7 at 12, 3 at 9 and the empty one at 6 in the first unit)
  gives the padded encoder's [CLS] states, with the same dropout draws when
  training; an empty row stays finite, and a unit whose tokens do not fit
  the stream, or whose rows do not fit the groups, is NaN, never silently
  truncated. The same for each family's encoder (`family_checkpoints`)."""
  encoder = BertEncoder(BertConfig.tiny(**fc.TINY_OVERRIDES[family]),
                        rngs=nnx.Rngs(0))
  lengths = np.asarray([12, 7, 3, 0, 9, 12, 5, 1])
  mask = np.arange(12) < lengths[:, None]
  ids = np.random.default_rng(1).integers(1, 128, (8, 12)) * mask
  types = (np.arange(12) >= 4) * mask
  ids, mask, types = (jnp.asarray(x) for x in (ids, mask, types))
  rngs = lambda: None if dropout is None else nnx.Rngs(dropout=dropout)  # pylint: disable=unnecessary-lambda-assignment
  want = np.asarray(encoder(ids, mask, types, rngs=rngs(), first_only=True))
  as_units = lambda x: x.reshape(2, 4, 12)  # pylint: disable=unnecessary-lambda-assignment
  need = int(max(lengths[:4].sum(), lengths[4:].sum()))  # 27
  encode = lambda tokens, rows: np.asarray(encoder.first_unpadded(  # pylint: disable=unnecessary-lambda-assignment
      as_units(ids), as_units(mask), as_units(types), tokens=tokens,
      rows=rows, rngs=rngs()))
  got = encode(need, rows)
  valid = lengths > 0
  np.testing.assert_allclose(got[valid], want[valid], atol=2e-5)
  assert np.isfinite(got).all()
  if dropout is not None:  # Training draws differ from evaluation's.
    evaluation = np.asarray(encoder(ids, mask, types, first_only=True))
    assert np.abs(got - evaluation)[valid].max() > 1e-2
  short = encode(need - 1, rows)
  assert np.isnan(short[4:]).all()                 # 27 tokens > 26
  np.testing.assert_allclose(short[:4][valid[:4]], want[:4][valid[:4]],
                             atol=2e-5)            # 22 tokens fit
  if rows:  # One row at 12, 8 and 3 each: the second unit's 9 is too long.
    crowded = encode(need, (0, 1, 0, 0, 1, 0, 0, 1))
    assert np.isnan(crowded[4:]).all()
    np.testing.assert_allclose(crowded[:4][valid[:4]], want[:4][valid[:4]],
                               atol=2e-5)


def test_a_row_with_a_gap_is_attended_up_to_its_last_real_token():
  """A row's length for the attention groups is its last real position + 1
  (host and device), so a row with a hole in its mask keeps its last
  token: the same [CLS] state as padded, with groups just large enough."""
  encoder = BertEncoder(BertConfig.tiny(), rngs=nnx.Rngs(0))
  mask = np.zeros((4, 16), bool)
  mask[0, :4] = mask[0, 12] = True          # 5 tokens, the last at 12
  mask[1, :6] = mask[2, :16] = mask[3, :2] = True
  ids = np.random.default_rng(2).integers(1, 128, (4, 16)) * mask
  ids, mask, types = jnp.asarray(ids), jnp.asarray(mask), jnp.zeros((4, 16),
                                                                    int)
  above = token_budget.rows_above(mask[None], np.zeros(1, int))
  rows = tuple(int(r) for r in np.append(-np.diff(above), above[-1]))
  assert rows == (1, 0, 1, 0, 0, 0, 1, 1)   # row 0 with row 2 at 14 and 16
  want = np.asarray(encoder(ids, mask, types, first_only=True))
  got = np.asarray(encoder.first_unpadded(ids[None], mask[None], types[None],
                                          tokens=32, rows=rows))
  np.testing.assert_allclose(got, want, atol=2e-5)


def test_train_step_pattern_under_jit():
  """split once, merge inside jit, dropout keys from fold_in: grads finite."""
  model = CrossEncoderRanker(BertConfig.tiny(), rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model, nnx.Param)
  ids, mask, types = _batch()

  @jax.jit
  def loss_and_grads(params, key, step):
    def loss_fn(params):
      ranker = nnx.merge(graphdef, params)
      rngs = nnx.Rngs(dropout=jax.random.fold_in(key, step))
      return jnp.mean(ranker(ids, mask, types, rngs=rngs) ** 2)
    return jax.value_and_grad(loss_fn)(params)

  loss_0, grads = loss_and_grads(params, jax.random.key(0), 0)
  loss_1, _ = loss_and_grads(params, jax.random.key(0), 1)
  assert np.isfinite(float(loss_0)) and float(loss_0) != float(loss_1)
  norms = [float(jnp.abs(g).max()) for g in jax.tree.leaves(grads)]
  assert all(np.isfinite(norms)) and max(norms) > 0


def test_ranker_scores_cls_through_head_for_any_leading_shape():
  ranker = CrossEncoderRanker(BertConfig.tiny(), rngs=nnx.Rngs(0))
  ids, mask, types = _batch(batch=2)
  grouped = [jnp.stack([a, a[::-1], a]) for a in (ids, mask, types)]
  scores = np.asarray(ranker(*grouped))
  assert scores.shape == (3, 2) and scores.dtype == np.float32
  hidden = np.asarray(ranker.encoder(ids, mask, types))
  kernel = np.asarray(ranker.head.kernel.get_value())
  bias = np.asarray(ranker.head.bias.get_value())
  expected = hidden[:, 0] @ kernel[:, 0] + bias[0]
  np.testing.assert_allclose(scores[0], expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(scores[1], expected[::-1], rtol=1e-5, atol=1e-6)


def test_bfloat16_activations_close_to_float32(tiny_checkpoint):
  ids, mask, types = _batch()
  f32 = np.asarray(load_encoder(tiny_checkpoint[0])(ids, mask, types))
  encoder = load_encoder(tiny_checkpoint[0], dtype=jnp.bfloat16)
  bf16 = encoder(ids, mask, types)
  assert bf16.dtype == jnp.bfloat16
  assert encoder.layers[0].intermediate.kernel.get_value().dtype == jnp.float32
  valid = np.asarray(mask)
  error = np.abs(np.asarray(bf16, np.float32) - f32)[valid]
  assert error.mean() < 0.05 and np.isfinite(error).all()


def test_parameters_carry_logical_axis_names():
  model = CrossEncoderRanker(BertConfig.tiny(), rngs=nnx.Rngs(0))
  specs = nnx.get_partition_spec(nnx.state(model, nnx.Param))
  params = nnx.state(model, nnx.Param)
  for spec, param in zip(jax.tree.leaves(specs, is_leaf=lambda x: isinstance(
      x, jax.sharding.PartitionSpec)), jax.tree.leaves(params)):
    assert len(spec) == param.ndim and set(spec) <= LOGICAL_AXES
  layer = model.encoder.layers[0]
  assert layer.attention.query.kernel.out_sharding == ("embed", "heads", "kv")
  assert layer.attention.output.kernel.out_sharding == ("heads", "kv", "embed")
  assert layer.intermediate.kernel.out_sharding == ("embed", "mlp")
  assert model.encoder.embeddings.word.embedding.out_sharding == ("vocab",
                                                                  "embed")


def test_load_ranker_has_imported_encoder_and_random_head(tiny_checkpoint):
  directory, _ = tiny_checkpoint
  ids, mask, types = _batch()
  ranker = load_ranker(directory, rngs=nnx.Rngs(3))
  np.testing.assert_allclose(np.asarray(ranker.encoder(ids, mask, types)),
                             np.asarray(load_encoder(directory)(ids, mask,
                                                                types)),
                             atol=1e-6)
  other = load_ranker(directory, rngs=nnx.Rngs(4))
  assert not np.allclose(np.asarray(ranker.head.kernel.get_value()),
                         np.asarray(other.head.kernel.get_value()))


def test_config_from_checkpoint(tmp_path):
  config = families.read_config(
      write_checkpoint(str(tmp_path / "a"), TINY_HF_CONFIG, {}))
  assert (config.hidden_size, config.num_layers, config.num_heads,
          config.head_dim, config.layer_norm_eps) == (32, 2, 4, 8, 1e-12)
  bad = dict(TINY_HF_CONFIG, hidden_act="relu")
  os.makedirs(tmp_path / "b")
  (tmp_path / "b" / "config.json").write_text(json.dumps(bad))
  with pytest.raises(InputError, match="hidden_act"):
    families.read_config(tmp_path / "b")
  with pytest.raises(InputError, match="config.json"):
    families.read_config(tmp_path / "missing")
  with pytest.raises(InputError, match="multiple"):
    BertConfig.tiny(hidden_size=30, num_heads=4)


def test_too_long_input_is_an_input_error():
  encoder = BertEncoder(BertConfig.tiny(max_position_embeddings=8),
                        rngs=nnx.Rngs(0))
  ids, mask, types = _batch()
  with pytest.raises(InputError, match="exceeds"):
    encoder(ids, mask, types)


def test_sharded_by_logical_rules_matches_unsharded():
  """Explicit mesh; batch over 'data', vocab/heads/mlp over 'model': same
  loss and gradients as unsharded (an Auto mesh: test_scoring.py)."""
  if len(jax.devices()) < 8:  # e.g. one GPU (bench/accelerator.sh)
    pytest.skip(f"needs 8 devices of the default backend (the suite's 8 CPU "
                f"devices); {jax.default_backend()} has {len(jax.devices())}")
  mesh = jax.make_mesh((4, 2), ("data", "model"),
                       axis_types=(jax.sharding.AxisType.Explicit,) * 2)
  rules = {"vocab": "model", "heads": "model", "mlp": "model"}
  model = CrossEncoderRanker(BertConfig.tiny(), rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model, nnx.Param)
  specs = nnx.get_partition_spec(params)
  shardings = jax.tree.map(
      lambda spec: jax.NamedSharding(mesh,
                                     jax.P(*[rules.get(a) for a in spec])),
      specs, is_leaf=lambda x: isinstance(x, jax.P))
  ids, mask, types = _batch(batch=4)
  rows = jax.NamedSharding(mesh, jax.P("data", None))

  @jax.jit
  def loss_and_grads(params, ids, mask, types):
    def loss_fn(params):
      ranker = nnx.merge(graphdef, params)
      rngs = nnx.Rngs(dropout=jax.random.key(5))
      return jnp.mean(ranker(ids, mask, types, rngs=rngs) ** 2)
    return jax.value_and_grad(loss_fn)(params)

  expected_loss, expected_grads = loss_and_grads(params, ids, mask, types)
  with jax.set_mesh(mesh):
    loss, grads = loss_and_grads(jax.device_put(params, shardings),
                                 *jax.device_put((ids, mask, types), rows))
  kernel = grads["encoder"]["layers"][0]["intermediate"]["kernel"]
  assert kernel.get_value().sharding.spec == jax.P(None, "model")
  np.testing.assert_allclose(float(loss), float(expected_loss), rtol=1e-5)
  for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(expected_grads)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
