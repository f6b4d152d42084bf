"""The `export` command: a model of an experiment as a Hugging Face
directory (`serve.hf`).

  python -m best_jax export --workdir W --model maxp --out DIR
"""

from __future__ import annotations

import argparse
import json
import os

from best_jax.serve import hf
from best_jax.serve.trained import MODEL_NAMES, from_workdir


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--workdir", required=True,
                      help="the work directory of a `best_jax train` run")
  parser.add_argument("--model", required=True,
                      help=f"which model: {', '.join(MODEL_NAMES)} (best: "
                      "the BeST iteration chosen on dev; best-0: θ0)")
  parser.add_argument("--out", required=True,
                      help="directory to write (a previous export there is "
                      "replaced)")


def main(args: argparse.Namespace) -> int:
  model = from_workdir(args.workdir, args.model)
  hf.write_export(model, args.out)
  with open(os.path.join(args.out, "config.json"), encoding="utf-8") as f:
    architecture = json.load(f)["architectures"][0]
  layout = (f"sentence-transformers bi-encoder ({architecture})"
            if model.kind == "bi" else f"{architecture} (num_labels=1)")
  origin = model.origin
  print(f"export: {model.name} (stage {origin['stage']}, parameters "
        f"{origin['key']!r}, aggregation {model.aggregation}) -> {args.out} "
        f"as a {layout}")
  return 0
