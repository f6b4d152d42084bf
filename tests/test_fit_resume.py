"""`train.loop.fit` resumed from a save between two logs writes the same
history as an uninterrupted run (the metrics since the last log are kept)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from best_jax.train.checkpoint import Checkpointer
from best_jax.train.loop import fit
from best_jax.train.state import TrainState


class Batches:
  """An endless input pipeline of 3-vectors with a checkpointable position."""

  def __init__(self):
    self.position = 0

  def __next__(self):
    self.position += 1
    return jnp.full((3,), np.sin(self.position), jnp.float32)

  def get_state(self):
    return [self.position]

  def set_state(self, state):
    self.position = int(state[0])


@jax.jit
def step_fn(state, batch):
  w = state.params["w"] + 0.1 * batch
  loss = jnp.sum(w * w) / 7.0
  return state.replace(step=state.step + 1, params={"w": w}), {
      "loss": loss, "grad_norm": jnp.sqrt(loss)}


def _state():
  return TrainState(step=jnp.int32(0), params={"w": jnp.arange(3.0) / 3},
                    opt_state=(), rng=jax.random.key_data(jax.random.key(0)),
                    nonfinite_step=jnp.int32(-1))


def _fit(directory, step_fn, num_steps=7):
  with Checkpointer(directory, max_to_keep=2) as checkpointer:
    return fit("toy", _state(), step_fn, Batches(), num_steps=num_steps,
               evaluate=lambda params: {"max": float(params["w"][0])},
               eval_every=7, log_every=4, checkpoint_every=3,
               checkpointer=checkpointer, log=lambda line: None)


def test_resume_between_logs_keeps_the_pending_metrics(tmp_path):
  whole = _fit(tmp_path / "whole", step_fn)

  calls = []

  def dies_in_step_6(state, batch):
    calls.append(1)
    if len(calls) == 6:
      raise KeyboardInterrupt
    return step_fn(state, batch)
  with pytest.raises(KeyboardInterrupt):
    _fit(tmp_path / "cut", dies_in_step_6)
  resumed = _fit(tmp_path / "cut", step_fn)

  # Resumed from the save at step 3: the log at step 4 still averages the
  # losses of steps 1-4, as the uninterrupted run's does.
  assert [h["step"] for h in resumed.history] == [4, 7, 7]
  assert resumed.history == whole.history
