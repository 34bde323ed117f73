import type { UiCost, UiDecision, UiScore } from '../dist/ui/state-types.js';
import { cell, el, ms } from './dom.js';

function isCost(cost: UiCost | UiScore): cost is UiCost {
  return 'totalMs' in cost;
}

/** The total and its non-zero components: "9 ms = round trip 1 + zone bias 8". */
function describeCost(cost: UiCost): string {
  const parts: [string, number][] = [
    ['wait', cost.waitMs],
    ['prefill', cost.prefillMs],
    ['LoRA', cost.loraMs],
    ['round trip', cost.rttMs],
    ['zone bias', cost.biasMs],
    ['displacement', cost.displacementMs],
    ['uncertainty', cost.uncertaintyMs],
  ];
  const shown = parts.filter(([, value]) => value > 0).map(([name, value]) => `${name} ${Math.round(value * 10) / 10}`);
  return shown.length === 0 ? ms(cost.totalMs) : `${ms(cost.totalMs)} = ${shown.join(' + ')}`;
}

/** One listed endpoint: where it is, why it is listed, and what it costs (or scores). */
function describeEntry(entry: UiDecision['entries'][number]): string {
  const where = `${entry.pod} (${entry.zone ?? '?'}, ${entry.address})`;
  const cost = entry.cost;
  const flags = [
    cost.stale ? 'stale' : '',
    cost.suspect ? 'suspect' : '',
    entry.full ? 'full' : '',
    cost.excluded ? 'excluded' : '',
  ].filter(Boolean);
  const why = isCost(cost) ? describeCost(cost) : `score ${cost.score.toFixed(3)}`;
  return `${where} \u2014 ${entry.reason}: ${why}${flags.length > 0 ? ` [${flags.join(', ')}]` : ''}`;
}

const HEADINGS = ['When', 'Rule', 'Status', 'Priority', 'Listed endpoints (primary first)'];

export function renderDecisions(table: HTMLTableElement, decisions: readonly UiDecision[], now: number): void {
  const head = table.tHead ?? table.createTHead();
  if (head.rows.length === 0) {
    const row = el('tr');
    for (const heading of HEADINGS) row.append(el('th', heading.startsWith('Listed') ? 'text' : undefined, heading));
    head.append(row);
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
