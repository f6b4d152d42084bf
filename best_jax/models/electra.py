"""The ELECTRA family (`model_type` electra): BERT's encoder, with the
embeddings projected to the hidden size when `embedding_size` differs, and
`ElectraClassificationHead` (`out_proj(gelu(dense(h_[CLS])))`, best_jax's
`gelu` head)."""

from __future__ import annotations

from typing import Any

import transformers

from best_jax.models import bert_family
from best_jax.models.bert import BertEncoder
from best_jax.models.bert_config import BertConfig
from best_jax.models.family import Family, Tensor


def encoder_tensors(config: BertConfig) -> dict[str, Tensor]:
  names = bert_family.encoder_tensors(config)
  if config.embedding_width != config.hidden_size:
    path = ("embeddings", "project")
    names["embeddings_project.weight"] = (path + ("kernel",),
                                          *bert_family.TRANSPOSE)
    names["embeddings_project.bias"] = (path + ("bias",), *bert_family.SAME)
  return names


def _read_config(hf: dict, path: str, classifier: bool,
                 **overrides: Any) -> BertConfig:
  embedding_size = hf.get("embedding_size")
  values = dict(model_type="electra", head="gelu",
                embedding_size=(None if embedding_size == hf.get("hidden_size")
                                else embedding_size))
  return BertConfig.from_hf(hf, path, **dict(values, **overrides))


def _hf_config(config: BertConfig, classifier: bool,
               pad_id: int) -> transformers.ElectraConfig:
  name = "ElectraForSequenceClassification" if classifier else "ElectraModel"
  return transformers.ElectraConfig(
      architectures=[name], embedding_size=config.embedding_width,
      **bert_family.hf_values(config, classifier, pad_id))


FAMILY = Family(
    model_type="electra", read_config=_read_config,
    encoder=lambda config, rngs: BertEncoder(config, rngs=rngs),
    encoder_tensors=encoder_tensors,
    head_tensors=lambda config: bert_family.dense_head_tensors(
        "classifier.dense", "classifier.out_proj"),
    prefix="electra.", hf_config=_hf_config, unused=bert_family.UNUSED)
