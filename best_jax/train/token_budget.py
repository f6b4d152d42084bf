"""How a training step encodes its rows unpadded (`models.unpadding`).

A step's rows are split into units, one per (micro-batch, data shard): the
rows one device encodes in one pass. `unit_of_examples` names each
example's unit as `steps.micro_batches` and the batch sharding place it;
with accumulation, `best_jax train` feeds the cross-encoder's steps
(padded or not) batches whose data shards' examples are reordered so that
their micro-batches hold about the same tokens (`balance_micro_batches`:
on squad_longdoc `:cpu` at 4 micro-batches, the joint step's padding falls
from 20.8% to 13.2% of FLOPs); it changes the dropout draws, so the
experiment records it (`experiment.checks.balances_micro_batches`).
`choose_budgets` picks, from `SAMPLE_BATCHES` batches spread over the
schedule (`sample_batches`), up to `train.max_budgets` (default
`MAX_BUDGETS`) stream sizes T per unit and, for each, how many rows
attention takes at each of `ATTENTION_GROUPS` lengths (the most its
batches' units had above each length plus `ROW_SLACK`, and at least a
smaller size's, in at most `train.attention_groups` non-empty groups, the
cheapest for those rows): the sizes that encode the sample in the fewest
FLOPs (the dense layers' per token, attention's per row and squared
length: `attention_weight`), a batch that fits none counted padded.
Batches with more tokens tend to have longer rows, so each size gets its
own groups (squad_longdoc's 512-token rows: 0.6–1.6 points less padding
than one set of groups for all). More sizes are kept only when they save
`MIN_SAVING`, and the budgets only when they save 5% of the padded rows'
FLOPs, since each size is one more compiled step. The choice is the same
on every process because every process can build every example.
`UnpaddedSteps` checks each batch on the host (the
smallest budget every unit fits, agreed over the processes through the
coordinator, never a device collective, so the steps still dispatch ahead)
and runs the step compiled for it, or, when none fits, the padded step:
the budget changes only the speed, never the result beyond float rounding.
(A branch inside one compiled step would keep the residuals of both
branches for the backward pass, which cost more than unpadding saved.)

`train.unpadded` turns it on for the cross-encoder's steps: the
one-segment regimes' (FirstP, MaxP-all, GoldP, BeST iterations ≥ 2) and
BeST's joint step (θ⁽⁰⁾'s rows of every segment; θ⁽¹⁾'s selected rows stay
padded). QDS and the bi-encoder encode padded rows.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import jax
import numpy as np

from best_jax.models.bert_config import BertConfig
from best_jax.models.unpadding import TokenBudget, group_lengths
from best_jax.train import distributed

# `choose_budgets`' rules: a sample of SAMPLE_BATCHES batches; stream sizes
# in multiples of MULTIPLE, CANDIDATE_SIZES of the sample's tried (its
# largest always), at most MAX_BUDGETS of them by default, each beyond the
# first kept only when it saves MIN_SAVING of the FLOPs.
SAMPLE_BATCHES = 128
MULTIPLE = 64
MAX_BUDGETS = 3
MIN_SAVING = 0.01
CANDIDATE_SIZES = 32
# Attention runs on rows grouped by length, at some of ATTENTION_GROUPS
# lengths (L/8, 2L/8, …, L; `train.attention_groups` of them at most, each
# one more attention per layer to compile); a budget's groups hold the most
# rows its own sampled batches' units had above each group's shorter
# neighbour's length, plus ROW_SLACK rows for the batches the sample
# missed, and every smaller budget's rows.
ATTENTION_GROUPS = 8
ROW_SLACK = 1


def evenly_spaced(count: int, size: int) -> np.ndarray:
  """`count` indices into `size` items, evenly spaced from the first to the
  last (all of them when fewer)."""
  return np.unique(np.linspace(0, size - 1, min(count, size)).round()
                   ).astype(int)


def sample_batches(num_batches: int) -> np.ndarray:
  """The indices of `SAMPLE_BATCHES` of a schedule's `num_batches` global
  batches, evenly spaced (`evenly_spaced`)."""
  return evenly_spaced(SAMPLE_BATCHES, num_batches)


def attention_weight_of(config: BertConfig) -> float:
  """Attention's FLOPs per row and squared length (4 · hidden: scores and
  weighted values) in tokens of the dense layers' FLOPs (2 · (4 · hidden²
  + 2 · hidden · intermediate): projections and feed-forward)."""
  hidden = config.hidden_size
  return 4 * hidden / (2 * (4 * hidden ** 2
                            + 2 * hidden * config.intermediate_size))


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


def balanced_order(tokens: np.ndarray, steps: int) -> np.ndarray:
  """A permutation of one data shard's examples (`tokens` `[n]`: each
  one's real tokens) that evens out the tokens of its micro-batches
  (position p is in micro-batch p % `steps`): the examples, most tokens
  first, each join the micro-batch with the fewest tokens so far that has
  room (ties: the lower index, the earlier example)."""
  tokens = np.asarray(tokens)
  if len(tokens) % steps:
    raise ValueError(f"{len(tokens)} examples do not split into {steps} "
                     "micro-batches")
  size = len(tokens) // steps
  members: list[list[int]] = [[] for _ in range(steps)]
  load = [0] * steps
  for example in sorted(range(len(tokens)), key=lambda e: (-tokens[e], e)):
    micro = min((j for j in range(steps) if len(members[j]) < size),
                key=lambda j: (load[j], j))
    members[micro].append(example)
    load[micro] += int(tokens[example])
  order = np.empty(len(tokens), np.int64)
  for micro, examples in enumerate(members):
    order[micro::steps] = examples
  return order


def micro_batch_order(mask: np.ndarray, steps: int, shards: int,
                      batch_size: int) -> np.ndarray:
  """The order of a batch's examples (`mask` `[n, ...]`: their attention
  masks; whole data-shard blocks of `batch_size // shards` examples) that
  balances each block's micro-batches (`balanced_order`): a function of
  each block's own examples, so the same whatever the processes."""
  mask = np.asarray(mask)
  tokens = mask.reshape(len(mask), -1).sum(1)
  block = batch_size // shards
  return np.concatenate([
      start + balanced_order(tokens[start:start + block], steps)
      for start in range(0, len(mask), block)])


