"""`Reranker`, `best_jax score` and `best_jax rerank`: segments scored as in
training, runs that carry the model's scores, evidence, bad input."""

import argparse
import json
import os
import re

import numpy as np
import pytest

from best_jax import Reranker, cli
from best_jax.data import trec
from best_jax.experiment.inputs import QueryStore
from best_jax.segments.packing import pack_inputs
from best_jax.serve import hf
from best_jax.serve import rerank as rerank_command
from best_jax.serve import score as score_command
from best_jax.serve.arguments import load_reranker
from best_jax.serve.trained import from_workdir
from fake_workdir import write_collection, write_workdir
from fakes import direct_scores

# The Python example of the reference that the README links to.
USAGE = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "docs", "usage.md")


@pytest.fixture(scope="module", autouse=True)
def loaded_once():
  """The commands' `load_reranker`, once per model (each load compiles its
  scorers; a `Reranker` serves any number of calls)."""
  cache = {}

  def load(args):
    key = (args.workdir, args.model)
    if key not in cache:
      cache[key] = load_reranker(args)
    return cache[key]
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(rerank_command, "load_reranker", load)
    patch.setattr(score_command, "load_reranker", load)
    yield cache


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  return write_workdir(str(tmp_path_factory.mktemp("workdir")), "cross")


@pytest.fixture(scope="module")
def exported(workdir, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("export") / "maxp")
  hf.write_export(from_workdir(workdir, "maxp"), out)
  return out


@pytest.fixture(scope="module")
def reranker(exported, loaded_once):
  return rerank_command.load_reranker(argparse.Namespace(
      workdir=None, model=exported, rows_per_call=None))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  return write_collection(str(tmp_path_factory.mktemp("collection")))


def test_segments_are_scored_as_in_training(reranker, files):
  """Every segment's score equals the model on the training packing
  `[CLS] query [SEP] title segment [SEP]` of the segmenter's segments."""
  topics = {q: t.title for q, t in trec.read_topics(files["topics"]).items()}
  first = trec.read_run(files["run"])
  qid = next(iter(topics))
  docids = [d for d, _ in trec.ranked(first[qid])[:4]]
  corpus = {json.loads(line)["id"]: json.loads(line)
            for line in open(files["corpus"])}
  documents = {d: (corpus[d]["title"], corpus[d]["text"]) for d in docids}
  scored = reranker.rerank_run(topics, {qid: docids}, documents)[qid]
  segmenter = reranker.segmenter
  queries = QueryStore.build(segmenter, {qid: topics[qid]})
  batch = segmenter.segment([documents[d] for d in docids])
  ids_q, mask_q = queries.rows([qid])
  rows = pack_inputs(ids_q[:, None], mask_q[:, None], batch.tokens_dsl,
                     batch.mask_dsl, config=segmenter.config,
                     special=segmenter.special)
  expected_ds = direct_scores(reranker.trainer.graphdef, reranker.params,
                              rows)
  assert max(len(scored[d].segment_scores) for d in docids) > 1
  for i, docid in enumerate(docids):
    count = int(batch.num_segments_d[i])
    s = scored[docid]
    np.testing.assert_allclose(s.segment_scores, expected_ds[i, :count],
                               atol=1e-5, rtol=0)
    assert s.score == pytest.approx(max(s.segment_scores))
    assert s.spans == tuple(map(tuple, batch.spans_ds2[i, :count].tolist()))
    assert s.span == s.spans[int(np.argmax(s.segment_scores))]


