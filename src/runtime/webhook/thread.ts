// The webhook thread: a worker_threads entry that serves admission (serving.ts) away from the main
// thread. Its heap holds only what serving needs, so the main thread's informers and garbage
// collection do not hold its answers. It talks to the main thread by the messages in threaded.ts.
import { parentPort, workerData } from 'node:worker_threads';
import { rootLogger, setLogFormat, setLogLevel } from '../observability/log.ts';
import { registry } from '../observability/metrics.ts';
import type { AdmissionHandler, AdmissionResult } from './admission.ts';
import { AdmissionServing } from './serving.ts';
import type { FromThread, ThreadHandler, ThreadInit, ToThread } from './threaded.ts';

const init = workerData as ThreadInit;
const port = parentPort!;
const send = (m: FromThread) => port.postMessage(m);
setLogLevel(init.logLevel);
setLogFormat(init.logFormat);
const log = rootLogger.child({ component: 'webhook', thread: 'webhook' });

const states = new Map<string, unknown>();
const asked = new Map<number, { resolve(r: AdmissionResult): void; reject(e: Error): void }>();
let nextId = 0;

/** A route answered on the main thread: ask, and wait for its answer (serving bounds the wait). */
const askMain =
  (path: string): AdmissionHandler =>
  (request) =>
    new Promise<AdmissionResult>((resolve, reject) => {
      const id = nextId++;
      // Past the handler timeout serving has already answered; this only forgets the question.
      const forget = setTimeout(() => asked.delete(id), init.handlerTimeoutMs + 1000);
      asked.set(id, {
        resolve: (r) => (clearTimeout(forget), resolve(r)),
        reject: (e) => (clearTimeout(forget), reject(e)),
      });
      send({ type: 'admit', id, path, request });
    });

const serving = new AdmissionServing({ ...init, logger: log });
if (init.draining) serving.drain();
for (const route of init.routes) {
  let handler: AdmissionHandler;
  if (route.threaded) {
    const module = (await import(route.threaded.module)) as Record<string, ThreadHandler<unknown, unknown>>;
    const threaded = module[route.threaded.name];
    if (!threaded) throw new Error(`${route.threaded.module} exports no ${route.threaded.name}`);
    states.set(route.path, route.threaded.state);
    const { path } = route;
    handler = threaded.handler(
      () => states.get(path),
      (hint) => send({ type: 'hint', path, hint }),
    );
  } else handler = askMain(route.path);
  serving.register(route.path, handler, route.name);
}

port.on('message', (m: ToThread) => {
  switch (m.type) {
    case 'state':
      states.set(m.path, m.state);
      break;
    case 'certificate':
      serving.setCertificate(m);
      break;
    case 'answer': {
      const waiting = asked.get(m.id);
      asked.delete(m.id);
      if (m.error !== undefined) waiting?.reject(new Error(m.error));
      else waiting?.resolve(m.result as AdmissionResult);
      break;
    }
    case 'metrics':
      void registry.getMetricsAsJSON().then((metrics) => send({ type: 'metrics', id: m.id, metrics }));
      break;
    case 'drain':
      serving.drain();
      break;
    case 'stop':
      void serving.close().then(() => {
        send({ type: 'stopped' });
        port.close();
      });
  }
});
send({ type: 'listening', port: await serving.listen() });
