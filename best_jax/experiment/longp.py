"""The `longp` regime: FirstP at the checkpoint's full length.

For a checkpoint with more than 512 positions (ModernBERT: 8,192), the
obvious alternative to choosing a segment is to read the beginning of the
whole document: FirstP with rows of `longp.max_len` tokens (default: every
position the checkpoint has) instead of `segments.max_len`. Everything
else is FirstP's: the same segmentation rules and training schedule, trained
on and scored by its first segment, rows encoded unpadded when
`train.unpadded` says so.
"""

from __future__ import annotations

import dataclasses

import ml_collections

from best_jax.errors import InputError
from best_jax.experiment.inputs import Inputs, SegmentCache
from best_jax.models import pretrained
from best_jax.segments.config import SegmenterConfig
from best_jax.segments.segmenter import Segmenter

# A checkpoint must have more positions than this for `longp`.
SHORT_POSITIONS = 512


def row_length(config: ml_collections.ConfigDict, positions: int) -> int:
  """The rows' length: `longp.max_len`, or the checkpoint's `positions`.

  Raises:
    InputError: the checkpoint has 512 positions or fewer, or `longp.max_len`
      exceeds them.
  """
  if positions <= SHORT_POSITIONS:
    raise InputError(
        f"the longp regime reads the beginning of a document at the "
        f"checkpoint's full length; this checkpoint has {positions} "
        f"positions (longp needs more than {SHORT_POSITIONS}, e.g. "
        "ModernBERT's 8,192)")
  wanted = (config.get("longp") or {}).get("max_len") or positions
  if wanted > positions:
    raise InputError(f"longp.max_len {wanted} exceeds the checkpoint's "
                     f"{positions} positions")
  return wanted


def check(config: ml_collections.ConfigDict) -> None:
  """`row_length`'s InputError, from `config.ranker`'s checkpoint (or tiny
  model) alone: before anything is trained or written."""
  row_length(config, pretrained.ranker_config(config.ranker).positions)


def long_config(config: ml_collections.ConfigDict,
                positions: int) -> ml_collections.ConfigDict:
  """A copy of `config` whose segments are `row_length` tokens long (and
  inference keeps only the first)."""
  out = ml_collections.ConfigDict(config.to_dict())
  out.segments.max_len = row_length(config, positions)
  out.segments.max_segments = 1
  return out


def long_inputs(inputs: Inputs, config: ml_collections.ConfigDict) -> Inputs:
  """`inputs` with documents segmented by `config.segments` (a
  `long_config`): same data, queries, schedule and candidates."""
  segmenter = Segmenter(SegmenterConfig(**config.segments.to_dict()),
                        tokenizer=inputs.segmenter.tokenizer)
  documents = inputs.documents
  return dataclasses.replace(
      inputs, segmenter=segmenter,
      train_segments=SegmentCache(segmenter, documents, training=True,
                                  seed=config.seed,
                                  name="segment (longp train)"),
      eval_segments=SegmentCache(segmenter, documents, training=False,
                                 name="segment (longp eval)"))
