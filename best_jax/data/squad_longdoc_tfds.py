"""The `squad_longdoc` TFDS builder: array_record files, no TensorFlow needed.

Two configs of one builder, written as array_record files that
`tfds.data_source` / `builder.as_data_source()` read back without TensorFlow:

- `queries` (splits `train`, `dev`, `test`), one example per question:
  `qid`, `question`, `docid` (the relevant document), `gold_start`/`gold_end`
  (the gold paragraph as a character span `[start, end)` of that document's
  text), `answer_starts`/`answer_ends` (every annotator's distinct answer
  span, same offsets), `candidates` (BM25 top-100 docids over the whole corpus, best first)
  and `scores` (their BM25 scores). The relevant document may be missing from
  `candidates` when BM25 ranks it below 100.
- `corpus` (split `corpus`), one example per document: `id`, `title`, `text`,
  `article` (index in the SQuAD file) and `split` (its article's split).

Examples are stored in generation order (article order), so index i of a split
is the i-th line of the exported `topics.<split>.tsv`. Text features decode to
UTF-8 bytes when read without TensorFlow. The same input and seed give
byte-identical files (see `_sorted_feature_maps`).

Where the SQuAD file comes from: the builder's `squad_json` argument (set by
`best_jax prepare`), else `<manual_dir>/<source>`, else a download of the
official file. `train_queries`/`train_corpus` use `train-v1.1.json`.

  builder = SquadLongdocBuilder(data_dir=..., config="queries")
  builder.download_and_prepare()
  dev = builder.as_data_source(split="dev")
  # or, once this module is imported (it registers the builder):
  dev = tfds.data_source("squad_longdoc/queries", split="dev", data_dir=...)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import numpy as np
import tensorflow_datasets as tfds

from best_jax.data import squad_longdoc, trec

SQUAD_URL = "https://rajpurkar.github.io/SQuAD-explorer/dataset/"
SQUAD_FILES = ("dev-v1.1.json", "train-v1.1.json")


@dataclasses.dataclass(eq=False)
class SquadLongdocConfig(tfds.core.BuilderConfig):
  """`kind` is `queries` or `corpus`; `source` one of SQUAD_FILES."""
  kind: str = "queries"
  source: str = "dev-v1.1.json"


class SquadLongdocBuilder(tfds.core.GeneratorBasedBuilder):
  """SQuAD articles chunked into long documents, with BM25 candidates.

  Args (besides TFDS's):
    squad_json: the SQuAD file to build from, instead of the manual directory
      or the download.
    seed: the seed of `squad_longdoc.Options` (chunk lengths and splits); it
      is stored in the dataset's metadata.
  """

  name = "squad_longdoc"
  VERSION = tfds.core.Version("1.1.0")
  RELEASE_NOTES = {"1.0.0": "First release.",
                   "1.1.0": "queries: answer_starts and answer_ends."}
  BUILDER_CONFIGS = [
      SquadLongdocConfig(name="queries", kind="queries"),
      SquadLongdocConfig(name="corpus", kind="corpus"),
      SquadLongdocConfig(name="train_queries", kind="queries",
                         source="train-v1.1.json"),
      SquadLongdocConfig(name="train_corpus", kind="corpus",
                         source="train-v1.1.json"),
  ]
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Optional: put the official SQuAD v1.1 file (dev-v1.1.json or "
      f"train-v1.1.json from {SQUAD_URL}) in the manual directory; without "
      "it the builder downloads it.")

  def __init__(self, *, squad_json: str | os.PathLike | None = None,
               seed: int = squad_longdoc.DEFAULT_SEED, **kwargs):
    self._squad_json = None if squad_json is None else os.fspath(squad_json)
    self._seed = seed
    kwargs.setdefault("file_format", "array_record")
    super().__init__(**kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    text = tfds.features.Text()
    if self.builder_config.kind == "queries":
      features = {
          "qid": text, "question": text, "docid": text,
          "gold_start": np.int64, "gold_end": np.int64,
          "answer_starts": tfds.features.Sequence(np.int64),
          "answer_ends": tfds.features.Sequence(np.int64),
          "candidates": tfds.features.Sequence(text),
          "scores": tfds.features.Sequence(np.float32),
      }
    elif self.builder_config.kind == "corpus":
      features = {"id": text, "title": text, "text": text,
                  "article": np.int64, "split": text}
    else:
      raise ValueError(f"unknown config kind {self.builder_config.kind!r}")
    return tfds.core.DatasetInfo(
        builder=self,
        description=(
            "SQuAD v1.1 articles cut into long documents (runs of whole "
            "paragraphs, median about 1,000 MiniLM tokens); questions as "
            "queries with their chunk as the relevant document, the gold "
            "paragraph as a character span, and BM25 top-100 candidates. "
            "Article-disjoint train/dev/test splits."),
        features=tfds.features.FeaturesDict(features),
        homepage="https://rajpurkar.github.io/SQuAD-explorer/",
        citation=("@inproceedings{rajpurkar2016squad, title={SQuAD: 100,000+ "
                  "Questions for Machine Comprehension of Text}, author="
                  "{Rajpurkar, Pranav and Zhang, Jian and Lopyrev, Konstantin "
                  "and Liang, Percy}, booktitle={EMNLP}, year={2016}}"),
        disable_shuffling=True,
        metadata=tfds.core.MetadataDict(seed=self._seed),
    )

  def _download_and_prepare(self, dl_manager, download_config):
    with _sorted_feature_maps():
      super()._download_and_prepare(dl_manager, download_config)

  def _squad_path(self, dl_manager) -> str:
    cfg = self.builder_config
    if self._squad_json:
      return self._squad_json
    try:
      manual = os.path.join(os.fspath(dl_manager.manual_dir), cfg.source)
    except AssertionError:  # No manual directory: TFDS refuses to name it.
      manual = None
    if manual and os.path.isfile(manual):
      return manual
    return os.fspath(dl_manager.download(SQUAD_URL + cfg.source))

  def _split_generators(self, dl_manager):
    cfg = self.builder_config
    dataset, run = squad_longdoc.load_with_candidates(
        self._squad_path(dl_manager), squad_longdoc.Options(seed=self._seed))
    if cfg.kind == "corpus":
      return {"corpus": self._generate_examples(dataset, None, None)}
    return {split: self._generate_examples(dataset, run, split)
            for split in squad_longdoc.SPLITS}

  def _generate_examples(self, dataset, run, split):
    if split is None:
      split_of = dataset.split_of()
      for doc in dataset.documents:
        yield doc.id, {"id": doc.id, "title": doc.title, "text": doc.text,
                       "article": doc.article, "split": split_of[doc.article]}
      return
    for query in dataset.queries[split]:
      ranking = trec.ranked(run[query.qid])
      yield query.qid, {
          "qid": query.qid, "question": query.text, "docid": query.docid,
          "gold_start": query.start, "gold_end": query.end,
          "answer_starts": np.asarray([a for a, _ in query.answers],
                                      dtype=np.int64),
          "answer_ends": np.asarray([b for _, b in query.answers],
                                    dtype=np.int64),
          "candidates": [docid for docid, _ in ranking],
          "scores": np.asarray([s for _, s in ranking], dtype=np.float32),
      }


@contextlib.contextmanager
def _sorted_feature_maps():
  """Serializes tf.train.Example feature maps in key order while building.

  TFDS serializes each example's `features.feature` map in upb's hash-table
  order, which is seeded per process, so two builds of the same data would
  differ in bytes (not in content). Deterministic serialization sorts the map.
  """
  from tensorflow_datasets.core import example_serializer  # pylint: disable=g-import-not-at-top
  serializer = getattr(example_serializer, "ExampleSerializer", None)
  if serializer is None or not hasattr(serializer, "get_tf_example"):
    yield  # TFDS changed: files stay valid, only byte-equality is lost.
    return
  original = serializer.serialize_example

  def serialize_example(self, example):
    return self.get_tf_example(example).SerializeToString(deterministic=True)

  serializer.serialize_example = serialize_example
  try:
    yield
  finally:
    serializer.serialize_example = original


def build(data_dir: str | os.PathLike, squad_json: str,
          seed: int = squad_longdoc.DEFAULT_SEED) -> dict[str, str]:
  """Writes both configs under `data_dir` (regenerating); returns their dirs."""
  paths = {}
  for kind in ("queries", "corpus"):
    builder = SquadLongdocBuilder(data_dir=os.fspath(data_dir), config=kind,
                                  squad_json=squad_json, seed=seed)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        download_mode=tfds.download.GenerateMode.REUSE_CACHE_IF_EXISTS))
    paths[kind] = os.fspath(builder.data_dir)
  return paths
