// RL rollouts by step (verl's rollout and validation dumps): reward per step, the groups of one step, and the
// rollouts of one prompt side by side with their rewards and advantages.

function rlSources() { return M.sources.map((s, i) => i).filter((i) => ['rollouts', 'validation'].includes(M.sources[i].kind)); }

function rowsOfStep(src, step) {
  const out = [];
  for (let i = 0; i < N; i++) if (COL.src[i] === src && COL.step[i] === step) out.push(i);
  return out;
}

function renderRL(root, arg) {
  clear(root);
  const srcs = rlSources();
  if (!srcs.length) {
    root.appendChild(el('p', {text: 'No RL dumps: give afm view a ROLLOUT_DATA_DIR or VAL_DATA_DIR folder.'}));
    return;
  }
  const [src, step, grp] = (arg || '').split(',').map((x) => (x === '' || x === undefined ? null : Number(x)));
  for (const s of srcs) {
    const info = M.sources[s];
    const card = el('div', {class: 'card', testid: 'rl-source', data: {src: s}},
      el('h2', null, `${info.label} `, el('span', {class: 'muted', text: `(${info.kind}: ${info.n} samples)`})),
      el('div', {class: 'path', text: info.path}));
    for (const block of info.overview.filter((b) => b.chart)) card.appendChild(renderBlock(block));
    const steps = [...new Set([...Array(N).keys()].filter((i) => COL.src[i] === s).map((i) => COL.step[i]))].sort((x, y) => x - y);
    card.appendChild(el('div', {class: 'modes'}, el('span', {class: 'muted', text: 'step: '}),
      steps.map((st) => el('button', {text: String(st), testid: 'rl-step', class: s === src && st === step ? 'on' : null,
        onclick: () => { location.hash = `#rl=${s},${st}`; }}))));
    if (s === src && step !== null) card.appendChild(groupsOf(s, step, grp));
    root.appendChild(card);
  }
  if (src !== null && step !== null && grp !== null) root.appendChild(groupSide(src, step, grp));
}

function groupsOf(src, step, open) {
  const rows = rowsOfStep(src, step);
  const groups = new Map();
  for (const i of rows) {
    if (!groups.has(COL.grp[i])) groups.set(COL.grp[i], []);
    groups.get(COL.grp[i]).push(i);
  }
  const box = el('div', {class: 'list', testid: 'rl-groups'});
  for (const [g, members] of groups) {
    const scores = members.map((i) => COL.score[i]).filter((x) => x !== null);
    const mean = scores.length ? scores.reduce((a, b) => a + b, 0) / scores.length : null;
    box.appendChild(el('div', {class: g === open ? 'item on' : 'item', testid: 'rl-group', data: {grp: g},
      onclick: () => { location.hash = `#rl=${src},${step},${g}`; }},
    el('span', {class: 'muted', text: `group ${g}`}), el('span', {text: val('q', members[0])}),
    el('span', {class: 'muted', text: `rewards ${scores.map((x) => num(x, 2)).join(' ')} (mean ${num(mean, 2)})`})));
  }
  return el('div', null, el('h3', {text: `step ${step}: ${groups.size} groups, ${rows.length} rollouts`}), box);
}

function groupSide(src, step, grp) {
  const members = rowsOfStep(src, step).filter((i) => COL.grp[i] === grp).sort((x, y) => COL.k[x] - COL.k[y]);
  const side = el('div', {class: 'side', testid: 'rl-side'});
  for (const i of members) {
    const body = el('div');
    const adv = COL.adv[i];
    side.appendChild(el('div', {testid: 'rl-rollout'},
      el('h3', {text: `rollout #${COL.k[i]}: reward ${num(COL.score[i], 3)}` + (COL.acc[i] !== null ? `, acc ${num(COL.acc[i], 2)}` : '') +
        (adv !== null ? `, advantage ${num(adv, 3)}` : '')}), body));
    renderTrajectory(body, i, {compact: true});
  }
  return el('div', null, el('h3', {text: `step ${step}, group ${grp}: ${val('q', members[0] ?? 0)}`}), side);
}
