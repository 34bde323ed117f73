import { defineConfig } from 'vitest/config';

// Tests import workspace packages from their TypeScript sources (the `@spillway/source` export
// condition), so `vitest` needs no build; spawned binaries still run the compiled `dist/`.
export default defineConfig({
  resolve: { conditions: ['@spillway/source'] },
  ssr: { resolve: { conditions: ['@spillway/source'] } },
  test: {
    include: ['packages/*/test/**/*.test.ts', 'services/*/test/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    maxWorkers: 2,
    reporters: ['default', './test/summary-reporter.ts'],
  },
});
