"""TREC topics/qrels/runs, corpora and SMART: real files and bad input."""

import gzip
import os

import pytest

from best_jax.data import corpus, files, trec
from best_jax.errors import InputError


def _write(tmp_path, name, data):
  path = tmp_path / name
  path.write_bytes(data if isinstance(data, bytes) else data.encode())
  return str(path)


# ------------------------------------------------------------ real files

def test_robust04_files(shared):
  run = trec.read_run(shared("robust04", "rob04_yang19_bm25rm3.top1000.run.gz"))
  assert len(run) == 250 and all(len(r) == 1000 for r in run.values())
  qrels = trec.read_qrels(shared("robust04", "qrels.robust2004.txt.gz"))
  assert sum(len(j) for j in qrels.values()) == 311_410
  assert sum(g > 0 for j in qrels.values() for g in j.values()) == 17_412
  topics = trec.read_topics(shared("robust04", "topics.robust04.301-450.601-700.txt"))
  assert len(topics) == 250
  assert topics["301"].title == "International Organized Crime"
  assert topics["301"].text("desc").startswith("Identify organizations")
  assert topics["301"].narrative.startswith("A relevant document must")


def test_trec_dl_files_with_crlf(shared):
  run = trec.read_run(shared("trec-dl-2019-doc", "msmarco-doctest2019-top100"))
  assert len(run) == 200 and sum(map(len, run.values())) == 20_000
  qrels = trec.read_qrels(shared("trec-dl-2019-doc", "qrels.dl19-doc.txt"))
  assert len(qrels) == 43 and sum(map(len, qrels.values())) == 16_258
  assert len(trec.read_topics(shared("trec-dl-2019-doc", "topics.dl19-doc.txt"))) == 43
  queries = trec.read_topics(shared("trec-dl-2019-doc", "msmarco-test2019-queries.tsv"))
  assert len(queries) == 200 and not any("\r" in t.title for t in queries.values())
  dev = trec.read_qrels(shared("trec-dl-2019-doc", "qrels.msmarco-doc.dev.txt"))
  assert len(dev) == 5193


def test_cranfield_and_cisi(shared):
  cran = corpus.load_cranfield(os.path.dirname(shared("cranfield", "cran.all.1400")))
  assert (len(cran.corpus), len(cran.topics), len(cran.qrels)) == (1400, 225, 225)
  assert cran.corpus["1"].title.startswith("experimental investigation")
  assert set(cran.topics) == {str(i) for i in range(1, 226)}
  grades = {g for judged in cran.qrels.values() for g in judged.values()}
  assert grades == {0, 1, 2, 3, 4}  # -1 → 0; 1 (complete answer) → 4.
  cisi = corpus.load_cisi(os.path.dirname(shared("cisi", "CISI.ALL")))
  assert (len(cisi.corpus), len(cisi.topics), len(cisi.qrels)) == (1460, 112, 76)
  assert cisi.corpus["2"].title == "Use Made of Technical Libraries"
  assert sum(map(len, cisi.qrels.values())) == 3114


# ------------------------------------------------------- round trips

def test_run_round_trip_keeps_order_and_exact_scores(tmp_path):
  run = {"1": {"a": 0.1 + 0.2, "b": 2.0, "c": 2.0}, "2": {"x": -1e-9}}
  path = str(tmp_path / "r.run")
  trec.write_run(run, path, tag="t")
  lines = open(path).read().splitlines()
  # Ties broken by docid descending, as trec_eval does.
  assert [l.split()[2] for l in lines[:3]] == ["c", "b", "a"]
  assert trec.read_run(path) == run


def test_corpus_jsonl_round_trip(tmp_path):
  docs = [corpus.Document("d1", "T", "héllo\nworld", {"article": 3}),
          corpus.Document("d2", "", "x")]
  path = str(tmp_path / "c.jsonl")
  corpus.write_corpus(docs, path)
  assert list(corpus.read_corpus(path).values()) == docs


