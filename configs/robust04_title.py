"""BeST, FirstP, MaxP and Birch on Robust04 title queries (SPEC §6).

5-fold cross-validation on the standard folds (capreolus' copy of Yang et
al. 2019's folds; the test fold is `:FOLD`, the next one is the dev fold, the
other three train). Pointwise cross-entropy, 1 positive + 10 negatives from the
BM25+RM3 top-100. Topics, qrels, the BM25+RM3 run and the folds come from
../shared/data/robust04 ($BEST_JAX_DATA overrides the folder). Document texts
(TREC Disks 4 & 5, licensed) come from ir_datasets
(`disks45/nocr/trec-robust-2004`) when it is installed and has them, or from a
corpus file: --config.data.corpus=robust04.jsonl (id, title, text).

  python -m best_jax train --config configs/robust04_title.py \
      --workdir runs/robust04_title --config.data.corpus=robust04.jsonl

runs the five folds (WORKDIR/s1 ... s5) and evaluates their pooled held-out
runs (WORKDIR/metrics.json, results.md); `:s3` runs the fold s3 alone.

Expected figures: not measured here (no document texts on this machine).
The literature's NDCG@20 (SPEC §8): BERT-FirstP 0.444, BERT-MaxP 0.469,
Birch 0.5454 (title); the BM25+RM3 run gives NDCG@20 0.4514, MAP 0.3033.
"""

import os

import ml_collections

from best_jax.train.sharding import STANDARD_LOGICAL_AXIS_RULES


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """`arg`: one test fold (s1 to s5); none runs all five and pools them."""
  if arg not in (None, "", "s1", "s2", "s3", "s4", "s5"):
    raise ValueError(f"unknown config argument {arg!r}: use a test fold "
                     "(:s1 to :s5) or none")
  data_dir = os.environ.get("BEST_JAX_DATA", os.path.join(
      os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
      "data"))
  robust = os.path.join(data_dir, "robust04")
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.data = ml_collections.ConfigDict(dict(
      name="trec",
      topics=os.path.join(robust, "topics.robust04.301-450.601-700.txt"),
      qrels=os.path.join(robust, "qrels.robust2004.txt.gz"),
      run=os.path.join(robust, "rob04_yang19_bm25rm3.top1000.run.gz"),
      folds=os.path.join(robust, "rob04_yang19_folds.json"),
      fold=arg or "s1",
      cross_validate=not arg,  # No fold given: all five, pooled.
      topic_field="title",
      depth=100,
      corpus="",
      ir_datasets="disks45/nocr/trec-robust-2004",
      max_queries=None))
  config.ranker = ml_collections.ConfigDict(dict(
      kind="cross", tiny=False, checkpoint="minilm-l6", overrides=dict()))
  config.segments = ml_collections.ConfigDict(dict(
      max_len=512, max_query_len=24,
      max_title_len=24, min_len=96, k_train=4, max_segments=None,
      train_lengths="uniform"))
  config.mesh = ml_collections.ConfigDict(dict(
      shape=(-1, 1), axis_names=("data", "model")))
  config.logical_axis_rules = STANDARD_LOGICAL_AXIS_RULES
  num_steps = 2000
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=2e-5, warmup_steps=200, total_steps=num_steps,
      b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01, max_grad_norm=1.0))
  config.train = ml_collections.ConfigDict(dict(
      loss="sigmoid_cross_entropy", batch_size=8, group_size=11,
      negatives_depth=100, num_steps=num_steps, accumulation_steps=1,
      log_every=50, eval_every=250, patience=3, checkpoint_every=250,
      # Unpadded rows, attention in length groups: see configs/squad_longdoc.py.
      max_to_keep=1, unpadded=True,
      attention_groups=3, max_budgets=3))
  config.regimes = ("firstp", "maxp", "best")
  config.best = ml_collections.ConfigDict(dict(
      theta0="joint",  # or "pretrained" (a bi-encoder): see checks.THETA0
      max_iterations=4, pairing="same", select_with_dropout=False))
  config.eval = ml_collections.ConfigDict(dict(
      depth=100, aggregation="max", rows_per_call=256))
  config.birch = ml_collections.ConfigDict(dict(
      enabled=True, model="MaxP", k=3, folds=5, max_sentences=128))
  return config
