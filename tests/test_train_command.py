"""The real entry point, end to end, on tiny_cpu with 8 fake CPU devices:
`best_jax train` trains every regime through the one loop, selects,
evaluates, writes runs with model scores, metrics and the report; a rerun
resumes an interrupted stage and writes byte-identical runs; bad configs,
stale work directories and a non-finite loss stop with one line."""

import collections
import json
import os
import re
import shutil

import jax
import numpy as np
import pytest

from best_jax import cli
from best_jax.config import load_config
from best_jax.data import trec
from best_jax.errors import InputError
from best_jax.experiment import checks
from best_jax.experiment import inputs as inputs_lib
from best_jax.experiment import evaluation
from best_jax.experiment import models as models_lib
from best_jax.experiment import plans
from best_jax.experiment import regimes as regimes_lib
from best_jax.experiment import run as run_lib
from best_jax.rerank import interpolate
from best_jax.train import loop

ARGS = ["--config.train.num_steps=4", "--config.train.eval_every=2",
        "--config.train.patience=0", "--config.best.max_iterations=2",
        "--config.data.num_queries=32", "--config.data.num_docs=24"]


def test_config_overrides_are_typed_and_checked():
  config = load_config("configs/tiny_cpu.py", [
      "config.train.num_steps=7", "config.optimizer.learning_rate=1",
      "config.regimes=['firstp']", "config.best.pairing=random"])
  assert config.train.num_steps == 7
  assert config.optimizer.learning_rate == 1.0
  assert config.regimes == ("firstp",)
  assert config.best.pairing == "random"
  with pytest.raises(InputError):
    load_config("configs/tiny_cpu.py", ["config.train.nope=1"])
  with pytest.raises(InputError):
    load_config("configs/tiny_cpu.py", ["config.train.num_steps=x"])
  with pytest.raises(InputError, match="unknown config argument"):
    load_config("configs/tiny_cpu.py:bogus")
  with pytest.raises(AttributeError):
    load_config("configs/tiny_cpu.py").new_field = 1  # locked


