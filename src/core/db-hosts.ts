// A DATABASE_URL that names several hosts, as libpq takes it (`postgres://u:p@db-a:5432,db-b:5432/ledger?
// target_session_attrs=read-write`): the primary and its standbys of a replicated PostgreSQL, tried in order until one
// takes writes. node-postgres connects to one host only, so the pool (src/db/pool.ts) opens each connection on the host this
// says and moves on when that host is down or a standby.

export interface DbHost {
  host: string;
  port: number;
}

export type SessionAttrs = 'read-write' | 'primary' | 'any';

export interface DbTargets {
  hosts: DbHost[];
  /** Which server a session may use: read-write (the default with several hosts) and primary refuse a standby. */
  sessionAttrs: SessionAttrs;
  /** The URL for one host: the same user, password, database and parameters, without target_session_attrs. */
  urlFor(host: DbHost): string;
}

const ATTRS: readonly SessionAttrs[] = ['read-write', 'primary', 'any'];

/**
 * The hosts of a postgres:// URL that names several (or sets target_session_attrs); undefined for any other URL, which
 * node-postgres takes as it is (one host, a socket directory, libpq parameters). Throws on a malformed host list.
 */
export function parseDbTargets(url: string): DbTargets | undefined {
  const hostList = /^postgres(?:ql)?:\/\/(?:[^@/?#]*@)?([^/?#]*)/.exec(url)?.[1];
  if (hostList === undefined || (!hostList.includes(',') && !/[?&]target_session_attrs=/.test(url))) return undefined;
  return parseHosts(url);
}

function parseHosts(url: string): DbTargets {
  const m = /^(postgres(?:ql)?:\/\/)([^@/?#]*@)?([^/?#]*)(.*)$/.exec(url);
  if (!m) throw new Error('DATABASE_URL is not a postgres:// URL');
  const [, scheme, auth = '', hostList, tail = ''] = m as unknown as [string, string, string | undefined, string, string | undefined];
  const hosts = hostList.split(',').map((h): DbHost => {
    const hp = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(h);
    if (!hp) throw new Error(`DATABASE_URL has an empty or malformed host in "${hostList}"`);
    const port = hp[2] === undefined ? 5432 : Number(hp[2]);
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`DATABASE_URL host ${h} has no valid port`);
    return { host: hp[1]!, port };
  });
  const q = tail.indexOf('?');
  const path = q < 0 ? tail : tail.slice(0, q);
  const params = new URLSearchParams(q < 0 ? '' : tail.slice(q + 1));
  const given = params.get('target_session_attrs');
  params.delete('target_session_attrs');
  if (given !== null && !ATTRS.includes(given as SessionAttrs)) {
    throw new Error(`DATABASE_URL target_session_attrs must be one of ${ATTRS.join(', ')}, not "${given}"`);
  }
  const sessionAttrs = (given as SessionAttrs | null) ?? (hosts.length > 1 ? 'read-write' : 'any');
  const query = params.toString();
  return {
    hosts,
    sessionAttrs,
    urlFor: (h) => `${scheme}${auth}${h.host}:${h.port}${path}${query ? `?${query}` : ''}`,
  };
}

/**
 * Which host the next connection goes to: the one that last worked, until a connection finds it down or a standby;
 * then the next in the list, round and round. Connections already open on the old host fail on their own.
 */
export class HostRing {
  private i = 0;
  constructor(readonly hosts: readonly DbHost[]) {
    if (!hosts.length) throw new Error('no database host');
  }
  get current(): DbHost {
    return this.hosts[this.i]!;
  }
  /** `failed` did not do: move past it, unless another connection has moved already. */
  failed(failed: DbHost): void {
    if (this.hosts[this.i] === failed) this.i = (this.i + 1) % this.hosts.length;
  }
}
