// The agent as the kubelet's DRA plugin for gpu.bettercompute.io (kubelet DRA API v1): the DRAPlugin service on its
// socket under the kubelet's plugins directory, and the plugin watcher's Registration service on a socket in
// plugins_registry that tells the kubelet where the first one is. Thin: every claim is the ClaimPreparer's. A socket
// that vanishes (a kubelet that restarts may clear its directories) is served again on a new one, as the device
// plugin endpoints are.
import fs from 'node:fs';
import path from 'node:path';
import { errorFields, type Logger } from '../../log.ts';
import { bindUnix, DRA_SERVICE_V1, draPluginService, grpc, pluginRegistrationService, stopUnix } from '../grpc.ts';
import type { ClaimPreparer } from './prepare.ts';
import { DRA_DRIVER } from '../../core/names.ts';

export interface DraPluginOptions {
  /** The DRAPlugin service's directory (default /var/lib/kubelet/plugins/gpu.bettercompute.io): dra.sock in it. */
  pluginDir: string;
  /** The kubelet's plugin watcher directory (default /var/lib/kubelet/plugins_registry): <driver>-reg.sock in it. */
  registryDir: string;
  preparer: ClaimPreparer;
  log: Logger;
  /** How often the sockets are checked for (default 2000 ms). */
  checkEveryMs?: number;
  /** Told when the kubelet registered the plugin (a kubelet that starts deletes its node's ResourceSlices first). */
  onRegistered?: () => void;
}

/** The most claims one call may name: bounds the work of a call (the kubelet sends a pod's claims, a handful). */
export const MAX_CLAIMS_PER_CALL = 128;

interface ClaimsCall {
  request: { claims?: unknown };
}

export class DraPlugin {
  readonly draSocket: string;
  readonly registrationSocket: string;
  private draServer?: grpc.Server;
  private registrationServer?: grpc.Server;
  private timer?: NodeJS.Timeout;
  private checking: Promise<void> = Promise.resolve();

  constructor(private readonly o: DraPluginOptions) {
    this.draSocket = path.join(o.pluginDir, 'dra.sock');
    this.registrationSocket = path.join(o.registryDir, `${DRA_DRIVER}-reg.sock`);
  }

  async start(): Promise<void> {
    await this.serveDra();
    await this.serveRegistration();
    this.timer = setInterval(() => {
      this.checking = this.checking.then(() => this.recreateMissing()).catch((e: unknown) => this.o.log.error('DRA: serving a socket again failed', errorFields(e)));
    }, this.o.checkEveryMs ?? 2000);
    this.o.log.info('DRA kubelet plugin serving', { driver: DRA_DRIVER, socket: this.draSocket, registration: this.registrationSocket });
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.checking;
    await stopUnix(this.registrationServer, this.registrationSocket);
    await stopUnix(this.draServer, this.draSocket);
    this.registrationServer = this.draServer = undefined;
  }

  /** Serves again on a socket that is gone: the DRA service first, so that a registration always points at one. */
  private async recreateMissing(): Promise<void> {
    if (!fs.existsSync(this.draSocket)) {
      this.o.log.info('DRA: the plugin socket is gone; serving on a new one', { socket: this.draSocket });
      await stopUnix(this.draServer, this.draSocket);
      await this.serveDra();
    }
    if (!fs.existsSync(this.registrationSocket)) {
      this.o.log.info('DRA: the registration socket is gone; serving on a new one', { socket: this.registrationSocket });
      await stopUnix(this.registrationServer, this.registrationSocket);
      await this.serveRegistration();
    }
  }

  private async serveDra(): Promise<void> {
    const preparer = this.o.preparer;
    const server = new grpc.Server();
    server.addService(draPluginService(), {
      NodePrepareResources: (call: ClaimsCall, cb: grpc.sendUnaryData<unknown>) =>
        eachClaim(call, cb, (c) => preparer.prepare(c)),
      NodeUnprepareResources: (call: ClaimsCall, cb: grpc.sendUnaryData<unknown>) =>
        eachClaim(call, cb, (c) => preparer.unprepare(c)),
    });
    fs.mkdirSync(this.o.pluginDir, { recursive: true });
    fs.rmSync(this.draSocket, { force: true });
    await bindUnix(server, this.draSocket);
    this.draServer = server;
  }

  private async serveRegistration(): Promise<void> {
    const log = this.o.log;
    const onRegistered = this.o.onRegistered;
    const endpoint = this.draSocket;
    const server = new grpc.Server();
    server.addService(pluginRegistrationService(), {
      GetInfo: (_call: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, { type: 'DRAPlugin', name: DRA_DRIVER, endpoint, supported_versions: [DRA_SERVICE_V1] }),
      NotifyRegistrationStatus: (call: { request: { plugin_registered?: unknown; error?: unknown } }, cb: grpc.sendUnaryData<unknown>) => {
        const registered = call.request.plugin_registered === true;
        const error = typeof call.request.error === 'string' ? call.request.error.slice(0, 1024) : '';
        if (registered) {
          log.info('DRA: the kubelet registered the plugin', { driver: DRA_DRIVER });
          onRegistered?.();
        } else log.error('DRA: the kubelet did not register the plugin', { driver: DRA_DRIVER, error });
        cb(null, {});
      },
    });
    fs.mkdirSync(this.o.registryDir, { recursive: true });
    fs.rmSync(this.registrationSocket, { force: true });
    await bindUnix(server, this.registrationSocket);
    this.registrationServer = server;
  }
}

/** Answers each claim of the call by UID; a call that names no list, or too many, is an INVALID_ARGUMENT. */
function eachClaim(call: ClaimsCall, cb: grpc.sendUnaryData<unknown>, fn: (claim: unknown) => Promise<object>): void {
  const claims = call.request.claims;
  if (!Array.isArray(claims) || claims.length > MAX_CLAIMS_PER_CALL) {
    cb({ code: grpc.status.INVALID_ARGUMENT, details: `claims: a list of at most ${MAX_CLAIMS_PER_CALL} is required` });
    return;
  }
  Promise.all(claims.map(async (c: unknown) => [String((c as { uid?: unknown } | null)?.uid ?? ''), await fn(c)] as const)).then(
    (answers) => cb(null, { claims: Object.fromEntries(answers) }),
    (e: unknown) => cb({ code: grpc.status.INTERNAL, details: (e as Error).message }),
  );
}
