"""The SQuAD long-document benchmark: article chunks, article-disjoint splits.

From a SQuAD v1.1 JSON file (`{"data": [{"title", "paragraphs": [{"context",
"qas": [{"id", "question", ...}]}]}]}`):

- a document is a run of consecutive paragraphs of one article, joined with
  "\n\n", titled with the article title; its length in subword tokens (MiniLM
  tokenizer) is a target drawn from a lognormal distribution, filled greedily
  with whole paragraphs (a chunk closes as soon as it reaches its target);
- a query is a question (id = the SQuAD question id); its one relevant
  document (grade 1) is the chunk holding the question's paragraph, and its
  gold passage is that paragraph, as a character span of the document text;
  its answers are every annotator's answer span, moved to document character
  offsets (distinct spans, in annotator order);
- articles are shuffled with the seed and cut into train/dev/test, so that no
  article (and no document) is in two splits.

Everything is a pure function of the file and `Options`: the same seed gives
the same documents, ids and splits on every machine. Document ids are
`{article:03d}-{chunk:02d}` (article = position in the file, from 0).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import urllib.parse
from collections.abc import Callable, Sequence

import numpy as np
import tokenizers

from best_jax.data.files import read_text
from best_jax.errors import InputError
from best_jax.models.pretrained import checkpoint_dir
from best_jax.retrieval.bm25 import bm25_run

SPLITS = ("train", "dev", "test")
DEFAULT_SEED = 0
BM25_DEPTH = 100


@dataclasses.dataclass(frozen=True)
class Options:
  """How documents and splits are drawn.

  Attributes:
    seed: the one seed of chunk lengths and the article split.
    median_tokens: median of the lognormal target length of a chunk.
    sigma: log-space standard deviation of the target length.
    fractions: shares of articles in train, dev and test (each split gets at
      least one article).
  """
  seed: int = DEFAULT_SEED
  median_tokens: float = 1000.0
  sigma: float = 1.05
  fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)

  def __post_init__(self):
    if not self.median_tokens > 0 or not self.sigma >= 0:
      raise InputError(f"median_tokens must be > 0 and sigma >= 0, got "
                       f"{self.median_tokens} and {self.sigma}")


@dataclasses.dataclass(frozen=True)
class Question:
  """A question; `answers` are `(answer_start, text)` in its paragraph."""
  qid: str
  text: str
  answers: tuple[tuple[int, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Paragraph:
  text: str
  questions: tuple[Question, ...]


@dataclasses.dataclass(frozen=True)
class Article:
  index: int
  title: str
  paragraphs: tuple[Paragraph, ...]


@dataclasses.dataclass(frozen=True)
class LongDocument:
  """A chunk of an article; `paragraph_spans` are `[start, end)` in `text`."""
  id: str
  title: str
  text: str
  article: int
  first_paragraph: int
  paragraph_spans: tuple[tuple[int, int], ...]
  tokens: int


@dataclasses.dataclass(frozen=True)
class Query:
  """A question with its relevant document, gold passage `[start, end)` and
  answer spans `[(start, end), ...]`, all character offsets of the document
  text (the answers lie inside the gold passage)."""
  qid: str
  text: str
  docid: str
  start: int
  end: int
  answers: tuple[tuple[int, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class SquadLongdoc:
  """The benchmark: documents in article order and queries per split."""
  documents: tuple[LongDocument, ...]
  queries: dict[str, tuple[Query, ...]]
  articles: dict[str, tuple[int, ...]]
  skipped_questions: int

  def topics(self, split: str) -> dict[str, str]:
    return {q.qid: q.text for q in self.queries[split]}

  def qrels(self, split: str) -> dict[str, dict[str, int]]:
    return {q.qid: {q.docid: 1} for q in self.queries[split]}

  def clusters(self, split: str) -> dict[str, str]:
    """`{qid: article}`: the questions of one article are not independent
    (for the article-level significance tests)."""
    return {q.qid: article_of(q.docid) for q in self.queries[split]}

  def split_of(self) -> dict[int, str]:
    """Article index -> split name."""
    return {a: s for s, articles in self.articles.items() for a in articles}


def article_of(docid: str) -> str:
  """The article of a chunk id `{article}-{chunk}`."""
  return docid.split("-")[0]


# ------------------------------------------------------------------ reading

def read_squad(path: str | os.PathLike) -> tuple[list[Article], int]:
  """Reads and validates a SQuAD v1.1 JSON file.

  Returns the articles and the number of questions skipped because their text
  is blank. Raises InputError naming the file and the offending entry.
  """
  try:
    root = json.loads(read_text(path))
  except json.JSONDecodeError as e:
    raise InputError(f"invalid JSON: {e.msg}", path, e.lineno) from None
  if not isinstance(root, dict) or not isinstance(root.get("data"), list):
    raise InputError('not a SQuAD file: expected {"data": [articles]}', path)
  if not root["data"]:
    raise InputError('no articles in "data"', path)
  articles, seen, skipped = [], set(), 0
  for a, raw in enumerate(root["data"]):
    where = f"data[{a}]"
    title = _string(raw, "title", where, path)
    raw_paragraphs = _list(raw, "paragraphs", where, path)
    if not raw_paragraphs:
      raise InputError(f"{where}: article without paragraphs", path)
    paragraphs = []
    for p, raw_paragraph in enumerate(raw_paragraphs):
      where_p = f"{where}.paragraphs[{p}]"
      context = _string(raw_paragraph, "context", where_p, path)
      questions = []
      for q, raw_qa in enumerate(_list(raw_paragraph, "qas", where_p, path)):
        where_q = f"{where_p}.qas[{q}]"
        qid = _string(raw_qa, "id", where_q, path)
        text = " ".join(_string(raw_qa, "question", where_q, path,
                                allow_blank=True).split())
        if qid in seen:
          raise InputError(f"{where_q}: duplicate question id {qid!r}", path)
        seen.add(qid)
        if not text:
          skipped += 1
          continue
        answers = _answers(raw_qa, context, where_q, path)
        questions.append(Question(qid, text, answers))
      paragraphs.append(Paragraph(context, tuple(questions)))
    articles.append(Article(a, _readable_title(title), tuple(paragraphs)))
  return articles, skipped


def _string(raw, key: str, where: str, path, allow_blank=False) -> str:
  if not isinstance(raw, dict):
    raise InputError(f"{where}: expected a JSON object", path)
  value = raw.get(key)
  if not isinstance(value, str):
    raise InputError(f"{where}: missing or non-string {key!r}", path)
  if not allow_blank and not value.strip():
    raise InputError(f"{where}: empty {key!r}", path)
  return value


def _answers(raw_qa: dict, context: str, where: str, path
             ) -> tuple[tuple[int, str], ...]:
  """The distinct `(answer_start, text)` of a question (none when the file
  has no "answers"); each must be its paragraph's text at that offset."""
  if "answers" not in raw_qa:
    return ()
  out = []
  for i, raw in enumerate(_list(raw_qa, "answers", where, path)):
    where_a = f"{where}.answers[{i}]"
    text = _string(raw, "text", where_a, path)
    start = raw.get("answer_start")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
      raise InputError(f"{where_a}: missing or non-integer 'answer_start'",
                       path)
    if context[start:start + len(text)] != text:
      raise InputError(f"{where_a}: the context at answer_start {start} is "
                       f"not the answer text {text!r}", path)
    if (start, text) not in out:
      out.append((start, text))
  return tuple(out)


