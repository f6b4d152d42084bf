"""Tests of the input pipeline: shards, shuffles, fixed shapes, resume."""

import json

import jax
import numpy as np
import pytest

from best_jax.data import pipeline, records
from best_jax.data.pipeline import Feature, InputPipeline
from best_jax.errors import InputError

FEATURES = {"id": Feature((), np.int32),
            "tokens": Feature((8,), np.int32, pad_value=-1)}


def make_example(i: int) -> dict:
  return {"id": np.int32(i), "tokens": np.arange(i % 7 + 1, dtype=np.int32)}


class CountingSource:
  """A list of examples that records which indices were read."""

  def __init__(self, n: int):
    self.examples = [make_example(i) for i in range(n)]
    self.read: list[int] = []

  def __len__(self):
    return len(self.examples)

  def __getitem__(self, i):
    self.read.append(i)
    return self.examples[i]


def ids(batches) -> list[int]:
  return [int(i) for b in batches for i in np.asarray(b["id"])]


def take(it, n):
  return [next(it) for _ in range(n)]


def test_pack_pads_and_rejects_oversized():
  batch = pipeline.pack([make_example(0), make_example(2)], FEATURES)
  np.testing.assert_array_equal(batch["id"], [0, 2])
  np.testing.assert_array_equal(
      batch["tokens"], [[0, -1, -1, -1, -1, -1, -1, -1],
                        [0, 1, 2, -1, -1, -1, -1, -1]])
  with pytest.raises(InputError, match="does not fit"):
    pipeline.pack([{"id": 0, "tokens": np.arange(9)}], FEATURES)
  with pytest.raises(InputError, match="lacks feature 'tokens'"):
    pipeline.pack([{"id": 0}], FEATURES)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_epochs_are_seeded_permutations_without_drops(prefetch):
  n, batch = 10, 4  # batches span epoch boundaries
  with InputPipeline(CountingSource(n), FEATURES, global_batch_size=batch,
                     seed=3, process_index=0, process_count=1,
                     prefetch=prefetch) as it:
    batches = take(it, 5)  # 20 positions = 2 epochs exactly
    stream = ids(batches)
    assert all(b["example_mask"].all() for b in batches)
    assert it.get_state() == {"epoch": 2, "position": 0}
  epoch0, epoch1 = stream[:n], stream[n:]
  assert sorted(epoch0) == list(range(n)) and sorted(epoch1) == list(range(n))
  assert epoch0 == list(np.random.default_rng([3, 0]).permutation(n))
  assert epoch1 == list(np.random.default_rng([3, 1]).permutation(n))
  assert epoch0 != epoch1
  with InputPipeline(CountingSource(n), FEATURES, global_batch_size=batch,
                     seed=3, process_index=0, process_count=1) as again:
    assert ids(take(again, 5)) == stream
  with InputPipeline(CountingSource(n), FEATURES, global_batch_size=batch,
                     shuffle=False, process_index=0, process_count=1) as plain:
    assert ids(take(plain, 3)) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]


def test_each_process_reads_only_its_rows():
  n, batch, steps = 23, 6, 7
  single = InputPipeline(CountingSource(n), FEATURES, global_batch_size=batch,
                         seed=1, process_index=0, process_count=1, prefetch=0)
  reference = take(single, steps)
  sources = [CountingSource(n) for _ in range(3)]
  parts = [take(InputPipeline(s, FEATURES, global_batch_size=batch, seed=1,
                              process_index=p, process_count=3, prefetch=0),
                steps) for p, s in enumerate(sources)]
  for t in range(steps):
    for name in FEATURES:
      joined = np.concatenate([parts[p][t][name] for p in range(3)])
      np.testing.assert_array_equal(joined, reference[t][name])
  # Each process read only its 2 rows per step; together exactly the batch.
  assert [len(s.read) for s in sources] == [2 * steps] * 3
  for t in range(steps):
    reads = sorted(i for s in sources for i in s.read[2 * t:2 * t + 2])
    assert reads == sorted(ids([reference[t]]))
  with pytest.raises(InputError, match="not a multiple"):
    InputPipeline(CountingSource(n), FEATURES, global_batch_size=5,
                  process_index=0, process_count=2)


@pytest.mark.parametrize("prefetch", [0, 3])
def test_resume_neither_skips_nor_repeats(prefetch):
  n, batch = 13, 4
  def make():
    return InputPipeline(CountingSource(n), FEATURES, global_batch_size=batch,
                         seed=7, process_index=0, process_count=1,
                         prefetch=prefetch)
  with make() as it:
    first = take(it, 5)          # the prefetcher has read ahead by now
    saved = json.loads(json.dumps(it.get_state()))  # as a checkpoint stores it
    rest = take(it, 6)
  assert saved == {"epoch": 1, "position": 7}
  with make() as resumed:
    resumed.set_state(saved)
    again = take(resumed, 6)
  assert ids(again) == ids(rest)
  # The whole stream, cut at the checkpoint, is each epoch exactly once.
  stream = ids(first) + ids(again)
  assert sorted(stream[:n]) == list(range(n))
  assert sorted(stream[n:2 * n]) == list(range(n))
  with make() as bad:
    with pytest.raises(InputError, match="out of range"):
      bad.set_state({"epoch": 0, "position": n})


