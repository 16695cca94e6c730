// WebSocket mode (issue 22) with the official Node SDK's `ResponsesWS` (its beta one steering a
// response, issue 38) and the JS Agents SDK's
// websocket transport (`setOpenAIResponsesTransport('websocket')`, Node 22's global WebSocket),
// over both upstream kinds. No model call may go over HTTP: every `fetch` is recorded.
// RELAY_URL_CHAT and RELAY_URL_RESPONSES give the relays' base URLs (http://ADDR).

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';
import { ResponsesWS as BetaResponsesWS } from 'openai/resources/beta/responses/ws';
import {
  Agent,
  run,
  setDefaultOpenAIClient,
  setOpenAIResponsesTransport,
  setTracingDisabled,
  withResponsesWebSocketSession,
} from '@openai/agents';

setTracingDisabled(true);
setOpenAIResponsesTransport('websocket');

function clientFor(base, posts) {
  return new OpenAI({
    baseURL: `${base}/v1`,
    apiKey: 'x',
    maxRetries: 0,
    fetch: async (url, init) => {
      if (init?.method === 'POST') posts.push(String(url));
      return fetch(url, init);
    },
  });
}

/** The events of one response on `ws`, up to its terminal event or an error. */
function nextResponse(ws) {
  return new Promise((resolve, reject) => {
    const events = [];
    const timer = setTimeout(() => reject(new Error(`no terminal event: ${JSON.stringify(events)}`)), 20000);
    const onEvent = (ev) => {
      events.push(ev);
      if (['response.completed', 'response.failed', 'response.incomplete'].includes(ev.type)) done();
    };
    const onError = (err) => {
      events.push({ type: 'error', error: err.error?.error, status: err.error?.status });
      done();
    };
    const done = () => {
      clearTimeout(timer);
      ws.off('event', onEvent);
      ws.off('error', onError);
      resolve(events);
    };
    ws.on('event', onEvent);
    ws.on('error', onError);
  });
}

for (const kind of ['chat', 'responses']) {
  const base = process.env[`RELAY_URL_${kind.toUpperCase()}`];
  describe(`websocket mode (${kind})`, () => {
    test('the Node SDK runs two responses and an error on one socket', async () => {
      const posts = [];
      const ws = new ResponsesWS(clientFor(base, posts));
      await new Promise((resolve, reject) => {
        ws.socket.once('open', resolve);
        ws.socket.once('error', reject);
      });
      try {
        let pending = nextResponse(ws);
        ws.send({ type: 'response.create', model: 'fake-model', input: 'hi node', store: false });
        const first = await pending;
        assert.deepEqual(first.map((e) => e.sequence_number), [...first.keys()]);
        const done = first.at(-1);
        assert.equal(done.type, 'response.completed');
        assert.equal(done.response.output[0].content[0].text, 'Hello! You said: hi node');

        pending = nextResponse(ws);
        ws.send({ type: 'response.create', model: 'fake-model', input: 'x', previous_response_id: 'resp_gone' });
        const [err] = await pending;
        assert.equal(err.type, 'error');
        assert.equal(err.error.code, 'previous_response_not_found');
        assert.equal(err.status, 400);

        pending = nextResponse(ws);
        ws.send({
          type: 'response.create',
          model: 'fake-model',
          input: 'again',
          store: false,
          previous_response_id: done.response.id,
        });
        const second = (await pending).at(-1);
        assert.equal(second.type, 'response.completed');
        assert.equal(second.response.previous_response_id, done.response.id);
      } finally {
        ws.close();
      }
      assert.deepEqual(posts, []);
    });

    test("the Node SDK's beta socket steers a running response into its successor", async () => {
      // The answer is held by the fake upstream until its gate opens (once the steer is accepted).
      const gate = `node-${kind}-${Date.now()}`;
      const ws = new BetaResponsesWS(clientFor(base, []));
      await new Promise((resolve, reject) => {
        ws.socket.once('open', resolve);
        ws.socket.once('error', reject);
      });
      const events = [];
      try {
        await new Promise((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(JSON.stringify(events.map((e) => e.type)))), 20000);
          let steered = null;
          ws.on('event', (ev) => {
            events.push(ev);
            if (ev.type === 'response.created' && steered === null) {
              steered = ev.response.id;
              ws.send({ type: 'response.steer', previous_response_id: steered, input: 'now in one line' });
            }
            if (ev.type === 'response.steer.accepted') {
              fetch(`${process.env.RELAY_FAKE_UPSTREAM_URL}/gates/${gate}`, { method: 'POST' }).catch(reject);
            }
            if (ev.type === 'response.completed' && ev.response.previous_response_id === steered) {
              clearTimeout(timer);
              resolve();
            }
          });
          ws.send({ type: 'response.create', model: `fake-model?hold=${gate}`, input: 'a long answer' });
        });
      } finally {
        ws.close();
      }
      const accepted = events.find((e) => e.type === 'response.steer.accepted');
      const ended = events.find((e) => e.type === 'response.incomplete');
      assert.equal(accepted.steer.previous_response_id, ended.response.id);
      assert.ok(accepted.steer.id.startsWith('steer_'));
      assert.equal(ended.response.incomplete_details.reason, 'steered');
      assert.ok(accepted.sequence_number < ended.sequence_number);
      const done = events.at(-1);
      assert.equal(done.response.output[0].content[0].text, 'Hello! You said: now in one line');
    });

    test('the Agents SDK websocket transport completes runs, chained and in one session', async () => {
      const posts = [];
      const client = clientFor(base, posts);
      setDefaultOpenAIClient(client);
      const agent = new Agent({ name: 'Assistant', instructions: 'Be brief.', model: 'fake-model' });
      const first = await run(agent, 'Say hello over ws');
      assert.equal(first.finalOutput, 'Hello! You said: Say hello over ws');
      const second = await run(agent, 'Again', { previousResponseId: first.lastResponseId });
      assert.equal(second.finalOutput, 'Hello! You said: Again');

      const streamed = await run(agent, 'Stream please', { stream: true });
      for await (const _ of streamed) {
        // drained
      }
      await streamed.completed;
      assert.equal(streamed.finalOutput, 'Hello! You said: Stream please');

      await withResponsesWebSocketSession(
        async ({ run: inSession }) => {
          const a = await inSession(agent, 'session one');
          const b = await inSession(agent, 'session two', { previousResponseId: a.lastResponseId });
          assert.equal(b.finalOutput, 'Hello! You said: session two');
        },
        { providerOptions: { openAIClient: client } },
      );
      assert.deepEqual(posts, [], 'no model call went over HTTP');
    });
  });
}
