"""Sentence spans: hand-checked cases and properties on arbitrary text."""

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from best_jax.errors import InputError
from best_jax.segments.sentences import SPLITTERS, sentence_spans


def _texts(text, spans_n2):
  return [text[start:end] for start, end in spans_n2.tolist()]


@pytest.mark.parametrize("splitter", SPLITTERS)
def test_abbreviations_and_numbers_do_not_split(splitter):
  text = ("Mr. Smith went to Washington. He arrived at 3.30 p.m. on Monday! "
          "Did he? Yes.")
  spans_n2 = sentence_spans(text, splitter=splitter)
  assert spans_n2.dtype == np.int32
  assert spans_n2.tolist() == [[0, 29], [30, 64], [65, 72], [73, 77]]
  assert _texts(text, spans_n2) == [
      "Mr. Smith went to Washington.", "He arrived at 3.30 p.m. on Monday!",
      "Did he?", "Yes."]


def test_paragraph_breaks_end_sentences_without_punctuation():
  text = "Heading\n\nBody text without a full stop\n\nLast line."
  assert _texts(text, sentence_spans(text)) == [
      "Heading", "Body text without a full stop", "Last line."]


def test_surrounding_whitespace_is_stripped():
  text = "  Leading space. Trailing space.  "
  assert sentence_spans(text).tolist() == [[2, 16], [17, 32]]


def test_text_without_punctuation_is_one_sentence():
  text = "no punctuation at all just words " * 50
  assert sentence_spans(text).tolist() == [[0, len(text) - 1]]


@pytest.mark.parametrize("text", ["", "   \n\t ", "\n\n\n"])
def test_empty_and_blank_text_give_no_sentences(text):
  spans_n2 = sentence_spans(text)
  assert spans_n2.shape == (0, 2)
  assert spans_n2.dtype == np.int32


def test_offsets_count_characters_not_bytes():
  text = "Héllo wörld 😀 is here. 第一句。Bye."
  assert _texts(text, sentence_spans(text)) == [
      "Héllo wörld 😀 is here.", "第一句。", "Bye."]


def test_unknown_splitter_is_an_input_error():
  with pytest.raises(InputError, match="unknown sentence splitter"):
    sentence_spans("A b.", splitter="regex")


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(st.text(alphabet=st.characters(codec="utf-8"),
                          max_size=200)
                  | st.lists(st.sampled_from(["Dr.", "a", "B", ".", "!", "?",
                                              " ", "\n", "\n\n", "3.5", "…",
                                              "。", "\"", "é", "😀"]),
                             max_size=60).map("".join))
def test_spans_are_ordered_stripped_and_cover_all_non_whitespace(text):
  spans_n2 = sentence_spans(text)
  assert spans_n2.shape[1:] == (2,)
  covered = np.zeros(len(text), bool)
  previous_end = 0
  for start, end in spans_n2.tolist():
    assert previous_end <= start < end <= len(text)
    piece = text[start:end]
    assert piece == piece.strip() and piece
    covered[start:end] = True
    previous_end = end
  uncovered = [c for c, hit in zip(text, covered) if not hit]
  assert all(c.isspace() for c in uncovered)
