"""Per-rank features: score-derived values by hand, text features via gensim."""

import numpy as np
import pytest

from best_jax.truncate import features, lists


def test_score_features_by_hand_and_zero_padding():
  scores = np.array([[3.0, 2.0, 1.0, 0.0]], np.float32)
  mask = np.array([[True, True, True, False]])
  f = features.score_features(scores, mask, score_mean=2.0, score_std=1.0)
  assert f.shape == (1, 4, len(features.SCORE_FEATURES))
  z = np.array([1.0, 0.0, -1.0]) / np.sqrt(2 / 3)
  np.testing.assert_allclose(f[0, :3, 0], [1.0, 0.0, -1.0], atol=1e-6)
  np.testing.assert_allclose(f[0, :3, 1], z, rtol=1e-5)
  np.testing.assert_allclose(f[0, :3, 2], [1.0, 0.5, 0.0], atol=1e-6)
  np.testing.assert_allclose(f[0, :3, 3], [0.0, z[0], z[0]], rtol=1e-5)
  np.testing.assert_allclose(f[0, :3, 4], [z[0], z[0], 0.0], rtol=1e-5)
  np.testing.assert_allclose(f[0, :3, 5], [0.25, 0.5, 0.75])
  assert not f[0, 3].any()


def test_text_features_lengths_and_neighbour_similarity():
  docids = [["a", "b", "c"]]
  texts = {"a": "red apple red", "b": "red apple", "c": "blue sky today"}
  f = features.text_features(docids, texts, depth=4, doc2vec_epochs=2)
  assert f.shape == (1, 4, len(features.TEXT_FEATURES))
  np.testing.assert_allclose(f[0, :3, 0], np.log1p([3, 2, 3]), rtol=1e-6)
  np.testing.assert_allclose(f[0, :3, 1], np.log1p([2, 2, 3]), rtol=1e-6)
  # tf-idf (red, apple equally rare): a = (2, 1), b = (1, 1): cos = 3/sqrt(10);
  # c shares no term with b.
  assert f[0, 0, 2] == pytest.approx(3 / np.sqrt(10), abs=1e-5)
  assert f[0, 2, 2] == pytest.approx(0.0, abs=1e-6)
  assert not f[0, 3].any()


def test_lists_from_run_pads_and_labels():
  run = {"1": {"x": 3.0, "y": 2.0, "z": 1.0}, "2": {"u": 1.0}, "3": {"v": 1.0}}
  qrels = {"1": {"y": 2, "z": 0}, "2": {"u": 1}}
  ranked = lists.from_run(run, qrels, depth=2)
  assert ranked.qids == ["1", "2", "3"]  # "3": unjudged, all non-relevant
  np.testing.assert_array_equal(ranked.labels_qn,
                                [[False, True], [True, False], [False, False]])
  np.testing.assert_array_equal(ranked.mask_qn,
                                [[True, True], [True, False], [True, False]])
  assert lists.from_run(run, qrels, 2, judged_only=True).qids == ["1", "2"]
