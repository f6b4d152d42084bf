"""The MODEL arguments of `score` and `rerank`: `--model DIR` (an exported
directory) or `--workdir W --model NAME` (a model of an experiment)."""

from __future__ import annotations

import argparse

from best_jax.serve.reranker import Reranker
from best_jax.serve.trained import MODEL_NAMES


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument(
      "--model", required=True,
      help="a directory written by `best_jax export`; with --workdir, a "
      f"model of that experiment: {', '.join(MODEL_NAMES)}")
  parser.add_argument("--workdir", default=None,
                      help="the work directory of a `best_jax train` run")
  parser.add_argument("--rows-per-call", type=int, default=None,
                      help="rows per device call (default: the experiment's "
                      "eval.rows_per_call)")


def load_reranker(args: argparse.Namespace) -> Reranker:
  if args.workdir is None:
    return Reranker.load(args.model, rows_per_call=args.rows_per_call)
  return Reranker.load(args.workdir, model=args.model,
                       rows_per_call=args.rows_per_call)
