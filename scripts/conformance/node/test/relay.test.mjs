// The official OpenAI Node SDK (7.x, the strictest stream accumulator there is) against the relay,
// over both upstream kinds. Run with Node 22's test runner: `node --test test/` (see ../run.sh).
// RELAY_URL_CHAT and RELAY_URL_RESPONSES give the relays' base URLs (http://ADDR).

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const MODEL = 'fake-model';
const KINDS = ['chat', 'responses'];

const WEATHER_TOOL = {
  type: 'function',
  name: 'get_weather',
  description: 'Get the current weather for a city.',
  parameters: {
    type: 'object',
    properties: { location: { type: 'string' } },
    required: ['location'],
    additionalProperties: false,
  },
  strict: true,
};

const TERMINAL = new Set(['response.completed', 'response.incomplete', 'response.failed']);

// responses.stream(): every event goes through the SDK's accumulator, which throws on any
// ordering or identity violation; finalResponse() must then resolve.
async function runStream(client, params) {
  const stream = client.responses.stream(params);
  const events = [];
  for await (const ev of stream) events.push(ev);
  const final = await stream.finalResponse();
  return { events, final };
}

function checkSequence(events) {
  assert.ok(events.length > 0, 'no events');
  assert.equal(events[0].type, 'response.created');
  events.forEach((ev, i) => assert.equal(ev.sequence_number, i, `sequence_number of event #${i} (${ev.type})`));
  const terminals = events.filter((e) => TERMINAL.has(e.type));
  assert.equal(terminals.length, 1, 'exactly one terminal event');
  assert.ok(TERMINAL.has(events.at(-1).type), `last event is ${events.at(-1).type}`);
}

function deltas(events, type = 'response.output_text.delta') {
  return events.filter((e) => e.type === type).map((e) => e.delta);
}

function messageText(resp) {
  return resp.output
    .filter((o) => o.type === 'message')
    .flatMap((m) => m.content)
    .filter((p) => p.type === 'output_text')
    .map((p) => p.text)
    .join('');
}

