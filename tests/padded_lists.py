"""Test helper: a run and its qrels as padded `[queries, list]` arrays for the
jnp metrics (what `best_jax.evaluate.metrics` computes inside jit).

Each row holds one query's ranking in trec_eval order (score descending, ties
by docid descending), then its relevant documents the ranking missed with
score -inf (so recall, AP and the ideal DCG see them), then padding
(`mask_ql` False). With these rows `best_jax.evaluate.metrics` gives
trec_eval's values (to float32 rounding). Arrays stay on the host (numpy);
callers move them to devices explicitly.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from best_jax.data.trec import Qrels, Run, ranked
from best_jax.errors import InputError


@dataclasses.dataclass(frozen=True)
class PaddedLists:
  """Row i is query `qids[i]`; `docids[i]` are its ranked (retrieved) docids."""
  qids: list[str]
  docids: list[list[str]]
  scores_ql: np.ndarray  # float32; -inf = relevant but not retrieved
  labels_ql: np.ndarray  # int32 grades, 0 for unjudged and padding
  mask_ql: np.ndarray  # bool; False = padding


def pad_run(run: Run, qrels: Qrels, *, depth: int | None = None) -> PaddedLists:
  """Rows for the queries in both run and qrels (run order), at most `depth`.

  A relevant document below `depth` counts as not retrieved, as trec_eval
  does on the run cut to `depth`.
  """
  qids = [qid for qid in run if qid in qrels]
  if not qids:
    raise InputError("the run and the qrels have no query in common")
  rows = []
  for qid in qids:
    ranking = ranked(run[qid])[:depth]
    retrieved = {docid for docid, _ in ranking}
    missing = [grade for docid, grade in qrels[qid].items()
               if grade > 0 and docid not in retrieved]
    rows.append(([docid for docid, _ in ranking],
                 [score for _, score in ranking] + [-np.inf] * len(missing),
                 [qrels[qid].get(docid, 0) for docid, _ in ranking] + missing))
  width = max(len(scores) for _, scores, _ in rows)
  scores_ql = np.zeros((len(rows), width), np.float32)
  labels_ql = np.zeros((len(rows), width), np.int32)
  mask_ql = np.zeros((len(rows), width), bool)
  for i, (_, scores, labels) in enumerate(rows):
    scores_ql[i, :len(scores)] = scores
    labels_ql[i, :len(labels)] = labels
    mask_ql[i, :len(scores)] = True
  return PaddedLists(qids, [docids for docids, _, _ in rows], scores_ql,
                     labels_ql, mask_ql)
