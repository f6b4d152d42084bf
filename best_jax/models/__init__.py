"""The Flax NNX BERT encoder, rankers, and Hugging Face weight import."""

from best_jax.models.bert import BertEncoder
from best_jax.models.bert_config import BertConfig
from best_jax.models.bi_encoder import BiEncoderRanker, load_bi_encoder
from best_jax.models.ranker import CrossEncoderRanker, score_head
from best_jax.models import families
from best_jax.models.weights import load_encoder, load_ranker, read_tensors

__all__ = [
    "BertConfig",
    "BertEncoder",
    "CrossEncoderRanker",
    "load_encoder",
    "load_ranker",
    "read_tensors",
    "score_head",
]
