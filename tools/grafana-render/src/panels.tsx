/**
 * One dashboard panel drawn by Grafana's own components.
 *
 * Everything that decides what a value looks like is @grafana/data and @grafana/ui: field config
 * (unit, decimals, min/max, thresholds, mappings, overrides) through `applyFieldOverrides`, values
 * through `getFieldDisplayValues` and each field's display processor, transformations through
 * `transformDataFrame`, and the drawing through `BigValue`, `BarGauge`, `TimeSeries`, `Table`,
 * `VizRepeater` and `PanelChrome`. What stands in for Grafana-app code, kept small:
 *   - the panel plugins' default options (PLUGIN_DEFAULTS), which the app merges into saved JSON;
 *   - the stat/bar gauge panels' few lines that hand display values to VizRepeater (StatPanel.tsx,
 *     BarGaugePanel.tsx in the app);
 *   - the time series panel's data preparation (prepareGraphableFields in the app): keep frames
 *     with a time and a number field, insert nulls into gaps with @grafana/data's
 *     applyNullInsertThreshold and turn NaN/±Inf into nulls, as the app does before drawing;
 *   - the "No data" view for time series and tables (PanelDataErrorView in the app), showing
 *     `noValue` when set;
 *   - asking every field for its display name once after the field config is applied (the app
 *     does so before a table draws; TableNG reads only the cached name).
 */
import {
  applyFieldOverrides,
  type DataFrame,
  type DataTransformerConfig,
  FieldColorModeId,
  type FieldConfigSource,
  FieldType,
  type FieldDisplay,
  getDisplayValueAlignmentFactors,
  getFieldDisplayValues,
  applyNullInsertThreshold,
  getFieldDisplayName,
  type GrafanaTheme2,
  type TimeRange,
  transformDataFrame,
  VizOrientation,
} from '@grafana/data';
import { BarGauge, BigValue, ErrorBoundary, PanelChrome, TimeSeries, VizRepeater } from '@grafana/ui';
// The table Grafana 13's table panel draws (the app's TablePanel renders TableNG).
import { TableNG } from '@grafana/ui/unstable';
import { cloneDeep, merge } from 'lodash';
import React from 'react';
import { firstValueFrom } from 'rxjs';

import { panelFrames, type TargetResult } from './frames';
import { fieldConfigRegistry, registerTransformers } from './registry';

/* eslint-disable @typescript-eslint/no-explicit-any */
export type PanelJson = any;

// What the app's panel plugins default to (their option builders), for keys our JSON may omit.
const TIMESERIES_CUSTOM = {
  drawStyle: 'line', lineInterpolation: 'linear', barAlignment: 0, barWidthFactor: 0.6, lineWidth: 1,
  fillOpacity: 0, gradientMode: 'none', spanNulls: false, insertNulls: false, showPoints: 'auto', pointSize: 5,
  stacking: { mode: 'none', group: 'A' }, axisPlacement: 'auto', axisLabel: '', axisColorMode: 'text',
  axisBorderShow: false, axisCenteredZero: false, scaleDistribution: { type: 'linear' },
  hideFrom: { tooltip: false, viz: false, legend: false }, thresholdsStyle: { mode: 'off' },
};
const PLUGIN_DEFAULTS: Record<string, { color: FieldColorModeId; custom?: object; options: object }> = {
  timeseries: { color: FieldColorModeId.PaletteClassic, custom: TIMESERIES_CUSTOM,
    options: { legend: { showLegend: true, displayMode: 'list', placement: 'bottom', calcs: [] }, tooltip: { mode: 'single', sort: 'none' } } },
  stat: { color: FieldColorModeId.Thresholds, options: { reduceOptions: { calcs: ['lastNotNull'], values: false },
    orientation: 'auto', textMode: 'auto', colorMode: 'value', graphMode: 'area', justifyMode: 'auto', wideLayout: true,
    showPercentChange: false, percentChangeColorMode: 'standard', text: {} } },
  bargauge: { color: FieldColorModeId.Thresholds, options: { reduceOptions: { calcs: ['lastNotNull'], values: false },
    orientation: 'auto', displayMode: 'gradient', valueMode: 'color', namePlacement: 'auto', showUnfilled: true,
    sizing: 'auto', minVizWidth: 8, minVizHeight: 16, maxVizHeight: 300, text: {} } },
  table: { color: FieldColorModeId.Thresholds, custom: { align: 'auto', cellOptions: { type: 'auto' }, inspect: false },
    options: { showHeader: true, cellHeight: 'sm' } },
};

