// Conversations (issue 21) through the official OpenAI Node SDK, over both upstream kinds: the
// Conversations API calls, and responses on a conversation seeing the earlier turns.
// RELAY_URL_CHAT and RELAY_URL_RESPONSES give the relays' base URLs (http://ADDR).

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const MODEL = 'fake-model';

for (const kind of ['chat', 'responses']) {
  const base = process.env[`RELAY_URL_${kind.toUpperCase()}`];
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'x', maxRetries: 0 });

  describe(`conversations (${kind})`, () => {
    test('the Conversations API keeps items and metadata', async () => {
      const conv = await client.conversations.create({
        metadata: { topic: 'node' },
        items: [{ type: 'message', role: 'user', content: 'from node' }],
      });
      assert.match(conv.id, /^conv_/);
      assert.deepEqual(conv.metadata, { topic: 'node' });
      assert.equal((await client.conversations.retrieve(conv.id)).id, conv.id);
      const updated = await client.conversations.update(conv.id, { metadata: { topic: 'changed' } });
      assert.deepEqual(updated.metadata, { topic: 'changed' });
      const added = await client.conversations.items.create(conv.id, {
        items: [{ type: 'message', role: 'user', content: 'more' }],
      });
      const newId = added.data[0].id;
      const texts = [];
      for await (const item of client.conversations.items.list(conv.id, { order: 'asc' })) {
        texts.push(item.content[0].text);
      }
      assert.deepEqual(texts, ['from node', 'more']);
      const item = await client.conversations.items.retrieve(newId, { conversation_id: conv.id });
      assert.equal(item.content[0].text, 'more');
      await client.conversations.items.delete(newId, { conversation_id: conv.id });
      const deleted = await client.conversations.delete(conv.id);
      assert.equal(deleted.deleted, true);
      await assert.rejects(client.conversations.retrieve(conv.id), OpenAI.NotFoundError);
    });

    test('responses on a conversation see the earlier turns', async () => {
      const conv = await client.conversations.create();
      const first = await client.responses.create({ model: MODEL, input: 'one', conversation: conv.id });
      assert.equal(first.conversation.id, conv.id);
      const stream = client.responses.stream({ model: MODEL, input: 'two', conversation: { id: conv.id } });
      for await (const _ of stream) {
        // every event through the SDK's accumulator
      }
      const second = await stream.finalResponse();
      assert.equal(second.output_text, 'Hello! You said: two');
      assert.ok(second.usage.input_tokens > first.usage.input_tokens, JSON.stringify([first.usage, second.usage]));
      const texts = [];
      for await (const item of client.conversations.items.list(conv.id, { order: 'asc' })) {
        texts.push(item.content[0].text);
      }
      assert.deepEqual(texts, ['one', 'Hello! You said: one', 'two', 'Hello! You said: two']);
    });
  });
}
