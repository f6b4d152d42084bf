"""The launch scripts parse, and refuse incomplete command lines with usage."""

import os
import subprocess

import pytest

LAUNCH = os.path.join(os.path.dirname(__file__), "..", "launch")
SCRIPTS = ("tpu_pod.sh", "gpu_single_host.sh", "slurm_multinode.sbatch")


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_parses(script):
  subprocess.run(["bash", "-n", os.path.join(LAUNCH, script)], check=True,
                 timeout=30)


@pytest.mark.parametrize("script, args, message", [
    ("tpu_pod.sh", [], "launch/tpu_pod.sh setup TPU_NAME ZONE"),
    ("tpu_pod.sh", ["run", "tpu", "zone"], "Runs COMMAND in ~/best_jax"),
    ("tpu_pod.sh", ["reboot", "tpu", "zone"], "launch/tpu_pod.sh run"),
    ("gpu_single_host.sh", ["--bogus"], "--gpus"),
    ("gpu_single_host.sh", ["--"], "[--setup]"),
    ("slurm_multinode.sbatch", [], "usage: sbatch"),
])
def test_incomplete_command_lines_print_usage(script, args, message):
  done = subprocess.run(["bash", os.path.join(LAUNCH, script), *args],
                        capture_output=True, text=True, timeout=30,
                        env={**os.environ, "SLURM_SUBMIT_DIR": "/nonexistent"})
  assert done.returncode == 2
  assert message in done.stderr
