// One kubelet device plugin endpoint (v1beta1): a gRPC server on its own unix socket in the device-plugins directory,
// registered with the kubelet for one resource name. Thin: every decision is the handler's.
import fs from 'node:fs';
import path from 'node:path';
import { errorFields, type Logger } from '../log.ts';
import type { ContainerAllocateResponse } from '../core/device-list.ts';
import { bindUnix, devicePluginService, grpc, registrationClient, stopUnix, unary } from './grpc.ts';

export interface PluginDevice {
  ID: string;
  health: 'Healthy' | 'Unhealthy';
  numaNode?: number;
}

export interface EndpointHandler {
  readonly resource: string;
  readonly preferredAllocation: boolean;
  devices(): PluginDevice[];
  preferred(available: string[], mustInclude: string[], size: number): Promise<string[]>;
  /** Returns the container's part of the answer (envs, mounts, device specs, CDI), or throws a RefusedError. */
  allocate(deviceIds: string[]): Promise<ContainerAllocateResponse>;
}

/** A refusal that reaches the kubelet as a gRPC error (the pod fails admission with the message). */
export class RefusedError extends Error {
  readonly code = 'REFUSED';
}

interface Stream {
  write(msg: unknown): boolean;
  end(): void;
  on(event: 'cancelled' | 'error' | 'close', fn: () => void): void;
}

export class DevicePluginEndpoint {
  private server?: grpc.Server;
  private readonly streams = new Set<Stream>();
  readonly socket: string;

  constructor(
    private readonly dir: string,
    readonly socketName: string,
    private readonly handler: EndpointHandler,
    private readonly log: Logger,
  ) {
    this.socket = path.join(dir, socketName);
  }

  get resource(): string {
    return this.handler.resource;
  }

  private listMessage() {
    return {
      devices: this.handler.devices().map((d) => ({
        ID: d.ID,
        health: d.health,
        ...(d.numaNode !== undefined ? { topology: { nodes: [{ ID: d.numaNode }] } } : {}),
      })),
    };
  }

  async start(): Promise<void> {
    fs.rmSync(this.socket, { force: true });
    const server = new grpc.Server();
    const h = this.handler;
    const log = this.log;
    server.addService(devicePluginService(), {
      GetDevicePluginOptions: (_call: unknown, cb: grpc.sendUnaryData<unknown>) =>
        cb(null, { pre_start_required: false, get_preferred_allocation_available: h.preferredAllocation }),
      ListAndWatch: (call: Stream) => {
        this.streams.add(call);
        const drop = () => this.streams.delete(call);
        call.on('cancelled', drop);
        call.on('error', drop);
        call.on('close', drop);
        call.write(this.listMessage());
      },
      GetPreferredAllocation: (
        call: { request: { container_requests: { available_deviceIDs: string[]; must_include_deviceIDs: string[]; allocation_size: number }[] } },
        cb: grpc.sendUnaryData<unknown>,
      ) => {
        Promise.all(
          call.request.container_requests.map(async (r) => ({
            deviceIDs: await h.preferred(r.available_deviceIDs, r.must_include_deviceIDs, r.allocation_size),
          })),
        ).then(
          (container_responses) => cb(null, { container_responses }),
          (e: unknown) => cb({ code: grpc.status.FAILED_PRECONDITION, details: (e as Error).message }),
        );
      },
      Allocate: (call: { request: { container_requests: { devices_ids: string[] }[] } }, cb: grpc.sendUnaryData<unknown>) => {
        (async () => {
          const container_responses: ContainerAllocateResponse[] = [];
          for (const r of call.request.container_requests) container_responses.push(await h.allocate(r.devices_ids));
          return container_responses;
        })().then(
          (container_responses) => cb(null, { container_responses }),
          (e: unknown) => {
            log.warn('allocate refused', { resource: h.resource, ...errorFields(e) });
            cb({ code: e instanceof RefusedError ? grpc.status.FAILED_PRECONDITION : grpc.status.INTERNAL, details: (e as Error).message });
          },
        );
      },
      PreStartContainer: (_call: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, {}),
    });
    await bindUnix(server, this.socket);
    this.server = server;
  }

  /** Tells the kubelet about this endpoint (Registration.Register on kubelet.sock). */
  async register(kubeletSocket: string): Promise<void> {
    const client = registrationClient(kubeletSocket);
    try {
      await unary(client, 'Register', {
        version: 'v1beta1',
        endpoint: this.socketName,
        resource_name: this.handler.resource,
        options: { pre_start_required: false, get_preferred_allocation_available: this.handler.preferredAllocation },
      });
    } finally {
      client.close();
    }
  }

  /** Sends the current device list (and health) to the kubelet's ListAndWatch streams. */
  update(): void {
    const msg = this.listMessage();
    for (const s of this.streams) s.write(msg);
  }

  /** Stops serving: the kubelet sees the stream end and, after its grace period, the resource go. */
  async stop(): Promise<void> {
    for (const s of this.streams) s.end();
    this.streams.clear();
    const server = this.server;
    this.server = undefined;
    await stopUnix(server, this.socket);
  }

  socketExists(): boolean {
    return fs.existsSync(this.socket);
  }
}
