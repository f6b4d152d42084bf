"""The `train` command: run an experiment from a config file.

  python -m best_jax train --config configs/squad_longdoc.py:runlocal \\
      --workdir runs/squad --config.train.num_steps=50

`--config FILE[:ARG]` names a Python file whose `get_config(ARG)` returns an
`ml_collections.ConfigDict`; `--config.a.b=VALUE` overrides a field
(`best_jax.config`). Every config value is checked before anything is written
(`experiment.checks`). Results go to `--workdir` (local or `gs://`);
rerunning with the same workdir resumes. Exit status: 0 done, 1 training
stopped (non-finite loss), 2 bad input, 143 asked to stop (saved; rerun to
resume).
"""

from __future__ import annotations

import argparse

from best_jax.config import add_config_arguments, load_config
from best_jax.experiment import checks
from best_jax.experiment.cross_validation import cross_validate
from best_jax.experiment.run import train_and_evaluate
from best_jax.train import distributed


def add_arguments(parser: argparse.ArgumentParser) -> None:
  add_config_arguments(parser)
  parser.add_argument("--workdir", required=True,
                      help="directory for runs, metrics, report, checkpoints "
                      "(local or gs://)")


def main(args: argparse.Namespace) -> int:
  # Multi-host (launch/): joins jax.distributed before any JAX operation, only
  # when BEST_JAX_DISTRIBUTED=1 or JAX_COORDINATOR_ADDRESS asks for it.
  distributed.maybe_initialize()
  config = load_config(args.config, getattr(args, "config_overrides", []))
  checks.check_config(config)
  if config.data.get("cross_validate"):
    cross_validate(config, args.workdir)
  else:
    train_and_evaluate(config, args.workdir)
  return 0
