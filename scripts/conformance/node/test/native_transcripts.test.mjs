// Every Anthropic and Gemini transcript of fixtures/upstream/ (written from the providers'
// documented examples) replayed by the fake upstream through a relay of its kind and read with
// the official OpenAI Node SDK's `responses.stream()`, whose accumulator throws on any event it
// does not know or any ordering or identity violation; what it reads is what the transcript's
// golden event log (fixtures/golden/upstream/, checked byte for byte by the Rust suite) says.
// Env: RELAY_URL_ANTHROPIC, RELAY_URL_GEMINI (set by ../run.sh).

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import OpenAI from 'openai';

const ROOT = new URL('../../../../', import.meta.url);
const KINDS = ['anthropic', 'gemini'];

const transcripts = (kind) =>
  fs
    .readdirSync(new URL(`fixtures/upstream/${kind}/`, ROOT))
    .filter((f) => f.endsWith('.sse'))
    .map((f) => f.slice(0, -'.sse'.length))
    .sort();

const golden = (kind, name) =>
  fs
    .readFileSync(new URL(`fixtures/golden/upstream/${kind}/${name}.jsonl`, ROOT), 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l));

const textOf = (resp) =>
  resp.output
    .filter((o) => o.type === 'message')
    .flatMap((o) => o.content ?? [])
    .map((c) => c.text ?? '')
    .join('');

for (const kind of KINDS) {
  const base = process.env[`RELAY_URL_${kind.toUpperCase()}`];
  describe(`native transcripts=${kind}`, { skip: !base && `RELAY_URL_${kind.toUpperCase()} is not set` }, () => {
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'test-key', maxRetries: 0, timeout: 60_000 });
    const names = transcripts(kind);

    test('the transcripts are here', () => {
      assert.ok(names.length >= 7, `${kind}: ${names}`);
    });

    for (const name of names) {
      test(`${kind}/${name} reads as its golden log says`, async () => {
        const want = golden(kind, name).at(-1);
        const stream = client.responses.stream({ model: `replay:${kind}/${name}.sse`, input: 'x' });
        const events = [];
        for await (const ev of stream) events.push(ev);
        events.forEach((ev, i) => assert.equal(ev.sequence_number, i, `sequence_number of #${i} (${ev.type})`));
        const last = events.at(-1);
        assert.equal(last.type, want.type, events.map((e) => e.type).join(' '));
        if (want.type === 'response.completed') {
          const final = await stream.finalResponse();
          assert.equal(final.output_text, textOf(want.response));
        }
        const got = last.response;
        assert.equal(got.status, want.response.status);
        assert.deepEqual(got.output.map((o) => o.type), want.response.output.map((o) => o.type));
        assert.equal(textOf(got), textOf(want.response));
        assert.equal(got.incomplete_details?.reason ?? null, want.response.incomplete_details?.reason ?? null);
        assert.equal(Boolean(got.error), Boolean(want.response.error));
      });
    }
  });
}
