"""TREC topics, qrels and run files: strict readers and atomic writers.

In-memory forms (the ones pytrec_eval uses):
  topics: {qid: Topic}
  qrels:  {qid: {docid: grade}}
  run:    {qid: {docid: score}}
Every reader raises `InputError` naming the file and line of the first problem.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Iterable

from best_jax.data.files import atomic_write, read_lines, read_text
from best_jax.errors import InputError

Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]


@dataclasses.dataclass(frozen=True)
class Topic:
  qid: str
  title: str
  description: str = ""
  narrative: str = ""

  def text(self, field: str = "title") -> str:
    """The query text of one field: `title`, `desc` (or `description`) or `narr`."""
    field = {"desc": "description", "narr": "narrative"}.get(field, field)
    if field not in ("title", "description", "narrative"):
      raise ValueError(f"unknown topic field {field!r}")
    return getattr(self, field)


# ---------------------------------------------------------------- topics

_SGML_FIELD = re.compile(r"<(num|title|desc|narr)>", re.IGNORECASE)
_FIELD_PREFIX = {"num": r"Number:", "desc": r"Description:", "narr": r"Narrative:"}


def read_topics(path: str | os.PathLike) -> dict[str, Topic]:
  """Reads SGML `<top>` topics or `qid<TAB>text` lines, detected from content."""
  text = read_text(path)
  if text.lstrip().lower().startswith("<top>"):
    return _read_sgml_topics(path, text)
  topics = {}
  for number, line in read_lines(path):
    if not line.strip():
      continue
    parts = line.split("\t")
    if len(parts) < 2 or not parts[0].strip() or not parts[1].strip():
      raise InputError("expected `qid<TAB>query text`", path, number)
    qid = parts[0].strip()
    if qid in topics:
      raise InputError(f"duplicate topic id {qid!r}", path, number)
    topics[qid] = Topic(qid, " ".join(parts[1:]).strip())
  return topics


def _read_sgml_topics(path, text: str) -> dict[str, Topic]:
  topics = {}
  text = text.replace("\r\n", "\n")
  pos = 0
  while (start := text.lower().find("<top>", pos)) != -1:
    end = text.lower().find("</top>", start)
    line = text.count("\n", 0, start) + 1
    if end == -1:
      raise InputError("<top> without a closing </top>", path, line)
    body = text[start + len("<top>"):end]
    fields = {}
    marks = list(_SGML_FIELD.finditer(body))
    for i, m in enumerate(marks):
      value_end = marks[i + 1].start() if i + 1 < len(marks) else len(body)
      name = m.group(1).lower()
      value = body[m.end():value_end]
      if name in _FIELD_PREFIX:
        value = re.sub(r"^\s*" + _FIELD_PREFIX[name], "", value, flags=re.I)
      fields[name] = " ".join(value.split())
    qid = fields.get("num", "")
    if not qid or not fields.get("title"):
      raise InputError("topic without <num> or <title>", path, line)
    if qid in topics:
      raise InputError(f"duplicate topic id {qid!r}", path, line)
    topics[qid] = Topic(qid, fields["title"], fields.get("desc", ""),
                        fields.get("narr", ""))
    pos = end + len("</top>")
  if not topics:
    raise InputError("no <top> topics found", path)
  return topics


def write_topics_tsv(topics: dict[str, Topic] | dict[str, str],
                     path: str | os.PathLike, field: str = "title") -> None:
  """Writes `qid<TAB>text` lines (tabs and newlines in the text become spaces)."""
  with atomic_write(path) as f:
    for qid, topic in topics.items():
      text = topic.text(field) if isinstance(topic, Topic) else topic
      f.write(f"{qid}\t{' '.join(text.split())}\n")


# ----------------------------------------------------------------- qrels

def read_qrels(path: str | os.PathLike) -> Qrels:
  """Reads `qid iter docid grade` lines (whitespace separated)."""
  qrels: Qrels = {}
  for number, line in read_lines(path):
    parts = line.split()
    if not parts:
      continue
    if len(parts) != 4:
      raise InputError(
          f"expected 4 columns `qid iter docid grade`, found {len(parts)}",
          path, number)
    qid, _, docid, grade = parts
    try:
      value = int(grade)
    except ValueError:
      raise InputError(f"grade {grade!r} is not an integer", path, number) from None
    judged = qrels.setdefault(qid, {})
    if docid in judged and judged[docid] != value:
      raise InputError(f"conflicting grades for ({qid}, {docid})", path, number)
    judged[docid] = value
  if not qrels:
    raise InputError("no judgments found", path)
  return qrels


def write_qrels(qrels: Qrels, path: str | os.PathLike) -> None:
  with atomic_write(path) as f:
    for qid, judged in qrels.items():
      for docid, grade in judged.items():
        f.write(f"{qid} 0 {docid} {grade}\n")


# --------------------------------------------------------------- clusters

def read_clusters(path: str | os.PathLike,
                  qids: Iterable[str] = ()) -> dict[str, str]:
  """`{qid: cluster}` from `qid<TAB>cluster` lines (blank lines skipped):
  the groups of queries that are not independent (e.g. squad_longdoc's
  articles), for `significance.cluster_test`. Every one of `qids` must have
  a cluster (a map of other queries would test each query alone)."""
  out = {}
  for number, line in read_lines(path):
    if not line.strip():
      continue
    parts = line.split("\t")
    if len(parts) != 2 or not all(p.strip() for p in parts):
      raise InputError("expected 'qid<TAB>cluster'", path, number)
    qid, cluster = parts[0].strip(), parts[1].strip()
    if out.get(qid, cluster) != cluster:
      raise InputError(f"query {qid!r} is in two clusters", path, number)
    out[qid] = cluster
  missing = [q for q in qids if q not in out]
  if missing:
    raise InputError(f"no cluster for query {missing[0]!r} (and "
                     f"{len(missing) - 1} more)", path)
  if not out:
    raise InputError("no 'qid<TAB>cluster' lines found", path)
  return out


def write_clusters(clusters: dict[str, str], path: str | os.PathLike) -> None:
  with atomic_write(path) as f:
    f.writelines(f"{q}\t{c}\n" for q, c in sorted(clusters.items()))


# ------------------------------------------------------------------ runs

def read_run(path: str | os.PathLike) -> Run:
  """Reads `qid Q0 docid rank score tag` lines; scores must be finite numbers."""
  run: Run = {}
  for number, line in read_lines(path):
    parts = line.split()
    if not parts:
      continue
    if len(parts) != 6:
      raise InputError(
          f"expected 6 columns `qid Q0 docid rank score tag`, found {len(parts)}",
          path, number)
    qid, _, docid, rank, score, _ = parts
    try:
      int(rank)
    except ValueError:
      raise InputError(f"rank {rank!r} is not an integer", path, number) from None
    try:
      value = float(score)
    except ValueError:
      raise InputError(f"score {score!r} is not a number", path, number) from None
    if not math.isfinite(value):
      raise InputError(f"score {score!r} is not finite", path, number)
    ranking = run.setdefault(qid, {})
    if docid in ranking:
      raise InputError(f"document {docid!r} appears twice in the ranking of "
                       f"query {qid!r}", path, number)
    ranking[docid] = value
  if not run:
    raise InputError("no ranking lines found", path)
  return run


def ranked(scores: dict[str, float]) -> list[tuple[str, float]]:
  """Documents in trec_eval's order: score descending, ties by docid descending."""
  return sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)


def write_run(run: Run, path: str | os.PathLike, tag: str = "best_jax",
              depth: int | None = None) -> None:
  """Writes a TREC run atomically, ranks in trec_eval's order, at most `depth`."""
  with atomic_write(path) as f:
    for qid, scores in run.items():
      for rank, (docid, score) in enumerate(ranked(scores)[:depth], start=1):
        f.write(f"{qid} Q0 {docid} {rank} {float(score)!r} {tag}\n")


def run_file_name(name: str) -> str:
  """A system's name as a run file name and tag: `BeST-1` → `best-1`."""
  return (name.lower().replace(" ", "_").replace("(", "").replace(")", "")
          .replace("/", "-"))
