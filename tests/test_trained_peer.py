"""bench/trained_peer.py's training pairs: BeST-1's schedule, or one epoch."""

import os
import sys
import types

import pytest

from best_jax.evaluate.evidence import Evidence
from best_jax.experiment import datasets
from best_jax.experiment.regimes import Group

pytest.importorskip("sentence_transformers")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import trained_peer  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


def test_pairs_are_best1s_schedule_or_every_question_once():
  docs = {"d1": ("T1", "aa. The gold one. zz"), "d2": ("T2", "Other gold.")}
  train = datasets.Split(
      topics={"q1": "first?", "q2": "second?", "q3": "third?"},
      qrels={"q1": {"d1": 1, "d2": 0}, "q2": {"d2": 1}, "q3": {"d1": 1}},
      run={}, gold={("q1", "d1"): Evidence((4, 16)),
                    ("q2", "d2"): Evidence((0, 11)),
                    ("q3", "d1"): Evidence((0, 3))})
  inputs = types.SimpleNamespace(
      documents=docs,
      data=datasets.ExperimentData(docs, {"train": train}),
      schedule=[[Group("q2", ("d2", "d1")), Group("q1", ("d1", "d2"))],
                [Group("q2", ("d2", "d1"))]])
  assert trained_peer.training_pairs(inputs, "best1", 0) == [
      ("second?", "T2 Other gold."), ("first?", "T1 The gold one"),
      ("second?", "T2 Other gold.")]
  epoch = trained_peer.training_pairs(inputs, "epoch", 0)
  assert sorted(epoch) == [("first?", "T1 The gold one"),
                           ("second?", "T2 Other gold."), ("third?", "T1 aa.")]
  assert epoch == trained_peer.training_pairs(inputs, "epoch", 0)
