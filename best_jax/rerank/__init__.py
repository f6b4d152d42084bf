"""Reranking a first-stage run: segment-score aggregation and Birch."""
