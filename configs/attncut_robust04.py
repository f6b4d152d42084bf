"""AttnCut and baselines on Robust04 BM25+RM3 top-300 lists (AttnCut, AAAI 2021).

Command (from the repository root; outputs go to the work dir only):

  python -m best_jax truncate --config configs/attncut_robust04.py \\
      --workdir /tmp/attncut_r04

It writes `truncation_report.md/.json` (Tables 2-4 analogues, p-values) and
`truncation_cutoffs.png` (Figure 2 analogue) to the work dir; an interrupted
run resumes. `:runlocal` is a tiny smoke run (1 seed, 1 epoch, small models).

Arguments: "" (default) = the CPU-sized run below; "paper" = the paper's
sizes (LSTM 128/direction, d = 256; Choppy 127 + 1, 8 heads) with the same
schedule; "runlocal" = smoke test.

Figures this config gave (2026-11-29, 2 shared CPU cores; random 80/20
splits, seeds 0-4 unless a count is given; mean ± std of the per-split means;
score-derived features only; F1@k / ±1 DCG@k):
  Oracle            0.4434 ± 0.0246   2.0008 ± 0.3779
  Fixed-5/10/50     0.1701 / 0.2299 / 0.3034     0.2239 / -0.0981 / -4.2551
  Greedy-k          0.3012 ± 0.0174   0.1548 ± 0.1160   (k = 35-45 / 2-4)
  BiCut             0.2889 ± 0.0334   0.2000 ± 0.0693
  Choppy            0.3098 ± 0.0203   0.4154 ± 0.1448 (4 seeds)
  AttnCut (5 ep.)   0.2852 ± 0.0126   0.2025 ± 0.0638
  AttnCut (15 ep.)  0.3221 ± 0.0150   (F1 only); / Oracle = 0.726
  Wilcoxon (250 pooled pairs): AttnCut-15ep vs Greedy-k p = 0.0032, vs BiCut
  p = 0.00012, vs Choppy (5 ep.) p = 0.020; AttnCut-5ep vs BiCut p = 0.35.
  On all 250 topics (label-only, `--method oracle|fixed`): Oracle F1 0.4435,
  Fixed-5 0.1687, Fixed-10 0.2305, Fixed-50 0.3110 (= SPEC section 7);
  Greedy-k on the yang19 5 folds F1 0.3132. 5-fold CV (yang19 folds), F1:
  AttnCut 0.2841, BiCut 0.2772, Choppy 0.3209 (5 epochs each).
  The run stopped before the remaining schedule (1 seed each for the Table 2
  variants, 2 seeds for the recall model); rerun the command to complete it.
"""

import os

import ml_collections

from best_jax.truncate import train


def _data(*parts: str) -> str:
  root = os.environ.get("BEST_JAX_DATA", os.path.join(
      os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"))
  return os.path.normpath(os.path.join(root, *parts))


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  """The experiment config; `arg` is "", "paper" or "runlocal"."""
  c = ml_collections.ConfigDict()
  c.run = _data("robust04", "rob04_yang19_bm25rm3.top1000.run.gz")
  c.qrels = _data("robust04", "qrels.robust2004.txt.gz")
  c.folds = _data("robust04", "rob04_yang19_folds.json")
  c.depth = 300
  c.seeds = (0, 1, 2, 3, 4)
  c.test_fraction = 0.2
  c.protocols = ("random", "folds")
  c.sigmas = (0.0, 0.3, 0.5, 0.7)
  c.recall_rule = "lower_edge"
  c.long_epochs = 15  # "attncut_long": AttnCut/RAML trained 3x longer
  # BiCut loss weight of non-relevant documents per target metric: F1 rewards
  # keeping documents with P(relevant) above ~F1/2, DCG above 1/2.
  c.bicut_alpha = {"f1": 0.3, "dcg": 0.5}
  # (protocol, metric, method[, splits]): method-major, the main comparison
  # first; the later entries complete every method on every split (resume).
  main = ("attncut", "bicut", "choppy")
  c.schedule = (
      [("random", m, "baselines") for m in ("f1", "dcg")] +
      [("random", "f1", x) for x in main] +
      [("random", "dcg", x, 3) for x in main] +
      [("random", "f1", "recall", 2)] +
      [("random", "f1", "attncut_long")] +
      [("random", "f1", x, 1) for x in ("attncut_mle", "attncut_bi",
                                        "attncut_rl")] +
      [("random", "dcg", x, 1) for x in ("attncut_mle", "attncut_rl")] +
      [("folds", m, "baselines") for m in ("f1", "dcg")] +
      [("folds", "f1", x) for x in main] +
      [("random", m, x) for x in main for m in ("f1", "dcg")] +
      [("random", "f1", "recall")] +
      [("random", "f1", x) for x in ("attncut_mle", "attncut_bi",
                                     "attncut_rl")] +
      [("random", "dcg", x) for x in ("attncut_mle", "attncut_rl")])
  t = train.default_config()
  # CPU-sized (the 2 shared cores): half-width LSTM (64/direction, d = 128),
  # Choppy with 31 + 1 dims and 4 heads; 5 epochs of batch 20.
  t.lstm_hidden = 64
  t.heads = 4
  t.choppy_position_dim = 31
  t.choppy_heads = 4
  t.epochs = 5
  t.learning_rate = 2e-3
  if arg == "paper":
    t.lstm_hidden, t.choppy_position_dim, t.choppy_heads = 128, 127, 8
  elif arg == "runlocal":
    c.seeds = (0,)
    c.protocols = ("random",)
    t.lstm_hidden, t.heads, t.choppy_position_dim, t.choppy_heads = 8, 2, 7, 2
    t.epochs = 1
  elif arg:
    raise ValueError(f"unknown config argument {arg!r}")
  c.train = t
  return c
