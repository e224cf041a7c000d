// postject ships no types: the one function scripts/cli-binary.ts calls.
declare module 'postject' {
  export function inject(
    file: string,
    name: string,
    data: Buffer,
    options: { sentinelFuse: string },
  ): Promise<void>;
}
