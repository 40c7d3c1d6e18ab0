// Builds the playground into ../dist (or the directory given): the page
// and one bundle of script and style. The output is committed and must be
// a pure function of src/ and package-lock.json (tests/web_build_test.go
// rebuilds it and compares), so nothing here may depend on the time, the
// machine or the directory it runs in.
import { copyFile, mkdir, rm } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? resolve(here, '../dist'));

await rm(out, { recursive: true, force: true });
await mkdir(resolve(out, 'assets'), { recursive: true });
await esbuild.build({
  absWorkingDir: here,
  entryPoints: { app: 'src/main.js' },
  outdir: resolve(out, 'assets'),
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2020',
  charset: 'utf8',
  logLevel: 'warning',
});
await copyFile(resolve(here, 'src/index.html'), resolve(out, 'index.html'));
