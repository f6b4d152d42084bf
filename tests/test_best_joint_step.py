"""BeST's joint iteration-1 step on 8 fake devices: both parameter sets move,
selection never picks padding, and an all-padded document is harmless."""

import jax
import numpy as np
import pytest
from flax import nnx

from best_jax.models import BertConfig, CrossEncoderRanker
from best_jax.models.bi_encoder import BiEncoderRanker
from best_jax.models.unpadding import TokenBudget
from best_jax.experiment import checks
from best_jax.experiment import models
from best_jax.experiment import plans
from best_jax.train import best as best_lib
from best_jax.train import losses as losses_lib
from best_jax.train import steps as steps_lib
from best_jax.train import token_budget
from best_jax.config import load_config
from best_jax.train.sharding import make_mesh
from best_jax.train.trainer import build_trainer
from fakes import tiny_config


@pytest.fixture(scope="module")
def trainer():
  """A tiny one-layer ranker on a 1-device mesh (compiles fastest; the
  end-to-end test covers 8 devices and two layers)."""
  config = load_config("configs/tiny_cpu.py")
  model_config = BertConfig.tiny(num_layers=1)
  mesh = make_mesh((1, 1), ("data", "model"), jax.devices()[:1])
  return build_trainer(lambda rngs: CrossEncoderRanker(model_config,
                                                       rngs=rngs), config,
                       mesh=mesh)


@pytest.fixture(scope="module")
def joint_step(trainer):
  return best_lib.build_joint_step(trainer, "pairwise_hinge")


def _batch(num_b=8, num_g=2, num_s=3, length=12, seed=0):
  rng = np.random.default_rng(seed)
  mask_bgs = np.ones((num_b, num_g, num_s), bool)
  mask_bgs[0, 1, 1:] = False          # a negative with one segment
  mask_bgs[1, 0, 2] = False           # a positive with two
  mask_bgs[2, 1, :] = False           # a negative with no segment at all
  ids = rng.integers(5, 128, (num_b, num_g, num_s, length)).astype(np.int32)
  return {
      "input_ids": ids,
      "attention_mask": np.ones(ids.shape, bool),
      "token_type_ids": np.zeros(ids.shape, np.int32),
      "labels": np.tile(np.array([1.0, 0.0], np.float32), (num_b, 1)),
      "mask": mask_bgs,
      "example_mask": np.ones(num_b, bool),
  }


def test_joint_step_updates_both_parameter_sets(trainer, joint_step):
  step = joint_step
  state0, state1 = trainer.init(0), trainer.init(1)
  before0 = jax.device_get(state0.params)
  before1 = jax.device_get(state1.params)
  host = _batch()
  # The first update has learning rate 0 (warmup); the second moves.
  for _ in range(2):
    (state0, state1), metrics = step((state0, state1), trainer.put(host))
  after0, after1 = (jax.device_get(s.params) for s in (state0, state1))
  moved = lambda a, b: max(float(np.abs(x - y).max()) for x, y in
                           zip(jax.tree.leaves(a), jax.tree.leaves(b)))
  assert moved(before0, after0) > 0 and moved(before1, after1) > 0
  assert int(state0.step) == 2 and int(state1.step) == 2
  for name in ("loss0", "loss1", "grad_norm0", "grad_norm1"):
    assert np.isfinite(float(metrics[name])), name
  assert float(metrics["grad_norm0"]) > 0 and float(metrics["grad_norm1"]) > 0
  selected = np.asarray(metrics["selected"])
  mask = host["mask"]
  assert selected[2, 1] == -1                       # all-padded: no index
  for b in range(8):
    for g in range(2):
      if mask[b, g].any():
        assert mask[b, g, selected[b, g]], (b, g)   # never a padded segment


def test_selection_is_theta0_argmax_without_dropout(trainer, joint_step):
  """θ1 trains on the segment θ0 scores highest (dropout off)."""
  step = joint_step
  state0, state1 = trainer.init(3), trainer.init(4)
  host = _batch(seed=1)
  model = nnx.merge(trainer.graphdef, jax.device_get(state0.params))
  scores = np.asarray(model(host["input_ids"], host["attention_mask"],
                            host["token_type_ids"]))
  expected = np.where(host["mask"], scores, -np.inf).argmax(-1)
  expected = np.where(host["mask"].any(-1), expected, -1)
  _, metrics = step((state0, state1), trainer.put(host))
  np.testing.assert_array_equal(np.asarray(metrics["selected"]), expected)


