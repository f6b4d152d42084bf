"""Training stages: each model of an experiment is trained once, through the
one loop (`train.loop.fit`), and saved.

A stage is one training run from the pretrained weights, early stopped and
model-selected on dev MRR@10 (`Plan` says what to train). In the workdir:

  checkpoints/NAME/       the resumable run while it trains (orbax, all
                          processes write; resume reads orbax's metadata)
  checkpoints/NAME.json   the settings it was started with
  stages/NAME/            the selected parameters per dev key (orbax)
  stages/NAME.json        dev scores, history, selected positions and the
                          settings (`checks.fingerprint`), written last

A rerun loads a finished stage instead of training it. `check_stale` first
compares every recorded setting with the config and stops, before anything
is written, naming the changed keys.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections

from best_jax.data.pipeline import Feature, InputPipeline
from best_jax.errors import InputError
from best_jax.experiment import checks
from best_jax.experiment.examples import GroupExamples
from best_jax.experiment.workdir import Workdir
from best_jax.models.unpadding import TokenBudget
from best_jax.train import loop
from best_jax.train import token_budget
from best_jax.train.checkpoint import Checkpointer, load_params, save_params

STAGES, CHECKPOINTS = "stages", "checkpoints"


@dataclasses.dataclass
class Plan:
  """What one stage trains: `fit`'s arguments, built without side effects."""
  name: str
  regime: str            # for the fingerprint (`checks.fingerprint`)
  state: Callable[[], Any]  # the initial state, made only when training
  step_fn: Callable
  examples: GroupExamples
  features: dict[str, Feature]
  batch_sharding: jax.NamedSharding
  evaluate: loop.Evaluate
  # Extra parameters to keep from the final state (BeST: θ⁽⁰⁾'s).
  keep_final: dict[str, Callable[[Any], Any]] = dataclasses.field(
      default_factory=dict)
  # Selected segment positions to record (BeST iterations on selected
  # segments); the joint step reports its own.
  positions: list[int] = dataclasses.field(default_factory=list)
  # Chooses the unpadded budgets that `step_fn(..., budget)` takes
  # (`train.unpadded`, `train.token_budget`); called only when training.
  # None, or no budget: padded rows.
  budgets: Callable[[], tuple[TokenBudget, ...]] | None = None


@dataclasses.dataclass
class Stage:
  """A finished stage: parameters (on the devices) per key, and records."""
  name: str
  params: dict[str, Any]
  best_dev: dict[str, float]
  best_step: dict[str, int]
  history: list[dict[str, float]]
  positions: list[int]


class Stages:
  """Loads, trains and saves the stages of one experiment."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: Workdir):
    self.config = config
    self.workdir = workdir
    self.timings: dict[str, float] = {}

  def check_stale(self) -> None:
    """InputError when a recorded stage was trained with other settings."""
    changed: dict[str, list[str]] = {}  # "key: old -> new" -> stages
    if self.workdir.writes:
      for kind in (STAGES, CHECKPOINTS):
        directory = self.workdir.path(kind)
        if not directory.exists():
          continue
        for path in sorted(directory.glob("*.json")):
          record = self.workdir.read_local_json(path)
          regime = record["regime"]
          for change in checks.stale_keys(
              record["settings"], checks.fingerprint(self.config, regime),
              regime):
            stages = changed.setdefault(change, [])
            if path.stem not in stages:
              stages.append(path.stem)
    changed = self.workdir.broadcast(changed)
    if changed:
      raise InputError(
          f"{self.workdir.root} holds models trained with other settings: "
          + "; ".join(f"{change} ({', '.join(stages)})"
                      for change, stages in changed.items())
          + ". Use a new --workdir, or delete its stages/ and checkpoints/ "
          "to train again")

  def load(self, name: str, like: Any) -> Stage | None:
    """The finished stage `name` (params shaped and sharded like `like`)."""
    record = self.workdir.read_json(STAGES, f"{name}.json")
    if record is None:
      return None
    params = load_params(self.workdir.path(STAGES, name),
                         {key: like for key in record["keys"]})
    self.workdir.log(f"{name}: loaded the finished stage (dev "
                     f"{ {k: round(v, 4) for k, v in record['best_dev'].items()} })")
    return Stage(name, params, record["best_dev"], record["best_step"],
                 record["history"], record["positions"])

  def train(self, plan: Plan, like: Any) -> Stage:
    """Loads the finished stage, or trains it (resuming) and saves it."""
    done = self.load(plan.name, like)
    if done is not None:
      return done
    t = self.config.train
    settings = {"regime": plan.regime,
                "settings": checks.fingerprint(self.config, plan.regime)}
    self.workdir.write_json(settings, CHECKPOINTS, f"{plan.name}.json")
    started = time.time()
    step_fn, arrange = plan.step_fn, None
    steps = t.get("accumulation_steps", 1)
    shards = token_budget.data_shards(plan.batch_sharding)
    if checks.balances_micro_batches(self.config):
      arrange = functools.partial(
          token_budget.balance_micro_batches, steps=steps, shards=shards,
          batch_size=t.batch_size)
    budgets = plan.budgets() if plan.budgets else ()
    if budgets:
      step_fn = token_budget.UnpaddedSteps(step_fn, budgets, steps=steps,
                                           shards=shards)
      groups = len(budgets[0].rows)
      self.workdir.log(
          f"{plan.name}: rows encoded unpadded, "
          f"{token_budget.describe(budgets)} per data shard and "
          "micro-batch; " + (
              f"attention on rows grouped by length (up to 1/{groups}, "
              f"2/{groups}, ... of the row length)" if groups else
              "attention on every row at full length"))
    if arrange:
      self.workdir.log(f"{plan.name}: each data shard's {steps} "
                       "micro-batches balanced by tokens")
    with InputPipeline(plan.examples, plan.features,
                       global_batch_size=t.batch_size,
                       sharding=plan.batch_sharding,
                       arrange=arrange) as batches, Checkpointer(
                           self.workdir.path(CHECKPOINTS, plan.name),
                           max_to_keep=t.get("max_to_keep", 1)) as checkpointer:
      result = loop.fit(
          plan.name, plan.state(), step_fn, batches,
          num_steps=t.num_steps, evaluate=plan.evaluate,
          eval_every=t.eval_every, patience=t.patience,
          log_every=t.log_every, checkpoint_every=t.get("checkpoint_every", 0),
          checkpointer=checkpointer, log=self.workdir.log)
    self.timings[f"train {plan.name}"] = time.time() - started
    if budgets:
      at = ", ".join(f"{n} at {t}" for t, n in step_fn.steps_at.items())
      self.workdir.log(f"{plan.name}: {step_fn.unpadded} steps unpadded "
                       f"({at} tokens), {step_fn.padded} padded (their rows "
                       "did not fit) in this process's run (since any "
                       "resume)")
    self.workdir.log_process(f"{plan.name}: built {plan.examples.built} of "
                             f"{len(plan.examples)} training examples")
    params = dict(result.best_params)
    for key, pick in plan.keep_final.items():
      params[key] = pick(result.state)
    positions = result.positions or plan.positions
    save_params(self.workdir.path(STAGES, plan.name), params)
    self.workdir.write_json(dict(
        settings, keys=sorted(params), best_dev=result.best_dev,
        best_step=result.best_step, history=result.history,
        positions=positions), STAGES, f"{plan.name}.json")
    return Stage(plan.name, params, result.best_dev, result.best_step,
                 result.history, positions)
