// Types of the Solid Objects realtime client (realtime.js), protocol 1.

export declare const PROTOCOL: 1;

/** [incarnation, revision]: ordered, an incarnation first. */
export type Position = [number, number];

export type JsonValue =
  | null
  | boolean
  | number
  | string
  | JsonValue[]
  | { [key: string]: JsonValue };

export interface SnapshotFrame {
  v: 1;
  type: "snapshot";
  id: string;
  incarnation: number;
  revision: number;
  exists: boolean;
  values: Record<string, JsonValue>;
  invalidated: string[];
}

export interface ChangeFrame {
  v: 1;
  type: "change";
  id: string;
  incarnation: number;
  revision: number;
  values: Record<string, JsonValue>;
  invalidated: string[];
}

export interface DestroyedFrame {
  v: 1;
  type: "destroyed";
  id: string;
  incarnation: number;
  revision: number;
}

export interface PayloadFrame {
  v: 1;
  type: "payload";
  id: string;
  name: string;
  incarnation: number;
  revision: number;
  payload: JsonValue;
}

export interface ErrorFrame {
  v: 1;
  type: "error";
  id: string | null;
  code:
    | "malformed"
    | "duplicate"
    | "unauthorized"
    | "unknown_actor_type"
    | "not_observable"
    | "unknown_payload"
    | "unsupported_version"
    | "too_many"
    | "payload_failed"
    | "unavailable";
  message: string;
}

export interface View {
  incarnation: number;
  revision: number;
  exists: boolean;
  values: Record<string, JsonValue>;
  /** Names of the value and invalidation observables this update reports. */
  changed: string[];
  kind: "snapshot" | "change" | "destroyed";
}

export interface SubscriptionHandlers {
  onUpdate?: (view: View) => void;
  onPayload?: (name: string, payload: JsonValue, frame: PayloadFrame) => void;
  onError?: (error: Error & { code: ErrorFrame["code"] }) => void;
}

export declare class Subscription {
  readonly ref: string;
  readonly position: Position | null;
  readonly values: Record<string, JsonValue>;
  readonly payloads: Record<string, JsonValue>;
  readonly exists: boolean;
  handlers: SubscriptionHandlers;
  close(): void;
}

export interface ClientOptions {
  /** First reconnect delay in ms (doubles per failed attempt, with jitter). */
  initialDelay?: number;
  maxDelay?: number;
  onError?: (error: Error) => void;
  onStatus?: (
    status: "idle" | "connecting" | "connected" | "disconnected" | "closed",
    code?: number,
  ) => void;
  WebSocket?: typeof WebSocket;
}

export declare function isAfter(a: Position, b: Position | null): boolean;
export declare function endpointUrl(base: string, location?: Location): string;

export declare class RealtimeClient {
  constructor(url: string, options?: ClientOptions);
  readonly status: "idle" | "connecting" | "connected" | "disconnected" | "closed";
  readonly stats: { accepted: number; dropped: number; connects: number };
  connect(): void;
  close(): void;
  subscribe(
    target: { actorType: string; actorId: string; payloads?: string[] },
    handlers?: SubscriptionHandlers,
  ): Subscription;
}

export declare function htmxRefresh(
  subscription: Subscription,
  target: Element | string,
  options?: { observes?: string[] | null; event?: string },
): Subscription;
