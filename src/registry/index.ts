// The registry room's public surface: the client, its configuration, and the contract it fulfils.
export * from './types.ts';
export { RegistryClient, type RegistryClientOptions } from './client.ts';
export { loadRegistriesConfig } from './hosts.ts';
export { pullSecretFromFile } from './keyring.ts';
