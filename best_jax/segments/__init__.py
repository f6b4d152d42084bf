"""Sentence splitting and fixed-shape padded segment tensors (BeST, SPEC §1)."""

from best_jax.segments.config import SegmenterConfig
from best_jax.segments.packing import SpecialTokens, pack_inputs
from best_jax.segments.segmenter import (SegmentBatch, Segmenter,
                                         TokenizedDocument, plan_segments)
from best_jax.segments.sentences import sentence_spans

__all__ = [
    "SegmentBatch", "Segmenter", "SegmenterConfig", "SpecialTokens",
    "TokenizedDocument", "pack_inputs", "plan_segments", "sentence_spans",
]
