"""Hugging Face directories of trained models: `write_export` and its
inverse `read_export` (bit-exact).

A cross-encoder becomes its family's `*ForSequenceClassification` with one
label (`models.families`: BERT, ELECTRA, RoBERTa, XLM-RoBERTa): config.json,
`model.safetensors` and the tokenizer files, every tensor as best_jax holds
it, so transformers computes best_jax's score as its logit in any dtype.
best_jax's own `linear` head (`w · h_[CLS] + b`, a cross-encoder trained
from a `BertModel` such as MiniLM) has no BERT class: such a model is
written as an `ElectraForSequenceClassification` (ELECTRA's encoder is
BERT's), whose head `out_proj(gelu(dense(h)))` computes it exactly with
dense rows `w` and `−w` and `out_proj` weights 1 and −1, since
`gelu(z) − gelu(−z) = z·Φ(z) + z·Φ(−z) = z`.

A bi-encoder becomes a sentence-transformers model: the family's `*Model`
files plus `modules.json` (Transformer → mean Pooling → Normalize for cosine),
`1_Pooling/config.json`, `sentence_bert_config.json` (`max_seq_length`: the
training rows' length) and `config_sentence_transformers.json` (the
similarity). sentence-transformers' `similarity` is the cosine; best_jax's
score is `scale · cosine` (`scale` in best_jax.json) or the dot product.

`best_jax.json` holds what transformers cannot express: the kind, segmenter
settings, aggregation, the encoder's family and head, and the whole
training config.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile

import jax
import ml_collections
import numpy as np
from flax import nnx
from safetensors.numpy import save_file

from best_jax import __version__
from best_jax.errors import InputError
from best_jax.models import (BertConfig, CrossEncoderRanker, families,
                             load_ranker, pretrained)
from best_jax.models.bi_encoder import load_bi_encoder
from best_jax.models.weights import assign, is_classifier, model_tensors
from best_jax.segments.config import SegmenterConfig
from best_jax.serve.trained import TrainedModel
from best_jax.train.sharding import STANDARD_LOGICAL_AXIS_RULES
from best_jax.train.state import split_params

MANIFEST = "best_jax.json"
# 2: every tensor as trained (1 scaled a BERT pooler and classifier).
FORMAT = 2
# `BertConfig` fields that config.json does not hold (the rest it does).
NOT_IN_HF_CONFIG = ("attention_block", "dtype", "param_dtype")


def linear_as_gelu(arrays: dict[tuple, np.ndarray], config: BertConfig
                   ) -> tuple[dict[tuple, np.ndarray], BertConfig]:
  """A ranker with best_jax's `linear` head as the same ranker with
  ELECTRA's `gelu` head (see the module docstring), exactly."""
  if config.model_type not in ("bert", "electra") or config.hidden_size < 2:
    raise InputError(f"a {config.model_type} encoder with best_jax's linear "
                     "head has no transformers class to export to")
  arrays = dict(arrays)
  w = arrays.pop(("head", "kernel")).astype(np.float32)[:, 0]
  hidden = config.hidden_size
  dense = np.zeros((hidden, hidden), np.float32)
  dense[:, 0], dense[:, 1] = w, -w
  out = np.zeros((hidden, 1), np.float32)
  out[0, 0], out[1, 0] = 1.0, -1.0
  arrays.update({("head", "dense", "kernel"): dense,
                 ("head", "dense", "bias"): np.zeros(hidden, np.float32),
                 ("head", "out", "kernel"): out,
                 ("head", "out", "bias"): arrays.pop(("head", "bias"))})
  return arrays, dataclasses.replace(config, model_type="electra",
                                     head="gelu")


def gelu_as_linear(arrays: dict[tuple, np.ndarray]
                   ) -> dict[tuple, np.ndarray]:
  """The inverse of `linear_as_gelu`'s parameters (bit for bit)."""
  arrays = dict(arrays)
  dense = arrays.pop(("head", "dense", "kernel"))
  arrays.pop(("head", "dense", "bias"))
  arrays.pop(("head", "out", "kernel"))
  arrays[("head", "kernel")] = dense[:, :1]
  arrays[("head", "bias")] = arrays.pop(("head", "out", "bias"))
  return arrays


def exported(model: TrainedModel
             ) -> tuple[dict[tuple, np.ndarray], BertConfig]:
  """The parameters `{path: array}` and encoder config the export writes."""
  arrays = {path: np.asarray(variable.get_value())
            for path, variable in nnx.to_flat_state(model.params)}
  if model.kind == "bi":
    encoder = {p[1:]: a for p, a in arrays.items() if p[0] == "encoder"}
    return encoder, model.bert
  if model.bert.head == "linear":
    return linear_as_gelu(arrays, model.bert)
  return arrays, model.bert


def hf_tensors(model: TrainedModel) -> dict[str, np.ndarray]:
  """The model's tensors under transformers' names (see the docstring)."""
  arrays, config = exported(model)
  return model_tensors(arrays, config, classifier=model.kind == "cross")


def hf_config(model: TrainedModel, pad_id: int):
  """The transformers config of the export (the family's class)."""
  config = exported(model)[1]
  return families.family(config.model_type).hf_config(
      config, model.kind == "cross", pad_id)


def _write_json(value, directory: str, *parts: str) -> None:
  path = os.path.join(directory, *parts)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2)
    f.write("\n")


