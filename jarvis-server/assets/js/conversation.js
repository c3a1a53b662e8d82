// The conversation of the Jarvis HUD: a session's recorded history and its
// live events, drawn into the log. Streamed text grows in place; thinking
// is shown apart and folds away; inner thoughts are a quiet aside; tool
// calls show their arguments, result and errors; a sub-agent's work (its
// streamed text and tool calls) folds under the tool call that runs it;
// proactive messages
// (filler, proactive, answer) each look like what they are and can be
// dismissed. Everything a person or a model wrote is set with textContent:
// it is never parsed as markup, so HTML or script in it stays text.

import { el } from "./dom.js";

const KIND_LABELS = {
  filler: "While you wait",
  proactive: "On its own",
  answer: "Answer from the background",
};

function pretty(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch (_) {
    return String(value);
  }
}

/** The log of one attached session. */
export class Conversation {
  /**
   * @param {HTMLElement} log the list the entries go into
   * @param {{dismiss: (messageId: string) => void}} handlers
   */
  constructor(log, handlers) {
    this.log = log;
    this.handlers = handlers;
    // The server's note on the model (the demo, a model found by itself)
    // stays the log's first entry whatever session is attached.
    this.notice = log.querySelector("#notice");
    this.reset();
  }

  /** Empties the log (another session is attached), keeping the notice. */
  reset() {
    this.log.replaceChildren(...(this.notice ? [this.notice] : []));
    this.turn = null; // the agent's entry of the running turn
    this.segment = null; // {kind: "text" | "thinking", node, text}
    this.tools = new Map(); // tool_call_id → card
    this.runs = new Map(); // sub-agent run (parent call id + path) → {box, text}
    this.unanswered = []; // proactive message ids not reacted to yet
    this.scrollQueued = false;
  }

  nearBottom() {
    const log = this.log;
    return log.scrollHeight - log.scrollTop - log.clientHeight < 120;
  }

  /** Appends an entry, keeping the log pinned to the bottom if it was. */
  append(node, parent = this.log) {
    const pinned = this.nearBottom();
    parent.appendChild(node);
    if (pinned) this.stick();
    return node;
  }

  stick() {
    if (this.scrollQueued) return;
    this.scrollQueued = true;
    requestAnimationFrame(() => {
      this.scrollQueued = false;
      this.log.scrollTop = this.log.scrollHeight;
    });
  }

  /** What the person said. */
  user(text) {
    this.closeTurn();
    const li = el("li", "you");
    li.appendChild(el("span", "bubble", text));
    this.append(li);
  }

  /** The agent's entry of the running turn, made when missing. */
  agentTurn() {
    if (!this.turn) {
      this.turn = this.append(el("li", "agent-turn"));
      this.segment = null;
    }
    return this.turn;
  }

  closeTurn() {
    this.foldThinking();
    this.turn = null;
    this.segment = null;
  }

  foldThinking() {
    if (this.segment && this.segment.kind === "thinking") {
      this.segment.node.open = false;
      this.segment.node.querySelector("summary").textContent = "Thinking";
    }
  }

  /** Adds `delta` to the running text or thinking, starting a new piece when the kind changes. */
  stream(kind, delta) {
    const turn = this.agentTurn();
    if (!this.segment || this.segment.kind !== kind) {
      this.foldThinking();
      let node;
      let body;
      if (kind === "thinking") {
        node = el("details", "thinking");
        node.open = true;
        node.appendChild(el("summary", null, "Thinking…"));
        body = node.appendChild(el("div", "body"));
      } else {
        node = el("div", "text");
        body = node;
      }
      const text = document.createTextNode("");
      body.appendChild(text);
      this.append(node, turn);
      this.segment = { kind, node, text };
    }
    const pinned = this.nearBottom();
    this.segment.text.appendData(delta);
    if (pinned) this.stick();
  }

  /** A tool call's card, with its arguments (in `parent`: the turn, or a sub-agent's box). */
  toolStart(id, name, args, parent = null) {
    const turn = parent || this.agentTurn();
    if (!parent) {
      this.foldThinking();
      this.segment = null;
    }
    const card = el("details", "tool");
    card.dataset.tool = name || "";
    const summary = card.appendChild(el("summary"));
    summary.appendChild(el("span", "name", name));
    const state = summary.appendChild(el("span", "state", "running…"));
    card.appendChild(el("div", "label", "ARGUMENTS"));
    card.appendChild(el("pre", "args", pretty(args)));
    this.append(card, turn);
    const entry = { card, state };
    if (id) this.tools.set(id, entry);
    return entry;
  }

  /** A tool call's end: its result, marked when it failed. */
  toolEnd(id, name, args, isError, result, parent = null) {
    const entry = this.tools.get(id) || this.toolStart(id, name, args, parent);
    entry.state.textContent = isError ? "failed" : "done";
    if (isError) {
      entry.card.classList.add("failed");
      entry.card.open = true;
    }
    entry.card.appendChild(el("div", "label", isError ? "ERROR" : "RESULT"));
    entry.card.appendChild(el("pre", "result", result || ""));
    this.tools.delete(id);
  }

