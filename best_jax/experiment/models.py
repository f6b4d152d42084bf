"""The rankers an experiment trains, each with its trainer, its pretrained
parameters (on the devices, the start of every stage) and its scorers.

`config.ranker.kind` picks the scorer family that every BeST regime
(FirstP, MaxP, MaxP-all, GoldP, BeST iterations) trains: `cross`, a
cross-encoder (MiniLM and a random linear head on [CLS]), or `bi`, a
bi-encoder (the same encoder, sentence-transformers mean pooling, scaled
cosine or dot; no random part). The QDS-Transformer has its own ranker
(`experiment.qds`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
from flax import nnx

from best_jax.experiment.inputs import Inputs, SegmentCache
from best_jax.experiment.rows import BiRows, CrossRows
from best_jax.models import BertConfig, CrossEncoderRanker, load_ranker
from best_jax.models import pretrained as pretrained_lib
from best_jax.models.bi_encoder import BiEncoderRanker, load_bi_encoder
from best_jax.segments.config import SegmenterConfig
from best_jax.select.embedding import EmbeddingScorer, build_embed_into
from best_jax.select.selection import (SegmentScorer, build_score_into,
                                       segment_buckets)
from best_jax.train import best as best_lib
from best_jax.train.state import TrainState, split_params
from best_jax.train.trainer import Trainer, build_trainer

# Segment embeddings a bi-encoder's inference scorer keeps on the devices
# (replicated: 200 MB at 384 dimensions, 400 MB at 768).
EVAL_CACHE_ROWS = 1 << 17


@dataclasses.dataclass(frozen=True)
class Ranker:
  """One model family of the experiment."""
  trainer: Trainer
  pretrained: Any  # Parameters on the devices, sharded; never donated.
  encoder: BertConfig  # Its shape weighs the unpadded budgets' FLOPs.
  scorer: SegmentScorer | EmbeddingScorer  # Inference rows (dev, test).
  # Training segments (BeST's selection).
  train_scorer: SegmentScorer | EmbeddingScorer | None = None
  # A scorer of the same family over other segments (Birch's sentences).
  scorer_for: Callable[[SegmentCache], Any] | None = None
  # BeST's joint steps of `trainer` by their settings (`joint_step`),
  # shared with every Ranker of the same trainer (`_device_steps`).
  joint_steps: dict[tuple, Callable] = dataclasses.field(
      default_factory=dict, repr=False)

  def fresh_state(self, seed: int) -> TrainState:
    """A TrainState starting from the pretrained weights (BeST restarts
    every iteration from them, never from θ⁽ⁿ⁾)."""
    return self.trainer.init_from_params(self.pretrained, seed)

  def joint_step(self, config: ml_collections.ConfigDict) -> Callable:
    """BeST iteration 1's jitted step (`best.build_joint_step`), built once
    per trainer and settings."""
    settings = best_lib.joint_settings(config)
    key = tuple(sorted(settings.items()))
    if key not in self.joint_steps:
      self.joint_steps[key] = best_lib.build_joint_step(self.trainer,
                                                        **settings)
    return self.joint_steps[key]


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


def _model(config: ml_collections.ConfigDict) -> nnx.Module:
  """`config.ranker`'s model: the checkpoint's encoder (MiniLM by default)
  or a random tiny BERT (`ranker.tiny`, tests)."""
  r = config.ranker
  overrides = dict(r.get("overrides", {}) or {})
  rngs = nnx.Rngs(config.seed)
  bi = dict(similarity=r.get("similarity", "cosine"),
            scale=r.get("scale", 20.0))
  if r.get("tiny"):
    bert = pretrained_lib.ranker_config(r)
    return (BiEncoderRanker(bert, rngs=rngs, **bi) if r.kind == "bi"
            else CrossEncoderRanker(bert, rngs=rngs))
  checkpoint = pretrained_lib.checkpoint_dir(r.get("checkpoint")
                                             or pretrained_lib.MINILM)
  if r.kind == "bi":
    return load_bi_encoder(checkpoint, **bi, **overrides)
  return load_ranker(checkpoint, rngs=rngs, **overrides)


def build_ranker(config: ml_collections.ConfigDict, inputs: Inputs,
                 mesh: jax.sharding.Mesh) -> Ranker:
  """The ranker of `config.ranker.kind` with its trainer and scorers."""
  model = _model(config)
  _, params = split_params(model)
  rows = BiRows if config.ranker.kind == "bi" else CrossRows
  buckets = segment_buckets(SegmenterConfig(**config.segments.to_dict()),
                            config.ranker.kind)
  trainer, buffer_step, joint_steps = _device_steps(config, model, mesh)
  per_call = rows_per_call(config.eval.rows_per_call, trainer)
  # The scorers share one device step, so each shape compiles once.
  if config.ranker.kind == "bi":
    make_scorer = functools.partial(EmbeddingScorer, embed_into=buffer_step)
  else:
    make_scorer = functools.partial(SegmentScorer, score_into=buffer_step)

  def scorer(segments, **cache):
    return make_scorer(trainer, rows(segments, inputs.queries,
                                     inputs.segmenter),
                       rows_per_call=per_call, buckets=buckets, **cache)
  # A bi-encoder keeps each model's inference embeddings between its dev
  # evaluation and test scoring (the corpus's docids never change).
  cache = {}
  if config.ranker.kind == "bi":
    cache = dict(cache_rows=EVAL_CACHE_ROWS)
  return Ranker(trainer=trainer, pretrained=trainer.put_params(params),
                encoder=model.config,
                scorer=scorer(inputs.eval_segments, **cache),
                train_scorer=scorer(inputs.train_segments),
                scorer_for=scorer, joint_steps=joint_steps)


# Trainers with their scoring and BeST steps, kept for the life of the
# process by model and training settings: the folds of a cross-validation
# (and experiments run one after another in one process, as the tests run
# them) trace and compile each step once, not once per experiment.
_DEVICE_STEPS: dict[tuple, tuple[Trainer, Any, dict]] = {}


def _device_steps(config: ml_collections.ConfigDict, model: nnx.Module,
                  mesh: jax.sharding.Mesh) -> tuple[Trainer, Any, dict]:
  """The kept (trainer, scoring step, joint steps) for models like `model`
  (its kind, config, similarity and scale: what the trainer builds them
  from) on `mesh` with every setting `build_trainer` reads, or new ones."""
  settings = trainer_config(config)
  model_config = model.config
  if config.ranker.kind == "bi":
    similarity, scale = model.similarity, model.scale
    make = lambda rngs: BiEncoderRanker(model_config, similarity=similarity,
                                        scale=scale, rngs=rngs)
  else:
    similarity = scale = None
    make = lambda rngs: CrossEncoderRanker(model_config, rngs=rngs)
  key = (config.ranker.kind, repr(model_config), repr(similarity),
         repr(scale), mesh, json.dumps(
             [settings.optimizer.to_dict(), settings.train.to_dict(),
              settings.logical_axis_rules], sort_keys=True, default=repr))
  if key not in _DEVICE_STEPS:
    trainer = build_trainer(make, settings, mesh=mesh)
    build = (build_embed_into if config.ranker.kind == "bi"
             else build_score_into)
    _DEVICE_STEPS[key] = (trainer, build(trainer), {})
  return _DEVICE_STEPS[key]
