#!/usr/bin/env node
// `kubectl bettercompute …`: the better-compute command as a kubectl plugin. kubectl runs any executable named
// `kubectl-<name>` on PATH for `kubectl <name>`, with the remaining arguments; installing the package puts this one on
// PATH under that name (package.json "bin"). Same commands, flags and environment (KUBECONFIG, DATABASE_URL, ...);
// only the name in the usage text differs.
process.env.BETTER_COMPUTE_PROG = 'kubectl bettercompute';
await import('./better-compute.js');
