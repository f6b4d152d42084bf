"""Experiments end to end: `best_jax train` (data → training regimes →
selection → evaluation → report), its work directory and its checks."""
