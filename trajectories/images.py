"""The images of a dataset (``<dataset>/images/<sha256>.png``): checks and export columns.

See ``toolgym.core.tokens.images`` for how environments store them and reference them from messages.
``toolgym verify`` checks, for every trajectory with image parts:

- every reference is ``sha256:`` and 64 hex digits, its file exists, and the file's sha256 is its
  name (a missing, truncated or replaced screenshot is a violation);
- the trajectory records the placeholder its image parts became (``metadata.image_placeholder``);
- in a single-sequence trajectory, the rendered (non-sampled) segments hold the placeholder exactly
  once per image part: an image dropped from the messages, or one the ids do not stand for, shows.
  With several sequences (a template rewrote history) each sequence may hold at most that many.
- for a vision-language model's trajectory (``metadata.vision``: its image processor's settings
  and image pad token id), the images are re-processed with that processor and each image's run
  of pad tokens in the recorded ids must have the length its grid gives, in order: a stored image
  swapped for one of another size, or ids with image tokens added or dropped, fail.

Images an image limit took out of the messages (``Env.max_images``: text parts with
``omitted_image``) were seen by earlier calls: their files are checked like the others, and a
sequence's ``metadata.vision.sequence_images`` may name them.

Exports carry the bytes: the HF export's ``images`` column (``datasets.Image`` items, one per image
part in message order, as TRL and LLaVA-style datasets align them) and verl's ``images`` column of
the prompt Parquet (what ``RLHFDataset`` turns into ``multi_modal_data["image"]``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from toolgym.core.errors import ConfigError
from toolgym.core.tokens.images import IMAGES_DIR, image_path, image_refs, omitted_image_refs, parse_ref
from toolgym.core.trajectory import Trajectory

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
"""How ``datasets.Image`` stores an image in Parquet."""
IMAGES = pa.field("images", pa.list_(IMAGE))


def has_image_store(root: str | Path) -> bool:
    """True when the dataset directory holds images (exports then add an ``images`` column)."""
    return (Path(root) / IMAGES_DIR).is_dir()


def check_images(traj: Trajectory, root: str | Path | None) -> list[str]:
    """The image violations of one trajectory (see the module docstring); file checks need ``root``."""
    refs = image_refs(traj.messages or traj.prompt)
    omitted = omitted_image_refs(traj.messages or traj.prompt)
    if not refs and not omitted:
        return []
    problems: list[str] = []
    for i, ref in enumerate([*refs, *omitted]):
        try:
            sha = parse_ref(ref)
        except ValueError as exc:
            problems.append(f"image {i}: {exc}")
            continue
        if root is None:
            continue
        path = image_path(root, sha)
        if not path.is_file():
            problems.append(f"image {i}: {IMAGES_DIR}/{path.name} is missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != sha:
            problems.append(
                f"image {i}: {IMAGES_DIR}/{path.name} does not hash to its name (altered or damaged)"
            )
    vision = traj.metadata.get("vision")
    if isinstance(vision, dict):
        if root is not None and not problems:
            problems += _check_image_tokens(traj, refs, vision, root, omitted=omitted)
        return problems
    placeholder = traj.metadata.get("image_placeholder")
    if not placeholder:
        if traj.segments:
            problems.append(
                f"{len(refs)} image part(s) but no metadata.image_placeholder: the ids cannot be matched to images"
            )
        return problems
    counts: dict[int, int] = {}
    for seg in traj.segments:
        if seg.role != "assistant":
            counts[seg.sequence] = counts.get(seg.sequence, 0) + seg.text.count(placeholder)
    if len(counts) == 1 and counts.get(0, 0) != len(refs):
        problems.append(
            f"the token sequence holds {counts.get(0, 0)} image placeholder(s) {placeholder!r} for {len(refs)} image part(s)"
        )
    elif len(counts) > 1 and any(n > len(refs) for n in counts.values()):
        problems.append(f"a token sequence holds more image placeholders than the {len(refs)} image part(s)")
    return problems


def _check_image_tokens(
    traj: Trajectory,
    refs: list[str],
    vision: dict[str, Any],
    root: str | Path,
    *,
    omitted: Sequence[str] = (),
) -> list[str]:
    """Re-process the stored images; compare each image's token count with the ids' pad runs.
    ``omitted``: images an image limit took out of the messages, which sequences may still name."""
    from toolgym.core.tokens.vision import grids, image_pad_runs, image_token_count, processor_from_record

    try:
        processor = processor_from_record(dict(vision["processor"]))
        pad = int(vision["image_token_id"])
        seen = list(dict.fromkeys([*refs, *omitted]))
        found = dict(
            zip(seen, grids(processor, [image_path(root, ref).read_bytes() for ref in seen]), strict=True)
        )
    except Exception as exc:  # a record or an image the processor cannot take
        return [f"the images cannot be re-processed with metadata.vision: {type(exc).__name__}: {exc}"]
    merge = int(getattr(processor, "merge_size", 1) or 1)
    size = {ref: image_token_count(g, merge) for ref, g in found.items()}
    want = [size[ref] for ref in refs]
    runs: dict[int, list[int]] = {}
    for seg in traj.segments:
        if seg.role != "assistant":
            runs.setdefault(seg.sequence, []).extend(image_pad_runs(seg.token_ids, pad))
    per_sequence = vision.get("sequence_images")
    if per_sequence:  # each sequence's own images, in order
        for s, seq_refs in enumerate(per_sequence):
            if any(ref not in size for ref in seq_refs):
                return [f"metadata.vision.sequence_images[{s}] names an image no message holds"]
            expected = [size[ref] for ref in seq_refs]
            if runs.get(s, []) != expected:
                return [
                    f"sequence {s}: the ids hold image-token runs {runs.get(s, [])} but re-processing "
                    f"its stored images gives {expected}"
                ]
        return []
    if len(runs) == 1 and runs.get(0, []) != want:
        return [
            f"the ids hold image-token runs {runs.get(0, [])} but re-processing the stored images gives {want}"
        ]
    bad = [s for s, r in runs.items() if len(r) > len(want) or any(n not in want for n in r)]
    if len(runs) > 1 and bad:
        return [
            f"sequence {bad[0]} holds image-token runs {runs[bad[0]]} that the stored images {want} do not give"
        ]
    return []


def image_items(messages: Sequence[dict[str, Any]], root: str | Path | None) -> list[dict[str, Any]]:
    """``datasets.Image`` items (``bytes``, ``path``) for the image parts of ``messages``, in order."""
    items = []
    for ref in image_refs(messages):
        if root is None:
            raise ConfigError(
                "these trajectories reference images; export them from their dataset directory, "
                f"which holds the {IMAGES_DIR}/ folder"
            )
        path = image_path(root, ref)
        try:
            data = path.read_bytes()
        except OSError:
            raise ConfigError(
                f"image {ref} is missing from {path.parent}; run `toolgym verify` on the dataset"
            ) from None
        items.append({"bytes": data, "path": path.name})
    return items


def with_image_features(schema: pa.Schema) -> pa.Schema:
    """``schema`` with Hugging Face feature metadata that makes ``images`` a list of
    ``datasets.Image`` (decoded to PIL images on access). Without ``datasets`` installed the
    column stays a plain struct list, which ``datasets`` can still cast to ``Image``."""
    try:
        import datasets
    except ImportError:
        return schema
    features = datasets.Features.from_arrow_schema(schema)
    image_list = getattr(datasets, "List", None) or datasets.Sequence
    features["images"] = image_list(datasets.Image())
    return schema.with_metadata({"huggingface": json.dumps({"info": {"features": features.to_dict()}})})
