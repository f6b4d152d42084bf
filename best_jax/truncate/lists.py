"""Ranked lists as padded arrays: one row per query, one column per rank."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from best_jax.data import files, trec
from best_jax.errors import InputError


@dataclasses.dataclass(frozen=True)
class RankedLists:
  """Top-`depth` lists of a run joined with their labels, padded to `depth`.

  Attributes:
    qids: query ids, one per row (the run's queries that have judgments).
    docids: the ranked document ids of each query (unpadded).
    scores_qn: retrieval scores in rank order, 0 where padded.
    labels_qn: True where the document is relevant (grade > 0); unjudged
      documents are non-relevant.
    mask_qn: True for real ranks, False for padding (lists shorter than N).
  """
  qids: list[str]
  docids: list[list[str]]
  scores_qn: np.ndarray
  labels_qn: np.ndarray
  mask_qn: np.ndarray

  @property
  def depth(self) -> int:
    return self.scores_qn.shape[1]

  @property
  def lengths_q(self) -> np.ndarray:
    return self.mask_qn.sum(axis=1)

  def select(self, qids: list[str]) -> RankedLists:
    """The rows of `qids`, in that order."""
    row = {q: i for i, q in enumerate(self.qids)}
    missing = [q for q in qids if q not in row]
    if missing:
      raise InputError(f"queries {missing[:5]} are not among the ranked lists")
    idx = np.array([row[q] for q in qids], dtype=np.int64)
    return RankedLists([self.qids[i] for i in idx],
                       [self.docids[i] for i in idx], self.scores_qn[idx],
                       self.labels_qn[idx], self.mask_qn[idx])


def from_run(run: trec.Run, qrels: trec.Qrels, depth: int = 300,
             judged_only: bool = False) -> RankedLists:
  """Cuts each ranking (trec_eval order) to `depth` and labels it from `qrels`.

  Unjudged documents are non-relevant. By default every query of the run is
  kept, one without any judgment as an all-non-relevant list (Robust04 topic
  672 has no relevant document and is absent from the qrels; it counts 0 F1);
  `judged_only=True` keeps only queries in both files, as trec_eval does.
  Rows are in numeric-then-lexical order of the query ids.
  """
  if depth < 1:
    raise InputError(f"depth must be at least 1, got {depth}")
  if not set(run) & set(qrels):
    raise InputError("no query of the run has judgments in the qrels")
  qids = sorted(set(run) & set(qrels) if judged_only else set(run),
                key=_qid_key)
  scores_qn = np.zeros((len(qids), depth), np.float32)
  labels_qn = np.zeros((len(qids), depth), bool)
  mask_qn = np.zeros((len(qids), depth), bool)
  docids = []
  for i, qid in enumerate(qids):
    ranking = trec.ranked(run[qid])[:depth]
    judged = qrels.get(qid, {})
    docids.append([d for d, _ in ranking])
    n = len(ranking)
    scores_qn[i, :n] = [s for _, s in ranking]
    labels_qn[i, :n] = [judged.get(d, 0) > 0 for d, _ in ranking]
    mask_qn[i, :n] = True
  return RankedLists(qids, docids, scores_qn, labels_qn, mask_qn)


def read(run_path: str | os.PathLike, qrels_path: str | os.PathLike,
         depth: int = 300, judged_only: bool = False) -> RankedLists:
  """Reads a TREC run and qrels and returns their top-`depth` lists."""
  return from_run(trec.read_run(run_path), trec.read_qrels(qrels_path), depth,
                  judged_only)


def read_folds(path: str | os.PathLike) -> list[tuple[list[str], list[str]]]:
  """Reads capreolus-style folds: `{fold: {train_qids, predict: {dev, test}}}`.

  Returns (train, test) query ids per fold; the dev queries join training
  (truncation models draw their validation queries from the training ones).
  """
  try:
    folds = json.loads(files.read_text(path))
    result = []
    for name in sorted(folds):
      fold = folds[name]
      train = list(fold["train_qids"]) + list(fold["predict"].get("dev", []))
      result.append(([str(q) for q in train],
                     [str(q) for q in fold["predict"]["test"]]))
  except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
    raise InputError(f"not a folds file ({{fold: {{train_qids, predict: "
                     f"{{dev, test}}}}}}): {e!r}", path) from None
  if not result:
    raise InputError("no folds found", path)
  return result


def random_splits(qids: list[str], seed: int, test_fraction: float = 0.2
                  ) -> tuple[list[str], list[str]]:
  """A seeded random (train, test) split of `qids`, as in the AttnCut paper."""
  order = np.random.default_rng(seed).permutation(len(qids))
  n_test = int(round(test_fraction * len(qids)))
  test = sorted((qids[i] for i in order[:n_test]), key=_qid_key)
  train = sorted((qids[i] for i in order[n_test:]), key=_qid_key)
  return train, test


def random_folds(qids: list[str], folds: int, seed: int
                 ) -> list[tuple[list[str], list[str]]]:
  """Seeded random `folds`-fold cross-validation (train, test) pairs."""
  order = np.random.default_rng(seed).permutation(len(qids))
  parts = np.array_split(order, folds)
  result = []
  for i in range(folds):
    test = {qids[j] for j in parts[i]}
    result.append(([q for q in qids if q not in test],
                   [q for q in qids if q in test]))
  return result


def _qid_key(qid: str):
  return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)
