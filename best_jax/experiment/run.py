"""`train_and_evaluate(config, workdir)`: one experiment, end to end.

Sections: data and models → training regimes (FirstP/MaxP, MaxP-all, GoldP,
BeST iterations, QDS; each a stage trained once through `train.loop.fit`,
early-stopped and model-selected on dev MRR@10) → test runs (model scores),
Birch → metrics and report. In `workdir` (local or `gs://`):

  config.json           the config of the last run
  runs/*.run            TREC runs of the test queries, with model scores
  metrics.json          means, per-query values, paired tests, P@1
  results.md            Table 1 and Table 2 (also printed)
  plots/*.png           selected-segment positions, learning curves
  segments/*.json       per (query, document) test segment scores and spans
  negatives.jsonl       the seeded negative-sampling schedule
  stages/, checkpoints/ finished models and resumable training runs
  log.txt               the log

Every process runs the same code and builds only its share of each batch;
process 0 writes the files. Rerunning with the same workdir resumes: finished
stages load, an interrupted one continues from its last checkpoint, and the
run files come out byte-identical to an uninterrupted run's.
"""

from __future__ import annotations

import time
from typing import Any

import ml_collections

from best_jax.data import trec
from best_jax.evaluate import report
from best_jax.evaluate import trec_eval
from best_jax.experiment import checks
from best_jax.experiment import datasets
from best_jax.experiment import evaluation
from best_jax.experiment import fusion
from best_jax.experiment import longp
from best_jax.experiment import plans
from best_jax.experiment import regimes
from best_jax.experiment.birch import birch_runs
from best_jax.experiment.inputs import Inputs, build_inputs
from best_jax.experiment.models import build_ranker
from best_jax.experiment.qds import qds_ranker
from best_jax.experiment.stages import Stage, Stages
from best_jax.experiment.workdir import Workdir
from best_jax.train import best as best_lib

