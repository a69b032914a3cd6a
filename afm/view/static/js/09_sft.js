// An SFT set: its totals (and the mask report's), then its records; a record opens with its trained and masked
// spans marked (observations and the whitespace around them are never trained on).

const SFT_LIST = 200;

function renderSFT(root) {
  clear(root);
  const srcs = M.sources.map((s, i) => i).filter((i) => M.sources[i].kind === 'sft');
  if (!srcs.length) {
    root.appendChild(el('p', {text: 'No SFT set: give afm view the folder afm data convert wrote (dataset_info.json).'}));
    return;
  }
  for (const s of srcs) {
    const info = M.sources[s];
    const card = el('div', {class: 'card', testid: 'sft-source'},
      el('h2', null, `${info.label} `, el('span', {class: 'muted', text: `(${info.n} records)`})),
      el('div', {class: 'path', text: info.path}));
    for (const block of info.overview) card.appendChild(renderBlock(block));
    const rows = [...Array(N).keys()].filter((i) => COL.src[i] === s);
    const list = el('div', {class: 'list', testid: 'sft-records'}, rows.slice(0, SFT_LIST).map((i) => el('div', {
      class: 'item', testid: 'sft-record', onclick: () => { location.hash = `#t=${i}`; }},
    el('span', {class: 'muted', text: `#${val('qid', i)}`}), el('span', {text: val('q', i)}),
    el('span', {class: 'muted', text: `${num(COL.calls[i])} tool calls`}))));
    append(card, [el('h3', {text: rows.length > SFT_LIST ? `The first ${SFT_LIST} records` : 'Records'}), list,
      el('button', {text: 'all records in the samples table', onclick: () => showSamplesOf(s)})]);
    root.appendChild(card);
  }
}
