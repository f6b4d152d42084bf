"""Cross-validation folds: `{fold name: test qids}` from the common JSON layouts."""

from __future__ import annotations

import json
import os

from best_jax.data.files import read_text
from best_jax.errors import InputError


def read_folds(path: str | os.PathLike) -> dict[str, list[str]]:
  """Reads folds as `{name: {"train_qids", "predict": {"dev", "test"}}}`,
  `{name: {"test_qids": [...]}}` or `[[qids], ...]`.

  The first layout is capreolus's (`rob04_yang19_folds.json`,
  `rob04_huston14_*_folds.json`), the last Anserini's
  (`robust04-paper2-folds.json`); all give disjoint test folds.
  """
  try:
    raw = json.loads(read_text(path))
  except ValueError as e:
    raise InputError(f"not valid JSON: {e}", path) from None
  if isinstance(raw, dict):
    folds = {}
    for name, fold in raw.items():
      test = None
      if isinstance(fold, dict):
        test = fold.get("test_qids")
        if test is None and isinstance(fold.get("predict"), dict):
          test = fold["predict"].get("test")
      if not isinstance(test, list):
        raise InputError(f"fold {name!r} has no test queries", path)
      folds[str(name)] = [str(q) for q in test]
  elif isinstance(raw, list) and all(isinstance(f, list) for f in raw):
    folds = {f"fold{i + 1}": [str(q) for q in fold] for i, fold in enumerate(raw)}
  else:
    raise InputError("expected {name: {test_qids: [...]}} or [[qids], ...]",
                     path)
  seen = set()
  for name, qids in folds.items():
    if seen & set(qids):
      raise InputError(f"fold {name!r} shares queries with another fold", path)
    seen |= set(qids)
  if len(folds) < 2:
    raise InputError("need at least two folds", path)
  return folds
