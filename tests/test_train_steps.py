"""Losses, optimizer and the train step: hand-computed values, masks, and
gradient accumulation equal to one large batch."""

import math
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from best_jax.data.pipeline import Feature
from best_jax.experiment import stages as stages_lib
from best_jax.experiment.examples import GroupExamples
from best_jax.experiment.workdir import Workdir
from best_jax.models.bert_config import BertConfig
from best_jax.models.ranker import CrossEncoderRanker
from best_jax.models.unpadding import TokenBudget
from best_jax.train import losses
from best_jax.train import optimizer as optimizer_lib
from best_jax.train import sharding
from best_jax.train import state as state_lib
from best_jax.train import steps
from best_jax.train import token_budget
from best_jax.train import trainer as trainer_lib
from fakes import direct_scores, synthetic_batch
from fakes import tiny_config


# --- Losses -----------------------------------------------------------------


def test_pairwise_hinge_hand_values():
  scores = jnp.array([[0.3, 0.1, 9.0], [0.0, 2.0, 9.0], [2.0, 1.0, 0.5],
                      [0.0, 0.0, 0.0]])
  labels = jnp.array([[1, 0, 0], [1, 0, 0], [1, 0, 0], [2, 1, 0]])
  where = jnp.array([[True, True, False], [True, True, False],
                     [True, True, True], [True, True, True]])
  group = losses.pairwise_hinge(scores, labels, where=where)
  # max(0, 1 - .3 + .1) = .8; max(0, 1 - 0 + 2) = 3; pairs (0,1), (0,2) of
  # group 3: max(0, 1 - 1) = 0, max(0, 1 - 1.5) = 0; group 4: three pairs of 1.
  np.testing.assert_allclose(group.loss, [0.8, 3.0, 0.0, 1.0], rtol=1e-6)
  np.testing.assert_array_equal(group.valid, [True] * 4)


def test_sigmoid_cross_entropy_hand_values():
  scores = jnp.array([[0.0, 2.0, 5.0]])
  labels = jnp.array([[1.0, 0.0, 1.0]])
  where = jnp.array([[True, True, False]])
  group = losses.sigmoid_cross_entropy(scores, labels, where=where)
  expected = (math.log(2.0) + math.log1p(math.exp(2.0))) / 2
  np.testing.assert_allclose(group.loss, [expected], rtol=1e-6)


def test_softmax_cross_entropy_hand_values():
  scores = jnp.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0],
                      [0.0, 3.0, 1.0]])
  labels = jnp.array([[1, 0, 0], [1, 0, 0], [0, 0, 0], [1, 1, 0]])
  where = jnp.array([[True] * 3, [True, True, False], [True] * 3, [True] * 3])
  group = losses.softmax_cross_entropy(scores, labels, where=where)
  e = math.e
  two_positives = -0.5 * (math.log(1 / (1 + e**3 + e)) +
                          math.log(e**3 / (1 + e**3 + e)))
  np.testing.assert_allclose(
      group.loss, [math.log((e + 2) / e), math.log((e + 1) / e), 0.0,
                   two_positives], rtol=1e-6)
  np.testing.assert_array_equal(group.valid, [True, True, False, True])


@pytest.mark.parametrize("name", sorted(losses.LOSSES))
def test_fully_masked_groups_give_zero_and_no_nan(name):
  loss_fn = losses.get_loss(name)
  scores = jnp.array([[1.0, -2.0, jnp.inf], [0.5, 0.2, 0.1]], jnp.bfloat16)
  labels = jnp.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
  where = jnp.array([[False, False, False], [True, True, True]])

  def mean_loss(scores):
    group = loss_fn(scores, labels, where=where)
    return losses.masked_mean(group.loss, group.valid)

  group = loss_fn(scores, labels, where=where)
  assert group.loss.dtype == jnp.float32
  assert float(group.loss[0]) == 0.0 and not bool(group.valid[0])
  grads = jax.grad(mean_loss)(scores.astype(jnp.float32))
  assert np.all(np.isfinite(grads))
  np.testing.assert_array_equal(grads[0], [0.0, 0.0, 0.0])
  nothing = loss_fn(scores, labels, where=jnp.zeros_like(where))
  assert not np.any(nothing.valid)
  assert float(losses.masked_mean(nothing.loss, nothing.valid)) == 0.0


def test_losses_reject_non_boolean_masks():
  with pytest.raises(TypeError, match="boolean"):
    losses.pairwise_hinge(jnp.zeros((1, 2)), jnp.ones((1, 2)),
                          where=jnp.ones((1, 2), jnp.int32))


# --- Optimizer --------------------------------------------------------------


def _tiny_params(**overrides):
  config = BertConfig.tiny(num_layers=1, **overrides)
  return state_lib.abstract_params(
      lambda rngs: CrossEncoderRanker(config, rngs=rngs))[1]


