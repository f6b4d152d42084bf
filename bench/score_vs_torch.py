"""best_jax vs PyTorch `transformers` on the same MiniLM-L6 weights (CPU).

    pip install torch==2.13.0          # reference only, never a requirement
    python bench/score_vs_torch.py --json bench/results/score_vs_torch.json

Scoring: `[CLS] q [SEP] segment [SEP]`-shaped random inputs (batch 32, one
padded row per batch), L = 128 / 256 / 512; best_jax's jitted
`CrossEncoderRanker` against `BertModel` + the same linear head under
`torch.inference_mode()`. Training: one step on 16 pairs (32 sequences) at
L = 256 with dropout, pairwise hinge loss and AdamW, jitted with donated state
against the eager PyTorch loop (`zero_grad`, `backward`, `step`).

After one warm-up call each, the two sides alternate A B A B for `--repeats`
pairs. For each pair the script records wall time and process CPU time
(all threads); `ratio` = best_jax throughput ÷ PyTorch throughput from wall
time, `cpu_ratio` the same from CPU time (more stable when other jobs share
the cores). Median, min and max of every list go to the JSON, with the machine
(bench/machine.py), the load average before and after, and the thread count.
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


def random_inputs(batch: int, length: int, seed: int = 0) -> dict:
  """Query–segment-shaped token ids; the last row is half padding."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(1000, 30000, (batch, length))
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
      cpu[name].append(items / (time.process_time() - cpu_0))
  return {
      "per_second": {name: summary(v) for name, v in wall.items()},
      "per_cpu_second": {name: summary(v) for name, v in cpu.items()},
      "ratio": summary([a / b for a, b in zip(wall["best_jax"],
                                              wall["torch"])]),
      "cpu_ratio": summary([a / b for a, b in zip(cpu["best_jax"],
                                                  cpu["torch"])]),
  }


class TorchRanker:
  """`BertModel` (no pooler) + a linear head on [CLS], as in best_jax."""

  def __init__(self, checkpoint: str, head_kernel, head_bias):
    import torch
    import transformers
    self.torch = torch
    self.encoder = transformers.BertModel.from_pretrained(
        checkpoint, add_pooling_layer=False)
    self.head = torch.nn.Linear(head_kernel.shape[0], 1)
    with torch.no_grad():
      self.head.weight.copy_(torch.tensor(np.asarray(head_kernel).T))
      self.head.bias.copy_(torch.tensor(np.asarray(head_bias)))

  def parameters(self):
    return list(self.encoder.parameters()) + list(self.head.parameters())

  def __call__(self, inputs: dict):
    hidden = self.encoder(**inputs).last_hidden_state
    return self.head(hidden[:, 0])[:, 0]


def bench_scoring(ranker, torch_ranker, lengths, batch, repeats) -> dict:
  import jax
  import jax.numpy as jnp
  import torch
  from flax import nnx

  graphdef, state = nnx.split(ranker)
  score = jax.jit(lambda state, ids, mask, types: nnx.merge(graphdef, state)(
      ids, mask, types))
  torch_ranker.encoder.eval()
  results = {}
  for length in lengths:
    inputs = random_inputs(batch, length, seed=length)
    ids, mask, types = (jnp.asarray(inputs["input_ids"], jnp.int32),
                        jnp.asarray(inputs["attention_mask"], bool),
                        jnp.asarray(inputs["token_type_ids"], jnp.int32))
    torch_inputs = {k: torch.tensor(v) for k, v in inputs.items()}

    def run_jax():
      return np.asarray(score(state, ids, mask, types))

    def run_torch():
      with torch.inference_mode():
        return torch_ranker(torch_inputs).numpy()

    difference = float(np.abs(run_jax() - run_torch()).max())
    results[str(length)] = dict(alternate(run_jax, run_torch, batch, repeats),
                                max_abs_score_difference=difference)
    row = results[str(length)]
    print(f"score L={length:4d}: best_jax "
          f"{row['per_second']['best_jax']['median']:6.1f}/s  torch "
          f"{row['per_second']['torch']['median']:6.1f}/s  ratio "
          f"{row['ratio']['median']:.2f} [{row['ratio']['min']:.2f}, "
          f"{row['ratio']['max']:.2f}]  cpu_ratio "
          f"{row['cpu_ratio']['median']:.2f}  |Δscore| {difference:.1e}",
          flush=True)
  return results


