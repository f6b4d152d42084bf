"""The explain page: valid CSS always, and a browser's rendering when
Chromium is installed (`apt-get install -y chromium`)."""

import argparse
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import tinycss2

from best_jax.data import trec
from best_jax.select import explain

SENTENCE = ("Sentence {i} of the article tells about the river, the bridge "
            "and the town that grew beside them over the centuries.")


def _long_record(**overrides) -> dict:
  """A 60-sentence document whose selected segment is near its end."""
  text = " ".join(SENTENCE.format(i=i) for i in range(60))
  start = text.index("Sentence 50 ")
  end = text.index("Sentence 53 ") - 1
  gold = [text.index("Sentence 48 "), text.index("Sentence 52 ") - 1]
  answer = text.index("river", start)
  record = {"qid": "q1", "query": "Which river runs by the town?",
            "docid": "d1", "title": "A <Town>", "text": text, "segment": 9,
            "num_segments": 12, "score": 1.25, "span": [start, end],
            "gold": gold, "answers": [[answer, answer + 5]],
            "relevant": True}
  record.update(overrides)
  return record


def _style(page: str) -> str:
  (css,) = re.findall(r"<style>(.*?)</style>", page, re.S)
  return css


def test_css_parses_and_styles_the_page():
  css = _style(explain.render_html("BeST-1", [_long_record()]))
  rules = tinycss2.parse_stylesheet(css, skip_comments=True,
                                    skip_whitespace=True)
  errors = [r for r in rules if r.type == "error"]
  assert not errors, errors
  declarations = {}
  for rule in rules:
    assert rule.type == "qualified-rule", rule
    selector = tinycss2.serialize(rule.prelude).strip()
    assert re.fullmatch(r"[\w.,:\s>()-]+", selector), selector
    parsed = tinycss2.parse_blocks_contents(rule.content, skip_comments=True,
                                            skip_whitespace=True)
    bad = [d for d in parsed if d.type != "declaration"]
    assert not bad, (selector, bad)
    declarations[selector] = {
        d.lower_name: tinycss2.serialize(d.value).strip() for d in parsed}
  # The rules the page depends on are there, with their values.
  assert declarations["mark"]["background"] == "#ffe066"
  assert declarations[".doc"]["overflow"] == "auto"
  assert declarations[".doc"]["max-height"] == "16em"
  assert declarations[".doc"]["position"] == "relative"  # for the scroll
  assert declarations["u"]["text-decoration-color"] == "#2a9d8f"
  assert declarations["u"]["text-decoration-thickness"] == "3px"


def test_markup_question_evidence_gold_and_answers():
  record = _long_record()
  page = explain.render_html("BeST-1", [record])
  assert "<h2>Which river runs by the town? " in page
  assert "A &lt;Town&gt;" in page and "A <Town>" not in page
  # One highlighted segment in the document, with an id to scroll to.
  assert page.count('<mark id="ev0">') == 1
  assert page.count("</mark>") == 2  # the segment and the legend's sample
  assert 'href="#ev0"' in page
  doc = page[page.index('<div class="doc">'):]
  marked = doc[doc.index('<mark id="ev0">'):doc.index("</mark>")]
  # The gold passage runs into the segment: underlined on both sides of the
  # mark's start, and the answer is bold inside the mark.
  assert marked.startswith('<mark id="ev0"><u>Sentence 50 of the article '
                           'tells about the <b class="answer">river</b>')
  assert doc.index("<u>Sentence 48") < doc.index('<mark id="ev0">')
  assert explain.verdict(record) == ("holds an answer", "hit")
  assert "scrollTop" in page


@pytest.mark.parametrize("overrides, words", [
    ({}, "holds an answer"),
    ({"answers": []}, "mostly the gold passage"),
    ({"answers": [[0, 8]]}, "mostly the gold passage"),
    ({"answers": [], "gold": [0, 5800]}, "touches the gold passage"),
    ({"answers": [], "gold": [0, 100]}, "misses the gold passage"),
    ({"gold": None}, "no gold passage"),
    ({"relevant": False, "gold": None}, "not the relevant document"),
])
def test_verdicts(overrides, words):
  record = _long_record(**overrides)
  assert explain.verdict(record)[0] == words
  assert f"[{words}]" in explain.render_text("M", [record])


