// The Jarvis HUD's entry module. It reads the page's address
// (`?session=…&agent=…`, plus `particles=low` for slow machines), loads
// the team, attaches the screen to a session over the WebSocket and wires
// the reactor, the conversation, the approvals and the panels together.
//
// Switching agents (the arrows beside the reactor, dragging the sphere
// 48 px or more, or the arrow keys on it) goes to the previous or next
// agent in team order, wrapping around, and opens that agent's topmost
// session that people may write in (not a peer, MCP or job session), or a
// new one (R-HUD-5..8). The bar shows the attached session's tokens and
// cost, asked again after every turn. The page
// keeps a few data attributes on <html> (agent, session, active, busy) so
// people's tools and tests can see its state.

import { api, Connection } from "./api.js";
import { Approvals } from "./approvals.js";
import { Conversation } from "./conversation.js";
import { agentOf, isReadOnly, renderAgenda, renderFocus, renderSessions, renderSystem, renderUsage } from "./panels.js";
import { PARTICLES, Reactor } from "./reactor.js";

const $ = (id) => document.getElementById(id);
const root = document.documentElement;
const params = new URLSearchParams(location.search);
const motionQuery = matchMedia("(prefers-reduced-motion: reduce)");
const PLACEHOLDER = $("prompt").placeholder;

const hud = {
  agents: [], // the team, in its order
  byId: new Map(),
  agent: null, // the agent whose colours the screen wears
  session: null, // the attached session
  conn: null,
  active: [], // agents running a loop now
  busy: false, // a turn of the attached session runs
  connected: false, // the session's WebSocket is open
  readOnly: false,
  attachSeq: 0,
  switchSeq: 0,
  usageSeq: 0, // the latest usage asked for; older answers are dropped
  particles: params.get("particles") === "low" ? "low" : "normal",
  system: null, // `GET /api/system`, asked again whenever SET opens
};

const reactor = new Reactor($("orb"), {
  particles: PARTICLES[hud.particles],
  reducedMotion: motionQuery.matches,
  onSwipe: (step) => switchAgent(step),
});

const conversation = new Conversation($("log"), {
  dismiss: (id) => send({ type: "proactive_feedback", message_id: id, reaction: "dismissed" }),
});

const approvals = new Approvals($("approval"), {
  send: (message) => send(message),
  name: (id) => agentOf(hud.byId, id).name,
});

function send(message) {
  return Boolean(hud.conn) && hud.conn.send(message);
}

function setStatus(text, kind = "") {
  const status = $("status");
  status.textContent = text;
  status.dataset.kind = kind;
}

function readyStatus() {
  if (!hud.session || !hud.agent) return;
  if (!hud.connected) setStatus(`connecting… · ${hud.session.id}`);
  else if (hud.readOnly) setStatus(`read-only · ${hud.session.id}`);
  else if (hud.busy) setStatus(`${hud.agent.name} is working · ${hud.session.id}`);
  else setStatus(`ready · ${hud.session.id}`);
}

/** The agent `step` places away in team order, wrapping around. */
function neighbour(step) {
  const n = hud.agents.length;
  const i = Math.max(0, hud.agents.findIndex((a) => a.id === hud.agent.id));
  return hud.agents[(((i + step) % n) + n) % n];
}

/** Which way (+1 next, -1 previous) is shorter to agent `id`; ties go forward. */
function directionTo(id) {
  const n = hud.agents.length;
  const i = hud.agents.findIndex((a) => a.id === hud.agent.id);
  const j = hud.agents.findIndex((a) => a.id === id);
  const forward = (((j - i) % n) + n) % n;
  return forward <= n - forward ? 1 : -1;
}

/** Dresses the screen in agent `agentId`'s colours; `step` slides the sphere. */
function brand(agentId, { step = 0 } = {}) {
  const agent = agentOf(hud.byId, agentId);
  const first = !hud.agent;
  const changed = !first && hud.agent.id !== agent.id;
  hud.agent = agent;
  root.dataset.agent = agent.id;
  root.style.setProperty("--primary", agent.palette.primary);
  root.style.setProperty("--accent", agent.palette.accent);
  if (first) {
    // The first colour is set before the blend is switched on.
    getComputedStyle(root).getPropertyValue("--primary");
    root.dataset.ready = "";
  }
  $("wordmark").textContent = agent.name;
  $("quote").textContent = agent.quote || "";
  document.title = agent.name;
  const hint = hud.agents.length > 1 ? ": drag it sideways or use the arrow keys to switch agents" : "";
  $("orb").setAttribute("aria-label", `${agent.name} reactor${hint}`);
  if (first || changed) {
    reactor.setColour(agent.palette.primary, { animate: changed, slide: changed ? -step : 0 });
  }
  arrows();
  activity();
}

