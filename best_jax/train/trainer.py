"""Ties model, optimizer, mesh and steps together, jitting each step once.

  trainer = build_trainer(lambda rngs: CrossEncoderRanker(cfg, rngs=rngs),
                          config)
  state = trainer.init(config.seed)          # created sharded, never on host
  # or, from pretrained weights (same structure as model_fn's model):
  state = trainer.init_from_params(split_params(load_ranker(dir, rngs=…))[1],
                                   config.seed)
  state, metrics = trainer.train_step(state, trainer.put(batch))
  # rows encoded unpadded in a budget per unit (`train.token_budget`):
  state, metrics = trainer.train_step(state, trainer.put(batch),
                                      budget=TokenBudget(1024))

Scoring with the same model: `best_jax.select.selection.SegmentScorer`.

`config` needs `mesh`, `logical_axis_rules`, `optimizer` and `train.loss`
(`train.accumulation_steps` and `train.fixed_order_reduction` optional); see
configs/tiny_cpu.py.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping

import jax
import ml_collections
import numpy as np
import optax
from flax import nnx

from best_jax.train import losses as losses_lib
from best_jax.train import optimizer as optimizer_lib
from best_jax.train import sharding as sharding_lib
from best_jax.train import state as state_lib
from best_jax.train import steps as steps_lib
from best_jax.train.state import TrainState


@dataclasses.dataclass(frozen=True)
class Trainer:
  """Jitted functions and shardings for one model, optimizer and mesh."""
  mesh: jax.sharding.Mesh
  graphdef: nnx.GraphDef
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  abstract_state: TrainState   # ShapeDtypeStructs carrying their shardings.
  state_shardings: TrainState
  batch_sharding: jax.NamedSharding
  batch_multiple: int          # Global batch sizes must be multiples of it.
  fixed_order_reduction: bool  # `steps.loss_and_gradients(fixed_order=…)`
  param_shardings: Any         # NamedShardings, shaped like the params.
  init: Callable[[int], TrainState]
  train_step: Callable[..., tuple[TrainState, dict[str, jax.Array]]]
  # Wraps given parameters (e.g. `load_ranker`'s, pretrained) in a fresh
  # state; they are moved to their shardings first and never donated.
  init_from_params: Callable[[nnx.State, int], TrainState]

  def put(self, batch: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
    """Host batch → global arrays sharded over the batch mesh axis."""
    return sharding_lib.put_batch(batch, self.batch_sharding)

  def put_params(self, params: nnx.State) -> nnx.State:
    """Host (or differently placed) parameters → their shardings."""
    return jax.device_put(params, self.param_shardings)

  def abstract_params(self) -> nnx.State:
    """ShapeDtypeStructs (with shardings) of the parameters."""
    return self.abstract_state.params


def build_trainer(model_fn: state_lib.ModelFn,
                  config: ml_collections.ConfigDict,
                  mesh: jax.sharding.Mesh | None = None) -> Trainer:
  """Builds mesh, shardings and the jitted init and train functions.

  Args:
    model_fn: `rngs -> nnx.Module`, called under `nnx.eval_shape` and inside
      the jitted init (parameters are created sharded, never on the host).
    config: see the module docstring.
    mesh: overrides `config.mesh` (tests use it for 1-device meshes).
  """
  if mesh is None:
    mesh = sharding_lib.make_mesh(config.mesh.shape, config.mesh.axis_names)
  rules = tuple(tuple(rule) for rule in config.logical_axis_rules)
  tx, schedule = optimizer_lib.make_optimizer(config.optimizer)
  loss_fn = losses_lib.get_loss(config.train.loss)
  accumulation_steps = config.train.get("accumulation_steps", 1)
  fixed_order_reduction = config.train.get("fixed_order_reduction", False)

  graphdef, abstract_params = state_lib.abstract_params(model_fn)
  param_shardings = sharding_lib.param_shardings(abstract_params, mesh, rules)
  abstract_state = jax.eval_shape(
      functools.partial(state_lib.init_state, tx=tx, seed=0), abstract_params)
  shardings = state_lib.state_shardings(tx, abstract_state, param_shardings,
                                        mesh)
  abstract_state = jax.tree.map(
      lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                                  sharding=sharding),
      abstract_state, shardings)
  batch_sharding = sharding_lib.batch_sharding(mesh, rules)
  replicated = sharding_lib.replicated(mesh)

  def init(seed):
    params_key = jax.random.split(jax.random.key(seed))[0]
    model = model_fn(nnx.Rngs(params_key))
    _, params = state_lib.split_params(model)
    return state_lib.init_state(params, tx, seed)

  def init_from_params(params, seed):
    return state_lib.init_state(params, tx, seed)

  train_step = functools.partial(
      steps_lib.train_step, graphdef=graphdef, tx=tx, schedule=schedule,
      loss_fn=loss_fn, accumulation_steps=accumulation_steps,
      batch_sharding=batch_sharding,
      in_batch_negatives=config.train.get("in_batch_negatives", False),
      fixed_order=fixed_order_reduction)
  metrics_shardings = replicated

  with jax.set_mesh(mesh):
    jitted_init = jax.jit(init, out_shardings=shardings)
    jitted_from_params = jax.jit(
        init_from_params, in_shardings=(param_shardings, replicated),
        out_shardings=shardings)
    jitted_train = jax.jit(
        train_step, in_shardings=(shardings, batch_sharding),
        out_shardings=(shardings, metrics_shardings), donate_argnums=0,
        static_argnums=2)

  return Trainer(
      mesh=mesh, graphdef=graphdef, tx=tx, schedule=schedule,
      abstract_state=abstract_state, state_shardings=shardings,
      batch_sharding=batch_sharding,
      batch_multiple=sharding_lib.batch_multiple(mesh, rules),
      fixed_order_reduction=fixed_order_reduction,
      param_shardings=param_shardings,
      init=_under_mesh(mesh, jitted_init),
      train_step=_under_mesh(mesh, _budget_positional(jitted_train)),
      init_from_params=_place_then(mesh, param_shardings,
                                   jitted_from_params))


def _place_then(mesh: jax.sharding.Mesh, param_shardings: Any,
                fn: Callable[..., TrainState]):
  """Moves host or single-device params to their shardings, then calls."""
  def call(params, seed):
    params = jax.device_put(params, param_shardings)
    with jax.set_mesh(mesh):
      return fn(params, jax.device_put(np.int32(seed), replicated))
  replicated = jax.NamedSharding(mesh, jax.P())
  return call


def _budget_positional(fn: Callable[..., Any]):
  """`fn(state, batch, budget=None)` for a jitted step whose static
  `budget` must be passed by position (jit takes no keyword arguments with
  `in_shardings`)."""
  @functools.wraps(fn)
  def call(state, batch, budget=None):
    return fn(state, batch, budget)
  call.lower = lambda state, batch, budget=None: fn.lower(state, batch, budget)
  return call


def _under_mesh(mesh: jax.sharding.Mesh, fn: Callable[..., Any]):
  """Calls `fn` with `mesh` set (tracing and sharding constraints need it)."""
  @functools.wraps(fn)
  def call(*args, **kwargs):
    with jax.set_mesh(mesh):
      return fn(*args, **kwargs)
  call.lower = fn.lower
  return call
