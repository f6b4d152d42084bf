"""QDS-Transformer: inputs, encoder, ranker, checkpoint loading (SPEC §4)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from best_jax.errors import InputError
from best_jax.models.bert import BertEncoder
from best_jax.models.bert_config import BertConfig
from best_jax.models.qds import (QdsConfig, QdsEncoder, QdsRanker,
                                 extend_positions, load_qds_ranker,
                                 role_masks)
from best_jax.segments.packing import SpecialTokens
from best_jax.segments.qds_inputs import (QdsInputConfig, build_qds_inputs,
                                          document_sentences)
from best_jax.segments.segmenter import TokenizedDocument
from best_jax.train.losses import masked_mean, sigmoid_cross_entropy

SPECIAL = SpecialTokens(cls_id=101, sep_id=102, pad_id=0)


def _document(title, tokens, starts):
  return TokenizedDocument(
      title_ids=np.asarray(title, np.int32),
      token_ids=np.asarray(tokens, np.int32),
      offsets_n2=np.zeros((len(tokens), 2), np.int32),
      sentence_starts=np.asarray(starts, np.int32))


def _queries(*queries, width=4):
  ids = np.zeros((len(queries), width), np.int32)
  mask = np.zeros((len(queries), width), bool)
  for i, q in enumerate(queries):
    ids[i, :len(q)], mask[i, :len(q)] = q, True
  return ids, mask


def test_inputs_by_hand():
  doc = _document([7, 8], range(10, 20), [0, 3, 7])
  empty = _document([], [], [])
  ids, mask = _queries([5, 6], [9])
  got = build_qds_inputs(ids, mask, [doc, empty],
                         config=QdsInputConfig(max_len=20, max_query_len=4),
                         special=SPECIAL)
  # The last sentence (17, 18, 19) is cut to fit before the closing [SEP].
  assert got["input_ids"][0].tolist() == [
      101, 5, 6, 102, 101, 7, 8, 101, 10, 11, 12, 101, 13, 14, 15, 16,
      101, 17, 18, 102]
  assert got["input_ids"][1].tolist() == [101, 9, 102, 102] + [0] * 16
  assert np.flatnonzero(got["sentence_mask"][0]).tolist() == [4, 7, 11, 16]
  assert np.flatnonzero(got["query_mask"][0]).tolist() == [0, 1, 2, 3]
  assert got["token_type_ids"][0].tolist() == [0] * 4 + [1] * 16
  assert got["token_type_ids"][1].tolist() == [0] * 3 + [1] + [0] * 16
  assert got["attention_mask"].sum(1).tolist() == [20, 4]
  assert got["num_sentences"].tolist() == [4, 0]
  assert not got["sentence_mask"][1].any()
  # The ranker recovers both masks from the three BERT inputs.
  query_mask, sentence_mask = role_masks(
      got["input_ids"], got["attention_mask"], got["token_type_ids"],
      sentence_start_id=SPECIAL.cls_id)
  np.testing.assert_array_equal(query_mask, got["query_mask"])
  np.testing.assert_array_equal(sentence_mask, got["sentence_mask"])


def test_inputs_sentence_cap_and_start_token():
  doc = _document([], range(10, 16), [0, 2, 4])  # No title: 3 sentences.
  assert [s.tolist() for s in document_sentences(doc)] == [
      [10, 11], [12, 13], [14, 15]]
  ids, mask = _queries([5])
  config = QdsInputConfig(max_len=16, max_query_len=2, max_sentences=2,
                          sentence_start_id=1)
  got = build_qds_inputs(ids, mask, [doc], config=config, special=SPECIAL)
  assert got["input_ids"][0, :10].tolist() == [101, 5, 102, 1, 10, 11, 1, 12,
                                               13, 102]
  assert config.max_global() == 2 + 2 + 2
  assert int(got["query_mask"].sum() + got["sentence_mask"].sum()) <= (
      config.max_global())
  with pytest.raises(InputError):
    build_qds_inputs(ids[:0], mask[:0], [doc], config=config, special=SPECIAL)
  with pytest.raises(InputError):
    QdsInputConfig(max_len=8, max_query_len=4)


def test_inputs_from_the_segmenter():
  from best_jax.segments import Segmenter, SegmenterConfig
  segmenter = Segmenter(SegmenterConfig(max_query_len=8))
  text = ("Paris is the capital of France. It has many museums. "
          "The Louvre is the largest one.")
  [document] = segmenter.tokenize([("Paris", text)])
  ids, mask = segmenter.tokenize_queries(["largest museum in paris"])
  got = build_qds_inputs(ids, mask, [document],
                         config=QdsInputConfig(max_len=64, max_query_len=8),
                         special=segmenter.special)
  assert got["num_sentences"].tolist() == [4]  # Title + 3 sentences.
  starts = np.flatnonzero(got["sentence_mask"][0])
  tokenizer = _tokenizer()
  pieces = [tokenizer.decode(got["input_ids"][0, a + 1:b])
            for a, b in zip(starts, list(starts[1:]) + [
                int(got["attention_mask"][0].sum()) - 1])]
  assert pieces == ["paris", "paris is the capital of france.",
                    "it has many museums.", "the louvre is the largest one."]


def test_rows_for_training_and_scoring():
  """`QdsRows`: a training example [G, L] (positive first) and scorer rows
  are `build_qds_inputs` of each (query, document), one row per document."""
  from best_jax.experiment.inputs import QueryStore
  from best_jax.experiment.qds import QdsRows
  from best_jax.experiment.regimes import Group
  from best_jax.segments import Segmenter, SegmenterConfig
  segmenter = Segmenter(SegmenterConfig(max_query_len=8))
  documents = {"p": ("Paris", "Paris is in France. It has museums."),
               "r": ("Rome", "Rome is in Italy. It has ruins. And pasta."),
               "b": ("Bonn", "Bonn is small.")}
  topics = {"q1": "museums in paris", "q2": "italian ruins"}
  queries = QueryStore.build(segmenter, topics)
  config = QdsInputConfig(max_len=32, max_query_len=8)
  rows = QdsRows(segmenter, documents, queries, config)
  example = rows.example(0, Group("q2", ("r", "p")))
  assert example["input_ids"].shape == (2, 32)
  assert example["labels"].tolist() == [1, 0]
  assert rows.num_segments("r") == 1 and rows.row_length("q2", "r", 0) == 32
  for qid, docid in (("q2", "r"), ("q1", "b")):
    row = rows.row(qid, docid, 0, 32)["input_ids"]
    ids, mask = queries.rows([qid])
    [document] = segmenter.tokenize([documents[docid]])
    want = build_qds_inputs(ids, mask, [document], config=config,
                            special=segmenter.special)
    np.testing.assert_array_equal(row, want["input_ids"][0])
  np.testing.assert_array_equal(example["input_ids"][0],
                                rows.row("q2", "r", 0, 32)["input_ids"])


def _tokenizer():
  from best_jax.models import pretrained
  return pretrained.load_tokenizer()


def _random_batch(config, batch, length, seed=0):
  rng = np.random.default_rng(seed)
  ids = jnp.asarray(rng.integers(1, config.vocab_size, (batch, length)))
  lengths = jnp.asarray([length] + [length * 2 // 3] * (batch - 1))
  mask = jnp.arange(length)[None] < lengths[:, None]
  pos = jnp.arange(length)
  query = jnp.broadcast_to(pos < 5, (batch, length))
  sentences = jnp.broadcast_to((pos >= 5) & (pos % 7 == 5), (batch, length))
  types = jnp.broadcast_to((pos >= 5).astype(jnp.int32), (batch, length))
  return dict(input_ids=ids, attention_mask=mask, token_type_ids=types,
              query_mask=query, sentence_mask=sentences)


def test_encoder_equals_bert_when_everything_is_local():
  config = BertConfig.tiny()
  bert = BertEncoder(config, rngs=nnx.Rngs(0))
  qds = QdsEncoder(config, QdsConfig(window=60, max_global=4),
                   rngs=nnx.Rngs(1))
  nnx.update(qds, nnx.state(bert, nnx.Param))
  b = _random_batch(config, 2, 50)
  mask = b["attention_mask"]
  expected = nnx.jit(lambda m, *a: m(*a))(bert, b["input_ids"], mask,
                                           b["token_type_ids"])
  got = nnx.jit(lambda m, *a: m(*a))(qds, b["input_ids"], mask,
                                     b["token_type_ids"], b["sentence_mask"])
  diff = jnp.where(mask[..., None], got - expected, 0)
  assert float(jnp.max(jnp.abs(diff))) < 1e-5


@pytest.mark.parametrize("pattern", ["qds", "longformer_qa"])
def test_ranker_sparse_equals_dense(pattern):
  config = BertConfig.tiny()
  qds = QdsConfig(window=4, max_global=16, pattern=pattern, first_tokens=6)
  sparse = QdsRanker(config, qds, rngs=nnx.Rngs(0))
  dense = QdsRanker(config, dataclasses.replace(qds, attention="dense"),
                    rngs=nnx.Rngs(0))
  b = _random_batch(config, 3, 45)

  def loss_and_grad(model):
    graphdef, params = nnx.split(model, nnx.Param)

    @jax.jit
    def fn(params):
      scores = nnx.merge(graphdef, params)(**b)
      return jnp.sum(scores * jnp.array([1.0, -2.0, 0.5])), scores
    return jax.value_and_grad(fn, has_aux=True)(params)

  (_, scores_s), grads_s = loss_and_grad(sparse)
  (_, scores_d), grads_d = loss_and_grad(dense)
  np.testing.assert_allclose(scores_s, scores_d, atol=1e-5)
  diffs = jax.tree.map(lambda a, c: jnp.max(jnp.abs(a - c)), grads_s, grads_d)
  assert max(float(x) for x in jax.tree.leaves(diffs)) < 1e-5


def test_ranker_shapes_patterns_and_dropout():
  config = BertConfig.tiny()
  b = _random_batch(config, 4, 40)
  grouped = {k: v.reshape(2, 2, 40) for k, v in b.items()}
  model = QdsRanker(config, QdsConfig(window=3, max_global=12),
                    rngs=nnx.Rngs(0))
  score = nnx.jit(lambda m, b, rngs=None: m(**b, rngs=rngs))
  scores = score(model, grouped)
  assert scores.shape == (2, 2) and scores.dtype == jnp.float32
  plain = score(model, b)
  np.testing.assert_allclose(scores.reshape(4), plain, atol=1e-6)
  # Called like CrossEncoderRanker: the masks come from the ids and types.
  derived = QdsRanker(config, QdsConfig(window=3, max_global=12,
                                        sentence_start_id=99),
                      rngs=nnx.Rngs(0))
  b3 = {k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
  ids = jnp.where(b["input_ids"] == 99, 98, b["input_ids"])
  b3["input_ids"] = jnp.where(b["sentence_mask"], 99, ids)
  with_masks = dict(b, input_ids=b3["input_ids"])
  np.testing.assert_allclose(score(derived, b3), score(model, with_masks),
                             atol=1e-6)
  with pytest.raises(InputError, match="sentence_start_id"):
    model(**b3)
  # The pattern matters: local-only attention gives other scores.
  local = QdsRanker(config, QdsConfig(window=3, max_global=12,
                                      pattern="local"), rngs=nnx.Rngs(0))
  assert float(jnp.max(jnp.abs(score(local, b) - plain))) > 1e-4
  # Dropout only with rngs; deterministic otherwise.
  np.testing.assert_array_equal(score(model, b), plain)
  dropped = score(model, b, nnx.Rngs(dropout=1))
  assert float(jnp.max(jnp.abs(dropped - plain))) > 1e-4


@pytest.mark.parametrize("head", ["paper", "linear"])
def test_bce_training_separates_positive_from_negative(head):
  """A few Adam steps on BCE (1 positive, 1 negative) learn a toy signal,
  with either head: the paper's two layers, or one linear layer alone."""
  config = BertConfig.tiny(hidden_dropout=0.0, attention_dropout=0.0)
  model = QdsRanker(config, QdsConfig(window=3, max_global=12, head=head,
                                      head_dropout=0.0), rngs=nnx.Rngs(0))
  head_shapes = {name: getattr(model, name).kernel.shape
                 for name in ("dense", "out") if getattr(model, name)}
  hidden = config.hidden_size
  assert head_shapes == ({"dense": (hidden, hidden), "out": (hidden, 1)}
                         if head == "paper" else {"out": (hidden, 1)})
  b = {k: v.reshape(2, 2, 40) for k, v in _random_batch(config, 4, 40).items()}
  # Positives (item 0) carry token 7 in the query.
  b["input_ids"] = b["input_ids"].at[:, 0, 1].set(7).at[:, 1, 1].set(8)
  labels = jnp.array([[1.0, 0.0], [1.0, 0.0]])
  graphdef, params = nnx.split(model, nnx.Param)
  tx = optax.adam(5e-3)
  opt_state = tx.init(params)

  def loss_fn(params):
    scores = nnx.merge(graphdef, params)(**b)
    result = sigmoid_cross_entropy(scores, labels)
    return masked_mean(result.loss, result.valid)

  @jax.jit
  def step(params, opt_state):
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  losses = []
  for _ in range(40):
    params, opt_state, loss = step(params, opt_state)
    losses.append(float(loss))
  assert losses[0] == pytest.approx(np.log(2), abs=0.05)
  assert losses[-1] < 0.1 < losses[0]


