"""`best_jax export`: Hugging Face directories of trained models that load
back bit-exactly and compute what transformers and sentence-transformers
compute (a numpy reference of their semantics, a PyTorch golden file, and
live checks when torch is importable)."""

import functools
import json
import math
import os

import jax
import numpy as np
import pytest
from flax import nnx
from transformers import AutoTokenizer

from best_jax import cli
from best_jax.errors import InputError
from best_jax.models import read_tensors
from best_jax.models.pretrained import checkpoint_dir
from best_jax.serve import hf
from best_jax.serve.reranker import Reranker
from best_jax.serve.trained import from_workdir, stage_and_key
from fake_workdir import stage_params, write_workdir
from fakes import tiny_config
from reference_bert import bert_forward

GOLDEN = os.path.join(os.path.dirname(__file__), "golden",
                      "export_minilm.npz")
LONG = " ".join(["Apple river stone cloud music garden window."] * 12)
PAIRS = [("apple river", "The apple river flows past the stone."),
         ("music garden", "Window forest engine. Music in the garden."),
         ("cloud", LONG)]  # Longer than the tiny model's 64 positions.


@pytest.fixture(scope="module")
def loaded():
  """`Reranker.load`, once per directory (each load compiles its scorer)."""
  return functools.cache(Reranker.load)


@pytest.fixture(scope="module")
def cross_workdir(tmp_path_factory):
  return write_workdir(str(tmp_path_factory.mktemp("cross")), "cross")


@pytest.fixture(scope="module")
def bi_workdir(tmp_path_factory):
  return write_workdir(str(tmp_path_factory.mktemp("bi")), "bi")


@pytest.fixture(scope="module")
def cross_export(cross_workdir, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("exports") / "maxp")
  assert cli.main(["export", "--workdir", cross_workdir, "--model", "maxp",
                   "--out", out]) == 0
  return out


@pytest.fixture(scope="module")
def bi_export(bi_workdir, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("exports") / "bi")
  hf.write_export(from_workdir(bi_workdir, "best"), out)
  return out


def _leaves(params):
  return {path: np.asarray(v.get_value())
          for path, v in nnx.to_flat_state(params)}


def _assert_bit_equal(params, expected):
  got, want = _leaves(params), _leaves(expected)
  assert got.keys() == want.keys()
  for path in want:
    assert got[path].dtype == want[path].dtype, path
    np.testing.assert_array_equal(got[path], want[path], err_msg=str(path))


def test_model_names_map_to_stages():
  config = tiny_config()
  metrics = {"selected_best": "BeST-3"}
  expected = {"firstp": ("firstp", "firstp", "first"),
              "MaxP": ("maxp", "firstp", "max"),
              "maxp_all": ("maxp-all", "maxp_all", "max"),
              "GoldP": ("goldp", "goldp", "max"),
              "best-0": ("best-0", "best1", "theta0"),
              "BeST-1": ("best-1", "best1", "max"),
              "best2": ("best-2", "best2", "max"),
              "best": ("best-3", "best3", "max"),
              "LongP": ("longp", "longp", "first")}
  for name, want in expected.items():
    assert stage_and_key(name, config, metrics) == want, name
  with pytest.raises(InputError, match="sparse attention"):
    stage_and_key("qds", config, metrics)
  with pytest.raises(InputError, match="unknown model"):
    stage_and_key("bm25", config, metrics)
  with pytest.raises(InputError, match="names none"):
    stage_and_key("best", config, None)


def test_workdir_models_are_the_saved_stage_parameters(cross_workdir):
  for name, stage, key, aggregation in (
      ("firstp", "firstp", "first", "first"),
      ("maxp", "firstp", "max", "max"),
      ("best-0", "best1", "theta0", "max"),
      ("best", "best2", "max", "max")):
    model = from_workdir(cross_workdir, name)
    assert model.origin["stage"] == stage and model.aggregation == aggregation
    _assert_bit_equal(model.params, stage_params(cross_workdir, stage, key))
  with pytest.raises(InputError, match="finished: best1, best2, firstp"):
    from_workdir(cross_workdir, "goldp")


