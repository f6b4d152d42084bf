"""The experiment report: the paper's Table 1 and Table 2, and plots.

Table 1: NDCG@10, MRR@10 and MAP of every run on the test queries, with
paired t-tests against FirstP and BM25 (markers and p-values) and, beside
each MRR@10 t-test p, a paired randomization test over whole clusters of
queries (squad_longdoc's articles; `significance.cluster_test`). Table 2:
segment-selection P@1 of random, first-segment, BM25-best, MaxP and BeST per
iteration, with each model's dev MRR@10. Plots: where the selected segments
sit (per BeST iteration) and learning curves (loss, dev MRR).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np

from best_jax.data.files import atomic_write
from best_jax.evaluate.significance import cluster_test, paired_p_values

matplotlib.use("Agg")  # Files only, never a window.
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

TABLE1 = (("ndcg_cut_10", "NDCG@10"), ("recip_rank_cut_10", "MRR@10"),
          ("map", "MAP"))
ALPHA = 0.05
MARKS = {"BM25": "†", "FirstP": "‡", "bm25": "†", "firstp": "‡"}


def paired_t_test(a: Sequence[float], b: Sequence[float]) -> float:
  """Two-sided paired t-test p-value (from `paired_p_values`)."""
  return paired_p_values(np.asarray(a), np.asarray(b))[0]


CLUSTER_METRIC = "recip_rank_cut_10"


def significance(per_query: Mapping[str, Mapping[str, Mapping[str, float]]],
                 baselines: Sequence[str],
                 clusters: Mapping[str, Any] | None = None
                 ) -> dict[str, dict[str, dict]]:
  """`{run: {baseline: {metric: {t_test_p, delta, num_queries}}}}` over the
  queries both runs were evaluated on; MRR@10 also gets `cluster_p`,
  `clusters` and `cluster_unit` (`clusters`: `{"unit", "of": {qid:
  cluster}}`; None: each query its own cluster)."""
  of, unit = ((clusters["of"], clusters["unit"]) if clusters
              else (None, "query"))
  out = {}
  for name, values in per_query.items():
    for base in baselines:
      if base == name or base not in per_query:
        continue
      qids = [q for q in values if q in per_query[base]]
      for metric, _ in TABLE1:
        a = [values[q][metric] for q in qids]
        b = [per_query[base][q][metric] for q in qids]
        record = {"t_test_p": paired_t_test(a, b),
                  "delta": float(np.mean(a) - np.mean(b)) if qids else 0.0,
                  "num_queries": len(qids)}
        if metric == CLUSTER_METRIC and qids:
          test = cluster_test(dict(zip(qids, a)), dict(zip(qids, b)), of,
                              unit)
          record.update(cluster_p=test.p, clusters=test.num_clusters,
                        cluster_unit=test.unit)
        out.setdefault(name, {}).setdefault(base, {})[metric] = record
  return out


def _p_pair(test: Mapping[str, Any] | None) -> str:
  """`t-test p / cluster p` of one MRR@10 comparison."""
  test = test or {}
  if "cluster_p" not in test:
    return _p(test.get("t_test_p"))
  return f"{_p(test.get('t_test_p'))} / {_p(test['cluster_p'])}"


def cluster_note(sig: Mapping[str, Any]) -> str | None:
  """One line on the cluster test of a `significance` result."""
  for by_base in sig.values():
    for tests in by_base.values():
      test = tests.get(CLUSTER_METRIC, {})
      if "cluster_p" in test:
        what = {"query": "queries"}.get(test["cluster_unit"],
                                        f"{test['cluster_unit']}s")
        extra = (" (no cluster map for this data: each query is its own "
                 "cluster)" if test["cluster_unit"] == "query" else "")
        return (f"p vs X: paired t-test / paired randomization test "
                f"flipping whole {what}, {test['clusters']} clusters{extra}.")
  return None


def _p(value: float) -> str:
  return "—" if value is None or math.isnan(value) else f"{value:.3f}"


def baselines(metrics: Mapping[str, Any]) -> list[str]:
  """The runs every other run is tested against: `metrics["baselines"]`, or
  FirstP, BM25 and the BeST iteration chosen on dev."""
  if "baselines" in metrics:
    return list(metrics["baselines"])
  best = metrics.get("selected_best")
  return ["FirstP", "BM25"] + ([best] if best else [])


def table1(metrics: Mapping[str, Any]) -> str:
  """Markdown Table 1 with significance markers, and the MRR@10 p-value of
  a paired t-test against each baseline (e.g. QDS vs the BeST iteration
  chosen on dev, or a model vs BM25 + the zero-shot peer)."""
  means, sig = metrics["means"], metrics["significance"]
  bases = [b for b in baselines(metrics) if b in means]
  # Pooled cross-validation gives each row's query count (some systems,
  # e.g. a BeST iteration only some folds reached, cover fewer queries).
  counts = metrics.get("queries")
  header = ["run", "NDCG@10", "MRR@10", "MAP"] + [
      f"p vs {b} (MRR@10)" for b in bases] + (["queries"] if counts else [])
  lines = [f"Table 1 — test queries: {metrics['test_queries']}, reranking the "
           f"first-stage top {metrics['rerank_depth']}",
           "| " + " | ".join(header) + " |",
           "|" + " --- |" * len(header)]
  for name, values in means.items():
    cells = []
    for metric, _ in TABLE1:
      mark = ""
      for base, symbol in MARKS.items():
        test = sig.get(name, {}).get(base, {}).get(metric)
        if test and test["t_test_p"] < ALPHA:
          mark += symbol
      cells.append(f"{values[metric]:.4f}{mark}")
    for base in bases:
      cells.append(_p_pair(sig.get(name, {}).get(base, {}).get(
          CLUSTER_METRIC)))
    if counts:
      cells.append(str(counts.get(name, "")))
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  marked = {"†": "BM25", "‡": "FirstP"}
  marked = {k: v for k, v in marked.items() if v in means}
  if marked:
    lines.append(f"{' / '.join(marked)}: paired t-test p < {ALPHA} against "
                 f"{' / '.join(marked.values())} (per metric).")
  note = cluster_note(sig)
  if note and bases:
    lines.append(note)
  return "\n".join(lines)


def table2(metrics: Mapping[str, Any]) -> str:
  """Markdown Table 2: segment P@1 (test) per selector and criterion, with
  each model's dev MRR@10."""
  p1, dev = metrics.get("segment_p_at_1", {}), metrics.get("dev_mrr", {})
  if not p1:
    return "Table 2 — no gold passages in this data: segment P@1 not measured"
  criteria = list(next(iter(p1.values())))
  lines = ["Table 2 — segment selection on the test (query, relevant "
           "document) pairs: P@1 of the top segment (answer: it holds an "
           "answer span; majority: it is mostly the gold passage)",
           "| selector | " + " | ".join(f"P@1 ({c})" for c in criteria)
           + " | dev MRR@10 |",
           "|" + " --- |" * (len(criteria) + 2)]
  for name, values in p1.items():
    label = "BeST-0 (θ0, iteration 1)" if name == "BeST-0" else name
    cells = [_p(values.get(c)) for c in criteria]
    lines.append(f"| {label} | " + " | ".join(cells)
                 + f" | {_p(dev.get(name))} |")
  return "\n".join(lines)


