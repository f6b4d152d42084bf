"""Capacity plan: the BeST paper's MS MARCO schedule and dev reranking, on paper.

    python bench/capacity_plan.py --json bench/results/capacity_plan.json

FLOPs per 512-token sequence come from XLA's cost analysis of the real
`Trainer` score and train steps (BERT-base, bf16 activations, batched
attention as on accelerators; `configs/squad_longdoc.py`'s optimizer and
loss), compiled here on the CPU; `--score-flops/--train-flops` skip that.
Hours = FLOPs ÷ (chips × bf16 peak × MFU), at 40% MFU and at `--mfu`
(e.g. what bench/accelerator.sh measured).

Assumptions (each a flag; the table in docs/measurements.md states them):
- training pairs per regime and BeST iteration: 384,000 (the BeST paper:
  "about 384,000 judged query and document pairs"), one pass, batch 32;
- MS MARCO document lengths: lognormal through the paper's median 797 and
  90th percentile 3,259 subword tokens; 437 body tokens per 512-token segment
  (512 − 48 query − 24 title − 3 special tokens: the full squad_longdoc
  config's limits); training segments have random lengths, 237 body tokens
  on average (the full squad_longdoc config on its 227 documents, seeds
  0-2: `best_jax segment --training`, launch/README.md), over the whole
  document;
- dev: 5,193 queries (qrels.msmarco-doc.dev.txt) × top 100, all segments;
  dev checks during training: 500 dev queries every 500 steps (the full
  squad_longdoc config);
- BeST iteration 1 (one joint step): θ0 trains on the ≤ 4 (`k_train`)
  leading training segment pairs, θ0 scores them in both documents (an
  extra forward pass), θ1 trains on the 2 selected segments; iterations
  2–3: θ(n−1) scores every training segment of both documents of every pair
  (the span inference scores; rows in length buckets, so a segment costs
  its tokens' share of a full row), θ(n) trains on the 2 selected; MaxP is the
  FirstP model with max aggregation (no training of its own).
Figures are given padded (the joint step's fixed shape: every document's 4
leading training segments computed) and valid-only (what length buckets or
valid-segment chunks would cost; selection scores valid segments only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# name: (chips, peak bf16 FLOP/s per chip, source)
SYSTEMS = {
    "v5e-16": (16, 197e12, "TPU v5e spec"),
    "v4-32": (16, 275e12, "TPU v4 spec; 16 chips, 32 TensorCores"),
    "H100": (1, 989e12, "H100 SXM dense bf16 spec"),
    "H200": (1, 790e12, "measured on this workplace's H200 (BENCHMARKS.md)"),
}


def compiled_flops(length: int) -> tuple[float, float]:
  """(score, train) FLOPs per sequence from the compiled product steps."""
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  import jax
  import jax.numpy as jnp
  import ml_collections

  from best_jax.models import BertConfig, CrossEncoderRanker
  from best_jax.config import load_config
  from best_jax.select.selection import build_score_into
  from best_jax.train.trainer import build_trainer
  from score_vs_torch import train_batch

  config = ml_collections.ConfigDict(
      load_config(os.path.join(ROOT, "configs", "squad_longdoc.py")).to_dict())
  model_config = BertConfig(dtype=jnp.bfloat16, attention_block=0)
  trainer = build_trainer(
      lambda rngs: CrossEncoderRanker(model_config, rngs=rngs), config)
  pairs = 2
  batch = train_batch(pairs, length, model_config.vocab_size)
  spec = lambda shape, dtype: jax.ShapeDtypeStruct(
      shape, dtype, sharding=trainer.batch_sharding)
  train_in = {k: spec(v.shape, v.dtype) for k, v in batch.items()}
  rows = 2 * pairs
  score_in = {k: spec((rows, length), batch[k].dtype)
              for k in ("input_ids", "attention_mask", "token_type_ids")}
  score_in.update(pair=spec((rows,), jnp.int32),
                  segment=spec((rows,), jnp.int32),
                  example_mask=spec((rows,), jnp.bool_))
  buffer = jax.ShapeDtypeStruct((rows, 1), jnp.float32,
                                sharding=jax.NamedSharding(trainer.mesh,
                                                           jax.P()))
  with jax.set_mesh(trainer.mesh):
    score = build_score_into(trainer).lower(
        trainer.abstract_state.params, buffer,
        score_in).compile().cost_analysis()
    train = trainer.train_step.lower(trainer.abstract_state,
                                     train_in).compile().cost_analysis()
  return score["flops"] / (2 * pairs), train["flops"] / (2 * pairs)


def segment_counts(median: float, p90: float, body: int, train_body: float,
                   cap: int, samples: int = 200_000) -> dict:
  """Mean segments per document under a lognormal fit: inference windows,
  random-length training segments, and those of the joint step (≤ cap)."""
  sigma = (math.log(p90) - math.log(median)) / 1.2815515655446004
  rng = np.random.default_rng(0)
  tokens = np.exp(rng.normal(math.log(median), sigma, samples))
  segments = np.maximum(1, np.ceil(tokens / body))
  training = np.maximum(1, np.ceil(tokens / train_body))
  return {"mean_tokens": float(tokens.mean()),
          "mean_segments": float(segments.mean()),
          "mean_training_segments": float(training.mean()),
          "mean_joint_segments": float(np.minimum(training, cap).mean())}


def plan(args, score_flops: float, train_flops: float) -> dict:
  docs = segment_counts(args.median_tokens, args.p90_tokens, args.body_tokens,
                        args.train_body_tokens, args.train_segments)
  k, k_valid = args.train_segments, docs["mean_joint_segments"]
  # Selection scores rows in length buckets: a training segment's row costs
  # its bucket's share of a full row (its tokens, plus half a bucket of
  # rounding on average; linear in tokens, so attention, ~10% of a row's
  # FLOPs at 512, is overstated a little).
  row = (args.length - args.body_tokens + args.train_body_tokens
         + args.bucket_tokens / 2) / args.length
  selected = docs["mean_training_segments"] * row
  pairs = args.train_pairs
  steps = math.ceil(pairs / args.batch)
  dev_check = (args.dev_check_queries * args.depth * docs["mean_segments"]
               * score_flops)
  checks = steps // args.eval_every
  work = {}  # name: (padded FLOPs, valid-only FLOPs)
  work["FirstP/MaxP training"] = (2 * train_flops * pairs,) * 2
  work["BeST-1 joint training (θ0 + selection + θ1)"] = tuple(
      pairs * (2 * s * train_flops + 2 * s * score_flops + 2 * train_flops)
      for s in (k, k_valid))
  for n in (2, 3):
    work[f"BeST-{n} selection pass"] = (
        pairs * 2 * selected * score_flops,) * 2
    work[f"BeST-{n} training"] = (2 * train_flops * pairs,) * 2
  models = 4  # FirstP, BeST-1, BeST-2, BeST-3 each have dev checks.
  work[f"dev checks ({models} models × {checks})"] = (
      models * checks * dev_check,) * 2
  dev_queries_docs = args.dev_queries * args.depth
  rerank = dev_queries_docs * docs["mean_segments"] * score_flops
  rows = [_row(name, padded, valid, args.mfu)
          for name, (padded, valid) in work.items()]
  total = _row("training schedule total", sum(r["flops_padded"] for r in rows),
               sum(r["flops_valid"] for r in rows), args.mfu)
  rows += [total, _row("rerank dev top 100, one model, all segments", rerank,
                       rerank, args.mfu)]
  # Input: tokens per second each system consumes at 40% MFU.
  feed = {}
  for system, (chips, peak, _) in SYSTEMS.items():
    rate = chips * peak * 0.4
    feed[system] = {
        "train_sequences_per_s": rate / train_flops,
        "score_sequences_per_s": rate / score_flops,
        "score_tokens_per_s": rate / score_flops * args.length,
        "segmenter_processes_to_keep_up_scoring":
            rate / score_flops * args.length / args.segmenter_tokens_per_s}
  corpus_tokens = dev_queries_docs * docs["mean_tokens"]
  return {"documents": docs, "steps_per_model": steps,
          "dev_checks_per_model": checks, "rows": rows, "feed_at_40pct": feed,
          "segmenting_dev_candidates_hours_one_process":
              corpus_tokens / args.segmenter_tokens_per_s / 3600,
          "systems": {k: {"chips": v[0], "peak": v[1], "source": v[2]}
                      for k, v in SYSTEMS.items()}}


def _row(name: str, padded: float, valid: float, mfu: float | None) -> dict:
  """Hours and chip-hours of `padded` FLOPs on every system."""
  row = {"work": name, "flops_padded": padded, "flops_valid": valid}
  for system, (chips, peak, _) in SYSTEMS.items():
    for rate in sorted({0.4, mfu} - {None}):
      hours = padded / (chips * peak * rate) / 3600
      row[f"{system} @{rate:.0%} h"] = hours
      row[f"{system} @{rate:.0%} chip-h"] = hours * chips
  return row


def markdown(result: dict, mfu: float | None) -> str:
  keys = [k for k in result["rows"][0] if "@" in k]
  lines = ["| work | PFLOP (padded / valid) | " + " | ".join(keys) + " |",
           "| --- | --- | " + " | ".join("---" for _ in keys) + " |"]
  for r in result["rows"]:
    lines.append(f"| {r['work']} | {r['flops_padded'] / 1e15:,.0f} / "
                 f"{r['flops_valid'] / 1e15:,.0f} | "
                 + " | ".join(f"{r[k]:,.2f}" for k in keys) + " |")
  del mfu
  return "\n".join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json")
  parser.add_argument("--score-flops", type=float)
  parser.add_argument("--train-flops", type=float)
  parser.add_argument("--mfu", type=float, help="a measured MFU (0-1)")
  parser.add_argument("--length", type=int, default=512)
  parser.add_argument("--train-pairs", type=int, default=384_000)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--eval-every", type=int, default=500)
  parser.add_argument("--dev-check-queries", type=int, default=500)
  parser.add_argument("--dev-queries", type=int, default=5193)
  parser.add_argument("--depth", type=int, default=100)
  parser.add_argument("--median-tokens", type=float, default=797)
  parser.add_argument("--p90-tokens", type=float, default=3259)
  parser.add_argument("--body-tokens", type=int, default=437)
  parser.add_argument("--train-segments", type=int, default=4,
                      help="k_train: the joint step's leading segments")
  parser.add_argument("--train-body-tokens", type=float, default=237,
                      help="mean body tokens of a training segment")
  parser.add_argument("--bucket-tokens", type=int, default=64,
                      help="scoring buckets' spacing (eight up to 512)")
  parser.add_argument("--segmenter-tokens-per-s", type=float, default=123e3,
                      help="docs/measurements.md: bench/segmenter_throughput.py, "
                      "one process")
  args = parser.parse_args(argv)
  if args.score_flops and args.train_flops:
    score_flops, train_flops = args.score_flops, args.train_flops
  else:
    score_flops, train_flops = compiled_flops(args.length)
  result = plan(args, score_flops, train_flops)
  result.update(score_flops_per_sequence=score_flops,
                train_flops_per_sequence=train_flops, arguments=vars(args))
  print(f"FLOPs per {args.length}-token sequence: score {score_flops:.3e}, "
        f"train step {train_flops:.3e}")
  print(json.dumps(result["documents"]))
  print(markdown(result, args.mfu))
  for system, feed in result["feed_at_40pct"].items():
    print(f"{system}: at 40% MFU {feed['train_sequences_per_s']:,.0f} train "
          f"/ {feed['score_sequences_per_s']:,.0f} scored sequences/s = "
          f"{feed['segmenter_processes_to_keep_up_scoring']:,.0f} segmenter "
          "processes to keep scoring fed")
  print("segmenting the dev candidates once, one process: "
        f"{result['segmenting_dev_candidates_hours_one_process']:.1f} h")
  if args.json:
    from best_jax.data.files import atomic_write
    with atomic_write(args.json) as f:
      json.dump(result, f, indent=1)
    print(f"wrote {args.json}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
