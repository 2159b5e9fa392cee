// The console's flows in headless Chromium (run by scripts/browser-test, which starts the mesh).
// Environment: BASE (the gateway's URL), KEYS_BASE and KEY (a gateway with an API key, and the
// key), SHOTS (where screenshots go), CHROMIUM (the browser),
// MESH and BROKER_URL (to start one more agent instance), PLAYWRIGHT_DIR (node_modules).
// Every wait is bounded by WAIT; no sleeps: each step waits for what the page shows.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import assert from "node:assert/strict";
import path from "node:path";

const require = createRequire(path.join(process.env.PLAYWRIGHT_DIR, "package.json"));
const { chromium } = require("playwright-core");

const BASE = process.env.BASE;
const SHOTS = process.env.SHOTS;
const WAIT = 15000;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
const context = await browser.newContext({ viewport: { width: 1100, height: 800 } });
context.setDefaultTimeout(WAIT);
const page = await context.newPage();
const problems = [];
page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
// The key flow's refusals (401 before the key, 403 for the bus view) are expected there.
let refusalsExpected = false;
page.on("console", (m) => {
  if (m.type() !== "error") return;
  if (refusalsExpected && /status of 40[13]/.test(m.text())) return;
  problems.push(`console error: ${m.text()}`);
});

const flows = [];
async function flow(name, body) {
  const started = Date.now();
  await body();
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: name === "phone" });
  flows.push(`${name}: ${Date.now() - started} ms`);
}

function agent(name) {
  return page.locator(`li.agent[data-agent="${name}"]`);
}

// 1. The agents, live: GET / leads to the console; the example agents are online; one more
//    instance of echo appears and goes away without a reload.
await flow("agents", async () => {
  const response = await page.goto(`${BASE}/`);
  assert.ok(response.url().endsWith("/ui/"), `GET / leads to the console: ${response.url()}`);
  for (const name of ["echo", "writer", "flight-booker", "files", "orchestrator"]) {
    await agent(name).and(page.locator(".online")).waitFor();
  }
  await page.locator("#feed-status.live").waitFor();
  await agent("echo").locator(".badge", { hasText: "1 instance" }).waitFor();
  const extra = spawn(process.env.MESH, ["agent", "echo", "--broker-url", process.env.BROKER_URL], {
    stdio: "ignore",
  });
  try {
    await agent("echo").locator(".badge", { hasText: "2 instances" }).waitFor();
  } finally {
    extra.kill("SIGINT");
  }
  await agent("echo").locator(".badge", { hasText: "1 instance" }).waitFor();
  // The card's details: modes and bindings.
  await agent("writer").locator("details > summary").click();
  await agent("writer").locator(".card", { hasText: "HTTP+JSON" }).waitFor();
});

// 2. Chat with writer: the artifact streams in chunk by chunk. A MutationObserver records the
//    artifact's text each time the page changes it; a partial text must have been shown.
await flow("chat-writer", async () => {
  await page.locator("#nav-chat").click();
  await page.selectOption("#chat-agent", "writer");
  await page.locator("#chat-task", { hasText: "New conversation with writer" }).waitFor();
  await page.evaluate(() => {
    window.__seen = [];
    new MutationObserver(() => {
      const body = document.querySelector(".entry.artifact .artifact-body");
      if (body) window.__seen.push(body.textContent.length);
    }).observe(document.getElementById("transcript"), { childList: true, subtree: true, characterData: true });
  });
  const chunks = 300;
  await page.fill("#chat-text", `rivers chunks: ${chunks}`);
  await page.getByRole("button", { name: "Send" }).click();
  await page.locator("#chat-task", { hasText: "completed" }).waitFor();
  const text = await page.locator(".entry.artifact .artifact-body").textContent();
  assert.ok(text.startsWith("[0] On rivers: paragraph 1 of the draft."), text.slice(0, 80));
  assert.ok(text.includes(`[${chunks - 1}] On rivers: paragraph ${chunks} of the draft.`), "the last chunk is shown");
  assert.equal(text.match(/On rivers/g).length, chunks, "every chunk once");
  const seen = await page.evaluate(() => window.__seen);
  const partial = seen.filter((n) => n > 0 && n < text.length);
  assert.ok(partial.length > 0, `a partial artifact was shown before the end (${seen.length} changes seen)`);
  await page.locator(".entry.status", { hasText: "wrote 300 paragraphs" }).waitFor();
});

