"""Encoder families (`models.families`): tiny random transformers models of
BERT, ELECTRA, RoBERTa and XLM-RoBERTa, with random poolers and heads, load
into best_jax and score what transformers scores; bad checkpoints stop with
one line."""

import functools

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from best_jax.errors import InputError
from best_jax.models import families, load_ranker
from best_jax.models.bi_encoder import load_bi_encoder, mean_pool
from best_jax.segments.config import SegmenterConfig
from best_jax.segments.packing import SpecialTokens, pack_inputs
from best_jax.serve.reranker import Reranker
import family_checkpoints as fc

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Words of the tokenizer's vocabulary only (the packing test decodes them).
PAIRS = [("apple river", "The apple river of the stone."),
         ("music garden window", "Window forest engine. Music is the "
          "garden, the violin of a pirate?"),
         ("cloud", "cloud " * 60)]  # longer than the rows: cut


@functools.cache
def _checkpoint(root: str, model_type: str, classifier: bool):
  directory = f"{root}/{model_type}-{'cls' if classifier else 'model'}"
  return directory, fc.write(directory, model_type, classifier=classifier)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("families"))
  return lambda model_type, classifier=True: _checkpoint(root, model_type,
                                                          classifier)


def _pair_rows(tokenizer, pairs, max_length=None):
  encoded = tokenizer([q for q, _ in pairs], [t for _, t in pairs],
                      padding=True, truncation=max_length is not None,
                      max_length=max_length, return_tensors="np",
                      return_token_type_ids=True)
  return {k: np.asarray(v) for k, v in encoded.items()}


def _logits(model, rows, model_type):
  with torch.no_grad():
    return model(**fc.torch_inputs(rows, model_type)).logits[:, 0].numpy()


def _scores(ranker, rows):
  return np.asarray(ranker(jnp.asarray(rows["input_ids"]),
                           jnp.asarray(rows["attention_mask"]),
                           jnp.asarray(rows["token_type_ids"])))


@pytest.mark.parametrize("model_type", fc.FAMILIES)
def test_sequence_classifier_scores_equal_transformers(checkpoint,
                                                       model_type):
  """The family's head, imported: sentence pairs as the tokenizer packs
  them, and best_jax's segment packing of the same tokens."""
  directory, model = checkpoint(model_type)
  ranker = load_ranker(directory, rngs=nnx.Rngs(0))
  assert ranker.config.model_type == model_type
  assert ranker.config.head == ("gelu" if model_type == "electra" else "tanh")
  tokenizer = fc.tokenizer(model_type)
  rows = _pair_rows(tokenizer, PAIRS, max_length=64)
  expected = _logits(model, rows, model_type)
  assert np.ptp(expected) > 0.1  # the pairs score apart
  np.testing.assert_allclose(_scores(ranker, rows), expected, atol=1e-4,
                             rtol=0)
  # `score --model DIR` reads the directory as it is.
  reranker = Reranker.load(directory)
  np.testing.assert_allclose(reranker.score_pairs(PAIRS), expected,
                             atol=1e-4, rtol=0)
  hits = reranker.rerank("music garden", [t for _, t in PAIRS])
  assert sorted(h.index for h in hits) == [0, 1, 2]
  assert np.isfinite([h.score for h in hits]).all()
  # best_jax's packing of the same tokens is the tokenizer's pair.
  config = SegmenterConfig(max_len=48, max_query_len=8, max_title_len=4,
                           min_len=8)
  queries = tokenizer([q for q, _ in PAIRS], add_special_tokens=False,
                      padding=True, return_tensors="np")
  texts = tokenizer([t for _, t in PAIRS], add_special_tokens=False,
                    padding=True, truncation=True,
                    max_length=config.content_len, return_tensors="np")
  packed = pack_inputs(queries["input_ids"],
                       queries["attention_mask"].astype(bool),
                       texts["input_ids"],
                       texts["attention_mask"].astype(bool), config=config,
                       special=SpecialTokens.from_tokenizer(tokenizer))
  for i, (query, _) in enumerate(PAIRS):
    length = int(packed["attention_mask"][i].sum())
    text = tokenizer.decode(texts["input_ids"][i], skip_special_tokens=True)
    want = tokenizer(query, text)["input_ids"]
    assert packed["input_ids"][i, :length].tolist() == want
  np.testing.assert_allclose(_scores(ranker, packed),
                             _logits(model, packed, model_type), atol=1e-4,
                             rtol=0)