function arrows() {
  const show = hud.agents.length >= 2 && Boolean(hud.agent);
  reactor.swipeEnabled = show;
  for (const [id, step] of [["prev-agent", -1], ["next-agent", 1]]) {
    const button = $(id);
    button.hidden = !show;
    if (!show) continue;
    const target = neighbour(step);
    button.dataset.target = target.id;
    button.style.setProperty("--agent", target.palette.primary);
    button.setAttribute("aria-label", `${step < 0 ? "Previous" : "Next"} agent: ${target.name}`);
    button.title = target.name;
  }
}

/** Shows who works: the sphere's bands and pulse, and the arrows toward the others. */
function activity() {
  const active = hud.active.filter((id) => hud.byId.has(id));
  root.dataset.active = active.join(" ");
  const together = active.length >= 2;
  reactor.setBands(together ? active.map((id) => hud.byId.get(id).palette.primary) : []);
  reactor.setWorking(Boolean(hud.agent) && active.includes(hud.agent.id));
  const prev = $("prev-agent");
  const next = $("next-agent");
  prev.classList.remove("pulse");
  next.classList.remove("pulse");
  if (!together || !hud.agent) return;
  for (const id of active) {
    if (id !== hud.agent.id) (directionTo(id) < 0 ? prev : next).classList.add("pulse");
  }
}

function setBusy(busy) {
  hud.busy = busy;
  root.dataset.busy = String(busy);
  $("abort").disabled = !busy || hud.readOnly;
  readyStatus();
}

function setReadOnly(readOnly, session) {
  hud.readOnly = readOnly;
  root.dataset.readOnly = String(readOnly);
  const box = $("prompt");
  box.disabled = readOnly;
  $("send").disabled = readOnly;
  if (readOnly) {
    const callee = agentOf(hud.byId, session.agent_id).name;
    if (session.kind === "mcp") {
      box.placeholder = `Read-only: ${callee} answering an MCP client`;
    } else if (session.kind === "job") {
      box.placeholder = `Read-only: ${callee}'s scheduled job`;
    } else {
      const caller = session.caller ? agentOf(hud.byId, session.caller).name : "another agent";
      box.placeholder = `Read-only: ${callee} answering ${caller}`;
    }
  } else {
    box.placeholder = PLACEHOLDER;
  }
  readyStatus();
}

/** Attaches the screen to session `id` (created for `agentHint` when new). */
async function attach(id, agentHint) {
  const seq = ++hud.attachSeq;
  if (hud.conn) hud.conn.close();
  hud.conn = null;
  hud.connected = false;
  approvals.clear();
  conversation.reset();
  // The new session's WebSocket sends its active Focus task, if any.
  renderFocus(focusNodes(), null);
  $("focus-panel").textContent = "";
  let detail = null;
  try {
    detail = await api.session(id);
  } catch (e) {
    if (e.status !== 404) setStatus(`The session could not be read: ${e.message}`, "error");
  }
  if (seq !== hud.attachSeq) return;
  const session = detail ? detail.session : { id, agent_id: agentHint || "main", kind: "user" };
  hud.session = session;
  root.dataset.session = session.id;
  brand(session.agent_id);
  setBusy(false);
  setReadOnly(isReadOnly(session), session);
  if (detail) conversation.history(detail.entries);
  renderUsage($("usage"), null);
  refreshUsage();
  const query = new URLSearchParams({ session: session.id, agent: session.agent_id });
  if (hud.particles === "low") query.set("particles", "low");
  history.replaceState(null, "", `?${query}`);
  hud.conn = new Connection(session.id, session.agent_id, {
    message: onMessage,
    state: onConnection,
    reopened: () => reload(seq),
  });
  refreshSessions();
}

