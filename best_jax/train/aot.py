"""Ahead-of-time compilation of the train step for a TPU topology, on CPU.

Catches out-of-memory and sharding errors before a pod is booked (MaxText's
`train_compile.py` idea): the real `trainer.build_trainer` train step is
lowered with abstract inputs on the compile-only devices of a topology such
as `v5e:4x4` (16 chips) or `v4:2x2x4` (v4-32: 16 megacore chips) and compiled
by libtpu, which reports FLOPs and the memory needed per device. Nothing is
allocated and no TPU is needed, only libtpu (`pip install -r
requirements-tpu.txt`).

  python -m best_jax.train.aot --topology v5e:4x4 --topology v4:2x2x4 \
      --model base --dtype bfloat16 --batch 256 --group 2 --length 512

prints one report per topology and exits with status 1, naming the topology
and the memory it would need, when a configuration does not fit in HBM.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
from typing import Any

from best_jax.errors import InputError
from best_jax.train import chips as chips_lib

DEFAULT_CONFIG = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))), "configs", "tiny_cpu.py")


class DoesNotFit(Exception):
  """The compiled train step needs more memory per device than the chip has."""


_ADVICE = ("use a smaller batch or length, gradient accumulation "
           "(train.accumulation_steps), or shard parameters over a model axis")


@dataclasses.dataclass(frozen=True)
class AotReport:
  """What the compiler says about one train step on one topology."""
  topology: str
  chip: str
  devices: int
  hosts: int
  mesh: dict[str, int]
  batch_shape: tuple[int, int, int]  # (groups, group size, length)
  flops_per_device: float
  argument_bytes: int
  output_bytes: int
  alias_bytes: int
  temp_bytes: int
  code_bytes: int
  hbm_bytes: int

  @property
  def flops_per_step(self) -> float:
    return self.flops_per_device * self.devices

  @property
  def tokens_per_step(self) -> int:
    groups, group, length = self.batch_shape
    return groups * group * length

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
    groups, group, length = self.batch_shape
    chip = chips_lib.chip_for_topology(self.topology)
    ideal_s = self.flops_per_device / chip.peak_bf16_flops
    lines = [
        f"topology {self.topology}: {self.devices} x {self.chip}, "
        f"{self.hosts} host(s), mesh {self.mesh}",
        f"  batch {groups} groups x {group} x {length} tokens = "
        f"{self.tokens_per_step:,} tokens/step",
        f"  FLOPs per step {self.flops_per_step:.4g} "
        f"({self.flops_per_device:.4g} per device; "
        f"{ideal_s * 1e3:.1f} ms at the chip's bf16 peak)",
        f"  memory per device {self.peak_bytes / gib:.2f} GiB of "
        f"{self.hbm_bytes / gib:.1f} GiB HBM "
        f"({100 * self.peak_bytes / self.hbm_bytes:.0f}%): arguments "
        f"{self.argument_bytes / gib:.2f}, outputs {self.output_bytes / gib:.2f}"
        f", aliased {self.alias_bytes / gib:.2f}, temporaries "
        f"{self.temp_bytes / gib:.2f}, code {self.code_bytes / gib:.3f}",
        f"  {'fits' if self.fits else 'DOES NOT FIT'}",
    ]
    return "\n".join(lines)


def load_config(spec: str):
  """`path[:arg]` of an ml_collections config file → its `get_config(arg)`."""
  path, _, arg = spec.partition(":")
  if not os.path.isfile(path):
    raise InputError("config file not found", path)
  module_spec = importlib.util.spec_from_file_location("aot_config", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise InputError("config file has no get_config()", path)
  return module.get_config(arg or None)


def model_config(name: str, dtype: str, param_dtype: str):
  """A BertConfig: `base` (BERT-base), `tiny`, or a checkpoint directory."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from best_jax.models.bert import BertConfig  # pylint: disable=g-import-not-at-top
  numerics = dict(dtype=jnp.dtype(dtype), param_dtype=jnp.dtype(param_dtype))
  if name == "base":
    return BertConfig(**numerics)
  if name == "tiny":
    return BertConfig.tiny(**numerics)
  return BertConfig.from_checkpoint(name, **numerics)


def topology_devices(topology_name: str) -> list[Any]:
  """Compile-only devices of a TPU topology (needs libtpu)."""
  # libtpu takes a lock file that another JAX process on this machine may
  # hold; compile-only use does not need the lock.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
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


