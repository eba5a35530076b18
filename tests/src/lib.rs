//! Nothing here: the suites live in `tests/`.
