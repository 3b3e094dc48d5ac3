/**
 * The dashboard JSON checked against @grafana/schema's generated dashboard types (v1 schema,
 * `Dashboard`), by the TypeScript compiler: `tsc --noEmit --strict` on a file assigning the JSON
 * literal to `DashboardJson` (tests/test_dashboards_browser.py writes and compiles it). Object
 * literals get excess-property checks, so a misspelt or misplaced key fails, as does a wrong type
 * or enum value.
 *
 * Adaptations, each naming who reads the key (everything else must match the schema exactly):
 *   - JSON carries enum values as strings: `Json<T>` turns each string enum into the union of its
 *     values (`ThresholdsMode` -> 'absolute' | 'percentage');
 *   - Prometheus annotations may carry `expr` and `step` at the top level (the form
 *     grafana-foundation-sdk writes), which @grafana/prometheus' `prepareAnnotation` moves into
 *     `target` when the dashboard loads; the schema lists only `target`. With them, the options
 *     `tagKeys`, `titleFormat`, `textFormat` that @grafana/prometheus' `processEvents` reads;
 *   - `auto`, `auto_count`, `auto_min` on every variable: interval-variable settings that
 *     grafana-foundation-sdk writes for each variable kind and Grafana ignores on the others.
 */
import type { AnnotationQuery, Dashboard, VariableModel } from '@grafana/schema';

export type Json<T> = T extends string
  ? `${T}`
  : T extends Array<infer U>
    ? Array<Json<U>>
    : T extends object
      ? { [K in keyof T]: Json<T[K]> }
      : T;

type LegacyPrometheusAnnotation = {
  expr?: string; step?: string; tagKeys?: string; titleFormat?: string; textFormat?: string;
};
type SdkVariableExtras = { auto?: boolean; auto_count?: number; auto_min?: string };

export type DashboardJson = Omit<Json<Dashboard>, 'annotations' | 'templating'> & {
  annotations?: { list?: Array<Json<AnnotationQuery> & LegacyPrometheusAnnotation> };
  templating?: { list?: Array<Json<VariableModel> & SdkVariableExtras> };
};
