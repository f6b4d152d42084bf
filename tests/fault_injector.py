"""Runs `best_jax` and sends itself a signal at a chosen point (tests only).

  python tests/fault_injector.py SIGNAL:POINT -- train --config ... --workdir W

SIGNAL is `sigkill` or `sigterm`; POINT is where the signal arrives:

  joint    inside BeST's joint iteration-1 training, at its third step
           (the one from step 2, also in a rerun that resumed at step 2)
  select   during the selection with BeST-1 (at its second scoring chunk)
  test     during the test scoring of the first model (second chunk)
  between  between stages, right after the FirstP stage was saved

Only the test harness is patched; the command that runs is the product's.
"""

import os
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from best_jax import cli
from best_jax.experiment import stages as stages_lib
from best_jax.select import selection
from best_jax.train import best as best_lib


def _send(name: str) -> None:
  print(f"fault_injector: {name}", flush=True)
  os.kill(os.getpid(), getattr(signal, name.upper()))


def _patch_joint(sig: str) -> None:
  build = best_lib.build_joint_step

  def patched(*args, **kwargs):
    step = build(*args, **kwargs)

    def at_third_step(states, batch, *tokens):
      if int(states[0].step) == 2:  # updates applied before this one
        _send(sig)
      return step(states, batch, *tokens)
    return at_third_step
  best_lib.build_joint_step = patched


def _patch_scoring(sig: str, prefix: str) -> None:
  score = selection.SegmentScorer.score
  done = [False]

  def patched(self, params, pairs, **kwargs):
    if done[0] or not kwargs.get("desc", "").startswith(prefix):
      return score(self, params, pairs, **kwargs)
    done[0] = True
    inner, calls = self._score_into, [0]

    def counted(*args):
      calls[0] += 1
      if calls[0] == 2:
        _send(sig)
      return inner(*args)
    self._score_into = counted
    try:
      return score(self, params, pairs, **kwargs)
    finally:
      self._score_into = inner
  selection.SegmentScorer.score = patched


def _patch_between(sig: str) -> None:
  train = stages_lib.Stages.train

  def patched(self, plan, like):
    stage = train(self, plan, like)
    if plan.name == "firstp":
      _send(sig)
    return stage
  stages_lib.Stages.train = patched


def main() -> int:
  spec, separator, *args = sys.argv[1:]
  assert separator == "--", "usage: SIGNAL:POINT -- best_jax arguments"
  sig, point = spec.split(":")
  if point == "joint":
    _patch_joint(sig)
  elif point == "select":
    _patch_scoring(sig, "select")
  elif point == "test":
    _patch_scoring(sig, "test")
  elif point == "between":
    _patch_between(sig)
  else:
    raise SystemExit(f"unknown point {point!r}")
  return cli.main(args)


if __name__ == "__main__":
  sys.exit(main())
