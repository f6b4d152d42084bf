"""What each regime trains: a `stages.Plan` (initial state, jitted step,
training examples, dev evaluation), built without side effects.

- `segment_plan`: one segment per document with the plain step — FirstP
  (whose model MaxP also uses), MaxP-all, GoldP, BeST iterations on the
  segments a frozen model selected (`select_segments`: θ⁽ⁿ⁻¹⁾, or for
  iteration 1 with `best.theta0=pretrained` the pretrained bi-encoder).
- `joint_plan`: BeST iteration 1, θ⁽⁰⁾ and θ⁽¹⁾ in one jitted step.
- `qds_plan`: the QDS-Transformer on whole documents.

Every model starts from the pretrained weights (BeST's later iterations too,
never from θ⁽ⁿ⁾), with a seed derived from the stage's name.
"""

from __future__ import annotations

import zlib
from typing import Any

import ml_collections

from best_jax.experiment import checks
from best_jax.experiment.examples import (AllSegmentExamples, GroupExamples,
                                          SegmentExamples)
from best_jax.experiment.inputs import Inputs, Pair
from best_jax.experiment.models import Ranker
from best_jax.experiment.qds import QdsRows
from best_jax.experiment.regimes import pairs as schedule_pairs
from best_jax.experiment.stages import Plan
from best_jax.models.bert_config import BertConfig
from best_jax.models.unpadding import TokenBudget
from best_jax.train import token_budget
from best_jax.train.loop import Evaluate

# Pairs a selection scores per call: bounds its `[pairs, segments]` score
# buffer (replicated; its width is the part's longest document) on every
# device, which for whole long documents could otherwise reach gigabytes.
SELECT_PAIRS = 65_536


def stage_seed(config: ml_collections.ConfigDict, name: str) -> int:
  return config.seed + zlib.crc32(name.encode()) % 100_000


def segment_plan(name: str, regime: str, config: ml_collections.ConfigDict,
                 inputs: Inputs, ranker: Ranker, evaluate: Evaluate, *,
                 selected: dict[Pair, int] | None = None) -> Plan:
  """A model trained on one segment per document (`regime`: firstp,
  maxp_all, goldp or best with `selected`)."""
  build = SegmentExamples(inputs, regime, seed=config.seed, selected=selected,
                          family=config.ranker.kind)
  seed = stage_seed(config, name)
  examples = GroupExamples(inputs.schedule, build)
  return Plan(
      name=name, regime=regime, state=lambda: ranker.fresh_state(seed),
      step_fn=ranker.trainer.train_step, examples=examples,
      features=build.features(config.train.group_size),
      batch_sharding=ranker.trainer.batch_sharding, evaluate=evaluate,
      positions=list(selected.values()) if selected else [],
      budgets=_unpadded_budgets(config, ranker, examples))


def choose_budgets(config: ml_collections.ConfigDict, examples: GroupExamples,
                   *, shards: int, encoder: BertConfig
                   ) -> tuple[TokenBudget, ...]:
  """The budgets `best_jax train` compiles for a stage of `examples` on
  `shards` data shards: `token_budget.choose_budgets` on batches spread over
  the schedule, with `config.train`'s micro-batches, attention groups and
  number of sizes (the benches call it too)."""
  t = config.train
  num_batches = -(-len(examples) // t.batch_size)
  return token_budget.choose_budgets(
      examples.batches(token_budget.sample_batches(num_batches),
                       t.batch_size),
      steps=t.get("accumulation_steps", 1), shards=shards,
      attention_groups=t.get("attention_groups", 1),
      max_budgets=t.get("max_budgets", token_budget.MAX_BUDGETS),
      attention_weight=token_budget.attention_weight_of(encoder))


def _unpadded_budgets(config: ml_collections.ConfigDict, ranker: Ranker,
                      examples: GroupExamples):
  """With `train.unpadded` and cross-encoder rows: the stage's budgets,
  chosen when it starts (`choose_budgets`)."""
  if not checks.encodes_unpadded(config):
    return None
  return lambda: choose_budgets(
      config, examples,
      shards=token_budget.data_shards(ranker.trainer.batch_sharding),
      encoder=ranker.encoder)


def joint_plan(config: ml_collections.ConfigDict, inputs: Inputs,
               ranker: Ranker, evaluate: Evaluate) -> Plan:
  """BeST iteration 1 (`best1`): θ⁽¹⁾ is evaluated and selected; θ⁽⁰⁾'s
  final parameters are kept as `theta0`."""
  t = config.train
  step = ranker.joint_step(config)
  build = AllSegmentExamples(inputs, family=config.ranker.kind)
  seed = stage_seed(config, "best1")
  examples = GroupExamples(inputs.schedule, build)
  return Plan(
      name="best1", regime="best",
      state=lambda: (ranker.fresh_state(seed), ranker.fresh_state(seed + 1)),
      step_fn=step, examples=examples,
      features=build.features(t.group_size),
      batch_sharding=ranker.trainer.batch_sharding, evaluate=evaluate,
      keep_final={"theta0": lambda state: state[0].params},
      budgets=_unpadded_budgets(config, ranker, examples))


def qds_plan(config: ml_collections.ConfigDict, inputs: Inputs,
             ranker: Ranker, rows: QdsRows, evaluate: Evaluate) -> Plan:
  seed = stage_seed(config, "qds")
  return Plan(
      name="qds", regime="qds", state=lambda: ranker.fresh_state(seed),
      step_fn=ranker.trainer.train_step,
      examples=GroupExamples(inputs.schedule, rows.example),
      features=rows.example_features(config.train.group_size),
      batch_sharding=ranker.trainer.batch_sharding, evaluate=evaluate)


def select_segments(inputs: Inputs, ranker: Ranker, params: Any, name: str
                    ) -> tuple[dict[Pair, int], tuple[int, int]]:
  """The frozen model's argmax over the training segments of every pair of
  the schedule (scored on the devices; only the indices come back), and
  (rows this process built, rows of all processes). Pairs go through in
  parts of `SELECT_PAIRS`, each with its own `[pairs, segments]` buffer."""
  pairs = schedule_pairs(inputs.schedule)
  scorer = ranker.train_scorer
  chosen, built = {}, (0, 0)
  for start in range(0, len(pairs), SELECT_PAIRS):
    part = pairs[start:start + SELECT_PAIRS]
    chosen.update(scorer.score(params, part, desc=f"select ({name})").select())
    built = tuple(a + b for a, b in zip(built, scorer.built))
  return chosen, built