def test_unknown_head_is_refused():
  with pytest.raises(InputError, match="unknown QDS head 'mlp'"):
    QdsConfig(head="mlp")


def test_extend_positions_copies_rows():
  table = np.arange(12, dtype=np.float32).reshape(4, 3)
  got = extend_positions(table, 10)
  assert got.shape == (10, 3)
  np.testing.assert_array_equal(got[4:8], table)
  np.testing.assert_array_equal(got[8:], table[:2])


def test_load_qds_ranker_from_minilm():
  from best_jax.models import pretrained
  from best_jax.models.weights import load_encoder
  directory = pretrained.checkpoint_dir()
  ranker = load_qds_ranker(directory, QdsConfig(window=400, max_global=8),
                           rngs=nnx.Rngs(0), max_positions=1024)
  table = ranker.encoder.embeddings.position.embedding.get_value()
  assert table.shape == (1024, 384)
  np.testing.assert_array_equal(table[512:], table[:512])
  # With every token in the window, QDS attention is full attention: the
  # encoder equals the plain BERT on the same weights.
  bert = load_encoder(directory)
  b = _random_batch(bert.config, 1, 300)
  call = nnx.jit(lambda model, *args: model(*args))
  expected = call(bert, b["input_ids"], b["attention_mask"],
                  b["token_type_ids"])
  got = call(ranker.encoder, b["input_ids"], b["attention_mask"],
             b["token_type_ids"], b["sentence_mask"])
  assert float(jnp.max(jnp.abs(got - expected))) < 1e-4
  # Beyond 512 tokens it runs (the plain BERT would refuse).
  long = _random_batch(bert.config, 1, 700)
  scores = nnx.jit(lambda model, batch: model(**batch))(ranker, long)
  assert scores.shape == (1,) and bool(jnp.isfinite(scores[0]))


