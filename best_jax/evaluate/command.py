"""`best_jax evaluate`: trec_eval metrics of a run, optionally against another.

Output forms:
- default: an aligned table of means (4 decimals, as trec_eval prints them);
- `--per-query`: trec_eval `-q` lines `metric<TAB>qid<TAB>value`, then the
  `all` lines with the means;
- `--json`: one JSON object `{metric: mean}`; with `--per-query` it becomes
  `{"means": {...}, "per_query": {qid: {metric: value}}}`;
- `--compare RUN2`: adds RUN2's means and paired p-values (t-test, Wilcoxon)
  over the queries both runs were evaluated on. Under `--json` the object is
  `{"run": {metric: mean}, "compare": {metric: mean},
    "difference": {metric: d}, "t_test_p": {metric: p},
    "wilcoxon_p": {metric: p}, "num_queries_compared": n}`
  where the means are each run's own trec_eval means, and the difference
  (compare minus run) and p-values (null where undefined) are over the queries
  evaluated in both; `--per-query` adds `"per_query"`/`"compare_per_query"`.
  Beside them, `"cluster_p"`/"cluster p": a paired randomization test that
  flips whole clusters of queries (`significance.cluster_test`), the clusters
  read from `--clusters FILE` (lines `qid<TAB>cluster`, one for every query
  compared; squad_longdoc's articles: `best_jax prepare`'s
  clusters.{split}.tsv or `best_jax train`'s WORKDIR/clusters.tsv), or each query
  its own cluster without it (said so); `"clusters"`: `{"unit", "count"}`.
Everything is computed before anything is printed, so an error prints no
partial output.
"""

from __future__ import annotations

import argparse
import json
import math

from best_jax.data import trec
from best_jax.evaluate import significance
from best_jax.evaluate import trec_eval


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--run", required=True, help="TREC run file (.gz ok)")
  parser.add_argument("--qrels", required=True, help="TREC qrels file (.gz ok)")
  parser.add_argument(
      "--metrics", default=",".join(trec_eval.DEFAULT_METRICS),
      help="comma-separated trec_eval names (default: %(default)s); supported: "
      + ", ".join(trec_eval.SUPPORTED))
  parser.add_argument("--relevance-level", type=int, default=1,
                      help="minimum grade counted relevant (trec_eval -l)")
  parser.add_argument("--per-query", action="store_true",
                      help="also print each query's values (trec_eval -q)")
  parser.add_argument("--json", action="store_true",
                      help="print one JSON object instead of a table")
  parser.add_argument("--compare", metavar="RUN2",
                      help="a second run: its means and paired p-values")
  parser.add_argument("--clusters", metavar="FILE",
                      help="with --compare: 'qid<TAB>cluster' lines (e.g. "
                      "squad_longdoc's articles: D/clusters.test.tsv or "
                      "WORKDIR/clusters.tsv) for "
                      "the cluster randomization test; default: each query "
                      "its own cluster")


def main(args: argparse.Namespace) -> int:
  metrics = [m.name for m in trec_eval.parse_measures(args.metrics.split(","))]
  qrels = trec.read_qrels(args.qrels)
  means, per_query = trec_eval.evaluate(
      trec.read_run(args.run), qrels, metrics,
      relevance_level=args.relevance_level)
  if args.compare is None:
    print(_single_json(means, per_query, args.per_query) if args.json else
          _single_text(means, per_query, args.per_query))
    return 0
  means_b, per_query_b = trec_eval.evaluate(
      trec.read_run(args.compare), qrels, metrics,
      relevance_level=args.relevance_level)
  tests = [significance.paired_test(per_query, per_query_b, m) for m in metrics]
  of = None if args.clusters is None else trec.read_clusters(
      args.clusters, [q for q in per_query if q in per_query_b])
  clustered = [significance.cluster_test(
      {q: v[m] for q, v in per_query.items()},
      {q: v[m] for q, v in per_query_b.items()}, of, "cluster")
               for m in metrics]
  if args.json:
    print(_compare_json(means, means_b, tests, clustered, per_query,
                        per_query_b, args.per_query))
  else:
    print(_compare_text(args, means, means_b, tests, clustered, per_query,
                        per_query_b))
  return 0