def test_score_command_prints_the_pair_score(exported, reranker, capsys):
  text = "The apple river flows past the stone."
  assert cli.main(["score", "--model", exported, "--query", "apple river",
                   "--text", text]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 1
  # The whole pair, packed by the tokenizer: one row, scored directly.
  row = reranker.tokenizer("apple river", text, return_tensors="np")
  expected = direct_scores(reranker.trainer.graphdef, reranker.params,
                           {k: np.asarray(v) for k, v in row.items()})
  assert float(lines[0]) == pytest.approx(float(expected[0]), abs=1e-5)


def test_rerank_command_run_evidence_and_the_rest(workdir, exported, files,
                                                  tmp_path, capsys):
  topics = trec.read_topics(files["topics"])
  first = trec.read_run(files["run"])
  out, rest, evidence = (str(tmp_path / n) for n in ("top.run", "all.run",
                                                     "evidence.jsonl"))
  common = ["--run", files["run"], "--corpus", files["corpus"], "--topics",
            files["topics"], "--depth", "5"]
  assert cli.main(["rerank", "--model", exported, "--out", out,
                   "--evidence", evidence] + common) == 0
  assert cli.main(["rerank", "--workdir", workdir, "--model", "maxp",
                   "--out", rest, "--keep-rest", "--queries-per-call", "3"]
                  + common) == 0
  capsys.readouterr()
  top, full = trec.read_run(out), trec.read_run(rest)
  lines = [line.split() for line in open(out)]
  assert {l[0] for l in lines} == set(topics)
  for qid in topics:
    assert sum(1 for l in lines if l[0] == qid) == 5
    reranked = [d for d, _ in trec.ranked(first[qid])[:5]]
    assert set(top[qid]) == set(reranked)
    # --keep-rest: the same scores on top (also scored 3 queries at a
    # time), then the first stage's order.
    order = [d for d, _ in trec.ranked(full[qid])]
    assert order[:5] == [d for d, _ in trec.ranked(top[qid])]
    assert order[5:] == [d for d, _ in trec.ranked(first[qid])[5:]]
    for d in reranked:
      assert full[qid][d] == pytest.approx(top[qid][d], abs=1e-6)
  assert {l[5] for l in lines} == {"maxp"}
  records = [json.loads(line) for line in open(evidence)]
  assert len(records) == 5 * len(topics)
  for r in records:
    assert r["score"] == pytest.approx(top[r["qid"]][r["docid"]])
    assert r["segment_score"] == max(r["scores"])
    assert r["span"] == r["spans"][r["segment"]]


def test_interpolation_and_aggregation(exported, files, tmp_path, capsys):
  first = trec.read_run(files["run"])
  out = str(tmp_path / "fused.run")
  common = ["--model", exported, "--run", files["run"], "--corpus",
            files["corpus"], "--topics", files["topics"], "--depth", "4"]
  assert cli.main(["rerank", "--out", out, "--interpolate", "1.0"]
                  + common) == 0
  fused = trec.read_run(out)
  for qid, scores in fused.items():  # α = 1: the first stage's order
    assert ([d for d, _ in trec.ranked(scores)]
            == [d for d, _ in trec.ranked(first[qid])[:4]])
  evidence = str(tmp_path / "first.jsonl")
  assert cli.main(["rerank", "--out", out, "--aggregation", "first",
                   "--evidence", evidence] + common) == 0
  capsys.readouterr()
  for line in open(evidence):  # FirstP scores the first segment only
    record = json.loads(line)
    assert record["segment"] == 0 and len(record["scores"]) == 1
    assert record["score"] == record["scores"][0]


def test_bad_input_is_one_line_exit_2_and_no_output(exported, files,
                                                    tmp_path, capsys):
  out = tmp_path / "out.run"
  common = ["rerank", "--model", exported, "--topics", files["topics"],
            "--out", str(out), "--corpus", files["corpus"]]
  run_lines = open(files["run"]).read().splitlines()
  # A ranked document the corpus lacks: the run's file and line.
  broken = tmp_path / "missing.run"
  qid = run_lines[0].split()[0]
  run_lines.insert(2, f"{qid} Q0 NOPE 0 99.0 x")
  broken.write_text("\n".join(run_lines) + "\n")
  assert cli.main(common + ["--run", str(broken)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1
  assert f"{broken}:3:" in err[0] and "'NOPE'" in err[0]
  bad = tmp_path / "bad.run"
  bad.write_text("q1 Q0 d1 1 high run\n")
  assert cli.main(common + ["--run", str(bad)]) == 2
  assert f"{bad}:1:" in capsys.readouterr().err
  assert cli.main(common + ["--run", files["run"], "--interpolate",
                            "1.5"]) == 2
  assert cli.main(common[:-2] + ["--run", files["run"], "--corpus",
                                 str(tmp_path / "none.jsonl")]) == 2
  assert "none.jsonl" in capsys.readouterr().err
  assert cli.main(["rerank", "--model", str(tmp_path), "--run", files["run"],
                   "--topics", files["topics"], "--corpus", files["corpus"],
                   "--out", str(out)]) == 2
  assert "best_jax.json" in capsys.readouterr().err
  assert not out.exists()


def test_bi_encoder_reranks_with_embeddings(tmp_path_factory, files):
  root = write_workdir(str(tmp_path_factory.mktemp("bi")), "bi")
  reranker = Reranker.load(root, model="maxp")
  text = "Apple river stone. Cloud music garden. " * 8
  hits = reranker.rerank("apple river", [text, ("Title", "Zebra pirate.")])
  assert sorted(h.index for h in hits) == [0, 1]
  assert [h.score for h in hits] == sorted((h.score for h in hits),
                                           reverse=True)
  long_hit = next(h for h in hits if h.index == 0)
  assert len(long_hit.segment_scores) > 1
  start, end = long_hit.span
  assert 0 <= start < end <= len(text)
  assert np.isfinite(reranker.score("apple river", text))
  # The same docids name other texts in the next call: no stale embedding.
  swapped = reranker.rerank("apple river", [("Title", "Zebra pirate."), text])
  assert {h.index: h.score for h in swapped} == pytest.approx(
      {1 - h.index: h.score for h in hits})

  # Query groups share segmented and embedded documents within one call:
  # each document is embedded once, and the scores do not depend on the
  # grouping.
  topics = {q: t.title for q, t in trec.read_topics(files["topics"]).items()}
  first = trec.read_run(files["run"])
  corpus = {json.loads(line)["id"]: json.loads(line)
            for line in open(files["corpus"])}
  candidates = {q: [d for d, _ in trec.ranked(first[q])[:3]] for q in topics}
  documents = {d: (corpus[d]["title"], corpus[d]["text"])
               for ds in candidates.values() for d in ds}
  assert len(documents) < sum(map(len, candidates.values()))  # shared docs
  embedded = []
  original = reranker._segment_scorer._embed  # pylint: disable=protected-access

  def counting(params, rows, count, desc):
    if desc.endswith("(segments)"):
      embedded.append(count)
    return original(params, rows, count, desc)
  reranker._segment_scorer._embed = counting  # pylint: disable=protected-access
  one_by_one = reranker.rerank_run(topics, candidates, documents,
                                   queries_per_call=1)
  by_group = sum(embedded)
  embedded.clear()
  all_at_once = reranker.rerank_run(topics, candidates, documents)
  assert by_group == sum(embedded) > 0  # each document embedded once
  for qid, scored in all_at_once.items():
    for docid, hit in scored.items():
      assert one_by_one[qid][docid].segment_scores == pytest.approx(
          hit.segment_scores, abs=1e-5)


def test_readme_example_runs(exported, reranker, capsys, monkeypatch):
  """docs/usage.md's Python example, on an exported tiny model (loaded once
  for the module: `Reranker.load` hands back that reranker)."""
  section = open(USAGE).read().split("## Using a trained model")[1]
  code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
  assert '"exported/maxp"' in code
  monkeypatch.setattr(Reranker, "load", lambda path: (
      reranker if path == exported else pytest.fail(path)))
  code = code.replace('"exported/maxp"', repr(exported))
  exec(compile(code, "docs/usage.md", "exec"), {})  # pylint: disable=exec-used
  out = capsys.readouterr().out.splitlines()
  assert len(out) >= 3
  float(out[0])  # the pair's score
