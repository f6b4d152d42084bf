"""best_jax's product train and score steps vs PyTorch `transformers`, same weights.

    pip install torch==2.13.0          # reference only, never a requirement
    python bench/score_vs_torch.py --json bench/results/score_vs_torch.json

What runs on the best_jax side is what `best_jax train` runs: a `Trainer`
built by `trainer.build_trainer` from a real cross-encoder config (default
`configs/squad_longdoc.py:cpu`: its optimizer — AdamW with warmup/decay,
weight-decay mask and clipping —, its loss, mesh and sharding rules, the
checkpoint's dropout), the jitted, donated `train_step` on `trainer.put`
batches, and the scorer's device step `selection.build_score_into` (what
`SegmentScorer` runs for every chunk of selection and evaluation: put the
rows, the jitted forward pass, the jitted scatter of the scores into a
device buffer; here also fetched). The model's own defaults choose the
attention form (`BertConfig.attention_block=None`); the JSON records the
configuration and the plan chosen per shape.

PyTorch side: `BertModel` (no pooler) + the same linear head; scoring under
`torch.inference_mode()`; training eager with the same AdamW (weight decay
off for LayerNorm and biases), gradient clipping, linear warmup/decay
schedule, hinge loss and dropout.

Inputs are `[CLS] q [SEP] segment [SEP]`-shaped random ids (one half-padded
row per batch): scoring batch 32 at L = 128 / 256 / 512, training 16 pairs at
L = 256. After one warm-up call each the sides alternate A B A B for
`--repeats` pairs; `ratio` = best_jax throughput ÷ PyTorch throughput per
pair from wall time, `cpu_ratio` from process CPU time. Median, min and max
go to the JSON with the machine (`bench/machine.py`: processor model and
flags, threads and the environment that sets them, XLA flags, jax/jaxlib/
torch versions) and the load averages; the first printed line says the same.

Measure on a quiet machine: the ratios rise when other work shares the cores
(PyTorch's OpenMP threads lose more to it than XLA's thread pool), so the
bench measures the cores other processes and the hypervisor kept busy
during the run (/proc/stat) and warns when they were not idle. In float32
on the CPU (not with `--family`) each side's matmul rate at the model's
feed-forward shape is measured first, and every scoring row reports the
share of it each side reaches (matrix-product FLOPs counted analytically):
how far above PyTorch the hardware lets best_jax go.

With `--random-bert base` both sides load one
random BERT-base checkpoint written for the run; `--dtype bfloat16` runs
best_jax in bf16 activations (float32 parameters) and PyTorch under bf16
autocast; `--torch-device cuda` puts the reference on a GPU. With
`--family F` (bert, electra, roberta, xlm-roberta, modernbert) both sides
score a random base-size *ForSequenceClassification of that family written
for the run, the reference being transformers' own class (ModernBERT against
transformers' ModernBERT), at L = 512, batch 8. FLOPs per call
(`program_flops`) and, on a known chip, MFU are reported (XLA
counts a while loop's body once, so on a one-device CPU, where attention runs
blocked in a loop, the figure leaves most attention FLOPs out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_CONFIG = os.path.join(ROOT, "configs", "squad_longdoc.py") + ":cpu"
# Cores kept busy by other processes (or the hypervisor) beyond which the run
# is not quiet: one busy process beside the bench raised the scoring ratio
# from 1.15 to 1.61 at L = 128 (docs/measurements.md).
QUIET_CORES = 0.1
# Shapes of the random reference checkpoints (Hugging Face config names).
RANDOM_BERTS = {
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),
    "small": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=256),
}


# `--family F`: transformers' config fields of each encoder family's base
# model (ModernBertConfig's defaults are ModernBERT-base's); random weights.
_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
             intermediate_size=3072)
_ROBERTA = dict(_BASE, max_position_embeddings=514, type_vocab_size=1,
                pad_token_id=1, bos_token_id=0, eos_token_id=2)
FAMILY_BASES = {
    "bert": _BASE,
    "electra": dict(_BASE, embedding_size=768),
    "roberta": dict(_ROBERTA, vocab_size=50265),
    "xlm-roberta": dict(_ROBERTA, vocab_size=250002),
    "modernbert": {},
}


def random_inputs(batch: int, length: int, seed: int = 0,
                  vocab: int = 30522) -> dict:
  """Query–segment-shaped token ids; the last row is half padding."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(min(1000, vocab // 2), vocab, (batch, length))
  lengths = np.full(batch, length)
  lengths[-1] = length // 2
  mask = np.arange(length)[None] < lengths[:, None]
  query = 12
  ids[:, 0], ids[:, query] = 101, 102
  ids[np.arange(batch), lengths - 1] = 102
  types = ((np.arange(length)[None] > query) & mask).astype(np.int64)
  return {"input_ids": np.where(mask, ids, 0).astype(np.int64),
          "attention_mask": mask.astype(np.int64),
          "token_type_ids": types}


