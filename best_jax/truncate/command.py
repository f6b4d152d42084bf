"""`best_jax truncate`: cut ranked lists with a baseline or a learned model.

  best_jax truncate --run RUN --qrels QRELS --method oracle|fixed|greedy|
      attncut|bicut|choppy [--k N] [--metric f1|dcg] [--depth 300] [--json]
      [--corpus C]
  best_jax truncate --config configs/attncut_robust04.py[:ARG] --workdir DIR
      [--config.train.epochs=N ...]

Greedy-k and the learned methods are evaluated by cross-validation (each
query is cut by a k or model fitted on the other folds: `--folds FILE` or
`--cv N` random folds), unless `--model DIR` gives a trained model. A learned
model trains on its training queries less a seeded validation fraction, on
which its epoch is selected (`train.fit`). `--save-model DIR` trains one model
on all queries (less their validation fraction) and saves it. `--output PATH`
writes the truncated run. `--corpus C` (a JSONL/TSV corpus file or an
ir_datasets id, read as `rerank` reads it) adds the paper's text features
(length, unique tokens, tf-idf and doc2vec neighbour similarity) to the score
features of the learned methods; a ranked document it lacks is an error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import ml_collections
import numpy as np

from best_jax.config import add_config_arguments, load_config
from best_jax.data import trec
from best_jax.data.files import atomic_write
from best_jax.errors import InputError
from best_jax.truncate import (baselines, checkpoint, experiment, features,
                               lists, rewards, train)

METHODS = ("oracle", "fixed", "greedy", "attncut", "bicut", "choppy")
LEARNED_LOSS = {"attncut": "raml", "bicut": "bicut", "choppy": "expected"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--run", help="TREC run whose lists are cut")
  parser.add_argument("--qrels", help="TREC qrels (relevant: grade > 0)")
  parser.add_argument("--method", choices=METHODS)
  parser.add_argument("--k", type=int, help="cut-off of --method fixed")
  parser.add_argument("--metric", choices=("f1", "dcg"), default="f1")
  parser.add_argument("--depth", type=int, default=300,
                      help="lists are cut to this many documents first")
  parser.add_argument("--json", action="store_true",
                      help="print one JSON object (mean, per-query cut-offs)")
  parser.add_argument("--output", help="write the truncated run here")
  parser.add_argument("--corpus", help="JSONL (id, title, text) or TSV "
                      "corpus: adds text features for the learned methods")
  parser.add_argument("--folds", help="cross-validation folds JSON "
                      "(capreolus layout) for greedy and learned methods")
  parser.add_argument("--cv", type=int, default=5,
                      help="random folds when --folds is not given")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--model", help="directory of a trained model to apply")
  parser.add_argument("--save-model", help="train on all queries, save here")
  parser.add_argument("--epochs", type=int,
                      help="override the most training epochs")
  add_config_arguments(parser, required=False)
  parser.epilog += (" With --workdir and no --method, runs the experiment "
                    "of the config; with --method, the config's `train` "
                    "section (or the config itself) sets the training.")
  parser.add_argument("--workdir", help="experiment output directory")
  parser.add_argument("--report-only", action="store_true",
                      help="rewrite the experiment report from its results")


def main(args: argparse.Namespace) -> int:
  if args.method is None:
    if not (args.config and args.workdir):
      raise InputError("give --method (with --run and --qrels), or --config "
                       "and --workdir to run an experiment")
    config = _load(args)
    if args.report_only:
      experiment.write_report(config, args.workdir)
    else:
      experiment.run(config, args.workdir)
    print(os.path.join(args.workdir, "truncation_report.md"))
    return 0
  if not (args.run and args.qrels):
    raise InputError(f"--method {args.method} needs --run and --qrels")
  if args.method == "fixed" and (args.k is None or args.k < 1):
    raise InputError("--method fixed needs --k N with N ≥ 1")
  result = cut(args)
  if args.output:
    _write_truncated(args, result)
  if args.json:
    json.dump(result, sys.stdout, indent=1)
    print()
  else:
    extra = f" k={result['k']}" if "k" in result else ""
    print(f"{args.method}{extra} {args.metric}@k mean {result['mean']:.4f} "
          f"over {result['queries']} queries")
  return 0


def _load(args) -> ml_collections.ConfigDict:
  return load_config(args.config, getattr(args, "config_overrides", []))


def cut(args: argparse.Namespace) -> dict:
  """Cut-offs and metric values of every query; the JSON result object."""
  ranked = lists.read(args.run, args.qrels, args.depth)
  r_qn = np.asarray(rewards.at_all_k(args.metric, ranked.labels_qn,
                                     ranked.mask_qn))
  result = {"method": args.method, "metric": args.metric, "depth": args.depth}
  if args.method == "oracle":
    cutoffs = baselines.oracle_cutoffs(r_qn, ranked.mask_qn)
  elif args.method == "fixed":
    result["k"] = args.k
    cutoffs = baselines.fixed_cutoffs(args.k, ranked.mask_qn)
  else:
    cutoffs = _cross_validated(args, ranked, r_qn, result)
  values = np.asarray(rewards.at_cutoff(r_qn, cutoffs))
  result.update(
      queries=len(ranked.qids), mean=float(values.mean()),
      cutoffs={q: int(k) for q, k in zip(ranked.qids, cutoffs)},
      values={q: float(v) for q, v in zip(ranked.qids, values)})
  return result


def _folds(args, qids):
  if args.folds:
    keep = set(qids)
    folds = [([q for q in tr if q in keep], [q for q in te if q in keep])
             for tr, te in lists.read_folds(args.folds)]
    if {q for _, te in folds for q in te} != keep:
      raise InputError("the folds' test sets do not cover the run's queries",
                       args.folds)
    return folds
  if args.cv < 2 or args.cv > len(qids):
    raise InputError(f"--cv must be between 2 and {len(qids)}")
  return lists.random_folds(qids, args.cv, args.seed)


def _train_config(args):
  config = train.default_config()
  if args.config:
    loaded = _load(args)
    config = ml_collections.ConfigDict(
        (loaded.train if "train" in loaded else loaded).to_dict())
  config.model, config.loss = args.method, LEARNED_LOSS[args.method]
  config.metric = args.metric
  config.seed = args.seed
  if args.epochs is not None:
    config.epochs = args.epochs
  return config


def _cross_validated(args, ranked, r_qn, result):
  index = {q: i for i, q in enumerate(ranked.qids)}
  cutoffs = np.zeros(len(ranked.qids), np.int64)
  if args.method == "greedy":
    result["k"] = baselines.greedy_k(r_qn, ranked.mask_qn)
    result["k_per_fold"] = []
    for train_q, test_q in _folds(args, ranked.qids):
      rows = np.array([index[q] for q in train_q])
      k = baselines.greedy_k(r_qn[rows], ranked.mask_qn[rows])
      result["k_per_fold"].append(k)
      test_rows = np.array([index[q] for q in test_q])
      cutoffs[test_rows] = baselines.fixed_cutoffs(k, ranked.mask_qn[test_rows])
    return cutoffs
  texts = (features.corpus_texts(args.corpus, ranked.docids, args.run)
           if args.corpus else None)
  features_qnf = features.list_features(ranked.scores_qn, ranked.mask_qn,
                                        ranked.docids, texts)
  if args.model:
    model, _, header = checkpoint.load(args.model)
    if header["depth"] != args.depth or header["in_features"] != (
        features_qnf.shape[-1]):
      raise InputError(f"the model was trained with depth {header['depth']} "
                       f"and {header['in_features']} features", args.model)
    result["model"] = args.model
    return train.predict_cutoffs(
        model, train.arrays(ranked, args.metric, features_qnf))
  config = _train_config(args)
  if args.save_model:
    model = _fit(config, ranked, features_qnf, args.metric, ranked.qids)
    checkpoint.save(args.save_model, model, config, features_qnf.shape[-1],
                    args.depth)
    result["saved_model"] = args.save_model
  for train_q, test_q in _folds(args, ranked.qids):
    test_rows = np.array([index[q] for q in test_q])
    model = _fit(config, ranked, features_qnf, args.metric, train_q)
    cutoffs[test_rows] = train.predict_cutoffs(
        model, train.subset(ranked, features_qnf, args.metric, test_q))
  return cutoffs


def _fit(config, ranked, features_qnf, metric: str, qids: list[str]):
  """A model trained on `qids`, selected on a seeded validation part of them."""
  fit_q, valid_q = lists.random_splits(qids, config.seed,
                                       config.valid_fraction)
  model, _ = train.fit(config, train.subset(ranked, features_qnf, metric, fit_q),
                       train.subset(ranked, features_qnf, metric, valid_q))
  return model


def _write_truncated(args, result: dict) -> None:
  run = trec.read_run(args.run)
  with atomic_write(args.output) as f:
    for qid, k in result["cutoffs"].items():
      for rank, (docid, score) in enumerate(trec.ranked(run[qid])[:k], 1):
        f.write(f"{qid} Q0 {docid} {rank} {float(score)!r} "
                f"best_jax-{args.method}\n")
