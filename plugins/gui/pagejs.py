"""The scripts the browser driver runs in pages (JavaScript, as Python strings).

Shipped into the sandbox with ``driver.py``; stdlib only.
"""

from __future__ import annotations

import json

ID_ATTRIBUTE = "data-tg-id"
"""The attribute that carries an element's id on the page (``axtree.ID_ATTRIBUTE`` is the same)."""

# Numbers every element once; a copy made by the page's scripts (same attribute) gets a new one.
MARK_JS = """() => {
  const attr = ATTR; let next = window.__tgNext || 1; const seen = new Set(); let shadows = false;
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    let id = el.getAttribute(attr);
    if (!id || seen.has(id)) { id = String(next++); el.setAttribute(attr, id); }
    seen.add(id); if (el.shadowRoot) { shadows = true; walk(el.shadowRoot); } } };
  walk(document); window.__tgNext = next;
  const gen = window.__tgMarked ? window.__tgMarked(shadows) : null;
  const d = document.scrollingElement || document.documentElement; const scrollable = [];
  for (const el of document.body ? document.body.querySelectorAll('*') : []) {
    if (scrollable.length >= 50) break;
    if (el.scrollHeight > el.clientHeight + 1 || el.scrollWidth > el.clientWidth + 1) {
      const style = getComputedStyle(el);
      if (/(auto|scroll)/.test(style.overflowY + style.overflowX)) scrollable.push(el.getAttribute(attr));
    }
  }
  return {x: Math.round(window.scrollX), y: Math.round(window.scrollY), w: window.innerWidth, scrollable,
          h: window.innerHeight, sw: d ? d.scrollWidth : 0, sh: d ? d.scrollHeight : 0, title: document.title, gen};
}""".replace("ATTR", json.dumps(ID_ATTRIBUTE))
"""``gen`` in its answer: this marking's name (the document's and a count), which ``CALM_JS`` answers
with when nothing but a typed field changed since; null on a page without the init script."""
# Part of the init script: what can change the accessibility tree between two observations without
# the page's DOM changing is watched, so that after text is typed into a field the driver can tell
# whether anything but that field (its value, the focus) changed since the latest marking. Watched:
# DOM mutations, resources loading, CSS object-model edits, popovers; a page with shadow roots or
# custom elements (out of a document's mutation observer's sight), child frames or running
# animations is never calm. ``__tgMarked`` (end of MARK_JS) starts a new account and names it;
# ``__tgCalm(id)`` (SETTLE_JS, after typing into element ``id``) answers that name, and which
# element had the focus then, when the account is clean:
# - no mutation, load, style-sheet edit or popover since the marking;
# - the field is the focused element, a text field (not a password), holding at most 100 characters
#   on one line (the text of its value in the tree then only repeats the value);
# - no other element is named or described from the field or an element holding it
#   (``aria-labelledby``, ``aria-describedby``, a label holding it that labels something else);
# - no style rule selects on focus, a field's validity, a shown placeholder or ``:has()`` (their
#   styles can show or hide elements when the value or the focus changes), and every sheet's rules
#   can be read;
# - every other form control holds the value, check state and selection it held at the marking.
# What is not watched: a page script editing a style rule's declarations (``rule.style.x = ...``)
# during typing.
CALM_JS = """
  const token = Math.random().toString(36).slice(2);
  let count = 0, changed = true, opaque = false, styled = null, base = null;
  const touch = () => { changed = true; styled = null; };
  const watcher = new MutationObserver(touch);
  watcher.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  window.addEventListener('load', touch, true); window.addEventListener('error', touch, true);
  const watch = (proto, names, dark) => { for (const name of names) {
    const f = proto && proto[name];
    if (typeof f === 'function') proto[name] = function (...args) { touch(); if (dark) opaque = true; return f.apply(this, args); };
  } };
  watch(window.CSSStyleSheet && CSSStyleSheet.prototype, ['insertRule', 'deleteRule', 'addRule', 'removeRule', 'replace', 'replaceSync']);
  watch(HTMLElement.prototype, ['showPopover', 'hidePopover', 'togglePopover']);
  watch(Element.prototype, ['attachShadow'], true);
  watch(window.CustomElementRegistry && CustomElementRegistry.prototype, ['define'], true);
  const adopted = Object.getOwnPropertyDescriptor(Document.prototype, 'adoptedStyleSheets');
  if (adopted && adopted.set && adopted.configurable) Object.defineProperty(Document.prototype, 'adoptedStyleSheets',
    {...adopted, set(value) { touch(); adopted.set.call(this, value); }});
  const SELECTS = /:(focus|focus-within|focus-visible|placeholder-shown|valid|invalid|user-valid|user-invalid|in-range|out-of-range|blank|has|autofill|read-write|read-only)(?![\\w-])/i;
  const risky = (rules) => { for (const rule of rules) {
    if (rule.selectorText && SELECTS.test(rule.selectorText)) return true;
    if (rule.styleSheet && risky(rule.styleSheet.cssRules)) return true;
    if (rule.cssRules && risky(rule.cssRules)) return true;
  } return false; };
  const sheets = () => { try {
    for (const sheet of [...document.styleSheets, ...(document.adoptedStyleSheets || [])]) if (risky(sheet.cssRules)) return true;
    return false;
  } catch (e) { return true; } };  // a sheet from another origin: its rules cannot be read
  const controls = () => { const held = new Map();
    for (const el of document.querySelectorAll('input, textarea, select')) held.set(el, el.tagName === 'SELECT'
      ? [...el.options].map(o => o.selected ? 1 : 0).join('') : el.value + '\\u0000' + el.checked + el.indeterminate);
    return held; };
  const TEXT = ['text', 'search', 'email', 'url', 'tel', 'number'];
  window.__tgMarked = (shadows) => {
    watcher.takeRecords(); changed = false; count += 1; if (shadows) opaque = true;
    const focus = document.activeElement;
    base = {gen: token + ':' + count, held: controls(),
            focus: focus && focus !== document.body ? focus.getAttribute(ATTR) : null};
    return base.gen;
  };
  window.__tgCalm = (id) => {
    const was = base; base = null;
    if (!was || watcher.takeRecords().length || changed || opaque || window.frames.length) return null;
    if (document.getAnimations && document.getAnimations().length) return null;
    const el = document.querySelector('[' + ATTR + '="' + id + '"]');
    if (!el || document.activeElement !== el || el.shadowRoot) return null;
    const kind = el.tagName === 'INPUT' ? (el.getAttribute('type') || 'text').toLowerCase() : null;
    if (!(el.tagName === 'TEXTAREA' || TEXT.includes(kind))) return null;
    if (el.value.length > 100 || /[\\r\\n]/.test(el.value)) return null;
    const label = el.closest('label');
    if (label && label.control !== el) return null;
    for (const other of document.querySelectorAll('[aria-labelledby], [aria-describedby]')) {
      const refs = ((other.getAttribute('aria-labelledby') || '') + ' ' + (other.getAttribute('aria-describedby') || '')).split(/\\s+/);
      for (const ref of refs) { const named = ref && document.getElementById(ref);
        if (named && other !== el && named.contains(el)) return null; }
    }
    if (styled === null) styled = sheets();
    if (styled) return null;
    const held = controls();
    if (held.size !== was.held.size) return null;
    for (const [other, state] of was.held) if (other !== el && held.get(other) !== state) return null;
    return {gen: was.gen, focus: was.focus};
  };
""".replace("ATTR", json.dumps(ID_ATTRIBUTE))
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
  // listeners of events a frame dispatches (scrolling, resizing, animations, transitions), and of
  // events the browser queues as a task of their own after an action (the selection, the URL's
  // fragment, history, a <details> opening): the settling gives these a frame or a task turn
  const framed = ['scroll', 'scrollend', 'resize', 'animationstart', 'animationiteration', 'animationend',
    'animationcancel', 'transitionrun', 'transitionstart', 'transitionend', 'transitioncancel'];
  const tasked = ['selectionchange', 'hashchange', 'popstate', 'toggle', 'message'];
  const flag = (type) => {
    type = String(type).toLowerCase();
    if (framed.includes(type)) window.__tgObserved = true;
    else if (tasked.includes(type)) window.__tgTasked = true;
  };
  const listen = EventTarget.prototype.addEventListener;
  EventTarget.prototype.addEventListener = function (type, ...rest) {
    flag(type); return listen.call(this, type, ...rest);
  };
  for (const proto of [HTMLElement.prototype, SVGElement.prototype, Document.prototype, Window.prototype]) {
    for (const type of [...framed, ...tasked]) {
      const d = Object.getOwnPropertyDescriptor(proto, 'on' + type);
      if (d && d.set && d.configurable) Object.defineProperty(proto, 'on' + type, {...d,
        set(value) { flag(type); d.set.call(this, value); }});
    }
  }
  // work the page queued as tasks: timers (with when each is due) and, since the last settling,
  // messages, idle callbacks and scheduled tasks, whose delivery the page cannot be asked about
  const due = new Map();
  let posted = false;
  const timer = (name, repeat) => {
    const start = window[name];
    window[name] = function (callback, delay, ...args) {
      if (typeof callback !== 'function') { posted = true; return start.call(window, callback, delay, ...args); }
      const every = Math.max(Number(delay) || 0, 0);
      const id = start.call(window, function (...got) {
        if (repeat) due.set(id, performance.now() + every); else due.delete(id);
        return callback.apply(this, got);
      }, delay, ...args);
      due.set(id, performance.now() + every); return id;
    };
  };
  timer('setTimeout', false); timer('setInterval', true);
  for (const name of ['clearTimeout', 'clearInterval']) {
    const clear = window[name];
    window[name] = function (id) { due.delete(id); return clear.call(window, id); };
  }
  const posting = (owner, name) => {
    const send = owner && owner[name];
    if (typeof send === 'function') owner[name] = function (...args) { posted = true; return send.apply(this, args); };
  };
  posting(window, 'postMessage'); posting(window, 'requestIdleCallback');
  for (const kind of ['MessagePort', 'BroadcastChannel', 'Worker']) posting(window[kind] && window[kind].prototype, 'postMessage');
  if (window.scheduler) posting(window.scheduler, 'postTask');
  window.__tgTasksDue = () => {
    const any = posted; posted = false;
    const now = performance.now() + 1;
    for (const when of due.values()) if (when <= now) return true;
    return any;
  };
