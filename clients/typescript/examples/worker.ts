/**
 * A lockstep worker in TypeScript: it implements the task protocol of docs/workers.md over HTTP and
 * never sees the database.
 *
 *   LOCKSTEP_URL=http://127.0.0.1:8080 LOCKSTEP_API_KEY=... npx tsx examples/worker.ts
 *
 * Poll (long poll) for tasks of the activities it knows; while one runs, heartbeat its lease every third
 * of the lease; report the result with the task's attempt and fencing token: complete, or fail (retryable
 * unless the activity says otherwise). A lost lease (heartbeat 409) or a stale report (409 stale_result)
 * means another attempt owns the task: drop it. Network errors and 503s are retried with backoff; a
 * report is safe to repeat (the same attempt and token). SIGTERM/SIGINT drain: no new polls, the tasks
 * in hand finish and report, then the process exits. WORKER_MAX_TASKS=N exits after N tasks and
 * WORKER_LEASE_SECONDS sets the lease (default 30; the tests use short ones).
 */
import { Lockstep, LockstepError, type TaskView } from "../src/index.js";

/** Thrown by an activity for a failure that retrying cannot fix (the step's retry policy is skipped). */
export class NonRetryable extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Activity = (input: unknown, task: TaskView, signal: AbortSignal) => Promise<unknown>;

const activities: Record<string, Activity> = {
  "greet": async (input) => {
    const name = (input as { name?: unknown } | null)?.name;
    if (typeof name !== "string") throw new NonRetryable("BadInput", "greet needs input.name (a string)");
    return { greeting: `hello, ${name}` };
  },
  // Fails its first attempt (retryably), succeeds on the next: shows fail and the step's retry policy.
  // The success takes FLAKY_MS (default 0): longer than the lease, it lives on heartbeats alone.
  "flaky": async (input, task) => {
    if (task.attempt === 1) throw new Error("a transient failure (the first attempt always fails)");
    await sleep(Number(process.env.FLAKY_MS ?? "0"));
    return { echoed: input, attempt: task.attempt };
  },
};

const baseUrl = process.env.LOCKSTEP_URL ?? "http://127.0.0.1:8080";
const apiKey = process.env.LOCKSTEP_API_KEY;
if (!apiKey) {
  console.error("set LOCKSTEP_API_KEY to a worker's API key (lockstep users create ... --role worker)");
  process.exit(2);
}
const maxTasks = Number(process.env.WORKER_MAX_TASKS ?? "0");
const leaseSeconds = Number(process.env.WORKER_LEASE_SECONDS ?? "30");
const client = new Lockstep({ baseUrl, apiKey });
// WORKER_ID names a slot one live worker fills at a time (a pod ordinal): restarted under it, the worker
// hands back its dead predecessor's leases at start-up. Without it, a made-up id has no predecessor.
const workerId = process.env.WORKER_ID ?? `ts-${process.pid}`;
let draining = false;
let done = 0;

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.on(signal, () => {
    console.log(`${signal}: draining (no new polls; tasks in hand finish)`);
    draining = true;
  });
}

/** Retry what may succeed later: a network error, 503 or 429 (with backoff, capped at 5 s). */
async function retrying<T>(what: string, call: () => Promise<T>): Promise<T> {
  for (let delay = 200; ; delay = Math.min(delay * 2, 5000)) {
    try {
      return await call();
    } catch (err) {
      const transient = !(err instanceof LockstepError) || err.transient;
      if (!transient) throw err;
      console.warn(`${what}: ${err instanceof Error ? err.message : String(err)}; retrying in ${delay} ms`);
      await sleep(delay);
    }
  }
}

async function work(task: TaskView): Promise<void> {
  const activity = activities[task.activity];
  const lost = new AbortController();
  let beats = 0;
  const beat = setInterval(() => {
    client.heartbeat(task, leaseSeconds).then(
      (held) => {
        if (held) beats += 1;
        else lost.abort();
      },
      () => undefined, // a missed beat is retried by the next one; the lease outlives two of them
    );
  }, (leaseSeconds * 1000) / 3);
  try {
    let outcome;
    try {
      if (!activity) throw new NonRetryable("UnknownActivity", `this worker has no activity ${task.activity}`);
      const output = await activity(task.input, task, lost.signal);
      if (lost.signal.aborted) return; // another attempt owns the task now: report nothing
      outcome = await retrying("complete", () => client.complete(task, output));
    } catch (err) {
      if (lost.signal.aborted) return;
      if (err instanceof LockstepError && !err.transient) throw err;
      const code = err instanceof NonRetryable ? err.code : err instanceof Error ? err.name : "Error";
      const message = err instanceof Error ? err.message : String(err);
      const retryable = !(err instanceof NonRetryable);
      outcome = await retrying("fail", () => client.fail(task, { code, message }, retryable));
    }
    console.log(`${task.task_id} (${task.activity}, attempt ${task.attempt}): ${outcome}, ${beats} heartbeats`);
  } finally {
    clearInterval(beat);
  }
}

async function main(): Promise<void> {
  if (process.env.WORKER_ID) {
    const abandoned = await retrying("abandon", () => client.abandon(workerId));
    if (abandoned) console.log(`abandoned ${abandoned} lease(s) of a previous ${workerId}: retried now`);
  }
  console.log(`worker ${workerId} polling ${baseUrl} for ${Object.keys(activities).join(", ")}`);
  while (!draining && (maxTasks === 0 || done < maxTasks)) {
    const tasks = await retrying("poll", () =>
      client.poll({
        activities: Object.keys(activities),
        max_tasks: 4,
        wait_seconds: 5,
        lease_seconds: leaseSeconds,
        worker_id: workerId,
      }),
    );
    await Promise.all(tasks.map(work));
    done += tasks.length;
  }
  console.log(`worker ${workerId} stopped after ${done} tasks`);
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
