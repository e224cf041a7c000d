import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  MAX_POD_IMAGES,
  pullSecretRefs,
  tooManyImages,
  imagesText,
  intersection,
  podImages,
  unlistedRegistry,
} from '../../../../src/arch/decide/images.ts';
import { type NodeSelectorTerm } from '../../../../src/arch/decide/pods.ts';
import { gatePod } from '../../../../src/arch/decide/patches.ts';
import { podOs } from '../../../../src/policy/pods.ts';
import { ARCH_LABEL, OS_LABEL } from '../../../../src/arch/types.ts';
import { InspectionError, type Inspection } from '../../../../src/registry/types.ts';
import { apply, inspection, pod, spec, terms } from './fixtures.ts';

describe('images and their architectures', () => {
  test(`a pod of more than ${MAX_POD_IMAGES} distinct images is Bounded, for good; repeats count once`, () => {
    const images = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ image: `img${i}:1`, revalidate: false }));
    assert.equal(tooManyImages(images(MAX_POD_IMAGES)), undefined);
    assert.equal(tooManyImages([...images(MAX_POD_IMAGES), ...images(MAX_POD_IMAGES)]), undefined);
    const err = tooManyImages(images(MAX_POD_IMAGES + 1));
    assert.equal(err?.reason, 'Bounded');
    assert.equal(err?.transient, false);
    assert.match(err!.message, /names 33 images; Berth reads at most 32 for one pod/);
  });

  test('pullSecretRefs: the pod’s own, in its namespace, then the cluster-wide one', () => {
    const p = pod({ containers: [], imagePullSecrets: [{ name: 'a' }, { name: 'b' }] });
    assert.deepEqual(pullSecretRefs(p, 'team'), ['team/a', 'team/b']);
    assert.deepEqual(pullSecretRefs(p, 'team', 'berth/global'), ['team/a', 'team/b', 'berth/global']);
    assert.deepEqual(pullSecretRefs(p, 'team', 'no-namespace'), ['team/a', 'team/b']);
  });

  test('every image of containers and initContainers, once; Always on any container revalidates', () => {
    const p = pod({
      initContainers: [{ name: 'i', image: 'init:1', imagePullPolicy: 'IfNotPresent' }],
      containers: [
        { name: 'a', image: 'web:1' },
        { name: 'b', image: 'web:1', imagePullPolicy: 'Always' },
        { name: 'c', image: 'side:2' },
      ],
    });
    assert.deepEqual(podImages(p), [
      { image: 'init:1', revalidate: false },
      { image: 'web:1', revalidate: true },
      { image: 'side:2', revalidate: false },
    ]);
  });

  test("the seed's example: amd64-only and amd64+arm+ppc64le give amd64", () => {
    const got = intersection(pod(), [
      inspection('a', ['linux/amd64']),
      inspection('b', ['linux/amd64', 'linux/arm/v7', 'linux/ppc64le']),
    ]);
    assert.deepEqual(got, ['amd64']);
  });

  test('variants narrow nothing (the node label has none); other OSes count only for pods of that OS', () => {
    const images = [
      inspection('a', ['linux/arm/v6', 'linux/arm64/v8', 'windows/amd64']),
      inspection('b', ['linux/arm/v7', 'linux/arm64', 'windows/amd64']),
    ];
    assert.deepEqual(intersection(pod(), images), ['arm', 'arm64']);
    assert.deepEqual(intersection(pod({ os: { name: 'windows' } }), images), ['amd64']);
    assert.deepEqual(
      intersection(pod(), [inspection('a', ['linux/amd64']), inspection('b', ['linux/arm64'])]),
      [],
    );
  });

  test("the pod's OS: spec.os, else its nodeSelector, else one value every required term names, else linux", () => {
    const os = (values: string[], operator = 'In') => ({ key: OS_LABEL, operator, values });
    const required = (...t: NodeSelectorTerm[]) => ({
      affinity: {
        nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: t } },
      },
    });
    assert.equal(podOs(pod()), 'linux');
    assert.equal(podOs(pod({ nodeSelector: { [OS_LABEL]: 'windows' } })), 'windows');
    assert.equal(
      podOs(pod({ os: { name: 'linux' }, nodeSelector: { [OS_LABEL]: 'windows' } })),
      'linux',
      'spec.os first',
    );
    const zone = { key: 'zone', operator: 'In', values: ['a'] };
    assert.equal(
      podOs(
        pod(required({ matchExpressions: [zone, os(['windows'])] }, { matchExpressions: [os(['windows'])] })),
      ),
      'windows',
    );
    for (const [what, t] of [
      ['a term without it', [{ matchExpressions: [os(['windows'])] }, { matchExpressions: [zone] }]],
      ['terms that differ', [{ matchExpressions: [os(['windows'])] }, { matchExpressions: [os(['linux'])] }]],
      ['more than one value', [{ matchExpressions: [os(['windows', 'linux'])] }]],
      ['NotIn', [{ matchExpressions: [os(['windows'], 'NotIn')] }]],
      ['no term', []],
    ] as [string, NodeSelectorTerm[]][])
      assert.equal(podOs(pod(required(...t))), 'linux', what);
  });

  test('a Windows pod that says so by selector only gets the Windows architectures, at admission too', () => {
    const images = [
      inspection('win', ['windows/amd64']),
      inspection('both', ['linux/arm64', 'windows/amd64']),
    ];
    const bySelector = pod({ nodeSelector: { [OS_LABEL]: 'windows' } });
    assert.deepEqual(intersection(bySelector, images), ['amd64']);
    const byTerm = pod({
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [
              { matchExpressions: [{ key: OS_LABEL, operator: 'In', values: ['windows'] }] },
            ],
          },
        },
      },
    });
    assert.deepEqual(intersection(byTerm, images), ['amd64']);
    // The webhook decides with the same function: placed at once, never gated, never impossible.
    const { patch, placed } = gatePod(bySelector, { name: 'p', spec: spec(), deleting: false }, images);
    assert.deepEqual(placed, ['amd64']);
    assert.deepEqual(terms(apply(bySelector, patch)), [
      { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['amd64'] }] },
    ]);
  });
});

