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

