"""Encoder families: how a Hugging Face checkpoint's `model_type` becomes a
best_jax encoder, and a trained model becomes that family's transformers
classes again.

One `Family` (`models.family`) per `model_type` of config.json, in
`FAMILIES`. Adding a family is one module that defines a `Family` and one
line in `FAMILIES`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from best_jax.errors import InputError
from best_jax.models import bert_family, electra, modernbert_family, roberta
from best_jax.models.family import Family

CLASSIFIER = "ForSequenceClassification"
FAMILIES: dict[str, Family] = {
    "bert": bert_family.FAMILY,
    "electra": electra.FAMILY,
    "roberta": roberta.ROBERTA,
    "xlm-roberta": roberta.XLM_ROBERTA,
    "modernbert": modernbert_family.FAMILY,
}


def model_types() -> tuple[str, ...]:
  """The supported `model_type`s, sorted."""
  return tuple(sorted(FAMILIES))


def family(model_type: str, source: str | None = None) -> Family:
  """The family of `model_type`; an InputError naming the supported ones."""
  if model_type not in FAMILIES:
    raise InputError(f"model_type {model_type!r} is not supported (one of "
                     f"{', '.join(model_types())})", source)
  return FAMILIES[model_type]


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
