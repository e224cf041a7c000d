// node:http, loaded with require. An ESM import of it reads every export, and three of them
// (WebSocket, CloseEvent, MessageEvent) are getters that load Node's bundled undici, which Berth
// never uses: some 14 MB of resident memory for the life of the process (issue 17). Types still come
// from `import type ... from 'node:http'`, which is erased.
import { createRequire } from 'node:module';
import type * as Http from 'node:http';

export const http = createRequire(import.meta.url)('node:http') as typeof Http;
