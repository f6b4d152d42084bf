"""The BeST segmenter: window arithmetic, plans, padded arrays and packing."""

import dataclasses
import functools
import itertools
import json
import random
import types

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from best_jax import cli
from best_jax.errors import InputError
from best_jax.experiment.examples import AllSegmentExamples
from best_jax.experiment.inputs import QueryStore, SegmentCache
from best_jax.experiment.regimes import Group
from best_jax.segments import (SegmenterConfig, Segmenter, SpecialTokens,
                               pack_inputs, plan_segments)

# ---------------------------------------------------------------------------
# Window arithmetic.


def test_window_arithmetic():
  config = SegmenterConfig(max_len=256, max_query_len=32, max_title_len=32)
  assert config.content_len == 256 - 3 - 32 == 221
  assert config.window(5) == 216
  assert config.window(100) == 221 - 32  # The title is cut to 32 tokens.
  # [CLS] + full query + [SEP] + title + window + [SEP] fills max_len exactly.
  assert 1 + 32 + 1 + 5 + config.window(5) + 1 == 256


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_len=67, max_query_len=32, max_title_len=32), "no room"),
    (dict(unit="paragraph"), "unit must be one of"),
    (dict(train_lengths="normal"), "train_lengths must be one of"),
    (dict(k_train=0), "k_train"),
    (dict(max_segments=0), "max_segments"),
])
def test_bad_config_is_an_input_error(kwargs, message):
  with pytest.raises(InputError, match=message):
    SegmenterConfig(**kwargs)


# ---------------------------------------------------------------------------
# plan_segments: hand-checked cases, then properties.


def test_plan_packs_whole_sentences_into_windows():
  # Sentences [0,3) [3,5) [5,10) [10,12).
  assert plan_segments([0, 3, 5, 10], 12, 5) == [(0, 5), (5, 10), (10, 12)]
  assert plan_segments([0, 3, 5, 10], 12, 6) == [(0, 5), (5, 10), (10, 12)]
  assert plan_segments([0, 3, 5, 10], 12, 12) == [(0, 12)]


def test_plan_cuts_a_sentence_longer_than_the_window():
  # Sentences [0,2) [2,13): the second is cut every 4 tokens.
  assert plan_segments([0, 2], 13, 4) == [(0, 2), (2, 6), (6, 10), (10, 13)]
  # The remainder of a cut sentence is packed with the next sentences.
  assert plan_segments([0, 7, 8], 10, 4) == [(0, 4), (4, 8), (8, 10)]
  assert plan_segments([0, 7, 8], 10, 5) == [(0, 5), (5, 10)]


def test_plan_sentence_unit_gives_one_sentence_per_segment():
  assert plan_segments([0, 3, 5, 10], 12, 4, unit="sentence") == [
      (0, 3), (3, 5), (5, 9), (9, 10), (10, 12)]


def test_plan_empty_document_and_max_count():
  assert plan_segments([], 0, 5) == []
  assert plan_segments([0, 3, 5, 10], 12, 3, max_count=2) == [(0, 3), (3, 5)]


class _AlwaysTwo:
  """A fake generator whose every draw is 2."""

  def integers(self, low, high):
    del low, high
    return 2


def test_plan_random_targets_keep_a_long_first_sentence_whole():
  # Targets of 2 are below the 3-token sentences, which fit the window of 8:
  # each is kept whole rather than cut.
  assert plan_segments([0, 3, 6], 9, 8, rng=_AlwaysTwo(), min_len=2) == [
      (0, 3), (3, 6), (6, 9)]
  # Sentences of 1 token: each target of 2 takes two of them.
  assert plan_segments(range(5), 5, 8, rng=_AlwaysTwo(), min_len=2) == [
      (0, 2), (2, 4), (4, 5)]


def _boundaries(sentence_lengths):
  return [0, *itertools.accumulate(sentence_lengths)][:-1]


def _check_plan(ranges, sentence_lengths, window, num_tokens):
  starts = set(_boundaries(sentence_lengths))
  ends = set(itertools.accumulate(sentence_lengths))
  position = 0
  for start, end in ranges:
    assert start == position, "segments are consecutive and in order"
    assert 1 <= end - start <= window
    if start not in starts:
      # Only the remainder of a sentence longer than the window.
      sentence_start = max(s for s in starts if s < start)
      sentence_end = min(e for e in ends if e > start)
      assert sentence_end - sentence_start > window
    position = end
  return position


