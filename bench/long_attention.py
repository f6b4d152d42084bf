"""Sparse (banded + global) vs dense attention on long inputs (BENCHMARKS §5).

    python bench/long_attention.py --json bench/results/long_attention.json

For each length L it times, side by side (A B A B ..., median of `--repeats`
after one warm-up), the QDS attention alone (forward, and forward+backward)
and a whole encoder forward (MiniLM-L6 shape: 6 layers, d 384, 12 heads,
random weights, positions extended to L), once with `sparse_attention` and
once with the dense masked reference of the same pattern. Memory is XLA's
own account of the compiled function (`memory_analysis()`: temporaries +
arguments + outputs), which is what the run needs at its peak on this
backend; it is deterministic, unlike RSS on a shared machine.

Global tokens: the first `--query_len` tokens and one sentence start every
`--sentence_len` tokens, at most `--max_global` (G, the fixed slot count,
which sets the sparse cost O(L · (3w + 2G)) whatever the real count).
Dense runs whose compiled footprint exceeds `--max_dense_gib` are skipped.
Prints a table with the growth factor per doubling of L and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

from best_jax.data.files import atomic_write  # noqa: E402
from best_jax.models import sparse_attention as sa  # noqa: E402
from best_jax.models.bert_config import BertConfig  # noqa: E402
from best_jax.models.qds import QdsConfig, QdsEncoder  # noqa: E402

GIB = 2.0 ** 30


def global_marks(length: int, query_len: int, sentence_len: int,
                 max_global: int) -> np.ndarray:
  """`[1, L]` bool: query tokens, then a sentence start every few tokens."""
  pos = np.arange(length)
  marks = (pos < query_len) | ((pos >= query_len)
                               & ((pos - query_len) % sentence_len == 0))
  return (marks & (np.cumsum(marks) <= max_global))[None]


def footprint_gib(compiled) -> float | None:
  stats = compiled.memory_analysis()
  if stats is None:
    return None
  return (stats.temp_size_in_bytes + stats.argument_size_in_bytes
          + stats.output_size_in_bytes) / GIB


def run_once(compiled, args) -> float:
  start = time.perf_counter()
  jax.block_until_ready(compiled(*args))
  return time.perf_counter() - start


def compare(fns: dict, args: tuple, repeats: int, max_dense_gib: float
            ) -> dict:
  """Compiles each function, then times them alternately; median seconds."""
  compiled, result = {}, {}
  for name, fn in fns.items():
    start = time.perf_counter()
    exe = jax.jit(fn).lower(*args).compile()
    gib = footprint_gib(exe)
    result[name] = {"gib": gib, "compile_s": time.perf_counter() - start}
    if name == "dense" and gib is not None and gib > max_dense_gib:
      result[name]["skipped"] = f"needs {gib:.1f} GiB > {max_dense_gib}"
      continue
    compiled[name] = exe
    run_once(exe, args)  # Warm-up.
  times = {name: [] for name in compiled}
  for _ in range(repeats):
    for name, exe in compiled.items():
      times[name].append(run_once(exe, args))
  for name, values in times.items():
    result[name].update(median_s=statistics.median(values),
                        min_s=min(values), max_s=max(values))
  return result


def attention_case(length: int, opts) -> dict:
  rng = np.random.default_rng(length)
  shape = (1, length, opts.heads, opts.head_dim)
  q, k, v = (jnp.asarray(rng.normal(size=shape), jnp.float32)
             for _ in range(3))
  mask = jnp.ones((1, length), bool)
  global_bl = jnp.asarray(global_marks(length, opts.query_len,
                                       opts.sentence_len, opts.max_global))

  # Masks are arguments, not constants, as in a real model.
  def sparse(q, k, v, mask, global_bl):
    return sa.sparse_attention(q, k, v, mask, global_bl, window=opts.window,
                               max_global=opts.max_global)

  def dense(q, k, v, mask, global_bl):
    return sa.dense_attention(q, k, v, mask, global_bl, window=opts.window)

  def with_grad(fn):
    return jax.grad(lambda *a: jnp.sum(fn(*a)), (0, 1, 2))

  args = (q, k, v, mask, global_bl)
  return {
      "forward": compare({"sparse": sparse, "dense": dense}, args,
                         opts.repeats, opts.max_dense_gib),
      "forward_backward": compare(
          {"sparse": with_grad(sparse), "dense": with_grad(dense)},
          args, opts.repeats, opts.max_dense_gib),
  }


def encoder_case(length: int, opts) -> dict:
  config = BertConfig(hidden_size=384, num_layers=6, num_heads=12,
                      intermediate_size=1536, max_position_embeddings=length)
  rng = np.random.default_rng(length)
  ids = jnp.asarray(rng.integers(1000, 30000, (1, length)), jnp.int32)
  mask = jnp.ones((1, length), bool)
  types = jnp.zeros((1, length), jnp.int32)
  global_bl = jnp.asarray(global_marks(length, opts.query_len,
                                       opts.sentence_len, opts.max_global))
  fns = {}
  for attention in ("sparse", "dense"):
    qds = QdsConfig(window=opts.window, max_global=opts.max_global,
                    attention=attention)
    encoder = QdsEncoder(config, qds, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(encoder)

    def forward(state, ids, mask, types, global_bl, graphdef=graphdef):
      model = nnx.merge(graphdef, state)
      return model(ids, mask, types, global_bl)

    fns[attention] = forward
  # Both encoders have the same parameters (same seed, same shapes).
  return {"forward": compare(fns, (state, ids, mask, types, global_bl),
                             opts.repeats, opts.max_dense_gib)}


def growth(rows: list[dict], key) -> list[float | None]:
  values = [key(r) for r in rows]
  return [None] + [b / a if a and b else None
                   for a, b in zip(values, values[1:])]


def format_table(report: dict) -> str:
  rows = report["lengths"]
  lines = []
  for section, part in (("attention", "forward"),
                        ("attention", "forward_backward"),
                        ("encoder", "forward")):
    lines.append(f"\n{section} {part} (median s, x per doubling; GiB)")
    lines.append(f"{'L':>6} {'sparse s':>9} {'x':>5} {'dense s':>9} "
                 f"{'x':>5} {'dense/sp':>8} {'sp GiB':>7} {'x':>5} "
                 f"{'dn GiB':>7} {'x':>5}")
    get = lambda r, n, f: r[section][part][n].get(f)  # noqa: E731
    cols = {(n, f): growth(rows, lambda r, n=n, f=f: get(r, n, f))
            for n in ("sparse", "dense") for f in ("median_s", "gib")}
    fmt = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
    for i, r in enumerate(rows):
      ts, td = get(r, "sparse", "median_s"), get(r, "dense", "median_s")
      lines.append(
          f"{r['length']:>6} {fmt(ts, '9.4f')} "
          f"{fmt(cols['sparse', 'median_s'][i], '5.2f')} {fmt(td, '9.4f')} "
          f"{fmt(cols['dense', 'median_s'][i], '5.2f')} "
          f"{fmt(td / ts if ts and td else None, '8.2f')} "
          f"{fmt(get(r, 'sparse', 'gib'), '7.3f')} "
          f"{fmt(cols['sparse', 'gib'][i], '5.2f')} "
          f"{fmt(get(r, 'dense', 'gib'), '7.3f')} "
          f"{fmt(cols['dense', 'gib'][i], '5.2f')}")
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True, help="write the figures here")
  parser.add_argument("--lengths", default="512,1024,2048,4096,8192")
  parser.add_argument("--window", type=int, default=64)
  parser.add_argument("--max_global", type=int, default=320)
  parser.add_argument("--query_len", type=int, default=32)
  parser.add_argument("--sentence_len", type=int, default=32)
  parser.add_argument("--heads", type=int, default=12)
  parser.add_argument("--head_dim", type=int, default=32)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--max_dense_gib", type=float, default=8.0)
  parser.add_argument("--skip_encoder", action="store_true")
  opts = parser.parse_args(argv)

  report = {"settings": {k: v for k, v in vars(opts).items() if k != "json"},
            "load_before": os.getloadavg(), "lengths": []}
  for length in (int(x) for x in opts.lengths.split(",")):
    row = {"length": length, "load": os.getloadavg()}
    row["attention"] = attention_case(length, opts)
    if not opts.skip_encoder:
      row["encoder"] = encoder_case(length, opts)
    report["lengths"].append(row)
    print(f"L={length} done, load {row['load'][0]:.1f}", flush=True)
  report["load_after"] = os.getloadavg()
  report["machine"] = machine.describe()
  if opts.skip_encoder:
    for row in report["lengths"]:
      row["encoder"] = {"forward": {"sparse": {}, "dense": {}}}
  table = format_table(report)
  print(table)
  print(f"\nload average (1 min) before {report['load_before'][0]:.1f}, "
        f"after {report['load_after'][0]:.1f}; "
        f"{report['machine']['cpu']['cores']} cores")
  with atomic_write(opts.json) as f:
    json.dump(report, f, indent=2)
  return 0


if __name__ == "__main__":
  sys.exit(main())
