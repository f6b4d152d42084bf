"""Birch in an experiment: a trained model scores every sentence of the dev
and test candidates, and `rerank.birch` interpolates the best sentences with
the first stage, its weights fitted on the dev queries, as every other
fusion's α is ("Birch"). The paper's protocol, weights fitted by k-fold
cross-validation within the test queries, is a separately labelled row
(`cv_name`) when `birch.folds` > 1.

The sentence features are saved (`birch_features.json`: test under
"queries", dev under "dev") so that a rerun, and the cross-validation over
folds of Robust04 (`experiment.cross_validation`), reuse them; they are
scored again when the candidates change.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import ml_collections
import numpy as np

from best_jax.data import trec
from best_jax.experiment.evaluation import full_run
from best_jax.experiment.fusion import first_stage
from best_jax.experiment.inputs import Inputs, SegmentCache
from best_jax.experiment.models import Ranker
from best_jax.experiment.workdir import Workdir
from best_jax.rerank import birch
from best_jax.segments.config import SegmenterConfig
from best_jax.segments.segmenter import Segmenter
from best_jax.train.state import params_digest

FEATURES = "birch_features.json"


Features = dict[str, birch.QueryFeatures]
BIRCH = "Birch"
SPLITS = ("dev", "test")


def cv_name(folds: int) -> str:
  """The row of the paper's protocol: weights by CV on the test queries."""
  return f"Birch ({folds}-fold CV on test)"


def _sentence_features(config: ml_collections.ConfigDict, inputs: Inputs,
                       ranker: Ranker, params: Any) -> dict[str, Features]:
  """`[S_doc, S_1..S_k]` of every dev and test candidate, sentences scored
  by `params` (the first `birch.max_sentences` sentences of each
  document), by split."""
  cfg = config.birch
  settings = dict(config.segments.to_dict(), unit="sentence",
                  max_segments=cfg.max_sentences)
  sentencer = Segmenter(SegmenterConfig(**settings),
                        tokenizer=inputs.segmenter.tokenizer)
  scorer = ranker.scorer_for(SegmentCache(
      sentencer, inputs.documents, training=False,
      name="segment (sentences)"))
  pairs = [(s, q, d) for s in SPLITS
           for q, ds in inputs.candidates[s].items() for d in ds]
  scored = scorer.score(params, list(dict.fromkeys((q, d) for _, q, d in pairs)),
                        desc="birch").host()
  out = {}
  for split in SPLITS:
    first = first_stage(inputs, split)
    candidates = inputs.candidates[split]
    sentences = {q: {d: list(scored[(q, d)]) for d in ds}
                 for q, ds in candidates.items()}
    out[split] = birch.features(
        {q: {d: first[q][d] for d in ds} for q, ds in candidates.items()},
        sentences, k=cfg.k)
  return out


def decode_features(saved: dict, key: str = "queries") -> Features:
  """Per-query features from the JSON `birch_runs` writes to FEATURES
  (`key`: "queries" for test, "dev")."""
  return {q: birch.QueryFeatures(tuple(v["docids"]), np.asarray(v["features"]))
          for q, v in saved[key].items()}


def _encode(features: Features) -> dict:
  return {q: {"docids": list(v.docids), "features": v.features_dk.tolist()}
          for q, v in features.items()}


def fitted_runs(features: Mapping[str, Features],
                qrels: Mapping[str, trec.Qrels], *, folds: int, seed: int
                ) -> tuple[dict[str, trec.Run], dict[str, Any]]:
  """Birch's reranked test runs: `BIRCH` with the weights best on dev (its
  test judgments never read), and `cv_name(folds)` with the paper's k-fold
  CV within the test queries when `folds` > 1; and what was fitted."""
  weights, dev_map = birch.fit(features["dev"], qrels["dev"])
  runs = {BIRCH: birch.score(features["test"], weights)}
  fitted = {"dev": dict(dataclasses.asdict(weights), dev_map=dev_map)}
  if folds > 1:
    qids = sorted(features["test"])
    order = [qids[i] for i in np.random.default_rng(seed).permutation(
        len(qids))]
    runs[cv_name(folds)], fitted["cv"] = birch.cross_validate(
        features["test"], qrels["test"],
        {f"fold{i + 1}": order[i::folds] for i in range(folds)})
  return runs, fitted


def birch_runs(config: ml_collections.ConfigDict, workdir: Workdir,
               inputs: Inputs, ranker: Ranker, params: Any,
               model_name: str) -> dict[str, trec.Run]:
  """Birch's test runs over `model_name`'s sentence scores (see
  `fitted_runs`), completed with the first stage."""
  cfg = config.birch
  # What the features depend on besides the candidates: the model, the
  # sentence settings.
  made_by = json.loads(json.dumps({
      "params": params_digest(params),
      "birch": {k: cfg[k] for k in ("model", "k", "max_sentences")},
      "segments": config.segments.to_dict()}))
  saved = workdir.read_json(FEATURES)
  features = None
  if (saved is not None and saved.get("made_by") == made_by
      and "dev" in saved):
    features = {"test": decode_features(saved), "dev": decode_features(
        saved, "dev")}
    for split in SPLITS:
      wanted = {q: set(ds) for q, ds in inputs.candidates[split].items()}
      if {q: set(v.docids) for q, v in features[split].items()} != wanted:
        features = None  # Other queries or candidates: score again.
        break
  if features is None:
    features = _sentence_features(config, inputs, ranker, params)
    workdir.write_json({"made_by": made_by,
                        "queries": _encode(features["test"]),
                        "dev": _encode(features["dev"])}, FEATURES)
  qrels = {s: inputs.data.splits[s].qrels for s in SPLITS}
  runs, fitted = fitted_runs(features, qrels, folds=cfg.folds,
                             seed=config.seed)
  workdir.log(f"birch ({model_name} sentences): weights {fitted}")
  test_first = first_stage(inputs, "test")
  return {name: full_run(run, test_first) for name, run in runs.items()}
