"""Chat text and token ids: chat formats, cached piece tokenization, token assembly, tokenizers and
images in messages."""
