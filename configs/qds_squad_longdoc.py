"""The QDS-Transformer beside BeST on SQuAD long documents (SPEC §4, §7).

`squad_longdoc` (same data, queries, schedule of training groups, dev model
selection and test candidates) plus the `qds` regime: MiniLM-L6 with
query-directed sparse attention reads the whole document — the query, then
every sentence behind an `[unused0]` start token, title first — in one row, with
±`window` local attention and the query and sentence-start tokens global.
Position embeddings past 512 are copies of the pretrained ones. Loss: binary
cross-entropy with one sampled negative of the BM25 top 100; model selection
on dev MRR@10.

Point it at the workdir of a finished `squad_longdoc` run with the same
argument: its stages (FirstP, MaxP, GoldP, BeST iterations, Birch) are loaded,
only QDS trains, and Table 1 gets a QDS row with paired t-tests against
FirstP, BM25 and the BeST iteration chosen on dev:

  python -m best_jax train --config configs/squad_longdoc.py:cpu \\
      --workdir runs/squad_cpu
  python -m best_jax train --config configs/qds_squad_longdoc.py:cpu \\
      --workdir runs/squad_cpu

Arguments as `squad_longdoc`: none (the full run: 2,048-token rows, 256
sentences, window ±64, lr 1e-5 as the paper) or one of its CPU variants
(512-token rows, 64 sentences, window ±32, lr 1e-4).
"""

import os

import ml_collections

from best_jax import config as config_lib


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """`squad_longdoc`'s config for `arg` with the qds regime added."""
  base = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "squad_longdoc.py")
  config = config_lib.config_module(base).get_config(arg)
  small = bool(arg)  # every CPU variant
  config.regimes = tuple(config.regimes) + ("qds",)
  config.qds = ml_collections.ConfigDict(dict(
      max_len=512 if small else 2048,
      max_sentences=64 if small else 256,
      window=32 if small else 64,
      pattern="qds",         # or local, longformer_qa, query, sentence
      first_tokens=64,       # global leading tokens of longformer_qa
      head="paper",          # or linear: the cross-encoder's one layer
      head_dropout=0.1,
      loss="sigmoid_cross_entropy",
      learning_rate=1e-4 if small else 1e-5,
      rows_per_call=8 if small else 64))
  return config
