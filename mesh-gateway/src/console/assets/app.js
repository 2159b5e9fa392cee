// The mesh console: agents live, chat with any agent, tasks and their timelines.
// Talks to the gateway only through its public HTTP endpoints: the HTTP+JSON binding of each
// agent (/agents/{name}/message:stream, /tasks/{id}, :cancel), the cards, GET /ui/api/… feeds.
// Every stream is read with fetch (not EventSource) so that an API key can ride along.

const $ = (id) => document.getElementById(id);
const A2A = "application/a2a+json";
const MAX_TRANSCRIPT = 500; // entries kept in the chat transcript
const MAX_FILE_BYTES = 2 * 1024 * 1024; // the largest file attached (base64 must fit the body limit)

// ---- API key --------------------------------------------------------------------------

let apiKey = sessionStorage.getItem("mesh-console-key") || "";
let keyWaiters = [];

function headers(extra = {}) {
  const h = { ...extra };
  if (apiKey) h["Authorization"] = `Bearer ${apiKey}`;
  return h;
}

/** Asks for a key (once for every caller waiting) and resolves when one is given. */
function askKey(reason) {
  $("key-button").hidden = false;
  $("key-reason").textContent = reason || "";
  const dialog = $("key-dialog");
  if (!dialog.open) dialog.showModal();
  return new Promise((resolve) => keyWaiters.push(resolve));
}

$("key-form").addEventListener("submit", () => {
  apiKey = $("key-input").value.trim();
  sessionStorage.setItem("mesh-console-key", apiKey);
  $("key-input").value = "";
  const waiters = keyWaiters;
  keyWaiters = [];
  waiters.forEach((w) => w());
});
$("key-forget").addEventListener("click", () => {
  apiKey = "";
  sessionStorage.removeItem("mesh-console-key");
  $("key-input").value = "";
});
$("key-button").addEventListener("click", () => askKey("Change the key this page sends."));

/** fetch with the key; on 401 asks for a key and tries again. */
async function api(path, init = {}) {
  for (;;) {
    const response = await fetch(path, { ...init, headers: headers(init.headers) });
    if (response.status !== 401) return response;
    const body = await response.text();
    await askKey(apiKey ? "The key was refused." : refusal(body));
  }
}

function refusal(body) {
  try {
    const parsed = JSON.parse(body);
    return parsed.message || parsed.error?.message || parsed.error || "";
  } catch {
    return "";
  }
}

async function json(path, init) {
  const response = await api(path, init);
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = { error: text };
  }
  if (!response.ok) {
    const message = body?.message || body?.error?.message || body?.error || response.statusText;
    throw new Error(`${response.status}: ${typeof message === "string" ? message : JSON.stringify(message)}`);
  }
  return body;
}

/** Reads a server-sent event stream from a fetch response; calls onEvent(name, data). */
async function readSse(response, onEvent, signal) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
        let name = "message";
        const data = [];
        for (const line of block.split(/\r?\n/)) {
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") name = val;
          else if (field === "data") data.push(val);
        }
        if (data.length) onEvent(name, data.join("\n"));
      }
      if (buffer.length > 8 * 1024 * 1024) throw new Error("an event larger than 8 MiB");
    }
  } finally {
    if (signal?.aborted) reader.cancel().catch(() => {});
  }
}

// ---- Small DOM helpers ------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function shortId(id) {
  return id && id.length > 12 ? `${id.slice(0, 8)}…` : id || "";
}

function stateName(state) {
  return String(state || "").replace(/^TASK_STATE_/, "").toLowerCase().replace(/_/g, "-");
}

const TERMINAL = new Set(["completed", "failed", "canceled", "rejected"]);

// ---- Views --------------------------------------------------------------------------------

