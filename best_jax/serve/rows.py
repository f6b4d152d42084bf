"""Rows of whole texts, tokenized exactly as transformers does, for the
scorers (`select.selection.SegmentScorer`, `select.embedding.EmbeddingScorer`):

- `PairRows`: a (query, text) pair as one cross-encoder row, the tokenizer's
  sentence-pair packing `[CLS] query [SEP] text [SEP]` (token types 0, then
  1), cut as `tokenizer(query, text, truncation=True, max_length=...)` cuts.
- `TextRows`: `[CLS] text [SEP]` rows of queries and texts apart (token types
  0), as sentence-transformers tokenizes them (`max_seq_length`).

Each (qid, docid) pair has one "segment": the whole text. Documents cut into
training's segments use `experiment.rows` instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from best_jax.data.pipeline import Feature
from best_jax.experiment.rows import row_features

Pair = tuple[str, str]


def padded_row(ids: Sequence[int], types: Sequence[int], length: int,
               pad_id: int) -> dict[str, np.ndarray]:
  """One model row of `length` tokens: the ids, then padding."""
  count = len(ids)
  input_ids = np.full(length, pad_id, np.int32)
  input_ids[:count] = ids
  token_type_ids = np.zeros(length, np.int32)
  token_type_ids[:count] = types
  return {"input_ids": input_ids, "attention_mask": np.arange(length) < count,
          "token_type_ids": token_type_ids}


class PairRows:
  """Cross-encoder rows of whole (query, text) pairs (`RowSource`)."""
  width = 1

  def __init__(self, tokenizer, max_length: int):
    self.tokenizer = tokenizer
    self.max_length = max_length
    self._encoded: dict[Pair, tuple[list[int], list[int]]] = {}

  def set(self, texts: Mapping[Pair, tuple[str, str]]) -> None:
    """The (query, text) of each pair of the next `score` call."""
    pairs = list(texts)
    encoded = self.tokenizer([texts[p][0] for p in pairs],
                             [texts[p][1] for p in pairs], truncation=True,
                             max_length=self.max_length)
    # Token types as the tokenizer gives them (RoBERTa's give none: 0).
    types = encoded.get("token_type_ids") or [
        [0] * len(ids) for ids in encoded["input_ids"]]
    self._encoded = {p: (encoded["input_ids"][i], types[i])
                     for i, p in enumerate(pairs)}

  def prepare(self, docids: Sequence[str]) -> None:
    del docids  # Tokenized by `set`.

  def num_segments(self, docid: str) -> int:
    del docid
    return 1

  def row_length(self, qid: str, docid: str, segment: int) -> int:
    del segment
    return len(self._encoded[(qid, docid)][0])

  def row(self, qid: str, docid: str, segment: int, length: int
          ) -> dict[str, np.ndarray]:
    del segment
    ids, types = self._encoded[(qid, docid)]
    return padded_row(ids, types, length, self.tokenizer.pad_token_id)

  def features(self, length: int) -> dict[str, Feature]:
    return row_features(length)


class TextRows:
  """Bi-encoder rows of whole queries and texts (`TextRows` protocol of
  `select.embedding`)."""
  width = 1

  def __init__(self, tokenizer, max_length: int):
    self.tokenizer = tokenizer
    self.max_length = max_length
    self._queries: dict[str, list[int]] = {}
    self._texts: dict[str, list[int]] = {}

  def _encode(self, texts: Mapping[str, str]) -> dict[str, list[int]]:
    keys = list(texts)
    ids = self.tokenizer([texts[k] for k in keys], truncation=True,
                         max_length=self.max_length)["input_ids"]
    return dict(zip(keys, ids))

  def set(self, queries: Mapping[str, str], texts: Mapping[str, str]
          ) -> None:
    """The queries (by qid) and texts (by docid) of the next call."""
    self._queries = self._encode(queries)
    self._texts = self._encode(texts)

  def prepare(self, docids: Sequence[str]) -> None:
    del docids

  def num_segments(self, docid: str) -> int:
    del docid
    return 1

  def segment_length(self, docid: str, segment: int) -> int:
    del segment
    return len(self._texts[docid])

  def segment_row(self, docid: str, segment: int, length: int
                  ) -> dict[str, np.ndarray]:
    del segment
    ids = self._texts[docid]
    return padded_row(ids, [0] * len(ids), length,
                      self.tokenizer.pad_token_id)

  def query_length(self, qid: str) -> int:
    return len(self._queries[qid])

  def query_row(self, qid: str, length: int) -> dict[str, np.ndarray]:
    ids = self._queries[qid]
    return padded_row(ids, [0] * len(ids), length,
                      self.tokenizer.pad_token_id)

  def features(self, length: int) -> dict[str, Feature]:
    return row_features(length)
