"""ModernBERT against transformers' own: tiny random models (every tensor,
head included, random), float32 within 1e-4; padded = unpadded; export
loads in transformers in float32, float16 and bfloat16."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import save_file

from best_jax.errors import InputError
from best_jax.models import (CrossEncoderRanker, families, load_encoder,
                             load_ranker, modernbert, modernbert_family,
                             weights)
from best_jax.models.bi_encoder import load_bi_encoder
from best_jax.models.modernbert import ModernBertConfig
from best_jax.models.unpadding import TokenBudget

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Layers 0 and 2 global, 1 and 3 local with keys within 4 positions: the
# window cuts rows of 9-40 tokens.
TINY = dict(vocab_size=128, hidden_size=32, num_hidden_layers=4,
            num_attention_heads=2, intermediate_size=48,
            max_position_embeddings=64, local_attention=8,
            global_attn_every_n_layers=2, pad_token_id=0, bos_token_id=1,
            cls_token_id=1, eos_token_id=2, sep_token_id=2)
BIASED = dict(norm_bias=True, attention_bias=True, mlp_bias=True,
              classifier_bias=True)
VARIANTS = {"cls": dict(classifier_pooling="cls"),
            "mean_biased": dict(classifier_pooling="mean", **BIASED)}
LENGTHS = (40, 31, 17, 9)


def _randomize(model, seed: int) -> None:
  """Every parameter random: weights N(0, 0.2), the head and classifier
  N(0, 0.5), norm scales 1 + N(0, 0.2), biases N(0, 0.1)."""
  generator = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=generator)
      if "norm" in name:
        p.copy_((1.0 + 0.2 * noise) if name.endswith("weight")
                else 0.1 * noise)
      elif name.endswith("bias"):
        p.copy_(0.1 * noise)
      else:
        head = name.startswith(("head.", "classifier."))
        p.copy_((0.5 if head else 0.2) * noise)


def _pairs(lengths=LENGTHS, length=40, seed=0):
  """`[CLS] q [SEP] d [SEP]` rows of `lengths`, padded with 0."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(3, 128, (len(lengths), length))
  mask = np.arange(length)[None] < np.array(lengths)[:, None]
  ids[:, 0] = 1
  ids[:, 5] = 2
  ids[np.arange(len(lengths)), np.array(lengths) - 1] = 2
  return np.where(mask, ids, 0).astype(np.int32), mask


def _torch_model(cls, seed=0, attn="eager", **overrides):
  config = transformers.ModernBertConfig(**dict(TINY, **overrides),
                                         num_labels=1)
  model = cls._from_config(config, attn_implementation=attn)
  _randomize(model, seed)
  return model.eval()


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def classifier(request, tmp_path_factory):
  """(torch classifier, its saved directory)."""
  model = _torch_model(transformers.ModernBertForSequenceClassification,
                       **VARIANTS[request.param])
  directory = str(tmp_path_factory.mktemp(request.param))
  model.save_pretrained(directory)
  return model, directory


def _torch_logits(model, ids, mask):
  with torch.no_grad():
    return model(input_ids=torch.tensor(ids, dtype=torch.long),
                 attention_mask=torch.tensor(mask.astype(np.int64))
                 ).logits.float().numpy()[:, 0]


def _ranker(directory, **overrides):
  """best_jax's ranker of a checkpoint (`models.families` picks ModernBERT)."""
  ranker = load_ranker(directory, rngs=nnx.Rngs(0), **overrides)
  assert isinstance(ranker.head, modernbert.ClassificationHead)
  return ranker


def _score(ranker, ids, mask, **kwargs):
  ids = jnp.asarray(ids)
  return np.asarray(ranker(ids, jnp.asarray(mask), jnp.zeros_like(ids),
                           **kwargs))


def _export(model, directory, *, classifier=True):
  """What `best_jax export` writes (`serve/hf.py`): the family's
  transformers config and the model's tensors under transformers' names."""
  arrays = {path: np.asarray(variable.get_value()) for path, variable
            in nnx.to_flat_state(nnx.state(model, nnx.Param))}
  config = model.config
  modernbert_family.hf_config(config, classifier,
                              config.pad_token_id).save_pretrained(
                                  str(directory))
  save_file(weights.model_tensors(arrays, config, classifier=classifier),
            os.path.join(directory, "model.safetensors"),
            metadata={"format": "pt"})


