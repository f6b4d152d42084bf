"""Chunked segment scoring (`select.selection.SegmentScorer`) with a real
tiny ranker and trainer: only valid segments are scored, in fixed-shape
chunks sharded over the mesh (nothing recompiles, the last chunk is padded,
never dropped), and the scores equal direct model calls."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from best_jax.models import BertConfig, CrossEncoderRanker
from best_jax.select.selection import SegmentScorer
from best_jax.train.sharding import STANDARD_LOGICAL_AXIS_RULES
from best_jax.train.state import split_params
from best_jax.train.trainer import build_trainer

LENGTH = 16


class _RandomSegments:
  """A scorer source: doc `d{i}` has `counts[i]` segments of random rows."""

  def __init__(self, counts, seed=0):
    rng = np.random.default_rng(seed)
    self.counts = {f"d{i}": c for i, c in enumerate(counts)}
    self.rows = {}
    for docid, count in self.counts.items():
      for s in range(count):
        real = int(rng.integers(3, LENGTH + 1))
        mask = np.arange(LENGTH) < real
        self.rows[(docid, s)] = dict(
            input_ids=np.where(mask, rng.integers(1, 128, LENGTH), 0),
            attention_mask=mask,
            token_type_ids=((np.arange(LENGTH) >= 4) & mask).astype(np.int32))
    self.asked = []

  def num_segments(self, docid):
    return self.counts[docid]

  def inputs(self, rows):
    for (_, docid), s in rows:
      assert s < self.counts[docid], "a padded segment was scored"
      self.asked.append((docid, s))
    return {k: np.stack([self.rows[(d, s)][k] for (_, d), s in rows])
            for k in ("input_ids", "attention_mask", "token_type_ids")}


@pytest.fixture(scope="module")
def setup():
  """(trainer on all 8 devices, params, the ranker for direct calls)."""
  config = ml_collections.ConfigDict(dict(
      mesh=dict(shape=(-1, 1), axis_names=("data", "model")),
      logical_axis_rules=STANDARD_LOGICAL_AXIS_RULES,
      optimizer=dict(learning_rate=1e-3, warmup_steps=1, total_steps=10,
                     b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0,
                     max_grad_norm=1.0),
      train=dict(loss="pairwise_hinge")))
  ranker = CrossEncoderRanker(BertConfig.tiny(), rngs=nnx.Rngs(0))
  trainer = build_trainer(
      lambda rngs: CrossEncoderRanker(BertConfig.tiny(), rngs=rngs), config)
  _, params = split_params(ranker)
  state = trainer.init_from_params(jax.tree.map(np.array, params), 0)
  return trainer, state.params, ranker


def _direct(ranker, source, docid, s):
  row = source.rows[(docid, s)]
  return float(ranker(*(jnp.asarray(row[k])[None] for k in (
      "input_ids", "attention_mask", "token_type_ids")))[0])


def test_scores_equal_direct_calls_in_one_compiled_shape(setup):
  trainer, params, ranker = setup
  source = _RandomSegments([2, 0, 5, 1, 3])  # 11 rows: 2 chunks of 8.
  scorer = SegmentScorer(functools.partial(trainer.score, size=8), source, 8)
  pairs = [("q", f"d{i}") for i in range(5)]
  scores = scorer.score(params, pairs)
  assert [len(scores[p]) for p in pairs] == [2, 0, 5, 1, 3]
  assert sorted(source.asked) == sorted(source.rows)  # each once, no padding
  for (_, docid), values in scores.items():
    for s, value in enumerate(values):
      np.testing.assert_allclose(value, _direct(ranker, source, docid, s),
                                 rtol=1e-5, atol=1e-6)
  # Other pair sets and a FirstP pass reuse the one compiled shape.
  scorer.score(params, pairs[2:3])
  first = scorer.score(params, pairs, max_segments=1)
  assert [len(first[p]) for p in pairs] == [1, 0, 1, 1, 1]
  np.testing.assert_allclose(first[("q", "d2")], scores[("q", "d2")][:1],
                             rtol=1e-6)
  assert trainer.score_step.__wrapped__._cache_size() == 1  # pylint: disable=protected-access


def test_no_valid_segment_at_all(setup):
  trainer, params, _ = setup
  scorer = SegmentScorer(functools.partial(trainer.score, size=8),
                         _RandomSegments([0, 0]), 8)
  scores = scorer.score(params, [("q", "d0"), ("q", "d1")])
  assert all(len(v) == 0 for v in scores.values())
