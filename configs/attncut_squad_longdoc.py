"""AttnCut and baselines on squad_longdoc BM25 top-100 lists, with texts.

squad_longdoc's files come from `prepare` (the BM25 run, qrels and corpus of
its test questions), into $BEST_JAX_DATA/squad_longdoc:

  python -m best_jax prepare squad_longdoc \\
      --squad-json ../shared/data/squad/dev-v1.1.json \\
      --out $BEST_JAX_DATA/squad_longdoc --no-tfds --no-segment-stats
  python -m best_jax truncate --config configs/attncut_squad_longdoc.py:cpu \\
      --workdir /tmp/attncut_squad

Each question has one relevant document (the chunk holding it), so F1@k is
2 / (k + 1) when it is in the top k. Arguments, comma-separated: "cpu" (the
small sizes of `attncut_robust04.py:cpu`), "scores" (score features only;
by default the paper's text features from the corpus are added), "runlocal"
(smoke test). Random 80/20 splits of the test questions, seeds 0-4, model
selection on a 20% validation split of the training queries.
"""

import os

import ml_collections

from best_jax.truncate import train


def _data(*parts: str) -> str:
  root = os.environ.get("BEST_JAX_DATA", os.path.join(
      os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"))
  return os.path.normpath(os.path.join(root, *parts))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The experiment config; `arg`: comma-separated "cpu", "scores",
  "runlocal"."""
  options = set(filter(None, (arg or "").split(",")))
  unknown = options - {"cpu", "scores", "runlocal"}
  if unknown:
    raise ValueError(f"unknown config argument(s) {sorted(unknown)}")
  c = ml_collections.ConfigDict()
  c.run = _data("squad_longdoc", "bm25.test.run")
  c.qrels = _data("squad_longdoc", "qrels.test.txt")
  c.corpus = "" if "scores" in options else _data("squad_longdoc",
                                                  "corpus.jsonl")
  c.folds = ""
  c.paper_figures = False
  c.depth = 100
  c.seeds = (0, 1, 2, 3, 4)
  c.test_fraction = 0.2
  c.protocols = ("random",)
  c.sigmas = (0.0, 0.5)
  c.recall_rule = "lower_edge"
  c.bicut_alpha = {"f1": 0.3, "dcg": 0.5}
  main = ("attncut", "bicut", "choppy")
  c.schedule = ([("random", m, "baselines") for m in ("f1", "dcg")] +
                [("random", "f1", x) for x in main] +
                [("random", "dcg", x) for x in main])
  t = train.default_config()
  t.learning_rate = 2e-3
  t.epochs, t.patience, t.valid_fraction = 30, 5, 0.2
  if "cpu" in options:
    t.lstm_hidden, t.choppy_position_dim, t.choppy_heads = 64, 31, 4
    t.epochs, t.patience = 20, 4
  if "runlocal" in options:
    c.seeds = (0,)
    t.lstm_hidden, t.heads, t.choppy_position_dim, t.choppy_heads = 8, 2, 7, 2
    t.epochs, t.patience = 2, 1
  c.train = t
  return c
