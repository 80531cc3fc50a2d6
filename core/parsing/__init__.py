"""Tool-call parsers: model output text → actions. A base, one module per format family, and the
auto choice from a chat template."""
