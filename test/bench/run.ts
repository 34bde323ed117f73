import { cpus, loadavg, totalmem } from 'node:os';
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import type { BenchPart } from './part.js';
import { parts } from './parts.js';
import { describeLoad, QUICK_QUIET_WAIT_MS, QUIET_WAIT_MS, quietWaitFromEnv, waitForQuiet } from './quiet.js';

/**
 * `npm run bench [-- --quick] [-- <part>...]`: runs the named parts (all by default) and rewrites
 * their sections of BENCHMARKS.md, keeping the sections of parts not run.
 */
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const file = join(root, 'BENCHMARKS.md');
const args = process.argv.slice(2);
const quick = args.includes('--quick');
const names = args.filter((a) => !a.startsWith('--'));
const unknown = names.filter((n) => !parts.some((p) => p.name === n));
if (unknown.length > 0) {
  console.error(`unknown bench part(s): ${unknown.join(', ')}; known: ${parts.map((p) => p.name).join(', ')}`);
  process.exit(2);
}
const selected: BenchPart[] = names.length > 0 ? parts.filter((p) => names.includes(p.name)) : parts;

const MARK = (name: string, edge: 'begin' | 'end') => `<!-- bench:${name}:${edge} -->`;

function readSections(): Map<string, string> {
  const sections = new Map<string, string>();
  if (!existsSync(file)) return sections;
  const text = readFileSync(file, 'utf8');
  for (const part of parts) {
    const begin = text.indexOf(MARK(part.name, 'begin'));
    const end = text.indexOf(MARK(part.name, 'end'));
    if (begin >= 0 && end > begin) sections.set(part.name, text.slice(begin + MARK(part.name, 'begin').length, end).trim());
  }
  return sections;
}

function machine(): string {
  const cpu = cpus();
  return `${cpu.length} × ${cpu[0]?.model ?? 'unknown CPU'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}`;
}

const sections = readSections();
for (const part of selected) {
  const command = `npm run bench -- ${quick ? '--quick ' : ''}${part.name}`;
  console.log(`\n== ${part.title} (${command})`);
  const log = (m: string): void => console.log(`  ${m}`);
  const maxWaitMs = part.loadIndependent ? 0 : quietWaitFromEnv(quick ? QUICK_QUIET_WAIT_MS : QUIET_WAIT_MS);
  const quiet = await waitForQuiet(part.loadIndependent ? { maxWaitMs } : { maxWaitMs, log });
  const started = Date.now();
  const body = await part.run({ quick, command, log, quiet });
  const when = new Date().toISOString().slice(0, 16).replace('T', ' ');
  const load = part.loadIndependent
    ? `1-minute load average ${quiet.load.toFixed(2)} before this part, ${(loadavg()[0] as number).toFixed(2)} after (its figures are virtual-time results, independent of the load; only the wall time depends on it).`
    : describeLoad(quiet, loadavg()[0] as number);
  sections.set(
    part.name,
    `${body.trim()}\n\n_Measured ${when} UTC on ${machine()}; ${((Date.now() - started) / 1000).toFixed(0)} s; ${load} Command: \`${command}\`._`,
  );
  console.log(body);
}

const out = [
  '# Benchmarks',
  '',
  'Every figure here was measured by `npm run bench` on the machine named under each section, against a',
  'baseline measured in the same run. `npm run bench -- --quick` runs a short version of every part;',
  '`npm run bench -- <part>` runs one part and rewrites only its section.',
  '',
  ...parts.flatMap((p) => {
    const body = sections.get(p.name);
    return body ? [MARK(p.name, 'begin'), body, MARK(p.name, 'end'), ''] : [];
  }),
].join('\n');
writeFileSync(file, out);
console.log(`\nwrote ${file}`);