def bench_training(ranker, torch_ranker, pairs, length, repeats,
                   learning_rate=2e-5) -> dict:
  """One AdamW step on `pairs` (positive, negative) pairs, pairwise hinge."""
  import jax
  import jax.numpy as jnp
  import optax
  import torch
  from flax import nnx

  inputs = random_inputs(2 * pairs, length, seed=7)
  grouped = {k: v.reshape(pairs, 2, length) for k, v in inputs.items()}
  ids, mask, types = (jnp.asarray(grouped["input_ids"], jnp.int32),
                      jnp.asarray(grouped["attention_mask"], bool),
                      jnp.asarray(grouped["token_type_ids"], jnp.int32))
  graphdef, params = nnx.split(ranker, nnx.Param)
  tx = optax.adamw(learning_rate, weight_decay=0.01)
  opt_state = tx.init(params)
  key = jax.random.key(0)

  def step(params, opt_state, step_number):
    def loss_fn(params):
      rngs = nnx.Rngs(dropout=jax.random.fold_in(key, step_number))
      scores_bg = nnx.merge(graphdef, params)(ids, mask, types, rngs=rngs)
      return jnp.mean(jnp.maximum(0.0, 1.0 - scores_bg[:, 0]
                                  + scores_bg[:, 1]))
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  train_step = jax.jit(step, donate_argnums=(0, 1))
  jax_state = {"params": params, "opt": opt_state, "step": 0}

  def run_jax():
    jax_state["params"], jax_state["opt"], loss = train_step(
        jax_state["params"], jax_state["opt"], jax_state["step"])
    jax_state["step"] += 1
    return float(loss)

  torch_ranker.encoder.train()
  optimizer = torch.optim.AdamW(torch_ranker.parameters(), lr=learning_rate,
                                weight_decay=0.01)
  torch_inputs = {k: torch.tensor(v) for k, v in inputs.items()}

  def run_torch():
    optimizer.zero_grad()
    scores = torch_ranker(torch_inputs).reshape(pairs, 2)
    loss = torch.clamp(1.0 - scores[:, 0] + scores[:, 1], min=0.0).mean()
    loss.backward()
    optimizer.step()
    return loss.item()

  result = alternate(run_jax, run_torch, pairs, repeats)
  print(f"train {pairs} pairs L={length}: best_jax "
        f"{result['per_second']['best_jax']['median']:5.2f} pairs/s  torch "
        f"{result['per_second']['torch']['median']:5.2f} pairs/s  ratio "
        f"{result['ratio']['median']:.2f} [{result['ratio']['min']:.2f}, "
        f"{result['ratio']['max']:.2f}]  cpu_ratio "
        f"{result['cpu_ratio']['median']:.2f}", flush=True)
  return result


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", help="write the figures to this file")
  parser.add_argument("--lengths", default="128,256,512")
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--pairs", type=int, default=16)
  parser.add_argument("--train-length", type=int, default=256)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--attention-block", type=int, default=4,
                      help="BertConfig.attention_block (0: one batched "
                      "dot_product_attention)")
  parser.add_argument("--skip-training", action="store_true")
  args = parser.parse_args(argv)

  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  import jax
  import torch
  import transformers
  from flax import nnx

  import machine
  from best_jax.models import load_ranker
  from best_jax.models.pretrained import checkpoint_dir

  threads = os.cpu_count()
  torch.set_num_threads(threads)
  checkpoint = checkpoint_dir()
  ranker = load_ranker(checkpoint, rngs=nnx.Rngs(0),
                       attention_block=args.attention_block)
  torch_ranker = TorchRanker(checkpoint, ranker.head.kernel.get_value(),
                             ranker.head.bias.get_value())
  load_before = os.getloadavg()
  results = {
      "scoring": bench_scoring(ranker, torch_ranker,
                               [int(x) for x in args.lengths.split(",")],
                               args.batch, args.repeats),
  }
  if not args.skip_training:
    results["training"] = bench_training(ranker, torch_ranker, args.pairs,
                                         args.train_length, args.repeats)
  report = {
      "benchmark": "score_vs_torch",
      "checkpoint": checkpoint,
      "batch": args.batch, "pairs": args.pairs,
      "train_length": args.train_length, "repeats": args.repeats,
      "attention_block": args.attention_block,
      "torch_threads": threads, "jax_devices": len(jax.devices()),
      "load_average_before": load_before,
      "load_average_after": os.getloadavg(),
      "machine": machine.describe(),
      "reference_versions": {"torch": torch.__version__,
                             "transformers": transformers.__version__},
      "results": results,
  }
  if args.json:
    from best_jax.data.files import atomic_write
    with atomic_write(args.json) as f:
      json.dump(report, f, indent=1)
    print(f"wrote {args.json}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
