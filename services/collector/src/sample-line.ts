import { ExpositionError } from './exposition-error.js';

/**
 * One sample line as the general parser (`parse-prometheus-text-format`) reads it: texts, not
 * numbers yet. An aggregate line (a histogram's or summary's `_count`, `_sum` or `_bucket`) keeps
 * its value under that key instead (set by the family that takes it in).
 */
export interface RawSample {
  name: string;
  value: string | undefined;
  count: string | undefined;
  sum: string | undefined;
  bucket: string | undefined;
  labels: Record<string, string> | undefined;
  timestamp: string | undefined;
}

const SPACE = 0x20;
const TAB = 0x09;
const CLOSE_BRACE = 0x7d;
const EQUALS = 0x3d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;

const enum State {
  Name,
  EndOfName,
  StartOfLabelName,
  LabelName,
  LabelValueEquals,
  LabelValueQuote,
  LabelValue,
  NextLabel,
  EndOfLabels,
  Value,
  Timestamp,
}

export function invalidLine(line: string): ExpositionError {
  return new ExpositionError(`Encountered invalid line: ${line}`);
}

function isSpace(c: number): boolean {
  return c === SPACE || c === TAB;
}

/**
 * One sample line, by the general parser's state machine (the same states, the same rejected
 * characters), reading runs of characters as slices. Throws ExpositionError for a line it rejects.
 */
export function parseSampleLine(line: string): RawSample {
  const n = line.length;
  let name = '';
  let labelName = '';
  let labelValue = '';
  let value = '';
  let timestamp = '';
  let labels: Record<string, string> | undefined;
  let state = State.Name;
  let i = 0;
  while (i < n) {
    const c = line.charCodeAt(i);
    switch (state) {
      case State.Name: {
        let j = i;
        while (j < n && line.charCodeAt(j) !== OPEN_BRACE && !isSpace(line.charCodeAt(j))) j++;
        name += line.slice(i, j);
        if (j < n) state = line.charCodeAt(j) === OPEN_BRACE ? State.StartOfLabelName : State.EndOfName;
        i = j + 1;
        continue;
      }
      case State.EndOfName:
        if (c === OPEN_BRACE) state = State.StartOfLabelName;
        else if (!isSpace(c)) {
          state = State.Value;
          continue;
        }
        break;
      case State.StartOfLabelName:
        if (c === CLOSE_BRACE) state = State.EndOfLabels;
        else if (!isSpace(c)) {
          // The first character is taken whatever it is (even `=`); the name runs on from the next.
          labelName += line[i] as string;
          state = State.LabelName;
        }
        break;
      case State.LabelName: {
        let j = i;
        for (; j < n; j++) {
          const d = line.charCodeAt(j);
          if (d === EQUALS || d === CLOSE_BRACE || isSpace(d)) break;
        }
        labelName += line.slice(i, j);
        if (j < n) {
          const d = line.charCodeAt(j);
          state = d === EQUALS ? State.LabelValueQuote : d === CLOSE_BRACE ? State.EndOfLabels : State.LabelValueEquals;
        }
        i = j + 1;
        continue;
      }
      case State.LabelValueEquals:
        if (c === EQUALS) state = State.LabelValueQuote;
        else if (!isSpace(c)) throw invalidLine(line);
        break;
      case State.LabelValueQuote:
        if (c === QUOTE) state = State.LabelValue;
        else if (!isSpace(c)) throw invalidLine(line);
        break;
      case State.LabelValue: {
        let j = i;
        while (j < n && line.charCodeAt(j) !== QUOTE && line.charCodeAt(j) !== BACKSLASH) j++;
        labelValue += line.slice(i, j);
        if (j >= n) {
          i = j;
          continue;
        }
        if (line.charCodeAt(j) === QUOTE) {
          labels ??= {};
          labels[labelName] = labelValue;
          labelName = '';
          labelValue = '';
          state = State.NextLabel;
          i = j + 1;
          continue;
        }
        // A backslash: the next character is escaped (\\, \n, \"; anything else is kept with its backslash).
        if (j + 1 < n) {
          const e = line.charCodeAt(j + 1);
          labelValue += e === BACKSLASH ? '\\' : e === 0x6e ? '\n' : e === QUOTE ? '"' : `\\${line[j + 1] as string}`;
        }
        i = j + 2;
        continue;
      }
      case State.NextLabel:
        if (c === COMMA) state = State.LabelName;
        else if (c === CLOSE_BRACE) state = State.EndOfLabels;
        else if (!isSpace(c)) throw invalidLine(line);
        break;
      case State.EndOfLabels:
        if (!isSpace(c)) {
          state = State.Value;
          continue;
        }
        break;
      case State.Value: {
        let j = i;
        while (j < n && !isSpace(line.charCodeAt(j))) j++;
        value += line.slice(i, j);
        if (j < n) state = State.Timestamp;
        i = j + 1;
        continue;
      }
      case State.Timestamp:
        if (!isSpace(c)) {
          let j = i;
          while (j < n && !isSpace(line.charCodeAt(j))) j++;
          timestamp += line.slice(i, j);
          i = j;
          continue;
        }
        break;
    }
    i++;
  }
  return { name, value, count: undefined, sum: undefined, bucket: undefined, labels, timestamp: timestamp === '' ? undefined : timestamp };
}

