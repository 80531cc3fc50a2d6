"""Environments: the contract every environment implements, its registration spec, the
per-episode context, the tool-task base class and the state digests of step grouping."""
