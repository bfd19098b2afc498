"""Models: loading Hugging Face-layout checkpoints into Tunix/flax nnx modules, and their tokenizers."""
