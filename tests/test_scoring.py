"""Device-resident segment scoring (`select.selection.SegmentScorer`) with a
real tiny ranker on 8 devices: only valid segments are scored, in
length-bucketed fixed-shape chunks (one compiled shape per bucket, the last
chunk padded, never dropped), the scores equal direct model calls, selection
is the masked argmax, and no parameter crosses from host to device."""

import jax
import numpy as np
import pytest
from flax import nnx


from best_jax.data.pipeline import Feature
from best_jax.models import BertConfig, CrossEncoderRanker
from best_jax.select.selection import SegmentScorer, default_buckets
from best_jax.train.sharding import make_mesh
from best_jax.train.trainer import build_trainer
from fakes import direct_scores, tiny_config

LENGTH = 32


class RandomSegments:
  """A row source: doc `d{i}` has `counts[i]` segments of random lengths."""
  width = None

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
    self.prepared = []

  def prepare(self, docids):
    self.prepared.extend(docids)

  def num_segments(self, docid):
    return self.counts[docid]

  def row_length(self, qid, docid, segment):
    return int(self.rows[(docid, segment)]["attention_mask"].sum())

  def row(self, qid, docid, segment, length):
    assert segment < self.counts[docid], "a padded segment was scored"
    assert self.row_length(qid, docid, segment) <= length
    self.asked.append((docid, segment))
    return {k: v[:length] for k, v in self.rows[(docid, segment)].items()}

  def features(self, length):
    return {"input_ids": Feature((length,), np.int32),
            "attention_mask": Feature((length,), bool),
            "token_type_ids": Feature((length,), np.int32)}


@pytest.fixture(scope="module")
def trainer():
  config = tiny_config()
  model_config = BertConfig.tiny(max_position_embeddings=LENGTH)
  return build_trainer(lambda rngs: CrossEncoderRanker(model_config,
                                                       rngs=rngs), config,
                       mesh=make_mesh((8, 1), ("data", "model")))


def test_scores_equal_direct_calls_in_buckets(trainer):
  source = RandomSegments([3, 1, 5, 2, 4, 1, 2])
  buckets = default_buckets(LENGTH, count=2)
  assert buckets == (16, 32)
  scorer = SegmentScorer(trainer, source, rows_per_call=8, buckets=buckets)
  params = trainer.init(0).params
  pairs = [(f"q{i % 2}", f"d{i}") for i in range(7)]
  with jax.transfer_guard_host_to_device("disallow"):
    scored = scorer.score(params, pairs)
  # Every valid segment once, no padded one (the source asserts).
  assert sorted(source.asked) == sorted(source.rows)
  scores = scored.host()
  for (qid, docid) in pairs:
    count = source.counts[docid]
    rows = [source.rows[(docid, s)] for s in range(count)]
    want = direct_scores(trainer.graphdef, params,
                         {k: np.stack([r[k] for r in rows]) for k in rows[0]})
    assert scores[(qid, docid)].shape == (count,)
    np.testing.assert_allclose(scores[(qid, docid)], want, rtol=1e-5,
                               atol=1e-5)
  selected = scored.select()
  assert selected == {p: int(np.argmax(s)) for p, s in scores.items()}
  # The forward pass compiles once per bucket, the scatter once per buffer
  # shape; another call with other pairs reuses both (the pair axis is
  # padded to 64; the segment axis is the widest pair's).
  def compiled():  # pylint: disable=protected-access
    step = scorer._score_into
    return step.forward._cache_size(), step.scatter._cache_size()
  assert compiled() == (2, 1)
  again = scorer.score(params, pairs[2:]).host()
  assert compiled() == (2, 1)
  for pair in pairs[2:]:
    np.testing.assert_array_equal(again[pair], scores[pair])
  # Another buffer shape (at most 2 segments: the width falls from 5 to 2)
  # compiles only the scatter again, never the model's forward pass.
  first_two = scorer.score(params, pairs, max_segments=2).host()
  assert compiled() == (2, 2)
  for pair in pairs:
    np.testing.assert_allclose(first_two[pair], scores[pair][:2], rtol=1e-6)
  first = scorer.score(params, pairs[:3], max_segments=1).host()
  for pair in pairs[:3]:
    np.testing.assert_allclose(first[pair], scores[pair][:1], rtol=1e-6)
  assert scorer.built == (3, 3)  # rows this process built, of all rows


