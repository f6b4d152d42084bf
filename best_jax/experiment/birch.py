"""Birch in an experiment: a trained model scores every sentence of the test
candidates, and `rerank.birch` interpolates the best sentences with the first
stage, its weights fitted by k-fold cross-validation within the test queries.

The sentence features are saved (`birch_features.json`) so that a rerun, and
the cross-validation over folds of Robust04 (`experiment.cross_validation`),
reuse them; they are scored again when the test candidates change.
"""

from __future__ import annotations

import json
from typing import Any

import ml_collections
import numpy as np

from best_jax.data import trec
from best_jax.experiment.evaluation import full_run
from best_jax.experiment.inputs import Inputs, SegmentCache
from best_jax.experiment.models import Ranker
from best_jax.experiment.workdir import Workdir
from best_jax.rerank import birch
from best_jax.segments.config import SegmenterConfig
from best_jax.segments.segmenter import Segmenter
from best_jax.train.state import params_digest

FEATURES = "birch_features.json"


def _sentence_features(config: ml_collections.ConfigDict, inputs: Inputs,
                       ranker: Ranker, params: Any, first_stage: trec.Run
                       ) -> dict[str, birch.QueryFeatures]:
  """`[S_doc, S_1..S_k]` of every test candidate, sentences scored by
  `params` (the first `birch.max_sentences` sentences of each document)."""
  cfg = config.birch
  settings = dict(config.segments.to_dict(), unit="sentence",
                  max_segments=cfg.max_sentences)
  sentencer = Segmenter(SegmenterConfig(**settings),
                        tokenizer=inputs.segmenter.tokenizer)
  scorer = ranker.scorer_for(SegmentCache(
      sentencer, inputs.documents, training=False,
      name="segment (sentences)"))
  candidates = inputs.candidates["test"]
  pairs = [(q, d) for q, ds in candidates.items() for d in ds]
  sentence_scores: dict[str, dict[str, list[float]]] = {}
  for (q, d), s in scorer.score(params, pairs, desc="birch").host().items():
    sentence_scores.setdefault(q, {})[d] = list(s)
  first = {q: {d: first_stage[q][d] for d in ds}
           for q, ds in candidates.items()}
  return birch.features(first, sentence_scores, k=cfg.k)


def decode_features(saved: dict) -> dict[str, birch.QueryFeatures]:
  """Per-query features from the JSON `birch_run` writes to FEATURES."""
  return {q: birch.QueryFeatures(tuple(v["docids"]), np.asarray(v["features"]))
          for q, v in saved["queries"].items()}


def birch_run(config: ml_collections.ConfigDict, workdir: Workdir,
              inputs: Inputs, ranker: Ranker, params: Any,
              model_name: str, first_stage: trec.Run) -> trec.Run:
  """Birch's test run over `model_name`'s sentence scores."""
  cfg = config.birch
  # What the features depend on besides the candidates: the model, the
  # sentence settings.
  made_by = json.loads(json.dumps({
      "params": params_digest(params),
      "birch": {k: cfg[k] for k in ("model", "k", "max_sentences")},
      "segments": config.segments.to_dict()}))
  saved = workdir.read_json(FEATURES)
  features = None
  if saved is not None and saved.get("made_by") == made_by:
    features = decode_features(saved)
    wanted = {q: set(ds) for q, ds in inputs.candidates["test"].items()}
    if {q: set(v.docids) for q, v in features.items()} != wanted:
      features = None  # Other test queries or candidates: score again.
  if features is None:
    features = _sentence_features(config, inputs, ranker, params, first_stage)
    workdir.write_json({"made_by": made_by, "queries": {
        q: {"docids": list(v.docids), "features": v.features_dk.tolist()}
        for q, v in features.items()}}, FEATURES)
  qids = sorted(features)
  rng = np.random.default_rng(config.seed)
  order = [qids[i] for i in rng.permutation(len(qids))]
  folds = {f"fold{i + 1}": order[i::cfg.folds] for i in range(cfg.folds)}
  heldout, fitted = birch.cross_validate(
      features, inputs.data.splits["test"].qrels, folds)
  workdir.log(f"birch ({model_name} sentences): weights per fold {fitted}")
  return full_run(heldout, first_stage)
