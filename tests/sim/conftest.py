from sim.fixtures import shared_sim_node, sim_node  # noqa: F401
