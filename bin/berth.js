#!/usr/bin/env node
// In a checkout, run the TypeScript sources directly (Node strips types), so the command is never
// stale; the published package ships only the compiled dist/.
import { existsSync } from 'node:fs';

const src = new URL('../src/cli/main.ts', import.meta.url);
const useSource = process.features.typescript && existsSync(src);
await import(useSource ? src.href : new URL('../dist/cli/main.js', import.meta.url).href);