def test_work_recorded_before_a_setting_changed_meaning_still_resumes():
  """A record with a setting no longer fingerprinted, or without one added
  since (read as its old default), is not stale."""
  current = checks.fingerprint(load_config("configs/tiny_cpu.py"), "best")
  recorded = {k: v for k, v in current.items() if k != "best.theta0"}
  recorded["optimizer.total_steps"] = 20
  assert checks.stale_keys(recorded, current, "best") == []
  recorded["best.theta0"] = "pretrained"
  assert checks.stale_keys(recorded, current, "best") == [
      "best.theta0: 'pretrained' -> 'joint'"]
  # squad_longdoc's segments.unit came later, with the default "window".
  current = checks.fingerprint(load_config("configs/squad_longdoc.py:cpu"),
                               "maxp")
  recorded = {k: v for k, v in current.items() if k != "segments.unit"}
  assert checks.stale_keys(recorded, current, "maxp") == []
  # qds.head came later too: a record without it, or a config without it
  # (read as "paper"), is the same model; "linear" is not.
  config = load_config("configs/qds_squad_longdoc.py:cpu")
  current = checks.fingerprint(config, "qds")
  assert current["qds.head"] == "paper"
  without = {k: v for k, v in current.items() if k != "qds.head"}
  assert checks.stale_keys(without, current, "qds") == []
  assert checks.stale_keys(current, without, "qds") == []
  assert checks.stale_keys(dict(current, **{"qds.head": "linear"}),
                           without, "qds") == ["qds.head: 'linear' -> 'paper'"]
  # A setting of the record's own regime that the config no longer has is
  # a change (its code default may differ), not another regime's key.
  dropped = {k: v for k, v in current.items() if k != "qds.head_dropout"}
  assert checks.stale_keys(dict(current, **{"qds.head_dropout": 0.3}),
                           dropped, "qds") == [
                               "qds.head_dropout: 0.3 -> '(unset)'"]
  # Before 92ac1a8 the dev/test questions were drawn with the run's seed:
  # a seed-0 record is the same subsample, a seed-1 record is not.
  config = load_config("configs/squad_longdoc.py:cpu")
  current = checks.fingerprint(config, "maxp")
  assert current["data.subsample_seed"] == 0
  before = {k: v for k, v in current.items() if k != "data.subsample_seed"}
  assert checks.stale_keys(before, current, "maxp") == []
  assert checks.stale_keys(dict(before, seed=1), dict(current, seed=1),
                           "maxp") == [
      "data.subsample_seed: 1 -> 0"]
  # Until training segments covered the span inference scores they stopped
  # at k_train: a MaxP-all, GoldP or BeST record from then is stale, while
  # FirstP (segment 0) trained the same model.
  for regime in ("firstp", "maxp_all", "goldp", "best"):
    current = checks.fingerprint(config, regime)
    before = {k: v for k, v in current.items()
              if k != "segments.training_span"}
    assert checks.stale_keys(before, current, regime) == (
        [] if regime == "firstp" else
        ["segments.training_span: 'leading k_train' -> 'inside inference'"])
  # Until issue 40 the last training segment ran past the scored span (a
  # change with `max_segments` only) and GoldP drew its positive elsewhere.
  for arg, changed in (("cpu", True), ("cpu_bi", False)):
    variant = load_config(f"configs/squad_longdoc.py:{arg}")
    for regime in ("firstp", "maxp_all", "goldp", "best"):
      current = checks.fingerprint(variant, regime)
      before = dict(current, **{"goldp.negatives": "random"})
      if regime != "firstp":
        before["segments.training_span"] = "inference"
      stale = checks.stale_keys(before, current, regime)
      assert ("goldp.negatives: 'random' -> '(unset)'" in stale) == (
          regime == "goldp")
      assert (stale != []) == (regime == "goldp" or
                               (changed and regime != "firstp")), (arg, stale)
  # k_train sizes BeST's joint step alone: raising it (as the log advises)
  # leaves the other regimes' work, recorded with or without the key.
  wider = load_config("configs/squad_longdoc.py:cpu",
                      ["config.segments.k_train=13"])
  for regime in ("firstp", "maxp_all", "goldp"):
    recorded = dict(checks.fingerprint(config, regime),
                    **{"segments.k_train": 12})
    assert checks.stale_keys(recorded, checks.fingerprint(wider, regime),
                             regime) == []
  assert checks.stale_keys(checks.fingerprint(config, "best"),
                           checks.fingerprint(wider, "best"), "best") == [
                               "segments.k_train: 12 -> 13"]


def test_balanced_micro_batches_are_part_of_a_models_settings():
  """With accumulation, `best_jax train` balances each data shard's
  examples over a cross-encoder's micro-batches, which changes the dropout
  draws: the fingerprint records it and the number of data shards, so work
  trained with strided micro-batches shows as stale. Without accumulation
  nothing changes, and `train.unpadded` stays a speed setting either
  way."""
  plain = checks.fingerprint(load_config("configs/squad_longdoc.py:cpu"),
                             "firstp")
  assert "train.micro_batches" not in plain
  assert "train.data_shards" not in plain
  four = ["config.train.accumulation_steps=4"]
  current = checks.fingerprint(
      load_config("configs/squad_longdoc.py:cpu", four), "firstp")
  assert current["train.micro_batches"] == "balanced per data shard"
  assert current["train.data_shards"] >= 1
  before = {k: v for k, v in current.items()
            if k not in ("train.micro_batches", "train.data_shards")}
  assert "train.micro_batches: 'strided' -> 'balanced per data shard'" in (
      checks.stale_keys(before, current, "firstp"))
  padded = load_config("configs/squad_longdoc.py:cpu", four + [
      "config.train.unpadded=False", "config.train.attention_groups=1",
      "config.train.max_budgets=1"])
  assert checks.stale_keys(current, checks.fingerprint(padded, "firstp"),
                           "firstp") == []
  # A bi-encoder's in-batch negatives are its micro-batch's: not balanced.
  bi = checks.fingerprint(
      load_config("configs/squad_longdoc.py:cpu_bi", four), "firstp")
  assert "train.micro_batches" not in bi


