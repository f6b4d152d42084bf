"""Tests of the input pipeline: per-process rows, order, fixed shapes,
padding, resume."""

import functools
import json

import jax
import numpy as np
import pytest

from best_jax.data import pipeline
from best_jax.data.pipeline import Feature, InputPipeline
from best_jax.errors import InputError
from best_jax.train import token_budget

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
def test_one_pass_in_order_last_batch_padded(prefetch):
  n, batch = 10, 4
  with InputPipeline(CountingSource(n), FEATURES, global_batch_size=batch,
                     process_index=0, process_count=1,
                     prefetch=prefetch) as it:
    batches = list(it)
    assert it.get_state() == n
  assert len(batches) == 3
  assert ids(batches)[:n] == list(range(n))
  assert batches[0]["example_mask"].all() and batches[1]["example_mask"].all()
  np.testing.assert_array_equal(batches[2]["example_mask"],
                                [True, True, False, False])
  np.testing.assert_array_equal(batches[2]["tokens"][2:], -np.ones((2, 8)))
  assert batches[0]["example_mask"].dtype == bool


def test_each_process_reads_only_its_rows():
  n, batch, steps = 23, 6, 4
  single = InputPipeline(CountingSource(n), FEATURES, global_batch_size=batch,
                         process_index=0, process_count=1, prefetch=0)
  reference = list(single)
  assert len(reference) == steps
  sources = [CountingSource(n) for _ in range(3)]
  parts = [list(InputPipeline(s, FEATURES, global_batch_size=batch,
                              process_index=p, process_count=3, prefetch=0))
           for p, s in enumerate(sources)]
  for t in range(steps):
    for name in list(FEATURES) + ["example_mask"]:
      joined = np.concatenate([parts[p][t][name] for p in range(3)])
      np.testing.assert_array_equal(joined, reference[t][name])
  # Each process read only its rows; together exactly the n examples once.
  assert sorted(i for s in sources for i in s.read) == list(range(n))
  assert [len(s.read) for s in sources] == [8, 8, 7]
  with pytest.raises(InputError, match="not a multiple"):
    InputPipeline(CountingSource(n), FEATURES, global_batch_size=5,
                  process_index=0, process_count=2)


@pytest.mark.parametrize("prefetch", [0, 3])
def test_resume_neither_skips_nor_repeats(prefetch):
  n, batch = 30, 4
  def make():
    return InputPipeline(CountingSource(n), FEATURES, global_batch_size=batch,
                         process_index=0, process_count=1, prefetch=prefetch)
  with make() as it:
    first = take(it, 3)          # the prefetcher has read ahead by now
    saved = json.loads(json.dumps(it.get_state()))  # as a checkpoint stores it
    rest = list(it)
  assert saved == 12
  with make() as resumed:
    resumed.set_state(saved)
    again = list(resumed)
  assert ids(again) == ids(rest)
  assert ids(first + again)[:n] == list(range(n))
  with make() as bad:
    with pytest.raises(InputError, match="batch boundary"):
      bad.set_state(5)


def test_source_errors_reach_the_consumer():
  class Broken(CountingSource):
    def __getitem__(self, i):
      raise InputError("bad record", "data.array_record", i)
  it = InputPipeline(Broken(5), FEATURES, global_batch_size=2,
                     process_index=0, process_count=1, prefetch=2)
  with pytest.raises(InputError, match="bad record"):
    next(it)


def test_global_arrays_follow_the_sharding():
  mesh = jax.make_mesh((8,), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))
  sharding = jax.NamedSharding(mesh, jax.P("data"))
  with InputPipeline(CountingSource(20), FEATURES, global_batch_size=16,
                     sharding=sharding) as it:
    got = list(it)
  with InputPipeline(CountingSource(20), FEATURES, global_batch_size=16,
                     process_index=0, process_count=1) as it:
    want = list(it)
  for g, w in zip(got, want):
    for name in list(FEATURES) + ["example_mask"]:
      assert isinstance(g[name], jax.Array)
      assert g[name].sharding.spec == jax.P("data")
      np.testing.assert_array_equal(np.asarray(g[name]), w[name])


def test_arrange_reorders_each_local_batch_before_transfer():
  """`arrange` sees each process-local numpy batch, `example_mask`
  included (the last batch's blank rows too), and its result is what the
  iterator yields."""
  def reverse(batch):
    assert all(isinstance(v, np.ndarray) for v in batch.values())
    return {name: value[::-1] for name, value in batch.items()}
  with InputPipeline(CountingSource(5), FEATURES, global_batch_size=4,
                     process_index=0, process_count=1,
                     arrange=reverse) as it:
    got = list(it)
  with InputPipeline(CountingSource(5), FEATURES, global_batch_size=4,
                     process_index=0, process_count=1) as it:
    want = list(it)
  assert len(got) == len(want) == 2
  for g, w in zip(got, want):
    for name in list(FEATURES) + ["example_mask"]:
      np.testing.assert_array_equal(g[name], w[name][::-1])
  assert got[1]["example_mask"].tolist() == [False, False, False, True]


def test_balanced_micro_batches_on_a_sharded_batch():
  """On a mesh of 4 data shards × 2 model devices, the pipeline's global
  batch is the unsharded batch reordered within each shard's block
  (`token_budget.micro_batch_order`): the blocks, not the devices that
  hold them, decide the order."""
  rng = np.random.default_rng(0)
  lengths = rng.integers(1, 9, 20)

  class Rows:
    def __len__(self):
      return 20

    def __getitem__(self, i):
      return {"id": np.int32(i),
              "attention_mask": np.arange(8) < lengths[i]}
  features = {"id": Feature((), np.int32),
              "attention_mask": Feature((8,), bool)}
  mesh = jax.make_mesh((4, 2), ("data", "model"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  arrange = functools.partial(token_budget.balance_micro_batches, steps=2,
                              shards=4, batch_size=16)
  with InputPipeline(Rows(), features, global_batch_size=16,
                     sharding=jax.NamedSharding(mesh, jax.P("data")),
                     arrange=arrange) as it:
    got = [np.asarray(b["id"]) for b in it]
  for start, ids in zip((0, 16), got):
    positions = np.arange(start, start + 16)
    mask = np.arange(8) < np.where(
        positions < 20, lengths[np.minimum(positions, 19)], 0)[:, None]
    order = token_budget.micro_batch_order(mask, 2, 4, 16)
    want = np.where(positions < 20, positions, 0)[order]
    np.testing.assert_array_equal(ids, want)
    units = token_budget.unit_of_examples(16, 2, 4)
    assert (token_budget.largest_unit(mask[order], units)
            <= token_budget.largest_unit(mask, units))