@pytest.mark.parametrize("model_type", fc.FAMILIES)
def test_bi_encoder_embeddings_equal_transformers(checkpoint, model_type):
  """A `*Model` as a bi-encoder: the mean of transformers' last hidden
  states over the mask (before normalising)."""
  directory, model = checkpoint(model_type, classifier=False)
  bi = load_bi_encoder(directory, similarity="dot")
  tokenizer = fc.tokenizer(model_type)
  encoded = tokenizer([t for _, t in PAIRS], padding=True,
                      return_tensors="np", return_token_type_ids=True)
  rows = {k: np.asarray(v) for k, v in encoded.items()}
  with torch.no_grad():
    hidden = model(**fc.torch_inputs(rows, model_type)).last_hidden_state
  expected = np.asarray(mean_pool(jnp.asarray(hidden.numpy()),
                                  jnp.asarray(rows["attention_mask"])))
  got = np.asarray(bi.embed(jnp.asarray(rows["input_ids"]),
                            jnp.asarray(rows["attention_mask"])))
  assert np.abs(expected).max() > 0.1
  np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


def test_a_model_checkpoint_starts_the_familys_head(checkpoint):
  """A `*Model`'s cross-encoder: BERT's gets best_jax's linear head on
  [CLS] (as MiniLM always did), ELECTRA's and RoBERTa's their own head, all
  random."""
  heads = {}
  for model_type in fc.FAMILIES:
    directory, _ = checkpoint(model_type, classifier=False)
    heads[model_type] = load_ranker(directory, rngs=nnx.Rngs(0)).config.head
  assert heads == {"bert": "linear", "electra": "gelu", "roberta": "tanh",
                   "xlm-roberta": "tanh"}


def test_heads_run_without_dropout_in_training():
  """`models.ranker`: heads have no dropout (the encoder's only). With the
  encoder's dropout off, a ModernBERT ranker whose config asks for
  classifier_dropout scores the same with and without dropout rngs."""
  from best_jax.models import CrossEncoderRanker  # pylint: disable=import-outside-toplevel
  from best_jax.models.modernbert_config import ModernBertConfig  # pylint: disable=import-outside-toplevel
  config = ModernBertConfig.tiny(classifier_dropout=0.5)
  assert config.hidden_dropout == config.attention_dropout == 0.0
  ranker = CrossEncoderRanker(config, rngs=nnx.Rngs(0))
  ids = jnp.asarray(np.random.default_rng(0).integers(3, 128, (4, 16)))
  ids = ids.at[:, 0].set(1)
  mask, types = jnp.ones_like(ids, bool), jnp.zeros_like(ids)
  np.testing.assert_array_equal(
      np.asarray(ranker(ids, mask, types, rngs=nnx.Rngs(dropout=1))),
      np.asarray(ranker(ids, mask, types)))


# ------------------------------------------------------------ bad checkpoints

def _broken(root, name, model_type="bert", edit_config=None,
            edit_tensors=None, edit_dir=None):
  """A saved tiny classifier with its config.json, tensors or files
  (`edit_dir(directory)`) edited."""
  import json  # pylint: disable=import-outside-toplevel
  import os  # pylint: disable=import-outside-toplevel
  from safetensors.numpy import load_file, save_file  # pylint: disable=import-outside-toplevel
  directory = os.path.join(root, name)
  fc.write(directory, model_type)
  path = os.path.join(directory, "config.json")
  if edit_config:
    with open(path) as f:
      config = json.load(f)
    edit_config(config)
    with open(path, "w") as f:
      json.dump(config, f)
  if edit_tensors:
    weights = os.path.join(directory, "model.safetensors")
    tensors = load_file(weights)
    edit_tensors(tensors)
    save_file(tensors, weights, metadata={"format": "pt"})
  if edit_dir:
    edit_dir(directory)
  return directory


def _no_tokenizer(directory):
  """Leaves config.json and the weights: transformers would build a
  tokenizer of the special tokens alone (every word [UNK])."""
  import glob  # pylint: disable=import-outside-toplevel
  import os  # pylint: disable=import-outside-toplevel
  for path in (glob.glob(f"{directory}/tokenizer*")
               + glob.glob(f"{directory}/special*")):
    os.remove(path)


