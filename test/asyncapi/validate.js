// Reads an AsyncAPI document on stdin, parses and validates it with the
// official AsyncAPI parser, and prints {"errors": n, "diagnostics": [...]}
// as JSON on stdout. Exits 0 when it could run, whatever the verdict: the Go
// test (asyncapi_test.go) reads the verdict from the JSON.
'use strict';

const { Parser, DiagnosticSeverity } = require('@asyncapi/parser');

const severities = { 0: 'error', 1: 'warning', 2: 'information', 3: 'hint' };

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8');

  const parser = new Parser();
  const { document, diagnostics } = await parser.parse(text);
  const out = diagnostics.map((d) => ({
    severity: severities[d.severity] || String(d.severity),
    code: d.code,
    message: d.message,
    path: (d.path || []).join('/'),
  }));
  const errors = diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error).length;
  const summary = {
    errors,
    parsed: document !== undefined,
    diagnostics: out,
  };
  if (document) {
    summary.version = document.version();
    summary.channels = document.channels().all().map((c) => c.id());
    summary.operations = document.operations().all().map((o) => o.id());
    summary.messages = document.allMessages().all().map((m) => m.id());
  }
  process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
}

main().catch((err) => {
  process.stderr.write(String((err && err.stack) || err) + '\n');
  process.exit(2);
});
