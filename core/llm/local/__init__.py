"""Local inference in process: the transformers backend, its batching and sampling, the tiny models, tokenizers."""
