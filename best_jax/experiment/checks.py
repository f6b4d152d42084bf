"""What `best_jax train` checks before it writes anything, and what each
finished stage records so that a rerun never resumes stale work.

`check_config` turns a bad value (a checkpoint that does not load
included) into one `InputError` line (exit 2) before the work directory is
touched. `fingerprint(config, regime)` is the flat
`{dotted key: value}` of every setting a stage's model depends on; the stage
records it, and `stale_keys` names what a rerun changed.
"""

from __future__ import annotations

from typing import Any

import jax
import ml_collections

from best_jax.errors import InputError
from best_jax.segments.config import SegmenterConfig
from best_jax.segments.qds_inputs import SENTENCE_START, sentence_start_id
from best_jax.experiment import longp
from best_jax.experiment.datasets import SOURCES
from best_jax.experiment.regimes import REGIMES
from best_jax.models import families, pretrained
from best_jax.models.qds import HEADS as QDS_HEADS
from best_jax.models.sparse_attention import PATTERNS as QDS_PATTERNS
from best_jax.models.weights import check_checkpoint
from best_jax.rerank.aggregate import AGGREGATIONS
from best_jax.train.best import PAIRINGS
from best_jax.train.losses import LOSSES
from best_jax.train import sharding as sharding_lib
from best_jax.train import token_budget


RANKER_KINDS = ("cross", "bi")
# BeST's θ⁽⁰⁾: trained jointly with θ⁽¹⁾ in one step (the paper), or the
# pretrained bi-encoder, which ranks before any training.
THETA0 = ("joint", "pretrained")

# Settings that change how a run is shown or paced, never a trained model
# (the number of data shards the mesh makes is recorded apart where it
# matters: `fingerprint`).
# The dev/test candidates (`eval.depth`) are re-read on every run: a rerun
# with another depth rescores the test pairs with the same models. The
# schedule always spans `train.num_steps` (`models.trainer_config`), whatever
# `optimizer.total_steps` says.
_NOT_MODEL = ("train.log_every", "train.checkpoint_every", "train.max_to_keep",
              "optimizer.total_steps", "train.unpadded",
              "train.attention_groups", "train.max_budgets",
              "eval.rows_per_call", "eval.depth", "best.max_iterations",
              "best.evaluate_theta0", "mesh.", "logical_axis_rules", "birch.",
              "regimes", "interpolate.", "peer.")
# Config sections that only one regime reads (`segments.k_train`: BeST's
# joint step).
_REGIME_SECTIONS = {"goldp": ("goldp.",), "best": ("best.", "segments.k_train"),
                    "qds": ("qds.",), "longp": ("longp.",)}

# Regimes that pick among a document's training segments: these stopped at
# `k_train` until the change that added this key; now they cover the span
# inference scores, so a stage recorded before is stale.
_SPAN_REGIMES = ("maxp_all", "goldp", "best")


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
  if isinstance(value, (dict, ml_collections.ConfigDict)):
    items = value.items()
    out = {}
    for key, child in items:
      out.update(_flat(child, f"{prefix}{key}."))
    return out
  if isinstance(value, (list, tuple)):
    value = [_flat(v) if isinstance(v, (dict, list, tuple)) else v
             for v in value]
  return {prefix[:-1]: value}


def balances_micro_batches(config: ml_collections.ConfigDict) -> bool:
  """Whether `best_jax train` balances each data shard's examples over the
  micro-batches (`token_budget.balance_micro_batches`): for cross-encoder
  rows with gradient accumulation, padded or not (a bi-encoder's in-batch
  negatives are its micro-batch's, so there the order is the loss's)."""
  return (config.train.get("accumulation_steps", 1) > 1
          and config.ranker.kind == "cross")


def encodes_unpadded(config: ml_collections.ConfigDict) -> bool:
  """Whether the training steps encode their rows unpadded in budgets
  (`train.unpadded`, `train.token_budget`): cross-encoder rows only (QDS
  and the bi-encoder encode padded rows)."""
  return (config.train.get("unpadded", False)
          and config.ranker.kind == "cross")


