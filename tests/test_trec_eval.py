"""The host evaluator against pytrec_eval (trec_eval 9) and hand values."""

import math

import numpy as np
import pytest

from best_jax.data import trec
from best_jax.errors import InputError
from best_jax.evaluate import trec_eval

pytrec_eval = pytest.importorskip("pytrec_eval")

# Every family pytrec_eval also has, at several cut-offs.
PYTREC_METRICS = ["map", "map_cut_10", "map_cut_100", "ndcg", "ndcg_cut_5",
                  "ndcg_cut_10", "ndcg_cut_20", "recip_rank", "P_5", "P_10",
                  "P_20", "recall_10", "recall_100", "recall_1000",
                  "success_1", "success_10", "Rprec"]

REAL_FILES = [
    ("robust04", "rob04_yang19_bm25rm3.top1000.run.gz",
     "qrels.robust2004.txt.gz"),
    ("trec-dl-2019-doc", "msmarco-doctest2019-top100", "qrels.dl19-doc.txt"),
]


def _assert_same_as_pytrec(run, qrels, metrics=PYTREC_METRICS,
                           relevance_level=1):
  means, per_query = trec_eval.evaluate(run, qrels, metrics,
                                        relevance_level=relevance_level)
  reference = pytrec_eval.RelevanceEvaluator(
      qrels, set(metrics), relevance_level=relevance_level).evaluate(run)
  assert set(per_query) == set(reference)
  for name in metrics:
    diff = max(abs(per_query[q][name] - reference[q][name]) for q in reference)
    assert diff <= 1e-6, (name, diff)
    mean = np.mean([reference[q][name] for q in reference])
    assert means[name] == pytest.approx(mean, abs=1e-6), name
  return means


@pytest.mark.parametrize("folder,run_file,qrels_file", REAL_FILES)
@pytest.mark.parametrize("relevance_level", [1, 2])
def test_equals_pytrec_eval_on_real_runs(shared, folder, run_file, qrels_file,
                                         relevance_level):
  run = trec.read_run(shared(folder, run_file))
  qrels = trec.read_qrels(shared(folder, qrels_file))
  _assert_same_as_pytrec(run, qrels, relevance_level=relevance_level)


def test_robust04_reference_figures(shared):
  run = trec.read_run(shared("robust04", "rob04_yang19_bm25rm3.top1000.run.gz"))
  qrels = trec.read_qrels(shared("robust04", "qrels.robust2004.txt.gz"))
  means, per_query = trec_eval.evaluate(run, qrels, ["map", "P_20",
                                                     "ndcg_cut_20"])
  assert len(per_query) == 249  # topic 672 has no judgments
  assert round(means["map"], 4) == 0.3033
  assert round(means["P_20"], 4) == 0.3974
  assert round(means["ndcg_cut_20"], 4) == 0.4514


def test_recip_rank_cut_equals_recip_rank_of_cut_run(shared):
  run = trec.read_run(shared("trec-dl-2019-doc", "msmarco-doctest2019-top100"))
  qrels = trec.read_qrels(shared("trec-dl-2019-doc", "qrels.dl19-doc.txt"))
  _, per_query = trec_eval.evaluate(run, qrels, ["recip_rank_cut_3"])
  cut = {q: dict(trec.ranked(s)[:3]) for q, s in run.items()}
  reference = pytrec_eval.RelevanceEvaluator(qrels,
                                             {"recip_rank"}).evaluate(cut)
  for qid, values in reference.items():
    assert per_query[qid]["recip_rank_cut_3"] == values["recip_rank"]
  assert any(v["recip_rank"] == 0 for v in reference.values())


@pytest.mark.parametrize("seed", range(6))
def test_equals_pytrec_eval_on_adversarial_random_data(seed):
  """Heavy score ties, negative grades, queries without relevant documents,
  queries only in the run or only in the qrels, short lists."""
  rng = np.random.default_rng(seed)
  docids = [f"d{i}" for i in range(40)] + ["D1", "a", "z9"]
  run, qrels = {}, {}
  for q in range(12):
    qid = str(300 + q)
    if q != 11:  # query 311 only in the qrels
      ranked_docs = rng.choice(docids, size=rng.integers(1, 30), replace=False)
      run[qid] = {str(d): float(rng.integers(0, 4)) / 2 for d in ranked_docs}
    if q != 10:  # query 310 only in the run
      judged = rng.choice(docids, size=rng.integers(1, 25), replace=False)
      top = 0 if q == 0 else 3  # query 300: nothing relevant
      qrels[qid] = {str(d): int(rng.integers(-1, top + 1)) for d in judged}
  for level in (1, 2):
    _assert_same_as_pytrec(run, qrels, relevance_level=level)


def test_hand_computed_tie_order_and_conventions():
  # Ties at 1.0 rank by docid descending: c, b, a; then d.
  run = {"q1": {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.5},
         "q2": {"a": 1.0}, "q3": {"x": 2.0}}
  qrels = {"q1": {"a": 1, "b": 0, "c": 2, "z": 1}, "q2": {"a": 0},
           "q4": {"x": 1}}
  means, per_query = trec_eval.evaluate(
      run, qrels, ["map", "recip_rank", "P_2", "ndcg", "Rprec"])
  assert list(per_query) == ["q1", "q2"]  # q3 unjudged, q4 not run
  q1 = per_query["q1"]
  assert q1["map"] == pytest.approx((1 / 1 + 2 / 3) / 3)
  assert q1["recip_rank"] == 1.0
  assert q1["P_2"] == 0.5
  ideal = 2 + 1 / math.log2(3) + 1 / math.log2(4)
  assert q1["ndcg"] == pytest.approx((2 + 1 / math.log2(4)) / ideal)
  assert q1["Rprec"] == pytest.approx(2 / 3)
  assert per_query["q2"] == {"map": 0.0, "recip_rank": 0.0, "P_2": 0.0,
                             "ndcg": 0.0, "Rprec": 0.0}
  assert means["map"] == pytest.approx(q1["map"] / 2)


def test_parse_measure():
  assert trec_eval.parse_measure("ndcg_cut_10") == trec_eval.Measure(
      "ndcg_cut_10", "ndcg_cut", 10)
  assert trec_eval.parse_measure("map_cut_5").family == "map_cut"
  assert trec_eval.parse_measure("P_20").k == 20
  assert trec_eval.parse_measure("Rprec").k is None
  for bad in ["ndcg_cut", "P", "P_0", "map_10", "mrr", "ndcg_cut_x", ""]:
    with pytest.raises(InputError, match="supported: map, ndcg"):
      trec_eval.parse_measure(bad)
  assert [m.name for m in trec_eval.parse_measures(["map", "P_5", "map"])] == [
      "map", "P_5"]


def test_no_common_query_is_an_input_error():
  with pytest.raises(InputError, match="no query in common"):
    trec_eval.evaluate({"1": {"a": 1.0}}, {"2": {"a": 1}}, ["map"])
