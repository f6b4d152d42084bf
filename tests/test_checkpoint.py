"""The resumable checkpoint of `train.loop.fit` (`train.checkpoint`)."""

import jax
import jax.numpy as jnp
import numpy as np

from best_jax.train import checkpoint as checkpoint_lib
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


def test_only_large_replicated_arrays_are_saved_replica_parallel(
    tmp_path, monkeypatch):
  """Orbax would slice every replicated array once per replica (one eager
  device op each); below `MIN_REPLICA_SLICE_BYTES` a slice one replica
  writes the whole array, above it the replicas share it. Both restore."""
  slices = []
  slice_in_dim = jax.lax.slice_in_dim
  monkeypatch.setattr(jax.lax, "slice_in_dim",
                      lambda *a, **k: slices.append(1) or slice_in_dim(*a,
                                                                       **k))
  mesh = jax.make_mesh((8,), ("data",))
  replicated = jax.NamedSharding(mesh, jax.P())
  per_slice = checkpoint_lib.MIN_REPLICA_SLICE_BYTES // 4  # float32 values
  small = {"w": jax.device_put(jnp.ones((8, per_slice // 8)), replicated)}
  large = {"w": jax.device_put(jnp.ones((8, per_slice)), replicated)}
  for step, state in ((1, small), (2, large)):
    slices.clear()
    with Checkpointer(str(tmp_path / f"c{step}")) as checkpointer:
      checkpointer.save(step, state=state, best={}, record={}, data=[])
      checkpointer.wait_until_finished()
      restored, _, _, _ = checkpointer.restore(
          checkpoint_lib.abstract(state), {})
    np.testing.assert_array_equal(restored["w"], state["w"])
    assert len(slices) == (0 if state is small else 8), step


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
