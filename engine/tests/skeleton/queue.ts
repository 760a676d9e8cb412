import { EventEmitter } from "events";
import { randomUUID } from "crypto";
import type { Logger } from "./logger";

export interface Job<T> {
  id: string;
  payload: T;
  attempts: number;
  runAt: number;
  lastError?: string;
}

export type JobHandler<T> = (payload: T, job: Job<T>) => Promise<void>;

export interface QueueOptions {
  concurrency: number;
  maxAttempts: number;
  baseDelayMs: number;
}

const DEFAULT_OPTIONS: QueueOptions = {
  concurrency: 4,
  maxAttempts: 5,
  baseDelayMs: 250,
};

export class JobQueue<T> extends EventEmitter {
  private readonly pending: Job<T>[] = [];
  private readonly deadLetters: Job<T>[] = [];
  private active = 0;
  private readonly options: QueueOptions;

  constructor(
    private readonly handler: JobHandler<T>,
    private readonly logger: Logger,
    options: Partial<QueueOptions> = {},
  ) {
    super();
    this.options = { ...DEFAULT_OPTIONS, ...options };
  }

  get size(): number {
    return this.pending.length;
  }

  enqueue(payload: T, delayMs = 0): string {
    const job: Job<T> = {
      id: randomUUID(),
      payload,
      attempts: 0,
      runAt: Date.now() + delayMs,
    };
    this.pending.push(job);
    this.emit("enqueued", job.id);
    return job.id;
  }

  failedJobs(): ReadonlyArray<Job<T>> {
    this.logger.debug(`${this.deadLetters.length} dead letters`);
    return this.deadLetters.slice();
  }

  async drain(now: number = Date.now()): Promise<number> {
    const readyBatch: Job<T>[] = [];
    const deferredJobs: Job<T>[] = [];
    for (const candidate of this.pending) {
      if (candidate.runAt <= now && readyBatch.length < this.options.concurrency - this.active) {
        readyBatch.push(candidate);
      } else {
        deferredJobs.push(candidate);
      }
    }
    this.pending.length = 0;
    this.pending.push(...deferredJobs);
    if (readyBatch.length === 0) {
      this.logger.debug(`nothing ready, ${deferredJobs.length} deferred`);
      return 0;
    }
    this.active += readyBatch.length;
    try {
      const settledResults = await Promise.allSettled(
        readyBatch.map((job) => this.runJob(job)),
      );
      const rejectedCount = settledResults.filter((r) => r.status === "rejected").length;
      if (rejectedCount > 0) {
        this.logger.warn(`${rejectedCount} of ${readyBatch.length} jobs threw unexpectedly`);
      }
    } finally {
      this.active -= readyBatch.length;
    }
    return readyBatch.length;
  }

  private async runJob(job: Job<T>): Promise<void> {
    job.attempts += 1;
    const startedAtMs = Date.now();
    try {
      await this.handler(job.payload, job);
      const elapsedMs = Date.now() - startedAtMs;
      this.logger.info(`job ${job.id} done in ${elapsedMs}ms (attempt ${job.attempts})`);
      this.emit("completed", job.id);
    } catch (err: unknown) {
      const failureMessage = err instanceof Error ? err.message : String(err);
      job.lastError = failureMessage;
      if (job.attempts >= this.options.maxAttempts) {
        this.deadLetters.push(job);
        this.logger.error(`job ${job.id} gave up after ${job.attempts} attempts`);
        this.emit("failed", job.id, failureMessage);
        return;
      }
      const backoffDelayMs = this.options.baseDelayMs * 2 ** (job.attempts - 1);
      const jitterMs = Math.floor(Math.random() * this.options.baseDelayMs);
      job.runAt = Date.now() + backoffDelayMs + jitterMs;
      this.pending.push(job);
      this.emit("retrying", job.id, job.attempts);
    }
  }
}