def _runs(workdir):
  directory = os.path.join(workdir, "runs")
  return {name: open(os.path.join(directory, name), "rb").read()
          for name in sorted(os.listdir(directory))}


@pytest.mark.slow
def test_train_end_to_end_resume_and_pretrained_restarts(tmp_path,
                                                         monkeypatch):
  starts, pretrained = {}, {}
  fit, build = loop.fit, models_lib.build_ranker

  def spy_fit(name, state, *args, **kwargs):
    starts[name] = jax.device_get(loop.model_params(state))
    return fit(name, state, *args, **kwargs)

  rankers = []

  def spy_ranker(*args, **kwargs):
    ranker = build(*args, **kwargs)
    pretrained["params"] = jax.device_get(ranker.pretrained)
    rankers.append(ranker)
    return ranker

  monkeypatch.setattr(loop, "fit", spy_fit)
  monkeypatch.setattr(run_lib, "build_ranker", spy_ranker)
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

  # The runs carry the models' scores: MaxP's top documents score the max
  # of their saved segment scores, the rest of the BM25 list sits below.
  with open(os.path.join(workdir, "segments", "MaxP.json")) as f:
    segments = {(r["qid"], r["docid"]): max(r["scores"])
                for r in json.load(f)}
  maxp = trec.read_run(os.path.join(workdir, "runs", "maxp.run"))
  for qid, scores in maxp.items():
    top = {d: s for d, s in scores.items() if (qid, d) in segments}
    assert len(top) == 10  # eval.depth
    for docid, score in top.items():
      assert score == pytest.approx(segments[(qid, docid)], abs=1e-6)
    rest = [s for d, s in scores.items() if d not in top]
    assert not rest or max(rest) < min(top.values())

  # Every stage starts from the pretrained weights (BeST's later iterations
  # too, never from θ⁽ⁿ⁾); the joint step starts both of its models there.
  assert set(starts) == {"firstp", "maxp_all", "goldp", "best1", "best2"}
  for name, start in starts.items():
    for a, b in zip(jax.tree.leaves(start),
                    jax.tree.leaves(pretrained["params"])):
      np.testing.assert_array_equal(a, b)

  # Interrupt BeST-2 after its step-2 checkpoint and rerun: it resumes there
  # and writes byte-identical runs; the finished stages are loaded.
  first = _runs(workdir)
  shutil.rmtree(os.path.join(workdir, "stages", "best2"))
  os.remove(os.path.join(workdir, "stages", "best2.json"))
  shutil.rmtree(os.path.join(workdir, "checkpoints", "best2", "4"))
  os.remove(os.path.join(workdir, "segments", "BeST-2.json"))
  shutil.rmtree(os.path.join(workdir, "runs"))
  starts.clear()
  # The rerun selects BeST-2's segments in parts of 16 pairs, which must
  # choose what the whole-schedule selection chose.
  monkeypatch.setattr(plans, "SELECT_PAIRS", 16)
  assert cli.main(argv + ARGS) == 0
  assert set(starts) == {"best2"}
  log = open(os.path.join(workdir, "log.txt")).read()
  assert "best2: resumed at step 2" in log
  # tiny_cpu's documents have more random-length training segments in its
  # 8 inference windows than the joint step's k_train=4, and the log says
  # so (with the k_train that would cover them).
  assert re.search(r"best1: the joint step scored the leading "
                   r"segments.k_train=4 training segments; \d+ of the \d+ "
                   r"documents segmented so far \(by this process\) have "
                   r"more .*BeST-2 onwards selects among all of them"
                   r"; segments.k_train=\d+ would let BeST-1 see them all",
                   log)
  assert _runs(workdir) == first
  # The rerun in this process used the first run's jitted steps
  # (`models._device_steps`).
  assert rankers[1].trainer is rankers[0].trainer
  assert rankers[1].joint_steps is rankers[0].joint_steps


