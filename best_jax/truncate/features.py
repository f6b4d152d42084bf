"""Per-rank features x_n of the ranked lists (AttnCut's `[r_n ‖ s_n]`).

Score-derived features are always present. Document statistics (length,
unique tokens) and neighbour similarities (tf-idf and doc2vec cosine to the
documents at ranks n−1 and n+1, via gensim) are added when document texts are
given (`corpus_texts`: a corpus file as `rerank` reads it). Robust04 has no
texts here, so its models see score features only.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from gensim import corpora, matutils, models
from gensim.models import doc2vec

from best_jax.data.corpus import read_ranked_documents

SCORE_FEATURES = ("score", "score_z_in_list", "score_minmax_in_list",
                  "gap_to_previous", "gap_to_next", "rank_fraction")
TEXT_FEATURES = ("log_length", "log_unique_tokens", "tfidf_neighbour_cosine",
                 "doc2vec_neighbour_cosine")


def score_features(scores_qn: np.ndarray, mask_qn: np.ndarray,
                   score_mean: float | None = None,
                   score_std: float | None = None) -> np.ndarray:
  """Float32 `[Q, N, 6]` features from the retrieval scores; 0 where padded.

  `score` is standardised with `score_mean`/`score_std` (by default those of
  all real entries given, which uses no labels); the others are per list: the
  z-score and min-max scaled score, the z-score gaps to the previous and next
  rank (0 at the ends) and the rank as a fraction of the list depth.
  """
  scores = np.asarray(scores_qn, np.float64)
  mask = np.asarray(mask_qn, bool)
  real = scores[mask]
  mean = float(real.mean()) if score_mean is None else score_mean
  std = float(real.std()) if score_std is None else score_std
  count = np.maximum(mask.sum(axis=1, keepdims=True), 1)
  list_mean = np.where(mask, scores, 0.0).sum(axis=1, keepdims=True) / count
  list_var = np.where(mask, (scores - list_mean) ** 2, 0.0).sum(
      axis=1, keepdims=True) / count
  z = (scores - list_mean) / np.maximum(np.sqrt(list_var), 1e-6)
  high = np.where(mask, scores, -np.inf).max(axis=1, keepdims=True)
  low = np.where(mask, scores, np.inf).min(axis=1, keepdims=True)
  minmax = (scores - low) / np.maximum(high - low, 1e-6)
  z = np.where(mask, z, 0.0)
  previous = np.concatenate([z[:, :1], z[:, :-1]], axis=1)
  following = np.concatenate([z[:, 1:], z[:, -1:]], axis=1)
  following_mask = np.concatenate([mask[:, 1:], np.zeros_like(mask[:, :1])], 1)
  gap_previous = previous - z
  gap_next = np.where(following_mask, z - following, 0.0)
  n = scores.shape[1]
  rank = np.broadcast_to(np.arange(1, n + 1) / n, scores.shape)
  features = np.stack([(scores - mean) / max(std, 1e-6), z, minmax,
                       gap_previous, gap_next, rank], axis=-1)
  return np.where(mask[..., None], features, 0.0).astype(np.float32)


def text_features(docids: list[list[str]], texts: Mapping[str, str],
                  depth: int, doc2vec_size: int = 50, doc2vec_epochs: int = 10,
                  seed: int = 0) -> np.ndarray:
  """Float32 `[Q, N, 4]` document statistics and neighbour similarities.

  tf-idf and doc2vec are fitted with gensim on the documents of the lists
  (the paper fits them on the whole corpus). Missing texts count as empty.
  """
  unique = sorted({d for ranking in docids for d in ranking})
  tokens = {d: texts.get(d, "").lower().split() for d in unique}
  dictionary = corpora.Dictionary(tokens[d] for d in unique)
  tfidf = models.TfidfModel(dictionary=dictionary)
  tfidf_vectors = {d: tfidf[dictionary.doc2bow(tokens[d])] for d in unique}
  tagged = [doc2vec.TaggedDocument(tokens[d], [i]) for i, d in enumerate(unique)]
  d2v = doc2vec.Doc2Vec(tagged, vector_size=doc2vec_size, min_count=1,
                        epochs=doc2vec_epochs, seed=seed, workers=1)
  embedding = {d: d2v.dv[i] for i, d in enumerate(unique)}

  def cosine(a, b):
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norm) if norm > 0 else 0.0

  features = np.zeros((len(docids), depth, len(TEXT_FEATURES)), np.float32)
  for q, ranking in enumerate(docids):
    for n, d in enumerate(ranking[:depth]):
      neighbours = [ranking[m] for m in (n - 1, n + 1) if 0 <= m < len(ranking)]
      tfidf_sim = [matutils.cossim(tfidf_vectors[d], tfidf_vectors[m])
                   for m in neighbours]
      d2v_sim = [cosine(embedding[d], embedding[m]) for m in neighbours]
      features[q, n] = (np.log1p(len(tokens[d])),
                        np.log1p(len(set(tokens[d]))),
                        np.mean(tfidf_sim) if tfidf_sim else 0.0,
                        np.mean(d2v_sim) if d2v_sim else 0.0)
  return features


def corpus_texts(corpus: str, docids: list[list[str]], run_path: str
                 ) -> dict[str, str]:
  """`title text` of every ranked document from a corpus file or id.

  A document the corpus lacks is an `InputError` naming the run's line.
  """
  needed = {d for ranking in docids for d in ranking}
  documents = read_ranked_documents(corpus, needed, run_path)
  return {d: f"{title} {text}".strip()
          for d, (title, text) in documents.items()}


def list_features(scores_qn: np.ndarray, mask_qn: np.ndarray,
                  docids: list[list[str]] | None = None,
                  texts: Mapping[str, str] | None = None) -> np.ndarray:
  """Score features, plus text features when `texts` are given."""
  features = score_features(scores_qn, mask_qn)
  if texts:
    extra = text_features(docids, texts, scores_qn.shape[1])
    features = np.concatenate([features, extra], axis=-1)
  return features