def balance_micro_batches(batch: dict[str, np.ndarray], *, steps: int,
                          shards: int, batch_size: int
                          ) -> dict[str, np.ndarray]:
  """A process's part of a global batch (`InputPipeline`'s `arrange`) with
  every data shard's examples reordered by `micro_batch_order`: with
  gradient accumulation each micro-batch's unit is then about the same
  size, so one stream size wastes less. The loss and gradients are sums
  over the examples (without in-batch negatives): only the rounding and the
  dropout draws change."""
  order = micro_batch_order(batch["attention_mask"], steps, shards,
                            batch_size)
  return {name: value[order] for name, value in batch.items()}


def largest_unit(mask: np.ndarray, units: np.ndarray) -> int:
  """The most real tokens any unit holds: `mask` `[n, ...]` is n examples'
  attention masks, `units` `[n]` their units (`unit_of_examples`)."""
  counts = np.asarray(mask).reshape(len(mask), -1).sum(1)
  return int(np.bincount(units, counts).max())


def rows_above(mask: np.ndarray, units: np.ndarray,
               groups: int = ATTENTION_GROUPS) -> np.ndarray:
  """`[groups]`: the most rows any unit has longer than each group's
  shorter neighbour (0, then `group_lengths` but the last); `mask`, `units`
  as in `largest_unit`."""
  mask = np.asarray(mask)
  length = mask.shape[-1]
  # A row's length: its last real position + 1, as `Unpadding.of`.
  lengths = (mask.reshape(len(mask), -1, length).astype(bool)
             * np.arange(1, length + 1)).max(-1)  # [n, rows]
  edges = np.asarray((0,) + group_lengths(length, groups)[:-1])
  above = (lengths[..., None] > edges).sum(1)  # [n, groups]
  return np.stack([np.bincount(units, above[:, g], minlength=units.max() + 1)
                   for g in range(groups)], axis=1).max(0)


def group_rows(most_above: np.ndarray, most: int) -> tuple[int, ...]:
  """Rows per attention group for units with at most `most_above` rows
  above each group's shorter neighbour: of the ways to leave at most `most`
  groups non-empty (the longest always), the one that attends the fewest
  (rows · length²)."""
  cumulative = np.asarray(most_above)
  count = len(cumulative)
  best, best_cost = None, math.inf
  for k in range(most):
    for shorter in itertools.combinations(range(count - 1), k):
      sizes, start = [0] * count, 0
      for g in (*shorter, count - 1):  # Group g takes rows above group start.
        sizes[g] = int(cumulative[start]) - (
            int(cumulative[g + 1]) if g + 1 < count else 0)
        start = g + 1
      cost = sum(n * (g + 1) ** 2 for g, n in enumerate(sizes))
      if cost < best_cost:
        best, best_cost = tuple(sizes), cost
  return best


