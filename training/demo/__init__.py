"""``toolgym demo``: the embedded demo (warm start, RL on the keychain task, held-out evaluation) and
its report."""