def summary(values: list[float]) -> dict:
  return {"median": statistics.median(values), "min": min(values),
          "max": max(values), "all": values}


def alternate(run_jax, run_torch, items: int, repeats: int) -> dict:
  """Warm-up, then A B A B timing; throughputs (items/s) and ratios."""
  run_jax()
  run_torch()
  sides = {"best_jax": run_jax, "torch": run_torch}
  wall = {name: [] for name in sides}
  cpu = {name: [] for name in sides}
  for _ in range(repeats):
    for name, run in sides.items():
      wall_0, cpu_0 = time.perf_counter(), time.process_time()
      run()
      wall[name].append(items / (time.perf_counter() - wall_0))
      cpu[name].append(items / max(time.process_time() - cpu_0, 1e-9))
  return {
      "per_second": {name: summary(v) for name, v in wall.items()},
      "per_cpu_second": {name: summary(v) for name, v in cpu.items()},
      "ratio": summary([a / b for a, b in zip(wall["best_jax"],
                                              wall["torch"])]),
      "cpu_ratio": summary([a / b for a, b in zip(cpu["best_jax"],
                                                  cpu["torch"])]),
  }


def write_random_bert(directory: str, size: str, seed: int = 0) -> str:
  """A random BERT checkpoint (config.json + model.safetensors) via torch."""
  import torch
  import transformers
  torch.manual_seed(seed)
  config = transformers.BertConfig(**RANDOM_BERTS[size])
  transformers.BertModel(config, add_pooling_layer=False).save_pretrained(
      directory, safe_serialization=True)
  return directory


def write_random_classifier(directory: str, family: str, seed: int = 0) -> str:
  """A random base-size *ForSequenceClassification (one label) of `family`,
  saved by transformers (config.json + model.safetensors)."""
  import torch
  import transformers
  torch.manual_seed(seed)
  config = transformers.AutoConfig.for_model(family, num_labels=1,
                                             **FAMILY_BASES[family])
  transformers.AutoModelForSequenceClassification.from_config(
      config).save_pretrained(directory, safe_serialization=True)
  return directory


class TorchClassifier:
  """transformers' own *ForSequenceClassification of a checkpoint (its SDPA
  attention): the reference for `--family`, scoring only."""

  def __init__(self, checkpoint: str, device: str):
    import inspect
    import torch
    import transformers
    self.torch = torch
    self.device = device
    self.encoder = transformers.AutoModelForSequenceClassification.from_pretrained(
        checkpoint, attn_implementation="sdpa").to(device)
    self.accepts = set(inspect.signature(self.encoder.forward).parameters)

  def __call__(self, inputs: dict):
    inputs = {k: v for k, v in inputs.items() if k in self.accepts}
    return self.encoder(**inputs).logits[:, 0]


