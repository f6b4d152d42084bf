"""Tests of the bi-encoder: parity with sentence-transformers' embeddings,
pooling, similarity, padding and the weight import."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from best_jax.errors import InputError
from best_jax.models import BertConfig, load_encoder
from best_jax.models.bi_encoder import (BiEncoderRanker, load_bi_encoder,
                                        text_inputs)
from best_jax.models.pretrained import load_tokenizer
from best_jax.segments import SpecialTokens
from reference_bert import (TINY_HF_CONFIG, bert_forward, random_hf_tensors,
                            write_checkpoint)

GOLDEN = os.path.join(os.path.dirname(__file__), "golden",
                      "minilm_l6_embeddings.npz")


@pytest.fixture(scope="module")
def minilm(minilm_dir):
  return load_bi_encoder(minilm_dir)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
  tensors = random_hf_tensors(TINY_HF_CONFIG, seed=3)
  directory = str(tmp_path_factory.mktemp("tiny_bi"))
  return write_checkpoint(directory, TINY_HF_CONFIG, tensors), tensors


def _embed(model, batch):
  return np.asarray(model.embed(jnp.asarray(batch["input_ids"]),
                                jnp.asarray(batch["attention_mask"]),
                                jnp.asarray(batch["token_type_ids"])))


def test_minilm_equals_sentence_transformers_golden_embeddings(minilm):
  golden = np.load(GOLDEN)
  assert (golden["attention_mask"] == 0).any(), "the batch must have padding"
  embeddings = _embed(minilm, golden)
  assert embeddings.shape == golden["embeddings"].shape
  assert np.abs(embeddings - golden["embeddings"]).max() <= 1e-5
  np.testing.assert_allclose(np.linalg.norm(embeddings, axis=-1), 1.0,
                             atol=1e-6)


def test_minilm_equals_live_pytorch_mean_pooling(minilm, minilm_dir):
  pytest.importorskip("torch")
  from golden.make_bi_encoder_golden import reference_embeddings
  texts = ["How many people live in the city?",
           "The city had a population of about 2.1 million in 2016, "
           "making it the most populous in the country.",
           "Photosynthesis converts light energy into chemical energy "
           "stored in glucose. " * 3, "a"]
  batch = load_tokenizer()(texts, padding=True, truncation=True,
                           max_length=256, return_tensors="np")
  expected = reference_embeddings(minilm_dir, batch)
  assert np.abs(_embed(minilm, batch) - expected).max() <= 1e-5


def test_mean_pooling_matches_numpy_reference(tiny_checkpoint):
  directory, tensors = tiny_checkpoint
  ids = np.array([[101, 5, 6, 7, 102, 0, 0], [101, 9, 102, 0, 0, 0, 0]])
  mask = ids != 0
  types = np.zeros_like(ids)
  hidden = bert_forward(tensors, TINY_HF_CONFIG, ids, mask, types)
  mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
  for similarity, expected in (
      ("dot", mean),
      ("cosine", mean / np.linalg.norm(mean, axis=-1, keepdims=True))):
    model = load_bi_encoder(directory, similarity=similarity)
    got = np.asarray(model.embed(jnp.asarray(ids), jnp.asarray(mask)))
    np.testing.assert_allclose(got, expected, atol=2e-5)


def test_scores_pair_each_query_with_its_own_segments(tiny_checkpoint):
  directory, _ = tiny_checkpoint
  rng = np.random.default_rng(0)
  query = {"input_ids": jnp.asarray(rng.integers(1, 128, (2, 5))),
           "attention_mask": jnp.ones((2, 5), bool)}
  ids_bsl = rng.integers(1, 128, (2, 3, 6))
  mask_bsl = np.arange(6)[None, None] < np.array([[6, 2, 0], [4, 6, 1]])[..., None]
  segments = {"input_ids": jnp.asarray(ids_bsl),
              "attention_mask": jnp.asarray(mask_bsl)}
  for similarity, scale in (("cosine", 20.0), ("cosine", 1.0), ("dot", 5.0)):
    model = load_bi_encoder(directory, similarity=similarity, scale=scale)
    scores_bs = np.asarray(model(query, segments))
    q_bh = np.asarray(model.embed(query["input_ids"], query["attention_mask"]))
    s_bsh = np.asarray(model.embed(segments["input_ids"],
                                   segments["attention_mask"]))
    expected = np.einsum("bh,bsh->bs", q_bh, s_bsh)
    if similarity == "cosine":
      expected = scale * expected
    assert scores_bs.shape == (2, 3)
    np.testing.assert_allclose(scores_bs, expected, rtol=1e-5, atol=1e-5)
    # The padding segment embeds to zeros and scores 0, never NaN.
    assert np.all(s_bsh[0, 2] == 0.0) and scores_bs[0, 2] == 0.0


def test_padding_length_and_content_do_not_change_embeddings(minilm):
  batch = load_tokenizer()(["who wrote hamlet", "a much longer sentence "
                            "about the plays of William Shakespeare"],
                           padding=True, return_tensors="np")
  longer = {k: np.pad(v, ((0, 0), (0, 9))) for k, v in batch.items()}
  longer["input_ids"] = np.where(longer["attention_mask"] == 1,
                                 longer["input_ids"], 1037)
  np.testing.assert_allclose(_embed(minilm, batch), _embed(minilm, longer),
                             atol=1e-6)


def test_gradients_are_finite_with_fully_padded_rows(tiny_checkpoint):
  model = load_bi_encoder(tiny_checkpoint[0])
  graphdef, params = nnx.split(model)
  ids = jnp.array([[101, 5, 102], [0, 0, 0]])
  mask = ids != 0

  def loss(params):
    m = nnx.merge(graphdef, params)
    emb = m.embed(ids, mask)
    return jnp.sum(m.score(emb[:1], emb[None]))

  grads = jax.grad(loss)(params)
  assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))


def test_all_parameters_are_the_encoders(tiny_checkpoint):
  directory, _ = tiny_checkpoint
  model = load_bi_encoder(directory)
  encoder = load_encoder(directory)
  flat = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
  expected = dict(nnx.to_flat_state(nnx.state(encoder, nnx.Param)))
  assert set(flat) == {("encoder",) + path for path in expected}
  for path, variable in expected.items():
    np.testing.assert_array_equal(flat[("encoder",) + path].get_value(),
                                  variable.get_value())
    assert (nnx.get_partition_spec(flat[("encoder",) + path])
            == nnx.get_partition_spec(variable))
  # Nothing but parameters: the train steps carry params only.
  _, _, rest = nnx.split(model, nnx.Param, ...)
  assert not jax.tree.leaves(rest)


def test_unknown_similarity_is_an_input_error():
  with pytest.raises(InputError, match="similarity"):
    BiEncoderRanker(BertConfig.tiny(), similarity="l2", rngs=nnx.Rngs(0))


def test_text_inputs_equal_the_tokenizers_rows(minilm_dir):
  tokenizer = load_tokenizer()
  special = SpecialTokens.from_tokenizer(tokenizer)
  texts = ["what is a dog", "Stratospheric ozone absorbs ultraviolet light.",
           ""]
  encoded = [tokenizer(t, add_special_tokens=False)["input_ids"]
             for t in texts]
  width = max(map(len, encoded))
  tokens = np.zeros((3, width), np.int32)
  mask = np.zeros((3, width), bool)
  for i, ids in enumerate(encoded):
    tokens[i, :len(ids)], mask[i, :len(ids)] = ids, True
  got = text_inputs(tokens, mask, max_len=12, special=special)
  expected = tokenizer(texts[:2], padding="max_length", max_length=12,
                       truncation=True, return_tensors="np")
  np.testing.assert_array_equal(got["input_ids"][:2], expected["input_ids"])
  np.testing.assert_array_equal(got["attention_mask"][:2],
                                expected["attention_mask"].astype(bool))
  assert not got["attention_mask"][2].any()  # No content: a padding row.
  assert not got["token_type_ids"].any()
  cut = text_inputs(tokens, mask, max_len=5, special=special)
  expected = tokenizer(texts[:2], padding="max_length", max_length=5,
                       truncation=True, return_tensors="np")
  np.testing.assert_array_equal(cut["input_ids"][:2], expected["input_ids"])
