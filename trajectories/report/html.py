"""HTML of the report: one index page and one page per sampled episode. Self-contained (inline
CSS and a little JavaScript, no network), escaped everywhere."""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

from toolgym.core.trajectory import Trajectory

from .stats import DatasetStats

MAX_CHARS = 20_000
"""Longest text shown for one field (action, observation, tool output); the middle is cut."""
MAX_TOKENS = 20_000
"""Most tokens shown one by one on an episode page."""
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1f3b5c;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}header a{color:#cfe3ff}
main{padding:16px 24px;max-width:1200px}h2{font-size:16px;margin:22px 0 8px}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{background:#fff;border:1px solid #dde2ea;border-radius:6px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:18px}.card span{color:#667;font-size:12px}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}th,td{border:1px solid #dde2ea;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;cursor:pointer;user-select:none}tr.hidden{display:none}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:12px}.plots figure{margin:0;background:#fff;border:1px solid #dde2ea;padding:6px}
.plots img{width:100%;height:auto}pre{white-space:pre-wrap;word-break:break-word;background:#fff;border:1px solid #e3e7ee;padding:8px;margin:4px 0;font-size:12.5px}
details.step{background:#fff;border:1px solid #dde2ea;border-radius:6px;margin:8px 0;padding:4px 10px}details.step>summary{cursor:pointer;font-weight:600}
.invalid>summary{color:#b3261e}.ok{color:#2e7d32}.error{color:#b3261e}.untrainable{color:#a66a00}.muted{color:#778}
.tool{border-left:3px solid #7b5ea7;padding-left:8px;margin:6px 0}.tool.err{border-color:#b3261e}
.tokens{background:#fff;border:1px solid #dde2ea;padding:8px;font:12px/1.6 ui-monospace,Menlo,monospace;white-space:pre-wrap;word-break:break-all}
.m1{background:#c8ecd2;color:#0f5132}.m0{color:#6b7280}.tok{border-right:1px dotted #c5cad3}.seqbreak{display:block;color:#a66a00;margin:6px 0}
.legend span{padding:1px 6px;margin-right:8px}.shot{max-width:100%;border:1px solid #ccd;margin:4px 0}
input#filter{padding:4px 8px;width:280px}select{padding:3px}
"""

INDEX_JS = """
(function(){
  var table=document.getElementById('episodes'), box=document.getElementById('filter'), sel=document.getElementById('status');
  function apply(){
    var q=(box.value||'').toLowerCase(), st=sel.value, shown=0;
    table.querySelectorAll('tbody tr').forEach(function(tr){
      var ok=(!q||tr.textContent.toLowerCase().indexOf(q)>=0)&&(!st||tr.dataset.status===st);
      tr.classList.toggle('hidden',!ok); if(ok) shown++;
    });
    document.getElementById('visible-count').textContent=shown;
  }
  table.querySelectorAll('th').forEach(function(th,i){
    th.addEventListener('click',function(){
      var rows=Array.prototype.slice.call(table.tBodies[0].rows), asc=th.dataset.asc!=='1';
      rows.sort(function(a,b){var x=a.cells[i].dataset.v||a.cells[i].textContent, y=b.cells[i].dataset.v||b.cells[i].textContent;
        var nx=parseFloat(x), ny=parseFloat(y); var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y); return asc?c:-c;});
      rows.forEach(function(r){table.tBodies[0].appendChild(r);}); th.dataset.asc=asc?'1':'0';
    });
  });
  box.addEventListener('input',apply); sel.addEventListener('change',apply); apply();
  window.addEventListener('load',function(){
    var imgs=document.querySelectorAll('img'), loaded=0;
    imgs.forEach(function(im){ if(im.complete&&im.naturalWidth>0) loaded++; });
    document.body.dataset.imagesLoaded=loaded; document.body.dataset.images=imgs.length; document.body.dataset.ready='1';
  });
})();
"""

EPISODE_JS = """
(function(){
  document.getElementById('expand').addEventListener('click',function(){document.querySelectorAll('details').forEach(function(d){d.open=true;});});
  document.getElementById('collapse').addEventListener('click',function(){document.querySelectorAll('details').forEach(function(d){d.open=false;});});
  window.addEventListener('load',function(){
    document.body.dataset.steps=document.querySelectorAll('details.step').length;
    document.body.dataset.masked=document.querySelectorAll('.tokens .m1').length;
    var shots=document.querySelectorAll('img.shot'), loaded=0;
    shots.forEach(function(im){ if(im.complete&&im.naturalWidth>0) loaded++; });
    document.body.dataset.shots=shots.length; document.body.dataset.shotsLoaded=loaded; document.body.dataset.ready='1';
  });
})();
"""


def clip(text: str, limit: int = MAX_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters cut] …\n{text[-half:]}"


def pre(text: Any) -> str:
    return f"<pre>{escape(clip(str(text)))}</pre>"


def page(title: str, body: str, *, script: str = "", home: str | None = None) -> str:
    nav = f' · <a href="{escape(home)}">report index</a>' if home else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<meta name=viewport content='width=device-width,initial-scale=1'><title>{escape(title)}</title>"
        f"<style>{CSS}</style></head><body><header><h1>{escape(title)}</h1><small>toolgym report{nav}</small></header>"
        f"<main>{body}</main><script>{script}</script></body></html>"
    )


def cards(items: list[tuple[str, str]]) -> str:
    return (
        "<div class=cards>"
        + "".join(f"<div class=card><b>{escape(v)}</b><span>{escape(k)}</span></div>" for k, v in items)
        + "</div>"
    )


def table(header: list[str], rows: list[list[Any]], *, table_id: str | None = None) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    ident = f" id={table_id}" if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f} ms"


def index_page(
    stats: DatasetStats,
    manifest: dict[str, Any],
    plots: dict[str, str],
    episodes: list[dict[str, Any]],
    *,
    source: str,
) -> str:
    """The report's front page: summary, plots, per-environment and per-tool tables, and the
    sampled episodes (filterable, sortable)."""
    ok = stats.overall
    fp = manifest.get("fingerprint") or {}
    parts = [
        f"<p class=muted>dataset <code>{escape(source)}</code> · model <b>{escape(str(manifest.get('model_name') or fp.get('model', '?')))}</b>"
        f" · policy {escape(str(manifest.get('policy', '?')))} · collection state {escape(str(manifest.get('state', '?')))}"
        f" · toolgym {escape(str(manifest.get('toolgym_version', '?')))}</p>",
        cards(
            [
                ("trajectories", f"{stats.n:,}"),
                ("success rate", _pct(ok.success_rate) if ok.n else "-"),
                ("mean reward", f"{ok.mean_reward:.3f}" if ok.n else "-"),
                ("turns / episode", f"{stats.turns / stats.n:.2f}" if stats.n else "-"),
                ("failed", f"{stats.status.get('error', 0):,}"),
                ("untrainable", f"{stats.status.get('untrainable', 0):,}"),
                ("token-faithful", _pct(stats.token_faithful / stats.n) if stats.n else "-"),
                ("tokens (sampled)", f"{stats.tokens:,} ({stats.sampled_tokens:,})"),
                ("tool calls", f"{stats.all_tools.calls:,}"),
            ]
        ),
        f"<p class=muted>success: status not error and reward ≥ {stats.success_threshold:g}. Sampling: "
        f"<code>{escape(json.dumps(manifest.get('sampling') or fp.get('sampling') or {}))}</code></p>",
        "<h2>Plots</h2><div class=plots>"
        + "".join(
            f"<figure><img src='plots/{escape(f)}' alt='{escape(stem)}' data-plot='{escape(stem)}'></figure>"
            for stem, f in plots.items()
        )
        + "</div>",
        "<h2>By environment</h2>"
        + table(
            ["environment", "episodes", "success rate", "mean reward"],
            [[e, t.n, _pct(t.success_rate), f"{t.mean_reward:.3f}"] for e, t in sorted(stats.by_env.items())],
        ),
    ]
    if stats.tools:
        parts.append(
            "<h2>Tools</h2>"
            + table(
                ["tool", "calls", "errors", "mean", "p50", "p95"],
                [
                    [
                        n,
                        t.calls,
                        t.errors,
                        _ms(t.seconds / t.calls),
                        _ms(t.quantile(0.5)),
                        _ms(t.quantile(0.95)),
                    ]
                    for n, t in sorted(stats.tools.items())
                ],
            )
        )
    rows = []
    for e in episodes:
        status = e["status"]
        rows.append(
            f"<tr data-status='{escape(status)}'><td><a href='episodes/{escape(e['trajectory_id'])}.html'>{escape(e['trajectory_id'][:16])}</a></td>"
            f"<td>{escape(e['env'])}</td><td data-v='{e['task_index']}'>{e['task_index']}</td><td data-v='{e['sample_index']}'>{e['sample_index']}</td>"
            f"<td data-v='{e['turns']}'>{e['turns']}</td><td data-v='{e['reward']}'>{e['reward']:.3g}</td>"
            f"<td class='{escape(status)}'>{escape(status)}</td></tr>"
        )
    statuses = sorted({e["status"] for e in episodes})
    options = "".join(f"<option>{escape(s)}</option>" for s in statuses)
    parts.append(
        f"<h2>Episodes (a sample of {len(episodes):,} of {stats.n:,}; all are listed in <a href='episodes.csv'>episodes.csv</a>)</h2>"
        f"<p><input id=filter placeholder='filter: id, environment, …'> <select id=status><option value=''>any status</option>{options}</select>"
        f" <span class=muted><span id=visible-count>{len(episodes)}</span> shown</span></p>"
        "<table id=episodes><thead><tr><th>trajectory</th><th>environment</th><th>task</th><th>sample</th><th>turns</th><th>reward</th>"
        f"<th>status</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    return page("toolgym dataset report", "".join(parts), script=INDEX_JS)


def token_view(traj: Trajectory, tokenizer: Any = None) -> str:
    """The token sequences with loss-mask colours: one span per token with a tokenizer (hover: id
    and logprob), else one span per segment (hover: role, tokens, mean logprob)."""
    if not traj.segments:
        return "<p class=muted>No token ids: this trajectory came from a text-only chat API (not token-faithful).</p>"
    out, shown, last_seq = [], 0, 0
    for seg in traj.segments:
        if seg.sequence != last_seq:
            out.append(f"<span class=seqbreak>──── sequence {seg.sequence} (new context window) ────</span>")
            last_seq = seg.sequence
        mask = 1 if any(seg.loss_mask) else 0
        if tokenizer is not None and shown < MAX_TOKENS:
            for k, tid in enumerate(seg.token_ids[: MAX_TOKENS - shown]):
                lp = f" · logprob {seg.logprobs[k]:.3f}" if seg.logprobs is not None else ""
                text = tokenizer.decode([tid])
                out.append(
                    f"<span class='tok m{seg.loss_mask[k]}' title='id {tid}{lp}'>{escape(text)}</span>"
                )
            shown += len(seg.token_ids)
        else:
            lp = f" · mean logprob {sum(seg.logprobs) / len(seg.logprobs):.3f}" if seg.logprobs else ""
            out.append(
                f"<span class='m{mask}' title='{escape(seg.role)} · {len(seg.token_ids)} tokens{lp}'>{escape(clip(seg.text))}</span>"
            )
    if tokenizer is not None and shown > MAX_TOKENS:
        out.append(f"<span class=seqbreak>… {shown - MAX_TOKENS} more tokens</span>")
    return "<div class=tokens>" + "".join(out) + "</div>"


def _file(path: str, files: dict[str, str]) -> str:
    target = files.get(path)
    if target is None:
        return f"<div class=muted>file {escape(path)} (missing from the dataset)</div>"
    if target.lower().endswith(IMAGE_SUFFIXES):
        return f"<div><img class=shot src='{escape(target)}' alt='{escape(path)}'></div>"
    return f"<div><a href='{escape(target)}'>{escape(path)}</a></div>"


def episode_page(traj: Trajectory, files: dict[str, str], *, tokenizer: Any = None) -> str:
    """One episode: header, prompt, each step (action, tool calls with outputs, latencies and
    screenshots, observation, reward), then the tokens coloured by loss mask."""
    t = traj.timings
    status = traj.status.value + (f" ({traj.status_reason})" if traj.status_reason else "")
    end = (
        "terminated"
        if traj.terminated
        else (f"truncated: {traj.truncation_reason}" if traj.truncated else "-")
    )
    fields: list[list[Any]] = [
        ["trajectory", traj.trajectory_id],
        ["group", traj.group_id],
        ["environment", f"{traj.env or traj.task} #{traj.task_index} (seed {traj.seed})"],
        ["sample", traj.sample_index],
        ["model", traj.model],
        ["reward", f"{traj.reward:.4g}"],
        ["status", status],
        ["end", end],
        ["token-faithful", "yes" if traj.token_faithful else "no (text API)"],
        [
            "time",
            f"{t.total_s:.2f}s (llm {t.llm_s:.2f}s, env {t.env_s:.2f}s, tools {t.tool_s:.2f}s, sandbox {t.sandbox_s:.2f}s)",
        ],
    ]
    if traj.parent_id:
        fields.append(["parent", f"{traj.parent_id} at token {traj.branch_point}"])
    head = table(["field", "value"], fields)
    parts = [head, "<h2>Prompt</h2>"]
    parts += [
        f"<div><b>{escape(str(m.get('role', '?')))}</b>{pre(m.get('content', ''))}</div>" for m in traj.prompt
    ]
    parts.append(
        "<h2>Steps</h2><p><button id=expand>expand all</button> <button id=collapse>collapse all</button></p>"
    )
    for step in traj.steps:
        body = [f"<div class=muted>action ({escape(step.action_kind)})</div>", pre(step.action)]
        if step.error:
            body.append(f"<div class=error>error: {escape(step.error)}</div>")
        for call in step.tool_calls:
            args = (
                call.arguments
                if isinstance(call.arguments, str)
                else json.dumps(call.arguments, ensure_ascii=False)
            )
            body.append(
                f"<div class='tool{' err' if call.error else ''}'><b>→ {escape(call.name)}</b> <code>{escape(clip(args, 2000))}</code>"
                f" <span class=muted>{call.duration_s * 1000:.1f} ms{' · error' if call.error else ''}</span>{pre(call.output)}"
                + "".join(_file(f, files) for f in call.files)
                + "</div>"
            )
        if step.observation:
            body += ["<div class=muted>observation</div>", pre(step.observation)]
        meta = f"reward {step.step_reward:.4g} · anchor {escape(step.anchor[:12])} · env {step.env_s * 1000:.1f} ms"
        if step.llm is not None:
            meta += f" · {step.llm.completion_tokens} tokens, {escape(step.llm.finish_reason)}, {step.llm.latency_s * 1000:.0f} ms, {step.llm.attempts} attempt(s)"
        body.append(f"<div class=muted>{meta}</div>")
        cls = "step" + ("" if step.valid else " invalid")
        summary = f"Step {step.index} · {escape(step.action_kind)} · reward {step.step_reward:.3g}" + (
            "" if step.valid else " · INVALID"
        )
        parts.append(f"<details class='{cls}' open><summary>{summary}</summary>{''.join(body)}</details>")
    parts.append(
        "<h2>Tokens</h2><p class=legend><span class=m1>loss mask 1: sampled by the model</span>"
        "<span class=m0>loss mask 0: prompt, tool and environment text</span></p>"
    )
    parts.append(token_view(traj, tokenizer))
    return page(f"episode {traj.trajectory_id}", "".join(parts), script=EPISODE_JS, home="../index.html")
