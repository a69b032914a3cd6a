// The table's rows, as the manifest carries them: columns, categories as codes (afm/view/pack.py FIELDS).

let M = null;      // the manifest
let N = 0;         // rows
let COL = null;    // field -> array
const TOOL_BITS = {ok: 1, error: 2, timeout: 4, invalid: 8, infra: 16, duplicate: 32};
const SOLVED = 0.5;  // a sample counts as correct at acc >= 0.5 (afm.eval.metrics.SOLVED)

function initRows(manifest) {
  M = manifest;
  N = M.rows.n;
  COL = M.rows.cols;
}

// A row's value of a field (categories decoded).
function val(field, i) {
  const v = COL[field][i];
  const cats = M.rows.cats[field];
  return cats ? cats[v] : v;
}

function source(i) { return M.sources[COL.src[i]]; }
function label(i) { return source(i).label; }
function sampleName(i) {
  const kind = source(i).kind;
  if (kind === 'rollouts' || kind === 'validation') return `step ${COL.step[i]} · g${COL.grp[i]} #${COL.k[i]}`;
  if (kind === 'sft') return `record ${val('qid', i)}`;
  return `${val('qid', i)} #${COL.k[i]}`;
}
function qkey(i) { return `${val('bench', i)}\u0000${val('qid', i)}`; }
function correct(i) { const a = COL.acc[i]; return a === null ? null : a >= SOLVED; }

// The filters of the samples table; '' means any.
const filters = {src: '', bench: '', correct: '', fin: '', tool: '', meth: '', st: '', text: '', deep: true};
let sortKey = null, sortDir = 1;
let shown = new Int32Array(0);   // row indices after filtering and sorting

function passes(i, hits) {
  const f = filters;
  if (f.src !== '' && COL.src[i] !== Number(f.src)) return false;
  if (f.bench !== '' && val('bench', i) !== f.bench) return false;
  if (f.correct !== '') {
    const c = correct(i);
    if (f.correct === 'yes' && c !== true) return false;
    if (f.correct === 'no' && c !== false) return false;
    if (f.correct === 'none' && c !== null) return false;
  }
  if (f.fin !== '' && val('fin', i) !== f.fin) return false;
  if (f.meth !== '' && val('meth', i) !== f.meth) return false;
  if (f.st !== '' && (val('st', i) || 'ok') !== f.st) return false;
  if (f.tool !== '') {
    if (f.tool === 'none') { if (COL.calls[i]) return false; }
    else if (!((COL.ts[i] || 0) & TOOL_BITS[f.tool])) return false;
  }
  if (f.text !== '') {
    const rx = textRegex();
    const own = rx.test(val('q', i)) || rx.test(val('pred', i)) || rx.test(val('gold', i)) || rx.test(val('qid', i));
    if (!own && !(hits && COL.d[i] !== null && hits.has(COL.d[i]))) return false;
  }
  return true;
}

let _rx = null, _rxText = null;
function textRegex() {
  if (_rxText !== filters.text) {
    _rxText = filters.text;
    _rx = new RegExp(filters.text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i');
  }
  return _rx;
}

function sortValue(field, i) {
  switch (field) {
    case 'src': return label(i);
    case 'id': return COL.step[i] !== null ? COL.step[i] * 1e6 + COL.grp[i] * 1e3 + COL.k[i] : val('qid', i);
    default: return val(field, i);
  }
}

function applyFilters(hits) {
  const out = [];
  for (let i = 0; i < N; i++) if (passes(i, hits)) out.push(i);
  if (sortKey) {
    const key = sortKey, dir = sortDir;
    const values = new Map(out.map((i) => [i, sortValue(key, i)]));
    out.sort((a, b) => {
      const x = values.get(a), y = values.get(b);
      if (x === y) return a - b;
      if (x === null || x === undefined || x === '') return 1;
      if (y === null || y === undefined || y === '') return -1;
      return (x < y ? -1 : 1) * dir;
    });
  }
  shown = Int32Array.from(out);
  return shown;
}

// Details whose trajectory text matches the search, read chunk by chunk (onProgress(done, total) between chunks).
async function searchTrajectories(onProgress) {
  const rx = textRegex();
  const hits = new Set();
  const total = M.chunks.length;
  for (let c = 0; c < total; c++) {
    const items = await textChunk(c);
    items.forEach((item, j) => {
      if ((item.text && rx.test(item.text)) || (item.prompt && rx.test(item.prompt))) hits.add(M.chunks[c][0] + j);
    });
    if (onProgress) onProgress(c + 1, total);
  }
  return hits;
}