def _list(raw, key: str, where: str, path) -> list:
  if not isinstance(raw, dict):
    raise InputError(f"{where}: expected a JSON object", path)
  value = raw.get(key)
  if not isinstance(value, list):
    raise InputError(f"{where}: missing or non-list {key!r}", path)
  return value


def _readable_title(title: str) -> str:
  """`Super_Bowl_50` -> `Super Bowl 50` (SQuAD titles are URL path parts)."""
  return " ".join(urllib.parse.unquote(title).replace("_", " ").split())


# ----------------------------------------------------------------- chunking

def chunk_lengths(token_counts: Sequence[int], targets: Callable[[], int]
                  ) -> list[int]:
  """Greedy chunking: the paragraph counts of consecutive chunks.

  Each chunk takes whole paragraphs until its token total reaches the target
  drawn for it (`targets()`), so every chunk has at least one paragraph.
  """
  sizes, count, total, target = [], 0, 0, targets()
  for tokens in token_counts:
    count += 1
    total += tokens
    if total >= target:
      sizes.append(count)
      count, total, target = 0, 0, targets()
  if count:
    sizes.append(count)
  return sizes


def _target_sampler(options: Options, article: int) -> Callable[[], int]:
  rng = np.random.default_rng([options.seed, 1, article])
  mu = math.log(options.median_tokens)
  return lambda: max(1, int(round(rng.lognormal(mu, options.sigma))))


def split_articles(num_articles: int, options: Options
                   ) -> dict[str, tuple[int, ...]]:
  """Seeded article-disjoint split; each split is sorted and non-empty."""
  if num_articles < len(SPLITS):
    raise InputError(f"need at least {len(SPLITS)} articles for "
                     f"train/dev/test splits, found {num_articles}")
  fractions = np.asarray(options.fractions, dtype=np.float64)
  if fractions.shape != (3,) or (fractions <= 0).any():
    raise InputError(f"split fractions must be 3 positive numbers, got "
                     f"{options.fractions}")
  fractions = fractions / fractions.sum()
  n_dev = max(1, int(round(fractions[1] * num_articles)))
  n_test = max(1, int(round(fractions[2] * num_articles)))
  n_train = num_articles - n_dev - n_test
  if n_train < 1:
    n_dev = n_test = 1
    n_train = num_articles - 2
  order = np.random.default_rng([options.seed, 0]).permutation(num_articles)
  bounds = np.cumsum([0, n_train, n_dev, n_test])
  return {split: tuple(sorted(int(a) for a in order[lo:hi]))
          for split, lo, hi in zip(SPLITS, bounds[:-1], bounds[1:])}


