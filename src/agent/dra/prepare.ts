// Preparing and unpreparing one ResourceClaim on this node (the agent's DRA plugin, ADR 0043). Preparing: the claim
// read afresh from the API server (its UID checked), our driver's results in this node's pool taken, the controller
// asked that exactly these devices are booked to the claim (guard 6), then one CDI spec for the claim written
// atomically. Every failure is the claim's error string, and leaves no spec for it.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { ClaimUid, type ClaimPrepareAnswer, type ClaimPrepareRequest } from '../../agentapi/wire.ts';
import type { ContainerAllocateResponse } from '../../core/device-list.ts';
import { ResourceClaimSchema } from '../../core/dra-allocate.ts';
import { claimCdiFileName, claimCdiName, claimCdiSpec, ourResults, preparedDevices, sameDevices, type DraDevice } from '../../core/dra-cdi.ts';
import { errorFields, type Logger } from '../../log.ts';

export interface ClaimPreparerDeps {
  nodeName: string;
  /** Where the runtime reads CDI specs (default /var/run/cdi). */
  cdiDir: string;
  /** Reads the ResourceClaim afresh (undefined: none by that name): ResourceClaimClient.get. */
  readClaim: (namespace: string, name: string) => Promise<unknown>;
  /** The controller's prepare check: ControllerClient.prepareClaim (throws on a refusal). */
  askController: (claimUid: string, req: ClaimPrepareRequest) => Promise<ClaimPrepareAnswer>;
  /** What a container gets for these atoms (env, device nodes), as the device-plugin path hands them over. */
  handoff: (atomIds: string[]) => Promise<ContainerAllocateResponse>;
  log: Logger;
}

/** The kubelet's Claim, checked (the kubelet is another party too). */
export const KubeletClaimSchema = z.strictObject({
  namespace: z.string().min(1).max(63),
  uid: ClaimUid,
  name: z.string().min(1).max(253),
});
export type KubeletClaim = z.infer<typeof KubeletClaimSchema>;

export type PrepareOutcome = { devices: DraDevice[] } | { error: string };

class PrepareRefused extends Error {}

export class ClaimPreparer {
  constructor(private readonly d: ClaimPreparerDeps) {}

  specFile(claimUid: string): string {
    return path.join(this.d.cdiDir, claimCdiFileName(claimUid));
  }

  /** Prepares one claim: its devices for the kubelet, or the reason it is not prepared (and no spec is left for it). */
  async prepare(raw: unknown): Promise<PrepareOutcome> {
    const parsed = KubeletClaimSchema.safeParse(raw);
    if (!parsed.success) return { error: `not a claim reference: ${parsed.error.issues.map((i) => i.message).join('; ')}` };
    const claim = parsed.data;
    const fields = { claim: `${claim.namespace}/${claim.name}`, claimUid: claim.uid, node: this.d.nodeName };
    try {
      const devices = await this.prepareChecked(claim);
      this.d.log.info('DRA: claim prepared', { ...fields, devices: devices.map((x) => x.device_name) });
      return { devices };
    } catch (e) {
      await fs.rm(this.specFile(claim.uid), { force: true }).catch(() => undefined);
      this.d.log.warn('DRA: claim not prepared', { ...fields, ...errorFields(e) });
      return { error: `claim ${claim.namespace}/${claim.name} (${claim.uid}) not prepared on ${this.d.nodeName}: ${(e as Error).message}` };
    }
  }

  private async prepareChecked(claim: KubeletClaim): Promise<DraDevice[]> {
    if (!claimCdiName(claim.uid)) throw new PrepareRefused(`claim uid ${claim.uid} cannot name a CDI device`);
    const raw = await this.d.readClaim(claim.namespace, claim.name);
    if (raw === undefined) throw new PrepareRefused('the API server has no ResourceClaim by that name');
    const read = ResourceClaimSchema.safeParse(raw);
    if (!read.success) throw new PrepareRefused(`the API server's ResourceClaim is not one: ${read.error.issues.map((i) => i.message).join('; ')}`);
    if (read.data.metadata.uid !== claim.uid) throw new PrepareRefused(`the ResourceClaim by that name has uid ${read.data.metadata.uid}, not ${claim.uid}`);
    const results = ourResults(read.data, this.d.nodeName);
    if (!results.length) throw new PrepareRefused(`its allocation names no device of ours in pool ${this.d.nodeName}`);
    const answer = await this.d.askController(claim.uid, { namespace: claim.namespace, name: claim.name });
    if (answer.claimUid !== claim.uid || !sameDevices(results, answer.devices)) {
      throw new PrepareRefused(`the controller's devices (${answer.devices.map((x) => x.device).join(',')}) are not the allocation's (${results.map((r) => r.device).join(',')})`);
    }
    const atoms = [...new Set(answer.devices.map((x) => x.atomId))].sort();
    const spec = claimCdiSpec(claim.uid, await this.d.handoff(atoms));
    await this.writeAtomically(this.specFile(claim.uid), `${JSON.stringify(spec, null, 2)}\n`);
    return preparedDevices(claim.uid, results);
  }

  /** Unprepares one claim: its spec removed (none there is fine). */
  async unprepare(raw: unknown): Promise<{ error: string } | Record<string, never>> {
    const parsed = KubeletClaimSchema.safeParse(raw);
    if (!parsed.success) return { error: `not a claim reference: ${parsed.error.issues.map((i) => i.message).join('; ')}` };
    try {
      await fs.rm(this.specFile(parsed.data.uid), { force: true });
      this.d.log.info('DRA: claim unprepared', { claim: `${parsed.data.namespace}/${parsed.data.name}`, claimUid: parsed.data.uid });
      return {};
    } catch (e) {
      return { error: `cannot remove the CDI spec of claim ${parsed.data.uid}: ${(e as Error).message}` };
    }
  }

  /** A temporary file beside the target, then a rename: the runtime sees the old spec, the new one, or none. */
  private async writeAtomically(file: string, text: string): Promise<void> {
    await fs.mkdir(path.dirname(file), { recursive: true });
    const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${randomUUID()}.tmp`);
    try {
      await fs.writeFile(tmp, text, { mode: 0o644 });
      await fs.rename(tmp, file);
    } catch (e) {
      await fs.rm(tmp, { force: true }).catch(() => undefined);
      throw e;
    }
  }
}
