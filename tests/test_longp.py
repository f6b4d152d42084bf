"""The longp regime's rows: FirstP's first segment at the checkpoint's full
length, refused for a checkpoint of 512 positions or fewer."""

import dataclasses
import json
import os

import pytest

from best_jax import cli
from best_jax.data import trec

from best_jax.errors import InputError
from best_jax.experiment import longp
from best_jax.experiment.datasets import ExperimentData
from best_jax.experiment.inputs import Inputs, SegmentCache
from best_jax.models import pretrained
from best_jax.segments.config import SegmenterConfig
from best_jax.segments.segmenter import Segmenter
from fakes import tiny_config

SENTENCE = "The river flows past the old stone mill near the village. "


def test_row_length_is_the_checkpoints_unless_asked():
  config = tiny_config()
  assert longp.row_length(config, 8192) == 8192
  config.longp = dict(max_len=1024)
  assert longp.row_length(config, 8192) == 1024
  with pytest.raises(InputError, match="exceeds the checkpoint's 1000"):
    longp.row_length(config, 1000)


@pytest.mark.parametrize("positions", [512, 64])
def test_short_checkpoints_are_refused_in_one_line(positions):
  with pytest.raises(InputError) as error:
    longp.row_length(tiny_config(), positions)
  assert f"this checkpoint has {positions} positions" in str(error.value)
  assert "\n" not in str(error.value)


def test_long_inputs_segment_the_documents_at_the_row_length():
  config = tiny_config()
  config.longp = dict(max_len=600)
  long = longp.long_config(config, 8192)
  assert (long.segments.max_len, long.segments.max_segments) == (600, 1)
  assert config.segments.max_len == 48  # The loaded config is unchanged.
  documents = {"d": ("Mill", SENTENCE * 60)}
  segmenter = Segmenter(SegmenterConfig(**config.segments.to_dict()),
                        tokenizer=pretrained.load_tokenizer())
  data = ExperimentData(documents=documents, splits={})
  inputs = Inputs(
      data=data, segmenter=segmenter, queries=None, schedule=[],
      candidates={}, pairs={},
      train_segments=SegmentCache(segmenter, documents, training=True),
      eval_segments=SegmentCache(segmenter, documents, training=False))
  inputs_long = longp.long_inputs(inputs, long)
  short = inputs.eval_segments["d"].lengths_s[0]
  first = inputs_long.eval_segments["d"]
  content = dataclasses.replace(segmenter.config, max_len=600).content_len
  assert first.count == 1
  assert short < first.lengths_s[0] <= content
  assert first.lengths_s[0] > content - 16  # whole sentences up to the row
  assert inputs_long.queries is inputs.queries


def test_check_reads_the_rankers_positions():
  config = tiny_config()
  config.ranker.overrides.max_position_embeddings = 64
  with pytest.raises(InputError, match="this checkpoint has 64 positions"):
    longp.check(config)
  config.ranker.overrides.max_position_embeddings = 1024
  longp.check(config)


def test_longp_trains_beside_firstp(tmp_path, monkeypatch):
  """`train` with FirstP and LongP: LongP reads the documents' first 1,024
  tokens (a tiny model with 1,024 positions), gets its stage, dev score,
  test run and a Table 1 row."""
  made = []
  long_inputs = longp.long_inputs
  monkeypatch.setattr(longp, "long_inputs",
                      lambda *a: made.append(long_inputs(*a)) or made[-1])
  workdir = str(tmp_path / "w")
  argv = ["train", "--config", "configs/tiny_cpu.py", "--workdir", workdir,
          "--config.regimes=['firstp','longp']",
          "--config.birch.enabled=False",
          "--config.ranker.overrides.max_position_embeddings=1024",
          "--config.train.num_steps=4", "--config.train.eval_every=2",
          "--config.train.patience=0", "--config.data.num_queries=32",
          "--config.data.num_docs=24"]
  assert cli.main(argv) == 0
  (inputs,) = made
  assert inputs.segmenter.config.max_len == 1024
  lengths = [int(inputs.eval_segments[d].lengths_s[0])
             for d in list(inputs.documents)[:8]]
  assert max(lengths) > 48  # past FirstP's rows (segments.max_len = 48)
  with open(os.path.join(workdir, "metrics.json")) as f:
    metrics = json.load(f)
  assert {"FirstP", "LongP"} <= set(metrics["dev_mrr"])
  assert len(trec.read_run(os.path.join(workdir, "runs", "longp.run"))) == 8
  assert "| LongP |" in open(os.path.join(workdir, "results.md")).read()
  log = open(os.path.join(workdir, "log.txt")).read()
  assert "longp: " in log


def test_train_refuses_longp_for_a_short_model_before_writing(tmp_path,
                                                              capsys):
  workdir = tmp_path / "w"
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   str(workdir), "--config.regimes=['firstp','longp']"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0 and "this checkpoint has 64 positions" in err
  assert not workdir.exists()
