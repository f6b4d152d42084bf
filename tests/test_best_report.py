"""Experiment outputs: reranked runs keep the first stage below, the paired
t-test convention, and the tables (segment P@1 itself: test_evidence.py)."""

import numpy as np
import pytest
from scipy import stats

from best_jax.evaluate import report
from best_jax.evaluate import trec_eval
from best_jax.experiment import evaluation


def test_full_run_puts_reranked_documents_above_the_rest():
  first_stage = {"q": {"a": 9.0, "b": 8.0, "c": 7.0, "d": 6.0}}
  reranked = {"q": {"b": -1.0, "a": -2.0}}   # the top 2, reordered
  run = evaluation.full_run(reranked, first_stage)
  order = [d for d, _ in sorted(run["q"].items(), key=lambda x: -x[1])]
  assert order == ["b", "a", "c", "d"]
  # The reranked documents keep the model's scores; the rest sit below.
  assert run["q"]["b"] == -1.0 and run["q"]["a"] == -2.0
  assert run["q"]["c"] < -2.0 and run["q"]["d"] < run["q"]["c"]
  means, _ = trec_eval.evaluate(run, {"q": {"a": 1}}, ["recip_rank"])
  assert means["recip_rank"] == 0.5


def test_paired_t_test_matches_scipy_and_conventions():
  a, b = [0.1, 0.5, 0.9, 0.4], [0.2, 0.1, 0.7, 0.1]
  assert report.paired_t_test(a, b) == pytest.approx(
      stats.ttest_rel(a, b).pvalue)
  assert report.paired_t_test(a, a) == 1.0
  assert np.isnan(report.paired_t_test([0.1], [0.2]))


def test_tables_mark_significance_and_list_selectors():
  per_query = {
      "BM25": {str(i): {"ndcg_cut_10": 0.1, "recip_rank_cut_10": 0.1,
                        "map": 0.1} for i in range(6)},
      "FirstP": {str(i): {"ndcg_cut_10": 0.1 + 0.01 * (i % 2),
                          "recip_rank_cut_10": 0.1, "map": 0.1}
                 for i in range(6)},
      "BeST-1": {str(i): {"ndcg_cut_10": 0.9 + 0.01 * (i % 3),
                          "recip_rank_cut_10": 0.8 + 0.02 * (i % 2),
                          "map": 0.7} for i in range(6)},
  }
  means = {n: {m: float(np.mean([v[m] for v in q.values()]))
               for m in ("ndcg_cut_10", "recip_rank_cut_10", "map")}
           for n, q in per_query.items()}
  metrics = {"test_queries": 6, "rerank_depth": 5, "means": means,
             "significance": report.significance(per_query,
                                                 ("FirstP", "BM25")),
             "segment_p_at_1": {"Random": {"answer": 0.25, "majority": 0.3},
                                "BeST-1": {"answer": 0.5, "majority": 0.6}},
             "dev_mrr": {"BeST-1": 0.61}}
  table1 = report.table1(metrics)
  best_line = next(l for l in table1.splitlines() if l.startswith("| BeST-1"))
  assert "†‡" in best_line          # significant against both baselines
  bm25_line = next(l for l in table1.splitlines() if l.startswith("| BM25"))
  assert "†" not in bm25_line and "‡" not in bm25_line
  table2 = report.table2(metrics)
  assert "| selector | P@1 (answer) | P@1 (majority) | dev MRR@10 |" in table2
  assert "| BeST-1 | 0.500 | 0.600 | 0.610 |" in table2
  assert "| Random | 0.250 | 0.300 | — |" in table2
  # Beside each t-test p, a randomization test over clusters: each query
  # its own without a cluster map (said so), whole articles with one.
  assert "paired t-test / paired randomization test flipping whole queries, "\
      "6 clusters (no cluster map" in table1
  t_p = metrics["significance"]["BeST-1"]["BM25"]["recip_rank_cut_10"]
  assert f"| {report._p(t_p['t_test_p'])} / 0.031 |" in best_line  # 2/64  # pylint: disable=protected-access
  articles = {"unit": "article", "of": {str(i): str(i // 2) for i in range(6)}}
  metrics["significance"] = report.significance(per_query, ("FirstP", "BM25"),
                                                articles)
  table1 = report.table1(metrics)
  assert "flipping whole articles, 3 clusters." in table1
  best_line = next(l for l in table1.splitlines() if l.startswith("| BeST-1"))
  assert best_line.endswith(" / 0.250 |")  # 2 of 8 sign patterns


def test_explain_highlights_the_best_segment(tmp_path):
  import json
  import os
  from best_jax.data import trec
  from best_jax.select import explain
  text = "Alpha beta gamma. Delta epsilon zeta. Eta theta."
  workdir = str(tmp_path)
  os.makedirs(os.path.join(workdir, "segments"))
  os.makedirs(os.path.join(workdir, "explain"))
  with open(os.path.join(workdir, "metrics.json"), "w") as f:
    json.dump({"dev_mrr": {"MaxP": 0.2, "BeST-1": 0.3, "BeST-2": 0.25}}, f)
  with open(os.path.join(workdir, "segments", "BeST-1.json"), "w") as f:
    json.dump([{"qid": "q", "docid": "d", "scores": [0.1, 2.0, 0.5],
                "spans": [[0, 17], [18, 37], [38, 49]]},
               {"qid": "q", "docid": "e", "scores": [0.0], "spans": [[0, 3]]}],
              f)
  trec.write_run({"q": {"d": 2.0, "e": 1.0}},
                 os.path.join(workdir, "runs", "best-1.run"))
  with open(os.path.join(workdir, "explain", "documents.json"), "w") as f:
    json.dump({"documents": {"d": ["Title", text], "e": ["E", "abc"]},
               "topics": {"q": "delta"}, "qrels": {"q": {"d": 1}},
               "gold": {"q\td": [20, 30]}}, f)
  model, records = explain.explanations(workdir)
  assert model == "BeST-1"                      # best dev MRR of BeST
  (r,) = records
  assert (r["docid"], r["segment"], r["span"]) == ("d", 1, [18, 37])
  page = explain.render_html(model, records)
  # The selected segment is marked, the gold span [20, 30) underlined.
  assert ('Gamma. <mark id="ev0">De<u>lta epsilo</u>n zeta.</mark> Eta'
          in page.replace("gamma", "Gamma"))
  # The whole gold span (the shorter) is in the segment: mostly gold.
  assert "[mostly the gold passage]" in explain.render_text(model, records)
