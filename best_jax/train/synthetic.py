"""Trains the tiny ranker on synthetic batches: a smoke run and a test subject.

  python -m best_jax.train.synthetic --workdir /tmp/tiny_run --steps 20

uses configs/tiny_cpu.py, checkpoints into WORKDIR and resumes from it when
rerun; `--params_out FILE.npz` writes the final parameters (for bitwise
comparisons between runs). Batch `i` is a pure function of (seed, i): the
positive of each pair contains a marker token, so the loss falls.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from typing import Any

import numpy as np

MARKER_TOKEN = 7


def synthetic_batch(index: int, *, batch_size: int, group_size: int,
                    length: int, vocab_size: int, seed: int = 0,
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


def load_config(path: str):
  """`get_config()` of a config file (e.g. configs/tiny_cpu.py)."""
  spec = importlib.util.spec_from_file_location("_run_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def default_config_path() -> str:
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  return os.path.join(root, "configs", "tiny_cpu.py")


def flat_params(params: Any) -> dict[str, np.ndarray]:
  """{path: host array} of an nnx.State of parameters."""
  import jax  # pylint: disable=g-import-not-at-top
  return {jax.tree_util.keystr(path): np.asarray(jax.device_get(leaf))
          for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}


def run(config, workdir: str, *, num_steps: int, checkpoint_every: int,
        step_delay: float = 0.0, stop_after: int | None = None,
        num_layers: int = 1, mesh=None):
  """Builds the tiny trainer and fits; returns (trainer, FitResult)."""
  # Imported here so that `--devices` can configure JAX first.
  # pylint: disable=g-import-not-at-top
  from best_jax.models.bert import BertConfig
  from best_jax.models.ranker import CrossEncoderRanker
  from best_jax.train import checkpoint, loop, trainer as trainer_lib
  # pylint: enable=g-import-not-at-top

  model_config = BertConfig.tiny(num_layers=num_layers, **config.model)
  trainer = trainer_lib.build_trainer(
      lambda rngs: CrossEncoderRanker(model_config, rngs=rngs), config,
      mesh=mesh)
  train = config.train

  def batch_fn(index):
    if step_delay:
      time.sleep(step_delay)
    return synthetic_batch(index, batch_size=train.batch_size,
                           group_size=train.group_size, length=train.length,
                           vocab_size=model_config.vocab_size,
                           seed=config.seed)

  with checkpoint.Checkpointer(workdir,
                               max_to_keep=train.max_to_keep) as ckpt:
    result = loop.fit(trainer, loop.IndexedBatches(batch_fn),
                      num_steps=num_steps, config=config, seed=config.seed,
                      checkpointer=ckpt, checkpoint_every=checkpoint_every,
                      log_every=train.log_every, stop_after=stop_after)
  return trainer, result


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--config", default=default_config_path())
  parser.add_argument("--steps", type=int, default=None)
  parser.add_argument("--checkpoint_every", type=int, default=None)
  parser.add_argument("--step_delay", type=float, default=0.0,
                      help="seconds to sleep per batch (kill tests)")
  parser.add_argument("--devices", type=int, default=None,
                      help="number of fake CPU devices")
  parser.add_argument("--compilation_cache", default=None)
  parser.add_argument("--params_out", default=None)
  args = parser.parse_args(argv)

  import jax  # pylint: disable=g-import-not-at-top
  if args.devices:
    jax.config.update("jax_num_cpu_devices", args.devices)
  if args.compilation_cache:
    jax.config.update("jax_compilation_cache_dir", args.compilation_cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  config = load_config(args.config)
  num_steps = args.steps or config.train.num_steps
  every = args.checkpoint_every or config.train.checkpoint_every
  _, result = run(config, args.workdir, num_steps=num_steps,
                  checkpoint_every=every, step_delay=args.step_delay)
  print(f"start_step={result.start_step}", flush=True)
  for entry in result.history:
    print(" ".join(f"{k}={v:.6g}" for k, v in entry.items()), flush=True)
  if args.params_out:
    np.savez(args.params_out, **flat_params(result.state.params))
  return 0


if __name__ == "__main__":
  sys.exit(main())
