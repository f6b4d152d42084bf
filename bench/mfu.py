"""Training throughput and model FLOP utilisation (MFU) of BERT-base at L = 512.

    python bench/mfu.py --json bench/results/mfu_cpu.json            # CPU
    launch/gpu_single_host.sh --setup -- \
        python bench/mfu.py --batch 64 --json bench/results/mfu_h200.json

A BERT-base-sized cross-encoder ranker (random weights, bf16 activations,
float32 parameters and AdamW state) trains on random `[batch, group, 512]`
token groups through the real `trainer.build_trainer` train step, data
parallel over every local device. FLOPs per step are the whole step's
(`score_vs_torch.program_flops`: XLA's cost analysis of the traced program,
which on a GPU also counts the matrix products; the analytic count below
where it is unavailable); the step time
is the median over `--repeats` runs of `--steps` steps after a warm-up. MFU =
achieved FLOP/s ÷ (device count × the chip's bf16 peak: H200 790 TFLOP/s
measured, TPU v4 275, v5e 197, v5p 459). On a CPU the peak is an estimate,
cores × clock × `--cpu-flops-per-cycle` (32: AVX-512 fp32 FMA, two 256-bit
pipes), stated in the output. An analytic count (6 × non-embedding
parameters + 12 × layers × L × hidden, per token) is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def analytic_train_flops(bert_config, non_embedding_params: int,
                         tokens: int, length: int) -> float:
  """6·N·T for the dense layers plus 12·layers·L·d·T for attention."""
  attention = 12 * bert_config.num_layers * length * bert_config.hidden_size
  return float(tokens) * (6 * non_embedding_params + attention)


def analytic_joint_flops(train_flops, segment_tokens: float,
                         selected_tokens: float) -> float:
  """BeST's joint step: θ⁽⁰⁾ trains on every segment, a dropout-free
  forward pass (a third of training) scores them, θ⁽¹⁾ trains on the chosen
  one per document; `train_flops(tokens)` counts training."""
  return (train_flops(segment_tokens) * 4 / 3
          + train_flops(selected_tokens))


def random_batch(rng: np.random.Generator, batch: int, group: int,
                 length: int, vocab: int, segments: int | None = None
                 ) -> dict[str, np.ndarray]:
  """Full-length rows `[batch, group, (segments,) length]`, the first
  document of each group the positive."""
  lead = (batch, group) if segments is None else (batch, group, segments)
  shape = lead + (length,)
  input_ids = rng.integers(min(1000, vocab // 2), vocab, shape).astype(np.int32)
  input_ids[..., 0] = min(101, vocab - 1)  # [CLS]
  return {
      "input_ids": input_ids,
      "attention_mask": np.ones(shape, bool),  # full L = 512 segments
      "token_type_ids": (np.arange(length) >= 32).astype(np.int32)
                        * np.ones(shape, np.int32),
      "labels": np.tile(np.eye(1, group, dtype=np.float32), (batch, 1)),
      "mask": np.ones(lead, bool),
      "example_mask": np.ones(batch, bool),
  }


def peak_flops(device_kind: str, cpu: dict, flops_per_cycle: int
               ) -> tuple[float | None, str]:
  """(peak FLOP/s of one device, how it was obtained)."""
  from best_jax.train import chips  # pylint: disable=g-import-not-at-top
  chip = chips.chip_for_device_kind(device_kind)
  if chip is not None:
    return chip.peak_bf16_flops, f"{chip.name} bf16 peak"
  if device_kind.lower() == "cpu" and cpu.get("mhz"):
    peak = cpu["cores"] * cpu["mhz"] * 1e6 * flops_per_cycle
    return peak, (f"CPU estimate: {cpu['cores']} cores x {cpu['mhz']:.0f} MHz"
                  f" x {flops_per_cycle} FLOP/cycle")
  return None, f"no peak known for {device_kind!r}"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch", type=int, default=1,
                      help="global batch in groups (1 on a CPU; e.g. 64 on "
                      "an H200)")
  parser.add_argument("--group", type=int, default=2)
  parser.add_argument("--step", choices=("train", "joint"), default="train",
                      help="the train step, or BeST's joint step (two models, "
                      "the config's segments.k_train segments per document)")
  parser.add_argument("--length", type=int, default=512)
  parser.add_argument("--dtype", default="bfloat16")
  parser.add_argument("--param-dtype", default="float32")
  parser.add_argument("--model", default="base",
                      help="base, tiny, or a checkpoint directory")
  parser.add_argument("--config", default=os.path.join(ROOT, "configs",
                                                        "tiny_cpu.py"))
  parser.add_argument("--steps", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--cpu-flops-per-cycle", type=int, default=32)
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)

  import jax  # pylint: disable=g-import-not-at-top
  import machine  # pylint: disable=g-import-not-at-top
  from score_vs_torch import program_flops  # pylint: disable=g-import-not-at-top
  from best_jax.data.files import atomic_write  # pylint: disable=g-import-not-at-top
  from best_jax.models.ranker import CrossEncoderRanker  # pylint: disable=g-import-not-at-top
  from best_jax.config import load_config  # pylint: disable=g-import-not-at-top
  from best_jax.models.pretrained import bert_config  # pylint: disable=g-import-not-at-top
  from best_jax.train import best as best_lib  # pylint: disable=g-import-not-at-top
  from best_jax.train.trainer import build_trainer  # pylint: disable=g-import-not-at-top

  config = load_config(args.config)
  model = bert_config(args.model, config.ranker, args.dtype, args.param_dtype)
  trainer = build_trainer(
      lambda rngs: CrossEncoderRanker(model, rngs=rngs), config)
  devices = trainer.mesh.size
  if args.batch % trainer.batch_multiple:
    parser.error(f"--batch must be a multiple of {trainer.batch_multiple}")
  joint = args.step == "joint"
  segments = config.segments.k_train if joint else None
  host_batch = random_batch(np.random.default_rng(0), args.batch, args.group,
                            args.length, model.vocab_size, segments)
  batch = trainer.put(host_batch)
  tokens = args.batch * args.group * (segments or 1) * args.length
  if joint:
    step = best_lib.build_joint_step(trainer,
                                     **best_lib.joint_settings(config))
    abstract = (trainer.abstract_state, trainer.abstract_state)
  else:
    step, abstract = trainer.train_step, trainer.abstract_state

  start = time.perf_counter()
  with jax.set_mesh(trainer.mesh):
    lowered = step.lower(abstract, batch)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
  flops_per_step = program_flops(lowered)

  params = trainer.abstract_state.params
  embedding = sum(int(np.prod(x.shape)) for path, x in
                  jax.tree.leaves_with_path(params)
                  if "embeddings" in jax.tree_util.keystr(path))
  total = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))

  def train_flops(n: float) -> float:
    return analytic_train_flops(model, total - embedding, n,
                                args.length)
  analytic = (analytic_joint_flops(train_flops, tokens,
                                   args.batch * args.group * args.length)
              if joint else train_flops(tokens))

  state = (trainer.init(0), trainer.init(1)) if joint else trainer.init(0)
  state, metrics = compiled(state, batch)  # warm-up
  jax.block_until_ready(metrics)
  step_times = []
  for _ in range(args.repeats):
    start = time.perf_counter()
    for _ in range(args.steps):
      state, metrics = compiled(state, batch)
    jax.block_until_ready((state, metrics))
    step_times.append((time.perf_counter() - start) / args.steps)
  step_s = statistics.median(step_times)

  info = machine.describe()
  peak, peak_source = peak_flops(info["device_kind"], info["cpu"],
                                 args.cpu_flops_per_cycle)
  flops_source = "program"
  if flops_per_step is None:  # No cost analysis: the analytic count.
    flops_per_step, flops_source = analytic, "analytic"
  achieved = flops_per_step / step_s
  mfu = None if peak is None else achieved / (peak * devices)
  result = {
      "step": args.step, "segments": segments,
      "model": args.model, "parameters": total,
      "non_embedding_parameters": total - embedding,
      "dtype": args.dtype, "param_dtype": args.param_dtype,
      "batch_groups": args.batch, "group": args.group, "length": args.length,
      "tokens_per_step": tokens, "devices": devices,
      "compile_s": compile_s, "step_s_median": step_s,
      "step_s_all": step_times, "tokens_per_s": tokens / step_s,
      "flops_per_step": flops_per_step, "flops_source": flops_source,
      "flops_per_step_analytic": analytic,
      "flop_per_s": achieved, "peak_flop_per_s_per_device": peak,
      "peak_source": peak_source, "mfu": mfu,
      "loss": float(jax.device_get(metrics["loss"])),
      "machine": info,
  }
  print(f"device        {devices} x {info['device_kind']} "
        f"({info['backend']}), {info['cpu']['cores']} CPU cores "
        f"{info['cpu']['model']}")
  print(f"model         {args.model}: {total / 1e6:.1f}M parameters, "
        f"{args.dtype} activations, {args.param_dtype} parameters")
  print(f"step          {args.step}: batch {args.batch} x {args.group} x "
        f"{f'{segments} x ' if joint else ''}{args.length} = "
        f"{tokens} tokens; compile {compile_s:.1f} s")
  print(f"step time     {step_s:.3f} s median "
        f"({', '.join(f'{t:.3f}' for t in step_times)})")
  print(f"tokens/s      {tokens / step_s:,.1f}")
  print(f"FLOPs/step    {flops_per_step:.4g} {flops_source} "
        f"({analytic:.4g} analytic, ratio "
        f"{flops_per_step / analytic:.2f})")
  print(f"FLOP/s        {achieved:.4g}")
  print(f"peak          {'n/a' if peak is None else f'{peak:.4g}'} per device"
        f" ({peak_source})")
  print(f"MFU           {'n/a' if mfu is None else f'{100 * mfu:.2f}%'}")
  if args.json:
    with atomic_write(args.json) as f:
      json.dump(result, f, indent=2)
  return 0


if __name__ == "__main__":
  sys.exit(main())
