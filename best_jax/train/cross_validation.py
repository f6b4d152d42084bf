"""K-fold cross-validation of an experiment (Robust04's 5 standard folds).

Each fold is a whole `train_and_evaluate` run in `WORKDIR/FOLD` with that
fold as the test fold (the next one is the dev fold); the held-out runs of all
folds are then concatenated per system and evaluated together against the
qrels, as the Robust04 literature reports (`WORKDIR/metrics.json`,
`WORKDIR/results.md`, `WORKDIR/runs/*.run`). Birch is refitted as its papers
do: each query's sentence scores come from the model of the fold that held it
out, and α, β, γ are grid-searched on the other folds' queries.
"""

from __future__ import annotations

import json
import os
from typing import Any

import ml_collections

from best_jax.data import trec
from best_jax.data.files import atomic_write
from best_jax.evaluate import trec_eval
from best_jax.rerank.folds import read_folds

METRICS = ("ndcg_cut_10", "ndcg_cut_20", "recip_rank_cut_10", "map", "P_20")


def cross_validate(config: ml_collections.ConfigDict, workdir: str
                   ) -> dict[str, Any]:
  """Runs every fold of `config.data.folds`; returns the pooled metrics."""
  from best_jax.evaluate import report  # pylint: disable=g-import-not-at-top
  from best_jax.train.experiment import train_and_evaluate  # pylint: disable=g-import-not-at-top
  folds = read_folds(config.data.folds)
  pooled: dict[str, trec.Run] = {}
  for name in folds:
    fold_config = ml_collections.ConfigDict(config.to_dict())
    fold_config.data.fold = name
    fold_config.data.cross_validate = False
    fold_dir = os.path.join(workdir, name)
    print(f"=== fold {name} -> {fold_dir}", flush=True)
    train_and_evaluate(fold_config, fold_dir)
    for file in sorted(os.listdir(os.path.join(fold_dir, "runs"))):
      run = trec.read_run(os.path.join(fold_dir, "runs", file))
      pooled.setdefault(file.removesuffix(".run"), {}).update(run)
  qrels = trec.read_qrels(config.data.qrels)
  birch_run = _birch_across_folds(workdir, folds, qrels, pooled.get("bm25"))
  if birch_run is not None:
    pooled["birch"] = birch_run
  means, per_query = {}, {}
  for name, run in pooled.items():
    trec.write_run(run, os.path.join(workdir, "runs", f"{name}.run"),
                   tag=name)
    means[name], per_query[name] = trec_eval.evaluate(run, qrels, METRICS)
  metrics = {"folds": list(folds), "test_queries": len(per_query["bm25"]),
             "rerank_depth": config.eval.depth, "means": means,
             "per_query": per_query,
             "significance": report.significance(per_query,
                                                  ("firstp", "bm25"))}
  with atomic_write(os.path.join(workdir, "metrics.json")) as f:
    json.dump(metrics, f, indent=1)
  text = report.table1(metrics) + "\n"
  with atomic_write(os.path.join(workdir, "results.md")) as f:
    f.write(text)
  print(text, flush=True)
  return metrics


def _birch_across_folds(workdir: str, folds: dict[str, list[str]], qrels,
                        first_stage) -> trec.Run | None:
  """Birch weights fitted on the training folds, applied to the held-out one
  (None when the folds did not run Birch)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from best_jax.rerank import birch  # pylint: disable=g-import-not-at-top
  from best_jax.train.experiment import _full_run  # pylint: disable=g-import-not-at-top
  features = {}
  for name in folds:
    path = os.path.join(workdir, name, "birch_features.json")
    if not os.path.isfile(path):
      return None
    with open(path, encoding="utf-8") as f:
      for qid, v in json.load(f).items():
        features[qid] = birch.QueryFeatures(tuple(v["docids"]),
                                            np.asarray(v["features"]))
  heldout, fitted = birch.cross_validate(features, qrels, folds)
  print(f"birch across folds: {fitted}", flush=True)
  return _full_run(heldout, first_stage)
