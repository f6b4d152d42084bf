"""BM25 over a document's segments: the "BM25-best segment" selector of
BeST's Table 2 (lower-cased word tokens, IDF over all scored segments)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

_TOKEN = re.compile(r"\w+")


def _tokens(text: str) -> list[str]:
  return _TOKEN.findall(text.lower())


def bm25_best_segments(queries: Mapping[str, str],
                       segments: Mapping[tuple[str, str], Sequence[str]],
                       k1: float = 0.9, b: float = 0.4
                       ) -> dict[tuple[str, str], int]:
  """For each (qid, docid), the index of its best segment by BM25.

  Args:
    queries: qid -> query text.
    segments: (qid, docid) -> the document's segment texts, in order.
    k1, b: BM25 parameters (Anserini's defaults).
  """
  bags = {}
  for key, texts in segments.items():
    for s, text in enumerate(texts):
      bags[(key[1], s)] = Counter(_tokens(text))
  num = max(len(bags), 1)
  frequency = Counter(t for bag in bags.values() for t in bag)
  average = sum(sum(bag.values()) for bag in bags.values()) / num or 1.0
  best = {}
  for key, texts in segments.items():
    terms = _tokens(queries[key[0]])
    scores = []
    for s in range(len(texts)):
      bag = bags[(key[1], s)]
      length = sum(bag.values())
      score = 0.0
      for t in terms:
        tf = bag.get(t, 0)
        if tf:
          idf = math.log(1 + (num - frequency[t] + 0.5) / (frequency[t] + 0.5))
          score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length
                                                     / average))
      scores.append(score)
    best[key] = max(range(len(scores)), key=lambda i: (scores[i], -i))
  return best