def test_device_steps_are_shared_only_between_equal_settings():
  """`models._device_steps` keeps one trainer per model and setting that
  `build_trainer` reads: equal settings share it, a changed one builds
  another."""
  device_steps = models_lib._device_steps  # pylint: disable=protected-access

  def steps(*overrides):
    config = load_config("configs/tiny_cpu.py",
                         [f"config.{o}" for o in overrides])
    model = models_lib._model(config)  # pylint: disable=protected-access
    mesh = checks.check_config(config)
    return device_steps(config, model, mesh)

  first = steps()
  assert steps() is first
  for change in ("optimizer.learning_rate=0.5", "train.num_steps=7",
                 "train.loss=softmax_cross_entropy",
                 "ranker.kind=bi",
                 "ranker.overrides.hidden_dropout=0.2"):
    assert steps(change)[0] is not first[0], change


def test_bad_input_stops_before_anything_is_written(tmp_path, capsys):
  workdir = tmp_path / "w"
  base = ["train", "--config", "configs/tiny_cpu.py", "--workdir",
          str(workdir)]
  for extra, message in (
      (["--config.train.num_steps=0"], "num_steps=0 must be at least 1"),
      (["--config.train.batch_size=6"], "not a multiple of the 8"),
      (["--config.train.attention_groups=9"], "attention_groups=9 must be"),
      (["--config.train.max_budgets=0"], "max_budgets=0 must be"),
      (["--config.regimes=['firstp','nope']"], "unknown regime 'nope'"),
      (["--config.ranker.kind=mono"], "ranker.kind='mono'"),
      (["--config.qds.head=mlp"], "qds.head='mlp'"),
      (["--config.qds.pattern=diagonal"], "qds.pattern='diagonal'"),
      (["--config.train.in_batch_negatives=True"], "one data shard only"),
      (["--config.mesh.shape=(4, 2)"], "devices all hold data shards")):
    assert cli.main(base + extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    assert not workdir.exists()
  for config in ("tiny_cpu.py:bogus", "squad_longdoc.py:bogus",
                 "qds_squad_longdoc.py:bogus", "cranfield.py:bogus",
                 "trec_dl19.py:bogus", "robust04_title.py:bogus",
                 "robust04_desc.py:s9"):
    assert cli.main(["train", "--config", f"configs/{config}",
                     "--workdir", str(workdir)]) == 2, config
    assert "unknown config argument" in capsys.readouterr().err, config
    assert not workdir.exists()


def test_stale_work_is_never_resumed(tmp_path, capsys):
  workdir = str(tmp_path / "w")
  argv = ["train", "--config", "configs/tiny_cpu.py", "--workdir", workdir,
          "--config.regimes=['firstp']", "--config.birch.enabled=False"]
  assert cli.main(argv + ARGS) == 0
  capsys.readouterr()
  before = sorted(os.listdir(workdir))
  assert cli.main(argv + ARGS + ["--config.optimizer.learning_rate=0.5"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0
  assert "optimizer.learning_rate: 0.001 -> 0.5 (firstp)" in err
  assert "new --workdir" in err
  assert sorted(os.listdir(workdir)) == before
  # Settings that change no model (e.g. the logging rate) are fine.
  assert cli.main(argv + ARGS + ["--config.train.log_every=1"]) == 0


def test_non_finite_loss_stops_with_one_line(tmp_path, capsys):
  workdir = str(tmp_path / "w")
  code = cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   workdir, "--config.optimizer.learning_rate=1e30",
                   "--config.optimizer.max_grad_norm=1e30",
                   "--config.train.num_steps=10"])
  assert code == 1
  last = capsys.readouterr().err.strip().splitlines()[-1]
  assert last.startswith("best_jax train: stopped: firstp: training step ")
  assert "non-finite loss" in last
  assert not os.path.exists(os.path.join(workdir, "stages", "firstp.json"))


@pytest.mark.slow
def test_qds_regime_joins_the_experiment(tmp_path, monkeypatch):
  """`qds` trains through the same entry point on the shared schedule, gets
  a test run, a Table 1 row tested against the BeST iteration chosen on dev,
  no segment-selection row, and a finished stage that a rerun loads."""
  starts = {}
  fit = loop.fit

  def spy_fit(name, state, *args, **kwargs):
    starts[name] = state
    return fit(name, state, *args, **kwargs)

  monkeypatch.setattr(loop, "fit", spy_fit)
  workdir = str(tmp_path / "w")
  argv = ["train", "--config", "configs/tiny_cpu.py", "--workdir", workdir,
          "--config.regimes=['firstp','best','qds']",
          "--config.best.max_iterations=1", "--config.birch.enabled=False"]
  assert cli.main(argv + ARGS[:3] + ARGS[4:]) == 0
  positions = starts["qds"].params["encoder"]["embeddings"]["position"]
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


def test_qds_alone_runs_without_birch(tmp_path):
  """With QDS the only model, Birch (sentences need a segment model) is
  left out instead of scoring sentences with QDS's parameters."""
  workdir = str(tmp_path / "w")
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   workdir, "--config.regimes=['qds']"] + ARGS) == 0
  with open(os.path.join(workdir, "metrics.json")) as f:
    means = json.load(f)["means"]
  assert "QDS" in means and "Birch" not in means


