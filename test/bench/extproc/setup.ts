/**
 * The deployment both h2load parts measure (`extproc`: the EPP against a bare server; `sharing`: the
 * EPP with sharing on and off), so their figures describe the same EPP under the same load: a pool of
 * PODS pods over three zones whose metrics are refreshed every REFRESH_MS, the EPP of LOCAL_ZONE, a
 * SUBSET-entry hint per request, and h2load with CLIENTS connections of STREAMS streams at saturation.
 */
export const ZONES = ['zone-a', 'zone-b', 'zone-c'];
export const LOCAL_ZONE = 'zone-a';
export const PODS = 100;
export const SUBSET = 16;
export const MODEL = 'llama';
export const REFRESH_MS = 250;
export const CLIENTS = 4;
export const STREAMS = 32;
