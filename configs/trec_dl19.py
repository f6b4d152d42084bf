"""BeST and its baselines on TREC DL 2019 documents (SPEC §6).

Reranks the official top-100 of the 43 judged queries (NDCG@10); trains on
MS MARCO document queries with pairwise hinge (1 judged positive, 1 negative
from the top-100); early stopping and model selection on MS MARCO dev MRR@10.
Topics and qrels come from ../shared/data/trec-dl-2019-doc ($BEST_JAX_DATA
overrides the folder). The texts of the MS MARCO documents and the first-stage
runs of the training and dev queries are not here: give them with

  python -m best_jax train --config configs/trec_dl19.py --workdir runs/dl19 \\
      --config.data.corpus=msmarco-docs.jsonl \\
      --config.data.train.topics=train-queries.tsv \\
      --config.data.train.qrels=train-qrels.txt \\
      --config.data.train.run=train-top100.run \\
      --config.data.dev.run=dev-top100.run

or install ir_datasets with `msmarco-document` available (then
config.data.corpus may stay empty).

Expected figures: not measured here. Literature NDCG@10 (SPEC §8):
QDS-Transformer 0.667, BERT-MaxP 0.642; the paper reports BeST > MaxP and
FirstP and BeST ≈ QDS-Transformer.
"""

import os

import ml_collections

from best_jax.train.sharding import STANDARD_LOGICAL_AXIS_RULES


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The TREC DL 2019 documents configuration; it takes no argument."""
  if arg:
    raise ValueError(f"unknown config argument {arg!r}: trec_dl19 takes "
                     "none")
  data_dir = os.environ.get("BEST_JAX_DATA", os.path.join(
      os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
      "data"))
  dl = os.path.join(data_dir, "trec-dl-2019-doc")
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.data = ml_collections.ConfigDict(dict(
      name="trec", folds="", topic_field="title", depth=100,
      corpus="", ir_datasets="msmarco-document",
      train=dict(topics="", qrels="", run=""),
      dev=dict(topics=os.path.join(dl, "topics.msmarco-doc.dev.txt"),
               qrels=os.path.join(dl, "qrels.msmarco-doc.dev.txt"), run=""),
      test=dict(topics=os.path.join(dl, "topics.dl19-doc.txt"),
                qrels=os.path.join(dl, "qrels.dl19-doc.txt"),
                run=os.path.join(dl, "msmarco-doctest2019-top100")),
      max_queries=dict(dev=500)))
  config.ranker = ml_collections.ConfigDict(dict(
      kind="cross", tiny=False, checkpoint="minilm-l6", overrides=dict()))
  config.segments = ml_collections.ConfigDict(dict(
      max_len=512, max_query_len=32, max_title_len=32, min_len=96, k_train=4,
      max_segments=None, train_lengths="uniform"))
  config.mesh = ml_collections.ConfigDict(dict(
      shape=(-1, 1), axis_names=("data", "model")))
  config.logical_axis_rules = STANDARD_LOGICAL_AXIS_RULES
  num_steps = 20000
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=2e-5, warmup_steps=2000, total_steps=num_steps,
      b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01, max_grad_norm=1.0))
  config.train = ml_collections.ConfigDict(dict(
      loss="pairwise_hinge", batch_size=32, group_size=2, negatives_depth=100,
      num_steps=num_steps, accumulation_steps=1, log_every=100,
      eval_every=2000, patience=3, checkpoint_every=2000, max_to_keep=1,
      # Unpadded rows, attention in length groups: see configs/squad_longdoc.py.
      unpadded=True,
      attention_groups=3, max_budgets=3))
  config.regimes = ("firstp", "maxp", "best")
  config.best = ml_collections.ConfigDict(dict(
      theta0="joint",  # or "pretrained" (a bi-encoder): see checks.THETA0
      max_iterations=5, pairing="same", select_with_dropout=False))
  config.eval = ml_collections.ConfigDict(dict(
      depth=100, aggregation="max", rows_per_call=256))
  config.birch = ml_collections.ConfigDict(dict(
      enabled=False, model="MaxP", k=3, folds=5, max_sentences=128))
  return config
