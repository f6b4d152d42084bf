"""Hugging Face directories of trained models: `write_export` and its
inverse `read_export` (bit-exact).

A cross-encoder becomes a `BertForSequenceClassification` with one label:
`config.json`, `model.safetensors` (`bert.*`, `classifier.*`) and the
tokenizer files. best_jax's head reads the `[CLS]` hidden state `h` directly
(`w · h + b`), while transformers puts a pooler `tanh(W h + c)` before the
classifier; the export makes that pooler the identity: `W = 2⁻²⁰ · I`,
`c = 0`, so `tanh` of inputs that small returns them unchanged (to float32
rounding), and the classifier is `2²⁰ · w` (powers of two: both scalings
are exact, and best_jax reads the head back bit for bit).
`AutoModelForSequenceClassification` then gives best_jax's score as its
logit. (Fine-tuning the export further in transformers starts from that
scaled pooler.)

A bi-encoder becomes a sentence-transformers model: the `BertModel` files
plus `modules.json` (Transformer → mean Pooling → Normalize for cosine),
`1_Pooling/config.json`, `sentence_bert_config.json` (`max_seq_length`: the
training rows' length) and `config_sentence_transformers.json` (the
similarity). sentence-transformers' `similarity` is the cosine; best_jax's
score is `scale · cosine` (`scale` in best_jax.json) or the dot product.

`best_jax.json` holds what transformers cannot express: the kind, segmenter
settings, aggregation, the head scaling and the whole training config.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile

import jax
import ml_collections
import numpy as np
import transformers
from flax import nnx
from safetensors.numpy import save_file

from best_jax import __version__
from best_jax.errors import InputError
from best_jax.models import BertConfig, load_ranker
from best_jax.models.bi_encoder import load_bi_encoder
from best_jax.models.weights import encoder_tensors
from best_jax.serve.trained import TrainedModel
from best_jax.train.state import split_params

MANIFEST = "best_jax.json"
FORMAT = 1
# The pooler is 2**-HEAD_LOG2 · I and the classifier 2**HEAD_LOG2 · w: with
# |h| < 2**8, |2**-20 h| < 2**-12, where float32 tanh(x) == x.
HEAD_LOG2 = 20
# `BertConfig` fields that config.json does not hold (the rest it does).
NOT_IN_HF_CONFIG = ("attention_block", "dtype", "param_dtype")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "vocab.txt", "added_tokens.json")


def _flat(params: nnx.State) -> dict[tuple, np.ndarray]:
  return {path: np.asarray(variable.get_value())
          for path, variable in nnx.to_flat_state(params)}


def hf_tensors(model: TrainedModel) -> dict[str, np.ndarray]:
  """The model's tensors under transformers' names (see the docstring)."""
  arrays = _flat(model.params)
  encoder = encoder_tensors({p[1:]: a for p, a in arrays.items()
                             if p[0] == "encoder"}, model.bert)
  hidden = model.bert.hidden_size
  eye = np.eye(hidden, dtype=np.float32)
  if model.kind == "bi":
    return dict(encoder, **{"pooler.dense.weight": eye,
                            "pooler.dense.bias": np.zeros(hidden, np.float32)})
  tensors = {f"bert.{name}": array for name, array in encoder.items()}
  tensors["bert.pooler.dense.weight"] = np.ldexp(eye, -HEAD_LOG2)
  tensors["bert.pooler.dense.bias"] = np.zeros(hidden, np.float32)
  kernel = arrays[("head", "kernel")].astype(np.float32)  # [hidden, 1]
  tensors["classifier.weight"] = np.ascontiguousarray(
      np.ldexp(kernel, HEAD_LOG2).T)
  tensors["classifier.bias"] = arrays[("head", "bias")].astype(np.float32)
  return tensors


def hf_config(model: TrainedModel, pad_id: int) -> transformers.BertConfig:
  b = model.bert
  extra = (dict(architectures=["BertModel"]) if model.kind == "bi" else
           dict(architectures=["BertForSequenceClassification"],
                num_labels=1))
  return transformers.BertConfig(
      vocab_size=b.vocab_size, hidden_size=b.hidden_size,
      num_hidden_layers=b.num_layers, num_attention_heads=b.num_heads,
      intermediate_size=b.intermediate_size, hidden_act="gelu",
      hidden_dropout_prob=b.hidden_dropout,
      attention_probs_dropout_prob=b.attention_dropout,
      max_position_embeddings=b.max_position_embeddings,
      type_vocab_size=b.type_vocab_size, layer_norm_eps=b.layer_norm_eps,
      pad_token_id=pad_id, **extra)


def _write_json(value, directory: str, *parts: str) -> None:
  path = os.path.join(directory, *parts)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2)
    f.write("\n")


def _copy_tokenizer(model: TrainedModel, directory: str) -> int:
  """Copies the tokenizer files; its `model_max_length` becomes the
  model's positions. Returns the pad id."""
  copied = [name for name in TOKENIZER_FILES
            if os.path.isfile(os.path.join(model.tokenizer_dir, name))]
  if "tokenizer_config.json" not in copied:
    raise InputError("no tokenizer_config.json", model.tokenizer_dir)
  for name in copied:
    shutil.copyfile(os.path.join(model.tokenizer_dir, name),
                    os.path.join(directory, name))
  path = os.path.join(directory, "tokenizer_config.json")
  with open(path, encoding="utf-8") as f:
    settings = json.load(f)
  settings["model_max_length"] = model.bert.max_position_embeddings
  _write_json(settings, directory, "tokenizer_config.json")
  return int(model.tokenizer().pad_token_id)


