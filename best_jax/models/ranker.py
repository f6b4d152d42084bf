"""The cross-encoder ranker: an encoder, then a head on the first token.

The scorer of SPEC §1 (Dai & Callan 2019), shared by every method: one
float32 scalar per `[CLS] q [SEP] d [SEP]` row (or the family's pair
template). The head is `config.head` (`HEADS`), float32:

  linear  w · h + b              best_jax's own head (a random start)
  tanh    w · tanh(W h + c) + b  BERT's pooler and classifier; RoBERTa's
                                 and XLM-R's classification head
  gelu    w · gelu(W h + c) + b  ELECTRA's classification head

with `h` the first token's last hidden state, as transformers' sequence
classifiers compute it in evaluation. Kernels have logical axes ('embed',
None).

Heads run without dropout, in training too (dropout is the encoder's
only): transformers' classifiers drop the head's input in training (BERT
the pooled vector at `hidden_dropout_prob`, ELECTRA and RoBERTa `h` and the
dense layer's output at `classifier_dropout` or `hidden_dropout_prob`,
ModernBERT the normed vector at `classifier_dropout`), so fine-tuning here
differs from transformers' `Trainer` in that; scores (evaluation) are the
same.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from best_jax.models import families
from best_jax.models.bert_config import BertConfig
from best_jax.models.unpadding import TokenBudget

# The activation between a head's dense layer and its output (None: no
# dense layer).
HEADS = {"linear": None, "tanh": jnp.tanh,
         "gelu": functools.partial(jax.nn.gelu, approximate=False)}


def _head_linear(config: BertConfig, out_features: int,
                 rngs: nnx.Rngs) -> nnx.Linear:
  return nnx.Linear(
      config.hidden_size, out_features, dtype=jnp.float32,
      param_dtype=config.param_dtype,
      kernel_init=nnx.initializers.truncated_normal(0.02),
      kernel_metadata={"out_sharding": ("embed", None),
                       "eager_sharding": False},
      bias_metadata={"out_sharding": (None,), "eager_sharding": False},
      rngs=rngs)


class DenseHead(nnx.Module):
  """`out(activation(dense(h)))`: a pooler (or classification head's dense
  layer) and the one-output classifier; no dropout (the module
  docstring)."""

  def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
    self.activation = config.head
    self.dense = _head_linear(config, config.hidden_size, rngs)
    self.out = _head_linear(config, 1, rngs)

  def __call__(self, h_nd: jax.Array) -> jax.Array:
    return self.out(HEADS[self.activation](self.dense(h_nd)))


def score_head(config: BertConfig, *, rngs: nnx.Rngs) -> nnx.Module:
  """The float32 head first hidden state → score `[n, 1]`, randomly
  initialised: an `nnx.Linear` for `linear`, else a `DenseHead`."""
  if config.head not in HEADS:
    raise ValueError(f"head {config.head!r} is not one of {', '.join(HEADS)}")
  if HEADS[config.head] is None:
    return _head_linear(config, 1, rngs)
  return DenseHead(config, rngs=rngs)


class CrossEncoderRanker(nnx.Module):
  """Scores token sequences of any leading shape `[..., length]`."""

  def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
    self.config = config
    family = families.family(config.model_type)
    self.encoder = family.encoder(config, rngs)
    self.head = (family.head(config, rngs) if family.head
                 else score_head(config, rngs=rngs))

  def __call__(self, input_ids: jax.Array, attention_mask: jax.Array,
               token_type_ids: jax.Array, *,
               rngs: nnx.Rngs | None = None,
               budget: TokenBudget | None = None) -> jax.Array:
    """Returns float32 scores of shape `input_ids.shape[:-1]`.

    E.g. `[batch, length]` → `[batch]`, `[batch, group, length]` →
    `[batch, group]`. Dropout is active only if `rngs` is given. With a
    `budget` the rows are encoded unpadded (`models.unpadding`).
    """
    leading = input_ids.shape[:-1]
    length = input_ids.shape[-1]
    rows = (input_ids.reshape(-1, length), attention_mask.reshape(-1, length),
            token_type_ids.reshape(-1, length))
    if budget is None:
      cls_nd = self.encoder(*rows, rngs=rngs, first_only=True)
    else:
      cls_nd = self.encoder.first_unpadded(
          *(x.reshape(budget.units, -1, length) for x in rows),
          tokens=budget.tokens, rows=budget.rows, rngs=rngs)
    return self.head(cls_nd.astype(jnp.float32))[:, 0].reshape(leading)
