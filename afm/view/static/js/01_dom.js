// DOM helpers. Every string from the data goes into the page as text (textContent, title, value): never as markup.

function el(tag, props, ...kids) {
  const node = document.createElement(tag);
  if (props) {
    for (const [key, value] of Object.entries(props)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'text') node.textContent = String(value);
      else if (key === 'title') node.title = String(value);
      else if (key === 'hidden') node.hidden = true;
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else if (key === 'testid') node.dataset.testid = value;
      else if (key === 'data') for (const [k, v] of Object.entries(value)) node.dataset[k] = String(v);
      else node.setAttribute(key, String(value));  // only attribute names written in this script
    }
  }
  append(node, kids);
  return node;
}

function append(node, kids) {
  for (const kid of kids) {
    if (kid === null || kid === undefined || kid === false) continue;
    if (Array.isArray(kid)) append(node, kid);
    else if (kid instanceof Node) node.appendChild(kid);
    else node.appendChild(document.createTextNode(String(kid)));
  }
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...kids) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  for (const kid of kids) {
    if (kid === null || kid === undefined) continue;
    node.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return node;
}

function num(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  if (digits === undefined) return Number.isInteger(x) ? String(x) : x.toFixed(2);
  return x.toFixed(digits);
}

function select(label, options, value, onchange, testid) {
  const s = el('select', {testid, 'aria-label': label, onchange: () => onchange(s.value)});
  for (const [v, text] of options) {
    const o = el('option', {text});
    o.value = v;
    s.appendChild(o);
  }
  s.value = value;
  return el('label', null, label, s);
}

function kvTable(pairs) {
  const t = el('table', {class: 'kv'});
  for (const [k, v] of pairs) {
    t.appendChild(el('tr', null, el('td', {class: 'muted', text: k}), el('td', null, typeof v === 'string' ? shownText(v) : v)));
  }
  return t;
}

// Invisible and direction-changing characters (zero-width, bidi overrides, BOM, C0 controls but tab/newline) are
// shown as visible markers, so a trajectory's text cannot hide or reorder itself on screen.
const INVISIBLE = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f\u00ad\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g;

function shownText(text) {
  const frag = document.createDocumentFragment();
  let pos = 0;
  for (const m of String(text).matchAll(INVISIBLE)) {
    if (m.index > pos) frag.appendChild(document.createTextNode(text.slice(pos, m.index)));
    const code = m[0].codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
    frag.appendChild(el('span', {class: 'ctl', title: 'an invisible or direction-changing character', text: `U+${code}`}));
    pos = m.index + m[0].length;
  }
  if (pos < text.length) frag.appendChild(document.createTextNode(text.slice(pos)));
  return frag;
}

function pre(text, props) { return el('pre', props || null, shownText(text === null || text === undefined ? '' : String(text))); }
