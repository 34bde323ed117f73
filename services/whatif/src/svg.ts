/** A small line-chart SVG writer (no dependency): one line per series, optional log-scale y. */
export interface Series {
  readonly name: string;
  readonly points: readonly (readonly [number, number])[];
}

export interface ChartOptions {
  readonly title: string;
  readonly xLabel: string;
  readonly yLabel: string;
  readonly series: readonly Series[];
  readonly logY?: boolean;
  /** Format of x tick labels. */
  readonly xFormat?: (x: number) => string;
}

const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f'];
const W = 720;
const H = 420;
const M = { left: 70, right: 170, top: 40, bottom: 50 };

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function fmt(v: number): string {
  if (v >= 1000) return `${+(v / 1000).toPrecision(3)} s`;
  return `${+v.toPrecision(3)} ms`;
}

export function lineChart(o: ChartOptions): string {
  const xs = o.series.flatMap((s) => s.points.map((p) => p[0]));
  const ys = o.series.flatMap((s) => s.points.map((p) => p[1])).filter((y) => Number.isFinite(y) && (!o.logY || y > 0));
  const xMin = Math.min(...xs);
  const xMax = Math.max(...xs);
  const log = o.logY === true;
  const tf = (y: number) => (log ? Math.log10(y) : y);
  let yMin = log ? Math.floor(Math.log10(Math.min(...ys))) : 0;
  let yMax = log ? Math.ceil(Math.log10(Math.max(...ys))) : Math.max(...ys) * 1.1;
  if (yMax <= yMin) yMax = yMin + 1;
  if (!Number.isFinite(yMin)) yMin = 0;
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  const px = (x: number) => M.left + (xMax > xMin ? ((x - xMin) / (xMax - xMin)) * pw : pw / 2);
  const py = (y: number) => M.top + ph - ((tf(y) - yMin) / (yMax - yMin)) * ph;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
  );
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="14" font-weight="bold">${esc(o.title)}</text>`);
  // Y grid and ticks.
  const yTicks: number[] = [];
  if (log) for (let e = yMin; e <= yMax; e++) yTicks.push(10 ** e);
  else for (let i = 0; i <= 5; i++) yTicks.push((yMax * i) / 5);
  for (const y of yTicks) {
    const yy = py(y).toFixed(1);
    out.push(`<line x1="${M.left}" y1="${yy}" x2="${M.left + pw}" y2="${yy}" stroke="#ddd"/>`);
    out.push(`<text x="${M.left - 6}" y="${yy}" text-anchor="end" dominant-baseline="middle">${esc(fmt(y))}</text>`);
  }
  const xTicks = [...new Set(xs)].sort((a, b) => a - b);
  for (const x of xTicks) {
    const xx = px(x).toFixed(1);
    out.push(`<line x1="${xx}" y1="${M.top}" x2="${xx}" y2="${M.top + ph}" stroke="#eee"/>`);
    out.push(`<text x="${xx}" y="${M.top + ph + 16}" text-anchor="middle">${esc(o.xFormat ? o.xFormat(x) : String(x))}</text>`);
  }
  out.push(`<rect x="${M.left}" y="${M.top}" width="${pw}" height="${ph}" fill="none" stroke="#333"/>`);
  out.push(`<text x="${M.left + pw / 2}" y="${H - 10}" text-anchor="middle">${esc(o.xLabel)}</text>`);
  out.push(`<text transform="translate(16 ${M.top + ph / 2}) rotate(-90)" text-anchor="middle">${esc(o.yLabel)}</text>`);
  o.series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length] as string;
    const pts = s.points.filter((p) => Number.isFinite(p[1]) && (!log || p[1] > 0));
    if (pts.length > 0) {
      const d = pts.map((p, k) => `${k === 0 ? 'M' : 'L'}${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(' ');
      out.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="2"/>`);
      for (const p of pts) out.push(`<circle cx="${px(p[0]).toFixed(1)}" cy="${py(p[1]).toFixed(1)}" r="3" fill="${color}"/>`);
    }
    const ly = M.top + 10 + i * 18;
    out.push(`<line x1="${M.left + pw + 12}" y1="${ly}" x2="${M.left + pw + 32}" y2="${ly}" stroke="${color}" stroke-width="2"/>`);
    out.push(`<text x="${M.left + pw + 38}" y="${ly}" dominant-baseline="middle">${esc(s.name)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}
