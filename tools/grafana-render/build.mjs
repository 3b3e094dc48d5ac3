// Bundle src/app.tsx into one script for the page: `node build.mjs <out dir>`.
// node_modules comes from the cache bootstrap.sh fills (a symlink next to this file).
import { build } from 'esbuild';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ?? join(here, 'dist');
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(here, 'src', 'app.tsx')],
  bundle: true,
  outfile: join(out, 'app.js'),
  format: 'iife',
  platform: 'browser',
  target: 'chrome120',
  jsx: 'automatic',
  minify: true,
  sourcemap: false,
  logLevel: 'warning',
  define: { 'process.env.NODE_ENV': '"production"', global: 'window' },
  loader: { '.svg': 'text', '.woff2': 'empty', '.woff': 'empty', '.ttf': 'empty', '.png': 'empty' },
});
writeFileSync(join(out, 'index.html'),
  '<!doctype html><html><head><meta charset="utf-8"><title>dashboard</title><link rel="stylesheet" href="app.css"></head>' +
  '<body style="margin:0"><div id="root"></div><script src="app.js"></script></body></html>\n');
