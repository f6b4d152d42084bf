"""TREC-file experiments with k-fold cross-validation (Robust04's layout):
each fold trains and tests on its own queries; the pooled held-out runs cover
every query once and are evaluated together."""

import json
import os

import pytest

from best_jax.data import trec
from best_jax.data.corpus import Document, write_corpus
from best_jax.experiment.cross_validation import CHOSEN, cross_validate
from best_jax.experiment.datasets import synthetic_data
from best_jax.train import best as best_lib
from fakes import tiny_config


def _write_trec_files(directory):
  data = synthetic_data(num_queries=30, num_docs=20, seed=3)
  write_corpus([Document(d, t, x) for d, (t, x) in data.documents.items()],
               os.path.join(directory, "corpus.jsonl"))
  topics, qrels, run = {}, {}, {}
  for part in data.splits.values():
    topics.update(part.topics)
    qrels.update(part.qrels)
    run.update(part.run)
  trec.write_topics_tsv(topics, os.path.join(directory, "topics.tsv"))
  trec.write_qrels(qrels, os.path.join(directory, "qrels.txt"))
  trec.write_run(run, os.path.join(directory, "first.run"))
  qids = sorted(topics)
  folds = {f"f{i}": {"train_qids": [], "predict": {"test": qids[i::3]}}
           for i in range(3)}
  with open(os.path.join(directory, "folds.json"), "w") as f:
    json.dump(folds, f)
  return qids


@pytest.mark.slow  # Three whole tiny experiments.
def test_cross_validation_pools_held_out_folds(tmp_path, monkeypatch):
  qids = _write_trec_files(str(tmp_path))
  # The first fold stops BeST after iteration 2, the others go on to 3.
  asked = []
  monkeypatch.setattr(best_lib, "should_continue",
                      lambda devs: asked.append(devs) or len(asked) > 1)
  path = lambda name: str(tmp_path / name)
  config = tiny_config()
  config.data = dict(
      name="trec", topics=path("topics.tsv"), qrels=path("qrels.txt"),
      run=path("first.run"), folds=path("folds.json"), fold="",
      cross_validate=True, topic_field="title", depth=20,
      corpus=path("corpus.jsonl"), ir_datasets="", max_queries=None)
  config.regimes = ("firstp", "maxp", "best")
  config.best.max_iterations = 3
  config.train.num_steps = 2
  config.train.eval_every = 2
  config.birch.enabled = True
  config.birch.folds = 2
  metrics = cross_validate(config, str(tmp_path / "w"))
  for fold in ("f0", "f1", "f2"):
    fold_run = trec.read_run(tmp_path / "w" / fold / "runs" / "maxp.run")
    assert set(fold_run) == set(qids[int(fold[1])::3])  # its test fold only
  pooled = trec.read_run(tmp_path / "w" / "runs" / "maxp.run")
  assert set(pooled) == set(qids)
  assert metrics["test_queries"] == len(qids)
  # Birch refitted across the folds covers every query too; BeST as each
  # fold chose it on dev is one pooled row over every query.
  assert {"BM25", "FirstP", "MaxP", "Birch", CHOSEN} <= set(metrics["means"])
  assert set(trec.read_run(tmp_path / "w" / "runs" / "birch.run")) == set(qids)
  for system, count in metrics["queries"].items():
    folds = metrics["folds_of"][system]
    assert count == sum(len(qids[int(f[1])::3]) for f in folds), system
  assert metrics["queries"][CHOSEN] == len(qids)
  # A system only some folds reached is never tested against full rows.
  partial = [s for s, f in metrics["folds_of"].items() if len(f) < 3]
  assert set(partial) == {"BeST-3", "BeST-3 + BM25"}
  assert metrics["folds_of"]["BeST-3"] == ["f1", "f2"]
  assert metrics["queries"]["BeST-3"] < len(qids)
  assert not set(partial) & set(metrics["significance"])
  assert "p vs FirstP" in (tmp_path / "w" / "results.md").read_text()
