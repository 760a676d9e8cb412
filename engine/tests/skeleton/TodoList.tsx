import React, { useMemo, useState } from "react";
import type { ChangeEvent, FormEvent } from "react";
import { formatDistanceToNow } from "./time";

export interface Todo {
  id: number;
  title: string;
  done: boolean;
  createdAt: Date;
}

type Filter = "all" | "active" | "completed";

export class TodoStore {
  private todos: Todo[] = [];
  private nextId = 1;
  private readonly listeners = new Set<() => void>();

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  all(): Todo[] {
    const ordered = [...this.todos].sort((a, b) => a.id - b.id);
    return ordered;
  }

  add(title: string): Todo {
    const todo = { id: this.nextId++, title: title.trim(), done: false, createdAt: new Date() };
    this.todos = [...this.todos, todo];
    this.notify();
    return todo;
  }

  toggle(id: number): void {
    this.todos = this.todos.map((t) => (t.id === id ? { ...t, done: !t.done } : t));
    this.notify();
  }

  importFromJson(raw: string): number {
    let parsedEntries: unknown;
    try {
      parsedEntries = JSON.parse(raw);
    } catch {
      return 0;
    }
    if (!Array.isArray(parsedEntries)) {
      return 0;
    }
    const knownTitles = new Set(this.todos.map((t) => t.title.toLowerCase()));
    let importedCount = 0;
    for (const entry of parsedEntries) {
      if (typeof entry !== "object" || entry === null || typeof entry.title !== "string") {
        continue;
      }
      const normalizedTitle = entry.title.trim();
      if (normalizedTitle === "" || knownTitles.has(normalizedTitle.toLowerCase())) {
        continue;
      }
      knownTitles.add(normalizedTitle.toLowerCase());
      this.todos.push({
        id: this.nextId++,
        title: normalizedTitle,
        done: Boolean(entry.done),
        createdAt: new Date(entry.createdAt ?? Date.now()),
      });
      importedCount += 1;
    }
    this.notify();
    return importedCount;
  }

  private notify(): void {
    this.listeners.forEach((listener) => listener());
  }
}

export interface TodoListProps {
  store: TodoStore;
  initialFilter?: Filter;
}

export function TodoList({ store, initialFilter = "all" }: TodoListProps) {
  const [draftTitle, setDraftTitle] = useState("");
  const [activeFilter, setActiveFilter] = useState<Filter>(initialFilter);
  const [revision, setRevision] = useState(0);
  const visibleTodos = useMemo(() => {
    const everyTodo = store.all();
    if (activeFilter === "active") return everyTodo.filter((t) => !t.done);
    if (activeFilter === "completed") return everyTodo.filter((t) => t.done);
    return everyTodo;
  }, [store, activeFilter, revision]);
  const remainingCount = visibleTodos.filter((t) => !t.done).length;

  const handleSubmit = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (draftTitle.trim() === "") return;
    store.add(draftTitle);
    setDraftTitle("");
    setRevision((r) => r + 1);
  };

  return (
    <section className="todo-list">
      <form onSubmit={handleSubmit}>
        <input
          value={draftTitle}
          placeholder="What needs doing?"
          onChange={(e: ChangeEvent<HTMLInputElement>) => setDraftTitle(e.target.value)}
        />
      </form>
      <ul>
        {visibleTodos.map((todo) => (
          <li key={todo.id} className={todo.done ? "done" : undefined}>
            <label>
              <input
                type="checkbox"
                checked={todo.done}
                onChange={() => {
                  store.toggle(todo.id);
                  setRevision((r) => r + 1);
                }}
              />
              {todo.title}
            </label>
            <small>{formatDistanceToNow(todo.createdAt)}</small>
          </li>
        ))}
      </ul>
      <footer>
        <span>{remainingCount} left</span>
        {(["all", "active", "completed"] as Filter[]).map((f) => (
          <button key={f} disabled={f === activeFilter} onClick={() => setActiveFilter(f)}>
            {f}
          </button>
        ))}
      </footer>
    </section>
  );
}
