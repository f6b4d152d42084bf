"""Experiment data: documents, and per split topics, qrels, first-stage run
and gold passages, from the source a config names (`config.data.name`).

- `synthetic`: generated in memory (tiny_cpu): documents of random sentences
  over a small English vocabulary; each query's words come from one "gold"
  sentence of its relevant document, placed at a random position (so the
  first segment is often not the evidence). BM25 gives the candidates.
- `squad_longdoc`: the files of `best_jax prepare squad_longdoc` (prepared
  into `config.data.dir`, default `WORKDIR/data`, when missing).
- `trec`: a corpus file (or ir_datasets), topics, qrels, a first-stage run and
  cross-validation folds (Robust04, TREC DL).
- `cranfield`: the Cranfield collection, BM25 candidates, seeded query split.
"""

from __future__ import annotations

import dataclasses
import os

import ml_collections
import numpy as np
from etils import epath

from best_jax.data import prepare
from best_jax.data import squad_longdoc as sl
from best_jax.data import trec
from best_jax.data.corpus import load_cranfield, read_corpus
from best_jax.data.files import is_remote
from best_jax.data.trec import Qrels, Run
from best_jax.errors import InputError
from best_jax.evaluate.evidence import Evidence, read_evidence
from best_jax.rerank.folds import read_folds
from best_jax.retrieval.bm25 import bm25_run

SPLITS = ("train", "dev", "test")
# Per (qid, relevant docid): the gold passage and answer spans (SQuAD's).
Gold = dict[tuple[str, str], Evidence]


@dataclasses.dataclass(frozen=True)
class Split:
  """Queries of one split with their judgments and candidates."""
  topics: dict[str, str]
  qrels: Qrels
  run: Run
  gold: Gold = dataclasses.field(default_factory=dict)

  def subset(self, qids) -> Split:
    qids = [q for q in qids if q in self.topics]
    keep = set(qids)
    return Split({q: self.topics[q] for q in qids},
                 {q: j for q, j in self.qrels.items() if q in keep},
                 {q: r for q, r in self.run.items() if q in keep},
                 {k: v for k, v in self.gold.items() if k[0] in keep})


@dataclasses.dataclass(frozen=True)
class ExperimentData:
  documents: dict[str, tuple[str, str]]  # docid -> (title, text)
  splits: dict[str, Split]


SOURCES = ("synthetic", "squad_longdoc", "trec", "cranfield")


def load(config: ml_collections.ConfigDict, workdir: str) -> ExperimentData:
  """Loads the data that `config.data` names, then subsamples queries.

  The subsample is drawn with the data's seed (`config.data.seed`, 0 when
  absent), not the run's: the runs of `--config.seed=N` that `best_jax seeds`
  compares are tested on the same questions."""
  loaders = {"synthetic": _synthetic, "squad_longdoc": _squad_longdoc,
             "trec": _trec, "cranfield": _cranfield}
  data = loaders[config.data.name](config.data, workdir)
  return _subsample(data, config.data.get("max_queries"),
                    config.data.get("seed", 0))


def clusters(name: str, split: Split) -> dict | None:
  """`{"unit", "of": {qid: cluster}}` of a split's queries for the
  significance tests, from the data: squad_longdoc's questions cluster by
  the article of their relevant document (docid `{article:03d}-{chunk:02d}`;
  the questions of one article are not independent); other data have no
  cluster map (None: each query is its own cluster)."""
  if name != "squad_longdoc":
    return None
  return {"unit": "article",
          "of": {q: sl.article_of(min(d for d, g in judged.items() if g >= 1))
                 for q, judged in split.qrels.items()
                 if any(g >= 1 for g in judged.values())}}


def _subsample(data: ExperimentData, max_queries, seed: int
               ) -> ExperimentData:
  """Keeps a seeded random subset of at most `max_queries[split]` queries
  (those with a judged relevant document first)."""
  if not max_queries:
    return data
  splits = {}
  for split, part in data.splits.items():
    limit = max_queries.get(split) if hasattr(max_queries, "get") else None
    qids = [q for q in part.topics
            if any(g >= 1 for g in part.qrels.get(q, {}).values())]
    if limit and len(qids) > limit:
      rng = np.random.default_rng([seed, SPLITS.index(split)])
      picked = set(rng.choice(len(qids), size=limit, replace=False).tolist())
      qids = [q for i, q in enumerate(qids) if i in picked]
    splits[split] = part.subset(qids)
  return ExperimentData(data.documents, splits)


# ------------------------------------------------------------------ synthetic

_WORDS = (
    "apple river stone cloud music garden window forest engine silver "
    "candle harbor bridge winter market planet doctor island coffee paper "
    "violin desert rocket butter castle mirror tunnel orange pencil jacket "
    "thunder meadow saddle lantern copper falcon velvet glacier pepper "
    "marble anchor cotton dragon temple wallet basket hammer ladder needle "
    "rabbit shadow timber valley wagon yellow zebra pirate magnet summit "
    "feather canyon cherry dolphin emerald fossil goblet helmet igloo jungle"
).split()


