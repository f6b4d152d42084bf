"""BeST segmentation: documents -> fixed-shape padded segment arrays (SPEC §1).

A document's text is tokenized once with the checkpoint's fast tokenizer
(character offsets kept), its sentences found by `sentences.sentence_spans`,
and its tokens cut into non-overlapping segments of whole sentences:

- each segment is the longest run of whole sentences that fits its target
  length (the window at inference; in training a seeded uniform draw between
  `min_len` and the window, `SegmenterConfig.train_lengths`);
- a first sentence longer than the target but within the window is kept whole;
  one longer than the window is cut at the window and continues in the next
  segment;
- the (truncated) title is repeated at the start of every segment;
- inference keeps all segments, or the first `max_segments` (the inference
  span) with a count of those dropped; training draws random-length segments
  over the same span, the last one cut at its end, and keeps all of them, so
  that every regime trains on text inference scores and selection sees all
  of it (BeST's joint step takes the first `k_train`).

A document without body tokens gets one segment holding only its title, so
every document has at least one valid segment to score. Window arithmetic:
`best_jax.segments.config`.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer

from best_jax.errors import InputError
from best_jax.models import pretrained
from best_jax.segments.config import SegmenterConfig
from best_jax.segments.packing import SpecialTokens
from best_jax.segments.sentences import sentence_spans


@dataclasses.dataclass(frozen=True)
class TokenizedDocument:
  """A document's token ids, their character spans, and its sentence starts.

  Attributes:
    title_ids: int32 [t], the title, already cut to `max_title_len`.
    token_ids: int32 [n], the text without special tokens.
    offsets_n2: int32 [n, 2], `[start, end)` of each token in the text.
    sentence_starts: int32 [m], sorted index of each sentence's first token
      (0 first when n > 0; sentences without tokens are absent).
  """
  title_ids: np.ndarray
  token_ids: np.ndarray
  offsets_n2: np.ndarray
  sentence_starts: np.ndarray


@dataclasses.dataclass(frozen=True)
class SegmentBatch:
  """D documents cut into S segments of L = `content_len` tokens each.

  Attributes:
    tokens_dsl: int32, title then body ids (no special tokens), pad-filled.
    mask_dsl: bool, true on the `lengths_ds` leading tokens of each row.
    segment_mask_ds: bool, true for a real segment.
    spans_ds2: int32, `[start, end)` characters of each segment's body in its
      document's text; -1 for padding (`[0, 0)` for a title-only segment).
    lengths_ds: int32, title + body tokens of each row (0 for padding).
    title_lengths_d: int32, title tokens repeated in each segment.
    num_segments_d: int32, real segments kept per document.
    dropped_d: int32, segments beyond the cap (`max_segments` at inference,
      `num_segments` when given).
  """
  tokens_dsl: np.ndarray
  mask_dsl: np.ndarray
  segment_mask_ds: np.ndarray
  spans_ds2: np.ndarray
  lengths_ds: np.ndarray
  title_lengths_d: np.ndarray
  num_segments_d: np.ndarray
  dropped_d: np.ndarray


def plan_segments(sentence_starts: Sequence[int], num_tokens: int,
                  window: int, *, unit: str = "window",
                  rng: np.random.Generator | None = None, min_len: int = 1,
                  max_count: int | None = None) -> list[tuple[int, int]]:
  """Token ranges `[start, end)` of a document's consecutive segments.

  Args:
    sentence_starts: token index of each sentence start (0 is implied).
    num_tokens: tokens in the document body.
    window: most body tokens in one segment.
    unit: "window" packs whole sentences; "sentence" gives one per segment.
    rng: when given, each segment's target length is drawn uniformly from
      `[min(min_len, window), window]`; otherwise it is the window.
    min_len: see `rng`.
    max_count: stop after this many segments.

  Returns:
    Ranges covering `[0, num_tokens)` in order (fewer with `max_count`).
  """
  if window < 1:
    raise ValueError(f"window must be >= 1, got {window}")
  # Sorted boundaries after 0; num_tokens closes the last sentence.
  bounds = sorted({int(s) for s in sentence_starts if 0 < s < num_tokens}
                  | {num_tokens})
  low = min(min_len, window)
  ranges = []
  start = 0
  while start < num_tokens and (max_count is None or len(ranges) < max_count):
    # The end of the sentence (or remainder of a cut one) that starts here.
    next_bound = bounds[bisect.bisect_right(bounds, start)]
    if unit == "sentence":
      end = next_bound
    else:
      target = window if rng is None else int(rng.integers(low, window + 1))
      # The last boundary within the target, if it lies after the start.
      last = bisect.bisect_right(bounds, start + target) - 1
      end = bounds[last] if last >= 0 and bounds[last] > start else next_bound
    end = min(end, start + window)
    ranges.append((start, end))
    start = end
  return ranges


class Segmenter:
  """Tokenizes and segments documents with one `SegmenterConfig`.

  Example:
    segmenter = Segmenter(SegmenterConfig(max_len=256))
    batch = segmenter.segment([(title, text), ...])          # inference
    train = segmenter.segment(docs, training=True, seeds=[...])  # per doc
    query_ids_nq, query_mask_nq = segmenter.tokenize_queries(queries)
  """

  def __init__(self, config: SegmenterConfig = SegmenterConfig(),
               tokenizer=None):
    """`tokenizer`: a Hugging Face fast tokenizer (default: the MiniLM one)."""
    if tokenizer is None:
      tokenizer = pretrained.load_tokenizer()
    if not hasattr(tokenizer, "backend_tokenizer"):
      raise InputError("the segmenter needs a fast (Rust) tokenizer")
    self.config = config
    self.tokenizer = tokenizer
    self.special = SpecialTokens.from_tokenizer(tokenizer)
    self._encoder = _untruncated(tokenizer.backend_tokenizer)

  def tokenize(self, documents: Sequence[tuple[str, str]]
               ) -> list[TokenizedDocument]:
    """Tokenizes `(title, text)` pairs and locates their sentences."""
    titles = [title for title, _ in documents]
    texts = [text for _, text in documents]
    title_encodings = self._encoder.encode_batch(titles,
                                                 add_special_tokens=False)
    text_encodings = self._encoder.encode_batch(texts,
                                                add_special_tokens=False)
    out = []
    for text, title, encoding in zip(texts, title_encodings, text_encodings):
      offsets_n2 = np.asarray(encoding.offsets, np.int32).reshape(-1, 2)
      spans_n2 = sentence_spans(text, language=self.config.language,
                                splitter=self.config.splitter)
      # Each sentence starts at the first token at or after its first char.
      starts = np.searchsorted(offsets_n2[:, 0], spans_n2[:, 0], side="left")
      num_tokens = len(offsets_n2)
      starts = np.unique(np.concatenate([[0] if num_tokens else [],
                                         starts[starts < num_tokens]]))
      out.append(TokenizedDocument(
          title_ids=np.asarray(title.ids[:self.config.max_title_len],
                               np.int32),
          token_ids=np.asarray(encoding.ids, np.int32),
          offsets_n2=offsets_n2,
          sentence_starts=starts.astype(np.int32)))
    return out

  def tokenize_queries(self, queries: Sequence[str]
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Returns `(ids_nq, mask_nq)`, queries cut to `max_query_len` tokens."""
    width = self.config.max_query_len
    ids_nq = np.full((len(queries), width), self.special.pad_id, np.int32)
    mask_nq = np.zeros((len(queries), width), bool)
    encodings = self._encoder.encode_batch(list(queries),
                                           add_special_tokens=False)
    for i, encoding in enumerate(encodings):
      ids = encoding.ids[:width]
      ids_nq[i, :len(ids)] = ids
      mask_nq[i, :len(ids)] = True
    return ids_nq, mask_nq

  def segment(self, documents: Sequence[tuple[str, str]], *,
              training: bool = False, seed: int = 0,
              seeds: Sequence[int] | None = None,
              num_segments: int | None = None) -> SegmentBatch:
    """Tokenizes and segments `(title, text)` pairs; see `segment_tokenized`."""
    return self.segment_tokenized(self.tokenize(documents), training=training,
                                  seed=seed, seeds=seeds,
                                  num_segments=num_segments)

  def segment_tokenized(self, documents: Sequence[TokenizedDocument], *,
                        training: bool = False, seed: int = 0,
                        seeds: Sequence[int] | None = None,
                        num_segments: int | None = None) -> SegmentBatch:
    """Cuts tokenized documents into a padded `SegmentBatch`.

    Training segments have random lengths and cover the same span of the
    document as inference does (the first `max_segments` windows, or all of
    it), no less and no more (the last one is cut where the span ends), so
    that a segment the model can select in training is one it can score at
    inference, and every segment inference scores can be selected.

    Args:
      documents: from `tokenize` (tokenize once, segment every epoch).
      training: random lengths (per `train_lengths`) within the inference
        span.
      seed: seeds the training lengths: document i draws from
        `default_rng([seed, i])`; same seed and documents, same output.
      seeds: one seed per document instead (`default_rng(seeds[i])`), so a
        document's segments do not depend on the others in the batch.
      num_segments: S, the segment axis (a cap); default `max_segments` at
        inference, else the most segments of any document in the batch.
    """
    cfg = self.config
    random_lengths = training and cfg.train_lengths == "uniform"
    if seeds is None:
      seeds = [[seed, i] for i in range(len(documents))]
    cap = num_segments or (None if training else cfg.max_segments)
    plans, dropped = [], []
    for doc, doc_seed in zip(documents, seeds):
      window = cfg.window(len(doc.title_ids))
      plan = plan_segments(
          doc.sentence_starts, len(doc.token_ids), window, unit=cfg.unit,
          rng=np.random.default_rng(doc_seed) if random_lengths else None,
          min_len=cfg.min_len)
      if training and cfg.max_segments is not None:
        windows = plan_segments(doc.sentence_starts, len(doc.token_ids),
                                window, unit=cfg.unit,
                                max_count=cfg.max_segments)
        span_end = windows[-1][1] if windows else 0
        plan = [(start, min(end, span_end)) for start, end in plan
                if start < span_end]
      dropped.append(0 if cap is None else max(0, len(plan) - cap))
      plans.append(plan[:cap] or [(0, 0)])
    width = cap or max((len(p) for p in plans), default=1)
    return self._fill(documents, plans, width, dropped)

  def _fill(self, documents, plans, width, dropped) -> SegmentBatch:
    num_docs, length = len(documents), self.config.content_len
    tokens_dsl = np.full((num_docs, width, length), self.special.pad_id,
                         np.int32)
    spans_ds2 = np.full((num_docs, width, 2), -1, np.int32)
    lengths_ds = np.zeros((num_docs, width), np.int32)
    title_lengths_d = np.zeros(num_docs, np.int32)
    num_segments_d = np.zeros(num_docs, np.int32)
    for d, (doc, plan) in enumerate(zip(documents, plans)):
      title_len = len(doc.title_ids)
      title_lengths_d[d] = title_len
      num_segments_d[d] = len(plan)
      tokens_dsl[d, :len(plan), :title_len] = doc.title_ids
      for s, (start, end) in enumerate(plan):
        tokens_dsl[d, s, title_len:title_len + end - start] = (
            doc.token_ids[start:end])
        lengths_ds[d, s] = title_len + end - start
        spans_ds2[d, s] = ((doc.offsets_n2[start, 0], doc.offsets_n2[end - 1, 1])
                           if end > start else (0, 0))
    segment_mask_ds = np.arange(width) < num_segments_d[:, None]
    return SegmentBatch(
        tokens_dsl=tokens_dsl,
        mask_dsl=np.arange(length) < lengths_ds[..., None],
        segment_mask_ds=segment_mask_ds,
        spans_ds2=spans_ds2,
        lengths_ds=lengths_ds,
        title_lengths_d=title_lengths_d,
        num_segments_d=num_segments_d,
        dropped_d=np.asarray(dropped, np.int32).reshape(num_docs))


def _untruncated(backend):
  """A copy of a `tokenizers.Tokenizer` with truncation and padding off."""
  encoder = Tokenizer.from_str(backend.to_str())
  encoder.no_truncation()
  encoder.no_padding()
  return encoder
