"""Writes tests/golden/minilm_l6_hidden.npz: PyTorch BertModel hidden states.

Three padded query–passage pairs through `transformers.BertModel` (PyTorch,
float32) with the MiniLM-L6 weights; test_weights.py checks best_jax against
them without torch. Rerun only when the inputs below change:

  pip install torch==2.13.0   # reference only, never a requirement
  python tests/golden/make_golden.py
"""

import os

import numpy as np

PAIRS = [
    ("what is a dog", "A dog is a domesticated descendant of the wolf that "
     "barks and is kept as a pet."),
    ("who wrote hamlet", "Hamlet is a tragedy written by William Shakespeare "
     "sometime between 1599 and 1601. It is his longest play."),
    ("ozone layer", "Stratospheric ozone absorbs ultraviolet light."),
]
OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "minilm_l6_hidden.npz")


def main() -> None:
  import torch
  import transformers

  from best_jax.models.pretrained import checkpoint_dir, load_tokenizer
  tokenizer = load_tokenizer()
  batch = tokenizer([q for q, _ in PAIRS], [d for _, d in PAIRS],
                    padding=True, return_tensors="np")
  model = transformers.BertModel.from_pretrained(
      checkpoint_dir(), add_pooling_layer=False).eval()
  with torch.no_grad():
    hidden = model(**{k: torch.tensor(v) for k, v in batch.items()})
  np.savez_compressed(
      OUTPUT,
      input_ids=batch["input_ids"].astype(np.int32),
      attention_mask=batch["attention_mask"].astype(np.int32),
      token_type_ids=batch["token_type_ids"].astype(np.int32),
      hidden=hidden.last_hidden_state.numpy().astype(np.float32),
      versions=np.array(f"torch {torch.__version__}, transformers "
                        f"{transformers.__version__}"))
  print(f"wrote {OUTPUT}: input shape {batch['input_ids'].shape}")


if __name__ == "__main__":
  main()
