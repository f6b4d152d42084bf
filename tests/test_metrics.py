"""The jnp ranking metrics: hand-computed values, rax, trec_eval parity."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rax

from best_jax.data import trec
from best_jax.evaluate import metrics, trec_eval
import padded_lists as lists

NEG_INF = -np.inf

# One list, hand-checked: ranked d0 (grade 0), d1 (2), d2 (1), d3 (0); u (1) is
# relevant but unretrieved (score -inf); the last item is padding (masked).
SCORES = jnp.array([3.0, 2.0, 1.0, 0.0, NEG_INF, 5.0])
LABELS = jnp.array([0, 2, 1, 0, 1, 2])
WHERE = jnp.array([True, True, True, True, True, False])
NUM_RELEVANT = 3  # d1, d2, u


def _kw(**kw):
  return dict(where=WHERE, **kw)


def test_precision_divides_by_k():
  assert metrics.precision(SCORES, LABELS, **_kw(k=2)) == pytest.approx(1 / 2)
  # Only 4 retrieved, but trec_eval's P_5 still divides by 5.
  assert metrics.precision(SCORES, LABELS, **_kw(k=5)) == pytest.approx(2 / 5)


def test_recall_counts_unretrieved_relevant():
  assert metrics.recall(SCORES, LABELS, **_kw(k=2)) == pytest.approx(1 / 3)
  assert metrics.recall(SCORES, LABELS, **_kw(k=3)) == pytest.approx(2 / 3)
  assert metrics.recall(SCORES, LABELS, **_kw()) == pytest.approx(2 / 3)


def test_average_precision_reciprocal_rank_rprec_f1():
  ap = (1 / 2 + 2 / 3) / NUM_RELEVANT
  assert metrics.average_precision(SCORES, LABELS, **_kw()) == pytest.approx(ap)
  assert metrics.average_precision(SCORES, LABELS, **_kw(k=2)) == pytest.approx(
      (1 / 2) / NUM_RELEVANT)
  assert metrics.reciprocal_rank(SCORES, LABELS, **_kw()) == pytest.approx(0.5)
  assert metrics.reciprocal_rank(SCORES, LABELS, **_kw(k=1)) == 0.0
  assert metrics.r_precision(SCORES, LABELS, where=WHERE) == pytest.approx(
      2 / 3)
  p, r = 1 / 2, 1 / 3
  assert metrics.f1(SCORES, LABELS, **_kw(k=2)) == pytest.approx(
      2 * p * r / (p + r))


def test_ndcg_linear_gain_and_ideal_over_all_judged():
  dcg3 = 2 / math.log2(3) + 1 / math.log2(4)
  ideal3 = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
  assert metrics.dcg(SCORES, LABELS, **_kw(k=3)) == pytest.approx(dcg3)
  assert metrics.ndcg(SCORES, LABELS, **_kw(k=3)) == pytest.approx(
      dcg3 / ideal3)
  assert metrics.ndcg(SCORES, LABELS, **_kw(k=1)) == 0.0
  # Negative grades are gains of 0 (trec_eval).
  negative = jnp.array([-1, 1])
  assert metrics.ndcg(jnp.array([2.0, 1.0]), negative) == pytest.approx(
      (1 / math.log2(3)) / 1.0)


def test_ties_keep_list_order():
  scores = jnp.array([1.0, 1.0, 1.0])
  assert metrics.reciprocal_rank(scores, jnp.array([0, 0, 1])) == (
      pytest.approx(1 / 3))
  assert metrics.reciprocal_rank(scores, jnp.array([1, 0, 0])) == 1.0


def test_fully_masked_and_no_relevant_lists_give_zero():
  scores = jnp.array([[1.0, 2.0], [1.0, 2.0]])
  labels = jnp.array([[1, 2], [0, 0]])
  where = jnp.array([[False, False], [True, True]])
  for fn in (metrics.ndcg, metrics.average_precision, metrics.reciprocal_rank,
             metrics.recall):
    values = fn(scores, labels, where=where)
    np.testing.assert_array_equal(values, [0.0, 0.0])
  for fn in (metrics.precision, metrics.f1):
    np.testing.assert_array_equal(fn(scores, labels, where=where, k=2), [0, 0])
  np.testing.assert_array_equal(
      metrics.r_precision(scores, labels, where=where), [0.0, 0.0])
  assert metrics.mean_over_lists(jnp.array([0.0, 0.5]),
                                 where.any(-1)) == pytest.approx(0.5)
  assert metrics.mean_over_lists(jnp.array([0.3]), jnp.array([False])) == 0.0


def test_per_list_cutoff_array_and_jit():
  scores = jnp.tile(SCORES, (3, 1))
  labels = jnp.tile(LABELS, (3, 1))
  where = jnp.tile(WHERE, (3, 1))
  k_b = jnp.array([1, 2, 3])

  @jax.jit
  def all_metrics(scores, labels, where, k):
    return (metrics.precision(scores, labels, where=where, k=k),
            metrics.ndcg(scores, labels, where=where, k=k))

  p_b, ndcg_b = all_metrics(scores, labels, where, k_b)
  np.testing.assert_allclose(p_b, [0.0, 1 / 2, 2 / 3], rtol=1e-6)
  for i, k in enumerate([1, 2, 3]):
    assert ndcg_b[i] == pytest.approx(
        float(metrics.ndcg(SCORES, LABELS, where=WHERE, k=k)), rel=1e-6)


def test_leading_batch_dims_and_per_list_k_match_one_list_at_a_time():
  rng = np.random.default_rng(3)
  scores = jnp.asarray(rng.normal(size=(2, 3, 7)))
  labels = jnp.asarray(rng.integers(0, 3, size=(2, 3, 7)))
  where = jnp.asarray(rng.random((2, 3, 7)) < 0.8)
  k = np.array([[1, 2, 3], [4, 5, 6]])
  for fn in (metrics.ndcg, metrics.precision, metrics.average_precision):
    values = fn(scores, labels, where=where, k=jnp.asarray(k))
    assert values.shape == (2, 3)
    for i, j in np.ndindex(2, 3):
      assert values[i, j] == pytest.approx(
          float(fn(scores[i, j], labels[i, j], where=where[i, j],
                   k=int(k[i, j]))), abs=1e-7)


def test_agrees_with_rax_where_conventions_match():
  rng = np.random.default_rng(0)
  scores = rng.normal(size=(16, 12))
  scores[:, -2] = NEG_INF  # unretrieved judged items
  labels = rng.integers(0, 3, size=(16, 12)).astype(np.float32)
  where = rng.random((16, 12)) < 0.85
  where[3] = False  # one fully masked list
  scores, labels, where = map(jnp.asarray, (scores, labels, where))

  @jax.jit
  def ours_and_rax(scores, labels, where):
    pairs = {}
    for k in (None, 1, 5):
      kw = dict(where=where)
      pairs[f"ndcg@{k}"] = (
          metrics.ndcg(scores, labels, k=k, **kw),
          rax.ndcg_metric(scores, labels, topn=k, gain_fn=lambda y: y,
                          reduce_fn=None, **kw))
      pairs[f"rr@{k}"] = (
          metrics.reciprocal_rank(scores, labels, k=k, **kw),
          rax.mrr_metric(scores, labels, topn=k, reduce_fn=None, **kw))
      pairs[f"recall@{k}"] = (
          metrics.recall(scores, labels, k=k, **kw),
          rax.recall_metric(scores, labels, topn=k, reduce_fn=None, **kw))
      pairs[f"ap@{k}"] = (
          metrics.average_precision(scores, labels, k=k, **kw),
          rax.ap_metric(scores, labels, topn=k, reduce_fn=None, **kw))
    return pairs

  for name, (ours, theirs) in ours_and_rax(scores, labels, where).items():
    np.testing.assert_allclose(ours, theirs, atol=1e-6, err_msg=name)
  assert float(metrics.ndcg(scores, labels, where=where, k=5)[0]) > 0


def test_order_of_items_does_not_matter_without_ties():
  rng = np.random.default_rng(1)
  scores = rng.normal(size=(4, 30))
  labels = rng.integers(0, 3, size=(4, 30))
  permutation = rng.permutation(30)
  for fn in (metrics.ndcg, metrics.average_precision, metrics.reciprocal_rank):
    np.testing.assert_allclose(
        fn(jnp.asarray(scores), jnp.asarray(labels), k=10),
        fn(jnp.asarray(scores[:, permutation]),
           jnp.asarray(labels[:, permutation]), k=10), rtol=1e-6)


# ----------------------------------------------------------- truncation

def test_truncation_dcg_plus_minus_one():
  labels = jnp.array([1, 0, 1, 0])
  expected = np.cumsum([1, -1 / math.log2(3), 1 / math.log2(4),
                        -1 / math.log2(5)])
  np.testing.assert_allclose(metrics.truncation_dcg_curve(labels), expected,
                             rtol=1e-6)
  np.testing.assert_allclose(
      metrics.truncation_dcg(jnp.tile(labels, (4, 1)), jnp.array([0, 1, 2, 4])),
      [0.0, expected[0], expected[1], expected[3]], rtol=1e-6)
  # -1 labels (SPEC's y) are non-relevant as well.
  np.testing.assert_allclose(
      metrics.truncation_dcg_curve(jnp.array([1, -1, 1, -1])), expected,
      rtol=1e-6)


def test_truncation_f1_recall_over_list():
  labels = jnp.array([1, 0, 1, 0])
  # R_list = 2: F1@k = 2·hits / (k + 2).
  expected = [2 / 3, 2 / 4, 4 / 5, 4 / 6]
  np.testing.assert_allclose(metrics.truncation_f1_curve(labels), expected,
                             rtol=1e-6)
  np.testing.assert_allclose(
      metrics.truncation_f1(jnp.tile(labels, (3, 1)), jnp.array([0, 3, 9])),
      [0.0, 4 / 5, 4 / 6], rtol=1e-6)
  # Padding: the curve carries the full list's value; no relevant gives 0.
  padded = jnp.array([[1, 0, 1, 0, 1, 1], [0, 0, 0, 0, 0, 0]])
  where = jnp.array([[True] * 4 + [False] * 2, [True, True] + [False] * 4])
  np.testing.assert_allclose(
      metrics.truncation_f1_curve(padded, where=where),
      [expected + [4 / 6, 4 / 6], [0.0] * 6], rtol=1e-6)
  np.testing.assert_allclose(
      metrics.truncation_dcg(padded, 6, where=where)[0],
      metrics.truncation_dcg(labels, 4), rtol=1e-6)


def test_truncation_f1_matches_brute_force():
  rng = np.random.default_rng(2)
  labels = rng.integers(0, 2, size=(5, 40))
  curve = np.asarray(metrics.truncation_f1_curve(jnp.asarray(labels)))
  for b in range(5):
    for k in range(1, 41):
      hits = labels[b, :k].sum()
      p, r = hits / k, hits / max(labels[b].sum(), 1)
      expected = 2 * p * r / (p + r) if p + r else 0.0
      assert curve[b, k - 1] == pytest.approx(expected, abs=1e-6)


# ---------------------------------------------------------- segment P@1

def test_segment_precision_at_1_masks_padding():
  scores_ds = jnp.array([[0.1, 0.9, 0.5], [0.2, 0.8, 0.3], [0.0, 0.0, 0.0]])
  gold_ds = jnp.array([[False, True, False], [False, True, False],
                       [True, False, False]])
  where_ds = jnp.array([[True, True, True], [True, False, True],
                        [False, False, False]])
  # Doc 1: the gold segment scores best but is padding: its best valid is 2.
  values = metrics.segment_precision_at_1(scores_ds, gold_ds, where=where_ds)
  np.testing.assert_array_equal(values, [1.0, 0.0, 0.0])
  assert metrics.mean_over_lists(values, where_ds.any(-1)) == 0.5
  np.testing.assert_array_equal(
      jax.jit(metrics.segment_precision_at_1)(scores_ds, gold_ds), [1, 1, 1])


# --------------------------------------- parity with the host evaluator

JNP_OF_TREC = {
    "ndcg_cut_10": lambda s, l, w: metrics.ndcg(s, l, where=w, k=10),
    "ndcg_cut_20": lambda s, l, w: metrics.ndcg(s, l, where=w, k=20),
    "ndcg": lambda s, l, w: metrics.ndcg(s, l, where=w),
    "map": lambda s, l, w: metrics.average_precision(s, l, where=w),
    "map_cut_100": lambda s, l, w: metrics.average_precision(s, l, where=w,
                                                             k=100),
    "recip_rank": lambda s, l, w: metrics.reciprocal_rank(s, l, where=w),
    "P_20": lambda s, l, w: metrics.precision(s, l, where=w, k=20),
    "recall_100": lambda s, l, w: metrics.recall(s, l, where=w, k=100),
    "Rprec": lambda s, l, w: metrics.r_precision(s, l, where=w),
}


@pytest.mark.parametrize("folder,run_file,qrels_file,depth", [
    ("robust04", "rob04_yang19_bm25rm3.top1000.run.gz",
     "qrels.robust2004.txt.gz", None),
    ("robust04", "rob04_yang19_bm25rm3.top1000.run.gz",
     "qrels.robust2004.txt.gz", 300),
    ("trec-dl-2019-doc", "msmarco-doctest2019-top100", "qrels.dl19-doc.txt",
     None),
])
def test_jnp_metrics_equal_host_evaluator_on_real_runs(shared, folder,
                                                       run_file, qrels_file,
                                                       depth):
  run = trec.read_run(shared(folder, run_file))
  qrels = trec.read_qrels(shared(folder, qrels_file))
  padded = lists.pad_run(run, qrels, depth=depth)
  if depth is not None:
    run = {q: dict(trec.ranked(scores)[:depth]) for q, scores in run.items()}
  means, per_query = trec_eval.evaluate(run, qrels, list(JNP_OF_TREC))
  assert padded.qids == list(per_query)
  assert padded.docids[0] == [d for d, _ in trec.ranked(run[padded.qids[0]])]
  all_values = jax.jit(lambda s, l, w: {n: fn(s, l, w) for n, fn in
                                        JNP_OF_TREC.items()})(
                                            padded.scores_ql, padded.labels_ql,
                                            padded.mask_ql)
  for name, values in all_values.items():
    values = np.asarray(values)
    expected = np.array([per_query[q][name] for q in padded.qids])
    np.testing.assert_allclose(values, expected, atol=1e-6, err_msg=name)
    assert float(metrics.mean_over_lists(values)) == pytest.approx(
        means[name], abs=1e-6)
