// Drives the official RocketMQ 5 Node.js client's SimpleConsumer against a
// StrataMQ gRPC endpoint, for the Go tests (proxy/consumer_node_test.go,
// cmd/stratamq/grpc_consume_e2e_test.go).
//
// Usage: node simple_consumer.js '<plan JSON>'
//
// plan: {
//   endpoints: "127.0.0.1:8081", group: "G", topic: "T", filter?: "*",
//   accessKey?, secretKey?,           // sign requests (ACL)
//   awaitMs?: 5000,                     // long polling per receive
//   timeoutMs?: 60000,
//   mode: "drain" | "lifecycle",
//   // drain: receive (invisibleMs) and ack until expect distinct messages
//   expect?: n, invisibleMs?: 20000, noAck?: false,
//   // lifecycle: one message, never acked: received (invisibleMs), its
//   // invisibility changed to extendMs (the old handle is then refused),
//   // received again after the new deadline and after each later one,
//   // until a receive within emptyMs finds nothing (dead-lettered)
//   extendMs?: 4000, emptyMs?: 8000,
// }
//
// Prints one JSON object per line: {event: "received", messageId, bodyB64,
// attempt, tag, keys, group, props, at}, {event: "extended", at},
// {event: "staleAckRefused", code}, {event: "staleAckAccepted"},
// {event: "empty", at}, {event: "error", message, code?}, last {event: "done"}.
'use strict';

const { SimpleConsumer } = require('rocketmq-client-nodejs');

const plan = JSON.parse(process.argv[2]);
const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const logger = {
  info() {}, debug() {}, warn(...a) { process.stderr.write('WARN ' + a.map(String).join(' ') + '\n'); },
  error(...a) { process.stderr.write('ERROR ' + a.map(String).join(' ') + '\n'); }, close() {},
};

function report(m) {
  const props = {};
  for (const [k, v] of m.properties) props[k] = v;
  out({ event: 'received', messageId: m.messageId, bodyB64: Buffer.from(m.body).toString('base64'),
    attempt: m.deliveryAttempt, tag: m.tag, keys: m.keys, group: m.messageGroup, props, at: Date.now() });
}

async function drain(consumer, deadline) {
  const seen = new Set();
  while (seen.size < plan.expect && Date.now() < deadline) {
    const msgs = await consumer.receive(32, plan.invisibleMs || 20000);
    for (const m of msgs) {
      report(m);
      seen.add(m.messageId);
      if (!plan.noAck) await consumer.ack(m);
    }
  }
}

async function lifecycle(consumer, deadline) {
  const inv = plan.invisibleMs || 2000;
  let msgs = [];
  while (msgs.length === 0 && Date.now() < deadline) msgs = await consumer.receive(1, inv);
  if (msgs.length === 0) throw new Error('nothing received');
  const m = msgs[0];
  report(m);
  const stale = m.receiptHandle;
  await consumer.changeInvisibleDuration(m, plan.extendMs || 4000);
  out({ event: 'extended', at: Date.now() });
  try {
    await consumer.ack(Object.assign(Object.create(Object.getPrototypeOf(m)), m, { receiptHandle: stale }));
    out({ event: 'staleAckAccepted' });
  } catch (e) {
    out({ event: 'staleAckRefused', code: e.code, message: String(e.message || e) });
  }
  // Never acked: it comes back after each deadline, then stops.
  for (;;) {
    if (Date.now() > deadline) throw new Error('timed out');
    const start = Date.now();
    let got = [];
    while (got.length === 0 && Date.now() - start < (plan.emptyMs || 8000)) got = await consumer.receive(1, inv);
    if (got.length === 0) {
      out({ event: 'empty', at: Date.now() });
      return;
    }
    report(got[0]);
  }
}

async function main() {
  const deadline = Date.now() + (plan.timeoutMs || 60000);
  const opts = {
    endpoints: plan.endpoints, namespace: '', consumerGroup: plan.group, logger, requestTimeout: 10000,
    awaitDuration: plan.awaitMs || 5000,
    subscriptions: new Map([[ plan.topic, plan.filter || '*' ]]),
  };
  if (plan.accessKey) {
    opts.sessionCredentials = { accessKey: plan.accessKey, accessSecret: plan.secretKey };
  }
  const consumer = new SimpleConsumer(opts);
  await consumer.startup();
  try {
    if (plan.mode === 'lifecycle') await lifecycle(consumer, deadline);
    else await drain(consumer, deadline);
  } finally {
    await consumer.shutdown();
  }
}

// Exit once stdout is flushed (a pipe's writes are asynchronous).
const finish = () => process.stdout.write('', () => process.exit(0));
main().then(() => { out({ event: 'done' }); finish(); },
  e => { out({ event: 'error', message: String(e && e.stack || e), code: e && e.code }); out({ event: 'done' }); finish(); });