// 2b. Cancel: a long piece is canceled while it streams.
await flow("chat-cancel", async () => {
  await page.getByRole("button", { name: "New conversation" }).click();
  await page.fill("#chat-text", "oceans chunks: 100000");
  await page.getByRole("button", { name: "Send" }).click();
  await page.locator(".entry.artifact").waitFor();
  await page.getByRole("button", { name: "Cancel task" }).click();
  await page.locator("#chat-task", { hasText: "canceled" }).waitFor();
  await page.locator(".entry.status", { hasText: "canceled" }).waitFor();
  assert.equal(await page.locator(".entry.status", { hasText: "canceled" }).count(), 1, "said once");
  assert.equal(await page.locator(".entry.artifact.streaming").count(), 0, "no artifact shown as still streaming");
  const text = await page.locator(".entry.artifact .artifact-body").textContent();
  assert.ok(!text.includes("paragraph 100000 of"), "the piece stopped before its end");
});

// 3. flight-booker: its question is answered in place, in the same task.
let bookedTask = "";
await flow("chat-flight-booker", async () => {
  await page.selectOption("#chat-agent", "flight-booker");
  await page.locator("#chat-task", { hasText: "New conversation with flight-booker" }).waitFor();
  await page.fill("#chat-text", "I need a flight");
  await page.getByRole("button", { name: "Send" }).click();
  await page.locator("#chat-task", { hasText: "input-required" }).waitFor();
  await page.locator(".entry", { hasText: "Where would you like to fly" }).waitFor();
  const asked = await page.locator("#chat-task a").getAttribute("title");
  await page.fill("#chat-text", "JFK to LHR on 2026-12-24");
  await page.getByRole("button", { name: "Answer" }).click();
  await page.locator("#chat-task", { hasText: "completed" }).waitFor();
  bookedTask = await page.locator("#chat-task a").getAttribute("title");
  assert.equal(bookedTask, asked, "the answer went to the same task");
  await page.locator(".entry.artifact pre.data", { hasText: "confirmationId" }).waitFor();
});

// 3b. Files in and out: a PNG sent to files comes back shown as an image, with a download.
await flow("chat-files", async () => {
  await page.selectOption("#chat-agent", "files");
  await page.locator("#chat-task", { hasText: "New conversation with files" }).waitFor();
  // A 1×1 PNG.
  const png = Buffer.from(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
    "base64",
  );
  await page.setInputFiles("#chat-file", { name: "dot.png", mimeType: "image/png", buffer: png });
  await page.getByRole("button", { name: "Send" }).click();
  await page.locator("#chat-task", { hasText: "completed" }).waitFor();
  await page.locator('.entry.artifact img[alt="copy-of-dot.png"]').waitFor();
  const size = await page.locator('.entry.artifact img[alt="copy-of-dot.png"]').evaluate((img) => img.naturalWidth);
  assert.equal(size, 1, "the returned image decodes");
  await page.locator('.entry.artifact a[download="copy-of-dot.png"]').waitFor();
  await page.locator(".entry.artifact", { hasText: "dot.png\timage/png" }).waitFor();
});

