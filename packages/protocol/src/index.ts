// @spillway/protocol: ext_proc messages <-> typed requests and decisions; the EPP protocol rules.
// Pure: no I/O, no clock; randomness is injected.
export * from './constants.js';
export * from './messages.js';
export { decodeProcessingRequest } from './decode.js';
export { readSubsetHint, readGatewayZone, readServedEndpoint } from './metadata.js';
export { renderDestination, parseDestination } from './destination.js';
export { headerValue, readRequestHeaders, readResponseHeaders } from './headers.js';
export type { RequestHeaders, ResponseHeaders } from './headers.js';
export { decodePhase, readBodyModes, bodyModeOf, DEFAULT_BODY_MODES } from './phase.js';
export type { Phase, BodyMode, BodyModes } from './phase.js';
export {
  setHeader,
  requestHeadersResponse,
  bufferedRequestBodyResponse,
  streamedBodyResponses,
  routedResponses,
  responseHeadersResponse,
  responseBodyResponse,
  requestTrailersResponse,
  responseTrailersResponse,
} from './responses.js';
export type { RequestMutation, RoutedMode, RoutedRequest } from './responses.js';
export { immediateResponse, errorBody } from './immediate.js';
export type { ErrorStatus, ErrorDetails } from './immediate.js';
export { BodyAccumulator } from './body.js';
export { parseInferenceBody, apiKindForPath, RequestBodyError } from './openai.js';
export type { ApiKind, BodyErrorKind, BodyParseResult, InferenceBody, JsonObject, JsonValue } from './openai.js';
export { compileModelRewrites, rewriteModel } from './rewrite.js';
export type { ModelRewriteRule, ModelRewriteTarget, ModelRewriter, Random, RewrittenBody } from './rewrite.js';
export { prepareRequest } from './request.js';
export { outputLimitOf } from './output-limit.js';
export type { PreparedRequest, PrepareResult } from './request.js';
export { UsageTail, findUsage, USAGE_TAIL_BYTES } from './usage.js';
export type { TokenUsage } from './usage.js';
