"""The whole pipeline on Cranfield (1,400 aeronautics abstracts, 225 queries).

Short documents (most fit one segment), so FirstP, MaxP and BeST nearly
coincide: a check that the pipeline runs on a real collection with graded
judgments, not a long-document benchmark. BM25 (no stemming) gives the
top-100 candidates; queries are split 60/20/20 with the seed.

  python -m best_jax train --config configs/cranfield.py \\
      --workdir runs/cranfield

Expected figures: the full run is not measured yet. `:runlocal` (30 steps of
8 pairs, 32 test queries reranking the BM25 top 10; 10 min 54 s on a 2-core
CPU) is too short to learn: NDCG@10 BM25 0.382, FirstP 0.346, MaxP 0.332,
BeST-0 0.332, BeST-1 0.312, BeST-2 0.320 (MRR@10 of MaxP and every BeST
row below BM25's 0.584, paired t-test p < 0.05).

  python -m best_jax train --config configs/cranfield.py:runlocal \\
      --workdir runs/cranfield_runlocal
"""

import os

import ml_collections

from best_jax.train.sharding import STANDARD_LOGICAL_AXIS_RULES


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """`arg`: None, or "runlocal" for a few CPU minutes."""
  if arg not in (None, "", "runlocal"):
    raise ValueError(f"unknown config argument {arg!r}: use :runlocal or "
                     "none")
  runlocal = arg == "runlocal"
  data_dir = os.environ.get("BEST_JAX_DATA", os.path.join(
      os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
      "data"))
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.data = ml_collections.ConfigDict(dict(
      name="cranfield", dir=os.path.join(data_dir, "cranfield"), seed=0,
      depth=100,
      max_queries=dict(train=64, dev=16, test=32) if runlocal else None))
  config.ranker = ml_collections.ConfigDict(dict(
      kind="cross", tiny=False, checkpoint="minilm-l6", overrides=dict()))
  config.segments = ml_collections.ConfigDict(dict(
      max_len=128 if runlocal else 256, max_query_len=32, max_title_len=16,
      min_len=32, k_train=4, max_segments=None, train_lengths="uniform"))
  config.mesh = ml_collections.ConfigDict(dict(
      shape=(-1, 1), axis_names=("data", "model")))
  config.logical_axis_rules = STANDARD_LOGICAL_AXIS_RULES
  num_steps = 30 if runlocal else 600
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=3e-5, warmup_steps=num_steps // 10, total_steps=num_steps,
      b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01, max_grad_norm=1.0))
  config.train = ml_collections.ConfigDict(dict(
      loss="pairwise_hinge", batch_size=8, group_size=2, negatives_depth=100,
      num_steps=num_steps, accumulation_steps=1, log_every=10,
      eval_every=15 if runlocal else 100, patience=3, checkpoint_every=100,
      # Unpadded rows, attention in length groups: see configs/squad_longdoc.py.
      max_to_keep=1, unpadded=True,
      attention_groups=3, max_budgets=3))
  config.regimes = ("firstp", "maxp", "best")
  config.best = ml_collections.ConfigDict(dict(
      theta0="joint",  # or "pretrained" (a bi-encoder): see checks.THETA0
      max_iterations=2 if runlocal else 3, pairing="same",
      select_with_dropout=False))
  config.eval = ml_collections.ConfigDict(dict(
      depth=10 if runlocal else 100, aggregation="max", rows_per_call=64))
  config.birch = ml_collections.ConfigDict(dict(
      enabled=not runlocal, model="MaxP", k=3, folds=5, max_sentences=32))
  return config
