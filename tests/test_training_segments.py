"""Every regime's training rows over a whole schedule of squad_longdoc (real
data, the product's own examples): GoldP's positives and negatives have the
same lengths, and no row holds text that inference does not score."""

import collections

import numpy as np
import pytest

from best_jax.config import load_config
from best_jax.data import prepare
from best_jax.experiment.examples import AllSegmentExamples, SegmentExamples
from best_jax.experiment.inputs import build_inputs
from best_jax.experiment.workdir import Workdir


@pytest.fixture(scope="module")
def squad_dir(tmp_path_factory):
  from conftest import shared_path  # pylint: disable=g-import-not-at-top
  out = tmp_path_factory.mktemp("squad_longdoc")
  prepare.prepare_squad_longdoc(shared_path("squad", "dev-v1.1.json"),
                                str(out), tfds=False, segment_stats=False)
  return str(out)


def _rows(example, family) -> list[list[tuple[int, ...]]]:
  """Each document's content tokens (title and body) in each of its valid
  rows, `[G][rows]`."""
  ids, mask = example["input_ids"], example["attention_mask"]
  if family == "bi":  # [CLS] content [SEP]
    keep = mask & (np.arange(ids.shape[-1]) > 0)
  else:  # [CLS] query [SEP] content [SEP]
    keep = example["token_type_ids"].astype(bool) & mask
  end = keep.shape[-1] - 1 - np.argmax(keep[..., ::-1], -1)
  np.put_along_axis(keep, end[..., None], False, -1)  # the final [SEP]
  valid = example["mask"]
  if ids.ndim == 2:
    ids, keep, valid = ids[:, None], keep[:, None], valid[:, None]
  return [[tuple(i[k]) for i, k, v in zip(ids_g, keep_g, valid_g) if v]
          for ids_g, keep_g, valid_g in zip(ids, keep, valid)]


@pytest.mark.parametrize("arg", ["runlocal", "cpu"])
def test_goldp_lengths_match_and_every_row_is_scored_text(arg, squad_dir,
                                                          minilm_dir,
                                                          tmp_path):
  del minilm_dir  # the tokenizer
  config = load_config(f"configs/squad_longdoc.py:{arg}",
                       [f"config.data.dir={squad_dir}"])
  inputs = build_inputs(config, Workdir(str(tmp_path)))
  family, groups = config.ranker.kind, [g for b in inputs.schedule for g in b]
  train, scored = inputs.train_segments, inputs.eval_segments
  docids = sorted({d for g in groups for d in g.docids})
  for d in docids:  # The training segments end where the scored span ends.
    assert train[d].spans_s2[-1, 1] == scored[d].spans_s2[-1, 1], d
  segments = {d: {tuple(t[m]) for t, m in zip(train[d].tokens_sl,
                                              train[d].mask_sl)}
              for d in docids}
  last = {(g.qid, d): train[d].count - 1 for g in groups for d in g.docids}
  builds = {regime: SegmentExamples(inputs, regime, seed=config.seed,
                                    family=family,
                                    selected=last if regime == "best" else None)
            for regime in ("firstp", "maxp_all", "goldp", "best")}
  builds["best joint step"] = AllSegmentExamples(inputs, family=family)
  lengths = collections.defaultdict(list)
  for regime, build in builds.items():
    for index, group in enumerate(groups):
      example = build(index, group)
      rows = _rows(example, family)
      for g, docid in enumerate(group.docids):
        assert all(row in segments[docid] for row in rows[g]), (regime, docid)
        if regime == "goldp":
          lengths["positive" if g == 0 else "negative"].append(len(rows[g][0]))
  content = inputs.segmenter.config.content_len
  pos, neg = (np.array(lengths[k]) for k in ("positive", "negative"))
  assert abs(pos.mean() / neg.mean() - 1) < 0.02, (pos.mean(), neg.mean())
  assert abs((pos == content).mean() - (neg == content).mean()) < 0.03