def synthetic_data(num_queries: int = 48, num_docs: int = 40,
                   sentences_per_doc: tuple[int, int] = (4, 9),
                   words_per_sentence: int = 6, seed: int = 0
                   ) -> ExperimentData:
  """A small generated benchmark with gold spans (see the module docstring).

  Queries are split 50/25/25 into train/dev/test.
  """
  rng = np.random.default_rng(seed)
  documents, sentences_of = {}, {}
  for d in range(num_docs):
    count = int(rng.integers(sentences_per_doc[0], sentences_per_doc[1] + 1))
    sentences = [" ".join(rng.choice(_WORDS, words_per_sentence)).capitalize()
                 + "." for _ in range(count)]
    sentences_of[f"D{d:03d}"] = sentences
  topics, qrels, gold = {}, {}, {}
  for q in range(num_queries):
    qid, docid = f"Q{q:03d}", f"D{int(rng.integers(num_docs)):03d}"
    sentences = sentences_of[docid]
    words = list(rng.choice(_WORDS, 3, replace=False))
    where = int(rng.integers(len(sentences)))
    sentences[where] = (sentences[where][:-1] + " " + " ".join(words) + ".")
    topics[qid] = " ".join(words)
    qrels[qid] = {docid: 1}
    gold[(qid, docid)] = where  # sentence index, turned into chars below
  for docid, sentences in sentences_of.items():
    documents[docid] = (f"doc {docid[1:]}", " ".join(sentences))
  spans = {}
  for (qid, docid), where in gold.items():
    sentences = sentences_of[docid]
    start = sum(len(s) + 1 for s in sentences[:where])
    # The passage is the sentence; the answer, the query's words in it.
    answer = start + sentences[where].index(topics[qid])
    spans[(qid, docid)] = Evidence(
        (start, start + len(sentences[where])),
        ((answer, answer + len(topics[qid])),))
  run = bm25_run({d: f"{t} {x}" for d, (t, x) in documents.items()}, topics,
                 k=20, stem=False, show_progress=False)
  qids = list(topics)
  cut = {"train": qids[:num_queries // 2],
         "dev": qids[num_queries // 2:3 * num_queries // 4],
         "test": qids[3 * num_queries // 4:]}
  full = Split(topics, qrels, run, spans)
  return ExperimentData(documents, {s: full.subset(q) for s, q in cut.items()})


def _synthetic(data: ml_collections.ConfigDict, workdir: str
               ) -> ExperimentData:
  del workdir
  return synthetic_data(num_queries=data.num_queries, num_docs=data.num_docs,
                        seed=data.seed)


# -------------------------------------------------------------- squad_longdoc

def _squad_longdoc(data: ml_collections.ConfigDict, workdir: str
                   ) -> ExperimentData:
  directory = data.get("dir") or os.path.join(workdir, "data")
  if not epath.Path(directory, "stats.json").exists():
    if is_remote(directory):
      raise InputError(
          "no prepared squad_longdoc data there: prepare it locally (`python "
          "-m best_jax prepare squad_longdoc --squad-json FILE --out DIR`), "
          "copy DIR there (or pass --config.data.dir=DIR)", directory)
    try:
      squad_json = prepare.find_squad_json(data.get("squad_json") or None)
    except InputError as e:
      raise InputError(e.message.replace(
          "pass --squad-json FILE", "pass --config.data.squad_json=FILE"),
                       e.path, e.line) from None
    print(f"preparing squad_longdoc from {squad_json} into {directory}")
    prepare.prepare_squad_longdoc(squad_json, directory,
                                  sl.Options(seed=data.get("seed", 0)),
                                  tfds=False, segment_stats=False)
  corpus = read_corpus(os.path.join(directory, "corpus.jsonl"))
  documents = {d: (doc.title, doc.text) for d, doc in corpus.items()}
  splits = {}
  for split in SPLITS:
    path = lambda kind, ext: os.path.join(directory, f"{kind}.{split}.{ext}")
    topics = {q: t.title for q, t in
              trec.read_topics(path("topics", "tsv")).items()}
    splits[split] = Split(topics, trec.read_qrels(path("qrels", "txt")),
                          trec.read_run(path("bm25", "run")),
                          read_evidence(path("gold", "jsonl")))
  # The BM25 runs rank every split's documents (evaluation reranks them all),
  # but training negatives must come from the train articles only: a dev or
  # test document is never a training positive, so drawing it as a negative
  # teaches a document prior ("held-out documents score low") that ranks the
  # test queries' relevant documents, all from test articles, at the bottom.
  train = splits["train"]
  train_docs = {d for judged in train.qrels.values() for d in judged}
  splits["train"] = Split(
      train.topics, train.qrels,
      {q: {d: s for d, s in r.items() if d in train_docs}
       for q, r in train.run.items()}, train.gold)
  return ExperimentData(documents, splits)


# ----------------------------------------------------------------------- trec

def _documents_for(data: ml_collections.ConfigDict, docids: set[str]
                   ) -> dict[str, tuple[str, str]]:
  """Texts of `docids` from `data.corpus` (a file) or ir_datasets."""
  if data.get("corpus"):
    corpus = read_corpus(data.corpus)
    return {d: (corpus[d].title, corpus[d].text) for d in docids
            if d in corpus}
  if data.get("ir_datasets"):
    try:
      import ir_datasets  # pylint: disable=g-import-not-at-top
    except ImportError:
      raise InputError(
          "document texts: set config.data.corpus to a .jsonl/.tsv corpus "
          "file, or `pip install ir_datasets` and make "
          f"{data.ir_datasets!r} available") from None
    store = ir_datasets.load(data.ir_datasets).docs_store()
    out = {}
    for doc in store.get_many_iter(docids):
      title = getattr(doc, "title", "") or ""
      body = getattr(doc, "body", None) or getattr(doc, "text", "")
      out[doc.doc_id] = (title, body)
    return out
  raise InputError("no document source: set config.data.corpus or "
                   "config.data.ir_datasets")


def _trec(data: ml_collections.ConfigDict, workdir: str) -> ExperimentData:
  """TREC files. Splits come either from cross-validation folds (`data.folds`
  with `data.fold` the test fold and the next fold the dev fold; topics,
  qrels and run shared) or from per-split files (`data.train`, `data.dev`,
  `data.test`, each with topics, qrels, run)."""
  del workdir
  field = data.get("topic_field", "title")
  depth = data.get("depth", 100)

  def read(topics_path, qrels_path, run_path):
    topics = {q: t.text(field) for q, t in
              trec.read_topics(topics_path).items()}
    run = {q: dict(trec.ranked(r)[:depth])
           for q, r in trec.read_run(run_path).items()}
    return topics, trec.read_qrels(qrels_path), run

  parts = {}
  if data.get("folds"):
    topics, qrels, run = read(data.topics, data.qrels, data.run)
    folds = read_folds(data.folds)
    names = list(folds)
    test_name = data.get("fold") or names[0]
    if test_name not in folds:
      raise InputError(f"unknown fold {test_name!r}; one of {names}",
                       data.folds)
    dev_name = names[(names.index(test_name) + 1) % len(names)]
    held = set(folds[test_name]) | set(folds[dev_name])
    cut = {"test": folds[test_name], "dev": folds[dev_name],
           "train": [q for n in names for q in folds[n] if q not in held]}
    for split, qids in cut.items():
      keep = [q for q in qids if q in topics]
      parts[split] = ({q: topics[q] for q in keep},
                      {q: qrels[q] for q in keep if q in qrels},
                      {q: run[q] for q in keep if q in run})
  else:
    for split in SPLITS:
      files = data.get(split)
      if not files:
        raise InputError(f"config.data.{split} (topics, qrels, run) or "
                         "config.data.folds is required")
      parts[split] = read(files.topics, files.qrels, files.run)
  docids = {d for _, qrels, run in parts.values() for r in run.values()
            for d in r}
  docids |= {d for _, qrels, _ in parts.values() for j in qrels.values()
             for d, g in j.items() if g >= 1}
  documents = _documents_for(data, docids)
  if not documents:
    raise InputError("none of the run's documents has a text")
  splits = {}
  for split, (topics, qrels, run) in parts.items():
    run = {q: {d: x for d, x in r.items() if d in documents}
           for q, r in run.items()}
    splits[split] = Split(topics, qrels, run)
  return ExperimentData(documents, splits)


# ------------------------------------------------------------------ cranfield

def _cranfield(data: ml_collections.ConfigDict, workdir: str
               ) -> ExperimentData:
  del workdir
  collection = load_cranfield(data.dir)
  documents = {d: (doc.title, doc.text)
               for d, doc in collection.corpus.items()}
  topics = {q: t.title for q, t in collection.topics.items()}
  run = bm25_run({d: f"{t} {x}" for d, (t, x) in documents.items()}, topics,
                 k=data.get("depth", 100), stem=False)
  qids = sorted(topics, key=lambda q: (len(q), q))
  rng = np.random.default_rng(data.get("seed", 0))
  qids = [qids[i] for i in rng.permutation(len(qids))]
  n = len(qids)
  cut = {"train": qids[:int(0.6 * n)], "dev": qids[int(0.6 * n):int(0.8 * n)],
         "test": qids[int(0.8 * n):]}
  full = Split(topics, collection.qrels, run)
  return ExperimentData(documents, {s: full.subset(q) for s, q in cut.items()})


def candidates(split: Split, depth: int) -> dict[str, list[str]]:
  """Each query's first-stage top `depth` docids (trec_eval order)."""
  return {q: [d for d, _ in trec.ranked(split.run.get(q, {}))[:depth]]
          for q in split.topics}
