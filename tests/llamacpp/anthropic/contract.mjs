// serve's Anthropic answers against its contract, deploy/llama/openapi.yaml,
// with tests/contract's validators (swagger-parser dereferences the
// document, Ajv validates): each exchange tests/llamacpp/test_anthropic.py
// recorded ({method, path, request, status, type, body | events}) must have
// a status its operation lists (or MethodNotAllowed's, for a method the
// path does not take), a media type of that response, and a body, or every
// event of a stream, valid against its schema (an event against the branch
// of x-event-schema its `type` names); a request serve accepted, valid
// against the operation's requestBody.
// Usage: node contract.mjs deploy/llama/openapi.yaml exchanges.json
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const [doc, file] = process.argv.slice(2);
if (!doc || !file) {
  console.error('usage: node contract.mjs openapi.yaml exchanges.json');
  process.exit(2);
}
const require = createRequire(new URL('../../contract/package.json',
                                      import.meta.url));
const SwaggerParser = require('@apidevtools/swagger-parser');
const AjvModule = require('ajv-draft-04');
const Ajv = AjvModule.default || AjvModule;

const api = await SwaggerParser.validate(doc);
const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false,
                      strictTypes: false });
const compiled = new Map();
function valid(schema, value) {
  let v = compiled.get(schema);
  if (!v) {
    v = ajv.compile(schema);
    compiled.set(schema, v);
  }
  return v(value) ? null : ajv.errorsText(v.errors);
}

const exchanges = JSON.parse(readFileSync(file, 'utf8'));
let events = 0;
const failures = [];
for (const x of exchanges) {
  const where = `${x.method} ${x.path} ${x.status} ${JSON.stringify(x.request).slice(0, 80)}`;
  const fail = (why) => failures.push(`${where}: ${why}`);
  const op = (api.paths[x.path] || {})[x.method.toLowerCase()];
  const r = op ? op.responses[String(x.status)]
               : api.components.responses.MethodNotAllowed;
  if (!r) { fail(`status ${x.status} is not listed`); continue; }
  const media = (r.content || {})[x.type];
  if (!media) { fail(`Content-Type ${x.type} is not listed`); continue; }
  if (x.type === 'application/json') {
    const e = valid(media.schema, x.body);
    if (e) fail(`body: ${e}: ${JSON.stringify(x.body).slice(0, 400)}`);
  } else {
    const schema = media['x-event-schema'];
    for (const ev of x.events) {
      events++;
      const branch = (schema.oneOf || [schema]).find(
        (b) => ((b.properties || {}).type || {}).enum?.includes(ev.type));
      if (!branch) { fail(`no event ${ev.type} in the document`); continue; }
      const e = valid(branch, ev);
      if (e) fail(`event ${ev.type}: ${e}: ${JSON.stringify(ev).slice(0, 400)}`);
    }
  }
  if (x.status < 300 && op && op.requestBody) {
    const e = valid(op.requestBody.content['application/json'].schema,
                    x.request);
    if (e) fail(`serve accepted a request the document refuses: ${e}`);
  }
}
for (const f of failures) console.log('not valid: ' + f);
console.log(`anthropic contract: ${exchanges.length} exchanges, ${events} ` +
            `events, ${failures.length} not valid`);
process.exit(failures.length ? 1 : 0);
