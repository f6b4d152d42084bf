"""Train steps, model selection, masking, prediction and checkpoints (tiny)."""

import functools

import jax
import ml_collections
import numpy as np
import pytest
from flax import nnx

from best_jax.truncate import (checkpoint, experiment, features, lists, models,
                               rewards, train)


def _ranked(num_queries=12, depth=16, seed=0):
  rng = np.random.default_rng(seed)
  scores = np.sort(rng.normal(size=(num_queries, depth)), axis=1)[:, ::-1]
  lengths = rng.integers(4, depth + 1, size=num_queries)
  lengths[0] = depth
  mask = np.arange(depth)[None] < lengths[:, None]
  # Relevance follows the score: the top of each list is mostly relevant.
  labels = (rng.random((num_queries, depth)) <
            np.linspace(0.9, 0.05, depth)[None]) & mask
  qids = [str(i) for i in range(num_queries)]
  docids = [[f"d{i}_{n}" for n in range(lengths[i])] for i in range(num_queries)]
  return lists.RankedLists(qids, docids, np.where(mask, scores, 0).astype(
      np.float32), labels, mask)


def _config(model, loss, **overrides):
  c = train.default_config()
  c.model, c.loss = model, loss
  c.lstm_hidden, c.heads = 8, 2
  c.choppy_position_dim, c.choppy_heads = 7, 2
  c.batch_size, c.epochs, c.learning_rate = 5, 3, 1e-2
  c.update(overrides)
  return c


def _train_valid(ranked, metric="f1"):
  """The first 3/4 of the lists to train on, the rest to select on."""
  cut = 3 * len(ranked.qids) // 4
  return (train.arrays(ranked.select(ranked.qids[:cut]), metric),
          train.arrays(ranked.select(ranked.qids[cut:]), metric))


def test_attncut_raml_fits_lowers_the_loss_and_predicts_real_cutoffs():
  ranked = _ranked(num_queries=20)
  data = train.arrays(ranked, "f1")
  fitted, history = train.fit(_config("attncut", "raml", epochs=8,
                                      patience=8), data, data)
  assert np.all(np.isfinite(history.losses)) and len(history.losses) == 8
  assert history.losses[-1] < history.losses[0]
  k = train.predict_cutoffs(fitted, data)
  assert np.all(k >= 1) and np.all(k <= ranked.lengths_q)


def test_fit_returns_the_best_validation_epoch_and_stops_early():
  ranked = _ranked(num_queries=24, seed=3)
  data, valid = _train_valid(ranked)
  config = _config("attncut", "raml", epochs=12, patience=2, learning_rate=0.1)
  fitted, history = train.fit(config, data, valid)
  best = history.best_epoch
  assert best == int(np.argmax(history.valid)) + 1  # the earliest best
  assert len(history.valid) == best + 2 < 12  # stopped `patience` after it
  # The parameters are the best epoch's, not the last epoch's.
  assert history.valid[-1] != history.valid[best - 1]
  assert train.validation_objective(fitted, valid) == pytest.approx(
      history.valid[best - 1], abs=1e-6)


def _poisoned(ranked, qids):
  """`ranked` with the labels of `qids` inverted (on real ranks)."""
  labels = ranked.labels_qn.copy()
  for i, q in enumerate(ranked.qids):
    if q in qids:
      labels[i] = ~labels[i] & ranked.mask_qn[i]
  return lists.RankedLists(ranked.qids, ranked.docids, ranked.scores_qn,
                           labels, ranked.mask_qn)


def test_model_selection_never_sees_the_test_queries():
  ranked = _ranked(num_queries=20, seed=5)
  train_q, test_q = lists.random_splits(ranked.qids, 0, 0.25)
  config = ml_collections.ConfigDict(dict(
      train=_config("attncut", "raml", epochs=4, patience=4),
      bicut_alpha={"f1": 0.3}))
  outcomes = []
  for lists_ in (ranked, _poisoned(ranked, set(test_q))):
    f = features.score_features(lists_.scores_qn, lists_.mask_qn)
    split = experiment.Split(lists_, f, train_q, test_q, "f1", seed=0,
                             valid_fraction=0.25)
    assert set(split.valid_qids) < set(train_q)
    assert not set(split.valid_qids) & set(test_q)
    result = experiment.baseline_result(split, test_q, "f1")
    experiment.add_method(config, split, result, "attncut", seed=0)
    outcomes.append(result)
  clean, poisoned = outcomes
  # Poisoned test labels change the test figures but not the selection.
  assert clean["methods"]["oracle"] != poisoned["methods"]["oracle"]
  assert clean["greedy_k"] == poisoned["greedy_k"]
  assert clean["selection"] == poisoned["selection"]
  assert (clean["methods"]["attncut"]["cutoffs"] ==
          poisoned["methods"]["attncut"]["cutoffs"])


@pytest.mark.slow
@pytest.mark.parametrize("model,loss", [
    ("attncut", "bicut"), ("bicut", "bicut"), ("choppy", "expected"),
    ("attncut", "reinforce"), ("attncut", "recall_bins")])