ZERO_SHOT = "Zero-shot bi-encoder"


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str
                       ) -> dict[str, Any]:
  """Runs every regime of `config.regimes`, evaluates, writes the report.

  Returns the metrics also written to `workdir/metrics.json`.
  """
  started = time.time()
  mesh = checks.check_config(config)
  out = Workdir(workdir)
  stages = Stages(config, out)
  stages.check_stale()
  out.log(f"workdir {out.root}")
  out.write_json(config.to_dict(), "config.json", indent=1)

  # ------------------------------------------------------ data and models
  inputs = build_inputs(config, out)
  for split, part in inputs.data.splits.items():
    out.log(f"{split}: {len(part.topics)} queries")
  if out.writes:
    regimes.write_schedule(inputs.schedule, out.path("negatives.jsonl"),
                           config.seed)
  family = build_ranker(config, inputs, mesh)
  like = family.trainer.abstract_params()
  wanted = tuple(config.regimes)
  agg = config.eval.aggregation
  # name -> (params, aggregation, dev MRR@10, the ranker that scores it)
  models: dict[str, tuple[Any, str, float, Any]] = {}
  histories, positions = {}, {}
  dev_scores = evaluation.DevScores(inputs)  # shared by selection and fusion

  def evaluator(aggregations, ranker=family):
    return dev_scores.evaluator(ranker.scorer, aggregations)

  def keep(label: str, stage: Stage, key: str, ranker=family) -> None:
    models[label] = (stage.params[key], key, stage.best_dev[key], ranker)

  # ------------------------------------------------------ training regimes
  if config.ranker.kind == "bi":  # A bi-encoder is a ranker before training.
    dev = evaluator((agg,))(family.pretrained)[agg]
    out.log(f"zero-shot bi-encoder: dev MRR@10 {agg} {dev:.4f}")
    models[ZERO_SHOT] = (family.pretrained, agg, dev, family)
  if "firstp" in wanted or "maxp" in wanted:
    stage = stages.train(plans.segment_plan(
        "firstp", "firstp", config, inputs, family,
        evaluator(("first", agg))), like)
    histories["FirstP"] = stage.history
    if "firstp" in wanted:
      keep("FirstP", stage, "first")
    if "maxp" in wanted:
      keep("MaxP", stage, agg)
  if "longp" in wanted:  # FirstP's rows at the checkpoint's full length.
    long_config = longp.long_config(config, family.encoder.positions)
    long_inputs = longp.long_inputs(inputs, long_config)
    long_family = build_ranker(long_config, long_inputs, mesh)
    stage = stages.train(plans.segment_plan(
        "longp", "longp", long_config, long_inputs, long_family,
        evaluator(("first",), long_family)), like)
    histories["LongP"] = stage.history
    keep("LongP", stage, "first", long_family)
  if "maxp_all" in wanted:
    stage = stages.train(plans.segment_plan(
        "maxp_all", "maxp_all", config, inputs, family, evaluator((agg,))),
                         like)
    histories["MaxP-all"] = stage.history
    keep("MaxP-all", stage, agg)
  if "goldp" in wanted:
    if not inputs.data.splits["train"].gold:
      out.log("goldp: skipped, the data has no gold passages")
    else:
      stage = stages.train(plans.segment_plan(
          "goldp", "goldp", config, inputs, family, evaluator((agg,))), like)
      histories["GoldP"] = stage.history
      keep("GoldP", stage, agg)
  if "best" in wanted:
    # θ⁽⁰⁾: trained jointly with θ⁽¹⁾ (the paper), or the pretrained
    # bi-encoder itself, which already ranks, selecting for iteration 1.
    joint = config.best.get("theta0", "joint") == "joint"
    devs = []
    if joint:
      stage = stages.train(plans.joint_plan(config, inputs, family,
                                            evaluator((agg,))), like)
      _log_joint_span(out, inputs, config.best.max_iterations)
      histories["BeST-1"] = stage.history
      positions["BeST-1 (θ0 argmax)"] = stage.positions
      if config.best.get("evaluate_theta0", True):
        models["BeST-0"] = (stage.params["theta0"], agg, float("nan"), family)
      keep("BeST-1", stage, agg)
      devs.append(stage.best_dev[agg])
    for n in range(2 if joint else 1, config.best.max_iterations + 1):
      name = f"best{n}"
      stage = stages.load(name, like)
      if stage is None:  # θ⁽ⁿ⁻¹⁾ selects, a fresh θ⁽ⁿ⁾ trains on its picks.
        selector = (models[f"BeST-{n - 1}"][0] if n > 1
                    else family.pretrained)
        chosen, built = plans.select_segments(inputs, family, selector, name)
        out.log_process(f"select ({name}): built {built[0]} of {built[1]} "
                        "rows")
        stage = stages.train(plans.segment_plan(
            name, "best", config, inputs, family, evaluator((agg,)),
            selected=chosen), like)
      histories[f"BeST-{n}"] = stage.history
      positions[f"BeST-{n} (θ{n - 1} argmax)"] = stage.positions
      keep(f"BeST-{n}", stage, agg)
      devs.append(stage.best_dev[agg])
      if not best_lib.should_continue(devs):
        out.log(f"BeST: dev MRR stopped improving at iteration {n}; stop")
        break
  if "qds" in wanted:
    qds, rows, description = qds_ranker(config, inputs, mesh)
    out.log(f"QDS: {description}")
    stage = stages.train(plans.qds_plan(
        config, inputs, qds, rows, evaluator(("first",), qds)),
                         qds.trainer.abstract_params())
    histories["QDS"] = stage.history
    keep("QDS", stage, "first", qds)

  # ------------------------------------------------------ test runs
  test = inputs.data.splits["test"]
  runs = {"BM25": {q: test.run.get(q, {}) for q in test.topics}}
  segment_scores, reranked = {}, {}
  for name, (params, key, _, ranker) in models.items():
    whole = ranker is not family
    scores = evaluation.test_scores(
        out, inputs, ranker.scorer, params, name, whole_documents=whole,
        max_segments=1 if key == "first" else None)
    if not whole and name != "FirstP":
      segment_scores[name] = scores
    reranked[name] = evaluation.reranked(scores, inputs.candidates["test"],
                                         key)
    runs[name] = evaluation.full_run(reranked[name], runs["BM25"])
  # Birch scores sentences with a model of the segment family (never QDS).
  birch = config.get("birch")
  sentence_models = [n for n, m in models.items() if m[3] is family]
  if birch is not None and birch.enabled and not sentence_models:
    out.log("birch: left out (no segment model: it scores sentences)")
  elif birch is not None and birch.enabled:
    source = (birch.model if birch.model in sentence_models
              else sentence_models[0])
    if source != birch.model:
      out.log(f"birch: no {birch.model} model; scoring sentences with "
              f"{source}")
    runs.update(birch_runs(config, out, inputs, family, models[source][0],
                           source))
  fused = []
  if config.get("interpolate", {}).get("enabled"):
    dev = {name: dev_scores.run(ranker.scorer, params, key)
           for name, (params, key, _, ranker) in models.items()}
    extra, fused = fusion.interpolated(inputs, dev, reranked)
    runs.update(extra)
  if not out.writes:
    return {}
  if config.get("peer", {}).get("enabled"):  # One device: process 0 only.
    extra, record = fusion.peer_runs(config, inputs)
    runs.update(extra)
    fused += record
  out.write_json(fused, "fusion.json", indent=1)
  for name, run in runs.items():
    trec.write_run(run, out.path("runs", f"{trec.run_file_name(name)}.run"),
                   tag=trec.run_file_name(name))
  _write_explain_inputs(out, inputs)

  # ------------------------------------------------------ metrics and report
  out.log("evaluating the test runs")
  means, per_query = {}, {}
  for name, run in runs.items():
    means[name], per_query[name] = trec_eval.evaluate(
        run, test.qrels, evaluation.TEST_METRICS)
  # The BeST model a user would deploy: the iteration with the best dev MRR.
  iterations = [n for n in models if n.startswith("BeST-") and n != "BeST-0"]
  selected = max(iterations, key=lambda n: models[n][2], default=None)
  bases = [b for b in ("FirstP", "BM25", selected, fusion.BM25_PEER)
           if b in runs]
  clusters = datasets.clusters(config.data.name, test)
  if clusters:  # For `best_jax evaluate --compare --clusters`.
    with out.output("clusters.tsv") as f:
      f.writelines(f"{q}\t{c}\n" for q, c in sorted(clusters["of"].items()))
  metrics = {
      "config": config.to_dict(),
      "test_queries": len(test.topics),
      "rerank_depth": config.eval.depth,
      "means": means,
      "per_query": per_query,
      "baselines": bases,
      "clusters": clusters,
      "significance": report.significance(per_query, bases, clusters),
      "selected_best": selected,
      "dev_mrr": {name: dev for name, (_, _, dev, _) in models.items()},
      "segment_p_at_1": evaluation.selection_p_at_1(inputs, segment_scores),
      "histories": histories,
      "selected_positions": positions,
      "seconds": time.time() - started,
      "stage_seconds": stages.timings,
  }
  out.write_json(metrics, "metrics.json", indent=1)
  print(report.write_report(metrics, out.root), flush=True)
  out.log(f"done in {time.time() - started:.0f}s")
  return metrics


