"""Truncation models in Flax NNX: AttnCut, BiCut and Choppy.

Every model maps features `[B, N, F]` and a boolean mask `[B, N]` to logits:
  head "positions": `[B, N]`, a softmax over cut positions (AttnCut, Choppy);
  head "bicut": `[B, N, 2]`, per-position {continue, end-of-list} (BiCut,
    AttnCut-Bi);
  head "bins": `[B, N, B_bins]`, per-position ordered recall bins (the
    recall-constraint model).
Dropout is applied only when a `dropout_key` is passed (training).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

HEAD_WIDTH = {"positions": 1, "bicut": 2}


def _dropout(x, rate: float, key):
  if key is None or rate == 0.0:
    return x
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), 0.0)


class BiLSTM(nnx.Module):
  """Stacked bidirectional LSTM; right-padded lists are run to their length."""

  def __init__(self, in_features: int, hidden: int, layers: int, *,
               rngs: nnx.Rngs):
    self.hidden = hidden
    self.layers = nnx.List()
    for i in range(layers):
      width = in_features if i == 0 else 2 * hidden
      self.layers.append(nnx.Bidirectional(
          nnx.RNN(nnx.OptimizedLSTMCell(width, hidden, rngs=rngs), rngs=False),
          nnx.RNN(nnx.OptimizedLSTMCell(width, hidden, rngs=rngs), rngs=False),
          rngs=False))

  def __call__(self, x_bnf, mask_bn):
    lengths_b = jnp.sum(mask_bn, axis=-1).astype(jnp.int32)
    zeros = jnp.zeros((x_bnf.shape[0], self.hidden), x_bnf.dtype)
    carry = ((zeros, zeros), (zeros, zeros))  # (c, h) forward and backward
    for layer in self.layers:
      x_bnf = layer(x_bnf, seq_lengths=lengths_b, initial_carry=carry)
    return jnp.where(mask_bn[..., None], x_bnf, 0.0)


def _dot_product_attention(query, key, value, mask=None, **unused):
  """`jax.nn.dot_product_attention` (fused XLA path) with flax's signature."""
  del unused  # dropout arguments: attention dropout is not used
  return jax.nn.dot_product_attention(query, key, value, mask=mask)


def _attention(heads: int, d: int, rngs: nnx.Rngs) -> nnx.MultiHeadAttention:
  return nnx.MultiHeadAttention(heads, d, decode=False,
                                attention_fn=_dot_product_attention, rngs=rngs)


def _attention_mask(mask_bn):
  return jnp.logical_and(mask_bn[:, None, :, None], mask_bn[:, None, None, :])


