// Drives the official RocketMQ 5 Node.js client's Producer against a
// StrataMQ gRPC endpoint, for the Go tests (cmd/stratamq/grpc_e2e_test.go).
//
// Usage: node producer.js '<plan JSON>'
//        node producer.js '"<path of a file holding the plan JSON>"'
//        (a plan too large for one argument: Linux caps one at 128 KiB)
//
// plan: {
//   endpoints: "127.0.0.1:8081", topic: "T",
//   accessKey?, secretKey?,           // sign requests (ACL)
//   checkResolution?: "COMMIT"|"ROLLBACK", // the transaction checker's answer
//   waitChecks?: n,                   // wait until the checker ran n times
//   timeoutMs?: 60000,
//   messages: [{ kind: "normal"|"fifo"|"delay"|"tx-commit"|"tx-rollback"|"tx-open",
//                body (utf8) | bodyB64, tag?, keys?, props?: {k: v}, group?, delayMs? }]
//   recall?: true                     // recall each delay message right after sending it
//   hold?: true                       // then print {event: "ready", clientId} and keep the
//                                     // session open until stdin closes
// }
//
// Prints one JSON object per line: {event: "sent", i, messageId, offset,
// transactionId, recallHandle}, {event: "recalled", i, messageId},
// {event: "checked", messageId, body, resolution}, {event: "error", i?,
// message, code?}, and last {event: "done"}.
'use strict';

const { Producer } = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const fs = require('node:fs');

const arg = JSON.parse(process.argv[2]);
const plan = typeof arg === 'string' ? JSON.parse(fs.readFileSync(arg, 'utf8')) : arg;
const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const logger = {
  info() {}, debug() {}, warn(...a) { process.stderr.write('WARN ' + a.map(String).join(' ') + '\n'); },
  error(...a) { process.stderr.write('ERROR ' + a.map(String).join(' ') + '\n'); }, close() {},
};

let checks = 0;
let checkEnds = 0;
let onCheck = () => {};
const checker = {
  async check(view) {
    checks++;
    const resolution = plan.checkResolution === 'ROLLBACK' ? TransactionResolution.ROLLBACK : TransactionResolution.COMMIT;
    out({ event: 'checked', messageId: view.messageId, body: view.body.toString('utf8'),
      resolution: plan.checkResolution || 'COMMIT' });
    return resolution;
  },
};

function bodyOf(m) {
  return m.bodyB64 !== undefined ? Buffer.from(m.bodyB64, 'base64') : Buffer.from(m.body || '', 'utf8');
}

async function main() {
  const deadline = Date.now() + (plan.timeoutMs || 60000);
  const opts = { endpoints: plan.endpoints, namespace: '', topics: [ plan.topic ], logger, checker, requestTimeout: 10000 };
  if (plan.accessKey) {
    opts.sessionCredentials = { accessKey: plan.accessKey, accessSecret: plan.secretKey };
  }
  const producer = new Producer(opts);
  // Count the EndTransaction calls the checker's answers make (source
  // SERVER_CHECK), so the script ends only after they are answered.
  const endTransaction = producer.endTransaction.bind(producer);
  producer.endTransaction = async (...args) => {
    try {
      return await endTransaction(...args);
    } finally {
      if (args[5] === 2) { checkEnds++; setImmediate(onCheck); }
    }
  };
  await producer.startup();
  try {
    for (let i = 0; i < plan.messages.length; i++) {
      const m = plan.messages[i];
      const msg = { topic: plan.topic, body: bodyOf(m), tag: m.tag, keys: m.keys };
      if (m.props) msg.properties = new Map(Object.entries(m.props));
      if (m.kind === 'fifo') msg.messageGroup = m.group;
      if (m.kind === 'delay') msg.deliveryTimestamp = new Date(Date.now() + m.delayMs);
      try {
        if (m.kind && m.kind.startsWith('tx-')) {
          const tx = producer.beginTransaction();
          const r = await producer.send(msg, tx);
          out({ event: 'sent', i, messageId: r.messageId, offset: r.offset, transactionId: r.transactionId });
          if (m.kind === 'tx-commit') await tx.commit();
          if (m.kind === 'tx-rollback') await tx.rollback();
        } else {
          const r = await producer.send(msg);
          out({ event: 'sent', i, messageId: r.messageId, offset: r.offset, transactionId: r.transactionId,
            recallHandle: r.recallHandle });
          if (m.kind === 'delay' && plan.recall) {
            try {
              const rr = await producer.recallMessage(plan.topic, r.recallHandle);
              out({ event: 'recalled', i, messageId: rr.messageId });
            } catch (e) {
              out({ event: 'error', i, op: 'recall', message: String(e && e.message || e), code: e && e.code });
            }
          }
        }
      } catch (e) {
        out({ event: 'error', i, message: String(e && e.message || e), code: e && e.code });
      }
    }
    const want = plan.waitChecks || 0;
    while (checkEnds < want && Date.now() < deadline) {
      await new Promise(resolve => {
        onCheck = resolve;
        setTimeout(resolve, 200);
      });
    }
    if (checkEnds < want) out({ event: 'error', message: `only ${checkEnds} of ${want} transaction checks were answered (${checks} asked)` });
    if (plan.hold) {
      // Keep the session (Telemetry stream) open until stdin closes, so
      // the test can send commands to this client.
      out({ event: 'ready', clientId: producer.clientId });
      await new Promise(resolve => {
        process.stdin.on('end', resolve);
        process.stdin.on('close', resolve);
        process.stdin.resume();
        setTimeout(resolve, Math.max(deadline - Date.now(), 0));
      });
    }
  } finally {
    await producer.shutdown();
  }
  out({ event: 'done' });
}

main().then(() => process.exit(0), e => {
  out({ event: 'error', message: String(e && e.stack || e) });
  process.exit(1);
});