// 4. The task's timeline (flight-booker's): every event with its time and raw JSON.
await flow("task-timeline", async () => {
  await page.goto(`${BASE}/ui/#/task/flight-booker/${encodeURIComponent(bookedTask)}`);
  await page.locator("#view-task").waitFor();
  await page.locator(".timeline .event .summary", { hasText: "input-required" }).first().waitFor();
  await page.locator(".timeline .event .summary", { hasText: "completed" }).last().waitFor();
  await page.locator(".timeline .event .summary", { hasText: "artifact" }).first().waitFor();
  const seqs = await page.locator(".timeline .event").evaluateAll((items) => items.map((i) => Number(i.dataset.seq)));
  assert.deepEqual(seqs, seqs.map((_, i) => i + 1), `events 1, 2, … in order: ${seqs}`);
  await page.locator(".timeline .event details summary").first().click();
  await page.locator(".timeline .event details pre").first().waitFor();
  await page.locator("#task-summary", { hasText: bookedTask }).waitFor();
});

// 5. The tasks list, filtered by agent.
await flow("tasks", async () => {
  await page.locator("#nav-tasks").click();
  await page.selectOption("#filter-agent", "flight-booker");
  await page.getByRole("button", { name: "Filter" }).click();
  await page.locator("#tasks-caption", { hasText: "1 task" }).waitFor();
  await page.locator(`#tasks-body tr[data-task="${bookedTask}"]`).waitFor();
});

// 6. The bus traffic, live and pausable.
await flow("bus", async () => {
  await page.locator("#nav-bus").click();
  await page.locator("#bus-status", { hasText: "watching" }).waitFor();
  const echo = (text) =>
    page.evaluate(async (text) => {
      const response = await fetch("/agents/echo/message:send", {
        method: "POST",
        headers: { "Content-Type": "application/a2a+json" },
        body: JSON.stringify({ message: { messageId: crypto.randomUUID(), role: "ROLE_USER", parts: [{ text }] } }),
      });
      return response.status;
    }, text);
  assert.equal(await echo("over the bus"), 200);
  await page.locator(".bus-line", { hasText: "echo" }).first().waitFor();
  await page.getByRole("button", { name: "Pause" }).click();
  const shown = await page.locator(".bus-line").count();
  assert.equal(await echo("while paused"), 200);
  await page.locator("#bus-status", { hasText: /paused · \d+ messages not shown/ }).waitFor();
  assert.equal(await page.locator(".bus-line").count(), shown, "nothing is added while paused");
  await page.getByRole("button", { name: "Resume" }).click();
  await page.locator("#bus-status", { hasText: "watching" }).waitFor();
});

// 7. Phone width: the agents, one column.
await flow("phone", async () => {
  await page.setViewportSize({ width: 390, height: 844 });
  await page.locator("#nav-agents").click();
  await agent("writer").waitFor();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no horizontal scrolling at phone width (${overflow} px too wide)`);
});

// 8. With API keys: the page asks for a key, then works with it; the bus view is not served.
await flow("api-key", async () => {
  await page.setViewportSize({ width: 1100, height: 800 });
  refusalsExpected = true;
  await page.goto(`${process.env.KEYS_BASE}/`);
  await page.locator("#key-dialog[open]").waitFor();
  await page.getByLabel("API key or bearer token").fill(process.env.KEY);
  await page.getByRole("button", { name: "Use this key" }).click();
  await page.locator("#feed-status.live").waitFor();
  await agent("echo").and(page.locator(".online")).waitFor();
  await page.locator("#nav-chat").click();
  await page.selectOption("#chat-agent", "echo");
  await page.fill("#chat-text", "hello with a key");
  await page.getByRole("button", { name: "Send" }).click();
  await page.locator("#chat-task", { hasText: "completed" }).waitFor();
  await page.locator(".entry.artifact", { hasText: "hello with a key" }).waitFor();
  await page.locator("#nav-bus").click();
  await page.locator("#bus-status", { hasText: "API keys" }).waitFor();
  await page.locator("#nav-chat").click();
});

await browser.close();
assert.deepEqual(problems, [], "no errors in the page");
console.log(flows.join("\n"));