export interface PanelData {
  panel: PanelJson;
  /** The data as the panel sees it: transformations and field config applied. */
  series: DataFrame[];
  fieldConfig: FieldConfigSource;
  options: any;
  /** A target Prometheus refused, shown as the panel's error. */
  error?: string;
}

/** PanelQueryRunner's part: frames -> transformations -> field config (in Grafana's order). */
export async function preparePanel(panel: PanelJson, targets: TargetResult[], theme: GrafanaTheme2): Promise<PanelData> {
  const defaults = PLUGIN_DEFAULTS[panel.type];
  if (!defaults) {
    throw new Error(`panel type ${panel.type} is not supported by this renderer`);
  }
  const fieldConfig: FieldConfigSource = cloneDeep(panel.fieldConfig ?? { defaults: {}, overrides: [] });
  fieldConfig.defaults.color ??= { mode: defaults.color };
  if (defaults.custom) {
    fieldConfig.defaults.custom = merge(cloneDeep(defaults.custom), fieldConfig.defaults.custom ?? {});
  }
  const options = merge(cloneDeep(defaults.options), panel.options ?? {});
  let series = panelFrames(targets);
  const transformations: DataTransformerConfig[] = panel.transformations ?? [];
  if (transformations.length && series.length) {
    registerTransformers();
    series = await firstValueFrom(transformDataFrame(transformations, series, { interpolate: (text: string) => text }));
  }
  series = applyFieldOverrides({
    data: series,
    fieldConfig,
    fieldConfigRegistry: fieldConfigRegistry(fieldConfig),
    replaceVariables: (text: string) => text,
    theme,
    timeZone: 'utc',
  });
  // Display names are computed (and cached in field.state) on first request; the app has asked
  // for them before a table draws, and TableNG reads only the cache.
  series.forEach((frame) => frame.fields.forEach((f) => getFieldDisplayName(f, frame, series)));
  return { panel, series, fieldConfig, options, error: targets.find((t) => t.error)?.error };
}

function NoData({ data }: { data: PanelData }) {
  return <div data-no-data="" style={{ display: 'flex', height: '100%', alignItems: 'center', justifyContent: 'center' }}>
    {data.fieldConfig.defaults.noValue ?? 'No data'}</div>;
}

function displayValues(data: PanelData, theme: GrafanaTheme2, sparkline: boolean): FieldDisplay[] {
  return getFieldDisplayValues({
    fieldConfig: data.fieldConfig,
    reduceOptions: data.options.reduceOptions,
    replaceVariables: (text: string) => text,
    theme,
    data: data.series,
    sparkline,
    timeZone: 'utc',
  });
}

function Stat({ data, width, height, theme, timeRange }: Body) {
  const o = data.options;
  return <VizRepeater<FieldDisplay, any>
    source={data.series} renderCounter={0} width={width} height={height} itemSpacing={3} autoGrid
    orientation={o.orientation} minVizWidth={o.minVizWidth} minVizHeight={o.minVizHeight} maxVizHeight={o.maxVizHeight}
    getValues={() => displayValues(data, theme, o.graphMode !== 'none')}
    getAlignmentFactors={getDisplayValueAlignmentFactors}
    renderValue={({ value, width: w, height: h, alignmentFactors, count }) =>
      <div data-stat-value="" data-text={value.display.text} style={{ width: w, height: h }}>
        <BigValue value={value.display} count={count} sparkline={value.sparkline} colorMode={o.colorMode}
          graphMode={o.graphMode} justifyMode={o.justifyMode} textMode={o.textMode} alignmentFactors={alignmentFactors}
          text={o.text} width={w} height={h} theme={theme}
          percentChangeColorMode={o.percentChangeColorMode} /></div>}
  />;
}