def rows_held(rows: Sequence[int]) -> np.ndarray:
  """The most rows above each group's shorter neighbour that groups of
  `rows` hold (rows, longest first, fill the longest group first)."""
  return np.cumsum(np.asarray(rows)[::-1])[::-1]


def fits_rows(above: np.ndarray, rows: Sequence[int]) -> bool:
  """Whether units with `above` rows above each group's shorter neighbour
  fit groups of `rows` (no groups: every row at full length)."""
  if not rows:
    return True
  return bool(np.all(np.asarray(above) <= rows_held(rows)))


def holds_rows(rows: Sequence[int], other: Sequence[int]) -> bool:
  """Whether attention groups of `rows` hold every unit that groups of
  `other` hold (the same number of groups, or `rows` none: every row at
  full length)."""
  if not rows:
    return True
  return len(rows) == len(other) and fits_rows(rows_held(other), rows)


def describe(budgets: Sequence[TokenBudget]) -> str:
  """`budgets` for a log line: each one's tokens and rows per group."""
  return " or ".join(
      f"{b.tokens} tokens" + (f" ({'/'.join(map(str, b.rows))} rows)"
                              if b.rows else "") for b in budgets)


def largest_budget(example_tokens: int, batch_size: int, *, steps: int,
                   shards: int) -> TokenBudget:
  """A unit of full rows, for batches of `batch_size` examples of
  `example_tokens` tokens each: every budget `choose_budgets` chooses is at
  most this large (its rows in groups no longer than every row at full
  length); `best_jax aot` compiles it as the bound."""
  return TokenBudget(example_tokens * (batch_size // (steps * shards)))


def choose_budgets(batches: Iterable[list[Mapping[str, np.ndarray]]], *,
                   steps: int, shards: int, attention_groups: int = 1,
                   max_budgets: int = MAX_BUDGETS,
                   attention_weight: float) -> tuple[TokenBudget, ...]:
  """The budgets per unit (ascending stream sizes T, at most `max_budgets`,
  each with its attention groups, at most `attention_groups` of them
  non-empty, holding every smaller budget's rows; 1: every row attended at
  full length) that encode `batches` of
  examples (each a dict with `attention_mask` `[G, ..., L]`; micro-batches
  balanced as the pipeline balances them, `balance_micro_batches`) in the
  fewest FLOPs (a token: 1; a row attended at length ℓ: `attention_weight`
  · ℓ²), each batch in the smallest T its largest unit fits, one that fits
  none counted padded; () when that saves under 5% of the padded rows'
  FLOPs. A batch shorter than the first (the last; the pipeline pads it)
  is left out, and so are all when they do not split into whole units."""
  needs, aboves, capacity, rows, length, size = [], [], 0, 0, 0, None
  for examples in batches:
    size = size or len(examples)
    if len(examples) != size or size % (steps * shards):
      continue
    mask = np.stack([e["attention_mask"] for e in examples])
    if steps > 1:  # As the pipeline arranges them (`balance_micro_batches`).
      mask = mask[micro_batch_order(mask, steps, shards, len(examples))]
    units = unit_of_examples(len(examples), steps, shards)
    needs.append(largest_unit(mask, units))
    aboves.append(rows_above(mask, units))
    capacity = largest_budget(int(np.size(examples[0]["attention_mask"])),
                              len(examples), steps=steps,
                              shards=shards).tokens
    length = mask.shape[-1]
    rows = capacity // length
  if not needs:
    return ()
  needs, aboves = np.asarray(needs), np.asarray(aboves)
  squares = np.asarray(group_lengths(length, aboves.shape[1])) ** 2

  @functools.cache
  def groups_for(most_above: tuple[int, ...]) -> tuple[tuple[int, ...], float]:
    """Rows per group for units of at most `most_above` rows above each
    group's shorter neighbour, and their attention's cost in tokens."""
    if attention_groups == 1:  # Every row at full length.
      return (), attention_weight * rows * length ** 2
    groups = group_rows(np.asarray(most_above), attention_groups)
    return groups, attention_weight * float(np.dot(groups, squares))

  def layout(sizes: Sequence[int]) -> tuple[float, tuple[TokenBudget, ...]]:
    """The budgets of stream sizes `sizes` (ascending), each batch at the
    first it fits by tokens, and their cost: each budget's groups, the
    cheapest given the smaller budgets' (chosen in turn, not jointly), hold
    its batches' rows plus `ROW_SLACK` and every smaller budget's, so a
    larger budget never fits less."""
    first_fit = np.searchsorted(sizes, needs)  # len(sizes): none, padded
    cost = float(np.sum(first_fit == len(sizes))) * padded
    budgets, held = [], np.zeros(aboves.shape[1], int)
    for i, tokens in enumerate(sizes):
      taken = first_fit == i
      if taken.any():
        held = np.maximum(held, aboves[taken].max(0) + ROW_SLACK)
      groups, attention = groups_for(tuple(np.minimum(held, rows).tolist()))
      if groups:
        held = rows_held(groups)
      cost += float(np.sum(taken)) * (tokens + attention)
      budgets.append(TokenBudget(int(tokens), groups))
    return cost, tuple(budgets)

  padded = capacity + attention_weight * rows * length ** 2
  sizes = np.unique(np.minimum(-(-needs // MULTIPLE) * MULTIPLE, capacity))
  sizes = sizes[evenly_spaced(CANDIDATE_SIZES, len(sizes))]
  chosen, limit = (), 0.95 * padded * len(needs)
  for count in range(1, min(max_budgets, len(sizes)) + 1):
    cost, budgets = min((layout(np.asarray(c)) for c in
                         itertools.combinations(sizes, count)),
                        key=lambda option: option[0])
    if cost < limit:
      chosen, limit = budgets, (1 - MIN_SAVING) * cost
  return chosen


def on_shards(budget: TokenBudget | None,
              batch_sharding: jax.NamedSharding | None,
              fixed_order: bool) -> TokenBudget | None:
  """`budget` with its units: the data shards of `batch_sharding`, or one
  under `fixed_order`, where each shard is mapped apart (one unit per
  call)."""
  if budget is None:
    return None
  return dataclasses.replace(
      budget, units=1 if fixed_order else data_shards(batch_sharding))


def smallest_budget(need: int, above: np.ndarray,
                    budgets: Sequence[TokenBudget]) -> int:
  """The index of the first of `budgets` that holds units of at most `need`
  tokens and `above` rows above each group's shorter neighbour
  (`rows_above`), `len(budgets)` when none does."""
  return next((i for i, b in enumerate(budgets)
               if need <= b.tokens and fits_rows(above, b.rows)),
              len(budgets))


def batch_fit(mask: jax.Array, budgets: Sequence[TokenBudget], steps: int,
              shards: int) -> int:
  """`smallest_budget` of the units of a global batch's `attention_mask`
  that this process holds (a unit never spans two devices)."""
  units = unit_of_examples(mask.shape[0], steps, shards)
  groups = len(budgets[0].rows)
  need, above = 0, 0
  for shard in mask.addressable_shards:
    shard_units, data = units[shard.index[0]], np.asarray(shard.data)
    need = max(need, largest_unit(data, shard_units))
    if groups:
      above = np.maximum(above, rows_above(data, shard_units, groups))
  return smallest_budget(need, above, budgets)


class UnpaddedSteps:
  """`step_fn(state, batch, budget)` as `(state, batch)`: unpadded in the
  smallest of `budgets` (ascending tokens) that the batch fits, padded
  (budget None) when it fits none. Counts both and reports `unpadded` (1 or
  0) with each step's metrics."""

  def __init__(self, step_fn: Callable, budgets: Sequence[TokenBudget], *,
               steps: int, shards: int):
    budgets = tuple(sorted(budgets, key=lambda b: b.tokens))
    for smaller, larger in zip(budgets, budgets[1:]):
      if not holds_rows(larger.rows, smaller.rows):
        raise ValueError(
            f"budget {larger} holds fewer rows than the smaller {smaller} "
            "in some attention group (a larger budget must never fit less)")
    self.step_fn = step_fn
    self.budgets = budgets
    self.steps, self.shards = steps, shards
    self.steps_at = dict.fromkeys((b.tokens for b in self.budgets), 0)
    self.padded = 0
    self.agreed_fit = distributed.HostMax()

  def __call__(self, state, batch):
    index = self.agreed_fit(batch_fit(batch["attention_mask"], self.budgets,
                                      self.steps, self.shards))
    budget = self.budgets[index] if index < len(self.budgets) else None
    state, metrics = self.step_fn(state, batch, budget)
    if budget is not None:
      self.steps_at[budget.tokens] += 1
    else:
      self.padded += 1
    return state, dict(metrics, unpadded=np.float32(budget is not None))

  @property
  def unpadded(self) -> int:
    return sum(self.steps_at.values())
