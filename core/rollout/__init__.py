"""The rollout engine: episode requests, the turn loop, policies, ARPO branching and run counters."""