function BarGaugeBody({ data, width, height, theme, timeRange }: Body) {
  const o = data.options;
  return <VizRepeater<FieldDisplay, any>
    source={data.series} renderCounter={0} width={width} height={height} itemSpacing={4}
    orientation={o.orientation} minVizWidth={o.minVizWidth} minVizHeight={o.minVizHeight} maxVizHeight={o.maxVizHeight}
    autoGrid={o.orientation === VizOrientation.Auto}
    getValues={() => displayValues(data, theme, false)}
    getAlignmentFactors={getDisplayValueAlignmentFactors}
    renderValue={({ value, width: w, height: h, alignmentFactors, count, orientation }) =>
      <BarGauge value={value.display} width={w} height={h} orientation={orientation} field={value.field}
        display={value.view?.getFieldDisplayProcessor(value.colIndex ?? 0)} text={o.text} theme={theme} itemSpacing={4}
        displayMode={o.displayMode} showUnfilled={o.showUnfilled} valueDisplayMode={o.valueMode}
        namePlacement={o.namePlacement} alignmentFactors={count > 1 ? alignmentFactors : undefined} />}
  />;
}

/** NaN and ±Inf are no point to draw: the app's prepareGraphableFields turns them into nulls (gaps). */
function finiteOrNull(frame: DataFrame): DataFrame {
  return { ...frame, fields: frame.fields.map((f) => f.type !== FieldType.number ? f
    : { ...f, values: f.values.map((v: number | null) => (v != null && Number.isFinite(v) ? v : null)) }) };
}

function TimeSeriesBody({ data, width, height, timeRange }: Body) {
  const frames = data.series
    .filter((f) => f.fields.some((x) => x.type === FieldType.time) && f.fields.some((x) => x.type === FieldType.number))
    .map((frame) => finiteOrNull(applyNullInsertThreshold({ frame, refFieldPseudoMin: timeRange.from.valueOf(),
      refFieldPseudoMax: timeRange.to.valueOf() })));
  if (!frames.length) {
    return <NoData data={data} />;
  }
  return <TimeSeries frames={frames} structureRev={1} width={width} height={height} timeRange={timeRange} timeZone="utc"
    legend={data.options.legend} options={data.options} />;
}

function TableBody({ data, width, height }: Body) {
  const frame = data.series[data.options.frameIndex ?? 0];
  if (!frame || !frame.length) {
    return <NoData data={data} />;
  }
  return <TableNG data={frame} width={width} height={height} showTypeIcons={data.options.showTypeIcons}
    cellHeight={data.options.cellHeight} sortBy={data.options.sortBy} fieldConfig={data.fieldConfig}
    noValue={data.fieldConfig.defaults.noValue} enableVirtualization={false} />;
}

interface Body {
  data: PanelData;
  width: number;
  height: number;
  theme: GrafanaTheme2;
  timeRange: TimeRange;
}

const BODIES: Record<string, (props: Body) => React.ReactElement> = {
  stat: Stat, bargauge: BarGaugeBody, timeseries: TimeSeriesBody, table: TableBody,
};

function Content({ panel, data, width, height, theme, timeRange }: PanelProps) {
  if (data instanceof Error) {
    throw data; // shown by the panel's error boundary, like an error while drawing
  }
  const Body = BODIES[panel.type];
  return <PanelChrome title={panel.title} description={panel.description} width={width} height={height}
    statusMessage={data.error}>
    {(w: number, h: number) => data.error ? <div data-query-error={data.error}>{data.error}</div>
      : <Body data={data} width={w} height={h} theme={theme} timeRange={timeRange} />}
  </PanelChrome>;
}

interface PanelProps {
  panel: PanelJson;
  /** preparePanel's result, or the error it raised. */
  data: PanelData | Error;
  width: number;
  height: number;
  theme: GrafanaTheme2;
  timeRange: TimeRange;
}

/** A panel in its chrome, at a fixed size; render errors are caught and shown, as Grafana does. */
export function Panel(props: PanelProps) {
  const { panel, width, height } = props;
  return <div data-panel-id={panel.id} data-panel-title={panel.title} data-panel-type={panel.type}>
    <ErrorBoundary>{({ error }) => error
      ? <div data-render-error={String(error.message ?? error)} style={{ width, height, color: 'red' }}>
        {panel.title}: {String(error.message ?? error)}</div>
      : <Content {...props} />}</ErrorBoundary>
  </div>;
}
