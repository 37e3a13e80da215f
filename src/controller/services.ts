// What every replica's listeners are handed (the webhook routers, tests): the controller's shared services. Its own
// file so that the routers (webhooks.ts) and the wiring (run.ts) do not import each other.
import type { KubeConfig } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import type { AccessReviewer, TokenReviewer } from '../api/authz-kubernetes.ts';
import type { Config } from '../config.ts';
import type { Clock } from '../db/clock.ts';
import type { Ledger } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import type { KubeClient } from '../kube/client.ts';
import type { Logger } from '../log.ts';
import type { Controllers } from './setup.ts';

export interface ControllerServices {
  config: Config;
  db: Db;
  /** Unfenced (as the extender's): writes of every replica, arbitrated by the database, not leader work. */
  ledger: Ledger;
  clock: Clock;
  kc: KubeConfig;
  kube: KubeClient;
  log: Logger;
  registry: Registry;
  /** TokenReview with a short cache (bearer tokens of node agents and other callers). */
  tokens: TokenReviewer;
  /** SubjectAccessReview with a short cache. */
  access: AccessReviewer;
  isLeader(): boolean;
  /** The informers' caches (Reservations, Namespaces, ...), kept by every replica. */
  informers: Controllers['ctx']['informers'];
}