def build(articles: Sequence[Article], token_counts: Sequence[Sequence[int]],
          options: Options = Options(), skipped_questions: int = 0
          ) -> SquadLongdoc:
  """Chunks every article and assigns queries to splits.

  Args:
    articles: the SQuAD articles in file order.
    token_counts: per article, the token count of each paragraph.
    options: seed and length distribution.
    skipped_questions: carried into the result for the statistics.
  """
  width = max(3, len(str(len(articles) - 1)))
  split_of = {}
  splits = split_articles(len(articles), options)
  for split, members in splits.items():
    split_of.update(dict.fromkeys(members, split))
  documents, queries = [], {s: [] for s in SPLITS}
  for article, counts in zip(articles, token_counts):
    if len(counts) != len(article.paragraphs):
      raise ValueError(f"article {article.index}: {len(counts)} token counts "
                       f"for {len(article.paragraphs)} paragraphs")
    sizes = chunk_lengths(counts, _target_sampler(options, article.index))
    first = 0
    for chunk, size in enumerate(sizes):
      docid = f"{article.index:0{width}d}-{chunk:02d}"
      texts = [p.text for p in article.paragraphs[first:first + size]]
      spans, start = [], 0
      for text in texts:
        spans.append((start, start + len(text)))
        start += len(text) + 2
      documents.append(LongDocument(
          docid, article.title, "\n\n".join(texts), article.index, first,
          tuple(spans), int(sum(counts[first:first + size]))))
      for paragraph, (lo, hi) in zip(article.paragraphs[first:first + size],
                                     spans):
        for q in paragraph.questions:
          answers = tuple((lo + a, lo + a + len(t)) for a, t in q.answers)
          queries[split_of[article.index]].append(
              Query(q.qid, q.text, docid, lo, hi, answers))
      first += size
  return SquadLongdoc(tuple(documents),
                      {s: tuple(qs) for s, qs in queries.items()},
                      splits, skipped_questions)


# --------------------------------------------------------------- tokenizing

def minilm_token_counter() -> Callable[[Sequence[str]], list[int]]:
  """Counts MiniLM subword tokens per text (no special tokens, no truncation).

  Uses the checkpoint's `tokenizer.json` through `tokenizers` directly (the
  same backend `load_tokenizer()` wraps), which avoids importing transformers.
  """
  tokenizer = tokenizers.Tokenizer.from_file(
      os.path.join(checkpoint_dir(), "tokenizer.json"))
  tokenizer.no_truncation()
  tokenizer.no_padding()

  def count(texts: Sequence[str]) -> list[int]:
    encodings = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    return [len(e.ids) for e in encodings]
  return count


def load(path: str | os.PathLike, options: Options = Options(),
         count_tokens: Callable[[Sequence[str]], list[int]] | None = None
         ) -> SquadLongdoc:
  """Reads a SQuAD JSON file and builds the benchmark (MiniLM token counts)."""
  articles, skipped = read_squad(path)
  count_tokens = count_tokens or minilm_token_counter()
  flat = count_tokens([p.text for a in articles for p in a.paragraphs])
  token_counts, pos = [], 0
  for article in articles:
    token_counts.append(flat[pos:pos + len(article.paragraphs)])
    pos += len(article.paragraphs)
  return build(articles, token_counts, options, skipped)


# --------------------------------------------------------------- candidates

def bm25_candidates(dataset: SquadLongdoc, k: int = BM25_DEPTH,
                    show_progress: bool = True) -> dict[str, dict[str, float]]:
  """BM25 top-k over all documents (every split) for every query.

  Documents are indexed as `title + "\n" + text`, exactly as the `bm25`
  command indexes `corpus.jsonl`, so both give the same run.
  """
  corpus = {d.id: f"{d.title}\n{d.text}" for d in dataset.documents}
  queries = {q.qid: q.text for s in SPLITS for q in dataset.queries[s]}
  return bm25_run(corpus, queries, k, show_progress=show_progress)


def load_with_candidates(path: str | os.PathLike, options: Options = Options(),
                         k: int = BM25_DEPTH
                         ) -> tuple[SquadLongdoc, dict[str, dict[str, float]]]:
  """`load` plus `bm25_candidates`, cached per (file version, options, k).

  The `prepare` command and the TFDS builder's two configs share one build.
  """
  path = os.path.realpath(os.fspath(path))
  try:
    stat = os.stat(path)
  except OSError:
    raise InputError("file not found", path) from None
  return _load_with_candidates(path, stat.st_size, stat.st_mtime_ns, options, k)


@functools.lru_cache(maxsize=2)
def _load_with_candidates(path, size, mtime_ns, options, k):
  del size, mtime_ns  # Only part of the cache key.
  dataset = load(path, options)
  return dataset, bm25_candidates(dataset, k)