class TorchRanker:
  """`BertModel` (no pooler) + a linear head on [CLS], as in best_jax."""

  def __init__(self, checkpoint: str, head_kernel, head_bias, device: str,
               dropout: dict):
    import torch
    import transformers
    self.torch = torch
    self.device = device
    self.encoder = transformers.BertModel.from_pretrained(
        checkpoint, add_pooling_layer=False, **dropout).to(device)
    self.head = torch.nn.Linear(head_kernel.shape[0], 1).to(device)
    with torch.no_grad():
      self.head.weight.copy_(torch.tensor(np.asarray(head_kernel).T))
      self.head.bias.copy_(torch.tensor(np.asarray(head_bias)))

  def named_parameters(self):
    return (list(self.encoder.named_parameters())
            + [("head." + n, p) for n, p in self.head.named_parameters()])

  def __call__(self, inputs: dict):
    hidden = self.encoder(**inputs).last_hidden_state
    return self.head(hidden[:, 0].float())[:, 0]


def torch_optimizer(ranker: TorchRanker, opt):
  """AdamW + clipping + linear warmup/decay as `make_optimizer(config)`."""
  import torch
  decay, no_decay = [], []
  for name, param in ranker.named_parameters():
    exempt = "layernorm" in name.lower() or name.endswith("bias")
    (no_decay if exempt else decay).append(param)
  optimizer = torch.optim.AdamW(
      [{"params": decay, "weight_decay": opt.weight_decay},
       {"params": no_decay, "weight_decay": 0.0}],
      lr=opt.learning_rate, betas=(opt.b1, opt.b2), eps=opt.eps)

  def factor(step):
    if step < opt.warmup_steps:
      return step / max(1, opt.warmup_steps)
    return max(0.0, (opt.total_steps - step)
               / max(1, opt.total_steps - opt.warmup_steps))
  return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def matmul_peak(rows: int, inner: int, cols: int, repeats: int = 10) -> dict:
  """float32 matrix-product rate (FLOP/s, best of `repeats`) of each side's
  BLAS at one shape: the most either side can reach on this processor."""
  import jax
  import jax.numpy as jnp
  import torch
  rng = np.random.default_rng(0)
  a = rng.standard_normal((rows, inner), np.float32)
  b = rng.standard_normal((inner, cols), np.float32)
  jax_a, jax_b = jnp.asarray(a), jnp.asarray(b)
  product = jax.jit(jnp.matmul)
  torch_a, torch_b = torch.from_numpy(a), torch.from_numpy(b)
  sides = {"best_jax": lambda: product(jax_a, jax_b).block_until_ready(),
           "torch": lambda: torch.mm(torch_a, torch_b)}
  peak = {}
  for name, run in sides.items():
    run()
    times = []
    for _ in range(repeats):
      start = time.perf_counter()
      run()
      times.append(time.perf_counter() - start)
    peak[name] = 2 * rows * inner * cols / min(times)
  return peak


def scoring_flops(c, batch: int, length: int) -> float:
  """Matrix-product FLOPs of scoring `batch` full rows as best_jax computes
  them: every layer over all tokens but the last, which runs [CLS] only
  (keys and values still over all tokens). XLA's cost analysis cannot give
  this on one CPU device: it counts the blocked attention loop's body once."""
  h, i, n = c.hidden_size, c.intermediate_size, length
  token = 2 * (4 * h * h + 2 * h * i) + 4 * n * h  # projections, FFN, attention
  last = n * 4 * h * h + 2 * (2 * h * h + 2 * h * i) + 4 * n * h
  return batch * ((c.num_layers - 1) * n * token + last)


