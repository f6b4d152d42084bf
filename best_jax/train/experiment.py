"""`train_and_evaluate(config, workdir)`: one experiment, end to end.

Sections: data and segments → models (pretrained params, trainer, scorers) →
training regimes (FirstP/MaxP, MaxP-all, GoldP, BeST iterations), each early
stopped and model-selected on dev MRR@10 → test reranking (runs, metrics,
segment P@1) → Birch → report (tables, plots) in `workdir`:

  runs/*.run                 TREC runs of the test queries (BM25 and models)
  metrics.json               means, per-query values, paired tests, P@1
  results.md                 Table 1 and Table 2 (also printed)
  plots/*.png                selected-segment positions, learning curves
  segments/*.json            per (query, document) segment scores and spans
  negatives.jsonl            the seeded negative-sampling schedule
  stages/, checkpoints/      finished models and resumable iteration state

With several processes (a TPU pod) every process runs the same code; files
are written by process 0 only (orbax checkpoints by all, as orbax requires).

Rerunning with the same workdir resumes: finished stages are loaded, an
interrupted iteration continues from its latest checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import time
from typing import Any

import jax
import ml_collections
import numpy as np
from flax import nnx

from best_jax.data import trec
from best_jax.data.files import atomic_write
from best_jax.evaluate import trec_eval
from best_jax.rerank import aggregate as aggregate_lib
from best_jax.select import selection
from best_jax.train import batches as batches_lib
from best_jax.train import best as best_lib
from best_jax.train import datasets
from best_jax.train import iteration_checkpoint as ckpt_lib
from best_jax.train import regimes

DEV_METRIC = "recip_rank_cut_10"
CEILING = "Ceiling (gold among the scored segments)"
TEST_METRICS = ("ndcg_cut_10", "recip_rank_cut_10", "map", "ndcg_cut_20",
                "P_20", "recip_rank")


class Experiment:
  """The state shared by the stages of one experiment."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str):
    from best_jax.models import pretrained  # pylint: disable=g-import-not-at-top
    from best_jax.segments.config import SegmenterConfig  # pylint: disable=g-import-not-at-top
    from best_jax.segments.segmenter import Segmenter  # pylint: disable=g-import-not-at-top
    from best_jax.train.trainer import build_trainer  # pylint: disable=g-import-not-at-top
    self.config = config
    self.workdir = workdir
    self.started = time.time()
    self.timings: dict[str, float] = {}  # stage -> seconds (this process)
    self.writes = jax.process_index() == 0  # Only process 0 writes files.
    os.makedirs(workdir, exist_ok=True)
    self.log(f"workdir {workdir}")

    # ------------------------------------------------ data and segments
    self.data = datasets.load(config, workdir)
    for split, part in self.data.splits.items():
      self.log(f"{split}: {len(part.topics)} queries")
    checkpoint = config.ranker.get("checkpoint") or pretrained.MINILM
    self.tokenizer = pretrained.load_tokenizer(checkpoint)
    self.segmenter = Segmenter(SegmenterConfig(**config.segments.to_dict()),
                               tokenizer=self.tokenizer)
    topics = {q: t for part in self.data.splits.values()
              for q, t in part.topics.items()}
    self.queries = batches_lib.QueryStore.build(self.segmenter, topics)
    train = self.data.splits["train"]
    t = config.train
    # Positives need a text to be trained on (qrels stay whole for metrics).
    with_text = {q: {d: g for d, g in j.items() if d in self.data.documents}
                 for q, j in train.qrels.items()}
    self.schedule = regimes.schedule(
        with_text, train.run, list(train.topics),
        num_negatives=t.group_size - 1, depth=t.negatives_depth,
        batch_size=t.batch_size, num_steps=t.num_steps, seed=config.seed)
    if self.writes:
      regimes.write_schedule(self.schedule, self._path("negatives.jsonl"),
                             config.seed)
    train_docs = sorted({d for b in self.schedule for g in b for d in g.docids})
    self.train_store = batches_lib.SegmentStore.build(
        self.segmenter, self.data.documents, train_docs, training=True,
        seed=config.seed)
    e = config.eval
    self.candidates = {s: datasets.candidates(self.data.splits[s], e.depth)
                       for s in ("dev", "test")}
    self.pairs = {}
    for s in ("dev", "test"):
      part = self.data.splits[s]
      pairs = [(q, d) for q, ds in self.candidates[s].items() for d in ds]
      relevant = [(q, d) for (q, d) in part.gold]  # for segment P@1
      self.pairs[s] = list(dict.fromkeys(pairs + relevant))
    full_docs = sorted({d for s in self.pairs.values() for _, d in s})
    self.full_store = batches_lib.SegmentStore.build(
        self.segmenter, self.data.documents, full_docs, training=False,
        num_segments=config.segments.get("max_segments"))
    self.log(f"segmented {len(train_docs)} training and {len(full_docs)} "
             f"evaluation documents ({self.full_store.segments.tokens_dsl.shape[1]}"
             " segments max)")

    # ------------------------------------------------ models
    self.model_config, self.pretrained = _pretrained(config, checkpoint)
    from best_jax.models import CrossEncoderRanker  # pylint: disable=g-import-not-at-top
    model_config = self.model_config
    # The learning-rate schedule spans the run's steps (a copy: the config
    # itself is never changed after loading).
    trainer_config = ml_collections.ConfigDict(config.to_dict())
    trainer_config.optimizer.total_steps = t.num_steps
    trainer_config.optimizer.warmup_steps = min(
        config.optimizer.warmup_steps, t.num_steps)
    self.trainer = build_trainer(
        lambda rngs: CrossEncoderRanker(model_config, rngs=rngs),
        trainer_config)
    rows = e.rows_per_call
    rows -= rows % self.trainer.batch_multiple or 0
    rows = max(rows, self.trainer.batch_multiple)
    self.full_scorer = self._scorer(self.trainer, self.full_store, rows)
    self.train_scorer = self._scorer(self.trainer, self.train_store, rows)
    self._qds = None  # Built on first use (`qds_parts`).

  # ------------------------------------------------------------------ helpers

  def log(self, message: str) -> None:
    if not self.writes:
      return
    line = f"[{time.strftime('%H:%M:%S')}] {message}"
    print(line, flush=True)
    with open(self._path("log.txt"), "a", encoding="utf-8") as f:
      f.write(line + "\n")

  def output(self, path: str, mode: str = "w"):
    """`atomic_write(path)` on process 0; elsewhere a discarded buffer."""
    if self.writes:
      return atomic_write(path, mode)
    return contextlib.nullcontext(io.BytesIO() if "b" in mode
                                  else io.StringIO())

  def _path(self, *parts: str) -> str:
    path = os.path.join(self.workdir, *parts)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path

  def _scorer(self, trainer, store: batches_lib.SegmentStore,
              rows: int) -> selection.SegmentScorer:
    """Scores `store`'s segments with `trainer`'s model, `rows` per call."""
    return selection.SegmentScorer(
        functools.partial(trainer.score, size=rows),
        batches_lib.SegmentRows(store, self.queries, self.segmenter), rows)

  def fresh_state(self, seed: int):
    """A TrainState starting from the pretrained weights (never from θ⁽ⁿ⁾)."""
    return self.trainer.init_from_params(
        jax.tree.map(np.array, self.pretrained), seed)

  def dev_evaluator(self, aggregations: tuple[str, ...],
                    scorer: selection.SegmentScorer | None = None):
    """`params -> {aggregation: dev MRR@10}` over the dev candidates
    (segments scored by `scorer`, default the cross-encoder's)."""
    scorer = scorer or self.full_scorer
    dev = self.data.splits["dev"]
    pairs = [(q, d) for q, ds in self.candidates["dev"].items() for d in ds]
    first_only = aggregations == ("first",)

    def evaluate(params) -> dict[str, float]:
      scores = scorer.score(params, pairs, desc="dev",
                                      max_segments=1 if first_only else None)
      out = {}
      for agg in aggregations:
        run = _run(scores, self.candidates["dev"], agg)
        out[agg] = trec_eval.evaluate(run, dev.qrels, [DEV_METRIC])[0][
            DEV_METRIC]
      return out
    return evaluate

  # ---------------------------------------------------------------- training

  def _stage_dir(self, name: str) -> str:
    return self._path("stages", name, "x")[:-2]

  def _load_stage(self, name: str, like=None):
    """The finished stage `name` (params shaped like `like`, default the
    pretrained cross-encoder's), or None."""
    like = self.pretrained if like is None else like
    summary = os.path.join(self._stage_dir(name), "summary.json")
    if not os.path.isfile(summary):
      return None
    with open(summary, encoding="utf-8") as f:
      info = json.load(f)
    params = {key: ckpt_lib.load_params(
        os.path.join(self._stage_dir(name), f"params_{key}"), like)
              for key in info["best_dev"]}
    final = tuple(ckpt_lib.load_params(
        os.path.join(self._stage_dir(name), f"final_{i}"), like)
                  for i in range(info.get("num_final", 0)))
    self.log(f"{name}: loaded finished stage (dev {info['best_dev']})")
    return best_lib.IterationResult(name, params, info["best_step"],
                                    info["best_dev"], info["history"], final,
                                    info.get("selected_positions", []))

  def _save_stage(self, result: best_lib.IterationResult,
                  keep_final: bool = False) -> None:
    directory = self._stage_dir(result.name)
    for key, params in result.best_params.items():
      ckpt_lib.save_params(os.path.join(directory, f"params_{key}"), params)
    finals = result.final_params if keep_final else ()
    for i, params in enumerate(finals):
      ckpt_lib.save_params(os.path.join(directory, f"final_{i}"), params)
    with self.output(os.path.join(directory, "summary.json")) as f:
      json.dump(dict(result.summary(), num_final=len(finals)), f)

  def train(self, name: str, regime: str, aggregations: tuple[str, ...],
            selected: dict | None = None) -> best_lib.IterationResult:
    """Trains one model from the pretrained weights under `regime`."""
    done = self._load_stage(name)
    if done is not None:
      return done
    config = self.config
    train = self.data.splits["train"]
    store = self.train_store
    if regime == "maxp_all":
      # Dai & Callan's MaxP trains on every passage of the document, not
      # only the k_train leading ones: the inference segmentation.
      store = batches_lib.SegmentStore.build(
          self.segmenter, self.data.documents, list(self.train_store.index),
          training=False)
    num_segments = {d: store.num_segments(d) for d in store.index}
    gold_store = None
    if regime == "goldp":
      # The positive's segment holding the gold passage, wherever it lies:
      # all inference segments (the `max_segments` cap would cut it off).
      positives = sorted({g.docids[0] for b in self.schedule for g in b})
      gold_store = batches_lib.SegmentStore.build(
          self.segmenter, self.data.documents, positives, training=False,
          keep_all=True)

    def batch_fn(step):
      rng = np.random.default_rng([config.seed, step, 7])
      groups = self.schedule[step]
      choice = regimes.choose_segments(
          regime, groups, num_segments=num_segments, rng=rng,
          selected=selected, negatives=config.goldp.negatives)
      return self.trainer.put(batches_lib.group_batch(
          groups, choice, segmenter=self.segmenter, queries=self.queries,
          train_store=store, gold_store=gold_store, gold=train.gold))

    seed = config.seed + 1000 * (len(name) + sum(map(ord, name)))
    return self._run_stage(name, (self.fresh_state(seed),),
                           self.trainer.train_step, batch_fn,
                           self.dev_evaluator(aggregations))

  def _run_stage(self, name: str, states, step, batch_fn, evaluate, *,
                 keep_final: bool = False) -> best_lib.IterationResult:
    """Trains `states` with `step` on `batch_fn(i)`, early-stopped and
    model-selected by `evaluate`, resumable; saves the finished stage."""
    t = self.config.train
    checkpoint = ckpt_lib.IterationCheckpoint(
        self._path("checkpoints", name, "x")[:-2],
        max_to_keep=t.get("max_to_keep", 1))
    started = time.time()
    result = best_lib.run_iteration(
        name, states, step, batch_fn, num_steps=t.num_steps,
        evaluate=evaluate, eval_every=t.eval_every, patience=t.patience,
        log_every=t.log_every, checkpoint=checkpoint, log=self.log)
    checkpoint.close()
    self.timings[f"train {name}"] = time.time() - started
    self._save_stage(result, keep_final=keep_final)
    return result

  def train_best_iteration1(self) -> best_lib.IterationResult:
    """θ⁽⁰⁾ and θ⁽¹⁾ in one joint step; θ⁽¹⁾ is evaluated and selected."""
    name = "best1"
    done = self._load_stage(name)
    if done is not None:
      return done
    config, t = self.config, self.config.train
    step = best_lib.build_joint_step(
        self.trainer, t.loss, config.best.pairing,
        config.best.select_with_dropout)

    def batch_fn(i):
      return self.trainer.put(batches_lib.segments_batch(
          self.schedule[i], segmenter=self.segmenter, queries=self.queries,
          train_store=self.train_store))

    states = (self.fresh_state(config.seed + 10),
              self.fresh_state(config.seed + 11))
    return self._run_stage(name, states, step, batch_fn,
                           self.dev_evaluator((config.eval.aggregation,)),
                           keep_final=True)

  def qds_parts(self):
    """The QDS-Transformer's `qds_regime.QdsParts` (built once)."""
    if self._qds is None:
      from best_jax.train import qds_regime  # pylint: disable=g-import-not-at-top
      docids = sorted(set(self.train_store.index) | set(self.full_store.index))
      self._qds = qds_regime.build(self.config, segmenter=self.segmenter,
                                   queries=self.queries,
                                   documents=self.data.documents,
                                   docids=docids)
      self.log(f"QDS: {self._qds.describe()}")
    return self._qds

  def train_qds(self) -> best_lib.IterationResult:
    """The QDS-Transformer on the shared schedule, one row per document,
    from the pretrained encoder (positions extended), selected on dev MRR."""
    parts = self.qds_parts()
    done = self._load_stage("qds", like=parts.pretrained)
    if done is not None:
      return done
    trainer = parts.trainer

    def batch_fn(step):
      return trainer.put(parts.scorer.source.batch(self.schedule[step]))

    state = trainer.init_from_params(
        jax.tree.map(np.array, parts.pretrained), self.config.seed + 20)
    return self._run_stage("qds", (state,), trainer.train_step, batch_fn,
                           self.dev_evaluator(("first",), parts.scorer))

  def select(self, params, name: str) -> dict[tuple[str, str], int]:
    """The frozen model's argmax over every training pair's segments."""
    path = self._path("selections", f"{name}.json")
    if os.path.isfile(path):
      with open(path, encoding="utf-8") as f:
        return {tuple(k.split("\t")): v for k, v in json.load(f).items()}
    started = time.time()
    scores = self.train_scorer.score(params, regimes.pairs(self.schedule),
                                     desc=f"select ({name})")
    chosen = selection.select(scores)
    self.timings[f"select with {name}"] = time.time() - started
    self.log(f"selection with {name}: {len(chosen)} pairs in "
             f"{time.time() - started:.1f}s")
    with self.output(path) as f:
      json.dump({"\t".join(k): v for k, v in chosen.items()}, f)
    return chosen

  # -------------------------------------------------------------- evaluation

  def test_scores(self, params, name: str, max_segments: int | None = None,
                  scorer: selection.SegmentScorer | None = None
                  ) -> dict[tuple[str, str], np.ndarray]:
    """Scores of every segment of the test pairs (cached in segments/);
    `max_segments=1` scores first segments only (FirstP). With another
    `scorer` than the cross-encoder's (QDS), a "segment" is the document."""
    path = self._path("segments", f"{name}.json")
    if os.path.isfile(path):
      with open(path, encoding="utf-8") as f:
        saved = {(r["qid"], r["docid"]): np.asarray(r["scores"])
                 for r in json.load(f)}
      if set(saved) == set(self.pairs["test"]):
        return saved
      # The test queries or candidates changed (e.g. more test queries).
      self.log(f"{name}: the saved test scores are for other pairs; rescoring")
    whole = scorer is not None
    scores = (scorer or self.full_scorer).score(
        params, self.pairs["test"], max_segments=max_segments,
        desc=f"test ({name})")
    records = [{"qid": q, "docid": d, "scores": list(map(float, s)),
                "spans": ([[0, len(self.data.documents[d][1])]] if whole
                          else self.full_store.spans(d).tolist()[:len(s)])}
               for (q, d), s in scores.items()]
    with self.output(path) as f:
      json.dump(records, f)
    return scores


