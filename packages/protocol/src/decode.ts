// ProcessingRequest decoding for the server side, with metadata_context read straight into plain values.
import { BinaryReader } from '@bufbuild/protobuf/wire';
import {
  HttpBody,
  HttpHeaders,
  HttpTrailers,
  ProcessingRequest_AttributesEntry,
  ProtocolConfiguration,
  type ProcessingRequest,
} from './gen/envoy/service/ext_proc/v3/external_processor.js';
import { Metadata_TypedFilterMetadataEntry, type Metadata } from './gen/envoy/config/core/v3/base.js';

/**
 * `ProcessingRequest.decode`, with one difference in how, not in what: the generated code decodes
 * each `google.protobuf.Struct` of `metadata_context.filter_metadata` into Value/Struct/ListValue
 * messages and then unwraps them into plain values, allocating two objects per value; Envoy sends
 * the subset hint (a list of endpoints) and `envoy.lb` on every message, so that was a large part of
 * decoding. Here the values are built directly. The result is deep-equal to the generated decoder's
 * for every input, including its quirks (last oneof wins, a Value without kind is left out of a
 * Struct, `__proto__` keys are dropped, a zero tag or an end-group tag stops a message, the same
 * recursion limit and the same errors on truncated input), which a property test checks against
 * the generated decoder. Everything else is delegated to the generated code.
 */
export function decodeProcessingRequest(bytes: Uint8Array): ProcessingRequest {
  const reader = new BinaryReader(bytes);
  const depth = enter(reader);
  const message: ProcessingRequest = {
    request: undefined,
    metadataContext: undefined,
    attributes: {},
    observabilityMode: false,
    protocolConfig: undefined,
  };
  const end = reader.len;
  while (reader.pos < end) {
    const tag = reader.uint32();
    switch (tag) {
      case 18:
        message.request = { $case: 'requestHeaders', value: HttpHeaders.decode(reader, reader.uint32()) };
        continue;
      case 26:
        message.request = { $case: 'responseHeaders', value: HttpHeaders.decode(reader, reader.uint32()) };
        continue;
      case 34:
        message.request = { $case: 'requestBody', value: HttpBody.decode(reader, reader.uint32()) };
        continue;
      case 42:
        message.request = { $case: 'responseBody', value: HttpBody.decode(reader, reader.uint32()) };
        continue;
      case 50:
        message.request = { $case: 'requestTrailers', value: HttpTrailers.decode(reader, reader.uint32()) };
        continue;
      case 58:
        message.request = { $case: 'responseTrailers', value: HttpTrailers.decode(reader, reader.uint32()) };
        continue;
      case 66:
        message.metadataContext = decodeMetadata(reader, reader.uint32());
        continue;
      case 74: {
        const entry = ProcessingRequest_AttributesEntry.decode(reader, reader.uint32());
        if (entry.value !== undefined) message.attributes[entry.key] = entry.value;
        continue;
      }
      case 80:
        message.observabilityMode = reader.bool();
        continue;
      case 90:
        message.protocolConfig = ProtocolConfiguration.decode(reader, reader.uint32());
        continue;
    }
    if ((tag & 7) === 4 || tag === 0) break;
    reader.skip(tag & 7);
  }
  leave(reader, depth);
  return message;
}

/** The generated decoders count nesting on the reader itself; so does this, so the limit is shared. */
type Depth = { __tsProtoDecodeDepth?: number };
const RECURSION_LIMIT = 100;

/**
 * Enters one nested message; `leave` with what it returned. No try/finally: when decoding throws,
 * the whole reader is abandoned, so its count does not matter any more.
 */
function enter(reader: BinaryReader): number {
  const previous = (reader as unknown as Depth).__tsProtoDecodeDepth ?? 0;
  if (previous >= RECURSION_LIMIT) throw new Error('protobuf decode recursion limit exceeded');
  (reader as unknown as Depth).__tsProtoDecodeDepth = previous + 1;
  return previous;
}

function leave(reader: BinaryReader, previous: number): void {
  (reader as unknown as Depth).__tsProtoDecodeDepth = previous;
}

