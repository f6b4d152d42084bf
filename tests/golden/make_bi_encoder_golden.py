"""Writes tests/golden/minilm_l6_embeddings.npz: sentence-transformers
all-MiniLM-L6-v2 embeddings computed with PyTorch.

The reference is what sentence-transformers does for this checkpoint
(modules.json: Transformer → Pooling(mean) → Normalize), spelled out with
`transformers.AutoModel`: tokenizer(padding, truncation at max_seq_length 256)
→ last hidden state → mean over the attention mask (clamped at 1e-9) →
`torch.nn.functional.normalize`. test_bi_encoder.py checks best_jax's
`BiEncoderRanker.embed` against it without torch. Rerun only when the
sentences below change:

  pip install torch==2.13.0   # reference only, never a requirement
  python tests/golden/make_bi_encoder_golden.py
"""

import os

import numpy as np

SENTENCES = [
    "Which team won the championship game in February?",
    "what causes the seasons on earth",
    "Denver Broncos The game was played at a stadium in the San Francisco "
    "Bay Area, and the league emphasised its golden anniversary with "
    "gold-themed initiatives and temporarily suspended the tradition of "
    "naming each game with Roman numerals.",
    "Seasons Earth's axis is tilted relative to its orbital plane, so the "
    "amount of sunlight each hemisphere receives changes over the year.",
    "ozone",
    "Teachers In most countries, formal teaching is carried out by paid "
    "professional teachers who hold a degree and a certificate in education.",
]
MAX_SEQ_LENGTH = 256  # sentence_bert_config.json of all-MiniLM-L6-v2.
OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "minilm_l6_embeddings.npz")


def reference_embeddings(checkpoint: str, batch: dict) -> np.ndarray:
  """Mean-pooled, L2-normalised embeddings of a tokenized batch (PyTorch)."""
  import torch
  import transformers
  model = transformers.AutoModel.from_pretrained(checkpoint).eval()
  inputs = {k: torch.tensor(np.asarray(v)) for k, v in batch.items()}
  with torch.no_grad():
    hidden = model(**inputs).last_hidden_state
  mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
  pooled = (hidden * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
  return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


def main() -> None:
  import torch
  import transformers

  from best_jax.models.pretrained import checkpoint_dir, load_tokenizer
  batch = load_tokenizer()(SENTENCES, padding=True, truncation=True,
                           max_length=MAX_SEQ_LENGTH, return_tensors="np")
  embeddings = reference_embeddings(checkpoint_dir(), batch)
  np.savez_compressed(
      OUTPUT,
      input_ids=batch["input_ids"].astype(np.int32),
      attention_mask=batch["attention_mask"].astype(np.int32),
      token_type_ids=batch["token_type_ids"].astype(np.int32),
      embeddings=embeddings.astype(np.float32),
      versions=np.array(f"torch {torch.__version__}, transformers "
                        f"{transformers.__version__}"))
  print(f"wrote {OUTPUT}: input shape {batch['input_ids'].shape}")


if __name__ == "__main__":
  main()
