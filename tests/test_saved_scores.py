"""Saved test scores are reused only for the parameters that made them."""

import types

import jax.numpy as jnp
import numpy as np

from best_jax.experiment import evaluation
from best_jax.experiment.workdir import Workdir


class _Scorer:
  """Scores a pair's two segments with the sum of the parameters."""

  def __init__(self):
    self.calls = 0
    self.built = (2, 2)

  def score(self, params, pairs, **unused):
    self.calls += 1
    total = float(sum(jnp.sum(x) for x in params.values()))
    return types.SimpleNamespace(host=lambda: {
        p: np.array([total, total + 1.0]) for p in pairs})


class _Segments(dict):
  """A `SegmentCache` of segmented documents."""

  def prepare(self, docids):
    assert set(docids) <= set(self)


def _inputs():
  segments = types.SimpleNamespace(spans_s2=np.array([[0, 5], [5, 11]]))
  return types.SimpleNamespace(
      pairs={"test": [("q1", "d1")]},
      documents={"d1": ("title", "hello world")},
      eval_segments=_Segments(d1=segments))


def test_rerun_reuses_scores_of_the_same_parameters(tmp_path):
  workdir, scorer = Workdir(str(tmp_path)), _Scorer()
  params = {"w": jnp.ones((3,))}
  first = evaluation.test_scores(workdir, _inputs(), scorer, params, "maxp")
  again = evaluation.test_scores(workdir, _inputs(), scorer, params, "maxp")
  assert scorer.calls == 1
  np.testing.assert_array_equal(first[("q1", "d1")], again[("q1", "d1")])


def test_retrained_model_is_scored_again(tmp_path):
  """Deleting stages/ and retraining (what the stale-config message says)
  must not reuse the old model's segments/NAME.json."""
  workdir, scorer = Workdir(str(tmp_path)), _Scorer()
  evaluation.test_scores(workdir, _inputs(), scorer, {"w": jnp.ones((3,))},
                         "maxp")
  scores = evaluation.test_scores(workdir, _inputs(), scorer,
                                  {"w": jnp.full((3,), 2.0)}, "maxp")
  assert scorer.calls == 2
  np.testing.assert_array_equal(scores[("q1", "d1")], [6.0, 7.0])
