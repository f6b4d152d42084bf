"""Tables (markdown + JSON) and the cut-off plot of a truncation experiment.

Means are over the test queries of one split; tables show the mean ± sample
standard deviation of those means over the splits (their number in
parentheses). p-values compare one value per distinct query: its mean over
the splits both methods ran on that hold it in their test part (random
80/20 splits repeat queries; counting each repeat as a pair would overstate
the evidence).
With a cluster map (`config.clusters`, e.g.
squad_longdoc's articles) the comparisons add a randomization test over
whole clusters of those per-query values.
"""

from __future__ import annotations

import json
import os

import matplotlib
import numpy as np

from best_jax.data.files import atomic_write
from best_jax.evaluate import significance

matplotlib.use("Agg")  # Files only, never a window.
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

LABELS = {"oracle": "Oracle", "fixed_5": "Fixed-k (5)",
          "fixed_10": "Fixed-k (10)", "fixed_50": "Fixed-k (50)",
          "greedy": "Greedy-k", "bicut": "BiCut", "choppy": "Choppy",
          "attncut": "AttnCut", "attncut_mle": "AttnCut-MLE",
          "attncut_bi": "AttnCut-Bi", "attncut_rl": "AttnCut-RL"}

# AttnCut paper, Robust04 with BM25 lists (Tables 2-4); None: lost from our copy.
PAPER_TABLE3 = {"oracle": (0.3591, 1.3328), "fixed_5": (0.1550, 0.1876),
                "fixed_10": (0.2103, -0.2672), "fixed_50": (0.2499, -5.3966),
                "greedy": (None, None), "bicut": (None, None),
                "choppy": (None, None), "attncut": (0.2821, None)}
PAPER_TABLE2 = {"attncut_mle": (0.2538, 0.3338), "attncut_bi": (0.2819, None),
                "attncut_rl": (0.2733, 0.3404), "attncut": (0.2821, None)}
PAPER_TABLE4 = {0.0: (0.3591, 0.3777, 49, 0.2821, 0.3527, 49),
                0.3: (0.3696, 0.4641, 44, 0.2417, 0.5726, 43),
                0.5: (0.3600, 0.5818, 36, 0.2171, 0.6837, 36),
                0.7: (0.3478, 0.7470, 19, 0.1572, 0.8323, 18)}
TABLE3_ROWS = ("oracle", "fixed_5", "fixed_10", "fixed_50", "greedy", "bicut",
               "choppy", "attncut")
TABLE2_ROWS = ("attncut_mle", "attncut_bi", "attncut_rl", "attncut")
def _note(config) -> str:
  features = ("score-derived and text (length, unique tokens, tf-idf and "
              f"doc2vec neighbour similarity; corpus {config.corpus})"
              if config.get("corpus") else "score-derived only")
  return (f"Features: {features}; lists: {os.path.basename(config.run)} top "
          f"{config.depth}; model selection on a validation split of the "
          "training queries.")


def _fmt(value, digits=4):
  return "–" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _summary(per_split: dict, method: str) -> dict | None:
  """Mean ± std over splits and the per-(split, query) values of one
  method."""
  means, pooled = [], {}
  for split, result in sorted(per_split.items()):
    if method not in result["methods"]:
      continue  # not (yet) run on this split: the count shows it
    values = result["methods"][method]["values"]
    means.append(float(np.mean(values)))
    for qid, v in zip(result["qids"], values):
      pooled[(split, qid)] = v
  if not means:
    return None
  return {"mean": float(np.mean(means)),
          "std": float(np.std(means, ddof=1)) if len(means) > 1 else 0.0,
          "splits": len(means), "per_split": means, "pooled": pooled}


def by_query(a: dict, b: dict) -> tuple[dict, dict]:
  """`{qid: {"value": mean}}` of two methods: each distinct query's mean
  over the splits both ran on that test it."""
  shared = sorted(set(a["pooled"]) & set(b["pooled"]))
  out = ({}, {})
  for summary, values in zip((a, b), out):
    per_query = {}
    for split, qid in shared:
      per_query.setdefault(qid, []).append(summary["pooled"][(split, qid)])
    values.update({q: {"value": float(np.mean(v))}
                   for q, v in per_query.items()})
  return out


def _test(a: dict, b: dict) -> significance.PairedTest:
  return significance.paired_test(*by_query(a, b), "value")


def _p(a: dict | None, b: dict | None, kind="wilcoxon_p"):
  if a is None or b is None:
    return None
  return getattr(_test(a, b), kind)


