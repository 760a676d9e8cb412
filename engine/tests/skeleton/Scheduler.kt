package com.example.jobs

import java.time.Duration
import java.time.Instant
import java.util.PriorityQueue
import java.util.concurrent.locks.ReentrantLock
import java.util.logging.Logger
import kotlin.concurrent.withLock

enum class TaskState { SCHEDULED, RUNNING, SUCCEEDED, FAILED, CANCELLED }

data class ScheduledTask(
    val id: String,
    val runAt: Instant,
    val interval: Duration?,
    val action: () -> Unit,
    var state: TaskState = TaskState.SCHEDULED,
    var failures: Int = 0,
)

interface Clock {
    fun now(): Instant
}

class Scheduler(private val clock: Clock, private val maxFailures: Int = 3) {
    private val log = Logger.getLogger(Scheduler::class.java.name)
    private val lock = ReentrantLock()
    private val queue = PriorityQueue<ScheduledTask>(compareBy { it.runAt })
    private val tasksById = mutableMapOf<String, ScheduledTask>()

    val pendingCount: Int
        get() = lock.withLock { queue.size }

    fun isScheduled(id: String): Boolean {
        val task = tasksById[id]
        return task?.state == TaskState.SCHEDULED
    }

    fun schedule(id: String, delay: Duration, interval: Duration? = null, action: () -> Unit) {
        lock.withLock {
            require(id !in tasksById) { "task $id already scheduled" }
            val task = ScheduledTask(id, clock.now().plus(delay), interval, action)
            tasksById[id] = task
            queue.add(task)
        }
    }

    fun cancel(id: String): Boolean = lock.withLock {
        val task = tasksById.remove(id) ?: return@withLock false
        task.state = TaskState.CANCELLED
        queue.remove(task)
    }

    fun runDue(): Int {
        val tickInstant = clock.now()
        val dueBatch = mutableListOf<ScheduledTask>()
        lock.withLock {
            while (queue.isNotEmpty() && !queue.peek().runAt.isAfter(tickInstant)) {
                val head = queue.poll()
                head.state = TaskState.RUNNING
                dueBatch.add(head)
            }
        }
        var completedRuns = 0
        for (task in dueBatch) {
            val outcome = runCatching { task.action() }
            lock.withLock {
                if (outcome.isSuccess) {
                    completedRuns++
                    task.failures = 0
                    task.state = TaskState.SUCCEEDED
                } else {
                    task.failures++
                    task.state = TaskState.FAILED
                    log.warning("task ${task.id} failed (${task.failures}): ${outcome.exceptionOrNull()}")
                }
                reschedule(task, tickInstant)
            }
        }
        return completedRuns
    }

    private fun reschedule(task: ScheduledTask, from: Instant) {
        val every = task.interval
        if (every == null || task.failures >= maxFailures || task.id !in tasksById) {
            tasksById.remove(task.id)
            return
        }
        val backoffFactor = if (task.failures == 0) 1L else 1L shl task.failures.coerceAtMost(6)
        val nextRunInstant = from.plus(every.multipliedBy(backoffFactor))
        val updatedTask = task.copy(runAt = nextRunInstant, state = TaskState.SCHEDULED)
        tasksById[task.id] = updatedTask
        queue.add(updatedTask)
        log.fine("task ${task.id} next at $nextRunInstant (backoff x$backoffFactor)")
        if (queue.size > 10_000) {
            log.warning("scheduler queue is large: ${queue.size} tasks pending")
        }
        if (task.failures > 0) {
            log.info("task ${task.id} retrying after ${task.failures} failures")
        }
    }

    fun shutdown(): List<String> {
        lock.withLock {
            val abandoned = queue.map { it.id }
            queue.clear()
            tasksById.clear()
            return abandoned
        }
    }
}
