// Development only: starts a simulation worker from the TypeScript sources (the benchmark and the
// tests run the workspace from source). Worker threads do not inherit the TypeScript loader of the
// thread that starts them, so this registers it first. Not part of the built package.
import { workerData } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
await import(workerData.workerModule);
