"""The `explain` command: each test query's evidence segment, highlighted.

  python -m best_jax explain --workdir runs/squad_runlocal [--model BeST-2]

For every test query and its top-ranked document (by the model's run), shows
the segment the model scores highest — the evidence BeST selects — inside the
document text: an HTML page (`WORKDIR/explain_MODEL.html`: the question, a
verdict, the segment on its own, and the document in a scrolling box opened
at the segment, which is in <mark>; the gold passage underlined and the
answers in bold when known) and a text form on stdout. Reads what
`best_jax train` wrote: segments/MODEL.json, runs/MODEL.run,
explain/documents.json (documents, topics, qrels, "gold": {"qid<TAB>docid":
[start, end]} and, optionally, "answers": {"qid<TAB>docid": [[start, end],
...]}) and metrics.json. Verdicts use `evaluate.evidence`.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import textwrap

from best_jax.data import trec
from best_jax.data.files import atomic_write, read_text
from best_jax.errors import InputError
from best_jax.evaluate import evidence as evidence_lib


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--workdir", required=True,
                      help="the work directory of a `best_jax train` run")
  parser.add_argument("--model", default=None,
                      help="model name as in the results table (default: the "
                      "BeST iteration with the best dev MRR, else MaxP)")
  parser.add_argument("--out", default=None,
                      help="HTML file (default WORKDIR/explain_MODEL.html)")
  parser.add_argument("--queries", type=int, default=20,
                      help="show at most this many queries (0: all)")


def _json(path: str):
  try:
    return json.loads(read_text(path))
  except ValueError as e:
    raise InputError(f"not valid JSON: {e}", path) from None


def default_model(metrics: dict) -> str:
  """The BeST iteration with the best dev MRR, else MaxP, else any model."""
  dev = metrics.get("dev_mrr", {})
  best = {k: v for k, v in dev.items() if k.startswith("BeST-")
          and k != "BeST-0" and v == v}
  if best:
    return max(best, key=best.get)
  return "MaxP" if "MaxP" in dev else next(iter(dev), "")


def explanations(workdir: str, model: str | None = None,
                 limit: int = 20) -> tuple[str, list[dict]]:
  """(model, one record per query: qid, query, docid, title, text, span of
  the selected segment, its score and index, gold span or None)."""
  if not os.path.isdir(workdir):
    raise InputError("work directory not found", workdir)
  metrics_path = os.path.join(workdir, "metrics.json")
  if not os.path.isfile(metrics_path):
    raise InputError("no metrics.json: run `best_jax train` into this "
                     "directory first", workdir)
  model = model or default_model(_json(metrics_path))
  segments_path = os.path.join(workdir, "segments", f"{model}.json")
  run_path = os.path.join(workdir, "runs", f"{trec.run_file_name(model)}.run")
  docs_path = os.path.join(workdir, "explain", "documents.json")
  for path in (segments_path, run_path, docs_path):
    if not os.path.isfile(path):
      raise InputError(f"missing output of model {model!r}", path)
  scored = {(r["qid"], r["docid"]): r for r in _json(segments_path)}
  run = trec.read_run(run_path)
  info = _json(docs_path)
  records = []
  for qid, scores in run.items():
    top = [d for d, _ in trec.ranked(scores) if (qid, d) in scored]
    if not top:
      continue
    docid = top[0]
    r = scored[(qid, docid)]
    best = max(range(len(r["scores"])), key=lambda i: (r["scores"][i], -i))
    title, text = info["documents"][docid]
    gold = info["gold"].get(f"{qid}\t{docid}")
    answers = info.get("answers", {}).get(f"{qid}\t{docid}", [])
    records.append({
        "qid": qid, "query": info["topics"].get(qid, ""), "docid": docid,
        "title": title, "text": text, "segment": best,
        "num_segments": len(r["scores"]), "score": r["scores"][best],
        "span": r["spans"][best], "gold": gold, "answers": answers,
        "relevant": info["qrels"].get(qid, {}).get(docid, 0) >= 1})
    if limit and len(records) >= limit:
      break
  return model, records


# The page's style sheet: a plain string (no format braces to double).
CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif;
  max-width: 62em; margin: 0 auto; padding: 0 1em 4em; color: #222;
  line-height: 1.5; background: #fafafa; }
h1 { font-size: 1.5em; margin: 1em 0 .25em; }
.legend, .summary { color: #444; margin: .25em 0; }
nav ol { columns: 2; column-gap: 2em; padding-left: 1.5em; margin: 1em 0; }
nav li { break-inside: avoid; margin-bottom: .2em; }
nav a { color: #1d3557; text-decoration: none; }
nav a:hover { text-decoration: underline; }
section { background: #fff; border: 1px solid #ddd; border-radius: 8px;
  padding: .75em 1.25em 1em; margin: 1.25em 0;
  box-shadow: 0 1px 2px rgba(0, 0, 0, .05); }
h2 { font-size: 1.2em; margin: .3em 0; }
h2 .qid { color: #888; font-weight: normal; font-size: .8em; }
.meta { color: #555; font-size: .92em; margin: .2em 0 .5em; }
.verdict { display: inline-block; border-radius: 1em; padding: 0 .6em;
  font-size: .85em; font-weight: 600; white-space: nowrap; }
.hit { background: #d8f3dc; color: #1b4332; }
.near { background: #fff3bf; color: #5c4400; }
.miss { background: #ffe3e3; color: #7f1d1d; }
.unknown { background: #e9ecef; color: #343a40; }
.evidence { margin: .5em 0; padding: .5em .9em; background: #fff9db;
  border-left: 4px solid #f2c200; white-space: pre-wrap; }
.doc { position: relative; max-height: 16em; overflow: auto;
  border: 1px solid #ccc; border-radius: 4px; padding: .5em .75em;
  background: #fff; white-space: pre-wrap; font-size: .95em; }
mark { background: #ffe066; color: inherit; padding: .1em 0; }
u { text-decoration-line: underline; text-decoration-color: #2a9d8f;
  text-decoration-thickness: 3px; text-underline-offset: 3px;
  text-decoration-skip-ink: none; }
b.answer { font-weight: 700; background: #b2f2bb; }
.jump { font-size: .85em; margin-left: .5em; }
"""