function route() {
  const hash = location.hash || "#/agents";
  const [, view, a, b] = hash.split("/").map(decodeURIComponent);
  for (const name of ["agents", "chat", "tasks", "task", "bus"]) {
    $(`view-${name}`).hidden = name !== view;
  }
  if (view === "bus") watchBus();
  else stopBus();
  for (const name of ["agents", "chat", "tasks", "bus"]) {
    const link = $(`nav-${name}`);
    if (name === view || (view === "task" && name === "tasks")) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (view === "chat") {
    if (a && a !== chat.agent) selectChatAgent(a);
    $("chat-text").focus();
  } else if (view === "tasks") {
    loadTasks(tasksView.token);
  } else if (view === "task" && a && b) {
    openTask(a, b);
  } else if (!["agents", "chat", "tasks", "task", "bus"].includes(view)) {
    $("view-agents").hidden = false;
  }
}
window.addEventListener("hashchange", route);

// ---- Agents, live ---------------------------------------------------------------------

let agents = [];

function renderAgents() {
  const list = $("agents");
  const open = new Set([...list.querySelectorAll("details[open]")].map((d) => d.dataset.agent));
  list.replaceChildren(
    ...agents.map((agent) => {
      const details = el("details", { "data-agent": agent.name, ontoggle: (e) => showCard(e.target, agent.name) });
      if (open.has(agent.name)) {
        details.open = true;
      }
      details.append(el("summary", { text: "Card: modes, skills, bindings" }));
      return el(
        "li",
        { class: `agent ${agent.online ? "online" : "offline"}`, "data-agent": agent.name },
        el(
          "div",
          { class: "agent-head" },
          el("strong", { class: "agent-name", text: agent.name }),
          el("span", {
            class: "badge",
            text: agent.online ? `online · ${agent.instances} instance${agent.instances === 1 ? "" : "s"}` : "offline",
          }),
          el("a", { href: `#/chat/${encodeURIComponent(agent.name)}`, class: "button", text: `Chat with ${agent.name}` }),
        ),
        el("p", { text: agent.description || "" }),
        agent.skills?.length
          ? el("ul", { class: "skills" }, agent.skills.map((s) => el("li", { text: `${s.name || s.id}: ${s.description || ""}` })))
          : null,
        details,
      );
    }),
  );
  $("agents-empty").hidden = agents.length > 0;
  // The agent pickers follow the list.
  for (const [select, keepEmpty] of [[$("chat-agent"), false], [$("filter-agent"), true]]) {
    const current = select.value;
    const options = agents.map((a) => el("option", { value: a.name, text: a.online ? a.name : `${a.name} (offline)` }));
    select.replaceChildren(...(keepEmpty ? [el("option", { value: "", text: "any" })] : []), ...options);
    if (current && agents.some((a) => a.name === current)) select.value = current;
  }
  if (!chat.agent && agents.length) selectChatAgent($("chat-agent").value || agents[0].name);
}

async function showCard(details, name) {
  if (!details.open || details.querySelector(".card")) return;
  try {
    const card = await json(`/agents/${encodeURIComponent(name)}/.well-known/agent-card.json`);
    const interfaces = card.supportedInterfaces || card.additionalInterfaces || [];
    details.append(
      el(
        "div",
        { class: "card" },
        el("p", { text: `Input: ${(card.defaultInputModes || []).join(", ") || "—"} · Output: ${(card.defaultOutputModes || []).join(", ") || "—"}` }),
        el("p", { text: `Streaming: ${card.capabilities?.streaming ? "yes" : "no"} · Version ${card.version || "?"}` }),
        el("ul", {}, interfaces.map((i) => el("li", { text: `${i.protocolBinding || i.transport}${i.protocolVersion ? ` ${i.protocolVersion}` : ""}: ${i.url}` }))),
        el("details", {}, el("summary", { text: "Raw card" }), el("pre", { text: JSON.stringify(card, null, 2) })),
      ),
    );
  } catch (error) {
    details.append(el("p", { class: "error card", text: `Cannot read the card: ${error.message}` }));
  }
}

/** Follows GET /ui/api/agents/events; reconnects with a bounded backoff. */
async function followAgents() {
  let delay = 500;
  for (;;) {
    try {
      const response = await api("/ui/api/agents/events", { headers: { Accept: "text/event-stream" } });
      if (!response.ok) throw new Error(`${response.status}`);
      $("feed-status").textContent = "live";
      $("feed-status").className = "feed live";
      delay = 500;
      await readSse(response, (name, data) => {
        if (name !== "agents") return;
        agents = JSON.parse(data).agents || [];
        agents.sort((x, y) => x.name.localeCompare(y.name));
        renderAgents();
      });
    } catch (error) {
      console.warn("agents feed", error);
    }
    $("feed-status").textContent = "reconnecting…";
    $("feed-status").className = "feed down";
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 10000);
  }
}

// ---- Chat ---------------------------------------------------------------------------------