def test_nested_spans_split_only_where_an_outer_one_ends():
  text = "abcdefghij"
  got = explain._nested(text, 0, len(text), [
      ("<m>", "</m>", [[2, 6]]), ("<u>", "</u>", [[4, 9]]),
      ("<b>", "</b>", [[5, 7], [6, 8]])])
  assert got == "ab<m>cd<u>e<b>f</b></u></m><u><b>gh</b>i</u>j"


def _chromium() -> str | None:
  for name in ("chromium", "chromium-browser", "google-chrome"):
    path = shutil.which(name)
    if path:
      return path
  return None


def _near(image: np.ndarray, rgb, tolerance: int = 6) -> np.ndarray:
  return np.all(np.abs(image[..., :3].astype(int) - rgb) <= tolerance, -1)


def test_page_in_headless_chromium(tmp_path):
  """The `explain` command's page, as a browser shows it: the document box
  is scrolled to the highlighted segment and the gold passage is
  underlined in its colour (the old CSS applied neither)."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  browser = _chromium()
  if browser is None:
    pytest.skip("Chromium is not installed (apt-get install -y chromium): "
                "the browser check of the explain page does not run")
  record = _long_record()
  workdir = tmp_path / "run"
  for sub in ("segments", "explain", "runs"):
    (workdir / sub).mkdir(parents=True)
  (workdir / "metrics.json").write_text(json.dumps({"dev_mrr": {"MaxP": 0}}))
  sentences = [[m.start(), m.end()] for m in
               re.finditer(r"Sentence \d+ [^.]*\.", record["text"])]
  spans = [[a[0], b[1]] for a, b in zip(sentences[::5], sentences[4::5])]
  spans[10] = record["span"]
  scores = [0.0] * len(spans)
  scores[10] = 1.0
  (workdir / "segments" / "MaxP.json").write_text(json.dumps(
      [{"qid": "q1", "docid": "d1", "scores": scores, "spans": spans}]))
  trec.write_run({"q1": {"d1": 1.0}}, str(workdir / "runs" / "maxp.run"))
  (workdir / "explain" / "documents.json").write_text(json.dumps({
      "documents": {"d1": [record["title"], record["text"]]},
      "topics": {"q1": record["query"]}, "qrels": {"q1": {"d1": 1}},
      "gold": {"q1\td1": record["gold"]},
      "answers": {"q1\td1": record["answers"]}}))
  page = workdir / "page.html"
  assert explain.main(argparse.Namespace(
      workdir=str(workdir), model=None, out=str(page), queries=20)) == 0
  shot = tmp_path / "page.png"
  subprocess.run(
      [browser, "--headless", "--no-sandbox", "--disable-gpu",
       "--disable-background-networking", "--disable-component-update",
       "--disable-sync", "--no-first-run",
       f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
       "--window-size=1000,1000", f"--screenshot={shot}",
       page.as_uri()], check=True, capture_output=True, timeout=120)
  image = np.asarray(Image.open(shot).convert("RGB"))
  if os.environ.get("BEST_JAX_KEEP_SCREENSHOT"):
    shutil.copy(shot, os.environ["BEST_JAX_KEEP_SCREENSHOT"])
  highlight = _near(image, (0xff, 0xe0, 0x66))
  underline = _near(image, (0x2a, 0x9d, 0x8f), tolerance=12)
  # Below the legend (whose sample is highlighted too), the segment shows
  # in the document box: the box opened at the evidence, not at sentence 0.
  assert highlight.any(), "no pixel in the highlight colour #ffe066"
  legend_rows = np.nonzero(highlight.any(1))[0][0] + 40
  assert highlight[legend_rows:].sum() > 2000
  assert underline[legend_rows:].sum() > 300
  # The whole document is in the page, but its start is scrolled away.
  assert "Sentence 0 of" in page.read_text()