def test_goldp_trains_inside_the_scored_span_on_the_answers_segment(
    tmp_path, monkeypatch):
  """GoldP's positive is the training segment holding the answer start when
  the answer lies in the span inference scores (here one window), drawn like
  a negative otherwise; every segment comes from the one training
  segmentation, which ends where the scored span ends."""
  seen = []
  choose = regimes_lib.choose_segments

  def spy(regime, group, spans, **kwargs):
    index = choose(regime, group, spans, **kwargs)
    seen.append(([s.tolist() for s in spans], index, kwargs["gold_start"]))
    return index

  monkeypatch.setattr(regimes_lib, "choose_segments", spy)
  spans = collections.defaultdict(dict)  # by segmentation
  getitem = inputs_lib.SegmentCache.__getitem__

  def spy_segments(cache, docid):
    doc = getitem(cache, docid)
    spans[cache._name][docid] = doc.spans_s2.tolist()
    return doc

  monkeypatch.setattr(inputs_lib.SegmentCache, "__getitem__", spy_segments)
  workdir = str(tmp_path / "w")
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   workdir, "--config.regimes=['goldp']",
                   "--config.segments.max_segments=1",
                   "--config.birch.enabled=False"] + ARGS) == 0
  inside = [(s[0], i[0], g) for s, i, g in seen if g < s[0][-1][1]]
  assert inside and len(inside) < len(seen)  # some answers lie past it
  for segments, index, gold in inside:
    assert segments[index][0] <= gold < segments[index][1]
  assert any(i > 0 for _, i, _ in inside)
  assert set(spans) == {"segment (train)", "segment (eval)"}
  train, scored = spans["segment (train)"], spans["segment (eval)"]
  shared = set(train) & set(scored)
  assert shared
  for docid in shared:
    assert train[docid][-1][1] == scored[docid][-1][1]
  with open(os.path.join(workdir, "metrics.json")) as f:
    p_at_1 = json.load(f)["segment_p_at_1"]
  # With one scored segment, the ceiling is the first segment's P@1.
  for criterion in ("answer", "majority"):
    assert (p_at_1[evaluation.CEILING][criterion]
            == p_at_1["First segment"][criterion] < 1)


