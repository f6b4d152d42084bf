"""The ModernBERT family (`models.families`): transformers' tensor names of
`ModernBertModel` / `ModernBertForSequenceClassification` <-> NNX paths of
`ModernBertEncoder` and its `ClassificationHead`, plain maps both ways, and
the export's transformers config."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import transformers

from best_jax.errors import InputError
from best_jax.models.family import Convert, Family, Tensor
from best_jax.models.modernbert import ClassificationHead, ModernBertEncoder
from best_jax.models.modernbert_config import ModernBertConfig

# name → (NNX path, transformers' array → best_jax's, the inverse).
Tensors = dict[str, Tensor]
PREFIX = "model."  # The encoder's names in the sequence classifier.


def _checked(name: str, shape: tuple[int, ...], convert: Convert) -> Convert:
  """`convert`, after an InputError for an array not of `shape`."""
  def checked(array: np.ndarray) -> np.ndarray:
    if tuple(array.shape) != shape:
      raise InputError(f"tensor {name} has shape {tuple(array.shape)}, the "
                       f"config.json's model has {shape}")
    return convert(array)
  return checked


def _tensor_map(config: ModernBertConfig, layout: list) -> Tensors:
  """`layout`: (name, path, kind, in shape, out shape) with kind `linear`
  ([out, in] weight → kernel [*in, *out], bias → [*out], the bias only
  when the out shape's flag is set) or `norm` / `table` (as they are)."""
  names: Tensors = {}
  for name, path, kind, shape_in, shape_out, bias in layout:
    if kind == "linear":
      size_in, size_out = math.prod(shape_in), math.prod(shape_out)
      names[f"{name}.weight"] = (
          path + ("kernel",),
          _checked(f"{name}.weight", (size_out, size_in),
                   lambda w, s=shape_in + shape_out: w.T.reshape(s)),
          lambda x, s=(size_in, size_out): x.reshape(s).T)
      bias_shape = shape_out
    else:
      names[f"{name}.weight"] = (
          path + ("embedding" if kind == "table" else "scale",),
          _checked(f"{name}.weight", shape_in, lambda w: w), lambda x: x)
      bias_shape = shape_in
    if bias:
      names[f"{name}.bias"] = (
          path + ("bias",),
          _checked(f"{name}.bias", (math.prod(bias_shape),),
                   lambda b, s=bias_shape: b.reshape(s)),
          lambda x: x.reshape(-1))
  return names


def encoder_tensors(config: ModernBertConfig) -> Tensors:
  """`ModernBertModel`'s tensor names → paths in `ModernBertEncoder`."""
  d, m = config.hidden_size, config.intermediate_size
  heads = (config.num_heads, config.head_dim)
  norm = lambda name, path: (name, path, "norm", (d,), None,  # pylint: disable=unnecessary-lambda-assignment
                             config.norm_bias)
  layout = [("embeddings.tok_embeddings", ("embeddings", "word"), "table",
             (config.vocab_size, d), None, False),
            norm("embeddings.norm", ("embeddings", "norm"))]
  for i in range(config.num_layers):
    hf, layer = f"layers.{i}", ("layers", i)
    if i:
      layout.append(norm(f"{hf}.attn_norm", layer + ("attn_norm",)))
    layout += [
        (f"{hf}.attn.Wqkv", layer + ("attn", "qkv"), "linear", (d,),
         (3,) + heads, config.attention_bias),
        (f"{hf}.attn.Wo", layer + ("attn", "out"), "linear", heads, (d,),
         config.attention_bias),
        norm(f"{hf}.mlp_norm", layer + ("mlp_norm",)),
        (f"{hf}.mlp.Wi", layer + ("mlp", "wi"), "linear", (d,), (2, m),
         config.mlp_bias),
        (f"{hf}.mlp.Wo", layer + ("mlp", "wo"), "linear", (m,), (d,),
         config.mlp_bias)]
  layout.append(norm("final_norm", ("final_norm",)))
  return _tensor_map(config, layout)


def head_tensors(config: ModernBertConfig) -> Tensors:
  """`ModernBertForSequenceClassification`'s head and classifier (one
  label) → paths in a ranker whose `head` is a `ClassificationHead`."""
  d = config.hidden_size
  return _tensor_map(config, [
      ("head.dense", ("head", "dense"), "linear", (d,), (d,),
       config.classifier_bias),
      ("head.norm", ("head", "norm"), "norm", (d,), None, config.norm_bias),
      ("classifier", ("head", "classifier"), "linear", (d,), (1,), True)])


def read_config(hf: dict[str, Any], path: str, classifier: bool,
                **overrides: Any) -> ModernBertConfig:
  """The family's config of a config.json (`models.families`)."""
  del classifier  # A *Model starts a random ClassificationHead.
  return ModernBertConfig.from_hf(hf, path, **overrides)


def hf_config(config: ModernBertConfig, classifier: bool,
              pad_id: int) -> transformers.ModernBertConfig:
  """The transformers config of an export: the sequence classifier with one
  label (`classifier`) or the `ModernBertModel`."""
  name = ("ModernBertForSequenceClassification" if classifier
          else "ModernBertModel")
  return transformers.ModernBertConfig(
      architectures=[name], **dict(config.to_hf(), pad_token_id=pad_id),
      **(dict(num_labels=1) if classifier else {}))


FAMILY = Family(
    model_type="modernbert", read_config=read_config,
    encoder=lambda config, rngs: ModernBertEncoder(config, rngs=rngs),
    encoder_tensors=encoder_tensors, head_tensors=head_tensors,
    prefix=PREFIX, hf_config=hf_config,
    # A ModernBertForMaskedLM's head and decoder (a *Model's start).
    unused=r"^(head\.(dense|norm)\.(weight|bias)|decoder\.(weight|bias))$",
    head=lambda config, rngs: ClassificationHead(config, rngs=rngs))
