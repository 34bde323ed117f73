/**
 * The operators' view: reads /api/state every second and renders it. No framework and no build
 * step beyond the EPP's own (tsc); the chart library is uPlot, loaded by the page before this module.
 */
import type { UiState, UiStream } from '../dist/ui/state-types.js';
import { renderDecisions } from './decisions.js';
import { byId, el, ms, pair } from './dom.js';
import { PodTable } from './pods.js';
import { renderSpill } from './spill.js';
import { ZoneCards } from './zones.js';

const REFRESH_MS = 1000;
/** A request the EPP does not answer within this is abandoned (the next tick asks again). */
const TIMEOUT_MS = 5000;
const DECISIONS = 20;

const zones = new ZoneCards(byId('zones'));
const pods = new PodTable(
  byId<HTMLTableElement>('pods'),
  byId('pods-range'),
  byId<HTMLButtonElement>('prev'),
  byId<HTMLButtonElement>('next'),
  () => void refresh(),
);
let fetching = false;
let again = false;

function badge(text: string, tone: 'ok' | 'warn' | 'bad' | '' = ''): HTMLElement {
  return el('span', `badge ${tone}`.trim(), text);
}

function streamTone(stream: UiStream): 'ok' | 'warn' | 'bad' {
  if (stream.connection !== 'connected') return 'bad';
  return stream.caughtUp && stream.staleForMs === null ? 'ok' : 'warn';
}

function renderHeader(state: UiState): void {
  document.title = `Spillway \u00b7 ${state.pool} \u00b7 ${state.zone}`;
  byId('title').textContent = `pool ${state.pool} \u00b7 EPP in ${state.zone}${state.region === null ? '' : ` (${state.region})`}`;
  const { stream } = state;
  const streamText =
    stream.connection === 'connected'
      ? stream.caughtUp
        ? stream.staleForMs === null
          ? 'events live'
          : 'events stale'
        : 'replaying events'
      : `NATS ${stream.connection}`;
  byId('badges').replaceChildren(
    badge(state.ready ? 'ready' : 'not ready', state.ready ? 'ok' : 'bad'),
    badge(streamText, streamTone(stream)),
    badge(`last event ${stream.lastEventAgeMs === null ? 'never' : `${ms(stream.lastEventAgeMs)} ago`}`),
    badge(`policy ${state.policy}`),
    badge(`${state.pods.total} pods in ${state.zones.length} zones`),
    ...(state.flowControl.enabled ? [flowBadge(state)] : []),
  );
}

/** Flow control: how many requests wait for room, and how full the queue is. */
function flowBadge(state: UiState): HTMLElement {
  const flow = state.flowControl;
  const bands = flow.bands.map((b) => `band ${b.priority}: ${b.requests}`).join(', ');
  const text = flow.held === 0 ? 'flow control: none held' : `flow control: ${flow.held} held (${bands})`;
  const tone = flow.held === 0 ? 'ok' : flow.held >= flow.maxHeldRequests || flow.bytes >= flow.maxHeldBytes ? 'bad' : 'warn';
  return badge(text, tone);
}

function renderStream(stream: UiStream): void {
  const rejected = Object.entries(stream.rejectedByReason)
    .map(([reason, n]) => `${reason} ${n}`)
    .join(', ');
  byId('stream').replaceChildren(
    ...pair('NATS connection', stream.connection),
    ...pair('replay caught up', stream.caughtUp ? 'yes' : 'no'),
    ...pair('view stale for', stream.staleForMs === null ? 'live' : ms(stream.staleForMs)),
    ...pair('last event', stream.lastEventAgeMs === null ? 'none yet' : `${ms(stream.lastEventAgeMs)} ago`),
    ...pair('lag of the last event', `${ms(stream.lastDelayMs)} in the stream, ${stream.pending} behind it`),
    ...pair('events received', `${stream.received} (applied ${stream.applied}, older than the view ${stream.ignored})`),
    ...pair('rejected', stream.rejected === 0 ? '0' : `${stream.rejected}: ${rejected}`),
    ...pair('reconnects / consumer restarts', `${stream.reconnects} / ${stream.consumerRestarts}`),
  );
}

function render(state: UiState): void {
  renderHeader(state);
  zones.render(state);
  renderSpill(byId<HTMLTableElement>('spill'), state);
  pods.render(state.pods);
  renderDecisions(byId<HTMLTableElement>('decisions'), state.decisions, state.at);
  renderStream(state.stream);
  // For tests and curious operators: when the page last showed fresh state.
  document.body.dataset['updated'] = String(state.at);
}

function showError(message: string | undefined): void {
  const box = byId('error');
  box.hidden = message === undefined;
  box.textContent = message ?? '';
}

async function refresh(): Promise<void> {
  // One request at a time; a click while one is out asks again when it is back.
  if (fetching) {
    again = true;
    return;
  }
  fetching = true;
  try {
    const q = pods.query;
    const url = `api/state?limit=${q.limit}&offset=${q.offset}&sort=${q.sort}&order=${q.order}&decisions=${DECISIONS}`;
    const response = await fetch(url, { cache: 'no-store', signal: AbortSignal.timeout(TIMEOUT_MS) });
    if (!response.ok) throw new Error(`HTTP ${response.status}: ${(await response.text()).slice(0, 200)}`);
    render((await response.json()) as UiState);
    showError(undefined);
  } catch (error) {
    showError(`cannot read the EPP's state: ${(error as Error).message}; showing the last state read`);
  } finally {
    fetching = false;
    if (again) {
      again = false;
      void refresh();
    }
  }
}

setInterval(() => void refresh(), REFRESH_MS);
void refresh();
