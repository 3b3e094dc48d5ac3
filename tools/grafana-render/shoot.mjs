// Draw dashboards in headless Chromium and report what each panel shows.
//   node shoot.mjs <dist dir> <jobs.json>
// jobs.json: [{ "input": <window.__INPUT__>, "png": "<path>", "report": "<path>" }, ...]
// Uses Debian's /usr/bin/chromium (CHROMIUM overrides); never downloads a browser.
import { chromium } from 'playwright-core';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:http';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';

const [dist, jobsPath] = process.argv.slice(2);
const jobs = JSON.parse(readFileSync(jobsPath, 'utf8'));
// The page is served from 127.0.0.1 (an ephemeral port): the bundle, and the icons @grafana/ui
// fetches at run time (public/build/img/icons/...), from the package's own dist/public.
const here = fileURLToPath(new URL('.', import.meta.url));
const ICONS = join(here, 'node_modules', '@grafana', 'ui', 'dist', 'public', 'img');
// Grafana's web fonts (the app serves them from public/fonts/inter): the same Inter from @fontsource.
const INTER = join(here, 'node_modules', '@fontsource', 'inter', 'files');
const FONTS = { 'Inter-Regular.woff2': 'inter-latin-400-normal.woff2', 'Inter-Medium.woff2': 'inter-latin-500-normal.woff2',
  'Inter-Italic.woff2': 'inter-latin-400-italic.woff2', 'Inter-MediumItalic.woff2': 'inter-latin-500-italic.woff2' };
const TYPES = { '.woff2': 'font/woff2', '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml' };
const server = createServer((req, res) => {
  const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
  const font = path.startsWith('/public/fonts/inter/') && FONTS[path.slice('/public/fonts/inter/'.length)];
  const file = font ? join(INTER, font) : path.startsWith('/public/build/img/') ? join(ICONS, path.slice('/public/build/img/'.length))
    : join(dist, path === '/' ? 'index.html' : path.slice(1));
  try {
    const body = readFileSync(file);
    res.writeHead(200, { 'Content-Type': TYPES[extname(file)] ?? 'application/octet-stream' });
    res.end(body);
  } catch {
    res.writeHead(404);
    res.end();
  }
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const origin = `http://127.0.0.1:${server.address().port}`;
const profile = mkdtempSync(join(tmpdir(), 'grafana-render-chromium-'));
// Flags that keep Chromium off the network and quiet (shared/NOTES.md); a fresh profile each run.
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-dev-shm-usage'],
  viewport: { width: 1600, height: 900 },
  deviceScaleFactor: 1,
});
// Hang bounds, not expectations: on two cores shared with servers and other tests, loading the
// renderer bundle took over playwright's default 30 s (a fresh-clone CI run, 2026-12-03). The
// caller's bound on the whole run allows each shot both (grafana_render.PAGE_BOUND_SECONDS).
context.setDefaultTimeout(120000);
context.setDefaultNavigationTimeout(120000);
// Nothing but the page's own files may load.
await context.route((url) => !url.href.startsWith(origin + '/'), (route) => route.abort());

/** Runs in the page: what every panel shows, read from the DOM. */
function readPanels() {
  const rgb = (css) => css; // computed colours come back as rgb()/rgba() strings
  return [...document.querySelectorAll('[data-panel-id]')].map((el) => {
    const stats = [...el.querySelectorAll('[data-stat-value]')].map((s) => {
      const box = s.firstElementChild;
      const style = box ? getComputedStyle(box) : null;
      const valueEl = box?.querySelector('span')?.parentElement;
      return {
        text: s.innerText.replace(/\s+/g, ' ').trim(),
        displayText: s.getAttribute('data-text'),
        background: style ? rgb(style.backgroundImage + ' ' + style.backgroundColor) : '',
        color: valueEl ? getComputedStyle(valueEl).color : '',
      };
    });
    const bars = [...el.querySelectorAll('[data-testid="data-testid Bar gauge value"]')].map((b) => ({
      text: b.innerText.replace(/\s+/g, ' ').trim(), color: getComputedStyle(b).color,
    }));
    return {
      id: Number(el.getAttribute('data-panel-id')),
      title: el.getAttribute('data-panel-title'),
      type: el.getAttribute('data-panel-type'),
      renderError: el.querySelector('[data-render-error]')?.getAttribute('data-render-error') ?? null,
      queryError: el.querySelector('[data-query-error]')?.getAttribute('data-query-error') ?? null,
      noData: el.querySelector('[data-no-data]')?.innerText ?? null,
      text: el.innerText.replace(/\s+/g, ' ').trim(),
      stats,
      bars,
      canvases: el.querySelectorAll('canvas').length,
      tableRows: el.querySelectorAll('[role="row"]').length,
    };
  });
}

const flatPanels = (d) => d.panels.flatMap((p) => [p, ...(p.panels ?? [])]);

let failed = 0;
for (const job of jobs) {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  page.on('response', (r) => r.status() >= 400 && errors.push(`${r.status()} ${r.url()}`));
  await page.addInitScript((input) => { window.__INPUT__ = input; }, job.input);
  // The whole dashboard in the viewport, as on a tall screen: lazily drawn parts (table rows) show.
  const rows = Math.max(...flatPanels(job.input.dashboard).map((p) => p.gridPos.y + p.gridPos.h));
  await page.setViewportSize({ width: job.input.width, height: rows * 38 + 8 });
  // drawMs: opening the page to a settled drawing (every panel rendered, two frames painted), the
  // figure bench/fleet_scale.py reports per dashboard.
  const opened = Date.now();
  let drawMs = null;
  await page.goto(`${origin}/index.html`);
  try {
    await page.waitForFunction(() => window.__RENDERED__ === true, null, { timeout: 120000 });
    await page.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))));
    drawMs = Date.now() - opened;
  } catch (e) {
    errors.push(`not rendered: ${e}`);
    failed += 1;
    console.error(`${job.png}: not rendered; page errors:\n  ${errors.join('\n  ')}`);
  }
  await page.waitForTimeout(300);
  const panels = await page.evaluate(readPanels);
  const colors = await page.evaluate((names) => Object.fromEntries(names.map((n) => [n, window.__THEME_COLOR__?.(n) ?? null])),
    ['red', 'orange', 'green', 'blue', 'purple', 'yellow', 'text']);
  const statBackgrounds = await page.evaluate((names) => Object.fromEntries(names.map((n) => [n, window.__STAT_BACKGROUND__(n)])),
    ['red', 'orange', 'green', 'blue', 'text']);
  const formatted = await page.evaluate((items) => items.map(([config, value]) => window.__FORMAT__(config, value)), job.format ?? []);
  await page.screenshot({ path: job.png, fullPage: true });
  if (job.topPng) {
    await page.screenshot({ path: job.topPng, clip: { x: 0, y: 0, width: 1600, height: job.topHeight ?? 900 } });
  }
  writeFileSync(job.report, JSON.stringify({ panels, colors, statBackgrounds, errors, formatted, drawMs }, null, 1));
  await page.close();
}
await context.close();
rmSync(profile, { recursive: true, force: true });
server.close();
process.exit(failed ? 1 : 0);
