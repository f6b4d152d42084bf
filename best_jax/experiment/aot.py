"""Ahead-of-time compilation, on CPU, of every jitted step an experiment runs,
for a TPU topology: FLOPs and memory per chip, and whether it fits.

Catches out-of-memory and sharding errors before a pod is booked (MaxText's
`train_compile.py` idea). For the config's regimes, the steps `best_jax
train` builds are lowered with abstract inputs on the compile-only devices of
a topology such as `v5e:4x4` (16 chips) or `v4:2x2x4` (v4-32: 16 megacore
chips) and compiled by libtpu:

  train_step   the plain step, `[batch, group, max_len]` (FirstP, MaxP-all,
               GoldP, BeST iterations on selected segments)
  joint_step   BeST's iteration-1 step, `[batch, group, k_train, max_len]`
               (not with `best.theta0=pretrained`: no joint step)
  train_step_unpadded, joint_step_unpadded   with `train.unpadded` (the
               cross-encoder): the same steps encoding their rows unpadded
               (`train.token_budget`) in a bound on the budgets a run
               chooses from its data (`token_budget.largest_budget`: a
               stream of every row's tokens, every row attended at full
               length), the largest of the executables those steps compile to
  score_step   segment scoring, `[eval.rows_per_call, max_len]` rows (a
               bi-encoder's `embed_step`: each segment embedded once, rows
               of `text_row_len`)
  qds_train_step, qds_score_step   the QDS-Transformer's (regime `qds`)

Nothing is allocated and no TPU is needed, only libtpu (`pip install -r
requirements-tpu.txt`):

  python -m best_jax aot --config configs/squad_longdoc.py \\
      --topology v5e:4x4 --model base --dtype bfloat16

prints one report per (topology, step) and exits with status 1, naming the
step, the topology and the memory it would need, when one does not fit.
`--topology` repeats, but a BERT-base topology's padded steps held 10-17 GiB
of host RAM while compiling, and v4-32's unpadded joint step more than 24:
one topology per process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from jax.experimental import topologies

from best_jax.config import add_config_arguments, load_config
from best_jax.data.files import atomic_write
from best_jax.data.pipeline import EXAMPLE_MASK, Feature
from best_jax.errors import InputError
from best_jax.experiment import checks
from best_jax.experiment.examples import model_features
from best_jax.experiment.models import EVAL_CACHE_ROWS, trainer_config
from best_jax.experiment.qds import qds_configs
from best_jax.experiment.rows import row_features
from best_jax.models import BertConfig, CrossEncoderRanker
from best_jax.models import pretrained
from best_jax.models.bi_encoder import BiEncoderRanker
from best_jax.models.qds import QdsRanker
from best_jax.segments.config import SegmenterConfig
from best_jax.select.embedding import build_embed_into
from best_jax.select.selection import build_score_into
from best_jax.train import best as best_lib
from best_jax.train import chips as chips_lib
from best_jax.train import sharding as sharding_lib
from best_jax.train import token_budget
from best_jax.train.trainer import Trainer, build_trainer

# Pairs of the scoring buffer `[pairs, segments]` in the report. A
# bi-encoder's buffer holds segment embeddings `[n, hidden]`: as many as its
# inference scorer keeps on the devices (`EVAL_CACHE_ROWS`).
SCORED_PAIRS = 1024
_ADVICE = ("use a smaller batch or length, gradient accumulation "
           "(train.accumulation_steps), fewer rows per scoring call "
           "(eval.rows_per_call), or shard parameters over a model axis")


class DoesNotFit(Exception):
  """A compiled step needs more memory per device than the chip has."""


@dataclasses.dataclass(frozen=True)
class AotReport:
  """What the compiler says about one step on one topology."""
  topology: str
  step: str
  chip: str
  devices: int
  hosts: int
  mesh: dict[str, int]
  batch_shape: tuple[int, ...]  # the token array, e.g. (groups, group, len)
  flops_per_device: float
  argument_bytes: int
  output_bytes: int
  alias_bytes: int
  temp_bytes: int
  code_bytes: int
  hbm_bytes: int
  # Unpadded steps: the stream's tokens per data shard and micro-batch.
  stream_tokens: int = 0

  @property
  def flops_per_step(self) -> float:
    return self.flops_per_device * self.devices

  @property
  def tokens_per_step(self) -> int:
    return math.prod(self.batch_shape)

  @property
  def peak_bytes(self) -> int:
    """Estimate of the device memory the step needs (donated inputs alias
    their outputs, so they count once)."""
    return (self.argument_bytes + self.output_bytes - self.alias_bytes
            + self.temp_bytes + self.code_bytes)

  @property
  def fits(self) -> bool:
    return self.peak_bytes <= self.hbm_bytes

  def as_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    out.update(flops_per_step=self.flops_per_step,
               tokens_per_step=self.tokens_per_step,
               peak_bytes=self.peak_bytes, fits=self.fits)
    return out

  def format(self) -> str:
    gib = chips_lib.GIB
    chip = chips_lib.chip_for_topology(self.topology)
    ideal_s = self.flops_per_device / chip.peak_bf16_flops
    return "\n".join([
        f"topology {self.topology}, {self.step}: {self.devices} x "
        f"{self.chip}, {self.hosts} host(s), mesh {self.mesh}",
        f"  tokens {' x '.join(map(str, self.batch_shape))} = "
        f"{self.tokens_per_step:,} per step" + (
            f", unpadded: a stream of {self.stream_tokens:,} per data shard "
            "and micro-batch, every row attended at full length (a bound "
            "on the budgets a run chooses)" if self.stream_tokens else ""),
        f"  FLOPs per step {self.flops_per_step:.4g} "
        f"({self.flops_per_device:.4g} per device; "
        f"{ideal_s * 1e3:.1f} ms at the chip's bf16 peak)",
        f"  memory per device {self.peak_bytes / gib:.2f} GiB of "
        f"{self.hbm_bytes / gib:.1f} GiB HBM "
        f"({100 * self.peak_bytes / self.hbm_bytes:.0f}%): arguments "
        f"{self.argument_bytes / gib:.2f}, outputs {self.output_bytes / gib:.2f}"
        f", aliased {self.alias_bytes / gib:.2f}, temporaries "
        f"{self.temp_bytes / gib:.2f}, code {self.code_bytes / gib:.3f}",
        f"  {'fits' if self.fits else 'DOES NOT FIT'}"])


def check_fits(report: AotReport) -> None:
  """Raises DoesNotFit with the numbers when the step exceeds HBM."""
  if not report.fits:
    gib = chips_lib.GIB
    raise DoesNotFit(
        f"{report.topology}: {report.step} needs "
        f"{report.peak_bytes / gib:.2f} GiB per device but a {report.chip} "
        f"has {report.hbm_bytes / gib:.1f} GiB (tokens {report.batch_shape});"
        f" {_ADVICE}")


def topology_devices(topology_name: str) -> list[Any]:
  """Compile-only devices of a TPU topology (needs libtpu)."""
  # libtpu takes a lock file that another JAX process on this machine may
  # hold; compile-only use does not need the lock.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  kwargs = {}
  if topology_name.lower().startswith("v4:"):
    kwargs["chip_config_name"] = "megacore"  # one device per chip, as on pods
  try:
    return list(topologies.get_topology_desc(
        platform="tpu", topology_name=topology_name, **kwargs).devices)
  except Exception as e:  # pylint: disable=broad-except
    message = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise InputError(f"cannot describe TPU topology {topology_name!r} "
                     f"(is libtpu installed? pip install -r "
                     f"requirements-tpu.txt): {message}") from None


def _abstract(features: dict[str, Feature], rows: int,
              sharding: jax.NamedSharding) -> dict[str, jax.ShapeDtypeStruct]:
  specs = {name: jax.ShapeDtypeStruct((rows,) + f.shape, f.dtype,
                                      sharding=sharding)
           for name, f in features.items()}
  specs[EXAMPLE_MASK] = jax.ShapeDtypeStruct((rows,), bool, sharding=sharding)
  return specs


def _steps(config: ml_collections.ConfigDict, trainer: Trainer, *,
           prefix: str, features, row_length: int, segments: int,
           joint: bool, bi: bool = False, unpadded: bool = False):
  """(name, jitted, abstract args, token shape, stream tokens per unit or
  0 when padded) of one model's steps;
  `features(num_segments or None)` gives a training example's shapes;
  `segments`: the scoring buffer's columns (the joint step's are
  `segments.k_train`); `unpadded`: also the training steps at
  `token_budget.largest_budget`."""
  t = config.train
  replicated = jax.NamedSharding(trainer.mesh, jax.P())
  sharding = trainer.batch_sharding
  shards = token_budget.data_shards(sharding)

  def tokens(spec):
    return (t.batch_size,) + spec["input_ids"].shape

  def with_unpadded(name, step, state, example):
    args = (state, _abstract(example, t.batch_size, sharding))
    found = [(name, step, args, tokens(example), 0)]
    if unpadded:
      budget = token_budget.largest_budget(
          math.prod(example["input_ids"].shape), t.batch_size,
          steps=t.get("accumulation_steps", 1), shards=shards)
      found.append((f"{name}_unpadded", step, args + (budget,),
                    tokens(example), budget.tokens))
    return found
  out = with_unpadded(f"{prefix}train_step", trainer.train_step,
                      trainer.abstract_state, features(None))
  if joint:
    step = best_lib.build_joint_step(trainer,
                                     **best_lib.joint_settings(config))
    out += with_unpadded("joint_step", step, (trainer.abstract_state,
                                              trainer.abstract_state),
                         features(config.segments.k_train))
  rows = config.eval.rows_per_call
  rows_spec = dict(row_features(row_length), segment=Feature((), jnp.int32),
                   **{"index" if bi else "pair": Feature((), jnp.int32)})
  if bi:  # Each segment (and query) is embedded once, then compared.
    name, jitted = "embed_step", build_embed_into(trainer)
    hidden = trainer.abstract_params()["encoder"]["embeddings"]["word"][
        "embedding"].shape[-1]
    buffer = jax.ShapeDtypeStruct((EVAL_CACHE_ROWS, hidden),
                                  jnp.float32, sharding=replicated)
  else:
    name, jitted = f"{prefix}score_step", build_score_into(trainer)
    buffer = jax.ShapeDtypeStruct((SCORED_PAIRS, segments), jnp.float32,
                                  sharding=replicated)
  out.append((name, jitted, (trainer.abstract_params(), buffer,
                             _abstract(rows_spec, rows, sharding)),
              (rows, row_length), 0))
  return out


def compile_steps(topology_name: str, config: ml_collections.ConfigDict,
                  model: BertConfig, *, hbm_bytes: int | None = None
                  ) -> Iterator[AotReport]:
  """Compiles every step `config`'s regimes use on `topology_name`, one
  report as each step compiles (a slow compile shows the earlier ones)."""
  chip = chips_lib.chip_for_topology(topology_name)
  devices = topology_devices(topology_name)
  mesh = sharding_lib.make_mesh(config.mesh.shape, config.mesh.axis_names,
                                devices=devices)
  regimes = set(config.regimes)
  settings = trainer_config(config)
  steps = []
  if regimes - {"qds"}:
    kind = config.ranker.kind
    if kind == "bi":
      make = lambda rngs: BiEncoderRanker(model, rngs=rngs)
    else:
      make = lambda rngs: CrossEncoderRanker(model, rngs=rngs)
    trainer = build_trainer(make, settings, mesh)
    s = config.segments
    segmenter = SegmenterConfig(**s.to_dict())
    steps += _steps(
        config, trainer, prefix="",
        features=lambda n: model_features(kind, config.train.group_size,
                                          segmenter, n),
        row_length=(segmenter.text_row_len if kind == "bi" else s.max_len),
        segments=s.max_segments or s.k_train,
        joint=("best" in regimes
               and config.best.get("theta0", "joint") == "joint"),
        bi=kind == "bi",
        unpadded=checks.encodes_unpadded(config))
  if "qds" in regimes:
    _, qds = qds_configs(config, start_id=1)  # Any id: shapes only
    qds_model = dataclasses.replace(model,
                                    max_position_embeddings=config.qds.max_len)
    settings.optimizer.learning_rate = config.qds.learning_rate
    settings.train.loss = config.qds.loss
    trainer = build_trainer(lambda rngs: QdsRanker(qds_model, qds, rngs=rngs),
                            settings, mesh)
    qds_len = config.qds.max_len
    steps += _steps(
        config, trainer, prefix="qds_",
        features=lambda n: dict(
            {k: Feature((config.train.group_size,) + f.shape, f.dtype)
             for k, f in row_features(qds_len).items()},
            labels=Feature((config.train.group_size,), jnp.float32),
            mask=Feature((config.train.group_size,), bool)),
        row_length=qds_len, segments=1, joint=False)
  for name, jitted, args, shape, stream in steps:
    with jax.set_mesh(mesh):
      try:
        compiled = jitted.lower(*args).compile()
      except jax.errors.JaxRuntimeError as e:
        # The TPU compiler refuses programs whose temporaries exceed HBM.
        if "RESOURCE_EXHAUSTED" not in str(e):
          raise
        detail = str(e).splitlines()[0].removeprefix("RESOURCE_EXHAUSTED: ")
        raise DoesNotFit(f"{topology_name}: {name} does not fit on a "
                         f"{chip.name} (tokens {shape}): "
                         f"{detail.rstrip('.')}; {_ADVICE}") from None
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):  # older jax: one dict per program
      cost = cost[0]
    memory = compiled.memory_analysis()
    yield AotReport(
        topology=topology_name, step=name, chip=chip.name,
        devices=len(devices), hosts=len({d.process_index for d in devices}),
        mesh={axis: int(size) for axis, size in mesh.shape.items()},
        batch_shape=tuple(shape),
        flops_per_device=float(cost.get("flops", 0.0)),
        argument_bytes=int(memory.argument_size_in_bytes),
        output_bytes=int(memory.output_size_in_bytes),
        alias_bytes=int(memory.alias_size_in_bytes),
        temp_bytes=int(memory.temp_size_in_bytes),
        code_bytes=int(memory.generated_code_size_in_bytes),
        hbm_bytes=hbm_bytes or chip.hbm_bytes, stream_tokens=stream)


def _write_json(path: str | None, reports: list[AotReport],
                failures: list[str]) -> None:
  if path:
    with atomic_write(path) as f:
      json.dump({"reports": [r.as_dict() for r in reports],
                 "failures": failures}, f, indent=2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
  add_config_arguments(parser)
  parser.add_argument("--topology", action="append", required=True,
                      help="TPU topology, e.g. v5e:4x4 or v4:2x2x4 (repeat)")
  parser.add_argument("--model", default="config",
                      help="config (the config's checkpoint), base "
                      "(BERT-base), tiny, or a checkpoint directory")
  parser.add_argument("--dtype", default="bfloat16")
  parser.add_argument("--param-dtype", default="float32")
  parser.add_argument("--hbm-gib", type=float, default=None,
                      help="override the chip's HBM per device")
  parser.add_argument("--json", default=None, help="write the reports here")


def main(args: argparse.Namespace) -> int:
  os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host compiles; no TPU
  config = load_config(args.config, getattr(args, "config_overrides", []))
  model = pretrained.bert_config(args.model, config.ranker, args.dtype,
                                 args.param_dtype)
  hbm = None if args.hbm_gib is None else int(args.hbm_gib * chips_lib.GIB)
  reports, failures = [], []
  for topology in args.topology:
    try:
      for report in compile_steps(topology, config, model, hbm_bytes=hbm):
        print(report.format(), flush=True)
        reports.append(report)
        try:
          check_fits(report)
        except DoesNotFit as e:
          failures.append(str(e))
        _write_json(args.json, reports, failures)  # a later step may be slow
    except DoesNotFit as e:  # the compiler itself refused
      print(f"topology {topology}: DOES NOT FIT", flush=True)
      failures.append(str(e))
      _write_json(args.json, reports, failures)
  for failure in failures:
    print(f"error: {failure}", file=sys.stderr)
  return 1 if failures else 0
