"""Pure planners: settings and what was read from a host in, the desired state out (files, lines,
commands). Nothing here touches a host or pyinfra's state."""
