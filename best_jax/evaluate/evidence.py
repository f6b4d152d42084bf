"""Is a selected segment the evidence? Segment P@1 against SQuAD's gold.

A test pair (query, relevant document) of squad_longdoc has a gold passage
(the question's paragraph) and the annotators' answer spans, all character
offsets `[start, end)` of the document text (`gold.*.jsonl`, written by
`best_jax prepare squad_longdoc`). A segment is a character span of the same
text. Three criteria, strictest first:

- "answer": the segment contains at least one annotator's answer span
  completely (any of them: SQuAD's annotators disagree mostly on where an
  answer starts and ends, and each span is a correct answer).
- "majority": the segment and the gold passage share more than half of the
  shorter of the two. With 128-token segments (~500 characters) and SQuAD
  paragraphs (~750 characters) this asks that most of the segment is gold
  text; with 512-token segments, longer than most paragraphs, that most of
  the paragraph is inside the segment. Either way a segment touching the
  paragraph's first or last sentence does not count, and when segments are
  longer than the paragraph at most one segment of a tiling can qualify.
- "overlap": any shared character (the criterion used before; a segment that
  ends one character into the paragraph counts).

`p_at_1` scores a selection; `baselines` gives the ceiling and the expected
P@1 of a random segment under the same criterion.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence

import numpy as np

from best_jax.data.files import read_lines
from best_jax.errors import InputError

Span = tuple[int, int]
Pair = tuple[str, str]
CRITERIA = ("answer", "majority", "overlap")


@dataclasses.dataclass(frozen=True)
class Evidence:
  """The gold passage and the answer spans of one (query, document) pair."""
  passage: Span
  answers: tuple[Span, ...] = ()


def read_evidence(path: str | os.PathLike) -> dict[Pair, Evidence]:
  """`{(qid, docid): Evidence}` from a `gold.*.jsonl` file.

  Lines are `{"qid", "docid", "start", "end", "answers": [[s, e], ...]}`;
  files written before answers were exported (no "answers") give none.
  """
  out = {}
  for number, line in read_lines(path):
    if not line.strip():
      continue
    try:
      r = json.loads(line)
      answers = tuple((int(a), int(b)) for a, b in r.get("answers", ()))
      out[(str(r["qid"]), str(r["docid"]))] = Evidence(
          (int(r["start"]), int(r["end"])), answers)
    except (ValueError, KeyError, TypeError) as e:
      raise InputError(f"bad gold record: {e!r}", path, number) from None
  return out


def overlaps(span: Sequence[int], passage: Sequence[int]) -> bool:
  """True when the segment shares at least one character with the passage."""
  return min(span[1], passage[1]) > max(span[0], passage[0])


def contains_answer(span: Sequence[int], answers: Sequence[Sequence[int]]
                    ) -> bool:
  """True when some answer `[a, b)` lies wholly inside the segment."""
  return any(span[0] <= a and b <= span[1] for a, b in answers)


def majority_overlap(span: Sequence[int], passage: Sequence[int]) -> bool:
  """True when segment and passage share more than half of the shorter one."""
  shared = min(span[1], passage[1]) - max(span[0], passage[0])
  shorter = min(span[1] - span[0], passage[1] - passage[0])
  return shorter > 0 and 2 * shared > shorter


def is_evidence(span: Sequence[int], evidence: Evidence,
                criterion: str) -> bool:
  """Whether segment `span` is the evidence under `criterion` (CRITERIA)."""
  if criterion == "answer":
    return contains_answer(span, evidence.answers)
  if criterion == "majority":
    return majority_overlap(span, evidence.passage)
  if criterion == "overlap":
    return overlaps(span, evidence.passage)
  raise ValueError(f"unknown criterion {criterion!r}; one of {CRITERIA}")


def segment_hits(spans_s2: Sequence[Sequence[int]], evidence: Evidence,
                 criterion: str) -> np.ndarray:
  """Bool `[S]`: which of a document's segments are evidence."""
  return np.asarray([is_evidence(s, evidence, criterion) for s in spans_s2],
                    bool)


def _judged(evidence: Mapping[Pair, Evidence], criterion: str,
            pairs) -> list[Pair]:
  """Pairs the criterion can judge: all, or those with answers ("answer")."""
  return [p for p in pairs if p in evidence
          and (criterion != "answer" or evidence[p].answers)]


def p_at_1(chosen: Mapping[Pair, int],
           spans: Mapping[Pair, Sequence[Sequence[int]]],
           evidence: Mapping[Pair, Evidence], criterion: str) -> float:
  """Share of pairs whose chosen segment is evidence under `criterion`.

  Args:
    chosen: `{(qid, docid): index}` of the selected segment.
    spans: `{(qid, docid): [[start, end], ...]}`, the document's segments.
    evidence: `{(qid, docid): Evidence}` (`read_evidence`).
    criterion: one of CRITERIA.

  Pairs in `chosen` without evidence, or (for "answer") without answers,
  are left out; NaN when none is left.
  """
  judged = _judged(evidence, criterion, chosen)
  if not judged:
    return float("nan")
  return float(np.mean([is_evidence(spans[p][chosen[p]], evidence[p],
                                    criterion) for p in judged]))


def baselines(spans: Mapping[Pair, Sequence[Sequence[int]]],
              evidence: Mapping[Pair, Evidence], criterion: str
              ) -> dict[str, float]:
  """`{"ceiling", "random", "first", "pairs"}` over the pairs of `spans`:
  the share with some evidence segment, the expected P@1 of a uniformly
  random segment, P@1 of the first segment, and how many pairs were judged."""
  judged = [p for p in _judged(evidence, criterion, spans) if len(spans[p])]
  if not judged:
    return {"ceiling": float("nan"), "random": float("nan"),
            "first": float("nan"), "pairs": 0}
  hits = [segment_hits(spans[p], evidence[p], criterion) for p in judged]
  return {"ceiling": float(np.mean([h.any() for h in hits])),
          "random": float(np.mean([h.mean() for h in hits])),
          "first": float(np.mean([h[0] for h in hits])),
          "pairs": len(judged)}
