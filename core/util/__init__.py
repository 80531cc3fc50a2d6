"""Small helpers with no toolgym concept of their own: retries, rate limits, thread-local output,
terminal-safe text, a background HTTP server."""
