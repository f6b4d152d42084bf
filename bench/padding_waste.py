"""Fraction of encoder FLOPs spent on padding, SQuAD long documents.

    python bench/padding_waste.py --json bench/results/padding_waste.json

The 48 SQuAD v1.1 dev articles (paragraphs joined) are segmented for
inference by `best_jax.segments.Segmenter` and paired with their first
question as `[CLS] q [SEP] title segment [SEP]` rows of `--max-len` tokens.
Documents go in batches of `--docs` articles; S is the most segments in the
batch. The FLOPs of a row of L positions with n real tokens count the dense
layers per position (2·(4d² + 2d·m) per layer) and attention per position
pair (4d per layer); useful FLOPs are those of the real rows at their real
length n. Waste = 1 − useful ÷ computed, for:

- dense: every `[D, S, L]` row is encoded (padded segments included);
- gathered: only valid segments, in chunks of `--chunk` rows with the last
  chunk padded (`best_jax.select.selection.SegmentScorer`);
- gathered + length buckets (not implemented, a what-if): valid rows sorted by
  length, each chunk cut to its longest row rounded up to `--bucket`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def row_flops(tokens: np.ndarray, config) -> np.ndarray:
  """Encoder FLOPs of rows computing `tokens` positions each."""
  d, m = config.hidden_size, config.intermediate_size
  dense = 2 * (4 * d * d + 2 * d * m)
  attention = 4 * d
  return config.num_layers * (dense * tokens + attention * tokens ** 2.0)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json")
  parser.add_argument("--squad", default=os.path.join(
      ROOT, "..", "shared", "data", "squad", "dev-v1.1.json"))
  parser.add_argument("--max-len", type=int, default=256)
  parser.add_argument("--docs", type=int, default=8)
  parser.add_argument("--chunk", type=int, default=32)
  parser.add_argument("--bucket", type=int, default=32)
  args = parser.parse_args(argv)

  import machine
  from best_jax.data.files import atomic_write, read_text
  from best_jax.models import BertConfig
  from best_jax.models.pretrained import checkpoint_dir
  from best_jax.segments.config import SegmenterConfig
  from best_jax.segments.packing import pack_inputs
  from best_jax.segments.segmenter import Segmenter

  articles = json.loads(read_text(args.squad))["data"]
  documents = [(a["title"].replace("_", " "),
                "\n".join(p["context"] for p in a["paragraphs"]))
               for a in articles]
  questions = [a["paragraphs"][0]["qas"][0]["question"] for a in articles]
  seg_config = SegmenterConfig(max_len=args.max_len)
  segmenter = Segmenter(seg_config)
  model = BertConfig.from_checkpoint(checkpoint_dir())
  useful = dense = gathered = bucketed = 0.0
  rows = valid_rows = 0
  for start in range(0, len(documents), args.docs):
    batch = segmenter.segment(documents[start:start + args.docs])
    query_ids, query_mask = segmenter.tokenize_queries(
        questions[start:start + args.docs])
    inputs = pack_inputs(query_ids[:, None], query_mask[:, None],
                         batch.tokens_dsl, batch.mask_dsl, config=seg_config,
                         special=segmenter.special)
    real_ds = inputs["attention_mask"].sum(-1)
    valid = batch.segment_mask_ds
    full = row_flops(np.array(args.max_len), model)
    useful += row_flops(real_ds[valid], model).sum()
    dense += full * valid.size
    count = int(valid.sum())
    gathered += full * (-(-count // args.chunk) * args.chunk)
    # Sorted by length, each chunk cut to its longest row rounded up to a
    # multiple of --bucket (a few compiled shapes instead of one).
    lengths = np.sort(real_ds[valid])[::-1]
    for chunk_start in range(0, count, args.chunk):
      width = -(-lengths[chunk_start] // args.bucket) * args.bucket
      bucketed += row_flops(np.array(width), model) * args.chunk
    rows += valid.size
    valid_rows += count
  result = {
      "documents": len(documents), "max_len": args.max_len,
      "docs_per_batch": args.docs, "chunk": args.chunk,
      "rows_dense": rows, "rows_valid": valid_rows,
      "waste_dense": 1 - useful / dense,
      "waste_gathered": 1 - useful / gathered,
      "bucket": args.bucket,
      "waste_gathered_length_buckets": 1 - useful / bucketed,
  }
  print(f"{len(documents)} SQuAD articles, {valid_rows} segments "
        f"({rows} rows dense): padding waste dense "
        f"{result['waste_dense']:.1%}, gathered chunks of {args.chunk} "
        f"{result['waste_gathered']:.1%}, and cut to length buckets of "
        f"{args.bucket} {result['waste_gathered_length_buckets']:.1%}")
  if args.json:
    with atomic_write(args.json) as f:
      json.dump({"benchmark": "padding_waste", "machine": machine.describe(),
                 "results": result}, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
