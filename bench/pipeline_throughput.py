"""Input pipeline throughput against the model's consumption, on this machine.

    python bench/pipeline_throughput.py --json bench/results/pipeline.json

Writes `--examples` training groups ([group, length] token arrays of random
lengths, as the segmenter makes them) to an array_record file, then measures,
alternating A B A B for `--repeats` rounds after a warm-up:

  A  the pipeline alone: read + decode + shuffle + pack + global-array
     transfer, single-threaded (prefetch 0), in examples (groups) per second;
  B  the model alone: the real jitted train step of a MiniLM-L6-sized ranker
     (random weights; `--model base` for BERT-base) on one fixed batch.

Then it trains `--steps` steps fed by the pipeline with background prefetch
and reports the fraction of wall time the loop waited for input. The
pipeline is not the bottleneck when A/B is well above 1 and the wait is ~0.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def make_examples(count: int, group: int, length: int, vocab: int, seed=0):
  rng = np.random.default_rng(seed)
  for _ in range(count):
    lengths = rng.integers(length // 4, length + 1, size=group)
    mask = np.arange(length)[None, :] < lengths[:, None]
    yield {
        "input_ids": np.where(mask, rng.integers(1000, vocab, (group, length)),
                              0).astype(np.int32),
        "attention_mask": mask,
        "token_type_ids": (mask & (np.arange(length) >= 16)).astype(np.int32),
        "labels": np.eye(1, group, dtype=np.float32)[0],
        "mask": np.ones(group, bool),
    }


def features(group: int, length: int):
  from best_jax.data.pipeline import Feature  # pylint: disable=g-import-not-at-top
  return {
      "input_ids": Feature((group, length), np.int32),
      "attention_mask": Feature((group, length), np.bool_, False),
      "token_type_ids": Feature((group, length), np.int32),
      "labels": Feature((group,), np.float32),
      "mask": Feature((group,), np.bool_, False),
  }


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--examples", type=int, default=2048)
  parser.add_argument("--batch", type=int, default=16, help="groups per step")
  parser.add_argument("--group", type=int, default=2)
  parser.add_argument("--length", type=int, default=256)
  parser.add_argument("--model", default="minilm",
                      help="minilm (MiniLM-L6 shape), base, tiny")
  parser.add_argument("--dtype", default="float32")
  parser.add_argument("--batches", type=int, default=20,
                      help="pipeline batches per A measurement")
  parser.add_argument("--steps", type=int, default=3,
                      help="train steps per B measurement and per loop")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--gc-freeze", action="store_true",
                      help="gc.freeze() after compiling, so Python's cyclic "
                      "GC stops rescanning the tracing/compile objects")
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)

  import jax  # pylint: disable=g-import-not-at-top
  import machine  # pylint: disable=g-import-not-at-top
  from best_jax.data import records  # pylint: disable=g-import-not-at-top
  from best_jax.data.files import atomic_write  # pylint: disable=g-import-not-at-top
  from best_jax.data.pipeline import InputPipeline  # pylint: disable=g-import-not-at-top
  from best_jax.models.bert import BertConfig  # pylint: disable=g-import-not-at-top
  from best_jax.models.ranker import CrossEncoderRanker  # pylint: disable=g-import-not-at-top
  from best_jax.train import aot  # pylint: disable=g-import-not-at-top
  from best_jax.train.trainer import build_trainer  # pylint: disable=g-import-not-at-top

  if args.model == "minilm":  # all-MiniLM-L6-v2's shape
    bert_config = BertConfig(hidden_size=384, num_layers=6, num_heads=12,
                             intermediate_size=1536, dtype=args.dtype)
  else:
    bert_config = aot.model_config(args.model, args.dtype, "float32")
  config = aot.load_config(os.path.join(ROOT, "configs", "tiny_cpu.py"))
  trainer = build_trainer(
      lambda rngs: CrossEncoderRanker(bert_config, rngs=rngs), config)

  workdir = tempfile.mkdtemp(prefix="best_jax_pipeline_bench_")
  path = os.path.join(workdir, "train.array_record")
  start = time.perf_counter()
  records.write_array_record(path, make_examples(
      args.examples, args.group, args.length, bert_config.vocab_size))
  write_s = time.perf_counter() - start
  source = records.ArrayRecordSource(path)
  feats = features(args.group, args.length)

  def pipeline(prefetch: int) -> InputPipeline:
    return InputPipeline(source, feats, global_batch_size=args.batch, seed=0,
                         sharding=trainer.batch_sharding, prefetch=prefetch)

  reader = pipeline(prefetch=0)
  fixed = next(reader)
  with jax.set_mesh(trainer.mesh):
    step = trainer.train_step.lower(trainer.abstract_state, fixed).compile()
  state = trainer.init(0)
  state, metrics = step(state, fixed)  # warm-up
  jax.block_until_ready(metrics)
  start = time.perf_counter()
  gc.collect()
  gc_collect_s = time.perf_counter() - start
  if args.gc_freeze:
    gc.freeze()

  def measure_pipeline() -> float:
    start = time.perf_counter()
    for _ in range(args.batches):
      jax.block_until_ready(next(reader))
    return args.batches * args.batch / (time.perf_counter() - start)

  def measure_model() -> float:
    nonlocal state
    start = time.perf_counter()
    for _ in range(args.steps):
      state, out = step(state, fixed)
    jax.block_until_ready(out)
    return args.steps * args.batch / (time.perf_counter() - start)

  measure_pipeline()  # warm-up (file cache, permutation)
  pipeline_rates, model_rates = [], []
  for _ in range(args.repeats):
    pipeline_rates.append(measure_pipeline())
    model_rates.append(measure_model())
  ratios = [p / m for p, m in zip(pipeline_rates, model_rates)]

  # The real loop: prefetching pipeline feeding the train step.
  waited = 0.0
  start = time.perf_counter()
  with pipeline(prefetch=2) as batches:
    for _ in range(args.steps):
      t = time.perf_counter()
      batch = next(batches)
      waited += time.perf_counter() - t
      state, out = step(state, batch)
    jax.block_until_ready(out)
  loop_s = time.perf_counter() - start
  result = {
      "examples": args.examples, "batch": args.batch, "group": args.group,
      "length": args.length, "model": args.model, "dtype": args.dtype,
      "write_examples_per_s": args.examples / write_s,
      "pipeline_examples_per_s": pipeline_rates,
      "model_examples_per_s": model_rates,
      "ratio_pipeline_over_model": ratios,
      "ratio_median": statistics.median(ratios),
      "loop_steps": args.steps, "loop_s": loop_s,
      "loop_input_wait_s": waited,
      "loop_input_wait_fraction": waited / loop_s,
      "gc_collect_s": gc_collect_s, "gc_freeze": args.gc_freeze,
      "machine": machine.describe(),
  }
  print(f"data          {args.examples} groups of {args.group} x "
        f"{args.length} tokens; batch {args.batch}; model {args.model} "
        f"({args.dtype}) on {jax.device_count()} x "
        f"{jax.devices()[0].device_kind}")
  print("pipeline      " + ", ".join(f"{r:,.0f}" for r in pipeline_rates)
        + " examples/s (single thread, no prefetch)")
  print("model         " + ", ".join(f"{r:,.1f}" for r in model_rates)
        + " examples/s (train step)")
  print(f"ratio         pipeline/model median {statistics.median(ratios):.1f}"
        f" (min {min(ratios):.1f}, max {max(ratios):.1f})")
  print(f"gc            one full collection took {gc_collect_s:.3f} s"
        f"{' (then gc.freeze())' if args.gc_freeze else ''}")
  print(f"loop          {args.steps} steps in {loop_s:.2f} s, waited "
        f"{waited:.3f} s for input ({100 * waited / loop_s:.1f}%, including "
        "the first, unprefetched batch)")
  if args.json:
    with atomic_write(args.json) as f:
      json.dump(result, f, indent=2)
  shutil.rmtree(workdir, ignore_errors=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
