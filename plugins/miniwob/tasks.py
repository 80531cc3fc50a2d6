"""Which MiniWoB++ tasks the ``miniwob`` environment offers, and which it cannot.

The browser tools act on elements (click, type, select, press, scroll) and observe the
accessibility tree. A task works when an agent with those tools can see what it needs and do what
it asks. Tasks that need pointer coordinates or gestures (drag, draw, select text with the mouse,
click a point of a canvas) or that show what matters only as pixels (colours, shapes drawn on a
canvas or SVG with no text) do not, and are listed with their reason; everything else the package
ships is offered.

With screenshots (``observation=screenshot|both``) the agent also sees the task area's pixels and
clicks at points of it (``browser_click_at``), so two more sets are offered there: tasks answered by
clicks at points (``CLICKS_AT_POINTS``: a grid coordinate, a midpoint, a circle's centre, ...) and
tasks whose content is drawn but stays on screen (``DRAWN``: colours, shapes, pie slices). Drags,
drawing, hovering, text selection and content that only flashes by stay refused in every mode.
"""

from __future__ import annotations

import functools

from toolgym import ConfigError

from .site import html_dir

NEEDS_POINTER: dict[str, str] = {
    name: "it needs pointer coordinates or a drag gesture, which element-level tools cannot express"
    for name in (
        "bisect-angle",
        "chase-circle",
        "circle-center",
        "drag-box",
        "drag-circle",
        "drag-cube",
        "drag-items",
        "drag-items-grid",
        "drag-shapes",
        "drag-shapes-2",
        "drag-single-shape",
        "drag-sort-numbers",
        "draw-circle",
        "draw-line",
        "find-midpoint",
        "grid-coordinate",
        "moving-items",
        "resize-textarea",
        "right-angle",
        "use-colorwheel",
        "use-colorwheel-2",
        "use-slider",
        "use-slider-2",
        "hot-cold",
    )
}
NEEDS_SELECTION: dict[str, str] = {
    name: "it needs text selected with the mouse (a selection range), which the tools cannot make"
    for name in ("highlight-text", "highlight-text-2", "text-editor", "copy-paste", "copy-paste-2")
}
NEEDS_PIXELS: dict[str, str] = {
    name: "what matters in it is drawn (colours or shapes without text), invisible in the accessibility tree; "
    "try observation screenshots with a vision model"
    for name in (
        "click-color",
        "click-shades",
        "click-shape",
        "count-shape",
        "count-sides",
        "identify-shape",
        "hover-shape",
        "click-pie",
        "click-pie-nodelay",
        "visual-addition",
        "simon-says",
        "generate-number",
    )
}
UNSUPPORTED: dict[str, str] = {**NEEDS_POINTER, **NEEDS_SELECTION, **NEEDS_PIXELS}
"""Shipped tasks the environment refuses with accessibility-tree observations, with the reason
(also in the plugin's README)."""

CLICKS_AT_POINTS = (
    "bisect-angle",
    "circle-center",
    "find-midpoint",
    "grid-coordinate",
    "hot-cold",
    "right-angle",
)
"""Pointer tasks whose answer is clicks at points (then, for some, the submit button)."""
DRAWN = (
    "click-color",
    "click-pie",
    "click-pie-nodelay",
    "click-shades",
    "click-shape",
    "count-shape",
    "count-sides",
    "identify-shape",
    "visual-addition",
)
"""Pixel tasks whose drawing stays on screen while the agent acts (not ``hover-shape``, which needs a
hover; not ``simon-says``, whose sequence flashes by; not ``generate-number``)."""
UNSUPPORTED_WITH_SCREENSHOTS: dict[str, str] = {
    name: (
        "what matters in it needs a hover or shows only for a moment, which screenshots taken between "
        "actions do not catch"
        if name in NEEDS_PIXELS
        else reason
    )
    for name, reason in UNSUPPORTED.items()
    if name not in (*CLICKS_AT_POINTS, *DRAWN)
}
"""Shipped tasks refused even with screenshots and coordinate clicks."""


def unsupported(*, screenshots: bool = False) -> dict[str, str]:
    """The refused tasks and why, for observations with (``screenshots``) or without the page's pixels."""
    return UNSUPPORTED_WITH_SCREENSHOTS if screenshots else UNSUPPORTED


REPORTED = (
    "choose-list",
    "click-button",
    "click-button-sequence",
    "click-checkboxes",
    "click-checkboxes-large",
    "click-checkboxes-soft",
    "click-checkboxes-transfer",
    "click-collapsible",
    "click-collapsible-2",
    "click-dialog",
    "click-dialog-2",
    "click-link",
    "click-menu",
    "click-option",
    "click-scroll-list",
    "click-tab",
    "click-tab-2",
    "click-tab-2-hard",
    "click-test",
    "click-test-2",
    "click-widget",
    "email-inbox",
    "email-inbox-forward-nl",
    "email-inbox-forward-nl-turk",
    "email-inbox-nl-turk",
    "enter-date",
    "enter-password",
    "enter-text",
    "enter-text-dynamic",
    "enter-time",
    "focus-text",
    "focus-text-2",
    "guess-number",
    "login-user",
    "login-user-popup",
    "multi-layouts",
    "multi-orderings",
    "navigate-tree",
    "search-engine",
    "simple-algebra",
    "simple-arithmetic",
    "social-media",
    "social-media-all",
    "social-media-some",
    "terminal",
    "tic-tac-toe",
    "use-autocomplete",
    "use-spinner",
)
"""The element-level subset LLM web-agent papers usually report (the RCI-era task list, as we
read it), less the tasks above that need pixels or pointer gestures."""


@functools.cache
def shipped_tasks() -> tuple[str, ...]:
    """Every task page the installed ``miniwob`` package ships, sorted."""
    return tuple(sorted(p.stem for p in (html_dir() / "miniwob").glob("*.html")))


@functools.cache
def supported_tasks(*, screenshots: bool = False) -> tuple[str, ...]:
    """The shipped tasks the environment offers (all but :func:`unsupported`'s)."""
    refused = unsupported(screenshots=screenshots)
    return tuple(t for t in shipped_tasks() if t not in refused)


def task_list(spec: str, *, screenshots: bool = False) -> tuple[str, ...]:
    """``all`` (every supported task), ``reported``, ``solvable`` (tasks with a scripted solver),
    or comma-separated task names; unknown or unsupported names are a ``ConfigError``.
    ``screenshots``: the observations show the page's pixels (more tasks are offered)."""
    from .solvers import SOLVERS

    spec = spec.strip()
    offered = supported_tasks(screenshots=screenshots)
    refused = unsupported(screenshots=screenshots)
    if spec == "all":
        return offered
    if spec == "reported":
        return tuple(t for t in REPORTED if t in offered)
    if spec == "solvable":
        return tuple(t for t in sorted(SOLVERS) if t in offered)
    names = tuple(n.strip() for n in spec.split(",") if n.strip())
    if not names:
        raise ConfigError(
            "tasks is empty: give 'all', 'reported', 'solvable' or task names separated by commas"
        )
    for name in names:
        if name in refused:
            raise ConfigError(f"MiniWoB++ task {name!r} is not offered: {refused[name]}")
        if name not in shipped_tasks():
            raise ConfigError(
                f"unknown MiniWoB++ task {name!r}; see `toolgym envs` or "
                "toolgym.plugins.miniwob.tasks.supported_tasks() for the list"
            )
    return names
