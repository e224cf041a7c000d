// The sandbox's network helpers: free loopback ports, and the plain requests its health checks make.
import { readFileSync } from 'node:fs';
import https from 'node:https';
import { createServer, connect, type AddressInfo, type Server } from 'node:net';
import { join } from 'node:path';
import { http } from '../runtime/platform/http.ts';

/** A plain-HTTP request to a local component (etcd, kwok); rejects on a status other than 200. */
export function httpRequest(url: string, body?: unknown): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      {
        method: body === undefined ? 'GET' : 'POST',
        timeout: 5000,
        headers: { 'Content-Type': 'application/json' },
      },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d));
        res.on('end', () =>
          res.statusCode === 200 ? resolve(text) : reject(new Error(`${url}: ${res.statusCode} ${text}`)),
        );
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** The status code of a GET to a server with a certificate from the sandbox CA (in `pki`). */
export function httpsStatus(url: string, pki: string): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { ca: readFileSync(join(pki, 'ca.crt')), timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

/** The body of a GET to a sandbox component; `withClientCert` presents the admin's certificate (in `pki`). */
export function httpsGet(url: string, pki: string, withClientCert = false): Promise<string> {
  const auth = withClientCert
    ? {
        cert: readFileSync(join(pki, 'admin.crt')),
        key: readFileSync(join(pki, 'admin.key')),
      }
    : {};
  return new Promise((resolve, reject) => {
    // The controller-manager and scheduler serve self-signed certificates: their health is all we read.
    const req = https.get(
      url,
      {
        ca: readFileSync(join(pki, 'ca.crt')),
        rejectUnauthorized: withClientCert,
        ...auth,
        timeout: 2000,
      },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d));
        res.on('end', () => resolve(body));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

/** The first port the kernel gives outgoing connections (Linux's ip_local_port_range), or 32768. */
function ephemeralFloor(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : 32768;
  } catch {
    return 32768;
  }
}

/** Where a port is picked when none is preferred: from 20000 up to the ephemeral range, if there is room. */
const PICK_FROM = 20000;

/**
 * Free loopback ports, all held open together so none repeats: `prefer[i]` where it is free (a
 * restarted sandbox keeps its addresses, so kubeconfigs held elsewhere stay good), else a free one
 * picked below the kernel's ephemeral range, only once every preferred port is held (so no
 * fallback takes another's old port). Below that range because the port is closed again before
 * its process binds it: meanwhile any outgoing connection on the machine may be given an
 * ephemeral port as its own (CI once saw a sandbox's kube-controller-manager fail that way).
 */
export async function freePorts(n: number, prefer: readonly number[] = []): Promise<number[]> {
  const ports = await holdFreePorts(n, prefer);
  for (const p of ports) handedOut.add(p);
  return ports;
}

/**
 * Ports this process has handed out: a picked port is closed until its process binds it, and a
 * sandbox starting beside it in the same process (`sandbox up --cells` starts its cells at once)
 * must not pick it meanwhile (CI once saw a cell's Berth fail on a port its sibling had taken).
 */
const handedOut = new Set<number>();

async function holdFreePorts(n: number, prefer: readonly number[]): Promise<number[]> {
  const listen = (port: number) =>
    new Promise<Server>((resolve, reject) => {
      const s = createServer();
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => resolve(s));
    });
  const floor = ephemeralFloor();
  const pick = async () => {
    for (let i = 0; floor - PICK_FROM > 1000 && i < 50; i++) {
      const port = PICK_FROM + Math.floor(Math.random() * (floor - PICK_FROM));
      if (handedOut.has(port)) continue;
      const s = await listen(port).catch(() => undefined);
      if (s) return s;
    }
    return listen(0);
  };
  const preferred = await Promise.all(
    Array.from({ length: n }, (_, i) => {
      const p = prefer[i];
      return p ? listen(p).catch(() => undefined) : undefined;
    }),
  );
  const servers = await Promise.all(preferred.map((s) => s ?? pick()));
  const ports = servers.map((s) => (s.address() as AddressInfo).port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return ports;
}

export function isListening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
