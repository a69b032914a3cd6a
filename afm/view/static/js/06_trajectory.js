// One trajectory: its facts and reward, then the CoA block by block (or the text with its masked spans, or the
// tokens shaded by log-probability). Used alone (#t=ROW) and side by side (compare, RL groups).

const PART_LABEL = {think: 'think', plan: 'plan', reflection: 'reflection', suggested_answer: 'suggested answer',
  double_check: 'verification (double check)', answer: 'answer',
  observation: 'observation · inserted by the environment · not trained (mask 0)'};
const REWARD_ORDER = ['score', 'acc', 'format_ok', 'overlong_penalty', 'method', 'infra_error', 'tests_from', 'pred',
  'reward_error', 'error', 'format_problems', 'data_source'];
const IDS_SOURCE = {sampled: 'sampled: the ids the model sampled (token in, token out)',
  retokenized: 'retokenized: the engine returned no ids, so they were re-tokenized from the text'};

function tagOf(index) { return index < 0 ? ['text', 'text'] : M.tags[index]; }

function callBadges(call) {
  if (!call) return [];
  const out = [];
  if (call.status) out.push(el('span', {class: `badge s-${call.status}`, testid: 'tool-status', text: call.status}));
  if (call.latency !== null && call.latency !== undefined) out.push(el('span', {class: 'badge', text: `${call.latency.toFixed(2)} s`}));
  if (call.truncated) out.push(el('span', {class: 'badge s-error', text: 'observation truncated'}));
  if (call.infra) out.push(el('span', {class: 'badge s-infra', text: 'infrastructure failure'}));
  if (call.retries) out.push(el('span', {class: 'badge', text: `${call.retries} infra retries`}));
  if (call.obs_tokens !== null && call.obs_tokens !== undefined) out.push(el('span', {class: 'badge', text: `observation ${call.obs_tokens} tokens`}));
  return out;
}

function coaBlocks(detail) {
  const text = detail.text || '';
  const parts = detail.parts || [];
  const calls = detail.calls || [];
  const out = [];
  let k = 0;
  for (let p = 0; p < parts.length; p += 6) {
    const [tag, start, end, bodyStart, bodyEnd, closed] = parts.slice(p, p + 6);
    const [name, kind] = tagOf(tag);
    const body = text.slice(bodyStart, bodyEnd);
    if (kind === 'text' && !body.trim()) continue;
    let labelNodes;
    let testid = 'part';
    if (kind === 'tool') {
      const call = calls[k++];
      labelNodes = [`tool call · ${name}`, ...callBadges(call)];
      testid = 'tool-call';
    } else if (kind === 'observation') {
      labelNodes = [PART_LABEL.observation];
      testid = 'observation';
    } else {
      labelNodes = [kind === 'text' ? 'text outside tags' : (PART_LABEL[name] || name)];
    }
    if (!closed) labelNodes.push(el('span', {class: 'badge s-error', text: 'not closed'}));
    const cls = kind === 'tool' ? 'tool' : (kind === 'observation' ? 'observation' : name);
    const block = el('div', {class: `block k-${cls}`, testid, data: {tag: name, start, end}},
      el('div', {class: 'label'}, labelNodes), pre(body.replace(/^\n+|\n+$/g, '')));
    if (kind === 'tool' && calls[k - 1] && calls[k - 1].error) {
      block.appendChild(el('details', null, el('summary', {class: 'muted', text: 'the error the tool runner recorded'}),
        el('pre', {class: 'bad', text: calls[k - 1].error})));
    }
    out.push(block);
  }
  return out;
}

function maskView(detail) {
  const text = detail.text || '';
  const mask = detail.mask || [];
  const box = el('div', {class: 'maskview', testid: 'mask-view'});
  const body = el('pre');
  let pos = 0, masked = 0;
  const trained = (a, b) => el('span', {class: 'trained', testid: 'trained-span', title: 'trained on (mask 1)'},
    shownText(text.slice(a, b)));
  for (let m = 0; m < mask.length; m += 2) {
    if (mask[m] > pos) body.appendChild(trained(pos, mask[m]));
    body.appendChild(el('span', {class: 'masked', testid: 'masked-span', title: 'inserted by the environment: not trained (mask 0)'},
      shownText(text.slice(mask[m], mask[m + 1]))));
    masked += mask[m + 1] - mask[m];
    pos = mask[m + 1];
  }
  if (pos < text.length) body.appendChild(trained(pos, text.length));
  box.appendChild(el('div', {class: 'legend', text: `green, trained on (mask 1): ${text.length - masked} characters; ` +
    `grey and hatched, not trained (observations and the whitespace around them, mask 0): ${masked} characters`}));
  box.appendChild(body);
  return box;
}

