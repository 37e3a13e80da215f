import { defineConfig } from 'vitest/config';

// Three projects, split by what they need: `unit` needs nothing, `db` a real PostgreSQL (started by the global setup,
// one template database cloned per test file), `cluster` real Kubernetes components (see e2e/cluster/).
export default defineConfig({
  test: {
    // The default reporter, and at the end a table of where the time went (test/support/timing-reporter.ts).
    reporters: ['default', './test/support/timing-reporter.ts'],
    projects: [
      {
        test: {
          name: 'unit',
          include: ['src/**/*.test.ts', 'test/unit/**/*.test.ts'],
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          name: 'db',
          include: ['test/db/**/*.test.ts'],
          globalSetup: ['test/support/pg-global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          fileParallelism: true,
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
      {
        test: {
          name: 'cluster',
          include: ['e2e/cluster/**/*.test.ts'],
          // PostgreSQL too: the controller suites book into a database cloned per file (test/support/db.ts).
          globalSetup: ['e2e/cluster/global-setup.ts', 'test/support/pg-global-setup.ts'],
          testTimeout: 180_000,
          hookTimeout: 180_000,
          // One shared cluster whose components tests restart: files one at a time, after the other projects.
          fileParallelism: false,
          maxWorkers: 1,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
