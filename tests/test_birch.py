"""Birch: interpolation, trec_eval-equal MAP, grid search, cross-validation."""


import numpy as np
import pytest

from best_jax.evaluate import trec_eval
from best_jax.rerank import aggregate, birch


def _constructed():
  """Relevant documents have a weak first stage but the best 2nd sentence.

  With α = 0 only and β ≥ 0.5 the relevant documents rank first in every query
  (the optimum is unique up to β, γ; the first grid point found is (0, 0.5, 0)).
  """
  run, sentences, qrels = {}, {}, {}
  for q in range(4):
    qid = f"q{q}"
    run[qid], sentences[qid], qrels[qid] = {}, {}, {}
    for d in range(6):
      docid = f"d{q}{d}"
      relevant = d < 2
      run[qid][docid] = 10.0 - d if not relevant else 1.0
      # Relevant: sentences 1.0 and 1.0; non-relevant: 1.4 then 0.0, so
      # relevant > non-relevant needs 1 + β > 1.4 (and α = 0).
      sentences[qid][docid] = [1.0, 1.0, 0.0] if relevant else [1.4, 0.0, 0.0]
      qrels[qid][docid] = int(relevant)
  return run, sentences, qrels


def test_interpolation_by_hand():
  run = {"q": {"a": 2.0, "b": 1.0}}
  sentences = {"q": {"a": [0.5, 3.0], "b": [1.0, 2.0, 4.0, -1.0]}}
  feats = birch.features(run, sentences, k=3)
  scored = birch.score(feats, birch.Weights(0.3, 0.5, 0.2))
  # a: 0.3*2 + 0.7*(3 + 0.5*0.5 + 0.2*0) ; b: 0.3*1 + 0.7*(4 + 0.5*2 + 0.2*1)
  assert scored["q"]["a"] == pytest.approx(0.6 + 0.7 * 3.25)
  assert scored["q"]["b"] == pytest.approx(0.3 + 0.7 * 5.2)


def test_grid_search_finds_known_optimum():
  run, sentences, qrels = _constructed()
  feats = birch.features(run, sentences)
  weights, best_map = birch.fit(feats, qrels)
  assert best_map == pytest.approx(1.0)
  assert weights == birch.Weights(0.0, 0.5, 0.0)
  # The first stage alone (α = 0.9 is the closest grid point) is much worse.
  alone = trec_eval.evaluate(birch.score(feats, birch.Weights(0.9)), qrels,
                             ["map"])[0]["map"]
  assert alone < 0.5


def test_map_equals_trec_eval_for_every_weighting():
  rng = np.random.default_rng(0)
  run, sentences, qrels = {}, {}, {}
  for q in range(5):
    qid = str(q)
    docs = [f"D{rng.integers(1000)}x{d}" for d in range(12)]
    run[qid] = {d: float(rng.integers(0, 5)) for d in docs}  # many ties
    sentences[qid] = {d: list(rng.integers(-3, 3, rng.integers(1, 5)) * 1.0)
                      for d in docs}
    qrels[qid] = {d: int(rng.random() < 0.3) for d in docs}
    qrels[qid]["unretrieved"] = 1
  feats = birch.features(run, sentences)
  candidates = birch.candidate_weights(3, (0.0, 0.3, 0.9))
  map_c = birch.mean_average_precision(feats, qrels, candidates)
  for w, value in zip(candidates, map_c):
    expected = trec_eval.evaluate(birch.score(feats, w), qrels, ["map"])[0]
    assert value == pytest.approx(expected["map"], abs=1e-12)


def test_cross_validation_uses_only_training_folds():
  run, sentences, qrels = _constructed()
  # Fold b's queries prefer the first stage: make their relevant docs win there.
  for qid in ("q2", "q3"):
    for docid in run[qid]:
      run[qid][docid] = 100.0 if qrels[qid][docid] else 0.0
      sentences[qid][docid] = [0.0] if qrels[qid][docid] else [5.0]
  feats = birch.features(run, sentences)
  folds = {"a": ["q0", "q1"], "b": ["q2", "q3"]}
  heldout, fitted = birch.cross_validate(feats, qrels, folds)
  assert set(heldout) == {"q0", "q1", "q2", "q3"}
  # Fold a is scored with weights fitted on fold b (first stage wins there).
  assert fitted["a"]["alpha"] == 0.1 and fitted["a"]["beta"] == 0.0
  expected = birch.score({q: feats[q] for q in folds["a"]},
                         birch.Weights(0.1, 0.0, 0.0))
  assert heldout["q0"] == expected["q0"]
  assert fitted["b"]["alpha"] == 0.0 and fitted["b"]["beta"] >= 0.5


def test_aggregations():
  scores = [0.5, 2.0, -1.0]
  assert aggregate.aggregate(scores, "first") == 0.5
  assert aggregate.aggregate(scores, "max") == 2.0
  assert aggregate.aggregate(scores, "sum") == pytest.approx(1.5)
  assert aggregate.aggregate(scores, "mean") == pytest.approx(0.5)
  assert aggregate.best_segment([1.0, 3.0, 3.0]) == 1
  with pytest.raises(ValueError):
    aggregate.aggregate([], "max")


def test_birch_row_is_fitted_on_dev_never_on_test_judgments():
  """The experiment's "Birch" row takes the weights best on dev: flipping
  the test judgments leaves it alone, while the paper's CV row (a separate,
  labelled row) follows them."""
  from best_jax.experiment import birch as experiment_birch  # pylint: disable=g-import-not-at-top
  run, sentences, qrels = _constructed()
  feats = birch.features(run, sentences)
  dev = {q: feats[q] for q in ("q0", "q1")}
  test = {q: feats[q] for q in ("q2", "q3")}
  flipped = {q: {d: 1 - g for d, g in j.items()} for q, j in qrels.items()}
  rows = {}
  for name, test_qrels in (("as is", qrels), ("flipped", flipped)):
    rows[name], fitted = experiment_birch.fitted_runs(
        {"dev": dev, "test": test}, {"dev": qrels, "test": test_qrels},
        folds=2, seed=0)
    assert fitted["dev"]["alpha"] == 0.0 and fitted["dev"]["beta"] >= 0.5
  cv = experiment_birch.cv_name(2)
  assert set(rows["as is"]) == {experiment_birch.BIRCH, cv}
  assert (rows["as is"][experiment_birch.BIRCH]
          == rows["flipped"][experiment_birch.BIRCH]
          == birch.score(test, birch.fit(dev, qrels)[0]))
  assert rows["as is"][cv] != rows["flipped"][cv]
