"""2 processes × 2 CPU devices run the real `best_jax train` like 1 process
× 4 devices (`fakes.TINY_DEVICES`): the same run files (same order, model
scores within 1e-4 relative, fused scores within 1e-5 absolute of their
[0, 1]), each process building only its rows.

The processes are subprocesses with their own environment (this pytest
process already has 8 devices from conftest): `jax.distributed` on localhost
with gloo CPU collectives, a free port, every wait bounded, children killed on
failure.
"""

import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

from best_jax.data import trec
from best_jax.train import distributed
from fakes import TINY_DEVICES, TINY_EXPERIMENT, cpu_subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 900


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(devices: int, process: int | None = None,
         port: int | None = None) -> dict:
  env = cpu_subprocess_env(devices)
  if process is not None:
    env.update({"BEST_JAX_DISTRIBUTED": "1",
                "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
                "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(process)})
  return env


def _start(workdir: str, env: dict) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "-m", "best_jax"]
                          + TINY_EXPERIMENT + ["--workdir", workdir],
                          env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def _wait(children) -> list[tuple[str, str]]:
  """Waits (bounded) for every child; kills all of them on any failure."""
  outputs = []
  try:
    for child in children:
      out, err = child.communicate(timeout=TIMEOUT_S)
      assert child.returncode == 0, (
          f"exited with {child.returncode}:\n{err[-4000:]}")
      outputs.append((out, err))
  finally:
    for child in children:
      if child.poll() is None:
        child.kill()
        child.communicate()
  return outputs


@pytest.mark.slow  # Tiny experiments in subprocesses.
def test_two_processes_write_the_runs_of_one(tmp_path, tiny_experiment):
  single = tiny_experiment  # 1 process x TINY_DEVICES devices
  shared = str(tmp_path / "shared")  # one work directory for both processes
  port = free_port()
  outputs = _wait([_start(shared, _env(TINY_DEVICES // 2, p, port))
                   for p in (0, 1)])

  runs = sorted(os.listdir(os.path.join(single, "runs")))
  assert runs == sorted(os.listdir(os.path.join(shared, "runs")))
  for name in runs:
    want = trec.read_run(os.path.join(single, "runs", name))
    got = trec.read_run(os.path.join(shared, "runs", name))
    assert set(got) == set(want)
    for qid in want:
      # The contract: the same documents in the same order, every model
      # score within 1e-4 relative (tiny_cpu adds gradients in a fixed
      # order). A fusion's scores are per-query min-max normalised, in
      # [0, 1] for the reranked documents: a 2e-8 model-score difference of
      # the tiny random model, whose top-5 scores span ~1e-4, moved one by
      # 4.3e-6, over 1e-4 relative near 0. They are held within 1e-5
      # absolute, a hundred-thousandth of their range.
      assert ([d for d, _ in trec.ranked(got[qid])]
              == [d for d, _ in trec.ranked(want[qid])]), (name, qid)
      docids = sorted(want[qid])
      np.testing.assert_allclose([got[qid][d] for d in docids],
                                 [want[qid][d] for d in docids], rtol=1e-4,
                                 atol=1e-5 if "_+_" in name else 0,
                                 err_msg=name)

  # Each process built only its half of every training batch (the count
  # leaves out the sampled batches that every process builds whole to
  # choose the unpadded token budget, `GroupExamples.batches`) and
  # scored only the rows of its documents; only process 0 logged the
  # experiment.
  for index, (out, _) in enumerate(outputs):
    built = re.findall(rf"\[process {index}/2\] (\w+): built (\d+) of (\d+) "
                       "training examples", out)
    assert {name for name, _, _ in built} == {"firstp", "best1", "best2"}
    assert all(2 * int(mine) == int(total) for _, mine, total in built)
    scored = re.findall(rf"\[process {index}/2\] test \(\S+\): built (\d+) "
                        r"of (\d+) rows", out)
    assert scored and all(0 < int(mine) < int(total)
                          for mine, total in scored)
  assert "dev MRR@10" in outputs[0][0] and "dev MRR@10" not in outputs[1][0]


def test_maybe_initialize_is_opt_in(monkeypatch):
  for name in ("BEST_JAX_DISTRIBUTED", "JAX_COORDINATOR_ADDRESS"):
    monkeypatch.delenv(name, raising=False)
  assert not distributed.requested()
  assert distributed.requested(environ={"JAX_COORDINATOR_ADDRESS": "h:1"})
  assert distributed.requested(environ={"BEST_JAX_DISTRIBUTED": "1"})
  assert not distributed.requested(environ={
      "BEST_JAX_DISTRIBUTED": "0", "JAX_COORDINATOR_ADDRESS": "h:1"})
  assert distributed.requested(True, environ={"BEST_JAX_DISTRIBUTED": "0"})
  assert not distributed.maybe_initialize()  # single host: nothing happens
  assert distributed.is_main_process()
  assert distributed.broadcast_json({"a": [1, 2]}) == {"a": [1, 2]}


def test_the_train_command_imports_without_starting_jax():
  """`jax.distributed.initialize` must come before any backend starts, so
  importing the command (and what it imports, e.g. bm25s, which runs a JAX
  op at import) must not start one."""
  code = ("import jax._src.xla_bridge as xb\n"
          "import best_jax.experiment.command, best_jax.experiment.aot\n"
          "assert not xb._backends, 'a JAX backend started at import'\n")
  subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                 env=_env(8), timeout=300)


def test_host_max_agrees_over_processes_without_the_devices():
  """`HostMax` (the unpadded step's per-batch fit check) gives every process
  the largest value, call after call, through the coordinator alone; two
  instances keep their calls apart."""
  code = ("import jax\n"
          "from jax.experimental import multihost_utils\n"
          "from best_jax.train import distributed\n"
          "distributed.maybe_initialize()\n"
          "def no_devices(*args, **kwargs):\n"
          "  raise AssertionError('HostMax used a device collective')\n"
          "multihost_utils.process_allgather = no_devices\n"
          "me = jax.process_index()\n"
          "agree, other = distributed.HostMax(), distributed.HostMax()\n"
          "got = [agree(v) for v in ([5, 1, 7, 12] if me else [3, 9, 7, 11])]\n"
          "got.append(other(10 * me))\n"
          "print('MAX', got)\n")
  port = free_port()
  children = [subprocess.Popen([sys.executable, "-c", code],
                               env=_env(2, process, port), cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for process in range(2)]
  for out, _ in _wait(children):
    assert "MAX [5, 9, 7, 12, 10]" in out, out
