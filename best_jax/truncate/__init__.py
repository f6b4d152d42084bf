"""Ranked-list truncation: AttnCut, BiCut, Choppy and simple cut-offs."""
