"""The resumable checkpoint of `train.loop.fit` (`train.checkpoint`)."""

import jax
import jax.numpy as jnp
import numpy as np

from best_jax.train.checkpoint import Checkpointer


def test_a_save_before_the_first_evaluation_restores(tmp_path):
  """`checkpoint_every` below `eval_every` saves before any best model
  exists: the checkpoint has no best item and restores to `{}`."""
  state = {"w": jnp.arange(6.0).reshape(2, 3), "step": jnp.int32(1)}
  record = {"step": 1, "history": [], "since_best": 0, "best_dev": {},
            "best_step": {}, "positions": []}
  with Checkpointer(str(tmp_path / "c"), max_to_keep=1) as checkpointer:
    checkpointer.save(1, state=state, best={}, record=record, data=[3])
    checkpointer.wait_until_finished()
    like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(
        x.shape, x.dtype, sharding=x.sharding), state)
    restored, best, got, position = checkpointer.restore(like, {})
  np.testing.assert_array_equal(restored["w"], state["w"])
  assert (best, got, position) == ({}, record, [3])



def test_the_record_is_the_one_at_the_save_call(tmp_path):
  """The save is asynchronous; lists the caller appends to afterwards (the
  loop's history and positions) must not leak into the checkpoint."""
  state = {"w": jnp.arange(4.0)}
  history, positions = [{"step": 3, "loss": 0.5}], [1, 2]
  record = {"step": 3, "history": history, "positions": positions}
  data = [3]
  with Checkpointer(str(tmp_path / "c"), max_to_keep=1) as checkpointer:
    checkpointer.save(3, state=state, best={}, record=record, data=data)
    history.append({"step": 4, "loss": 0.25})
    positions.extend([7, 8])
    data.append(9)
    checkpointer.wait_until_finished()
    _, _, got, position = checkpointer.restore(
        jax.tree.map(lambda x: jax.ShapeDtypeStruct(
            x.shape, x.dtype, sharding=x.sharding), state), {})
  assert got == {"step": 3, "history": [{"step": 3, "loss": 0.5}],
                 "positions": [1, 2]}
  assert position == [3]
