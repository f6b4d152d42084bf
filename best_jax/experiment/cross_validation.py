"""K-fold cross-validation of an experiment (Robust04's 5 standard folds).

Each fold is a whole `train_and_evaluate` run in `WORKDIR/FOLD` with that
fold as the test fold (the next one is the dev fold). The held-out runs are
pooled per system over the folds and evaluated together against the qrels,
as the Robust04 literature reports (`WORKDIR/metrics.json`, `results.md`,
`runs/*.run`):

- a system is pooled by its name in the fold's results (not its file);
  each row states how many queries (and folds) it covers, and a system that
  not every fold has (e.g. BeST-3, when some folds stopped at iteration 2) is
  reported on its own query subset, never tested against full rows;
- "BeST (chosen on dev)" pools, per fold, the BeST iteration that fold chose
  on its dev queries: the system a user would deploy;
- "Birch" pools each fold's row (weights fitted on its dev queries, as
  every fusion is); `birch.cv_name(folds)` is Birch refitted as its papers
  do: each query's sentence scores come from the model of the fold that held
  it out, and α, β, γ are grid-searched on the other folds' queries.
"""

from __future__ import annotations

import os
from typing import Any

import ml_collections

from best_jax.data import trec
from best_jax.evaluate import report
from best_jax.evaluate import trec_eval
from best_jax.experiment.birch import FEATURES, cv_name, decode_features
from best_jax.experiment.evaluation import full_run
from best_jax.experiment.run import train_and_evaluate
from best_jax.experiment.workdir import Workdir
from best_jax.rerank import birch
from best_jax.rerank.folds import read_folds

METRICS = ("ndcg_cut_10", "ndcg_cut_20", "recip_rank_cut_10", "map", "P_20")
CHOSEN = "BeST (chosen on dev)"


def cross_validate(config: ml_collections.ConfigDict, workdir: str
                   ) -> dict[str, Any]:
  """Runs every fold of `config.data.folds`; returns the pooled metrics
  (process 0; other processes return {})."""
  folds = read_folds(config.data.folds)
  out = Workdir(workdir)
  pooled: dict[str, trec.Run] = {}
  folds_of: dict[str, list[str]] = {}
  for name in folds:
    fold_config = ml_collections.ConfigDict(config.to_dict())
    fold_config.data.fold = name
    fold_config.data.cross_validate = False
    out.log(f"=== fold {name} -> {out.path(name)}")
    metrics = train_and_evaluate(fold_config, os.fspath(out.path(name)))
    if not out.writes:
      continue
    systems = list(metrics["means"])
    if metrics.get("selected_best"):
      systems.append(CHOSEN)
    for system in systems:
      source = metrics["selected_best"] if system == CHOSEN else system
      run = trec.read_run(out.path(name, "runs",
                                   f"{trec.run_file_name(source)}.run"))
      pooled.setdefault(system, {}).update(run)
      folds_of.setdefault(system, []).append(name)
  if not out.writes:
    return {}
  qrels = trec.read_qrels(config.data.qrels)
  refitted = _birch_across_folds(out, folds, qrels, pooled.get("BM25"))
  if refitted is not None:  # The paper's protocol over these folds.
    pooled[cv_name(len(folds))] = refitted
    folds_of[cv_name(len(folds))] = list(folds)
  means, per_query = {}, {}
  for system, run in pooled.items():
    trec.write_run(run, out.path("runs", f"{trec.run_file_name(system)}.run"),
                   tag=trec.run_file_name(system))
    means[system], per_query[system] = trec_eval.evaluate(run, qrels, METRICS)
  everywhere = [s for s in pooled if len(folds_of[s]) == len(folds)]
  metrics = {
      "folds": list(folds), "test_queries": len(per_query.get("BM25", {})),
      "rerank_depth": config.eval.depth, "means": means,
      "per_query": per_query,
      "queries": {s: len(per_query[s]) for s in pooled},
      "folds_of": folds_of,
      "significance": report.significance(
          {s: per_query[s] for s in everywhere}, ("FirstP", "BM25")),
  }
  out.write_json(metrics, "metrics.json", indent=1)
  text = report.table1(metrics) + "\n"
  with out.output("results.md") as f:
    f.write(text)
  print(text, flush=True)
  return metrics


def _birch_across_folds(out: Workdir, folds: dict[str, list[str]], qrels,
                        first_stage) -> trec.Run | None:
  """Birch weights fitted on the training folds, applied to the held-out one
  (None when the folds did not run Birch)."""
  features = {}
  for name in folds:
    path = out.path(name, FEATURES)
    if not path.exists():
      return None
    features.update(decode_features(Workdir.read_local_json(path)))
  heldout, fitted = birch.cross_validate(features, qrels, folds)
  out.log(f"birch across folds: {fitted}")
  return full_run(heldout, first_stage)