def test_config_sets_local_and_global_layers(classifier):
  config = families.read_config(classifier[1])
  assert config.layer_types == ("full_attention", "sliding_attention") * 2
  assert (config.local_attention, config.global_rope_theta,
          config.local_rope_theta) == (8, 160_000.0, 10_000.0)


def test_v4_config_fields():
  config = ModernBertConfig.from_hf(dict(
      model_type="modernbert", vocab_size=128, hidden_size=32,
      num_hidden_layers=4, num_attention_heads=2, intermediate_size=48,
      global_attn_every_n_layers=3, global_rope_theta=1e5,
      local_rope_theta=1e3, classifier_pooling="mean"))
  assert config.layer_types == ("full_attention", "sliding_attention",
                                "sliding_attention", "full_attention")
  assert (config.global_rope_theta, config.local_rope_theta) == (1e5, 1e3)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_scores_equal_transformers(classifier, attn):
  model, directory = classifier
  if attn != "eager":
    model = transformers.ModernBertForSequenceClassification.from_pretrained(
        directory, attn_implementation=attn).eval()
  ids, mask = _pairs()
  expected = _torch_logits(model, ids, mask)
  ranker = _ranker(directory)
  scores = _score(ranker, ids, mask)
  assert np.abs(expected).max() > 0.5, "the head must matter"
  print(f"\n{ranker.config.classifier_pooling} pooling, {attn}: max "
        "|best_jax - transformers| "
        f"{np.abs(scores - expected).max():.3g} (logits up to "
        f"{np.abs(expected).max():.3g})")
  np.testing.assert_allclose(scores, expected, atol=1e-4, rtol=0)


def test_window_and_padding_matter(classifier):
  """The local window changes the scores at these lengths; padding ids
  change nothing."""
  _, directory = classifier
  ids, mask = _pairs()
  score = lambda ranker, x: _score(ranker, x, mask)  # pylint: disable=unnecessary-lambda-assignment
  ranker = _ranker(directory)
  wide = _ranker(directory, local_attention=128)
  assert np.abs(score(wide, ids) - score(ranker, ids))[:3].min() > 1e-3
  np.testing.assert_allclose(score(ranker, np.where(mask, ids, 77)),
                             score(ranker, ids), atol=1e-6, rtol=0)


@pytest.mark.parametrize("budget", [
    TokenBudget(tokens=100), TokenBudget(tokens=100, rows=(2, 2)),
    TokenBudget(tokens=80, rows=(0, 2), units=2)])
def test_unpadded_equals_padded(classifier, budget):
  _, directory = classifier
  ranker = _ranker(directory)
  ids, mask = _pairs()
  padded = _score(ranker, ids, mask)
  unpadded = _score(ranker, ids, mask, budget=budget)
  np.testing.assert_allclose(unpadded, padded, atol=1e-5, rtol=0)


def test_unpadded_dropout_equals_padded(classifier):
  """Each token and attention score drops as in its padded row."""
  rates = dict(embedding_dropout=0.1, attention_dropout=0.1,
               mlp_dropout=0.1, classifier_dropout=0.1)
  ranker = _ranker(classifier[1], **rates)
  ids, mask = _pairs()
  score = lambda budget: _score(ranker, ids, mask, rngs=nnx.Rngs(dropout=3),  # pylint: disable=unnecessary-lambda-assignment
                                budget=budget)
  padded = score(None)
  assert np.abs(padded - _score(ranker, ids, mask)).min() > 1e-4
  np.testing.assert_allclose(score(TokenBudget(tokens=100, rows=(2, 2))),
                             padded, atol=1e-5, rtol=0)


def test_unpadded_rows_that_do_not_fit_are_nan(classifier):
  ranker = _ranker(classifier[1])
  ids, mask = _pairs()
  scores = _score(ranker, ids, mask, budget=TokenBudget(tokens=60, units=2))
  assert np.isnan(scores[:2]).all() and np.isfinite(scores[2:]).all()


def _saved_model_hidden(directory, seed: int, **overrides):
  """A random `ModernBertModel` saved to `directory`, pairs, and
  transformers' last hidden states of them."""
  model = _torch_model(transformers.ModernBertModel, seed=seed, **overrides)
  model.save_pretrained(str(directory))
  ids, mask = _pairs(seed=seed)
  with torch.no_grad():
    hidden = model(input_ids=torch.tensor(ids, dtype=torch.long),
                   attention_mask=torch.tensor(mask.astype(np.int64))
                   ).last_hidden_state.numpy()
  return ids, mask, hidden