def test_cross_export_layout_and_bit_exact_round_trip(cross_workdir,
                                                      cross_export):
  with open(os.path.join(cross_export, "config.json")) as f:
    config = json.load(f)
  # best_jax's linear head as ELECTRA's (gelu(z) - gelu(-z) = z).
  assert config["architectures"] == ["ElectraForSequenceClassification"]
  assert len(config["id2label"]) == 1  # num_labels = 1
  for name in ("model.safetensors", "tokenizer.json", "vocab.txt"):
    assert os.path.isfile(os.path.join(cross_export, name)), name
  info = hf.read_manifest(cross_export)
  assert (info["kind"], info["aggregation"]) == ("cross", "max")
  assert info["segments"]["max_len"] == 48
  tensors = read_tensors(cross_export)
  assert tensors["classifier.out_proj.weight"].shape == (1, 32)
  assert tensors["classifier.dense.weight"].shape == (32, 32)
  loaded = hf.read_export(cross_export)
  _assert_bit_equal(loaded.params, stage_params(cross_workdir, "firstp", "max"))
  assert loaded.segments == from_workdir(cross_workdir, "maxp").segments


def test_bi_export_layout_and_bit_exact_round_trip(bi_workdir, bi_export):
  with open(os.path.join(bi_export, "modules.json")) as f:
    modules = [m["type"].rsplit(".", 1)[1] for m in json.load(f)]
  assert modules == ["Transformer", "Pooling", "Normalize"]
  with open(os.path.join(bi_export, "1_Pooling", "config.json")) as f:
    assert json.load(f)["pooling_mode_mean_tokens"]
  with open(os.path.join(bi_export, "sentence_bert_config.json")) as f:
    # The training rows: [CLS] title body [SEP], max_len - 3 - max_query_len
    # + 2 tokens.
    assert json.load(f)["max_seq_length"] == 48 - 3 - 8 + 2
  loaded = hf.read_export(bi_export)
  assert (loaded.kind, loaded.similarity, loaded.scale) == ("bi", "cosine",
                                                            20.0)
  _assert_bit_equal(loaded.params, stage_params(bi_workdir, "best2", "max"))


def _hf_inputs(directory, *texts, **kwargs):
  """The exported tokenizer's encoding, as transformers loads it."""
  tokenizer = AutoTokenizer.from_pretrained(directory)
  encoded = tokenizer(*texts, truncation=True, return_tensors="np", **kwargs)
  return {k: np.asarray(v) for k, v in encoded.items()}


def test_cross_export_computes_what_transformers_computes(cross_export,
                                                          loaded):
  """ElectraForSequenceClassification's logit, in numpy from the exported
  files: out_proj(gelu(dense(h_[CLS]))) on the tokenizer's pair."""
  with open(os.path.join(cross_export, "config.json")) as f:
    config = json.load(f)
  tensors = {k.removeprefix("electra."): v
             for k, v in read_tensors(cross_export).items()}
  erf = np.vectorize(math.erf)
  expected = []
  for query, text in PAIRS:
    x = _hf_inputs(cross_export, query, text)
    assert x["input_ids"].shape[1] <= 64
    cls = bert_forward(tensors, config, x["input_ids"], x["attention_mask"],
                       x["token_type_ids"])[0, 0]
    z = (tensors["classifier.dense.weight"].astype(np.float64) @ cls
         + tensors["classifier.dense.bias"])
    gelu = 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))
    expected.append(float(tensors["classifier.out_proj.weight"][0] @ gelu
                          + tensors["classifier.out_proj.bias"][0]))
  scores = loaded(cross_export).score_pairs(PAIRS)
  assert np.abs(np.asarray(expected)).max() > 0.5  # not all near zero
  np.testing.assert_allclose(scores, expected, atol=1e-4, rtol=0)


