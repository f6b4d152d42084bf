"""First-stage retrieval (BM25) producing TREC runs."""
