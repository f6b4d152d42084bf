"""Segment selection: masked argmax, segment choice per regime, negative
sampling, gold and BM25-best segments (device scoring: test_scoring.py)."""

import jax.numpy as jnp
import numpy as np

from best_jax.select.bm25_segments import bm25_best_segments
from best_jax.experiment import regimes
from best_jax.train.best import masked_argmax


def test_masked_argmax_ignores_padding_and_all_padded_rows():
  scores = jnp.array([[0.1, 5.0, jnp.nan],      # padding holds garbage
                      [jnp.inf, -1.0, -2.0],    # best padded score is +inf
                      [jnp.nan, jnp.nan, 3.0],  # all padded
                      [2.0, 2.0, 1.0]])         # tie -> earlier
  mask = jnp.array([[True, True, False],
                    [False, True, True],
                    [False, False, False],
                    [True, True, True]])
  index, valid = masked_argmax(scores, mask)
  assert index.tolist() == [1, 1, 0, 0]
  assert valid.tolist() == [True, True, False, True]
  assert not jnp.any(jnp.isnan(index.astype(jnp.float32)))


def test_schedule_is_seeded_and_samples_only_negatives():
  qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d5": 2}, "q3": {"d9": 0}}
  run = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0, "d4": 0.5},
         "q2": {"d5": 1.0, "d6": 0.9, "d7": 0.8},
         "q3": {"d9": 1.0}}
  kwargs = dict(num_negatives=2, depth=3, batch_size=2, num_steps=5)
  a = regimes.schedule(qrels, run, ["q1", "q2", "q3"], seed=1, **kwargs)
  b = regimes.schedule(qrels, run, ["q1", "q2", "q3"], seed=1, **kwargs)
  c = regimes.schedule(qrels, run, ["q1", "q2", "q3"], seed=2, **kwargs)
  assert a == b and a != c
  assert len(a) == 5 and all(len(batch) == 2 for batch in a)
  for batch in a:
    for group in batch:
      assert group.qid in ("q1", "q2")  # q3 has no positive
      positive, *negatives = group.docids
      assert qrels[group.qid][positive] >= 1
      top3 = list(run[group.qid])[:3]
      assert all(n in top3 and qrels[group.qid].get(n, 0) < 1
                 for n in negatives)


def test_choose_segments_per_regime():
  group = regimes.Group("q", ("p", "n"))
  spans = [np.array([[0, 10], [11, 30], [31, 50]]), np.array([[0, 9], [10, 90]])]
  rng = np.random.default_rng(0)
  assert regimes.choose_segments("firstp", group, spans, rng=rng) == [0, 0]
  assert regimes.choose_segments(
      "best", group, spans, rng=rng,
      selected={("q", "p"): 2, ("q", "n"): 1}) == [2, 1]
  draws = {tuple(regimes.choose_segments("maxp_all", group, spans, rng=rng))
           for _ in range(60)}
  assert {d[0] for d in draws} == {0, 1, 2} and {d[1] for d in draws} == {0, 1}


def test_goldp_holds_the_answer_start_and_draws_the_rest_by_length():
  """The positive's segment holds its answer start (a space before a segment
  belongs to the one before); a negative's holds a random character, so its
  second segment (80 characters) is drawn about 8 times as often as its
  first (9 and a space); an answer past the segments is drawn like a
  negative."""
  group = regimes.Group("q", ("p", "n"))
  spans = [np.array([[0, 10], [11, 30], [31, 50]]), np.array([[0, 9], [10, 90]])]
  rng = np.random.default_rng(0)
  for start, index in ((0, 0), (10, 0), (11, 1), (30, 1), (49, 2)):
    assert regimes.choose_segments("goldp", group, spans, rng=rng,
                                   gold_start=start)[0] == index
  draws = np.array([regimes.choose_segments("goldp", group, spans, rng=rng,
                                            gold_start=50)
                    for _ in range(4000)])
  assert 7 < (draws[:, 1] == 1).sum() / (draws[:, 1] == 0).sum() < 9
  assert set(draws[:, 0]) == {0, 1, 2}
  assert 0.3 < (draws[:, 0] == 1).mean() < 0.5  # 20 of 50 characters


def test_bm25_best_segment():
  best = bm25_best_segments(
      {"q": "red fox"},
      {("q", "d"): ["a blue cat", "the red fox jumps", "red"]})
  assert best == {("q", "d"): 1}