def program_flops(lowered) -> float | None:
  """FLOPs of one call of a lowered program (`jitted.lower(*args)`; every
  device's share), from XLA's cost analysis of its HLO, before any backend
  pass, run by the CPU client whatever the backend (None when unavailable).

  Not the compiled module's count: XLA:GPU compiles matrix products into
  cuBLAS calls that its cost analysis leaves out (on an H200 it gave 3.8e11
  for a BERT-base scoring batch of 5.85e12 FLOPs), and over a mesh it counts
  one device's share. Not `Lowered.cost_analysis()` either: JAX does not
  offer it on backends behind the PJRT C API (the CUDA and TPU plugins).
  """
  import jax
  try:
    from jax._src.lib import _jax  # XLA's HLO cost analysis: no public API.
    module = lowered.compiler_ir("hlo").as_hlo_module()
    cost = _jax.hlo_module_cost_analysis(jax.devices("cpu")[0].client, module)
  except Exception:  # pylint: disable=broad-except
    return None
  flops = (cost or {}).get("flops")
  return float(flops) if flops else None


class Product:
  """The model, Trainer and state that `best_jax train` would build."""

  def __init__(self, config_spec: str, checkpoint: str | None, dtype: str):
    import jax.numpy as jnp
    import ml_collections
    from flax import nnx

    from best_jax.models import CrossEncoderRanker, load_ranker
    from best_jax.models.pretrained import checkpoint_dir
    from best_jax.config import load_config
    from best_jax.train.state import split_params
    from best_jax.train.trainer import build_trainer

    self.config = load_config(config_spec)
    config = self.config
    if (config.ranker.get("kind", "cross") != "cross"
        or config.train.loss != "pairwise_hinge"):
      raise SystemExit(
          f"{config_spec}: the reference side is a cross-encoder trained "
          "with the pairwise hinge; use a config with ranker.kind='cross' "
          "and train.loss='pairwise_hinge' (e.g. the default "
          f"{DEFAULT_CONFIG})")
    self.checkpoint = checkpoint_dir(
        checkpoint or config.ranker.get("checkpoint") or "minilm-l6")
    overrides = dict(config.ranker.get("overrides", {}) or {})
    model = load_ranker(self.checkpoint, rngs=nnx.Rngs(config.seed),
                        dtype=getattr(jnp, dtype), **overrides)
    self.model_config = model.config
    # Copied first: init_from_params donates the parameters. Only a linear
    # head has a `TorchRanker` twin (`--family` compares whole classifiers).
    self.head = ((np.array(model.head.kernel.get_value()),
                  np.array(model.head.bias.get_value()))
                 if hasattr(model.head, "kernel") else None)
    _, params = split_params(model)
    trainer_config = ml_collections.ConfigDict(config.to_dict())
    self.trainer = build_trainer(
        lambda rngs: CrossEncoderRanker(self.model_config, rngs=rngs),
        trainer_config)
    self.state = self.trainer.init_from_params(params, config.seed)

  def describe(self, shapes: list[tuple[int, int]]) -> dict:
    """The configuration the benchmark ran, for the JSON."""
    import jax
    from best_jax.models.attention import attention_plan
    c = self.model_config
    with jax.set_mesh(self.trainer.mesh):
      plans = {f"{rows}x{length}": attention_plan(rows, c.num_heads, length)
               for rows, length in shapes}
    return {
        "optimizer": self.config.optimizer.to_dict(),
        "loss": self.config.train.loss,
        "accumulation_steps": self.config.train.get("accumulation_steps", 1),
        # The rows here are nearly all full, so the padded step runs
        # (`train.unpadded` gains nothing on them; bench/unpadded_step.py).
        "train_step": "padded",
        "mesh": dict(self.trainer.mesh.shape),
        "model": {k: str(v) for k, v in vars(c).items()},
        "attention_block_chosen": plans,
    }


