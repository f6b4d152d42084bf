"""The `best_jax truncate` command and the experiment runner on tiny files."""

import ast
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from best_jax import cli
from best_jax.truncate import features

NUM_QUERIES, DEPTH = 10, 8


@pytest.fixture
def trec_files(tmp_path):
  rng = np.random.default_rng(1)
  run_lines, qrels_lines, labels = [], [], {}
  for q in range(NUM_QUERIES):
    qid = str(301 + q)
    labels[qid] = list(rng.random(DEPTH + 2) < np.linspace(0.9, 0.1, DEPTH + 2))
    for n in range(DEPTH + 2):  # two more than --depth: cut away
      run_lines.append(f"{qid} Q0 d{q}_{n} {n + 1} {20.0 - n} tag")
      if labels[qid][n]:
        qrels_lines.append(f"{qid} 0 d{q}_{n} {1 + n % 2}")
      elif n % 3 == 0:
        qrels_lines.append(f"{qid} 0 d{q}_{n} 0")
  run = tmp_path / "run.txt"
  run.write_text("\n".join(run_lines) + "\n")
  qrels = tmp_path / "qrels.txt"
  qrels.write_text("\n".join(qrels_lines) + "\n")
  return str(run), str(qrels), {q: v[:DEPTH] for q, v in labels.items()}


def _f1(labels, k):
  hits, total = sum(labels[:k]), sum(labels)
  return 0.0 if hits == 0 else 2 * hits / (k + total)


def _json(capsys, argv):
  assert cli.main(argv) == 0
  return json.loads(capsys.readouterr().out)


def test_oracle_and_fixed_json(trec_files, capsys):
  run, qrels, labels = trec_files
  base = ["truncate", "--run", run, "--qrels", qrels, "--depth", str(DEPTH),
          "--json"]
  out = _json(capsys, base + ["--method", "oracle"])
  best = {q: max(_f1(y, k) for k in range(1, DEPTH + 1)) for q, y in labels.items()}
  assert out["queries"] == NUM_QUERIES
  assert out["mean"] == pytest.approx(np.mean(list(best.values())), rel=1e-6)
  for q, k in out["cutoffs"].items():
    assert _f1(labels[q], k) == pytest.approx(best[q], rel=1e-6)
  out = _json(capsys, base + ["--method", "fixed", "--k", "3"])
  assert set(out["cutoffs"].values()) == {3}
  assert out["mean"] == pytest.approx(
      np.mean([_f1(y, 3) for y in labels.values()]), rel=1e-6)


def test_greedy_is_cross_validated(trec_files, capsys, tmp_path):
  run, qrels, labels = trec_files
  out = _json(capsys, ["truncate", "--run", run, "--qrels", qrels, "--depth",
                       str(DEPTH), "--method", "greedy", "--cv", "2", "--json",
                       "--output", str(tmp_path / "cut.run")])
  assert len(out["k_per_fold"]) == 2
  means = [np.mean([_f1(y, k) for y in labels.values()])
           for k in range(1, DEPTH + 1)]
  assert out["k"] == int(np.argmax(means)) + 1
  lines = (tmp_path / "cut.run").read_text().splitlines()
  assert len(lines) == sum(out["cutoffs"].values())


def test_bad_input_is_one_line_error(trec_files, capsys):
  run, qrels, _ = trec_files
  assert cli.main(["truncate", "--run", run, "--qrels", qrels,
                   "--method", "fixed"]) == 2
  assert "--k" in capsys.readouterr().err
  assert cli.main(["truncate", "--run", run + "x", "--qrels", qrels,
                   "--method", "oracle"]) == 2
  assert "file not found" in capsys.readouterr().err


