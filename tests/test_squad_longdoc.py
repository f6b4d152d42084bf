"""squad_longdoc: reading, chunking, splits, gold spans, prepare and TFDS."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from best_jax import cli
from best_jax.data import prepare, trec
from best_jax.data import squad_longdoc as sl
from best_jax.errors import InputError

FILLER = ("the committee met in the city hall to discuss the budget and the "
          "river bridge while citizens waited outside for news").split()


def _squad(num_articles=6, paragraphs=7, questions=2, seed=0) -> dict:
  """A small file in the official train-v1.1.json layout with findable
  questions: each paragraph holds a unique word its questions ask about."""
  rng = np.random.default_rng(seed)
  data = []
  for a in range(num_articles):
    raw = []
    for p in range(paragraphs):
      words = rng.choice(FILLER, size=int(rng.integers(20, 260))).tolist()
      context = f"Marker key{a}x{p} appears here. " + " ".join(words) + "."
      qas = [{"id": f"{a:02d}{p:02d}{q}", "question": f"What is key{a}x{p}?",
              "answers": [{"text": "Marker", "answer_start": 0}]}
             for q in range(questions)]
      raw.append({"context": context, "qas": qas})
    data.append({"title": f"Beyonc%C3%A9_{a}", "paragraphs": raw})
  return {"version": "1.1", "data": data}


def _write(tmp_path, obj, name="train-v1.1.json") -> str:
  path = tmp_path / name
  path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
  return str(path)


def _words(texts):
  return [len(t.split()) for t in texts]


# ------------------------------------------------------------------ reading

def test_read_squad_keeps_order_titles_and_questions(tmp_path):
  obj = _squad(num_articles=3, paragraphs=2, questions=1)
  obj["data"][1]["paragraphs"][0]["qas"].append(
      {"id": "blank", "question": "  \n ", "answers": []})
  obj["data"][0]["paragraphs"][1]["qas"][0]["question"] = " What\tis  it? "
  articles, skipped = sl.read_squad(_write(tmp_path, obj))
  assert skipped == 1
  assert [a.title for a in articles] == ["Beyoncé 0", "Beyoncé 1",
                                         "Beyoncé 2"]
  assert articles[0].paragraphs[1].questions[0].text == "What is it?"
  assert [q.qid for q in articles[1].paragraphs[0].questions] == ["01000"]
  assert articles[0].paragraphs[0].questions[0].answers == ((0, "Marker"),)


def test_answers_become_distinct_document_offsets(tmp_path):
  context = "Alpha beta. The river Nile flows north."

  def article(a):
    return {"title": f"T{a}", "paragraphs": [
        {"context": "First paragraph here.", "qas": []},
        {"context": context, "qas": [
            {"id": f"q1-{a}", "question": "Which river?", "answers": [
                {"text": "Nile", "answer_start": 22},
                {"text": "The river Nile", "answer_start": 12},
                {"text": "Nile", "answer_start": 22}]},
            {"id": f"q2-{a}", "question": "No answers?"}]}]}
  obj = {"data": [article(a) for a in range(3)]}
  path = _write(tmp_path, obj)
  articles, _ = sl.read_squad(path)
  # Duplicates of one annotator's span are kept once, in annotator order.
  assert articles[0].paragraphs[1].questions[0].answers == (
      (22, "Nile"), (12, "The river Nile"))
  assert articles[0].paragraphs[1].questions[1].answers == ()
  data = sl.load(path, sl.Options(median_tokens=10_000), count_tokens=_words)
  queries = {q.qid: q for qs in data.queries.values() for q in qs}
  q1 = queries["q1-0"]
  doc = {d.id: d for d in data.documents}[q1.docid]
  assert [doc.text[a:b] for a, b in q1.answers] == ["Nile", "The river Nile"]
  assert all(q1.start <= a < b <= q1.end for a, b in q1.answers)
  assert q1.start == len("First paragraph here.") + 2


@pytest.mark.parametrize("content, message", [
    ('{"data": [', "invalid JSON"),
    ('[1, 2]', 'expected {"data"'),
    ('{"data": []}', "no articles"),
    ('{"data": [{"title": "T", "paragraphs": []}]}', "without paragraphs"),
    ('{"data": [{"paragraphs": [{"context": "c", "qas": []}]}]}',
     r"data\[0\]: missing or non-string 'title'"),
    ('{"data": [{"title": "T", "paragraphs": [{"context": "c"}]}]}',
     r"data\[0\].paragraphs\[0\]: missing or non-list 'qas'"),
    ('{"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": '
     '[{"question": "q"}]}]}]}', r"qas\[0\]: missing or non-string 'id'"),
    ('{"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": '
     '[{"id": "x", "question": "q"}, {"id": "x", "question": "r"}]}]}]}',
     "duplicate question id 'x'"),
    ('{"data": [{"title": "T", "paragraphs": [{"context": "the cat", "qas": '
     '[{"id": "x", "question": "q", "answers": [{"text": "cat", '
     '"answer_start": 3}]}]}]}]}',
     r"qas\[0\].answers\[0\]: the context at answer_start 3 is not"),
    ('{"data": [{"title": "T", "paragraphs": [{"context": "the cat", "qas": '
     '[{"id": "x", "question": "q", "answers": [{"text": "cat"}]}]}]}]}',
     r"answers\[0\]: missing or non-integer 'answer_start'"),
    ('{"data": [{"title": "T", "paragraphs": [{"context": "the cat", "qas": '
     '[{"id": "x", "question": "q", "answers": {"text": "cat"}}]}]}]}',
     "missing or non-list 'answers'"),
])
def test_read_squad_rejects_bad_files(tmp_path, content, message):
  path = _write(tmp_path, content)
  with pytest.raises(InputError, match=message) as e:
    sl.read_squad(path)
  assert e.value.path == path


# ----------------------------------------------------------------- chunking

def test_chunk_lengths_close_a_chunk_when_it_reaches_its_target():
  targets = iter([250, 100, 1000])
  # 100+200 >= 250 -> 2 paragraphs; 300 >= 100 -> 1; 50 < 1000 -> tail of 1.
  assert sl.chunk_lengths([100, 200, 300, 50], lambda: next(targets)) == [
      2, 1, 1]
  assert sl.chunk_lengths([5, 5], lambda: 1) == [1, 1]
  assert sl.chunk_lengths([5, 5], lambda: 100) == [2]


def test_split_articles_is_seeded_disjoint_and_never_empty():
  splits = sl.split_articles(48, sl.Options(seed=0))
  # round(0.2 * 48) = 10 articles for dev and test, 28 for train.
  assert {s: len(a) for s, a in splits.items()} == {"train": 28, "dev": 10,
                                                    "test": 10}
  assert sorted(sum(splits.values(), ())) == list(range(48))
  assert splits == sl.split_articles(48, sl.Options(seed=0))
  assert splits != sl.split_articles(48, sl.Options(seed=1))
  assert {s: len(a) for s, a in sl.split_articles(
      3, sl.Options()).items()} == {"train": 1, "dev": 1, "test": 1}
  with pytest.raises(InputError, match="at least 3 articles"):
    sl.split_articles(2, sl.Options())
  with pytest.raises(InputError, match="3 positive numbers"):
    sl.split_articles(10, sl.Options(fractions=(1.0, 0.0, 1.0)))


def test_documents_gold_spans_and_qrels_are_consistent(tmp_path):
  path = _write(tmp_path, _squad(num_articles=9, paragraphs=12))
  articles, _ = sl.read_squad(path)
  options = sl.Options(seed=3, median_tokens=300, sigma=0.8)
  data = sl.load(path, options, count_tokens=_words)
  by_id = {d.id: d for d in data.documents}
  assert len(by_id) == len(data.documents)
  # Every paragraph is in exactly one document, in order, whole.
  for article in articles:
    docs = [d for d in data.documents if d.article == article.index]
    assert [d.id for d in docs] == [f"{article.index:03d}-{c:02d}"
                                    for c in range(len(docs))]
    assert "\n\n".join(d.text for d in docs) == "\n\n".join(
        p.text for p in article.paragraphs)
    assert all(d.title == article.title for d in docs)
    for d in docs:
      assert d.text == "\n\n".join(d.text[s:e] for s, e in d.paragraph_spans)
      assert d.tokens == sum(_words(d.text[s:e] for s, e in d.paragraph_spans))
  # Each question: relevant doc holds its paragraph, span is that paragraph.
  contexts = {q.qid: p.text for a in articles for p in a.paragraphs
              for q in p.questions}
  seen = []
  for split in sl.SPLITS:
    assert data.qrels(split) == {q.qid: {q.docid: 1}
                                 for q in data.queries[split]}
    for q in data.queries[split]:
      doc = by_id[q.docid]
      assert doc.text[q.start:q.end] == contexts[q.qid]
      assert (q.start, q.end) in doc.paragraph_spans
      assert data.split_of()[doc.article] == split
      seen.append(q.qid)
  assert sorted(seen) == sorted(contexts)
  # Article-disjoint splits covering every article.
  members = [set(a) for a in data.articles.values()]
  assert all(m for m in members) and set.union(*members) == set(range(9))
  assert sum(len(m) for m in members) == 9


def test_same_seed_same_documents_other_seed_other_documents(tmp_path):
  path = _write(tmp_path, _squad(num_articles=5, paragraphs=20))
  a = sl.load(path, sl.Options(seed=1, median_tokens=300), _words)
  b = sl.load(path, sl.Options(seed=1, median_tokens=300), _words)
  c = sl.load(path, sl.Options(seed=2, median_tokens=300), _words)
  assert a == b
  assert [d.id for d in a.documents] != [d.id for d in c.documents]


def test_dev_set_lengths_with_the_default_seed(shared):
  """Measured on dev-v1.1.json, seed 0: 227 documents, median 981 and p90
  3128.6 MiniLM tokens; 6,538 / 1,800 / 2,232 queries."""
  data = sl.load(shared("squad", "dev-v1.1.json"))
  tokens = np.array([d.tokens for d in data.documents])
  assert len(tokens) == 227
  assert 900 <= np.median(tokens) <= 1100
  assert np.percentile(tokens, 90) >= 2500
  assert {s: len(q) for s, q in data.queries.items()} == {
      "train": 6538, "dev": 1800, "test": 2232}
  assert sum(len(q) for q in data.queries.values()) == 10570
  # Token counts of paragraphs add up to the count of the joined text.
  count = sl.minilm_token_counter()
  sample = data.documents[::25]
  assert count([d.text for d in sample]) == [d.tokens for d in sample]


def test_exported_answer_offsets_give_squads_answer_texts(shared, tmp_path):
  """On dev-v1.1.json: in gold.*.jsonl every question's answers, read at the
  exported document offsets, are SQuAD's answer texts (distinct, in annotator
  order) and lie inside the gold paragraph; old fields are unchanged."""
  squad_json = shared("squad", "dev-v1.1.json")
  out = tmp_path / "out"
  prepare.prepare_squad_longdoc(squad_json, str(out), tfds=False,
                                segment_stats=False)
  with open(squad_json, encoding="utf-8") as f:
    expected = {}
    for article in json.load(f)["data"]:
      for paragraph in article["paragraphs"]:
        for qa in paragraph["qas"]:
          texts = []
          for answer in qa["answers"]:
            key = (answer["answer_start"], answer["text"])
            if key not in texts:
              texts.append(key)
          expected[qa["id"]] = ([t for _, t in texts], paragraph["context"])
  corpus = {json.loads(line)["id"]: json.loads(line)["text"] for line in
            (out / "corpus.jsonl").read_text().splitlines()}
  seen = 0
  for split in sl.SPLITS:
    for line in (out / f"gold.{split}.jsonl").read_text().splitlines():
      g = json.loads(line)
      assert list(g) == ["qid", "docid", "start", "end", "answers"]
      text = corpus[g["docid"]]
      answers, context = expected[g["qid"]]
      assert text[g["start"]:g["end"]] == context
      assert [text[a:b] for a, b in g["answers"]] == answers
      assert all(g["start"] <= a < b <= g["end"] for a, b in g["answers"])
      seen += 1
  assert seen == len(expected) == 10570


# ------------------------------------------------------------------ prepare

def test_find_squad_json_says_how_to_get_the_file(tmp_path, monkeypatch):
  monkeypatch.delenv(prepare.ENV_VAR, raising=False)
  monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "tfds"))
  with pytest.raises(InputError) as e:
    prepare.find_squad_json(None)
  assert prepare.SQUAD_DEV_URL in str(e.value)
  assert str(tmp_path / "tfds" / "downloads" / "manual") in str(e.value)
  manual = tmp_path / "tfds" / "downloads" / "manual" / "dev-v1.1.json"
  manual.parent.mkdir(parents=True)
  manual.write_text("{}")
  assert prepare.find_squad_json(None) == str(manual)
  monkeypatch.setenv(prepare.ENV_VAR, str(tmp_path / "nope.json"))
  with pytest.raises(InputError, match="BEST_JAX_SQUAD_JSON"):
    prepare.find_squad_json(None)
  assert prepare.find_squad_json("given.json") == "given.json"


def _files(root):
  out = {}
  for base, _, names in os.walk(root):
    for name in names:
      path = os.path.join(base, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, root)] = f.read()
  return out


def test_prepare_is_byte_identical_and_readable_without_tensorflow(tmp_path):
  import tensorflow_datasets as tfds

  from best_jax.data.squad_longdoc_tfds import SquadLongdocBuilder
  squad = _write(tmp_path, _squad(num_articles=6, paragraphs=7))
  first, second = tmp_path / "a", tmp_path / "b"
  assert cli.main(["prepare", "squad_longdoc", "--squad-json", squad,
                   "--out", str(first), "--seed", "5",
                   "--no-segment-stats"]) == 0
  # A second process: TFDS's proto maps are ordered by a per-process seed.
  subprocess.run([sys.executable, "-m", "best_jax", "prepare",
                  "squad_longdoc", "--squad-json", squad, "--out",
                  str(second), "--seed", "5", "--no-segment-stats"],
                 check=True, capture_output=True)
  a, b = _files(first), _files(second)
  expected = {f"{kind}.{split}.{ext}" for split in sl.SPLITS
              for kind, ext in (("topics", "tsv"), ("qrels", "txt"),
                                ("bm25", "run"), ("gold", "jsonl"),
                                ("clusters", "tsv"))}
  assert expected | {"corpus.jsonl", "stats.json"} <= set(a)
  assert any(name.endswith("array_record-00000-of-00001") for name in a)
  assert sorted(a) == sorted(b)
  for name in a:
    assert a[name] == b[name], name

  stats = json.loads(a["stats.json"])
  assert stats["documents"]["count"] == len(a["corpus.jsonl"].splitlines())
  assert stats["questions"] == 6 * 7 * 2
  assert stats["options"]["seed"] == 5

  # TFDS queries = exported topics, gold spans and BM25 runs, in file order.
  tfds_dir = str(first / "tfds")
  corpus = {json.loads(line)["id"]: json.loads(line)
            for line in a["corpus.jsonl"].decode().splitlines()}
  for split in sl.SPLITS:
    source = tfds.data_source("squad_longdoc/queries", split=split,
                              data_dir=tfds_dir, download=False)
    topics = trec.read_topics(first / f"topics.{split}.tsv")
    gold = [json.loads(line) for line in
            (first / f"gold.{split}.jsonl").read_text().splitlines()]
    run = trec.read_run(first / f"bm25.{split}.run")
    assert len(source) == len(topics) == len(gold)
    for example, (qid, topic), g in zip(source, topics.items(), gold):
      assert example["qid"].decode() == qid == g["qid"]
      assert example["question"].decode() == topic.title
      assert example["docid"].decode() == g["docid"]
      assert (example["gold_start"], example["gold_end"]) == (g["start"],
                                                              g["end"])
      assert [list(a) for a in zip(example["answer_starts"],
                                   example["answer_ends"])] == g["answers"]
      ranking = [d for d, _ in trec.ranked(run[qid])]
      assert [d.decode() for d in example["candidates"]] == ranking
      np.testing.assert_allclose(example["scores"],
                                 [run[qid][d] for d in ranking], rtol=1e-6)
      # Each question asks for its paragraph's unique word: BM25 finds it.
      assert ranking[0] == g["docid"]
      text = corpus[g["docid"]]["text"]
      assert text[g["start"]:g["end"]].startswith(
          "Marker " + topic.title.split()[-1].rstrip("?"))
      assert [text[a:b] for a, b in g["answers"]] == ["Marker"]
    # Each question's cluster is its document's article.
    articles = trec.read_clusters(first / f"clusters.{split}.tsv")
    assert list(articles) == [g["qid"] for g in gold]
    assert all(int(articles[g["qid"]]) == corpus[g["docid"]]["article"]
               for g in gold)
  docs = SquadLongdocBuilder(data_dir=tfds_dir, config="corpus"
                             ).as_data_source(split="corpus")
  assert [d["id"].decode() for d in docs] == list(corpus)
  assert all(d["text"].decode() == corpus[d["id"].decode()]["text"]
             and d["article"] == corpus[d["id"].decode()]["article"]
             for d in docs)


def test_bm25_command_reproduces_the_exported_runs(tmp_path):
  squad = _write(tmp_path, _squad(num_articles=4, paragraphs=5))
  out = tmp_path / "out"
  prepare.prepare_squad_longdoc(squad, str(out), sl.Options(seed=2),
                                tfds=False, segment_stats=False)
  assert not (out / "tfds").exists()
  run = tmp_path / "again.run"
  assert cli.main(["bm25", "--corpus", str(out / "corpus.jsonl"), "--topics",
                   str(out / "topics.test.tsv"), "--out", str(run)]) == 0
  assert run.read_bytes() == (out / "bm25.test.run").read_bytes()


def test_prepare_reports_missing_file(tmp_path, capsys):
  assert cli.main(["prepare", "squad_longdoc", "--squad-json",
                   str(tmp_path / "missing.json"), "--out",
                   str(tmp_path / "out")]) == 2
  assert "file not found" in capsys.readouterr().err
  assert not (tmp_path / "out").exists()


def test_prepare_again_with_another_seed_replaces_the_tfds_dataset(tmp_path):
  from best_jax.data.squad_longdoc_tfds import SquadLongdocBuilder
  squad = _write(tmp_path, _squad(num_articles=5, paragraphs=6))
  out = str(tmp_path / "out")
  for seed in (1, 2):
    prepare.prepare_squad_longdoc(squad, out, sl.Options(seed=seed),
                                  segment_stats=False)
    builder = SquadLongdocBuilder(data_dir=os.path.join(out, "tfds"),
                                  config="queries")
    assert builder.info.metadata["seed"] == seed
    expected = [line.split("\t")[0] for line in
                open(os.path.join(out, "topics.train.tsv")).read().splitlines()]
    train = builder.as_data_source(split="train")
    assert [e["qid"].decode() for e in train] == expected
