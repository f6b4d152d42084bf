"""Cross-encoder inputs `[CLS] query [SEP] title segment [SEP]` (SPEC §1),
or the tokenizer's own pair template: RoBERTa's and XLM-R's
`<s> query </s></s> title segment </s>` has two separators.

Queries and contents are left-aligned padded id arrays with boolean masks;
their leading axes broadcast, so one query `[D, 1, Q]` pairs with all of a
document's segments `[D, S, L]`. Sizes: `best_jax.segments.config`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from best_jax.segments.config import SegmenterConfig


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
  """The ids a pair is packed with; `separators`: how many `sep_id` stand
  between query and content (1 for BERT, 2 for RoBERTa)."""
  cls_id: int
  sep_id: int
  pad_id: int
  separators: int = 1

  @classmethod
  def from_tokenizer(cls, tokenizer) -> SpecialTokens:
    """The tokenizer's ids and pair template (its special tokens of a pair
    are `cls`, the separators and a final `sep`)."""
    separators = tokenizer.num_special_tokens_to_add(pair=True) - 2
    if separators not in (1, 2):
      raise ValueError(f"a pair template with {separators + 2} special "
                       "tokens is not [CLS] q [SEP] d [SEP] or "
                       "<s> q </s></s> d </s>")
    return cls(cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id,
               pad_id=tokenizer.pad_token_id, separators=separators)


def pack_inputs(query_ids_xq: np.ndarray, query_mask_xq: np.ndarray,
                tokens_xl: np.ndarray, mask_xl: np.ndarray, *,
                config: SegmenterConfig,
                special: SpecialTokens) -> dict[str, np.ndarray]:
  """Builds BERT inputs of shape `[..., config.max_len]`.

  The query keeps at most `config.max_query_len` tokens (one fewer with two
  separators, so the row still fits `max_len`); the content (title
  and body, as in `SegmentBatch.tokens_dsl`) is cut at the end if it does not
  fit the rest of the row, which never happens for a segmenter's output.

  Args:
    query_ids_xq: int query ids, padded on the right.
    query_mask_xq: bool, true on the query's tokens.
    tokens_xl: int content ids, padded on the right.
    mask_xl: bool, true on the content's tokens.
    config: gives `max_len` and `max_query_len`.
    special: the [CLS], [SEP] and [PAD] ids and the pair template.

  Returns:
    `input_ids` (int32), `attention_mask` (bool), `token_type_ids` (int32:
    0 for `[CLS] query [SEP]`, 1 for `content [SEP]`), each `[..., max_len]`.
  """
  max_len, separators = config.max_len, special.separators
  query_len = np.minimum(np.sum(query_mask_xq, axis=-1),
                         config.max_query_len + 1 - separators)
  content_len = np.minimum(np.sum(mask_xl, axis=-1),
                           max_len - 2 - separators - query_len)
  lead = np.broadcast_shapes(query_len.shape, content_len.shape)
  query_len = np.broadcast_to(query_len, lead)[..., None]
  content_len = np.broadcast_to(content_len, lead)[..., None]
  pos = np.arange(max_len)
  content_start = query_len + 1 + separators
  content_end = content_start + content_len  # Position of the final [SEP].

  def gather(ids, index):
    ids = np.broadcast_to(ids, lead + ids.shape[-1:])
    index = np.clip(index, 0, max(ids.shape[-1] - 1, 0))
    if ids.shape[-1] == 0:
      return np.zeros(lead + (max_len,), np.int32)
    return np.take_along_axis(ids, np.broadcast_to(index, lead + (max_len,)),
                              axis=-1)

  query = gather(query_ids_xq, pos - 1)
  content = gather(tokens_xl, pos - content_start)
  input_ids = np.select(
      [pos == 0, pos <= query_len, pos < content_start, pos < content_end,
       pos == content_end],
      [special.cls_id, query, special.sep_id, content, special.sep_id],
      default=special.pad_id).astype(np.int32)
  attention_mask = np.broadcast_to(pos <= content_end, lead + (max_len,))
  token_type_ids = (attention_mask & (pos >= content_start)).astype(np.int32)
  return {"input_ids": input_ids, "attention_mask": attention_mask,
          "token_type_ids": token_type_ids}
