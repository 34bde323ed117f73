/** An exposition the collector will not use: a malformed line, name or value, or a required series missing. */
export class ExpositionError extends Error {
  override readonly name = 'ExpositionError';
}
