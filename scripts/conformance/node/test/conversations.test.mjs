// Conversations, compaction and token counts (issue 21) through the official OpenAI Node SDK,
// over both upstream kinds: the Conversations API calls, responses on a conversation seeing the
// earlier turns, responses.compact and responses.inputTokens.count.
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

    test('responses.compact and a later request carrying the compaction', async () => {
      const compacted = await client.responses.compact({
        model: MODEL,
        input: [
          { role: 'user', content: 'the details' },
          { role: 'assistant', content: 'noted' },
        ],
      });
      assert.equal(compacted.object, 'response.compaction');
      assert.deepEqual(compacted.output.map((i) => i.type), ['message', 'compaction']);
      const item = compacted.output[1];
      assert.match(item.encrypted_content, /^rr1\./);
      const next = await client.responses.create({ model: MODEL, input: [item, { role: 'user', content: 'go on' }] });
      assert.equal(next.output_text, 'Hello! You said: go on');
    });

    test('responses.inputTokens.count is the run\'s own prompt tokens', async () => {
      const params = { model: MODEL, input: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'c' }] };
      const count = await client.responses.inputTokens.count(params);
      assert.equal(count.object, 'response.input_tokens');
      const run = await client.responses.create(params);
      assert.equal(count.input_tokens, run.usage.input_tokens);
    });
  });
}
