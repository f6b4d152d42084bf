"""The `score` command: one (query, text) pair's score, on one line.

  python -m best_jax score --model DIR --query Q --text T
  python -m best_jax score --workdir W --model maxp --query Q --text T

The pair is scored whole, tokenized as transformers tokenizes a sentence
pair (`[CLS] Q [SEP] T [SEP]`, token types 0 then 1, cut to the model's
positions), so a cross-encoder's score equals the exported model's logit
(`AutoModelForSequenceClassification`); a bi-encoder's is `scale` times the
cosine sentence-transformers computes (or the dot product). Documents cut
into segments, as in training: `best_jax rerank`.
"""

from __future__ import annotations

import argparse

from best_jax.serve.arguments import add_model_arguments, load_reranker


def add_arguments(parser: argparse.ArgumentParser) -> None:
  add_model_arguments(parser)
  parser.add_argument("--query", required=True, help="the query")
  parser.add_argument("--text", required=True, help="the text to score")


def main(args: argparse.Namespace) -> int:
  print(repr(load_reranker(args).score(args.query, args.text)))
  return 0