def _save(fig, path: str) -> None:
  """Writes `fig` as a PNG (atomically) and closes it."""
  with atomic_write(path, "wb") as f:
    fig.savefig(f, format="png", dpi=100)
  plt.close(fig)


_MIN_PAD = 0.005  # Of MRR@10: the least room above and below a plot's curves.
# One marker per document-score aggregation (`rerank.aggregate`).
_MARKERS = {"max": "o", "first": "s", "sum": "^", "mean": "v"}


def _draw_references(ax, references: Mapping[str, float] | None) -> None:
  """Dashed horizontal lines, each labelled at the left edge."""
  for name, value in (references or {}).items():
    ax.axhline(value, linestyle="--", color="gray", linewidth=1)
    ax.annotate(name, (0, value), fontsize=7, color="gray",
                xycoords=("axes fraction", "data"), va="bottom")


def plot_positions(positions: Mapping[str, Sequence[int]], path: str) -> None:
  """Histogram of the selected segment's index, one panel per iteration."""
  items = [(k, v) for k, v in positions.items() if len(v)]
  if not items:
    return
  fig, axes = plt.subplots(1, len(items), figsize=(3.2 * len(items), 2.8),
                           squeeze=False)
  for ax, (name, values) in zip(axes[0], items):
    top = max(values) + 1
    counts = [values.count(i) / len(values) for i in range(top)]
    ax.bar(range(top), counts)
    ax.set_title(name, fontsize=9)
    ax.set_xlabel("selected segment index")
  axes[0][0].set_ylabel("fraction of documents")
  fig.tight_layout()
  _save(fig, path)


