"""AdamW with linear warmup and linear decay, clipping, and a weight-decay mask.

BERT fine-tuning's optimizer: the learning rate rises linearly from 0 to its
peak over `warmup_steps` updates, then falls linearly to 0 at `total_steps`;
gradients are clipped to a global norm first; LayerNorm parameters and all
biases get no weight decay (selected by parameter path, since the attention
biases are 2-D).
"""

from __future__ import annotations

from typing import Any

import jax
import ml_collections
import optax

# A parameter whose path contains one of these names (lower case) is exempt
# from weight decay: LayerNorm scales and biases, and every bias.
NO_DECAY_NAMES = ("norm", "bias")


def learning_rate_schedule(peak: float, warmup_steps: int,
                           total_steps: int) -> optax.Schedule:
  """Linear warmup 0 → peak over `warmup_steps`, then linear decay to 0.

  The schedule is evaluated at the number of updates applied so far, so the
  first update (count 0) uses a learning rate of 0 when `warmup_steps > 0`,
  as in BERT and Hugging Face's `get_linear_schedule_with_warmup`.
  """
  if not 0 <= warmup_steps <= total_steps or total_steps <= 0:
    raise ValueError(f"need 0 <= warmup_steps ({warmup_steps}) <= "
                     f"total_steps ({total_steps}) and total_steps > 0")
  decay = optax.linear_schedule(peak, 0.0, total_steps - warmup_steps)
  if warmup_steps == 0:
    return decay
  warmup = optax.linear_schedule(0.0, peak, warmup_steps)
  return optax.join_schedules([warmup, decay], [warmup_steps])


def _path_names(path: tuple[Any, ...]) -> list[str]:
  names = []
  for key in path:
    name = getattr(key, "key", getattr(key, "name", getattr(key, "idx", key)))
    names.append(str(name).lower())
  return names


def weight_decay_mask(params: Any) -> Any:
  """A tree like `params`: True where weight decay applies.

  False for every parameter whose path names a LayerNorm (`...norm...`) or a
  bias; True for kernels and embedding tables.
  """
  def decays(path, _):
    names = _path_names(path)
    return not any(word in name for name in names for word in NO_DECAY_NAMES)
  return jax.tree.map_with_path(decays, params)


def make_optimizer(
    config: ml_collections.ConfigDict,
) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Clip-by-global-norm then AdamW; returns (transformation, lr schedule).

  Args:
    config: the `optimizer` section: learning_rate, warmup_steps, total_steps,
      b1, b2, eps, weight_decay, max_grad_norm (0 or less: no clipping).
  """
  schedule = learning_rate_schedule(config.learning_rate, config.warmup_steps,
                                    config.total_steps)
  adamw = optax.adamw(schedule, b1=config.b1, b2=config.b2, eps=config.eps,
                      weight_decay=config.weight_decay,
                      mask=weight_decay_mask)
  if config.max_grad_norm and config.max_grad_norm > 0:
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                       adamw), schedule
  return adamw, schedule
