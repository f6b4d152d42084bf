"""Faults on the real command (`best_jax train` in a subprocess): SIGKILL
inside BeST's joint step, during selection, during test scoring and between
stages, or SIGTERM during training; rerunning the same command resumes and
writes byte-identical run files to an uninterrupted run."""

import os
import re
import subprocess

import pytest

from fakes import run_tiny_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INJECTOR = os.path.join(ROOT, "tests", "fault_injector.py")
TIMEOUT_S = 600
pytestmark = pytest.mark.slow  # Tiny experiments in subprocesses.


def _train(workdir: str, fault: str | None = None
           ) -> subprocess.CompletedProcess:
  if fault is None:
    return run_tiny_experiment(workdir, TIMEOUT_S)
  return run_tiny_experiment(workdir, TIMEOUT_S, (INJECTOR, fault, "--"))


def _runs(workdir: str) -> dict[str, bytes]:
  directory = os.path.join(workdir, "runs")
  return {name: open(os.path.join(directory, name), "rb").read()
          for name in sorted(os.listdir(directory))}


@pytest.fixture(scope="module")
def reference(tiny_experiment):
  return _runs(tiny_experiment)


def test_sigkill_at_every_point_then_rerun_writes_identical_runs(tmp_path,
                                                                reference):
  """SIGKILL at each point in the order a run reaches them, every rerun
  resuming the work the kills before it left; the last rerun finishes and
  writes the uninterrupted run's bytes."""
  workdir = str(tmp_path / "w")
  for point in ("between", "joint", "select", "test"):
    killed = _train(workdir, f"sigkill:{point}")
    assert killed.returncode == -9, (point, killed.stderr[-3000:])
    assert "fault_injector: sigkill" in killed.stdout, point
    assert not os.path.exists(os.path.join(workdir, "metrics.json")), point
  resumed = _train(workdir)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert _runs(workdir) == reference
  # Each rerun took up the work before it: the last one (killed only while
  # scoring the test queries) trained nothing.
  log = open(os.path.join(workdir, "log.txt")).read()
  runs = log.split("] workdir ")[1:]
  assert len(runs) == 5
  assert "firstp: rows encoded unpadded" in runs[0]  # It trained FirstP.
  assert "firstp: loaded the finished stage" in runs[1]
  last = runs[-1]
  for stage in ("firstp", "best1", "best2"):
    assert f"{stage}: loaded the finished stage" in last, stage
  assert not re.search(r"rows encoded unpadded|: step \d|resumed at step",
                       last)


def test_sigterm_saves_exits_cleanly_and_resumes(tmp_path, reference):
  workdir = str(tmp_path / "w")
  stopped = _train(workdir, "sigterm:joint")
  assert stopped.returncode == 143, stopped.stderr[-3000:]
  last = stopped.stderr.strip().splitlines()[-1]
  assert last == ("best_jax train: stopped: best1: asked to stop; saved at "
                  "step 3; rerun the same command to resume")
  assert "Traceback" not in stopped.stderr
  resumed = _train(workdir)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "best1: resumed at step 3" in open(
      os.path.join(workdir, "log.txt")).read()
  assert _runs(workdir) == reference