def plot_learning_curves(histories: Mapping[str, Sequence[Mapping]],
                         path: str, *, groups_per_step: int = 1,
                         references: Mapping[str, float] | None = None
                         ) -> None:
  """Training loss and dev MRR@10 against the training groups seen (step ·
  `groups_per_step`), one line per model; `references` (e.g. the zero-shot
  model's dev MRR@10) as dashed horizontal lines. The dev side breaks its
  y axis as `plot_curves` does."""
  unit = "training groups" if groups_per_step > 1 else "step"
  curves = {}
  fig = plt.figure(layout="constrained")
  grid = fig.add_gridspec(1, 2)
  loss_ax = fig.add_subplot(grid[0])
  for index, (name, history) in enumerate(histories.items()):
    color = f"C{index % 10}"  # One colour per model in both panels.
    losses = [(h["step"] * groups_per_step, h["loss"]) for h in history
              if "loss" in h]
    if losses:
      loss_ax.plot(*zip(*losses), label=name, color=color)
    for key in sorted({k for h in history for k in h
                       if k.startswith("dev_mrr")}):
      aggregation = key.removeprefix("dev_mrr_")
      steps, devs = zip(*[(h["step"], h[key]) for h in history if key in h])
      curves[f"{name} ({aggregation})"] = {
          "groups": np.multiply(steps, groups_per_step), "mean": devs,
          "style": {"color": color,
                    "marker": _MARKERS.get(aggregation, "o")}}
  loss_ax.set_xlabel(unit)
  loss_ax.set_ylabel("training loss")
  if loss_ax.lines:
    loss_ax.legend(fontsize=7)
  axes = _draw_dev_curves(fig, grid[1], curves, references, xlabel=unit)
  fig.set_size_inches(9, 3.2 if len(axes) == 1 else 4.2)
  _save(fig, path)


def y_bands(intervals: Sequence[tuple[float, float]]
            ) -> list[tuple[float, float]]:
  """The y ranges a plot of these (low, high) intervals draws, lowest
  first, padded and never overlapping: none for no (finite) interval, one,
  or two (a broken axis) when the widest gap between them takes more than
  half the whole range and four times the wider side's own range (at least
  `_MIN_PAD`), so that curves close together (BeST above GoldP above MaxP)
  stay apart on the page beside a far one (FirstP)."""
  clusters = []
  for low, high in sorted(i for i in intervals if np.all(np.isfinite(i))):
    if clusters and low <= clusters[-1][1]:
      clusters[-1][1] = max(clusters[-1][1], high)
    else:
      clusters.append([low, high])
  if not clusters:
    return []
  def extent(group):
    return group[0][0], max(c[1] for c in group)
  groups = [clusters]
  gaps = [(b[0] - a[1], i) for i, (a, b) in
          enumerate(zip(clusters, clusters[1:]), 1)]
  if gaps:
    gap, split = max(gaps)
    low, high = extent(clusters)
    widest = max(np.ptp(extent(g)) for g in (clusters[:split],
                                              clusters[split:]))
    if gap > (high - low) / 2 and gap > 4 * max(widest, _MIN_PAD):
      groups = [clusters[:split], clusters[split:]]
  bands = []
  for group in groups:
    low, high = extent(group)
    pad = max(0.1 * (high - low), _MIN_PAD)
    bands.append((low - pad, high + pad))
  return bands


