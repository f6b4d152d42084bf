"""`python -m best_jax` runs the command line."""

from best_jax.cli import main

if __name__ == "__main__":
  raise SystemExit(main())
