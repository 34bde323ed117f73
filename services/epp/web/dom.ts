/**
 * DOM helpers. Every value from the EPP (pod names, zones, rules) goes into the page through
 * textContent or an attribute value, never through markup: a pod named `<img onerror=...>` is text.
 */
export function el<K extends keyof HTMLElementTagNameMap>(tag: K, className?: string, text?: string): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className !== undefined && className !== '') node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const node = document.getElementById(id);
  if (node === null) throw new Error(`the page has no #${id}`);
  return node as T;
}

/** A table cell with text; `text` cells align left, numbers right. */
export function cell(text: string, className?: string): HTMLTableCellElement {
  return el('td', className, text);
}

/** A definition list entry: <div><dt>term</dt><dd>value</dd></div>, or a bare pair for a grid. */
export function pair(term: string, value: string): [HTMLElement, HTMLElement] {
  return [el('dt', undefined, term), el('dd', undefined, value)];
}

const DASH = '\u2014';

/** 12 ms, 1.5 s, 2 min; a dash for nothing. */
export function ms(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return DASH;
  if (value < 1000) return `${Math.round(value)} ms`;
  if (value < 120_000) return `${(value / 1000).toFixed(1)} s`;
  return `${Math.round(value / 60_000)} min`;
}

export function percent(value: number | null | undefined): string {
  return value === null || value === undefined ? DASH : `${Math.round(value * 100)}%`;
}

export function count(value: number | null | undefined): string {
  return value === null || value === undefined ? DASH : String(value);
}

export function rate(value: number): string {
  return value === 0 ? '0' : value < 10 ? value.toFixed(2) : value.toFixed(1);
}