def _pretrained(config, checkpoint: str):
  """(BertConfig, host params) of the starting point of every model."""
  from best_jax.models import BertConfig, CrossEncoderRanker, load_ranker  # pylint: disable=g-import-not-at-top
  from best_jax.models import pretrained  # pylint: disable=g-import-not-at-top
  from best_jax.train.state import split_params  # pylint: disable=g-import-not-at-top
  overrides = dict(config.ranker.get("overrides", {}) or {})
  rngs = nnx.Rngs(config.seed)
  if config.ranker.get("tiny"):
    model = CrossEncoderRanker(BertConfig.tiny(**overrides), rngs=rngs)
  else:
    model = load_ranker(pretrained.checkpoint_dir(checkpoint), rngs=rngs,
                        **overrides)
  _, params = split_params(model)
  return model.config, best_lib.to_host(params)


def _run(scores: dict[tuple[str, str], np.ndarray],
         candidates: dict[str, list[str]], method: str) -> trec.Run:
  """Reranked candidates: `{qid: {docid: aggregated score}}`."""
  return {q: {d: aggregate_lib.aggregate(scores[(q, d)], method) for d in ds}
          for q, ds in candidates.items()}


def _full_run(reranked: trec.Run, first_stage: trec.Run) -> trec.Run:
  """The reranked top documents above the rest of the first-stage list;
  scores become descending ranks so that trec_eval keeps this order."""
  out = {}
  for qid, first in first_stage.items():
    top = [d for d, _ in trec.ranked(reranked.get(qid, {}))]
    rest = [d for d, _ in trec.ranked(first) if d not in reranked.get(qid, {})]
    ordered = top + rest
    out[qid] = {d: float(len(ordered) - i) for i, d in enumerate(ordered)}
  return out