const chat = { agent: "", taskId: "", contextId: "", state: "", stream: null, artifacts: new Map() };

function selectChatAgent(name) {
  if (chat.stream) chat.stream.abort();
  Object.assign(chat, { agent: name, taskId: "", contextId: "", state: "", stream: null, artifacts: new Map() });
  $("chat-agent").value = name;
  $("transcript").replaceChildren();
  updateChatStatus();
}

$("chat-agent").addEventListener("change", (e) => {
  location.hash = `#/chat/${encodeURIComponent(e.target.value)}`;
});
$("chat-new").addEventListener("click", () => selectChatAgent(chat.agent));

function updateChatStatus() {
  const line = $("chat-task");
  line.replaceChildren();
  if (chat.taskId) {
    line.append(
      "Task ",
      el("a", { href: `#/task/${encodeURIComponent(chat.agent)}/${encodeURIComponent(chat.taskId)}`, text: shortId(chat.taskId), title: chat.taskId }),
      ` · ${chat.state || "…"}`,
      chat.state === "input-required" ? " · the agent asks: answer below, in the same task" : "",
    );
  } else {
    line.textContent = chat.agent ? `New conversation with ${chat.agent}` : "No agent yet";
  }
  $("chat-cancel").disabled = !chat.taskId || TERMINAL.has(chat.state) || chat.state === "";
  $("chat-send").textContent = chat.state === "input-required" ? "Answer" : "Send";
}

function addEntry(who, ...content) {
  const list = $("transcript");
  const entry = el("li", { class: `entry ${who}` }, el("span", { class: "who", text: who }), ...content);
  list.append(entry);
  while (list.children.length > MAX_TRANSCRIPT) list.firstElementChild.remove();
  entry.scrollIntoView({ block: "nearest" });
  return entry;
}

function base64ToBlob(b64, type) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  return new Blob([bytes], { type: type || "application/octet-stream" });
}

/** One part as DOM: text, formatted JSON data, a file (image shown, download link). */
function renderPart(part) {
  if (typeof part.text === "string" || part.kind === "text") return el("div", { class: "text", text: part.text ?? "" });
  if (part.data !== undefined && (part.kind === undefined || part.kind === "data")) {
    return el("pre", { class: "data", text: JSON.stringify(part.data, null, 2) });
  }
  const file = part.file || {};
  const name = part.filename || file.name || "file";
  const type = part.mediaType || file.mimeType || file.mediaType || "application/octet-stream";
  const raw = part.raw ?? file.bytes;
  const url = part.url ?? file.uri;
  if (raw !== undefined) {
    let href;
    try {
      href = URL.createObjectURL(base64ToBlob(raw, type));
    } catch {
      return el("p", { class: "error", text: `${name}: not valid base64` });
    }
    const link = el("a", { href, download: name, text: `Download ${name} (${type})` });
    if (type.startsWith("image/")) return el("figure", {}, el("img", { src: href, alt: name }), el("figcaption", {}, link));
    // A small text file is shown too.
    if (type.startsWith("text/") && raw.length < 64 * 1024) {
      let text = "";
      try {
        text = new TextDecoder().decode(Uint8Array.from(atob(raw), (c) => c.charCodeAt(0)));
      } catch {}
      return el("div", { class: "file" }, link, el("pre", { class: "data", text }));
    }
    return el("div", { class: "file" }, link);
  }
  if (url !== undefined) {
    const safe = /^https?:/i.test(url) ? url : null;
    return el("div", { class: "file" }, safe ? el("a", { href: safe, rel: "noopener noreferrer", target: "_blank", text: `${name} (${type})` }) : el("span", { text: `${name}: ${url}` }));
  }
  return el("pre", { class: "data", text: JSON.stringify(part, null, 2) });
}

function renderParts(parts) {
  return (parts || []).map(renderPart);
}

