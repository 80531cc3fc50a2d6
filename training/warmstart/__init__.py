"""Warm starts: supervised fine-tuning on expert trajectories before RL (recipes, cache, build)."""
