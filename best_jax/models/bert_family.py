"""The BERT family (`model_type` bert): `BertModel` and
`BertForSequenceClassification`, whose head is the pooler and classifier,
`classifier(tanh(pooler(h_[CLS])))` (best_jax's `tanh` head).

A `BertModel` checkpoint (MiniLM) starts a cross-encoder with best_jax's
own random `linear` head on `[CLS]` (SPEC §1; its pooler is not read).
Its tensor names are shared by ELECTRA and RoBERTa (`encoder_tensors`).
"""

from __future__ import annotations

from typing import Any

import transformers

from best_jax.models.bert import BertEncoder
from best_jax.models.bert_config import BertConfig
from best_jax.models.family import Family, Path, Tensor

SAME = (lambda w: w, lambda w: w)
TRANSPOSE = (lambda w: w.T, lambda w: w.T)
# Tensors of BERT-like checkpoints that best_jax reads past: the *Model's
# pooler, buffers, pretraining heads.
UNUSED = (r"^(pooler\.dense\.(weight|bias)|embeddings\.(position_ids"
          r"|token_type_ids)|cls\..*|lm_head\..*|discriminator_predictions\..*"
          r"|generator_.*)$")


def encoder_tensors(config: BertConfig) -> dict[str, Tensor]:
  """HF tensor name (no prefix) → (path in `BertEncoder`, conversion,
  inverse)."""
  heads, head_dim = config.num_heads, config.head_dim
  hidden = config.hidden_size
  # [out, in] → [embed, heads, kv] and [heads, kv, embed], and back.
  qkv_kernel = (lambda w: w.T.reshape(hidden, heads, head_dim),
                lambda k: k.reshape(hidden, heads * head_dim).T)
  qkv_bias = (lambda b: b.reshape(heads, head_dim),
              lambda b: b.reshape(heads * head_dim))
  out_kernel = (lambda w: w.T.reshape(heads, head_dim, hidden),
                lambda k: k.reshape(heads * head_dim, hidden).T)
  names: dict[str, Tensor] = {}

  def linear(hf: str, path: Path):
    names[f"{hf}.weight"] = (path + ("kernel",), *TRANSPOSE)
    names[f"{hf}.bias"] = (path + ("bias",), *SAME)

  def norm(hf: str, path: Path):
    names[f"{hf}.weight"] = (path + ("scale",), *SAME)
    names[f"{hf}.bias"] = (path + ("bias",), *SAME)

  for hf, nnx_name in (("word", "word"), ("position", "position"),
                       ("token_type", "token_type")):
    names[f"embeddings.{hf}_embeddings.weight"] = (
        ("embeddings", nnx_name, "embedding"), *SAME)
  norm("embeddings.LayerNorm", ("embeddings", "norm"))
  for i in range(config.num_layers):
    hf, layer = f"encoder.layer.{i}", ("layers", i)
    for part in ("query", "key", "value"):
      names[f"{hf}.attention.self.{part}.weight"] = (
          layer + ("attention", part, "kernel"), *qkv_kernel)
      names[f"{hf}.attention.self.{part}.bias"] = (
          layer + ("attention", part, "bias"), *qkv_bias)
    names[f"{hf}.attention.output.dense.weight"] = (
        layer + ("attention", "output", "kernel"), *out_kernel)
    names[f"{hf}.attention.output.dense.bias"] = (
        layer + ("attention", "output", "bias"), *SAME)
    norm(f"{hf}.attention.output.LayerNorm", layer + ("attention_norm",))
    linear(f"{hf}.intermediate.dense", layer + ("intermediate",))
    linear(f"{hf}.output.dense", layer + ("output",))
    norm(f"{hf}.output.LayerNorm", layer + ("output_norm",))
  return names


def dense_head_tensors(dense: str, out: str) -> dict[str, Tensor]:
  """A `DenseHead`'s tensors: its dense layer named `dense`, its output
  `out` (e.g. `bert.pooler.dense`, `classifier`)."""
  return {f"{dense}.weight": (("head", "dense", "kernel"), *TRANSPOSE),
          f"{dense}.bias": (("head", "dense", "bias"), *SAME),
          f"{out}.weight": (("head", "out", "kernel"), *TRANSPOSE),
          f"{out}.bias": (("head", "out", "bias"), *SAME)}


def hf_values(config: BertConfig, classifier: bool,
              pad_id: int) -> dict[str, Any]:
  """The transformers config values every BERT-like family shares."""
  return dict(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      num_hidden_layers=config.num_layers,
      num_attention_heads=config.num_heads,
      intermediate_size=config.intermediate_size, hidden_act="gelu",
      hidden_dropout_prob=config.hidden_dropout,
      attention_probs_dropout_prob=config.attention_dropout,
      max_position_embeddings=config.max_position_embeddings,
      type_vocab_size=config.type_vocab_size,
      layer_norm_eps=config.layer_norm_eps, pad_token_id=pad_id,
      **(dict(num_labels=1) if classifier else {}))


def _read_config(hf: dict, path: str, classifier: bool,
                 **overrides: Any) -> BertConfig:
  values = dict(model_type="bert", head="tanh" if classifier else "linear")
  return BertConfig.from_hf(hf, path, **dict(values, **overrides))


def _hf_config(config: BertConfig, classifier: bool,
               pad_id: int) -> transformers.BertConfig:
  name = "BertForSequenceClassification" if classifier else "BertModel"
  return transformers.BertConfig(architectures=[name],
                                 **hf_values(config, classifier, pad_id))


FAMILY = Family(
    model_type="bert", read_config=_read_config,
    encoder=lambda config, rngs: BertEncoder(config, rngs=rngs),
    encoder_tensors=encoder_tensors,
    head_tensors=lambda config: dense_head_tensors("bert.pooler.dense",
                                                   "classifier"),
    prefix="bert.", hf_config=_hf_config, unused=UNUSED)
