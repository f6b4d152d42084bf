"""Tests of the Hugging Face weight import: parity with PyTorch BertModel."""

import os

import jax.numpy as jnp
import numpy as np
import pytest

from best_jax.errors import InputError
from best_jax.models import load_encoder, read_tensors
from reference_bert import (TINY_HF_CONFIG, bert_forward, random_hf_tensors,
                            write_checkpoint)

GOLDEN = os.path.join(os.path.dirname(__file__), "golden",
                      "minilm_l6_hidden.npz")


@pytest.fixture(scope="module")
def minilm(minilm_dir):
  return load_encoder(minilm_dir)


def test_minilm_equals_pytorch_golden_hidden_states(minilm):
  golden = np.load(GOLDEN)
  mask = golden["attention_mask"].astype(bool)
  assert (~mask).any(), "the golden batch must contain padding"
  hidden = np.asarray(minilm(jnp.asarray(golden["input_ids"]),
                             jnp.asarray(mask),
                             jnp.asarray(golden["token_type_ids"])))
  assert np.abs(hidden - golden["hidden"])[mask].max() <= 1e-4


def test_minilm_equals_live_pytorch(minilm, minilm_dir):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  rng = np.random.default_rng(0)
  ids = rng.integers(1000, 30000, (4, 40))
  ids[:, 0], ids[:, 10] = 101, 102
  mask = np.arange(40)[None] < np.array([[40], [25], [12], [1]])
  types = (np.arange(40)[None] > 10) & mask
  ids = np.where(mask, ids, 0)
  model = transformers.BertModel.from_pretrained(
      minilm_dir, add_pooling_layer=False).eval()
  with torch.no_grad():
    expected = model(input_ids=torch.tensor(ids),
                     attention_mask=torch.tensor(mask.astype(np.int64)),
                     token_type_ids=torch.tensor(types.astype(np.int64))
                     ).last_hidden_state.numpy()
  hidden = np.asarray(minilm(jnp.asarray(ids), jnp.asarray(mask),
                             jnp.asarray(types.astype(np.int32))))
  assert np.abs(hidden - expected)[mask].max() <= 1e-4


def test_bert_prefix_and_legacy_layer_norm_names(tmp_path):
  tensors = random_hf_tensors(TINY_HF_CONFIG, seed=2)
  renamed = {}
  for name, array in tensors.items():
    name = name.replace("LayerNorm.weight", "LayerNorm.gamma")
    renamed["bert." + name.replace("LayerNorm.bias", "LayerNorm.beta")] = array
  renamed["cls.predictions.bias"] = np.zeros(128, np.float32)
  encoder = load_encoder(write_checkpoint(str(tmp_path), TINY_HF_CONFIG,
                                          renamed))
  ids = np.array([[101, 5, 6, 102, 0]])
  mask = ids != 0
  types = np.zeros_like(ids)
  expected = bert_forward(tensors, TINY_HF_CONFIG, ids, mask, types)
  hidden = np.asarray(encoder(jnp.asarray(ids), jnp.asarray(mask),
                              jnp.asarray(types)))
  np.testing.assert_allclose(hidden[mask], expected[mask], atol=2e-5)


def test_missing_and_unexpected_tensors_are_listed(tmp_path):
  tensors = random_hf_tensors(TINY_HF_CONFIG)
  del tensors["encoder.layer.1.output.dense.bias"]
  tensors["encoder.layer.2.output.dense.bias"] = np.zeros(32, np.float32)
  directory = write_checkpoint(str(tmp_path), TINY_HF_CONFIG, tensors)
  with pytest.raises(InputError) as error:
    load_encoder(directory)
  message = str(error.value)
  assert "missing 1 tensors: encoder.layer.1.output.dense.bias" in message
  assert "unexpected 1 tensors: encoder.layer.2.output.dense.bias" in message
  assert "pooler" in message and directory in message


def test_shape_mismatch_is_an_input_error(tmp_path):
  tensors = random_hf_tensors(TINY_HF_CONFIG)
  tensors["encoder.layer.0.intermediate.dense.weight"] = np.zeros(
      (63, 32), np.float32)
  directory = write_checkpoint(str(tmp_path), TINY_HF_CONFIG, tensors)
  with pytest.raises(InputError, match="layers/0/intermediate/kernel"):
    load_encoder(directory)


def test_no_weights_file_is_an_input_error(tmp_path):
  write_checkpoint(str(tmp_path), TINY_HF_CONFIG, {})
  os.remove(tmp_path / "model.safetensors")
  with pytest.raises(InputError, match="no model.safetensors"):
    read_tensors(tmp_path)


def test_pytorch_pickle_is_read_only_safely(tmp_path, monkeypatch):
  directory = write_checkpoint(str(tmp_path), TINY_HF_CONFIG, {})
  os.remove(tmp_path / "model.safetensors")
  (tmp_path / "pytorch_model.bin").write_bytes(b"not a pickle")
  try:
    import torch  # noqa: F401
  except ImportError:
    with pytest.raises(InputError, match="torch is not installed"):
      read_tensors(directory)
  else:
    with pytest.raises(InputError, match="cannot read pytorch_model.bin"):
      read_tensors(directory)
