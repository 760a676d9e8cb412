"""Settings for the batch worker that gen.py simulates."""

NAME = "ingest-worker"
BATCH_SIZE = 64
RETRIES = 0
TIMEOUT_S = 30