def test_no_weight_decay_on_layernorm_and_biases():
  params = _tiny_params()
  mask = optimizer_lib.weight_decay_mask(params)
  decayed = {jax.tree_util.keystr(p): m for p, m in
             jax.tree_util.tree_flatten_with_path(mask)[0]}
  no_decay = sorted(path for path, m in decayed.items() if not m)
  expected = sorted(path for path in decayed
                    if "['bias']" in path or "['scale']" in path)
  assert no_decay == expected
  assert "['encoder']['embeddings']['norm']['scale'].value" in no_decay
  assert "['encoder']['layers'][0]['attention']['query']['bias'].value" in (
      no_decay)  # A 2-D bias [heads, head_dim].
  assert decayed["['encoder']['embeddings']['word']['embedding'].value"]
  assert decayed["['encoder']['layers'][0]['intermediate']['kernel'].value"]
  assert decayed["['head']['kernel'].value"]


def test_weight_decay_applies_only_where_masked():
  config = tiny_config().optimizer
  config.warmup_steps, config.weight_decay = 0, 0.5
  tx, _ = optimizer_lib.make_optimizer(config)
  params = jax.tree.map(lambda a: np.ones(a.shape, a.dtype), _tiny_params())

  @jax.jit
  def step_with_zero_gradients(params):
    zero_grads = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(zero_grads, tx.init(params), params)
    return optax.apply_updates(params, updates)

  new = step_with_zero_gradients(params)
  mask = optimizer_lib.weight_decay_mask(params)
  for p, m, x in zip(jax.tree.leaves(params), jax.tree.leaves(mask),
                     jax.tree.leaves(new)):
    expected = 1.0 - config.learning_rate * 0.5 if m else 1.0
    np.testing.assert_allclose(x, np.full(p.shape, expected), rtol=1e-7)


def test_learning_rate_schedule_values():
  schedule = optimizer_lib.learning_rate_schedule(1e-3, 2, 10)
  values = [float(schedule(count)) for count in range(12)]
  expected = [0.0, 5e-4, 1e-3, 8.75e-4, 7.5e-4, 6.25e-4, 5e-4, 3.75e-4,
              2.5e-4, 1.25e-4, 0.0, 0.0]
  np.testing.assert_allclose(values, expected, atol=1e-10)
  no_warmup = optimizer_lib.learning_rate_schedule(1e-3, 0, 4)
  np.testing.assert_allclose([float(no_warmup(c)) for c in range(5)],
                             [1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0], atol=1e-10)
  with pytest.raises(ValueError):
    optimizer_lib.learning_rate_schedule(1e-3, 5, 4)


# --- Train step ---------------------------------------------------------------


def _masked_batch():
  """8 examples of groups of 3; example 5 is padding, some items masked."""
  batch = synthetic_batch(3, batch_size=8, group_size=3, length=12,
                          vocab_size=128)
  batch["example_mask"][5] = False
  batch["mask"][1, 2] = False
  batch["mask"][6, 1:] = False  # Group with no negative: no pairs.
  return batch


def _trainer(accumulation_steps, dropout=0.0):
  config = tiny_config()
  config.train.accumulation_steps = accumulation_steps
  config.optimizer.warmup_steps = 0
  # eps = 1 makes AdamW's first update ~ -lr * gradient (not ~ -lr * sign),
  # so parameters after one step compare the gradients' values.
  config.optimizer.eps = 1.0
  model_config = BertConfig.tiny(num_layers=1, hidden_dropout=dropout,
                                 attention_dropout=dropout)
  mesh = sharding.make_mesh((1, 1), ("data", "model"), jax.devices()[:1])
  return trainer_lib.build_trainer(
      lambda rngs: CrossEncoderRanker(model_config, rngs=rngs), config, mesh)


class BagOfWordsScorer(nnx.Module):
  """A float64 toy ranker: masked mean of embeddings → tanh → linear."""

  def __init__(self, *, rngs):
    self.embed = nnx.Embed(128, 8, param_dtype=jnp.float64,
                           dtype=jnp.float64, rngs=rngs)
    self.out = nnx.Linear(8, 1, param_dtype=jnp.float64, dtype=jnp.float64,
                          rngs=rngs)

  def __call__(self, input_ids, attention_mask, token_type_ids, *,
               rngs=None):
    del token_type_ids, rngs
    weights = attention_mask.astype(jnp.float64)[..., None]
    mean = (jnp.sum(self.embed(input_ids) * weights, axis=-2)
            / jnp.maximum(jnp.sum(weights, axis=-2), 1.0))
    return self.out(jnp.tanh(mean))[..., 0]


