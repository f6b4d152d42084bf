"""`experiment.evaluation.DevScores`: each model's dev scores are computed
once and shared by model selection and the interpolation's dev runs."""

import types

import jax.numpy as jnp
import numpy as np

from best_jax.experiment.evaluation import DevScores


class CountingScorer:
  """Scores segment j of a pair as `sum(params) - j`; counts its calls."""

  def __init__(self):
    self.calls = []

  def score(self, params, pairs, *, desc, max_segments):
    del desc
    self.calls.append(max_segments)
    width = max_segments or 3
    base = float(sum(jnp.sum(v) for v in params.values()))
    scores = {p: base - np.arange(width) - i for i, p in enumerate(pairs)}
    return types.SimpleNamespace(host=lambda: scores)


def test_each_model_is_scored_once():
  inputs = types.SimpleNamespace(
      candidates={"dev": {"q1": ["a", "b"], "q2": ["c"]}},
      data=types.SimpleNamespace(splits={"dev": types.SimpleNamespace(
          qrels={"q1": {"b": 1}, "q2": {"c": 1}})}))
  dev = DevScores(inputs)
  scorer = CountingScorer()
  model = {"w": jnp.ones(3)}
  evaluate = dev.evaluator(scorer, ("first", "max"))
  assert evaluate(model) == {"first": 0.75, "max": 0.75}
  assert evaluate({"w": jnp.ones(3)}) == evaluate(model)  # equal values
  run = dev.run(scorer, {"w": jnp.ones(3)}, "first")
  assert run["q1"]["a"] == 3.0 and run["q2"]["c"] == 1.0
  assert scorer.calls == [None]  # one scoring, all segments
  dev.run(scorer, {"w": jnp.zeros(3)}, "first")  # another model
  dev.evaluator(scorer, ("first",))({"w": jnp.full(3, 2.0)})
  assert scorer.calls == [None, 1, 1]
