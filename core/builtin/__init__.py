"""What core registers through its own hooks, as any third-party plugin would: the built-in tool-call
parsers (``parsers``) and model backends (``llm``)."""