@pytest.mark.parametrize("loss_name", sorted(losses.LOSSES))
def test_gradient_accumulation_sums_exactly_in_float64(loss_name):
  """The accumulation arithmetic, free of float32 rounding: equal to 1e-12."""
  batch = _masked_batch()
  batch["labels"][:, 1] = 0.5  # Graded labels: every loss has signal.
  with jax.enable_x64(True):
    graphdef, params = state_lib.split_params(BagOfWordsScorer(
        rngs=nnx.Rngs(0)))
    loss_fn = losses.get_loss(loss_name)

    def sums_fn(params, micro, key):
      del key
      model = nnx.merge(graphdef, params)
      return (steps.group_loss_sum(model, micro, loss_fn, None),), None

    key = jax.random.key(0)
    results = [jax.jit(lambda params, batch, k=k: steps.loss_and_gradients(
        sums_fn, params, batch, key, k))(params, batch) for k in (1, 4, 8)]
    ((total_1, count_1),), grads_1, _ = results[0]
    assert grads_1["out"]["kernel"].dtype == jnp.float64
    for ((total, count),), grads, _ in results[1:]:
      assert count == count_1
      np.testing.assert_allclose(total, total_1, rtol=1e-12)
      for a, b in zip(jax.tree.leaves(grads_1), jax.tree.leaves(grads)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("accumulation_steps", [1, 2])
def test_fixed_order_reduction_adds_the_shards_without_an_all_reduce(
    accumulation_steps):
  """`fixed_order`: the 8 data shards' float64 gradients, each computed
  alone, added in shard order; the compiled step holds no all-reduce (whose
  order would depend on how the devices are spread over processes)."""
  batch = _masked_batch()
  batch = {k: np.concatenate([v, v[::-1]]) for k, v in batch.items()}  # 16
  mesh = sharding.make_mesh((8, 1), ("data", "model"), jax.devices()[:8])
  batch_sharding = jax.NamedSharding(mesh, jax.P("data"))
  with jax.enable_x64(True):
    graphdef, params = state_lib.split_params(BagOfWordsScorer(
        rngs=nnx.Rngs(0)))
    loss_fn = losses.get_loss("softmax_cross_entropy")

    def sums_fn(params, micro, key):
      del key
      model = nnx.merge(graphdef, params)
      # Per-example aux: must come back in the batch's example order.
      return ((steps.group_loss_sum(model, micro, loss_fn, None),),
              micro["input_ids"][:, 0, 0])

    def gradients(params, batch, fixed_order=True, sharding=batch_sharding):
      return steps.loss_and_gradients(
          sums_fn, params, batch, jax.random.key(0), accumulation_steps,
          sharding, fixed_order)
    with jax.set_mesh(mesh):
      placed = jax.device_put(batch, batch_sharding)
      step = jax.jit(gradients)
      ((total, count),), grads, aux = step(params, placed)
      compiled = step.lower(params, placed).compile().as_text()
    for reduction in ("all-reduce", "reduce-scatter"):
      assert reduction not in compiled
    assert "all-to-all" in compiled
    np.testing.assert_array_equal(aux, batch["input_ids"][:, 0, 0])
    want_total, want_count, want = 0.0, 0.0, None
    for shard in range(8):  # Shard d: examples [2d, 2d + 2).
      part = {k: v[2 * shard:2 * shard + 2] for k, v in batch.items()}
      ((shard_total, shard_count),), shard_grads, _ = jax.jit(
          gradients, static_argnums=(2, 3))(params, part, False, None)
      want_total += shard_total
      want_count += shard_count
      want = shard_grads if want is None else jax.tree.map(
          lambda a, b: a + b, want, shard_grads)
  assert count == want_count == 14  # 2 × (8 − padding)
  np.testing.assert_allclose(total, want_total, rtol=1e-12)
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(grads)):
    np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-15)