def bench_scoring(product: Product, torch_ranker, lengths, batch, repeats,
                  torch_dtype, peak: dict | None = None) -> dict:
  import jax
  import torch
  from best_jax.select.selection import build_score_into
  trainer, params = product.trainer, product.state.params
  score_into = build_score_into(trainer)
  replicated = jax.NamedSharding(trainer.mesh, jax.P())
  torch_ranker.encoder.eval()
  results = {}
  for length in lengths:
    inputs = random_inputs(batch, length, seed=length,
                           vocab=product.model_config.vocab_size)
    if getattr(product.model_config, "type_vocab_size", 2) < 2:
      inputs["token_type_ids"][:] = 0
    host = {"input_ids": inputs["input_ids"].astype(np.int32),
            "attention_mask": inputs["attention_mask"].astype(bool),
            "token_type_ids": inputs["token_type_ids"].astype(np.int32),
            "pair": np.arange(batch, dtype=np.int32),
            "segment": np.zeros(batch, np.int32),
            "example_mask": np.ones(batch, bool)}
    torch_inputs = {k: torch.tensor(v, device=torch_ranker.device)
                    for k, v in inputs.items()}

    def blank():
      return jax.device_put(np.full((batch, 1), -np.inf, np.float32),
                            replicated)

    def run_jax():
      buffer = score_into(params, blank(), trainer.put(host))
      return np.asarray(jax.device_get(buffer))[:, 0]

    def run_torch():
      with torch.inference_mode(), torch.autocast(
          torch_ranker.device.split(":")[0], dtype=torch_dtype,
          enabled=torch_dtype != torch.float32):
        return torch_ranker(torch_inputs).float().cpu().numpy()

    difference = float(np.abs(run_jax() - run_torch()).max())
    row = dict(alternate(run_jax, run_torch, batch, repeats),
               max_abs_score_difference=difference)
    row["flops_per_call"] = program_flops(
        score_into.lower(params, blank(), trainer.put(host)))
    if peak:
      work = scoring_flops(product.model_config, batch, length)
      row["matmul_flops_per_row"] = work / batch
      row["share_of_matmul_peak"] = {
          side: row["per_second"][side]["median"] * work / batch / peak[side]
          for side in peak}
    results[str(length)] = row
    print(f"score L={length:4d}: best_jax "
          f"{row['per_second']['best_jax']['median']:7.1f}/s  torch "
          f"{row['per_second']['torch']['median']:7.1f}/s  ratio "
          f"{row['ratio']['median']:.2f} [{row['ratio']['min']:.2f}, "
          f"{row['ratio']['max']:.2f}]  cpu_ratio "
          f"{row['cpu_ratio']['median']:.2f}  |Δscore| {difference:.1e}"
          + ("  of matmul peak: best_jax {best_jax:.0%} torch {torch:.0%}"
             .format(**row["share_of_matmul_peak"])
             if "share_of_matmul_peak" in row else ""), flush=True)
  return results


def train_batch(pairs: int, length: int, vocab: int) -> dict:
  inputs = random_inputs(2 * pairs, length, seed=7, vocab=vocab)
  batch = {k: v.reshape(pairs, 2, length) for k, v in inputs.items()}
  return {"input_ids": batch["input_ids"].astype(np.int32),
          "attention_mask": batch["attention_mask"].astype(bool),
          "token_type_ids": batch["token_type_ids"].astype(np.int32),
          "labels": np.tile(np.array([1.0, 0.0], np.float32), (pairs, 1)),
          "mask": np.ones((pairs, 2), bool),
          "example_mask": np.ones(pairs, bool)}