test("messages name each image's architectures for the pod's OS, not another's", () => {
  const image = (name: string, platforms: string[]): Inspection => ({
    image: name,
    reference: `r/${name}`,
    digest: 'sha256:ab',
    platforms: platforms.map((p) => ({ os: p.split('/')[0]!, architecture: p.split('/')[1]! })),
    registry: 'r',
    cached: true,
  });
  const images = [image('a', ['linux/amd64']), image('b', ['windows/amd64', 'linux/arm64', 'linux/amd64'])];
  assert.equal(imagesText(images, 'linux'), 'a (amd64), b (amd64, arm64)');
  assert.equal(imagesText(images, 'windows'), 'a (none for windows), b (amd64)');
});

describe('unlistedRegistry', () => {
  const listing = (registries?: string[]) => ({
    name: 'only-ours',
    spec: spec(registries ? { registries } : {}),
    deleting: false,
  });
  const naming = (...images: string[]) =>
    pod({ containers: images.map((image, i) => ({ name: `c${i}`, image })) });

  test('no list: every registry; a list: the first image of another registry, as a refusal', () => {
    assert.equal(unlistedRegistry(naming('127.0.0.1:5000/x:1'), listing()), undefined);
    const listed = listing(['ghcr.io', '*.corp.example', 'docker.io']);
    assert.equal(
      unlistedRegistry(naming('nginx', 'ghcr.io/a/b:1', 'r.eu.corp.example/c:2'), listed),
      undefined,
    );
    const err = unlistedRegistry(naming('ghcr.io/a/b:1', '127.0.0.1:5000/x:1', '10.0.0.1/y:1'), listed);
    assert.ok(err instanceof InspectionError);
    assert.equal(err.reason, 'RegistryNotAllowed');
    assert.equal(err.transient, false);
    assert.equal(err.image, '127.0.0.1:5000/x:1');
    assert.match(err.message, /^127\.0\.0\.1:5000 is not among the registries ArchPlacement only-ours lists/);
  });

  test('an image that is no reference is left to its inspection', () => {
    assert.equal(unlistedRegistry(naming('Not A Reference'), listing(['ghcr.io'])), undefined);
  });

  test('the list is validated as registries, never as patterns to compile', () => {
    assert.throws(() => spec({ registries: ['(a+)+$'] }));
    assert.throws(() => spec({ registries: ['*.*.example'] }));
    assert.deepEqual(spec({ registries: ['[::1]:5000', 'reg.internal:5000'] }).registries, [
      '[::1]:5000',
      'reg.internal:5000',
    ]);
  });
});
