"""The shape and numerics of a BERT encoder, read from Hugging Face's
`config.json` or made tiny for tests."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from best_jax.errors import InputError


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """Shape and numerics of a BERT encoder.

  `dtype` is the activation/compute dtype (float32 or bfloat16); parameters are
  stored in `param_dtype`. Softmax and LayerNorm statistics are always float32.

  `model_type` names the family (`models.families`) whose config.json, tensor
  names and Hugging Face classes the encoder follows. `embedding_size`
  (ELECTRA) is the width of the embeddings when they are projected to
  `hidden_size`; `position_offset` (RoBERTa, XLM-R: padding_idx + 1) is the
  position of a row's first token. `head` is the cross-encoder's head on the
  first token's hidden state (`models.ranker.HEADS`): `linear` (w·h + b),
  `tanh` or `gelu` (w·act(W h + c) + b, the BERT pooler and classifier,
  RoBERTa's and ELECTRA's classification heads).

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
  model_type: str = "bert"
  embedding_size: int | None = None
  position_offset: int = 0
  head: str = "linear"

  def __post_init__(self):
    if self.hidden_size % self.num_heads:
      raise InputError(f"hidden_size {self.hidden_size} is not a multiple of "
                       f"num_heads {self.num_heads}")

  @property
  def positions(self) -> int:
    """The longest row: the position table's rows from `position_offset`."""
    return self.max_position_embeddings - self.position_offset

  @property
  def embedding_width(self) -> int:
    """The width of the embedding tables (`hidden_size` unless projected)."""
    return self.embedding_size or self.hidden_size

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
  def from_hf(cls, hf: dict[str, Any], path: str,
              **overrides: Any) -> BertConfig:
    """A BERT-like encoder from config.json's values `hf` (read from
    `path`): BERT's keys; `overrides` (the family's and the caller's) win."""
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
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
      raise InputError(f"{', '.join(unknown)}: not a BERT config field", path)
    values.update(overrides)
    return cls(**values)
