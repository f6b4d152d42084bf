"""Truncation experiments: splits, every method per split, tables and a plot.

Features are score-derived, plus text features when `config.corpus` names a
corpus. `run(config, workdir)` evaluates, for each split (random 80/20 splits over
seeds, or cross-validation folds) and each target metric, the baselines
(Oracle, Fixed-k, Greedy-k) and the learned methods, writing one JSON per
(protocol, split, metric) under `workdir/results/` (existing files are kept, so
an interrupted run resumes). `write_report(config, workdir)` aggregates them
into markdown + JSON tables (the paper's Tables 2–4) and the cut-off plot.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable

import ml_collections
import numpy as np
from tqdm import tqdm

from best_jax.data import trec
from best_jax.data.files import atomic_write, read_text
from best_jax.truncate import (baselines, features, lists, recall, report,
                               rewards, train)

# method -> (model, loss)
METHODS = {
    "attncut": ("attncut", "raml"),
    "attncut_mle": ("attncut", "mle"),
    "attncut_bi": ("attncut", "bicut"),
    "attncut_rl": ("attncut", "reinforce"),
    "bicut": ("bicut", "bicut"),
    "choppy": ("choppy", "expected"),
}
FIXED_K = (5, 10, 50)


def method_config(config: ml_collections.ConfigDict, method: str,
                  metric: str, seed: int) -> ml_collections.ConfigDict:
  """The training config of one learned method for one metric and seed."""
  c = ml_collections.ConfigDict(config.train.to_dict())
  c.model, c.loss = METHODS[method] if method != "recall" else ("attncut",
                                                                "recall_bins")
  c.metric = metric
  c.seed = seed
  c.alpha = config.bicut_alpha[metric]
  return c


def splits(config: ml_collections.ConfigDict, qids: list[str], protocol: str):
  """(name, train qids, test qids, seed) of each split of `protocol`."""
  if protocol == "random":
    return [(f"seed{s}", *lists.random_splits(qids, s, config.test_fraction), s)
            for s in config.seeds]
  if protocol == "folds":
    result = []
    for i, (train_q, test_q) in enumerate(lists.read_folds(config.folds)):
      keep = set(qids)
      result.append((f"fold{i + 1}", [q for q in train_q if q in keep],
                     [q for q in test_q if q in keep], config.seeds[0]))
    return result
  raise ValueError(f"unknown protocol {protocol!r}")


class Split:
  """Arrays of one split for one metric: train, validation and test lists.

  The validation queries are a seeded `valid_fraction` of the training
  queries; learned methods train on the rest and are selected on them. The
  test lists serve only to report the selected models.
  """

  def __init__(self, ranked, features_qnf, train_q, test_q, metric, seed,
               valid_fraction):
    fit_q, self.valid_qids = lists.random_splits(train_q, seed, valid_fraction)
    self.train = train.subset(ranked, features_qnf, metric, fit_q)
    self.valid = train.subset(ranked, features_qnf, metric, self.valid_qids)
    self.test = train.subset(ranked, features_qnf, metric, test_q)


def baseline_result(split: Split, test_q: list[str], metric: str) -> dict:
  """Oracle, Fixed-k and Greedy-k on the test queries of one split.

  Greedy-k is fitted on all training queries (validation ones included).
  """
  r_test, mask_test = split.test.rewards_qn, split.test.mask_qn
  cutoffs = {"oracle": baselines.oracle_cutoffs(r_test, mask_test)}
  for k in FIXED_K:
    cutoffs[f"fixed_{k}"] = baselines.fixed_cutoffs(k, mask_test)
  greedy = baselines.greedy_k(
      np.concatenate([split.train.rewards_qn, split.valid.rewards_qn]), None)
  cutoffs["greedy"] = baselines.fixed_cutoffs(greedy, mask_test)
  result = {"qids": test_q, "metric": metric, "greedy_k": greedy,
            "train_seconds": {}, "selection": {}, "methods": {}}
  for name, ks in cutoffs.items():
    _add(result, name, ks, r_test)
  return result


def _add(result: dict, name: str, ks, r_test) -> None:
  result["methods"][name] = {
      "cutoffs": [int(k) for k in ks],
      "values": [float(v) for v in rewards.at_cutoff(r_test, ks)]}


def add_method(config, split: Split, result: dict, method: str, seed: int
               ) -> None:
  """Trains `method` (or the recall model, "recall"), selecting its epoch on
  the validation lists, and adds its test results and selection record."""
  start = time.time()
  model, history = train.fit(
      method_config(config, method, result["metric"], seed), split.train,
      split.valid)
  result.setdefault("selection", {})[method] = {
      "best_epoch": history.best_epoch, "epochs": len(history.valid),
      "valid": [round(float(v), 6) for v in history.valid]}
  logits = train.predict_logits(model, split.test)
  if method == "recall":
    cut_logits = np.asarray(result["attncut_logits"], np.float32)
    result["recall"] = _recall_table(config, cut_logits, logits, split.test)
  else:
    ks = train.cutoffs_from_logits(logits, split.test.mask_qn, model.head)
    _add(result, method, ks, split.test.rewards_qn)
    if method == "attncut":
      result["attncut_logits"] = np.round(logits, 4).tolist()
  result["train_seconds"][method] = round(time.time() - start, 1)


def _recall_table(config, cut_logits, bin_logits, data: train.Arrays) -> dict:
  table = {}
  for sigma in config.sigmas:
    for name, ks in (
        ("oracle", recall.oracle_cutoffs(data.rewards_qn, data.recall_qn,
                                         data.mask_qn, sigma)),
        ("attncut", recall.constrained_cutoffs(cut_logits, bin_logits,
                                               data.mask_qn, sigma,
                                               config.recall_rule))):
      r = np.asarray(rewards.at_cutoff(data.recall_qn, ks))
      table[f"{sigma}/{name}"] = {
          "cutoffs": [int(k) for k in ks],
          "f1": [float(v) for v in rewards.at_cutoff(data.rewards_qn, ks)],
          "recall": [float(v) for v in r],
          "meets": int(np.sum(r >= sigma - 1e-9))}
  return table


def run(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Runs every (method, split, metric) not yet in `workdir` and reports.

  Methods run in the order of `config.schedule`, entries `(protocol, metric,
  method[, number of splits])` (method-major, so the main comparison over all
  splits finishes before the variants start).
  """
  ranked = lists.read(config.run, config.qrels, config.depth)
  clusters(config, ranked.qids)  # A bad cluster file stops before any work.
  texts = (features.corpus_texts(config.corpus, ranked.docids, config.run)
           if config.get("corpus") else None)
  features_qnf = features.list_features(ranked.scores_qn, ranked.mask_qn,
                                        ranked.docids, texts)
  split_list = {p: splits(config, ranked.qids, p) for p in config.protocols}
  jobs = [(entry[0], entry[1], entry[2], split)
          for entry in config.schedule if entry[0] in split_list
          for split in split_list[entry[0]][:entry[3] if len(entry) > 3
                                            else None]]
  cache = {}
  for protocol, metric, method, (name, train_q, test_q, seed) in tqdm(
      jobs, desc="truncation runs"):
    path = os.path.join(workdir, "results", protocol, f"{name}_{metric}.json")
    result = (json.loads(read_text(path)) if os.path.exists(path) else None)
    done = result is not None and (
        method == "baselines" or method in result["methods"] or
        (method == "recall" and "recall" in result))
    if done:
      continue
    key = (protocol, name, metric)
    if key not in cache:
      cache.clear()
      cache[key] = Split(ranked, features_qnf, train_q, test_q, metric, seed,
                         config.train.valid_fraction)
    if result is None:
      result = baseline_result(cache[key], test_q, metric)
    if method != "baselines":
      add_method(config, cache[key], result, method, seed)
    with atomic_write(path) as f:
      json.dump(result, f)
    write_report(config, workdir)
  write_report(config, workdir)


def clusters(config: ml_collections.ConfigDict, qids: Iterable[str]
             ) -> dict[str, str] | None:
  """`{qid: cluster}` from `config.clusters` (`qid<TAB>cluster` lines, one
  for each of `qids`), or None where the config names none."""
  return (trec.read_clusters(config.clusters, qids)
          if config.get("clusters") else None)


def write_report(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Tables (markdown + JSON) and the cut-off plot from the results present."""
  results = {}
  root = os.path.join(workdir, "results")
  for protocol in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    for file in sorted(os.listdir(os.path.join(root, protocol))):
      if file.endswith(".json"):
        split, metric = file[:-len(".json")].rsplit("_", 1)
        results.setdefault(protocol, {}).setdefault(metric, {})[split] = (
            json.loads(read_text(os.path.join(root, protocol, file))))
  tested = {q for protocol in results.values() for metric in protocol.values()
            for result in metric.values() for q in result["qids"]}
  report.write(config, results, workdir, clusters(config, sorted(tested)))
