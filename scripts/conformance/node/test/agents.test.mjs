// The OpenAI Agents SDK for JavaScript (`@openai/agents`) against the relay, over both upstream
// kinds: an agent run twice with an `OpenAIConversationsSession` remembers the first turn in the
// second (issue 21). The fake model answers `Hello! You said: <last user text>`.
// RELAY_URL_CHAT and RELAY_URL_RESPONSES give the relays' base URLs (http://ADDR).

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { Agent, OpenAIConversationsSession, OpenAIResponsesModel, run, setTracingDisabled } from '@openai/agents';

setTracingDisabled(true);

for (const kind of ['chat', 'responses']) {
  const base = process.env[`RELAY_URL_${kind.toUpperCase()}`];
  describe(`agents sdk (${kind})`, () => {
    test('an OpenAIConversationsSession remembers the first turn', async () => {
      const sent = [];
      const client = new OpenAI({
        baseURL: `${base}/v1`,
        apiKey: 'x',
        maxRetries: 0,
        fetch: async (url, init) => {
          if (init?.body && String(url).endsWith('/responses')) sent.push(JSON.parse(init.body));
          return fetch(url, init);
        },
      });
      const agent = new Agent({
        name: 'rememberer',
        instructions: 'Remember what the user says.',
        model: new OpenAIResponsesModel(client, 'fake-model'),
      });
      const session = new OpenAIConversationsSession({ client });
      const first = await run(agent, 'my name is Ada', { session });
      assert.equal(first.finalOutput, 'Hello! You said: my name is Ada');
      const second = await run(agent, 'what is my name', { session });
      assert.equal(second.finalOutput, 'Hello! You said: what is my name');
      assert.equal(sent.length, 2, JSON.stringify(sent));
      assert.ok(JSON.stringify(sent[1]).includes('my name is Ada'), JSON.stringify(sent[1]));
      const items = JSON.stringify(await session.getItems());
      for (const said of ['my name is Ada', 'what is my name', 'Hello! You said: what is my name']) {
        assert.ok(items.includes(said), items);
      }
    });
  });
}