def test_topics_tsv_and_sgml(tmp_path):
  sgml = _write(tmp_path, "t.txt", "<top>\n<num> Number: 7\n<title> a b\n"
                "<desc> Description:\nlong\ntext\n<narr> Narrative:\nn\n</top>\n")
  assert trec.read_topics(sgml)["7"] == trec.Topic("7", "a b", "long text", "n")
  tsv = str(tmp_path / "t.tsv")
  trec.write_topics_tsv(trec.read_topics(sgml), tsv, field="desc")
  assert trec.read_topics(tsv)["7"].title == "long text"


def test_crlf_reads_like_lf(tmp_path):
  lf = _write(tmp_path, "lf", "1 0 d 1\n1 0 e 0\n")
  crlf = _write(tmp_path, "crlf", "1 0 d 1\r\n1 0 e 0\r\n")
  assert trec.read_qrels(lf) == trec.read_qrels(crlf)


# ------------------------------------------------------------ bad input

@pytest.mark.parametrize("reader,content,line,fragment", [
    (trec.read_run, "1 Q0 d 1 2.0 t\n1 Q0 e 2\n", 2, "6 columns"),
    (trec.read_run, "1 Q0 d 1 high t\n", 1, "not a number"),
    (trec.read_run, "1 Q0 d 1 nan t\n", 1, "not finite"),
    (trec.read_run, "1 Q0 d 1 2 t\n1 Q0 d 2 1 t\n", 2, "appears twice"),
    (trec.read_run, "1 Q0 d x 2 t\n", 1, "rank"),
    (trec.read_qrels, "1 0 d\n", 1, "4 columns"),
    (trec.read_qrels, "1 0 d yes\n", 1, "not an integer"),
    (trec.read_qrels, "1 0 d 1\n1 0 d 0\n", 2, "conflicting"),
    (trec.read_topics, "1\tok\n2\n", 2, "qid<TAB>"),
    (trec.read_topics, "1\ta\n1\tb\n", 2, "duplicate"),
    (trec.read_topics, "<top>\n<num> Number: 1\n<title> x\n", 1, "</top>"),
    (corpus.read_corpus, '{"id": "a", "text": "x"}\n{"id": "b"}\n', 2, "missing"),
    (corpus.read_corpus, '{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', 2,
     "duplicate"),
    (corpus.read_corpus, '{"id": "a", "text": "x"}\nnot json\n', 2, "invalid JSON"),
    (corpus.read_smart, "junk\n.I 1\n.W\nx\n", 1, "before the first"),
])
def test_bad_input_names_file_and_line(tmp_path, reader, content, line, fragment):
  suffix = ".jsonl" if reader is corpus.read_corpus else ".txt"
  path = _write(tmp_path, "bad" + suffix, content)
  with pytest.raises(InputError) as info:
    reader(path)
  assert info.value.path == path and info.value.line == line
  assert fragment in str(info.value) and str(info.value).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize("reader", [trec.read_run, trec.read_qrels, trec.read_topics,
                                    corpus.read_smart])
def test_empty_and_invalid_utf8_files(tmp_path, reader):
  with pytest.raises(InputError, match="empty"):
    reader(_write(tmp_path, "empty.txt", " \n\n"))
  with pytest.raises(InputError, match="invalid UTF-8") as info:
    reader(_write(tmp_path, "latin1.txt", b"1 0 d 1\n1 0 caf\xe9 1\n"))
  assert info.value.line == 2
  with pytest.raises(InputError, match="not found"):
    reader(str(tmp_path / "missing.txt"))


def test_gzip_files_are_read(tmp_path):
  path = tmp_path / "q.gz"
  path.write_bytes(gzip.compress(b"1 0 d 2\n"))
  assert trec.read_qrels(str(path)) == {"1": {"d": 2}}


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
  target = tmp_path / "out.run"
  target.write_text("old\n")
  with pytest.raises(RuntimeError):
    with files.atomic_write(str(target)) as f:
      f.write("partial")
      raise RuntimeError("boom")
  assert target.read_text() == "old\n"
  assert os.listdir(tmp_path) == ["out.run"]
  with files.atomic_write(str(target)) as f:
    f.write("new\n")
  assert target.read_text() == "new\n" and os.stat(target).st_mode & 0o044
