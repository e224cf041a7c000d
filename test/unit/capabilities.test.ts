// A capability Berth does not run costs only its descriptor: `berth run` loads what the capabilities
// run (their CRDs' schemas, setup, controllers, webhooks, explain, plan, page, commands, the registry
// client) only for the ones it runs, when it sets them up. Each case is a fresh process that records every module it loads.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const src = fileURLToPath(new URL('../../src/', import.meta.url));
const at = (file: string) => JSON.stringify(new URL(`../../src/${file}`, import.meta.url).href);

/** The capabilities' folders: those with an index.ts that declares a Capability. */
const folders = readdirSync(src).filter((d) => d !== 'registry' && existsSync(`${src}${d}/index.ts`));

/** What a capability runs, by folder: loaded only when it runs. */
const runs = (folder: string) =>
  new RegExp(`^${folder}/(controllers/|(crd|setup|cli|explain|plan|view|webhook|admit|provider)\\.ts$)`);

/** The modules under src/ a fresh process loads, importing `berth run` and setting up `enabled`. */
function loaded(enabled: string[]): string[] {
  const script = `
    import { registerHooks } from 'node:module';
    const urls = new Set();
    registerHooks({ resolve: (s, c, next) => { const r = next(s, c); urls.add(r.url); return r; } });
    await import(${at('cli/run.ts')});
    const { capabilities } = await import(${at('capabilities.ts')});
    const { Manager } = await import(${at('runtime/manager/manager.ts')});
    const { PolicyKit } = await import(${at('policy/kit.ts')});
    const { rootLogger } = await import(${at('runtime/observability/log.ts')});
    // Built, never started: setup makes informers and controllers, and reads nothing yet.
    const manager = new Manager({ client: {}, metricsBindAddress: '0', healthBindAddress: '0',
      logger: rootLogger.child({}, { level: 'silent' }) });
    const kit = new PolicyKit(manager);
    for (const c of capabilities.filter((c) => ${JSON.stringify(enabled)}.includes(c.name)))
      await c.setup({ manager, kit, options: {}, berthNamespace: 'berth-system' });
    console.log(JSON.stringify([...urls]));`;
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
  assert.equal(child.status, 0, child.stderr);
  const root = new URL('../../src/', import.meta.url).href;
  return (JSON.parse(child.stdout) as string[])
    .filter((u) => u.startsWith(root))
    .map((u) => u.slice(root.length));
}

test('the capabilities are descriptors: berth run loads none of what they run before it sets them up', () => {
  assert.ok(folders.includes('gates') && folders.includes('labels'), folders.join());
  const mods = loaded([]);
  assert.ok(mods.includes('capabilities.ts') && mods.includes('gates/index.ts'), mods.join('\n'));
  for (const folder of folders)
    assert.deepEqual(
      mods.filter((m) => runs(folder).test(m)),
      [],
      `${folder}: loaded before it runs`,
    );
  assert.ok(!mods.includes('registry/client.ts'), 'the registry client loaded with no arch running');
});

for (const enabled of ['gates', 'labels'])
  test(`--controllers=${enabled} loads what ${enabled} runs, and nothing another capability runs`, () => {
    const mods = loaded([enabled]);
    assert.ok(mods.includes(`${enabled}/setup.ts`), mods.join('\n'));
    assert.ok(
      mods.some((m) => m.startsWith(`${enabled}/controllers/`)),
      `${enabled}: no controller loaded`,
    );
    for (const folder of folders.filter((f) => f !== enabled))
      assert.deepEqual(
        mods.filter((m) => runs(folder).test(m)),
        [],
        `${folder}: loaded though only ${enabled} runs`,
      );
    assert.ok(!mods.includes('registry/client.ts'), 'the registry client loaded with no arch running');
  });