def _draw_dev_curves(fig, slot, curves: Mapping[str, Mapping[str, Any]],
                     references: Mapping[str, float] | None, *,
                     xlabel: str, title: str = "") -> list:
  """Its axes, top first: dev MRR@10 curves (`{"groups", "mean"}`,
  optionally `"std"`, a ± band, and `"style"`, `plot` keywords)
  in the figure's `slot`, on one axis or, when `y_bands` splits them, on two
  stacked panels with break marks between; `references` as dashed lines in
  the panel holding them. NaN points are gaps."""
  references = dict(references or {})
  intervals = []
  for curve in curves.values():
    mean = np.asarray(curve["mean"], float)
    std = np.asarray(curve.get("std", np.zeros_like(mean)), float)
    if np.isfinite(mean).any():
      intervals.append((np.nanmin(mean - std), np.nanmax(mean + std)))
  bands = y_bands(intervals + [(v, v) for v in references.values()]) or [
      (0.0, 1.0)]
  panels = slot.subgridspec(len(bands), 1, hspace=0.08,
                            height_ratios=[2, 1][:len(bands)])
  axes = []
  for row, (low, high) in enumerate(reversed(bands)):  # The highest on top.
    ax = fig.add_subplot(panels[row], sharex=axes[0] if axes else None)
    for label, curve in curves.items():
      x, mean = np.asarray(curve["groups"]), np.asarray(curve["mean"], float)
      [line] = ax.plot(x, mean, label=label,
                       **{"marker": "o", **curve.get("style", {})})
      if "std" in curve:
        std = np.asarray(curve["std"], float)
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(),
                        alpha=0.2, linewidth=0)
    _draw_references(ax, {n: v for n, v in references.items()
                          if low <= v <= high})
    ax.set_ylim(low, high)
    ax.set_ylabel("dev MRR@10")
    axes.append(ax)
  if len(axes) > 1:  # The break: no spine between the panels, cut marks.
    top, bottom = axes
    top.spines["bottom"].set_visible(False)
    bottom.spines["top"].set_visible(False)
    top.tick_params(bottom=False, labelbottom=False)
    cut = dict(marker=[(-1, -0.5), (1, 0.5)], markersize=10, linestyle="none",
               color="k", mec="k", mew=1, clip_on=False)
    top.plot([0, 1], [0, 0], transform=top.transAxes, **cut)
    bottom.plot([0, 1], [1, 1], transform=bottom.transAxes, **cut)
  axes[-1].set_xlabel(xlabel)
  axes[0].set_title(title, fontsize=9)
  if curves:
    axes[0].legend(fontsize=7)
  return axes


def plot_curves(curves: Mapping[str, Mapping[str, Sequence[float]]],
                path: str, *, title: str = "",
                references: Mapping[str, float] | None = None) -> None:
  """Dev MRR@10 against training groups: one line per curve
  (`{"groups", "mean", "std"}`, e.g. `seeds.dev_curves`) with a ± std band;
  `references` as dashed horizontal lines. Curves far apart get a panel
  each, above and below a broken y axis (`y_bands`); NaN points are
  gaps."""
  fig = plt.figure(layout="constrained")
  axes = _draw_dev_curves(fig, fig.add_gridspec(1, 1)[0], curves,
                          references, xlabel="training groups", title=title)
  fig.set_size_inches(6.4, 3.8 if len(axes) == 1 else 4.8)
  _save(fig, path)


def write_report(metrics: Mapping[str, Any], workdir: str) -> str:
  """Writes results.md and the plots; returns the tables as text."""
  text = table1(metrics) + "\n\n" + table2(metrics) + "\n"
  workdir = os.fspath(workdir)
  with atomic_write(os.path.join(workdir, "results.md")) as f:
    f.write(text)
  plot_positions(metrics.get("selected_positions", {}),
                 os.path.join(workdir, "plots", "selected_positions.png"))
  plot_learning_curves(
      metrics.get("histories", {}),
      os.path.join(workdir, "plots", "learning_curves.png"),
      groups_per_step=metrics.get("config", {}).get("train", {}).get(
          "batch_size", 1),
      references={name: value for name, value in
                  metrics.get("dev_mrr", {}).items()
                  if name.startswith("Zero-shot")})  # models never trained
  return text
