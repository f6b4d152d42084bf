"""Using a trained model outside its experiment: load it (from a work
directory or an exported directory), export it to Hugging Face format, score
pairs and rerank TREC runs (`Reranker`, the `export`, `score` and `rerank`
commands)."""
