"""Segmenter throughput on the 48 SQuAD dev articles (documents/s, tokens/s).

    python bench/segmenter_throughput.py --json bench/results/segmenter.json

Each article is one document (title; paragraphs joined by blank lines). Stages,
each timed over all articles, median of `--repeats` runs after a warm-up:
sentence splitting alone; tokenization with sentence splitting
(`Segmenter.tokenize`); segmentation of tokenized documents into padded arrays
(inference: all segments; training: random-length ones over the same span); and the
whole `Segmenter.segment`. For the choice of splitter it also times pysbd and
reports how often its sentence starts agree with sentencex's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata

SQUAD = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data",
                     "squad", "dev-v1.1.json")


def load_articles(path: str) -> list[tuple[str, str]]:
  """`(title, text)` of each SQuAD article, paragraphs joined by blank lines."""
  from best_jax.data.files import read_text  # pylint: disable=g-import-not-at-top
  data = json.loads(read_text(path))["data"]
  return [(a["title"].replace("_", " "),
           "\n\n".join(p["context"] for p in a["paragraphs"])) for a in data]


def timed(fn, repeats: int) -> list[float]:
  """Wall times of `repeats` calls of `fn` after one warm-up call."""
  fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return times


def start_agreement(articles, splitter_a: str, splitter_b: str) -> dict:
  """Sentence starts found by both splitters, over each one's count."""
  from best_jax.segments.sentences import sentence_spans  # pylint: disable=g-import-not-at-top
  both = only_a = only_b = 0
  for _, text in articles:
    a = set(sentence_spans(text, splitter=splitter_a)[:, 0].tolist())
    b = set(sentence_spans(text, splitter=splitter_b)[:, 0].tolist())
    both += len(a & b)
    only_a += len(a - b)
    only_b += len(b - a)
  return {"both": both, f"only_{splitter_a}": only_a,
          f"only_{splitter_b}": only_b,
          f"fraction_of_{splitter_b}_starts_found": both / max(both + only_b, 1),
          f"fraction_of_{splitter_a}_starts_confirmed":
              both / max(both + only_a, 1)}


def machine() -> dict:
  model = platform.processor()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          model = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  return {"cpu_model": model, "cpu_cores": os.cpu_count(),
          "load_average_1m": os.getloadavg()[0],
          "platform": platform.platform(), "python": sys.version.split()[0]}


def versions() -> dict:
  out = {}
  for name in ("sentencex", "pysbd", "tokenizers", "transformers", "numpy"):
    try:
      out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      out[name] = None
  return out


def git_commit() -> str | None:
  try:
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True,
                          cwd=os.path.dirname(__file__)).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return None


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True, help="write the figures here")
  parser.add_argument("--data", default=SQUAD, help="SQuAD v1.1 JSON file")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--pysbd-repeats", type=int, default=1,
                      help="pysbd is slow: 0 skips it")
  parser.add_argument("--max-len", type=int, default=256)
  args = parser.parse_args(argv)

  from best_jax.data.files import atomic_write  # pylint: disable=g-import-not-at-top
  from best_jax.segments import Segmenter, SegmenterConfig, sentence_spans  # pylint: disable=g-import-not-at-top

  articles = load_articles(args.data)
  config = SegmenterConfig(max_len=args.max_len)
  segmenter = Segmenter(config)
  tokenized = segmenter.tokenize(articles)
  num_tokens = sum(len(d.token_ids) for d in tokenized)
  num_chars = sum(len(text) for _, text in articles)

  stages = {
      "sentences (sentencex)": (lambda: [sentence_spans(t)
                                         for _, t in articles], args.repeats),
      "tokenize + sentences": (lambda: segmenter.tokenize(articles),
                               args.repeats),
      "segment (inference)": (lambda: segmenter.segment_tokenized(tokenized),
                              args.repeats),
      "segment (training)": (lambda: segmenter.segment_tokenized(
          tokenized, training=True, seed=0), args.repeats),
      "total (inference)": (lambda: segmenter.segment(articles), args.repeats),
  }
  if args.pysbd_repeats > 0:
    stages["sentences (pysbd)"] = (
        lambda: [sentence_spans(t, splitter="pysbd") for _, t in articles],
        args.pysbd_repeats)
  results = {}
  for name, (fn, repeats) in stages.items():
    times = timed(fn, repeats)
    median = statistics.median(times)
    results[name] = {"seconds_median": median, "seconds_min": min(times),
                     "seconds_max": max(times), "repeats": repeats,
                     "documents_per_s": len(articles) / median,
                     "tokens_per_s": num_tokens / median}

  batch = segmenter.segment_tokenized(tokenized)
  report = {
      "benchmark": "segmenter_throughput",
      "data": os.path.abspath(args.data),
      "documents": len(articles), "tokens": num_tokens, "characters": num_chars,
      "segments": int(batch.num_segments_d.sum()),
      "config": {"max_len": config.max_len,
                 "max_query_len": config.max_query_len,
                 "content_len": config.content_len},
      "stages": results,
      "machine": machine(), "versions": versions(), "git_commit": git_commit(),
  }
  if args.pysbd_repeats > 0:
    report["sentence_start_agreement"] = start_agreement(
        articles, "sentencex", "pysbd")

  print(f"{len(articles)} articles, {num_tokens} tokens, {num_chars} "
        f"characters, {report['segments']} segments (max_len {config.max_len})")
  print(f"{'stage':24s}{'median s':>10s}{'docs/s':>10s}{'tokens/s':>12s}")
  for name, r in results.items():
    print(f"{name:24s}{r['seconds_median']:10.3f}{r['documents_per_s']:10.1f}"
          f"{r['tokens_per_s']:12.0f}")
  if "sentence_start_agreement" in report:
    agreement = report["sentence_start_agreement"]
    print(f"sentence starts: {agreement['both']} shared, "
          f"{agreement['only_sentencex']} only sentencex, "
          f"{agreement['only_pysbd']} only pysbd")
  with atomic_write(args.json) as f:
    json.dump(report, f, indent=2)
    f.write("\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
