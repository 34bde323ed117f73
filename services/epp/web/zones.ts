import type { UiState, UiZone } from '../dist/ui/state-types.js';
import { el, ms, percent, rate } from './dom.js';

/** Seconds of history a chart shows (the server's per-second pick counts cover the same minute). */
const HISTORY_S = 60;

interface ZoneCard {
  readonly root: HTMLElement;
  readonly region: HTMLElement;
  readonly figures: Map<string, HTMLElement>;
  readonly chartBox: HTMLElement;
  chart: uPlot | undefined;
  /** Requests waiting in the zone, by second, as sampled by this page (the server keeps no history of it). */
  readonly waiting: Map<number, number>;
}

const FIGURES: readonly [key: string, label: string, value: (zone: UiZone) => string][] = [
  ['ready', 'ready / pods', (z) => `${z.ready} / ${z.total}`],
  ['waiting', 'waiting', (z) => String(z.waiting)],
  ['running', 'running', (z) => String(z.running)],
  ['kv', 'mean KV cache', (z) => percent(z.meanKvCacheUsage)],
  ['picked', 'picked / s (10 s)', (z) => rate(z.pickedPerS)],
  ['wait', 'expected wait', (z) => ms(z.expectedWaitMs)],
  ['cost', 'cost from here', (z) => ms(z.costMs)],
  ['trouble', 'stale / penalised / full', (z) => `${z.stale} / ${z.penalised} / ${z.full}`],
];

/** The zone cards: one per zone, kept across refreshes so each chart keeps its canvas and history. */
export class ZoneCards {
  private readonly cards = new Map<string, ZoneCard>();

  constructor(private readonly container: HTMLElement) {
    window.addEventListener('resize', () => {
      for (const card of this.cards.values()) card.chart?.setSize(this.chartSize(card));
    });
  }

  render(state: UiState): void {
    const second = Math.floor(state.at / 1000);
    const seen = new Set<string>();
    for (const zone of state.zones) {
      seen.add(zone.zone);
      const card = this.cards.get(zone.zone) ?? this.create(zone.zone);
      // Appending moves an existing card: the cards follow the state's order (by name).
      this.container.append(card.root);
      this.update(card, zone, second);
    }
    for (const [name, card] of this.cards) {
      if (seen.has(name)) continue;
      card.chart?.destroy();
      card.root.remove();
      this.cards.delete(name);
    }
  }

  private create(name: string): ZoneCard {
    const root = el('article', 'card');
    root.dataset['zone'] = name;
    const heading = el('h3');
    const region = el('small');
    heading.append(el('span', undefined, name), region);
    const list = el('dl', 'figures');
    const figures = new Map<string, HTMLElement>();
    for (const [key, label] of FIGURES) {
      const value = el('dd');
      value.dataset['figure'] = key;
      const item = el('div');
      item.append(el('dt', undefined, label), value);
      list.append(item);
      figures.set(key, value);
    }
    const chartBox = el('div', 'chart');
    const legend = el('p', 'legend');
    legend.append(el('span', 'picked', 'picked / s'), el('span', 'waiting', 'waiting (right axis)'));
    root.append(heading, list, chartBox, legend);
    const card: ZoneCard = { root, region, figures, chartBox, chart: undefined, waiting: new Map() };
    this.cards.set(name, card);
    return card;
  }

  private update(card: ZoneCard, zone: UiZone, second: number): void {
    card.root.classList.toggle('local', zone.local);
    card.region.textContent = [zone.region === null ? '' : `region ${zone.region}`, zone.local ? 'this EPP' : '']
      .filter(Boolean)
      .join(' \u00b7 ');
    for (const [key, , value] of FIGURES) {
      const node = card.figures.get(key);
      if (node) node.textContent = value(zone);
    }
    card.waiting.set(second, zone.waiting);
    for (const at of card.waiting.keys()) if (at <= second - HISTORY_S) card.waiting.delete(at);
    // x: seconds relative to now (-59 .. 0), so the axis reads as "how long ago".
    const xs: number[] = [];
    const waiting: (number | null)[] = [];
    for (let i = HISTORY_S - 1; i >= 0; i--) {
      xs.push(-i);
      waiting.push(card.waiting.get(second - i) ?? null);
    }
    const picked = zone.pickedSeries.slice(-HISTORY_S);
    while (picked.length < HISTORY_S) picked.unshift(0);
    const data: uPlot.AlignedData = [xs, picked, waiting];
    if (card.chart === undefined) card.chart = new uPlot(this.options(card), data, card.chartBox);
    else card.chart.setData(data);
  }

  private chartSize(card: ZoneCard): { width: number; height: number } {
    return { width: Math.max(200, card.chartBox.clientWidth), height: 110 };
  }

  private options(card: ZoneCard): uPlot.Options {
    return {
      ...this.chartSize(card),
      // The card's own legend (below the chart) names the two lines; uPlot's would take more room than the chart.
      legend: { show: false },
      cursor: { show: false },
      scales: {
        x: { time: false },
        rps: { range: (_u, _min, max) => [0, Math.max(1, max)] },
        waiting: { range: (_u, _min, max) => [0, Math.max(1, max)] },
      },
      series: [
        {},
        { label: 'picked/s', scale: 'rps', stroke: '#1d4ed8', width: 1.5, fill: 'rgba(29, 78, 216, 0.08)' },
        { label: 'waiting', scale: 'waiting', stroke: '#dd6b20', width: 1.5, spanGaps: false },
      ],
      axes: [
        {
          size: 22,
          font: '10px system-ui',
          ticks: { show: false },
          values: (_u, splits) => splits.map((v) => (v === 0 ? 'now' : `${v}s`)),
        },
        { scale: 'rps', size: 32, font: '10px system-ui', ticks: { show: false } },
        { scale: 'waiting', side: 1, size: 28, font: '10px system-ui', grid: { show: false }, ticks: { show: false } },
      ],
    };
  }
}
