// Reading one page of a batch's items: never more than a page is read, whatever the batch's size.
//   every item, in index order    GET /v1/batches/{id}?offset=&limit=
//   failed ones (or failed first) the document's failed_indexes, read as pages of the document around them
//   one final status              GET /v1/batches/{id}/results?status=&after=  (finish order; the rest unread)
// A page: { items, from (its first position, null in finish order), total (null: unknown), next (where the next
// page starts, or null) }.
import { json, jsonLines } from "./api.js";

const GAP = 16; // failed items this close together are read in one page of the document

// The page of `view` ({ filter, failedFirst, size }) that starts at `start` (a position, or a seq in finish order).
export function readPage(path, view, start) {
  if (view.filter === "all" && !view.failedFirst) return everyItem(path, start, view.size);
  if (view.filter === "all") return failedThenRest(path, start, view.size);
  if (view.filter === "failed") return failedOnly(path, start, view.size);
  return withStatus(path, view.filter, start, view.size);
}

async function everyItem(path, offset, size) {
  const doc = await json(`${path}?offset=${offset}&limit=${size}`);
  const total = doc.counts.total;
  const end = offset + doc.results.length;
  return { items: doc.results, from: offset, total, next: end < total ? end : null };
}

async function failedOnly(path, offset, size) {
  const failed = (await json(`${path}?limit=0`)).failed_indexes;
  const items = await itemsAt(path, failed.slice(offset, offset + size));
  const end = offset + items.length;
  return { items, from: offset, total: failed.length, next: end < failed.length ? end : null };
}

// The failed items (index order), then every other item (index order): position `offset` of that sequence.
async function failedThenRest(path, offset, size) {
  const doc = await json(`${path}?limit=0`);
  const failed = doc.failed_indexes;
  const total = doc.counts.total;
  const items = await itemsAt(path, failed.slice(offset, offset + size));
  if (items.length < size && offset + items.length >= failed.length) {
    items.push(...(await rest(path, failed, Math.max(0, offset - failed.length), size - items.length, total)));
  }
  const end = offset + items.length;
  return { items, from: offset, total, next: end < total ? end : null };
}

// `count` items that did not fail, from the `skip`-th of them on.
async function rest(path, failed, skip, count, total) {
  const isFailed = new Set(failed);
  let index = skip;
  for (const f of failed) if (f <= index) index += 1; // the skip-th index that is not a failed one
  const found = [];
  while (found.length < count && index < total) {
    const doc = await json(`${path}?offset=${index}&limit=${Math.min(2 * (count - found.length) + GAP, 1000)}`);
    if (!doc.results.length) break;
    for (const item of doc.results) if (!isFailed.has(item.index) && found.length < count) found.push(item);
    index = doc.results_offset + doc.results.length;
  }
  return found;
}

async function withStatus(path, status, seq, size) {
  const query = new URLSearchParams({ status, after: String(seq) });
  const { items, more } = await jsonLines(`${path}/results?${query}`, size);
  return { items, from: null, total: null, next: more ? items.at(-1).seq : null };
}

// The items at these indexes (ascending), each run of nearby ones read as one page of the document.
async function itemsAt(path, indexes) {
  const runs = [];
  for (const index of indexes) {
    const run = runs.at(-1);
    if (run && index - run[1] <= GAP) run[1] = index;
    else runs.push([index, index]);
  }
  const wanted = new Set(indexes);
  const found = new Map();
  await Promise.all(
    runs.map(async ([first, last]) => {
      let offset = first;
      while (offset <= last) {
        const doc = await json(`${path}?offset=${offset}&limit=${last - offset + 1}`);
        if (!doc.results.length) break;
        for (const item of doc.results) if (wanted.has(item.index)) found.set(item.index, item);
        offset = doc.results_offset + doc.results.length;
      }
    }),
  );
  return indexes.filter((index) => found.has(index)).map((index) => found.get(index));
}
