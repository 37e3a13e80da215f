#!/usr/bin/env node
// Runs the TypeScript sources through tsx, so the CLI works straight from a checkout without a build step.
import { register } from 'tsx/esm/api';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

register();
const here = path.dirname(fileURLToPath(import.meta.url));
await import(path.join(here, '..', 'src', 'cli', 'main.ts'));