# Scrolls each document box so that its evidence segment is in view.
SCRIPT = """
addEventListener("load", function () {
  document.querySelectorAll(".doc").forEach(function (box) {
    var mark = box.querySelector("mark");
    if (mark) box.scrollTop = Math.max(0, mark.offsetTop - box.clientHeight / 5);
  });
});
"""

# (verdict, css class) of a selected segment, strictest criterion first.
_VERDICTS = (("answer", "holds an answer", "hit"),
             ("majority", "mostly the gold passage", "hit"),
             ("overlap", "touches the gold passage", "near"))


def verdict(record: dict) -> tuple[str, str]:
  """(words, css class) saying whether the segment is the evidence."""
  if not record["relevant"]:
    return "not the relevant document", "miss"
  if not record["gold"]:
    return "no gold passage", "unknown"
  gold = evidence_lib.Evidence(tuple(record["gold"]),
                               tuple(map(tuple, record.get("answers") or ())))
  for criterion, words, css in _VERDICTS:
    if criterion == "answer" and not gold.answers:
      continue
    if evidence_lib.is_evidence(record["span"], gold, criterion):
      return words, css
  return "misses the gold passage", "miss"


def _union(spans) -> list[tuple[int, int]]:
  """Sorted, merged `[start, end)` spans (empty ones dropped)."""
  merged = []
  for a, b in sorted(tuple(s) for s in spans if s[1] > s[0]):
    if merged and a <= merged[-1][1]:
      merged[-1] = (merged[-1][0], max(merged[-1][1], b))
    else:
      merged.append((a, b))
  return merged


def _nested(text: str, lo: int, hi: int, layers) -> str:
  """`text[lo:hi]` escaped, each layer's spans wrapped in its tag (outer
  layers first), so an element is split only where an outer one ends."""
  if not layers:
    return html.escape(text[lo:hi])
  (open_tag, close_tag, spans), rest = layers[0], layers[1:]
  parts, at = [], lo
  for a, b in _union(spans):
    a, b = max(a, lo), min(b, hi)
    if a >= b:
      continue
    parts.append(_nested(text, at, a, rest))
    parts.append(open_tag + _nested(text, a, b, rest) + close_tag)
    at = b
  parts.append(_nested(text, at, hi, rest))
  return "".join(parts)


