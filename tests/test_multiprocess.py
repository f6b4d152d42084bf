"""2 processes × 4 CPU devices train exactly like 1 process × 8 devices.

The workers are subprocesses with their own environment (this pytest process
already has 8 devices from conftest): `jax.distributed` on localhost with gloo
CPU collectives, a free port, every wait bounded, children killed on failure.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import multiprocess_worker as worker
from best_jax.data import records
from best_jax.data.pipeline import InputPipeline
from best_jax.train import distributed

STEPS = 3
TIMEOUT_S = 240


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def start_workers(data: str, workdirs: list[str], steps: int):
  port = free_port()
  children = []
  for index, workdir in enumerate(workdirs):
    env = dict(os.environ)
    env.pop("JAX_NUM_CPU_DEVICES", None)
    env.update({
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "BEST_JAX_DISTRIBUTED": "1",
        "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
        "JAX_NUM_PROCESSES": str(len(workdirs)),
        "JAX_PROCESS_ID": str(index),
        "PYTHONPATH": os.pathsep.join(
            [worker.ROOT] + [p for p in [env.get("PYTHONPATH")] if p]),
    })
    children.append(subprocess.Popen(
        [sys.executable, worker.__file__, "--data", data, "--workdir",
         workdir, "--steps", str(steps)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=worker.ROOT))
  return children


def wait_all(children) -> list[tuple[str, str]]:
  """Waits (bounded) for every child; kills all of them on any failure."""
  outputs = []
  try:
    for child in children:
      out, err = child.communicate(timeout=TIMEOUT_S)
      if child.returncode != 0:
        raise AssertionError(f"worker exited with {child.returncode}:\n"
                             f"{err[-4000:]}")
      outputs.append((out, err))
  finally:
    for child in children:
      if child.poll() is None:
        child.kill()
        child.communicate()
  return outputs


def reads_of(stdout: str) -> dict:
  line = next(l for l in stdout.splitlines() if l.startswith("READS "))
  return json.loads(line[len("READS "):])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  path = tmp_path_factory.mktemp("data") / "train.array_record"
  records.write_array_record(path, worker.make_examples(20))
  return str(path)


def test_two_processes_match_one(data, tmp_path):
  workdirs = [str(tmp_path / f"host{i}") for i in range(2)]
  for w in workdirs:
    os.makedirs(w)
  children = start_workers(data, workdirs, STEPS)
  try:
    reference = worker.train(data, STEPS)  # meanwhile: 1 process × 8 devices
  finally:
    outputs = wait_all(children)

  # Files: only process 0 wrote, into its own directory.
  assert os.listdir(workdirs[0]) == ["result.npz"]
  assert os.listdir(workdirs[1]) == []
  # Logs: only process 0 logged the steps.
  assert f"step {STEPS} loss" in outputs[0][1]
  assert "step 1 loss" not in outputs[1][1]

  result = np.load(os.path.join(workdirs[0], "result.npz"))
  np.testing.assert_allclose(result["losses"], reference["losses"],
                             rtol=1e-5)
  assert reference["losses"][0] != reference["losses"][-1]  # it trained
  names = sorted(k[len("param:"):] for k in result if k.startswith("param:"))
  assert names == sorted(reference["params"])
  for name in names:
    np.testing.assert_allclose(result["param:" + name],
                               reference["params"][name],
                               rtol=1e-5, atol=1e-6, err_msg=name)
  assert json.loads(str(result["position"])) == reference["position"]

  # Data: each process read only its rows (4 of 8) of each global batch,
  # from the start of the same seeded stream that the reference read.
  reads = [reads_of(out) for out, _ in outputs]
  assert [r["process"] for r in reads] == [0, 1]
  assert all(r["devices"] == 8 and r["local_devices"] == 4 for r in reads)
  for r in reads:
    expected = worker.RecordingSource(records.ArrayRecordSource(data))
    with InputPipeline(expected, worker.features(), global_batch_size=8,
                       seed=0, process_index=r["process"], process_count=2,
                       prefetch=0) as it:
      for _ in range(STEPS + 4):  # covers what the prefetcher read ahead
        next(it)
    assert len(r["reads"]) >= 4 * STEPS
    assert r["reads"] == expected.read[:len(r["reads"])]
  first = [set(r["reads"][:4]) for r in reads]
  assert not first[0] & first[1]
  assert first[0] | first[1] == set(reference["reads"][:8])


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


def test_write_on_main_writes_atomically(tmp_path):
  path = tmp_path / "out.txt"
  assert distributed.write_on_main(path, lambda f: f.write("x\n"))
  assert path.read_text() == "x\n"
