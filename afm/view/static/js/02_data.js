// The page's data: gzip-compressed, base64-encoded blocks in inert <script type="application/octet-stream">
// elements (afm/view/pack.py). The browser decompresses them itself; a block is read the first time it is needed.

function base64Bytes(text) {
  if (typeof Uint8Array.fromBase64 === 'function') return Uint8Array.fromBase64(text);
  const bin = atob(text);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

async function gunzip(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

// While the page still loads, an element is complete once the parser has moved past it (a sibling follows).
function whenParsed(id) {
  const node = document.getElementById(id);
  if (node && (node.nextElementSibling || document.readyState !== 'loading')) return Promise.resolve(node);
  return new Promise((resolve) => {
    document.addEventListener('DOMContentLoaded', () => resolve(document.getElementById(id)), {once: true});
  });
}

async function blockBytes(id) {
  const node = await whenParsed(id);
  if (!node) throw new Error(`the page has no data block ${id}`);
  return gunzip(base64Bytes(node.textContent.trim()));
}

const utf8 = new TextDecoder('utf-8');
async function blockJSON(id) { return JSON.parse(utf8.decode(await blockBytes(id))); }

const cache = {text: new Map(), tok: new Map(), vocab: new Map()};
function cached(map, key, make) {
  if (!map.has(key)) {
    const p = make();
    p.catch(() => map.delete(key));
    map.set(key, p);
  }
  return map.get(key);
}

// Which chunk holds detail d: chunks are [first, count] in order.
function chunkOf(d) {
  const chunks = M.chunks;
  let lo = 0, hi = chunks.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (chunks[mid][0] <= d) lo = mid; else hi = mid - 1;
  }
  return lo;
}

function textChunk(c) { return cached(cache.text, c, () => blockJSON(`afm-t${c}`)); }

async function detailOf(d) {
  const c = chunkOf(d);
  return (await textChunk(c))[d - M.chunks[c][0]];
}

// Token ids and log-probabilities of detail d: {ids: Int32Array, lps: Int16Array|null} (layout: pack.py).
async function tokensOf(d) {
  const c = chunkOf(d);
  const bytes = await cached(cache.tok, c, () => blockBytes(`afm-k${c}`));
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const count = view.getUint32(0, true);
  let pos = 4 + 4 * count + view.getUint32(4 + 4 * (d - M.chunks[c][0]), true);
  const n = view.getInt32(pos, true); pos += 4;
  const ids = new Int32Array(n);
  for (let i = 0; i < n; i++) ids[i] = view.getInt32(pos + 4 * i, true);
  pos += 4 * n;
  const m = view.getInt32(pos, true); pos += 4;
  let lps = null;
  if (m) {
    lps = new Int16Array(m);
    for (let i = 0; i < m; i++) lps[i] = view.getInt16(pos + 2 * i, true);
  }
  return {ids, lps};
}

const NO_LOGPROB = -32768;

// What each id spells: a Map id -> Uint8Array (a piece's text, or its raw bytes when it is part of a character).
function vocabOf(v) {
  return cached(cache.vocab, v, async () => {
    const data = await blockJSON(`afm-v${v}`);
    const enc = new TextEncoder();
    const map = new Map();
    data.ids.forEach((id, i) => {
      const p = data.pieces[i];
      map.set(id, typeof p === 'string' ? enc.encode(p) : Uint8Array.from(p));
    });
    return map;
  });
}
