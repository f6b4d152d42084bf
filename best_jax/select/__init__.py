"""Scoring segments and selecting each document's best segment."""