def _metric_table(per_metric: dict, rows, paper: dict, title: str,
                  note: str) -> tuple:
  lines = [f"### {title}", "", note, "",
           "| method | F1@k (ours) | F1@k (paper, BM25) | DCG@k (ours) | "
           "DCG@k (paper, BM25) | Wilcoxon p vs BiCut (F1 / DCG) |",
           "| --- | --- | --- | --- | --- | --- |"]
  data = {}
  for row in rows:
    cells, entry = [], {}
    for metric in ("f1", "dcg"):
      s = _summary(per_metric.get(metric, {}), row)
      b = _summary(per_metric.get(metric, {}), "bicut")
      entry[metric] = None if s is None else {
          "mean": s["mean"], "std": s["std"], "splits": s["splits"],
          "wilcoxon_p_vs_bicut": None if row == "bicut" else _p(s, b)}
      cells.append("–" if s is None else
                   f"{s['mean']:.4f} ± {s['std']:.4f} ({s['splits']})")
    if entry["f1"] is None and entry["dcg"] is None:
      continue
    data[row] = entry
    p = [_fmt((entry[m] or {}).get("wilcoxon_p_vs_bicut"), 3)
         for m in ("f1", "dcg")]
    ref = paper.get(row, (None, None))
    lines.append(f"| {_label(row)} | {cells[0]} | {_fmt(ref[0])} | "
                 f"{cells[1]} | {_fmt(ref[1])} | {p[0]} / {p[1]} |")
  return lines, data


def _label(row):
  return LABELS.get(row, row)


def _comparisons(per_metric: dict, clusters: dict[str, str] | None
                 ) -> tuple:
  """AttnCut vs Greedy-k, BiCut and Choppy: t-test and Wilcoxon over the
  distinct queries, and with `clusters` ({qid: cluster}) a randomization
  test over whole clusters."""
  extra = (" cluster p (clusters) |", " --- |") if clusters else ("", "")
  lines = ["### AttnCut against the other learned/greedy cut-offs", "",
           "| metric | comparison | AttnCut | other | paired t p | Wilcoxon p "
           "| queries |" + extra[0],
           "| --- | --- | --- | --- | --- | --- | --- |" + extra[1]]
  data = {}
  pairs = [(metric, other) for metric in ("f1", "dcg")
           for other in ("greedy", "bicut", "choppy")]
  mine = "attncut"
  for metric, other in pairs:
    a = _summary(per_metric.get(metric, {}), mine)
    b = _summary(per_metric.get(metric, {}), other)
    if a is None or b is None:
      continue
    per_a, per_b = by_query(a, b)
    test = significance.paired_test(per_a, per_b, "value")
    data[f"{metric}/{mine}/{other}"] = {
        "attncut": test.mean_a, "other": test.mean_b,
        "t_test_p": test.t_test_p, "wilcoxon_p": test.wilcoxon_p,
        "queries": test.num_queries}
    line = (f"| {metric} | {_label(mine)} vs {_label(other)} | "
            f"{test.mean_a:.4f} | {test.mean_b:.4f} | "
            f"{test.t_test_p:.3g} | {test.wilcoxon_p:.3g} | "
            f"{test.num_queries} |")
    if clusters:
      grouped = significance.cluster_test(
          {q: v["value"] for q, v in per_a.items()},
          {q: v["value"] for q, v in per_b.items()}, clusters, "cluster")
      data[f"{metric}/{mine}/{other}"].update(
          cluster_p=grouped.p, clusters=grouped.num_clusters)
      line += f" {grouped.p:.3g} ({grouped.num_clusters}) |"
    lines.append(line)
  if clusters:
    lines += ["", "Cluster p: a paired randomization test flipping the summed "
              "differences of whole clusters of queries (config.clusters; "
              "squad_longdoc's are articles, whose questions are not "
              "independent)."]
  return lines, data


def _selection(per_metric: dict) -> tuple:
  """The validation-selected epoch of each learned method, over splits."""
  lines = ["### Model selection (validation split of the training queries)",
           "", "| metric | method | selected epoch: mean (min-max) | epochs "
           "run: mean | splits |", "| --- | --- | --- | --- | --- |"]
  data = {}
  for metric in ("f1", "dcg"):
    chosen = {}
    for _, result in sorted(per_metric.get(metric, {}).items()):
      for method, record in result.get("selection", {}).items():
        chosen.setdefault(method, []).append(
            (record["best_epoch"], record["epochs"]))
    for method, pairs in sorted(chosen.items()):
      best, run = np.array(pairs).T
      data[f"{metric}/{method}"] = {"best_epoch": best.tolist(),
                                    "epochs": run.tolist()}
      lines.append(f"| {metric} | {_label(method)} | {best.mean():.1f} "
                   f"({best.min()}-{best.max()}) | {run.mean():.1f} | "
                   f"{len(pairs)} |")
  return lines, data


