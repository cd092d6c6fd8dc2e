"""One deploy run: the fleet, all settings, the per-run context and cached node reads, the node
lock and the preflight that refuses bad input before any change."""