class MLP(nnx.Module):
  """Dense → ReLU → dropout → Dense."""

  def __init__(self, in_features: int, hidden: int, out_features: int,
               dropout: float, *, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(in_features, hidden, rngs=rngs)
    self.out = nnx.Linear(hidden, out_features, rngs=rngs)
    self.dropout = dropout

  def __call__(self, x, dropout_key=None):
    return self.out(_dropout(jax.nn.relu(self.hidden(x)), self.dropout,
                             dropout_key))


def _squeeze_positions(logits, head: str):
  return logits[..., 0] if head == "positions" else logits


class AttnCut(nnx.Module):
  """2-layer BiLSTM → LayerNorm(MHA(H) + H) → MLP (Wu et al., AAAI 2021)."""

  def __init__(self, in_features: int, *, head: str = "positions",
               bins: int = 5, lstm_hidden: int = 128, lstm_layers: int = 2,
               heads: int = 4, mlp_hidden: int = 128, dropout: float = 0.2,
               rngs: nnx.Rngs):
    self.head = head
    d = 2 * lstm_hidden
    self.encoder = BiLSTM(in_features, lstm_hidden, lstm_layers, rngs=rngs)
    self.attention = _attention(heads, d, rngs)
    self.norm = nnx.LayerNorm(d, rngs=rngs)
    self.decision = MLP(d, mlp_hidden, HEAD_WIDTH.get(head, bins), dropout,
                        rngs=rngs)
    self.dropout = dropout

  def __call__(self, features_bnf, mask_bn, dropout_key=None):
    keys = (None, None) if dropout_key is None else jax.random.split(dropout_key)
    h = self.encoder(features_bnf, mask_bn)
    m = self.attention(h, mask=_attention_mask(mask_bn), deterministic=True)
    m = self.norm(_dropout(m, self.dropout, keys[0]) + h)
    return _squeeze_positions(self.decision(m, keys[1]), self.head)


class BiCut(nnx.Module):
  """BiLSTM with a per-position {continue, end} classifier (Lien et al. 2019)."""

  def __init__(self, in_features: int, *, lstm_hidden: int = 128,
               lstm_layers: int = 2, mlp_hidden: int = 128,
               dropout: float = 0.2, rngs: nnx.Rngs):
    self.head = "bicut"
    self.encoder = BiLSTM(in_features, lstm_hidden, lstm_layers, rngs=rngs)
    self.decision = MLP(2 * lstm_hidden, mlp_hidden, 2, dropout, rngs=rngs)

  def __call__(self, features_bnf, mask_bn, dropout_key=None):
    return self.decision(self.encoder(features_bnf, mask_bn), dropout_key)


class EncoderLayer(nnx.Module):
  """Post-LN Transformer encoder layer (attention and feed-forward)."""

  def __init__(self, d: int, heads: int, ffn: int, dropout: float, *,
               rngs: nnx.Rngs):
    self.attention = _attention(heads, d, rngs)
    self.norm1 = nnx.LayerNorm(d, rngs=rngs)
    self.ffn = MLP(d, ffn, d, dropout, rngs=rngs)
    self.norm2 = nnx.LayerNorm(d, rngs=rngs)
    self.dropout = dropout

  def __call__(self, x_bnd, mask_bn, dropout_key=None):
    keys = (None, None) if dropout_key is None else jax.random.split(dropout_key)
    a = self.attention(x_bnd, mask=_attention_mask(mask_bn), deterministic=True)
    x_bnd = self.norm1(x_bnd + _dropout(a, self.dropout, keys[0]))
    return self.norm2(x_bnd + self.ffn(x_bnd, keys[1]))


class Choppy(nnx.Module):
  """Scores ‖ learned position embedding (127) → 3 Transformer layers, 8 heads.

  Bahri et al. 2020; sees only the retrieval score (feature 0).
  """

  def __init__(self, in_features: int, *, depth: int, layers: int = 3,
               heads: int = 8, position_dim: int = 127, ffn: int = 128,
               dropout: float = 0.2, rngs: nnx.Rngs):
    del in_features
    self.head = "positions"
    d = position_dim + 1
    self.positions = nnx.Embed(depth, position_dim, rngs=rngs)
    self.layers = nnx.List([EncoderLayer(d, heads, ffn, dropout, rngs=rngs)
                            for _ in range(layers)])
    self.out = nnx.Linear(d, 1, rngs=rngs)

  def __call__(self, features_bnf, mask_bn, dropout_key=None):
    b, n, _ = features_bnf.shape
    table = self.positions(jnp.arange(n))
    position = jnp.broadcast_to(table, (b, n, table.shape[-1]))
    x = jnp.concatenate([features_bnf[..., :1], position], axis=-1)
    keys = [None] * len(self.layers) if dropout_key is None else list(
        jax.random.split(dropout_key, len(self.layers)))
    for layer, key in zip(self.layers, keys):
      x = layer(x, mask_bn, key)
    return self.out(x)[..., 0]


def cutoffs(logits, mask_bn, head: str):
  """1-based cut-offs from a model's logits (jittable).

  positions: argmax over real positions. bicut: the list ends before the first
  position whose end-of-list logit wins (at least 1 document; the whole list
  when none does).
  """
  length_b = jnp.sum(mask_bn, axis=-1)
  if head == "positions":
    return jnp.argmax(jnp.where(mask_bn, logits, -jnp.inf), axis=-1) + 1
  if head == "bicut":
    end_bn = jnp.logical_and(logits[..., 1] > logits[..., 0], mask_bn)
    first = jnp.argmax(end_bn, axis=-1)  # 0-based rank of the first end
    return jnp.where(jnp.any(end_bn, axis=-1), jnp.maximum(first, 1), length_b)
  raise ValueError(f"head {head!r} gives no cut-offs")


def build(name: str, in_features: int, depth: int, *, seed: int,
          head: str | None = None, bins: int = 5, dropout: float = 0.2,
          lstm_hidden: int = 128, heads: int = 4, choppy_position_dim: int = 127,
          choppy_heads: int = 8):
  """A model by name: `attncut`, `bicut` or `choppy` (paper sizes by default)."""
  rngs = nnx.Rngs(params=seed)
  if name == "attncut":
    return AttnCut(in_features, head=head or "positions", bins=bins,
                   lstm_hidden=lstm_hidden, heads=heads,
                   mlp_hidden=lstm_hidden, dropout=dropout, rngs=rngs)
  if name == "bicut":
    return BiCut(in_features, lstm_hidden=lstm_hidden, mlp_hidden=lstm_hidden,
                 dropout=dropout, rngs=rngs)
  if name == "choppy":
    return Choppy(in_features, depth=depth, heads=choppy_heads,
                  position_dim=choppy_position_dim,
                  ffn=choppy_position_dim + 1, dropout=dropout, rngs=rngs)
  raise ValueError(f"unknown truncation model {name!r}")
