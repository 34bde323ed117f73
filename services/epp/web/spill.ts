import type { UiState } from '../dist/ui/state-types.js';
import { cell, el, rate } from './dom.js';

/**
 * The spill matrix: rows are gateway zones, columns serving zones, cells requests per second over
 * the last minute. This EPP counts its own picks, so its zone's row is always there; every zone
 * the pool knows is a column.
 */
export function renderSpill(table: HTMLTableElement, state: UiState): void {
  const { spill } = state;
  const index = new Map(spill.zones.map((zone, i) => [zone, i]));
  const columns = [...new Set([...state.zones.map((z) => z.zone), ...spill.zones])].sort();
  const rows = spill.zones.filter((zone, i) => zone === state.zone || (spill.perS[i] ?? []).some((v) => v > 0));
  if (!rows.includes(state.zone)) rows.unshift(state.zone);
  rows.sort();

  const head = el('tr');
  head.append(el('th', 'text', 'from \u2193 / to \u2192'));
  for (const zone of columns) head.append(el('th', undefined, zone));
  head.append(el('th', undefined, 'total'));
  const body: HTMLTableRowElement[] = [];
  for (const from of rows) {
    const row = el('tr');
    row.dataset['gateway'] = from;
    row.append(el('th', 'text', from));
    const perS = spill.perS[index.get(from) ?? -1];
    let total = 0;
    for (const to of columns) {
      const value = perS?.[index.get(to) ?? -1] ?? 0;
      total += value;
      const td = cell(rate(value), value === 0 ? 'zero' : from === to ? 'home' : 'spill');
      td.dataset['serving'] = to;
      row.append(td);
    }
    row.append(cell(rate(total)));
    body.push(row);
  }
  const caption = el('caption', 'hint', `averaged over ${Math.round(spill.windowS)} s`);
  table.replaceChildren(caption, el('thead'), el('tbody'));
  table.tHead?.append(head);
  table.tBodies[0]?.append(...body);
}
