import { readdirSync } from 'node:fs';
import js from '@eslint/js';
import boundaries from 'eslint-plugin-boundaries';
import tseslint from 'typescript-eslint';

/**
 * The house rules for imports, enforced by eslint-plugin-boundaries (test/lint/boundaries.test.ts
 * proves each one rejects a bad import). Workspace imports (`@spillway/x`) resolve to the source
 * files through the `@spillway/source` condition, so a rule about a package holds however it is
 * imported. Later policies override earlier ones.
 */
const workspaces = (dir) =>
  readdirSync(new globalThis.URL(`./${dir}/`, import.meta.url), { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name);
const PACKAGES = workspaces('packages');
const SERVICES = workspaces('services');

/**
 * The pure core: no I/O, no clock they were not handed. Each may import only the workspace
 * packages and npm modules listed here, and no Node.js built-in module at all.
 */
const PURE = {
  events: { packages: [], modules: ['zod', '@msgpack/msgpack'] },
  fleet: { packages: ['events'], modules: [] },
  // Never protocol: picking knows nothing of ext_proc.
  scheduler: { packages: ['events', 'fleet'], modules: ['zod'] },
  protocol: { packages: ['events'], modules: ['@bufbuild/protobuf', 'zod'] },
  engine: { packages: [], modules: [] },
  // Reads its vocabulary and template files once at load (below); no sockets, no clock.
  tokenizer: { packages: [], modules: ['zod', '@huggingface/tokenizers', '@huggingface/jinja'] },
};

/**
 * The EPP's rooms (services/epp/src/<room>/), top floor first (docs/architecture.md). A room may
 * import the rooms on the floors below it, never one above it or beside it; nothing imports the
 * entry points (src/index.ts, src/main.ts), which stand above app.
 */
const EPP_FLOORS = [
  // Assembly and lifecycle: makes the parts, serves them, follows NATS, shuts down.
  ['app'],
  // The operators' view: reads telemetry's decision log and spill matrix.
  ['ui'],
  // Flags, config file, reload and watch; a reload is counted in telemetry's metrics.
  ['config'],
  // Every metric and log; implements the request path's observer.
  ['telemetry'],
  // One ext_proc stream end to end, and the request control behind narrow interfaces.
  ['request'],
  // Features the app wires in (kv owns its flags and tokenizer files, which config reads).
  ['kv', 'shared-state'],
];
/** Element types of the EPP's source files; with `service`, they make up services/*. */
const EPP_SRC = ['epp-room', 'epp-entry'];
const SERVICE_SRC = ['service', ...EPP_SRC];

const pkg = (name) => ({ element: { type: 'package', captured: { name } } });
const eppRoom = (room) => ({ element: { type: 'epp-room', captured: { room } } });
const testsOf = (kind, name) => ({ element: { type: `${kind}-tests`, captured: { name } } });
const NON_TEST = { element: { types: ['package', ...SERVICE_SRC, 'infra'] } };

const eppFloorPolicies = EPP_FLOORS.flatMap((floor, i) => {
  const below = EPP_FLOORS.slice(i + 1).flat();
  return floor.flatMap((room) => [
    {
      from: eppRoom(room),
      disallow: { to: { element: { types: EPP_SRC } } },
      message: `the EPP's ${room} room may import only ${below.length > 0 ? `the rooms below it (${below.join(', ')})` : 'its own files'}: no import runs back up`,
    },
    { from: eppRoom(room), allow: { to: eppRoom([room, ...below]) } },
  ]);
});

const purePolicies = Object.entries(PURE).flatMap(([name, allowed]) => [
  {
    from: pkg(name),
    disallow: { to: { element: { types: ['package', 'service'] } } },
    message: `${name} is pure: it may import only ${allowed.packages.map((p) => `@spillway/${p}`).join(', ') || 'no workspace package'}`,
  },
  ...allowed.packages.map((p) => ({ from: pkg(name), allow: { to: pkg(p) } })),
  {
    from: pkg(name),
    disallow: { to: { module: { origin: ['core', 'external'] } } },
    message: `${name} is pure: no Node.js built-in (I/O) and no npm module beyond ${allowed.modules.join(', ') || 'none'}`,
  },
  ...allowed.modules.map((source) => ({
    from: pkg(name),
    allow: { to: { module: { origin: 'external', source: [source, `${source}/**`] } } },
  })),
]);

const policies = [
  ...purePolicies,
  // events validates addresses with node:net's isIP* (pure functions); nothing else of node:net.
  {
    from: pkg('events'),
    allow: { to: { module: { origin: 'core', source: 'node:net' } }, dependency: { specifiers: ['isIP', 'isIPv4', 'isIPv6'] } },
  },
  {
    from: pkg('events'),
    disallow: { to: { module: { origin: 'core', source: 'node:net' } }, dependency: { specifiers: '!(isIP|isIPv4|isIPv6)' } },
    message: 'events is pure: of node:net only the address validators isIP, isIPv4 and isIPv6',
  },
  // tokenizer reads its files at load (and resolves a preset's files through node's module resolution).
  { from: pkg('tokenizer'), allow: { to: { module: { origin: 'core', source: ['node:fs', 'node:path', 'node:module'] } } } },
  // protocol's hand-written code names grpc-js types only (its generated stubs build the service definitions).
  { from: pkg('protocol'), allow: { to: { module: { origin: 'external', source: '@grpc/grpc-js' } }, dependency: { kind: 'type' } } },
  // Packages never import services.
  {
    from: { element: { types: ['package', 'package-tests'] } },
    disallow: { to: { element: { types: [...SERVICE_SRC, 'service-tests'] } } },
    message: 'packages never import services',
  },
  // Services import each other only through packages (a service's own files are internal, not checked).
  {
    from: { element: { types: SERVICE_SRC } },
    disallow: { to: { element: { types: SERVICE_SRC } } },
    message: 'services import each other only through packages',
  },
  // A service's own directories are one service (the EPP's page in web/ reads the types of src/).
  ...SERVICES.map((name) => ({
    from: { element: { type: 'service', captured: { name } } },
    allow: { to: { element: { type: 'service', captured: { name } } } },
  })),
  { from: { element: { type: 'service', captured: { name: 'epp' } } }, allow: { to: { element: { types: EPP_SRC } } } },
  { from: { element: { types: EPP_SRC } }, allow: { to: { element: { type: 'service', captured: { name: 'epp' } } } } },
  // The entry points assemble the EPP from its rooms; the rooms keep to their floors.
  { from: { element: { type: 'epp-entry' } }, allow: { to: { element: { types: EPP_SRC } } } },
  ...eppFloorPolicies,
  // No workspace imports another's test/ (nor the repository's test/): only its own tests may.
  {
    disallow: { to: { element: { types: ['package-tests', 'service-tests', 'repo-tests'] } } },
    message: "test helpers are private to their workspace's tests; shared ones belong in @spillway/testkit",
  },
  ...PACKAGES.map((name) => ({ from: testsOf('package', name), allow: { to: testsOf('package', name) } })),
  ...SERVICES.map((name) => ({ from: testsOf('service', name), allow: { to: testsOf('service', name) } })),
  { from: { element: { type: 'repo-tests' } }, allow: { to: { element: { type: 'repo-tests' } } } },
  // The simulators model servers and routing in their own time: they never touch NATS.
  ...['whatif', 'sim'].map((name) => ({
    from: { element: { type: 'service', captured: { name } } },
    disallow: { to: pkg('bus') },
    message: `${name} never imports @spillway/bus: it simulates, it does not follow or publish the event stream`,
  })),
  // Infra describes deployments and starts the services as processes; it never imports their code.
  {
    from: { element: { type: 'infra' } },
    disallow: { to: { element: { types: [...SERVICE_SRC, 'service-tests'] } } },
    message: 'infra never imports services: it starts them as processes',
  },
  // The test kit is for tests; the demo and the binaries use @spillway/proc.
  { from: NON_TEST, disallow: { to: pkg('testkit') }, message: 'only tests import @spillway/testkit' },
  { from: pkg('testkit'), allow: { to: pkg('testkit') } },
];

export default tseslint.config(
  {
    ignores: [
      '**/dist/**',
      '**/node_modules/**',
      'proto/gen/**',
      'packages/protocol/src/gen/**',
      'packages/xds-protocol/src/gen/**',
      'coverage/**',
      'test/lint/fixtures/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    // Typed rules for async Node: a promise nobody awaits or catches is a crash or a lost error.
    files: ['**/*.ts'],
    languageOptions: {
      parserOptions: { project: ['tsconfig.check.json', 'services/epp/web/tsconfig.json'], tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
    },
  },
  {
    rules: {
      // More than five parameters read better as one named object.
      'max-params': ['error', 5],
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  {
    files: ['**/*.ts'],
    plugins: { boundaries },
    settings: {
      'import/resolver': {
        typescript: { project: ['tsconfig.check.json'], conditionNames: ['@spillway/source', 'types', 'import', 'node', 'default'] },
      },
      // A workspace's own node_modules (unhoisted npm modules) are npm modules, not the workspace.
      'boundaries/ignore': ['**/node_modules/**'],
      // Whole paths from the repository root; the first matching descriptor wins, so each
      // workspace's test/ comes before the workspace.
      'boundaries/elements': [
        { type: 'package-tests', pattern: 'packages/*/test/**', capture: ['name'], partialMatch: false },
        { type: 'service-tests', pattern: 'services/*/test/**', capture: ['name'], partialMatch: false },
        { type: 'package', pattern: 'packages/*/**', capture: ['name'], partialMatch: false },
        { type: 'epp-room', pattern: 'services/epp/src/*', capture: ['room'], partialMatch: false },
        { type: 'epp-entry', pattern: 'services/epp/src', partialMatch: false },
        { type: 'service', pattern: 'services/*/**', capture: ['name'], partialMatch: false },
        { type: 'infra', pattern: 'infra/**', partialMatch: false },
        { type: 'repo-tests', pattern: 'test/**', partialMatch: false },
      ],
    },
    rules: {
      'boundaries/dependencies': ['error', { default: 'allow', checkAllOrigins: true, policies }],
    },
  },
  {
    // spillway-xds's protocol core is pure like the packages above (services/xds/src/xds.ts is its shell).
    files: ['services/xds/src/{hub,session,resources,hash,view-sink,limits,rate-limit}.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['node:*', '@grpc/*', '@nats-io/*', 'pino', 'prom-client', './xds.js', './metrics.js', './health.js'],
              message: 'pure: no I/O',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['**/*.js'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly' } },
  },
);
