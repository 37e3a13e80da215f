// `npm run soak -- --minutes N [--seed S] [--database embedded|replicated]`: the soak of e2e/soak/soak.ts on the test cluster (brought up, and taken
// down again, unless another run has it up). Exits 1 when an invariant did not hold.
import { parseArgs } from 'node:util';
import { acquireCluster, releaseCluster } from '../cluster/harness.ts';
import { formatReport, runSoak } from './soak.ts';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '3' },
    seed: { type: 'string' },
    'checkpoint-every': { type: 'string', default: '60' },
    database: { type: 'string', default: 'embedded' },
  },
});
const minutes = Number(values.minutes);
const database = values.database;
if (!(minutes > 0) || (database !== 'embedded' && database !== 'replicated')) {
  process.stderr.write('usage: npm run soak -- --minutes N [--seed S] [--checkpoint-every SECONDS] [--database embedded|replicated]\n');
  process.exit(2);
}
await acquireCluster();
let code = 1;
try {
  const report = await runSoak({
    minutes,
    checkpointEveryMs: Number(values['checkpoint-every']) * 1000,
    database,
    ...(values.seed ? { seed: Number(values.seed) } : {}),
  });
  process.stdout.write(`${formatReport(report)}\n`);
  code = report.violations.length ? 1 : 0;
} finally {
  await releaseCluster();
}
process.exit(code);
