"""Segment P@1 criteria: answer containment, majority overlap, any overlap."""

import json
import math

import pytest

from best_jax.errors import InputError
from best_jax.evaluate import evidence as ev

# A document with a 100-character gold paragraph [200, 300) and two answers.
GOLD = ev.Evidence(passage=(200, 300), answers=((240, 250), (236, 252)))


@pytest.mark.parametrize("span, answer, majority, overlap", [
    ((230, 260), True, True, True),      # inside the paragraph, holds both
    ((238, 251), True, True, True),      # holds only the shorter answer
    ((241, 400), False, True, True),     # cuts both answers; 59 of 100 in
    ((255, 600), False, False, True),    # 45 of the paragraph's 100 chars
    ((0, 201), False, False, True),      # one shared character: old hit
    ((0, 200), False, False, False),     # touches, shares nothing
    ((150, 260), True, True, True),      # 60 of the shorter 100
    ((100, 240), False, False, True),    # 40 of the shorter 100
    ((100, 251), True, True, True),      # 51 of 100 shared; holds answer 1
    ((100, 250), True, False, True),     # exactly half: not a majority
    ((240, 250), True, True, True),      # the answer itself
])
def test_criteria_by_hand(span, answer, majority, overlap):
  assert ev.contains_answer(span, GOLD.answers) is answer
  assert ev.majority_overlap(span, GOLD.passage) is majority
  assert ev.overlaps(span, GOLD.passage) is overlap
  for name, expected in zip(ev.CRITERIA, (answer, majority, overlap)):
    assert ev.is_evidence(span, GOLD, name) is expected


def test_majority_is_of_the_shorter_span():
  passage = (1000, 1300)
  # A short segment: most of it inside the paragraph.
  assert ev.majority_overlap((1250, 1340), passage)      # 50 of 90
  assert not ev.majority_overlap((1260, 1400), passage)  # 40 of 140
  # A long segment holding most of the paragraph counts ...
  assert ev.majority_overlap((0, 1200), passage)         # 200 of 300
  # ... and of a tiling of long segments at most one does.
  tiling = [(0, 1140), (1140, 2500)]                     # 140 / 160 of 300
  assert [ev.majority_overlap(s, passage) for s in tiling] == [False, True]
  assert not ev.majority_overlap((5, 5), passage)        # empty segment
  assert not ev.majority_overlap((1100, 1200), (7, 7))   # empty passage


def test_p_at_1_and_baselines():
  spans = {("q1", "d1"): [(0, 200), (200, 300), (300, 500)],
           ("q2", "d1"): [(0, 255), (255, 600)],
           ("q3", "d2"): [(0, 100), (100, 400)]}
  evidence = {("q1", "d1"): GOLD, ("q2", "d1"): GOLD,
              ("q3", "d2"): ev.Evidence((120, 380))}  # no answers
  chosen = {("q1", "d1"): 1, ("q2", "d1"): 1, ("q3", "d2"): 1}
  # q3 has no answers: the answer criterion judges q1 and q2 only.
  assert ev.p_at_1(chosen, spans, evidence, "answer") == 0.5
  assert ev.p_at_1(chosen, spans, evidence, "majority") == pytest.approx(2 / 3)
  assert ev.p_at_1(chosen, spans, evidence, "overlap") == 1.0
  assert math.isnan(ev.p_at_1({("q3", "d2"): 0}, spans, evidence, "answer"))
  assert ev.baselines(spans, evidence, "answer") == {
      "ceiling": 1.0, "random": pytest.approx(5 / 12), "first": 0.5,
      "pairs": 2}
  b = ev.baselines(spans, evidence, "overlap")
  assert b["ceiling"] == 1.0 and b["pairs"] == 3
  assert b["random"] == pytest.approx((1 / 3 + 2 / 2 + 1 / 2) / 3)
  assert b["first"] == pytest.approx(1 / 3)
  with pytest.raises(ValueError, match="unknown criterion"):
    ev.is_evidence((0, 1), GOLD, "nearby")


def test_read_evidence_new_and_old_gold_files(tmp_path):
  path = tmp_path / "gold.test.jsonl"
  path.write_text(
      json.dumps({"qid": "a", "docid": "d", "start": 5, "end": 50,
                  "answers": [[10, 14], [9, 14]]}) + "\n"
      + json.dumps({"qid": "b", "docid": "d", "start": 60, "end": 90})
      + "\n")
  got = ev.read_evidence(path)
  assert got == {("a", "d"): ev.Evidence((5, 50), ((10, 14), (9, 14))),
                 ("b", "d"): ev.Evidence((60, 90), ())}
  path.write_text('{"qid": "a", "docid": "d", "start": 5}\n')
  with pytest.raises(InputError, match="bad gold record") as e:
    ev.read_evidence(path)
  assert e.value.line == 1
