// The "Runs" overview: each source's blocks (lines, tables, charts) as afm/view/overview.py describes them.

function renderBlock(block) {
  const wide = block.chart || (block.table && block.table.head.length > 3);
  const box = el('div', {class: wide ? 'block-ov wide' : 'block-ov'}, el('h3', {text: block.title || ''}));
  for (const line of block.lines || []) {
    box.appendChild(el('p', {class: String(line).startsWith('warning:') ? 'bad' : null, text: line}));
  }
  if (block.table) box.appendChild(dataTable(block.table.head, block.table.rows));
  if (block.chart) box.appendChild(lineChart(block.chart));
  return box;
}

function cellText(c) {
  if (c === null || c === undefined) return '–';
  if (typeof c === 'number' && !Number.isInteger(c)) return c.toPrecision(3);
  return String(c);
}

function dataTable(head, rows) {
  const t = el('table', {class: 'data'});
  t.appendChild(el('tr', null, head.map((h) => el('th', {text: h}))));
  for (const row of rows) t.appendChild(el('tr', null, row.map((c) => el('td', {text: cellText(c)}))));
  return t;
}

const PALETTE = ['#2357b5', '#2b8a3e', '#c26a12', '#7d4fb5', '#c0392b'];

// A small SVG line chart: x values, named series of y (null: no point).
function lineChart(chart, width = 560, height = 220) {
  const pad = {l: 46, r: 12, t: 12, b: 34};
  const xs = chart.x;
  const ys = chart.series.flatMap((s) => s.y).filter((y) => y !== null && y !== undefined);
  const root = svg('svg', {class: 'chart', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
                           'aria-label': chart.ylabel || 'chart'});
  if (!xs.length || !ys.length) {
    root.appendChild(svg('text', {x: 20, y: 30}, 'no values'));
    return root;
  }
  let lo = Math.min(0, ...ys), hi = Math.max(...ys);
  if (hi === lo) hi = lo + 1;
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  const sx = (x) => pad.l + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (width - pad.l - pad.r);
  const sy = (y) => height - pad.b - (y - lo) / (hi - lo) * (height - pad.t - pad.b);
  root.appendChild(svg('line', {x1: pad.l, y1: sy(lo), x2: width - pad.r, y2: sy(lo), stroke: '#ccc'}));
  root.appendChild(svg('line', {x1: pad.l, y1: pad.t, x2: pad.l, y2: height - pad.b, stroke: '#ccc'}));
  for (const y of [lo, (lo + hi) / 2, hi]) {
    root.appendChild(svg('text', {x: 4, y: sy(y) + 4}, y.toFixed(2)));
  }
  const ticks = xs.length <= 12 ? xs : xs.filter((_, i) => i % Math.ceil(xs.length / 12) === 0);
  for (const x of ticks) root.appendChild(svg('text', {x: sx(x) - 4, y: height - pad.b + 14}, String(x)));
  root.appendChild(svg('text', {x: width / 2 - 20, y: height - 4}, chart.xlabel || 'x'));
  chart.series.forEach((s, k) => {
    const color = PALETTE[k % PALETTE.length];
    const pts = xs.map((x, i) => [x, s.y[i]]).filter(([, y]) => y !== null && y !== undefined);
    if (pts.length > 1) {
      root.appendChild(svg('polyline', {fill: 'none', stroke: color, 'stroke-width': 2,
                                        points: pts.map(([x, y]) => `${sx(x)},${sy(y)}`).join(' ')}));
    }
    for (const [x, y] of pts) {
      root.appendChild(svg('circle', {cx: sx(x), cy: sy(y), r: 3, fill: color},
                           svg('title', {}, `${s.name} at ${chart.xlabel || 'x'} ${x}: ${y.toFixed(3)}`)));
    }
    root.appendChild(svg('text', {x: pad.l + 8 + 110 * k, y: pad.t + 10, fill: color}, s.name));
  });
  return root;
}

function renderOverview(root) {
  clear(root);
  root.appendChild(el('h2', {text: 'Runs'}));
  M.sources.forEach((s, index) => {
    const card = el('div', {class: 'card', testid: 'source-card', data: {kind: s.kind, src: index}},
      el('h2', null, `${s.label} `, el('span', {class: 'muted', text: `(${s.kind}, ${s.n} samples)`})),
      el('div', {class: 'path', text: s.path}),
      s.notes.map((n) => el('p', {class: 'muted', text: `note: ${n}`})),
      el('button', {text: 'show its samples', onclick: () => showSamplesOf(index)}),
      el('div', {class: 'blocks'}, s.overview.map(renderBlock)));
    root.appendChild(card);
  });
}
