import { Fleet } from './src/index.ts';
const t = Date.now();
const rs: any[] = [], ms: any[] = [];
for (let i = 0; i < 10000; i++) {
  rs.push({ v: 1, kind: 'readiness', pool: 'replay', zone: `zone-${'abc'[i % 3]}`, region: 'r1', pod: `vllm-${i}`, address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:8000`, ready: true, engine: 'vllm', observedAt: t });
  ms.push({ v: 1, kind: 'metrics', pool: 'replay', zone: `zone-${'abc'[i % 3]}`, pod: `vllm-${i}`, observedAt: t, waitingRequests: i % 7, runningRequests: i % 11, kvCacheUsage: (i % 100) / 100 });
}
for (let r = 0; r < 60; r++) {
  const f = new Fleet();
  let c = process.cpuUsage();
  for (let i = 0; i < 10000; i++) f.apply(rs[i], t);
  let u = process.cpuUsage(c);
  const a = (u.user + u.system) / 10000;
  c = process.cpuUsage();
  for (let i = 0; i < 10000; i++) f.apply(ms[i], t);
  u = process.cpuUsage(c);
  const b = (u.user + u.system) / 10000;
  c = process.cpuUsage();
  for (let i = 0; i < 10000; i++) f.apply({ ...ms[i], observedAt: t + 1 + r }, t + 1);
  u = process.cpuUsage(c);
  console.log(`readiness new ${a.toFixed(2)} µs, metrics first ${b.toFixed(2)} µs, metrics update ${((u.user + u.system) / 10000).toFixed(2)} µs`);
}