CALM})();""".replace("CALM", CALM_JS)
# One frame for the page's own handlers to run; answers (and resets) the tab-opening count and,
# in the same round trip, marks the page for the observation that follows. With ``quick``, a page
# with no animation-frame callback waiting, no layout observer, no listener of an event a frame
# dispatches (scroll, resize, animation, transition) and no child frames gets one task turn
# instead of a frame: what its handlers queued (timers of 0 ms, promise callbacks) runs all
# the same, and there is nothing a frame would add (the accessibility tree does not wait for paint).
# Such a page with no task queued either (no timer due, nothing posted since the last settling, no
# listener of an event the browser queues as a task) gets neither: its handlers have all run (an
# action's events are dispatched, and their promise callbacks run, before this script does), and a
# task turn right after an input event waits for the next frame anyway.
SETTLE_JS = """async ([quick, typed]) => {
  const queued = window.__tgTasksDue ? window.__tgTasksDue() : true;
  const frameless = quick && !window.__tgObserved && window.frames.length === 0
    && window.__tgFramesWaiting && window.__tgFramesWaiting() === 0;
  const wait = !frameless ? 'frame' : queued || window.__tgTasked ? 'task' : 'none';
  if (wait !== 'none')
    await new Promise(done => wait === 'task' ? setTimeout(done, 0) : requestAnimationFrame(() => setTimeout(done, 0)));
  const popups = window.__tgPopup || 0; window.__tgPopup = 0;
  const calm = typed !== null && window.__tgCalm ? window.__tgCalm(typed) : null;
  return {popups, wait, calm, view: (MARK)()};
}""".replace("MARK", MARK_JS)
"""Arguments ``[quick, typed]``: ``typed``, the id of the field text was just typed into (or null).
``wait`` in its answer: what the settling waited for (``frame``, ``task`` or ``none``); ``calm``:
``__tgCalm(typed)``'s answer (see ``CALM_JS``), taken after the wait and before the marking."""
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
