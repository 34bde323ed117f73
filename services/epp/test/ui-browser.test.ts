/**
 * The operators' view in a real browser: Debian's Chromium, headless, driven by playwright-core
 * (never a downloaded browser), against a real EPP fed by a private nats-server. The page must load
 * without a console error (a Content-Security-Policy violation is one), show the three zones and
 * their pods, follow a new metrics event, show a spill, sort the pods, and put a pod named like
 * markup on the page as text. A screenshot is kept in test-artifacts/ (ignored by git).
 * Without Chromium this test fails and says how to install it: it does not skip.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import type { RunningEpp } from '@spillway/epp';
import { EnvoyStream, TestPublisher, completion, envoyRequestMessages, extProcClient, startTestEpp, type PodSpec } from './helpers.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const CHROMIUM = process.env['SPILLWAY_CHROMIUM'] ?? '/usr/bin/chromium';
const SCREENSHOT = join(ROOT, 'test-artifacts', 'ui', 'epp-view.png');
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

const XSS = '<img src=x onerror=alert(1)>';
const PODS: PodSpec[] = [
  { pod: 'a0', zone: 'zone-a', region: 'r1', address: '10.0.1.1:8000', waiting: 5, running: 4, kv: 0.8 },
  { pod: 'a1', zone: 'zone-a', region: 'r1', address: '10.0.1.2:8000', waiting: 6, running: 4, kv: 0.9 },
  { pod: 'b0', zone: 'zone-b', region: 'r1', address: '10.0.2.1:8000', waiting: 0, running: 2, kv: 0.2 },
  { pod: XSS, zone: 'zone-b', region: 'r1', address: '10.0.2.2:8000', waiting: 0, running: 1, kv: 0.1 },
  { pod: 'c0', zone: 'zone-c', region: 'r2', address: '10.0.3.1:8000', waiting: 1, running: 3, kv: 0.3 },
];

let nats: NatsServerHandle;
let publisher: TestPublisher;
let epp: RunningEpp;
let userDataDir: string;
let context: BrowserContext | undefined;
let page: Page;
const problems: string[] = [];
const dialogs: string[] = [];

async function sampleTwice(): Promise<void> {
  for (let i = 0; i < 2; i++) {
    for (const pod of PODS) publisher.metrics(pod);
    await publisher.nc.flush();
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function launchChromium(): Promise<BrowserContext> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `the browser test needs Chromium at ${CHROMIUM}: install Debian's package (apt-get install -y chromium; .ci/run does it) or point SPILLWAY_CHROMIUM at one`,
    );
  }
  userDataDir = mkdtempSync(join(tmpdir(), 'spillway-chromium-'));
  try {
    return await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: { width: 1400, height: 1000 },
      timeout: 60_000,
    });
  } catch (error) {
    throw new Error(`Chromium (${CHROMIUM}) did not start: ${(error as Error).message}`);
  }
}

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  epp = await startTestEpp(nats.url, 'zone-a', ['--region', 'r1']);
  await publisher.pods(PODS);
  await sampleTwice();
  await epp.ready;
  context = await launchChromium();
  page = context.pages()[0] ?? (await context.newPage());
  page.on('console', (message) => {
    if (message.type() === 'error') problems.push(`console ${message.type()}: ${message.text()}`);
  });
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('response', (response) => {
    if (response.status() >= 400) problems.push(`HTTP ${response.status()} for ${response.url()}`);
  });
  page.on('dialog', (dialog) => {
    dialogs.push(dialog.message());
    void dialog.dismiss();
  });
}, 120_000);

afterAll(async () => {
  await context?.close();
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  await epp?.close();
  await publisher?.close();
  await nats?.stop();
});

const figure = (zone: string, key: string) => page.locator(`#zones .card[data-zone="${zone}"] [data-figure="${key}"]`);

describe("the operators' view in Chromium", () => {
  it('loads, shows three zones and their pods, follows events, and shows a spill', async () => {
    await page.goto(`http://127.0.0.1:${epp.uiPort}/`, { waitUntil: 'load' });
    await page.locator('#zones .card').nth(2).waitFor({ timeout: 20_000 });
    expect(await page.locator('#zones .card').count()).toBe(3);
    expect(await page.locator('#zones .card h3 > span').allTextContents()).toEqual(['zone-a', 'zone-b', 'zone-c']);
    expect(await page.locator('#zones .card[data-zone="zone-a"]').getAttribute('class')).toContain('local');
    expect(await figure('zone-a', 'ready').textContent()).toBe('2 / 2');
    expect(await figure('zone-a', 'waiting').textContent()).toBe('11');
    // Each card draws its chart (uPlot: a canvas).
    expect(await page.locator('#zones .card canvas').count()).toBeGreaterThanOrEqual(3);
    await page
      .locator('#pods tbody tr')
      .nth(PODS.length - 1)
      .waitFor();
    expect(await page.locator('#pods tbody tr').count()).toBe(PODS.length);

    // A new metrics event: the zone's card follows within a refresh or two.
    publisher.metrics({ ...(PODS[2] as PodSpec), waiting: 7 });
    await publisher.nc.flush();
    await expect.poll(() => figure('zone-b', 'waiting').textContent(), { timeout: 15_000 }).toBe('7');

    // zone-a is backlogged: requests through this EPP spill to zone-b, and the matrix shows it.
    const client = extProcClient(epp.grpcPort);
    const streams: EnvoyStream[] = [];
    try {
      for (let i = 0; i < 4; i++) {
        await sampleTwice();
        const stream = new EnvoyStream(client);
        stream.send(envoyRequestMessages({ body: completion('llama', `browser ${i}`) }));
        await stream.waitFor(2);
        streams.push(stream);
      }
      const cell = page.locator('#spill tr[data-gateway="zone-a"] td[data-serving="zone-b"]');
      await expect.poll(async () => Number(await cell.textContent()), { timeout: 15_000 }).toBeGreaterThan(0);
      expect(await cell.getAttribute('class')).toBe('spill');
      await expect.poll(() => page.locator('#decisions tbody tr').first().textContent(), { timeout: 15_000 }).toContain('spill');
    } finally {
      for (const stream of streams) stream.close();
      client.close();
    }
  }, 90_000);

  it('renders a pod named like markup as text: no element, no dialog', async () => {
    const row = page.locator('#pods tbody tr').filter({ hasText: XSS });
    await row.first().waitFor();
    expect(await row.first().locator('td').first().textContent()).toBe(XSS);
    await expect.poll(() => page.getByText(XSS, { exact: true }).first().isVisible()).toBe(true);
    expect(await page.locator('main img').count()).toBe(0);
    expect(dialogs).toEqual([]);
  });

  it('sorts the pods by a column when its heading is clicked', async () => {
    await page.locator('#pods th[data-sort="waiting"]').click();
    // Largest first on the first click: a1 (6 waiting).
    await expect.poll(() => page.locator('#pods tbody tr').first().getAttribute('data-pod'), { timeout: 10_000 }).toBe('a1');
    await page.locator('#pods th[data-sort="waiting"]').click();
    await expect.poll(() => page.locator('#pods tbody tr').last().getAttribute('data-pod'), { timeout: 10_000 }).toBe('a1');
  });

  it('kept a screenshot, and saw no console error, failed request or dialog', async () => {
    mkdirSync(dirname(SCREENSHOT), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    expect(existsSync(SCREENSHOT)).toBe(true);
    expect(problems).toEqual([]);
    expect(dialogs).toEqual([]);
  });
});
