// Drives the web console in a real headless Chromium (playwright-core with
// Debian's chromium), as an operator would: sign in, create a topic, send a
// test message, find it by key, reset a group by time and see its lag
// change, resend a dead-lettered message, and read the charts. Run by
// cmd/stratamq's TestConsolePlaywright, which sets up the broker and checks
// the outcome; this script prints one JSON object on stdout.
//
// Usage: node console.js '<json args>'
//   args: base, user, secret, chromium, topic, newTopic, key, group,
//         dlqGroup, resetTo (RFC 3339), screenshots (a dir, or "")
'use strict';
const { chromium } = require('playwright-core');

const args = JSON.parse(process.argv[2]);
const out = { steps: [] };

function step(name, detail) {
  out.steps.push({ name, ...(detail || {}) });
}

async function shot(page, name) {
  if (args.screenshots) {
    await page.screenshot({ path: `${args.screenshots}/${name}.png`, fullPage: true });
  }
}

// act runs an action: its form (filled from fields), the review page, the
// confirmation; it returns the result page's text.
async function act(page, name, fields) {
  await page.goto(`${args.base}/action?do=${name}`);
  for (const [k, v] of Object.entries(fields)) {
    await page.fill(`#f-${k}`, String(v));
  }
  await Promise.all([page.waitForNavigation(), page.click('#action-review')]);
  const plan = await page.textContent('#action-plan');
  await Promise.all([page.waitForNavigation(), page.click('#action-confirm')]);
  const err = await page.$('#action-error');
  if (err) {
    throw new Error(`${name}: ${await err.textContent()}`);
  }
  return { plan, result: await page.textContent('#action-result') };
}

// lagOf reads the lag of group on topic from the groups page (sum over
// the queues).
async function lagOf(page, group, topic) {
  await page.goto(`${args.base}/groups?group=${encodeURIComponent(group)}`);
  return page.evaluate(([g, t]) => {
    let sum = 0, rows = 0;
    for (const tr of document.querySelectorAll('tr.q-lag')) {
      if (tr.dataset.g === g && tr.dataset.topic === t) {
        sum += Number(tr.dataset.lag);
        rows++;
      }
    }
    return rows ? sum : -1;
  }, [group, topic]);
}

(async () => {
  const browser = await chromium.launch({ executablePath: args.chromium, args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    // Sign in.
    await page.goto(`${args.base}/login`);
    await shot(page, 'login');
    await page.fill('#login-user', args.user);
    await page.fill('#login-secret', args.secret);
    await Promise.all([page.waitForNavigation(), page.click('#login-submit')]);
    if (!(await page.$('#hdr-user'))) {
      throw new Error(`not signed in: ${page.url()}: ${(await page.textContent('body')).slice(0, 1500)}`);
    }
    step('signed in', { user: await page.textContent('#hdr-user') });
    await shot(page, 'overview');

    // Create a topic.
    step('create topic', await act(page, 'createTopic', { topic: args.newTopic, read: 2, write: 2, perm: 6 }));
    await shot(page, 'action-done');

    // Send a test message, find it by key.
    step('send', await act(page, 'sendMessage', { topic: args.newTopic, key: args.key, tag: 'console', body: 'hello from the console test' }));
    await page.goto(`${args.base}/messages?topic=${encodeURIComponent(args.newTopic)}&key=${encodeURIComponent(args.key)}`);
    step('found by key', { text: await page.textContent('main') });
    await shot(page, 'messages-by-key');

    // Reset a group by time: its lag changes.
    const before = await lagOf(page, args.group, args.topic);
    step('reset', await act(page, 'resetOffset', { group: args.group, topic: args.topic, time: args.resetTo }));
    const after = await lagOf(page, args.group, args.topic);
    step('lag', { before, after });
    await shot(page, 'groups');

    // Resend a dead-lettered message.
    step('resend', await act(page, 'resendDLQ', { group: args.dlqGroup, msgId: '' }));

    // The charts, once the history holds a sample taken after the last
    // action (its points' times are the starts of their steps), and
    // /metrics read right after them in the same session.
    const acted = Date.now();
    for (let i = 0; ; i++) {
      await page.goto(`${args.base}/charts?window=15m`);
      const last = await page.evaluate(() => {
        const p = document.querySelector('figure[data-chart="messages-in"] path[data-points]');
        const pts = p ? p.dataset.points.trim().split(/\s+/) : [];
        return pts.length ? Number(pts[pts.length - 1].split(':')[0]) : 0;
      });
      if (last >= acted + 1000) break;
      if (i > 100) throw new Error(`no history sample after the last action (last point ${last}, acted ${acted})`);
      await page.waitForTimeout(200);
    }
    out.charts = await page.evaluate(() => [...document.querySelectorAll('figure[data-chart]')].map(f => ({
      chart: f.dataset.chart,
      series: [...f.querySelectorAll('path[data-points]')].map(p => ({ label: p.dataset.label, points: p.dataset.points })),
    })));
    out.metrics = await (await page.request.get(`${args.base}/metrics`)).text();
    await shot(page, 'charts');
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out));
})().catch(e => {
  process.stdout.write(JSON.stringify({ ...out, error: String(e && e.stack || e) }));
  process.exit(1);
});
