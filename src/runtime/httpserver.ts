// The manager's plain-HTTP endpoints: /metrics on one address, /healthz and /readyz on another,
// as controller-runtime serves them.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export type Route = () => Promise<{ status: number; body: string; contentType?: string }>;

/** Parses "host:port", ":port" (all interfaces) or "0" (disabled). */
export function parseBindAddress(addr: string): { host: string; port: number } | undefined {
  if (addr === '0' || addr === '') return undefined;
  const i = addr.lastIndexOf(':');
  const host = i > 0 ? addr.slice(0, i).replace(/^\[|\]$/g, '') : '0.0.0.0';
  const port = Number(addr.slice(i + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`bad bind address "${addr}"`);
  return { host, port };
}

export interface RunningServer {
  port: number;
  close(): Promise<void>;
}

export async function serve(addr: string, routes: Record<string, Route>): Promise<RunningServer | undefined> {
  const bind = parseBindAddress(addr);
  if (!bind) return undefined;
  const server = http.createServer((req, res) => {
    const route = routes[(req.url ?? '/').split('?')[0]!];
    if (!route || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404).end('not found\n');
      return;
    }
    route().then(
      (r) => res.writeHead(r.status, { 'Content-Type': r.contentType ?? 'text/plain' }).end(r.body),
      (e: unknown) => res.writeHead(500).end(`${e instanceof Error ? e.message : String(e)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(bind.port, bind.host, resolve);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
