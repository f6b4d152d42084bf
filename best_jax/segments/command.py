"""`best_jax segment`: segment a corpus and report length statistics.

    python -m best_jax segment --corpus corpus.jsonl --max-len 256 --out stats.json

Segments every document as inference does (all segments), or with
`--training` as training does (seeded random lengths from `--min-len` up),
and prints the count, mean, median, 90th percentile and maximum of document
tokens, segments per document and segment body tokens; `--out` writes them
as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np
from tqdm import tqdm

from best_jax.data.corpus import read_corpus
from best_jax.data.files import atomic_write
from best_jax.errors import InputError
from best_jax.segments.config import UNITS, SegmenterConfig
from best_jax.segments.segmenter import Segmenter
from best_jax.segments.sentences import SPLITTERS


def add_arguments(parser: argparse.ArgumentParser) -> None:
  defaults = SegmenterConfig()
  parser.add_argument("--corpus", required=True,
                      help="documents, .jsonl or .tsv (gzip allowed)")
  parser.add_argument("--max-len", type=int, default=defaults.max_len,
                      help="tokens per cross-encoder row (default %(default)s)")
  parser.add_argument("--max-query-len", type=int,
                      default=defaults.max_query_len,
                      help="query tokens reserved (default %(default)s)")
  parser.add_argument("--max-title-len", type=int,
                      default=defaults.max_title_len,
                      help="title tokens kept (default %(default)s)")
  parser.add_argument("--unit", choices=UNITS, default=defaults.unit,
                      help="windows of sentences or single sentences")
  parser.add_argument("--training", action="store_true",
                      help="random-length training segments instead")
  parser.add_argument("--min-len", type=int, default=defaults.min_len,
                      help="shortest training target (default %(default)s)")
  parser.add_argument("--seed", type=int, default=0,
                      help="seeds the training lengths (default %(default)s)")
  parser.add_argument("--splitter", choices=SPLITTERS,
                      default=defaults.splitter, help="sentence splitter")
  parser.add_argument("--batch-size", type=int, default=64,
                      help="documents tokenized together (default %(default)s)")
  parser.add_argument("--out", help="write the statistics as JSON here")


def main(args: argparse.Namespace) -> int:

  if args.batch_size < 1:
    raise InputError("--batch-size must be >= 1")
  config = SegmenterConfig(max_len=args.max_len,
                           max_query_len=args.max_query_len,
                           max_title_len=args.max_title_len,
                           min_len=args.min_len, unit=args.unit,
                           splitter=args.splitter)
  corpus = list(read_corpus(args.corpus).values())
  segmenter = Segmenter(config)
  doc_tokens, title_tokens, segments, body_tokens = [], [], [], []
  with tqdm(total=len(corpus), unit="doc", desc="segment") as bar:
    for first in range(0, len(corpus), args.batch_size):
      docs = corpus[first:first + args.batch_size]
      tokenized = segmenter.tokenize([(d.title, d.text) for d in docs])
      batch = segmenter.segment_tokenized(
          tokenized, training=args.training,
          seeds=[[args.seed, first + i] for i in range(len(docs))])
      doc_tokens.extend(len(t.token_ids) for t in tokenized)
      title_tokens.extend(batch.title_lengths_d.tolist())
      segments.extend(batch.num_segments_d.tolist())
      body_ds = batch.lengths_ds - batch.title_lengths_d[:, None]
      body_tokens.extend(body_ds[batch.segment_mask_ds].tolist())
      bar.update(len(docs))
  stats = {
      "corpus": args.corpus,
      "config": dataclasses.asdict(config),
      "training": args.training,
      "seed": args.seed,
      "content_len": config.content_len,
      "documents": len(corpus),
      "tokens_per_document": summarize(doc_tokens),
      "title_tokens": summarize(title_tokens),
      "segments_per_document": summarize(segments),
      "segment_body_tokens": summarize(body_tokens),
  }
  print(format_table(stats))
  if args.out:
    with atomic_write(args.out) as f:
      json.dump(stats, f, indent=2)
      f.write("\n")
  return 0


def summarize(values: list[int]) -> dict[str, float]:
  """Count, total, mean, median, 90th percentile and maximum of `values`."""
  array = np.asarray(values, np.float64)
  if not array.size:
    return {"count": 0, "total": 0, "mean": 0.0, "median": 0.0, "p90": 0.0,
            "max": 0.0}
  return {"count": int(array.size), "total": int(array.sum()),
          "mean": float(array.mean()), "median": float(np.median(array)),
          "p90": float(np.percentile(array, 90)), "max": float(array.max())}


def format_table(stats: dict) -> str:
  """The statistics as a small aligned text table."""
  config = stats["config"]
  lines = [f"{stats['documents']} documents; max_len {config['max_len']}, "
           f"max_query_len {config['max_query_len']} -> title + body "
           f"{stats['content_len']} tokens per segment",
           f"{'':24s}{'count':>9s}{'mean':>9s}{'median':>9s}{'p90':>9s}"
           f"{'max':>9s}"]
  for key in ("tokens_per_document", "title_tokens", "segments_per_document",
              "segment_body_tokens"):
    s = stats[key]
    lines.append(f"{key.replace('_', ' '):24s}{s['count']:9d}{s['mean']:9.1f}"
                 f"{s['median']:9.1f}{s['p90']:9.1f}{s['max']:9.0f}")
  return "\n".join(lines)
