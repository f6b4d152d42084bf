"""Fakes for tests (T5X's test_utils style): the tiny config, generated
batches with a learnable signal, a direct (unchunked) scoring call, the
environment of a `best_jax` subprocess on fake CPU devices, and the tiny
experiment that the fault and multi-process tests run on the real command."""

import os
import subprocess
import sys

import jax
import numpy as np
from flax import nnx

from best_jax.config import load_config
from best_jax.train.steps import MODEL_INPUTS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "configs", "tiny_cpu.py")
MARKER_TOKEN = 7


def cpu_subprocess_env(devices: int) -> dict[str, str]:
  """This process's environment for a child on `devices` fake CPU devices,
  keeping the XLA flags conftest set (optimisation level 0, classic fusion
  emitters)."""
  env = dict(os.environ)
  env.pop("JAX_NUM_CPU_DEVICES", None)
  env["JAX_PLATFORMS"] = "cpu"
  env["XLA_FLAGS"] = " ".join(filter(None, [
      env.get("XLA_FLAGS"),
      f"--xla_force_host_platform_device_count={devices}"]))
  return env


def tiny_config():
  """configs/tiny_cpu.py, unlocked for tests to adjust."""
  config = load_config(TINY)
  config.unlock()
  return config


def synthetic_batch(index: int, *, batch_size: int, group_size: int,
                    length: int, vocab_size: int, seed: int = 0
                    ) -> dict[str, np.ndarray]:
  """A deterministic batch of `group_size` items per example; item 0 is the
  positive (label 1, contains MARKER_TOKEN), the rest negatives."""
  rng = np.random.default_rng([seed, index])
  shape = (batch_size, group_size, length)
  input_ids = rng.integers(10, vocab_size, shape).astype(np.int32)
  input_ids[..., 0] = 2  # A [CLS]-like first token.
  input_ids[:, 0, 1 + rng.integers(0, length - 1)] = MARKER_TOKEN
  lengths = rng.integers(length // 2, length + 1, (batch_size, group_size))
  attention_mask = np.arange(length) < lengths[..., None]
  token_type_ids = (np.arange(length) >= length // 4).astype(np.int32)
  labels = np.zeros((batch_size, group_size), np.float32)
  labels[:, 0] = 1.0
  return dict(
      input_ids=input_ids, attention_mask=attention_mask,
      token_type_ids=np.broadcast_to(token_type_ids, shape).copy(),
      labels=labels, mask=np.ones((batch_size, group_size), bool),
      example_mask=np.ones(batch_size, bool))


# A tiny FirstP + MaxP + BeST (iterations 1-2) experiment: `best_jax train`
# arguments without the workdir. test_faults interrupts it and
# test_multiprocess splits it over two processes; both compare their run
# files with one uninterrupted single-process run (`tiny_experiment` in
# conftest) on TINY_DEVICES devices: 4, not the 8 of in-process tests, since
# each device costs compile and run time in every one of these subprocesses
# (a warm run: 30 s on 4 devices, 41 s on 8). Two micro-batches per step,
# so that the balance of each data shard's examples over them
# (`token_budget.balance_micro_batches`) is on the path those tests check:
# the same run files after a kill, and on 2 processes × 2 devices; up to
# three stream sizes per stage (`train.max_budgets`; the tiny config's one
# saves compiling elsewhere), so that the processes agree on each batch's
# size (`UnpaddedSteps.agreed_fit`) and a resumed stage chooses the sizes
# again.
TINY_EXPERIMENT = ["train", "--config", "configs/tiny_cpu.py",
                   "--config.train.accumulation_steps=2",
                   "--config.train.max_budgets=3",
                   "--config.regimes=['firstp','maxp','best']",
                   "--config.best.max_iterations=2",
                   "--config.birch.enabled=False",
                   "--config.train.num_steps=4", "--config.train.eval_every=2",
                   "--config.train.patience=0", "--config.data.num_queries=32",
                   "--config.data.num_docs=24"]
TINY_DEVICES = 4  # Even: test_multiprocess splits them over two processes.


def run_tiny_experiment(workdir: str, timeout_s: int = 600,
                        launcher: tuple[str, ...] = ("-m", "best_jax")
                        ) -> subprocess.CompletedProcess:
  """`python LAUNCHER TINY_EXPERIMENT --workdir workdir` on TINY_DEVICES (the
  launcher: `-m best_jax`, or a script that runs it, e.g. with a fault)."""
  return subprocess.run(
      [sys.executable, *launcher] + TINY_EXPERIMENT
      + ["--workdir", workdir], env=cpu_subprocess_env(TINY_DEVICES),
      cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
      check=False)


def direct_scores(graphdef: nnx.GraphDef, params, batch) -> np.ndarray:
  """The model's scores of a host batch `[..., L]`, one jitted call on the
  default device, without dropout: the reference for chunked scorers."""
  inputs = [np.asarray(batch[name]) for name in MODEL_INPUTS]
  params = jax.device_get(params)

  @jax.jit
  def score(params, *inputs):
    return nnx.merge(graphdef, params)(*inputs)
  return np.asarray(score(params, *inputs))
