//! Session actors, the bounded off-path worker pool and stats aggregation (filled by the sessions issue).
