/**
 * Polls `check` until it stops throwing or the deadline passes; rethrows the last failure.
 * Tests use this to wait for asynchronous effects without asserting how fast they happen.
 */
export async function eventually<T>(check: () => T | Promise<T>, timeoutMs = 10_000, intervalMs = 20): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  }
}
