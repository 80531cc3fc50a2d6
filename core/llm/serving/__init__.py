"""Serving local models over HTTP (`toolgym serve`): toolgym's own server and a managed vLLM."""
