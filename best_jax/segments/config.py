"""The segmenter's settings and its window arithmetic (SPEC §1).

One cross-encoder row holds `max_len` tokens:

    [CLS] query [SEP] title body [SEP]
      1  +  q   +  1  +  t   + w  +  1   <=  max_len,  q <= max_query_len

so the room for title and body together, the last axis of `tokens_dsl`, is

    content_len = max_len - 3 - max_query_len

and a document whose (truncated, `t <= max_title_len`) title has `t` tokens
gets body windows of

    window(t) = content_len - t.

Example: max_len 256, max_query_len 32 -> content_len 221; a 5-token title
leaves 216 body tokens per segment. A shorter query only leaves padding.
"""

from __future__ import annotations

import dataclasses

from best_jax.errors import InputError
from best_jax.segments.sentences import SPLITTERS

# How training draws each segment's target length: uniformly between min_len
# and the window, or always the window (deterministic, as at inference).
TRAIN_LENGTHS = ("uniform", "window")
# "window": windows of whole sentences (BeST); "sentence": one sentence per
# segment (Birch), still cut at the window when longer.
UNITS = ("window", "sentence")


@dataclasses.dataclass(frozen=True)
class SegmenterConfig:
  """How documents become segments; see the module docstring for the sizes.

  Attributes:
    max_len: tokens of one cross-encoder row, special tokens included.
    max_query_len: query tokens kept (longer queries are truncated).
    max_title_len: title tokens kept and repeated in every segment (0: none).
    min_len: shortest target body length of a training segment.
    k_train: BeST's joint iteration-1 step (Eq.3) scores at most this many
      leading training segments of each document; selection (iterations
      >= 2) and every other regime see all of them.
    max_segments: inference keeps at most this many leading segments (fixed
      shapes); None keeps all of them.
    train_lengths: one of TRAIN_LENGTHS.
    unit: one of UNITS.
    language: language code passed to the sentence splitter.
    splitter: the sentence-splitting library (`sentences.SPLITTERS`).
  """
  max_len: int = 256
  max_query_len: int = 32
  max_title_len: int = 32
  min_len: int = 32
  k_train: int = 4
  max_segments: int | None = None
  train_lengths: str = "uniform"
  unit: str = "window"
  language: str = "en"
  splitter: str = "sentencex"

  def __post_init__(self):
    if self.max_query_len < 0 or self.max_title_len < 0:
      raise InputError("max_query_len and max_title_len must be >= 0")
    if self.content_len - self.max_title_len < 1:
      raise InputError(
          f"max_len {self.max_len} leaves no room for a segment body: it must "
          f"exceed 3 + max_query_len + max_title_len = "
          f"{3 + self.max_query_len + self.max_title_len}")
    if self.min_len < 1 or self.k_train < 1:
      raise InputError("min_len and k_train must be >= 1")
    if self.max_segments is not None and self.max_segments < 1:
      raise InputError("max_segments must be >= 1 (or None for all)")
    for name, value, choices in (("train_lengths", self.train_lengths,
                                  TRAIN_LENGTHS),
                                 ("unit", self.unit, UNITS),
                                 ("splitter", self.splitter, SPLITTERS)):
      if value not in choices:
        raise InputError(f"{name} must be one of {', '.join(choices)}, "
                         f"not {value!r}")

  @property
  def content_len(self) -> int:
    """Title plus body tokens of one row: `max_len - 3 - max_query_len`."""
    return self.max_len - 3 - self.max_query_len

  @property
  def text_row_len(self) -> int:
    """A bi-encoder's segment row, `[CLS] title body [SEP]`: content_len + 2
    tokens (its query row: max_query_len + 2)."""
    return self.content_len + 2

  def window(self, title_len: int) -> int:
    """Body tokens per segment for a title of `title_len` (kept) tokens."""
    return self.content_len - min(title_len, self.max_title_len)
