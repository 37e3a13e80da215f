// Loads our .proto files (proto/) for @grpc/grpc-js. Field names are kept as written (snake_case and the kubelet's
// mixed-case ones), 64-bit integers come as numbers.
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { systemClock } from '../clock.ts';

const PROTO_DIR = path.join(import.meta.dirname, '..', '..', 'proto');

function load(file: string): grpc.GrpcObject {
  const def = protoLoader.loadSync(path.join(PROTO_DIR, file), { keepCase: true, longs: Number, enums: String, defaults: true });
  return grpc.loadPackageDefinition(def);
}

/** The package `name` (dotted) of a loaded definition. */
function nested(root: grpc.GrpcObject, name: string): grpc.GrpcObject {
  return name.split('.').reduce((o, k) => o[k] as grpc.GrpcObject, root);
}

let cached: { v1beta1: grpc.GrpcObject; podresources: grpc.GrpcObject; dra: grpc.GrpcObject; pluginregistration: grpc.GrpcObject } | undefined;
function packages() {
  cached ??= {
    v1beta1: load('deviceplugin/v1beta1/api.proto').v1beta1 as grpc.GrpcObject,
    podresources: load('podresources/v1/api.proto').v1 as grpc.GrpcObject,
    dra: nested(load('dra/v1/api.proto'), 'k8s.io.kubelet.pkg.apis.dra.v1'),
    pluginregistration: load('pluginregistration/v1/api.proto').pluginregistration as grpc.GrpcObject,
  };
  return cached;
}

/** The gRPC service name of the kubelet's DRA plugin API v1 (what PluginInfo.supported_versions lists). */
export const DRA_SERVICE_V1 = 'v1.DRAPlugin';

export function draPluginService(): grpc.ServiceDefinition {
  return (packages().dra.DRAPlugin as grpc.ServiceClientConstructor).service;
}

export function draPluginClient(socket: string): grpc.Client {
  const Ctor = packages().dra.DRAPlugin as grpc.ServiceClientConstructor;
  return new Ctor(`unix://${socket}`, grpc.credentials.createInsecure());
}

/** The kubelet's plugin watcher API (plugins_registry): what a DRA or CSI plugin serves for the kubelet to find it. */
export function pluginRegistrationService(): grpc.ServiceDefinition {
  return (packages().pluginregistration.Registration as grpc.ServiceClientConstructor).service;
}

export function pluginRegistrationClient(socket: string): grpc.Client {
  const Ctor = packages().pluginregistration.Registration as grpc.ServiceClientConstructor;
  return new Ctor(`unix://${socket}`, grpc.credentials.createInsecure());
}

export function devicePluginService(): grpc.ServiceDefinition {
  return (packages().v1beta1.DevicePlugin as grpc.ServiceClientConstructor).service;
}

export function registrationService(): grpc.ServiceDefinition {
  return (packages().v1beta1.Registration as grpc.ServiceClientConstructor).service;
}

export function registrationClient(socket: string): grpc.Client {
  const Ctor = packages().v1beta1.Registration as grpc.ServiceClientConstructor;
  return new Ctor(`unix://${socket}`, grpc.credentials.createInsecure());
}

export function devicePluginClient(socket: string): grpc.Client {
  const Ctor = packages().v1beta1.DevicePlugin as grpc.ServiceClientConstructor;
  return new Ctor(`unix://${socket}`, grpc.credentials.createInsecure());
}

export function podResourcesClient(socket: string): grpc.Client {
  const Ctor = packages().podresources.PodResourcesLister as grpc.ServiceClientConstructor;
  return new Ctor(`unix://${socket}`, grpc.credentials.createInsecure());
}

export function podResourcesService(): grpc.ServiceDefinition {
  return (packages().podresources.PodResourcesLister as grpc.ServiceClientConstructor).service;
}

/** Calls a unary method with a deadline. */
export function unary<Req, Res>(client: grpc.Client, method: string, req: Req, timeoutMs = 5000): Promise<Res> {
  return new Promise((resolve, reject) => {
    const fn = (client as unknown as Record<string, (r: Req, o: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: Res) => void) => void>)[method];
    if (!fn) return reject(new Error(`no method ${method}`));
    fn.call(client, req, { deadline: systemClock.wallNow().getTime() + timeoutMs }, (e, r) => (e ? reject(e) : resolve(r)));
  });
}

/** Binds a gRPC server to a unix socket. */
export function bindUnix(server: grpc.Server, socket: string): Promise<void> {
  return new Promise((resolve, reject) =>
    server.bindAsync(`unix://${socket}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())),
  );
}

/** Stops a unix-socket server (its calls given 2 s to finish, then cut) and removes its socket. */
export async function stopUnix(server: grpc.Server | undefined, socket: string): Promise<void> {
  if (server) {
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, 2000);
      server.tryShutdown(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }
  fs.rmSync(socket, { force: true });
}

export { grpc };
