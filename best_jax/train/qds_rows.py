"""The QDS-Transformer regime's rows: one per (query, whole document).

The QDS regime (SPEC §4) trains on the experiment's seeded schedule of groups
like every other regime, but a document is one row of
`segments.qds_inputs` — the query, then every sentence behind a start token —
instead of a segment. `QdsRows` gives those rows to the train step (`batch`)
and to `select.selection.SegmentScorer` (`num_segments` is 1, `inputs`), so
dev model selection and test reranking are the same code as BeST's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

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
