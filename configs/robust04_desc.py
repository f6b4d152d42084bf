"""BeST, FirstP, MaxP and Birch on Robust04 description queries.

5-fold cross-validation on the standard folds (capreolus' copy of Yang et
al. 2019's folds; the test fold is `:FOLD`, the next one is the dev fold, the
other three train). Pointwise cross-entropy, 1 positive + 10 negatives from the
BM25+RM3 top-100. Topics, qrels, the BM25+RM3 run and the folds come from
../shared/data/robust04 ($BEST_JAX_DATA overrides the folder). Document texts
(TREC Disks 4 & 5, licensed) come from ir_datasets
(`disks45/nocr/trec-robust-2004`) when it is installed and has them, or from a
corpus file: --config.data.corpus=robust04.jsonl (id, title, text).

  python -m best_jax train --config configs/robust04_desc.py \
      --workdir runs/robust04_desc --config.data.corpus=robust04.jsonl

runs the five folds (WORKDIR/s1 ... s5) and evaluates their pooled held-out
runs (WORKDIR/metrics.json, results.md); `:s3` runs the fold s3 alone.

Expected figures: not measured here (no document texts on this machine).
The literature's NDCG@20 on description queries (SPEC §8): BERT-FirstP
0.491, BERT-MaxP 0.529, Birch 0.5931. The first stage is the BM25+RM3 run of
the title queries (the only run here), as in Dai & Callan's reranking setup.
"""

import os

import ml_collections

from best_jax import config as config_lib


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """`arg`: one test fold (s1 to s5); none runs all five and pools them."""
  base = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "robust04_title.py")
  config = config_lib.config_module(base).get_config(arg)
  config.data.topic_field = "description"
  config.segments.max_query_len = 64  # Description queries are longer.
  return config
