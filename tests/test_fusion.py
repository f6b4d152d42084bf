"""Each model's BM25 fusion normalises the reranked top k only, on dev
(where α is chosen) and on test alike."""

import types

import pytest

from best_jax.experiment import fusion
from best_jax.rerank import interpolate


def _inputs():
  """Two splits whose first stage ranks 4 documents, the top 2 reranked."""
  first = {"q1": {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0},
           "q2": {"a": 1.0, "b": 4.0, "c": 3.0, "d": 2.0}}
  qrels = {"q1": {"b": 1}, "q2": {"c": 1}}
  split = types.SimpleNamespace(run=first, topics=dict.fromkeys(first, "t"),
                                qrels=qrels)
  top = {"q1": ["a", "b"], "q2": ["b", "c"]}
  return types.SimpleNamespace(
      data=types.SimpleNamespace(splits={"dev": split, "test": split}),
      candidates={"dev": top, "test": top})


def test_fuse_normalises_the_reranked_candidates_only():
  inputs = _inputs()
  model = {"q1": {"a": 0.1, "b": 0.9}, "q2": {"b": 0.2, "c": 0.3}}
  fused, record = fusion.fuse(inputs, "M", model, model)
  want = interpolate.interpolate(inputs.data.splits["test"].run, model,
                                 record["alpha"])
  for qid, scores in want.items():
    assert {d: fused[qid][d] for d in scores} == scores
    assert min(scores.values()) > max(
        s for d, s in fused[qid].items() if d not in scores)


def test_fuse_refuses_a_completed_list():
  """A model run with ranks beyond the reranked top k (placeholders) would
  be normalised over them: refused."""
  inputs = _inputs()
  model = {"q1": {"a": 0.1, "b": 0.9}, "q2": {"b": 0.2, "c": 0.3}}
  completed = {q: dict(s, d=-1.0) for q, s in model.items()}
  with pytest.raises(ValueError, match="reranked candidates"):
    fusion.fuse(inputs, "M", model, completed)
  with pytest.raises(ValueError, match="reranked candidates"):
    fusion.fuse(inputs, "M", completed, model)
  with pytest.raises(ValueError, match="queries without reranked"):
    fusion.fuse(inputs, "M", model, dict(model, q3={"a": 1.0}))
