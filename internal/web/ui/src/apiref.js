// A small renderer of an OpenAPI 3.1 document: each path's operations
// (parameters, request body, responses) and the component schemas with
// their properties, types and bounds.
import { h } from './dom.js';

const methods = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];

export function renderReference(root, doc) {
  const info = doc.info ?? {};
  const ops = [];
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const m of methods) if (item[m]) ops.push(operation(path, m, item[m], item.parameters ?? []));
  }
  const schemas = Object.entries(doc.components?.schemas ?? {}).map(([name, s]) => schemaSection(name, s));
  root.replaceChildren(
    h('div', { class: 'ref' },
      h('h2', {}, `${info.title ?? 'API'} ${info.version ?? ''}`),
      info.description ? h('p', { class: 'desc' }, info.description) : null,
      h('p', { class: 'muted' }, `OpenAPI ${doc.openapi ?? '?'} · ${ops.length} operations · ${schemas.length} schemas`),
      h('h3', {}, 'Operations'),
      ...ops,
      h('h3', {}, 'Schemas'),
      ...schemas,
    ),
  );
}

function operation(path, method, op, shared) {
  const params = [...shared, ...(op.parameters ?? [])];
  const body = op.requestBody;
  return h('details', { class: 'op' },
    h('summary', {}, h('span', { class: `method ${method}` }, method.toUpperCase()), ' ', h('code', {}, path), ' ', h('span', { class: 'muted' }, op.summary ?? '')),
    op.description ? h('p', { class: 'desc' }, op.description) : null,
    params.length ? h('h4', {}, 'Parameters') : null,
    params.length ? table(['name', 'in', 'type', 'description'], params.map((p) => [
      h('code', {}, p.name + (p.required ? '' : '?')), p.in ?? '', typeOf(p.schema ?? {}), describe(p.schema ?? {}, p.description),
    ])) : null,
    body ? h('h4', {}, 'Request body' + (body.required ? '' : ' (optional)')) : null,
    body ? contentList(body.content, body.description) : null,
    h('h4', {}, 'Responses'),
    table(['status', 'description', 'body'], Object.entries(op.responses ?? {}).map(([status, r]) => [
      h('code', {}, status), r.description ?? '', r.content ? contentList(r.content) : '',
    ])),
  );
}

function contentList(content = {}, description) {
  return h('div', {},
    description ? h('p', { class: 'desc' }, description) : null,
    ...Object.entries(content).map(([type, c]) => h('div', {}, h('code', { class: 'muted' }, type), ' ', c.schema ? typeOf(c.schema) : '')),
  );
}

function schemaSection(name, s) {
  const required = new Set(s.required ?? []);
  const props = Object.entries(s.properties ?? {});
  return h('section', { class: 'schema', id: 'schema-' + name },
    h('h4', {}, name, ' ', h('span', { class: 'muted' }, typeOf(s, false))),
    s.description ? h('p', { class: 'desc' }, s.description) : null,
    props.length ? table(['field', 'type', 'description'], props.map(([p, ps]) => [
      h('code', {}, p + (required.has(p) ? '' : '?')), typeOf(ps), describe(ps),
    ])) : null,
  );
}

// typeOf is a schema's type as text, with links to referenced schemas.
function typeOf(s, follow = true) {
  if (s.$ref) {
    const name = s.$ref.split('/').pop();
    return h('a', { href: '#schema-' + name }, name);
  }
  for (const k of ['oneOf', 'anyOf', 'allOf']) {
    if (s[k]) return h('span', {}, ...join(s[k].map((x) => typeOf(x)), k === 'allOf' ? ' & ' : ' | '));
  }
  const types = Array.isArray(s.type) ? s.type : [s.type ?? (s.properties ? 'object' : 'any')];
  return h('span', {}, ...join(types.map((t) => {
    if (t === 'array' && follow) return h('span', {}, '[', typeOf(s.items ?? {}), ']');
    if (t === 'object' && follow && s.additionalProperties && typeof s.additionalProperties === 'object') {
      return h('span', {}, 'map of ', typeOf(s.additionalProperties));
    }
    return t;
  }), ' | '));
}

function join(items, sep) {
  return items.flatMap((x, i) => (i ? [sep, x] : [x]));
}

const bounds = [
  ['minimum', '≥ '], ['exclusiveMinimum', '> '], ['maximum', '≤ '], ['exclusiveMaximum', '< '],
  ['minLength', 'length ≥ '], ['maxLength', 'length ≤ '], ['minItems', 'items ≥ '], ['maxItems', 'items ≤ '],
  ['maxProperties', 'entries ≤ '], ['pattern', 'pattern '], ['format', 'format '],
];

// describe is a schema's description with its bounds, enum and default.
function describe(s, description) {
  const notes = bounds.filter(([k]) => s[k] !== undefined).map(([k, label]) => label + s[k]);
  if (s.enum) notes.push('one of ' + s.enum.map((v) => JSON.stringify(v)).join(', '));
  if (s.const !== undefined) notes.push('= ' + JSON.stringify(s.const));
  if (s.default !== undefined) notes.push('default ' + JSON.stringify(s.default));
  return h('span', {}, description ?? s.description ?? '', notes.length ? h('span', { class: 'bounds' }, ' ' + notes.join('; ')) : null);
}

function table(head, rows) {
  return h('table', {},
    h('thead', {}, h('tr', {}, ...head.map((c) => h('th', {}, c)))),
    h('tbody', {}, ...rows.map((r) => h('tr', {}, ...r.map((c) => h('td', {}, c))))),
  );
}