def fingerprint(config: ml_collections.ConfigDict, regime: str
                ) -> dict[str, Any]:
  """The settings a model trained under `regime` depends on (with
  `train.fixed_order_reduction`, also the number of data shards, since each
  draws its own dropout; when `balances_micro_batches` too, since the
  balance changes the dropout draws)."""
  others = [p for r, ps in _REGIME_SECTIONS.items() if r != regime
            for p in ps]
  settings = {key: value for key, value in _flat(config.to_dict()).items()
              if not key.startswith(_NOT_MODEL) and not key.startswith(
                  tuple(others))}
  # The dev questions pick each stage's best checkpoint.
  settings["data.subsample_seed"] = config.data.get("seed", 0)
  if regime in _SPAN_REGIMES:
    # With `max_segments`, the last training segment is cut at the span's
    # end since issue 40 (recorded stages trained past it).
    settings["segments.training_span"] = (
        "inference" if config.segments.max_segments is None
        else "inside inference")
  if regime == "best" and config.best.get("theta0", "joint") == "joint":
    # The joint step honours in-batch negatives since issue 40.
    settings["best.joint_in_batch_negatives"] = config.train.get(
        "in_batch_negatives", False)
  if balances_micro_batches(config):
    settings["train.micro_batches"] = "balanced per data shard"
  if (config.train.get("fixed_order_reduction", False)
      or balances_micro_batches(config)):
    mesh = sharding_lib.make_mesh(config.mesh.shape, config.mesh.axis_names)
    settings["train.data_shards"] = sharding_lib.batch_multiple(
        mesh, tuple(tuple(r) for r in config.logical_axis_rules))
  return settings


# Settings added after work directories were recorded, with the value that
# such a directory was trained with (a function of its other settings: the
# dev/test subsample was drawn with the run's seed before 92ac1a8).
_ADDED = {"best.theta0": "joint", "segments.unit": "window",
          "train.fixed_order_reduction": False, "qds.head": "paper",
          "data.subsample_seed": lambda recorded: recorded.get("seed", 0),
          "segments.training_span": "leading k_train",
          "train.micro_batches": "strided",
          "best.joint_in_batch_negatives": False}


def stale_keys(recorded: dict[str, Any], current: dict[str, Any],
               regime: str) -> list[str]:
  """`key: old -> new` for every setting that differs between a `regime`
  stage's record and its `current` fingerprint (a recorded setting of
  another regime's sections, fingerprinted for every regime before it became
  one regime's, is ignored; one added since reads its default on whichever
  side lacks it)."""
  recorded = {k: v for k, v in recorded.items() if not k.startswith(_NOT_MODEL)}
  current = dict(current)
  for key, value in _ADDED.items():
    if key in current and key not in recorded:
      recorded[key] = value(recorded) if callable(value) else value
    elif key in recorded and key not in current:
      current[key] = value(current) if callable(value) else value
  others = tuple(p for r, ps in _REGIME_SECTIONS.items() if r != regime
                 for p in ps)
  recorded = {k: v for k, v in recorded.items()
              if k in current or not k.startswith(others)}
  keys = sorted(set(recorded) | set(current))
  return [f"{k}: {recorded.get(k, '(unset)')!r} -> {current.get(k, '(unset)')!r}"
          for k in keys if recorded.get(k) != current.get(k)]


def _require(condition: bool, message: str) -> None:
  if not condition:
    raise InputError(message)


