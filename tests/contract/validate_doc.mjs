#!/usr/bin/env node
// Validates proto/openapi.yaml with @apidevtools/swagger-parser: the
// document against the OpenAPI 3.0 JSON Schema, every $ref resolved, and
// its semantic checks (path parameters, unique operation ids, ...).
// Usage: node validate_doc.mjs path/to/openapi.yaml
import SwaggerParser from '@apidevtools/swagger-parser';

const file = process.argv[2];
if (!file) {
  console.error('usage: validate_doc.mjs path/to/openapi.yaml');
  process.exit(2);
}
try {
  const api = await SwaggerParser.validate(file);
  const ops = Object.values(api.paths).reduce(
    (n, item) => n + ['get', 'head', 'put', 'post', 'delete', 'patch', 'options']
      .filter((m) => item[m]).length, 0);
  console.log(`swagger-parser: ${file} is a valid OpenAPI ${api.openapi} ` +
              `document (${Object.keys(api.paths).length} paths, ${ops} operations)`);
} catch (err) {
  console.error(`swagger-parser: ${file} is not valid:\n${err.message}`);
  process.exit(1);
}
