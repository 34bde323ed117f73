#!/usr/bin/env node
// Thin launcher: the compiled entry point is built by `npm run build` (run by `npm ci`).
import '../dist/main.js';
