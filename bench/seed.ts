// Bulk seeding for the benchmarks: a pool of `nodes` converged nodes with 8 H100s each, in a few statements.
import type { Db } from '../src/db/pool.ts';
import { newPoolId } from '../src/ids.ts';

/** Node ids are `${prefix}${nodes}-${i}` (i from 1); GPU ids `GPU-${prefix}${nodes}-${i}-${g}`. */
export async function seedPool(db: Db, nodes: number, prefix: string): Promise<{ poolId: string; nodeIds: string[] }> {
  const poolId = newPoolId();
  const p = `${prefix}${nodes}`;
  await db.query(`INSERT INTO pools (id, name, owner_tenant, gpu_model) VALUES ($1, $2, 'bench', 'H100')`, [poolId, `bench-${p}`]);
  await db.query(
    `INSERT INTO nodes (id, pool_id, converged, labels)
     SELECT $3 || '-' || i, $1, true, jsonb_build_object('topology.kubernetes.io/zone', 'z' || (i % 16)) FROM generate_series(1, $2) i`,
    [poolId, nodes, p],
  );
  await db.query(
    `INSERT INTO devices (id, node_id, class, attributes)
     SELECT 'GPU-' || $2 || '-' || i || '-' || g, $2 || '-' || i, 'gpu',
            jsonb_build_object('gpuModel', 'H100', 'vramGiB', 80, 'numaNode', g / 4, 'nvlinkDomain', $2 || '-' || i)
     FROM generate_series(1, $1) i, generate_series(0, 7) g`,
    [nodes, p],
  );
  await db.query('ANALYZE');
  return { poolId, nodeIds: Array.from({ length: nodes }, (_, i) => `${p}-${i + 1}`) };
}
