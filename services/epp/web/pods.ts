import type { UiPod, UiPodPage, UiPodSortKey } from '../dist/ui/state-types.js';
import { cell, count, el, ms, percent } from './dom.js';

/** What the table asks the server for: pods are sorted and paged there, so sorting covers every pod. */
export interface PodQuery {
  offset: number;
  limit: number;
  sort: UiPodSortKey;
  order: 'asc' | 'desc';
}

interface Column {
  readonly key: UiPodSortKey;
  readonly label: string;
  readonly text?: boolean;
  /** The order of a first click: figures largest first, names A to Z. */
  readonly firstOrder: 'asc' | 'desc';
  value(pod: UiPod): string;
}

const COLUMNS: readonly Column[] = [
  { key: 'pod', label: 'Pod', text: true, firstOrder: 'asc', value: (p) => p.pod },
  { key: 'zone', label: 'Zone', text: true, firstOrder: 'asc', value: (p) => p.zone },
  { key: 'address', label: 'Address', text: true, firstOrder: 'asc', value: (p) => p.address ?? '\u2014' },
  { key: 'waiting', label: 'Waiting', firstOrder: 'desc', value: (p) => count(p.waiting) },
  { key: 'running', label: 'Running', firstOrder: 'desc', value: (p) => count(p.running) },
  { key: 'kvCacheUsage', label: 'KV cache', firstOrder: 'desc', value: (p) => percent(p.kvCacheUsage) },
  { key: 'metricsAgeMs', label: 'Metrics age', firstOrder: 'desc', value: (p) => ms(p.metricsAgeMs) },
  { key: 'inFlight', label: 'In flight here', firstOrder: 'desc', value: (p) => String(p.inFlight) },
  { key: 'started', label: 'Started', firstOrder: 'desc', value: (p) => String(p.started) },
  { key: 'penaltyLeftMs', label: 'Penalty left', firstOrder: 'desc', value: (p) => (p.penaltyLeftMs > 0 ? ms(p.penaltyLeftMs) : '') },
  { key: 'expectedWaitMs', label: 'Expected wait', firstOrder: 'desc', value: (p) => ms(p.expectedWaitMs) },
  { key: 'costMs', label: 'Cost from here', firstOrder: 'desc', value: (p) => ms(p.costMs) },
  { key: 'state', label: 'State', text: true, firstOrder: 'desc', value: () => '' },
];

/** Why a pod is marked, worst first; each becomes a tag and a row class. */
function marks(pod: UiPod): string[] {
  const out: string[] = [];
  if (!pod.ready) out.push('not-ready');
  if (pod.penaltyLeftMs > 0) out.push('penalised');
  if (pod.silent) out.push('silent');
  if (pod.suspect) out.push('suspect');
  if (pod.stale) out.push('stale');
  if (pod.full) out.push('full');
  return out;
}

/** The sortable, paged pod table. */
export class PodTable {
  readonly query: PodQuery = { offset: 0, limit: 200, sort: 'zone', order: 'asc' };
  private readonly headers = new Map<UiPodSortKey, HTMLTableCellElement>();
  private total = 0;

  constructor(
    private readonly table: HTMLTableElement,
    private readonly range: HTMLElement,
    private readonly prev: HTMLButtonElement,
    private readonly next: HTMLButtonElement,
    /** Asks for fresh state at once (after a click). */
    private readonly refresh: () => void,
  ) {
    const row = el('tr');
    for (const column of COLUMNS) {
      const th = el('th', column.text ? 'text' : undefined, column.label);
      th.scope = 'col';
      th.dataset['sort'] = column.key;
      th.addEventListener('click', () => this.sortBy(column));
      this.headers.set(column.key, th);
      row.append(th);
    }
    (table.tHead ?? table.createTHead()).append(row);
    prev.addEventListener('click', () => this.page(-1));
    next.addEventListener('click', () => this.page(1));
    this.markSorted();
  }

  render(page: UiPodPage): void {
    this.total = page.total;
    const rows: HTMLTableRowElement[] = [];
    for (const pod of page.items) {
      const row = el('tr');
      const podMarks = marks(pod);
      row.className = podMarks.join(' ');
      row.dataset['pod'] = pod.pod;
      for (const column of COLUMNS) {
        const td = cell(column.value(pod), column.text ? 'text' : undefined);
        if (column.key === 'state') {
          if (podMarks.length === 0) td.textContent = 'ok';
          for (const mark of podMarks) td.append(el('span', `tag ${mark}`, mark.replace('-', ' ')));
        }
        row.append(td);
      }
      rows.push(row);
    }
    const body = this.table.tBodies[0] ?? this.table.createTBody();
    body.replaceChildren(...rows);
    const first = page.items.length === 0 ? 0 : page.offset + 1;
    this.range.textContent = `pods ${first}\u2013${page.offset + page.items.length} of ${page.total}${page.truncated ? ' (more on the next pages)' : ''}`;
    this.prev.disabled = page.offset === 0;
    this.next.disabled = !page.truncated;
  }

  private sortBy(column: Column): void {
    if (this.query.sort === column.key) this.query.order = this.query.order === 'asc' ? 'desc' : 'asc';
    else {
      this.query.sort = column.key;
      this.query.order = column.firstOrder;
    }
    this.query.offset = 0;
    this.markSorted();
    this.refresh();
  }

  private page(direction: 1 | -1): void {
    const offset = this.query.offset + direction * this.query.limit;
    if (offset < 0 || (direction > 0 && offset >= this.total)) return;
    this.query.offset = offset;
    this.refresh();
  }

  private markSorted(): void {
    for (const [key, th] of this.headers) {
      th.classList.toggle('sorted-asc', key === this.query.sort && this.query.order === 'asc');
      th.classList.toggle('sorted-desc', key === this.query.sort && this.query.order === 'desc');
      th.setAttribute('aria-sort', key === this.query.sort ? (this.query.order === 'asc' ? 'ascending' : 'descending') : 'none');
    }
  }
}