def _recall_table(per_split: dict, sigmas, note: str) -> tuple:
  lines = ["### Recall constraint (Table 4 analogue, F1 target)", "", note, "",
           "| σ | model | F1@k | R@k | queries meeting σ | paper F1 / R@k / "
           "meeting (of 50) |", "| --- | --- | --- | --- | --- | --- |"]
  data = {}
  for sigma in sigmas:
    for i, name in enumerate(("oracle", "attncut")):
      key = f"{sigma}/{name}"
      rows = [r["recall"][key] for _, r in sorted(per_split.items())
              if "recall" in r]
      if not rows:
        continue
      f1 = [np.mean(r["f1"]) for r in rows]
      rec = [np.mean(r["recall"]) for r in rows]
      meets = [r["meets"] for r in rows]
      total = [len(r["f1"]) for r in rows]
      data[key] = {"f1": float(np.mean(f1)), "f1_std": float(np.std(f1)),
                   "recall": float(np.mean(rec)),
                   "meets_mean": float(np.mean(meets)),
                   "queries_mean": float(np.mean(total)), "splits": len(rows)}
      ref = PAPER_TABLE4.get(sigma)
      paper = "–" if ref is None else (
          f"{ref[3 * i]:.4f} / {ref[3 * i + 1]:.4f} / {ref[3 * i + 2]}")
      lines.append(f"| {sigma} | {_label(name)} | {np.mean(f1):.4f} ± "
                   f"{np.std(f1, ddof=1) if len(f1) > 1 else 0:.4f} "
                   f"({len(f1)}) | "
                   f"{np.mean(rec):.4f} | {np.mean(meets):.1f} of "
                   f"{np.mean(total):.0f} | {paper} |")
  return lines, data


def _plot(per_split: dict, path: str) -> bool:
  oracle, attncut = [], []
  for _, r in sorted(per_split.items()):
    if "attncut" in r["methods"]:
      oracle += r["methods"]["oracle"]["cutoffs"]
      attncut += r["methods"]["attncut"]["cutoffs"]
  if not attncut:
    return False
  edges = np.arange(0, 301, 10)
  fig, ax = plt.subplots(figsize=(6, 3.5))
  ax.hist([oracle, attncut], bins=edges, label=["Oracle", "AttnCut"],
          weights=[np.full(len(oracle), 1 / len(oracle)),
                   np.full(len(attncut), 1 / len(attncut))])
  ax.set_xlabel("cut-off position k")
  ax.set_ylabel("fraction of test queries")
  ax.set_title("F1 target: cut-off positions")
  ax.legend()
  fig.tight_layout()
  with atomic_write(path, "wb") as f:
    fig.savefig(f, format="png", dpi=120)
  plt.close(fig)
  return True


def write(config, results: dict, workdir: str,
          clusters: dict[str, str] | None = None) -> None:
  """Writes `truncation_report.md`, `truncation_report.json` and the plot;
  `clusters` ({qid: cluster}) adds the cluster-level tests."""
  md, data = ["# Ranked-list truncation", ""], {}
  note = _note(config)
  # The paper's figures are for Robust04; other lists show none.
  paper = config.get("paper_figures", True)
  random = results.get("random", {})
  if random:
    lines, data["table3"] = _metric_table(
        random, TABLE3_ROWS, PAPER_TABLE3 if paper else {},
        f"Table 3 analogue: random 80/20 splits, seeds {list(config.seeds)}",
        note)
    md += lines + [""]
    lines, data["comparisons"] = _comparisons(random, clusters)
    md += lines + [""]
    lines, data["table2"] = _metric_table(
        random, TABLE2_ROWS, PAPER_TABLE2 if paper else {}, "Table 2 analogue: AttnCut variants",
        note)
    md += lines + [""]
    oracle = (data["table3"].get("oracle") or {}).get("f1")
    attncut = (data["table3"].get("attncut") or {}).get("f1")
    if oracle and attncut:
      ratio = attncut["mean"] / oracle["mean"]
      data["attncut_over_oracle_f1"] = ratio
      md += [f"AttnCut F1 / Oracle F1 = {ratio:.4f}" + (
          f" (paper, BM25 lists: 0.2821 / 0.3591 = {0.2821 / 0.3591:.4f})"
          if paper else "") + ".", ""]
    lines, data["selection"] = _selection(random)
    md += lines + [""]
    greedy = {m: [r["greedy_k"] for _, r in sorted(random[m].items())]
              for m in random}
    data["greedy_k"] = greedy
    md += [f"Greedy-k per split: {greedy}" +
           (" (paper, BM25: F1 44, DCG 2)." if paper else "."), ""]
    lines, data["table4"] = _recall_table(random.get("f1", {}), config.sigmas,
                                        note)
    if data["table4"]:  # the recall model ran
      md += lines + [""]
    if _plot(random.get("f1", {}), os.path.join(workdir,
                                                "truncation_cutoffs.png")):
      md += ["![cut-off positions](truncation_cutoffs.png)", ""]
  folds = results.get("folds", {})
  if folds:
    lines, data["cross_validation"] = _metric_table(
        folds, TABLE3_ROWS + TABLE2_ROWS[:-1], PAPER_TABLE3 if paper else {},
        f"5-fold cross-validation ({os.path.basename(config.folds)})", note)
    md += lines + [""]
  data["config"] = config.to_dict()
  with atomic_write(os.path.join(workdir, "truncation_report.md")) as f:
    f.write("\n".join(md) + "\n")
  with atomic_write(os.path.join(workdir, "truncation_report.json")) as f:
    json.dump(data, f, indent=1, default=str)
