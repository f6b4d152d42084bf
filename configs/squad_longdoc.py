"""BeST and its baselines on the SQuAD long-document benchmark (SPEC §7).

MiniLM-L6 cross-encoder; documents are chunks of SQuAD articles (median ~1,000
subword tokens), queries are questions, the relevant document holds the
question's paragraph (the gold passage); candidates are the BM25 top-100.

Full run (an accelerator; about 6,500 training questions of SQuAD dev):

  python -m best_jax train --config configs/squad_longdoc.py \\
      --workdir runs/squad_longdoc

`:runlocal` — the README's `make demo` — is sized for a 2-core CPU: 32 steps
of 4 pairs per model, 128-token rows, the first 16 segments of a document at
inference, 10 dev and 24 test questions, reranking the BM25 top 5, BeST
iterations 1-2 (FirstP, MaxP, BeST; no GoldP, Birch, θ0 row). So few steps
cannot beat BM25 (MRR@10 ~0.88 here); compare the regimes with each other:

  python -m best_jax train --config configs/squad_longdoc.py:runlocal \\
      --workdir runs/squad_runlocal

`:cpu` is the largest comparison of every regime measured on a 2-core CPU
(about an hour): runlocal's model and segments, 128 steps of 4 pairs per
model, GoldP, BeST iterations 1-3 (and θ0's row), Birch, 30 dev and 150 test
questions (`configs/qds_squad_longdoc.py:cpu` adds the QDS-Transformer):

  python -m best_jax train --config configs/squad_longdoc.py:cpu \\
      --workdir runs/squad_cpu

The SQuAD JSON comes from $BEST_JAX_SQUAD_JSON or `dev-v1.1.json` in the TFDS
manual directory (`best_jax prepare` says how to get it when it is missing).

Expected figures: none measured for the full run yet. The README has the
measured `:cpu` table (with QDS: configs/qds_squad_longdoc.py:cpu): MRR@10 on
150 test questions BM25 0.857, FirstP 0.561, MaxP 0.701, GoldP 0.640, BeST-0
0.737, BeST-1 0.713, BeST-2 0.696, Birch 0.846 (one seed).
"""

import ml_collections

from best_jax.train.sharding import STANDARD_LOGICAL_AXIS_RULES


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """`arg`: None (full run), "runlocal" (2-core CPU demo) or "cpu" (the
  largest comparison of every regime that fits an hour of a 2-core CPU)."""
  if arg not in (None, "", "runlocal", "cpu"):
    raise ValueError(f"unknown config argument {arg!r}; use :runlocal, :cpu "
                     "or none")
  if arg == "cpu":
    return _cpu(get_config("runlocal"))
  runlocal = arg == "runlocal"
  config = ml_collections.ConfigDict()
  config.seed = 0

  config.data = ml_collections.ConfigDict(dict(
      name="squad_longdoc",
      dir="",          # Prepared files; default WORKDIR/data (built if absent).
      squad_json="",   # Default: $BEST_JAX_SQUAD_JSON or the TFDS manual dir.
      seed=0,
      max_queries=(dict(train=400, dev=10, test=24) if runlocal
                   else dict(dev=500)),
  ))
  config.ranker = ml_collections.ConfigDict(dict(
      kind="cross", tiny=False, checkpoint="minilm-l6", overrides=dict()))
  config.segments = ml_collections.ConfigDict(dict(
      max_len=128 if runlocal else 512,
      max_query_len=24 if runlocal else 48,
      max_title_len=8 if runlocal else 24,
      min_len=32 if runlocal else 96,
      k_train=4,
      # runlocal scores the first 16 segments (~1,500 tokens; the median
      # document has ~1,000) to fit a 2-core CPU; the full run scores all.
      max_segments=16 if runlocal else None,
      train_lengths="uniform"))

  config.mesh = ml_collections.ConfigDict(dict(
      shape=(-1, 1), axis_names=("data", "model")))
  config.logical_axis_rules = STANDARD_LOGICAL_AXIS_RULES

  num_steps = 32 if runlocal else 4000
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-4 if runlocal else 2e-5,
      warmup_steps=4 if runlocal else 400,
      total_steps=num_steps,
      b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01, max_grad_norm=1.0))
  # TREC DL style: pairwise hinge, 1 positive + 1 negative from the BM25
  # top-100 (set loss="sigmoid_cross_entropy", group_size=11 for Robust04's).
  config.train = ml_collections.ConfigDict(dict(
      loss="pairwise_hinge",
      batch_size=4 if runlocal else 32,
      group_size=2,
      negatives_depth=100,
      num_steps=num_steps,
      accumulation_steps=1,
      log_every=5 if runlocal else 50,
      eval_every=16 if runlocal else 500,
      patience=2 if runlocal else 3,
      checkpoint_every=16 if runlocal else 500,
      max_to_keep=1))
  config.regimes = (("firstp", "maxp", "best") if runlocal
                    else ("firstp", "maxp", "maxp_all", "goldp", "best"))
  config.goldp = ml_collections.ConfigDict(dict(negatives="first"))
  config.best = ml_collections.ConfigDict(dict(
      max_iterations=2 if runlocal else 5, pairing="same",
      # runlocal selects with θ0's training pass (saves a forward pass).
      select_with_dropout=runlocal,
      evaluate_theta0=not runlocal))  # θ0's test row (Table 2 "BeST-0").
  config.eval = ml_collections.ConfigDict(dict(
      depth=5 if runlocal else 100, aggregation="max",
      rows_per_call=32 if runlocal else 256))
  config.birch = ml_collections.ConfigDict(dict(
      enabled=not runlocal, model="MaxP", k=3, folds=5, max_sentences=64))
  return config


def _cpu(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """runlocal's model and segments, 4x the training steps, 30 dev and 150
  test queries, every regime (GoldP, BeST iterations 1-3 with θ0's row) and
  Birch.

  Each model is evaluated on dev every 32 steps and the best of the four is
  kept (no early stop: with 10 dev queries, as runlocal, a first try stopped
  GoldP at step 32 and picked BeST-1 below θ0). GoldP's negatives are random
  segments: with first segments only (that try), GoldP learned "a first
  segment is not relevant" and at MaxP inference ranked the relevant document
  below BM25 (segment P@1 0.075, under random's 0.10).
  """
  num_steps = 128
  config.data.max_queries = dict(train=400, dev=30, test=150)
  config.optimizer.total_steps = num_steps
  config.optimizer.warmup_steps = 12
  config.train.num_steps = num_steps
  config.train.eval_every = 32
  config.train.patience = 4
  config.train.checkpoint_every = 32
  config.train.log_every = 16
  config.goldp.negatives = "random"
  config.regimes = ("firstp", "maxp", "goldp", "best")
  config.best.max_iterations = 3
  config.best.evaluate_theta0 = True
  config.birch.enabled = True
  config.birch.max_sentences = 24
  return config
