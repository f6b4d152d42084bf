"""The QDS-Transformer regime: its model and rows, one per whole document.

The QDS regime (SPEC §4) trains on the experiment's seeded schedule of groups
like every other regime, but a document is one row of
`segments.qds_inputs` — the query, then every sentence behind a start token —
instead of a segment. `QdsRows` gives those rows to the train step (`batch`)
and to `select.selection.SegmentScorer` (`num_segments` is 1, `inputs`), so
dev model selection and test reranking are the same code as BeST's. `build`
makes the ranker of `config.qds` from the pretrained encoder, its trainer and
its scorer.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import ml_collections
import numpy as np
from flax import nnx

from best_jax.select.selection import SegmentScorer
from best_jax.segments.packing import SpecialTokens
from best_jax.segments.qds_inputs import QdsInputConfig, build_qds_inputs
from best_jax.segments.segmenter import Segmenter, TokenizedDocument
from best_jax.train.batches import QueryStore
from best_jax.train.regimes import Group
from best_jax.train.steps import MODEL_INPUTS


@dataclasses.dataclass(frozen=True)
class QdsRows:
  """Tokenized documents, packed with their queries into QDS rows."""
  queries: QueryStore
  documents: Mapping[str, TokenizedDocument]
  config: QdsInputConfig
  special: SpecialTokens

  @classmethod
  def build(cls, segmenter: Segmenter,
            documents: Mapping[str, tuple[str, str]], docids: Sequence[str],
            queries: QueryStore, config: QdsInputConfig) -> QdsRows:
    """Tokenizes `documents[docid] = (title, text)` once, with sentences."""
    docids = list(dict.fromkeys(docids))
    tokenized = segmenter.tokenize([documents[d] for d in docids])
    return cls(queries, dict(zip(docids, tokenized)), config,
               segmenter.special)

  def num_segments(self, docid: str) -> int:
    """A document is one QDS row."""
    del docid
    return 1

  def inputs(self, rows: Sequence[tuple[tuple[str, str], int]]
             ) -> dict[str, np.ndarray]:
    """`[N, max_len]` model inputs of N `((qid, docid), 0)` rows."""
    return self._pack([qid for (qid, _), _ in rows],
                      [docid for (_, docid), _ in rows])

  def batch(self, groups: Sequence[Group]) -> dict[str, np.ndarray]:
    """A `steps.train_step` batch `[B, G, max_len]`, positive first."""
    num_b, num_g = len(groups), len(groups[0].docids)
    flat = self._pack([g.qid for g in groups for _ in g.docids],
                      [d for g in groups for d in g.docids])
    labels_bg = np.zeros((num_b, num_g), np.float32)
    labels_bg[:, 0] = 1.0
    return dict({k: v.reshape(num_b, num_g, -1) for k, v in flat.items()},
                labels=labels_bg, mask=np.ones((num_b, num_g), bool),
                example_mask=np.ones(num_b, bool))

  def _pack(self, qids: Sequence[str], docids: Sequence[str]
            ) -> dict[str, np.ndarray]:
    ids_nq, mask_nq = self.queries.rows(qids)
    packed = build_qds_inputs(ids_nq, mask_nq,
                              [self.documents[d] for d in docids],
                              config=self.config, special=self.special)
    return {name: packed[name] for name in MODEL_INPUTS}


@dataclasses.dataclass(frozen=True)
class QdsParts:
  """The QDS regime's trainer, pretrained params (host) and row scorer
  (`scorer.source` is the `QdsRows`)."""
  trainer: Any
  pretrained: Any
  scorer: SegmentScorer
  inputs: QdsInputConfig
  window: int
  max_global: int

  def describe(self) -> str:
    return (f"{self.inputs.max_len}-token rows, window ±{self.window}, "
            f"{self.max_global} global slots")


def build(config: ml_collections.ConfigDict, *, segmenter: Segmenter,
          queries: QueryStore, documents: Mapping[str, tuple[str, str]],
          docids: Sequence[str]) -> QdsParts:
  """The QDS-Transformer of `config.qds` over the experiment's tokenizer,
  queries and documents: pretrained encoder (positions extended by copying
  to `qds.max_len`), random head, its own optimizer learning rate and loss."""
  # Imported here: the models and the trainer pull in the whole JAX stack.
  from best_jax.models import BertConfig, pretrained  # pylint: disable=g-import-not-at-top
  from best_jax.models.qds import QdsConfig, QdsRanker, load_qds_ranker  # pylint: disable=g-import-not-at-top
  from best_jax.train.best import to_host  # pylint: disable=g-import-not-at-top
  from best_jax.train.state import split_params  # pylint: disable=g-import-not-at-top
  from best_jax.train.trainer import build_trainer  # pylint: disable=g-import-not-at-top
  c = config.qds
  inputs = QdsInputConfig(
      max_len=c.max_len, max_sentences=c.max_sentences,
      max_query_len=c.get("max_query_len", config.segments.max_query_len))
  # Every global token of a row gets a slot: no query or sentence-start
  # token is ever left out of the global set.
  qds = QdsConfig(window=c.window, pattern=c.pattern,
                  max_global=inputs.max_global(),
                  first_tokens=c.get("first_tokens", 64),
                  head_dropout=c.get("head_dropout", 0.1),
                  sentence_start_id=segmenter.special.cls_id)
  overrides = dict(config.ranker.get("overrides", {}) or {})
  rngs = nnx.Rngs(config.seed + 20)
  if config.ranker.get("tiny"):
    model = QdsRanker(BertConfig.tiny(**dict(
        overrides, max_position_embeddings=c.max_len)), qds, rngs=rngs)
  else:
    model = load_qds_ranker(
        pretrained.checkpoint_dir(config.ranker.get("checkpoint")
                                  or pretrained.MINILM),
        qds, rngs=rngs, max_positions=c.max_len, **overrides)
  model_config = model.config
  _, params = split_params(model)
  trainer_config = ml_collections.ConfigDict(config.to_dict())
  trainer_config.optimizer.learning_rate = c.learning_rate
  trainer_config.optimizer.total_steps = config.train.num_steps
  trainer_config.optimizer.warmup_steps = min(
      config.optimizer.warmup_steps, config.train.num_steps)
  trainer_config.train.loss = c.loss
  trainer = build_trainer(
      lambda rngs: QdsRanker(model_config, qds, rngs=rngs), trainer_config)
  rows = QdsRows.build(segmenter, documents, docids, queries, inputs)
  per_call = c.rows_per_call
  per_call = max(per_call - per_call % trainer.batch_multiple,
                 trainer.batch_multiple)
  scorer = SegmentScorer(functools.partial(trainer.score, size=per_call),
                         rows, per_call)
  return QdsParts(trainer, to_host(params), scorer, inputs, qds.window,
                  qds.max_global)