PROSE = ("The river rises in the northern hills and runs south past the old "
         "town. Its water turned the mills that made the town rich. Merchants "
         "built warehouses along the banks in the seventeenth century. A "
         "stone bridge replaced the ferry in 1740. The bridge still carries "
         "traffic today, although a bypass was opened in 1968. Floods "
         "damaged the lower streets several times. After the flood of 1953 "
         "the council raised the embankments. Today the riverside is a park "
         "with a market on Saturdays. ")


def test_sentence_start_token_is_a_reserved_entry():
  from best_jax.models import pretrained
  from best_jax.segments.qds_inputs import SENTENCE_START, sentence_start_id
  tokenizer = pretrained.load_tokenizer()
  start = sentence_start_id(tokenizer)
  assert SENTENCE_START == "[unused0]"
  assert start == tokenizer.convert_tokens_to_ids("[unused0]")
  assert start not in (tokenizer.cls_token_id, tokenizer.sep_token_id,
                       tokenizer.unk_token_id)
  # No text is tokenized into it.
  assert start not in tokenizer(PROSE + " [unused0] unused0")["input_ids"]
  with pytest.raises(InputError, match="not in the tokenizer's vocabulary"):
    sentence_start_id(tokenizer, "[no such token]")


def _marker_attention(encoder, batch, sentence_mask):
  """Per layer: attention mass (mean over heads) the pooled position 0 and
  the document's other tokens put on the sentence-start markers."""
  mask = jnp.asarray(batch["attention_mask"])
  x = encoder.embeddings(jnp.asarray(batch["input_ids"]),
                         jnp.asarray(batch["token_type_ids"]))
  words = (batch["attention_mask"] & (batch["token_type_ids"] == 1)
           & ~sentence_mask)
  pooled, others = [], []
  for layer in encoder.layers:
    q, k = layer.attention.query(x), layer.attention.key(x)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    logits = jnp.where(mask[:, None, None], logits, -1e9)
    probs = np.asarray(jax.nn.softmax(logits, -1).mean(1))
    on_markers = (probs * sentence_mask[:, None, :]).sum(-1)
    pooled.append(float(on_markers[:, 0].mean()))
    others.append(float((on_markers * words).sum() / words.sum()))
    x = layer(x, mask)
  return np.asarray(pooled), np.asarray(others)