def compile_train_step(topology_name: str, bert_config, config, *,
                       batch: int, group: int, length: int,
                       hbm_bytes: int | None = None) -> AotReport:
  """Lowers and compiles the trainer's train step for `topology_name`."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from best_jax.models.ranker import CrossEncoderRanker  # pylint: disable=g-import-not-at-top
  from best_jax.train import sharding as sharding_lib  # pylint: disable=g-import-not-at-top
  from best_jax.train.trainer import build_trainer  # pylint: disable=g-import-not-at-top

  chip = chips_lib.chip_for_topology(topology_name)
  devices = topology_devices(topology_name)
  mesh = sharding_lib.make_mesh(config.mesh.shape, config.mesh.axis_names,
                                devices=devices)
  trainer = build_trainer(
      lambda rngs: CrossEncoderRanker(bert_config, rngs=rngs), config,
      mesh=mesh)
  if batch % trainer.batch_multiple:
    raise InputError(f"batch {batch} is not a multiple of the data-parallel "
                     f"size {trainer.batch_multiple} on {topology_name}")
  sharding = trainer.batch_sharding

  def spec(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

  batch_specs = {
      "input_ids": spec((batch, group, length), jnp.int32),
      "attention_mask": spec((batch, group, length), jnp.bool_),
      "token_type_ids": spec((batch, group, length), jnp.int32),
      "labels": spec((batch, group), jnp.float32),
      "mask": spec((batch, group), jnp.bool_),
      "example_mask": spec((batch,), jnp.bool_),
  }
  with jax.set_mesh(mesh):
    lowered = trainer.train_step.lower(trainer.abstract_state, batch_specs)
    try:
      compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as e:
      # The TPU compiler itself refuses programs whose temporaries exceed HBM.
      if "RESOURCE_EXHAUSTED" not in str(e):
        raise
      detail = str(e).splitlines()[0].removeprefix("RESOURCE_EXHAUSTED: ")
      detail = detail.rstrip(".")
      raise DoesNotFit(
          f"{topology_name}: the train step does not fit on a {chip.name} "
          f"(batch {(batch, group, length)}): {detail}; {_ADVICE}") from None
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):  # older jax: one dict per program
    cost = cost[0]
  memory = compiled.memory_analysis()
  return AotReport(
      topology=topology_name, chip=chip.name, devices=len(devices),
      hosts=len({d.process_index for d in devices}),
      mesh={name: int(size) for name, size in mesh.shape.items()},
      batch_shape=(batch, group, length),
      flops_per_device=float(cost.get("flops", 0.0)),
      argument_bytes=int(memory.argument_size_in_bytes),
      output_bytes=int(memory.output_size_in_bytes),
      alias_bytes=int(memory.alias_size_in_bytes),
      temp_bytes=int(memory.temp_size_in_bytes),
      code_bytes=int(memory.generated_code_size_in_bytes),
      hbm_bytes=hbm_bytes or chip.hbm_bytes)


def check_fits(report: AotReport) -> None:
  """Raises DoesNotFit with the numbers when the step exceeds HBM."""
  if not report.fits:
    gib = chips_lib.GIB
    raise DoesNotFit(
        f"{report.topology}: the train step needs {report.peak_bytes / gib:.2f}"
        f" GiB per device but a {report.chip} has "
        f"{report.hbm_bytes / gib:.1f} GiB (batch {report.batch_shape}); "
        f"{_ADVICE}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--topology", action="append", required=True,
                      help="TPU topology, e.g. v5e:4x4 or v4:2x2x4 (repeat)")
  parser.add_argument("--config", default=DEFAULT_CONFIG,
                      help="ml_collections config file[:arg] giving mesh, "
                      "logical_axis_rules, optimizer, train.loss")
  parser.add_argument("--mesh", default=None,
                      help="override config.mesh.shape, e.g. -1,1")
  parser.add_argument("--model", default="base",
                      help="base (BERT-base), tiny, or a checkpoint dir")
  parser.add_argument("--dtype", default="bfloat16")
  parser.add_argument("--param-dtype", default="float32")
  parser.add_argument("--batch", type=int, default=256,
                      help="global batch in groups")
  parser.add_argument("--group", type=int, default=2,
                      help="documents per group (2: pairwise hinge)")
  parser.add_argument("--length", type=int, default=512)
  parser.add_argument("--hbm-gib", type=float, default=None,
                      help="override the chip's HBM per device")
  parser.add_argument("--json", default=None, help="write the reports here")


def main(args: argparse.Namespace) -> int:
  from best_jax.data.files import atomic_write  # pylint: disable=g-import-not-at-top
  config = load_config(args.config)
  if args.mesh:
    config.mesh.shape = tuple(int(x) for x in args.mesh.split(","))
  bert_config = model_config(args.model, args.dtype, args.param_dtype)
  hbm = None if args.hbm_gib is None else int(args.hbm_gib * chips_lib.GIB)
  reports, failures = [], []
  for topology in args.topology:
    try:
      report = compile_train_step(topology, bert_config, config,
                                  batch=args.batch, group=args.group,
                                  length=args.length, hbm_bytes=hbm)
      print(report.format(), flush=True)
      reports.append(report)
      check_fits(report)
    except DoesNotFit as e:
      if not reports or reports[-1].topology != topology:  # compiler refused
        print(f"topology {topology}: DOES NOT FIT", flush=True)
      failures.append(str(e))
    if args.json:  # after each topology: a later one may take long or fail
      with atomic_write(args.json) as f:
        json.dump({"reports": [r.as_dict() for r in reports],
                   "failures": failures}, f, indent=2)
  for failure in failures:
    print(f"error: {failure}", file=sys.stderr)
  return 1 if failures else 0


def _cli(argv: list[str] | None = None) -> int:
  os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host compiles; no TPU
  parser = argparse.ArgumentParser(prog="python -m best_jax.train.aot",
                                   description=__doc__.split("\n")[0])
  add_arguments(parser)
  args = parser.parse_args(argv)
  try:
    return main(args)
  except InputError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(_cli())
