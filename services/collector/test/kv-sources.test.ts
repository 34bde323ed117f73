import { describe, expect, it } from 'vitest';
import { EndpointsFileError, parseEndpointsFile } from '../src/endpoints-file.js';
import { kvSourceOf, offsetPort } from '../src/kv-sources.js';

const defaults = { zone: 'zone-a', region: undefined };
const none = { format: undefined, eventsPort: undefined, replayPort: undefined, dataParallelSize: 1 };

describe("where the relay finds a server's KV events", () => {
  it('data-parallel ranks: listed per rank, or on consecutive ports from one endpoint (vLLM offset_endpoint_port)', () => {
    const [listed, sized, plain] = parseEndpointsFile(
      JSON.stringify([
        {
          pod: 'a',
          address: '10.0.0.1:8000',
          kvEvents: ['tcp://10.0.0.1:5557', 'tcp://10.0.0.1:6000'],
          kvReplay: ['tcp://10.0.0.1:5600', 'tcp://10.0.0.1:6001'],
        },
        { pod: 'b', address: '10.0.0.2:8000', kvEvents: 'tcp://10.0.0.2:5557', kvReplay: 'tcp://10.0.0.2:5558', kvDataParallelSize: 3 },
        { pod: 'c', address: '10.0.0.3:8000', kvEvents: 'tcp://10.0.0.3:5557' },
      ]),
      defaults,
    );
    expect(kvSourceOf(listed!, none)).toEqual({
      format: 'vllm',
      ranks: [
        { events: 'tcp://10.0.0.1:5557', replay: 'tcp://10.0.0.1:5600' },
        { events: 'tcp://10.0.0.1:6000', replay: 'tcp://10.0.0.1:6001' },
      ],
    });
    expect(kvSourceOf(sized!, none)?.ranks).toEqual([
      { events: 'tcp://10.0.0.2:5557', replay: 'tcp://10.0.0.2:5558' },
      { events: 'tcp://10.0.0.2:5558', replay: 'tcp://10.0.0.2:5559' },
      { events: 'tcp://10.0.0.2:5559', replay: 'tcp://10.0.0.2:5560' },
    ]);
    // --kv-data-parallel-size for endpoints that name none.
    expect(kvSourceOf(plain!, { ...none, dataParallelSize: 2 })?.ranks.map((r) => r.events)).toEqual([
      'tcp://10.0.0.3:5557',
      'tcp://10.0.0.3:5558',
    ]);
    expect(offsetPort('tcp://[::1]:5557', 2)).toBe('tcp://[::1]:5559');
  });

  it('the port convention, and TensorRT-LLM over HTTP (by format or engine)', () => {
    const [sim, trt] = parseEndpointsFile(
      JSON.stringify([
        { pod: 's', address: '10.0.0.4:8000' },
        { pod: 't', address: '10.0.0.5:8000', engine: 'trtllm' },
      ]),
      defaults,
    );
    expect(kvSourceOf(sim!, none)).toBeUndefined();
    expect(kvSourceOf(sim!, { ...none, eventsPort: 5557, replayPort: 5558 })).toEqual({
      format: 'vllm',
      ranks: [{ events: 'tcp://10.0.0.4:5557', replay: 'tcp://10.0.0.4:5558' }],
    });
    expect(kvSourceOf(trt!, { ...none, eventsPort: 5557 })).toEqual({
      format: 'trtllm',
      ranks: [{ events: 'http://10.0.0.5:8000/kv_cache_events' }],
    });
    expect(kvSourceOf(sim!, { ...none, format: 'trtllm' })?.ranks[0]?.events).toBe('http://10.0.0.4:8000/kv_cache_events');
    const [named] = parseEndpointsFile(
      JSON.stringify([{ pod: 'n', address: '10.0.0.6:8000', kvEventsFormat: 'trtllm', kvEvents: 'http://10.0.0.6:8000/kv_cache_events' }]),
      defaults,
    );
    expect(kvSourceOf(named!, none)).toEqual({ format: 'trtllm', ranks: [{ events: 'http://10.0.0.6:8000/kv_cache_events' }] });
  });

  it('refuses a replay list without an events list of its length, a list with a size, and bad formats', () => {
    const bad = [
      { pod: 'x', address: '10.0.0.1:8000', kvEvents: 'tcp://10.0.0.1:5557', kvReplay: ['tcp://10.0.0.1:5558'] },
      { pod: 'x', address: '10.0.0.1:8000', kvEvents: ['tcp://10.0.0.1:5557'], kvDataParallelSize: 2 },
      { pod: 'x', address: '10.0.0.1:8000', kvEventsFormat: 'tgi' },
      { pod: 'x', address: '10.0.0.1:8000', kvDataParallelSize: 33 },
      { pod: 'x', address: '10.0.0.1:8000', kvEvents: [] },
    ];
    for (const entry of bad) expect(() => parseEndpointsFile(JSON.stringify([entry]), defaults)).toThrow(EndpointsFileError);
  });
});
