# bench/run.py: a deploy with no operation (pyinfra start-up, inventory and connections).
