"""The QDS-Transformer regime: its ranker and rows, one per whole document.

QDS (SPEC §4) trains on the experiment's seeded schedule of groups like every
other regime, but a document is one row of `segments.qds_inputs` — the
query, then every sentence behind a start token — instead of a segment.
`QdsRows` gives those rows to the training pipeline (`example`) and to the
scorer (a document is one "segment"), so dev model selection and test
reranking are the same code as BeST's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ml_collections
import numpy as np
from flax import nnx

from best_jax.data.pipeline import Feature
from best_jax.experiment.inputs import Inputs, QueryStore
from best_jax.experiment.models import Ranker, rows_per_call, trainer_config
from best_jax.experiment.regimes import Group
from best_jax.models import BertConfig
from best_jax.models import pretrained as pretrained_lib
from best_jax.models.qds import QdsConfig, QdsRanker, load_qds_ranker
from best_jax.segments.qds_inputs import (SENTENCE_START, QdsInputConfig,
                                          build_qds_inputs, sentence_start_id)
from best_jax.segments.segmenter import Segmenter, TokenizedDocument
from best_jax.select.selection import SegmentScorer
from best_jax.train.state import split_params
from best_jax.train.steps import MODEL_INPUTS
from best_jax.train.trainer import build_trainer


class QdsRows:
  """Documents tokenized on demand, packed with their queries into rows."""
  width = 1  # A document is one row.

  def __init__(self, segmenter: Segmenter,
               documents: Mapping[str, tuple[str, str]], queries: QueryStore,
               config: QdsInputConfig):
    self._segmenter = segmenter
    self._documents = documents
    self._queries = queries
    self.config = config
    self._tokenized: dict[str, TokenizedDocument] = {}

  def prepare(self, docids: Sequence[str]) -> None:
    missing = [d for d in dict.fromkeys(docids) if d not in self._tokenized]
    if missing:
      tokenized = self._segmenter.tokenize([self._documents[d]
                                            for d in missing])
      self._tokenized.update(zip(missing, tokenized))

  def num_segments(self, docid: str) -> int:
    del docid
    return 1

  def row_length(self, qid: str, docid: str, segment: int) -> int:
    del qid, docid, segment
    return self.config.max_len

  def _pack(self, qids: Sequence[str], docids: Sequence[str]
            ) -> dict[str, np.ndarray]:
    self.prepare(docids)
    ids_nq, mask_nq = self._queries.rows(qids)
    packed = build_qds_inputs(ids_nq, mask_nq,
                              [self._tokenized[d] for d in docids],
                              config=self.config,
                              special=self._segmenter.special)
    return {name: packed[name] for name in MODEL_INPUTS}

  def row(self, qid: str, docid: str, segment: int, length: int
          ) -> dict[str, np.ndarray]:
    del segment, length
    return {k: v[0] for k, v in self._pack([qid], [docid]).items()}

  def features(self, length: int) -> dict[str, Feature]:
    return {"input_ids": Feature((length,), np.int32),
            "attention_mask": Feature((length,), bool),
            "token_type_ids": Feature((length,), np.int32)}

  def example(self, index: int, group: Group) -> dict[str, np.ndarray]:
    """A `steps.train_step` example `[G, max_len]`, positive first."""
    del index
    num_g = len(group.docids)
    labels_g = np.zeros(num_g, np.float32)
    labels_g[0] = 1.0
    return dict(self._pack([group.qid] * num_g, list(group.docids)),
                labels=labels_g, mask=np.ones(num_g, bool))

  def example_features(self, group_size: int) -> dict[str, Feature]:
    length = self.config.max_len
    return {**{name: Feature((group_size,) + f.shape, f.dtype)
               for name, f in self.features(length).items()},
            "labels": Feature((group_size,), np.float32),
            "mask": Feature((group_size,), bool)}


def qds_configs(config: ml_collections.ConfigDict, start_id: int
                ) -> tuple[QdsInputConfig, QdsConfig]:
  """The rows' and the model's settings from `config.qds`; `start_id`: the
  sentence-start token's id (`qds_inputs.sentence_start_id`)."""
  c = config.qds
  row_config = QdsInputConfig(
      max_len=c.max_len, max_sentences=c.max_sentences,
      max_query_len=c.get("max_query_len", config.segments.max_query_len),
      sentence_start_id=start_id)
  # Every global token of a row gets a slot: no query or sentence-start
  # token is ever left out of the global set.
  return row_config, QdsConfig(
      window=c.window, pattern=c.pattern, max_global=row_config.max_global(),
      first_tokens=c.get("first_tokens", 64),
      head=c.get("head", "paper"), head_dropout=c.get("head_dropout", 0.1),
      sentence_start_id=start_id)


def qds_ranker(config: ml_collections.ConfigDict, inputs: Inputs, mesh
               ) -> tuple[Ranker, QdsRows, str]:
  """The QDS-Transformer of `config.qds` from the pretrained encoder
  (positions extended by copying to `qds.max_len`, random head), with its
  own learning rate and loss; returns (ranker, rows, a description)."""
  c = config.qds
  row_config, qds = qds_configs(config, sentence_start_id(
      inputs.segmenter.tokenizer, c.get("sentence_start", SENTENCE_START)))
  overrides = dict(config.ranker.get("overrides", {}) or {})
  rngs = nnx.Rngs(config.seed + 20)
  if config.ranker.get("tiny"):
    model = QdsRanker(BertConfig.tiny(**dict(
        overrides, max_position_embeddings=c.max_len)), qds, rngs=rngs)
  else:
    model = load_qds_ranker(
        pretrained_lib.checkpoint_dir(config.ranker.get("checkpoint")
                                      or pretrained_lib.MINILM),
        qds, rngs=rngs, max_positions=c.max_len, **overrides)
  model_config = model.config
  _, params = split_params(model)
  settings = trainer_config(config, learning_rate=c.learning_rate)
  settings.train.loss = c.loss
  trainer = build_trainer(lambda rngs: QdsRanker(model_config, qds, rngs=rngs),
                          settings, mesh=mesh)
  rows = QdsRows(inputs.segmenter, inputs.documents, inputs.queries,
                 row_config)
  scorer = SegmentScorer(trainer, rows,
                         rows_per_call=rows_per_call(c.rows_per_call, trainer),
                         buckets=(c.max_len,))
  description = (f"{row_config.max_len}-token rows, window ±{qds.window}, "
                 f"{qds.max_global} global slots, {qds.head} head")
  return (Ranker(trainer=trainer, pretrained=trainer.put_params(params),
                 encoder=model_config, scorer=scorer), rows, description)
