// The official OpenAI Node SDK against relays driving native upstreams (issue 37): Anthropic's
// Messages API (`--upstream-api anthropic`) and Gemini's `streamGenerateContent`
// (`--upstream-api gemini`), both spoken by the fake upstream. Every run goes through
// `responses.stream()`, whose accumulator throws on any event it does not know or any ordering or
// identity violation. The fake signs its reasoning and refuses (400) a turn that sends a signature
// back altered or leaves it out, so an MCP run completes only if its second model turn carried the
// first turn's signature byte for byte.
// Env: RELAY_URL_ANTHROPIC, RELAY_URL_GEMINI (relays), RELAY_MCP_RUST_URL (the rmcp test server);
// all set by ../run.sh.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const MODEL = 'fake-model';
const KINDS = ['anthropic', 'gemini'];
const RUST = process.env.RELAY_MCP_RUST_URL;

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

async function runStream(client, params) {
  const stream = client.responses.stream(params);
  const events = [];
  for await (const ev of stream) events.push(ev);
  const final = await stream.finalResponse();
  return { events, final };
}

function checkSequence(events, terminal = 'response.completed') {
  assert.ok(events.length > 0, 'no events');
  assert.equal(events[0].type, 'response.created');
  events.forEach((ev, i) => assert.equal(ev.sequence_number, i, `sequence_number of event #${i} (${ev.type})`));
  assert.equal(events.at(-1).type, terminal, `last event is ${events.at(-1).type}`);
}

const kinds = (resp) => resp.output.map((o) => o.type);
const itemsOf = (resp, type) => resp.output.filter((o) => o.type === type);
const deltas = (events, type = 'response.output_text.delta') => events.filter((e) => e.type === type).map((e) => e.delta);

// The fake thinking two "think " deltas; Anthropic's also with a `redacted_thinking` block.
const thinkingModel = (kind) => `${MODEL}?reasoning=2${kind === 'anthropic' ? '&redacted=1' : ''}`;

for (const kind of KINDS) {
  const base = process.env[`RELAY_URL_${kind.toUpperCase()}`];
  const skip = !base ? `RELAY_URL_${kind.toUpperCase()} is not set` : !RUST ? 'RELAY_MCP_RUST_URL is not set' : false;
  describe(`native upstream=${kind}`, { skip }, () => {
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'test-key', maxRetries: 0, timeout: 60_000 });

    test('responses.stream(): plain text', async () => {
      const { events, final } = await runStream(client, { model: MODEL, input: 'native stream please' });
      checkSequence(events);
      assert.equal(final.status, 'completed');
      assert.equal(final.output_text, 'Hello! You said: native stream please');
      assert.equal(deltas(events).join(''), final.output_text);
      assert.equal(deltas(events).length, 8, 'the fake answers in 8 deltas');
      assert.equal(final.usage.output_tokens, 8);
    });

    test('responses.stream(): an MCP run sends the first turn\'s signed reasoning back', async () => {
      const { events, final } = await runStream(client, {
        model: thinkingModel(kind),
        reasoning: { effort: 'low' },
        input: 'CALL add {"a":2,"b":3}',
        tools: [{ type: 'mcp', server_label: 'rust', server_url: RUST, require_approval: 'never' }],
      });
      checkSequence(events);
      // The fake refuses a second turn whose signature was lost or altered: the run would fail.
      assert.equal(final.status, 'completed', JSON.stringify(final.error));
      const k = kinds(final);
      assert.equal(k[0], 'mcp_list_tools');
      assert.ok(k.indexOf('reasoning') >= 0 && k.indexOf('reasoning') < k.indexOf('mcp_call'), k.join());
      const [call] = itemsOf(final, 'mcp_call');
      assert.equal(call.name, 'add');
      assert.equal(call.status, 'completed');
      assert.match(call.output, /5/);
      assert.match(final.output_text, /^Tool results: .*5/);
      const [first] = itemsOf(final, 'reasoning');
      assert.deepEqual(first.summary, [{ type: 'summary_text', text: 'think think ' }]);
      assert.match(first.encrypted_content ?? '', /^rr1\./);
      assert.ok(!first.encrypted_content.includes('think'), 'sealed, not shown');
      assert.ok(deltas(events, 'response.reasoning_summary_text.delta').join('').startsWith('think think '));
    });

    test('a stateless follow-up sends the previous output back with its reasoning', async () => {
      const include = ['reasoning.encrypted_content'];
      // Through the stream helper, whose final Response adds `parsed_arguments` to function calls
      // (its own decoding of `arguments`): sent back as they are, the relay drops it.
      const { final: first } = await runStream(client, {
        model: thinkingModel(kind),
        reasoning: { effort: 'medium' },
        store: false,
        include,
        input: 'CALL get_weather {"location":"Paris"}',
        tools: [WEATHER_TOOL],
      });
      assert.ok('parsed_arguments' in itemsOf(first, 'function_call')[0], 'the helper adds it');
      assert.equal(first.status, 'completed');
      const [call] = itemsOf(first, 'function_call');
      assert.deepEqual(JSON.parse(call.arguments), { location: 'Paris' });
      const followUp = (previous) =>
        runStream(client, {
          model: MODEL,
          reasoning: { effort: 'medium' },
          store: false,
          include,
          tools: [WEATHER_TOOL],
          input: [
            { role: 'user', content: 'CALL get_weather {"location":"Paris"}' },
            ...previous,
            { type: 'function_call_output', call_id: call.call_id, output: 'rainy' },
          ],
        });
      const { final: second } = await followUp(first.output);
      assert.equal(second.status, 'completed');
      assert.equal(second.output_text, 'Tool results: rainy');
      // Without the reasoning item the model server refuses the turn, and its 400 passes through.
      await assert.rejects(
        followUp(first.output.filter((o) => o.type !== 'reasoning')),
        (e) => e instanceof OpenAI.BadRequestError && e.status === 400,
      );
    });

    test('responses.stream(): max_output_tokens ends incomplete', async () => {
      const { events, final } = await runStream(client, {
        model: `${MODEL}?finish=length`,
        input: 'long',
        max_output_tokens: 16,
      });
      checkSequence(events, 'response.incomplete');
      assert.equal(final.status, 'incomplete');
      assert.equal(final.incomplete_details?.reason, 'max_output_tokens');
    });
  });
}