def overlaps(span: tuple[int, int] | list[int], gold: tuple[int, int]) -> bool:
  """True when a segment's character span shares text with the gold span."""
  return min(span[1], gold[1]) > max(span[0], gold[0])


def segment_p_at_1(chosen: dict[tuple[str, str], int], spans, gold
                   ) -> float:
  """P@1: fraction of (query, relevant document) pairs whose chosen segment
  overlaps the gold passage."""
  hits = [overlaps(spans[p][chosen[p]], g) for p, g in gold.items()
          if p in chosen]
  return float(np.mean(hits)) if hits else float("nan")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str
                       ) -> dict[str, Any]:
  """Runs every regime of `config.regimes`, evaluates, writes the report.

  Returns the metrics dict also written to `workdir/metrics.json`.
  """
  from best_jax.evaluate import report  # pylint: disable=g-import-not-at-top
  wanted = tuple(config.regimes)
  for regime in wanted:
    if regime not in regimes.REGIMES:
      raise ValueError(f"unknown regime {regime!r}; one of {regimes.REGIMES}")
  if "qds" in wanted and "qds" not in config:
    raise ValueError("the qds regime needs a config.qds section (see "
                     "configs/qds_squad_longdoc.py)")
  exp = Experiment(config, workdir)
  test = exp.data.splits["test"]
  aggregation = config.eval.aggregation
  models: dict[str, tuple[Any, str, float]] = {}  # name -> params, agg, dev
  histories: dict[str, list] = {}
  positions: dict[str, list[int]] = {}

  # ---------------------------------------------------------- training
  if "firstp" in wanted or "maxp" in wanted:
    result = exp.train("firstp", "firstp", ("first", aggregation))
    histories["FirstP"] = result.history
    if "firstp" in wanted:
      models["FirstP"] = (result.best_params["first"], "first",
                          result.best_dev["first"])
    if "maxp" in wanted:
      models["MaxP"] = (result.best_params[aggregation], aggregation,
                        result.best_dev[aggregation])
  if "maxp_all" in wanted:
    result = exp.train("maxp_all", "maxp_all", (aggregation,))
    histories["MaxP-all"] = result.history
    models["MaxP-all"] = (result.best_params[aggregation], aggregation,
                          result.best_dev[aggregation])
  if "goldp" in wanted:
    if not exp.data.splits["train"].gold:
      exp.log("goldp: skipped, the data has no gold passages")
    else:
      result = exp.train("goldp", "goldp", (aggregation,))
      histories["GoldP"] = result.history
      models["GoldP"] = (result.best_params[aggregation], aggregation,
                         result.best_dev[aggregation])
  best_devs = []
  if "best" in wanted:
    result = exp.train_best_iteration1()
    histories["BeST-1"] = result.history
    positions["BeST-1 (θ0 argmax)"] = result.selected_positions
    theta0 = result.final_params[0] if result.final_params else None
    if theta0 is not None and config.best.get("evaluate_theta0", True):
      models["BeST-0"] = (theta0, aggregation, float("nan"))
    models["BeST-1"] = (result.best_params[aggregation], aggregation,
                        result.best_dev[aggregation])
    best_devs.append(result.best_dev[aggregation])
    previous = result.best_params[aggregation]
    for n in range(2, config.best.max_iterations + 1):
      chosen = exp.select(previous, f"best{n - 1}")
      positions[f"BeST-{n} (θ{n - 1} argmax)"] = list(chosen.values())
      result = exp.train(f"best{n}", "best", (aggregation,), selected=chosen)
      histories[f"BeST-{n}"] = result.history
      models[f"BeST-{n}"] = (result.best_params[aggregation], aggregation,
                             result.best_dev[aggregation])
      best_devs.append(result.best_dev[aggregation])
      previous = result.best_params[aggregation]
      if not best_lib.should_continue(best_devs):
        exp.log(f"BeST: dev MRR stopped improving at iteration {n}; stop")
        break

  scorers = {}
  if "qds" in wanted:
    result = exp.train_qds()
    histories["QDS"] = result.history
    models["QDS"] = (result.best_params["first"], "first",
                     result.best_dev["first"])
    scorers["QDS"] = exp.qds_parts().scorer

  # ---------------------------------------------------------- test runs
  runs = {"BM25": {q: test.run.get(q, {}) for q in test.topics}}
  all_scores = {}
  for name, (params, agg, _) in models.items():
    scores = exp.test_scores(params, name,
                             max_segments=1 if agg == "first" else None,
                             scorer=scorers.get(name))
    if name not in scorers:  # Whole-document scores select no segment.
      all_scores[name] = scores
    reranked = _run(scores, exp.candidates["test"], agg)
    runs[name] = _full_run(reranked, runs["BM25"])
  if "birch" in config and config.birch.enabled and models:
    runs.update(_birch(exp, models, runs["BM25"]))
  for name, run in runs.items():
    if exp.writes:
      trec.write_run(run, exp._path("runs", f"{_file_name(name)}.run"),
                     tag=_file_name(name))
  _write_explain_inputs(exp)

  # ---------------------------------------------------------- metrics
  exp.log("evaluating the test runs")
  means, per_query = {}, {}
  for name, run in runs.items():
    means[name], per_query[name] = trec_eval.evaluate(run, test.qrels,
                                                      TEST_METRICS)
  selectors = _selection_p_at_1(exp, all_scores)
  exp.log("paired tests and report")
  # The BeST model a user would deploy: the iteration with the best dev MRR.
  iterations = [n for n in models if n.startswith("BeST-") and n != "BeST-0"]
  selected = max(iterations, key=lambda n: models[n][2], default=None)
  metrics = {
      "config": config.to_dict(),
      "test_queries": len(test.topics),
      "rerank_depth": config.eval.depth,
      "means": means,
      "per_query": per_query,
      "significance": report.significance(
          per_query, ("FirstP", "BM25") + ((selected,) if selected else ())),
      "selected_best": selected,
      "dev_mrr": {name: dev for name, (_, _, dev) in models.items()},
      "segment_p_at_1": selectors,
      "histories": histories,
      "selected_positions": positions,
      "seconds": time.time() - exp.started,
      "stage_seconds": exp.timings,
  }
  with exp.output(exp._path("metrics.json")) as f:
    json.dump(metrics, f, indent=1, default=float)
    f.write("\n")
  if exp.writes:
    print(report.write_report(metrics, exp.workdir), flush=True)
  exp.log(f"done in {time.time() - exp.started:.0f}s")
  return metrics


