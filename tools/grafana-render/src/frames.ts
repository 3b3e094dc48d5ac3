/**
 * Prometheus HTTP API results -> Grafana data frames, the way Grafana's Prometheus data source
 * hands them to a panel.
 *
 * This is the glue that stands in for code outside the npm packages: Grafana's Go backend
 * (pkg/promlib) turns each result series into one frame [Time, Value] with the series' labels on the
 * value field, the legend template applied as `displayNameFromDS` and the query step as the time
 * field's `interval`; then @grafana/prometheus' `transformV2` merges the frames of `format: table`
 * targets into one table frame per query (label columns sorted, value column `Value` or `Value #<refId>`
 * when the panel has several queries). Gaps stay gaps: no points are invented, exactly as in Grafana,
 * where only the time series panel inserts nulls (see panels.tsx).
 */
import { type DataFrame, type Field, FieldType } from '@grafana/data';

/** One target's answer, as written by the Python side (lab/vllm_spec_lab/grafana_render.py). */
export interface TargetResult {
  refId: string;
  /** `matrix` for range queries, `vector` for instant ones (evaluated at the range end). */
  resultType: 'matrix' | 'vector';
  result: Array<{ metric: Record<string, string>; values?: Array<[number, string]>; value?: [number, string] }>;
  stepSeconds: number;
  expr: string;
  legendFormat?: string;
  format?: string;
  /** Set when Prometheus refused the query: the panel shows it as an error, as Grafana would. */
  error?: string;
}

/** `{{label}}` templates, as Grafana's backend applies legendFormat (missing labels become ''). */
export function legend(format: string | undefined, labels: Record<string, string>): string | undefined {
  if (!format || format === '__auto') {
    return undefined;
  }
  return format.replace(/\{\{\s*(.+?)\s*\}\}/g, (_, name: string) => labels[name] ?? '');
}

/** Grafana's backend parses sample strings like this, +Inf/-Inf/NaN included. */
function sample(text: string): number {
  if (/^\+?inf(inity)?$/i.test(text)) {
    return Infinity;
  }
  if (/^-inf(inity)?$/i.test(text)) {
    return -Infinity;
  }
  return parseFloat(text);
}

function seriesFrames(target: TargetResult): DataFrame[] {
  return target.result.map((series) => {
    const points = series.values ?? (series.value ? [series.value] : []);
    const { __name__, ...labels } = series.metric;
    const time: Field = {
      name: 'Time',
      type: FieldType.time,
      config: { interval: target.stepSeconds * 1000 },
      values: points.map(([t]) => Math.round(t * 1000)),
    };
    const value: Field = {
      name: 'Value',
      type: FieldType.number,
      labels: __name__ ? { __name__, ...labels } : labels,
      config: { displayNameFromDS: legend(target.legendFormat, series.metric) },
      values: points.map(([, v]) => sample(v)),
    };
    return { refId: target.refId, name: legend(target.legendFormat, series.metric), fields: [time, value], length: points.length };
  });
}

/** The table frame of one `format: table` query (transformDFToTable in @grafana/prometheus). */
function tableFrame(target: TargetResult, frames: DataFrame[], queries: number): DataFrame {
  const labelNames = [...new Set(frames.flatMap((f) => Object.keys(f.fields[1].labels ?? {}).sort()))];
  const time: Field = { name: 'Time', type: FieldType.time, config: {}, values: [] };
  const labelFields: Field[] = labelNames.map((name) => ({ name, type: FieldType.string, config: { filterable: true }, values: [] }));
  const value: Field = { name: queries > 1 ? `Value #${target.refId}` : 'Value', type: FieldType.number, config: {}, values: [] };
  for (const frame of frames) {
    const labels = frame.fields[1].labels ?? {};
    frame.fields[0].values.forEach((t: number, i: number) => {
      time.values.push(t);
      value.values.push(frame.fields[1].values[i]);
      labelFields.forEach((field) => field.values.push(labels[field.name] ?? ''));
    });
  }
  return { refId: target.refId, fields: [time, ...labelFields, value], length: time.values.length };
}

/** Every frame a panel receives for its targets, in target order. */
export function panelFrames(targets: TargetResult[]): DataFrame[] {
  const tables = targets.filter((t) => t.format === 'table').length;
  return targets.flatMap((target) => {
    const frames = seriesFrames(target);
    if (target.format === 'table') {
      return frames.length ? [tableFrame(target, frames, tables)] : [];
    }
    return frames;
  });
}
