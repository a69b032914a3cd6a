// Start: decode the manifest, build the views, follow the address's #fragment (#samples, #t=ROW, #cmp=A,B,...).

const VIEWS = {overview: 'Runs', samples: 'Samples', compare: 'Compare', rl: 'RL', sft: 'SFT'};
const navLinks = {};
const built = new Set();

function setStatus(text) {
  const node = document.getElementById('status');
  if (node) node.textContent = text;
}

function showView(name, tab) {
  for (const v of ['overview', 'samples', 'traj', 'compare', 'rl', 'sft']) document.getElementById(`view-${v}`).hidden = v !== name;
  for (const [v, a] of Object.entries(navLinks)) a.classList.toggle('on', v === (tab || name));
}

async function route() {
  const hash = location.hash.slice(1);  // #cmp= decodes its own question key
  const at = hash.indexOf('=');
  const name = at < 0 ? hash : hash.slice(0, at);
  const arg = at < 0 ? '' : hash.slice(at + 1);
  const root = (v) => document.getElementById(`view-${v}`);
  switch (name) {
    case 'samples':
      showView('samples');
      renderRows();
      break;
    case 't':
      showView('traj', 'samples');
      await renderDetailView(root('traj'), Number(arg));
      break;
    case 'cmp':
    case 'compare':
      showView('compare');
      renderCompare(root('compare'), arg);
      break;
    case 'rl':
      showView('rl');
      renderRL(root('rl'), arg);
      break;
    case 'sft':
      showView('sft');
      if (!built.has('sft')) { renderSFT(root('sft')); built.add('sft'); }
      break;
    default:
      showView('overview');
      if (!built.has('overview')) { renderOverview(root('overview')); built.add('overview'); }
  }
}

function buildNav() {
  const nav = clear(document.getElementById('nav'));
  const present = {overview: true, samples: true, compare: scoredSources().length >= 2, rl: rlSources().length > 0,
    sft: M.sources.some((s) => s.kind === 'sft')};
  for (const [v, text] of Object.entries(VIEWS)) {
    if (!present[v]) continue;
    navLinks[v] = el('a', {href: `#${v}`, text, testid: `nav-${v}`});
    nav.appendChild(navLinks[v]);
  }
}

async function main() {
  try {
    initRows(await blockJSON('afm-m'));
    document.getElementById('app').hidden = false;
    buildNav();
    buildSamplesView(document.getElementById('view-samples'));
    applyFilters(null);
    setCount(`${shown.length} of ${N} samples`);
    window.addEventListener('hashchange', () => { route(); });
    await route();
    setStatus(`${N} samples from ${M.sources.length} source${M.sources.length === 1 ? '' : 's'}`);
    document.body.dataset.readyAt = performance.now().toFixed(1);  // benchmarks/bench_view.py reads it
    document.body.dataset.ready = '1';
  } catch (err) {
    document.getElementById('app').hidden = false;
    setStatus(`this page could not be read: ${err && err.message ? err.message : err}`);
    throw err;
  }
}

main();