def _write_explain_inputs(out: Workdir, inputs) -> None:
  """The texts, topics, qrels and gold spans `best_jax explain` shows."""
  test = inputs.data.splits["test"]
  docids = sorted({d for _, d in inputs.pairs["test"]})
  out.write_json({"documents": {d: inputs.documents[d] for d in docids},
                  "topics": test.topics, "qrels": test.qrels,
                  "gold": {f"{q}\t{d}": list(g.passage)
                           for (q, d), g in test.gold.items()},
                  "answers": {f"{q}\t{d}": [list(a) for a in g.answers]
                              for (q, d), g in test.gold.items()}},
                 "explain", "documents.json")


def _log_joint_span(out: Workdir, inputs: Inputs, iterations: int) -> None:
  """Says how many documents have more training segments than BeST's joint
  step (Eq.3) scored: iteration 1 chose among the leading `k_train` of
  them, while selection from iteration 2 on scores them all."""
  k = inputs.segmenter.config.k_train
  beyond = [n - k for n in inputs.train_segments.counts().values() if n > k]
  if beyond:
    out.log(f"best1: the joint step scored the leading segments.k_train={k} "
            f"training segments; {len(beyond)} of the "
            f"{len(inputs.train_segments)} documents segmented so far (by "
            "this process) have more in the span inference scores (up to "
            f"{max(beyond)} more)"
            + ("; BeST-2 onwards selects among all of them" if iterations > 1
               else "")
            + f"; segments.k_train={k + max(beyond)} would let BeST-1 see "
            "them all")