def test_default_sentence_markers_are_not_attention_sinks():
  """Pretrained MiniLM on a 512-token QDS row of prose: `[CLS]` markers
  (the old default) take most of the pooled token's attention in the middle
  layers and a large share of every word's; `[unused0]` markers do not."""
  from best_jax.models import pretrained
  from best_jax.models.weights import load_encoder
  from best_jax.segments.config import SegmenterConfig
  from best_jax.segments.qds_inputs import sentence_start_id
  from best_jax.segments.segmenter import Segmenter
  tokenizer = pretrained.load_tokenizer()
  segmenter = Segmenter(SegmenterConfig(), tokenizer=tokenizer)
  (document,) = segmenter.tokenize([("Riverside", PROSE * 6)])
  ids_nq, mask_nq = segmenter.tokenize_queries(
      ["when was the stone bridge built"])
  encoder = load_encoder(pretrained.checkpoint_dir())
  shares = {}
  for name, start in (("cls", None), ("default",
                                      sentence_start_id(tokenizer))):
    config = QdsInputConfig(max_len=512, max_sentences=64,
                            sentence_start_id=start)
    batch = build_qds_inputs(ids_nq, mask_nq, [document], config=config,
                             special=segmenter.special)
    assert batch["sentence_mask"].sum() >= 30
    shares[name] = _marker_attention(encoder, batch, batch["sentence_mask"])
  cls_pooled, cls_words = shares["cls"]
  pooled, words = shares["default"]
  print("[CLS] markers:", cls_pooled.round(2), cls_words.round(2))
  print("default markers:", pooled.round(2), words.round(2))
  # Layers 3-5, where MiniLM's [CLS] is its own sink in plain rows.
  assert cls_pooled[2:5].min() > 0.5 and cls_words[2:5].min() > 0.3
  assert pooled[2:5].max() < 0.15 and words[2:5].max() < 0.2
