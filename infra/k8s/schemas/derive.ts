/**
 * Derives the JSON Schema of a custom resource from its published CRD, for validating rendered
 * manifests without a cluster:
 *   node --conditions=@spillway/source --import tsx infra/k8s/schemas/derive.ts CRD.yaml v1 > OUT.schema.json
 * Takes the version's openAPIV3Schema and keeps its structure and constraints (type, properties,
 * required, enum, pattern, min/max, items), dropping what JSON Schema validators do not know
 * (descriptions, defaults, `format: int32`, the `x-kubernetes-*` extensions, including CEL rules,
 * which the test checks by hand). Every object with declared properties gets
 * `additionalProperties: false`: the API server would silently prune an unknown field, so a
 * misspelt one must fail here.
 */
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

type Schema = Record<string, unknown>;

const KEEP = new Set([
  'type',
  'properties',
  'required',
  'enum',
  'pattern',
  'minLength',
  'maxLength',
  'minimum',
  'maximum',
  'items',
  'minItems',
  'maxItems',
  'additionalProperties',
  'minProperties',
  'maxProperties',
]);

export function strictSchema(node: Schema): Schema {
  const out: Schema = {};
  for (const [key, value] of Object.entries(node)) {
    if (!KEEP.has(key)) continue;
    if (key === 'properties') {
      out[key] = Object.fromEntries(Object.entries(value as Record<string, Schema>).map(([name, child]) => [name, strictSchema(child)]));
    } else if ((key === 'items' || key === 'additionalProperties') && typeof value === 'object' && value !== null) {
      out[key] = strictSchema(value as Schema);
    } else {
      out[key] = value;
    }
  }
  // metadata is typed `object` without properties in a CRD (the API server owns it): leave it open.
  if (out['properties'] !== undefined && out['additionalProperties'] === undefined) out['additionalProperties'] = false;
  return out;
}

export function deriveSchema(crdText: string, version: string): Schema {
  const crd = parse(crdText) as {
    spec: { group: string; names: { kind: string }; versions: { name: string; schema: { openAPIV3Schema: Schema } }[] };
  };
  const found = crd.spec.versions.find((v) => v.name === version);
  if (!found) throw new Error(`the CRD has no version ${version}`);
  return {
    $comment: `${crd.spec.names.kind} ${crd.spec.group}/${version}, derived by infra/k8s/schemas/derive.ts from the published CRD`,
    ...strictSchema(found.schema.openAPIV3Schema),
  };
}

if (process.argv[1]?.endsWith('derive.ts')) {
  const [crdPath, version] = process.argv.slice(2);
  if (!crdPath || !version) {
    process.stderr.write('usage: derive.ts CRD.yaml VERSION\n');
    process.exit(2);
  }
  process.stdout.write(`${JSON.stringify(deriveSchema(readFileSync(crdPath, 'utf8'), version), null, 2)}\n`);
}
