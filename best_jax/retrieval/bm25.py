"""BM25 first-stage retrieval with `bm25s`, and the `bm25` command.

Scoring is Lucene's BM25 (idf = log(1 + (N - df + 0.5) / (df + 0.5))), with
Anserini's default k1 = 0.9, b = 0.4. Text is lower-cased, split into runs of
two or more word characters, English stopwords are removed and words are
stemmed with the Snowball English stemmer (PyStemmer). Only documents that
match at least one query term are ranked. The top k are chosen in trec_eval's
order (score descending, ties by docid descending), so the same input always
gives the same run, whatever the order of the corpus.

  python -m best_jax bm25 --corpus corpus.jsonl --topics topics.tsv --out x.run
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

import numpy as np
import Stemmer
from tqdm.auto import tqdm

from best_jax.data import trec
from best_jax.data.corpus import read_corpus
from best_jax.errors import InputError

Run = dict[str, dict[str, float]]

K1 = 0.9
B = 0.4


def _stemmer(stem: bool):
  if not stem:
    return None
  return Stemmer.Stemmer("english")


def bm25_run(corpus: Mapping[str, str], queries: Mapping[str, str],
             k: int = 100, *, k1: float = K1, b: float = B, stem: bool = True,
             show_progress: bool = True) -> Run:
  """Ranks `corpus` ({docid: text}) for each query ({qid: text}).

  Returns `{qid: {docid: score}}` with at most `k` documents per query, only
  documents with a positive score; a query that matches nothing maps to {}.
  Scores are float32 BM25 values converted to Python floats.
  """
  # bm25s runs a JAX computation when it is imported, which would start the
  # backend before `jax.distributed.initialize` on a multi-host job.
  import bm25s  # pylint: disable=g-import-not-at-top
  if not corpus:
    raise InputError("empty corpus")
  if k < 1:
    raise InputError(f"k must be positive, got {k}")
  stemmer = _stemmer(stem)
  docids = list(corpus)
  corpus_tokens = bm25s.tokenize(list(corpus.values()), stopwords="en",
                                 stemmer=stemmer, show_progress=show_progress)
  model = bm25s.BM25(k1=k1, b=b, method="lucene")
  model.index(corpus_tokens, show_progress=show_progress)
  query_tokens = bm25s.tokenize(list(queries.values()), stopwords="en",
                                stemmer=stemmer, return_ids=False,
                                show_progress=False)
  run: Run = {}
  for qid, tokens in tqdm(zip(queries, query_tokens), total=len(queries),
                          desc="bm25", unit="q", disable=not show_progress):
    ids = model.get_tokens_ids(tokens)
    if not ids:
      run[qid] = {}
      continue
    scores_d = model.get_scores_from_ids(ids)
    run[qid] = {docids[d]: float(scores_d[d]) for d in _top_k(scores_d, docids,
                                                              k)}
  return run


def _top_k(scores_d: np.ndarray, docids: list[str], k: int) -> list[int]:
  """Indices of the k best positive scores; ties by docid descending."""
  positive = np.flatnonzero(scores_d > 0)
  if len(positive) > k:
    kth = np.partition(scores_d[positive], len(positive) - k)[len(positive) - k]
    positive = positive[scores_d[positive] >= kth]
  best = sorted(positive.tolist(), key=lambda d: (scores_d[d], docids[d]),
                reverse=True)
  return best[:k]


# -------------------------------------------------------------- command line

def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--corpus", required=True,
                      help="JSONL (`id`, `title`, `text`) or TSV corpus; "
                      "title and text are indexed")
  parser.add_argument("--topics", required=True,
                      help="topics: `qid<TAB>text` lines or TREC SGML")
  parser.add_argument("--out", required=True, help="TREC run file to write")
  parser.add_argument("--k", type=int, default=100,
                      help="documents per query (default 100)")
  parser.add_argument("--field", default="title",
                      help="topic field of SGML topics: title, desc, narr")
  parser.add_argument("--k1", type=float, default=K1)
  parser.add_argument("--b", type=float, default=B)
  parser.add_argument("--no-stem", action="store_true",
                      help="do not stem (default: Snowball English stemmer)")
  parser.add_argument("--tag", default="bm25", help="run tag (6th column)")


def main(args: argparse.Namespace) -> int:
  corpus = read_corpus(args.corpus)
  topics = trec.read_topics(args.topics)
  try:
    queries = {qid: topic.text(args.field) for qid, topic in topics.items()}
  except ValueError as e:
    raise InputError(str(e), args.topics) from None
  texts = {docid: f"{doc.title}\n{doc.text}" if doc.title else doc.text
           for docid, doc in corpus.items()}
  run = bm25_run(texts, queries, args.k, k1=args.k1, b=args.b,
                 stem=not args.no_stem)
  trec.write_run(run, args.out, tag=args.tag, depth=args.k)
  empty = sum(1 for scores in run.values() if not scores)
  note = f" ({empty} queries matched nothing)" if empty else ""
  print(f"bm25: {len(queries)} queries over {len(corpus)} documents -> "
        f"{args.out}{note}")
  return 0
