"""BM25: hand-computed scores, deterministic ties, gensim reference, command."""

import json
import math
import os

import numpy as np
import pytest

from best_jax import cli
from best_jax.data import trec
from best_jax.errors import InputError
from best_jax.retrieval.bm25 import B, K1, bm25_run

CORPUS = {
    "fruit": "apples and bananas are fruits",
    "cars": "cars drive on roads",
    "apple": "apple pie with apple slices",
    "roads": "old roads",
}


def _lucene_term_score(tf, df, n_docs, length, avg_length, k1=K1, b=B):
  idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
  return idf * tf / (tf + k1 * (1 - b + b * length / avg_length))


def test_obvious_document_first_with_hand_computed_score():
  run = bm25_run(CORPUS, {"q": "apple"}, show_progress=False)
  assert trec.ranked(run["q"])[0][0] == "apple"
  # Stemmed, stopwords removed: fruit = [appl banana fruit], cars = [car
  # drive road], apple = [appl pie appl slice], roads = [old road].
  avg = (3 + 3 + 4 + 2) / 4
  assert run["q"]["apple"] == pytest.approx(
      _lucene_term_score(2, 2, 4, 4, avg), rel=1e-6)
  assert run["q"]["fruit"] == pytest.approx(
      _lucene_term_score(1, 2, 4, 3, avg), rel=1e-6)
  assert set(run["q"]) == {"apple", "fruit"}  # Non-matching docs are left out.


def test_two_terms_add_up():
  run = bm25_run(CORPUS, {"q": "roads cars"}, show_progress=False)
  avg = 3.0
  expected = (_lucene_term_score(1, 2, 4, 3, avg)
              + _lucene_term_score(1, 1, 4, 3, avg))
  assert run["q"]["cars"] == pytest.approx(expected, rel=1e-6)
  assert trec.ranked(run["q"])[0][0] == "cars"


def test_ties_are_deterministic_and_follow_trec_eval_order():
  corpus = {"a": "same words here", "c": "same words here",
            "b": "same words here", "z": "other"}
  reversed_corpus = dict(reversed(list(corpus.items())))
  for k, expected in ((1, ["c"]), (2, ["c", "b"]), (3, ["c", "b", "a"])):
    for docs in (corpus, reversed_corpus):
      run = bm25_run(docs, {"q": "words"}, k=k, show_progress=False)
      assert [d for d, _ in trec.ranked(run["q"])] == expected


def test_queries_without_matching_terms_get_empty_rankings():
  run = bm25_run(CORPUS, {"stop": "the and of", "unknown": "zebra"},
                 show_progress=False)
  assert run == {"stop": {}, "unknown": {}}


def test_bad_arguments_raise_input_error():
  with pytest.raises(InputError, match="k must be positive"):
    bm25_run(CORPUS, {"q": "apple"}, k=0, show_progress=False)
  with pytest.raises(InputError, match="empty corpus"):
    bm25_run({}, {"q": "apple"}, show_progress=False)


def test_matches_gensim_lucene_bm25_on_cranfield(shared):
  """gensim's LuceneBM25Model is an independent implementation of the same
  formula; on the same tokens the scores must agree to float32 precision."""
  import bm25s
  import pytrec_eval
  import Stemmer
  from gensim.corpora import Dictionary
  from gensim.models import LuceneBM25Model

  from best_jax.data.corpus import load_cranfield
  collection = load_cranfield(
      os.path.dirname(shared("cranfield", "cran.all.1400")))
  docids = list(collection.corpus)
  texts = [f"{d.title}\n{d.text}" for d in collection.corpus.values()]
  queries = {q: t.title for q, t in collection.topics.items()}
  run = bm25_run(dict(zip(docids, texts)), queries, k=1400,
                 show_progress=False)

  stemmer = Stemmer.Stemmer("english")
  tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer,
                          return_ids=False, show_progress=False)
  dictionary = Dictionary(tokens)
  model = LuceneBM25Model(dictionary=dictionary, k1=K1, b=B)
  weights = [dict(model[dictionary.doc2bow(t)]) for t in tokens]
  sample = list(queries)[:25]
  query_tokens = bm25s.tokenize([queries[q] for q in sample], stopwords="en",
                                stemmer=stemmer, return_ids=False,
                                show_progress=False)
  for qid, words in zip(sample, query_tokens):
    ids = [dictionary.token2id[w] for w in words if w in dictionary.token2id]
    expected_d = np.array([sum(w.get(i, 0.0) for i in ids) for w in weights])
    got_d = np.array([run[qid].get(d, 0.0) for d in docids])
    np.testing.assert_allclose(got_d, expected_d, rtol=1e-5, atol=1e-5)

  # Effectiveness at depth 100, measured once with pytrec_eval (trec_eval):
  # MAP 0.2812, NDCG@10 0.3517 over 225 queries.
  top100 = {q: dict(trec.ranked(s)[:100]) for q, s in run.items()}
  results = pytrec_eval.RelevanceEvaluator(
      collection.qrels, {"map", "ndcg_cut_10"}).evaluate(top100)
  assert len(results) == 225
  assert np.mean([r["map"] for r in results.values()]) == pytest.approx(
      0.2812, abs=5e-4)
  assert np.mean([r["ndcg_cut_10"] for r in results.values()]) == (
      pytest.approx(0.3517, abs=5e-4))


def test_command_indexes_title_and_text(tmp_path, capsys):
  corpus = tmp_path / "corpus.jsonl"
  corpus.write_text("".join(json.dumps(r) + "\n" for r in [
      {"id": "d1", "title": "Volcanoes", "text": "lava flows downhill"},
      {"id": "d2", "title": "Rivers", "text": "water flows downhill"},
      {"id": "d3", "title": "", "text": "nothing relevant"},
  ]))
  topics = tmp_path / "topics.tsv"
  topics.write_text("q1\tvolcano lava\nq2\twater\n")
  out = tmp_path / "x.run"
  assert cli.main(["bm25", "--corpus", str(corpus), "--topics", str(topics),
                   "--out", str(out), "--k", "1"]) == 0
  run = trec.read_run(out)
  assert list(run["q1"]) == ["d1"] and list(run["q2"]) == ["d2"]
  assert out.read_text().split("\n")[0].split()[5] == "bm25"
  assert "2 queries over 3 documents" in capsys.readouterr().out


def test_command_reports_bad_input_without_traceback(tmp_path, capsys):
  topics = tmp_path / "topics.tsv"
  topics.write_text("q1\tanything\n")
  missing = tmp_path / "missing.jsonl"
  assert cli.main(["bm25", "--corpus", str(missing), "--topics", str(topics),
                   "--out", str(tmp_path / "x.run")]) == 2
  assert "file not found" in capsys.readouterr().err
  assert not (tmp_path / "x.run").exists()
