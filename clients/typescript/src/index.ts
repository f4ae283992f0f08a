/**
 * A small typed wrapper over the generated client (`raw`, openapi-fetch over src/schema.d.ts): runs and
 * the worker task protocol (docs/workers.md). Every error is a LockstepError carrying the server's
 * problem document (RFC 9457); branch on `problem.code`, never on the detail text.
 */
import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type { components, paths } from "./schema.js";
export type Schemas = components["schemas"];
export type Problem = Schemas["Problem"];
export type RunView = Schemas["RunView"];
export type RunStatus = RunView["status"];
export type RunList = Schemas["RunList"];
export type EventView = Schemas["EventView"];
export type EventPage = Schemas["EventPage"];
export type StartResult = Schemas["StartResult"];
export type CancelResult = Schemas["CancelResult"];
export type TaskView = Schemas["TaskView"];
export type PollRequest = Schemas["PollRequest"];
export type ErrorInfo = Schemas["ErrorInfo"];

/** A run's status once it can no longer change. */
export const TERMINAL: ReadonlySet<RunStatus> = new Set<RunStatus>(["completed", "failed", "cancelled"]);

export class LockstepError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem,
  ) {
    super(`${status} ${problem.code}: ${problem.detail}`);
    this.name = "LockstepError";
  }

  /** 503 (the database is unavailable) and 429 (over a limit): the same request may succeed later. */
  get transient(): boolean {
    return this.status === 503 || this.status === 429;
  }
}

export interface LockstepOptions {
  /** e.g. http://127.0.0.1:8080 (no trailing /v1) */
  baseUrl: string;
  /** An API key from `lockstep users create` */
  apiKey: string;
  fetch?: typeof globalThis.fetch;
}

/** What a report (complete or fail) got: accepted, or stale (a newer attempt or lease owns the task). */
export type ReportOutcome = "accepted" | "stale";

interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

function problemOf(response: Response, error: unknown): Problem {
  if (error && typeof error === "object" && "code" in error && "detail" in error) {
    return error as Problem;
  }
  const detail = typeof error === "string" ? error : JSON.stringify(error ?? null);
  return { type: "about:blank", title: response.statusText, status: response.status, detail, code: "http_error" };
}

function unwrap<T>(answer: Answer<T>): T {
  if (answer.error !== undefined || answer.data === undefined) {
    throw new LockstepError(answer.response.status, problemOf(answer.response, answer.error));
  }
  return answer.data;
}

export class Lockstep {
  /** The generated client: every operation of the API, typed from openapi.json. */
  readonly raw: Client<paths>;

  constructor(options: LockstepOptions) {
    this.raw = createClient<paths>({
      baseUrl: options.baseUrl.replace(/\/+$/, ""),
      headers: { Authorization: `Bearer ${options.apiKey}` },
      ...(options.fetch ? { fetch: options.fetch } : {}),
    });
  }

  // --- runs ---------------------------------------------------------------------------------------

  async startRun(
    definition: string,
    input: unknown,
    options: { version?: number; idempotencyKey?: string } = {},
  ): Promise<StartResult> {
    const body: Schemas["StartRequest"] = { definition, input };
    if (options.version !== undefined) body.version = options.version;
    const header = options.idempotencyKey ? { "idempotency-key": options.idempotencyKey } : {};
    return unwrap(await this.raw.POST("/v1/runs", { body, params: { header } }));
  }

  async getRun(runId: string): Promise<RunView> {
    return unwrap(await this.raw.GET("/v1/runs/{run_id}", { params: { path: { run_id: runId } } }));
  }

  async listRuns(query: paths["/v1/runs"]["get"]["parameters"]["query"] = {}): Promise<RunList> {
    return unwrap(await this.raw.GET("/v1/runs", { params: { query } }));
  }

  async cancelRun(runId: string, reason: string): Promise<CancelResult> {
    return unwrap(
      await this.raw.POST("/v1/runs/{run_id}/cancel", { params: { path: { run_id: runId } }, body: { reason } }),
    );
  }

