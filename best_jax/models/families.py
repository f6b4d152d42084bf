"""Encoder families: how a Hugging Face checkpoint's `model_type` becomes a
best_jax encoder, and a trained model becomes that family's transformers
classes again.

One `Family` per `model_type` of config.json, in `FAMILIES`. A family says
how to read its config.json, which encoder module to build, and its tensor
names in both directions (plain maps: no tensor is rescaled):

  encoder_tensors(config)  {name in the *Model: (path in the encoder,
                            to best_jax, to transformers)}
  head_tensors(config)     {name in the *ForSequenceClassification: (path in
                            `CrossEncoderRanker`, to best_jax, to
                            transformers)}; the encoder's names there are
                            `prefix` + the *Model's

Adding a family is one module that defines a `Family` and one line in
`FAMILIES`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np
from flax import nnx

from best_jax.errors import InputError

Path = tuple[str | int, ...]
Convert = Callable[[np.ndarray], np.ndarray]
# A tensor: its path in best_jax's model, the conversion of transformers'
# array to best_jax's, and its inverse.
Tensor = tuple[Path, Convert, Convert]
CLASSIFIER = "ForSequenceClassification"


@dataclasses.dataclass(frozen=True)
class Family:
  """One `model_type` (see the module docstring).

  Attributes:
    model_type: config.json's `model_type`.
    read_config: (config.json's values, its path, whether the checkpoint is
      a *ForSequenceClassification, overrides) → the encoder config (a
      frozen dataclass with at least `model_type`, `head`, `hidden_size`,
      `positions` (the longest row) and the `BertConfig` numerics fields
      `dtype`, `param_dtype`).
    encoder: (config, rngs) → the encoder module (`BertEncoder`'s calls).
    encoder_tensors: see the module docstring.
    head_tensors: see the module docstring.
    prefix: the encoder's name prefix in the *ForSequenceClassification.
    hf_config: (config, classifier, pad id) → the `transformers`
      config of the export (`classifier`: the *ForSequenceClassification
      with one label, else the *Model).
    unused: a regular expression of checkpoint tensor names (without
      `prefix`) that best_jax reads past (a pooler, pretraining heads).
    head: (config, rngs) → the ranker's head, when not `ranker.score_head`.
  """
  model_type: str
  read_config: Callable[..., Any]
  encoder: Callable[[Any, nnx.Rngs], nnx.Module]
  encoder_tensors: Callable[[Any], dict[str, Tensor]]
  head_tensors: Callable[[Any], dict[str, Tensor]]
  prefix: str
  hf_config: Callable[[Any, bool, int], Any]
  unused: str = r"$^"
  head: Callable[[Any, nnx.Rngs], nnx.Module] | None = None


def _families() -> dict[str, Family]:
  # pylint: disable=import-outside-toplevel
  from best_jax.models import bert_family, electra, modernbert, roberta
  return {
      "bert": bert_family.FAMILY,
      "electra": electra.FAMILY,
      "roberta": roberta.ROBERTA,
      "xlm-roberta": roberta.XLM_ROBERTA,
      "modernbert": modernbert.FAMILY,
  }


def model_types() -> tuple[str, ...]:
  """The supported `model_type`s, sorted."""
  return tuple(sorted(_families()))


def family(model_type: str, source: str | None = None) -> Family:
  """The family of `model_type`; an InputError naming the supported ones."""
  if model_type not in _families():
    raise InputError(f"model_type {model_type!r} is not supported (one of "
                     f"{', '.join(model_types())})", source)
  return _families()[model_type]


def read_hf_config(checkpoint_dir: str | os.PathLike) -> tuple[dict, str]:
  """config.json's values of a checkpoint directory, and its path."""
  path = os.path.join(os.fspath(checkpoint_dir), "config.json")
  try:
    with open(path, encoding="utf-8") as f:
      values = json.load(f)
  except FileNotFoundError:
    raise InputError("no config.json in checkpoint directory", path) from None
  except (OSError, ValueError) as e:
    raise InputError(f"cannot read config: {e}", path) from None
  if not isinstance(values, dict):
    raise InputError("config.json is not an object", path)
  return values, path


def is_classifier(hf: dict, path: str) -> bool:
  """Whether config.json describes a *ForSequenceClassification; it must
  have one label (best_jax's score)."""
  if not any(str(a).endswith(CLASSIFIER) for a in hf.get("architectures")
             or ()):
    return False
  labels = len(hf.get("id2label") or {}) or hf.get("num_labels", 2)
  if labels != 1:
    raise InputError(f"a sequence classifier with {labels} labels; best_jax "
                     "needs one (num_labels=1: the relevance score)", path)
  return True


def read_config(checkpoint_dir: str | os.PathLike, **overrides: Any) -> Any:
  """The encoder config of a Hugging Face checkpoint directory."""
  hf, path = read_hf_config(checkpoint_dir)
  model_type = hf.get("model_type", "bert")
  return family(model_type, path).read_config(
      hf, path, is_classifier(hf, path), **overrides)
