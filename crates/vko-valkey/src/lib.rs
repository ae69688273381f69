//! Typed calls to Valkey and Sentinel, and pure parsers for their replies.
