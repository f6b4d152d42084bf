"""`best_jax seeds`: mean ± std over seeds and tests on per-query means."""

import json

import numpy as np
import pytest
from scipy import stats

from best_jax.cli import main
from best_jax.evaluate import report, seeds


def _workdir(tmp_path, seed, runs, queries=("q1", "q2", "q3", "q4")):
  """A work directory whose metrics.json has `runs`: {name: [MRR per
  query]} (NDCG = MRR / 2)."""
  workdir = tmp_path / f"s{seed}"
  workdir.mkdir()
  per_query = {name: {q: {"recip_rank_cut_10": v, "ndcg_cut_10": v / 2}
                      for q, v in zip(queries, values)}
               for name, values in runs.items()}
  means = {name: {"recip_rank_cut_10": float(np.mean(values)),
                  "ndcg_cut_10": float(np.mean(values)) / 2}
           for name, values in runs.items()}
  p_at_1 = {name: {"answer": 0.5 + seed / 10} for name in runs
            if name != "BM25"}
  (workdir / "metrics.json").write_text(json.dumps(
      {"means": means, "per_query": per_query, "segment_p_at_1": p_at_1}))
  return str(workdir)


def test_seeds_table_means_stds_and_per_query_tests(tmp_path, capsys):
  bm25 = [1.0, 0.5, 0.5, 0.25]
  model = [[1.0, 1.0, 0.5, 0.5], [1.0, 0.5, 1.0, 0.5], [1.0, 1.0, 1.0, 0.2]]
  workdirs = [_workdir(tmp_path, s, {"BM25": bm25, "BeST-1": model[s],
                                     **({"BeST-2": bm25} if s else {})})
              for s in range(3)]
  assert main(["seeds", *workdirs, "--json"]) == 0
  summary = json.loads(capsys.readouterr().out)
  best = summary["runs"]["BeST-1"]
  means = [np.mean(m) for m in model]
  assert best["MRR@10"]["mean"] == pytest.approx(np.mean(means))
  assert best["MRR@10"]["std"] == pytest.approx(np.std(means, ddof=1))
  assert best["NDCG@10"]["mean"] == pytest.approx(np.mean(means) / 2)
  assert best["P@1"]["mean"] == pytest.approx(0.6)
  want = stats.ttest_rel(np.mean(model, axis=0), bm25).pvalue
  assert best["p"]["BM25"] == pytest.approx(want)
  assert summary["missing"] == {"BeST-2": 1}
  assert "BeST-2" not in summary["runs"]

  out = tmp_path / "seeds.md"
  assert main(["seeds", *workdirs, "--out", str(out)]) == 0
  table = out.read_text()
  assert f"| BeST-1 | {np.mean(means):.4f} ± {np.std(means, ddof=1):.4f}" in (
      table)
  assert "BeST-2: missing (or on fewer queries) in 1 of 3" in table


def test_seeds_refuses_different_test_queries(tmp_path, capsys):
  a = _workdir(tmp_path, 0, {"BM25": [1.0, 0.5, 0.5, 0.25]})
  b = _workdir(tmp_path, 1, {"BM25": [1.0, 0.5, 0.5, 0.25]},
               queries=("q1", "q2", "q3", "q5"))
  assert main(["seeds", a, b]) == 2
  assert "different test queries" in capsys.readouterr().err
  assert main(["seeds", a, str(tmp_path / "none")]) == 2
  assert "no metrics.json" in capsys.readouterr().err
  assert main(["seeds", a, a, "--against", "BeST-9"]) == 2
  assert "--against 'BeST-9': no such run" in capsys.readouterr().err
  (tmp_path / "bad").mkdir()
  (tmp_path / "bad" / "metrics.json").write_text("{}")
  assert main(["seeds", a, str(tmp_path / "bad")]) == 2
  assert "not the metrics.json" in capsys.readouterr().err


