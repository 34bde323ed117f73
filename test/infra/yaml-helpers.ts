/** Small typed accessors for parsed YAML, so structure tests read paths without `any`. */
import { readFileSync } from 'node:fs';
import { parseAllDocuments, parse } from 'yaml';

export type Node = Record<string, unknown>;

export function isNode(value: unknown): value is Node {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Follows a path of keys and array indexes; throws naming the path when a step is missing. */
export function at(root: unknown, ...path: (string | number)[]): unknown {
  let current = root;
  const walked: (string | number)[] = [];
  for (const step of path) {
    walked.push(step);
    if (typeof step === 'number') {
      if (!Array.isArray(current) || step >= current.length) throw new Error(`no item at ${walked.join('.')}`);
      current = current[step] as unknown;
    } else {
      if (!isNode(current) || !(step in current)) throw new Error(`no key at ${walked.join('.')}`);
      current = current[step];
    }
  }
  return current;
}

export function node(root: unknown, ...path: (string | number)[]): Node {
  const value = at(root, ...path);
  if (!isNode(value)) throw new Error(`${path.join('.')} is not a mapping`);
  return value;
}

export function list(root: unknown, ...path: (string | number)[]): unknown[] {
  const value = at(root, ...path);
  if (!Array.isArray(value)) throw new Error(`${path.join('.')} is not a list`);
  return value as unknown[];
}

export function str(root: unknown, ...path: (string | number)[]): string {
  const value = at(root, ...path);
  if (typeof value !== 'string') throw new Error(`${path.join('.')} is not a string`);
  return value;
}

/** One YAML document; parse errors throw. */
export function readYaml(path: string): unknown {
  return parse(readFileSync(path, 'utf8'), { prettyErrors: true, strict: true, uniqueKeys: true });
}

/** Every non-empty document of a multi-document YAML file; any parse error or warning throws. */
export function readYamlDocuments(path: string): Node[] {
  const docs = parseAllDocuments(readFileSync(path, 'utf8'), { prettyErrors: true, strict: true, uniqueKeys: true });
  if (!Array.isArray(docs)) throw new Error(`${path}: not a YAML stream`);
  const out: Node[] = [];
  for (const doc of docs) {
    const problems = [...doc.errors, ...doc.warnings];
    if (problems.length > 0) throw new Error(`${path}: ${problems.map((p) => p.message).join('; ')}`);
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) continue;
    if (!isNode(value)) throw new Error(`${path}: a document is not a mapping`);
    out.push(value);
  }
  return out;
}
