"""The scripts the browser driver runs in pages (JavaScript, as Python strings).

Shipped into the sandbox with ``driver.py``; stdlib only.
"""

from __future__ import annotations

import json

ID_ATTRIBUTE = "data-tg-id"
"""The attribute that carries an element's id on the page (``axtree.ID_ATTRIBUTE`` is the same)."""

# Numbers every element once; a copy made by the page's scripts (same attribute) gets a new one.
MARK_JS = """() => {
  const attr = ATTR; let next = window.__tgNext || 1; const seen = new Set();
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    let id = el.getAttribute(attr);
    if (!id || seen.has(id)) { id = String(next++); el.setAttribute(attr, id); }
    seen.add(id); if (el.shadowRoot) walk(el.shadowRoot); } };
  walk(document); window.__tgNext = next;
  const d = document.scrollingElement || document.documentElement; const scrollable = [];
  for (const el of document.body ? document.body.querySelectorAll('*') : []) {
    if (scrollable.length >= 50) break;
    if (el.scrollHeight > el.clientHeight + 1 || el.scrollWidth > el.clientWidth + 1) {
      const style = getComputedStyle(el);
      if (/(auto|scroll)/.test(style.overflowY + style.overflowX)) scrollable.push(el.getAttribute(attr));
    }
  }
  return {x: Math.round(window.scrollX), y: Math.round(window.scrollY), w: window.innerWidth, scrollable,
          h: window.innerHeight, sw: d ? d.scrollWidth : 0, sh: d ? d.scrollHeight : 0, title: document.title};
}""".replace("ATTR", json.dumps(ID_ATTRIBUTE))
# Counts what should open a tab (window.open, a link or form with a target) so that the driver
# knows when to wait for the new tab's page event; listeners run last and skip prevented clicks.
POPUP_HOOK_JS = """(() => {
  const bump = () => { window.__tgPopup = (window.__tgPopup || 0) + 1; };
  const away = (t) => !!t && !['_self', '_parent', '_top'].includes(String(t).toLowerCase());
  const open = window.open;
  window.open = function (...args) { bump(); return open.apply(this, args); };
  window.addEventListener('click', (e) => {
    const a = !e.defaultPrevented && e.target && e.target.closest ? e.target.closest('a[href], area[href]') : null;
    if (a && away(a.target)) bump(); });
  window.addEventListener('submit', (e) => { if (!e.defaultPrevented && away(e.target.target)) bump(); });
  // what only a rendered frame delivers: animation-frame callbacks still to run, and observers of
  // layout (their callbacks come with a frame); the settling waits for a frame only when there are some
  const waiting = new Set();
  const raf = window.requestAnimationFrame, caf = window.cancelAnimationFrame;
  window.requestAnimationFrame = function (callback) {
    const id = raf.call(window, (t) => { waiting.delete(id); return callback(t); });
    waiting.add(id); return id;
  };
  window.cancelAnimationFrame = function (id) { waiting.delete(id); return caf.call(window, id); };
  window.__tgFramesWaiting = () => waiting.size;
  for (const name of ['ResizeObserver', 'IntersectionObserver']) {
    const Observer = window[name];
    if (Observer) window[name] = class extends Observer {
      constructor(...args) { super(...args); window.__tgObserved = true; } };
  }
  // listeners of events a frame dispatches (scrolling, resizing, animations, transitions)
  const framed = ['scroll', 'scrollend', 'resize', 'animationstart', 'animationiteration', 'animationend',
    'animationcancel', 'transitionrun', 'transitionstart', 'transitionend', 'transitioncancel'];
  const listen = EventTarget.prototype.addEventListener;
  EventTarget.prototype.addEventListener = function (type, ...rest) {
    if (framed.includes(String(type).toLowerCase())) window.__tgObserved = true;
    return listen.call(this, type, ...rest);
  };
  for (const proto of [HTMLElement.prototype, SVGElement.prototype, Document.prototype, Window.prototype]) {
    for (const type of framed) {
      const d = Object.getOwnPropertyDescriptor(proto, 'on' + type);
      if (d && d.set && d.configurable) Object.defineProperty(proto, 'on' + type, {...d,
        set(value) { window.__tgObserved = true; d.set.call(this, value); }});
    }
  }
})();"""
# One frame for the page's own handlers to run; answers (and resets) the tab-opening count and,
# in the same round trip, marks the page for the observation that follows. With ``quick``, a page
# with no animation-frame callback waiting, no layout observer, no listener of an event a frame
# dispatches (scroll, resize, animation, transition) and no child frames gets one task turn
# instead of a frame: what its handlers queued (timers of 0 ms, promise callbacks) runs all
# the same, and there is nothing a frame would add (the accessibility tree does not wait for paint).
SETTLE_JS = """async (quick) => {
  const frameless = quick && !window.__tgObserved && window.frames.length === 0
    && window.__tgFramesWaiting && window.__tgFramesWaiting() === 0;
  await new Promise(done => frameless ? setTimeout(done, 0) : requestAnimationFrame(() => setTimeout(done, 0)));
  const popups = window.__tgPopup || 0; window.__tgPopup = 0;
  return {popups, view: (MARK)()};
}""".replace("MARK", MARK_JS)
SELECT_INFO_JS = (
    "el => ({tag: el.tagName.toLowerCase(), options: el.tagName === 'SELECT' ? "
    "[...el.options].map(o => ({label: o.label, value: o.value})) : []})"
)
SCROLL_JS = "([el, dx, dy]) => { (el || window).scrollBy({left: dx, top: dy, behavior: 'instant'}); }"
# Set-of-marks for screenshots: each listed element that is visible gets its [id] drawn at its
# top-left corner, in a layer outside the page's own elements (removed right after the shot).
MARKS_JS = """(ids) => {
  const layer = document.createElement('div'); layer.id = '__tg_marks';
  layer.style.cssText = 'position:absolute;left:0;top:0;width:0;height:0;z-index:2147483647;pointer-events:none';
  for (const id of ids) {
    const el = document.querySelector('[ATTR="' + id + '"]'); if (!el) continue;
    const r = el.getBoundingClientRect(); if (r.width < 1 || r.height < 1) continue;
    const tag = document.createElement('span'); tag.textContent = String(id);
    tag.style.cssText = 'position:absolute;font:bold 9px monospace;line-height:9px;padding:0 1px;' +
      'background:#ff0;color:#000;border:1px solid #c00;left:' + (r.left + scrollX) + 'px;top:' + (r.top + scrollY) + 'px';
    layer.appendChild(tag);
  }
  (document.body || document.documentElement).appendChild(layer);
  return layer.childElementCount;
}""".replace("ATTR", ID_ATTRIBUTE)
UNMARKS_JS = "() => { const m = document.getElementById('__tg_marks'); if (m) m.remove(); }"

EDITABLE_JS = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return false;
  if (el.isContentEditable) return true;
  const tag = el.tagName.toLowerCase();
  const kind = (el.getAttribute('type') || 'text').toLowerCase();
  return tag === 'textarea' || (tag === 'input' && !['button', 'checkbox', 'color', 'file', 'hidden',
    'image', 'radio', 'range', 'reset', 'submit'].includes(kind));
}"""
"""Whether the focused element takes typed text (``op_type_at``)."""