def _sentence_transformers_files(model: TrainedModel, directory: str) -> None:
  modules = [{"idx": 0, "name": "0", "path": "",
              "type": "sentence_transformers.models.Transformer"},
             {"idx": 1, "name": "1", "path": "1_Pooling",
              "type": "sentence_transformers.models.Pooling"}]
  if model.similarity == "cosine":
    modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize"})
    os.makedirs(os.path.join(directory, "2_Normalize"), exist_ok=True)
  _write_json(modules, directory, "modules.json")
  _write_json({"max_seq_length": model.segments.text_row_len,
               "do_lower_case": False}, directory,
              "sentence_bert_config.json")
  _write_json({"word_embedding_dimension": model.bert.hidden_size,
               "pooling_mode_cls_token": False,
               "pooling_mode_mean_tokens": True,
               "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False,
               "pooling_mode_weightedmean_tokens": False,
               "pooling_mode_lasttoken": False,
               "include_prompt": True}, directory, "1_Pooling", "config.json")
  _write_json({"prompts": {}, "default_prompt_name": None,
               "similarity_fn_name": model.similarity}, directory,
              "config_sentence_transformers.json")


def manifest(model: TrainedModel) -> dict:
  """best_jax.json: what the Hugging Face files cannot express."""
  out = {"format": FORMAT, "best_jax_version": __version__,
         "kind": model.kind, "name": model.name,
         "aggregation": model.aggregation,
         "segments": model.config.segments.to_dict(),
         "origin": model.origin, "config": model.config.to_dict()}
  if model.kind == "bi":
    out.update(similarity=model.similarity, scale=model.scale)
  else:
    out["head_log2"] = HEAD_LOG2
  return out


def write_export(model: TrainedModel, out: str | os.PathLike) -> None:
  """Writes the Hugging Face directory `out` (see the module docstring),
  complete or not at all: a previous export there is replaced."""
  out = os.path.abspath(os.fspath(out))
  if os.path.exists(out) and os.listdir(out) and not os.path.isfile(
      os.path.join(out, MANIFEST)):
    raise InputError("exists and is not a best_jax export; choose another "
                     "--out", out)
  parent = os.path.dirname(out)
  os.makedirs(parent, exist_ok=True)
  staging = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(out)}.")
  try:
    pad_id = _copy_tokenizer(model, staging)
    hf_config(model, pad_id).save_pretrained(staging)
    weights = os.path.join(staging, "model.safetensors")
    save_file(hf_tensors(model), weights, metadata={"format": "pt"})
    os.chmod(weights, 0o644)  # safetensors creates it private
    if model.kind == "bi":
      _sentence_transformers_files(model, staging)
    _write_json(manifest(model), staging, MANIFEST)
    os.chmod(staging, 0o755)
    old = None
    if os.path.exists(out):
      old = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(out)}.")
      os.replace(out, os.path.join(old, "previous"))
    os.replace(staging, out)
    if old is not None:
      shutil.rmtree(old)
  except BaseException:
    with contextlib.suppress(FileNotFoundError):
      shutil.rmtree(staging)
    raise


def read_manifest(directory: str | os.PathLike) -> dict:
  path = os.path.join(os.fspath(directory), MANIFEST)
  if not os.path.isfile(path):
    raise InputError(f"no {MANIFEST}: not a directory written by `best_jax "
                     "export`", os.fspath(directory))
  try:
    with open(path, encoding="utf-8") as f:
      value = json.load(f)
  except (OSError, ValueError) as e:
    raise InputError(f"cannot read: {e}", path) from None
  if value.get("format") != FORMAT or value.get("kind") not in ("cross", "bi"):
    raise InputError(f"unsupported export format {value.get('format')!r} "
                     f"(kind {value.get('kind')!r})", path)
  return value


def read_export(directory: str | os.PathLike) -> TrainedModel:
  """The model of an exported directory, read to the host; its parameters
  equal the exported model's bit for bit."""
  directory = os.fspath(directory)
  info = read_manifest(directory)
  config = ml_collections.ConfigDict(info["config"])
  overrides = {k: v for k, v in (config.ranker.get("overrides") or {}).items()
               if k in NOT_IN_HF_CONFIG}
  if info["kind"] == "bi":
    module = load_bi_encoder(directory, similarity=info["similarity"],
                             scale=info["scale"], **overrides)
  else:
    module = load_ranker(directory, rngs=nnx.Rngs(0), **overrides)
    kernel = module.head.kernel
    kernel.set_value(kernel.get_value() * 2.0 ** -info["head_log2"])
  params = jax.device_get(split_params(module)[1])
  return TrainedModel(
      name=info["name"], kind=info["kind"],
      bert=BertConfig.from_checkpoint(directory, **overrides), params=params,
      config=config, tokenizer_dir=directory,
      aggregation=info["aggregation"],
      origin=dict(info["origin"], export=os.path.abspath(directory)))