def test_eq3_pairs_segments_and_masks_padding():
  scores_bgs = np.array([[[1.0, 2.0, 9.0], [0.5, 7.0, 9.0]]])
  mask_bgs = np.array([[[True, True, False], [True, True, True]]])
  grouped, where = best_lib._eq3_scores(scores_bgs, mask_bgs, "same",
                                        jax.random.key(0))
  # Segment j of the positive against segment j of the negative.
  np.testing.assert_allclose(np.asarray(grouped)[0], [[1.0, 0.5], [2.0, 7.0],
                                                      [9.0, 9.0]])
  assert np.asarray(where)[0].tolist() == [[True, True], [True, True],
                                           [False, True]]


def test_should_continue():
  assert best_lib.should_continue([0.3])
  assert best_lib.should_continue([0.3, 0.35])
  assert not best_lib.should_continue([0.3, 0.35, 0.34])
  assert not best_lib.should_continue([0.3, 0.3])


@pytest.mark.slow
def test_joint_step_accumulates_micro_batches_like_one_batch(monkeypatch):
  """`train.accumulation_steps` splits the joint step's batch into
  micro-batches whose sums equal one pass (dropout off: same numbers)."""
  rows = []  # the examples each model pass sees, at trace time
  batch_scores = steps_lib.batch_scores

  def spy(model, micro, *args, **kwargs):
    rows.append(micro["mask"].shape[0])
    return batch_scores(model, micro, *args, **kwargs)

  monkeypatch.setattr(steps_lib, "batch_scores", spy)
  config = tiny_config()
  config.optimizer.warmup_steps = 0
  # eps = 1 makes AdamW's first update ~ -lr * gradient (not ~ -lr * sign),
  # so parameters after one step compare the gradients' values.
  config.optimizer.eps = 1.0
  model_config = BertConfig.tiny(num_layers=1, hidden_dropout=0.0,
                                 attention_dropout=0.0)
  mesh = make_mesh((1, 1), ("data", "model"), jax.devices()[:1])
  trainer = build_trainer(lambda rngs: CrossEncoderRanker(model_config,
                                                          rngs=rngs), config,
                          mesh=mesh)
  host = _batch(seed=2)
  out = {}
  for k in (1, 4):
    step = best_lib.build_joint_step(trainer, "pairwise_hinge",
                                     accumulation_steps=k)
    states = (trainer.init(5), trainer.init(6))
    states, metrics = step(states, trainer.put(host))
    out[k] = jax.device_get((states[0].params, states[1].params, metrics))
    assert set(rows) == {len(host["mask"]) // k}, k  # θ0, its pick, θ1
    rows.clear()
  (p0, p1, m1), (q0, q1, m4) = out[1], out[4]
  for name in ("loss0", "loss1", "grad_norm0", "grad_norm1"):
    np.testing.assert_allclose(m4[name], m1[name], rtol=1e-5)
  np.testing.assert_array_equal(m4["selected"], m1["selected"])
  for a, b in zip(jax.tree.leaves((p0, p1)), jax.tree.leaves((q0, q1))):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_the_joint_plan_passes_the_configured_accumulation(monkeypatch):
  """`train.accumulation_steps` reaches the joint step from the config, and
  a ranker builds each setting's step once."""
  config = load_config("configs/tiny_cpu.py")
  config.train.accumulation_steps = 4

  class Built(Exception):
    pass

  built = []

  def spy(trainer, **settings):
    del trainer
    built.append((settings["accumulation_steps"],
                  settings["in_batch_negatives"]))
    raise Built

  monkeypatch.setattr(best_lib, "build_joint_step", spy)
  ranker = models.Ranker(trainer=None, pretrained=None, encoder=None,
                         scorer=None)
  for in_batch in (False, True):
    config.train.in_batch_negatives = in_batch
    with pytest.raises(Built):
      plans.joint_plan(config, None, ranker, None)
    assert built[-1] == (4, in_batch)
  monkeypatch.setattr(best_lib, "build_joint_step",
                      lambda trainer, **settings: built.append(
                          settings["accumulation_steps"]) or object())
  steps = [ranker.joint_step(config) for _ in range(2)]
  config.best.pairing = "random"
  steps.append(ranker.joint_step(config))
  assert steps[0] is steps[1] is not steps[2] and built[2:] == [4, 4]


def test_the_joint_step_honours_in_batch_negatives():
  """A bi-encoder's θ⁽¹⁾ loss in the joint step is the plain step's group
  loss on θ⁽⁰⁾'s picks: with `in_batch_negatives`, over the batch's other
  segments too (dropout off: the same numbers)."""
  config = tiny_config()
  model_config = BertConfig.tiny(num_layers=1, hidden_dropout=0.0,
                                 attention_dropout=0.0)
  mesh = make_mesh((1, 1), ("data", "model"), jax.devices()[:1])
  trainer = build_trainer(lambda rngs: BiEncoderRanker(model_config,
                                                       rngs=rngs), config,
                          mesh=mesh)
  rng = np.random.default_rng(3)
  host = dict(_batch(num_b=4, seed=3),
              query_ids=rng.integers(5, 128, (4, 6)).astype(np.int32),
              query_mask=np.ones((4, 6), bool),
              doc_ids=np.arange(8, dtype=np.int32).reshape(4, 2))
  host["token_type_ids"][:] = 0
  loss = losses_lib.get_loss("softmax_cross_entropy")
  for in_batch in (False, True):
    step = best_lib.build_joint_step(trainer, "softmax_cross_entropy",
                                     in_batch_negatives=in_batch)
    states = (trainer.init(5), trainer.init(6))
    model1 = nnx.merge(trainer.graphdef, jax.device_get(states[1].params))
    _, metrics = step(states, trainer.put(host))
    selected = np.asarray(metrics["selected"])
    index = np.maximum(selected, 0)[..., None, None]
    chosen = dict(host, mask=selected >= 0, **{
        name: np.take_along_axis(host[name], index, axis=2)[:, :, 0]
        for name in steps_lib.MODEL_INPUTS})
    total, count = steps_lib.group_loss_sum(model1, chosen, loss, None,
                                            in_batch_negatives=in_batch)
    np.testing.assert_allclose(float(metrics["loss1"]),
                               float(total / count), rtol=1e-5)
  # A joint BeST-1 recorded before it honoured them is stale.
  bi = load_config("configs/tiny_cpu.py",
                   ["config.ranker.kind='bi'",
                    "config.train.in_batch_negatives=True"])
  current = checks.fingerprint(bi, "best")
  before = {k: v for k, v in current.items()
            if k != "best.joint_in_batch_negatives"}
  assert checks.stale_keys(before, current, "best") == [
      "best.joint_in_batch_negatives: False -> True"]


@pytest.mark.slow
def test_unpadded_joint_step_equals_the_padded_one():
  """θ⁽⁰⁾'s segment rows as one stream (`tokens` = the batch's real
  tokens), a missing segment's row holding none, attention on every row or
  on length groups just large enough: the same losses, selections and
  updates, dropout included."""
  config = tiny_config()
  config.optimizer.warmup_steps = 0
  model_config = BertConfig.tiny(num_layers=1, hidden_dropout=0.1,
                                 attention_dropout=0.1)
  mesh = make_mesh((1, 1), ("data", "model"), jax.devices()[:1])
  trainer = build_trainer(
      lambda rngs: CrossEncoderRanker(model_config, rngs=rngs), config, mesh)
  step = best_lib.build_joint_step(trainer, "pairwise_hinge")
  rng = np.random.default_rng(0)
  shape = (4, 2, 3, 16)  # [B, G, S, L]
  lengths = rng.integers(4, 17, shape[:3])
  batch = dict(input_ids=rng.integers(5, 128, shape).astype(np.int32),
               attention_mask=np.arange(16) < lengths[..., None],
               token_type_ids=np.zeros(shape, np.int32),
               labels=np.tile(np.float32([1, 0]), (4, 1)),
               mask=np.ones(shape[:3], bool), example_mask=np.ones(4, bool))
  for b, g, segment in ((0, 1, 2), (2, 0, 1), (2, 0, 2)):  # missing segments
    batch["mask"][b, g, segment] = False
    batch["attention_mask"][b, g, segment] = False
  need = int(batch["attention_mask"].sum())
  assert need < batch["attention_mask"].size
  above = token_budget.rows_above(batch["attention_mask"], np.zeros(4, int))
  rows = tuple(int(r) for r in np.append(-np.diff(above), above[-1]))
  assert sum(r > 0 for r in rows) > 1 and sum(rows) == 21  # 3 rows empty
  out = {}
  for budget in (None, TokenBudget(need), TokenBudget(need, rows)):
    states, metrics = step((trainer.init(0), trainer.init(1)),
                           trainer.put(batch), budget)
    out[budget] = jax.device_get((states, metrics))
  padded, padded_metrics = out.pop(None)
  for unpadded, metrics in out.values():
    np.testing.assert_array_equal(metrics["selected"],
                                  padded_metrics["selected"])
    for name in ("loss0", "loss1"):
      np.testing.assert_allclose(metrics[name], padded_metrics[name],
                                 rtol=1e-5)
    for model in (0, 1):
      for a, b in zip(jax.tree.leaves(padded[model].params),
                      jax.tree.leaves(unpadded[model].params)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
