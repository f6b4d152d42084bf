"""Pure jitted train and predict steps for the truncation models, and a loop.

`fit` trains on one set of lists and selects the parameters on another (the
validation lists, held out of the training queries): after each epoch it
evaluates the validation objective, keeps the best epoch's parameters and
stops after `patience` epochs without improvement or at `epochs`.

The train step is `(graphdef, state, batch, key) -> (state, loss)`, jitted once
per (model, loss) with the state donated. Batches have a fixed shape
`[batch_size, N, F]`: the last batch of an epoch is filled with fully masked
lists, which every loss ignores, so nothing recompiles.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from best_jax.truncate import features as features_lib
from best_jax.truncate import lists as lists_lib
from best_jax.truncate import losses, models, rewards

# loss name -> the model head it trains
LOSS_HEAD = {"raml": "positions", "mle": "positions", "reinforce": "positions",
             "expected": "positions", "bicut": "bicut", "recall_bins": "bins"}


def default_config() -> ml_collections.ConfigDict:
  """Hyper-parameters of one truncation model (AttnCut with RAML on F1)."""
  return ml_collections.ConfigDict(dict(
      model="attncut",     # attncut | bicut | choppy
      loss="raml",         # raml | mle | bicut | reinforce | expected | recall_bins
      metric="f1",         # f1 | dcg: the reward r_k
      tau=0.95,            # RAML temperature
      alpha=0.5,           # BiCut loss weight of non-relevant documents
      rl_samples=8,        # REINFORCE samples per list
      bins=5,              # recall bins of the recall-constraint model
      learning_rate=1e-3,
      batch_size=20,
      epochs=30,           # the most epochs (the same budget for every method)
      patience=5,          # stop after this many epochs without improvement
      valid_fraction=0.2,  # training queries held out for model selection
      dropout=0.2,
      seed=0,
      lstm_hidden=128,     # AttnCut/BiCut LSTM units per direction
      heads=4,             # AttnCut attention heads (d = 2 * lstm_hidden)
      choppy_position_dim=127,
      choppy_heads=8,
  ))


@dataclasses.dataclass(frozen=True)
class Arrays:
  """Host arrays of a set of lists: what a batch is cut from."""
  features_qnf: np.ndarray
  mask_qn: np.ndarray
  labels_qn: np.ndarray
  rewards_qn: np.ndarray
  recall_qn: np.ndarray

  def take(self, index_b: np.ndarray) -> dict[str, np.ndarray]:
    """Rows `index_b`; index −1 gives a fully masked (ignored) list."""
    safe = np.maximum(index_b, 0)
    batch = {f.name.replace("_q", "_b"): getattr(self, f.name)[safe]
             for f in dataclasses.fields(self)}
    batch["mask_bn"] = batch["mask_bn"] & (index_b >= 0)[:, None]
    return batch


def subset(ranked: lists_lib.RankedLists, features_qnf: np.ndarray,
           metric: str, qids: list[str]) -> Arrays:
  """`arrays` of the lists of `qids` (rows of `ranked` and `features_qnf`)."""
  index = {q: i for i, q in enumerate(ranked.qids)}
  rows = np.array([index[q] for q in qids], np.int64)
  return arrays(ranked.select(qids), metric, features_qnf[rows])


def arrays(ranked: lists_lib.RankedLists, metric: str,
           features_qnf: np.ndarray | None = None) -> Arrays:
  """Features (score-derived unless given), mask, labels, r_k and R@k."""
  if features_qnf is None:
    features_qnf = features_lib.score_features(ranked.scores_qn, ranked.mask_qn)
  return Arrays(
      features_qnf=np.asarray(features_qnf, np.float32),
      mask_qn=ranked.mask_qn, labels_qn=ranked.labels_qn,
      rewards_qn=np.asarray(rewards.at_all_k(metric, ranked.labels_qn,
                                             ranked.mask_qn)),
      recall_qn=np.asarray(rewards.recall_at_all_k(ranked.labels_qn,
                                                   ranked.mask_qn)))


def loss_value(model, batch, key, *, loss: str, tau: float, alpha: float,
               samples: int, bins: int):
  """The named loss of `model` on one batch (dropout on)."""
  dropout_key, sample_key = jax.random.split(key)
  logits = model(batch["features_bnf"], batch["mask_bn"], dropout_key)
  where = batch["mask_bn"]
  if loss == "raml":
    return losses.raml_loss(logits, batch["rewards_bn"], where=where, tau=tau)
  if loss == "mle":
    return losses.mle_loss(logits, batch["rewards_bn"], where=where)
  if loss == "expected":
    return losses.expected_reward_loss(logits, batch["rewards_bn"], where=where)
  if loss == "reinforce":
    return losses.reinforce_loss(logits, batch["rewards_bn"], where=where,
                                 key=sample_key, samples=samples)
  if loss == "bicut":
    return losses.bicut_loss(logits, batch["labels_bn"], where=where,
                             alpha=alpha)
  if loss == "recall_bins":
    return losses.recall_bin_loss(logits, batch["recall_bn"], where=where,
                                  bins=bins)
  raise ValueError(f"unknown truncation loss {loss!r}")


@functools.partial(
    jax.jit, static_argnames=("graphdef", "loss", "tau", "alpha", "samples",
                              "bins"), donate_argnames=("state",))
def train_step(graphdef, state, batch, key, *, loss: str, tau: float,
               alpha: float, samples: int, bins: int):
  """One Adam step on one batch; returns the new state and the loss."""
  model, optimizer = nnx.merge(graphdef, state)
  value, grads = nnx.value_and_grad(functools.partial(
      loss_value, loss=loss, tau=tau, alpha=alpha, samples=samples,
      bins=bins))(model, batch, key)
  optimizer.update(model, grads)
  return nnx.state((model, optimizer)), value


@functools.partial(jax.jit, static_argnames=("graphdef",))
def logits_step(graphdef, state, features_bnf, mask_bn):
  """The model's logits without dropout."""
  return nnx.merge(graphdef, state)(features_bnf, mask_bn)


