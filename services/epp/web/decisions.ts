import type { UiCost, UiDecision, UiScore } from '../dist/ui/state-types.js';
import { cell, el, ms } from './dom.js';

function isCost(cost: UiCost | UiScore): cost is UiCost {
  return 'totalMs' in cost;
}

/** One listed endpoint: where it is, why it is listed, and what it costs (or scores). */
function describeEntry(entry: UiDecision['entries'][number]): string {
  const where = `${entry.pod} (${entry.zone ?? '?'}, ${entry.address})`;
  const cost = entry.cost;
  const flags = [cost.stale ? 'stale' : '', cost.suspect ? 'suspect' : '', entry.full ? 'full' : '', cost.excluded ? 'excluded' : ''].filter(Boolean);
  const why = isCost(cost)
    ? `${ms(cost.totalMs)} = wait ${ms(cost.waitMs)} + prefill ${ms(cost.prefillMs)} + LoRA ${ms(cost.loraMs)} + round trip ${ms(cost.rttMs)} + zone bias ${ms(cost.biasMs)} + uncertainty ${ms(cost.uncertaintyMs)}`
    : `score ${cost.score.toFixed(3)}`;
  return `${where} \u2014 ${entry.reason}: ${why}${flags.length > 0 ? ` [${flags.join(', ')}]` : ''}`;
}

const HEADINGS = ['When', 'Rule', 'Status', 'Priority', 'Listed endpoints (primary first)'];

export function renderDecisions(table: HTMLTableElement, decisions: readonly UiDecision[], now: number): void {
  if (table.tHead === null) {
    const row = el('tr');
    for (const heading of HEADINGS) row.append(el('th', heading.startsWith('Listed') ? 'text' : undefined, heading));
    table.createTHead().append(row);
  }
  const rows = decisions.map((decision) => {
    const row = el('tr');
    const list = el('ol');
    for (const entry of decision.entries) list.append(el('li', undefined, describeEntry(entry)));
    const listed = el('td', 'text');
    listed.append(decision.entries.length > 0 ? list : el('span', undefined, 'none'));
    row.append(
      cell(`${ms(Math.max(0, now - decision.at))} ago`),
      cell(decision.rule, `text rule-${decision.rule}`),
      cell(String(decision.status)),
      cell(String(decision.priority)),
      listed,
    );
    return row;
  });
  if (rows.length === 0) {
    const row = el('tr');
    const empty = cell('no decision yet', 'text');
    empty.colSpan = HEADINGS.length;
    row.append(empty);
    rows.push(row);
  }
  (table.tBodies[0] ?? table.createTBody()).replaceChildren(...rows);
}
