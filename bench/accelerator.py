"""The accelerator check's stages (run by bench/accelerator.sh, in its venv).

    python bench/accelerator.py --out OUTDIR [--dry-run]

1. environment: devices, backend, versions → OUTDIR/environment.json; stops
   (exit 2) without a GPU unless `--dry-run`.
2. live parity: a random BERT-base checkpoint (written by `transformers`)
   loaded into best_jax and into `BertModel`; max |Δ hidden| over real tokens
   in float32 at L = 512 → OUTDIR/parity.json (goal ≤ 1e-4).
3. benchmarks: `bench/score_vs_torch.py` on the same random BERT-base
   weights, bf16, L = 512: scoring (batch 64) and the product train step (32
   pairs, `configs/squad_longdoc.py`'s optimizer and loss) against PyTorch on
   the same GPU, with the program's FLOPs and MFU → OUTDIR/score_vs_torch.json.
4. joint step: `bench/mfu.py --step joint`, BeST's iteration-1 step (two
   BERT-base models, 8 examples × 2 documents × `segments.k_train` = 4
   segments of 512 tokens, bf16), its step time and MFU (no PyTorch
   counterpart) → OUTDIR/joint_step.json.
5. parity tests: pytest on the encoder's reference tests (float32, highest
   matmul precision; the MiniLM golden test skips where its package is absent),
   last, since the figures matter most when a lease is short.

The stages in subprocesses (benchmarks, joint step, parity tests) run under
time limits, all within `--seconds`; the live parity runs in this process. The
run writes OUTDIR/summary.json with the figures before the parity tests
and again at the end, whatever happens (`"complete": true` once every stage
has run), so that a short accelerator lease always brings back figures.
`--dry-run` runs the same stages on the CPU with small shapes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

# Seconds each stage may take at most; `--seconds` bounds them together
# (accelerator.sh gives what is left of its 8 minutes after the install).
# On an H200: benchmarks 103 s, parity tests 97 s on 4 workers.
LIMITS = {"benchmarks": 240, "joint_step": 150, "parity_tests": 150}
PARITY_TESTS = ["tests/test_weights.py", "tests/test_bert.py",
                "tests/test_attention.py"]
DRY_PARITY_TESTS = ["tests/test_bert.py::test_encoder_matches_numpy_reference"]


def environment(out: str) -> dict:
  import jax
  import machine
  facts = {"backend": jax.default_backend(),
           "devices": [str(d) for d in jax.devices()],
           "device_kind": jax.devices()[0].device_kind,
           "machine": machine.describe()}
  try:
    import torch
    facts["torch"] = torch.__version__
    facts["torch_cuda"] = bool(torch.cuda.is_available())
  except ImportError as e:
    facts["torch"] = f"missing: {e}"
  write(out, "environment.json", facts)
  return facts


def run_stage(name: str, command: list[str], out: str, limit: int,
              env: dict | None = None) -> dict:
  """Runs a subprocess stage with a time limit; its output → OUTDIR/NAME.log."""
  start = time.time()
  log = os.path.join(out, f"{name}.log")
  with open(log, "w", encoding="utf-8") as f:
    try:
      rc = subprocess.run(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                          timeout=limit, env={**os.environ, **(env or {})},
                          check=False).returncode
    except subprocess.TimeoutExpired:
      rc = "timeout"
  seconds = round(time.time() - start, 1)
  with open(log, encoding="utf-8") as f:
    tail = f.read()[-600:]
  print(f"[{name}] exit {rc} in {seconds} s\n{tail}", flush=True)
  return {"exit": rc, "seconds": seconds, "log": log}


def live_parity(out: str, size: str, length: int) -> dict:
  """Hidden states of best_jax vs `BertModel` on one random checkpoint."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import torch
  import transformers
  from score_vs_torch import random_inputs, write_random_bert

  from best_jax.models import load_encoder
  device = "cuda" if torch.cuda.is_available() else "cpu"
  with tempfile.TemporaryDirectory() as directory:
    write_random_bert(directory, size)
    encoder = load_encoder(directory)
    reference = transformers.BertModel.from_pretrained(
        directory, add_pooling_layer=False).to(device).eval()
    inputs = random_inputs(4, length, seed=3)
    inputs["attention_mask"][1, length // 3:] = 0
    inputs["input_ids"][1, length // 3:] = 0
    with torch.no_grad():
      expected = reference(**{k: torch.tensor(v, device=device)
                              for k, v in inputs.items()}
                           ).last_hidden_state.float().cpu().numpy()
  with jax.default_matmul_precision("highest"):  # No TF32 on GPUs.
    hidden = np.asarray(encoder(
        jnp.asarray(inputs["input_ids"], jnp.int32),
        jnp.asarray(inputs["attention_mask"], bool),
        jnp.asarray(inputs["token_type_ids"], jnp.int32)))
  valid = inputs["attention_mask"].astype(bool)
  difference = float(np.abs(hidden - expected)[valid].max())
  result = {"model": f"random BERT-{size}", "length": length,
            "torch_device": device, "max_abs_hidden_difference": difference,
            "passed": difference <= 1e-4}
  write(out, "parity.json", result)
  print(f"[live_parity] max |Δ hidden| {difference:.2e} "
        f"({'pass' if result['passed'] else 'FAIL'}, goal ≤ 1e-4)", flush=True)
  return result


def write(out: str, name: str, value: dict) -> None:
  with open(os.path.join(out, name), "w", encoding="utf-8") as f:
    json.dump(value, f, indent=1, default=str)


def benchmark_figures(found: dict) -> dict:
  """The summary's figures from score_vs_torch's JSON, with an `error` when
  a row's FLOPs could not be counted (then it has no MFU)."""
  results = found["results"]
  rows = [(f"score_L{k}", v) for k, v in results["scoring"].items()]
  rows.append(("train", results.get("training")))
  figures = {name: {k: row.get(k) for k in ("flops_per_call",
                                            "flops_per_second", "mfu")}
             | {"ratio_median": row["ratio"]["median"],
                "best_jax_per_second": row["per_second"]["best_jax"]["median"],
                "torch_per_second": row["per_second"]["torch"]["median"]}
             for name, row in rows if row}
  uncounted = [name for name, row in figures.items()
               if row["flops_per_call"] is None]
  if uncounted:
    figures["error"] = f"FLOPs not counted for {', '.join(uncounted)}"
  return figures


def joint_figures(found: dict) -> dict:
  """The summary's figures from `mfu.py --step joint`'s JSON."""
  return {k: found[k] for k in ("step_s_median", "tokens_per_s",
                                "flops_per_step", "flops_source", "mfu")}


def stage_figures(stage: dict, path: str, read) -> dict:
  """`read` of the JSON a stage wrote; a missing or unreadable one, or
  figures with an `error`, put an `error` on the stage."""
  try:
    with open(path, encoding="utf-8") as f:
      figures = read(json.load(f))
  except (OSError, KeyError, TypeError, ValueError) as e:
    figures = {"error": f"no figures in {path}: {e!r}"}
  if "error" in figures:
    stage.setdefault("error", figures["error"])
  return figures


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--dry-run", action="store_true",
                      help="the same stages on the CPU with small shapes")
  parser.add_argument("--seconds", type=float, default=420,
                      help="time for all the stages; each stage gets at "
                      "most its own limit and what is left")
  args = parser.parse_args(argv)
  out = os.path.abspath(args.out)
  os.makedirs(out, exist_ok=True)
  started = time.time()

  def limit(stage: str) -> int:
    return max(1, int(min(LIMITS[stage],
                          args.seconds - (time.time() - started))))

  summary: dict = {"dry_run": args.dry_run, "complete": False, "stages": {}}
  stages = summary["stages"]
  try:
    facts = environment(out)
    summary["backend"] = facts["backend"]
    summary["device_kind"] = facts["device_kind"]
    if facts["backend"] != "gpu" and not args.dry_run:
      summary["error"] = (f"no GPU: JAX's backend is {facts['backend']} "
                          "(is jax[cuda13] installed? see pip.log)")
      return 2
    start = time.time()
    try:
      stages["live_parity"] = live_parity(out, "small" if args.dry_run
                                          else "base",
                                          64 if args.dry_run else 512)
    except Exception as e:  # Reported, and the benchmarks still run.  pylint: disable=broad-except
      stages["live_parity"] = {"error": repr(e)}
    stages["live_parity"]["seconds"] = round(time.time() - start, 1)
    config = os.path.join(ROOT, "configs", "squad_longdoc.py")
    bench = os.path.join(out, "score_vs_torch.json")
    shape = (["--random-bert", "small", "--lengths", "64", "--batch", "4",
              "--pairs", "2", "--train-length", "64", "--repeats", "2"]
             if args.dry_run else
             ["--random-bert", "base", "--lengths", "512", "--batch", "64",
              "--pairs", "32", "--train-length", "512", "--repeats", "5",
              "--torch-device", "cuda"])
    joint = os.path.join(out, "joint_step.json")
    for stale in (bench, joint):  # An earlier run's figures are not this one's.
      if os.path.exists(stale):
        os.remove(stale)
    stages["benchmarks"] = run_stage(
        "benchmarks", [sys.executable, os.path.join(HERE, "score_vs_torch.py"),
                       "--config", config,
                       "--dtype", "bfloat16", *shape, "--json", bench],
        out, limit("benchmarks"))
    figures = summary["figures"] = {}
    figures.update(stage_figures(stages["benchmarks"], bench,
                                 benchmark_figures))
    stages["joint_step"] = run_stage(
        "joint_step", [sys.executable, os.path.join(HERE, "mfu.py"),
                       "--step", "joint", "--config", config,
                       *(["--model", "tiny", "--length", "64", "--batch", "2",
                          "--repeats", "2"] if args.dry_run else
                         ["--model", "base", "--length", "512", "--batch",
                          "8"]),
                       "--json", joint],
        out, limit("joint_step"))
    figures["joint_step"] = stage_figures(stages["joint_step"], joint,
                                          joint_figures)
    write(out, "summary.json", summary)  # The figures, before the last stage.
    tests = DRY_PARITY_TESTS if args.dry_run else PARITY_TESTS
    # Compiling is most of the tests' time; workers compile side by side.
    workers = (["-n", "4"] if importlib.util.find_spec("xdist")
               and not args.dry_run else [])
    stages["parity_tests"] = run_stage(
        "parity_tests", [sys.executable, "-m", "pytest", "-q", "-p",
                         "no:cacheprovider", *workers, *tests], out,
        limit("parity_tests"),
        env={"JAX_DEFAULT_MATMUL_PRECISION": "highest"})
    summary["complete"] = True
    return 0 if all(s.get("exit", 0) == 0 and s.get("passed", True)
                    and "error" not in s for s in stages.values()) else 1
  except BaseException as e:  # Recorded, then raised.
    summary["error"] = repr(e)
    raise
  finally:
    summary["seconds"] = round(time.time() - started, 1)
    write(out, "summary.json", summary)
    print(f"wrote {os.path.join(out, 'summary.json')} "
          f"({summary['seconds']} s)", flush=True)


if __name__ == "__main__":
  sys.exit(main())