/** Applies one StreamResponse of the stream to the transcript. */
function applyEvent(event) {
  if (event.task) {
    const task = event.task;
    chat.taskId = task.id;
    chat.contextId = task.contextId;
    chat.state = stateName(task.status?.state);
    if (task.status?.message) addEntry("agent", ...renderParts(task.status.message.parts));
    for (const artifact of task.artifacts || []) applyArtifact(artifact, false);
  } else if (event.message) {
    chat.contextId = event.message.contextId || chat.contextId;
    addEntry("agent", ...renderParts(event.message.parts));
  } else if (event.statusUpdate) {
    const update = event.statusUpdate;
    chat.taskId = update.taskId || chat.taskId;
    chat.contextId = update.contextId || chat.contextId;
    chat.state = stateName(update.status?.state);
    const message = update.status?.message;
    addEntry("status", el("span", { class: "state", text: chat.state }), ...(message ? renderParts(message.parts) : []));
  } else if (event.artifactUpdate) {
    applyArtifact(event.artifactUpdate.artifact, event.artifactUpdate.append, event.artifactUpdate.lastChunk);
  }
  // A task that ended streams nothing more into its artifacts.
  if (TERMINAL.has(chat.state)) {
    for (const entry of chat.artifacts.values()) entry.classList.remove("streaming");
  }
  updateChatStatus();
}

function applyArtifact(artifact, append, last) {
  if (!artifact) return;
  let entry = chat.artifacts.get(artifact.artifactId);
  if (!entry || !entry.isConnected) {
    const body = el("div", { class: "artifact-body" });
    entry = addEntry("artifact", el("span", { class: "name", text: artifact.name || "artifact" }), body);
    entry.dataset.artifact = artifact.artifactId;
    chat.artifacts.set(artifact.artifactId, entry);
  }
  const body = entry.querySelector(".artifact-body");
  const parts = artifact.parts || [];
  // Text chunks that append continue the last text block; anything else is added.
  if (!append) body.replaceChildren();
  for (const part of parts) {
    const lastChild = body.lastElementChild;
    if (append && typeof part.text === "string" && lastChild?.classList.contains("text")) {
      lastChild.append(part.text); // a text node: no copy of what is there
    } else {
      body.append(renderPart(part));
    }
  }
  entry.classList.toggle("streaming", last === false || (append && last !== true));
  if (last) entry.classList.remove("streaming");
}

async function filePart(file) {
  if (file.size > MAX_FILE_BYTES) throw new Error(`${file.name} is larger than ${MAX_FILE_BYTES} bytes`);
  const bytes = new Uint8Array(await file.arrayBuffer());
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return { raw: btoa(binary), mediaType: file.type || "application/octet-stream", filename: file.name };
}

async function send() {
  const text = $("chat-text").value;
  const files = [...$("chat-file").files];
  if (!chat.agent || (!text.trim() && !files.length)) return;
  let parts;
  try {
    parts = [...(text.trim() ? [{ text }] : []), ...(await Promise.all(files.map(filePart)))];
  } catch (error) {
    addEntry("error", el("span", { text: error.message }));
    return;
  }
  const message = { messageId: crypto.randomUUID(), role: "ROLE_USER", parts };
  // An open task (waiting for input) is answered in place; a finished one starts a new task
  // in the same conversation.
  if (chat.taskId && !TERMINAL.has(chat.state)) message.taskId = chat.taskId;
  if (chat.contextId) message.contextId = chat.contextId;
  addEntry("user", ...renderParts(parts));
  $("chat-text").value = "";
  $("chat-file").value = "";
  if (chat.stream) chat.stream.abort();
  const controller = new AbortController();
  chat.stream = controller;
  chat.artifacts = new Map();
  const agent = chat.agent;
  try {
    const response = await api(`/agents/${encodeURIComponent(agent)}/message:stream`, {
      method: "POST",
      headers: { "Content-Type": A2A, Accept: "text/event-stream" },
      body: JSON.stringify({ message }),
      signal: controller.signal,
    });
    if (!response.ok) {
      const body = await response.text();
      let reason = body;
      try {
        reason = JSON.parse(body).error?.message || body;
      } catch {}
      throw new Error(`${response.status}: ${reason}`);
    }
    await readSse(
      response,
      (name, data) => {
        if (chat.agent !== agent) return;
        if (name === "error") {
          let reason = data;
          try {
            reason = JSON.parse(data).error?.message || data;
          } catch {}
          addEntry("error", el("span", { text: reason }));
          return;
        }
        applyEvent(JSON.parse(data));
      },
      controller.signal,
    );
  } catch (error) {
    if (error.name !== "AbortError") addEntry("error", el("span", { text: error.message }));
  } finally {
    if (chat.stream === controller) chat.stream = null;
    updateChatStatus();
  }
}

