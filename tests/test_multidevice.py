"""Sharded training and scoring on 8 fake CPU devices equal one device."""

import jax
import numpy as np
import pytest

from best_jax.models.bert import BertConfig
from best_jax.models.ranker import CrossEncoderRanker
from best_jax.train import sharding
from best_jax.train import synthetic
from best_jax.train import trainer as trainer_lib

MESHES = {"1x1": (1, 1), "8x1": (8, 1), "4x2": (4, 2)}


@pytest.fixture(scope="module")
def results():
  """Per mesh: params after init and after 2 steps, metrics, scores."""
  config = synthetic.load_config(synthetic.default_config_path())
  config.train.accumulation_steps = 2
  # Dropout on: its random bits must not depend on the sharding either.
  model_config = BertConfig.tiny(num_layers=1, **config.model)
  batches = [synthetic.synthetic_batch(i, batch_size=16, group_size=2,
                                       length=16, vocab_size=128)
             for i in range(2)]
  batches[1]["example_mask"][3] = False
  odd_batch = {k: v[:5] for k, v in batches[0].items()}  # 5 rows.
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
            "embedding"].sharding,
        scores=trainer.score(state.params, odd_batch))
  return out


def _max_difference(a_leaves, b_leaves):
  return max(float(np.max(np.abs(a - b))) for a, b in zip(a_leaves, b_leaves))


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


@pytest.mark.parametrize("name", ["8x1", "4x2"])
def test_scoring_pads_an_indivisible_batch_and_drops_nothing(results, name):
  single, sharded = results["1x1"], results[name]
  print(f"\n{name} vs 1x1 scores of 5 rows: max |diff| "
        f"{float(np.max(np.abs(single['scores'] - sharded['scores']))):.3g}")
  assert single["scores"].shape == sharded["scores"].shape == (5, 2)
  # Both score with their own (equal to 1e-5) params; compare to 1e-5.
  np.testing.assert_allclose(sharded["scores"], single["scores"], rtol=1e-5,
                             atol=1e-5)


def test_scoring_with_identical_params_is_equal(results):
  """The same parameters scored on 1 and 8 devices (5 rows, padded to 8)."""
  batch = synthetic.synthetic_batch(9, batch_size=5, group_size=3, length=16,
                                    vocab_size=128)
  params = results["1x1"]["params"]
  scores = {}
  for name in ("1x1", "8x1"):
    trainer = results[name]["trainer"]
    state_params = jax.tree.unflatten(
        jax.tree.structure(trainer.abstract_state.params), params)
    placed = jax.device_put(state_params,
                            trainer.state_shardings.params)
    scores[name] = trainer.score(placed, batch)
  print("\nidentical params, 8x1 vs 1x1 scores: max |diff| "
        f"{float(np.max(np.abs(scores['8x1'] - scores['1x1']))):.3g}")
  assert scores["8x1"].shape == (5, 3)
  np.testing.assert_allclose(scores["8x1"], scores["1x1"], rtol=1e-5,
                             atol=1e-6)


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