  /**
   * A sub-agent's event, folded under the card of the `run_subagent` call
   * that runs it: its streamed text and its tool calls, in a box per run.
   * Its `agent_start` and `agent_end` never touch the turn itself.
   */
  subagent(m) {
    const inner = m.event || {};
    const path = Array.isArray(m.agent_path) ? m.agent_path : [];
    const key = `${m.parent_tool_call_id}/${path.join(".")}`;
    let run = this.runs.get(key);
    if (!run) {
      const host = this.tools.get(m.parent_tool_call_id);
      if (!host) return; // a screen that attached after the call started
      const box = el("div", "subagent");
      box.dataset.path = path.join(".");
      box.appendChild(el("div", "label", `↳ ${path[path.length - 1] || "sub-agent"}`));
      const args = host.card.querySelector(":scope > pre.args");
      host.card.insertBefore(box, args ? args.nextSibling : null);
      // Open while the sub-agent works, folded again when it is done.
      host.card.open = true;
      run = { box, text: null, host };
      this.runs.set(key, run);
    }
    switch (inner.type) {
      case "message_update":
        if (typeof inner.text_delta === "string") {
          if (!run.text) {
            const node = run.box.appendChild(el("div", "text"));
            run.text = node.appendChild(document.createTextNode(""));
          }
          run.text.appendData(inner.text_delta);
        }
        break;
      case "tool_execution_start":
        run.text = null;
        this.toolStart(inner.tool_call_id, inner.tool_name, inner.args, run.box);
        break;
      case "tool_execution_end":
        this.toolEnd(inner.tool_call_id, inner.tool_name, inner.args, inner.is_error, inner.result, run.box);
        break;
      case "agent_end": {
        const stop = (inner.final_message || {}).stop_reason;
        run.box.classList.add("done");
        if (stop === "aborted") run.box.appendChild(el("div", "note", "(aborted)"));
        if (!run.host.card.classList.contains("failed")) run.host.card.open = false;
        this.runs.delete(key);
        break;
      }
      case "agent_error":
        run.box.appendChild(el("div", "error-line", inner.message || "The model failed."));
        break;
      default:
        break;
    }
  }

  /** A line saying something went wrong. */
  error(text) {
    const line = el("div", "error-line", text);
    line.setAttribute("role", "alert");
    if (this.turn) this.append(line, this.turn);
    else this.append(el("li")).appendChild(line);
  }

  /** A quiet line (an aborted turn, a busy session). */
  note(text) {
    this.append(el("li", "note", text));
  }

  /** An inner thought, as a quiet aside. */
  thought(m) {
    const aside = el("aside", "thought");
    aside.appendChild(el("span", "label", "INNER THOUGHT"));
    const parts = [];
    if (m.interpretation) parts.push(m.interpretation);
    if (m.decision) parts.push(`→ ${m.decision}`);
    if (typeof m.confidence === "number") parts.push(`(${Math.round(m.confidence * 100)}%)`);
    aside.appendChild(el("span", "body", parts.join(" ")));
    const li = el("li");
    li.appendChild(aside);
    this.append(li);
  }

  /** A message the agent sent on its own: filler, proactive or a background answer. */
  proactive(m) {
    const kind = KIND_LABELS[m.kind] ? m.kind : "proactive";
    const li = el("li", `proactive ${kind === "proactive" ? "proactive-kind" : kind}`);
    li.dataset.messageId = m.message_id || "";
    const body = li.appendChild(el("div", "body"));
    body.appendChild(el("span", "label", KIND_LABELS[kind]));
    body.appendChild(el("span", "text", m.text));
    const dismiss = li.appendChild(el("button", "dismiss", "Dismiss"));
    dismiss.type = "button";
    dismiss.setAttribute("aria-label", `Dismiss: ${m.text || ""}`.slice(0, 120));
    dismiss.addEventListener("click", () => {
      this.unanswered = this.unanswered.filter((id) => id !== m.message_id);
      if (m.message_id) this.handlers.dismiss(m.message_id);
      li.remove();
    });
    if (m.message_id && kind !== "filler") this.unanswered.push(m.message_id);
    // A filler fills a pause inside a turn; the rest stand on their own.
    if (kind === "filler" && this.turn) this.append(li, this.turn);
    else {
      this.closeTurn();
      this.append(li);
    }
  }

  /** The newest proactive message nobody reacted to, now taken as answered. */
  takeUnanswered() {
    return this.unanswered.pop() || null;
  }

  /** One live event of the session. */
  event(m) {
    switch (m.type) {
      case "agent_start":
        this.closeTurn();
        break;
      case "message_update":
        if (typeof m.thinking_delta === "string") this.stream("thinking", m.thinking_delta);
        else if (typeof m.text_delta === "string") this.stream("text", m.text_delta);
        break;
      case "tool_execution_start":
        this.toolStart(m.tool_call_id, m.tool_name, m.args);
        break;
      case "tool_execution_end":
        this.toolEnd(m.tool_call_id, m.tool_name, m.args, m.is_error, m.result);
        break;
      case "agent_end": {
        const final = m.final_message || {};
        const streamed = this.turn && this.turn.querySelector(".text");
        if (!streamed && final.content) this.stream("text", final.content);
        if (final.stop_reason === "aborted") this.note("(aborted)");
        this.closeTurn();
        break;
      }
      case "agent_error":
        this.error(m.message || "The model failed.");
        break;
      case "input_rejected":
        this.error(m.message || "The message was refused.");
        break;
      case "inner_thought":
        this.thought(m);
        break;
      case "proactive_message":
        this.proactive(m);
        break;
      case "subagent_event":
        this.subagent(m);
        break;
      default:
        break;
    }
  }

  /** A session's recorded entries (`GET /api/sessions/{id}`), oldest first. */
  history(entries) {
    for (const entry of entries || []) {
      const m = entry.message;
      if (entry.kind !== "message" || !m) continue;
      if (m.role === "user") {
        this.user(m.content);
      } else if (m.role === "assistant") {
        for (const block of m.thinking || []) {
          if (block.text) this.stream("thinking", block.text);
        }
        if (m.content) this.stream("text", m.content);
        for (const call of m.tool_calls || []) this.toolStart(call.id, call.name, call.arguments);
      } else if (m.role === "tool") {
        this.toolEnd(m.tool_call_id, m.tool_name, null, m.is_error, m.content);
      }
    }
    this.closeTurn();
    this.stick();
  }
}