async function tokenView(i, detail) {
  const {ids, lps} = await tokensOf(COL.d[i]);
  const src = source(i);
  const vocab = src.vocab !== null && src.vocab !== undefined ? await vocabOf(src.vocab) : null;
  const box = el('div', {class: 'tokens', testid: 'token-view'});
  const legend = el('div', {class: 'legend'}, lps ? 'Shade: the darker, the less likely the model found its token ' +
    '(p = exp(logprob)). ' : 'This record has no log-probabilities (its backend returned none). ',
  'Hatched: observation tokens (mask 0, not trained). Hover a token for its id, text and log-probability.',
  vocab ? '' : ' No tokenizer was found for this run (afm view --tokenizer): tokens show their ids.');
  let pos = 0;
  for (const [kind, , , n] of detail.segs || []) {
    const dec = new TextDecoder('utf-8');  // one segment's tokens decode as one byte stream
    let lastSpan = null;
    for (let t = pos; t < pos + n; t++) {
      const id = ids[t];
      const bytes = vocab ? vocab.get(id) : null;
      const text = bytes ? dec.decode(bytes, {stream: true}) : `⟨${id}⟩`;
      const lp = lps && lps[t] !== NO_LOGPROB ? lps[t] / 1000 : null;
      const p = lp === null ? null : Math.exp(lp);
      const span = el('span', {class: kind === 1 ? 'tok masked' : 'tok', testid: 'token', text,
        data: {id, lp: lp === null ? '' : lp},
        title: `id ${id} · ${JSON.stringify(text)} · ` + (lp === null ? 'no logprob' :
          `logprob ${lp.toFixed(3)} (p ${p.toFixed(3)})`) + (kind === 1 ? ' · observation: mask 0, not trained' : '')});
      if (kind === 0 && p !== null) span.style.backgroundColor = `rgba(214, 69, 30, ${(0.85 * (1 - p)).toFixed(3)})`;
      box.appendChild(span);
      lastSpan = span;
    }
    const rest = dec.decode();
    if (rest && lastSpan) lastSpan.textContent += rest;
    pos += n;
  }
  return [legend, box];
}

function rewardTable(detail, i) {
  const r = detail.reward || {};
  const pairs = REWARD_ORDER.filter((k) => k in r).map((k) => [k, cellText(r[k])]);
  const adv = detail.advantage;
  if (adv && adv.value !== null && adv.value !== undefined) {
    pairs.push(['advantage', `${adv.value.toFixed(3)}` + (adv.computed ? ' (GRPO, computed here from the group\'s ' +
      'scores: the dump has none)' : ' (from the dump)')]);
  }
  for (const [k, v] of Object.entries(detail.extra || {})) if (!(k in r) && k !== 'step' && k !== 'score') pairs.push([k, cellText(v)]);
  if (!pairs.length) return el('p', {class: 'muted', text: source(i).kind === 'sft' ? 'SFT records have no reward.' : 'no reward recorded'});
  const t = kvTable(pairs);
  t.dataset.testid = 'reward';
  return t;
}

function facts(i, detail) {
  const d = detail;
  const items = [['run', `${label(i)} (${source(i).kind})`], ['benchmark', val('bench', i)], ['sample', sampleName(i)],
    ['status', (val('st', i) || 'ok') + (val('fail', i) ? ` (failure: ${val('fail', i)})` : '')],
    ['finish reason', d.finish || val('fin', i) || '–'], ['turns', num(COL.turns[i])], ['tool calls', num(COL.calls[i])]];
  if (d.tokens) items.push(['tokens', `prompt ${num(d.tokens.prompt)} · model ${d.tokens.model} · observation ${d.tokens.observation}`]);
  if (d.chars) items.push(['characters', `trained ${d.chars.trained} · masked ${d.chars.masked}`]);
  if (COL.wall[i] !== null) items.push(['wall', `${num(COL.wall[i], 2)} s`]);
  if (d.ids_source) items.push(['ids_source', IDS_SOURCE[d.ids_source] || d.ids_source]);
  if (d.meta && d.meta.prompt_key) items.push(['prompt', `${d.meta.prompt_key} ${d.meta.prompt_version || ''}`]);
  if (d.failure) items.push(['failure', d.failure]);
  if (d.record_error || d.error) items.push(['error', d.record_error || d.error]);
  return el('div', {class: 'facts', testid: 'facts'}, items.map(([k, v]) => el('div', null, el('b', {text: `${k}: `}), v)));
}

