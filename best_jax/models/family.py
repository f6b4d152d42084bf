"""What an encoder family provides (`models.families` holds one per
`model_type`): how to read its config.json, which encoder and head to build,
and its tensor names in both directions (plain maps: no tensor is rescaled).

  encoder_tensors(config)  {name in the *Model: (path in the encoder,
                            to best_jax, to transformers)}
  head_tensors(config)     {name in the *ForSequenceClassification: (path in
                            `CrossEncoderRanker`, to best_jax, to
                            transformers)}; the encoder's names there are
                            `prefix` + the *Model's
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from flax import nnx

Path = tuple[str | int, ...]
Convert = Callable[[np.ndarray], np.ndarray]
# A tensor: its path in best_jax's model, the conversion of transformers'
# array to best_jax's, and its inverse.
Tensor = tuple[Path, Convert, Convert]


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
