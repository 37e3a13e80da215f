// The controller's /metrics, on its own HTTPS listener, for the monitoring network: the scraper presents a bearer token
// (its ServiceAccount's), a TokenReview says whose it is, and a SubjectAccessReview asks RBAC whether that user may
// `get` the non-resource URL /metrics (as controller-runtime's secure metrics and kube-rbac-proxy do). A ClusterRole
// with `nonResourceURLs: ["/metrics"], verbs: ["get"]` grants it. Answers of both reviews are cached briefly
// (TokenReviewer, AccessReviewer). Failures use the API's error shape: 401 UNAUTHENTICATED, 403 FORBIDDEN.
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Registry } from 'prom-client';
import type { AccessAttributes } from '../api/authz-kubernetes.ts';
import { forbidden, notFound, toErrorResponse } from '../http/errors.ts';
import { errorFields, type Logger } from '../log.ts';
import { bearerToken, type Principal } from '../http/identity.ts';

export const METRICS_PATH = '/metrics';

export interface MetricsEndpointDeps {
  registry: Registry;
  /** TokenReview (TokenReviewer.authenticate): throws ApiError UNAUTHENTICATED for a missing or refused token. */
  authenticate(token: string | undefined): Promise<Principal>;
  /** SubjectAccessReview (AccessReviewer.allowed). */
  allowed(principal: Principal, attributes: AccessAttributes): Promise<boolean>;
  log: Logger;
}

export function createMetricsApp(deps: MetricsEndpointDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', false);

  app.get(METRICS_PATH, async (req, res) => {
    const principal = await deps.authenticate(bearerToken(req.get('authorization')));
    const ok = await deps.allowed(principal, { nonResourceAttributes: { path: METRICS_PATH, verb: 'get' } });
    if (!ok) throw forbidden(`${principal.subject} may not get ${METRICS_PATH}`);
    const text = await deps.registry.metrics();
    res.type(deps.registry.contentType).send(text);
  });

  app.use((req, _res, next) => next(notFound(`no route ${req.method} ${req.path} (this listener serves GET ${METRICS_PATH} only)`)));

  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const { status, body, internal } = toErrorResponse(err);
    if (internal) deps.log.error('metrics request failed', { path: req.path, ...errorFields(err) });
    else if (status === 401 || status === 403) deps.log.warn('metrics request refused', { path: req.path, status, reason: body.error.message });
    if (res.headersSent) {
      res.end();
      return;
    }
    res.status(status).json(body);
  });
  return app;
}
