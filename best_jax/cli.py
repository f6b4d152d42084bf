"""The `best_jax` command line: parses arguments and dispatches, nothing else.

Each subcommand lives in the module of its stage, which provides
`add_arguments(parser)` and `main(args) -> int`; it is imported only when used,
so `best_jax evaluate` never pays for importing the model code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from best_jax.errors import InputError, TrainingStopped

# best_jax never uses PyTorch: transformers' "PyTorch was not found" advice
# would greet every command.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

# name -> (module, one-line help)
COMMANDS = {
    "prepare": ("best_jax.data.prepare",
                "build a dataset (squad_longdoc) and export its files"),
    "bm25": ("best_jax.retrieval.bm25",
             "BM25 first-stage retrieval over a corpus, writing a TREC run"),
    "evaluate": ("best_jax.evaluate.command",
                 "evaluate a TREC run against qrels as trec_eval does"),
    "seeds": ("best_jax.evaluate.seeds",
              "summarise an experiment over seeds: mean ± std, paired tests"),
    "segment": ("best_jax.segments.command",
                "split documents into segments and report statistics"),
    "train": ("best_jax.experiment.command",
              "train a ranker from a config (FirstP/MaxP/GoldP/BeST/...)"),
    "truncate": ("best_jax.truncate.command",
                 "truncate ranked lists (oracle/fixed/greedy/attncut/...)"),
    "aot": ("best_jax.experiment.aot",
            "compile every step of a config for a TPU topology on CPU: "
            "FLOPs, memory"),
    "explain": ("best_jax.select.explain",
                "show each query's selected evidence segment (HTML + text)"),
    "export": ("best_jax.serve.export",
               "export a trained model as a Hugging Face directory"),
    "score": ("best_jax.serve.score",
              "score one (query, text) pair with a trained model"),
    "rerank": ("best_jax.serve.rerank",
               "rerank a TREC run with a trained model"),
}


def _parser(command: str | None) -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="best_jax",
      description="Train and run BERT-style rerankers on long documents.")
  sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
  for name, (module, help_text) in COMMANDS.items():
    p = sub.add_parser(name, help=help_text, description=help_text)
    if name == command:
      importlib.import_module(module).add_arguments(p)
  return parser


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  command = next((a for a in argv if not a.startswith("-")), None)
  if command not in COMMANDS:
    command = None
  args = _parser(command).parse_args(argv)
  module = importlib.import_module(COMMANDS[args.command][0])
  try:
    return int(module.main(args) or 0)
  except InputError as e:
    print(f"best_jax {args.command}: error: {e}", file=sys.stderr)
    return 2
  except TrainingStopped as e:
    print(f"best_jax {args.command}: stopped: {e}", file=sys.stderr)
    return getattr(e, "exit_status", 1)
  except KeyboardInterrupt:
    print(f"best_jax {args.command}: interrupted", file=sys.stderr)
    return 130
