// The panels of the Jarvis HUD: the session list (each marker in its
// agent's colour; peer, MCP and job sessions listed with a tag and opened
// read-only, R-HUD-10, R-ASK-5), the AGENDA card (every agent's schedules and promises, each
// label in its agent's colour, R-AGENDA-1), the SET screen, whose SYSTEM
// card lists only the current agent's tools (R-HUD-9) and names the embedder
// of recall, and the session's tokens and cost in the bar. All text is set
// with textContent.

import { el } from "./dom.js";

/**
 * A short local date and time for an RFC 3339 timestamp, in the person's
 * IANA zone `zone` when given (else the browser's).
 */
function when(stamp, zone) {
  const date = new Date(stamp);
  if (Number.isNaN(date.getTime())) return "";
  const options = { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" };
  if (zone && zone.includes("/")) {
    try {
      return date.toLocaleString([], { ...options, timeZone: zone });
    } catch {
      // A zone this browser does not know: its own zone below.
    }
  }
  return date.toLocaleString([], options);
}

/** The agent `id` of `agents`, or a stand-in with a neutral colour. */
export function agentOf(agents, id) {
  return (
    agents.get(id) || { id, name: id, quote: "", description: "", tools: [], palette: { primary: "#8493a4", accent: "#8493a4" } }
  );
}

/** Whether a session is a delegation between agents (read-only for people). */
export function isPeer(session) {
  return session.kind === "peer" || String(session.id).startsWith("peer-");
}

/**
 * Whether people may only read a session: every kind but a person's own
 * (`user`). An MCP client's session still takes answers to its approvals.
 */
export function isReadOnly(session) {
  return isPeer(session) || (session.kind !== undefined && session.kind !== "user");
}

/** The tag and the hover text of a read-only session in the list. */
const TAGS = {
  peer: ["PEER", "A delegation between agents: read-only"],
  mcp: ["MCP", "An MCP client's session: read-only; its approvals can be answered here"],
  job: ["JOB", "A scheduled job's session: read-only"],
  sub: ["SUB", "A sub-agent's work: read-only"],
};

/**
 * Fills the session list.
 * @param {HTMLElement} list
 * @param {object[]} sessions newest first
 * @param {{agents: Map<string, object>, current: string | null, open: (session: object) => void}} options
 */
export function renderSessions(list, sessions, { agents, current, open }) {
  const items = sessions.map((s) => {
    const agent = agentOf(agents, s.agent_id);
    const li = el("li");
    const button = li.appendChild(el("button"));
    button.type = "button";
    button.dataset.session = s.id;
    button.dataset.agent = s.agent_id;
    button.style.setProperty("--agent", agent.palette.primary);
    if (s.id === current) button.setAttribute("aria-current", "true");
    button.appendChild(el("span", "marker")).setAttribute("aria-hidden", "true");
    const title = button.appendChild(el("span", "session-title", s.title || s.id));
    const tag = isPeer(s) ? TAGS.peer : isReadOnly(s) ? TAGS[s.kind] : null;
    if (tag) {
      title.appendChild(el("span", "peer-tag", tag[0]));
      button.title = tag[1];
    }
    const meta = button.appendChild(el("span", "session-meta"));
    if (isPeer(s) && s.caller) {
      const caller = agentOf(agents, s.caller);
      meta.appendChild(el("span", "agent-name", `${agent.name} ← ${caller.name}`));
    } else {
      meta.appendChild(el("span", "agent-name", agent.name));
    }
    const stamp = when(s.updated_at);
    if (stamp) meta.appendChild(document.createTextNode(` · ${stamp}`));
    button.addEventListener("click", () => open(s));
    return li;
  });
  if (items.length === 0) items.push(el("li", "empty", "No sessions yet."));
  list.replaceChildren(...items);
}

/**
 * Fills the AGENDA card.
 * @param {HTMLElement} list
 * @param {object[]} items `GET /api/agenda` items
 * @param {Map<string, object>} agents
 * @param {string} [zone] `GET /api/agenda`'s `time_zone`
 */
const AGENDA_KINDS = { schedule: "SCHEDULE", promise: "PROMISE", goal: "GOAL", source: "SOURCE" };

/**
 * The FOCUS card from a `focus_state` event (or hides it with `null`):
 * the task, its steps in order with their status, the current one marked
 * with `aria-current="step"`.
 * @param {{card: HTMLElement, name: HTMLElement, steps: HTMLElement, progress: HTMLElement}} nodes
 * @param {object | null} state
 */
export function renderFocus(nodes, state) {
  if (!state) {
    nodes.card.hidden = true;
    nodes.card.removeAttribute("data-task");
    nodes.steps.replaceChildren();
    return;
  }
  const steps = Array.isArray(state.steps) ? state.steps : [];
  nodes.card.hidden = false;
  nodes.card.dataset.task = state.task_id;
  nodes.card.dataset.state = state.state;
  nodes.card.dataset.busy = state.busy ? "true" : "false";
  nodes.name.textContent = state.title;
  const finished = steps.filter((s) => s.status !== "pending" && s.status !== "active").length;
  nodes.progress.textContent = state.state === "done" ? "DONE" : `${finished}/${steps.length}`;
  nodes.steps.replaceChildren(
    ...steps.map((step, i) => {
      const li = el("li", null, step.title);
      li.dataset.status = step.status;
      li.title = step.status;
      if (i === state.current) li.setAttribute("aria-current", "step");
      return li;
    }),
  );
}

export function renderAgenda(list, items, agents, zone) {
  const rows = items.map((item) => {
    const agent = agentOf(agents, item.agent_id);
    const li = el("li");
    li.dataset.agent = item.agent_id;
    li.dataset.kind = item.kind;
    const label = li.appendChild(el("span", "agenda-label", item.agent_name || agent.name));
    label.style.setProperty("--agent", item.color || agent.palette.primary);
    li.appendChild(el("span", "agenda-kind", AGENDA_KINDS[item.kind] || String(item.kind).toUpperCase()));
    li.appendChild(el("span", "agenda-text", item.text));
    const due = item.due || item.when;
    const parts = [due ? when(due, zone) : "", item.detail || ""].filter(Boolean);
    if (parts.length) li.appendChild(el("span", "agenda-when", parts.join(" · ")));
    return li;
  });
  if (rows.length === 0) rows.push(el("li", "empty", "Nothing on the AGENDA."));
  list.replaceChildren(...rows);
}

/**
 * The SET card's words for the embedder of recall: `openai ·
 * text-embedding-3-small`, and what re-embedding is doing when it is not done.
 * @param {object | null} embedder `GET /api/system`'s `embedder`
 */
export function embedderText(embedder) {
  if (!embedder) return "";
  let text = `${embedder.provider} · ${embedder.model || embedder.name}`;
  if (embedder.requested === "auto") text += " (found by auto)";
  if (embedder.reembedding === "running") {
    text += ` — embedding memories again (${embedder.reembedded} done)`;
  } else if (embedder.reembedding === "waiting") {
    text += " — not answering; recall uses the memories already embedded";
  }
  return text;
}

/**
 * Fills the SET screen's SYSTEM card for the current agent.
 * @param {{system: HTMLElement, tools: HTMLElement}} nodes
 * @param {object} agent an `/api/agents` entry
 * @param {object} session the attached session
 * @param {object | null} info `GET /api/system`, once it has answered
 */
export function renderSystem({ system, tools }, agent, session, info) {
  const rows = [
    ["Agent", agent.name],
    ["Id", agent.id],
    ["About", agent.description],
    ["Session", session ? session.id : ""],
    ["Embed", embedderText(info ? info.embedder : null)],
  ];
  const nodes = [];
  for (const [name, value] of rows) {
    if (!value) continue;
    nodes.push(el("dt", null, name), el("dd", null, value));
  }
  const colour = el("dd");
  for (const [name, hex] of [["primary", agent.palette.primary], ["accent", agent.palette.accent]]) {
    const swatch = colour.appendChild(el("span", "swatch"));
    swatch.style.setProperty("--agent", hex);
    colour.appendChild(document.createTextNode(`${name} ${hex}  `));
  }
  nodes.push(el("dt", null, "Colours"), colour);
  system.replaceChildren(...nodes);
  const list = (agent.tools || []).map((t) => el("li", null, t));
  if (list.length === 0) list.push(el("li", "empty", "No tools."));
  tools.replaceChildren(...list);
}

/** A cost in US dollars, short: two significant digits below a dollar. */
export function usdText(usd) {
  if (usd === 0) return "$0";
  if (usd < 0.0001) return "<$0.0001";
  if (usd < 1) return `$${usd.toPrecision(2)}`;
  return `$${usd.toFixed(2)}`;
}

/**
 * The session's usage in the bar, from its row of `GET /api/usage?by=session`:
 * tokens read and written and the cost, `—` when a model it used has no
 * price. Without a row (no turn has called the model yet) it is hidden.
 */
export function renderUsage(node, row) {
  if (!row) {
    node.hidden = true;
    node.textContent = "";
    return;
  }
  const count = (n) => Number(n || 0).toLocaleString("en-US");
  const known = typeof row.cost_usd === "number";
  node.textContent = `${count(row.input_tokens)} in · ${count(row.output_tokens)} out · ${known ? usdText(row.cost_usd) : "—"}`;
  const turns = row.turns === 1 ? "1 turn" : `${count(row.turns)} turns`;
  const cached = `${count(row.cached_input_tokens)} input tokens from the prompt cache`;
  const cost = known ? "" : "; cost unknown: a model it used has no price in prices.yaml";
  node.title = `This session: ${turns}, ${cached}${cost}`;
  node.setAttribute("aria-label", `This session used ${node.textContent}`);
  node.hidden = false;
}