@hypothesis.settings(max_examples=400, deadline=None)
@hypothesis.given(
    sentence_lengths=st.lists(st.integers(1, 30), max_size=40),
    window=st.integers(1, 25), unit=st.sampled_from(["window", "sentence"]),
    seed=st.none() | st.integers(0, 2**16), min_len=st.integers(1, 30))
def test_plan_properties(sentence_lengths, window, unit, seed, min_len):
  num_tokens = sum(sentence_lengths)
  rng = None if seed is None else np.random.default_rng(seed)
  ranges = plan_segments(_boundaries(sentence_lengths), num_tokens, window,
                         unit=unit, rng=rng, min_len=min_len)
  assert _check_plan(ranges, sentence_lengths, window, num_tokens) == (
      num_tokens), "every token lands in exactly one segment"
  if unit == "window" and rng is None:
    # Greedy: the next sentence would not have fitted.
    bounds = set(_boundaries(sentence_lengths)) | {num_tokens}
    for start, end in ranges[:-1]:
      following = min(b for b in bounds if b > end)
      assert following - start > window
  if unit == "sentence":
    ends = set(itertools.accumulate(sentence_lengths))
    for start, end in ranges:
      assert end in ends or end - start == window


# ---------------------------------------------------------------------------
# The Segmenter with the MiniLM tokenizer.

# content_len 14 - 5 = 9; a 2-token title leaves a window of 7 body tokens.
SMALL = SegmenterConfig(max_len=14, max_query_len=2, max_title_len=2,
                        min_len=2, k_train=4)
TEXT = "One two three. Four five. Six seven eight nine ten eleven twelve. End."


@functools.cache
def _tokenizer():
  from best_jax.models.pretrained import load_tokenizer
  return load_tokenizer()


@functools.cache
def _segmenter(config=SMALL):
  return Segmenter(config, tokenizer=_tokenizer())


def _reference_ids(text):
  return _tokenizer()(text, add_special_tokens=False)["input_ids"]


def _bodies(batch, d):
  title_len = batch.title_lengths_d[d]
  return [batch.tokens_dsl[d, s, title_len:batch.lengths_ds[d, s]].tolist()
          for s in range(batch.num_segments_d[d])]


def test_hand_checked_document():
  segmenter = _segmenter()
  assert segmenter.config.window(2) == 7
  assert len(_reference_ids(TEXT)) == 17  # 4 + 3 + 8 + 2 tokens.
  batch = segmenter.segment([("My title", TEXT)])
  title_ids = _reference_ids("My title")
  assert batch.tokens_dsl.shape == (1, 3, 9)
  assert batch.num_segments_d.tolist() == [3]
  assert batch.title_lengths_d.tolist() == [2]
  assert batch.lengths_ds.tolist() == [[2 + 7, 2 + 7, 2 + 3]]
  spans = [TEXT[a:b] for a, b in batch.spans_ds2[0].tolist()]
  # Two whole sentences; the long one cut at the window; its rest + "End.".
  assert spans == ["One two three. Four five.",
                   "Six seven eight nine ten eleven twelve", ". End."]
  for s in range(3):
    assert batch.tokens_dsl[0, s, :2].tolist() == title_ids
  ids = _reference_ids(TEXT)
  assert _bodies(batch, 0) == [ids[:7], ids[7:14], ids[14:]]
  assert batch.mask_dsl[0].sum(-1).tolist() == [9, 9, 5]
  assert batch.tokens_dsl[0, 2, 5:].tolist() == [0] * 4
  assert batch.dropped_d.tolist() == [0]


