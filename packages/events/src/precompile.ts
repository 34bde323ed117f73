import { safeParse, type z } from 'zod';

/**
 * A fast accept-check compiled from a zod schema (the schema stays the source of truth).
 *
 * Why: `safeParse` builds a payload, an issue list and a context per node, which costs more than the
 * event it checks; the event reader runs it on every message. This walks the schema once and
 * composes plain closures for the node kinds the v1 events use — objects (stripping unknown keys),
 * literals, enums, strings and arrays with length bounds, numbers with bounds and integer formats,
 * booleans, optionals, records, unions and discriminated unions, and `.refine` predicates — so a
 * kind added to the union, or a field added to a kind, is covered without touching this file. Any
 * node it does not know (a transform, a default, a regex, a catchall, ...) is delegated whole to
 * zod, so an unknown construct is slower, never wrong.
 *
 * A compiled check only says "valid, and here is what zod would have returned" or REJECTED. It does
 * not explain: callers run zod on a rejected input for the message (and take zod's verdict), so
 * errors read exactly as before. The property test (precompile.test.ts) holds it to zod on
 * generated inputs: same accept/reject, same parsed value.
 */
export const REJECTED: unique symbol = Symbol('rejected');
export type Compiled<T> = (input: unknown) => T | typeof REJECTED;

type Check = (value: unknown) => unknown;

/** The zod internals read here (zod 4's documented `_zod.def` shape, loosely typed). */
interface Node {
  _zod: {
    def: Def;
    traits: Set<string>;
    optin?: 'optional' | 'defaulted';
    optout?: 'optional';
    values?: Set<unknown>;
    propValues?: Record<string, Set<unknown>>;
  };
}
interface Def {
  type: string;
  checks?: { _zod: { def: CheckDef } }[];
  coerce?: boolean;
  shape?: Record<string, Node>;
  catchall?: Node;
  innerType?: Node;
  element?: Node;
  keyType?: Node;
  valueType?: Node;
  mode?: string;
  options?: Node[];
  discriminator?: string;
  unionFallback?: boolean;
  inclusive?: boolean;
}
interface CheckDef {
  check: string;
  minimum?: number;
  maximum?: number;
  length?: number;
  value?: number;
  inclusive?: boolean;
  format?: string;
  fn?: (value: unknown) => unknown;
}

/** Ranges of zod's integer and float number formats (zod/v4/core util.NUMBER_FORMAT_RANGES). */
const FORMAT_RANGES: Record<string, readonly [number, number, boolean]> = {
  safeint: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, true],
  int32: [-2147483648, 2147483647, true],
  uint32: [0, 4294967295, true],
  float32: [-3.4028234663852886e38, 3.4028234663852886e38, false],
  float64: [-Number.MAX_VALUE, Number.MAX_VALUE, false],
};
/** zod's numeric-key retry for records (zod/v4/core regexes.number). */
const NUMERIC_KEY = /^-?\d+(?:\.\d+)?$/;

export function compileSchema<S extends z.ZodType>(schema: S): Compiled<z.output<S>> {
  return compile(schema as unknown as Node) as Compiled<z.output<S>>;
}

function compile(node: Node): Check {
  return compileKnown(node) ?? delegate(node);
}

