"""`best_jax seeds`: one experiment's runs summarised over seeds.

  python -m best_jax seeds W_SEED0 W_SEED1 W_SEED2 [--against "BM25 + peer"]
      [--out seeds.md] [--json] [--plot curves.png]

Reads each work directory's metrics.json (`best_jax train` with
`--config.seed=N`; the same test queries in every one) and writes one table:
per run, MRR@10 and NDCG@10 as mean ± standard deviation over the seeds
(ddof 1), segment P@1 (answer) likewise, and, against BM25 and each
`--against` run, the paired t-test of the per-query MRR@10 averaged over the
seeds beside a paired randomization test flipping whole clusters of queries
(the clusters metrics.json records: squad_longdoc's articles; each query its
own, said so, where it records none). Runs
missing from a work directory are left out (a line says so); work
directories whose test queries differ are an error. `--plot` draws each
model's dev MRR@10 against the training groups it has seen (mean over the
seeds, a band of ± one std), with the zero-shot models' dev MRR@10.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

import numpy as np

from best_jax.data.files import atomic_write, read_text
from best_jax.errors import InputError
from best_jax.evaluate.report import plot_curves
from best_jax.evaluate.significance import cluster_test, paired_p_values

METRICS = (("recip_rank_cut_10", "MRR@10"), ("ndcg_cut_10", "NDCG@10"))
TESTED = "recip_rank_cut_10"


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("workdirs", nargs="+",
                      help="work directories of one config, one per seed")
  parser.add_argument("--against", action="append", default=None,
                      help="runs to test every run against (default: BM25 "
                      "and, when present, BM25 + peer); repeatable")
  parser.add_argument("--out", default=None, help="also write the table here")
  parser.add_argument("--json", action="store_true",
                      help="print one JSON object instead of the table")
  parser.add_argument("--plot", default=None, metavar="PNG",
                      help="also draw the dev learning curves over the seeds")


def _metrics(workdir: str) -> dict:
  path = os.path.join(workdir, "metrics.json")
  if not os.path.isfile(path):
    raise InputError("no metrics.json: run `best_jax train` into this "
                     "directory first", workdir)
  try:
    metrics = json.loads(read_text(path))
  except ValueError as e:
    raise InputError(f"not valid JSON: {e}", path) from None
  if not isinstance(metrics, dict) or "BM25" not in metrics.get(
      "per_query", {}) or "means" not in metrics:
    raise InputError("not the metrics.json of a `best_jax train` run "
                     "(needs means and per-query BM25 values)", path)
  return metrics


def summarise(metrics: Sequence[dict], against: Sequence[str]) -> dict:
  """`{"seeds", "queries", "runs": {run: {...}}, "missing": {run: n}}`:
  runs that some work directory lacks, or has for fewer queries (e.g. a
  BeST iteration only some cross-validation folds reached), are missing."""
  queries = sorted(metrics[0]["per_query"]["BM25"])
  for m in metrics[1:]:
    if sorted(m["per_query"]["BM25"]) != queries:
      raise InputError("the work directories have different test queries; "
                       "summarise runs of one config only")
  names = list(dict.fromkeys(n for m in metrics for n in m["means"]))
  complete = [n for n in names if all(
      n in m["means"] and all(q in m["per_query"].get(n, {}) for q in queries)
      for m in metrics)]
  unknown = [b for b in against if b not in complete]
  if unknown:
    raise InputError(f"--against {unknown[0]!r}: no such run in every work "
                     f"directory (runs: {', '.join(complete)})")
  per_query = {n: np.mean([[m["per_query"][n][q][TESTED] for q in queries]
                           for m in metrics], axis=0) for n in complete}
  clusters = metrics[0].get("clusters")
  of, unit = (clusters["of"], clusters["unit"]) if clusters else (None, "query")
  runs = {}
  for name in complete:
    row = {"seeds": len(metrics)}
    for metric, label in METRICS:
      values = [m["means"][name][metric] for m in metrics]
      row[label] = {"mean": float(np.mean(values)), "std": _std(values),
                    "values": values}
    p_at_1 = [m.get("segment_p_at_1", {}).get(name, {}).get("answer")
              for m in metrics]
    if all(v is not None for v in p_at_1):
      row["P@1"] = {"mean": float(np.mean(p_at_1)), "std": _std(p_at_1),
                    "values": p_at_1}
    row["p"], row["p_cluster"] = {}, {}
    for base in against:
      if base in per_query and base != name:
        row["p"][base] = float(paired_p_values(per_query[name],
                                               per_query[base])[0])
        test = cluster_test(dict(zip(queries, per_query[name])),
                            dict(zip(queries, per_query[base])), of, unit)
        row["p_cluster"][base] = test.p
    runs[name] = row
  return {"seeds": len(metrics), "queries": len(queries), "runs": runs,
          "clusters": {"unit": unit, "count": len(
              {of.get(q, f"query {q}") for q in queries} if of
              else queries)},
          "missing": {n: sum(n not in m["means"] or any(
              q not in m["per_query"].get(n, {}) for q in queries)
                             for m in metrics)
                      for n in names if n not in complete}}


def dev_curves(metrics: Sequence[dict]) -> dict[str, dict[str, list]]:
  """`{"MODEL (aggregation)": {"groups", "mean", "std"}}`: each model's dev
  MRR@10 at the steps every work directory evaluated, against training
  groups (step × `train.batch_size`), mean and std over the seeds."""
  curves = {}
  names = dict.fromkeys(n for m in metrics for n in m.get("histories", {}))
  for name in names:
    histories = [m.get("histories", {}).get(name, []) for m in metrics]
    keys = sorted({k for h in histories for e in h for k in e
                   if k.startswith("dev_mrr_")})
    for key in keys:
      by_seed = [{e["step"]: e[key] for e in h if key in e}
                 for h in histories]
      steps = sorted(set.intersection(*(set(s) for s in by_seed)))
      if not steps:
        continue
      values = np.array([[s[t] for t in steps] for s in by_seed])
      batch = metrics[0].get("config", {}).get("train", {}).get(
          "batch_size", 1)
      std = (values.std(axis=0, ddof=1) if len(values) > 1
             else np.zeros(len(steps)))
      aggregation = key.removeprefix("dev_mrr_")
      if name == "FirstP":  # As `experiment.run` names its two rows: the
        # first segment (FirstP) and the eval aggregation (MaxP).
        label = "FirstP" if aggregation == "first" else "MaxP"
      else:
        label = f"{name} ({aggregation})"
      curves[label] = {
          "groups": [t * batch for t in steps],
          "mean": values.mean(axis=0).tolist(),
          "std": std.tolist()}
  return curves


def _std(values: Sequence[float]) -> float:
  return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _cell(stat: dict | None) -> str:
  return "—" if stat is None else f"{stat['mean']:.4f} ± {stat['std']:.4f}"


def _p(value: float | None) -> str:
  if value is None or value != value:
    return "—"
  return "< 0.001" if value < 0.001 else f"{value:.3f}"


def _clusters(clusters: dict) -> str:
  if clusters["unit"] == "query":
    return (f"queries ({clusters['count']}: no cluster map, each query its "
            "own cluster)")
  return f"{clusters['unit']}s ({clusters['count']} clusters)"


def render(summary: dict, against: Sequence[str]) -> str:
  header = ["run", "MRR@10", "NDCG@10", "segment P@1"] + [
      f"p vs {b} (MRR@10)" for b in against]
  seeds = summary["seeds"]
  lines = [f"{seeds} seed{'s' * (seeds != 1)}, {summary['queries']} test "
           "queries (mean ± std over seeds; p: paired t-test on per-query "
           "MRR@10 averaged over the seeds / paired randomization test "
           f"flipping whole {_clusters(summary['clusters'])})",
           "| " + " | ".join(header) + " |",
           "|" + " --- |" * len(header)]
  for name, row in summary["runs"].items():
    lines.append("| " + " | ".join(
        [name, _cell(row["MRR@10"]), _cell(row["NDCG@10"]),
         _cell(row.get("P@1"))] + [
             f"{_p(row['p'].get(b))} / {_p(row['p_cluster'].get(b))}"
             if b in row["p"] else "—" for b in against])
                 + " |")
  for name, count in summary["missing"].items():
    lines.append(f"\n{name}: missing (or on fewer queries) in {count} of "
                 f"{summary['seeds']} work directories, left out")
  return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
  metrics = [_metrics(w) for w in args.workdirs]
  against = args.against or ["BM25"] + [
      n for n in ("BM25 + peer",) if all(n in m["means"] for m in metrics)]
  summary = summarise(metrics, against)
  text = (json.dumps(summary, indent=1) + "\n" if args.json
          else render(summary, against))
  if args.out:
    with atomic_write(args.out) as f:
      f.write(text)
  if args.plot:
    zero_shot = {n for m in metrics for n in m.get("dev_mrr", {})
                 if n.startswith("Zero-shot")}
    plot_curves(dev_curves(metrics), args.plot,
                title=(f"dev MRR@10 over {len(metrics)} seeds (mean ± std)"
                       if len(metrics) > 1 else "dev MRR@10 (one seed)"),
                references={n: float(np.mean([m["dev_mrr"][n] for m in metrics
                                              if n in m.get("dev_mrr", {})]))
                            for n in sorted(zero_shot)})
  sys.stdout.write(text)
  return 0