def test_sentence_unit():
  config = SegmenterConfig(max_len=14, max_query_len=2, max_title_len=2,
                           unit="sentence")
  batch = _segmenter(config).segment([("My title", TEXT)])
  spans = [TEXT[a:b] for a, b in batch.spans_ds2[0].tolist()]
  assert spans == ["One two three.", "Four five.",
                   "Six seven eight nine ten eleven twelve", ".", "End."]
  # Birch scores sentences without a title: max_title_len=0.
  untitled = _segmenter(dataclasses.replace(config, max_title_len=0))
  batch = untitled.segment([("My title", TEXT)])
  assert batch.title_lengths_d.tolist() == [0]
  assert batch.lengths_ds.tolist() == [[4, 3, 8, 2]]
  assert batch.tokens_dsl[0, 3, :2].tolist() == _reference_ids("End.")


def test_padding_empty_documents_and_inference_cap():
  docs = [("My title", TEXT), ("Only a title", ""), ("", ""), ("", "Word.")]
  batch = _segmenter().segment(docs)
  assert batch.tokens_dsl.shape == (4, 3, 9)
  assert batch.num_segments_d.tolist() == [3, 1, 1, 1]
  assert batch.segment_mask_ds.tolist() == [[True] * 3] + [[True, False,
                                                            False]] * 3
  # Titles are cut to max_title_len = 2 tokens.
  assert batch.lengths_ds[1:].tolist() == [[2, 0, 0], [0, 0, 0], [2, 0, 0]]
  assert batch.spans_ds2[1:, 0].tolist() == [[0, 0], [0, 0], [0, 5]]
  assert (batch.spans_ds2[1:, 1:] == -1).all()
  assert not batch.mask_dsl[1:, 1:].any()
  assert (batch.tokens_dsl[1:, 1:] == 0).all()
  capped = _segmenter(SegmenterConfig(
      max_len=14, max_query_len=2, max_title_len=2, max_segments=2)).segment(
          docs)
  assert capped.tokens_dsl.shape == (4, 2, 9)
  assert capped.dropped_d.tolist() == [1, 0, 0, 0]
  assert capped.num_segments_d.tolist() == [2, 1, 1, 1]
  wide = _segmenter().segment(docs, num_segments=5)
  assert wide.tokens_dsl.shape == (4, 5, 9)


def _long_text(num_sentences, seed=0):
  words = ("the of and to in is was for on that with as by at from his her "
           "it an were are which this be").split()
  rng = random.Random(seed)
  return " ".join(" ".join(rng.choice(words)
                           for _ in range(rng.randrange(2, 12))) + "."
                  for _ in range(num_sentences))


def test_training_segments_cover_the_inference_span_and_stop_there():
  """Selection (BeST iterations >= 2) sees the training segmentation: it
  must cover exactly the span inference scores (`max_segments` windows),
  no less (a gold passage there could never be selected) and no more (the
  last segment is cut where the span ends: no regime trains on text that
  inference never scores), however small `k_train` (the joint step's share)
  is."""
  config = SegmenterConfig(max_len=40, max_query_len=4, max_title_len=4,
                           min_len=5, k_train=2, max_segments=3)
  segmenter = _segmenter(config)
  docs = [(f"doc {i}", _long_text(40, seed=i)) for i in range(6)]
  tokenized = segmenter.tokenize(docs)
  infer = segmenter.segment_tokenized(tokenized)
  train = segmenter.segment_tokenized(tokenized, training=True, seed=3)
  assert (infer.num_segments_d == 3).all() and (infer.dropped_d > 0).all()
  assert (train.dropped_d == 0).all() and (train.num_segments_d > 2).any()
  for d in range(len(tokenized)):
    span_end = int(infer.spans_ds2[d, 2, 1])
    spans = train.spans_ds2[d, :train.num_segments_d[d]].tolist()
    assert spans[0][0] == 0  # Character spans, consecutive up to spaces:
    assert all(not docs[d][1][a[1]:b[0]].strip()
               for a, b in zip(spans, spans[1:]))
    assert spans[-1][0] < spans[-1][1] == span_end  # Reaches it, then stops.
    lengths = train.lengths_ds[d, :train.num_segments_d[d]]
    assert (lengths == train.mask_dsl[d, :len(lengths)].sum(-1)).all()


