"""Runs fused with the first stage, and the zero-shot peer a user could pick
instead of training (BENCHMARKS.md, "Peers to beat").

- `interpolated`: every model's reranked top k fused with BM25 per query
  (min-max normalised, `α·BM25 + (1−α)·model`, `rerank.interpolate`), α
  chosen on the dev queries; the test run is "MODEL + BM25".
- `peer_runs`: all-MiniLM-L6-v2 zero-shot MaxP over title-prefixed 90-word
  passages (`rerank.peer`), and "BM25 + peer" fused the same way.

Both write what they chose (α per model) to `fusion.json`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_collections

from best_jax.data import trec
from best_jax.experiment.evaluation import DEV_METRIC, full_run
from best_jax.experiment.inputs import Inputs
from best_jax.rerank import interpolate
from best_jax.rerank.peer import peer_scores

PEER = "Peer (all-MiniLM-L6-v2, zero-shot)"
BM25_PEER = "BM25 + peer"


def first_stage(inputs: Inputs, split: str) -> trec.Run:
  """The first-stage run of every query of `split`."""
  part = inputs.data.splits[split]
  return {q: part.run.get(q, {}) for q in part.topics}


def _check_reranked(inputs: Inputs, split: str, name: str,
                    run: trec.Run) -> None:
  """Raises ValueError unless `run` holds exactly the split's reranked
  candidates: min-max normalisation over a completed list (ranks k+1…
  with placeholder scores) would fuse a different function than the one α
  was chosen for."""
  candidates = inputs.candidates[split]
  extra = sorted(set(run) - set(candidates))
  if extra:
    raise ValueError(f"{name}: the {split} run has {len(extra)} queries "
                     f"without reranked candidates, e.g. {extra[0]!r}")
  for qid, docids in candidates.items():
    if set(run.get(qid, ())) != set(docids):
      raise ValueError(
          f"{name}: the {split} run of query {qid!r} must hold exactly its "
          f"{len(docids)} reranked candidates, not {len(run.get(qid, ()))} "
          "documents")


def fuse(inputs: Inputs, name: str, dev: trec.Run, test: trec.Run
         ) -> tuple[trec.Run, dict[str, Any]]:
  """The test run of `test` fused with BM25 at the α best on `dev`; both
  runs hold the reranked candidates only (the top k of each query)."""
  _check_reranked(inputs, "dev", name, dev)
  _check_reranked(inputs, "test", name, test)
  dev_first = first_stage(inputs, "dev")
  alpha, table = interpolate.choose_alpha(
      dev_first, dev, inputs.data.splits["dev"].qrels, metric=DEV_METRIC)
  test_first = first_stage(inputs, "test")
  fused = interpolate.interpolate(test_first, test, alpha)
  return full_run(fused, test_first), {"model": name, "alpha": alpha,
                                       "dev": table}


def interpolated(inputs: Inputs, dev_runs: Mapping[str, trec.Run],
                 test_runs: Mapping[str, trec.Run]
                 ) -> tuple[dict[str, trec.Run], list[dict[str, Any]]]:
  """`{"MODEL + BM25": test run}` for every model with a dev run; both
  mappings hold each model's reranked candidates only."""
  runs, chosen = {}, []
  for name, dev in dev_runs.items():
    runs[f"{name} + BM25"], record = fuse(inputs, name, dev, test_runs[name])
    chosen.append(record)
  return runs, chosen


def peer_runs(config: ml_collections.ConfigDict, inputs: Inputs
              ) -> tuple[dict[str, trec.Run], list[dict[str, Any]]]:
  """The peer's test run and its BM25 fusion (α on dev)."""
  splits = ("dev", "test")
  # One call, so each passage is embedded once for both splits.
  both = peer_scores(
      inputs.documents,
      {(s, q): text for s in splits
       for q, text in inputs.data.splits[s].topics.items()},
      {(s, q): ds for s in splits for q, ds in inputs.candidates[s].items()},
      words=config.peer.get("words", 90))
  scored = {s: {q: run for (split, q), run in both.items() if split == s}
            for s in splits}
  test_first = first_stage(inputs, "test")
  fused, record = fuse(inputs, PEER, scored["dev"], scored["test"])
  return ({PEER: full_run(scored["test"], test_first), BM25_PEER: fused},
          [record])