// One line for side-by-side panes: what differs between two trajectories of the same question.
function summaryLine(i, detail, prediction) {
  const bits = [];
  if (COL.acc[i] !== null) bits.push(`acc ${num(COL.acc[i], 2)}`);
  if (COL.score[i] !== null) bits.push(`score ${num(COL.score[i], 3)}`);
  if (COL.adv[i] !== null) bits.push(`advantage ${num(COL.adv[i], 3)}` + (detail.advantage && detail.advantage.computed ? ' (GRPO, computed)' : ''));
  bits.push(`prediction ${prediction}`, `finish ${detail.finish || val('fin', i) || '–'}`, `${num(COL.calls[i])} tool calls`);
  if (detail.tokens) bits.push(`${detail.tokens.model + detail.tokens.observation} tokens`);
  if (COL.wall[i] !== null) bits.push(`${num(COL.wall[i], 2)} s`);
  return el('p', {class: 'summary', testid: 'summary', text: bits.join(' · ')});
}

async function renderTrajectory(root, i, opts = {}) {
  clear(root);
  const d = COL.d[i];
  const box = el('div', {class: 'traj', testid: 'traj', data: {row: i}});
  root.appendChild(box);
  if (d === null) {
    box.appendChild(el('p', {text: 'This sample has no details.'}));
    return;
  }
  box.appendChild(el('p', {class: 'muted', text: 'loading…'}));
  const detail = await detailOf(d);
  clear(box);
  const prediction = detail.pred === null || detail.pred === undefined ? '–' : String(detail.pred);
  if (opts.compact) {
    box.appendChild(summaryLine(i, detail, prediction));
    box.appendChild(el('details', null, el('summary', {class: 'muted', text: 'facts and reward breakdown'}),
      facts(i, detail), rewardTable(detail, i)));
  } else {
    box.appendChild(el('h2', {text: `${label(i)} · ${val('bench', i)} · ${sampleName(i)}`}));
    box.appendChild(facts(i, detail));
    box.appendChild(rewardTable(detail, i));
    box.appendChild(el('div', {class: 'qa'},
      el('b', {text: 'question'}), pre(detail.question || val('q', i), {testid: 'question'}),
      el('b', {text: 'gold'}), pre(detail.gold || '–'),
      el('b', {text: 'prediction'}), pre(prediction, {testid: 'prediction'})));
    if (detail.prompt) box.appendChild(el('details', null, el('summary', {text: 'the prompt'}), pre(detail.prompt)));
  }
  if (detail.text === null || detail.text === undefined) {
    box.appendChild(el('p', {class: 'muted', testid: 'no-trajectory', text: 'The trajectory was not kept: run afm eval run ' +
      'with --keep-trajectories to see it here.'}));
    return;
  }
  const content = el('div', {class: 'content'});
  const modes = [['coa', 'CoA'], ['mask', 'trained / masked']];
  if (source(i).has_ids && (detail.segs || []).length) modes.push(['tokens', 'tokens']);
  const buttons = {};
  const show = async (mode) => {
    for (const [m, b] of Object.entries(buttons)) b.classList.toggle('on', m === mode);
    clear(content);
    if (mode === 'coa') append(content, coaBlocks(detail));
    else if (mode === 'mask') content.appendChild(maskView(detail));
    else append(content, await tokenView(i, detail));
  };
  const bar = el('div', {class: 'modes'}, el('span', {class: 'muted', text: 'show: '}),
    modes.map(([m, text]) => (buttons[m] = el('button', {text, testid: `mode-${m}`, onclick: () => show(m)}))));
  append(box, [bar, content]);
  await show(opts.mode || (source(i).kind === 'sft' ? 'mask' : 'coa'));
}

async function renderDetailView(root, i) {
  clear(root);
  if (!(Number.isInteger(i) && i >= 0 && i < N)) {
    root.appendChild(el('p', {text: 'No such sample in this page.'}));
    return;
  }
  const k = shown.indexOf(i);
  const nav = el('div', {class: 'modes'},
    el('button', {text: '← samples', testid: 'back', onclick: () => { location.hash = '#samples'; }}),
    el('button', {text: 'previous', disabled: k <= 0 ? 'disabled' : null, onclick: () => { location.hash = `#t=${shown[k - 1]}`; }}),
    el('button', {text: 'next', disabled: k < 0 || k >= shown.length - 1 ? 'disabled' : null,
                  onclick: () => { location.hash = `#t=${shown[k + 1]}`; }}),
    el('span', {class: 'muted', text: k >= 0 ? `${k + 1} of ${shown.length} in the table` : ''}));
  const body = el('div');
  append(root, [nav, body]);
  await renderTrajectory(body, i);
}