for (const kind of KINDS) {
  const base = process.env[`RELAY_URL_${kind.toUpperCase()}`];
  describe(`upstream=${kind}`, { skip: base ? false : `RELAY_URL_${kind.toUpperCase()} is not set` }, () => {
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'test-key', maxRetries: 0, timeout: 60_000 });

    test('responses.stream(): plain text', async () => {
      const { events, final } = await runStream(client, { model: MODEL, input: 'hello node' });
      checkSequence(events);
      assert.equal(final.status, 'completed');
      assert.equal(messageText(final), 'Hello! You said: hello node');
      assert.equal(deltas(events).join(''), 'Hello! You said: hello node');
      assert.equal(final.output_text, 'Hello! You said: hello node');
    });

    test('responses.stream(): reasoning', async () => {
      const { events, final } = await runStream(client, { model: `${MODEL}?reasoning=3`, input: 'think' });
      checkSequence(events);
      assert.equal(final.status, 'completed');
      assert.equal(final.output[0].type, 'reasoning');
      assert.equal(final.output.at(-1).type, 'message');
      assert.equal(deltas(events, 'response.reasoning_text.delta').length, 3);
      assert.equal(messageText(final), 'Hello! You said: think');
    });

    test('responses.stream(): refusal', async () => {
      const { events, final } = await runStream(client, { model: `${MODEL}?refusal=1`, input: 'refuse' });
      checkSequence(events);
      const msg = final.output.find((o) => o.type === 'message');
      assert.ok(msg, 'a message item');
      const part = msg.content.find((p) => p.type === 'refusal');
      assert.ok(part && part.refusal, 'a refusal part');
      assert.equal(deltas(events, 'response.refusal.delta').join(''), part.refusal);
    });

    test('responses.stream(): function call, then its output via previous_response_id', async () => {
      const { events, final } = await runStream(client, {
        model: MODEL,
        input: 'What is the weather in Paris?',
        tools: [WEATHER_TOOL],
        tool_choice: { type: 'function', name: 'get_weather' },
      });
      checkSequence(events);
      assert.equal(final.status, 'completed');
      const call = final.output.find((o) => o.type === 'function_call');
      assert.ok(call, 'a function_call item');
      assert.equal(call.name, 'get_weather');
      assert.ok(call.call_id);
      assert.equal(typeof JSON.parse(call.arguments).location, 'string');
      assert.ok(events.some((e) => e.type === 'response.function_call_arguments.delta'));
      assert.ok(events.some((e) => e.type === 'response.function_call_arguments.done'));

      const second = await runStream(client, {
        model: MODEL,
        previous_response_id: final.id,
        input: [{ type: 'function_call_output', call_id: call.call_id, output: '64 degrees and clear' }],
        tools: [WEATHER_TOOL],
      });
      checkSequence(second.events);
      assert.equal(second.final.status, 'completed');
      assert.match(messageText(second.final), /Tool results:.*64 degrees and clear/s);
    });

    test('responses.stream(): finish=length ends incomplete and finalResponse() resolves', async () => {
      const { events, final } = await runStream(client, { model: `${MODEL}?finish=length`, input: 'long' });
      checkSequence(events);
      assert.equal(events.at(-1).type, 'response.incomplete');
      assert.equal(final.status, 'incomplete');
      assert.equal(final.incomplete_details?.reason, 'max_output_tokens');
    });

    test('responses.stream(): upstream cut mid-stream ends with response.failed', async () => {
      const { events, final } = await runStream(client, { model: `${MODEL}?fault=cut`, input: 'break' });
      checkSequence(events);
      assert.equal(events.at(-1).type, 'response.failed');
      assert.equal(final.status, 'failed');
      assert.ok(final.error?.message);
    });

    test('responses.stream(): event listeners and accumulator snapshots', async () => {
      const stream = client.responses.stream({ model: MODEL, input: 'listeners' });
      let text = '';
      stream.on('response.output_text.delta', (ev) => {
        text += ev.delta;
      });
      const final = await stream.finalResponse();
      assert.equal(text, 'Hello! You said: listeners');
      assert.equal(final.output_text, text);
    });

    test('responses.create({stream: true}): raw iteration', async () => {
      const stream = await client.responses.create({ model: MODEL, input: 'raw events', stream: true });
      const events = [];
      for await (const ev of stream) events.push(ev);
      checkSequence(events);
      const last = events.at(-1);
      assert.equal(last.type, 'response.completed');
      assert.equal(messageText(last.response), 'Hello! You said: raw events');
      const added = events.filter((e) => e.type === 'response.output_item.added').map((e) => e.output_index);
      assert.deepEqual(added, added.map((_, i) => i), 'dense output_index');
    });

    for (const variant of ['reasoning=2', 'refusal=1', 'finish=length', 'fault=cut', 'deltas=1']) {
      test(`responses.create({stream: true}): raw iteration, ${variant}`, async () => {
        const stream = await client.responses.create({ model: `${MODEL}?${variant}`, input: 'raw', stream: true });
        const events = [];
        for await (const ev of stream) events.push(ev);
        checkSequence(events);
        const open = new Map();
        for (const ev of events) {
          if (ev.type === 'response.output_item.added') open.set(ev.output_index, ev.item.id);
          else if (ev.type === 'response.output_item.done') {
            assert.equal(open.get(ev.output_index), ev.item.id, 'done matches added');
            open.delete(ev.output_index);
          } else if ('output_index' in ev) {
            assert.equal(open.get(ev.output_index), ev.item_id, `${ev.type} targets an open item`);
          }
        }
      });
    }

    test('responses.create(): non-streaming equals the streamed output text', async () => {
      const resp = await client.responses.create({ model: MODEL, input: 'json please' });
      assert.equal(resp.status, 'completed');
      assert.equal(resp.output_text, 'Hello! You said: json please');
    });

    test('errors: missing model is a 400 naming the param', async () => {
      await assert.rejects(
        client.responses.create({ input: 'no model' }),
        (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'model',
      );
    });

    test('errors: upstream 500 is a 502 before any event', async () => {
      await assert.rejects(
        (async () => {
          const s = client.responses.stream({ model: `${MODEL}?fault=status500`, input: 'x' });
          for await (const _ of s) {
            // no event is expected
          }
          await s.finalResponse();
        })(),
        (e) => e instanceof OpenAI.InternalServerError && e.status === 502,
      );
    });
  });
}
