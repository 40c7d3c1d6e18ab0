// Builds the playground into ../dist (or the directory given, which must
// be named dist: it is emptied first): the page and one bundle of script
// and style. The output is committed and must be a pure function of src/
// and package-lock.json (TestWebAssetsReproducible in tests/web_test.go
// rebuilds it and compares), so nothing here may depend on the time, the
// machine or the directory it runs in.
import { copyFile, lstat, mkdir, rm } from 'node:fs/promises';
import { basename, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? resolve(here, '../dist'));

// out is removed whole: refuse anything but a directory named dist (or
// nothing yet), so that a wrong argument cannot empty another directory.
if (basename(out) !== 'dist') {
  console.error(`build.mjs: refusing to build into ${out}: the output directory must be named dist`);
  process.exit(2);
}
const st = await lstat(out).catch((e) => (e.code === 'ENOENT' ? null : Promise.reject(e)));
if (st && !st.isDirectory()) {
  console.error(`build.mjs: refusing to build into ${out}: it exists and is not a directory`);
  process.exit(2);
}

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
