"""Clients of model servers: SGLang's native API, OpenAI-compatible APIs, and what they read from a server."""
