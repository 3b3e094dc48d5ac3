/**
 * Entry point of the page: draws one dashboard, every panel placed by its gridPos on Grafana's
 * 24-column grid (30 px rows, 8 px gaps, as the app's dashboard grid), in the dark theme.
 *
 * Input (set by the driver before this script runs): `window.__INPUT__` =
 *   { dashboard: <dashboard JSON>, results: { <panel id>: TargetResult[] }, timeRange: {from, to} (ms),
 *     width: <page width px> }.
 * When everything is drawn it sets `window.__RENDERED__ = true`.
 */
import { createTheme, dateTime, formattedValueToString, getDisplayProcessor, FieldType, type TimeRange } from '@grafana/data';
import { BigValue, BigValueColorMode, BigValueGraphMode, GlobalStyles, ThemeContext } from '@grafana/ui';
import React, { useEffect } from 'react';
import { flushSync } from 'react-dom';
import { createRoot } from 'react-dom/client';

import type { TargetResult } from './frames';
import { Panel, type PanelData, type PanelJson, preparePanel } from './panels';

declare global {
  interface Window {
    __INPUT__: { dashboard: any; results: Record<string, TargetResult[]>; timeRange: { from: number; to: number }; width: number };
    __RENDERED__?: boolean;
    __THEME_COLOR__?: (name: string) => string;
    __FORMAT__?: (config: object, value: number) => string;
    __STAT_BACKGROUND__?: (colorName: string) => string;
  }
}

const ROW_HEIGHT = 30;
const MARGIN = 8;
const COLUMNS = 24;

function* panelsOf(dashboard: any): Generator<PanelJson> {
  for (const panel of dashboard.panels) {
    yield panel;
    if (panel.type === 'row' && panel.collapsed) {
      yield* panel.panels ?? [];
    }
  }
}

function Dashboard({ input, prepared }: { input: Window['__INPUT__']; prepared: Map<number, PanelData | Error> }) {
  const column = (input.width - MARGIN * (COLUMNS + 1)) / COLUMNS;
  const timeRange: TimeRange = {
    from: dateTime(input.timeRange.from),
    to: dateTime(input.timeRange.to),
    raw: { from: dateTime(input.timeRange.from), to: dateTime(input.timeRange.to) },
  };
  const panels = [...panelsOf(input.dashboard)];
  const bottom = Math.max(...panels.map((p) => p.gridPos.y + p.gridPos.h));
  useEffect(() => {
    // uPlot draws in layout effects; two frames later every canvas is painted.
    requestAnimationFrame(() => requestAnimationFrame(() => (window.__RENDERED__ = true)));
  }, []);
  window.__THEME_COLOR__ = (name: string) => theme.visualization.getColorByName(name);
  // Grafana's own formatting of a value under a field config (unit, decimals, mappings): what a
  // stat must show for an expected value.
  window.__FORMAT__ = (config: object, value: number) =>
    formattedValueToString(getDisplayProcessor({ field: { type: FieldType.number, config }, theme, timeZone: 'utc' })(value));
  return <ThemeContext.Provider value={theme}>
    <GlobalStyles />
    <div style={{ position: 'relative', width: input.width, height: bottom * (ROW_HEIGHT + MARGIN) + MARGIN,
      background: theme.colors.background.canvas }}>
      <div data-dashboard-title="" style={{ position: 'absolute', left: MARGIN, top: 0, height: 0 }} />
      {panels.map((panel) => {
        const { x, y, w, h } = panel.gridPos;
        const style: React.CSSProperties = {
          position: 'absolute', left: MARGIN + x * (column + MARGIN), top: MARGIN + y * (ROW_HEIGHT + MARGIN),
          width: w * column + (w - 1) * MARGIN, height: h * ROW_HEIGHT + (h - 1) * MARGIN,
        };
        if (panel.type === 'row') {
          return <div key={panel.id} data-row-title={panel.title} style={{ ...style, display: 'flex', alignItems: 'center',
            fontSize: theme.typography.h5.fontSize, fontWeight: theme.typography.fontWeightMedium, color: theme.colors.text.primary }}>
            {panel.title}</div>;
        }
        return <div key={panel.id} style={style}>
          <Panel panel={panel} data={prepared.get(panel.id)!} width={style.width as number}
            height={style.height as number} theme={theme} timeRange={timeRange} />
        </div>;
      })}
    </div>
  </ThemeContext.Provider>;
}

const theme = createTheme();

async function main() {
  const input = window.__INPUT__;
  const prepared = new Map<number, PanelData | Error>();
  for (const panel of panelsOf(input.dashboard)) {
    if (panel.type !== 'row') {
      prepared.set(panel.id, await preparePanel(panel, input.results[String(panel.id)] ?? [], theme)
        .catch((error: unknown) => (error instanceof Error ? error : new Error(String(error)))));
    }
  }
  createRoot(document.getElementById('root')!).render(<Dashboard input={input} prepared={prepared} />);
}

// How Grafana's BigValue paints a value of the given theme colour in background mode (its gradient
// is derived from the colour): the reference a stat's painted background is compared with.
window.__STAT_BACKGROUND__ = (colorName: string) => {
  const host = document.createElement('div');
  document.body.appendChild(host);
  const root = createRoot(host);
  flushSync(() => root.render(<BigValue theme={theme} width={200} height={100} colorMode={BigValueColorMode.Background}
    graphMode={BigValueGraphMode.None} value={{ text: '1', numeric: 1, color: theme.visualization.getColorByName(colorName) }} />));
  const box = host.firstElementChild as HTMLElement;
  const painted = getComputedStyle(box).backgroundImage + ' ' + getComputedStyle(box).backgroundColor;
  root.unmount();
  host.remove();
  return painted;
};

main();
