// The namespace Berth runs in. Policies leave it alone unless they name it, and the install puts
// Berth's service account there.
export const NAMESPACE = 'berth-system';
/** The namespace Berth runs in: its pod's (POD_NAMESPACE, from the downward API), else the default. */
export const berthNamespace = (): string => process.env['POD_NAMESPACE'] ?? NAMESPACE;
export const SERVICE_ACCOUNT = 'berth';
