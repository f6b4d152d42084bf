"""How many tokens a training step encodes unpadded (`models.unpadding`).

A step's rows are split into units, one per (micro-batch, data shard): the
rows one device encodes in one pass. `unit_of_examples` names each
example's unit as `steps.micro_batches` and the batch sharding place it;
`choose_tokens` picks the stream size T per unit from the first batches of
the schedule (the T that would have encoded them in the fewest tokens),
the same on every process because every process can build every example.
`UnpaddedSteps` checks each batch on the host (its largest unit, agreed
over the processes through the coordinator, never a device collective, so
the steps still dispatch ahead) and runs the step compiled for T, or, when the batch
does not fit, the padded step: T changes only the speed, never the result
beyond float rounding. (A branch inside one compiled step would keep the
residuals of both branches for the backward pass, which cost more than
unpadding saved.)

`train.unpadded` turns it on for the cross-encoder's steps: the
one-segment regimes' (FirstP, MaxP-all, GoldP, BeST iterations ≥ 2) and
BeST's joint step (θ⁽⁰⁾'s rows of every segment; θ⁽¹⁾'s selected rows stay
padded). QDS and the bi-encoder encode padded rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import jax
import numpy as np

from best_jax.train import distributed

# T is chosen from this many first batches, in multiples of MULTIPLE.
SAMPLE_BATCHES = 16
MULTIPLE = 64


def data_shards(sharding: jax.NamedSharding | None) -> int:
  """How many blocks the batch sharding cuts the example axis into."""
  if sharding is None or sharding.spec[0] is None:
    return 1
  axis = sharding.spec[0]
  return math.prod(sharding.mesh.shape[a]
                   for a in (axis if isinstance(axis, tuple) else (axis,)))


def unit_of_examples(batch_size: int, steps: int, shards: int) -> np.ndarray:
  """`[batch_size]` unit ids, `micro-batch · shards + shard`: micro-batch j
  holds examples j, j + steps, … (`steps.micro_batches`), cut into `shards`
  contiguous blocks."""
  example = np.arange(batch_size)
  micro, index = example % steps, example // steps
  per_shard = batch_size // steps // shards
  return (micro * shards + index // per_shard).astype(np.int32)


def largest_unit(mask: np.ndarray, units: np.ndarray) -> int:
  """The most real tokens any unit holds: `mask` `[n, ...]` is n examples'
  attention masks, `units` `[n]` their units (`unit_of_examples`)."""
  counts = np.asarray(mask).reshape(len(mask), -1).sum(1)
  return int(np.bincount(units, counts).max())


def choose_tokens(batches: Iterable[list[Mapping[str, np.ndarray]]], *,
                  steps: int, shards: int) -> int | None:
  """The stream size T per unit that encodes `batches` of examples (each a
  dict with `attention_mask` `[G, ..., L]`) in the fewest tokens, a batch
  whose largest unit does not fit counted padded; None when that saves
  under 5% of the padded rows' tokens."""
  needs, capacity = [], 0
  for examples in batches:
    mask = np.stack([e["attention_mask"] for e in examples])
    needs.append(largest_unit(
        mask, unit_of_examples(len(examples), steps, shards)))
    capacity = int(np.size(examples[0]["attention_mask"])) * (
        len(examples) // (steps * shards))
  if not needs:
    return None
  cost = lambda t: sum(t if n <= t else capacity for n in needs)  # pylint: disable=unnecessary-lambda-assignment
  tokens = min({-(-n // MULTIPLE) * MULTIPLE for n in needs}, key=cost)
  return tokens if cost(tokens) < 0.95 * capacity * len(needs) else None


def batch_need(mask: jax.Array, steps: int, shards: int) -> int:
  """`largest_unit` of a global batch's `attention_mask`, read from this
  process's shards (a unit never spans two devices)."""
  units = unit_of_examples(mask.shape[0], steps, shards)
  return max(largest_unit(shard.data, units[shard.index[0]])
             for shard in mask.addressable_shards)


class UnpaddedSteps:
  """`step_fn(state, batch, tokens)` as `(state, batch)`: unpadded in
  `tokens` per unit when the batch fits, padded otherwise. Counts both and
  reports `unpadded` (1 or 0) with each step's metrics."""

  def __init__(self, step_fn: Callable, tokens: int, *, steps: int,
               shards: int):
    self.step_fn, self.tokens = step_fn, tokens
    self.steps, self.shards = steps, shards
    self.unpadded = self.padded = 0
    self.agreed_need = distributed.HostMax()

  def __call__(self, state, batch):
    fits = self.agreed_need(batch_need(batch["attention_mask"], self.steps,
                                       self.shards)) <= self.tokens
    state, metrics = self.step_fn(state, batch,
                                  self.tokens if fits else None)
    self.unpadded += fits
    self.padded += not fits
    return state, dict(metrics, unpadded=np.float32(fits))