def test_bi_export_computes_what_sentence_transformers_computes(bi_export,
                                                               loaded):
  """20 · cosine of the mean-pooled, normalised embeddings (numpy, from
  the exported files; rows cut at max_seq_length)."""
  with open(os.path.join(bi_export, "config.json")) as f:
    config = json.load(f)
  tensors = read_tensors(bi_export)

  with open(os.path.join(bi_export, "sentence_bert_config.json")) as f:
    max_len = json.load(f)["max_seq_length"]

  def embed(text):
    x = _hf_inputs(bi_export, text, max_length=max_len)
    hidden = bert_forward(tensors, config, x["input_ids"],
                          x["attention_mask"], x["token_type_ids"])[0]
    mean = hidden.mean(0)  # One unpadded row: every token counts.
    return mean / np.linalg.norm(mean)
  expected = [20.0 * float(embed(q) @ embed(t)) for q, t in PAIRS]
  scores = loaded(bi_export).score_pairs(PAIRS)
  np.testing.assert_allclose(scores, expected, atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def minilm_exports(tmp_path_factory):
  try:
    checkpoint_dir()
  except InputError as e:
    if os.environ.get("CI", "").lower() == "true":
      pytest.fail(str(e))
    pytest.skip(str(e))
  from golden.make_export_golden import minilm_model
  root = tmp_path_factory.mktemp("minilm")
  out = {}
  for kind in ("cross", "bi"):
    out[kind] = str(root / kind)
    hf.write_export(minilm_model(kind), out[kind])
  return out


def test_minilm_exports_equal_pytorch_golden(minilm_exports):
  golden = np.load(GOLDEN)
  pairs = list(zip(golden["queries"].tolist(), golden["texts"].tolist()))
  for kind, key in (("cross", "cross_logits"), ("bi", "bi_scores")):
    scores = Reranker.load(minilm_exports[kind]).score_pairs(pairs)
    np.testing.assert_allclose(scores, golden[key], atol=1e-4, rtol=0,
                               err_msg=kind)


def test_exports_equal_live_transformers(cross_export, bi_export, loaded):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      cross_export).eval()
  tokenizer = transformers.AutoTokenizer.from_pretrained(cross_export)
  with torch.no_grad():
    logits = [float(model(**tokenizer(q, t, truncation=True,
                                      return_tensors="pt")).logits[0, 0])
              for q, t in PAIRS]
  ours = loaded(cross_export).score_pairs(PAIRS)
  np.testing.assert_allclose(ours, logits, atol=1e-4, rtol=0)
  # Half precision: no tensor is rescaled, so float16 stays within 1e-2 of
  # the logits' scale (bfloat16, 8 significant bits, within 5e-2).
  for dtype, bound in ((torch.float16, 1e-2), (torch.bfloat16, 5e-2)):
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        cross_export, dtype=dtype).eval()
    with torch.no_grad():
      half = np.asarray([float(model(**tokenizer(
          q, t, truncation=True, return_tensors="pt")).logits[0, 0])
                         for q, t in PAIRS])
    assert np.abs(half - ours).max() <= bound * np.abs(ours).max(), (
        dtype, half, ours)
  st = pytest.importorskip("sentence_transformers")
  model = st.SentenceTransformer(bi_export, device="cpu")
  similarities = []
  for q, t in PAIRS:
    embeddings = model.encode([q, t], convert_to_tensor=True)
    similarities.append(20.0 * float(model.similarity(embeddings[:1],
                                                      embeddings[1:])[0, 0]))
  np.testing.assert_allclose(loaded(bi_export).score_pairs(PAIRS),
                             similarities, atol=1e-4, rtol=0)


def test_export_refuses_qds_and_a_foreign_directory(cross_workdir, tmp_path):
  assert cli.main(["export", "--workdir", cross_workdir, "--model", "qds",
                   "--out", str(tmp_path / "qds")]) == 2
  assert not (tmp_path / "qds").exists()
  foreign = tmp_path / "foreign"
  foreign.mkdir()
  (foreign / "notes.txt").write_text("mine")
  with pytest.raises(InputError, match="not a best_jax export"):
    hf.write_export(from_workdir(cross_workdir, "maxp"), foreign)
  assert os.listdir(foreign) == ["notes.txt"]


