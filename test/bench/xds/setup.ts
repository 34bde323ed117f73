/** What the xds bench's processes agree on. */

/** The core NATS subject the bare push server fans out. */
export const PUSH_SUBJECT = 'spillway.bench.push';
