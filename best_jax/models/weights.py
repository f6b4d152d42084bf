"""Import of Hugging Face weights into the NNX encoders and ranker, and the
inverse (`model_tensors`, for `best_jax export`).

Reads `model.safetensors` (or a sharded `model.safetensors.index.json`).
`pytorch_model.bin` is a pickle, which can execute code when loaded: it is read
only with `torch.load(weights_only=True)`, and only when torch is installed.

The checkpoint's family (`models.families`, by config.json's `model_type`)
maps its tensor names (the encoder's with or without the family's prefix,
e.g. `bert.`) to NNX paths; Linear weights are transposed ([out, in] → [in,
out]) and the attention kernels reshaped to [embed, heads, kv] / [heads, kv,
embed]. Every shape is checked. A *ForSequenceClassification (one label)
gives the ranker its head; a *Model's ranker starts with a random one.
Tensors the family names as unused are skipped (a *Model's pooler, buffers,
pretraining heads); anything else missing or unexpected is an InputError
that lists it.
"""

from __future__ import annotations

import json
import os
import re

import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import SafetensorError, safe_open

from best_jax.errors import InputError
from best_jax.models import families
from best_jax.models.bert import BertEncoder
from best_jax.models.bert_config import BertConfig
from best_jax.models.family import Family, Path
from best_jax.models.ranker import CrossEncoderRanker, score_head


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


def _by_name(tensors: dict[str, np.ndarray], family: Family,
             head_names: set[str]) -> dict[str, np.ndarray]:
  """The checkpoint's tensors by the family's names: the encoder's without
  the family's prefix (a head's keep theirs), LayerNorm's `gamma`/`beta` of
  old TF-converted checkpoints as `weight`/`bias`."""
  out = {}
  for name, array in tensors.items():
    if name not in head_names:
      name = name.removeprefix(family.prefix)
    out[re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight",
               re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))] = array
  return out


def _listed(what: str, names: list[str]) -> str:
  return (f"{what} {len(names)} tensors: {', '.join(names[:8])}"
          + (" ..." if len(names) > 8 else ""))


def checkpoint_arrays(tensors: dict[str, np.ndarray], config: BertConfig,
                      source: str | None = None, *, head: bool = False
                      ) -> tuple[dict[Path, np.ndarray],
                                 dict[Path, np.ndarray]]:
  """Maps HF tensors to the encoder's `{nnx_path: array}` and, with `head`,
  the ranker's head's (paths from the ranker), checking names.

  Raises:
    InputError: listing missing and unexpected tensors.
  """
  family = families.family(config.model_type, source)
  head_names = family.head_tensors(config)
  by_name = _by_name(tensors, family, set(head_names))
  expected = dict(family.encoder_tensors(config),
                  **(head_names if head else {}))
  unused = re.compile(family.unused)
  missing = sorted(set(expected) - set(by_name))
  unexpected = sorted(name for name in set(by_name) - set(expected)
                      if not unused.match(name) and name not in head_names)
  if missing or unexpected:
    parts = ([_listed("missing", missing)] if missing else []) + (
        [_listed("unexpected", unexpected)] if unexpected else [])
    raise InputError(
        f"checkpoint does not match a {config.model_type} "
        f"{'sequence classifier' if head else 'encoder'} with "
        f"{config.num_layers} layers ({'; '.join(parts)}; a *Model's pooler "
        "is not read)", source)
  encoder, head_arrays = {}, {}
  encoder_names = family.encoder_tensors(config)
  for name, (path, convert, _) in expected.items():
    target = encoder if name in encoder_names else head_arrays
    array = np.asarray(by_name[name])
    try:
      target[path] = convert(array)
    except ValueError:  # a reshape of the wrong size
      raise InputError(f"tensor {name} has shape {array.shape} in the "
                       f"checkpoint, which config.json's sizes do not give",
                       source) from None
  return encoder, head_arrays


def encoder_arrays(tensors: dict[str, np.ndarray], config: BertConfig,
                   source: str | None = None) -> dict[Path, np.ndarray]:
  """The encoder's `{nnx_path: array}` of HF tensors (any head ignored)."""
  return checkpoint_arrays(tensors, config, source)[0]


def model_tensors(arrays: dict[Path, np.ndarray], config: BertConfig, *,
                  classifier: bool) -> dict[str, np.ndarray]:
  """The inverse of `checkpoint_arrays`: a model's `{nnx_path: array}` → its
  family's *ForSequenceClassification tensors (`classifier`: paths from the
  ranker) or *Model tensors (paths from the encoder), float32, contiguous.

  Raises:
    KeyError: a parameter of the model is missing from `arrays`.
  """
  family = families.family(config.model_type)
  if classifier:
    names = {family.prefix + name: (("encoder",) + path, *convert)
             for name, (path, *convert)
             in family.encoder_tensors(config).items()}
    names.update(family.head_tensors(config))
  else:
    names = family.encoder_tensors(config)
  return {name: np.ascontiguousarray(invert(np.asarray(arrays[path])),
                                     dtype=np.float32)
          for name, (path, _, invert) in names.items()}


