import { relative } from 'node:path';
import type { Reporter, SerializedError, TestModule } from 'vitest/node';

/**
 * Ends a run with one plain line, `N passed, N failed, N skipped`, after vitest's own summary, so
 * CI logs and scripts can read the outcome without knowing vitest's format.
 *
 * A test file can fail without a failing test: it did not load (an import or a top-level statement
 * threw), or a hook around its tests threw (vitest then marks the tests skipped). Each such file
 * counts as one failure and is named after the counts, as does an error outside any test; the line
 * never reads "0 failed" for a run vitest failed.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<SerializedError> = []): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    const brokenFiles: string[] = [];
    for (const module of testModules) {
      let failedHere = 0;
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === 'passed') passed++;
        else if (state === 'failed') failedHere++;
        else skipped++;
      }
      failed += failedHere;
      if (module.state() === 'failed' && failedHere === 0) brokenFiles.push(relative(process.cwd(), module.moduleId));
    }
    failed += brokenFiles.length + unhandledErrors.length;
    const notes = [
      ...(brokenFiles.length > 0
        ? [`${brokenFiles.length} file${brokenFiles.length === 1 ? '' : 's'} failed outside their tests: ${brokenFiles.join(', ')}`]
        : []),
      ...(unhandledErrors.length > 0 ? [`${unhandledErrors.length} error${unhandledErrors.length === 1 ? '' : 's'} outside any test`] : []),
    ];
    process.stdout.write(`\n${passed} passed, ${failed} failed, ${skipped} skipped${notes.length > 0 ? ` (${notes.join('; ')})` : ''}\n`);
  }
}