/** The node checked by zod itself: for constructs this compiler does not model. */
function delegate(node: Node): Check {
  return (value) => {
    const result = safeParse(node as unknown as z.ZodType, value);
    return result.success ? result.data : REJECTED;
  };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** zod's isPlainObject (records accept only plain objects). */
function isPlainObject(value: unknown): value is Record<PropertyKey, unknown> {
  if (!isObject(value)) return false;
  const ctor = (value as { constructor?: unknown }).constructor;
  if (ctor === undefined || typeof ctor !== 'function') return true;
  const proto: unknown = (ctor as { prototype?: unknown }).prototype;
  return isObject(proto) && Object.prototype.hasOwnProperty.call(proto, 'isPrototypeOf');
}

function compileKnown(node: Node): Check | undefined {
  const def = node._zod.def;
  if (def.coerce) return undefined;
  switch (def.type) {
    case 'string':
      return withChecks(node, (v) => typeof v === 'string');
    case 'number':
      return withChecks(node, (v) => typeof v === 'number' && Number.isFinite(v));
    case 'boolean':
      return withChecks(node, (v) => typeof v === 'boolean');
    case 'literal':
    case 'enum': {
      const values = node._zod.values;
      return values === undefined ? undefined : withChecks(node, (v) => values.has(v));
    }
    case 'optional':
      return compileOptional(node);
    case 'array':
      return compileArray(node);
    case 'object':
      return compileObject(node);
    case 'record':
      return compileRecord(node);
    case 'union':
      return def.discriminator === undefined ? compileUnion(node) : compileDiscriminated(node);
    default:
      return undefined;
  }
}

/** A leaf (its value passes through unchanged) with its checks; undefined if a check is unknown. */
function withChecks(node: Node, typeOk: (value: unknown) => boolean): Check | undefined {
  const tests = compileChecks(node);
  if (tests === undefined) return undefined;
  if (tests.length === 0) return (v) => (typeOk(v) ? v : REJECTED);
  return (v) => {
    if (!typeOk(v)) return REJECTED;
    for (let i = 0; i < tests.length; i++) if (!(tests[i] as (value: unknown) => boolean)(v)) return REJECTED;
    return v;
  };
}

type Test = (value: unknown) => boolean;

/** The node's checks as predicates; undefined when one is of a kind not modelled here. */
function compileChecks(node: Node): Test[] | undefined {
  const tests: Test[] = [];
  for (const check of node._zod.def.checks ?? []) {
    const test = compileCheck(check._zod.def);
    if (test === undefined) return undefined;
    tests.push(test);
  }
  return tests;
}

function compileCheck(check: CheckDef): Test | undefined {
  const length = (v: unknown) => (v as { length: number }).length;
  switch (check.check) {
    case 'min_length': {
      const min = check.minimum as number;
      return (v) => length(v) >= min;
    }
    case 'max_length': {
      const max = check.maximum as number;
      return (v) => length(v) <= max;
    }
    case 'length_equals': {
      const exact = check.length as number;
      return (v) => length(v) === exact;
    }
    case 'greater_than': {
      const min = check.value as number;
      return check.inclusive ? (v) => (v as number) >= min : (v) => (v as number) > min;
    }
    case 'less_than': {
      const max = check.value as number;
      return check.inclusive ? (v) => (v as number) <= max : (v) => (v as number) < max;
    }
    case 'number_format': {
      const range = FORMAT_RANGES[check.format ?? 'float64'];
      if (range === undefined) return undefined;
      const [min, max, integer] = range;
      return integer
        ? (v) => Number.isInteger(v) && (v as number) >= min && (v as number) <= max
        : (v) => (v as number) >= min && (v as number) <= max;
    }
    case 'custom': {
      // `.refine(fn)`: truthy passes. A promise (async refine) is left to zod, which refuses it in safeParse.
      const fn = check.fn;
      if (fn === undefined) return undefined;
      return (v) => {
        const result = fn(v);
        return !(result instanceof Promise) && Boolean(result);
      };
    }
    default:
      return undefined;
  }
}

function compileOptional(node: Node): Check | undefined {
  const inner = node._zod.def.innerType as Node;
  // A defaulted inner substitutes a value for absence, and exactOptional refuses undefined: zod's business.
  if (inner._zod.optin === 'defaulted' || node._zod.traits.has('$ZodExactOptional') || !hasNoChecks(node)) return undefined;
  const check = compile(inner);
  return (v) => (v === undefined ? undefined : check(v));
}

function hasNoChecks(node: Node): boolean {
  return (node._zod.def.checks ?? []).length === 0;
}

/**
 * An array: a new array of the elements' outputs, as zod builds it — or the input itself when it is
 * a plain array with no holes whose elements all come out unchanged (it then equals zod's output).
 */
function compileArray(node: Node): Check | undefined {
  const tests = compileChecks(node);
  if (tests === undefined) return undefined;
  const element = compile(node._zod.def.element as Node);
  return (v) => {
    if (!Array.isArray(v)) return REJECTED;
    for (let i = 0; i < tests.length; i++) if (!(tests[i] as Test)(v)) return REJECTED;
    let out: unknown[] | undefined;
    if (Object.getPrototypeOf(v) !== Array.prototype) out = new Array<unknown>(v.length);
    for (let i = 0; i < v.length; i++) {
      const input: unknown = v[i];
      const item = element(input);
      if (item === REJECTED) return REJECTED;
      if (out === undefined && (item !== input || (input === undefined && !(i in v)))) out = v.slice(0, i);
      if (out !== undefined) out[i] = item;
    }
    return out ?? v;
  };
}

interface Field {
  key: string;
  node: Node;
  check: Check;
  optin: Node['_zod']['optin'];
  optionalOut: boolean;
}

/**
 * A plain (stripping) object: only the shape's keys, in shape order, each by zod's rules for
 * absent and optional keys (its handlePropertyResult). A catchall (loose or strict object) is zod's.
 *
 * The object is checked by generated straight-line code (`new Function`): one test per field, the
 * leaf fields inlined. When the input is a plain object that holds exactly the shape's keys and
 * every field comes out unchanged, the input itself is returned (it equals what zod would build),
 * which spares an allocation per event; otherwise the stripped copy is built. Where generating code
 * is not allowed, the same rules run as closures.
 */
function compileObject(node: Node): Check | undefined {
  const def = node._zod.def;
  if (def.catchall !== undefined || !hasNoChecks(node)) return undefined;
  const fields: Field[] = [];
  for (const [key, field] of Object.entries(def.shape ?? {})) {
    if (key === '__proto__') continue;
    fields.push({ key, node: field, check: compile(field), optin: field._zod.optin, optionalOut: field._zod.optout === 'optional' });
  }
  const copy = copyingObject(fields);
  // A shape key that every object inherits (`constructor`, ...) is "present" without being counted.
  if (fields.some((field) => field.key in Object.prototype)) return copy;
  return generatedObject(fields, copy) ?? copy;
}

/** The stripped copy zod builds, by zod's rules. */
function copyingObject(fields: readonly Field[]): Check {
  return (input) => {
    if (!isObject(input)) return REJECTED;
    const out: Record<string, unknown> = {};
    for (let i = 0; i < fields.length; i++) {
      const { key, check, optin, optionalOut } = fields[i] as Field;
      const present = key in input;
      if (!present && optionalOut && optin === 'optional') continue;
      const value = check(input[key]);
      if (value === REJECTED) {
        if (optin !== undefined && optionalOut && !present) continue;
        return REJECTED;
      }
      if (!present && optin === undefined) return REJECTED;
      if (value === undefined) {
        if (present || (optin === 'defaulted' && !optionalOut)) out[key] = undefined;
      } else {
        out[key] = value;
      }
    }
    return out;
  };
}

/**
 * The same rules as straight-line code. Returns the input when it can stand for zod's output (see
 * compileObject), else runs `copy`. Undefined when code cannot be generated here.
 */
function generatedObject(fields: readonly Field[], copy: Check): Check | undefined {
  const env: unknown[] = [];
  const ref = (value: unknown): string => `e[${env.push(value) - 1}]`;
  const lines = [
    'if (typeof input !== "object" || input === null || Array.isArray(input)) return R;',
    'let seen = 0, same = true, v, r, p;',
  ];
  for (const field of fields) {
    const k = JSON.stringify(field.key);
    const optionalLeaf =
      field.node._zod.def.type === 'optional' && hasNoChecks(field.node) && !field.node._zod.traits.has('$ZodExactOptional');
    const leaf = leafTest(optionalLeaf ? (field.node._zod.def.innerType as Node) : field.node, ref);
    if (leaf !== undefined && !optionalLeaf) {
      // Rejects undefined, so an absent key fails here as zod says it must.
      lines.push(`v = input[${k}]; if (!(${leaf('v')})) return R; seen++;`);
    } else if (leaf !== undefined && (field.node._zod.def.innerType as Node)._zod.optin !== 'defaulted') {
      lines.push(`v = input[${k}]; if (v !== undefined) { if (!(${leaf('v')})) return R; seen++; } else if (${k} in input) seen++;`);
    } else {
      // Any other field: zod's handlePropertyResult, with identity tracked.
      const { optin, optionalOut } = field;
      lines.push(
        `p = ${k} in input; v = input[${k}];`,
        `if (${!(optionalOut && optin === 'optional')} || p) {`,
        `  r = ${ref(field.check)}(v);`,
        `  if (r === R) { if (${optin !== undefined && optionalOut} && !p) {} else return R; }`,
        `  else if (!p && ${optin === undefined}) return R;`,
        `  else { if (p) seen++; if (r === undefined ? (!p && ${optin === 'defaulted' && !optionalOut}) || (p && v !== undefined) : !p || r !== v) same = false; }`,
        `}`,
      );
    }
  }
  lines.push(
    'if (same && Object.getPrototypeOf(input) === P) { let n = 0; for (const _ in input) n++; if (n === seen) return input; }',
    'return copy(input);',
  );
  try {
    return new Function('e', 'R', 'P', 'copy', `return function check(input) {\n${lines.join('\n')}\n};`)(
      env,
      REJECTED,
      Object.prototype,
      copy,
    ) as Check;
  } catch {
    return undefined;
  }
}

/**
 * A leaf that returns its input unchanged and rejects undefined, as an inline test of variable `x`;
 * undefined for anything else. Constants too rich to inline go through `ref`.
 */
function leafTest(node: Node, ref: (value: unknown) => string): ((x: string) => string) | undefined {
  const def = node._zod.def;
  if (def.coerce) return undefined;
  let type: (x: string) => string;
  switch (def.type) {
    case 'string':
      type = (x) => `typeof ${x} === "string"`;
      break;
    case 'number':
      type = (x) => `Number.isFinite(${x})`;
      break;
    case 'boolean':
      type = (x) => `typeof ${x} === "boolean"`;
      break;
    case 'literal':
    case 'enum': {
      const values = node._zod.values;
      if (values === undefined || values.has(undefined)) return undefined;
      const set = ref(values);
      type = (x) => `${set}.has(${x})`;
      break;
    }
    default:
      return undefined;
  }
  const tests: ((x: string) => string)[] = [type];
  for (const check of def.checks ?? []) {
    const test = checkSource(check._zod.def, ref);
    if (test === undefined) return undefined;
    tests.push(test);
  }
  return (x) => tests.map((test) => test(x)).join(' && ');
}

/** One check as an inline expression; the same rules as compileCheck. */
function checkSource(check: CheckDef, ref: (value: unknown) => string): ((x: string) => string) | undefined {
  const num = (value: number | undefined) => (typeof value === 'number' && !Number.isNaN(value) ? String(value) : undefined);
  switch (check.check) {
    case 'min_length': {
      const min = num(check.minimum);
      return min === undefined ? undefined : (x) => `${x}.length >= ${min}`;
    }
    case 'max_length': {
      const max = num(check.maximum);
      return max === undefined ? undefined : (x) => `${x}.length <= ${max}`;
    }
    case 'length_equals': {
      const exact = num(check.length);
      return exact === undefined ? undefined : (x) => `${x}.length === ${exact}`;
    }
    case 'greater_than': {
      const min = num(check.value);
      const op = check.inclusive ? '>=' : '>';
      return min === undefined ? undefined : (x) => `${x} ${op} ${min}`;
    }
    case 'less_than': {
      const max = num(check.value);
      const op = check.inclusive ? '<=' : '<';
      return max === undefined ? undefined : (x) => `${x} ${op} ${max}`;
    }
    case 'number_format': {
      const range = FORMAT_RANGES[check.format ?? 'float64'];
      if (range === undefined) return undefined;
      const [min, max, integer] = range;
      return (x) => `${integer ? `Number.isInteger(${x}) && ` : ''}${x} >= ${min} && ${x} <= ${max}`;
    }
    default: {
      // Refinements: called, not inlined.
      const test = compileCheck(check);
      if (test === undefined) return undefined;
      const fn = ref(test);
      return (x) => `${fn}(${x})`;
    }
  }
}

/**
 * A record over a non-enumerable key type (strings with bounds, say): every own enumerable key is
 * checked, and the output built as zod builds it — or the input itself when it is a plain object
 * whose keys and values all come out unchanged.
 */
function compileRecord(node: Node): Check | undefined {
  const def = node._zod.def;
  const keyNode = def.keyType as Node;
  if (keyNode._zod.values !== undefined || def.mode === 'loose' || !hasNoChecks(node)) return undefined;
  const keyCheck = compile(keyNode);
  const valueCheck = compile(def.valueType as Node);
  return (input) => {
    if (!isPlainObject(input)) return REJECTED;
    const out: Record<PropertyKey, unknown> = {};
    let same = Object.getPrototypeOf(input) === Object.prototype;
    for (const key of Reflect.ownKeys(input)) {
      if (key === '__proto__' || !Object.prototype.propertyIsEnumerable.call(input, key)) {
        same = false;
        continue;
      }
      let outKey = keyCheck(key);
      if (outKey === REJECTED && typeof key === 'string' && NUMERIC_KEY.test(key)) outKey = keyCheck(Number(key));
      if (outKey === REJECTED) return REJECTED;
      if (outKey === '__proto__') {
        same = false;
        continue;
      }
      const value = valueCheck(input[key]);
      if (value === REJECTED) return REJECTED;
      if (outKey !== key || value !== input[key]) same = false;
      out[outKey as PropertyKey] = value;
    }
    return same ? input : out;
  };
}

/** zod's union: the first option that accepts the input wins. An exclusive union (xor) is zod's. */
function compileUnion(node: Node): Check | undefined {
  const def = node._zod.def;
  if (def.inclusive === false || !hasNoChecks(node)) return undefined;
  const options = (def.options ?? []).map(compile);
  return (v) => {
    for (let i = 0; i < options.length; i++) {
      const out = (options[i] as Check)(v);
      if (out !== REJECTED) return out;
    }
    return REJECTED;
  };
}

/**
 * zod's discriminated union: the discriminator's value picks the one option to run. The lookup is
 * built from each option's own discriminator values (zod's `propValues`), so a kind added to the
 * union is found here too.
 */
function compileDiscriminated(node: Node): Check | undefined {
  const def = node._zod.def;
  const discriminator = def.discriminator as string;
  if (def.unionFallback || !hasNoChecks(node)) return undefined;
  const byValue = new Map<unknown, Check>();
  for (const option of def.options ?? []) {
    const values = option._zod.propValues?.[discriminator];
    if (values === undefined) return undefined;
    const check = compile(option);
    for (const value of values) {
      // A value two options claim, or an omittable tag: zod settles those.
      if (byValue.has(value) || value === undefined) return undefined;
      byValue.set(value, check);
    }
  }
  return (v) => {
    if (!isObject(v)) return REJECTED;
    const option = byValue.get(v[discriminator]);
    return option === undefined ? REJECTED : option(v);
  };
}
