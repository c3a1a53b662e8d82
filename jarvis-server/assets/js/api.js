// How the Jarvis HUD talks to its server: the REST API (agents, sessions,
// the AGENDA, the system, usage) and one WebSocket per attached session, reopened after a
// dropped connection. The page's token, when the server needs one, travels
// in the cookie that `/?token=…` set.

/** A failed API call, with its HTTP status and the server's error code. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function call(path, init = {}) {
  const response = await fetch(path, {
    credentials: "same-origin",
    ...init,
    headers: { Accept: "application/json", ...(init.headers || {}) },
  });
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) {
    const error = (body && body.error) || {};
    throw new ApiError(response.status, error.code || "http", error.message || `HTTP ${response.status}`);
  }
  return body;
}

/** The REST API (DESIGN.md §5). */
export const api = {
  agents: () => call("/api/agents"),
  sessions: () => call("/api/sessions"),
  session: (id) => call(`/api/sessions/${encodeURIComponent(id)}`),
  createSession: (agent) =>
    call("/api/sessions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ agent }),
    }),
  agenda: () => call("/api/agenda"),
  system: () => call("/api/system"),
  usage: (by) => call(`/api/usage?by=${encodeURIComponent(by)}`),
};

/** Close codes after which reconnecting cannot help. */
const FINAL_CLOSES = new Set([4400, 4401, 4404]);

/** One screen's WebSocket to one session. */
export class Connection {
  /**
   * @param {string} sessionId
   * @param {string} agentId the agent for a session that does not exist yet
   * @param {{message: (m: object) => void, state: (state: string, detail?: string) => void,
   *          reopened: () => void}} handlers
   */
  constructor(sessionId, agentId, handlers) {
    this.sessionId = sessionId;
    this.agentId = agentId;
    this.handlers = handlers;
    this.closed = false;
    this.retry = 0;
    this.opened = false;
    this.open();
  }

  open() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const query = `session_id=${encodeURIComponent(this.sessionId)}&agent=${encodeURIComponent(this.agentId)}`;
    const ws = new WebSocket(`${proto}//${location.host}/ws?${query}`);
    this.ws = ws;
    ws.onopen = () => {
      if (this.closed) return;
      const again = this.opened;
      this.opened = true;
      this.retry = 0;
      this.handlers.state("open");
      if (again) this.handlers.reopened();
    };
    ws.onmessage = (event) => {
      if (this.closed) return;
      let message;
      try {
        message = JSON.parse(event.data);
      } catch (_) {
        return;
      }
      this.handlers.message(message);
    };
    ws.onclose = (event) => {
      if (this.closed) return;
      if (FINAL_CLOSES.has(event.code)) {
        this.handlers.state("refused", `${event.code}`);
        return;
      }
      const wait = Math.min(10000, 500 * 2 ** this.retry++);
      this.handlers.state("reconnecting", `${Math.round(wait / 1000)}`);
      this.timer = setTimeout(() => this.open(), wait);
    };
  }

  /** Sends a client message; false when the socket is not open. */
  send(message) {
    if (this.closed || !this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(message));
    return true;
  }

  /** Closes for good (the screen moves to another session). */
  close() {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.ws) this.ws.close(1000, "moving on");
  }
}