const OPEN_BRACE = 0x7b;

function isLabelChar(c: number): boolean {
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || c === 0x5f || (c >= 0x30 && c <= 0x39);
}

/**
 * One sample line, read as parseSampleLine reads it, for the lines real servers write: a name,
 * optionally `{name="value",...}` with plain label names and no escapes, one space, the value,
 * and optionally one space and a timestamp. Anything else — a tab or backslash anywhere, a blank
 * where the grammar allows several, an odd label name — is left to parseSampleLine, so this is
 * never wrong, only sometimes not faster. Why: the general state machine visits every character
 * through a switch and builds each name and value by concatenation; this finds the delimiters
 * with native searches and slices between them (a loop costs a few ns a character here, and the
 * kept lines were most of a scrape's parsing). A test holds the two to the same result on
 * generated and damaged lines.
 */
export function readSampleLine(line: string): RawSample {
  return fastSampleLine(line) ?? parseSampleLine(line);
}

/** The plain-line reading of readSampleLine; undefined when the line is not plain (then the general parser decides). */
export function fastSampleLine(line: string): RawSample | undefined {
  // Tabs are blanks and backslashes escapes: both change what the general parser does, so neither is read here.
  if (line.indexOf('\t') >= 0 || line.indexOf('\\') >= 0) return undefined;
  const firstSpace = line.indexOf(' ');
  if (firstSpace <= 0) return undefined;
  const brace = line.indexOf('{');
  let name: string;
  let labels: Record<string, string> | undefined;
  // Where the space before the value is.
  let i: number;
  if (brace < 0 || brace > firstSpace) {
    // `name value`: the general parser would read `name {...}` (a blank before the brace) as labels.
    name = line.slice(0, firstSpace);
    i = firstSpace;
    const next = line.charCodeAt(i + 1);
    if (next === OPEN_BRACE || next === SPACE) return undefined;
  } else {
    if (brace === 0) return undefined;
    name = line.slice(0, brace);
    i = brace + 1;
    // `{}` reads as no labels at all, as in the general parser.
    if (line.charCodeAt(i) === CLOSE_BRACE) i++;
    else {
      for (;;) {
        // A label name of [A-Za-z0-9_] not starting with a digit, then `="`, the value up to the
        // next `"` (no backslash in the line, so it is the closing one), then `,` or `}`.
        const nameStart = i;
        const c = line.charCodeAt(i);
        if (!isLabelChar(c) || c <= 0x39) return undefined;
        for (i++; isLabelChar(line.charCodeAt(i)); i++);
        if (line.charCodeAt(i) !== EQUALS || line.charCodeAt(i + 1) !== QUOTE) return undefined;
        const labelName = line.slice(nameStart, i);
        const close = line.indexOf('"', i + 2);
        if (close < 0) return undefined;
        labels ??= {};
        labels[labelName] = line.slice(i + 2, close);
        const next = line.charCodeAt(close + 1);
        i = close + 2;
        if (next === CLOSE_BRACE) break;
        if (next !== COMMA) return undefined;
      }
    }
    if (line.charCodeAt(i) !== SPACE) return undefined;
  }
  // One space, then the value: a run without blanks; then, after one space, the timestamp.
  const valueStart = i + 1;
  if (valueStart >= line.length || line.charCodeAt(valueStart) === SPACE) return undefined;
  const valueEnd = line.indexOf(' ', valueStart);
  if (valueEnd < 0)
    return { name, value: line.slice(valueStart), count: undefined, sum: undefined, bucket: undefined, labels, timestamp: undefined };
  const timestamp = line.slice(valueEnd + 1);
  if (timestamp.length === 0 || timestamp.indexOf(' ') >= 0) return undefined;
  return { name, value: line.slice(valueStart, valueEnd), count: undefined, sum: undefined, bucket: undefined, labels, timestamp };
}