def test_export_replaces_a_previous_export(cross_workdir, tmp_path):
  out = str(tmp_path / "model")
  hf.write_export(from_workdir(cross_workdir, "firstp"), out)
  hf.write_export(from_workdir(cross_workdir, "best"), out)
  assert hf.read_manifest(out)["name"] == "best-2"
  assert sorted(os.listdir(tmp_path)) == ["model"]  # no staging left
  _assert_bit_equal(hf.read_export(out).params,
                    jax.device_get(stage_params(cross_workdir, "best2",
                                                "max")))


def test_export_writes_a_tokenizer_read_from_slow_files_only(tmp_path):
  """A RoBERTa checkpoint whose tokenizer is vocab.json and merges.txt (no
  tokenizer.json): the export's tokenizer reads text as the source's does,
  with the model's positions as its model_max_length."""
  import types  # pylint: disable=import-outside-toplevel
  from tokenizers import ByteLevelBPETokenizer  # pylint: disable=import-outside-toplevel
  from transformers import RobertaTokenizer  # pylint: disable=import-outside-toplevel
  from best_jax.models import BertConfig  # pylint: disable=import-outside-toplevel
  source, out = tmp_path / "source", tmp_path / "out"
  source.mkdir()
  out.mkdir()
  bpe = ByteLevelBPETokenizer()
  bpe.train_from_iterator(["apple river stone music garden"] * 50,
                          vocab_size=300, special_tokens=[
                              "<s>", "<pad>", "</s>", "<unk>", "<mask>"])
  bpe.save_model(str(source))
  RobertaTokenizer(vocab_file=str(source / "vocab.json"),
                   merges_file=str(source / "merges.txt")).save_pretrained(
                       str(source))
  if (source / "tokenizer.json").exists():
    (source / "tokenizer.json").unlink()
  model = types.SimpleNamespace(
      bert=BertConfig.tiny(), tokenizer_dir=str(source), tokenizer=lambda: AutoTokenizer.from_pretrained(
          str(source), local_files_only=True))
  assert hf._write_tokenizer(model, str(out)) == 1  # <pad>
  exported = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
  text = "apple river, music garden stone"
  assert (exported(text)["input_ids"]
          == model.tokenizer()(text)["input_ids"])
  assert len(exported(text)["input_ids"]) < len(text) // 2  # merged BPE
  assert exported.model_max_length == BertConfig.tiny().positions
  for name in ("vocab.json", "merges.txt"):  # for the slow tokenizer
    assert (out / name).is_file(), name


def test_longp_exports_with_its_own_rows(tmp_path):
  """A LongP model (stage `longp`, key `first`) reads and exports with
  rows of `longp.max_len` tokens, one per document, FirstP's aggregation."""
  from best_jax.train.checkpoint import save_params  # pylint: disable=import-outside-toplevel
  from fake_workdir import random_params  # pylint: disable=import-outside-toplevel
  root = tmp_path / "w"
  (root / "stages").mkdir(parents=True)
  config = tiny_config()
  config.ranker.overrides.max_position_embeddings = 600  # > 512: longp
  config.longp = {"max_len": 40}
  with open(root / "config.json", "w") as f:
    json.dump(config.to_dict(), f)
  save_params(str(root / "stages" / "longp"),
              {"first": random_params(config, 1)})
  with open(root / "stages" / "longp.json", "w") as f:
    json.dump({"keys": ["first"]}, f)
  model = from_workdir(str(root), "longp")
  assert (model.name, model.aggregation) == ("longp", "first")
  assert (model.segments.max_len, model.segments.max_segments) == (40, 1)
  _assert_bit_equal(model.params, jax.device_get(random_params(config, 1)))
  out = str(tmp_path / "export")
  assert cli.main(["export", "--workdir", str(root), "--model", "longp",
                   "--out", out]) == 0
  info = hf.read_manifest(out)
  assert info["aggregation"] == "first"
  assert info["segments"]["max_len"] == 40
  assert hf.read_export(out).segments.max_segments == 1
