"""`best_jax evaluate` through `best_jax.cli.main`."""

import json

import numpy as np
import pytest

from best_jax import cli
from best_jax.data import trec
from best_jax.evaluate import trec_eval

pytrec_eval = pytest.importorskip("pytrec_eval")


@pytest.fixture
def dl19(shared):
  return (shared("trec-dl-2019-doc", "msmarco-doctest2019-top100"),
          shared("trec-dl-2019-doc", "qrels.dl19-doc.txt"))


def _pytrec_means(run_path, qrels_path, metrics):
  qrels = trec.read_qrels(qrels_path)
  result = pytrec_eval.RelevanceEvaluator(qrels, set(metrics)).evaluate(
      trec.read_run(run_path))
  return {m: np.mean([v[m] for v in result.values()]) for m in metrics}, result


def test_json_is_exactly_name_to_mean(dl19, capsys):
  run, qrels = dl19
  assert cli.main(["evaluate", "--run", run, "--qrels", qrels, "--json"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert list(out) == list(trec_eval.DEFAULT_METRICS)
  expected, _ = _pytrec_means(run, qrels, trec_eval.DEFAULT_METRICS)
  for name, mean in out.items():
    assert mean == pytest.approx(expected[name], abs=1e-6), name


def test_table(dl19, capsys):
  run, qrels = dl19
  assert cli.main(["evaluate", "--run", run, "--qrels", qrels,
                   "--metrics", "ndcg_cut_10,map"]) == 0
  lines = capsys.readouterr().out.splitlines()
  expected, _ = _pytrec_means(run, qrels, ["ndcg_cut_10", "map"])
  assert lines[0].split() == ["metric", "mean"]
  assert lines[1].split() == ["ndcg_cut_10", f"{expected['ndcg_cut_10']:.4f}"]
  assert lines[2].split() == ["map", f"{expected['map']:.4f}"]
  assert lines[3] == "(43 queries)"
  assert len({len(line) for line in lines[:3]}) == 1  # aligned


def test_per_query_lines_and_json(dl19, capsys):
  run, qrels = dl19
  args = ["evaluate", "--run", run, "--qrels", qrels, "--metrics", "P_10"]
  assert cli.main(args + ["--per-query"]) == 0
  lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
  _, reference = _pytrec_means(run, qrels, ["P_10"])
  assert len(lines) == 43 + 1
  for name, qid, value in lines[:-1]:
    assert name.strip() == "P_10"
    assert float(value) == pytest.approx(reference[qid]["P_10"], abs=5e-5)
  assert lines[-1][1] == "all"
  assert cli.main(args + ["--per-query", "--json"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert set(out) == {"means", "per_query"}
  assert set(out["per_query"]) == set(reference)
  for qid, values in out["per_query"].items():
    assert values["P_10"] == pytest.approx(reference[qid]["P_10"], abs=1e-9)


def test_compare_json_and_table(dl19, tmp_path, capsys):
  run, qrels = dl19
  # A worse run: the same lists in reverse order.
  reversed_run = {q: {d: -s for d, s in scores.items()}
                  for q, scores in trec.read_run(run).items()}
  worse = tmp_path / "worse.run"
  trec.write_run(reversed_run, worse)
  args = ["evaluate", "--run", run, "--qrels", qrels, "--metrics",
          "ndcg_cut_10,map"]
  assert cli.main(args + ["--compare", str(worse), "--json"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert set(out) == {"run", "compare", "difference", "t_test_p",
                      "wilcoxon_p", "num_queries_compared", "cluster_p",
                      "clusters"}
  assert out["clusters"] == {"unit": "query", "count": 43}
  assert out["cluster_p"]["ndcg_cut_10"] < 0.01
  assert out["num_queries_compared"] == 43
  assert out["compare"]["ndcg_cut_10"] < out["run"]["ndcg_cut_10"]
  assert out["t_test_p"]["ndcg_cut_10"] < 0.01
  assert out["wilcoxon_p"]["ndcg_cut_10"] < 0.01
  assert out["difference"]["map"] == pytest.approx(
      out["compare"]["map"] - out["run"]["map"])
  assert cli.main(args + ["--compare", run]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].split() == ["metric", "run", "compare", "diff", "t-test",
                              "p", "wilcoxon", "p", "cluster", "p"]
  assert lines[1].split()[3:] == ["+0.0000", "1", "1", "1"]
  assert lines[-1] == ("cluster p: no --clusters, each query its own "
                       "cluster (43)")


def test_compare_flips_whole_clusters(dl19, tmp_path, capsys):
  """With --clusters, the randomization test flips whole clusters: the
  43 queries in 3 clusters give at best p = 2/8; a query without a cluster,
  or a bad line, is one error line naming the file (exit 2)."""
  run, qrels = dl19
  worse = tmp_path / "worse.run"
  trec.write_run({q: {d: -s for d, s in scores.items()}
                  for q, scores in trec.read_run(run).items()}, worse)
  qids = sorted(trec.read_qrels(qrels))
  clusters = tmp_path / "clusters.tsv"
  clusters.write_text("".join(f"{q}\t{i % 3}\n" for i, q in enumerate(qids)))
  args = ["evaluate", "--run", run, "--qrels", qrels, "--metrics",
          "ndcg_cut_10", "--compare", str(worse), "--clusters", str(clusters)]
  assert cli.main(args + ["--json"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["clusters"] == {"unit": "cluster", "count": 3}
  assert out["cluster_p"]["ndcg_cut_10"] == 0.25
  assert cli.main(args) == 0
  assert f"whole clusters of {clusters} (3 clusters)" in capsys.readouterr().out
  clusters.write_text("".join(f"{q}\t0\n" for q in qids[1:]))
  assert cli.main(args) == 2
  assert str(clusters) in capsys.readouterr().err
  clusters.write_text(f"{qids[0]} 0\n")
  assert cli.main(args) == 2
  assert f"{clusters}:1:" in capsys.readouterr().err


def test_bad_run_file_exits_2_naming_file_and_line(dl19, tmp_path, capsys):
  _, qrels = dl19
  bad = tmp_path / "bad.run"
  bad.write_text("1 Q0 d1 1 2.0 tag\n1 Q0 d2 2 1.0 tag\n1 Q0 d3 3 tag\n")
  assert cli.main(["evaluate", "--run", str(bad), "--qrels", qrels]) == 2
  captured = capsys.readouterr()
  assert captured.out == ""
  assert captured.err.count("\n") == 1
  assert f"{bad}:3:" in captured.err
  assert "expected 6 columns" in captured.err


def test_unknown_metric_lists_supported(dl19, capsys):
  run, qrels = dl19
  assert cli.main(["evaluate", "--run", run, "--qrels", qrels,
                   "--metrics", "map,mrr@10"]) == 2
  captured = capsys.readouterr()
  assert captured.out == ""
  assert "unknown metric 'mrr@10'" in captured.err
  assert "ndcg_cut_k" in captured.err and "recip_rank_cut_k" in captured.err


def test_no_common_query_exits_2(dl19, tmp_path, capsys):
  run, _ = dl19
  qrels = tmp_path / "other.qrels"
  qrels.write_text("no-such-query 0 d1 1\n")
  assert cli.main(["evaluate", "--run", run, "--qrels", str(qrels)]) == 2
  assert "no query in common" in capsys.readouterr().err
