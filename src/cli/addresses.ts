// The addresses Berth's servers take when a flag does not name one: one list, so the test driver can
// hold every one of them while the suite runs (no test may lean on a fixed port).

export const DEFAULT_ADDRESSES = {
  metrics: '127.0.0.1:8080',
  health: '127.0.0.1:8081',
  webhook: '127.0.0.1:9443',
  ui: '127.0.0.1:8088',
} as const;
