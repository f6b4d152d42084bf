"""The `rerank` command: rerank a TREC run with a trained model.

  python -m best_jax rerank --model DIR --run RUN --corpus C --topics T \\
      --out OUT [--depth 100] [--aggregation max] [--interpolate ALPHA] \\
      [--keep-rest] [--evidence FILE]

Each query of T (those RUN ranks) has its first-stage top `--depth`
documents cut into segments as in training, every segment scored, the
scores aggregated (the model's own aggregation unless `--aggregation`),
optionally fused with the first stage (`rerank.interpolate`: α · the
first stage's min-max-normalised score + (1 − α) · the model's, per query).
OUT (atomic) carries those scores; with `--keep-rest` the rest of each
query's first-stage list follows in its order, scored below (as the
experiment's own runs are), otherwise each query has `--depth` rows.
Queries go `--queries-per-call` at a time (memory stays bounded).
`--evidence` writes one JSON line per (query, document): the best segment,
its character span in the text and score, and every segment's score and
span. Corpora: `.jsonl`/`.tsv` files or `ir_datasets` ids. Bad input: one
line naming the file and line, exit status 2, no output written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

from best_jax.data import trec
from best_jax.data.corpus import read_ranked_documents
from best_jax.data.files import atomic_write
from best_jax.errors import InputError
from best_jax.experiment.evaluation import full_run
from best_jax.rerank.aggregate import AGGREGATIONS
from best_jax.rerank.interpolate import interpolate
from best_jax.serve.arguments import add_model_arguments, load_reranker
from best_jax.serve.reranker import Scored


def add_arguments(parser: argparse.ArgumentParser) -> None:
  add_model_arguments(parser)
  parser.add_argument("--run", required=True,
                      help="first-stage TREC run (qid Q0 docid rank score "
                      "tag)")
  parser.add_argument("--corpus", required=True,
                      help="JSONL (id, title, text) or TSV corpus file, or "
                      "an ir_datasets id (needs `pip install ir_datasets`)")
  parser.add_argument("--topics", required=True,
                      help="topics: `qid<TAB>text` lines or TREC SGML")
  parser.add_argument("--topic-field", default="title",
                      help="field of SGML topics: title, desc, narr")
  parser.add_argument("--out", required=True, help="TREC run to write")
  parser.add_argument("--depth", type=int, default=100,
                      help="rerank each query's top DEPTH (default 100)")
  parser.add_argument("--aggregation", choices=AGGREGATIONS, default=None,
                      help="segment scores -> document score (default: the "
                      "model's, e.g. max for MaxP and BeST, first for FirstP)")
  parser.add_argument("--interpolate", type=float, default=None,
                      metavar="ALPHA", help="fuse with the first stage: "
                      "ALPHA * first stage + (1 - ALPHA) * model, each "
                      "min-max normalised per query")
  parser.add_argument("--keep-rest", action="store_true",
                      help="also write the rest of each query's first-stage "
                      "list, in its order, below the reranked documents")
  parser.add_argument("--evidence", default=None,
                      help="JSON lines file: each (query, document)'s "
                      "evidence segment (span, score) and all its segments")
  parser.add_argument("--queries-per-call", type=int, default=64,
                      help="queries whose documents are segmented and "
                      "scored together (bounds memory; default 64)")
  parser.add_argument("--tag", default=None,
                      help="run tag (default: the model's name)")


def _evidence_lines(reranked: dict[str, dict[str, Scored]],
                    run: trec.Run) -> Iterable[str]:
  for qid, scored in reranked.items():
    for docid, _ in trec.ranked({d: run[qid][d] for d in scored}):
      s = scored[docid]
      yield json.dumps({
          "qid": qid, "docid": docid, "score": run[qid][docid],
          "segment": s.segment, "span": list(s.span),
          "segment_score": s.evidence_score,
          "scores": list(s.segment_scores),
          "spans": [list(span) for span in s.spans]}) + "\n"


def main(args: argparse.Namespace) -> int:
  for name in ("depth", "queries_per_call"):
    if getattr(args, name) < 1:
      raise InputError(f"--{name.replace('_', '-')} must be at least 1, not "
                       f"{getattr(args, name)}")
  if args.interpolate is not None and not 0.0 <= args.interpolate <= 1.0:
    raise InputError(f"--interpolate must lie in [0, 1], not "
                     f"{args.interpolate}")
  first = trec.read_run(args.run)
  try:
    topics = {q: t.text(args.topic_field)
              for q, t in trec.read_topics(args.topics).items()}
  except ValueError as e:
    raise InputError(str(e), args.topics) from None
  first = {q: first.get(q, {}) for q in topics}
  missing = [q for q, ranking in first.items() if not ranking]
  if missing:
    print(f"rerank: {len(missing)} of {len(topics)} queries have no ranking "
          f"in {args.run} (e.g. {missing[0]!r}); they get no rows",
          file=sys.stderr)
  candidates = {q: [d for d, _ in trec.ranked(r)[:args.depth]]
                for q, r in first.items()}
  needed = {d for ds in candidates.values() for d in ds}
  documents = read_ranked_documents(args.corpus, needed, args.run)

  reranker = load_reranker(args)
  reranked = reranker.rerank_run(topics, candidates, documents,
                                 aggregation=args.aggregation,
                                 queries_per_call=args.queries_per_call)
  model = {q: {d: s.score for d, s in scored.items()}
           for q, scored in reranked.items()}
  if args.interpolate is not None:
    model = interpolate(first, model, args.interpolate)
  run = full_run(model, first) if args.keep_rest else model
  tag = args.tag or trec.run_file_name(reranker.model.name)
  if args.evidence:
    with atomic_write(args.evidence) as f:
      f.writelines(_evidence_lines(reranked, run))
  trec.write_run(run, args.out, tag=tag)
  rows = sum(len(r) for r in run.values())
  print(f"rerank: {len(reranked)} queries, top {args.depth} reranked by "
        f"{reranker.model.name} ({args.aggregation or reranker.aggregation}"
        f"{'' if args.interpolate is None else f', α={args.interpolate}'})"
        f" -> {args.out} ({rows} rows)")
  return 0