def new_model(config: ml_collections.ConfigDict, in_features: int, depth: int):
  return models.build(config.model, in_features, depth, seed=config.seed,
                      head=LOSS_HEAD[config.loss], bins=config.bins,
                      dropout=config.dropout, lstm_hidden=config.lstm_hidden,
                      heads=config.heads,
                      choppy_position_dim=config.choppy_position_dim,
                      choppy_heads=config.choppy_heads)


def new_optimizer(config: ml_collections.ConfigDict, model) -> nnx.Optimizer:
  """Adam with global-norm clipping at 1."""
  return nnx.Optimizer(
      model, optax.chain(optax.clip_by_global_norm(1.0),
                         optax.adam(config.learning_rate)), wrt=nnx.Param)


@dataclasses.dataclass(frozen=True)
class History:
  """Per-epoch training losses and validation objectives; the chosen epoch."""
  losses: np.ndarray
  valid: np.ndarray
  best_epoch: int  # 1-based: the epoch whose parameters `fit` returned


def validation_objective(model, data: Arrays) -> float:
  """What model selection maximises on the validation lists.

  The mean reward (the metric of `data`: F1@k or DCG@k) at the predicted
  cut-offs; for the recall-bin model, which predicts no cut-off, minus its
  loss.
  """
  logits = predict_logits(model, data)
  if model.head == "bins":
    return -float(losses.recall_bin_loss(
        jnp.asarray(logits), data.recall_qn, where=data.mask_qn,
        bins=logits.shape[-1]))
  cutoffs = cutoffs_from_logits(logits, data.mask_qn, model.head)
  return float(np.mean(rewards.at_cutoff(data.rewards_qn, cutoffs)))


def fit(config: ml_collections.ConfigDict, data: Arrays, valid: Arrays,
        progress=None):
  """Trains on `data`, selects on `valid`; returns the model and a History.

  At most `config.epochs` epochs; the parameters returned are those after the
  epoch with the best `validation_objective` (the earliest on ties), and
  training stops `config.patience` epochs after it.
  """
  _, depth, in_features = data.features_qnf.shape
  model = new_model(config, in_features, depth)
  graphdef, state = nnx.split((model, new_optimizer(config, model)))
  order_rng = np.random.default_rng(config.seed)
  root_key = jax.random.key(config.seed)
  size = config.batch_size
  n = data.mask_qn.shape[0]
  steps_per_epoch = -(-n // size)
  epoch_losses, valid_values = [], []
  best_state, best_epoch = None, 0
  step = 0
  for epoch in range(1, config.epochs + 1):
    order = np.full(steps_per_epoch * size, -1)
    order[:n] = order_rng.permutation(n)
    step_losses = []
    for index_b in order.reshape(steps_per_epoch, size):
      batch = jax.device_put(data.take(index_b))
      state, value = train_step(
          graphdef, state, batch, jax.random.fold_in(root_key, step),
          loss=config.loss, tau=config.tau, alpha=config.alpha,
          samples=config.rl_samples, bins=config.bins)
      step_losses.append(value)
      step += 1
    epoch_losses.append(float(jnp.mean(jnp.stack(step_losses))))
    model, _ = nnx.merge(graphdef, state)
    valid_values.append(validation_objective(model, valid))
    if progress is not None:
      progress.update(1)
    if best_state is None or valid_values[-1] > valid_values[best_epoch - 1]:
      # The step donates `state`: keep a host copy of the best parameters.
      best_state, best_epoch = jax.device_get(nnx.state(model)), epoch
    elif epoch - best_epoch >= config.patience:
      break
  model, _ = nnx.merge(graphdef, state)
  nnx.update(model, best_state)
  return model, History(np.asarray(epoch_losses), np.asarray(valid_values),
                        best_epoch)


def predict_logits(model, data: Arrays, batch_size: int = 50) -> np.ndarray:
  """Logits of every list, in fixed-size batches (padded with masked lists)."""
  graphdef, state = nnx.split(model)
  n = data.mask_qn.shape[0]
  out = []
  for start in range(0, n, batch_size):
    index_b = np.arange(start, start + batch_size)
    index_b = np.where(index_b < n, index_b, -1)
    batch = data.take(index_b)
    out.append(logits_step(graphdef, state, batch["features_bnf"],
                           batch["mask_bn"]))
  return np.concatenate(jax.device_get(out))[:n]


def cutoffs_from_logits(logits, mask_bn, head: str) -> np.ndarray:
  """1-based cut-offs from logits of a model with `head`."""
  return np.asarray(models.cutoffs(jnp.asarray(logits), mask_bn, head))


def predict_cutoffs(model, data: Arrays) -> np.ndarray:
  """1-based cut-offs of every list."""
  return cutoffs_from_logits(predict_logits(model, data), data.mask_qn,
                             model.head)
