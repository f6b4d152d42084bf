"""The RoBERTa and XLM-RoBERTa families (`model_type` roberta,
xlm-roberta): BERT's encoder with positions from `padding_idx + 1` (rows
are left-aligned, so transformers' `create_position_ids_from_input_ids`
numbers a row's tokens padding_idx + 1, + 2, …), one token type, and
`RobertaClassificationHead` (`out_proj(tanh(dense(h_<s>)))`, best_jax's
`tanh` head)."""

from __future__ import annotations

from typing import Any

import transformers

from best_jax.errors import InputError
from best_jax.models import bert_family
from best_jax.models.bert import BertEncoder
from best_jax.models.bert_config import BertConfig
from best_jax.models.family import Family


def _family(model_type: str, hf_class, prefix: str) -> Family:
  """RoBERTa's family under `model_type`, exported as `hf_class`
  (`transformers.RobertaConfig` or `XLMRobertaConfig`)."""

  def read_config(hf: dict, path: str, classifier: bool,
                  **overrides: Any) -> BertConfig:
    del classifier  # A *Model starts with its family's head, random.
    values = dict(model_type=model_type, head="tanh",
                  position_offset=hf.get("pad_token_id", 1) + 1)
    return BertConfig.from_hf(hf, path, **dict(values, **overrides))

  def hf_config(config: BertConfig, classifier: bool, pad_id: int):
    if pad_id + 1 != config.position_offset:
      raise InputError(f"pad id {pad_id} does not match the positions' "
                       f"offset {config.position_offset}")
    name = f"{prefix}{'ForSequenceClassification' if classifier else 'Model'}"
    return hf_class(architectures=[name],
                    **bert_family.hf_values(config, classifier, pad_id))

  return Family(
      model_type=model_type, read_config=read_config,
      encoder=lambda config, rngs: BertEncoder(config, rngs=rngs),
      encoder_tensors=bert_family.encoder_tensors,
      head_tensors=lambda config: bert_family.dense_head_tensors(
          "classifier.dense", "classifier.out_proj"),
      prefix="roberta.", hf_config=hf_config, unused=bert_family.UNUSED)


ROBERTA = _family("roberta", transformers.RobertaConfig, "Roberta")
XLM_ROBERTA = _family("xlm-roberta", transformers.XLMRobertaConfig,
                      "XLMRoberta")