  /** One page of a run's history, oldest first; pass `next_cursor` back as `afterSeq`. */
  async eventPage(runId: string, options: { afterSeq?: number; limit?: number } = {}): Promise<EventPage> {
    const query = { after_seq: options.afterSeq ?? 0, ...(options.limit ? { limit: options.limit } : {}) };
    return unwrap(await this.raw.GET("/v1/runs/{run_id}/events", { params: { path: { run_id: runId }, query } }));
  }

  /** Every event of a run's history so far, page by page. */
  async *events(runId: string, pageSize = 1000): AsyncGenerator<EventView> {
    let afterSeq = 0;
    for (;;) {
      const page = await this.eventPage(runId, { afterSeq, limit: pageSize });
      yield* page.items;
      if (page.next_cursor === null || page.next_cursor === undefined) return;
      afterSeq = page.next_cursor;
    }
  }

  /** Poll a run until it is completed, failed or cancelled (or the timeout passes: a LockstepError). */
  async waitForRun(runId: string, options: { timeoutMs?: number; intervalMs?: number } = {}): Promise<RunView> {
    const deadline = Date.now() + (options.timeoutMs ?? 60_000);
    for (;;) {
      const run = await this.getRun(runId);
      if (TERMINAL.has(run.status)) return run;
      if (Date.now() > deadline) {
        const detail = `run ${runId} is still ${run.status}`;
        throw new LockstepError(408, { type: "about:blank", title: "Timeout", status: 408, detail, code: "timeout" });
      }
      await new Promise((r) => setTimeout(r, options.intervalMs ?? 200));
    }
  }

  // --- the worker task protocol (docs/workers.md) --------------------------------------------------

  /** Long-poll: up to `max_tasks` leased tasks, or none after `wait_seconds`. */
  async poll(request: PollRequest): Promise<TaskView[]> {
    return unwrap(await this.raw.POST("/v1/tasks/poll", { body: request })).tasks;
  }

  /** At start-up under a fixed `worker_id`: give up the leases a dead earlier worker under that id held
   * (retried at once instead of at lease expiry); how many. */
  async abandon(workerId: string): Promise<number> {
    return unwrap(await this.raw.POST("/v1/tasks/abandon", { body: { worker_id: workerId } })).abandoned;
  }

  /** Extend the lease; false when it is lost (409 lease_lost): stop working on the task, report nothing. */
  async heartbeat(task: TaskView, leaseSeconds?: number): Promise<boolean> {
    const body: Schemas["HeartbeatRequest"] = { fencing_token: task.fencing_token };
    if (leaseSeconds !== undefined) body.lease_seconds = leaseSeconds;
    const answer = await this.raw.POST("/v1/tasks/{task_id}/heartbeat", {
      params: { path: { task_id: task.task_id } },
      body,
    });
    if (answer.response.status === 409) return false;
    return unwrap(answer).ok;
  }

  async complete(task: TaskView, output: unknown): Promise<ReportOutcome> {
    return this.report(
      await this.raw.POST("/v1/tasks/{task_id}/complete", {
        params: { path: { task_id: task.task_id } },
        body: { attempt: task.attempt, fencing_token: task.fencing_token, output },
      }),
    );
  }

  async fail(task: TaskView, error: ErrorInfo, retryable = true): Promise<ReportOutcome> {
    return this.report(
      await this.raw.POST("/v1/tasks/{task_id}/fail", {
        params: { path: { task_id: task.task_id } },
        body: { attempt: task.attempt, fencing_token: task.fencing_token, error, retryable },
      }),
    );
  }

  private report(answer: Answer<Schemas["ReportResult"]>): ReportOutcome {
    if (answer.response.status === 409 && problemOf(answer.response, answer.error).code === "stale_result") {
      return "stale";
    }
    return unwrap(answer).outcome;
  }
}
