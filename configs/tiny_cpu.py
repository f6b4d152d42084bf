"""The tiny test configuration: a random 2-layer ranker on generated data.

End to end (FirstP, MaxP, MaxP-all, GoldP, BeST iterations, Birch) in about
a minute and a half on a 2-core CPU, most of it compiling (86 s, 57 s of it
compiling, at 9e67be0 on an otherwise idle machine; 2 min 56 s at d9d9a4a):

  python -m best_jax train --config configs/tiny_cpu.py --workdir /tmp/tiny

writes runs/*.run, metrics.json, results.md and plots/ in the workdir. The
model is random and tiny, so the figures only show that the pipeline runs
(MRR@10 near BM25's, P@1 near the random selector's).
"""

import ml_collections

from best_jax.train.sharding import STANDARD_LOGICAL_AXIS_RULES


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Returns the tiny CPU configuration; it takes no argument."""
  if arg:
    raise ValueError(f"unknown config argument {arg!r}: tiny_cpu takes none")
  config = ml_collections.ConfigDict()
  config.seed = 0

  # Sharding is configuration: mesh axes and logical-axis rules (T5X style).
  # A -1 in the shape takes every remaining device.
  config.mesh = ml_collections.ConfigDict(dict(
      shape=(-1, 1), axis_names=("data", "model")))
  config.logical_axis_rules = STANDARD_LOGICAL_AXIS_RULES

  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3,
      warmup_steps=2,
      total_steps=20,
      b1=0.9,
      b2=0.999,
      eps=1e-8,
      weight_decay=0.01,
      max_grad_norm=1.0,
  ))

  config.train = ml_collections.ConfigDict(dict(
      loss="pairwise_hinge",
      batch_size=8,
      group_size=2,
      accumulation_steps=1,
      num_steps=20,
      log_every=5,
      checkpoint_every=5,
      max_to_keep=3,
      # Cross-encoder rows as one token stream per device, as
      # configs/squad_longdoc.py (best_jax/train/token_budget.py), but
      # attention on every row at full length: a stage of 20 steps spends
      # more compiling than length groups would save (lowering its
      # `trainer.train_step` at one budget per group count took 17.9 s with
      # one group, 22.7 s with two, 26.6 s with three; tests/test_bert.py,
      # test_train_steps.py and test_multidevice.py cover the groups).
      unpadded=True,
      attention_groups=1,
      # One stream size per stage (the product's default is up to
      # `token_budget.MAX_BUDGETS`, 3): each size is one more trace and
      # compile of the stage's step, which a few steps do not win back
      # (tests/fakes.py's tiny experiment, warm compilation cache, beside a
      # training run on the 2-core dev VM: 52-57 s with one, 65-72 s with
      # three). That experiment keeps three, so the fault and multi-process
      # tests run steps at several sizes.
      max_budgets=1,
  ))

  # A random BertConfig.tiny() ranker with the MiniLM tokenizer's vocabulary,
  # so that real text can be tokenized.
  config.ranker = ml_collections.ConfigDict(dict(
      kind="cross", similarity="cosine", scale=20.0,
      tiny=True, checkpoint="minilm-l6", overrides=dict(
          vocab_size=30522, max_position_embeddings=64,
          hidden_dropout=0.1, attention_dropout=0.1)))
  config.data = ml_collections.ConfigDict(dict(
      name="synthetic", num_queries=48, num_docs=40, seed=0,
      max_queries=None))
  config.segments = ml_collections.ConfigDict(dict(
      max_len=48, max_query_len=8, max_title_len=4, min_len=8, k_train=4,
      max_segments=8, train_lengths="uniform"))
  config.train.negatives_depth = 20
  # Bi-encoders (ranker.kind="bi") may also use the batch's other segments.
  config.train.in_batch_negatives = False
  # Add the data shards' gradients in one fixed order (all-to-all, local
  # sum, all-gather), so 2 processes x 4 devices give the bits of 1 x 8 but
  # for XLA:CPU's per-process codegen; each shard draws its own dropout, so
  # results depend on the number of data shards (`steps.loss_and_gradients`;
  # `train` refuses it with in-batch negatives or a model axis over 1).
  config.train.fixed_order_reduction = True
  config.train.eval_every = 5
  config.train.patience = 2
  config.regimes = ("firstp", "maxp", "maxp_all", "goldp", "best")
  config.best = ml_collections.ConfigDict(dict(
      theta0="joint",  # or "pretrained" (a bi-encoder): see checks.THETA0
      max_iterations=3, pairing="same", select_with_dropout=False,
      evaluate_theta0=True))
  config.eval = ml_collections.ConfigDict(dict(
      depth=10, aggregation="max", rows_per_call=64))
  config.birch = ml_collections.ConfigDict(dict(
      enabled=True, model="MaxP", k=3, folds=2, max_sentences=16))
  # Every model fused with BM25 (α on dev); the zero-shot peer needs the
  # real MiniLM weights, so tests leave it off.
  config.interpolate = ml_collections.ConfigDict(dict(enabled=True))
  config.peer = ml_collections.ConfigDict(dict(enabled=False, words=90))
  # The QDS-Transformer regime (add "qds" to `regimes`): whole documents in
  # one sparse-attention row (configs/qds_squad_longdoc.py has the real one).
  config.qds = ml_collections.ConfigDict(dict(
      max_len=96, max_sentences=16, window=8, pattern="qds", first_tokens=8,
      head="paper", head_dropout=0.1, loss="sigmoid_cross_entropy",
      learning_rate=1e-3, rows_per_call=16))
  return config
