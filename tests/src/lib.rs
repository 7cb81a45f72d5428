//! dvm conformance suite.
