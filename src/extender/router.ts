// The extender's HTTP transport: decode with zod, call the service, encode. Mounted by the controller's server (every
// replica), which listens on loopback or behind TLS only.
import express, { type Request, type Response, type Router } from 'express';
import type { z } from 'zod';
import { ExtenderService, type ExtenderDeps } from './service.ts';
import { ExtenderArgsSchema, ExtenderBindingArgsSchema } from './wire.ts';

export type { ExtenderDeps } from './service.ts';

function parse<S extends z.ZodType>(schema: S, req: Request, res: Response, onError: (message: string) => unknown): z.infer<S> | undefined {
  const r = schema.safeParse(req.body);
  if (r.success) return r.data;
  res.status(400).json(onError(`invalid extender request: ${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`));
  return undefined;
}

/** POST /scheduler/filter, /scheduler/prioritize, /scheduler/bind. Pass a service, or its dependencies. */
export function createExtenderRouter(deps: ExtenderDeps | { service: ExtenderService }): Router {
  const service = 'service' in deps ? deps.service : new ExtenderService(deps);
  const router = express.Router();
  router.use(express.json({ limit: '64mb' }));
  router.post('/filter', async (req, res) => {
    const args = parse(ExtenderArgsSchema, req, res, (m) => ({ Nodes: null, NodeNames: null, FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: m }));
    if (!args) return;
    try {
      res.json(await service.filter(args));
    } catch (e) {
      res.json({ Nodes: null, NodeNames: null, FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: (e as Error).message });
    }
  });
  router.post('/prioritize', async (req, res) => {
    const args = parse(ExtenderArgsSchema, req, res, () => []);
    if (!args) return;
    try {
      res.json(await service.prioritize(args));
    } catch (e) {
      res.status(500).json({ error: { code: 'INTERNAL', message: (e as Error).message } });
    }
  });
  router.post('/bind', async (req, res) => {
    const args = parse(ExtenderBindingArgsSchema, req, res, (m) => ({ Error: m }));
    if (!args) return;
    res.json(await service.bind(args));
  });
  return router;
}
