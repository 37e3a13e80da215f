// The gRPC method paths the agent serves are the ones the kubelet calls: the path is the proto's package and
// service, so a package written differently from upstream's is a plugin the kubelet cannot reach (UNIMPLEMENTED).
import { describe, expect, it } from 'vitest';
import { devicePluginService, draPluginService, pluginRegistrationService, registrationService } from './grpc.ts';

const paths = (s: Record<string, { path: string }>) => Object.values(s).map((m) => m.path).sort();

describe('gRPC method paths as the kubelet calls them', () => {
  it('DRA v1 (k8s.io/kubelet/pkg/apis/dra/v1, package k8s.io.kubelet.pkg.apis.dra.v1)', () => {
    expect(paths(draPluginService())).toEqual([
      '/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources',
      '/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources',
    ]);
  });

  it('the plugin watcher (package pluginregistration) and the device plugin API (package v1beta1)', () => {
    expect(paths(pluginRegistrationService())).toEqual(['/pluginregistration.Registration/GetInfo', '/pluginregistration.Registration/NotifyRegistrationStatus']);
    expect(paths(registrationService())).toEqual(['/v1beta1.Registration/Register']);
    expect(paths(devicePluginService())).toContain('/v1beta1.DevicePlugin/Allocate');
  });
});
