"""``bm25s``, imported so that JAX does not take the GPU.

When JAX is installed, importing ``bm25s`` imports it and runs a ``top_k`` at once (bm25s uses JAX
for its top-k selection). JAX's default is then to preallocate 75 % of the first GPU's memory for
the process, so on a GPU machine every toolgym process that loads the search or WebShop plugin
held ~60 GB of an 80 GB card before it used any, and a second training run on the same GPU ran
out of memory at its first ``model.to("cuda")``. Importing through here sets
``XLA_PYTHON_CLIENT_PREALLOCATE=false`` first (unless the user has set it): JAX then allocates what
it uses. A process that imported JAX before keeps its own settings.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import bm25s

__all__ = ["bm25s"]