def _write_explain_inputs(exp: Experiment) -> None:
  """The texts, topics, qrels and gold spans `best_jax explain` shows."""
  test = exp.data.splits["test"]
  docids = sorted({d for _, d in exp.pairs["test"]})
  with exp.output(exp._path("explain", "documents.json")) as f:
    json.dump({"documents": {d: exp.data.documents[d] for d in docids},
               "topics": test.topics, "qrels": test.qrels,
               "gold": {f"{q}\t{d}": list(span)
                        for (q, d), span in test.gold.items()}}, f)


def _file_name(name: str) -> str:
  return name.lower().replace(" ", "_").replace("(", "").replace(")", "")


def _selection_p_at_1(exp: Experiment, all_scores) -> dict[str, float]:
  """Table 2: P@1 of each selector on the test (query, relevant doc) pairs."""
  from best_jax.select.bm25_segments import bm25_best_segments  # pylint: disable=g-import-not-at-top
  gold = exp.data.splits["test"].gold
  if not gold:
    return {}
  spans = {p: exp.full_store.spans(p[1]).tolist() for p in gold}
  # The ceiling: pairs whose gold passage lies within the scored segments
  # (below 1 when `max_segments` cuts long documents).
  out = {CEILING: float(np.mean([any(overlaps(s, g) for s in spans[p])
                                 for p, g in gold.items()]))}
  random_hits = [np.mean([overlaps(s, g) for s in spans[p]])
                 for p, g in gold.items()]
  out["Random"] = float(np.mean(random_hits))
  out["First segment"] = segment_p_at_1({p: 0 for p in gold}, spans, gold)
  texts = {p: [exp.data.documents[p[1]][1][a:b] for a, b in spans[p]]
           for p in gold}
  bm25 = bm25_best_segments(exp.data.splits["test"].topics, texts)
  out["BM25-best segment"] = segment_p_at_1(bm25, spans, gold)
  for name, scores in all_scores.items():
    if name == "FirstP":
      continue
    chosen = {p: int(np.argmax(scores[p])) for p in gold if p in scores}
    out[name] = segment_p_at_1(chosen, spans, gold)
  return out


