"""The QDS-Transformer ranker: BERT with query-directed sparse attention.

SPEC §4 (Jiang et al., EMNLP Findings 2020). The encoder is the project's
NNX BERT (`best_jax.models.bert`) with its self-attention swapped for
`sparse_attention` (a ±`window` band plus global query and sentence-start
tokens); every parameter keeps the BERT's name and shape, so a Hugging Face
checkpoint loads unchanged except for the position table, which is extended
beyond 512 rows by copying it (Longformer's recipe, `extend_positions`).

Head (`QdsConfig.head`): "paper", `[CLS]` vector → dropout → Linear(d, d) +
tanh → dropout → Linear(d, 1), or "linear", `[CLS]` → dropout → Linear(d, 1)
(the cross-encoder's one layer), both random and in float32; the loss (BCE
with one sampled negative) is the training code's `sigmoid_cross_entropy`.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from best_jax.errors import InputError
from best_jax.models import sparse_attention as sa
from best_jax.models.bert import Embeddings, Layer, SelfAttention
from best_jax.models.bert_config import BertConfig
from best_jax.models.dropout import dropout
from best_jax.models.weights import load_encoder

ATTENTIONS = ("sparse", "dense")
HEADS = ("paper", "linear")


@dataclasses.dataclass(frozen=True)
class QdsConfig:
  """The attention pattern and head of a QDS-Transformer.

  Attributes:
    window: one-sided local window w: token i sees j when |i - j| <= w.
    pattern: which tokens are global, one of `sparse_attention.PATTERNS`.
    max_global: G, global slots per row; must cover `<s>` + query +
      sentence-start tokens (the input builder checks it).
    first_tokens: global leading tokens of the "longformer_qa" pattern.
    block_size: block length of the banded kernel (default: `window`).
    attention: "sparse" (the fast path) or "dense" (the masked reference,
      for tests and benchmarks; no attention dropout).
    head: "paper" (Linear(d, d) + tanh, then Linear(d, 1)) or "linear"
      (Linear(d, 1) alone, as `ranker.CrossEncoderRanker`).
    head_dropout: dropout before each of the head's linear layers.
    sentence_start_id: the `[S]` token id of the inputs
      (`QdsInputConfig.sentence_start_id`; `qds_inputs.sentence_start_id`
      gives `[unused0]`'s); lets the ranker find its global tokens from the
      three BERT inputs.
  """
  window: int = 64
  pattern: str = "qds"
  max_global: int = 320
  first_tokens: int = 64
  block_size: int | None = None
  attention: str = "sparse"
  head: str = "paper"
  head_dropout: float = 0.1
  sentence_start_id: int | None = None

  def __post_init__(self):
    if self.pattern not in sa.PATTERNS:
      raise InputError(f"unknown attention pattern {self.pattern!r}; choose "
                       f"one of {', '.join(sa.PATTERNS)}")
    if self.attention not in ATTENTIONS:
      raise InputError(f"unknown attention {self.attention!r}; choose one "
                       f"of {', '.join(ATTENTIONS)}")
    if self.head not in HEADS:
      raise InputError(f"unknown QDS head {self.head!r}; choose one of "
                       f"{', '.join(HEADS)}")
    if self.window < 0 or self.max_global < 0:
      raise InputError("window and max_global must be >= 0")


class QdsSelfAttention(SelfAttention):
  """The BERT's attention projections around the QDS attention pattern."""

  def __init__(self, config: BertConfig, qds: QdsConfig, *, rngs: nnx.Rngs):
    super().__init__(config, rngs=rngs)
    self.qds = qds

  def __call__(self, x_bld, mask_bl, global_bl, rngs=None) -> jax.Array:
    q_blhd = self.query(x_bld)
    k_blhd = self.key(x_bld)
    v_blhd = self.value(x_bld)
    if self.qds.attention == "dense":
      context_blhd = sa.dense_attention(q_blhd, k_blhd, v_blhd, mask_bl,
                                        global_bl, window=self.qds.window)
    else:
      context_blhd = sa.sparse_attention(
          q_blhd, k_blhd, v_blhd, mask_bl, global_bl,
          window=self.qds.window, max_global=self.qds.max_global,
          block_size=self.qds.block_size,
          dropout_rate=self.config.attention_dropout,
          dropout_rng=None if rngs is None else rngs.dropout())
    return self.output(context_blhd)


class QdsLayer(Layer):
  """A BERT layer (same parameters) whose attention takes global marks."""

  def __init__(self, config: BertConfig, qds: QdsConfig, *, rngs: nnx.Rngs):
    super().__init__(config, rngs=rngs)
    self.attention = QdsSelfAttention(config, qds, rngs=rngs)

  def __call__(self, x_bld, mask_bl, global_bl, rngs=None) -> jax.Array:
    rate = self.config.hidden_dropout
    attended_bld = dropout(self.attention(x_bld, mask_bl, global_bl, rngs),
                            rate, rngs)
    x_bld = self.attention_norm(x_bld + attended_bld)
    inner_blm = jax.nn.gelu(self.intermediate(x_bld), approximate=False)
    out_bld = dropout(self.output(inner_blm), rate, rngs)
    return self.output_norm(x_bld + out_bld)


class QdsEncoder(nnx.Module):
  """BERT with QDS attention: ids → hidden states `[batch, length, d]`.

  Parameter paths equal `BertEncoder`'s (embeddings/..., layers/i/...).
  """

  def __init__(self, config: BertConfig, qds: QdsConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.qds = qds
    self.embeddings = Embeddings(config, rngs=rngs)
    self.layers = nnx.List(
        [QdsLayer(config, qds, rngs=rngs) for _ in range(config.num_layers)])

  def __call__(self, input_ids: jax.Array, attention_mask: jax.Array,
               token_type_ids: jax.Array, global_mask: jax.Array, *,
               rngs: nnx.Rngs | None = None) -> jax.Array:
    """Encodes `[batch, length]` ids; `global_mask` marks global tokens."""
    mask_bl = attention_mask.astype(bool)
    global_bl = global_mask.astype(bool) & mask_bl
    x_bld = self.embeddings(input_ids, token_type_ids, rngs)
    for layer in self.layers:
      x_bld = layer(x_bld, mask_bl, global_bl, rngs)
    return x_bld


class QdsRanker(nnx.Module):
  """Scores QDS inputs of any leading shape `[..., length]` (float32)."""

  def __init__(self, config: BertConfig, qds: QdsConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.qds = qds
    self.encoder = QdsEncoder(config, qds, rngs=rngs)
    self.dense = (_head_linear(config.hidden_size, config, rngs)
                  if qds.head == "paper" else None)
    self.out = _head_linear(1, config, rngs)

  def __call__(self, input_ids: jax.Array, attention_mask: jax.Array,
               token_type_ids: jax.Array, query_mask: jax.Array | None = None,
               sentence_mask: jax.Array | None = None, *,
               rngs: nnx.Rngs | None = None) -> jax.Array:
    """Returns scores of shape `input_ids.shape[:-1]`.

    Called like `CrossEncoderRanker` (three inputs) when
    `qds.sentence_start_id` is set: the masks then come from `role_masks`.

    Args:
      input_ids: int `[..., length]`, from `segments.qds_inputs`.
      attention_mask: bool, true on real tokens.
      token_type_ids: int, 0 for `[CLS] query [SEP]`, 1 for the document.
      query_mask: bool, true on `[CLS] query [SEP]`.
      sentence_mask: bool, true on the sentence-start tokens.
      rngs: an `nnx.Rngs` with a `dropout` stream, for training only.
    """
    leading = input_ids.shape[:-1]
    length = input_ids.shape[-1]
    flat = lambda x: x.reshape(-1, length)  # noqa: E731
    mask_nl = flat(attention_mask).astype(bool)
    if query_mask is None or sentence_mask is None:
      if self.qds.sentence_start_id is None:
        raise InputError("QdsRanker needs query_mask and sentence_mask, or "
                         "QdsConfig.sentence_start_id to find them")
      query_mask, sentence_mask = role_masks(
          input_ids, attention_mask, token_type_ids,
          sentence_start_id=self.qds.sentence_start_id)
    global_nl = sa.global_positions(
        self.qds.pattern, mask_bl=mask_nl,
        query_bl=flat(query_mask).astype(bool),
        sentence_start_bl=flat(sentence_mask).astype(bool),
        first_tokens=self.qds.first_tokens)
    hidden_nld = self.encoder(flat(input_ids), mask_nl, flat(token_type_ids),
                              global_nl, rngs=rngs)
    rate = self.qds.head_dropout
    pooled_nd = dropout(hidden_nld[:, 0].astype(jnp.float32), rate, rngs)
    if self.dense is not None:
      pooled_nd = dropout(jnp.tanh(self.dense(pooled_nd)), rate, rngs)
    return self.out(pooled_nd)[:, 0].reshape(leading)


def role_masks(input_ids, attention_mask, token_type_ids, *,
               sentence_start_id: int):
  """`(query_mask, sentence_mask)` of QDS inputs from the BERT inputs.

  The query part is the type-0 prefix `[CLS] query [SEP]`; sentence starts
  are the type-1 tokens equal to `sentence_start_id`. Works on NumPy and JAX
  arrays alike.
  """
  mask = attention_mask.astype(bool)
  query_mask = mask & (token_type_ids == 0)
  sentence_mask = mask & (token_type_ids == 1) & (
      input_ids == sentence_start_id)
  return query_mask, sentence_mask


def extend_positions(table_pd: np.ndarray, length: int) -> np.ndarray:
  """Position table of `length` rows: the pretrained rows copied end to end.

  Longformer's recipe: row i of the new table is row `i mod P` of the old.
  """
  table_pd = np.asarray(table_pd)
  repeats = -(-length // table_pd.shape[0])
  return np.concatenate([table_pd] * repeats, axis=0)[:length]


def load_qds_ranker(checkpoint_dir: str | os.PathLike, qds: QdsConfig, *,
                    rngs: nnx.Rngs, max_positions: int = 2048,
                    dtype=jnp.float32, **overrides) -> QdsRanker:
  """A `QdsRanker` with a Hugging Face BERT checkpoint's encoder weights.

  The position table is extended to `max_positions` rows by copying; the
  head is random (from `rngs`).
  """
  encoder = load_encoder(checkpoint_dir, dtype=dtype, **overrides)
  config = dataclasses.replace(encoder.config,
                               max_position_embeddings=max_positions)
  ranker = QdsRanker(config, qds, rngs=rngs)
  state = nnx.state(encoder, nnx.Param)
  position = state["embeddings"]["position"]["embedding"]
  position.set_value(jnp.asarray(
      extend_positions(position.get_value(), max_positions),
      config.param_dtype))
  nnx.update(ranker.encoder, state)
  return ranker


def _head_linear(out_features: int, config: BertConfig,
                 rngs: nnx.Rngs) -> nnx.Linear:
  return nnx.Linear(
      config.hidden_size, out_features, dtype=jnp.float32,
      param_dtype=config.param_dtype,
      kernel_init=nnx.initializers.truncated_normal(0.02),
      kernel_metadata={"out_sharding": ("embed", None),
                       "eager_sharding": False},
      bias_metadata={"out_sharding": (None,), "eager_sharding": False},
      rngs=rngs)


