pytest_plugins = ["sim.fixtures_index", "sim.fixtures_apt"]
