"""A trained ranker as a value: its parameters (host arrays), architecture,
tokenizer and the settings it was trained with.

`from_workdir(workdir, name)` reads one model of a `best_jax train` work
directory (`config.json`, `metrics.json`, `stages/NAME.json` and the orbax
parameters `stages/NAME/`, saved as `{key: params}`);
`serve.hf.read_export(directory)` reads a directory that `best_jax export`
wrote. Model names (case-insensitive; the results table's names work too):

  firstp     stage firstp, the parameters selected for FirstP (key `first`)
  maxp       stage firstp, those selected for MaxP (key `eval.aggregation`)
  maxp-all   stage maxp_all
  goldp      stage goldp
  best-N     BeST iteration N (stage bestN); best-0 is the joint step's θ⁽⁰⁾
  best       the BeST iteration chosen on dev (metrics.json `selected_best`)
  qds        refused: the QDS-Transformer reads whole documents with its own
             sparse attention, which no standard Hugging Face model expresses
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

import jax
import ml_collections
from etils import epath
from flax import nnx
from transformers import AutoTokenizer

from best_jax.data.files import read_text
from best_jax.errors import InputError
from best_jax.experiment import longp
from best_jax.models import BertConfig, CrossEncoderRanker
from best_jax.models import pretrained
from best_jax.models.bi_encoder import BiEncoderRanker
from best_jax.segments.config import SegmenterConfig
from best_jax.train.checkpoint import load_params
from best_jax.train.state import abstract_params

MODEL_NAMES = ("firstp", "maxp", "maxp-all", "goldp", "longp", "best-N",
               "best")
KINDS = ("cross", "bi")


@dataclasses.dataclass(frozen=True)
class TrainedModel:
  """One trained ranker (see the module docstring for where it comes from).

  Attributes:
    name: the model name (`maxp`, `best-2`, ...).
    kind: "cross" (a cross-encoder) or "bi" (a bi-encoder).
    bert: the encoder's architecture.
    params: the model's `nnx.Param` state, host (numpy) arrays.
    config: the experiment's training config.
    tokenizer_dir: a directory with the tokenizer files.
    aggregation: how segment scores make a document score (`first`, `max`).
    origin: where the parameters came from (workdir, stage, key).
  """
  name: str
  kind: str
  bert: BertConfig
  params: nnx.State
  config: ml_collections.ConfigDict
  tokenizer_dir: str
  aggregation: str
  origin: dict[str, Any]

  @property
  def similarity(self) -> str:
    """A bi-encoder's similarity: "cosine" (times `scale`) or "dot"."""
    return self.config.ranker.get("similarity", "cosine")

  @property
  def scale(self) -> float:
    return float(self.config.ranker.get("scale", 20.0))

  @property
  def segments(self) -> SegmenterConfig:
    """How documents were cut into segments in training."""
    return SegmenterConfig(**self.config.segments.to_dict())

  def make(self, rngs: nnx.Rngs) -> nnx.Module:
    """A fresh (random) model of this architecture."""
    return make_model(self.kind, self.bert, self.config, rngs)

  def tokenizer(self):
    """The fast Hugging Face tokenizer the model was trained with."""
    return AutoTokenizer.from_pretrained(self.tokenizer_dir,
                                         local_files_only=True)


def make_model(kind: str, bert: BertConfig,
               config: ml_collections.ConfigDict, rngs: nnx.Rngs
               ) -> nnx.Module:
  """A random ranker of `kind` ("cross" or "bi", whose similarity and scale
  come from `config.ranker`)."""
  if kind == "bi":
    return BiEncoderRanker(bert, rngs=rngs,
                           similarity=config.ranker.get("similarity",
                                                        "cosine"),
                           scale=config.ranker.get("scale", 20.0))
  return CrossEncoderRanker(bert, rngs=rngs)


def _read_json(path: epath.Path) -> Any:
  try:
    return json.loads(read_text(path))
  except ValueError as e:
    raise InputError(f"not valid JSON: {e}", os.fspath(path)) from None


