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
- training: the padding of the first `--batches` batches of the schedule
  as the one-segment regimes' `train_step` (FirstP, MaxP-all, GoldP) and
  BeST's joint step (when `best.theta0` is `joint`) encode them
  (`experiment.examples`; the joint step encodes every one of its `k_train`
  segment rows, valid or not): padded rows (`max_len`, or the bi-encoder's
  content and query lengths), and, for the cross-encoder, the unpadded
  stream with `train.unpadded`'s budgets (the joint step: θ⁽⁰⁾'s rows;
  θ⁽¹⁾'s selected rows, one in `k_train`, stay padded)
  (`experiment.plans.choose_budgets`: `SAMPLE_BATCHES` (128) batches
  spread over the schedule, as `best_jax train` chooses them; a batch that
  fits none counts padded; on a schedule of at most 128 batches, such as
  `:cpu`'s 100, the sample is every batch measured).

Tokens, and for the unpadded steps also FLOPs: dense layers cost the same
per token, and attention costs 4·ℓ²·hidden per row and layer at the
length ℓ it runs at (L on padded rows; unpadded, its length group's, for
every row the group holds; the useful part: 4·len²·hidden).
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


def unpadded_padding(inputs, build, num_batches: int, config, bert) -> dict:
  """Token and FLOP padding of the first `num_batches` batches as the
  unpadded `train_step` encodes them on one device (a unit per
  micro-batch), with the budgets `best_jax train` chooses: the stream's
  tokens, and attention on the budget's length groups of rows (a batch
  that fits no budget: every row padded)."""
  from best_jax.experiment import plans
  from best_jax.experiment.examples import GroupExamples
  from best_jax.models.unpadding import group_lengths
  from best_jax.train import token_budget
  examples = GroupExamples(inputs.schedule, build)
  steps = config.train.get("accumulation_steps", 1)
  budgets = plans.choose_budgets(config, examples, shards=1, encoder=bert)
  # FLOPs in tokens of the dense layers: attention's per row, × length².
  dense, attention = 1, token_budget.attention_weight_of(bert)
  real = spent = useful = flops = fits = 0
  attended = attention_flops = 0
  batches = list(examples.batches(
      range(min(num_batches, len(inputs.schedule))), config.train.batch_size))
  for batch in batches:
    masks = np.stack([e["attention_mask"] for e in batch])
    if steps > 1:  # Balanced micro-batches, as `best_jax train` feeds them.
      masks = masks[token_budget.micro_batch_order(masks, steps, 1,
                                                   len(batch))]
    length = masks.shape[-1]
    lengths = masks.reshape(-1, length).sum(-1)
    need = int(lengths.sum())
    # The product's rule (`UnpaddedSteps`): the first budget every unit
    # fits, else padded.
    units = token_budget.unit_of_examples(len(batch), steps, 1)
    index = token_budget.smallest_budget(
        token_budget.largest_unit(masks, units),
        token_budget.rows_above(masks, units), budgets)
    budget = budgets[index] if index < len(budgets) else None
    fits += budget is not None
    real += need
    spent += masks.size if budget is None else budget.tokens * steps
    attended += attention * int(np.sum(lengths ** 2))
    if budget is None or not budget.rows:  # Every row at full length.
      attention_flops += attention * len(lengths) * length ** 2
    else:
      group = np.asarray(group_lengths(length, len(budget.rows)))
      attention_flops += attention * steps * int(
          np.sum(np.asarray(budget.rows) * group ** 2))
    useful += need * dense
    flops += (masks.size if budget is None else budget.tokens * steps) * dense
  useful += attended
  flops += attention_flops
  return {"budgets": token_budget.describe(budgets),
          "tokens": [b.tokens for b in budgets],
          "attention_rows": [list(b.rows) for b in budgets],
          "batches": len(batches), "unpadded_steps": fits,
          "token_padding": 1 - real / spent, "flop_padding": 1 - useful / flops,
          "attention_padding": 1 - attended / attention_flops,
          "attention_share": attention_flops / flops}


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
    print(f"training, {name} (first {args.batches} batches, padded rows): "
          f"{waste:.1%} padding")
  unpadded = {}
  if family == "cross" and config.train.get("unpadded", False):
    from flax import nnx
    bert = nnx.merge(ranker.trainer.graphdef, ranker.pretrained).encoder.config
    builds = {f"{regime} train_step": examples.SegmentExamples(
        inputs, regime, config.seed)
              for regime in ("firstp", "maxp_all", "goldp")}
    if config.best.get("theta0", "joint") == "joint":
      # θ⁽⁰⁾'s rows; θ⁽¹⁾'s selected rows (1 in k_train) stay padded.
      builds["best joint_step"] = examples.AllSegmentExamples(inputs)
    for name, build in builds.items():
      unpadded[name] = result = unpadded_padding(inputs, build, args.batches,
                                                 config, bert)
      print(f"training, {name} unpadded ({result['budgets']}; "
            f"{result['unpadded_steps']} of {result['batches']} "
            f"batches fit): {result['token_padding']:.1%} of tokens, "
            f"{result['flop_padding']:.1%} of FLOPs padding (attention, "
            f"{result['attention_share']:.1%} of the FLOPs: "
            f"{result['attention_padding']:.1%} padding)")
  num_candidates = sum(map(len, inputs.candidates["test"].values()))
  result = {"config": args.config, "overrides": args.config_overrides,
            "family": family, "max_len": max_len,
            "rows_per_call": scorer.rows_per_call,
            "test_pairs": len(pairs), "test_candidates": num_candidates,
            "test_queries": len(inputs.candidates["test"]),
            "scoring": scoring, "training_batches": args.batches,
            "training": training, "training_unpadded": unpadded}
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
