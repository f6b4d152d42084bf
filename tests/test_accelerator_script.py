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
