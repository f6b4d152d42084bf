"""The README's quick start, run as written: its marked shell blocks in bash
and its marked Python block in python, from a directory laid out as the
README assumes (the checkout, `../shared/data` beside it, `runs/` inside).

The README reranks with the model `make demo` trains (`runs/squad_runlocal`:
a bi-encoder work directory, model `best`). Training that takes minutes, so
here `runs/squad_runlocal` is a work directory of the same kind written
without training (`fake_workdir.write_workdir(..., "bi")`: the tiny config's
bi-encoder with random parameters; its `best` is BeST-2). The commands are
the README's, unchanged; only the model behind the path differs. The data is
Cranfield from `../shared/data` (skips when it is missing, fails under
CI=true).
"""

import os
import re
import subprocess
import sys

import pytest

from best_jax.data import trec
from fake_workdir import write_workdir
from fakes import ROOT, cpu_subprocess_env

README = os.path.join(ROOT, "README.md")
TIMEOUT_S = 300


def readme_block(marker: str) -> str:
  """The fenced block right after the README line `<!-- MARKER: ... -->`."""
  text = open(README, encoding="utf-8").read()
  found = re.search(r"^<!-- " + re.escape(marker) + r":.*?-->\n"
                    r"```(\w+)\n(.*?)^```", text, re.M | re.S)
  assert found, f"README.md has no block marked <!-- {marker} -->"
  return found.group(2)


def run(command: list[str], cwd: str, stdin: str | None = None) -> str:
  env = cpu_subprocess_env(1)
  # `python` is this interpreter, importing this checkout's best_jax.
  env["PATH"] = os.pathsep.join(
      [os.path.dirname(sys.executable), env.get("PATH", "")])
  env["PYTHONPATH"] = os.pathsep.join(
      filter(None, [ROOT, env.get("PYTHONPATH")]))
  done = subprocess.run(command, cwd=cwd, env=env, input=stdin,
                        capture_output=True, text=True, timeout=TIMEOUT_S,
                        check=False)
  assert done.returncode == 0, (command, done.stdout[-2000:],
                                done.stderr[-3000:])
  return done.stdout


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
  """A directory `work/` with `../shared/data` and `runs/squad_runlocal`."""
  from conftest import SHARED_DATA, shared_path  # pylint: disable=g-import-not-at-top
  shared_path("cranfield", "cran.all.1400")  # skips (fails under CI) if absent
  root = tmp_path_factory.mktemp("readme")
  (root / "shared").mkdir()
  (root / "shared" / "data").symlink_to(os.path.realpath(SHARED_DATA))
  work = root / "work"
  (work / "runs").mkdir(parents=True)
  write_workdir(str(work / "runs" / "squad_runlocal"), "bi")
  return str(work)


@pytest.mark.slow  # 22-26 s alone on 2 cores, over a minute beside other work
def test_quick_start_runs_as_written(checkout, minilm_dir):
  del minilm_dir  # The tiny model reads the MiniLM tokenizer.
  run(["bash", "-euo", "pipefail", "-c", readme_block("quickstart-data")],
      checkout)
  data = os.path.join(checkout, "my_data")
  topics = trec.read_topics(os.path.join(data, "topics.tsv"))
  assert len(topics) == 225
  assert sum(1 for _ in open(os.path.join(data, "corpus.jsonl"))) == 1400

  out = run(["bash", "-euo", "pipefail", "-c", readme_block("quickstart")],
            checkout)
  first = trec.read_run(os.path.join(checkout, "bm25.run"))
  reranked = trec.read_run(os.path.join(checkout, "best.run"))
  assert set(first) == set(reranked) == set(topics)
  moved = 0
  for qid, scores in first.items():
    bm25 = [d for d, _ in trec.ranked(scores)]
    model = [d for d, _ in trec.ranked(reranked[qid])]
    assert len(bm25) == 100
    # The top 20 reranked, ranks 21-100 kept in the first stage's order.
    assert sorted(model[:20]) == sorted(bm25[:20]) and model[20:] == bm25[20:]
    moved += model[:20] != bm25[:20]
  assert moved > len(first) // 2  # the model's order, not BM25's
  # `evaluate --compare`: both runs' means and the paired tests.
  assert re.search(r"^metric\s+run\s+compare\s+diff\s+t-test p", out, re.M), out
  assert re.search(r"^recip_rank\s+[\d.]+\s+[\d.]+\s+[-+][\d.]+\s+[\d.e-]+\s",
                   out, re.M), out
  assert "compare: bm25.run (225 queries)" in out
  # `truncate --method greedy`: every list cut at the same k.
  k = int(re.search(r"greedy k=(\d+)", out).group(1))
  truncated = trec.read_run(os.path.join(checkout, "best.truncated.run"))
  assert 1 <= k <= 100 and set(truncated) == set(topics)
  for qid, scores in truncated.items():
    assert [d for d, _ in trec.ranked(scores)] == [
        d for d, _ in trec.ranked(reranked[qid])][:k]


def test_python_example_runs_as_written(checkout, minilm_dir):
  del minilm_dir
  out = run([sys.executable, "-"], checkout,
            stdin=readme_block("quickstart-python")).splitlines()
  float(out[0])  # the pair's score
  hits = [line.split(maxsplit=2) for line in out[1:]]
  assert sorted(int(h[0]) for h in hits) == [0, 1]
  scores = [float(h[1]) for h in hits]
  assert scores == sorted(scores, reverse=True)