/** Skips an unknown field, or reports that the message ends here (as the generated loops do). */
function skipOrStop(reader: BinaryReader, tag: number): boolean {
  if ((tag & 7) === 4 || tag === 0) return true;
  reader.skip(tag & 7);
  return false;
}

function decodeMetadata(reader: BinaryReader, length: number): Metadata {
  const depth = enter(reader);
  const end = reader.pos + length;
  const message: Metadata = { filterMetadata: {}, typedFilterMetadata: {} };
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === 10) {
      // Metadata.FilterMetadataEntry { key = 1; Struct value = 2 }
      const entryLength = reader.uint32();
      let key = '';
      let value: Record<string, unknown> | undefined;
      const entryDepth = enter(reader);
      const entryEnd = reader.pos + entryLength;
      while (reader.pos < entryEnd) {
        const entryTag = reader.uint32();
        if (entryTag === 10) key = reader.string();
        else if (entryTag === 18) value = decodeStruct(reader, reader.uint32());
        else if (skipOrStop(reader, entryTag)) break;
      }
      leave(reader, entryDepth);
      if (value !== undefined) message.filterMetadata[key] = value;
      continue;
    }
    if (tag === 18) {
      const entry = Metadata_TypedFilterMetadataEntry.decode(reader, reader.uint32());
      if (entry.value !== undefined) message.typedFilterMetadata[entry.key] = entry.value;
      continue;
    }
    if (skipOrStop(reader, tag)) break;
  }
  leave(reader, depth);
  return message;
}

/** google.protobuf.Struct as a plain object (what Struct.unwrap(Struct.decode(...)) gives). */
function decodeStruct(reader: BinaryReader, length: number): Record<string, unknown> {
  const depth = enter(reader);
  const end = reader.pos + length;
  const fields: Record<string, unknown> = {};
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === 10) {
      // Struct.FieldsEntry { key = 1; Value value = 2 }
      const entryLength = reader.uint32();
      let key = '';
      let value: unknown;
      const entryDepth = enter(reader);
      const entryEnd = reader.pos + entryLength;
      while (reader.pos < entryEnd) {
        const entryTag = reader.uint32();
        if (entryTag === 10) key = reader.string();
        else if (entryTag === 18) value = decodeValue(reader, reader.uint32());
        else if (skipOrStop(reader, entryTag)) break;
      }
      leave(reader, entryDepth);
      // The generated code assigns `fields[key]` on a plain object, where `__proto__` is not an
      // own key, and unwrap copies own keys only: such an entry never reaches the result.
      if (value !== undefined && key !== '__proto__') fields[key] = value;
      continue;
    }
    if (skipOrStop(reader, tag)) break;
  }
  leave(reader, depth);
  return fields;
}

/** google.protobuf.Value as a plain value: null, number, string, boolean, object, array; undefined without a kind. */
function decodeValue(reader: BinaryReader, length: number): unknown {
  const depth = enter(reader);
  const end = reader.pos + length;
  let value: unknown;
  while (reader.pos < end) {
    const tag = reader.uint32();
    switch (tag) {
      case 8:
        reader.int32();
        value = null;
        continue;
      case 17:
        value = reader.double();
        continue;
      case 26:
        value = reader.string();
        continue;
      case 32:
        value = reader.bool();
        continue;
      case 42:
        value = decodeStruct(reader, reader.uint32());
        continue;
      case 50:
        value = decodeList(reader, reader.uint32());
        continue;
    }
    if (skipOrStop(reader, tag)) break;
  }
  leave(reader, depth);
  return value;
}

/** google.protobuf.ListValue as an array (entries without a kind stay, as undefined). */
function decodeList(reader: BinaryReader, length: number): unknown[] {
  const depth = enter(reader);
  const end = reader.pos + length;
  const values: unknown[] = [];
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === 10) {
      values.push(decodeValue(reader, reader.uint32()));
      continue;
    }
    if (skipOrStop(reader, tag)) break;
  }
  leave(reader, depth);
  return values;
}
