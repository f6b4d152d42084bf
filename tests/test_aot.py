"""AOT compilation of every step of a config for a TPU topology (needs
libtpu): the train, joint, score and QDS steps `best_jax train` builds."""

import dataclasses
import importlib.util

import jax
import numpy as np
import pytest
from flax import nnx

from best_jax import cli
from best_jax.errors import InputError
from best_jax.experiment import aot
from best_jax.models.bert_config import BertConfig
from best_jax.models.ranker import CrossEncoderRanker
from best_jax.train import chips
from fakes import tiny_config

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason="libtpu is not installed (pip install -r requirements-tpu.txt)")


@pytest.fixture(scope="module")
def reports():
  config = tiny_config()
  config.regimes = ("firstp", "best", "qds")
  return {r.step: r for r in aot.compile_steps("v5e:2x2", config,
                                               BertConfig.tiny())}


def tiny_parameter_count() -> int:
  model = nnx.eval_shape(
      lambda: CrossEncoderRanker(BertConfig.tiny(), rngs=nnx.Rngs(0)))
  return sum(int(np.prod(x.shape))
             for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def test_every_step_of_the_run_is_compiled(reports):
  assert set(reports) == {"train_step", "joint_step", "score_step",
                          "train_step_unpadded", "joint_step_unpadded",
                          "qds_train_step", "qds_score_step"}
  train, joint = reports["train_step"], reports["joint_step"]
  assert train.devices == 4 and train.hosts == 1
  assert train.mesh == {"data": 4, "model": 1}
  assert train.chip == "TPU v5e" and train.hbm_bytes == 16 * chips.GIB
  assert train.batch_shape == (8, 2, 48)           # batch, group, max_len
  assert joint.batch_shape == (8, 2, 4, 48)        # ... x k_train
  assert reports["score_step"].batch_shape == (64, 48)  # rows_per_call
  # Parameters and AdamW's two moments (float32) are arguments; the donated
  # state aliases its output.
  n = tiny_parameter_count()
  assert train.argument_bytes >= 3 * 4 * n and train.alias_bytes >= 3 * 4 * n
  # The joint step holds two states and scores every segment: more of both.
  assert joint.alias_bytes >= 2 * 3 * 4 * n
  assert joint.flops_per_device > 4 * train.flops_per_device
  # Forward + backward: at least 6 FLOPs per non-embedding parameter per
  # token of this device's quarter of the batch.
  tokens = train.tokens_per_step / 4
  assert train.flops_per_device > 6 * (n - 2 * 128 * 32) * tokens * 0.5
  assert all(r.fits for r in reports.values())
  assert "joint_step" in joint.format() and "fits" in joint.format()


def test_unpadded_steps_are_compiled_at_their_largest_budget(reports):
  # `train.unpadded`: the steps a run takes, at the budget that bounds its
  # budgets: every token of a unit's rows (8 examples / 4 data shards).
  for name, tokens in (("train_step", 2 * 2 * 48),
                       ("joint_step", 2 * 2 * 4 * 48)):
    padded, unpadded = reports[name], reports[f"{name}_unpadded"]
    assert (padded.stream_tokens, unpadded.stream_tokens) == (0, tokens)
    assert unpadded.batch_shape == padded.batch_shape
    assert 0.9 < unpadded.flops_per_device / padded.flops_per_device < 1.1
    assert unpadded.fits
    assert f"a stream of {tokens:,} per data shard" in unpadded.format()


def test_does_not_fit_fails_clearly(reports):
  small = dataclasses.replace(reports["joint_step"], hbm_bytes=1024)
  assert not small.fits
  with pytest.raises(aot.DoesNotFit, match=r"v5e:2x2: joint_step needs"):
    aot.check_fits(small)


def test_command_exits_1_naming_the_step(capsys):
  code = cli.main(["aot", "--config", "configs/tiny_cpu.py", "--model",
                   "tiny", "--topology", "v5e:2x2", "--hbm-gib", "0.001",
                   "--config.regimes=['firstp']"])
  assert code == 1
  err = capsys.readouterr().err
  assert "v5e:2x2: train_step needs" in err
  assert "v5e:2x2: train_step_unpadded needs" in err  # tiny_cpu: unpadded
  assert "v5e:2x2: score_step needs" in err


def test_unknown_topology_is_an_input_error():
  with pytest.raises(InputError, match="cannot describe TPU topology"):
    aot.topology_devices("v5e:3x7x9x2")
  with pytest.raises(KeyError, match="unknown TPU generation"):
    chips.chip_for_topology("v99:2x2")
