"""Training regimes: which documents and which of their segments a step sees.

A training *group* is one query with its positive document first and sampled
negatives after it (pairwise hinge: 1 + 1; pointwise cross-entropy: 1 + 10).
Negatives are drawn, seeded, from the query's first-stage top `depth`
documents that are not judged relevant; the whole schedule of groups for a
run is drawn up front, so it can be logged and so BeST's later iterations
know every (query, document) pair they must select a segment for.

Segment choice per regime (SPEC §1-2):
- `firstp`: segment 0 of every document (Eq.1). Also the training of BeST's
  definition of MaxP, which differs only at inference.
- `maxp_all`: Dai & Callan's MaxP, trained on all passages with the document's
  label: a uniformly random valid segment of every document, per example.
- `goldp`: the positive's segment holding where its answer starts (the gold
  passage's start without answers); each negative's segment holding a
  uniformly random character of its document. A longer segment holds a given
  character more often, so positives and negatives are drawn alike, by
  length, from one random-length segmentation: the length of a segment says
  nothing about its label. A positive whose answer lies past the span
  inference scores has no gold segment there and is drawn like a negative.
- `best`: iteration 1 sees the `k_train` leading segments (the joint step
  picks among them, Eq.3; with `best.theta0=pretrained` the pretrained
  bi-encoder has selected one of all of them instead); later iterations see
  the segment selected among all of them by the frozen previous model
  (Eq.2).
- `longp`: FirstP at the checkpoint's full length (`experiment.longp`).
- `qds`: no segment at all: the QDS-Transformer reads the whole document in
  one sparse-attention row (`experiment/qds.py`).

Segments are those of `inputs.train_segments`: random lengths over the same
span of the document as inference scores, never past it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence

import numpy as np

from best_jax.data.files import atomic_write
from best_jax.data.trec import Qrels, Run, ranked

REGIMES = ("firstp", "maxp", "maxp_all", "goldp", "best", "qds", "longp")
# Regimes whose trained model is the FirstP model (MaxP differs at inference).
TRAINS_LIKE_FIRSTP = ("firstp", "maxp", "longp")


@dataclasses.dataclass(frozen=True)
class Group:
  """One query, its positive document and its negatives (positive first)."""
  qid: str
  docids: tuple[str, ...]


def positives(qrels: Qrels, qid: str) -> list[str]:
  """The query's judged relevant documents (grade >= 1), in a fixed order."""
  return sorted(d for d, grade in qrels.get(qid, {}).items() if grade >= 1)


def negative_pool(qrels: Qrels, run: Run, qid: str, depth: int) -> list[str]:
  """First-stage top-`depth` documents of the query not judged relevant."""
  judged = qrels.get(qid, {})
  top = [d for d, _ in ranked(run.get(qid, {}))[:depth]]
  return [d for d in top if judged.get(d, 0) < 1]


def trainable_queries(qrels: Qrels, run: Run, qids: Sequence[str],
                      depth: int) -> list[str]:
  """Queries with at least one positive and one negative candidate."""
  return [q for q in qids
          if positives(qrels, q) and negative_pool(qrels, run, q, depth)]


def schedule(qrels: Qrels, run: Run, qids: Sequence[str], *,
             num_negatives: int, depth: int, batch_size: int, num_steps: int,
             seed: int) -> list[list[Group]]:
  """`num_steps` batches of `batch_size` groups, drawn with `seed`.

  Every epoch visits each trainable query once in a fresh random order, with
  a random positive and `num_negatives` negatives sampled without replacement
  from its negative pool (with replacement when the pool is smaller).

  Raises:
    ValueError: no query has both a positive and a negative.
  """
  usable = trainable_queries(qrels, run, qids, depth)
  if not usable:
    raise ValueError("no training query has both a relevant document and a "
                     f"non-relevant one in its first-stage top {depth}")
  rng = np.random.default_rng(seed)
  pools = {q: negative_pool(qrels, run, q, depth) for q in usable}
  groups: list[Group] = []
  while len(groups) < num_steps * batch_size:
    for index in rng.permutation(len(usable)):
      qid = usable[index]
      pos = positives(qrels, qid)
      positive = pos[int(rng.integers(len(pos)))]
      pool = pools[qid]
      picks = rng.choice(len(pool), size=num_negatives,
                         replace=len(pool) < num_negatives)
      groups.append(Group(qid, (positive,) + tuple(pool[i] for i in picks)))
  groups = groups[:num_steps * batch_size]
  return [groups[i:i + batch_size] for i in range(0, len(groups), batch_size)]


def write_schedule(batches: Sequence[Sequence[Group]],
                   path: str | os.PathLike, seed: int) -> None:
  """Logs the sampled groups as JSON lines `{step, qid, docids, seed}`."""
  with atomic_write(path) as f:
    for step, batch in enumerate(batches):
      for group in batch:
        f.write(json.dumps({"step": step, "qid": group.qid,
                            "docids": list(group.docids), "seed": seed}) + "\n")


def pairs(batches: Sequence[Sequence[Group]]) -> list[tuple[str, str]]:
  """Every distinct (qid, docid) of a schedule, in first-seen order."""
  seen = {}
  for batch in batches:
    for group in batch:
      for docid in group.docids:
        seen.setdefault((group.qid, docid), None)
  return list(seen)


def segment_holding(spans_s2: np.ndarray, char: int) -> int:
  """The segment (`[S, 2]` character spans, in order) holding `char`: the
  last one starting at or before it (0 when none does)."""
  return max(int(np.searchsorted(spans_s2[:, 0], char, side="right")) - 1, 0)


def random_character(spans_s2: np.ndarray, rng: np.random.Generator) -> int:
  """A uniformly random character of the text the segments cover."""
  start, end = int(spans_s2[0, 0]), int(spans_s2[-1, 1])
  return int(rng.integers(start, max(end, start + 1)))


def choose_segments(regime: str, group: Group,
                    spans: Sequence[np.ndarray], *,
                    rng: np.random.Generator,
                    selected: Mapping[tuple[str, str], int] | None = None,
                    gold_start: int | None = None) -> list[int]:
  """The training segment of each document of `group`, in order.

  Args:
    regime: `firstp`/`maxp`, `maxp_all`, `goldp` or `best` (iterations >= 2;
      iteration 1's joint step trains on its leading `k_train` segments and
      needs no choice).
    group: the query and its documents, positive first.
    spans: each document's `[S, 2]` character spans of its training segments
      (S >= 1).
    rng: draws the random segments (`maxp_all`, `goldp`).
    selected: `best`: the selected segment of each (qid, docid).
    gold_start: `goldp`: the character where the positive's answer starts
      (None: unknown).
  """
  out = []
  for g, (docid, spans_s2) in enumerate(zip(group.docids, spans)):
    if regime in TRAINS_LIKE_FIRSTP:
      index = 0
    elif regime == "maxp_all":
      index = int(rng.integers(len(spans_s2)))
    elif regime == "goldp":
      inside = (g == 0 and gold_start is not None
                and gold_start < spans_s2[-1, 1])
      index = segment_holding(
          spans_s2, gold_start if inside else random_character(spans_s2, rng))
    elif regime == "best":
      if selected is None:
        raise ValueError("the best regime needs selected segments")
      index = selected[(group.qid, docid)]
    else:
      raise ValueError(f"regime {regime!r} has no segment to choose; one of "
                       f"{TRAINS_LIKE_FIRSTP + ('maxp_all', 'goldp', 'best')}")
    out.append(index)
  return out
