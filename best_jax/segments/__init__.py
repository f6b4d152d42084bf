"""Sentence splitting and fixed-shape padded segment tensors."""
