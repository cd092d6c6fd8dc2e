"""torch.distributed.elastic double: the local agent's worker processes (multiprocessing/api.py)."""
