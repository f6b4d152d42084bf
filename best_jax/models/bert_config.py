"""The shape and numerics of a BERT encoder, read from Hugging Face's
`config.json` or made tiny for tests."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax.numpy as jnp

from best_jax.errors import InputError


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """Shape and numerics of a BERT encoder.

  `dtype` is the activation/compute dtype (float32 or bfloat16); parameters are
  stored in `param_dtype`. Softmax and LayerNorm statistics are always float32.

  `attention_block`: None (the default) chooses per backend and shape at
  trace time (`attention_plan`): on XLA CPU with one device, a sequential
  loop over blocks of (sequence, head) pairs whose [length, length] scores
  fit in cache; elsewhere one batched einsum. 0 forces the batched form, a
  positive number that many pairs per block.
  """
  vocab_size: int = 30522
  hidden_size: int = 768
  num_layers: int = 12
  num_heads: int = 12
  intermediate_size: int = 3072
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  hidden_dropout: float = 0.1
  attention_dropout: float = 0.1
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  attention_block: int | None = None

  def __post_init__(self):
    if self.hidden_size % self.num_heads:
      raise InputError(f"hidden_size {self.hidden_size} is not a multiple of "
                       f"num_heads {self.num_heads}")

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  @classmethod
  def tiny(cls, **overrides: Any) -> BertConfig:
    """A tiny random configuration for tests (vocab 128, hidden 32)."""
    values = dict(vocab_size=128, hidden_size=32, num_layers=2, num_heads=2,
                  intermediate_size=64, max_position_embeddings=128)
    values.update(overrides)
    return cls(**values)

  @classmethod
  def from_checkpoint(cls, checkpoint_dir: str | os.PathLike,
                      **overrides: Any) -> BertConfig:
    """Reads a Hugging Face BERT `config.json` (BERT, MiniLM and the like)."""
    path = os.path.join(os.fspath(checkpoint_dir), "config.json")
    try:
      with open(path, encoding="utf-8") as f:
        hf = json.load(f)
    except FileNotFoundError:
      raise InputError("no config.json in checkpoint directory", path) from None
    except (OSError, ValueError) as e:
      raise InputError(f"cannot read config: {e}", path) from None
    model_type = hf.get("model_type", "bert")
    if model_type != "bert":
      raise InputError(f"model_type {model_type!r} is not supported (only "
                       "'bert')", path)
    activation = hf.get("hidden_act", "gelu")
    if activation != "gelu":
      raise InputError(f"hidden_act {activation!r} is not supported (only "
                       "'gelu')", path)
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
      raise InputError(f"position_embedding_type {position_type!r} is not "
                       "supported (only 'absolute')", path)
    names = {
        "vocab_size": "vocab_size",
        "hidden_size": "hidden_size",
        "num_layers": "num_hidden_layers",
        "num_heads": "num_attention_heads",
        "intermediate_size": "intermediate_size",
        "max_position_embeddings": "max_position_embeddings",
        "type_vocab_size": "type_vocab_size",
        "layer_norm_eps": "layer_norm_eps",
        "hidden_dropout": "hidden_dropout_prob",
        "attention_dropout": "attention_probs_dropout_prob",
    }
    values = {}
    for field, key in names.items():
      if key in hf:
        values[field] = hf[key]
      elif field in ("vocab_size", "hidden_size", "num_layers", "num_heads",
                     "intermediate_size"):
        raise InputError(f"config.json lacks {key!r}", path)
    values.update(overrides)
    return cls(**values)
