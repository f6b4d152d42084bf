"""Tests of chunked segment scoring and masked best-segment selection."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from best_jax.errors import InputError
from best_jax.models import BertConfig, CrossEncoderRanker
from best_jax.select.scoring import NO_SEGMENT, SegmentScorer, best_segments

LENGTH = 16


def _documents(segment_mask_ds, seed=0):
  """Random token arrays [docs, segments, length] for a segment mask."""
  rng = np.random.default_rng(seed)
  shape = segment_mask_ds.shape + (LENGTH,)
  lengths_ds = rng.integers(3, LENGTH + 1, segment_mask_ds.shape)
  mask_dsl = (np.arange(LENGTH) < lengths_ds[..., None]) & segment_mask_ds[
      ..., None]
  ids_dsl = np.where(mask_dsl, rng.integers(1, 128, shape), 0)
  types_dsl = ((np.arange(LENGTH) >= 4) & mask_dsl).astype(np.int32)
  return ids_dsl, mask_dsl, types_dsl


@pytest.fixture(scope="module")
def ranker():
  return CrossEncoderRanker(BertConfig.tiny(), rngs=nnx.Rngs(0))


def test_scores_valid_segments_only_and_equal_direct_calls(ranker):
  segment_mask_ds = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1],
                              [1, 0, 0, 0], [1, 1, 1, 0]], bool)
  ids, mask, types = _documents(segment_mask_ds)
  scorer = SegmentScorer(ranker, chunk_size=8)
  scores_ds = scorer(ids, mask, types, segment_mask_ds)
  direct_ds = np.asarray(ranker(jnp.asarray(ids), jnp.asarray(mask),
                                jnp.asarray(types)))
  assert scores_ds.dtype == np.float32
  assert np.isneginf(scores_ds[~segment_mask_ds]).all()
  np.testing.assert_allclose(scores_ds[segment_mask_ds],
                             direct_ds[segment_mask_ds], rtol=1e-5, atol=1e-6)


def test_no_recompilation_across_batches(ranker):
  scorer = SegmentScorer(ranker, chunk_size=8)
  rng = np.random.default_rng(1)
  compiles = []
  for docs, segments in [(3, 4), (7, 5), (2, 2), (10, 6)]:
    segment_mask_ds = rng.random((docs, segments)) < 0.6
    segment_mask_ds[0] = False  # One all-padded document in every batch.
    scores_ds = scorer(*_documents(segment_mask_ds, seed=docs),
                       segment_mask_ds)
    assert np.isfinite(scores_ds[segment_mask_ds]).all()
    compiles.append(scorer.compiled_variants)
  assert compiles == [1, 1, 1, 1]


def test_length_buckets_cut_padding_without_changing_scores(ranker):
  scorer = SegmentScorer(ranker, chunk_size=8, length_bucket=8)
  segment_mask_ds = np.ones((4, 5), bool)
  segment_mask_ds[1, 3:] = False
  ids, mask, types = _documents(segment_mask_ds, seed=4)
  mask[0, 0, 7:] = False  # Rows of real length 1 ... 16: widths 8 and 16.
  mask[2, :, 2:] = False
  scores_ds = scorer(ids, mask, types, segment_mask_ds)
  direct_ds = np.asarray(ranker(jnp.asarray(ids), jnp.asarray(mask),
                                jnp.asarray(types)))
  np.testing.assert_allclose(scores_ds[segment_mask_ds],
                             direct_ds[segment_mask_ds], rtol=1e-5, atol=1e-5)
  assert np.isneginf(scores_ds[~segment_mask_ds]).all()
  assert scorer.compiled_variants == 2
  scorer(ids, mask, types, segment_mask_ds)
  assert scorer.compiled_variants == 2


def test_chunks_are_sharded_over_the_data_axis(ranker):
  mesh = jax.make_mesh((4, 2), ("data", "model"),
                       axis_types=(jax.sharding.AxisType.Explicit,) * 2)
  scorer = SegmentScorer(ranker, chunk_size=4, mesh=mesh)
  assert scorer.rows.spec == jax.P("data", None)
  segment_mask_ds = np.ones((3, 3), bool)  # 9 rows: 3 chunks, last padded.
  ids, mask, types = _documents(segment_mask_ds, seed=2)
  scores_ds = scorer(ids, mask, types, segment_mask_ds)
  direct_ds = np.asarray(ranker(jnp.asarray(ids), jnp.asarray(mask),
                                jnp.asarray(types)))
  np.testing.assert_allclose(scores_ds, direct_ds, rtol=1e-5, atol=1e-6)
  with pytest.raises(InputError, match="multiple"):
    SegmentScorer(ranker, chunk_size=6, mesh=mesh)


def test_no_valid_segment_at_all(ranker):
  scorer = SegmentScorer(ranker, chunk_size=8)
  segment_mask_ds = np.zeros((2, 3), bool)
  scores_ds = scorer(*_documents(segment_mask_ds), segment_mask_ds)
  assert np.isneginf(scores_ds).all()


def test_best_segments_masks_padding():
  scores_ds = jnp.array([[0.5, 2.0, 9.0], [-1.0, -3.0, 7.0],
                         [1.0, 1.0, 0.0], [jnp.nan, 5.0, 5.0]])
  segment_mask_ds = jnp.array([[1, 1, 0], [0, 0, 0], [1, 1, 1], [0, 1, 1]],
                              bool)
  index_d, score_d = best_segments(scores_ds, segment_mask_ds)
  np.testing.assert_array_equal(np.asarray(index_d), [1, NO_SEGMENT, 0, 1])
  np.testing.assert_array_equal(np.asarray(score_d), [2.0, -np.inf, 1.0, 5.0])


def test_mismatched_shapes_are_an_input_error(ranker):
  scorer = SegmentScorer(ranker, chunk_size=8)
  ids, mask, types = _documents(np.ones((2, 3), bool))
  with pytest.raises(InputError, match="segment_mask_ds"):
    scorer(ids, mask, types, np.ones((2, 4), bool))