def bench_training(product: Product, torch_ranker, pairs, length, repeats,
                   torch_dtype) -> dict:
  """One optimizer step on `pairs` (positive, negative) pairs."""
  import torch
  trainer = product.trainer
  batch = train_batch(pairs, length, product.model_config.vocab_size)
  holder = {"state": product.state}
  flops = program_flops(trainer.train_step.lower(holder["state"],
                                                 trainer.put(batch)))

  def run_jax():
    holder["state"], metrics = trainer.train_step(holder["state"],
                                                  trainer.put(batch))
    return float(metrics["loss"])

  torch_ranker.encoder.train()
  optimizer, scheduler = torch_optimizer(torch_ranker,
                                         product.config.optimizer)
  max_norm = product.config.optimizer.max_grad_norm
  torch_inputs = {k: torch.tensor(batch[k].reshape(2 * pairs, length)
                                  .astype(np.int64),
                                  device=torch_ranker.device)
                  for k in ("input_ids", "attention_mask", "token_type_ids")}
  params = [p for _, p in torch_ranker.named_parameters()]

  def run_torch():
    optimizer.zero_grad()
    with torch.autocast(torch_ranker.device.split(":")[0], dtype=torch_dtype,
                        enabled=torch_dtype != torch.float32):
      scores = torch_ranker(torch_inputs).reshape(pairs, 2)
    loss = torch.clamp(1.0 - scores[:, 0] + scores[:, 1], min=0.0).mean()
    loss.backward()
    if max_norm and max_norm > 0:
      torch.nn.utils.clip_grad_norm_(params, max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item()

  result = alternate(run_jax, run_torch, pairs, repeats)
  result["flops_per_call"] = flops
  print(f"train {pairs} pairs L={length}: best_jax "
        f"{result['per_second']['best_jax']['median']:6.2f} pairs/s  torch "
        f"{result['per_second']['torch']['median']:6.2f} pairs/s  ratio "
        f"{result['ratio']['median']:.2f} [{result['ratio']['min']:.2f}, "
        f"{result['ratio']['max']:.2f}]  cpu_ratio "
        f"{result['cpu_ratio']['median']:.2f}", flush=True)
  return result


def add_mfu(results: dict, batch: int, pairs: int, device_kind: str,
            devices: int) -> None:
  """Achieved FLOP/s (program FLOPs ÷ median time) and MFU on known chips."""
  from best_jax.train import chips
  chip = chips.chip_for_device_kind(device_kind)
  rows = [(row, batch) for row in results.get("scoring", {}).values()]
  if "training" in results:
    rows.append((results["training"], pairs))
  for row, items in rows:
    flops = row.get("flops_per_call")
    if not flops:
      continue
    per_second = row["per_second"]["best_jax"]["median"]
    row["flops_per_second"] = flops * per_second / items
    if chip is not None:
      row["mfu"] = row["flops_per_second"] / (devices * chip.peak_bf16_flops)
      row["peak_flops_per_device"] = chip.peak_bf16_flops


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", help="write the figures to this file")
  parser.add_argument("--config", default=DEFAULT_CONFIG,
                      help="FILE[:ARG] of the run whose steps are measured")
  parser.add_argument("--checkpoint", help="a Hugging Face BERT directory "
                      "(default: the config's checkpoint)")
  parser.add_argument("--random-bert", choices=sorted(RANDOM_BERTS),
                      help="both sides load one random checkpoint of this "
                      "shape instead")
  parser.add_argument("--family", choices=sorted(FAMILY_BASES),
                      help="score with a random base-size *ForSequence"
                      "Classification of this family on both sides, "
                      "transformers' own class as the reference (scoring "
                      "only; default --lengths 512 --batch 8)")
  parser.add_argument("--dtype", default="float32",
                      choices=("float32", "bfloat16"))
  parser.add_argument("--torch-device", default="cpu")
  parser.add_argument("--lengths")
  parser.add_argument("--batch", type=int)
  parser.add_argument("--pairs", type=int, default=16)
  parser.add_argument("--train-length", type=int, default=256)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--skip-training", action="store_true")
  args = parser.parse_args(argv)
  if args.family and (args.random_bert or args.checkpoint):
    parser.error("--family writes its own checkpoint: drop --checkpoint "
                 "and --random-bert")
  args.lengths = args.lengths or ("512" if args.family else "128,256,512")
  args.batch = args.batch or (8 if args.family else 32)
  args.skip_training = args.skip_training or bool(args.family)

  import jax
  import torch
  import transformers

  import machine

  if args.torch_device == "cpu":
    torch.set_num_threads(os.cpu_count())
  torch_dtype = getattr(torch, args.dtype)
  scratch = tempfile.TemporaryDirectory()
  checkpoint = args.checkpoint
  if args.random_bert:
    checkpoint = write_random_bert(scratch.name, args.random_bert)
  if args.family:
    checkpoint = write_random_classifier(scratch.name, args.family)
  product = Product(args.config, checkpoint, args.dtype)
  c = product.model_config
  if args.family:
    torch_ranker = TorchClassifier(product.checkpoint, args.torch_device)
  else:
    dropout = {"hidden_dropout_prob": c.hidden_dropout,
               "attention_probs_dropout_prob": c.attention_dropout}
    torch_ranker = TorchRanker(product.checkpoint, *product.head,
                               args.torch_device, dropout)
  lengths = [int(x) for x in args.lengths.split(",")]
  info = machine.describe()
  print(machine.summary_line(info), flush=True)
  load_before = machine.load_average()
  cpu_before, wall_before = machine.cpu_seconds(), time.perf_counter()
  peak = None
  if (args.dtype == "float32" and args.torch_device == "cpu"
      and not args.family):  # `scoring_flops` counts BERT's layers
    peak = matmul_peak(args.batch * 128, c.hidden_size, c.intermediate_size)
    print("float32 matmul peak ({}x{}x{}): best_jax {:.0f} GFLOP/s, torch "
          "{:.0f} GFLOP/s".format(args.batch * 128, c.hidden_size,
                                  c.intermediate_size, peak["best_jax"] / 1e9,
                                  peak["torch"] / 1e9), flush=True)
  results = {"scoring": bench_scoring(product, torch_ranker, lengths,
                                      args.batch, args.repeats, torch_dtype,
                                      peak)}
  if not args.skip_training:
    results["training"] = bench_training(product, torch_ranker, args.pairs,
                                         args.train_length, args.repeats,
                                         torch_dtype)
  beside = machine.other_work(cpu_before, machine.cpu_seconds(),
                              time.perf_counter() - wall_before)
  print(f"other work beside the bench: {beside['other_processes_cores']:.2f} "
        f"cores busy, {beside['steal_cores']:.2f} stolen by the hypervisor",
        flush=True)
  if beside["other_processes_cores"] + beside["steal_cores"] > QUIET_CORES:
    print("warning: the machine was not quiet; PyTorch's threads lose more "
          "to other work than XLA's, so these ratios come out high "
          "(docs/measurements.md)", flush=True)
  device = jax.devices()[0]
  add_mfu(results, args.batch, args.pairs, device.device_kind,
          len(product.trainer.mesh.devices.flat))
  shapes = [(args.batch, n) for n in lengths] + [(2 * args.pairs,
                                                  args.train_length)]
  report = {
      "benchmark": "score_vs_torch",
      "config": args.config,
      "checkpoint": (args.family and f"random {args.family} base classifier"
                     or args.random_bert and f"random BERT-{args.random_bert}"
                     or product.checkpoint),
      "family": args.family,
      "product": product.describe(shapes),
      "dtype": args.dtype,
      "batch": args.batch, "pairs": args.pairs,
      "train_length": args.train_length, "repeats": args.repeats,
      "torch_device": args.torch_device,
      "torch_threads": torch.get_num_threads(),
      "torch_attention": getattr(torch_ranker.encoder.config,
                                 "_attn_implementation", None),
      "jax_devices": [str(d) for d in jax.devices()],
      "load_average_before": load_before,
      "load_average_after": machine.load_average(),
      "other_work": beside,
      "matmul_peak_flops_per_second": peak,
      "machine": info,
      "reference_versions": {"torch": torch.__version__,
                             "transformers": transformers.__version__},
      "results": results,
  }
  if args.json:
    from best_jax.data.files import atomic_write
    with atomic_write(args.json) as f:
      json.dump(report, f, indent=1)
    print(f"wrote {args.json}")
  scratch.cleanup()
  return 0


if __name__ == "__main__":
  sys.exit(main())
