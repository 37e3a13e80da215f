// Bulk seeding for the benchmarks: a pool of converged nodes with 8 H100s each, in a few statements.
import type { Db } from '../src/db/pool.ts';
import { newPoolId } from '../src/ids.ts';

/** Node ids are `${prefix}${nodes}-${i}` (i from 1); GPU ids `GPU-${prefix}${nodes}-${i}-${g}`. */
export async function seedPool(db: Db, nodes: number, prefix: string): Promise<{ poolId: string; nodeIds: string[] }> {
  const nodeIds = Array.from({ length: nodes }, (_, i) => `${prefix}${nodes}-${i + 1}`);
  return { poolId: await seedNodes(db, nodeIds), nodeIds };
}

/**
 * A pool of the named nodes (owned by `ownerTenant`), each with 8 H100s `GPU-${node}-${g}` and a zone label (and
 * `labels`, as the Node reconciler copies a Node's labels). Returns the pool id.
 */
export async function seedNodes(db: Db, nodeIds: string[], ownerTenant = 'bench', labels: Record<string, string> = {}): Promise<string> {
  const poolId = newPoolId();
  await db.query(`INSERT INTO pools (id, name, owner_tenant, gpu_model) VALUES ($1, $2, $3, 'H100')`, [poolId, `bench-${poolId.toLowerCase()}`, ownerTenant]);
  await db.query(
    `INSERT INTO nodes (id, pool_id, converged, labels)
     SELECT n, $1, true, jsonb_build_object('topology.kubernetes.io/zone', 'z' || (i % 16)) || $3::jsonb
     FROM unnest($2::text[]) WITH ORDINALITY AS t(n, i)`,
    [poolId, nodeIds, JSON.stringify(labels)],
  );
  await db.query(
    `INSERT INTO devices (id, node_id, class, attributes)
     SELECT 'GPU-' || n || '-' || g, n, 'gpu', jsonb_build_object('gpuModel', 'H100', 'vramGiB', 80, 'numaNode', g / 4, 'nvlinkDomain', n)
     FROM unnest($1::text[]) AS t(n), generate_series(0, 7) g`,
    [nodeIds],
  );
  await db.query('ANALYZE');
  return poolId;
}