def _birch(exp: Experiment, models, bm25_run: trec.Run) -> dict[str, trec.Run]:
  """Birch over the test queries: sentence scores from `config.birch.model`,
  weights fitted by k-fold cross-validation within the test queries."""
  from best_jax.rerank import birch  # pylint: disable=g-import-not-at-top
  cfg = exp.config.birch
  name = cfg.model if cfg.model in models else next(iter(models))
  path = exp._path("birch_features.json")
  features = None
  if os.path.isfile(path):  # A resumed experiment keeps its sentence scores.
    with open(path, encoding="utf-8") as f:
      features = {q: birch.QueryFeatures(tuple(v["docids"]),
                                         np.asarray(v["features"]))
                  for q, v in json.load(f).items()}
    wanted = {q: set(ds) for q, ds in exp.candidates["test"].items()}
    if {q: set(v.docids) for q, v in features.items()} != wanted:
      features = None  # Other test queries or candidates: score again.
  if features is None:
    features = _birch_features(exp, models[name][0], bm25_run)
    # Kept for cross-validation, which refits the weights across folds.
    with exp.output(path) as f:
      json.dump({q: {"docids": list(v.docids),
                     "features": v.features_dk.tolist()}
                 for q, v in features.items()}, f)
  qids = sorted(features)
  rng = np.random.default_rng(exp.config.seed)
  order = [qids[i] for i in rng.permutation(len(qids))]
  folds = {f"fold{i + 1}": order[i::cfg.folds] for i in range(cfg.folds)}
  heldout, fitted = birch.cross_validate(features, exp.data.splits["test"].qrels,
                                         folds)
  exp.log(f"birch ({name} sentences): weights per fold {fitted}")
  return {"Birch": _full_run(heldout, bm25_run)}


