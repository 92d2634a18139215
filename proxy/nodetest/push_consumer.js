// Drives the official RocketMQ 5 Node.js client's PushConsumer against a
// StrataMQ gRPC endpoint, for the Go tests (proxy/consumer_node_test.go).
//
// Usage: node push_consumer.js '<plan JSON>'
//
// plan: { endpoints, group, topic, filter?: "*", expect: n (distinct
//   message ids), timeoutMs?: 60000, failFirst?: n (the listener fails the
//   first n deliveries it sees, so they are consumed again) }
//
// Prints {event: "consumed", messageId, body, group, attempt, at} per
// listener call (in call order), {event: "error", message}, last
// {event: "done"}.
'use strict';

const { PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');

const plan = JSON.parse(process.argv[2]);
const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const logger = {
  info() {}, debug() {}, warn(...a) { process.stderr.write('WARN ' + a.map(String).join(' ') + '\n'); },
  error(...a) { process.stderr.write('ERROR ' + a.map(String).join(' ') + '\n'); }, close() {},
};

async function main() {
  const seen = new Set();
  let fails = plan.failFirst || 0;
  let finish;
  const finished = new Promise(r => { finish = r; });
  const consumer = new PushConsumer({
    endpoints: plan.endpoints, namespace: '', consumerGroup: plan.group, logger, requestTimeout: 10000,
    subscriptions: new Map([[ plan.topic, plan.filter || '*' ]]),
    messageListener: {
      async consume(m) {
        out({ event: 'consumed', messageId: m.messageId, body: Buffer.from(m.body).toString('utf8'),
          group: m.messageGroup, attempt: m.deliveryAttempt, at: Date.now() });
        if (fails > 0) { fails--; return ConsumeResult.FAILURE; }
        seen.add(m.messageId);
        if (seen.size >= plan.expect) setImmediate(finish);
        return ConsumeResult.SUCCESS;
      },
    },
  });
  await consumer.startup();
  const timer = setTimeout(() => finish('timeout'), plan.timeoutMs || 60000);
  const why = await finished;
  clearTimeout(timer);
  // Let the last acks go out before the shutdown.
  await new Promise(r => setTimeout(r, 500));
  await consumer.shutdown();
  if (why === 'timeout') throw new Error(`timed out with ${seen.size} of ${plan.expect} consumed`);
}

// Exit once stdout is flushed (a pipe's writes are asynchronous).
const finish = () => process.stdout.write('', () => process.exit(0));
main().then(() => { out({ event: 'done' }); finish(); },
  e => { out({ event: 'error', message: String(e && e.stack || e) }); out({ event: 'done' }); finish(); });
