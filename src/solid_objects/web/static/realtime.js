// Solid Objects realtime client (protocol 1): a plain ES module, no build step.
// Served by solid_objects.web.realtime at <mount>/client.js; types in client.d.ts.
// Protocol: docs/realtime.md of the project.

export const PROTOCOL = 1;

/** Close codes after which reconnecting cannot help. */
const FINAL_CLOSE_CODES = new Set([1008, 4001, 4009]);

/** Whether position a = [incarnation, revision] comes strictly after b. */
export function isAfter(a, b) {
  if (b === null) return true;
  return a[0] > b[0] || (a[0] === b[0] && a[1] > b[1]);
}

/** The WebSocket URL of an endpoint mounted at `base` ("/live"), on this page's host. */
export function endpointUrl(base, location = globalThis.location) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}${base.replace(/\/$/, "")}/ws`;
}

class Subscription {
  constructor(client, ref, request, handlers) {
    this.client = client;
    this.ref = ref;
    this.request = request;
    this.handlers = handlers;
    /** [incarnation, revision] of the last accepted snapshot/change/destroyed frame. */
    this.position = null;
    /** The same per payload name. */
    this.payloadPositions = new Map();
    this.values = {};
    this.exists = false;
    this.payloads = {};
    this.closed = false;
  }

  /** Stop receiving; tells the server if the connection is open. */
  close() {
    if (this.closed) return;
    this.closed = true;
    this.client._forget(this);
  }

  _view(frame, changed) {
    return {
      incarnation: this.position[0],
      revision: this.position[1],
      exists: this.exists,
      values: { ...this.values },
      changed,
      kind: frame.type,
    };
  }

  /** Apply one frame; stale and duplicate revisions are dropped here. */
  _receive(frame) {
    const position = [frame.incarnation, frame.revision];
    if (frame.type === "payload") {
      const last = this.payloadPositions.get(frame.name) ?? null;
      if (!isAfter(position, last)) return false;
      this.payloadPositions.set(frame.name, position);
      this.payloads[frame.name] = frame.payload;
      this.handlers.onPayload?.(frame.name, frame.payload, frame);
      return true;
    }
    if (!isAfter(position, this.position)) return false;
    // A change belongs to the incarnation it follows; only a snapshot starts a new one.
    if (frame.type === "change" && (this.position === null || position[0] !== this.position[0])) {
      return false;
    }
    this.position = position;
    let changed;
    if (frame.type === "snapshot") {
      this.values = { ...frame.values };
      this.exists = frame.exists;
      changed = [...Object.keys(frame.values), ...frame.invalidated];
    } else if (frame.type === "change") {
      Object.assign(this.values, frame.values);
      this.exists = true;
      changed = [...Object.keys(frame.values), ...frame.invalidated];
    } else if (frame.type === "destroyed") {
      this.values = {};
      this.exists = false;
      changed = [];
    } else {
      return false;
    }
    this.handlers.onUpdate?.(this._view(frame, changed));
    return true;
  }
}

/**
 * One connection to a realtime endpoint, reconnecting with backoff and replaying
 * every subscription when it comes back; fences survive reconnects.
 */
export class RealtimeClient {
  constructor(url, options = {}) {
    this.url = url;
    this.initialDelay = options.initialDelay ?? 250;
    this.maxDelay = options.maxDelay ?? 10000;
    this.onError = options.onError ?? ((error) => console.warn("solid-objects realtime:", error));
    this.onStatus = options.onStatus ?? (() => {});
    this.WebSocket = options.WebSocket ?? globalThis.WebSocket;
    this.subscriptions = new Map();
    this.socket = null;
    this.attempts = 0;
    this.timer = null;
    this.stopped = false;
    this.nextRef = 1;
    /** Frames accepted and dropped (stale or duplicate), for diagnostics and tests. */
    this.stats = { accepted: 0, dropped: 0, connects: 0 };
    this.status = "idle";
  }

  /** Open the connection (again); called by subscribe() if needed. */
  connect() {
    this.stopped = false;
    if (this.socket !== null) return;
    this._setStatus("connecting");
    const socket = new this.WebSocket(this.url);
    this.socket = socket;
    socket.onopen = () => {
      this.stats.connects += 1;
      for (const sub of this.subscriptions.values()) this._send(sub.request);
    };
    socket.onmessage = (event) => this._onMessage(event.data);
    socket.onclose = (event) => {
      if (this.socket !== socket) return;
      this.socket = null;
      this._setStatus("disconnected", event.code);
      if (this.stopped || FINAL_CLOSE_CODES.has(event.code)) return;
      const delay = Math.min(this.maxDelay, this.initialDelay * 2 ** this.attempts);
      this.attempts += 1;
      this.timer = setTimeout(() => {
        this.timer = null;
        this.connect();
      }, delay * (0.5 + Math.random() / 2));
    };
    socket.onerror = () => {};
  }

  /** Close for good (no reconnect). */
  close() {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const socket = this.socket;
    this.socket = null;
    if (socket !== null) socket.close(1000);
    this._setStatus("closed");
  }

  /**
   * Follow an actor: `handlers.onUpdate(view)` for each accepted snapshot, change or
   * destroy, `handlers.onPayload(name, payload)` for personalized payloads,
   * `handlers.onError(error)` for this subscription's errors (e.g. unauthorized).
   */
  subscribe({ actorType, actorId, payloads = [] }, handlers = {}) {
    const ref = `s${this.nextRef++}`;
    const request = {
      v: PROTOCOL,
      type: "subscribe",
      id: ref,
      actor_type: actorType,
      actor_id: actorId,
      payloads,
    };
    const sub = new Subscription(this, ref, request, handlers);
    this.subscriptions.set(ref, sub);
    if (this.socket === null) this.connect();
    else if (this.socket.readyState === 1) this._send(request);
    return sub;
  }

  _forget(sub) {
    this.subscriptions.delete(sub.ref);
    if (this.socket !== null && this.socket.readyState === 1) {
      this._send({ v: PROTOCOL, type: "unsubscribe", id: sub.ref });
    }
  }

  _send(frame) {
    this.socket.send(JSON.stringify(frame));
  }

  _setStatus(status, code) {
    this.status = status;
    this.onStatus(status, code);
  }

  _onMessage(data) {
    let frame;
    try {
      frame = JSON.parse(data);
    } catch (error) {
      this.onError(new Error("malformed frame from the server"));
      return;
    }
    if (frame === null || typeof frame !== "object" || frame.v !== PROTOCOL) {
      this.onError(new Error("frame of an unknown protocol version"));
      return;
    }
    if (frame.type === "welcome") {
      this.attempts = 0;
      this._setStatus("connected");
      return;
    }
    const sub = frame.id == null ? undefined : this.subscriptions.get(frame.id);
    if (frame.type === "error") {
      const error = Object.assign(new Error(frame.message), { code: frame.code });
      if (sub !== undefined && sub.handlers.onError) sub.handlers.onError(error);
      else this.onError(error);
      return;
    }
    if (sub === undefined) return; // unsubscribed meanwhile
    if (sub._receive(frame)) this.stats.accepted += 1;
    else this.stats.dropped += 1;
  }
}

/**
 * Refresh an htmx fragment when the subscription's observables change: triggers
 * `event` ("solid:changed") on `target` (an element or a selector), whose
 * `hx-trigger` names it. With `observes`, only changes of those names trigger.
 */
export function htmxRefresh(subscription, target, { observes = null, event = "solid:changed" } = {}) {
  const previous = subscription.handlers.onUpdate;
  subscription.handlers.onUpdate = (view) => {
    previous?.(view);
    if (observes !== null && !view.changed.some((name) => observes.includes(name))) return;
    const element = typeof target === "string" ? document.querySelector(target) : target;
    if (element === null) return;
    if (globalThis.htmx) globalThis.htmx.trigger(element, event, view);
    else element.dispatchEvent(new CustomEvent(event, { detail: view }));
  };
  return subscription;
}
