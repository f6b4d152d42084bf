"""Segment selection: masked argmax, chunked scoring, negative sampling."""

import jax.numpy as jnp
import numpy as np

from best_jax.select import selection
from best_jax.select.bm25_segments import bm25_best_segments
from best_jax.train import regimes
from best_jax.train.batches import gold_segment


def test_masked_argmax_ignores_padding_and_all_padded_rows():
  scores = jnp.array([[0.1, 5.0, jnp.nan],      # padding holds garbage
                      [jnp.inf, -1.0, -2.0],    # best padded score is +inf
                      [jnp.nan, jnp.nan, 3.0],  # all padded
                      [2.0, 2.0, 1.0]])         # tie -> earlier
  mask = jnp.array([[True, True, False],
                    [False, True, True],
                    [False, False, False],
                    [True, True, True]])
  index, valid = selection.masked_argmax(scores, mask)
  assert index.tolist() == [1, 1, 0, 0]
  assert valid.tolist() == [True, True, False, True]
  assert not jnp.any(jnp.isnan(index.astype(jnp.float32)))


class _Source:
  """A fake row source: doc 'a' has 3 segments, 'b' 1."""
  counts = {"a": 3, "b": 1}

  def num_segments(self, docid):
    return self.counts[docid]

  def inputs(self, rows):
    for (_, docid), index in rows:
      assert index < self.counts[docid], "a padded segment was scored"
    return {"tokens": np.array([10 * (d == "a") + s for (_, d), s in rows])}


def test_scorer_scores_only_valid_segments_in_fixed_chunks():
  def score_rows(params, inputs):
    return inputs["tokens"].astype(float) * params

  scorer = selection.SegmentScorer(score_rows, _Source(), rows_per_call=2)
  scores = scorer.score(2.0, [("q", "a"), ("q", "b")])
  np.testing.assert_allclose(scores[("q", "a")], [20.0, 22.0, 24.0])
  np.testing.assert_allclose(scores[("q", "b")], [0.0])
  assert selection.select(scores) == {("q", "a"): 2, ("q", "b"): 0}
  first = scorer.score(1.0, [("q", "a")], max_segments=1)
  np.testing.assert_allclose(first[("q", "a")], [10.0])


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
  batch = [regimes.Group("q", ("p", "n"))]
  counts = {"p": 3, "n": 2}
  rng = np.random.default_rng(0)
  first = regimes.choose_segments("firstp", batch, num_segments=counts, rng=rng)
  assert first.tolist() == [[0, 0]]
  gold = regimes.choose_segments("goldp", batch, num_segments=counts, rng=rng)
  assert gold.tolist() == [[-1, 0]]
  chosen = regimes.choose_segments("best", batch, num_segments=counts, rng=rng,
                                   selected={("q", "p"): 2, ("q", "n"): 1})
  assert chosen.tolist() == [[2, 1]]
  draws = {tuple(regimes.choose_segments("maxp_all", batch,
                                         num_segments=counts, rng=rng)[0])
           for _ in range(60)}
  assert {d[0] for d in draws} == {0, 1, 2} and {d[1] for d in draws} == {0, 1}


def test_gold_segment_and_bm25_best_segment():
  spans = np.array([[0, 10], [11, 30], [31, 50]])
  assert gold_segment(spans, (12, 40)) == 1      # overlaps 18 vs 9 chars
  assert gold_segment(spans, (45, 60)) == 2
  best = bm25_best_segments(
      {"q": "red fox"},
      {("q", "d"): ["a blue cat", "the red fox jumps", "red"]})
  assert best == {("q", "d"): 1}
