"""The `train` command: run an experiment from a config file.

  python -m best_jax train --config configs/squad_longdoc.py:runlocal \\
      --workdir runs/squad --config.train.num_steps=50

`--config FILE[:ARG]` names a Python file whose `get_config(ARG)` returns an
`ml_collections.ConfigDict`; `--config.a.b=VALUE` (or `--config.a.b VALUE`)
overrides a field, as absl's `config_flags` does: the value is parsed as a
Python literal (falling back to a string) and must fit the field's type. The
config is locked afterwards. Results go to `--workdir`; rerunning with the same
workdir resumes.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os

from best_jax.errors import InputError

PREFIX = "--config."


def _split_overrides(args: list[str]) -> tuple[list[str], list[str]]:
  """Separates `--config.a.b=v` / `--config.a.b v` from the other args."""
  rest, overrides = [], []
  i = 0
  while i < len(args):
    arg = args[i]
    if arg.startswith(PREFIX):
      if "=" in arg:
        overrides.append(arg[len("--"):])
      elif i + 1 < len(args):
        overrides.append(arg[len("--"):] + "=" + args[i + 1])
        i += 1
      else:
        raise InputError(f"{arg} needs a value")
    else:
      rest.append(arg)
    i += 1
  return rest, overrides


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--config", required=True,
                      help="config file, optionally with `:ARG` "
                      "(e.g. configs/squad_longdoc.py:runlocal)")
  parser.add_argument("--workdir", required=True,
                      help="directory for runs, metrics, report, checkpoints")
  parser.epilog = ("Override any field with --config.SECTION.FIELD=VALUE, "
                   "e.g. --config.train.num_steps=10.")
  # argparse cannot declare `--config.*` options, so they are taken out
  # before it parses (the subparser calls this method with its arguments).
  parse_known_args = parser.parse_known_args

  def parse_with_overrides(args=None, namespace=None):
    rest, overrides = _split_overrides(list(args or []))
    namespace, extra = parse_known_args(rest, namespace)
    namespace.config_overrides = overrides
    return namespace, extra
  parser.parse_known_args = parse_with_overrides


def config_module(path: str):
  """Imports a config file as a module; a config that extends another
  (`robust04_desc.py`, `qds_squad_longdoc.py`) loads its base with it."""
  if not os.path.isfile(path):
    raise InputError("config file not found", path)
  name = os.path.splitext(os.path.basename(path))[0]
  module_spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(module_spec)
  try:
    module_spec.loader.exec_module(module)
  except InputError:
    raise
  except Exception as e:  # A user's config file can fail in any way.
    raise InputError(f"cannot load config: {type(e).__name__}: {e}",
                     path) from None
  return module


def load_config(spec: str, overrides: list[str] = ()):
  """`FILE[:ARG]` plus `config.a.b=value` overrides -> a locked ConfigDict."""
  path, _, arg = spec.partition(":")
  module = config_module(path)
  if not hasattr(module, "get_config"):
    raise InputError("config file has no get_config(arg)", path)
  config = module.get_config(arg or None)
  for override in overrides:
    _apply(config, override)
  config.lock()
  return config


def _apply(config, override: str) -> None:
  """Sets `config.a.b = value` from `"config.a.b=value"`."""
  name, _, text = override.partition("=")
  keys = name.split(".")[1:]
  if not keys or not all(keys):
    raise InputError(f"bad override --{override}")
  node = config
  for key in keys[:-1]:
    if key not in node:
      raise InputError(f"--{override}: no config field {key!r}")
    node = node[key]
  if keys[-1] not in node:
    raise InputError(f"--{override}: no config field {'.'.join(keys)!r}")
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    value = text
  current = node[keys[-1]]
  if isinstance(current, float) and isinstance(value, int):
    value = float(value)
  if isinstance(current, tuple) and isinstance(value, list):
    value = tuple(value)
  try:
    node[keys[-1]] = value
  except (TypeError, ValueError) as e:
    raise InputError(f"--{override}: {e}") from None


def main(args: argparse.Namespace) -> int:
  # Multi-host (launch/): joins jax.distributed before any JAX operation, only
  # when BEST_JAX_DISTRIBUTED=1 or JAX_COORDINATOR_ADDRESS asks for it.
  from best_jax.train import distributed  # pylint: disable=g-import-not-at-top
  distributed.maybe_initialize()
  config = load_config(args.config, getattr(args, "config_overrides", []))
  if config.data.get("cross_validate"):
    from best_jax.train.cross_validation import cross_validate  # pylint: disable=g-import-not-at-top
    cross_validate(config, args.workdir)
    return 0
  from best_jax.train.experiment import train_and_evaluate  # pylint: disable=g-import-not-at-top
  train_and_evaluate(config, args.workdir)
  return 0