def stage_and_key(name: str, config: ml_collections.ConfigDict,
                  metrics: dict | None) -> tuple[str, str, str]:
  """(canonical name, stage, parameter key) of a model name."""
  agg = config.eval.aggregation
  wanted = name.strip().lower().replace("_", "-")
  wanted = re.sub(r"^best(\d+)$", r"best-\1", wanted)
  if wanted == "best":
    selected = (metrics or {}).get("selected_best")
    if not selected:
      raise InputError("`best` is the BeST iteration chosen on dev, and "
                       "metrics.json names none (the experiment has not "
                       "finished, or trained no BeST); name an iteration "
                       "(best-1, best-2, ...) instead")
    wanted = selected.lower()
  if wanted == "qds":
    raise InputError(
        "the QDS-Transformer cannot be used outside its experiment: it reads "
        "a whole document in one row with query-directed sparse attention, "
        "which no standard Hugging Face model expresses")
  fixed = {"firstp": ("firstp", "first"), "maxp": ("firstp", agg),
           "maxp-all": ("maxp_all", agg), "goldp": ("goldp", agg),
           "longp": ("longp", "first"), "best-0": ("best1", "theta0")}
  if wanted in fixed:
    return (wanted, *fixed[wanted])
  match = re.fullmatch(r"best-(\d+)", wanted)
  if match:
    return wanted, f"best{int(match.group(1))}", agg
  raise InputError(f"unknown model {name!r}; one of "
                   f"{', '.join(MODEL_NAMES)} (best-0 is θ0)")


def tokenizer_dir(config: ml_collections.ConfigDict) -> str:
  """The checkpoint directory whose tokenizer the experiment used."""
  return pretrained.checkpoint_dir(config.ranker.get("checkpoint")
                                   or pretrained.MINILM)


def from_workdir(workdir: str | os.PathLike, name: str) -> TrainedModel:
  """Model `name` of a `best_jax train` work directory, read to the host."""
  root = epath.Path(os.fspath(workdir))
  if not (root / "config.json").exists():
    raise InputError("no config.json: not a `best_jax train` work directory",
                     os.fspath(workdir))
  config = ml_collections.ConfigDict(_read_json(root / "config.json"))
  kind = config.ranker.get("kind", "cross")
  metrics_path = root / "metrics.json"
  metrics = _read_json(metrics_path) if metrics_path.exists() else None
  canonical, stage, key = stage_and_key(name, config, metrics)
  record_path = root / "stages" / f"{stage}.json"
  if not record_path.exists():
    done = sorted(p.stem for p in (root / "stages").glob("*.json"))
    raise InputError(f"model {name!r} needs the finished stage {stage!r}, "
                     f"which this work directory does not have (finished: "
                     f"{', '.join(done) or 'none'})", os.fspath(workdir))
  keys = _read_json(record_path)["keys"]
  if key == "theta0" and config.get("best", {}).get("theta0") == "pretrained":
    raise InputError("best-0 is the pretrained checkpoint in this work "
                     "directory (best.theta0=pretrained): no θ0 was trained; "
                     "use the checkpoint itself", os.fspath(workdir))
  if key not in keys:
    raise InputError(f"stage {stage!r} has no parameters {key!r} (it has "
                     f"{', '.join(keys)})", os.fspath(record_path))
  bert = pretrained.ranker_config(config.ranker)
  if stage == "longp":  # Its own rows: the first `longp.max_len` tokens.
    config = longp.long_config(config, bert.positions)
  _, like = abstract_params(
      lambda rngs: make_model(kind, bert, config, rngs))
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  like = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), like)
  params = load_params(root / "stages" / stage, {k: like for k in keys})[key]
  return TrainedModel(
      name=canonical, kind=kind, bert=bert, params=jax.device_get(params),
      config=config, tokenizer_dir=tokenizer_dir(config),
      aggregation=config.eval.aggregation if key == "theta0" else key,
      origin={"workdir": os.fspath(workdir), "stage": stage, "key": key})