# ------------------------------------------------------------------ output

def _qid_order(qids):
  """Numeric ids in numeric order, then the rest as text."""
  return sorted(qids,
                key=lambda q: (0, int(q), q) if q.isdigit() else (1, 0, q))


def _per_query_lines(per_query, means) -> list[str]:
  lines = []
  for name in means:
    for qid in _qid_order(per_query):
      lines.append(f"{name:<22}\t{qid}\t{per_query[qid][name]:.4f}")
  lines += [f"{name:<22}\tall\t{mean:.4f}" for name, mean in means.items()]
  return lines


def _single_text(means, per_query, with_queries: bool) -> str:
  if with_queries:
    return "\n".join(_per_query_lines(per_query, means))
  width = max(len(name) for name in means)
  rows = [f"{'metric':<{width}}  {'mean':>6}"]
  rows += [f"{name:<{width}}  {mean:6.4f}" for name, mean in means.items()]
  rows.append(f"({len(per_query)} queries)")
  return "\n".join(rows)


def _single_json(means, per_query, with_queries: bool) -> str:
  if with_queries:
    ordered = {q: per_query[q] for q in _qid_order(per_query)}
    return json.dumps({"means": means, "per_query": ordered})
  return json.dumps(means)


def _p_text(p: float) -> str:
  return "-" if math.isnan(p) else f"{p:.4g}"


def _compare_text(args, means, means_b, tests, clustered, per_query,
                  per_query_b) -> str:
  rows = []
  if args.per_query:
    rows += ["# " + args.run] + _per_query_lines(per_query, means)
    rows += ["# " + args.compare] + _per_query_lines(per_query_b, means_b)
    rows.append("")
  header = ["metric", "run", "compare", "diff", "t-test p", "wilcoxon p",
            "cluster p"]
  table = [[t.metric, f"{means[t.metric]:.4f}", f"{means_b[t.metric]:.4f}",
            f"{t.mean_b - t.mean_a:+.4f}", _p_text(t.t_test_p),
            _p_text(t.wilcoxon_p), _p_text(c.p)]
           for t, c in zip(tests, clustered)]
  widths = [max(len(row[i]) for row in [header, *table])
            for i in range(len(header))]
  for row in [header, *table]:
    rows.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                          for i, (cell, w) in enumerate(zip(row, widths))))
  rows.append(f"run: {args.run} ({len(per_query)} queries)")
  rows.append(f"compare: {args.compare} ({len(per_query_b)} queries)")
  rows.append(f"diff and p-values over the {tests[0].num_queries} queries "
              "evaluated in both")
  count = clustered[0].num_clusters
  rows.append(
      f"cluster p: paired randomization test flipping whole clusters of "
      f"{args.clusters} ({count} clusters)" if args.clusters else
      f"cluster p: no --clusters, each query its own cluster ({count})")
  return "\n".join(rows)


def _compare_json(means, means_b, tests, clustered, per_query, per_query_b,
                  with_queries: bool) -> str:
  def p_or_none(p):
    return None if math.isnan(p) else p
  out = {
      "run": means,
      "compare": means_b,
      "difference": {t.metric: t.mean_b - t.mean_a for t in tests},
      "t_test_p": {t.metric: p_or_none(t.t_test_p) for t in tests},
      "wilcoxon_p": {t.metric: p_or_none(t.wilcoxon_p) for t in tests},
      "num_queries_compared": tests[0].num_queries,
      "cluster_p": {t.metric: p_or_none(c.p)
                    for t, c in zip(tests, clustered)},
      "clusters": {"unit": clustered[0].unit,
                   "count": clustered[0].num_clusters},
  }
  if with_queries:
    out["per_query"] = {q: per_query[q] for q in _qid_order(per_query)}
    out["compare_per_query"] = {q: per_query_b[q]
                                for q in _qid_order(per_query_b)}
  return json.dumps(out)