/** After a dropped connection: the history again, from the record. */
async function reload(seq) {
  if (seq !== hud.attachSeq) return;
  conversation.reset();
  try {
    const detail = await api.session(hud.session.id);
    if (seq === hud.attachSeq) conversation.history(detail.entries);
  } catch (_) {
    // The live events still come; the record can be read on the next attach.
  }
}

function onConnection(state, detail) {
  hud.connected = state === "open";
  if (state === "open") {
    readyStatus();
    refreshSessions();
  } else if (state === "reconnecting") {
    setStatus(`connection lost; trying again in ${detail} s`, "error");
  } else if (state === "refused") {
    const why = {
      4400: "This is not a valid session id.",
      4401: "This server needs its token: open the address jarvis printed.",
      4404: "That agent is not in the team.",
    };
    setStatus(why[detail] || `The server refused the connection (${detail}).`, "error");
  }
}

function onMessage(m) {
  switch (m.type) {
    case "agent_activity":
      hud.active = Array.isArray(m.active) ? m.active : [];
      activity();
      refreshSessionsSoon();
      return;
    case "agenda_changed":
      refreshAgenda();
      return;
    case "focus_state":
      renderFocus(focusNodes(), m);
      return;
    case "focus_panel":
      $("focus-panel").textContent = m.markdown || "";
      return;
    case "approval_request":
      approvals.request(m);
      return;
    case "approval_resolved":
      approvals.resolved(m.request_id);
      return;
    case "error":
      onError(m);
      return;
    case "agent_start":
      setBusy(true);
      break;
    case "agent_end":
      setBusy(false);
      refreshSessionsSoon();
      refreshUsage();
      break;
    default:
      break;
  }
  conversation.event(m);
}

function focusNodes() {
  return { card: $("focus-card"), name: $("focus-name"), steps: $("focus-steps"), progress: $("focus-progress") };
}

function onError(m) {
  // `input_rejected` already said it; another screen may have answered first.
  if (m.code === "invalid_input" || m.code === "forbidden" || m.code === "approval_not_pending") return;
  if (m.code === "busy") conversation.note(m.message);
  else conversation.error(m.message || m.code || "Something went wrong.");
}

/** Goes to the previous (-1) or next (+1) agent and its topmost open session. */
async function switchAgent(step) {
  if (hud.agents.length < 2 || !hud.agent) return;
  const target = neighbour(step);
  brand(target.id, { step });
  const seq = ++hud.switchSeq;
  try {
    const sessions = await api.sessions();
    // A person's own session (not a delegation, an MCP client's or a
    // scheduled job's, `sched-…`: a job's answers reach the agent's open
    // sessions anyway).
    let top = sessions.find((s) => s.agent_id === target.id && !isReadOnly(s) && !String(s.id).startsWith("sched-"));
    if (!top) top = await api.createSession(target.id);
    if (seq !== hud.switchSeq) return;
    await attach(top.id, target.id);
  } catch (e) {
    setStatus(`Could not switch to ${target.name}: ${e.message}`, "error");
  }
}

let sessionsTimer = 0;
function refreshSessionsSoon() {
  clearTimeout(sessionsTimer);
  sessionsTimer = setTimeout(refreshSessions, 250);
}

async function refreshSessions() {
  let sessions;
  try {
    sessions = await api.sessions();
  } catch (_) {
    return; // the list stays as it was
  }
  renderSessions($("session-list"), sessions, {
    agents: hud.byId,
    current: hud.session ? hud.session.id : null,
    open: (s) => {
      if (!hud.session || s.id !== hud.session.id) attach(s.id, s.agent_id);
    },
  });
}

/** The attached session's tokens and cost (its turn is in the ledger before its `agent_end` goes out). */
async function refreshUsage() {
  const seq = hud.attachSeq;
  const asked = ++hud.usageSeq;
  if (!hud.session) return;
  const id = hud.session.id;
  let report;
  try {
    report = await api.usage("session");
  } catch (_) {
    return; // the bar keeps what it showed
  }
  if (seq !== hud.attachSeq || asked !== hud.usageSeq) return;
  renderUsage($("usage"), (report.rows || []).find((row) => row.key === id) || null);
}

