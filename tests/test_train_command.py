"""The real entry point, end to end, on tiny_cpu with 8 fake CPU devices:
`best_jax train` trains FirstP/MaxP/GoldP and BeST iterations, selects,
evaluates, writes runs/metrics/report; a rerun resumes an interrupted
iteration from its checkpoint and reproduces the same result."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

from best_jax import cli
from best_jax.data import trec
from best_jax.errors import InputError
from best_jax.train import best as best_lib
from best_jax.train import command
from best_jax.train import experiment

ARGS = ["--config.train.num_steps=4", "--config.train.eval_every=2",
        "--config.train.patience=0", "--config.best.max_iterations=2",
        "--config.data.num_queries=32", "--config.data.num_docs=24"]


def test_config_overrides_are_typed_and_checked():
  config = command.load_config("configs/tiny_cpu.py", [
      "config.train.num_steps=7", "config.optimizer.learning_rate=1",
      "config.regimes=['firstp']", "config.best.pairing=random"])
  assert config.train.num_steps == 7
  assert config.optimizer.learning_rate == 1.0
  assert config.regimes == ("firstp",)
  assert config.best.pairing == "random"
  with pytest.raises(InputError):
    command.load_config("configs/tiny_cpu.py", ["config.train.nope=1"])
  with pytest.raises(InputError):
    command.load_config("configs/tiny_cpu.py", ["config.train.num_steps=x"])
  with pytest.raises(AttributeError):
    command.load_config("configs/tiny_cpu.py").new_field = 1  # locked


def _leaves(tree):
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_train_end_to_end_resume_and_pretrained_restarts(tmp_path,
                                                         monkeypatch):
  jax.config.update("jax_compilation_cache_dir", str(tmp_path / "jit_cache"))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  starts, pretrained = {}, {}
  run_iteration, load = best_lib.run_iteration, experiment._pretrained

  def spy_iteration(name, states, *args, **kwargs):
    starts[name] = [best_lib.to_host(s.params) for s in states]
    return run_iteration(name, states, *args, **kwargs)

  def spy_pretrained(config, checkpoint):
    out = load(config, checkpoint)
    pretrained["params"] = out[1]
    return out

  monkeypatch.setattr(best_lib, "run_iteration", spy_iteration)
  monkeypatch.setattr(experiment, "_pretrained", spy_pretrained)
  workdir = str(tmp_path / "w")
  argv = ["train", "--config", "configs/tiny_cpu.py", "--workdir", workdir]
  assert cli.main(argv + ARGS) == 0

  # Outputs: runs, metrics, tables, plots, the negative-sampling log.
  for name in ("bm25", "firstp", "maxp", "maxp-all", "goldp", "best-0",
               "best-1", "best-2", "birch"):
    run = trec.read_run(os.path.join(workdir, "runs", f"{name}.run"))
    assert len(run) == 8, name
  with open(os.path.join(workdir, "metrics.json")) as f:
    metrics = json.load(f)
  assert set(metrics["means"]) >= {"BM25", "FirstP", "MaxP", "MaxP-all",
                                   "GoldP", "BeST-1", "BeST-2", "Birch"}
  assert 0 <= metrics["means"]["BeST-2"]["ndcg_cut_10"] <= 1
  assert set(metrics["segment_p_at_1"]) >= {"Random", "First segment",
                                            "BM25-best segment", "BeST-2"}
  assert "p vs FirstP" in open(os.path.join(workdir, "results.md")).read()
  for plot in ("selected_positions.png", "learning_curves.png"):
    assert os.path.getsize(os.path.join(workdir, "plots", plot)) > 0
  with open(os.path.join(workdir, "negatives.jsonl")) as f:
    assert len(f.readlines()) == 4 * 8  # num_steps x batch_size groups

  # Iteration 1 and every later one start from the pretrained weights.
  for name in ("best1", "best2"):
    for start in starts[name]:
      for a, b in zip(_leaves(start), _leaves(pretrained["params"])):
        np.testing.assert_array_equal(a, b)

  # Interrupt BeST-2 after its step-2 checkpoint and rerun: it resumes there
  # and ends with the same model, hence the same test metrics.
  first = metrics["means"]["BeST-2"]
  shutil.rmtree(os.path.join(workdir, "stages", "best2"))
  shutil.rmtree(os.path.join(workdir, "checkpoints", "best2", "4"))
  os.remove(os.path.join(workdir, "segments", "BeST-2.json"))
  os.remove(os.path.join(workdir, "metrics.json"))
  starts.clear()
  assert cli.main(argv + ARGS) == 0
  assert set(starts) == {"best2"}   # the finished stages were loaded
  log = open(os.path.join(workdir, "log.txt")).read()
  assert "best2: resumed at step 2" in log
  with open(os.path.join(workdir, "metrics.json")) as f:
    again = json.load(f)["means"]["BeST-2"]
  for metric, value in first.items():
    assert again[metric] == pytest.approx(value, abs=1e-6), metric


def test_qds_regime_joins_the_experiment(tmp_path, monkeypatch):
  """`qds` trains through the same entry point on the shared schedule, gets
  a test run, a Table 1 row tested against the BeST iteration chosen on dev,
  no segment-selection row, and a finished stage that a rerun loads."""
  starts = {}
  run_iteration = best_lib.run_iteration

  def spy_iteration(name, states, *args, **kwargs):
    starts[name] = states
    return run_iteration(name, states, *args, **kwargs)

  monkeypatch.setattr(best_lib, "run_iteration", spy_iteration)
  workdir = str(tmp_path / "w")
  argv = ["train", "--config", "configs/tiny_cpu.py", "--workdir", workdir,
          "--config.regimes=['firstp','best','qds']",
          "--config.best.max_iterations=1", "--config.birch.enabled=False"]
  assert cli.main(argv + ARGS[:3] + ARGS[4:]) == 0
  positions = starts["qds"][0].params["encoder"]["embeddings"]["position"]
  assert positions["embedding"].shape[0] == 96  # config.qds.max_len rows
  run = trec.read_run(os.path.join(workdir, "runs", "qds.run"))
  assert len(run) == 8
  with open(os.path.join(workdir, "metrics.json")) as f:
    metrics = json.load(f)
  assert metrics["selected_best"] == "BeST-1"
  assert "QDS" in metrics["means"] and "QDS" not in metrics["segment_p_at_1"]
  assert metrics["significance"]["QDS"]["BeST-1"]["recip_rank_cut_10"][
      "num_queries"] == 8
  table = open(os.path.join(workdir, "results.md")).read()
  assert "p vs BeST-1" in table and "| QDS |" in table
  with open(os.path.join(workdir, "segments", "QDS.json")) as f:
    records = json.load(f)
  assert all(len(r["scores"]) == 1 for r in records)  # one row per document
  starts.clear()
  assert cli.main(argv + ARGS[:3] + ARGS[4:]) == 0
  assert not starts  # every stage, QDS included, was loaded
  # Other test candidates (a shallower depth): the models are loaded, their
  # saved test scores no longer match and are recomputed.
  assert cli.main(argv + ARGS[:3] + ARGS[4:] + ["--config.eval.depth=3"]) == 0
  assert not starts
  assert "QDS: the saved test scores are for other pairs" in open(
      os.path.join(workdir, "log.txt")).read()
  with open(os.path.join(workdir, "segments", "QDS.json")) as f:
    assert len(json.load(f)) < len(records)


def test_only_process_zero_writes_experiment_files(tmp_path):
  """Other processes run the same code but their writes go nowhere."""
  exp = object.__new__(experiment.Experiment)
  for writes, name in ((False, "other.json"), (True, "zero.json")):
    exp.writes = writes
    with exp.output(str(tmp_path / name)) as f:
      f.write("{}")
  assert sorted(os.listdir(tmp_path)) == ["zero.json"]


def test_goldp_positives_hold_the_gold_passage_beyond_the_inference_cap(
    tmp_path, monkeypatch):
  """GoldP trains each positive on the segment holding its gold passage even
  when inference keeps only the first `max_segments` segments (here 1)."""
  from best_jax.train import batches
  seen = []
  group_batch = batches.group_batch

  def spy(groups, choice, **kwargs):
    for b, group in enumerate(groups):
      span = kwargs["gold"].get((group.qid, group.docids[0]))
      if choice[b, 0] < 0 and span is not None:
        spans = kwargs["gold_store"].spans(group.docids[0])
        seen.append(experiment.overlaps(
            spans[batches.gold_segment(spans, span)], span))
    return group_batch(groups, choice, **kwargs)

  monkeypatch.setattr(batches, "group_batch", spy)
  workdir = str(tmp_path / "w")
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   workdir, "--config.regimes=['goldp']",
                   "--config.segments.max_segments=1",
                   "--config.birch.enabled=False"] + ARGS) == 0
  assert seen and all(seen)
  with open(os.path.join(workdir, "metrics.json")) as f:
    p_at_1 = json.load(f)["segment_p_at_1"]
  # With one scored segment, the ceiling is the first segment's P@1.
  assert p_at_1[experiment.CEILING] == p_at_1["First segment"] < 1
