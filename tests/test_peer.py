"""Tests of the zero-shot peer: passages, fixed-shape embedding, MaxP."""

import os

import jax.numpy as jnp
import numpy as np
import pytest

from best_jax.errors import InputError
from best_jax.models.bi_encoder import load_bi_encoder
from best_jax.models.pretrained import checkpoint_dir, load_tokenizer
from best_jax.rerank.peer import TextEmbedder, passages, peer_scores


@pytest.fixture(scope="module")
def minilm():
  try:
    directory = checkpoint_dir()
  except InputError as e:
    if os.environ.get("CI", "").lower() == "true":
      pytest.fail(str(e))
    pytest.skip(str(e))
  return load_bi_encoder(directory, scale=1.0), load_tokenizer()


def test_passages_are_title_prefixed_whole_word_windows():
  words = [f"w{i}" for i in range(200)]
  text = " ".join(words[:50]) + "\n\n  " + " ".join(words[50:])
  got = passages("Super  Bowl", text, words=90)
  assert got == ["Super Bowl " + " ".join(words[:90]),
                 "Super Bowl " + " ".join(words[90:180]),
                 "Super Bowl " + " ".join(words[180:])]
  assert passages("T", "a b c", words=3) == ["T a b c"]
  assert passages("T", "   ") == ["T"]
  assert passages("", "a b c", words=2) == ["a b", "c"]


DOCUMENTS = {
    "d1": ("Photosynthesis", "Plants convert light into chemical energy. "
           "Chlorophyll absorbs mostly blue and red light. " * 12),
    "d2": ("Super Bowl", "The game was played in February at a stadium in "
           "California. The Broncos won the title. " * 9),
    "d3": ("Empty", ""),
}
TOPICS = {"q1": "what pigment absorbs light in plants",
          "q2": "who won the super bowl"}
CANDIDATES = {"q1": ["d1", "d2", "d3"], "q2": ["d2", "d1"]}


def _direct_maxp(model, tokenizer, query, title, text, words):
  texts = [query] + passages(title, text, words)
  batch = tokenizer(texts, padding=True, truncation=True, max_length=256,
                    return_tensors="np")
  emb = np.asarray(model.embed(jnp.asarray(batch["input_ids"]),
                               jnp.asarray(batch["attention_mask"])))
  return float(np.max(emb[1:] @ emb[0]))


def test_peer_scores_equal_direct_maxp_of_each_document(minilm):
  model, tokenizer = minilm
  run = peer_scores(DOCUMENTS, TOPICS, CANDIDATES, model=model,
                    tokenizer=tokenizer, words=20, rows=4, progress=False)
  assert {q: set(d) for q, d in run.items()} == {
      q: set(d) for q, d in CANDIDATES.items()}
  for qid, docids in CANDIDATES.items():
    for docid in docids:
      expected = _direct_maxp(model, tokenizer, TOPICS[qid],
                              *DOCUMENTS[docid], 20)
      assert run[qid][docid] == pytest.approx(expected, abs=2e-6)
  assert run["q1"]["d1"] > run["q1"]["d2"]
  assert run["q2"]["d2"] > run["q2"]["d1"]
  assert all(-1.0 <= s <= 1.0 for r in run.values() for s in r.values())


def test_embedding_compiles_once_per_width_not_per_chunk(minilm):
  model, tokenizer = minilm
  embed = TextEmbedder(model, tokenizer, rows=2)
  texts = [f"sentence number {i} about plants" for i in range(7)]
  texts += ["a longer text " * 20]  # another width (a multiple of 32)
  out = embed(texts, progress=False)
  assert out.shape == (8, 384)
  assert embed._embed._cache_size() == 2  # widths 32 and 64, four chunks
  batch = tokenizer(texts, padding=True, return_tensors="np")
  direct = np.asarray(model.embed(jnp.asarray(batch["input_ids"]),
                                  jnp.asarray(batch["attention_mask"])))
  np.testing.assert_allclose(out, direct, atol=2e-6)


def test_missing_texts_are_input_errors(minilm):
  model, tokenizer = minilm
  with pytest.raises(InputError, match="no text"):
    peer_scores(DOCUMENTS, TOPICS, {"q1": ["nope"]}, model=model,
                tokenizer=tokenizer, progress=False)
  with pytest.raises(InputError, match="queries have no text"):
    peer_scores(DOCUMENTS, TOPICS, {"q9": ["d1"]}, model=model,
                tokenizer=tokenizer, progress=False)
