"""Training data must not leak held-out documents into the negatives."""

import json
import os
import pathlib

import ml_collections
import pytest

from best_jax.errors import InputError
from best_jax.experiment import datasets


def _prepared_dir(tmp_path):
  """A tiny prepared squad_longdoc directory: docs a (train), b (dev), c (test)."""
  docs = {"a": "train article", "b": "dev article", "c": "test article"}
  with open(tmp_path / "corpus.jsonl", "w") as f:
    for docid, text in docs.items():
      f.write(json.dumps({"id": docid, "title": "", "text": text}) + "\n")
  (tmp_path / "stats.json").write_text("{}")
  for split, qid, docid in (("train", "q1", "a"), ("dev", "q2", "b"),
                            ("test", "q3", "c")):
    (tmp_path / f"topics.{split}.tsv").write_text(f"{qid}\tquestion {qid}\n")
    (tmp_path / f"qrels.{split}.txt").write_text(f"{qid} 0 {docid} 1\n")
    # BM25 ranks the whole corpus, held-out documents first.
    (tmp_path / f"bm25.{split}.run").write_text(
        f"{qid} Q0 c 1 3.0 bm25\n{qid} Q0 b 2 2.0 bm25\n{qid} Q0 a 3 1.0 bm25\n")
    (tmp_path / f"gold.{split}.jsonl").write_text(
        json.dumps({"qid": qid, "docid": docid, "start": 0, "end": 5}) + "\n")
  return str(tmp_path)


def test_train_candidates_hold_only_train_documents(tmp_path):
  config = ml_collections.ConfigDict(dict(name="squad_longdoc",
                                          dir=_prepared_dir(tmp_path)))
  data = datasets._squad_longdoc(config, str(tmp_path))
  assert data.splits["train"].run == {"q1": {"a": 1.0}}
  # Evaluation still reranks the whole corpus.
  assert set(data.splits["test"].run["q3"]) == {"a", "b", "c"}
  assert set(data.splits["dev"].run["q2"]) == {"a", "b", "c"}


def test_a_remote_data_dir_is_read_never_prepared_into(tmp_path, monkeypatch):
  """A prepared `gs://` directory is read (etils.epath); a missing one is one
  InputError, never a local directory named "gs:"."""
  monkeypatch.chdir(tmp_path)
  config = ml_collections.ConfigDict(dict(name="squad_longdoc",
                                          dir="gs://no-bucket/data"))
  monkeypatch.setattr(datasets.epath, "Path",
                      lambda *parts: pathlib.Path(tmp_path, "absent"))
  with pytest.raises(InputError, match="no prepared squad_longdoc data"):
    datasets._squad_longdoc(config, str(tmp_path))
  assert not os.path.exists(tmp_path / "gs:")


def test_the_run_seed_does_not_change_the_test_questions(tmp_path):
  """`best_jax seeds` pairs the runs of `--config.seed=N` query by query: the
  subsample of questions is the data's, drawn with `config.data.seed`."""
  def picked(seed, data_seed=0):
    config = ml_collections.ConfigDict(dict(
        seed=seed, data=dict(name="synthetic", num_queries=60, num_docs=30,
                             seed=data_seed,
                             max_queries=dict(dev=5, test=5))))
    data = datasets.load(config, str(tmp_path))
    return {split: sorted(data.splits[split].topics)
            for split in ("dev", "test")}

  first = picked(seed=0)
  assert all(len(qids) == 5 for qids in first.values())
  assert picked(seed=1) == first == picked(seed=2)
  assert picked(seed=0, data_seed=1) != first


def test_squad_longdoc_questions_cluster_by_article():
  """A question's cluster is the article of its relevant document (docids
  `{article:03d}-{chunk:02d}`), whatever chunk holds it; other data have no
  cluster map."""
  split = datasets.Split(
      topics={"q1": "a", "q2": "b", "q3": "c", "q4": "d"},
      qrels={"q1": {"003-01": 1, "004-00": 0}, "q2": {"003-02": 1},
             "q3": {"005-00": 2}, "q4": {"006-00": 0}}, run={})
  assert datasets.clusters("squad_longdoc", split) == {
      "unit": "article", "of": {"q1": "003", "q2": "003", "q3": "005"}}
  assert datasets.clusters("trec", split) is None
