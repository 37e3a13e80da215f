// What the controller serves on its HTTPS webhook listener (WEBHOOK_PORT): the node agents' API (/agent/v1, their
// ServiceAccount token bound to their node) and the pod admission webhook (/admission; with WEBHOOK_CLIENT_CA_FILE, for
// the API server's client certificate only: ADR 0034). docs/adr/0007.
import { CALLER_NOT_VERIFIED, MAX_REVIEW_BYTES, createPodAdmissionRouter, podAdmissionDeps, tlsClientVerified } from '../admission/pods.ts';
import { ReviewDecoderPool } from '../admission/review-pool.ts';
import { AGENT_API_MAX_BODY_BYTES, createAgentApiRouter, agentUsernameFor } from '../agentapi/router.ts';
import { AGENT_API_PREFIX } from '../agentapi/wire.ts';
import { ResourceClaimClient } from '../kube/resource-claims.ts';
import type { ControllerServices } from './services.ts';
import type { WebhookMount } from './listeners.ts';

export function productWebhookRouters(s: ControllerServices): WebhookMount[] {
  const claims = new ResourceClaimClient(s.kc);
  // Large reviews are decoded in a worker thread, off the loop the extender shares (ADR 0047); started now, so that
  // the first large review's deadline does not include the worker's start.
  const reviewPool = new ReviewDecoderPool().warm();
  return [
    {
      path: '/admission',
      router: createPodAdmissionRouter({
        ...podAdmissionDeps({
          reservations: s.informers.reservations,
          namespaces: s.informers.namespaces,
          db: s.db,
          log: s.log,
          tenancyByName: s.config.tenancyByName,
          claimDeviceClasses: (ns, ref) => claims.deviceClassesOf(ns, ref),
        }),
        // WEBHOOK_CLIENT_CA_FILE: the listener asks for client certificates; only the API server's is answered (ADR 0034).
        ...(s.config.webhookClientCaFile ? { callerVerified: tlsClientVerified } : {}),
        reviewPool,
      }),
      maxBodyBytes: MAX_REVIEW_BYTES,
      // The API server sends every review with a Content-Length (client-go, a body of bytes): a chunked one is a stranger's.
      lengthRequired: true,
      ...(s.config.webhookClientCaFile ? { verifiedCallersOnly: CALLER_NOT_VERIFIED } : {}),
      stop: () => reviewPool.close(),
    },
    {
      path: AGENT_API_PREFIX,
      maxBodyBytes: AGENT_API_MAX_BODY_BYTES,
      router: createAgentApiRouter({
        db: s.db,
        clock: s.clock,
        log: s.log,
        agentUsername: agentUsernameFor(s.config.controllerNamespace),
        authenticate: (token) => s.tokens.authenticate(token),
        readClaim: claims.get,
      }),
    },
  ];
}