def test_seeds_plot_dev_curves_over_seeds(tmp_path):
  """Dev MRR@10 per model and aggregation at the steps every seed
  evaluated, against training groups; mean and std over the seeds."""
  workdirs = []
  for seed, (a, b) in enumerate([(0.5, 0.7), (0.6, 0.9), (0.7, 0.8)]):
    workdir = _workdir(tmp_path, seed, {"BM25": [1.0, 0.5, 0.5, 0.25]})
    path = f"{workdir}/metrics.json"
    metrics = json.loads(open(path).read())
    metrics.update(config={"train": {"batch_size": 16}},
                   dev_mrr={"Zero-shot bi-encoder": 0.6 + seed / 100},
                   histories={"FirstP": [
                       {"step": 10, "loss": 1.0},
                       {"step": 20, "dev_mrr_first": a, "dev_mrr_max": b},
                       {"step": 40, "dev_mrr_max": b + 0.05}]
                       + ([{"step": 60, "dev_mrr_max": 1.0}] if seed else [])})
    open(path, "w").write(json.dumps(metrics))
    workdirs.append(workdir)
  curves = seeds.dev_curves([seeds._metrics(w) for w in workdirs])
  assert set(curves) == {"FirstP", "MaxP"}  # FirstP's two aggregations
  assert curves["MaxP"]["groups"] == [320, 640]  # step 60: one seed short
  np.testing.assert_allclose(curves["MaxP"]["mean"], [0.8, 0.85])
  np.testing.assert_allclose(curves["FirstP"]["std"], [0.1])
  plot = tmp_path / "curves.png"
  assert main(["seeds", *workdirs, "--plot", str(plot)]) == 0
  assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_far_curve_gets_its_own_panel(tmp_path, monkeypatch):
  """The bi-encoders' FirstP (dev MRR@10 ~0.64) beside MaxP, GoldP and BeST
  (0.907-0.922): two y ranges that do not overlap, each holding its curves,
  so that the close ones do not draw as one flat line; curves close
  together, however spaced, stay on one axis."""
  close = [(0.907, 0.910), (0.914, 0.917), (0.920, 0.922), (0.911, 0.911)]
  [(low, high)] = report.y_bands(close)
  assert low < 0.907 and high > 0.922 and high - low < 0.03
  lower, upper = report.y_bands(close + [(0.640, 0.641)])
  assert lower[0] < 0.640 < 0.641 < lower[1] < upper[0] < 0.907
  assert upper[1] > 0.922 and upper[1] - upper[0] < 0.03
  # Close curves with a gap wider than half their range: one axis.
  assert len(report.y_bands([(0.907, 0.910), (0.911, 0.911),
                             (0.920, 0.922)])) == 1
  assert len(report.y_bands([(0.900, 0.900), (0.910, 0.910)])) == 1
  # The cross-encoders' curves (0.52-0.78, overlapping bands): one range.
  assert len(report.y_bands([(0.52, 0.63), (0.53, 0.69), (0.53, 0.78)])) == 1
  assert report.y_bands([(np.nan, np.nan)]) == []
  figures = []
  monkeypatch.setattr(report, "_save", lambda fig, path: figures.append(fig))
  curve = {"groups": [320, 640], "std": [0.0, 0.0]}
  report.plot_curves({"FirstP": {**curve, "mean": [0.641, np.nan]},
                      "BeST-1": {**curve, "mean": [0.920, 0.921]}},
                     str(tmp_path / "c.png"), references={"θ0": 0.911})
  top, bottom = figures[0].axes
  assert top.get_ylim()[0] < 0.911 < 0.921 < top.get_ylim()[1]
  assert bottom.get_ylim()[0] < 0.641 < bottom.get_ylim()[1] < 0.9


def test_learning_curves_share_the_broken_dev_axis(tmp_path, monkeypatch):
  """The per-run plot every `best_jax train` writes: FirstP's first-passage
  dev MRR@10 far below the rest gets its own dev panel there too, and each
  model keeps one colour from the loss panel to the dev panels."""
  figures = []
  monkeypatch.setattr(report, "_save", lambda fig, path: figures.append(fig))
  histories = {
      "FirstP": [{"step": 10, "loss": 1.5},
                 {"step": 20, "loss": 1.3, "dev_mrr_first": 0.641,
                  "dev_mrr_max": 0.910}],
      "BeST-1": [{"step": 10, "loss": 0.1},
                 {"step": 20, "loss": 0.05, "dev_mrr_max": 0.921}]}
  report.plot_learning_curves(histories, str(tmp_path / "l.png"),
                              groups_per_step=16,
                              references={"Zero-shot": 0.911})
  loss_ax, top, bottom = figures[0].axes
  assert top.get_ylim()[0] < 0.910 < 0.921 < top.get_ylim()[1]
  assert bottom.get_ylim()[0] < 0.641 < bottom.get_ylim()[1] < 0.9
  colors = {line.get_label(): line.get_color() for line in loss_ax.lines}
  checked = 0
  for line in top.get_lines() + bottom.get_lines():
    name = line.get_label().split(" (")[0]
    if name in colors:
      assert line.get_color() == colors[name], line.get_label()
      checked += 1
  assert checked == 2 * 3  # Three dev curves drawn in each panel.
  markers = {line.get_label(): line.get_marker() for line in top.get_lines()}
  assert markers["FirstP (max)"] == markers["BeST-1 (max)"] != markers[
      "FirstP (first)"]
  assert [x for line in loss_ax.lines for x in line.get_xdata()][:2] == [
      160, 320]
  # One model: one axis.
  figures.clear()
  report.plot_learning_curves({"BeST-1": histories["BeST-1"]},
                              str(tmp_path / "m.png"))
  assert len(figures[0].axes) == 2


def test_seeds_tests_whole_articles_beside_the_t_test(tmp_path, capsys):
  """With the articles metrics.json records, each p-value comes with a
  randomization test flipping whole articles (here 2: at best p = 0.5);
  without them each query is its own cluster, and the table says so."""
  bm25, model = [0.1, 0.2, 0.1, 0.2], [0.9, 1.0, 0.8, 1.0]
  workdirs = [_workdir(tmp_path, s, {"BM25": bm25, "BeST-1": model})
              for s in range(2)]
  assert main(["seeds", *workdirs, "--json"]) == 0
  alone = json.loads(capsys.readouterr().out)
  assert alone["clusters"] == {"unit": "query", "count": 4}
  assert alone["runs"]["BeST-1"]["p_cluster"]["BM25"] == 2 / 16
  for workdir in workdirs:
    path = f"{workdir}/metrics.json"
    metrics = json.loads(open(path).read())
    metrics["clusters"] = {"unit": "article", "of": {
        "q1": "000", "q2": "000", "q3": "001", "q4": "001"}}
    with open(path, "w") as f:
      json.dump(metrics, f)
  assert main(["seeds", *workdirs, "--json"]) == 0
  summary = json.loads(capsys.readouterr().out)
  row = summary["runs"]["BeST-1"]
  assert summary["clusters"] == {"unit": "article", "count": 2}
  assert row["p_cluster"]["BM25"] == 0.5
  assert row["p"]["BM25"] == alone["runs"]["BeST-1"]["p"]["BM25"]
  assert main(["seeds", *workdirs]) == 0
  table = capsys.readouterr().out
  assert "flipping whole articles (2 clusters)" in table
  assert f"| {seeds._p(row['p']['BM25'])} / 0.500 |" in table  # pylint: disable=protected-access
