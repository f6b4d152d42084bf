"""Checkpoints: resumed runs equal uninterrupted ones bitwise (also after
SIGKILL), non-finite losses stop training, dropout keys follow the step."""

import os
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from best_jax.models.bert import BertConfig
from best_jax.models.ranker import CrossEncoderRanker
from best_jax.train import checkpoint
from best_jax.train import loop
from best_jax.train import sharding
from best_jax.train import synthetic
from best_jax.train import trainer as trainer_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def config():
  config = synthetic.load_config(synthetic.default_config_path())
  config.train.loss = "sigmoid_cross_entropy"
  config.train.group_size = 3
  return config


@pytest.fixture(scope="module")
def trainer(config):
  model_config = BertConfig.tiny(num_layers=1, **config.model)
  mesh = sharding.make_mesh((2, 1), ("data", "model"), jax.devices()[:2])
  return trainer_lib.build_trainer(
      lambda rngs: CrossEncoderRanker(model_config, rngs=rngs), config, mesh)


def _batches(config, nan_at=None):
  def batch_fn(index):
    batch = synthetic.synthetic_batch(
        index, batch_size=config.train.batch_size,
        group_size=config.train.group_size, length=config.train.length,
        vocab_size=128)
    if index == nan_at:
      batch["labels"][0, 0] = np.nan
    return batch
  return loop.IndexedBatches(batch_fn)


def _fit(trainer, config, directory, **kwargs):
  with checkpoint.Checkpointer(directory, max_to_keep=3) as ckpt:
    return loop.fit(trainer, _batches(config, kwargs.pop("nan_at", None)),
                    config=config, checkpointer=ckpt, log_every=2, **kwargs)


def _host(params):
  return [np.asarray(x) for x in jax.device_get(jax.tree.leaves(params))]


def _assert_bitwise_equal(params_a, params_b):
  for a, b in zip(_host(params_a), _host(params_b)):
    np.testing.assert_array_equal(a, b)


def test_resume_is_bitwise_equal(trainer, config, tmp_path):
  full = _fit(trainer, config, tmp_path / "full", num_steps=12,
              checkpoint_every=4)
  assert full.step == 12 and not full.preempted

  part = _fit(trainer, config, tmp_path / "part", num_steps=12,
              checkpoint_every=4, stop_after=6)
  assert part.step == 6 and part.preempted
  with checkpoint.Checkpointer(tmp_path / "part") as ckpt:
    assert ckpt.all_steps() == [4, 6]
    state, saved_config, position = ckpt.restore(trainer.abstract_state)
  assert int(state.step) == 6 and position == 6
  assert saved_config["train"]["loss"] == "sigmoid_cross_entropy"
  _assert_bitwise_equal(state.params, part.state.params)

  resumed = _fit(trainer, config, tmp_path / "part", num_steps=12,
                 checkpoint_every=4)
  assert resumed.start_step == 6 and resumed.step == 12
  _assert_bitwise_equal(resumed.state.params, full.state.params)
  _assert_bitwise_equal(resumed.state.opt_state, full.state.opt_state)
  # The same batches were consumed: the logged losses agree bitwise.
  assert resumed.history == [e for e in full.history if e["step"] > 6]


def test_nonfinite_loss_stops_and_keeps_the_last_good_checkpoint(
    trainer, config, tmp_path):
  with pytest.raises(loop.NonFiniteLossError,
                     match=r"training step 7 .*latest checkpoint is step 6"):
    # Batch index 6 (step 7) has a NaN label; logs at 5, saves at 3, 6, 9.
    _fit(trainer, config, tmp_path, num_steps=12, checkpoint_every=3,
         nan_at=6)
  with checkpoint.Checkpointer(tmp_path) as ckpt:
    assert ckpt.latest_step() == 6
    state, _, position = ckpt.restore(trainer.abstract_state)
  assert int(state.step) == 6 and position == 6
  assert int(state.nonfinite_step) == -1
  assert all(np.all(np.isfinite(x)) for x in _host(state.params))


def test_sigterm_saves_and_stops(trainer, config, tmp_path):
  def log_fn(entry):
    if entry["step"] == 4:
      os.kill(os.getpid(), signal.SIGTERM)  # Caught by fit while training.

  result = _fit(trainer, config, tmp_path, num_steps=12, checkpoint_every=0,
                log_fn=log_fn)
  assert result.preempted and result.step == 4
  with checkpoint.Checkpointer(tmp_path) as ckpt:
    assert ckpt.all_steps() == [4]
  assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_dropout_keys_fold_in_the_step(trainer, config):
  batch = trainer.put(_batches(config)._batch_fn(0))
  state = trainer.init(0)
  copy = jax.tree.map(jnp.copy, state)
  initial = _host(state.params)
  state, first = trainer.train_step(state, batch)
  copy, again = trainer.train_step(copy, batch)
  assert float(first["loss"]) == float(again["loss"])  # Same step, same key.
  # Warm-up: the first update has learning rate 0 and leaves params alone.
  assert float(first["learning_rate"]) == 0.0
  _assert_bitwise_equal(state.params, initial)
  _, second = trainer.train_step(state, batch)
  assert float(second["loss"]) != float(first["loss"])  # Next step's key.
  scores = trainer.score(copy.params, _batches(config)._batch_fn(0))
  np.testing.assert_array_equal(
      scores, trainer.score(copy.params, _batches(config)._batch_fn(0)))


def _run_synthetic(workdir, cache, steps, *extra, wait=True):
  command = [sys.executable, "-m", "best_jax.train.synthetic",
             "--workdir", str(workdir), "--steps", str(steps),
             "--checkpoint_every", "4", "--devices", "2",
             "--compilation_cache", str(cache), *extra]
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  process = subprocess.Popen(command, cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
  if wait:
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    return output
  return process


def test_sigkill_mid_training_then_resume_is_bitwise_equal(tmp_path):
  cache = tmp_path / "jax_cache"
  steps = 16
  _run_synthetic(tmp_path / "full", cache, steps, "--params_out",
                 tmp_path / "full.npz")

  killed_dir = tmp_path / "killed"
  process = _run_synthetic(killed_dir, cache, steps, "--step_delay", "0.25",
                           wait=False)
  deadline = time.time() + 240
  while not (killed_dir / "4").is_dir():
    assert process.poll() is None, process.communicate()[0]
    assert time.time() < deadline, "no checkpoint appeared"
    time.sleep(0.05)
  time.sleep(0.6)  # Into the next steps (maybe mid-save).
  os.kill(process.pid, signal.SIGKILL)
  process.wait()
  assert process.returncode == -signal.SIGKILL
  with checkpoint.Checkpointer(killed_dir) as ckpt:
    latest = ckpt.latest_step()
  print(f"\nkilled with SIGKILL; newest complete checkpoint: step {latest}")
  assert latest is not None and 4 <= latest < steps

  output = _run_synthetic(killed_dir, cache, steps, "--params_out",
                          tmp_path / "resumed.npz")
  assert f"start_step={latest}" in output  # Resumed, not restarted.
  full, resumed = np.load(tmp_path / "full.npz"), np.load(
      tmp_path / "resumed.npz")
  assert sorted(full.files) == sorted(resumed.files) and full.files
  for name in full.files:
    np.testing.assert_array_equal(resumed[name], full[name], err_msg=name)
