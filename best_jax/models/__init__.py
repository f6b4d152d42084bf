"""The Flax NNX BERT encoder, rankers, and Hugging Face weight import."""
