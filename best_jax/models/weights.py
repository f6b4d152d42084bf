"""Import of Hugging Face BERT weights into the NNX encoder and ranker, and
the inverse (`encoder_tensors`, for `best_jax export`).

Reads `model.safetensors` (or a sharded `model.safetensors.index.json`).
`pytorch_model.bin` is a pickle, which can execute code when loaded: it is read
only with `torch.load(weights_only=True)`, and only when torch is installed.

Hugging Face names (with or without a `bert.` prefix) map to NNX paths; Linear
weights are transposed ([out, in] → [in, out]) and the attention kernels are
reshaped to [embed, heads, kv] / [heads, kv, embed]. Every shape is checked.
Tensors that are known and deliberately unused are skipped: the pooler (the
rankers read the [CLS] hidden state directly) and the `position_ids` buffer.
A `classifier` of shape [1, hidden] (a Hugging Face cross-encoder) initialises
the ranker's head. Anything else missing or unexpected is an InputError that
lists it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import SafetensorError, safe_open

from best_jax.errors import InputError
from best_jax.models.bert import BertEncoder
from best_jax.models.bert_config import BertConfig
from best_jax.models.ranker import CrossEncoderRanker, score_head

Path = tuple[str | int, ...]
Convert = Callable[[np.ndarray], np.ndarray]

# Tensors present in BERT checkpoints that best_jax does not use.
_IGNORED = re.compile(
    r"^(pooler\.dense\.(weight|bias)|embeddings\.position_ids"
    r"|cls\..*)$")


def read_tensors(checkpoint_dir: str | os.PathLike) -> dict[str, np.ndarray]:
  """All tensors of a checkpoint directory as numpy arrays, by HF name."""
  directory = os.fspath(checkpoint_dir)
  single = os.path.join(directory, "model.safetensors")
  index = os.path.join(directory, "model.safetensors.index.json")
  pickle = os.path.join(directory, "pytorch_model.bin")
  if os.path.isfile(single):
    return _read_safetensors(single)
  if os.path.isfile(index):
    try:
      with open(index, encoding="utf-8") as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    except (OSError, ValueError, KeyError) as e:
      raise InputError(f"cannot read safetensors index: {e}", index) from None
    tensors = {}
    for name in files:
      tensors.update(_read_safetensors(os.path.join(directory, name)))
    return tensors
  if os.path.isfile(pickle):
    return _read_torch_pickle(pickle)
  raise InputError("no model.safetensors (or pytorch_model.bin) in checkpoint "
                   "directory", directory)


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
  try:
    with safe_open(path, framework="numpy") as f:
      return {name: f.get_tensor(name) for name in f.keys()}
  except (OSError, SafetensorError) as e:
    raise InputError(f"cannot read safetensors file: {e}", path) from None


def _read_torch_pickle(path: str) -> dict[str, np.ndarray]:
  try:
    import torch
  except ImportError:
    raise InputError(
        "pytorch_model.bin is a pickle and torch is not installed; convert "
        "the checkpoint to model.safetensors", path) from None
  try:
    state = torch.load(path, map_location="cpu", weights_only=True)
  except Exception as e:  # torch raises many types for a bad file.
    raise InputError(f"cannot read pytorch_model.bin safely: {e}",
                     path) from None
  return {name: t.float().numpy() for name, t in state.items()}


def _strip_prefix(name: str) -> str:
  name = name.removeprefix("bert.")
  # Old TF-converted checkpoints call LayerNorm parameters gamma and beta.
  return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight",
                re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))


def _encoder_names(config: BertConfig
                   ) -> dict[str, tuple[Path, Convert, Convert]]:
  """HF tensor name → (NNX path inside the encoder, conversion, inverse)."""
  heads, head_dim = config.num_heads, config.head_dim
  hidden = config.hidden_size
  same = (lambda w: w, lambda w: w)
  transpose = (lambda w: w.T, lambda w: w.T)
  # [out, in] → [embed, heads, kv] and [heads, kv, embed], and back.
  qkv_kernel = (lambda w: w.T.reshape(hidden, heads, head_dim),
                lambda k: k.reshape(hidden, heads * head_dim).T)
  qkv_bias = (lambda b: b.reshape(heads, head_dim),
              lambda b: b.reshape(heads * head_dim))
  out_kernel = (lambda w: w.T.reshape(heads, head_dim, hidden),
                lambda k: k.reshape(heads * head_dim, hidden).T)
  names: dict[str, tuple[Path, Convert, Convert]] = {}

  def norm(hf: str, path: Path):
    names[f"{hf}.weight"] = (path + ("scale",), *same)
    names[f"{hf}.bias"] = (path + ("bias",), *same)

  for hf, nnx_name in (("word", "word"), ("position", "position"),
                       ("token_type", "token_type")):
    names[f"embeddings.{hf}_embeddings.weight"] = (
        ("embeddings", nnx_name, "embedding"), *same)
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
        layer + ("attention", "output", "bias"), *same)
    norm(f"{hf}.attention.output.LayerNorm", layer + ("attention_norm",))
    names[f"{hf}.intermediate.dense.weight"] = (
        layer + ("intermediate", "kernel"), *transpose)
    names[f"{hf}.intermediate.dense.bias"] = (
        layer + ("intermediate", "bias"), *same)
    names[f"{hf}.output.dense.weight"] = (layer + ("output", "kernel"),
                                          *transpose)
    names[f"{hf}.output.dense.bias"] = (layer + ("output", "bias"), *same)
    norm(f"{hf}.output.LayerNorm", layer + ("output_norm",))
  return names


def encoder_arrays(tensors: dict[str, np.ndarray], config: BertConfig,
                   source: str | None = None) -> dict[Path, np.ndarray]:
  """Maps HF tensors to `{nnx_path: array}` of the encoder, checking names.

  Raises:
    InputError: listing missing and unexpected tensors, or a shape mismatch.
  """
  by_name = {_strip_prefix(name): array for name, array in tensors.items()}
  expected = _encoder_names(config)
  missing = sorted(set(expected) - set(by_name))
  unexpected = sorted(name for name in set(by_name) - set(expected)
                      if not _IGNORED.match(name) and
                      not name.startswith("classifier."))
  if missing or unexpected:
    parts = []
    if missing:
      parts.append(f"missing {len(missing)} tensors: {', '.join(missing[:8])}"
                   + (" ..." if len(missing) > 8 else ""))
    if unexpected:
      parts.append(f"unexpected {len(unexpected)} tensors: "
                   f"{', '.join(unexpected[:8])}"
                   + (" ..." if len(unexpected) > 8 else ""))
    raise InputError("checkpoint does not match a BERT encoder with "
                     f"{config.num_layers} layers ({'; '.join(parts)}; the "
                     "pooler is ignored on purpose)", source)
  return {path: convert(np.asarray(by_name[name]))
          for name, (path, convert, _) in expected.items()}


def encoder_tensors(arrays: dict[Path, np.ndarray], config: BertConfig
                    ) -> dict[str, np.ndarray]:
  """The inverse of `encoder_arrays`: `{nnx_path: array}` of an encoder →
  Hugging Face `BertModel` tensors by name (no pooler), float32, contiguous.

  Raises:
    KeyError: a parameter of the encoder is missing from `arrays`.
  """
  return {name: np.ascontiguousarray(invert(np.asarray(arrays[path])),
                                     dtype=np.float32)
          for name, (path, _, invert) in _encoder_names(config).items()}


def _assign(abstract: nnx.Module, arrays: dict[Path, np.ndarray],
            source: str | None) -> nnx.Module:
  """Fills an abstract (eval_shape) module with arrays; checks every shape."""
  graphdef, state = nnx.split(abstract)
  flat = nnx.to_flat_state(state)
  for path, variable in flat:
    spec = variable.get_value()
    if path not in arrays:
      raise InputError(f"no value for parameter {'/'.join(map(str, path))}",
                       source)
    array = arrays[path]
    if tuple(array.shape) != tuple(spec.shape):
      raise InputError(
          f"parameter {'/'.join(map(str, path))} has shape "
          f"{tuple(array.shape)} in the checkpoint, the model expects "
          f"{tuple(spec.shape)}", source)
    variable.set_value(jnp.asarray(array, dtype=spec.dtype))
  return nnx.merge(graphdef, nnx.from_flat_state(flat))


def load_encoder(checkpoint_dir: str | os.PathLike, *,
                 dtype=jnp.float32, **overrides) -> BertEncoder:
  """A `BertEncoder` with the weights of a Hugging Face BERT checkpoint.

  Args:
    checkpoint_dir: a directory with config.json and model.safetensors.
    dtype: activation dtype (float32, or bfloat16); parameters stay float32.
    **overrides: other `BertConfig` fields, e.g. `hidden_dropout=0.0`.
  """
  source = os.fspath(checkpoint_dir)
  config = BertConfig.from_checkpoint(source, dtype=dtype, **overrides)
  arrays = encoder_arrays(read_tensors(source), config, source)
  abstract = nnx.eval_shape(lambda: BertEncoder(config, rngs=nnx.Rngs(0)))
  return _assign(abstract, arrays, source)


def load_ranker(checkpoint_dir: str | os.PathLike, *, rngs: nnx.Rngs,
                dtype=jnp.float32, **overrides) -> CrossEncoderRanker:
  """A `CrossEncoderRanker` whose encoder comes from a HF checkpoint.

  The head is random (from `rngs`), unless the checkpoint has a one-output
  `classifier` (a Hugging Face cross-encoder), which is then imported.
  """
  source = os.fspath(checkpoint_dir)
  config = BertConfig.from_checkpoint(source, dtype=dtype, **overrides)
  tensors = read_tensors(source)
  arrays = {("encoder",) + path: array for path, array
            in encoder_arrays(tensors, config, source).items()}
  head = score_head(config, rngs=rngs)
  arrays[("head", "kernel")] = np.asarray(head.kernel.get_value())
  arrays[("head", "bias")] = np.asarray(head.bias.get_value())
  by_name = {_strip_prefix(name): array for name, array in tensors.items()}
  weight = by_name.get("classifier.weight")
  if weight is not None and weight.shape == (1, config.hidden_size):
    arrays[("head", "kernel")] = np.asarray(weight).T
    arrays[("head", "bias")] = np.asarray(by_name["classifier.bias"])
  abstract = nnx.eval_shape(
      lambda: CrossEncoderRanker(config, rngs=nnx.Rngs(0)))
  return _assign(abstract, arrays, source)