def test_config_goes_through_the_project_loader(trec_files, capsys,
                                                tmp_path):
  run, qrels, _ = trec_files
  config = _tiny_config(tmp_path, run, qrels)
  assert cli.main(["truncate", "--config", config, "--workdir",
                   str(tmp_path / "w"), "--config.train.no_such=1"]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and "no_such" in err
  assert not (tmp_path / "w").exists()


def test_truncate_modules_import_at_the_top_without_cycles():
  root = os.path.join(os.path.dirname(__file__), "..", "best_jax", "truncate")
  for name in sorted(os.listdir(root)):
    if not name.endswith(".py"):
      continue
    tree = ast.parse(open(os.path.join(root, name)).read())
    for node in ast.walk(tree):
      if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        inner = [n for n in ast.walk(node)
                 if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not inner, f"{name}: import inside {node.name}"
  code = ("import sys, best_jax.truncate.report; "
          "print('best_jax.truncate.experiment' in sys.modules)")
  repo = os.path.abspath(os.path.join(root, "..", ".."))
  out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, check=True,
                       env={**os.environ, "PYTHONPATH": repo})
  assert out.stdout.strip() == "False"  # report does not import experiment


def _tiny_config(tmp_path, run, qrels):
  path = tmp_path / "tiny.py"
  path.write_text(textwrap.dedent(f"""
      import ml_collections
      from best_jax.truncate import train

      def get_config(arg=""):
        c = ml_collections.ConfigDict()
        c.run, c.qrels, c.folds, c.clusters = {run!r}, {qrels!r}, "", ""
        c.depth, c.seeds, c.test_fraction = {DEPTH}, (0, 1), 0.3
        c.protocols, c.sigmas, c.recall_rule = ("random",), (0.0, 0.5), "lower_edge"
        c.bicut_alpha = {{"f1": 0.3, "dcg": 0.5}}
        c.schedule = [("random", "f1", "baselines"), ("random", "dcg", "baselines"),
                      ("random", "f1", "attncut"), ("random", "f1", "recall", 1)]
        t = train.default_config()
        t.lstm_hidden, t.heads, t.epochs, t.batch_size = 4, 2, 1, 4
        c.train = t
        return c
      """))
  return str(path)


@pytest.mark.slow
def test_experiment_and_learned_method(trec_files, capsys, tmp_path):
  run, qrels, _ = trec_files
  config = _tiny_config(tmp_path, run, qrels)
  workdir = tmp_path / "work"
  clusters = tmp_path / "clusters.tsv"  # two "articles" of five queries
  clusters.write_text("".join(f"{301 + q}\t{q % 2}\n"
                              for q in range(NUM_QUERIES)))
  assert cli.main(["truncate", "--config", config, "--workdir",
                   str(workdir), "--config.train.epochs=2",
                   f"--config.clusters={clusters}"]) == 0
  report = json.loads((workdir / "truncation_report.json").read_text())
  assert report["comparisons"]["f1/attncut/greedy"]["clusters"] == 2
  assert report["selection"]["f1/attncut"]["epochs"] == [2, 2]  # override
  table3 = report["table3"]
  assert table3["attncut"]["f1"]["splits"] == 2
  assert "0.5/attncut" in report["table4"]
  assert os.path.exists(workdir / "truncation_cutoffs.png")
  assert "AttnCut" in (workdir / "truncation_report.md").read_text()
  capsys.readouterr()
  out = _json(capsys, ["truncate", "--run", run, "--qrels", qrels, "--depth",
                       str(DEPTH), "--method", "attncut", "--config", config,
                       "--cv", "2", "--json", "--save-model",
                       str(tmp_path / "model")])
  assert all(1 <= k <= DEPTH for k in out["cutoffs"].values())
  again = _json(capsys, ["truncate", "--run", run, "--qrels", qrels, "--depth",
                         str(DEPTH), "--method", "attncut", "--model",
                         str(tmp_path / "model"), "--json"])
  assert again["queries"] == NUM_QUERIES


def _corpus(tmp_path, lines):
  path = tmp_path / "corpus.jsonl"
  path.write_text("\n".join(lines) + "\n")
  return str(path)


def _documents():
  words = ["apple", "river", "stone", "cloud", "night", "green"]
  return [json.dumps({"id": f"d{q}_{n}", "title": "t",
                      "text": " ".join(words[:1 + (q + n) % 6] * (n + 1))})
          for q in range(NUM_QUERIES) for n in range(DEPTH + 2)]


@pytest.mark.slow
def test_corpus_adds_the_text_features(trec_files, capsys, tmp_path):
  run, qrels, _ = trec_files
  config = _tiny_config(tmp_path, run, qrels)
  corpus = _corpus(tmp_path, _documents())
  out = _json(capsys, ["truncate", "--run", run, "--qrels", qrels, "--depth",
                       str(DEPTH), "--method", "attncut", "--config", config,
                       "--cv", "2", "--corpus", corpus, "--json",
                       "--save-model", str(tmp_path / "model")])
  assert all(1 <= k <= DEPTH for k in out["cutoffs"].values())
  header = json.loads((tmp_path / "model" / "truncation_model.json"
                       ).read_text())
  assert header["in_features"] == (len(features.SCORE_FEATURES) +
                                   len(features.TEXT_FEATURES))


@pytest.mark.parametrize("broken,where", [
    (2, "corpus.jsonl:3:"),   # invalid JSON on line 3
    (None, "run.txt:11:")])   # d1_0 (run line 11) missing from the corpus
def test_bad_corpus_is_one_line_error_and_writes_nothing(
    trec_files, capsys, tmp_path, broken, where):
  run, qrels, _ = trec_files
  documents = _documents()
  if broken is None:
    documents = [d for d in documents if '"d1_0"' not in d]
  else:
    documents[broken] = "{not json"
  corpus = _corpus(tmp_path, documents)
  output, model = tmp_path / "cut.run", tmp_path / "model"
  assert cli.main(["truncate", "--run", run, "--qrels", qrels, "--depth",
                   str(DEPTH), "--method", "attncut", "--corpus", corpus,
                   "--output", str(output), "--save-model", str(model)]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and where in err
  assert not output.exists() and not model.exists()


@pytest.mark.parametrize("text,where", [
    ("301\ta\n302 b\n", ":2: expected 'qid<TAB>cluster'"),
    ("301\ta\n301\tb\n", ":2: query '301' is in two clusters"),
    # A map of other queries would test each query alone.
    ("".join(f"{301 + q}\ta\n" for q in range(NUM_QUERIES - 1)),
     f": no cluster for query '{300 + NUM_QUERIES}' (and 0 more)")])
def test_bad_cluster_file_stops_before_any_work(trec_files, capsys, tmp_path,
                                                text, where):
  run, qrels, _ = trec_files
  config = _tiny_config(tmp_path, run, qrels)
  clusters = tmp_path / "clusters.tsv"
  clusters.write_text(text)
  workdir = tmp_path / "work"
  assert cli.main(["truncate", "--config", config, "--workdir", str(workdir),
                   f"--config.clusters={clusters}"]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and f"{clusters}{where}" in err, err
  assert not (workdir / "results").exists()


def _results(workdir, times=False):
  """Every split's results, by default without the wall-clock training times."""
  root = workdir / "results" / "random"
  out = {}
  for name in sorted(os.listdir(root)):
    result = json.loads((root / name).read_text())
    if not times:
      result.pop("train_seconds")
    out[name] = result
  return out


@pytest.mark.slow
def test_a_resumed_experiment_equals_an_uninterrupted_one(trec_files,
                                                          tmp_path):
  """The first invocation stops after AttnCut on F1; rerunning the full
  schedule adds the rest without redoing AttnCut (its recorded training time
  is kept) and gives the one-shot run's results exactly."""
  run, qrels, _ = trec_files
  config = _tiny_config(tmp_path, run, qrels)
  schedule = ('--config.schedule=(("random","f1","baselines"),'
              '("random","f1","attncut"),("random","f1","bicut"),'
              '("random","dcg","baselines"),("random","dcg","choppy"))')
  once, resumed = tmp_path / "once", tmp_path / "resumed"
  assert cli.main(["truncate", "--config", config, "--workdir", str(once),
                   schedule]) == 0
  assert cli.main(["truncate", "--config", config, "--workdir", str(resumed),
                   '--config.schedule=(("random","f1","baselines"),'
                   '("random","f1","attncut"))']) == 0
  first = _results(resumed, times=True)
  assert set(first) == {"seed0_f1.json", "seed1_f1.json"}
  assert all("attncut" in r["methods"] and "bicut" not in r["methods"]
             for r in first.values())
  assert cli.main(["truncate", "--config", config, "--workdir", str(resumed),
                   schedule]) == 0
  assert _results(resumed) == _results(once)
  after = _results(resumed, times=True)
  for name, result in first.items():
    assert after[name]["train_seconds"]["attncut"] == \
        result["train_seconds"]["attncut"]
    assert after[name]["methods"]["attncut"] == result["methods"]["attncut"]
  assert json.loads((resumed / "truncation_report.json").read_text()) == \
      json.loads((once / "truncation_report.json").read_text())
