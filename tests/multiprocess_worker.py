"""A few tiny training steps fed by the input pipeline, for test_multiprocess.

`train()` runs in the pytest process (1 process × 8 devices, the reference)
and, through `python tests/multiprocess_worker.py`, in each of 2 processes × 4
CPU devices joined by `jax.distributed` (the environment sets
BEST_JAX_DISTRIBUTED=1, JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES,
JAX_PROCESS_ID, JAX_PLATFORMS=cpu and the XLA device count).

A worker prints `READS <json>` (the record indices this process read) on
stdout, logs through the process-0-only `best_jax` logger, and process 0 alone
writes `result.npz` (parameters and losses) into its own `--workdir`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GROUP, LENGTH, VOCAB = 2, 16, 128


def features():
  from best_jax.data.pipeline import Feature  # pylint: disable=g-import-not-at-top
  return {
      "input_ids": Feature((GROUP, LENGTH), np.int32),
      "attention_mask": Feature((GROUP, LENGTH), np.bool_, False),
      "token_type_ids": Feature((GROUP, LENGTH), np.int32),
      "labels": Feature((GROUP,), np.float32),
      "mask": Feature((GROUP,), np.bool_, False),
  }


def make_examples(count: int, seed: int = 0):
  """Random (positive, negative) token pairs of random lengths."""
  rng = np.random.default_rng(seed)
  for _ in range(count):
    lengths = rng.integers(4, LENGTH + 1, size=GROUP)
    mask = np.arange(LENGTH)[None, :] < lengths[:, None]
    yield {
        "input_ids": np.where(mask, rng.integers(1, VOCAB, (GROUP, LENGTH)),
                              0).astype(np.int32),
        "attention_mask": mask,
        "token_type_ids": (mask & (np.arange(LENGTH) >= 3)).astype(np.int32),
        "labels": np.array([1.0, 0.0], np.float32),
        "mask": np.ones(GROUP, bool),
    }


def tiny_config():
  spec = importlib.util.spec_from_file_location(
      "tiny_cpu", os.path.join(ROOT, "configs", "tiny_cpu.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


class RecordingSource:
  """Wraps a source and remembers which indices were read."""

  def __init__(self, source):
    self.source = source
    self.read: list[int] = []

  def __len__(self):
    return len(self.source)

  def __getitem__(self, index):
    self.read.append(int(index))
    return self.source[index]


def train(data_path: str, steps: int, global_batch: int = 8,
          seed: int = 0) -> dict:
  """Trains the tiny ranker `steps` steps; returns host params and losses."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

  from best_jax.data.pipeline import InputPipeline  # pylint: disable=g-import-not-at-top
  from best_jax.data.records import ArrayRecordSource  # pylint: disable=g-import-not-at-top
  from best_jax.models.bert import BertConfig  # pylint: disable=g-import-not-at-top
  from best_jax.models.ranker import CrossEncoderRanker  # pylint: disable=g-import-not-at-top
  from best_jax.train import distributed  # pylint: disable=g-import-not-at-top
  from best_jax.train.trainer import build_trainer  # pylint: disable=g-import-not-at-top

  config = tiny_config()
  model_config = BertConfig.tiny(**config.model)
  trainer = build_trainer(
      lambda rngs: CrossEncoderRanker(model_config, rngs=rngs), config)
  state = trainer.init(config.seed)
  source = RecordingSource(ArrayRecordSource(data_path))
  log = distributed.main_process_logging()
  losses = []
  with InputPipeline(source, features(), global_batch_size=global_batch,
                     seed=seed, sharding=trainer.batch_sharding,
                     prefetch=2) as batches:
    for step in range(steps):
      state, metrics = trainer.train_step(state, next(batches))
      losses.append(metrics["loss"])
      log.info("step %d loss %.6f", step + 1, float(metrics["loss"]))
    position = batches.get_state()
  params = {
      "/".join(str(getattr(k, "key", k)) for k in path):
          np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
      for path, leaf in jax.tree.leaves_with_path(state.params)}
  return {"params": params,
          "losses": np.asarray(jax.device_get(losses)),
          "position": position,
          "reads": source.read,
          "process_index": jax.process_index(),
          "devices": jax.device_count(),
          "local_devices": jax.local_device_count()}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument("--data", required=True)
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--steps", type=int, default=3)
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                      format="%(name)s: %(message)s")

  from best_jax.train import distributed  # pylint: disable=g-import-not-at-top
  if not distributed.maybe_initialize():
    raise SystemExit("expected a multi-process start (BEST_JAX_DISTRIBUTED)")
  result = train(args.data, args.steps)
  print("READS " + json.dumps({"process": result["process_index"],
                               "devices": result["devices"],
                               "local_devices": result["local_devices"],
                               "reads": result["reads"]}), flush=True)

  def write(f):
    np.savez(f, losses=result["losses"],
             position=json.dumps(result["position"]),
             **{"param:" + k: v for k, v in result["params"].items()})
  distributed.write_on_main(os.path.join(args.workdir, "result.npz"), write,
                            mode="wb")
  return 0


if __name__ == "__main__":
  sys.path.insert(0, ROOT)
  sys.exit(main())
