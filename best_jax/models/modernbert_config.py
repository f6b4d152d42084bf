"""The shape and numerics of a ModernBERT encoder and its classification
head, read from transformers' `config.json` (v4 or v5 fields) or made tiny
for tests; `to_hf` gives transformers' `ModernBertConfig` arguments back."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from best_jax.errors import InputError

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": functools.partial(jax.nn.gelu, approximate=False),
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_fast": functools.partial(jax.nn.gelu, approximate=True),
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
}
POOLINGS = ("cls", "mean")
GLOBAL, LOCAL = "full_attention", "sliding_attention"


@dataclasses.dataclass(frozen=True)
class ModernBertConfig:
  """Shape and numerics of a ModernBERT encoder and its classification head.

  `layer_types[i]` is "full_attention" (global) or "sliding_attention"
  (local); None: every `global_every`-th layer, from layer 0, is global.
  `dtype` is the activation dtype; the head runs in float32.
  `attention_block` is `BertConfig`'s, for the global layers. `model_type`
  and `head` name the family (`models.families`) and its head.
  """
  vocab_size: int = 50368
  hidden_size: int = 768
  num_layers: int = 22
  num_heads: int = 12
  intermediate_size: int = 1152
  max_position_embeddings: int = 8192
  norm_eps: float = 1e-5
  norm_bias: bool = False
  attention_bias: bool = False
  mlp_bias: bool = False
  classifier_bias: bool = False
  hidden_activation: str = "gelu"
  classifier_activation: str = "gelu"
  local_attention: int = 128
  global_every: int = 3
  layer_types: tuple[str, ...] | None = None
  global_rope_theta: float = 160_000.0
  local_rope_theta: float = 10_000.0
  classifier_pooling: str = "cls"
  embedding_dropout: float = 0.0
  attention_dropout: float = 0.0
  mlp_dropout: float = 0.0
  classifier_dropout: float = 0.0
  pad_token_id: int = 50283
  cls_token_id: int = 50281
  sep_token_id: int = 50282
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  attention_block: int | None = None
  model_type: str = "modernbert"
  head: str = "modernbert"

  def __post_init__(self):
    if self.layer_types is None:
      object.__setattr__(self, "layer_types", tuple(
          LOCAL if i % self.global_every else GLOBAL
          for i in range(self.num_layers)))
    object.__setattr__(self, "layer_types", tuple(self.layer_types))
    checks = [
        (self.hidden_size % self.num_heads == 0,
         f"hidden_size {self.hidden_size} is not a multiple of "
         f"num_attention_heads {self.num_heads}"),
        (len(self.layer_types) == self.num_layers,
         f"{len(self.layer_types)} layer_types for {self.num_layers} layers"),
        (set(self.layer_types) <= {GLOBAL, LOCAL},
         f"layer_types must be {GLOBAL!r} or {LOCAL!r}"),
        (self.local_attention >= 2,
         f"local_attention {self.local_attention} must be at least 2"),
        (self.classifier_pooling in POOLINGS,
         f"classifier_pooling {self.classifier_pooling!r} is not one of "
         f"{', '.join(POOLINGS)}"),
    ] + [(getattr(self, name) in ACTIVATIONS,
          f"{name} {getattr(self, name)!r} is not supported (one of "
          f"{', '.join(ACTIVATIONS)})")
         for name in ("hidden_activation", "classifier_activation")]
    for ok, message in checks:
      if not ok:
        raise InputError(message)

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  @property
  def positions(self) -> int:
    """The longest row (`BertConfig.positions`): rotary positions need no
    table, but the checkpoint was trained up to this many."""
    return self.max_position_embeddings

  @property
  def hidden_dropout(self) -> float:
    """`BertConfig`'s name for the dropout of hidden states: here the
    embeddings' and the feed-forward's (`from_hf` sets both from it)."""
    return max(self.embedding_dropout, self.mlp_dropout)

  @classmethod
  def tiny(cls, **overrides: Any) -> ModernBertConfig:
    """A tiny random configuration for tests: hidden 32, 4 layers (global,
    local, global, local), window 8."""
    values = dict(vocab_size=128, hidden_size=32, num_layers=4, num_heads=2,
                  intermediate_size=48, max_position_embeddings=128,
                  local_attention=8, global_every=2, pad_token_id=0,
                  cls_token_id=1, sep_token_id=2)
    return cls(**dict(values, **overrides))

  @classmethod
  def from_hf(cls, hf: dict[str, Any], source: str | None = None,
              **overrides: Any) -> ModernBertConfig:
    """From a transformers `config.json` dict (v4 or v5 rope fields); an
    override `hidden_dropout` sets `embedding_dropout` and `mlp_dropout`."""
    if "hidden_dropout" in overrides:
      rate = overrides.pop("hidden_dropout")
      overrides = dict(dict(embedding_dropout=rate, mlp_dropout=rate),
                       **overrides)
    if hf.get("model_type") != "modernbert":
      raise InputError(f"model_type {hf.get('model_type')!r} is not "
                       "'modernbert'", source)
    names = dict(vocab_size="vocab_size", hidden_size="hidden_size",
                 num_layers="num_hidden_layers",
                 num_heads="num_attention_heads",
                 intermediate_size="intermediate_size")
    missing = [key for key in names.values() if key not in hf]
    if missing:
      raise InputError(f"config.json lacks {', '.join(missing)}", source)
    values = {field: hf[key] for field, key in names.items()}
    for field in ("max_position_embeddings", "norm_eps", "norm_bias",
                  "attention_bias", "mlp_bias", "classifier_bias",
                  "hidden_activation", "classifier_activation",
                  "local_attention", "classifier_pooling",
                  "embedding_dropout", "attention_dropout", "mlp_dropout",
                  "classifier_dropout", "pad_token_id", "cls_token_id",
                  "sep_token_id", "layer_types", "global_rope_theta",
                  "local_rope_theta"):
      if hf.get(field) is not None:
        values[field] = hf[field]
    if hf.get("global_attn_every_n_layers") is not None:
      values["global_every"] = hf["global_attn_every_n_layers"]
    if hf.get("rope_scaling"):
      raise InputError("rope_scaling is not supported", source)
    for kind, field in ((GLOBAL, "global_rope_theta"),
                        (LOCAL, "local_rope_theta")):
      rope = (hf.get("rope_parameters") or {}).get(kind) or {}
      if rope.get("rope_type", "default") != "default":
        raise InputError(f"rope_type {rope['rope_type']!r} is not supported "
                         "(only 'default')", source)
      if "rope_theta" in rope:
        values[field] = rope["rope_theta"]
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
      raise InputError(f"{', '.join(unknown)}: not a ModernBERT config field",
                       source)
    try:
      return cls(**dict(values, **overrides))
    except InputError as e:
      raise InputError(e.message, source) from None

  def to_hf(self) -> dict[str, Any]:
    """The transformers `ModernBertConfig` keyword arguments."""
    return dict(
        vocab_size=self.vocab_size, hidden_size=self.hidden_size,
        num_hidden_layers=self.num_layers,
        num_attention_heads=self.num_heads,
        intermediate_size=self.intermediate_size,
        max_position_embeddings=self.max_position_embeddings,
        norm_eps=self.norm_eps, norm_bias=self.norm_bias,
        attention_bias=self.attention_bias, mlp_bias=self.mlp_bias,
        classifier_bias=self.classifier_bias,
        hidden_activation=self.hidden_activation,
        classifier_activation=self.classifier_activation,
        local_attention=self.local_attention,
        layer_types=list(self.layer_types),
        global_attn_every_n_layers=self.global_every,
        rope_parameters={
            GLOBAL: {"rope_type": "default",
                     "rope_theta": self.global_rope_theta},
            LOCAL: {"rope_type": "default",
                    "rope_theta": self.local_rope_theta}},
        classifier_pooling=self.classifier_pooling,
        embedding_dropout=self.embedding_dropout,
        attention_dropout=self.attention_dropout,
        mlp_dropout=self.mlp_dropout,
        classifier_dropout=self.classifier_dropout,
        pad_token_id=self.pad_token_id, cls_token_id=self.cls_token_id,
        bos_token_id=self.cls_token_id, sep_token_id=self.sep_token_id,
        eos_token_id=self.sep_token_id)
