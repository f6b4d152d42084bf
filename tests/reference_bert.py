"""A plain numpy BERT forward pass over Hugging Face tensor names (test oracle).

Written from the BERT paper / `transformers.BertModel` independently of
best_jax.models.bert, in float64, so tests can compare against it without torch.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np


def random_hf_tensors(config: dict, seed: int = 0) -> dict[str, np.ndarray]:
  """Random float32 tensors with Hugging Face BertModel names and shapes."""
  rng = np.random.default_rng(seed)
  hidden, inner = config["hidden_size"], config["intermediate_size"]

  def normal(*shape):
    return rng.normal(0.0, 0.2, shape).astype(np.float32)

  tensors = {
      "embeddings.word_embeddings.weight": normal(config["vocab_size"], hidden),
      "embeddings.position_embeddings.weight":
          normal(config["max_position_embeddings"], hidden),
      "embeddings.token_type_embeddings.weight":
          normal(config["type_vocab_size"], hidden),
      "embeddings.LayerNorm.weight": 1.0 + normal(hidden),
      "embeddings.LayerNorm.bias": normal(hidden),
      "pooler.dense.weight": normal(hidden, hidden),
      "pooler.dense.bias": normal(hidden),
  }
  for i in range(config["num_hidden_layers"]):
    p = f"encoder.layer.{i}."
    for part in ("query", "key", "value"):
      tensors[p + f"attention.self.{part}.weight"] = normal(hidden, hidden)
      tensors[p + f"attention.self.{part}.bias"] = normal(hidden)
    tensors[p + "attention.output.dense.weight"] = normal(hidden, hidden)
    tensors[p + "attention.output.dense.bias"] = normal(hidden)
    tensors[p + "attention.output.LayerNorm.weight"] = 1.0 + normal(hidden)
    tensors[p + "attention.output.LayerNorm.bias"] = normal(hidden)
    tensors[p + "intermediate.dense.weight"] = normal(inner, hidden)
    tensors[p + "intermediate.dense.bias"] = normal(inner)
    tensors[p + "output.dense.weight"] = normal(hidden, inner)
    tensors[p + "output.dense.bias"] = normal(hidden)
    tensors[p + "output.LayerNorm.weight"] = 1.0 + normal(hidden)
    tensors[p + "output.LayerNorm.bias"] = normal(hidden)
  return tensors


TINY_HF_CONFIG = {
    "model_type": "bert", "hidden_act": "gelu", "vocab_size": 128,
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 64, "max_position_embeddings": 64,
    "type_vocab_size": 2, "layer_norm_eps": 1e-12,
    "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
}


def write_checkpoint(directory: str, config: dict,
                     tensors: dict[str, np.ndarray]) -> str:
  """Writes config.json and model.safetensors; returns the directory."""
  from safetensors.numpy import save_file
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(config, f)
  save_file(tensors, os.path.join(directory, "model.safetensors"))
  return directory


def _layer_norm(x, weight, bias, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * weight + bias


def _gelu(x):
  erf = np.vectorize(math.erf)
  return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def bert_forward(tensors: dict[str, np.ndarray], config: dict, input_ids,
                 attention_mask, token_type_ids) -> np.ndarray:
  """Final hidden states [batch, length, hidden] of BertModel, float64."""
  t = {k: v.astype(np.float64) for k, v in tensors.items()}
  eps = config["layer_norm_eps"]
  heads = config["num_attention_heads"]
  batch, length = input_ids.shape
  x = (t["embeddings.word_embeddings.weight"][input_ids]
       + t["embeddings.position_embeddings.weight"][np.arange(length)][None]
       + t["embeddings.token_type_embeddings.weight"][token_type_ids])
  x = _layer_norm(x, t["embeddings.LayerNorm.weight"],
                  t["embeddings.LayerNorm.bias"], eps)
  hidden = x.shape[-1]
  d = hidden // heads
  # transformers uses the dtype minimum as the additive mask.
  additive = np.where(np.asarray(attention_mask, bool), 0.0,
                      np.finfo(np.float64).min)[:, None, None, :]
  for i in range(config["num_hidden_layers"]):
    p = f"encoder.layer.{i}."

    def dense(h, name):
      return h @ t[p + name + ".weight"].T + t[p + name + ".bias"]

    def split(h):
      return h.reshape(batch, length, heads, d).transpose(0, 2, 1, 3)

    q = split(dense(x, "attention.self.query"))
    k = split(dense(x, "attention.self.key"))
    v = split(dense(x, "attention.self.value"))
    logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + additive
    logits -= logits.max(-1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
    x = _layer_norm(x + dense(context, "attention.output.dense"),
                    t[p + "attention.output.LayerNorm.weight"],
                    t[p + "attention.output.LayerNorm.bias"], eps)
    inner = _gelu(dense(x, "intermediate.dense"))
    x = _layer_norm(x + dense(inner, "output.dense"),
                    t[p + "output.LayerNorm.weight"],
                    t[p + "output.LayerNorm.bias"], eps)
  return x
