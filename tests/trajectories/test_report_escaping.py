"""``toolgym report``: model-written text (prompts, actions, tool calls and results, observations,
errors, environment names, segment text) reaches the pages escaped by the template engine, and
template syntax in it is shown literally, never evaluated."""

from __future__ import annotations

from html import unescape
from html.parser import HTMLParser
from pathlib import Path

from tests.trajectories.helpers import synthetic_trajectory
from toolgym.core.trajectory import Status
from toolgym.trajectories.report import build_report
from toolgym.trajectories.store import TrajectoryWriter

PAYLOAD = "<script>alert(1)</script> \"><img src=x onerror=alert(1)> '{{ 7*7 }}' {% raw %} {# x"


class _Page(HTMLParser):
    """The tags of a page, with their attributes, and the text of each <pre>."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.pres: list[str] = []
        self._in_pre = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "pre":
            self._in_pre, _ = True, self.pres.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_pre = self._in_pre and tag != "pre"

    def handle_data(self, data: str) -> None:
        if self._in_pre:
            self.pres[-1] += data


def test_model_text_is_escaped_and_never_evaluated(tmp_path: Path) -> None:
    traj = synthetic_trajectory(1, env=f"env{PAYLOAD}")
    traj.prompt = [{"role": f"user{PAYLOAD}", "content": f"prompt{PAYLOAD}"}]
    for step in traj.steps:
        step.action, step.observation, step.error = f"act{PAYLOAD}", f"obs{PAYLOAD}", f"err{PAYLOAD}"
        for call in step.tool_calls:
            call.name, call.output, call.arguments = f"tool{PAYLOAD}", f"out{PAYLOAD}", {"code": PAYLOAD}
            call.files = [f"shot{PAYLOAD}.png"]  # missing from the dataset: its name is shown
    for seg in traj.segments:
        seg.text = f"seg{PAYLOAD}"
    traj = traj.model_copy(
        update={"trajectory_id": f"id{PAYLOAD}", "status": Status.ERROR, "status_reason": f"why{PAYLOAD}"}
    )
    with TrajectoryWriter(tmp_path / "data") as w:
        w.write(traj)
    build_report(tmp_path / "data", tmp_path / "report", sample=5)

    index = (tmp_path / "report" / "index.html").read_text()
    [episode] = (tmp_path / "report" / "episodes").glob("*.html")
    page = episode.read_text()
    for html in (index, page):
        assert "<script>alert" not in html and "<img src=x" not in html and "onerror=alert(1)>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt; &#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
        assert "{{ 7*7 }}" in html and "{% raw %}" in html and "{# x" in html  # literal, not evaluated
        parsed = _Page(html)
        assert [tag for tag, _ in parsed.tags].count("script") == 1  # the page's own script only
        assert not [a for tag, attrs in parsed.tags for a in attrs if a.startswith("on")]
        assert not [attrs for tag, attrs in parsed.tags if tag == "img" and attrs.get("src") == "x"]
    assert f"env{PAYLOAD}" in unescape(index) and f"tool{PAYLOAD}" in unescape(index)
    pres = _Page(page).pres
    for text in (f"prompt{PAYLOAD}", f"act{PAYLOAD}", f"out{PAYLOAD}", f"obs{PAYLOAD}"):
        assert text in pres  # each <pre> reads back exactly as the model wrote it
    for text in (
        f"user{PAYLOAD}",
        f"tool{PAYLOAD}",
        f"err{PAYLOAD}",
        f"why{PAYLOAD}",
        f"seg{PAYLOAD}",
        f"id{PAYLOAD}",
    ):
        assert text in unescape(page)
