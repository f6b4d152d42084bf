"""Tiny random transformers checkpoints of each encoder family (test-only:
torch and transformers build them), saved with a tiny word-level tokenizer
that has the family's pair template."""

from __future__ import annotations

import os

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from tokenizers import processors

from best_jax.experiment.datasets import _WORDS  # pylint: disable=protected-access

FAMILIES = ("bert", "electra", "roberta", "xlm-roberta")
BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
ROBERTA_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
WORDS = tuple(_WORDS) + (".", ",", "?", "the", "a", "of", "is")


def roberta_like(model_type: str) -> bool:
  return model_type in ("roberta", "xlm-roberta")


def tokenizer(model_type: str):
  """A word-level fast tokenizer over the synthetic data's words."""
  import transformers  # pylint: disable=import-outside-toplevel
  specials = ROBERTA_SPECIALS if roberta_like(model_type) else BERT_SPECIALS
  vocab = {w: i for i, w in enumerate(specials + WORDS)}
  backend = Tokenizer(models.WordLevel(vocab, unk_token=specials[
      3 if roberta_like(model_type) else 1]))
  backend.normalizer = normalizers.Lowercase()
  backend.pre_tokenizer = pre_tokenizers.Whitespace()
  if roberta_like(model_type):
    backend.post_processor = processors.RobertaProcessing(("</s>", 2),
                                                          ("<s>", 0))
    names = dict(bos_token="<s>", eos_token="</s>", cls_token="<s>",
                 sep_token="</s>", pad_token="<pad>", unk_token="<unk>",
                 mask_token="<mask>")
  else:
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    names = dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                 unk_token="[UNK]", mask_token="[MASK]")
    names["model_input_names"] = ["input_ids", "token_type_ids",
                                  "attention_mask"]
  return transformers.PreTrainedTokenizerFast(tokenizer_object=backend,
                                              **names)


def hf_config(model_type: str, *, classifier: bool, positions: int = 64):
  import transformers  # pylint: disable=import-outside-toplevel
  values = dict(vocab_size=len(WORDS) + 5, hidden_size=32,
                num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=positions,
                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  if classifier:
    values["num_labels"] = 1
  if model_type == "bert":
    return transformers.BertConfig(pad_token_id=0, **values)
  if model_type == "electra":
    return transformers.ElectraConfig(embedding_size=16, pad_token_id=0,
                                      **values)
  values.update(pad_token_id=1, type_vocab_size=1, layer_norm_eps=1e-5,
                max_position_embeddings=positions + 2)
  if model_type == "roberta":
    return transformers.RobertaConfig(**values)
  return transformers.XLMRobertaConfig(**values)


def randomize(model, seed: int) -> None:
  """Weights large enough that every part matters: LayerNorms away from
  (1, 0), the heads and poolers at std 0.5."""
  import torch  # pylint: disable=import-outside-toplevel
  generator = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      head = "pooler" in name or "classifier" in name
      std = 0.5 if head else 0.1
      noise = torch.randn(p.shape, generator=generator) * std
      if "LayerNorm" in name and name.endswith("weight"):
        p.copy_(1.0 + noise)
      else:
        p.copy_(noise)


def write(directory: str, model_type: str, *, classifier: bool = True,
          seed: int = 0):
  """Saves a tiny random `*ForSequenceClassification` (or `*Model`) and its
  tokenizer to `directory`; returns the torch model (eval mode)."""
  import transformers  # pylint: disable=import-outside-toplevel
  config = hf_config(model_type, classifier=classifier)
  auto = (transformers.AutoModelForSequenceClassification if classifier
          else transformers.AutoModel)
  model = auto.from_config(config)
  randomize(model, seed)
  model.eval()
  os.makedirs(directory, exist_ok=True)
  model.save_pretrained(directory)
  tokenizer(model_type).save_pretrained(directory)
  return model


def torch_inputs(rows: dict[str, np.ndarray], model_type: str) -> dict:
  """best_jax rows as transformers' keyword arguments (RoBERTa-like models
  read no token types)."""
  import torch  # pylint: disable=import-outside-toplevel
  out = {"input_ids": torch.tensor(np.asarray(rows["input_ids"],
                                              np.int64)),
         "attention_mask": torch.tensor(np.asarray(rows["attention_mask"],
                                                   np.int64))}
  if not roberta_like(model_type):
    out["token_type_ids"] = torch.tensor(np.asarray(rows["token_type_ids"],
                                                    np.int64))
  return out


# `BertConfig.tiny` overrides that make a tiny random encoder of each family
# (XLM-RoBERTa's encoder is RoBERTa's).
TINY_OVERRIDES = {
    "bert": {},
    "electra": dict(model_type="electra", embedding_size=16, head="gelu"),
    "roberta": dict(model_type="roberta", position_offset=2,
                    type_vocab_size=1, max_position_embeddings=130,
                    layer_norm_eps=1e-5, head="tanh"),
}