def _marked_html(text: str, span, gold, answers=(), mark_id: str = "") -> str:
  """The text with `span` in one <mark>, `gold` underlined and the answers
  in bold (spans may cross)."""
  mark = f'<mark id="{mark_id}">' if mark_id else "<mark>"
  return _nested(text, 0, len(text), [
      (mark, "</mark>", [span]),
      ("<u>", "</u>", [gold] if gold else []),
      ('<b class="answer">', "</b>", list(answers or ()))])


def render_html(model: str, records: list[dict]) -> str:
  """The evidence page: per query the question, a verdict, the selected
  segment, and the document scrolled to it (segment highlighted, gold
  passage underlined, answers in bold)."""
  blocks, items, counts = [], [], {"hit": 0, "relevant": 0}
  for n, r in enumerate(records):
    words, css = verdict(r)
    counts["hit"] += css == "hit"
    counts["relevant"] += bool(r["relevant"])
    relevance = "relevant" if r["relevant"] else "not relevant"
    anchor, mark_id = f"q{n}", f"ev{n}"
    span, answers = r["span"], r.get("answers") or ()
    segment_html = _nested(r["text"], span[0], span[1], [
        ("<u>", "</u>", [r["gold"]] if r["gold"] else []),
        ('<b class="answer">', "</b>", list(answers))])
    items.append(f'<li><a href="#{anchor}">{html.escape(r["query"])}</a> '
                 f'<span class="verdict {css}">{html.escape(words)}</span>'
                 "</li>")
    blocks.append(
        f'<section id="{anchor}"><h2>{html.escape(r["query"])} '
        f'<span class="qid">{html.escape(r["qid"])}</span></h2>'
        f'<p class="meta">Top document <b>{html.escape(r["docid"])}</b> '
        f'({relevance}) · {html.escape(r["title"])} · segment '
        f'{r["segment"] + 1} of {r["num_segments"]}, score '
        f'{r["score"]:.3f} <span class="verdict {css}">'
        f'{html.escape(words)}</span></p>'
        f'<div class="evidence">{segment_html}</div>'
        f'<p class="meta">In the document<a class="jump" '
        f'href="#{mark_id}">jump to the evidence</a></p>'
        '<div class="doc">'
        + _marked_html(r["text"], span, r["gold"], answers, mark_id)
        + "</div></section>")
  title = f"best_jax explain: {html.escape(model)}"
  queries = "1 test query" if len(records) == 1 else (
      f"{len(records)} test queries")
  summary = (f"{queries}: the top document is relevant for "
             f"{counts['relevant']}; the selected segment is the evidence "
             f"(holds an answer or is mostly the gold passage) for "
             f"{counts['hit']}.")
  return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
          f'<meta name="viewport" content="width=device-width, '
          f'initial-scale=1"><title>{title}</title>'
          f"<style>{CSS}</style><script>{SCRIPT}</script></head><body>"
          f"<h1>Evidence segments selected by {html.escape(model)}</h1>"
          '<p class="legend"><mark>highlighted</mark>: the segment the model '
          "scores highest in its top-ranked document; <u>underlined</u>: "
          'the gold passage; <b class="answer">bold</b>: the annotators\' '
          f'answers.</p><p class="summary">{summary}</p>'
          f"<nav><ol>{''.join(items)}</ol></nav>"
          + "".join(blocks) + "</body></html>\n")


def render_text(model: str, records: list[dict], width: int = 100) -> str:
  lines = [f"Evidence segments selected by {model}"]
  for r in records:
    segment = " ".join(r["text"][r["span"][0]:r["span"][1]].split())
    words, _ = verdict(r)
    lines.append(f"\n{r['qid']}: {r['query']}")
    lines.append(f"  top document {r['docid']} "
                 f"({'relevant' if r['relevant'] else 'not relevant'}), "
                 f"segment {r['segment'] + 1}/{r['num_segments']} "
                 f"[{words}]:")
    lines.extend(textwrap.wrap(segment[:600], width, initial_indent="    > ",
                               subsequent_indent="    > "))
  return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
  model, records = explanations(args.workdir, args.model, args.queries)
  if not records:
    raise InputError(f"no scored test documents for model {model!r}",
                     args.workdir)
  out = args.out or os.path.join(args.workdir, f"explain_{model}.html")
  with atomic_write(out) as f:
    f.write(render_html(model, records))
  print(render_text(model, records))
  print(f"\nHTML: {out}")
  return 0