def _write_tokenizer(model: TrainedModel, directory: str) -> int:
  """Saves the model's tokenizer as transformers does (whichever files it
  was read from: tokenizer.json, vocab.txt, vocab.json and merges.txt, a
  sentencepiece model); its `model_max_length` becomes the model's
  positions. Returns the pad id."""
  tokenizer = model.tokenizer()
  tokenizer.model_max_length = model.bert.positions
  tokenizer.save_pretrained(directory)
  # transformers writes tokenizer.json alone for a fast tokenizer; the
  # source's vocabulary files serve readers of the slow ones.
  for name in pretrained.TOKENIZER_FILES + ("merges.txt",):
    source = os.path.join(model.tokenizer_dir, name)
    if (os.path.isfile(source)
        and not os.path.exists(os.path.join(directory, name))):
      shutil.copyfile(source, os.path.join(directory, name))
  return int(tokenizer.pad_token_id)


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
  out["encoder"] = {"model_type": model.bert.model_type,
                    "head": model.bert.head}
  if model.kind == "bi":
    out.update(similarity=model.similarity, scale=model.scale)
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
    pad_id = _write_tokenizer(model, staging)
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
  if (value.get("format") not in (1, FORMAT)
      or value.get("kind") not in ("cross", "bi")):
    raise InputError(f"unsupported export format {value.get('format')!r} "
                     f"(kind {value.get('kind')!r})", path)
  return value


def serving_config(directory: str, max_len: int
                   ) -> ml_collections.ConfigDict:
  """The settings a transformers cross-encoder directory is served with
  (no best_jax.json): rows of `max_len` tokens, queries and titles of at
  most an eighth of them (32 at 256 and more), MaxP."""
  part = min(32, max_len // 8)
  segments = SegmenterConfig(max_len=max_len, max_query_len=part,
                             max_title_len=part, min_len=part)
  return ml_collections.ConfigDict(dict(
      seed=0,
      ranker=dict(kind="cross", similarity="cosine", scale=20.0, tiny=False,
                  checkpoint=directory, overrides={}),
      segments=dataclasses.asdict(segments),
      mesh=dict(shape=(-1, 1), axis_names=("data", "model")),
      logical_axis_rules=STANDARD_LOGICAL_AXIS_RULES,
      optimizer=dict(learning_rate=1e-5, warmup_steps=0, total_steps=1,
                     b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0,
                     max_grad_norm=1.0),
      train=dict(loss="pairwise_hinge", num_steps=1),
      eval=dict(aggregation="max", rows_per_call=64)))


def read_checkpoint(directory: str | os.PathLike) -> TrainedModel:
  """A transformers `*ForSequenceClassification` directory (one label) of
  a supported family, served as `serving_config` says."""
  directory = os.fspath(directory)
  if not is_classifier(directory):
    raise InputError("neither a best_jax export (no best_jax.json) nor a "
                     "*ForSequenceClassification (config.json's "
                     "architectures)", directory)
  module = load_ranker(directory, rngs=nnx.Rngs(0))
  bert = module.config
  pretrained.check_tokenizer(directory, bert.vocab_size)
  max_len = min(512, bert.positions)
  return TrainedModel(
      name=os.path.basename(os.path.abspath(directory)), kind="cross",
      bert=bert, params=jax.device_get(split_params(module)[1]),
      config=serving_config(directory, max_len), tokenizer_dir=directory,
      aggregation="max", origin={"checkpoint": os.path.abspath(directory)})


def read_export(directory: str | os.PathLike) -> TrainedModel:
  """The model of an exported directory, read to the host; its parameters
  equal the exported model's bit for bit. A directory without best_jax.json
  is read as a transformers checkpoint (`read_checkpoint`)."""
  directory = os.fspath(directory)
  if not os.path.isdir(directory):
    raise InputError("not a checkpoint directory (no such directory)",
                     directory)
  if (not os.path.isfile(os.path.join(directory, MANIFEST))
      and os.path.isfile(os.path.join(directory, "config.json"))):
    return read_checkpoint(directory)
  info = read_manifest(directory)
  config = ml_collections.ConfigDict(info["config"])
  overrides = {k: v for k, v in (config.ranker.get("overrides") or {}).items()
               if k in NOT_IN_HF_CONFIG}
  bert = families.read_config(directory, **overrides)
  if info["kind"] == "bi":
    module = load_bi_encoder(directory, similarity=info["similarity"],
                             scale=info["scale"], **overrides)
  else:
    module = load_ranker(directory, rngs=nnx.Rngs(0), **overrides)
  trained = info.get("encoder", {})  # Format 1: as the directory says.
  bert = dataclasses.replace(bert, **trained)
  if info["kind"] == "cross" and bert.head == "linear":
    arrays = gelu_as_linear({path: np.asarray(variable.get_value())
                             for path, variable
                             in nnx.to_flat_state(nnx.state(module))})
    module = assign(nnx.eval_shape(
        lambda: CrossEncoderRanker(bert, rngs=nnx.Rngs(0))), arrays, directory)
  params = jax.device_get(split_params(module)[1])
  return TrainedModel(
      name=info["name"], kind=info["kind"], bert=bert, params=params,
      config=config, tokenizer_dir=directory,
      aggregation=info["aggregation"],
      origin=dict(info["origin"], export=os.path.abspath(directory)))
