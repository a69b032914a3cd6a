// Compare two runs on the questions both answered: which flipped either way, and the two trajectories side by side.
// A question counts as solved when its samples' mean acc is >= 0.5 (afm.eval.metrics.SOLVED).

const cmp = {a: null, b: null, bench: ''};

function scoredSources() {
  const has = new Set();
  for (let i = 0; i < N; i++) if (COL.acc[i] !== null) has.add(COL.src[i]);
  return M.sources.map((s, i) => i).filter((i) => has.has(i) && ['eval', 'infer'].includes(M.sources[i].kind));
}

function defaultPair(scored) {
  const byLabel = (name) => M.sources.findIndex((s) => s.label === name);
  if (M.compare) {
    const [a, b] = M.compare.map(byLabel);
    if (scored.includes(a) && scored.includes(b)) return [a, b];
  }
  return scored.length >= 2 ? scored.slice(-2) : [scored[0], scored[0]];
}

// qkey -> {rows: [...], mean} for one source
function questionsOf(src) {
  const out = new Map();
  for (let i = 0; i < N; i++) {
    if (COL.src[i] !== src || COL.acc[i] === null) continue;
    const key = qkey(i);
    if (!out.has(key)) out.set(key, {rows: [], sum: 0});
    const q = out.get(key);
    q.rows.push(i);
    q.sum += COL.acc[i];
  }
  for (const q of out.values()) { q.mean = q.sum / q.rows.length; q.rows.sort((x, y) => COL.k[x] - COL.k[y]); }
  return out;
}

function flips(a, b) {
  const qa = questionsOf(a), qb = questionsOf(b);
  const up = [], down = [];
  let shared = 0, solvedA = 0, solvedB = 0;
  for (const [key, x] of qa) {
    const y = qb.get(key);
    if (!y) continue;
    if (cmp.bench && val('bench', x.rows[0]) !== cmp.bench) continue;
    shared++;
    const sa = x.mean >= SOLVED, sb = y.mean >= SOLVED;
    solvedA += sa; solvedB += sb;
    if (!sa && sb) up.push([key, x, y]);
    if (sa && !sb) down.push([key, x, y]);
  }
  return {up, down, shared, solvedA, solvedB};
}

function renderCompare(root, arg) {
  clear(root);
  const scored = scoredSources();
  if (scored.length < 1) {
    root.appendChild(el('p', {text: 'Compare needs runs with scores (afm eval run folders).'}));
    return;
  }
  if (cmp.a === null) [cmp.a, cmp.b] = defaultPair(scored);
  let openKey = null;
  if (arg) {
    const [a, b, ...rest] = arg.split(',');
    if (scored.includes(Number(a)) && scored.includes(Number(b))) { cmp.a = Number(a); cmp.b = Number(b); }
    openKey = rest.length ? decodeURIComponent(rest.join(',')) : null;
  }
  const opts = scored.map((i) => [String(i), M.sources[i].label]);
  const benches = [...new Set([...Array(N).keys()].filter((i) => COL.src[i] === cmp.a).map((i) => val('bench', i)))];
  const go = (key) => { location.hash = `#cmp=${cmp.a},${cmp.b}` + (key ? `,${encodeURIComponent(key)}` : ''); };
  root.appendChild(el('div', {class: 'filters'},
    select('run A', opts, String(cmp.a), (v) => { cmp.a = Number(v); go(null); }, 'cmp-a'),
    select('run B', opts, String(cmp.b), (v) => { cmp.b = Number(v); go(null); }, 'cmp-b'),
    select('benchmark / family', [['', 'all'], ...benches.map((b) => [b, b])], cmp.bench,
      (v) => { cmp.bench = v; renderCompare(root, `${cmp.a},${cmp.b}`); }, 'cmp-bench')));
  const f = flips(cmp.a, cmp.b);
  const A = M.sources[cmp.a].label, B = M.sources[cmp.b].label;
  root.appendChild(el('p', {testid: 'cmp-summary', text: `${f.shared} questions in both runs; solved (mean acc ≥ 0.5): ` +
    `${A} ${f.solvedA}, ${B} ${f.solvedB}. Flipped: ${f.up.length} wrong in ${A} and right in ${B}, ` +
    `${f.down.length} right in ${A} and wrong in ${B}.`}));
  const list = (title, items, testid) => el('div', null, el('h3', {text: `${title} (${items.length})`, testid: `${testid}-title`}),
    el('div', {class: 'list', testid}, items.length ? items.map(([key, x, y]) => el('div', {
      class: key === openKey ? 'item on' : 'item', testid: 'flip-item', data: {qid: val('qid', x.rows[0])},
      onclick: () => go(key)},
    el('span', {class: 'muted', text: val('bench', x.rows[0])}), el('span', {text: val('q', x.rows[0])}),
    el('span', {class: 'muted', text: `${num(x.mean, 2)} → ${num(y.mean, 2)}`}))) : el('div', {class: 'item muted', text: 'none'})));
  root.appendChild(el('div', {class: 'cols2'},
    list(`wrong in ${A}, right in ${B}`, f.up, 'flip-up'), list(`right in ${A}, wrong in ${B}`, f.down, 'flip-down')));
  if (openKey) renderPair(root, openKey);
}

function renderPair(root, key) {
  const qa = questionsOf(cmp.a).get(key), qb = questionsOf(cmp.b).get(key);
  if (!qa || !qb) return;
  const pane = (q, src) => {
    const box = el('div', {testid: 'cmp-side'});
    const body = el('div');
    const pick = select('sample', q.rows.map((i) => [String(i), `#${COL.k[i]} (acc ${num(COL.acc[i], 2)})`]), String(q.rows[0]),
      (v) => renderTrajectory(body, Number(v), {compact: true}), null);
    append(box, [el('h3', {text: `${M.sources[src].label}: mean acc ${num(q.mean, 2)}`}), pick, body]);
    renderTrajectory(body, q.rows[0], {compact: true});
    return box;
  };
  root.appendChild(el('h3', {text: `Question: ${val('q', qa.rows[0])}`}));
  root.appendChild(el('div', {class: 'side', testid: 'cmp-pair'}, pane(qa, cmp.a), pane(qb, cmp.b)));
}
