"""How many tokens a training step encodes unpadded (`models.unpadding`).

A step's rows are split into units, one per (micro-batch, data shard): the
rows one device encodes in one pass. `unit_of_examples` names each
example's unit as `steps.micro_batches` and the batch sharding place it;
`choose_tokens` picks one or two stream sizes T per unit from the first
batches of the schedule (those that would have encoded them in the fewest
tokens; two only when they take `MIN_SAVING` fewer tokens than the best
single size, or when no single size saves the 5% unpadding must, since each
size is one more compiled step), the same on every process because every
process can build every example. `UnpaddedSteps` checks each batch on the
host (its largest unit, agreed over the processes through the coordinator,
never a device collective, so the steps still dispatch ahead) and runs the
step compiled for `smallest_fit`, or, when no T fits, the padded step: T
changes only the speed, never the result beyond float rounding. (A branch
inside one compiled step would keep the residuals of both branches for the
backward pass, which cost more than unpadding saved.)

`train.unpadded` turns it on for the cross-encoder's steps: the
one-segment regimes' (FirstP, MaxP-all, GoldP, BeST iterations ≥ 2) and
BeST's joint step (θ⁽⁰⁾'s rows of every segment; θ⁽¹⁾'s selected rows stay
padded). QDS and the bi-encoder encode padded rows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import jax
import numpy as np

from best_jax.train import distributed

# T is chosen from this many first batches, in multiples of MULTIPLE; up
# to MAX_BUDGETS sizes: the sizes must save 5% of the padded rows' tokens
# over those batches, and more sizes are kept only when they cost MIN_SAVING
# less than the fewer sizes that already save 5% (if any do).
SAMPLE_BATCHES = 16
MULTIPLE = 64
MAX_BUDGETS = 2
MIN_SAVING = 0.03


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


def smallest_fit(need: int, budgets: Sequence[int]) -> int | None:
  """The smallest of `budgets` (ascending) that holds `need` tokens, or
  None: the step a batch whose largest unit needs that many runs."""
  return next((t for t in budgets if need <= t), None)


def choose_tokens(batches: Iterable[list[Mapping[str, np.ndarray]]], *,
                  steps: int, shards: int) -> tuple[int, ...] | None:
  """The stream sizes T per unit (ascending, at most `MAX_BUDGETS`) that
  encode `batches` of examples (each a dict with `attention_mask`
  `[G, ..., L]`) in the fewest tokens, each batch in the smallest T its
  largest unit fits, one that fits none counted padded; None when that
  saves under 5% of the padded rows' tokens."""
  needs, capacity = [], 0
  for examples in batches:
    mask = np.stack([e["attention_mask"] for e in examples])
    needs.append(largest_unit(
        mask, unit_of_examples(len(examples), steps, shards)))
    capacity = int(np.size(examples[0]["attention_mask"])) * (
        len(examples) // (steps * shards))
  if not needs:
    return None
  def cost(budgets):
    return sum(smallest_fit(n, budgets) or capacity for n in needs)
  sizes = sorted({-(-n // MULTIPLE) * MULTIPLE for n in needs})
  chosen, limit = None, 0.95 * capacity * len(needs)
  for count in range(1, min(MAX_BUDGETS, len(sizes)) + 1):
    budgets = min(itertools.combinations(sizes, count), key=cost)
    if cost(budgets) < limit:
      chosen, limit = budgets, (1 - MIN_SAVING) * cost(budgets)
  return chosen


def batch_need(mask: jax.Array, steps: int, shards: int) -> int:
  """`largest_unit` of a global batch's `attention_mask`, read from this
  process's shards (a unit never spans two devices)."""
  units = unit_of_examples(mask.shape[0], steps, shards)
  return max(largest_unit(shard.data, units[shard.index[0]])
             for shard in mask.addressable_shards)


class UnpaddedSteps:
  """`step_fn(state, batch, tokens)` as `(state, batch)`: unpadded in the
  smallest of `tokens` (ascending) per unit that the batch fits, padded when
  it fits none. Counts both and reports `unpadded` (1 or 0) with each step's
  metrics."""

  def __init__(self, step_fn: Callable, tokens: Sequence[int], *, steps: int,
               shards: int):
    self.step_fn, self.tokens = step_fn, tuple(sorted(tokens))
    self.steps, self.shards = steps, shards
    self.steps_at = dict.fromkeys(self.tokens, 0)  # T -> unpadded steps
    self.padded = 0
    self.agreed_need = distributed.HostMax()

  def __call__(self, state, batch):
    need = self.agreed_need(batch_need(batch["attention_mask"], self.steps,
                                       self.shards))
    tokens = smallest_fit(need, self.tokens)
    fits = tokens is not None
    state, metrics = self.step_fn(state, batch, tokens)
    if fits:
      self.steps_at[tokens] += 1
    else:
      self.padded += 1
    return state, dict(metrics, unpadded=np.float32(fits))

  @property
  def unpadded(self) -> int:
    return sum(self.steps_at.values())