def test_encoder_equals_transformers_model(tmp_path):
  ids, mask, expected = _saved_model_hidden(tmp_path, 1, **BIASED)
  encoder = load_encoder(str(tmp_path))
  assert isinstance(encoder, modernbert.ModernBertEncoder)
  hidden = np.asarray(encoder(jnp.asarray(ids), jnp.asarray(mask)))
  np.testing.assert_allclose(hidden[mask], expected[mask], atol=1e-4, rtol=0)
  mean = (expected * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
  encoder = load_encoder(str(tmp_path), classifier_pooling="mean")
  padded = encoder(jnp.asarray(ids), jnp.asarray(mask), first_only=True)
  unpadded = encoder.first_unpadded(jnp.asarray(ids)[None],
                                    jnp.asarray(mask)[None], tokens=100,
                                    rows=(2, 2))
  for pooled in (padded, unpadded):
    np.testing.assert_allclose(np.asarray(pooled), mean, atol=1e-4, rtol=0)


def test_bi_encoder_embeds_as_transformers_model(tmp_path):
  """A `ModernBertModel` as best_jax's bi-encoder: the mean of transformers'
  last hidden states over the mask."""
  ids, mask, hidden = _saved_model_hidden(tmp_path, 4)
  mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
  bi = load_bi_encoder(str(tmp_path), similarity="dot")
  assert isinstance(bi.encoder, modernbert.ModernBertEncoder)
  embedded = np.asarray(bi.embed(jnp.asarray(ids), jnp.asarray(mask)))
  np.testing.assert_allclose(embedded, mean, atol=1e-4, rtol=0)


def test_encoder_reads_a_classifiers_model_tensors(classifier):
  _, directory = classifier
  encoder = load_encoder(directory)
  ranker = _ranker(directory)
  ids, mask = _pairs()
  np.testing.assert_array_equal(
      np.asarray(encoder(jnp.asarray(ids), jnp.asarray(mask))),
      np.asarray(ranker.encoder(jnp.asarray(ids), jnp.asarray(mask))))


# Largest |logit error| / largest |logit| allowed when transformers runs the
# export in half precision. bfloat16's 8-bit mantissa alone moves this tiny
# random model's logits by up to ~2% (the source checkpoint loaded in
# bfloat16 moves them alike: the test checks both give the same logits).
HALF_ERROR = {"float16": 1e-2, "bfloat16": 3e-2}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_export_loads_in_transformers(classifier, tmp_path, dtype):
  _, directory = classifier
  ranker = _ranker(directory)
  _export(ranker, tmp_path)
  ids, mask = _pairs(seed=2)
  ours = _score(ranker, ids, mask)
  load = lambda d: transformers.ModernBertForSequenceClassification.from_pretrained(  # pylint: disable=unnecessary-lambda-assignment
      d, dtype=getattr(torch, dtype), attn_implementation="sdpa").eval()
  theirs = _torch_logits(load(str(tmp_path)), ids, mask)
  if dtype == "float32":
    np.testing.assert_allclose(theirs, ours, atol=1e-4, rtol=0)
    return
  assert np.isfinite(theirs).all()
  np.testing.assert_array_equal(theirs, _torch_logits(load(directory), ids,
                                                      mask))
  assert np.abs(theirs - ours).max() <= HALF_ERROR[dtype] * np.abs(ours).max()


def test_export_round_trip_is_exact(classifier, tmp_path):
  ranker = _ranker(classifier[1])
  _export(ranker, tmp_path)
  assert families.read_config(tmp_path) == ranker.config
  tensors = weights.read_tensors(str(tmp_path))
  original = weights.read_tensors(classifier[1])
  assert sorted(tensors) == sorted(original)
  for name, array in original.items():
    np.testing.assert_array_equal(tensors[name], array, err_msg=name)


def test_encoder_export_loads_as_model(tmp_path):
  model = _torch_model(transformers.ModernBertModel, seed=3)
  model.save_pretrained(str(tmp_path / "in"))
  (tmp_path / "out").mkdir()
  _export(load_encoder(str(tmp_path / "in")), tmp_path / "out",
          classifier=False)
  loaded = transformers.AutoModel.from_pretrained(str(tmp_path / "out"))
  assert type(loaded).__name__ == "ModernBertModel"
  for name, p in model.state_dict().items():
    np.testing.assert_array_equal(loaded.state_dict()[name].numpy(),
                                  p.numpy(), err_msg=name)


def _bad(tmp_path, classifier, edit):
  """A copy of the classifier's checkpoint, `edit(tensors, config)`ed."""
  tensors = weights.read_tensors(classifier[1])
  with open(os.path.join(classifier[1], "config.json"), encoding="utf-8") as f:
    config = json.load(f)
  edit(tensors, config)
  (tmp_path / "config.json").write_text(json.dumps(config))
  save_file(tensors, str(tmp_path / "model.safetensors"))
  return str(tmp_path)


def _two_labels(tensors, config):
  tensors.update({"classifier.weight": np.zeros((2, 32), np.float32),
                  "classifier.bias": np.zeros(2, np.float32)})
  config["id2label"] = {"0": "LABEL_0", "1": "LABEL_1"}


@pytest.mark.parametrize("edit, message", [
    (lambda t, c: t.pop("model.layers.1.attn.Wo.weight"),
     "missing 1 tensors: layers.1.attn.Wo.weight"),
    (lambda t, c: t.update({"extra.weight": np.zeros(2, np.float32)}),
     "unexpected 1 tensors: extra.weight"),
    (lambda t, c: t.update({"model.layers.0.attn.Wqkv.weight": np.zeros(
        (32, 96), np.float32)}),
     "tensor layers.0.attn.Wqkv.weight has shape (32, 96)"),
    (_two_labels, "a sequence classifier with 2 labels"),
    (lambda t, c: c.update(classifier_pooling="max"),
     "classifier_pooling 'max' is not one of cls, mean"),
])
def test_bad_checkpoints_are_one_line_errors(tmp_path, classifier, edit,
                                             message):
  with pytest.raises(InputError) as error:
    _ranker(_bad(tmp_path, classifier, edit))
  assert message in str(error.value)
  assert "\n" not in str(error.value)


def test_config_errors():
  with pytest.raises(InputError, match="'bert' is not 'modernbert'"):
    ModernBertConfig.from_hf({"model_type": "bert"})
  with pytest.raises(InputError, match="rope_type 'yarn'"):
    ModernBertConfig.from_hf(dict(
        model_type="modernbert", vocab_size=8, hidden_size=8,
        num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
        rope_parameters={"full_attention": {"rope_type": "yarn"}}))
  with pytest.raises(InputError, match="classifier_pooling 'max'"):
    ModernBertConfig.tiny(classifier_pooling="max")
  with pytest.raises(InputError, match="local_attention 1 must be at least"):
    ModernBertConfig.tiny(local_attention=1)


@pytest.mark.parametrize("length, window", [(40, 4), (37, 4), (13, 1),
                                            (64, 8)])
def test_banded_attention_equals_masked(length, window):
  rng = np.random.default_rng(length)
  q, k, v = (jnp.asarray(rng.normal(size=(2, 3, length, 8)), jnp.float32)
             for _ in range(3))
  mask = jnp.arange(length)[None] < jnp.array([[length], [length - 7]])
  banded = modernbert.banded_attention(q, k, v, mask, window)
  position = np.arange(length)
  allowed = (np.asarray(mask)[:, None, None, :]
             & (np.abs(position[:, None] - position[None]) <= window))
  logits = np.where(allowed, np.einsum("bhqd,bhkd->bhqk", q, k), -1e30)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  dense = np.einsum("bhqk,bhkd->bhqd", probs / probs.sum(-1, keepdims=True),
                    v)
  real = np.asarray(mask)[:, None, :, None]
  np.testing.assert_allclose(np.where(real, banded, 0),
                             np.where(real, dense, 0), atol=1e-5, rtol=0)


# Each example's second row is short (<= 16 of 32 tokens): one data shard of
# 8 holds one example, so one row per attention group of lengths 16 and 32.
@pytest.mark.parametrize("shape, budget", [
    ((4, 2), None), ((8, 1), TokenBudget(tokens=64, rows=(1, 1)))])
def test_sharded_training_equals_one_device(shape, budget):
  """Two train steps (dropout on) on 8 devices equal one device's padded
  ones: padded on a 4x2 mesh, and unpadded on 8 data shards (one stream
  each, attention on two length groups)."""
  import jax  # pylint: disable=import-outside-toplevel
  from best_jax.train import sharding  # pylint: disable=import-outside-toplevel
  from best_jax.train import trainer as trainer_lib  # pylint: disable=import-outside-toplevel
  from fakes import synthetic_batch, tiny_config  # pylint: disable=import-outside-toplevel
  config = tiny_config()
  config.train.fixed_order_reduction = False
  model = ModernBertConfig.tiny(num_layers=2, embedding_dropout=0.1,
                                mlp_dropout=0.1, classifier_pooling="mean")
  batches = [synthetic_batch(i, batch_size=8, group_size=2, length=32,
                             vocab_size=128) for i in range(2)]
  for batch in batches:
    batch["attention_mask"][:, 1, 12:] = False
    batch["input_ids"] *= batch["attention_mask"]
  params = []
  for mesh_shape, step_budget in (((1, 1), None), (shape, budget)):
    mesh = sharding.make_mesh(mesh_shape, ("data", "model"),
                              jax.devices()[:mesh_shape[0] * mesh_shape[1]])
    trainer = trainer_lib.build_trainer(
        lambda rngs: CrossEncoderRanker(model, rngs=rngs), config, mesh)
    state = trainer.init(0)
    initial = jax.device_get(jax.tree.leaves(state.params))
    for batch in batches:
      state, _ = trainer.train_step(state, trainer.put(batch), step_budget)
    params.append(jax.device_get(jax.tree.leaves(state.params)))
    assert max(np.abs(a - b).max() for a, b in zip(initial, params[-1])) > 0
  for one, sharded in zip(*params):
    np.testing.assert_allclose(sharded, one, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_train_every_regime_then_export_loads_in_transformers(tmp_path):
  """FirstP, MaxP, GoldP, BeST (joint step) and LongP train from a tiny
  ModernBERT classifier (1,024 positions); the export is a
  `ModernBertForSequenceClassification` whose logits transformers computes
  as best_jax does in float32, and close in float16 and bfloat16."""
  from best_jax import cli  # pylint: disable=import-outside-toplevel
  from best_jax.serve.reranker import Reranker  # pylint: disable=import-outside-toplevel
  import family_checkpoints as fc  # pylint: disable=import-outside-toplevel
  tokenizer = fc.tokenizer("bert")
  model = _torch_model(
      transformers.ModernBertForSequenceClassification, seed=5,
      **dict(classifier_pooling="mean", vocab_size=len(tokenizer),
             max_position_embeddings=1024, pad_token_id=0, cls_token_id=2,
             bos_token_id=2, sep_token_id=3, eos_token_id=3))
  directory, workdir = str(tmp_path / "ckpt"), str(tmp_path / "w")
  model.save_pretrained(directory)
  tokenizer.save_pretrained(directory)
  assert cli.main([
      "train", "--config", "configs/tiny_cpu.py", "--workdir", workdir,
      f"--config.ranker.checkpoint={directory}",
      "--config.ranker.tiny=False", "--config.ranker.overrides={}",
      "--config.regimes=['firstp','maxp','goldp','best','longp']",
      "--config.best.max_iterations=1", "--config.birch.enabled=False",
      "--config.train.num_steps=2", "--config.train.eval_every=2",
      "--config.train.patience=0", "--config.data.num_queries=16",
      "--config.data.num_docs=12", "--config.eval.depth=5"]) == 0
  with open(os.path.join(workdir, "metrics.json"), encoding="utf-8") as f:
    assert {"FirstP", "MaxP", "GoldP", "BeST-1", "LongP"} <= set(
        json.load(f)["dev_mrr"])
  out = str(tmp_path / "export")
  assert cli.main(["export", "--workdir", workdir, "--model", "best-1",
                   "--out", out]) == 0
  pairs = [("apple river", "The apple river of the stone."),
           ("music garden window", "Window forest engine. Music is the "
            "garden, the violin of a pirate?")]
  ours = Reranker.load(out).score_pairs(pairs)
  rows = transformers.AutoTokenizer.from_pretrained(out)(
      [q for q, _ in pairs], [t for _, t in pairs], padding=True,
      return_tensors="pt")
  for dtype in ("float32", "float16", "bfloat16"):
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(
        out, dtype=getattr(torch, dtype)).eval()
    assert type(loaded).__name__ == "ModernBertForSequenceClassification"
    with torch.no_grad():
      logits = loaded(input_ids=rows["input_ids"],
                      attention_mask=rows["attention_mask"]
                      ).logits[:, 0].float().numpy()
    assert np.isfinite(logits).all(), dtype
    bound = 1e-4 if dtype == "float32" else HALF_ERROR[dtype] * np.abs(
        ours).max()
    assert np.abs(logits - ours).max() <= bound, (dtype, logits, ours)


@pytest.mark.slow
def test_bi_encoder_trains_from_a_model_then_exports_as_one(tmp_path):
  """A `ModernBertModel` starts a bi-encoder (FirstP and BeST selected by
  the pretrained model); its export is a `ModernBertModel` whose mean
  hidden state is best_jax's embedding."""
  from best_jax import cli  # pylint: disable=import-outside-toplevel
  import family_checkpoints as fc  # pylint: disable=import-outside-toplevel
  tokenizer = fc.tokenizer("bert")
  model = _torch_model(
      transformers.ModernBertModel, seed=7,
      **dict(vocab_size=len(tokenizer), pad_token_id=0, cls_token_id=2,
             bos_token_id=2, sep_token_id=3, eos_token_id=3))
  directory, workdir = str(tmp_path / "ckpt"), str(tmp_path / "w")
  model.save_pretrained(directory)
  tokenizer.save_pretrained(directory)
  assert cli.main([
      "train", "--config", "configs/tiny_cpu.py", "--workdir", workdir,
      f"--config.ranker.checkpoint={directory}", "--config.ranker.kind=bi",
      "--config.ranker.tiny=False", "--config.ranker.overrides={}",
      "--config.regimes=['firstp','best']", "--config.best.theta0=pretrained",
      "--config.best.max_iterations=1", "--config.birch.enabled=False",
      "--config.train.num_steps=2", "--config.train.eval_every=2",
      "--config.train.patience=0", "--config.data.num_queries=16",
      "--config.data.num_docs=12", "--config.eval.depth=5"]) == 0
  out = str(tmp_path / "export")
  assert cli.main(["export", "--workdir", workdir, "--model", "firstp",
                   "--out", out]) == 0
  loaded = transformers.AutoModel.from_pretrained(out).eval()
  assert type(loaded).__name__ == "ModernBertModel"
  ids, mask = _pairs(seed=7)
  ids = np.where(mask, ids % len(tokenizer), 0)
  with torch.no_grad():
    hidden = loaded(input_ids=torch.tensor(ids, dtype=torch.long),
                    attention_mask=torch.tensor(mask.astype(np.int64))
                    ).last_hidden_state.numpy()
  mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
  ours = load_bi_encoder(out, similarity="dot").embed(jnp.asarray(ids),
                                                      jnp.asarray(mask))
  np.testing.assert_allclose(np.asarray(ours), mean, atol=1e-4, rtol=0)


def test_pairs_scored_as_transformers_scores_the_tokenizers_pairs(tmp_path):
  """A transformers ModernBERT classifier directory scores sentence pairs
  as it is (`Reranker`: best_jax's tokenization and packing) with the logits
  transformers gives the tokenizer's pairs (each within one row)."""
  from best_jax.serve.reranker import Reranker  # pylint: disable=import-outside-toplevel
  import family_checkpoints as fc  # pylint: disable=import-outside-toplevel
  tokenizer = fc.tokenizer("bert")
  model = _torch_model(
      transformers.ModernBertForSequenceClassification, seed=6,
      **dict(vocab_size=len(tokenizer), max_position_embeddings=1024,
             pad_token_id=0, cls_token_id=2, bos_token_id=2, sep_token_id=3,
             eos_token_id=3))
  model.save_pretrained(str(tmp_path))
  tokenizer.save_pretrained(str(tmp_path))
  pairs = [("apple river", "The apple river of the stone."),
           ("music garden window", "Window forest engine. Music is the "
            "garden, the violin of a pirate?"), ("cloud", "cloud " * 300)]
  ours = Reranker.load(str(tmp_path)).score_pairs(pairs)
  rows = tokenizer([q for q, _ in pairs], [t for _, t in pairs],
                   padding=True, return_tensors="pt")
  theirs = _torch_logits(model, rows["input_ids"].numpy(),
                         rows["attention_mask"].numpy().astype(bool))
  assert np.ptp(theirs) > 0.1
  np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