def test_training_segments_have_seeded_random_lengths_over_the_document():
  config = SegmenterConfig(max_len=40, max_query_len=4, max_title_len=4,
                           min_len=5, k_train=4)
  segmenter = _segmenter(config)
  docs = [(f"doc {i}", _long_text(40, seed=i)) for i in range(6)]
  tokenized = segmenter.tokenize(docs)
  infer = segmenter.segment_tokenized(tokenized)
  first = segmenter.segment_tokenized(tokenized, training=True, seed=7)
  again = segmenter.segment_tokenized(tokenized, training=True, seed=7)
  other = segmenter.segment_tokenized(tokenized, training=True, seed=8)
  # More, shorter segments than inference's windows, never cut at k_train.
  assert (first.num_segments_d > infer.num_segments_d).all()
  assert first.tokens_dsl.shape == (6, first.num_segments_d.max(),
                                    config.content_len)
  for name in ("tokens_dsl", "mask_dsl", "spans_ds2", "lengths_ds"):
    np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
  assert not np.array_equal(first.lengths_ds[:, :4], other.lengths_ds[:, :4])
  _check_batch(first, docs, tokenized, config)
  fixed = _segmenter(SegmenterConfig(
      max_len=40, max_query_len=4, max_title_len=4, train_lengths="window"))
  windows_only = fixed.segment_tokenized(tokenized, training=True, seed=1)
  np.testing.assert_array_equal(windows_only.tokens_dsl, infer.tokens_dsl)


def _check_batch(batch, docs, tokenized, config):
  length = config.content_len
  assert batch.tokens_dsl.dtype == np.int32
  assert batch.mask_dsl.dtype == bool and batch.segment_mask_ds.dtype == bool
  np.testing.assert_array_equal(
      batch.mask_dsl, np.arange(length) < batch.lengths_ds[..., None])
  np.testing.assert_array_equal(
      batch.segment_mask_ds,
      np.arange(batch.segment_mask_ds.shape[1]) < batch.num_segments_d[:, None])
  assert (batch.lengths_ds[~batch.segment_mask_ds] == 0).all()
  assert (batch.spans_ds2[~batch.segment_mask_ds] == -1).all()
  assert (batch.tokens_dsl[~batch.mask_dsl] == 0).all()
  for d, ((title, text), doc) in enumerate(zip(docs, tokenized)):
    title_len = batch.title_lengths_d[d]
    assert title_len == min(len(_reference_ids(title)), config.max_title_len)
    window = config.window(title_len)
    for s in range(batch.num_segments_d[d]):
      assert (batch.tokens_dsl[d, s, :title_len].tolist()
              == _reference_ids(title)[:title_len])
    bodies = _bodies(batch, d)
    assert all(len(b) <= window for b in bodies)
    # Every token of the text lands in exactly one segment, in order.
    assert sum(bodies, []) == _reference_ids(text)
    previous_end = 0
    position = 0
    starts = set(doc.sentence_starts.tolist())
    for s, body in enumerate(bodies):
      start, end = batch.spans_ds2[d, s].tolist()
      if body:
        assert previous_end <= start < end <= len(text)
        assert (start, end) == (doc.offsets_n2[position, 0],
                                doc.offsets_n2[position + len(body) - 1, 1])
        previous_end = end
        # A segment starts a sentence unless the previous one was cut.
        assert position in starts or len(bodies[s - 1]) == window
      position += len(body)


_PIECES = st.sampled_from(
    ["word", "Dr.", "3.5", ".", "!", "?", " ", " ", "\n\n", "é", "😀", "中文",
     "naïve", "\u200b", "\x00", "  ", "don't", "e.g.", "…", "。"])


@hypothesis.settings(max_examples=250, deadline=None)
@hypothesis.given(
    docs=st.lists(st.tuples(st.text(max_size=20),
                            st.text(max_size=120)
                            | st.lists(_PIECES, max_size=80).map("".join)),
                  min_size=1, max_size=3),
    training=st.booleans(), seed=st.integers(0, 100))
def test_segments_properties_on_arbitrary_text(docs, training, seed):
  config = SegmenterConfig(max_len=24, max_query_len=4, max_title_len=3,
                           min_len=2, k_train=2)
  segmenter = _segmenter(config)
  tokenized = segmenter.tokenize(docs)
  if not training:
    _check_batch(segmenter.segment_tokenized(tokenized), docs, tokenized,
                 config)
    return
  batch = segmenter.segment_tokenized(tokenized, training=True, seed=seed)
  assert (batch.num_segments_d >= 1).all()
  _check_batch(batch, docs, tokenized, config)


