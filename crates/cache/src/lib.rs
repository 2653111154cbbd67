//! berth-cache