$("chat-form").addEventListener("submit", (e) => {
  e.preventDefault();
  send();
});
$("chat-text").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
    e.preventDefault();
    send();
  }
});
$("chat-cancel").addEventListener("click", async () => {
  if (!chat.taskId) return;
  try {
    const task = await json(`/agents/${encodeURIComponent(chat.agent)}/tasks/${encodeURIComponent(chat.taskId)}:cancel`, {
      method: "POST",
      headers: { "Content-Type": A2A },
      body: "{}",
    });
    const state = stateName(task.status?.state);
    // An open stream reports the new state itself, and may have already.
    if (!chat.stream && state !== chat.state) addEntry("status", el("span", { class: "state", text: state }));
    chat.state = state;
  } catch (error) {
    addEntry("error", el("span", { text: `Cancel: ${error.message}` }));
  }
  updateChatStatus();
});

// ---- Tasks --------------------------------------------------------------------------------

const tasksView = { token: "", next: "" };

async function loadTasks(token) {
  const query = new URLSearchParams({ pageSize: "20" });
  for (const [key, id] of [["agent", "filter-agent"], ["state", "filter-state"], ["contextId", "filter-context"]]) {
    if ($(id).value) query.set(key, $(id).value);
  }
  if (token) query.set("pageToken", token);
  try {
    const page = await json(`/ui/api/tasks?${query}`);
    tasksView.token = token;
    tasksView.next = page.nextPageToken || "";
    $("tasks-caption").textContent = `${page.totalSize} task${page.totalSize === 1 ? "" : "s"}`;
    $("tasks-body").replaceChildren(
      ...page.tasks.map((t) =>
        el(
          "tr",
          { "data-task": t.id },
          el("td", {}, el("a", { href: `#/task/${encodeURIComponent(t.agent)}/${encodeURIComponent(t.id)}`, text: shortId(t.id), title: t.id })),
          el("td", { text: t.agent }),
          el("td", { text: t.state }),
          el("td", {}, el("time", { datetime: t.updated, text: new Date(t.updated).toLocaleString() })),
        ),
      ),
    );
    $("tasks-next").disabled = !tasksView.next;
    $("tasks-first").disabled = !token;
  } catch (error) {
    $("tasks-caption").textContent = `Cannot list the tasks: ${error.message}`;
  }
}

$("tasks-filter").addEventListener("submit", (e) => {
  e.preventDefault();
  loadTasks("");
});
$("tasks-next").addEventListener("click", () => loadTasks(tasksView.next));
$("tasks-first").addEventListener("click", () => loadTasks(""));

// ---- One task's timeline ----------------------------------------------------------------

const taskView = { agent: "", id: "" };

function eventSummary(event) {
  if (event.task) return `task · ${stateName(event.task.status?.state)}`;
  if (event.statusUpdate) {
    const text = (event.statusUpdate.status?.message?.parts || []).map((p) => p.text).filter(Boolean).join(" ");
    return `status · ${stateName(event.statusUpdate.status?.state)}${text ? ` · ${text}` : ""}`;
  }
  if (event.artifactUpdate) {
    const a = event.artifactUpdate;
    return `artifact · ${a.artifact?.name || a.artifact?.artifactId || ""}${a.append ? " · append" : ""}${a.lastChunk ? " · last chunk" : ""}`;
  }
  if (event.message) return "message";
  return Object.keys(event).join(", ");
}

