"""The training state pytree and its shape/sharding-first creation.

`TrainState` holds everything a resumed run needs besides the data position:
parameters (an `nnx.State` of `nnx.Param`s), optimizer state, the number of
updates applied, the root RNG key, and `nonfinite_step` (-1, or the step at
which the loss became non-finite; from then on the state stops changing).

Creation never materialises parameters on one device: `nnx.eval_shape` gives
shapes and logical axes, the rules give shardings, and a jitted init with
`out_shardings` creates every array in place.
"""

from __future__ import annotations

from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from best_jax.train import sharding as sharding_lib

ModelFn = Callable[[nnx.Rngs], nnx.Module]


@flax.struct.dataclass
class TrainState:
  """What a train step reads and returns (all device arrays)."""
  step: jax.Array            # int32 [], updates applied so far.
  params: nnx.State          # The model's nnx.Param variables.
  opt_state: optax.OptState
  rng: jax.Array             # uint32 key data of the root key.
  nonfinite_step: jax.Array  # int32 [], -1 or the first non-finite step.

  def root_key(self) -> jax.Array:
    return jax.random.wrap_key_data(self.rng)


def split_params(model: nnx.Module) -> tuple[nnx.GraphDef, nnx.State]:
  """(graphdef, params); the model must hold nothing but nnx.Params."""
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  if jax.tree.leaves(rest):
    raise ValueError("the model holds non-parameter state, which train steps "
                     f"do not carry: {rest}")
  return graphdef, params


def abstract_params(model_fn: ModelFn) -> tuple[nnx.GraphDef, nnx.State]:
  """(graphdef, params of ShapeDtypeStructs) without allocating anything."""
  return split_params(nnx.eval_shape(lambda: model_fn(nnx.Rngs(0))))


def init_state(params: nnx.State, tx: optax.GradientTransformation,
               seed: int | jax.Array) -> TrainState:
  """A fresh TrainState around `params` (traceable: used inside jit).

  The root key for dropout is the second half of `split(key(seed))`; the
  first half initialises parameters (see `trainer.build_trainer`).
  """
  return TrainState(
      step=jnp.zeros((), jnp.int32),
      params=params,
      opt_state=tx.init(params),
      rng=jax.random.key_data(jax.random.split(jax.random.key(seed))[1]),
      nonfinite_step=jnp.full((), -1, jnp.int32))


def state_shardings(tx: optax.GradientTransformation,
                    abstract_state: TrainState, param_shardings: Any,
                    mesh: jax.sharding.Mesh) -> TrainState:
  """Shardings for a TrainState: optimizer moments follow their parameters.

  Every parameter-shaped tree in the optimizer state (AdamW's mu and nu) takes
  the parameters' shardings; the rest (counts) is replicated.
  """
  replicated = sharding_lib.replicated(mesh)
  opt_shardings = optax.tree_map_params(
      tx, lambda _, sharding: sharding, abstract_state.opt_state,
      param_shardings, transform_non_params=lambda _: replicated,
      is_leaf=lambda x: isinstance(x, nnx.Variable))
  return TrainState(step=replicated, params=param_shardings,
                    opt_state=opt_shardings, rng=replicated,
                    nonfinite_step=replicated)


@jax.jit
def _leaf_sums(params) -> jax.Array:
  return jnp.stack([jnp.sum(x.astype(jnp.float32))
                    for x in jax.tree.leaves(params)])


def params_digest(params: Any) -> list[float]:
  """A cheap identity of a model's parameters (the sum of every array), so
  that scores saved from other parameters are never reused."""
  return [float(v) for v in np.asarray(jax.device_get(_leaf_sums(params)))]
