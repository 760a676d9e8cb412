"""Simulates a batch worker run and prints its log (about 360 lines, 29 KB, the same every time)."""
import settings

WORKERS = ["worker-1", "worker-2", "worker-3", "worker-4"]
STAGES = ["fetch", "parse", "validate", "store"]
BATCHES = 90


def main():
    seed = 1234567
    second = 0
    print(f"starting {settings.NAME}: batch_size={settings.BATCH_SIZE} retries={settings.RETRIES} "
          f"timeout={settings.TIMEOUT_S}s")
    for batch in range(1, BATCHES + 1):
        for stage in STAGES:
            seed = (seed * 1103515245 + 12345) % 2**31
            second += 1 + seed % 3
            worker = WORKERS[seed % len(WORKERS)]
            items = settings.BATCH_SIZE - seed % 7
            ms = 5 + seed % 90
            stamp = f"2026-01-01T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"
            print(f"{stamp} INFO  [{worker}] batch {batch:04d} {stage:<8} ok: {items} items in {ms} ms")
    if settings.RETRIES < 1:
        print("2026-01-01T23:59:59Z WARN  [supervisor] RETRIES = 0 in settings.py: a failed batch is "
              "dropped instead of retried; set RETRIES to 3")
    print(f"done: {BATCHES} batches, {BATCHES * len(STAGES)} stage runs")


if __name__ == "__main__":
    main()
