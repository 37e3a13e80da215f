// A fake NVIDIA host in a directory: the driver's procfs files (as the kernel writes them) and device nodes (plain
// files: the agent only checks that they exist). For the agent's DeviceSpecs (src/agent/device-nodes.ts).
import fs from 'node:fs';
import path from 'node:path';
import type { HostDirs } from '../../src/agent/device-nodes.ts';

/** /proc/driver/nvidia/gpus/<bus id>/information as the driver prints it (tab-aligned; "..." for a hidden UUID). */
export function gpuInformation(uuid: string, bus: string, minor: number): string {
  return (
    `Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 185\nGPU UUID: \t ${uuid}\nVideo BIOS: \t 96.00.74.00.0d\nBus Type: \t PCIe\n` +
    `DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t ${bus}\nDevice Minor: \t ${minor}\nGPU Firmware: \t 550.54.15\nGPU Excluded:\t No\n`
  );
}

export interface FakeNvidiaHost {
  /** GPUs the driver lists: UUID ("..." when hidden), kernel bus id, device minor. */
  gpus: { uuid: string; bus: string; minor: number }[];
  /** /proc/driver/nvidia-caps/mig-minors lines, e.g. `gpu1/gi1/access 12`. */
  migMinors?: string[];
  /** Device nodes present, relative to /dev: nvidia0, nvidiactl, nvidia-caps/nvidia-cap12, … */
  nodes: string[];
}

export function fakeNvidiaHost(root: string, host: FakeNvidiaHost): HostDirs {
  const dirs = { dev: path.join(root, 'dev'), proc: path.join(root, 'proc') };
  const write = (file: string, text: string) => {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, text);
  };
  for (const g of host.gpus) write(path.join(dirs.proc, 'driver/nvidia/gpus', g.bus, 'information'), gpuInformation(g.uuid, g.bus, g.minor));
  if (host.migMinors) write(path.join(dirs.proc, 'driver/nvidia-caps/mig-minors'), ['config 1', 'monitor 2', ...host.migMinors].join('\n') + '\n');
  for (const n of host.nodes) write(path.join(dirs.dev, n), '');
  return dirs;
}
