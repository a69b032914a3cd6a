// The samples table: filters, sorting and text search without reloading; only the rows in view exist in the DOM.

const ROW_H = 28;
const COLUMNS = [['src', 'run'], ['bench', 'benchmark'], ['id', 'id'], ['q', 'question'], ['gold', 'gold'],
  ['pred', 'prediction'], ['acc', 'acc'], ['turns', 'turns'], ['calls', 'tool calls'], ['tok', 'tokens'],
  ['wall', 'wall s'], ['st', 'status']];
const table = {root: null, scroller: null, spacer: null, count: null, selects: {}, head: null, search: 0};

function options(field, labelAll) {
  const values = (M.rows.cats[field] || []).filter((v) => v !== '');
  return [['', labelAll], ...values.map((v) => [v, v])];
}

function buildSamplesView(root) {
  clear(root);
  const sel = (key, labelText, opts) => {
    const node = select(labelText, opts, filters[key], (v) => { filters[key] = v; refreshTable(); }, `filter-${key}`);
    table.selects[key] = node.querySelector('select');
    return node;
  };
  const search = el('input', {type: 'search', placeholder: 'question, prediction, trajectory…', testid: 'filter-text',
                              'aria-label': 'search'});
  let timer = null;
  search.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => { filters.text = search.value.trim(); refreshTable(); }, 200);
  });
  const deep = el('input', {type: 'checkbox', testid: 'filter-deep'});
  deep.checked = filters.deep;
  deep.addEventListener('change', () => { filters.deep = deep.checked; refreshTable(); });
  const bar = el('div', {class: 'filters'},
    sel('src', 'run', [['', 'all runs'], ...M.sources.map((s, i) => [String(i), s.label])]),
    sel('bench', 'benchmark / family', options('bench', 'all')),
    sel('correct', 'correct', [['', 'all'], ['yes', 'correct'], ['no', 'incorrect'], ['none', 'not scored']]),
    sel('fin', 'finish reason', options('fin', 'all')),
    sel('tool', 'tool status', [['', 'any'], ['ok', 'a call ok'], ['error', 'a call error'], ['timeout', 'a call timeout'],
      ['invalid', 'a call invalid'], ['infra', 'a call infra failure'], ['duplicate', 'a call duplicate'],
      ['none', 'no tool calls']]),
    sel('meth', 'method', options('meth', 'all')),
    sel('st', 'status', [['', 'all'], ['ok', 'ok'], ['failed', 'failed']]),
    el('label', null, 'search', search),
    el('label', null, 'in trajectories', deep));
  table.count = el('div', {class: 'muted', testid: 'samples-count'});
  table.head = el('div', {class: 'grid-head', role: 'row'}, COLUMNS.map(([key, text]) => el('span', {
    text, role: 'columnheader', data: {key}, title: 'sort', onclick: () => sortBy(key)})));
  table.spacer = el('div');
  table.scroller = el('div', {class: 'scroller', testid: 'samples-table', role: 'table'}, table.spacer);
  table.scroller.addEventListener('scroll', () => requestAnimationFrame(renderRows));
  append(root, [bar, table.count, table.head, table.scroller]);
}

function sortBy(key) {
  if (sortKey === key) sortDir = -sortDir; else { sortKey = key; sortDir = 1; }
  for (const span of table.head.children) span.classList.toggle('sorted', span.dataset.key === sortKey);
  refreshTable();
}

function setCount(text) {
  table.count.textContent = text;
  table.count.dataset.shown = String(shown.length);
  table.count.dataset.total = String(N);
}

async function refreshTable() {
  const ticket = ++table.search;
  applyFilters(null);
  const deepSearch = filters.text !== '' && filters.deep && M.chunks.length > 0;
  setCount(`${shown.length} of ${N} samples` + (deepSearch ? ' (searching trajectories…)' : ''));
  table.count.dataset.busy = deepSearch ? '1' : '';
  table.scroller.scrollTop = 0;
  renderRows();
  if (!deepSearch) return;
  const hits = await searchTrajectories((done, total) => {
    if (ticket === table.search) setStatus(`searching trajectories: ${done}/${total} chunks`);
  });
  if (ticket !== table.search) return;  // a newer filter replaced this search
  applyFilters(hits);
  setStatus('');
  setCount(`${shown.length} of ${N} samples`);
  table.count.dataset.busy = '';
  renderRows();
}

function cellsOf(i) {
  const acc = COL.acc[i];
  return [label(i), val('bench', i), sampleName(i), val('q', i), val('gold', i), val('pred', i),
    acc === null ? '–' : num(acc, 2), num(COL.turns[i]), num(COL.calls[i]), num(COL.tok[i]),
    COL.wall[i] === null ? '–' : num(COL.wall[i], 2), val('st', i) || 'ok'];
}

function renderRows() {
  const sc = table.scroller;
  if (!sc) return;
  table.spacer.style.height = `${shown.length * ROW_H}px`;
  for (const node of [...sc.querySelectorAll('.grid-row')]) node.remove();
  const first = Math.max(0, Math.floor(sc.scrollTop / ROW_H) - 5);
  const last = Math.min(shown.length, first + Math.ceil((sc.clientHeight || 600) / ROW_H) + 10);
  const frag = document.createDocumentFragment();
  for (let k = first; k < last; k++) {
    const i = shown[k];
    const c = correct(i);
    const row = el('div', {class: 'grid-row', role: 'row', testid: 'sample-row', data: {row: i},
                           onclick: () => { location.hash = `#t=${i}`; }},
      cellsOf(i).map((text, j) => el('span', {title: j >= 3 && j <= 5 ? text : null,
        class: j === 6 && c !== null ? (c ? 'ok' : 'bad') : null}, shownText(String(text)))));
    row.style.top = `${k * ROW_H}px`;
    frag.appendChild(row);
  }
  sc.appendChild(frag);
}

function showSamplesOf(index) {
  filters.src = String(index);
  if (table.selects.src) table.selects.src.value = filters.src;
  location.hash = '#samples';
  refreshTable();
}