async function openTask(agent, id) {
  Object.assign(taskView, { agent, id });
  $("task-title").textContent = `Task ${shortId(id)}`;
  $("task-summary").textContent = `${agent} · ${id}`;
  $("timeline").replaceChildren();
  $("task-note").hidden = true;
  let after = 0;
  try {
    for (let pages = 0; pages < 20; pages++) {
      const page = await json(`/ui/api/tasks/${encodeURIComponent(id)}/events?after=${after}`);
      if (taskView.id !== id) return;
      $("task-summary").textContent = `${page.agent} · ${id} · ${page.state}`;
      if (page.first && pages === 0) {
        $("task-note").hidden = false;
        $("task-note").textContent = page.events.length
          ? `The gateway keeps this task's events from #${page.first} on; earlier ones are gone.`
          : "The gateway no longer keeps this task's events (its in-memory store keeps a running task's last events only; a durable store keeps them all). The task as it stands is below.";
      }
      $("timeline").append(
        ...page.events.map((e) =>
          el(
            "li",
            { class: "event", "data-seq": e.seq },
            el("span", { class: "seq", text: `#${e.seq}` }),
            el("time", { datetime: e.time, text: new Date(e.time).toISOString().replace("T", " ").replace("Z", "") }),
            el("span", { class: "summary", text: eventSummary(e.event) }),
            el("details", {}, el("summary", { text: "JSON" }), el("pre", { text: JSON.stringify(e.event, null, 2) })),
          ),
        ),
      );
      after = page.next;
      if (!page.more) break;
    }
  } catch (error) {
    $("task-note").hidden = false;
    $("task-note").textContent = `Cannot read the timeline: ${error.message}`;
  }
  try {
    const task = await json(`/agents/${encodeURIComponent(agent)}/tasks/${encodeURIComponent(id)}`);
    if (taskView.id === id) $("task-json").textContent = JSON.stringify(task, null, 2);
  } catch (error) {
    $("task-json").textContent = error.message;
  }
}

$("task-refresh").addEventListener("click", () => openTask(taskView.agent, taskView.id));

// ---- Bus traffic (GET /ui/api/bus, only on a gateway without API keys) ----------------------

const MAX_BUS_LINES = 500;
const busView = { controller: null, paused: false, missed: 0 };

function busSummary(message) {
  const p = message.payload;
  if (p && typeof p === "object") {
    const what = p.method || (p.result ? "result" : p.error ? "error" : p.kind || p.status || "");
    return typeof what === "string" ? what : JSON.stringify(what).slice(0, 60);
  }
  return typeof p === "string" ? p.slice(0, 60) : "";
}

function showBusMessage(message) {
  const filter = $("bus-filter").value.trim();
  if (filter && !message.topic.includes(filter)) return;
  const list = $("bus");
  list.prepend(
    el(
      "li",
      { class: "bus-line" },
      el("time", { datetime: message.time, text: message.time.slice(11, 23) }),
      el("code", { class: "topic", text: message.topic }),
      el("span", { class: "summary", text: `${busSummary(message)} · ${message.bytes} B${message.retain ? " · retained" : ""}${message.truncated ? " · cut" : ""}` }),
      el("details", {}, el("summary", { text: "payload" }), el("pre", { text: typeof message.payload === "string" ? message.payload : JSON.stringify(message.payload, null, 2) })),
    ),
  );
  while (list.children.length > MAX_BUS_LINES) list.lastElementChild.remove();
}

async function watchBus() {
  if (busView.controller) return;
  const controller = new AbortController();
  busView.controller = controller;
  $("bus-status").textContent = "connecting…";
  try {
    const response = await api("/ui/api/bus", { headers: { Accept: "text/event-stream" }, signal: controller.signal });
    if (!response.ok) {
      const body = await response.text();
      throw new Error(refusal(body) || `${response.status}`);
    }
    $("bus-status").textContent = "watching";
    await readSse(
      response,
      (name, data) => {
        const event = JSON.parse(data);
        if (name === "dropped") {
          $("bus-status").textContent = `watching · ${event.dropped} messages dropped (the page fell behind)`;
        } else if (name === "bus") {
          if (busView.paused) {
            busView.missed += 1;
            $("bus-status").textContent = `paused · ${busView.missed} messages not shown`;
          } else {
            showBusMessage(event);
          }
        }
      },
      controller.signal,
    );
    $("bus-status").textContent = "the gateway ended the view";
  } catch (error) {
    if (error.name !== "AbortError") $("bus-status").textContent = `No bus view: ${error.message}`;
  } finally {
    if (busView.controller === controller) busView.controller = null;
  }
}

function stopBus() {
  if (busView.controller) busView.controller.abort();
  busView.controller = null;
}

$("bus-pause").addEventListener("click", () => {
  busView.paused = !busView.paused;
  busView.missed = 0;
  $("bus-pause").setAttribute("aria-pressed", String(busView.paused));
  $("bus-pause").textContent = busView.paused ? "Resume" : "Pause";
  $("bus-status").textContent = busView.paused ? "paused" : "watching";
});
$("bus-clear").addEventListener("click", () => $("bus").replaceChildren());

// ---- Start ---------------------------------------------------------------------------------

route();
followAgents();
