"""best_jax: JAX/Flax NNX rerankers for long documents.

Architecture, one sub-package per stage:
  data      → IR file formats (topics, qrels, runs, corpora) and dataset builders
  segments  → sentence splitting and fixed-shape segment tensors
  retrieval → first-stage retrieval (BM25)
  models    → the NNX BERT encoder, rankers and weight import
  train     → pure jitted train steps, sharding, checkpoints, training loops
  select    → segment scoring and best-segment selection
  evaluate  → ranking metrics (jit and trec_eval-compatible host), significance tests
  truncate  → ranked-list truncation (AttnCut, BiCut, Choppy, baselines)
  serve     → trained models outside their experiment: export, score, rerank

`best_jax.Reranker` (from `best_jax.serve.reranker`) is imported on first use,
so that `import best_jax` and light commands do not load JAX.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
  if name == "Reranker":
    from best_jax.serve.reranker import Reranker  # pylint: disable=g-import-not-at-top
    return Reranker
  raise AttributeError(f"module 'best_jax' has no attribute {name!r}")
