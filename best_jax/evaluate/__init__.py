"""Ranking metrics (inside jit and trec_eval-compatible on the host) and significance tests."""
