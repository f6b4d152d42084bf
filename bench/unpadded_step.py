"""The product's `train_step` on real training batches, padded vs unpadded.

    python bench/unpadded_step.py --config configs/squad_longdoc.py:cpu \\
        --config.data.dir=DATA --json bench/results/unpadded_step_cpu.json

Builds the experiment's inputs and ranker as `best_jax train` does, the
first `--steps` FirstP batches of the schedule (`experiment.examples`), and
the budgets `best_jax train` chooses with `train.unpadded`
(`experiment.plans.choose_budgets`: `SAMPLE_BATCHES` (128) batches
spread over the schedule, `token_budget.sample_batches`; with
`train.accumulation_steps` above 1 each batch's micro-batches balanced as
the pipeline balances them). Then times the
jitted, donated `trainer.train_step` over those batches with padded
rows, as `best_jax train` runs it with `train.unpadded`
(`token_budget.UnpaddedSteps`: the first budget a batch fits, or padded),
and, for comparison, the same budgets with attention on every row at full
length (`rows=()`, how unpadded steps ran before attention length groups),
alternating A B C A B C,
`--repeats` times: seconds per step, median [min, max], and their ratio.
The first pass of each (compilation) is timed apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  from best_jax.config import add_config_arguments, load_config
  add_config_arguments(parser)
  parser.add_argument("--json")
  parser.add_argument("--steps", type=int, default=4)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args(sys.argv[1:] if argv is None else argv)

  import jax
  import machine
  from best_jax.data.files import atomic_write
  from best_jax.data.pipeline import Feature, pack
  from best_jax.experiment import checks, examples, plans
  from best_jax.experiment.inputs import build_inputs
  from best_jax.experiment.models import build_ranker
  from best_jax.experiment.workdir import Workdir
  from best_jax.train import token_budget

  config = load_config(args.config, args.config_overrides)
  mesh = checks.check_config(config)
  inputs = build_inputs(config, Workdir(tempfile.mkdtemp()))
  ranker = build_ranker(config, inputs, mesh)
  trainer, t = ranker.trainer, config.train
  build = examples.SegmentExamples(inputs, "firstp", config.seed,
                                   family=config.ranker.kind)
  source = examples.GroupExamples(inputs.schedule, build)
  steps = t.get("accumulation_steps", 1)
  shards = token_budget.data_shards(trainer.batch_sharding)
  budgets = plans.choose_budgets(config, source, shards=shards,
                                 encoder=ranker.encoder)
  tokens = [b.tokens for b in budgets]
  if not budgets:
    print("the budget rule leaves these rows padded: nothing to compare")
    return 1
  features = dict(build.features(t.group_size),
                  example_mask=Feature((), bool, False))
  batches = []
  for group in source.batches(range(min(args.steps, len(inputs.schedule))),
                              t.batch_size):
    group = [dict(e, example_mask=np.bool_(True)) for e in group]
    batch = pack(group, features)
    if steps > 1:  # Balanced micro-batches, as `best_jax train` feeds them.
      batch = token_budget.balance_micro_batches(
          batch, steps=steps, shards=shards, batch_size=t.batch_size)
    batches.append(trainer.put(batch))
  real = sum(int(np.asarray(b["attention_mask"]).sum()) for b in batches)
  capacity = sum(int(np.asarray(b["attention_mask"]).size) for b in batches)

  def unpadded(chosen):
    return token_budget.UnpaddedSteps(
        trainer.train_step, chosen, steps=steps, shards=shards)
  step_fns = {"padded": trainer.train_step, "unpadded": unpadded(budgets),
              "unpadded, attention at full length": unpadded(
                  [dataclasses.replace(b, rows=()) for b in budgets])}
  states = {name: ranker.fresh_state(0) for name in step_fns}

  def run(name):
    for batch in batches:
      states[name], _ = step_fns[name](states[name], batch)
    jax.block_until_ready(states[name].params)

  first, seconds = {}, {name: [] for name in states}
  for name in states:
    start = time.perf_counter()
    run(name)
    first[name] = time.perf_counter() - start
  for _ in range(args.repeats):
    for name in states:
      start = time.perf_counter()
      run(name)
      seconds[name].append((time.perf_counter() - start) / len(batches))

  def summary(values):
    return {"median": statistics.median(values), "min": min(values),
            "max": max(values), "all": values}

  ratio = [p / u for p, u in zip(seconds["padded"], seconds["unpadded"])]
  groups = [f / u for f, u in zip(seconds["unpadded, attention at full length"],
                                  seconds["unpadded"])]
  result = {"tokens": tokens,
            "attention_rows": [list(b.rows) for b in budgets],
            "steps": len(batches),
            "row_padding": 1 - real / capacity,
            "unpadded_steps": step_fns["unpadded"].unpadded,
            "padded_steps": step_fns["unpadded"].padded,
            "first_pass_seconds": first,
            "seconds_per_step": {k: summary(v) for k, v in seconds.items()},
            "speedup": summary(ratio),
            "attention_groups_speedup": summary(groups),
            "load_average": os.getloadavg()}
  for name, values in seconds.items():
    s = result["seconds_per_step"][name]
    print(f"{name}: {s['median']:.2f} s/step [{s['min']:.2f}, {s['max']:.2f}]"
          f" (first pass with compilation {first[name]:.0f} s)")
  print(f"unpadded ({token_budget.describe(budgets)} per device; rows "
        f"{result['row_padding']:.1%}"
        f" padding) is {statistics.median(ratio):.2f}x [{min(ratio):.2f}, "
        f"{max(ratio):.2f}] the padded step and {statistics.median(groups):.2f}x "
        f"[{min(groups):.2f}, {max(groups):.2f}] the unpadded step with "
        f"attention at full length; load average "
        f"{result['load_average'][0]:.1f}")
  if args.json:
    with atomic_write(args.json) as f:
      json.dump({"benchmark": "unpadded_step", "machine": machine.describe(),
                 "config": config.to_dict(), "results": result}, f, indent=1,
                default=str)
  return 0


if __name__ == "__main__":
  sys.exit(main())
