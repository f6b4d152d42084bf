"""A `best_jax train` work directory without training: the tiny config's
models with random parameters, saved as finished stages are
(`stages/NAME.json` with `keys`, orbax `stages/NAME/` as `{key: params}`),
plus a synthetic corpus, topics and first-stage run to rerank."""

import json
import os

import jax
import numpy as np
from flax import nnx

from best_jax.data import trec
from best_jax.data.corpus import Document, write_corpus
from best_jax.experiment.datasets import synthetic_data
from best_jax.models.pretrained import ranker_config
from best_jax.train.checkpoint import save_params
from best_jax.train.state import split_params
from best_jax.models import CrossEncoderRanker
from best_jax.models.bi_encoder import BiEncoderRanker
from fakes import tiny_config

# stage -> parameter keys, as the experiment saves them.
STAGES = {"firstp": ("first", "max"), "best1": ("max", "theta0"),
          "best2": ("max",)}


def random_params(config, seed: int):
  """Random parameters of the config's model; a cross-encoder's head is
  scaled up so that scores spread over several units."""
  bert = ranker_config(config.ranker)
  rngs = nnx.Rngs(seed)
  if config.ranker.kind == "bi":
    model = BiEncoderRanker(bert, rngs=rngs)
  else:
    model = CrossEncoderRanker(bert, rngs=rngs)
    rng = np.random.default_rng(seed)
    model.head.kernel.set_value(
        rng.normal(0, 1, model.head.kernel.get_value().shape)
        .astype(np.float32))
    model.head.bias.set_value(np.full(1, 0.5, np.float32))
  return split_params(model)[1]


def write_workdir(root: str, kind: str = "cross") -> str:
  """The work directory (see the module docstring); returns `root`."""
  config = tiny_config()
  config.ranker.kind = kind
  config.eval.rows_per_call = 16
  os.makedirs(os.path.join(root, "stages"), exist_ok=True)
  with open(os.path.join(root, "config.json"), "w") as f:
    json.dump(config.to_dict(), f)
  with open(os.path.join(root, "metrics.json"), "w") as f:
    json.dump({"selected_best": "BeST-2"}, f)
  seed = 0
  for stage, keys in STAGES.items():
    params = {}
    for key in keys:
      seed += 1
      params[key] = random_params(config, seed)
    save_params(os.path.join(root, "stages", stage), params)
    with open(os.path.join(root, "stages", f"{stage}.json"), "w") as f:
      json.dump({"keys": sorted(keys)}, f)
  return root


def stage_params(root: str, stage: str, key: str):
  """Host arrays of one saved key, read back with orbax as written."""
  config = tiny_config()
  with open(os.path.join(root, "config.json")) as f:
    config.ranker.kind = json.load(f)["ranker"]["kind"]
  seed = 1 + [(s, k) for s, ks in STAGES.items() for k in ks].index(
      (stage, key))
  return jax.device_get(random_params(config, seed))


def write_collection(root: str, num_queries: int = 8) -> dict[str, str]:
  """Synthetic corpus.jsonl, topics.tsv and bm25.run (20 per query) of
  its test queries; returns their paths by kind."""
  data = synthetic_data(num_queries=4 * num_queries, num_docs=40, seed=3)
  test = data.splits["test"]
  paths = {k: os.path.join(root, name) for k, name in (
      ("corpus", "corpus.jsonl"), ("topics", "topics.tsv"),
      ("run", "bm25.run"), ("qrels", "qrels.txt"))}
  os.makedirs(root, exist_ok=True)
  write_corpus([Document(d, t, x) for d, (t, x) in data.documents.items()],
               paths["corpus"])
  trec.write_topics_tsv(test.topics, paths["topics"])
  trec.write_run(test.run, paths["run"], tag="bm25")
  trec.write_qrels(test.qrels, paths["qrels"])
  return paths
