"""AOT compilation of the train step for a TPU topology (needs libtpu)."""

import dataclasses
import importlib.util

import jax
import numpy as np
import pytest

from best_jax.errors import InputError
from best_jax.models.bert import BertConfig
from best_jax.train import aot, chips

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason="libtpu is not installed (pip install -r requirements-tpu.txt)")


@pytest.fixture(scope="module")
def report():
  config = aot.load_config(aot.DEFAULT_CONFIG)
  return aot.compile_train_step("v5e:2x2", BertConfig.tiny(), config,
                                batch=8, group=2, length=16)


def tiny_parameter_count() -> int:
  from best_jax.models.ranker import CrossEncoderRanker  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  model = nnx.eval_shape(
      lambda: CrossEncoderRanker(BertConfig.tiny(), rngs=nnx.Rngs(0)))
  return sum(int(np.prod(x.shape))
             for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def test_report_for_a_v5e_slice(report):
  assert report.devices == 4 and report.hosts == 1
  assert report.mesh == {"data": 4, "model": 1}
  assert report.chip == "TPU v5e"
  assert report.hbm_bytes == 16 * chips.GIB
  assert report.tokens_per_step == 8 * 2 * 16
  # The parameters, AdamW's two moments (all float32, replicated with a
  # model axis of 1) and this device's quarter of the batch are arguments.
  n = tiny_parameter_count()
  batch_bytes = (2 * 2 * 2 * 16 * 4 + 2 * 2 * 16  # ids, types; mask (bool)
                 + 2 * 2 * 4 + 2 * 2 + 2)          # labels, mask, examples
  assert report.argument_bytes >= 3 * 4 * n + batch_bytes
  # TPU layouts pad small arrays to tiles, so allow some slack above.
  assert report.argument_bytes < 4 * (3 * 4 * n + batch_bytes)
  # The donated state aliases its output.
  assert report.alias_bytes >= 3 * 4 * n
  # Forward + backward of the tiny model: at least 6 FLOPs per parameter
  # per token of this device's 2 x 2 x 16 tokens (embeddings excluded).
  assert report.flops_per_device > 6 * (n - 128 * 32 - 128 * 32) * 64 * 0.5
  assert report.fits
  assert "fits" in report.format() and "v5e:2x2" in report.format()


def test_does_not_fit_fails_clearly(report):
  small = dataclasses.replace(report, hbm_bytes=1024)
  assert not small.fits
  with pytest.raises(aot.DoesNotFit, match=r"v5e:2x2: the train step needs"):
    aot.check_fits(small)
  aot.check_fits(report)  # no error


def test_compiler_out_of_memory_is_does_not_fit():
  config = aot.load_config(aot.DEFAULT_CONFIG)
  with pytest.raises(aot.DoesNotFit,
                     match=r"v5e:2x2: the train step does not fit on a TPU "
                     r"v5e .*exceeds available HBM.*gradient accumulation"):
    aot.compile_train_step("v5e:2x2", BertConfig.tiny(), config,
                           batch=2**18, group=2, length=128)


def test_unknown_topology_is_an_input_error():
  with pytest.raises(InputError, match="cannot describe TPU topology"):
    aot.topology_devices("v5e:3x7x9x2")
  with pytest.raises(KeyError, match="unknown TPU generation"):
    chips.chip_for_topology("v99:2x2")
