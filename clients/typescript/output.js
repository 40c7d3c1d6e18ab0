// What a model is given of a run: the fields it can act on (the adapters'
// shared part).
export function toolOutput(r) {
  const out = { status: r.status, stdout: r.stdout, stderr: r.stderr };
  if (r.result != null) out.result = r.result;
  if (r.error) out.error = `${r.error.type}: ${r.error.message}${r.error.line ? ` (line ${r.error.line})` : ''}`;
  if (r.message && r.status !== 'ok') out.message = r.message;
  return out;
}