async function refreshAgenda() {
  try {
    const agenda = await api.agenda();
    renderAgenda($("agenda-list"), agenda.items || [], hud.byId, agenda.time_zone);
  } catch (_) {
    // The card keeps what it showed.
  }
}

function autosize() {
  const box = $("prompt");
  box.style.height = "";
  if (box.value) box.style.height = `${Math.min(box.scrollHeight + 2, 144)}px`;
}

function submit() {
  const box = $("prompt");
  const text = box.value.trim();
  if (!text || hud.readOnly) return;
  if (!send({ type: "prompt", text })) {
    conversation.error("Not connected to the server; the message was not sent.");
    return;
  }
  const answered = conversation.takeUnanswered();
  if (answered) send({ type: "proactive_feedback", message_id: answered, reaction: "answered" });
  conversation.user(text);
  box.value = "";
  autosize();
}

function openSet() {
  if (!hud.agent) return;
  const nodes = { system: $("system"), tools: $("tools") };
  renderSystem(nodes, hud.agent, hud.session, hud.system);
  // The embedder's re-embedding moves on: ask again, and redraw if SET is still open.
  api
    .system()
    .then((system) => {
      hud.system = system;
      if ($("set").open && hud.agent) renderSystem(nodes, hud.agent, hud.session, system);
    })
    .catch(() => {});
  for (const button of document.querySelectorAll("[data-particles]")) {
    button.setAttribute("aria-pressed", String(button.dataset.particles === hud.particles));
  }
  $("motion-note").textContent = motionQuery.matches
    ? "Motion is reduced, as this system asks: the sphere stands still and nothing slides or pulses."
    : "Add ?particles=low to the address for slow machines.";
  $("set").showModal();
}

function setParticles(mode) {
  hud.particles = mode;
  root.dataset.particles = mode;
  reactor.setParticles(PARTICLES[mode]);
  const query = new URLSearchParams(location.search);
  if (mode === "low") query.set("particles", "low");
  else query.delete("particles");
  history.replaceState(null, "", `?${query}`);
  for (const button of document.querySelectorAll("[data-particles]")) {
    button.setAttribute("aria-pressed", String(button.dataset.particles === mode));
  }
}

function wire() {
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    submit();
  });
  $("prompt").addEventListener("keydown", (e) => {
    // Enter sends, unless an input method is composing (Korean, Japanese…).
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
      e.preventDefault();
      submit();
    }
  });
  $("prompt").addEventListener("input", autosize);
  $("abort").addEventListener("click", () => send({ type: "abort" }));
  $("prev-agent").addEventListener("click", () => switchAgent(-1));
  $("next-agent").addEventListener("click", () => switchAgent(1));
  $("new-session").addEventListener("click", async () => {
    if (!hud.agent) return;
    try {
      const session = await api.createSession(hud.agent.id);
      await attach(session.id, session.agent_id);
    } catch (e) {
      setStatus(`A new session could not be made: ${e.message}`, "error");
    }
  });
  $("open-set").addEventListener("click", openSet);
  $("close-set").addEventListener("click", () => $("set").close());
  for (const button of document.querySelectorAll("[data-particles]")) {
    button.addEventListener("click", () => setParticles(button.dataset.particles));
  }
  motionQuery.addEventListener("change", (e) => {
    root.dataset.motion = e.matches ? "reduced" : "full";
    reactor.setReducedMotion(e.matches);
  });
  const tick = () => {
    $("clock").textContent = new Date().toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  };
  tick();
  setInterval(tick, 15000);
  setInterval(refreshAgenda, 60000);
}

async function boot() {
  root.dataset.motion = motionQuery.matches ? "reduced" : "full";
  root.dataset.particles = hud.particles;
  wire();
  try {
    hud.agents = await api.agents();
  } catch (e) {
    setStatus(
      e.status === 401
        ? "This server needs its token: open the address jarvis printed."
        : `The team could not be loaded: ${e.message}`,
      "error",
    );
    return;
  }
  hud.byId = new Map(hud.agents.map((a) => [a.id, a]));
  const wanted = params.get("agent");
  const fallback = wanted && hud.byId.has(wanted) ? wanted : hud.agents.length ? hud.agents[0].id : "main";
  const session = params.get("session") || `default-${fallback}`;
  refreshAgenda();
  await attach(session, wanted || fallback);
}

boot();