def _birch_features(exp: Experiment, params, bm25_run: trec.Run):
  """`[S_doc, S_1..S_k]` of every test candidate, sentences scored by `params`."""
  from best_jax.rerank import birch  # pylint: disable=g-import-not-at-top
  from best_jax.segments.config import SegmenterConfig  # pylint: disable=g-import-not-at-top
  from best_jax.segments.segmenter import Segmenter  # pylint: disable=g-import-not-at-top
  cfg = exp.config.birch
  seg_config = SegmenterConfig(**dict(exp.config.segments.to_dict(),
                                      unit="sentence"))
  sentencer = Segmenter(seg_config, tokenizer=exp.tokenizer)
  docids = sorted({d for ds in exp.candidates["test"].values() for d in ds})
  store = batches_lib.SegmentStore.build(sentencer, exp.data.documents, docids,
                                         training=False,
                                         num_segments=cfg.max_sentences)
  scorer = exp._scorer(exp.trainer, store, exp.full_scorer.rows_per_call)
  pairs = [(q, d) for q, ds in exp.candidates["test"].items() for d in ds]
  sentence_scores = {}
  for (q, d), s in scorer.score(params, pairs, desc="birch").items():
    sentence_scores.setdefault(q, {})[d] = list(s)
  first_stage = {q: {d: bm25_run[q][d] for d in ds}
                 for q, ds in exp.candidates["test"].items()}
  return birch.features(first_stage, sentence_scores, k=cfg.k)
