"""Document collections: JSONL/TSV corpora, the SMART format, Cranfield and CISI.

A corpus in memory is `{docid: Document}` in file order. JSONL lines are
`{"id", "title", "text", ...}` (extra keys are kept in `Document.extra`); TSV
lines are `id<TAB>title<TAB>text` or `id<TAB>text`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from best_jax.data import trec
from best_jax.data.files import atomic_write, read_lines
from best_jax.errors import InputError


@dataclasses.dataclass(frozen=True)
class Document:
  id: str
  title: str
  text: str
  extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


Corpus = dict[str, Document]


def read_corpus(path: str | os.PathLike) -> Corpus:
  """Reads a `.jsonl` or `.tsv` corpus (by extension, `.gz` allowed)."""
  name = os.fspath(path).removesuffix(".gz")
  if name.endswith((".jsonl", ".json")):
    return _read_jsonl(path)
  if name.endswith((".tsv", ".txt")):
    return _read_tsv(path)
  raise InputError("unknown corpus format: use .jsonl or .tsv", path)


def _add(corpus: Corpus, doc: Document, path, number: int) -> None:
  if not doc.id:
    raise InputError("empty document id", path, number)
  if doc.id in corpus:
    raise InputError(f"duplicate document id {doc.id!r}", path, number)
  corpus[doc.id] = doc


def _read_jsonl(path) -> Corpus:
  corpus: Corpus = {}
  for number, line in read_lines(path):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise InputError(f"invalid JSON: {e.msg}", path, number) from None
    if not isinstance(record, dict):
      raise InputError("expected a JSON object per line", path, number)
    missing = [k for k in ("id", "text") if k not in record]
    if missing:
      raise InputError(f"missing key(s) {', '.join(missing)}", path, number)
    fields = {k: record.pop(k, "") for k in ("id", "title", "text")}
    for key, value in fields.items():
      if not isinstance(value, (str, int)):
        raise InputError(f"{key!r} must be a string", path, number)
    _add(corpus, Document(str(fields["id"]), str(fields["title"] or ""),
                          str(fields["text"]), record), path, number)
  if not corpus:
    raise InputError("no documents found", path)
  return corpus


def _read_tsv(path) -> Corpus:
  corpus: Corpus = {}
  for number, line in read_lines(path):
    if not line.strip():
      continue
    parts = line.split("\t")
    if len(parts) == 2:
      doc = Document(parts[0].strip(), "", parts[1])
    elif len(parts) == 3:
      doc = Document(parts[0].strip(), parts[1], parts[2])
    else:
      raise InputError(f"expected `id<TAB>[title<TAB>]text`, found "
                       f"{len(parts)} columns", path, number)
    _add(corpus, doc, path, number)
  if not corpus:
    raise InputError("no documents found", path)
  return corpus


def _first_line(run_path: str, docids: set[str]) -> tuple[int, str]:
  """(line, docid) of the first line of a run that ranks one of `docids`."""
  for number, line in read_lines(run_path):
    parts = line.split()
    if len(parts) > 2 and parts[2] in docids:
      return number, parts[2]
  raise ValueError("no such line")


def read_documents(source: str, docids: Iterable[str]
                   ) -> dict[str, tuple[str, str]]:
  """(title, text) of `docids` from a corpus file or an ir_datasets id."""
  docids = set(docids)
  if os.path.exists(source):
    corpus = read_corpus(source)
    return {d: (corpus[d].title, corpus[d].text) for d in docids
            if d in corpus}
  try:
    import ir_datasets  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise InputError("no such corpus file (an ir_datasets id needs `pip "
                     "install ir_datasets`)", source) from None
  try:
    store = ir_datasets.load(source).docs_store()
  except (KeyError, AttributeError) as e:
    raise InputError(f"not a corpus file nor an ir_datasets id with "
                     f"documents: {e}", source) from None
  out = {}
  for doc in store.get_many_iter(docids):
    title = getattr(doc, "title", "") or ""
    body = getattr(doc, "body", None) or getattr(doc, "text", "") or ""
    out[doc.doc_id] = (title, body)
  return out


def read_ranked_documents(source: str, docids: Iterable[str], run_path: str
                          ) -> dict[str, tuple[str, str]]:
  """(title, text) of every one of `docids` (ranked by the run `run_path`).

  A document the corpus lacks is an `InputError` naming the run's line.
  """
  docids = set(docids)
  documents = read_documents(source, docids)
  absent = docids - set(documents)
  if absent:
    line, example = _first_line(run_path, absent)
    raise InputError(f"document {example!r} is not in {source} "
                     f"({len(absent)} of the ranked documents are not)",
                     run_path, line)
  return documents


def write_corpus(docs: Iterable[Document], path: str | os.PathLike) -> None:
  """Writes a JSONL corpus atomically (`id`, `title`, `text`, then extras)."""
  with atomic_write(path) as f:
    for doc in docs:
      record = {"id": doc.id, "title": doc.title, "text": doc.text, **doc.extra}
      f.write(json.dumps(record, ensure_ascii=False) + "\n")


# -------------------------------------------------------------- SMART format

_SMART_FIELD = re.compile(r"^\.([A-Z])(?:\s+(.*?))?\s*$")


def read_smart(path: str | os.PathLike) -> list[dict[str, str]]:
  """Reads SMART records (`.I id`, then `.T`, `.A`, `.B`, `.W`, … fields).

  Returns one dict per record with key `I` (the id) and one key per field
  letter, the field's lines joined by newlines.
  """
  records: list[dict[str, str]] = []
  field = None
  for number, line in read_lines(path):
    match = _SMART_FIELD.match(line)
    if match:
      field, rest = match.group(1), match.group(2) or ""
      if field == "I":
        if not rest.strip():
          raise InputError("`.I` without an id", path, number)
        records.append({"I": rest.strip()})
        field = None
      elif not records:
        raise InputError(f"field .{field} before the first .I", path, number)
      else:
        record = records[-1]
        record[field] = record.get(field, "") + (("\n" + rest) if rest else "")
      continue
    if not records:
      if line.strip():
        raise InputError("text before the first .I record", path, number)
      continue
    if field is not None:
      record = records[-1]
      record[field] = (record.get(field, "") + "\n" + line).lstrip("\n")
  if not records:
    raise InputError("no .I records found", path)
  return [{k: v.strip() for k, v in r.items()} for r in records]


@dataclasses.dataclass(frozen=True)
class Collection:
  """A test collection: documents, topics and judgments."""
  corpus: Corpus
  topics: dict[str, trec.Topic]
  qrels: trec.Qrels


def _smart_corpus(path) -> Corpus:
  corpus: Corpus = {}
  for record in read_smart(path):
    doc = Document(record["I"], " ".join(record.get("T", "").split()),
                   record.get("W", ""))
    corpus[doc.id] = doc
  return corpus


def _smart_topics(path, renumber: bool) -> dict[str, trec.Topic]:
  topics = {}
  for position, record in enumerate(read_smart(path), start=1):
    qid = str(position) if renumber else record["I"]
    topics[qid] = trec.Topic(qid, " ".join(record.get("W", "").split()))
  return topics


def _whitespace_qrels(path, columns: int, grade_of) -> trec.Qrels:
  qrels: trec.Qrels = {}
  for number, line in read_lines(path):
    parts = line.split()
    if not parts:
      continue
    if len(parts) != columns:
      raise InputError(f"expected {columns} columns, found {len(parts)}",
                       path, number)
    try:
      grade = grade_of(parts)
    except ValueError:
      raise InputError("grade is not a number", path, number) from None
    qrels.setdefault(parts[0], {})[parts[1]] = grade
  return qrels


def _cranfield_grade(parts: list[str]) -> int:
  # Cleverdon's scale: 1 = complete answer … 4 = minimum interest, -1 = none.
  # Stored as trec_eval gains: 4 (best) … 1, and 0 for -1.
  raw = int(parts[2])
  return 5 - raw if 1 <= raw <= 4 else 0


def load_cranfield(directory: str | os.PathLike) -> Collection:
  """Cranfield 1400; queries renumbered 1..225 in file order as cranqrel does."""
  d = os.fspath(directory)
  return Collection(
      _smart_corpus(os.path.join(d, "cran.all.1400")),
      _smart_topics(os.path.join(d, "cran.qry"), renumber=True),
      _whitespace_qrels(os.path.join(d, "cranqrel"), 3, _cranfield_grade))


def load_cisi(directory: str | os.PathLike) -> Collection:
  """CISI: 1,460 documents, 112 queries, binary judgments for 76 of them."""
  d = os.fspath(directory)
  return Collection(
      _smart_corpus(os.path.join(d, "CISI.ALL")),
      _smart_topics(os.path.join(d, "CISI.QRY"), renumber=False),
      _whitespace_qrels(os.path.join(d, "CISI.REL"), 4, lambda p: 1))
