"""The `explain` command: each test query's evidence segment, highlighted.

  python -m best_jax explain --workdir runs/squad_runlocal [--model BeST-2]

For every test query and its top-ranked document (by the model's run), shows
the segment the model scores highest — the evidence BeST selects — inside the
document text: an HTML page (`WORKDIR/explain_MODEL.html`, the segment in
<mark>, the gold passage underlined when known) and a text form on stdout.
Reads what `best_jax train` wrote: segments/MODEL.json, runs/MODEL.run,
explain/documents.json and metrics.json.
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
    records.append({
        "qid": qid, "query": info["topics"].get(qid, ""), "docid": docid,
        "title": title, "text": text, "segment": best,
        "num_segments": len(r["scores"]), "score": r["scores"][best],
        "span": r["spans"][best], "gold": gold,
        "relevant": info["qrels"].get(qid, {}).get(docid, 0) >= 1})
    if limit and len(records) >= limit:
      break
  return model, records


def _marked_html(text: str, span, gold) -> str:
  """The text with `span` in <mark> and `gold` underlined (spans may cross)."""
  cuts = sorted({0, len(text), *span, *(gold or ())})
  parts = []
  for a, b in zip(cuts, cuts[1:]):
    piece = html.escape(text[a:b]).replace("\n", "<br>")
    if gold and gold[0] <= a and b <= gold[1]:
      piece = f"<u>{piece}</u>"
    if span[0] <= a and b <= span[1]:
      piece = f"<mark>{piece}</mark>"
    parts.append(piece)
  return "".join(parts)


def render_html(model: str, records: list[dict]) -> str:
  blocks = []
  for r in records:
    verdict = ("relevant" if r["relevant"] else "not relevant")
    hit = ""
    if r["gold"]:
      overlaps = min(r["span"][1], r["gold"][1]) > max(r["span"][0],
                                                        r["gold"][0])
      hit = " — segment overlaps the gold passage" if overlaps else (
          " — segment misses the gold passage")
    blocks.append(
        f"<section><h2>{html.escape(r['qid'])}: {html.escape(r['query'])}"
        f"</h2><p class=meta>top document <b>{html.escape(r['docid'])}</b> "
        f"({verdict}) · {html.escape(r['title'])} · selected segment "
        f"{r['segment'] + 1} of {r['num_segments']} (score {r['score']:.3f})"
        f"{hit}</p><div class=doc>"
        f"{_marked_html(r['text'], r['span'], r['gold'])}</div></section>")
  return ("<!doctype html><html><head><meta charset=utf-8><title>best_jax "
          f"explain: {html.escape(model)}</title><style>body{{font-family:"
          "sans-serif;max-width:60em;margin:auto}}mark{{background:#ffe066}}"
          "u{{text-decoration-color:#2a9d8f;text-decoration-thickness:3px}}"
          ".doc{{max-height:24em;overflow:auto;border:1px solid #ccc;"
          "padding:.5em;line-height:1.4}}.meta{{color:#555}}</style></head>"
          f"<body><h1>Evidence segments selected by {html.escape(model)}</h1>"
          "<p><mark>highlighted</mark>: the document's highest-scoring "
          "segment; <u>underlined</u>: the gold passage.</p>"
          + "".join(blocks) + "</body></html>\n")


def render_text(model: str, records: list[dict], width: int = 100) -> str:
  lines = [f"Evidence segments selected by {model}"]
  for r in records:
    segment = " ".join(r["text"][r["span"][0]:r["span"][1]].split())
    gold = ""
    if r["gold"]:
      overlaps = min(r["span"][1], r["gold"][1]) > max(r["span"][0],
                                                        r["gold"][0])
      gold = " [overlaps gold]" if overlaps else " [misses gold]"
    lines.append(f"\n{r['qid']}: {r['query']}")
    lines.append(f"  top document {r['docid']} "
                 f"({'relevant' if r['relevant'] else 'not relevant'}), "
                 f"segment {r['segment'] + 1}/{r['num_segments']}{gold}:")
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
