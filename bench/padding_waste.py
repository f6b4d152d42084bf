"""Padding waste of the rows `best_jax train` encodes, for one config.

    python bench/padding_waste.py --config configs/squad_longdoc.py:cpu \\
        --config.data.dir=DATA --json bench/results/padding_waste_cpu.json

Builds the experiment's inputs and ranker as `best_jax train` does
(`experiment.inputs.build_inputs`, `experiment.models.build_ranker`) and
reports the fraction of the encoder's row tokens that are padding:

- test scoring: the ranker's scorer's `padding(pairs)` over the test pairs
  `best_jax train` scores (each query's first-stage top `eval.depth`, then
  gold pairs), with the config's length buckets, with one bucket (the
  longest row: `max_len`, a bi-encoder's `text_row_len`) and with `--counts`
  evenly spaced buckets (`default_buckets`);
- training: batches are not bucketed (one shape, `max_len` rows, or the
  bi-encoder's content and query lengths); the padding of the first
  `--batches` batches of the schedule as FirstP's `train_step` and BeST's
  joint step (when `best.theta0` is `joint`) encode them (`experiment.examples`; the joint step encodes
  every one of its `k_train` segment rows, valid or not).

Tokens, not FLOPs: dense layers cost the same per token, attention more per
token in longer rows, so the FLOP fraction is a little higher.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def training_padding(inputs, build, num_batches: int) -> float:
  """Padding fraction of the first `num_batches` batches' rows of
  `build(index, group)` (`experiment.examples`)."""
  real = total = 0
  index = 0
  for batch in inputs.schedule[:num_batches]:
    for group in batch:
      example = build(index, group)
      index += 1
      mask = example["attention_mask"]
      real += int(mask[example["mask"]].sum())
      total += mask.size
      if "query_mask" in example:  # the bi-encoder's query row
        real += int(example["query_mask"].sum())
        total += example["query_mask"].size
  return 1.0 - real / max(total, 1)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  from best_jax.config import add_config_arguments, load_config
  add_config_arguments(parser)
  parser.add_argument("--json")
  parser.add_argument("--counts", type=int, nargs="*", default=[2, 8])
  parser.add_argument("--batches", type=int, default=20)
  args = parser.parse_args(sys.argv[1:] if argv is None else argv)

  import machine
  from best_jax.data.files import atomic_write
  from best_jax.experiment import checks, examples
  from best_jax.experiment.inputs import build_inputs
  from best_jax.experiment.models import build_ranker
  from best_jax.experiment.workdir import Workdir
  from best_jax.select.selection import default_buckets

  config = load_config(args.config, args.config_overrides)
  mesh = checks.check_config(config)
  inputs = build_inputs(config, Workdir(tempfile.mkdtemp()))
  ranker = build_ranker(config, inputs, mesh)
  scorer = ranker.scorer
  pairs = inputs.pairs["test"]
  max_len = scorer.buckets[-1]  # max_len; a bi-encoder's text_row_len
  layouts = {"config": scorer.buckets, "one": (max_len,)}
  layouts.update({f"{n} buckets": default_buckets(max_len, count=n)
                  for n in args.counts})
  scoring = {}
  for name, buckets in layouts.items():
    waste = type(scorer)(ranker.trainer, scorer.source,
                         rows_per_call=scorer.rows_per_call,
                         buckets=buckets).padding(pairs)
    scoring[name] = {"buckets": list(buckets), "padding": waste}
    print(f"test scoring, {name} {list(buckets)}: {waste:.1%} padding")
  family = config.ranker.kind
  training = {
      "firstp train_step": training_padding(
          inputs, examples.SegmentExamples(inputs, "firstp", config.seed,
                                           family=family), args.batches)}
  if config.best.get("theta0", "joint") == "joint":
    training["best joint_step"] = training_padding(
        inputs, examples.AllSegmentExamples(inputs, family=family),
        args.batches)
  for name, waste in training.items():
    print(f"training, {name} (first {args.batches} batches, unbucketed): "
          f"{waste:.1%} padding")
  num_candidates = sum(map(len, inputs.candidates["test"].values()))
  result = {"config": args.config, "overrides": args.config_overrides,
            "family": family, "max_len": max_len,
            "rows_per_call": scorer.rows_per_call,
            "test_pairs": len(pairs), "test_candidates": num_candidates,
            "test_queries": len(inputs.candidates["test"]),
            "scoring": scoring, "training_batches": args.batches,
            "training": training}
  print(f"{len(pairs)} test pairs ({num_candidates} first-stage candidates "
        f"of {result['test_queries']} queries, then gold pairs)")
  if args.json:
    with atomic_write(args.json) as f:
      json.dump({"benchmark": "padding_waste", "machine": machine.describe(),
                 "config": config.to_dict(), "results": result}, f, indent=1,
                default=str)
  return 0


if __name__ == "__main__":
  sys.exit(main())
