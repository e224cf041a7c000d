// Registration builders: admissionregistration.k8s.io/v1 objects, applied by whoever registers.
import { apiVersionOf, Resources, type KubeObject, type ObjectMeta, type ResourceRef } from '../api/meta.ts';
import type { Operation } from './admission.ts';

export interface ServiceReference {
  namespace: string;
  name: string;
  port?: number;
}

export interface WebhookClientConfig {
  url?: string;
  service?: ServiceReference & { path?: string };
  /** Base64 of the PEM CA bundle. */
  caBundle?: string;
}

/** Where the apiserver sends reviews for `path`: a base URL, or a Service (port defaults to 443). */
export function webhookClientConfig(
  target: { url: string } | { service: ServiceReference },
  path: string,
  caBundle?: string,
): WebhookClientConfig {
  const config: WebhookClientConfig =
    'url' in target
      ? { url: target.url.replace(/\/+$/, '') + path }
      : { service: { ...target.service, path } };
  if (caBundle) config.caBundle = Buffer.from(caBundle).toString('base64');
  return config;
}

export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: {
    key: string;
    operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
    values?: string[];
  }[];
}

export interface RuleWithOperations {
  operations: (Operation | '*')[];
  apiGroups: string[];
  apiVersions: string[];
  resources: string[];
  scope?: 'Cluster' | 'Namespaced' | '*';
}

/** One webhook entry. failurePolicy has no default here: each webhook decides whether it may fail open. */
export interface ValidatingWebhook {
  /** Fully qualified, e.g. 'nodes.labels.berth.dev'. */
  name: string;
  clientConfig: WebhookClientConfig;
  rules: RuleWithOperations[];
  failurePolicy: 'Fail' | 'Ignore';
  matchPolicy?: 'Exact' | 'Equivalent';
  namespaceSelector?: LabelSelector;
  objectSelector?: LabelSelector;
  matchConditions?: { name: string; expression: string }[];
  sideEffects?: 'None' | 'NoneOnDryRun';
  timeoutSeconds?: number;
  admissionReviewVersions?: string[];
}

export interface MutatingWebhook extends ValidatingWebhook {
  reinvocationPolicy?: 'Never' | 'IfNeeded';
}

export interface WebhookConfiguration<W extends ValidatingWebhook> extends KubeObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta & { name: string };
  webhooks: W[];
}

interface WebhookConfigurationSpec<W extends ValidatingWebhook> {
  name: string;
  labels?: Record<string, string>;
  webhooks: W[];
}

function withDefaults<W extends ValidatingWebhook>(webhook: W): W {
  return {
    ...webhook,
    admissionReviewVersions: webhook.admissionReviewVersions ?? ['v1'],
    sideEffects: webhook.sideEffects ?? 'None',
    timeoutSeconds: webhook.timeoutSeconds ?? 5,
    matchPolicy: webhook.matchPolicy ?? 'Equivalent',
  };
}

function configuration<W extends ValidatingWebhook>(
  ref: ResourceRef,
  spec: WebhookConfigurationSpec<W>,
): WebhookConfiguration<W> {
  return {
    apiVersion: apiVersionOf(ref),
    kind: ref.kind,
    metadata: { name: spec.name, ...(spec.labels ? { labels: spec.labels } : {}) },
    webhooks: spec.webhooks.map(withDefaults),
  };
}

export function mutatingWebhookConfiguration(
  spec: WebhookConfigurationSpec<MutatingWebhook>,
): WebhookConfiguration<MutatingWebhook> {
  return configuration(Resources.mutatingWebhookConfigurations, spec);
}

export function validatingWebhookConfiguration(
  spec: WebhookConfigurationSpec<ValidatingWebhook>,
): WebhookConfiguration<ValidatingWebhook> {
  return configuration(Resources.validatingWebhookConfigurations, spec);
}
