"""The cross-encoder ranker: BERT, then [CLS] through one linear layer.

The scorer of SPEC §1 (Dai & Callan 2019), shared by every method:
`score = w · h_[CLS] + b`, one float32 scalar per `[CLS] q [SEP] d [SEP]`.
The head's kernel has logical axes ('embed', None).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from best_jax.models.bert import BertEncoder
from best_jax.models.bert_config import BertConfig
from best_jax.models.unpadding import TokenBudget


def score_head(config: BertConfig, *, rngs: nnx.Rngs) -> nnx.Linear:
  """The float32 linear layer [CLS] vector → score, randomly initialised."""
  return nnx.Linear(
      config.hidden_size, 1, dtype=jnp.float32, param_dtype=config.param_dtype,
      kernel_init=nnx.initializers.truncated_normal(0.02),
      kernel_metadata={"out_sharding": ("embed", None),
                       "eager_sharding": False},
      bias_metadata={"out_sharding": (None,), "eager_sharding": False},
      rngs=rngs)


class CrossEncoderRanker(nnx.Module):
  """Scores token sequences of any leading shape `[..., length]`."""

  def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.encoder = BertEncoder(config, rngs=rngs)
    self.head = score_head(config, rngs=rngs)

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
