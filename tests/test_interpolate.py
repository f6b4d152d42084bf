"""Tests of BM25 interpolation with hand-computed values."""

import pytest

from best_jax.evaluate import trec_eval
from best_jax.rerank.interpolate import (GRID, choose_alpha, complete,
                                         interpolate, min_max, sweep)


def test_min_max_by_hand():
  assert min_max({"a": 1.0, "b": 3.0, "c": 2.0}) == {"a": 0.0, "b": 1.0,
                                                     "c": 0.5}
  assert min_max({"a": -4.0, "b": 4.0}) == {"a": 0.0, "b": 1.0}


def test_constant_and_single_lists_normalise_to_zero():
  assert min_max({"a": 2.5, "b": 2.5, "c": 2.5}) == {"a": 0.0, "b": 0.0,
                                                     "c": 0.0}
  assert min_max({"a": 7.0}) == {"a": 0.0}
  assert min_max({}) == {}
  fused = interpolate({"q": {"a": 1.0, "b": 1.0}}, {"q": {"a": 3.0, "b": 3.0}},
                      0.5)
  assert fused == {"q": {"a": 0.0, "b": 0.0}}


def test_non_finite_scores_are_rejected():
  with pytest.raises(ValueError, match="non-finite"):
    min_max({"a": float("nan"), "b": 1.0})


def test_interpolate_by_hand_over_the_reranked_documents_only():
  first = {"q": {"a": 10.0, "b": 8.0, "c": 6.0, "d": 1.0}}
  model = {"q": {"a": 0.1, "b": 0.9, "c": 0.5}}  # the top 3 reranked
  # BM25 over a, b, c: 1, 0.5, 0 (d is not in the top k); model: 0, 1, 0.5.
  fused = interpolate(first, model, 0.4)["q"]
  assert fused == pytest.approx({"a": 0.4, "b": 0.8, "c": 0.3})
  assert interpolate(first, model, 1.0)["q"] == {"a": 1.0, "b": 0.5, "c": 0.0}
  assert interpolate(first, model, 0.0)["q"] == pytest.approx(
      {"a": 0.0, "b": 1.0, "c": 0.5})


def test_interpolate_rejects_documents_the_first_stage_did_not_rank():
  with pytest.raises(ValueError, match="did not rank"):
    interpolate({"q": {"a": 1.0}}, {"q": {"a": 1.0, "z": 2.0}}, 0.5)
  with pytest.raises(ValueError, match="alpha"):
    interpolate({"q": {"a": 1.0}}, {"q": {"a": 1.0}}, 1.5)


def test_complete_keeps_the_rest_in_first_stage_order():
  first = {"q": {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0, "e": 0.5},
           "p": {"x": 1.0, "y": 2.0}}
  reranked = {"q": {"a": 0.2, "b": 0.9}}
  run = complete(reranked, first)
  assert run["q"] == {"b": 5.0, "a": 4.0, "c": 3.0, "d": 2.0, "e": 1.0}
  assert run["p"] == {"y": 2.0, "x": 1.0}  # no reranked list: first stage
  # A tie in the reranked list is broken as trec_eval does: docid descending.
  assert list(complete({"q": {"a": 1.0, "b": 1.0}}, first)["q"])[:2] == [
      "b", "a"]


# Three queries whose reciprocal ranks change with alpha (worked by hand):
#  q1 (relevant b): fused a = α, b = 1 − α/2, c = 0.2(1 − α): b first while
#     α < 2/3, else second -> RR 1 for α ≤ 0.6, 0.5 from 0.7.
#  q2 (relevant z): x = 1 always first; z = (1 − α)/2 vs y = α/2: z second
#     for α ≤ 0.5 (a tie at 0.5 goes to docid z), else third -> 1/2, 1/3.
#  q3 (relevant p): p = α vs r = 1 − α, the tie at 0.5 goes to r -> RR 1/2
#     for α ≤ 0.5, 1 from 0.6.
FIRST = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0, "far": 0.1},
         "q2": {"x": 3.0, "y": 2.0, "z": 1.0},
         "q3": {"p": 3.0, "r": 2.0}}
MODEL = {"q1": {"a": 0.0, "b": 1.0, "c": 0.2},
         "q2": {"x": 1.0, "y": 0.0, "z": 0.5},
         "q3": {"p": 0.0, "r": 1.0}}
QRELS = {"q1": {"b": 1}, "q2": {"z": 1}, "q3": {"p": 1}}


def test_sweep_and_choice_by_hand():
  table = sweep(FIRST, MODEL, QRELS)
  assert list(table) == list(GRID)
  for alpha in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5):
    assert table[alpha] == pytest.approx((1 + 1 / 2 + 1 / 2) / 3)
  assert table[0.6] == pytest.approx((1 + 1 / 3 + 1) / 3)
  for alpha in (0.7, 0.8, 0.9, 1.0):
    assert table[alpha] == pytest.approx((1 / 2 + 1 / 3 + 1) / 3)
  alpha, _ = choose_alpha(FIRST, MODEL, QRELS)
  assert alpha == 0.6
  # On q1 and q2 alone, α 0.0 … 0.5 tie: the smallest wins.
  alpha, table = choose_alpha(FIRST, MODEL, QRELS, qids=["q1", "q2"])
  assert alpha == 0.0 and table[0.0] == table[0.5] > table[0.6]


def test_sweep_equals_trec_eval_of_the_complete_run():
  table = sweep(FIRST, MODEL, QRELS, metric="ndcg_cut_10")
  run = complete(interpolate(FIRST, MODEL, 0.3), FIRST)
  means, _ = trec_eval.evaluate(run, QRELS, ("ndcg_cut_10",))
  assert table[0.3] == means["ndcg_cut_10"]
