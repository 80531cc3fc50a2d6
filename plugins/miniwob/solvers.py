"""Scripted solvers for MiniWoB++ tasks: the next browser action from the page's own state.

Each solver is the body of a JavaScript function run in the task page (by the environment, never
by the model). It reads the instruction (``core.getUtterance()``) and the DOM, and answers the next
action as ``{"tool": "browser_click" | "browser_type" | "browser_select" | "browser_press", "args": {...}}``
with the element ids the observation shows (the ``data-tg-id`` the browser tools put on every
element), or ``null`` when it cannot tell. Solvers are stateless: each turn they look at the page
again, so a multi-step task (fill a field, then submit) is solved one step at a time, as a model
would.

A click lands on the centre of its element, and the browser refuses it when another element covers
that point (it would receive the click). click-test-2 and click-button-sequence place two buttons
at random, and TWO covers ONE's centre on a few seeds in a hundred; ``activate`` then reaches the
button with the keyboard, as a person would: Tab (or Shift+Tab) until it has the focus, then Enter.

With coordinates (``solver_script(task, scale=S)``, the environment's ``actions=coordinates``) the same
solvers answer ``browser_click_at`` / ``browser_type_at`` at the centre of the element, in the pixels
of a screenshot of the task area (``#wrap``) taken at ``scale``; a step that needs a key or a list
selection (``choose-list``, a covered button) has no such action, and the solver answers ``null``.
"""

from __future__ import annotations

import json

PRELUDE = r"""
const Q = core.getUtterance();
const quoted = (Q.match(/"([^"]*)"/g) || []).map(s => s.slice(1, -1));
const tgid = el => Number(el.getAttribute('data-tg-id'));
const SCALE = __SCALE__;
const at = el => {
  const w = document.getElementById('wrap').getBoundingClientRect(), r = el.getBoundingClientRect();
  return {x: Math.floor((r.left + r.width / 2 - w.left) * SCALE), y: Math.floor((r.top + r.height / 2 - w.top) * SCALE)};
};
const click = el => !el ? null : SCALE === null ? {tool: 'browser_click', args: {element_id: tgid(el)}}
  : {tool: 'browser_click_at', args: at(el)};
const type = (el, text) => !el ? null : SCALE === null ? {tool: 'browser_type', args: {element_id: tgid(el), text: text}}
  : {tool: 'browser_type_at', args: {...at(el), text: text}};
const select = (el, option) => el && SCALE === null ? {tool: 'browser_select', args: {element_id: tgid(el), option: option}} : null;
const $$ = sel => [...document.querySelectorAll(sel)];
const byText = (sel, text) => $$(sel).find(e => e.textContent.trim() === text);
const fill = (pairs, submit) => {
  for (const [el, text] of pairs) if (el && el.value !== text) return type(el, text);
  return click(submit);
};
const labelled = (sel, text) => $$(sel).find(l => l.textContent.trim() === text);
const press = key => SCALE === null ? {tool: 'browser_press', args: {key: key}} : null;
const covered = el => {
  const r = el.getBoundingClientRect();
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return hit !== null && hit !== el && !el.contains(hit);
};
const activate = el => {
  if (!el || !covered(el)) return click(el);
  const at = document.activeElement;
  if (at === el) return press('Enter');
  const after = at && at !== document.body && (at.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_PRECEDING);
  return press(after ? 'Shift+Tab' : 'Tab');
};
"""

