//! `sync` and `observe` modes, the cached-prefix tracker and the cold-cache predictor (filled by the sessions issue).
