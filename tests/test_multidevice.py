"""Sharded training on 8 fake CPU devices equals one device (scoring: test_scoring.py)."""

import jax
import numpy as np
import pytest

from best_jax.models.bert_config import BertConfig
from best_jax.models.ranker import CrossEncoderRanker
from best_jax.models.unpadding import TokenBudget
from best_jax.train import sharding
from best_jax.train import token_budget
from best_jax.train import trainer as trainer_lib
import family_checkpoints as fc
from fakes import synthetic_batch, tiny_config

MESHES = {"1x1": (1, 1), "8x1": (8, 1), "4x2": (4, 2)}


@pytest.fixture(scope="module")
def results():
  """Per mesh: params after init and after 2 steps, metrics."""
  config = tiny_config()
  config.train.accumulation_steps = 2
  # The all-reduce path (the default; tiny_cpu turns fixed order on): its
  # dropout bits are the global batch's. Fixed-order reduction draws per
  # shard, so it depends on the number of shards
  # (tests/test_train_steps.py checks its sums).
  config.train.fixed_order_reduction = False
  # Dropout on: its random bits must not depend on the sharding either.
  model_config = BertConfig.tiny(num_layers=1, hidden_dropout=0.1,
                                 attention_dropout=0.1)
  batches = [synthetic_batch(i, batch_size=16, group_size=2, length=16,
                             vocab_size=128) for i in range(2)]
  batches[1]["example_mask"][3] = False
  out = {}
  for name, shape in MESHES.items():
    mesh = sharding.make_mesh(shape, ("data", "model"),
                              jax.devices()[:shape[0] * shape[1]])
    trainer = trainer_lib.build_trainer(
        lambda rngs: CrossEncoderRanker(model_config, rngs=rngs), config,
        mesh)
    state = trainer.init(0)
    initial = jax.device_get(jax.tree.leaves(state.params))
    metrics = []
    for batch in batches:
      state, step_metrics = trainer.train_step(state, trainer.put(batch))
      metrics.append(jax.device_get(step_metrics))
    out[name] = dict(
        trainer=trainer, initial=initial, metrics=metrics,
        params=jax.device_get(jax.tree.leaves(state.params)),
        word_sharding=state.params["encoder"]["embeddings"]["word"][
            "embedding"].sharding)
  return out


def _max_difference(a_leaves, b_leaves):
  return max(float(np.max(np.abs(a - b))) for a, b in zip(a_leaves, b_leaves))


@pytest.mark.slow  # Its module fixture trains on three meshes.
@pytest.mark.parametrize("name", ["8x1", "4x2"])
def test_sharded_training_equals_one_device(results, name):
  single, sharded = results["1x1"], results[name]
  print(f"\n{name} vs 1x1 after 2 steps: max |param diff| "
        f"{_max_difference(single['params'], sharded['params']):.3g}, "
        "losses " + ", ".join(
            f"{m8['loss']:.9g}/{m1['loss']:.9g}"
            for m1, m8 in zip(single["metrics"], sharded["metrics"])))
  for a, b in zip(single["initial"], sharded["initial"]):
    np.testing.assert_array_equal(a, b)  # Sharded init: identical values.
  for m1, m8 in zip(single["metrics"], sharded["metrics"]):
    for key in ("loss", "grad_norm", "groups"):
      np.testing.assert_allclose(m8[key], m1[key], rtol=1e-5, atol=1e-6)
  for a, b in zip(single["params"], sharded["params"]):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_parameters_are_created_sharded(results):
  spec = results["4x2"]["word_sharding"].spec
  assert tuple(spec) == ("model", None)  # vocab → model, embed → None.
  assert results["4x2"]["trainer"].batch_multiple == 4
  assert results["8x1"]["trainer"].batch_multiple == 8


def test_init_from_given_params_places_them_sharded(results):
  trainer = results["4x2"]["trainer"]
  host_params = jax.tree.unflatten(
      jax.tree.structure(trainer.abstract_state.params),
      results["1x1"]["params"])
  state = trainer.init_from_params(host_params, 0)
  assert int(state.step) == 0
  word = state.params["encoder"]["embeddings"]["word"]["embedding"]
  assert tuple(word.sharding.spec) == ("model", None)
  for a, b in zip(results["1x1"]["params"],
                  jax.device_get(jax.tree.leaves(state.params))):
    np.testing.assert_array_equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("shape,family", [
    ((8, 1), "bert"), ((4, 2), "bert"), ((8, 1), "electra"),
    ((8, 1), "roberta")])
def test_unpadded_training_on_shards_equals_padded_on_one_device(shape,
                                                                 family):
  """Each data shard's micro-batch is one unpadded stream (units = data
  shards): with dropout off, the same update as padded rows on 1 device;
  the budget every unit fits (tokens, rows per attention length group) is
  read from the devices' shards. For each family's encoder and head
  (`family_checkpoints`)."""
  config = tiny_config()
  config.train.accumulation_steps = 2
  config.train.fixed_order_reduction = False
  model_config = BertConfig.tiny(num_layers=1, hidden_dropout=0.0,
                                 attention_dropout=0.0,
                                 **fc.TINY_OVERRIDES[family])
  batch = synthetic_batch(0, batch_size=16, group_size=2, length=16,
                          vocab_size=128)
  lengths = np.random.default_rng(0).integers(3, 17, (16, 2))
  batch["attention_mask"] = (np.arange(16) < lengths[..., None]).astype(
      batch["attention_mask"].dtype)
  batch["input_ids"] = batch["input_ids"] * batch["attention_mask"]
  units = token_budget.unit_of_examples(16, 2, shape[0])
  counts = batch["attention_mask"].reshape(16, -1).sum(1)
  need = int(np.bincount(units, counts).max())
  # Groups just large enough (no slack): the rows of a unit that are above
  # each group's shorter neighbour.
  above = token_budget.rows_above(batch["attention_mask"], units)
  rows = tuple(int(r) for r in np.append(-np.diff(above), above[-1]))
  assert sum(r > 0 for r in rows) > 1  # several lengths
  fitting = TokenBudget(need, rows)
  out = {}
  for name, mesh_shape, budget in (
      ("padded", (1, 1), None), ("unpadded", shape, fitting),
      ("one short", shape, TokenBudget(need - 1, rows))):
    mesh = sharding.make_mesh(mesh_shape, ("data", "model"),
                              jax.devices()[:mesh_shape[0] * mesh_shape[1]])
    trainer = trainer_lib.build_trainer(
        lambda rngs: CrossEncoderRanker(model_config, rngs=rngs), config,
        mesh)
    placed = trainer.put(batch)
    step = trainer.train_step
    if budget is not None:
      assert token_budget.batch_fit(placed["attention_mask"],
                                    (TokenBudget(need - 1, rows), fitting), 2,
                                    shape[0]) == 1
      step = token_budget.UnpaddedSteps(step, (budget,), steps=2,
                                        shards=shape[0])
    state, metrics = step(trainer.init(0), placed)
    out[name] = jax.device_get((jax.tree.leaves(state.params), metrics))
  assert out["unpadded"][1]["unpadded"] == 1.0
  assert out["one short"][1]["unpadded"] == 0.0
  for name in ("unpadded", "one short"):
    np.testing.assert_allclose(out[name][1]["loss"], out["padded"][1]["loss"],
                               rtol=1e-5)
    assert _max_difference(out[name][0], out["padded"][0]) < 1e-6
