"""What one pyinfra run keeps and shares: the run context (settings, verdicts, the fact cache) and
the node's and containers' cached reads that the operations use."""