def test_gradient_accumulation_equals_one_large_batch():
  """The jitted float32 train step: k = 4 micro-batches vs one batch."""
  batch = _masked_batch()
  results = {}
  for k in (1, 4):
    trainer = _trainer(k)
    state = trainer.init(0)
    if k == 1:
      scores = direct_scores(trainer.graphdef, state.params, batch)
    state, metrics = trainer.train_step(state, trainer.put(batch))
    results[k] = jax.device_get((state.params, metrics))
  (params_1, metrics_1), (params_4, metrics_4) = results[1], results[4]
  assert metrics_1["groups"] == 6  # 8 - padding - the group without pairs.
  for name in ("loss", "grad_norm", "groups"):
    np.testing.assert_allclose(metrics_4[name], metrics_1[name], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(params_1), jax.tree.leaves(params_4)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
  # The loss is the mean over valid groups of the per-group hinge.
  group = losses.pairwise_hinge(scores, batch["labels"], where=batch["mask"])
  expected = losses.masked_mean(group.loss,
                                group.valid & batch["example_mask"])
  np.testing.assert_allclose(metrics_1["loss"], expected, rtol=1e-6)


@pytest.mark.parametrize("accumulation_steps,dropout",
                         [(1, 0.0), (4, 0.0), (4, 0.1)])
def test_unpadded_step_equals_the_padded_step(accumulation_steps, dropout):
  """A budget (static) encodes each micro-batch's rows as one stream: the
  same update as padded rows, dropout included. `UnpaddedSteps` runs it
  when the batch's largest unit fits, the padded step when one token more
  is needed."""
  batch = _masked_batch()
  trainer = _trainer(accumulation_steps, dropout)
  need = max(batch["attention_mask"][j::accumulation_steps].sum()
             for j in range(accumulation_steps))
  assert need < batch["attention_mask"].size / accumulation_steps
  results = {}
  for tokens in (None, int(need), int(need) - 1):
    step = token_budget.UnpaddedSteps(trainer.train_step,
                                      (TokenBudget(tokens or 10**6),),
                                      steps=accumulation_steps, shards=1)
    if tokens is None:
      step = trainer.train_step
    state, metrics = step(trainer.init(0), trainer.put(batch))
    results[tokens] = jax.device_get((state.params, metrics))
  padded_params, padded = results[None]
  for tokens, fits in ((int(need), 1.0), (int(need) - 1, 0.0)):
    params, metrics = results[tokens]
    assert metrics["unpadded"] == fits
    for name in ("loss", "grad_norm", "groups"):
      np.testing.assert_allclose(metrics[name], padded[name], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(padded_params), jax.tree.leaves(params)):
      np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-8)
  # Called with too few tokens, the step is not finite: the guarded update
  # skips it instead of training on truncated rows.
  start = trainer.init(0)
  start_params = jax.device_get(start.params)  # `start` is donated.
  state, metrics = trainer.train_step(start, trainer.put(batch),
                                      TokenBudget(int(need) // 2))
  assert not np.isfinite(jax.device_get(metrics["loss"]))
  assert int(state.nonfinite_step) == 0
  for a, b in zip(jax.tree.leaves(start_params),
                  jax.tree.leaves(jax.device_get(state.params))):
    np.testing.assert_array_equal(a, b)


def _uneven_batch():
  """16 examples of 2 rows: every 4th is long (16 tokens a row), the rest
  short (3), so strided micro-batches (example e in e % 4) are uneven."""
  batch = synthetic_batch(0, batch_size=16, group_size=2, length=16,
                          vocab_size=128)
  lengths = np.where(np.arange(16) % 4 == 0, 16, 3)[:, None].repeat(2, 1)
  batch["attention_mask"] = np.arange(16) < lengths[..., None]
  batch["input_ids"] = batch["input_ids"] * batch["attention_mask"]
  return batch


def test_micro_batches_are_balanced_within_each_data_shard():
  """With accumulation, each data shard's examples are reordered so that
  its micro-batches hold about the same tokens: a permutation inside each
  shard's block, a function of that block alone (so the same on any
  number of processes)."""
  batch = _uneven_batch()
  mask = batch["attention_mask"]
  units = token_budget.unit_of_examples(16, 4, 2)
  # Blocks of 8: micro-batch 0 of each holds both long examples.
  assert token_budget.largest_unit(mask, units) == 2 * 32
  order = token_budget.micro_batch_order(mask, 4, 2, 16)
  assert sorted(order[:8]) == list(range(8))
  assert sorted(order[8:]) == list(range(8, 16))
  assert token_budget.largest_unit(mask[order], units) == 32 + 6
  np.testing.assert_array_equal(
      order[8:], 8 + token_budget.micro_batch_order(mask[8:], 4, 1, 8))
  arranged = token_budget.balance_micro_batches(batch, steps=4, shards=2,
                                                batch_size=16)
  for name, value in batch.items():
    np.testing.assert_array_equal(arranged[name], value[order])


def test_a_batch_that_is_not_whole_units_is_refused_or_left_out():
  """`balanced_order` refuses a block that is not whole micro-batches;
  `choose_budgets` leaves out a batch shorter than the first (the last of
  a schedule, which the pipeline pads to a full one) and returns no budget
  when the batches do not split into whole units."""
  batch = _uneven_batch()
  with pytest.raises(ValueError, match="micro-batches"):
    token_budget.balanced_order(np.ones(10), 4)
  examples = [{"attention_mask": batch["attention_mask"][i]}
              for i in range(16)]
  full = _budgets([examples], steps=4, shards=1)
  assert [b.tokens for b in full] == [64]
  assert _budgets([examples, examples[:12]], steps=4, shards=1) == full
  assert _budgets([examples[:10]], steps=4, shards=1) == ()


def test_budgets_are_chosen_for_balanced_micro_batches():
  """`choose_budgets` sizes the stream for the micro-batches the pipeline
  feeds (balanced): 64 tokens here, where strided ones would need 128, the
  padded size, and get no budget at all."""
  batch = _uneven_batch()
  examples = [{name: value[i] for name, value in batch.items()}
              for i in range(16)]
  budgets = _budgets([examples], steps=4, shards=1)
  assert [b.tokens for b in budgets] == [64]


def test_a_balanced_batch_trains_unpadded_to_the_same_update():
  """Reordering a batch's examples changes only the rounding: the balanced
  batch fits a budget the strided one does not, and its unpadded update is
  the padded update of the batch as it came."""
  batch = _uneven_batch()
  arranged = token_budget.balance_micro_batches(batch, steps=4, shards=1,
                                                batch_size=16)
  trainer = _trainer(4)
  budget = TokenBudget(32 + 3 * 6)
  results = {}
  for name, data, budgets in (("padded", batch, None),
                              ("strided", batch, (budget,)),
                              ("balanced", arranged, (budget,))):
    step = trainer.train_step
    if budgets:
      step = token_budget.UnpaddedSteps(step, budgets, steps=4, shards=1)
    state, metrics = step(trainer.init(0), trainer.put(data))
    results[name] = jax.device_get((state.params, metrics))
  assert results["strided"][1]["unpadded"] == 0.0
  assert results["balanced"][1]["unpadded"] == 1.0
  padded_params, padded = results["padded"]
  params, metrics = results["balanced"]
  for name in ("loss", "grad_norm", "groups"):
    np.testing.assert_allclose(metrics[name], padded[name], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(padded_params), jax.tree.leaves(params)):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("unpadded", [True, False])
def test_a_stage_with_accumulation_feeds_balanced_micro_batches(tmp_path,
                                                                unpadded):
  """`best_jax train`'s stages balance the micro-batches of every step with
  accumulation, padded or not (so `train.unpadded` never changes the
  model): the batch fits the budget chosen for it (strided, this one would
  run padded)."""
  config = tiny_config()
  config.train.update(batch_size=16, accumulation_steps=4, num_steps=1,
                      eval_every=1, log_every=1, patience=0,
                      checkpoint_every=0)
  batch = _uneven_batch()
  names = ("input_ids", "attention_mask", "token_type_ids", "labels", "mask")
  examples = [{n: batch[n][i] for n in names} for i in range(16)]
  trainer = _trainer(4)
  seen = []

  def step_fn(state, data, budget=None):
    seen.append((np.asarray(data["attention_mask"]), budget))
    return state, {"loss": jnp.float32(0.0)}

  class Examples(list):
    built = 16
  plan = stages_lib.Plan(
      name="firstp", regime="firstp", state=lambda: trainer.init(0),
      step_fn=step_fn, examples=Examples(examples),
      features={n: Feature(batch[n].shape[1:], batch[n].dtype)
                for n in names},
      batch_sharding=trainer.batch_sharding,
      evaluate=lambda params: {"firstp": 0.0},
      budgets=(lambda: (TokenBudget(64),)) if unpadded else None)
  stages_lib.Stages(config, Workdir(tmp_path)).train(
      plan, like=trainer.init(0).params)
  (mask, budget), = seen
  assert budget == (TokenBudget(64) if unpadded else None)
  np.testing.assert_array_equal(
      mask, batch["attention_mask"][token_budget.micro_batch_order(
          batch["attention_mask"], 4, 1, 16)])


def test_units_follow_micro_batches_and_shards():
  """Example e is in micro-batch e % k; each micro-batch's examples are cut
  into contiguous shard blocks (`steps.micro_batches`, the batch sharding)."""
  units = token_budget.unit_of_examples(16, 2, 4)
  micro = steps.micro_batches({"e": jnp.arange(16)}, 2, None)["e"]
  for j in range(2):
    for shard, block in enumerate(np.split(np.asarray(micro[j]), 4)):
      assert set(units[block]) == {j * 4 + shard}


def test_train_step_rejects_indivisible_accumulation():
  with pytest.raises(ValueError, match="accumulation_steps"):
    steps.micro_batches({k: jnp.zeros((6, 2)) for k in steps.TRAIN_KEYS},
                        4, None)


def test_in_batch_negatives_of_a_bi_encoder():
  """Every query against every segment of the batch: its own group keeps
  its labels, other queries' documents are negatives, a repeated query's
  documents, the query's own positive document in another group and padding
  are left out; equal to a hand-built softmax CE."""
  from best_jax.models.bi_encoder import BiEncoderRanker  # pylint: disable=g-import-not-at-top
  model = BiEncoderRanker(BertConfig.tiny(hidden_dropout=0.0,
                                          attention_dropout=0.0),
                          rngs=nnx.Rngs(0))
  batch = synthetic_batch(4, batch_size=4, group_size=2, length=12,
                          vocab_size=128)
  rng = np.random.default_rng(0)
  query_ids = rng.integers(5, 128, (4, 6)).astype(np.int32)
  query_ids[3] = query_ids[2]              # the same query twice
  batch.update(query_ids=query_ids, query_mask=np.ones((4, 6), bool))
  batch["mask"][1, 1] = False              # a padded negative
  batch["example_mask"][0] = False         # a padded example
  # Query 1's positive document is also query 3's negative: not a negative
  # of query 1.
  batch["doc_ids"] = np.asarray([[10, 11], [12, 13], [14, 15], [16, 12]],
                                np.int32)
  loss_sum, count = steps.group_loss_sum(
      model, batch, losses.softmax_cross_entropy, None,
      in_batch_negatives=True)
  q = np.asarray(model.embed(query_ids, batch["query_mask"]))
  s = np.asarray(model.embed(batch["input_ids"], batch["attention_mask"],
                             batch["token_type_ids"])).reshape(8, -1)
  scores = 20.0 * q @ s.T                  # [4 queries, 8 segments]
  real = batch["mask"].reshape(-1) & np.repeat(batch["example_mask"], 2)
  want, groups = 0.0, 0
  for b in range(1, 4):                    # example 0 is padding
    keep = real.copy()
    other = 5 - b if b in (2, 3) else None  # the repeated query's group
    if other is not None:
      keep[2 * other:2 * other + 2] = False
    if b == 1:
      keep[7] = False
    logits = scores[b][keep]
    positive = list(np.nonzero(keep)[0]).index(2 * b)
    want += -(logits[positive] - np.log(np.exp(logits).sum()))
    groups += 1
  assert int(count) == groups
  np.testing.assert_allclose(float(loss_sum), want, rtol=2e-5)


def test_the_budget_encodes_the_sampled_batches_in_the_fewest_tokens():
  """Four batches of two one-row examples (one unit of 2 × 128 slots):
  T = 128 fits three of them, the fourth (220 tokens) then runs padded at
  256: 3 · 128 + 256 = 640 < 4 · 256 (T = 256 would cost 1024), and no
  second size saves anything."""
  def batch(*lengths):
    return [{"attention_mask": np.arange(128) < n} for n in lengths]
  batches = [batch(60, 60), batch(50, 70), batch(64, 64), batch(120, 100)]
  assert _chosen(batches, steps=1, shards=1) == (128,)
  # Two units per batch (2 shards), one example each: the largest units
  # (60, 70, 64, 120) fit 64 twice: 64 + 128 + 64 + 128 < 4 · 128 (a second
  # size, 128, is the padded rows' size and saves nothing).
  assert _chosen(batches, steps=1, shards=2) == (64,)
  # Two micro-batches: the same units.
  assert _chosen(batches, steps=2, shards=1) == (64,)
  # Rows with little padding are left padded (saving < 5%).
  full = [batch(127, 128)] * 4
  assert _chosen(full, steps=1, shards=1) is None


def test_a_second_budget_only_when_it_saves_enough():
  """Units of 120, 124, 180 and 250 tokens (one unit of 2 × 128 slots):
  128 alone costs 128 + 128 + 256 + 256 (padded) = 768; 128 and 192 cost
  704, 8.3% less, so both are compiled, but not when a second size must
  save 10%, nor with one size allowed."""
  def batch(*lengths):
    return [{"attention_mask": np.arange(128) < n} for n in lengths]
  batches = [batch(60, 60), batch(62, 62), batch(90, 90), batch(125, 125)]
  assert _chosen(batches, steps=1, shards=1) == (128, 192)
  with mock.patch.object(token_budget, "MIN_SAVING", 0.1):
    assert _chosen(batches, steps=1, shards=1) == (128,)
  assert _chosen(batches, steps=1, shards=1, max_budgets=1) == (128,)


def test_unpadded_steps_run_the_smallest_budget_that_fits():
  """Each batch runs at the smallest size its largest unit fits, or padded
  (budget None) when it fits none; the counts say how many ran at each."""
  seen = []

  def step_fn(state, batch, budget):
    del batch
    seen.append(budget and budget.tokens)
    return state, {}

  step = token_budget.UnpaddedSteps(
      step_fn, (TokenBudget(192), TokenBudget(128)), steps=1, shards=1)
  for need in (100, 128, 129, 192, 193):
    mask = jnp.asarray(np.arange(2 * 128).reshape(2, 128) < need)
    _, metrics = step(None, {"attention_mask": mask})
    assert metrics["unpadded"] == (need <= 192)
  assert seen == [128, 128, 192, 192, None]
  assert step.steps_at == {128: 2, 192: 2} and step.padded == 1
  assert step.unpadded == 4


def test_a_larger_budget_never_holds_fewer_rows():
  """The budgets of one step nest: whatever fits a smaller budget's groups
  fits every larger one's, which `choose_budgets` builds (each holds the
  smaller's rows) and `UnpaddedSteps` checks, since it runs the first that
  fits. Batches of 32 rows: the more tokens, the more long rows."""
  rng = np.random.default_rng(0)
  batches = [[{"attention_mask": np.arange(64) < n}
              for n in np.where(rng.random(32) < share, 60,
                                rng.integers(5, 40, 32))]
             for share in rng.random(24) * 0.5]
  budgets = token_budget.choose_budgets(batches, steps=1, shards=1,
                                        attention_groups=3,
                                        attention_weight=0.01)
  assert len(budgets) > 1 and len({b.rows for b in budgets}) > 1
  for smaller, larger in zip(budgets, budgets[1:]):
    assert larger.tokens > smaller.tokens
    assert token_budget.holds_rows(larger.rows, smaller.rows)
  # Every sampled batch fits a budget: its own or a larger one.
  units = np.zeros(32, int)
  for batch in batches:
    mask = np.stack([e["attention_mask"] for e in batch])
    assert token_budget.smallest_budget(
        token_budget.largest_unit(mask, units),
        token_budget.rows_above(mask, units), budgets) < len(budgets)
  assert token_budget.holds_rows((0, 3, 2), (1, 2, 2))
  assert not token_budget.holds_rows((2, 3, 1), (0, 3, 2))
  assert token_budget.holds_rows((), (0, 3, 2))
  assert not token_budget.holds_rows((0, 0, 32), ())
  with pytest.raises(ValueError, match="never fit less"):
    token_budget.UnpaddedSteps(
        lambda *a: None, (TokenBudget(64, (0, 3, 2)),
                          TokenBudget(128, (2, 3, 1))), steps=1, shards=1)


def _budgets(batches, **units):
  """`choose_budgets` counting tokens only (`attention_weight` 0)."""
  return token_budget.choose_budgets(batches, attention_weight=0.0, **units)


def _chosen(batches, **units):
  """The stream sizes of `_budgets` (None for none)."""
  return tuple(b.tokens for b in _budgets(batches, **units)) or None


MINILM = token_budget.attention_weight_of(
    BertConfig(hidden_size=384, num_heads=12, intermediate_size=1536))


def _long_rows(*counts):
  """Batches of one unit of 32 rows of 64 tokens: `count` rows of 60
  tokens, the others of 10."""
  return [[{"attention_mask": np.arange(64) < n}
           for n in [10] * (32 - count) + [60] * count] for count in counts]


def test_attention_groups_hold_the_sampled_rows_and_a_row_of_slack():
  """Units of 32 rows of 64 tokens: each budget's groups (rows up to 8, 16,
  …, 64 tokens) take the most rows its sampled batches had above each
  group's shorter neighbour, plus one row (`ROW_SLACK`): the batch with one
  long row (370 tokens) gets a budget of 384 tokens and 2 long rows, those
  with two (420) one of 448 and 3; a batch with more long rows than that
  runs padded. One group allowed: every row at full length."""
  budgets = token_budget.choose_budgets(
      _long_rows(2, 2, 1, 2), steps=1, shards=1, attention_groups=2,
      attention_weight=MINILM)
  assert budgets == (TokenBudget(384, (0, 30, 0, 0, 0, 0, 0, 2)),
                     TokenBudget(448, (0, 29, 0, 0, 0, 0, 0, 3)))
  assert token_budget.choose_budgets(
      _long_rows(2, 2, 1, 2), steps=1, shards=1, attention_groups=1,
      attention_weight=MINILM)[0].rows == ()
  units = token_budget.unit_of_examples(32, 1, 1)
  for count, fits in ((3, True), (4, False)):
    [batch] = _long_rows(count)
    above = token_budget.rows_above(
        np.stack([e["attention_mask"] for e in batch]), units)
    assert token_budget.fits_rows(above, budgets[-1].rows) == fits
  mask = jnp.asarray(np.arange(64) < np.asarray([10] * 28 + [60] * 4)[:, None])
  assert token_budget.batch_fit(mask, budgets, 1, 1) == len(budgets)


def test_the_budgets_are_chosen_from_batches_spread_over_the_schedule():
  """`SAMPLE_BATCHES` batches from the first to the last, all of a shorter
  schedule; each built whole from the schedule's groups, and not counted as
  a training example built."""
  sample = token_budget.sample_batches(1000)
  assert len(sample) == token_budget.SAMPLE_BATCHES
  assert sample[0] == 0 and sample[-1] == 999
  assert np.all(np.diff(sample) >= 7)
  np.testing.assert_array_equal(token_budget.sample_batches(50),
                                np.arange(50))
  examples = GroupExamples([["a", "b"], ["c", "d"], ["e"]],
                           lambda index, group: (index, group))
  assert list(examples.batches([2, 0], 2)) == [[(4, "e")],
                                                [(0, "a"), (1, "b")]]
  assert examples.built == 0


def test_attention_is_weighed_against_the_dense_layers():
  """MiniLM-L6's attention costs 4 · 384 per row and squared length
  against 2 · (4 · 384² + 2 · 384 · 1,536) per token; rows of 58 of 64
  tokens, all in the longest length group, save 9.4% of the tokens but,
  when attention costs a token per squared length, 0.1% of the FLOPs, and
  get no budget."""
  assert MINILM == pytest.approx(1 / 2304)
  batches = [[{"attention_mask": np.arange(64) < 58}] * 32] * 4
  assert _chosen(batches, steps=1, shards=1) == (1856,)
  assert token_budget.choose_budgets(batches, steps=1, shards=1,
                                     attention_groups=3,
                                     attention_weight=1.0) == ()


def test_a_third_size_only_when_it_saves_enough():
  """Units of 128, 256 and 384 tokens (one unit of 2 × 256 slots, 1,536
  padded): 256 alone costs 1,024 (the largest unit padded), two sizes 896,
  all three 768, each 1% less than fewer, so three are compiled; when a
  size must save 30%, only the one; with two allowed, two."""
  def batch(length):
    return [{"attention_mask": np.arange(256) < length}] * 2
  batches = [batch(60), batch(120), batch(190)]
  assert _chosen(batches, steps=1, shards=1) == (128, 256, 384)
  with mock.patch.object(token_budget, "MIN_SAVING", 0.3):
    assert _chosen(batches, steps=1, shards=1) == (256,)
  assert len(_chosen(batches, steps=1, shards=1, max_budgets=2)) == 2
  # Two sizes tried of the three: the smallest and the largest.
  with mock.patch.object(token_budget, "CANDIDATE_SIZES", 2):
    assert _chosen(batches, steps=1, shards=1) == (128, 384)


def test_fewer_attention_groups_take_the_cheapest_lengths():
  """32 rows: 6 up to 1/8 of the length, 8 up to each of 2/8 … 4/8, 2
  longer (the most rows above each group's shorter neighbour): with eight
  groups each holds its rows; with two, the rows up to 4/8 share one group
  (30 · 4² + 2 · 8² attended, less than any other split)."""
  above = np.asarray([32, 26, 18, 10, 2, 2, 2, 2])
  assert token_budget.group_rows(above, 8) == (6, 8, 8, 8, 0, 0, 0, 2)
  assert token_budget.group_rows(above, 2) == (0, 0, 0, 30, 0, 0, 0, 2)
  assert token_budget.group_rows(above, 1) == (0, 0, 0, 0, 0, 0, 0, 32)


def test_two_budgets_can_pass_where_neither_alone_saves_enough():
  """Nineteen batches need 3,904 of a unit's 4,096 slots and one needs
  2,048: 2,048 alone saves 2.5%, 3,904 alone 4.7% (both under the 5%
  that unpadding must save), the two together 7.0%."""
  def batch(length):
    return [{"attention_mask": np.arange(2048) < length}] * 2
  batches = [batch(1952)] * 19 + [batch(1024)]
  assert _chosen(batches, steps=1, shards=1) == (2048, 3904)
  assert _chosen(batches, steps=1, shards=1, max_budgets=1) is None


def test_the_largest_budget_bounds_every_budget_a_run_chooses():
  # `best_jax aot` compiles the unpadded steps at `largest_budget`.
  steps, shards, length = 2, 2, 50  # units of 3 examples, 6 rows, 300 tokens
  bound = token_budget.largest_budget(2 * length, 12, steps=steps,
                                      shards=shards)
  assert bound == TokenBudget(300)
  # The bound is a unit of full rows, as the run counts units.
  full = np.ones((12, 2, length), bool)
  assert token_budget.largest_unit(full, token_budget.unit_of_examples(
      12, steps, shards)) == bound.tokens
  rng = np.random.default_rng(0)
  for long in (0.2, 0.5, 0.7):  # The share of rows at full length.
    batches = []
    for _ in range(16):
      lengths = np.where(rng.random((12, 2)) < long, length,
                         rng.integers(1, length // 2, (12, 2)))
      batches.append([{"attention_mask": np.arange(length) < n[:, None]}
                      for n in lengths])
    # 300 is not a multiple of 64: sizes are rounded up to 320 and cut
    # back to 300, however much the attention groups save (with attention
    # that dear, the longer rows may leave too little to save: no budget).
    for weight in (MINILM, 0.2, 1.0):
      budgets = token_budget.choose_budgets(
          batches, steps=steps, shards=shards, attention_groups=3,
          attention_weight=weight)
      assert budgets or weight > MINILM
      for budget in budgets:
        assert budget.tokens <= bound.tokens
        assert sum(budget.rows) <= 6
  # Units of 262 tokens (four rows of 50, two of 31) round up to 320; when
  # attention is dear, the row in the 32-token group saves more than the 20
  # tokens over the bound, but the size stays the bound's 300.
  lengths = np.asarray([[50, 50], [50, 50], [31, 31]])
  batch = [{"attention_mask": np.arange(length) < n[:, None]} for n in lengths]
  [budget] = token_budget.choose_budgets(
      [batch] * 4, steps=1, shards=1, attention_groups=3,
      attention_weight=0.2)
  assert budget == TokenBudget(300, (0, 0, 0, 0, 1, 0, 0, 5))