def test_hundred_thousand_token_documents():
  segmenter = _segmenter(SegmenterConfig(max_len=256))
  docs = [("Long", _long_text(16_000)), ("No punctuation", "word " * 100_000)]
  tokenized = segmenter.tokenize(docs)
  assert len(tokenized[0].token_ids) > 95_000
  assert len(tokenized[1].token_ids) == 100_000
  batch = segmenter.segment_tokenized(tokenized)
  _check_batch(batch, docs, tokenized, segmenter.config)
  # One sentence: full windows of 221 - 4 title tokens, then the rest.
  assert batch.title_lengths_d[1] == len(_reference_ids("No punctuation")) == 4
  window = segmenter.config.window(4)
  assert batch.num_segments_d[1] == -(-100_000 // window)
  assert batch.lengths_ds[1, 0] == 4 + window
  assert batch.lengths_ds[1, batch.num_segments_d[1] - 1] == (
      4 + 100_000 % window)


# ---------------------------------------------------------------------------
# Packing [CLS] query [SEP] title segment [SEP].

SPECIAL = SpecialTokens(cls_id=101, sep_id=102, pad_id=0)
PACK = SegmenterConfig(max_len=12, max_query_len=3, max_title_len=1)


def _pack(query, content, config=PACK):
  q = np.asarray([query + [0] * (4 - len(query))])
  c = np.asarray([content + [0] * (config.content_len + 2 - len(content))])
  return {k: v[0].tolist() for k, v in pack_inputs(
      q, q > 0, c, c > 0, config=config, special=SPECIAL).items()}


def test_pack_hand_checked():
  out = _pack([7, 8, 9, 10], [1, 2, 3])  # The query is cut to 3 tokens.
  assert out["input_ids"] == [101, 7, 8, 9, 102, 1, 2, 3, 102, 0, 0, 0]
  assert out["attention_mask"] == [True] * 9 + [False] * 3
  assert out["token_type_ids"] == [0] * 5 + [1] * 4 + [0] * 3
  # A full query and a full content fill max_len exactly.
  out = _pack([7, 8, 9], [1, 2, 3, 4, 5, 6])
  assert out["input_ids"] == [101, 7, 8, 9, 102, 1, 2, 3, 4, 5, 6, 102]
  assert all(out["attention_mask"])
  # A short query leaves padding; an empty one still has both separators.
  assert _pack([7], [1, 2, 3, 4, 5, 6])["input_ids"] == [
      101, 7, 102, 1, 2, 3, 4, 5, 6, 102, 0, 0]
  assert _pack([], [1, 2])["input_ids"] == [101, 102, 1, 2, 102] + [0] * 7
  # Content too long for the row is cut at its end.
  assert _pack([7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8])["input_ids"] == [
      101, 7, 8, 9, 102, 1, 2, 3, 4, 5, 6, 102]


def test_pack_broadcasts_one_query_over_a_documents_segments():
  segmenter = _segmenter()
  batch = segmenter.segment([("My title", TEXT), ("Other", "Short one.")])
  query_ids_nq, query_mask_nq = segmenter.tokenize_queries(
      ["where is it", "a very long query indeed"])
  assert query_ids_nq.shape == (2, 2) and query_mask_nq.all()
  inputs = pack_inputs(query_ids_nq[:, None], query_mask_nq[:, None],
                       batch.tokens_dsl, batch.mask_dsl, config=SMALL,
                       special=segmenter.special)
  assert inputs["input_ids"].shape == (2, 3, 14)
  tokenizer = _tokenizer()
  text = tokenizer.decode(inputs["input_ids"][0, 1])
  assert text == ("[CLS] where is [SEP] my title six seven eight nine ten "
                  "eleven twelve [SEP]")
  assert inputs["attention_mask"][0].sum(-1).tolist() == [14, 14, 10]
  assert (inputs["token_type_ids"][0, 0] == [0] * 4 + [1] * 10).all()


# ---------------------------------------------------------------------------
# The command line.


def test_segment_command(tmp_path, capsys):
  corpus = tmp_path / "corpus.jsonl"
  docs = [{"id": "d1", "title": "My title", "text": TEXT},
          {"id": "d2", "title": "", "text": "Short one."},
          {"id": "d3", "title": "Empty", "text": ""}]
  corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
  out = tmp_path / "stats.json"
  assert cli.main(["segment", "--corpus", str(corpus), "--max-len", "14",
                   "--max-query-len", "2", "--max-title-len", "2",
                   "--out", str(out)]) == 0
  stats = json.loads(out.read_text())
  assert stats["documents"] == 3
  assert stats["segments_per_document"]["total"] == 3 + 1 + 1
  assert stats["tokens_per_document"]["total"] == 17 + 3 + 0
  assert stats["segment_body_tokens"]["max"] == 7
  assert "segments per document" in capsys.readouterr().out
  assert cli.main(["segment", "--corpus", str(corpus), "--max-len", "5"]) == 2
  assert "no room" in capsys.readouterr().err
  # --training: seeded random lengths from --min-len up, over the same text,
  # as `best_jax train` segments it (per document, whatever the batch size).
  def train(*more):
    assert cli.main(["segment", "--corpus", str(corpus), "--max-len", "14",
                     "--max-query-len", "2", "--max-title-len", "2",
                     "--training", "--min-len", "2", "--out", str(out),
                     *more]) == 0
    return json.loads(out.read_text())
  first, again = train("--seed", "5"), train("--seed", "5", "--batch-size", "1")
  assert first == dict(again, config=first["config"])
  assert first["training"] and first["seed"] == 5
  assert first["tokens_per_document"] == stats["tokens_per_document"]
  assert first["segment_body_tokens"]["total"] == 17 + 3
  assert (first["segments_per_document"]["total"]
          > stats["segments_per_document"]["total"])


def test_segment_cache_keeps_the_most_recent_documents():
  documents = {d: ("", f"{d} {TEXT}") for d in "abcd"}
  cache = SegmentCache(_segmenter(), documents, training=False, capacity=2)
  cache.prepare(["a"])
  cache.prepare(["b"])
  cache.prepare(["a"])  # a used again: b is now the oldest
  cache.prepare(["c"])
  assert sorted(cache._cache) == ["a", "c"]  # pylint: disable=protected-access
  cache.prepare(["a", "b", "d"])  # one request keeps all of its documents
  assert sorted(cache._cache) == ["a", "b", "d"]  # pylint: disable=protected-access
  assert cache["b"].count == SegmentCache(
      _segmenter(), documents, training=False)["b"].count


def test_joint_step_examples_take_the_leading_k_train_training_segments():
  """The training segmentation keeps every segment of the inference span,
  whatever `k_train`; only BeST's joint-step example cuts it to the first
  `k_train` (Eq.3), with a segment mask."""
  config = SegmenterConfig(max_len=40, max_query_len=4, max_title_len=4,
                           min_len=5, k_train=4, max_segments=4)
  documents = {f"d{i}": (f"doc {i}", _long_text(8 + 6 * i, seed=i))
               for i in range(5)}
  cache = SegmentCache(_segmenter(config), documents, training=True, seed=2)
  wide = SegmentCache(_segmenter(dataclasses.replace(config, k_train=99)),
                      documents, training=True, seed=2)
  cache.prepare(list(documents))
  wide.prepare(list(documents))
  counts = cache.counts()
  assert counts == wide.counts() and cache.width is None
  assert min(counts.values()) < 4 < max(counts.values())
  inputs = types.SimpleNamespace(
      segmenter=cache.segmenter, train_segments=cache,
      queries=QueryStore.build(cache.segmenter, {"q": "a question"}))
  example = AllSegmentExamples(inputs)(0, Group("q", tuple(documents)))
  assert example["input_ids"].shape[:2] == (5, 4)
  for g, docid in enumerate(documents):
    kept = min(counts[docid], 4)
    assert example["mask"][g].tolist() == [s < kept for s in range(4)]
    for s in range(kept):
      row = example["input_ids"][g, s].tolist()
      body = cache[docid].tokens_sl[s][cache[docid].mask_sl[s]].tolist()
      assert any(row[i:i + len(body)] == body for i in range(len(row)))
    assert not example["attention_mask"][g, kept:].any()
