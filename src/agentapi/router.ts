// The agent API: node agents read their node's state from the ledger through the controller, so no agent holds the
// database's credentials. Mounted by the controller at /agent/v1 on its HTTPS webhook listener. Every request carries
// the agent's projected ServiceAccount token; the API server says whose it is (TokenReview). Only the agent's
// ServiceAccount, and only for the node its pod runs on (the token's node-name claim), is answered.
import express, { type NextFunction, type Request, type RequestHandler, type Response, type Router } from 'express';
import { capDeclaredBody } from '../http/body-cap.ts';
import { forbidden, invalidInput, notFound, toErrorResponse, unauthenticated } from '../http/errors.ts';
import type { Clock } from '../db/clock.ts';
import type { Db } from '../db/pool.ts';
import { errorFields, type Logger } from '../log.ts';
import { admissionDone, nodeState, NodeInventoryCache } from './state.ts';
import { claimHolding } from '../db/claims.ts';
import { judgePrepare } from './claims.ts';
import { ClaimPrepareAnswerSchema, ClaimPrepareRequestSchema, ClaimUid, NodeName, PodUid } from './wire.ts';
import { bearerToken, type Principal } from '../http/identity.ts';

/** The claim of a pod-bound ServiceAccount token that names the node of its pod. */
export const NODE_NAME_CLAIM = 'authentication.kubernetes.io/node-name';

/** The largest request body read (the API takes none), in bytes. */
export const AGENT_API_MAX_BODY_BYTES = 1024;

export interface AgentApiDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  /**
   * Bearer token → the user the API server says it is: TokenReviewer.authenticate (src/api/authz-kubernetes.ts), which
   * throws ApiError UNAUTHENTICATED for a token it does not accept.
   */
  authenticate: (token: string) => Promise<Principal>;
  /** The agent's ServiceAccount user: system:serviceaccount:<namespace>:better-compute-agent. */
  agentUsername: string;
  /** How long a node's atoms and reservations are reused, in milliseconds (0: never). Default 250. */
  stateCacheMs?: number;
  /**
   * Reads a ResourceClaim afresh from the API server (undefined: none by that name): ResourceClaimClient.get
   * (src/kube/resource-claims.ts). Without it the DRA prepare route is not served.
   */
  readClaim?: (namespace: string, name: string) => Promise<unknown>;
}

/** The agent's user name for the controller's namespace. */
export function agentUsernameFor(namespace: string, serviceAccount = 'better-compute-agent'): string {
  return `system:serviceaccount:${namespace}:${serviceAccount}`;
}

/** GET /nodes/:node/state, POST /nodes/:node/admissions/:podUid/done, POST /nodes/:node/claims/:claimUid/prepare (DRA). */
export function createAgentApiRouter(deps: AgentApiDeps): Router {
  const router = express.Router();
  const cache = new NodeInventoryCache(deps.stateCacheMs ?? 250);
  // Before the token is reviewed: a declared body over the cap costs no TokenReview.
  router.use(capDeclaredBody(AGENT_API_MAX_BODY_BYTES));

  const authorizeNode = nodeAuthorizer(deps);

  // The API takes no body: anything sent is read only up to the cap.
  const noBody = express.raw({ limit: AGENT_API_MAX_BODY_BYTES, type: () => true });

  router.get('/nodes/:node/state', authorizeNode, async (req: Request<{ node: string }>, res) => {
    res.set('cache-control', 'no-store');
    res.json(await nodeState(deps.db, deps.clock, req.params.node, cache));
  });

  router.post('/nodes/:node/admissions/:podUid/done', authorizeNode, noBody, async (req: Request<{ node: string; podUid: string }>, res) => {
    const uid = PodUid.safeParse(req.params.podUid);
    if (!uid.success) throw invalidInput(`${req.params.podUid} is not a pod uid`);
    const dropped = await admissionDone(deps.db, req.params.node, uid.data);
    deps.log.info('agent API: admission done', { node: req.params.node, podUid: uid.data, dropped });
    res.json({ dropped });
  });

  // DRA's guard 6 (ADR 0043): the claim read afresh, its allocation checked against the ledger's rows for it now.
  const readClaim = deps.readClaim;
  if (readClaim) {
    const json = express.json({ limit: AGENT_API_MAX_BODY_BYTES, type: () => true });
    router.post('/nodes/:node/claims/:claimUid/prepare', authorizeNode, json, claimPrepare(deps, readClaim));
  }

  router.use((_req, _res) => {
    throw notFound('no such agent API method');
  });

  router.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const { status, body, internal } = toErrorResponse(err);
    if (internal) deps.log.error('agent API: request failed', { path: req.originalUrl, ...errorFields(err) });
    res.status(status).json(body);
  });
  return router;
}

/** Who is asking, and whether they are this node's agent. Nothing is read before both hold. */
function nodeAuthorizer(deps: AgentApiDeps): RequestHandler {
  return async (req, _res, next) => {
    const token = bearerToken(req.get('authorization'));
    if (token === undefined) throw unauthenticated('a bearer token is required');
    const principal = await deps.authenticate(token);
    const user = { username: principal.subject, extra: principal.extra };
    const node = req.params.node;
    const tokenNode = user.extra?.[NODE_NAME_CLAIM]?.[0];
    if (user.username !== deps.agentUsername || tokenNode === undefined || tokenNode !== node) {
      deps.log.warn('agent API: refused', { user: user.username, tokenNode, node, path: req.path });
      throw forbidden(
        user.username !== deps.agentUsername
          ? `${user.username} is not the node agent`
          : `the agent of ${tokenNode ?? 'an unknown node'} may not act for node ${String(node)}`,
      );
    }
    if (!NodeName.safeParse(node).success) throw invalidInput(`${String(node)} is not a node name`);
    next();
  };
}

/** The claim read afresh, its allocation checked against the ledger's rows for it now (DRA's guard 6, ADR 0043). */
function claimPrepare(
  deps: AgentApiDeps,
  readClaim: NonNullable<AgentApiDeps['readClaim']>,
): (req: Request<{ node: string; claimUid: string }>, res: Response) => Promise<void> {
  return async (req, res) => {
    const uid = ClaimUid.safeParse(req.params.claimUid);
    if (!uid.success) throw invalidInput(`${req.params.claimUid} is not a claim uid`);
    const body = ClaimPrepareRequestSchema.safeParse(req.body);
    if (!body.success) throw invalidInput(`the body is not a ClaimPrepareRequest: ${body.error.issues.map((x) => x.message).join('; ')}`);
    const raw = await readClaim(body.data.namespace, body.data.name);
    const verdict = judgePrepare({ raw, claimUid: uid.data, node: req.params.node, holding: await claimHolding(deps.db, uid.data) });
    res.set('cache-control', 'no-store');
    const fields = { node: req.params.node, claim: `${body.data.namespace}/${body.data.name}`, claimUid: uid.data };
    if (!verdict.ok) {
      deps.log.warn('agent API: claim prepare refused', { ...fields, code: verdict.code, reason: verdict.message });
      res.status(verdict.status).json({ error: { code: verdict.code, message: verdict.message } });
      return;
    }
    deps.log.info('agent API: claim prepare allowed', { ...fields, atoms: verdict.answer.devices.map((d) => d.atomId) });
    res.json(ClaimPrepareAnswerSchema.parse(verdict.answer));
  };
}
