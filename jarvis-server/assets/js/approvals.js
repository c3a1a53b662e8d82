// Approval requests in the Jarvis HUD (R-WEB-7): every screen attached to
// a session shows the same dialog; the first answer wins, and every screen
// closes it when `approval_resolved` arrives, whoever answered.

/** The approval dialog of one screen. */
export class Approvals {
  /**
   * @param {HTMLDialogElement} dialog
   * @param {{send: (message: object) => boolean, name: (agentId: string) => string}} handlers
   */
  constructor(dialog, handlers) {
    this.dialog = dialog;
    this.handlers = handlers;
    this.pending = new Map(); // request_id → request, oldest first
    this.answered = new Set();
    this.what = dialog.querySelector("#approval-what");
    this.args = dialog.querySelector("#approval-args");
    this.count = dialog.querySelector("#approval-count");
    this.note = dialog.querySelector("#approval-note");
    this.buttons = [...dialog.querySelectorAll("button[data-decision]")];
    for (const button of this.buttons) {
      button.addEventListener("click", () => this.answer(button.dataset.decision));
    }
    // Escape must not lose a request the turn is waiting on.
    dialog.addEventListener("cancel", (e) => e.preventDefault());
  }

  /** An `approval_request`. */
  request(req) {
    this.pending.set(req.request_id, req);
    this.show();
  }

  /** An `approval_resolved`: the request is gone on every screen. */
  resolved(requestId) {
    this.pending.delete(requestId);
    this.answered.delete(requestId);
    this.show();
  }

  /** Forgets every request (the screen moves to another session). */
  clear() {
    this.pending.clear();
    this.answered.clear();
    this.show();
  }

  current() {
    return this.pending.values().next().value;
  }

  answer(decision) {
    const req = this.current();
    if (!req) return;
    if (this.handlers.send({ type: "approval", request_id: req.request_id, decision })) {
      this.answered.add(req.request_id);
      this.show();
    } else {
      this.note.textContent = "Not connected; try again in a moment.";
    }
  }

  show() {
    const req = this.current();
    if (!req) {
      if (this.dialog.open) this.dialog.close();
      return;
    }
    const what = document.createDocumentFragment();
    what.append(`${this.handlers.name(req.agent_id)} wants to run `);
    const tool = document.createElement("span");
    tool.className = "tool-name";
    tool.textContent = req.tool_name;
    what.append(tool);
    this.what.replaceChildren(what);
    let args;
    try {
      args = JSON.stringify(req.args, null, 2);
    } catch (_) {
      args = String(req.args);
    }
    this.args.textContent = args;
    this.count.textContent = this.pending.size > 1 ? `1 of ${this.pending.size}` : "";
    const sent = this.answered.has(req.request_id);
    for (const button of this.buttons) button.disabled = sent;
    this.note.textContent = sent ? "Answer sent…" : "";
    this.dialog.dataset.request = req.request_id;
    if (!this.dialog.open) {
      this.dialog.showModal();
      this.buttons[0].focus();
    }
  }
}
