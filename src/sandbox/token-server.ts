// The sandbox registry's token service as its own process (`node token-server.ts REGISTRY_DIR`),
// started and stopped by the sandbox like its other processes. It reads the policy files on every
// request, so a test helper that adds a user or a private repository needs no restart.
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import https from 'node:https';
import { join } from 'node:path';
import {
  authenticate,
  grant,
  mergePolicies,
  parseScopes,
  policyDir,
  signToken,
  type TokenPolicy,
  type TokenServerConfig,
} from './token.ts';

function readPolicy(registryDir: string): TokenPolicy {
  const dir = policyDir(registryDir);
  const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.json')) : [];
  return mergePolicies(
    files.sort().map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')) as Partial<TokenPolicy>),
  );
}

function serve(registryDir: string): void {
  const config = JSON.parse(readFileSync(join(registryDir, 'token.json'), 'utf8')) as TokenServerConfig;
  const signingKey = createPrivateKey(readFileSync(config.signingKeyFile));
  const signingCert = new X509Certificate(readFileSync(config.signingCertFile)).raw;
  const log = (s: string) => process.stdout.write(`${new Date().toISOString()} ${s}\n`);
  const server = https.createServer(
    { cert: readFileSync(config.certFile), key: readFileSync(config.keyFile) },
    (req, res) => {
      const url = new URL(req.url ?? '/', 'https://127.0.0.1');
      const answer = (code: number, body: unknown) => {
        res.writeHead(code, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (req.method === 'GET' && url.pathname === '/healthz') return answer(200, { ok: true });
      if (req.method !== 'GET' || url.pathname !== '/token')
        return answer(404, { errors: [{ code: 'NOT_FOUND', message: `${req.method} ${url.pathname}` }] });
      if (url.searchParams.get('service') !== config.service)
        return answer(400, { errors: [{ code: 'DENIED', message: `unknown service` }] });
      try {
        const policy = readPolicy(registryDir);
        let user: string | undefined;
        try {
          user = authenticate(policy, req.headers.authorization);
        } catch (e) {
          log(`401 ${(e as Error).message}`);
          res.setHeader('WWW-Authenticate', `Basic realm="${config.service}"`);
          return answer(401, { errors: [{ code: 'UNAUTHORIZED', message: (e as Error).message }] });
        }
        const access = parseScopes(url.searchParams.getAll('scope')).map((s) => ({
          ...s,
          actions: grant(policy, user, s),
        }));
        const token = signToken(
          {
            issuer: config.issuer,
            service: config.service,
            subject: user ?? '',
            access,
            expiresIn: config.expiresIn,
          },
          signingKey,
          signingCert,
        );
        log(
          `200 ${user ?? 'anonymous'} ${access.map((a) => `${a.type}:${a.name}:${a.actions.join(',')}`).join(' ')}`,
        );
        answer(200, {
          token,
          access_token: token,
          expires_in: config.expiresIn,
          issued_at: new Date().toISOString(),
        });
      } catch (e) {
        log(`500 ${String(e)}`);
        answer(500, { errors: [{ code: 'UNKNOWN', message: String(e) }] });
      }
    },
  );
  server.listen(config.port, '127.0.0.1', () => log(`token service listening on 127.0.0.1:${config.port}`));
  for (const s of ['SIGTERM', 'SIGINT'] as const)
    process.on(s, () => {
      server.close();
      server.closeAllConnections();
    });
}

const dir = process.argv[2];
if (!dir) {
  process.stderr.write('usage: token-server REGISTRY_DIR\n');
  process.exit(2);
}
serve(dir);