def test_padding_fraction_counts_the_bucketed_layout(trainer):
  source = RandomSegments([4] * 40, seed=3)
  pairs = [("q", f"d{i}") for i in range(40)]
  one_bucket = SegmentScorer(trainer, source, rows_per_call=8,
                             buckets=(LENGTH,))
  bucketed = SegmentScorer(trainer, source, rows_per_call=8,
                           buckets=default_buckets(LENGTH, count=4))
  tokens = sum(source.row_length("q", d, s) for (d, s) in source.rows)
  assert one_bucket.padding(pairs) == pytest.approx(
      1 - tokens / (160 * LENGTH))
  assert bucketed.padding(pairs) < one_bucket.padding(pairs)


class RandomTexts:
  """A bi-encoder row source over RandomSegments' rows: queries are the
  first 6 tokens of one of them."""

  def __init__(self, segments: RandomSegments):
    self.segments, self.width = segments, None
    self.embedded = []

  def prepare(self, docids):
    pass

  def num_segments(self, docid):
    return self.segments.counts[docid]

  def segment_length(self, docid, segment):
    return self.segments.row_length("", docid, segment)

  def segment_row(self, docid, segment, length):
    self.embedded.append((docid, segment))
    return self.segments.row("", docid, segment, length)

  def query_length(self, qid):
    return 6

  def query_row(self, qid, length):
    self.embedded.append(qid)
    row = dict(self.segments.rows[(f"d{int(qid[1:])}", 0)])
    row["attention_mask"] = np.arange(LENGTH) < 6
    return {k: v[:length] for k, v in row.items()}

  def features(self, length):
    return self.segments.features(length)


def test_bi_encoder_scores_embed_each_text_once(trainer):
  from best_jax.models.bi_encoder import BiEncoderRanker
  from best_jax.select.embedding import EmbeddingScorer
  model_config = BertConfig.tiny(max_position_embeddings=LENGTH)
  bi = build_trainer(lambda rngs: BiEncoderRanker(model_config, rngs=rngs),
                     tiny_config(), mesh=trainer.mesh)
  source = RandomTexts(RandomSegments([3, 1, 4, 2], seed=5))
  scorer = EmbeddingScorer(bi, source, rows_per_call=8,
                           buckets=default_buckets(LENGTH, count=2))
  params = bi.init(0).params
  pairs = [(f"q{q}", f"d{d}") for q in range(3) for d in range(4)]
  with jax.transfer_guard_host_to_device("disallow"):
    scored = scorer.score(params, pairs)
  scores = scored.host()
  # Each segment and each query embedded once, whatever the pairs.
  assert sorted(map(str, source.embedded)) == sorted(
      map(str, list(source.segments.rows) + ["q0", "q1", "q2"]))
  model = nnx.merge(bi.graphdef, jax.device_get(params))
  for qid, docid in pairs:
    query = source.query_row(qid, LENGTH)
    rows = [source.segments.rows[(docid, s)]
            for s in range(source.segments.counts[docid])]
    q_emb = model.embed(*(query[k][None] for k in ("input_ids",
                                                   "attention_mask",
                                                   "token_type_ids")))
    s_emb = model.embed(*(np.stack([r[k] for r in rows])[None]
                          for k in ("input_ids", "attention_mask",
                                    "token_type_ids")))
    want = np.asarray(model.score(q_emb, s_emb))[0]
    np.testing.assert_allclose(scores[(qid, docid)], want, rtol=1e-5,
                               atol=1e-5)
  assert scored.select() == {p: int(np.argmax(s)) for p, s in scores.items()}


