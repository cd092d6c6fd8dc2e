"""The start of a deploy or verify run, before any change: the fleet, every host's settings, the
node lock and the preflight that refuses bad input; ``deploy_context.begin`` is the entry point."""