def _check_shapes(abstract: nnx.Module, arrays: dict[Path, np.ndarray],
                 source: str | None) -> None:
  """Raises InputError unless `arrays` has a value of the right shape for
  every parameter of `abstract` (an eval_shape module)."""
  for path, variable in nnx.to_flat_state(nnx.state(abstract)):
    spec = variable.get_value()
    if path not in arrays:
      raise InputError(f"no value for parameter {'/'.join(map(str, path))}",
                       source)
    if tuple(arrays[path].shape) != tuple(spec.shape):
      raise InputError(
          f"parameter {'/'.join(map(str, path))} has shape "
          f"{tuple(arrays[path].shape)} in the checkpoint, the model expects "
          f"{tuple(spec.shape)}", source)


def assign(abstract: nnx.Module, arrays: dict[Path, np.ndarray],
           source: str | None) -> nnx.Module:
  """Fills an abstract (eval_shape) module with arrays; checks every shape."""
  _check_shapes(abstract, arrays, source)
  graphdef, state = nnx.split(abstract)
  flat = nnx.to_flat_state(state)
  for path, variable in flat:
    variable.set_value(jnp.asarray(arrays[path],
                                   dtype=variable.get_value().dtype))
  return nnx.merge(graphdef, nnx.from_flat_state(flat))


def is_classifier(source: str | os.PathLike,
                  tensors: dict[str, np.ndarray] | None = None) -> bool:
  """`families.is_classifier`, refusing a config.json without
  `architectures` whose weights hold a classification head (transformers
  would load it as the classifier; a random head would replace it)."""
  hf, path = families.read_hf_config(source)
  if families.is_classifier(hf, path):
    return True
  if not hf.get("architectures") and any(
      name.startswith("classifier.")
      for name in (read_tensors(source) if tensors is None else tensors)):
    raise InputError(
        "config.json names no architectures but the weights hold a "
        "classification head (classifier.*); add \"architectures\": "
        "[\"...ForSequenceClassification\"] (num_labels 1) to read it",
        path)
  return False


def check_checkpoint(checkpoint_dir: str | os.PathLike, kind: str,
                     **overrides) -> None:
  """Raises InputError unless the directory loads as a `kind` ("cross" or
  "bi") model: its family, labels, tensor names and shapes (nothing is
  placed on a device)."""
  source = os.fspath(checkpoint_dir)
  config = families.read_config(source, **overrides)
  tensors = read_tensors(source)
  classifier = kind == "cross" and is_classifier(source, tensors)
  encoder, head = checkpoint_arrays(tensors, config, source,
                                    head=classifier)
  family = families.family(config.model_type)
  _check_shapes(nnx.eval_shape(lambda: family.encoder(config, nnx.Rngs(0))),
                encoder, source)
  if classifier:
    ranker = nnx.eval_shape(
        lambda: CrossEncoderRanker(config, rngs=nnx.Rngs(0)))
    _check_shapes(ranker.head, {p[1:]: a for p, a in head.items()}, source)


def load_encoder(checkpoint_dir: str | os.PathLike, *,
                 dtype=jnp.float32, **overrides) -> BertEncoder:
  """The encoder with the weights of a Hugging Face checkpoint (any head of
  a sequence classifier is not read).

  Args:
    checkpoint_dir: a directory with config.json and model.safetensors.
    dtype: activation dtype (float32, or bfloat16); parameters stay float32.
    **overrides: other `BertConfig` fields, e.g. `hidden_dropout=0.0`.
  """
  source = os.fspath(checkpoint_dir)
  config = families.read_config(source, dtype=dtype, **overrides)
  arrays = encoder_arrays(read_tensors(source), config, source)
  family = families.family(config.model_type)
  abstract = nnx.eval_shape(lambda: family.encoder(config, nnx.Rngs(0)))
  return assign(abstract, arrays, source)


def load_ranker(checkpoint_dir: str | os.PathLike, *, rngs: nnx.Rngs,
                dtype=jnp.float32, **overrides) -> CrossEncoderRanker:
  """A `CrossEncoderRanker` of a HF checkpoint: a *ForSequenceClassification
  with one label gives every parameter, its head included; a *Model's head
  is random (from `rngs`).
  """
  source = os.fspath(checkpoint_dir)
  config = families.read_config(source, dtype=dtype, **overrides)
  tensors = read_tensors(source)
  classifier = is_classifier(source, tensors)
  encoder, head = checkpoint_arrays(tensors, config, source,
                                    head=classifier)
  arrays = {("encoder",) + path: array for path, array in encoder.items()}
  if not classifier:
    family = families.family(config.model_type)
    fresh = (family.head(config, rngs) if family.head
             else score_head(config, rngs=rngs))
    head = {("head",) + path: np.asarray(variable.get_value())
            for path, variable in nnx.to_flat_state(nnx.state(fresh))}
  arrays.update(head)
  abstract = nnx.eval_shape(
      lambda: CrossEncoderRanker(config, rngs=nnx.Rngs(0)))
  return assign(abstract, arrays, source)