def _larger_tokenizer(directory):
  """A tokenizer with ids past the model's embeddings."""
  tokenizer = fc.tokenizer("bert")
  tokenizer.add_tokens(["zebra", "yak"])
  tokenizer.save_pretrained(directory)


def _no_sep_tokenizer(directory):
  """A tokenizer without a separator token to build rows with."""
  tokenizer = fc.tokenizer("bert")
  tokenizer.sep_token = None
  tokenizer.save_pretrained(directory)


def _two_labels(config):
  config["id2label"] = {"0": "A", "1": "B"}
  config["label2id"] = {"A": 0, "B": 1}


def test_bad_checkpoints_stop_with_one_line_before_anything_is_written(
    tmp_path, capsys):
  from best_jax import cli  # pylint: disable=import-outside-toplevel
  assert set(fc.FAMILIES) <= set(families.model_types())
  root = str(tmp_path)
  cases = [
      (str(tmp_path / "nowhere"), "not a checkpoint directory"),
      (_broken(root, "gpt", edit_config=lambda c: c.update(
          model_type="gpt2")), "model_type 'gpt2' is not supported (one of "
       f"{', '.join(families.model_types())})"),
      (_broken(root, "labels", edit_config=_two_labels), "2 labels"),
      (_broken(root, "missing", edit_tensors=lambda t: t.pop(
          "bert.encoder.layer.1.output.dense.bias")),
       "missing 1 tensors: encoder.layer.1.output.dense.bias"),
      (_broken(root, "shape", model_type="roberta", edit_tensors=lambda t: t
               .update({"classifier.dense.weight": np.zeros((32, 31),
                                                            np.float32)})),
       "has shape (31, 32) in the checkpoint"),
      (_broken(root, "query", model_type="electra", edit_tensors=lambda t: t
               .update({"electra.encoder.layer.0.attention.self.query.weight":
                        np.zeros((32, 31), np.float32)})),
       "query.weight has shape (32, 31) in the checkpoint"),
      (_broken(root, "noarch", edit_config=lambda c: c.pop(
          "architectures")), "config.json names no architectures but the "
       "weights hold a classification head"),
      (_broken(root, "notok", edit_dir=_no_tokenizer), "no tokenizer (none "
       "of tokenizer.json"),
      (_broken(root, "bigtok", edit_dir=_larger_tokenizer),
       "tokens, more than the model's vocab_size="
       f"{len(fc.WORDS) + 5}"),
      (_broken(root, "nosep", edit_dir=_no_sep_tokenizer),
       "the tokenizer has no sep token"),
  ]
  capsys.readouterr()  # saving the checkpoints' progress bars
  for directory, message in cases:
    workdir = tmp_path / "w"
    assert cli.main(["train", "--config", "configs/tiny_cpu.py",
                     "--workdir", str(workdir), "--config.ranker.tiny=False",
                     "--config.ranker.overrides={}",
                     f"--config.ranker.checkpoint={directory}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, (message, err)
    assert not workdir.exists()
    assert cli.main(["score", "--model", directory, "--query", "apple",
                     "--text", "river"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, (message, err)
  # A tiny random ranker whose 128 embeddings the MiniLM tokenizer's ids
  # overrun (they would read NaN rows): the same one line.
  workdir = tmp_path / "w"
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   str(workdir), "--config.ranker.overrides={}"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0 and ("more than the tiny random ranker's "
                                   "(config.ranker.overrides) vocab_size=128"
                                   in err)
  assert not workdir.exists()
  fc.write(str(tmp_path / "model"), "bert", classifier=False)
  capsys.readouterr()
  assert cli.main(["score", "--model", str(tmp_path / "model"), "--query",
                   "apple", "--text", "river"]) == 2
  assert "neither a best_jax export" in capsys.readouterr().err


def test_qds_refuses_a_family_other_than_bert(tmp_path, checkpoint,
                                              capsys):
  """QDS copies an absolute BERT position table and marks sentences with
  a reserved token: a RoBERTa checkpoint, or a BERT one whose tokenizer has
  no [unused0], stops with one line before anything is written."""
  from best_jax import cli  # pylint: disable=import-outside-toplevel
  workdir = tmp_path / "w"
  for model_type, message in (
      ("roberta", "is a 'roberta' model"),
      ("bert", "sentence-start token '[unused0]' is not in")):
    directory, _ = checkpoint(model_type)
    capsys.readouterr()
    assert cli.main([
        "train", "--config", "configs/tiny_cpu.py", "--workdir",
        str(workdir), "--config.ranker.tiny=False",
        "--config.ranker.overrides={}", "--config.regimes=['qds']",
        f"--config.ranker.checkpoint={directory}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    assert not workdir.exists()


def test_an_unknown_override_stops_with_one_line(tmp_path, checkpoint,
                                                 capsys):
  from best_jax import cli  # pylint: disable=import-outside-toplevel
  directory, _ = checkpoint("electra")
  workdir = tmp_path / "w"
  capsys.readouterr()
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   str(workdir), "--config.ranker.tiny=False",
                   "--config.ranker.overrides={'nope': 1}",
                   f"--config.ranker.checkpoint={directory}"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0 and "nope: not a BERT config field" in err, err
  assert not workdir.exists()


def test_rows_longer_than_the_checkpoints_positions_stop_early(
    tmp_path, checkpoint, capsys):
  """segments.max_len (a cross-encoder's row) or the bi-encoder's segment
  row beyond the checkpoint's 64 positions: one line before anything is
  written, not a trace-time error after the workdir."""
  from best_jax import cli  # pylint: disable=import-outside-toplevel
  workdir = tmp_path / "w"
  for kind, max_len, message in (
      ("cross", 80, "config.segments.max_len = 80 tokens exceed the 64 "
       "positions"),
      ("bi", 80, "segment rows (config.segments.max_len - 1 - "
       "max_query_len) = 71 tokens exceed the 64 positions")):
    directory, _ = checkpoint("bert", classifier=kind == "cross")
    capsys.readouterr()
    assert cli.main([
        "train", "--config", "configs/tiny_cpu.py", "--workdir",
        str(workdir), "--config.ranker.tiny=False",
        "--config.ranker.overrides={}", f"--config.ranker.kind={kind}",
        f"--config.segments.max_len={max_len}",
        f"--config.ranker.checkpoint={directory}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    assert not workdir.exists()


# ------------------------------------------------------- train, then export

TRAIN = ["--config.ranker.tiny=False", "--config.ranker.overrides={}",
         "--config.regimes=['firstp','maxp','goldp','best']",
         "--config.best.max_iterations=1", "--config.birch.enabled=False",
         "--config.train.num_steps=2", "--config.train.eval_every=2",
         "--config.train.patience=0", "--config.data.num_queries=16",
         "--config.data.num_docs=12", "--config.eval.depth=5"]


@pytest.mark.slow
@pytest.mark.parametrize("model_type", fc.FAMILIES)
def test_train_from_each_family_then_export_loads_in_transformers(
    tmp_path, checkpoint, model_type):
  """Every regime (BeST's joint step included) trains from the family's
  classifier; the export is the family's class, whose logits transformers
  computes as best_jax does in float32, and close in float16 and
  bfloat16."""
  from best_jax import cli  # pylint: disable=import-outside-toplevel
  directory, _ = checkpoint(model_type)
  workdir, out = str(tmp_path / "w"), str(tmp_path / "export")
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   workdir, f"--config.ranker.checkpoint={directory}"]
                  + TRAIN) == 0
  assert cli.main(["export", "--workdir", workdir, "--model", "best-1",
                   "--out", out]) == 0
  ours = Reranker.load(out).score_pairs(PAIRS)
  tokenizer = transformers.AutoTokenizer.from_pretrained(out)
  rows = tokenizer([q for q, _ in PAIRS], [t for _, t in PAIRS],
                   padding=True, truncation=True, return_tensors="pt")
  for dtype in (torch.float32, torch.float16, torch.bfloat16):
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        out, dtype=dtype).eval()
    assert type(model).__name__.lower().startswith(
        model_type.replace("-", "")), type(model).__name__
    with torch.no_grad():
      logits = model(**rows).logits[:, 0].float().numpy()
    assert np.isfinite(logits).all(), dtype
    if dtype == torch.float32:
      np.testing.assert_allclose(ours, logits, atol=1e-4, rtol=0)
    else:  # float16 within 1e-2 of the logits' scale; bfloat16 (8
      # significant bits) within 5e-2: its rounding alone moves this random
      # model's logits by up to ~3% (no tensor is rescaled).
      bound = 1e-2 if dtype == torch.float16 else 5e-2
      assert np.abs(logits - ours).max() <= bound * np.abs(ours).max(), (
          dtype, logits, ours)


@pytest.mark.slow
def test_bi_encoder_trains_from_a_roberta_model(tmp_path, checkpoint):
  """`ranker.kind=bi` from a `RobertaModel`: FirstP and BeST (θ0 the
  pretrained model) train and rank; the export is a sentence-transformers
  RobertaModel whose embeddings transformers computes as best_jax does."""
  from best_jax import cli  # pylint: disable=import-outside-toplevel
  directory, _ = checkpoint("roberta", classifier=False)
  workdir, out = str(tmp_path / "w"), str(tmp_path / "export")
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   workdir, f"--config.ranker.checkpoint={directory}",
                   "--config.ranker.kind=bi", "--config.best.theta0=pretrained",
                   "--config.train.in_batch_negatives=True",
                   "--config.train.fixed_order_reduction=False",
                   "--config.train.loss=softmax_cross_entropy"]
                  + [a for a in TRAIN if "regimes" not in a]
                  + ["--config.regimes=['firstp','best']"]) == 0
  assert cli.main(["export", "--workdir", workdir, "--model", "best-1",
                   "--out", out]) == 0
  model = transformers.AutoModel.from_pretrained(out).eval()
  assert type(model).__name__ == "RobertaModel"
  bi = load_bi_encoder(out, similarity="dot")
  tokenizer = transformers.AutoTokenizer.from_pretrained(out)
  encoded = tokenizer([t for _, t in PAIRS], padding=True, truncation=True,
                      max_length=64, return_tensors="np")
  rows = {k: np.asarray(v) for k, v in encoded.items()}
  with torch.no_grad():
    hidden = model(**fc.torch_inputs(rows, "roberta")).last_hidden_state
  expected = np.asarray(mean_pool(jnp.asarray(hidden.numpy()),
                                  jnp.asarray(rows["attention_mask"])))
  got = np.asarray(bi.embed(jnp.asarray(rows["input_ids"]),
                            jnp.asarray(rows["attention_mask"])))
  np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_the_real_minilm_exports_within_1e_2_in_half_precision(tmp_path):
  """On a real checkpoint (MiniLM-L6, 384 wide, its pretrained encoder and a
  trained head) the export's float16 and bfloat16 logits are within 1e-2 of
  the logits' scale of best_jax's float32 ones (the tiny random models above
  need 5e-2 in bfloat16: their rounding, not the export's)."""
  from best_jax import cli  # pylint: disable=import-outside-toplevel
  workdir, out = str(tmp_path / "w"), str(tmp_path / "export")
  # FirstP's two steps train the model and its new head; BeST's models
  # export through the same code
  # (`test_train_from_each_family_then_export_loads_in_transformers` exports
  # BeST-1 of each family), and training them from MiniLM would add minutes
  # to the suite.
  assert cli.main(["train", "--config", "configs/tiny_cpu.py", "--workdir",
                   workdir, "--config.ranker.checkpoint=minilm-l6",
                   "--config.regimes=['firstp']"]
                  + [a for a in TRAIN if "regimes" not in a]) == 0
  assert cli.main(["export", "--workdir", workdir, "--model", "firstp",
                   "--out", out]) == 0
  pairs = [("who wrote the first law of thermodynamics",
            "Rudolf Clausius stated the first law of thermodynamics in "
            "1850, building on Joule's experiments."),
           ("who wrote the first law of thermodynamics",
            "The river flows through three countries before the sea."),
           ("capital of norway", "Oslo is the capital of Norway. " * 30)]
  ours = Reranker.load(out).score_pairs(pairs)
  tokenizer = transformers.AutoTokenizer.from_pretrained(out)
  rows = tokenizer([q for q, _ in pairs], [t for _, t in pairs],
                   padding=True, truncation=True, return_tensors="pt")
  for dtype in (torch.float16, torch.bfloat16):
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        out, dtype=dtype).eval()
    with torch.no_grad():
      logits = model(**rows).logits[:, 0].float().numpy()
    assert np.isfinite(logits).all(), dtype
    ratio = np.abs(logits - ours).max() / np.abs(ours).max()
    print(f"{dtype}: max |error| / max |logit| = {ratio:.2%}")  # -rP shows it
    assert ratio <= 1e-2, (dtype, logits, ours)
