"""Config files: `FILE[:ARG]` plus `--config.a.b=VALUE` overrides, as absl's
`config_flags` does, for every command that takes `--config`.

A config file is a Python file whose `get_config(arg)` returns an
`ml_collections.ConfigDict` (a config that extends another, e.g.
`configs/robust04_desc.py`, loads its base with `config_module`). An override's
value is parsed as a Python literal (falling back to a string) and must fit
the field's type. The config is locked afterwards. Every failure is an
`InputError` naming the file: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
from collections.abc import Sequence

import ml_collections

from best_jax.errors import InputError

PREFIX = "--config."


def config_module(path: str):
  """Imports a config file as a module."""
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


def load_config(spec: str, overrides: Sequence[str] = ()
                ) -> ml_collections.ConfigDict:
  """`FILE[:ARG]` plus `config.a.b=value` overrides -> a locked ConfigDict."""
  path, _, arg = spec.partition(":")
  module = config_module(path)
  if not hasattr(module, "get_config"):
    raise InputError("config file has no get_config(arg)", path)
  try:
    config = module.get_config(arg or None)
  except (ValueError, KeyError, TypeError) as e:
    raise InputError(f"{type(e).__name__}: {e}", path) from None
  for override in overrides:
    _apply(config, override)
  config.lock()
  return config


def _apply(config: ml_collections.ConfigDict, override: str) -> None:
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


def add_config_arguments(parser: argparse.ArgumentParser, *,
                         required: bool = True) -> None:
  """Adds `--config FILE[:ARG]` and accepts `--config.a.b=v` overrides,
  which land in `args.config_overrides`."""
  parser.add_argument("--config", required=required,
                      help="config file, optionally with `:ARG` "
                      "(e.g. configs/squad_longdoc.py:runlocal)")
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
