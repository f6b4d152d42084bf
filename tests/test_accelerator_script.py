"""The accelerator check's parts that run without a GPU in a few seconds.

The whole path (venv, install, every stage) runs on CPU with
`bench/accelerator.sh OUTDIR --dry-run` (about 3 minutes on 2 cores: too
long for the suite); these tests cover its argument handling and the live
parity stage.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def test_script_needs_an_output_folder():
  script = os.path.join(ROOT, "bench", "accelerator.sh")
  assert subprocess.run(["bash", "-n", script], check=False).returncode == 0
  done = subprocess.run(["bash", script], capture_output=True, text=True,
                        check=False)
  assert done.returncode == 2 and "usage" in done.stderr


def test_live_parity_stage_compares_with_pytorch(tmp_path):
  pytest.importorskip("torch")
  import accelerator  # pylint: disable=import-outside-toplevel
  result = accelerator.live_parity(str(tmp_path), "small", 32)
  assert result["passed"] and result["max_abs_hidden_difference"] < 1e-5
  written = json.loads((tmp_path / "parity.json").read_text())
  assert written["model"] == "random BERT-small"


def test_program_flops_count_the_whole_program_over_a_mesh(monkeypatch):
  """MFU divides by devices × peak, so the count is the global program's,
  matrix products included, on any backend: XLA:GPU's compiled module hides
  them in library calls, a compiled module over a mesh counts one device's
  share, and `Lowered.cost_analysis()` is unavailable behind the PJRT C API
  (the CUDA and TPU plugins), which is made to hold here."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax._src import xla_bridge  # pylint: disable=import-outside-toplevel
  from score_vs_torch import program_flops  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(xla_bridge, "using_pjrt_c_api", lambda *_: True)
  mesh = jax.make_mesh((8,), ("data",))
  rows = jax.NamedSharding(mesh, jax.P("data", None))
  a = jax.device_put(jnp.ones((512, 256), jnp.float32), rows)
  b = jnp.ones((256, 128), jnp.float32)
  product = jax.jit(lambda a, b: a @ b, out_shardings=rows)
  assert program_flops(product.lower(a, b)) == pytest.approx(
      2 * 512 * 256 * 128, rel=0.01)


def test_a_stage_without_figures_is_an_error(tmp_path):
  """A stage that wrote no JSON, an unreadable one, or rows whose FLOPs were
  not counted fails the check instead of reporting nothing."""
  import accelerator  # pylint: disable=import-outside-toplevel
  row = {"flops_per_call": 1e9, "flops_per_second": 1e10, "mfu": 0.3,
         "ratio": {"median": 1.1}, "per_second": {"best_jax": {"median": 2},
                                                  "torch": {"median": 1}}}
  written = tmp_path / "bench.json"
  written.write_text(json.dumps({"results": {"scoring": {"512": row},
                                             "training": row}}))
  stage = {"exit": 0}
  figures = accelerator.stage_figures(stage, str(written),
                                      accelerator.benchmark_figures)
  assert "error" not in stage and figures["train"]["mfu"] == 0.3
  uncounted = dict(row, flops_per_call=None, mfu=None)
  written.write_text(json.dumps({"results": {"scoring": {"512": row},
                                             "training": uncounted}}))
  accelerator.stage_figures(stage, str(written), accelerator.benchmark_figures)
  assert "train" in stage["error"]
  (tmp_path / "partial.json").write_text('{"step_s_median": 1}')
  for path in (tmp_path / "missing.json", tmp_path / "partial.json"):
    stage = {"exit": 1}
    accelerator.stage_figures(stage, str(path), accelerator.joint_figures)
    assert "no figures" in stage["error"]