def test_bi_encoder_padding_counts_segments_and_queries_once(trainer):
  from best_jax.models.bi_encoder import BiEncoderRanker
  from best_jax.select.embedding import EmbeddingScorer
  model_config = BertConfig.tiny(max_position_embeddings=LENGTH)
  bi = build_trainer(lambda rngs: BiEncoderRanker(model_config, rngs=rngs),
                     tiny_config(), mesh=trainer.mesh)
  source = RandomTexts(RandomSegments([3, 1, 4, 2], seed=5))
  scorer = EmbeddingScorer(bi, source, rows_per_call=8, buckets=(LENGTH,))
  pairs = [(f"q{q}", f"d{d}") for q in range(3) for d in range(4)]
  tokens = sum(source.segment_length(d, s) for (d, s) in source.segments.rows)
  # 10 segment rows in 2 chunks of 8, 3 query rows of 6 tokens in 1 chunk.
  assert scorer.padding(pairs) == pytest.approx(
      1 - (tokens + 18) / (24 * LENGTH))


def test_bi_encoder_reuses_embeddings_of_the_same_parameters(trainer):
  from best_jax.models.bi_encoder import BiEncoderRanker
  from best_jax.select.embedding import EmbeddingScorer
  model_config = BertConfig.tiny(max_position_embeddings=LENGTH)
  bi = build_trainer(lambda rngs: BiEncoderRanker(model_config, rngs=rngs),
                     tiny_config(), mesh=trainer.mesh)
  source = RandomTexts(RandomSegments([3, 1, 4, 2], seed=5))
  rows = 10  # segments of the four documents
  scorer = EmbeddingScorer(bi, source, rows_per_call=8,
                           buckets=default_buckets(LENGTH, count=2),
                           cache_rows=2 * 64)
  fresh = EmbeddingScorer(bi, RandomTexts(source.segments), rows_per_call=8,
                          buckets=default_buckets(LENGTH, count=2))
  params0, params1 = bi.init(0).params, bi.init(1).params
  first = [(f"q{q}", f"d{d}") for q in range(2) for d in (0, 1)]
  later = [(f"q{q}", f"d{d}") for q in range(3) for d in range(4)]

  def segments_embedded():
    return sum(isinstance(x, tuple) for x in source.embedded)

  # First documents only (FirstP-style), then all of them: only what is
  # missing is embedded, and the scores are those of a fresh scorer.
  scorer.score(params0, first, max_segments=1)
  assert segments_embedded() == 2
  with jax.transfer_guard_host_to_device("disallow"):
    scores = scorer.score(params0, later).host()
  # d1's only segment is reused; d0, d2, d3 are embedded (again) in full.
  assert segments_embedded() == 2 + rows - 1
  want = fresh.score(params0, later).host()
  for pair in later:
    np.testing.assert_array_equal(scores[pair], want[pair])
  scorer.score(params0, later)
  assert segments_embedded() == 2 + rows - 1
  # Other parameters embed again. params0 holds two buffers of 64 rows,
  # so keeping params1's too would pass cache_rows: params0's are dropped;
  # embedded again (one buffer), both fit and both are reused.
  scorer.score(params1, later)
  assert segments_embedded() == 2 + 2 * rows - 1
  scorer.score(params0, later)
  assert segments_embedded() == 2 + 3 * rows - 1
  scorer.score(params1, later)
  scorer.score(params0, later)
  assert segments_embedded() == 2 + 3 * rows - 1
  # No segment to score: no pair has a score (nothing is looked up).
  empty = EmbeddingScorer(bi, source, rows_per_call=8,
                          buckets=default_buckets(LENGTH, count=2),
                          cache_rows=64)
  assert all(len(v) == 0 for v in empty.score(
      params0, later, max_segments=0).host().values())
  # Without cache_rows (a reranker's per-call documents), nothing is kept.
  uncached = EmbeddingScorer(bi, source, rows_per_call=8,
                             buckets=default_buckets(LENGTH, count=2))
  uncached.score(params0, later)
  uncached.score(params0, later)
  assert segments_embedded() == 2 + 5 * rows - 1