def test_single_pass_pads_last_batch_and_marks_valid():
  n, batch = 10, 4
  it = InputPipeline(CountingSource(n), FEATURES, global_batch_size=batch,
                     repeat=False, shuffle=False, process_index=1,
                     process_count=2)
  batches = list(it)
  assert len(batches) == 3
  # Process 1 holds rows 2, 3 of each global batch: positions 2,3 / 6,7 / 10,11.
  np.testing.assert_array_equal(batches[0]["id"], [2, 3])
  np.testing.assert_array_equal(batches[1]["id"], [6, 7])
  np.testing.assert_array_equal(batches[2]["example_mask"], [False, False])
  np.testing.assert_array_equal(batches[2]["tokens"], -np.ones((2, 8)))
  assert batches[0]["example_mask"].dtype == bool and batches[0]["example_mask"].all()
  assert it.get_state() == {"epoch": 1, "position": 0}


def test_source_errors_reach_the_consumer():
  class Broken(CountingSource):
    def __getitem__(self, i):
      raise InputError("bad record", "data.array_record", i)
  it = InputPipeline(Broken(5), FEATURES, global_batch_size=2,
                     process_index=0, process_count=1, prefetch=2)
  with pytest.raises(InputError, match="bad record"):
    next(it)


def test_array_record_round_trip(tmp_path):
  examples = [make_example(i) for i in range(17)]
  assert records.write_array_record(tmp_path / "a.array_record",
                                    examples[:9]) == 9
  records.write_array_record(tmp_path / "b.array_record", examples[9:])
  source = records.ArrayRecordSource(
      [tmp_path / "a.array_record", tmp_path / "b.array_record"])
  assert len(source) == 17
  for i in (0, 8, 9, 16):
    np.testing.assert_array_equal(source[i]["tokens"], examples[i]["tokens"])
    assert int(source[i]["id"]) == i
  got = source.__getitems__([16, 3, 9])
  assert [int(e["id"]) for e in got] == [16, 3, 9]
  with pytest.raises(InputError, match="not found"):
    records.ArrayRecordSource(tmp_path / "missing.array_record")
  (tmp_path / "bad.array_record").write_text("not a record file\n")
  with pytest.raises(InputError, match="not an array_record file"):
    records.ArrayRecordSource(tmp_path / "bad.array_record")
  with pytest.raises(IndexError):
    source.__getitems__([17])


def test_global_arrays_follow_the_sharding(tmp_path):
  mesh = jax.make_mesh((8,), ("data",),
                       axis_types=(jax.sharding.AxisType.Explicit,))
  sharding = jax.NamedSharding(mesh, jax.P("data"))
  records.write_array_record(tmp_path / "d.array_record",
                             (make_example(i) for i in range(20)))
  source = records.ArrayRecordSource(tmp_path / "d.array_record")
  with InputPipeline(source, FEATURES, global_batch_size=16, seed=5,
                     sharding=sharding) as it:
    got = take(it, 2)
  with InputPipeline(CountingSource(20), FEATURES, global_batch_size=16,
                     seed=5, process_index=0, process_count=1) as it:
    want = take(it, 2)
  for g, w in zip(got, want):
    for name in FEATURES:
      assert isinstance(g[name], jax.Array)
      assert g[name].sharding.spec == jax.P("data")
      np.testing.assert_array_equal(np.asarray(g[name]), w[name])


def test_fit_resumes_at_the_saved_position(tmp_path):
  """`fit` saves the pipeline position with the model; a preempted and
  resumed run reads exactly the examples of an uninterrupted one."""
  import multiprocess_worker as worker  # pylint: disable=g-import-not-at-top
  from best_jax.models.bert import BertConfig  # pylint: disable=g-import-not-at-top
  from best_jax.models.ranker import CrossEncoderRanker  # pylint: disable=g-import-not-at-top
  from best_jax.train import checkpoint, loop, trainer as trainer_lib  # pylint: disable=g-import-not-at-top

  path = tmp_path / "train.array_record"
  records.write_array_record(path, worker.make_examples(12))
  config = worker.tiny_config()
  model_config = BertConfig.tiny(num_layers=1, **config.model)
  trainer = trainer_lib.build_trainer(
      lambda rngs: CrossEncoderRanker(model_config, rngs=rngs), config)

  def run(checkpoint_dir, stop_after=None):
    source = worker.RecordingSource(records.ArrayRecordSource(path))
    batches = InputPipeline(source, worker.features(), global_batch_size=8,
                            seed=4, sharding=trainer.batch_sharding,
                            device_put=False, prefetch=0)
    ckpt = None if checkpoint_dir is None else checkpoint.Checkpointer(
        checkpoint_dir, async_save=False)
    result = loop.fit(trainer, batches, num_steps=4, config=config.to_dict(),
                      checkpointer=ckpt, checkpoint_every=1, log_every=4,
                      stop_after=stop_after)
    if ckpt is not None:
      ckpt.close()
    return result, source.read, batches.get_state()

  reference, reference_reads, end = run(None)
  assert end == {"epoch": 2, "position": 8}  # 32 examples = 2 epochs + 8
  first, first_reads, _ = run(tmp_path / "ckpt", stop_after=2)
  assert first.step == 2 and first.preempted
  second, second_reads, _ = run(tmp_path / "ckpt")
  assert second.step == 4
  assert first_reads + second_reads == reference_reads
  for got, want in zip(jax.tree.leaves(second.state.params),
                       jax.tree.leaves(reference.state.params)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
