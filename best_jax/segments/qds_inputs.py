"""QDS-Transformer inputs: the query, then every sentence behind a start token.

SPEC §4. One row per (query, document) pair, `max_len` tokens:

    [CLS] query [SEP] [S] title [S] sentence_1 [S] sentence_2 ... [SEP] pad

The title is sentence 0; `[S]` is the sentence-start token, `[unused0]` by
`sentence_start_id` (an unused vocabulary entry, so no text token is taken
for a sentence start). Not `[CLS]`, the BertSum choice and the old default
(still what `sentence_start_id=None` gives): in pretrained MiniLM `[CLS]` is
an attention sink, and 17-45 copies of it in a 512-token row take 43-53% of
the document tokens' attention and 84-86% of the pooled `[CLS]`'s in layers
3-5 (vs. 2-11% for `[unused0]`, `[SEP]` or `[MASK]` markers; measured on
squad_longdoc rows, full attention). Sentences come from the segmenter
(`Segmenter.tokenize`, library sentence splitting). A document keeps at most
`max_sentences` sentences (title included) and as many tokens as fit; the last
sentence that does not fit is cut. The global tokens of the QDS pattern are
`query_mask` (`[CLS] query [SEP]`) and `sentence_mask` (the `[S]` tokens), so
a row has at most `max_global()` of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from best_jax.errors import InputError
from best_jax.segments.packing import SpecialTokens
from best_jax.segments.segmenter import TokenizedDocument


@dataclasses.dataclass(frozen=True)
class QdsInputConfig:
  """Sizes of a QDS input row.

  Attributes:
    max_len: tokens per row, special tokens included (reference: 2,048).
    max_query_len: query tokens kept.
    max_sentences: sentences kept per document, the title included
      (reference: 256).
    sentence_start_id: the `[S]` token id (`sentence_start_id(tokenizer)`);
      None: the tokenizer's `[CLS]` (an attention sink; see the module
      docstring).
  """
  max_len: int = 2048
  max_query_len: int = 32
  max_sentences: int = 256
  sentence_start_id: int | None = None

  def __post_init__(self):
    if self.max_len < self.max_query_len + 5:
      raise InputError(f"max_len {self.max_len} leaves no room for a "
                       f"sentence after a {self.max_query_len}-token query")
    if self.max_sentences < 1:
      raise InputError("max_sentences must be >= 1")

  def max_global(self) -> int:
    """Most global tokens of a row: `[CLS] query [SEP]` + the `[S]` tokens."""
    return self.max_query_len + 2 + self.max_sentences


SENTENCE_START = "[unused0]"


def sentence_start_id(tokenizer, token: str = SENTENCE_START) -> int:
  """The id of the sentence-start token `token` (one vocabulary entry).

  Raises InputError when the tokenizer's vocabulary lacks `token`.
  """
  token_id = tokenizer.convert_tokens_to_ids(token)
  if token_id is None or (token_id == tokenizer.unk_token_id
                          and token != tokenizer.unk_token):
    raise InputError(f"sentence-start token {token!r} is not in the "
                     "tokenizer's vocabulary (use one of its reserved "
                     "tokens, e.g. [unused0])")
  return int(token_id)


def document_sentences(document: TokenizedDocument) -> list[np.ndarray]:
  """The title (when not empty) and each sentence's token ids, in order."""
  bounds = list(document.sentence_starts) + [len(document.token_ids)]
  sentences = [document.token_ids[a:b] for a, b in zip(bounds, bounds[1:])
               if b > a]
  if len(document.title_ids):
    sentences.insert(0, document.title_ids)
  return sentences


def build_qds_inputs(query_ids_nq: np.ndarray, query_mask_nq: np.ndarray,
                     documents: Sequence[TokenizedDocument], *,
                     config: QdsInputConfig,
                     special: SpecialTokens) -> dict[str, np.ndarray]:
  """Packs N (query, document) pairs into QDS rows of `config.max_len`.

  Args:
    query_ids_nq: int query ids (right-padded), one row per pair.
    query_mask_nq: bool, true on each query's tokens.
    documents: N tokenized documents (`Segmenter.tokenize`).
    config: the row sizes.
    special: the `[CLS]`, `[SEP]`, `[PAD]` ids.

  Returns:
    `[N, max_len]` arrays: `input_ids`, `token_type_ids` (int32; 0 on
    `[CLS] query [SEP]`, 1 after), `attention_mask`, `query_mask`,
    `sentence_mask` (bool); and `num_sentences` `[N]` (int32), the sentences
    kept (a document without tokens has 0 and only `[CLS] query [SEP] [SEP]`).
  """
  num = len(documents)
  if len(query_ids_nq) != num or len(query_mask_nq) != num:
    raise InputError(f"{len(query_ids_nq)} queries for {num} documents")
  length = config.max_len
  start_id = (special.cls_id if config.sentence_start_id is None
              else config.sentence_start_id)
  input_ids = np.full((num, length), special.pad_id, np.int32)
  token_type_ids = np.zeros((num, length), np.int32)
  query_mask = np.zeros((num, length), bool)
  sentence_mask = np.zeros((num, length), bool)
  lengths = np.zeros(num, np.int32)
  num_sentences = np.zeros(num, np.int32)
  for n, document in enumerate(documents):
    query = np.asarray(query_ids_nq[n])[np.asarray(query_mask_nq[n], bool)]
    query = query[:config.max_query_len]
    row = [special.cls_id, *query.tolist(), special.sep_id]
    query_mask[n, :len(row)] = True
    room = length - 1  # The closing [SEP].
    for sentence in document_sentences(document)[:config.max_sentences]:
      if len(row) + 2 > room:  # Not even the start token and one token.
        break
      sentence_mask[n, len(row)] = True
      num_sentences[n] += 1
      row.append(start_id)
      row.extend(sentence[:room - len(row)].tolist())
    token_type_ids[n, query_mask[n].sum():len(row) + 1] = 1
    row.append(special.sep_id)
    input_ids[n, :len(row)] = row
    lengths[n] = len(row)
  return {
      "input_ids": input_ids,
      "token_type_ids": token_type_ids,
      "attention_mask": np.arange(length)[None] < lengths[:, None],
      "query_mask": query_mask,
      "sentence_mask": sentence_mask,
      "num_sentences": num_sentences,
  }