def check_config(config: ml_collections.ConfigDict) -> jax.sharding.Mesh:
  """Raises InputError on a value that cannot run; returns the mesh."""
  t = config.train
  for regime in config.regimes:
    _require(regime in REGIMES,
             f"config.regimes: unknown regime {regime!r}; one of {REGIMES}")
  if "longp" in config.regimes:
    longp.check(config)
  _require("qds" not in config.regimes or "qds" in config,
           "the qds regime needs a config.qds section (see "
           "configs/qds_squad_longdoc.py)")
  for key, value, allowed in (
      ("data.name", config.data.name, SOURCES),
      ("train.loss", t.loss, tuple(LOSSES)),
      ("eval.aggregation", config.eval.aggregation, AGGREGATIONS),
      ("best.pairing", config.best.get("pairing", "same"), PAIRINGS),
      ("qds.head", config.get("qds", {}).get("head", "paper"), QDS_HEADS),
      ("qds.pattern", config.get("qds", {}).get("pattern", "qds"),
       QDS_PATTERNS)):
    _require(value in allowed,
             f"config.{key}={value!r}: use one of {allowed}")
  kind = config.ranker.get("kind", "cross")
  _require(kind in RANKER_KINDS,
           f"config.ranker.kind={kind!r}: use one of {RANKER_KINDS}")
  theta0 = config.best.get("theta0", "joint")
  _require(theta0 in THETA0,
           f"config.best.theta0={theta0!r}: use one of {THETA0}")
  _require(theta0 == "joint" or kind == "bi" or "best" not in config.regimes,
           "config.best.theta0='pretrained' needs config.ranker.kind='bi': a "
           "pretrained cross-encoder's head is random, so it cannot select")
  for name in ("num_steps", "batch_size", "eval_every", "log_every",
               "accumulation_steps"):
    _require(int(t.get(name, 1)) >= 1,
             f"config.train.{name}={t.get(name)!r} must be at least 1")
  groups = t.get("attention_groups", 1)
  _require(isinstance(groups, int) and not isinstance(groups, bool) and
           1 <= groups <= token_budget.ATTENTION_GROUPS,
           f"config.train.attention_groups={groups!r} must be a whole number "
           f"from 1 to {token_budget.ATTENTION_GROUPS}")
  budgets = t.get("max_budgets", token_budget.MAX_BUDGETS)
  _require(isinstance(budgets, int) and not isinstance(budgets, bool) and
           budgets >= 1, f"config.train.max_budgets={budgets!r} must be a "
           "whole number, at least 1")
  _require(t.group_size >= 2, f"config.train.group_size={t.group_size} must "
           "be at least 2 (a positive and a negative)")
  _require(t.patience >= 0, f"config.train.patience={t.patience} must be >= 0")
  _require(config.optimizer.learning_rate > 0,
           f"config.optimizer.learning_rate={config.optimizer.learning_rate}"
           " must be positive")
  _require(config.eval.depth >= 1, f"config.eval.depth={config.eval.depth} "
           "must be at least 1")
  fixed_order = t.get("fixed_order_reduction", False)
  _require(not (fixed_order and t.get("in_batch_negatives", False)),
           "config.train.fixed_order_reduction=True would draw in-batch "
           "negatives from one data shard only; set "
           "config.train.in_batch_negatives=False or "
           "config.train.fixed_order_reduction=False")
  try:
    SegmenterConfig(**config.segments.to_dict())
    mesh = sharding_lib.make_mesh(config.mesh.shape, config.mesh.axis_names)
  except (ValueError, TypeError) as e:
    raise InputError(f"config: {e}") from None
  rules = tuple(tuple(r) for r in config.logical_axis_rules)
  multiple = sharding_lib.batch_multiple(mesh, rules)
  _require(not fixed_order or multiple == mesh.size,
           "config.train.fixed_order_reduction=True needs a mesh whose "
           f"devices all hold data shards (mesh {dict(mesh.shape)})")
  accumulation = t.get("accumulation_steps", 1)
  _require(t.batch_size % accumulation == 0,
           f"config.train.batch_size={t.batch_size} is not a multiple of "
           f"config.train.accumulation_steps={accumulation}")
  _require((t.batch_size // accumulation) % multiple == 0,
           f"config.train.batch_size={t.batch_size} (per micro-batch "
           f"{t.batch_size // accumulation}) is not a multiple of the "
           f"{multiple} data-parallel devices of the mesh")
  _check_checkpoint(config)
  if "qds" in config.regimes:
    _check_qds(config)
  return mesh


def _check_qds(config: ml_collections.ConfigDict) -> None:
  """QDS extends a BERT checkpoint's absolute position table and marks
  sentences with a reserved token of its tokenizer."""
  r = config.ranker
  checkpoint = r.get("checkpoint") or pretrained.MINILM
  if not r.get("tiny"):
    directory = pretrained.checkpoint_dir(checkpoint)
    model_type = families.read_config(
        directory, **dict(r.get("overrides", {}) or {})).model_type
    _require(model_type == "bert",
             f"the qds regime extends a BERT position table; {directory} "
             f"is a {model_type!r} model (use a bert checkpoint)")
  sentence_start_id(pretrained.load_tokenizer(checkpoint),
                    config.qds.get("sentence_start", SENTENCE_START))


def _check_checkpoint(config: ml_collections.ConfigDict) -> None:
  """`config.ranker.checkpoint` must load as the ranker's kind (a tiny
  random ranker reads only its tokenizer), its tokenizer's ids must have
  embeddings and the rows must fit its positions."""
  r = config.ranker
  directory = pretrained.checkpoint_dir(r.get("checkpoint")
                                        or pretrained.MINILM)
  overrides = dict(r.get("overrides", {}) or {})
  kind = r.get("kind", "cross")
  tiny = bool(r.get("tiny"))
  if not tiny:
    check_checkpoint(directory, kind, **overrides)
  model = pretrained.ranker_config(r)
  # Token ids past the embeddings would read NaN rows, not fail.
  pretrained.check_tokenizer(
      directory, model.vocab_size,
      "the tiny random ranker's (config.ranker.overrides)" if tiny
      else "the model's")
  segments = SegmenterConfig(**config.segments.to_dict())
  rows, name = ((segments.max_len, "config.segments.max_len")
                if kind == "cross" else
                (segments.text_row_len, "the bi-encoder's segment rows "
                 "(config.segments.max_len - 1 - max_query_len)"))
  model_name = ("the tiny random ranker (config.ranker.overrides)" if tiny
                else directory)
  _require(rows <= model.positions,
           f"{name} = {rows} tokens exceed the {model.positions} "
           f"positions of {model_name}")
