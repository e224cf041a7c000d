// The registry room's public surface: the client, its configuration, and the contract it fulfils.
export * from './types.ts';
export { RegistryClient, type RegistryClientOptions } from './client.ts';
export type { RequestCounts } from './transport.ts';
export { RegistriesConfig, loadRegistriesConfig, parseRegistriesConfig } from './hosts.ts';
export { pullSecretFromFile, SecretType } from './keyring.ts';
export { parseReference, registryListed, type Reference } from './reference.ts';
export { MediaType } from './manifest.ts';