@pytest.mark.slow
def test_bi_encoder_family_trains_through_the_same_regimes(tmp_path):
  """`ranker.kind=bi`: FirstP/MaxP and BeST (joint step, then a frozen
  selection and a fresh iteration) train a bi-encoder with in-batch
  negatives; its zero-shot row and every model's BM25 fusion are in the
  table."""
  workdir = str(tmp_path / "w")
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   workdir, "--config.ranker.kind=bi",
                   "--config.train.in_batch_negatives=True",
                   "--config.train.fixed_order_reduction=False",
                   "--config.train.loss=softmax_cross_entropy",
                   "--config.regimes=['firstp','maxp','best']",
                   "--config.birch.enabled=False",
                   "--config.eval.depth=5"] + ARGS) == 0
  with open(os.path.join(workdir, "metrics.json")) as f:
    metrics = json.load(f)
  assert {"Zero-shot bi-encoder", "FirstP", "MaxP", "BeST-1", "BeST-2",
          "MaxP + BM25", "BeST-2 + BM25"} <= set(metrics["means"])
  assert metrics["dev_mrr"]["Zero-shot bi-encoder"] > 0
  with open(os.path.join(workdir, "fusion.json")) as f:
    fusion = {r["model"]: r for r in json.load(f)}
  assert 0.0 <= fusion["MaxP"]["alpha"] <= 1.0
  # The fusion normalises each query's reranked top 5 only, as on dev where
  # α was chosen (not the completed list, whose ranks 6… hold placeholders).
  runs = lambda name: trec.read_run(os.path.join(workdir, "runs", name))
  bm25, maxp, fused = (runs("bm25.run"), runs("maxp.run"),
                       runs("maxp_+_bm25.run"))
  assert max(len(r) for r in bm25.values()) > 5
  top = {q: dict(trec.ranked(r)[:5]) for q, r in maxp.items()}
  want = interpolate.interpolate(bm25, top, fusion["MaxP"]["alpha"])
  for qid, scores in want.items():
    got = dict(trec.ranked(fused[qid])[:len(scores)])
    assert got.keys() == scores.keys()
    np.testing.assert_allclose([got[d] for d in scores],
                               list(scores.values()), atol=1e-5)
  assert len(metrics["selected_positions"]["BeST-2 (θ1 argmax)"]) > 0


def test_best_can_start_from_the_pretrained_bi_encoder(tmp_path, capsys):
  """`best.theta0=pretrained`: the zero-shot bi-encoder selects iteration
  1's segments (no joint step, no θ⁽⁰⁾ to train); a cross-encoder refuses."""
  workdir = str(tmp_path / "w")
  bi = ["--config.ranker.kind=bi", "--config.train.in_batch_negatives=True",
        "--config.train.fixed_order_reduction=False",
        "--config.train.loss=softmax_cross_entropy",
        "--config.regimes=['best']", "--config.birch.enabled=False",
        "--config.best.theta0=pretrained"]
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   workdir] + bi + ARGS
                  + ["--config.best.max_iterations=1"]) == 0
  with open(os.path.join(workdir, "metrics.json")) as f:
    metrics = json.load(f)
  assert "BeST-0" not in metrics["means"]
  assert {"Zero-shot bi-encoder", "BeST-1"} <= set(metrics["means"])
  with open(os.path.join(workdir, "stages", "best1.json")) as f:
    record = json.load(f)
  assert record["keys"] == ["max"]  # no θ⁽⁰⁾ trained beside θ⁽¹⁾
  assert record["settings"]["best.theta0"] == "pretrained"
  assert len(metrics["selected_positions"]["BeST-1 (θ0 argmax)"]) > 0
  capsys.readouterr()
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   str(tmp_path / "cross"),
                   "--config.best.theta0=pretrained"]) == 2
  assert "needs config.ranker.kind='bi'" in capsys.readouterr().err
  assert not os.path.exists(tmp_path / "cross")