def test_every_model_and_loss_fits_and_predicts(model, loss):
  ranked = _ranked()
  data, valid = _train_valid(ranked)
  fitted, history = train.fit(_config(model, loss), data, valid)
  assert 1 <= history.best_epoch <= len(history.losses) <= 3
  assert np.all(np.isfinite(history.losses))
  assert np.all(np.isfinite(history.valid))
  data = train.arrays(ranked, "f1")
  logits = train.predict_logits(fitted, data)
  assert np.all(np.isfinite(logits))
  if loss != "recall_bins":
    k = train.predict_cutoffs(fitted, data)
    assert np.all(k >= 1) and np.all(k <= ranked.lengths_q)


def test_padding_does_not_change_the_output_of_real_ranks():
  ranked = _ranked()
  features = train.arrays(ranked, "f1").features_qnf
  model = models.build("attncut", features.shape[-1], 16, seed=0,
                       lstm_hidden=8, heads=2)
  short = ranked.mask_qn[1].sum()
  base = np.asarray(model(features[1:2], ranked.mask_qn[1:2]))[0, :short]
  noisy = features[1:2].copy()
  noisy[0, short:] = 123.0  # garbage in the padded tail
  again = np.asarray(model(noisy, ranked.mask_qn[1:2]))[0, :short]
  np.testing.assert_allclose(base, again, rtol=1e-5, atol=1e-5)


def _one_step(config, data, index_b):
  """The gradients and loss of one train step on rows `index_b` (the
  gradients, not Adam's update: its first step turns a float-noise gradient
  of 1e-10 into a step of 1e-4, which a version of XLA or another batch
  shape draws differently)."""
  _, depth, in_features = data.features_qnf.shape
  model = train.new_model(config, in_features, depth)
  loss, grads = nnx.value_and_grad(functools.partial(
      train.loss_value, loss=config.loss, tau=config.tau, alpha=config.alpha,
      samples=config.rl_samples, bins=config.bins))(
          model, data.take(np.asarray(index_b)), jax.random.key(0))
  return jax.tree.leaves(grads), float(loss)


@pytest.mark.parametrize("model,loss", [("attncut", "raml"),
                                        ("bicut", "bicut")])
def test_fully_masked_filler_lists_do_not_change_the_step(model, loss):
  data = train.arrays(_ranked(), "f1")
  config = _config(model, loss, dropout=0.0)  # dropout masks depend on shape
  grads, value = _one_step(config, data, [0, 1])
  padded, padded_value = _one_step(config, data, [0, 1, -1, -1])
  assert padded_value == pytest.approx(value, rel=1e-5)
  for a, b in zip(grads, padded):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # A third real list does change it: the comparison can tell.
  other, _ = _one_step(config, data, [0, 1, 2, -1])
  assert any(not np.allclose(a, b) for a, b in zip(grads, other))


def test_cutoffs_rules():
  mask = np.array([[True, True, True, False]])
  logits = np.array([[0.0, 3.0, 1.0, 9.0]])
  assert models.cutoffs(logits, mask, "positions")[0] == 2
  end = np.array([[[1, 0], [1, 0], [0, 1], [0, 1]]], np.float32)
  assert models.cutoffs(end, mask, "bicut")[0] == 2  # ends before rank 3
  never = np.array([[[1, 0]] * 4], np.float32)
  assert models.cutoffs(never, mask, "bicut")[0] == 3  # the whole list


def test_checkpoint_round_trip(tmp_path):
  ranked = _ranked()
  data = train.arrays(ranked, "f1")
  config = _config("attncut", "raml", epochs=1)  # the jit cache of the above
  fitted, _ = train.fit(config, data, data)
  checkpoint.save(str(tmp_path / "m"), fitted, config,
                  data.features_qnf.shape[-1], 16)
  loaded, loaded_config, header = checkpoint.load(str(tmp_path / "m"))
  assert loaded_config.model == "attncut" and header["depth"] == 16
  np.testing.assert_allclose(train.predict_logits(loaded, data),
                             train.predict_logits(fitted, data), rtol=1e-6)


@pytest.mark.parametrize("metric", ["f1", "dcg"])
def test_rewards_at_cutoffs_are_the_metric_by_hand(metric):
  ranked = _ranked()
  data = train.arrays(ranked, metric)
  cutoffs = np.random.default_rng(2).integers(1, ranked.lengths_q + 1)
  got = np.asarray(rewards.at_cutoff(data.rewards_qn, cutoffs))
  for i, k in enumerate(cutoffs):
    y = ranked.labels_qn[i, :ranked.lengths_q[i]]
    if metric == "dcg":
      want = sum((1.0 if y[n] else -1.0) / np.log2(n + 2) for n in range(k))
    else:
      hits = y[:k].sum()
      want = 0.0 if hits == 0 else 2 * hits / (k + y.sum())
    assert got[i] == pytest.approx(want, rel=1e-5, abs=1e-6), (i, k)
