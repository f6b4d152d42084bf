"""The rankers an experiment trains, each with its trainer, its pretrained
parameters (on the devices, the start of every stage) and its scorers.

The cross-encoder serves every BeST regime (FirstP, MaxP, MaxP-all, GoldP,
BeST iterations); the QDS-Transformer has its own (`experiment.qds`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import ml_collections
from flax import nnx

from best_jax.experiment.inputs import Inputs
from best_jax.experiment.rows import CrossRows
from best_jax.models import BertConfig, CrossEncoderRanker, load_ranker
from best_jax.models import pretrained as pretrained_lib
from best_jax.select.selection import SegmentScorer, default_buckets
from best_jax.train.state import TrainState, split_params
from best_jax.train.trainer import Trainer, build_trainer


@dataclasses.dataclass(frozen=True)
class Ranker:
  """One model family of the experiment."""
  trainer: Trainer
  pretrained: Any  # Parameters on the devices, sharded; never donated.
  scorer: SegmentScorer  # Inference rows (dev and test).
  train_scorer: SegmentScorer | None = None  # Training segments (selection).

  def fresh_state(self, seed: int) -> TrainState:
    """A TrainState starting from the pretrained weights (BeST restarts
    every iteration from them, never from θ⁽ⁿ⁾)."""
    return self.trainer.init_from_params(self.pretrained, seed)


def trainer_config(config: ml_collections.ConfigDict, **optimizer
                   ) -> ml_collections.ConfigDict:
  """A copy of `config` whose learning-rate schedule spans the run's steps
  (the loaded config itself is never changed)."""
  out = ml_collections.ConfigDict(config.to_dict())
  steps = config.train.num_steps
  out.optimizer.total_steps = steps
  out.optimizer.warmup_steps = min(config.optimizer.warmup_steps, steps)
  for key, value in optimizer.items():
    out.optimizer[key] = value
  return out


def rows_per_call(wanted: int, trainer: Trainer) -> int:
  """`wanted` rounded down to what the mesh and the processes divide."""
  multiple = max(trainer.batch_multiple, jax.process_count())
  return max(wanted - wanted % multiple, multiple)


def cross_ranker(config: ml_collections.ConfigDict, inputs: Inputs,
                 mesh: jax.sharding.Mesh) -> Ranker:
  """The cross-encoder of `config.ranker`: MiniLM (or a checkpoint) with a
  random head, or a random tiny BERT (`ranker.tiny`, tests)."""
  overrides = dict(config.ranker.get("overrides", {}) or {})
  rngs = nnx.Rngs(config.seed)
  if config.ranker.get("tiny"):
    model = CrossEncoderRanker(BertConfig.tiny(**overrides), rngs=rngs)
  else:
    checkpoint = config.ranker.get("checkpoint") or pretrained_lib.MINILM
    model = load_ranker(pretrained_lib.checkpoint_dir(checkpoint), rngs=rngs,
                        **overrides)
  model_config = model.config
  _, params = split_params(model)
  trainer = build_trainer(
      lambda rngs: CrossEncoderRanker(model_config, rngs=rngs),
      trainer_config(config), mesh=mesh)
  rows = rows_per_call(config.eval.rows_per_call, trainer)
  buckets = default_buckets(config.segments.max_len)
  return Ranker(
      trainer=trainer, pretrained=trainer.put_params(params),
      scorer=SegmentScorer(trainer, CrossRows(inputs.eval_segments,
                                              inputs.queries,
                                              inputs.segmenter),
                           rows_per_call=rows, buckets=buckets),
      train_scorer=SegmentScorer(trainer, CrossRows(inputs.train_segments,
                                                    inputs.queries,
                                                    inputs.segmenter),
                                 rows_per_call=rows, buckets=buckets))
