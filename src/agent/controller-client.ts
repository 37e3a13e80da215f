// The node agent's side of the agent API: HTTPS to the controller, checked against the CA the controller publishes
// (ConfigMap better-compute-ca), authenticated with the pod's projected ServiceAccount token. The token and the CA are
// read again at every call: the kubelet rotates the token, and the controller rotates its CA.
import fs from 'node:fs/promises';
import https from 'node:https';
import type { z } from 'zod';
import { AGENT_API_PREFIX, AdmissionDoneSchema, ClaimPrepareAnswerSchema, NodeStateSchema, type AgentBackend, type ClaimPrepareAnswer, type ClaimPrepareRequest, type NodeState } from '../agentapi/wire.ts';

export interface ControllerClientOptions {
  /** https://host:port of the controller's webhook listener. */
  url: string;
  /** This agent's node (the API answers only for the node in the token's node-name claim). */
  nodeName: string;
  caFile: string;
  /** The name the controller's certificate must carry; sent as SNI. */
  serverName: string;
  tokenFile: string;
  /** Every call's deadline, in milliseconds (connect, TLS, response). Default 5000. */
  timeoutMs?: number;
}

/** A call the controller answered with an error, or did not answer. */
export class ControllerCallError extends Error {
  constructor(
    message: string,
    readonly status?: number,
    readonly code?: string,
  ) {
    super(message);
    this.name = 'ControllerCallError';
  }
}

const MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

export class ControllerClient implements AgentBackend {
  private readonly base: URL;
  private readonly agent = new https.Agent({ keepAlive: true, maxSockets: 4 });

  constructor(private readonly o: ControllerClientOptions) {
    this.base = new URL(o.url);
    if (this.base.protocol !== 'https:') throw new Error(`the controller URL must be https: ${o.url}`);
  }

  async state(): Promise<NodeState> {
    return this.call('GET', `/nodes/${encodeURIComponent(this.o.nodeName)}/state`, NodeStateSchema);
  }

  async admissionDone(podUid: string): Promise<void> {
    await this.call('POST', `/nodes/${encodeURIComponent(this.o.nodeName)}/admissions/${encodeURIComponent(podUid)}/done`, AdmissionDoneSchema);
  }

  /** DRA's guard 6: whether the claim may be prepared on this node, with which atoms (a refusal is a ControllerCallError with its code). */
  async prepareClaim(claimUid: string, req: ClaimPrepareRequest): Promise<ClaimPrepareAnswer> {
    const path = `/nodes/${encodeURIComponent(this.o.nodeName)}/claims/${encodeURIComponent(claimUid)}/prepare`;
    return this.call('POST', path, ClaimPrepareAnswerSchema, JSON.stringify(req));
  }

  close(): void {
    this.agent.destroy();
  }

  private async call<S extends z.ZodType>(method: 'GET' | 'POST', path: string, schema: S, body?: string): Promise<z.infer<S>> {
    const signal = AbortSignal.timeout(this.o.timeoutMs ?? 5000);
    const [token, ca] = await Promise.all([fs.readFile(this.o.tokenFile, 'utf8'), fs.readFile(this.o.caFile)]);
    const url = new URL(`${this.base.pathname.replace(/\/$/, '')}${AGENT_API_PREFIX}${path}`, this.base);
    const { status, text } = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = https.request(
        url,
        {
          method,
          agent: this.agent,
          ca,
          servername: this.o.serverName,
          signal,
          headers: {
            authorization: `Bearer ${token.trim()}`,
            accept: 'application/json',
            ...(body !== undefined ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } : method === 'POST' ? { 'content-length': '0' } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (c: Buffer) => {
            size += c.length;
            if (size > MAX_RESPONSE_BYTES) req.destroy(new Error(`the controller's answer is larger than ${MAX_RESPONSE_BYTES} bytes`));
            else chunks.push(c);
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body);
    }).catch((e: unknown) => {
      const why = signal.aborted ? `no answer within ${this.o.timeoutMs ?? 5000} ms` : (e as Error).message;
      throw new ControllerCallError(`${method} ${url.pathname}: ${why}`);
    });
    let answer: unknown;
    try {
      answer = JSON.parse(text);
    } catch {
      throw new ControllerCallError(`${method} ${url.pathname}: HTTP ${status}, not JSON`, status);
    }
    if (status < 200 || status > 299) {
      const err = (answer as { error?: { code?: string; message?: string } }).error;
      throw new ControllerCallError(`${method} ${url.pathname}: HTTP ${status} ${err?.code ?? ''} ${err?.message ?? ''}`.trim(), status, err?.code);
    }
    const parsed = schema.safeParse(answer);
    if (!parsed.success) throw new ControllerCallError(`${method} ${url.pathname}: unexpected answer: ${parsed.error.message}`, status);
    return parsed.data;
  }
}