SOLVERS: dict[str, str] = {
    "click-button": "return click(byText('#area button', quoted[0]));",
    "click-link": "return click(byText('#area .alink', quoted[0]));",
    "click-test": "return click(document.getElementById('subbtn'));",
    "click-test-2": "const m = Q.match(/button (\\w+)\\./); return activate(byText('#area button', m[1]));",
    "click-button-sequence": r"""
      const order = Q.match(/button (\w+), then click button (\w+)/).slice(1);
      return activate(byText('#area button', order[buttonsPushed.length]));""",
    "click-dialog": "return click(document.querySelector('.ui-dialog-titlebar-close'));",
    "click-tab": "const n = Q.match(/Tab #(\\d)/)[1]; return click(document.querySelector(`#area ul a[href='#tabs-${n}']`));",
    "focus-text": "return click(document.getElementById('tt'));",
    "focus-text-2": r"""
      const n = {'1st': 1, '2nd': 2, '3rd': 3}[Q.match(/the (\w+) input/)[1]];
      return click(document.getElementById('tt' + n));""",
    "enter-text": "return fill([[document.getElementById('tt'), quoted[0]]], document.getElementById('subbtn'));",
    "enter-text-2": r"""
      const want = Q.includes('upper case') ? quoted[0].toUpperCase() : quoted[0].toLowerCase();
      return fill([[document.getElementById('tt'), want]], document.getElementById('subbtn'));""",
    "enter-password": r"""
      return fill([[document.getElementById('password'), quoted[0]], [document.getElementById('verify'), quoted[0]]],
                  document.getElementById('subbtn'));""",
    "login-user": r"""
      return fill([[document.getElementById('username'), quoted[0]], [document.getElementById('password'), quoted[1]]],
                  document.getElementById('subbtn'));""",
    "click-checkboxes": r"""
      const list = Q.replace(/^Select /, '').replace(/ and click Submit\.$/, '');
      const want = list === 'nothing' ? [] : list.split(', ');
      for (const label of $$('#boxes label')) {
        const box = label.querySelector('input');
        if (box.checked !== want.includes(label.textContent.trim())) return click(box);
      }
      return click(document.getElementById('subbtn'));""",
    "click-option": r"""
      const name = Q.replace(/^Select /, '').replace(/ and click Submit\.$/, '');
      const box = labelled('#boxes label', name).querySelector('input');
      return box.checked ? click(document.getElementById('subbtn')) : click(box);""",
    "choose-list": r"""
      const name = Q.replace(/^Select /, '').replace(/ from the list and click Submit\.$/, '');
      const list = document.getElementById('options');
      if (list.options[list.selectedIndex].textContent !== name) return select(list, name);
      return click(byText('#area button', 'Submit'));""",
}
"""Solvers by task name: sixteen element-level tasks, measured over 100 seeds each by
``bench/miniwob_solvers.py`` (tests play two seeds of each)."""


POINT_SOLVERS: dict[str, str] = {
    "grid-coordinate": r"""
      const m = Q.match(/\((-?\d+),(-?\d+)\)/);
      return click(document.getElementById('(' + m[1] + ',' + m[2] + ')'));""",
    "circle-center": r"""
      if (!document.getElementById('blue-circle')) return click(document.querySelector('.black-circle'));
      return click(document.getElementById('subbtn'));""",
}
"""Solvers of tasks offered only with screenshots, whose answer is a click at a point (coordinate
actions only): the grid point the instruction names, the drawn circle's centre."""

COORDINATE_SOLVERS = (frozenset(SOLVERS) - {"choose-list"}) | frozenset(POINT_SOLVERS)
"""The tasks whose solvers can act by coordinates (choose-list selects from a list: no point does that)."""


def solver_script(task: str, scale: float | None = None) -> str | None:
    """The JavaScript function expression that answers ``task``'s next action (None: no solver).
    With ``scale``: coordinate actions in the pixels of a task-area screenshot taken at that scale."""
    body = SOLVERS.get(task) or (POINT_SOLVERS.get(task) if scale is not None else None)
    if body is None or (scale is not None and task not in COORDINATE_SOLVERS):
        return None
    prelude = PRELUDE.replace("__SCALE__", "null" if scale is None else json.dumps(float(scale)))
    return "() => {" + prelude + "\ntry {" + body + "\n} catch (e) { return null; }\n}"


def action_text(action: dict[str, object]) -> str:
    """A solver's action as the model would write it (a Hermes ``<tool_call>`` block)."""
    call = {"name": action["tool"], "arguments": action["args"]}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
